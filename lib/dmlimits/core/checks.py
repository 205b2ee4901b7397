"""Argument checks and output shaping shared by the cost modules (one copy, one message)."""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from dmlimits.core.scenario import Scenario

_TRUSTED = threading.local()


@contextmanager
def trusted_arguments() -> Iterator[None]:
    """Inside the block, in this thread, the cost modules take their numeric arguments as
    given instead of checking every element (finite, positive, whole where they must be, a
    degree that divides its width, a group that fits in a node).  For the search alone: it
    passes arrays of up to millions of elements that it built itself from a checked scenario and
    its own enumeration of the valid configurations, so checking each element again would
    repeat, millions of times a sweep, what those checks ensure already.  The values computed
    are the same (tests/test_search_pruning.py compares sweeps made with and without it)."""
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


def shown(x: Any) -> str:
    """A number as the user would write it in an error message: ``4`` rather than ``4.0`` when
    whole, ``2.5``, ``nan``, ``inf``, and ``1e+20`` rather than twenty-one digits (Python's own
    ``repr`` from 1e16 on)."""
    x = float(x)
    return str(int(x)) if x.is_integer() and abs(x) < 1e16 else repr(x)


def numbers(
    name: str, value: Any, *, minimum: float = 0.0, strict: bool = False, whole: bool = False
) -> np.ndarray:
    """``value`` (a number or an array of them) as a float array whose every element is finite,
    whole if ``whole``, and at least ``minimum`` (greater than it if ``strict``); otherwise a
    ValueError naming the argument, its first bad element and what was expected, e.g.
    ``n_gpu: got 2.5; expected whole numbers of at least 1``.  Inside
    :func:`trusted_arguments` only the conversion to an array is done."""
    what = "whole numbers" if whole else "finite numbers"
    bound = f"greater than {minimum:g}" if strict else f"of at least {minimum:g}"
    try:
        arr = np.asarray(value, dtype=float)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: got {value!r:.80}; expected {what} {bound}") from None
    if not checking():
        return arr
    ok = np.isfinite(arr) & ((arr > minimum) if strict else (arr >= minimum))
    if whole:
        ok &= np.mod(np.where(np.isfinite(arr), arr, 0.0), 1.0) == 0
    if not np.all(ok):
        bad = arr[~ok].flat[0] if arr.ndim else arr
        raise ValueError(f"{name}: got {shown(bad)}; expected {what} {bound}")
    return arr


def counts(name: str, value: Any, minimum: int = 1) -> np.ndarray:
    """:func:`numbers` for counts: whole numbers of at least ``minimum``."""
    return numbers(name, value, minimum=minimum, whole=True)


def whole(name: str, value: Any, minimum: int = 1) -> int:
    """One whole number of at least ``minimum`` (a Python or numpy integer, or a whole float),
    as an ``int``; otherwise a ValueError that names the value and what was expected."""
    expected = f"expected a whole number of at least {minimum}"
    number_types = int | float | np.integer | np.floating
    if isinstance(value, bool | np.bool_) or not isinstance(value, number_types):
        raise ValueError(f"{name}: got {value!r:.80}; {expected}")
    number = float(value)
    if not (math.isfinite(number) and number == int(number) and number >= minimum):
        raise ValueError(f"{name}: got {value!r:.80}; {expected}")
    return int(number)


def flag(name: str, value: Any) -> bool:
    """``value`` if it is True or False (numpy's booleans too); otherwise a ValueError."""
    if not isinstance(value, bool | np.bool_):
        raise ValueError(f"{name}: got {value!r:.80}; expected True or False")
    return bool(value)


def require_scenario(scn: Any) -> Scenario:
    """``scn`` if it is a :class:`~dmlimits.core.scenario.Scenario`; otherwise a ValueError saying
    what to pass."""
    if not isinstance(scn, Scenario):
        raise ValueError(
            f"scn: got {type(scn).__name__} {scn!r:.80}; expected a "
            "dmlimits.core.scenario.Scenario, e.g. dmlimits.core.scenario.resolve('h100')"
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
