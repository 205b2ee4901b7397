"""What-if analysis (dmlimits.search.whatif): the tornado and the uncertainty band."""

from __future__ import annotations

import math

import numpy as np
import pytest
from dmlimits import search
from dmlimits.book import whatif_page
from dmlimits.core import scenario as sc
from dmlimits.search import whatif

# One worker of make check computes the tornado (twenty sweeps) for every test of this file,
# not both.
pytestmark = pytest.mark.xdist_group("whatif")


@pytest.fixture(scope="module")
def h100():
    return sc.resolve("h100")


@pytest.fixture(scope="module")
def tornado(h100):
    return whatif.tornado(h100)


def test_tornado_has_every_assumption_and_the_base(h100, tornado):
    base, rows = tornado
    assert {r.key for r in rows} == {a.key for a in whatif.ASSUMPTIONS}
    head = search.headline(h100)
    assert base["linear_end"] == head["linear_scaling_end_flop"]
    assert base["wall"] == head["last_feasible_flop"]


def test_tornado_variants_are_halved_and_doubled(h100, tornado):
    _, rows = tornado
    for r in rows:
        assert r.low_value == pytest.approx(h100[r.key] / 2)
        assert r.high_value == pytest.approx(h100[r.key] * 2)


def test_tornado_directions_that_must_hold(tornado):
    """More InfiniBand bandwidth or a longer run never ends linear scaling sooner; shorter
    latencies never bring the wall closer."""
    _, rows = tornado
    by = {r.key: r for r in rows}
    ib = by["network.inter_node.bandwidth"]
    assert ib.linear_end_high >= ib.linear_end_low
    months = by["training.months"]
    assert months.linear_end_high > months.linear_end_low
    assert months.wall_high > months.wall_low
    kernel = by["hardware.kernel_latency"]
    assert kernel.wall_low >= kernel.wall_high


def test_tornado_rows_are_sorted_by_spread(tornado):
    _, rows = tornado

    def spread(r):
        ends = [x for x in (r.linear_end_low, r.linear_end_high) if x == x]
        return abs(math.log10(max(ends) / min(ends))) if len(ends) == 2 else 0.0

    spreads = [spread(r) for r in rows]
    assert spreads == sorted(spreads, reverse=True)


def test_samples_are_reproducible_and_inside_the_ranges(h100):
    a, b = whatif.samples(h100, 5, seed=3), whatif.samples(h100, 5, seed=3)
    assert a == b and whatif.samples(h100, 5, seed=4) != a
    for draw in a:
        for key, (lo, hi, why) in whatif.RANGES.items():
            assert lo * h100[key] * (1 - 1e-12) <= draw[key] <= hi * h100[key] * (1 + 1e-12)
            assert len(why) > 20


def test_uncertainty_band_brackets_its_median(h100):
    band = whatif.uncertainty(h100, n=4, seed=1)
    ok = np.isfinite(band["low"]) & np.isfinite(band["high"])
    assert ok.sum() >= 10
    assert np.all(band["low"][ok] <= band["median"][ok] + 1e-12)
    assert np.all(band["median"][ok] <= band["high"][ok] + 1e-12)
    lo, mid, hi = band["linear_end"]
    assert lo <= mid <= hi


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda s: whatif.tornado(s, factor=1.0), "factor: got 1.0"),
        (lambda s: whatif.samples(s, 0), "n: got 0"),
    ],
)
def test_bad_arguments_are_named(h100, call, match):
    with pytest.raises(ValueError, match=match):
        call(h100)


def test_resolve_overrides_validates(h100):
    with pytest.raises(sc.ScenarioError, match=r"network\.latency"):
        sc.resolve_overrides(h100, {"network.latency": -1.0})
    v = sc.resolve_overrides(h100, {"training.months": 6})
    assert v["training.months"] == 6 and h100["training.months"] == 3


def test_moves_and_ranking(tornado):
    base, rows = tornado
    row = whatif.TornadoRow("k", "k", 1, 4, base["linear_end"] * 10, base["linear_end"] / 100,
                            math.nan, base["wall"])  # fmt: skip
    assert whatif.moves(base, row, "linear_end") == pytest.approx(2.0)
    assert whatif.moves(base, row, "wall") == math.inf  # a variant with no feasible run
    ranked = whatif.ranking(base, [*rows, row], "linear_end")
    assert dict(ranked)["k"] == pytest.approx(2.0)
    assert [d for _, d in ranked] == sorted((d for _, d in ranked), reverse=True)
    with pytest.raises(ValueError, match="'plateau'"):
        whatif.moves(base, row, "plateau")


def test_what_the_h100_limits_ignore(tornado):
    """The paper's H100 run: HBM bandwidth moves neither limit by a grid point, the training
    duration moves both (a claim of the what-if chapter's prose, computed there)."""
    base, rows = tornado
    moved = {what: dict(whatif.ranking(base, rows, what)) for what in ("linear_end", "wall")}
    assert moved["wall"]["HBM bandwidth"] == 0.0
    assert moved["linear_end"]["training duration"] > 0
    assert moved["wall"]["training duration"] > 0


def test_a_limit_left_undefined_is_named_but_not_ranked_first():
    """A variant with no feasible run moves the wall 'infinitely far'; the chapter called that
    assumption the one both limits are most sensitive to, against its own tornado, whose longest
    finite bars were another's (found by a reviewer)."""
    inf = float("inf")
    ranked = {
        "linear_end": [("depth-law exponent", inf), ("batch-law exponent", 3.4), ("x", 0.0)],
        "wall": [("depth-law exponent", inf), ("batch-law exponent", 4.5), ("x", 0.1)],
    }
    words = whatif.sensitivity_words(ranked)
    assert words["sentence"].startswith(
        "Of the finite moves, both limits move farthest with the batch-law exponent (3.4 and 4.5"
    )
    assert 'the depth-law exponent leaves a limit undefined ("none")' in words["sentence"]
    assert words["takeaway"].endswith(": the assumption to pin down first")
    apart = whatif.sensitivity_words({"linear_end": [("a", 1.0)], "wall": [("b", 2.0)]})
    assert apart["sentence"] == (
        "Of the finite moves, the end of linear scaling moves farthest with the a (1 decades), "
        "and the wall moves farthest with the b (2 decades)"
    )
    assert apart["takeaway"].endswith("the assumptions to pin down first")
    idle = whatif.sensitivity_words({"linear_end": [("a", 0.0)], "wall": [("a", 0.0)]})
    assert idle["sentence"].startswith("No assumption moves either limit")


# --- The band's words (dmlimits.book.whatif_page) ------------------------------------------------
@pytest.mark.parametrize(
    ("values", "kept", "lo", "hi", "words"),
    [
        (list(range(1, 13)), 10, 2, 11, "the middle 10 of the 12 draws"),
        ([5.0, 1.0, 3.0, 2.0, 4.0], 5, 1, 5, "all 5 draws"),
        ([*range(1, 11), math.nan, math.nan], 8, 2, 9,
         "the middle 8 of the 10 draws that have one"),
        ([7.0, math.nan], 1, 7, 7, "the one draw that has one"),
        ([math.nan] * 3, 0, math.nan, math.nan, "none of the 3 draws"),
    ],
)  # fmt: skip
def test_the_band_is_the_range_of_the_middle_draws_by_count(values, kept, lo, hi, words):
    middle = whatif_page.middle_draws(values)
    assert middle["kept"] == kept
    assert (middle["lo"], middle["hi"]) == (lo, hi) or (math.isnan(lo) and math.isnan(middle["lo"]))
    assert whatif_page.middle_words(middle) == words
