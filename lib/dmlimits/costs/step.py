"""One optimizer step, all parallelisms together: step time and utilization.

The pieces come from the chapters: the matmul time of a step on one GPU (matmul chapter), the
bandwidth and latency times of tensor, pipeline and expert parallelism and of the gradient
all-reduce, and the pipeline's bubble fraction.  Following Erdil & Schneider-Joseph (2024): the
pipeline's bandwidth time hides behind its matmuls, the bubble stretches what the pipeline does,
latency adds to the step except that a zero-bubble schedule overlaps its pipeline's latency with
its work, and the gradient all-reduce follows the pipeline (the order in which the authors' final
code was run, ``overlap_DP = 0`` in ``optimal_parallelism.ipynb`` of
``ege-erdil/limits_to_distributed_training``, commit b1f771c, October 2024, and which the
paper's printed results need; the ``search.dp_overlap`` key lets it overlap the pipeline
instead).

That code takes the zero-bubble overlap (the larger of the pipeline's network time and its
latency) after the pipeline's time has been computed from the network time alone, so as run a
zero-bubble pipeline pays no latency there; this module counts it.  With the authors' other
options the search still gives their configuration at every grid point of the paper's settings
(``tests/test_search.py``, ``test_the_authors_options_reproduce_every_grid_point``), so the
difference changes none of them.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import numpy as np
import sympy as sp

from dmlimits.core import formula_cache, lazy
from dmlimits.core import symbols as s
from dmlimits.core import units as u
from dmlimits.core.checks import require_scenario
from dmlimits.core.derivation import Derivation, Step, Substitution, derivation, register
from dmlimits.core.scenario import Scenario
from dmlimits.costs import data_parallel as dpm
from dmlimits.costs import model
from dmlimits.costs import pipeline as ppm

CHAPTER = "search"
#: The rules of the search that this chapter derives and calls the default (the scenario
#: schema's defaults are these; tests/test_choices.py checks both and that the search follows).
CHAPTER_RULES = {
    "search.level_times": "links",
    "search.dp_overlap": False,
    "search.latency_paid": "step",
}
_S = u.second
_decl = s.REGISTRY.declare

t_mm = _decl(
    "t_mm_step",
    r"t_{\mathrm{mm,step}}",
    "matmul time of one step on one GPU",
    _S,
    defined_in=CHAPTER,
)
t_net = _decl(
    "t_net", r"t_{\mathrm{net}}",
    "bandwidth time of a step's transfers that can hide behind its matmuls (TP, pipeline, "
    "expert and, when overlapped, the gradient all-reduce), the levels combined by the search's "
    "rule", _S, defined_in=CHAPTER,
)  # fmt: skip
t_dp_after = _decl(
    "t_DP_after", r"t_{\mathrm{DP,after}}",
    "bandwidth time of the gradient all-reduce that follows the pipeline (zero when it "
    "overlaps)", _S, defined_in=CHAPTER,
)  # fmt: skip
t_lat = _decl(
    "t_lat_pipe", r"t_{\mathrm{lat,step}}",
    "latency of a step's TP, pipeline and expert messages on the critical path", _S,
    defined_in=CHAPTER,
)  # fmt: skip
z_zb = _decl(
    "z_ZB",
    r"z_{\mathrm{ZB}}",
    "1 for a zero-bubble pipeline, whose messages' latency overlaps its work; 0 for 1F1B",
    defined_in=CHAPTER,
)
t_busy_pipe = _decl(
    "t_busy_pipe", r"t_{\mathrm{busy,step}}",
    "time the pipeline's GPUs are busy in a step: matmuls, or the bandwidth time hidden behind "
    "them when it is longer", _S, defined_in=CHAPTER,
)  # fmt: skip
util = _decl(
    "u", "u", "utilization: useful FLOP over peak FLOP of the cluster's time", defined_in=CHAPTER
)
t_link = [
    _decl(
        f"t_link{lv}",
        rf"t_{{\mathrm{{{name}}}}}",
        f"bandwidth time of a step's hidden transfers on the {name} links (level {lv})",
        _S,
        defined_in=CHAPTER,
    )
    for lv, name in ((0, "NVLink"), (1, "IB"))
]
t_family = {
    (fam, lv): _decl(
        f"t_{fam}_{lv}",
        rf"t_{{\mathrm{{{fam}}},{lv}}}",
        f"bandwidth time of {what} traffic on the level-{lv} links in one step",
        _S,
        defined_in=CHAPTER,
    )
    for fam, what in (("TP", "tensor-parallel"), ("PE", "pipeline and expert"))
    for lv in (0, 1)
}

BUSY = Substitution(
    "bandwidth time hides behind the matmuls: the GPUs are busy for the longer of the two",
    {t_busy_pipe: sp.Max(t_mm, t_net)},
    kind="assumption",
    source="erdil2024datamovement",
)
FLUSH = Substitution(
    "the bubble stretches the pipeline's busy time, {eq}`pipeline-flush-time-2`",
    {ppm.t_flush: t_busy_pipe / (1 - ppm.bubble)},
)
PIPE = Substitution(
    "latency adds to the stretched busy time, except in a zero-bubble pipeline, whose "
    "schedule has work to overlap it with",
    {dpm.t_rest: sp.Max(ppm.t_flush, z_zb * t_lat) + (1 - z_zb) * t_lat},
    kind="assumption",
    source="erdil2024datamovement",
)
USEFUL = Substitution(
    "a step does six FLOP per active parameter per token of the batch",
    {s.compute: s.macs_per_param_token * s.flop_per_mac * s.n_active * s.batch},
)


@register
def step_time_derivation() -> Derivation:
    r1 = sp.Eq(dpm.t_iter, dpm.t_rest + t_dp_after + dpm.t_dp_lat)
    r2 = PIPE.apply(r1)
    r3 = FLUSH.apply(r2)
    r4 = BUSY.apply(r3)
    return derivation(
        "search-step-time",
        "The time of one step",
        [
            Step(
                "A step is the pipeline's work, then the bandwidth time of the gradient "
                "all-reduce if it does not overlap the pipeline (by default it does not: the "
                "paper's printed results need it to follow), then the all-reduce's latency, "
                "{eq}`data-parallel-allreduce-5`.",
                r1,
            ),
            Step(
                "The pipeline's time is its flush time plus the latency of its messages; a "
                "zero-bubble schedule ($z_{\\mathrm{ZB}} = 1$) overlaps that latency with "
                "its work instead.",
                r2,
                using=PIPE,
            ),
            Step("The bubble stretches the busy time.", r3, using=FLUSH),
            Step(
                "The GPUs are busy with matmuls, or with the transfers that hide behind them "
                "when those take longer.",
                r4,
                using=BUSY,
            ),
        ],
        chapter=CHAPTER,
    )


EACH_LINK_CARRIES = Substitution(
    "each kind of link carries every parallelism's traffic on its level, one transfer after "
    "another",
    {t_link[lv]: t_family["TP", lv] + t_family["PE", lv] for lv in (0, 1)},
)


@register
def network_time_derivation() -> Derivation:
    n1 = sp.Eq(t_net, sp.Max(*t_link))
    n2 = EACH_LINK_CARRIES.apply(n1)
    return derivation(
        "search-network-time",
        "The bandwidth time that hides behind the matmuls",
        [
            Step(
                "The transfers of tensor, pipeline and expert parallelism share a step's "
                "network. The NVLink links inside a node and the InfiniBand links between nodes "
                "are different hardware: both carry traffic at once, and the transfers are done "
                "when the busier of the two is done.",
                n1,
            ),
            Step(
                "Each kind of link carries all the traffic on its level, whichever parallelism "
                "it belongs to. With only the gradient all-reduce on the links this is the "
                "larger of its two levels' times, as the data-parallel chapter derives.",
                n2,
                using=EACH_LINK_CARRIES,
            ),
        ],
        chapter=CHAPTER,
    )


@register
def utilization_derivation() -> Derivation:
    u1 = sp.Eq(util, s.compute / (s.n_gpu * s.peak_flops * dpm.t_iter))
    u2 = USEFUL.apply(u1)
    u3 = model.PASS_COUNTS.apply(u2)
    return derivation(
        "search-utilization",
        "Utilization",
        [
            Step(
                "Utilization is the useful arithmetic of a step over what the cluster could do "
                "in that time at its peak rate (peak, not the derated rate: a perfect step "
                "reaches the effective utilization, not one).",
                u1,
            ),
            Step("The useful arithmetic of a step.", u2, using=USEFUL),
            Step("Six FLOP per active parameter per token.", u3, using=model.PASS_COUNTS),
        ],
        chapter=CHAPTER,
    )


@cache
@formula_cache.expressions
def _cost_formulas() -> dict[str, tuple[sp.Expr, sp.Expr]]:
    return {
        "step_time": (step_time_derivation().result.rhs, _S),
        "network_time": (network_time_derivation().result.rhs, _S),
        # Dimensioned: the FLOP per multiply-accumulate stays a symbol (in FLOP) until
        # evaluation.
        "utilization": (utilization_derivation().steps[1].expr.rhs, u.one),
    }


#: The step's time, its network time and the utilization by name: (expression, unit); built on
#: first use (:mod:`dmlimits.core.lazy`).
COST_FORMULAS: dict[str, tuple[sp.Expr, sp.Expr]]
#: The step's time (``search-step-time``); built on first use.
STEP_TIME: sp.Expr
#: The step's network time (``search-network-time``); built on first use.
NETWORK_TIME: sp.Expr
#: The utilization, dimensioned (``search-utilization``, step 2); built on first use.
UTILIZATION: sp.Expr
__getattr__ = lazy.attributes(
    __name__,
    COST_FORMULAS=_cost_formulas,
    **lazy.expressions(
        _cost_formulas,
        STEP_TIME="step_time",
        NETWORK_TIME="network_time",
        UTILIZATION="utilization",
    ),
)


@cache
def numeric(name: str):
    """The numeric function of the cost formula ``name``, kept between processes
    (:func:`dmlimits.core.formula_cache.lambdified`: a process that reads it derives nothing)."""
    return formula_cache.lambdified(f"step.{name}", lambda: _numeric_build(name))


def _numeric_build(name: str) -> tuple[tuple, sp.Expr]:
    expr = model.PASS_COUNTS.apply(_cost_formulas()[name][0])
    if name == "step_time":
        args = (t_mm, t_net, t_dp_after, t_lat, dpm.t_dp_lat, ppm.bubble, z_zb)
    elif name == "network_time":
        args = (t_family["TP", 0], t_family["PE", 0], t_family["TP", 1], t_family["PE", 1])
    else:
        args = (s.n_active, s.batch, s.n_gpu, s.peak_flops, dpm.t_iter)
    return args, expr


def step_time(
    matmul: Any, network: Any, dp_after: Any, latency: Any, dp_latency: Any, bubble: Any,
    zero_bubble: Any = 0,
) -> Any:  # fmt: skip
    """Seconds of one step (the ``search-step-time`` derivation) from a step's matmul time,
    the bandwidth time that can hide behind it, the gradient all-reduce's bandwidth time that
    follows the pipeline, the pipeline's latency, the all-reduce's latency and the bubble
    fraction, for zero-bubble (1) or 1F1B (0) pipelines; arrays broadcast."""
    args = [np.asarray(x, dtype=float) for x in (matmul, network, dp_after, latency, dp_latency)]
    return numeric("step_time")(
        *args, np.asarray(bubble, dtype=float), np.asarray(zero_bubble, dtype=float)
    )


def network_time(tp0: Any, pe0: Any, tp1: Any, pe1: Any) -> Any:
    """Seconds the hidden transfers keep the network busy (``search-network-time``), from the
    tensor-parallel and the pipeline-and-expert traffic's times on each level's links."""
    args = [np.asarray(x, dtype=float) for x in (tp0, pe0, tp1, pe1)]
    return numeric("network_time")(*args)


def utilization(scn: Scenario, n_active: Any, batch: Any, n_gpu: Any, t_step: Any) -> Any:
    """Useful FLOP over the cluster's peak FLOP in a step (``search-utilization``)."""
    scn = require_scenario(scn)
    value = numeric("utilization")(n_active, batch, n_gpu, scn.peak_flops, t_step)
    return float(value) if np.ndim(value) == 0 else value
