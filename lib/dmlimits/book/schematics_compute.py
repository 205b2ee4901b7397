"""Explanatory pictures of one GPU's compute: a matmul's tiles through the memory hierarchy, the
roofline of the matmul model, and pipeline schedules drawn large.

Each picture is drawn from the objects the chapters compute with (a
:class:`~dmlimits.core.scenario.Scenario`, a matmul's shard and nanobatch, a pipeline's
degrees), through the functions of :mod:`dmlimits.costs.matmul` and
:mod:`dmlimits.costs.pipeline`, so that a changed assumption redraws it.  Each drawing has a
companion, ``*_alt``, that says in one or two sentences what it shows, with the same values; the
chapters glue it into the figure's caption, so that a reader who cannot see the picture still
gets its numbers.

The figures are laid out for the book's column (755 pixels): 7 inches wide, with no text
smaller than :data:`MIN_FONT` points, which shows at about that size on the page
(``figures.DPI`` pixels per inch, scaled to the column).
"""

from __future__ import annotations

from typing import Any

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch, Patch, Rectangle

from dmlimits.book.figures import PALETTE
from dmlimits.book.glue import quantity
from dmlimits.core import checks
from dmlimits.core.scenario import Scenario
from dmlimits.costs import matmul
from dmlimits.costs import pipeline as ppm
from dmlimits.costs.pipeline import Schedule

#: Width of every figure of this module, in inches: the book's column at ``figures.DPI``.
WIDTH = 7.0
#: The smallest font of these figures, in points (about the size it shows at in the column).
MIN_FONT = 10.0
#: Font of panel titles and level names, in points.
TITLE_FONT = 11.0

KiB, MiB = 2**10, 2**20


def _bytes(value: float) -> str:
    """A capacity as the matmul chapter writes it: GB for HBM, MiB or KiB on the chip."""
    if value >= 1e9:
        return f"{value / 1e9:.3g} GB"
    if value >= MiB:
        return f"{value / MiB:.3g} MiB"
    return f"{value / KiB:.3g} KiB"


def _tflops(value: float) -> str:
    """A FLOP rate in TFLOP/s, as the chapters write the peak (never a power of ten)."""
    return f"{value / 1e12:,.4g} TFLOP/s"


def _whole(x: float) -> bool:
    return abs(x - round(x)) < 1e-6


def _words(x: float) -> str:
    """A tile side in words: whole numbers as they are, the model's fractional sides as about."""
    return f"{x:,.0f}" if _whole(x) else f"≈{x:,.0f}"


def _shape(rows: float, cols: float) -> str:
    """``rows × cols`` in words, with one "≈" in front when either side is fractional."""
    about = "" if _whole(rows) and _whole(cols) else "≈"
    return f"{about}{rows:,.0f} × {cols:,.0f}"


# --- 1. A matmul's tiles through the memory hierarchy ---------------------------------------
#: The operands of each kind of matmul: the weight-shaped operand (``d1 x d2``), the one of
#: ``b`` columns multiplied into it, and the result; ``A x B = C`` in the figure.
OPERANDS = {
    "forward": ("A: weights W", "B: input X", "C: output Y"),
    "activation-grad": ("A: weights Wᵀ", "B: gradient dY", "C: gradient dX"),
    "weight-grad": ("A: gradient dY", "B: input X", "C: weight gradient dW"),
}


def hierarchy_levels(scn: Scenario, d1: Any, d2: Any, b: Any) -> list[dict[str, Any]]:
    """The levels a ``d1 x d2`` shard's matmul on ``b`` tokens passes through, top to bottom,
    as :func:`~dmlimits.costs.matmul.tiling` and :func:`~dmlimits.costs.matmul.memory_levels`
    give them for ``scn``'s GPU.

    Each level: ``name``; ``capacity`` (the usable bytes the model lets tiles use there, or the
    whole HBM); ``capacity_note`` (what the capacity is); ``height`` and ``width`` of the weight
    tile that level holds (the whole shard in HBM); ``feed`` (the bandwidth, byte/s, at which the
    model moves data from the level above into this one, and its name; ``None`` for HBM);
    ``resident`` (whether the weights and their gradients stay here, so that nothing moves for
    them above).  With distributed shared memory (Hopper) the L2-SM boundary is tiled as if all
    SMs' registers were one store, and a level of one SM's registers follows."""
    levels = matmul.memory_levels(scn)
    tiles = matmul.tiling(scn, d1, d2)
    streamed = matmul.weights_streamed(scn, d1, d2)
    multicast = "sm-sm" in tiles
    h1, h2 = float(d1), float(d2)
    out = [{
        "name": "HBM", "capacity": float(scn["hardware.hbm_capacity"]),
        "capacity_note": "capacity", "height": h1, "width": h2, "feed": None,
        "resident": False,
    }]  # fmt: skip
    shared = (levels["shared_bandwidth"], "shared memory")
    names = {
        "hbm-l2": ("L2 cache", levels["l2_usable"], "usable",
                   (levels["hbm_bandwidth"], "HBM"), not streamed["hbm"]),
        "l2-sm": (("registers of all SMs" if multicast else "registers of one SM"),
                  levels["all_registers_usable" if multicast else "sm_registers_usable"],
                  "usable" + (", pooled by multicast" if multicast else ""),
                  (levels["l2_bandwidth"], "L2"), streamed["hbm"] and not streamed["l2"]),
        "sm-sm": ("registers of one SM", levels["sm_registers_usable"],
                  "usable", shared, False),
        "shared-registers": (
            "one processing block" if scn["hardware.tensor_memory_per_sm"] == 0
            else _tensor_memory(int(scn["hardware.mma_sms"])),
            levels["accumulator_tile_usable"], "usable, the accumulators",
            shared, False),
    }  # fmt: skip
    for key, tile in tiles.items():
        name, room, note, feed, resident = names[key]
        out.append({"name": name, "capacity": room, "capacity_note": note,
                    "height": tile["height"], "width": tile["width"], "feed": feed,
                    "resident": resident})  # fmt: skip
    return out


def _side_inches(words: float) -> float:
    """A tile's side, drawn on a logarithmic scale: 8 words (the padding multiple) is a sliver,
    16,384 words a little under a row's height."""
    return float(np.clip(0.05 * (np.log2(max(words, 1.0)) - 1.5), 0.04, 0.66))


def _tensor_memory(sms: int) -> str:
    """The level where a Blackwell tile accumulates: the tensor memory of the SMs that one
    tensor-core instruction spans."""
    return "tensor memory of one SM" if sms == 1 else f"tensor memory of {sms} SMs"


def _tile_shapes(kind: str, height: float, width: float, b: float) -> list[tuple[float, float]]:
    """(rows, columns) of A, B and C for a weight tile of ``height x width`` words."""
    if kind == "weight-grad":
        return [(height, b), (width, b), (height, width)]
    return [(height, width), (width, b), (height, b)]


def memory_tiles(scn: Scenario, d1: Any, d2: Any, b: Any, kind: str = "forward") -> Figure:
    """Which tile of each operand of one matmul lives at each level of ``scn``'s GPU.

    One row per level of :func:`hierarchy_levels` (HBM at the top, the processing block's
    registers at the bottom): on the left the level, the usable bytes the model gives its tiles
    and, on the arrow from the level above, the bandwidth at which the model moves data into it;
    on the right the tiles of ``A x B = C`` (``A`` the ``d1 x d2`` weight-shaped operand,
    ``B`` the ``b``-column one, ``C`` the result; :data:`OPERANDS` names them for ``kind``),
    with their sides in words, drawn to their shape (clipped where a tile is very thin) and
    shrinking with their area.  The model has no bandwidth for the registers and no capacity
    for shared memory, and the drawing says so instead of inventing them."""
    kind = matmul.check_kind(kind)
    nb = float(checks.numbers("b", b, strict=True))
    rows = hierarchy_levels(scn, d1, d2, nb)
    labels = OPERANDS[kind]
    pitch, box_h, top = 1.1, 0.62, 0.95
    height = top + pitch * len(rows) + 0.45
    width = WIDTH - 0.2  # the saved PNG adds a margin of a tenth of an inch on each side
    fig = plt.figure(figsize=(width, height))
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(0, width)
    ax.set_ylim(0, height)
    ax.set_axis_off()
    colours = (PALETTE[0], PALETTE[2], PALETTE[1])
    slot_x = (3.75, 4.9, 6.05)  # centres of the A, B and C columns
    ax.text(0.1, height - 0.22, f"{scn.gpu_label}: one {kind} matmul, b = {nb:,.0f} tokens",
            ha="left", va="center", fontsize=TITLE_FONT, fontweight="bold")  # fmt: skip
    for x, label, colour in zip(slot_x, labels, colours, strict=True):
        ax.text(x, height - 0.62, label, ha="center", va="center", fontsize=MIN_FONT,
                color=colour, fontweight="bold")  # fmt: skip
    for i, level in enumerate(rows):
        yc = height - top - pitch * i - box_h / 2
        ax.add_patch(FancyBboxPatch(
            (0.1, yc - box_h / 2), 2.85, box_h, boxstyle="round,pad=0.02,rounding_size=0.06",
            facecolor="#eef2f6", edgecolor=PALETTE[6], linewidth=0.8))  # fmt: skip
        ax.text(0.2, yc + 0.13, level["name"], ha="left", va="center", fontsize=TITLE_FONT,
                fontweight="bold")  # fmt: skip
        ax.text(0.2, yc - 0.15, f"{_bytes(level['capacity'])} {level['capacity_note']}",
                ha="left", va="center", fontsize=MIN_FONT)  # fmt: skip
        if level["feed"] is not None:
            bw, source = level["feed"]
            y0, y1 = yc + pitch - box_h / 2 - 0.02, yc + box_h / 2 + 0.02
            ax.add_patch(FancyArrowPatch((0.45, y0), (0.45, y1), arrowstyle="-|>",
                                         mutation_scale=12, color=PALETTE[6], lw=1.2))  # fmt: skip
            ax.text(0.62, (y0 + y1) / 2, f"from {source} at {quantity(bw, 'byte/s')}",
                    ha="left", va="center", fontsize=MIN_FONT, color=PALETTE[6])  # fmt: skip
        if level["resident"]:
            ax.text(3.3, yc + box_h / 2 + 0.05, "weights stay here", ha="left", va="bottom",
                    fontsize=MIN_FONT, color=PALETTE[3])  # fmt: skip
        shapes = _tile_shapes(kind, level["height"], level["width"], nb)
        for x, (r, c), colour in zip(slot_x, shapes, colours, strict=True):
            w, h = _side_inches(c), _side_inches(r)
            ax.add_patch(Rectangle((x - w / 2, yc + 0.1 - h / 2), w, h, facecolor=colour,
                                   alpha=0.85, edgecolor="white"))  # fmt: skip
            ax.text(x, yc - box_h / 2 - 0.1, _shape(r, c), ha="center",
                    va="center", fontsize=MIN_FONT)  # fmt: skip
    ax.text(0.1, 0.22, "Tile sides in words (rows × columns), drawn on a logarithmic scale.\n"
            "The model gives shared memory no capacity (it only stages tiles) and the\n"
            "registers no bandwidth, so neither is shown.", ha="left", va="center",
            fontsize=MIN_FONT, color=PALETTE[6], linespacing=1.25)  # fmt: skip
    return fig


def memory_tiles_alt(scn: Scenario, d1: Any, d2: Any, b: Any, kind: str = "forward") -> str:
    """What :func:`memory_tiles` shows, with its values, in sentences."""
    kind = matmul.check_kind(kind)
    nb = float(checks.numbers("b", b, strict=True))
    rows = hierarchy_levels(scn, d1, d2, nb)
    first = rows[0]
    parts, fed = [], None
    for level in rows[1:]:
        # A level fed as the one above it was is said to be, not given the same clause again.
        feed = (f"fed from {level['feed'][1]} at the same rate" if level["feed"] == fed else
                f"fed from {level['feed'][1]} at {quantity(level['feed'][0], 'byte/s')}")
        fed = level["feed"]
        parts.append(f"{level['name']} ({_bytes(level['capacity'])} {level['capacity_note']}, "
                     f"{feed}) holds a {_shape(level['height'], level['width'])} tile")  # fmt: skip
    resident = [level["name"] for level in rows if level["resident"]]
    stay = (f" The weights and their gradients stay in the {resident[0]}." if resident
            else " The weights stream from HBM.")  # fmt: skip
    return (
        f"A {kind} matmul of a {_shape(first['height'], first['width'])} shard and "
        f"{nb:,.0f} tokens on the {scn.gpu_label}: HBM ({_bytes(first['capacity'])} at "
        f"{quantity(matmul.memory_levels(scn)['hbm_bandwidth'], 'byte/s')}) holds the whole "
        f"shard; " + "; ".join(parts) + "." + stay
    )


# --- 2. The roofline ---------------------------------------------------------------------------
#: Nanobatches placed on the roofline: powers of two from the padding multiple (tokens).
ROOFLINE_NANOBATCHES = tuple(2**k for k in range(3, 14))
#: The kinds of matmul placed on the roofline, and their markers.
ROOFLINE_KINDS = {"forward": "o", "weight-grad": "s"}


def roofline_points(scn: Scenario, d1: Any, d2: Any, nanobatches: Any = ROOFLINE_NANOBATCHES
                    ) -> dict[str, dict[str, np.ndarray]]:  # fmt: skip
    """For each kind of :data:`ROOFLINE_KINDS`, the model's matmuls of a ``d1 x d2`` shard at
    ``nanobatches``: ``b``, ``intensity`` (useful FLOP per byte of HBM traffic,
    :func:`~dmlimits.costs.matmul.arithmetic_intensity`) and ``flops`` (useful FLOP/s, the
    efficiency of :func:`~dmlimits.costs.matmul.matmul_efficiency` times the peak)."""
    nb = np.atleast_1d(checks.numbers("nanobatches", nanobatches, strict=True))
    out = {}
    for kind in ROOFLINE_KINDS:
        eff = np.broadcast_to(matmul.matmul_efficiency(scn, d1, d2, nb, kind), nb.shape)
        ai = np.broadcast_to(matmul.arithmetic_intensity(scn, d1, d2, nb, kind)["hbm"], nb.shape)
        out[kind] = {"b": nb, "intensity": np.array(ai), "flops": eff * scn.peak_flops}
    return out


def ridge_point(scn: Scenario) -> float:
    """The arithmetic intensity (FLOP per byte) at which the HBM roof meets the derated peak:
    :func:`~dmlimits.costs.matmul.machine_balance` at HBM."""
    return float(matmul.machine_balance(scn)["hbm"])


def roofline(scn: Scenario, d1: Any, d2: Any, nanobatches: Any = ROOFLINE_NANOBATCHES) -> Figure:
    """Attainable FLOP/s against arithmetic intensity at HBM for ``scn``'s GPU: the slope of HBM
    bandwidth, the peak and the derated peak the model's arithmetic runs at, the ridge point
    where they meet, and the model's own matmuls of a ``d1 x d2`` shard at ``nanobatches``
    (:func:`roofline_points`), which sit below the roof where L2, shared memory or the kernel
    latency bind."""
    points = roofline_points(scn, d1, d2, nanobatches)
    bw = float(scn["hardware.hbm_bandwidth"])
    peak = float(scn.peak_flops)
    derated = float(scn["hardware.effective_utilization"]) * peak
    ridge = ridge_point(scn)
    every = np.concatenate([p["intensity"] for p in points.values()])
    lo, hi = min(every.min(), ridge) / 3, max(every.max(), ridge) * 4
    x = np.geomspace(lo, hi, 200)
    fig, ax = plt.subplots(figsize=(WIDTH, 4.6))
    tflops = 1e-12
    ax.plot(x, np.minimum(x * bw, derated) * tflops, color=PALETTE[6], lw=2,
            label="roof: HBM bandwidth × intensity, up to ηF")  # fmt: skip
    ax.plot(x, np.minimum(x * bw, peak) * tflops, color=PALETTE[6], lw=1, ls=":",
            label="peak F")  # fmt: skip
    names = {"forward": "forward", "weight-grad": "weight gradient"}
    for i, (kind, p) in enumerate(points.items()):
        colour = (PALETTE[0], PALETTE[1])[i]
        ax.plot(p["intensity"], p["flops"] * tflops, ROOFLINE_KINDS[kind], color=colour, ms=6,
                ls="-", lw=0.8, label=f"model: {names[kind]}")  # fmt: skip
    p = points["forward"]
    for k in (0, len(p["b"]) - 1):
        ax.annotate(f"b = {int(p['b'][k]):,}", (p["intensity"][k], p["flops"][k] * tflops),
                    xytext=(6, -14), textcoords="offset points", fontsize=MIN_FONT,
                    color=PALETTE[0])  # fmt: skip
    bottom = min(x[0] * bw, p["flops"].min()) * tflops / 2
    ax.vlines(ridge, bottom, derated * tflops, color=PALETTE[2], ls="--", lw=1.2)
    # Right of the ridge and below the flat roof, where no point of the model falls.
    ax.text(ridge * 1.15, derated * tflops / 6, f"ridge point:\n{ridge:,.0f} FLOP/byte",
            ha="left", va="center", fontsize=MIN_FONT, color="#8a5a00")  # fmt: skip
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(bottom, peak * tflops * 3)
    ax.set_xlabel("arithmetic intensity (useful FLOP per byte of HBM traffic)")
    ax.set_ylabel("attainable TFLOP/s")
    ax.set_title(f"{scn.gpu_label}, a {int(d1):,} × {int(d2):,} shard", fontsize=TITLE_FONT)
    ax.legend(loc="upper left", fontsize=MIN_FONT)
    fig.tight_layout()
    return fig


def roofline_alt(scn: Scenario, d1: Any, d2: Any, nanobatches: Any = ROOFLINE_NANOBATCHES) -> str:
    """What :func:`roofline` shows, with its values, in sentences."""
    points = roofline_points(scn, d1, d2, nanobatches)
    f = points["forward"]
    derated = float(scn["hardware.effective_utilization"]) * scn.peak_flops
    return (
        f"On the {scn.gpu_label} the HBM roof rises at "
        f"{quantity(scn['hardware.hbm_bandwidth'], 'byte/s')} until it meets the derated peak "
        f"of {_tflops(derated)} at the ridge point, "
        f"{ridge_point(scn):,.0f} FLOP per byte. The model's forward matmul of the "
        f"{int(d1):,} × {int(d2):,} shard climbs from {f['intensity'][0]:,.1f} FLOP per byte "
        f"and {_tflops(f['flops'][0])} at b = {int(f['b'][0]):,} to "
        f"{f['intensity'][-1]:,.0f} FLOP per byte and {_tflops(f['flops'][-1])} at "
        f"b = {int(f['b'][-1]):,}."
    )


# --- 3. Pipeline schedules, drawn large ------------------------------------------------------
#: The colour of each kind of pass of a schedule: forward, backward, weight gradient.
PASS_COLOURS = {"F": PALETTE[0], "B": PALETTE[1], "W": PALETTE[2]}
#: The colour of idle slots (the bubble).
IDLE_COLOUR = "#d9d9d9"
#: Font of the microbatch numbers inside the bars, in points.
BAR_FONT = 9.5
#: Width of one digit at :data:`BAR_FONT`, in inches (0.636 em in DejaVu Sans, the book's
#: font); a number is written inside its bar only where it fits with room to spare
#: (:data:`LABEL_ROOM` times its width), so that neighbouring numbers never run together.
DIGIT_WIDTH = 0.636 * BAR_FONT / 72
#: How many times a number's width its bar must be for the number to be written in it.
LABEL_ROOM = 1.8
_LEFT, _RIGHT = 0.1, 0.985  # the panels' share of the figure's width


def schedules(n_pp: Any, m: Any, v: Any, steps: Any = 2, backward: Any = ppm.BACKWARD_SLOTS
              ) -> list[tuple[str, Schedule, int]]:  # fmt: skip
    """The three schedules of :func:`pipeline_schedule`, each with its name and the chunk
    slots per stage slot: 1F1B, Megatron-LM's interleaved 1F1B with ``v`` chunks per GPU (one
    flush per step, from :func:`~dmlimits.costs.pipeline.schedule`) and ZB-H2 with ``steps``
    steps back to back (:func:`~dmlimits.costs.pipeline.schedule_zero_bubble`)."""
    p, mm, vv = checks.whole("n_pp", n_pp), checks.whole("m", m), checks.whole("v", v)
    k, b = checks.whole("steps", steps), checks.whole("backward", backward)
    return [
        ("1F1B", ppm.schedule(p, mm, 1, "1f1b", b), 1),
        (f"interleaved 1F1B, v = {vv}", ppm.schedule(p, mm, vv, "interleaved", b), vv),
        ("ZB-H2", ppm.schedule_zero_bubble(p, mm, k), 1),
    ]


def _idle(sched: Schedule, scale: float, copies: int, span: float) -> list[list[tuple]]:
    """Each GPU's idle intervals ``(start, width)`` in stage slots over ``copies`` flushes laid
    end to end (``span`` stage slots each)."""
    out = []
    for gpu in range(sched.n_pp):
        busy = sorted((p.start / scale, p.end / scale) for p in sched.passes if p.gpu == gpu)
        gaps, t = [], 0.0
        for start, end in busy:
            if start > t + 1e-9:
                gaps.append((t, start - t))
            t = max(t, end)
        if span > t + 1e-9:
            gaps.append((t, span - t))
        out.append([(s0 + k * span, w) for k in range(copies) for s0, w in gaps])
    return out


def _draw_passes(ax: Any, sched: Schedule, scale: float, offset: float, first_step: int,
                 slot_inches: float) -> None:  # fmt: skip
    # One collection of bars per GPU and look (kind, pale step, later chunk): a schedule has
    # hundreds of passes, and a collection each would make the figure slow to draw.
    bars: dict[tuple[int, str, bool, bool], list[tuple[float, float]]] = {}
    for p in sched.passes:
        step, micro = divmod(p.micro, sched.m)
        start, width = offset + p.start / scale, (p.end - p.start) / scale
        look = (p.gpu, p.kind, bool((step + first_step) % 2), p.chunk >= sched.n_pp)
        bars.setdefault(look, []).append((start, width))
        label = str(micro + 1)
        if width * slot_inches >= LABEL_ROOM * DIGIT_WIDTH * len(label):
            # Inside its bar, so inside the axes: left out of the layout's measures, which
            # would otherwise size each of hundreds of labels to find the axes' extent.
            ax.text(start + width / 2, p.gpu, label, ha="center", va="center",
                    fontsize=BAR_FONT, color="black" if (step + first_step) % 2 else "white",
                    in_layout=False)  # fmt: skip
    for (gpu, kind, pale, later), ranges in bars.items():
        ax.broken_barh(
            ranges, (gpu - 0.42, 0.84), facecolors=PASS_COLOURS[kind], alpha=0.6 if pale else 1.0,
            edgecolor="white", linewidth=0.6, hatch="///" if later else None,
        )  # fmt: skip


def pipeline_schedule(n_pp: Any, m: Any, v: Any, steps: Any = 2,
                      backward: Any = ppm.BACKWARD_SLOTS) -> Figure:  # fmt: skip
    """Gantt charts of ``steps`` steps on ``N_PP`` GPUs with ``m`` microbatches, one panel each
    for 1F1B, interleaved 1F1B and ZB-H2 (:func:`schedules`), stacked on one time axis in slots
    of one forward pass through a stage.  Bars are passes (forward, backward, weight gradient;
    every second step pale, passes through a GPU's second and later chunks hatched), numbered by
    microbatch where the number fits; grey is idle time, and each panel's title gives its
    bubble, the idle share the library's simulation finds."""
    panels = schedules(n_pp, m, v, steps, backward)
    k = checks.whole("steps", steps)
    p = panels[0][1].n_pp
    spans = [(s.makespan / scale) * (1 if s.steps > 1 else k) for _, s, scale in panels]
    total = max(spans)
    row_h = 0.36
    heights = [p * row_h + 0.25] * 3
    fig_h = sum(heights) + 1.55
    width = WIDTH - 0.2  # the saved PNG adds a margin of a tenth of an inch on each side
    fig, axes = plt.subplots(3, 1, figsize=(width, fig_h), sharex=True,
                             gridspec_kw={"height_ratios": heights})  # fmt: skip
    fig.subplots_adjust(left=_LEFT, right=_RIGHT, top=1 - 0.72 / fig_h, bottom=0.55 / fig_h,
                        hspace=0.55)  # fmt: skip
    slot_inches = width * (_RIGHT - _LEFT) / total
    for ax, (name, sched, scale) in zip(axes, panels, strict=True):
        span = sched.makespan / scale
        copies = 1 if sched.steps > 1 else k
        for gpu, gaps in enumerate(_idle(sched, scale, copies, span)):
            # Patches, not a collection: the axes' collections are the passes alone.
            for start, gap in gaps:
                ax.add_patch(Rectangle((start, gpu - 0.42), gap, 0.84, facecolor=IDLE_COLOUR,
                                       edgecolor="none"))  # fmt: skip
        if sched.steps > 1:
            _draw_passes(ax, sched, scale, 0.0, 0, slot_inches)
            zb_gaps = max(sched.gaps(g) for g in range(p))
            title = f"{name}, {sched.steps} steps back to back: idle {float(sched.bubble):.1%}"
            if zb_gaps == 0:
                title += ", all at the two ends"
        else:
            for step in range(k):
                _draw_passes(ax, sched, scale, step * span, step, slot_inches)
            title = f"{name}: bubble {float(sched.bubble):.1%} of every flush"
        ax.set_title(title, fontsize=TITLE_FONT, loc="left")
        ax.set_yticks(range(p), [f"GPU {g + 1}" for g in range(p)], fontsize=MIN_FONT)
        ax.set_ylim(p - 0.5, -0.5)
        ax.set_xlim(0, total)
        ax.tick_params(axis="x", labelsize=MIN_FONT)
        ax.grid(False)
    axes[-1].set_xlabel("time (slots of one forward pass through a stage)", fontsize=MIN_FONT)
    handles = [
        Patch(color=PASS_COLOURS["F"], label="forward"),
        Patch(color=PASS_COLOURS["B"], label="backward"),
        Patch(color=PASS_COLOURS["W"], label="weight gradient (ZB-H2)"),
        Patch(facecolor="white", edgecolor=PALETTE[6], hatch="///", label="later chunk"),
        Patch(color=IDLE_COLOUR, label="idle (bubble)"),
    ]
    fig.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, 1.0), ncol=3,
               fontsize=MIN_FONT, columnspacing=1.2, handlelength=1.4)  # fmt: skip
    return fig


def pipeline_schedule_alt(n_pp: Any, m: Any, v: Any, steps: Any = 2,
                          backward: Any = ppm.BACKWARD_SLOTS) -> str:  # fmt: skip
    """What :func:`pipeline_schedule` shows, with its values, in sentences."""
    panels = schedules(n_pp, m, v, steps, backward)
    k = checks.whole("steps", steps)
    (_, plain, _), (inter_name, inter, vv), (_, zb, _) = panels
    return (
        f"{plain.n_pp} GPUs, {plain.m} microbatches, {k} steps. 1F1B idles "
        f"{float(plain.bubble):.1%} of every flush; {inter_name} idles "
        f"{float(inter.bubble):.1%} in {k * inter.makespan / vv:,.4g} slots against "
        f"{k * plain.makespan:,.4g}; ZB-H2 runs its steps into each other in "
        f"{zb.makespan:,.4g} slots, "
        + (
            "idle only before each GPU's first pass and after its last."
            if all(zb.gaps(g) == 0 for g in range(zb.n_pp))
            else f"idle {float(zb.bubble):.1%} of them."
        )
    )
