"""Whole builds that fail or are stopped: bad input, a failing notebook, signals, a second build
into the same folder and the stage a killed build leaves behind all leave the previous book as it
was; two builds give the same numbers and figures.  (Split from test_build.py so that, on several
cores, these run beside the changed-scenario build.)"""

import hashlib
import shutil
from pathlib import Path

import pytest
import yaml
from conftest import HTML, ROOT, run_cli

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


def stages() -> list[Path]:
    """Stages under _build that no running build owns (a stage is named after its build's
    process): what a failed or stopped build would leave behind.  A build that other tests run
    at the same time (on another core) owns its stage and is not counted."""
    import os

    def alive(stage: Path) -> bool:
        try:
            os.kill(int(stage.name.split("-")[1]), 0)
        except (ValueError, IndexError, ProcessLookupError):
            return False
        except PermissionError:
            return True
        return True

    return sorted(s for s in (ROOT / "_build").glob(".stage-*") if not alive(s))


@pytest.mark.parametrize(
    ("value", "key"),
    [
        ("no.such.key=1", "no.such.key"),
        ("network.inter_node.bandwidth=-5", "network.inter_node.bandwidth"),
        ("training.months=abc", "training.months"),
        ("network.latency=nan", "network.latency"),
        ("network.node_size=8.5", "network.node_size"),
    ],
)
def test_bad_set_exits_with_one_line_and_touches_nothing(built_book, value, key):
    before, staged = snapshot(HTML), stages()
    proc = run_cli("build", "--set", value)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and key in lines[0]
    assert proc.stdout == ""
    assert snapshot(HTML) == before and stages() == staged


def test_bad_scenario_file_touches_nothing(built_book, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("network: [\n")
    before = snapshot(HTML)
    for spec in (str(bad), str(tmp_path / "missing.yaml"), "h100-sparce"):
        proc = run_cli("build", "--scenario", spec)
        assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, spec
    assert snapshot(HTML) == before


@pytest.mark.parametrize(
    "url", ["github.com/owner/name", "https://example.org/just-one", "x", "https://h/o/r/extra"]
)
def test_a_bad_repository_url_is_refused_before_anything(built_book, url):
    before, staged = snapshot(HTML), stages()
    proc = run_cli("build", env={"DMLIMITS_REPOSITORY_URL": url})
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "DMLIMITS_REPOSITORY_URL" in lines[0] and url in lines[0]
    assert "expected https://HOST/OWNER/NAME" in lines[0]
    assert snapshot(HTML) == before and stages() == staged


def test_a_failing_notebook_fails_the_build_loudly(tmp_path):
    """A notebook that raises: exit 1, its cell and traceback printed, the previous book kept."""
    project = tmp_path / "project"
    project.mkdir()
    for item in ("_config.yml", "book", "notebooks"):
        src = ROOT / item
        (shutil.copytree if src.is_dir() else shutil.copy2)(src, project / item)
    # The book's first page and the broken chapter: what a failure does does not depend on how
    # many chapters ran before it, and executing all of them took minutes.
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    toc["parts"] = [{"caption": "Broken", "chapters": [{"file": "notebooks/broken"}]}]
    (project / "_toc.yml").write_text(yaml.safe_dump(toc))
    (project / "notebooks" / "broken.md").write_text(
        (ROOT / "notebooks" / "notation.md").read_text().split("```{code-cell}")[0]
        + "```{code-cell} ipython3\n:tags: [parameters]\nscenario = 'h100'\noverrides = {}\n```\n\n"
        "```{code-cell} ipython3\nraise RuntimeError('deliberately broken for the test')\n```\n"
    )
    previous = project / "_build" / "html"
    previous.mkdir(parents=True)
    (previous / "index.html").write_text("the previous book")
    before = snapshot(previous)
    proc = run_cli("build", cwd=project)
    assert proc.returncode == 1
    assert "notebook notebooks/broken.md failed" in proc.stderr
    assert "raise RuntimeError('deliberately broken for the test')" in proc.stderr
    assert "RuntimeError: deliberately broken for the test" in proc.stderr
    assert "previous book is unchanged" in proc.stderr
    assert snapshot(previous) == before
    assert not list((project / "_build").glob(".stage-*"))
    # A kernel shut down after its notebook is not interrupted: an idle ipykernel would log
    # "ERROR | KeyboardInterrupt caught in kernel" into the build's output.
    assert "KeyboardInterrupt" not in proc.stdout + proc.stderr


# Re-executing a chapter reproduces every glued number and every figure byte for byte: nbval
# checks it for every chapter (tests/conftest.py compares figures too).


# --- Interrupts and concurrency (issue #16) ----------------------------------------------------
def _start_build(output: Path, mark: str, wait_for: str = "started", **env_vars: str) -> tuple:
    """A real build into ``output`` in a subprocess whose children carry ``mark`` in their
    environment; returns once ``wait_for`` appears in its output (notebooks are running).
    ``env_vars`` are set for the build."""
    import os
    import subprocess
    import sys
    import time

    # The notebook cache off: a build whose notebooks were all cached would start no kernel.
    env = {**os.environ, "DMLIMITS_TEST_MARK": mark, "DMLIMITS_NOTEBOOK_CACHE": "off", **env_vars}
    proc = subprocess.Popen(
        [sys.executable, "-m", "dmlimits", "build", "--output", str(output)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    lines: list[str] = []
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        if wait_for in line:
            return proc, lines
    proc.kill()
    raise AssertionError("the build never reached its notebooks:\n" + "".join(lines))


def _left_behind(mark: str) -> list[int]:
    import psutil

    found = []
    for p in psutil.process_iter():
        try:
            if p.environ().get("DMLIMITS_TEST_MARK") == mark:
                found.append(p.pid)
        except psutil.Error:
            continue
    return found


@pytest.mark.parametrize(("signum", "code"), [("SIGINT", 130), ("SIGTERM", 143)])
def test_a_signal_stops_the_build_and_cleans_up(built_book, tmp_path, signum, code):
    """Ctrl-C or SIGTERM while notebooks execute: the build stops (well within the ten seconds
    allowed here; bench/bench_build.py measures how fast), every kernel is gone, the stage is
    removed, nothing is written to the output, the default book is untouched."""
    import signal
    import time
    import uuid

    mark = uuid.uuid4().hex
    before = digest(HTML)
    out = tmp_path / "html"
    proc, _ = _start_build(out, mark)
    time.sleep(1.0)  # let the kernels get going
    sent = time.monotonic()
    proc.send_signal(getattr(signal, signum))
    proc.wait(timeout=10)
    assert time.monotonic() - sent < 10
    assert proc.returncode == code, proc.stderr.read()
    assert "previous book is unchanged" in proc.stderr.read()
    assert _left_behind(mark) == []
    assert not [s for s in stages() if f"-{proc.pid}-" in s.name]
    assert not out.exists()
    assert digest(HTML) == before


@pytest.mark.parametrize("when", ["scenario:", "sweep"])
def test_a_signal_before_the_notebooks_stops_the_fork_server_too(built_book, tmp_path, when):
    """Ctrl-C as the build starts (its first line, before it handles signals itself) or as it
    sweeps, while the kernels' fork server (started before the sweeps) may still be importing:
    the build stops with Ctrl-C's exit code, the server with it, and nothing is left."""
    import signal
    import time
    import uuid

    mark = uuid.uuid4().hex
    out = tmp_path / "html"
    proc, _ = _start_build(out, mark, wait_for=when)
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=10)
    assert time.monotonic() - sent < 10
    assert proc.returncode == 130, proc.stderr.read()
    assert _left_behind(mark) == []
    assert not [s for s in stages() if f"-{proc.pid}-" in s.name]
    assert not out.exists()


@pytest.mark.parametrize(("signum", "code"), [("SIGINT", 130), ("SIGTERM", 143)])
def test_a_signal_while_sphinx_reads_stops_its_processes_too(built_book, tmp_path, signum, code):
    """Ctrl-C or SIGTERM while Sphinx reads the pages in several processes (every chapter read
    from the default book's notebook cache, Sphinx's kept state off): the build stops, and so
    does every process of Sphinx's, none left reading on."""
    import signal
    import time
    import uuid

    mark = uuid.uuid4().hex
    out = tmp_path / "html"
    cache = str(ROOT / "_build" / "cache" / "notebooks")
    proc, _ = _start_build(out, mark, "building the HTML", DMLIMITS_NOTEBOOK_CACHE=cache,
                           DMLIMITS_SPHINX_CACHE="off")  # fmt: skip
    # Sphinx's processes reading: the HTML process may still be importing the library when
    # the build asks it for the book (every chapter was in the cache), so wait for them.
    deadline = time.monotonic() + 60
    while len(_left_behind(mark)) < 3 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert len(_left_behind(mark)) >= 3  # the build, the command and its readers
    sent = time.monotonic()
    proc.send_signal(getattr(signal, signum))
    proc.wait(timeout=10)
    assert time.monotonic() - sent < 10
    assert proc.returncode == code, proc.stderr.read()
    assert _left_behind(mark) == []
    assert not [s for s in stages() if f"-{proc.pid}-" in s.name]
    assert not out.exists()


def test_a_second_build_into_the_same_folder_refuses(tmp_path):
    import signal
    import uuid

    mark = uuid.uuid4().hex
    out = tmp_path / "html"
    first, _ = _start_build(out, mark)
    try:
        second = run_cli("build", "--output", str(out), timeout=120)
        assert second.returncode == 1
        assert f"another build into {out} is running (pid {first.pid})" in second.stderr
    finally:
        # How fast an interrupt stops a build is the signal tests' business; this one checks the
        # lock, so it allows a loaded machine time to stop the first build.
        first.send_signal(signal.SIGINT)
        first.wait(timeout=120)
    assert _left_behind(mark) == []


def test_a_killed_builds_stage_is_removed_by_the_next(tmp_path):
    import signal
    import uuid

    stale = ROOT / "_build" / ".stage-999999999-killed-build-abcd"
    stale.mkdir(parents=True, exist_ok=True)
    (stale / "left.txt").write_text("a build killed with SIGKILL left this")
    mark = uuid.uuid4().hex
    proc, lines = _start_build(tmp_path / "html", mark)
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=10)
    assert not stale.exists()
    assert any("removed .stage-999999999-killed-build-abcd" in line for line in lines)
