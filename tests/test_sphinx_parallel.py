"""The book's HTML in parallel (dmlimits.build.sphinxext, dmlimits.build.jupyter_book_run): Sphinx
reads the pages in several processes, the API reference in one of its own, with the extensions
Jupyter Book loads; the pages are those a serial build writes.  And the API reference's autodoc: an
attribute built on first use is documented as declared, never built, and type comments are
not read (the library has none)."""

from __future__ import annotations

import io
import subprocess
import sys
import tokenize

import pytest
from conftest import ROOT

PAGES = ("index", "book/api", "book/a", "book/b", "notebooks/c", "notebooks/d", "notebooks/e")


def _project(folder, extensions: list[str]) -> None:
    folder.mkdir()
    (folder / "conf.py").write_text(f"extensions = {extensions!r}\nnumfig = True\n")
    for page in PAGES:
        path = folder / f"{page}.rst"
        path.parent.mkdir(parents=True, exist_ok=True)
        title = page.split("/")[-1].title()
        body = f".. _label-{title.lower()}:\n\n{title}\n{'=' * len(title)}\n\nText of {title}.\n"
        if page == "index":
            body += "\n.. toctree::\n   :numbered:\n\n" + "".join(f"   {p}\n" for p in PAGES[1:])
        else:
            body += "\nSee :ref:`label-index`.\n"
        path.write_text(body)


def _sphinx(src, out, parallel: int = 1) -> None:
    """Build ``src`` into ``out / "html"`` strictly, Sphinx in ``parallel`` processes."""
    from sphinx.application import Sphinx
    from sphinx.util.docutils import docutils_namespace

    with docutils_namespace():
        app = Sphinx(src, src, out / "html", out / "doctrees", "html", status=None,
                     warning=io.StringIO(), warningiserror=True, parallel=parallel)  # fmt: skip
        app.build()


def _build(src, out, parallel: int) -> dict[str, bytes]:
    _sphinx(src, out, parallel)
    return {p: (out / "html" / f"{p}.html").read_bytes() for p in PAGES}


# Both extensions call docutils' Node.traverse, which docutils marks as going away (their code,
# pinned in requirements.txt; the book's build does not run pytest's warning capture).
@pytest.mark.filterwarnings("ignore:nodes.Node.traverse:PendingDeprecationWarning")
def test_pages_read_in_parallel_are_the_pages_read_serially(tmp_path):
    """With the extensions that declare nothing about parallel reading (Sphinx would warn,
    and the strict build fail), the book's extension lets Sphinx read in parallel."""
    extensions = [
        "sphinx_multitoc_numbering", "sphinx_jupyterbook_latex", "dmlimits.build.sphinxext",
    ]
    _project(tmp_path / "src", extensions)
    serial = _build(tmp_path / "src", tmp_path / "serial", 1)
    parallel = _build(tmp_path / "src", tmp_path / "parallel", 2)
    assert parallel == serial
    # Without the book's extension, the strict build refuses to read them in parallel.
    _project(tmp_path / "bare", extensions[:2])
    from sphinx.errors import SphinxParallelError, SphinxWarning

    with pytest.raises((SphinxWarning, SphinxParallelError), match="parallel"):
        _build(tmp_path / "bare", tmp_path / "bare-out", 2)


def test_each_page_of_the_api_reference_is_read_in_a_process_of_its_own():
    import sphinx.builders
    import yaml
    from dmlimits.build import patches

    # The pages named are the book's: a renamed page would be read with ten others again.
    toc = (ROOT / "_toc.yml").read_text()
    files = {e["file"] for p in yaml.safe_load(toc)["parts"] for e in p["chapters"]}
    assert set(patches.READ_ALONE) <= files
    patches.read_alone_in_parallel()
    patches.read_alone_in_parallel()  # once per process
    alone = list(patches.READ_ALONE)
    docs = sorted([*alone, *(f"notebooks/n{i:02}" for i in range(24))])
    chunks = sphinx.builders.make_chunks(docs, 2)
    assert chunks[: len(alone)] == [[page] for page in alone] and len(chunks) > len(alone)
    assert sorted(d for chunk in chunks for d in chunk) == docs
    # Without them, Sphinx's own chunks.
    from sphinx.util.parallel import make_chunks

    rest = [d for d in docs if d not in alone]
    assert sphinx.builders.make_chunks(rest, 2) == make_chunks(rest, 2)


LAZY_MODULE = '''
"""A module with an attribute built on first use."""
from dmlimits.core import lazy

#: The value, built on first use.
VALUE: int


def _value() -> int:
    raise RuntimeError("built")


def typed(x):
    # type: (int) -> str
    """A function with a type comment."""
    return str(x)


__getattr__ = lazy.attributes(__name__, VALUE=_value)
'''


def test_autodoc_documents_a_lazy_attribute_as_declared_and_reads_no_type_comment(
    tmp_path, monkeypatch
):
    src = tmp_path / "src"
    src.mkdir()
    (src / "lazymod.py").write_text(LAZY_MODULE)
    monkeypatch.syspath_prepend(str(src))
    (src / "conf.py").write_text(
        "extensions = ['sphinx.ext.autodoc', 'dmlimits.build.sphinxext']\n"
        "autodoc_member_order = 'bysource'\n"
    )
    (src / "index.rst").write_text(
        "API\n===\n\n.. automodule:: lazymod\n   :members:\n   :undoc-members:\n"
    )
    _sphinx(src, tmp_path / "out")
    html = (tmp_path / "out" / "html" / "index.html").read_text()
    assert 'id="lazymod.VALUE"' in html and "The value, built on first use." in html
    assert "built" not in html.split('id="lazymod.VALUE"')[1].split("</dt>")[0]
    # The type comment is not read: the signature is the function's own, unannotated.
    signature = html.split('id="lazymod.typed"')[1].split("</dt>")[0]
    assert "int" not in signature and "str" not in signature


def test_the_library_has_no_type_comments():
    """The book's API reference does not read type comments (dmlimits.build.sphinxext): it would
    show none, since the library writes none."""
    found = []
    for path in sorted((ROOT / "lib" / "dmlimits").rglob("*.py")):
        with path.open("rb") as f:
            for token in tokenize.tokenize(f.readline):
                text = token.string.replace(" ", "")
                if token.type == tokenize.COMMENT and text.startswith("#type:"):
                    if not text.startswith("#type:ignore"):
                        found.append(f"{path.name}:{token.start[0]}")
    assert not found


def test_the_html_runner_refuses_a_bad_number_of_processes(tmp_path):
    for bad in (["--jobs"], ["--jobs", "0"], ["--jobs", "two"]):
        cmd = [sys.executable, "-m", "dmlimits.build.jupyter_book_run", *bad, "--version"]
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path)
        assert proc.returncode == 2 and "--jobs takes a number of processes" in proc.stderr
    cmd = [sys.executable, "-m", "dmlimits.build.jupyter_book_run", "--jobs", "2", "--version"]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0 and "Jupyter Book" in proc.stdout


@pytest.mark.parametrize("kept_before", [False, True])
def test_bibliography_plugins_are_looked_up_once_with_the_same_answers(monkeypatch, kept_before):
    """pybtex's lookups read every distribution's entry points once, and answer as pybtex's
    own lookup does; also over lookups kept already (another test of the process may have
    kept them, and wrapped them as this one does)."""
    import importlib.metadata

    import pybtex.plugin as plugin
    from dmlimits.build import patches

    monkeypatch.setattr(plugin, "entry_points", importlib.metadata.entry_points)  # pybtex's
    if kept_before:
        patches.plugins_looked_up_once()
    scans = []
    original = plugin.entry_points

    def counted(**selection):
        scans.append(selection)
        return original(**selection)

    monkeypatch.setattr(plugin, "entry_points", counted)
    patches.plugins_looked_up_once()
    patches.plugins_looked_up_once()  # once per process
    first = plugin.find_plugin("pybtex.style.formatting", "unsrt")
    assert plugin.find_plugin("pybtex.style.formatting", "unsrt") is first
    assert first is next(iter(original(group="pybtex.style.formatting", name="unsrt"))).load()
    names = sorted(plugin.enumerate_plugin_names("pybtex.style.formatting"))
    assert "unsrt" in names and names == sorted(plugin.enumerate_plugin_names(
        "pybtex.style.formatting"))  # fmt: skip
    # Every distribution's entry points read once, for every selection.
    assert scans == [{}]
    for selection in (
        {"group": "pybtex.style.formatting"},
        {"group": "pybtex.style.labels", "name": "alpha"},
        {"group": "nothing"},
    ):
        assert plugin.entry_points(**selection) == tuple(original(**selection))
    assert scans == [{}]


@pytest.mark.filterwarnings("ignore:nodes.Node.traverse:PendingDeprecationWarning")
def test_each_page_is_unpickled_once_for_its_numbering_and_its_writing(tmp_path, monkeypatch):
    """In a parallel build's main process (where the numbering walks every page's tree, and
    the writing resolves each page), each page's tree is unpickled once; the pages are those
    of a build that unpickles them every time (the serial build above compares the rest)."""
    from sphinx.environment import BuildEnvironment

    extensions = [
        "sphinx_multitoc_numbering", "sphinx_jupyterbook_latex", "dmlimits.build.sphinxext",
    ]
    _project(tmp_path / "src", extensions)
    unpickled: list[str] = []
    read = BuildEnvironment.get_doctree

    def counted(self, docname):
        unpickled.append(docname)
        return read(self, docname)

    monkeypatch.setattr(BuildEnvironment, "get_doctree", counted)
    shared = _build(tmp_path / "src", tmp_path / "shared", 2)
    # The forked readers unpickle nothing; the root page is unpickled once more, for the
    # navigation Sphinx builds from it (its master_doctree, kept once unpickled).
    assert sorted(unpickled) == sorted([*PAGES, "index"])
    from dmlimits.build import patches

    monkeypatch.setattr(patches, "share_doctrees_while_numbering", lambda app: None)
    unpickled.clear()
    every_time = _build(tmp_path / "src", tmp_path / "every-time", 2)
    assert len(unpickled) > len(PAGES) + 1
    assert shared == every_time
