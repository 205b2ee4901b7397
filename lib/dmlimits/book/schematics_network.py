"""Schematics of the network: what the collectives and tensor-parallel chapters describe in
words, drawn from the library's own objects.

* :func:`ring_allreduce`: the two-level ring all-reduce of the collectives chapter, state by
  state (reduce-scatter inside each node, all-reduce between nodes, all-gather inside each
  node), each phase labelled with what :mod:`dmlimits.costs.collectives` charges for it.
* :func:`cluster_levels`: the scenario's two levels, GPUs in an NVLink node and nodes on
  InfiniBand, each link labelled with its bandwidth and latency.
* :func:`tensor_grid`: the two-dimensional tensor-parallel grid of
  :mod:`dmlimits.costs.tensor_parallel`, one model group and one ff group highlighted, with the
  partial sums each all-reduces and the bytes a GPU sends.

Each function takes a :class:`~dmlimits.core.scenario.Scenario` (and the sizes of its example),
so a changed node size, bandwidth, latency or degree redraws it, and each has a companion
``*_alt`` function that writes the figure's alt text from the same values, in words (the
book's alt texts type no digits: the captions glue the numbers).

A schematic draws patches, arrows and text on one axes with its frame, ticks and grid turned
off.  It plots no data, so :func:`dmlimits.book.figures.check_figure` has no axis to ask a
label of (it checks the axes of plotted points only) and checks its text as for any figure.
Every text is at least :data:`MIN_FONT` points on a figure :data:`WIDTH` inches wide, which the
book's column of :data:`COLUMN_PX` pixels shows at about the same size.
"""

from __future__ import annotations

import textwrap
from fractions import Fraction
from typing import Any

import matplotlib.pyplot as plt
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch, Rectangle

from dmlimits.book.figures import COLUMN_PX as FIGURES_COLUMN_PX
from dmlimits.book.figures import DPI, PALETTE, apply_style
from dmlimits.book.glue import quantity
from dmlimits.core.checks import counts, require_scenario
from dmlimits.core.scenario import Scenario
from dmlimits.costs import collectives as co
from dmlimits.costs import model
from dmlimits.costs import tensor_parallel as tpm

#: Width of every schematic (inches): the book's column shows it at
#: ``COLUMN_PX / (WIDTH * figures.DPI)`` of its size, about one.
WIDTH = 7.0
#: The width of the book's text column, in pixels (:data:`dmlimits.book.figures.COLUMN_PX`).
COLUMN_PX = FIGURES_COLUMN_PX
#: How much of its size a schematic's text keeps in the column (a font of ``f`` points shows
#: at ``f * COLUMN_SCALE``), before the tight crop of the PNG, which only enlarges it.
COLUMN_SCALE = COLUMN_PX / (WIDTH * DPI)
#: The smallest font of a schematic (points), so that no text reads below nine points in the
#: column.
MIN_FONT = 9.5
#: The font of the labels that explain a phase or a link (points).
LABEL_FONT = 10.0
#: GPUs drawn in a node of :func:`cluster_levels` before the rest are shown as an ellipsis.
MAX_DRAWN_GPUS = 8
#: GPUs per node of :func:`ring_allreduce`'s example when none is given (or the node's size,
#: if smaller): few enough that every chunk shows.
RING_EXAMPLE_GPUS = 4
#: Nodes of the examples of :func:`ring_allreduce` and :func:`cluster_levels` when none is given.
EXAMPLE_NODES = 2
#: The colour of a GPU's own data, before any sum.
GREY = "#d9d9d9"
#: The colour of outlines and of text that belongs to no group or level.
INK = PALETTE[6]

_ONES = ("zero one two three four five six seven eight nine ten eleven twelve thirteen "
         "fourteen fifteen sixteen seventeen eighteen nineteen").split()  # fmt: skip
_TENS = "twenty thirty forty fifty sixty seventy eighty ninety".split()


def in_words(n: int) -> str:
    """A count from zero to 999,999 in English words ("seventy-two", "two hundred and
    fifty-six"), for alt texts, which type no digits."""
    n = int(n)
    if not 0 <= n < 1_000_000:
        raise ValueError(f"n: got {n}; expected a whole number from 0 to 999,999")
    if n < 20:
        return _ONES[n]
    if n < 100:
        tens, ones = divmod(n, 10)
        return _TENS[tens - 2] + (f"-{_ONES[ones]}" if ones else "")
    if n < 1000:
        hundreds, rest = divmod(n, 100)
        return f"{_ONES[hundreds]} hundred" + (f" and {in_words(rest)}" if rest else "")
    thousands, rest = divmod(n, 1000)
    tail = "" if not rest else f" and {in_words(rest)}" if rest < 100 else f" {in_words(rest)}"
    return f"{in_words(thousands)} thousand{tail}"


def fraction_text(value: float) -> str:
    """A fraction of a vector as a reader writes it: ``3/4``, ``1/8``, ``1`` or ``0``."""
    f = Fraction(float(value)).limit_denominator(4096)
    return str(f.numerator) if f.denominator == 1 else f"{f.numerator}/{f.denominator}"


#: Decimal prefixes of bytes, as the collectives chapter writes them (GB, not GiB).
BYTE_PREFIXES = ((1e15, "PB"), (1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "kB"), (1.0, "B"))
#: Between a number and its unit: a wrapped label never parts them.
NBSP = "\u00a0"


def si_bytes(value: float) -> str:
    """Bytes with a decimal prefix and three significant digits (``348 GB``, ``24.6 kB``),
    the number and its unit joined by a non-breaking space."""
    value = float(value)
    for scale, unit in BYTE_PREFIXES:
        if abs(value) >= scale or scale == 1.0:
            return f"{value / scale:.3g}{NBSP}{unit}"
    raise AssertionError("unreachable")


def unbroken(text: str) -> str:
    """A quantity (:func:`dmlimits.book.glue.quantity`) with its number and unit joined."""
    return text.replace(" ", NBSP)


def wrap(text: str, width_inches: float, fontsize: float = 10.0) -> str:
    """``text`` wrapped to lines that fit ``width_inches`` at ``fontsize`` (an average glyph of
    DejaVu Sans is about 0.55 of the font size), never at a hyphen."""
    chars = max(20, int(width_inches * 72 / (0.55 * fontsize)))
    return textwrap.fill(text, chars, break_on_hyphens=False)


def _canvas(height: float) -> tuple[plt.Figure, plt.Axes]:
    """A figure :data:`WIDTH` by ``height`` inches with one axes whose data units are inches
    and which shows no frame, ticks or grid."""
    apply_style()
    fig = plt.figure(figsize=(WIDTH, height))
    ax = fig.add_axes((0.0, 0.0, 1.0, 1.0))
    ax.set_xlim(0.0, WIDTH)
    ax.set_ylim(0.0, height)
    ax.set_aspect("equal")
    ax.set_axis_off()
    return fig, ax


def _box(ax: plt.Axes, x: float, y: float, w: float, h: float, **style: Any) -> FancyBboxPatch:
    style = {"boxstyle": "round,pad=0,rounding_size=0.05", "linewidth": 1.0, **style}
    patch = FancyBboxPatch((x, y), w, h, **style)
    ax.add_patch(patch)
    return patch


def _arrow(ax: plt.Axes, start: tuple[float, float], end: tuple[float, float], color: str,
           rad: float = 0.0, both: bool = False) -> None:  # fmt: skip
    ax.add_patch(FancyArrowPatch(
        start, end, arrowstyle="<|-|>" if both else "-|>", mutation_scale=9, color=color,
        linewidth=1.1, connectionstyle=f"arc3,rad={rad}", shrinkA=2, shrinkB=2,
    ))  # fmt: skip


def _wire(ax: plt.Axes, x: float, y0: float, y1: float, color: str,
          half_width: float = 0.014) -> None:  # fmt: skip
    """A vertical link from ``y0`` to ``y1`` at ``x``: a patch, not a plotted line (a
    schematic plots no data)."""
    ax.add_patch(Rectangle((x - half_width, min(y0, y1)), 2 * half_width, abs(y1 - y0),
                           facecolor=color, edgecolor="none"))  # fmt: skip


# --- The two-level ring all-reduce ------------------------------------------------------------
def ring_example(scn: Scenario, gpus_per_node: Any = None, nodes: Any = None,
                 words: Any = None) -> dict[str, Any]:  # fmt: skip
    """The example of :func:`ring_allreduce` and what the collectives module charges for each
    of its phases.

    ``gpus_per_node`` defaults to :data:`RING_EXAMPLE_GPUS` (or the node's size, if smaller),
    ``nodes`` to :data:`EXAMPLE_NODES`, and ``words`` to the gradients of the smallest model of
    the sweep (the chapter's worked example).  Returns the sizes (``p0``, ``p1``, ``words``) and,
    for each of the three phases in order, its name, the link it runs on, the fraction of the
    vector each GPU sends, those bytes, its bandwidth time and its latency (seconds): a
    phase inside the node is one of the two phases of the in-node ring (half of
    :func:`~dmlimits.costs.collectives.allreduce_bytes_split`'s and
    :func:`~dmlimits.costs.collectives.allreduce_time_levels`' level 0), the phase between
    nodes a whole ring all-reduce of each GPU's shard (their level 1)."""
    scn = require_scenario(scn)
    node = int(scn["network.node_size"])
    p0 = int(counts("gpus_per_node", min(RING_EXAMPLE_GPUS, node) if gpus_per_node is None
                    else gpus_per_node))  # fmt: skip
    p1 = int(counts("nodes", EXAMPLE_NODES if nodes is None else nodes))
    if p0 > len(PALETTE):
        raise ValueError(f"gpus_per_node: got {p0}; expected at most {len(PALETTE)} "
                         "(one colour for each GPU of the node)")  # fmt: skip
    if p0 * p1 > 2 * MAX_DRAWN_GPUS:
        raise ValueError(f"gpus_per_node * nodes: got {p0 * p1}; expected at most "
                         f"{2 * MAX_DRAWN_GPUS} GPUs (each drawn with its chunks)")  # fmt: skip
    if words is None:
        words = float(model.shapes(scn).params[0])
    words = float(words)
    vector = words * float(scn["model.word_bytes"])
    intra, inter = co.allreduce_bytes_split(scn, words, p0, p1)
    level0, level1 = co.allreduce_time_levels(scn, words, p0, p1)
    inside = {
        "link": co.link_name(scn, 0), "fraction": intra / co.RING_PHASES / vector,
        "bytes": intra / co.RING_PHASES, "bandwidth": level0.bandwidth / co.RING_PHASES,
        "latency": level0.latency / co.RING_PHASES,
    }  # fmt: skip
    between = {
        "name": "all-reduce between nodes", "link": co.link_name(scn, 1),
        "fraction": inter / vector, "bytes": inter, "bandwidth": level1.bandwidth,
        "latency": level1.latency,
    }  # fmt: skip
    phases = [{"name": "reduce-scatter inside each node", **inside}, between,
              {"name": "all-gather inside each node", **inside}]  # fmt: skip
    return {"p0": p0, "p1": p1, "words": words, "vector_bytes": vector, "phases": phases}


def latencies_text(latency: float, one: float) -> str:
    """A phase's latency as the number of message latencies it waits, in words, and the time:
    "no latency", "one latency, 1.125 µs", "two latencies, 2.25 µs"."""
    if latency <= 0 or one <= 0:
        return "no latency"
    n = round(latency / one)
    many = "one latency" if n == 1 else f"{in_words(n)} latencies"
    return f"{many}, {unbroken(quantity(latency, 's'))}"


def phase_label(phase: dict[str, Any], one_latency: float) -> str:
    """The cost of one phase of :func:`ring_example` in words: the share of the vector and the
    bytes each GPU sends, and the time on its link."""
    if phase["bytes"] <= 0:
        return f"{phase['name']}: a single GPU at this level sends nothing"
    sent = (f"each GPU sends {fraction_text(phase['fraction'])} of the vector, "
            f"{si_bytes(phase['bytes'])}")  # fmt: skip
    time = ("no bandwidth time" if phase["bandwidth"] == 0
            else unbroken(quantity(phase["bandwidth"], "s", 3)))  # fmt: skip
    return (f"{phase['name']} over {phase['link']}: {sent}; "
            f"{time} + {latencies_text(phase['latency'], one_latency)}")  # fmt: skip


def ring_allreduce(scn: Scenario, gpus_per_node: Any = None, nodes: Any = None,
                   words: Any = None) -> plt.Figure:  # fmt: skip
    """The two-level ring all-reduce of :func:`ring_example`, state by state: every GPU's
    vector cut into one chunk per GPU of a node; after the reduce-scatter inside each node,
    the GPU at place ``i`` of its node holds the node's sum of chunk ``i`` (pale); after the
    all-reduce between nodes, the sum over every GPU (solid); after the all-gather, every GPU
    holds every chunk's sum.  A chunk's colour is the place in the node of the GPU that owns
    its sum; each phase is labelled with its cost (:func:`phase_label`) and its ring's arrows."""
    ex = ring_example(scn, gpus_per_node, nodes, words)
    p0, p1 = ex["p0"], ex["p1"]
    one = co.level_latency(require_scenario(scn), 0)
    n = p0 * p1
    margin, gap = 0.1, 0.3
    slot = (WIDTH - 2 * margin - (p1 - 1) * gap) / n
    box_w, box_h = min(0.82, slot - 0.1), 0.36
    row_h, band_h, key_h = 0.5, 0.95, 0.55
    height = key_h + 4 * row_h + 3 * band_h + 0.55
    fig, ax = _canvas(height)

    def x_of(node: int, place: int) -> float:
        return margin + node * gap + (node * p0 + place) * slot + (slot - box_w) / 2

    # The key.
    y_key = height - 0.3
    key = [(GREY, 1.0, "a GPU's own vector"), (PALETTE[0], 0.4, "the sum over its node"),
           (PALETTE[0], 1.0, "the sum over every GPU")]  # fmt: skip
    x = margin
    for color, alpha, text in key:
        ax.add_patch(Rectangle((x, y_key - 0.08), 0.22, 0.18, facecolor=color, alpha=alpha,
                               edgecolor=INK, linewidth=0.6))  # fmt: skip
        ax.text(x + 0.3, y_key, text, va="center", fontsize=MIN_FONT)
        x += 0.38 + 0.075 * len(text)
    ax.text(margin, y_key - 0.32, "colour: the place in the node of the GPU that owns the "
            "chunk's sum", va="center", fontsize=MIN_FONT)  # fmt: skip

    def row(k: int, y: float) -> None:
        chunk_w = (box_w - 0.08) / p0
        for node in range(p1):
            for place in range(p0):
                x0 = x_of(node, place)
                _box(ax, x0, y, box_w, box_h, facecolor="white", edgecolor=INK)
                for c in range(p0):
                    owner = c == place
                    if k == 0:
                        face, alpha = GREY, 1.0
                    elif k == 3:
                        face, alpha = PALETTE[c], 1.0
                    elif owner:
                        face, alpha = PALETTE[c], 0.4 if k == 1 else 1.0
                    else:
                        face, alpha = "white", 1.0
                    ax.add_patch(Rectangle(
                        (x0 + 0.04 + c * chunk_w, y + 0.07), chunk_w, box_h - 0.14,
                        facecolor=face, alpha=alpha, edgecolor=INK, linewidth=0.5,
                        linestyle="-" if face != "white" else ":",
                    ))  # fmt: skip

    rows_y = []
    y = height - key_h - 0.35 - row_h
    for k in range(4):
        rows_y.append(y)
        row(k, y)
        y -= row_h + band_h
    for node in range(p1):  # node frames' labels above the first row, GPU labels below the last
        ax.text((x_of(node, 0) + x_of(node, p0 - 1) + box_w) / 2, rows_y[0] + box_h + 0.12,
                f"node {node}", ha="center", fontsize=MIN_FONT, color=INK)  # fmt: skip
        for place in range(p0):
            ax.text(x_of(node, place) + box_w / 2, rows_y[-1] - 0.14, f"GPU {place}",
                    ha="center", va="top", fontsize=MIN_FONT, color=INK)  # fmt: skip

    for k, phase in enumerate(ex["phases"]):
        top = rows_y[k] - 0.06
        label = f"{'①②③'[k]} " + phase_label(phase, one)
        arrow_y = top - 0.12
        text_y = top - 0.32 if k != 1 else top - 0.16 - 0.06 * p0
        ax.text(margin, text_y, wrap(label, WIDTH - 2 * margin, LABEL_FONT), va="top",
                fontsize=LABEL_FONT, linespacing=1.25)  # fmt: skip
        if k == 1:  # between nodes: the GPUs at each place form a ring across the nodes
            for place in range(p0):
                y_place = arrow_y - 0.06 * place
                for node in range(p1 - 1):
                    a = x_of(node, place) + box_w / 2
                    b = x_of(node + 1, place) + box_w / 2
                    _arrow(ax, (a, y_place), (b, y_place), PALETTE[place], both=p1 == 2)
                    for x_end in (a, b):  # from the GPU down to its ring
                        _wire(ax, x_end, y_place, rows_y[k], PALETTE[place], 0.012)
                if p1 > 2:  # the ring closes from the last node back to the first
                    _arrow(ax, (x_of(p1 - 1, place) + box_w / 2, y_place - 0.03),
                           (x_of(0, place) + box_w / 2, y_place - 0.03), PALETTE[place],
                           rad=-0.03)  # fmt: skip
        elif p0 > 1:  # inside each node: a ring of its GPUs
            for node in range(p1):
                for place in range(p0 - 1):
                    a = x_of(node, place) + box_w * 0.7
                    b = x_of(node, place + 1) + box_w * 0.3
                    _arrow(ax, (a, arrow_y), (b, arrow_y), INK)
                if p0 > 2:
                    _arrow(
                        ax,
                        (x_of(node, p0 - 1) + box_w / 2, arrow_y - 0.02),
                        (x_of(node, 0) + box_w / 2, arrow_y - 0.02),
                        INK,
                        rad=-0.06,
                    )
                elif p0 == 2:
                    _arrow(
                        ax,
                        (x_of(node, 1) + box_w * 0.3, arrow_y - 0.08),
                        (x_of(node, 0) + box_w * 0.7, arrow_y - 0.08),
                        INK,
                    )
    return fig


def ring_allreduce_alt(scn: Scenario, gpus_per_node: Any = None, nodes: Any = None) -> str:
    """The alt text of :func:`ring_allreduce`, in words, from the same example."""
    ex = ring_example(scn, gpus_per_node, nodes)
    p0, p1 = in_words(ex["p0"]), in_words(ex["p1"])
    return (f"Four rows of coloured chunks on {p1} nodes of {p0} GPUs each, showing a ring "
            "all-reduce in three phases: a reduce-scatter inside each node over "
            f"{co.link_name(scn, 0)}, an all-reduce between the nodes over "
            f"{co.link_name(scn, 1)} and an all-gather inside each node, each phase labelled "
            "with the share of the vector each GPU sends and its time.")  # fmt: skip


# --- The cluster's levels ---------------------------------------------------------------------
def level_label(scn: Scenario, level: int) -> str:
    """What one level of the scenario's network offers each GPU, as :func:`cluster_levels`
    labels it: the link, its bandwidth both ways together and each way, and a message's
    latency (the collectives module's :func:`~dmlimits.costs.collectives.level_bandwidth` and
    :func:`~dmlimits.costs.collectives.level_latency`)."""
    scn = require_scenario(scn)
    bandwidth = co.level_bandwidth(scn, level)
    latency = quantity(co.level_latency(scn, level), "s")
    where = "inside a node" if level == 0 else "between nodes"
    if scn["network.topology"] == "unlimited":
        return f"{where}: no bandwidth limit; {latency} a message"
    link = co.link_name(scn, level)
    both = quantity(bandwidth, "byte/s")
    one_way = quantity(float(co.one_way(bandwidth)), "byte/s")
    return f"{link} {where}: {both} per GPU ({one_way} each way); {latency} a message"


#: Height of a drawn switch or network (inches).
BAR = 0.22


def link_short(scn: Scenario, level: int) -> str:
    """The name of what carries ``level``, as a switch of :func:`cluster_levels` is labelled:
    ``NVLink``, ``InfiniBand`` or ``no bandwidth limit``."""
    name = co.link_name(scn, level)
    return "no bandwidth limit" if name == "an unlimited network" else name


def cluster_levels(scn: Scenario, nodes: Any = None) -> plt.Figure:
    """The scenario's cluster: ``nodes`` nodes (default :data:`EXAMPLE_NODES`, and an ellipsis
    for the rest) of ``network.node_size`` GPUs each (at most :data:`MAX_DRAWN_GPUS` drawn, the
    rest an ellipsis); every GPU of a node joined to the node's NVLink switch above it and to
    the network between nodes below it, each level labelled by :func:`level_label`."""
    scn = require_scenario(scn)
    p1 = int(counts("nodes", EXAMPLE_NODES if nodes is None else nodes))
    if p1 > 3:
        raise ValueError(f"nodes: got {p1}; expected at most three nodes drawn side by side")
    size = int(scn["network.node_size"])
    drawn = min(size, MAX_DRAWN_GPUS)
    height = 3.3
    fig, ax = _canvas(height)
    margin, gap, more_w = 0.1, 0.3, 0.45
    frame_w = (WIDTH - 2 * margin - more_w - (p1 - 1) * gap) / p1
    slot = (frame_w - 0.2) / drawn
    box_w, box_h = min(0.7, slot - 0.07), 0.42
    frame_y, frame_h = 1.05, 1.55
    switch_y, gpu_y, net_y = frame_y + 1.02, frame_y + 0.3, 0.45
    lvl0, lvl1 = PALETTE[0], PALETTE[1]
    for node in range(p1):
        x0 = margin + node * (frame_w + gap)
        _box(ax, x0, frame_y, frame_w, frame_h, facecolor="#f4f6f8", edgecolor=INK)
        count = "GPU" if size == 1 else f"{size:,} GPUs"
        ax.text(x0 + 0.08, frame_y + frame_h - 0.05, f"node {node}: {count}", va="top",
                fontsize=MIN_FONT, color=INK)  # fmt: skip
        _box(ax, x0 + 0.1, switch_y, frame_w - 0.2, BAR, facecolor=lvl0, edgecolor=lvl0)
        ax.text(x0 + frame_w / 2, switch_y + BAR / 2, link_short(scn, 0), ha="center",
                va="center", fontsize=MIN_FONT, color="white")  # fmt: skip
        for g in range(drawn):
            gx = x0 + 0.1 + g * slot + (slot - box_w) / 2
            ellipsis = size > drawn and g == drawn - 1
            _box(ax, gx, gpu_y, box_w, box_h, facecolor="white", edgecolor=INK,
                 linestyle=":" if ellipsis else "-")  # fmt: skip
            ax.text(gx + box_w / 2, gpu_y + box_h / 2, "⋯" if ellipsis else f"{g}",
                    ha="center", va="center", fontsize=MIN_FONT)  # fmt: skip
            cx = gx + box_w / 2
            _wire(ax, cx, gpu_y + box_h, switch_y, lvl0)
            _wire(ax, cx, net_y + BAR, gpu_y, lvl1)
    net_w = p1 * frame_w + (p1 - 1) * gap + more_w * 0.6
    _box(ax, margin + 0.1, net_y, net_w - 0.2, BAR, facecolor=lvl1, edgecolor=lvl1)
    ax.text(margin + net_w / 2, net_y + BAR / 2, link_short(scn, 1), ha="center",
            va="center", fontsize=MIN_FONT, color="white")  # fmt: skip
    ax.text(margin + p1 * (frame_w + gap) - gap + 0.08, frame_y + frame_h / 2, "⋯",
            fontsize=14, va="center", color=INK)  # fmt: skip
    ax.text(WIDTH / 2, height - 0.12, "①  " + level_label(scn, 0), ha="center", va="top",
            fontsize=LABEL_FONT, color=lvl0)  # fmt: skip
    ax.text(WIDTH / 2, net_y - 0.1, "②  " + level_label(scn, 1), ha="center", va="top",
            fontsize=LABEL_FONT, color=lvl1)  # fmt: skip
    return fig


def cluster_levels_alt(scn: Scenario, nodes: Any = None) -> str:
    """The alt text of :func:`cluster_levels`, in words, from the same scenario."""
    scn = require_scenario(scn)
    p1 = int(counts("nodes", EXAMPLE_NODES if nodes is None else nodes))
    size = int(scn["network.node_size"])
    gpus = "one GPU" if size == 1 else f"{in_words(size)} GPUs"
    topology = scn["network.topology"]
    if topology == "unlimited":
        links = "joined at both levels by a network without a bandwidth limit"
    elif topology == "flat":
        links = "joined at both levels by NVLink, one NVLink domain"
    else:
        links = "joined inside each node by NVLink and between the nodes by InfiniBand"
    return (f"Schematic of the cluster's two levels: {in_words(p1)} nodes of {gpus} each, "
            f"{links}, each level labelled with its bandwidth per GPU and the latency of a "
            "message.")  # fmt: skip


# --- The tensor-parallel grid ------------------------------------------------------------------
def grid_example(scn: Scenario, tp_model: Any = None, tp_ff: Any = None, d_model: Any = None,
                 d_ff: Any = None, tokens: Any = None) -> dict[str, Any]:  # fmt: skip
    """The example of :func:`tensor_grid` and what each group of it sends.

    ``d_model`` and ``d_ff`` default to the smallest model of the sweep, ``tokens`` to one
    sequence (the chapter's nanobatch), and the degrees to the split of least traffic the rule
    allows among the GPUs of one node (:func:`~dmlimits.costs.tensor_parallel.best_split`).
    Returns the sizes, the shard's sides and, for each group, its size, the words of one token
    it all-reduces, the bytes each GPU sends for one token in one pass
    (:func:`~dmlimits.costs.collectives.allreduce_bytes`, as the ``tensor-parallel-traffic``
    derivation's step 2) and for the nanobatch in one pass; ``layer_bytes`` is both groups and
    both passes (:func:`~dmlimits.costs.tensor_parallel.tp_bytes`)."""
    scn = require_scenario(scn)
    sh = model.shapes(scn)
    dm = int(counts("d_model", int(sh.d_model[0]) if d_model is None else d_model))
    dff = int(counts("d_ff", int(sh.d_ff[0]) if d_ff is None else d_ff))
    b = int(counts("tokens", int(scn["model.sequence_length"]) if tokens is None else tokens))
    if tp_model is None and tp_ff is None:
        tp_model, tp_ff = tpm.best_split(scn, dm, dff, int(scn["network.node_size"]))
    m = int(counts("tp_model", 1 if tp_model is None else tp_model))
    f = int(counts("tp_ff", 1 if tp_ff is None else tp_ff))
    if m > 8 or f > 16:
        raise ValueError(f"tp_model, tp_ff: got {m} and {f}; expected a grid of at most 8 by "
                         "16 GPUs (each drawn)")  # fmt: skip
    groups = {}
    for name, size, width, what in (("model group", m, dff // f, "partial hidden activations"),
                                    ("ff group", f, dm // m, "partial outputs")):  # fmt: skip
        per_token = float(co.allreduce_bytes(scn, width, size))
        groups[name] = {"size": size, "words": width, "what": what, "token_bytes": per_token,
                        "pass_bytes": per_token * b}  # fmt: skip
    return {
        "tp_model": m, "tp_ff": f, "d_model": dm, "d_ff": dff, "tokens": b,
        "rows": dm // m, "cols": dff // f, "groups": groups,
        "layer_bytes": float(tpm.tp_bytes(scn, dm, dff, b, m, f)),
    }  # fmt: skip


def group_label(name: str, group: dict[str, Any], tokens: int) -> str:
    """What one group of :func:`grid_example` all-reduces, and what each of its GPUs sends."""
    size = group["size"]
    shape = {"model group": "a column", "ff group": "a row"}[name]
    if size == 1:
        return f"{name} ({shape}, one GPU): nothing to all-reduce"
    return (f"{name} ({shape}, {size} GPUs): all-reduces its {group['what']}, "
            f"{group['words']:,} words a token; each GPU sends "
            f"{unbroken(quantity(group['token_bytes'], 'byte', 3))} a token and pass, "
            f"{unbroken(quantity(group['pass_bytes'], 'byte', 3))} for the {tokens:,} "
            "tokens")  # fmt: skip


def slices_text(n: int, side: int) -> str:
    """How a width is cut over ``n`` GPUs, each holding ``side``: "in 4 slices of 12,288", or
    "unsplit, 12,288" for one GPU."""
    return f"unsplit, {side:,}" if n == 1 else f"in {n} slices of {side:,}"


def grid_note(ex: dict[str, Any]) -> str:
    """The order of a layer's all-reduces in :func:`grid_example`'s grid, and what each GPU
    sends in all; with a model degree of one (Megatron's 1D split) only the ff group sends."""
    total = unbroken(quantity(ex["layer_bytes"], "byte", 3))
    if ex["tp_model"] == 1:
        order = ("Forward: the ff group sums the second matmul's partial outputs (the model "
                 "group is one GPU); backward: the mirror image.")  # fmt: skip
    else:
        order = ("Forward: the model group sums the first matmul's partial hidden activations, "
                 "then the ff group the second's partial outputs; backward: the mirror "
                 "image.")  # fmt: skip
    return f"{order} Per layer and step each GPU sends {total} for {ex['tokens']:,} tokens."


def tensor_grid(scn: Scenario, tp_model: Any = None, tp_ff: Any = None, d_model: Any = None,
                d_ff: Any = None, tokens: Any = None) -> plt.Figure:  # fmt: skip
    """The tensor-parallel grid of :func:`grid_example`: ``tp_model`` rows (slices of the
    model dimension) by ``tp_ff`` columns (slices of the hidden units), the GPU of the first
    row and column in both highlighted groups, its column the model group and its row the ff
    group, each labelled by :func:`group_label` in the group's colour."""
    ex = grid_example(scn, tp_model, tp_ff, d_model, d_ff, tokens)
    m, f = ex["tp_model"], ex["tp_ff"]
    cm, cf = PALETTE[0], PALETTE[1]
    left, top_pad = 1.45, 0.45
    cell = min(0.62, 3.0 / f, 2.6 / m)
    grid_w, grid_h = cell * f, cell * m
    x_text = left + grid_w + 0.35
    labels = [(wrap(group_label(name, group, ex["tokens"]), WIDTH - x_text - 0.1, LABEL_FONT),
               color) for (name, group), color in zip(ex["groups"].items(), (cm, cf),
                                                        strict=True)]  # fmt: skip
    line_h = LABEL_FONT / 72 * 1.3
    text_h = sum(line_h * (t.count("\n") + 1) for t, _ in labels) + 0.25
    note = wrap(grid_note(ex), WIDTH - 0.2, LABEL_FONT)
    body_h = max(grid_h + 0.4, text_h)
    height = top_pad + body_h + line_h * (note.count("\n") + 1) + 0.3
    fig, ax = _canvas(height)
    y_top = height - top_pad
    for r in range(m):
        for c in range(f):
            in_m, in_f = c == 0, r == 0
            face = "white"
            if in_m and in_f:
                face = "#e8dff0"
            elif in_m:
                face = "#dbe7f3"
            elif in_f:
                face = "#f6dde0"
            x, y = left + c * cell, y_top - (r + 1) * cell
            _box(ax, x + 0.03, y + 0.03, cell - 0.06, cell - 0.06, facecolor=face,
                 edgecolor=INK)  # fmt: skip
            if cell >= 0.5:
                ax.text(x + cell / 2, y + cell / 2, f"{r},{c}", ha="center", va="center",
                        fontsize=MIN_FONT)  # fmt: skip
    # The highlighted groups: a column (model group) and a row (ff group).
    ax.add_patch(Rectangle((left, y_top - grid_h), cell, grid_h, fill=False, edgecolor=cm,
                           linewidth=2.4))  # fmt: skip
    ax.add_patch(Rectangle((left, y_top - cell), grid_w, cell, fill=False, edgecolor=cf,
                           linewidth=2.4, linestyle="--"))  # fmt: skip
    ax.text(left + cell / 2, y_top - grid_h - 0.08, "model group", ha="left", va="top",
            fontsize=MIN_FONT, color=cm)  # fmt: skip
    ax.text(left + grid_w / 2, y_top + 0.08,
            f"$d_{{\\mathrm{{ff}}}}$ {slices_text(f, ex['cols'])}", ha="center",
            va="bottom", fontsize=LABEL_FONT)  # fmt: skip
    ax.text(left - 0.1, y_top - grid_h / 2,
            f"$d_{{\\mathrm{{model}}}}$\n{slices_text(m, ex['rows'])}", ha="right",
            va="center", fontsize=LABEL_FONT)  # fmt: skip
    # What each group sends, to the right of the grid.
    y = y_top
    for text, color in labels:
        ax.text(x_text, y, text, va="top", fontsize=LABEL_FONT, color=color, linespacing=1.25)
        y -= line_h * (text.count("\n") + 1) + 0.25
    ax.text(0.1, y_top - body_h - 0.1, note, va="top", fontsize=LABEL_FONT, linespacing=1.25)
    return fig


def tensor_grid_alt(scn: Scenario, tp_model: Any = None, tp_ff: Any = None) -> str:
    """The alt text of :func:`tensor_grid`, in words, from the same example."""
    ex = grid_example(scn, tp_model, tp_ff)
    m, f = in_words(ex["tp_model"]), in_words(ex["tp_ff"])
    return (f"A grid of {m} by {f} GPUs for tensor parallelism, one column highlighted as a "
            "model group and one row as an ff group, each labelled with the partial sums it "
            "all-reduces and the bytes each of its GPUs sends.")  # fmt: skip
