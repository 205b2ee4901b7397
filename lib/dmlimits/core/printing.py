"""How the book prints mathematics: one LaTeX printer for every formula a reader sees.

Sympy's own LaTeX is correct but reads like a computer algebra system.  :class:`BookPrinter`
prints the same expressions the way a textbook would:

* ``log(n) / log(2)`` as ``\\log_2 n``;
* a sum with its positive terms first, ``t_flush - t_busy`` rather than ``-t_busy + t_flush``;
* a sum whose terms share a whole-number factor with that factor outside, ``3 (g - 1)`` rather
  than ``3 g - 3``;
* no fraction inside a fraction's denominator: there it is written on one line, ``(W / 2) p``;
* every registered symbol in its declared notation.

:func:`display` breaks an equation that would be wider than the text column over several lines
(``aligned``), at the terms of a sum, the arguments of a maximum, or inside the parentheses of a
long factor; MathJax does not break display math by itself.  Printing never changes the
expression: the tests check the printed object, and :func:`display` only lays it out.
"""

from __future__ import annotations

import re
from typing import Any

import sympy as sp
from sympy.printing.latex import LatexPrinter

#: The widest a display equation may be, in the characters :func:`visible_width` counts (set
#: against the typeset widths the browser test measures in the theme's text column).
MAX_WIDTH = 40
#: How wide a subscript or superscript character is against a character of the line: MathJax
#: sets scripts at 70.7% of the text's size (its ``scriptscale``).
SCRIPT_SCALE = 0.7


class BookPrinter(LatexPrinter):
    """LaTeX in the book's conventions (see the module's docstring)."""

    def __init__(self, names: dict[sp.Symbol, str] | None = None) -> None:
        super().__init__({"symbol_names": names or {}})

    def doprint(self, expr: Any) -> str:
        return super().doprint(tidy(expr))

    _in_denominator = False

    def _print_Mul(self, expr: Any) -> str:
        """No fraction inside a fraction's denominator: there a fraction is written on one line,
        ``(W / 2) p`` or ``F t / (b d_1 d_2)``, with the parentheses it needs."""
        if self._in_denominator:
            coeff, rest = expr.as_coeff_Mul()
            if coeff.is_Rational and coeff.p == 1 and coeff.q > 1 and rest.is_Symbol:
                return rf"\left({self._print(rest)} / {coeff.q}\right)"  # a halved bandwidth
            if any(_halved(a) for a in expr.args):
                return " ".join(self._print(a) for a in expr.args)
        num, den = sp.fraction(expr, exact=True)
        if den == 1 or expr.could_extract_minus_sign():
            return super()._print_Mul(expr)
        if not self._in_denominator:
            snum = self._print(num)
            self._in_denominator = True
            try:
                sden = self._print(den)
            finally:
                self._in_denominator = False
            return rf"\frac{{{snum}}}{{{sden}}}"
        snum, sden = self._print(num), self._print(den)
        if num.is_Add:
            snum = rf"\left({snum}\right)"
        if not (den.is_Symbol or den.is_Number):
            sden = rf"\left({sden}\right)"
        return rf"{snum} / {sden}"

    def _as_ordered_terms(self, expr: Any, order: Any = None) -> list:
        """A sum's terms with the positive ones first (``t_flush - t_busy``, ``N_PP - 1``),
        each group in sympy's order."""
        terms = list(super()._as_ordered_terms(expr, order=order))
        negative = [t for t in terms if t.could_extract_minus_sign()]
        return [t for t in terms if not t.could_extract_minus_sign()] + negative


def _halved(expr: sp.Basic) -> bool:
    """``W / 2`` kept as a factor of its own: a symbol times a unit fraction."""
    if not isinstance(expr, sp.Mul):
        return False
    coeff, rest = expr.as_coeff_Mul()
    return bool(coeff.is_Rational and coeff.p == 1 and coeff.q > 1 and rest.is_Symbol)


class Log2(sp.Function):
    """The base-2 logarithm, for printing only (``log(x) / log(2)``)."""

    def _latex(self, printer: LatexPrinter) -> str:
        arg = printer._print(self.args[0])
        if not (self.args[0].is_Symbol or self.args[0].is_Number):
            arg = rf"\left({arg}\right)"
        return rf"\log_2 {arg}"


def _is_log2(expr: sp.Basic) -> bool:
    return (
        expr.is_Mul
        and sp.Pow(sp.log(2), -1) in expr.args
        and any(isinstance(a, sp.log) and a.args[0] != 2 for a in expr.args)
    )


def _log2(expr: sp.Mul) -> sp.Basic:
    args = list(expr.args)
    args.remove(sp.Pow(sp.log(2), -1))
    i = next(k for k, a in enumerate(args) if isinstance(a, sp.log) and a.args[0] != 2)
    args[i] = Log2(args[i].args[0])
    return sp.Mul(*args)


def _has_content(expr: sp.Basic) -> bool:
    if not expr.is_Add:
        return False
    content, _ = expr.primitive()
    return content.is_Integer and content > 1


def _pull_content(expr: sp.Add) -> sp.Basic:
    content, rest = expr.primitive()
    return sp.Mul(content, rest, evaluate=False)


def tidy(expr: Any) -> Any:
    """The expression as the book prints it (equal to ``expr``; for printing only)."""
    if not isinstance(expr, sp.Basic):
        return expr
    out = expr.replace(_is_log2, _log2)
    return out.replace(_has_content, _pull_content)


def latex(expr: Any, names: dict[sp.Symbol, str] | None = None) -> str:
    """``expr`` in the book's LaTeX on one line."""
    return BookPrinter(names).doprint(expr)


# --- Display equations that fit the column ------------------------------------------------------
_ZERO_WIDTH = {"left", "right", "Bigl", "Bigr", "bigl", "bigr", "mathrm", "mathit",
               "operatorname", "displaystyle", "quad", "qquad", ",", ";", "!", " "}  # fmt: skip


def _group(tex: str, i: int) -> tuple[str, int]:
    """The brace group starting at ``tex[i]`` (or the single character there) and the index
    after it."""
    if i < len(tex) and tex[i] == "{":
        depth, j = 0, i
        while j < len(tex):
            depth += {"{": 1, "}": -1}.get(tex[j], 0)
            if depth == 0:
                return tex[i + 1 : j], j + 1
            j += 1
        return tex[i + 1 :], len(tex)
    return tex[i : i + 1], i + 1


def visible_width(tex: str) -> float:
    """An estimate of how wide ``tex`` is when typeset, in characters: commands and braces do
    not count, a fraction counts as its wider part, a subscript or superscript at
    :data:`SCRIPT_SCALE` of its characters, a binary operator (``+``, ``-``, ``=``) as two
    with its spaces."""
    width, i = 0.0, 0
    while i < len(tex):
        c = tex[i]
        if c == "\\":
            m = re.match(r"\\([A-Za-z]+|.)", tex[i:])
            name = m.group(1)
            i += len(m.group(0))
            if name in ("frac", "tfrac", "dfrac"):
                num, i = _group(tex, i)
                den, i = _group(tex, i)
                width += max(visible_width(num), visible_width(den))
            elif name not in _ZERO_WIDTH:
                width += 1
        elif c in "_^":
            inner, i = _group(tex, i + 1)
            width += SCRIPT_SCALE * visible_width(inner)
        elif c in "{}& \n":
            i += 1
        else:
            # A binary operator is set with a medium space on each side: about two characters.
            width += 2 if c in "+-=" else 1
            i += 1
    return width


def _terms(printer: BookPrinter, expr: sp.Basic) -> list[sp.Basic]:
    """The terms of a sum in the order the one-line form prints them."""
    return list(printer._as_ordered_terms(expr)) if expr.is_Add else [expr]


def _join(printer: BookPrinter, terms: list[sp.Basic]) -> list[str]:
    """Each term's LaTeX with the sign it takes in a sum (the first keeps its own)."""
    out = []
    for k, term in enumerate(terms):
        tex = printer.doprint(term)
        if k and not tex.startswith("-"):
            tex = "+ " + tex
        out.append(tex)
    return out


def _lines(printer: BookPrinter, expr: sp.Basic, width: int, depth: int = 0) -> list[str]:
    """``expr`` over as many lines as it needs, none wider than ``width`` where it can."""
    expr = tidy(expr)
    tex = printer.doprint(expr)
    if visible_width(tex) <= width or depth > 4:
        return [tex]
    if expr.is_Add:
        lines: list[str] = []
        terms = _terms(printer, expr)
        for term_tex, term in zip(_join(printer, terms), terms, strict=True):
            if lines and visible_width(lines[-1] + " " + term_tex) <= width:
                lines[-1] += " " + term_tex
            elif visible_width(term_tex) <= width:
                lines.append(term_tex)
            else:
                # A term that prints with a minus is broken as its negation after a "- ": broken
                # as it is, its factors print without the sign (``\\frac{\\delta - 1}{N}`` for
                # ``- \\frac{1 - \\delta}{N}``) and the line lost the operator that joins it.
                if term_tex.startswith("-"):
                    sign, term = "- ", -term
                else:
                    sign = "+ " if term_tex.startswith("+ ") else ""
                inner = _lines(printer, term, width - 2, depth + 1)
                inner[0] = sign + inner[0]
                lines += inner
        return lines
    if isinstance(expr, sp.Max | sp.Min):
        name = r"\max" if isinstance(expr, sp.Max) else r"\min"
        args = [printer.doprint(a) for a in expr.args]
        out = [name + r"\Bigl(" + args[0] + ","]
        out += [r"\quad " + a + "," for a in args[1:-1]]
        out.append(r"\quad " + args[-1] + r"\Bigr)")
        return out
    if expr.is_Mul:
        # The widest factor that is a sum goes inside parentheses over several lines, the other
        # factors in front of it; a sum in the denominator as that factor to the power -1.
        num, den = sp.fraction(expr, exact=True)

        def breakable(p: sp.Basic) -> bool:
            return p.is_Add or isinstance(p, sp.Max | sp.Min)

        candidates = [(p, 1) for p in sp.Mul.make_args(num) if breakable(p)]
        candidates += [(p, -1) for p in sp.Mul.make_args(den) if breakable(p)]
        if candidates:
            widest, power = max(candidates, key=lambda c: visible_width(printer.doprint(c[0])))
            rest = sp.Mul(*[p for p in sp.Mul.make_args(num) if p is not widest]) / sp.Mul(
                *[p for p in sp.Mul.make_args(den) if p is not widest]
            )
            head = "" if rest == 1 else printer.doprint(rest)
            if rest == 1 and tidy(widest) == tidy(expr):
                return [tex]  # nothing to take out of the parentheses
            inner = _lines(printer, widest, width - 2 - visible_width(head), depth + 1)
            close = r"\Bigr)" + ("^{-1}" if power == -1 else "")
            if len(inner) == 1:
                return [head + r"\Bigl(" + inner[0] + close]
            return [head + r"\Bigl(" + inner[0], *inner[1:-1], inner[-1] + close]
    return [tex]


def display(expr: Any, names: dict[sp.Symbol, str] | None = None, width: int = MAX_WIDTH) -> str:
    """``expr`` as display math that fits the column: one line when it fits, else an
    ``aligned`` block broken at the terms of a sum, the arguments of a maximum or inside a long
    factor, continuation lines indented under the right-hand side."""
    printer = BookPrinter(names)
    one = printer.doprint(expr)
    if visible_width(one) <= width:
        return one
    if isinstance(expr, sp.Equality) and visible_width(printer.doprint(expr.lhs)) > width / 2:
        # A long left-hand side (a balance of two costs): each side over its own lines, the
        # right-hand side after an equals sign at the start of a line.
        left = _lines(printer, expr.lhs, width - 2)
        right = _lines(printer, expr.rhs, width - 4)
        lines = [rf"& {left[0]}", *(rf"&\quad {x}" for x in left[1:])]
        lines += [rf"&= {right[0]}", *(rf"&\quad {x}" for x in right[1:])]
        return "\\begin{aligned}\n" + " \\\\\n".join(lines) + "\n\\end{aligned}"
    if isinstance(expr, sp.Equality):
        lhs = printer.doprint(expr.lhs)
        body = _lines(printer, expr.rhs, width - visible_width(lhs) - 2)
        first = rf"{lhs} &= {body[0]}"
    else:
        body = _lines(printer, expr, width - 2)
        first = rf"& {body[0]}"
    rest = [rf"&\quad {line}" for line in body[1:]]
    return "\\begin{aligned}\n" + " \\\\\n".join([first, *rest]) + "\n\\end{aligned}"


def significant_digits(text: str) -> int:
    """The significant digits of a number as written (``"2e28"`` has one, ``"37.22"`` four):
    a published value is quoted to the precision it was published with."""
    mantissa = text.strip().lower().split("e")[0].lstrip("+-")
    digits = mantissa.replace(".", "").lstrip("0")
    return max(1, len(digits) if "." in mantissa else len(digits.rstrip("0")) or 1)
