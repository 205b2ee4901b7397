"""The notation page, generated from the symbol registry."""

from __future__ import annotations

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


def used_symbols() -> set:
    """Every symbol that appears in a derivation of the library."""
    out: set = set()
    for d in all_derivations():
        out |= d.free_symbols
    return out


def markdown_table() -> str:
    """A MyST table: symbol, meaning, unit, where defined; sorted by chapter then symbol."""
    import_library()  # every module that declares symbols
    rows = ["| Symbol | Meaning | Unit | Defined in |", "|---|---|---|---|"]
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
        rows.append(f"| ${info.latex}$ | {meaning} | ${unit}$ | {where} |")
    return "\n".join(rows)
