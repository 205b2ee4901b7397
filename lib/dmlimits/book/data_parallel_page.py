"""The data parallel chapter's figures, drawn from what
:mod:`dmlimits.costs.data_parallel` computes (the cost module itself never draws)."""

from __future__ import annotations

import numpy as np

from dmlimits.book import figures
from dmlimits.core.checks import require_scenario
from dmlimits.core.scenario import Scenario
from dmlimits.costs import model
from dmlimits.costs.data_parallel import (
    FIGURE_DEGREES,
    batch_bound,
    batch_bound_label,
    cluster_for,
    dp_time,
    is_reference_scenario,
    max_dp,
    memory_fits,
    parity_dp,
    reference_configs,
)


# --- Figures -----------------------------------------------------------------------------------
def figure_dp_time(scn: Scenario, degrees: tuple[int, ...] = FIGURE_DEGREES):
    """Gradient all-reduce time per step against the step's time budget across the sweep, for a
    few data-parallel degrees (every replica in its own node, the smallest cluster that trains
    the model in time); hollow markers where the replicas do not fit in memory."""
    scn = require_scenario(scn)
    plt = figures.plt
    sh = model.shapes(scn)
    fig, (left, right) = plt.subplots(1, 2, figsize=(9.5, 3.9))
    left.plot(sh.compute, sh.step_budget, "k-", lw=2, label="time budget of a step")
    clusters = [cluster_for(scn, degree) for degree in degrees]
    pairs = zip(degrees, clusters, strict=True)
    totals = [dp_time(scn, sh.params, 1, degree, gpus).total for degree, gpus in pairs]
    # Degrees may share a curve (with unbounded bandwidth every all-reduce is its latency):
    # equal curves alternate their colours' dashes, and their markers are drawn as rings.
    styles = figures.shared_line_styles(totals)
    scale = figures.shared_marker_sizes(totals, 1.0)
    for i, degree in enumerate(degrees):
        fits = memory_fits(scn, sh.params, degree, clusters[i])
        color = figures.PALETTE[(i + 1) % len(figures.PALETTE)]
        total, ls, k = totals[i], styles[i], scale[i]
        left.plot(sh.compute, total, color=color, lw=1.2, ls=ls,
                  label=f"$N_{{\\mathrm{{DP}}}}$ = {degree}")  # fmt: skip
        left.plot(sh.compute[fits], total[fits], "o", ms=3 * k, color=color)
        left.plot(sh.compute[~fits], total[~fits], "o", ms=4 * k, mfc="none", color=color)
        right.plot(sh.compute, total / sh.step_budget, color=color, ls=ls, marker="o",
                   ms=2.5 * k)  # fmt: skip
    for ax in (left, right):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("training compute (FLOP)")
    left.set_ylabel("seconds per step")
    right.set_ylabel("all-reduce time / step budget")
    right.axhline(1.0, color="k", lw=0.8, ls="--")
    left.legend(loc="lower left", fontsize=7)
    fig.suptitle(f"The gradient all-reduce against the step budget ({scn.name})", fontsize=10)
    fig.tight_layout()
    return fig


def figure_dp_memory(scn: Scenario):
    """The largest data-parallel degree the memory allows on the smallest cluster that trains
    each model in time, against the most replicas the batch allows
    (:func:`~dmlimits.costs.data_parallel.batch_bound`) and the degree at which the all-reduce
    takes as long as the arithmetic."""
    scn = require_scenario(scn)
    plt = figures.plt
    sh = model.shapes(scn)
    gpus = np.ceil(sh.min_gpus)
    fig, ax = plt.subplots()
    ax.plot(
        sh.compute,
        max_dp(scn, sh.params, gpus),
        "o-",
        ms=3,
        label="largest $N_{\\mathrm{DP}}$ that fits in HBM",
    )
    ax.plot(
        sh.compute,
        batch_bound(scn, sh.batch, sh.experts),
        "s-",
        ms=3,
        label=f"most replicas the batch allows ({batch_bound_label(scn)})",
    )
    parity = parity_dp(scn, sh.batch, sh.experts)
    ax.plot(
        sh.compute[np.isfinite(parity)],
        parity[np.isfinite(parity)],
        "^-",
        ms=3,
        label="$N_{\\mathrm{DP}}$ at which the all-reduce takes as long as the arithmetic",
    )
    if is_reference_scenario(scn):
        ref = reference_configs()
        ax.plot(
            ref["compute"],
            ref["dp"],
            "kx",
            ms=5,
            label="$N_{\\mathrm{DP}}$ of the authors' optimal configurations",
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("training compute (FLOP)")
    ax.set_ylabel("data-parallel degree")
    ax.legend(loc="upper left", fontsize=8)
    ax.set_title(f"What bounds data parallelism ({scn.name})", fontsize=10)
    fig.tight_layout()
    return fig
