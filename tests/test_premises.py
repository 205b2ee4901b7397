"""Premises (issue #12, item 6): the first step and every substitution labelled a definition or
an assumption is derived from a library result or checked against an independent oracle, and a
wrong premise that the step-by-step proof accepts is caught."""

from __future__ import annotations

import pytest
import sympy as sp
from conftest import derivation_called, derivation_names, every_derivation
from dmlimits import premises
from dmlimits.core.derivation import Step, Substitution, derivation
from dmlimits.costs import collectives as co
from dmlimits.premises import ORACLES, PremiseError

# make check (--dist loadgroup) runs the tests that build every derivation on one worker: the
# other builds none (see conftest.derivation_names).
pytestmark = pytest.mark.xdist_group("derivations")


def test_every_derivation_has_an_oracle_and_every_oracle_a_derivation():
    assert sorted(ORACLES) == sorted(d.name for d in every_derivation())
    assert derivation_names() == sorted(ORACLES)  # what the tests below run over
    assert {o.kind for o in ORACLES.values()} == set(premises.ORACLE_KINDS)


@pytest.mark.parametrize("name", derivation_names())
def test_every_premise_is_justified_and_its_oracle_agrees(name):
    d = derivation_called(name)
    report = premises.check(d)
    assert report.premises[0].kind == "first step"
    assert len(report.premises) == 1 + len(d.substitutions)
    assert report.agreed


@pytest.mark.parametrize("name", derivation_names())
def test_each_oracle_rejects_a_result_off_by_a_factor_of_two(name):
    d = derivation_called(name)
    with pytest.raises(PremiseError):
        ORACLES[d.name].run(premises.scaled(d))


def _ring_chain(first: sp.Eq, chunk: sp.Expr) -> object:
    """The ring all-reduce's derivation rebuilt from ``first`` with the chunk defined as
    ``chunk``, every later step chained from the one before it."""
    original = co.ring_allreduce_derivation()
    steps = [Step(original.steps[0].text, first)]
    for step in original.steps[1:]:
        using = step.using
        if using is not None and using.name == "the vector is cut into p equal chunks":
            (key,) = using.mapping
            using = Substitution(using.name, {key: chunk}, using.kind)
        prev = steps[-1].expr
        new = using.apply(prev) if using is not None else prev
        steps.append(Step(step.text, new, using=using))
    return derivation(original.name, original.title, steps, chapter=original.chapter)


def test_a_first_step_off_by_two_verifies_but_is_caught():
    original = co.ring_allreduce_derivation()
    first = original.steps[0].expr
    wrong = _ring_chain(sp.Eq(first.lhs, 2 * first.rhs), _chunk(original))
    wrong.verify()  # the steps still follow from each other ...
    with pytest.raises(PremiseError, match="the oracle"):
        premises.check(wrong)  # ... but the result is not what a ring sends


def _chunk(d):
    (sub,) = [s.using for s in d.steps if s.using and "equal chunks" in s.using.name]
    return next(iter(sub.mapping.values()))


def test_a_false_definition_verifies_but_is_caught():
    original = co.ring_allreduce_derivation()
    right = _chunk(original)
    n_w, p = sp.Symbol("n_w", positive=True), sp.Symbol("p_coll", positive=True)
    symbols = {str(x): x for x in right.free_symbols}
    false = right * symbols["p_coll"] / (symbols["p_coll"] - 1)  # "a (p - 1)-th of the vector"
    assert n_w.name in symbols and p.name in symbols
    wrong = _ring_chain(original.steps[0].expr, false)
    wrong.verify()
    with pytest.raises(PremiseError):
        premises.check(wrong)
    assert premises.check(_ring_chain(original.steps[0].expr, right)).agreed


def test_a_cited_premise_is_checked_against_the_result_it_cites():
    d = derivation_called("collectives-allreduce-tiled")
    (first, *_) = premises.premises(d)
    assert first.derived and first.cites == ("collectives-allreduce-cluster-5",)
    tampered = premises.scaled(d)  # its first step is no longer the cluster form
    assert not premises.premises(tampered)[0].derived


def test_a_derivation_without_an_oracle_is_refused():
    a = sp.Symbol("C", positive=True)
    d = derivation("test-no-oracle", "t", [Step("a", sp.Eq(a, 1))])
    with pytest.raises(PremiseError, match="test-no-oracle: no oracle checks its premises"):
        premises.check(d)


def test_the_simulations_are_real():
    # A ring all-reduce sends 2 (p - 1) / p of the vector and ends with the sum everywhere.
    for p in (2, 3, 7):
        sent, phases = premises.ring_allreduce(p, p * 10)
        assert (sent, phases) == (2 * (p - 1) * 10, 2)
    assert premises.ring_allreduce(1, 5) == (0, 0)
    # Streaming through two links takes the slower link's time, plus a fill that shrinks.
    assert premises.pipelined_makespan(2.0, 1.0, 1) == 3.0  # half of t0, t1, half of t0
    assert abs(premises.pipelined_makespan(2.0, 1.0, 10_000) - 2.0) < 1e-3


def test_the_book_prints_each_derivations_justification():
    d = derivation_called("collectives-ring-allreduce")
    md = d.markdown()
    assert md.endswith(premises.justification_markdown(d))
    assert "against a simulation: a ring all-reduce simulated chunk by chunk" in md
    cited = derivation_called("model-width-dense").markdown()
    assert "step 1 is {eq}`model-compute-width-5`" in cited
    # Folded: one dropdown per derivation, after its last equation.
    assert md.count(f":::{{admonition}} {premises.PREMISES_TITLE}\n:class: dropdown") == 1
    assert md.rstrip().endswith(":::")


def test_a_first_step_that_restates_a_cited_result_is_not_numbered_again():
    """(1.9) printed again as a new number would send a reader looking for a new result."""
    d = derivation_called("model-width-dense")
    assert d.restates() == "model-compute-width-5"
    md = d.markdown()
    assert f":label: {d.label(1)}" not in md
    assert [f":label: {d.label(i)}" in md for i in range(2, len(d.steps) + 1)] == [True] * (
        len(d.steps) - 1
    )
    # A first step that cites a result but is not it keeps its number, and its premise is not
    # counted as derived.
    first = d.steps[0].expr
    moved = d.with_step(1, sp.Eq(first.lhs, 2 * first.rhs))
    assert moved.restates() is None
    assert not premises.premises(moved)[0].derived


def test_oracle_kind_is_checked():
    with pytest.raises(ValueError, match="oracle kind: got 'guess'"):
        premises.Oracle("x", "guess", "y", lambda d: "")
