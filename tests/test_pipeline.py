"""Pipeline parallelism (dmlimits.costs.pipeline): derivations; the bubble against simulated
schedules.

The simulations below are written here, independently of the library's formulas: they lay out
every forward and backward slot of every microbatch on every GPU, respecting the dependencies of
the passes and one slot per GPU at a time, and count the idle slots.  The closed forms they are
compared with always come from the library (``ppm.bubble_fraction``), never retyped.

Schedules (all with a synchronous flush at the end of a step unless stated):

* 1F1B (PipeDream-Flush; Narayanan et al. 2021), one chunk per GPU.
* Interleaved 1F1B (Narayanan et al. 2021, Megatron-LM's order): GPU ``j`` holds the chunks
  (virtual stages) ``j, j + N_PP, j + 2 N_PP, ...``; microbatches go in groups of ``N_PP``, each
  group through chunk 0, then chunk 1, ...; backward passes in the same groups with the chunks
  reversed; ``2 (N_PP - j - 1) + (v - 1) g`` forward passes of warm-up (``g`` the group size),
  then one forward and one backward alternately, then the remaining backward passes.  Megatron
  defines it for ``m`` a multiple of ``N_PP``; with ``m < N_PP`` we take one group of ``m``.
* Breadth-first interleaving (Lamy-Poirier 2023): all forward passes chunk by chunk, then all
  backward passes with the chunks reversed.  Same bubble as interleaved 1F1B where both are
  defined, more activation memory.
* ZB-H2 (Qi et al. 2023): the backward pass split into its activation-gradient half ``B`` and
  weight-gradient half ``W``; forward, ``B`` and ``W`` slots of equal length (in the paper's
  accounting each is two of a layer's six matmuls); no flush between steps, the optimizer step of
  each stage after its own last ``W`` (Qi et al.'s post-validation).

Time unit: one forward slot of one microbatch through one chunk.  A backward slot lasts
``BACKWARD`` forward slots; both 1 (the brief's default) and 2 (the paper's six matmuls: two
forward, four backward) are run.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from fractions import Fraction
from itertools import pairwise, product

import numpy as np
import pytest
import sympy as sp
from conftest import derivations_of
from dmlimits.book import pipeline_page
from dmlimits.core import derivation
from dmlimits.core import symbols as s
from dmlimits.core import units as u
from dmlimits.core.symbols import REGISTRY
from dmlimits.costs import pipeline as ppm

STAGES = range(1, 7)
MICROBATCHES = range(1, 13)
INTERLEAVING = range(1, 4)
BACKWARD = (1, 2)


# --- A list scheduler, independent of the library ------------------------------------------------
@dataclass(frozen=True, order=True)
class Op:
    kind: str  # "F" forward, "B" backward (activation gradient, or the whole backward), "W"
    chunk: int  # virtual stage: chunk k lives on GPU k % N_PP
    micro: int


@dataclass(frozen=True)
class Slot:
    gpu: int
    start: int
    end: int


class Deadlock(RuntimeError):
    """No GPU can start the next operation of its order."""


def dependencies(op: Op, n_chunks: int, split_backward: bool) -> list[Op]:
    """What must have finished before ``op`` starts."""
    k, i = op.chunk, op.micro
    if op.kind == "F":
        return [Op("F", k - 1, i)] if k > 0 else []
    if op.kind == "B":
        later = [Op("B", k + 1, i)] if k < n_chunks - 1 else []
        return [Op("F", k, i), *later]
    assert split_backward
    return [Op("B", k, i)]


def run_orders(orders: list[list[Op]], n_chunks: int, durations: dict[str, int]) -> dict[Op, Slot]:
    """Each GPU runs its operations in the given order, each as soon as the GPU is free and its
    dependencies have finished (list scheduling).  Raises :class:`Deadlock` when stuck."""
    timeline: dict[Op, Slot] = {}
    position = [0] * len(orders)
    free = [0] * len(orders)
    remaining = sum(map(len, orders))
    while remaining:
        progressed = False
        for gpu, order in enumerate(orders):
            while position[gpu] < len(order):
                op = order[position[gpu]]
                deps = dependencies(op, n_chunks, False)
                if any(d not in timeline for d in deps):
                    break
                start = max([free[gpu]] + [timeline[d].end for d in deps])
                timeline[op] = Slot(gpu, start, start + durations[op.kind])
                free[gpu] = timeline[op].end
                position[gpu] += 1
                remaining -= 1
                progressed = True
        if not progressed:
            raise Deadlock(f"stuck at positions {position}")
    return timeline


def check_timeline(
    timeline: dict[Op, Slot], n_pp: int, v: int, m: int, split_backward: bool = False
) -> None:
    """The schedule is a schedule: every pass of every microbatch on every chunk once, on the
    chunk's GPU, after its dependencies, and no GPU doing two things at a time."""
    n_chunks = v * n_pp
    kinds = "FBW" if split_backward else "FB"
    expected = {Op(k, c, i) for k in kinds for c in range(n_chunks) for i in range(m)}
    assert set(timeline) == expected
    for op, slot in timeline.items():
        assert slot.gpu == op.chunk % n_pp
        for dep in dependencies(op, n_chunks, split_backward):
            assert timeline[dep].end <= slot.start, (op, dep)
    for gpu in range(n_pp):
        slots = sorted((sl.start, sl.end) for sl in timeline.values() if sl.gpu == gpu)
        for (_, end), (start, _) in pairwise(slots):
            assert end <= start, f"GPU {gpu} runs two passes at once"


def simulated_bubble(timeline: dict[Op, Slot], n_pp: int) -> Fraction:
    """Idle slots over all slots of the flush, summed over GPUs."""
    makespan = max(sl.end for sl in timeline.values())
    busy = [0] * n_pp
    for sl in timeline.values():
        busy[sl.gpu] += sl.end - sl.start
    assert len(set(busy)) == 1, "every GPU does the same work"
    idle = sum(makespan - b for b in busy)
    return Fraction(idle, n_pp * makespan)


# --- Orders --------------------------------------------------------------------------------------
def order_1f1b(n_pp: int, m: int) -> list[list[Op]]:
    orders = []
    for stage in range(n_pp):
        warmup = min(n_pp - stage - 1, m)
        order = [Op("F", stage, i) for i in range(warmup)]
        for i in range(m - warmup):
            order += [Op("F", stage, warmup + i), Op("B", stage, i)]
        order += [Op("B", stage, i) for i in range(m - warmup, m)]
        orders.append(order)
    return orders


def order_interleaved(n_pp: int, v: int, m: int) -> list[list[Op]]:
    group = min(n_pp, m)
    groups = [range(a, min(a + group, m)) for a in range(0, m, group)]
    forward = [(c, i) for g in groups for c in range(v) for i in g]
    backward = [(c, i) for g in groups for c in reversed(range(v)) for i in g]
    total = v * m
    orders = []
    for gpu in range(n_pp):
        warmup = min(2 * (n_pp - gpu - 1) + (v - 1) * group, total)
        fwd = [Op("F", c * n_pp + gpu, i) for c, i in forward]
        bwd = [Op("B", c * n_pp + gpu, i) for c, i in backward]
        order = fwd[:warmup]
        for a in range(total - warmup):
            order += [fwd[warmup + a], bwd[a]]
        orders.append(order + bwd[total - warmup :])
    return orders


def order_breadth_first(n_pp: int, v: int, m: int) -> list[list[Op]]:
    return [
        [Op("F", c * n_pp + gpu, i) for c in range(v) for i in range(m)]
        + [Op("B", c * n_pp + gpu, i) for c in reversed(range(v)) for i in range(m)]
        for gpu in range(n_pp)
    ]


def simulate(order, n_pp: int, v: int, m: int, backward: int) -> Fraction:
    orders = order(n_pp, m) if order is order_1f1b else order(n_pp, v, m)
    timeline = run_orders(orders, v * n_pp, {"F": 1, "B": backward})
    check_timeline(timeline, n_pp, v, m)
    return simulated_bubble(timeline, n_pp)


def closed_form(n_pp: int, m: int, v: int = 1) -> float:
    return ppm.bubble_fraction(n_pp, m, v)


# --- Derivations ---------------------------------------------------------------------------------
def _pipeline_derivations() -> list[derivation.Derivation]:
    return derivations_of("costs.pipeline")


def test_derivations_are_registered():
    found = _pipeline_derivations()
    assert len(found) >= 2
    assert {"pipeline-bubble-1f1b", "pipeline-bubble-interleaved", "pipeline-microbatches"} <= {
        d.name for d in found
    }
    for d in found:
        assert d.chapter == "pipeline"
        assert len(d.steps) >= 2


def test_interleaved_bubble_reduces_to_1f1b():
    plain = ppm.bubble_1f1b_derivation().result
    interleaved = ppm.bubble_interleaved_derivation()
    assert sp.simplify(interleaved.result.rhs - plain.rhs) == 0
    at_one = ppm.bubble_expression().subs(ppm.interleave, 1)
    assert sp.simplify(at_one - plain.rhs) == 0


def test_threshold_solves_the_bubble():
    """The microbatch count the derivation gives for the bubble of m microbatches is m again,
    and one microbatch fewer misses the target (library functions both ways)."""
    for n_pp, m, v in product(range(2, 7), MICROBATCHES, INTERLEAVING):
        if m < n_pp:
            continue  # the threshold assumes no waits at changes of chunk
        target = ppm.bubble_fraction(n_pp, m, v)
        assert ppm.microbatches_for_bubble(n_pp, target, v) == pytest.approx(m, rel=1e-12)
        if m > 1:
            assert ppm.bubble_fraction(n_pp, m - 1, v) > target
    got = ppm.microbatches_for_bubble(np.array([2, 8, 64]), 0.1, np.array([1, 1, 12]))
    assert got.shape == (3,)
    for i, (n_pp, v) in enumerate([(2, 1), (8, 1), (64, 12)]):
        assert got[i] == ppm.microbatches_for_bubble(n_pp, 0.1, v)


def test_cost_formulas_have_their_units():
    for name, (expr, unit) in ppm.COST_FORMULAS.items():
        assert not REGISTRY.unregistered(expr), name
        u.check_unit(expr, REGISTRY.units, unit)
    u.check_unit(ppm.BOUNDARY_BYTES, REGISTRY.units, u.byte)


def test_boundary_bytes_is_its_expression_and_broadcasts():
    expr = ppm.COST_FORMULAS["boundary_bytes"][0]
    d = np.array([4096.0, 12288.0])[:, None]
    tokens = np.array([2048.0, 4 * 2048.0])
    got = ppm.boundary_bytes(d, tokens, 2)
    assert got.shape == (2, 2)
    for a, b in product(range(2), range(2)):
        want = expr.subs({s.d_model: d[a, 0], ppm.n_tok: tokens[b], ppm.word: 2})
        assert got[a, b] == pytest.approx(float(want), rel=1e-15)
    # Linear in each argument: forward activations and backward gradients per token.
    one = ppm.boundary_bytes(1, 1, 1)
    assert ppm.boundary_bytes(12288, 2048, 2) == pytest.approx(one * 12288 * 2048 * 2)
    assert isinstance(one, float)


def test_crossings_and_interleaving_factor():
    assert ppm.boundary_crossings(1) == 0
    assert ppm.boundary_crossings(4, 3) == 4 * 3 - 1
    assert ppm.interleaving_factor(192, 64) == 3
    assert ppm.interleaving_factor(192, 1) == 1
    got = ppm.interleaving_factor([1536, 1536, 1536], [128, 1, 1536])
    assert list(got) == [12, 1, 1]


# --- The closed form against simulated schedules ------------------------------------------------
@pytest.mark.parametrize("backward", BACKWARD)
def test_1f1b_simulation_matches_closed_form(backward):
    """Plain 1F1B: every N_PP in 1..6 and m in 1..12, including m < N_PP."""
    for n_pp, m in product(STAGES, MICROBATCHES):
        got = simulate(order_1f1b, n_pp, 1, m, backward)
        assert float(got) == pytest.approx(closed_form(n_pp, m), rel=1e-12, abs=1e-15), (n_pp, m)


@pytest.mark.parametrize("backward", BACKWARD)
def test_interleaved_1f1b_simulation_matches_where_defined(backward):
    """Interleaved 1F1B, v in 1..3, where the schedule is defined: m a multiple of N_PP (as
    Megatron-LM requires) or m <= N_PP (one group; the waits z of the paper's formula)."""
    checked = 0
    for n_pp, m, v in product(STAGES, MICROBATCHES, INTERLEAVING):
        if m > n_pp and m % n_pp:
            continue
        got = simulate(order_interleaved, n_pp, v, m, backward)
        want = closed_form(n_pp, m, v)
        assert float(got) == pytest.approx(want, rel=1e-12, abs=1e-15), (n_pp, m, v)
        checked += 1
    assert checked > 100


@pytest.mark.parametrize("backward", BACKWARD)
def test_breadth_first_interleaving_matches_everywhere(backward):
    """The paper's formula, z included, is exactly the bubble of breadth-first interleaving for
    every N_PP in 1..6, m in 1..12 and v in 1..3."""
    for n_pp, m, v in product(STAGES, MICROBATCHES, INTERLEAVING):
        got = simulate(order_breadth_first, n_pp, v, m, backward)
        want = closed_form(n_pp, m, v)
        assert float(got) == pytest.approx(want, rel=1e-12, abs=1e-15), (n_pp, m, v)


def test_the_waits_are_real():
    """With m < N_PP and v > 1 the simulated bubble exceeds the z = 0 value, by exactly z."""
    for n_pp, m, v in [(4, 1, 2), (4, 2, 3), (6, 5, 2), (6, 1, 3)]:
        got = simulate(order_interleaved, n_pp, v, m, 1)
        no_waits = float(
            ppm.bubble_interleaved_derivation()
            .steps[3]
            .expr.rhs.subs({ppm.z_wait: 0, ppm.n_pp: n_pp, ppm.n_micro: m})
            .subs(ppm.interleave, v)
        )
        assert got > no_waits
        assert float(got) == pytest.approx(closed_form(n_pp, m, v), rel=1e-12)


# Where Megatron-LM's interleaved order meets a last, partial group of microbatches (m > N_PP,
# m not a multiple of N_PP; Megatron-LM itself refuses such m), the order above either deadlocks
# or idles more than the formula says.  These are the deadlocks on the grid (the same for both
# backward lengths, since deadlock depends on the order only).
PARTIAL_GROUP_DEADLOCKS = {
    (4, 5, 3),
    (4, 9, 3),
    (5, 6, 3),
    (5, 7, 2),
    (5, 7, 3),
    (5, 11, 3),
    (5, 12, 2),
    (5, 12, 3),
    (6, 7, 3),
    (6, 8, 2),
    (6, 8, 3),
    (6, 9, 2),
    (6, 9, 3),
}
# (N_PP, m, v): simulated bubble with backward = forward slot.
PARTIAL_GROUP_BUBBLES = {
    (2, 3, 2): Fraction(1, 5),
    (3, 4, 2): Fraction(1, 3),
    (3, 4, 3): Fraction(1, 3),
    (3, 5, 2): Fraction(1, 5),
    (6, 7, 2): Fraction(19, 47),
    (6, 11, 3): Fraction(2, 13),
}


@pytest.mark.parametrize("backward", BACKWARD)
def test_interleaved_1f1b_with_a_partial_group_idles_more(backward):
    deadlocks = set()
    for n_pp, m, v in product(STAGES, MICROBATCHES, range(2, 4)):
        if m <= n_pp or m % n_pp == 0:
            continue
        try:
            got = simulate(order_interleaved, n_pp, v, m, backward)
        except Deadlock:
            deadlocks.add((n_pp, m, v))
            continue
        want = closed_form(n_pp, m, v)
        assert float(got) > want + 1e-3, (n_pp, m, v)
        if backward == 1 and (n_pp, m, v) in PARTIAL_GROUP_BUBBLES:
            assert got == PARTIAL_GROUP_BUBBLES[(n_pp, m, v)]
        # Breadth-first reaches the formula for the same counts.
        bf = simulate(order_breadth_first, n_pp, v, m, backward)
        assert float(bf) == pytest.approx(want, rel=1e-12)
    assert deadlocks == PARTIAL_GROUP_DEADLOCKS


# --- Zero bubble: ZB-H2 --------------------------------------------------------------------------
def simulate_zb_h2(n_pp: int, m: int, steps: int) -> tuple[dict[Op, Slot], int]:
    """Greedy ZB-H2: each free slot runs, in order of preference, the next activation-gradient
    pass B if ready, else the next forward pass if ready (at most 2 N_PP - 1 microbatches whose
    weight gradient is pending, ZB-H2's memory), else the next weight-gradient pass W.  Forward,
    B and W take one slot each.  ``steps`` optimizer steps run back to back; a stage starts the
    next step's forward passes once its own W passes of the step are done.  Microbatch ``i`` of
    step ``k`` is numbered ``k m + i``.  Returns the timeline and the largest number of
    microbatches in flight (forward done, W not) on any stage."""
    total = m * steps
    cap = 2 * n_pp - 1
    timeline: dict[Op, Slot] = {}
    nf, nb, nw = [0] * n_pp, [0] * n_pp, [0] * n_pp
    peak = 0

    def done(op: Op, t: int) -> bool:
        return op in timeline and timeline[op].end <= t

    t = 0
    while min(nw) < total:
        for st in range(n_pp):
            op = None
            i = nf[st]
            if (
                nb[st] < nf[st]
                and done(Op("F", st, nb[st]), t)
                and (st == n_pp - 1 or done(Op("B", st + 1, nb[st]), t))
            ):
                op = Op("B", st, nb[st])
                nb[st] += 1
            elif (
                i < total
                and (st == 0 or done(Op("F", st - 1, i), t))
                and i - nw[st] < cap
                and (i % m or nw[st] == i)  # a new step waits for this stage's optimizer step
            ):
                op = Op("F", st, i)
                nf[st] += 1
            elif nw[st] < nb[st]:
                op = Op("W", st, nw[st])
                nw[st] += 1
            if op is not None:
                timeline[op] = Slot(st, t, t + 1)
                peak = max(peak, nf[st] - nw[st])
        t += 1
        assert t < 10 * total * n_pp + 100, "the greedy schedule is stuck"
    return timeline, peak


def _check_zb(timeline: dict[Op, Slot], n_pp: int, m: int, steps: int) -> None:
    check_timeline(timeline, n_pp, 1, m * steps, split_backward=True)
    for op, slot in timeline.items():
        if op.kind == "F" and op.micro % m == 0 and op.micro:
            last_w = timeline[Op("W", op.chunk, op.micro - 1)]
            assert last_w.end <= slot.start, "a step started before the optimizer step"


def _gaps(timeline: dict[Op, Slot], n_pp: int) -> list[tuple[int, int, int]]:
    """(first slot, end of last slot, idle slots in between) of each stage."""
    out = []
    for st in range(n_pp):
        starts = sorted(sl.start for sl in timeline.values() if sl.gpu == st)
        out.append((starts[0], starts[-1] + 1, starts[-1] + 1 - starts[0] - len(starts)))
    return out


def test_zb_h2_simulation_has_no_bubble_where_the_library_allows_it():
    """For every m >= 2 N_PP (N_PP in 1..6, m up to 12) each stage s computes without a gap from
    slot s to slot s + 3 m K over K steps: after the unavoidable skew of the very first step,
    steps follow each other with no idle slot, so the bubble is 0, the library's value."""
    steps = 3
    for n_pp, m in product(STAGES, MICROBATCHES):
        if m < 2 * n_pp:
            continue
        timeline, peak = simulate_zb_h2(n_pp, m, steps)
        _check_zb(timeline, n_pp, m, steps)
        assert peak <= 2 * n_pp - 1
        for st, (first, end, idle) in enumerate(_gaps(timeline, n_pp)):
            assert (first, end, idle) == (st, st + 3 * m * steps, 0), (n_pp, m, st)
        assert ppm.bubble_fraction(n_pp, m, zero_bubble=True) == 0.0


def test_zb_h2_needs_enough_microbatches():
    """Below 2 N_PP - 1 microbatches the greedy ZB-H2 leaves idle slots, and the library refuses
    zero bubble below 2 N_PP (one microbatch more than the simulation needs)."""
    for n_pp, m in product(range(2, 7), MICROBATCHES):
        timeline, _ = simulate_zb_h2(n_pp, m, 2)
        _check_zb(timeline, n_pp, m, 2)
        idle = sum(g[2] for g in _gaps(timeline, n_pp))
        assert (idle == 0) == (m >= 2 * n_pp - 1), (n_pp, m, idle)
        if m < 2 * n_pp:
            with pytest.raises(ValueError, match=rf"m: got {m} microbatches with n_pp = {n_pp}"):
                ppm.bubble_fraction(n_pp, m, zero_bubble=True)


def test_zero_bubble_conditions_are_enforced():
    with pytest.raises(ValueError, match=r"v: got 2 with zero_bubble=True.*v = 1"):
        ppm.bubble_fraction(4, 8, v=2, zero_bubble=True)
    with pytest.raises(ValueError, match=r"m: got 7 microbatches with n_pp = 4.*m >= 2 \* n_pp"):
        ppm.bubble_fraction(4, 7, zero_bubble=True)
    with pytest.raises(ValueError, match=r"m: got 5 microbatches with n_pp = 3"):
        ppm.bubble_fraction(3, np.array([6, 5, 12]), zero_bubble=True)
    with pytest.raises(ValueError, match=r"zero_bubble: got 'yes'"):
        ppm.bubble_fraction(4, 8, zero_bubble="yes")
    assert ppm.bubble_fraction(4, [8, 16], zero_bubble=True).tolist() == [0.0, 0.0]
    # Without zero bubble, small m and interleaving are fine.
    assert 0 < ppm.bubble_fraction(4, 1, v=3) < 1


# --- Microbatches --------------------------------------------------------------------------------
def test_valid_microbatches_examples():
    assert ppm.valid_microbatches(4, 96) == (4, 6, 8, 12)
    assert ppm.valid_microbatches(4, 96, zero_bubble=True) == (8, 12, 16, 24)
    assert ppm.valid_microbatches(4, 96, count=2) == (4, 6)
    assert ppm.valid_microbatches(1, 1) == (1,)
    assert ppm.valid_microbatches(8, 4) == ()
    assert ppm.valid_microbatches(3, 8, zero_bubble=True) == (8,)
    # The paper's 1.91e31 FLOP configuration: 128 stages, 128 microbatches (notes, section 8).
    assert ppm.valid_microbatches(128, 128 * 3)[0] == 128


def test_valid_microbatches_against_brute_force():
    for n_pp, n, zb, rule in product(range(1, 9), range(1, 65), (False, True), ("2n", "2n-1")):
        least = 2 * n_pp - (rule == "2n-1") if zb else n_pp
        want = [d for d in range(1, n + 1) if n % d == 0 and d >= least][:4]
        got = ppm.valid_microbatches(n_pp, n, zero_bubble=zb, rule=rule)
        assert got == tuple(want), (n_pp, n, zb, rule)
        for m in got:
            assert n % m == 0  # whole units per microbatch
            if zb and rule == "2n":
                assert ppm.bubble_fraction(n_pp, m, zero_bubble=True) == 0.0


def test_microbatch_units():
    assert ppm.unit_tokens("token", 2048) == 1
    assert ppm.unit_tokens("sequence", 2048) == 2048
    with pytest.raises(ValueError, match=r"unit: got 'sequences'; expected one of token"):
        ppm.unit_tokens("sequences", 2048)
    with pytest.raises(ValueError, match=r"rule: got '2N'; expected one of 2n, 2n-1"):
        ppm.least_microbatches(4, True, "2N")


# --- Errors name the bad value -----------------------------------------------------------------
@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: ppm.bubble_fraction(0, 4), r"n_pp: got 0; expected whole numbers"),
        (lambda: ppm.bubble_fraction(2.5, 4), r"n_pp: got 2\.5; expected whole numbers"),
        (lambda: ppm.bubble_fraction(4, [4, -1]), r"m: got -1; expected whole numbers"),
        (lambda: ppm.bubble_fraction(4, 4, v=0), r"v: got 0; expected whole numbers"),
        (lambda: ppm.bubble_fraction("four", 4), r"n_pp: got 'four'"),
        (lambda: ppm.valid_microbatches(4, 0), r"units: got 0"),
        (lambda: ppm.valid_microbatches(4, 96.5), r"units: got 96\.5"),
        (lambda: ppm.valid_microbatches(4, 96, count=0), r"count: got 0"),
        (lambda: ppm.valid_microbatches(True, 96), r"n_pp: got True"),
        (lambda: ppm.valid_microbatches(4, 96, zero_bubble=1), r"zero_bubble: got 1"),
        (lambda: ppm.boundary_bytes(0, 2048, 2), r"d_model: got 0; expected finite"),
        (lambda: ppm.boundary_bytes(1024, np.nan, 2), r"tokens: got nan"),
        (lambda: ppm.boundary_bytes(1024, 2048, -2), r"word_bytes: got -2; expected finite"),
        (lambda: ppm.interleaving_factor(10, 4), r"n_pp: got 4, which does not divide"),
        (lambda: ppm.microbatches_for_bubble(4, 1.5), r"max_fraction: got 1\.5"),
        (lambda: ppm.microbatches_for_bubble(4, 0), r"max_fraction: got 0; expected finite"),
    ],
)
def test_errors_name_the_bad_value(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_bubble_fraction_broadcasts():
    got = ppm.bubble_fraction(np.array([1, 2, 4])[:, None], np.array([1, 4, 8]), v=2)
    assert got.shape == (3, 3)
    assert np.all(got[0] == 0.0)  # one stage: no bubble
    assert isinstance(ppm.bubble_fraction(4, 8), float)
    for i, n_pp in enumerate((1, 2, 4)):
        for j, m in enumerate((1, 4, 8)):
            assert got[i, j] == ppm.bubble_fraction(n_pp, m, 2)


def test_symbols_belong_to_the_chapter():
    for sym in (
        ppm.n_pp,
        ppm.n_micro,
        ppm.interleave,
        ppm.z_wait,
        ppm.bubble,
        ppm.bubble_max,
        ppm.t_fwd,
        ppm.t_bwd,
        ppm.t_chunk,
        ppm.t_busy,
        ppm.t_flush,
        ppm.n_tok,
    ):
        assert REGISTRY[sym].defined_in == "pipeline"
    # Reused, not redeclared: the word size and the model width.
    assert REGISTRY[ppm.word].defined_in == "matmul"
    assert REGISTRY[s.d_model].defined_in == "model"


# --- The library's schedules against the simulator above ---------------------------------------
def as_timeline(sched: ppm.Schedule) -> dict[Op, Slot]:
    return {Op(p.kind, p.chunk, p.micro): Slot(p.gpu, p.start, p.end) for p in sched.passes}


ORDERS = {
    "1f1b": order_1f1b,
    "interleaved": order_interleaved,
    "breadth-first": order_breadth_first,
}


@pytest.mark.parametrize("backward", BACKWARD)
def test_library_schedules_are_the_simulated_ones(backward):
    """ppm.schedule lays out the same passes at the same times as the list scheduler here,
    and deadlocks exactly where it does."""
    for (name, order), n_pp, m, v in product(ORDERS.items(), STAGES, MICROBATCHES, INTERLEAVING):
        if name == "1f1b" and v > 1:
            continue
        orders = order(n_pp, m) if order is order_1f1b else order(n_pp, v, m)
        try:
            want = run_orders(orders, v * n_pp, {"F": 1, "B": backward})
        except Deadlock:
            with pytest.raises(ppm.ScheduleDeadlock, match=r"n_pp=\d+, m=\d+, v=\d+"):
                ppm.schedule(n_pp, m, v, name, backward)
            continue
        got = ppm.schedule(n_pp, m, v, name, backward)
        assert as_timeline(got) == want, (name, n_pp, m, v)
        check_timeline(as_timeline(got), n_pp, v, m)
        assert got.bubble == simulated_bubble(want, n_pp)
        assert (got.order, got.n_pp, got.m, got.v, got.steps) == (name, n_pp, m, v, 1)


def _list_schedule_as_first_written(orders, n_chunks, durations, latency=0, per_chunk=None):
    """ppm.list_schedule's rule as it was first written, one list of inputs per pass."""

    def inputs(kind, chunk, micro):
        if kind == "F":
            return [("F", chunk - 1, micro)] if chunk > 0 else []
        if kind == "B":
            return [("F", chunk, micro)] + ([("B", chunk + 1, micro)] if chunk < n_chunks - 1
                                            else [])  # fmt: skip
        return [("B", chunk, micro)]

    lasts = per_chunk or [durations] * n_chunks
    n_pp, ends, placed = len(orders), {}, []
    position, free = [0] * n_pp, [0] * n_pp
    remaining = sum(map(len, orders))
    while remaining:
        progressed = False
        for gpu, order in enumerate(orders):
            while position[gpu] < len(order):
                kind, chunk, micro = order[position[gpu]]
                needs = inputs(kind, chunk, micro)
                if any(i not in ends for i in needs):
                    break
                start = max([free[gpu]] + [ends[i] + (latency if i[1] % n_pp != gpu else 0)
                                           for i in needs])  # fmt: skip
                end = start + lasts[chunk][kind]
                ends[(kind, chunk, micro)] = end
                placed.append(ppm.ScheduledPass(start, gpu, kind, chunk, micro, end))
                free[gpu], position[gpu], remaining, progressed = end, position[gpu] + 1, \
                    remaining - 1, True  # fmt: skip
        if not progressed:
            raise ppm.ScheduleDeadlock("stalls")
    return tuple(sorted(placed))


@pytest.mark.parametrize("latency", [0, 0.25, 3])
def test_the_list_scheduler_places_every_pass_as_the_rule_first_written(latency):
    """The scheduler's inputs written out (for speed) place every pass where the rule with one
    list of inputs per pass places it, to the number and its type (whole slots stay whole), or
    deadlock with it: every order, with latency, uneven chunks and a weight-gradient pass."""
    cases = []
    for n_pp, m, v in product((1, 2, 3, 4), (1, 2, 3, 5, 8), (1, 2, 3)):
        cases.append((ppm.order_breadth_first(n_pp, v, m), v * n_pp))
        cases.append((ppm.order_interleaved(n_pp, v, m), v * n_pp))
        if v == 1:
            cases.append((ppm.order_1f1b(n_pp, m), n_pp))
    cases.append(([[("F", 0, 0), ("B", 0, 0), ("W", 0, 0), ("F", 0, 1), ("B", 0, 1), ("W", 0, 1)]],
                  1))  # fmt: skip
    for orders, n_chunks in cases:
        plain = {"F": 1, "B": 2, "W": 1}
        uneven = [{"F": 1 + 0.5 * (k % 2), "B": 2 + k, "W": 1} for k in range(n_chunks)]
        for per_chunk in (None, uneven):
            args = (orders, n_chunks, plain, latency, per_chunk)
            try:
                want = _list_schedule_as_first_written(*args)
            except ppm.ScheduleDeadlock:
                with pytest.raises(ppm.ScheduleDeadlock):
                    ppm.list_schedule(*args)
                continue
            got = ppm.list_schedule(*args)
            assert got == want
            assert [type(x) for p in got for x in (p.start, p.end)] == [
                type(x) for p in want for x in (p.start, p.end)
            ]


def test_library_schedule_bubble_is_the_formula_for_1f1b():
    for n_pp, m in product(STAGES, MICROBATCHES):
        got = ppm.schedule(n_pp, m)
        assert float(got.bubble) == pytest.approx(ppm.bubble_fraction(n_pp, m), abs=1e-15)
        assert got.makespan == max(p.end for p in got.passes)
        assert all(got.busy(g) == m * (1 + ppm.BACKWARD_SLOTS) for g in range(n_pp))


def test_a_heavier_last_chunk_paces_the_schedule():
    """With the last chunk ``1 + h`` times as long (the output layer and the loss), the flush
    lasts the last GPU's work plus the other chunks' warm-up and cool-down: ``m (1 + b)
    (v + h)`` slots and ``(N_PP - 1) (1 + b)`` more, as run-mfu's third step counts it; the
    last GPU idles only in the warm-up and cool-down."""
    b = ppm.BACKWARD_SLOTS
    for n_pp, m, v, h in product((1, 2, 4), (1, 4, 8), (1, 2), (0.0, 0.25, 3.0)):
        if v > 1 and m % n_pp:
            continue
        got = ppm.schedule(n_pp, m, v, "interleaved" if v > 1 else "1f1b", head=h)
        assert got.makespan == pytest.approx(m * (1 + b) * (v + h) + (n_pp - 1) * (1 + b))
        assert got.busy(n_pp - 1) == pytest.approx(m * (1 + b) * (v + h))
    with pytest.raises(ValueError, match=r"head: got -0\.5; expected the last chunk's extra"):
        ppm.schedule(2, 4, head=-0.5)


def test_library_zero_bubble_schedule_is_the_greedy_one():
    for n_pp, m, steps in product(range(1, 6), range(1, 11), (1, 2, 3)):
        want, _ = simulate_zb_h2(n_pp, m, steps)
        got = ppm.schedule_zero_bubble(n_pp, m, steps)
        assert as_timeline(got) == want, (n_pp, m, steps)
        assert (got.order, got.steps, got.v) == ("zero-bubble", steps, 1)
        idle = sum(got.gaps(g) for g in range(n_pp))
        assert idle == sum(g[2] for g in _gaps(want, n_pp))
        if m >= 2 * n_pp:
            assert idle == 0


@pytest.mark.parametrize("backward", BACKWARD)
def test_compare_interleaved_orders_reports_the_simulation(backward):
    rows = ppm.compare_interleaved_orders(STAGES, MICROBATCHES, range(2, 4), backward)
    assert len(rows) == len(STAGES) * len(MICROBATCHES) * 2
    deadlocks = {(r.n_pp, r.m, r.v) for r in rows if r.megatron is None}
    assert deadlocks == PARTIAL_GROUP_DEADLOCKS
    for r in rows:
        assert r.formula == closed_form(r.n_pp, r.m, r.v)
        assert float(r.breadth_first) == pytest.approx(r.formula, rel=1e-12, abs=1e-15)
        if r.megatron_defined:
            assert float(r.megatron) == pytest.approx(r.formula, rel=1e-12, abs=1e-15)
        elif r.megatron is not None:
            assert float(r.megatron) > r.formula + 1e-3
            if backward == 1 and (r.n_pp, r.m, r.v) in PARTIAL_GROUP_BUBBLES:
                assert r.megatron == PARTIAL_GROUP_BUBBLES[(r.n_pp, r.m, r.v)]


def test_the_makespan_alone_is_the_schedules():
    """ppm.makespan, which lays a flush out without making its passes, gives the laid-out
    schedule's makespan to the last bit: every order, with latency, collectives, a heavier last
    chunk and uneven chunks; and it stops where the schedule does, with the same error."""
    rng = np.random.default_rng(7)
    for (name, _), n_pp, m, v in product(ORDERS.items(), STAGES, MICROBATCHES, INTERLEAVING):
        if name == "1f1b" and v > 1:
            continue
        work = [float(x) for x in rng.uniform(0.2, 3.0, v * n_pp)]
        for kw in ({}, {"latency": 0.3, "collective": 0.05}, {"head": 0.7}, {"work": work}):
            try:
                want = ppm.schedule(n_pp, m, v, name, **kw).makespan
            except ppm.ScheduleDeadlock as err:
                with pytest.raises(ppm.ScheduleDeadlock, match=re.escape(str(err))):
                    ppm.makespan(n_pp, m, v, name, **kw)
                continue
            assert ppm.makespan(n_pp, m, v, name, **kw) == want, (name, n_pp, m, v, kw)
    with pytest.raises(ValueError, match=r"work: got \[1\.0\]; expected 4 finite numbers"):
        ppm.makespan(4, 8, work=[1.0])


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: ppm.schedule(4, 8, 2, "1f1b"), r"v: got 2 with order='1f1b'"),
        (lambda: ppm.schedule(4, 8, 1, "gpipe"), r"order: got 'gpipe'; expected one of"),
        (lambda: ppm.schedule(0, 8), r"n_pp: got 0"),
        (lambda: ppm.schedule(4, 8, backward=0), r"backward: got 0"),
        (lambda: ppm.schedule_zero_bubble(4, 8, steps=0), r"steps: got 0"),
        (lambda: ppm.schedule(4, 5, 3, "interleaved"), r"expects m to be a multiple of n_pp"),
        (lambda: ppm.makespan(4, 8, 1, "gpipe"), r"order: got 'gpipe'; expected one of"),
        (lambda: ppm.makespan(4, 8, latency=-1), r"latency: got -1"),
    ],
)
def test_schedule_errors_name_the_bad_value(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_figures_are_drawn_from_the_library():
    import matplotlib.pyplot as plt

    fig = pipeline_page.figure_bubble([4, 16], 16, [1, 2, 4], max_fraction=0.1)
    assert isinstance(fig, plt.Figure) and len(fig.axes) == 2
    lines = fig.axes[0].get_lines()
    m = lines[0].get_xdata()
    assert np.allclose(lines[0].get_ydata(), ppm.bubble_fraction(4, m))
    plt.close(fig)
    fig = pipeline_page.figure_schedule(3, 6, 2, steps=2)
    assert isinstance(fig, plt.Figure) and len(fig.axes) == 3
    # One bar per pass per step, each at its pass's time on its GPU's row (the bars of a GPU
    # and look share a collection).
    passes = ppm.schedule(3, 6).passes
    drawn = sorted(
        (round(float(path.vertices[:, 1].mean())), float(path.vertices[:, 0].min()),
         float(np.ptp(path.vertices[:, 0])))
        for c in fig.axes[0].collections for path in c.get_paths()
    )  # fmt: skip
    span = max(p.end for p in passes)
    assert drawn == sorted(
        (p.gpu, float(p.start + k * span), float(p.end - p.start))
        for p in passes for k in range(2)
    )  # fmt: skip
    # The passes' numbers are left out of the layout's measures (hundreds of labels): each
    # lies inside its axes, so the layout is the one they would give.
    fig.canvas.draw()
    labels = [t for ax in fig.axes for t in ax.texts]
    assert labels and not any(t.get_in_layout() for t in labels)
    for ax in fig.axes:
        box = ax.get_window_extent()
        for t in ax.texts:
            e = t.get_window_extent()
            assert box.x0 <= e.x0 and e.x1 <= box.x1 and box.y0 <= e.y0 and e.y1 <= box.y1
    plt.close(fig)


def test_deepest_pipeline_against_brute_force():
    for layers, seqs, zb in product(range(1, 97), (1, 3, 8, 12, 48, 96, 1024), (False, True)):
        powers = [2**k for k in range(8) if layers % 2**k == 0]
        ok = [p for p in powers if ppm.valid_microbatches(p, seqs, zero_bubble=zb)]
        assert ppm.deepest_pipeline(layers, seqs, zb) == max(ok, default=1), (layers, seqs)
    assert ppm.deepest_pipeline(576, 12288) == 64
    assert ppm.deepest_pipeline(576, 96) == 32  # 64 stages would need 128 sequences
    with pytest.raises(ValueError, match=r"n_layers: got 0"):
        ppm.deepest_pipeline(0, 8)


def test_flush_time_is_the_derivation():
    expr = ppm.flush_time_derivation().result.rhs
    for busy, f in product((1.0, 2.5), (0.0, 0.25, 0.5)):
        want = float(expr.subs({ppm.t_busy: busy, ppm.bubble: f}))
        assert ppm.flush_time(busy, f) == pytest.approx(want, rel=1e-15)
    # The simulated 1F1B flush is the busy time stretched by the bubble.
    sched = ppm.schedule(4, 6)
    assert ppm.flush_time(sched.busy(0), ppm.bubble_fraction(4, 6)) == pytest.approx(sched.makespan)
    assert ppm.flush_time(np.array([1.0, 2.0]), 0.5).tolist() == [2.0, 4.0]
    with pytest.raises(ValueError, match=r"fraction: got 1; expected a number in \[0, 1\)"):
        ppm.flush_time(1.0, 1.0)
    with pytest.raises(ValueError, match=r"busy: got 0; expected finite"):
        ppm.flush_time(0.0, 0.5)


# --- Latency in the schedule simulation (issue #12, item 7) ------------------------------------
@pytest.mark.parametrize("order,v", [("1f1b", 1), ("breadth-first", 2), ("interleaved", 2)])
def test_zero_latency_schedule_is_the_plain_one(order, v):
    for n_pp, m in ((2, 4), (4, 8), (3, 6)):
        plain = ppm.schedule(n_pp, m, v, order)
        assert ppm.schedule(n_pp, m, v, order, latency=0, collective=0) == plain
    assert ppm.schedule_zero_bubble(4, 8, latency=0) == ppm.schedule_zero_bubble(4, 8)


@pytest.mark.parametrize("n_pp", [2, 3, 4, 8])
def test_1f1b_pays_at_least_one_chain_and_more_with_more_microbatches(n_pp):
    # One microbatch alone crosses every boundary twice: exactly the chain the search counts.
    assert ppm.latency_slots(n_pp, 1) == 2 * (n_pp - 1)
    costs = [ppm.latency_slots(n_pp, k * n_pp) for k in (1, 2, 4)]
    assert all(c >= 2 * (n_pp - 1) for c in costs)
    assert costs == sorted(costs) and costs[-1] > costs[0]
    # ... and never more than every microbatch paying its own chain.
    assert all(c <= 2 * (n_pp - 1) * k * n_pp for c, k in zip(costs, (1, 2, 4), strict=True))


def test_a_latency_delays_exactly_the_remote_inputs():
    # Two stages, one microbatch: F0, (λ), F1, B1, (λ), B0.
    s = ppm.schedule(2, 1, latency=0.5)
    starts = {(p.kind, p.chunk): p.start for p in s.passes}
    assert starts == {("F", 0): 0, ("F", 1): 1.5, ("B", 1): 2.5, ("B", 0): 5.0}
    assert s.makespan == 7.0


@pytest.mark.parametrize("n_pp,m,c", [(4, 4, 0.5), (4, 8, 1), (8, 16, 0.25)])
def test_collectives_are_paid_on_every_pass_of_the_critical_path(n_pp, m, c):
    b = ppm.BACKWARD_SLOTS
    assert ppm.schedule(n_pp, m, collective=c).makespan == (m + n_pp - 1) * (1 + b + 2 * c)


def test_zero_bubble_hides_latency_at_its_fewest_microbatches():
    # The chapter's claim: at 2 N_PP microbatches ZB-H2 pays no more than one chain per step,
    # and more microbatches cost more.
    for n_pp in (4, 8):
        m = ppm.least_microbatches(n_pp, zero_bubble=True)
        zb = ppm.latency_slots(n_pp, m, order="zero-bubble")
        assert 0 < zb <= 2 * (n_pp - 1)
        assert ppm.latency_slots(n_pp, 2 * m, order="zero-bubble") > zb


@pytest.mark.parametrize(
    "call,message",
    [
        (lambda: ppm.schedule(4, 8, latency=-1), r"latency: got -1"),
        (lambda: ppm.schedule(4, 8, collective="x"), r"collective: got 'x'"),
        (lambda: ppm.schedule(4, 8, latency=math.inf), r"latency: got inf"),
        (lambda: ppm.latency_slots(4, 8, latency=0), r"latency: got 0"),
        (lambda: ppm.schedule_zero_bubble(4, 8, latency=0.5), r"latency: got 0.5"),
    ],
)
def test_latency_errors_name_the_bad_value(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def _one_f_one_b(work: list[float], m: int, backward: int = ppm.BACKWARD_SLOTS) -> float:
    """PipeDream-Flush written out apart from the library: stage ``s`` runs
    ``min(N_PP - s - 1, m)`` forward passes, then alternates one forward and one backward
    pass, then the remaining backward passes; each pass starts once its stage is free and its
    input has arrived (the previous stage's forward, the next stage's backward)."""
    p = len(work)
    orders = []
    for st in range(p):
        warm = min(p - st - 1, m)
        seq = [("F", i) for i in range(warm)]
        for i in range(m - warm):
            seq += [("F", warm + i), ("B", i)]
        seq += [("B", i) for i in range(m - warm, m)]
        orders.append(seq)
    end: dict[tuple[str, int, int], float] = {}
    free, pos = [0.0] * p, [0] * p
    while any(pos[st] < len(orders[st]) for st in range(p)):
        for st in range(p):
            while pos[st] < len(orders[st]):
                kind, i = orders[st][pos[st]]
                deps = [("F", st - 1, i)] if kind == "F" and st > 0 else []
                if kind == "B":
                    deps = [("F", st, i)] + ([("B", st + 1, i)] if st < p - 1 else [])
                if any(d not in end for d in deps):
                    break
                start = max([free[st]] + [end[d] for d in deps])
                end[(kind, st, i)] = free[st] = start + work[st] * (1 if kind == "F" else backward)
                pos[st] += 1
    return max(end.values())


def test_uneven_stages_against_a_schedule_written_apart():
    """``schedule(..., work=...)`` lays out PipeDream-Flush with stages of unequal work as a
    schedule written out apart from the library does, for random stage works (zero included);
    with alike stages the makespan is ``(m + N_PP - 1) (1 + b)`` slots."""
    rng = np.random.default_rng(7)
    for _ in range(60):
        p, m = int(rng.integers(2, 7)), int(rng.integers(1, 13))
        work = [float(x) for x in rng.uniform(0.0, 3.0, p)]
        if rng.random() < 0.2:
            work[int(rng.integers(p))] = 0.0
        got = ppm.schedule(p, m, work=work).makespan
        assert got == pytest.approx(_one_f_one_b(work, m), rel=1e-12), (p, m, work)
    alike = ppm.schedule(4, 8, work=[1, 1, 1, 1]).makespan
    assert alike == (8 + 3) * (1 + ppm.BACKWARD_SLOTS)
    # A generator is read once; the heavier last chunk multiplies its work.
    a = ppm.schedule(3, 6, work=(x for x in (1.0, 2.0, 1.0)), head=0.5).makespan
    assert a == pytest.approx(_one_f_one_b([1.0, 2.0, 1.5], 6))


@pytest.mark.parametrize(
    "work", [[1, 1, 1], [1, 1, 1, -1], [1, 1, 1, float("nan")], [1, 1, 1, float("inf")],
             [True, 1, 1, 1], "1111", 3.0, [[1], [1], [1], [1]]],
)  # fmt: skip
def test_uneven_stages_refuse_bad_work(work):
    with pytest.raises(ValueError, match=r"work: got .*; expected 4 finite numbers"):
        ppm.schedule(4, 8, work=work)


def test_the_calibrated_mode_times_nanotrons_stages_by_the_schedule():
    """On the Playbook's pipelined rows (nanotron's split), the calibrated step's bubble ratio is
    the stretch of a PipeDream-Flush schedule written out apart, each stage's passes as long as
    its work (:func:`dmlimits.measured.operations.stage_times`), over equal shares; the bound
    keeps the closed form ``(N_PP - 1) / m`` and so does not move with the placement."""
    from dmlimits.measured import operations, runs

    cfgs = {}
    for row in runs.dev_rows():
        cfg = runs.interpret(row).config
        if cfg is not None and cfg.pp > 1 and cfg.stages == "nanotron":
            cfgs[(cfg.pp, cfg.micro_batches, cfg.shape.name)] = cfg
    assert len(cfgs) >= 3
    for cfg in cfgs.values():
        times = operations.stage_times(cfg, "nanotron")
        m = round(cfg.micro_batches)
        apart = _one_f_one_b(list(times / times.mean()), m) / (m * (1 + ppm.BACKWARD_SLOTS))
        parts = runs.components(cfg)
        assert parts["stage_bubble_ratio"] == pytest.approx(apart - 1, rel=1e-5)
        # (One micro-batch runs the stages one after another: unevenness costs nothing.)
        assert parts["stage_bubble_ratio"] >= parts["bubble_ratio"] == (cfg.pp - 1) / m
        bound = runs.predict(cfg).step_time_s
        with operations.placement("even"):
            assert runs.components(cfg)["stage_bubble_ratio"] == parts["bubble_ratio"]
            assert runs.predict(cfg).step_time_s == bound
