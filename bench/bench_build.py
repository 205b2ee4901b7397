"""Time the book's build: the default book from cold caches, again with nothing changed, and a
re-run with one changed assumption.

Speed targets are checked here, never in timed tests.  Run from the project folder after
`make book` (a warm environment: the virtual environment installed):

    .venv/bin/python bench/bench_build.py

Each run of builds has caches of its own (sweeps, kept formulas, executed notebooks and Sphinx's
state, in a temporary folder, so the project's caches neither help nor change), and each build
writes to a temporary folder: the default book in _build/html is not touched.  A run is, in
order:

1. the default book with empty caches, as after a change to the library: every scenario the
   chapters read is swept and every notebook executed;
2. the default book again, nothing changed: every sweep and notebook is read from the caches,
   and Sphinx reads and writes no page;
3. one changed assumption (``training.months=6``): the sweeps and notebooks that depend on it
   are computed again (a chapter that read none of it is copied:
   :mod:`dmlimits.build.chapter_reads`),
   and Sphinx reads and writes the chapters again.

The run is repeated (``--repeat``, three times unless told), each time from empty caches, and
the targets are judged on each build's median: the machine's speed changes from minute to
minute, so one run says little.  The speed is probed (``bench/machine.py``) before the runs,
after each and at the end.  Last, a build is stopped by Ctrl-C (SIGINT), then one by SIGTERM,
once its notebooks are running: the seconds from the signal to the build's exit (issue #16's
target: 2 s), and its exit code.

Prints each build's wall-clock seconds, the seconds its sweeps and its HTML took, and each
executed notebook's seconds (a notebook read from the cache is not listed); then each build's
median and best over the runs.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import machine  # bench/machine.py: the machine's speed when the runs were taken

ROOT = Path(__file__).resolve().parent.parent
# Issue #16's 45 s target for "the default book from a warm environment" is printed against
# both readings: a build with empty caches (the environment installed, nothing built) and a
# build again with nothing changed.
CASES = (
    ("default book, empty caches (target 45 s, read strictly)", []),
    ("default book again, nothing changed (target 45 s, read as a rebuild)", []),
    ("one changed assumption, training.months=6 (target: 30 s)", ["--set", "training.months=6"]),
)


def cache_env(folder: Path) -> dict[str, str]:
    """This process's environment with every cache of the build in empty folders under
    ``folder``."""
    return dict(
        os.environ,
        DMLIMITS_SWEEP_CACHE=str(folder / "cache" / "sweeps"),
        DMLIMITS_NOTEBOOK_CACHE=str(folder / "cache" / "notebooks"),
        DMLIMITS_SPHINX_CACHE=str(folder / "cache" / "sphinx"),
        DMLIMITS_FORMULA_CACHE=str(folder / "cache" / "formulas"),
    )


def run(
    args: list[str], out: Path, env: dict[str, str]
) -> tuple[float, str, str, dict[str, float]]:
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "dmlimits", "build", *args, "--output", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
    )
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"build failed:\n{proc.stdout}\n{proc.stderr}")
    swept = re.search(r"swept in ([\d.]+) s", proc.stdout)
    sweeps = f"{float(swept.group(1)):.1f} s" if swept else "read from the cache"
    html_time = re.search(r"HTML \(Jupyter Book\)\s+([\d.]+) s", proc.stdout)
    html = f"{float(html_time.group(1)):.1f} s" if html_time else "not reported"
    notebooks = {
        m.group(1): float(m.group(2))
        for m in re.finditer(r"\[\d+/\d+\] (\S+)\s+([\d.]+) s$", proc.stdout, re.M)
    }
    copied = re.search(r"(\d+) of them executed for another scenario", proc.stdout)
    html += f"; copied from another scenario's execution: {copied.group(1) if copied else 0}"
    return elapsed, sweeps, html, notebooks


def stop(signum: int, out: Path, env: dict[str, str]) -> tuple[float, int]:
    """Seconds from ``signum`` to the exit of a build whose notebooks are running, and its exit
    code.  The notebook cache is off, so that the build has kernels to stop."""
    import signal

    proc = subprocess.Popen(
        [sys.executable, "-m", "dmlimits", "build", "--output", str(out)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=dict(env, DMLIMITS_NOTEBOOK_CACHE="off"),
    )
    for line in proc.stdout:
        if "started" in line:
            break
    time.sleep(1.0)  # the kernels at work
    sent = time.perf_counter()
    proc.send_signal(signum)
    proc.communicate(timeout=60)  # read what it prints until it exits
    code = proc.returncode
    if code == -signal.SIGKILL:
        sys.exit("the build had to be killed")
    return time.perf_counter() - sent, code


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--repeat",
        type=int,
        default=3,
        help="how many times the three builds run, each time from empty caches (default 3); "
        "every run is printed, and the targets are judged on the median",
    )
    args = parser.parse_args()
    if args.repeat < 1:
        sys.exit(f"--repeat must be a whole number of at least 1, not {args.repeat}")
    print(machine.line("before the runs"), flush=True)
    seconds_by_case: list[list[float]] = [[] for _ in CASES]
    with tempfile.TemporaryDirectory() as top:
        for rep in range(args.repeat):
            tmp = Path(top) / f"run{rep + 1}"
            print(f"run {rep + 1} of {args.repeat}, caches empty at its start", flush=True)
            env = cache_env(tmp)
            for i, (name, sets) in enumerate(CASES):
                seconds, sweeps, html, notebooks = run(sets, tmp / f"case{i}" / "html", env)
                seconds_by_case[i].append(seconds)
                print(f"  {name}: {seconds:.1f} s (sweeps: {sweeps}; notebooks executed: "
                      f"{len(notebooks)}, {sum(notebooks.values()):.1f} s of kernel time; "
                      f"HTML: {html})", flush=True)  # fmt: skip
                for nb, t in sorted(notebooks.items(), key=lambda kv: -kv[1]):
                    print(f"      {nb:<34} {t:5.1f} s")
            print("  " + machine.line(f"after run {rep + 1}"), flush=True)
            if rep + 1 < args.repeat:  # the last run's caches serve the stopped builds below
                shutil.rmtree(tmp, ignore_errors=True)  # about half a gigabyte a run
        print(f"summary of {args.repeat} run(s), each from empty caches:")
        for (name, _), times in zip(CASES, seconds_by_case, strict=True):
            target = re.search(r"target:? (\d+) s", name)
            middle = statistics.median(times)
            verdict = ""
            if target:
                ok = "met" if middle <= float(target.group(1)) else "MISSED"
                verdict = f"; target {target.group(1)} s on the median: {ok}"
            runs = ", ".join(f"{t:.1f}" for t in times)
            print(f"  {name.split(' (')[0]}: median {middle:.1f} s, best {min(times):.1f} s "
                  f"(runs: {runs} s){verdict}")  # fmt: skip
        import signal

        for signum, expected in ((signal.SIGINT, 130), (signal.SIGTERM, 143)):
            # With the last run's caches (its sweeps read, its notebooks not), as before.
            seconds, code = stop(signum, Path(top) / f"stopped-{signum}" / "html", env)
            ok = "met" if seconds <= 2.0 and code == expected else "MISSED"
            print(f"stopped by {signal.Signals(signum).name}: {seconds:.2f} s after the signal, "
                  f"exit {code} (expected {expected}; target 2 s: {ok})")  # fmt: skip
    print(machine.line("after the runs"))


if __name__ == "__main__":
    main()
