"""The matmul chapter's figures, drawn from what
:mod:`dmlimits.costs.matmul` computes (the cost module itself never draws)."""

from __future__ import annotations

from typing import Any

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure

from dmlimits.book import interactive
from dmlimits.book.figures import PALETTE
from dmlimits.core.scenario import Scenario
from dmlimits.costs.matmul import (
    LEVEL_LABELS,
    LEVELS,
    PAD_MULTIPLE,
    level_times,
    matmul_efficiency,
    min_nanobatch,
    pass_efficiency,
)


def figure_efficiency_map(scenarios: list[Scenario], aspect: float, n: int = 64) -> Figure:
    """Heat maps of :func:`~dmlimits.costs.matmul.pass_efficiency` against nanobatch and shard
    size, one panel per scenario; shards are ``d x aspect d``; the dashed line is
    :func:`~dmlimits.costs.matmul.min_nanobatch`."""
    nb = np.geomspace(PAD_MULTIPLE, 2**14, n)
    side = np.geomspace(2**8, 2**16, n)
    vmax = max(float(scn["hardware.effective_utilization"]) for scn in scenarios)
    # One panel per row, at the width of the book's column, so that the contour labels, the
    # ticks and the titles show at their set size (at least 9.5 points) on the page.
    fig, axes = plt.subplots(
        len(scenarios),
        1,
        figsize=(6.8, 2.45 * len(scenarios) + 0.5),
        sharex=True,
        squeeze=False,
        layout="constrained",
    )
    mesh = None
    for ax, scn in zip(axes[:, 0], scenarios, strict=True):
        eff = pass_efficiency(scn, side[:, None], aspect * side[:, None], nb[None, :])
        mesh = ax.pcolormesh(nb, side, eff, vmin=0, vmax=vmax, cmap="viridis", shading="auto")
        lines = ax.contour(
            nb, side, eff, levels=np.arange(2, 9, 2) / 10, colors="white", linewidths=0.8
        )
        for label in ax.clabel(lines, fmt="%.1f", fontsize=10, inline_spacing=6):
            label.set_rotation(0)  # upright, however the contour turns
        ax.axvline(min_nanobatch(scn), color=PALETTE[2], ls="--", lw=1.6)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log", base=2)
        ax.set_ylabel("shard side $d$")
        ax.set_title(scn.gpu_label, fontsize=11, loc="left")
        ax.grid(False)
    axes[-1][0].set_xlabel(f"nanobatch $b$ (tokens); each shard is $d \\times {aspect:g}d$")
    fig.colorbar(mesh, ax=list(axes[:, 0]), label="efficiency (fraction of peak)", pad=0.02,
                 shrink=0.6)  # fmt: skip
    return fig


def figure_level_times(scn: Scenario, d1: Any, d2: Any, kind: str) -> Figure:
    """The time of each part of one matmul against the nanobatch, for one shard: the roofline
    the model takes the maximum of, and the efficiency that results."""
    nb = np.arange(PAD_MULTIPLE, 2**13 + 1, PAD_MULTIPLE, dtype=float)
    parts = level_times(scn, d1, d2, nb, kind)
    fig, (left, right) = plt.subplots(1, 2, figsize=(9.0, 3.8))
    # HBM blue, L2 red, shared memory orange dashed, arithmetic purple, the kernel latency grey
    # dash-dot.  Arithmetic is not in the palette's teal, which is hard to tell from HBM's blue.
    styles = {"hbm": (0, "-"), "l2": (1, "-"), "shared": (2, "--"), "arithmetic": (5, "-"),
              "latency": (6, "-.")}  # fmt: skip
    for key in (*LEVELS, "arithmetic", "latency"):
        value = np.broadcast_to(parts[key], nb.shape)
        colour, ls = styles[key]
        left.plot(nb, value * 1e6, color=PALETTE[colour], ls=ls, label=LEVEL_LABELS[key])
    left.plot(nb, parts["total"] * 1e6, color="black", lw=2, ls=":", label="total")
    left.set_ylabel("time (µs)")
    left.legend(fontsize=8, loc="upper left")
    eff = matmul_efficiency(scn, d1, d2, nb, kind)
    right.plot(nb, eff, color=PALETTE[0])
    right.axhline(
        scn["hardware.effective_utilization"],
        color=PALETTE[2],
        ls="--",
        label="effective utilization",
    )
    right.axvline(min_nanobatch(scn), color=PALETTE[1], ls=":", label="minimum nanobatch")
    right.set_ylabel("efficiency (fraction of peak)")
    right.set_ylim(0, 1)
    right.legend(fontsize=8, loc="lower right")
    for ax in (left, right):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("nanobatch $b$ (tokens)")
    left.set_yscale("log")
    fig.suptitle(f"{d1:g} × {d2:g} shard, {kind}, {scn.gpu_label}", fontsize=10)
    fig.tight_layout()
    return fig


# --- Interactive -------------------------------------------------------------------------------
def efficiency_widget(scenarios: list[Scenario], aspect: float) -> Any:
    """The efficiency of :func:`figure_efficiency_map` as curves a reader picks: the GPU and
    the shard side ``d`` (powers of two), and a mark at a nanobatch (powers of two from the
    padding multiple to 16,384 tokens), each value from
    :func:`~dmlimits.costs.matmul.pass_efficiency`."""
    nb = [2**i for i in range(int(np.log2(PAD_MULTIPLE)), 15)]
    sides = [2**i for i in range(8, 17)]
    series = {}
    for i, scn in enumerate(scenarios):
        for j, d in enumerate(sides):
            eff = pass_efficiency(scn, float(d), aspect * d, np.array(nb, dtype=float))
            series[(i, j)] = [{"name": f"{scn.gpu_label}, d = {d:,}", "x": nb,
                               "y": np.broadcast_to(eff, (len(nb),))}]  # fmt: skip
    controls = [
        {"name": "gpu", "label": "GPU", "values": list(range(len(scenarios))),
         "labels": [s.gpu_label for s in scenarios], "initial": len(scenarios) - 1},
        {"name": "d", "label": "shard side d", "values": sides,
         "labels": [f"{d:,}" for d in sides], "initial": 4},
        {"name": "b", "label": "nanobatch b (tokens)", "values": nb,
         "labels": [f"{b:,}" for b in nb], "initial": len(nb) // 2},
    ]  # fmt: skip
    return interactive.curves(
        "matmul-efficiency", "Matmul efficiency: move the GPU, the shard and the nanobatch",
        controls, "b", "nanobatch b (tokens)", "efficiency (fraction of peak)", series,
        x_log=True, y_percent=True,
        summary="An interactive version of the figure above (needs JavaScript).",
    )
