"""The figures and sentences of the chapters on measured runs (dmlimits.book.measured_figures):
text a reader can read at the column's width, series told apart by colour and marker, and each
computed sentence worded for every case it can meet."""

from __future__ import annotations

import itertools

import matplotlib.pyplot as plt
import numpy as np
import pytest
from dmlimits.book import figures, measured_figures
from dmlimits.measured import confront, runs
from matplotlib.colors import to_rgb

#: Two colours closer than this (Euclidean distance in RGB, each channel from 0 to 1) are taken
#: for one at a glance: the book's palette's blue and teal are 0.16 apart.
DISTINCT = 0.25


@pytest.fixture(scope="module")
def curves():
    figures.apply_style()
    return {gpu: confront.scaling(gpu) for gpu in ("h100", "a100")}


@pytest.fixture(scope="module")
def drawn(curves):
    out = {
        "scaling": measured_figures.scaling_figure(curves["h100"]),
        "mfu": measured_figures.mfu_figure(curves),
    }
    yield out
    for fig in out.values():
        plt.close(fig)


def _distance(a: str, b: str) -> float:
    return float(np.linalg.norm(np.subtract(to_rgb(a), to_rgb(b))))


@pytest.mark.parametrize("name", ["scaling", "mfu"])
def test_every_text_is_at_least_nine_points_at_the_column(drawn, name):
    fig = drawn[name]
    assert fig.get_figwidth() == pytest.approx(measured_figures.COLUMN_INCHES)
    assert measured_figures.smallest_text_pt(fig) >= measured_figures.FONT_PT
    assert figures.check_figure(fig) == []


def test_a_wider_figure_shrinks_its_text_on_the_page():
    fig, ax = plt.subplots(figsize=(2 * measured_figures.COLUMN_INCHES, 3))
    ax.set_xlabel("x", fontsize=10)
    ax.tick_params(labelsize=10)
    assert measured_figures.smallest_text_pt(fig) == pytest.approx(5.0)
    plt.close(fig)


def test_the_strategies_are_told_apart_by_colour_and_marker():
    styles = [measured_figures.strategy_style(s) for s in runs.STRATEGIES]
    for a, b in itertools.combinations(styles, 2):
        assert _distance(a["color"], b["color"]) > DISTINCT, (a, b)
    # The palette the figure used before has two that are not: the rule can fail.
    assert _distance(figures.PALETTE[0], figures.PALETTE[3]) < DISTINCT
    with pytest.raises(KeyError, match=r"strategy: got .FSDP \+ EP 8."):
        measured_figures.strategy_style("FSDP + EP 8")


def test_the_scaling_figure_draws_each_strategy_in_its_own_style(drawn):
    fig = drawn["scaling"]
    assert len(fig.axes) == 3 * len(confront.SHAPES)
    for ax in fig.axes:
        lines = {ln.get_label(): ln for ln in ax.get_lines() if ln.get_label() in runs.STRATEGIES}
        assert set(lines) == set(runs.STRATEGIES)
        for strategy, line in lines.items():
            want = measured_figures.strategy_style(strategy)
            assert to_rgb(line.get_color()) == to_rgb(want["color"])
            assert line.get_marker() == want["marker"]
    legend_text = [t.get_text() for t in fig.legends[0].get_texts()]
    assert set(runs.STRATEGIES) <= set(legend_text)


def test_the_mfu_figure_gives_each_gpu_a_colour_and_each_shape_a_line(drawn, curves):
    ax = drawn["mfu"].axes[0]
    lines = [ln for ln in ax.get_lines() if not ln.get_label().startswith("reported")]
    assert len(lines) == len(curves) * len(confront.SHAPES)
    for line in lines:
        gpu = line.get_label().rsplit(", ", 1)[1].lower()
        assert to_rgb(line.get_color()) == to_rgb(measured_figures.GPU_COLORS[gpu])
    a, b = measured_figures.GPU_COLORS.values()
    assert _distance(a, b) > DISTINCT
    assert len({ln.get_linestyle() for ln in lines}) == len(confront.SHAPES)


@pytest.mark.parametrize(
    ("k", "n", "want"),
    [
        (0, 12, "none of the 12 rows is"),
        (1, 12, "one of the 12 rows is"),
        (5, 12, "5 of the 12 rows are"),
        (12, 12, "all 12 rows are"),
        (1, 1, "the one row is"),
        (0, 1, "the one row is not"),
    ],
)
def test_a_count_is_worded_for_none_one_some_and_all(k, n, want):
    assert measured_figures.counted(k, n, "row") == want


def test_a_count_takes_its_own_plural_and_verb():
    got = measured_figures.counted(2, 3, "source", ("does", "do"))
    assert got == "2 of the 3 sources do"
    assert measured_figures.counted(1, 3, "GPU", ("rests", "rest")) == "one of the 3 GPUs rests"
    with pytest.raises(ValueError, match="k, n: got 4, 3"):
        measured_figures.counted(4, 3, "row")


@pytest.mark.parametrize(
    ("k", "n", "want"),
    [
        (40, 40, "Every one of the 40 rows with a throughput sits at or below the bound."),
        (39, 40, "39 of the 40 rows are at or below the bound (98%); the one above it is listed"
                 " here."),
        (30, 40, "30 of the 40 rows are at or below the bound (75%); the 10 above it are listed"
                 " here."),
        (0, 40, "None of the 40 rows with a throughput sits at or below the bound; all of them"
                " are listed here."),
    ],
)  # fmt: skip
def test_the_bound_sentence_words_every_case(k, n, want):
    assert measured_figures.bound_sentence(k, n) == want
