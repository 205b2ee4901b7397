"""Argument checks and output shaping shared by the cost modules (one copy, one message)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from .scenario import Scenario

_TRUSTED = threading.local()


@contextmanager
def trusted_arguments() -> Iterator[None]:
    """Inside the block, in this thread, the cost modules take their numeric arguments as
    given instead of checking every element (finite, positive, whole where they must be, a
    degree that divides its width, a group that fits in a node).  For the search alone: it
    passes arrays of up to millions of elements that it built itself from a checked scenario
    and its own enumeration of the valid configurations, and checking them took about a
    quarter of a sweep (``bench/bench_search.py``).  The values computed are the same
    (tests/test_search_pruning.py compares sweeps made with and without it)."""
    before = getattr(_TRUSTED, "on", False)
    _TRUSTED.on = True
    try:
        yield
    finally:
        _TRUSTED.on = before


def checking() -> bool:
    """Whether the cost modules check their numeric arguments: everywhere but inside
    :func:`trusted_arguments`."""
    return not getattr(_TRUSTED, "on", False)


def require_scenario(scn: Any) -> Scenario:
    """``scn`` if it is a :class:`~dmlimits.scenario.Scenario`; otherwise a ValueError saying
    what to pass."""
    if not isinstance(scn, Scenario):
        raise ValueError(
            f"scn: got {type(scn).__name__} {scn!r:.80}; expected a "
            "dmlimits.scenario.Scenario, e.g. dmlimits.scenario.resolve('h100')"
        )
    return scn


def as_output(value: Any, shape: tuple[int, ...]) -> np.ndarray | float:
    """``value`` broadcast to ``shape``: a float for scalar inputs, an array of its own
    otherwise.  Inside :func:`trusted_arguments` a float array that already has the shape is
    returned as it is, not copied (the search only reads what the cost modules return)."""
    if (
        type(value) is np.ndarray and value.shape == shape and value.dtype == np.float64
        and shape != () and not checking()
    ):  # fmt: skip
        return value
    arr = np.broadcast_to(np.asarray(value, dtype=float), shape)
    return float(arr) if shape == () else np.array(arr)
