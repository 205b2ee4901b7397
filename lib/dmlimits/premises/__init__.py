"""Premises: what justifies the steps a derivation does not prove.

:meth:`dmlimits.core.derivation.Derivation.verify` proves that every step follows from the one
before it.  It cannot prove the first step, nor a substitution labelled a definition or an
assumption: those are the derivation's *premises*, and a wrong premise verifies as well as a right
one.  This subpackage says, for every derivation of the library, how each premise is justified
(:mod:`.base`: the oracles' registry and evaluation; :mod:`.simulations`: the simulations and
counts; :mod:`.oracles`: one oracle per derivation; here: the premises and the report):

* **derived**: the premise cites a lower-level result of the library (``{eq}`name-n``` in its
  sentence or in the substitution's name) and is checked to be that result;
* **checked**: the derivation's result is compared, at several points, with an independent
  *oracle* that never reads the derivation: a simulation (a ring all-reduce sent chunk by
  chunk, a pipeline schedule laid out pass by pass), a hand count (an enumeration in plain
  loops) or a published value (the authors' final code's outputs, the paper's numbers).  Every
  premise of the derivation flows into its result, so a wrong first step or a false definition
  changes the result and the oracle rejects it.

``python -m dmlimits derivations --verify`` reports, per derivation, the steps proved and the
premises checked and by what; the tests run every oracle, require one for every derivation, and
check that each oracle rejects the derivation's result scaled by two (a premise off by a factor
of two that :meth:`~dmlimits.core.derivation.Derivation.verify` would accept).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

import sympy as sp

from dmlimits.core.derivation import (
    CITE,
    Derivation,
    Substitution,
    derivation_named,
    register_justification,
    same,
)
from dmlimits.premises import oracles as _oracles  # noqa: F401  (registers one oracle per derivation)
from dmlimits.premises.base import ORACLE_KINDS, ORACLES, RTOL, Oracle, PremiseError, oracle
from dmlimits.premises.simulations import pipelined_makespan, ring_allreduce, two_level_allreduce

__all__ = [
    "ORACLES", "ORACLE_KINDS", "PREMISES_TITLE", "RTOL", "Oracle", "Premise", "PremiseError",
    "Report", "check", "justification_markdown", "oracle", "pipelined_makespan", "premises",
    "ring_allreduce", "scaled", "two_level_allreduce",
]  # fmt: skip


# --- Premises and how each is justified ---------------------------------------------------------
@dataclass(frozen=True)
class Premise:
    """A step of a derivation that :meth:`~dmlimits.core.derivation.Derivation.verify` does not
    prove."""

    step: int  # 1-based
    kind: str  # "first step", "definition" or "assumption"
    name: str  # the substitution's name, or the first step's sentence
    cites: tuple[str, ...]  # equation labels the premise cites
    derived: bool  # whether it was checked to be the cited result itself

    @property
    def label(self) -> str:
        return f"step {self.step}, {self.kind}" + (f" ({self.name})" if self.step > 1 else "")


def _cited_steps(labels: Iterable[str]) -> list[sp.Basic]:
    out = []
    for label in labels:
        name, index = label.rsplit("-", 1)
        d = derivation_named(name)
        if d is None:
            raise PremiseError(f"cites {label}, which is no derivation's step")
        if not 1 <= int(index) <= len(d.steps):
            raise PremiseError(f"cites {label}; {name} has {len(d.steps)} steps")
        out.append(d.steps[int(index) - 1].expr)
    return out


def _substitution_is_cited(sub: Substitution, cited: list[sp.Basic]) -> bool:
    """Every pair of the mapping is one of the cited equations (``lhs = rhs``)."""
    eqs = [c for c in cited if isinstance(c, sp.Equality)]
    return all(
        any(e.lhs == k and same(sp.Eq(k, v, evaluate=False), e) for e in eqs)
        for k, v in sub.mapping.items()
    )


def premises(d: Derivation) -> list[Premise]:
    """The premises of ``d``: its first step and every substitution labelled a definition or an
    assumption, each marked *derived* where it cites a library result and is that result."""
    out = []
    first = d.steps[0]
    labels = tuple("-".join(m) for m in CITE.findall(first.text))
    _cited_steps(labels)  # each cited label names a step of the library
    derived = d.restates() is not None
    out.append(Premise(1, "first step", first.text, labels, derived))
    for index, step in enumerate(d.steps[1:], start=2):
        if step.using is None:
            continue
        sub = step.using
        labels = tuple("-".join(m) for m in CITE.findall(sub.name))
        derived = bool(labels) and _substitution_is_cited(sub, _cited_steps(labels))
        out.append(Premise(index, sub.kind, sub.name, labels, derived))
    return out


@dataclass(frozen=True)
class Report:
    """What :func:`check` found for one derivation."""

    name: str
    steps_proved: int
    premises: tuple[Premise, ...]
    oracle: Oracle | None
    agreed: str  # the oracle's summary

    @property
    def derived(self) -> int:
        return sum(p.derived for p in self.premises)

    def line(self) -> str:
        n, k = len(self.premises), self.steps_proved
        by = f"{self.oracle.kind}: {self.agreed}" if self.oracle else "no oracle"
        return (f"{k} step{'s' * (k != 1)} proved; {n} premise{'s' * (n != 1)}: "
                f"{self.derived} derived, {n - self.derived} checked ({by})")  # fmt: skip


def check(d: Derivation) -> Report:
    """Verify ``d``'s steps, check its cited premises and run its oracle; raise
    :class:`~dmlimits.core.derivation.DerivationError` or :class:`PremiseError` naming what
    fails."""
    d.verify()
    found = premises(d)
    o = ORACLES.get(d.name)
    if o is None and not all(p.derived for p in found):
        loose = "; ".join(p.label for p in found if not p.derived)
        raise PremiseError(f"{d.name}: no oracle checks its premises ({loose})")
    agreed = o.run(d) if o else ""
    return Report(d.name, len(d.steps) - 1, tuple(found), o, agreed)


def justification_markdown(d: Derivation) -> str:
    """The note the book prints under a derivation, folded (a dropdown admonition): its
    premises, with their steps, and where each is justified."""
    found = premises(d)
    o = ORACLES.get(d.name)
    derived = [p for p in found if p.derived]
    checked = [p for p in found if not p.derived]
    parts = []
    if derived:
        refs = ", ".join(f"step {p.step} is " + " and ".join(f"{{eq}}`{c}`" for c in p.cites)
                         for p in derived)  # fmt: skip
        parts.append(f"derived from the library's own results ({refs})")
    if checked:
        steps = [str(p.step) for p in checked]
        if len(steps) == 1:
            which = "the first step is" if steps == ["1"] else f"step {steps[0]}'s premise is"
        else:
            which = "the premises of steps " + ", ".join(steps[:-1]) + f" and {steps[-1]} are"
        if o is None:
            parts.append(f"{which} not checked")
        else:
            parts.append(
                f"{which} checked in the tests, through the result, against "
                f"{_ARTICLE[o.kind]}: {o.what}"
            )
    text = "; ".join(parts)
    return (f":::{{admonition}} {PREMISES_TITLE}\n:class: dropdown\n\n"
            f"{text[0].upper()}{text[1:]}.\n:::")  # fmt: skip


#: The title of the folded block under each derivation that says where its premises come from:
#: a reader who wants the checks opens it; the derivation reads on without it.
PREMISES_TITLE = "Where the premises come from"


_ARTICLE = {"simulation": "a simulation", "hand count": "a hand count",
            "published value": "a published value"}  # fmt: skip


def scaled(d: Derivation, factor: int = 2) -> Derivation:
    """``d`` with every step's right side multiplied by ``factor``: the chain still links where
    its steps are linear, as a premise off by that factor would leave it."""
    def scale(e: sp.Basic) -> sp.Basic:
        if isinstance(e, sp.Equality):
            return sp.Eq(e.lhs, factor * e.rhs, evaluate=False)
        return factor * e

    return replace(d, steps=tuple(replace(s, expr=scale(s.expr)) for s in d.steps))


register_justification(justification_markdown)
