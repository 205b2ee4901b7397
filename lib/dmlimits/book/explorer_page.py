"""What the explorer page reads (:mod:`dmlimits.book.explorer` lists its settings): for every
setting, the sweep's columns, the headline numbers and the scenario to take home, and the
paper's own curve to compare with.  Written into the page as data by
:func:`dmlimits.book.interactive.embed`; the page's script only looks it up.
"""

from __future__ import annotations

import json
import math
import shlex
from typing import Any

import yaml

from dmlimits import search
from dmlimits.book import interactive, whole_run
from dmlimits.book.explorer import (
    CONTROLS,
    GPUS,
    PAIR_GPUS,
    PAIRS,
    Control,
    bases,
    positions,
    scenario_at,
    setting_id,
)
from dmlimits.book.glue import quantity
from dmlimits.core import published
from dmlimits.core.scenario import SCHEMA, Scenario, resolve

#: The headline numbers the page shows, with what it calls them (keys of
#: :func:`dmlimits.search.results.headline`).
HEADLINE = (
    ("linear_scaling_crossing_flop", "linear scaling ends"),
    ("t_crit_own_flop", "critical compute (closed form)"),
    ("last_feasible_flop", "largest run that finishes in time (latency wall)"),
    ("t_limit_own_flop", "latency wall (closed form)"),
)

#: The limits marked on the page's curve, with their labels there.
MARKS = (
    ("linear_scaling_crossing_flop", "linear scaling ends"),
    ("t_crit_own_flop", "critical compute"),
    ("last_feasible_flop", "latency wall"),
)

#: The columns of the sweep the page reads at each model.
COLUMNS = (
    "training_flop", "utilization", "feasible", "binding", "n_gpu", "dp", "tp_model", "tp_ff",
    "pp", "v", "ep", "m", "zero_bubble", "batch_tokens", "layers", "d_model", "t_step",
    "loss_matmul", "loss_bandwidth", "loss_latency", "loss_bubble",
)  # fmt: skip


#: The parts of the step, which the page draws as a bar and prints to three figures: kept to
#: :data:`ROUNDED_DIGITS` significant figures, which keeps the page under its weight.  The
#: curve (compute and utilization), the configurations and the headline numbers are exact.
ROUNDED = ("t_step", "ideal", "loss_matmul", "loss_bandwidth", "loss_latency", "loss_bubble")
#: Significant figures of the parts of the step.
ROUNDED_DIGITS = 6


def command_value(value: Any) -> str:
    """A value as ``--set`` reads it back exactly (``repr`` of a float keeps every digit)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value) if isinstance(value, float) else str(value)


def take_home(gpu: str, scn: Scenario, default: Scenario) -> dict[str, str]:
    """A setting as a reader takes it home: its scenario as a YAML file (the GPU preset and
    every value that differs from it) and the commands that build the book and print the
    headline for it."""
    changes = {k: v for k, (_, v) in scn.differences(default).items() if k != "gpu"}
    doc = {"name": f"explorer-{gpu}", "description": f"{scn.gpu_label}, from the explorer",
           "gpu": gpu, **changes}  # fmt: skip
    sets = " ".join(f"--set {shlex.quote(f'{k}={command_value(v)}')}" for k, v in changes.items())
    tail = f" {sets}" if sets else ""
    return {
        "yaml": yaml.safe_dump(doc, sort_keys=False),
        "build_command": "python -m dmlimits build --scenario explorer.yaml",
        "headline_command": f"python -m dmlimits headline --scenario {gpu}{tail}",
    }


def value_label(control: Control, value: Any) -> str:
    """How the page prints one stop of a control: a number with its key's unit as the prose
    writes it (:func:`dmlimits.book.glue.quantity`), a switch as yes or no, a law by its name."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, str):
        return value
    return quantity(value, SCHEMA[control.key].unit)


def missing(scn: Scenario, key: str) -> str:
    """What the page says where a headline number is missing: the closed forms model dense
    runs only (a mixture of experts has none); the search's limits are missing when no model of
    the sweep's grid crosses them."""
    if key.startswith("t_"):
        return "none: the closed forms are for dense models" if scn["model.sparse"] else "none"
    return "not reached on the sweep's grid"


def result(scn: Scenario) -> dict[str, Any]:
    """What the page shows for one setting: the sweep's columns, the headline numbers and the
    ideal matmul time of each model's step (its useful work at the effective rate); the parts of
    the step (:data:`ROUNDED`) to six significant figures."""
    rows = search.sweep(scn)
    head = search.headline(scn)
    columns = {k: [r.get(k, math.nan) for r in rows] for k in COLUMNS}
    columns["ideal"] = [whole_run.step_split(scn, r)["ideal"] for r in rows]
    for k in ROUNDED:
        columns[k] = [float(f"{x:.{ROUNDED_DIGITS}g}") for x in columns[k]]
    return {
        "headline": {k: head[k] for k, _ in HEADLINE},
        "missing": {k: missing(scn, k) for k, _ in HEADLINE if not math.isfinite(head[k])},
        "sweep": columns,
    }


def pooled(results: dict[str, dict[str, Any]]) -> list[list[Any]]:
    """Each distinct column of the settings' sweeps, once: every setting's ``sweep`` then holds,
    for each column, its index in the returned list.  Most columns repeat from setting to setting
    (the models' sizes, most configurations), and pooling them keeps the page under its weight;
    the page reads the column back by its index (``explorer.js``)."""
    pool: list[list[Any]] = []
    index: dict[str, int] = {}
    for r in results.values():
        for k, column in r["sweep"].items():
            key = json.dumps(interactive.json_safe(column))
            if key not in index:
                index[key] = len(pool)
                pool.append(column)
            r["sweep"][k] = index[key]
    return pool


def data(scn: Scenario) -> dict[str, Any]:
    """Everything the explorer page reads, for a book built for ``scn``."""
    flop, util = whole_run.blog_curve()
    gpus, results = [], {}
    for gpu, base in bases(scn).items():
        default = resolve(gpu)
        home = positions(base)[0]
        controls = []
        for c in CONTROLS:
            stops = c.stops(base)
            controls.append({
                "key": c.key, "label": c.label, "initial": c.base_index(base),
                "labels": [value_label(c, v) for v in stops],
                "sets": [f"{c.key}={command_value(v)}" for v in stops],
                "slider": bool(c.factors),
            })  # fmt: skip
        # the book's own assumptions, which an off-grid command carries (the preset has not them)
        base_sets = {k: f"{k}={command_value(v)}"
                     for k, (_, v) in base.differences(default).items() if k != "gpu"}
        labels = {c.key: c.label for c in CONTROLS}
        pair_text = " and ".join(f"{labels[a]} with {labels[b]}" for a, b in PAIRS)
        gpus.append({"name": gpu, "label": base.gpu_label, "controls": controls,
                     "home": list(home), "base_sets": base_sets,
                     "pair_text": pair_text if gpu in PAIR_GPUS else ""})  # fmt: skip
        for p in positions(base, gpu in PAIR_GPUS):
            s = scenario_at(base, p)
            results[setting_id(gpu, p)] = {**result(s), **take_home(gpu, s, default)}
    pool = pooled(results)
    return {
        "gpus": gpus,
        "initial_gpu": scn["gpu"] if scn["gpu"] in GPUS else "h100",
        # the compute first picked: the grid point nearest where the post says linear scaling ends
        "initial_compute": published.value("paper1.post_slowdown_flop"),
        "headline_labels": [list(h) for h in HEADLINE],
        "marks": [list(m) for m in MARKS],
        "ideal_label": whole_run.IDEAL_LABEL,
        "loss_labels": {k: search.LOSS_LABELS[k] for k in search.LOSSES},
        "binding_labels": dict(search.LOSS_LABELS),
        "paper": {"training_flop": list(flop), "utilization": list(util)},
        "results": results,
        "pool": pool,
    }


