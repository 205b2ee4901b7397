"""The candidates of the search: the grid of models (:func:`points`), the configurations of a
cluster (every factorization of its GPUs into the five degrees, the 2D split of tensor
parallelism, the microbatch counts and schedules, and every placement on the two network
levels), and their matmul times, kept per cluster and hardware.
"""

from __future__ import annotations

import itertools
import math
from collections import OrderedDict
from dataclasses import dataclass
from functools import cache, lru_cache
from typing import Any

import numpy as np

from dmlimits.core.scenario import Scenario
from dmlimits.costs import data_parallel as dpm
from dmlimits.costs import matmul, model
from dmlimits.costs import pipeline as ppm
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
#: (:func:`~dmlimits.search.engine.optimal_many`); the result is the same as one cluster at a time.
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
def divisors(n: int) -> tuple[int, ...]:
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
    divs = divisors(node)
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
    """The schedules of ``_schedules`` already listed under these choices, by (stages,
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


def base(scn: Scenario, pt: Point, n_gpu: int, ch: Choices) -> dict[str, np.ndarray] | None:
    """Every configuration of ``n_gpu`` GPUs before placement on the network levels (arrays
    shared with other callers: read, never written)."""
    return bases(scn, [(pt, n_gpu)], ch)[0]


def bases(
    scn: Scenario, items: list[tuple[Point, int]], ch: Choices
) -> list[dict[str, np.ndarray] | None]:  # fmt: skip
    """``base`` of several (model, cluster) pairs, whose memory is checked at once.

    The scenario decides which data-parallel degrees fit in memory; the configurations follow
    from those degrees, the model, the cluster and the choices alone (``cluster_layouts``), so
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
            out[k] = cluster_layouts(items[k][0], items[k][1], ch, per_pipe, fitting)
    return out


@cache
def _degrees(rest: int, per_pipe: int) -> tuple[int, ...]:
    """The data-parallel degrees of a cluster with ``rest`` GPUs left once the experts are
    placed, ascending: they divide it and the microbatch units ``per_pipe`` (so a degree is at
    most the batch, however large the cluster)."""
    return tuple(d for d in divisors(rest) if per_pipe % d == 0)


#: Configurations kept per process by ``cluster_layouts`` (a sweep of the sixteen presets makes
#: about 1,200; each holds at most a few thousand rows).
LAYOUTS_KEPT = 4096


@lru_cache(LAYOUTS_KEPT)
def cluster_layouts(
    pt: Point, n_gpu: int, ch: Choices, per_pipe: int, fitting: tuple[int, ...]
) -> dict[str, np.ndarray] | None:
    """The configurations of ``base``, from the data-parallel degrees that fit.

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
    for tp in divisors(rest):
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
    # The codes of GROUPS, from the pairs, their splits and their schedules (a few hundred
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
#: The codes come from how the configurations are listed (``cluster_layouts``): small
#: non-negative integers per (model, cluster) pair, equal where the group's columns are equal
#: (two codes may also stand for the same values: they are then costed twice, alike).  A
#: (tensor, data, pipeline) degree triple and one of its 2D splits fix the tensor-parallel
#: group's columns; a pipeline degree and whether its stages are split into chunks fix the
#: pipeline's; the data-parallel degree is one of those that fit; the matmuls' are the 2D
#: split and the data-parallel degree times the microbatches (the tokens of a microbatch).  A
#: search then finds the distinct combinations of many pairs' codes without sorting
#: (:func:`distinct_codes`).
GROUPS = {
    "mm": ("tp_model", "tp_ff", "nanobatch"),
    "dp": ("dp",),
    "tp": ("dp", "tp_model", "tp_ff", "pp"),
    "pp_ep": ("pp", "v"),
}
#: The code columns of a configuration, one per group.
CODES = tuple(f"code_{g}" for g in GROUPS)


def distinct_codes(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A row of each distinct code and each row's index among those rows: the ``first`` and
    ``inverse`` of ``numpy.unique`` (in the same ascending order of code), found in time
    linear in the rows and the largest code, without sorting.  Any row of a code stands for
    it, as every row of a code has the same values (``GROUPS``)."""
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


def compute_times(scn: Scenario, c: CandidateRows) -> tuple[np.ndarray, np.ndarray]:
    """Each candidate's matmul seconds per step and its pipeline bubble (none for zero-bubble
    schedules): those of a batch's clusters already computed under the same hardware are
    read from ``_COMPUTE_KEPT``, the others computed together."""
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


def _compute_rows(scn: Scenario, c: CandidateRows) -> tuple[np.ndarray, np.ndarray]:
    bubble = ppm.bubble_fraction(c["pp"], c["m"], c["v"], zero_bubble=False)
    return _matmul_time(scn, c), np.where(c["zero_bubble"] == 1, 0.0, bubble)


def _matmul_time(scn: Scenario, c: CandidateRows) -> np.ndarray:
    """Seconds of a step's matmuls on one GPU: six per layer per microbatch (two weight
    matrices, three kinds each), for its layers and experts."""
    first, back = distinct_codes(c["code_mm"])
    u = take({k: c[k] for k in ("tp_model", "tp_ff", "nanobatch", "segment")}, first)
    pairs = c.pairs  # (c is a CandidateRows)
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


#: The columns of a model of the sweep that the candidates of a batch read through their pair,
#: so that the candidates of several (model, cluster) pairs are costed in one pass of array
#: operations.
POINT_COLUMNS = ("d_model", "d_ff", "layers", "experts", "batch")


class CandidateRows:
    """Some of the candidates of a batch: ``rows[name]`` is one value per candidate.  The
    batch's columns are kept whole, with which of their rows these candidates are; a column is
    gathered when it is first asked for, so that the search's cuts copy only the columns read
    after them.  The columns of the candidates' (model, cluster) pairs
    (:data:`POINT_COLUMNS`, ``params``, ``n_gpu``) are kept once per pair (``pairs``) and
    gathered through ``segment``.  ``layouts``: each pair's configurations as
    ``cluster_layouts`` listed them, when the rows are all of them, pair after pair (the key of
    their kept matmul times), else ``None``."""

    __slots__ = ("_columns", "_rows", "_taken", "layouts", "pairs")

    def __init__(
        self, columns: dict[str, np.ndarray], pairs: dict[str, np.ndarray], rows: Any = None
    ) -> None:
        self._columns = columns
        self._rows = rows  # None: every row; else an index array or a slice
        self._taken: dict[str, np.ndarray] = {}
        self.pairs = pairs
        # Each pair's configurations (cluster_layouts), when these are all of them, in order.
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

    def take(self, rows: Any) -> CandidateRows:
        """The candidates ``rows`` of these (an index array or a slice)."""
        if self._rows is None:
            return CandidateRows(self._columns, self.pairs, rows)
        if isinstance(self._rows, slice):
            start, stop, step = self._rows.indices(len(self._columns["segment"]))
            return CandidateRows(self._columns, self.pairs, np.arange(start, stop, step)[rows])
        return CandidateRows(self._columns, self.pairs, self._rows[rows])


def take(c: Any, rows: Any) -> Any:
    """The candidates ``rows`` of ``c`` (a :class:`CandidateRows`, or a dict of columns)."""
    if isinstance(c, CandidateRows):
        return c.take(rows)
    return {k: v[rows] for k, v in c.items()}
