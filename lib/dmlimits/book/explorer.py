"""The explorer: the assumptions readers change most, as controls, and the limits they move.

The page (``notebooks/explorer.md``) lets a reader pick a GPU and move one assumption at a time
(or the network's bandwidth and latency together) and shows, for each position of the controls,
the utilization curve, the headline limits and the optimal configuration at a compute the reader
picks.  Every one of those positions is an ordinary scenario (the GPU's preset, carrying the
book's own assumptions as :func:`dmlimits.core.scenario.compared` carries them, with
``--set``-style overrides), swept by the search when the book is built
(:func:`settings` lists them; :mod:`dmlimits.book.book_sweeps` sweeps them up front) and written
into the page as data (:func:`data`).  The page only looks values up: a position of the controls
that was not swept is said to be off the grid, with the command that builds the book for it.

The grid, for each GPU of :data:`GPUS`: the base scenario; each control of :data:`CONTROLS` moved
alone to each of its stops; and each pair of :data:`PAIRS` moved together over all their stops.
"""

from __future__ import annotations

import math
import shlex
from dataclasses import dataclass
from typing import Any

import yaml

from dmlimits import search
from dmlimits.core import published
from dmlimits.core.scenario import SCHEMA, Scenario, compared, resolve, resolve_overrides

#: The GPUs the explorer offers, one per generation of the paper's presets.
GPUS = ("v100", "a100", "h100")


@dataclass(frozen=True)
class Control:
    """An assumption the explorer moves: its scenario key, what the page calls it, and its
    stops, either multiples of the GPU's own value (``factors``) or the values themselves
    (``choices``, for a law or a switch).  ``unit`` is how the page prints a value."""

    key: str
    label: str
    factors: tuple[float, ...] = ()
    choices: tuple[Any, ...] = ()
    unit: str = ""

    def stops(self, base: Scenario) -> tuple[Any, ...]:
        """The values this control steps through around ``base``."""
        if self.choices:
            return self.choices
        value = base[self.key]
        return tuple(value * f for f in self.factors)

    def base_index(self, base: Scenario) -> int:
        """The stop that is ``base``'s own value."""
        if self.choices:
            return self.choices.index(base[self.key])
        return self.factors.index(1.0)


FACTORS = (0.25, 0.5, 1.0, 2.0, 4.0)

#: The assumptions readers change most, in the order the page shows them.
CONTROLS = (
    Control("network.intra_node.bandwidth", "NVLink bandwidth per GPU", FACTORS, unit="B/s"),
    Control("network.inter_node.bandwidth", "InfiniBand bandwidth per GPU", FACTORS, unit="B/s"),
    Control("network.latency", "network latency per message", FACTORS, unit="s"),
    Control("hardware.kernel_latency", "kernel latency", FACTORS, unit="s"),
    Control("hardware.hbm_bandwidth", "HBM bandwidth", FACTORS, unit="B/s"),
    Control("training.months", "length of the run", FACTORS, unit="months"),
    Control("batch.law", "batch-size law", choices=("default", "none", "deepseek")),
    Control("batch.exponent", "exponent of the default batch law", (0.0, 0.5, 1.0, 2.0, 3.0)),
    Control("model.sparse", "mixture of experts", choices=(False, True)),
)

#: Controls swept together over all their stops, and the GPUs they are swept for (each pair
#: costs a sweep for every pair of stops: 16 beyond the one-at-a-time settings).
PAIRS = (("network.inter_node.bandwidth", "network.latency"),)
PAIR_GPUS = ("h100",)


def bases(scn: Scenario) -> dict[str, Scenario]:
    """The explorer's base scenario of each GPU: its preset with the book's other assumptions."""
    return compared(GPUS, scn)


def positions(base: Scenario, pairs: bool = True) -> list[tuple[int, ...]]:
    """The positions of the controls (a stop index per control) swept around ``base``: the base,
    each control alone at each other stop, and (``pairs``) each pair of :data:`PAIRS` at every
    pair of stops."""
    home = tuple(c.base_index(base) for c in CONTROLS)
    out = [home]
    for i, c in enumerate(CONTROLS):
        for j in range(len(c.stops(base))):
            if j != home[i]:
                out.append((*home[:i], j, *home[i + 1 :]))
    index = {c.key: i for i, c in enumerate(CONTROLS)}
    for a, b in PAIRS if pairs else ():
        ia, ib = index[a], index[b]
        for ja in range(len(CONTROLS[ia].stops(base))):
            for jb in range(len(CONTROLS[ib].stops(base))):
                p = list(home)
                p[ia], p[ib] = ja, jb
                out.append(tuple(p))
    seen: dict[tuple[int, ...], None] = {}
    for p in out:
        seen.setdefault(p, None)
    return list(seen)


def overrides(base: Scenario, position: tuple[int, ...]) -> dict[str, Any]:
    """The ``--set`` values that move ``base`` to ``position`` (none at the base)."""
    home = tuple(c.base_index(base) for c in CONTROLS)
    return {
        c.key: c.stops(base)[j]
        for c, j, h in zip(CONTROLS, position, home, strict=True)
        if j != h
    }


def setting_id(gpu: str, position: tuple[int, ...]) -> str:
    """The page's name of a position: the GPU and the stop index of each control."""
    return gpu + ":" + ",".join(str(j) for j in position)


def scenario_at(base: Scenario, position: tuple[int, ...]) -> Scenario:
    """The scenario of ``position`` around ``base``."""
    changes = overrides(base, position)
    return resolve_overrides(base, changes) if changes else base


def settings(scn: Scenario) -> dict[str, Scenario]:
    """Every setting the explorer offers for a book built for ``scn``, by :func:`setting_id`."""
    out = {}
    for gpu, base in bases(scn).items():
        for p in positions(base, gpu in PAIR_GPUS):
            out[setting_id(gpu, p)] = scenario_at(base, p)
    return out


# --- What the page shows ---------------------------------------------------------------------
#: The headline numbers the page shows, with what it calls them (keys of
#: :func:`dmlimits.search.results.headline`).
HEADLINE = (
    ("linear_scaling_crossing_flop", "linear scaling ends"),
    ("t_crit_own_flop", "critical compute (closed form)"),
    ("last_feasible_flop", "largest run that finishes in time (latency wall)"),
    ("t_limit_own_flop", "latency wall (closed form)"),
)

#: The columns of the sweep the page reads at each model.
COLUMNS = (
    "training_flop", "utilization", "feasible", "binding", "n_gpu", "dp", "tp_model", "tp_ff",
    "pp", "v", "ep", "m", "zero_bubble", "batch_tokens", "layers", "d_model", "t_step",
    "loss_matmul", "loss_bandwidth", "loss_latency", "loss_bubble",
)  # fmt: skip


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
    """How the page prints one stop of a control."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, str):
        return value
    if control.unit == "B/s":
        return f"{value / 1e9:.4g} GB/s"
    if control.unit == "s":
        return f"{value * 1e6:.4g} µs"
    if control.unit == "months":
        return f"{value:.4g} months"
    return f"{value:.4g}"


def result(scn: Scenario) -> dict[str, Any]:
    """What the page shows for one setting: the sweep's columns, the headline numbers and the
    ideal matmul time of each model's step (its useful work at the effective rate)."""
    rows = search.sweep(scn)
    head = search.headline(scn)
    columns = {k: [r.get(k, math.nan) for r in rows] for k in COLUMNS}
    eff = float(scn["hardware.effective_utilization"])
    columns["ideal"] = [r["utilization"] * r["t_step"] / eff for r in rows]
    return {"headline": {k: head[k] for k, _ in HEADLINE}, "sweep": columns}


def data(scn: Scenario) -> dict[str, Any]:
    """Everything the explorer page reads, for a book built for ``scn``."""
    from dmlimits.book import whole_run  # the paper's curve; whole_run draws with matplotlib

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
            })  # fmt: skip
        gpus.append({"name": gpu, "label": base.gpu_label, "controls": controls,
                     "home": list(home), "pairs": gpu in PAIR_GPUS})  # fmt: skip
        for p in positions(base, gpu in PAIR_GPUS):
            s = scenario_at(base, p)
            results[setting_id(gpu, p)] = {**result(s), **take_home(gpu, s, default)}
    return {
        "gpus": gpus,
        "initial_gpu": scn["gpu"] if scn["gpu"] in GPUS else "h100",
        # the compute first picked: the grid point nearest where the post says linear scaling ends
        "initial_compute": published.value("paper1.post_slowdown_flop"),
        "headline_labels": [list(h) for h in HEADLINE],
        "loss_labels": {k: search.LOSS_LABELS[k] for k in search.LOSSES},
        "pairs": [list(p) for p in PAIRS],
        "keys": [c.key for c in CONTROLS],
        "paper": {"training_flop": list(flop), "utilization": list(util)},
        "threshold_fraction": search.linear_end_threshold(scn)
        / float(scn["hardware.effective_utilization"]),
        "results": results,
    }


def grid_size(scn: Scenario) -> dict[str, int]:
    """How many settings the explorer sweeps, in all and per GPU."""
    per_gpu = {gpu: len(positions(base, gpu in PAIR_GPUS)) for gpu, base in bases(scn).items()}
    return {"total": sum(per_gpu.values()), **per_gpu}


def schema_label(key: str) -> str:
    """A scenario key's own description (for the page's list of controls)."""
    return SCHEMA[key].doc
