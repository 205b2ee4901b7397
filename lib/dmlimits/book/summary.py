"""Every parallelism at a glance: what moves, how much, over which link, whether it overlaps
with compute, and the latency it pays, each with what it is counted per (a GPU and a step, a
layer, a stage boundary), since the parallelisms' costs are not counted alike.  Each
parallelism's module declares its own ``SUMMARY`` (sympy expressions in registered symbols);
this module only collects and renders them, and gathers the rules of thumb that the page's card
quotes (:func:`rules_of_thumb`)."""

from __future__ import annotations

import importlib
from typing import Any

import numpy as np

from dmlimits.core import units as u
from dmlimits.core.scenario import Scenario
from dmlimits.core.symbols import REGISTRY
from dmlimits.costs import closed_forms, matmul
from dmlimits.costs import data_parallel as dpm
from dmlimits.costs import pipeline as ppm
from dmlimits.costs import tensor_parallel as tpm

MODULES = ("data_parallel", "tensor_parallel", "pipeline", "expert_parallel")
KEYS = (
    "parallelism",
    "what_moves",
    "volume",
    "volume_per",
    "link",
    "overlaps_compute",
    "latency",
    "latency_per",
)


def entries() -> list[dict]:
    """The ``SUMMARY`` of every parallelism module, in the book's order."""
    out = []
    for name in MODULES:
        module = importlib.import_module(f"dmlimits.costs.{name}")
        summary = getattr(module, "SUMMARY", None)
        if not isinstance(summary, dict) or set(KEYS) - set(summary):
            raise ValueError(
                f"dmlimits.costs.{name}.SUMMARY must be a dict with keys {', '.join(KEYS)}"
            )
        out.append({**summary, "module": name})
    return out


def check_units() -> None:
    """Volumes are in bytes and latencies in seconds (raises DimensionError otherwise)."""
    for entry in entries():
        u.check_unit(entry["volume"], REGISTRY.units, u.byte)
        u.check_unit(entry["latency"], REGISTRY.units, u.second)


def markdown() -> str:
    """A compact table of the formulas, then what moves and over which link, per parallelism."""
    table = [
        "| Parallelism | How much moves (bytes) | Latency paid (seconds) | Overlaps compute |",
        "|---|---|---|---|",
    ]
    details = []
    for e in entries():
        link = f"{{doc}}`{e['parallelism']} <{e['module']}>`"
        overlap = "yes" if e["overlaps_compute"] else "no"
        table.append(
            f"| {link} | ${REGISTRY.latex(e['volume'])}$ per {e['volume_per']} | "
            f"${REGISTRY.latex(e['latency'])}$ per {e['latency_per']} | {overlap} |"
        )
        details.append(
            f"{link}\n: **What moves:** {e['what_moves']}  \n  **Over which link:** {e['link']}"
        )
    return "\n".join(table) + "\n\n" + "\n\n".join(details)


#: The step of the latency wall by which :func:`rules_of_thumb` shows what the exponent alpha
#: does: the wall's growth when alpha rises by this much (the closed-forms chapter's figure).
ALPHA_STEP = 0.05


def rules_of_thumb(scn: Scenario) -> dict[str, Any]:
    """The handful of numbers a reader should remember, each computed where its chapter
    computes it, for the summary page's card:

    * ``nanobatch``: tokens per matmul below which streaming the weights from HBM outlasts the
      arithmetic (:func:`dmlimits.costs.matmul.min_nanobatch`, ``matmul-min-nanobatch``);
    * ``tokens_per_replica``: tokens of the batch per data-parallel replica at which the
      gradient all-reduce takes as long as the arithmetic
      (:func:`dmlimits.costs.data_parallel.compute_ratio` at two replicas and one token:
      the ratio is proportional to ``(N_DP - 1) / B``);
    * ``tp_side_nvlink``, ``tp_side_ib``: the side of a square tensor-parallel shard below which
      its traffic stops hiding behind its arithmetic on NVLink and on InfiniBand
      (:func:`dmlimits.costs.tensor_parallel.crossover_shard`);
    * ``bubble``: the bubble of 1F1B as an expression (``pipeline-bubble-1f1b``);
    * ``alpha``: the exponent of the batch per layer against compute that the scenario's laws
      imply (:func:`dmlimits.costs.closed_forms.implied_alpha`), and ``wall_factor``: how many
      times the closed-form latency wall grows when alpha rises by :data:`ALPHA_STEP`."""
    base = closed_forms.evaluate("latency_wall", scn, np.array([0.0]))[0]
    up = closed_forms.evaluate("latency_wall", scn, np.array([ALPHA_STEP]))[0]
    return {
        "nanobatch": matmul.min_nanobatch(scn),
        "tokens_per_replica": float(dpm.compute_ratio(scn, 2, 1.0)),
        "tp_side_nvlink": tpm.crossover_shard(scn, 0),
        "tp_side_ib": tpm.crossover_shard(scn, 1),
        "bubble": ppm.bubble_1f1b_derivation().result.rhs,
        "alpha": closed_forms.implied_alpha(scn),
        "alpha_step": ALPHA_STEP,
        "wall_factor": float(up / base),
    }
