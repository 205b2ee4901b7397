"""The figure checker (issue #13): each problem a reader would trip over is found on a figure
that has it and not on one that does not.  glue() runs it on every figure of the book, so a
built book has none of these problems."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pytest
from dmlimits import figures
from dmlimits.glue import GlueError, glue


@pytest.fixture(autouse=True)
def _style():
    figures.apply_style()
    yield
    plt.close("all")


def _good() -> plt.Figure:
    fig, ax = plt.subplots()
    x = np.geomspace(1e24, 1e31, 30)
    ax.plot(x, 0.7 - 0.02 * np.log10(x / 1e24), "o-", label="a curve")
    ax.plot(x, 0.6 - 0.02 * np.log10(x / 1e24), "s--", label="another")
    ax.set_xscale("log")
    ax.set_xlabel("training compute (FLOP)")
    ax.set_ylabel("utilization")
    ax.set_ylim(0, 1)
    ax.legend(loc="upper right")
    return fig


def test_a_good_figure_passes():
    assert figures.check_figure(_good()) == []


def test_a_collapsed_linear_axis_is_found():
    """The headline figure's old bug: decades of compute on a linear axis."""
    fig = _good()
    fig.axes[0].set_xscale("linear")
    problems = figures.check_figure(fig)
    assert any("squeezed" in p for p in problems), problems


def test_data_outside_the_limits_are_found():
    fig = _good()
    fig.axes[0].set_ylim(0, 0.5)
    assert any("outside the axis limits" in p for p in figures.check_figure(fig))


def test_a_legend_over_the_data_is_found_and_moved():
    fig, ax = plt.subplots()
    x = np.linspace(0, 1, 50)
    ax.plot(x, np.full_like(x, 0.5), label="flat line through the middle")
    ax.set_xlabel("x (s)")
    ax.set_ylabel("y (s)")
    ax.set_ylim(0.4, 0.6)
    ax.legend(loc="center", fontsize=20)
    assert any("legend covers" in p for p in figures.check_figure(fig))
    figures.tidy_legends(fig)
    assert figures.check_figure(fig) == []


def test_two_series_drawn_alike_are_found():
    fig = _good()
    ax = fig.axes[0]
    line = ax.get_lines()[0]
    ax.plot(line.get_xdata(), line.get_ydata() - 0.3, color=line.get_color(), marker="o",
            ls="-", label="same look")  # fmt: skip
    ax.legend(loc="upper right")
    assert any("drawn alike" in p for p in figures.check_figure(fig))


def test_an_unlabelled_axis_and_italic_words_are_found():
    fig = _good()
    fig.axes[0].set_ylabel("")
    fig.axes[0].set_title("$d_{ff}$ against $d_{\\mathrm{model}}$")
    problems = figures.check_figure(fig)
    assert any("y axis has no label" in p for p in problems)
    assert any("d_{ff}" in p for p in problems)
    assert not any(p.startswith("mathtext") and "model" in p for p in problems), problems


def test_glue_refuses_a_figure_with_problems():
    fig = _good()
    fig.axes[0].set_xscale("linear")
    with pytest.raises(GlueError, match=r"not fit to read.*squeezed"):
        glue("bad_figure", fig)
