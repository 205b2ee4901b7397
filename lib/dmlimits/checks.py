"""Argument checks and output shaping shared by the cost modules (one copy, one message)."""

from __future__ import annotations

from typing import Any

import numpy as np

from .scenario import Scenario


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
    """``value`` broadcast to ``shape``: a float for scalar inputs, an array otherwise."""
    arr = np.broadcast_to(np.asarray(value, dtype=float), shape)
    return float(arr) if shape == () else np.array(arr)
