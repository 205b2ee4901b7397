"""Expert parallelism (dmlimits.costs.expert_parallel): derivations, units, and uniform routing
simulated.

The Monte Carlo simulation below is written here, independently of the library: it places the
``S`` experts of a block on the GPUs of an expert-parallel group, ``ep_intra`` GPUs in each of
``ep_inter`` nodes, routes tokens uniformly at random from one block to the next, and counts where
each token's next expert lives.  The closed forms it is compared with always come from the
library (lambdified from its sympy expressions), never retyped.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import sympy as sp
from conftest import derivations_of
from dmlimits.book import expert_parallel_page, summary
from dmlimits.core import scenario as sc
from dmlimits.core import symbols as s
from dmlimits.core import units as u
from dmlimits.core.symbols import REGISTRY
from dmlimits.costs import collectives as co
from dmlimits.costs import expert_parallel as epm
from dmlimits.costs import pipeline as ppm

SPLITS = [(1, 1), (2, 1), (8, 1), (1, 4), (2, 3), (4, 5), (8, 16), (3, 7)]


@pytest.fixture(scope="module")
def scn():
    return sc.resolve("h100-sparse")


# --- Derivations and units ---------------------------------------------------------------------
def test_derivations_are_registered():
    found = derivations_of("costs.expert_parallel")
    assert len(found) >= 2
    assert {d.chapter for d in found} == {"expert_parallel"}


@pytest.mark.parametrize("name", sorted(epm.COST_FORMULAS))
def test_cost_formulas_have_their_units(name):
    expr, unit = epm.COST_FORMULAS[name]
    u.check_unit(expr, REGISTRY.units, unit)


def test_summary_entry():
    entry = epm.SUMMARY
    assert set(entry) == set(summary.KEYS)
    assert entry["parallelism"] == "expert"
    assert entry["overlaps_compute"] is True
    u.check_unit(entry["volume"], REGISTRY.units, u.byte)
    u.check_unit(entry["latency"], REGISTRY.units, u.second)
    # The summary's volume is the two levels' expected bytes together.
    total = epm.COST_FORMULAS["bytes_intra"][0] + epm.COST_FORMULAS["bytes_inter"][0]
    assert sp.simplify(entry["volume"].subs(epm.n_ep, epm.n_ep0 * epm.n_ep1) - total) == 0


def test_symbols_are_registered_for_the_chapter():
    for sym in (epm.n_ep, epm.n_ep0, epm.n_ep1, epm.p_node, epm.p_net, epm.t_ep_bw, epm.ratio):
        assert REGISTRY[sym].defined_in == "expert_parallel"
    assert REGISTRY[s.n_experts].defined_in == "model"


def test_bandwidth_is_the_collectives_point_to_point_time(scn):
    """Each level's term is the probability times the collectives module's numeric p2p time."""
    d, tokens, n_gpu, k = 8192.0, 3.0e6, 4096.0, 7.0
    for n0, n1 in SPLITS:
        prob = epm.remote_probabilities(n0, n1)
        expected = sum(
            p * co.p2p_time(scn, d, level, seq=2 * k, par=tokens, n_gpu=n_gpu).bandwidth
            for p, level in ((prob.same_node, 0), (prob.other_node, 1))
        )
        got = epm.ep_time(scn, d, tokens, n0, n1, interfaces=k, n_gpu=n_gpu)
        assert got.bandwidth == pytest.approx(expected, rel=1e-12)


def test_bytes_times_interfaces_over_bandwidth_is_the_time(scn):
    d, tokens, n_gpu = 4096.0, 1.0e6, 512.0
    intra, inter = epm.ep_bytes(scn, d, tokens, 4, 8, n_gpu=n_gpu)
    w0 = co.level_bandwidth(scn, 0) / 2
    w1 = co.level_bandwidth(scn, 1) / 2
    t = epm.ep_time(scn, d, tokens, 4, 8, interfaces=3, n_gpu=n_gpu)
    assert t.bandwidth == pytest.approx(3 * (intra / w0 + inter / w1))
    # All remote bytes: (1 - 1/N_EP) of the stage-boundary traffic, spread over the cluster.
    boundary = ppm.boundary_bytes(d, tokens, scn["model.word_bytes"])
    assert intra + inter == pytest.approx((1 - 1 / 32) * boundary / n_gpu)


# --- Monte Carlo: uniform routing ----------------------------------------------------------
def simulate_routing(ep_intra: int, ep_inter: int, experts_per_gpu: int, tokens: int, seed: int):
    """Counts of tokens whose next expert is on their GPU, on another GPU of their node, in
    another node; and the bytes per GPU sent at each level (one word per token here)."""
    rng = np.random.default_rng(seed)
    n_gpu = ep_intra * ep_inter
    n_experts = n_gpu * experts_per_gpu
    gpu_of_expert = np.repeat(np.arange(n_gpu), experts_per_gpu)
    rng.shuffle(gpu_of_expert)  # any even placement will do
    node_of_gpu = np.arange(n_gpu) // ep_intra
    here = rng.integers(n_experts, size=tokens)
    there = rng.integers(n_experts, size=tokens)
    g_here, g_there = gpu_of_expert[here], gpu_of_expert[there]
    own = g_here == g_there
    other = node_of_gpu[g_here] != node_of_gpu[g_there]
    same = ~own & ~other
    sent_same = np.bincount(g_here[same], minlength=n_gpu)
    sent_other = np.bincount(g_here[other], minlength=n_gpu)
    return own.sum(), same.sum(), other.sum(), sent_same.mean(), sent_other.mean()


@pytest.mark.parametrize("seed, split", list(enumerate(SPLITS)))
def test_simulation_matches_the_closed_form(seed, split):
    n0, n1 = split
    tokens = 200_000
    own, same, other, _, _ = simulate_routing(n0, n1, 3, tokens, seed)
    prob = epm.remote_probabilities(n0, n1)
    for count, p in ((own, prob.own_gpu), (same, prob.same_node), (other, prob.other_node)):
        sigma = math.sqrt(max(p * (1 - p), 1e-12) / tokens)
        assert abs(count / tokens - p) <= 5 * sigma + 1e-12
    assert prob.own_gpu + prob.remote == pytest.approx(1.0)


@pytest.mark.parametrize("split", [(2, 3), (8, 4)])
def test_simulated_bytes_per_gpu_match_ep_bytes(scn, split):
    n0, n1 = split
    tokens = 300_000
    *_, mean_same, mean_other = simulate_routing(n0, n1, 2, tokens, 11)
    # One d_model word per token and pass: d_model = 1, and the two passes and word size scale
    # the simulation's per-GPU token counts into bytes.
    scale = ppm.BOUNDARY_PASSES * scn["model.word_bytes"]
    intra, inter = epm.ep_bytes(scn, 1.0, tokens, n0, n1)
    assert intra == pytest.approx(scale * mean_same, rel=0.02)
    assert inter == pytest.approx(scale * mean_other, rel=0.02)


def test_probabilities_vectorize_and_limits():
    n0 = np.array([1, 8, 8, 1])
    n1 = np.array([1, 1, 4, 16])
    prob = epm.remote_probabilities(n0, n1)
    assert prob.own_gpu == pytest.approx(1 / (n0 * n1))
    assert prob.other_node[0] == 0 and prob.same_node[0] == 0
    assert prob.other_node[1] == 0  # one node: everything stays on NVLink
    assert prob.same_node[3] == 0  # one GPU per node: every remote token crosses nodes
    assert isinstance(epm.remote_probabilities(2, 2).remote, float)


# --- The gcd rule, the split, the pipeline -------------------------------------------------
def test_ep_degree_is_the_gcd():
    n = np.array([64, 96, 5 * 2**18, 7, 1024])
    e = np.array([8, 9, 20, 14, 1])
    got = epm.ep_degree(n, e)
    assert list(got) == [math.gcd(int(a), int(b)) for a, b in zip(n, e, strict=True)]
    assert epm.ep_degree(16, 8) == 8.0


def test_ep_degree_of_clusters_beyond_int64_is_exact():
    """A slow GPU's largest sparse runs need more GPUs than int64 holds (the GTX 580's sweep
    reaches 3e20): the degree is still the gcd, without an invalid cast."""
    n = np.array([3.0 * 2**70, 2.0**80, 5.0 * 2**66 * 9, 2.0**63 + 2**11])
    e = np.array([48, 20, 36, 896])
    with np.errstate(all="raise"):
        got = epm.ep_degree(n, e)
    assert list(got) == [math.gcd(int(a), int(b)) for a, b in zip(n, e, strict=True)]


def test_paper_clusters_use_every_expert():
    """Clusters of the form S 2^i (the paper's) give N_EP = S."""
    experts = np.array([8, 9, 20, 36, 896])
    assert np.array_equal(epm.ep_degree(experts * 2**10, experts), experts)


def test_node_split():
    intra, inter = epm.node_split(np.array([8, 9, 20, 64]), 8)
    assert list(intra) == [8, 1, 4, 8] and list(inter) == [1, 9, 5, 8]


def test_ep_only_interfaces():
    assert epm.ep_only_interfaces(384) == 383
    assert epm.ep_only_interfaces(384, 4, 96) == 0  # full interleaving
    assert epm.ep_only_interfaces(384, 4, 1) == 380  # zero bubble: v = 1
    # With the pipeline's crossings they add up to L - 1 interfaces.
    assert epm.ep_only_interfaces(384, 4, 1) + ppm.boundary_crossings(4, 1) == 383


def test_crossing_takes_the_higher_level(scn):
    d, tokens, n = 4096.0, 1.0e6, 1024.0
    full0 = co.p2p_time(scn, d, 0, seq=2, par=tokens, n_gpu=n).bandwidth
    full1 = co.p2p_time(scn, d, 1, seq=2, par=tokens, n_gpu=n).bandwidth
    # Between nodes: every token takes InfiniBand, whatever the experts.
    for n0, n1 in SPLITS:
        assert epm.crossing_time(scn, d, tokens, n0, n1, 1, n_gpu=n).bandwidth == pytest.approx(
            full1
        )
    # Inside a node with the group in one node: NVLink only.
    assert epm.crossing_time(scn, d, tokens, 8, 1, 0, n_gpu=n).bandwidth == pytest.approx(full0)
    # Inside a node with the group over four nodes: a quarter stays.
    got = epm.crossing_time(scn, d, tokens, 2, 4, 0, n_gpu=n).bandwidth
    assert got == pytest.approx(full0 / 4 + 3 * full1 / 4)
    # A crossing is never cheaper than the expert traffic of the same interface.
    assert got >= epm.ep_time(scn, d, tokens, 2, 4, n_gpu=n).bandwidth


def test_latency_rules(scn):
    lam = scn["network.latency"]
    one = epm.ep_time(scn, 4096, 1e6, 1, 1, interfaces=5)
    assert one.bandwidth == 0 and one.latency == 0  # nobody to talk to
    high = epm.ep_time(scn, 4096, 1e6, 4, 2, interfaces=5)
    assert high.latency == pytest.approx(2 * 5 * lam)
    expected = epm.ep_time(scn, 4096, 1e6, 4, 2, interfaces=5, latency="expected")
    assert expected.latency == pytest.approx(2 * 5 * lam * (1 - 1 / 8))
    assert expected.bandwidth == high.bandwidth


def test_compute_ratio_is_bandwidth_over_matmul_time(scn):
    d, tokens, n = 16384.0, 4.0e7, 65536.0
    dff = scn["model.ff_ratio"] * d
    bw = epm.ep_time(scn, d, tokens, 4, 8, n_gpu=n).bandwidth
    comp = epm.layer_compute_time(scn, d, dff, tokens, n)
    assert epm.compute_ratio(scn, dff, 4, 8) == pytest.approx(bw / comp)


def test_vectorized_matches_scalar(scn):
    d = np.array([4096.0, 8192.0, 16384.0])
    n0 = np.array([1, 4, 8])
    n1 = np.array([2, 2, 16])
    vec = epm.ep_time(scn, d, 1e6, n0, n1, interfaces=3, n_gpu=4096)
    for i in range(3):
        one = epm.ep_time(scn, d[i], 1e6, n0[i], n1[i], interfaces=3, n_gpu=4096)
        assert vec.bandwidth[i] == pytest.approx(one.bandwidth)
        assert vec.latency[i] == pytest.approx(one.latency)


def test_topologies(scn):
    flat = sc.resolve("h100-sparse", overrides={"network.topology": "flat"})
    unlimited = sc.resolve("h100-sparse", overrides={"network.topology": "unlimited"})
    t_two = epm.ep_time(scn, 8192, 1e6, 8, 4, n_gpu=1024)
    t_flat = epm.ep_time(flat, 8192, 1e6, 8, 4, n_gpu=1024)
    t_inf = epm.ep_time(unlimited, 8192, 1e6, 8, 4, n_gpu=1024)
    assert t_flat.bandwidth < t_two.bandwidth
    assert t_inf.bandwidth == 0 and t_inf.latency == t_two.latency


# --- Errors ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "call, match",
    [
        (lambda scn: epm.ep_degree(0, 8), "n_gpu: got 0"),
        (lambda scn: epm.ep_degree(16, 2.5), "experts: got 2.5"),
        (lambda scn: epm.remote_probabilities(0, 1), "ep_intra: got 0"),
        (lambda scn: epm.remote_probabilities(2, 1.5), "ep_inter: got 1.5"),
        (lambda scn: epm.ep_time(scn, 4096, 1e6, 16, 1), "ep_intra: got 16.*node_size = 8"),
        (lambda scn: epm.ep_time(scn, 4096, 1e6, 4, 4, n_gpu=8), "n_gpu: got 8.*16 GPUs"),
        (lambda scn: epm.ep_time(scn, -1, 1e6, 4, 4), "d_model: got -1"),
        (lambda scn: epm.ep_time(scn, 4096, "many", 4, 4), "tokens: got 'many'"),
        (lambda scn: epm.ep_time(scn, 4096, 1e6, 4, 4, latency="max"), "latency: got 'max'"),
        (lambda scn: epm.ep_time("h100", 4096, 1e6, 4, 4), "scn: got str"),
        (lambda scn: epm.crossing_time(scn, 4096, 1e6, 4, 4, 2), "level: got 2"),
        (lambda scn: epm.ep_only_interfaces(8, 4, 3), "n_pp: got 4 with v = 3"),
        (lambda scn: epm.node_split(12, 0), "node_size: got 0"),
        (lambda scn: epm.sweep_table(sc.resolve("h100")), "dense scenario"),
    ],
)
def test_errors_name_the_value(scn, call, match):
    with pytest.raises(ValueError, match=match):
        call(scn)


@pytest.mark.parametrize("topology", ["two-level", "flat", "unlimited"])
def test_level_times_are_the_times_level_by_level(topology):
    """ep_level_times and crossing_level_times (what the search costs each level with) cut the
    bandwidth time of ep_time and crossing_time in two: the levels add up to it, each is the
    time with the other level's links infinitely fast (two levels), the latency is the same.
    The group's two degrees broadcast against each other (their latency's conditions once
    refused arrays of two shapes)."""
    scn = sc.resolve("h100", sets=[f"network.topology={topology}"])
    d, tokens = 8192.0, np.array([1e5, 3e6])[:, None, None, None]
    n0 = np.array([1, 2, 8])[:, None, None]
    n1 = np.array([1, 4, 64])[None, :, None]
    k = np.array([0.0, 1.0, 7.0])[None, None, :]
    n = n0 * n1 * 16
    calls = [
        (epm.ep_time, epm.ep_level_times, (d, tokens, n0, n1, k, n)),
        *(
            (epm.crossing_time, epm.crossing_level_times, (d, tokens, n0, n1, level, k, n))
            for level in (0, 1)
        ),
    ]
    for whole_of, levels_of, args in calls:
        whole, t = whole_of(scn, *args), levels_of(scn, *args)
        np.testing.assert_allclose(t.level0 + t.level1, whole.bandwidth, rtol=1e-14)
        np.testing.assert_allclose(t.latency, whole.latency, rtol=1e-14)
        if topology == "unlimited":
            assert not np.any(t.level0) and not np.any(t.level1)
            continue
        assert (t.level1 > 0).any()
        if topology == "two-level":
            for level, part in enumerate((t.level0, t.level1)):
                key = ("network.inter_node.bandwidth", "network.intra_node.bandwidth")[level]
                fast = sc.Scenario(name=scn.name, values={**scn.values, key: math.inf})
                np.testing.assert_allclose(part, whole_of(fast, *args).bandwidth, rtol=1e-14)


@pytest.mark.parametrize(
    ("name", "sets"),
    [
        ("h100-sparse", []),  # the latency of a step's crossings passes the budget in the sweep
        ("h100-deepseek-batch", ["model.sparse=true"]),  # big batches: it never does
        ("h100-infinite-network-low-latency-sparse", []),  # no bandwidth time at all
    ],
)
def test_the_sweep_summary_says_what_the_table_holds(name, sets):
    """The chapter's paragraph under the sweep figure, for scenarios where its first wording
    (a peak, a fall, a crossing of the budget) did not hold: each number it prints is the
    table's, and each case it states is the table's case."""
    from dmlimits.book.glue import sci

    scn = sc.resolve(name, sets=sets)
    tab = epm.sweep_table(scn)
    text = expert_parallel_page.sweep_summary(scn, tab)
    ratio, share = tab["ratio"], tab["latency_share"]
    if np.any(ratio > 0):
        assert f"peaks at {ratio.max():.2g}," in text and f"to {ratio[-1]:.2g} at the top" in text
    else:
        assert "no bandwidth time" in text and "peaks" not in text
    over = tab["compute"][share >= 1]
    if over.size:
        assert f"from {sci(over[0])} FLOP on" in text
    else:
        assert f"to {share.max():.2g} of a step's time budget at most" in text
    assert ("never takes a whole step" in text) == (over.size == 0)


@pytest.mark.parametrize("name", ["h100", "gtx580", "v100"])
def test_the_worked_example_gives_each_gpu_a_token(name):
    """The chapter's worked example: the sweep's model nearest the anchor compute among those
    whose cluster gives each GPU at least one token.  On an H100 that is the nearest model (no
    note); a GTX 580's nearest would need more GPUs than its batch has tokens, and the note
    says so with the table's numbers."""
    from dmlimits.book.glue import sci
    from dmlimits.core import published

    scn = sc.resolve(name, sets=["model.sparse=true"])
    tab = epm.sweep_table(scn)
    anchor = published.value("paper1.post_slowdown_flop")
    got = expert_parallel_page.worked_example(tab, anchor, gpu=scn.gpu_label)
    per_gpu = tab["batch"] / tab["n_gpu"]
    distance = np.abs(np.log(tab["compute"] / anchor))
    assert got.nearest == int(np.argmin(distance))
    assert per_gpu[got.row] >= 1
    assert not np.any((distance < distance[got.row]) & (per_gpu >= 1))
    if got.row == got.nearest:
        assert got.note == ""
    else:
        assert per_gpu[got.nearest] < 1
        for value in (anchor, tab["compute"][got.nearest], tab["n_gpu"][got.nearest]):
            assert sci(value) in got.note
        assert scn.gpu_label in got.note
    if name == "h100":
        assert got.row == got.nearest
    if name == "gtx580":
        assert got.row != got.nearest


def test_the_worked_example_says_when_no_model_gives_a_gpu_a_token():
    tab = {"compute": np.array([1e25, 1e26]), "batch": np.array([1e6, 1e6]),
           "n_gpu": np.array([1e7, 1e8])}  # fmt: skip
    got = expert_parallel_page.worked_example(tab, 2e25, gpu="GTX 580")
    assert got.row == got.nearest == 0
    assert got.note.startswith("On GTX 580 GPUs no model of the sweep gives each GPU")
    with pytest.raises(ValueError, match="near: got 0"):
        expert_parallel_page.worked_example(tab, 0, gpu="GTX 580")
    with pytest.raises(ValueError, match="near: got 2 values; expected one compute"):
        expert_parallel_page.worked_example(tab, [1e25, 1e26], gpu="GTX 580")
    empty = {k: np.array([]) for k in tab}
    with pytest.raises(ValueError, match="tab: got a sweep table without models"):
        expert_parallel_page.worked_example(empty, 1e25, gpu="GTX 580")


def test_the_sweep_figure_is_fit_to_read_with_unbounded_bandwidth():
    """With unbounded bandwidth the bandwidth ratio is zero, which a log axis cannot show: the
    figure says so in its legend instead of plotting points outside its limits."""
    import matplotlib.pyplot as plt
    from dmlimits.book import figures

    figures.apply_style()
    fig = expert_parallel_page.figure_sweep(sc.resolve("h100-infinite-network-low-latency-sparse"))
    figures.fit_to_read(fig)
    assert figures.check_figure(fig, drawn=True) == []
    labels = [line.get_label() for line in fig.axes[0].get_lines()]
    assert any(label.endswith(": zero, not drawn") for label in labels)
    plt.close(fig)
