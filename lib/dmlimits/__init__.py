"""dmlimits: the library behind the executable book *Data Movement Limits*.

Every formula, constant, scenario and figure helper of the book lives here; the notebooks only
render what this package computes.  The package is laid out in layers, each importing only from
the ones before it: :mod:`~dmlimits.core`, :mod:`~dmlimits.costs`, :mod:`~dmlimits.search`,
:mod:`~dmlimits.measured`, :mod:`~dmlimits.premises`, :mod:`~dmlimits.book`,
:mod:`~dmlimits.build` and :mod:`~dmlimits.cli` (see CONTRIBUTING.md).

What a reader of the book calls is exported here::

    import dmlimits

    scn = dmlimits.resolve("h100", overrides={"training.months": 6})
    dmlimits.headline(scn)        # the end of linear scaling, critical compute, the wall
    rows = dmlimits.sweep(scn)    # the optimal configuration at every model of the sweep
    cfg = dmlimits.Config(...)    # a measured run's configuration
    dmlimits.predict(cfg)         # its step time, throughput and MFU
    d = dmlimits.derivation_named("collectives-ring-allreduce")
    d.verify()                    # every step follows from the one before

Each name is imported on first use, so that ``import dmlimits`` (and the import of any one
layer) costs no more than the layers it uses.
"""

from __future__ import annotations

import importlib
import os
from typing import Any

__version__ = "0.1.0"

# A chapter's kernel that the build asks to list the assumptions it reads starts listing them
# here, before any scenario exists (dmlimits.build.reads says why and how).
if os.environ.get("DMLIMITS_SCENARIO_READS"):
    importlib.import_module("dmlimits.build.reads").record(os.environ["DMLIMITS_SCENARIO_READS"])

#: The public API: each name and the module it comes from.
EXPORTS = {
    "Scenario": "dmlimits.core.scenario",
    "ScenarioError": "dmlimits.core.scenario",
    "resolve": "dmlimits.core.scenario",
    "preset_names": "dmlimits.core.scenario",
    "Derivation": "dmlimits.core.derivation",
    "derivation_named": "dmlimits.core.derivation",
    "all_derivations": "dmlimits.core.derivation",
    "sweep": "dmlimits.search",
    "headline": "dmlimits.search",
    "Config": "dmlimits.measured.configuration",
    "predict": "dmlimits.measured.runs",
    "predict_rows": "dmlimits.measured.runs",
}

__all__ = ["EXPORTS", "__version__", *EXPORTS]


def __getattr__(name: str) -> Any:
    try:
        module = EXPORTS[name]
    except KeyError:
        raise AttributeError(f"module 'dmlimits' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(EXPORTS))
