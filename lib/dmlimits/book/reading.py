"""How much a page asks a student to read: the words of its rendered article.

The course page (``book/course.md``) plans a week of reading by the words of each page it
assigns, counted on the built HTML as a reader meets it: the text of the page's article (its
prose, equations as their TeX source, tables, figure captions, glued numbers and, in the
instructors' edition, the solutions under the exercises), without the site's navigation, the code
a reader has to click to show (the hidden input of every executed cell), scripts and styles.  The
course counts the student edition's pages, which hold no solutions.  A week's reading is the sum
over its pages; ``tests/test_course.py`` holds every week to :data:`WEEK_WORDS_MAX`.
"""

from __future__ import annotations

import html.parser
import re
from pathlib import Path

#: The most words of reading (counted by :func:`page_words`) a week of the course may assign:
#: about two evenings' reading at a graduate student's pace of technical text.
WEEK_WORDS_MAX = 11_000

#: Elements whose text a reader does not read as part of the page.
SKIPPED_TAGS = frozenset({"script", "style", "nav", "noscript", "svg", "button"})

#: Classes of a ``div`` whose text is not reading: the executed cells' code (hidden behind a
#: toggle on every chapter) and the header's buttons.
SKIPPED_CLASSES = frozenset({"cell_input", "header-article", "prev-next-area", "toggle-details"})

#: Elements with no closing tag, which must not open a level of nesting.
VOID_TAGS = frozenset(
    {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "wbr"}
)


class _ArticleText(html.parser.HTMLParser):
    """Collects the text inside ``<article>``, outside the skipped elements."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.depth = 0  # nesting inside the article; 0 outside it
        self.skip_at: int | None = None  # the depth at which a skipped element opened
        self.parts: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag in VOID_TAGS:
            return
        if self.depth == 0:
            if tag == "article":
                self.depth = 1
            return
        self.depth += 1
        classes = set((dict(attrs).get("class") or "").split())
        if self.skip_at is None and (tag in SKIPPED_TAGS or classes & SKIPPED_CLASSES):
            self.skip_at = self.depth

    def handle_endtag(self, tag):
        if tag in VOID_TAGS or self.depth == 0:
            return
        if self.skip_at == self.depth:
            self.skip_at = None
        self.depth -= 1

    def handle_data(self, data):
        if self.depth and self.skip_at is None:
            self.parts.append(data)


def article_text(page_html: str) -> str:
    """The text a reader reads in one built page (its ``<article>``, without hidden code)."""
    parser = _ArticleText()
    parser.feed(page_html)
    parser.close()
    return " ".join(parser.parts)


def words(text: str) -> int:
    """The words of ``text``: runs of characters between whitespace that hold a letter or digit
    (a lone symbol such as ``=`` or ``¶`` is not a word)."""
    return sum(1 for w in text.split() if re.search(r"\w", w))


def page_words(html_path: str | Path) -> int:
    """The reading words of one built HTML page (see the module's docstring)."""
    path = Path(html_path)
    if not path.is_file():
        raise FileNotFoundError(f"no built page at {path}: build the book first (make book)")
    return words(article_text(path.read_text(encoding="utf-8")))


def week_words(html_root: str | Path, docs: list[str]) -> dict[str, int]:
    """The reading words of each page a week assigns, by document name (``notebooks/model``),
    from the built site under ``html_root``."""
    root = Path(html_root)
    return {doc: page_words(root / f"{doc}.html") for doc in docs}
