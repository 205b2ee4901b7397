"""Collectives (dmlimits.costs.collectives): derivations, units, a ring simulation, and the
numbers."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import sympy as sp
from conftest import assert_levels_add_up, derivations_of, pixels_of_colour
from dmlimits.book import collectives_page
from dmlimits.core import derivation
from dmlimits.core import scenario as sc
from dmlimits.core import symbols as s
from dmlimits.core import units as u
from dmlimits.core.symbols import REGISTRY
from dmlimits.costs import collectives as co
from dmlimits.costs.matmul import word

H100 = sc.resolve("h100")
FLAT = sc.resolve("h100", sets=["network.topology=flat"])
UNLIMITED = sc.resolve("h100", sets=["network.topology=unlimited"])


# --- Derivations and units ---------------------------------------------------------------------
def _collective_derivations() -> list[derivation.Derivation]:
    return derivations_of("costs.collectives")


def test_derivations_are_registered():
    found = _collective_derivations()
    assert len(found) >= 2
    names = [d.name for d in found]
    assert len(names) == len(set(names))
    for d in found:
        assert d.chapter == "collectives"
        assert len(d.steps) >= 2


@pytest.mark.parametrize("name", sorted(co.COST_FORMULAS))
def test_cost_formulas_are_in_seconds(name):
    expr, unit = co.COST_FORMULAS[name]
    assert unit == u.second
    assert not REGISTRY.unregistered(expr)
    u.check_unit(expr, REGISTRY.units, u.second)


@pytest.mark.parametrize("name", sorted(co.TRAFFIC_FORMULAS))
def test_traffic_formulas_are_in_bytes(name):
    expr, unit = co.TRAFFIC_FORMULAS[name]
    assert unit == u.byte
    u.check_unit(expr, REGISTRY.units, u.byte)


def test_symbols_are_registered_for_the_chapter():
    for sym in (co.n_words, co.parts, co.rep_seq, co.rep_par, co.bw_level, co.lat_level):
        assert REGISTRY[sym].defined_in == "collectives"
    assert co.word is word  # the word size is matmul's symbol, not a second one


# --- A ring, simulated ---------------------------------------------------------------------
class Ring:
    """GPUs that pass chunks of their vectors to their ring successors, counting words sent and
    received per GPU and per network level.  Independent of the library's formulas."""

    def __init__(self, vectors: dict[int, np.ndarray]):
        self.buf = {g: v.copy() for g, v in vectors.items()}
        self.sent: dict[tuple[int, str], int] = {}
        self.received: dict[tuple[int, str], int] = {}
        self.steps = 0

    def _count(self, table: dict, gpu: int, level: str, n: int) -> None:
        table[(gpu, level)] = table.get((gpu, level), 0) + n

    def _step(self, members: list[int], regions: list[slice], pick, combine, level: str) -> None:
        """One synchronous step: every member sends region ``pick(j)`` to its successor."""
        p = len(members)
        messages = []
        for j, gpu in enumerate(members):
            region = regions[pick(j) % p]
            messages.append((members[(j + 1) % p], region, self.buf[gpu][region].copy()))
            self._count(self.sent, gpu, level, region.stop - region.start)
        for dest, region, data in messages:
            self.buf[dest][region] = combine(self.buf[dest][region], data)
            self._count(self.received, dest, level, region.stop - region.start)
        self.steps += 1

    def reduce_scatter(self, members: list[int], regions: list[slice], level: str) -> int:
        """Ring reduce-scatter; afterwards member j holds the sum of region (j + 1) mod p.
        Returns the number of steps."""
        p = len(members)
        for k in range(p - 1):
            self._step(members, regions, lambda j, k=k: j - k, np.add, level)
        return p - 1

    def all_gather(self, members: list[int], regions: list[slice], level: str) -> int:
        """Ring all-gather of the regions held after :meth:`reduce_scatter`."""
        p = len(members)
        for k in range(p - 1):
            self._step(members, regions, lambda j, k=k: j + 1 - k, lambda old, new: new, level)
        return p - 1

    def words(self, table: dict, gpu: int, level: str = "ring") -> int:
        return table.get((gpu, level), 0)


def _regions(start: int, stop: int, pieces: int) -> list[slice]:
    edges = np.linspace(start, stop, pieces + 1).round().astype(int)
    return [slice(int(a), int(b)) for a, b in itertools.pairwise(edges)]


def _vectors(n_gpus: int, words: int, seed: int) -> dict[int, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {g: rng.integers(-1000, 1000, words) for g in range(n_gpus)}


def _ring_allreduce(p: int, words: int) -> tuple[Ring, list[int]]:
    vectors = _vectors(p, words, seed=p * 1000 + words)
    ring = Ring(vectors)
    members = list(range(p))
    regions = _regions(0, words, p)
    phases = [ring.reduce_scatter(members, regions, "ring")]
    phases.append(ring.all_gather(members, regions, "ring"))
    total = sum(vectors.values())
    for g in members:  # every GPU ends with the sum: the simulation is an all-reduce
        np.testing.assert_array_equal(ring.buf[g], total)
    return ring, phases


@pytest.mark.parametrize("p", range(2, 65))
def test_ring_simulation_matches_the_closed_form(p):
    word_bytes = H100["model.word_bytes"]
    for chunk in (1, 3):  # vectors that split into equal chunks: every GPU moves the same
        words = p * chunk
        ring, phases = _ring_allreduce(p, words)
        # Two phases of p - 1 steps each; the model charges one latency per phase.
        assert len(phases) == co.RING_PHASES
        assert phases == [p - 1] * co.RING_PHASES
        closed = co.allreduce_bytes(H100, words, p)  # lambdified from the library
        for g in range(p):
            assert ring.words(ring.sent, g) * word_bytes == closed
            assert ring.words(ring.received, g) * word_bytes == closed
    # Uneven chunks: the GPUs differ, but together they move exactly p times the closed form.
    words = 3 * p + 1
    ring, _ = _ring_allreduce(p, words)
    exact = co.ALLREDUCE_BYTES.subs({co.n_words: words, co.parts: p, word: 1})
    assert sum(ring.words(ring.sent, g) for g in range(p)) == p * exact
    assert sum(ring.words(ring.received, g) for g in range(p)) == p * exact


@pytest.mark.parametrize("p0,p1", [(1, 4), (2, 3), (4, 1), (4, 4), (8, 2), (3, 5)])
def test_two_level_simulation_matches_the_level_traffic(p0, p1):
    """Reduce-scatter in each node, all-reduce of each shard between nodes, all-gather in each
    node: the words each GPU sends at each level against the library's traffic formulas."""
    words = p0 * p1 * 6
    vectors = _vectors(p0 * p1, words, seed=p0 * 100 + p1)
    ring = Ring(vectors)
    nodes = [[n * p0 + i for i in range(p0)] for n in range(p1)]
    node_regions = _regions(0, words, p0)
    for members in nodes:
        ring.reduce_scatter(members, node_regions, "intra")
    for j in range(p0):  # GPUs at local position j hold node sums of region (j + 1) mod p0
        shard = node_regions[(j + 1) % p0]
        peers = [nodes[n][j] for n in range(p1)]
        sub = _regions(shard.start, shard.stop, p1)
        ring.reduce_scatter(peers, sub, "inter")
        ring.all_gather(peers, sub, "inter")
    for members in nodes:
        ring.all_gather(members, node_regions, "intra")
    total = sum(vectors.values())
    for g in vectors:
        np.testing.assert_array_equal(ring.buf[g], total)

    args = (co.n_words, co.parts0, co.parts1, word)
    intra = sp.lambdify(args, co.TRAFFIC_FORMULAS["allreduce_two_level_bytes_intra"][0])
    inter = sp.lambdify(args, co.TRAFFIC_FORMULAS["allreduce_two_level_bytes_inter"][0])
    for g in vectors:
        assert ring.words(ring.sent, g, "intra") == intra(words, p0, p1, 1)
        assert ring.words(ring.sent, g, "inter") == inter(words, p0, p1, 1)
        assert ring.words(ring.received, g, "inter") == inter(words, p0, p1, 1)
    # And together exactly the bytes of a flat ring among all p0 p1 GPUs.
    flat = co.allreduce_bytes(H100, words, p0 * p1) / H100["model.word_bytes"]
    assert intra(words, p0, p1, 1) + inter(words, p0, p1, 1) == pytest.approx(flat, rel=1e-15)


# --- The cluster (reference) form against the per-GPU form ----------------------------------
def test_reference_form_is_per_gpu_form_when_repeats_tile_the_cluster():
    ref = co.COST_FORMULAS["allreduce"][0]
    per_gpu = co.rep_seq * (
        co.ALLREDUCE_BYTES / co.one_way(co.bw_level)
        + co.RING_PHASES * co.lat_level * sp.Piecewise((1, co.parts > 1), (0, True))
    )
    assert sp.simplify(ref.subs(s.n_gpu, co.rep_par * co.parts) - per_gpu) == 0
    # Numerically, over participants, words and repeats.
    p = np.arange(1, 9)[:, None, None]
    w = np.array([0.0, 1.0, 4096.0, 3e9])[None, :, None]
    seq, par = 6, np.array([1.0, 7.0, 4096.0])[None, None, :]
    for level in co.LEVELS:
        tiled = co.allreduce_time(H100, w, p, level, seq=seq, par=par, n_gpu=p * par)
        default = co.allreduce_time(H100, w, p, level, seq=seq, par=par)
        one = co.allreduce_time(H100, w, p, level)
        np.testing.assert_array_equal(tiled.bandwidth, default.bandwidth)
        np.testing.assert_allclose(tiled.bandwidth, seq * np.broadcast_to(one.bandwidth, (8, 4, 3)))
        np.testing.assert_allclose(tiled.latency, seq * np.broadcast_to(one.latency, (8, 4, 3)))
        # One all-reduce: the simulated per-GPU bytes over the one-way bandwidth.
        expected = co.allreduce_bytes(H100, w, p) / co.one_way(co.level_bandwidth(H100, level))
        np.testing.assert_allclose(one.bandwidth, expected, rtol=1e-14)


def test_cluster_form_spreads_traffic_over_more_gpus():
    """More GPUs than ring members: the traffic shares the cluster's links (time ~ 1 / N)."""
    base = co.allreduce_time(H100, 1e6, 4, 1, par=2)
    wide = co.allreduce_time(H100, 1e6, 4, 1, par=2, n_gpu=32)
    assert wide.bandwidth == pytest.approx(base.bandwidth * 8 / 32)
    assert wide.latency == base.latency


def test_latency_only_when_someone_to_talk_to():
    alone = co.allreduce_time(H100, 1e6, 1, 0, seq=5)
    assert alone == (0.0, 0.0)
    pair = co.allreduce_time(H100, 1e6, 2, 0, seq=5)
    assert pair.latency == pytest.approx(5 * co.RING_PHASES * H100["network.latency"])
    assert pair.total == pair.bandwidth + pair.latency


def test_p2p_time():
    words, seq, par = 4096.0, 3, 16
    t = co.p2p_time(H100, words, 1, seq=seq, par=par)
    one = co.p2p_time(H100, words, 1)
    bytes_one = words * H100["model.word_bytes"]
    assert one.bandwidth == pytest.approx(bytes_one / co.one_way(co.level_bandwidth(H100, 1)))
    assert one.latency == H100["network.latency"]
    assert t.bandwidth == pytest.approx(seq * one.bandwidth)
    assert t.latency == pytest.approx(seq * one.latency)
    # Half as many senders for the same transfers: twice the bandwidth time.
    assert co.p2p_time(H100, words, 1, seq=seq, par=par, n_gpu=8).bandwidth == pytest.approx(
        2 * t.bandwidth
    )
    f = sp.lambdify(co.ONE_LEVEL_ARGS, co.p2p_derivation().result.rhs)
    assert t.total == pytest.approx(
        f(words, 1, seq, par, par, 2, co.level_bandwidth(H100, 1), H100["network.latency"])
    )


# --- Two levels ---------------------------------------------------------------------------------
@pytest.mark.parametrize("p0", [1, 2, 4, 8])
def test_split_with_one_node_is_the_intra_node_allreduce(p0):
    w = np.array([0.0, 1e3, 1e9])
    for seq, par in ((1, 1), (4, 3), (2, 1024)):
        split = co.allreduce_time_split(H100, w, p0, 1, seq=seq, par=par)
        direct = co.allreduce_time(H100, w, p0, 0, seq=seq, par=par)
        np.testing.assert_allclose(split.bandwidth, direct.bandwidth, rtol=1e-14)
        np.testing.assert_allclose(split.latency, direct.latency, rtol=1e-14)


@pytest.mark.parametrize("p1", [1, 2, 16, 1024])
def test_split_with_one_gpu_per_node_is_the_inter_node_allreduce(p1):
    split = co.allreduce_time_split(H100, 1e8, 1, p1, seq=3, par=5)
    direct = co.allreduce_time(H100, 1e8, p1, 1, seq=3, par=5)
    assert split.bandwidth == pytest.approx(direct.bandwidth, rel=1e-14)
    assert split.latency == pytest.approx(direct.latency, rel=1e-14)


@pytest.mark.parametrize("p0,p1", [(2, 2), (8, 4), (8, 512), (4, 3)])
def test_split_is_the_level_by_level_account(p0, p1):
    """Level 0: an all-reduce among p0, p1 side by side per collective; level 1: the paper's
    all-reduce of the whole vector among p1.  Bandwidth: the larger (or, without overlap, the
    sum); latency: the sum."""
    words, seq, par = 3e8, 2, 6
    n = p0 * p1 * par
    split = co.allreduce_time_split(H100, words, p0, p1, seq=seq, par=par)
    lvl0 = co.allreduce_time(H100, words, p0, 0, seq=seq, par=par * p1, n_gpu=n)
    lvl1 = co.allreduce_time(H100, words, p1, 1, seq=seq, par=par, n_gpu=n)
    assert split.bandwidth == pytest.approx(max(lvl0.bandwidth, lvl1.bandwidth), rel=1e-14)
    assert split.latency == pytest.approx(lvl0.latency + lvl1.latency, rel=1e-14)
    summed = co.allreduce_time_split(H100, words, p0, p1, seq=seq, par=par, overlap_levels=False)
    assert summed.bandwidth == pytest.approx(lvl0.bandwidth + lvl1.bandwidth, rel=1e-14)
    assert summed.latency == split.latency
    # Splitting beats one flat ring over InfiniBand whenever a node holds more than one GPU.
    flat_ib = co.allreduce_time(H100, words, p0 * p1, 1, seq=seq, par=par)
    assert split.bandwidth < flat_ib.bandwidth


def test_split_traffic_adds_up_to_the_flat_ring():
    intra = co.TRAFFIC_FORMULAS["allreduce_two_level_bytes_intra"][0]
    inter = co.TRAFFIC_FORMULAS["allreduce_two_level_bytes_inter"][0]
    flat = co.ALLREDUCE_BYTES.subs(co.parts, co.parts0 * co.parts1)
    assert sp.simplify(intra + inter - flat) == 0


# --- Topologies ---------------------------------------------------------------------------------
def test_two_level_bandwidths_come_from_the_scenario():
    assert co.level_bandwidth(H100, 0) == H100["network.intra_node.bandwidth"]
    assert co.level_bandwidth(H100, 1) == H100["network.inter_node.bandwidth"]
    faster = sc.resolve("h100", sets=["network.inter_node.bandwidth=400e9"])
    ratio = faster["network.inter_node.bandwidth"] / H100["network.inter_node.bandwidth"]
    assert co.allreduce_time(faster, 1e9, 64, 1).bandwidth == pytest.approx(
        co.allreduce_time(H100, 1e9, 64, 1).bandwidth / ratio
    )
    assert co.level_latency(H100, 1) == H100["network.latency"]


def test_flat_topology_uses_nvlink_everywhere():
    assert co.level_bandwidth(FLAT, 1) == FLAT["network.intra_node.bandwidth"]
    assert co.level_bandwidth(FLAT, 0) == FLAT["network.intra_node.bandwidth"]
    a = co.allreduce_time(FLAT, 1e9, 64, 1, seq=2)
    b = co.allreduce_time(FLAT, 1e9, 64, 0, seq=2)  # no node boundary: 64 at level 0 is fine
    assert a == b
    split = co.allreduce_time_split(FLAT, 1e9, 8, 8)
    assert split.bandwidth == pytest.approx(
        co.allreduce_time_split(FLAT, 1e9, 8, 8, overlap_levels=False).bandwidth
        - co.allreduce_time(FLAT, 1e9, 8, 1, n_gpu=64).bandwidth
    )  # level 0 (the larger) binds
    assert (
        co.allreduce_time(FLAT, 1e9, 8, 1).bandwidth < co.allreduce_time(H100, 1e9, 8, 1).bandwidth
    )


def test_unlimited_topology_pays_latency_only():
    assert co.level_bandwidth(UNLIMITED, 0) == math.inf
    assert co.level_bandwidth(UNLIMITED, 1) == math.inf
    p = np.array([1, 2, 64])
    ar = co.allreduce_time(UNLIMITED, 1e12, p, 1, seq=3, par=4)
    np.testing.assert_array_equal(ar.bandwidth, 0.0)
    np.testing.assert_array_equal(ar.latency, co.allreduce_time(H100, 1e12, p, 1, seq=3).latency)
    assert ar.latency[0] == 0.0 and ar.latency[1] > 0
    p2p = co.p2p_time(UNLIMITED, 1e12, 0, seq=3)
    assert p2p.bandwidth == 0.0
    assert p2p.latency == pytest.approx(3 * UNLIMITED["network.latency"])
    split = co.allreduce_time_split(UNLIMITED, 1e12, 8, 16, seq=2)
    assert split.bandwidth == 0.0
    assert split.latency == pytest.approx(co.allreduce_time_split(H100, 1e12, 8, 16, seq=2).latency)
    # The preset variant scales the latency, and only the latency is paid.
    preset = sc.resolve("h100-infinite-network-low-latency")
    assert co.allreduce_time(preset, 1e9, 8, 1).total == pytest.approx(
        co.RING_PHASES * preset["network.latency"]
    )


# --- Vectorization ------------------------------------------------------------------------------
def test_vectorized_matches_scalar():
    rng = np.random.default_rng(3)
    w = rng.integers(0, 10**9, 30).astype(float)
    p = rng.integers(1, 9, 30)
    seq = rng.integers(0, 50, 30)
    par = rng.integers(1, 10**6, 30)
    vec = co.allreduce_time(H100, w, p, 0, seq=seq, par=par)
    assert vec.bandwidth.shape == (30,)
    p1 = rng.integers(1, 100, 30)
    split = co.allreduce_time_split(H100, w, p, p1, seq=seq, par=par)
    for i in range(30):
        one = co.allreduce_time(H100, w[i], int(p[i]), 0, seq=int(seq[i]), par=int(par[i]))
        assert isinstance(one.bandwidth, float) and isinstance(one.latency, float)
        assert vec.bandwidth[i] == pytest.approx(one.bandwidth, rel=1e-14)
        assert vec.latency[i] == pytest.approx(one.latency, rel=1e-14)
        s1 = co.allreduce_time_split(H100, w[i], int(p[i]), int(p1[i]), int(seq[i]), int(par[i]))
        assert split.total[i] == pytest.approx(s1.total, rel=1e-14)
    grid = co.p2p_time(H100, w[:4, None], 1, seq=seq[None, :5])
    assert grid.bandwidth.shape == grid.latency.shape == (4, 5)


# --- Errors name the bad value ------------------------------------------------------------------
@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"level": 2}, r"level: got 2; expected 0 .* or 1"),
        ({"level": True}, r"level: got True"),
        ({"level": "1"}, r"level: got '1'"),
        ({"participants": 0}, r"participants: got 0; expected whole numbers of at least 1"),
        ({"participants": [2, 2.5]}, r"participants: got 2\.5; expected whole numbers"),
        ({"words": -1}, r"words: got -1; expected finite numbers of at least 0"),
        ({"words": float("nan")}, r"words: got nan"),
        ({"words": "many"}, r"words: got 'many'"),
        ({"seq": -2}, r"seq: got -2; expected finite numbers of at least 0"),
        ({"par": 0}, r"par: got 0; expected finite numbers greater than 0"),
        ({"n_gpu": 4}, r"n_gpu: got 4; expected at least the 8 GPUs"),
        ({"level": 0, "participants": 16}, r"participants: got 16 at level 0; .*node_size = 8"),
    ],
)
def test_allreduce_errors_name_the_value(kwargs, match):
    args = {"words": 1e6, "participants": 8, "level": 1, **kwargs}
    with pytest.raises(ValueError, match=match):
        co.allreduce_time(H100, **args)


def test_other_errors_name_the_value():
    with pytest.raises(ValueError, match=r"p_intra: got 16 at level 0"):
        co.allreduce_time_split(H100, 1e6, 16, 2)
    with pytest.raises(ValueError, match=r"p_inter: got 0; expected whole numbers"):
        co.allreduce_time_split(H100, 1e6, 8, 0)
    with pytest.raises(ValueError, match=r"overlap_levels: got 'yes'"):
        co.allreduce_time_split(H100, 1e6, 8, 2, overlap_levels="yes")
    with pytest.raises(ValueError, match=r"n_gpu: got 8; expected at least the 16"):
        co.allreduce_time_split(H100, 1e6, 8, 2, n_gpu=8)
    with pytest.raises(ValueError, match=r"level: got -1"):
        co.p2p_time(H100, 1e6, -1)
    with pytest.raises(ValueError, match=r"level: got 3"):
        co.level_bandwidth(H100, 3)
    with pytest.raises(ValueError, match=r"scn: got dict"):
        co.allreduce_time({"network.latency": 1e-6}, 1e6, 8, 1)


# --- Chapter helpers: levels one by one, crossovers, balance, figures ------------------------
@pytest.mark.parametrize("p0,p1", [(1, 4), (8, 1), (8, 128), (3, 5)])
def test_levels_add_up_to_the_split(p0, p1):
    words, seq, par = 2.5e9, 3, 4
    level0, level1 = co.allreduce_time_levels(H100, words, p0, p1, seq=seq, par=par)
    split = co.allreduce_time_split(H100, words, p0, p1, seq=seq, par=par)
    summed = co.allreduce_time_split(H100, words, p0, p1, seq=seq, par=par, overlap_levels=False)
    assert split.bandwidth == pytest.approx(max(level0.bandwidth, level1.bandwidth), rel=1e-14)
    assert summed.bandwidth == pytest.approx(level0.bandwidth + level1.bandwidth, rel=1e-14)
    assert split.latency == pytest.approx(level0.latency + level1.latency, rel=1e-14)
    # Each level is the one-level all-reduce the derivation says it is.
    n = p0 * p1 * par
    assert level0.bandwidth == pytest.approx(
        co.allreduce_time(H100, words, p0, 0, seq=seq, par=par * p1, n_gpu=n).bandwidth, rel=1e-14
    )
    assert level1.bandwidth == pytest.approx(
        co.allreduce_time(H100, words, p1, 1, seq=seq, par=par, n_gpu=n).bandwidth, rel=1e-14
    )
    assert level0.latency == (seq * co.RING_PHASES * H100["network.latency"] if p0 > 1 else 0)
    assert level1.latency == (seq * co.RING_PHASES * H100["network.latency"] if p1 > 1 else 0)


def test_bytes_split_matches_the_simulated_levels():
    words, p0, p1 = 6e3, 4, 5
    intra, inter = co.allreduce_bytes_split(H100, words, p0, p1)
    wb = H100["model.word_bytes"]
    # In the node: a ring all-reduce of the vector among p0; between: of a p0-th among p1.
    assert intra == pytest.approx(2 * (p0 - 1) / p0 * words * wb)
    assert inter == pytest.approx(2 * (p1 - 1) / p1 * words / p0 * wb)
    assert intra + inter == pytest.approx(co.allreduce_bytes(H100, words, p0 * p1))
    grid = co.allreduce_bytes_split(H100, np.array([1.0, 2.0])[:, None], 8, np.array([1, 2, 4]))
    assert grid[0].shape == grid[1].shape == (2, 3)


@pytest.mark.parametrize("scn", [H100, FLAT, sc.resolve("a100")])
def test_crossover_is_where_bandwidth_time_equals_latency_time(scn):
    wb = scn["model.word_bytes"]
    for level, p in ((0, 2), (0, 8), (1, 2), (1, 1024)):
        cross = co.crossover_bytes(scn, p, level)
        # By hand: latency times the one-way bandwidth, times p / (p - 1).
        bandwidth = co.level_bandwidth(scn, level)
        assert cross == pytest.approx(scn["network.latency"] * bandwidth / 2 * p / (p - 1))
        t = co.allreduce_time(scn, cross / wb, p, level)
        assert t.bandwidth == pytest.approx(t.latency, rel=1e-12)
        below = co.allreduce_time(scn, cross / wb / 2, p, level)
        assert below.bandwidth < below.latency
    for p0, p1 in ((8, 2), (8, 128), (1, 16), (4, 1)):
        cross = co.crossover_bytes_split(scn, p0, p1)
        t = co.allreduce_time_split(scn, cross / wb, p0, p1)
        assert t.bandwidth == pytest.approx(t.latency, rel=1e-12)
        no = co.crossover_bytes_split(scn, p0, p1, overlap_levels=False)
        t = co.allreduce_time_split(scn, no / wb, p0, p1, overlap_levels=False)
        assert t.bandwidth == pytest.approx(t.latency, rel=1e-12)
        assert no <= cross
    arr = co.crossover_bytes(scn, np.array([2, 4, 8]), 0)
    assert arr.shape == (3,) and np.all(np.diff(arr) < 0)


def test_crossover_large_ring_is_the_bandwidth_delay_product():
    assert sp.simplify(co.CROSSOVER_LARGE_RING - co.bw_level * co.lat_level / 2) == 0
    u.check_unit(co.CROSSOVER, REGISTRY.units, u.byte)
    assert co.crossover_derivation().result.lhs == co.q_cross


def test_crossover_without_bandwidth_limit_is_infinite():
    assert co.crossover_bytes(UNLIMITED, 8, 1) == math.inf
    assert co.crossover_bytes_split(UNLIMITED, 8, 16) == math.inf


def test_crossover_errors():
    with pytest.raises(ValueError, match=r"participants: got 1; expected whole numbers of at"):
        co.crossover_bytes(H100, 1, 1)
    with pytest.raises(ValueError, match=r"participants: got 16 at level 0"):
        co.crossover_bytes(H100, 16, 0)
    with pytest.raises(ValueError, match=r"p_intra \* p_inter: got 1; expected at least two"):
        co.crossover_bytes_split(H100, 1, 1)


@pytest.mark.parametrize("p0,p1", [(8, 2), (8, 128), (2, 1000), (5, 7)])
def test_balanced_inter_bandwidth_equalizes_the_levels(p0, p1):
    w1 = co.balanced_inter_bandwidth(H100, p0, p1)
    balanced = sc.resolve("h100", sets=[f"network.inter_node.bandwidth={w1!r}"])
    level0, level1 = co.allreduce_time_levels(balanced, 1e9, p0, p1)
    assert level0.bandwidth == pytest.approx(level1.bandwidth, rel=1e-12)
    # Slower InfiniBand binds; faster leaves NVLink binding.
    slow0, slow1 = co.allreduce_time_levels(H100, 1e9, p0, p1)
    assert (slow1.bandwidth > slow0.bandwidth) == (H100["network.inter_node.bandwidth"] < w1)
    expr = co.balance_expr()
    assert (
        expr.lhs == co.bw1
        and sp.simplify(expr.rhs - co.bw0 * (co.parts1 - 1) / (co.parts1 * (co.parts0 - 1))) == 0
    )
    with pytest.raises(ValueError, match=r"p_intra: got 1; expected whole numbers of at least 2"):
        co.balanced_inter_bandwidth(H100, 1, p1)


def test_node_grid_and_link_names():
    p0, p1 = collectives_page.node_grid(H100, 100)
    node = H100["network.node_size"]
    assert list(p0[:node]) == list(range(1, node + 1)) and np.all(p1[:node] == 1)
    assert list(p1[node:]) == [2, 4, 8, 16, 32, 64] and np.all(p0[node:] == node)
    assert co.link_name(H100, 0) == "NVLink" and co.link_name(H100, 1) == "InfiniBand"
    assert co.link_name(FLAT, 1) == "NVLink"
    assert "unlimited" in co.link_name(UNLIMITED, 0)


@pytest.mark.parametrize("scn", [H100, FLAT, UNLIMITED])
def test_figures_draw_for_every_topology(scn):
    """Each topology's figures pass the checker glue runs on every figure of the book: on an
    unlimited network the one-node and flat-ring times are one line (their latency alone), and
    on the h100 preset their latency lines are, which must not hide one another."""
    import matplotlib.pyplot as plt
    from dmlimits.book import figures

    for fig in (
        collectives_page.figure_allreduce_time(scn, 16, mark_words=1e9, mark_label="a vector"),
        collectives_page.figure_allreduce_participants(scn, 1e9, 64),
    ):
        assert fig.axes and all(ax.lines for ax in fig.axes)
        figures.fit_to_read(fig)
        assert figures.check_figure(fig, drawn=True) == []
        plt.close(fig)


def _one_level(scn: sc.Scenario, level: int) -> sc.Scenario:
    """``scn`` with the other level's links infinitely fast."""
    other = ("network.inter_node.bandwidth", "network.intra_node.bandwidth")[level]
    return sc.Scenario(name=scn.name, values={**scn.values, other: math.inf})


@pytest.mark.parametrize("scn", [H100, FLAT, UNLIMITED], ids=["two-level", "flat", "unlimited"])
def test_level_times_are_the_split_level_by_level(scn):
    """allreduce_level_times (what the search costs each level with) is the all-reduce without
    overlap, its bandwidth time cut in two: the two add up to it, and each is the time with the
    other level's links infinitely fast."""
    p0 = np.array([1, 2, 8, 8, 3])[:, None]
    p1 = np.array([1, 4, 128])[None, :]
    words, seq, par = 2.5e9, 3, np.array([[1.0], [4.0], [7.0], [2.0], [5.0]])
    n = p0 * p1 * par * 2
    if scn is H100:
        p0 = np.minimum(p0, scn["network.node_size"])
    t = co.allreduce_level_times(scn, words, p0, p1, seq=seq, par=par, n_gpu=n)
    summed = co.allreduce_time_split(scn, words, p0, p1, seq, par, n, overlap_levels=False)
    assert_levels_add_up(t, summed, unlimited=scn is UNLIMITED)
    if scn is H100:  # (flat: NVLink at both levels, so no level can be made infinitely fast)
        for level, part in enumerate((t.level0, t.level1)):
            alone = co.allreduce_time_split(
                _one_level(scn, level), words, p0, p1, seq, par, n, overlap_levels=False
            )  # fmt: skip
            np.testing.assert_allclose(part, alone.bandwidth, rtol=1e-14, atol=0)


def test_equal_latency_times_both_show_in_the_time_figure():
    """One node and the flat ring pay the same latency per phase here, so their two dotted
    lines lie on one another: the drawn image shows both colours along that line, not only the
    one drawn last (checked in the pixels, right of every crossover where only the latency lines
    are drawn at that height)."""
    import matplotlib.pyplot as plt
    from dmlimits.book.figures import PALETTE

    node = int(H100["network.node_size"])
    nodes = 16
    lat_node = co.allreduce_time(H100, 1.0, node, 0).latency
    lat_flat = co.allreduce_time(H100, 1.0, node * nodes, 1).latency
    assert lat_node == pytest.approx(lat_flat, rel=1e-12)  # the case this test is about
    fig = collectives_page.figure_allreduce_time(H100, nodes)
    for colour in PALETTE[0], PALETTE[2]:  # one node, the flat ring
        shown = pixels_of_colour(fig, fig.axes[0], 1e10, 1e12, lat_node, colour)
        assert shown >= 20, f"{colour} shows in {shown} pixels of the shared latency line"
    plt.close(fig)
