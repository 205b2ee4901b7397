"""Pipeline parallelism: stages, microbatches, the bubble, and what crosses a stage boundary.

Erdil & Schneider-Joseph (2024, "Data movement limits to frontier model training",
arXiv:2411.01137) split the ``L`` blocks of the model into ``N_PP`` pipeline stages (``N_PP``
divides ``L``) and each step's batch, per pipeline, into ``m`` microbatches (in the authors'
final code, ``optimal_parallelism.ipynb`` in the public repository
``ege-erdil/limits_to_distributed_training``, commit b1f771c, October 2024).  This module
derives the parts of that model that belong to the pipeline itself:

* **The bubble of 1F1B.**  In the one-forward-one-backward schedule (PipeDream-Flush; Narayanan
  et al. 2021) every stage waits while the first microbatch's forward pass fills the pipeline and
  while the last microbatch's backward pass drains it.  The *bubble fraction* ``f`` is the share
  of a flush in which a GPU computes nothing; every configuration's compute time is divided by
  ``1 - f``.  Without interleaving it is ``(N_PP - 1) / (N_PP - 1 + m)``.
* **Interleaving** (Narayanan et al. 2021).  Each GPU holds ``v`` model chunks (virtual stages),
  assigned round-robin, so a microbatch goes round the ``N_PP`` GPUs ``v`` times.  Filling and
  draining now cost chunk slots, a ``v``-th of a stage slot.  With fewer microbatches than stages
  a GPU also waits at every change of chunk for the first microbatch to come back round:
  ``z = (v - 1) max(0, N_PP - m)`` chunk slots, and
  ``f = (z + N_PP - 1) / (z + N_PP - 1 + v m)``.  The paper interleaves fully,
  ``v = L / N_PP`` (one block per chunk), whenever ``N_PP > 1``.
* **Zero bubble** (Qi et al. 2024, schedule ZB-H2).  Splitting the backward pass into its
  activation-gradient and weight-gradient halves lets the weight gradients fill the bubble:
  ``f = 0``, valid with ``m >= 2 N_PP`` microbatches and no interleaving (``v = 1``).
* **Microbatches.**  The model has no attention, so a microbatch can be any whole number of
  tokens: ``m`` divides the tokens a pipeline handles per step (whole sequences are an option);
  the paper's search tries the smallest few valid ``m`` of at least ``N_PP`` (``2 N_PP`` for
  zero bubble).
* **The boundary.**  Between stages travel each token's activations, ``d_model`` words, forward,
  and their gradients, ``d_model`` words, backward.

The bubble formulas are derived in sympy as registered derivations (chapter ``pipeline``); the
numeric functions are lambdified from the same expressions and broadcast over numpy arrays.
The schedules themselves are simulated slot by slot in ``tests/test_pipeline.py``, independently
of these formulas.  The module also lays schedules out itself (:func:`schedule`,
:func:`schedule_zero_bubble`), for the chapter's Gantt charts and for
:func:`compare_interleaved_orders`, which sets Megatron-LM's interleaved order and breadth-first
interleaving against the formula; the tests check those layouts against their own simulator.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from functools import cache, cached_property
from typing import Any

import numpy as np
import sympy as sp

from dmlimits.core import checks, formula_cache, lazy
from dmlimits.core import symbols as s
from dmlimits.core import units as u
from dmlimits.core.checks import as_output as _out
from dmlimits.core.checks import counts, flag, numbers, shown
from dmlimits.core.derivation import Derivation, Step, Substitution, derivation, register
from dmlimits.costs.collectives import lat_level as _lat_level
from dmlimits.costs.matmul import word

CHAPTER = "pipeline"

# --- Definitional constants ------------------------------------------------------------------
# Zero bubble (ZB-H2) needs at least this many microbatches per stage (Qi et al. 2024; the
# authors' final code, optimal_parallelism.ipynb).
ZERO_BUBBLE_MICROBATCHES_PER_STAGE = 2
# The paper's search tries this many of the smallest valid microbatch counts.
SEARCH_MICROBATCH_COUNT = 4
# A stage boundary carries activations forward and their gradients backward.
BOUNDARY_PASSES = 2

_decl = s.REGISTRY.declare
_S = u.second

# --- Symbols -----------------------------------------------------------------------------------
n_pp = _decl(
    "N_PP",
    r"N_{\mathrm{PP}}",
    "pipeline stages: the GPUs a microbatch passes through in turn",
    defined_in=CHAPTER,
    integer=True,
)
n_micro = _decl(
    "m_micro",
    "m",
    "microbatches per pipeline per step",
    defined_in=CHAPTER,
    integer=True,
)
interleave = _decl(
    "v_PP",
    "v",
    "interleaving factor: model chunks (virtual stages) per GPU",
    defined_in=CHAPTER,
    integer=True,
)
z_wait = _decl(
    "z_PP",
    "z",
    "chunk slots a GPU waits at changes of chunk when microbatches are fewer than stages",
    defined_in=CHAPTER,
)
bubble = _decl(
    "f_bubble",
    "f",
    "pipeline bubble fraction: the share of a flush in which a GPU computes nothing",
    defined_in=CHAPTER,
)
bubble_max = _decl(
    "f_bubble_max", r"f_{\max}", "largest bubble fraction one accepts", defined_in=CHAPTER
)
t_fwd = _decl(
    "t_fwd_stage",
    r"t_{\mathrm{F}}",
    "time of one microbatch's forward pass through one pipeline stage",
    _S,
    defined_in=CHAPTER,
)
t_bwd = _decl(
    "t_bwd_stage",
    r"t_{\mathrm{B}}",
    "time of one microbatch's backward pass through one pipeline stage",
    _S,
    defined_in=CHAPTER,
)
t_chunk = _decl(
    "t_chunk",
    r"t_{\mathrm{chunk}}",
    "time of one microbatch's forward and backward pass through one model chunk",
    _S,
    defined_in=CHAPTER,
)
t_busy = _decl(
    "t_busy",
    r"t_{\mathrm{busy}}",
    "time one GPU computes during a pipeline flush",
    _S,
    defined_in=CHAPTER,
)
t_flush = _decl(
    "t_flush",
    r"t_{\mathrm{flush}}",
    "time of a pipeline flush: from the first forward to the last backward of a step",
    _S,
    defined_in=CHAPTER,
)
n_tok = _decl(
    "n_tok_PP",
    r"n_{\mathrm{tok}}",
    "tokens whose activations cross a stage boundary",
    defined_in=CHAPTER,
)

# --- Definitions and assumptions, each a named substitution ---------------------------------
IDLE_SHARE = sp.Eq(bubble, (t_flush - t_busy) / t_flush)

BUSY_1F1B = Substitution(
    "every stage runs the forward and backward pass of every microbatch once",
    {t_busy: n_micro * (t_fwd + t_bwd)},
)
FLUSH_1F1B = Substitution(
    "1F1B: the last stage computes without a gap between filling and draining",
    {t_flush: (n_pp - 1) * t_fwd + n_micro * (t_fwd + t_bwd) + (n_pp - 1) * t_bwd},
    kind="assumption",
    source="narayanan2021megatron",
)
BUSY_INTERLEAVED = Substitution(
    "every GPU runs every microbatch through each of its $v$ chunks",
    {t_busy: interleave * n_micro * t_chunk},
)
FLUSH_INTERLEAVED = Substitution(
    "interleaved 1F1B: fill and drain in chunk slots, plus $z$ chunk slots of waiting",
    {t_flush: (interleave * n_micro + n_pp - 1 + z_wait) * t_chunk},
    kind="assumption",
    source="narayanan2021megatron",
)
WAITS = Substitution(
    "waits at changes of chunk",
    {z_wait: (interleave - 1) * sp.Max(0, n_pp - n_micro)},
)
NO_INTERLEAVING = Substitution("no interleaving", {interleave: 1}, kind="assumption")
ENOUGH_MICROBATCHES = Substitution(
    "at least as many microbatches as stages, as in every configuration the search tries",
    {z_wait: 0},
    kind="assumption",
    source="erdil2024datamovement",
)
AT_THRESHOLD = Substitution(
    "the bubble at the largest fraction accepted", {bubble: bubble_max}, kind="assumption"
)


# --- Derivations -------------------------------------------------------------------------------
# Inline math for the step sentences, in the registered notation.
_P = r"$N_{\mathrm{PP}}$"
_P1 = r"$N_{\mathrm{PP}} - 1$"


@register
def bubble_1f1b_derivation() -> Derivation:
    """The bubble of plain 1F1B, ``(N_PP - 1) / (N_PP - 1 + m)``, from the slots of a flush."""
    f1 = IDLE_SHARE
    f2 = BUSY_1F1B.apply(f1)
    f3 = FLUSH_1F1B.apply(f2)
    f4 = sp.Eq(bubble, (n_pp - 1) / (n_pp - 1 + n_micro))
    return derivation(
        "pipeline-bubble-1f1b",
        "The bubble of 1F1B",
        [
            Step(
                "A GPU's bubble is the share of a flush (one step's forward and backward passes "
                "of all $m$ microbatches, ended by a synchronous optimizer step) in which it "
                "computes nothing: the flush less its busy time, over the flush.",
                f1,
            ),
            Step(
                "Every stage holds the same number of layers and sees every microbatch once "
                "forward and once backward, so every GPU is busy for the same time.",
                f2,
                using=BUSY_1F1B,
            ),
            Step(
                f"Count the slots of the last stage.  It idles for {_P1} forward slots while the "
                "first microbatch's forward pass crosses the stages before it (the fill).  From "
                "then on 1F1B keeps it busy: it runs each microbatch's backward pass right after "
                "its forward pass, and the next microbatch has arrived by then, so its $m$ "
                "forward and $m$ backward slots follow without a gap.  After its last backward "
                f"slot, that backward pass still has to cross the {_P1} stages before it (the "
                "drain).",
                f3,
                using=FLUSH_1F1B,
            ),
            Step(
                f"The slot lengths cancel: the idle time is {_P1} forward and {_P1} backward "
                "slots, in the same proportion as the work, so the bubble depends on the numbers "
                "of stages and microbatches only, whatever the backward pass costs relative to "
                "the forward pass.",
                f4,
            ),
        ],
        chapter=CHAPTER,
        notes=(
            "Narayanan et al. (2021) state the same bubble as a ratio to the ideal time, "
            "(N_PP - 1) / m; Erdil & Schneider-Joseph (2024) use the share of the flush.",
        ),
    )


@register
def bubble_interleaved_derivation() -> Derivation:
    """The bubble of interleaved 1F1B, with the waits of few microbatches."""
    f1 = IDLE_SHARE
    f2 = BUSY_INTERLEAVED.apply(f1)
    f3 = FLUSH_INTERLEAVED.apply(f2)
    f4 = sp.Eq(bubble, (z_wait + n_pp - 1) / (z_wait + n_pp - 1 + interleave * n_micro))
    f5 = WAITS.apply(f4)
    f6 = NO_INTERLEAVING.apply(f5)
    return derivation(
        "pipeline-bubble-interleaved",
        "The bubble of interleaved 1F1B",
        [
            Step("Start again from the idle share of a flush.", f1),
            Step(
                "With interleaving a GPU holds $v$ chunks of its layers, assigned round-robin, "
                "so a microbatch passes every GPU $v$ times.  A chunk slot, one microbatch's "
                "forward and backward pass through one chunk, is a $v$-th of a stage's: each GPU "
                "fills $v m$ of them.",
                f2,
                using=BUSY_INTERLEAVED,
            ),
            Step(
                f"The fill now takes {_P1} chunk forwards before the last GPU starts, and the "
                f"drain {_P1} chunk backwards: interleaving shrinks both by $v$.  With fewer "
                "microbatches than stages there is a second kind of idle slot, $z$ in all: a "
                "GPU finishes its $m$ microbatches on one chunk before the first of them has "
                f"come back round the ring of {_P} GPUs to its next chunk.",
                f3,
                using=FLUSH_INTERLEAVED,
            ),
            Step("The chunk slot cancels.", f4),
            Step(
                f"The first microbatch returns to a GPU {_P} chunk slots after it left it, "
                "slots in which the GPU had only $m$ microbatches to run: it waits "
                r"$N_{\mathrm{PP}} - m$ slots when that is positive, at each of the $v - 1$ "
                "changes of chunk, in the forward passes and again in the backward passes.  "
                "This is the paper's formula.",
                f5,
                using=WAITS,
            ),
            Step(
                "With one chunk per GPU there are no changes of chunk, $z$ vanishes and this is "
                "the plain 1F1B bubble, {eq}`pipeline-bubble-1f1b-4`.",
                f6,
                using=NO_INTERLEAVING,
            ),
        ],
        chapter=CHAPTER,
    )


@register
def microbatches_for_bubble_derivation() -> Derivation:
    """How many microbatches keep the bubble below a given fraction."""
    f1 = bubble_interleaved_derivation().steps[3].expr
    f2 = ENOUGH_MICROBATCHES.apply(f1)
    f3 = AT_THRESHOLD.apply(f2)
    threshold = (n_pp - 1) * (1 - bubble_max) / (interleave * bubble_max)
    f4 = sp.Eq(n_micro, threshold)
    f5 = NO_INTERLEAVING.apply(f4)
    return derivation(
        "pipeline-microbatches",
        "Microbatches for a given bubble",
        [
            Step(
                "Start from the interleaved bubble with its waits $z$, "
                "{eq}`pipeline-bubble-interleaved-4`.",
                f1,
            ),
            Step(
                f"The search only tries microbatch counts of at least {_P}, so no GPU waits at "
                "a change of chunk.",
                f2,
                using=ENOUGH_MICROBATCHES,
            ),
            Step(
                "The bubble falls as $m$ grows, so it stays below a target exactly when $m$ "
                "exceeds the count at which the two are equal.",
                f3,
                using=AT_THRESHOLD,
            ),
            Step(
                "Solving for $m$: the microbatches needed grow with the stages and fall with "
                "the target and with the interleaving factor.",
                f4,
                solve_for=n_micro,
            ),
            Step(
                "Without interleaving a pipeline needs about "
                r"$(N_{\mathrm{PP}} - 1) / f_{\max}$ microbatches: a pipeline with many more "
                "stages than microbatches idles most of the time.",
                f5,
                using=NO_INTERLEAVING,
            ),
        ],
        chapter=CHAPTER,
    )


@register
def flush_time_derivation() -> Derivation:
    """The flush lasts the busy time divided by one less the bubble."""
    f1 = IDLE_SHARE
    f2 = sp.Eq(t_flush, t_busy / (1 - bubble))
    return derivation(
        "pipeline-flush-time",
        "The time of a flush",
        [
            Step("The bubble is the idle share of a flush.", f1),
            Step(
                "So a flush takes the compute time of one GPU divided by one less the bubble: "
                "this is how the bubble enters the step time.",
                f2,
                solve_for=t_flush,
            ),
        ],
        chapter=CHAPTER,
    )


def bubble_expression() -> sp.Expr:
    """The paper's bubble fraction of (interleaved) 1F1B in ``N_PP, m, v``: step 5 of the
    ``pipeline-bubble-interleaved`` derivation."""
    return bubble_interleaved_derivation().steps[4].expr.rhs


# --- Cost formulas -----------------------------------------------------------------------------
# Bytes crossing one stage boundary for n_tok tokens: d_model words each way per token.
BOUNDARY_BYTES = BOUNDARY_PASSES * word * s.d_model * n_tok
# Chunk boundaries one microbatch crosses in each direction: v N_PP chunks in a row.
CROSSINGS = interleave * n_pp - 1


@cache
@formula_cache.expressions
def _cost_formulas() -> dict[str, tuple[sp.Expr, sp.Expr]]:
    return {
        "boundary_bytes": (BOUNDARY_BYTES, u.byte),
        "crossings": (CROSSINGS, u.one),
        "bubble": (bubble_expression(), u.one),
        "flush": (flush_time_derivation().result.rhs, u.second),
    }


#: Each pipeline cost by name: (expression, unit), unit-checked in the tests; built on first use
#: (:mod:`dmlimits.core.lazy`).
COST_FORMULAS: dict[str, tuple[sp.Expr, sp.Expr]]
__getattr__ = lazy.attributes(__name__, COST_FORMULAS=_cost_formulas)

# The summary page's row (dmlimits.book.summary): bytes across one stage boundary in a step for the
# n_tok tokens of a pipeline, and the latency a step pays, one message per boundary and direction.
SUMMARY = {
    "parallelism": "pipeline",
    "what_moves": (
        "each token's activations forward and their gradients backward across every stage "
        "boundary (every chunk boundary with interleaving), point to point"
    ),
    "volume": BOUNDARY_BYTES,
    "volume_per": "stage boundary, for the tokens that cross it",
    "latency_per": "step (one microbatch's crossings)",
    "link": "InfiniBand between nodes (NVLink for consecutive stages that share a node)",
    "overlaps_compute": True,
    "latency": BOUNDARY_PASSES * CROSSINGS * _lat_level,
}


# --- Checks --------------------------------------------------------------------------------

def check_zero_bubble(n_pp: Any, m: Any, v: Any = 1) -> None:
    """Raise ValueError unless ZB-H2 applies: ``v = 1`` and ``m >= 2 N_PP`` (Qi et al. 2024)."""
    p, mm, vv = counts("n_pp", n_pp), counts("m", m), counts("v", v)
    p, mm, vv = np.broadcast_arrays(p, mm, vv)
    if np.any(vv != 1):
        bad = vv[vv != 1].flat[0]
        raise ValueError(
            f"v: got {shown(bad)} with zero_bubble=True; zero bubble (ZB-H2) expects no "
            "interleaving, v = 1"
        )
    need = ZERO_BUBBLE_MICROBATCHES_PER_STAGE * p
    if np.any(mm < need):
        i = np.flatnonzero((mm < need).ravel())[0]
        raise ValueError(
            f"m: got {shown(mm.flat[i])} microbatches with n_pp = {shown(p.flat[i])} and "
            f"zero_bubble=True; zero bubble (ZB-H2) expects m >= "
            f"{ZERO_BUBBLE_MICROBATCHES_PER_STAGE} * n_pp = {shown(need.flat[i])}"
        )


# --- Numeric functions, lambdified from the expressions above -------------------------------
def _numeric_build(what: str) -> tuple[tuple, sp.Expr]:
    """The arguments and the expression of the numeric function ``what``."""
    if what == "bubble":
        return (n_pp, n_micro, interleave), bubble_expression()
    if what == "microbatches":
        rhs = microbatches_for_bubble_derivation().steps[3].expr.rhs
        return (n_pp, bubble_max, interleave), rhs
    if what == "boundary":
        return (s.d_model, n_tok, word), BOUNDARY_BYTES
    if what == "crossings":
        return (n_pp, interleave), CROSSINGS
    if what == "flush":
        return (t_busy, bubble), flush_time_derivation().result.rhs
    raise KeyError(what)


@cache
def _numeric(what: str):
    """The numeric function ``what``, lambdified from its derivation, kept between processes
    (:func:`dmlimits.core.formula_cache.lambdified`: a process that reads it derives nothing)."""
    return formula_cache.lambdified(f"pipeline.{what}", lambda: _numeric_build(what))


def bubble_fraction(n_pp: Any, m: Any, v: Any = 1, zero_bubble: bool = False) -> np.ndarray | float:
    """The share of a flush each GPU idles: ``(z + N_PP - 1) / (z + N_PP - 1 + v m)`` with
    ``z = (v - 1) max(0, N_PP - m)`` for 1F1B (interleaved when ``v > 1``; Narayanan et al.
    2021), and 0 for zero bubble (ZB-H2, Qi et al. 2024), which must have ``v = 1`` and
    ``m >= 2 N_PP``.  Erdil & Schneider-Joseph (2024); the ``pipeline-bubble-interleaved``
    derivation.  Arguments broadcast as numpy arrays; a float comes back for scalars.
    """
    zero_bubble = flag("zero_bubble", zero_bubble)
    p, mm, vv = counts("n_pp", n_pp), counts("m", m), counts("v", v)
    shape = np.broadcast_shapes(p.shape, mm.shape, vv.shape)
    if zero_bubble:
        check_zero_bubble(p, mm, vv)
        return _out(0.0, shape)
    return _out(_numeric("bubble")(p, mm, vv), shape)


def flush_time(busy: Any, fraction: Any) -> np.ndarray | float:
    """The time of a flush whose GPUs compute for ``busy`` seconds and idle a share ``fraction``
    of it: ``t_busy / (1 - f)`` (the ``pipeline-flush-time`` derivation).  With ``busy = 1`` it is
    the factor by which the bubble stretches the step's compute."""
    b = numbers("busy", busy, strict=True)
    try:
        f = np.asarray(fraction, dtype=float)
    except (TypeError, ValueError):
        raise ValueError(f"fraction: got {fraction!r:.80}; expected a number in [0, 1)") from None
    ok = np.isfinite(f) & (f >= 0) & (f < 1)
    if not np.all(ok):
        bad = f[~ok].flat[0] if f.ndim else f
        raise ValueError(f"fraction: got {shown(bad)}; expected a number in [0, 1)")
    shape = np.broadcast_shapes(b.shape, f.shape)
    return _out(_numeric("flush")(b, f), shape)


def microbatches_for_bubble(n_pp: Any, max_fraction: Any, v: Any = 1) -> np.ndarray | float:
    """The microbatch count at which 1F1B's bubble equals ``max_fraction`` (real, not rounded):
    ``(N_PP - 1)(1 - f_max) / (v f_max)``; any ``m`` above it does better.  Valid where that
    count is at least ``N_PP`` (no waits at changes of chunk), and always for ``v = 1``.  The
    ``pipeline-microbatches`` derivation.
    """
    p, vv = counts("n_pp", n_pp), counts("v", v)
    f = numbers("max_fraction", max_fraction, strict=True)
    if np.any(f >= 1):
        raise ValueError(
            f"max_fraction: got {shown(f[f >= 1].flat[0] if f.ndim else f)}; "
            "expected a fraction between 0 and 1"
        )
    shape = np.broadcast_shapes(p.shape, f.shape, vv.shape)
    return _out(_numeric("microbatches")(p, f, vv), shape)


def interleaving_factor(n_layers: Any, n_pp: Any) -> np.ndarray | float:
    """The paper's interleaving: ``v = L / N_PP`` chunks per GPU when ``N_PP > 1``, else 1.

    ``N_PP`` must divide ``L`` (every stage holds whole blocks).  Erdil & Schneider-Joseph
    (2024) interleave fully (one block per chunk) rather than search ``v``.
    """
    layers, p = counts("n_layers", n_layers), counts("n_pp", n_pp)
    layers, p = np.broadcast_arrays(layers, p)
    if np.any(np.mod(layers, p) != 0):
        i = np.flatnonzero((np.mod(layers, p) != 0).ravel())[0]
        raise ValueError(
            f"n_pp: got {shown(p.flat[i])}, which does not divide n_layers = "
            f"{shown(layers.flat[i])}; expected a divisor of the number of layers"
        )
    return _out(np.where(p > 1, layers / p, 1.0), layers.shape)


def boundary_crossings(n_pp: Any, v: Any = 1) -> np.ndarray | float:
    """Chunk boundaries one microbatch crosses in each direction, ``v N_PP - 1``: with chunks
    assigned round-robin every one of them is a hop to the next GPU."""
    p, vv = counts("n_pp", n_pp), counts("v", v)
    shape = np.broadcast_shapes(p.shape, vv.shape)
    return _out(_numeric("crossings")(p, vv), shape)


def level_crossings(pp_intra: Any, pp_inter: Any, v: Any = 1) -> tuple[Any, Any]:
    """Chunk boundaries a microbatch crosses in each direction inside nodes and between nodes,
    for ``pp_intra`` consecutive stages in each of ``pp_inter`` nodes and ``v`` chunks per GPU.

    Each of the ``v`` passes through the stages hops ``pp_intra - 1`` times inside each node
    and ``pp_inter - 1`` times between nodes, and the ``v - 1`` wraps from the last stage back
    to the first go between nodes when there is more than one node.  The two add up to
    :func:`boundary_crossings`, ``v N_PP - 1``.
    """
    p0 = counts("pp_intra", pp_intra)
    p1 = counts("pp_inter", pp_inter)
    vv = counts("v", v)
    shape = np.broadcast_shapes(p0.shape, p1.shape, vv.shape)
    wraps = vv - 1
    many = p1 > 1
    within = vv * p1 * (p0 - 1) + np.where(many, 0, wraps)
    across = vv * (p1 - 1) + np.where(many, wraps, 0)
    return _out(within, shape), _out(across, shape)


def boundary_bytes(d_model: Any, tokens: Any, word_bytes: Any) -> np.ndarray | float:
    """Bytes ``tokens`` tokens move across one stage boundary in a step, forward and backward:
    ``2 w d_model n_tok`` (activations forward, their gradients backward; Erdil &
    Schneider-Joseph 2024).  Arguments broadcast as numpy arrays."""
    d = numbers("d_model", d_model, strict=True)
    t = numbers("tokens", tokens, strict=True)
    w = numbers("word_bytes", word_bytes, strict=True)
    shape = np.broadcast_shapes(d.shape, t.shape, w.shape)
    return _out(_numeric("boundary")(d, t, w), shape)


@cache
def _divisors(n: int) -> tuple[int, ...]:
    """The divisors of ``n``, ascending: those of its odd part times each power of two (the
    batches of the sweep are ``f 2^i`` with a small odd ``f``, so this is quick)."""
    twos = (n & -n).bit_length() - 1
    odd = n >> twos
    small = [k for k in range(1, math.isqrt(odd) + 1) if odd % k == 0]
    odd_divisors = {*small, *(odd // k for k in small)}
    return tuple(sorted(d << j for d in odd_divisors for j in range(twos + 1)))


ZERO_BUBBLE_RULES = ("2n", "2n-1")
MICROBATCH_UNITS = ("token", "sequence")
#: The rules of the search that this chapter derives and calls the default (the scenario
#: schema's defaults are these; tests/test_choices.py checks both and that the search follows).
CHAPTER_RULES = {
    "search.microbatch_unit": "token",
    "search.zero_bubble": True,
    "search.zero_bubble_min": "2n",
    "search.microbatch_candidates": SEARCH_MICROBATCH_COUNT,
}


def least_microbatches(n_pp: Any, zero_bubble: bool = False, rule: str = "2n") -> int:
    """The fewest microbatches a schedule of ``n_pp`` stages may run: ``N_PP`` for 1F1B (fewer
    would leave a stage idle even mid-step); for zero bubble ``2 N_PP`` (``rule="2n"``, the
    default: two per stage, so that the weight gradients pending fill the drain and hide the
    pipeline's latency; the authors' final code) or ``2 N_PP - 1`` (``"2n-1"``: the fewest
    with which the ZB-H2 schedule itself runs without idling; Qi et al. 2024)."""
    p = checks.whole("n_pp", n_pp)
    zero_bubble = flag("zero_bubble", zero_bubble)
    if rule not in ZERO_BUBBLE_RULES:
        raise ValueError(f"rule: got {rule!r}; expected one of {', '.join(ZERO_BUBBLE_RULES)}")
    if not zero_bubble:
        return p
    return ZERO_BUBBLE_MICROBATCHES_PER_STAGE * p - (1 if rule == "2n-1" else 0)


def unit_tokens(unit: str, sequence_length: Any) -> int:
    """Tokens in one unit of a microbatch: ``"token"`` (the default: the model has no attention,
    so a token's work does not depend on the rest of its sequence and a microbatch can be any
    whole number of tokens, as in the authors' final code) or ``"sequence"``."""
    if unit not in MICROBATCH_UNITS:
        raise ValueError(f"unit: got {unit!r}; expected one of {', '.join(MICROBATCH_UNITS)}")
    return 1 if unit == "token" else checks.whole("sequence_length", sequence_length)


@cache
def _smallest_divisors(x: int, least: int, count: int) -> tuple[int, ...]:
    return tuple(d for d in _divisors(x) if d >= least)[:count]


def valid_microbatches(
    n_pp: Any, units: Any, zero_bubble: bool = False, count: Any = SEARCH_MICROBATCH_COUNT,
    rule: str = "2n",
) -> tuple[int, ...]:  # fmt: skip
    """The microbatch counts the search tries: the ``count`` smallest ``m`` that divide
    ``units`` with ``m`` at least :func:`least_microbatches` (``N_PP``, or for zero bubble
    ``2 N_PP`` or ``2 N_PP - 1`` by ``rule``).  Empty when there is none.

    ``units`` is what one pipeline handles per step, in the microbatch unit (tokens by
    default, :func:`unit_tokens`): the batch over the experts and the data-parallel degree.
    Erdil & Schneider-Joseph (2024); the authors' final code, ``optimal_parallelism.ipynb``.
    """
    n = checks.whole("units", units)
    k = checks.whole("count", count)
    return _smallest_divisors(n, least_microbatches(n_pp, zero_bubble, rule), k)


def deepest_pipeline(n_layers: Any, units: Any, zero_bubble: bool = True, rule: str = "2n") -> int:
    """The most stages one pipeline can have: the largest power of two ``N_PP`` that divides
    ``n_layers`` and leaves a valid microbatch count (:func:`valid_microbatches`) for a pipeline
    handling ``units`` per step; 1 when no deeper pipeline has one.

    Powers of two because the paper's clusters are ``S 2^i`` GPUs, so for a dense model every
    parallelism degree is a power of two (Erdil & Schneider-Joseph 2024; the authors' final code,
    ``optimal_parallelism.ipynb``).
    """
    layers = checks.whole("n_layers", n_layers)
    n = checks.whole("units", units)
    zero_bubble = flag("zero_bubble", zero_bubble)
    p = layers & -layers  # the largest power of two dividing the layers
    while p > 1 and not valid_microbatches(p, n, zero_bubble=zero_bubble, count=1, rule=rule):
        p //= 2
    return p


# --- Schedules, slot by slot -------------------------------------------------------------------
# The closed forms above count slots.  The functions below lay the slots out on each GPU's
# timeline, so that the book can draw a schedule and set orders of passes against the formula.
# tests/test_pipeline.py checks them against a list scheduler written there independently.

# In the paper's accounting a forward pass is one matmul per weight matrix and a backward pass two
# (activation gradient and weight gradient): in forward slots, a backward pass lasts two.
BACKWARD_SLOTS = 2
#: The orders of passes of a schedule with one flush per step.
SCHEDULE_ORDERS = ("1f1b", "interleaved", "breadth-first")


@dataclass(frozen=True, order=True)
class ScheduledPass:
    """One pass of one microbatch through one chunk, placed on its GPU's timeline.

    ``kind`` is ``"F"`` (forward), ``"B"`` (backward; in zero bubble only its activation-gradient
    half) or ``"W"`` (the weight-gradient half, zero bubble only).  Chunk ``k`` lives on GPU
    ``k mod N_PP``.  Times are in slots of one forward pass through one chunk (fractions of a
    slot when messages pay a latency).
    """

    start: float
    gpu: int
    kind: str
    chunk: int
    micro: int
    end: float


class ScheduleDeadlock(ValueError):
    """An order asks a GPU for a pass whose inputs can never arrive."""


@dataclass(frozen=True)
class Schedule:
    """Every pass of a schedule, with its order's name and sizes (``steps`` flushes or steps)."""

    order: str
    n_pp: int
    m: int
    v: int
    passes: tuple[ScheduledPass, ...]
    steps: int = 1

    @property
    def makespan(self) -> float:
        """Slots from the first pass to the end of the last."""
        return max(p.end for p in self.passes)

    def busy(self, gpu: int) -> float:
        """Slots in which ``gpu`` computes."""
        return self._busy[gpu] if 0 <= gpu < self.n_pp else 0

    @cached_property
    def _busy(self) -> list[float]:
        """Each GPU's busy slots, added pass by pass in the order of ``passes`` (one walk over
        the passes, not one for each GPU)."""
        sums: list[float] = [0] * self.n_pp
        for p in self.passes:
            sums[p.gpu] += p.end - p.start
        return sums

    @property
    def bubble(self) -> Fraction:
        """The idle share of the makespan, over all GPUs: what the bubble formulas count."""
        total = self.n_pp * self.makespan
        return Fraction(total - sum(self.busy(g) for g in range(self.n_pp))) / Fraction(total)

    def gaps(self, gpu: int) -> float:
        """Idle slots between ``gpu``'s first pass and the end of its last."""
        mine = [p for p in self.passes if p.gpu == gpu]
        return max(p.end for p in mine) - min(p.start for p in mine) - self.busy(gpu)


def order_1f1b(n_pp: int, m: int) -> list[list[tuple[str, int, int]]]:
    """PipeDream-Flush: stage ``j`` runs ``N_PP - j - 1`` forward passes, then alternates."""
    orders = []
    for stage in range(n_pp):
        warmup = min(n_pp - stage - 1, m)
        order = [("F", stage, i) for i in range(warmup)]
        for i in range(m - warmup):
            order += [("F", stage, warmup + i), ("B", stage, i)]
        orders.append(order + [("B", stage, i) for i in range(m - warmup, m)])
    return orders


def order_interleaved(n_pp: int, v: int, m: int) -> list[list[tuple[str, int, int]]]:
    """Megatron-LM's interleaved 1F1B: microbatches in groups of ``N_PP`` (one group of ``m``
    when ``m < N_PP``), each group through chunk 0, then chunk 1, ...; backward passes in the same
    groups, chunks reversed; ``2 (N_PP - j - 1) + (v - 1) g`` forward passes of warm-up on GPU
    ``j``, then one forward and one backward alternately.  Megatron-LM defines it for ``m`` a
    multiple of ``N_PP``; a last partial group is run as it comes."""
    group = min(n_pp, m)
    groups = [range(a, min(a + group, m)) for a in range(0, m, group)]
    forward = [(c, i) for g in groups for c in range(v) for i in g]
    backward = [(c, i) for g in groups for c in reversed(range(v)) for i in g]
    total = v * m
    orders = []
    for gpu in range(n_pp):
        warmup = min(2 * (n_pp - gpu - 1) + (v - 1) * group, total)
        fwd = [("F", c * n_pp + gpu, i) for c, i in forward]
        bwd = [("B", c * n_pp + gpu, i) for c, i in backward]
        order = fwd[:warmup]
        for a in range(total - warmup):
            order += [fwd[warmup + a], bwd[a]]
        orders.append(order + bwd[total - warmup :])
    return orders


def order_breadth_first(n_pp: int, v: int, m: int) -> list[list[tuple[str, int, int]]]:
    """Breadth-first interleaving (Lamy-Poirier 2023): every forward pass chunk by chunk, then
    every backward pass, chunks reversed."""
    return [
        [("F", c * n_pp + gpu, i) for c in range(v) for i in range(m)]
        + [("B", c * n_pp + gpu, i) for c in reversed(range(v)) for i in range(m)]
        for gpu in range(n_pp)
    ]


def list_schedule(
    orders: list[list[tuple[str, int, int]]], n_chunks: int, durations: dict[str, float],
    latency: float = 0, per_chunk: list[dict[str, float]] | None = None, listed: bool = True,
) -> tuple[ScheduledPass, ...] | float:  # fmt: skip
    """Each GPU runs its passes in its order, each as soon as the GPU is free and its inputs have
    arrived: an input from another GPU arrives ``latency`` slots after it ends (a message across
    a stage boundary).  Chunk ``k``'s passes last ``per_chunk[k]`` where it is given,
    ``durations`` otherwise.  Raises :class:`ScheduleDeadlock` when no GPU can go on.  With
    ``listed`` false, only the makespan: the end of the last pass, which is the latest time a
    GPU is free (a GPU's passes end in its order), the passes neither sorted nor made.

    A pass's inputs: a forward pass through chunk ``k > 0`` waits for the forward pass of the
    same microbatch through chunk ``k - 1``; a backward pass for the forward pass through its
    own chunk, then (below the last chunk) the backward pass through chunk ``k + 1``; a weight
    gradient for the backward pass through its own chunk.  A pass starts at the latest of its
    GPU's free time and its inputs' arrivals.  (Written out rather than listed per pass, and
    the passes kept as plain tuples until they are sorted, so that no list of inputs is built
    for each pass: the largest schedule of the pipeline chapter has 110,592 passes;
    ``tests/test_pipeline.py`` compares this with the rule written as such lists.)"""
    lasts = per_chunk or [durations] * n_chunks
    n_pp = len(orders)
    last = n_chunks - 1
    ends: dict[tuple[str, int, int], float] = {}
    placed: list[tuple[float, int, str, int, int, float]] = []
    position, free = [0] * n_pp, [0] * n_pp
    remaining = sum(map(len, orders))
    while remaining:
        progressed = False
        for gpu, order in enumerate(orders):
            pos, length = position[gpu], len(order)
            while pos < length:
                kind, chunk, micro = order[pos]
                start = free[gpu]  # then each input's arrival in turn, the first of equals kept
                if kind == "F":
                    if chunk > 0:
                        arrival = ends.get(("F", chunk - 1, micro))
                        if arrival is None:
                            break
                        arrival += latency if (chunk - 1) % n_pp != gpu else 0
                        if arrival > start:
                            start = arrival
                elif kind == "B":
                    arrival = ends.get(("F", chunk, micro))
                    later = ends.get(("B", chunk + 1, micro)) if chunk < last else 0
                    if arrival is None or later is None:
                        break
                    arrival += latency if chunk % n_pp != gpu else 0
                    if arrival > start:
                        start = arrival
                    if chunk < last:
                        later += latency if (chunk + 1) % n_pp != gpu else 0
                        if later > start:
                            start = later
                else:
                    arrival = ends.get(("B", chunk, micro))
                    if arrival is None:
                        break
                    arrival += latency if chunk % n_pp != gpu else 0
                    if arrival > start:
                        start = arrival
                end = start + lasts[chunk][kind]
                ends[(kind, chunk, micro)] = end
                placed.append((start, gpu, kind, chunk, micro, end))
                free[gpu] = end
                pos += 1
                remaining -= 1
                progressed = True
            position[gpu] = pos
        if not progressed:
            raise ScheduleDeadlock(
                f"the order stalls with passes {position} of {[len(o) for o in orders]} placed"
            )
    if not listed:
        return max(free)
    # The dataclass's own order (its fields in turn): the tuples sorted, then made passes.
    placed.sort()
    return tuple(ScheduledPass(*p) for p in placed)


def _numbers(value: Any) -> bool:
    """Whether ``value`` is a sequence (or array) of real numbers, booleans excluded."""
    if isinstance(value, str | bytes):
        return False
    try:
        items = list(value)
    except TypeError:
        return False
    return all(
        not isinstance(x, bool) and isinstance(x, int | float | np.integer | np.floating)
        for x in items
    )


def _slots(name: str, value: Any) -> float:
    """A non-negative number of slots, or ValueError naming it."""
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise ValueError(f"{name}: got {value!r:.80}; expected a number of slots, at least 0")
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(f"{name}: got {value!r}; expected a finite number of slots, at least 0")
    return value


def schedule(
    n_pp: Any, m: Any, v: Any = 1, order: str = "1f1b", backward: Any = BACKWARD_SLOTS,
    latency: Any = 0, collective: Any = 0, head: Any = 0, work: Any = None,
) -> Schedule:  # fmt: skip
    """Lay out one flush of ``order`` for ``N_PP`` GPUs, ``m`` microbatches and ``v`` chunks per
    GPU: every pass of every microbatch, as early as its inputs and its GPU allow.

    ``order`` is ``"1f1b"`` (PipeDream-Flush, ``v = 1``; Narayanan et al. 2021),
    ``"interleaved"`` (Megatron-LM's interleaved 1F1B; Narayanan et al. 2021) or
    ``"breadth-first"`` (all forward passes, chunk by chunk, then all backward passes).  A
    forward pass through one chunk takes one slot and a backward pass ``backward`` slots.
    Raises :class:`ScheduleDeadlock` (a ValueError) where the order cannot finish: Megatron-LM's
    order with a last partial group of microbatches can stall.

    Latency (in slots): every message across a stage boundary arrives ``latency`` after the
    pass that sends it ends, and every pass also waits ``collective`` for its tensor-parallel
    collectives (their latency; their bandwidth hides in the pass).  With both zero the times
    are whole slots.

    The last chunk can do more work than the others: its forward and backward passes take
    ``1 + head`` times as long (``head``, a share of a chunk's work: the output layer and the
    loss, which run on the last stage).  ``work``, where given, is each chunk's work in chunks'
    (``v N_PP`` numbers, at least 0; chunk ``k`` on GPU ``k mod N_PP``): a split whose chunks
    differ, each pass that many slots (backward, ``backward`` times as many).
    """
    p, mm, vv, passes = _laid_out(n_pp, m, v, order, backward, latency, collective, head, work)
    return Schedule(order, p, mm, vv, passes)


def makespan(
    n_pp: Any, m: Any, v: Any = 1, order: str = "1f1b", backward: Any = BACKWARD_SLOTS,
    latency: Any = 0, collective: Any = 0, head: Any = 0, work: Any = None,
) -> float:  # fmt: skip
    """``schedule(...).makespan`` for the same arguments (:func:`schedule`), the same errors
    included, without making the schedule's passes: where only the length of a flush is wanted
    (:func:`dmlimits.measured.operations.pipeline_stretch` asks for many), the passes are
    neither listed nor sorted, which is most of the work of laying a flush out."""
    return _laid_out(n_pp, m, v, order, backward, latency, collective, head, work, listed=False)[3]


def _laid_out(
    n_pp: Any, m: Any, v: Any, order: str, backward: Any, latency: Any, collective: Any,
    head: Any, work: Any, listed: bool = True,
) -> tuple[int, int, int, Any]:  # fmt: skip
    """The arguments of :func:`schedule` checked, and its passes laid out: ``N_PP``, ``m`` and
    ``v`` as integers, then the passes (``listed``) or their makespan."""
    p, mm, vv = checks.whole("n_pp", n_pp), checks.whole("m", m), checks.whole("v", v)
    b = checks.whole("backward", backward)
    lat, coll = _slots("latency", latency), _slots("collective", collective)
    if (
        isinstance(head, bool)
        or not isinstance(head, int | float | np.integer | np.floating)
        or not (math.isfinite(head) and head >= 0)
    ):
        raise ValueError(f"head: got {head!r:.80}; expected the last chunk's extra work as a "
                         "finite share of a chunk's, at least 0")  # fmt: skip
    if order not in SCHEDULE_ORDERS:
        raise ValueError(f"order: got {order!r}; expected one of {', '.join(SCHEDULE_ORDERS)}")
    if work is not None:
        if not isinstance(work, str | bytes | np.ndarray):
            try:
                work = list(work)  # a generator is read once
            except TypeError:
                pass
        shares = np.asarray(work, dtype=float) if _numbers(work) else None
        if (
            shares is None
            or shares.shape != (vv * p,)
            or not np.all(np.isfinite(shares) & (shares >= 0))
        ):
            raise ValueError(f"work: got {work!r:.80}; expected {vv * p} finite numbers (v N_PP "
                             "chunks' work, in chunks'), each at least 0")  # fmt: skip
    if order == "1f1b" and vv != 1:
        raise ValueError(
            f"v: got {vv} with order='1f1b'; expected 1 (use 'interleaved' or 'breadth-first')"
        )
    build = {
        "1f1b": lambda: order_1f1b(p, mm),
        "interleaved": lambda: order_interleaved(p, vv, mm),
        "breadth-first": lambda: order_breadth_first(p, vv, mm),
    }[order]
    try:
        # Whole slots stay whole where the chunks are alike.
        per_chunk = None
        if head or work is not None:
            scale = [1.0] * (vv * p) if work is None else [float(x) for x in shares]
            scale[-1] *= 1 + head
            per_chunk = [{"F": x + coll, "B": b * x + coll} for x in scale]
        durations = {"F": 1 + coll, "B": b + coll}
        laid = list_schedule(build(), vv * p, durations, lat, per_chunk, listed)
    except ScheduleDeadlock as err:
        raise ScheduleDeadlock(
            f"order={order!r} with n_pp={p}, m={mm}, v={vv}: {err}; Megatron-LM's interleaved "
            "order expects m to be a multiple of n_pp (or at most n_pp)"
        ) from None
    return p, mm, vv, laid


def schedule_zero_bubble(n_pp: Any, m: Any, steps: Any = 2, latency: Any = 0) -> Schedule:
    """Lay out ``steps`` optimizer steps of ZB-H2 (Qi et al. 2024) back to back, greedily.

    The backward pass is split into its activation-gradient half ``B`` and its weight-gradient
    half ``W``; forward, ``B`` and ``W`` passes take one slot each (two of a layer's six matmuls
    each).  In every slot each stage runs, by preference, the next ``B`` whose inputs are ready,
    else the next forward pass if its input is ready and fewer than ``2 N_PP - 1`` microbatches
    await their ``W`` (ZB-H2's memory), else a pending ``W``.  A stage starts the next step's
    forward passes once its own ``W`` passes of the step are done (Qi et al.'s post-validation
    replaces the synchronous optimizer step).  Microbatch ``i`` of step ``k`` is numbered
    ``k m + i``.  No interleaving: chunk ``j`` is stage ``j``.  A message across a stage boundary
    arrives ``latency`` whole slots after the pass that sends it ends.
    """
    p, mm, k = checks.whole("n_pp", n_pp), checks.whole("m", m), checks.whole("steps", steps)
    lat = checks.whole("latency", latency, minimum=0)
    total, cap = mm * k, ZERO_BUBBLE_MICROBATCHES_PER_STAGE * p - 1
    ends: dict[tuple[str, int, int], int] = {}
    placed: list[ScheduledPass] = []
    nf, nb, nw = [0] * p, [0] * p, [0] * p

    def done(key: tuple[str, int, int], t: int, remote: bool = False) -> bool:
        return key in ends and ends[key] + (lat if remote else 0) <= t

    t = 0
    while min(nw) < total:
        for st in range(p):
            pick = None
            i = nf[st]
            if (
                nb[st] < nf[st]
                and done(("F", st, nb[st]), t)
                and (st == p - 1 or done(("B", st + 1, nb[st]), t, remote=True))
            ):
                pick = ("B", st, nb[st])
                nb[st] += 1
            elif (
                i < total
                and (st == 0 or done(("F", st - 1, i), t, remote=True))
                and i - nw[st] < cap
                and (i % mm or nw[st] == i)
            ):
                pick = ("F", st, i)
                nf[st] += 1
            elif nw[st] < nb[st]:
                pick = ("W", st, nw[st])
                nw[st] += 1
            if pick is not None:
                ends[pick] = t + 1
                placed.append(ScheduledPass(t, st, pick[0], st, pick[2], t + 1))
        t += 1
    return Schedule("zero-bubble", p, mm, 1, tuple(sorted(placed)), steps=k)


def latency_slots(
    n_pp: Any, m: Any, v: Any = 1, order: str = "1f1b", latency: Any = 1, steps: Any = 2
) -> float:
    """How much longer a step's schedule runs when every message across a stage boundary pays
    ``latency`` slots, in units of that latency: the simulated count to set beside the search's
    ``2 (v N_PP - 1)`` crossings of one microbatch's chain (the latency it pays once per step).

    ``order`` is one of :data:`SCHEDULE_ORDERS` (one flush) or ``"zero-bubble"`` (ZB-H2 over
    ``steps`` steps back to back, whole slots, divided by ``steps``).
    """
    lat = _slots("latency", latency)
    if lat == 0:
        raise ValueError("latency: got 0; expected a positive number of slots to measure by")
    if order == "zero-bubble":
        k = checks.whole("steps", steps)
        base = schedule_zero_bubble(n_pp, m, k).makespan
        return (schedule_zero_bubble(n_pp, m, k, latency=latency).makespan - base) / lat / k
    base = schedule(n_pp, m, v, order).makespan
    return (schedule(n_pp, m, v, order, latency=lat).makespan - base) / lat


@dataclass(frozen=True)
class OrderComparison:
    """The paper's bubble formula against two interleaved orders at one ``(N_PP, m, v)``."""

    n_pp: int
    m: int
    v: int
    formula: float
    megatron: Fraction | None  # Megatron-LM's interleaved 1F1B; None where it deadlocks
    breadth_first: Fraction

    @property
    def megatron_defined(self) -> bool:
        """Whether Megatron-LM accepts ``m``: a multiple of ``N_PP`` (or, here, at most it)."""
        return self.m <= self.n_pp or self.m % self.n_pp == 0


def compare_interleaved_orders(
    stages: Any = range(1, 7),
    microbatches: Any = range(1, 13),
    interleaving: Any = (2, 3),
    backward: Any = BACKWARD_SLOTS,
) -> list[OrderComparison]:
    """Simulate Megatron-LM's interleaved 1F1B and breadth-first interleaving at every
    ``(N_PP, m, v)`` of the grid and set each against :func:`bubble_fraction`.

    Breadth-first reaches the formula everywhere; Megatron-LM's order reaches it where ``m`` is a
    multiple of ``N_PP`` or at most ``N_PP``, and otherwise idles more or deadlocks.
    """
    out = []
    for p in stages:
        for mm in microbatches:
            for vv in interleaving:
                try:
                    megatron = schedule(p, mm, vv, "interleaved", backward).bubble
                except ScheduleDeadlock:
                    megatron = None
                out.append(
                    OrderComparison(
                        int(p),
                        int(mm),
                        int(vv),
                        float(bubble_fraction(p, mm, vv)),
                        megatron,
                        schedule(p, mm, vv, "breadth-first", backward).bubble,
                    )
                )
    return out
