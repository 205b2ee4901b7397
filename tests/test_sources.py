"""The book's sources: MyST Markdown notebooks only, no outputs in git, no hand-typed numbers."""

import subprocess
from pathlib import Path

import jupytext
import pytest
from conftest import ROOT, toc_notebooks
from prose_check import hand_typed_numbers

NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.md"))
PAGES = sorted((ROOT / "book").glob("*.md"))


def test_no_ipynb_in_git():
    tracked = subprocess.run(
        ["git", "ls-files", "*.ipynb", "**/*.ipynb"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert tracked == [], f"committed notebooks (sources are MyST Markdown): {tracked}"


def test_every_toc_notebook_is_a_source():
    assert sorted(toc_notebooks()) == sorted(p.stem for p in NOTEBOOKS)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_sources_have_no_outputs_and_one_parameters_cell(path: Path):
    nb = jupytext.read(path)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(not c.get("outputs") for c in code)
    tagged = [c for c in code if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1, "exactly one cell tagged 'parameters'"
    assert "scenario =" in tagged[0].source and "overrides =" in tagged[0].source


@pytest.mark.parametrize("path", NOTEBOOKS + PAGES, ids=lambda p: p.name)
def test_prose_has_no_hand_typed_numbers(path: Path):
    if path.suffix == ".md" and path.parent.name == "notebooks":
        nb = jupytext.read(path)
        text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    else:
        text = path.read_text()
    findings = hand_typed_numbers(text)
    assert not findings, "glue these numbers (or see tests/prose_check.py):\n" + "\n".join(
        map(str, findings)
    )


@pytest.mark.parametrize(
    ("text", "bad"),
    [
        ("A run of 3 months.", ["3"]),
        ("The 8-GPU node.", ["8"]),
        ("Costs 2.05e28 FLOP.", ["2.05e28"]),
        ("```{glue:figure} f\n:name: x\n\nCaption with 12 typed.\n```\n", ["12"]),
        (":::{exercise}\n:label: e\n\nUse 4 GPUs.\n:::\n", ["4"]),
    ],
)
def test_scanner_catches_typed_numbers(text, bad):
    assert [f.number for f in hand_typed_numbers(text)] == bad


@pytest.mark.parametrize(
    "text",
    [
        "Costs {glue:text}`c:.2e` FLOP {cite}`erdil2024datamovement`.",
        "The H100 and the 1F1B schedule, 2D tensor parallelism, ZeRO-1, in 2024.",
        "See Section 4 and Table 2; $C = 6 N D$ and $$x = 2$$.",
        "```python\nx = 3\n```\n",
        "1. first item\n2. second item\n",
    ],
)
def test_scanner_allows_glue_math_code_and_names(text):
    assert hand_typed_numbers(text) == []


@pytest.mark.parametrize("path", NOTEBOOKS + PAGES, ids=lambda p: p.name)
def test_roles_are_not_wrapped_in_code(path: Path):
    """A role inside backticks (`` `{glue:text}`key`` ``) renders as literal text, not a value."""
    if path.parent.name == "notebooks":
        text = "\n".join(c.source for c in jupytext.read(path).cells if c.cell_type == "markdown")
    else:
        text = path.read_text()
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            continue
        assert "`{" not in line.replace("``{", ""), f"{path.name}: role inside code: {line}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_figure_has_an_alt_text_that_says_what_it_shows(path: Path):
    """Issue #13: without ``:alt:`` the image's alt text is a file hash."""
    import re

    text = path.read_text()
    for m in re.finditer(r"```\{glue:figure\} (\S+)\n((?::[^\n]*\n)*)", text):
        alt = re.search(r"^:alt: (.+)$", m.group(2), flags=re.M)
        assert alt, f"{path.name}: figure {m.group(1)} has no :alt:"
        words = alt.group(1).split()
        assert len(words) >= 8, f"{path.name}: figure {m.group(1)}'s alt text is too short"
        # Product names (A100, GTX 580, Llama 2, 1F1B) are names; a number standing alone is not.
        text_only = re.sub(r"\b(GTX|Llama) \d+|\b\w*[A-Za-z]\w*", "", alt.group(1))
        assert not re.search(r"\d", text_only), (
            f"{path.name}: figure {m.group(1)}'s alt text types a number; the caption glues them"
        )


def test_the_scan_catches_numbers_in_math_units_and_words():
    """Issue #13: measurements typed inside inline math, numbers with a unit attached and
    quantities in words are hand-typed numbers too; a formula's small constants, names and
    the scale word of a glued number are not."""
    found = {f.number for f in hand_typed_numbers(
        "Utilization reaches $0.7$, or $38\\%$, over $2048$ GPUs at 900GB/s, 3x faster, with\n"
        "about a thousand GPUs; the bubble is $(N_{PP} - 1) / (N_{PP} - 1 + m)$ on the H100,\n"
        "and {glue:text}`w:.2f` million weights stay.\n"
    )}  # fmt: skip
    assert found == {"0.7", "38\\%", "2048", "900GB/s", "3x", "thousand"}, found
