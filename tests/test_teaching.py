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


# --- Issue #15: problems of three kinds, visible code, the course, the API reference ----------

KINDS = ("Derive", "Compute", "Explain")
EXERCISE = re.compile(r":{3,}\{exercise\} ?([^\n]*)\n:label: (\S+)")


def exercises(name: str) -> list[tuple[str, str]]:
    """(kind, label) of every exercise of a chapter; the kind is the title's first word."""
    return [
        (title.split(":")[0].strip(), label) for title, label in EXERCISE.findall(markdown(name))
    ]


@pytest.mark.parametrize("name", CHAPTERS)
def test_chapter_has_four_problems_of_three_kinds(name):
    found = exercises(name)
    assert len(found) >= 4, f"{name}: {len(found)} exercises; at least four"
    for kind, label in found:
        assert kind in KINDS, f"{name}: exercise {label} has no kind ({kind!r}); one of {KINDS}"
    missing = set(KINDS) - {k for k, _ in found}
    assert not missing, f"{name}: no {', '.join(sorted(missing))} problem"


@pytest.mark.parametrize("name", CHAPTERS)
def test_derive_problems_are_checked_with_verify(name):
    """A Derive problem's solution shows how to check the step with the library."""
    text = markdown(name)
    for kind, label in exercises(name):
        if kind != "Derive":
            continue
        solution = re.search(
            rf":{{3,}}\{{solution\}} {re.escape(label)}\n(.*?)\n:{{3,}}\n", text, re.S
        )
        assert solution, f"{name}: no solution for {label}"
        body = solution.group(1)
        assert ".with_step(" in body and ".verify()" in body, (
            f"{name}: the solution of {label} does not show how to check the step "
            "(d.with_step(i, mine).verify())"
        )


def code_cells(name: str) -> list[tuple[list[str], str]]:
    nb = jupytext.read(ROOT / f"{name}.md", fmt="md:myst")
    return [(c.metadata.get("tags", []), c.source) for c in nb.cells if c.cell_type == "code"]


@pytest.mark.parametrize("name", CHAPTERS)
def test_the_code_is_shown_on_request(name):
    """Every chapter shows (collapsed) the code of its derivations, tables and figures: short,
    named calls into the library, no plumbing; a figure is drawn in a cell of its own."""
    cells = code_cells(name)
    shown = [src for tags, src in cells if "hide-input" in tags]
    assert shown, f"{name}: no code shown on request (hide-input)"
    for src in shown:
        lines = [ln for ln in src.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
        assert len(lines) <= 8, f"{name}: a shown cell of {len(lines)} lines:\n{src}"
        assert not any(re.match(r"\s*(import|from) ", ln) for ln in lines), f"{name}: {src}"
    for tags, src in cells:
        for key in re.findall(r"glue\(\s*[\"'](fig_\w+)[\"']", src):
            assert "hide-input" in tags, f"{name}: figure {key} is drawn in a hidden cell"


def test_the_exercise_title_kinds_are_read():
    assert EXERCISE.findall(":::{exercise} Derive: a step\n:label: ex-a\n") == [
        ("Derive: a step", "ex-a")
    ]


COURSE = ROOT / "book" / "course.md"


def weeks() -> list[tuple[int, str]]:
    text = COURSE.read_text()
    parts = re.split(r"^## Week (\d+): .*$", text, flags=re.M)
    return [(int(parts[i]), parts[i + 1].split("\n## ")[0]) for i in range(1, len(parts), 2)]


#: The weeks of the course that read, lecture and set problems; the week after them is the
#: final project's own.
TEACHING_WEEKS = 6


def teaching_weeks() -> list[tuple[int, str]]:
    return [(n, body) for n, body in weeks() if n <= TEACHING_WEEKS]


def test_the_course_has_six_weeks_each_read_lectured_set_and_handed_in():
    found = weeks()
    assert [n for n, _ in found] == list(range(1, TEACHING_WEEKS + 2))
    for n, body in teaching_weeks():
        for part in ("**Read.**", "**Lectures.**", "**Problem set.**", "**Hand in.**"):
            assert part in body, f"week {n} has no {part}"
        assert "course-project" not in body.split("**Hand in.**")[1], (
            f"week {n} hands in the final project, which has a week of its own"
        )
    project_week = found[-1][1]
    for part in ("**Read.**", "**Lectures.**", "**Problem set.**"):
        assert part not in project_week, f"the project week has a {part}"
    assert "{ref}`final project <course-project>`" in project_week.split("**Hand in.**")[1]
    assert "## The final project" in COURSE.read_text()


def test_the_course_reads_every_chapter_once_in_order_and_sets_its_problems():
    read: list[str] = []
    for n, body in teaching_weeks():
        chapters_of_week = re.findall(
            r"\{doc\}`\.\./(notebooks/\w+)`", body.split("**Lectures.**")[0]
        )
        assert chapters_of_week, f"week {n} reads nothing"
        read += chapters_of_week
        problems = re.findall(r"\{ref\}`(ex-[\w-]+)`", body.split("**Problem set.**")[1])
        assert len(problems) >= 3, f"week {n}: a problem set of {len(problems)}"
        own = {label: kind for c in chapters_of_week for kind, label in exercises(c)}
        others = set(problems) - set(own)
        assert not others, f"week {n} sets problems of other weeks' chapters: {others}"
        kinds = {own[p] for p in problems}
        assert kinds == set(KINDS), f"week {n}: a problem set of kinds {sorted(kinds)}; all three"
    assert read == CHAPTERS, "the course must read every chapter once, in the book's order"


def test_the_instructors_page_says_prerequisites_grading_and_pitfalls():
    text = (ROOT / "book" / "instructors.md").read_text()
    for heading in ("## Prerequisites", "## How to grade the problems", "## Where students"):
        assert heading in text


def library_names() -> dict[str, set[str]]:
    """Public functions and classes of every module of the library, subpackages' included,
    keyed by the module's dotted name under ``dmlimits`` (``measured.runs``)."""
    import importlib
    import inspect
    import pkgutil

    import dmlimits

    out = {}
    for info in pkgutil.walk_packages(dmlimits.__path__, prefix="dmlimits."):
        if info.name == "dmlimits.__main__":
            continue
        module = importlib.import_module(info.name)
        out[info.name.removeprefix("dmlimits.")] = {
            n
            for n, obj in vars(module).items()
            if not n.startswith("_")
            and (inspect.isfunction(obj) or inspect.isclass(obj))
            and (getattr(obj, "__module__", "") or "").startswith(info.name)
        }
    return out


@pytest.mark.parametrize(
    "path",
    [ROOT / f"{c}.md" for c in CHAPTERS] + sorted((ROOT / "book").glob("*.md")),
    ids=lambda p: p.name,
)
def test_library_functions_named_in_prose_link_to_the_api_reference(path):
    """A function or class of the library named in prose is a {py:func} or {py:class} role
    (a link to its entry in the API reference, checked by the strict build), not bare code."""
    text = (
        markdown(f"notebooks/{path.stem}") if path.parent.name == "notebooks" else path.read_text()
    )
    text = re.sub(r"```.*?```", "", text, flags=re.S)  # code blocks show code, not references
    names = library_names()
    # A module is named as the chapters import it: ``runs.predict`` or ``measured.runs.predict``.
    by_last = {m.rsplit(".", 1)[-1]: v for m, v in names.items()}
    bare = [
        f"{m}.{n}"
        for m, n in re.findall(r"(?<![}\w])`(?:dmlimits\.)?([\w.]+)\.(\w+)(?:\(.*?\))?`", text)
        if n in names.get(m, by_last.get(m, ()))
    ]
    assert not bare, f"{path.name}: link these to the API reference with {{py:func}}: {bare}"


def test_the_api_reference_documents_every_module(built_book):
    pages = ("api", "api_search_and_book")  # the reference's two pages
    modules = [
        re.findall(r"\.\. automodule:: dmlimits\.([\w.]+)", (ROOT / "book" / f"{p}.md").read_text())
        for p in pages
    ]
    documented = {m for listed in modules for m in listed}
    assert set(library_names()) - {"__init__"} <= documented
    assert sum(len(listed) for listed in modules) == len(documented)  # each on one page
    html = "".join((HTML / "book" / f"{p}.html").read_text() for p in pages)
    assert 'id="dmlimits.core.derivation.Derivation.with_step"' in html
    assert 'id="dmlimits.search.sweeps.sweep"' in html
    # A value shown with its memory address would change from build to build (the book is
    # byte-for-byte reproducible): such constants hide their value (:meta hide-value:).
    assert not re.findall(r"0x[0-9a-f]{6,}", html)


@pytest.mark.parametrize("name", CHAPTERS)
def test_shown_code_prints_no_stray_value(built_book, name):
    """A cell shown on request displays a derivation, a table or nothing: never the repr of a
    value it happened to end with (``<Figure size ...>``, a glued number)."""
    import json

    from conftest import EXECUTED

    nb = json.loads((EXECUTED / f"{name.split('/')[-1]}.ipynb").read_text())
    for cell in nb["cells"]:
        if cell["cell_type"] != "code" or "hide-input" not in cell["metadata"].get("tags", []):
            continue
        for out in cell.get("outputs", []):
            if out["output_type"] == "stream":
                raise AssertionError(f"{name}: a shown cell prints {''.join(out['text'])[:80]!r}")
            if out["output_type"] in ("execute_result", "display_data"):
                rich = set(out["data"]) - {"text/plain"}
                assert rich or out.get("metadata", {}).get("scrapbook"), (
                    f"{name}: a shown cell ends with a bare value: {out['data']['text/plain']!r}"
                )


def typed_symbols(code: str, scope: dict) -> list[tuple[str, str, object]]:
    """The sympy Symbols a snippet types by a module's name: ``(typed, full,
    symbol)`` for every ``alias.attr`` whose ``alias`` is a module of ``scope`` (the snippet's
    namespace once run) and whose value is a Symbol (``("ppm.n_pp", "dmlimits.costs.pipeline.n_pp",
    n_pp)``), and for every Symbol imported by name (``from dmlimits.core.symbols import batch``).
    Expressions held by a module (``transformer.flop_token``) are not symbols and are left out."""
    import ast
    import types

    import sympy as sp

    out = []
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            module = scope.get(node.value.id)
            if isinstance(module, types.ModuleType):
                value = getattr(module, node.attr, None)
                if isinstance(value, sp.Symbol):
                    out.append(
                        (f"{node.value.id}.{node.attr}", f"{module.__name__}.{node.attr}", value)
                    )
        elif isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                value = scope.get(alias.asname or alias.name)
                if isinstance(value, sp.Symbol):
                    out.append((alias.asname or alias.name, f"{node.module}.{alias.name}", value))
    return out


def unnamed_symbols(code: str, scope: dict, exercise: str, names: dict) -> list[str]:
    """The symbols a solution's code types that are not named on the page (see
    :func:`test_derive_snippets_work_as_printed`); ``names`` is the Notation page's Python-name
    column, :func:`dmlimits.book.notation.python_names`."""
    from dmlimits.core.symbols import REGISTRY

    in_text = set(re.findall(r"`([^`\n]+)`", exercise))
    missing = []
    for typed, full, symbol in typed_symbols(code, scope):
        listed = symbol in REGISTRY and full in names.get(symbol, [])
        if not (listed or typed in in_text or full in in_text):
            missing.append(f"{typed} ({full})")
    return missing


def test_unnamed_symbols_finds_a_symbol_named_nowhere():
    """The check of the Derive snippets can fail: a symbol that the Python-name column does not
    list is reported unless the exercise's text names it in code."""
    from dmlimits.book import notation
    from dmlimits.costs import pipeline as ppm

    code = "from dmlimits.costs import pipeline as ppm\nx = ppm.n_pp\n"
    scope = {"ppm": ppm}
    full = "dmlimits.costs.pipeline.n_pp"
    assert full in notation.python_names()[ppm.n_pp]
    assert unnamed_symbols(code, scope, "", notation.python_names()) == []
    assert unnamed_symbols(code, scope, "", {}) == [f"ppm.n_pp ({full})"]
    assert unnamed_symbols(code, scope, "Use `ppm.n_pp`.", {}) == []


def test_notation_page_shows_the_python_name_column():
    """The Notation page renders the generated table, whose last column is the Python names."""
    from dmlimits.book import notation
    from dmlimits.core import symbols as s

    assert "notation.markdown_table()" in (ROOT / "notebooks" / "notation.md").read_text()
    header, _, *rows = notation.markdown_table().splitlines()
    assert header.rstrip(" |").endswith("Python name")
    row = next(r for r in rows if f"`{notation.python_names()[s.depth_coef][0]}`" in r)
    assert row.startswith(f"| ${s.REGISTRY[s.depth_coef].latex}$ |")


@pytest.mark.slow
@pytest.mark.parametrize("name", CHAPTERS)
def test_derive_snippets_work_as_printed(name):
    """Each Derive solution's code, run as printed, verifies; the same step with its right-hand
    side doubled is refused, naming the broken link.  And every symbol the code types is named
    on the page.

    "Named on the page" means: each sympy Symbol that the code reaches by a module's name
    (``ppm.n_pp`` after ``from dmlimits.costs import pipeline as ppm``) or imports by name is
    either listed, under that module and attribute (``dmlimits.costs.pipeline.n_pp``), in the
    Python-name column of the Notation page (:func:`dmlimits.book.notation.python_names`, which
    the page renders: so the symbol is also registered, with its notation and meaning), or is
    written in inline code in the exercise's own text, as the code types it or by its full name.
    A name that only the hidden solution shows fails.  Expressions a module holds (not Symbols)
    are not checked."""
    import sympy as sp
    from dmlimits.book import notation
    from dmlimits.core.derivation import DerivationError

    names = notation.python_names()

    text = markdown(name)
    for kind, label in exercises(name):
        if kind != "Derive":
            continue
        pattern = rf":{{3,}}\{{solution\}} {re.escape(label)}\n(.*?)\n:{{3,}}\n"
        body = re.search(pattern, text, re.S).group(1)
        code = "\n".join(re.findall(r"```python\n(.*?)```", body, re.S))
        assert code, f"{name}: {label} shows no code"
        scope: dict = {}
        exec(compile(code, f"{label} (solution)", "exec"), scope)  # raises if it does not verify
        call = re.search(r"(\w+)\.with_step\((\d+),\s*(\w+)\)", code)
        assert call, f"{name}: {label} does not call with_step(i, mine)"
        d, index, mine = scope[call.group(1)], int(call.group(2)), scope[call.group(3)]
        wrong = sp.Eq(mine.lhs, 2 * mine.rhs) if isinstance(mine, sp.Equality) else 2 * mine
        with pytest.raises(DerivationError):
            d.with_step(index, wrong).verify()
        exercise = re.search(
            rf":{{3,}}\{{exercise\}}[^\n]*\n:label: {re.escape(label)}\n(.*?)\n:{{3,}}\n",
            text,
            re.S,
        ).group(1)
        missing = unnamed_symbols(code, scope, exercise, names)
        assert not missing, (
            f"{name}: {label}'s solution types {', '.join(missing)}, named neither in the "
            "exercise's text nor in the Notation page's Python-name column"
        )
