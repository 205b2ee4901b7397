"""Every parallelism at a glance: what moves, how much, over which link, whether it overlaps
with compute, and the latency it pays, each with what it is counted per (a GPU and a step, a
layer, a stage boundary), since the parallelisms' costs are not counted alike.  Each
parallelism's module declares its own ``SUMMARY`` (sympy expressions in registered symbols);
this module only collects and renders them."""

from __future__ import annotations

import importlib

from dmlimits.core import units as u
from dmlimits.core.symbols import REGISTRY

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
