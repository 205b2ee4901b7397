"""Collective communication on the cluster network: ring all-reduce and point-to-point transfers.

Erdil & Schneider-Joseph (2024, "Data movement limits to frontier model training",
arXiv:2411.01137) charge every exchange of data between GPUs with a simple bandwidth-plus-latency
model on a hierarchical network (in the authors' final code, ``optimal_parallelism.ipynb`` in
the public repository ``ege-erdil/limits_to_distributed_training``, commit b1f771c, October
2024).  This module derives those costs itself, in sympy:

* **The network.**  Level 0 is the NVLink node of ``network.node_size`` GPUs; level 1 is
  InfiniBand between nodes.  Each level has a bidirectional bandwidth per GPU ``W_l`` (so
  ``W_l / 2`` each way) and a latency ``lambda_l`` per message.  The scenario key
  ``network.topology`` selects the paper's variants: ``"two-level"`` (the default), ``"flat"``
  (one NVLink level for all GPUs: every level has the intra-node bandwidth) and ``"unlimited"``
  (no bandwidth limit: bandwidth time is zero; latency is still paid).
* **Ring all-reduce.**  ``p`` GPUs each hold a vector of ``n_w`` words and all end with its sum:
  a reduce-scatter then an all-gather, each ``p - 1`` steps in which every GPU sends one chunk of
  ``n_w / p`` words to its successor and receives one from its predecessor.  Each GPU sends (and
  receives) ``2 (p - 1) / p * n_w`` words.  The paper charges one message latency per phase.
* **Repetition.**  ``r_s`` all-reduces in sequence and ``r_p`` in parallel over a cluster of
  ``N`` GPUs.  The paper's form spreads the total traffic over the cluster's aggregate one-way
  bandwidth: ``2 (p - 1) n_w r_s r_p w / (N W_l / 2)`` plus ``2 r_s lambda_l`` when ``p > 1``.
  When the parallel copies tile the cluster (``r_p p = N``) this is ``r_s`` times one all-reduce's
  per-GPU time.
* **Point-to-point.**  ``n_w r_s r_p w / (N W_l / 2)`` plus ``r_s lambda_l``.
* **Two levels.**  An all-reduce among ``p = p_0 p_1`` GPUs, ``p_0`` per node: reduce-scatter in
  the node, all-reduce of each GPU's ``1 / p_0`` shard with its counterparts in the other
  ``p_1 - 1`` nodes, all-gather in the node.  Bandwidth times of the two levels overlap (the larger
  binds; they use different links and the collective streams in chunks) and latencies add (every
  chunk passes the phases in order), as the authors' final code combines an all-reduce's levels
  (each level's traffic there is a whole all-reduce of every word among that level's GPUs; the
  search's ``search.level_times`` key says how a step combines them).  ``overlap_levels=False``
  adds the bandwidth times instead.

Every cost is a sympy expression in registered symbols (:data:`COST_FORMULAS`); the numeric
functions are lambdified from those same expressions and broadcast over numpy arrays of words,
participants and repeats.  Every hardware number comes from a
:class:`~dmlimits.core.scenario.Scenario`.
"""

from __future__ import annotations

import math
from functools import cache
from typing import Any, NamedTuple

import numpy as np
import sympy as sp

from dmlimits.core import formula_cache, lazy
from dmlimits.core import symbols as s
from dmlimits.core import units as u
from dmlimits.core.checks import as_output, checking, counts, numbers, require_scenario, shown
from dmlimits.core.derivation import Derivation, Step, Substitution, derivation, register
from dmlimits.core.scenario import Scenario
from dmlimits.costs.matmul import word

CHAPTER = "collectives"

# --- Definitional constants ------------------------------------------------------------------
# A ring all-reduce is two phases: a reduce-scatter, then an all-gather.
RING_PHASES = 2
# Network bandwidths are quoted bidirectional per GPU: half of it leaves the GPU, half arrives.
DIRECTIONS = 2
LEVELS = (0, 1)  # 0: inside an NVLink node; 1: InfiniBand between nodes
TOPOLOGIES = ("two-level", "flat", "unlimited")

_decl = s.REGISTRY.declare
_S = u.second
_B = u.byte
_BPS = _B / _S

# --- Symbols -----------------------------------------------------------------------------------
# The collective.
n_words = _decl(
    "n_w",
    r"n_{\mathrm{w}}",
    "words each participant contributes to a collective (or sends, point to point)",
    defined_in=CHAPTER,
)
parts = _decl(
    "p_coll", "p", "participants in one collective (GPUs in one ring)", defined_in=CHAPTER
)
parts0 = _decl(
    "p_coll0", "p_0", "participants of a two-level collective in each node", defined_in=CHAPTER
)
parts1 = _decl("p_coll1", "p_1", "nodes taking part in a two-level collective", defined_in=CHAPTER)
rep_seq = _decl("r_seq", "r_s", "repetitions of a collective one after another", defined_in=CHAPTER)
rep_par = _decl("r_par", "r_p", "repetitions of a collective at the same time", defined_in=CHAPTER)
n_phases = _decl(
    "n_ph",
    r"n_{\mathrm{ph}}",
    "phases of a ring all-reduce (reduce-scatter, all-gather)",
    defined_in=CHAPTER,
)
# The network.
bw_level = _decl(
    "W_net",
    r"W_{\ell}",
    "network bandwidth per GPU at level l, both directions together",
    _BPS,
    defined_in=CHAPTER,
)
bw0 = _decl(
    "W_net0",
    "W_0",
    "network bandwidth per GPU inside a node (NVLink), both directions",
    _BPS,
    defined_in=CHAPTER,
)
bw1 = _decl(
    "W_net1",
    "W_1",
    "network bandwidth per GPU between nodes (InfiniBand), both directions",
    _BPS,
    defined_in=CHAPTER,
)
lat_level = _decl(
    "lambda_net", r"\lambda_{\ell}", "latency of one message at level l", _S, defined_in=CHAPTER
)
lat0 = _decl(
    "lambda_net0", r"\lambda_0", "latency of one message inside a node", _S, defined_in=CHAPTER
)
lat1 = _decl(
    "lambda_net1", r"\lambda_1", "latency of one message between nodes", _S, defined_in=CHAPTER
)
# Traffic and times.
q_chunk = _decl(
    "Q_chunk",
    r"Q_{\mathrm{chunk}}",
    "bytes of one chunk a ring passes on in one step",
    _B,
    defined_in=CHAPTER,
)
q_ring = _decl(
    "Q_AR",
    r"Q_{\mathrm{AR}}",
    "bytes one GPU sends (and receives) in one all-reduce",
    _B,
    defined_in=CHAPTER,
)
q_ring0 = _decl(
    "Q_AR0",
    r"Q_{\mathrm{AR},0}",
    "bytes one GPU sends inside its node in a two-level all-reduce",
    _B,
    defined_in=CHAPTER,
)
q_ring1 = _decl(
    "Q_AR1",
    r"Q_{\mathrm{AR},1}",
    "bytes one GPU sends between nodes in a two-level all-reduce",
    _B,
    defined_in=CHAPTER,
)
t_bw = _decl("t_bw", r"t_{\mathrm{bw}}", "bandwidth time of a collective", _S, defined_in=CHAPTER)
t_lat = _decl("t_lat", r"t_{\mathrm{lat}}", "latency time of a collective", _S, defined_in=CHAPTER)
t_bw0 = _decl(
    "t_bw0",
    r"t_{\mathrm{bw},0}",
    "bandwidth time of the in-node part of a collective",
    _S,
    defined_in=CHAPTER,
)
t_bw1 = _decl(
    "t_bw1",
    r"t_{\mathrm{bw},1}",
    "bandwidth time of the between-node part of a collective",
    _S,
    defined_in=CHAPTER,
)
t_lat0 = _decl(
    "t_lat0",
    r"t_{\mathrm{lat},0}",
    "latency time of the in-node part of a collective",
    _S,
    defined_in=CHAPTER,
)
t_lat1 = _decl(
    "t_lat1",
    r"t_{\mathrm{lat},1}",
    "latency time of the between-node part of a collective",
    _S,
    defined_in=CHAPTER,
)
t_allreduce = _decl(
    "t_AR", r"t_{\mathrm{AR}}", "time of repeated all-reduces", _S, defined_in=CHAPTER
)
t_p2p = _decl(
    "t_P2P",
    r"t_{\mathrm{P2P}}",
    "time of repeated point-to-point transfers",
    _S,
    defined_in=CHAPTER,
)
N = s.n_gpu  # the cluster the traffic is spread over

# --- Named substitutions -------------------------------------------------------------------
CONSTANTS = Substitution(
    "a ring all-reduce is a reduce-scatter and an all-gather", {n_phases: RING_PHASES}
)
CHUNK = Substitution("the vector is cut into p equal chunks", {q_chunk: n_words * word / parts})
RING_STEPS = Substitution(
    "each phase is p - 1 steps; in each step every GPU sends one chunk",
    {q_ring: n_phases * (parts - 1) * q_chunk},
)


def one_way(bandwidth: sp.Expr) -> sp.Expr:
    """The bandwidth in one direction of a link quoted both ways together."""
    return bandwidth / DIRECTIONS


def _cluster_bandwidth_time(total_bytes: sp.Expr, bandwidth: sp.Expr) -> sp.Expr:
    """Bytes moved in all, over the one-way bandwidth of all ``N`` GPUs together."""
    return total_bytes / (N * one_way(bandwidth))


def _ring_bytes(p: sp.Expr, words: sp.Expr) -> sp.Expr:
    """Bytes one GPU sends in a ring all-reduce of ``words`` among ``p`` (phases symbolic)."""
    return CHUNK.apply(RING_STEPS.apply(q_ring)).subs({parts: p, n_words: words})


def _if_ring(p: sp.Expr, expr: sp.Expr) -> sp.Expr:
    """``expr`` when there is anyone to talk to (``p > 1``); else nothing is sent or waited on.

    Written as ``expr`` times a dimensionless 0/1 switch, so that both branches share a unit.
    """
    return expr * sp.Piecewise((1, p > 1), (0, True))


def halved(bandwidth: sp.Expr) -> sp.Expr:
    """``W / 2`` kept as written, for the forms the book shows."""
    return sp.Mul(sp.Rational(1, DIRECTIONS), bandwidth, evaluate=False)


def as_written(num: list[sp.Expr], den: list[sp.Expr]) -> sp.Expr:
    """``prod(num) / prod(den)`` left unevaluated, so that a step shows the paper's form (with
    its ``W / 2``); the derivation check still simplifies it like any other expression."""
    return sp.Mul(
        sp.Mul(*num, evaluate=False),
        sp.Pow(sp.Mul(*den, evaluate=False), -1, evaluate=False),
        evaluate=False,
    )


# --- Derivations -----------------------------------------------------------------------------
@register
def ring_allreduce_derivation() -> Derivation:
    """Per-GPU bytes and bandwidth time of one ring all-reduce."""
    t1 = sp.Eq(t_bw, q_ring / one_way(bw_level))
    t2 = RING_STEPS.apply(t1)
    t3 = CHUNK.apply(t2)
    t4 = CONSTANTS.apply(t3)
    t5 = sp.Eq(
        t_bw,
        as_written([RING_PHASES, parts - 1, n_words, word], [parts, halved(bw_level)]),
    )
    return derivation(
        "collectives-ring-allreduce",
        "One ring all-reduce",
        [
            Step(
                "In a ring every GPU sends to its successor while it receives from its "
                "predecessor, so its sends and receives overlap: the time is the bytes one GPU "
                "sends over the bandwidth in one direction, half the bidirectional figure.",
                t1,
            ),
            Step(
                "Each phase, reduce-scatter and all-gather, takes p - 1 steps; in each step every "
                "GPU passes one chunk on (in the reduce-scatter, its running partial sum; in the "
                "all-gather, a finished chunk).",
                t2,
                using=RING_STEPS,
            ),
            Step("A chunk is a $p$-th of the vector.", t3, using=CHUNK),
            Step("There are two phases.", t4, using=CONSTANTS),
            Step(
                "So each GPU moves a fraction $2 (p - 1) / p$ of the vector, just under twice the "
                "vector however large the ring: the ring all-reduce's bandwidth time hardly grows "
                "with the number of participants.",
                t5,
            ),
        ],
        chapter=CHAPTER,
        notes=(
            "Erdil & Schneider-Joseph (2024) cost every all-reduce as this reduce-scatter and "
            "all-gather; the byte count is the classic one of "
            "Patarasuk & Yuan (2009).",
        ),
    )


REPEATS_ALLREDUCE = Substitution(
    "$r_s r_p$ all-reduces, their traffic spread over the $N_{\\mathrm{GPU}}$ GPUs; one message "
    "latency per phase "
    "of each all-reduce in sequence",
    {
        t_bw: _cluster_bandwidth_time(rep_seq * rep_par * parts * q_ring, bw_level),
        t_lat: n_phases * rep_seq * lat_level,
    },
    kind="assumption",
    source="erdil2024datamovement",
)
RING_BYTES = Substitution(
    "bytes of one ring all-reduce, {eq}`collectives-ring-allreduce-3`",
    {q_ring: _ring_bytes(parts, n_words)},
)
TILED = Substitution(
    "the parallel all-reduces tile the cluster, each GPU in exactly one",
    {N: rep_par * parts},
    kind="assumption",
)


@register
def repeated_allreduce_derivation() -> Derivation:
    """The paper's form of repeated all-reduces over a cluster."""
    a1 = sp.Eq(t_allreduce, t_bw + t_lat)
    a2 = REPEATS_ALLREDUCE.apply(a1)
    a3 = RING_BYTES.apply(a2)
    a4 = CONSTANTS.apply(a3)
    a5 = sp.Eq(
        t_allreduce,
        as_written([RING_PHASES, parts - 1, n_words, rep_seq, rep_par, word], [N, halved(bw_level)])
        + sp.Mul(RING_PHASES, rep_seq, lat_level, evaluate=False),
    )
    return derivation(
        "collectives-allreduce-cluster",
        "Repeated all-reduces on a cluster",
        [
            Step("A collective costs its bandwidth time plus its latency time.", a1),
            Step(
                "Repeat an all-reduce $r_s$ times one after another and $r_p$ times side by "
                "side.  The $p$ participants of each send $p Q_{\\mathrm{AR}}$ bytes in all; "
                "spread evenly over the one-way links of the $N_{\\mathrm{GPU}}$ GPUs of the "
                "cluster, the total takes that many bytes over $N_{\\mathrm{GPU}} W_{\\ell} / 2$."
                "  Latency: the paper charges one message latency per phase, however many steps"
                " the phase has (the chunks stream through the ring), and side-by-side copies "
                "wait at the same time.",
                a2,
                using=REPEATS_ALLREDUCE,
            ),
            Step("Put in the bytes of one all-reduce.", a3, using=RING_BYTES),
            Step("Two phases.", a4, using=CONSTANTS),
            Step(
                "This is the form of Erdil & Schneider-Joseph (2024), for $p > 1$: with one "
                "participant nothing is sent, and the library charges no latency either.",
                a5,
            ),
        ],
        chapter=CHAPTER,
        notes=(
            "A textbook alpha-beta model of the ring charges p - 1 latencies per phase "
            "(Thakur, Rabenseifner & Gropp 2005); the paper's model charges one.",
        ),
    )


@register
def tiled_allreduce_derivation() -> Derivation:
    """The cluster form is r_s times one all-reduce's per-GPU time when r_p p = N."""
    b1 = repeated_allreduce_derivation().result
    b2 = TILED.apply(b1)
    b3 = sp.Eq(
        t_allreduce,
        rep_seq
        * (
            as_written([RING_PHASES, parts - 1, n_words, word], [parts, halved(bw_level)])
            + sp.Mul(RING_PHASES, lat_level, evaluate=False)
        ),
    )
    return derivation(
        "collectives-allreduce-tiled",
        "The cluster form agrees with the per-GPU form",
        [
            Step(
                "Start from the cluster form, {eq}`collectives-allreduce-cluster-5`.",
                b1,
            ),
            Step(
                "When the $r_p$ side-by-side all-reduces of $p$ GPUs each cover the cluster "
                "exactly, $N_{\\mathrm{GPU}} = r_p p$.",
                b2,
                using=TILED,
            ),
            Step(
                "The time is then $r_s$ times the per-GPU bandwidth time of one ring all-reduce, "
                "{eq}`collectives-ring-allreduce-5`, plus its two latencies: the two forms agree.  "
                "When $N_{\\mathrm{GPU}}$ exceeds $r_p p$, the cluster form assumes the traffic is "
                "shared out over every GPU's links (as the two-level all-reduce below does with its"
                " shards).",
                b3,
            ),
        ],
        chapter=CHAPTER,
    )


REPEATS_P2P = Substitution(
    "$r_s r_p$ transfers of $n_{\\mathrm{w}}$ words, their traffic spread over the "
    "$N_{\\mathrm{GPU}}$ GPUs; one message latency "
    "per transfer in sequence",
    {
        t_bw: _cluster_bandwidth_time(rep_seq * rep_par * n_words * word, bw_level),
        t_lat: rep_seq * lat_level,
    },
    kind="assumption",
    source="erdil2024datamovement",
)
ONE_PER_GPU = Substitution(
    "each GPU sends one of the parallel transfers", {N: rep_par}, kind="assumption"
)


@register
def p2p_derivation() -> Derivation:
    """Repeated point-to-point transfers."""
    c1 = sp.Eq(t_p2p, t_bw + t_lat)
    c2 = REPEATS_P2P.apply(c1)
    c3 = ONE_PER_GPU.apply(c2)
    c4 = sp.Eq(t_p2p, rep_seq * (n_words * word / one_way(bw_level) + lat_level))
    return derivation(
        "collectives-p2p",
        "Point-to-point transfers",
        [
            Step("Bandwidth time plus latency time.", c1),
            Step(
                "A transfer sends $n_{\\mathrm{w}}$ words once.  Repeated $r_s$ times in sequence "
                "and $r_p$ times side by side, the bytes are spread over the one-way links of the "
                "$N_{\\mathrm{GPU}}$ GPUs; each transfer in sequence waits one message latency.",
                c2,
                using=REPEATS_P2P,
            ),
            Step(
                "When each GPU sends one of the side-by-side transfers, $r_p = N_{\\mathrm{GPU}}$:",
                c3,
                using=ONE_PER_GPU,
            ),
            Step("each sequential transfer costs its bytes over one link, plus one latency.", c4),
        ],
        chapter=CHAPTER,
    )


LEVEL_BYTES = Substitution(
    "in the node, a ring all-reduce of the vector among $p_0$; between nodes, one of each GPU's "
    "shard of $n_{\\mathrm{w}} / p_0$ words among $p_1$",
    {q_ring0: _ring_bytes(parts0, n_words), q_ring1: _ring_bytes(parts1, n_words / parts0)},
)
SPLIT = Substitution(
    "the participants split over the two levels, $p = p_0 p_1$", {parts0: parts / parts1}
)


@register
def two_level_traffic_derivation() -> Derivation:
    """A two-level all-reduce moves as many bytes per GPU as a flat ring, mostly inside nodes."""
    q1 = sp.Eq(q_ring, q_ring0 + q_ring1)
    q2 = LEVEL_BYTES.apply(q1)
    q3 = CONSTANTS.apply(q2)
    q4 = sp.Eq(q_ring, RING_PHASES * n_words * word * (parts0 * parts1 - 1) / (parts0 * parts1))
    q5 = SPLIT.apply(q4)
    return derivation(
        "collectives-two-level-traffic",
        "Traffic of a two-level all-reduce",
        [
            Step(
                "Split an all-reduce among $p$ GPUs over the hierarchy: $p_0$ GPUs in each of $p_1$"
                " nodes.  Each GPU's bytes are those it sends inside its node and those it sends to"
                " other nodes.",
                q1,
            ),
            Step(
                "Inside the node: a reduce-scatter among $p_0$, which leaves each GPU with the "
                "node's sum of a $p_0$-th of the vector, and at the end an all-gather among $p_0$: "
                "together the bytes of a ring all-reduce among $p_0$.  Between them, each GPU "
                "all-reduces its shard with the $p_1 - 1$ GPUs at the same position in the other "
                "nodes: $p_0$ rings side by side, each of $n_{\\mathrm{w}} / p_0$ words.",
                q2,
                using=LEVEL_BYTES,
            ),
            Step("Two phases at each level.", q3, using=CONSTANTS),
            Step("Adding the two levels:", q4),
            Step(
                "which is exactly the traffic of a flat ring among all $p$ GPUs, "
                "{eq}`collectives-ring-allreduce-5`.  The split changes where the bytes go: only "
                "$(p_1 - 1) / (p - 1)$ of them cross the slow level.",
                q5,
                using=SPLIT,
            ),
        ],
        chapter=CHAPTER,
    )


LEVEL_COSTS = Substitution(
    "each level is a set of ring all-reduces on the cluster, {eq}`collectives-allreduce-cluster-3`",
    {
        # Level 0: an all-reduce of the vector among p_0, r_p p_1 of them side by side.
        t_bw0: _cluster_bandwidth_time(
            rep_seq * (rep_par * parts1) * parts0 * _ring_bytes(parts0, n_words), bw0
        ),
        # Level 1: an all-reduce of a p_0-th of the vector among p_1, r_p p_0 side by side.
        t_bw1: _cluster_bandwidth_time(
            rep_seq * (rep_par * parts0) * parts1 * _ring_bytes(parts1, n_words / parts0), bw1
        ),
        t_lat0: n_phases * rep_seq * lat0,
        t_lat1: n_phases * rep_seq * lat1,
    },
)


def _two_level_bandwidth(n: sp.Expr = N) -> tuple[sp.Expr, sp.Expr]:
    """Bandwidth times of the two levels, in the paper's form (phases = 2)."""
    level0 = (
        RING_PHASES * n_words * (parts0 - 1) * rep_seq * rep_par * parts1 * word
        / (n * one_way(bw0))
    )  # fmt: skip
    level1 = RING_PHASES * n_words * (parts1 - 1) * rep_seq * rep_par * word / (n * one_way(bw1))
    return level0, level1


@register
def two_level_allreduce_derivation() -> Derivation:
    """Time of an all-reduce split over the node and the network between nodes."""
    h1 = sp.Eq(t_allreduce, sp.Max(t_bw0, t_bw1) + t_lat0 + t_lat1)
    h2 = LEVEL_COSTS.apply(h1)
    h3 = CONSTANTS.apply(h2)
    level0, level1 = _two_level_bandwidth()
    h4 = sp.Eq(t_allreduce, sp.Max(level0, level1) + RING_PHASES * rep_seq * (lat0 + lat1))
    tiled = Substitution(
        "the parallel all-reduces tile the cluster",
        {N: rep_par * parts0 * parts1},
        kind="assumption",
    )
    h5 = tiled.apply(h4)
    in_node = as_written([RING_PHASES, parts0 - 1, n_words, rep_seq, word], [parts0, halved(bw0)])
    between = as_written(
        [RING_PHASES, parts1 - 1, n_words, rep_seq, word], [parts0, parts1, halved(bw1)]
    )
    h6 = sp.Eq(
        t_allreduce,
        sp.Max(in_node, between) + sp.Mul(RING_PHASES, rep_seq, lat0 + lat1, evaluate=False),
    )
    return derivation(
        "collectives-allreduce-two-level",
        "An all-reduce over two levels",
        [
            Step(
                "The two levels use different links (NVLink inside the node, InfiniBand between "
                "nodes), and the collective streams the vector in chunks: while one chunk crosses "
                "between nodes, others are reduced or gathered inside them.  So the bandwidth "
                "times of the levels overlap and the slower one binds; but every chunk goes "
                "through reduce-scatter, the between-node all-reduce and all-gather in that "
                "order, so the latencies add (Erdil & Schneider-Joseph 2024).",
                h1,
            ),
            Step(
                "Each level is a set of ring all-reduces spread over the cluster: inside the "
                "nodes, $r_p p_1$ all-reduces of the vector among $p_0$ at a time; between them, "
                "$r_p p_0$ all-reduces of a $p_0$-th of it among $p_1$.",
                h2,
                using=LEVEL_COSTS,
            ),
            Step("Two phases at each level.", h3, using=CONSTANTS),
            Step(
                "Collect the latencies.  (In the between-node term the shard, "
                "$n_{\\mathrm{w}} / p_0$ words, and its $p_0$ side-by-side copies cancelled in "
                "the step before: it is the cluster "
                "form of an all-reduce of the whole vector among $p_1$, which is how the paper "
                "accounts for the levels one by one.)",
                h4,
            ),
            Step(
                "When the all-reduces tile the cluster, $N_{\\mathrm{GPU}} = r_p p_0 p_1$:",
                h5,
                using=tiled,
            ),
            Step(
                "each GPU moves $2 (p_0 - 1) / p_0$ of the vector over NVLink and "
                "$2 (p_1 - 1) / p_1$ of its shard over InfiniBand, at the same time.  A level with "
                "one participant sends nothing and, as in the paper, pays no latency either; so "
                "with $p_1 = 1$ this is the in-node all-reduce and with $p_0 = 1$ the between-node "
                "one.",
                h6,
            ),
        ],
        chapter=CHAPTER,
        notes=(
            "Adding the bandwidth times instead (no overlap between levels) bounds the time from "
            "above; earlier versions of the authors' code added them, while their final code "
            "(October 2024) takes the larger: overlap_levels=False gives the sum.",
        ),
    )


# --- Cost formulas (seconds), in the paper's form -----------------------------------------
def _formulas() -> dict[str, tuple[sp.Expr, sp.Expr]]:
    ar = repeated_allreduce_derivation().result.rhs
    ar_bw = RING_PHASES * n_words * (parts - 1) * rep_seq * rep_par * word / (N * one_way(bw_level))
    ar_lat = _if_ring(parts, RING_PHASES * rep_seq * lat_level)
    if sp.simplify(ar - ar_bw - RING_PHASES * rep_seq * lat_level) != 0:
        raise RuntimeError("the all-reduce cost formula drifted from its derivation")
    p2p = p2p_derivation().steps[1].expr.rhs
    p2p_bw = REPEATS_P2P.mapping[t_bw]
    p2p_lat = REPEATS_P2P.mapping[t_lat]
    if sp.simplify(p2p - p2p_bw - p2p_lat) != 0:
        raise RuntimeError("the point-to-point cost formula drifted from its derivation")
    level0, level1 = _two_level_bandwidth()
    split_lat = _if_ring(parts0, RING_PHASES * rep_seq * lat0) + _if_ring(
        parts1, RING_PHASES * rep_seq * lat1
    )
    return {
        "allreduce_bandwidth": (ar_bw, u.second),
        "allreduce_latency": (ar_lat, u.second),
        "allreduce": (ar_bw + ar_lat, u.second),
        "p2p_bandwidth": (p2p_bw, u.second),
        "p2p_latency": (p2p_lat, u.second),
        "p2p": (p2p_bw + p2p_lat, u.second),
        "allreduce_two_level_bandwidth": (sp.Max(level0, level1), u.second),
        "allreduce_two_level_bandwidth_no_overlap": (level0 + level1, u.second),
        "allreduce_two_level_bandwidth_level0": (level0, u.second),
        "allreduce_two_level_bandwidth_level1": (level1, u.second),
        "allreduce_two_level_latency": (split_lat, u.second),
        "allreduce_two_level": (sp.Max(level0, level1) + split_lat, u.second),
    }


#: Each collective's time by name: (sympy expression, unit), unit-checked in the tests; built on
#: first use (:mod:`dmlimits.core.lazy`).
COST_FORMULAS: dict[str, tuple[sp.Expr, sp.Expr]]
_cost_formulas = cache(formula_cache.expressions(_formulas))

# Bytes one GPU sends (and receives) in one ring all-reduce: 2 (p - 1) / p n_w w.
ALLREDUCE_BYTES: sp.Expr = CONSTANTS.apply(_ring_bytes(parts, n_words))
#: Bytes each collective moves per GPU and level: (sympy expression, unit).
TRAFFIC_FORMULAS: dict[str, tuple[sp.Expr, sp.Expr]] = {
    "allreduce_bytes": (ALLREDUCE_BYTES, u.byte),
    "allreduce_two_level_bytes_intra": (
        CONSTANTS.apply(LEVEL_BYTES.mapping[q_ring0]),
        u.byte,
    ),
    "allreduce_two_level_bytes_inter": (
        CONSTANTS.apply(LEVEL_BYTES.mapping[q_ring1]),
        u.byte,
    ),
}


# --- Checks ----------------------------------------------------------------------------------


def check_level(level: Any) -> int:
    """The network level, 0 (inside an NVLink node) or 1 (between nodes)."""
    if isinstance(level, bool) or not isinstance(level, int | np.integer) or level not in LEVELS:
        raise ValueError(
            f"level: got {level!r}; expected 0 (within an NVLink node) or 1 (between nodes)"
        )
    return int(level)


def _repeats(seq: Any, par: Any) -> tuple[np.ndarray, np.ndarray]:
    return (
        numbers("seq", seq),
        numbers("par", par, strict=True),
    )


def _cluster(n_gpu: Any, default: np.ndarray, least: Any) -> np.ndarray:
    """The GPUs the traffic spreads over: ``default`` when ``None``; never fewer than ``least``, the
    participants of one collective."""
    if n_gpu is None:
        return default
    n = numbers("n_gpu", n_gpu, minimum=1)
    nb, lb = np.broadcast_arrays(n, np.asarray(least, dtype=float))
    short = nb < lb
    if np.any(short):
        raise ValueError(
            f"n_gpu: got {shown(nb[short].flat[0])}; expected at least the "
            f"{float(lb[short].flat[0]):g} GPUs taking part in one collective"
        )
    return n


def _check_node(scn: Scenario, p_node: np.ndarray, name: str) -> None:
    """Under the two-level topology a level-0 collective fits inside one node."""
    if scn["network.topology"] != "two-level" or not checking():
        return
    size = scn["network.node_size"]
    if np.any(p_node > size):
        bad = p_node[p_node > size].flat[0] if p_node.ndim else p_node
        raise ValueError(
            f"{name}: got {shown(bad)} at level 0; expected at most network.node_size = {size} "
            "GPUs (one NVLink node) under the two-level topology"
        )


def _check_topology(scn: Scenario) -> str:
    topology = scn["network.topology"]
    if topology not in TOPOLOGIES:
        raise ValueError(
            f"network.topology: got {topology!r}; expected one of {', '.join(TOPOLOGIES)}"
        )
    return topology


# --- The network of a scenario ------------------------------------------------------------
def level_bandwidth(scn: Scenario, level: int) -> float:
    """Bidirectional bandwidth per GPU (bytes/s) at ``level`` of the scenario's network.

    ``"two-level"``: NVLink at level 0, InfiniBand at level 1; ``"flat"``: NVLink at both (one
    NVLink domain for all GPUs); ``"unlimited"``: infinite, so every bandwidth time is zero.
    """
    scn = require_scenario(scn)
    level = check_level(level)
    topology = _check_topology(scn)
    if topology == "unlimited":
        return math.inf
    if topology == "flat" or level == 0:
        return float(scn["network.intra_node.bandwidth"])
    return float(scn["network.inter_node.bandwidth"])


def level_latency(scn: Scenario, level: int) -> float:
    """Latency of one message (seconds) at ``level``: the scenario's one figure for every level
    and every topology (the paper's variants change it by scaling, never by level)."""
    scn = require_scenario(scn)
    check_level(level)
    _check_topology(scn)
    return float(scn["network.latency"])


# --- Numeric functions, lambdified from COST_FORMULAS ------------------------------------------
class CommTime(NamedTuple):
    """Seconds of a collective: bandwidth time and latency time (numpy arrays or floats).

    They are kept apart because the step-time model overlaps some bandwidth time with compute
    but never latency; ``total`` is their sum.
    """

    bandwidth: Any
    latency: Any

    @property
    def total(self) -> Any:
        return self.bandwidth + self.latency


class LevelTimes(NamedTuple):
    """Seconds of a collective split over the two levels, each level's bandwidth time apart:
    on the links inside the nodes (``level0``), on the links between them (``level1``), and
    the latency (numpy arrays or floats).  Without overlap the bandwidth time is the two
    levels' sum; the search adds each level's time to the other traffic on the same links."""

    level0: Any
    level1: Any
    latency: Any


ONE_LEVEL_ARGS = (n_words, parts, rep_seq, rep_par, N, word, bw_level, lat_level)
_TWO_LEVEL_ARGS = (n_words, parts0, parts1, rep_seq, rep_par, N, word, bw0, bw1, lat0, lat1)


@cache
def _numeric(name: str):
    """The numeric function of :data:`COST_FORMULAS`' ``name``, kept between processes
    (:func:`dmlimits.core.formula_cache.lambdified`: a process that reads it derives nothing)."""
    return formula_cache.lambdified(f"collectives.{name}", lambda: _numeric_build(name))


def _numeric_build(name: str) -> tuple[tuple, sp.Expr]:
    expr, _ = _cost_formulas()[name]
    args = _TWO_LEVEL_ARGS if name.startswith("allreduce_two_level") else ONE_LEVEL_ARGS
    return args, expr


@cache
def _numeric_bytes():
    return sp.lambdify((n_words, parts, word), ALLREDUCE_BYTES, "numpy")


def _out(values: list[Any], shape: tuple[int, ...]) -> list[Any]:
    return [as_output(value, shape) for value in values]


def allreduce_bytes(scn: Scenario, words: Any, participants: Any) -> np.ndarray | float:
    """Bytes each GPU sends (and receives) in one ring all-reduce of ``words`` words among
    ``participants``: ``2 (p - 1) / p * words * model.word_bytes``
    (the ``collectives-ring-allreduce`` derivation)."""
    scn = require_scenario(scn)
    w = numbers("words", words)
    p = counts("participants", participants)
    shape = np.broadcast_shapes(w.shape, p.shape)
    value = _numeric_bytes()(w, p, float(scn["model.word_bytes"]))
    return _out([value], shape)[0]


def allreduce_time(
    scn: Scenario,
    words: Any,
    participants: Any,
    level: int,
    seq: Any = 1,
    par: Any = 1,
    n_gpu: Any = None,
) -> CommTime:
    """Seconds of ring all-reduces at one network level (Erdil & Schneider-Joseph 2024).

    ``words`` words among ``participants`` GPUs, ``seq`` times in sequence and ``par`` times in
    parallel, the traffic spread over ``n_gpu`` GPUs (default ``participants * par``: the
    parallel copies tile the cluster, and the time is ``seq`` times one all-reduce's per-GPU
    time).  Returns :class:`CommTime` (bandwidth, latency); words, participants, repeats and
    ``n_gpu`` broadcast as numpy arrays, and scalars give floats.
    """
    scn = require_scenario(scn)
    level = check_level(level)
    w = numbers("words", words)
    p = counts("participants", participants)
    r_s, r_p = _repeats(seq, par)
    if level == 0:
        _check_node(scn, p, "participants")
    n = _cluster(n_gpu, p * r_p, p)
    shape = np.broadcast_shapes(w.shape, p.shape, r_s.shape, r_p.shape, np.shape(n))
    args = (
        w, p, r_s, r_p, n,
        float(scn["model.word_bytes"]), level_bandwidth(scn, level), level_latency(scn, level),
    )  # fmt: skip
    values = [_numeric(k)(*args) for k in ("allreduce_bandwidth", "allreduce_latency")]
    return CommTime(*_out(values, shape))


def p2p_time(
    scn: Scenario,
    words: Any,
    level: int,
    seq: Any = 1,
    par: Any = 1,
    n_gpu: Any = None,
) -> CommTime:
    """Seconds of point-to-point transfers of ``words`` words at one level, ``seq`` times in
    sequence and ``par`` in parallel over ``n_gpu`` GPUs (default ``par``: one transfer per GPU).

    Bandwidth ``words * seq * par * word_bytes / (n_gpu * W_l / 2)``; latency ``seq * lambda_l``
    (Erdil & Schneider-Joseph 2024).  Returns :class:`CommTime`.
    """
    scn = require_scenario(scn)
    level = check_level(level)
    w = numbers("words", words)
    r_s, r_p = _repeats(seq, par)
    n = _cluster(n_gpu, r_p, 1.0)
    shape = np.broadcast_shapes(w.shape, r_s.shape, r_p.shape, np.shape(n))
    args = (
        w, 1.0, r_s, r_p, n,
        float(scn["model.word_bytes"]), level_bandwidth(scn, level), level_latency(scn, level),
    )  # fmt: skip
    values = [_numeric(k)(*args) for k in ("p2p_bandwidth", "p2p_latency")]
    return CommTime(*_out(values, shape))


def allreduce_time_split(
    scn: Scenario,
    words: Any,
    p_intra: Any,
    p_inter: Any,
    seq: Any = 1,
    par: Any = 1,
    n_gpu: Any = None,
    overlap_levels: bool = True,
) -> CommTime:
    """Seconds of two-level all-reduces among ``p_intra * p_inter`` GPUs, ``p_intra`` in each of
    ``p_inter`` nodes (the ``collectives-allreduce-two-level`` derivation).

    Reduce-scatter in the node, all-reduce of each shard between nodes, all-gather in the node.
    Bandwidth: the larger of the two levels' times (``overlap_levels=False``: their sum);
    latency: the levels' latencies added.  ``n_gpu`` defaults to ``p_intra * p_inter * par``.
    Returns :class:`CommTime`.
    """
    if not isinstance(overlap_levels, bool):
        raise ValueError(f"overlap_levels: got {overlap_levels!r}; expected True or False")
    args, shape = _two_level_args(scn, words, p_intra, p_inter, seq, par, n_gpu)
    bandwidth = (
        "allreduce_two_level_bandwidth"
        if overlap_levels
        else "allreduce_two_level_bandwidth_no_overlap"
    )
    values = [_numeric(k)(*args) for k in (bandwidth, "allreduce_two_level_latency")]
    return CommTime(*_out(values, shape))


def allreduce_level_times(
    scn: Scenario,
    words: Any,
    p_intra: Any,
    p_inter: Any,
    seq: Any = 1,
    par: Any = 1,
    n_gpu: Any = None,
) -> LevelTimes:
    """:func:`allreduce_time_split`'s all-reduces with each level's bandwidth time apart (the
    two terms of ``collectives-allreduce-two-level``'s bandwidth time) and their latency.
    Returns :class:`LevelTimes`; without overlap, the bandwidth time is ``level0 + level1``."""
    args, shape = _two_level_args(scn, words, p_intra, p_inter, seq, par, n_gpu)
    names = ("bandwidth_level0", "bandwidth_level1", "latency")
    return LevelTimes(*_out([_numeric(f"allreduce_two_level_{k}")(*args) for k in names], shape))


def _two_level_args(
    scn: Scenario, words: Any, p_intra: Any, p_inter: Any, seq: Any, par: Any, n_gpu: Any
) -> tuple[tuple, tuple[int, ...]]:
    """The checked arguments of the two-level all-reduce's numeric functions, and the shape
    they broadcast to."""
    scn = require_scenario(scn)
    w = numbers("words", words)
    p0 = counts("p_intra", p_intra)
    p1 = counts("p_inter", p_inter)
    _check_node(scn, p0, "p_intra")
    r_s, r_p = _repeats(seq, par)
    n = _cluster(n_gpu, p0 * p1 * r_p, p0 * p1)
    shape = np.broadcast_shapes(w.shape, p0.shape, p1.shape, r_s.shape, r_p.shape, np.shape(n))
    args = (
        w, p0, p1, r_s, r_p, n, float(scn["model.word_bytes"]),
        level_bandwidth(scn, 0), level_bandwidth(scn, 1),
        level_latency(scn, 0), level_latency(scn, 1),
    )  # fmt: skip
    return args, shape


def allreduce_time_levels(
    scn: Scenario,
    words: Any,
    p_intra: Any,
    p_inter: Any,
    seq: Any = 1,
    par: Any = 1,
    n_gpu: Any = None,
) -> tuple[CommTime, CommTime]:
    """The two levels of :func:`allreduce_time_split` one by one: (in the node, between nodes).

    Each is a :class:`CommTime` lambdified from the level terms of the
    ``collectives-allreduce-two-level`` derivation; the split's bandwidth time is the larger of
    the two bandwidth times (or, without overlap, their sum) and its latency their sum.  (The
    search takes :func:`allreduce_level_times` instead: the same two bandwidth times, and the
    split's latency as one.)
    """
    args, shape = _two_level_args(scn, words, p_intra, p_inter, seq, par, n_gpu)
    values = [f(*args) for f in _numeric_levels()]
    bw0_t, lat0_t, bw1_t, lat1_t = _out(values, shape)
    return CommTime(bw0_t, lat0_t), CommTime(bw1_t, lat1_t)


@cache
def _numeric_levels():
    """(bandwidth, latency) of each level in turn: the bandwidth terms are the kept cost
    formulas the search uses (``allreduce_two_level_bandwidth_level0/1``)."""
    latencies = [
        sp.lambdify(_TWO_LEVEL_ARGS, _if_ring(p, RING_PHASES * rep_seq * lat), "numpy")
        for p, lat in ((parts0, lat0), (parts1, lat1))
    ]
    return (
        _numeric("allreduce_two_level_bandwidth_level0"), latencies[0],
        _numeric("allreduce_two_level_bandwidth_level1"), latencies[1],
    )  # fmt: skip


@cache
def _numeric_bytes_split():
    args = (n_words, parts0, parts1, word)
    return tuple(
        sp.lambdify(args, TRAFFIC_FORMULAS[k][0], "numpy")
        for k in ("allreduce_two_level_bytes_intra", "allreduce_two_level_bytes_inter")
    )


def allreduce_bytes_split(
    scn: Scenario, words: Any, p_intra: Any, p_inter: Any
) -> tuple[np.ndarray | float, np.ndarray | float]:
    """Bytes each GPU sends (and receives) in a two-level all-reduce of ``words`` words among
    ``p_intra`` GPUs in each of ``p_inter`` nodes: (inside its node, between nodes), from
    :data:`TRAFFIC_FORMULAS` (the ``collectives-two-level-traffic`` derivation)."""
    scn = require_scenario(scn)
    w = numbers("words", words)
    p0 = counts("p_intra", p_intra)
    p1 = counts("p_inter", p_inter)
    shape = np.broadcast_shapes(w.shape, p0.shape, p1.shape)
    word_bytes = float(scn["model.word_bytes"])
    values = [f(w, p0, p1, word_bytes) for f in _numeric_bytes_split()]
    intra, inter = _out(values, shape)
    return intra, inter


# --- Where bandwidth time equals latency time ----------------------------------------------
q_cross = _decl(
    "Q_cross",
    r"Q_{\times}",
    "bytes of the vector at which a ring all-reduce's bandwidth time equals its latency time",
    _B,
    defined_in=CHAPTER,
)
ONE_ALLREDUCE = Substitution(
    "one all-reduce: the bytes of {eq}`collectives-ring-allreduce-3` over the one-way bandwidth, "
    "and one message latency per phase",
    {t_bw: _ring_bytes(parts, n_words) / one_way(bw_level), t_lat: n_phases * lat_level},
)
CROSSOVER_BYTES = Substitution(
    "the vector's size in bytes at the crossover", {n_words: q_cross / word}
)


@register
def crossover_derivation() -> Derivation:
    """The vector size at which one all-reduce's bandwidth time equals its latency time."""
    x1 = sp.Eq(t_bw, t_lat)
    x2 = ONE_ALLREDUCE.apply(x1)
    x3 = CONSTANTS.apply(x2)
    x4 = sp.Eq(n_words, lat_level * bw_level * parts / (DIRECTIONS * word * (parts - 1)))
    x5 = sp.Eq(
        q_cross,
        sp.Mul(
            lat_level,
            halved(bw_level),
            sp.Mul(parts, sp.Pow(parts - 1, -1, evaluate=False), evaluate=False),
            evaluate=False,
        ),
    )
    return derivation(
        "collectives-crossover",
        "Where bandwidth time equals latency time",
        [
            Step(
                "A small all-reduce is latency-bound and a large one bandwidth-bound; the two "
                "regimes meet where the bandwidth time equals the latency time.",
                x1,
            ),
            Step(
                "Take one all-reduce among p GPUs (at least two) at one level.",
                x2,
                using=ONE_ALLREDUCE,
            ),
            Step("Two phases.", x3, using=CONSTANTS),
            Step("Solve for the number of words.", x4, solve_for=n_words),
            Step(
                "In bytes: the latency times the one-way bandwidth, the bytes a link carries "
                "while one message waits, times $p / (p - 1)$, which tends to one as the ring "
                "grows.  Below this size latency dominates; above it, bandwidth.",
                x5,
                using=CROSSOVER_BYTES,
                solve_for=q_cross,
            ),
        ],
        chapter=CHAPTER,
        notes=(
            "The crossover is the bandwidth-delay product of the link, because the paper charges "
            "one latency per phase; a model charging p - 1 latencies per phase would move it "
            "up by about a factor p.",
        ),
    )


@cache
def _crossover() -> sp.Expr:
    return crossover_derivation().result.rhs


@cache
def _crossover_large_ring() -> sp.Expr:
    return sp.limit(_crossover(), parts, sp.oo)


#: Bytes of the vector at which a ring all-reduce takes as long in bandwidth as in latency
#: (``collectives-crossover``); built on first use (:mod:`dmlimits.core.lazy`).
CROSSOVER: sp.Expr
#: The crossover of a large ring, p -> infinity: the link's bandwidth-delay product; built on
#: first use.
CROSSOVER_LARGE_RING: sp.Expr
__getattr__ = lazy.attributes(
    __name__,
    COST_FORMULAS=_cost_formulas,
    CROSSOVER=_crossover,
    CROSSOVER_LARGE_RING=_crossover_large_ring,
)


@cache
def _numeric_crossover():
    return sp.lambdify((parts, bw_level, lat_level), _crossover(), "numpy")


def crossover_bytes(scn: Scenario, participants: Any, level: int) -> np.ndarray | float:
    """Bytes of the vector at which one ring all-reduce among ``participants`` (at least two) at
    ``level`` takes as long in bandwidth as in latency (the ``collectives-crossover``
    derivation).  Smaller vectors are latency-bound, larger ones bandwidth-bound.  Infinite when
    the network has no bandwidth limit."""
    scn = require_scenario(scn)
    level = check_level(level)
    p = counts("participants", participants, 2)
    if level == 0:
        _check_node(scn, p, "participants")
    value = _numeric_crossover()(p, level_bandwidth(scn, level), level_latency(scn, level))
    return _out([value], p.shape)[0]


def crossover_bytes_split(
    scn: Scenario, p_intra: Any, p_inter: Any, overlap_levels: bool = True
) -> np.ndarray | float:
    """Bytes of the vector at which a two-level all-reduce (``p_intra`` GPUs in each of
    ``p_inter`` nodes, at least two GPUs in all) takes as long in bandwidth as in latency.

    The bandwidth time of :func:`allreduce_time_split` is proportional to the words and its
    latency does not depend on them, so the crossover is the latency over the bandwidth time of
    one word.  Infinite when the network has no bandwidth limit.
    """
    scn = require_scenario(scn)
    p0 = counts("p_intra", p_intra)
    p1 = counts("p_inter", p_inter)
    if np.any(p0 * p1 < 2):
        raise ValueError(
            f"p_intra * p_inter: got {shown(np.min(p0 * p1))}; expected at least two GPUs "
            "(alone, a GPU sends nothing and waits for nothing)"
        )
    per_word = allreduce_time_split(scn, 1.0, p0, p1, overlap_levels=overlap_levels)
    with np.errstate(divide="ignore"):
        words = np.divide(per_word.latency, per_word.bandwidth)
    return _out([words * float(scn["model.word_bytes"])], np.shape(words))[0]


# --- When the two levels take equally long ----------------------------------------------
@cache
def balance_expr() -> sp.Eq:
    """The between-node bandwidth at which both levels of a two-level all-reduce take the same
    bandwidth time, solved by sympy from the level terms of the two-level derivation."""
    level0, level1 = _two_level_bandwidth()
    (solution,) = sp.solve(sp.Eq(level0, level1), bw1)
    return sp.Eq(bw1, sp.factor(solution))


@cache
def _numeric_balance():
    return sp.lambdify((parts0, parts1, bw0), balance_expr().rhs, "numpy")


def balanced_inter_bandwidth(scn: Scenario, p_intra: Any, p_inter: Any) -> np.ndarray | float:
    """Bidirectional between-node bandwidth per GPU (bytes/s) at which the two levels of an
    all-reduce among ``p_intra`` GPUs in each of ``p_inter`` nodes (both at least two) take
    equally long, on a two-level network whose nodes have the scenario's NVLink bandwidth
    (``network.intra_node.bandwidth``).  A slower InfiniBand level binds; a faster one leaves
    NVLink binding."""
    scn = require_scenario(scn)
    p0 = counts("p_intra", p_intra, 2)
    p1 = counts("p_inter", p_inter, 2)
    _check_node(scn, p0, "p_intra")
    shape = np.broadcast_shapes(p0.shape, p1.shape)
    value = _numeric_balance()(p0, p1, float(scn["network.intra_node.bandwidth"]))
    return _out([value], shape)[0]


# --- Figures -----------------------------------------------------------------------------------
def link_name(scn: Scenario, level: int) -> str:
    """What carries ``level`` in the scenario's topology: NVLink, InfiniBand or no limit."""
    topology = _check_topology(require_scenario(scn))
    if topology == "unlimited":
        return "an unlimited network"
    return "InfiniBand" if topology == "two-level" and check_level(level) == 1 else "NVLink"
