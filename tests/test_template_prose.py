"""Sentences assembled from glued parts read as written for their values: on the default book,
and on the book of every scenario preset (tests/template_prose.py says what is flagged)."""

from __future__ import annotations

import pytest
import template_prose as tp
from conftest import ROOT
from dmlimits.build import engine as build
from dmlimits.core import scenario as sc


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("Against this build's links, 0 of them are above the crossover.", "a count of nothing"),
        ("Here 130 of the 130 rows (100%) are at or below the bound.", "all of all"),
        ("For 4 of the 4 GPUs at least one result rests on it.", "all of all"),
        ("the latency is 4.5, 4.5 and 4.5 µs for the V100, A100 and H100", "a list of one value"),
        ("the walls (2.31 × 10³¹, 2.31 × 10³¹ and 2.31 × 10³¹ FLOP) are the same",
         "a list of one value"),
        ("The exceptions, if any, are listed here:", "a hedge for a case"),
        ("one ends at 3 FLOP, where the cost that binds is matmuls below the effective rate, "
         "the other at 5 FLOP, where the cost that binds is matmuls below the effective rate",
         "a clause said twice"),
    ],
)  # fmt: skip
def test_each_kind_of_template_is_caught_and_named(text, kind):
    found = tp.text_problems(text)
    assert found and found[0].startswith(kind), found


@pytest.mark.parametrize(
    "text",
    [
        "None of them is above the InfiniBand crossover.",
        "All 130 rows are at or below the bound.",
        "The kernel latency is 4.5 µs on all three GPUs, so their walls are the same.",
        "It takes 10 of the 100 GPUs, and 2, 4 and 8 stages.",
        "The error is 0.5 of the measured step; 10 of them are slower.",
        "Each token uses one expert per block, and the cost of each grows with the batch.",
    ],
)
def test_sentences_written_for_their_values_pass(text):
    assert tp.text_problems(text) == []


def test_running_text_is_read_without_code_or_mathematics():
    page = (
        "<nav><p>0 of 3</p></nav><main><p>Here <span class=\"pasted-text\">7</span> of the "
        "<span class=\"pasted-text\">7</span> runs fit.</p><pre>0 of 1</pre>"
        "<p><span class=\"math notranslate\">\\(0 of x\\)</span> fine</p></main>"
    )
    assert tp.blocks(page) == ["Here 7 of the 7 runs fit.", "fine"]


def test_the_default_book_reads_as_written(built_book):
    found = tp.problems(built_book)
    assert not found, "\n".join(found)


@pytest.mark.slow
@pytest.mark.parametrize("preset", sc.preset_names())
def test_every_presets_book_reads_as_written(preset):
    """The book of each preset, as `make presets` builds it (`python -m dmlimits build
    --scenario NAME` into _build/scenarios/NAME/html; the default scenario's into _build/html)."""
    site = build.output_dir(ROOT, sc.resolve(preset), None)  # the default's is _build/html
    if not (site / "index.html").is_file():
        # Building all seventeen takes longer than the rest of `make test`: they are built on
        # demand, and this test reads whichever are there.
        pytest.skip(f"the book of {preset} is not built: run `make presets`")
    found = tp.problems(site)
    assert not found, "\n".join(found)
