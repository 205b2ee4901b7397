"""The authors' configurations: the optimal configurations their final code prints
(``ege-erdil/limits_to_distributed_training`` at b1f771c, run by this book:
``paper1_reference_sweeps.csv``), and this search compared with them point by point.
"""

from __future__ import annotations

import math
from typing import Any

from dmlimits.core import published
from dmlimits.core.checks import require_scenario
from dmlimits.core.scenario import PAPER_PRESETS, Scenario
from dmlimits.search.results import headline, linear_end_threshold
from dmlimits.search.sweeps import sweep

# --- The authors' configurations ---------------------------------------------------------------
#: The settings whose sweeps the authors' final code was run for (data/paper1_reference_sweeps.csv).
REFERENCE_FILE = "paper1_reference_sweeps.csv"
#: Utilization within this of the authors' value counts as agreement (issue #12).
REFERENCE_TOLERANCE = 0.01


def reference_rows(setting: str) -> list[dict[str, Any]]:
    """The authors' final code's result at every model of one setting's sweep (a preset name of
    :data:`dmlimits.core.scenario.PAPER_PRESETS`), from ``data/paper1_reference_sweeps.csv``:
    numbers as floats, ``feasible`` as a bool, an empty configuration as ``NaN``."""
    if setting not in PAPER_PRESETS:
        raise ValueError(
            f"setting: got {setting!r}; expected one of the paper's presets: "
            + ", ".join(PAPER_PRESETS)
        )
    out = []
    for r in published.data_rows(REFERENCE_FILE):
        if r["setting"] != setting:
            continue
        row: dict[str, Any] = {"setting": setting, "feasible": r["feasible"] == "True"}
        for k, v in r.items():
            if k not in ("setting", "feasible") and not k.endswith("_levels"):
                row[k] = float(v) if v != "" else math.nan
        out.append(row)
    return out


def reference_setting(scn: Scenario) -> str:
    """The paper's preset a scenario is compared with: its own name, or the preset it was
    built from (``h100+training.months=6`` is compared with ``h100``), or else the paper's
    setting with the same GPU, the same kind of model and batch law (a scenario file that
    changes the run's length on A100s is compared with ``a100``).  ValueError when the paper
    has no such setting (another GPU, say)."""
    for name in (scn.name, scn.name.split("+")[0], scn.origin.removeprefix("preset ")):
        if name in PAPER_PRESETS:
            return name
    name = str(scn["gpu"])
    if scn["batch.law"] == "none":
        name += "-no-batch-scaling"
    elif scn["batch.law"] == "deepseek":
        name += "-deepseek-batch"
    if scn["model.sparse"]:
        name += "-sparse"
    if name in PAPER_PRESETS:
        return name
    raise ValueError(
        f"scenario {scn.name!r}: the paper has no setting with its GPU, model and batch law "
        f"({name}); expected one of " + ", ".join(PAPER_PRESETS)
    )


def reference_comparison(scn: Scenario, setting: str | None = None) -> list[dict[str, Any]]:
    """The search's result beside the authors' at every model of ``setting`` (default: the
    scenario's own preset) for which their code found a configuration: compute, the two
    utilizations and their difference (``NaN`` where this search finds none), whether the
    configurations are the same (GPUs and the TP, PP, DP and EP degrees) and so is the 2D
    split of tensor parallelism (equal products often tie), and the cost that binds."""
    scn = require_scenario(scn)
    setting = setting or reference_setting(scn)
    mine = sweep(scn)
    out = []
    for ref in reference_rows(setting):
        if not ref["feasible"]:
            continue
        c = ref["training_flop_16bit"]
        match = min(mine, key=lambda r: abs(math.log(r["training_flop"] / c)))
        if abs(match["training_flop"] / c - 1) > 1e-4:
            raise ValueError(f"no grid point of {scn.name} at the reference compute {c:.6g}")
        found = bool(match["feasible"])
        same = (
            found
            and all(float(match[k]) == ref[k] for k in ("n_gpu", "pp", "dp", "ep"))
            and match["tp_model"] * match["tp_ff"] == ref["tp_model"] * ref["tp_ff"]
        )
        split = same and all(float(match[k]) == ref[k] for k in ("tp_model", "tp_ff"))
        u = match["utilization"] if found else math.nan
        out.append({
            "training_flop": match["training_flop"], "found": found,
            "utilization_reference": ref["utilization"], "utilization": u,
            "difference": u - ref["utilization"], "same_configuration": same,
            "same_split": split, "binding": match["binding"],
            "n_gpu": match.get("n_gpu", math.nan), "n_gpu_reference": ref["n_gpu"],
        })  # fmt: skip
    return out


def reference_linear_end(scn: Scenario, setting: str | None = None) -> float:
    """Where linear scaling ends in the authors' sweep of ``setting``, by the same rule as
    :func:`~dmlimits.search.results.headline` (the threshold of the scenario's GPU)."""
    setting = setting or reference_setting(scn)
    limit = linear_end_threshold(scn)
    rows = [r for r in reference_rows(setting) if r["feasible"]]
    return next((r["training_flop_16bit"] for r in rows if r["utilization"] <= limit), math.nan)


def reference_summary(scn: Scenario, setting: str | None = None) -> dict[str, Any]:
    """How closely the search reproduces the authors' sweep of ``setting``: grid points they
    found a configuration for, how many of those this search finds, how many are within
    :data:`REFERENCE_TOLERANCE` in utilization, the largest difference, how many have the same
    configuration, and both linear-scaling ends with their ratio."""
    scn = require_scenario(scn)
    setting = setting or reference_setting(scn)
    rows = reference_comparison(scn, setting)
    diffs = [abs(r["difference"]) for r in rows if r["found"]]
    ours = headline(scn)["linear_scaling_end_flop"]
    theirs = reference_linear_end(scn, setting)
    return {
        "setting": setting,
        "points": len(rows),
        "found": sum(r["found"] for r in rows),
        "within": sum(d <= REFERENCE_TOLERANCE for d in diffs),
        "max_difference": max(diffs, default=math.nan),
        "same_configuration": sum(r["same_configuration"] for r in rows),
        "same_split": sum(r["same_split"] for r in rows),
        "linear_end": ours,
        "linear_end_reference": theirs,
        "linear_end_ratio": ours / theirs,
    }
