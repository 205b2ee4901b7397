"""Figures and tables of the whole run (dmlimits.book.whole_run)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from dmlimits import search
from dmlimits.book import book_sweeps, whole_run
from dmlimits.core import scenario as sc
from dmlimits.search import reference, results


@pytest.fixture(scope="module")
def h100():
    return sc.resolve("h100")


def test_the_published_curve_is_reproduced(h100):
    """The companion post's curve, digitized to about a hundredth, against the search."""
    diff = whole_run.blog_difference(h100)
    assert diff["points"] >= 15
    assert diff["median_abs"] < 0.01
    assert diff["max_abs"] < 0.03


def test_blog_difference_sees_a_changed_assumption(h100):
    moved = whole_run.blog_difference(sc.resolve("h100", ["network.inter_node.bandwidth=25e9"]))
    assert moved["median_abs"] > whole_run.blog_difference(h100)["median_abs"]


def test_strategy_shares_add_up_to_one(h100):
    st = whole_run.strategy(h100)
    total = sum(st[name] for name, _ in whole_run.STRATEGY)
    assert np.allclose(total, 1.0)
    assert np.all(st["EP"] == 0)  # dense
    sparse = whole_run.strategy(sc.resolve("h100-sparse"))
    assert np.all(sparse["EP"] > 0)


def test_step_split_adds_up(h100):
    r = whole_run.nearest(h100, 2e28)
    parts = whole_run.step_split(h100, r)
    assert sum(parts.values()) == pytest.approx(r["t_step"])
    assert parts["ideal"] > 0


def test_tables_have_one_row_per_scenario_and_mark(h100):
    scns = [h100, sc.resolve("a100")]
    assert whole_run.headline_table(scns).count("\n") == 1 + len(scns)
    marks = [1e25, 1e27, 1e30]
    assert whole_run.configs_table(h100, marks).count("\n") == 1 + len(marks)
    choices = whole_run.choices_table()
    assert choices.count("`search.") == sum(k.startswith("search.") for k in sc.SCHEMA)


@pytest.mark.slow
def test_choice_effects_compare_with_the_authors_only_in_their_settings(h100):
    rows = whole_run.choice_effects(h100)
    assert rows[0]["within"] == rows[0]["compared"] >= 20
    assert any(r["within"] < rows[0]["within"] for r in rows[1:])
    other = whole_run.choice_effects(sc.resolve("h100", ["training.months=6"]))
    assert all(r["within"] is None for r in other)


def test_analytic_beside_simulated(h100):
    (row,) = whole_run.analytic_vs_simulated([h100])
    assert 0.5 < row["linear_end"] / row["t_crit"] < 2
    assert 0.5 < row["last_feasible"] / row["t_limit"] < 2
    assert row["wall_reached"]


def test_a_sweep_that_never_meets_the_wall_is_not_compared_with_it():
    """Under the DeepSeek batch law every run of the sweep finishes in time: its last feasible
    point is the sweep's end, far short of the closed-form wall; the table marks it and gives
    the factor as a lower bound, and the figure draws it hollow (a reviewer found it counted
    as a wall 0.058 times the closed form)."""
    deepseek = sc.resolve("h100-deepseek-batch")
    (row,) = whole_run.analytic_vs_simulated([deepseek])
    assert not row["wall_reached"] and row["last_feasible"] < row["t_limit"]
    line = whole_run.analytic_table([row]).splitlines()[-1]
    assert "(the sweep's end)" in line and "≥ " in line
    fig = whole_run.analytic_figure([row])
    hollow = [ln for ln in fig.axes[0].lines if ln.get_markerfacecolor() == "none"]
    assert len(hollow) == 1 and hollow[0].get_ydata()[0] == row["last_feasible"]


def test_move_phrase_and_trend():
    assert whole_run.move_phrase(1e28, 1e28).startswith("leaves it at")
    assert "a factor of 10" in whole_run.move_phrase(1e28, 1e29)
    assert "down by a factor of 10" in whole_run.move_phrase(1e29, 1e28)
    assert whole_run.move_phrase(math.nan, 1e28) == "leaves it undefined"
    assert [whole_run.trend_word(0.2, x) for x in (0.5, 0.22, 0.0)] == [
        "rises", "stays about level", "falls",
    ]  # fmt: skip


def test_figures_draw_what_they_say(h100):
    fig = whole_run.utilization_figure([h100], published=True, regimes_of=h100)
    ax = fig.axes[0]
    labels = [line.get_label() for line in ax.get_lines()]
    texts = " ".join(t.get_text() for t in ax.texts)
    assert any("published" in x for x in labels) and "latency wall" in texts
    comp = whole_run.comparison_figure([("dense", [h100, sc.resolve("a100")])])
    # Different GPUs: no single threshold line is drawn.
    assert not [ln for ln in comp.axes[0].get_lines() if ln.get_linestyle() == ":"]
    assert len(whole_run.strategy_figure([h100, sc.resolve("h100-sparse")]).axes) == 2


def test_binding_explanations_cover_every_binding():
    assert set(whole_run.BINDING_EXPLANATIONS) == set(search.LOSS_LABELS)


def test_estimates_that_decide_a_result_are_flagged():
    """Issue #12: values borrowed from another GPU or estimated are named where they decide a
    result, and only values whose source says so."""
    from dmlimits.core import hardware

    gtx = whole_run.estimates_deciding(sc.resolve("gtx580"))
    keys = {(r["result"], r["key"]) for r in gtx}
    assert ("last feasible point", "network.latency") in keys
    assert all(r["source"].startswith(hardware.ESTIMATE) for r in gtx)
    b200 = whole_run.estimates_deciding(sc.resolve("b200"))
    assert any(r["key"] == "hardware.register_file_per_block" for r in b200)
    # The paper's GPUs carry nothing borrowed; a reader's override is no longer a borrowed value.
    assert whole_run.estimates_deciding(sc.resolve("h100")) == []
    mine = whole_run.estimates_deciding(sc.resolve("gtx580", ["network.latency=2e-6"]))
    assert not any(r["key"] == "network.latency" for r in mine)
    table = whole_run.estimates_table([sc.resolve("gtx580"), sc.resolve("h100")])
    assert table.count("\n") == 1 + len({r["result"] for r in gtx})


def test_the_headline_figure_has_a_logarithmic_compute_axis(h100):
    """Issue #13: the limits were read while the axis was still linear, which collapsed every
    point at the right edge.  The axis is logarithmic and spans the data and the wall."""
    import matplotlib.pyplot as plt

    fig = whole_run.utilization_figure([h100], ["this book"], published=True, regimes_of=h100)
    ax = fig.axes[0]
    assert ax.get_xscale() == "log"
    lo, hi = ax.get_xlim()
    x = np.concatenate([line.get_xdata() for line in ax.get_lines() if len(line.get_xdata()) > 2])
    assert 0 < lo <= x.min() and x.max() <= hi
    # The points spread over the axis: no collapse into one pixel column.
    px = ax.transData.transform(np.column_stack([x, np.full_like(x, 0.5)]))[:, 0]
    assert px.max() - px.min() > 0.5 * ax.bbox.width
    plt.close(fig)


def test_listing_what_a_build_sweeps_loads_no_plotting():
    """The build lists the scenarios to sweep before any chapter runs, in its own process, on
    the way to every core being busy: that takes the search and the what-if variants, not
    matplotlib's pyplot, which only the chapters' kernels use."""
    import json
    import subprocess
    import sys

    probe = (
        "import json, sys\nfrom dmlimits.book import book_sweeps\n"
        "from dmlimits.core import scenario as sc\n"
        "n = len(book_sweeps.scenarios_swept(sc.resolve('h100')))\n"
        "print(json.dumps([n, 'matplotlib.pyplot' in sys.modules]))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    listed, pyplot = json.loads(out.stdout)
    assert listed > 1 and not pyplot


def test_the_comparison_with_the_authors_is_swept_up_front(monkeypatch):
    """Every sweep the reproduction chapter's comparison with the authors reads, their year
    included, is one a build sweeps up front on every core (scenarios_swept, then
    scenarios_swept_next), not in the chapter's kernel."""
    scn = sc.resolve("h100")
    first = {search.scenario_key(s) for s in book_sweeps.scenarios_swept(scn)}
    following = book_sweeps.scenarios_swept_next(scn)
    asked: list[str] = []
    real = search.sweep
    def counted(s):
        asked.append(search.scenario_key(s))
        return real(s)

    for module in (search, results, reference):  # the package's and its modules' callers
        monkeypatch.setattr(module, "sweep", counted)
    whole_run.reference_exceptions(list(sc.compared(sc.PAPER_PRESETS, scn).values()))
    assert following  # some settings differ from the authors': their year is swept again
    assert set(asked) - first == {search.scenario_key(s) for s in following}


@pytest.mark.parametrize("name", ["h100", "h100-deepseek-batch"])
def test_the_wall_is_named_only_where_the_sweep_reaches_it(name):
    """The reproduction chapter's words for the latency wall: between the last feasible and the
    first infeasible grid point where the sweep has one (h100); where every point of the sweep
    finishes in time (the DeepSeek batch law), the wall is said to lie beyond the sweep and no
    region is said to be shaded, as the headline figure shades none."""
    from dmlimits.book.glue import sci

    last, first = whole_run.wall_between(sc.resolve(name))
    words = whole_run.wall_phrases(sc.resolve(name))
    assert sci(last) in words["falls"] and sci(last) in words["takeaway"]
    if math.isnan(first):
        assert name == "h100-deepseek-batch"
        assert "beyond the sweep" in words["falls"] and "no region is shaded" in words["caption"]
        assert "before any wall" in words["wall"]
    else:
        assert name == "h100" and first > last
        assert sci(first) in words["caption"] and "no cluster of any size" in words["falls"]
        assert words["wall"] == f"the wall comes after {sci(last)}"
    opening = whole_run.wall_opening(sc.resolve(name))
    assert sci(last) in opening
    assert ("beyond the sweep" in opening) == math.isnan(first)


def test_the_cluster_change_is_said_as_the_rows_show_it():
    """Search exercises 2 and 3 said 'a smaller cluster finishes in time' and 'utilization
    rises' whatever the search found; in a B200 build it kept the same cluster (found by a
    reviewer building other scenarios)."""
    a = {"n_gpu": 4096.0, "utilization": 0.55}
    assert whole_run.cluster_change(a, {"n_gpu": 2048.0, "utilization": 0.6}).startswith(
        "a smaller cluster finishes in time: the search takes 2,048 GPUs instead of 4,096"
    )
    assert whole_run.cluster_change(a, {"n_gpu": 4096.0, "utilization": 0.55}) == (
        "the search keeps the cluster of 4,096 GPUs, and utilization stays at 0.550"
    )
    assert "larger cluster" in whole_run.cluster_change(a, {"n_gpu": 8192.0, "utilization": 0.5})
    assert whole_run.cluster_change(a, {"n_gpu": 8192.0, "utilization": 0.5}).endswith(
        "utilization falls to 0.500"
    )


def test_a_build_says_how_it_departs_from_the_papers_h100():
    """The reproduction and closed-forms chapters call a match with the published values the
    model's only for the paper's H100 setting, and otherwise say what the build changes."""
    assert whole_run.departure_from_h100(sc.resolve("h100")) == ""
    assert whole_run.departure_from_h100(sc.resolve("b200")).startswith("runs the B200")
    slow = sc.resolve("h100", ["network.inter_node.bandwidth=25e9", "batch.law=none"])
    assert whole_run.departure_from_h100(slow) == (
        "changes batch.law, network.inter_node.bandwidth"
    )


def test_the_regimes_are_marked_from_the_search(h100):
    """The annotated curve colours each grid point by the cost the search says binds it, labels
    the end of linear scaling and the last run in time with their computes, and hatches the gap
    to the first infeasible point; a changed assumption moves every mark."""
    from dmlimits.book.glue import sci

    fig = whole_run.headline_figure(h100)
    ax = fig.axes[0]
    rows = whole_run.feasible(h100)
    for key, colour in whole_run.BINDING_COLOURS.items():
        label = f"binds: {search.LOSS_LABELS[key]}"
        drawn = [ln for ln in ax.get_lines() if ln.get_label() == label]
        want = [r["training_flop"] for r in rows if r["binding"] == key]
        assert [list(ln.get_xdata()) for ln in drawn] == ([want] if want else [])
        assert all(ln.get_color() == colour for ln in drawn)
    texts = " ".join(t.get_text() for t in ax.texts)
    head = search.headline(h100)
    last, first = whole_run.wall_between(h100)
    assert sci(head["linear_scaling_end_flop"]) in texts and sci(last) in texts
    hatched = [p for p in ax.patches if p.get_hatch()]
    assert len(hatched) == 1
    gap = hatched[0]
    assert gap.get_x() == pytest.approx(last)
    assert gap.get_x() + gap.get_width() == pytest.approx(first)
    slow = sc.resolve("h100", ["network.latency=1e-5"])
    moved = whole_run.regimes(slow)
    assert moved["last_feasible"] < last
    assert sci(moved["last_feasible"]) in " ".join(
        t.get_text() for t in whole_run.headline_figure(slow).axes[0].texts)


def test_a_sweep_without_a_wall_marks_none():
    fig = whole_run.headline_figure(sc.resolve("h100-deepseek-batch"))
    ax = fig.axes[0]
    assert not [p for p in ax.patches if p.get_hatch()]
    assert "latency wall" not in " ".join(t.get_text() for t in ax.texts)


def test_the_step_split_leaves_out_what_is_too_small_to_see(h100):
    """Fig 8.1 listed a bubble of no time and a latency of microseconds in its legend: a part
    under VISIBLE_SHARE of the step is left out of the bar and the legend, and the caption's
    sentence names it, with one verb for one part and another for two."""
    r = whole_run.nearest(h100, search.headline(h100)["linear_scaling_end_flop"])
    unseen = whole_run.step_split_unseen(h100, r)
    assert unseen == ["bubble", "latency"]
    fig = whole_run.step_split_figure(h100, r)
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert not {search.LOSS_LABELS["bubble"], search.LOSS_LABELS["latency"]} & set(legend)
    assert whole_run.IDEAL_LABEL in legend and len(legend) == 3
    text = whole_run.step_split_unseen_text(h100, r)
    assert "the bubble and exposed latency are under" in text
    one = dict(r, loss_bubble=0.1 * r["t_step"])
    assert "exposed latency is under" in whole_run.step_split_unseen_text(h100, one)
    every = dict(one, loss_latency=0.1 * r["t_step"])
    assert whole_run.step_split_unseen_text(h100, every) == ""


def test_the_analytic_figure_names_the_settings_far_from_their_closed_forms():
    """Fig 10.2's points were unlabelled, so the setting hundreds of times off its critical
    compute could not be found: each point more than OFF_DIAGONAL off the diagonal is named."""
    scns = [sc.resolve(n) for n in ("h100", "h100-global-nvlink")]
    rows = whole_run.analytic_vs_simulated(scns)
    far = whole_run.off_diagonal(rows)
    assert ("h100-global-nvlink", "linear_end") in far
    assert not [name for name, _ in far if name == "h100"]
    fig = whole_run.analytic_figure(rows)
    names = [t.get_text() for t in fig.axes[0].texts]
    assert sorted(names) == sorted(name for name, _ in far)


def test_settings_that_end_early_for_one_cause_share_one_clause():
    """Closed forms §10.6 repeated its explanation word for word for two settings: the
    settings with the same cause are named together, each with its own ratio."""
    names = ("h100", "h100-global-nvlink", "h100-global-nvlink-low-latency")
    scns = [sc.resolve(n) for n in names]
    rows = whole_run.analytic_vs_simulated(scns)
    text = whole_run.early_ends_text(rows, scns)
    assert text.count("critical compute counts the traffic") == 1
    assert "h100-global-nvlink and h100-global-nvlink-low-latency end linear scaling at" in text
    assert "respectively" in text
    one = whole_run.early_ends_text(rows[:2], scns)
    assert "h100-global-nvlink ends linear scaling at" in one and "its critical" in one
    assert whole_run.early_ends_text(rows[:1], scns) == ""


def test_the_comparison_with_the_authors_never_says_n_of_the_n():
    ref = {"points": 31, "found": 31, "within": 31, "same_configuration": 31}
    ref["max_difference"] = 5e-7
    text = whole_run.reference_clause(ref, 0.01)
    assert "31 of the 31" not in text and "at every one of the 31 grid points" in text
    assert "theirs at all of them" in text and text.endswith("degrees at all of them")
    some = whole_run.reference_clause(dict(ref, found=30, within=29, same_configuration=0), 0.01)
    assert "at 30 of the 31 grid points" in some and "theirs at 29" in some
    assert some.endswith("degrees at none")


def test_equal_kernel_latencies_are_said_once():
    """Three equal latencies and walls are one value said once, not listed three times."""
    same = whole_run.walls_by_kernel_latency(
        {"V100": 4.5e-6, "A100": 4.5e-6, "H100": 4.5e-6},
        {"V100": 2.31e31, "A100": 2.31e31, "H100": 2.31e31},
    )
    assert same.startswith("4.5 µs on all three of the V100, A100 and H100")
    assert same.count("2.31") == 1
    differ = whole_run.walls_by_kernel_latency(
        {"V100": 4.5e-6, "A100": 3e-6}, {"V100": 2.31e31, "A100": 3e31}
    )
    assert differ.startswith("4.5 and 3 µs for the V100 and A100, so the walls differ")
