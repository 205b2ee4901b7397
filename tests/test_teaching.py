"""Every chapter is built for teaching, and chapters added later inherit the rule.

A chapter is any entry of a numbered part of the table of contents.  Each must open with an
Overview admonition (with prerequisites and learning goals), state a Takeaway, end with exercises
whose solutions are hidden, and a Summary.  The teaching page lists every exercise.
"""

import re

import jupytext
import pytest
import yaml
from conftest import HTML, ROOT


def chapters() -> list[str]:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    return [
        c["file"]
        for part in toc.get("parts", [])
        if part.get("numbered")
        for c in part.get("chapters", [])
    ]


def markdown(name: str) -> str:
    nb = jupytext.read(ROOT / f"{name}.md", fmt="md:myst")
    return "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")


CHAPTERS = chapters()


def test_there_are_chapters():
    assert CHAPTERS


@pytest.mark.parametrize("name", CHAPTERS)
def test_chapter_opens_with_overview_prerequisites_and_goals(name):
    text = markdown(name)
    overview = re.search(r":{3,}\{admonition\} Overview\n(.*?)\n:{3,}", text, re.S)
    assert overview, f"{name}: no Overview admonition"
    body = overview.group(1)
    assert "**Prerequisites.**" in body and "**Learning goals.**" in body
    first_section = text.find("\n## ")
    assert overview.start() < first_section, f"{name}: the Overview must come first"


@pytest.mark.parametrize("name", CHAPTERS)
def test_chapter_has_takeaway_exercises_hidden_solutions_and_summary(name):
    text = markdown(name)
    assert re.search(r"\{admonition\} Takeaway", text), f"{name}: no Takeaway"
    headings = re.findall(r"^## (.+)$", text, re.M)
    assert "Exercises" in headings, f"{name}: no Exercises section"
    assert headings[-1] == "Summary", f"{name}: the last section must be the Summary"
    exercises = re.findall(r":{3,}\{exercise\}[^\n]*\n:label: (\S+)", text)
    assert len(exercises) >= 2, f"{name}: at least two exercises"
    for label in exercises:
        solution = re.search(rf":{{3,}}\{{solution\}} {re.escape(label)}\n((?::\w+:.*\n)*)", text)
        assert solution, f"{name}: exercise {label} has no solution"
        assert ":class: dropdown" in solution.group(1), f"{name}: solution of {label} not hidden"


def test_teaching_page_lists_every_exercise():
    page = (ROOT / "book" / "teaching.md").read_text()
    for name in CHAPTERS:
        for label in re.findall(r":{3,}\{exercise\}[^\n]*\n:label: (\S+)", markdown(name)):
            assert f"{{ref}}`{label}`" in page, f"book/teaching.md does not list {label}"


@pytest.mark.parametrize("name", CHAPTERS)
def test_built_chapter_numbers_exercises_and_hides_solutions(built_book, name):
    html = (HTML / f"{name}.html").read_text()
    exercises = re.findall(r'<div class="exercise admonition" id="([^"]+)">', html)
    solutions = re.findall(r'<div class="solution dropdown admonition"', html)
    assert exercises and len(solutions) == len(exercises)
    assert re.search(r"Exercise \d+\.\d+", html)
    if "<figure" in html:
        assert re.search(r"Fig\. \d+\.\d+", html), f"{name}: figures are not numbered"
    assert 'href="../_sources/' in html and ".ipynb" in html, f"{name}: no notebook download"
