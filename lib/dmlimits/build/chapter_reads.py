"""Which assumptions a chapter read, so that a changed assumption executes only the chapters
that read it (issue #16).

Each chapter's kernel lists the assumptions it reads (:func:`dmlimits.build.reads.record`:
a key when one value is read, ``*`` when the values are read whole, as a sweep's cache address
or a copy does, ``@name`` for the scenario's name).  After a chapter runs, the build remembers
what it read and the values it read (:func:`remember`).  When the book is built for another
scenario, a chapter whose source, library and environment are unchanged and which read none of
the assumptions that differ is not executed again: its execution is copied, with the new
scenario's parameters in its injected cell (:func:`reusable`, :func:`reparameterize`).  Its
outputs are the ones it would compute, since nothing it read changed and a chapter computes
the same outputs from the same inputs (nbval checks it for every chapter of the default book;
``tests/test_chapter_reads.py`` executes again every chapter a changed run length copies).

A chapter takes part only when its code reads its parameters in the arguments of
``sc.resolve(...)`` alone (its scenario, or a variant such as ``overrides={**overrides,
"training.months": 12}``): what it then reads goes through a scenario and is listed
(:func:`reads_only_through_the_scenario`).  A chapter that reads a parameter anywhere else, or
whose code is not plain Python, is executed again for every other scenario.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

from dmlimits.build.reads import ALL_READ
from dmlimits.core.plumbing import read_json, write_json
from dmlimits.core.scenario import Scenario

#: The parameters a chapter may read through the scenario alone.
SCENARIO_PARAMETERS = ("scenario", "overrides", "scenario_name")
#: Executions remembered for each chapter's source (the most recent are kept).
KEEP = 12
#: Where the lists are kept, under the cache of executed notebooks.
FOLDER = "reads"
#: What a kernel reads of its scenario that the build's scenario may hold otherwise: the kernel
#: resolves a preset and overrides (:func:`dmlimits.build.engine.notebook_parameters`), whose
#: description, origin and overrides are not a scenario file's.  An execution that read one
#: of them is kept for its own parameters only.  (The name is passed to the kernel as is.)
NOT_COMPARED = ("@description", "@origin", "@overrides")


def reads_only_through_the_scenario(cells: list[Any]) -> str | None:
    """``None`` when the chapter's code reads its parameters only in the arguments of
    ``sc.resolve(...)``, else why not (to print)."""
    declared: set[str] = set()
    code = []
    for cell in cells:
        if cell.get("cell_type") != "code":
            continue
        tags = cell.get("metadata", {}).get("tags", [])
        if "parameters" in tags:
            try:
                tree = ast.parse(cell["source"])
            except SyntaxError:
                return "its parameters cell is not plain Python"
            declared |= {
                t.id for node in tree.body if isinstance(node, ast.Assign)
                for t in node.targets if isinstance(t, ast.Name)
            }  # fmt: skip
        else:
            code.append(cell["source"])
    other = declared - set(SCENARIO_PARAMETERS)
    if other:
        return f"it takes parameters besides the scenario ({', '.join(sorted(other))})"
    for i, source in enumerate(code, start=1):
        try:
            tree = ast.parse(source)
        except SyntaxError:
            return f"its code cell {i} is not plain Python"
        allowed: set[int] = set()
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "resolve"
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "sc"
            ):
                for arg in [*node.args, *(k.value for k in node.keywords)]:
                    allowed |= {id(a) for a in ast.walk(arg) if isinstance(a, ast.Name)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and node.id in declared and id(node) not in allowed:
                return f"its code cell {i} reads the parameter {node.id} (line {node.lineno})"
    return None


def read_value(scn: Scenario, key: str) -> str:
    """What ``key`` (an assumption, or ``@name`` and the like) is in ``scn``, as canonical
    JSON: equal strings for equal values, of the same type."""
    if key.startswith("@"):
        value: Any = getattr(scn, key[1:])
        if key == "@overrides":
            value = [list(pair) for pair in value]
    else:
        value = scn.values.get(key, "<not an assumption>")
    return json.dumps(value, sort_keys=True, default=repr)


def _path(cache: Path, source_key: str) -> Path:
    return cache / FOLDER / f"{source_key}.json"


def kept_entries(cache: Path, source_key: str) -> list[dict[str, Any]]:
    entries = read_json(_path(cache, source_key))
    return entries if isinstance(entries, list) else []


def remember(cache: Path, source_key: str, key: str, scn: Scenario, reads: set[str] | None) -> bool:
    """Remember that the execution ``key`` of a chapter (its source and environment:
    ``source_key``) read ``reads`` of ``scn``; False when it read every value (no other
    scenario can reuse it), one of :data:`NOT_COMPARED`, or its kernel did not record
    (``None``)."""
    if reads is None or ALL_READ in reads or reads & set(NOT_COMPARED):
        return False
    entries = [e for e in kept_entries(cache, source_key) if e.get("key") != key]
    entries.append({"key": key, "reads": {k: read_value(scn, k) for k in sorted(reads)}})
    write_json(_path(cache, source_key), entries[-KEEP:])  # atomically: two builds may race
    return True


def reusable(cache: Path, source_key: str, scn: Scenario) -> tuple[str, list[str]] | None:
    """An execution of the chapter, kept in ``cache``, that read only values ``scn`` shares:
    its key and the assumptions it read; ``None`` when there is none."""
    for entry in reversed(kept_entries(cache, source_key)):
        reads = entry.get("reads")
        key = entry.get("key")
        if not isinstance(reads, dict) or not isinstance(key, str):
            continue
        if not (cache / f"{key}.ipynb").is_file():
            continue
        if all(read_value(scn, k) == v for k, v in reads.items()):
            return key, sorted(reads)
    return None


def reparameterize(path: Path, parameters: dict[str, Any], reads: list[str]) -> None:
    """Give the execution at ``path`` the injected cell papermill writes for ``parameters``
    (so that the notebook re-runs for the scenario it is now part of) and say, in its
    metadata, which assumptions it read."""
    import nbformat  # the build's notebook tools load only when building

    # the build's notebook tools load only when building
    from papermill.translators import translate_parameters

    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if "injected-parameters" in cell.metadata.get("tags", []):
            cell.source = translate_parameters("python3", "python", parameters, "Parameters")
    nb.metadata.setdefault("papermill", {})["parameters"] = parameters
    nb.metadata.setdefault("dmlimits", {})["reused"] = {
        "why": "this chapter read none of the assumptions that differ from the build it was "
        "executed for",
        "reads": reads,
    }
    nbformat.write(nb, path)
