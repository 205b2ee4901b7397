"""What each of the build's shortcuts saves: the three builds of ``bench_build.py`` (the default
book from empty caches, again with nothing changed, one changed assumption) with every shortcut
on, then with each switched off in turn through its environment variable.

A shortcut earns its place when switching it off makes one of the three builds, or ``make
test``'s use of them, measurably slower; this prints the seconds of each build per variant, so
that the closing note of a change to the build can say what each saves.  The runs are made one
after the other on this machine (its speed, read by ``machine.py``, is printed before and after);
compare only runs of one invocation.

    .venv/bin/python bench/bench_machinery.py            # every variant once
    .venv/bin/python bench/bench_machinery.py --only fork --repeat 2
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

import machine  # bench/machine.py: the machine's speed when the runs were taken
from bench_build import CASES, cache_env, run

#: Each variant: a name, and the environment variables that switch a shortcut off.
VARIANTS = {
    "all on": {},
    "fork": {"DMLIMITS_KERNEL_FORK": "off"},
    "notebooks": {"DMLIMITS_NOTEBOOK_CACHE": "off"},
    "sphinx": {"DMLIMITS_SPHINX_CACHE": "off"},
    "formulas": {"DMLIMITS_FORMULA_CACHE": "off"},
    "sweeps": {"DMLIMITS_SWEEP_CACHE": "off"},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", nargs="*", choices=sorted(VARIANTS), help="variants to run")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each variant (default 1)")
    args = parser.parse_args()
    if args.repeat < 1:
        sys.exit(f"--repeat must be a whole number of at least 1, not {args.repeat}")
    chosen = ["all on", *[v for v in (args.only or VARIANTS) if v != "all on"]]
    print(machine.line("before the runs"), flush=True)
    table: dict[str, list[list[float]]] = {v: [[] for _ in CASES] for v in chosen}
    with tempfile.TemporaryDirectory() as top:
        for rep in range(args.repeat):
            for variant in chosen:
                tmp = Path(top) / f"{variant.replace(' ', '-')}-{rep}"
                env = {**cache_env(tmp), **VARIANTS[variant]}
                for i, (_, sets) in enumerate(CASES):
                    seconds = run(sets, tmp / f"case{i}" / "html", env)[0]
                    table[variant][i].append(seconds)
                    print(f"  {variant:10} case {i + 1}: {seconds:6.1f} s", flush=True)
    print(machine.line("after the runs"))
    print("\nmedian seconds | cold book | unchanged | training.months=6")
    for variant, cases in table.items():
        cells = " | ".join(f"{statistics.median(c):9.1f}" for c in cases)
        print(f"{variant:14} | {cells}")


if __name__ == "__main__":
    main()
