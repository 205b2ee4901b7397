"""Data parallelism: the gradient all-reduce of every step, and the memory it leaves room for.

Erdil & Schneider-Joseph (2024, "Data movement limits to frontier model training",
arXiv:2411.01137) replicate the model ``N_DP`` times; each replica trains on its share of the
batch, and at the end of every optimizer step the replicas sum their weight gradients (in the
authors' final code, ``optimal_parallelism.ipynb`` in the public repository
``ege-erdil/limits_to_distributed_training``, commit b1f771c, October 2024).
This module derives that cost itself, in sympy, from the collectives module's expressions:

* **The all-reduce.**  One all-reduce of all ``N`` gradient words per step, among the ``N_DP``
  replicas, split over the hierarchy: ``N_DP,0`` replicas inside each node, ``N_DP,1`` nodes.
  It is :mod:`dmlimits.costs.collectives`' two-level all-reduce
  (``collectives-allreduce-two-level``)
  with ``n_w = N``, one repetition, spread over the ``N_GPU`` GPUs of the cluster (each GPU
  all-reduces the gradients of its own shard of the model, ``N N_DP / N_GPU`` words).
* **Two explicit choices.**  ``overlap_levels`` (default ``True``): the bandwidth times of the
  two levels overlap and the larger binds, as the authors' final code does; ``False`` adds
  them, as earlier versions of their code did.  ``overlap_compute`` (default ``False``): the
  all-reduce waits for the step's last gradients and is not hidden behind compute (nor
  stretched by the pipeline bubble), as the authors' notebook runs it (``overlap_DP = 0``);
  ``True`` hides its bandwidth time behind the rest of the step, the default of their
  function's signature.  Latency is never hidden.
* **Memory.**  Parameters are replicated across the ``N_DP`` replicas; the optimizer state, four
  times the parameter bytes, is sharded across them.  The cluster fits the run when
  ``N_GPU M_HBM >= N w N_DP + k_opt N w`` (activations are not modelled); solved for ``N_DP``
  this is the largest data-parallel degree the memory allows.
* **Against compute.**  The ratio of the all-reduce's bandwidth time to the step's arithmetic
  time depends only on the batch per replica, not on the model or the cluster size.

Every cost is a sympy expression in registered symbols (:data:`COST_FORMULAS`), unit-checked by
the tests; the numeric functions are lambdified from those same expressions.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import numpy as np
import sympy as sp

from dmlimits.core import formula_cache, lazy, published
from dmlimits.core import symbols as s
from dmlimits.core import units as u
from dmlimits.core.checks import as_output as _out
from dmlimits.core.checks import counts, flag, numbers, require_scenario, shown
from dmlimits.core.derivation import Derivation, Step, Substitution, derivation, register
from dmlimits.core.scenario import Scenario, resolve
from dmlimits.costs import collectives as co
from dmlimits.costs import model
from dmlimits.costs import pipeline as ppm
from dmlimits.costs.collectives import CommTime, LevelTimes
from dmlimits.costs.matmul import word

CHAPTER = "data_parallel"

# --- Definitional constants ------------------------------------------------------------------
# Optimizer state in multiples of the parameter bytes (the paper's factor; Adam's two moments
# and a master copy in full precision would be six times 16-bit parameters), sharded across the
# data-parallel replicas.
OPTIMIZER_FACTOR = 4
# The figures' data-parallel degrees (each replica in its own node).
FIGURE_DEGREES = (16, 128, 1024, 8192)

_decl = s.REGISTRY.declare
_S = u.second
_B = u.byte

# --- Symbols -----------------------------------------------------------------------------------
n_dp = _decl(
    "N_DP",
    r"N_{\mathrm{DP}}",
    "data-parallel degree: model replicas",
    defined_in=CHAPTER,
    integer=True,
)
n_dp0 = _decl(
    "N_DP0",
    r"N_{\mathrm{DP},0}",
    "data-parallel replicas inside one node (level 0)",
    defined_in=CHAPTER,
    integer=True,
)
n_dp1 = _decl(
    "N_DP1",
    r"N_{\mathrm{DP},1}",
    "nodes across which the data-parallel replicas spread (level 1)",
    defined_in=CHAPTER,
    integer=True,
)
n_mp = _decl(
    "N_MP",
    r"N_{\mathrm{MP}}",
    "GPUs that hold one model replica (tensor, pipeline and expert parallelism), N_GPU / N_DP",
    defined_in=CHAPTER,
)
t_dp = _decl(
    "t_DP", r"t_{\mathrm{DP}}", "time of one step's gradient all-reduce", _S, defined_in=CHAPTER
)
t_dp_bw = _decl(
    "t_DP_bw",
    r"t_{\mathrm{DP,bw}}",
    "bandwidth time of one step's gradient all-reduce",
    _S,
    defined_in=CHAPTER,
)
t_dp_lat = _decl(
    "t_DP_lat",
    r"t_{\mathrm{DP,lat}}",
    "latency time of one step's gradient all-reduce",
    _S,
    defined_in=CHAPTER,
)
t_rest = _decl(
    "t_rest_DP",
    r"t_{\mathrm{rest}}",
    "time of one step without its gradient all-reduce (the pipeline's time)",
    _S,
    defined_in=CHAPTER,
)
t_iter = _decl(
    "t_iter_DP",
    r"t_{\mathrm{iter}}",
    "time of one optimizer step, the gradient all-reduce included",
    _S,
    defined_in=CHAPTER,
)
t_comp = _decl(
    "t_comp_DP",
    r"t_{\mathrm{comp,step}}",
    "arithmetic time of one step on one GPU at the effective utilization",
    _S,
    defined_in=CHAPTER,
)
rho_dp = _decl(
    "rho_DP",
    r"\rho_{\mathrm{DP}}",
    "bandwidth time of the gradient all-reduce over the step's arithmetic time",
    defined_in=CHAPTER,
)
cap_hbm = _decl("M_HBM", r"M_{\mathrm{HBM}}", "HBM capacity of one GPU", _B, defined_in=CHAPTER)
k_opt = _decl(
    "k_opt",
    r"k_{\mathrm{opt}}",
    "optimizer state in multiples of the parameter bytes",
    defined_in=CHAPTER,
)
mem_train = _decl(
    "M_train",
    r"M_{\mathrm{train}}",
    "memory a run needs in the whole cluster (parameters and optimizer state)",
    _B,
    defined_in=CHAPTER,
)
mem_par = _decl(
    "M_par",
    r"M_{\mathrm{par}}",
    "memory of the parameters, all replicas together",
    _B,
    defined_in=CHAPTER,
)
mem_opt = _decl(
    "M_opt", r"M_{\mathrm{opt}}", "memory of the optimizer state", _B, defined_in=CHAPTER
)

# --- Named substitutions -------------------------------------------------------------------
LEVELS = Substitution(
    "each level is a set of ring all-reduces spread over the cluster (the library's two-level "
    "all-reduce)",
    co.LEVEL_COSTS.mapping,
)
GRADIENT = Substitution(
    "once per step, all $N$ gradient words are all-reduced among the replicas, "
    r"$N_{\mathrm{DP},0}$ in each node and $N_{\mathrm{DP},1}$ nodes, the traffic spread over "
    "the cluster",
    {co.n_words: s.n_params, co.rep_seq: 1, co.rep_par: 1, co.parts0: n_dp0, co.parts1: n_dp1},
    kind="assumption",
    source="erdil2024datamovement",
)
REPLICAS = Substitution(
    r"the cluster is $N_{\mathrm{DP}}$ replicas of $N_{\mathrm{MP}}$ GPUs each",
    {s.n_gpu: n_dp0 * n_dp1 * n_mp},
)
STATE = Substitution(
    "parameters replicated in every replica; optimizer state sharded across the replicas",
    {mem_par: n_dp * s.n_params * word, mem_opt: k_opt * s.n_params * word},
    kind="assumption",
    source="erdil2024datamovement",
)
FULL = Substitution(
    "at the limit the run fills the HBM of every GPU", {mem_train: s.n_gpu * cap_hbm}
)
OPTIMIZER = Substitution(
    "the optimizer state is four times the parameter bytes",
    {k_opt: OPTIMIZER_FACTOR},
    kind="assumption",
    source="erdil2024datamovement",
)
INTER_NODE = Substitution(
    r"every replica in its own node ($N_{\mathrm{DP},0} = 1$), as in most of the paper's "
    "optimal configurations",
    {n_dp0: 1, n_dp1: n_dp},
    kind="assumption",
)
ARITHMETIC = Substitution(
    "a step's arithmetic, shared by all the GPUs at the effective utilization",
    {
        t_comp: s.macs_per_param_token
        * s.flop_per_mac
        * s.n_active
        * s.batch
        / (s.n_gpu * s.peak_flops * s.eff_util)
    },
)
MAC = Substitution(
    "three multiply-accumulates per active parameter per token: one forward, two backward",
    {s.macs_per_param_token: 3},
)


# --- Derivations -----------------------------------------------------------------------------
# Inline math for the step sentences, in the registered notation.
_DP = r"$N_{\mathrm{DP}}$"
_DP0 = r"$N_{\mathrm{DP},0}$"
_DP1 = r"$N_{\mathrm{DP},1}$"
_MP = r"$N_{\mathrm{MP}}$"
_GPU = r"$N_{\mathrm{GPU}}$"


@register
def allreduce_derivation() -> Derivation:
    """The gradient all-reduce of one step, level by level."""
    d1 = sp.Eq(t_dp, sp.Max(co.t_bw0, co.t_bw1) + co.t_lat0 + co.t_lat1)
    d2 = LEVELS.apply(d1)
    d3 = co.CONSTANTS.apply(d2)
    d4 = GRADIENT.apply(d3)
    lat = sp.Mul(2, co.lat0 + co.lat1, evaluate=False)
    d5 = sp.Eq(
        t_dp,
        sp.Max(
            co.as_written([2, n_dp0 - 1, s.n_params, n_dp1, word], [s.n_gpu, co.halved(co.bw0)]),
            co.as_written([2, n_dp1 - 1, s.n_params, word], [s.n_gpu, co.halved(co.bw1)]),
        )
        + lat,
    )
    d6 = sp.Eq(
        t_dp,
        sp.Max(
            co.as_written(
                [2, n_dp0 - 1, s.n_params, n_dp1, word],
                [n_dp0, n_dp1, n_mp, co.halved(co.bw0)],
            ),
            co.as_written(
                [2, n_dp1 - 1, s.n_params, word], [n_dp0, n_dp1, n_mp, co.halved(co.bw1)]
            ),
        )
        + lat,
    )
    if not _same_relation(REPLICAS.apply(d5), d6):
        raise RuntimeError("data-parallel-allreduce: step 6 is not step 5 with the replicas")
    in_node = co.as_written([2, n_dp0 - 1, s.n_params, word], [n_dp0, n_mp, co.halved(co.bw0)])
    between = co.as_written(
        [2, n_dp1 - 1, s.n_params, word], [n_dp0, n_dp1, n_mp, co.halved(co.bw1)]
    )
    d7 = sp.Eq(t_dp, sp.Max(in_node, between) + lat)
    return derivation(
        "data-parallel-allreduce",
        "The gradient all-reduce of one step",
        [
            Step(
                "The gradient all-reduce is a two-level all-reduce: a reduce-scatter inside each "
                "node, an all-reduce of each GPU's shard between nodes, an all-gather inside "
                "each node.  The two levels use different links and the collective streams in "
                "chunks, so their bandwidth times overlap and the larger binds; every chunk "
                "passes the phases in order, so their latencies add.",
                d1,
            ),
            Step(
                "Each level is a set of ring all-reduces whose traffic is spread over the "
                "cluster's links: the library's two-level all-reduce, reused as it is.",
                d2,
                using=LEVELS,
            ),
            Step("Two phases at each level.", d3, using=co.CONSTANTS),
            Step(
                "Data parallelism all-reduces every gradient once per step: all $N$ words, "
                "once, over all " + _GPU + " GPUs (Erdil & Schneider-Joseph 2024).",
                d4,
                using=GRADIENT,
            ),
            Step(
                "Collected.  The in-node term counts the " + _DP1 + " node groups side by "
                "side; the between-node term counts the whole vector once.",
                d5,
            ),
            Step(
                "Each replica occupies " + _MP + " GPUs (its tensor, pipeline and expert "
                "parallelism), so the cluster is " + _DP0 + " " + _DP1 + " " + _MP + " GPUs.",
                d6,
                using=REPLICAS,
            ),
            Step(
                "Per GPU: each holds $N / N_{\\mathrm{MP}}$ of the gradients, sends a fraction "
                "$2 (N_{\\mathrm{DP},0} - 1) / N_{\\mathrm{DP},0}$ of them over NVLink, and the "
                "fraction $2 (N_{\\mathrm{DP},1} - 1) / N_{\\mathrm{DP},1}$ of its in-node shard "
                "over InfiniBand.  The batch does not appear: the gradients are as large "
                "whatever the number of tokens that made them.",
                d7,
            ),
        ],
        chapter=CHAPTER,
        notes=(
            "Earlier versions of the authors' code added the two levels' bandwidth times "
            "instead of taking the larger, as their final code does; overlap_levels=False gives "
            "the sum.",
        ),
    )


@register
def memory_derivation() -> Derivation:
    """The memory check, solved for the largest data-parallel degree that fits."""
    m1 = sp.Eq(mem_train, mem_par + mem_opt)
    m2 = STATE.apply(m1)
    m3 = FULL.apply(m2)
    m4 = sp.Eq(n_dp, s.n_gpu * cap_hbm / (s.n_params * word) - k_opt)
    m5 = OPTIMIZER.apply(m4)
    return derivation(
        "data-parallel-memory",
        "The largest data-parallel degree that fits in memory",
        [
            Step(
                "A run needs memory for its parameters and for its optimizer state (the model "
                "counts no activations).",
                m1,
            ),
            Step(
                "Every replica holds all $N$ parameters of $w$ bytes (spread over its own "
                "GPUs); the optimizer state exists once, sharded across the replicas (Erdil & "
                "Schneider-Joseph 2024).",
                m2,
                using=STATE,
            ),
            Step("At the limit, the run fills the HBM of all " + _GPU + " GPUs.", m3, using=FULL),
            Step(
                "Solved for " + _DP + ": the largest data-parallel degree the cluster's memory "
                "holds (to be rounded down to a whole number).",
                m4,
                solve_for=n_dp,
            ),
            Step(
                "With the paper's optimizer state, four times the parameter bytes:",
                m5,
                using=OPTIMIZER,
            ),
        ],
        chapter=CHAPTER,
    )


@register
def compute_ratio_derivation() -> Derivation:
    """The all-reduce's bandwidth time against the step's arithmetic time."""
    allreduce = allreduce_derivation()
    bandwidth = Substitution(
        "the bandwidth time of the gradient all-reduce, {eq}`data-parallel-allreduce-5`",
        {t_dp_bw: _bandwidth_part(allreduce.steps[4].expr.rhs)},
    )
    r1 = sp.Eq(rho_dp, t_dp_bw / t_comp)
    r2 = bandwidth.apply(r1)
    r3 = INTER_NODE.apply(r2)
    r4 = ARITHMETIC.apply(r3)
    r5 = model.ACTIVE.apply(r4)
    r6 = MAC.apply(r5)
    r8 = sp.Eq(
        n_dp,
        1
        + co.as_written(
            [3, rho_dp, s.flop_per_mac, s.batch, co.bw1],
            [4, s.n_experts, word, s.eff_util, s.peak_flops],
        ),
    )
    return derivation(
        "data-parallel-compute-ratio",
        "The gradient all-reduce against the step's arithmetic",
        [
            Step(
                "Compare the all-reduce's bandwidth time with the time the step's arithmetic "
                "takes on one GPU.",
                r1,
            ),
            Step("Put in the bandwidth time.", r2, using=bandwidth),
            Step(
                "Place every replica in its own node, so that all the traffic crosses InfiniBand.",
                r3,
                using=INTER_NODE,
            ),
            Step(
                "A step's arithmetic is that of $B$ tokens through the active parameters, "
                "shared by the " + _GPU + " GPUs at the effective utilization.",
                r4,
                using=ARITHMETIC,
            ),
            Step("Each token uses one expert per block.", r5, using=model.ACTIVE),
            Step(
                "Three multiply-accumulates per active parameter per token.  The cluster size "
                "and the model size have cancelled: the ratio grows with the replicas per token "
                "of the batch, $N_{\\mathrm{DP}} / B$, and with the GPU's rate of "
                "multiply-accumulates over its InfiniBand bandwidth.",
                r6,
                using=MAC,
            ),
            Step(
                "Solved for " + _DP + ": the largest data-parallel degree whose all-reduce "
                "takes at most a fraction $\\rho_{\\mathrm{DP}}$ of the arithmetic time.",
                r8,
                solve_for=n_dp,
            ),
        ],
        chapter=CHAPTER,
    )


def _same_relation(a: sp.Basic, b: sp.Basic) -> bool:
    return sp.simplify(a.lhs - a.rhs - (b.lhs - b.rhs)) == 0


def _bandwidth_part(expr: sp.Expr) -> sp.Expr:
    """The ``Max(...)`` term of ``Max(...) + latency``."""
    (found,) = [a for a in sp.Add.make_args(expr) if isinstance(a, sp.Max)]
    return found


# --- Cost formulas ---------------------------------------------------------------------------
def _formulas() -> dict[str, tuple[sp.Expr, sp.Expr]]:
    costs = co.COST_FORMULAS
    bandwidth = GRADIENT.apply(costs["allreduce_two_level_bandwidth"][0])
    bandwidth_sum = GRADIENT.apply(costs["allreduce_two_level_bandwidth_no_overlap"][0])
    by_level = [GRADIENT.apply(costs[f"allreduce_two_level_bandwidth_level{k}"][0]) for k in (0, 1)]
    latency = GRADIENT.apply(costs["allreduce_two_level_latency"][0])
    derived = allreduce_derivation().steps[4].expr.rhs
    if sp.simplify(_bandwidth_part(derived) - bandwidth) != 0:
        raise RuntimeError("the data-parallel bandwidth formula drifted from its derivation")
    per_gpu = co.ALLREDUCE_BYTES.subs({co.n_words: s.n_params * n_dp / s.n_gpu, co.parts: n_dp})
    memory = OPTIMIZER.apply(STATE.apply(sp.Add(mem_par, mem_opt)))
    largest = memory_derivation().result.rhs
    ratio = compute_ratio_derivation().steps[5].expr.rhs
    return {
        "dp_bandwidth": (bandwidth, u.second),
        "dp_bandwidth_levels_added": (bandwidth_sum, u.second),
        "dp_bandwidth_level0": (by_level[0], u.second),
        "dp_bandwidth_level1": (by_level[1], u.second),
        "dp_latency": (latency, u.second),
        "dp_bytes_per_gpu": (sp.simplify(per_gpu), u.byte),
        "step_not_overlapped": (t_rest + t_dp_bw + t_dp_lat, u.second),
        "step_overlapped": (sp.Max(t_rest, t_dp_bw) + t_dp_lat, u.second),
        "memory_needed": (memory, u.byte),
        "memory_available": (s.n_gpu * cap_hbm, u.byte),
        "max_dp": (largest, u.one),
        "compute_ratio": (ratio, u.one),
    }


#: Each data-parallel cost by name: (sympy expression, unit), unit-checked in the tests.
#: Built on first use (:mod:`dmlimits.core.lazy`).
COST_FORMULAS: dict[str, tuple[sp.Expr, sp.Expr]]
_cost_formulas = cache(formula_cache.expressions(_formulas))


@cache
def _summary() -> dict[str, Any]:
    return {
        "parallelism": "data",
        "what_moves": "the weight gradients of all parameters, summed across the replicas once "
        "per step",
        "volume": _cost_formulas()["dp_bytes_per_gpu"][0],
        "volume_per": "GPU and step",
        "latency_per": "step",
        "link": "InfiniBand between nodes (NVLink for the replicas that share a node)",
        "overlaps_compute": False,
        "latency": co.RING_PHASES * (co.lat0 + co.lat1),
    }


#: The summary page's row (:mod:`dmlimits.book.summary`); built on first use.
SUMMARY: dict[str, Any]
__getattr__ = lazy.attributes(__name__, COST_FORMULAS=_cost_formulas, SUMMARY=_summary)


# --- Checks ----------------------------------------------------------------------------------


def _params(value: Any) -> np.ndarray:
    return numbers("n_params", value, strict=True)


def _cluster(n_gpu: Any, dp: np.ndarray) -> np.ndarray:
    """The cluster: a whole multiple of the data-parallel degree (whole replicas)."""
    n = counts("n_gpu", n_gpu)
    nb, db = np.broadcast_arrays(n, dp)
    bad = np.mod(nb, db) != 0
    if np.any(bad):
        raise ValueError(
            f"n_gpu: got {shown(nb[bad].flat[0])}; expected a whole multiple of the "
            f"data-parallel degree {float(db[bad].flat[0]):g} (every replica the same GPUs)"
        )
    return n


# --- Numeric functions, lambdified from COST_FORMULAS ------------------------------------------
_TIME_ARGS = (s.n_params, n_dp0, n_dp1, s.n_gpu, word, co.bw0, co.bw1, co.lat0, co.lat1)


@cache
def _numeric(name: str):
    """The numeric function of :data:`COST_FORMULAS`' ``name``, kept between processes
    (:func:`dmlimits.core.formula_cache.lambdified`: a process that reads it derives nothing)."""
    return formula_cache.lambdified(f"data_parallel.{name}", lambda: _numeric_build(name))


def _numeric_build(name: str) -> tuple[tuple, sp.Expr]:
    expr, _ = _cost_formulas()[name]
    if name.startswith("dp_bandwidth") or name == "dp_latency":
        args = _TIME_ARGS
    elif name == "dp_bytes_per_gpu":
        args = (s.n_params, n_dp, s.n_gpu, word)
    elif name.startswith("step_"):
        args = (t_rest, t_dp_bw, t_dp_lat)
    elif name in ("memory_needed", "max_dp"):
        args = (s.n_params, n_dp, s.n_gpu, cap_hbm, word)
    elif name == "memory_available":
        args = (s.n_gpu, cap_hbm)
    else:  # compute_ratio
        args = (n_dp, s.n_experts, word, s.eff_util, s.peak_flops, s.flop_per_mac, s.batch, co.bw1)
    return args, expr


def dp_time(
    scn: Scenario,
    n_params: Any,
    n_dp_intra: Any,
    n_dp_inter: Any,
    n_gpu: Any = None,
    overlap_levels: bool = True,
) -> CommTime:
    """Seconds of one step's gradient all-reduce (the ``data-parallel-allreduce`` derivation).

    ``n_params`` gradient words all-reduced among ``n_dp_intra * n_dp_inter`` replicas,
    ``n_dp_intra`` per node in ``n_dp_inter`` nodes, on a cluster of ``n_gpu`` GPUs (default: one
    GPU per replica; otherwise a whole multiple of the data-parallel degree).  Bandwidth: the
    larger of the two levels' times (as the authors' final code), or their sum with
    ``overlap_levels=False`` (as earlier versions of their code).  Returns
    :class:`~dmlimits.costs.collectives.CommTime`; arrays broadcast.
    """
    overlap_levels = flag("overlap_levels", overlap_levels)
    args, shape = _time_args(scn, n_params, n_dp_intra, n_dp_inter, n_gpu)
    bandwidth = "dp_bandwidth" if overlap_levels else "dp_bandwidth_levels_added"
    return CommTime(
        _out(_numeric(bandwidth)(*args), shape), _out(_numeric("dp_latency")(*args), shape)
    )


def dp_level_times(
    scn: Scenario, n_params: Any, n_dp_intra: Any, n_dp_inter: Any, n_gpu: Any = None
) -> LevelTimes:
    """:func:`dp_time`'s all-reduce with each level's bandwidth time apart: on the links inside
    the nodes, on the links between them, and the latency
    (:class:`~dmlimits.costs.collectives.LevelTimes`; without overlap, the bandwidth time is the two
    levels' sum)."""
    args, shape = _time_args(scn, n_params, n_dp_intra, n_dp_inter, n_gpu)
    names = ("dp_bandwidth_level0", "dp_bandwidth_level1", "dp_latency")
    return LevelTimes(*(_out(_numeric(k)(*args), shape) for k in names))


def _time_args(
    scn: Scenario, n_params: Any, n_dp_intra: Any, n_dp_inter: Any, n_gpu: Any
) -> tuple[tuple, tuple[int, ...]]:
    """The checked arguments of the gradient all-reduce's numeric functions, and the shape
    they broadcast to."""
    scn = require_scenario(scn)
    n = _params(n_params)
    p0 = counts("n_dp_intra", n_dp_intra)
    p1 = counts("n_dp_inter", n_dp_inter)
    if scn["network.topology"] == "two-level":
        size = scn["network.node_size"]
        if np.any(p0 > size):
            bad = p0[p0 > size].flat[0] if p0.ndim else p0
            raise ValueError(
                f"n_dp_intra: got {shown(bad)}; expected at most network.node_size = {size} "
                "replicas in one NVLink node"
            )
    gpus = p0 * p1 if n_gpu is None else _cluster(n_gpu, p0 * p1)
    shape = np.broadcast_shapes(n.shape, p0.shape, p1.shape, np.shape(gpus))
    args = (
        n, p0, p1, gpus, float(scn["model.word_bytes"]),
        co.level_bandwidth(scn, 0), co.level_bandwidth(scn, 1),
        co.level_latency(scn, 0), co.level_latency(scn, 1),
    )  # fmt: skip
    return args, shape


def dp_bytes_per_gpu(scn: Scenario, n_params: Any, n_dp: Any, n_gpu: Any = None) -> Any:
    """Bytes each GPU sends (and receives) in one step's gradient all-reduce:
    ``2 (N_DP - 1) N w / N_GPU`` (``n_gpu`` defaults to one GPU per replica)."""
    scn = require_scenario(scn)
    n = _params(n_params)
    p = counts("n_dp", n_dp)
    gpus = p if n_gpu is None else _cluster(n_gpu, p)
    shape = np.broadcast_shapes(n.shape, p.shape, np.shape(gpus))
    return _out(_numeric("dp_bytes_per_gpu")(n, p, gpus, float(scn["model.word_bytes"])), shape)


def step_time(rest: Any, comm: CommTime, overlap_compute: bool = False) -> Any:
    """Seconds of one optimizer step: ``rest`` (the step without the all-reduce) plus the
    all-reduce ``comm``.  Not overlapped (default: the authors' notebook as run):
    ``rest + bandwidth + latency``; ``overlap_compute=True``: ``max(rest, bandwidth) +
    latency``."""
    overlap_compute = flag("overlap_compute", overlap_compute)
    if not isinstance(comm, CommTime):
        raise ValueError(f"comm: got {type(comm).__name__}; expected a CommTime from dp_time")
    r = numbers("rest", rest)
    bw = numbers("comm.bandwidth", comm.bandwidth)
    lat = numbers("comm.latency", comm.latency)
    shape = np.broadcast_shapes(r.shape, bw.shape, lat.shape)
    name = "step_overlapped" if overlap_compute else "step_not_overlapped"
    return _out(_numeric(name)(r, bw, lat), shape)


def _memory_args(scn: Scenario, n_params: Any, n_gpu: Any) -> tuple[np.ndarray, ...]:
    n = _params(n_params)
    gpus = counts("n_gpu", n_gpu)
    return n, gpus, float(scn["hardware.hbm_capacity"]), float(scn["model.word_bytes"])


def memory_needed(scn: Scenario, n_params: Any, n_dp: Any) -> Any:
    """Bytes of parameters (in every replica) and optimizer state (sharded) in the cluster."""
    scn = require_scenario(scn)
    n = _params(n_params)
    p = counts("n_dp", n_dp)
    shape = np.broadcast_shapes(n.shape, p.shape)
    value = _numeric("memory_needed")(n, p, 1.0, 1.0, float(scn["model.word_bytes"]))
    return _out(value, shape)


def memory_fits(scn: Scenario, n_params: Any, n_dp: Any, n_gpu: Any) -> Any:
    """Whether ``n_gpu`` GPUs hold ``n_dp`` replicas of ``n_params`` parameters and the sharded
    optimizer state (``N_GPU M_HBM >= N w N_DP + k_opt N w``); a bool or a bool array."""
    scn = require_scenario(scn)
    n, gpus, cap, w = _memory_args(scn, n_params, n_gpu)
    p = counts("n_dp", n_dp)
    if np.any(p > np.broadcast_to(gpus, np.broadcast_shapes(p.shape, gpus.shape))):
        raise ValueError("n_dp: more replicas than GPUs (n_dp must be at most n_gpu)")
    need = _numeric("memory_needed")(n, p, gpus, cap, w)
    have = _numeric("memory_available")(gpus, cap)
    fits = np.asarray(have >= need)
    return bool(fits) if fits.shape == () else fits


def max_dp(scn: Scenario, n_params: Any, n_gpu: Any) -> Any:
    """The largest data-parallel degree whose replicas and optimizer state fit in ``n_gpu``
    GPUs (the ``data-parallel-memory`` derivation), rounded down, never above ``n_gpu``; 0 when
    not even one replica fits."""
    scn = require_scenario(scn)
    n, gpus, cap, w = _memory_args(scn, n_params, n_gpu)
    raw = _numeric("max_dp")(n, 1.0, gpus, cap, w)
    out = np.clip(np.floor(raw), 0, gpus)
    return int(out) if np.shape(out) == () else out.astype(int)


def compute_ratio(scn: Scenario, n_dp: Any, batch: Any, experts: Any = 1) -> Any:
    """Bandwidth time of the gradient all-reduce over the step's arithmetic time at the effective
    utilization, every replica in its own node (``data-parallel-compute-ratio``, step 6)."""
    scn = require_scenario(scn)
    p = counts("n_dp", n_dp)
    b = numbers("batch", batch, minimum=1)
    e = numbers("experts", experts, minimum=1)
    shape = np.broadcast_shapes(p.shape, b.shape, e.shape)
    value = _numeric("compute_ratio")(
        p, e, float(scn["model.word_bytes"]), float(scn["hardware.effective_utilization"]),
        scn.peak_flops, _flop_per_mac(scn), b, co.level_bandwidth(scn, 1),
    )  # fmt: skip
    return _out(value, shape)


def _flop_per_mac(scn: Scenario) -> float:
    """FLOP per multiply-accumulate, as the model chapter counts it."""
    return float(model.law_values(scn)[s.flop_per_mac])


def cluster_for(scn: Scenario, n_dp: Any) -> np.ndarray:
    """For each model of the sweep, the smallest cluster that trains it in time at the effective
    utilization, rounded up to a whole multiple of ``n_dp`` (whole replicas)."""
    scn = require_scenario(scn)
    p = counts("n_dp", n_dp)
    sh = model.shapes(scn)
    return np.ceil(sh.min_gpus / p) * p


def batch_bound(scn: Scenario, batch: Any, experts: Any = 1) -> np.ndarray:
    """The most replicas a batch of ``batch`` tokens allows: each needs at least one unit of a
    microbatch a step (``search.microbatch_unit``: a token, the default, or a whole sequence),
    and with ``experts`` experts the search splits the batch among them first, as it lists
    configurations (:mod:`dmlimits.search`).  Arrays broadcast."""
    scn = require_scenario(scn)
    unit = ppm.unit_tokens(scn["search.microbatch_unit"], scn["model.sequence_length"])
    batch = numbers("batch", batch, strict=True)
    experts = numbers("experts", experts, strict=True)
    return np.floor(np.asarray(batch, dtype=float) / (np.asarray(experts, dtype=float) * unit))


def batch_bound_label(scn: Scenario) -> str:
    """What :func:`batch_bound` counts, for a legend: ``tokens per batch`` by default."""
    unit = require_scenario(scn)["search.microbatch_unit"]
    return f"{unit}s per batch" + (" per expert" if scn["model.sparse"] else "")


@cache
def _parity():
    expr = compute_ratio_derivation().result.rhs
    return sp.lambdify(
        (rho_dp, s.n_experts, word, s.eff_util, s.peak_flops, s.flop_per_mac, s.batch, co.bw1),
        expr,
        "numpy",
    )


def parity_dp(scn: Scenario, batch: Any, experts: Any = 1, ratio: Any = 1.0) -> Any:
    """The data-parallel degree (unrounded) at which the gradient all-reduce, every replica in its
    own node, takes ``ratio`` times the step's arithmetic time (``data-parallel-compute-ratio``,
    step 7)."""
    scn = require_scenario(scn)
    b = numbers("batch", batch, minimum=1)
    e = numbers("experts", experts, minimum=1)
    r = numbers("ratio", ratio)
    shape = np.broadcast_shapes(b.shape, e.shape, r.shape)
    value = _parity()(
        r, e, float(scn["model.word_bytes"]), float(scn["hardware.effective_utilization"]),
        scn.peak_flops, _flop_per_mac(scn), b, co.level_bandwidth(scn, 1),
    )  # fmt: skip
    return _out(value, shape)


@cache
def _arithmetic():
    expr = MAC.apply(ARITHMETIC.mapping[t_comp])
    args = (s.n_active, s.batch, s.n_gpu, s.peak_flops, s.eff_util, s.flop_per_mac)
    return sp.lambdify(args, expr, "numpy")


def arithmetic_time(scn: Scenario, n_active: Any, batch: Any, n_gpu: Any) -> Any:
    """Seconds of one step's arithmetic on each of ``n_gpu`` GPUs at the effective utilization:
    six FLOP per active parameter per token of the batch."""
    scn = require_scenario(scn)
    a = _params(n_active)
    b = numbers("batch", batch, minimum=1)
    g = numbers("n_gpu", n_gpu, minimum=1)
    shape = np.broadcast_shapes(a.shape, b.shape, g.shape)
    value = _arithmetic()(
        a, b, g, scn.peak_flops, float(scn["hardware.effective_utilization"]), _flop_per_mac(scn)
    )
    return _out(value, shape)


# --- The authors' optimal configurations -------------------------------------------------------
def _reference_rows() -> tuple[dict[str, str], ...]:
    return published.data_rows("paper1_reference_configs.csv")


def reference_configs(setting: str = "Default scaling") -> dict[str, np.ndarray]:
    """The data-parallel side of the authors' optimal configurations (H100, dense, 3 months) as
    printed by their code: compute, parameters, batch (tokens), GPUs and data-parallel degree
    (three significant figures, as printed)."""
    rows = [r for r in _reference_rows() if r["setting"] == setting]
    if not rows:
        settings = sorted({r["setting"] for r in _reference_rows()})
        raise ValueError(f"setting: got {setting!r}; expected one of {', '.join(settings)}")
    columns = {
        "compute": "training_flop_16bit",
        "params": "n_params_total",
        "batch": "batch_tokens",
        "n_gpu": "n_gpu",
        "dp": "dp",
        "utilization": "utilization",
    }
    return {k: np.array([float(r[c]) for r in rows]) for k, c in columns.items()}


def is_reference_scenario(scn: Scenario) -> bool:
    """Whether ``scn`` makes the same assumptions as the authors' reference configurations."""
    return dict(require_scenario(scn).values) == dict(resolve("h100").values)


__all__ = [
    "COST_FORMULAS",
    "SUMMARY",
    "arithmetic_time",
    "batch_bound",
    "batch_bound_label",
    "cluster_for",
    "compute_ratio",
    "dp_bytes_per_gpu",
    "dp_time",
    "is_reference_scenario",
    "max_dp",
    "memory_fits",
    "memory_needed",
    "parity_dp",
    "reference_configs",
    "step_time",
]
