"""Module attributes built on first use (PEP 562).

A module's cost formulas are built from its derivations with sympy, which is slow next to
importing the module.  Built at import, every process that imports the library (each chapter's
kernel, each test worker) would pay for all of them, though most use few.  A module declares
them instead as::

    @cache
    def _cost_formulas(): ...

    __getattr__ = lazy.attributes(__name__, COST_FORMULAS=_cost_formulas)

``module.COST_FORMULAS`` (and ``from module import COST_FORMULAS``) then builds the value on
first use and keeps it in the module; the module's own code calls ``_cost_formulas()``.  The
value is the one the builder returns, so a cached builder and the attribute are one object.
Each such attribute is also declared with its type and a ``#:`` comment (``COST_FORMULAS:
dict[...]``, no value), which is what the API reference documents.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any


def attributes(module: str, **builders: Callable[[], Any]) -> Callable[[str], Any]:
    """A module-level ``__getattr__`` that builds each attribute of ``builders`` on first use,
    stores it in the module ``module`` and returns it; any other name raises AttributeError."""

    def __getattr__(name: str) -> Any:
        try:
            build = builders[name]
        except KeyError:
            raise AttributeError(f"module {module!r} has no attribute {name!r}") from None
        value = build()
        setattr(sys.modules[module], name, value)
        return value

    __getattr__.lazy_names = tuple(builders)  # type: ignore[attr-defined]
    return __getattr__


def expressions(
    formulas: Callable[[], dict[str, tuple[Any, Any]]], **keys: str
) -> dict[str, Callable[[], Any]]:
    """Builders for :func:`attributes` of single expressions out of a module's cost formulas:
    ``NAME=key`` builds ``formulas()[key][0]``."""
    return {name: (lambda key=key: formulas()[key][0]) for name, key in keys.items()}


def lazy_names(module: Any) -> tuple[str, ...]:
    """The attributes of ``module`` built on first use (none if it declares none)."""
    getter = vars(module).get("__getattr__")
    return tuple(getattr(getter, "lazy_names", ()))
