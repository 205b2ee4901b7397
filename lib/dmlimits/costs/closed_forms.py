"""Closed forms: the critical compute and the latency wall (Erdil & Schneider-Joseph 2024).

Erdil & Schneider-Joseph (2024) bound the search's results with two formulas that need no
search.  *Critical compute* is the largest training run whose every 8-GPU node can still run
its matmuls at full rate: its nanobatch is at least the one HBM bandwidth allows, its weight
shard at least the one InfiniBand allows, and every layer is its own pipeline stage.  The
*latency wall* is the largest run whose steps are not longer than the latencies on their
critical path allow.  Both grow with the batch-to-depth ratio ``B / L``, which the closed forms
take as a power law of compute, ``B / L = rho (C / C0)^alpha``.

Every formula is derived here in sympy, step by step; the constants follow the authors'
notebook (``layer_and_batch_scaling.ipynb``), the derivations are this book's own.  Where the
notebook's reading of a constant is ours, the docstring of the constant says so.
"""

from __future__ import annotations

import math
from functools import cache
from typing import Any

import numpy as np
import sympy as sp

from dmlimits.core import formula_cache, lazy
from dmlimits.core import symbols as s
from dmlimits.core import units as u
from dmlimits.core.checks import require_scenario
from dmlimits.core.derivation import Derivation, Step, Substitution, derivation, register
from dmlimits.core.scenario import Scenario, ScenarioError, resolve_overrides
from dmlimits.costs import collectives as co
from dmlimits.costs import matmul, model

CHAPTER = "closed_forms"
_S = u.second
_decl = s.REGISTRY.declare

g_node = _decl("G_node", "G", "GPUs per node (the NVLink domain)", defined_in=CHAPTER)
n_hbm = _decl(
    "n_HBM", r"n_{\mathrm{HBM}}",
    "smallest nanobatch whose matmuls outlast streaming their weights from HBM (tokens)",
    defined_in=CHAPTER,
)  # fmt: skip
a_ib = _decl(
    "a_IB", r"a_{\mathrm{IB}}",
    "smallest side of a square weight shard whose matmuls outlast its InfiniBand traffic",
    defined_in=CHAPTER,
)  # fmt: skip
q_words = _decl("q_HBMw", r"q_{w}", "words of HBM traffic per weight per use", defined_in=CHAPTER)
t_min = _decl("t_min", r"t_{\min}", "shortest step the limit allows", _S, defined_in=CHAPTER)
rho = _decl("rho_BL", r"\rho", "batch per layer at the anchor compute (tokens)", defined_in=CHAPTER)
t_lam = _decl(
    "t_lambda", r"t_{\lambda}",
    "latency of one communication on a step's critical path", _S, defined_in=CHAPTER,
)  # fmt: skip

# --- Constants of the closed forms (the authors' notebook) ----------------------------------
# The authors' final code for Erdil & Schneider-Joseph (2024): layer_and_batch_scaling.ipynb in
# the public repository ege-erdil/limits_to_distributed_training, commit b1f771c (October 2024).
#: Words of HBM traffic per weight each time a matmul uses it: the notebook charges 2 x 2 bytes
#: per weight; we read that as a 16-bit weight read and a 16-bit value written back.
HBM_WORDS_PER_WEIGHT = 2
#: Kernel latencies per latency-bound communication: the notebook's t_lat is 9 us, twice the
#: kernel latency of every GPU of section 3 (4.5 us).  Tying it to the kernel latency is our
#: reading; it lets the low-latency variants and a reader's overrides move the wall.
KERNELS_PER_COMMUNICATION = 2

# --- Assumptions, each a named substitution -------------------------------------------------
CRITICAL_STEP = Substitution(
    "every layer is its own pipeline stage, and a step runs the $2 N_{\\mathrm{PP}} = 2 L$ "
    "microbatches a zero-bubble schedule needs; each microbatch puts $n_{\\mathrm{HBM}}$ tokens "
    "through both $a_{\\mathrm{IB}} \\times a_{\\mathrm{IB}}$ weight shards of a node's layer in "
    "the three passes",
    {t_min: 2 * s.n_layers * s.macs_per_param_token * 2 * s.flop_per_mac * n_hbm * a_ib**2
     / (g_node * s.peak_flops)},
    kind="assumption",
    source="erdil2024datamovement",
)  # fmt: skip
LATENCY_STEP = Substitution(
    "a step crosses every layer forward and backward, and each crossing waits for one "
    "latency-bound communication per weight matrix",
    {t_min: 2 * 2 * s.n_layers * t_lam},
    kind="assumption",
    source="erdil2024datamovement",
)
BATCH_PER_LAYER = Substitution(
    "the batch-to-depth ratio is a power law of compute",
    {s.batch: rho * s.n_layers * (s.compute / s.compute_anchor) ** s.alpha_ratio},
    kind="assumption",
    source="erdil2024datamovement",
)
RUN_COMPUTE = sp.Eq(s.compute, s.macs_per_param_token * s.flop_per_mac * s.tokens_per_param
                    * s.n_params**2)  # fmt: skip


@register
def nanobatch_derivation() -> Derivation:
    w = s.n_params  # any number of weights: it cancels
    e1 = sp.Eq(
        s.flop_per_mac * n_hbm * w / (g_node * s.peak_flops),
        q_words * matmul.word * w / (g_node * matmul.bw_hbm),
    )
    e2 = sp.Eq(n_hbm, q_words * matmul.word * s.peak_flops / (s.flop_per_mac * matmul.bw_hbm))
    return derivation(
        "closed-forms-nanobatch",
        "The smallest nanobatch HBM allows",
        [
            Step(
                "A node multiplies $N$ weights by a nanobatch of $n_{\\mathrm{HBM}}$ tokens in "
                "the time its $G$ GPUs take to stream those weights through HBM, $q_w$ words "
                "each: any smaller nanobatch waits for memory.",
                e1,
            ),
            Step("The size of the node and the number of weights cancel.", e2, solve_for=n_hbm),
        ],
        chapter=CHAPTER,
    )


@register
def shard_derivation() -> Derivation:
    e1 = sp.Eq(
        s.macs_per_param_token * 2 * s.flop_per_mac * n_hbm * a_ib**2 / (g_node * s.peak_flops),
        2 * 2 * 2 * n_hbm * a_ib * matmul.word / (g_node * co.bw1 / 2),
    )
    e2 = sp.Eq(
        a_ib,
        8 * matmul.word * s.peak_flops / (s.macs_per_param_token * s.flop_per_mac * co.bw1),
    )
    return derivation(
        "closed-forms-shard",
        "The smallest weight shard InfiniBand allows",
        [
            Step(
                "A node holds an $a_{\\mathrm{IB}} \\times a_{\\mathrm{IB}}$ shard of each of a "
                "layer's two weight matrices. For a nanobatch of $n_{\\mathrm{HBM}}$ tokens its "
                "arithmetic in the three passes takes as long as its InfiniBand traffic, one "
                "direction at a time: the forward and the activation-gradient pass each bring "
                "$n_{\\mathrm{HBM}} a_{\\mathrm{IB}}$ words in and send as many out, per matrix "
                "(the weight-gradient pass needs nothing new).",
                e1,
            ),
            Step("The nanobatch and the node size cancel.", e2, solve_for=a_ib),
        ],
        chapter=CHAPTER,
    )


def _size_derivation(name: str, title: str, assumption: Substitution, why: str) -> Derivation:
    e1 = sp.Eq(s.train_time, s.tokens_per_param * s.n_params / s.batch * t_min)
    e2 = assumption.apply(e1)
    n = sp.solve(e2, s.n_params)[0]
    return derivation(
        name,
        title,
        [
            Step(
                "The run takes $k_D N / B$ steps, none shorter than $t_{\\min}$, and must end "
                "within the training time.",
                e1,
            ),
            Step(why, e2, using=assumption),
            Step(
                "The largest model that finishes in time.",
                sp.Eq(s.n_params, n),
                solve_for=s.n_params,
            ),
        ],
        chapter=CHAPTER,
    )


def _compute_derivation(name: str, title: str, size: Derivation) -> Derivation:
    size_sub = Substitution(
        f"the largest model, {{eq}}`{size.label(len(size.steps))}`",
        {s.n_params: size.result.rhs},
    )
    e1 = RUN_COMPUTE
    e2 = size_sub.apply(e1)
    e3 = BATCH_PER_LAYER.apply(e2)
    k = e3.rhs.subs(s.compute, s.compute_anchor)  # the right-hand side at C = C0
    result = s.compute_anchor * (k / s.compute_anchor) ** (1 / (1 - 2 * s.alpha_ratio))
    return derivation(
        name,
        title,
        [
            Step(
                "A Chinchilla run of $N$ parameters does $m_{\\mathrm{pass}} c_{\\mathrm{MAC}} "
                "k_D N^2$ FLOP.",
                e1,
            ),
            Step("At the largest model that finishes in time:", e2, using=size_sub),
            Step(
                "The batch-to-depth ratio grows with compute, so compute appears on both sides.",
                e3,
                using=BATCH_PER_LAYER,
            ),
            Step(
                "Solving for compute ($\\alpha < 1/2$).",
                sp.Eq(s.compute, result),
                solve_for=s.compute,
            ),
        ],
        chapter=CHAPTER,
    )


@register
def critical_size_derivation() -> Derivation:
    return _size_derivation(
        "closed-forms-critical-size",
        "The largest model every node can keep busy",
        CRITICAL_STEP,
        "At full rate, with the smallest nanobatch and shard, a step cannot be shorter than "
        "$2L$ microbatches through one layer:",
    )


@register
def critical_compute_derivation() -> Derivation:
    return _compute_derivation(
        "closed-forms-critical", "Critical compute", critical_size_derivation()
    )


@register
def latency_size_derivation() -> Derivation:
    return _size_derivation(
        "closed-forms-latency-size",
        "The largest model the latencies allow",
        LATENCY_STEP,
        "However many GPUs share the work, a step waits for four latencies per layer:",
    )


@register
def latency_compute_derivation() -> Derivation:
    return _compute_derivation(
        "closed-forms-latency-wall", "The latency wall", latency_size_derivation()
    )


@cache
@formula_cache.expressions
def _cost_formulas() -> dict[str, tuple[sp.Expr, sp.Expr]]:
    return {
        "nanobatch": (nanobatch_derivation().result.rhs, u.one),
        "shard": (shard_derivation().result.rhs, u.one),
        "critical_size": (critical_size_derivation().result.rhs, u.one),
        "latency_size": (latency_size_derivation().result.rhs, u.one),
        "critical_compute": (critical_compute_derivation().result.rhs, u.flop),
        "latency_wall": (latency_compute_derivation().result.rhs, u.flop),
    }


#: Each closed form of the chapter by name: (expression, unit), evaluated by :func:`evaluate`;
#: built on first use (:mod:`dmlimits.core.lazy`).
COST_FORMULAS: dict[str, tuple[sp.Expr, sp.Expr]]
#: The nanobatch's closed form (``closed-forms-nanobatch``); built on first use.
NANOBATCH: sp.Expr
#: The shard side's closed form (``closed-forms-shard``); built on first use.
SHARD: sp.Expr
#: The critical compute's closed form (``closed-forms-critical``); built on first use.
CRITICAL_COMPUTE: sp.Expr
#: The latency wall's closed form (``closed-forms-latency-wall``); built on first use.
LATENCY_WALL: sp.Expr
__getattr__ = lazy.attributes(
    __name__,
    COST_FORMULAS=_cost_formulas,
    **lazy.expressions(
        _cost_formulas,
        NANOBATCH="nanobatch",
        SHARD="shard",
        CRITICAL_COMPUTE="critical_compute",
        LATENCY_WALL="latency_wall",
    ),
)


def symbol_values(
    scn: Scenario, alpha: float | None = None, laws: str = "paper"
) -> dict[sp.Symbol, float]:
    """The value of every symbol of the closed forms in a scenario.

    ``laws="paper"``: the batch-to-depth ratio as the paper's closed forms take it, the
    ``closed_forms.*`` keys (``b0 / L0`` at the anchor compute, exponent ``closed_forms.alpha``;
    ``alpha`` overrides the exponent).  ``laws="own"``: the ratio the scenario's own batch and
    depth laws give (the unrounded laws at the anchor compute, and the exponent they imply,
    :func:`implied_alpha`), so that each batch law has its own limits."""
    scn = require_scenario(scn)
    if laws not in ("paper", "own"):
        raise ValueError(f"laws: got {laws!r}; expected 'paper' or 'own'")
    v = scn.values
    if laws == "own":
        at = model.along_compute(scn, np.array([float(v["batch.anchor_flop"])]))
        ratio = float(at["batch"][0] / at["layers"][0])
        exponent = implied_alpha(scn) if alpha is None else alpha
    else:
        ratio = v["closed_forms.batch_tokens"] / v["closed_forms.layers"]
        exponent = v["closed_forms.alpha"] if alpha is None else alpha
    return {
        s.peak_flops: scn.peak_flops,
        matmul.bw_hbm: v["hardware.hbm_bandwidth"],
        co.bw1: co.level_bandwidth(scn, 1),  # NVLink for a flat network, inf unlimited
        matmul.word: v["model.word_bytes"],
        g_node: float(v["network.node_size"]),
        q_words: float(HBM_WORDS_PER_WEIGHT),
        s.train_time: scn.train_seconds,
        s.tokens_per_param: v["training.tokens_per_param"],
        **{k: float(x) for k, x in model.PASS_COUNTS.mapping.items()},
        rho: ratio,
        s.compute_anchor: v["batch.anchor_flop"],
        s.alpha_ratio: float(exponent),
        t_lam: KERNELS_PER_COMMUNICATION * v["hardware.kernel_latency"],
    }


@cache
def _numeric(name: str):
    forms = _cost_formulas()
    expr = forms[name][0].subs({n_hbm: forms["nanobatch"][0], a_ib: forms["shard"][0]})
    free = sorted(expr.free_symbols, key=lambda x: x.name)
    return free, sp.lambdify(free, expr, "numpy")


def evaluate(name: str, scn: Scenario, alpha: Any = None, laws: str = "paper") -> Any:
    """One closed form (a key of :data:`COST_FORMULAS`) in a scenario; ``alpha`` may be an
    array of batch-to-depth exponents; ``laws`` as in :func:`symbol_values`.  An infinite
    bandwidth gives an infinite limit."""
    values = symbol_values(scn, 0.0 if alpha is not None else None, laws)
    if alpha is not None:
        values[s.alpha_ratio] = np.asarray(alpha, dtype=float)
    free, fn = _numeric(name)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        out = np.asarray(fn(*(np.float64(values[x]) if np.ndim(values[x]) == 0 else values[x]
                              for x in free)), dtype=float)  # fmt: skip
    return float(out) if out.ndim == 0 else out


def power_of(name: str, symbol: sp.Symbol) -> sp.Expr:
    """The power with which one closed form (a key of :data:`COST_FORMULAS`) grows with one of
    its symbols, ``d ln f / d ln x``, with the smallest nanobatch and shard put in: the
    exponent of ``x`` where the form is a power law of it (``4 / (1 - 2 alpha)`` for the
    critical compute and the InfiniBand bandwidth, ``co.bw1``).  Raises ``ValueError`` for a
    symbol the form does not contain."""
    forms = _cost_formulas()
    if name not in forms:
        raise ValueError(f"closed form: got {name!r}; expected one of {sorted(forms)}")
    expr = forms[name][0].subs({n_hbm: forms["nanobatch"][0], a_ib: forms["shard"][0]})
    if symbol not in expr.free_symbols:
        raise ValueError(
            f"symbol: got {symbol} for the closed form {name!r}; expected one of "
            f"{sorted(str(x) for x in expr.free_symbols)}"
        )
    return sp.simplify(sp.diff(sp.log(expr), symbol) * symbol)


def applies(scn: Scenario) -> bool:
    """Whether the closed forms apply: they are derived for dense models (a run of ``N``
    parameters does ``6 k_D N^2`` FLOP), not for mixtures of experts."""
    return not bool(require_scenario(scn)["model.sparse"])


def values(scn: Scenario) -> dict[str, float]:
    """The closed forms of a scenario: the smallest nanobatch and shard side, and the two
    limits in FLOP, both as the paper takes the batch-to-depth ratio (``t_crit_flop``,
    ``t_limit_flop``, at ``alpha``) and under the scenario's own laws (``t_crit_own_flop``,
    ``t_limit_own_flop``, at ``alpha_own``; ``NaN`` for a sparse scenario, where the closed forms
    do not apply)."""
    dense = applies(scn)
    own = {
        key: evaluate(name, scn, laws="own") if dense else math.nan
        for key, name in (("t_crit_own_flop", "critical_compute"),
                          ("t_limit_own_flop", "latency_wall"))
    }  # fmt: skip
    return {
        "nanobatch_tokens": evaluate("nanobatch", scn),
        "shard_side": evaluate("shard", scn),
        "t_crit_flop": evaluate("critical_compute", scn),
        "t_limit_flop": evaluate("latency_wall", scn),
        "alpha": float(scn["closed_forms.alpha"]),
        **own,
        "alpha_own": implied_alpha(scn),
        "rho_own": float(symbol_values(scn, laws="own")[rho]),
        "latency_s": symbol_values(scn)[t_lam],
    }


#: The closed forms' values that :func:`ignored` checks: the two limits, as the paper takes the
#: batch-to-depth ratio and as the scenario's own laws give it.
LIMITS = ("t_crit_flop", "t_limit_flop", "t_crit_own_flop", "t_limit_own_flop")

#: Why the closed forms leave out assumptions a reader may expect them to read, by key or by
#: the prefix of a group of keys; :func:`ignored` names any other key they leave out without a
#: reason.
LEFT_OUT: dict[str, str] = {
    "network.latency": (
        f"the latency wall takes its latency as {KERNELS_PER_COMMUNICATION} kernel latencies "
        "(hardware.kernel_latency), not the network's"
    ),
    "search.": (
        "the closed forms search nothing: every layer is its own pipeline stage, with the "
        "smallest nanobatch and weight shard"
    ),
    "sweep.": "the closed forms are formulas, not a sweep over model sizes",
}


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=1e-12)


def ignored(scn: Scenario, reference: Scenario, keys: Any) -> list[tuple[str, str]]:
    """The assumptions among ``keys`` in which ``scn`` differs from ``reference`` that none of
    the closed forms' :data:`LIMITS` depends on, each with the reason from :data:`LEFT_OUT`
    (``""`` where it has none).  A key is left out when putting back its value of
    ``reference`` leaves every limit as it is, so that a reader who changed it is told why
    those numbers did not move (the searched ones may)."""
    scn, reference = require_scenario(scn), require_scenario(reference)
    here = values(scn)
    out = []
    for key in dict.fromkeys(keys):
        if key not in scn.values or reference.values.get(key) == scn.values[key]:
            continue
        try:
            back = values(resolve_overrides(scn, {key: reference.values[key]}))
        except (ScenarioError, KeyError):  # a value valid only with the others changed too
            continue
        if all(_same(here[k], back[k]) for k in LIMITS):
            why = next((r for p, r in LEFT_OUT.items() if key == p or (
                p.endswith(".") and key.startswith(p))), "")  # fmt: skip
            out.append((key, why))
    return out


def implied_alpha(scn: Scenario) -> float:
    """The exponent of ``B / L`` against compute that the scenario's own batch and depth laws
    imply (the model chapter's exponents), to set beside the closed forms' ``alpha``."""
    return float(model.exponent_values(scn)["batch_per_layer"])
