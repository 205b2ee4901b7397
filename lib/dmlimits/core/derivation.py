"""Derivations: ordered, checked chains of steps that the book renders as they are.

A :class:`Derivation` is a list of :class:`Step` objects.  Each step carries one sentence and one
sympy expression or equation.  A step follows from the one before it in one of three ways:

* a rewrite: the two are equal (their difference simplifies to zero; for equations, the
  difference of the two sides);
* a named substitution: applying a :class:`Substitution` (an assumption or a definition, with a
  name the book shows) to the previous step gives one equal to this step;
* a solution: the step is ``Eq(x, f)`` and putting ``x = f`` into the previous equation makes it
  hold identically.

:meth:`Derivation.verify` proves every link and raises :class:`DerivationError` naming the first
step that does not follow.  Notebooks render the same object with :meth:`Derivation.markdown`,
so what the book shows is what the tests check.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import sympy as sp

from dmlimits.core.printing import visible_width
from dmlimits.core.symbols import REGISTRY, Registry

#: The widest substitution (in :func:`dmlimits.core.printing.visible_width`'s units) that a step's
#: sentence shows inline; a wider one is displayed below the sentence, one line a replacement,
#: since MathJax does not break inline math and the page clips what runs past the column.  At
#: the book's width a line of text holds about 60 units (the widest that fitted); 50 leaves room
#: for a narrower window.
INLINE_WIDTH = 50


class DerivationError(AssertionError):
    """A step of a derivation does not follow from the step before it."""


@dataclass(frozen=True)
class Substitution:
    """A named replacement of symbols: an assumption (a modelling choice) or a definition."""

    name: str
    mapping: Mapping[sp.Symbol, sp.Expr]
    kind: str = "definition"  # "definition" or "assumption"
    source: str = ""

    def __post_init__(self) -> None:
        if self.kind not in ("definition", "assumption"):
            raise ValueError(
                f"substitution kind must be 'definition' or 'assumption', got {self.kind!r}"
            )

    def apply(self, expr: sp.Basic) -> sp.Basic:
        """``expr`` with every symbol of the mapping replaced (sympy's ``subs``)."""
        return expr.subs(dict(self.mapping))

    def replace(self, expr: sp.Basic, *, compare_min_max: bool = True) -> sp.Basic:
        """The same replacement, symbol for symbol, without ``subs``'s algebra: equal
        to :meth:`Substitution.apply` when every key is a symbol, and much faster on the large
        expressions that are lambdified (the matmul hierarchy's).

        With ``compare_min_max=False`` each ``Min`` and ``Max`` that holds a replaced symbol is
        rebuilt without sympy's search for arguments it can drop (it compares every pair, most
        of the time a replacement takes on the matmul's tile sizes) and without its check that
        they are real.  The result is then the same function but not always the same
        expression (``Max(2, 3)`` stays as it is); the caller's tests compare the two where it
        is used.  The option has no effect when a key is not a symbol (:meth:`apply` is used).
        """
        if not all(isinstance(k, sp.Symbol) for k in self.mapping):
            return self.apply(expr)
        mapping = {k: sp.sympify(v) for k, v in self.mapping.items()}
        if compare_min_max:
            return expr.xreplace(mapping)
        return _replaced(expr, mapping, {})

    def latex(self, registry: Registry = REGISTRY) -> str:
        return ",\\quad ".join(
            f"{registry.latex(k)} = {registry.latex(v)}" for k, v in self.mapping.items()
        )


def _replaced(expr: sp.Basic, mapping: dict, done: dict) -> sp.Basic:
    """``expr.xreplace(mapping)``, with each ``Min`` and ``Max`` whose arguments changed
    rebuilt unevaluated."""
    if expr in done:
        return done[expr]
    if expr in mapping:
        new = mapping[expr]
    elif not expr.args:
        new = expr
    else:
        args = tuple(_replaced(a, mapping, done) for a in expr.args)
        if args == expr.args:
            new = expr
        elif isinstance(expr, (sp.Min, sp.Max)):
            new = expr.func(*args, evaluate=False)
        else:
            new = expr.func(*args)
    done[expr] = new
    return new


@dataclass(frozen=True)
class Step:
    text: str
    expr: sp.Basic
    using: Substitution | None = None
    solve_for: sp.Symbol | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.expr, sp.Expr | sp.Equality):
            raise TypeError(
                f"step {self.text!r}: expected a sympy expression or equation, got "
                f"{self.expr!r} (an equation that sympy evaluated to a boolean?)"
            )

    def latex(self, registry: Registry = REGISTRY) -> str:
        """The step as display math, broken over lines when it would not fit the column."""
        return registry.display(self.expr)


def residual_of(expr: sp.Basic) -> sp.Expr:
    return expr.lhs - expr.rhs if isinstance(expr, sp.Equality) else expr


#: The rewrites :func:`_is_zero` tries in turn, cheapest first: each is an identity, so a
#: difference that any of them takes to zero is zero.
_ZERO_TRANSFORMS = (
    sp.simplify,
    lambda e: sp.simplify(sp.powsimp(sp.expand_power_base(e, force=True), force=True)),
    lambda e: sp.simplify(sp.expand(sp.expand_log(e, force=True))),
)


def _is_zero(expr: sp.Expr, transforms=_ZERO_TRANSFORMS) -> bool:
    """Whether ``expr`` simplifies to zero (a proof, not a numerical spot check) under one of
    ``transforms``."""
    if expr == 0:
        return True
    return any(transform(expr) == 0 for transform in transforms)


def _holds(eq: sp.Basic) -> bool:
    """Whether an equation holds identically: its two sides are equal, or (both sides being
    products of powers of positive symbols, as every registered symbol is) their logarithms
    are, which proves power laws that ``simplify`` leaves unresolved.

    The order is for speed only (either proof is accepted): a plain ``simplify`` of the
    difference first, then the logarithms, then the costlier rewrites of the difference, which
    fail slowly on the closed forms' power laws that the logarithms prove."""
    if eq is sp.true:
        return True
    if not isinstance(eq, sp.Equality):
        return False
    residual = residual_of(eq)
    if _is_zero(residual, _ZERO_TRANSFORMS[:1]):
        return True
    if all(x.is_positive for x in eq.free_symbols):  # products of powers of them are, too
        logs = sp.expand_log(sp.log(eq.lhs), force=True) - sp.expand_log(sp.log(eq.rhs), force=True)
        if _is_zero(sp.expand(logs)):
            return True
    return _is_zero(residual, _ZERO_TRANSFORMS[1:])


#: Points at which :func:`_values` evaluates two expressions, and the digits it evaluates with.
_SAMPLES = 2
_DIGITS = 30


def _sample_value(symbol: sp.Symbol, rng: Any) -> sp.Number:
    """A value in the symbol's domain (its sign and integrality); a symbol without them takes a
    positive one, where every identity that holds for all its values holds too.  A float, not
    a rational: sympy would factor the integers of a rational raised to a fractional power."""
    if symbol.is_integer:
        value = sp.Integer(int(rng.integers(2, 10)))
    else:
        value = sp.Float(float(rng.uniform(1.0, 4.0)), _DIGITS)
    return -value if symbol.is_negative or symbol.is_nonpositive else value


def _values(exprs: tuple[sp.Expr, ...]) -> list[tuple[sp.Float, ...]] | None:
    """The values of ``exprs`` at :data:`_SAMPLES` points drawn from a fixed seed (each symbol
    in its own domain), evaluated to :data:`_DIGITS` digits; ``None`` when a value is not a
    finite real number (a function without a definition, a pole, a logarithm of a negative
    number) or cannot be evaluated."""
    symbols = sorted(set().union(*(e.free_symbols for e in exprs)), key=sp.default_sort_key)
    rng = np.random.default_rng(20241)
    out = []
    for _ in range(_SAMPLES):
        point = {x: _sample_value(x, rng) for x in symbols}
        try:
            row = tuple(sp.N(e.xreplace(point), _DIGITS) for e in exprs)
        except (TypeError, ValueError, ZeroDivisionError, ArithmeticError):
            return None
        if not all(v.is_real and v.is_finite and v.is_Number for v in row):
            return None
        out.append(row)
    return out


def _unlike(a: sp.Float, b: sp.Float) -> bool:
    """Two values that differ by far more than their evaluation could err."""
    return abs(a - b) > sp.Float(10) ** (10 - _DIGITS) * (abs(a) + abs(b) + 1)


def differs(prev: sp.Expr, new: sp.Expr, *, scaled: bool) -> bool:
    """True only when ``new`` is certainly not identically ``prev`` (with ``scaled``: not ``prev``
    times any constant): their values at the same point are not so related.  False means nothing
    either way.  It spares :func:`same` the symbolic attempts that fail slowly (a premise is
    compared with each equation it cites, most of them other relations, and a failed ``simplify``
    costs far more than evaluating both); an equality is still only ever proved symbolically."""
    found = _values((prev, new))
    if found is None:
        return False
    if not scaled:
        return any(_unlike(a, b) for a, b in found)
    # new = c prev for one constant c: b1 a2 = b2 a1 at any two points.
    (a1, b1), (a2, b2) = found[0], found[1]
    return _unlike(b1 * a2, b2 * a1)


def same(prev: sp.Basic, new: sp.Basic) -> bool:
    """Two expressions are equal, or two equations state the same relation."""
    if isinstance(prev, sp.Equality) != isinstance(new, sp.Equality):
        return False
    if not isinstance(new, sp.Equality):
        if differs(prev, new, scaled=False):
            return False
        return _is_zero(new - prev)
    rp, rn = residual_of(prev), residual_of(new)
    if differs(rp, rn, scaled=True):  # neither equal, nor opposite, nor proportional
        return False
    if _is_zero(rn - rp) or _is_zero(rn + rp):
        return True
    # The same relation scaled by a nonzero constant factor (e.g. both sides doubled).
    ratio = sp.simplify(rn / rp)
    return bool(ratio.is_number and ratio != 0)


#: A citation of another derivation's step in a sentence: ``{eq}`name-n``` (name, step).
CITE = re.compile(r"\{eq\}`([a-z0-9-]+)-(\d+)`")


@dataclass(frozen=True)
class Derivation:
    """An ordered chain of steps with a name (used for equation labels) and a title."""

    name: str
    title: str
    steps: tuple[Step, ...]
    chapter: str = ""
    notes: tuple[str, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[a-z0-9][a-z0-9-]*", self.name):
            raise ValueError(
                f"derivation name {self.name!r} must be lower-case letters, digits "
                "and hyphens (it becomes equation labels)"
            )
        if not self.steps:
            raise ValueError(f"derivation {self.name!r} has no steps")

    @property
    def result(self) -> sp.Basic:
        return self.steps[-1].expr

    @property
    def substitutions(self) -> list[Substitution]:
        return [s.using for s in self.steps if s.using is not None]

    def label(self, index: int) -> str:
        """The equation label of step ``index`` (1-based)."""
        return f"{self.name}-{index}"

    def restates(self) -> str | None:
        """The label of the earlier result that the first step is, when its sentence cites that
        result and the step is the same relation (:func:`same`), else ``None``.  The book
        prints such a step unnumbered: it is the cited equation, already numbered where it was
        derived, and a second number would make a reader look for a new result."""
        first = self.steps[0]
        for name, index in CITE.findall(first.text):
            cited = derivation_named(name)
            if cited is not None and 1 <= int(index) <= len(cited.steps):
                if same(cited.steps[int(index) - 1].expr, first.expr):
                    return cited.label(int(index))
        return None

    def check_step(self, index: int) -> None:
        """Prove that step ``index`` (1-based, at least 2) follows from the one before it."""
        prev, step = self.steps[index - 2], self.steps[index - 1]
        where = f"{self.name}: step {index} ({step.text!r})"
        if step.solve_for is not None:
            if not isinstance(step.expr, sp.Equality) or step.expr.lhs != step.solve_for:
                raise DerivationError(
                    f"{where} solves for {step.solve_for} but is not '{step.solve_for} = ...'"
                )
            base = step.using.apply(prev.expr) if step.using else prev.expr
            if not _holds(base.subs(step.solve_for, step.expr.rhs)):
                raise DerivationError(
                    f"{where}: {step.expr} does not solve step {index - 1}, {prev.expr}"
                )
            return
        if step.using is not None:
            if same(step.using.apply(prev.expr), step.expr):
                return
            raise DerivationError(
                f"{where}: substituting {step.using.name!r} into step "
                f"{index - 1} does not give {step.expr}"
            )
        if not same(prev.expr, step.expr):
            raise DerivationError(
                f"{where}: {step.expr} is not equal to step {index - 1}, {prev.expr}"
            )

    def verify(self, registry: Registry = REGISTRY) -> Derivation:
        """Check every link and that every symbol is registered; return self for chaining.

        A derivation proved against the library's registry is not proved again in the same
        process (the premises' check and the derivation tests both verify every derivation,
        and a proof can be long work for sympy).  Its steps are immutable sympy objects and
        the registry only grows, so the proof stands; a changed step is another derivation
        (:meth:`with_step`)."""
        if registry is REGISTRY and self.__dict__.get("_proved"):
            return self
        for index, step in enumerate(self.steps, start=1):
            missing = registry.unregistered(step.expr)
            if step.using is not None:
                for k, v in step.using.mapping.items():
                    missing |= registry.unregistered(sp.sympify(k)) | registry.unregistered(
                        sp.sympify(v)
                    )
            if missing:
                names = ", ".join(sorted(map(str, missing)))
                raise DerivationError(
                    f"{self.name}: step {index} uses unregistered symbols {names}"
                )
            if index > 1:
                self.check_step(index)
        if registry is REGISTRY:
            object.__setattr__(self, "_proved", True)  # frozen: a note beside the fields
        return self

    def with_step(self, index: int, expr: sp.Basic) -> Derivation:
        """The same derivation with step ``index`` (1-based) replaced by ``expr``: a reader's
        own version of that step, keeping the book's sentence, substitution and solved-for
        symbol.  ``d.with_step(3, mine).verify()`` proves that ``mine`` follows from step 2
        and that step 4 follows from it, or names the link that breaks; this is how the
        book's derivation exercises are checked.

        Raises ``ValueError`` naming the index when there is no such step, and ``TypeError``
        naming the value when ``expr`` is not a sympy expression or equation (a string, a
        boolean that sympy made of an equation, a plain number)."""
        if not isinstance(index, int) or not 1 <= index <= len(self.steps):
            raise ValueError(
                f"{self.name}: no step {index!r}; expected a whole number from 1 to "
                f"{len(self.steps)}"
            )
        if not isinstance(expr, sp.Expr | sp.Equality):
            raise TypeError(
                f"{self.name}: step {index} must be a sympy expression or equation written with "
                f"the symbols of dmlimits.core.symbols, got {type(expr).__name__} {expr!r}"
            )
        old = self.steps[index - 1]
        new = Step(old.text, expr, using=old.using, solve_for=old.solve_for)
        steps = (*self.steps[: index - 1], new, *self.steps[index:])
        return Derivation(self.name, self.title, steps, chapter=self.chapter, notes=self.notes)

    @property
    def free_symbols(self) -> set[sp.Symbol]:
        out: set[sp.Symbol] = set()
        for step in self.steps:
            out |= step.expr.free_symbols
            if step.using is not None:
                for k, v in step.using.mapping.items():
                    out |= sp.sympify(k).free_symbols | sp.sympify(v).free_symbols
        return out

    def markdown(self, registry: Registry = REGISTRY) -> str:
        """MyST Markdown: each sentence, then its step as labelled (numbered) display math; a
        first step that restates a cited result (:meth:`restates`) is displayed unnumbered."""
        parts = []
        restated = self.restates() is not None
        for index, step in enumerate(self.steps, start=1):
            text = step.text
            shown = None
            if step.using is not None:
                kind = "assumption" if step.using.kind == "assumption" else "definition"
                inline = step.using.latex(registry)
                # A substitution named by the step's own first sentence is not named twice:
                # only what its name adds to that sentence is printed.
                name, first = step.using.name, text.split(". ")[0].rstrip(". ")
                if name.lower().startswith(first.lower()):
                    name = name[len(first) :].lstrip(" :;,")
                named = f"{kind}: {name}" if name else kind
                if visible_width(inline) <= INLINE_WIDTH:
                    text += f" (*{named}*, ${inline}$)"
                else:  # too long for a line of text: each replacement displayed, unnumbered
                    text += f" (*{named}*):"
                    shown = _replacements(step.using, registry)
            parts.append(text)
            if shown:
                parts.append(f"```{{math}}\n{shown}\n```")
            label = "" if index == 1 and restated else f":label: {self.label(index)}\n"
            parts.append(f"```{{math}}\n{label}{step.latex(registry)}\n```")
        if _JUSTIFICATION is None:
            raise RuntimeError(
                f"derivation {self.name!r}: its premises' justification is rendered by "
                "dmlimits.premises; import it (dmlimits.book does) before rendering"
            )
        parts.append(_JUSTIFICATION(self))
        return "\n\n".join(parts)

    def _repr_markdown_(self) -> str:
        return self.markdown()


def _replacements(using: Substitution, registry: Registry) -> str:
    """A substitution as display math, one replacement a line: aligned on their equals signs
    when each fits on one line, else each broken over lines as a step is."""
    shown = [registry.display(sp.Eq(k, v, evaluate=False)) for k, v in using.mapping.items()]
    if any("\\begin{aligned}" in tex for tex in shown):
        return "\n\n".join(shown)
    rows = [tex.replace(" = ", " &= ", 1) for tex in shown]  # each is "lhs = rhs"
    return "\\begin{aligned}\n" + " \\\\\n".join(rows) + "\n\\end{aligned}"


def derivation(
    name: str, title: str, steps: Iterable[Step], *, chapter: str = "", notes: Iterable[str] = ()
) -> Derivation:
    return Derivation(
        name=name, title=title, steps=tuple(steps), chapter=chapter, notes=tuple(notes)
    )


# Every derivation the library defines registers a builder here, so that tests and the
# ``derivations --verify`` command find them all.
_BUILDERS: dict[str, object] = {}

#: The sentence printed under a derivation, saying how each of its premises is justified.  The
#: premises are checked against oracles that sit above the costs they check
#: (:mod:`dmlimits.premises`), so that layer registers the renderer here when it is imported.
_JUSTIFICATION: Callable[[Derivation], str] | None = None


def register_justification(render: Callable[[Derivation], str]) -> None:
    """Render the justification of every derivation's premises with ``render`` (called by
    :mod:`dmlimits.premises` when imported)."""
    global _JUSTIFICATION
    _JUSTIFICATION = render


def register(builder):
    """Decorator for a zero-argument function returning a :class:`Derivation`: the function
    builds it once a process and returns that derivation again when called again.

    A derivation is immutable (its steps are sympy objects; :meth:`Derivation.verify` only
    notes that it is proved), and a chapter asks for the same one several times, directly and
    through the derivations that cite it: without this, the data-parallel chapter would build
    the all-reduce's four times and the compute ratio's three."""
    kept = functools.cache(builder)
    _BUILDERS[builder.__module__ + "." + builder.__name__] = kept
    return kept


def import_library() -> None:
    """Import every module of the package, subpackages included: each registers its
    derivations (here) and its symbols (in the registry of ``dmlimits.core.symbols``) when
    imported."""
    # The package's folder, walked as a registry finds its entries: every module is imported
    # by name, so that each layer registers what it derives without this module naming it.
    package = str(Path(__file__).resolve().parents[1])
    for module in pkgutil.walk_packages([package], prefix="dmlimits."):
        if module.name != "dmlimits.__main__":
            importlib.import_module(module.name)


def builders() -> dict[str, object]:
    """Every derivation's builder, by its module and name (``"dmlimits.costs.pipeline.bubble_1f1b_"
    "derivation"``), every module of the package imported first."""
    import_library()
    return dict(_BUILDERS)


def all_derivations() -> list[Derivation]:
    """Every derivation of the library, built fresh.

    Every module of the package is imported first, so the set does not depend on what the
    caller happened to import: a module that registers a derivation is always included."""
    return [builder() for builder in builders().values()]


_BUILT: dict[str, Derivation] = {}  # by name: what derivation_named has built in this process
_BUILT_BY: set[str] = set()  # the builders it has called


def derivation_named(name: str) -> Derivation | None:
    """The derivation called ``name`` (``None`` if the library has none), building no more
    than it must: the builders of the module whose name begins the derivation's
    (``closed_forms`` for ``closed-forms-critical``) first, then the others, each once per
    process.  Rendering one derivation's premises asks for the few it cites, so that a
    chapter's kernel does not build every derivation of the library (:func:`all_derivations`)
    to find them."""

    def elsewhere(key: str) -> bool:
        module = key.rsplit(".", 2)[-2].replace("_", "-")
        return not name.startswith(module + "-")

    for imported in (False, True):
        if name in _BUILT:
            return _BUILT[name]
        if imported:
            import_library()
        for key in sorted(_BUILDERS, key=elsewhere):  # a stable sort: registration order
            if key in _BUILT_BY:
                continue
            _BUILT_BY.add(key)
            d = _BUILDERS[key]()
            _BUILT.setdefault(d.name, d)
            if d.name == name:
                return d
    return None


def derivations_of(module: str) -> list[Derivation]:
    """The derivations registered by one module of the package (e.g. ``"pipeline"`` or
    ``"measured.runs"``)."""
    importlib.import_module(f"dmlimits.{module}")
    prefix = f"dmlimits.{module}."
    return [builder() for key, builder in _BUILDERS.items() if key.startswith(prefix)]
