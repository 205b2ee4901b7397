"""The course's lecture decks (``make slides``, into ``_build/slides``): one per lecture of the
course page, each with its objectives, a timed plan of one lecture's length, a figure, a demo
with its output and two questions answered in the speaker notes; nothing fetched from the
network, and reveal.js running in a real browser with the network blocked."""

import json
import re
import time
from html.parser import HTMLParser
from pathlib import Path

import browser
import pytest
from dmlimits.book import lectures
from dmlimits.build import slides

ROOT = Path(__file__).resolve().parent.parent
SLIDES = ROOT / "_build" / "slides"
COURSE = ROOT / "book" / "course.md"

# A script, style sheet, font or image fetched from another machine, in a tag's src or href or
# in a style sheet's @import or url().
REMOTE = re.compile(
    r"<(?:script|link|img|iframe|source)\b[^>]*\b(?:src|href)\s*=\s*[\"']?(?:https?:)?//"
    r"|@import\s+(?:url\()?\s*[\"']?(?:https?:)?//"
    r"|url\(\s*[\"']?(?:https?:)?//",
    re.IGNORECASE,
)


#: What the browser test blocks: every secure address, and plain ones under the common domains
#: (the decks are served from 127.0.0.1, which must stay reachable).
BLOCKED = ["https://*", *(f"http://*.{d}/*" for d in ("com", "org", "net", "io", "dev"))]


def remote_references(text: str) -> list[str]:
    """Every reference in ``text`` (HTML or CSS) that would load something over the network."""
    return [text[m.start() : m.start() + 120] for m in REMOTE.finditer(text)]


def course_lectures() -> int:
    """How many lectures the course page outlines (the numbered items under each week's
    **Lectures.**)."""
    count, inside = 0, False
    for line in COURSE.read_text().splitlines():
        if line.startswith("**Lectures.**"):
            inside = True
        elif line.startswith("**"):
            inside = False
        elif inside and re.match(r"\d+\. ", line):
            count += 1
    return count


class Deck(HTMLParser):
    """What a deck holds, read from its HTML: the plan's minutes and total, the figures' alt
    texts, the demos' outputs, the speaker notes and the visible text."""

    def __init__(self, text: str):
        super().__init__()
        self.minutes, self.total, self.alts, self.demos, self.notes = [], None, [], [], []
        self.text = []
        self._stack: list[str] = []
        self._in_demo_pre = self._in_notes = False
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        cls = (a.get("class") or "").split()
        self._stack.append(" ".join(cls))
        if tag == "img" and "lecture-figure" in cls:
            self.alts.append(a.get("alt") or "")
        if tag == "pre" and any("lecture-demo" in c for c in self._stack):
            self._in_demo_pre = True
            self.demos.append("")
        if tag == "aside" and "notes" in cls:
            self._in_notes = True
            self.notes.append("")

    def handle_endtag(self, tag):
        if self._stack:
            self._stack.pop()
        if tag == "pre":
            self._in_demo_pre = False
        if tag == "aside":
            self._in_notes = False

    def handle_data(self, data):
        here = self._stack[-1] if self._stack else ""
        if "minutes" in here.split():
            self.minutes.append(int(data))
        elif "total" in here.split():
            self.total = int(data)
        if self._in_demo_pre:
            self.demos[-1] += data
        if self._in_notes:
            self.notes[-1] += data
        else:
            self.text.append(data)


def decks() -> list[Path]:
    if not (SLIDES / "index.html").is_file():
        pytest.fail("the lecture decks are not built: run `make slides` (make test does it)")
    return sorted(SLIDES.glob("[0-9][0-9]-*.html"))


def test_the_checks_can_fail():
    cdn = '<script src="https://cdn.example.org/require.js"></script>'
    assert remote_references(cdn)
    assert remote_references("@import url('https://fonts.example.org/a.css');")
    assert not remote_references('<script src="reveal.js/dist/reveal.js"></script>')
    deck = Deck('<table class="lecture-plan"><tr><td class="minutes">7</td></tr>'
                '<tfoot><tr><th class="total">7</th></tr></tfoot></table>')
    assert deck.minutes == [7] and deck.total == 7


def test_a_plan_must_fill_one_lecture():
    with pytest.raises(ValueError, match="add to"):
        lectures.plan([("all of it", lectures.LECTURE_MINUTES + 1)])
    with pytest.raises(ValueError, match="whole number"):
        lectures.plan([("nothing", 0), ("all of it", lectures.LECTURE_MINUTES)])
    with pytest.raises(ValueError, match="five words"):
        lectures.figure(None, "a plot")


def test_one_source_per_lecture_of_the_course():
    assert len(slides.lectures()) == course_lectures()


@pytest.mark.book
def test_one_deck_per_lecture_listed_on_the_index():
    found = decks()
    assert [p.stem for p in found] == [p.stem for p in slides.lectures()]
    assert len(found) == course_lectures()
    index = (SLIDES / "index.html").read_text()
    for p in found:
        assert f'href="{p.name}"' in index, p.name


@pytest.mark.book
@pytest.mark.parametrize("stem", [p.stem for p in slides.lectures()])
def test_each_deck_has_every_part(stem):
    decks()
    path = SLIDES / f"{stem}.html"
    assert path.is_file(), f"{path.name}: no deck; run `make slides`"
    deck = Deck(path.read_text())
    text = " ".join(deck.text)
    assert "Learning objectives" in text, path.name
    assert deck.minutes and sum(deck.minutes) == deck.total == lectures.LECTURE_MINUTES, (
        path.name, deck.minutes)
    assert deck.alts and all(len(a.split()) >= 5 for a in deck.alts), (path.name, deck.alts)
    assert deck.demos and all(d.strip() for d in deck.demos), path.name
    assert "Question 1." in text and "Question 2." in text and "Question 3." not in text
    answers = [n for n in deck.notes if "Answer" in n]
    assert len(answers) == 2, (path.name, answers)
    assert "{math}" not in text and "{eq}" not in text, path.name


@pytest.mark.book
def test_no_deck_loads_anything_from_the_network():
    problems = []
    for path in [*decks(), SLIDES / "index.html", *(SLIDES / "reveal.js").rglob("*.css")]:
        problems += [f"{path.name}: {r}" for r in remote_references(path.read_text())]
    assert not problems, "\n".join(problems)



@pytest.mark.book
@pytest.mark.slow
@pytest.mark.skipif(not browser.available(), reason="needs Debian's chromium and chromedriver")
def test_a_deck_runs_in_the_browser_offline():
    """The first deck in Chromium, requests to other machines blocked (and any that is made
    reported): reveal.js initialised, no console error."""
    deck = decks()[0].name
    with browser.serve(SLIDES) as base, browser.chromium(performance=True) as driver:
        driver.execute_cdp_cmd("Network.enable", {})
        driver.execute_cdp_cmd("Network.setBlockedURLs", {"urls": BLOCKED})
        driver.get(f"{base}/{deck}")
        for _ in range(50):
            if driver.execute_script("return !!(window.Reveal && Reveal.isReady())"):
                break
            time.sleep(0.2)
        assert driver.execute_script("return Reveal.isReady()"), "reveal.js did not start"
        assert driver.execute_script("return Reveal.getTotalSlides()") > 1
        driver.execute_script("Reveal.next()")
        time.sleep(0.5)
        errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
        requests = [json.loads(e["message"])["message"] for e in driver.get_log("performance")]
        urls = {m["params"]["request"]["url"] for m in requests
                if m["method"] == "Network.requestWillBeSent"}
    assert not errors, errors
    web = [u for u in urls if u.startswith(("http:", "https:"))]  # not chrome:// or data:
    elsewhere = sorted(u for u in web if not u.startswith(base))
    assert not elsewhere, elsewhere
