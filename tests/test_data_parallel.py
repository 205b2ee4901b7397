"""Data parallelism (dmlimits.costs.data_parallel): derivations, units, consistency with the
collectives module, the memory check on hand-checkable cases, and errors.

Every hardware number below comes from a scenario; the expected values are computed here from the
scenario's figures by the simple arithmetic of the paper's data-parallel costs (Erdil &
Schneider-Joseph 2024: a two-level ring all-reduce of the gradients, and the memory a replica
needs), never from the library's formulas, and compared with the library's lambdified functions.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import sympy as sp
from conftest import assert_levels_add_up, derivations_of
from dmlimits.book import data_parallel_page
from dmlimits.core import derivation
from dmlimits.core import scenario as sc
from dmlimits.core import symbols as s
from dmlimits.core import units as u
from dmlimits.core.symbols import REGISTRY
from dmlimits.costs import collectives as co
from dmlimits.costs import data_parallel as dpm
from dmlimits.costs import model

H100 = sc.resolve("h100")
FLAT = sc.resolve("h100", sets=["network.topology=flat"])
UNLIMITED = sc.resolve("h100", sets=["network.topology=unlimited"])
SHAPES = model.shapes(H100)


# --- Derivations and units ---------------------------------------------------------------------
def _derivations() -> list[derivation.Derivation]:
    return derivations_of("costs.data_parallel")


def test_derivations_are_registered():
    found = _derivations()
    assert len(found) >= 2
    names = [d.name for d in found]
    assert len(names) == len(set(names))
    assert {"data-parallel-allreduce", "data-parallel-memory"} <= set(names)
    for d in found:
        assert d.chapter == "data_parallel"
        assert len(d.steps) >= 2


def test_memory_derivation_solves_for_the_dp_degree():
    d = dpm.memory_derivation()
    solved = [step for step in d.steps if step.solve_for is not None]
    assert solved and solved[0].solve_for is dpm.n_dp


def test_allreduce_derivation_reuses_the_collectives_substitutions():
    d = dpm.allreduce_derivation()
    used = d.substitutions
    assert co.CONSTANTS in used and dpm.GRADIENT in used
    assert any(dict(sub.mapping) == dict(co.LEVEL_COSTS.mapping) for sub in used)


@pytest.mark.parametrize("name", sorted(dpm.COST_FORMULAS))
def test_cost_formulas_have_their_units(name):
    expr, unit = dpm.COST_FORMULAS[name]
    assert not REGISTRY.unregistered(expr)
    u.check_unit(expr, REGISTRY.units, unit)


def test_times_in_seconds_and_memory_in_bytes():
    for name in (
        "dp_bandwidth",
        "dp_bandwidth_levels_added",
        "dp_latency",
        "step_overlapped",
        "step_not_overlapped",
    ):
        assert dpm.COST_FORMULAS[name][1] == u.second
    for name in ("memory_needed", "memory_available", "dp_bytes_per_gpu"):
        assert dpm.COST_FORMULAS[name][1] == u.byte


def test_summary_entry():
    from dmlimits.book import summary

    assert set(dpm.SUMMARY) == set(summary.KEYS)
    assert dpm.SUMMARY["parallelism"] == "data"
    assert (dpm.SUMMARY["volume_per"], dpm.SUMMARY["latency_per"]) == ("GPU and step", "step")
    assert dpm.SUMMARY["overlaps_compute"] is False
    u.check_unit(dpm.SUMMARY["volume"], REGISTRY.units, u.byte)
    u.check_unit(dpm.SUMMARY["latency"], REGISTRY.units, u.second)
    assert not REGISTRY.unregistered(dpm.SUMMARY["volume"])


def test_symbols_are_registered_for_the_chapter():
    for sym in (dpm.n_dp, dpm.n_dp0, dpm.n_dp1, dpm.cap_hbm, dpm.k_opt, dpm.t_dp):
        assert REGISTRY[sym].defined_in == "data_parallel"


def test_bandwidth_formula_is_the_collectives_formula_substituted():
    """The DP bandwidth formula is the collectives' two-level all-reduce with n_w = N."""
    mine = dpm.COST_FORMULAS["dp_bandwidth"][0]
    theirs = co.COST_FORMULAS["allreduce_two_level_bandwidth"][0].subs(
        {
            co.n_words: s.n_params,
            co.rep_seq: 1,
            co.rep_par: 1,
            co.parts0: dpm.n_dp0,
            co.parts1: dpm.n_dp1,
        }
    )
    assert sp.simplify(mine - theirs) == 0


# --- Consistency with the collectives module ---------------------------------------------------
@pytest.mark.parametrize("scn", [H100, FLAT, UNLIMITED], ids=["two-level", "flat", "unlimited"])
@pytest.mark.parametrize("overlap_levels", [True, False])
def test_dp_time_is_the_two_level_allreduce_of_all_gradients(scn, overlap_levels):
    params = SHAPES.params[:, None, None]
    intra = np.array([1, 2, 8])[None, :, None]
    inter = np.array([1, 4, 256])[None, None, :]
    gpus = intra * inter * 64  # 64 GPUs per replica
    mine = dpm.dp_time(scn, params, intra, inter, gpus, overlap_levels=overlap_levels)
    theirs = co.allreduce_time_split(
        scn, params, intra, inter, n_gpu=gpus, overlap_levels=overlap_levels
    )
    np.testing.assert_allclose(mine.bandwidth, theirs.bandwidth, rtol=1e-12)
    np.testing.assert_allclose(mine.latency, theirs.latency, rtol=1e-12)


def test_dp_time_by_hand():
    """Per GPU: 2 (p - 1) / p of its shard of the gradients over one direction of the link."""
    v = H100.values
    n, per_replica, intra, inter = 1.0e12, 32, 8, 16
    gpus = per_replica * intra * inter
    w = v["model.word_bytes"]
    shard = n / per_replica * w  # bytes of gradients one GPU holds
    in_node = 2 * (intra - 1) / intra * shard / (v["network.intra_node.bandwidth"] / 2)
    between = 2 * (inter - 1) / inter * (shard / intra) / (v["network.inter_node.bandwidth"] / 2)
    lat = 2 * 2 * v["network.latency"]
    t = dpm.dp_time(H100, n, intra, inter, gpus)
    assert t.bandwidth == pytest.approx(max(in_node, between), rel=1e-12)
    assert t.latency == pytest.approx(lat, rel=1e-12)
    added = dpm.dp_time(H100, n, intra, inter, gpus, overlap_levels=False)
    assert added.bandwidth == pytest.approx(in_node + between, rel=1e-12)
    assert added.latency == t.latency


def test_one_replica_sends_nothing_and_waits_for_nothing():
    t = dpm.dp_time(H100, 1e12, 1, 1, 64)
    assert t.bandwidth == 0 and t.latency == 0


def test_default_cluster_is_one_gpu_per_replica():
    a = dpm.dp_time(H100, 5e11, 2, 64)
    b = dpm.dp_time(H100, 5e11, 2, 64, 128)
    assert a == b


def test_bytes_per_gpu_by_hand():
    w = H100["model.word_bytes"]
    n, n_dp, gpus = 2.0e12, 256, 256 * 16
    expected = 2 * (n_dp - 1) / n_dp * (n / 16) * w
    assert dpm.dp_bytes_per_gpu(H100, n, n_dp, gpus) == pytest.approx(expected, rel=1e-12)
    assert co.allreduce_bytes(H100, n / 16, n_dp) == pytest.approx(expected, rel=1e-12)


def test_step_time_overlap_choice():
    comm = co.CommTime(bandwidth=0.3, latency=1e-5)
    assert dpm.step_time(1.0, comm) == pytest.approx(1.3 + 1e-5)
    assert dpm.step_time(1.0, comm, overlap_compute=True) == pytest.approx(1.0 + 1e-5)
    assert dpm.step_time(0.1, comm, overlap_compute=True) == pytest.approx(0.3 + 1e-5)
    arr = dpm.step_time(np.array([0.1, 1.0]), comm, overlap_compute=True)
    np.testing.assert_allclose(arr, [0.3 + 1e-5, 1.0 + 1e-5])


# --- Memory ------------------------------------------------------------------------------------
def test_memory_check_on_the_smallest_model():
    """The smallest model of the sweep on the smallest cluster that trains it in time."""
    n = float(SHAPES.params[0])
    gpus = math.ceil(SHAPES.min_gpus[0])
    cap, w = H100["hardware.hbm_capacity"], H100["model.word_bytes"]
    # Parameters in every replica, optimizer state (four times the parameter bytes) once.
    largest = math.floor((gpus * cap - 4 * n * w) / (n * w))
    assert dpm.max_dp(H100, n, gpus) == largest
    assert dpm.memory_fits(H100, n, largest, gpus)
    assert not dpm.memory_fits(H100, n, largest + 1, gpus)
    assert dpm.memory_needed(H100, n, largest) == pytest.approx((largest + 4) * n * w)


def test_memory_exactly_full_fits():
    cap, w = H100["hardware.hbm_capacity"], H100["model.word_bytes"]
    gpus = 64
    n = gpus * cap / (w * (8 + 4))  # eight replicas and the optimizer state fill the cluster
    assert dpm.max_dp(H100, n, gpus) == 8
    assert dpm.memory_fits(H100, n, 8, gpus)
    assert not dpm.memory_fits(H100, n, 9, gpus)


def test_max_dp_is_zero_when_nothing_fits_and_never_exceeds_the_cluster():
    cap, w = H100["hardware.hbm_capacity"], H100["model.word_bytes"]
    assert dpm.max_dp(H100, 10 * cap / w, 8) == 0
    assert dpm.max_dp(H100, 1.0, 8) == 8


def test_max_dp_broadcasts_over_the_sweep():
    gpus = np.ceil(SHAPES.min_gpus)
    out = dpm.max_dp(H100, SHAPES.params, gpus)
    assert out.shape == SHAPES.params.shape
    fits = dpm.memory_fits(H100, SHAPES.params, np.maximum(out, 1), gpus)
    assert np.all(fits[out >= 1])


# --- Against compute ---------------------------------------------------------------------------
def test_compute_ratio_by_hand():
    """All-reduce (every replica in its own node) over the step's arithmetic on the cluster."""
    v = H100.values
    i = len(SHAPES) // 2
    n, batch, n_dp = float(SHAPES.params[i]), float(SHAPES.batch[i]), 256
    gpus = n_dp * 128
    arithmetic = 6 * n * batch / (gpus * H100.peak_flops * v["hardware.effective_utilization"])
    comm = dpm.dp_time(H100, n, 1, n_dp, gpus)
    assert dpm.arithmetic_time(H100, n, batch, gpus) == pytest.approx(arithmetic, rel=1e-12)
    assert dpm.compute_ratio(H100, n_dp, batch) == pytest.approx(
        comm.bandwidth / arithmetic, rel=1e-12
    )
    at_parity = math.floor(dpm.parity_dp(H100, batch))
    assert (
        dpm.compute_ratio(H100, at_parity, batch)
        <= 1
        < dpm.compute_ratio(H100, at_parity + 1, batch)
    )
    assert dpm.parity_dp(H100, batch, ratio=0.5) < at_parity


def test_parity_inverts_the_ratio():
    batch = SHAPES.batch
    for n_dp in (2, 64, 1024):
        ratio = dpm.compute_ratio(H100, n_dp, batch)
        np.testing.assert_allclose(dpm.parity_dp(H100, batch, ratio=ratio), n_dp, rtol=1e-12)


def test_reference_configs():
    ref = dpm.reference_configs()
    assert len(ref["dp"]) > 10 and np.all(ref["dp"] >= 1)
    assert dpm.is_reference_scenario(H100) and not dpm.is_reference_scenario(FLAT)
    with pytest.raises(ValueError, match="setting"):
        dpm.reference_configs("nonsense")


@pytest.mark.parametrize("name", ["h100", "h100-infinite-network-low-latency"])
def test_figures_are_fit_to_read(name):
    """The chapter's figures pass the checker glue runs on every figure of the book, with
    unbounded bandwidth too, where every degree's all-reduce is its latency alone: one curve
    for all four degrees, which must show each degree's colour."""
    import matplotlib.pyplot as plt
    from dmlimits.book import figures

    figures.apply_style()
    scn = sc.resolve(name)
    for make in (data_parallel_page.figure_dp_time, data_parallel_page.figure_dp_memory):
        fig = make(scn)
        assert fig.axes
        figures.fit_to_read(fig)
        assert figures.check_figure(fig, drawn=True) == []
        plt.close(fig)


# --- Errors ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"n_params": -1.0}, "n_params: got -1; expected finite numbers greater than 0"),
        ({"n_params": 0}, "n_params: got 0; expected finite numbers greater than 0"),
        ({"n_params": float("nan")}, "n_params: got nan; expected finite numbers"),
        ({"n_dp_intra": 0}, "n_dp_intra: got 0; expected whole numbers of at least 1"),
        ({"n_dp_intra": 16}, "n_dp_intra: got 16; expected at most network.node_size = 8"),
        ({"n_dp_inter": 2.5}, r"n_dp_inter: got 2\.5; expected whole numbers"),
        ({"n_gpu": 100}, "n_gpu: got 100; expected a whole multiple of the data-parallel degree 8"),
        ({"overlap_levels": "yes"}, "overlap_levels: got 'yes'; expected True or False"),
    ],
)
def test_dp_time_errors_name_the_bad_value(kwargs, match):
    args = {"n_params": 1e12, "n_dp_intra": 2, "n_dp_inter": 4, "n_gpu": 64}
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        dpm.dp_time(H100, **args)


def test_other_errors():
    with pytest.raises(ValueError, match="scn"):
        dpm.dp_time("h100", 1e12, 1, 2)
    with pytest.raises(ValueError, match="n_dp"):
        dpm.memory_fits(H100, 1e12, 0, 8)
    with pytest.raises(ValueError, match="more replicas than GPUs"):
        dpm.memory_fits(H100, 1e9, 16, 8)
    with pytest.raises(ValueError, match="n_gpu"):
        dpm.max_dp(H100, 1e12, 0.5)
    with pytest.raises(ValueError, match="overlap_compute"):
        dpm.step_time(1.0, co.CommTime(0.1, 0.0), overlap_compute=1)
    with pytest.raises(ValueError, match="comm"):
        dpm.step_time(1.0, (0.1, 0.0))
    with pytest.raises(ValueError, match="batch"):
        dpm.compute_ratio(H100, 8, 0)
    # Within a node, flat topology allows more than a node's worth of replicas.
    assert dpm.dp_time(FLAT, 1e12, 16, 1, 16).bandwidth > 0


@pytest.mark.parametrize("scn", [H100, FLAT, UNLIMITED], ids=["two-level", "flat", "unlimited"])
def test_dp_level_times_are_dp_time_level_by_level(scn):
    """dp_level_times (what the search costs each level with) cuts dp_time's bandwidth time
    without overlap in two: the levels add up to it, its latency is the same."""
    params = SHAPES.params[:, None, None]
    intra = np.array([1, 2, 8])[None, :, None]
    inter = np.array([1, 4, 256])[None, None, :]
    gpus = intra * inter * 64
    t = dpm.dp_level_times(scn, params, intra, inter, gpus)
    summed = dpm.dp_time(scn, params, intra, inter, gpus, overlap_levels=False)
    assert_levels_add_up(t, summed, unlimited=scn is UNLIMITED)
    assert (t.level1[:, :, 0] == 0).all()  # one node: nothing between nodes


def test_the_batch_bounds_replicas_in_the_searchs_unit_of_a_microbatch():
    """A replica needs one unit of a microbatch a step: a token by default (as the search
    lists configurations), a whole sequence with ``search.microbatch_unit=sequence``; the
    chapter said sequences whatever the setting."""
    tokens = sc.resolve("h100")
    sequences = sc.resolve("h100", ["search.microbatch_unit=sequence"])
    batch = np.array([4_194_304.0, 2.0**24])
    np.testing.assert_array_equal(dpm.batch_bound(tokens, batch), batch)
    np.testing.assert_array_equal(
        dpm.batch_bound(sequences, batch), batch / sequences["model.sequence_length"]
    )
    assert dpm.batch_bound(tokens, 1024, 8) == 128
    assert dpm.batch_bound_label(tokens) == "tokens per batch"
    assert dpm.batch_bound_label(sequences) == "sequences per batch"
    with pytest.raises(ValueError, match="batch"):
        dpm.batch_bound(tokens, -1.0)
