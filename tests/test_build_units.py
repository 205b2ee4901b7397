"""Parts of the build pipeline that need no notebook execution."""

import json
from pathlib import Path

import pytest
import yaml
from conftest import ROOT
from dmlimits.build import engine as build
from dmlimits.build import jupyter_book_run
from dmlimits.core.scenario import resolve


def test_launch_buttons_wait_for_a_repository_url(tmp_path, capsys):
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    assert config["launch_buttons"]["binderhub_url"] and config["launch_buttons"]["colab_url"]
    (tmp_path / "_config.yml").write_text(yaml.safe_dump({**config, "repository": {"url": ""}}))
    build.stage_config(tmp_path)
    staged = yaml.safe_load((tmp_path / "_config.yml").read_text())
    assert "launch_buttons" not in staged and "launch buttons off" in capsys.readouterr().out
    url = {"url": "https://example.org/owner/book"}
    (tmp_path / "_config.yml").write_text(yaml.safe_dump({**config, "repository": url}))
    build.stage_config(tmp_path)
    assert yaml.safe_load((tmp_path / "_config.yml").read_text())["launch_buttons"]


def test_notebook_parameters_reproduce_the_scenario():
    for spec, sets in [
        ("h100", []),
        ("a100-sparse", ["training.months=6"]),
        ("h100", ["gpu=v100", "network.latency=2e-6"]),
    ]:
        scn = resolve(spec, sets)
        params = build.notebook_parameters(scn)
        again = resolve(
            params["scenario"], overrides=params["overrides"], name=params["scenario_name"]
        )
        assert again.values == scn.values and again.name == scn.name


def test_file_scenario_parameters(tmp_path):
    f = tmp_path / "mine.yaml"
    f.write_text("name: mine\ngpu: a100\ntraining:\n  months: 4\n")
    scn = resolve(str(f))
    params = build.notebook_parameters(scn)
    assert params["scenario"] == "h100" and params["overrides"]["gpu"] == "a100"
    assert resolve(params["scenario"], overrides=params["overrides"]).values == scn.values


def test_output_folders(tmp_path):
    assert build.output_dir(ROOT, resolve("h100"), None) == ROOT / "_build" / "html"
    other = resolve("h100", ["training.months=6"])
    assert build.output_dir(ROOT, other, None).parent.parent.name == "scenarios"
    # A scenario file that calls itself h100 is not the default book.
    f = tmp_path / "h100.yaml"
    f.write_text("name: h100\ntraining:\n  months: 6\n")
    assert build.output_dir(ROOT, resolve(str(f)), None) == (
        ROOT / "_build" / "scenarios" / "h100" / "html"
    )


def test_toc_notebooks_exist():
    names = build.toc_notebooks(ROOT)
    assert "notebooks/model" in names
    assert all((ROOT / f"{n}.md").is_file() for n in names)


def test_schedule_starts_the_slowest_first(tmp_path):
    names = ["notebooks/a", "notebooks/b", "notebooks/c", "notebooks/d"]
    assert build.schedule(names, tmp_path) == names  # nothing remembered: reading order
    timings = [build.Timing("notebooks/a", 1.0), build.Timing("notebooks/c", 9.0)]
    build.remember_seconds(tmp_path, timings)
    # never timed (b, d) first in reading order, then the remembered ones, slowest first
    assert build.schedule(names, tmp_path) == ["notebooks/b", "notebooks/d", "notebooks/c",
                                               "notebooks/a"]  # fmt: skip
    (tmp_path / build.SECONDS_FILE).write_text("not json")
    assert build.schedule(names, tmp_path) == names


def test_file_scenario_keeps_its_origin_and_types(tmp_path):
    """A book built from a file says so on its assumptions page, and every value has the same
    type whether it came from the file, a GPU preset or the injected overrides (so the page
    prints it the same way)."""
    f = tmp_path / "mine.yaml"
    f.write_text("name: mine\ndescription: my cluster\ngpu: a100\n")
    scn = resolve(str(f))
    params = build.notebook_parameters(scn)
    assert params["scenario_origin"] == scn.origin and str(f) in scn.origin
    assert params["scenario_description"] == "my cluster"
    again = resolve(params["scenario"], overrides=params["overrides"])
    assert {k: type(v) for k, v in again.values.items()} == {
        k: type(v) for k, v in scn.values.items()
    }


def test_parameters_for_injects_only_what_a_notebook_declares():
    import jupytext

    params = build.notebook_parameters(resolve("h100"))
    for name, extra in [
        ("model", set()),
        ("assumptions", {"scenario_origin", "scenario_description"}),
    ]:
        nb = jupytext.read(ROOT / "notebooks" / f"{name}.md")
        assert set(build.parameters_for(nb, params)) == {
            "scenario",
            "overrides",
            "scenario_name",
            *extra,
        }


def test_progress_in_a_log_and_on_a_terminal():
    import io

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    for stream in (io.StringIO(), Terminal()):
        p = build.Progress({"notebooks/a": 2, "notebooks/b": 1}, stream)
        p.start("notebooks/a")
        p.cell_done("notebooks/a")
        p.finish("notebooks/a", "[1/2] notebooks/a.md  1.0 s")
        p.start("notebooks/b")
        p.finish("notebooks/b", "[2/2] notebooks/b.md  1.0 s")
        text = stream.getvalue()
        assert "started  notebooks/a.md (2 cells)" in text
        assert build.bar(1.0) + " [2/2] notebooks/b.md" in text
        # the per-notebook bar is drawn on a terminal only; a log stays one line per event
        assert ("a █████░░░░░ 1/2" in text) == isinstance(stream, Terminal)
        if not isinstance(stream, Terminal):
            assert text.count("\n") == 4 and "\r" not in text


def test_code_cells_counts_the_injected_parameters_cell(tmp_path):
    f = tmp_path / "n.md"
    f.write_text(
        "# t\n\n```{code-cell} ipython3\nx = 1\n```\n\ntext\n\n```{code-cell} ipython3\ny\n```\n"
    )
    assert build.code_cells(f) == 3
    assert build.bar(0.5, 8) == "████░░░░" and build.bar(2, 4) == "████"


# --- The cache of executed notebooks (issue #16) ---------------------------------------------
def _project(tmp_path):
    """A project of one notebook, with a requirements file, for the cache key."""
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "notebooks" / "a.md").write_text("# A\n")
    (tmp_path / "requirements.txt").write_text("numpy==1\n")
    return tmp_path


def test_a_notebooks_address_changes_with_every_input(tmp_path, monkeypatch):
    """Its source, its parameters, the library and the pinned environment each move the
    address; the same inputs give the same address."""
    from dmlimits import search

    root = _project(tmp_path)
    params = {"scenario": "h100", "overrides": {}}
    key = build.notebook_key(root, "notebooks/a", params)
    assert build.notebook_key(root, "notebooks/a", dict(params)) == key
    seen = {key}

    def changed() -> str:
        new = build.notebook_key(root, "notebooks/a", params)
        assert new not in seen
        seen.add(new)
        return new

    params = {"scenario": "h100", "overrides": {"training.months": 6}}
    changed()
    (root / "notebooks" / "a.md").write_text("# A, edited\n")
    changed()
    (root / "requirements.txt").write_text("numpy==2\n")
    changed()
    monkeypatch.setattr(search, "library_fingerprint", lambda: "another library")
    changed()


def test_the_cache_gives_back_what_it_stored_and_can_be_switched_off(tmp_path, monkeypatch):
    work = tmp_path / "_build"
    monkeypatch.delenv(build.NOTEBOOK_CACHE_ENV, raising=False)
    cache = build.notebook_cache_dir(work)
    assert cache == work / "cache" / "notebooks"
    executed = tmp_path / "executed.ipynb"
    executed.write_bytes(b'{"cells": []}')
    target = tmp_path / "stage" / "notebooks" / "a.ipynb"
    assert not build.cached_copy(cache, "k", target)
    build.cache_store(cache, "k", executed)
    assert build.cached_copy(cache, "k", target)
    assert target.read_bytes() == executed.read_bytes()
    assert not list(cache.glob(".tmp-*"))
    monkeypatch.setenv(build.NOTEBOOK_CACHE_ENV, "off")
    assert build.notebook_cache_dir(work) is None
    assert not build.cached_copy(None, "k", target)


def test_a_chapters_parse_is_kept_until_its_source_changes(tmp_path, monkeypatch):
    """The build reads each chapter's MyST source as a notebook (jupytext's parse), kept in the
    notebook cache: read again, the same notebook comes back without jupytext; an edited source
    is parsed again; with the cache off nothing is kept."""
    import jupytext

    root = tmp_path / "book"
    (root / "notebooks").mkdir(parents=True)
    (root / "requirements.txt").write_text("jupytext==1\n")
    source = root / "notebooks" / "a.md"
    header = "---\njupytext:\n  text_representation:\n    format_name: myst\n---\n"
    source.write_text(header + "# A\n\n```{code-cell} ipython3\nx = 1\n```\n")
    monkeypatch.setenv(build.NOTEBOOK_CACHE_ENV, str(tmp_path / "cache"))
    first = build.read_source(root, "notebooks/a")
    assert [c.cell_type for c in first.cells] == ["markdown", "code"]
    kept = list((tmp_path / "cache" / build.SOURCES).glob("*.json"))
    assert len(kept) == 1

    def unparsed(*_, **__):
        raise AssertionError("parsed again")

    monkeypatch.setattr(jupytext, "reads", unparsed)
    assert build.read_source(root, "notebooks/a") == first  # cell ids included
    source.write_text(source.read_text().replace("x = 1", "x = 2"))
    with pytest.raises(AssertionError, match="parsed again"):
        build.read_source(root, "notebooks/a")
    monkeypatch.undo()
    monkeypatch.setenv(build.NOTEBOOK_CACHE_ENV, "off")
    assert build.read_source(root, "notebooks/a").cells[1].source == "x = 2"
    assert len(list((tmp_path / "cache" / build.SOURCES).glob("*"))) == 1
    # Kept parses are pruned with the executions, to a hundredth of their size.
    assert build.prune_notebook_cache(tmp_path / "cache", limit=100) == 0
    assert not list((tmp_path / "cache" / build.SOURCES).glob("*"))


def test_the_cache_keeps_the_executions_used_last_under_its_size(tmp_path):
    import os

    cache = tmp_path / "cache"
    cache.mkdir()
    for i, name in enumerate(["old", "used", "new"]):
        (cache / f"{name}.ipynb").write_bytes(b"x" * 100)
        os.utime(cache / f"{name}.ipynb", ns=(10**18 + i * 10**9,) * 2)
    assert build.prune_notebook_cache(cache, limit=300) == 0
    # Reading "used" makes it the most recently used: "old" and then "new" go first.
    assert build.cached_copy(cache, "used", tmp_path / "stage" / "a.ipynb")
    assert build.prune_notebook_cache(cache, limit=250) == 1
    assert sorted(p.stem for p in cache.iterdir()) == ["new", "used"]
    assert build.prune_notebook_cache(cache, limit=100) == 1
    assert [p.stem for p in cache.iterdir()] == ["used"]
    assert build.prune_notebook_cache(None) == 0
    assert build.prune_notebook_cache(tmp_path / "no cache") == 0


def test_the_sweep_cache_keeps_the_sweeps_read_last_under_its_size(tmp_path, monkeypatch):
    """A sweep read from the disk cache is marked used; pruning removes the others first, and
    never a file another process is still writing."""
    import json
    import os

    from dmlimits import search
    from dmlimits.core import scenario as sc

    folder = tmp_path / "sweeps"
    monkeypatch.setenv(search.CACHE_ENV, str(folder))
    assert search.cache_dir() == folder
    scn = sc.resolve("h100-infinite-network-low-latency")
    search.forget(scn)
    swept = search.sweep(scn)
    path = search.cache_path(scn)
    size = path.stat().st_size
    (folder / "old.json").write_bytes(b"x" * size)
    (folder / ".tmp-writing.json").write_bytes(b"x" * size)
    for name in (path.name, "old.json"):
        os.utime(folder / name, ns=(10**18,) * 2)
    search.forget(scn)
    again = search.sweep(scn)  # read from the disk, marked used now
    assert json.dumps(again) == json.dumps(swept)  # NaN where infeasible: compared as text
    assert build.prune_sweep_cache(folder, limit=size) == 1
    assert sorted(p.name for p in folder.iterdir()) == sorted([path.name, ".tmp-writing.json"])
    assert build.prune_sweep_cache(None) == 0
    monkeypatch.setenv(search.CACHE_ENV, "off")
    assert search.cache_dir() is None


def test_a_cached_notebook_keeps_its_last_measured_time(tmp_path):
    build.remember_seconds(tmp_path, [build.Timing("notebooks/a", 7.0)])
    build.remember_seconds(tmp_path, [build.Timing("notebooks/a", 0.0, cached=True),
                                      build.Timing("notebooks/b", 2.0)])  # fmt: skip
    assert build.schedule(["notebooks/b", "notebooks/a"], tmp_path) == [
        "notebooks/a", "notebooks/b"]  # fmt: skip


def test_an_interrupted_build_starts_no_kernel_and_stops_late_children(tmp_path):
    """A child that appears after the first look (a worker thread starting a kernel as the
    signal came) is stopped too, and the kernel manager refuses to start a kernel once the
    build is stopping."""
    import asyncio
    import subprocess
    import sys
    import threading

    late: list[subprocess.Popen] = []

    def start_late() -> None:
        late.append(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]))

    early = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    timer = threading.Timer(0.15, start_late)
    timer.start()
    try:
        assert build.stop_children(grace=0.5, settle=0.4) == 2
        timer.join()
        assert early.poll() is not None and late and late[0].poll() is not None
        manager = build.ipc_kernel_manager(tmp_path)()
        with pytest.raises(RuntimeError, match="interrupted"):
            asyncio.run(manager._launch_kernel(["true"]))
    finally:
        build.STOPPING.clear()
        for p in [early, *late]:
            p.kill()
            p.wait()


# --- Sphinx's kept state (issue #16) ------------------------------------------------------------
def _tree(folder, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text)


def test_sync_writes_only_what_differs_and_removes_what_is_gone(tmp_path):
    import os

    stage, src = tmp_path / "stage", tmp_path / "src"
    _tree(stage, {"_toc.yml": "toc", "notebooks/a.ipynb": "new a", "notebooks/b.ipynb": "b"})
    _tree(stage, {"_build/html/x.html": "the stage's own build", "_executed/a.ipynb": "copy"})
    _tree(src, {"_toc.yml": "toc", "notebooks/a.ipynb": "old a", "notebooks/gone.ipynb": "g"})
    _tree(src, {"_build/.doctrees/a.doctree": "state", ".jupyter_cache/x": "tool's"})
    old = 1_000_000_000_000_000_000
    for p in src.rglob("*"):
        os.utime(p, ns=(old, old))
    assert build.sync_tree(stage, src) == (2, [])  # a changed, b new; _toc.yml the same bytes
    assert (src / "notebooks" / "a.ipynb").read_text() == "new a"
    assert (src / "notebooks" / "a.ipynb").stat().st_mtime_ns > old  # Sphinx sees it changed
    assert (src / "_toc.yml").stat().st_mtime_ns == old  # ...and not this one
    assert not (src / "notebooks" / "gone.ipynb").exists()
    assert (src / "_build" / ".doctrees" / "a.doctree").is_file()
    assert (src / ".jupyter_cache" / "x").is_file()
    assert not (src / "_build" / "html").exists() and not (src / "_executed").exists()
    assert build.sync_tree(stage, src) == (0, [])


def _execution(params: dict, *, shown: bool = False, output: str = "2.0e28") -> str:
    """A chapter's execution as the build stages it (papermill's injected cell hidden)."""
    injected = {
        "cell_type": "code",
        "source": f"scenario = {params!r}",
        "outputs": [],
        "metadata": {"tags": ["injected-parameters"] + ([] if shown else ["remove-cell"])},
    }
    body = {
        "cell_type": "code",
        "source": "glue('x', x)",
        "metadata": {},
        "outputs": [{"output_type": "display_data", "data": {"text/plain": output}}],
    }
    meta = {"kernelspec": {"name": "python3"}, "papermill": {"parameters": params},
            "dmlimits": {"reused": {"reads": []}}}  # fmt: skip
    return json.dumps({"cells": [injected, body], "metadata": meta, "nbformat": 4,
                       "nbformat_minor": 5})  # fmt: skip


def test_an_execution_copied_for_another_scenario_makes_the_same_page():
    """Only what the page does not show may differ: the injected parameters (hidden) and the
    metadata that records them; an output, a shown parameters cell or another key may not."""
    a = _execution({"scenario": "h100"}).encode()
    assert build.same_page(a, _execution({"scenario": "h100", "months": 6}).encode())
    assert not build.same_page(a, _execution({"scenario": "h100"}, output="2.1e28").encode())
    shown = _execution({"scenario": "h100"}, shown=True).encode()
    assert not build.same_page(shown, _execution({"scenario": "a100"}, shown=True).encode())
    other = json.loads(a)
    other["metadata"]["kernelspec"] = {"name": "python2"}
    assert not build.same_page(a, json.dumps(other).encode())
    assert not build.same_page(b"not a notebook", b"not a notebook either")


def test_sync_leaves_a_chapter_that_makes_the_same_page_unread(tmp_path):
    """Sphinx sees no change to a chapter copied for another scenario (its kept source keeps
    its old time); the build is told, to put the new bytes beside the page."""
    import os

    stage, src = tmp_path / "stage", tmp_path / "src"
    _tree(stage, {"notebooks/a.ipynb": _execution({"months": 6}),
                  "notebooks/b.ipynb": _execution({"months": 6}, output="9")})  # fmt: skip
    _tree(src, {"notebooks/a.ipynb": _execution({"months": 3}),
                "notebooks/b.ipynb": _execution({"months": 3})})  # fmt: skip
    old = 1_000_000_000_000_000_000
    for p in src.rglob("*"):
        os.utime(p, ns=(old, old))
    assert build.sync_tree(stage, src) == (1, [Path("notebooks/a.ipynb")])
    assert (src / "notebooks" / "a.ipynb").stat().st_mtime_ns == old
    assert (src / "notebooks" / "b.ipynb").read_bytes() == (
        stage / "notebooks/b.ipynb"
    ).read_bytes()


def test_a_states_key_is_the_sources_not_the_chapters_outputs(tmp_path, monkeypatch):
    root, stage = tmp_path / "root", tmp_path / "stage"
    _tree(root, {"notebooks/a.md": "# A", "requirements.txt": "x==1"})
    _tree(stage, {"_config.yml": "c", "book/p.md": "p", "notebooks/a.ipynb": "out"})
    key = build.sphinx_key(root, stage, ["notebooks/a"])
    (stage / "notebooks" / "a.ipynb").write_text("other outputs")
    assert build.sphinx_key(root, stage, ["notebooks/a"]) == key
    for folder, rel in [(stage, "_config.yml"), (stage, "book/p.md"), (root, "notebooks/a.md")]:
        before = (folder / rel).read_text()
        (folder / rel).write_text(before + " changed")
        assert build.sphinx_key(root, stage, ["notebooks/a"]) != key, rel
        (folder / rel).write_text(before)
    from dmlimits import search

    monkeypatch.setattr(search, "library_fingerprint", lambda: "another library")
    assert build.sphinx_key(root, stage, ["notebooks/a"]) != key


def test_a_state_is_used_only_as_a_successful_build_left_it(tmp_path, monkeypatch):
    import fcntl

    monkeypatch.setattr(build, "SPHINX_KEEP", 2)
    cache = tmp_path / "sphinx"
    with build.sphinx_state(cache, "k1") as folder:
        _tree(folder / "src", {"_build/html/index.html": "built"})
        (folder / build.SUCCEEDED).touch()
    with build.sphinx_state(cache, "k1") as folder:  # succeeded: kept as it was
        assert (folder / "src" / "_build" / "html" / "index.html").is_file()
        assert not (folder / build.SUCCEEDED).exists()  # until this build succeeds too; it fails
    with build.sphinx_state(cache, "k1") as folder:  # ...so nothing of it is used
        assert not (folder / "src" / "_build").exists()
        (folder / build.SUCCEEDED).touch()
    with (cache / ".k1.lock").open("a+") as held:  # another build holds it
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with build.sphinx_state(cache, "k1") as folder:
            assert folder is None
    import time

    for key in ("k2", "k3"):
        time.sleep(0.01)
        with build.sphinx_state(cache, key) as folder:
            (folder / build.SUCCEEDED).touch()
    with build.sphinx_state(cache, "failed"):
        pass  # no ok: removed when the states are pruned
    assert sorted(p.name for p in cache.iterdir() if p.is_dir()) == ["k2", "k3"]


def test_pages_leave_out_images_no_page_shows(tmp_path):
    html, out = tmp_path / "html", tmp_path / "out"
    _tree(html, {"notebooks/a.html": '<img src="../_images/new.png">', "index.html": "x"})
    _tree(html, {"_images/new.png": "n", "_images/old.png": "o", "_static/s.css": "s"})
    build.copy_pages(html, out)
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()) == [
        "_images/new.png", "_static/s.css", "index.html", "notebooks/a.html"
    ]  # fmt: skip


def test_the_html_runner_keeps_jupyter_books_exit_code_and_output(tmp_path):
    """``python -m dmlimits.build.jupyter_book_run`` is ``jupyter-book`` with a quick exit: the same
    exit code as the command's own executable, and what it printed flushed before the process
    ends, whether the command succeeds, refuses its arguments or raises."""
    import subprocess
    import sys
    from pathlib import Path

    exe = Path(sys.executable).parent / "jupyter-book"
    for args, code, shown in [
        (["--version"], 0, "Jupyter Book"),
        (["build", str(tmp_path), "--no-such-option"], 2, "No such option"),
        (["build", str(tmp_path)], 1, "Couldn't find a Table of Contents file"),  # raises
    ]:
        ours, theirs = (
            subprocess.run([*cmd, *args], capture_output=True, text=True, cwd=tmp_path)
            for cmd in ([sys.executable, "-m", "dmlimits.build.jupyter_book_run"], [str(exe)])
        )
        assert ours.returncode == theirs.returncode == code, (args, ours, theirs)
        assert shown in ours.stdout + ours.stderr, (args, ours)
        assert ours.stdout == theirs.stdout, (args, ours.stdout, theirs.stdout)


def test_the_preloaded_html_runner_runs_the_command_it_is_sent(tmp_path):
    """Started with ``--preload`` (as a build starts it while the chapters run), the runner
    imports first, then runs the command it reads on its standard input as it runs one on its
    command line: same exit code, same output.  At the end of input it runs nothing."""
    import json
    import subprocess
    import sys

    config = build.project_root() / "_config.yml"
    preloaded = [sys.executable, "-m", "dmlimits.build.jupyter_book_run", "--preload", str(config)]
    for args in (["--version"], ["build", str(tmp_path), "--no-such-option"],
                 ["build", str(tmp_path)]):  # fmt: skip
        direct = subprocess.run(
            [sys.executable, "-m", "dmlimits.build.jupyter_book_run", *args],
            capture_output=True, text=True, cwd=tmp_path,
        )  # fmt: skip
        sent = subprocess.run(
            preloaded, input=json.dumps({"argv": args, "cwd": str(tmp_path)}) + "\n",
            capture_output=True, text=True, cwd=config.parent,
        )  # fmt: skip
        assert sent.returncode == direct.returncode != None, (args, sent, direct)  # noqa: E711
        assert sent.stdout == direct.stdout, (args, sent.stdout, direct.stdout)
    idle = subprocess.run(preloaded, input="", capture_output=True, text=True)
    assert (idle.returncode, idle.stdout) == (0, "")


@pytest.mark.parametrize("library", [True, False])
def test_the_html_runner_preloads_sphinx_its_extensions_and_the_library_if_asked(library):
    import json
    import subprocess
    import sys

    config = build.project_root() / "_config.yml"
    probe = (
        "import json, sys\nfrom pathlib import Path\nfrom dmlimits.build import jupyter_book_run\n"
        f"jupyter_book_run.preload(Path({str(config)!r}), {library})\n"
        # pybtex's plugins were read: looking one up reads no distribution's entry points.
        "import importlib.metadata, importlib_metadata, pybtex.plugin\n"
        "def unread(*a, **k):\n    raise AssertionError('entry points read again')\n"
        "importlib.metadata.distributions = importlib_metadata.distributions = unread\n"
        "assert len(pybtex.plugin.entry_points(group='pybtex.style.formatting')) > 0\n"
        "print(json.dumps(sorted(sys.modules)))"
    )
    loaded = set(json.loads(subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout))  # fmt: skip
    extensions = {"sphinx.application", "myst_nb", "sphinx_book_theme", "dmlimits.build.sphinxext"}
    assert extensions <= loaded
    # What the extensions' setup functions import, before Sphinx calls them.
    assert set(jupyter_book_run.SETUP_IMPORTS) <= loaded
    # Only what the API page's autodoc would import, and only when asked.
    assert ("dmlimits.search" in loaded) is library
    assert ("dmlimits.measured.runs" in loaded) is library


def test_the_api_reference_is_preloaded_for_exactly_the_builds_that_read_every_page(
    tmp_path, monkeypatch
):
    """The HTML process imports the library ahead only when Sphinx will read the API reference:
    no kept Sphinx state for these sources (or none kept at all).  A kept state has Sphinx read
    only the chapters whose outputs changed, and the import would be wasted."""
    monkeypatch.setattr(build, "sphinx_key", lambda root, stage, names: "k")
    monkeypatch.setenv(build.SPHINX_CACHE_ENV, str(tmp_path / "states"))
    assert build.reads_every_page(tmp_path, tmp_path, [])
    (tmp_path / "states" / "k" / "src" / "_build" / "html").mkdir(parents=True)
    assert build.reads_every_page(tmp_path, tmp_path, [])  # a build that did not succeed
    (tmp_path / "states" / "k" / build.SUCCEEDED).touch()
    assert not build.reads_every_page(tmp_path, tmp_path, [])
    monkeypatch.setenv(build.SPHINX_CACHE_ENV, "off")
    assert build.reads_every_page(tmp_path, tmp_path, [])


def test_the_html_runner_turns_the_collector_off_while_the_command_runs(monkeypatch):
    """Jupyter Book's command runs with Python's cyclic garbage collector off (Sphinx's
    long-lived heap was scanned again at each full pass); the caller gets it back as it was,
    whether the command succeeds or fails."""
    import gc
    import sys
    import types

    seen = []

    class Command:
        @staticmethod
        def main(args, prog_name):
            seen.append(gc.isenabled())
            raise SystemExit(0 if args == ["ok"] else 3)

    # Jupyter Book's command line as the runner imports it (the real one is run elsewhere).
    fake = types.ModuleType("jupyter_book.cli.main")
    fake.main = Command
    monkeypatch.setitem(sys.modules, "jupyter_book.cli.main", fake)
    assert gc.isenabled()
    assert jupyter_book_run.main(["ok"]) == 0
    assert jupyter_book_run.main(["fail"]) == 3
    assert seen == [False, False] and gc.isenabled()


def test_the_closed_forms_are_built_and_kept_beside_the_sweeps(tmp_path, monkeypatch):
    """start_keeping_closed_forms builds, in a process of its own, the model's closed forms for each
    sparsity and batch law of the scenarios (what the chapters read and the search does not
    build), and keeps them where the chapters' kernels read them; nothing is started when they
    are kept already, or when no formula is kept on disk."""
    from dmlimits.core import formula_cache
    from dmlimits.costs import model

    scns = [resolve("h100"), resolve("h100-sparse"), resolve("h100", ["batch.law=none"])]
    laws = [(False, "default"), (True, "default"), (False, "none")]
    monkeypatch.setenv(formula_cache.CACHE_ENV, "off")
    assert build.start_keeping_closed_forms(scns) is None
    model.exponents(False, "default")  # held by this process, kept nowhere: kept all the same
    monkeypatch.setenv(formula_cache.CACHE_ENV, str(tmp_path))
    assert not any(model.closed_forms_kept(*law) for law in laws)
    helper = build.start_keeping_closed_forms(scns)
    helper.join(timeout=600)
    assert helper.exitcode == 0
    assert all(model.closed_forms_kept(*law) for law in laws)
    assert not model.closed_forms_kept(True, "none")  # no scenario of that law
    keys = [json.loads(p.read_text()).get("key", "") for p in tmp_path.rglob("*.json")]
    for sparse, law in laws:  # and the numpy functions of each closed form
        assert any(k.startswith(f"lambdified model.closed_form {sparse} {law} ") for k in keys)
    assert build.start_keeping_closed_forms(scns) is None


def test_an_executed_notebook_is_checked_whole_and_strictly(tmp_path):
    """While chapters run, nbformat does not check each output as it arrives
    (outputs_checked_whole); the executed notebook is checked whole, and one that fails the
    check fails the build, naming the notebook (nbformat alone only logs it)."""
    import nbformat
    from nbformat.v4 import nbbase

    checked = nbbase.validate
    with build.outputs_checked_whole():
        assert nbbase.validate is not checked
        # The output a kernel message makes is built as before, without the check.
        out = nbformat.v4.output_from_msg(
            {"header": {"msg_type": "display_data"},
             "content": {"data": {"text/plain": "1"}, "metadata": {}}}
        )  # fmt: skip
        assert out == {"output_type": "display_data", "data": {"text/plain": "1"},
                       "metadata": {}}  # fmt: skip
        with pytest.raises(RuntimeError), build.outputs_checked_whole():
            raise RuntimeError("a chapter failed")
        assert nbbase.validate is not checked  # the inner one restored the outer's
    assert nbbase.validate is checked

    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("1", execution_count=1)
    cell.outputs = [nbformat.from_dict(
        {"output_type": "display_data", "data": {"text/plain": "1"}, "metadata": {}}
    )]  # fmt: skip
    nb.cells = [nbformat.v4.new_code_cell("x = 1", metadata={"tags": ["injected-parameters"]}),
                cell]  # fmt: skip
    path = tmp_path / "chapter.ipynb"
    nbformat.write(nb, path)
    build.hide_injected_parameters(path)
    assert nbformat.read(path, as_version=4).cells[0].metadata.tags == [
        "injected-parameters", "remove-cell"
    ]  # fmt: skip
    cell.outputs[0]["output_type"] = "display"  # no such output in the schema
    nbformat.write(nb, path)
    with pytest.raises(build.BuildError, match=r"chapter\.ipynb is not a valid notebook"):
        build.hide_injected_parameters(path)


def test_a_chapter_that_writes_to_stderr_is_named_in_the_progress(tmp_path):
    """The executed notebook's stderr is returned with it, and the chapter's progress line
    names it with the start of what it wrote (one line each, cut at 240 characters)."""
    import nbformat

    nb = nbformat.v4.new_notebook()
    warned = nbformat.v4.new_code_cell("np.log(-1.0)", execution_count=1)
    warned.outputs = [
        nbformat.v4.new_output("stream", name="stderr", text="x.py:3: RuntimeWarning: invalid\n"),
        nbformat.v4.new_output("stream", name="stdout", text="fine\n"),
    ]
    nb.cells = [warned]
    path = tmp_path / "chapter.ipynb"
    nbformat.write(nb, path)
    found = build.hide_injected_parameters(path)
    assert found == ("x.py:3: RuntimeWarning: invalid\n",)
    line = build.Timing("notebooks/x", 1.24, stderr=(*found, "y" * 500)).finished_line(3, 7)
    head, first, second = line.split("\n")
    assert head == "[3/7] notebooks/x.md  1.2 s"
    assert first == "      notebooks/x.md wrote to stderr: x.py:3: RuntimeWarning: invalid"
    assert second.endswith("y" * 239 + "…") and len(second) < 300
    assert build.Timing("notebooks/x", 1.24).finished_line(3, 7) == head


def test_the_chapters_run_with_each_output_unchecked_until_the_notebook_is_whole(
    tmp_path, monkeypatch
):
    """execute_notebooks runs every chapter inside outputs_checked_whole, and leaves
    nbformat's check of each output as it found it."""
    from nbformat.v4 import nbbase

    myst = "---\njupytext:\n  text_representation:\n    format_name: myst\n---\n"
    (tmp_path / "chapter.md").write_text(myst + "\n```{code-cell}\n1\n```\n")
    seen: list[bool] = []

    def execute(root, stage, name, *args, **kwargs):
        seen.append(nbbase.validate is build.not_checked_yet)
        return build.Timing(name, 0.0)

    monkeypatch.setattr(build, "execute_one", execute)
    monkeypatch.setenv(build.NOTEBOOK_CACHE_ENV, "off")
    build.execute_notebooks(tmp_path, tmp_path / "stage", ["chapter"], {}, 1, forks=None)
    assert seen == [True]
    assert nbbase.validate is not build.not_checked_yet
