"""Tensor parallelism: each weight matrix split over a two-dimensional grid of GPUs.

Erdil & Schneider-Joseph (2024, "Data movement limits to frontier model training",
arXiv:2411.01137) always split tensor parallelism in two dimensions (in the authors' final code,
``optimal_parallelism.ipynb`` in the public repository
``ege-erdil/limits_to_distributed_training``, commit b1f771c, October 2024):

* **The grid.**  ``N_TP = N_TP,model * N_TP,ff`` GPUs share one layer.  Each holds a
  ``(d_model / N_TP,model) x (d_ff / N_TP,ff)`` shard of both weight matrices of the MLP.
  The *split rule* keeps the grid near square in the work it does:
  ``sqrt(N_TP) <= N_TP,ff <= 4 sqrt(N_TP)``.  One-dimensional (Megatron) tensor parallelism
  (Shoeybi et al. 2019) is the special case ``N_TP,model = 1``.
* **The two all-reduces.**  In the forward pass, the first matmul leaves each GPU with partial
  sums of its ``d_ff / N_TP,ff`` hidden units: the ``N_TP,model`` GPUs that hold the same hidden
  units all-reduce them (a *model group*).  The second matmul leaves partial sums of
  ``d_model / N_TP,model`` outputs, all-reduced among the ``N_TP,ff`` GPUs that hold the same
  outputs (an *ff group*).  The backward pass does the mirror image for the activation
  gradients.  So per layer and step there are two all-reduces in each direction, for every token.
* **The paper's accounting.**  For each token the whole ``d_ff``-wide hidden vector is
  all-reduced among ``N_TP,model`` participants (split over ``N_TP,ff`` rings side by side) and
  the whole ``d_model``-wide output among ``N_TP,ff``; the traffic is spread over the GPUs.  This
  is the cluster form of :mod:`dmlimits.costs.collectives` with the tokens as the side-by-side
  repeats and the two passes as the sequential ones.
* **Overlap.**  Bandwidth time overlaps with the matmuls (other microbatches compute while one
  communicates); message latency does not.

The derivations (chapter ``tensor_parallel``) give the bytes and time of those all-reduces, the
compute they hide behind, and the *crossover*: the shard below which TP traffic can no longer
hide, inside an NVLink node and across InfiniBand.  The numeric functions are lambdified from the
same sympy expressions and broadcast over numpy arrays.
"""

from __future__ import annotations

import dataclasses
import math
from functools import cache
from typing import Any

import numpy as np
import sympy as sp

from dmlimits.core import checks, formula_cache, lazy, published
from dmlimits.core import symbols as s
from dmlimits.core import units as u
from dmlimits.core.checks import as_output as _out
from dmlimits.core.checks import checking, counts, numbers, require_scenario
from dmlimits.core.derivation import Derivation, Step, Substitution, derivation, register
from dmlimits.core.scenario import Scenario
from dmlimits.costs import collectives as co
from dmlimits.costs import matmul
from dmlimits.costs.matmul import b, word

CHAPTER = "tensor_parallel"

# --- Definitional constants ------------------------------------------------------------------
# The activations of a layer are all-reduced in the forward pass and their gradients in the
# backward pass.
PASSES = 2
# Two weight matrices per MLP, each in three kinds of matmul (forward, activation gradient,
# weight gradient).
MATRICES = 2
MATMULS_PER_LAYER = MATRICES * len(matmul.KINDS)
# The split rule: sqrt(N_TP) <= N_TP,ff <= FF_SPREAD sqrt(N_TP) (Erdil & Schneider-Joseph 2024;
# the authors' final code, optimal_parallelism.ipynb, with the roots rounded down: tp_splits).
FF_SPREAD = 4
SPLIT_RULES = ("exact", "isqrt")

_decl = s.REGISTRY.declare
_S = u.second
_B = u.byte

# --- Symbols -----------------------------------------------------------------------------------
n_tp = _decl(
    "N_TP",
    r"N_{\mathrm{TP}}",
    "tensor-parallel degree: GPUs that share one layer's weight matrices",
    defined_in=CHAPTER,
    integer=True,
)
tp_m = _decl(
    "N_TPm",
    r"N_{\mathrm{TP},m}",
    "tensor-parallel degree along d_model (GPUs of one model group)",
    defined_in=CHAPTER,
    integer=True,
)
tp_f = _decl(
    "N_TPf",
    r"N_{\mathrm{TP},f}",
    "tensor-parallel degree along d_ff (GPUs of one ff group)",
    defined_in=CHAPTER,
    integer=True,
)
n_pass = _decl(
    "n_pass",
    r"n_{\mathrm{pass}}",
    "passes per step that all-reduce a layer's activations (forward, backward)",
    defined_in=CHAPTER,
)
n_mm = _decl(
    "n_mm",
    r"n_{\mathrm{mm}}",
    "matmuls per layer per step on each GPU (two matrices, three kinds)",
    defined_in=CHAPTER,
)
shard_rows = _decl(
    "a_sh", r"a_{\mathrm{sh}}", "rows of a weight shard, d_model / N_TP,model", defined_in=CHAPTER
)
shard_cols = _decl(
    "c_sh", r"c_{\mathrm{sh}}", "columns of a weight shard, d_ff / N_TP,ff", defined_in=CHAPTER
)
shard_side = _decl("s_sh", r"s_{\mathrm{sh}}", "side of a square weight shard", defined_in=CHAPTER)
q_tp = _decl(
    "Q_TP",
    r"Q_{\mathrm{TP}}",
    "bytes one GPU sends in a layer's TP all-reduces, per step",
    _B,
    defined_in=CHAPTER,
)
q_tp_m = _decl(
    "Q_TPm",
    r"Q_{\mathrm{TP},m}",
    "bytes one GPU sends in one model-group all-reduce",
    _B,
    defined_in=CHAPTER,
)
q_tp_f = _decl(
    "Q_TPf",
    r"Q_{\mathrm{TP},f}",
    "bytes one GPU sends in one ff-group all-reduce",
    _B,
    defined_in=CHAPTER,
)
t_tp_bw = _decl(
    "t_TPbw",
    r"t_{\mathrm{TP,bw}}",
    "bandwidth time of a layer's TP all-reduces per step",
    _S,
    defined_in=CHAPTER,
)
t_tp_bw_m = _decl(
    "t_TPbwm",
    r"t_{\mathrm{TP,bw},m}",
    "bandwidth time of a layer's model-group all-reduces per step",
    _S,
    defined_in=CHAPTER,
)
t_tp_bw_f = _decl(
    "t_TPbwf",
    r"t_{\mathrm{TP,bw},f}",
    "bandwidth time of a layer's ff-group all-reduces per step",
    _S,
    defined_in=CHAPTER,
)
t_tp_lat = _decl(
    "t_TPlat",
    r"t_{\mathrm{TP,lat}}",
    "latency time of a layer's TP all-reduces per step",
    _S,
    defined_in=CHAPTER,
)
t_tp_lat_m = _decl(
    "t_TPlatm",
    r"t_{\mathrm{TP,lat},m}",
    "latency time of a layer's model-group all-reduces per step",
    _S,
    defined_in=CHAPTER,
)
t_tp_lat_f = _decl(
    "t_TPlatf",
    r"t_{\mathrm{TP,lat},f}",
    "latency time of a layer's ff-group all-reduces per step",
    _S,
    defined_in=CHAPTER,
)
t_comp = _decl(
    "t_comp",
    r"t_{\mathrm{comp}}",
    "arithmetic time of one layer's sharded matmuls per step on one GPU",
    _S,
    defined_in=CHAPTER,
)

W = co.bw_level
LAM = co.lat_level

# --- Named substitutions -------------------------------------------------------------------
CONSTANTS = Substitution(
    "forward and backward; two matrices in three kinds of matmul",
    {n_pass: PASSES, n_mm: MATMULS_PER_LAYER},
)
GROUP_BYTES = Substitution(
    "a model group all-reduces each GPU's $d_{\\mathrm{ff}} / N_{\\mathrm{TP},f}$ hidden units of "
    "$b$ tokens among $N_{\\mathrm{TP},m}$; an ff group each GPU's $d_{\\mathrm{model}} / "
    "N_{\\mathrm{TP},m}$ outputs among $N_{\\mathrm{TP},f}$; the bytes of a ring all-reduce "
    "(collectives chapter)",
    {
        q_tp_m: co.ALLREDUCE_BYTES.subs({co.parts: tp_m, co.n_words: b * s.d_ff / tp_f}),
        q_tp_f: co.ALLREDUCE_BYTES.subs({co.parts: tp_f, co.n_words: b * s.d_model / tp_m}),
    },
)
ONE_D = Substitution(
    "one-dimensional (Megatron) tensor parallelism: the $d_{\\mathrm{model}}$ side is not split",
    {tp_m: 1},
    kind="assumption",
    source="shoeybi2019megatron",
)


def _group_cost(name: str, width: sp.Expr, group: sp.Expr) -> sp.Expr:
    """The collectives module's cluster form for one family of TP all-reduces of a layer.

    As in the paper: the whole ``width``-word vector of every token is all-reduced among
    ``group`` GPUs, the ``b`` tokens side by side, once per pass, the traffic spread over the
    ``N_TP,model N_TP,ff`` GPUs of the TP group."""
    expr, _ = co.COST_FORMULAS[name]
    return expr.subs(
        {
            co.n_words: width,
            co.parts: group,
            co.rep_seq: n_pass,
            co.rep_par: b,
            co.N: tp_m * tp_f,
        }
    )


def _latency_per_family() -> sp.Expr:
    """Latency of one family of all-reduces of a layer, without the collectives module's
    ``p > 1`` switch (the derivation shows the case of a real group; the cost formulas keep the
    switch)."""
    return co.CONSTANTS.apply(co.REPEATS_ALLREDUCE.mapping[co.t_lat]).subs(
        {co.rep_seq: n_pass}
    )


@cache
def _group_times() -> Substitution:
    """Each family's bandwidth time as the collectives chapter's cluster form (built on first
    use: it needs the collectives' cost formulas)."""
    return Substitution(
        "each family is the cluster form of the collectives chapter: for every one of the $b$ "
        "tokens the whole $d_{\\mathrm{ff}}$-wide (model group) or $d_{\\mathrm{model}}$-wide "
        "(ff group) vector, once per pass, spread over the $N_{\\mathrm{TP}}$ GPUs",
        {
            t_tp_bw_m: _group_cost("allreduce_bandwidth", s.d_ff, tp_m),
            t_tp_bw_f: _group_cost("allreduce_bandwidth", s.d_model, tp_f),
        },
        kind="assumption",
        source="erdil2024datamovement",
    )


GROUP_LATENCIES = Substitution(
    "one message latency per phase of every all-reduce in sequence",
    {t_tp_lat_m: _latency_per_family(), t_tp_lat_f: _latency_per_family()},
    kind="assumption",
    source="erdil2024datamovement",
)
SHARD = Substitution(
    "each GPU's shard of both matrices: $d_1 = d_{\\mathrm{model}} / N_{\\mathrm{TP},m}$, $d_2 = "
    "d_{\\mathrm{ff}} / N_{\\mathrm{TP},f}$",
    {matmul.d1: s.d_model / tp_m, matmul.d2: s.d_ff / tp_f},
)
NO_PADDING = Substitution(
    "shard sides and nanobatch already multiples of the tensor-core padding g",
    {
        matmul.padded(s.d_model / tp_m): s.d_model / tp_m,
        matmul.padded(s.d_ff / tp_f): s.d_ff / tp_f,
        matmul.padded(b): b,
    },
    kind="assumption",
)
ARITHMETIC = Substitution(
    "the arithmetic time of one matmul (matmul chapter)",
    {matmul.t_arith: matmul.cost_expressions("forward", False)["arithmetic"]},
)
COMPUTE_CONSTANTS = Substitution("two matrices in three kinds of matmul", {n_mm: MATMULS_PER_LAYER})
SHARD_SIDES = Substitution(
    "shard sides: $d_{\\mathrm{model}} = a_{\\mathrm{sh}} N_{\\mathrm{TP},m}$, $d_{\\mathrm{ff}} "
    "= c_{\\mathrm{sh}} N_{\\mathrm{TP},f}$",
    {s.d_model: shard_rows * tp_m, s.d_ff: shard_cols * tp_f},
)
SQUARE = Substitution(
    "a square shard, $a_{\\mathrm{sh}} = c_{\\mathrm{sh}} = s_{\\mathrm{sh}}$",
    {shard_rows: shard_side, shard_cols: shard_side},
    kind="assumption",
)
MANY = Substitution(
    "many GPUs in each group: the ring fractions $1 - 1/N$ reach one",
    {tp_m: sp.oo, tp_f: sp.oo},
    kind="assumption",
)


# --- Derivations -----------------------------------------------------------------------------
@register
def traffic_derivation() -> Derivation:
    """Bytes one GPU sends in a layer's TP all-reduces per step, 2D and 1D."""
    q1 = sp.Eq(q_tp, n_pass * (q_tp_m + q_tp_f))
    q2 = GROUP_BYTES.apply(q1)
    q3 = CONSTANTS.apply(q2)
    q4 = ONE_D.apply(q3)
    return derivation(
        "tensor-parallel-traffic",
        "Bytes of a layer's tensor-parallel all-reduces",
        [
            Step(
                "In each pass, forward and backward, a GPU takes part in one all-reduce of its "
                "model group and one of its ff group.",
                q1,
            ),
            Step(
                "The model group sums partial hidden activations: each GPU holds $d_{\\mathrm{ff}}"
                " / N_{\\mathrm{TP},f}$ of them per token, and $N_{\\mathrm{TP},m}$ GPUs hold the "
                "same ones.  The ff group sums partial outputs: $d_{\\mathrm{model}} / "
                "N_{\\mathrm{TP},m}$ per token, among $N_{\\mathrm{TP},f}$ GPUs.",
                q2,
                using=GROUP_BYTES,
            ),
            Step("Two passes.", q3, using=CONSTANTS),
            Step(
                "With the $d_{\\mathrm{model}}$ side unsplit the model group is a single GPU and "
                "sends nothing: what is left is Megatron's one all-reduce of the "
                "$d_{\\mathrm{model}}$-wide output per pass, among all $N_{\\mathrm{TP},f} = "
                "N_{\\mathrm{TP}}$ GPUs.",
                q4,
                using=ONE_D,
            ),
        ],
        chapter=CHAPTER,
        notes=(
            "Shoeybi et al. (2019) split the first matrix by columns and the second by rows, so "
            "one all-reduce per MLP and pass suffices; the 2D split adds the model-group one.",
        ),
    )


@register
def bandwidth_time_derivation() -> Derivation:
    """Bandwidth time of a layer's TP all-reduces, both groups at one network level."""
    t1 = sp.Eq(t_tp_bw, t_tp_bw_m + t_tp_bw_f)
    group_times = _group_times()
    t2 = group_times.apply(t1)
    t3 = CONSTANTS.apply(t2)
    half = sp.Mul(sp.Rational(1, co.DIRECTIONS), W, evaluate=False)
    t4 = sp.Eq(
        t_tp_bw,
        sp.Mul(
            traffic_derivation().steps[2].expr.rhs, sp.Pow(half, -1, evaluate=False), evaluate=False
        ),
    )
    return derivation(
        "tensor-parallel-bandwidth",
        "Bandwidth time of a layer's tensor-parallel all-reduces",
        [
            Step(
                "Within a pass the second all-reduce needs the result of the first (and the "
                "matmul between them), so the two families' bandwidth times add.",
                t1,
            ),
            Step(
                "The paper's accounting: for every token the whole vector is all-reduced, the "
                "model group's $d_{\\mathrm{ff}}$ words among $N_{\\mathrm{TP},m}$ GPUs and the "
                "ff group's $d_{\\mathrm{model}}$ words among $N_{\\mathrm{TP},f}$; the $b$ "
                "tokens are side-by-side repeats, the passes sequential ones, and the traffic "
                "is shared by the $N_{\\mathrm{TP}}$ GPUs of the group.",
                t2,
                using=group_times,
            ),
            Step("Two passes.", t3, using=CONSTANTS),
            Step(
                "This is exactly the per-GPU traffic {eq}`tensor-parallel-traffic-3` over the "
                "one-way bandwidth: spreading every token's whole vector over the group is the "
                "same as every GPU all-reducing its own slice.",
                t4,
            ),
        ],
        chapter=CHAPTER,
    )


@register
def latency_time_derivation() -> Derivation:
    """Latency of a layer's TP all-reduces: paid in sequence, never hidden."""
    l1 = sp.Eq(t_tp_lat, t_tp_lat_m + t_tp_lat_f)
    l2 = GROUP_LATENCIES.apply(l1)
    l3 = CONSTANTS.apply(l2)
    return derivation(
        "tensor-parallel-latency",
        "Latency of a layer's tensor-parallel all-reduces",
        [
            Step("The two families of all-reduces wait for their messages one after another.", l1),
            Step(
                "Each all-reduce pays one message latency per phase, reduce-scatter and "
                "all-gather, and there is one of each family per pass.",
                l2,
                using=GROUP_LATENCIES,
            ),
            Step(
                "Two passes: eight message latencies per layer and step in 2D.  A group of one "
                "GPU sends nothing and waits for nothing, so 1D pays half of this.",
                l3,
                using=CONSTANTS,
            ),
        ],
        chapter=CHAPTER,
    )


@register
def compute_time_derivation() -> Derivation:
    """Arithmetic time of one layer's sharded matmuls on one GPU."""
    c1 = sp.Eq(t_comp, n_mm * matmul.t_arith)
    c2 = ARITHMETIC.apply(c1)
    c3 = SHARD.apply(c2)
    c4 = NO_PADDING.apply(c3)
    c5 = COMPUTE_CONSTANTS.apply(c4)
    return derivation(
        "tensor-parallel-compute",
        "Compute time of a layer's sharded matmuls",
        [
            Step(
                "Each GPU runs the forward, activation-gradient and weight-gradient matmuls of "
                "both weight shards of the layer; when arithmetic binds each takes its "
                "arithmetic time.",
                c1,
            ),
            Step(
                "One matmul's arithmetic time: two FLOP per multiply-accumulate on padded "
                "dimensions, at the derated rate.",
                c2,
                using=ARITHMETIC,
            ),
            Step("The weight operand is the GPU's shard.", c3, using=SHARD),
            Step("No padding needed.", c4, using=NO_PADDING),
            Step(
                "Six matmuls: the layer's arithmetic ($c_{\\mathrm{MAC}} = 2$ FLOP per "
                "multiply-accumulate), split $N_{\\mathrm{TP}}$ ways.  TP divides the compute per "
                "GPU and leaves the nanobatch alone.",
                c5,
                using=COMPUTE_CONSTANTS,
            ),
        ],
        chapter=CHAPTER,
    )


# The crossover side, in the form the book shows (1 - 1/N kept visible for the limit).
_K = 2 * word * s.eff_util * s.peak_flops / (3 * s.flop_per_mac * co.one_way(W))
CROSSOVER_2D_EXACT = _K * (2 - 1 / tp_m - 1 / tp_f)
CROSSOVER_1D_EXACT = _K * (1 - 1 / tp_f)


@register
def crossover_derivation() -> Derivation:
    """The square shard below which TP bandwidth time cannot hide behind compute."""
    times = Substitution(
        "bandwidth time {eq}`tensor-parallel-bandwidth-4` and compute time "
        "{eq}`tensor-parallel-compute-5`",
        {
            t_tp_bw: bandwidth_time_derivation().result.rhs,
            t_comp: compute_time_derivation().result.rhs,
        },
    )
    x1 = sp.Eq(t_tp_bw, t_comp)
    x2 = times.apply(x1)
    x3 = SHARD_SIDES.apply(x2)
    x4 = SQUARE.apply(x3)
    x5 = sp.Eq(shard_side, CROSSOVER_2D_EXACT)
    x6 = MANY.apply(x5)
    return derivation(
        "tensor-parallel-crossover",
        "The shard below which tensor-parallel traffic shows",
        [
            Step(
                "Bandwidth time hides behind compute as long as it is no longer; the crossover "
                "is where the two are equal.",
                x1,
            ),
            Step("Put in both times.", x2, using=times),
            Step(
                "Write the widths as shard sides times the degrees.  The nanobatch is a "
                "factor of both sides, and it cancels when the side is solved for below: both "
                "times grow with it alike, so batching does not help; only the shard's size "
                "and the link do.",
                x3,
                using=SHARD_SIDES,
            ),
            Step(
                "For a given shard area the traffic, proportional to a + c, is least for a "
                "square shard.",
                x4,
                using=SQUARE,
            ),
            Step(
                "Solving for the side: shards smaller than this expose TP traffic.",
                x5,
                solve_for=shard_side,
            ),
            Step(
                "With many GPUs in each group the ring fractions reach one.  The crossover is "
                "the link's balance, derated FLOP/s over bytes/s, times a constant: it scales "
                "inversely with the bandwidth of the link the groups use.",
                x6,
                using=MANY,
            ),
        ],
        chapter=CHAPTER,
        notes=(
            "At the peak rate (eta = 1) and InfiniBand bandwidth this is the minimum shard size "
            "a of the paper's closed form for the critical compute (Erdil & Schneider-Joseph "
            "2024; the authors' final code, layer_and_batch_scaling.ipynb); "
            "crossover_shard(scn, 1, derated=False) gives that number.",
        ),
    )


@register
def crossover_1d_derivation() -> Derivation:
    """The 1D special case: the d_ff side below which Megatron TP traffic shows."""
    y1 = crossover_derivation().steps[2].expr
    y2 = ONE_D.apply(y1)
    y3 = sp.Eq(shard_cols, CROSSOVER_1D_EXACT)
    y4 = MANY.apply(y3)
    return derivation(
        "tensor-parallel-crossover-1d",
        "The crossover of one-dimensional tensor parallelism",
        [
            Step("Start from the balance in shard sides, {eq}`tensor-parallel-crossover-3`.", y1),
            Step(
                "In 1D the model group is one GPU ($a_{\\mathrm{sh}} = d_{\\mathrm{model}}$): "
                "only the ff group's traffic is left.",
                y2,
                using=ONE_D,
            ),
            Step("Solve for the shard's $d_{\\mathrm{ff}}$ side.", y3, solve_for=shard_cols),
            Step(
                "Many GPUs in the group.  Half the 2D side, but the 1D shard's other side is the "
                "whole $d_{\\mathrm{model}}$, so its area is far larger: the degree at which 1D "
                "hits the crossover grows only as $d_{\\mathrm{ff}}$, that of 2D as "
                "$d_{\\mathrm{model}} d_{\\mathrm{ff}}$.",
                y4,
                using=MANY,
            ),
        ],
        chapter=CHAPTER,
    )


# --- Cost formulas ---------------------------------------------------------------------------
def _formulas() -> dict[str, tuple[sp.Expr, sp.Expr]]:
    bw_m = CONSTANTS.apply(_group_cost("allreduce_bandwidth", s.d_ff, tp_m))
    bw_f = CONSTANTS.apply(_group_cost("allreduce_bandwidth", s.d_model, tp_f))
    lat_m = CONSTANTS.apply(_group_cost("allreduce_latency", s.d_ff, tp_m))
    lat_f = CONSTANTS.apply(_group_cost("allreduce_latency", s.d_model, tp_f))
    bandwidth = bandwidth_time_derivation().result.rhs
    if sp.simplify(bw_m + bw_f - bandwidth) != 0:
        raise RuntimeError("the TP bandwidth formula drifted from its derivation")
    compute = compute_time_derivation().result.rhs
    return {
        "tp_bytes": (traffic_derivation().steps[2].expr.rhs, u.byte),
        "tp_bytes_1d": (traffic_derivation().result.rhs, u.byte),
        "tp_bytes_model_group": (CONSTANTS.apply(n_pass * GROUP_BYTES.mapping[q_tp_m]), u.byte),
        "tp_bytes_ff_group": (CONSTANTS.apply(n_pass * GROUP_BYTES.mapping[q_tp_f]), u.byte),
        "tp_bandwidth_model_group": (bw_m, u.second),
        "tp_bandwidth_ff_group": (bw_f, u.second),
        "tp_bandwidth": (bandwidth, u.second),
        "tp_latency_model_group": (lat_m, u.second),
        "tp_latency_ff_group": (lat_f, u.second),
        "tp_latency": (lat_m + lat_f, u.second),
        "tp_compute": (compute, u.second),
        "crossover_2d_exact": (CROSSOVER_2D_EXACT, u.one),
        "crossover_2d": (crossover_derivation().result.rhs, u.one),
        "crossover_1d": (crossover_1d_derivation().result.rhs, u.one),
    }


_cost_formulas = cache(formula_cache.expressions(_formulas))
#: Each tensor-parallel cost by name: (sympy expression, unit), unit-checked in the tests; built
#: on first use (:mod:`dmlimits.core.lazy`).
COST_FORMULAS: dict[str, tuple[sp.Expr, sp.Expr]]


@cache
def _summary() -> dict[str, Any]:
    return {
        "parallelism": "tensor (2D)",
        "what_moves": (
            "partial activations (forward) and activation gradients (backward) of every layer, "
            "all-reduced in the model group and the ff group; volume per GPU, per layer and per "
            "token, forward and backward together"
        ),
        "volume": sp.simplify(_cost_formulas()["tp_bytes"][0] / b),
        "volume_per": "GPU, layer and token",
        "latency_per": "layer",
        "link": "NVLink inside a node; InfiniBand once a group spans nodes",
        "overlaps_compute": True,
        "latency": latency_time_derivation().result.rhs,
    }


#: The summary page's row (:mod:`dmlimits.book.summary`); built on first use.
SUMMARY: dict[str, Any]
__getattr__ = lazy.attributes(__name__, COST_FORMULAS=_cost_formulas, SUMMARY=_summary)


# --- Checks ----------------------------------------------------------------------------------



def _divides(width_name: str, width: np.ndarray, degree_name: str, degree: np.ndarray) -> None:
    if not checking():
        return
    w, d = np.broadcast_arrays(width, degree)
    bad = np.mod(w, d) != 0
    if np.any(bad):
        raise ValueError(
            f"{degree_name}: got {float(d[bad].flat[0]):g}, which does not divide "
            f"{width_name} = {float(w[bad].flat[0]):g}; a shard must hold whole rows and columns"
        )


def _check_level(name: str, level: Any, group: np.ndarray) -> tuple[int, ...] | int:
    """A level 0 or 1, or a pair ``(p_intra, p_inter)`` splitting the group over both."""
    if isinstance(level, tuple | list):
        if len(level) != 2:
            raise ValueError(
                f"{name}: got {level!r}; expected 0, 1 or a pair (GPUs per node, nodes)"
            )
        pair = (checks.whole(f"{name}[0]", level[0]), checks.whole(f"{name}[1]", level[1]))
        if np.any(group != pair[0] * pair[1]):
            bad = group[group != pair[0] * pair[1]].flat[0] if group.ndim else group
            raise ValueError(
                f"{name}: got {level!r}, {pair[0] * pair[1]} GPUs in all, for a group of "
                f"{float(bad):g}; the pair must multiply to the group's size"
            )
        return pair
    try:
        return co.check_level(level)
    except ValueError:
        raise ValueError(
            f"{name}: got {level!r}; expected 0 (inside an NVLink node), 1 (between nodes) or a "
            "pair (GPUs per node, nodes)"
        ) from None


def _in_node(level: tuple[int, ...] | int, group: np.ndarray) -> np.ndarray:
    """GPUs of a group that sit in one node."""
    if isinstance(level, tuple):
        return np.asarray(float(level[0]))
    return group if level == 0 else np.ones_like(group)


# --- The split rule ----------------------------------------------------------------------------
#: The rules of the search that this chapter derives and calls the default (the scenario
#: schema's defaults are these; tests/test_choices.py checks both and that the search follows).
CHAPTER_RULES = {"search.tp_split_rule": "isqrt"}


def split_rule_latex(rule: str = CHAPTER_RULES["search.tp_split_rule"]) -> str:
    """The split rule as the chapter shows it, in LaTeX."""
    if rule not in SPLIT_RULES:
        raise ValueError(f"rule: got {rule!r}; expected one of {', '.join(SPLIT_RULES)}")
    root = r"\sqrt{N_{\mathrm{TP}}}"
    if rule == "isqrt":
        root = rf"\lfloor {root} \rfloor"
    return rf"{root} \le N_{{\mathrm{{TP}},f}} \le {FF_SPREAD} {root}"


_DEFAULT_SPLIT = CHAPTER_RULES["search.tp_split_rule"]


def tp_splits(n_tp: Any, rule: str = _DEFAULT_SPLIT) -> list[tuple[int, int]]:
    """Every ``(N_TP,model, N_TP,ff)`` with product ``n_tp`` allowed by the split rule, ordered
    by ``N_TP,ff``.

    ``rule="isqrt"`` (the default, the authors' final code): ``floor(sqrt(N_TP)) <= N_TP,ff <=
    4 floor(sqrt(N_TP))``; rounding the root down admits a few splits with
    ``N_TP,model > N_TP,ff`` (at ``N_TP`` of two or eight, say).  ``rule="exact"`` applies the
    rule without rounding, as this book states it, ``sqrt(N_TP) <= N_TP,ff <= 4 sqrt(N_TP)``, in
    integers: ``N_TP,ff^2 >= N_TP`` and ``N_TP,ff^2 <= 16 N_TP``.
    """
    n = checks.whole("n_tp", n_tp)
    if rule not in SPLIT_RULES:
        raise ValueError(f"rule: got {rule!r}; expected one of {', '.join(SPLIT_RULES)}")
    return list(_splits(n, rule))


def _divisors(n: int) -> list[int]:
    """Every divisor of ``n``, from its prime factorization (fast for the smooth degrees of
    clusters of ``f 2^i`` GPUs)."""
    primes: dict[int, int] = {}
    rest, k = n, 2
    while k * k <= rest:
        while rest % k == 0:
            primes[k] = primes.get(k, 0) + 1
            rest //= k
        k += 1 if k == 2 else 2
    if rest > 1:
        primes[rest] = primes.get(rest, 0) + 1
    divisors = [1]
    for p, e in primes.items():
        divisors = [d * p**j for d in divisors for j in range(e + 1)]
    return sorted(divisors)


@cache
def _splits(n: int, rule: str) -> tuple[tuple[int, int], ...]:
    root = math.isqrt(n)
    divisors = _divisors(n)
    out = []
    for ff in sorted(divisors):
        if rule == "exact":
            ok = ff * ff >= n and ff * ff <= FF_SPREAD**2 * n
        else:
            ok = root <= ff <= FF_SPREAD * root
        if ok:
            out.append((n // ff, ff))
    return tuple(out)


# --- Numeric functions, lambdified from COST_FORMULAS ------------------------------------------
TIME_ARGS = (s.d_model, s.d_ff, b, tp_m, tp_f, word, W, LAM)
COMPUTE_ARGS = (s.d_model, s.d_ff, b, tp_m, tp_f, s.eff_util, s.peak_flops)
CROSS_ARGS = (word, s.eff_util, s.peak_flops, W, tp_m, tp_f)


@cache
def _numeric(name: str):
    expr, _ = _cost_formulas()[name]
    if name.startswith("crossover"):
        args = CROSS_ARGS
    elif name == "tp_compute":
        args = COMPUTE_ARGS
    else:
        args = TIME_ARGS
    return sp.lambdify(args, matmul.CONSTANTS.apply(expr), "numpy")


def _shape_args(d_model: Any, d_ff: Any, tokens: Any, tp_model: Any, tp_ff: Any):
    dm = counts("d_model", d_model)
    df = counts("d_ff", d_ff)
    tok = numbers("tokens", tokens, strict=True)
    pm = counts("tp_model", tp_model)
    pf = counts("tp_ff", tp_ff)
    _divides("d_model", dm, "tp_model", pm)
    _divides("d_ff", df, "tp_ff", pf)
    shape = np.broadcast_shapes(dm.shape, df.shape, tok.shape, pm.shape, pf.shape)
    return dm, df, tok, pm, pf, shape


def tp_bytes(
    scn: Scenario, d_model: Any, d_ff: Any, tokens: Any, tp_model: Any, tp_ff: Any
) -> np.ndarray | float:
    """Bytes one GPU sends in a layer's TP all-reduces in one step (forward and backward) for
    ``tokens`` tokens through its group (the ``tensor-parallel-traffic`` derivation)."""
    scn = require_scenario(scn)
    dm, df, tok, pm, pf, shape = _shape_args(d_model, d_ff, tokens, tp_model, tp_ff)
    value = _numeric("tp_bytes")(dm, df, tok, pm, pf, float(scn["model.word_bytes"]), 1.0, 1.0)
    return _out(value, shape)


def tp_compute_time(
    scn: Scenario, d_model: Any, d_ff: Any, tokens: Any, tp_model: Any, tp_ff: Any
) -> np.ndarray | float:
    """Seconds of one layer's six sharded matmuls on one GPU per step, arithmetic-bound at the
    derated rate (the ``tensor-parallel-compute`` derivation)."""
    scn = require_scenario(scn)
    dm, df, tok, pm, pf, shape = _shape_args(d_model, d_ff, tokens, tp_model, tp_ff)
    value = _numeric("tp_compute")(
        dm, df, tok, pm, pf, float(scn["hardware.effective_utilization"]), float(scn.peak_flops)
    )
    return _out(value, shape)


def _family(
    scn: Scenario,
    which: str,
    level: tuple[int, ...] | int,
    args: tuple[np.ndarray, ...],
) -> tuple[Any, Any]:
    """(bandwidth, latency) of one family of all-reduces at its level or split over both."""
    dm, df, tok, pm, pf = args
    if isinstance(level, tuple):
        width = df if which == "model_group" else dm
        t = co.allreduce_time_split(
            scn, width, level[0], level[1], seq=PASSES, par=tok, n_gpu=pm * pf
        )
        return t.bandwidth, t.latency
    vals = (
        *args,
        float(scn["model.word_bytes"]),
        co.level_bandwidth(scn, level),
        co.level_latency(scn, level),
    )
    return (
        _numeric(f"tp_bandwidth_{which}")(*vals),
        _numeric(f"tp_latency_{which}")(*vals),
    )


def tp_comm_time(
    scn: Scenario,
    d_model: Any,
    d_ff: Any,
    tokens: Any,
    tp_model: Any,
    tp_ff: Any,
    level_model: Any = 0,
    level_ff: Any = 0,
) -> co.CommTime:
    """Seconds of a layer's TP all-reduces per step on one GPU: (bandwidth, latency).

    ``tokens`` tokens pass through the TP group (each GPU's nanobatch), forward and backward.
    The model group (``tp_model`` GPUs, ``d_ff``-wide vectors) runs at ``level_model`` and the
    ff group (``tp_ff`` GPUs, ``d_model``-wide vectors) at ``level_ff``: each 0 (NVLink), 1
    (InfiniBand) or a pair ``(GPUs per node, nodes)`` for a group split over both levels (the
    collectives module's two-level all-reduce).  The two families' times add.  Widths, tokens
    and degrees broadcast as numpy arrays; the levels are one choice for all.  Under the
    two-level topology the GPUs of the TP group that share a node may not exceed
    ``network.node_size``.
    """
    scn = require_scenario(scn)
    dm, df, tok, pm, pf, shape = _shape_args(d_model, d_ff, tokens, tp_model, tp_ff)
    lm = _check_level("level_model", level_model, pm)
    lf = _check_level("level_ff", level_ff, pf)
    if scn["network.topology"] == "two-level":
        per_node = _in_node(lm, pm) * _in_node(lf, pf)
        size = scn["network.node_size"]
        if np.any(per_node > size):
            worst = float(np.max(per_node))
            raise ValueError(
                f"level_model={level_model!r}, level_ff={level_ff!r}: {worst:g} GPUs of the TP "
                f"group would share one node; expected at most network.node_size = {size}"
            )
    args = (dm, df, tok, pm, pf)
    bw_m, lat_m = _family(scn, "model_group", lm, args)
    bw_f, lat_f = _family(scn, "ff_group", lf, args)
    return co.CommTime(_out(bw_m + bw_f, shape), _out(lat_m + lat_f, shape))


def tp_family_time(
    scn: Scenario,
    family: str,
    d_model: Any,
    d_ff: Any,
    tokens: Any,
    tp_model: Any,
    tp_ff: Any,
    intra: Any,
    inter: Any,
    overlap_levels: bool = True,
) -> co.CommTime:
    """Seconds per layer per step on one GPU of one family of TP all-reduces, its group split
    over the levels element by element: ``intra`` GPUs of the group in each of ``inter`` nodes.

    ``family`` is ``"tp_model"`` (the model group: ``tp_model`` GPUs, ``d_ff``-wide vectors) or
    ``"tp_ff"`` (the ff group: ``tp_ff`` GPUs, ``d_model``-wide vectors).  The same two-level
    all-reduce as :func:`tp_comm_time` with a split level, with every argument an array (the
    search places millions of groups at once).  ``overlap_levels=False`` adds the two levels'
    bandwidth times instead of taking the larger.
    """
    scn = require_scenario(scn)
    width, i, o, tok, n, shape = _family_args(
        family, d_model, d_ff, tokens, tp_model, tp_ff, intra, inter
    )  # fmt: skip
    t = co.allreduce_time_split(
        scn, width, i, o, seq=PASSES, par=tok, n_gpu=n, overlap_levels=overlap_levels
    )
    return co.CommTime(_out(t.bandwidth, shape), _out(t.latency, shape))


def tp_family_level_times(
    scn: Scenario,
    family: str,
    d_model: Any,
    d_ff: Any,
    tokens: Any,
    tp_model: Any,
    tp_ff: Any,
    intra: Any,
    inter: Any,
) -> co.LevelTimes:
    """:func:`tp_family_time` with each level's bandwidth time apart
    (:func:`dmlimits.costs.collectives.allreduce_level_times`): the time on the links inside the
    nodes, on the links between them, and the latency.  Without overlap the family's
    bandwidth time is the two levels' sum."""
    scn = require_scenario(scn)
    width, i, o, tok, n, shape = _family_args(
        family, d_model, d_ff, tokens, tp_model, tp_ff, intra, inter
    )  # fmt: skip
    t = co.allreduce_level_times(scn, width, i, o, seq=PASSES, par=tok, n_gpu=n)
    return co.LevelTimes(*(_out(x, shape) for x in t))


def _family_args(
    family: str, d_model: Any, d_ff: Any, tokens: Any, tp_model: Any, tp_ff: Any, intra: Any,
    inter: Any,
) -> tuple[Any, np.ndarray, np.ndarray, Any, Any, tuple[int, ...]]:  # fmt: skip
    """The checked arguments of one family's all-reduce: (vector width, GPUs of the group per
    node, nodes, tokens, GPUs of the TP group, the shape of the result)."""
    if family not in ("tp_model", "tp_ff"):
        raise ValueError(f"family: got {family!r}; expected 'tp_model' or 'tp_ff'")
    dm, df, tok, pm, pf, shape = _shape_args(d_model, d_ff, tokens, tp_model, tp_ff)
    group, width = (pm, df) if family == "tp_model" else (pf, dm)
    i = counts("intra", intra)
    o = counts("inter", inter)
    if checking() and np.any(
        np.broadcast_to(i * o, np.broadcast_shapes(i.shape, group.shape)) != group
    ):
        raise ValueError(f"intra * inter: expected the {family} degree in every element")
    return width, i, o, tok, pm * pf, np.broadcast_shapes(shape, i.shape, o.shape)


def crossover_shard(scn: Scenario, level: Any, dims: int = 2, derated: bool = True) -> float:
    """The shard side below which TP bandwidth time at ``level`` exceeds compute time, with
    many GPUs in each group.

    ``dims=2``: the side of a square ``s x s`` shard (the ``tensor-parallel-crossover``
    derivation); ``dims=1``: the ``d_ff`` side of a 1D (Megatron) shard whose other side is the
    whole ``d_model`` (``tensor-parallel-crossover-1d``).  ``derated=False`` uses the peak rate,
    as the paper's closed form does (Erdil & Schneider-Joseph 2024; the authors' final code,
    ``layer_and_batch_scaling.ipynb``).  Infinite bandwidth gives 0.
    """
    scn = require_scenario(scn)
    level = co.check_level(level)
    if dims not in (1, 2) or isinstance(dims, bool):
        raise ValueError(f"dims: got {dims!r}; expected 1 (Megatron) or 2")
    if not isinstance(derated, bool):
        raise ValueError(f"derated: got {derated!r}; expected True or False")
    eta = float(scn["hardware.effective_utilization"]) if derated else 1.0
    name = "crossover_2d" if dims == 2 else "crossover_1d"
    value = _numeric(name)(
        float(scn["model.word_bytes"]), eta, float(scn.peak_flops),
        co.level_bandwidth(scn, level), 1.0, 1.0,
    )  # fmt: skip
    return float(value)


def max_degree(scn: Scenario, d_model: Any, d_ff: Any, level: Any, one_d: bool = False) -> int:
    """The largest TP degree (a power of two) at which some split by the rule (or, with
    ``one_d``, the 1D split) keeps bandwidth time at ``level`` no longer than compute time.

    Both groups use ``level``; under the two-level topology level 0 is searched beyond the node
    as if the NVLink domain were larger (the ``flat`` topology).  Returns 1 when no degree above
    one hides.
    """
    scn = require_scenario(scn)
    level = co.check_level(level)
    dm = checks.whole("d_model", d_model)
    dff = checks.whole("d_ff", d_ff)
    if not isinstance(one_d, bool):
        raise ValueError(f"one_d: got {one_d!r}; expected True or False")
    flat = nvlink_domain(scn) if level == 0 else scn
    best, n = 1, 2
    while n <= dm * dff:
        splits = [(1, n)] if one_d else tp_splits(n)
        splits = [(m, f) for m, f in splits if dm % m == 0 and dff % f == 0]
        if not splits:
            break
        ok = False
        for m, f in splits:
            t = tp_comm_time(flat, dm, dff, 1.0, m, f, level, level)
            ok |= t.bandwidth <= tp_compute_time(flat, dm, dff, 1.0, m, f)
        if ok:
            best = n
        n *= 2
    return best


def nvlink_domain(scn: Scenario) -> Scenario:
    """The scenario with one NVLink domain for all GPUs (the ``flat`` topology), for asking what
    TP would cost on NVLink beyond one node.  Other topologies are returned unchanged."""
    scn = require_scenario(scn)
    if scn["network.topology"] != "two-level":
        return scn
    return dataclasses.replace(
        scn,
        name=scn.name + "+network.topology=flat",
        values={**scn.values, "network.topology": "flat"},
    )


def best_split(
    scn: Scenario, d_model: Any, d_ff: Any, n_tp: Any, level_model: Any = 0, level_ff: Any = 0
) -> tuple[int, int]:
    """The split by the rule, dividing both widths, with the least bandwidth time."""
    scn = require_scenario(scn)
    dm, dff = checks.whole("d_model", d_model), checks.whole("d_ff", d_ff)
    n = checks.whole("n_tp", n_tp)
    splits = [(m, f) for m, f in tp_splits(n) if dm % m == 0 and dff % f == 0]
    if not splits:
        raise ValueError(
            f"n_tp: got {n}; no split by the rule divides d_model = {dm} and d_ff = {dff}"
        )
    times = [tp_comm_time(scn, dm, dff, 1.0, m, f, level_model, level_ff).bandwidth
             for m, f in splits]  # fmt: skip
    return splits[int(np.argmin(times))]


def node_first_levels(
    scn: Scenario, tp_model: Any, tp_ff: Any
) -> tuple[int | tuple[int, int], int | tuple[int, int]]:
    """The levels ``(level_model, level_ff)`` of :func:`tp_comm_time` for a TP group placed node
    first in nodes of ``network.node_size`` GPUs.

    The model group goes first: all of it in one node if it fits, otherwise its largest divisor
    that fits in each node.  The ff group then takes the room left in the node, again by its
    largest divisor that fits.  Each level is 0 (the whole group in one node), 1 (one GPU of the
    group per node) or a pair ``(GPUs per node, nodes)`` (the two-level all-reduce).  When the
    model group fits in a node and the node's size is a multiple of it, each ff group has
    ``node_size // tp_model`` GPUs per node, or all of them if fewer.
    """
    scn = require_scenario(scn)
    m, f = checks.whole("tp_model", tp_model), checks.whole("tp_ff", tp_ff)
    node = checks.whole("network.node_size", scn["network.node_size"])

    def fit(group: int, room: int) -> tuple[int, int | tuple[int, int]]:
        inside = max(d for d in _divisors(group) if d <= room)
        if inside == group:
            return inside, 0
        return inside, 1 if inside == 1 else (inside, group // inside)

    m_in, level_model = fit(m, node)
    _, level_ff = fit(f, node // m_in)
    return level_model, level_ff


def reference_shards(setting: str = "Default scaling") -> dict[str, np.ndarray]:
    """The TP split and per-GPU shard of the paper's optimal configurations (H100, as rerun;
    ``data/paper1_reference_configs.csv``): ``compute``, ``tp_model``, ``tp_ff``, ``rows``,
    ``cols`` (the shard's ``d_model`` and ``d_ff`` sides) and ``side``, the side of the square
    shard of the same area."""
    rows = [
        r for r in published.data_rows("paper1_reference_configs.csv") if r["setting"] == setting
    ]
    if not rows:
        raise ValueError(f"setting: got {setting!r}; expected 'Default scaling' or 'No scaling'")

    def col(name: str) -> np.ndarray:
        return np.array([float(r[name]) for r in rows])

    rows_, cols_ = col("gpu_matmul_dmodel_shard"), col("gpu_matmul_dff_shard")
    return {
        "compute": col("training_flop_16bit"),
        "tp_model": col("tp_model"),
        "tp_ff": col("tp_ff"),
        "rows": rows_,
        "cols": cols_,
        "side": np.sqrt(rows_ * cols_),
    }
