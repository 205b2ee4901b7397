"""The model of training: architecture, scaling laws, and what they imply as compute grows.

Erdil & Schneider-Joseph (2024) train a stack of ``L`` identical blocks, each a layer of ``S``
experts (``S = 1``: dense), each expert an MLP with two weight matrices ``d_model x d_ff`` and
``d_ff x d_model``; every token goes to one expert; there is no attention.  Parameters, data and
compute follow Chinchilla (Hoffmann et al. 2022): ``D = k_D N`` tokens and ``C = 6 N_a D``.
Depth, sparsity and batch size follow the laws below.  Everything here is a sympy expression
first; numeric functions are lambdified from the same expressions.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np
import sympy as sp

from dmlimits.core import formula_cache
from dmlimits.core import symbols as s
from dmlimits.core import units as u
from dmlimits.core.derivation import Derivation, Step, Substitution, derivation, register
from dmlimits.core.scenario import Scenario
from dmlimits.core.symbols import REGISTRY

CHAPTER = "model"

# A symbol for the unit of compute in the DeepSeek fit, which is stated for C in FLOP.
one_flop = s.REGISTRY.declare(
    "C_1",
    r"C_{1}",
    "one FLOP: the unit in which the DeepSeek batch law takes compute",
    u.flop,
    defined_in=CHAPTER,
)

# --- Definitions and assumptions, each a named substitution --------------------------------
PASS_COUNTS = Substitution(
    "one multiply-accumulate per parameter per token forward, two backward; two FLOP each",
    {s.macs_per_param_token: 3, s.flop_per_mac: 2},
    kind="definition",
)
TOKENS = Substitution(
    "Chinchilla-optimal data",
    {s.n_tokens: s.tokens_per_param * s.n_params},
    kind="assumption",
    source="hoffmann2022chinchilla",
)
ACTIVE = Substitution(
    "each token uses one expert per block", {s.n_active: s.n_params / s.n_experts}
)
PARAMS = Substitution(
    "two weight matrices per expert, S experts per block, L blocks",
    {s.n_params: 2 * s.d_model * s.d_ff * s.n_layers * s.n_experts},
)
HIDDEN = Substitution("hidden width", {s.d_ff: s.ff_ratio * s.d_model})
DEPTH_LAW = Substitution(
    "depth law",
    {s.n_layers: s.depth_coef * (s.d_model * s.d_ff) ** s.depth_exp},
    kind="assumption",
    source="erdil2024datamovement",
)
SPARSITY_LAW = Substitution(
    "sparsity law",
    {
        s.n_experts: s.sparse_ref_experts
        * sp.sqrt(s.d_model * s.d_ff / (s.ff_ratio * s.sparse_ref_width**2))
    },
    kind="assumption",
    source="erdil2024datamovement",
)
DENSE = Substitution("dense model", {s.n_experts: 1}, kind="assumption")

BATCH_LAWS: dict[str, sp.Expr] = {
    "default": s.batch_anchor
    * (s.compute / s.compute_anchor) ** s.batch_exp
    * sp.sqrt(s.n_experts),
    "none": s.batch_anchor,
    "deepseek": s.deepseek_coef * (s.compute / one_flop) ** s.deepseek_exp * sp.sqrt(s.n_experts),
}
BATCH_LAW_LABELS = {  # matplotlib mathtext, for legends
    "default": r"default: $B_0\,(C/C_0)^{e_B}\sqrt{S}$",
    "none": r"no scaling: $B = B_0$",
    "deepseek": r"DeepSeek: $k_{\mathrm{DS}}\,C^{e_{\mathrm{DS}}}\sqrt{S}$",
}


def _tidy_exponents(expr: sp.Expr) -> sp.Expr:
    """Simplify every exponent (a^(1 - e/(e+1)) becomes a^(1/(e+1)))."""
    return expr.replace(lambda e: e.is_Pow, lambda e: sp.Pow(e.base, sp.simplify(e.exp)))


def _simplify_powers(expr: sp.Expr) -> sp.Expr:
    return _tidy_exponents(
        sp.powsimp(sp.expand_power_base(sp.powsimp(expr, force=True), force=True), force=True)
    )


# --- Derivations ---------------------------------------------------------------------------
@register
def compute_of_a_run() -> Derivation:
    """C = 6 N_a D, then in terms of total parameters."""
    c0 = sp.Eq(s.compute, s.macs_per_param_token * s.flop_per_mac * s.n_active * s.n_tokens)
    c1 = PASS_COUNTS.apply(c0)
    c2 = TOKENS.apply(c1)
    c3 = ACTIVE.apply(c2)
    return derivation(
        "model-compute",
        "The compute of a training run",
        [
            Step(
                "Every active parameter takes part in one multiply-accumulate per token in the "
                "forward pass and in two in the backward pass (activation gradient and weight "
                "gradient), each of a fixed number of FLOP.",
                c0,
            ),
            Step("Counting the passes gives the familiar rule.", c1, using=PASS_COUNTS),
            Step(
                "Training is compute-optimal in the Chinchilla sense: a fixed number of tokens per "
                "parameter.",
                c2,
                using=TOKENS,
            ),
            Step(
                "A token visits one of the $S$ experts in each block, so the active parameters are "
                "a fraction $1/S$ of all parameters.",
                c3,
                using=ACTIVE,
            ),
        ],
        chapter=CHAPTER,
    )


@register
def compute_from_width() -> Derivation:
    """Compute as a power of the model width, through the parameter count and the depth law."""
    c0 = compute_of_a_run().result
    c1 = PARAMS.apply(c0)
    c2 = DEPTH_LAW.apply(c1)
    c3 = HIDDEN.apply(c2)
    c4 = sp.Eq(s.compute, _simplify_powers(c3.rhs))
    return derivation(
        "model-compute-width",
        "Compute as a power of the model width",
        [
            Step(
                "Start from the compute of a run in terms of all parameters, "
                "{eq}`model-compute-4`.",
                c0,
            ),
            Step("Each block holds S experts of two weight matrices.", c1, using=PARAMS),
            Step(
                "Depth follows a power law in the size of one weight matrix, fitted to "
                "Chinchilla's shapes.",
                c2,
                using=DEPTH_LAW,
            ),
            Step("The hidden width is a fixed multiple of the model width.", c3, using=HIDDEN),
            Step("Collecting powers of the width:", c4),
        ],
        chapter=CHAPTER,
    )


def _width_from_compute(sparse: bool) -> Derivation:
    c0 = compute_from_width().result
    if sparse:
        law = Substitution(
            SPARSITY_LAW.name,
            {s.n_experts: _simplify_powers(HIDDEN.apply(SPARSITY_LAW.mapping[s.n_experts]))},
            kind="assumption",
            source=SPARSITY_LAW.source,
        )
        text = (
            "The number of experts grows with the width (the sparsity law with the hidden "
            "width substituted)."
        )
    else:
        law, text = DENSE, "A dense model has one expert per block."
    c1 = law.apply(c0)
    c2 = sp.Eq(s.compute, _simplify_powers(c1.rhs))
    # C = K d^p, so d = (C / K)^(1/p); the solve_for check below proves it.
    coefficient, power = c2.rhs.as_independent(s.d_model, as_Add=False)
    base, p = power.as_base_exp()
    if base != s.d_model:
        raise RuntimeError(f"expected compute to be a power of the width, got {c2.rhs}")
    c3 = sp.Eq(s.d_model, (s.compute / coefficient) ** (1 / p))
    kind = "sparse" if sparse else "dense"
    # Collecting powers is a step only when the book prints it differently.
    collect = [Step("Collecting powers:", c2)] if REGISTRY.latex(c2) != REGISTRY.latex(c1) else []
    return derivation(
        f"model-width-{kind}",
        f"Width against compute ({kind})",
        [
            Step("Start from compute as a power of the width, {eq}`model-compute-width-5`.", c0),
            Step(text, c1, using=law),
            *collect,
            Step(
                "Solving for the width gives the width a run of a given compute trains.",
                c3,
                solve_for=s.d_model,
            ),
        ],
        chapter=CHAPTER,
    )


@register
def width_from_compute_dense() -> Derivation:
    return _width_from_compute(False)


@register
def width_from_compute_sparse() -> Derivation:
    return _width_from_compute(True)


@register
def depth_from_compute() -> Derivation:
    """Depth against compute (dense): the depth law with the width of a given compute."""
    derived = width_from_compute_dense()
    width = derived.result
    at_width = Substitution(
        f"width against compute (dense), {{eq}}`{derived.label(len(derived.steps))}`",
        {s.d_model: width.rhs},
    )
    l0 = sp.Eq(s.n_layers, DEPTH_LAW.mapping[s.n_layers])
    l1 = HIDDEN.apply(l0)
    l2 = at_width.apply(l1)
    e = s.depth_exp
    l2b = sp.Eq(
        s.n_layers,
        s.depth_coef
        * (s.compute / (24 * s.depth_coef**2 * s.tokens_per_param)) ** (e / (2 * (e + 1))),
    )
    x = exponent(l2.rhs)
    coefficient = _tidy_exponents(sp.powsimp(sp.simplify(l2.rhs / s.compute**x), force=True))
    l3 = sp.Eq(s.n_layers, sp.Mul(coefficient, sp.Pow(s.compute, x), evaluate=False))
    return derivation(
        "model-depth-dense",
        "Depth against compute (dense)",
        [
            Step("The depth law:", l0),
            Step("With the hidden width a multiple of the model width:", l1, using=HIDDEN),
            Step("Put in the width a run of compute C trains:", l2, using=at_width),
            Step(
                "The hidden-width ratio cancels: $r_{\\mathrm{ff}}$ times its own power "
                "$-2(e_L + 1) / (2(e_L + 1)) = -1$.",
                l2b,
            ),
            Step("Collecting the constants, depth is a power of compute:", l3),
        ],
        chapter=CHAPTER,
    )


# --- The time budget of a run (cost formulas, in seconds) -----------------------------------
STEP_BUDGET = s.train_time / s.n_steps
LAYER_BUDGET = s.train_time / (s.n_steps * s.n_layers)
MIN_GPUS = s.compute / (s.train_time * s.peak_flops * s.eff_util)
COST_FORMULAS = {
    "step_budget": (STEP_BUDGET, u.second),
    "layer_budget": (LAYER_BUDGET, u.second),
    "min_gpus": (MIN_GPUS, u.one),
    "compute": (compute_of_a_run().steps[0].expr.rhs, u.flop),
}


# --- Exponents against compute ---------------------------------------------------------------
def closed_forms(sparse: bool, law: str) -> dict[str, sp.Expr]:
    """Each quantity as a function of compute C (before rounding to the grid)."""
    return dict(_closed_forms(bool(sparse), law))


@cache
@formula_cache.expressions
def _closed_forms(sparse: bool, law: str) -> dict[str, sp.Expr]:
    if law not in BATCH_LAWS:
        raise ValueError(f"batch law {law!r}: expected one of {', '.join(BATCH_LAWS)}")
    d_of_c = (width_from_compute_sparse() if sparse else width_from_compute_dense()).result.rhs
    at = {s.d_model: d_of_c}
    experts = (
        _simplify_powers(HIDDEN.apply(SPARSITY_LAW.mapping[s.n_experts]))
        if sparse
        else sp.Integer(1)
    )
    depth = HIDDEN.apply(DEPTH_LAW.mapping[s.n_layers])
    params = (
        HIDDEN.apply(PARAMS.mapping[s.n_params]).subs(s.n_layers, depth).subs(s.n_experts, experts)
    )
    batch = BATCH_LAWS[law].subs(s.n_experts, experts)
    forms = {
        "d_model": d_of_c,
        "layers": depth.subs(at),
        "experts": experts.subs(at),
        "params": params.subs(at),
        "batch": batch.subs(at),
    }
    forms["steps"] = s.tokens_per_param * forms["params"] / forms["batch"]
    forms["batch_per_layer"] = forms["batch"] / forms["layers"]
    return {k: _simplify_powers(v) for k, v in forms.items()}


EXPONENT_SYMBOLS = {
    "d_model": s.alpha_width,
    "layers": s.alpha_depth,
    "batch": s.alpha_batch,
    "steps": s.alpha_steps,
    "batch_per_layer": s.alpha_ratio,
}


def exponent(expr: sp.Expr) -> sp.Expr:
    """The exponent x of a power law expr = K C^x, as d ln(expr) / d ln C."""
    return sp.simplify(s.compute * sp.diff(sp.log(expr), s.compute))


def exponents(sparse: bool, law: str) -> dict[str, sp.Expr]:
    """Exponent of each quantity against compute, symbolic in the laws' exponents."""
    return dict(_exponents(bool(sparse), law))


@cache
@formula_cache.expressions
def _exponents(sparse: bool, law: str) -> dict[str, sp.Expr]:
    forms = closed_forms(sparse, law)
    return {k: sp.factor(exponent(forms[k])) for k in EXPONENT_SYMBOLS}


def closed_forms_kept(sparse: bool, law: str) -> bool:
    """Whether the exponents of the closed forms for ``sparse`` and ``law`` (built with the
    closed forms themselves) are kept on disk (:mod:`dmlimits.core.formula_cache`)."""
    return formula_cache.is_kept(_exponents, bool(sparse), law)


def keep_closed_forms(sparse: bool, law: str) -> None:
    """Keep on disk (:mod:`dmlimits.core.formula_cache`, when it names a folder) the closed forms
    for ``sparse`` and ``law``, their exponents and the numpy functions made from them, built
    unless kept already, whether or not this process holds them (what it holds is read past)."""
    sparse = bool(sparse)
    for cached in (_closed_forms, _exponents, _lambdified):
        cached.__wrapped__(sparse, law)


def law_values(scn: Scenario) -> dict[sp.Symbol, float]:
    """Numeric values of the laws' symbols in a scenario."""
    v = scn.values
    return {
        s.ff_ratio: v["model.ff_ratio"],
        s.tokens_per_param: v["training.tokens_per_param"],
        s.depth_coef: v["depth.coefficient"],
        s.depth_exp: v["depth.exponent"],
        s.sparse_ref_experts: v["sparsity.reference_experts"],
        s.sparse_ref_width: v["sparsity.reference_d_model"],
        s.batch_anchor: v["batch.anchor_tokens"],
        s.compute_anchor: v["batch.anchor_flop"],
        s.batch_exp: v["batch.exponent"],
        s.deepseek_coef: v["batch.deepseek_coefficient"],
        s.deepseek_exp: v["batch.deepseek_exponent"],
        s.macs_per_param_token: 3,
        s.flop_per_mac: 2,
        one_flop: 1.0,
    }


def exponent_values(scn: Scenario, law: str | None = None) -> dict[str, float]:
    """The exponent against compute of each quantity of ``EXPONENT_SYMBOLS`` (d_model,
    layers, batch, steps, batch per layer) under the scenario's laws, as numbers."""
    law = law or scn["batch.law"]
    values = law_values(scn)
    key = (bool(scn["model.sparse"]), law, tuple(sorted((str(k), v) for k, v in values.items())))
    return dict(_exponent_values(key, values))


#: The exponents' values by (sparse, law, the laws' values): sympy substitutes them exactly,
#: which is slow, and the chapters ask for the same few scenarios hundreds of times.
_EXPONENT_VALUES: dict[tuple, dict[str, float]] = {}


def _exponent_values(key: tuple, values: dict[sp.Symbol, float]) -> dict[str, float]:
    if key not in _EXPONENT_VALUES:
        sparse, law, _ = key
        _EXPONENT_VALUES[key] = {
            k: float(e.subs(values)) for k, e in exponents(sparse, law).items()
        }
    return _EXPONENT_VALUES[key]


@cache
def _lambdified(sparse: bool, law: str) -> dict[str, object]:
    forms = closed_forms(sparse, law)
    args = [
        s.compute,
        *sorted(set().union(*(f.free_symbols for f in forms.values())) - {s.compute}, key=str),
    ]
    return {
        "args": args,
        **{
            k: formula_cache.lambdified(
                f"model.closed_form {sparse} {law} {k}", lambda f=f: (args, f)
            )
            for k, f in forms.items()
        },
    }


def along_compute(
    scn: Scenario, compute: np.ndarray, law: str | None = None
) -> dict[str, np.ndarray]:
    """The unrounded laws evaluated at compute values (for smooth curves in figures)."""
    law = law or scn["batch.law"]
    fns = _lambdified(bool(scn["model.sparse"]), law)
    values = law_values(scn)
    args = [np.asarray(compute, dtype=float)] + [values[a] for a in fns["args"][1:]]
    return {
        k: np.broadcast_to(f(*args), np.shape(compute)).astype(float)
        for k, f in fns.items()
        if k != "args"
    }


# --- The sweep grid, with the paper's rounding --------------------------------------------
ROUNDING_FACTORS = (1, 3, 5, 7, 9)  # laws are rounded to the nearest f * 2^i
WIDTH_FACTORS = tuple(range(1, 16, 2))  # the sweep's widths are f * 2^i, f odd, f <= 15


def round_to_grid(x: np.ndarray, factors: tuple[int, ...] = ROUNDING_FACTORS) -> np.ndarray:
    """Round each value to the nearest number of the form f * 2^i (f in ``factors``, i >= 0)."""
    x = np.asarray(x, dtype=float)
    if np.any(~np.isfinite(x)) or np.any(x <= 0):
        raise ValueError("round_to_grid: every value must be finite and positive")
    top = int(np.ceil(np.log2(x.max()))) + 1
    candidates = np.unique([f * 2**i for f in factors for i in range(top + 1)]).astype(float)
    idx = np.clip(np.searchsorted(candidates, x), 1, len(candidates) - 1)
    lower, upper = candidates[idx - 1], candidates[idx]
    return np.where(x - lower <= upper - x, lower, upper)


def width_grid(scn: Scenario) -> np.ndarray:
    lo = scn["sweep.d_model_min"]
    hi = lo * scn["sweep.d_model_max_factor"]
    top = int(np.ceil(np.log2(hi)))
    widths = {f * 2**i for f in WIDTH_FACTORS for i in range(top + 1)}
    return np.array(sorted(w for w in widths if lo <= w <= hi), dtype=float)


@dataclass(frozen=True)
class Shapes:
    """The models of the sweep, one entry per width, with every derived quantity."""

    d_model: np.ndarray
    d_ff: np.ndarray
    layers: np.ndarray
    experts: np.ndarray
    params: np.ndarray
    active_params: np.ndarray
    tokens: np.ndarray
    compute: np.ndarray
    batch: np.ndarray  # tokens, whole sequences
    steps: np.ndarray
    step_budget: np.ndarray  # seconds available per step
    layer_budget: np.ndarray  # seconds available per layer per step
    min_gpus: np.ndarray  # GPUs needed at the effective utilization

    def __len__(self) -> int:
        return len(self.d_model)


def _numeric_build(what: str) -> tuple[list, sp.Expr]:
    """The arguments and the expression of the definition ``what`` (``batch <law>`` for a
    batch law)."""
    if what == "params":
        return [s.d_model, s.d_ff, s.n_layers, s.n_experts], PARAMS.mapping[s.n_params]
    if what == "compute":
        return [s.n_params, s.n_experts, s.tokens_per_param], compute_of_a_run().result.rhs
    if what.startswith("batch "):
        batch_args = [
            s.compute,
            s.n_experts,
            s.batch_anchor,
            s.compute_anchor,
            s.batch_exp,
            s.deepseek_coef,
            s.deepseek_exp,
            one_flop,
        ]
        return batch_args, BATCH_LAWS[what.removeprefix("batch ")]
    if what == "depth":
        return [s.d_model, s.d_ff, s.depth_coef, s.depth_exp], DEPTH_LAW.mapping[s.n_layers]
    if what == "step_budget":
        return [s.train_time, s.n_steps], STEP_BUDGET
    if what == "layer_budget":
        return [s.train_time, s.n_steps, s.n_layers], LAYER_BUDGET
    if what == "min_gpus":
        return [s.compute, s.train_time, s.peak_flops, s.eff_util], MIN_GPUS
    if what == "experts":
        args = [s.d_model, s.d_ff, s.ff_ratio, s.sparse_ref_experts, s.sparse_ref_width]
        return args, SPARSITY_LAW.mapping[s.n_experts]
    raise KeyError(what)


@cache
def numeric_defs() -> dict[str, object]:
    """Lambdified definitions: parameters, compute and batch laws from the symbolic ones, kept
    between processes (:func:`dmlimits.core.formula_cache.lambdified`: a process that reads them
    derives nothing)."""

    def kept(what: str) -> object:
        return formula_cache.lambdified(f"model.{what}", lambda: _numeric_build(what))

    names = ("params", "compute", "depth", "step_budget", "layer_budget", "min_gpus", "experts")
    out: dict[str, object] = {name: kept(name) for name in names}
    out["batch"] = {law: kept(f"batch {law}") for law in BATCH_LAWS}
    return out


def batch_tokens(
    scn: Scenario, compute: np.ndarray, experts: np.ndarray, law: str | None = None
) -> np.ndarray:
    """The batch law in tokens, held as whole sequences rounded like the other laws."""
    law = law or scn["batch.law"]
    v = scn.values
    raw = numeric_defs()["batch"][law](
        np.asarray(compute, float),
        np.asarray(experts, float),
        v["batch.anchor_tokens"],
        v["batch.anchor_flop"],
        v["batch.exponent"],
        v["batch.deepseek_coefficient"],
        v["batch.deepseek_exponent"],
        1.0,
    )
    seq = v["model.sequence_length"]
    raw = np.broadcast_to(raw, np.shape(compute))
    per_expert = np.maximum(raw / (seq * np.asarray(experts, float)), 1.0)
    return round_to_grid(per_expert) * np.asarray(experts, float) * seq


def shapes(scn: Scenario, law: str | None = None) -> Shapes:
    """Every model of the sweep grid under the scenario's laws, rounded as in the paper."""
    defs = numeric_defs()
    v = scn.values
    d = width_grid(scn)
    dff = v["model.ff_ratio"] * d
    layers = round_to_grid(defs["depth"](d, dff, v["depth.coefficient"], v["depth.exponent"]))
    if v["model.sparse"]:
        experts = round_to_grid(
            defs["experts"](
                d,
                dff,
                v["model.ff_ratio"],
                v["sparsity.reference_experts"],
                v["sparsity.reference_d_model"],
            )
        )
    else:
        experts = np.ones_like(d)
    params = defs["params"](d, dff, layers, experts)
    compute = defs["compute"](params, experts, v["training.tokens_per_param"])
    tokens = v["training.tokens_per_param"] * params
    batch = batch_tokens(scn, compute, experts, law)
    steps = tokens / batch
    step_budget = defs["step_budget"](scn.train_seconds, steps)
    layer_budget = defs["layer_budget"](scn.train_seconds, steps, layers)
    min_gpus = defs["min_gpus"](
        compute, scn.train_seconds, scn.peak_flops, v["hardware.effective_utilization"]
    )
    return Shapes(
        d_model=d,
        d_ff=dff,
        layers=layers,
        experts=experts,
        params=params,
        active_params=params / experts,
        tokens=tokens,
        compute=compute,
        batch=batch,
        steps=steps,
        step_budget=step_budget,
        layer_budget=layer_budget,
        min_gpus=min_gpus,
    )


def budget_at(scn: Scenario, compute: float, law: str | None = None) -> dict[str, float]:
    """Smooth-law quantities at one compute value: the time budget of a step and of a layer."""
    forms = along_compute(scn, np.array([compute]), law)
    defs = numeric_defs()
    steps = float(forms["steps"][0])
    layers = float(forms["layers"][0])
    return {
        "steps": steps,
        "layers": layers,
        "batch": float(forms["batch"][0]),
        "step_budget": float(defs["step_budget"](scn.train_seconds, steps)),
        "layer_budget": float(defs["layer_budget"](scn.train_seconds, steps, layers)),
        "min_gpus": float(
            defs["min_gpus"](
                compute, scn.train_seconds, scn.peak_flops, scn["hardware.effective_utilization"]
            )
        ),
    }


def depth_unrounded(scn: Scenario, d_model: float | np.ndarray) -> np.ndarray:
    """The depth law before rounding, at the given widths."""
    v = scn.values
    d = np.asarray(d_model, dtype=float)
    return numeric_defs()["depth"](
        d, v["model.ff_ratio"] * d, v["depth.coefficient"], v["depth.exponent"]
    )


def batch_exponent_threshold(scn: Scenario) -> float:
    """The default law's batch exponent e_B at which B / L stops shrinking with compute."""
    ratio = exponents(bool(scn["model.sparse"]), "default")["batch_per_layer"]
    (root,) = sp.solve(sp.Eq(ratio, 0), s.batch_exp)
    return float(root.subs(law_values(scn)))
