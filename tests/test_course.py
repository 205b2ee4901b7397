"""The course's weeks are readable: no week assigns more reading than
:data:`dmlimits.book.reading.WEEK_WORDS_MAX` words of the built pages, and the page on re-running
the book is read in the first week whose hand-in runs the library with an override."""

import re

import pytest
from conftest import ROOT
from dmlimits.book import reading as rd
from test_teaching import teaching_weeks


def week_docs(body: str) -> list[str]:
    """The documents a week's **Read.** paragraph assigns, by name from the root
    (``notebooks/model``, ``book/rerun``)."""
    read = body.split("**Read.**")[1].split("**Lectures.**")[0]
    docs = []
    for target in re.findall(r"\{doc\}`([^`<]+)`", read):
        docs.append(target.removeprefix("../") if target.startswith("../") else f"book/{target}")
    return docs


def test_article_text_leaves_out_navigation_and_hidden_code():
    page = (
        "<html><nav>Contents Home</nav><article><h1>Title here</h1>"
        '<div class="cell"><div class="cell_input"><pre>x = compute(1)</pre></div>'
        '<div class="cell_output">an output of 3 words</div></div>'
        "<p>Prose<br>with a break ¶</p><script>var a = 1;</script></article>"
        "<footer>By the authors</footer></html>"
    )
    text = rd.article_text(page)
    assert "compute" not in text and "Contents" not in text and "authors" not in text
    assert "var" not in text
    # "Title here" + "an output of 3 words" + "Prose with a break" (the pilcrow is no word)
    assert rd.words(text) == 2 + 5 + 4


def test_page_words_names_a_missing_page(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"no built page at .*nowhere\.html"):
        rd.page_words(tmp_path / "nowhere.html")


def test_every_week_reads_pages_that_exist():
    for n, body in teaching_weeks():
        for doc in week_docs(body):
            assert (ROOT / f"{doc}.md").is_file(), f"week {n} reads {doc}, which is no page"


def test_no_week_reads_more_than_the_limit():
    """Counted on the student edition: what a student reads, without the solutions."""
    student = ROOT / "_build" / "student" / "html"
    if not (student / "index.html").is_file():
        pytest.fail("the student edition is not built: run `make student` (make test does it)")
    over = {}
    for n, body in teaching_weeks():
        counts = rd.week_words(student, week_docs(body))
        if sum(counts.values()) > rd.WEEK_WORDS_MAX:
            over[n] = counts
    assert not over, f"weeks over {rd.WEEK_WORDS_MAX} words of reading: {over}"


def test_the_rerun_page_is_read_before_the_first_hand_in_that_needs_it():
    needs = [
        n
        for n, body in teaching_weeks()
        if re.search(r"override|scenario file", body.split("**Hand in.**")[1])
    ]
    assert needs, "no hand-in runs the library with an override or a scenario file"
    read_in = [n for n, body in teaching_weeks() if "book/rerun" in week_docs(body)]
    assert len(read_in) == 1, f"the re-run page is read in weeks {read_in}; once"
    assert read_in[0] <= min(needs), f"read in week {read_in[0]}, needed in week {min(needs)}"
    for n, body in teaching_weeks():
        if n in needs:
            assert "{doc}`rerun`" in body, f"week {n}'s hand-in needs the re-run page: link it"
