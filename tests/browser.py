"""Drive the built book in headless Chromium and report what a reader would see go wrong.

For every page, at a desktop's width and a phone's (:data:`WIDTHS`): the console has no errors;
every equation was typeset by MathJax (each math element holds MathJax output, no MathJax
error, no raw TeX left in the visible text) and fits the text column, displayed or inline;
every image loaded, fits its column and has an alt text that says what it shows; the text has
no number printed as ``1e+11``, no Python repr (``None``, ``nan``, ``array(``), no Markdown
backticks and no doubled word (code, math and the API reference's signatures, which are code,
are not text); no glued value is set bold unless the prose emphasizes it; no table scrolls
sideways at a desktop's width but those listed, and none is cut off at any width (a wide one
scrolls in its own frame); no page is wider than the window; the previous and next links lead
to pages that load.  Pages are served from 127.0.0.1 by a throwaway HTTP server; the browser is
Debian's Chromium (/usr/bin/chromium) with its driver, never a downloaded one, and makes no
request beyond this machine.
"""

from __future__ import annotations

import functools
import http.server
import re
import shutil
import tempfile
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1400,900",
)
#: The window widths every page is checked at: a desktop screen, and a phone's (the theme's
#: narrow layout, the column about 385 pixels wide).
WIDTHS = (1400, 400)
#: Below this window width the checks of a desktop's layout (tables that should fit the column)
#: give way to those of a phone's (tables scroll in their own frame).
NARROW = 600
RAW_TEX = re.compile(r"\\\(|\\\)|\\\[|\\\]|\$\$|\\(frac|mathrm|left|right|alpha|cdot)\b")
# What a reader should never see in running text.
RAW_NUMBER = re.compile(r"\d\.?\d*[eE][+-]\d")
REPR = re.compile(r"\b(None|nan|NaN|inf)\b|array\(|<figure>")
DOUBLED = re.compile(r"\b([A-Za-z]+) \1\b")
# Markdown that reached the page as text: a glued string is pasted as it is, so backticks in it
# show instead of making code.
RAW_MARKDOWN = re.compile(r"`[^`]+`")
# Wider than the text column, or than the equation's own box (which leaves room for the
# equation's number and scrolls what does not fit: a reader sees a scroll bar).
WIDE_EQUATIONS = """
return [...document.querySelectorAll('mjx-container[display="true"]')]
  .filter(c => { const m = c.querySelector('mjx-math');
                 const col = c.parentElement.getBoundingClientRect().width;
                 const box = c.getBoundingClientRect().width;
                 return m && (m.getBoundingClientRect().width > Math.min(col, box) + 2
                              || c.scrollWidth > c.clientWidth + 2); })
  .map(c => c.textContent.slice(0, 60));
"""
# Inline math that runs past the right edge of its paragraph or list item: MathJax does not break
# a long inline formula, and the page clips what overflows, so a reader never sees the end.
WIDE_INLINE = """
return [...document.querySelectorAll('mjx-container:not([display="true"])')]
  .filter(c => { const block = c.closest('p, li, dd');
                 if (!block || c.closest('table, .sig, pre')) return false;
                 const right = block.getBoundingClientRect().right;
                 return c.getBoundingClientRect().right > right + 2; })
  .map(c => c.textContent.slice(0, 60));
"""
# Tables wider than the box the theme wraps them in, which scrolls them sideways: each by the
# start of its header row.
WIDE_TABLES = """
return [...document.querySelectorAll('main table')]
  .filter(t => t.getBoundingClientRect().width > t.parentElement.clientWidth + 2)
  .map(t => [...t.querySelectorAll('thead th')].map(h => h.textContent.trim()).join(' | '));
"""
#: The tables that may stay wider than the text column at the desktop width (1400 pixels;
#: 1,600 fits all but the first two), by page and the start of their header row, with the
#: reason; they scroll in their own frame (:data:`CLIPPED_TABLES`), as every table does at a
#: phone's width.  Any other table that scrolls sideways is a problem; so is a table listed here
#: that fits, which is to be taken off the list.
WIDE_TABLES_ACCEPTED = {
    ("notebooks/reproduction.html", "Compute (FLOP) | Parameters"):
        "thirteen columns: each optimal configuration whole, on one line",
    ("notebooks/generations.html", "GPU | Peak (FLOP/s)"):
        "ten columns: each GPU's hardware and its three results side by side",
}  # fmt: skip
# A table wider than its box that no box around it scrolls: its last columns are cut off.
CLIPPED_TABLES = """
return [...document.querySelectorAll('main table')]
  .filter(t => { const w = t.getBoundingClientRect().width;
                 if (w <= t.parentElement.clientWidth + 2) return false;
                 for (let e = t.parentElement; e && e.tagName !== 'MAIN'; e = e.parentElement) {
                   const o = getComputedStyle(e).overflowX;
                   const scrolls = o === 'auto' || o === 'scroll';
                   if (scrolls && e.scrollWidth > e.clientWidth) return false;
                 }
                 return true; })
  .map(t => [...t.querySelectorAll('thead th')].map(h => h.textContent.trim()).join(' | '));
"""
# A glued value set bold where the prose does not ask for emphasis (MyST-NB's own style sheet
# makes every pasted value bold; the book's resets it).
BOLD_GLUE = """
return [...document.querySelectorAll('main span.pasted-text')]
  .filter(s => !s.closest('strong, b, th, h1, h2, h3, h4, dt, .admonition-title')
               && parseInt(getComputedStyle(s).fontWeight) >= 600)
  .map(s => s.textContent.slice(0, 40));
"""
# An image wider than the box it sits in (the page would scroll, or cut it off).
WIDE_IMAGES = """
return [...document.querySelectorAll('main img')]
  .filter(i => i.getBoundingClientRect().width > i.parentElement.getBoundingClientRect().width + 2
               || i.getBoundingClientRect().right > document.documentElement.clientWidth + 2)
  .map(i => i.getAttribute('src'));
"""
# The page itself wider than the window: the reader scrolls it sideways.
PAGE_SCROLLS = """
return document.documentElement.scrollWidth > document.documentElement.clientWidth + 2;
"""
BAD_ALT = """
return [...document.querySelectorAll('main img')]
  .filter(i => { const a = (i.getAttribute('alt') || '').trim();
                 return a.split(/\\s+/).length < 5 || /^[0-9a-f]{12,}/.test(a)
                        || a === (i.getAttribute('src') || '').split('/').pop(); })
  .map(i => i.getAttribute('src') + ': ' + (i.getAttribute('alt') || '(none)'));
"""

WAIT_FOR_MATHJAX = """
const done = arguments[arguments.length - 1];
const start = Date.now();
(function poll() {
  const math = document.querySelectorAll('.math').length;
  if (math === 0) { done('none'); return; }
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
    MathJax.startup.promise.then(() => done('typeset')).catch(e => done('error: ' + e));
  } else if (Date.now() - start > 15000) { done('MathJax never loaded');
  } else { setTimeout(poll, 100); }
})();
"""
UNTYPESET = """
return [...document.querySelectorAll('.math')]
  .filter(e => !e.querySelector('mjx-container') && !e.closest('mjx-container'))
  .map(e => e.textContent.trim().slice(0, 60));
"""
# MathJax errors, and macros it did not know (its noundefined extension prints them, backslash
# and all, in red instead of failing).
TEX_ERRORS = """
return [...document.querySelectorAll('mjx-merror'),
        ...[...document.querySelectorAll('mjx-container')]
           .filter(c => c.textContent.includes('\\\\'))]
  .map(e => e.textContent.slice(0, 60));
"""
BROKEN_IMAGES = """
return [...document.images].filter(i => !i.complete || i.naturalWidth === 0)
  .map(i => i.getAttribute('src'));
"""
VISIBLE_TEXT = """
const clone = document.querySelector('main') || document.body;
return [...clone.querySelectorAll('p, li, td, th, h1, h2, h3, figcaption, dd, dt')]
  .filter(e => !e.closest('pre, code, .highlight, mjx-container, .math, .sig'))
  .map(e => { const c = e.cloneNode(true);
              c.querySelectorAll('mjx-container, .math, code, pre, .sig').forEach(x => x.remove());
              return c.textContent; })
  .join('\\n');
"""


@dataclass(frozen=True)
class Problem:
    page: str
    kind: str
    detail: str

    def __str__(self) -> str:
        return f"{self.page}: {self.kind}: {self.detail}"


def available() -> bool:
    return Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()


#: The marks of a browser test file (``pytestmark = browser.MARKS``): slow, and skipped where
#: Debian's Chromium is missing.
MARKS = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not available(),
        reason="needs Debian's chromium and chromium-driver (make test installs them)",
    ),
]


@contextmanager
def serve(folder: Path):
    """Serve ``folder`` on 127.0.0.1 (an ephemeral port) for the duration of the block."""

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):  # keep test output clean
            pass

    handler = functools.partial(Quiet, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def chromium(performance: bool = False):
    """Debian's Chromium, headless, with a profile of its own; ``performance``: its
    performance log records every request the pages make (``driver.get_log("performance")``)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="dmlimits-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (*FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    logs = {"browser": "ALL", **({"performance": "ALL"} if performance else {})}
    options.set_capability("goog:loggingPrefs", logs)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_script_timeout(30)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def pages(folder: Path) -> list[str]:
    return sorted(
        str(p.relative_to(folder))
        for p in folder.rglob("*.html")
        if not p.relative_to(folder).parts[0].startswith("_")
    )


def check_page(driver, base: str, page: str, width: int = WIDTHS[0]) -> list[Problem]:
    """What goes wrong on ``page`` in a window ``width`` pixels wide (a problem found at a
    phone's width names it)."""
    problems: list[Problem] = []
    narrow = width < NARROW
    at = f" at {width} px" if narrow else ""
    driver.get_log("browser")  # drop what earlier pages left
    driver.get(f"{base}/{page}")
    state = driver.execute_async_script(WAIT_FOR_MATHJAX)
    if state not in ("none", "typeset"):
        problems.append(Problem(page, "mathjax", state))
    for text in driver.execute_script(UNTYPESET):
        problems.append(Problem(page, "equation not typeset", text))
    for text in driver.execute_script(TEX_ERRORS):
        problems.append(Problem(page, "TeX error", text))
    visible = driver.execute_script(VISIBLE_TEXT) or ""
    raw = RAW_TEX.search(visible)
    if raw:
        problems.append(Problem(page, "raw TeX in the text", raw.group(0)))
    for line in visible.splitlines():
        patterns = ((RAW_NUMBER, "raw exponent"), (REPR, "Python repr"),
                    (DOUBLED, "doubled word"), (RAW_MARKDOWN, "raw Markdown"))  # fmt: skip
        for pattern, kind in patterns:
            m = pattern.search(line)
            if m and not (kind == "doubled word" and m.group(1).lower() in ("that", "had")):
                problems.append(Problem(page, kind, line[max(0, m.start() - 40) : m.end() + 40]))
    for text in driver.execute_script(WIDE_EQUATIONS):
        problems.append(Problem(page, "equation wider than the column" + at, text))
    for text in driver.execute_script(WIDE_INLINE):
        problems.append(Problem(page, "inline formula wider than its paragraph" + at, text))
    for header in driver.execute_script(CLIPPED_TABLES):
        problems.append(Problem(page, "table cut off" + at, header[:80]))
    for text in driver.execute_script(BOLD_GLUE):
        problems.append(Problem(page, "glued value in bold", text))
    for src in driver.execute_script(WIDE_IMAGES):
        problems.append(Problem(page, "image wider than the column" + at, src))
    if driver.execute_script(PAGE_SCROLLS):
        problems.append(Problem(page, "page wider than the window" + at, str(width)))
    wide = [] if narrow else driver.execute_script(WIDE_TABLES)
    for header in wide:
        if not any(k == (page, header[: len(k[1])]) for k in WIDE_TABLES_ACCEPTED):
            problems.append(Problem(page, "table wider than the column", header[:80]))
    for key in WIDE_TABLES_ACCEPTED if not narrow else ():
        if key[0] == page and not any(h.startswith(key[1]) for h in wide):
            problems.append(Problem(page, "table listed as wide fits the column", key[1]))
    for text in driver.execute_script(BAD_ALT):
        problems.append(Problem(page, "image without a meaningful alt text", text))
    for src in driver.execute_script(BROKEN_IMAGES):
        problems.append(Problem(page, "image missing", src))
    for entry in driver.get_log("browser"):
        if entry.get("level") == "SEVERE" and "favicon.ico" not in entry.get("message", ""):
            problems.append(Problem(page, "console error", entry["message"][:200]))
    return problems


def check_neighbours(driver, base: str, page: str) -> list[Problem]:
    """Follow the previous and next links of ``page`` (the page the browser shows): each must
    lead to a page that loads, with a heading.  The targets are fetched over HTTP rather than
    opened in the browser: every page is opened and checked in the browser once, by
    :func:`check_page`, and opening each again from both neighbours took most of the test."""
    import urllib.error
    import urllib.request

    from selenium.webdriver.common.by import By

    problems = []
    for css in ("a.left-prev", "a.right-next"):
        links = driver.find_elements(By.CSS_SELECTOR, css)
        if not links:
            continue
        target = links[0].get_attribute("href")  # absolute, as the browser resolved it
        try:
            with urllib.request.urlopen(target.split("#")[0], timeout=30) as response:
                html = response.read().decode("utf-8", "replace")
        except (urllib.error.URLError, OSError):
            html = ""
        main = html.split("<main", 1)[-1] if "<main" in html else ""
        if not re.search(r"<h1[\s>]", main):
            problems.append(Problem(page, f"{css} link broken", target))
    return problems


def check_site(
    folder: Path, only: list[str] | None = None, widths: tuple[int, ...] = WIDTHS
) -> list[Problem]:
    """Every page (or those in ``only``) at each of ``widths``; the neighbour links once."""
    problems: list[Problem] = []
    with serve(folder) as base, chromium() as driver:
        for k, width in enumerate(widths):
            driver.set_window_size(width, 900)
            for page in only or pages(folder):
                problems += check_page(driver, base, page, width)
                if k == 0:
                    problems += check_neighbours(driver, base, page)
    return problems


def screenshot(folder: Path, page: str, target: Path) -> Path:
    """A full-page screenshot of ``page`` (after MathJax), for people to look at."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with serve(folder) as base, chromium() as driver:
        driver.get(f"{base}/{page}")
        driver.execute_async_script(WAIT_FOR_MATHJAX)
        height = driver.execute_script("return document.documentElement.scrollHeight")
        driver.set_window_size(1400, min(int(height) + 100, 16000))
        driver.save_screenshot(str(target))
    return target
