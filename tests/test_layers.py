"""The library's layers: each subpackage imports only from the layers below it, and no import,
at the top of a file or inside a function, closes a cycle.

The order is written once, in :data:`LAYERS`.  A module may import from its own layer (without a
cycle) and from any layer before it; ``dmlimits/__init__.py`` (the public API) and ``__main__``
stand above them all.  A function-level import carries a comment on its line, or on the line
before, that names what it avoids paying at import time.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "lib" / "dmlimits"

#: The layers, lowest first: the name of each subpackage (or top-level module) of ``dmlimits``.
LAYERS = ("core", "costs", "search", "measured", "premises", "book", "build", "cli")
#: Above every layer: the package's public API and its entry point.
TOP = ("dmlimits", "dmlimits.__main__")


def module_name(path: Path, package: Path = PACKAGE) -> str:
    parts = list(path.relative_to(package.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules(package: Path = PACKAGE) -> dict[str, Path]:
    """Every module of the package at ``package``, by its dotted name."""
    return {module_name(p, package): p for p in sorted(package.rglob("*.py"))}


def imports(name: str, path: Path, known: set[str]) -> list[tuple[str, int, bool]]:
    """(imported module of the library, line, whether inside a function) for every import
    statement of the module's source."""
    tree = ast.parse(path.read_text(), str(path))
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    top = {id(node) for node in tree.body}
    for node in tree.body:  # imports under a module-level if/try are module-level too
        if isinstance(node, ast.If | ast.Try):
            top |= {id(n) for n in ast.walk(node)}
    found = []
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                head = ".".join(base + ([node.module] if node.module else []))
            else:
                head = node.module or ""
            targets = [
                f"{head}.{a.name}" if f"{head}.{a.name}" in known else head for a in node.names
            ]
        for target in targets:
            if target in known and target != name:
                found.append((target, node.lineno, id(node) not in top))
    return found


def layer_of(name: str) -> int:
    """The rank of a module's layer in :data:`LAYERS`; :data:`TOP` ranks above them all."""
    if name in TOP:
        return len(LAYERS)
    head = name.split(".")[1]
    if head not in LAYERS:
        raise AssertionError(f"{name}: in no layer; add its subpackage to LAYERS")
    return LAYERS.index(head)


def violations(graph: dict[str, set[str]]) -> list[str]:
    """Every edge that points up a layer, and every cycle, of an import graph
    (module -> the modules it imports)."""
    out = [
        f"{a} imports {b}, a layer above its own"
        for a, targets in graph.items()
        for b in sorted(targets)
        if layer_of(b) > layer_of(a)
    ]
    # Cycles: depth-first search, each cycle reported once by the module it was found from.
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                out.append("cycle: " + " -> ".join([*stack[stack.index(nxt) :], nxt]))
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
    return out


def library_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    found = modules(package)
    known = set(found)
    graph = {name: {t for t, _, _ in imports(name, path, known)} for name, path in found.items()}
    # A module's own package is imported with it; the package's __init__ is not an import of
    # the modules below it unless it names them.
    for name, targets in graph.items():
        targets.discard(name.rsplit(".", 1)[0] if "." in name else name)
    return graph


def test_every_module_is_in_a_layer():
    for name in modules():
        layer_of(name)


def test_no_import_points_up_a_layer_or_closes_a_cycle():
    assert violations(library_graph()) == []


def test_the_rule_rejects_a_cost_module_that_imports_the_book():
    """The check itself: a synthetic graph in which a cost module imports a figure helper, and
    one in which two core modules import each other."""
    graph = {
        "dmlimits.costs.collectives": {"dmlimits.core.units", "dmlimits.book.figures"},
        "dmlimits.book.figures": {"dmlimits.costs.model"},
        "dmlimits.core.units": set(),
        "dmlimits.costs.model": set(),
    }
    assert violations(graph) == [
        "dmlimits.costs.collectives imports dmlimits.book.figures, a layer above its own"
    ]
    cyclic = {"dmlimits.core.a": {"dmlimits.core.b"}, "dmlimits.core.b": {"dmlimits.core.a"}}
    assert violations(cyclic) == ["cycle: dmlimits.core.a -> dmlimits.core.b -> dmlimits.core.a"]
    with pytest.raises(AssertionError, match="in no layer"):
        layer_of("dmlimits.elsewhere.x")


def test_a_module_placed_in_the_wrong_layer_is_found(tmp_path):
    """The same check on real files: a temporary cost module that imports the book's glue."""
    pkg = tmp_path / "dmlimits"
    for sub in ("costs", "book"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "book" / "glue.py").write_text("")
    (pkg / "costs" / "bad.py").write_text("def f():\n    from dmlimits.book import glue\n")
    assert violations(library_graph(pkg)) == [
        "dmlimits.costs.bad imports dmlimits.book.glue, a layer above its own"
    ]


def test_a_function_level_import_says_what_it_avoids():
    """An import inside a function of the library has a comment on its line or the line before
    it (the import time or the heavy dependency it defers)."""
    bare = []
    for name, path in modules().items():
        lines = path.read_text().splitlines()
        tree = ast.parse(path.read_text())
        top = {id(n) for n in tree.body}
        for node in tree.body:
            if isinstance(node, ast.If | ast.Try):
                top |= {id(n) for n in ast.walk(node)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom) and id(node) not in top:
                here = lines[node.lineno - 1]
                before = lines[node.lineno - 2].strip() if node.lineno > 1 else ""
                if "#" not in here and not before.startswith("#"):
                    bare.append(f"{name}:{node.lineno}: {here.strip()}")
    assert bare == []


def bound_names() -> dict[str, dict[str, list[str]]]:
    """Every name a module of the library is imported as, in the library, the tests, the benches
    and the chapters' code: module -> name -> the files that bind it."""
    import re

    found: dict[str, dict[str, list[str]]] = {}
    known = set(modules())
    # The chapters' code cells and the Python blocks of their exercises' solutions.
    cell = re.compile(r"```(?:\{code-cell\}[^\n]*|python)\n(?:(?::\w+:[^\n]*\n)+)?(.*?)\n```", re.S)
    sources = [
        (p, p.read_text()) for d in ("lib", "tests", "bench") for p in (ROOT / d).rglob("*.py")
    ]
    sources += [
        (p, m.group(1))
        for p in (ROOT / "notebooks").glob("*.md")
        for m in cell.finditer(p.read_text())
    ]
    for path, text in sources:
        try:
            tree = ast.parse(text)
        except SyntaxError:  # a cell of IPython magics
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for a in node.names:
                    if f"{node.module}.{a.name}" in known:
                        names = found.setdefault(f"{node.module}.{a.name}", {})
                        names.setdefault(a.asname or a.name, []).append(str(path.relative_to(ROOT)))
    return found


def test_each_module_is_imported_under_one_name_everywhere():
    """``from dmlimits.costs import collectives as co`` in one file and ``as coll`` in another
    make a reader learn two names for one module: every module has one."""
    several = {m: names for m, names in bound_names().items() if len(names) > 1}
    assert several == {}
