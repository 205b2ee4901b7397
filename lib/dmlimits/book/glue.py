"""Numbers and formulas into prose: the only way a computed value reaches the book's text.

``glue(key, value)`` stores a value in the executing notebook for MyST-NB to paste:

* a number (Python or numpy; ``NaN`` and infinity refused) is stored as a plain Python ``int`` or
  ``float`` under ``key``, for ``{glue:text}`key:.3g``` with the rounding in the prose, and a
  readable form under ``key.sci`` ("2.05 × 10²⁸", three significant figures) for
  ``{glue:text}`key.sci```;
* a sympy expression or equation is stored as math (LaTeX, rendered with the book's notation),
  for ``{glue}`key``` inline or ``{glue:math}`` as display math;
* a string is stored as text for ``{glue:text}`key```;
* a matplotlib figure is first checked for what a reader would trip over
  (first made fit to read, :func:`dmlimits.book.figures.fit_to_read`: its small text enlarged
  for the column, its legends off the data; then :func:`dmlimits.book.figures.check_figure`; a
  problem stops the notebook), then stored as a PNG
  (twice the screen resolution, no timestamp) for ``{glue:figure}``, and closed.

:func:`read_glued` reads the values back from an executed notebook, which is how the tests compare
the book with the library.
"""

from __future__ import annotations

import ast
import json
import math
import numbers
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import sympy as sp

from dmlimits.book.figures import check_figure, fit_to_read, png_bytes, share_mathtext_parses
from dmlimits.core import published
from dmlimits.core.symbols import REGISTRY

SUPERSCRIPT = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


class GlueError(ValueError):
    """A value cannot be glued into the book's prose."""


def as_number(key: str, value: Any) -> int | float:
    """A Python int or float from a Python or numpy number; ``NaN``, infinity and non-numbers
    raise :class:`GlueError` naming the key."""
    if isinstance(value, bool | np.bool_):
        raise GlueError(f"glue {key!r}: got a boolean {value!r}; expected a number")
    if isinstance(value, np.ndarray):
        if value.shape != ():
            raise GlueError(
                f"glue {key!r}: got an array of shape {value.shape}; expected one number"
            )
        value = value[()]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, sp.Basic) and value.is_number:
        value = float(value)
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        value = float(value)
        if not math.isfinite(value):
            raise GlueError(
                f"glue {key!r}: got {value!r}; expected a finite number (a NaN or "
                "an infinity here means the computation failed upstream)"
            )
        return value
    raise GlueError(
        f"glue {key!r}: got {type(value).__name__} {value!r}; expected a number, "
        "a sympy expression or a string"
    )


def sci(value: float, digits: int = 3) -> str:
    """The book's one way to write a number in prose: ``2.05 × 10²⁸`` for large or small
    magnitudes, plain digits otherwise, and a whole number below ten million as a count with
    thousands separators (``4,096``, never ``4.10 × 10³``)."""
    if value == 0:
        return "0"
    if float(value).is_integer() and abs(value) < 1e7:
        return f"{int(value):,}"
    exponent = math.floor(math.log10(abs(value)))
    if -3 <= exponent < 5:
        return f"{value:,.{max(digits - 1 - exponent, 0)}f}"
    mantissa = round(value / 10**exponent, digits - 1)
    if abs(mantissa) >= 10:  # rounding carried into the next decade
        mantissa /= 10
        exponent += 1
    text = f"{mantissa:.{digits - 1}f}"
    return f"{text} × 10{str(exponent).translate(SUPERSCRIPT)}"


class TextOutput:
    """A glued string.  Its ``text/plain`` is the string's repr: MyST-NB's ``{glue:text}``
    reads that with ``ast.literal_eval`` and gets the string back, so it pastes it as it is.
    (The bare text would not survive: ``4,194,304`` evaluates to the tuple ``(4, 194, 304)``.)"""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return repr(self.text)


class MathOutput:
    """Displays as LaTeX only: ``{glue}`key``` pastes it as inline math (MyST-NB turns inline
    text/latex into a math node) and ``{glue:math}`` as display math.  (Pasted Markdown is not
    parsed for $...$ or roles, so Markdown is not offered.)"""

    def __init__(self, latex: str) -> None:
        self.latex = latex

    def _repr_latex_(self) -> str:
        return f"$\\displaystyle {self.latex}$"

    def __repr__(self) -> str:
        return self.latex


class PngOutput:
    """A figure rendered once to PNG bytes with fixed metadata (byte-identical across builds)."""

    def __init__(self, fig: Any) -> None:
        self.png = png_bytes(fig)

    def _repr_png_(self) -> bytes:
        return self.png

    def __repr__(self) -> str:
        return "<figure>"


#: MyST-NB's glue protocol (``myst_nb.glue`` with ``display=False``, the version pinned in
#: requirements.txt): the value's display data, each MIME type under this prefix, with the
#: key in the output's ``scrapbook`` metadata.  Written out here so that a chapter's kernel does
#: not import myst_nb, whose imports (nbformat, jsonschema and its format checkers) are large and
#: serve no chapter; tests/test_glue.py checks it gives what ``myst_nb.glue`` gives.
GLUE_PREFIX = "application/papermill.record/"


def paste(key: str, obj: Any) -> None:
    from IPython.core.formatters import format_display_data  # IPython loads only inside a kernel
    from IPython.display import display  # IPython loads only inside a kernel

    bundle, metadata = format_display_data(obj)
    metadata["scrapbook"] = {"name": key, "mime_prefix": GLUE_PREFIX}
    display({GLUE_PREFIX + k: v for k, v in bundle.items()}, raw=True, metadata=metadata)


_PREFIXES = ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, ""), (1e-3, "m"),
             (1e-6, "µ"), (1e-9, "n"))  # fmt: skip
_BINARY = ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB"))
_SI_UNITS = {"byte/s": "B/s", "byte": "B", "Hz": "Hz", "s": "s", "FLOP/s": "FLOP/s"}


def quantity(value: float, unit: str = "", digits: int = 4) -> str:
    """A value with its unit as a reader writes it: ``3.352 TB/s``, ``1,830 MHz``,
    ``1.125 µs``, ``50 MiB``, ``4,194,304 tokens``; at most ``digits`` significant digits, no
    trailing zeros, no ``e+12``."""
    value = float(value)
    if value == 0 and unit in _SI_UNITS:
        return f"0 {_SI_UNITS[unit]}"  # "0 B", as "50 MiB" and "3.352 TB/s"; never "0 byte"
    if unit == "byte":
        for size, name in _BINARY:
            if value >= size and value % size == 0 and value / size < 1e4:
                return f"{value / size:,.{digits}g} {name}"
    if unit in _SI_UNITS and value != 0 and abs(value) < 1e15:
        for scale, prefix in _PREFIXES:
            if abs(value) >= scale * (1 - 1e-12):
                if unit == "s" and scale > 1:
                    break  # seconds stay seconds above one
                number = f"{value / scale:.{digits}g}"
                if "e" not in number:
                    return f"{number} {prefix}{_SI_UNITS[unit]}"
                break
    text = sci(value, digits)
    if "×" in text:
        mantissa, power = text.split(" × ")
        mantissa = mantissa.rstrip("0").rstrip(".") if "." in mantissa else mantissa
        text = f"{mantissa} × {power}"
    elif "." in text and not float(value).is_integer():
        text = f"{value:.{digits}g}"
    return f"{text} {unit}".strip()


def factor(value: float) -> str:
    """A ratio as a factor for prose: ``2,480`` or ``3.4``, ``2.48 × 10⁴``; never ``e+03``."""
    return sci(float(value), 3)


def glue(key: str, value: Any, *, digits: int = 3) -> Any:
    """Glue a number, a sympy expression, a string or a figure under ``key``; return the glued
    value (``None`` for a figure: it is closed once stored, and a notebook cell that glues one
    shows nothing below its code)."""
    if not isinstance(key, str) or not key or ":" in key:
        raise GlueError(f"glue key {key!r}: expected a non-empty name without ':'")
    if isinstance(value, str):
        paste(key, TextOutput(value))
        return value
    if type(value).__name__ == "Figure" and hasattr(value, "savefig"):

        share_mathtext_parses()
        fit_to_read(value)
        problems = check_figure(value, drawn=True)
        if problems:
            plt.close(value)
            raise GlueError(f"glue {key!r}: the figure is not fit to read: " + "; ".join(problems))
        paste(key, PngOutput(value))
        plt.close(value)
        return None
    if isinstance(value, sp.Basic) and not value.is_number:
        paste(key, MathOutput(REGISTRY.latex(value)))
        return value
    number = as_number(key, value)
    paste(key, number)
    paste(key + ".sci", TextOutput(sci(float(number), digits)))
    return number


def glue_latex(key: str, latex: str) -> str:
    """Glue LaTeX that the library wrote (a rule that is not an equation, say) as math, for
    ``{glue}`key``` inline or ``{glue:math}`` as display math."""
    if not isinstance(key, str) or not key or ":" in key:
        raise GlueError(f"glue key {key!r}: expected a non-empty name without ':'")
    if not isinstance(latex, str) or not latex.strip():
        raise GlueError(f"glue {key!r}: got {latex!r}; expected a non-empty LaTeX string")
    paste(key, MathOutput(latex))
    return latex


def read_glued(notebook: str | Path) -> dict[str, Any]:
    """Every glued key of an executed notebook and its value (numbers as numbers)."""
    nb = json.loads(Path(notebook).read_text())
    out: dict[str, Any] = {}
    for cell in nb.get("cells", []):
        for output in cell.get("outputs", []):
            meta = output.get("metadata", {}).get("scrapbook")
            if not meta:
                continue
            prefix = meta.get("mime_prefix", "")
            data = output.get("data", {})
            text = data.get(prefix + "text/plain", "")
            if isinstance(text, list):
                text = "".join(text)
            try:
                out[meta["name"]] = ast.literal_eval(text)
            except (ValueError, SyntaxError):
                out[meta["name"]] = text
    return out


def glue_published(prefix: str = "") -> dict[str, published.Published]:
    """Glue every published value whose key starts with ``prefix`` (as ``pub.KEY``), to the
    digits it was published with, and return them by key."""
    chosen = {k: p for k, p in published.table().items() if k.startswith(prefix)}
    for key, p in chosen.items():
        glue(f"pub.{key}", p.value, digits=p.digits)
    return chosen
