"""Simulations and counts that the oracles compare derivations with; none of them reads a
derivation."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from dmlimits.premises.base import PremiseError


def ring_allreduce(p: int, n: int, seed: int = 0) -> tuple[int, int]:
    """All-reduce ``p`` vectors of ``n`` numbers (``n`` a multiple of ``p``) on a ring, chunk by
    chunk: a reduce-scatter, each GPU passing its running partial sum on, then an all-gather.
    Checks that every GPU ends with the sum; returns the numbers each GPU sent and the
    phases."""
    rng = np.random.default_rng(seed)
    data = [rng.standard_normal(n) for _ in range(p)]
    want = np.sum(data, axis=0)
    chunks = [np.array_split(v.copy(), p) for v in data]
    sent = [0] * p
    phases = 0
    if p > 1:
        phases = 2
        for k in range(p - 1):  # reduce-scatter: GPU g sends chunk (g - k) to g + 1
            msgs = [(g, (g - k) % p, chunks[g][(g - k) % p].copy()) for g in range(p)]
            for g, c, payload in msgs:
                chunks[(g + 1) % p][c] += payload
                sent[g] += payload.size
        for k in range(p - 1):  # all-gather: GPU g sends its finished chunk (g + 1 - k)
            msgs = [(g, (g + 1 - k) % p, chunks[g][(g + 1 - k) % p].copy()) for g in range(p)]
            for g, c, payload in msgs:
                chunks[(g + 1) % p][c] = payload
                sent[g] += payload.size
    for g in range(p):
        if not np.allclose(np.concatenate(chunks[g]), want):
            raise PremiseError(f"ring all-reduce simulation: GPU {g} does not hold the sum")
    if len(set(sent)) != 1:
        raise PremiseError(f"ring all-reduce simulation: unequal traffic {sent}")
    return sent[0], phases


def two_level_allreduce(p0: int, p1: int, n: int) -> tuple[int, int]:
    """A hierarchical all-reduce among ``p0`` GPUs in each of ``p1`` nodes, simulated: a ring
    reduce-scatter in each node, a ring all-reduce of each GPU's shard among the GPUs holding
    the same shard in the other nodes, a ring all-gather in each node.  Returns the numbers one
    GPU sends inside its node and between nodes."""
    in_node, _ = ring_allreduce(p0, n)  # reduce-scatter and all-gather together
    between, _ = ring_allreduce(p1, n // p0)
    return in_node, between


def pipelined_makespan(t0: float, t1: float, chunks: int) -> float:
    """Stream a vector in ``chunks`` pieces through a reduce-scatter on the in-node links, the
    transfer between nodes and an all-gather on the in-node links again, each piece as soon as
    its link is free and its previous stage done: the two-level all-reduce's bandwidth time."""
    free0 = free1 = 0.0
    pending: list[float] = []  # when each piece's transfer between nodes ends
    a, b = t0 / 2 / chunks, t1 / chunks
    for _ in range(chunks):
        free0 += a
        free1 = max(free1, free0) + b
        pending.append(free1)
    for ready in pending:
        free0 = max(free0, ready) + a
    return free0


def bisect_root(f: Callable[[float], float], lo: float, hi: float) -> float:
    """The root of an increasing ``f`` between ``lo`` and ``hi``, in log space."""
    if not f(lo) < 0 < f(hi):
        raise PremiseError(f"no sign change between {lo:g} and {hi:g}")
    for _ in range(200):
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if f(mid) < 0 else (lo, mid)
    return math.sqrt(lo * hi)
