"""The bibliography (issue #13): every cited work is in book/references.bib once, and no two
works print the same author-year label."""

from __future__ import annotations

import re
from collections import Counter

from conftest import ROOT

BIB = ROOT / "book" / "references.bib"
CITE = re.compile(r"\{cite(?::\w+)?\}`([^`]+)`")


def _entries() -> list[tuple[str, str]]:
    """(key, text) of every entry, read as written (duplicates kept)."""
    text = BIB.read_text()
    starts = [(m.start(), m.group(1)) for m in re.finditer(r"@\w+\{([^,\s]+),", text)]
    bounds = [s for s, _ in starts[1:]] + [len(text)]
    return [(key, text[s:e]) for (s, key), e in zip(starts, bounds, strict=True)]


def _field(entry: str, name: str) -> str:
    m = re.search(rf"\b{name}\s*=\s*\{{(.*?)\}},?\s*$", entry, flags=re.M | re.S)
    return m.group(1) if m else ""


def _cited() -> Counter:
    keys: Counter = Counter()
    for path in [*ROOT.glob("notebooks/*.md"), *ROOT.glob("book/*.md")]:
        for group in CITE.findall(path.read_text()):
            keys.update(k.strip() for k in group.split(","))
    return keys


def test_every_key_is_defined_once():
    keys = Counter(k for k, _ in _entries())
    assert keys and not [k for k, n in keys.items() if n > 1]


def test_every_cited_work_is_in_the_bibliography():
    defined = {k for k, _ in _entries()}
    missing = sorted(set(_cited()) - defined)
    assert not missing, f"cited but not in book/references.bib: {missing}"


def test_no_two_works_share_a_label():
    """author_year labels: the first author's surname and the year (2024a and 2024b for the
    paper and its companion post)."""
    labels = Counter()
    for _, entry in _entries():
        first = _field(entry, "author").split(" and ")[0]
        surname = first.split(",")[0].strip("{} ")
        labels[(surname, _field(entry, "year"))] += 1
    assert not [lab for lab, n in labels.items() if n > 1], labels


def test_works_named_in_prose_are_cited():
    """A work named with its year in a chapter's text is a citation, not plain text."""
    for path in ROOT.glob("notebooks/*.md"):
        text = path.read_text()
        assert not re.search(r"Lamy-Poirier,? 20\d\d", text), path.name
