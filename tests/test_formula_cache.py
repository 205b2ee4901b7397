"""Formulas kept on disk (dmlimits.core.formula_cache): every kept builder reads back exactly what a
fresh build returns (the same tree, printed the same), every kept lambdified function computes
exactly what a fresh one does, and a result that cannot be read back so is never kept."""

from __future__ import annotations

import importlib
import json
import os
import pkgutil
import subprocess
import sys

import dmlimits
import numpy as np
import pytest
import sympy as sp
from dmlimits.core import formula_cache
from dmlimits.core.symbols import REGISTRY
from dmlimits.costs import matmul, model

#: Every builder the library keeps, with the arguments the book calls it with.
SPARSE_LAWS = [(sparse, law) for sparse in (False, True) for law in model.BATCH_LAWS]
KIND_MULTICAST = [(kind, mc) for kind in matmul.KINDS for mc in (False, True)]
KEPT = {
    "dmlimits.costs.model._closed_forms": SPARSE_LAWS,
    "dmlimits.costs.model._exponents": SPARSE_LAWS,
    "dmlimits.costs.matmul.traffic_expressions": KIND_MULTICAST,
    "dmlimits.costs.matmul.cost_expressions": KIND_MULTICAST,
    "dmlimits.costs.expert_parallel._level_probabilities": [()],
    **{
        f"dmlimits.costs.{m}._cost_formulas": [()]
        for m in ("collectives", "data_parallel", "tensor_parallel", "pipeline",
                  "expert_parallel", "step", "closed_forms")
    },
}  # fmt: skip


def kept_builders() -> dict[str, object]:
    """Every function of the library wrapped by :func:`formula_cache.expressions`, by the name
    of the module attribute that holds it."""
    found = {}
    for info in pkgutil.walk_packages(dmlimits.__path__, "dmlimits."):
        if info.name in ("dmlimits.__main__", "dmlimits.build.sphinxext"):
            continue
        module = importlib.import_module(info.name)
        for attr, value in list(vars(module).items()):
            for inner in (getattr(value, "__wrapped__", None), value):  # under functools.cache
                if callable(inner) and hasattr(inner, "build") and hasattr(inner, "key"):
                    found[f"{info.name}.{attr}"] = inner
                    break
    return found


@pytest.fixture
def folder(tmp_path, monkeypatch):
    monkeypatch.setenv(formula_cache.CACHE_ENV, str(tmp_path))
    return tmp_path


def test_every_kept_builder_is_listed_here():
    """A builder kept on disk without a line in :data:`KEPT` would go unchecked."""
    assert set(kept_builders()) == set(KEPT)


def first_fast(cases: list) -> list:
    """The first case of each builder in the fast loop (make check), every case in make test."""
    return [c if i == 0 else pytest.param(*c, marks=pytest.mark.slow) for i, c in enumerate(cases)]


@pytest.mark.parametrize(
    "name,args", [c for n, calls in KEPT.items() for c in first_fast([(n, a) for a in calls])]
)
def test_a_kept_result_reads_back_as_built(folder, name, args):
    kept = kept_builders()[name]
    fresh = kept(*args)  # built (the folder is empty) and written
    assert formula_cache.entry_path(
        f"expressions {kept.key}{args!r}", kept.build.__module__
    ).is_file(), "not kept"
    before = formula_cache.COUNTS["read"]
    read = kept(*args)  # read back
    assert formula_cache.COUNTS["read"] == before + 1
    assert formula_cache.same_value(fresh, read)

    def printed(value):
        if isinstance(value, dict):
            return {str(k): printed(v) for k, v in value.items()}
        if isinstance(value, tuple | list):
            return [printed(v) for v in value]
        return REGISTRY.latex(value) if isinstance(value, sp.Basic) else value

    assert printed(read) == printed(fresh)  # what a chapter renders


@pytest.mark.parametrize(
    "what,kind,multicast",
    first_fast([(w, k, m) for w in ("parts", "combined", "traffic") for k, m in KIND_MULTICAST]),
)
def test_a_kept_lambdified_function_computes_as_built(folder, what, kind, multicast):
    """The matmul model's numeric functions (the search's hot path), kept and run again, give
    the same floats, bit for bit, on shapes spanning the book's sweeps."""
    builder = {
        "parts": matmul.numeric_parts,
        "combined": matmul.numeric_combined,
        "traffic": matmul.traffic_function,
    }[what].__wrapped__
    written = builder(kind, multicast)
    before = formula_cache.COUNTS["read"]
    read = builder(kind, multicast)
    assert formula_cache.COUNTS["read"] == before + 1, "not read back"
    rng = np.random.default_rng(7)
    n = len(read.__code__.co_varnames[: read.__code__.co_argcount])
    args = [10 ** rng.uniform(0, 6, 200) for _ in range(n)]
    for a, b in zip(written(*args), read(*args), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_nothing_is_kept_without_a_folder(monkeypatch):
    for value in ("off", ""):
        monkeypatch.setenv(formula_cache.CACHE_ENV, value)
        assert formula_cache.cache_dir() is None
        assert formula_cache.keep_result("probe", sp.Symbol("x")) is False
        assert formula_cache.read_result("probe") == (False, None)


def test_a_file_cut_short_is_built_again(folder):
    x = sp.Symbol("x", positive=True)
    assert formula_cache.keep_result("probe", {"a": x + 1})
    (path,) = folder.glob("*.json")
    path.write_text('{"key": "probe", "res')
    assert formula_cache.read_result("probe") == (False, None)
    assert formula_cache.keep_result("probe", {"a": x + 2})
    assert formula_cache.read_result("probe") == (True, {"a": x + 2})


def test_what_cannot_be_read_back_exactly_is_not_kept(folder):
    before = formula_cache.COUNTS["not kept"]
    assert formula_cache.keep_result("probe", object()) is False
    f = sp.Function("f")
    assert (
        formula_cache.keep_result("probe", f(sp.Symbol("x"))) is True
    )  # an undefined function is kept
    assert formula_cache.read_result("probe")[1] == f(sp.Symbol("x"))
    assert formula_cache.COUNTS["not kept"] == before + 1
    # A lambdified function that calls a Python function of its own cannot be run again from
    # its source: it is returned, and not kept.
    from sympy.utilities.lambdify import implemented_function

    g = implemented_function("g", lambda v: v + 1)
    x = sp.Symbol("x")
    fn = formula_cache.lambdified("probe g", lambda: ((x,), g(x)))
    assert fn(1.0) == 2.0 and formula_cache.COUNTS["not kept"] == before + 2
    assert not [p for p in folder.glob("*.json") if "probe g" in p.read_text()]


def test_an_unevaluated_tree_keeps_its_order_and_form(folder):
    """``srepr`` prints a sum's terms in printing order; the kept tree is the stored one, so an
    unevaluated form (``-(2 e - 1)/2``, as ``sp.factor`` leaves it) stays as it was."""
    e = sp.Symbol("e_B", positive=True)
    factored = sp.factor(sp.Rational(1, 2) - e)
    assert formula_cache.keep_result("probe", factored)
    _, read = formula_cache.read_result("probe")
    assert sp.srepr(read) == sp.srepr(factored) and read.args == factored.args
    assert sp.latex(read) == sp.latex(factored)


def test_a_changed_library_gives_new_addresses(folder, monkeypatch):
    formula_cache.keep_result("probe", sp.Integer(3))
    assert formula_cache.read_result("probe") == (True, sp.Integer(3))
    monkeypatch.setattr(formula_cache, "environment_key", lambda module=None: "another library")
    assert formula_cache.read_result("probe") == (False, None)


def test_a_kept_file_names_what_it_holds(folder):
    formula_cache.keep_result("probe", sp.Integer(3))
    (path,) = folder.glob("*.json")
    data = json.loads(path.read_text())
    assert data["key"] == "probe" and data["result"] == {"sympy": "Integer(3)"}


def test_a_folder_that_cannot_be_written_keeps_nothing_and_stops_nothing(tmp_path, monkeypatch):
    blocker = tmp_path / "a file"
    blocker.write_text("")
    monkeypatch.setenv(formula_cache.CACHE_ENV, str(blocker / "formulas"))  # a folder under a file
    before = formula_cache.COUNTS["not kept"]
    assert formula_cache.keep_result("probe", sp.Integer(3)) is False
    x = sp.Symbol("x")
    fn = formula_cache.lambdified("probe unwritable", lambda: ((x,), 2 * x))
    assert fn(2.0) == 4.0
    assert formula_cache.COUNTS["not kept"] == before + 2
    assert list(tmp_path.iterdir()) == [blocker]


# --- What a sweep depends on ----------------------------------------------------------------------
def test_the_closure_follows_imports_anywhere_and_the_fingerprint_what_it_reads(
    tmp_path, monkeypatch
):
    """import_closure reads imports at the top and inside functions, relative and absolute, and
    the packages above; closure_fingerprint changes with a module of the closure or a data file
    and not with a module outside it."""
    pkg = tmp_path / "dmlimits"
    files = {
        "__init__.py": "",
        "a.py": "from . import b\n\ndef f():\n    from .sub.c import x\n    return x\n",
        "b.py": "import math\nfrom dmlimits.sub import e\n",
        "sub/__init__.py": "",
        "sub/c.py": "x = 1\n",
        "sub/e.py": "",
        "d.py": "from . import a\n",
        "data/table.csv": "k,v\n1,2\n",
    }
    for rel, text in files.items():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text(text)
    monkeypatch.setattr(formula_cache, "_ROOT", pkg)
    monkeypatch.setenv(formula_cache.CACHE_ENV, str(tmp_path / "kept"))
    _forget_closures()
    try:
        _closure_checks(pkg)
    finally:  # the closures of the real library are taken again
        _forget_closures()


def _forget_closures() -> None:
    """What a process reads once (the modules' imports, the data files, the closures and their
    fingerprints), forgotten: as in a new process."""
    for memo in (formula_cache.imported, formula_cache.data_files, formula_cache.kept_closures,
                 formula_cache.import_closure, formula_cache.closure_fingerprint,
                 formula_cache.file_digest):  # fmt: skip
        memo.cache_clear()


def _closure_checks(pkg) -> None:
    want = ("dmlimits", "dmlimits.a", "dmlimits.b", "dmlimits.sub", "dmlimits.sub.c",
            "dmlimits.sub.e")  # fmt: skip
    assert formula_cache.import_closure("dmlimits.a") == want
    # Kept with the formulas, read back by the next process, for the same sources only.
    kept = formula_cache.kept_closures()
    assert kept is not None and json.loads(kept.read_text())["dmlimits.a"] == list(want)
    _forget_closures()
    assert (
        formula_cache.import_closure("dmlimits.a") == want
        and formula_cache.kept_closures() == kept
    )

    def fingerprint() -> str:
        _forget_closures()
        return formula_cache.closure_fingerprint("dmlimits.a")

    before = fingerprint()
    (pkg / "d.py").write_text("from . import a  # edited\n")
    assert fingerprint() == before  # outside the closure
    for rel in ("sub/c.py", "data/table.csv"):
        (pkg / rel).write_text((pkg / rel).read_text() + "# edited\n")
        after = fingerprint()
        assert after != before, rel
        before = after


def _uncached(code: str):
    """What ``code`` prints last (JSON), run by a fresh interpreter with no sweep and no formula
    kept on disk."""
    env = {**os.environ, "DMLIMITS_SWEEP_CACHE": "off", formula_cache.CACHE_ENV: "off"}
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=900
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


@pytest.mark.slow
def test_a_sweep_imports_nothing_outside_its_closure():
    """The sweeps kept on disk are addressed by the files of the search's import closure: a
    sweep of every preset and of a changed scenario, in a fresh process that builds every
    formula it uses (no cache of any kind), imports no module of the library outside it."""
    code = (
        "import json, sys\n"
        "from dmlimits import search\nfrom dmlimits.core import formula_cache, scenario as sc\n"
        "for name in sc.PAPER_PRESETS:\n"
        "    search.sweep(sc.resolve(name))\n"
        "search.sweep(sc.resolve('h100', sets=['training.months=6', 'gpu=a100']))\n"
        "used = sorted(m for m in sys.modules if m.split('.')[0] == 'dmlimits')\n"
        "print(json.dumps([used, formula_cache.import_closure('dmlimits.search')]))\n"
    )
    used, closure = _uncached(code)
    assert "dmlimits.search" in used and set(used) <= set(closure), sorted(set(used) - set(closure))


def test_a_kept_formula_is_addressed_by_its_modules_closure(folder, monkeypatch):
    """A builder's result is addressed by the fingerprint of its module's import closure: a
    change outside the closure keeps the address, one inside gives a new one; a key without a
    module (or with one outside the library) is addressed by the whole library."""
    formula_cache.keep_result("probe", sp.Integer(3), "dmlimits.costs.matmul")
    assert formula_cache.read_result("probe", "dmlimits.costs.matmul") == (True, sp.Integer(3))
    assert "dmlimits.measured.runs" not in formula_cache.import_closure("dmlimits.costs.matmul")
    real = formula_cache.closure_fingerprint

    def fingerprint(changed: str):
        return lambda module: (
            real(module) + ("x" if changed in formula_cache.import_closure(module) else "")
        )

    for changed, kept in (("dmlimits.measured.runs", True), ("dmlimits.core.units", False)):
        formula_cache.environment_key.cache_clear()
        monkeypatch.setattr(formula_cache, "closure_fingerprint", fingerprint(changed))
        assert formula_cache.read_result("probe", "dmlimits.costs.matmul")[0] is kept, changed
    formula_cache.environment_key.cache_clear()
    monkeypatch.setattr(formula_cache, "closure_fingerprint", real)
    assert formula_cache.entry_path("probe", "tests.elsewhere") == formula_cache.entry_path("probe")
    formula_cache.environment_key.cache_clear()


@pytest.mark.slow
def test_a_kept_builder_imports_nothing_outside_its_modules_closure():
    """Each kept builder's result is addressed by its module's import closure: built fresh (no
    cache), with every builder's module imported first, no builder imports a module of the
    library outside its own module's closure while it runs (a dynamic import would)."""
    code = (
        "import importlib, json, sys\n"
        "from dmlimits.core import formula_cache\n"
        f"kept = {sorted(KEPT.items())!r}\n"
        "fns = {}\n"
        "for name, _ in kept:\n"
        "    module, attr = name.rsplit('.', 1)\n"
        "    fns[name] = getattr(importlib.import_module(module), attr)\n"
        "outside = {}\n"
        "for name, calls in kept:\n"
        "    for args in calls:\n"
        "        before = set(sys.modules)\n"
        "        fns[name](*args)\n"
        "        new = {m for m in set(sys.modules) - before if m.split('.')[0] == 'dmlimits'}\n"
        "        module = name.rsplit('.', 1)[0]\n"
        "        extra = sorted(new - set(formula_cache.import_closure(module)))\n"
        "        if extra:\n"
        "            outside[name] = extra\n"
        "print(json.dumps(outside))\n"
    )
    assert _uncached(code) == {}


#: The numeric functions other than the matmul model's that the search and every chapter's
#: kernel use, kept as lambdified source since issue #16 (each process derived them again).
KEPT_NUMERIC = [
    ("pipeline", w) for w in ("bubble", "microbatches", "boundary", "crossings", "flush")
] + [
    ("expert_parallel", w)
    for w in (
        "bytes_intra", "bytes_inter", "bandwidth", "latency", "latency_expected", "crossing",
        "crossing_latency", "ratio", "layer_compute", "ep_only", "bandwidth_level0",
        "bandwidth_level1", "crossing_level0", "crossing_level1",
    )
] + [
    # The cost formulas of the collectives, the gradient all-reduce and the step, kept since
    # the search's level times (a process that read every other formula built these).
    ("collectives", w) for w in (
        "allreduce_bandwidth", "allreduce_latency", "p2p_bandwidth", "p2p_latency",
        "allreduce_two_level_bandwidth", "allreduce_two_level_bandwidth_no_overlap",
        "allreduce_two_level_bandwidth_level0", "allreduce_two_level_bandwidth_level1",
        "allreduce_two_level_latency",
    )
] + [
    ("data_parallel", w) for w in (
        "dp_bandwidth", "dp_bandwidth_levels_added", "dp_bandwidth_level0",
        "dp_bandwidth_level1", "dp_latency", "dp_bytes_per_gpu", "memory_needed", "max_dp",
    )
] + [("step", w) for w in ("step_time", "network_time", "utilization")]  # fmt: skip


def _same_outputs(written, read) -> None:
    rng = np.random.default_rng(11)
    n = read.__code__.co_argcount
    args = [np.floor(10 ** rng.uniform(0, 2, 200)) for _ in range(n)]
    with np.errstate(all="ignore"):  # some draws divide by zero: the same infinities both ways
        a, b = written(*args), read(*args)
    for x, y in zip(np.atleast_1d(a) if not isinstance(a, tuple) else a,
                    np.atleast_1d(b) if not isinstance(b, tuple) else b, strict=True):  # fmt: skip
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


@pytest.mark.parametrize(("module", "what"), KEPT_NUMERIC)
def test_a_kept_numeric_function_computes_as_built(folder, module, what):
    """Each kept function, read back in another process's place, gives the same floats, bit
    for bit, as the one lambdified from its derivation."""
    costs = importlib.import_module(f"dmlimits.costs.{module}")
    # The step's is public: the search's oracle swaps it for a derivation's own formula.
    builder = getattr(costs, "_numeric", getattr(costs, "numeric", None)).__wrapped__
    written = builder(what)
    before = formula_cache.COUNTS["read"]
    read = builder(what)
    assert formula_cache.COUNTS["read"] == before + 1, "not read back"
    _same_outputs(written, read)


def test_the_models_kept_definitions_compute_as_built(folder):
    written = model.numeric_defs.__wrapped__()
    before = formula_cache.COUNTS["read"]
    read = model.numeric_defs.__wrapped__()
    kept = len(read) - 1 + len(read["batch"])  # each definition, and each batch law
    assert formula_cache.COUNTS["read"] == before + kept, "not all read back"
    for name, fn in written.items():
        pairs = fn.items() if isinstance(fn, dict) else [(name, fn)]
        for key, f in pairs:
            _same_outputs(f, read[name][key] if isinstance(fn, dict) else read[name])


def test_a_kept_source_reads_numpys_names_without_lambdifys_namespace():
    """A kept source for numpy finds its global names in numpy and numpy.linalg
    (:func:`dmlimits.core.formula_cache.numpy_names`), as lambdify's namespace holds them, the same
    objects; names lambdify adds of its own send it to that namespace."""
    full = formula_cache.lambdify_namespace("numpy")
    names = {*np.__all__, *np.linalg.__all__, "numpy"}
    found = formula_cache.numpy_names(names)
    assert found is not None
    differ = sorted(n for n in names if n in full and found[n] is not full[n])
    assert not differ, differ
    assert formula_cache.numpy_names({"sqrt", "I"}) is None  # lambdify's own 1j
    source = "def _lambdifygenerated(x):\n    return select([less(x, 1), True], [nan, sqrt(x)])\n"
    code = compile(source, "<test>", "exec")
    assert formula_cache.loaded_globals(code) == {"select", "less", "nan", "sqrt"}
    code = compile("def f(x):\n    return logical_and.reduce((x, x))\n", "<test>", "exec")
    assert formula_cache.loaded_globals(code) == {"logical_and"}  # not the attribute
