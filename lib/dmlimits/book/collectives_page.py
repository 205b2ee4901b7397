"""The collectives chapter's figures, drawn from what
:mod:`dmlimits.costs.collectives` computes (the cost module itself never draws)."""

from __future__ import annotations

import math
from typing import Any

import matplotlib.pyplot as plt
import numpy as np

from dmlimits.book import interactive
from dmlimits.book.figures import PALETTE, apply_style, shared_line_styles, shared_marker_sizes
from dmlimits.book.glue import sci
from dmlimits.core.checks import counts, require_scenario
from dmlimits.core.scenario import Scenario
from dmlimits.costs.collectives import (
    allreduce_bytes,
    allreduce_bytes_split,
    allreduce_time,
    allreduce_time_levels,
    allreduce_time_split,
    crossover_bytes,
    crossover_bytes_split,
    link_name,
)


def node_grid(scn: Scenario, max_nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """Participants for the figures: 1 to ``network.node_size`` GPUs in one node, then whole
    nodes, doubling up to ``max_nodes``.  Returns (GPUs per node, nodes), as arrays."""
    node = int(require_scenario(scn)["network.node_size"])
    n = int(counts("max_nodes", max_nodes))
    nodes = [1 << k for k in range(1, n.bit_length()) if 1 << k <= n]
    p0 = np.array([*range(1, node + 1), *[node] * len(nodes)], dtype=float)
    p1 = np.array([*[1] * node, *nodes], dtype=float)
    return p0, p1


def _positive(values: Any) -> bool:
    return bool(np.all(np.asarray(values) > 0) and np.all(np.isfinite(values)))


def _widen(ax: Any, decades: float = 2.0) -> None:
    """Give a log axis at least ``decades`` decades, so that flat lines do not fill it."""
    lo, hi = ax.get_ylim()
    if hi / lo < 10**decades:
        middle = math.sqrt(lo * hi)
        ax.set_ylim(middle / 10 ** (decades / 2), middle * 10 ** (decades / 2))


def figure_allreduce_time(
    scn: Scenario, nodes: int, mark_words: float | None = None, mark_label: str = ""
) -> Any:
    """Time of one all-reduce against the size of the vector, in one node and over ``nodes``
    nodes (two levels), with each one's latency floor, bandwidth asymptote and crossover.

    ``mark_words`` (optional) draws a vertical line at a vector of that many words.
    """
    apply_style()
    scn = require_scenario(scn)
    node = int(scn["network.node_size"])
    word_bytes = float(scn["model.word_bytes"])
    size = np.geomspace(1e3, 1e12, 361)  # bytes of the vector
    words = size / word_bytes
    cases = [
        (
            f"one node: {node} GPUs over {link_name(scn, 0)}",
            allreduce_time(scn, words, node, 0),
            crossover_bytes(scn, node, 0),
        ),
        (
            f"{nodes} nodes of {node} GPUs: two levels",
            allreduce_time_split(scn, words, node, nodes),
            crossover_bytes_split(scn, node, nodes),
        ),
        (
            f"one flat ring of {node * nodes} GPUs over {link_name(scn, 1)}",
            allreduce_time(scn, words, node * nodes, 1),
            crossover_bytes(scn, node * nodes, 1),
        ),
    ]
    fig, ax = plt.subplots(figsize=(7.6, 4.6))
    # Cases may share a line (one node and the flat ring pay the same latency per phase when
    # the two links' latencies are equal; on an unlimited network every total is its latency):
    # equal lines alternate their colours' dashes or dots, equal crossovers are drawn as rings.
    times = [t for _, t, _ in cases]
    totals = shared_line_styles([t.total for t in times])
    floors = shared_line_styles([np.broadcast_to(t.latency, size.shape) for t in times], ":")
    slopes = shared_line_styles([t.bandwidth for t in times], "--")
    ends = [(c, np.interp(np.log(c), np.log(size), t.total)) for (_, t, c) in cases]
    rings = shared_marker_sizes(ends, 6.0)
    for i, ((label, t, cross), color) in enumerate(zip(cases, PALETTE, strict=False)):
        ax.plot(size, t.total, color=color, lw=2, ls=totals[i], label=label)
        ax.plot(size, np.broadcast_to(t.latency, size.shape), color=color, lw=1, ls=floors[i])
        if _positive(t.bandwidth):
            ax.plot(size, t.bandwidth, color=color, lw=1, ls=slopes[i], alpha=0.7)
        if np.isfinite(cross):
            ax.plot(*ends[i], "o", color=color, ms=rings[i], mfc="white", mew=1.5)
    if mark_words is not None:
        ax.axvline(mark_words * word_bytes, color=PALETTE[6], lw=1, alpha=0.7)
        ax.annotate(
            mark_label,
            (mark_words * word_bytes, 0.02),
            xycoords=("data", "axes fraction"),
            xytext=(-3, 0),
            textcoords="offset points",
            rotation=90,
            ha="right",
            va="bottom",
            fontsize=8,
            color=PALETTE[6],
        )
    ax.plot([], [], color="0.4", ls=":", lw=1, label="latency time")
    ax.plot([], [], color="0.4", ls="--", lw=1, label="bandwidth time")
    ax.plot([], [], "o", color="0.4", mfc="white", label="crossover: the two are equal")
    ax.set_xscale("log")
    ax.set_yscale("log")
    _widen(ax)
    ax.set_xlabel("size of the vector (bytes)")
    ax.set_ylabel("time of one all-reduce (seconds)")
    ax.legend(loc="upper left", fontsize=8)
    ax.set_title(f"All-reduce time against vector size ({scn.name})", fontsize=10)
    fig.tight_layout()
    return fig


def figure_allreduce_participants(scn: Scenario, words: float, max_nodes: int) -> Any:
    """Against the number of GPUs taking part (one node, then whole nodes up to ``max_nodes``):
    the bytes each GPU sends, as a multiple of the vector, in a flat ring and split over the two
    levels (left); the time of an all-reduce of ``words`` words both ways (right)."""
    apply_style()
    scn = require_scenario(scn)
    p0, p1 = node_grid(scn, max_nodes)
    p = p0 * p1
    vector = float(words) * float(scn["model.word_bytes"])
    flat = allreduce_bytes(scn, words, p)
    intra, inter = allreduce_bytes_split(scn, words, p0, p1)
    fig, (left, right) = plt.subplots(2, 1, figsize=(7.0, 7.6))  # stacked: legible in the column
    left.plot(p, flat / vector, "o-", ms=3, color=PALETTE[0], label="flat ring: all bytes")
    left.plot(p, intra / vector, "s--", ms=3, color=PALETTE[3], label="two levels: in the node")
    left.plot(p, inter / vector, "^--", ms=3, color=PALETTE[1], label="two levels: between nodes")
    left.set_ylabel("bytes sent per GPU / bytes of the vector")
    left.set_ylim(bottom=0)
    left.legend(loc="center right", fontsize=8)
    left.set_title("Traffic per GPU", fontsize=10)

    many = p > 1
    ring = allreduce_time(scn, words, p[many], 1)
    split = allreduce_time_split(scn, words, p0[many], p1[many])
    level0, level1 = allreduce_time_levels(scn, words, p0[many], p1[many])
    right.plot(
        p[many], ring.total, "o-", ms=3, color=PALETTE[0],
        label=f"flat ring over {link_name(scn, 1)}, one GPU per node",
    )  # fmt: skip
    right.plot(p[many], split.total, "D-", ms=3, color=PALETTE[2], label="two levels")
    if _positive(level0.bandwidth):
        right.plot(
            p[many], level0.bandwidth, "s--", ms=3, color=PALETTE[3],
            label="  its in-node bandwidth time",
        )  # fmt: skip
    between = p1[many] > 1
    if np.any(between) and _positive(level1.bandwidth[between]):
        right.plot(
            p[many][between], level1.bandwidth[between], "^--", ms=3, color=PALETTE[1],
            label="  its between-node bandwidth time",
        )  # fmt: skip
    right.set_yscale("log")
    _widen(right)
    right.set_ylabel("time of one all-reduce (seconds)")
    right.legend(loc="center right", fontsize=8)
    right.set_title("Time of the all-reduce", fontsize=10)
    for ax in (left, right):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("GPUs taking part")
        ax.axvline(scn["network.node_size"], color="0.5", lw=0.8, ls=":")
    fig.suptitle(f"All-reduce of a vector of {sci(vector)} bytes ({scn.name})", fontsize=10)
    fig.tight_layout()
    return fig


# --- Interactive -------------------------------------------------------------------------------
def allreduce_widget(scn: Scenario, max_nodes: int, points: int = 37) -> Any:
    """The all-reduce time of :func:`figure_allreduce_time` with a reader's controls: the number
    of nodes (powers of two up to ``max_nodes``) and the vector's size (``points`` sizes from a
    kilobyte to a terabyte, a mark on the curves), each time from
    :func:`~dmlimits.costs.collectives.allreduce_time` and
    :func:`~dmlimits.costs.collectives.allreduce_time_split` (bandwidth and latency time
    together)."""
    scn = require_scenario(scn)
    node = int(scn["network.node_size"])
    word_bytes = float(scn["model.word_bytes"])
    nodes = [2**i for i in range(int(math.log2(int(counts("max_nodes", max_nodes)))) + 1)]
    size = np.geomspace(1e3, 1e12, points)
    inside = allreduce_time(scn, size / word_bytes, node, 0).total
    series = {}
    for i, n in enumerate(nodes):
        lines = [{"name": f"one node ({node} GPUs)", "x": size, "y": inside}]
        if n > 1:
            split = allreduce_time_split(scn, size / word_bytes, node, n).total
            lines.append({"name": f"{n} nodes ({n * node:,} GPUs), two levels", "x": size,
                          "y": split})  # fmt: skip
        series[(i,)] = lines
    controls = [
        {"name": "nodes", "label": "nodes", "values": nodes,
         "labels": [f"{n:,} ({n * node:,} GPUs)" for n in nodes], "initial": len(nodes) // 2},
        {"name": "bytes", "label": "vector size", "values": list(size),
         "labels": [sci(float(b)) + " bytes" for b in size], "initial": points // 2},
    ]  # fmt: skip
    return interactive.curves(
        "allreduce-time", "One all-reduce: move the nodes and the vector's size",
        controls, "bytes", "size of the vector (bytes)", "time of one all-reduce (s)", series,
        x_log=True, y_log=True, y_unit="s",
        summary="An interactive version of the figure above (needs JavaScript).",
    )
