"""Closed forms (dmlimits.costs.closed_forms): critical compute and the latency wall."""

from __future__ import annotations

import numpy as np
import pytest
import sympy as sp
from conftest import derivations_of
from dmlimits.core import published
from dmlimits.core import scenario as sc
from dmlimits.core import symbols as s
from dmlimits.core import units as u
from dmlimits.core.derivation import DerivationError, Step, derivation
from dmlimits.core.symbols import REGISTRY
from dmlimits.costs import closed_forms


@pytest.fixture(scope="module")
def h100():
    return sc.resolve("h100")


def test_the_six_closed_form_derivations_are_registered():
    found = derivations_of("costs.closed_forms")
    assert len(found) == 6


@pytest.mark.parametrize("name", sorted(closed_forms.COST_FORMULAS))
def test_closed_forms_have_their_units(name):
    expr, unit = closed_forms.COST_FORMULAS[name]
    u.check_unit(expr, REGISTRY.units, unit)


@pytest.mark.parametrize(
    ("key", "published_key"),
    [("t_crit_flop", "paper1.t_crit_flop"), ("t_limit_flop", "paper1.t_limit_flop")],
)
def test_h100_values_match_the_paper(h100, key, published_key):
    value = closed_forms.values(h100)[key]
    assert f"{value:.3g}" == f"{published.value(published_key):.3g}"


def test_intermediate_quantities_match_the_notes(h100):
    # Reference notes, section 7: n ~ 590 tokens, a ~ 26,400 for the H100.
    v = closed_forms.values(h100)
    assert round(v["nanobatch_tokens"]) == 590
    assert round(v["shard_side"], -2) == 26400


def test_a_wrong_solution_is_caught():
    d = closed_forms.critical_compute_derivation()
    last = d.steps[-1]
    wrong = sp.Eq(s.compute, last.expr.rhs * 2)
    steps = [*d.steps[:-1], Step(last.text, wrong, solve_for=s.compute)]
    with pytest.raises(DerivationError):
        derivation(d.name, d.title, steps).verify()


def test_at_alpha_zero_the_closed_forms_are_the_notebooks_formulas(h100):
    """At alpha = 0 the derived forms reduce to the paper's closed forms (Erdil &
    Schneider-Joseph 2024, its critical-size and latency-wall formulas):
    T_crit = 2 (1/960) (rho M T / (a^2 n))^2 with M = 8 F / 2 MAC/s, and
    T_limit = 2 (3/320) (rho T / t_lat)^2."""
    v = closed_forms.values(h100)
    rho = h100["closed_forms.batch_tokens"] / h100["closed_forms.layers"]
    M = h100["network.node_size"] * h100.peak_flops / 2
    T = h100.train_seconds
    a, n = v["shard_side"], v["nanobatch_tokens"]
    assert v["t_crit_flop"] == pytest.approx(2 / 960 * (rho * M * T / (a**2 * n)) ** 2)
    assert v["t_limit_flop"] == pytest.approx(2 * 3 / 320 * (rho * T / v["latency_s"]) ** 2)


def test_sensitivity_to_alpha_is_monotone(h100):
    alphas = np.linspace(-0.2, 0.2, 41)
    crit = closed_forms.evaluate("critical_compute", h100, alphas)
    wall = closed_forms.evaluate("latency_wall", h100, alphas)
    assert crit.shape == wall.shape == alphas.shape
    assert np.all(np.diff(np.log(crit)) > 0) and np.all(np.diff(np.log(wall)) > 0)
    assert crit[20] == pytest.approx(closed_forms.values(h100)["t_crit_flop"])


@pytest.mark.parametrize(
    ("setting", "key", "factor"),
    [
        ("training.months=6", "t_limit_flop", 4.0),  # T^2
        ("hardware.kernel_latency=2.25e-6", "t_limit_flop", 4.0),  # t_lat^-2
        ("network.inter_node.bandwidth=200e9", "t_crit_flop", 16.0),  # a^-4
        ("closed_forms.batch_tokens=8e6", "t_crit_flop", 4.0),  # rho^2
    ],
)
def test_overrides_reach_the_closed_forms(h100, setting, key, factor):
    base = closed_forms.values(h100)[key]
    assert closed_forms.values(sc.resolve("h100", [setting]))[key] == pytest.approx(factor * base)


@pytest.mark.parametrize(
    ("setting", "alpha", "name", "symbol", "key"),
    [
        ("network.inter_node.bandwidth", 0.0, "critical_compute", "bw1", "t_crit_flop"),
        ("network.inter_node.bandwidth", 0.2, "critical_compute", "bw1", "t_crit_flop"),
        ("hardware.hbm_bandwidth", 0.2, "critical_compute", "bw_hbm", "t_crit_flop"),
        ("hardware.kernel_latency", 0.1, "latency_wall", "t_lam", "t_limit_flop"),
    ],
)
def test_a_power_of_a_closed_form_is_how_far_it_moves(h100, setting, alpha, name, symbol, key):
    """power_of's exponent, read at the scenario's alpha, is the move of the closed form when
    the value behind the symbol is multiplied by 3 (the what-if chapter's exercises read it)."""
    from dmlimits.costs import collectives as co
    from dmlimits.costs import matmul

    sym = {"bw1": co.bw1, "bw_hbm": matmul.bw_hbm, "t_lam": closed_forms.t_lam}[symbol]
    base = sc.resolve_overrides(h100, {"closed_forms.alpha": alpha})
    moved = sc.resolve_overrides(base, {setting: 3 * base[setting]})
    power = float(closed_forms.power_of(name, sym).subs(s.alpha_ratio, alpha))
    assert closed_forms.values(moved)[key] / closed_forms.values(base)[key] == pytest.approx(
        3**power, rel=1e-9
    )
    assert power != 0


def test_a_power_of_a_symbol_the_form_lacks_is_refused():
    from dmlimits.costs import collectives as co

    with pytest.raises(ValueError, match=r"W_net1 for the closed form 'latency_wall'"):
        closed_forms.power_of("latency_wall", co.bw1)
    with pytest.raises(ValueError, match=r"closed form: got 'wall'; expected one of"):
        closed_forms.power_of("wall", s.train_time)


def test_network_variants(h100):
    flat = closed_forms.values(sc.resolve("h100-global-nvlink"))
    unlimited = closed_forms.values(sc.resolve("h100-infinite-network-low-latency"))
    assert flat["t_crit_flop"] > closed_forms.values(h100)["t_crit_flop"]
    assert unlimited["t_crit_flop"] == np.inf
    assert unlimited["t_limit_flop"] == pytest.approx(
        100 * closed_forms.values(h100)["t_limit_flop"]
    )


def test_alpha_outside_its_range_is_refused():
    with pytest.raises(sc.ScenarioError, match=r"closed_forms\.alpha"):
        sc.resolve("h100", ["closed_forms.alpha=0.5"])


def test_implied_alpha_is_small_and_positive(h100):
    assert 0 < closed_forms.implied_alpha(h100) < 0.1


@pytest.mark.parametrize("preset", ["h100", "a100", "v100", "h100-global-nvlink"])
def test_shard_side_is_the_tensor_parallel_crossover(preset):
    """Two derivations of one quantity: the closed forms' smallest shard (a node's arithmetic
    against its InfiniBand traffic) is the tensor-parallel chapter's crossover at peak."""
    from dmlimits.costs import tensor_parallel as tpm

    scn = sc.resolve(preset)
    assert closed_forms.values(scn)["shard_side"] == pytest.approx(
        tpm.crossover_shard(scn, 1, derated=False), rel=1e-12
    )
