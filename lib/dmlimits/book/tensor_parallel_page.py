"""The tensor parallel chapter's figures, drawn from what
:mod:`dmlimits.costs.tensor_parallel` computes (the cost module itself never draws)."""

from __future__ import annotations

from typing import Any

import matplotlib.pyplot as plt

from dmlimits.book.figures import PALETTE
from dmlimits.core import checks
from dmlimits.core.checks import require_scenario
from dmlimits.core.scenario import Scenario
from dmlimits.costs import model
from dmlimits.costs.tensor_parallel import (
    best_split,
    crossover_shard,
    nvlink_domain,
    reference_shards,
    tp_comm_time,
    tp_compute_time,
    tp_splits,
)


# --- Figures -----------------------------------------------------------------------------------
def figure_time_vs_degree(scn: Scenario, d_model: Any = None, tokens: Any = None):
    """Per-layer compute time and TP bandwidth time against the TP degree, 1D (left) and 2D with
    the best split by the rule (right), with both groups on NVLink (beyond one node: as if the
    NVLink domain were larger) or on InfiniBand; the latency per layer for reference.  A
    bandwidth curve that is zero at every degree (an unbounded bandwidth) cannot be drawn on the
    logarithmic axis: it is left out and its legend entry says so.

    ``d_model`` defaults to the smallest model of the sweep; ``tokens`` to one sequence."""
    scn = require_scenario(scn)
    sh = model.shapes(scn)
    dm = float(sh.d_model[0]) if d_model is None else float(checks.whole("d_model", d_model))
    dff = dm * float(scn["model.ff_ratio"])
    tok = float(scn["model.sequence_length"]) if tokens is None else tokens
    nv = nvlink_domain(scn)
    node = scn["network.node_size"]
    fig, axes = plt.subplots(1, 2, figsize=(9.0, 3.9), sharey=True)
    for ax, one_d in zip(axes, (True, False), strict=True):
        degrees, comp, nvl, ib, lat = [], [], [], [], []
        n = 2  # one GPU sends nothing
        while n <= 4096:
            if one_d:
                m, f = 1, n
            else:
                splits = [(a, c) for a, c in tp_splits(n) if dm % a == 0 and dff % c == 0]
                if not splits:
                    n *= 2
                    continue
                m, f = best_split(nv, dm, dff, n, 0, 0)
            if dm % m or dff % f:
                break
            degrees.append(n)
            comp.append(tp_compute_time(scn, dm, dff, tok, m, f))
            t_nv = tp_comm_time(nv, dm, dff, tok, m, f, 0, 0)
            nvl.append(t_nv.bandwidth)
            ib.append(tp_comm_time(scn, dm, dff, tok, m, f, 1, 1).bandwidth)
            lat.append(t_nv.latency)
            n *= 2
        ax.plot(degrees, comp, "o-", ms=3, color=PALETTE[0], label="compute")
        for times, style, color, name in ((nvl, "s-", PALETTE[3], "NVLink"),
                                          (ib, "^-", PALETTE[1], "InfiniBand")):  # fmt: skip
            label = f"TP bandwidth, {name}"
            if not any(t > 0 for t in times):
                # Unbounded bandwidth: zero at every degree, which a log axis cannot show.
                times, label = [], label + ": zero, not drawn"
            ax.plot(degrees[: len(times)], times, style, ms=3, color=color, label=label)
        ax.plot(degrees, lat, ":", color=PALETTE[2], label="TP latency (not hidden)")
        ax.axvline(node, color="grey", lw=0.8, ls="--")
        ax.text(node * 1.08, 0.97, "one node", transform=ax.get_xaxis_transform(),
                fontsize=8, va="top", color="grey")  # fmt: skip
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("tensor-parallel degree $N_{\\mathrm{TP}}$")
        ax.set_title(
            r"1D (Megatron), $N_{\mathrm{TP},m} = 1$" if one_d else "2D, best split by the rule",
            fontsize=10,
        )
    axes[0].set_ylabel("seconds per layer per step")
    axes[0].legend(loc="lower left", fontsize=8)
    fig.suptitle(
        f"$d_{{\\mathrm{{model}}}}$ = {dm:,.0f}, {tok:,.0f} tokens per GPU ({scn.name})",
        fontsize=10,
    )
    fig.tight_layout()
    return fig


def figure_reference_shards(scn: Scenario):
    """The shards of the paper's optimal configurations against the crossovers of this
    scenario's links: where TP traffic hides on NVLink and where on InfiniBand.  A link of
    unbounded bandwidth has no crossover (every shard hides its traffic): no line, and its
    legend entry says so."""
    scn = require_scenario(scn)
    ref = reference_shards()
    fig, ax = plt.subplots(figsize=(7.0, 5.0))
    ax.plot(ref["compute"], ref["side"], "o", ms=4, color=PALETTE[0],
            label="paper's optimum: side of a square shard of the same area")  # fmt: skip
    ax.plot(
        ref["compute"],
        ref["cols"],
        "_",
        ms=7,
        color=PALETTE[5],
        label="its $d_{\\mathrm{ff}}$ side",
    )
    ax.plot(ref["compute"], ref["rows"], "|", ms=7, color=PALETTE[6],
            label="its $d_{\\mathrm{model}}$ side")  # fmt: skip
    for level, color, name in ((0, PALETTE[3], "NVLink"), (1, PALETTE[1], "InfiniBand")):
        side = crossover_shard(scn, level)
        label = f"crossover of a square shard, {name}"
        if side > 0:
            ax.axhline(side, color=color, ls="--", label=label)
        else:  # unbounded bandwidth: every shard hides its traffic; no line on a log axis
            ax.plot([], [], color=color, ls="--", label=f"no crossover, {name}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("training compute (FLOP)")
    ax.set_ylabel("shard side (rows or columns)")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2, fontsize=7.5)
    ax.set_title("Tensor-parallel shards of the paper's optimal configurations (H100, as rerun)",
                 fontsize=10)  # fmt: skip
    fig.tight_layout()
    return fig


# --- The chapter's computed sentences ---------------------------------------------------------
def count_text(n: int) -> str:
    """A count as a sentence says it: ``none``, ``one``, or the number (``2``, ``1,024``)."""
    n = int(n)
    return "none" if n == 0 else "one" if n == 1 else f"{n:,}"


def _are(n: int) -> str:
    return "is" if int(n) <= 1 else "are"


def shards_against_crossovers(above: int, below: int) -> str:
    """How many of the paper's shards lie above the InfiniBand crossover and below the NVLink
    one, in a clause that reads for every count ("none of them is above the InfiniBand
    crossover and 2 are below the NVLink one")."""
    if above == 0 and below == 0:
        return "none of them is above the InfiniBand crossover or below the NVLink one"
    return (f"{count_text(above)} of them {_are(above)} above the InfiniBand crossover and "
            f"{count_text(below)} {_are(below)} below the NVLink one")  # fmt: skip


def shards_between(total: int, between: int, above: int, below: int) -> str:
    """Where the ``total`` shards of the paper's optimal configurations lie against the two
    crossovers, as a sentence for every count ("All 31 configurations lie between the lines.",
    "Of the 31 configurations, 29 lie between the lines, none above the InfiniBand crossover
    and 2 below the NVLink one.")."""
    total, between = int(total), int(between)
    if between == total:
        return f"All {total:,} configurations lie between the lines."
    lie = "lies" if between == 1 else "lie"
    return (f"Of the {total:,} configurations, {count_text(between)} {lie} between the lines, "
            f"{count_text(above)} above the InfiniBand crossover and {count_text(below)} "
            "below the NVLink one.")  # fmt: skip


def max_degrees_text(nv_2d: int, nv_1d: int, ib_2d: int, ib_1d: int) -> str:
    """The largest tensor-parallel degrees whose traffic hides, on an NVLink domain of any size
    and on InfiniBand, in two sentences that name 2D and 1D apart only where they differ."""
    if nv_2d == nv_1d:
        nv = f"both 2D and 1D tensor parallelism hide their traffic up to a degree of {nv_2d:,}"
    else:
        nv = (f"2D tensor parallelism hides its traffic up to a degree of {nv_2d:,} and 1D up "
              f"to {nv_1d:,}")  # fmt: skip
    ib = (f"On InfiniBand both stop at {ib_2d:,}." if ib_2d == ib_1d
          else f"On InfiniBand 2D stops at {ib_2d:,} and 1D at {ib_1d:,}.")  # fmt: skip
    return f"{nv} (powers of two). {ib}"
