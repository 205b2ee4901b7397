"""The search for the best parallelism at every model size (Erdil & Schneider-Joseph 2024).

For one model of the sweep and one cluster of ``N`` GPUs, every candidate configuration is
enumerated at once as numpy arrays: the factorization ``N / N_EP = N_TP N_DP N_PP`` with the
paper's divisibility rules, the 2D split of ``N_TP``, 1F1B with the smallest valid microbatch
counts or zero-bubble, and every placement of the five degrees on the two network levels.  Each
parallelism's cost comes from its own chapter's module (the lambdified sympy formulas); the
step time composes them as :mod:`dmlimits.costs.step` derives.  The best candidate is the fastest,
ties going to less network time; the cluster is the smallest ``S 2^i`` whose best configuration
trains the model within the training time (Erdil & Schneider-Joseph 2024).

The per-level costs of a candidate depend only on that parallelism's own level-0 factor, so
each is computed once per option and the placements are gathered from those tables.  Each
level's bandwidth time comes from the derivation's own term for that level, in one evaluation
(``*_level_times`` of the cost modules).

Five things make it fast without changing a result (tests/test_search_pruning.py):

* the candidates of every model still searching are costed together, one pass of array
  operations per doubling of the clusters (:func:`optimal_many`, :func:`best_on_many`);
* each parallelism's cost, and the matmuls', is computed once per distinct combination of the
  degrees it depends on (``_GROUPS``), found without sorting from codes given as the
  configurations are listed;
* two lower bounds on each candidate's step time over its placements prune the candidates
  that cannot beat what those of least bound achieve (:data:`PRUNE_ENV`): first its compute
  alone (``_compute_bound``), before any parallelism is costed, so that the costs are computed
  for fewer candidates; then each parallelism's least time on each level (``_lower_bound``);
* the cost modules take the arrays the search built as given, without checking each element
  again (:func:`dmlimits.core.checks.trusted_arguments`);
* a cluster's configurations, and their matmul times and bubbles under the same hardware
  (:func:`dmlimits.costs.matmul.hardware_key`), are kept for every scenario that asks for them
  again: the presets and the what-if variants that differ in the network or the latency
  share them.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import multiprocessing
import os
import time
from collections import OrderedDict
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from functools import cache, lru_cache
from typing import Any

import numpy as np

from dmlimits.core import published
from dmlimits.core.checks import require_scenario, trusted_arguments
from dmlimits.core.formula_cache import closure_fingerprint
from dmlimits.core.formula_cache import library_fingerprint as fingerprint
from dmlimits.core.plumbing import cache_folder, digest, read_json, switched_on, write_json
from dmlimits.core.scenario import PAPER_PRESETS, Scenario
from dmlimits.costs import closed_forms, matmul, model
from dmlimits.costs import collectives as coll
from dmlimits.costs import data_parallel as dpm
from dmlimits.costs import expert_parallel as epm
from dmlimits.costs import pipeline as ppm
from dmlimits.costs import step as stepm
from dmlimits.costs import tensor_parallel as tpm

#: The order of the five degrees in the placement tables.
DEGREES = ("dp", "tp_model", "tp_ff", "pp", "ep")
# The search gives up on a model when PATIENCE doublings of the cluster in a row each shorten the
# step by less than MIN_GAIN (the step then creeps towards its latency floors), or after
# MAX_DOUBLINGS; it reports the fastest configuration it saw, marked infeasible.
PATIENCE = 3
MIN_GAIN = 0.01
MAX_DOUBLINGS = 48
#: When few models are still searching, each tries up to this many clusters at once
#: (:func:`optimal_many`); the result is the same as one cluster at a time.
LOOKAHEAD = 4
#: How many (model, cluster) pairs a pass of the search costs, about, when the models still
#: searching look ahead (:data:`LOOKAHEAD`).
LOOKAHEAD_PAIRS = 8
#: Candidates evaluated (configurations times placements) since the process started: the bench
#: script's measure of throughput.
COUNTS = {"candidates": 0}


@dataclass(frozen=True)
class Choices:
    """The modelling choices the search makes where the paper's description leaves room; each
    is a ``search.*`` key of the scenario (``python -m dmlimits scenarios --keys``)."""

    level_times: str  # "links", "max" or "sum": how the two levels' bandwidth times combine
    dp_overlap: bool  # the gradient all-reduce overlaps the pipeline's compute
    microbatch_unit: str  # "token" or "sequence": what a microbatch is counted in
    microbatch_candidates: int  # 1F1B tries this many of the smallest valid counts
    zero_bubble_min: str  # "2n" or "2n-1": the fewest microbatches zero-bubble needs
    zero_bubble: bool  # whether zero-bubble pipelining is tried at all
    expert_latency: str  # "highest" or "expected"
    tp_split_rule: str  # "exact" or "isqrt"
    latency_paid: str = "step"  # "step" or "microbatch"

    @classmethod
    def of(cls, scn: Scenario) -> Choices:
        v = scn.values
        return cls(
            level_times=v["search.level_times"],
            dp_overlap=bool(v["search.dp_overlap"]),
            microbatch_unit=v["search.microbatch_unit"],
            microbatch_candidates=int(v["search.microbatch_candidates"]),
            zero_bubble_min=v["search.zero_bubble_min"],
            zero_bubble=bool(v["search.zero_bubble"]),
            expert_latency=v["search.expert_latency"],
            tp_split_rule=v["search.tp_split_rule"],
            latency_paid=v["search.latency_paid"],
        )


# --- Small integer helpers -----------------------------------------------------------------
@cache
def _divisors(n: int) -> tuple[int, ...]:
    """Divisors of ``n``, whose odd part is small (cluster sizes and batches are f 2^i)."""
    a = _two_adic(n)
    odd = n >> a
    small = [k for k in range(1, math.isqrt(odd) + 1) if odd % k == 0]
    odd_divs = {*small, *(odd // k for k in small)}
    return tuple(sorted(d << j for d in odd_divs for j in range(a + 1)))


def _two_adic(n: int) -> int:
    return (n & -n).bit_length() - 1


@cache
def placements(node: int) -> np.ndarray:
    """Every way to give the five degrees level-0 factors whose product is ``node``: an
    ``(n, 5)`` array of factors in the order of :data:`DEGREES`."""
    divs = _divisors(node)
    rows = [c for c in itertools.product(divs, repeat=len(DEGREES)) if math.prod(c) == node]
    return np.array(rows, dtype=np.int64).reshape(-1, len(DEGREES))


@cache
def _microbatches(pp: int, units: int, zero_bubble: bool, count: int, rule: str) -> tuple:
    """:func:`dmlimits.costs.pipeline.valid_microbatches`, remembered: a sweep asks for the same
    counts hundreds of thousands of times."""
    return ppm.valid_microbatches(pp, units, zero_bubble, count, rule)


# --- Candidates ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Point:
    """One model of the sweep."""

    d_model: int
    d_ff: int
    layers: int
    experts: int
    batch: int  # tokens
    params: float
    active: float
    compute: float


def points(scn: Scenario) -> list[Point]:
    sh = model.shapes(scn)
    return [
        Point(int(dm), int(df), int(L), int(S), int(B), float(p), float(a), float(c))
        for dm, df, L, S, B, p, a, c in zip(
            sh.d_model, sh.d_ff, sh.layers, sh.experts, sh.batch, sh.params,
            sh.active_params, sh.compute, strict=True,
        )
    ]  # fmt: skip


@cache
def _splits(tp: int, rule: str, d_model: int, d_ff: int) -> tuple[int, ...]:
    """The ``N_TP,ff`` of every 2D split of ``tp`` that the rule allows and the shape divides."""
    return tuple(f for m, f in tpm.tp_splits(tp, rule) if d_model % m == 0 and d_ff % f == 0)


@cache
def _schedule_memo(count: int, zero_bubble: bool, zb_min: str) -> dict[tuple[int, int], tuple]:
    """The schedules of :func:`_schedules` already listed under these choices, by (stages,
    units): a sweep asks for the same ones hundreds of thousands of times."""
    return {}


def _schedules(pp: int, units: int, count: int, zero_bubble: bool, zb_min: str) -> tuple:
    """Every schedule tried for ``pp`` stages and ``units`` microbatch units per pipeline, as
    (microbatches, zero bubble) one after the other in one flat tuple: 1F1B's ``count``
    smallest valid counts, then zero-bubble's (:class:`Choices`)."""
    memo = _schedule_memo(count, zero_bubble, zb_min)
    found = memo.get((pp, units))
    if found is None:
        out = [(m, 0) for m in _microbatches(pp, units, False, max(1, count), "2n")]
        if zero_bubble and pp > 1:
            out.extend((m, 1) for m in _microbatches(pp, units, True, 1, zb_min))
        found = memo[pp, units] = tuple(itertools.chain.from_iterable(out))
    return found


def _base(scn: Scenario, pt: Point, n_gpu: int, ch: Choices) -> dict[str, np.ndarray] | None:
    """Every configuration of ``n_gpu`` GPUs before placement on the network levels (arrays
    shared with other callers: read, never written)."""
    return _bases(scn, [(pt, n_gpu)], ch)[0]


def _bases(
    scn: Scenario, items: list[tuple[Point, int]], ch: Choices
) -> list[dict[str, np.ndarray] | None]:  # fmt: skip
    """:func:`_base` of several (model, cluster) pairs, whose memory is checked at once.

    The scenario decides which data-parallel degrees fit in memory; the configurations follow
    from those degrees, the model, the cluster and the choices alone (:func:`_layouts`), so
    scenarios that differ in anything else (the network, most often) share them."""
    unit = ppm.unit_tokens(ch.microbatch_unit, scn["model.sequence_length"])
    listed: list[tuple[int, int, tuple[int, ...]]] = []  # (item, per_pipe, degrees)
    for k, (pt, n_gpu) in enumerate(items):
        if pt.batch % (pt.experts * unit) == 0:
            per_pipe = pt.batch // (pt.experts * unit)  # microbatch units per replica, times dp
            listed.append((k, per_pipe, _degrees(n_gpu // math.gcd(n_gpu, pt.experts), per_pipe)))
    out: list[dict[str, np.ndarray] | None] = [None] * len(items)
    if not listed:
        return out
    # Whether the replicas and the optimizer state fit depends on the data-parallel degree
    # alone: the degrees that do not fit are left out before their configurations are listed.
    sizes = [len(d) for _, _, d in listed]
    degrees = np.fromiter(itertools.chain.from_iterable(d for _, _, d in listed), np.int64)
    params = np.repeat([items[k][0].params for k, _, _ in listed], sizes)
    n_gpus = np.repeat([float(items[k][1]) for k, _, _ in listed], sizes)
    fits = np.atleast_1d(dpm.memory_fits(scn, params, degrees, n_gpus))
    at = 0
    for (k, per_pipe, _), size in zip(listed, sizes, strict=True):
        fitting = tuple(degrees[at : at + size][fits[at : at + size]].tolist())
        at += size
        if fitting:
            out[k] = _layouts(items[k][0], items[k][1], ch, per_pipe, fitting)
    return out


@cache
def _degrees(rest: int, per_pipe: int) -> tuple[int, ...]:
    """The data-parallel degrees of a cluster with ``rest`` GPUs left once the experts are
    placed, ascending: they divide it and the microbatch units ``per_pipe`` (so a degree is at
    most the batch, however large the cluster)."""
    return tuple(d for d in _divisors(rest) if per_pipe % d == 0)


#: Configurations kept per process by ``_layouts`` (a sweep of the sixteen presets makes
#: about 1,200; each holds at most a few thousand rows).
LAYOUTS_KEPT = 4096


@lru_cache(LAYOUTS_KEPT)
def _layouts(
    pt: Point, n_gpu: int, ch: Choices, per_pipe: int, fitting: tuple[int, ...]
) -> dict[str, np.ndarray] | None:
    """The configurations of :func:`_base`, from the data-parallel degrees that fit.

    The (tensor, data) degree pairs are listed in Python (a few hundred at most); each pair's
    2D splits times its schedules are then laid out with array operations, in the order of a
    loop over the pairs, then the splits, then the schedules.  The arrays are made read-only:
    every caller of a cached result gets the same ones."""
    ep = math.gcd(n_gpu, pt.experts)
    rest = n_gpu // ep
    width = pt.d_model * pt.d_ff
    # The (tensor, data) degree pairs, tensor-major and each ascending: the tensor degree
    # divides the layer widths and has a 2D split, the data degree fits, and the pipeline
    # degree that is left divides the layers.
    tps, splits = [], []  # with each one's 2D splits
    for tp in _divisors(rest):
        if width % tp == 0 and (split := _splits(tp, ch.tp_split_rule, pt.d_model, pt.d_ff)):
            tps.append(tp)
            splits.append(split)
    if not tps:
        return None
    # A cluster, and so what is left of it once the tensor degree is taken, can exceed 64
    # bits: then Python integers in object arrays.  The degrees of a pair found fit in 64 bits
    # (the tensor degree divides the layer widths, the data degree the batch, the pipeline
    # degree the layers), so the pairs become int64 arrays below.
    kind = np.int64 if rest < 2**62 else object
    tp_col = np.array(tps, dtype=kind)[:, None]
    dp_row = np.array(fitting, dtype=kind)[None, :]
    per_tp = rest // tp_col
    ok = (per_tp % dp_row == 0).astype(bool)
    pp_all = np.where(ok, per_tp // dp_row, 1)
    ok &= (pt.layers % pp_all == 0).astype(bool)
    ti, di = np.nonzero(ok)
    options = (ch.microbatch_candidates, ch.zero_bubble, ch.zero_bubble_min)
    get = _schedule_memo(*options).get  # (a dict lookup before the call)
    schedule_lists = [
        get((pp, units)) or _schedules(pp, units, *options)
        for pp, units in zip(
            pp_all[ti, di].tolist(), (per_pipe // dp_row[0, di]).tolist(), strict=True
        )
    ]  # fmt: skip
    n_sched = np.fromiter(map(len, schedule_lists), dtype=np.int64, count=len(ti)) // 2
    has = np.flatnonzero(n_sched)  # the (tensor, data) pairs with a schedule
    if not len(has):
        return None
    if len(has) < len(ti):
        ti, di, n_sched = ti[has], di[has], n_sched[has]
        schedule_lists = [schedule_lists[k] for k in has.tolist()]
    split_lists = [splits[k] for k in ti.tolist()]
    n_split = np.fromiter(map(len, splits), dtype=np.int64, count=len(tps))[ti]
    tp = np.array(tps, dtype=np.int64)[ti]
    dp = np.array(fitting, dtype=np.int64)[di]
    pp = pp_all[ti, di].astype(np.int64)
    n_pairs = len(ti)
    per_pair = n_split * n_sched
    pair = np.repeat(np.arange(n_pairs), per_pair)
    local = np.arange(len(pair)) - np.repeat(np.cumsum(per_pair) - per_pair, per_pair)
    split_at = np.cumsum(n_split) - n_split
    sched_at = np.cumsum(n_sched) - n_sched
    f_all = np.fromiter(itertools.chain.from_iterable(split_lists), dtype=np.int64)
    s_all = np.fromiter(itertools.chain.from_iterable(schedule_lists), dtype=np.int64).reshape(
        -1, 2
    )
    split = split_at[pair] + local // n_sched[pair]  # which (pair, 2D split)
    f_ = f_all[split]
    schedule = sched_at[pair] + local % n_sched[pair]  # which (pair, schedule)
    sched = s_all[schedule]
    out = {
        "tp_model": tp[pair] // f_, "tp_ff": f_, "dp": dp[pair], "pp": pp[pair],
        "ep": np.full(len(pair), ep, dtype=np.int64), "m": sched[:, 0],
        "zero_bubble": sched[:, 1],
    }  # fmt: skip
    out["v"] = np.where((out["zero_bubble"] == 0) & (out["pp"] > 1), pt.layers // out["pp"], 1)
    out["nanobatch"] = pt.batch / (out["dp"] * out["m"] * pt.experts)
    # The codes of _GROUPS, from the pairs, their splits and their schedules (a few hundred
    # each): the candidates' codes are gathered from them.
    of_split = np.repeat(np.arange(n_pairs), n_split)
    _, split_code = np.unique(
        (tp[of_split] // f_all) * (pt.d_ff + 1) + f_all, return_inverse=True
    )  # fmt: skip
    tokens, tokens_code = np.unique(
        dp[np.repeat(np.arange(n_pairs), n_sched)] * s_all[:, 0], return_inverse=True
    )  # fmt: skip
    _, pp_code = np.unique(pp, return_inverse=True)
    out.update(
        code_mm=split_code.ravel()[split] * len(tokens) + tokens_code.ravel()[schedule],
        code_dp=di[pair],  # the data-parallel degree's place among those that fit
        code_tp=split,
        code_pp_ep=2 * pp_code.ravel()[pair] + (out["v"] != 1),
    )
    for column in out.values():
        column.flags.writeable = False
    return out


#: The columns of a configuration each cost depends on, besides its (model, cluster) pair:
#: the matmuls on the 2D split and the tokens of a microbatch; the data-parallel all-reduce on
#: its degree; the tensor-parallel all-reduces on the 2D split, the tokens of a replica and the
#: layers of a stage; the pipeline and expert transfers on the stages and each stage's chunks.
#: Each is computed once per distinct combination and gathered back.
#:
#: The codes come from how the configurations are listed (:func:`_layouts`): small
#: non-negative integers per (model, cluster) pair, equal where the group's columns are equal
#: (two codes may also stand for the same values: they are then costed twice, alike).  A
#: (tensor, data, pipeline) degree triple and one of its 2D splits fix the tensor-parallel
#: group's columns; a pipeline degree and whether its stages are split into chunks fix the
#: pipeline's; the data-parallel degree is one of those that fit; the matmuls' are the 2D
#: split and the data-parallel degree times the microbatches (the tokens of a microbatch).  A
#: search then finds the distinct combinations of many pairs' codes without sorting
#: (:func:`_distinct_codes`).
_GROUPS = {
    "mm": ("tp_model", "tp_ff", "nanobatch"),
    "dp": ("dp",),
    "tp": ("dp", "tp_model", "tp_ff", "pp"),
    "pp_ep": ("pp", "v"),
}
#: The code columns of a configuration, one per group.
CODES = tuple(f"code_{g}" for g in _GROUPS)


def _distinct_codes(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A row of each distinct code and each row's index among those rows: the ``first`` and
    ``inverse`` of :func:`numpy.unique` (in the same ascending order of code), found in time
    linear in the rows and the largest code, without sorting.  Any row of a code stands for
    it, as every row of a code has the same values (:data:`_GROUPS`)."""
    n = len(codes)
    space = int(codes.max()) + 1 if n else 0
    present = np.zeros(space, dtype=bool)
    present[codes] = True
    ids = np.flatnonzero(present)
    index = np.empty(space, dtype=np.int64)
    index[ids] = np.arange(len(ids))
    row = np.empty(space, dtype=np.int64)
    row[codes] = np.arange(n)
    return row[ids], index[codes]


#: Matmul seconds per step and bubble of each configuration of a cluster, kept under (its
#: configurations, :func:`dmlimits.costs.matmul.hardware_key`): scenarios that differ in anything
#: else (the network, most often) share them, as they share the configurations.  At most
#: :data:`LAYOUTS_KEPT` clusters; each entry holds its configurations, so that their ``id``
#: stays theirs.
_COMPUTE_KEPT: OrderedDict[tuple, tuple[Any, np.ndarray, np.ndarray]] = OrderedDict()


def _compute_times(scn: Scenario, c: _Rows) -> tuple[np.ndarray, np.ndarray]:
    """Each candidate's matmul seconds per step and its pipeline bubble (none for zero-bubble
    schedules): those of a batch's clusters already computed under the same hardware are
    read from :data:`_COMPUTE_KEPT`, the others computed together."""
    if c.layouts is None:
        return _compute_rows(scn, c)
    hw = matmul.hardware_key(scn)
    keys = [(id(x), hw) for x in c.layouts]
    missing = [k for k, key in enumerate(keys) if key not in _COMPUTE_KEPT]
    if missing:
        sizes = [len(x["dp"]) for x in c.layouts]
        ends = np.cumsum(sizes)
        rows = np.concatenate([np.arange(ends[k] - sizes[k], ends[k]) for k in missing])
        t_mm, bubble = _compute_rows(scn, c.take(rows))
        at = 0
        for k in missing:
            part = slice(at, at + sizes[k])
            _COMPUTE_KEPT[keys[k]] = (c.layouts[k], t_mm[part], bubble[part])
            at += sizes[k]
        while len(_COMPUTE_KEPT) > LAYOUTS_KEPT:
            _COMPUTE_KEPT.popitem(last=False)
    kept = []
    for key in keys:
        _COMPUTE_KEPT.move_to_end(key)
        kept.append(_COMPUTE_KEPT[key])
    return np.concatenate([x[1] for x in kept]), np.concatenate([x[2] for x in kept])


def _compute_rows(scn: Scenario, c: _Rows) -> tuple[np.ndarray, np.ndarray]:
    bubble = ppm.bubble_fraction(c["pp"], c["m"], c["v"], zero_bubble=False)
    return _matmul_time(scn, c), np.where(c["zero_bubble"] == 1, 0.0, bubble)


def _matmul_time(scn: Scenario, c: _Rows) -> np.ndarray:
    """Seconds of a step's matmuls on one GPU: six per layer per microbatch (two weight
    matrices, three kinds each), for its layers and experts."""
    first, back = _distinct_codes(c["code_mm"])
    u = _take({k: c[k] for k in ("tp_model", "tp_ff", "nanobatch", "segment")}, first)
    pairs = c.pairs  # (c is a _Rows)
    a = pairs["d_model"][u["segment"]] / u["tp_model"]
    f = pairs["d_ff"][u["segment"]] / u["tp_ff"]
    b = u["nanobatch"]
    six = sum(
        matmul.matmul_time(scn, x1, x2, b, kind)
        for kind in matmul.KINDS
        for x1, x2 in ((f, a), (a, f))
    )[back]
    segment = c["segment"]
    layers, experts = pairs["layers"][segment], pairs["experts"][segment]
    return (layers / c["pp"]) * (experts / c["ep"]) * c["m"] * six


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
    scn: Scenario, family: str, u: _Rows, factors: np.ndarray | None,
    ch: Choices,
) -> dict[str, tuple[np.ndarray, coll.LevelTimes]]:  # fmt: skip
    """(valid, each level's bandwidth time and the latency) of a family's parallelisms for
    every level-0 option, at the distinct rows ``u``.  Under one level (a flat or unlimited
    network) all the bandwidth time is on level 0 and none on level 1."""
    flat = scn["network.topology"] != "two-level"
    if family == "dp":
        i, o, ok = _options(u["dp"], factors)
        t = dpm.dp_level_times(scn, u["params"][:, None], i, o, u["n_gpu"][:, None])
        return {"dp": (ok, _broadcast_levels(t, flat))}
    if family == "pp_ep":
        ok, t = _pp_ep_distinct(scn, u, factors, ch)
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
            ok, coll.LevelTimes(
                t.level0 * stage_layers, t.level1 * stage_layers, t.latency * u["layers"][:, None]
            ),
        )  # fmt: skip
    return out


def _broadcast_levels(t: coll.LevelTimes, flat: bool) -> coll.LevelTimes:
    """``t``'s three times as arrays of one shape; under one level, all the bandwidth time on
    level 0 (the sum of the two terms, of which the second is then nothing)."""
    if flat:
        t = coll.LevelTimes(t.level0 + t.level1, np.zeros_like(t.level1), t.latency)
    return coll.LevelTimes(*np.broadcast_arrays(*t))


def _pp_ep_distinct(
    scn: Scenario, c: _Rows, factors: np.ndarray | None, ch: Choices
) -> tuple[np.ndarray, coll.LevelTimes]:
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
    return ok, coll.LevelTimes(*(cross[0][k] + cross[1][k] + only[k] for k in range(3)))


def _costs(
    scn: Scenario, c: _Rows, factors: np.ndarray | None, ch: Choices
) -> dict[str, tuple[_Table, np.ndarray]]:
    """Each parallelism's table, one row per distinct combination of what it depends on
    (:data:`_GROUPS`), and each candidate's row in it."""
    out = {}
    for family in ("dp", "tp", "pp_ep"):
        first, back = _distinct_codes(c["code_" + family])
        for name, (ok, t) in _family_times(scn, family, _take(c, first), factors, ch).items():
            table = _Table(*(np.where(ok, x, np.inf) for x in t))
            out[name] = (table, back)
    return out


def _rows(costs: dict[str, tuple[_Table, np.ndarray]], rows: np.ndarray) -> dict[str, _Table]:
    """The tables of :func:`_costs` at candidates ``rows``, one row each."""
    out = {}
    for name, (t, back) in costs.items():
        at = back[rows]
        out[name] = _Table(t.level0[at], t.level1[at], t.latency[at])
    return out


def _network_time(parts: dict[str, tuple[np.ndarray, np.ndarray]], rule: str) -> np.ndarray:
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
    return stepm.network_time(sum(a for a, _ in tp), pe[0], sum(b for _, b in tp), pe[1])


# --- The search ------------------------------------------------------------------------------
def used_node(node: int, n_gpu: int) -> int:
    """GPUs of each NVLink node a cluster of ``n_gpu`` uses: the whole node when the cluster
    fills whole nodes, else the largest divisor of ``n_gpu`` that fits in one.  A cluster of
    ``2^i`` GPUs on 72-GPU racks (GB200 NVL72) uses 64 GPUs of each rack's NVLink domain."""
    if n_gpu <= node:
        return n_gpu
    if n_gpu % node == 0:
        return node
    return max(d for d in _divisors(n_gpu) if d <= node)


def _placement_table(scn: Scenario, n_gpu: int) -> np.ndarray | None:
    """Level-0 factors of the five degrees, one row per placement; ``None`` when there is one
    level (a flat or unlimited network)."""
    if scn["network.topology"] != "two-level":
        return None
    return placements(used_node(int(scn["network.node_size"]), n_gpu))


#: The search prunes, before costing their placements, the candidates whose lower bound on the
#: step time (``_compute_bound``, then ``_lower_bound``) exceeds a step time another candidate
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


#: The columns of a model of the sweep that the candidates of a batch read through their pair,
#: so that the candidates of several (model, cluster) pairs are costed in one pass of array
#: operations.
_POINT_COLUMNS = ("d_model", "d_ff", "layers", "experts", "batch")


class _Rows:
    """Some of the candidates of a batch: ``rows[name]`` is one value per candidate.  The
    batch's columns are kept whole, with which of their rows these candidates are; a column is
    gathered when it is first asked for, so that the search's cuts copy only the columns read
    after them.  The columns of the candidates' (model, cluster) pairs
    (:data:`_POINT_COLUMNS`, ``params``, ``n_gpu``) are kept once per pair (``pairs``) and
    gathered through ``segment``.  ``layouts``: each pair's configurations as
    :func:`_layouts` listed them, when the rows are all of them, pair after pair (the key of
    their kept matmul times), else ``None``."""

    __slots__ = ("_columns", "_rows", "_taken", "layouts", "pairs")

    def __init__(
        self, columns: dict[str, np.ndarray], pairs: dict[str, np.ndarray], rows: Any = None
    ) -> None:
        self._columns = columns
        self._rows = rows  # None: every row; else an index array or a slice
        self._taken: dict[str, np.ndarray] = {}
        self.pairs = pairs
        # Each pair's configurations (_layouts), when these are all of them, in order.
        self.layouts: list[dict[str, np.ndarray]] | None = None

    def __getitem__(self, key: str) -> np.ndarray:
        got = self._taken.get(key)
        if got is None:
            if key in self._columns:
                got = self._columns[key]
                if self._rows is not None:
                    got = got[self._rows]
            elif key in self.pairs:
                got = self.pairs[key][self["segment"]]
            else:
                raise KeyError(key)
            self._taken[key] = got
        return got

    def __contains__(self, key: object) -> bool:
        return key in self._columns or key in self.pairs

    def keys(self) -> Any:
        return self._columns.keys()

    def take(self, rows: Any) -> _Rows:
        """The candidates ``rows`` of these (an index array or a slice)."""
        if self._rows is None:
            return _Rows(self._columns, self.pairs, rows)
        if isinstance(self._rows, slice):
            start, stop, step = self._rows.indices(len(self._columns["segment"]))
            return _Rows(self._columns, self.pairs, np.arange(start, stop, step)[rows])
        return _Rows(self._columns, self.pairs, self._rows[rows])


def _candidates(
    scn: Scenario, items: list[tuple[Point, int]], ch: Choices, only: dict[str, int] | None
) -> tuple[_Rows, list[int], np.ndarray] | None:
    """Every candidate of every (model, cluster) pair, concatenated, with the pairs' columns
    (:class:`_Rows`); the pairs that have candidates, and the first row of each one's
    segment."""
    parts: list[dict[str, np.ndarray]] = []
    owners: list[int] = []
    kept: list[tuple[Point, int]] = []
    for k, ((pt, n_gpu), c) in enumerate(zip(items, _bases(scn, items, ch), strict=True)):
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
    # Each pair's codes (_GROUPS) after those of the pairs before it: distinct across pairs.
    for name in CODES:
        spans = np.array([int(p[name].max()) + 1 for p in parts])
        columns[name] += np.repeat(np.cumsum(spans) - spans, sizes)
    pairs = {
        name: np.array([getattr(pt, name) for pt, _ in kept], dtype=np.int64)
        for name in _POINT_COLUMNS
    }
    pairs["params"] = np.array([pt.params for pt, _ in kept])
    pairs["n_gpu"] = np.array([float(n) for _, n in kept])
    rows = _Rows(columns, pairs)
    if not only:  # each pair's rows are its configurations, as _layouts listed them
        rows.layouts = parts
    return rows, owners, starts


def _take(c: Any, rows: Any) -> Any:
    """The candidates ``rows`` of ``c`` (a :class:`_Rows`, or a dict of columns)."""
    if isinstance(c, _Rows):
        return c.take(rows)
    return {k: v[rows] for k, v in c.items()}


def _pipe_latency(ch: Choices, c: _Rows, tp_model, tp_ff, pp_ep) -> np.ndarray:
    """The latency on the pipeline's critical path, from each family's latency."""
    lat_pipe = tp_model + tp_ff + pp_ep
    if ch.latency_paid == "microbatch":  # every microbatch's chain, not one per step
        m = c["m"]
        lat_pipe = lat_pipe * (m[None, :] if np.ndim(lat_pipe) == 2 else m)
    return lat_pipe


def _step(
    ch: Choices, c: _Rows, levels: dict[str, tuple], lat_pipe: np.ndarray,
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
        t_dp_after = _network_time({"dp": levels["dp"]}, ch.level_times)
    t_net = _network_time(hidden, ch.level_times)
    two = np.ndim(t_net) == 2
    col = (lambda a: a[None, :]) if two else (lambda a: a)
    with np.errstate(invalid="ignore"):  # inf * 0 where a level is unusable; masked by callers
        t = stepm.step_time(
            col(t_mm), t_net, t_dp_after, lat_pipe, lat_dp, col(bubble), col(c["zero_bubble"])
        )
    return t, t_net


def _lower_bound(
    ch: Choices, c: _Rows, costs: dict[str, tuple[_Table, np.ndarray]],
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


def _compute_bound(
    ch: Choices, c: _Rows, t_mm: np.ndarray, bubble: np.ndarray
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


def _evaluate(
    ch: Choices, c: _Rows, tables: dict[str, _Table],
    columns: dict[str, np.ndarray], t_mm: np.ndarray, bubble: np.ndarray,
) -> dict[str, Any]:  # fmt: skip
    """Every candidate (rows) on every placement (columns): the step time and its parts.

    Worked out with the placements on the first axis: each table's value on every placement
    is then a copy of whole rows of the transposed table (``take`` along its first axis), about
    twice as fast as a column gather; the results are returned transposed back (views)."""

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


def _placement_columns(
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
#: over arrays this size, which stay in the processor's cache, took half the time of passes
#: over every candidate at once (the sixteen presets' last passes, 0.35 s against 0.76-0.95 s;
#: blocks of 8,000 to 64,000 elements did about as well).
BLOCK = 32768


def _evaluate_in_blocks(
    ch: Choices, c: _Rows, costs: dict[str, tuple[_Table, np.ndarray]],
    kept: np.ndarray, columns: dict[str, np.ndarray], t_mm: np.ndarray, bubble: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """The step time and the total network time of every candidate on every placement
    (:func:`_evaluate`'s ``t`` and ``total``), a block of candidates at a time
    (:data:`BLOCK`); ``kept``: each candidate's row in the cost tables."""
    n, width = len(t_mm), len(columns["dp"])
    t, total = np.empty((width, n)), np.empty((width, n))  # placements first, as _evaluate
    size = max(1, BLOCK // width)
    for start in range(0, n, size):
        r = slice(start, min(start + size, n))
        ev = _evaluate(ch, _take(c, r), _rows(costs, kept[r]), columns, t_mm[r], bubble[r])
        t[:, r], total[:, r] = ev["t"].T, ev["total"].T
    return t.T, total.T


def _best_in_group(
    scn: Scenario, items: list[tuple[Point, int]], ch: Choices, only: dict[str, int] | None
) -> list[dict[str, float] | None]:
    out: list[dict[str, float] | None] = [None] * len(items)
    batch = _candidates(scn, items, ch, only)
    if batch is None:
        return out
    c, owners, starts = batch
    placed = _placement_columns(scn, items[0][1])
    if placed is None:
        return out
    factors, columns = placed
    t_mm, bubble = _compute_times(scn, c)
    segment = np.repeat(np.arange(len(starts)), np.diff(np.append(starts, len(t_mm))))
    n_pairs = len(starts)
    if pruning() and len(t_mm) > n_pairs:
        # Two lower bounds on every candidate's step time over its placements, each put to
        # the test by the candidates of least bound in each segment, costed first on every
        # placement: no candidate whose bound exceeds a step time they achieve can be the
        # fastest, nor tie with it.  First the compute alone (no time on the network,
        # ``_compute_bound``), which needs no parallelism's cost, so that the costs are
        # computed for the candidates it leaves; then each family's least time on each level
        # (``_lower_bound``).
        achieved = np.full(n_pairs, np.inf)
        bound = _compute_bound(ch, c, t_mm, bubble)
        seeds = _least_per_segment(bound, segment, n_pairs)
        sub = _take(c, seeds)
        _achieve(achieved, segment[seeds], _evaluate(
            ch, sub, _rows(_costs(scn, sub, factors, ch), np.arange(len(seeds))), columns,
            t_mm[seeds], bubble[seeds],
        ))  # fmt: skip
        keep = np.flatnonzero(bound <= achieved[segment])
        c, t_mm, bubble, segment = _take(c, keep), t_mm[keep], bubble[keep], segment[keep]
        costs = _costs(scn, c, factors, ch)  # every family's cost on every level-0 option
        bound = _lower_bound(ch, c, costs, t_mm, bubble)
        seeds = _least_per_segment(bound, segment, n_pairs)
        _achieve(achieved, segment[seeds], _evaluate(
            ch, _take(c, seeds), _rows(costs, seeds), columns, t_mm[seeds], bubble[seeds],
        ))  # fmt: skip
        kept = np.flatnonzero(bound <= achieved[segment])
        c, t_mm, bubble, segment = _take(c, kept), t_mm[kept], bubble[kept], segment[kept]
        starts = np.searchsorted(segment, np.arange(n_pairs))
    else:
        costs = _costs(scn, c, factors, ch)
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
    ev = _evaluate(ch, _take(c, won), _rows(costs, kept[won]), columns, t_mm[won], bubble[won])
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
        stepm.utilization(scn, pt.active, pt.batch, found["n_gpu"], t)
        if found.get("n_gpu") == found.get("n_gpu") and t == t
        else math.nan
    )
    return out


_SWEEPS: dict[str, list[dict[str, Any]]] = {}
#: The folder of the sweep cache on disk, from this environment variable (unset or "off": no
#: disk cache).  ``make`` sets it to ``_build/cache/sweeps`` for the book and the tests.
CACHE_ENV = "DMLIMITS_SWEEP_CACHE"


def scenario_key(scn: Scenario) -> str:
    return repr(sorted(scn.values.items()))


def library_fingerprint() -> str:
    """A hash of every file of the installed library (code, data, presets): a changed formula
    or constant changes it (:func:`dmlimits.core.formula_cache.library_fingerprint`)."""
    return fingerprint()


def sweep_fingerprint() -> str:
    """A hash of what a sweep can depend on: every module this one imports, directly or
    through others, anywhere in their source, and every data file and preset of the library
    (:func:`dmlimits.core.formula_cache.closure_fingerprint`).  A changed formula or constant
    changes it; a change to a module the search never imports (a chapter's figures, the model
    of measured runs) does not, and the sweeps kept on disk stay valid."""
    return closure_fingerprint(__name__)


def cache_dir() -> Any:
    """The folder of the sweep cache (:data:`CACHE_ENV`), or ``None`` when it is off."""
    return cache_folder(CACHE_ENV)


def cache_path(scn: Scenario) -> Any:
    """Where the sweep of ``scn`` is cached on disk (content-addressed: :func:`sweep_fingerprint`
    and every value of the scenario), or ``None`` when the disk cache is off."""
    folder = cache_dir()
    if folder is None:
        return None
    return folder / f"{digest(sweep_fingerprint(), scenario_key(scn))}.json"


def _load(path: Any) -> list[dict[str, Any]] | None:
    """The sweep kept at ``path``, marked used now (the build removes the sweeps used longest
    ago first: :func:`dmlimits.build.engine.prune_sweep_cache`); ``None`` when there is none."""

    results = read_json(path)
    if results is not None:
        with contextlib.suppress(OSError):  # a cache that cannot be written is still read
            os.utime(path)
    return results


def _store(path: Any, results: list[dict[str, Any]]) -> None:
    """Write atomically: a reader sees the whole sweep or none (two builds may race)."""
    write_json(path, results)


def sweep(scn: Scenario) -> list[dict[str, Any]]:
    """The optimal configuration at every model of the scenario's sweep (full results, with
    every time of the step; :func:`rows` gives the public columns).  Cached per set of
    assumptions in this process, and on disk when :data:`CACHE_ENV` names a folder: notebooks
    ask for the same sweeps many times, and a build sweeps them up front."""
    scn = require_scenario(scn)
    key = scenario_key(scn)
    if key not in _SWEEPS:
        path = cache_path(scn)
        results = _load(path) if path is not None else None
        if results is None:
            ch = Choices.of(scn)
            results = optimal_many(scn, points(scn), ch)
            for r in results:
                r.update(losses(scn, r))
            if path is not None:
                _store(path, results)
        _SWEEPS[key] = results
    return [dict(r) for r in _SWEEPS[key]]


def _formula_family(scn: Scenario) -> tuple[Any, ...]:
    """The values of a scenario that decide which formulas its sweep builds beyond those every
    sweep builds: the matmul model's, with or without multicast
    (:func:`dmlimits.costs.matmul.cost_expressions` and the functions lambdified from them, about
    three seconds of CPU to build on the project's machine in a slow hour)."""
    return (bool(scn["hardware.distributed_shared_memory"]),)


def _families_first(first: Scenario, rest: list[Scenario]) -> list[Scenario]:
    """``rest`` in the order :func:`sweep_many`'s workers take them: first one scenario of each
    formula family that ``first`` (swept before the workers were forked, its formulas theirs)
    is not of, so that one worker builds that family's formulas and keeps them on disk while
    the others sweep; then the scenarios of ``first``'s family; then the others, whose
    formulas are kept on disk by then for every worker to read.  Taken in the order given,
    both workers of the book's build built the same formulas without multicast at once (about
    three seconds each, measured on the project's machine).  The order changes no result."""
    own = _formula_family(first)
    leads: list[Scenario] = []
    alike: list[Scenario] = []
    later: list[Scenario] = []
    seen = {own}
    for scn in rest:
        family = _formula_family(scn)
        if family == own:
            alike.append(scn)
        elif family in seen:
            later.append(scn)
        else:
            seen.add(family)
            leads.append(scn)
    return leads + alike + later


def _sweep_in_child(scn: Scenario) -> list[dict[str, Any]]:
    return sweep(scn)


def sweep_many(
    scns: list[Scenario], jobs: int | None = None, progress: Any = None
) -> list[list[dict[str, Any]]]:
    """:func:`sweep` for several scenarios, on ``jobs`` processes (default: one per core).

    The first scenario is swept here, which also prepares every lambdified formula; the
    others go to forked workers that inherit them.  ``progress(scn, seconds)`` is called as
    each scenario finishes.  The results fill the cache of this process."""
    scns = [require_scenario(x) for x in scns]
    jobs = max(1, jobs or os.cpu_count() or 1)
    for scn in scns:  # what the disk cache holds is read here, not swept again
        path = cache_path(scn)
        if scenario_key(scn) not in _SWEEPS and path is not None and path.is_file():
            sweep(scn)
    todo = [x for x in scns if scenario_key(x) not in _SWEEPS]
    for scn in scns:
        if scenario_key(scn) in _SWEEPS and progress is not None:
            progress(scn, 0.0)  # already swept in this process

    def done(scn: Scenario, start: float) -> None:
        if progress is not None:
            progress(scn, time.perf_counter() - start)

    if todo:
        start = time.perf_counter()
        sweep(todo[0])
        done(todo[0], start)
        rest = [x for x in todo[1:] if scenario_key(x) not in _SWEEPS]
        if jobs > 1 and len(rest) > 1:
            rest = _families_first(todo[0], rest)

            ctx = multiprocessing.get_context("fork")
            pool = ProcessPoolExecutor(max_workers=min(jobs, len(rest)), mp_context=ctx)
            try:
                started = time.perf_counter()
                futures = {pool.submit(_sweep_in_child, x): x for x in rest}
                for future in futures:
                    scn = futures[future]
                    _SWEEPS.setdefault(scenario_key(scn), future.result())
                    done(scn, started)
            except BaseException:  # interrupted: stop the workers now rather than wait
                for process in list(getattr(pool, "_processes", {}).values()):
                    process.terminate()
                pool.shutdown(wait=False, cancel_futures=True)
                raise
            pool.shutdown(wait=True)
        else:
            for scn in rest:
                start = time.perf_counter()
                sweep(scn)
                done(scn, start)
    return [sweep(x) for x in scns]


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
    """For every ``every``-th model of the sweep and every cluster of ``S 2^i`` GPUs
    (``i < doublings``; by default two doublings beyond the largest cluster the sweep chooses),
    the parallelisms of the fastest configuration (:func:`best_on`; ``None`` where none fits) and
    whether it trains the model within the training time."""
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


def headline(scn: Scenario) -> dict[str, float]:
    """The scenario's headline numbers: where linear scaling ends (the first feasible grid
    point at or below :func:`linear_end_threshold`), the feasible grid point before it and the
    crossing interpolated between the two in log compute (the grid's spacing sets the end to
    within that bracket), the utilization of the plateau before it (the largest), the last
    feasible grid point, and the closed forms: the paper's (``t_crit_flop``, ``t_limit_flop``)
    and those of the scenario's own laws (``t_crit_own_flop``, ``t_limit_own_flop``)."""
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


# --- The authors' configurations ---------------------------------------------------------------
#: The settings whose sweeps the authors' final code was run for (data/paper1_reference_sweeps.csv).
REFERENCE_FILE = "paper1_reference_sweeps.csv"
#: Utilization within this of the authors' value counts as agreement (issue #12).
REFERENCE_TOLERANCE = 0.01


def reference_rows(setting: str) -> list[dict[str, Any]]:
    """The authors' final code's result at every model of one setting's sweep (a preset name of
    :data:`dmlimits.core.scenario.PAPER_PRESETS`), from ``data/paper1_reference_sweeps.csv``:
    numbers as floats, ``feasible`` as a bool, an empty configuration as ``NaN``."""
    if setting not in PAPER_PRESETS:
        raise ValueError(
            f"setting: got {setting!r}; expected one of the paper's presets: "
            + ", ".join(PAPER_PRESETS)
        )
    out = []
    for r in published.data_rows(REFERENCE_FILE):
        if r["setting"] != setting:
            continue
        row: dict[str, Any] = {"setting": setting, "feasible": r["feasible"] == "True"}
        for k, v in r.items():
            if k not in ("setting", "feasible") and not k.endswith("_levels"):
                row[k] = float(v) if v != "" else math.nan
        out.append(row)
    return out


def reference_setting(scn: Scenario) -> str:
    """The paper's preset a scenario is compared with: its own name, or the preset it was
    built from (``h100+training.months=6`` is compared with ``h100``), or else the paper's
    setting with the same GPU, the same kind of model and batch law (a scenario file that
    changes the run's length on A100s is compared with ``a100``).  ValueError when the paper
    has no such setting (another GPU, say)."""
    for name in (scn.name, scn.name.split("+")[0], scn.origin.removeprefix("preset ")):
        if name in PAPER_PRESETS:
            return name
    name = str(scn["gpu"])
    if scn["batch.law"] == "none":
        name += "-no-batch-scaling"
    elif scn["batch.law"] == "deepseek":
        name += "-deepseek-batch"
    if scn["model.sparse"]:
        name += "-sparse"
    if name in PAPER_PRESETS:
        return name
    raise ValueError(
        f"scenario {scn.name!r}: the paper has no setting with its GPU, model and batch law "
        f"({name}); expected one of " + ", ".join(PAPER_PRESETS)
    )


def reference_comparison(scn: Scenario, setting: str | None = None) -> list[dict[str, Any]]:
    """The search's result beside the authors' at every model of ``setting`` (default: the
    scenario's own preset) for which their code found a configuration: compute, the two
    utilizations and their difference (``NaN`` where this search finds none), whether the
    configurations are the same (GPUs and the TP, PP, DP and EP degrees) and so is the 2D
    split of tensor parallelism (equal products often tie), and the cost that binds."""
    scn = require_scenario(scn)
    setting = setting or reference_setting(scn)
    mine = sweep(scn)
    out = []
    for ref in reference_rows(setting):
        if not ref["feasible"]:
            continue
        c = ref["training_flop_16bit"]
        match = min(mine, key=lambda r: abs(math.log(r["training_flop"] / c)))
        if abs(match["training_flop"] / c - 1) > 1e-4:
            raise ValueError(f"no grid point of {scn.name} at the reference compute {c:.6g}")
        found = bool(match["feasible"])
        same = (
            found
            and all(float(match[k]) == ref[k] for k in ("n_gpu", "pp", "dp", "ep"))
            and match["tp_model"] * match["tp_ff"] == ref["tp_model"] * ref["tp_ff"]
        )
        split = same and all(float(match[k]) == ref[k] for k in ("tp_model", "tp_ff"))
        u = match["utilization"] if found else math.nan
        out.append({
            "training_flop": match["training_flop"], "found": found,
            "utilization_reference": ref["utilization"], "utilization": u,
            "difference": u - ref["utilization"], "same_configuration": same,
            "same_split": split, "binding": match["binding"],
            "n_gpu": match.get("n_gpu", math.nan), "n_gpu_reference": ref["n_gpu"],
        })  # fmt: skip
    return out


def reference_linear_end(scn: Scenario, setting: str | None = None) -> float:
    """Where linear scaling ends in the authors' sweep of ``setting``, by the same rule as
    :func:`headline` (the threshold of the scenario's GPU)."""
    setting = setting or reference_setting(scn)
    limit = linear_end_threshold(scn)
    rows = [r for r in reference_rows(setting) if r["feasible"]]
    return next((r["training_flop_16bit"] for r in rows if r["utilization"] <= limit), math.nan)


def reference_summary(scn: Scenario, setting: str | None = None) -> dict[str, Any]:
    """How closely the search reproduces the authors' sweep of ``setting``: grid points they
    found a configuration for, how many of those this search finds, how many are within
    :data:`REFERENCE_TOLERANCE` in utilization, the largest difference, how many have the same
    configuration, and both linear-scaling ends with their ratio."""
    scn = require_scenario(scn)
    setting = setting or reference_setting(scn)
    rows = reference_comparison(scn, setting)
    diffs = [abs(r["difference"]) for r in rows if r["found"]]
    ours = headline(scn)["linear_scaling_end_flop"]
    theirs = reference_linear_end(scn, setting)
    return {
        "setting": setting,
        "points": len(rows),
        "found": sum(r["found"] for r in rows),
        "within": sum(d <= REFERENCE_TOLERANCE for d in diffs),
        "max_difference": max(diffs, default=math.nan),
        "same_configuration": sum(r["same_configuration"] for r in rows),
        "same_split": sum(r["same_split"] for r in rows),
        "linear_end": ours,
        "linear_end_reference": theirs,
        "linear_end_ratio": ours / theirs,
    }
