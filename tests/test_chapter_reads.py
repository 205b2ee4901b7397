"""A chapter that read none of the changed assumptions is copied, not executed (issue #16):
what a kernel lists as read, which chapters may be copied, and that a copy is what executing
the chapter again gives."""

import copy
import json
import pickle
import shutil
import tempfile
import textwrap
from pathlib import Path

import jupytext
import nbformat
import pytest
from conftest import ROOT
from dmlimits.book.glue import read_glued
from dmlimits.build import chapter_reads
from dmlimits.build import engine as build
from dmlimits.build.reads import ALL_READ, read_keys, record
from dmlimits.core import scenario as sc


@pytest.fixture
def reads(tmp_path):
    """Record what this process reads into a fresh file; stop recording afterwards."""
    path = tmp_path / "reads"

    def listed() -> set[str]:  # what was read since the last call
        found = read_keys(path)
        path.unlink(missing_ok=True)
        record(str(path))
        return found

    record(str(path))
    yield listed
    record(None)


def test_a_scenario_lists_each_value_read_and_whole_reads(reads):
    scn = sc.resolve("h100", ["training.months=6"])
    assert reads() == set()  # resolving reads nothing the chapter could depend on
    scn["training.months"]
    scn.values.get("gpu")
    assert "network.latency" in scn.values
    assert reads() == {"training.months", "gpu", "network.latency"}
    assert scn.peak_flops > 0
    assert reads() >= {"hardware.sms", "hardware.max_clock"}
    for whole in (
        lambda v: dict(v), lambda v: {**v}, lambda v: json.dumps(v), lambda v: pickle.dumps(v),
        lambda v: copy.deepcopy(v), lambda v: list(v), lambda v: sorted(v.items()),
        lambda v: v == {}, lambda v: repr(v),
    ):  # fmt: skip
        whole(scn.values)
        assert reads() == {ALL_READ}
    assert scn.overrides
    assert reads() == {"@overrides"}
    # The name resolve made from the preset and the overrides reads what it was made from; a
    # name given (as the build gives its chapters) is the name.
    assert scn.name.startswith("h100+training.months=6")
    assert reads() == {ALL_READ}
    assert sc.resolve("h100", ["training.months=6"], name="mine").name == "mine"
    assert reads() == {"@name"}
    # A variant made from it read every value it copied.
    other = sc.resolve_overrides(scn, {"network.latency": 1e-6})
    assert ALL_READ in reads()
    other["network.latency"]
    assert reads() == {"network.latency"}


def test_nothing_is_watched_unless_recording(reads, tmp_path):
    with sc.unwatched():  # a preset the library reads as published
        scn = sc.resolve("h100")
    assert scn["gpu"] and reads() == set()
    record(None)
    scn = sc.resolve("h100")
    assert type(scn) is sc.Scenario and type(scn.values) is dict
    # A process that did not record says so; one that read nothing lists nothing; a second
    # process recording into the same file (a worker) adds to the list, never truncates it.
    assert read_keys(tmp_path / "none") is None
    record(str(tmp_path / "empty"))
    assert read_keys(tmp_path / "empty") == set()
    sc.resolve("h100")["gpu"]
    record(str(tmp_path / "empty"))
    assert read_keys(tmp_path / "empty") == {"gpu"}


def _cells(*sources: str, params: str = 'scenario = "h100"\noverrides = {}\nscenario_name = None'):
    cells = [nbformat.v4.new_code_cell(params)]
    cells[0].metadata["tags"] = ["parameters"]
    return cells + [nbformat.v4.new_code_cell(textwrap.dedent(s)) for s in sources]


def test_which_chapters_may_be_copied():
    ok = "scn = sc.resolve(scenario, overrides={**overrides, 'x': 2}, name=scenario_name)"
    assert chapter_reads.reads_only_through_the_scenario(_cells(ok)) is None
    for sources, why in [
        ((ok, "print(overrides)"), "code cell 2 reads the parameter overrides (line 1)"),
        (("x = resolve(scenario)",), "reads the parameter scenario"),
        (("%matplotlib inline",), "code cell 1 is not plain Python"),
    ]:
        assert why in chapter_reads.reads_only_through_the_scenario(_cells(*sources))
    extra = chapter_reads.reads_only_through_the_scenario(_cells(ok, params="scenario = 1\nx = 2"))
    assert "besides the scenario (x)" in extra
    # Every chapter of the book but the assumptions page (which prints its own parameters).
    refused = {
        n for n in build.toc_notebooks(ROOT)
        if chapter_reads.reads_only_through_the_scenario(
            jupytext.read(ROOT / f"{n}.md", fmt="md:myst").cells) is not None
    }  # fmt: skip
    assert refused == {"notebooks/assumptions"}


def test_an_execution_serves_only_scenarios_that_agree_on_what_it_read(tmp_path):
    cache = tmp_path
    (cache / "k1.ipynb").write_text("{}")
    h100 = sc.resolve("h100")
    assert chapter_reads.remember(cache, "src", "k1", h100, {"gpu", "hardware.sms", "@name"})
    same = sc.resolve("h100", ["training.months=6"], name="h100")
    assert chapter_reads.reusable(cache, "src", same) == ("k1", ["@name", "gpu", "hardware.sms"])
    assert chapter_reads.reusable(cache, "other source", same) is None
    for differs in (
        sc.resolve("h100", ["training.months=6"]),  # another name
        sc.resolve("h100", ["hardware.sms=100"], name="h100"),
        sc.resolve("a100", name="h100"),
    ):
        assert chapter_reads.reusable(cache, "src", differs) is None
    # A value of another type is another value (6 is not 6.0 on a page).
    assert chapter_reads.read_value(h100, "hardware.sms") != json.dumps(float(h100["hardware.sms"]))
    # Nothing is remembered of an execution that read everything or did not record, and an
    # execution no longer in the cache is not offered.
    assert not chapter_reads.remember(cache, "src2", "k1", h100, {ALL_READ, "gpu"})
    assert not chapter_reads.remember(cache, "src2", "k1", h100, None)
    assert not chapter_reads.remember(cache, "src2", "k1", h100, {"gpu", "@description"})
    # One that read nothing of the scenario serves every scenario.
    assert chapter_reads.remember(cache, "src3", "k1", h100, set())
    assert chapter_reads.reusable(cache, "src3", sc.resolve("v100")) == ("k1", [])
    (cache / "k1.ipynb").unlink()
    assert chapter_reads.reusable(cache, "src", same) is None
    for i in range(chapter_reads.KEEP + 3):
        chapter_reads.remember(cache, "src", f"k{i}", h100, {"gpu"})
    assert len(chapter_reads.kept_entries(cache, "src")) == chapter_reads.KEEP


TOY = """\
---
jupytext:
  text_representation:
    format_name: myst
kernelspec:
  name: python3
  display_name: Python 3
---
# Toy

```{code-cell} ipython3
:tags: [parameters]
scenario = "h100"
overrides = {}
scenario_name = None
```

```{code-cell} ipython3
from dmlimits.core import scenario as sc
from dmlimits.book.glue import glue
scn = sc.resolve(scenario, overrides=overrides, name=scenario_name)
glue("sms", scn["hardware.sms"])
READ
```
"""


@pytest.mark.slow
def test_chapters_run_side_by_side_leave_the_working_directory_alone(tmp_path, monkeypatch):
    """papermill enters each notebook's folder for the whole process and goes back to the one
    it found: with two chapters at once, the second went back to the folder the first had
    entered, and the build (a test, here) was left in the staged notebooks' folder."""
    root = tmp_path / "project"
    (root / "notebooks").mkdir(parents=True)
    (root / "requirements.txt").write_text("")
    names = [f"notebooks/toy{i}" for i in range(4)]
    for n in names:
        (root / f"{n}.md").write_text(TOY.replace("READ", "import time; time.sleep(0.3)"))
    monkeypatch.setenv(build.NOTEBOOK_CACHE_ENV, "off")
    here = Path.cwd()
    scn = sc.resolve("h100")
    build.execute_notebooks(root, tmp_path / "stage", names, build.notebook_parameters(scn), 2)
    assert Path.cwd() == here


@pytest.mark.slow
def test_a_build_copies_a_chapter_that_read_none_of_the_changes(tmp_path, monkeypatch):
    """Real kernels: a chapter reading the GPU's SMs is copied into a book with a longer run,
    with the new parameters injected, and executed again for another GPU; a chapter that reads
    its overrides itself is executed again every time."""
    root = tmp_path / "project"
    (root / "notebooks").mkdir(parents=True)
    (root / "requirements.txt").write_text("")
    (root / "notebooks" / "gpu.md").write_text(TOY.replace("READ", ""))
    (root / "notebooks" / "raw.md").write_text(TOY.replace("READ", "glue('o', len(overrides))"))
    monkeypatch.setenv(build.NOTEBOOK_CACHE_ENV, str(tmp_path / "cache"))
    names = ["notebooks/gpu", "notebooks/raw"]

    def run(*sets: str) -> tuple[set[str], dict]:
        scn = sc.resolve("h100", list(sets), name="toy")
        stage = tmp_path / f"stage{len(list(tmp_path.iterdir()))}"
        timings = build.execute_notebooks(
            root, stage, names, build.notebook_parameters(scn), 1, scn
        )
        nb = nbformat.read(stage / "notebooks" / "gpu.ipynb", as_version=4)
        return {t.notebook for t in timings if not t.cached}, nb

    assert run()[0] == set(names)
    executed, nb = run("training.months=6")
    assert executed == {"notebooks/raw"}
    injected = [c for c in nb.cells if "injected-parameters" in c.metadata.get("tags", [])]
    assert "'training.months': 6" in injected[0].source.replace('"', "'")
    assert nb.metadata["dmlimits"]["reused"]["reads"] == ["hardware.sms"]
    assert run("gpu=a100")[0] == set(names)


@pytest.mark.book
@pytest.mark.slow
def test_a_copied_chapter_is_what_executing_it_gives(tmp_path):
    """For a changed assumption (a longer run), every chapter of the default book that the build
    would copy is executed again; its glued values and figures equal the copy's."""
    scn = sc.resolve("h100", ["training.months=9"])
    cache = build.notebook_cache_dir(ROOT / "_build")
    copies = {}
    for n in build.toc_notebooks(ROOT):
        found = chapter_reads.reusable(cache, build.source_key(ROOT, n), scn)
        if found is not None:
            copies[n] = cache / f"{found[0]}.ipynb"
    # The chapters on one GPU's matmuls and on measured runs read nothing of the run's length.
    assert {"notebooks/matmul", "notebooks/real_runs"} <= set(copies), (
        f"copied: {sorted(copies)}; the default book's build (make book, with the cache of "
        f"executed notebooks on) lists what each chapter read in {cache}/reads"
    )
    params = build.notebook_parameters(scn)
    sockets = Path(tempfile.mkdtemp(prefix="dmlimits-kernels-"))  # a short path, as the build's
    try:
        for n, copied in copies.items():
            source = jupytext.read(ROOT / f"{n}.md", fmt="md:myst")
            build.execute_one(ROOT, tmp_path, n, build.parameters_for(source, params), sockets)
            fresh = tmp_path / f"{n}.ipynb"
            assert read_glued(fresh) == read_glued(copied), n
            assert _images(fresh) == _images(copied), n
    finally:
        shutil.rmtree(sockets, ignore_errors=True)


def _images(path) -> list[str]:
    nb = json.loads(path.read_text())
    return [
        out["data"][kind]
        for cell in nb["cells"]
        for out in cell.get("outputs", [])
        for kind in out.get("data", {})
        if kind.endswith("image/png")
    ]
