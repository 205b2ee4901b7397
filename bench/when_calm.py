"""Wait for a calm hour on the shared machine, then run the build and search benches.

Issue #16's targets are seconds on the project's 2-core machine, which is shared: in a slow hour
the same build takes half as long again as in a calm one, so a bench run in a slow hour cannot
show the targets met or missed.  This script probes the machine's speed (``bench/machine.py``)
every minute and, the first time the probe reads calm, runs

    bench/bench_build.py --repeat 3
    bench/bench_search.py

one after the other, their output as it comes, then each command given with ``--then`` (a
shell command run in the project folder, its output to a log of its own in
``_build/when_calm/``), timed, with a probe before and after it: issue #16's times for
`make check` and `make test` belong to the same calm hour as the benches.  Run it from the
project folder of a fresh clone after `make book`, in the background, and read its output
later:

    nohup .venv/bin/python bench/when_calm.py --then "make check" --then "make test" \
        > when_calm.log 2>&1 &

Exits 0 once the benches and commands have run; 1 if no probe read calm within ``--hours``;
the exit code of the first bench or command that failed (what follows it is not run).
Nothing else should run on the machine while it waits: its own probes would read the load.
"""

from __future__ import annotations

import argparse
import datetime
import re
import subprocess
import sys
import time
from pathlib import Path

import machine  # bench/machine.py

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
#: Where a ``--then`` command's output goes (git ignores _build/).
LOGS = ROOT / "_build" / "when_calm"
BENCHES = (["bench_build.py", "--repeat", "3"], ["bench_search.py"])


def positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"got {text!r}; expected a finite number above zero")
    return value


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--calm",
        type=positive,
        default=0.62,
        help="the probe's seconds at or under which the machine counts as calm "
        "(default 0.62; calm reads 0.53-0.60 s)",
    )
    parser.add_argument(
        "--every", type=positive, default=60.0, help="seconds between probes (default 60)"
    )
    parser.add_argument(
        "--hours",
        type=positive,
        default=3.0,
        help="how long to wait for a calm probe before giving up (default 3)",
    )
    parser.add_argument(
        "--then",
        action="append",
        default=[],
        metavar="COMMAND",
        help="a shell command to time after the benches (repeatable, run in order), "
        "e.g. --then 'make check' --then 'make test'; its output goes to "
        "_build/when_calm/<command>.log",
    )
    args = parser.parse_args()
    deadline = time.monotonic() + 3600 * args.hours
    while True:
        seconds = machine.probe()
        now = datetime.datetime.now().strftime("%H:%M:%S")
        calm = seconds <= args.calm
        print(
            f"{now} probe {seconds:.2f} s" + (" calm: running the benches" if calm else ""),
            flush=True,
        )
        if calm:
            break
        if time.monotonic() + args.every > deadline:
            print(f"no probe read {args.calm:g} s or less in {args.hours:g} h: no bench run")
            return 1
        time.sleep(args.every)
    for bench in BENCHES:
        print(f"== {' '.join(bench)}", flush=True)
        code = subprocess.call([sys.executable, str(HERE / bench[0]), *bench[1:]])
        if code != 0:
            print(f"{bench[0]} failed (exit {code})", flush=True)
            return code
    for command in args.then:
        code = timed(command)
        if code != 0:
            return code
    return 0


def timed(command: str) -> int:
    """Run ``command`` in the project folder, its output to a log of its own; print its
    wall-clock time between two probes of the machine's speed.  Returns its exit code."""
    log = LOGS / f"{re.sub(r'[^A-Za-z0-9]+', '-', command).strip('-')}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    print(f"== {command} (output: {log.relative_to(ROOT)})", flush=True)
    print(machine.line("before it"), flush=True)
    start = time.perf_counter()
    with log.open("w") as out:
        code = subprocess.call(command, shell=True, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
    seconds = time.perf_counter() - start
    print(f"{command}: exit {code} after {seconds:.1f} s ({seconds / 60:.1f} min)", flush=True)
    print(machine.line("after it"), flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
