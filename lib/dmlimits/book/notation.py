"""The notation page, generated from the symbol registry."""

from __future__ import annotations

import sys

import sympy as sp

from dmlimits.core.derivation import all_derivations, import_library
from dmlimits.core.symbols import REGISTRY
from dmlimits.core.units import unit_latex

CHAPTER_TITLES = {
    "model": "The model of training",
    "matmul": "One matmul on one GPU",
    "collectives": "Collectives on a two-level network",
    "data_parallel": "Data parallelism",
    "tensor_parallel": "Tensor parallelism",
    "pipeline": "Pipeline parallelism",
    "expert_parallel": "Expert parallelism",
    "search": "The best parallelism at every scale",
    "reproduction": "Reproducing the paper's results",
    "closed_forms": "Critical compute and the latency wall",
    "diminishing_returns": "Diminishing returns at a fixed batch",
    "real_runs": "How close is the bound to real runs",
}

#: What the Python-name column says of a symbol that only a function builds, so that no
#: module attribute holds it (the per-level link times, for instance).
NO_PYTHON_NAME = "built by a function"


def used_symbols() -> set:
    """Every symbol that appears in a derivation of the library."""
    out: set = set()
    for d in all_derivations():
        out |= d.free_symbols
    return out


def python_names() -> dict[sp.Symbol, list[str]]:
    """For each registered symbol, every public module-level name of the library that holds it
    (``"dmlimits.costs.pipeline.n_pp"``), sorted: the names a student types to use the symbol in
    code (``from dmlimits.costs import pipeline as ppm`` then ``ppm.n_pp``).  Read from the
    imported modules themselves, so the Notation page cannot name an attribute that does not
    exist.  Symbols that only a function builds (no module attribute holds them) are absent."""
    import_library()  # every module that declares symbols
    out: dict[sp.Symbol, list[str]] = {}
    for name in sorted(m for m in sys.modules if m == "dmlimits" or m.startswith("dmlimits.")):
        for attr, value in vars(sys.modules[name]).items():
            if not attr.startswith("_") and isinstance(value, sp.Symbol) and value in REGISTRY:
                out.setdefault(value, []).append(f"{name}.{attr}")
    return out


def markdown_table() -> str:
    """A MyST table: symbol, meaning, unit, where defined, and the Python names that hold the
    symbol (:func:`python_names`); sorted by chapter then symbol."""
    import_library()  # every module that declares symbols
    names = python_names()
    rows = [
        "| Symbol | Meaning | Unit | Defined in | Python name |",
        "|---|---|---|---|---|",
    ]
    order = list(CHAPTER_TITLES)
    infos = sorted(
        REGISTRY,
        key=lambda i: (
            order.index(i.defined_in) if i.defined_in in order else len(order),
            i.symbol.name.lower(),
        ),
    )
    for info in infos:
        unit = unit_latex(info.unit)
        where = (
            f"{{doc}}`{CHAPTER_TITLES[info.defined_in]} <{info.defined_in}>`"
            if info.defined_in in CHAPTER_TITLES
            # A library module whose chapter is not in the book yet: name the module.
            else f"library module `dmlimits.{info.defined_in}`"
        )
        meaning = info.meaning.replace("|", "\\|")
        python = ", ".join(f"`{n}`" for n in names.get(info.symbol, [])) or NO_PYTHON_NAME
        rows.append(f"| ${info.latex}$ | {meaning} | ${unit}$ | {where} | {python} |")
    return "\n".join(rows)
