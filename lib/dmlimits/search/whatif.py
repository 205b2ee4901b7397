"""What if? How the headline limits move when the assumptions move.

Two analyses of a scenario, both computed by the search (:mod:`dmlimits.search`):

* a *tornado*: each assumption of :data:`ASSUMPTIONS` halved and doubled, one at a time, and the
  linear-scaling end and the latency wall (the last feasible grid point) of each variant;
* an *uncertainty band*: the assumptions drawn together, log-uniformly from the ranges of
  :data:`RANGES` (each with the reason for its width), and the spread of the utilization curve
  and of the two limits over the draws.

Every variant is an ordinary scenario (the base scenario with ``--set``-style overrides), so the
analyses see exactly what a reader's own override would.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from dmlimits import search
from dmlimits.core.checks import require_scenario
from dmlimits.core.scenario import Scenario, resolve_overrides


@dataclass(frozen=True)
class Assumption:
    key: str
    label: str
    whole: bool = False  # a whole number (the node size): halved and doubled exactly


#: The assumptions the tornado varies, in the order of the issue's list.
ASSUMPTIONS = (
    Assumption("network.intra_node.bandwidth", "NVLink bandwidth"),
    Assumption("network.inter_node.bandwidth", "InfiniBand bandwidth"),
    Assumption("hardware.hbm_bandwidth", "HBM bandwidth"),
    Assumption("network.latency", "network latency"),
    Assumption("hardware.kernel_latency", "kernel latency"),
    Assumption("batch.exponent", "batch-law exponent"),
    Assumption("batch.anchor_tokens", "batch-law anchor (tokens)"),
    Assumption("depth.exponent", "depth-law exponent"),
    Assumption("training.months", "training duration"),
    Assumption("network.node_size", "GPUs per NVLink node", whole=True),
)

#: Documented ranges for the uncertainty band: (low factor, high factor) around the scenario's
#: value, and why.  Draws are log-uniform between the two.
RANGES: dict[str, tuple[float, float, str]] = {
    "network.intra_node.bandwidth": (
        0.7,
        1.0,
        "achieved NCCL bus bandwidth is 70-100% of the NVLink line rate",
    ),
    "network.inter_node.bandwidth": (
        0.6,
        1.0,
        "achieved InfiniBand bandwidth at scale is 60-100% of the line rate",
    ),
    "hardware.hbm_bandwidth": (0.8, 1.0, "sustained HBM bandwidth is 80-100% of the datasheet"),
    "network.latency": (
        1.0,
        4.0,
        "the per-message latency grows with the size and depth of the switch fabric",
    ),
    "hardware.kernel_latency": (
        0.5,
        2.0,
        "kernel launch and synchronization latency varies "
        "with the software stack (CUDA graphs, fused kernels)",
    ),
    "batch.exponent": (0.75, 1.25, "the batch-law exponent is a fit with wide error bars"),
    "batch.anchor_tokens": (
        0.5,
        2.0,
        "published critical batch sizes at a given compute "
        "differ by about a factor of two either way",
    ),
    "depth.exponent": (0.9, 1.1, "the depth law is a fit to a handful of published shapes"),
}


def _override(scn: Scenario, key: str, factor: float, whole: bool) -> dict[str, Any]:
    value = scn[key] * factor
    if whole:
        value = max(1, round(value))
    return {key: value}


def _variant(scn: Scenario, changes: dict[str, Any], tag: str) -> Scenario:
    return resolve_overrides(scn, changes, name=f"{scn.name}|{tag}")


#: How far the tornado moves each assumption (divided and multiplied by it), and how many joint
#: draws the uncertainty band takes: the what-if chapter's choices.
FACTOR = 2.0
DRAWS = 12


def tornado_variants(scn: Scenario, factor: float = FACTOR) -> dict[tuple[str, str], Scenario]:
    """The scenarios of :func:`tornado`: each assumption divided (``"low"``) and multiplied
    (``"high"``) by ``factor``."""
    scn = require_scenario(scn)
    if not (factor > 1 and math.isfinite(factor)):
        raise ValueError(f"factor: got {factor!r}; expected a finite number greater than 1")
    variants = {}
    for a in ASSUMPTIONS:
        for side, f in (("low", 1 / factor), ("high", factor)):
            variants[(a.key, side)] = _variant(
                scn, _override(scn, a.key, f, a.whole), f"{a.key}x{f:g}"
            )
    return variants


def uncertainty_variants(scn: Scenario, n: int = DRAWS, seed: int = 0) -> list[Scenario]:
    """The scenarios of :func:`uncertainty`: ``n`` joint draws of the assumptions."""
    return [_variant(scn, d, f"draw{i}") for i, d in enumerate(samples(scn, n, seed))]


@dataclass(frozen=True)
class TornadoRow:
    key: str
    label: str
    low_value: float
    high_value: float
    linear_end_low: float
    linear_end_high: float
    wall_low: float
    wall_high: float


def tornado(
    scn: Scenario, factor: float = FACTOR, jobs: int | None = None, progress: Any = None
) -> tuple[dict[str, float], list[TornadoRow]]:
    """The base scenario's linear-scaling end and latency wall, and for each assumption of
    :data:`ASSUMPTIONS` the same two with that assumption divided and multiplied by
    ``factor``.  Rows are sorted by how far the linear-scaling end moves (widest first)."""
    scn = require_scenario(scn)
    variants = tornado_variants(scn, factor)
    search.sweep_many([scn, *variants.values()], jobs=jobs, progress=progress)
    base = search.headline(scn)
    rows = []
    for a in ASSUMPTIONS:
        lo, hi = variants[(a.key, "low")], variants[(a.key, "high")]
        h_lo, h_hi = search.headline(lo), search.headline(hi)
        rows.append(
            TornadoRow(
                a.key,
                a.label,
                float(lo[a.key]),
                float(hi[a.key]),
                h_lo["linear_scaling_end_flop"],
                h_hi["linear_scaling_end_flop"],
                h_lo["last_feasible_flop"],
                h_hi["last_feasible_flop"],
            )
        )

    def spread(r: TornadoRow) -> float:
        ends = [x for x in (r.linear_end_low, r.linear_end_high) if x == x]
        return abs(math.log10(max(ends) / min(ends))) if len(ends) == 2 else 0.0

    rows.sort(key=spread, reverse=True)
    return {"linear_end": base["linear_scaling_end_flop"], "wall": base["last_feasible_flop"]}, rows


def moves(base: dict[str, float], row: TornadoRow, what: str) -> float:
    """How far, in decades of compute, ``what`` (``"linear_end"`` or ``"wall"``) moves in the
    wider of the row's two variants; a variant where the limit is undefined (no linear end, no
    feasible run) while the base has one counts as infinitely far."""
    if what not in ("linear_end", "wall"):
        raise ValueError(f"what: got {what!r}; expected 'linear_end' or 'wall'")
    ref = base[what]
    sides = (getattr(row, f"{what}_low"), getattr(row, f"{what}_high"))
    if ref != ref:  # the base has no such limit: count only variants that gain one
        return math.inf if any(x == x for x in sides) else 0.0
    return max(math.inf if x != x else abs(math.log10(x / ref)) for x in sides)


def ranking(base: dict[str, float], rows: list[TornadoRow], what: str) -> list[tuple[str, float]]:
    """``(label, decades)`` for every row, the assumption that moves ``what`` farthest first."""
    return sorted(((r.label, moves(base, r, what)) for r in rows), key=lambda t: -t[1])


def sensitivity_words(ranked: dict[str, list[tuple[str, float]]]) -> dict[str, str]:
    """The what-if chapter's words on which assumption moves each limit farthest, from the
    :func:`ranking` of ``"linear_end"`` and ``"wall"``: ``sentence`` names the largest finite
    move of each limit in decades, and then the assumptions with a variant that leaves a limit
    undefined ("none" in the tornado), which are a different world rather than an uncertainty
    and so are not ranked first; ``takeaway`` adds which assumptions to pin down first."""

    def top(what: str) -> tuple[str, float] | None:
        return next(((lab, d) for lab, d in ranked[what] if math.isfinite(d) and d > 0), None)

    end, wall = top("linear_end"), top("wall")
    if end is None and wall is None:
        head = "No assumption moves either limit by a grid point"
        pin = "none of them needs pinning down first"
    elif end is not None and wall is not None and end[0] == wall[0]:
        head = (f"Of the finite moves, both limits move farthest with the {end[0]} "
                f"({end[1]:.2g} and {wall[1]:.2g} decades)")  # fmt: skip
        pin = "the assumption to pin down first"
    else:
        parts = [f"{name} moves farthest with the {t[0]} ({t[1]:.2g} decades)"
                 for name, t in (("the end of linear scaling", end), ("the wall", wall))
                 if t is not None]  # fmt: skip
        head = "Of the finite moves, " + ", and ".join(parts)
        pin = f"the assumption{'s' if len(parts) == 2 else ''} to pin down first"
    undefined = sorted({lab for what in ranked for lab, d in ranked[what] if math.isinf(d)})
    tail = ""
    if undefined:
        names = " and ".join([", ".join(undefined[:-1]), undefined[-1]] if undefined[:-1]
                             else undefined)  # fmt: skip
        tail = (f'. Halving or doubling the {names} leaves a limit undefined ("none"), a '
                "different world rather than an uncertainty")  # fmt: skip
    return {"sentence": head + tail, "takeaway": f"{head}: {pin}"}


def samples(scn: Scenario, n: int, seed: int = 0) -> list[dict[str, float]]:
    """``n`` joint draws of the assumptions of :data:`RANGES` (log-uniform, reproducible)."""
    scn = require_scenario(scn)
    if not (isinstance(n, int) and n >= 1):
        raise ValueError(f"n: got {n!r}; expected a whole number of at least 1")
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        draw = {}
        for key, (lo, hi, _why) in RANGES.items():
            f = math.exp(rng.uniform(math.log(lo), math.log(hi)))
            draw[key] = float(scn[key]) * f
        out.append(draw)
    return out


def uncertainty(
    scn: Scenario, n: int = DRAWS, seed: int = 0, quantiles: tuple[float, float] = (0.1, 0.9),
    jobs: int | None = None, progress: Any = None,
) -> dict[str, Any]:  # fmt: skip
    """The spread of the utilization curve and of the two limits over ``n`` joint draws of
    the assumptions: ``compute`` (a common grid), ``low``/``median``/``high`` utilization at
    each compute (quantiles over the draws, ``NaN`` where fewer than half the draws are
    feasible), and the quantiles of the linear-scaling end and the latency wall."""
    scn = require_scenario(scn)
    variants = uncertainty_variants(scn, n, seed)
    search.sweep_many(variants, jobs=jobs, progress=progress)
    base = [r for r in search.sweep(scn) if r["feasible"]]
    grid = np.array([r["training_flop"] for r in search.sweep(scn)])
    curves = np.full((len(variants), len(grid)), np.nan)
    ends, walls = [], []
    for i, v in enumerate(variants):
        rows = [r for r in search.sweep(v) if r["feasible"]]
        head = search.headline(v)
        ends.append(head["linear_scaling_end_flop"])
        walls.append(head["last_feasible_flop"])
        if len(rows) >= 2:
            x = np.log([r["training_flop"] for r in rows])
            y = np.array([r["utilization"] for r in rows])
            inside = (np.log(grid) >= x[0]) & (np.log(grid) <= x[-1])
            curves[i, inside] = np.interp(np.log(grid[inside]), x, y)
    enough = np.sum(np.isfinite(curves), axis=0) >= len(variants) / 2
    q_lo, q_hi = quantiles
    low, med, high = (np.full(len(grid), np.nan) for _ in range(3))
    if enough.any():
        cols = curves[:, enough]
        low[enough], med[enough], high[enough] = (
            np.nanquantile(cols, p, axis=0) for p in (q_lo, 0.5, q_hi)
        )

    def q(values: list[float]) -> tuple[float, float, float]:
        finite = np.array([x for x in values if x == x])
        if not len(finite):
            return (math.nan, math.nan, math.nan)
        return tuple(float(np.quantile(finite, p)) for p in (q_lo, 0.5, q_hi))

    return {
        "compute": grid, "low": low, "median": med, "high": high,
        "base": np.array([r["utilization"] for r in base]),
        "base_compute": np.array([r["training_flop"] for r in base]),
        "linear_end": q(ends), "wall": q(walls), "n": n, "quantiles": quantiles,
    }  # fmt: skip
