"""What a sweep says: its rows for the command line, which parallelism each model uses, the end
of linear scaling, critical compute and the latency wall (:func:`headline`).
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np

from dmlimits.core import published
from dmlimits.core.checks import require_scenario
from dmlimits.core.scenario import Scenario
from dmlimits.costs import closed_forms
from dmlimits.search.candidates import Choices, points
from dmlimits.search.engine import best_on_many
from dmlimits.search.sweeps import sweep

#: The columns of the command line's sweep, in order (part of the interface).
ROW_FIELDS = (
    "scenario", "training_flop", "utilization", "feasible", "n_params_total", "layers",
    "d_model", "sparsity", "batch_tokens", "n_gpu", "tp_model", "tp_ff", "pp",
    "pp_interleave", "dp", "ep", "microbatches", "zero_bubble",
)  # fmt: skip
_RENAMED = {"pp_interleave": "v", "microbatches": "m"}
_INTEGERS = {"layers", "d_model", "sparsity", "batch_tokens", "n_gpu", "tp_model", "tp_ff", "pp",
             "pp_interleave", "dp", "ep", "microbatches"}  # fmt: skip


def rows(scn: Scenario) -> list[dict[str, Any]]:
    """One row of :data:`ROW_FIELDS` per model of the sweep: whole numbers as ints, a
    configuration that was never found as ``None``."""
    scn = require_scenario(scn)
    out = []
    for r in sweep(scn):
        row: dict[str, Any] = {"scenario": scn.name}
        for f in ROW_FIELDS[1:]:
            x = r.get(_RENAMED.get(f, f), math.nan)
            if f in ("feasible", "zero_bubble"):
                row[f] = bool(x) if x == x else None
            elif f in _INTEGERS:
                row[f] = round(x) if x == x else None
            else:
                row[f] = float(x) if x == x else None
        out.append(row)
    return out


# --- Which parallelism when ---------------------------------------------------------------------
#: The parallelisms a decision chart names, with the degrees each one multiplies.
PARALLELISMS = (("TP", ("tp_model", "tp_ff")), ("PP", ("pp",)), ("DP", ("dp",)), ("EP", ("ep",)))


def parallelism_label(found: dict[str, Any]) -> str:
    """The parallelisms a configuration uses (degree above one), e.g. ``"TP + PP + DP"``;
    ``"one GPU"`` when it uses none."""
    used = [name for name, keys in PARALLELISMS if math.prod(found[k] for k in keys) > 1]
    return " + ".join(used) or "one GPU"


def parallelism_map(
    scn: Scenario, every: int = 3, doublings: int | None = None
) -> dict[str, Any]:  # fmt: skip
    """For every ``every``-th model of the sweep and every cluster of ``S 2^i`` GPUs (``i <
    doublings``; by default two doublings beyond the largest cluster the sweep chooses), the
    parallelisms of the fastest configuration (:func:`~dmlimits.search.engine.best_on`; ``None``
    where none fits) and whether it trains the model within the training time."""
    scn = require_scenario(scn)
    if doublings is None:
        chosen = [r["n_gpu"] / r["sparsity"] for r in sweep(scn) if r["feasible"]]
        doublings = max(20, math.ceil(math.log2(max(chosen, default=1.0))) + 3)
    if not (
        isinstance(every, int) and every >= 1 and isinstance(doublings, int) and doublings >= 1
    ):
        raise ValueError(
            f"every, doublings: got {every!r}, {doublings!r}; expected whole numbers of at least 1"
        )
    ch = Choices.of(scn)
    pts = points(scn)[::every]
    labels: list[list[str | None]]
    in_time = np.zeros((len(pts), doublings), dtype=bool)
    labels = [[] for _ in pts]
    for i in range(doublings):  # every model on its cluster of S 2^i GPUs, costed together
        found_all = best_on_many(scn, [(pt, pt.experts * 2**i) for pt in pts], ch)
        for a, (pt, found) in enumerate(zip(pts, found_all, strict=True)):
            steps = scn["training.tokens_per_param"] * pt.params / pt.batch
            labels[a].append(None if found is None else parallelism_label(found))
            in_time[a, i] = found is not None and steps * found["t_step"] <= scn.train_seconds
    return {
        "params": np.array([pt.params for pt in pts]),
        "compute": np.array([pt.compute for pt in pts]),
        "gpus": np.array([[pt.experts * 2**i for i in range(doublings)] for pt in pts], float),
        "labels": labels,
        "in_time": in_time,
    }


def linear_end_threshold(scn: Scenario) -> float:
    """The utilization at or below which linear scaling has ended: the paper's fraction of
    the GPU's effective utilization (``paper1.linear_end_fraction``)."""
    return published.value("paper1.linear_end_fraction") * float(
        scn["hardware.effective_utilization"]
    )


class Meaning(NamedTuple):
    """What one headline number is: its unit, the chapter that derives it (a page of the book,
    ``notebooks/NAME``) and a sentence a reader can take it from."""

    unit: str
    chapter: str
    meaning: str


#: What each key of :func:`headline` means: the command line prints these for
#: ``headline --explain`` and names the units beside the numbers, and a test checks that every
#: key :func:`headline` returns has one.
HEADLINE_MEANINGS: dict[str, Meaning] = {
    "linear_scaling_end_flop": Meaning(
        "FLOP", "notebooks/search",
        "training compute of the first feasible grid point whose utilization is at or below "
        "the linear-scaling threshold (a published fraction, paper1.linear_end_fraction, of "
        "the GPU's effective utilization): the first point past the end of linear scaling",
    ),
    "linear_scaling_before_flop": Meaning(
        "FLOP", "notebooks/search",
        "training compute of the feasible grid point just before that end: the last point "
        "still scaling linearly",
    ),
    "linear_scaling_crossing_flop": Meaning(
        "FLOP", "notebooks/search",
        "where utilization crosses the threshold, interpolated in log compute between the two "
        "points above: the end of linear scaling to within the grid's spacing",
    ),
    "plateau_utilization": Meaning(
        "fraction of peak FLOP/s", "notebooks/search",
        "the largest utilization of any feasible grid point: the plateau before linear scaling "
        "ends",
    ),
    "last_feasible_flop": Meaning(
        "FLOP", "notebooks/search",
        "training compute of the largest grid point that finishes within the training time at "
        "all: the searched latency wall",
    ),
    "t_crit_flop": Meaning(
        "FLOP", "notebooks/closed_forms",
        "critical compute, the paper's closed form: the largest run whose every node still "
        "runs its matmuls at full rate, with the paper's batch-to-depth ratio (closed_forms.*)",
    ),
    "t_limit_flop": Meaning(
        "FLOP", "notebooks/closed_forms",
        "the latency wall, the paper's closed form: the largest run whose steps are no shorter "
        "than the latencies on their critical path allow, with the paper's batch-to-depth ratio",
    ),
    "t_crit_own_flop": Meaning(
        "FLOP", "notebooks/closed_forms",
        "critical compute with the batch-to-depth ratio the scenario's own batch and depth laws "
        "give (batch.*, depth.*)",
    ),
    "t_limit_own_flop": Meaning(
        "FLOP", "notebooks/closed_forms",
        "the latency wall with the batch-to-depth ratio the scenario's own batch and depth laws "
        "give (batch.*, depth.*)",
    ),
}  # fmt: skip


def headline(scn: Scenario) -> dict[str, float]:
    """The scenario's headline numbers: where linear scaling ends (the first feasible grid
    point at or below :func:`linear_end_threshold`), the feasible grid point before it and the
    crossing interpolated between the two in log compute (the grid's spacing sets the end to
    within that bracket), the utilization of the plateau before it (the largest), the last
    feasible grid point, and the closed forms: the paper's (``t_crit_flop``, ``t_limit_flop``)
    and those of the scenario's own laws (``t_crit_own_flop``, ``t_limit_own_flop``).  Each key's
    unit and meaning are in :data:`HEADLINE_MEANINGS`."""
    scn = require_scenario(scn)
    results = sweep(scn)
    feasible = [r for r in results if r["feasible"]]
    limit = linear_end_threshold(scn)
    k = next((i for i, r in enumerate(feasible) if r["utilization"] <= limit), None)
    end = feasible[k] if k is not None else None
    before = feasible[k - 1] if k else None
    crossing = end["training_flop"] if end else math.nan
    if end and before:
        u0, u1 = before["utilization"], end["utilization"]
        x0, x1 = math.log(before["training_flop"]), math.log(end["training_flop"])
        crossing = math.exp(x0 + (x1 - x0) * (u0 - limit) / (u0 - u1)) if u0 > u1 else crossing
    cf = closed_forms.values(scn)
    return {
        "linear_scaling_end_flop": end["training_flop"] if end else math.nan,
        "linear_scaling_before_flop": before["training_flop"] if before else math.nan,
        "linear_scaling_crossing_flop": crossing,
        "plateau_utilization": max((r["utilization"] for r in feasible), default=math.nan),
        "last_feasible_flop": feasible[-1]["training_flop"] if feasible else math.nan,
        "t_crit_flop": cf["t_crit_flop"],
        "t_limit_flop": cf["t_limit_flop"],
        "t_crit_own_flop": cf["t_crit_own_flop"],
        "t_limit_own_flop": cf["t_limit_own_flop"],
    }
