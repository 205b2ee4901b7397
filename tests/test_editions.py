"""The two editions: the student edition (``make student``, _build/student/html) holds every
exercise but no solution and no instructors' page; the instructors' edition (the default book)
holds them all; every page of both has a way to report a problem.

The solutions are found twice over: in the chapters' MyST sources (each ``{solution}`` block, whose
code lines must reach no student page) and in the default book's HTML (each solution's rendered
text, whose distinctive sentences must reach no student page, and whose words must reach no
entry of the student search index)."""

import html.parser
import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from conftest import BUILD, HTML, ROOT, run_cli, toc_notebooks
from dmlimits.build import engine as build
from dmlimits.build import sphinxext
from dmlimits.core.scenario import resolve
from test_links import internal_link_problems

STUDENT = BUILD / "student" / "html"

#: The shortest sentence of a solution taken as its fingerprint (shorter ones, "By less.", could
#: be anywhere).
MIN_SENTENCE = 30


@pytest.fixture(scope="session")
def student_book(built_book) -> Path:
    """The student edition, built beside the default book; fails (never skips) when missing."""
    if not (STUDENT / "index.html").is_file():
        pytest.fail("the student edition is not built: run `make student` (make test does it)")
    return STUDENT


def solution_blocks(source: str) -> dict[str, str]:
    """Each ``:::{solution} LABEL`` block of a chapter's MyST source, by its exercise's label."""
    blocks, label, lines = {}, None, []
    for line in source.splitlines():
        if label is None:
            m = re.match(r":::\{solution\}\s+(\S+)", line)
            if m:
                label, lines = m.group(1), []
        elif line.strip() == ":::":
            blocks[label] = "\n".join(lines)
            label = None
        else:
            lines.append(line)
    assert label is None, f"a solution block is not closed: {label}"
    return blocks


def exercise_labels(source: str) -> list[str]:
    """The label of each ``{exercise}`` block of a chapter's MyST source."""
    return re.findall(r":::\{exercise\}[^\n]*\n:label:\s*(\S+)", source)


def sources() -> dict[str, str]:
    return {n: (ROOT / "notebooks" / f"{n}.md").read_text() for n in toc_notebooks()}


def code_lines(block: str) -> list[str]:
    """The lines of a solution's code fences, long enough to be its own."""
    lines, inside = [], False
    for line in block.splitlines():
        if line.startswith("```"):
            inside = line.startswith("```python")  # a closing fence ends it
            continue
        if inside and len(line.strip()) >= 20:
            lines.append(line.strip())
    return lines


class PageText(html.parser.HTMLParser):
    """A page's text, apart from its solutions' (each solution's text kept on its own)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.outside: list[str] = []
        self.solutions: list[list[str]] = []
        self.depth = 0  # of <div> inside the current solution; 0: not in one
        self.skip = 0  # inside <script> or <style>

    def handle_starttag(self, tag, attrs):
        if tag in ("script", "style"):
            self.skip += 1
        if tag != "div":
            return
        if self.depth:
            self.depth += 1
        elif "solution" in (dict(attrs).get("class") or "").split():
            self.depth = 1
            self.solutions.append([])

    def handle_endtag(self, tag):
        if tag in ("script", "style"):
            self.skip -= 1
        if tag == "div" and self.depth:
            self.depth -= 1

    def handle_data(self, data):
        if self.skip:
            return
        (self.solutions[-1] if self.depth else self.outside).append(data)


def squeeze(text: str) -> str:
    return " ".join(text.split())


def read_site(site: Path) -> tuple[str, list[str], dict[Path, PageText]]:
    """The site's text outside solutions, each solution's text, and each page's parse."""
    pages = {}
    for path in sorted(site.rglob("*.html")):
        if "_static" in path.parts:
            continue
        parser = PageText()
        parser.feed(path.read_text(errors="replace"))
        pages[path.relative_to(site)] = parser
    outside = squeeze(" ".join("".join(p.outside) for p in pages.values()))
    solutions = [squeeze("".join(s)) for p in pages.values() for s in p.solutions]
    return outside, solutions, pages


def search_terms(site: Path) -> set[str]:
    text = (site / "searchindex.js").read_text()
    index = json.loads(text[text.index("(") + 1 : text.rindex(")")])
    return set(index["terms"]) | set(index["titleterms"])


@pytest.fixture(scope="module")
def books(student_book):
    return read_site(HTML), read_site(student_book)


def test_the_instructors_book_holds_every_solution_of_the_sources(books):
    (_, solutions, _), _ = books
    count = sum(len(solution_blocks(s)) for s in sources().values())
    assert count > 0 and len(solutions) == count


def test_no_solution_reaches_the_student_pages(books):
    (teacher_outside, teacher_solutions, _), (student_outside, student_solutions, _) = books
    assert student_solutions == []
    unshown = []
    for text in teacher_solutions:
        sentences = [
            s for s in re.split(r"(?<=[.;:])\s", text)
            if len(s) >= MIN_SENTENCE and s not in teacher_outside
        ]  # fmt: skip
        assert sentences, f"a solution with no sentence of its own: {text[:120]!r}"
        unshown += [s for s in sentences if s in student_outside]
    assert not unshown, "solution text in the student edition:\n" + "\n".join(unshown[:10])


def test_no_solution_code_reaches_the_student_pages(books):
    (teacher_outside, teacher_solutions, _), (student_outside, _, _) = books
    lines = [
        line for s in sources().values() for b in solution_blocks(s).values()
        for line in code_lines(b)
    ]  # fmt: skip
    assert lines, "no solution holds code: the check would check nothing"
    every_solution = " ".join(teacher_solutions)
    own = [line for line in lines if squeeze(line) not in teacher_outside]
    assert own and all(squeeze(line) in every_solution for line in own)
    leaked = [line for line in own if squeeze(line) in student_outside]
    assert not leaked, "solution code in the student edition:\n" + "\n".join(leaked)


def test_no_solution_word_reaches_the_student_search_index(books, student_book):
    from sphinx.search.en import SearchEnglish  # the stemmer the book's search index uses

    (teacher_outside, teacher_solutions, _), _ = books
    lang = SearchEnglish({})

    def stems(text: str) -> set[str]:
        return {lang.stem(w) for w in lang.split(text) if lang.word_filter(w)}

    own = (stems(" ".join(teacher_solutions)) - stems(teacher_outside)) & search_terms(HTML)
    assert len(own) >= 10, f"too few words only the solutions use to check: {sorted(own)}"
    leaked = own & search_terms(student_book)
    assert not leaked, f"solution words in the student search index: {sorted(leaked)}"


def test_no_page_source_is_copied_into_the_student_edition(student_book):
    assert (HTML / "_sources").is_dir()  # the instructors' edition offers them for download
    assert not (student_book / "_sources").exists()
    assert "download-source-button" in (HTML / "book" / "teaching.html").read_text()
    assert "download-source-button" not in (student_book / "book" / "teaching.html").read_text()


def test_every_exercise_is_in_the_student_edition(student_book):
    for name, source in sources().items():
        labels = exercise_labels(source)
        assert len(labels) == len(solution_blocks(source)), name
        page = (student_book / "notebooks" / f"{name}.html").read_text()
        missing = [x for x in labels if f'class="exercise admonition" id="{x}"' not in page]
        assert not missing, f"{name}: exercises missing from the student edition: {missing}"


def test_instructors_pages_are_only_in_the_instructors_edition(student_book):
    toc = (ROOT / "_toc.yml").read_text()
    for page in build.INSTRUCTOR_PAGES:
        assert f"- file: {page}\n" in toc, f"{page} is not in _toc.yml"
        assert (HTML / f"{page}.html").is_file()
        assert not (student_book / f"{page}.html").exists()
    text = (student_book / "book" / "teaching.html").read_text()
    assert "student edition" in text and "Solutions are hidden" not in text


def test_instructors_pages_are_the_pages_for_instructors():
    """Every page of the table of contents whose title is for instructors (a guide, rubrics, a
    key) is one the student edition leaves out."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = re.findall(r"file: (\S+)", yaml.safe_dump(toc))
    for page in files:
        path = ROOT / f"{page}.md"
        title = next(line for line in path.read_text().splitlines() if line.startswith("# "))
        if re.search(r"instructor|rubric|answer key|hand-in key", title, re.I):
            assert page in build.INSTRUCTOR_PAGES, f"{page} ({title}) is for instructors"


def test_no_link_of_the_student_edition_is_broken(student_book):
    problems = internal_link_problems(student_book)
    assert not problems, "\n".join(problems)


def report_links(page: Path) -> list[str]:
    return re.findall(r'class="dmlimits-report">[^<]*<a[^>]*href="([^"]+)"', page.read_text())


@pytest.mark.parametrize("site", [HTML, STUDENT], ids=["instructors", "student"])
def test_every_page_links_the_errata_page(student_book, site):
    pages = [p for p in site.rglob("*.html") if "_static" not in p.parts]
    pages = [p for p in pages if p.name not in ("search.html", "genindex.html")]
    pages = [p for p in pages if 'http-equiv="Refresh"' not in p.read_text()[:200]]  # index
    assert len(pages) > 20
    for page in pages:
        links = report_links(page)
        assert len(links) == 1, f"{page.relative_to(site)}: {links}"
        errata = site / "book" / "errata.html"
        if page == errata:
            assert links == ["#"]  # the page itself
        else:
            assert (page.parent / links[0]).resolve() == errata.resolve()


def test_the_errata_page_is_in_back_matter():
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    back = next(p for p in toc["parts"] if p["caption"] == "Back matter")
    assert {"file": "book/errata"} in back["chapters"]
    text = (ROOT / "book" / "errata.md").read_text()
    assert "{doc}`the reproduction chapter <../notebooks/reproduction>`" in text
    assert "## Corrections" in text


def test_a_configured_repository_takes_the_issues_button(tmp_path, monkeypatch):
    monkeypatch.setenv(build.REPOSITORY_ENV, "https://example.org/owner/book")
    (tmp_path / "_config.yml").write_text((ROOT / "_config.yml").read_text())
    build.stage_config(tmp_path)
    staged = yaml.safe_load((tmp_path / "_config.yml").read_text())
    assert staged["html"]["use_issues_button"] is True
    context = {"body": "<p>text</p>", "pathto": lambda name: f"../{name}.html"}
    env = SimpleNamespace(all_docs={sphinxext.ERRATA_PAGE: 0})

    def page(buttons: bool) -> str:
        options = {"use_issues_button": buttons}
        app = SimpleNamespace(config=SimpleNamespace(html_theme_options=options), env=env)
        ctx = dict(context)
        sphinxext.report_a_problem(app, "notebooks/model", "page.html", ctx, None)
        return ctx["body"]

    assert page(True) == context["body"]
    assert 'href="../book/errata.html"' in page(False)


def test_the_student_edition_is_staged_without_solutions(tmp_path):
    (tmp_path / "_config.yml").write_text((ROOT / "_config.yml").read_text())
    (tmp_path / "_toc.yml").write_text((ROOT / "_toc.yml").read_text())
    for page in build.INSTRUCTOR_PAGES:
        (tmp_path / f"{page}.md").parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / f"{page}.md").write_text("# x\n")
    build.stage_config(tmp_path, "instructors")
    default = yaml.safe_load((tmp_path / "_config.yml").read_text())
    assert "dmlimits_edition" not in default["sphinx"]["config"]  # the default's key unchanged
    build.stage_config(tmp_path, "student")
    config = yaml.safe_load((tmp_path / "_config.yml").read_text())["sphinx"]["config"]
    assert config["hide_solutions"] is True and config["dmlimits_edition"] == "student"
    assert config["html_copy_source"] is False
    toc = (tmp_path / "_toc.yml").read_text()
    for page in build.INSTRUCTOR_PAGES:
        assert page not in toc and not (tmp_path / f"{page}.md").exists()
    assert "book/teaching" in toc


def test_an_unknown_edition_is_named():
    with pytest.raises(ValueError, match="edition 'teacher': expected one of instructors, student"):
        build.check_edition("teacher")


def test_the_student_edition_goes_beside_the_default_book():
    h100 = resolve("h100")
    assert build.output_dir(ROOT, h100, None, "student") == BUILD / "student" / "html"
    assert build.output_dir(ROOT, h100, None) == HTML
    other = build.output_dir(ROOT, resolve("a100"), None, "student")
    assert other.parts[-4:-2] == ("scenarios", "a100") and other.parts[-2:] == ("student", "html")


def test_the_command_line_offers_the_editions():
    done = run_cli("build", "--help")
    assert done.returncode == 0 and all(e in done.stdout for e in build.EDITIONS)
    done = run_cli("build", "--edition", "teacher")
    assert done.returncode == 2 and "--edition" in done.stderr and "'teacher'" in done.stderr
