"""The executed notebooks and the built HTML of the default book (make book)."""

import html
import re

import numpy as np
import pytest
from conftest import EXECUTED, HTML, toc_notebooks
from dmlimits.book.glue import read_glued, sci
from dmlimits.core import published
from dmlimits.core.scenario import resolve
from dmlimits.costs import model


def page_text(path) -> str:
    raw = path.read_text()
    raw = re.sub(r"<(script|style)\b.*?</\1>", " ", raw, flags=re.S)
    raw = re.sub(r"</?(span|strong|em|a|code)\b[^>]*>", "", raw)  # inline: no space
    text = html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", raw)))
    return text.replace("\u2019", "'").replace("\u201c", '"').replace("\u201d", '"')


def test_every_chapter_is_executed_and_built(built_book):
    for name in toc_notebooks():
        assert (EXECUTED / f"{name}.ipynb").is_file()
        assert (HTML / "notebooks" / f"{name}.html").is_file()
    assert (HTML / "book" / "references.html").is_file()
    assert (HTML / "_static" / "mathjax" / "tex-chtml.js").is_file()


def test_glued_values_equal_the_library(built_book):
    glued = read_glued(EXECUTED / "model.ipynb")
    scn = resolve("h100")
    sh = model.shapes(scn)
    alphas = model.exponent_values(scn)
    assert glued["months"] == scn["training.months"]
    assert glued["grid_n"] == len(sh)
    assert glued["grid_c_max"] == float(sh.compute[-1])
    assert glued["first_batch"] == float(sh.batch[0])
    for key, value in alphas.items():
        assert glued[f"alpha.{key}"] == value
    wall = model.budget_at(scn, published.value("paper1.post_latency_wall_flop"))
    assert glued["wall_layer_budget"] == wall["layer_budget"] * 1e6
    assert glued["pub.paper1.post_latency_wall_flop"] == published.value(
        "paper1.post_latency_wall_flop"
    )


def test_no_glued_value_is_missing_or_non_finite(built_book):
    for name in toc_notebooks():
        for key, value in read_glued(EXECUTED / f"{name}.ipynb").items():
            if isinstance(value, float):
                assert np.isfinite(value), (name, key)


@pytest.mark.parametrize("name", toc_notebooks())
def test_pages_have_no_leaks(built_book, name):
    text = page_text(HTML / "notebooks" / f"{name}.html")
    for leak in ("Traceback", "{glue", "{eq}", "{cite}", "{math}", "injected"):
        assert leak not in text, f"{name}: {leak!r} leaked into the page"
    # An exception's message (``ValueError: ...``); the Derive problems name DerivationError.
    error = re.search(r"\b[A-Z]\w*Error: ", text)
    assert not error, f"{name}: {text[error.start() : error.start() + 120]!r} leaked into the page"
    assert "$" not in text.replace("\\$", ""), f"{name}: unprocessed $ math"


@pytest.mark.parametrize("name", toc_notebooks())
def test_glued_text_is_pasted_as_written(built_book, name):
    """No glued text reaches a page mangled by MyST-NB's literal_eval: a count with thousands
    separators pasted as a tuple, "(4, 194, 304)" for "4,194,304"."""
    raw = (HTML / "notebooks" / f"{name}.html").read_text()
    pasted = re.findall(r'<span class="pasted-text">([^<]*)</span>', raw)
    tuples = [p for p in pasted if re.fullmatch(r"\(\d+(, \d+)+\)", p)]
    assert not tuples, f"{name}: glued text pasted as tuples: {tuples}"


def test_headline_numbers_on_the_page(built_book):
    text = page_text(HTML / "notebooks" / "model.html")
    scn = resolve("h100")
    sh = model.shapes(scn)
    assert sci(float(sh.compute[-1])) in text
    assert f"{len(sh)} models" in text
    assert f"{scn['training.months']:g}-month run" in text


def test_every_page_links_its_neighbours(built_book):
    pages = [
        "notebooks/intro.html",
        "book/rerun.html",
        "notebooks/notation.html",
        "notebooks/model.html",
        "book/references.html",
    ]
    for page in pages:
        assert (HTML / page).is_file(), page
    model_page = (HTML / "notebooks" / "model.html").read_text()
    assert 'class="left-prev"' in model_page and 'class="right-next"' in model_page


def test_notation_lists_every_derivation_symbol(built_book):
    from dmlimits.book.notation import used_symbols
    from dmlimits.core.symbols import REGISTRY

    text = page_text(HTML / "notebooks" / "notation.html")
    for sym in used_symbols():
        assert sym in REGISTRY
        assert REGISTRY[sym].meaning in text, sym
