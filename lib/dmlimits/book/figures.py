"""Figure helpers: one style for the whole book, and the figures of each chapter.

Every figure is drawn from library values (lambdified expressions and the sweep grid), never from
numbers typed in a notebook.  PNGs are written at a fixed DPI with fixed metadata so that two
builds of the same scenario give the same bytes.
"""

from __future__ import annotations

from typing import Any

import matplotlib

matplotlib.use("Agg")

import functools
import io
import re
import warnings

import matplotlib.pyplot as plt
import numpy as np
from matplotlib import mathtext
from matplotlib.collections import PathCollection
from matplotlib.colors import to_rgba
from matplotlib.layout_engine import PlaceHolderLayoutEngine
from matplotlib.text import Text

from dmlimits.core.scenario import Scenario
from dmlimits.costs import model

DPI = 110  # a figure's size on a page of ordinary density, in pixels per inch
#: PNGs are written at twice that, so that they stay sharp on high-density screens; the page
#: scales them to the column.
SAVE_DPI = 2 * DPI
PNG_METADATA = {"Software": None}  # no version string: identical bytes across builds
PALETTE = ("#1b6ca8", "#d1495b", "#edae49", "#00798c", "#66a182", "#6c4f77", "#30343f")
STYLE = {
    # Figures are laid out at the resolution they are saved at: ``tight_layout``, the tight box
    # and the PNG then measure every label at one resolution, and matplotlib's layouts of them
    # (mathtext above all) are made once instead of once at each.  A figure reaches the book,
    # and a notebook's output, only as its PNG (dmlimits.book.glue), so nothing is drawn at another.
    "figure.dpi": SAVE_DPI,
    "savefig.dpi": SAVE_DPI,
    "figure.figsize": (7.0, 4.2),
    "font.size": 10,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.prop_cycle": matplotlib.cycler(color=PALETTE),
    "legend.frameon": False,
    "svg.hashsalt": "dmlimits",
    "path.simplify": True,
}


def apply_style() -> None:
    """Use the book's style in this process (figures reach the book through glue)."""
    plt.rcParams.update(STYLE)
    share_mathtext_parses()


#: Mathtext layouts kept per process (tick labels such as ``10^{28}``, legend entries).
MATHTEXT_PARSES = 4096


def share_mathtext_parses() -> bool:
    """Let every renderer of this process reuse the mathtext layouts another one made.

    Matplotlib keeps its last 50 mathtext layouts, each for the parser that made it, and every
    renderer has its own parser.  A figure is measured or drawn by three renderers on its way
    to the book (its layout, then the tight bounding box and the PNG), so its tick labels and
    legends would be parsed with pyparsing two or three times over, and a figure with log axes
    has many of them.  A parser's only state is its output type, so one cache keyed by that
    type and the parse's own arguments gives the same layouts
    (``tests/test_figures.py`` checks the PNG bytes are unchanged).  Returns whether the cache
    is shared: with a matplotlib whose parser is laid out otherwise (requirements.txt pins the
    one this was written for) nothing changes but the speed."""

    parser = mathtext.MathTextParser
    if getattr(parser, "_dmlimits_shared", False):
        return True
    own = getattr(parser, "_parse_cached", None)
    inner = getattr(own, "__wrapped__", None)
    if inner is None or set(vars(parser("agg"))) != {"_output_type"}:
        return False

    @functools.lru_cache(MATHTEXT_PARSES)
    def parse(output_type: str, *args: Any) -> Any:
        one = parser.__new__(parser)
        one._output_type = output_type
        return inner(one, *args)

    def _parse_cached(self: Any, *args: Any) -> Any:
        return parse(self._output_type, *args)

    parser._dmlimits_own = own  # matplotlib's, for tests/test_figures.py to compare with
    parser._parse_cached = _parse_cached
    parser._dmlimits_shared = True
    return True


# --- What a reader needs of a figure, checked on the figure object -----------------------------
#: Data spanning more than this ratio on a linear axis are squeezed into one corner.
LOG_SPAN = 100.0
#: Distinct x values should spread over at least this share of the axes' width.
MIN_SPREAD = 0.3


def _data_lines(ax: plt.Axes) -> list:
    """The lines that plot data (not axhline/axvline, which live in axes coordinates)."""
    return [
        line for line in ax.get_lines()
        if line.get_transform() == ax.transData and len(line.get_xdata()) >= 2
    ]  # fmt: skip


def _xy(line) -> np.ndarray:
    xy = np.asarray(line.get_xydata(), dtype=float)
    return xy[np.all(np.isfinite(xy), axis=1)]


def _points(ax: plt.Axes) -> np.ndarray:
    """Every plotted vertex and marker of the axes, in data coordinates."""
    parts = [_xy(line) for line in _data_lines(ax)]
    for coll in ax.collections:  # scatter points; areas and meshes are not points
        if isinstance(coll, PathCollection) and coll.get_offset_transform() == ax.transData:
            off = np.asarray(coll.get_offsets(), dtype=float)
            if off.ndim == 2 and len(off) and off.shape[1] == 2:
                parts.append(off[np.all(np.isfinite(off), axis=1)])
    parts = [p for p in parts if len(p)]
    return np.concatenate(parts) if parts else np.empty((0, 2))


def _display_points(ax: plt.Axes) -> np.ndarray:
    """Every line of the axes (reference lines included) sampled densely along its segments,
    and every scatter point, in display coordinates: what a legend box must not cover."""
    parts = []
    for line in ax.get_lines():
        if not line.get_visible() or len(line.get_xdata()) == 0:
            continue
        xy = np.asarray(line.get_xydata(), dtype=float)
        xy = xy[np.all(np.isfinite(xy), axis=1)]
        if not len(xy):
            continue
        if line.get_transform() == ax.transData and (
            (ax.get_xscale() == "log" and np.any(xy[:, 0] <= 0))
            or (ax.get_yscale() == "log" and np.any(xy[:, 1] <= 0))
        ):
            xy = xy[(xy[:, 0] > 0) | (ax.get_xscale() != "log")]
            xy = xy[(xy[:, 1] > 0) | (ax.get_yscale() != "log")]
        disp = line.get_transform().transform(xy)
        if line.get_linestyle() not in ("None", "", " ") and len(disp) > 1:
            t = np.linspace(0, 1, 24)[:, None, None]
            seg = disp[:-1][None] + t * (disp[1:] - disp[:-1])[None]
            disp = np.concatenate([disp, seg.reshape(-1, 2)])
        parts.append(disp)
    for coll in ax.collections:
        if isinstance(coll, PathCollection) and len(coll.get_offsets()):
            parts.append(coll.get_offset_transform().transform(coll.get_offsets()))
    return np.concatenate(parts) if parts else np.empty((0, 2))


#: Length of one colour's dash, in line widths, where equal curves share a line
#: (:func:`shared_line_styles`).
SHARED_DASH = 3.0


def _same_curve(a: np.ndarray, b: np.ndarray) -> bool:
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    return a.shape == b.shape and bool(np.allclose(a, b, rtol=1e-9, atol=0.0, equal_nan=True))


def shared_line_styles(curves: list[Any], style: str = "-") -> list[Any]:
    """The line style of each of ``curves`` (their y values at the same x, drawn on one axes in
    this order, each meant to be drawn in ``style``) so that every curve shows: ``style`` where
    no other curve is equal to it; where ``k`` curves are equal, each colour's dash (or dot, for
    ``style`` ``":"``) with room for the other ``k - 1``, the ``j``-th of them shifted by ``j``,
    so that their colours alternate along the one line instead of the last drawn hiding the
    rest.  Dashes are :data:`SHARED_DASH` line widths long, dots one, a dot apart."""
    groups: list[list[int]] = []
    for i, y in enumerate(curves):
        for group in groups:
            if _same_curve(curves[group[0]], y):
                group.append(i)
                break
        else:
            groups.append([i])
    styles: list[Any] = [style] * len(curves)
    on, off = (1.0, 1.0) if style == ":" else (SHARED_DASH, 0.0)
    for group in groups:
        k = len(group)
        if k > 1:
            for j, i in enumerate(group):
                styles[i] = (j * (on + off), (on, k * (on + off) - on))
    return styles


def shared_marker_sizes(points: list[Any], size: float) -> list[float]:
    """Marker sizes for ``points`` (or the markers of whole curves) drawn on one axes in this
    order: ``size`` where no other point (curve) is at the same place; where ``k`` coincide,
    the first drawn is the largest and each later one smaller, so that they show as rings
    around the last."""
    out = [size] * len(points)
    for i, p in enumerate(points):
        same = [j for j, q in enumerate(points) if _same_curve(p, q)]
        if len(same) > 1:
            out[i] = size * (1 + 0.7 * (len(same) - 1 - same.index(i)))
    return out


def _dashes(line: Any) -> Any:
    """How a line is dashed: its style, with the offset and pattern of a custom dash (kept by
    matplotlib in ``_unscaled_dash_pattern`` since 3.6; the style alone where it is not)."""
    return (line.get_linestyle(), repr(getattr(line, "_unscaled_dash_pattern", None)))


def hidden_lines(ax: plt.Axes) -> list[tuple[str, str]]:
    """Pairs ``(hidden, over)`` of the axes' data lines where a line of one colour is drawn on
    the same points, dashed and marked the same way, as a later line of another colour at least
    as wide, which hides it completely (each named by its label, or its place among the axes'
    lines)."""
    # A single marked point counts too: a dot can hide another.
    lines = [
        line for line in ax.get_lines()
        if line.get_visible() and line.get_transform() == ax.transData and len(line.get_xdata())
    ]  # fmt: skip
    names = [
        line.get_label() if not line.get_label().startswith("_") else f"unlabelled line {k}"
        for k, line in enumerate(lines)
    ]
    out = []
    for i, a in enumerate(lines):
        for j in range(i + 1, len(lines)):
            b = lines[j]
            if (
                to_rgba(a.get_color()) != to_rgba(b.get_color())
                and _dashes(a) == _dashes(b)
                and a.get_linewidth() <= b.get_linewidth()
                and a.get_marker() == b.get_marker()
                and (a.get_marker() in ("None", "", " ", None)
                     or a.get_markersize() <= b.get_markersize())
                and _same_curve(a.get_xydata(), b.get_xydata())
            ):  # fmt: skip
                out.append((names[i], names[j]))
                break
    return out


def legend_overlap(ax: plt.Axes) -> int:
    """How many of ``_display_points`` the axes' legend box covers (0 without a legend)."""
    legend = ax.get_legend()
    if legend is None or not legend.get_visible():
        return 0
    box = legend.get_window_extent()
    pts = _display_points(ax)
    inside = (
        (pts[:, 0] >= box.x0) & (pts[:, 0] <= box.x1)
        & (pts[:, 1] >= box.y0) & (pts[:, 1] <= box.y1)
    )  # fmt: skip
    return int(inside.sum())


#: Where a legend may go inside the axes, in the order they are tried.
LEGEND_PLACES = ("lower left", "upper right", "lower right", "upper left", "center left",
                 "center right", "lower center", "upper center")  # fmt: skip


def tidy_legends(fig: plt.Figure) -> None:
    """Move every legend that covers a line or a point of its axes to the first free place of
    :data:`LEGEND_PLACES`, or outside the axes on the right when none is free: one rule for the
    whole book, applied to every figure before it is glued.  The figure is left as a draw
    would find it (:func:`check_figure` need not draw it).

    Nothing is drawn unless a layout engine must place the axes: the figure functions lay
    their figures out (``tight_layout``) before they return them, limits still to autoscale
    are found by reading them, and a legend's box and the plotted points are found in display
    coordinates when asked.  A draw here (even without painting pixels) would repeat much of
    what ``savefig`` does; the PNG is drawn once, by ``savefig``, and every glued PNG of the
    book is byte-identical to one drawn first (``tests/test_figures.py``).
    ``tight_layout`` leaves a placeholder engine on the figure (matplotlib 3.6 and later), which
    places nothing when the figure is drawn: it is no reason to draw."""
    if _places_axes(fig.get_layout_engine()):
        fig.draw_without_rendering()  # the engine places the axes when the figure is drawn
    for ax in fig.axes:
        ax.get_xlim()  # limits still to autoscale are found when read, as a draw would
        legend = ax.get_legend()
        if legend is None or legend_overlap(ax) == 0:
            continue
        for loc in LEGEND_PLACES:
            # A legend inside its axes moves no axes (the layout engines leave it out), and its
            # box is found from its place when asked: no drawing needed to try a place.
            legend.set_loc(loc)
            if legend_overlap(ax) == 0:
                break
        else:
            legend.set_bbox_to_anchor((1.02, 1.0), transform=ax.transAxes)
            legend.set_loc("upper left")
            fig.draw_without_rendering()
            if legend_hidden_by(fig, ax):
                # Another panel stands to the right: the legend goes under the whole figure.
                handles, labels = legend.legend_handles, [t.get_text() for t in legend.get_texts()]
                legend.remove()
                fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.0),
                           ncol=min(len(labels), 3), frameon=False,
                           fontsize=legend_fontsize(ax))  # fmt: skip
                fig.draw_without_rendering()


def _places_axes(engine: Any) -> bool:
    """Whether a figure's layout engine moves its axes when the figure is drawn (the placeholder
    that ``tight_layout`` and ``set_layout_engine("none")`` leave behind moves nothing)."""
    return engine is not None and not isinstance(engine, PlaceHolderLayoutEngine)


def png_bytes(fig: plt.Figure) -> bytes:
    """The figure as the book stores it: a PNG at :data:`SAVE_DPI`, cropped to what is drawn
    (``bbox_inches="tight"``), with fixed metadata (byte-identical across builds).

    ``savefig`` finds the tight box after a draw without pixels, then draws the pixels: two
    draws.  A figure whose axes no layout engine moves (the book's are laid out by
    ``tight_layout`` before they are returned) needs no first draw: its tight box is measured as
    it stands, with a renderer at the saved resolution as ``savefig``'s, and handed to
    ``savefig``, which then draws once; the placeholder engine ``tight_layout`` left is removed
    from the figure (it moved nothing).  The PNG is the one ``savefig(bbox_inches="tight")``
    writes (``tests/test_figures.py`` compares them).  A figure whose engine places its axes
    when drawn (a constrained layout) is saved by ``savefig`` as it is."""
    buffer = io.BytesIO()
    tight: Any = "tight"
    if not _places_axes(fig.get_layout_engine()) and hasattr(fig.canvas, "get_renderer"):
        fig.set_layout_engine(None)  # the placeholder places nothing; savefig would draw for it
        if fig.get_layout_engine() is None:  # (an rcParams layout would have replaced it)
            tight = _tight_box(fig)
    fig.savefig(buffer, format="png", dpi=SAVE_DPI, metadata=PNG_METADATA, bbox_inches=tight)
    return buffer.getvalue()


def _tight_box(fig: plt.Figure) -> Any:
    """The box ``savefig(bbox_inches="tight")`` crops ``fig`` to, in inches, measured at
    :data:`SAVE_DPI` without drawing the figure (the book's figures are laid out at it; one
    laid out at another resolution is measured at this one, then given its own back)."""
    laid_out = fig.dpi
    if laid_out != SAVE_DPI:  # (setting the same resolution again invalidates every transform)
        fig.dpi = SAVE_DPI
    try:
        box = fig.get_tightbbox(fig.canvas.get_renderer())
    finally:
        if fig.dpi != laid_out:
            fig.dpi = laid_out
    pad = plt.rcParams["savefig.pad_inches"]
    return box.padded(pad, pad)


def legend_fontsize(ax: plt.Axes) -> float:
    """The font size the axes' legend uses (for a legend moved under the figure)."""
    legend = ax.get_legend()
    texts = legend.get_texts() if legend is not None else []
    return texts[0].get_fontsize() if texts else plt.rcParams["legend.fontsize"]


def legend_hidden_by(fig: plt.Figure, ax: plt.Axes) -> list[plt.Axes]:
    """The other axes of ``fig`` whose box overlaps the legend of ``ax`` (a legend pushed
    beside its panel onto the next one is hidden behind it)."""
    legend = ax.get_legend()
    if legend is None or not legend.get_visible():
        return []
    box = legend.get_window_extent()
    return [
        other
        for other in fig.axes
        if other is not ax and other.get_visible() and box.overlaps(other.get_window_extent())
    ]


def _squeezed(v: np.ndarray, lo: float, hi: float) -> bool:
    """Positive data spanning more than :data:`LOG_SPAN` with most of the points in the bottom
    twentieth of a linear axis: a logarithmic axis would show them."""
    positive = v[v > 0]
    if len(positive) < 3 or len(positive) < len(v) or positive.max() / positive.min() <= LOG_SPAN:
        return False
    return float(np.mean(v <= lo + 0.05 * (hi - lo))) > 0.5


def _labelled_elsewhere(fig: plt.Figure, ax: plt.Axes, which: str) -> bool:
    """Whether an axes sharing this one's ``which`` axis carries the label (subplots with a
    shared axis label only the outer ones)."""
    shared = ax.get_shared_x_axes() if which == "x" else ax.get_shared_y_axes()
    for other in fig.axes:
        if other is not ax and shared.joined(ax, other):
            label = other.get_xlabel() if which == "x" else other.get_ylabel()
            if label.strip():
                return True
    return False


#: The width of the book's text column on a desktop screen, in CSS pixels: a figure's PNG is
#: scaled down to it (never up), so its text shows smaller than it was drawn.
COLUMN_PX = 755
#: The smallest text a figure may show at the column's width, in points (a CSS point is 4/3 of
#: a CSS pixel): tick labels, legends, annotations and contour labels alike.
MIN_TEXT_PT = 9.0
#: The least colour difference (CIE 1976 ΔE in L*a*b*) between two labelled series of one axes
#: drawn with the same line style and marker: below it a reader cannot tell them apart in the
#: legend (a pale and a dark shade of one hue are about 30 apart; two teals about 10).
MIN_COLOUR_DIFFERENCE = 20.0


def shown_points(fig: plt.Figure, size: float) -> float:
    """The size, in points, at which text of ``size`` points drawn in ``fig`` shows in the book's
    column (:data:`COLUMN_PX`): the PNG is written at :data:`SAVE_DPI`, cropped to its tight box,
    and the page scales it to the column when it is wider."""
    width_px = _tight_box(fig).width * SAVE_DPI
    return size / 72 * SAVE_DPI * min(1.0, COLUMN_PX / width_px) * 0.75


def lab(colour: Any) -> np.ndarray:
    """CIE L*a*b* (D65) of a matplotlib colour, for comparing how different two colours look."""
    rgb = np.array(to_rgba(colour)[:3])
    rgb = np.where(rgb <= 0.04045, rgb / 12.92, ((rgb + 0.055) / 1.055) ** 2.4)
    xyz = SRGB_TO_XYZ @ rgb / D65
    f = np.where(xyz > (6 / 29) ** 3, np.cbrt(xyz), xyz / (3 * (6 / 29) ** 2) + 4 / 29)
    return np.array([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])


#: Linear sRGB to CIE XYZ, and the D65 white point (IEC 61966-2-1).
SRGB_TO_XYZ = np.array(
    [[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]]
)
D65 = np.array([0.95047, 1.0, 1.08883])


def _handle_look(handle: Any) -> tuple[Any, tuple] | None:
    """A legend handle's colour and the rest of its look (line style and marker), or ``None``
    when it has no single colour."""
    if hasattr(handle, "get_color") and hasattr(handle, "get_linestyle"):
        if hasattr(handle, "get_marker"):  # a line; a hollow marker is another look
            hollow = str(handle.get_markerfacecolor()).lower() == "none"
            return handle.get_color(), (handle.get_linestyle(), handle.get_marker(), hollow)
    if hasattr(handle, "get_facecolor"):
        face = np.atleast_2d(handle.get_facecolor())
        if len(face) and face[0][3] > 0:  # a hatched patch is another look
            hatch = handle.get_hatch() if hasattr(handle, "get_hatch") else None
            return face[0], ("patch", hatch)
    return None


def enlarge_small_text(fig: plt.Figure) -> bool:
    """Set every text of ``fig`` that would show under :data:`MIN_TEXT_PT` in the book's column
    just large enough, and lay the figure out again; whether anything changed.

    A figure drawn wider than the column (two or three panels side by side) is scaled down on
    the page, its text with it; the sizes that keep it legible follow from the figure's width
    (:func:`shown_points`), so they are set here, from that width, rather than chosen in each
    figure.  Tick labels are set through their axis (ticks are made again at each draw); the
    layout is redone up to three times, as the tight box it crops to moves with the text."""
    changed = False
    for _ in range(3):
        need = (MIN_TEXT_PT + 0.3) / shown_points(fig, 1.0)
        grew = False
        for ax in fig.axes:
            for axis in (ax.xaxis, ax.yaxis):
                ticks = axis.get_major_ticks() + axis.get_minor_ticks()
                if any(tk.label1.get_fontsize() < need for tk in ticks):
                    axis.set_tick_params(which="both", labelsize=need)
                    grew = True
        for text in fig.findobj(Text):
            if text.get_text().strip() and text.get_fontsize() < need:
                text.set_fontsize(need)
                grew = True
        if not grew:
            break
        changed = True
        if not _places_axes(fig.get_layout_engine()):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)  # a layout it cannot tighten stays
                fig.tight_layout()
        fig.draw_without_rendering()
    return changed


#: How much wider than its own size a figure's saved box may grow while its text is enlarged: a
#: legend wider than the figure grows as fast as its text, and enlarging it further would only
#: shrink the whole on the page.
MAX_WIDENING = 1.3


def fit_to_read(fig: plt.Figure) -> None:
    """What glue does to every figure before checking it: text enlarged to be legible in the
    column (:func:`enlarge_small_text`) and legends moved off the data (:func:`tidy_legends`),
    again while a legend moved beside the figure widens it and shrinks its text on the page (such
    a legend goes under its axes instead).  The figure is left laid out as a draw would leave
    it."""
    moved = False
    for attempt in range(8):
        wide = _tight_box(fig).width > MAX_WIDENING * fig.get_figwidth()
        if (wide or attempt == 2) and not moved:
            legends_under(fig)  # a legend beside the axes widens the figure as its text grows
            moved = True
            wide = _tight_box(fig).width > MAX_WIDENING * fig.get_figwidth()
        if wide:
            break  # text outgrowing the figure: the figure itself must change (check_figure says)
        enlarge_small_text(fig)
        tidy_legends(fig)
        if not small_texts(fig):
            break


def legends_under(fig: plt.Figure) -> None:
    """Each legend placed beside or under its axes goes under them with its entries in one
    column, and so does a legend of the whole figure."""
    for ax in fig.axes:
        legend = ax.get_legend()
        if legend is None:
            continue
        handles, labels = legend.legend_handles, [t.get_text() for t in legend.get_texts()]
        size = legend_fontsize(ax)
        anchor, box = legend.get_bbox_to_anchor(), ax.get_window_extent()
        # Beside the axes or under them: under them, in one column (a legend's columns are
        # fixed when it is made, so it is made again); a legend inside its axes stays.
        if anchor.x0 > box.x1 or anchor.y1 < box.y0:
            ax.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, -0.2),
                      ncols=1, fontsize=size)  # fmt: skip
    for legend in list(fig.legends):
        handles, labels = legend.legend_handles, [t.get_text() for t in legend.get_texts()]
        size = legend.get_texts()[0].get_fontsize() if labels else None
        legend.remove()
        fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncols=1,
                   frameon=False, fontsize=size)  # fmt: skip
    if not _places_axes(fig.get_layout_engine()):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            fig.tight_layout()
    fig.draw_without_rendering()


def close_colours(fig: plt.Figure) -> list[tuple[str, str, float]]:
    """Pairs of a legend's entries drawn alike but for colours closer than
    :data:`MIN_COLOUR_DIFFERENCE`, with their difference: ``(label, label, ΔE)``."""
    out = []
    legends = [ax.get_legend() for ax in fig.axes] + list(fig.legends)
    for legend in legends:
        if legend is None:
            continue
        looks = []
        for handle, text in zip(legend.legend_handles, legend.get_texts(), strict=False):
            look = _handle_look(handle)
            if look is not None and text.get_text().strip():
                looks.append((text.get_text(), lab(look[0]), look[1]))
        for i, (a, la, sa) in enumerate(looks):
            for b, lb, sb in looks[i + 1 :]:
                d = float(np.linalg.norm(la - lb))
                if sa == sb and d < MIN_COLOUR_DIFFERENCE:
                    out.append((a, b, round(d, 1)))
    return out


def small_texts(fig: plt.Figure) -> list[tuple[str, float]]:
    """The figure's visible texts that show under :data:`MIN_TEXT_PT` in the book's column, with
    the size each shows at (points), smallest first."""
    found = []
    scale = shown_points(fig, 1.0)
    for t in fig.findobj(Text):
        if t.get_visible() and t.get_text().strip() and t.get_alpha() != 0:
            shown = t.get_fontsize() * scale
            if shown < MIN_TEXT_PT - 0.01:
                found.append((t.get_text().strip()[:40], round(shown, 1)))
    return sorted(set(found), key=lambda x: x[1])


def check_figure(fig: plt.Figure, *, drawn: bool = False) -> list[str]:
    """What a reader would trip over in ``fig``, one sentence each (an empty list when none):
    data squeezed into a corner of a linear axis that spans decades, points collapsed into a
    small part of an axis, data outside the limits, a legend box over plotted points, two
    labelled series drawn alike, a line hidden under another colour's drawn on the same points
    (:func:`hidden_lines`), an axis without a label, text that shows under
    :data:`MIN_TEXT_PT` at the column's width (:func:`small_texts`), legend entries whose
    colours are too close to tell apart (:func:`close_colours`), and multi-letter subscripts that
    mathtext would set in italics letter by letter.  The figure is laid out first, without
    painting its pixels (legends need a renderer), unless ``drawn`` says it is laid out as a
    draw would lay it out (:func:`tidy_legends` leaves it so: a legend it moves is found at its
    new place without drawing)."""

    problems = []
    if not drawn:
        fig.draw_without_rendering()
    for k, ax in enumerate(fig.axes):
        if not ax.get_visible() or ax.get_label() == "<colorbar>":
            continue
        where = f"axes {k}" + (f" ({ax.get_title()!r})" if ax.get_title() else "")
        pts = _points(ax)
        if len(pts) == 0:
            continue
        for i, (axis, scale) in enumerate((("x", ax.get_xscale()), ("y", ax.get_yscale()))):
            v = pts[:, i]
            lo, hi = sorted(ax.get_xlim() if i == 0 else ax.get_ylim())
            if scale == "linear" and _squeezed(v, lo, hi):
                problems.append(f"{where}: {axis} data spanning decades are squeezed into a "
                                "corner of a linear axis")  # fmt: skip
            tol = 1e-9 * max(abs(lo), abs(hi), 1e-300)
            if np.any(v < lo - tol) or np.any(v > hi + tol):
                problems.append(f"{where}: some {axis} data lie outside the axis limits")
        xs = np.unique(pts[:, 0])
        if len(xs) >= 3:
            px = ax.transData.transform(np.column_stack([xs, np.full_like(xs, pts[0, 1])]))[:, 0]
            if np.ptp(px) < MIN_SPREAD * ax.bbox.width:
                problems.append(f"{where}: the points collapse into a narrow band of the x axis")
        covered = legend_overlap(ax)
        if covered:
            problems.append(f"{where}: the legend covers {covered} plotted point(s)")
        if legend_hidden_by(fig, ax):
            problems.append(f"{where}: the legend lies under another panel of the figure")
        looks: dict[tuple, str] = {}
        for line in _data_lines(ax):
            label = line.get_label()
            if label.startswith("_"):
                continue

            look = (to_rgba(line.get_color()), line.get_linestyle(), line.get_marker())
            if look in looks:
                problems.append(f"{where}: {label!r} and {looks[look]!r} are drawn alike")
            looks[look] = label
        for under, over in hidden_lines(ax):
            problems.append(f"{where}: {under!r} lies under {over!r}, drawn the same way on "
                            "the same points (figures.shared_line_styles shows both)")  # fmt: skip
        for name, text in (("x", ax.get_xlabel()), ("y", ax.get_ylabel())):
            if not text.strip() and not _labelled_elsewhere(fig, ax, name):
                problems.append(f"{where}: the {name} axis has no label")
    for legend in fig.legends:  # a legend of the whole figure must stay off every panel
        box = legend.get_window_extent()
        if any(ax.get_visible() and box.overlaps(ax.get_window_extent()) for ax in fig.axes):
            problems.append("the figure's legend lies over a panel")
    small = small_texts(fig)
    if small:
        text, size = small[0]
        problems.append(f"{len(small)} text(s) show under {MIN_TEXT_PT:g} pt at the "
                        f"column's width ({COLUMN_PX} px), the smallest {text!r} at "
                        f"{size:g} pt")  # fmt: skip
    for a, b, d in close_colours(fig):
        problems.append(f"{a!r} and {b!r} are drawn in colours a reader cannot tell apart "
                        f"(ΔE {d:g}, at least {MIN_COLOUR_DIFFERENCE:g})")  # fmt: skip
    for t in fig.findobj(Text):
        for math in re.findall(r"\$([^$]+)\$", t.get_text()):
            if re.search(r"_\{?[A-Za-z]{2,}", math):
                problems.append(f"mathtext {math!r}: put a word in a subscript in \\mathrm{{}}")
    return sorted(set(problems))


def compute_axis(ax: plt.Axes, label: str = "training compute (FLOP)") -> None:
    ax.set_xscale("log")
    ax.set_xlabel(label)


def shape_figure(scn: Scenario) -> plt.Figure:
    """Width, depth (and experts) of the sweep's models against compute: grid and smooth law."""
    sh = model.shapes(scn)
    c = np.geomspace(sh.compute.min(), sh.compute.max(), 200)
    smooth = model.along_compute(scn, c)
    fig, ax = plt.subplots()
    ax.plot(c, smooth["d_model"], color=PALETTE[0], lw=1, alpha=0.6)
    ax.plot(
        sh.compute, sh.d_model, "o", ms=3.5, color=PALETTE[0], label="width $d_{\\mathrm{model}}$"
    )
    ax.plot(c, smooth["layers"], color=PALETTE[1], lw=1, alpha=0.6)
    ax.plot(sh.compute, sh.layers, "s", ms=3.5, color=PALETTE[1], label="depth $L$ (rounded)")
    if scn["model.sparse"]:
        ax.plot(c, smooth["experts"], color=PALETTE[3], lw=1, alpha=0.6)
        ax.plot(
            sh.compute, sh.experts, "^", ms=3.5, color=PALETTE[3], label="experts $S$ (rounded)"
        )
    ax.set_yscale("log")
    compute_axis(ax)
    ax.set_ylabel("size")
    ax.legend(loc="upper left")
    ax.set_title(f"Model shapes of the sweep ({scn.name})", fontsize=10)
    fig.tight_layout()
    return fig


def batch_figure(scn: Scenario) -> plt.Figure:
    """Batch size and number of steps against compute for the three batch laws."""
    sh = model.shapes(scn)
    fig, (left, right) = plt.subplots(1, 2, figsize=(9.0, 3.8))
    for i, law in enumerate(model.BATCH_LAWS):
        batch = model.batch_tokens(scn, sh.compute, sh.experts, law)
        chosen = law == scn["batch.law"]
        style = dict(
            color=PALETTE[i],
            lw=2.2 if chosen else 1.0,
            alpha=1.0 if chosen else 0.7,
            label=model.BATCH_LAW_LABELS[law] + (" (this scenario)" if chosen else ""),
        )
        left.plot(sh.compute, batch, **style)
        right.plot(sh.compute, sh.tokens / batch, **style)
    for ax, label in ((left, "batch size (tokens)"), (right, "optimizer steps")):
        ax.set_yscale("log")
        compute_axis(ax)
        ax.set_ylabel(label)
    left.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    return fig


def budget_figure(scn: Scenario) -> plt.Figure:
    """Time available per step and per layer per step, against the fixed latencies."""
    sh = model.shapes(scn)
    fig, ax = plt.subplots()
    ax.plot(
        sh.compute, sh.step_budget, "o-", ms=3, label="time per step, $T / n_{\\mathrm{steps}}$"
    )
    ax.plot(
        sh.compute,
        sh.layer_budget,
        "s-",
        ms=3,
        label="time per layer per step, $T / (n_{\\mathrm{steps}} L)$",
    )
    ax.axhline(
        scn["hardware.kernel_latency"],
        color=PALETTE[2],
        ls="--",
        label="one matmul kernel's latency",
    )
    ax.axhline(
        scn["network.latency"], color=PALETTE[3], ls=":", label="one network message's latency"
    )
    ax.set_yscale("log")
    compute_axis(ax)
    ax.set_ylabel("seconds")
    ax.legend(loc="lower left", fontsize=8)
    ax.set_title(
        f"The time budget of a {scn['training.months']:g}-month run ({scn.name})", fontsize=10
    )
    fig.tight_layout()
    return fig
