"""The glue helper: what it accepts, what it refuses, and reading values back."""

import json

import numpy as np
import pytest
import sympy as sp
from dmlimits.book import glue as g
from dmlimits.core import symbols as s


@pytest.mark.parametrize(
    ("value", "expected", "kind"),
    [
        (np.float64(2.5), 2.5, float),
        (np.int64(7), 7, int),
        (np.float32(0.5), 0.5, float),
        (np.array(3.0), 3.0, float),
        (3, 3, int),
        (sp.Integer(4), 4.0, float),
    ],
)
def test_numbers_become_python_numbers(value, expected, kind):
    out = g.as_number("k", value)
    assert out == expected and type(out) is kind


@pytest.mark.parametrize("value", [float("nan"), float("inf"), np.float64("-inf"), np.nan])
def test_non_finite_is_refused_naming_the_key(value):
    with pytest.raises(g.GlueError, match=r"glue 'my\.key'.*finite"):
        g.as_number("my.key", value)


@pytest.mark.parametrize("value", [True, np.array([1.0, 2.0]), object()])
def test_non_numbers_are_refused(value):
    with pytest.raises(g.GlueError, match="glue 'k'"):
        g.as_number("k", value)


def test_glue_pastes_numbers_math_and_text(monkeypatch):
    pasted = {}
    monkeypatch.setattr(g, "paste", lambda key, obj: pasted.__setitem__(key, obj))
    g.glue("n", np.float64(2.05e28))
    g.glue("eq", sp.Eq(s.compute, 6 * s.n_params))
    g.glue("t", "hello")
    assert pasted["n"] == 2.05e28 and type(pasted["n"]) is float
    assert pasted["n.sci"].text == "2.05 × 10²⁸"
    assert "C = 6 N" in pasted["eq"]._repr_latex_()
    assert pasted["t"].text == "hello"
    with pytest.raises(g.GlueError, match="'bad'"):
        g.glue("bad", float("nan"))
    with pytest.raises(g.GlueError, match="without ':'"):
        g.glue("a:b", 1.0)


def test_paste_gives_what_myst_nbs_glue_gives(monkeypatch):
    """The kernel glues without importing myst_nb: the display data and metadata it sends are
    those of myst_nb.glue(..., display=False) for a number, text, math and a figure."""
    import IPython.display
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import myst_nb

    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    objects = {
        "n": 2.05e28, "t": g.TextOutput("hello"), "m": g.MathOutput("x^2"), "f": g.PngOutput(fig),
    }  # fmt: skip
    plt.close(fig)
    import myst_nb.ext.glue

    sent = []
    record = lambda *a, **k: sent.append((a, k))  # noqa: E731
    monkeypatch.setattr(IPython.display, "display", record)  # what ours calls
    monkeypatch.setattr(myst_nb.ext.glue, "ipy_display", record)  # what myst_nb's calls
    for key, obj in objects.items():
        g.paste(key, obj)
        ours = sent.pop()
        myst_nb.glue(key, obj, display=False)
        assert sent.pop() == ours, key
    assert ours[0][0] and all(k.startswith(g.GLUE_PREFIX) for k in ours[0][0])


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (2.05e28, "2.05 × 10²⁸"),
        (9.996e27, "1.00 × 10²⁸"),
        (1.5e-7, "1.50 × 10⁻⁷"),
        (1234.5, "1,234"),
        (0.5, "0.500"),
        (0, "0"),
    ],
)
def test_sci(value, text):
    assert g.sci(value) == text


@pytest.mark.parametrize(
    ("value", "unit", "digits", "text"),
    [
        # The assumptions page printed the batch law's anchor, 3e23 FLOP, as "300 × 10²³":
        # the mantissa's zeros were cut with its decimal point.
        (3e23, "FLOP", 6, "3 × 10²³ FLOP"),
        (3e23, "FLOP", 5, "3 × 10²³ FLOP"),
        (2.0004e23, "", 5, "2.0004 × 10²³"),
        (1.5e20, "FLOP", 6, "1.5 × 10²⁰ FLOP"),
        (2.5, "", 4, "2.5"),
        (1.0005, "", 4, "1"),
        (1830e6, "Hz", 4, "1.83 GHz"),
        (50 * 2**20, "byte", 4, "50 MiB"),
        (0, "byte", 4, "0 B"),
        (0, "s", 4, "0 s"),
        (0, "", 4, "0"),
    ],
)
def test_quantity_keeps_the_mantissa_whole(value, unit, digits, text):
    assert g.quantity(value, unit, digits) == text


@pytest.mark.parametrize("text", ["4,194,304", "1,000", "128", "True", "2.05 × 10²⁸",
                                  "at 1,024 GPUs", "it's", "(1, 2)", ""])  # fmt: skip
def test_glued_text_reaches_the_page_as_it_is(text):
    """MyST-NB's {glue:text} reads a pasted text/plain with ast.literal_eval: a count such as
    4,194,304 must reach the page as itself, not as the tuple (4, 194, 304)."""
    from IPython.core.formatters import format_display_data
    from myst_nb.core.variables import format_plain_text

    bundle, _ = format_display_data(g.TextOutput(text))
    assert format_plain_text(bundle["text/plain"], "") == text
    assert format_plain_text(bundle["text/plain"], "s") == text


def test_read_glued_round_trip(tmp_path):
    nb = {
        "cells": [
            {
                "cell_type": "code",
                "outputs": [
                    {
                        "output_type": "display_data",
                        "metadata": {"scrapbook": {"name": "x", "mime_prefix": "p/"}},
                        "data": {"p/text/plain": "2.5"},
                    },
                    {
                        "output_type": "display_data",
                        "metadata": {"scrapbook": {"name": "y", "mime_prefix": ""}},
                        "data": {"text/plain": "C = 6 N"},
                    },
                ],
            }
        ]
    }
    path = tmp_path / "n.ipynb"
    path.write_text(json.dumps(nb))
    assert g.read_glued(path) == {"x": 2.5, "y": "C = 6 N"}
