"""Dimensions of the book's formulas.

Three base units carry every cost in this model: the second, the byte and the floating-point
operation (FLOP).  Counts (tokens, parameters, layers, GPUs, words) are dimensionless.  Each
registered symbol has a unit built from these (see :mod:`dmlimits.core.symbols`), and
:func:`dimension` computes the unit of any expression built from registered symbols, refusing
sums of unlike terms.  A test checks that every cost formula comes out in the unit it claims.
"""

from __future__ import annotations

import sympy as sp

# The base units are sympy symbols of their own, never mixed into the model's expressions.
second = sp.Symbol("unit_second", positive=True)
byte = sp.Symbol("unit_byte", positive=True)
flop = sp.Symbol("unit_FLOP", positive=True)
one = sp.Integer(1)

_LATEX = {second: r"\mathrm{s}", byte: r"\mathrm{B}", flop: r"\mathrm{FLOP}"}
_TEXT = {second: "s", byte: "byte", flop: "FLOP"}


class DimensionError(ValueError):
    """An expression adds or compares quantities of different units."""


def unit_text(unit: sp.Expr) -> str:
    """A unit as plain text, for tables: ``byte/s``, ``FLOP/s``, ``s``, ``1``."""
    unit = sp.sympify(unit)
    if unit == 1:
        return "1"
    num, den = sp.fraction(sp.powsimp(unit))

    def part(expr: sp.Expr) -> str:
        factors = []
        for base, exp in sorted(expr.as_powers_dict().items(), key=lambda kv: str(kv[0])):
            if base == 1:
                continue
            name = _TEXT.get(base, str(base))
            factors.append(name if exp == 1 else f"{name}^{exp}")
        return "·".join(factors) or "1"

    return part(num) if den == 1 else f"{part(num)}/{part(den)}"


def unit_latex(unit: sp.Expr) -> str:
    """A unit as LaTeX, for rendered tables."""
    unit = sp.sympify(unit)
    if unit == 1:
        return "1"
    return sp.latex(unit, symbol_names=_LATEX)


def dimension(expr: sp.Expr, units: dict[sp.Symbol, sp.Expr]) -> sp.Expr:
    """The unit of ``expr``, given the unit of each of its symbols.

    Raises :class:`DimensionError` naming the offending sub-expression when terms of a sum (or
    the arguments of ``Max``/``Min``) differ in unit, when an exponent or a function argument
    is not dimensionless, or when a symbol has no registered unit.
    """
    expr = sp.sympify(expr)
    if isinstance(expr, sp.Equality):
        lhs, rhs = dimension(expr.lhs, units), dimension(expr.rhs, units)
        if sp.simplify(lhs / rhs) != 1:
            raise DimensionError(
                f"the two sides of {expr} differ: {unit_text(lhs)} against {unit_text(rhs)}"
            )
        return lhs
    if expr.is_Symbol:
        if expr not in units:
            raise DimensionError(f"symbol {expr} has no registered unit")
        return sp.sympify(units[expr])
    if expr.is_Number or expr in (sp.pi, sp.E):
        return one
    if expr.is_Mul:
        out = one
        for arg in expr.args:
            out *= dimension(arg, units)
        return sp.powsimp(out)
    if expr.is_Pow:
        base, exp = expr.args
        if dimension(exp, units) != 1:
            raise DimensionError(f"exponent {exp} of {expr} is not dimensionless")
        base_unit = dimension(base, units)
        if base_unit == 1:
            return one
        if not exp.is_number:
            raise DimensionError(
                f"{base} has unit {unit_text(base_unit)} but is raised to a symbolic power {exp}"
            )
        return sp.powsimp(base_unit**exp)
    if expr.is_Add or isinstance(expr, sp.Max | sp.Min):
        found = [dimension(arg, units) for arg in expr.args]
        first = found[0]
        for arg, unit in zip(expr.args[1:], found[1:], strict=True):
            # A bare zero or a pure number beside dimensioned terms is an error too.
            if sp.simplify(unit / first) != 1:
                raise DimensionError(
                    f"in {expr}: term {expr.args[0]} is in {unit_text(first)} but {arg} is in "
                    f"{unit_text(unit)}"
                )
        return first
    if isinstance(expr, sp.Piecewise):
        found = [dimension(e, units) for e, _ in expr.args]
        for unit in found[1:]:
            if sp.simplify(unit / found[0]) != 1:
                raise DimensionError(f"branches of {expr} differ in unit")
        return found[0]
    if isinstance(expr, sp.floor | sp.ceiling):
        return dimension(expr.args[0], units)
    if isinstance(expr, sp.Function):
        for arg in expr.args:
            if dimension(arg, units) != 1:
                raise DimensionError(f"argument {arg} of {expr.func} is not dimensionless")
        return one
    raise DimensionError(f"cannot take the dimension of {expr!r}")


def check_unit(expr: sp.Expr, units: dict[sp.Symbol, sp.Expr], expected: sp.Expr) -> None:
    """Raise :class:`DimensionError` unless ``expr`` is in ``expected``."""
    got = dimension(expr, units)
    if sp.simplify(got / sp.sympify(expected)) != 1:
        raise DimensionError(f"{expr} is in {unit_text(got)}, expected {unit_text(expected)}")
