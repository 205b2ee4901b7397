"""The book's PDF (``make pdf``; ``make test`` builds it first) holds what the HTML shows:
every glued value and every figure, on a number of pages its text needs.  Read with
poppler's ``pdftotext``, ``pdfinfo`` and ``pdfimages``."""

from __future__ import annotations

import html
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import ROOT
from dmlimits.build import pdf as pdf_build

PDF = ROOT / pdf_build.PDF_NAME

#: Characters of running text a page of the PDF holds at most (a full page of 10 pt text in
#: Sphinx's LaTeX layout holds about 4,000; more would mean text was lost or shrunk).
MAX_CHARS_PER_PAGE = 6000
#: Characters a page holds at least, on average over the book (figures, tables, chapter
#: openings and the API reference's short entries leave pages part empty).
MIN_CHARS_PER_PAGE = 400

_PASTED = re.compile(r'<span class="pasted-text">(.*?)</span>', re.S)
_TAG = re.compile(r"<[^>]+>")
_MAIN = re.compile(r'<main[^>]*>(.*?)</main>', re.S)
_IMG = re.compile(r"<img\b[^>]*>")


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is missing: make pdf installs poppler-utils")
    return path


@pytest.fixture(scope="module")
def pdf(built_book: Path) -> Path:
    """The built PDF; fails (never skips) when it is missing: run `make pdf` first."""
    if not PDF.is_file():
        pytest.fail(f"no {PDF}: run `make pdf` (make test does it)")
    return PDF


@pytest.fixture(scope="module")
def pdf_text(pdf: Path) -> str:
    out = subprocess.run([_tool("pdftotext"), "-enc", "UTF-8", str(pdf), "-"],
                         capture_output=True, text=True, check=True)  # fmt: skip
    return out.stdout


def _pages(built_book: Path) -> list[Path]:
    return sorted(p for p in built_book.rglob("*.html")
                  if p.parent != built_book or p.name == "index.html")  # fmt: skip


def _squeezed(text: str) -> str:
    """``text`` without white space or soft hyphens (where the PDF breaks a line, the HTML
    does not) and with one form of each dash."""
    return re.sub(r"[\s\u00ad]+", "", text).replace("‐", "-")


#: Characters the PDF's text may put between two words of a glued value: where a page ends
#: inside it, pdftotext reads the page's number and running head, or a float placed there.
GAP = 2000


def _shown(value: str, text: str) -> bool:
    """Whether ``value`` is in the squeezed ``text``: whole, or word by word in its order with
    at most :data:`GAP` characters between two words (a page or a line broken inside it)."""
    if _squeezed(value) in text:
        return True
    words = [re.escape(_squeezed(w)) for w in value.split()]
    return re.search(f".{{0,{GAP}}}?".join(words), text, re.S) is not None


def test_every_glued_value_is_in_the_pdf(built_book: Path, pdf_text: str) -> None:
    values = {
        html.unescape(_TAG.sub("", m.group(1))).strip()
        for page in _pages(built_book)
        for m in _PASTED.finditer(page.read_text())
    }
    values.discard("")
    assert len(values) > 50, "the HTML shows fewer glued values than the book glues"
    text = _squeezed(pdf_text)
    missing = sorted(v for v in values if not _shown(v, text))
    assert not missing, f"{len(missing)} glued value(s) of the HTML not in the PDF: {missing[:20]}"


def test_every_figure_of_the_html_is_in_the_pdf(built_book: Path, pdf: Path) -> None:
    figures = sum(
        len(_IMG.findall(m.group(1)))
        for page in _pages(built_book)
        for m in _MAIN.finditer(page.read_text())
    )
    out = subprocess.run([_tool("pdfimages"), "-list", str(pdf)],
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    # rows after the two header lines; a PNG's alpha channel is a row of type "smask"
    images = [row.split() for row in out.splitlines()[2:] if row.strip()]
    shown = sum(1 for row in images if row[2] == "image")
    assert figures > 0
    assert shown >= figures, f"the HTML shows {figures} images, the PDF {shown}"


def test_pages_fit_the_text(built_book: Path, pdf: Path) -> None:
    chars = sum(
        len(_squeezed(html.unescape(_TAG.sub(" ", m.group(1)))))
        for page in _pages(built_book)
        for m in _MAIN.finditer(page.read_text())
    )
    info = subprocess.run([_tool("pdfinfo"), str(pdf)],
                          capture_output=True, text=True, check=True).stdout  # fmt: skip
    pages = int(re.search(r"^Pages:\s+(\d+)", info, re.M).group(1))
    low, high = chars / MAX_CHARS_PER_PAGE, chars / MIN_CHARS_PER_PAGE
    assert low <= pages <= high, f"{pages} pages for {chars} characters of HTML text"


def test_a_missing_tex_is_one_line_naming_it(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setattr(pdf_build.shutil, "which", lambda name: None)
    with pytest.raises(pdf_build.build.BuildError) as err:
        pdf_build.build_pdf(tmp_path)
    message = str(err.value)
    assert "\n" not in message and "xelatex and latexmk" in message


def test_the_latex_builder_prefers_static_outputs() -> None:
    config = pdf_build.latex_config({"sphinx": {"config": {"numfig": True}}})
    assert config["latex"]["latex_engine"] == "xelatex"
    settings = config["sphinx"]["config"]
    assert settings["numfig"] is True
    rank = {mime: r for builder, mime, r in settings["nb_mime_priority_overrides"]
            if builder == "latex"}  # fmt: skip
    assert rank["image/png"] < rank["text/plain"] and rank["text/html"] is None
    assert pdf_build.LATEX_PREAMBLE in settings["latex_elements"]["preamble"]
