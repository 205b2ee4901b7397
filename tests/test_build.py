"""Whole builds: a changed assumption reaches the chapter; bad input and failing notebooks
leave the previous book exactly as it was."""

import hashlib
import json
import shutil
from pathlib import Path

import pytest
import yaml
from conftest import BUILD, EXECUTED, HTML, ROOT, run_cli, toc_notebooks
from dmlimits.book.glue import read_glued
from dmlimits.build.engine import NOTEBOOK_CACHE_ENV, REPOSITORY_ENV, SPHINX_CACHE_ENV, stream_texts
from dmlimits.core import published
from dmlimits.core.scenario import resolve
from dmlimits.costs import model

pytestmark = pytest.mark.slow


def snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def digest(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` and the SHA-256 of its bytes."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


CHANGED = {  # a scenario file that changes the GPU, the run's length and the batch law's anchor
    "name": "test-a100-longer",
    "description": "The test suite's changed scenario: A100s, a longer run, a bigger anchor batch.",
    "gpu": "a100",
    "training": {"months": 2 * resolve("h100")["training.months"]},
    "batch": {"anchor_tokens": 2 * resolve("h100")["batch.anchor_tokens"]},
}


REPOSITORY = "https://github.com/example-owner/data-movement-limits"


#: The chapters that read nothing of the scenario: the notation, the
#: chapters on measured runs and their appendix (which model the clusters the runs were
#: measured on).
SCENARIO_FREE = {"notebooks/notation", "notebooks/diminishing_returns",
                 "notebooks/real_runs", "notebooks/appendix_measured"}  # fmt: skip


def _seed(cache: Path) -> set[str]:
    """Copy into ``cache`` the default book's executions of the chapters that read nothing of
    the scenario, with what they read; return those chapters."""
    from dmlimits.build import chapter_reads
    from dmlimits.build import engine as build

    project = build.notebook_cache_dir(BUILD)
    seeded = set()
    for name in build.toc_notebooks(ROOT):
        key = build.source_key(ROOT, name)
        entries = chapter_reads.kept_entries(project, key)
        free = [e for e in entries if e["reads"] == {}]
        if free:
            seeded.add(name)
            (cache / chapter_reads.FOLDER).mkdir(exist_ok=True)
            (cache / chapter_reads.FOLDER / f"{key}.json").write_text(json.dumps(free[-1:]))
            shutil.copy(project / f"{free[-1]['key']}.ipynb", cache)
    return seeded


@pytest.fixture(scope="module")
def changed_build(tmp_path_factory, built_book):
    """The whole book built from a scenario file, into its own folder under _build/scenarios,
    as a reader re-runs it: its chapters' pages are written from the Sphinx state that the
    default book's build left (only the chapters are read again); the default book (HTML and
    executed notebooks) must be byte-identical before and after."""
    spec = tmp_path_factory.mktemp("scenario") / "changed.yaml"
    spec.write_text(yaml.safe_dump(CHANGED))
    scn = resolve(str(spec))
    out = ROOT / "_build" / "scenarios" / scn.slug / "html"
    shutil.rmtree(out.parent, ignore_errors=True)
    before = digest(BUILD / "html"), digest(EXECUTED)
    # Its notebooks are cached in a folder of its own that holds, at first, only what the
    # default book's chapters read: every chapter that reads an assumption runs, and the ones
    # that read none of the scenario are copied.  A cold build of another scenario sweeps
    # every scenario its chapters read: allow for a loaded two-core machine (the timeout only
    # guards against a hang).
    cache = tmp_path_factory.mktemp("notebook-cache")
    copied = _seed(cache)
    env = {NOTEBOOK_CACHE_ENV: str(cache)}
    proc = run_cli("build", "--scenario", str(spec), env=env, timeout=1800)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert copied == SCENARIO_FREE, copied
    assert f"{len(copied)} of them executed for another scenario" in proc.stdout, proc.stdout
    # From the state the default book's build left (make builds it before the tests), whose
    # chapters' outputs differ from these: on a fresh clone every chapter is read again.
    assert "Sphinx's kept state:" in proc.stdout, (
        "the default book's Sphinx state was not there to build from:\n" + proc.stdout
    )
    assert (digest(BUILD / "html"), digest(EXECUTED)) == before, "the default book changed"
    assert (out / "index.html").is_file(), f"not built where expected: {out}"
    yield out, scn, proc, spec, env
    shutil.rmtree(out.parent, ignore_errors=True)


def test_a_rebuild_reads_every_notebook_from_the_cache(changed_build, tmp_path):
    """The same scenario built again with the same notebook cache executes no notebook and
    gives the same executed notebooks, byte for byte; and, with Sphinx's kept state off (every
    page read and written), the same book, file for file and byte for byte, as the changed
    build wrote from the default book's state."""
    out, _, _, spec, env = changed_build
    again = tmp_path / "html"
    env = {**env, SPHINX_CACHE_ENV: "off"}
    proc = run_cli("build", "--scenario", str(spec), "--output", str(again), env=env, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    n = len(toc_notebooks())
    assert f"executing 0 of {n} notebook(s)" in proc.stdout and f"{n} unchanged" in proc.stdout
    assert "--all -W -n --keep-going" in proc.stdout  # every page
    assert digest(again.parent / "executed") == digest(out.parent / "executed")
    built, rebuilt = digest(out), digest(again)
    assert any(p.endswith(".html") for p in built) and any("_images/" in p for p in built)
    assert built.keys() == rebuilt.keys()
    assert [p for p in built if built[p] != rebuilt[p]] == []


@pytest.fixture(scope="module")
def repository_build(changed_build, tmp_path_factory):
    """The changed scenario built as the publishing workflow builds, told the repository's URL
    (launch buttons on); its notebooks come from the changed build's cache, and its Sphinx
    state is a folder of its own (another configuration, so every page is written)."""
    _, _, _, spec, env = changed_build
    out = tmp_path_factory.mktemp("published") / "html"
    env = {**env, REPOSITORY_ENV: REPOSITORY, SPHINX_CACHE_ENV: str(out.parent / "sphinx")}
    proc = run_cli("build", "--scenario", str(spec), "--output", str(out), env=env, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out, proc


def _stderr_of(folder: Path) -> list[str]:
    """What each executed chapter in ``folder`` wrote to stderr (a warning, say)."""
    import nbformat

    return [
        f"{path.name}: {text.strip()[:300]}"
        for path in sorted(folder.glob("*.ipynb"))
        for text in stream_texts(nbformat.read(path, as_version=4), "stderr")
    ]


def test_no_chapter_writes_to_stderr(changed_build):
    """A warning in a chapter (numpy's invalid value, say) is a number the chapter did not
    check: the page hides it with the cell, but a reader re-running the notebook sees it.
    Neither the default book nor the changed scenario's writes any."""
    out = changed_build[0]
    assert _stderr_of(EXECUTED) == []
    assert _stderr_of(out.parent / "executed") == []


def test_build_reports_progress_and_timings(changed_build):
    proc = changed_build[2]
    n = len(toc_notebooks()) - len(SCENARIO_FREE)
    assert f"[{n}/{n}]" in proc.stdout and "timings:" in proc.stdout and "total" in proc.stdout


def test_changed_assumptions_change_the_chapters_numbers(changed_build):
    out, scn = changed_build[:2]
    old = read_glued(EXECUTED / "model.ipynb")
    new = read_glued(out.parent / "executed" / "model.ipynb")
    # The values that depend on the changed assumptions moved, to what the library computes...
    assert new["months"] == scn["training.months"] != old["months"]
    slow = model.budget_at(scn, published.value("paper1.post_slowdown_flop"))
    assert new["slow_step_budget"] == slow["step_budget"] * 1e3
    assert new["slow_step_budget"] != old["slow_step_budget"]
    assert new["first_batch"] == float(model.shapes(scn).batch[0]) != old["first_batch"]
    assert new["batch_anchor_tokens"] == scn["batch.anchor_tokens"]
    # ...and the ones that do not depend on them stayed.
    for key in ("grid_c_max", "first_layers", "alpha.layers", "alpha.batch_per_layer"):
        assert new[key] == old[key], key


def test_changed_assumptions_reach_the_whole_run_chapters(changed_build):
    """The search, reproduction and closed-form chapters move with the assumptions, to the
    library's values for the changed scenario."""
    from dmlimits import search
    from dmlimits.costs import closed_forms

    out, scn = changed_build[:2]
    head = search.headline(scn)
    for name, key, value in [
        ("search", "linear_end", head["linear_scaling_end_flop"]),
        ("reproduction", "last_feasible", head["last_feasible_flop"]),
        ("closed_forms", "t_crit", closed_forms.values(scn)["t_crit_flop"]),
        ("closed_forms", "t_limit", closed_forms.values(scn)["t_limit_flop"]),
    ]:
        old = read_glued(EXECUTED / f"{name}.ipynb")[key]
        new = read_glued(out.parent / "executed" / f"{name}.ipynb")[key]
        assert new == value != old, (name, key, old, new)
    for name, key in [("reproduction", "fig_headline"), ("closed_forms", "fig_sensitivity")]:
        assert _figure(out.parent / "executed" / f"{name}.ipynb", key) != _figure(
            EXECUTED / f"{name}.ipynb", key
        )


def _figure(notebook: Path, key: str) -> bytes:
    import json

    nb = json.loads(notebook.read_text())
    for cell in nb["cells"]:
        for out in cell.get("outputs", []):
            if out.get("metadata", {}).get("scrapbook", {}).get("name") == key:
                prefix = out["metadata"]["scrapbook"]["mime_prefix"]
                return out["data"][prefix + "image/png"].encode()
    raise KeyError(key)


@pytest.mark.parametrize("key", ["fig_budget", "fig_batch"])
def test_changed_assumptions_change_the_figures(changed_build, key):
    out = changed_build[0]
    assert _figure(out.parent / "executed" / "model.ipynb", key) != _figure(
        EXECUTED / "model.ipynb", key
    )


def test_changed_build_html_shows_the_new_values(changed_build):
    out, scn = changed_build[:2]
    text = (out / "notebooks" / "model.html").read_text()
    assert f'<span class="pasted-text">{scn["training.months"]:g}</span>-month run' in text
    assert (
        yaml.safe_load((out.parent / "executed" / "scenario.yaml").read_text())["training.months"]
        == scn["training.months"]
    )


def test_assumptions_page_shows_what_differs(changed_build):
    from dmlimits.book import assumptions

    out, scn = changed_build[:2]
    changed = (out / "notebooks" / "assumptions.html").read_text()
    default = (HTML / "notebooks" / "assumptions.html").read_text()
    rows = [r for r in assumptions.table(scn) if r["changed"]]
    a100 = resolve("a100").differences(resolve("h100"))
    assert {r["key"] for r in rows} == {"training.months", "batch.anchor_tokens", *a100}
    for row in rows:
        assert f"<strong>{row['value']}</strong>" in changed
    assert "built with the default scenario" in default
    assert "built with the default scenario" not in changed


def test_a_known_repository_shows_the_launch_and_repository_buttons(repository_build):
    """Issue #15: with the repository's URL (as the publishing workflow sets it), every chapter
    has a Binder launch button that opens its MyST source, and the repository button; the
    default book, built without it, has neither."""
    out, proc = repository_build
    assert f"launch buttons on, for {REPOSITORY}" in proc.stdout
    html = (out / "notebooks" / "model.html").read_text()
    assert "mybinder.org/v2/gh/example-owner/data-movement-limits/main" in html
    assert "notebooks/model.md" in html.split("mybinder.org", 1)[1][:400]
    assert f'href="{REPOSITORY}"' in html
    assert "colab.research.google.com" not in html
    default = (HTML / "notebooks" / "model.html").read_text()
    assert "mybinder.org" not in default and REPOSITORY not in default
