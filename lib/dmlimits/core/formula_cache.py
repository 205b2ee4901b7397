"""Formulas kept on disk, so that each process does not build them again.

Every process that evaluates the book's formulas builds them first: sympy derives the model's
closed forms and exponents, the matmul model's cost expressions and the parallelisms' cost
formulas, and ``lambdify`` turns them into numpy functions.  It is the same work in every
chapter's kernel, every test worker and every command (``bench/bench_search.py`` and
``bench/bench_build.py`` measure it).

When the environment variable :data:`CACHE_ENV` names a folder, this module keeps two kinds of
result there, each addressed by everything it is computed from: the files of the builder's
module and of every module it imports (:func:`closure_fingerprint`), the library's data and
presets, the versions of Python, sympy and numpy, the builder's name and its arguments.  A
changed formula, constant or package gives every result that can depend on it a new address;
an edit to a module the builder never imports (the model of measured runs, for the matmul
model's formulas) leaves its results kept.

* :func:`expressions` keeps what a builder returns (a sympy expression, or dicts, tuples and
  lists of them with plain keys) as its tree: each node's class and its arguments in their
  stored order, each atom as its ``srepr``.  It is read back with sympy's evaluation off: the
  tree that was built, term for term and in the same order, so that it prints the same.  A
  result is kept only when reading it back gives an equal tree and the same ``srepr``.
* :func:`lambdified` keeps the Python source that ``sympy.lambdify`` wrote, and executes it
  again in the namespace ``lambdify`` gives the same modules, with the few names ``lambdify``
  added for it (``functools.reduce``, say) imported again.  It is kept only when every global
  name of that source is the same object, read back.

Without the folder (the variable unset or ``off``: a chapter run on its own in JupyterLab or
with papermill) everything is built in the process.  The fingerprints are taken once a
process, at the first formula each keeps or reads: a process whose library files are edited
under it should be started again (as after any edit to a module it has imported).  The
Makefile and the build name ``_build/cache/formulas``.  ``tests/test_formula_cache.py`` checks
that every kept builder reads back what a fresh build returns.
"""

from __future__ import annotations

import ast
import dis
import functools
import importlib
import inspect
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import sympy as sp
from sympy.core.function import UndefinedFunction
from sympy.functions.elementary.piecewise import ExprCondPair

from dmlimits.core.plumbing import cache_folder, digest, read_json, write_json
from dmlimits.core.printing import Log2

#: The environment variable naming the folder of kept formulas ("off" or unset: none kept).
CACHE_ENV = "DMLIMITS_FORMULA_CACHE"
#: The layout of a kept file; a new layout gives every result a new address.
FORMAT = 1

#: What this process read from the folder and wrote to it (for the tests and the benches).
#:
#: :meta hide-value:
COUNTS = {"read": 0, "written": 0, "not kept": 0}


_ROOT = Path(__file__).resolve().parents[1]  # the package dmlimits
#: The files a fingerprint reads: code, data, presets.
_FINGERPRINTED = (".py", ".csv", ".yaml", ".md")


def _fingerprint(paths: list[Path]) -> str:
    return digest(*(part for path in sorted(paths)
                    for part in (str(path.relative_to(_ROOT)), file_digest(path))))  # fmt: skip


@functools.cache
def file_digest(path: Path) -> str:
    """The hash of one file of the library, read once a process (the closures of several
    modules share most of their files, and every one holds the data files)."""
    return digest(path.read_bytes())


@functools.cache
def library_fingerprint() -> str:
    """A hash of every file of the installed library (code, data, presets): a changed formula
    or constant changes it, and so the address of every executed notebook the build keeps and
    of a kept result that names no module of the library.  Taken once a process."""
    return _fingerprint([p for p in _ROOT.rglob("*") if p.is_file() and p.suffix in _FINGERPRINTED])


def _module_file(name: str) -> Path | None:
    """The source file of the library's module ``name`` (``dmlimits.a.b``), if it has one."""
    if name.split(".")[0] != "dmlimits":
        return None
    parts = name.split(".")[1:]
    candidates = [_ROOT.joinpath(*parts, "__init__.py")]
    if parts:
        candidates.insert(0, _ROOT.joinpath(*parts[:-1], parts[-1] + ".py"))
    return next((path for path in candidates if path.is_file()), None)


@functools.cache
def imported(name: str, path: Path) -> frozenset[str]:
    """The library's modules that the source of module ``name`` imports anywhere (at the top or
    inside a function), read from its syntax tree: ``import dmlimits.x``, ``from .x import y``
    (``y`` too when it is a module), ``from . import y``.  Read once a process: every closure
    shares it, so that the closures of several modules do not parse the same modules again."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == "dmlimits"}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                head = ".".join(base + ([node.module] if node.module else []))
            elif (node.module or "").split(".")[0] == "dmlimits":
                head = node.module
            else:
                continue
            found.add(head)
            found |= {f"{head}.{a.name}" for a in node.names}
    return frozenset(m for m in found if _module_file(m) is not None)


@functools.cache
def data_files() -> tuple[Path, ...]:
    """The library's data files and presets (what every fingerprint reads besides code)."""
    return tuple(p for p in _ROOT.rglob("*") if p.is_file() and p.suffix in _FINGERPRINTED[1:])


@functools.cache
def kept_closures() -> Path | None:
    """Where the closures are kept for the library's code as it is (the address hashes every
    module's source), or ``None`` when no formula is kept: reading them is far cheaper than
    parsing every module again in each kernel and test process."""
    folder = cache_dir()
    if folder is None:
        return None
    return folder / f"closures-{_fingerprint(list(_ROOT.rglob('*.py')))}.json"


@functools.cache
def import_closure(name: str) -> tuple[str, ...]:
    """Every module of the library that importing ``name`` can run: the modules its source
    imports anywhere (read from its syntax tree), theirs in turn, and every package above
    each.  Kept with the formulas (``kept_closures``)."""
    path = kept_closures()
    kept = read_json(path)
    if isinstance(kept, dict) and isinstance(kept.get(name), list):
        return tuple(kept[name])
    closure = _closure(name)
    if path is not None:
        try:
            write_json(path, {**(read_json(path) or {}), name: list(closure)})
        except OSError:  # a folder that cannot be written keeps nothing
            pass
    return closure


def _closure(name: str) -> tuple[str, ...]:
    seen: set[str] = set()
    todo = [name]
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        parts = module.split(".")
        todo.extend(".".join(parts[:i]) for i in range(1, len(parts)))
        path = _module_file(module)
        if path is not None:
            todo.extend(imported(module, path) - seen)
    return tuple(sorted(m for m in seen if _module_file(m) is not None))


@functools.cache
def closure_fingerprint(name: str) -> str:
    """A hash of the files of :func:`import_closure` of module ``name`` and of every data file
    and preset of the library: what a result computed by that module can depend on.  A change
    to a module it never imports (for the search, the model of measured runs) leaves it alone.
    Taken once a process."""
    code = [_module_file(m) for m in import_closure(name)]
    return _fingerprint([*code, *data_files()])


@functools.cache
def environment_key(module: str | None = None) -> str:
    """The fingerprint of what a result of ``module`` can depend on (:func:`closure_fingerprint`;
    the whole library's when ``module`` is ``None`` or not the library's) and the versions that
    build and print formulas, taken once a process (see the module's note on a library edited
    under a running process)."""
    inside = module is not None and _module_file(module) is not None
    fingerprint = closure_fingerprint(module) if inside else library_fingerprint()
    return "\0".join((str(FORMAT), fingerprint, sys.version, sp.__version__, np.__version__))


def cache_dir() -> Path | None:
    """The folder of kept formulas, or ``None`` when none are kept."""
    return cache_folder(CACHE_ENV)


def entry_path(key: str, module: str | None = None) -> Path | None:
    folder = cache_dir()
    if folder is None:
        return None
    return folder / f"{digest(environment_key(module), key)}.json"


def _store(path: Path, data: dict) -> bool:
    """:func:`write_json`, except that a folder that cannot be written (not a folder, a full
    disk) keeps nothing and stops nothing: the formula was built, and the process goes on with
    it."""
    try:
        write_json(path, data)
    except OSError:
        COUNTS["not kept"] += 1
        return False
    COUNTS["written"] += 1
    return True


# --- Sympy results ------------------------------------------------------------------------------
class _NotKept(Exception):
    """A result this module cannot write and read back exactly."""


@functools.cache
def _sympy_namespace() -> dict[str, Any]:
    """The names an ``srepr`` of the book's expressions uses: sympy's, and the book's own
    function classes."""

    namespace: dict[str, Any] = {}
    exec("from sympy import *", namespace)  # a fixed statement
    namespace.update(ExprCondPair=ExprCondPair, Log2=Log2)
    return namespace


def _tree(expr: sp.Basic) -> Any:
    """An expression as nested lists: an atom as its ``srepr``, any other node as its class's
    name and its arguments in the order they are stored (``srepr`` prints a sum's or a
    product's terms in printing order, which is not always the stored one)."""
    if not expr.args:
        return sp.srepr(expr)
    func = expr.func
    if isinstance(func, UndefinedFunction):
        name = {"undefined": func.__name__}
    elif _sympy_namespace().get(func.__name__) is func:
        name = func.__name__
    else:
        raise _NotKept(f"the class {func.__name__}")
    return [name, [_tree(a) for a in expr.args]]


def _untree(data: Any) -> sp.Basic:
    namespace = _sympy_namespace()
    if isinstance(data, str):
        return eval(data, dict(namespace))  # an atom's srepr, written by _tree
    name, args = data
    func = sp.Function(name["undefined"]) if isinstance(name, dict) else namespace[name]
    return func(*(_untree(a) for a in args))


def _encode(value: Any) -> Any:
    if isinstance(value, sp.Basic):
        return {"sympy": _tree(value)}
    if isinstance(value, dict):
        return {"dict": [[_encode(k), _encode(v)] for k, v in value.items()]}
    if isinstance(value, tuple | list):
        return {type(value).__name__: [_encode(v) for v in value]}
    if value is None or isinstance(value, bool | int | float | str):
        return {"value": value}
    raise _NotKept(f"a {type(value).__name__}")


def _decode(data: Any) -> Any:
    ((kind, body),) = data.items()
    if kind == "sympy":
        with sp.evaluate(False):  # each node as it was stored, not simplified again
            return _untree(body)
    if kind == "dict":
        return {_decode(k): _decode(v) for k, v in body}
    if kind == "tuple":
        return tuple(_decode(v) for v in body)
    if kind == "list":
        return [_decode(v) for v in body]
    if kind == "value":
        return body
    raise ValueError(f"unknown kind {kind!r}")


def same_value(a: Any, b: Any) -> bool:
    """The same structure, and every expression with the same ``srepr`` and equal."""
    if isinstance(a, sp.Basic):
        return isinstance(b, sp.Basic) and sp.srepr(a) == sp.srepr(b) and a == b
    if isinstance(a, dict):
        return (
            isinstance(b, dict)
            and len(a) == len(b)
            and all(
                same_value(ka, kb) and same_value(a[ka], b[kb])
                for ka, kb in zip(a, b, strict=True)
            )
        )
    if isinstance(a, tuple | list):
        return (
            type(a) is type(b)
            and len(a) == len(b)
            and all(same_value(x, y) for x, y in zip(a, b, strict=True))
        )
    return type(a) is type(b) and a == b


def keep_result(key: str, value: Any, module: str | None = None) -> bool:
    """Write ``value`` under ``key`` if it reads back the same; whether it was written.
    ``module``: the library's module that computed it (its address then depends on that
    module's imports only; on the whole library when ``None``)."""
    path = entry_path(key, module)
    if path is None:
        return False
    try:
        data = _encode(value)
        kept = same_value(value, _decode(json.loads(json.dumps(data))))
    except (_NotKept, SyntaxError, NameError, TypeError, ValueError):
        kept = False
    if not kept:
        COUNTS["not kept"] += 1
        return False
    return _store(path, {"key": key, "result": data})


def read_result(key: str, module: str | None = None) -> tuple[bool, Any]:
    """``(True, value)`` when a result is kept under ``key`` (and ``module``, as
    :func:`keep_result`), else ``(False, None)``."""
    data = read_json(entry_path(key, module))
    if data is None or data.get("key") != key:
        return False, None
    try:
        value = _decode(data["result"])
    except (KeyError, SyntaxError, NameError, TypeError, ValueError):
        return False, None
    COUNTS["read"] += 1
    return True, value


def expressions(builder: Callable[..., Any]) -> Callable[..., Any]:
    """Keep what ``builder`` returns for each tuple of positional arguments (their ``repr`` is
    part of the address).  Use it under ``functools.cache``, which keeps the result in the
    process; ``.build`` is the builder itself."""
    name = f"{builder.__module__}.{builder.__qualname__}"

    @functools.wraps(builder)
    def kept(*args: Any) -> Any:
        key = f"expressions {name}{args!r}"
        found, value = read_result(key, builder.__module__)
        if found:
            return value
        value = builder(*args)
        keep_result(key, value, builder.__module__)
        return value

    kept.build = builder  # type: ignore[attr-defined]
    kept.key = name  # type: ignore[attr-defined]
    return kept


def is_kept(kept: Callable[..., Any], *args: Any) -> bool:
    """Whether what the builder ``kept`` (wrapped by :func:`expressions`, under
    ``functools.cache`` or not) returns for ``args`` is kept on disk."""
    inner = getattr(kept, "__wrapped__", kept)
    path = entry_path(f"expressions {inner.key}{args!r}", inner.build.__module__)
    return path is not None and path.is_file()


# --- Lambdified functions -----------------------------------------------------------------------
def _modules_key(modules: Any) -> str:
    return repr(modules)


_NAMESPACES: dict[str, dict[str, Any]] = {}


def lambdify_namespace(modules: Any) -> dict[str, Any]:
    """The globals ``lambdify`` gives a function of ``modules`` (those of a trivial one)."""
    key = _modules_key(modules)
    if key not in _NAMESPACES:
        _NAMESPACES[key] = sp.lambdify((), sp.Integer(0), modules).__globals__
    return _NAMESPACES[key]


def _global_names(code: Any) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if inspect.iscode(const):
            names |= _global_names(const)
    return names


def _importable(obj: Any) -> list[str] | None:
    """``[module, name]`` that imports ``obj`` itself, or ``None``."""
    module, name = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if not module or not name or "." in name:
        return None
    try:
        found = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        return None
    return [module, name] if found is obj else None


def loaded_globals(code: Any) -> set[str]:
    """The global names ``code`` and the functions it defines read (not the attributes they
    look up, which ``co_names`` holds too)."""
    names = {i.argval for i in dis.get_instructions(code) if i.opname == "LOAD_GLOBAL"}
    for const in code.co_consts:
        if inspect.iscode(const):
            names |= loaded_globals(const)
    return names


def numpy_names(names: set[str]) -> dict[str, Any] | None:
    """What lambdify's namespace for ``"numpy"`` holds under each of ``names`` (``from numpy
    import *`` then ``from numpy.linalg import *``, and ``numpy`` itself), found without
    building that namespace, which imports numpy's lazily loaded submodules; ``None`` when a
    name is not one of these (lambdify's own few, such as ``I``)."""
    out: dict[str, Any] = {}
    for name in names:
        if name in np.linalg.__all__:
            out[name] = getattr(np.linalg, name)
        elif name in np.__all__:
            out[name] = getattr(np, name)
        elif name == "numpy":
            out[name] = np
        else:
            return None
    return out


def _from_source(
    source: str, modules: Any, name: str, imports: dict[str, list[str]]
) -> Callable[..., Any]:
    code = compile(source, f"<kept formula {name}>", "exec")
    namespace = None
    if modules == "numpy":
        namespace = numpy_names(loaded_globals(code) - set(imports))
    if namespace is None:
        namespace = dict(lambdify_namespace(modules))
    for global_name, (module, attribute) in imports.items():
        namespace[global_name] = getattr(importlib.import_module(module), attribute)
    exec(code, namespace)
    return namespace["_lambdifygenerated"]


def lambdified(
    key: str,
    build: Callable[[], tuple[Sequence[Any], Any]],
    modules: Any = "numpy",
    **options: Any,
) -> Callable[..., Any]:
    """``sympy.lambdify(*build(), modules, **options)``, its source kept under ``key`` (with
    the modules and options): a kept source is executed again and ``build`` is not called."""
    full = f"lambdified {key} {_modules_key(modules)} {sorted(options.items())!r}"
    data = read_json(entry_path(full, build.__module__))
    if data is not None and data.get("key") == full:
        try:
            fn = _from_source(data["source"], modules, key, data["imports"])
        except (KeyError, SyntaxError, NameError, TypeError, ValueError, ImportError):
            pass
        else:
            COUNTS["read"] += 1
            return fn
    args, expr = build()
    fn = sp.lambdify(args, expr, modules, **options)
    path = entry_path(full, build.__module__)
    if path is not None:
        imports = {n: _importable(fn.__globals__[n]) for n in foreign_names(fn, modules)}
        if None in imports.values():
            COUNTS["not kept"] += 1
        else:
            _store(path, {"key": full, "source": inspect.getsource(fn), "imports": imports})
    return fn


def foreign_names(fn: Callable[..., Any], modules: Any = "numpy") -> list[str]:
    """The global names of a lambdified ``fn`` that the namespace of ``modules`` does not hold
    as the same object: lambdify added them (``functools.reduce`` for a ``Max``, say).  Each
    is kept as the module and name that import it; a function with one that cannot be
    imported so is not kept."""
    namespace, own = lambdify_namespace(modules), fn.__globals__
    return sorted(
        n
        for n in _global_names(fn.__code__)
        if n in own and not (n in namespace and namespace[n] is own[n])
    )
