"""The search itself: each parallelism's cost per level for every candidate, the step time as
:mod:`dmlimits.costs.step` derives it, the two lower bounds that prune candidates, the best
candidate of a cluster and the smallest cluster that trains a model in time (Erdil &
Schneider-Joseph 2024); and what cuts a result's utilization (:func:`losses`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from dmlimits.core.checks import require_scenario, trusted_arguments
from dmlimits.core.plumbing import switched_on
from dmlimits.core.scenario import Scenario
from dmlimits.costs import collectives as co
from dmlimits.costs import data_parallel as dpm
from dmlimits.costs import expert_parallel as epm
from dmlimits.costs import matmul, step
from dmlimits.costs import pipeline as ppm
from dmlimits.costs import tensor_parallel as tpm
from dmlimits.search.candidates import (
    CODES,
    COUNTS,
    DEGREES,
    LOOKAHEAD,
    LOOKAHEAD_PAIRS,
    MAX_DOUBLINGS,
    MIN_GAIN,
    PATIENCE,
    POINT_COLUMNS,
    CandidateRows,
    Choices,
    Point,
    bases,
    compute_times,
    distinct_codes,
    divisors,
    placements,
    take,
)


# --- Costs per parallelism, for every level-0 factor ----------------------------------------
@dataclass
class _Table:
    """Seconds per step of one parallelism, shape (candidates, options...): bandwidth time on
    each level's links and latency; infinite where the option is not a factor of the degree."""

    level0: np.ndarray
    level1: np.ndarray
    latency: np.ndarray


def _options(
    degree: np.ndarray, factors: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(GPUs of the group per node, nodes, valid) for each candidate and level-0 factor;
    ``factors=None``: one level, the whole group at level 0."""
    d = degree[:, None]
    if factors is None:
        return d, np.ones_like(d), np.ones(d.shape, dtype=bool)
    f = factors[None, :]
    ok = (d % f == 0) & (f <= d)
    intra = np.where(ok, f, 1)  # a valid stand-in where the option is not a factor
    return intra, d // intra, ok


def _family_times(
    scn: Scenario, family: str, u: CandidateRows, factors: np.ndarray | None,
    ch: Choices,
) -> dict[str, tuple[np.ndarray, co.LevelTimes]]:  # fmt: skip
    """(valid, each level's bandwidth time and the latency) of a family's parallelisms for
    every level-0 option, at the distinct rows ``u``.  Under one level (a flat or unlimited
    network) all the bandwidth time is on level 0 and none on level 1."""
    flat = scn["network.topology"] != "two-level"
    if family == "dp":
        i, o, ok = _options(u["dp"], factors)
        t = dpm.dp_level_times(scn, u["params"][:, None], i, o, u["n_gpu"][:, None])
        return {"dp": (ok, _broadcast_levels(t, flat))}
    if family == "pp_ep":
        ok, t = pp_ep_distinct(scn, u, factors, ch)
        t = _broadcast_levels(t, flat)
        return {"pp_ep": (np.broadcast_to(ok, t.level0.shape), t)}
    out = {}
    tokens = (u["batch"] / (u["dp"] * u["ep"]))[:, None]
    stage_layers = (u["layers"] / u["pp"])[:, None]
    for name in ("tp_model", "tp_ff"):
        i, o, ok = _options(u[name], factors)
        t = _broadcast_levels(tpm.tp_family_level_times(
            scn, name, u["d_model"][:, None], u["d_ff"][:, None], tokens,
            u["tp_model"][:, None], u["tp_ff"][:, None], i, o,
        ), flat)  # fmt: skip
        # Bandwidth: this GPU's layers; latency: every layer, on the pipeline's critical path.
        out[name] = (
            ok, co.LevelTimes(
                t.level0 * stage_layers, t.level1 * stage_layers, t.latency * u["layers"][:, None]
            ),
        )  # fmt: skip
    return out


def _broadcast_levels(t: co.LevelTimes, flat: bool) -> co.LevelTimes:
    """``t``'s three times as arrays of one shape; under one level, all the bandwidth time on
    level 0 (the sum of the two terms, of which the second is then nothing)."""
    if flat:
        t = co.LevelTimes(t.level0 + t.level1, np.zeros_like(t.level1), t.latency)
    return co.LevelTimes(*np.broadcast_arrays(*t))


def pp_ep_distinct(
    scn: Scenario, c: CandidateRows, factors: np.ndarray | None, ch: Choices
) -> tuple[np.ndarray, co.LevelTimes]:
    """Pipeline and expert traffic at layer interfaces, each level's bandwidth time apart."""
    pi, po, pok = _options(c["pp"], factors)
    ei, eo, eok = _options(c["ep"], factors)
    v = c["v"][:, None, None]
    d_model, batch = c["d_model"][:, None, None], c["batch"][:, None, None]
    layers, n_gpu = c["layers"][:, None, None], c["n_gpu"][:, None, None]
    pp_i, pp_o = pi[:, :, None], po[:, :, None]
    ep_i, ep_o = ei[:, None, :], eo[:, None, :]
    within, across = ppm.level_crossings(pp_i, pp_o, v)
    cross = [
        epm.crossing_level_times(scn, d_model, batch, ep_i, ep_o, level, k, n_gpu)
        for level, k in ((0, within), (1, across))
    ]
    only = epm.ep_level_times(
        scn, d_model, batch, ep_i, ep_o, layers - v * pp_i * pp_o, n_gpu,
        latency=ch.expert_latency,
    )  # fmt: skip
    ok = pok[:, :, None] & eok[:, None, :]
    return ok, co.LevelTimes(*(cross[0][k] + cross[1][k] + only[k] for k in range(3)))


def family_costs(
    scn: Scenario, c: CandidateRows, factors: np.ndarray | None, ch: Choices
) -> dict[str, tuple[_Table, np.ndarray]]:
    """Each parallelism's table, one row per distinct combination of what it depends on
    (:data:`~dmlimits.search.candidates.GROUPS`), and each candidate's row in it."""
    out = {}
    for family in ("dp", "tp", "pp_ep"):
        first, back = distinct_codes(c["code_" + family])
        for name, (ok, t) in _family_times(scn, family, take(c, first), factors, ch).items():
            table = _Table(*(np.where(ok, x, np.inf) for x in t))
            out[name] = (table, back)
    return out


def gather_rows(costs: dict[str, tuple[_Table, np.ndarray]], rows: np.ndarray) -> dict[str, _Table]:
    """The tables of ``family_costs`` at candidates ``rows``, one row each."""
    out = {}
    for name, (t, back) in costs.items():
        at = back[rows]
        out[name] = _Table(t.level0[at], t.level1[at], t.latency[at])
    return out


def network_time(parts: dict[str, tuple[np.ndarray, np.ndarray]], rule: str) -> np.ndarray:
    """Bandwidth time of several parallelisms' traffic, given each one's time on the level-0
    and level-1 links (keys among ``dp``, ``tp_model``, ``tp_ff`` and ``pp_ep``).

    ``links`` (the default, derived as ``search-network-time``): the two kinds of links work
    at once, each busy with the sum of everyone's traffic on it.  ``authors`` (the authors'
    final code): the two tensor-parallel all-reduces share each level and their levels
    overlap, as do the gradient all-reduce's; point-to-point transfers at different levels add;
    the families add.  ``max``: each parallelism's two levels overlap and parallelisms add.
    ``sum``: everything adds."""
    if rule == "sum":
        return sum(a + b for a, b in parts.values())
    if rule == "max":
        return sum(np.maximum(a, b) for a, b in parts.values())
    if rule == "authors":
        tp = [parts[k] for k in ("tp_model", "tp_ff") if k in parts]
        out = np.maximum(sum(a for a, _ in tp), sum(b for _, b in tp)) if tp else 0.0
        if "dp" in parts:
            out = out + np.maximum(*parts["dp"])
        if "pp_ep" in parts:
            out = out + sum(parts["pp_ep"])
        return out
    # links: the step chapter's derivation, with the gradient all-reduce among the transfers
    # on the links when it overlaps the pipeline.
    pe = parts.get("pp_ep", (0.0, 0.0))
    tp = [v for k, v in parts.items() if k != "pp_ep"]
    return step.network_time(sum(a for a, _ in tp), pe[0], sum(b for _, b in tp), pe[1])


# --- The search ------------------------------------------------------------------------------
def used_node(node: int, n_gpu: int) -> int:
    """GPUs of each NVLink node a cluster of ``n_gpu`` uses: the whole node when the cluster
    fills whole nodes, else the largest divisor of ``n_gpu`` that fits in one.  A cluster of
    ``2^i`` GPUs on 72-GPU racks (GB200 NVL72) uses 64 GPUs of each rack's NVLink domain."""
    if n_gpu <= node:
        return n_gpu
    if n_gpu % node == 0:
        return node
    return max(d for d in divisors(n_gpu) if d <= node)


def _placement_table(scn: Scenario, n_gpu: int) -> np.ndarray | None:
    """Level-0 factors of the five degrees, one row per placement; ``None`` when there is one
    level (a flat or unlimited network)."""
    if scn["network.topology"] != "two-level":
        return None
    return placements(used_node(int(scn["network.node_size"]), n_gpu))


#: The search prunes, before costing their placements, the candidates whose lower bound on the
#: step time (``compute_bound``, then ``lower_bound``) exceeds a step time another candidate
#: of the same cluster achieves; this environment variable set to ``off`` makes it cost every
#: candidate.  Pruning changes no result (tests/test_search_pruning.py compares every preset's
#: sweep both ways).
PRUNE_ENV = "DMLIMITS_SEARCH_PRUNE"
#: Candidates of each cluster costed first, those of least bound: the fastest of them sets the
#: step time that the others' bounds must not exceed.  Of 8, 16, 32 and 64 seeds, 32 costs the
#: fewest candidates over the paper's sixteen presets (measured with the second bound alone).
SEEDS = 32


def pruning() -> bool:
    """Whether the search prunes (:data:`PRUNE_ENV` is not ``off``)."""
    return switched_on(PRUNE_ENV)


def list_candidates(
    scn: Scenario, items: list[tuple[Point, int]], ch: Choices, only: dict[str, int] | None
) -> tuple[CandidateRows, list[int], np.ndarray] | None:
    """Every candidate of every (model, cluster) pair, concatenated, with the pairs' columns
    (:class:`~dmlimits.search.candidates.CandidateRows`); the pairs that have candidates, and the
    first row of each one's segment."""
    parts: list[dict[str, np.ndarray]] = []
    owners: list[int] = []
    kept: list[tuple[Point, int]] = []
    for k, ((pt, n_gpu), c) in enumerate(zip(items, bases(scn, items, ch), strict=True)):
        if c is not None and only:
            keep = np.logical_and.reduce([c[key] == v for key, v in only.items()])
            c = {key: v[keep] for key, v in c.items()} if keep.any() else None
        if c is None:
            continue
        parts.append(c)
        owners.append(k)
        kept.append((pt, n_gpu))
    if not parts:
        return None
    sizes = np.array([len(p["dp"]) for p in parts])
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    columns = {key: np.concatenate([p[key] for p in parts]) for key in parts[0]}
    columns["segment"] = np.repeat(np.arange(len(parts)), sizes)  # which pair
    # Each pair's codes (GROUPS) after those of the pairs before it: distinct across pairs.
    for name in CODES:
        spans = np.array([int(p[name].max()) + 1 for p in parts])
        columns[name] += np.repeat(np.cumsum(spans) - spans, sizes)
    pairs = {
        name: np.array([getattr(pt, name) for pt, _ in kept], dtype=np.int64)
        for name in POINT_COLUMNS
    }
    pairs["params"] = np.array([pt.params for pt, _ in kept])
    pairs["n_gpu"] = np.array([float(n) for _, n in kept])
    rows = CandidateRows(columns, pairs)
    if not only:  # each pair's rows are its configurations, as cluster_layouts listed them
        rows.layouts = parts
    return rows, owners, starts


def _pipe_latency(ch: Choices, c: CandidateRows, tp_model, tp_ff, pp_ep) -> np.ndarray:
    """The latency on the pipeline's critical path, from each family's latency."""
    lat_pipe = tp_model + tp_ff + pp_ep
    if ch.latency_paid == "microbatch":  # every microbatch's chain, not one per step
        m = c["m"]
        lat_pipe = lat_pipe * (m[None, :] if np.ndim(lat_pipe) == 2 else m)
    return lat_pipe


def _step(
    ch: Choices, c: CandidateRows, levels: dict[str, tuple], lat_pipe: np.ndarray,
    lat_dp: np.ndarray, t_mm: np.ndarray, bubble: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """The step time (search-step-time) and the hidden network time, from each family's time
    on the two levels' links and the latencies; one value per candidate, or per placement and
    candidate (placements on the first axis) when the inputs have two axes."""
    hidden = {k: levels[k] for k in ("tp_model", "tp_ff", "pp_ep")}
    if ch.dp_overlap:
        hidden["dp"] = levels["dp"]
        t_dp_after = np.zeros_like(levels["dp"][0])
    else:
        t_dp_after = network_time({"dp": levels["dp"]}, ch.level_times)
    t_net = network_time(hidden, ch.level_times)
    two = np.ndim(t_net) == 2
    col = (lambda a: a[None, :]) if two else (lambda a: a)
    with np.errstate(invalid="ignore"):  # inf * 0 where a level is unusable; masked by callers
        t = step.step_time(
            col(t_mm), t_net, t_dp_after, lat_pipe, lat_dp, col(bubble), col(c["zero_bubble"])
        )
    return t, t_net


def lower_bound(
    ch: Choices, c: CandidateRows, costs: dict[str, tuple[_Table, np.ndarray]],
    t_mm: np.ndarray, bubble: np.ndarray,
) -> np.ndarray:  # fmt: skip
    """A lower bound on each candidate's step time over every placement: each family's least
    time on each level's links, and least latency, over its level-0 options, put through the
    step time.  Every placement takes one option per family, and the step time only grows with
    each of these times (sums and maxima of them, search-step-time and search-network-time),
    so no placement is faster; with one option per family it is the step time itself."""

    levels, lat = {}, {}
    for k, (t, back) in costs.items():  # the least over options, then gathered to every row
        least = [
            a.reshape(a.shape[0], -1).min(axis=1)[back] for a in (t.level0, t.level1, t.latency)
        ]
        levels[k], lat[k] = (least[0], least[1]), least[2]
    lat_pipe = _pipe_latency(ch, c, lat["tp_model"], lat["tp_ff"], lat["pp_ep"])
    t, _ = _step(ch, c, levels, lat_pipe, lat["dp"], t_mm, bubble)
    return np.where(np.isnan(t), np.inf, t)


def compute_bound(
    ch: Choices, c: CandidateRows, t_mm: np.ndarray, bubble: np.ndarray
) -> np.ndarray:  # fmt: skip
    """A lower bound on each candidate's step time: the step time with no time on the
    network and no latency (the step time only grows with each, search-step-time)."""
    zero = np.zeros(len(t_mm))
    levels = {k: (zero, zero) for k in ("dp", "tp_model", "tp_ff", "pp_ep")}
    t, _ = _step(ch, c, levels, zero, zero, t_mm, bubble)
    return np.where(np.isnan(t), np.inf, t)


def _least_per_segment(bound: np.ndarray, segment: np.ndarray, n_pairs: int) -> np.ndarray:
    """The rows of :data:`SEEDS` least ``bound`` in each segment (each pair's candidates, in
    one run of rows; among equal bounds, any), found by partition rather than by sorting."""
    ends = np.searchsorted(segment, np.arange(1, n_pairs + 1))
    rows, start = [], 0
    for end in ends.tolist():
        if end - start <= SEEDS:
            rows.append(np.arange(start, end))
        else:
            rows.append(start + np.argpartition(bound[start:end], SEEDS - 1)[:SEEDS])
        start = end
    return np.concatenate(rows) if rows else np.empty(0, dtype=np.int64)


def _achieve(achieved: np.ndarray, segments: np.ndarray, ev: dict[str, Any]) -> None:
    """Lower each pair's ``achieved`` step time to the fastest of the candidates ``ev``
    evaluated (``segments``: their pairs)."""
    np.minimum.at(achieved, segments, ev["t"].min(axis=1))


def evaluate(
    ch: Choices, c: CandidateRows, tables: dict[str, _Table],
    columns: dict[str, np.ndarray], t_mm: np.ndarray, bubble: np.ndarray,
) -> dict[str, Any]:  # fmt: skip
    """Every candidate (rows) on every placement (columns): the step time and its parts.

    Worked out with the placements on the first axis: each table's value on every placement
    is then a copy of whole rows of the transposed table (``take`` along its first axis), read
    in memory order, unlike a column gather; the results are returned transposed back (views)."""

    def pick(name: str, attr: str) -> np.ndarray:
        """The table's value on every placement (rows) for every candidate (columns)."""
        a = getattr(tables[name], attr)
        if name == "pp_ep":
            flat = a.reshape(a.shape[0], -1)
            return flat.T.take(columns["pp"] * a.shape[2] + columns["ep"], axis=0)
        return a.T.take(columns["dp" if name == "dp" else name], axis=0)

    levels = {
        name: (pick(name, "level0"), pick(name, "level1"))
        for name in ("dp", "tp_model", "tp_ff", "pp_ep")
    }
    lat_pipe = _pipe_latency(
        ch, c, pick("tp_model", "latency"), pick("tp_ff", "latency"), pick("pp_ep", "latency")
    )
    lat_dp = pick("dp", "latency")
    t, t_net = _step(ch, c, levels, lat_pipe, lat_dp, t_mm, bubble)
    total = sum(a + b for a, b in levels.values())
    t = np.where(np.isfinite(total), t, np.inf)
    t = np.where(np.isnan(t), np.inf, t)  # never seen; a NaN would otherwise win no argmin
    COUNTS["candidates"] += t.size
    return {
        "t": t.T, "total": total.T, "levels": {k: (a.T, b.T) for k, (a, b) in levels.items()},
        "t_net": t_net.T, "lat_pipe": lat_pipe.T, "lat_dp": lat_dp.T,
    }  # fmt: skip


def best_on(
    scn: Scenario, pt: Point, n_gpu: int, ch: Choices, only: dict[str, int] | None = None
) -> dict[str, float] | None:
    """The fastest configuration of ``n_gpu`` GPUs for model ``pt`` (``None`` if none fits);
    ``only`` restricts the candidates, e.g. ``{"pp": 64, "dp": 256}``."""
    return best_on_many(scn, [(pt, n_gpu)], ch, only)[0]


def best_on_many(
    scn: Scenario, items: list[tuple[Point, int]], ch: Choices,
    only: dict[str, int] | None = None,
) -> list[dict[str, float] | None]:  # fmt: skip
    """:func:`best_on` for several (model, cluster size) pairs: the candidates of the pairs
    whose clusters use the same GPUs of each node are costed together, in one pass of array
    operations, and each pair's fastest is found within its own candidates."""
    out: list[dict[str, float] | None] = [None] * len(items)
    groups: dict[int, list[int]] = {}
    node = int(scn["network.node_size"]) if scn["network.topology"] == "two-level" else 0
    for k, (_pt, n_gpu) in enumerate(items):
        groups.setdefault(used_node(node, n_gpu) if node else 0, []).append(k)
    for ks in groups.values():
        with trusted_arguments():  # the arrays the search builds are checked where they are
            found = _best_in_group(scn, [items[k] for k in ks], ch, only)
        for k, f in zip(ks, found, strict=True):
            out[k] = f
    return out


def placement_columns(
    scn: Scenario, n_gpu: int
) -> tuple[np.ndarray | None, dict[str, np.ndarray]] | None:
    """The level-0 options of the placements (``None``: one level) and, for each degree, the
    option each placement takes (columns of the cost tables); ``None`` when no placement
    exists."""
    table = _placement_table(scn, n_gpu)
    if table is None:
        return None, {k: np.zeros(1, dtype=np.int64) for k in DEGREES}
    if len(table) == 0:
        return None
    factors = np.unique(table)
    return factors, {k: np.searchsorted(factors, table[:, j]) for j, k in enumerate(DEGREES)}


#: Candidates times placements evaluated at once in the search's last pass: numpy's passes
#: over arrays this size stay in the processor's cache, where passes over every candidate at
#: once would go to memory for every operation (``docs/performance.md`` gives the times
#: measured, for this size and others).
BLOCK = 32768


def _evaluate_in_blocks(
    ch: Choices, c: CandidateRows, costs: dict[str, tuple[_Table, np.ndarray]],
    kept: np.ndarray, columns: dict[str, np.ndarray], t_mm: np.ndarray, bubble: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """The step time and the total network time of every candidate on every placement
    (``evaluate``'s ``t`` and ``total``), a block of candidates at a time
    (:data:`BLOCK`); ``kept``: each candidate's row in the cost tables."""
    n, width = len(t_mm), len(columns["dp"])
    t, total = np.empty((width, n)), np.empty((width, n))  # placements first, as evaluate
    size = max(1, BLOCK // width)
    for start in range(0, n, size):
        r = slice(start, min(start + size, n))
        ev = evaluate(ch, take(c, r), gather_rows(costs, kept[r]), columns, t_mm[r], bubble[r])
        t[:, r], total[:, r] = ev["t"].T, ev["total"].T
    return t.T, total.T


def _best_in_group(
    scn: Scenario, items: list[tuple[Point, int]], ch: Choices, only: dict[str, int] | None
) -> list[dict[str, float] | None]:
    out: list[dict[str, float] | None] = [None] * len(items)
    batch = list_candidates(scn, items, ch, only)
    if batch is None:
        return out
    c, owners, starts = batch
    placed = placement_columns(scn, items[0][1])
    if placed is None:
        return out
    factors, columns = placed
    t_mm, bubble = compute_times(scn, c)
    segment = np.repeat(np.arange(len(starts)), np.diff(np.append(starts, len(t_mm))))
    n_pairs = len(starts)
    if pruning() and len(t_mm) > n_pairs:
        # Two lower bounds on every candidate's step time over its placements, each put to
        # the test by the candidates of least bound in each segment, costed first on every
        # placement: no candidate whose bound exceeds a step time they achieve can be the
        # fastest, nor tie with it.  First the compute alone (no time on the network,
        # ``compute_bound``), which needs no parallelism's cost, so that the costs are
        # computed for the candidates it leaves; then each family's least time on each level
        # (``lower_bound``).
        achieved = np.full(n_pairs, np.inf)
        bound = compute_bound(ch, c, t_mm, bubble)
        seeds = _least_per_segment(bound, segment, n_pairs)
        sub = take(c, seeds)
        _achieve(achieved, segment[seeds], evaluate(
            ch, sub, gather_rows(family_costs(scn, sub, factors, ch), np.arange(len(seeds))),
            columns,
            t_mm[seeds], bubble[seeds],
        ))  # fmt: skip
        keep = np.flatnonzero(bound <= achieved[segment])
        c, t_mm, bubble, segment = take(c, keep), t_mm[keep], bubble[keep], segment[keep]
        costs = family_costs(scn, c, factors, ch)  # every family's cost on every level-0 option
        bound = lower_bound(ch, c, costs, t_mm, bubble)
        seeds = _least_per_segment(bound, segment, n_pairs)
        _achieve(achieved, segment[seeds], evaluate(
            ch, take(c, seeds), gather_rows(costs, seeds), columns, t_mm[seeds], bubble[seeds],
        ))  # fmt: skip
        kept = np.flatnonzero(bound <= achieved[segment])
        c, t_mm, bubble, segment = take(c, kept), t_mm[kept], bubble[kept], segment[kept]
        starts = np.searchsorted(segment, np.arange(n_pairs))
    else:
        costs = family_costs(scn, c, factors, ch)
        kept = np.arange(len(t_mm))
    t, total = _evaluate_in_blocks(ch, c, costs, kept, columns, t_mm, bubble)
    # Each pair's fastest; among equally fast ones the least network time, then the first.
    # Only the candidates that reach their pair's fastest on some placement are looked at.
    row_min = t.min(axis=1)
    fastest = np.minimum.reduceat(row_min, starts)
    tied = np.flatnonzero(row_min == fastest[segment])
    tied_segment = segment[tied]
    is_fastest = t[tied] == fastest[tied_segment][:, None]
    least = np.full(n_pairs, np.inf)
    np.minimum.at(least, tied_segment, np.where(is_fastest, total[tied], np.inf).min(axis=1))
    hit = is_fastest & (total[tied] == least[tied_segment][:, None])
    rows = np.flatnonzero(hit.any(axis=1))
    segs, first = np.unique(tied_segment[rows], return_index=True)
    # The winners' times, part by part, evaluated again for them alone.
    won = tied[rows[first]]
    ev = evaluate(ch, take(c, won), gather_rows(costs, kept[won]), columns, t_mm[won], bubble[won])
    levels = ev["levels"]
    parts = {
        "t_dp": levels["dp"], "t_tp": tuple(
            levels["tp_model"][i] + levels["tp_ff"][i] for i in (0, 1)
        ), "t_pp_ep": levels["pp_ep"],
    }  # fmt: skip
    for w, (s, r) in enumerate(zip(segs, won, strict=True)):
        j = int(np.argmax(hit[rows[first[w]]]))
        if not np.isfinite(fastest[s]):
            continue
        keys = ("tp_model", "tp_ff", "dp", "pp", "ep", "m", "v")
        found = {key: float(c[key][r]) for key in keys}
        found["zero_bubble"] = float(c["zero_bubble"][r])
        found["nanobatch"] = float(c["nanobatch"][r])
        found.update({k: float(a[w, j] + b[w, j]) for k, (a, b) in parts.items()})
        lat_pipe, lat_dp = ev["lat_pipe"], ev["lat_dp"]
        found.update(
            t_step=float(t[r, j]), t_matmul=float(t_mm[r]), t_network=float(ev["t_net"][w, j]),
            t_latency=float(lat_pipe[w, j] + lat_dp[w, j]), t_latency_pipe=float(lat_pipe[w, j]),
            t_latency_dp=float(lat_dp[w, j]), bubble=float(bubble[r]),
            t_network_total=float(total[r, j]),
        )  # fmt: skip
        for name in DEGREES:
            found[f"{name}_intra"] = (
                found[name] if factors is None else float(factors[columns[name][j]])
            )
        out[owners[s]] = found
    return out


def optimal(scn: Scenario, pt: Point, ch: Choices | None = None) -> dict[str, Any]:
    """The smallest cluster ``S 2^i`` whose best configuration trains ``pt`` within the
    training time, and that configuration; ``feasible`` is False (with the fastest
    configuration found) when none does."""
    return optimal_many(scn, [pt], ch)[0]


def optimal_many(
    scn: Scenario, pts: list[Point], ch: Choices | None = None
) -> list[dict[str, Any]]:  # fmt: skip
    """:func:`optimal` for several models: each doubles its own cluster, and the clusters that
    every model still searching tries next are costed together (:func:`best_on_many`)."""
    scn = require_scenario(scn)
    ch = ch or Choices.of(scn)
    budget = scn.train_seconds
    out: list[dict[str, Any] | None] = [None] * len(pts)
    state: dict[int, dict[str, Any]] = {}
    for k, pt in enumerate(pts):
        steps = scn["training.tokens_per_param"] * pt.params / pt.batch
        # No cluster beats the kernel-latency floor: every GPU runs six matmul kernels per
        # layer of its stage per microbatch, and there are at least as many microbatches as
        # stages.
        floor = len(matmul.KINDS) * 2 * pt.layers * float(scn["hardware.kernel_latency"])
        # Nor the effective utilization: the smallest cluster worth trying.
        least = pt.compute / (
            budget * scn.peak_flops * float(scn["hardware.effective_utilization"])
        )  # fmt: skip
        first = max(0, math.ceil(math.log2(max(least / pt.experts, 1.0)) - 1e-9))
        if steps * floor > budget:
            out[k] = _infeasible(scn, pt, None)
        else:
            state[k] = {"steps": steps, "i": first, "end": first + MAX_DOUBLINGS,
                        "best": None, "stale": 0}  # fmt: skip
    while state:
        # Each model still searching tries its next cluster; when few are left, the next
        # few clusters of each are costed at once (one pass of array operations costs about
        # the same for a few pairs as for one).  They are then taken in order, as one by
        # one, and those after the cluster where a model stops are dropped: the same result.
        ahead = max(1, min(LOOKAHEAD, LOOKAHEAD_PAIRS // len(state)))
        tries = [
            (k, st["i"] + j)
            for k, st in state.items()
            for j in range(min(ahead, st["end"] - st["i"]))
        ]  # fmt: skip
        found_all = best_on_many(scn, [(pts[k], pts[k].experts * 2**i) for k, i in tries], ch)
        for (k, i), found in zip(tries, found_all, strict=True):
            st, pt = state.get(k), pts[k]
            if st is None or i != st["i"]:
                continue  # tried ahead of a cluster where the model stopped
            n_gpu = pt.experts * 2**i
            st["i"] += 1
            if found is not None:
                found["n_gpu"] = float(n_gpu)
                found["train_seconds"] = st["steps"] * found["t_step"]
                if found["train_seconds"] <= budget:
                    found["feasible"] = True
                    out[k] = _finish(scn, pt, found)
                    del state[k]
                    continue
                best = st["best"]
                if best is None or found["t_step"] < (1 - MIN_GAIN) * best["t_step"]:
                    st["stale"] = 0
                else:
                    st["stale"] += 1
                if best is None or found["t_step"] < best["t_step"]:
                    st["best"] = found
                if st["stale"] >= PATIENCE:
                    out[k] = _infeasible(scn, pt, st["best"])
                    del state[k]
                    continue
            if st["i"] >= st["end"]:
                out[k] = _infeasible(scn, pt, st["best"])
                del state[k]
    return out  # type: ignore[return-value]


def _infeasible(scn: Scenario, pt: Point, best: dict[str, Any] | None) -> dict[str, Any]:
    """No cluster trains the model in time: no configuration and no utilization (the fastest
    step the search saw depends on where it gave up, so it is kept only as a diagnostic)."""
    fastest = best["t_step"] if best is not None else math.nan
    return _finish(
        scn, pt, {"feasible": False, "n_gpu": math.nan, "t_step": math.nan,
                  "fastest_step_seen": fastest},
    )  # fmt: skip


def _finish(scn: Scenario, pt: Point, found: dict[str, Any]) -> dict[str, Any]:
    out = {
        "training_flop": pt.compute, "n_params_total": pt.params, "layers": pt.layers,
        "d_model": pt.d_model, "sparsity": pt.experts, "batch_tokens": pt.batch,
    }  # fmt: skip
    out.update(found)
    t = found.get("t_step", math.nan)
    out["utilization"] = (
        step.utilization(scn, pt.active, pt.batch, found["n_gpu"], t)
        if found.get("n_gpu") == found.get("n_gpu") and t == t
        else math.nan
    )
    return out


# --- What a result means --------------------------------------------------------------------
#: What cuts a step's utilization below the effective utilization, in the order of the table.
LOSSES = ("matmul", "bandwidth", "bubble", "latency")
LOSS_LABELS = {
    "matmul": "matmuls below the effective rate (memory-bound)",
    "bandwidth": "network bandwidth not hidden",
    "bubble": "pipeline bubble",
    "latency": "latency",
    "none": "nothing (full rate)",
    "infeasible": "no configuration found",
}
#: A loss under this share of the step does not bind.
BINDING_SHARE = 0.01


def losses(scn: Scenario, r: dict[str, Any]) -> dict[str, Any]:
    """Seconds of a result's step lost to each cause of :data:`LOSSES`, and the one that binds
    (the largest, or ``"none"`` when every loss is under :data:`BINDING_SHARE` of the step).

    The step splits exactly into the ideal matmul time at the effective utilization and the
    four losses: matmuls slower than that, bandwidth time not hidden behind them (and the
    gradient all-reduce when it follows the pipeline), the bubble's stretch of the busy time,
    and exposed latency."""
    t = r.get("t_step", math.nan)
    if not (t == t and r.get("n_gpu") == r.get("n_gpu")):
        return {f"loss_{k}": math.nan for k in LOSSES} | {"binding": "infeasible"}
    # The step's useful work at the effective rate: utilization is useful FLOP over the
    # cluster's peak FLOP in the step (search-utilization), so this is that work's time.
    ideal = r["utilization"] * t / float(scn["hardware.effective_utilization"])
    busy = max(r["t_matmul"], r["t_network"])
    stretched = busy / (1 - r["bubble"])
    dp_after = 0.0 if Choices.of(scn).dp_overlap else r["t_dp"]
    out = {
        "loss_matmul": r["t_matmul"] - ideal,
        "loss_bandwidth": busy - r["t_matmul"] + dp_after,
        "loss_bubble": stretched - busy,
        "loss_latency": t - stretched - dp_after,
    }
    worst = max(LOSSES, key=lambda k: out[f"loss_{k}"])
    out["binding"] = worst if out[f"loss_{worst}"] > BINDING_SHARE * t else "none"
    return out
