r"""Find sentences that read as a template with values slotted in, in a built book's pages.

A sentence the book assembles from glued parts must read as if someone wrote it for the values
it got.  Read from the HTML a reader gets (the pages' running text, without code, mathematics,
the API reference or the navigation), each paragraph, list item, table cell and caption is
checked for:

* **a count of nothing**: "0 of them are above ...", "0 runs" (say "none" or leave the clause
  out);
* **all of all**: "130 of the 130 rows" (say "all 130 rows");
* **a list of one value**: "4.5, 4.5 and 4.5 µs" (say that the three are the same, once);
* **a hedge for a case that did not happen**: "the exceptions, if any, are" (say whether there
  are exceptions);
* **a clause said twice**: the same clause of at least :data:`CLAUSE_WORDS` words twice in one
  paragraph (say it once, for both).

:func:`problems` returns one line per finding, naming the page and quoting the text.
"""

from __future__ import annotations

import html
import re
from pathlib import Path

#: A clause repeated word for word in one paragraph is flagged from this many words.
CLAUSE_WORDS = 6

# What is not running text: scripts, styles, code, mathematics (MathJax's source), the
# navigation, the sidebars, the API reference's signatures and the derivation dropdowns' titles.
DROP = re.compile(
    r"<(script|style|pre|nav|header|footer|dt|code)\b.*?</\1>"
    r"|<(span|div) class=\"[^\"]*\bmath\b[^\"]*\"[^>]*>.*?</\2>",
    re.S,
)
MAIN = re.compile(r"<main\b.*?</main>", re.S)
BLOCK = re.compile(r"<(p|li|td|th|figcaption|dd|caption)\b[^>]*>(.*?)</\1>", re.S)
TAG = re.compile(r"<[^>]+>")

NUMBER = r"\d[\d,.]*(?:\s?×\s?10[⁰¹²³⁴⁵⁶⁷⁸⁹⁻]+)?%?"
ZERO_OF = re.compile(r"(?<![\d.,×])\b0 (of|out of)\b")
ALL_OF_ALL = re.compile(rf"(?<![\d.,])({NUMBER}) of the \1\b")
SAME_LIST = re.compile(rf"(?<![\d.,])({NUMBER}(?: [^\s,]+)?), \1,? and \1(?![\d])")
IF_ANY = re.compile(r", if any,", re.I)
CLAUSE_SPLIT = re.compile(r"[,;:.()\u2014]|\band\b|\bbut\b|\bwhile\b")


def blocks(page_html: str) -> list[str]:
    """The running text of a page's main column: one string per paragraph, list item, table
    cell and caption."""
    found = MAIN.search(page_html)
    body = DROP.sub(" ", found.group(0) if found else page_html)
    out = []
    for match in BLOCK.finditer(body):
        text = html.unescape(TAG.sub("", match.group(2)))
        text = re.sub(r"\s+", " ", text).strip()
        if text:
            out.append(text)
    return out


def repeated_clauses(text: str) -> list[str]:
    """Clauses of at least :data:`CLAUSE_WORDS` words that appear twice in ``text``."""
    seen: set[str] = set()
    twice = []
    for clause in CLAUSE_SPLIT.split(text):
        words = clause.split()
        if len(words) < CLAUSE_WORDS:
            continue
        key = " ".join(w.lower() for w in words)
        if key in seen and key not in twice:
            twice.append(key)
        seen.add(key)
    return twice


def text_problems(text: str) -> list[str]:
    """What reads as a template in one block of text, one line each."""
    out = []
    checks = ((ZERO_OF, "a count of nothing"), (ALL_OF_ALL, "all of all"),
              (SAME_LIST, "a list of one value"), (IF_ANY, "a hedge for a case"))  # fmt: skip
    for pattern, kind in checks:
        for m in pattern.finditer(text):
            out.append(f"{kind}: ...{text[max(0, m.start() - 50) : m.end() + 30]}...")
    for clause in repeated_clauses(text):
        out.append(f"a clause said twice: {clause!r}")
    return out


#: Pages whose text is not prose assembled from glued parts.
SKIPPED = ("book/api.html", "book/api_search_and_book.html", "genindex.html", "search.html")


def problems(site: Path) -> list[str]:
    """Every finding on every page of the built book at ``site``, ``page: finding``."""
    out = []
    for path in sorted(site.rglob("*.html")):
        page = str(path.relative_to(site))
        if page.startswith("_") or page in SKIPPED:
            continue
        for text in blocks(path.read_text()):
            out += [f"{page}: {p}" for p in text_problems(text)]
    return out
