"""Tensor parallelism (dmlimits.costs.tensor_parallel): derivations, units, the split rule, 1D as a
special case, the crossover, and errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
import sympy as sp
from conftest import assert_levels_add_up, derivations_of
from dmlimits.book import tensor_parallel_page
from dmlimits.core import derivation
from dmlimits.core import scenario as sc
from dmlimits.core import symbols as s
from dmlimits.core import units as u
from dmlimits.core.symbols import REGISTRY
from dmlimits.costs import collectives as co
from dmlimits.costs import tensor_parallel as tpm

H100 = sc.resolve("h100")
FLAT = sc.resolve("h100", sets=["network.topology=flat"])
UNLIMITED = sc.resolve("h100", sets=["network.topology=unlimited"])
DM, DFF, TOK = 12288, 49152, 2048


# --- Derivations and units ---------------------------------------------------------------------
def _derivations() -> list[derivation.Derivation]:
    return derivations_of("costs.tensor_parallel")


def test_derivations_are_registered():
    found = _derivations()
    assert len(found) >= 2
    names = [d.name for d in found]
    assert len(names) == len(set(names))
    for d in found:
        assert d.chapter == "tensor_parallel"
        assert d.name.startswith("tensor-parallel")
        assert len(d.steps) >= 2


def test_a_broken_step_is_caught():
    d = tpm.traffic_derivation()
    steps = list(d.steps)
    steps[2] = derivation.Step(steps[2].text, sp.Eq(tpm.q_tp, 2 * steps[2].expr.rhs))
    broken = derivation.derivation(d.name, d.title, steps, chapter=d.chapter)
    with pytest.raises(derivation.DerivationError, match="step 3"):
        broken.verify()


@pytest.mark.parametrize("name", sorted(tpm.COST_FORMULAS))
def test_cost_formulas_have_their_units(name):
    expr, unit = tpm.COST_FORMULAS[name]
    assert not REGISTRY.unregistered(expr)
    u.check_unit(expr, REGISTRY.units, unit)


def test_time_formulas_are_in_seconds_and_bytes_in_bytes():
    for name, (_, unit) in tpm.COST_FORMULAS.items():
        if name.startswith("tp_bytes"):
            assert unit == u.byte
        elif name.startswith("crossover"):
            assert unit == u.one
        else:
            assert unit == u.second


def test_summary_entry():
    assert set(tpm.SUMMARY) >= {
        "parallelism",
        "what_moves",
        "volume",
        "link",
        "overlaps_compute",
        "latency",
    }
    assert tpm.SUMMARY["overlaps_compute"] is True
    assert "per token" in tpm.SUMMARY["what_moves"]
    u.check_unit(tpm.SUMMARY["volume"], REGISTRY.units, u.byte)
    u.check_unit(tpm.SUMMARY["latency"], REGISTRY.units, u.second)
    # The volume is the traffic per token: times b it is the traffic formula.
    assert sp.simplify(tpm.SUMMARY["volume"] * tpm.b - tpm.COST_FORMULAS["tp_bytes"][0]) == 0


def test_symbols_belong_to_the_chapter():
    for sym in (tpm.n_tp, tpm.tp_m, tpm.tp_f, tpm.q_tp, tpm.t_tp_bw, tpm.t_comp, tpm.shard_side):
        assert REGISTRY[sym].defined_in == "tensor_parallel"
    # Reused, not redeclared.
    assert tpm.word is co.word
    assert tpm.W is co.bw_level


def test_traffic_is_built_from_the_collectives_expression():
    """Each group's bytes are the ring all-reduce bytes of the collectives module."""
    q_m = tpm.GROUP_BYTES.mapping[tpm.q_tp_m]
    ring = co.ALLREDUCE_BYTES.subs({co.parts: tpm.tp_m, co.n_words: tpm.b * s.d_ff / tpm.tp_f})
    assert sp.simplify(q_m - ring) == 0


def test_the_crossover_is_the_papers_closed_form_at_peak():
    """The paper's minimum shard a = 4 M / (3 * 8 W / (2 * 2 bytes)), M = 8 F / 2 (per node)."""
    f, w_ib = H100.peak_flops, H100["network.inter_node.bandwidth"]
    macs = 8 * f / 2
    paper = 4 * macs / (3 * 8 * w_ib / (2 * 2))
    assert tpm.crossover_shard(H100, 1, derated=False) == pytest.approx(paper, rel=1e-12)


# --- The split rule ----------------------------------------------------------------------------
def _brute_force(n: int, rule: str) -> list[tuple[int, int]]:
    out = []
    for m in range(1, n + 1):
        for f in range(1, n + 1):
            if m * f != n:
                continue
            if rule == "exact":
                ok = math.sqrt(n) - 1e-9 <= f <= 4 * math.sqrt(n) + 1e-9
            else:
                ok = math.isqrt(n) <= f <= 4 * math.isqrt(n)
            if ok:
                out.append((m, f))
    return sorted(out, key=lambda mf: mf[1])


@pytest.mark.parametrize("rule", tpm.SPLIT_RULES)
def test_split_rule_against_brute_force(rule):
    for n in [*range(1, 130), 256, 512, 1000, 1024, 4096]:
        assert tpm.tp_splits(n, rule) == _brute_force(n, rule), n


def test_split_rule_facts():
    for n in (2**k for k in range(0, 21)):
        splits = tpm.tp_splits(n, "exact")
        assert splits, n
        for m, f in splits:
            assert m * f == n and f >= m and f <= 16 * m
        # Rounding the root down: at most twice the model degree above the ff degree.
        for m, f in tpm.tp_splits(n):
            assert m * f == n and 2 * f >= m and f <= 16 * m
    assert (1, 16) in tpm.tp_splits(16) and (1, 32) not in tpm.tp_splits(32)
    assert (4, 2) in tpm.tp_splits(8) and (4, 2) not in tpm.tp_splits(8, "exact")
    assert tpm.tp_splits(8) == tpm.tp_splits(8, "isqrt")  # the chapter's rule is the default
    assert tpm.tp_splits(np.int64(8)) == tpm.tp_splits(8.0)


# --- 1D as the special case ----------------------------------------------------------------------
def test_1d_is_the_general_formula_at_tp_model_one():
    general = tpm.COST_FORMULAS["tp_bytes"][0]
    assert sp.simplify(general.subs(tpm.tp_m, 1) - tpm.COST_FORMULAS["tp_bytes_1d"][0]) == 0
    for n in (2, 4, 8):
        t = tpm.tp_comm_time(H100, DM, DFF, TOK, 1, n, 0, 0)
        # Megatron: one all-reduce of the d_model-wide output per pass among all n GPUs.
        ref = co.allreduce_time(H100, DM * TOK, n, 0, seq=2)
        assert t.bandwidth == pytest.approx(ref.bandwidth, rel=1e-12)
        assert t.latency == pytest.approx(ref.latency, rel=1e-12)
        assert tpm.tp_bytes(H100, DM, DFF, TOK, 1, n) == pytest.approx(
            2 * co.allreduce_bytes(H100, DM * TOK, n), rel=1e-12
        )


def test_crossover_1d_is_the_2d_balance_at_tp_model_one():
    balance = tpm.crossover_derivation().steps[2].expr.subs(tpm.tp_m, 1)
    c_star = tpm.crossover_1d_derivation().steps[2].expr.rhs
    assert sp.simplify((balance.lhs - balance.rhs).subs(tpm.shard_cols, c_star)) == 0


# --- Numbers against the collectives module ------------------------------------------------------
def test_each_group_is_a_tiled_allreduce_of_its_slice():
    """Per GPU: the model group all-reduces d_ff / N_f words per token among N_m, twice."""
    m, f = 4, 8
    t = tpm.tp_comm_time(FLAT, DM, DFF, TOK, m, f, 0, 0)
    ref_m = co.allreduce_time(FLAT, DFF / f * TOK, m, 0, seq=2)
    ref_f = co.allreduce_time(FLAT, DM / m * TOK, f, 0, seq=2)
    assert t.bandwidth == pytest.approx(ref_m.bandwidth + ref_f.bandwidth, rel=1e-12)
    assert t.latency == pytest.approx(ref_m.latency + ref_f.latency, rel=1e-12)
    bytes_ = tpm.tp_bytes(H100, DM, DFF, TOK, m, f)
    assert t.bandwidth == pytest.approx(bytes_ / (FLAT["network.intra_node.bandwidth"] / 2))


def test_levels_and_split_placement():
    inter = tpm.tp_comm_time(H100, DM, DFF, TOK, 4, 8, 1, 1)
    intra = tpm.tp_comm_time(FLAT, DM, DFF, TOK, 4, 8, 0, 0)
    ratio = H100["network.intra_node.bandwidth"] / H100["network.inter_node.bandwidth"]
    assert inter.bandwidth == pytest.approx(ratio * intra.bandwidth)
    placed = tpm.tp_comm_time(H100, DM, DFF, TOK, 4, 8, 0, (2, 4))
    ref_f = co.allreduce_time_split(H100, DM, 2, 4, seq=2, par=TOK, n_gpu=32)
    ref_m = co.allreduce_time(H100, DFF, 4, 0, seq=2, par=TOK, n_gpu=32)
    assert placed.bandwidth == pytest.approx(ref_f.bandwidth + ref_m.bandwidth, rel=1e-12)
    assert placed.latency == pytest.approx(ref_f.latency + ref_m.latency, rel=1e-12)
    assert placed.bandwidth < inter.bandwidth


def test_vectorized_and_scalar_agree():
    n = np.array([2, 4, 8])
    t = tpm.tp_comm_time(H100, DM, DFF, TOK, 1, n, 0, 0)
    assert t.bandwidth.shape == (3,)
    for i, k in enumerate(n):
        assert t.bandwidth[i] == tpm.tp_comm_time(H100, DM, DFF, TOK, 1, int(k), 0, 0).bandwidth
    c = tpm.tp_compute_time(H100, DM, DFF, np.array([1.0, 2.0]), 2, 4)
    assert c[1] == pytest.approx(2 * c[0])
    assert isinstance(tpm.tp_compute_time(H100, DM, DFF, TOK, 2, 4), float)


def test_compute_is_six_matmuls_of_the_shard():
    from dmlimits.costs import matmul

    m, f = 2, 4
    c = tpm.tp_compute_time(H100, DM, DFF, TOK, m, f)
    arith = matmul.level_times(H100, DM // m, DFF // f, TOK, "forward")["arithmetic"]
    assert c == pytest.approx(6 * arith, rel=1e-12)


def test_a_group_of_one_sends_and_waits_for_nothing():
    t = tpm.tp_comm_time(H100, DM, DFF, TOK, 1, 1, 0, 0)
    assert t.bandwidth == 0 and t.latency == 0
    two_d = tpm.tp_comm_time(H100, DM, DFF, TOK, 2, 4, 0, 0)
    assert two_d.latency == pytest.approx(8 * H100["network.latency"])


def test_unlimited_network_has_no_bandwidth_time_but_latency():
    t = tpm.tp_comm_time(UNLIMITED, DM, DFF, TOK, 4, 8, 1, 1)
    assert t.bandwidth == 0 and t.latency > 0
    assert tpm.crossover_shard(UNLIMITED, 1) == 0


# --- The crossover -------------------------------------------------------------------------------
@pytest.mark.parametrize("level", [0, 1])
def test_crossover_balances_compute_and_communication(level):
    """At the crossover, a square shard with large groups: bandwidth time = compute time."""
    net = FLAT if level == 0 else H100
    side = tpm.crossover_shard(net, level)
    m, f = 2**10, 2**10  # large groups, ring fractions near one
    dm, dff = round(side) * m, round(side) * f  # whole rows and columns
    comm = tpm.tp_comm_time(net, dm, dff, TOK, m, f, level, level).bandwidth
    comp = tpm.tp_compute_time(net, dm, dff, TOK, m, f)
    assert comm / comp == pytest.approx(1.0, rel=2e-3)
    # Larger shards hide, smaller ones do not.
    for scale, hides in ((2, True), (0.5, False)):
        d1, d2 = round(dm * scale / m) * m, round(dff * scale / f) * f
        comm = tpm.tp_comm_time(net, d1, d2, TOK, m, f, level, level).bandwidth
        assert (comm < tpm.tp_compute_time(net, d1, d2, TOK, m, f)) is hides


def test_exact_crossover_balances_at_finite_degree():
    fn = sp.lambdify(
        tpm.CROSS_ARGS, tpm.COST_FORMULAS["crossover_2d_exact"][0].subs(s.flop_per_mac, 2)
    )
    m, f = 4, 16
    side = float(fn(2.0, 0.7, FLAT.peak_flops, FLAT["network.intra_node.bandwidth"], m, f))
    # A real shard of that side: widths side * degree (tokens cancel, so any tokens will do).
    dm, dff = side * m, side * f
    args = (tpm.TIME_ARGS, tpm.COST_FORMULAS["tp_bandwidth"][0])
    bw = sp.lambdify(*args)(dm, dff, 7.0, m, f, 2.0, FLAT["network.intra_node.bandwidth"], 0.0)
    comp = sp.lambdify(
        tpm.COMPUTE_ARGS, tpm.COST_FORMULAS["tp_compute"][0].subs(s.flop_per_mac, 2)
    )
    assert bw == pytest.approx(comp(dm, dff, 7.0, m, f, 0.7, FLAT.peak_flops), rel=1e-12)


def test_crossover_scales_inversely_with_bandwidth_and_nvlink_wins():
    nv, ib = tpm.crossover_shard(H100, 0), tpm.crossover_shard(H100, 1)
    ratio = H100["network.intra_node.bandwidth"] / H100["network.inter_node.bandwidth"]
    assert ib / nv == pytest.approx(ratio)
    assert tpm.crossover_shard(H100, 0, dims=1) == pytest.approx(nv / 2)
    assert tpm.crossover_shard(FLAT, 1) == pytest.approx(nv)


def test_max_degree_and_best_split():
    assert tpm.max_degree(H100, DM, DFF, 0) > tpm.max_degree(H100, DM, DFF, 0, one_d=True)
    assert tpm.max_degree(H100, DM, DFF, 1) <= tpm.max_degree(H100, DM, DFF, 0)
    m, f = tpm.best_split(H100, DM, DFF, 8)
    assert (m, f) in tpm.tp_splits(8)


def test_reference_shards_and_figures():
    import matplotlib.pyplot as plt

    ref = tpm.reference_shards()
    assert np.all(ref["rows"] * ref["tp_model"] * ref["cols"] * ref["tp_ff"] > 0)
    page = tensor_parallel_page
    for fig in (page.figure_time_vs_degree(H100), page.figure_reference_shards(H100)):
        assert len(fig.axes) >= 1
        plt.close(fig)


# --- Errors ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: tpm.tp_splits(0), "n_tp: got 0"),
        (lambda: tpm.tp_splits(2.5), "n_tp: got 2.5"),
        (lambda: tpm.tp_splits(True), "n_tp: got True"),
        (lambda: tpm.tp_splits(8, rule="round"), "rule: got 'round'"),
        (lambda: tpm.tp_comm_time("h100", DM, DFF, TOK, 2, 4), "scn: got str"),
        (lambda: tpm.tp_comm_time(H100, DM, DFF, -1, 2, 4), "tokens: got -1; expected finite"),
        (lambda: tpm.tp_comm_time(H100, DM, DFF, TOK, 0, 4), "tp_model: got 0; expected whole"),
        (lambda: tpm.tp_comm_time(H100, DM, DFF, TOK, 2, 1.5), "tp_ff: got 1.5"),
        (lambda: tpm.tp_comm_time(H100, 1000, DFF, TOK, 3, 4), "tp_model: got 3, which"),
        (lambda: tpm.tp_comm_time(H100, DM, DFF, TOK, 2, 4, 2, 0), "level_model: got 2"),
        (lambda: tpm.tp_comm_time(H100, DM, DFF, TOK, 2, 4, 0, "x"), "level_ff: got 'x'"),
        (lambda: tpm.tp_comm_time(H100, DM, DFF, TOK, 4, 8, 0, (3, 4)), "level_ff: got \\(3, 4\\)"),
        (lambda: tpm.tp_comm_time(H100, DM, DFF, TOK, 4, 8, 0, 0), "32 GPUs of the TP group"),
        (lambda: tpm.crossover_shard(H100, 2), "level: got 2"),
        (lambda: tpm.crossover_shard(H100, 0, dims=3), "dims: got 3"),
        (lambda: tpm.crossover_shard(H100, 0, derated="yes"), "derated: got 'yes'"),
        (lambda: tpm.best_split(H100, 7, 7, 8), "n_tp: got 8; no split"),
        (lambda: tpm.reference_shards("Some scaling"), "setting: got 'Some scaling'"),
    ],
)
def test_errors_name_the_bad_value(call, match):
    with pytest.raises(ValueError, match=match):
        call()


@pytest.mark.parametrize("family", ["tp_model", "tp_ff"])
@pytest.mark.parametrize("scn", [H100, FLAT, UNLIMITED], ids=["two-level", "flat", "unlimited"])
def test_family_level_times_are_the_family_time_level_by_level(scn, family):
    """tp_family_level_times (what the search costs each level with) cuts tp_family_time's
    bandwidth time without overlap in two: the levels add up to it, its latency is the same."""
    tp_model = np.array([1, 4, 16, 64])[:, None]
    tp_ff = np.array([2, 8, 32])[None, :]
    group = tp_model if family == "tp_model" else tp_ff
    intra = np.minimum(group, 4)
    args = (8192, 32768, np.float64(4096.0), tp_model, tp_ff, intra, group // intra)
    t = tpm.tp_family_level_times(scn, family, *args)
    summed = tpm.tp_family_time(scn, family, *args, overlap_levels=False)
    assert_levels_add_up(t, summed, unlimited=scn is UNLIMITED)
