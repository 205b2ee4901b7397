"""Dimensional analysis: the checker itself, and every cost formula's unit."""

import pytest
import sympy as sp
from dmlimits.core import symbols as s
from dmlimits.core import units as u
from dmlimits.core.symbols import REGISTRY
from dmlimits.costs import model


def test_bandwidth_time_is_seconds():
    w = sp.Symbol("w_test_words", positive=True)
    units = {**REGISTRY.units, w: u.one}
    bw = sp.Symbol("bw_test", positive=True)
    units[bw] = u.byte / u.second
    word = sp.Symbol("word_test", positive=True)
    units[word] = u.byte
    assert u.dimension(w * word / bw, units) == u.second


def test_adding_unlike_units_is_refused():
    with pytest.raises(u.DimensionError, match=r"is in (s|FLOP) but .* is in (s|FLOP)"):
        u.dimension(s.train_time + s.compute, REGISTRY.units)


def test_max_of_unlike_units_is_refused():
    with pytest.raises(u.DimensionError):
        u.dimension(sp.Max(s.train_time, s.compute), REGISTRY.units)


def test_symbolic_power_of_a_dimensioned_quantity_is_refused():
    with pytest.raises(u.DimensionError, match="symbolic power"):
        u.dimension(s.compute**s.batch_exp, REGISTRY.units)


def test_unregistered_symbol_is_refused():
    with pytest.raises(u.DimensionError, match="no registered unit"):
        u.dimension(sp.Symbol("nobody"), REGISTRY.units)


@pytest.mark.parametrize("name", sorted(model.COST_FORMULAS))
def test_model_cost_formulas_have_their_units(name):
    expr, unit = model.COST_FORMULAS[name]
    u.check_unit(expr, REGISTRY.units, unit)


def test_a_wrong_unit_is_reported():
    with pytest.raises(u.DimensionError, match="expected s"):
        u.check_unit(model.MIN_GPUS, REGISTRY.units, u.second)


def test_batch_laws_are_in_tokens():
    for law, expr in model.BATCH_LAWS.items():
        assert u.dimension(expr, REGISTRY.units) == 1, law


def test_unit_text():
    assert u.unit_text(u.byte / u.second) == "byte/s"
    assert u.unit_text(u.flop / u.second) == "FLOP/s"
    assert u.unit_text(u.one) == "1"
