"""How fast the machine runs right now, printed beside a bench's timings.

The project's 2-core machine is shared, and its speed changes by a factor of two or more from
one quarter of an hour to the next.  A bench's seconds say little without the machine's state
when they were taken, so each bench prints this probe's seconds before and after its runs: the
same fixed work (sorting one array of two million random doubles forty times, on one core),
which reads about 0.53-0.60 s on the project's machine when nothing else slows it down.
"""

from __future__ import annotations

import time

import numpy as np


def probe() -> float:
    """Seconds the fixed work takes now (one core; lower is faster)."""
    values = np.random.default_rng(0).random(2_000_000)
    start = time.perf_counter()
    for _ in range(40):
        np.sort(values)
    return time.perf_counter() - start


def line(when: str) -> str:
    """One line for a bench's output: the probe's seconds ``when`` (e.g. "before the runs")."""
    return f"machine probe {when}: {probe():.2f} s (40 sorts of 2e6 doubles; lower is faster)"
