"""The expert parallel chapter's figures and computed sentences, drawn from what
:mod:`dmlimits.costs.expert_parallel` computes (the cost module itself never draws)."""

from __future__ import annotations

import math
from typing import NamedTuple

import matplotlib.pyplot as plt
import numpy as np

from dmlimits.book.figures import PALETTE
from dmlimits.book.glue import sci
from dmlimits.core.checks import numbers
from dmlimits.core.scenario import Scenario
from dmlimits.costs.expert_parallel import node_split, remote_probabilities, sweep_table


# --- Figures -------------------------------------------------------------------------------------
def figure_remote_fraction(scn: Scenario, max_degree: int = 256):
    """Where a token's next expert lives against the expert-parallel degree: the group packed
    into as few nodes as possible (stacked areas) and spread one GPU per node (dashed)."""
    node = int(scn["network.node_size"])
    degrees = 2.0 ** np.arange(0, int(np.log2(max_degree)) + 1)
    intra, inter = node_split(degrees, node)
    packed = remote_probabilities(intra, inter)
    spread = remote_probabilities(np.ones_like(degrees), degrees)
    fig, ax = plt.subplots()
    ax.stackplot(
        degrees,
        packed.own_gpu, packed.same_node, packed.other_node,
        labels=["own GPU", "another GPU of the node (NVLink)", "another node (InfiniBand)"],
        colors=[PALETTE[4], PALETTE[0], PALETTE[1]], alpha=0.75,
    )  # fmt: skip
    ax.plot(
        degrees,
        spread.other_node,
        "--",
        color="black",
        lw=1.2,
        label="another node, group spread one GPU per node",
    )
    ax.axvline(node, color="grey", lw=0.8, ls=":")
    ax.set_xscale("log", base=2)
    ax.set_xlim(degrees[0], degrees[-1])
    ax.set_ylim(0, 1)
    ax.set_xlabel(
        r"expert-parallel degree $N_{\mathrm{EP}}$ (packed into as few nodes as possible)"
    )
    ax.set_ylabel("share of tokens")
    # The areas fill the axes: the legend goes under them, where it covers nothing.
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2, fontsize=8)
    ax.set_title(f"Where the next expert lives ({node}-GPU nodes, uniform routing)", fontsize=10)
    fig.tight_layout()
    return fig


class Example(NamedTuple):
    """The row of :func:`~dmlimits.costs.expert_parallel.sweep_table` a worked example takes, and
    why."""

    row: int
    nearest: int  # the row nearest the compute asked for
    #: A sentence for the chapter when the example is not the nearest row ("" when it is).
    note: str


def worked_example(
    tab: dict[str, np.ndarray], near: float, *, gpu: str, near_digits: int = 3
) -> Example:
    """The model of the sweep nearest ``near`` FLOP (in log) among those whose cluster gives
    each GPU at least one token of the batch.  On a slow GPU the models near a large compute
    need more GPUs than their batch has tokens: an example there would move a fraction of a
    token per GPU, so it takes the nearest model with at least one, and ``note`` says so
    (``gpu`` names the GPU in it, ``near`` is written with ``near_digits`` significant
    digits, as published).  When no model of the sweep has one, the nearest."""
    value = numbers("near", near, strict=True)
    if value.size != 1:
        raise ValueError(f"near: got {value.size} values; expected one compute in FLOP")
    near = float(value.reshape(()))
    compute = numbers("compute", tab["compute"], strict=True)
    if compute.size == 0:
        raise ValueError("tab: got a sweep table without models; expected sweep_table's")
    distance = np.abs(np.log(compute / near))
    nearest = int(np.argmin(distance))
    enough = tab["batch"] >= tab["n_gpu"]  # at least one token per GPU
    if enough[nearest]:
        return Example(nearest, nearest, "")
    if not enough.any():
        return Example(nearest, nearest, (
            f"On {gpu} GPUs no model of the sweep gives each GPU a whole token of its batch: "
            "the example moves a fraction of one."
        ))  # fmt: skip
    row = int(np.argmin(np.where(enough, distance, np.inf)))
    return Example(row, nearest, (
        f"The model nearest {sci(near, near_digits)} FLOP ({sci(compute[nearest])} FLOP) "
        "would need "
        f"{sci(tab['n_gpu'][nearest])} {gpu} GPUs, more than its batch of "
        f"{sci(tab['batch'][nearest])} tokens."
    ))  # fmt: skip


def sweep_summary(scn: Scenario, tab: dict[str, np.ndarray] | None = None) -> str:
    """What :func:`figure_sweep` shows, in the chapter's words, for any scenario: where the
    bandwidth ratio peaks and ends (or that it is zero: unbounded bandwidth), and from which
    compute the latency of a step's expert crossings alone exceeds the step's time budget (or
    how close it comes when it never does within the sweep).  ``tab`` is
    :func:`~dmlimits.costs.expert_parallel.sweep_table`'s, computed here when not given."""
    tab = sweep_table(scn) if tab is None else tab
    ratio, share, experts = tab["ratio"], tab["latency_share"], tab["experts"]
    if not np.any(ratio > 0):
        first = "With unbounded bandwidth the expert traffic takes no bandwidth time in the sweep."
    else:
        k = int(np.argmax(ratio))
        node = int(scn["network.node_size"])
        first = (f"Across the sweep the bandwidth ratio peaks at {ratio[k]:.2g}, for the model "
                 f"with {experts[k]:.0f} experts per block")  # fmt: skip
        if node > 1 and math.gcd(int(experts[k]), node) == 1:
            first += (", a count that shares no factor with the node size and so forces the "
                      "whole group across nodes")  # fmt: skip
        if k < len(ratio) - 1 and ratio[-1] < ratio[k]:
            first += f"; from there it falls with the hidden width, to {ratio[-1]:.2g} at the top"
            first += " of the sweep."
        else:
            first += "."
    over = tab["compute"][share >= 1]
    contrast = ", by contrast," if np.any(ratio > 0) else ""
    second = f"The latency of expert crossings{contrast} grows with the number of layers and steps"
    if over.size:
        second += (f", and alone it would exceed a whole step's time budget from {sci(over[0])} "
                   "FLOP on.")  # fmt: skip
    else:
        second += (f", to {share.max():.2g} of a step's time budget at most: within this sweep "
                   "it never takes a whole step.")  # fmt: skip
    return f"{first} {second}"


def figure_sweep(scn: Scenario):
    """Expert traffic over the sparse sweep: bandwidth time against compute time (it hides),
    and the expert latency of a step against the step's time budget (it does not)."""
    tab = sweep_table(scn)
    fig, ax = plt.subplots()
    label = "bandwidth time / matmul time, per layer"
    shown = tab["ratio"] > 0  # unbounded bandwidth: zero, which a log axis cannot show
    if not shown.any():
        label += ": zero, not drawn"
    ax.plot(tab["compute"][shown], tab["ratio"][shown], "o-", ms=3, color=PALETTE[0], label=label)
    ax.plot(
        tab["compute"],
        tab["latency_share"],
        "s-",
        ms=3,
        color=PALETTE[1],
        label="latency of all interfaces / step time budget",
    )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("training compute (FLOP)")
    ax.set_ylabel("ratio")
    ax.legend(loc="upper left", fontsize=8)
    ax.set_title(f"Expert traffic over the sparse sweep ({scn.name})", fontsize=10)
    fig.tight_layout()
    return fig


# --- The chapter's computed sentences ---------------------------------------------------------
def expert_only_text(interfaces: int) -> str:
    """How many layer interfaces carry expert traffic only under full interleaving, and where
    the rest of it rides, in a clause that reads for every count: "no interface is
    expert-only: all expert traffic rides on the stage crossings", "one interface is
    expert-only; the rest ...", "3 interfaces are expert-only; the rest ..."."""
    n = int(interfaces)
    crossings = "on the stage crossings, each charged once at the higher of its two levels"
    if n == 0:
        return f"no interface is expert-only: all expert traffic rides {crossings}"
    head = "one interface is" if n == 1 else f"{n:,} interfaces are"
    return f"{head} expert-only; the rest of the expert traffic rides {crossings}"


def share_of_tokens(share: float) -> str:
    """A share of a group's tokens as a sentence says it: "none of its tokens" or "12.5% of its
    tokens" (one decimal of a percent)."""
    share = float(share)
    return "none of its tokens" if share == 0 else f"{share:.1%} of its tokens"
