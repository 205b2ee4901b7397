"""Interactive figures: a reader moves a control and a curve, a mark and a readout move with it.

Every value a widget shows is computed here, by the library, when its chapter executes, and
written into the page as data; the page's JavaScript (``widget.js`` and ``explorer.js`` in
:data:`dmlimits.core.assets.STATIC`) only looks values up by the positions of the controls and
draws them with plotly.js.  No formula is written again in JavaScript and nothing is
interpolated: a control moves between the values it was computed at.

The charting library is plotly.js's basic bundle from the npm registry at a pinned version
(:data:`dmlimits.core.assets.PLOTLY`), fetched and checked once by :mod:`dmlimits.build.vendor`
and copied with the widgets' own files into the site's ``_static`` by
:mod:`dmlimits.build.sphinxext`: a page fetches nothing beyond the site.  Each widget sits beside
the static figure it extends, which stays for print and for readers without JavaScript.
"""

from __future__ import annotations

import html
import itertools
import json
import math
from typing import Any

import numpy as np

from dmlimits.core.assets import PLOTLY, STATIC
from dmlimits.core.plumbing import digest

#: How a page under ``notebooks/`` reaches the site's static folder.
STATIC_URL = "../_static"


class WidgetError(ValueError):
    """A widget's specification is not what the page's script reads."""


def json_safe(value: Any) -> Any:
    """``value`` with numpy scalars and arrays as Python numbers and lists, and every ``NaN`` or
    infinity as ``None`` (JSON has neither; the page draws a gap)."""
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple | np.ndarray):
        return [json_safe(v) for v in value]
    if isinstance(value, bool | np.bool_):
        return bool(value)
    if isinstance(value, int | np.integer):
        return int(value)
    if isinstance(value, float | np.floating):
        return float(value) if math.isfinite(value) else None
    return value


def versioned(name: str) -> str:
    """The address of one of the widgets' files with a digest of its bytes (``?v=``, as Sphinx
    versions its own assets), so that a browser never pairs a cached old script with new data."""
    return f"{STATIC_URL}/dmlimits/{name}?v={digest((STATIC / name).read_bytes())[:12]}"


def page_assets() -> str:
    """The tags that load the charting library, the widgets' scripts and their style sheet
    (each widget carries them; the scripts draw each widget once however often they run)."""
    return (
        f'<link rel="stylesheet" href="{versioned("widgets.css")}">'
        f'<script src="{STATIC_URL}/vendor/{PLOTLY.file_name}"></script>'
        f'<script src="{versioned("widget.js")}"></script>'
        f'<script src="{versioned("explorer.js")}"></script>'
    )


class Html:
    """A block of HTML for the notebook to display (``text/html``), and its plain-text form for
    readers of the notebook itself."""

    def __init__(self, markup: str, text: str) -> None:
        self.markup = markup
        self.text = text

    def _repr_html_(self) -> str:
        return self.markup

    def __repr__(self) -> str:
        return self.text


#: The kinds of widget the page's scripts draw.
KINDS = ("curves", "explorer")


def embed(kind: str, element_id: str, data: dict[str, Any], summary: str) -> Html:
    """A widget of ``kind`` (``"curves"`` or ``"explorer"``) with its data, under the HTML id
    ``element_id``.  ``summary`` is what a reader without JavaScript (and the notebook's text
    form) is told."""
    if kind not in KINDS:
        raise WidgetError(f"kind: got {kind!r}; expected one of {', '.join(KINDS)}")
    if not element_id.replace("-", "").isalnum():
        raise WidgetError(f"element_id: got {element_id!r}; expected letters, digits and hyphens")
    payload = json.dumps(json_safe(data), separators=(",", ":"), allow_nan=False)
    # No "<" at all inside the script element: it can neither end it nor open a comment there.
    payload = payload.replace("<", "\\u003c")
    markup = (
        f'<div class="dmlimits-{kind}" id="{element_id}" data-kind="{kind}">'
        f'<noscript>{html.escape(summary)}</noscript></div>'
        f'<script type="application/json" id="{element_id}-data">{payload}</script>'
        f"{page_assets()}"
    )
    return Html(markup, summary)


def curves(
    element_id: str,
    title: str,
    controls: list[dict[str, Any]],
    x_control: str,
    x_label: str,
    y_label: str,
    series: dict[tuple[int, ...], list[dict[str, Any]]],
    *,
    x_log: bool = False,
    y_log: bool = False,
    y_percent: bool = False,
    y_unit: str = "",
    summary: str = "",
) -> Html:
    """A family of curves, one set of ``series`` for each position of the controls other than
    ``x_control``, and a mark on each series at the position of ``x_control``.

    ``controls``: each ``{"name", "label", "values", "labels", "initial"}`` (``values`` the
    numbers a control steps through, ``labels`` how the page shows them, ``initial`` an index).
    ``series``: keyed by the indices of the other controls in their order; each series
    ``{"name", "x", "y"}`` with ``x`` equal to ``x_control``'s values, so that the mark sits on
    a computed point.  ``y_unit`` follows each value the readout prints.
    """
    required = ("name", "label", "values", "labels", "initial")
    for i, c in enumerate(controls):
        absent = [k for k in required if k not in c]
        if absent:
            raise WidgetError(
                f"controls[{i}]: no {', '.join(absent)}; expected {', '.join(required)}"
            )
    names = [c["name"] for c in controls]
    if x_control not in names:
        raise WidgetError(f"x_control: got {x_control!r}; expected one of {', '.join(names)}")
    for c in controls:
        if len(c["values"]) != len(c["labels"]) or not c["values"]:
            raise WidgetError(
                f"control {c['name']}: {len(c['values'])} values and {len(c['labels'])} labels; "
                "expected as many labels as values, at least one"
            )
        if not 0 <= c["initial"] < len(c["values"]):
            raise WidgetError(
                f"control {c['name']}: initial {c['initial']!r}; expected an index below "
                f"{len(c['values'])}"
            )
    xs = next(c["values"] for c in controls if c["name"] == x_control)
    others = [c for c in controls if c["name"] != x_control]
    want = set(itertools.product(*(range(len(c["values"])) for c in others)))
    if set(series) != want:
        extra, lost = sorted(set(series) - want), sorted(want - set(series))
        raise WidgetError(
            f"series: {len(series)} positions, {len(lost)} missing (first {lost[:1]}) and "
            f"{len(extra)} unknown (first {extra[:1]}); expected one per position of the controls "
            "other than x_control, keyed by their indices"
        )
    for key, lines in series.items():
        for line in lines:
            if list(line["x"]) != list(xs):
                raise WidgetError(
                    f"series {key} {line['name']!r}: x is not {x_control}'s values; expected them"
                )
            if len(line["y"]) != len(xs):
                raise WidgetError(
                    f"series {key} {line['name']!r}: {len(line['y'])} values of y; expected "
                    f"{len(xs)}, one per value of {x_control}"
                )
    data = {
        "title": title,
        "controls": controls,
        "x": {"control": x_control, "label": x_label, "log": x_log},
        "y": {"label": y_label, "log": y_log, "percent": y_percent, "unit": y_unit},
        "series": {",".join(str(i) for i in key): lines for key, lines in series.items()},
    }
    return embed("curves", element_id, data, summary or title)
