"""The built book in a real browser (headless Chromium), and proof the checks can fail."""

import re
import shutil

import browser
import pytest
from conftest import BUILD, HTML
from dmlimits.book.glue import sci
from dmlimits.core.scenario import resolve
from dmlimits.costs import model

pytestmark = browser.MARKS

HEADLINE = "notebooks/model.html"


def test_every_page_in_the_browser(built_book):
    problems = browser.check_site(HTML)
    assert not problems, "\n".join(map(str, problems))


def test_headline_page_numbers_equal_the_library(built_book):
    from selenium.webdriver.common.by import By

    scn = resolve("h100")
    sh = model.shapes(scn)
    alphas = model.exponent_values(scn)
    with browser.serve(HTML) as base, browser.chromium() as driver:
        driver.get(f"{base}/{HEADLINE}")
        text = driver.find_element(By.TAG_NAME, "main").text
    assert sci(float(sh.compute[-1])) in text
    assert f"{alphas['batch_per_layer']:.4f}" in text
    assert f"{sh.steps[0]:,.0f} steps" in text
    shot = browser.screenshot(HTML, HEADLINE, BUILD / "screenshots" / "headline.png")
    assert shot.stat().st_size > 10_000


@pytest.fixture
def site_copy(built_book, tmp_path):
    copy = tmp_path / "html"
    shutil.copytree(HTML, copy)
    return copy


def test_an_untypeset_equation_is_caught_and_named(site_copy):
    page = site_copy / HEADLINE
    html = page.read_text()
    # An unknown macro, a missing brace, and an equation whose delimiters are gone.
    assert r"\[C = 6 D N_{\mathrm{a}}\]" in html
    html = html.replace(r"\[C = 6 D N_{\mathrm{a}}\]", r"\[C = \undefinedmacro{6} D\]", 1)
    html = html.replace(r"\[C = 6 N N_{\mathrm{a}} k_D\]", r"\[C = \frac{6 N\]", 1)
    html = re.sub(r"\\\[(C = \\frac\{6 N\^\{2\})", r"\1", html, count=1)
    page.write_text(html)
    problems = browser.check_site(site_copy, only=[HEADLINE])
    kinds = {(p.page, p.kind) for p in problems}
    assert (HEADLINE, "TeX error") in kinds, problems
    assert (HEADLINE, "equation not typeset") in kinds, problems


def test_a_missing_image_is_caught_and_named(site_copy):
    html = (site_copy / HEADLINE).read_text()
    image = re.search(r'<img[^>]+src="\.\./(_images/[^"]+)"', html).group(1)
    (site_copy / image).unlink()
    problems = browser.check_site(site_copy, only=[HEADLINE])
    assert any(
        p.page == HEADLINE and p.kind == "image missing" and image in p.detail for p in problems
    ), problems


def test_a_broken_neighbour_link_is_caught_and_named(site_copy):
    html = (site_copy / HEADLINE).read_text()
    target = re.search(r'<a class="right-next"\s+href="([^"#]+)', html).group(1)
    (site_copy / "notebooks" / target).unlink()
    problems = browser.check_site(site_copy, only=[HEADLINE])
    assert [p.kind for p in problems if p.page == HEADLINE] == ["a.right-next link broken"], (
        problems
    )


def test_the_headline_figure_is_saved_for_people_to_look_at(built_book):
    """Issue #13: Fig 9.1 (utilization against compute, the published curve overlaid) on its
    page, saved where a reviewer can open it: _build/screenshots/reproduction.png."""
    page = "notebooks/reproduction.html"
    shot = browser.screenshot(HTML, page, BUILD / "screenshots" / "reproduction.png")
    assert shot.stat().st_size > 50_000


def test_a_table_wider_than_the_column_is_caught_and_named(built_book, monkeypatch):
    page = "notebooks/reproduction.html"
    accepted = {k: v for k, v in browser.WIDE_TABLES_ACCEPTED.items() if k[0] != page}
    accepted[(page, "Fitted nowhere")] = "a table the page does not have"
    monkeypatch.setattr(browser, "WIDE_TABLES_ACCEPTED", accepted)
    problems = browser.check_site(HTML, only=[page])
    found = {(p.kind, p.detail[:14]) for p in problems}
    assert ("table wider than the column", "Compute (FLOP)") in found, problems
    assert ("table listed as wide fits the column", "Fitted nowhere") in found, problems


def test_search_results_are_summarized_from_the_pages_words(built_book):
    """A result's summary comes from the page's article, not its buttons or list of contents;
    a glossary term's result is titled with its term, not a second "Glossary"."""
    import time

    with browser.serve(HTML) as base, browser.chromium() as driver:
        driver.get(f"{base}/search.html?q=latency%20wall")
        for _ in range(100):
            results = driver.execute_script(
                "return [...document.querySelectorAll('#search-results li')].map(li => "
                "[li.querySelector('a').textContent, "
                "(li.querySelector('p.context') || {textContent: ''}).textContent])"
            )
            if len(results) > 5 and all(s for t, s in results if not t.startswith("dmlimits")):
                break
            time.sleep(0.2)
    titles = [t for t, _ in results]
    assert "Glossary: latency wall" in titles, titles
    assert titles.count("Glossary") <= 1, titles
    pages = [(t, s) for t, s in results if not t.startswith("dmlimits")]
    assert pages
    for title, summary in pages:
        assert ".md" not in summary[:12] and "Contents" not in summary, (title, summary)


def test_the_headline_figure_and_its_text_agree_on_the_wall(built_book):
    """Fig. 9.1's caption, its text and the introduction's opening figure name the same two grid
    points around the latency wall: the last run that finishes in time and the first that does
    not (once a caption shaded from one and the text stopped at the other)."""
    from dmlimits.book import whole_run
    from selenium.webdriver.common.by import By

    marks = whole_run.regimes(resolve("h100"))
    last, first = sci(marks["last_feasible"]), sci(marks["first_infeasible"])
    with browser.serve(HTML) as base, browser.chromium() as driver:
        for page, figure in (("notebooks/reproduction.html", "fig-reproduction-headline"),
                             ("notebooks/intro.html", "fig-intro-headline")):  # fmt: skip
            driver.get(f"{base}/{page}")
            caption = driver.find_element(By.CSS_SELECTOR, f"#{figure} figcaption").text
            text = driver.find_element(By.TAG_NAME, "main").text.replace(caption, "")
            for value in (last, first):
                assert value in caption, (page, value, caption)
                assert value in text, (page, value)
