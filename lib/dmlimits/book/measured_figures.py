"""Figures and sentences of the chapters on measured runs (Fernandez et al. 2024 and other
published runs), drawn and worded from what :mod:`dmlimits.measured.confront` and
:mod:`dmlimits.measured.runs` compute.  Each figure function returns a matplotlib figure for
the chapter to glue, each sentence function a string worded for the case it is given (a count
of none, one, some or all); none computes a result.
"""

from __future__ import annotations

import json
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.text import Text

from dmlimits.book import interactive
from dmlimits.book.figures import COLUMN_PX, DPI, PALETTE
from dmlimits.core import published
from dmlimits.measured import confront, runs, transformer

#: Drawn in black beside the model's curves: what Fernandez et al. (2024) report.
PUBLISHED_STYLE = {"color": "black", "zorder": 5}

#: The page's text column (``dmlimits.book.figures.COLUMN_PX``) in inches at the book's figure
#: density (``dmlimits.book.figures.DPI``): a figure this wide is shown with its text at the
#: sizes it was drawn with.
COLUMN_INCHES = COLUMN_PX / DPI

#: The smallest font of these figures, in points, at :data:`COLUMN_INCHES`.
FONT_PT = 9

#: One colour and marker for each strategy of ``dmlimits.measured.runs.STRATEGIES``, from
#: Okabe and Ito's colour-blind-safe set: tensor parallelism in warm colours and squares,
#: pipeline parallelism in cool colours and triangles, FSDP alone in blue circles.
STRATEGY_STYLES = {
    "FSDP": {"color": "#0072B2", "marker": "o"},
    "FSDP + TP 2": {"color": "#E69F00", "marker": "s"},
    "FSDP + TP 4": {"color": "#D55E00", "marker": "s"},
    "FSDP + PP 2": {"color": "#009E73", "marker": "^"},
    "FSDP + PP 4": {"color": "#CC79A7", "marker": "^"},
}

#: The MFU figure's colour for each GPU (Okabe and Ito's blue and orange).
GPU_COLORS = {"h100": "#0072B2", "a100": "#E69F00"}

#: The MFU figure's line style and marker for each shape of
#: ``dmlimits.measured.confront.SHAPES``, in that order.
SHAPE_LINES = (("-", "o"), ("--", "s"))


def scaling_figure(curves: dict):
    """Strong scaling of both shapes on the H100, one column a shape and one row a measure:
    per-GPU and whole-cluster throughput and exposed communication, with Fernandez et al.'s
    reported numbers drawn where they apply: their per-GPU drop from 128 to 2048 GPUs (anchored
    at the model's FSDP value at 128, their model not being stated), the GPU count where
    communication starts to bind, and the range where model parallelism overtakes FSDP alone.
    Each strategy has its own colour and marker (:data:`STRATEGY_STYLES`); the figure is
    :data:`COLUMN_INCHES` wide, so that its text keeps its size on the page."""
    drop = published.value("paper2.per_gpu_throughput_drop_pct") / 100
    onset = published.value("paper2.comm_bound_onset_gpus")
    lo, hi = confront.DROP_RANGE
    band = (published.value("paper2.mp_crossover_gpus_low"),
            published.value("paper2.mp_crossover_gpus_high"))  # fmt: skip
    fig, axes = plt.subplots(3, len(confront.SHAPES), figsize=(COLUMN_INCHES, 9.4), sharex=True)
    for col, shape in enumerate(confront.SHAPES):
        for strategy in runs.STRATEGIES:
            c = curves[(shape, strategy)]
            style = dict(ms=4, lw=1.4, label=strategy, **strategy_style(strategy))
            axes[0, col].plot(c["gpus"], c["tokens_per_s_per_gpu"], **style)
            axes[1, col].plot(c["gpus"], c["tokens_per_s"], **style)
            axes[2, col].plot(c["gpus"], 100 * c["exposed_s"] / c["step_s"], **style)
        fsdp = curves[(shape, "FSDP")]
        at_lo = fsdp["tokens_per_s_per_gpu"][list(fsdp["gpus"]).index(lo)]
        axes[0, col].plot([lo, hi], [at_lo, at_lo * (1 - drop)], ls="--", marker="D", ms=5,
                          mfc="none", lw=1.0, label=f"reported drop, {lo} to {hi} GPUs",
                          **PUBLISHED_STYLE)  # fmt: skip
        axes[1, col].axvspan(*band, color="0.85", zorder=0,
                             label="reported: model parallelism wins")  # fmt: skip
        axes[2, col].axvline(onset, ls="--", lw=1.0, label="reported onset", **PUBLISHED_STYLE)
        axes[0, col].set_title(transformer.shape(shape).name, fontsize=FONT_PT + 1)
        axes[1, col].set_yscale("log")
        axes[2, col].set_xlabel("H100 GPUs")
    for ax, label in zip(axes, ("tokens/s per GPU", "tokens/s, whole cluster",
                                 "exposed communication\n(% of step)"), strict=True):  # fmt: skip
        for panel in ax:
            panel.set_ylabel(label, fontsize=FONT_PT)
    for ax in axes.ravel():
        ax.set_xscale("log", base=2)
        ax.tick_params(labelsize=FONT_PT)
    handles: dict = {}
    for ax in axes[:, 0]:
        for h, label in zip(*ax.get_legend_handles_labels(), strict=True):
            handles.setdefault(label, h)
    fig.tight_layout(rect=(0, 0, 1, 0.905))
    fig.legend(handles.values(), handles.keys(), loc="upper center", ncol=2, fontsize=FONT_PT,
               frameon=False, bbox_to_anchor=(0.5, 1.0))  # fmt: skip
    return fig


def mfu_figure(curves_by_gpu: dict):
    """MFU against GPU count, FSDP alone, for each GPU and shape, with the MFU Fernandez et al.
    report for each GPU in one common configuration, drawn at the configuration the chapter
    compares it with (:data:`dmlimits.measured.confront.COMMON`).  A GPU is a colour
    (:data:`GPU_COLORS`), a shape a line style and marker, so that the two lines of a GPU and
    its star read together."""
    fig, ax = plt.subplots(figsize=(COLUMN_INCHES, 5.0))
    shape, _, n_common = confront.COMMON
    for gpu, curves in curves_by_gpu.items():
        color = GPU_COLORS[gpu]
        name = gpu.upper()
        for s, (ls, marker) in zip(confront.SHAPES, SHAPE_LINES, strict=True):
            c = curves[(s, "FSDP")]
            ax.plot(c["gpus"], 100 * c["mfu"], ls=ls, marker=marker, ms=4, lw=1.5, color=color,
                    label=f"{transformer.shape(s).name}, {name}")  # fmt: skip
            if s == shape:
                ax.plot([n_common], [published.value(f"paper2.mfu_{gpu}_pct")], marker="*",
                        ms=13, ls="none", mec="black", color=color,
                        label=f"reported, {name}", zorder=5)  # fmt: skip
    ax.set_xscale("log", base=2)
    ax.set_xlabel("GPUs", fontsize=FONT_PT + 1)
    ax.set_ylabel("MFU (%), calibrated, FSDP", fontsize=FONT_PT + 1)
    ax.tick_params(labelsize=FONT_PT)
    fig.tight_layout(rect=(0, 0, 1, 0.83))
    fig.legend(*ax.get_legend_handles_labels(), loc="upper center", ncol=2, fontsize=FONT_PT,
               frameon=False, bbox_to_anchor=(0.5, 1.0))  # fmt: skip
    return fig


def scatter_figure(cmp: runs.Comparison):
    # Stacked, not side by side: at the column's width two panels side by side set their
    # labels under nine points.
    fig, axes = plt.subplots(2, 1, figsize=(7.0, 9.0))
    labels = [confront.source_label(r) for r in cmp.rows]
    kinds = list(dict.fromkeys(labels))
    for ax, pred, title in (
        (axes[0], cmp.bound, "ideal bound"),
        (axes[1], cmp.calibrated, "calibrated"),
    ):
        for k, kind in enumerate(kinds):
            sel = np.array([lab == kind for lab in labels])
            ax.plot(
                100 * pred[sel],
                100 * cmp.reported[sel],
                "o",
                ms=4,
                alpha=0.8,
                color=PALETTE[k % len(PALETTE)],
                label=kind,
            )
        ax.axline((0, 0), slope=1, color="0.4", lw=0.8, ls="--")  # predicted = reported
        ax.set_xlim(0, 105)
        ax.set_ylim(0, max(70.0, 5 * np.ceil(21 * float(np.nanmax(cmp.reported)))))
        ax.set_xlabel(f"predicted utilization (%), {title}")
        ax.set_title(title)
    for ax in axes:
        ax.set_ylabel("reported utilization (%)")
    axes[1].legend(fontsize=8)
    fig.tight_layout()
    return fig


def operations_figure(cases: dict):
    """Each configuration's step split by operation (:func:`dmlimits.measured.runs.operation_split`,
    the calibrated mode), as shares of the step, one bar a configuration; an operation that
    takes no time in any of them (the framework overhead of a large model) is left out."""
    splits = {label: runs.operation_split(cfg) for label, cfg in cases.items()}
    fig, ax = plt.subplots(figsize=(8.4, 0.5 * len(cases) + 1.6))
    labels = list(splits)
    left = np.zeros(len(labels))
    for k, op in enumerate(runs.OPERATIONS):
        share = np.array([100 * splits[lab][op] / sum(splits[lab].values()) for lab in labels])
        if not share.any():  # an operation no configuration here runs: not in the legend
            continue
        ax.barh(labels, share, left=left, color=PALETTE[k % len(PALETTE)], label=op)
        left += share
    ax.invert_yaxis()
    ax.set_axisbelow(True)  # the grid behind the bars
    ax.set_xlim(0, 100)
    ax.set_xlabel("share of the step (%), calibrated mode")
    fig.tight_layout(rect=(0, 0.14, 1, 1))
    fig.legend(*ax.get_legend_handles_labels(), loc="lower center", ncol=3, fontsize=8,
               frameon=False)  # fmt: skip
    return fig


#: The markers of :func:`small_shapes_figure`'s micro-batch sizes, beside their colours.
SIZE_MARKERS = ("o", "s", "^", "D")


def small_shapes_figure(per_row: dict):
    """vTrain's single-node runs (:func:`dmlimits.measured.confront.small_shapes_rows`): each
    run's predicted step time against its measured one, without and with the calibrated mode's
    two causes of small shapes' time (an unfused attention and the framework's host-side
    floor); one colour a micro-batch size."""
    fig, axes = plt.subplots(1, 2, figsize=(8.4, 3.9), sharex=True, sharey=True)
    measured = 1e3 * per_row["measured_s"]
    lo, hi = 0.5 * measured.min(), 2 * measured.max()
    sizes = sorted(set(per_row["mbs"].tolist()))
    for ax, key, title in zip(axes, ("neither", "both"),
                              ("FLOP, kernels and bytes only", "with both causes"),
                              strict=True):  # fmt: skip
        for k, b in enumerate(sizes):
            sel = per_row["mbs"] == b
            ax.scatter(measured[sel], 1e3 * per_row[key][sel], s=10, alpha=0.6,
                       marker=SIZE_MARKERS[k % len(SIZE_MARKERS)],
                       color=PALETTE[(2 * k) % len(PALETTE)], label=f"{b}")  # fmt: skip
        ax.plot([lo, hi], [lo, hi], color="0.4", lw=0.8, ls="--")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo / 20, hi)
        ax.set_title(title)
        ax.set_xlabel("measured step time (ms)")
    axes[0].set_ylabel("predicted step time (ms)")
    axes[1].legend(fontsize=8, title="sequences a micro-batch", title_fontsize=8,
                   loc="lower right")
    fig.tight_layout()
    return fig


def strategy_style(strategy: str) -> dict[str, str]:
    """The colour and marker of ``strategy`` (:data:`STRATEGY_STYLES`); a strategy it does not
    list is refused, so that no two strategies fall back to one look."""
    if strategy not in STRATEGY_STYLES:
        raise KeyError(f"strategy: got {strategy!r}; expected one of {sorted(STRATEGY_STYLES)}")
    return dict(STRATEGY_STYLES[strategy])


def smallest_text_pt(fig: plt.Figure) -> float:
    """The size, in points, at which the smallest visible text of ``fig`` reaches a reader:
    its font size scaled by the column's width over the figure's (the page fits every figure
    to :data:`COLUMN_INCHES`)."""
    fig.draw_without_rendering()
    scale = COLUMN_INCHES / fig.get_figwidth()
    sizes = [t.get_fontsize() for t in fig.findobj(Text) if t.get_visible() and t.get_text()]
    return min(sizes) * scale


# --- Sentences ---------------------------------------------------------------------------------
def counted(
    k: int, n: int, noun: str, verbs: tuple[str, str] = ("is", "are"), plural: str | None = None
) -> str:
    """``k`` of ``n`` things as the subject of a clause, with its verb: "none of the 12 rows
    is", "one of the 12 rows is", "5 of the 12 rows are", "all 12 rows are" (``verbs`` is the
    verb's singular and plural, ``plural`` the noun's plural when it is not ``noun + "s"``).
    A count outside 0 to ``n`` is refused."""
    if not (isinstance(k, int) and isinstance(n, int) and 0 <= k <= n and n >= 1):
        raise ValueError(f"k, n: got {k!r}, {n!r}; expected whole numbers with 0 <= k <= n, n >= 1")
    many = plural or f"{noun}s"
    one, more = verbs
    if n == 1:
        return f"the one {noun} {one}" if k == 1 else f"the one {noun} {one} not"
    if k == n:
        return f"all {n:,} {many} {more}"
    if k == 0:
        return f"none of the {n:,} {many} {one}"
    return f"{'one' if k == 1 else f'{k:,}'} of the {n:,} {many} {one if k == 1 else more}"


def than(a: float, b: float) -> str:
    """``lower``, ``higher`` or ``the same``: ``a`` against ``b``, as a sentence glues an error
    whose direction it cannot know before the build."""
    return "the same" if abs(a - b) < 1e-9 else ("lower" if a < b else "higher")


def sentence(clause: str) -> str:
    """``clause`` as the start of a sentence: its first letter in capitals."""
    return clause[:1].upper() + clause[1:]


def bound_sentence(n_below: int, n_rows: int) -> str:
    """Whether the published rows sit at or below the ideal bound, said for the count there
    is: every row, all but a few (which the chapter's table lists), or none."""
    rows = f"{n_rows:,} rows with a throughput"
    if n_below == n_rows:
        return f"Every one of the {rows} sits at or below the bound."
    others = n_rows - n_below
    rest = ("the one above it is listed here" if others == 1
            else f"the {others:,} above it are listed here")  # fmt: skip
    if n_below == 0:
        return f"None of the {rows} sits at or below the bound; all of them are listed here."
    return (f"{sentence(counted(n_below, n_rows, 'row'))} at or below the bound "
            f"({n_below / n_rows:.0%}); {rest}.")  # fmt: skip


# --- Interactive -------------------------------------------------------------------------------
def scaling_widget(curves_by_gpu: dict) -> Any:
    """The strong-scaling curves of :func:`scaling_figure` for a GPU and a model a reader picks,
    with a mark at a GPU count: tokens per second per GPU of each strategy, as
    :func:`~dmlimits.measured.runs.strong_scaling` gives them (a gap where a configuration does
    not fit the GPUs' memory)."""
    gpus = list(curves_by_gpu)
    counts = [int(n) for n in runs.GPU_COUNTS]
    series = {}
    for i, gpu in enumerate(gpus):
        for j, shape in enumerate(confront.SHAPES):
            series[(i, j)] = [
                {"name": strategy, "x": [int(n) for n in c["gpus"]], "y": c["tokens_per_s_per_gpu"]}
                for strategy in runs.STRATEGIES
                for c in [curves_by_gpu[gpu][(shape, strategy)]]
            ]  # fmt: skip
    controls = [
        {"name": "gpu", "label": "GPU", "values": list(range(len(gpus))),
         "labels": [g.upper() for g in gpus], "initial": 0},
        {"name": "shape", "label": "model", "values": list(range(len(confront.SHAPES))),
         "labels": [transformer.shape(s).name for s in confront.SHAPES], "initial": 0},
        {"name": "gpus", "label": "GPUs", "values": counts,
         "labels": [f"{n:,}" for n in counts], "initial": len(counts) - 1},
    ]  # fmt: skip
    return interactive.curves(
        "strong-scaling",
        "Strong scaling at a fixed batch: move the GPU, the model and the count",
        controls,
        "gpus",
        "GPUs",
        "tokens per second per GPU",
        series,
        x_log=True,
        y_unit="tokens/s",
        summary="An interactive version of the figure above (needs JavaScript).",
    )


#: Where ``bench/bench_predict.py --lockbox`` records the lockbox's one score (issue #55): the
#: lockbox's own files are read by that benchmark alone; the book reads only this record.
LOCKBOX_SCORES = "lockbox/scores.json"


def lockbox_record() -> dict[str, Any] | None:
    """The lockbox's recorded score as ``bench/bench_predict.py --lockbox`` wrote it; ``None``
    before it is scored."""
    path = published.data_path(LOCKBOX_SCORES)
    if not path.is_file():
        return None
    return json.loads(path.read_text())


def model_unchanged(rec: dict[str, Any]) -> bool:
    """Whether the model still gives the predictions that were scored in ``rec``: its
    fingerprint (:func:`dmlimits.measured.confront.fingerprint`) against the recorded one."""
    return rec["fingerprint"] == confront.fingerprint()


def side_by_side_rows(rec: dict[str, Any]) -> list[dict[str, Any]]:
    """The recorded score's figures a row a set of runs: the development rows in sample and
    each source left out, the two files outside the fit (seen by the model's choices) and the
    lockbox; each with its rows, median MFU error in points, median step-time error across
    nodes and on one node, and the share inside the interval (``None`` where not measured)."""
    dev, box, op = rec["development"], rec["lockbox"], rec["development"]["outside_pooled"]
    st = dev["step_time"]
    n_dev = st["multi_node"]["rows"] + st["single_node"]["rows"]
    return [
        {"runs": "development, in sample", "rows": n_dev, "mfu": dev["mfu"]["in_sample_points"],
         "multi": st["multi_node"]["in_sample"], "single": st["single_node"]["in_sample"],
         "inside": dev["interval_coverage"]["development"]["inside"]},
        {"runs": "development, each source left out", "rows": n_dev,
         "mfu": dev["mfu"]["held_out_points"], "multi": st["multi_node"]["held_out"],
         "single": st["single_node"]["held_out"], "inside": None},
        {"runs": "MosaicML's and NVIDIA's files (seen by choices)", "rows": op["rows"],
         "mfu": op["mfu_points"], "multi": op["step_multi_node"],
         "single": op["step_single_node"], "inside": None},
        {"runs": "lockbox (scored once)", "rows": box["rows"], "mfu": box["mfu_points"],
         "multi": box["step_multi_node"], "single": box["step_single_node"],
         "inside": rec["interval_lockbox"]["inside"]},
    ]  # fmt: skip


def side_by_side_markdown(rec: dict[str, Any]) -> str:
    """:func:`side_by_side_rows` as a Markdown table."""
    lines = [
        "| runs | rows | MFU error, points | step time, across nodes | step time, one node "
        "| interval holds |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in side_by_side_rows(rec):
        inside = "" if r["inside"] is None else f"{r['inside']:.0%}"
        lines.append(f"| {r['runs']} | {r['rows']} | {r['mfu']:.1f} | {r['multi']:.0%} "
                     f"| {r['single']:.0%} | {inside} |")  # fmt: skip
    return "\n".join(lines)


def lockbox_regimes_markdown(rec: dict[str, Any]) -> str:
    """The lockbox's errors by regime (:func:`dmlimits.measured.confront.outside_by_regime`, as
    recorded) as a Markdown table, beside the development rows' held-out step-time error in
    the same regime where there are any."""
    lines = [
        "| regime (GPU, framework, scale, sequence) | rows | step time | MFU error, points "
        "| interval holds | development, held out |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, g in rec["lockbox_by_regime"].items():
        d = rec["development"]["by_regime"].get(name)
        mine = f"{d['held_out']:.0%}" if d else "no row"
        lines.append(f"| {name} | {g['rows']} | {g['step']:.0%} | {g['mfu_points']:.1f} "
                     f"| {g['inside']:.0%} | {mine} |")  # fmt: skip
    return "\n".join(lines)


def lockbox_facts(rec: dict[str, Any]) -> dict[str, Any]:
    """What the chapter and the appendix say of the lockbox's recorded score: its rows, files,
    commit and date; the headline figures; the worst
    regime and the long-input regimes (:data:`dmlimits.measured.confront.SEQUENCES`' longest
    bin) against the rest; where the intervals held by framework family; how many rows
    ``predict --runs`` flags as outside every validated regime; the development rows' widest
    context-parallel split; and ``holds``, whether the sentences' claims hold (the long-input
    regimes are the worst and every other regime does better than any of them, their rows fall
    outside their intervals more often, every scored row is flagged, and some long-input regime
    spans nodes)."""
    regimes = rec["lockbox_by_regime"]
    facts = {k: tuple(k.split(", ")) for k in regimes}

    def pooled(names: list[str], what: str = "inside") -> tuple[int, float]:
        n = sum(regimes[k]["rows"] for k in names)
        return n, sum(regimes[k][what] * regimes[k]["rows"] for k in names) / n

    longest = confront.SEQUENCES[-1][1]
    long_ones = [k for k in regimes if facts[k][3] == longest]
    short_ones = [k for k in regimes if facts[k][3] != longest]
    worst = max(regimes, key=lambda k: regimes[k]["step"])
    long_n, long_inside = pooled(long_ones)
    families = sorted({f[1] for f in facts.values()})
    by_family = {fam: pooled([k for k in regimes if facts[k][1] == fam]) for fam in families}
    flagged = sum(regimes[k]["rows"] for k in regimes if not confront.is_validated(facts[k]))
    box = rec["lockbox"]
    share = confront.INTERVAL_SHARE
    holds = (
        worst in long_ones
        and max(regimes[k]["step"] for k in short_ones)
        < min(regimes[k]["step"] for k in long_ones)
        and pooled(short_ones)[1] > long_inside
        and flagged == box["rows"]
        and any(facts[k][2] != confront.SCALES[0][1] for k in long_ones)
    )
    return {
        "rows": rec["coverage_lockbox"]["rows"],
        "modelled": rec["coverage_lockbox"]["modelled"],
        "files": len(rec["lockbox_rows_by_source"]),
        "commit": rec["commit"][:10],
        "date": rec["scored_at"][:10],
        "mfu": box["mfu_points"],
        "dev_mfu": rec["development"]["mfu"]["held_out_points"],
        "multi": box["step_multi_node"],
        "single": box["step_single_node"],
        "inside": rec["interval_lockbox"]["inside"],
        "promise": "as many as they promise" if rec["interval_lockbox"]["inside"] >= share
        else "fewer than they promise",
        "short_top": confront.SEQUENCES[-2][0],
        "short_max": max(regimes[k]["step"] for k in short_ones),
        "worst": regimes[worst]["step"],
        "worst_regime": worst,
        "long_rows": long_n,
        "long_inside": long_inside,
        "family_inside": "; ".join(f"{fam}, {round(n * inside):d} of {n:d}"
                                   for fam, (n, inside) in by_family.items()),
        "flagged": "every one" if flagged == box["rows"] else f"{flagged:d}",
        "dev_cp": max(runs.interpret(r).config.cp for r in runs.dev_rows()
                      if r["metric"] in runs.THROUGHPUT_METRICS),
        "holds": holds,
    }  # fmt: skip
