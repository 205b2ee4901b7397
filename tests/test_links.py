"""Every internal link and resource of the built site resolves (no external requests)."""

import html.parser
from pathlib import Path
from urllib.parse import unquote, urlsplit

from conftest import HTML


class Links(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.refs: list[str] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if "id" in attrs:
            self.ids.add(attrs["id"])
        if tag == "a" and attrs.get("name"):
            self.ids.add(attrs["name"])
        for key in ("href", "src"):
            if attrs.get(key) and not (tag == "link" and attrs.get("rel") == "preload"):
                self.refs.append(attrs[key])


def parse(path: Path) -> Links:
    parser = Links()
    parser.feed(path.read_text(errors="replace"))
    return parser


def internal_link_problems(site: Path) -> list[str]:
    pages = {p: parse(p) for p in site.rglob("*.html") if "_static" not in p.parts}
    problems = []
    for page, links in pages.items():
        for ref in links.refs:
            parts = urlsplit(ref)
            if parts.scheme or parts.netloc or ref.startswith(("mailto:", "javascript:")):
                continue  # external: not checked here (no network)
            target = (page.parent / unquote(parts.path)).resolve() if parts.path else page
            if target.is_dir():
                target = target / "index.html"
            rel = page.relative_to(site)
            if not target.exists():
                problems.append(f"{rel}: {ref} -> missing {target.name}")
                continue
            if parts.fragment and target.suffix == ".html":
                ids = pages[target].ids if target in pages else parse(target).ids
                if unquote(parts.fragment) not in ids:
                    problems.append(f"{rel}: {ref} -> no anchor #{parts.fragment}")
    return problems


def test_internal_links_resolve(built_book):
    problems = internal_link_problems(HTML)
    assert not problems, "\n".join(problems)


def test_the_link_check_catches_a_broken_link(built_book, tmp_path):
    import shutil

    site = tmp_path / "html"
    shutil.copytree(HTML, site, ignore=shutil.ignore_patterns("mathjax"))
    page = site / "notebooks" / "model.html"
    page.write_text(
        page.read_text().replace(
            "</main>",
            '<a href="nowhere.html#x">x</a><a href="intro.html#no-such-anchor">y</a></main>',
            1,
        )
    )
    problems = internal_link_problems(site)
    assert any("nowhere.html" in p for p in problems)
    assert any("no-such-anchor" in p for p in problems)
