"""Expert parallelism: where a token's next expert lives, and what it costs to get there.

Erdil & Schneider-Joseph (2024, "Data movement limits to frontier model training",
arXiv:2411.01137) spread the ``S`` experts of every block over ``N_EP = gcd(N_GPU, S)`` GPUs
(in the authors' final code, ``optimal_parallelism.ipynb`` in the public repository
``ege-erdil/limits_to_distributed_training``, commit b1f771c, October 2024).  This module
derives that part of the model in sympy:

* **Placement.**  The expert-parallel group splits over the hierarchy like every other degree:
  ``N_EP = N_EP,0 N_EP,1``, ``N_EP,0`` GPUs in each of ``N_EP,1`` nodes, each GPU holding
  ``S / N_EP`` experts of every block.
* **Uniform routing.**  A token's expert in the next block is any of the ``S`` with equal chance,
  whatever its expert in this block.  The token sits on the GPU of its current expert, so its
  next expert is on the same GPU with probability ``1 / N_EP``, on another GPU of the node with
  ``(N_EP,0 - 1) / N_EP`` and in another node with ``(N_EP,1 - 1) / N_EP,1``.
* **The all-to-all as point-to-point transfers.**  At every layer interface each token's
  activations (``d_model`` words) go to the GPU of its next expert, and their gradients come back
  in the backward pass: the traffic of a pipeline stage boundary (:mod:`dmlimits.costs.pipeline`),
  but paid in bandwidth only for tokens whose expert lives elsewhere, at the level where it lives.
  The expected bandwidth times of the two levels add, as in the paper.  Latency: every interface
  pays one message latency each way at the highest level the group spans (with many tokens some
  token always goes there), as the authors' final code does; ``latency="expected"`` weights it
  by the probabilities instead, as earlier versions of their code did.
* **With a pipeline.**  A layer interface that is also a stage boundary is crossed once, over the
  higher of the pipeline's level and the expert's level; the other ``L - v N_PP`` interfaces
  carry expert traffic only.

Every cost is a sympy expression in registered symbols (:data:`COST_FORMULAS`, unit-checked by the
tests), built from the point-to-point expressions of :mod:`dmlimits.costs.collectives`; the numeric
functions are lambdified from the same expressions and broadcast over numpy arrays.
"""

from __future__ import annotations

from functools import cache
from typing import Any, NamedTuple

import numpy as np
import sympy as sp

from dmlimits.core import formula_cache, lazy
from dmlimits.core import symbols as s
from dmlimits.core import units as u
from dmlimits.core.checks import as_output as _out
from dmlimits.core.checks import counts, numbers, require_scenario, shown
from dmlimits.core.derivation import Derivation, Step, Substitution, derivation, register
from dmlimits.core.scenario import Scenario
from dmlimits.costs import collectives as co
from dmlimits.costs import model
from dmlimits.costs import pipeline as ppm
from dmlimits.costs.matmul import word

CHAPTER = "expert_parallel"
LATENCY_RULES = ("highest", "expected")
#: The rules of the search that this chapter derives and calls the default (the scenario
#: schema's defaults are these; tests/test_choices.py checks both and that the search follows).
CHAPTER_RULES = {"search.expert_latency": "highest"}

_decl = s.REGISTRY.declare
_S = u.second
_B = u.byte

# --- Symbols -----------------------------------------------------------------------------------
n_ep = _decl(
    "N_EP",
    r"N_{\mathrm{EP}}",
    "expert-parallel degree: GPUs the experts of one block are spread over",
    defined_in=CHAPTER,
    integer=True,
)
n_ep0 = _decl(
    "N_EP0",
    r"N_{\mathrm{EP},0}",
    "GPUs of the expert-parallel group in each node",
    defined_in=CHAPTER,
    integer=True,
)
n_ep1 = _decl(
    "N_EP1",
    r"N_{\mathrm{EP},1}",
    "nodes the expert-parallel group spans",
    defined_in=CHAPTER,
    integer=True,
)
experts_per_gpu = _decl(
    "S_GPU_EP",
    r"S_{\mathrm{GPU}}",
    "experts of one block on each GPU of the expert-parallel group",
    defined_in=CHAPTER,
)
p_self = _decl(
    "P_EP_self",
    r"P_{\mathrm{self}}",
    "probability that a token's next expert is on its own GPU",
    defined_in=CHAPTER,
)
p_node = _decl(
    "P_EP0",
    "P_0",
    "probability that a token's next expert is on another GPU of its node",
    defined_in=CHAPTER,
)
p_net = _decl(
    "P_EP1",
    "P_1",
    "probability that a token's next expert is in another node",
    defined_in=CHAPTER,
)
p_remote = _decl(
    "P_EP_rem",
    r"P_{\mathrm{rem}}",
    "probability that a token's next expert is on another GPU",
    defined_in=CHAPTER,
)
q_ep0 = _decl(
    "Q_EP0",
    r"Q_{\mathrm{EP},0}",
    "expected bytes one GPU sends inside its node per layer interface (both passes)",
    _B,
    defined_in=CHAPTER,
)
q_ep1 = _decl(
    "Q_EP1",
    r"Q_{\mathrm{EP},1}",
    "expected bytes one GPU sends to other nodes per layer interface (both passes)",
    _B,
    defined_in=CHAPTER,
)
n_if = _decl(
    "n_if_EP",
    r"n_{\mathrm{if}}",
    "layer interfaces crossed one after another, each forward and backward",
    defined_in=CHAPTER,
)
n_only = _decl(
    "n_EP_only",
    r"n_{\mathrm{EP\,only}}",
    "layer interfaces that carry expert traffic only (no pipeline stage crossing), per pass",
    defined_in=CHAPTER,
    integer=True,
    may_be_zero=True,
)
t_ep_bw = _decl(
    "t_EP_bw",
    r"t_{\mathrm{EP,bw}}",
    "expected bandwidth time of the expert traffic of layer interfaces",
    _S,
    defined_in=CHAPTER,
)
t_ep_lat = _decl(
    "t_EP_lat",
    r"t_{\mathrm{EP,lat}}",
    "latency time of the expert traffic of layer interfaces",
    _S,
    defined_in=CHAPTER,
)
crosses_nodes = _decl(
    "delta_PP_EP",
    r"\delta_{\mathrm{PP}}",
    "1 when a pipeline stage boundary lies between nodes, 0 when inside a node",
    defined_in=CHAPTER,
)
share1 = _decl(
    "s_EP1",
    "s_1",
    "share of the tokens at a stage boundary that cross between nodes",
    defined_in=CHAPTER,
)
t_cross_bw = _decl(
    "t_X_bw_EP",
    r"t_{\mathrm{X,bw}}",
    "expected bandwidth time of stage boundary crossings under expert parallelism",
    _S,
    defined_in=CHAPTER,
)
t_comp = _decl(
    "t_comp_EP",
    r"t_{\mathrm{comp,EP}}",
    "matmul time of one layer's forward and backward pass at the effective utilization",
    _S,
    defined_in=CHAPTER,
)
ratio = _decl(
    "rho_EP",
    r"\rho_{\mathrm{EP}}",
    "expected expert bandwidth time of a layer interface over the layer's matmul time",
    defined_in=CHAPTER,
)
n_tok = ppm.n_tok  # tokens whose activations cross the interface (all of a step's tokens)
N = s.n_gpu  # the cluster the traffic is spread over

# The paper's expert-parallel degree: a function sympy keeps unevaluated (gcd of two symbols
# would simplify to 1); lambdified to numpy.gcd.
gcd = sp.Function("gcd")
EP_DEGREE = gcd(s.n_gpu, s.n_experts)

# --- Named substitutions -------------------------------------------------------------------
EVEN = Substitution(
    "the experts of a block are spread evenly over the group",
    {experts_per_gpu: s.n_experts / n_ep},
    kind="assumption",
    source="erdil2024datamovement",
)
SPLIT = Substitution("the group splits over the levels", {n_ep: n_ep0 * n_ep1}, kind="definition")
# Same node: the other N_EP,0 - 1 GPUs of the token's node; other node: every GPU of the other
# N_EP,1 - 1 nodes.  Uniform routing: each expert is the next one with chance 1 / S.
_SAME_NODE = (n_ep0 - 1) * experts_per_gpu / s.n_experts
_OTHER_NODE = (n_ep1 - 1) * n_ep0 * experts_per_gpu / s.n_experts


def _probability(expr: sp.Expr) -> sp.Expr:
    return sp.factor(sp.simplify(SPLIT.apply(EVEN.apply(expr))))


@formula_cache.expressions
def _level_probabilities() -> tuple[sp.Expr, sp.Expr, sp.Expr]:
    """The chances of the same node, another node and the token's own GPU, simplified (kept
    between processes, so that each process does not simplify them again with sympy)."""
    return tuple(_probability(e) for e in (_SAME_NODE, _OTHER_NODE, experts_per_gpu / s.n_experts))


P_NODE, P_NET, P_SELF = _level_probabilities()
LEVEL_PROBABILITIES = Substitution(
    "uniform routing, {eq}`expert-parallel-same-node-3` and {eq}`expert-parallel-other-node-3`",
    {p_node: P_NODE, p_net: P_NET},
    kind="assumption",
    source="erdil2024datamovement",
)


def _p2p_bandwidth(level_bandwidth: sp.Expr, sequence: sp.Expr) -> sp.Expr:
    """The collectives module's point-to-point bandwidth time (``collectives-p2p-2``) for one
    ``d_model``-word transfer per token, ``sequence`` transfers one after another."""
    return co.REPEATS_P2P.mapping[co.t_bw].subs(
        {
            co.bw_level: level_bandwidth,
            co.n_words: s.d_model,
            co.rep_seq: sequence,
            co.rep_par: n_tok,
        }
    )


# Forward and backward through each of n_if interfaces: 2 n_if transfers in sequence.
_SEQUENCE = ppm.BOUNDARY_PASSES * n_if
P2P_LEVELS = Substitution(
    r"point-to-point transfers of $d_{\mathrm{model}}$ words per token (collectives chapter), "
    r"forward and backward through each of $n_{\mathrm{if}}$ interfaces",
    {co.t_bw0: _p2p_bandwidth(co.bw0, _SEQUENCE), co.t_bw1: _p2p_bandwidth(co.bw1, _SEQUENCE)},
    kind="assumption",
    source="erdil2024datamovement",
)
LEVEL_BYTES = Substitution(
    r"a share of the stage-boundary traffic, spread over the $N_{\mathrm{GPU}}$ GPUs",
    {
        q_ep0: p_node * ppm.BOUNDARY_BYTES / N,
        q_ep1: p_net * ppm.BOUNDARY_BYTES / N,
    },
)
WORSE_LEVEL = Substitution(
    "a crossing goes over the higher of the pipeline's level and the expert's level",
    {share1: crosses_nodes + (1 - crosses_nodes) * p_net},
    kind="assumption",
    source="erdil2024datamovement",
)
INSIDE_NODE = Substitution(
    "the stage boundary lies inside a node", {crosses_nodes: 0}, kind="assumption"
)
ONE_CROSSING = Substitution("one crossing", {n_if: 1})
FULL_INTERLEAVING = Substitution(
    "the paper's full interleaving, one block per chunk",
    {ppm.interleave: s.n_layers / ppm.n_pp},
    kind="assumption",
    source="erdil2024datamovement",
)
LAYER_COMPUTE = Substitution(
    r"the layer's arithmetic for all $n_{\mathrm{tok}}$ tokens, spread over the $N_{\mathrm{GPU}}$ "
    "GPUs at the effective utilization",
    {
        t_comp: s.macs_per_param_token
        * s.flop_per_mac
        * 2
        * s.d_model
        * s.d_ff
        * n_tok
        / (N * s.peak_flops * s.eff_util)
    },
    kind="assumption",
)
MACS = Substitution(
    "one multiply-accumulate per parameter per token forward, two backward",
    {s.macs_per_param_token: model.PASS_COUNTS.mapping[s.macs_per_param_token]},
)


# --- Derivations -----------------------------------------------------------------------------
# Inline math for the step sentences, in the registered notation.
_N0 = r"$N_{\mathrm{EP},0}$"
_N1 = r"$N_{\mathrm{EP},1}$"
_N0M = r"$N_{\mathrm{EP},0} - 1$"
_N1M = r"$N_{\mathrm{EP},1} - 1$"
_NEP = r"$N_{\mathrm{EP}}$"
_SG = r"$S_{\mathrm{GPU}}$"
_NIF = r"$n_{\mathrm{if}}$"
_NT = r"$n_{\mathrm{tok}}$"
_DM = r"$d_{\mathrm{model}}$"


def _level_derivation(name: str, title: str, prob: sp.Symbol, count: sp.Expr, text: str):
    e1 = sp.Eq(prob, count)
    e2 = EVEN.apply(e1)
    e3 = SPLIT.apply(e2)
    return derivation(
        name,
        title,
        [
            Step(text, e1),
            Step(
                "Each GPU of the group holds the same number of experts of every block.",
                e2,
                using=EVEN,
            ),
            Step(f"The group has {_N0} GPUs in each of {_N1} nodes.", e3, using=SPLIT),
        ],
        chapter=CHAPTER,
    )


@register
def same_node_derivation() -> Derivation:
    """The chance that a token's next expert is on another GPU of its node."""
    return _level_derivation(
        "expert-parallel-same-node",
        "Next expert in the same node",
        p_node,
        _SAME_NODE,
        "Uniform routing: the token's expert in the next block is any of the $S$ experts with "
        "equal chance, whatever its expert in this block.  The token sits on the GPU of its "
        f"current expert; the other {_N0M} GPUs of the group in its node hold {_SG} experts "
        "each.",
    )


@register
def other_node_derivation() -> Derivation:
    """The chance that a token's next expert is in another node."""
    return _level_derivation(
        "expert-parallel-other-node",
        "Next expert in another node",
        p_net,
        _OTHER_NODE,
        f"The other {_N1M} nodes of the group hold {_N0} GPUs of {_SG} experts each.",
    )


@register
def remote_derivation() -> Derivation:
    """Leaving the GPU at all: ``1 - 1 / N_EP``."""
    r1 = sp.Eq(p_remote, p_node + p_net)
    r2 = LEVEL_PROBABILITIES.apply(r1)
    r3 = sp.Eq(p_remote, 1 - 1 / (n_ep0 * n_ep1))
    return derivation(
        "expert-parallel-remote",
        "Next expert on another GPU",
        [
            Step(
                "A token leaves its GPU when its next expert is on another GPU of the node or "
                "in another node.",
                r1,
            ),
            Step("Put in the two probabilities.", r2, using=LEVEL_PROBABILITIES),
            Step(
                f"Only the token's own GPU, one of the {_NEP}, spares it the trip: the remote "
                f"probability is $1 - 1/N_{{\\mathrm{{EP}}}}$ however the group is split.  The "
                "split decides only how much of it crosses the slow level.",
                r3,
            ),
        ],
        chapter=CHAPTER,
    )


@register
def interface_bytes_derivation() -> Derivation:
    """Expected bytes per GPU per layer interface and their bandwidth time."""
    b1 = sp.Eq(t_ep_bw, n_if * (q_ep0 / co.one_way(co.bw0) + q_ep1 / co.one_way(co.bw1)))
    b2 = LEVEL_BYTES.apply(b1)
    b3 = sp.Eq(
        t_ep_bw,
        p_node * P2P_LEVELS.mapping[co.t_bw0] + p_net * P2P_LEVELS.mapping[co.t_bw1],
    )
    b4 = LEVEL_PROBABILITIES.apply(b3)
    return derivation(
        "expert-parallel-interface",
        "Expert traffic at layer interfaces",
        [
            Step(
                f"At each of {_NIF} interfaces in a row, every GPU sends its expected bytes for "
                "GPUs of its node over NVLink and those for other nodes over InfiniBand, each "
                "over the level's one-way bandwidth.  As in the paper, the expected times of "
                "the two levels add.",
                b1,
            ),
            Step(
                "A token whose next expert lives on another GPU moves what crosses a pipeline "
                f"stage boundary: its {_DM} activations forward and their gradients backward.  "
                f"A share $P_\\ell$ of all {_NT} tokens goes to level $\\ell$, and the tokens are "
                "spread "
                "evenly over the $N_{\\mathrm{GPU}}$ GPUs.",
                b2,
                using=LEVEL_BYTES,
            ),
            Step(
                f"Equivalently, the all-to-all is a set of point-to-point transfers of {_DM} "
                "words, one per token, side by side, and one after another for the two passes "
                f"through the {_NIF} interfaces (the collectives chapter's point-to-point time), "
                "taken inside the node with probability $P_0$ and between nodes with probability "
                "$P_1$.  A "
                "token whose next expert stays on its GPU sends nothing.",
                b3,
            ),
            Step(
                "With uniform routing: the NVLink term falls as the group spreads over more "
                "nodes, and the InfiniBand term approaches all of the traffic.",
                b4,
                using=LEVEL_PROBABILITIES,
            ),
        ],
        chapter=CHAPTER,
        notes=(
            "Adding the two levels' times is an upper bound: the levels use different links "
            "and could overlap.  The authors' code adds them.",
        ),
    )


@register
def crossing_derivation() -> Derivation:
    """A stage boundary under expert parallelism: the higher of the two levels."""
    x1 = sp.Eq(t_cross_bw, (1 - share1) * co.t_bw0 + share1 * co.t_bw1)
    x2 = WORSE_LEVEL.apply(x1)
    x3 = LEVEL_PROBABILITIES.apply(x2)
    x4 = P2P_LEVELS.apply(x3)
    x5 = INSIDE_NODE.apply(x4)
    x6 = ONE_CROSSING.apply(x5)
    return derivation(
        "expert-parallel-crossing",
        "Pipeline and expert crossings combined",
        [
            Step(
                "At a layer interface that is also a pipeline stage boundary every token moves "
                "to the next stage, even one whose next expert has the same place in the "
                "next stage's group as its current one: the crossing is paid in full, once.  A "
                "share $s_1$ of the tokens goes between nodes, the rest inside a node.",
                x1,
            ),
            Step(
                "The transfer goes over the higher of the two levels: between nodes when the "
                "stage boundary lies between nodes, and otherwise when the token's next expert "
                "lives in another node.",
                x2,
                using=WORSE_LEVEL,
            ),
            Step("Uniform routing.", x3, using=LEVEL_PROBABILITIES),
            Step("The point-to-point transfers of the collectives chapter.", x4, using=P2P_LEVELS),
            Step(
                "When the stage boundary lies between nodes every token takes InfiniBand, and "
                "expert parallelism adds nothing.  Inside a node it is expert placement that "
                r"decides: a fraction $1/N_{\mathrm{EP},1}$ of the tokens stays in the node.",
                x5,
                using=INSIDE_NODE,
            ),
            Step("For one crossing:", x6, using=ONE_CROSSING),
        ],
        chapter=CHAPTER,
    )


@register
def interfaces_derivation() -> Derivation:
    """How many layer interfaces carry expert traffic only."""
    # The count may be zero, so its symbol is declared non-negative: "count = 0" stays an
    # equation instead of evaluating to False.
    i1 = sp.Eq(n_only, sp.Add(s.n_layers - 1, -ppm.CROSSINGS, evaluate=False), evaluate=False)
    i2 = sp.Eq(n_only, s.n_layers - ppm.interleave * ppm.n_pp)
    i3 = sp.Eq(n_only, FULL_INTERLEAVING.apply(i2.rhs), evaluate=False)
    return derivation(
        "expert-parallel-interfaces",
        "Interfaces with expert traffic only",
        [
            Step(
                "A token passes $L - 1$ layer interfaces in each pass.  Of these, the "
                "$v N_{\\mathrm{PP}} - 1$ "
                "chunk boundaries of the pipeline are stage crossings (the pipeline chapter); "
                "the rest carry expert traffic only.",
                i1,
            ),
            Step("The two ones cancel:", i2),
            Step(
                "With the paper's full interleaving every interface is a stage boundary, so "
                "all expert traffic rides on pipeline crossings; without a pipeline "
                "($N_{\\mathrm{PP}} = v = 1$) all $L - 1$ interfaces are expert-only.",
                i3,
                using=FULL_INTERLEAVING,
            ),
        ],
        chapter=CHAPTER,
    )


@register
def versus_compute_derivation() -> Derivation:
    """The expert traffic of an interface against the matmuls of a layer."""
    bandwidth = interface_bytes_derivation().result.rhs
    at_bandwidth = Substitution(
        "expert traffic of one interface, {eq}`expert-parallel-interface-4`",
        {t_ep_bw: ONE_CROSSING.apply(bandwidth)},
    )
    v1 = sp.Eq(ratio, t_ep_bw / t_comp)
    v2 = at_bandwidth.apply(v1)
    v3 = LAYER_COMPUTE.apply(v2)
    v4 = MACS.apply(v3)
    v5 = sp.Eq(
        ratio,
        2 * word * s.peak_flops * s.eff_util * (P_NODE / co.bw0 + P_NET / co.bw1)
        / (MACS.mapping[s.macs_per_param_token] * s.flop_per_mac * s.d_ff),
    )  # fmt: skip
    return derivation(
        "expert-parallel-versus-compute",
        "Expert traffic against compute",
        [
            Step(
                "The paper overlaps the bandwidth time of expert traffic with the matmuls; "
                "compare the two for one layer.",
                v1,
            ),
            Step("The expert traffic of one interface:", v2, using=at_bandwidth),
            Step(
                "A layer's two weight matrices are "
                r"$2 d_{\mathrm{model}} d_{\mathrm{ff}}$ active parameters per token.",
                v3,
                using=LAYER_COMPUTE,
            ),
            Step("Counting the passes:", v4, using=MACS),
            Step(
                "The tokens, the width and the cluster cancel: both grow with the tokens per "
                f"GPU and with {_DM}.  What is left falls with the hidden width, so expert "
                "traffic hides ever more easily behind compute as models grow; its latency, "
                "which cannot hide, is what remains.",
                v5,
            ),
        ],
        chapter=CHAPTER,
    )


# --- Cost formulas -----------------------------------------------------------------------------
def _flag(condition: sp.Basic) -> sp.Expr:
    """A dimensionless 0/1 switch, so that both branches share a unit."""
    return sp.Piecewise((1, condition), (0, True))


# The highest level the group spans: level 1 when it spans nodes, else level 0 when it has more
# than one GPU, else none.
TOP_LATENCY = co.lat1 * _flag(n_ep1 > 1) + co.lat0 * _flag(sp.And(n_ep1 <= 1, n_ep0 > 1))
EP_LATENCY = _SEQUENCE * TOP_LATENCY
EP_LATENCY_EXPECTED = _SEQUENCE * (P_NODE * co.lat0 + P_NET * co.lat1)
EP_BYTES_INTRA = LEVEL_PROBABILITIES.apply(LEVEL_BYTES.mapping[q_ep0])
EP_BYTES_INTER = LEVEL_PROBABILITIES.apply(LEVEL_BYTES.mapping[q_ep1])
# Stage crossings under expert parallelism: n_if crossings of the boundary.
CROSSING_LATENCY = _SEQUENCE * co.lat_level


@cache
def _crossing_bandwidth() -> sp.Expr:
    return crossing_derivation().steps[3].expr.rhs


@cache
def _p_remote() -> sp.Expr:
    return remote_derivation().result.rhs


#: Bandwidth time of the stage crossings under expert parallelism (``expert-parallel-crossing``,
#: step 4); built on first use (:mod:`dmlimits.core.lazy`).
CROSSING_BANDWIDTH: sp.Expr
#: Probability that a token's next expert is on another GPU (``expert-parallel-remote``); built
#: on first use.
P_REMOTE: sp.Expr


def _formulas() -> dict[str, tuple[sp.Expr, sp.Expr]]:
    bandwidth = interface_bytes_derivation().result.rhs
    direct = n_if * (EP_BYTES_INTRA / co.one_way(co.bw0) + EP_BYTES_INTER / co.one_way(co.bw1))
    if sp.simplify(bandwidth - direct) != 0:
        raise RuntimeError("the expert bandwidth time drifted from its bytes")
    return {
        "bytes_intra": (EP_BYTES_INTRA, u.byte),
        "bytes_inter": (EP_BYTES_INTER, u.byte),
        "bandwidth": (bandwidth, u.second),
        "latency": (EP_LATENCY, u.second),
        "latency_expected": (EP_LATENCY_EXPECTED, u.second),
        "crossing_bandwidth": (_crossing_bandwidth(), u.second),
        "crossing_latency": (CROSSING_LATENCY, u.second),
        "layer_compute": (LAYER_COMPUTE.mapping[t_comp], u.second),
        "ratio_to_compute": (versus_compute_derivation().result.rhs, u.one),
        "ep_only_interfaces": (interfaces_derivation().steps[1].expr.rhs, u.one),
    }


#: Each expert-parallel cost by name: (sympy expression, unit), unit-checked in the tests; built
#: on first use.
COST_FORMULAS: dict[str, tuple[sp.Expr, sp.Expr]]
_cost_formulas = cache(formula_cache.expressions(_formulas))


@cache
def _summary() -> dict[str, Any]:
    return {
        "parallelism": "expert",
        "what_moves": (
            "each token's activations to the GPU of its next expert at every layer interface, and "
            "their gradients back, when that expert lives on another GPU"
        ),
        # Expected bytes per GPU per layer interface, forward and backward.
        "volume": _p_remote().subs(n_ep0 * n_ep1, n_ep) * ppm.BOUNDARY_BYTES / N,
        "volume_per": "GPU and layer interface (expected)",
        "latency_per": "layer interface",
        "link": "NVLink inside the node; InfiniBand once the group spans nodes",
        "overlaps_compute": True,
        # One message each way per layer interface, at the highest level the group spans.
        "latency": ppm.BOUNDARY_PASSES * co.lat_level,
    }


#: The summary page's row (:mod:`dmlimits.book.summary`); built on first use.
SUMMARY: dict[str, Any]
__getattr__ = lazy.attributes(
    __name__,
    COST_FORMULAS=_cost_formulas,
    SUMMARY=_summary,
    CROSSING_BANDWIDTH=_crossing_bandwidth,
    P_REMOTE=_p_remote,
)


# --- Checks ----------------------------------------------------------------------------------
def _group(scn: Scenario | None, ep_intra: Any, ep_inter: Any) -> tuple[np.ndarray, np.ndarray]:
    n0 = counts("ep_intra", ep_intra)
    n1 = counts("ep_inter", ep_inter)
    if scn is not None and scn["network.topology"] == "two-level":
        size = scn["network.node_size"]
        if np.any(n0 > size):
            bad = n0[n0 > size].flat[0] if n0.ndim else n0
            raise ValueError(
                f"ep_intra: got {shown(bad)}; expected at most network.node_size = {size} GPUs "
                "of the expert-parallel group in one node"
            )
    return n0, n1


def _cluster(n_gpu: Any, group: np.ndarray) -> np.ndarray:
    if n_gpu is None:
        return group
    n = numbers("n_gpu", n_gpu, minimum=1)
    nb, gb = np.broadcast_arrays(n, group)
    if np.any(nb < gb):
        i = np.flatnonzero((nb < gb).ravel())[0]
        raise ValueError(
            f"n_gpu: got {shown(nb.flat[i])}; expected at least the {shown(gb.flat[i])} GPUs of "
            "the expert-parallel group (ep_intra * ep_inter)"
        )
    return n


def _rule(latency: Any) -> str:
    if latency not in LATENCY_RULES:
        raise ValueError(f"latency: got {latency!r}; expected one of {', '.join(LATENCY_RULES)}")
    return latency


# --- Numeric functions, lambdified from the expressions above -------------------------------
_BW_ARGS = (s.d_model, n_tok, n_ep0, n_ep1, n_if, N, word, co.bw0, co.bw1)
_LAT_ARGS = (n_ep0, n_ep1, n_if, co.lat0, co.lat1)


def _numeric_build(what: str) -> tuple[tuple, Any]:
    """The arguments and the expression of the numeric function ``what`` (numpy's)."""
    if what in ("bytes_intra", "bytes_inter"):
        return (s.d_model, n_tok, n_ep0, n_ep1, N, word), _cost_formulas()[what][0]
    if what in ("bandwidth",):
        return _BW_ARGS, _cost_formulas()[what][0]
    if what in ("latency", "latency_expected"):
        return _LAT_ARGS, _cost_formulas()[what][0]
    if what == "crossing":
        return (*_BW_ARGS, crosses_nodes), _crossing_bandwidth()
    if what.startswith(("bandwidth_level", "crossing_level")):
        # One level's term: the time with the other level's links infinitely fast.
        base, level = what.rsplit("_level", 1)
        other = (co.bw1, co.bw0)[int(level)]
        args, expr = _numeric_build(base)
        return args, expr.subs(other, sp.oo)
    if what == "crossing_latency":
        return (n_if, co.lat_level), CROSSING_LATENCY
    if what == "ratio":
        args = (s.d_ff, n_ep0, n_ep1, word, s.peak_flops, s.eff_util, co.bw0, co.bw1)
        # Numerically, FLOP are plain numbers: the model chapter's pass counts, as values.
        return args, model.PASS_COUNTS.apply(_cost_formulas()["ratio_to_compute"][0])
    if what == "layer_compute":
        args = (s.d_model, s.d_ff, n_tok, N, s.peak_flops, s.eff_util)
        return args, model.PASS_COUNTS.apply(_cost_formulas()["layer_compute"][0])
    if what == "ep_only":
        return (s.n_layers, ppm.n_pp, ppm.interleave), _cost_formulas()["ep_only_interfaces"][0]
    raise KeyError(what)


@cache
def _numeric(what: str):
    """The numeric function ``what``, lambdified from its derivation; those with numpy's
    functions alone are kept between processes (:func:`dmlimits.core.formula_cache.lambdified`: a
    process that reads one derives nothing)."""
    if what == "degree":
        return sp.lambdify((s.n_gpu, s.n_experts), EP_DEGREE, [{"gcd": np.gcd}, "numpy"])
    if what == "probabilities":
        return sp.lambdify((n_ep0, n_ep1), (P_SELF.subs(n_ep, n_ep0 * n_ep1), P_NODE, P_NET))
    return formula_cache.lambdified(f"expert_parallel.{what}", lambda: _numeric_build(what))


class Probabilities(NamedTuple):
    """Where a token's next expert lives, under uniform routing (floats or numpy arrays)."""

    own_gpu: Any
    same_node: Any
    other_node: Any

    @property
    def remote(self) -> Any:
        return self.same_node + self.other_node


def ep_degree(n_gpu: Any, experts: Any) -> np.ndarray | float:
    """The paper's expert-parallel degree, ``gcd(N_GPU, S)``: the most GPUs that can share the
    experts of a block evenly while every other degree still divides the cluster."""
    n = counts("n_gpu", n_gpu)
    e = counts("experts", experts)
    shape = np.broadcast_shapes(n.shape, e.shape)
    # gcd(N, S) = gcd(N mod S, S): the cluster reduced first (fmod is exact, and N mod S < S
    # fits int64 whatever N), so that clusters beyond int64 (a slow GPU's largest runs, 1e19
    # GPUs and more) keep their degree instead of an invalid cast.
    reduced = np.fmod(*np.broadcast_arrays(n, e))
    return _out(_numeric("degree")(reduced.astype(np.int64), e.astype(np.int64)), shape)


def node_split(n_ep: Any, node_size: Any) -> tuple[Any, Any]:
    """The split that keeps most of the group inside nodes: ``ep_intra = gcd(N_EP, node)``
    GPUs per node (so that it divides both), ``ep_inter = N_EP / ep_intra`` nodes."""
    n = counts("n_ep", n_ep).astype(np.int64)
    k = counts("node_size", node_size).astype(np.int64)
    intra = np.gcd(n, k)
    shape = np.broadcast_shapes(n.shape, k.shape)
    return _out(intra, shape), _out(n // intra, shape)


def remote_probabilities(ep_intra: Any, ep_inter: Any) -> Probabilities:
    """Probabilities that a token's next expert is on its own GPU, on another GPU of its node
    and in another node, for a group of ``ep_intra`` GPUs in each of ``ep_inter`` nodes under
    uniform routing: ``1/N_EP``, ``(N_EP,0 - 1)/N_EP``, ``(N_EP,1 - 1)/N_EP,1``
    (the ``expert-parallel-same-node`` and ``-other-node`` derivations)."""
    n0, n1 = _group(None, ep_intra, ep_inter)
    shape = np.broadcast_shapes(n0.shape, n1.shape)
    own, same, other = _numeric("probabilities")(n0, n1)
    return Probabilities(_out(own, shape), _out(same, shape), _out(other, shape))


def ep_bytes(
    scn: Scenario, d_model: Any, tokens: Any, ep_intra: Any, ep_inter: Any, n_gpu: Any = None
) -> tuple[Any, Any]:
    """Expected bytes one GPU sends per layer interface, forward and backward, inside its node
    and to other nodes: ``P_l * 2 w d_model n_tok / N``.  ``tokens`` is the tokens that pass the
    interface in a step, spread over ``n_gpu`` GPUs (default: the group, ``ep_intra *
    ep_inter``)."""
    scn = require_scenario(scn)
    n0, n1 = _group(scn, ep_intra, ep_inter)
    d = numbers("d_model", d_model, strict=True)
    t = numbers("tokens", tokens)
    n = _cluster(n_gpu, n0 * n1)
    shape = np.broadcast_shapes(d.shape, t.shape, n0.shape, n1.shape, np.shape(n))
    args = (d, t, n0, n1, n, float(scn["model.word_bytes"]))
    return (
        _out(_numeric("bytes_intra")(*args), shape),
        _out(_numeric("bytes_inter")(*args), shape),
    )


def ep_time(
    scn: Scenario,
    d_model: Any,
    tokens: Any,
    ep_intra: Any,
    ep_inter: Any,
    interfaces: Any = 1,
    n_gpu: Any = None,
    latency: str = CHAPTER_RULES["search.expert_latency"],
) -> co.CommTime:
    """Seconds of the expert traffic of ``interfaces`` layer interfaces in a row, each crossed
    forward and backward by ``tokens`` tokens spread over ``n_gpu`` GPUs (default: the group).

    Bandwidth: the expected point-to-point time at each level, the levels added (the
    ``expert-parallel-interface`` derivation).  Latency: ``latency="highest"`` (default: the
    authors' final code) charges one message each way per interface at the highest level the
    group spans, nothing for a group of one GPU; ``"expected"`` weights
    the levels' latencies by their probabilities, as earlier versions of the authors' code did.
    Returns
    :class:`~dmlimits.costs.collectives.CommTime`; arguments broadcast as numpy arrays.
    """
    rule = _rule(latency)
    args, shape = _bandwidth_args(scn, d_model, tokens, ep_intra, ep_inter, interfaces, n_gpu)
    return co.CommTime(
        _out(_numeric("bandwidth")(*args), shape), _out(_ep_latency(scn, args, rule), shape)
    )


def ep_level_times(
    scn: Scenario,
    d_model: Any,
    tokens: Any,
    ep_intra: Any,
    ep_inter: Any,
    interfaces: Any = 1,
    n_gpu: Any = None,
    latency: str = CHAPTER_RULES["search.expert_latency"],
) -> co.LevelTimes:
    """:func:`ep_time` with each level's bandwidth time apart: on the links inside the nodes,
    on the links between them (the two terms of the ``expert-parallel-interface``
    derivation's bandwidth time, which add up to it), and the latency
    (:class:`~dmlimits.costs.collectives.LevelTimes`)."""
    rule = _rule(latency)
    args, shape = _bandwidth_args(scn, d_model, tokens, ep_intra, ep_inter, interfaces, n_gpu)
    return co.LevelTimes(
        *(_out(_numeric(f"bandwidth_level{k}")(*args), shape) for k in (0, 1)),
        _out(_ep_latency(scn, args, rule), shape),
    )


def _bandwidth_args(
    scn: Scenario, d_model: Any, tokens: Any, ep_intra: Any, ep_inter: Any, count: Any,
    n_gpu: Any, name: str = "interfaces",
) -> tuple[tuple, tuple[int, ...]]:  # fmt: skip
    """The checked arguments of the expert traffic's bandwidth functions (``count`` interfaces
    or crossings, named ``name``) and the shape they broadcast to."""
    scn = require_scenario(scn)
    n0, n1 = _group(scn, ep_intra, ep_inter)
    d = numbers("d_model", d_model, strict=True)
    t = numbers("tokens", tokens)
    k = numbers(name, count)
    n = _cluster(n_gpu, n0 * n1)
    shape = np.broadcast_shapes(d.shape, t.shape, n0.shape, n1.shape, k.shape, np.shape(n))
    args = (
        d, t, n0, n1, k, n, float(scn["model.word_bytes"]),
        co.level_bandwidth(scn, 0), co.level_bandwidth(scn, 1),
    )  # fmt: skip
    return args, shape


def _ep_latency(scn: Scenario, args: tuple, rule: str) -> Any:
    _, _, n0, n1, k, *_ = args
    if n0.shape != n1.shape:  # the lambdified conditions take the two of one shape
        n0, n1 = np.broadcast_arrays(n0, n1)
    lat_name = "latency" if rule == "highest" else "latency_expected"
    return _numeric(lat_name)(n0, n1, k, co.level_latency(scn, 0), co.level_latency(scn, 1))


def crossing_time(
    scn: Scenario,
    d_model: Any,
    tokens: Any,
    ep_intra: Any,
    ep_inter: Any,
    pp_level: int,
    crossings: Any = 1,
    n_gpu: Any = None,
) -> co.CommTime:
    """Seconds of ``crossings`` pipeline stage boundaries in a row under expert parallelism,
    each crossed forward and backward by ``tokens`` tokens over ``n_gpu`` GPUs (default: the
    group).  Every token moves, over the higher of the boundary's level ``pp_level`` and its
    next expert's level (the ``expert-parallel-crossing`` derivation); one message latency each
    way per crossing."""
    level = co.check_level(pp_level)
    args, shape = _bandwidth_args(
        scn, d_model, tokens, ep_intra, ep_inter, crossings, n_gpu, "crossings"
    )  # fmt: skip
    bw = _numeric("crossing")(*args, float(level))
    return co.CommTime(_out(bw, shape), _out(_crossing_latency(scn, args, level), shape))


def crossing_level_times(
    scn: Scenario,
    d_model: Any,
    tokens: Any,
    ep_intra: Any,
    ep_inter: Any,
    pp_level: int,
    crossings: Any = 1,
    n_gpu: Any = None,
) -> co.LevelTimes:
    """:func:`crossing_time` with each level's bandwidth time apart: on the links inside the
    nodes, on the links between them (the two terms of the ``expert-parallel-crossing``
    derivation's bandwidth time, which add up to it), and the latency
    (:class:`~dmlimits.costs.collectives.LevelTimes`)."""
    level = co.check_level(pp_level)
    args, shape = _bandwidth_args(
        scn, d_model, tokens, ep_intra, ep_inter, crossings, n_gpu, "crossings"
    )  # fmt: skip
    return co.LevelTimes(
        *(_out(_numeric(f"crossing_level{k}")(*args, float(level)), shape) for k in (0, 1)),
        _out(_crossing_latency(scn, args, level), shape),
    )


def _crossing_latency(scn: Scenario, args: tuple, level: int) -> Any:
    """One latency per crossing, at the higher of the two levels."""
    _, _, _, n1, k, *_ = args
    top = np.where((level == 1) | (n1 > 1), co.level_latency(scn, 1), co.level_latency(scn, 0))
    return _numeric("crossing_latency")(k, top)


def ep_only_interfaces(n_layers: Any, n_pp: Any = 1, v: Any = 1) -> np.ndarray | float:
    """Layer interfaces per pass that carry expert traffic only, ``L - v N_PP`` (the others are
    pipeline stage crossings; the ``expert-parallel-interfaces`` derivation)."""
    layers = counts("n_layers", n_layers)
    p = counts("n_pp", n_pp)
    vv = counts("v", v)
    shape = np.broadcast_shapes(layers.shape, p.shape, vv.shape)
    out = np.broadcast_to(_numeric("ep_only")(layers, p, vv), shape)
    if np.any(out < 0):
        i = np.flatnonzero((out < 0).ravel())[0]
        lb, pb, vb = np.broadcast_arrays(layers, p, vv)
        raise ValueError(
            f"n_pp: got {shown(pb.flat[i])} with v = {shown(vb.flat[i])}; expected v * n_pp at "
            f"most n_layers = {shown(lb.flat[i])}"
        )
    return _out(out, shape)


def compute_ratio(scn: Scenario, d_ff: Any, ep_intra: Any, ep_inter: Any) -> np.ndarray | float:
    """Expected expert bandwidth time of one layer interface over one layer's matmul time at
    the effective utilization (the ``expert-parallel-versus-compute`` derivation)."""
    scn = require_scenario(scn)
    n0, n1 = _group(scn, ep_intra, ep_inter)
    f = numbers("d_ff", d_ff, strict=True)
    shape = np.broadcast_shapes(f.shape, n0.shape, n1.shape)
    value = _numeric("ratio")(
        f, n0, n1, float(scn["model.word_bytes"]), scn.peak_flops,
        float(scn["hardware.effective_utilization"]),
        co.level_bandwidth(scn, 0), co.level_bandwidth(scn, 1),
    )  # fmt: skip
    return _out(value, shape)


def layer_compute_time(scn: Scenario, d_model: Any, d_ff: Any, tokens: Any, n_gpu: Any):
    """Matmul time of one layer's forward and backward pass for ``tokens`` tokens spread over
    ``n_gpu`` GPUs at the effective utilization, ``6 * 2 d_model d_ff n_tok / (N F eta)``."""
    scn = require_scenario(scn)
    fn = _numeric("layer_compute")
    d = numbers("d_model", d_model, strict=True)
    f = numbers("d_ff", d_ff, strict=True)
    t = numbers("tokens", tokens)
    n = numbers("n_gpu", n_gpu, minimum=1)
    shape = np.broadcast_shapes(d.shape, f.shape, t.shape, n.shape)
    value = fn(d, f, t, n, scn.peak_flops, float(scn["hardware.effective_utilization"]))
    return _out(value, shape)


def sweep_table(scn: Scenario) -> dict[str, np.ndarray]:
    """For each model of the sparse sweep: the smallest cluster of the paper's form ``S 2^i``
    that could run it at the effective utilization, its degree and node-first split, the ratio
    of expert traffic to compute, and the share of a step's time budget that the expert
    latency of all ``L - 1`` interfaces takes."""
    if not scn["model.sparse"]:
        raise ValueError("scn: got a dense scenario; expected model.sparse = True")
    sh = model.shapes(scn)
    gpus = sh.experts * 2.0 ** np.ceil(np.log2(np.maximum(sh.min_gpus / sh.experts, 1.0)))
    degree = ep_degree(gpus, sh.experts)
    intra, inter = node_split(degree, scn["network.node_size"])
    interfaces = sh.layers - 1
    t = ep_time(scn, sh.d_model, sh.batch, intra, inter, interfaces=interfaces, n_gpu=gpus)
    return {
        "compute": sh.compute,
        "d_model": sh.d_model,
        "experts": sh.experts,
        "layers": sh.layers,
        "batch": sh.batch,
        "n_gpu": gpus,
        "n_ep": degree,
        "ep_intra": intra,
        "ep_inter": inter,
        "ratio": compute_ratio(scn, sh.d_ff, intra, inter),
        "bandwidth_per_step": t.bandwidth,
        "latency_per_step": t.latency,
        "step_budget": sh.step_budget,
        "latency_share": t.latency / sh.step_budget,
    }
