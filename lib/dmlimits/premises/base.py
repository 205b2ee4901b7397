"""The framework of the premises' checks: oracles, their registry and the evaluation of a
derivation's expression at given values (see :mod:`dmlimits.premises`)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import sympy as sp

from dmlimits.core.derivation import Derivation

#: The kinds of independent check an oracle can be (issue #12: "a simulation, a hand count, a
#: published value").
ORACLE_KINDS = ("simulation", "hand count", "published value")
#: Relative agreement an oracle requires unless it says otherwise.
RTOL = 1e-9


class PremiseError(AssertionError):
    """A premise is not justified: its oracle disagrees, or it cites a result it is not."""


@dataclass(frozen=True)
class Oracle:
    """An independent check of one derivation's result."""

    derivation: str
    kind: str
    what: str  # one sentence for the book: what the result is compared with
    check: Callable[[Derivation], str]  # raises PremiseError; returns what agreed

    def __post_init__(self) -> None:
        if self.kind not in ORACLE_KINDS:
            raise ValueError(f"oracle kind: got {self.kind!r}; expected one of {ORACLE_KINDS}")

    def run(self, d: Derivation) -> str:
        if d.name != self.derivation:
            raise ValueError(f"oracle of {self.derivation!r} run on {d.name!r}")
        return self.check(d)


ORACLES: dict[str, Oracle] = {}


def oracle(name: str, kind: str, what: str):
    """Register the decorated ``check(d) -> str`` as the oracle of derivation ``name``."""

    def register(check: Callable[[Derivation], str]) -> Callable[[Derivation], str]:
        if name in ORACLES:
            raise ValueError(f"derivation {name!r} has two oracles")
        ORACLES[name] = Oracle(name, kind, what, check)
        return check

    return register


# --- Evaluating a derivation's expression ------------------------------------------------------
def _rhs(expr: sp.Basic, lhs: str | None = None) -> sp.Expr:
    if isinstance(expr, sp.Equality):
        if lhs is not None and str(expr.lhs) != lhs:
            raise PremiseError(f"expected an equation for {lhs}, got {expr}")
        return expr.rhs
    return expr


def at_values(expr: sp.Basic, values: dict[str, float], lhs: str | None = None) -> float:
    """The right side of ``expr`` (an equation for ``lhs``) with each symbol given by name."""
    rhs = _rhs(expr, lhs)
    missing = sorted(str(x) for x in rhs.free_symbols if str(x) not in values)
    if missing:
        raise PremiseError(f"{rhs}: no value for {', '.join(missing)}")
    return float(rhs.subs({x: values[str(x)] for x in rhs.free_symbols}))


def _agree(got: float, want: float, where: str, rtol: float = RTOL) -> None:
    if not math.isclose(got, want, rel_tol=rtol, abs_tol=1e-300):
        raise PremiseError(f"{where}: the derivation gives {got:.6g}, the oracle {want:.6g}")


def compare_cases(
    expr: sp.Basic, lhs: str | None, cases: Iterable[tuple[dict[str, float], float]],
    rtol: float = RTOL,
) -> str:  # fmt: skip
    n = 0
    for values, want in cases:
        shown = ", ".join(f"{k}={v:g}" for k, v in values.items())
        _agree(at_values(expr, values, lhs), want, f"at {shown}", rtol)
        n += 1
    return f"{n} point{'' if n == 1 else 's'}"
