"""Time the book's build: the default book, and a re-run with one changed assumption.

Speed targets are checked here, never in timed tests.  Run from the project folder after
`make book` (a warm environment):

    .venv/bin/python bench/bench_build.py [--repeat N]

Prints the wall-clock seconds of each build (best of N) and of each notebook's execution.
Both builds go to a temporary folder: the default book in _build/html is not touched.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CASES = {
    "default book": [],
    "one changed assumption (training.months=6)": ["--set", "training.months=6"],
}


def run(args: list[str], out: Path) -> tuple[float, dict[str, float]]:
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "dmlimits", "build", *args, "--output", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"build failed:\n{proc.stdout}\n{proc.stderr}")
    notebooks = {
        m.group(1): float(m.group(2))
        for m in re.finditer(r"^\s+\[\d+/\d+\] (\S+)\s+([\d.]+) s$", proc.stdout, re.M)
    }
    return elapsed, notebooks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=1, help="builds per case (best is kept)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for i, (name, sets) in enumerate(CASES.items()):
            results = [run(sets, Path(tmp) / f"case{i}-{r}" / "html") for r in range(args.repeat)]
            best, notebooks = min(results, key=lambda r: r[0])
            print(f"{name}: {best:.1f} s (best of {args.repeat})")
            for nb, seconds in notebooks.items():
                print(f"    {nb:<28} {seconds:5.1f} s")


if __name__ == "__main__":
    main()
