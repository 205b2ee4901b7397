"""Issue #16: the search's speed-ups change no result.

Pruning (lower bounds on each candidate's step time, :data:`dmlimits.search.engine.PRUNE_ENV`),
trusting its own arrays (the cost modules' argument checks skipped inside the search,
:func:`dmlimits.core.checks.trusted_arguments`) and batching (the candidates of many models and
clusters costed in one pass, :func:`dmlimits.search.engine.best_on_many`) are checked against the
search without them: every preset's whole sweep, value for value, and a single pair's answer
against the batch's.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from dmlimits import search
from dmlimits.core import scenario as sc
from dmlimits.search import candidates, engine


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(
        a[k] == b[k] or (isinstance(a[k], float) and math.isnan(a[k]) and math.isnan(b[k]))
        for k in a
    )


#: Changed assumptions, as a reader sets them (``--set``): the book built with them is checked
#: here for its sweeps; nbval checks the default book, every output, with the caches off.  The
#: kept formulas take no scenario (tests/test_formula_cache.py), so that check covers them for
#: every scenario.
CHANGED = {
    "h100 training.months=6": ("h100", ["training.months=6"]),
    "h100 batch.anchor_tokens doubled": (
        "h100",
        [f"batch.anchor_tokens={2 * sc.resolve('h100')['batch.anchor_tokens']}"],
    ),
}


@pytest.mark.parametrize(
    "preset",
    # make check tries the default preset and one changed assumption; make test every one.
    [p if p == "h100" else pytest.param(p, marks=pytest.mark.slow) for p in sc.PAPER_PRESETS]
    + [c if i == 0 else pytest.param(c, marks=pytest.mark.slow) for i, c in enumerate(CHANGED)],
)
def test_pruning_changes_no_result(preset, monkeypatch):
    """Every model of the preset's sweep: the same cluster, configuration and times, to the
    last bit, with pruning on and off (and, when off, every argument of the cost functions
    checked, as outside the search); and pruning costed fewer candidates."""
    import contextlib

    scn = sc.resolve(*CHANGED[preset]) if preset in CHANGED else sc.resolve(preset)
    pts, ch = search.points(scn), search.Choices.of(scn)
    counted = {}
    found = {}
    for mode in ("on", "off"):
        monkeypatch.setenv(search.PRUNE_ENV, mode)
        if mode == "off":
            monkeypatch.setattr(engine, "trusted_arguments", contextlib.nullcontext)
        assert search.pruning() is (mode == "on")
        before = search.COUNTS["candidates"]
        found[mode] = search.optimal_many(scn, pts, ch)
        counted[mode] = search.COUNTS["candidates"] - before
    differ = [
        (pt.compute, k)
        for pt, a, b in zip(pts, found["on"], found["off"], strict=True)
        for k in a
        if not _same({k: a[k]}, {k: b.get(k)})
    ]
    assert not differ, f"{preset}: pruning changed {differ[:5]}"
    assert counted["on"] < counted["off"], counted


def test_a_batch_answers_each_pair_as_it_would_alone(h100):
    """best_on_many over models and clusters of different sizes (several node uses among
    them) gives what best_on gives each pair on its own."""
    ch = search.Choices.of(h100)
    chosen = {r["training_flop"]: r["n_gpu"] for r in search.sweep(h100) if r["feasible"]}
    pts = [pt for pt in search.points(h100) if pt.compute in chosen][::6]
    items = [
        (pt, max(1, int(chosen[pt.compute] * f))) for pt in pts for f in (1 / 64, 0.5, 1, 4)
    ] + [(pts[0], 4)]
    together = search.best_on_many(h100, items, ch)
    alone = [search.best_on(h100, pt, n, ch) for pt, n in items]
    assert sum(x is not None for x in alone) >= len(items) // 2, alone
    for (pt, n), a, b in zip(items, together, alone, strict=True):
        assert (a is None) == (b is None), (pt.compute, n)
        if a is not None:
            assert _same(a, b), (pt.compute, n)


@pytest.mark.parametrize(
    "preset",
    # The default preset and the one whose stragglers search longest; make test two more.
    ["h100", "v100-sparse"]
    + [pytest.param(p, marks=pytest.mark.slow) for p in ("h100-low-latency", "a100")],
)
def test_looking_ahead_and_kept_layouts_change_no_result(preset, monkeypatch):
    """optimal_many tries several clusters of each model at once when few models are left
    (:data:`dmlimits.search.candidates.LOOKAHEAD`), base keeps each cluster's configurations for
    every scenario that fits the same data-parallel degrees, and the matmul times and bubbles of
    each are kept per hardware (``_COMPUTE_KEPT``; the second sweep reads every one of them): the
    sweep one cluster at a time, every configuration listed and costed afresh, is the same to the
    last bit."""
    scn = sc.resolve(preset)
    pts, ch = search.points(scn), search.Choices.of(scn)
    search.optimal_many(scn, pts, ch)
    ahead = search.optimal_many(scn, pts, ch)
    monkeypatch.setattr(engine, "LOOKAHEAD", 1)
    candidates.cluster_layouts.cache_clear()
    monkeypatch.setattr(candidates, "cluster_layouts", candidates.cluster_layouts.__wrapped__)
    one_by_one = search.optimal_many(scn, pts, ch)
    differ = [
        (pt.compute, k)
        for pt, a, b in zip(pts, ahead, one_by_one, strict=True)
        for k in a
        if not _same({k: a[k]}, {k: b.get(k)})
    ]
    assert not differ, f"{preset}: looking ahead changed {differ[:5]}"


def test_kept_layouts_are_read_only_and_shared_only_where_they_agree():
    """A kept set of configurations cannot be written through; a scenario with less memory per
    GPU fits fewer data-parallel degrees and gets its own."""
    big = sc.resolve("h100")
    small = sc.resolve(
        "h100", overrides={"hardware.hbm_capacity": big["hardware.hbm_capacity"] / 8}
    )
    ch = search.Choices.of(big)
    found = [r for r in search.sweep(big) if r["feasible"]][-1]  # its largest feasible model
    pt = next(p for p in search.points(big) if p.compute == found["training_flop"])
    n_gpu = int(found["n_gpu"])
    a, b = candidates.base(big, pt, n_gpu, ch), candidates.base(small, pt, n_gpu, ch)
    assert a is not None and b is not None
    with pytest.raises(ValueError, match="read-only"):
        a["dp"][0] = 1
    assert a["dp"].max() > b["dp"].max()
    assert candidates.base(big, pt, n_gpu, ch) is a


@pytest.fixture(scope="module")
def h100():
    return sc.resolve("h100")


@pytest.mark.parametrize(
    "preset",
    # make check tries the default preset; make test the others too.
    [
        p if p == "h100" else pytest.param(p, marks=pytest.mark.slow)
        for p in ("h100", "h100-sparse", "v100", "h100-deepseek-batch", "h100-global-nvlink")
    ],
)
def test_the_bound_never_exceeds_a_candidates_best_placement(preset):
    """The pruning's lower bounds (:func:`dmlimits.search.engine.compute_bound`, then
    :func:`dmlimits.search.engine.lower_bound`) are at most each candidate's fastest step over its
    placements, for every candidate of clusters from a few
    GPUs to the ones the sweep chose; on a network of one level, where each candidate has one
    placement, it is that step, to the last bit (a family the bound left out would show)."""
    scn = sc.resolve(preset)
    ch = search.Choices.of(scn)
    chosen = {r["training_flop"]: r["n_gpu"] for r in search.sweep(scn) if r["feasible"]}
    pts = [pt for pt in search.points(scn) if pt.compute in chosen][::5]
    checked = 0
    for pt in pts:
        for n_gpu in {pt.experts * 8, int(chosen[pt.compute])}:
            batch = engine.list_candidates(scn, [(pt, n_gpu)], ch, None)
            if batch is None:
                continue
            c = batch[0]
            factors, columns = engine.placement_columns(scn, n_gpu)
            t_mm, bubble = candidates.compute_times(scn, c)
            costs = engine.family_costs(scn, c, factors, ch)
            bound = engine.lower_bound(ch, c, costs, t_mm, bubble)
            rows = np.arange(len(t_mm))
            best = engine.evaluate(ch, c, engine.gather_rows(costs, rows), columns, t_mm, bubble)
            fastest = best["t"].min(axis=1)
            assert (bound <= fastest).all(), (pt.compute, n_gpu)
            # The first, coarser bound (compute alone) is below the second.
            compute = engine.compute_bound(ch, c, t_mm, bubble)
            assert (compute <= bound).all(), (pt.compute, n_gpu)
            assert (compute < bound).any(), (pt.compute, n_gpu)  # the network counts somewhere
            if factors is None:
                assert np.array_equal(bound, fastest), (pt.compute, n_gpu)
            checked += len(bound)
    assert checked > 1000, checked


@pytest.mark.parametrize("exponent", [58, 63, 64, 70])
def test_clusters_beyond_64_bits_are_listed(exponent):
    """A search that keeps doubling (microbatches counted in sequences) reaches clusters of
    2^63 GPUs and more, which a 64-bit integer cannot hold: their degrees are worked out in
    Python integers (a 64-bit division stopped the book's build).  The largest model has
    configurations at 2^58 GPUs, each a true factorization of the cluster, and none from 2^63
    on (no degree is left that divides the layers, widths and batch)."""
    scn = sc.resolve("h100", overrides={"search.microbatch_unit": "sequence"})
    ch = search.Choices.of(scn)
    pt = max(search.points(scn), key=lambda p: p.compute)
    n_gpu = 2**exponent
    c = candidates.base(scn, pt, n_gpu, ch)
    if exponent >= 63:
        assert c is None, exponent
    else:
        assert c is not None, exponent
        columns = [c[k].tolist() for k in ("tp_model", "tp_ff", "dp", "pp", "ep")]
        for row in zip(*columns, strict=True):
            assert math.prod(row) == n_gpu, row


def test_only_the_search_trusts_its_arguments():
    """Outside :func:`dmlimits.core.checks.trusted_arguments` a bad argument is refused with its
    name; inside it is taken as given; the block ends (even by an exception) with the checks
    back on, and it never reaches another thread."""
    import threading

    from dmlimits.core import checks
    from dmlimits.costs import tensor_parallel as tpm

    scn = sc.resolve("h100")

    def bad():  # a degree of 3 does not divide d_model = 8
        return tpm.tp_family_time(scn, "tp_model", 8, 32, 100.0, 3, 1, 3, 1)

    with pytest.raises(ValueError, match="tp_model: got 3"):
        bad()
    # A result of the right shape is the caller's own copy, but for the search, which reads it.
    value = np.ones((3, 2))
    assert checks.as_output(value, (3, 2)) is not value
    with checks.trusted_arguments():
        assert checks.as_output(value, (3, 2)) is value
        assert checks.as_output(value[:1], (3, 2)).shape == (3, 2)  # broadcast as ever
    seen = []
    with checks.trusted_arguments():
        bad()  # no error: the search's own arrays are not checked again
        worker = threading.Thread(target=lambda: seen.append(checks.checking()))
        worker.start()
        worker.join()
        assert not checks.checking()
    assert seen == [True]
    assert checks.checking()
    with pytest.raises(RuntimeError), checks.trusted_arguments():
        raise RuntimeError
    assert checks.checking()
    with pytest.raises(ValueError, match="tp_model: got 3"):
        bad()


@pytest.mark.parametrize("preset", ["h100", "h100-sparse"])
def test_equal_codes_stand_for_equal_columns(preset):
    """Each cost is computed once per code of its group (:data:`dmlimits.search.candidates.GROUPS`)
    and gathered back to every candidate of that code: so every candidate of a code must have the
    same pair and the same values of the group's columns.  The codes are given as the configurations
    are listed (``cluster_layouts``) and offset pair by pair (``list_candidates``); the distinct
    codes are found without sorting (``distinct_codes``), in np.unique's order."""
    scn = sc.resolve(preset)
    ch = search.Choices.of(scn)
    chosen = {r["training_flop"]: r["n_gpu"] for r in search.sweep(scn) if r["feasible"]}
    pts = [pt for pt in search.points(scn) if pt.compute in chosen][::4]
    items = [(pt, n) for pt in pts for n in {pt.experts * 8, int(chosen[pt.compute])}]
    c, _, _ = engine.list_candidates(scn, items, ch, None)
    distinct = {}
    for group, columns in candidates.GROUPS.items():
        codes = c["code_" + group]
        first, back = candidates.distinct_codes(codes)
        uniq, inverse = np.unique(codes, return_inverse=True)
        assert np.array_equal(codes[first], uniq) and np.array_equal(back, inverse.ravel())
        for name in ("segment", *columns):
            assert np.array_equal(c[name], c[name][first][back]), (group, name)
        distinct[group] = len(first)
    # The codes do share work: far fewer distinct combinations than candidates.
    assert max(distinct.values()) < len(c["dp"]) / 2, (distinct, len(c["dp"]))


def test_evaluating_in_blocks_changes_no_result(monkeypatch):
    """The last pass evaluates the candidates a block at a time
    (:data:`dmlimits.search.engine.BLOCK` candidate-placements): blocks of a few dozen candidates
    give every result of one block of them all, to the last bit."""
    scn = sc.resolve("h100")
    pts, ch = search.points(scn)[::3], search.Choices.of(scn)
    monkeypatch.setattr(engine, "BLOCK", 10**12)  # one block: every candidate at once
    whole = search.optimal_many(scn, pts, ch)
    monkeypatch.setattr(engine, "BLOCK", 1000)
    blocked = search.optimal_many(scn, pts, ch)
    assert any(r["feasible"] for r in whole)
    for pt, a, b in zip(pts, whole, blocked, strict=True):
        assert _same(a, b), (pt.compute, a, b)
