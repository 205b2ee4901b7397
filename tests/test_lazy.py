"""Formulas built on first use (dmlimits.core.lazy): importing the library builds none of them, each
is built once and is the object its module's own code uses, and each is documented."""

from __future__ import annotations

import subprocess
import sys
import types

import pytest
from dmlimits.core import lazy

#: The modules whose sympy formulas are built on first use.
LAZY_MODULES = (
    "collectives",
    "data_parallel",
    "tensor_parallel",
    "pipeline",
    "expert_parallel",
    "step",
    "closed_forms",
)


def test_an_attribute_is_built_once_on_first_use_and_kept(monkeypatch):
    calls = []
    mod = types.ModuleType("dmlimits_lazy_probe")
    mod.__getattr__ = lazy.attributes(mod.__name__, VALUE=lambda: calls.append(1) or [42])
    monkeypatch.setitem(sys.modules, mod.__name__, mod)
    assert "VALUE" not in vars(mod)
    first = mod.VALUE
    assert first == [42] and mod.VALUE is first and vars(mod)["VALUE"] is first
    assert calls == [1]
    assert lazy.lazy_names(mod) == ("VALUE",)
    with pytest.raises(AttributeError, match="module 'dmlimits_lazy_probe' has no attribute 'X'"):
        mod.X  # noqa: B018


def test_importing_the_search_builds_no_formula():
    """The speed of every chapter's kernel depends on it: a fresh process that imports the
    search (and with it every parallelism's module) has built none of the lazy attributes."""
    code = (
        "import importlib, dmlimits.search, dmlimits.costs.closed_forms\n"
        "from dmlimits.core import lazy\n"
        f"for name in {LAZY_MODULES!r}:\n"
        "    m = importlib.import_module('dmlimits.costs.' + name)\n"
        "    names = lazy.lazy_names(m)\n"
        "    assert names, name\n"
        "    built = [n for n in names if n in vars(m)]\n"
        "    assert not built, (name, built)\n"
        "    assert m._cost_formulas.cache_info().currsize == 0, name\n"
        "print('none built')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "none built"


@pytest.mark.parametrize("name", LAZY_MODULES)
def test_each_lazy_attribute_is_declared_and_is_what_the_module_uses(name):
    """Declared with a type (so the API reference documents it), and, once built, the very
    object of the module's cached builder (its numerics and the attribute agree)."""
    import importlib

    module = importlib.import_module(f"dmlimits.costs.{name}")
    names = lazy.lazy_names(module)
    assert "COST_FORMULAS" in names
    for attr in names:
        assert attr in module.__annotations__, (name, attr)
        assert getattr(module, attr) is vars(module)[attr]
    assert module.COST_FORMULAS is module._cost_formulas()
    formulas = {expr for expr, _ in module.COST_FORMULAS.values()}
    for attr in set(names) - {"COST_FORMULAS", "SUMMARY"}:
        if name in ("closed_forms", "step"):  # the single expressions are formulas of the set
            assert getattr(module, attr) in formulas, (name, attr)
