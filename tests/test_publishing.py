"""Publishing (issue #15): the workflow builds the book with the README's command and deploys it
with the hosting's own actions; Binder finds the environment and the library."""

from __future__ import annotations

import json

import pytest
import yaml
from conftest import ROOT

WORKFLOW = ROOT / ".github" / "workflows" / "book.yml"


def workflow() -> dict:
    return yaml.safe_load(WORKFLOW.read_text())


def test_the_workflow_is_valid_yaml_and_runs_on_every_push_to_main():
    wf = workflow()
    on = wf.get("on", wf.get(True))  # YAML 1.1 reads the key `on` as true
    assert on["push"]["branches"] == ["main"]
    assert wf["permissions"] == {"contents": "read", "pages": "write", "id-token": "write"}


def test_the_build_step_is_make_book_and_knows_the_repository():
    steps = workflow()["jobs"]["build"]["steps"]
    runs = [s for s in steps if "run" in s]
    assert [s["run"].strip() for s in runs] == ["make book"]
    assert "DMLIMITS_REPOSITORY_URL" in runs[0]["env"]
    uses = [s["uses"].split("@")[0] for s in steps if "uses" in s]
    assert uses.index("actions/upload-pages-artifact") > uses.index("actions/checkout")
    upload = next(s for s in steps if s.get("uses", "").startswith("actions/upload-pages"))
    assert upload["with"]["path"] == "_build/html"


def test_the_deploy_job_uses_the_hostings_action():
    deploy = workflow()["jobs"]["deploy"]
    assert deploy["needs"] == "build"
    assert [s["uses"].split("@")[0] for s in deploy["steps"]] == ["actions/deploy-pages"]


def test_binder_installs_the_pinned_environment_and_the_library():
    binder = (ROOT / "binder" / "requirements.txt").read_text()
    assert binder.split() == ["-r", "../requirements.txt"]
    post = (ROOT / "binder" / "postBuild").read_text()
    assert "pip install --no-deps --no-build-isolation -e ." in post
    overrides = json.loads((ROOT / "lab" / "overrides.json").read_text())
    viewers = overrides["@jupyterlab/docmanager-extension:plugin"]["defaultViewers"]
    assert viewers["markdown"] == "Jupytext Notebook"


def test_binder_runs_the_projects_python():
    assert (ROOT / "binder" / "runtime.txt").read_text().strip() == "python-3.11"


@pytest.mark.parametrize(
    ("given", "url"),
    [
        ("https://github.com/o/r", "https://github.com/o/r"),
        ("https://github.com/o/r.git", "https://github.com/o/r"),
        ("https://github.com/o/r.git/", "https://github.com/o/r"),
        ("", ""),
    ],
)
def test_the_repository_url_is_read_and_normalized(monkeypatch, given, url):
    from dmlimits.build.engine import REPOSITORY_ENV, repository_url

    monkeypatch.setenv(REPOSITORY_ENV, given)
    assert repository_url({}) == url


def test_a_bad_repository_url_names_the_value(monkeypatch):
    from dmlimits.build.engine import REPOSITORY_ENV, RepositoryError, repository_url

    monkeypatch.setenv(REPOSITORY_ENV, "https://github.com/only-owner")
    with pytest.raises(RepositoryError, match=r"'https://github.com/only-owner' is not a repo"):
        repository_url({})


def test_the_binder_button_opens_the_myst_source():
    """The build executes each chapter into an .ipynb; the repository keeps the .md."""
    from dmlimits.build import sphinxext

    binder = "https://mybinder.org/v2/gh/o/r/main?urlpath=lab/tree/notebooks/model"
    context = {
        "header_buttons": [
            {"type": "group", "label": "launch-buttons", "buttons": [
                {"type": "link", "text": "Binder", "url": binder + ".ipynb"}]},
            {"type": "link", "text": "repository", "url": "https://github.com/o/r"},
        ]
    }  # fmt: skip
    sphinxext.binder_opens_myst(None, "notebooks/model", "page.html", context, None)
    assert context["header_buttons"][0]["buttons"][0]["url"] == binder + ".md"
    assert context["header_buttons"][1]["url"] == "https://github.com/o/r"


def test_numbered_references_read_each_page_once(tmp_path, monkeypatch):
    """Sphinx resolves a {numref} by unpickling the page it points to; the book's standard
    domain shares one copy a page, and the references still number as Sphinx numbers them."""
    from sphinx.application import Sphinx
    from sphinx.environment import BuildEnvironment
    from sphinx.util.docutils import docutils_namespace

    src = tmp_path / "src"
    src.mkdir()
    (src / "conf.py").write_text("extensions = ['dmlimits.build.sphinxext']\nnumfig = True\n")
    table = ".. _{0}:\n\n.. table:: {0}\n\n   = =\n   a b\n   = =\n\n"
    refs = "".join(f":numref:`{t}` and :numref:`{t}`.\n\n" for t in ("one", "two", "three"))
    (src / "index.rst").write_text(
        "Index\n=====\n\n.. toctree::\n\n   other\n\n" + table.format("one") + refs
    )
    (src / "other.rst").write_text(
        "Other\n=====\n\n" + table.format("two") + table.format("three") + refs
    )
    reads = []
    own = BuildEnvironment.get_doctree
    monkeypatch.setattr(
        BuildEnvironment, "get_doctree", lambda env, name: reads.append(name) or own(env, name)
    )
    with docutils_namespace():  # Sphinx's nodes registered for this application only
        app = Sphinx(src, src, tmp_path / "html", tmp_path / "doctrees", "html",
                     status=None, warning=None, warningiserror=True)  # fmt: skip
        app.build()
    # Six references from each page to tables on two pages: each page read once for them.
    # (Sphinx reads each page once more to write it, and the index for the tree of pages.)
    assert reads.count("other") <= 3 and reads.count("index") <= 3, reads
    for page in ("index", "other"):
        html = (tmp_path / "html" / f"{page}.html").read_text()
        assert all(f"Table {n}" in html for n in (1, 2, 3)), page


def test_an_updated_search_index_is_the_one_a_full_build_writes(tmp_path, monkeypatch):
    """Built again from its state, Sphinx writes only the changed page and updates the search
    index; a word that only that page had (and no longer has) is gone from it, and the index is
    byte for byte the one a build of every page writes (dmlimits.build.sphinxext)."""
    import json
    import time

    from sphinx.application import Sphinx
    from sphinx.search import IndexBuilder
    from sphinx.util.docutils import docutils_namespace

    # Sphinx's own methods and the mark of the patch, as they were, after the test.
    for name in ("load", "prune", "freeze", "dmlimits_updates_as_built_afresh"):
        monkeypatch.setattr(IndexBuilder, name, getattr(IndexBuilder, name, False), raising=False)
    src = tmp_path / "src"
    src.mkdir()
    (src / "conf.py").write_text("extensions = ['dmlimits.build.sphinxext']\n")
    (src / "index.rst").write_text(
        "Index\n=====\n\nCommon words.\n\n.. toctree::\n\n   other\n   third\n"
    )
    (src / "third.rst").write_text(
        "Third\n=====\n\n.. index:: gradient, Zeta\n\n"
        ".. glossary::\n\n   Bubble\n      Idle time.\n"
    )
    other = src / "other.rst"
    other.write_text("Other\n=====\n\nCommon words and a zanzibarian rarity.\n")

    def build(out: str, every_page: bool) -> tuple[str, dict]:
        with docutils_namespace():  # each application registers Sphinx's nodes afresh
            app = Sphinx(
                src, src, tmp_path / out, tmp_path / f"{out}-doctrees", "html",
                status=None, warning=None, warningiserror=True, freshenv=every_page,
            )  # fmt: skip
            app.build(force_all=every_page)
        text = (tmp_path / out / "searchindex.js").read_text()
        return text, json.loads(text[text.index("(") + 1 : text.rindex(")")])

    _, first = build("kept", every_page=True)
    assert "zanzibarian" in first["terms"]
    time.sleep(0.01)
    other.write_text("Other\n=====\n\nCommon words, changed.\n")
    updated, index = build("kept", every_page=False)
    assert "zanzibarian" not in index["terms"]
    assert index["indexentries"] == first["indexentries"]  # the unwritten pages', kept
    assert {"gradient", "zeta", "bubble"} <= set(index["indexentries"])
    full, _ = build("full", every_page=True)
    assert updated == full
