"""Figures and tables of the whole run: the search, the reproduction and the closed forms.

Every curve comes from :func:`dmlimits.search.sweeps.sweep` (cached per set of assumptions) or from
:mod:`dmlimits.costs.closed_forms`; the companion post's published curve is read from the project's
data file, with its source.  Tables are returned as Markdown for the notebooks to display.
"""

from __future__ import annotations

import math
from functools import cache
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.colors import ListedColormap
from matplotlib.patches import Patch

from dmlimits import search
from dmlimits.book.book_sweeps import CHOICE_ALTERNATIVES, authors_year
from dmlimits.book.figures import PALETTE, compute_axis, shared_line_styles, shared_marker_sizes
from dmlimits.book.glue import factor as as_factor
from dmlimits.book.glue import sci as pretty
from dmlimits.core import hardware, published
from dmlimits.core.scenario import PAPER_PRESETS, SCHEMA, Scenario, resolve, resolve_overrides
from dmlimits.costs import closed_forms, matmul, step
from dmlimits.costs import expert_parallel as epm
from dmlimits.costs import pipeline as ppm
from dmlimits.costs import tensor_parallel as tpm

MARKERS = ("o", "s", "^", "D", "v", "P", "X")


# --- Data --------------------------------------------------------------------------------------
@cache
def blog_curve() -> tuple[np.ndarray, np.ndarray]:
    """The companion post's H100 curve, digitized (``data/paper1_blog_figure_digitized.csv``;
    Erdil & Schneider-Joseph 2024, epoch.ai): compute (FLOP) and utilization."""
    rows = published.data_rows("paper1_blog_figure_digitized.csv")
    return (
        np.array([float(r["training_flop"]) for r in rows]),
        np.array([float(r["utilization"]) for r in rows]),
    )


def feasible(scn: Scenario) -> list[dict[str, Any]]:
    return [r for r in search.sweep(scn) if r["feasible"]]


def wall_between(scn: Scenario) -> tuple[float, float]:
    """The last feasible and the first infeasible grid point (``NaN`` when there is none)."""
    rows = search.sweep(scn)
    ok = [r["training_flop"] for r in rows if r["feasible"]]
    bad = [r["training_flop"] for r in rows if not r["feasible"]]
    return (ok[-1] if ok else math.nan, bad[0] if bad else math.nan)


def wall_phrases(scn: Scenario) -> dict[str, str]:
    """The reproduction chapter's words for where the latency wall stands, for any scenario:
    ``falls`` ends the description of the curve, ``caption`` says what the headline figure
    marks (:func:`annotate_regimes`), ``takeaway`` closes the chapter, ``wall`` completes
    "linear scaling ends at X and" where scenarios are set side by side.

    The sweep is a grid: the last feasible point is the largest model of the grid that some
    cluster trains in time, the first infeasible point the next model of the grid, which none
    does.  The wall lies between the two (the grid has no model in between), so the words name
    both and the figure hatches the gap.  Where every point of the sweep is feasible (a batch
    law that grows the batch fast enough) the wall lies beyond the sweep, and the words say so
    instead of naming a wall the sweep never reached."""
    last, first = wall_between(scn)
    if first == first:  # an infeasible grid point: the wall is within the sweep
        rest = [r["feasible"] for r in search.sweep(scn) if r["training_flop"] >= first]
        beyond = (
            f"from {pretty(first)} FLOP up no model of the sweep finishes in time"
            if not any(rest)
            else f"the model of the sweep at {pretty(first)} FLOP does not finish in time"
        )
        return {
            "falls": (f"falls until the last model of the sweep that finishes in time, at "
                      f"{pretty(last)} FLOP; for the next, at {pretty(first)} FLOP, no cluster "
                      "of any size can finish in time: the latency wall lies between the two."),
            "caption": (f"the last model of the sweep that finishes in time is at {pretty(last)} "
                        f"FLOP and the next, at {pretty(first)} FLOP, does not: the wall lies in "
                        f"the hatched gap between them, and the shaded region is infeasible "
                        f"({beyond})."),
            "takeaway": (f"the last run of the sweep that finishes in time is at {pretty(last)} "
                         f"FLOP, and the next, at {pretty(first)} FLOP, finishes on no cluster."),
            "wall": f"the wall comes after {pretty(last)}",
        }  # fmt: skip
    return {
        "falls": (f"falls up to the top of the sweep, {pretty(last)} FLOP, where a cluster still "
                  "finishes in time: in this scenario the latency wall lies beyond the sweep."),
        "caption": "every model of the sweep finishes in time, so no region is shaded.",
        "takeaway": (f"every run of the sweep, up to {pretty(last)} FLOP, finishes in time: the "
                     "wall lies beyond it."),
        "wall": f"the sweep ends, at {pretty(last)} FLOP, before any wall",
    }  # fmt: skip


def wall_opening(scn: Scenario) -> str:
    """The introduction's sentence on the latency wall, from the same grid points as
    :func:`wall_phrases`: the last model of the sweep that finishes in time and, where the sweep
    has one, the next, which finishes on no cluster; else that the wall lies beyond the sweep."""
    last, first = wall_between(scn)
    if first == first:
        return (f"The largest model of the sweep that still finishes in time needs "
                f"{pretty(last)} FLOP; the next, at {pretty(first)} FLOP, finishes on no cluster "
                "of any size. Between them stands the latency wall: the chain of layers and "
                "optimizer steps has waits that no number of GPUs can shorten.")  # fmt: skip
    return (f"Every model of the sweep, up to {pretty(last)} FLOP, finishes in time: in this "
            "scenario the latency wall, where waits that no number of GPUs can shorten stop "
            "the run, lies beyond the sweep.")  # fmt: skip


def utilization_at(scn: Scenario, compute: np.ndarray) -> np.ndarray:
    """The scenario's utilization interpolated in log compute (``NaN`` outside its feasible
    grid)."""
    rows = feasible(scn)
    x = np.log([r["training_flop"] for r in rows])
    y = np.array([r["utilization"] for r in rows])
    lc = np.log(np.asarray(compute, dtype=float))
    out = np.interp(lc, x, y)
    return np.where((lc >= x[0]) & (lc <= x[-1]), out, np.nan)


def blog_difference(scn: Scenario) -> dict[str, float]:
    """This book's curve against the published one at the digitized points it covers: the
    median and largest absolute difference in utilization, where the largest is, and how many
    points were compared."""
    c, u_pub = blog_curve()
    mine = utilization_at(scn, c)
    ok = np.isfinite(mine)
    diff = np.abs(mine[ok] - u_pub[ok])
    worst = int(np.argmax(diff))
    return {
        "median_abs": float(np.median(diff)),
        "max_abs": float(diff[worst]),
        "max_at_flop": float(c[ok][worst]),
        "mean_signed": float(np.mean(mine[ok] - u_pub[ok])),
        "points": int(ok.sum()),
        "digitized": len(c),
    }


def nearest(scn: Scenario, compute: float) -> dict[str, Any]:
    """The result of the sweep's grid point nearest ``compute`` (in log compute)."""
    return min(search.sweep(scn), key=lambda r: abs(math.log(r["training_flop"] / compute)))


# --- Figures -----------------------------------------------------------------------------------
def _finish(ax: plt.Axes, scn: Scenario | None, threshold: bool = True) -> None:
    compute_axis(ax)
    ax.set_ylabel("utilization")
    ax.set_ylim(
        0, 1 if scn is None else max(0.8, float(scn["hardware.effective_utilization"]) + 0.15)
    )
    if scn is not None and threshold:
        ax.axhline(search.linear_end_threshold(scn), color="0.5", lw=0.8, ls=":")


#: The colour of each cost that binds a grid point on an annotated utilization curve
#: (:func:`annotate_regimes`), keyed as ``search.LOSS_LABELS``: the
#: plateau (nothing binds), network bandwidth, matmuls below the effective rate, the bubble and
#: latency.
BINDING_COLOURS = {
    "none": PALETTE[4], "bandwidth": PALETTE[1], "matmul": PALETTE[2], "bubble": PALETTE[5],
    "latency": PALETTE[6],
}  # fmt: skip


def regimes(scn: Scenario) -> dict[str, Any]:
    """What :func:`annotate_regimes` marks, from the search's sweep: the feasible grid points
    grouped by the cost that binds each (``binding``: compute and utilization per cost, in the
    order of :data:`BINDING_COLOURS`), where linear scaling ends (the headline's grid point),
    and the last feasible and first infeasible grid points (``NaN`` when there is none)."""
    rows = feasible(scn)
    groups: dict[str, tuple[list[float], list[float]]] = {}
    for key in BINDING_COLOURS:
        chosen = [r for r in rows if r["binding"] == key]
        if chosen:
            groups[key] = ([r["training_flop"] for r in chosen], [r["utilization"] for r in chosen])
    last, first = wall_between(scn)
    return {
        "binding": groups,
        "linear_end": search.headline(scn)["linear_scaling_end_flop"],
        "last_feasible": last,
        "first_infeasible": first,
    }


def annotate_regimes(ax: plt.Axes, scn: Scenario) -> dict[str, Any]:
    """Annotate a utilization-against-compute axes with the scenario's regimes
    (:func:`regimes`): each feasible grid point coloured by the cost that binds it (a legend
    entry per cost present), the end of linear scaling as a dashed line labelled with its
    compute, the gap between the last model that finishes in time and the first that does not
    hatched and labelled as the latency wall, and the infeasible region beyond shaded.  Every
    compute is written by :func:`dmlimits.book.glue.sci`.  The compute axis must already be
    logarithmic (``figures.compute_axis``); returns what was marked."""
    marks = regimes(scn)
    for key, (x, y) in marks["binding"].items():
        ax.plot(x, y, ls="none", marker="o", ms=6, mec="white", mew=0.6, zorder=3,
                color=BINDING_COLOURS[key], label=f"binds: {search.LOSS_LABELS[key]}")  # fmt: skip
    top = ax.get_xaxis_transform()
    if marks["binding"]:
        x0 = min(min(x) for x, _ in marks["binding"].values())
        plateau = max(max(y) for _, y in marks["binding"].values())
        ax.text(x0, plateau + 0.04, "plateau", fontsize=8, color="0.2", ha="left", va="bottom")
    end, last, first = marks["linear_end"], marks["last_feasible"], marks["first_infeasible"]
    if math.isfinite(end):
        ax.axvline(end, color="0.35", lw=0.9, ls="--", zorder=1)
        ax.text(end / 1.3, 0.97, f"linear scaling ends\n{pretty(end)} FLOP", transform=top,
                ha="right", va="top", fontsize=8, color="0.2")  # fmt: skip
    if math.isfinite(first):
        left, right = ax.get_xlim()
        right = max(right, first * 10)
        ax.axvspan(last, first, facecolor="none", edgecolor="0.55", hatch="///", lw=0, zorder=0)
        ax.axvspan(first, right, color="0.85", zorder=0)
        ax.set_xlim(left, right)
        ax.text(last / 1.3, 0.97, f"latency wall\nlast run in time\n{pretty(last)} FLOP",
                transform=top, ha="right", va="top", fontsize=8, color="0.2")  # fmt: skip
        ax.text(first * 1.3, 0.97, "infeasible", transform=top, ha="left", va="top",
                fontsize=8, color="0.3")  # fmt: skip
    return marks


def below_axes(ax: plt.Axes) -> None:
    """The axes' legend in two columns under its compute axis, where an annotated curve's
    many entries cover no point and keep the figure as narrow as the page's column."""
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.17), ncol=2, fontsize=8)


def utilization_figure(
    scns: list[Scenario], labels: list[str] | None = None, published: bool = False,
    regimes_of: Scenario | None = None, title: str = "",
) -> plt.Figure:  # fmt: skip
    """Utilization against training compute, one curve per scenario (feasible grid points),
    with the published curve when asked and, for ``regimes_of``, its regimes marked
    (:func:`annotate_regimes`)."""
    fig, ax = plt.subplots()
    _draw_curves(ax, scns, labels)
    compute_axis(ax)  # logarithmic before any limit is read
    if published:
        c, u_pub = blog_curve()
        ax.plot(c, u_pub, "k--", lw=1.2, label="published (companion post, digitized)")
    if regimes_of is not None:
        annotate_regimes(ax, regimes_of)
    # The paper's threshold only when every curve shares it (one GPU's derate).
    same = len({float(s["hardware.effective_utilization"]) for s in scns}) == 1
    _finish(ax, scns[0], threshold=same)
    if regimes_of is not None:
        below_axes(ax)
    else:
        ax.legend(loc="lower left", fontsize=8)
    if title:
        ax.set_title(title, fontsize=10)
    fig.tight_layout()
    return fig


def headline_figure(scn: Scenario) -> plt.Figure:
    """The book's main result for the opening page: the scenario's utilization against
    training compute as a thin line through its grid points, annotated with its regimes
    (:func:`annotate_regimes`) and the paper's threshold for the end of linear scaling."""
    fig, ax = plt.subplots(figsize=(7.0, 4.0))
    rows = feasible(scn)
    ax.plot([r["training_flop"] for r in rows], [r["utilization"] for r in rows], color="0.6",
            lw=1.0, zorder=2, label=f"utilization ({scn.gpu_label})")  # fmt: skip
    compute_axis(ax)
    annotate_regimes(ax, scn)
    _finish(ax, scn)
    below_axes(ax)
    fig.tight_layout()
    return fig


def _draw_curves(ax: plt.Axes, scns: list[Scenario], labels: list[str] | None) -> None:
    for i, scn in enumerate(scns):
        rows = feasible(scn)
        ax.plot(
            [r["training_flop"] for r in rows], [r["utilization"] for r in rows],
            marker=MARKERS[i % len(MARKERS)], ms=3.5, lw=1.2, color=PALETTE[i % len(PALETTE)],
            label=(labels[i] if labels else scn.name),
        )  # fmt: skip


def comparison_figure(panels: list[tuple[str, list[Scenario]]]) -> plt.Figure:
    """Utilization curves, one panel per group of scenarios (dense, sparse), stacked: side by
    side, at the column's width, their legends of preset names were too small to read."""
    fig, axes = plt.subplots(len(panels), 1, figsize=(7.0, 4.2 * len(panels)), sharex=True,
                             squeeze=False)  # fmt: skip
    for ax, (title, scns) in zip(axes[:, 0], panels, strict=True):
        _draw_curves(ax, scns, None)
        # The paper's threshold only when every curve shares it (one GPU's derate).
        same = len({float(s["hardware.effective_utilization"]) for s in scns}) == 1
        _finish(ax, scns[0], threshold=same)
        ax.set_title(title, fontsize=10)
        ax.legend(loc="lower left", fontsize=9)
    for ax in axes[:-1, 0]:  # the shared compute axis is labelled under the last panel
        ax.set_xlabel("")
    fig.tight_layout()
    return fig


STRATEGY = (("TP", ("tp_model", "tp_ff")), ("DP", ("dp",)), ("PP", ("pp",)), ("EP", ("ep",)))


def strategy(scn: Scenario) -> dict[str, np.ndarray]:
    """log N_X / log N_GPU of each parallelism at every feasible grid point (the shares of the
    cluster's doublings each parallelism takes; they add up to one)."""
    rows = [r for r in feasible(scn) if r["n_gpu"] > 1]
    log_n = np.log([r["n_gpu"] for r in rows])
    out = {"compute": np.array([r["training_flop"] for r in rows])}
    for name, keys in STRATEGY:
        out[name] = np.log([math.prod(r[k] for k in keys) for r in rows]) / log_n
    return out


def strategy_figure(scns: list[Scenario]) -> plt.Figure:
    """Small multiples of :func:`strategy`, one panel per scenario."""
    n = len(scns)
    cols = 2 if n > 1 else 1
    rows_ = math.ceil(n / cols)
    fig, axes = plt.subplots(rows_, cols, figsize=(7.0, 2.8 * rows_), sharex=True, sharey=True,
                             squeeze=False)  # fmt: skip
    for ax, scn in zip(axes.flat, scns, strict=False):
        st = strategy(scn)
        for i, (name, _) in enumerate(STRATEGY):
            ax.plot(st["compute"], st[name], marker=MARKERS[i], ms=3, lw=1, color=PALETTE[i],
                    label=name)  # fmt: skip
        compute_axis(ax)
        ax.set_title(scn.name, fontsize=9)
        ax.set_ylim(-0.02, 1.02)
    for ax in axes[:-1].flat:
        ax.set_xlabel("")
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    for ax in axes[:, 0]:
        ax.set_ylabel(r"$\log N_X / \log N_{\mathrm{GPU}}$")
    axes.flat[0].legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    return fig


def decision_chart(scn: Scenario, m: dict[str, Any] | None = None) -> plt.Figure:
    """Which parallelism when: model size against cluster size, each cell coloured by the
    parallelisms of the fastest configuration the search finds there
    (:func:`~dmlimits.search.results.parallelism_map`), pale where that configuration cannot train
    the model in time, white where none fits; the line is the cluster the search chooses for each
    model (its smallest that trains in time)."""
    m = m or search.parallelism_map(scn)
    names = sorted({x for row in m["labels"] for x in row if x}, key=lambda x: (len(x), x))
    code = np.full(m["in_time"].shape, np.nan)
    for a, row in enumerate(m["labels"]):
        for i, label in enumerate(row):
            if label:
                code[a, i] = names.index(label)
    fig, ax = plt.subplots(figsize=(7.6, 4.6))
    colours = [PALETTE[k % len(PALETTE)] for k in range(len(names))]
    cmap = ListedColormap(colours)
    x_edges = np.sqrt(m["params"][1:] * m["params"][:-1])
    x_edges = np.concatenate([[m["params"][0] ** 2 / x_edges[0]], x_edges,
                              [m["params"][-1] ** 2 / x_edges[-1]]])  # fmt: skip
    for a in range(len(m["params"])):
        g = m["gpus"][a]
        y_edges = np.concatenate([g / np.sqrt(2), [g[-1] * np.sqrt(2)]])
        for fast, alpha in ((True, 1.0), (False, 0.35)):
            shown = np.where(m["in_time"][a] == fast, code[a], np.nan)[:, None]
            if np.isfinite(shown).any():
                ax.pcolormesh(x_edges[a : a + 2], y_edges, shown, cmap=cmap, vmin=-0.5,
                              vmax=len(names) - 0.5, alpha=alpha, shading="flat")  # fmt: skip
    chosen = [(r["n_params_total"], r["n_gpu"]) for r in search.sweep(scn)
              if r["feasible"] and x_edges[0] <= r["n_params_total"] <= x_edges[-1]]  # fmt: skip
    if chosen:
        xs, ys = zip(*chosen, strict=True)
        ax.plot(xs, ys, color="black", lw=1.4, label="the cluster the search chooses")
    ax.set_xscale("log")
    ax.set_yscale("log", base=2)
    ax.set_xlim(x_edges[0], x_edges[-1])
    ax.set_xlabel("model parameters")
    ax.set_ylabel("GPUs in the cluster")
    handles = [Patch(color=c, label=n) for c, n in zip(colours, names, strict=True)]
    handles.append(Patch(color="0.8", label="pale: cannot finish in time"))
    ax.legend(handles=handles + ax.get_legend_handles_labels()[0], fontsize=7,
              loc="upper left", bbox_to_anchor=(1.02, 1.0))  # fmt: skip
    fig.tight_layout()
    return fig


#: What the ideal part of a step is called (:func:`step_split`), in the figure and the explorer.
IDEAL_LABEL = "matmuls at the effective rate"


def step_split(scn: Scenario, r: dict[str, Any]) -> dict[str, float]:
    """A result's step split into the ideal matmul time (its useful work at the effective
    rate) and the four losses (seconds); the parts add up to the step when the losses account
    for all of it."""
    ideal = r["utilization"] * r["t_step"] / float(scn["hardware.effective_utilization"])
    return {"ideal": ideal, **{k: r[f"loss_{k}"] for k in search.LOSSES}}


#: A part of a step under this share of it is too narrow to see in :func:`step_split_figure`
#: (under a pixel of the bar at the book's width): the figure leaves it out of the bar and the
#: legend, and :func:`step_split_unseen` names it for the caption.
VISIBLE_SHARE = 0.005


def step_split_unseen(scn: Scenario, r: dict[str, Any]) -> list[str]:
    """The parts of :func:`step_split` under :data:`VISIBLE_SHARE` of the step (keys, in the
    split's order): too small to see in :func:`step_split_figure`."""
    parts = step_split(scn, r)
    return [k for k, v in parts.items() if v < VISIBLE_SHARE * r["t_step"]]


def step_split_unseen_text(scn: Scenario, r: dict[str, Any]) -> str:
    """The caption's sentence on the parts too small to see (:func:`step_split_unseen`); empty
    when every part shows."""
    names = {"ideal": "the matmuls at the effective rate", "matmul": "the matmuls' shortfall",
             "bandwidth": "bandwidth not hidden", "bubble": "the bubble",
             "latency": "exposed latency"}  # fmt: skip
    unseen = [names[k] for k in step_split_unseen(scn, r)]
    if not unseen:
        return ""
    listed = unseen[0] if len(unseen) == 1 else ", ".join(unseen[:-1]) + " and " + unseen[-1]
    verb = "is" if len(unseen) == 1 else "are"
    return (f" In this scenario {listed} {verb} under {VISIBLE_SHARE:.1%} of the step, too "
            "small to see, and left out of the bar and its legend.")  # fmt: skip


def step_split_figure(scn: Scenario, r: dict[str, Any]) -> plt.Figure:
    """One horizontal bar: the step of a result, split as :func:`step_split`; the parts too
    small to see (:func:`step_split_unseen`) are left out of the bar and the legend, each part
    keeping its colour."""
    parts = step_split(scn, r)
    unseen = set(step_split_unseen(scn, r))
    labels = {"ideal": IDEAL_LABEL, **search.LOSS_LABELS}
    fig, ax = plt.subplots(figsize=(7.0, 2.6))
    left = 0.0
    for i, (k, v) in enumerate(parts.items()):
        if k not in unseen:
            ax.barh([0], [v * 1e3], left=left, color=PALETTE[i % len(PALETTE)], label=labels[k])
        left += v * 1e3
    ax.set_yticks([])
    ax.set_xlabel("time of one step (ms)")
    ax.grid(axis="y", visible=False)
    ax.legend(fontsize=9, ncol=2, loc="lower center", bbox_to_anchor=(0.5, 1.02))
    fig.tight_layout()
    return fig


def sensitivity_figure(scns: list[Scenario], alphas: np.ndarray) -> plt.Figure:
    """Critical compute and the latency wall against the batch-to-depth exponent alpha, one
    curve per scenario; each scenario's own alpha (its laws' exponent) marked."""
    fig, axes = plt.subplots(1, 2, figsize=(7.0, 3.6), sharey=True)
    own = [closed_forms.implied_alpha(scn) for scn in scns]
    for ax, name in zip(axes, ("critical_compute", "latency_wall"), strict=True):
        # Scenarios may share a curve (the latency wall does not depend on the GPU's speed):
        # equal curves alternate their colours' dashes, equal dots are drawn as rings.
        curves = [closed_forms.evaluate(name, scn, alphas) for scn in scns]
        dots = [(a0, closed_forms.evaluate(name, scn, np.array([a0]))[0])
                for scn, a0 in zip(scns, own, strict=True)]  # fmt: skip
        styles = [st if np.isfinite(c).any() else "-"
                  for st, c in zip(shared_line_styles(curves), curves, strict=True)]  # fmt: skip
        sizes = shared_marker_sizes(dots, 4.0)
        for i, scn in enumerate(scns):
            # Critical compute is infinite with unbounded bandwidth between nodes: not drawn.
            finite = np.isfinite(curves[i])
            ax.plot(alphas[finite], curves[i][finite], color=PALETTE[i], lw=1.3, ls=styles[i],
                    label=scn.gpu_label)  # fmt: skip
            if np.isfinite(dots[i][1]):
                ax.plot(*dots[i], "o", color=PALETTE[i], ms=sizes[i])
        if not any(np.isfinite(c).any() for c in curves):
            pad = plt.rcParams["axes.xmargin"] * (alphas[-1] - alphas[0])  # as the other panel
            ax.set_xlim(alphas[0] - pad, alphas[-1] + pad)
            ax.text(0.5, 0.5, "infinite: unbounded bandwidth\nbetween nodes, not drawn",
                    transform=ax.transAxes, ha="center", va="center", fontsize=9,
                    color="0.3")  # fmt: skip
    for ax, title in zip(axes, ("critical compute", "latency wall"), strict=True):
        ax.set_yscale("log")
        ax.set_xlabel(r"exponent $\alpha$ of $B/L$ against compute")
        ax.set_title(title, fontsize=10)
    axes[0].set_ylabel("training compute (FLOP)")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    return fig


def analytic_vs_simulated(scns: list[Scenario]) -> list[dict[str, Any]]:
    """For each scenario the closed forms under its own batch and depth laws beside the
    simulated limits: critical compute and the linear-scaling end, the latency wall and the
    last feasible grid point (closed forms ``NaN`` for sparse scenarios, where they do not
    apply), and ``wall_reached``: whether the sweep has an infeasible point at all.  Where it
    has none the last feasible point is the sweep's end, and the wall lies beyond it."""
    out = []
    for scn in scns:
        h = search.headline(scn)
        out.append({
            "scenario": scn.name, "t_crit": h["t_crit_own_flop"],
            "linear_end": h["linear_scaling_end_flop"], "t_limit": h["t_limit_own_flop"],
            "last_feasible": h["last_feasible_flop"],
            "wall_reached": math.isfinite(wall_between(scn)[1]),
            "alpha": closed_forms.implied_alpha(scn),
        })  # fmt: skip
    return out


#: The utilization, as a share of the plateau, below which :func:`latency_paid_effect` counts a
#: run as past the latency wall on the grid.
WALL_SHARE = 0.1


def latency_paid_effect(scn: Scenario, share: float = WALL_SHARE) -> dict[str, dict[str, float]]:
    """What paying the messages' latency for every microbatch (``search.latency_paid``) changes
    in the search: per rule, the interpolated end of linear scaling, the first feasible grid
    point whose utilization is below ``share`` of the plateau (the wall as the grid sees it) and
    the last feasible point."""
    if not 0 < share < 1:
        raise ValueError(f"share: got {share!r}; expected a fraction of the plateau in (0, 1)")
    out = {}
    for rule in ("step", "microbatch"):
        s = resolve_overrides(scn, {"search.latency_paid": rule})
        h = search.headline(s)
        floor = share * h["plateau_utilization"]
        below = [r["training_flop"] for r in search.sweep(s)
                 if r["feasible"] and r["utilization"] < floor]  # fmt: skip
        out[rule] = {
            "crossing": h["linear_scaling_crossing_flop"],
            "wall": below[0] if below else math.nan,
            "last_feasible": h["last_feasible_flop"],
        }
    return out


def latency_paid_text(effect: dict[str, dict[str, float]]) -> str:
    """The sentence that reports :func:`latency_paid_effect`: how far the end of linear scaling,
    the wall on the grid and the last feasible point move, each only where both rules have
    it."""
    a, b = effect["step"], effect["microbatch"]
    names = {
        "crossing": "the interpolated end of linear scaling",
        "wall": f"the first grid point below {WALL_SHARE:.0%} of the plateau's utilization",
        "last_feasible": "the last feasible point",
    }
    parts = []
    for key, name in names.items():
        x, y = a[key], b[key]
        if not (math.isfinite(x) and math.isfinite(y)):
            parts.append(f"{name} is not reached under both rules")
        elif x == y:
            parts.append(f"{name} stays at {pretty(x)} FLOP")
        else:
            way = "earlier" if y < x else "later"
            ratio = max(x, y) / min(x, y)
            parts.append(f"{name} moves from {pretty(x)} to {pretty(y)} FLOP "
                         f"({as_factor(ratio)} times {way})")  # fmt: skip
    return "; ".join(parts[:-1]) + " and " + parts[-1] + "."


def latency_simulation_table(stages: tuple[int, ...], multiples: tuple[int, ...]) -> str:
    """For each pipeline depth and microbatch count (a multiple of the depth), the latencies a
    step pays across stage boundaries in the schedule simulation (1F1B; ZB-H2 where it has the
    microbatches it needs), beside the one chain ``2 (N_PP - 1)`` the search counts."""
    lines = [
        "| Stages | Microbatches | Simulated, 1F1B | Simulated, zero bubble | Counted per step "
        "| Counted per microbatch |",
        "|---|---|---|---|---|---|",
    ]
    for n in stages:
        for k in multiples:
            m = k * n
            zb = (f"{ppm.latency_slots(n, m, order='zero-bubble'):g}"
                  if m >= ppm.least_microbatches(n, zero_bubble=True) else "—")  # fmt: skip
            chain = 2 * (n - 1)
            lines.append(
                f"| {n} | {m} | {ppm.latency_slots(n, m):g} | {zb} | {chain} | {chain * m} |"
            )
    return "\n".join(lines)


#: A setting whose search limit is more than this factor from its closed form is named by
#: :func:`analytic_figure` beside its point.
OFF_DIAGONAL = 3.0


def off_diagonal(rows: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """The (setting, limit) pairs of :func:`analytic_vs_simulated` rows whose search limit is
    more than :data:`OFF_DIAGONAL` times from its closed form, either way: the points
    :func:`analytic_figure` names (``limit`` ``"linear_end"`` or ``"last_feasible"``)."""
    out = []
    for r in rows:
        for a, b in (("t_crit", "linear_end"), ("t_limit", "last_feasible")):
            x, y = r[a], r[b]
            if math.isfinite(x) and math.isfinite(y) and x > 0:
                if not 1 / OFF_DIAGONAL <= y / x <= OFF_DIAGONAL:
                    out.append((r["scenario"], b))
    return out


#: A setting whose linear scaling ends before this share of its critical compute is explained by
#: :func:`early_ends_text`.
EARLY_SHARE = 0.5


def early_ends_text(rows: list[dict[str, Any]], scns: list[Scenario]) -> str:
    """The closed-forms chapter's sentence on the dense settings whose linear scaling ends
    before :data:`EARLY_SHARE` of their critical compute (``rows`` from
    :func:`analytic_vs_simulated`, ``scns`` the settings by name): what binds there, and why
    critical compute misses it.  Settings with the same cause share one clause, so that no
    explanation is repeated word for word; empty when no setting ends early."""
    by_name = {x.name: x for x in scns}
    groups: dict[str, list[tuple[str, float]]] = {}
    for r in rows:
        if not (math.isfinite(r["t_crit"]) and math.isfinite(r["linear_end"])):
            continue
        if r["linear_end"] >= EARLY_SHARE * r["t_crit"]:
            continue
        setting = by_name[r["scenario"]]
        at = next(x for x in search.sweep(setting) if x["training_flop"] == r["linear_end"])
        cause = f"the cost that binds is {search.LOSS_LABELS[at['binding']]}"
        if at["binding"] == "matmul":
            flat = (
                setting["network.inter_node.bandwidth"] >= setting["network.intra_node.bandwidth"]
            )
            cause += (": critical compute counts the traffic of the network and of HBM, not the "
                      "fixed cost of a kernel and the traffic on the chip that slow a small "
                      "shard's matmuls" + (", and on a network as fast between nodes as within "
                                           "them those fall short long before the network's "
                                           "traffic shows" if flat else ""))  # fmt: skip
        groups.setdefault(cause, []).append((r["scenario"], r["linear_end"] / r["t_crit"]))
    clauses = []
    for cause, items in groups.items():
        names = _and([name for name, _ in items])
        ratios = _and([f"{ratio:.3g}" for _, ratio in items])
        their = "its" if len(items) == 1 else "their"
        verb = "ends" if len(items) == 1 else "end"
        respectively = ", respectively," if len(items) > 1 else ""
        clauses.append(f"{names} {verb} linear scaling at {ratios} times {their} critical "
                       f"compute{respectively} where {cause}")  # fmt: skip
    return "" if not clauses else " " + "; ".join(clauses) + "."


def _and(words: list[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def analytic_figure(rows: list[dict[str, Any]]) -> plt.Figure:
    """Simulated against analytic, both limits, on log axes with the diagonal; each point more
    than :data:`OFF_DIAGONAL` times off it named by its setting (:func:`off_diagonal`)."""
    fig, ax = plt.subplots(figsize=(5.2, 4.6))
    pairs = (("t_crit", "linear_end", "critical compute / linear-scaling end", "o"),
             ("t_limit", "last_feasible", "latency wall / last feasible point", "s"))  # fmt: skip
    lo, hi = math.inf, 0.0
    for i, (a, b, label, m) in enumerate(pairs):
        x = np.array([r[a] for r in rows])
        y = np.array([r[b] for r in rows])
        ok = np.isfinite(x) & np.isfinite(y)
        # A sweep with no infeasible point ends before the wall: its last point is hollow.
        short = np.array([b == "last_feasible" and not r["wall_reached"] for r in rows])
        ax.plot(x[ok & ~short], y[ok & ~short], m, color=PALETTE[i], ms=5, label=label,
                alpha=0.8)  # fmt: skip
        if (ok & short).any():
            ax.plot(x[ok & short], y[ok & short], m, color=PALETTE[i], ms=5, mfc="none",
                    label="end of a sweep that never meets the wall")  # fmt: skip
        if ok.any():
            lo, hi = min(lo, x[ok].min(), y[ok].min()), max(hi, x[ok].max(), y[ok].max())
        for k in np.flatnonzero(ok):  # a setting far from its closed form, named
            if not 1 / OFF_DIAGONAL <= y[k] / x[k] <= OFF_DIAGONAL:
                ax.annotate(rows[k]["scenario"], (x[k], y[k]), xytext=(5, -3),
                            textcoords="offset points", fontsize=7, color=PALETTE[i],
                            va="top")  # fmt: skip
    ax.plot([lo / 3, hi * 3], [lo / 3, hi * 3], color="0.5", lw=0.8, ls="--")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("closed form (FLOP)")
    ax.set_ylabel("search (FLOP)")
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    return fig


# --- Tables ------------------------------------------------------------------------------------
def sci(x: float, digits: int = 3) -> str:
    """A number for a Markdown table: ``2.05e28`` as ``$2.05 \\times 10^{28}$``, ``NaN`` as a
    dash, and (the rule of :func:`dmlimits.book.glue.sci`) a whole number below ten million as a
    count with thousands separators: 4,096 GPUs, never ``$4.10 \\times 10^{3}$``."""
    if not (isinstance(x, int | float) and math.isfinite(x)):
        return "—" if x != math.inf else "∞"
    if float(x).is_integer() and abs(x) < 1e7:
        return f"{int(x):,}"
    mant, exp = f"{x:.{digits - 1}e}".split("e")
    return f"${mant} \\times 10^{{{int(exp)}}}$"


def headline_table(scns: list[Scenario]) -> str:
    """One row per scenario: where linear scaling ends (the grid point, the feasible grid
    point before it and the crossing interpolated between them: the grid's spacing decides
    the end only within that bracket), the plateau, the last feasible point and the two
    closed forms under the scenario's own laws (a dash for sparse scenarios).  A last feasible
    point that is the end of a sweep in which every run finishes in time is marked so."""
    lines = [
        "| Scenario | Linear scaling ends (FLOP) | Grid point before | Crossing, interpolated "
        "| Plateau utilization | Last feasible (FLOP) | Critical compute (FLOP) "
        "| Latency wall, closed form (FLOP) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for scn in scns:
        h = search.headline(scn)
        end = "" if math.isfinite(wall_between(scn)[1]) else " (the sweep's end)"
        lines.append(
            f"| `{scn.name}` | {sci(h['linear_scaling_end_flop'])} | "
            f"{sci(h['linear_scaling_before_flop'])} | {sci(h['linear_scaling_crossing_flop'])} | "
            f"{h['plateau_utilization']:.3f} | {sci(h['last_feasible_flop'])}{end} | "
            f"{sci(h['t_crit_own_flop'])} | {sci(h['t_limit_own_flop'])} |"
        )
    return "\n".join(lines)


def reference_table(scns: list[Scenario]) -> str:
    """One row per paper setting: how the search compares with the authors' final code run
    for the same setting (``search.reference_summary``): their feasible grid points, how many
    this search finds and how many are within the tolerance, and both linear-scaling ends
    with their difference."""
    lines = [
        "| Setting | Authors' feasible points | Found here | Within tolerance | Same configuration "
        "| Linear scaling ends here (FLOP) | The authors' (FLOP) | Difference |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for scn in scns:
        r = search.reference_summary(scn)
        diff = r["linear_end_ratio"] - 1
        diff = 0.0 if abs(diff) < 5e-4 else diff  # no "-0.0%"
        lines.append(
            f"| `{r['setting']}` | {r['points']} | {r['found']} | {r['within']} | "
            f"{r['same_configuration']} | {sci(r['linear_end'])} | "
            f"{sci(r['linear_end_reference'])} | "
            f"{'—' if diff != diff else '0' if diff == 0 else f'{diff:+.1%}'} |"
        )
    return "\n".join(lines)


def reference_clause(ref: dict[str, Any], tolerance: float) -> str:
    """How the search compares with the authors' code at their grid points, for the
    reproduction chapter's sentence (``ref`` from ``search.reference_summary``): "at every one
    of the N grid points" where a count is all of them, "at K of the N" otherwise, never "N of
    the N"."""
    n = ref["points"]

    def at(k: int) -> str:
        return "at all of them" if k == n else f"at {k}" if k else "at none"

    found = (f"the search finds a configuration at every one of the {n} grid points where they "
             "do" if ref["found"] == n else
             f"the search finds a configuration at {ref['found']} of the {n} grid points where "
             "they do")  # fmt: skip
    return (f"{found}, is within {tolerance:.2f} utilization of theirs {at(ref['within'])} "
            f"(largest difference {pretty(ref['max_difference'], 2)}) and picks the same cluster "
            f"and degrees {at(ref['same_configuration'])}")  # fmt: skip


def reference_exceptions(scns: list[Scenario]) -> dict[str, Any]:
    """The grid points where the search and the authors' code differ in configuration, and
    how many of those agree once only the year is the authors' (their search notebook's
    3.154e7 s): a run that finishes between the two budgets is in time for one and late for
    the other."""
    out = {"points": 0, "differ": 0, "explained_by_year": 0, "settings": []}
    for scn in scns:
        rows = search.reference_comparison(scn)
        out["points"] += len(rows)
        bad = [r for r in rows if not r["same_configuration"]]
        if not bad:
            continue
        out["differ"] += len(bad)
        out["settings"].append(search.reference_setting(scn))
        again = search.reference_comparison(authors_year(scn))
        fixed = {r["training_flop"] for r in again if r["same_configuration"]}
        out["explained_by_year"] += sum(r["training_flop"] in fixed for r in bad)
    return out


def configs_table(scn: Scenario, computes: list[float]) -> str:
    """The optimal configurations at the grid points nearest ``computes``, with what binds."""
    lines = [
        "| Compute (FLOP) | Parameters | Layers | Batch (tokens) | GPUs | TP (model × ff) | PP (v) "
        "| DP | EP | Microbatches | Schedule | Utilization | What binds |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    seen = set()
    for c in computes:
        r = nearest(scn, c)
        if r["training_flop"] in seen or not r["feasible"]:
            continue
        seen.add(r["training_flop"])
        pp = f"{r['pp']:.0f}" + (f" ({r['v']:.0f})" if r["v"] > 1 else "")
        lines.append(
            f"| {sci(r['training_flop'])} | {sci(r['n_params_total'])} | {r['layers']:.0f} | "
            f"{sci(r['batch_tokens'])} | {sci(r['n_gpu'])} | {r['tp_model']:.0f} × "
            f"{r['tp_ff']:.0f} | {pp} | {r['dp']:.0f} | {r['ep']:.0f} | {r['m']:.0f} | "
            f"{'zero bubble' if r['zero_bubble'] else '1F1B'} | {r['utilization']:.3f} | "
            f"{search.LOSS_LABELS[r['binding']]} |"
        )
    return "\n".join(lines)


def choices_table() -> str:
    """The search's modelling choices: every ``search.*`` key, its default, the chapter that
    derives the default, and what it decides."""
    derived_in = {
        key: module.CHAPTER for module in (ppm, tpm, epm, step) for key in module.CHAPTER_RULES
    }
    lines = ["| Key | Default | Derived in | What it decides |", "|---|---|---|---|"]
    for key, f in SCHEMA.items():
        if key.startswith("search."):
            default = str(f.default).lower() if f.kind == "bool" else f.default
            where = derived_in.get(key)
            ref = f"{{ref}}`chapter-{where.replace('_', '-')}`" if where else "—"
            lines.append(f"| `{key}` | `{default}` | {ref} | {f.doc} |")
    return "\n".join(lines)


def factor(a: float, b: float) -> str:
    """``b / a`` as a factor for a table (``1.07×``), a dash when either is missing."""
    if not (math.isfinite(a) and math.isfinite(b) and a > 0 and b > 0):
        return "—"
    return f"{b / a:.3g}×"


def analytic_table(rows: list[dict[str, Any]]) -> str:
    """The closed forms beside the search, with each search result as a factor of its closed
    form; a dash where a closed form does not apply (sparse) or a limit is missing.  Where the
    sweep never meets the wall its last point is marked as the sweep's end, and the factor is
    a lower bound."""
    lines = [
        "| Scenario | $\\alpha$ | Critical compute | Linear scaling ends | Factor "
        "| Latency wall (closed form) | Last feasible | Factor |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        short = not r["wall_reached"]
        end = " (the sweep's end)" if short else ""
        bound = "≥ " if short and math.isfinite(r["t_limit"]) else ""
        lines.append(
            f"| `{r['scenario']}` | {r['alpha']:.3f} | {sci(r['t_crit'])} | "
            f"{sci(r['linear_end'])} | {factor(r['t_crit'], r['linear_end'])} | "
            f"{sci(r['t_limit'])} | {sci(r['last_feasible'])}{end} | {bound}"
            f"{factor(r['t_limit'], r['last_feasible'])} |"
        )
    return "\n".join(lines)


def choice_effects(scn: Scenario) -> list[dict[str, Any]]:
    """For the scenario and each alternative of
    :data:`~dmlimits.book.book_sweeps.CHOICE_ALTERNATIVES`: where linear
    scaling ends, the last feasible point and, when the scenario is one of the paper's
    settings as published (no other change), how many of the authors' grid points are within
    :data:`~dmlimits.search.reference.REFERENCE_TOLERANCE` utilization of theirs."""
    reference = _is_reference(scn)
    out = []
    for label, changes in {"the defaults": {}, **CHOICE_ALTERNATIVES}.items():
        variant = resolve_overrides(scn, changes) if changes else scn
        h = search.headline(variant)
        row = {
            "choice": label,
            "linear_end": h["linear_scaling_end_flop"],
            "last_feasible": h["last_feasible_flop"],
            "within": None,
            "compared": None,
        }
        if reference:
            summary = search.reference_summary(variant, reference)
            row["within"] = summary["within"]
            row["compared"] = summary["points"]
        out.append(row)
    return out


def _is_reference(scn: Scenario) -> str | None:
    """The paper's preset the scenario is, unchanged, or ``None``."""
    return next(
        (name for name in PAPER_PRESETS if dict(scn.values) == dict(resolve(name).values)), None
    )


def choice_effects_table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| Choice | Linear scaling ends (FLOP) | Last feasible (FLOP) "
        "| Within tolerance of the authors |",
        "|---|---|---|---|",
    ]
    for r in rows:
        within = f"{r['within']} of {r['compared']}" if r["within"] is not None else "—"
        lines.append(
            f"| {r['choice']} | {sci(r['linear_end'])} | {sci(r['last_feasible'])} | {within} |"
        )
    return "\n".join(lines)


#: Why each loss grows at scale: glued where the book names the cost that binds.
BINDING_EXPLANATIONS = {
    "matmul": "each GPU's shard of every matrix is so small that its matmuls run far below the "
    "effective rate, bound by memory traffic and the fixed cost of a kernel",
    "bandwidth": "the transfers of tensor, pipeline and expert parallelism outlast the matmuls "
    "they should hide behind",
    "bubble": "the pipeline idles while it fills and drains, for lack of microbatches",
    "latency": "the chain of messages through the layers of a step is longer than the work",
    "none": "nothing: every loss is under one percent of the step",
    "infeasible": "no configuration finishes in time",
}


def move_phrase(before: float, after: float, what: str = "it") -> str:
    """'leaves it at X FLOP' or 'moves it from X to Y FLOP (a factor of Z)', for glued prose."""
    if not (math.isfinite(before) and math.isfinite(after)):
        return f"leaves {what} undefined"
    if f"{before:.3g}" == f"{after:.3g}":
        return f"leaves {what} at {pretty(before)} FLOP"

    ratio = after / before
    how = (
        f"a factor of {as_factor(ratio)}" if ratio >= 1
        else f"down by a factor of {as_factor(1 / ratio)}"
    )  # fmt: skip
    return f"moves {what} from {pretty(before)} to {pretty(after)} FLOP ({how})"


def departure_from_h100(scn: Scenario) -> str:
    """How a build departs from the paper's H100 setting, whose results are the published ones,
    for glued prose: ``""`` when it does not, ``"runs the B200 ..."`` for another GPU, else
    ``"changes"`` and the keys it changes."""
    if scn["gpu"] != "h100":
        return f"runs the {scn.gpu_label}"
    changed = sorted(scn.differences(resolve("h100")))
    return "changes " + ", ".join(changed) if changed else ""


def cluster_change(before: dict[str, Any], after: dict[str, Any]) -> str:
    """What a changed assumption does to the cluster that trains one model, for glued prose:
    ``before`` and ``after`` are that model's rows of two sweeps (:func:`nearest`)."""
    n0, n1 = float(before["n_gpu"]), float(after["n_gpu"])
    u0, u1 = float(before["utilization"]), float(after["utilization"])
    way = "rises" if u1 > u0 + 5e-4 else "falls" if u1 < u0 - 5e-4 else "stays"
    util = f"utilization {way} {'at' if way == 'stays' else 'to'} {u1:.3f}"
    if n1 < n0:
        return (
            f"a smaller cluster finishes in time: the search takes {pretty(n1)} GPUs instead "
            f"of {pretty(n0)}, each with a larger share of every matmul, and {util}"
        )
    if n1 > n0:
        return (
            f"the search needs a larger cluster, {pretty(n1)} GPUs instead of {pretty(n0)}, "
            f"and {util}"
        )
    return f"the search keeps the cluster of {pretty(n1)} GPUs, and {util}"


def trend_word(first: float, last: float, tolerance: float = 0.05) -> str:
    """'rises', 'falls' or 'stays about level' between two shares."""
    if last > first + tolerance:
        return "rises"
    if last < first - tolerance:
        return "falls"
    return "stays about level"


#: The scenario keys each binding cost depends on: the memory level or arithmetic that binds a
#: matmul, and the losses of :data:`~dmlimits.search.engine.LOSSES` at the step's level.
_MATMUL_KEYS = {
    "arithmetic": ("hardware.flop_per_clock_per_thread", "hardware.max_clock", "hardware.sms",
                   "hardware.threads_per_sm", "hardware.effective_utilization"),
    "hbm": ("hardware.hbm_bandwidth", "model.word_bytes"),
    "l2": ("hardware.l2_bandwidth", "hardware.l2_size", "model.word_bytes"),
    "shared": ("hardware.max_clock", "hardware.sms", "hardware.effective_utilization",
               "hardware.register_file_per_block", "hardware.blocks_per_sm",
               "hardware.tensor_memory_per_sm", "hardware.mma_sms",
               "hardware.distributed_shared_memory", "model.word_bytes"),
}  # fmt: skip
_LOSS_KEYS = {
    "bandwidth": ("network.intra_node.bandwidth", "network.inter_node.bandwidth",
                  "network.node_size", "model.word_bytes"),
    "latency": ("network.latency", "hardware.kernel_latency"),
    "bubble": (),
    "none": (),
}  # fmt: skip


def _binding_keys(scn: Scenario, r: dict[str, Any], loss: bool) -> tuple[str, tuple[str, ...]]:
    """What binds a result and the keys it depends on: the matmul's binding level (the
    plateau), or the step's binding loss (the end of linear scaling)."""
    shard = (r["d_model"] / r["tp_model"], scn["model.ff_ratio"] * r["d_model"] / r["tp_ff"])
    level = str(matmul.level_times(scn, shard[1], shard[0], r["nanobatch"], "forward")["binding"])
    if not loss or r["binding"] == "matmul":
        keys = _MATMUL_KEYS[level] + (("hardware.kernel_latency",) if loss else ())
        return f"matmuls bound by {matmul.LEVEL_LABELS[level]}", keys
    return search.LOSS_LABELS[r["binding"]], _LOSS_KEYS[r["binding"]]


def estimates_deciding(scn: Scenario) -> list[dict[str, str]]:
    """The values of ``scn``'s GPU preset that are estimates or borrowed from another GPU
    (their source says so) and that decide one of its results: the plateau (through what binds
    its best matmul), the end of linear scaling (through its binding cost) or the last
    feasible point (always latency).  One row per result and value, with its source."""
    sources = hardware.gpu_sources(scn["gpu"])
    borrowed = {
        k: src for k, src in sources.items()
        if src.startswith((hardware.ESTIMATE, hardware.CARRIED_H100))
        and scn[k] == hardware.gpu_values(scn["gpu"])[k]  # not overridden by the reader
    }  # fmt: skip
    rows = [r for r in search.sweep(scn) if r["feasible"]]
    if not rows or not borrowed:
        return []
    h = search.headline(scn)
    results = [("plateau", max(rows, key=lambda r: r["utilization"]), False)]
    if math.isfinite(h["linear_scaling_end_flop"]):
        results.append(("end of linear scaling", nearest(scn, h["linear_scaling_end_flop"]), True))
    out = []
    for name, r, loss in results:
        why, keys = _binding_keys(scn, r, loss)
        out += [{"result": name, "why": why, "key": k, "source": borrowed[k]}
                for k in keys if k in borrowed]  # fmt: skip
    out += [{"result": "last feasible point", "why": "latency", "key": k, "source": borrowed[k]}
            for k in _LOSS_KEYS["latency"] if k in borrowed]  # fmt: skip
    return out


def estimates_table(scns: list[Scenario]) -> str:
    """:func:`estimates_deciding` for several GPUs, as a Markdown table: one row per GPU and
    result, the values it rests on marked as estimates or as carried from the H100."""
    lines = [
        "| GPU | Result | Bound by | Estimated values | Values carried from the H100 |",
        "|---|---|---|---|---|",
    ]
    for scn in scns:
        groups: dict[tuple[str, str], dict[str, list[str]]] = {}
        for row in estimates_deciding(scn):
            kind = "estimate" if row["source"].startswith(hardware.ESTIMATE) else "carried"
            g = groups.setdefault((row["result"], row["why"]), {"estimate": [], "carried": []})
            g[kind].append(f"`{row['key']}`")
        for (result, why), g in groups.items():
            est = ", ".join(g["estimate"]) or "—"
            car = ", ".join(g["carried"]) or "—"
            lines.append(f"| {scn.gpu_label} | {result} | {why} | {est} | {car} |")
    return "\n".join(lines)


def generations_table(scns: list[Scenario]) -> str:
    """One row per GPU: its headline hardware and where its runs stop scaling."""
    lines = [
        "| GPU | Peak (FLOP/s) | HBM (byte/s) | NVLink per GPU (byte/s) | GPUs per node "
        "| Network between nodes per GPU (byte/s) | Plateau | Linear scaling ends (FLOP) "
        "| GPUs there | Last feasible (FLOP) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for scn in scns:
        h = search.headline(scn)
        end = h["linear_scaling_end_flop"]
        gpus = nearest(scn, end)["n_gpu"] if math.isfinite(end) else math.nan
        lines.append(
            f"| {scn.gpu_label} | {sci(scn.peak_flops)} | {sci(scn['hardware.hbm_bandwidth'])} | "
            f"{sci(scn['network.intra_node.bandwidth'])} | {scn['network.node_size']} | "
            f"{sci(scn['network.inter_node.bandwidth'])} | {h['plateau_utilization']:.3f} | "
            f"{sci(end)} | {sci(gpus)} | {sci(h['last_feasible_flop'])} |"
        )
    return "\n".join(lines)


def walls_by_kernel_latency(kernels_s: dict[str, float], walls_flop: dict[str, float]) -> str:
    """The clause of the closed forms' exercise on GPUs: each GPU's kernel latency and the wall
    it gives, or, when the latencies are equal, the one latency and the one wall they share
    (three equal values are said once, not listed).  Keys are the GPUs' labels."""
    names = list(kernels_s)
    listed = ", ".join(names[:-1]) + f" and {names[-1]}" if len(names) > 1 else names[0]
    kernels = list(kernels_s.values())
    walls = [walls_flop[n] for n in names]
    if np.allclose(kernels, kernels[0], rtol=1e-9, atol=0):
        same = {2: "both", 3: "all three", 4: "all four"}.get(len(names), f"all {len(names)}")
        return (f"{kernels[0] * 1e6:g} µs on {same} of the {listed}, so their walls are the "
                f"same, {pretty(walls[0])} FLOP at the paper's α")  # fmt: skip
    each = ", ".join(f"{k * 1e6:g}" for k in kernels[:-1]) + f" and {kernels[-1] * 1e6:g}"
    ends = ", ".join(pretty(w) for w in walls[:-1]) + f" and {pretty(walls[-1])}"
    return (f"{each} µs for the {listed}, so the walls differ ({ends} FLOP at the paper's "
            "α)")  # fmt: skip
