"""Issue #16: the search's speed-ups change no result.

Pruning (a lower bound on each candidate's step time, :data:`dmlimits.search.PRUNE_ENV`) and
batching (the candidates of many models and clusters costed in one pass,
:func:`dmlimits.search.best_on_many`) are checked against the search without them: every
preset's whole sweep, value for value, and a single pair's answer against the batch's.
"""

from __future__ import annotations

import math

import pytest
from dmlimits import scenario as sc
from dmlimits import search


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(
        a[k] == b[k] or (isinstance(a[k], float) and math.isnan(a[k]) and math.isnan(b[k]))
        for k in a
    )


@pytest.mark.parametrize(
    "preset",
    # make check tries the default preset; make test every one.
    [p if p == "h100" else pytest.param(p, marks=pytest.mark.slow) for p in sc.PAPER_PRESETS],
)
def test_pruning_changes_no_result(preset, monkeypatch):
    """Every model of the preset's sweep: the same cluster, configuration and times, to the
    last bit, with pruning on and off; and pruning costed fewer candidates."""
    scn = sc.resolve(preset)
    pts, ch = search.points(scn), search.Choices.of(scn)
    counted = {}
    found = {}
    for mode in ("on", "off"):
        monkeypatch.setenv(search.PRUNE_ENV, mode)
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


@pytest.fixture(scope="module")
def h100():
    return sc.resolve("h100")
