"""The figure checker (issue #13): each problem a reader would trip over is found on a figure
that has it and not on one that does not.  glue() runs it on every figure of the book, so a
built book has none of these problems."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pytest
from dmlimits.book import figures
from dmlimits.book.glue import GlueError, glue


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


def _legend_in_the_middle() -> plt.Figure:
    fig, ax = plt.subplots()
    x = np.linspace(0, 1, 50)
    ax.plot(x, np.full_like(x, 0.5), label="flat line through the middle")
    ax.set_xlabel("x (s)")
    ax.set_ylabel("y (s)")
    ax.set_ylim(0.4, 0.6)
    ax.legend(loc="center", fontsize=20)
    return fig


def test_a_legend_over_the_data_is_found_and_moved():
    fig = _legend_in_the_middle()
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


def _two_panels_with_a_legend_beside_the_left() -> plt.Figure:
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.9), sharey=True)
    x = np.geomspace(1, 4096, 13)
    for ax in axes:
        for k, style in enumerate(("o-", "s-", "^-")):
            ax.plot(x, (k + 1) * 1e-3 * np.ones_like(x) * x**-0.1, style, label=f"series {k}")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("degree")
    axes[0].set_ylabel("seconds")
    axes[0].legend(loc="upper left", bbox_to_anchor=(1.02, 1.0))
    return fig


def test_a_legend_under_another_panel_is_found():
    """The tensor-parallel figure's old bug: the left panel's legend, pushed to its right,
    lay hidden under the right panel."""
    problems = figures.check_figure(_two_panels_with_a_legend_beside_the_left())
    assert any("under another panel" in p for p in problems), problems


def test_a_legend_with_no_room_in_a_panel_goes_under_the_figure():
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.9), sharey=True)
    x = np.geomspace(1, 4096, 60)
    for ax in axes:
        for k in range(3):  # lines that fill every place a legend could take inside
            ax.plot(x, np.geomspace(1e-2, 1e-5, 60) * (k + 1), label=f"series {k}")
            ax.plot(x, np.geomspace(1e-5, 1e-2, 60) * (k + 1))
            ax.plot(x, np.full_like(x, 3e-4 * (k + 1)))
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("degree")
    axes[0].set_ylabel("seconds")
    axes[0].legend(loc="lower left", fontsize=14)
    figures.tidy_legends(fig)
    assert axes[0].get_legend() is None and len(fig.legends) == 1
    assert [t.get_text() for t in fig.legends[0].get_texts()] == [f"series {k}" for k in range(3)]
    assert not any("legend" in p for p in figures.check_figure(fig))


def test_a_figure_legend_over_a_panel_is_found():
    fig = _two_panels_with_a_legend_beside_the_left()
    handles, labels = fig.axes[0].get_legend_handles_labels()
    fig.axes[0].get_legend().remove()
    fig.legend(handles, labels, loc="center")  # in the middle of the figure: over the panels
    assert "the figure's legend lies over a panel" in figures.check_figure(fig)


@pytest.mark.parametrize(
    "make", [_good, _legend_in_the_middle, _two_panels_with_a_legend_beside_the_left]
)
def test_a_tidied_figure_is_checked_as_drawn(make):
    """glue() checks a figure straight after tidy_legends without drawing it again: what the
    check finds then is what it finds on a figure drawn afresh (a legend kept, moved inside,
    or moved under the figure)."""
    fig = make()
    figures.tidy_legends(fig)
    undrawn = figures.check_figure(fig, drawn=True)
    assert undrawn == figures.check_figure(fig)


def _legend_over_autoscaled_data() -> plt.Figure:
    """Data whose limits are not yet autoscaled (nothing has drawn or read them), under a
    legend that covers them once they are."""
    fig, ax = plt.subplots()
    ax.set_xscale("log")  # before the data: setting a scale would autoscale the limits
    ax.set_yscale("log")
    x = np.geomspace(1e24, 1e31, 40)
    ax.plot(x, np.geomspace(1e3, 1e-3, 40), "o-", label="falling")
    ax.plot(x, np.full_like(x, 1.0), label="flat")
    ax.set_xlabel("compute (FLOP)")
    ax.set_ylabel("seconds")
    ax.legend(loc="upper left", fontsize=16)
    return fig


def _constrained_two_panels() -> plt.Figure:
    """A layout engine that places the axes only when the figure is drawn."""
    fig, axes = plt.subplots(1, 2, layout="constrained")
    x = np.linspace(0, 1, 50)
    for ax in axes:
        ax.plot(x, x, label="up")
        ax.plot(x, 1 - x, label="down")
        ax.set_xlabel("x (s)")
        ax.set_ylabel("y (s)")
        ax.legend(loc="center", fontsize=14)
    return fig


def _laid_out_tight() -> plt.Figure:
    """Laid out as the book's figure functions lay theirs out: ``tight_layout`` leaves a
    placeholder engine on the figure, which places nothing when it is drawn."""
    fig = _legend_over_autoscaled_data()
    fig.tight_layout()
    return fig


def _png(fig: plt.Figure) -> bytes:
    """The PNG that glue() stores for ``fig``."""
    from dmlimits.book.glue import PngOutput

    return PngOutput(fig).png


TIDIED = [_good, _legend_in_the_middle, _two_panels_with_a_legend_beside_the_left,
          _legend_over_autoscaled_data, _constrained_two_panels, _laid_out_tight]  # fmt: skip


@pytest.mark.parametrize("make", TIDIED)
def test_tidying_an_undrawn_figure_gives_the_png_of_one_drawn_first(make):
    """tidy_legends does not draw the figure: what it decides (a legend kept, moved inside,
    beside or under the figure) and so the PNG are those of the same figure drawn first."""
    drawn = make()
    drawn.draw_without_rendering()
    figures.tidy_legends(drawn)
    undrawn = make()
    figures.tidy_legends(undrawn)
    assert _png(undrawn) == _png(drawn)


def _square_with_a_colorbar_and_a_title() -> plt.Figure:
    """Axes of a fixed aspect (placed when measured or drawn), a colorbar and a figure title."""
    fig, ax = plt.subplots(figsize=(5, 4))
    image = ax.imshow(np.arange(12.0).reshape(3, 4))
    fig.colorbar(image, ax=ax, label="seconds")
    fig.suptitle("A title over the figure")
    ax.set_xlabel("column")
    ax.set_ylabel("row")
    fig.tight_layout()
    return fig


@pytest.mark.parametrize("make", [*TIDIED, _square_with_a_colorbar_and_a_title])
def test_the_stored_png_is_the_one_savefig_crops_tight(make):
    """png_bytes measures the tight box itself when no engine places the axes, so that savefig
    draws once: its bytes are those of ``savefig(bbox_inches="tight")`` with its first draw."""
    import io

    ours, theirs = make(), make()
    figures.tidy_legends(ours)
    figures.tidy_legends(theirs)
    buffer = io.BytesIO()
    theirs.savefig(buffer, format="png", dpi=figures.SAVE_DPI, metadata=figures.PNG_METADATA,
                   bbox_inches="tight")  # fmt: skip
    assert figures.png_bytes(ours) == buffer.getvalue()


@pytest.mark.parametrize(("make", "draws"), [(_laid_out_tight, 1), (_constrained_two_panels, 2)])
def test_a_figure_is_drawn_once_on_its_way_to_a_png(make, draws, monkeypatch):
    """A figure laid out by ``tight_layout`` is drawn once, with its pixels; one whose engine
    places its axes is drawn first by savefig, as savefig does."""
    from matplotlib.figure import Figure

    fig = make()
    figures.tidy_legends(fig)
    calls = []
    draw = Figure.draw
    monkeypatch.setattr(Figure, "draw", lambda self, renderer: calls.append(draw(self, renderer)))
    assert figures.png_bytes(fig).startswith(b"\x89PNG")
    assert len(calls) == draws


DRAWS = [(_laid_out_tight, 0), (_legend_over_autoscaled_data, 0), (_constrained_two_panels, 1)]


@pytest.mark.parametrize(("make", "draws"), DRAWS)
def test_tidying_draws_only_a_figure_whose_engine_places_its_axes(make, draws, monkeypatch):
    """A figure laid out by ``tight_layout`` (as the book's are) is not drawn by tidy_legends:
    its placeholder engine moves nothing; a constrained layout is drawn, once."""
    fig = make()
    assert (fig.get_layout_engine() is not None) == (make is not _legend_over_autoscaled_data)
    calls = []
    monkeypatch.setattr(type(fig), "draw_without_rendering", lambda self: calls.append(self))
    figures.tidy_legends(fig)
    assert len(calls) == draws


def test_mathtext_layouts_shared_between_renderers_draw_the_same_pixels(monkeypatch):
    """share_mathtext_parses() is for speed only: a figure full of mathtext (log tick labels,
    subscripts) gives the same PNG bytes with matplotlib's own per-renderer cache."""
    import io

    from matplotlib import mathtext

    assert figures.share_mathtext_parses(), "matplotlib's MathTextParser changed: see figures.py"

    def png() -> bytes:
        fig = _good()
        fig.axes[0].set_title("$T / (n_{\\mathrm{steps}} L)$")
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png", metadata=figures.PNG_METADATA, bbox_inches="tight")
        plt.close(fig)
        return buffer.getvalue()

    shared = png()
    monkeypatch.setattr(
        mathtext.MathTextParser, "_parse_cached", mathtext.MathTextParser._dmlimits_own
    )
    assert png() == shared


def _three_curves(styles=None) -> plt.Figure:
    """Three curves, the first and the last equal, drawn in three colours."""
    fig, ax = plt.subplots()
    x = np.linspace(0, 1, 40)
    curves = [x**2, 1 - x, x**2]
    for i, y in enumerate(curves):
        ax.plot(x, y, color=figures.PALETTE[i], label=f"curve {i}",
                ls=styles[i] if styles else "-")  # fmt: skip
    ax.set_xlabel("x (s)")
    ax.set_ylabel("y (s)")
    return fig


def test_a_line_hidden_under_another_colour_is_found_and_shared_styles_show_both():
    """Equal curves in different colours: the last drawn hides the others, which the checker
    says; with shared_line_styles their dashes alternate and both colours show in the pixels."""
    from conftest import pixels_of_colour

    problems = figures.check_figure(_three_curves())
    assert any("'curve 0' lies under 'curve 2'" in p for p in problems), problems
    x = np.linspace(0, 1, 40)
    styles = figures.shared_line_styles([x**2, 1 - x, x**2])
    assert styles[1] == "-" and styles[0] != styles[2]
    assert styles[0][1] == styles[2][1] == (figures.SHARED_DASH, figures.SHARED_DASH)
    # Dotted lines stay dotted: each colour's dot, then a gap a dot wide, in turn.
    assert figures.shared_line_styles([x, x], ":") == [(0.0, (1.0, 3.0)), (2.0, (1.0, 3.0))]
    assert figures.shared_line_styles([x, 1 - x], "--") == ["--", "--"]
    fig = _three_curves(styles)
    assert figures.check_figure(fig) == []
    ax = fig.axes[0]
    for colour in figures.PALETTE[0], figures.PALETTE[2]:
        # Along y = 0.81 the curve x**2 is at x = 0.9; read a short stretch of it at each side.
        assert pixels_of_colour(fig, ax, 0.85, 0.95, 0.81, colour) > 0, colour


def test_coinciding_dots_become_rings():
    sizes = figures.shared_marker_sizes([(0.0, 1.0), (0.5, 2.0), (0.0, 1.0), (0.0, 1.0)], 4.0)
    assert sizes[1] == 4.0
    assert sizes[0] > sizes[2] > sizes[3] == 4.0  # drawn largest first: each shows as a ring
    fig = _three_curves(["-", "-", "--"])
    ax = fig.axes[0]
    for i in range(2):  # two dots of two colours at one place, alike
        ax.plot(0.2, 0.5, "o", color=figures.PALETTE[3 + i], ms=4.0)
    assert any("lies under" in p for p in figures.check_figure(fig))
    ax.lines[3].set_markersize(8.0)
    assert not any("lies under" in p for p in figures.check_figure(fig))


def test_the_sensitivity_figure_shows_every_gpu_on_the_shared_latency_wall():
    """The three GPUs share their latencies, so their latency walls are one curve: the right
    panel shows each GPU's colour along it, and the checker finds nothing hidden."""
    from conftest import pixels_of_colour
    from dmlimits.book import whole_run
    from dmlimits.core import scenario as sc
    from dmlimits.costs import closed_forms

    gpus = [sc.resolve(n) for n in ("v100", "a100", "h100")]
    alphas = np.linspace(-0.2, 0.2, 81)
    walls = [closed_forms.evaluate("latency_wall", g, alphas) for g in gpus]
    assert all(np.allclose(w, walls[0], rtol=1e-12) for w in walls)  # the case tested here
    fig = whole_run.sensitivity_figure(gpus, alphas)
    assert figures.check_figure(fig) == []
    ax = fig.axes[1]
    k = np.searchsorted(alphas, -0.1)  # a stretch where the curve is nearly flat on its log axis
    for i in range(len(gpus)):
        shown = pixels_of_colour(fig, ax, alphas[k - 4], alphas[k + 4], walls[0][k],
                                 figures.PALETTE[i])  # fmt: skip
        assert shown > 0, f"{gpus[i].gpu_label} does not show on the shared latency wall"


def test_text_too_small_for_the_column_is_found_and_enlarged():
    """A figure twice the column's usual width shows its text at half size: a 10-point tick
    label of a 14-inch figure is under 9 points on the page; enlarged, it is at least 9."""
    figures.apply_style()
    fig, axes = plt.subplots(1, 3, figsize=(14, 3))
    for ax in axes:
        ax.plot([1, 2, 3], [1, 4, 9], label="a series")
        ax.set_xlabel("x")
        ax.set_ylabel("y")
        ax.legend()
    fig.tight_layout()
    assert figures.shown_points(fig, 10) < figures.MIN_TEXT_PT
    assert figures.small_texts(fig)
    assert any("show under 9 pt" in p for p in figures.check_figure(fig))
    assert figures.enlarge_small_text(fig)
    assert figures.small_texts(fig) == []
    assert not any("show under" in p for p in figures.check_figure(fig))
    # A figure of the column's width keeps the sizes it was drawn with.
    small, ax = plt.subplots(figsize=(6, 3))
    ax.plot([1, 2], [1, 2])
    ax.set_xlabel("x")
    ax.set_ylabel("y")
    assert figures.shown_points(small, 10) > figures.MIN_TEXT_PT
    assert not figures.enlarge_small_text(small)
    plt.close("all")


def test_series_in_colours_a_reader_cannot_tell_apart_are_named():
    figures.apply_style()
    fig, ax = plt.subplots()
    ax.plot([1, 2], [1, 2], color="#00798c", label="teal")
    ax.plot([1, 2], [2, 3], color="#0a7f92", label="another teal")
    ax.plot([1, 2], [3, 4], color=figures.PALETTE[1], label="red")
    ax.set_xlabel("x")
    ax.set_ylabel("y")
    ax.legend()
    close = figures.close_colours(fig)
    assert [(a, b) for a, b, _ in close] == [("teal", "another teal")]
    assert any("cannot tell apart" in p for p in figures.check_figure(fig))
    # Drawn dashed, the second is told apart by its line, not its colour.
    ax.get_lines()[1].set_linestyle("--")
    ax.legend()
    assert figures.close_colours(fig) == []
    # The book's palette: every pair is far enough apart.
    labs = [figures.lab(c) for c in figures.PALETTE]
    gaps = [np.linalg.norm(a - b) for i, a in enumerate(labs) for b in labs[i + 1 :]]
    assert min(gaps) >= figures.MIN_COLOUR_DIFFERENCE
    plt.close("all")


def test_a_legend_beside_its_axes_leaves_the_figure_legible_and_its_width_bounded():
    """A legend of long entries beside the axes can widen the figure as fast as its text grows,
    so that enlarging alone would never make it legible in the column; fitted, the figure's
    text is legible and the figure no wider than it may grow."""
    figures.apply_style()
    fig, ax = plt.subplots(figsize=(7, 4))
    for k in range(3):
        ax.plot([1, 2, 3], [k, k + 1, k + 2],
                label=f"a very long description of series {k}, as long as the axes are wide")
    ax.set_xlabel("x")
    ax.set_ylabel("y")
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=7)
    fig.tight_layout()
    figures.fit_to_read(fig)
    assert figures.small_texts(fig) == []
    box = fig.get_tightbbox(fig.canvas.get_renderer())
    assert box.width <= figures.MAX_WIDENING * fig.get_figwidth()
    assert not any("show under" in p for p in figures.check_figure(fig))
    plt.close(fig)


def test_legends_under_moves_a_legend_beside_its_axes_and_stacks_its_entries():
    figures.apply_style()
    fig, ax = plt.subplots(figsize=(7, 4))
    for k in range(4):
        ax.plot([1, 2], [k, k + 1], label=f"series {k}")
    ax.set_xlabel("x")
    ax.set_ylabel("y")
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), ncol=2)
    figures.legends_under(fig)
    legend = ax.get_legend()
    assert legend.get_window_extent().y1 < ax.get_window_extent().y0
    lefts = {round(t.get_window_extent().x0) for t in legend.get_texts()}
    assert len(lefts) == 1  # one column
    plt.close(fig)
