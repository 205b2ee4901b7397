"""Figure helpers: one style for the whole book, and the figures of each chapter.

Every figure is drawn from library values (lambdified expressions and the sweep grid), never from
numbers typed in a notebook.  PNGs are written at a fixed DPI with fixed metadata so that two
builds of the same scenario give the same bytes.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np

from . import model
from .scenario import Scenario

DPI = 110  # on screen: the size a figure is drawn at
#: PNGs are written at twice that, so that they stay sharp on high-density screens; the page
#: scales them to the column.
SAVE_DPI = 2 * DPI
PNG_METADATA = {"Software": None}  # no version string: identical bytes across builds
PALETTE = ("#1b6ca8", "#d1495b", "#edae49", "#00798c", "#66a182", "#6c4f77", "#30343f")
STYLE = {
    "figure.dpi": DPI,
    "savefig.dpi": SAVE_DPI,
    "figure.figsize": (7.0, 4.2),
    "font.size": 10,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.prop_cycle": matplotlib.cycler(color=PALETTE),
    "legend.frameon": False,
    "svg.hashsalt": "dmlimits",
    "path.simplify": True,
}


def apply_style() -> None:
    """Use the book's style in this process (figures reach the book through glue)."""
    plt.rcParams.update(STYLE)


def _compute_axis(ax: plt.Axes, label: str = "training compute (FLOP)") -> None:
    ax.set_xscale("log")
    ax.set_xlabel(label)


def shape_figure(scn: Scenario) -> plt.Figure:
    """Width, depth (and experts) of the sweep's models against compute: grid and smooth law."""
    sh = model.shapes(scn)
    c = np.geomspace(sh.compute.min(), sh.compute.max(), 200)
    smooth = model.along_compute(scn, c)
    fig, ax = plt.subplots()
    ax.plot(c, smooth["d_model"], color=PALETTE[0], lw=1, alpha=0.6)
    ax.plot(sh.compute, sh.d_model, "o", ms=3.5, color=PALETTE[0], label="width $d_{model}$")
    ax.plot(c, smooth["layers"], color=PALETTE[1], lw=1, alpha=0.6)
    ax.plot(sh.compute, sh.layers, "s", ms=3.5, color=PALETTE[1], label="depth $L$ (rounded)")
    if scn["model.sparse"]:
        ax.plot(c, smooth["experts"], color=PALETTE[3], lw=1, alpha=0.6)
        ax.plot(
            sh.compute, sh.experts, "^", ms=3.5, color=PALETTE[3], label="experts $S$ (rounded)"
        )
    ax.set_yscale("log")
    _compute_axis(ax)
    ax.set_ylabel("size")
    ax.legend(loc="upper left")
    ax.set_title(f"Model shapes of the sweep ({scn.name})", fontsize=10)
    fig.tight_layout()
    return fig


def batch_figure(scn: Scenario) -> plt.Figure:
    """Batch size and number of steps against compute for the three batch laws."""
    sh = model.shapes(scn)
    fig, (left, right) = plt.subplots(1, 2, figsize=(9.0, 3.8))
    for i, law in enumerate(model.BATCH_LAWS):
        batch = model.batch_tokens(scn, sh.compute, sh.experts, law)
        chosen = law == scn["batch.law"]
        style = dict(
            color=PALETTE[i],
            lw=2.2 if chosen else 1.0,
            alpha=1.0 if chosen else 0.7,
            label=model.BATCH_LAW_LABELS[law] + (" (this scenario)" if chosen else ""),
        )
        left.plot(sh.compute, batch, **style)
        right.plot(sh.compute, sh.tokens / batch, **style)
    for ax, label in ((left, "batch size (tokens)"), (right, "optimizer steps")):
        ax.set_yscale("log")
        _compute_axis(ax)
        ax.set_ylabel(label)
    left.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    return fig


def budget_figure(scn: Scenario) -> plt.Figure:
    """Time available per step and per layer per step, against the fixed latencies."""
    sh = model.shapes(scn)
    fig, ax = plt.subplots()
    ax.plot(sh.compute, sh.step_budget, "o-", ms=3, label="time per step, $T / n_{steps}$")
    ax.plot(
        sh.compute,
        sh.layer_budget,
        "s-",
        ms=3,
        label="time per layer per step, $T / (n_{steps} L)$",
    )
    ax.axhline(
        scn["hardware.kernel_latency"],
        color=PALETTE[2],
        ls="--",
        label="one matmul kernel's latency",
    )
    ax.axhline(
        scn["network.latency"], color=PALETTE[3], ls=":", label="one network message's latency"
    )
    ax.set_yscale("log")
    _compute_axis(ax)
    ax.set_ylabel("seconds")
    ax.legend(loc="lower left", fontsize=8)
    ax.set_title(
        f"The time budget of a {scn['training.months']:g}-month run ({scn.name})", fontsize=10
    )
    fig.tight_layout()
    return fig
