"""One oracle per derivation of the library: each compares the derivation's result, at several
points, with a simulation, a hand count or a published value that never reads it."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from functools import cache
from unittest import mock

import sympy as sp

from dmlimits import search
from dmlimits.core import published
from dmlimits.core.derivation import Derivation
from dmlimits.core.scenario import resolve
from dmlimits.costs import closed_forms, model, step
from dmlimits.costs import pipeline as ppm
from dmlimits.premises.base import PremiseError, at_values, compare_cases, oracle
from dmlimits.premises.simulations import (
    bisect_root,
    pipelined_makespan,
    ring_allreduce,
    two_level_allreduce,
)

# --- Collectives -------------------------------------------------------------------------------
_RINGS = ((2, 4), (3, 6), (4, 8), (5, 20), (8, 16))


@oracle(
    "collectives-ring-allreduce",
    "simulation",
    "a ring all-reduce simulated chunk by chunk: the numbers each GPU sends, over the "
    "one-way bandwidth",
)
def _ring(d: Derivation) -> str:
    expr = d.result
    cases = []
    for p, n in _RINGS:
        sent, _ = ring_allreduce(p, n)
        cases.append(({"p_coll": p, "n_w": n, "w_word": 2, "W_net": 8}, sent * 2 / (8 / 2)))
    return compare_cases(expr, "t_bw", cases)


def _cluster_cases(tiled: bool) -> list[tuple[dict[str, float], float]]:
    cases = []
    for (p, n), r_par, r_seq, extra in itertools.product(_RINGS, (1, 3), (1, 2), (1, 2)):
        if tiled and extra != 1:
            continue
        sent, phases = ring_allreduce(p, n)
        n_gpu = r_par * p * extra  # the all-reduces cover 1/extra of the cluster
        bytes_total = r_par * p * sent * 2
        t = r_seq * (phases * 1e-6 + bytes_total / n_gpu / (10 / 2))
        v = {"p_coll": p, "n_w": n, "w_word": 2, "W_net": 10, "lambda_net": 1e-6,
             "r_par": r_par, "r_seq": r_seq}  # fmt: skip
        if not tiled:
            v["N_GPU"] = n_gpu
        cases.append((v, t))
    return cases


@oracle(
    "collectives-allreduce-cluster",
    "simulation",
    "repeated ring all-reduces simulated: every participant's traffic spread over the "
    "cluster's links, one latency per phase",
)
def _cluster(d: Derivation) -> str:
    expr = d.result
    return compare_cases(expr, "t_AR", _cluster_cases(tiled=False))


@oracle(
    "collectives-allreduce-tiled",
    "simulation",
    "side-by-side ring all-reduces simulated, each GPU in exactly one",
)
def _tiled(d: Derivation) -> str:
    expr = d.result
    return compare_cases(expr, "t_AR", _cluster_cases(tiled=True))


@oracle(
    "collectives-p2p",
    "hand count",
    "transfers counted one by one: each sends its words once over a one-way link and "
    "waits one latency",
)
def _p2p(d: Derivation) -> str:
    expr = d.result
    cases = []
    for n, r_seq in itertools.product((1, 1000, 4096), (1, 3)):
        t = sum(1e-6 + n * 2 / (10 / 2) for _ in range(r_seq))
        cases.append(({"n_w": n, "w_word": 2, "W_net": 10, "lambda_net": 1e-6, "r_seq": r_seq}, t))
    return compare_cases(expr, "t_P2P", cases)


@oracle(
    "collectives-two-level-traffic",
    "simulation",
    "a hierarchical all-reduce simulated (ring reduce-scatter in the node, ring "
    "all-reduce of the shards between nodes, ring all-gather): the numbers one GPU sends",
)
def _two_level_traffic(d: Derivation) -> str:
    expr = d.result
    cases = []
    for p0, p1 in ((2, 2), (2, 3), (4, 2), (3, 5), (8, 4)):
        n = p0 * p1 * 6
        in_node, between = two_level_allreduce(p0, p1, n)
        cases.append(({"p_coll": p0 * p1, "n_w": n, "w_word": 2}, (in_node + between) * 2))
    return compare_cases(expr, "Q_AR", cases)


@oracle(
    "collectives-allreduce-two-level",
    "simulation",
    "a hierarchical all-reduce simulated for its traffic and streamed in many pieces "
    "through the two kinds of link for its time",
)
def _two_level_time(d: Derivation) -> str:
    expr = d.result
    cases = []
    pieces = 4000
    for p0, p1 in ((2, 2), (4, 2), (8, 4), (4, 16)):
        n = p0 * p1 * 4
        in_node, between = two_level_allreduce(p0, p1, n)
        for w0, w1 in ((300.0, 50.0), (1.0, 50.0)):
            t0, t1 = in_node * 2 / (w0 / 2), between * 2 / (w1 / 2)
            t = 2 * (1e-6 + 5e-6) + pipelined_makespan(t0, t1, pieces)
            v = {"p_coll0": p0, "p_coll1": p1, "n_w": n, "w_word": 2, "W_net0": w0,
                 "W_net1": w1, "lambda_net0": 1e-6, "lambda_net1": 5e-6, "r_seq": 1}  # fmt: skip
            cases.append((v, t))
    return compare_cases(expr, "t_AR", cases, rtol=2e-3)  # the streaming's fill and drain


@oracle(
    "collectives-crossover",
    "simulation",
    "the vector size at which the simulated ring's bandwidth time equals its two "
    "latencies, found by bisection",
)
def _crossover(d: Derivation) -> str:
    expr = d.result
    cases = []
    for p, n in _RINGS:
        sent, phases = ring_allreduce(p, n)
        per_byte = sent / n / (10 / 2)  # seconds per byte of the vector
        q = bisect_root(lambda q, k=per_byte, ph=phases: q * k - ph * 1e-6, 1e-12, 1e12)
        cases.append(({"p_coll": p, "W_net": 10, "lambda_net": 1e-6}, q))
    return compare_cases(expr, "Q_cross", cases, rtol=1e-9)


@oracle(
    "allreduce-busbw",
    "published value",
    "nccl-tests' definition of bus bandwidth (the algorithm bandwidth times $2(n - 1)/n$,"
    " nccl-tests' PERFORMANCE.md) and the message size at half the peak found by "
    "bisection",
)
def _busbw(d: Derivation) -> str:
    expr = d.result
    cases = []
    alpha, peak = 20e-6, 4e10
    for ranks, nodes in ((16, 2), (64, 8), (512, 64)):

        def busbw(m: float, r: int = ranks, k: int = nodes) -> float:
            t = alpha * math.log2(k) + m * 2 * (r - 1) / r / peak
            return m / t * 2 * (r - 1) / r

        m_half = bisect_root(lambda m, f=busbw: f(m) - peak / 2, 1.0, 1e15)
        values = {"p_ranks": ranks, "n_nodes": nodes, "alpha_AR": alpha, "B_bus": peak}
        cases.append((values, m_half))
    return compare_cases(expr, "M_half", cases, rtol=1e-9)


# --- Matmul ------------------------------------------------------------------------------------
@oracle(
    "matmul-min-nanobatch",
    "hand count",
    "the weight-gradient matmul's multiply-accumulates and its gradient loads and stores "
    "counted, the smallest nanobatch whose arithmetic outlasts HBM found by bisection",
)
def _min_nanobatch(d: Derivation) -> str:
    expr = d.result
    cases = []
    d1 = d2 = 64
    for flops, eta, hbm, w in ((1e15, 0.7, 3e12, 2), (3e14, 0.8, 2e12, 4)):

        def excess(b: float, f=flops, e=eta, h=hbm, word=w) -> float:
            arith = 2 * b * d1 * d2 / (f * e)  # two FLOP per multiply-accumulate
            memory = (d1 * d2 + d1 * d2) * word / h  # load and store every gradient word
            return arith - memory

        b = bisect_root(excess, 1e-6, 1e9)
        cases.append(({"F": flops, "eta": eta, "W_HBM": hbm, "w_word": w, "c_MAC": 2}, b))
    return compare_cases(expr, "b", cases)


@oracle(
    "matmul-multicast",
    "hand count",
    "an $r \\times c$ grid of SMs enumerated: every transfer of a value between SMs "
    "counted at each end, a multicast once per receiving SM plus its one send",
)
def _multicast(d: Derivation) -> str:
    expr = d.result
    cases = []
    for r, c, b, d1, d2 in ((2, 1, 4, 8, 8), (2, 3, 4, 6, 9), (4, 2, 2, 8, 4), (3, 3, 1, 3, 6)):
        count = 0
        # The d_1 side's partial outputs: each of c tiles in a row holds a partial sum; the
        # c - 1 that do not own it send it (one send, one receive each).
        for _tile_row in range(r):
            for _j in range(c - 1):
                count += 2 * b * (d1 // r)
        # The d_2-side inputs: every SM of a row of r tiles needs them; one multicast send
        # reaches the other r - 1, each of which receives it.
        for _tile_col in range(c):
            count += (1 + (r - 1)) * b * (d2 // c)
        cases.append(({"b": b, "d_1": d1, "d_2": d2, "w_word": 2, "c_tile": c, "r_tile": r},
                      count * 2))  # fmt: skip
    return compare_cases(expr, "Q_mc", cases)


@oracle(
    "matmul-hbm-time",
    "hand count",
    "a forward matmul tiled over L2 enumerated tile by tile: the weights loaded once, the"
    " input slice each tile needs, the output written once and read back for every "
    "further tile that accumulates into it; square tiles whose words fill the usable L2",
)
def _hbm_time(d: Derivation) -> str:
    expr = d.result
    cases = []
    for side, b, d1, d2 in ((2, 4, 8, 4), (3, 2, 6, 9), (4, 8, 16, 8), (8, 1, 8, 64)):
        r, c, words = d1 // side, d2 // side, 0
        for _i in range(r):
            for j in range(c):
                words += (d1 // r) * (d2 // c)  # the weight tile
                words += b * (d2 // c)  # the input slice the tile multiplies
                words += b * (d1 // r) * (1 if j == 0 else 2)  # write, or read and write
        v = {"b": b, "d_1": d1, "d_2": d2, "w_word": 2, "W_HBM": 3.0, "phi_use": 0.5,
             "M_L2": side**2 * 2 / 0.5}  # a tile of side x side two-byte words  # fmt: skip
        cases.append((v, words * 2 / 3.0))
    return compare_cases(expr, "t_HBM", cases)


@oracle(
    "matmul-arithmetic-bound",
    "hand count",
    "a matmul's useful FLOP over the peak rate's FLOP in its time, the dimensions padded "
    "up to the tensor-core multiple by counting",
)
def _arith(d: Derivation) -> str:
    expr = d.result
    cases = []
    for b, d1, d2 in ((64, 128, 256), (128, 4096, 1024), (16, 16, 16)):
        flops, eta, kern = 1e15, 0.7, 4.5e-6
        padded = b * d1 * d2  # multiples of the padding already
        t = kern + 2 * padded / (flops * eta)
        values = {"b": b, "d_1": d1, "d_2": d2, "F": flops, "eta": eta, "t_kern": kern,
                  "c_MAC": 2}  # fmt: skip
        cases.append((values, 2 * b * d1 * d2 / (flops * t)))
    return compare_cases(expr, "u_mm", cases)


# --- The model of training runs (the authors' final code's outputs) ----------------------------
@cache
def _reference_models() -> tuple[dict[str, float], ...]:
    out = []
    for r in published.data_rows("paper1_reference_sweeps.csv"):
        out.append({k: float(r[k]) for k in ("d_model", "training_flop_16bit", "n_params_total",
                                              "layers", "sparsity")})  # fmt: skip
    return tuple(out[::7])  # every seventh model: all settings, a few hundred checks


def _laws() -> dict[str, float]:
    v = resolve("h100").values
    return {"k_D": v["training.tokens_per_param"], "a_L": v["depth.coefficient"],
            "e_L": v["depth.exponent"], "r_ff": v["model.ff_ratio"]}  # fmt: skip


@oracle(
    "model-compute",
    "published value",
    "the parameters and training compute of every seventh model the authors' final code "
    "sweeps, all sixteen settings (`data/paper1_reference_sweeps.csv`)",
)
def _model_compute(d: Derivation) -> str:
    k = _laws()["k_D"]
    cases = [({"N": r["n_params_total"], "S": r["sparsity"], "k_D": k}, r["training_flop_16bit"])
             for r in _reference_models()]  # fmt: skip
    return compare_cases(d.result, "C", cases, rtol=1e-6)  # seven significant digits in the file


@oracle(
    "model-compute-width",
    "published value",
    "the training compute of the authors' swept models from their width, depth and "
    "experts (the depth law before the authors round the depth: within the rounding)",
)
def _model_compute_width(d: Derivation) -> str:
    laws = _laws()
    exact = [({"L": r["layers"], "S": r["sparsity"], "d_ff": laws["r_ff"] * r["d_model"],
               "d_model": r["d_model"], "k_D": laws["k_D"]}, r["training_flop_16bit"])
             for r in _reference_models()]  # fmt: skip
    compare_cases(d.steps[1].expr, "C", exact, rtol=1e-6)  # the parameter count, exactly
    law = [({**laws, "S": r["sparsity"], "d_model": r["d_model"]}, r["training_flop_16bit"])
           for r in _reference_models()]  # fmt: skip
    return compare_cases(d.result, "C", law, rtol=0.2) + " (and the parameter count exactly)"


def _width_cases(sparse: bool) -> list[tuple[dict[str, float], float]]:
    v = resolve("h100-sparse").values
    laws = _laws()
    extra = {"S_ref": v["sparsity.reference_experts"], "d_ref": v["sparsity.reference_d_model"]}
    return [({**laws, **extra, "C": r["training_flop_16bit"]}, r["d_model"])
            for r in _reference_models() if (r["sparsity"] > 1) == sparse]  # fmt: skip


@oracle(
    "model-width-dense",
    "published value",
    "the width of the authors' swept dense models against their training compute (within "
    "the rounding of depth)",
)
def _width_dense(d: Derivation) -> str:
    return compare_cases(d.result, "d_model", _width_cases(sparse=False), rtol=0.06)


@oracle(
    "model-width-sparse",
    "published value",
    "the width of the authors' swept sparse models against their training compute (within"
    " the rounding of depth and experts)",
)
def _width_sparse(d: Derivation) -> str:
    return compare_cases(d.result, "d_model", _width_cases(sparse=True), rtol=0.08)


@oracle(
    "model-depth-dense",
    "published value",
    "the depth of the authors' swept dense models against their training compute (within "
    "their rounding to $f \\cdot 2^i$)",
)
def _depth_dense(d: Derivation) -> str:
    laws = _laws()
    cases = [({**laws, "C": r["training_flop_16bit"]}, r["layers"])
             for r in _reference_models() if r["sparsity"] == 1]  # fmt: skip
    return compare_cases(d.result, "L", cases, rtol=0.2)


# --- Closed forms ------------------------------------------------------------------------------
def _h100_symbols() -> dict[str, float]:
    scn = resolve("h100")
    out = {str(k): float(v) for k, v in closed_forms.symbol_values(scn).items()}
    nums = closed_forms.values(scn)
    out.update(n_HBM=nums["nanobatch_tokens"], a_IB=nums["shard_side"])
    return out


def _published_close(got: float, key: str) -> str:
    entry = published.get(key)
    if float(f"{got:.{entry.digits - 1}e}") != entry.value:
        raise PremiseError(f"{key}: the derivation gives {got:.6g}, published {entry.value:g}")
    return f"{entry.value:g} to its {entry.digits} published digits"


@oracle(
    "closed-forms-critical",
    "published value",
    "the critical compute the authors' notebook prints for the H100 at $\\alpha = 0$",
)
def _critical(d: Derivation) -> str:
    return _published_close(at_values(d.result, _h100_symbols(), "C"), "paper1.t_crit_flop")


@oracle(
    "closed-forms-latency-wall",
    "published value",
    "the latency wall the authors' notebook prints for the H100 at $\\alpha = 0$",
)
def _wall(d: Derivation) -> str:
    return _published_close(at_values(d.result, _h100_symbols(), "C"), "paper1.t_limit_flop")


@oracle(
    "closed-forms-nanobatch",
    "hand count",
    "a weight-gradient matmul's multiply-accumulates and its loads and stores of each "
    "gradient word counted at the peak rate: the nanobatch whose arithmetic outlasts its "
    "memory traffic, found by bisection",
)
def _cf_nanobatch(d: Derivation) -> str:
    cases = []
    for flops, hbm, w in ((1e15, 3e12, 2), (3e14, 2e12, 4)):
        b = bisect_root(lambda b, f=flops, h=hbm, word=w: 2 * b / f - 2 * word / h, 1e-6, 1e9)
        cases.append(({"F": flops, "W_HBM": hbm, "w_word": w, "q_HBMw": 2, "c_MAC": 2}, b))
    return compare_cases(d.result, "n_HBM", cases)


@oracle(
    "closed-forms-shard",
    "hand count",
    "a node's $a \\times a$ shards counted: multiply-accumulates of two matrices in three "
    "passes against the words the forward and activation-gradient passes bring in and "
    "send out, the side where they take equally long found by bisection",
)
def _cf_shard(d: Derivation) -> str:
    cases = []
    for flops, w1, w, g, n in ((1e15, 1e11, 2, 8, 512), (3e14, 5e10, 4, 4, 64)):

        def excess(a: float, f=flops, bw=w1, word=w, gpus=g, tok=n) -> float:
            macs = sum(a * a * tok for _matrix in range(2) for _pass in range(3))
            words = sum(2 * tok * a for _matrix in range(2) for _pass in ("F", "B"))
            return 2 * macs / (f * gpus) - words * word / (gpus * bw / 2)

        a = bisect_root(excess, 1.0, 1e9)
        cases.append(({"F": flops, "W_net1": w1, "w_word": w, "c_MAC": 2, "m_pass": 3}, a))
    return compare_cases(d.result, "a_IB", cases)


def _largest_model(t_step_of: Callable[[float], float], batch: float, t: float) -> float:
    """The model size whose steps (k_D N / B of them, at least ``t_step_of(N)`` each) just fill
    the training time ``t``: bisection."""
    return bisect_root(lambda n: 20 * n / batch * t_step_of(n) - t, 1e3, 1e20)


@oracle(
    "closed-forms-critical-size",
    "hand count",
    "the largest model whose steps fit the training time, each step 2L microbatches "
    "through one node's layer shard counted pass by pass, found by bisection",
)
def _cf_crit_size(d: Derivation) -> str:
    cases = []
    for layers, batch, a, n in ((100, 4e6, 2e4, 600), (40, 1e6, 5e3, 100)):
        flops, g, t = 1e15, 8, 7.9e6
        macs = sum(a * a * n for _matrix in range(2) for _pass in range(3))
        t_min = 2 * layers * 2 * macs / (flops * g)
        v = {"B": batch, "F": flops, "G_node": g, "T": t, "L": layers, "a_IB": a,
             "c_MAC": 2, "k_D": 20, "m_pass": 3, "n_HBM": n}  # fmt: skip
        cases.append((v, _largest_model(lambda _n, s=t_min: s, batch, t)))
    return compare_cases(d.result, "N", cases, rtol=1e-9)


@oracle(
    "closed-forms-latency-size",
    "hand count",
    "the largest model whose steps fit the training time, each step waiting one latency "
    "per weight matrix at every layer forward and backward, counted",
)
def _cf_lat_size(d: Derivation) -> str:
    cases = []
    for layers, batch, lat in ((100, 4e6, 9e-6), (40, 1e6, 2e-5)):
        t = 7.9e6
        t_min = sum(lat for _pass in range(2) for _layer in range(layers) for _m in range(2))
        v = {"B": batch, "T": t, "L": layers, "k_D": 20, "t_lambda": lat}
        cases.append((v, _largest_model(lambda _n, s=t_min: s, batch, t)))
    return compare_cases(d.result, "N", cases, rtol=1e-9)


# --- Pipeline (the schedule simulation of the pipeline chapter) --------------------------------
@oracle(
    "pipeline-bubble-1f1b",
    "simulation",
    "1F1B laid out pass by pass (pipeline.schedule): the idle share of the flush",
)
def _bubble_1f1b(d: Derivation) -> str:
    cases = [({"N_PP": n, "m_micro": m}, float(ppm.schedule(n, m).bubble))
             for n, m in ((2, 1), (2, 4), (4, 4), (4, 16), (8, 3))]  # fmt: skip
    return compare_cases(d.result, "f_bubble", cases)


@oracle(
    "pipeline-bubble-interleaved",
    "simulation",
    "interleaved 1F1B laid out pass by pass in breadth-first order (pipeline.schedule): "
    "the idle share of the flush with its waits, and with one chunk per GPU",
)
def _bubble_interleaved(d: Derivation) -> str:
    waits = [({"N_PP": n, "m_micro": m, "v_PP": v},
              float(ppm.schedule(n, m, v, "breadth-first", backward=1).bubble))
             for n, m, v in ((2, 4, 2), (4, 2, 2), (4, 8, 3), (3, 1, 2))]  # fmt: skip
    compare_cases(d.steps[4].expr, "f_bubble", waits)
    plain = [({"N_PP": n, "m_micro": m}, float(ppm.schedule(n, m).bubble))
             for n, m in ((2, 4), (4, 8))]  # fmt: skip
    return compare_cases(d.result, "f_bubble", plain) + " (and 4 with interleaving)"


@oracle(
    "pipeline-microbatches",
    "simulation",
    "the bubble of a simulated flush (pipeline.schedule, breadth-first): the microbatches"
    " that give it",
)
def _microbatches(d: Derivation) -> str:
    cases = [({"N_PP": n, "f_bubble_max": float(ppm.schedule(n, m).bubble)}, m)
             for n, m in ((2, 4), (4, 4), (4, 12), (8, 16))]  # fmt: skip
    return compare_cases(d.result, "m_micro", cases)


@oracle(
    "pipeline-flush-time",
    "simulation",
    "a simulated flush (pipeline.schedule): its length against one GPU's busy time and the bubble",
)
def _flush(d: Derivation) -> str:
    cases = []
    for n, m in ((2, 4), (4, 4), (8, 3)):
        sched = ppm.schedule(n, m)
        cases.append(({"t_busy": sched.busy(0), "f_bubble": float(sched.bubble)}, sched.makespan))
    return compare_cases(d.result, "t_flush", cases)


# --- Data parallelism --------------------------------------------------------------------------
@oracle(
    "data-parallel-allreduce",
    "simulation",
    "the gradient all-reduce simulated as a hierarchical ring all-reduce of each GPU's $N"
    " / N_{\\mathrm{MP}}$ gradients and streamed through the two kinds of link; two "
    "latencies per level",
)
def _dp_allreduce(d: Derivation) -> str:
    cases = []
    for p0, p1, mp in ((2, 2, 1), (4, 2, 2), (8, 4, 3), (2, 8, 4)):
        n = p0 * p1 * 4 * mp
        in_node, between = two_level_allreduce(p0, p1, n // mp)
        w0, w1, lam0, lam1 = 300.0, 50.0, 1e-6, 5e-6
        t0, t1 = in_node * 2 / (w0 / 2), between * 2 / (w1 / 2)
        v = {"N": n, "N_MP": mp, "N_DP0": p0, "N_DP1": p1, "w_word": 2, "W_net0": w0,
             "W_net1": w1, "lambda_net0": lam0, "lambda_net1": lam1}  # fmt: skip
        cases.append((v, 2 * (lam0 + lam1) + pipelined_makespan(t0, t1, 4000)))
    return compare_cases(d.result, "t_DP", cases, rtol=2e-3)


@oracle(
    "data-parallel-memory",
    "hand count",
    "replicas added one at a time while a copy of the parameters per replica and one "
    "optimizer state of four words per parameter fit the cluster's HBM",
)
def _dp_memory(d: Derivation) -> str:
    cases = []
    for n, w, gpus, extra in ((1000, 2, 16, 3), (5000, 4, 64, 10)):
        hbm = n * w * (extra + 4) / gpus  # room for exactly ``extra`` replicas
        replicas = 0
        while n * w * (replicas + 1) + 4 * n * w <= hbm * gpus * (1 + 1e-12):
            replicas += 1
        cases.append(({"N": n, "w_word": w, "N_GPU": gpus, "M_HBM": hbm}, replicas))
    return compare_cases(d.result, "N_DP", cases)


@oracle(
    "data-parallel-compute-ratio",
    "simulation",
    "a ring all-reduce of each GPU's gradients among replicas in their own nodes, "
    "simulated, over the step's arithmetic counted at six FLOP per active parameter and "
    "token: the replicas that give a ratio",
)
def _dp_ratio(d: Derivation) -> str:
    cases = []
    for replicas, mp, batch, experts in ((2, 1, 1000, 1), (5, 2, 4096, 4), (16, 8, 2e5, 1)):
        n_params = 64 * replicas * mp
        sent, _ = ring_allreduce(replicas, n_params // mp)
        flops, eta, w, w1 = 1e15, 0.7, 2, 1e11
        t_bw = sent * w / (w1 / 2)
        t_comp = batch * (n_params / experts) * 6 / (flops * replicas * mp * eta)
        v = {"B": batch, "W_net1": w1, "c_MAC": 2, "rho_DP": t_bw / t_comp, "F": flops,
             "S": experts, "eta": eta, "w_word": w}  # fmt: skip
        cases.append((v, replicas))
    return compare_cases(d.result, "N_DP", cases)


# --- Tensor parallelism ------------------------------------------------------------------------
@oracle(
    "tensor-parallel-traffic",
    "simulation",
    "Megatron's all-reduce of each token's $d_{\\mathrm{model}}$ outputs among the "
    "tensor-parallel group, simulated on a ring, forward and backward",
)
def _tp_traffic(d: Derivation) -> str:
    cases = []
    for nf, b, dm in ((2, 3, 8), (4, 2, 16), (8, 1, 64)):
        sent, _ = ring_allreduce(nf, b * dm)
        cases.append(({"N_TPf": nf, "b": b, "d_model": dm, "w_word": 2}, 2 * sent * 2))
    return compare_cases(d.result, "Q_TP", cases)


@oracle(
    "tensor-parallel-bandwidth",
    "simulation",
    "the two families of all-reduces simulated on rings (each GPU's $d_{\\mathrm{ff}} / "
    "N_{\\mathrm{TP,ff}}$ hidden units among the model group, its $d_{\\mathrm{model}} / "
    "N_{\\mathrm{TP,model}}$ outputs among the ff group), forward and backward, over the "
    "one-way bandwidth",
)
def _tp_bandwidth(d: Derivation) -> str:
    cases = []
    for nm, nf, b, dm in ((2, 2, 2, 8), (4, 2, 3, 16), (2, 8, 1, 32)):
        dff = 4 * dm
        sent_m, _ = ring_allreduce(nm, b * dff // nf)
        sent_f, _ = ring_allreduce(nf, b * dm // nm)
        v = {"N_TPm": nm, "N_TPf": nf, "b": b, "d_model": dm, "d_ff": dff, "w_word": 2,
             "W_net": 10}  # fmt: skip
        cases.append((v, 2 * (sent_m + sent_f) * 2 / (10 / 2)))
    return compare_cases(d.result, "t_TPbw", cases)


@oracle(
    "tensor-parallel-latency",
    "simulation",
    "the phases of the simulated ring all-reduces: two families, each once per pass, "
    "forward and backward, waited for one after another",
)
def _tp_latency(d: Derivation) -> str:
    _, phases = ring_allreduce(4, 8)
    t = sum(phases * 1e-6 for _pass in range(2) for _family in range(2))
    return compare_cases(d.result, "t_TPlat", [({"lambda_net": 1e-6}, t)])


@oracle(
    "tensor-parallel-compute",
    "hand count",
    "the multiply-accumulates of a layer's forward, activation-gradient and "
    "weight-gradient matmuls on both weight shards, counted",
)
def _tp_compute(d: Derivation) -> str:
    cases = []
    for nm, nf, b, dm in ((2, 2, 8, 64), (4, 8, 16, 256), (1, 4, 4, 32)):
        dff, flops, eta = 4 * dm, 1e15, 0.7
        shard = (dm // nm) * (dff // nf)
        macs = sum(b * shard for _matrix in range(2) for _kind in ("F", "B", "W"))
        v = {"N_TPm": nm, "N_TPf": nf, "b": b, "d_model": dm, "d_ff": dff, "F": flops,
             "eta": eta, "c_MAC": 2}  # fmt: skip
        cases.append((v, 2 * macs / (flops * eta)))
    return compare_cases(d.result, "t_comp", cases)


def _tp_balance(d: Derivation, lhs: str, model_group: bool) -> str:
    cases = []
    for flops, eta, w, bw in ((1e15, 0.7, 2, 9e11), (3e14, 0.8, 4, 1e11)):

        def excess(side: float, f=flops, e=eta, word=w, link=bw) -> float:
            other = side if model_group else 1.0  # 1D: the shard's other side is d_model
            b = 1.0
            macs = sum(b * side * other for _matrix in range(2) for _kind in range(3))
            # In the limit of large groups a ring all-reduce sends the whole vector twice.
            words = sum(2 * b * x for _pass in range(2) for x in ((side, other) if model_group
                                                                  else (other,)))  # fmt: skip
            return 2 * macs / (f * e) - words * word / (link / 2)

        side = bisect_root(excess, 1e-3, 1e12)
        cases.append(({"F": flops, "eta": eta, "w_word": w, "W_net": bw, "c_MAC": 2}, side))
    return compare_cases(d.result, lhs, cases)


@oracle(
    "tensor-parallel-crossover",
    "hand count",
    "the square shard side at which a layer's counted multiply-accumulates take as long "
    "as its two families' all-reduces in large groups (each sending its vector twice), "
    "found by bisection",
)
def _tp_crossover(d: Derivation) -> str:
    return _tp_balance(d, "s_sh", model_group=True)


@oracle(
    "tensor-parallel-crossover-1d",
    "hand count",
    "the shard's $d_{\\mathrm{ff}}$ side at which a layer's counted multiply-accumulates "
    "take as long as the ff group's all-reduce in a large group, found by bisection",
)
def _tp_crossover_1d(d: Derivation) -> str:
    return _tp_balance(d, "c_sh", model_group=False)


# --- Real runs: FLOP, traffic, MFU and memory --------------------------------------------------
@oracle(
    "transformer-flop",
    "hand count",
    "a Llama block's weight matrices listed one by one (query, key, value, output, the "
    "MLP's), six FLOP per weight and token, attention's two $s \\times d$ products per "
    "token in three passes, and the output layer",
)
def _transformer(d: Derivation) -> str:
    cases = []
    for layers, dm, heads, kv, dff, gates, seq, vocab in (
        (2, 64, 8, 2, 256, 3, 128, 1000),
        (3, 32, 4, 4, 128, 2, 16, 50),
    ):
        kv_width = dm * kv // heads
        matrices = [(dm, dm), (dm, kv_width), (dm, kv_width), (dm, dm)] + [(dm, dff)] * gates
        per_layer = sum(6 * a * b for a, b in matrices) + 3 * 2 * (2 * seq * dm)
        total = layers * per_layer + 6 * vocab * dm
        v = {"L": layers, "d_model": dm, "n_h": heads, "n_kv": kv, "d_ff": dff, "g_mlp": gates,
             "s_seq": seq, "V_voc": vocab}  # fmt: skip
        cases.append((v, total))
    return compare_cases(d.result, "F_tok", cases)


@oracle(
    "transformer-flop-latent",
    "hand count",
    "a latent-attention block's weight matrices listed one by one (the queries' down and up, "
    "the keys' and values' down with the rotary key, their up, the output, the MLP's), six "
    "FLOP per weight and token, attention's per-head products in three passes, and the output "
    "layer",
)
def _transformer_latent(d: Derivation) -> str:
    cases = []
    for layers, dm, heads, rq, rkv, hd, rope, dff, gates, seq, vocab in (
        (2, 64, 8, 24, 16, 8, 4, 256, 3, 128, 1000),
        (3, 32, 4, 12, 8, 16, 0, 128, 2, 16, 50),
    ):
        matrices = [(dm, rq), (rq, heads * (hd + rope)), (dm, rkv + rope),
                    (rkv, heads * hd), (rkv, heads * hd), (heads * hd, dm)]  # fmt: skip
        matrices += [(dm, dff)] * gates
        scores = seq * heads * (hd + rope)  # one query against every key, per head
        mixing = seq * heads * hd  # the scores against every value, per head
        per_layer = sum(6 * a * b for a, b in matrices) + 3 * 2 * (scores + mixing)
        total = layers * per_layer + 6 * vocab * dm
        v = {"L": layers, "d_model": dm, "n_h": heads, "r_q": rq, "r_kv": rkv, "d_hd": hd,
             "d_rope": rope, "d_ff": dff, "g_mlp": gates, "s_seq": seq, "V_voc": vocab}  # fmt: skip
        cases.append((v, total))
    return compare_cases(d.result, "F_tok", cases)


@oracle(
    "sharded-dp-traffic",
    "simulation",
    "ZeRO-3's two all-gathers of the parameters and one reduce-scatter of the gradients, "
    "each half of a simulated ring all-reduce of the rank's shard",
)
def _sharded_dp(d: Derivation) -> str:
    cases = []
    for g, tp, pp in ((2, 1, 1), (4, 2, 2), (8, 4, 1)):
        n = 16 * g * tp * pp
        sent, phases = ring_allreduce(g, n // (tp * pp))
        per_phase = sent / phases
        v = {"N": n, "w_word": 2, "g_DP": g, "N_TP": tp, "N_PP": pp}
        cases.append((v, 3 * per_phase * 2))
    return compare_cases(d.result, "V_DP", cases)


@oracle(
    "tp-traffic",
    "simulation",
    "Megatron-LM's all-reduces of each block's activations simulated on a ring: two per "
    "block forward, two backward, two more for a recomputed forward",
)
def _tp_run(d: Derivation) -> str:
    cases = []
    for tp, pp, dp, cp, recompute in ((2, 1, 1, 1, 0), (4, 2, 2, 1, 1), (8, 4, 1, 2, 0)):
        layers, dm, batch = 8 * pp, 16, 64 * dp * cp
        tokens = batch // (dp * cp)
        sent, _ = ring_allreduce(tp, tokens * dm)
        per_block = 2 + 2 + 2 * recompute
        v = {"B": batch, "L": layers, "d_model": dm, "w_word": 2, "N_TP": tp, "N_PP": pp,
             "N_DP": dp, "N_CP": cp, "rho_b": recompute}  # fmt: skip
        cases.append((v, layers // pp * per_block * sent * 2))
    return compare_cases(d.result, "V_TP", cases)


@oracle(
    "cp-traffic",
    "hand count",
    "ring attention counted step by step: the keys and values of a rank's own heads passed on "
    "at each of the $N_{\\mathrm{CP}} - 1$ steps forward, and keys, values and their "
    "gradients backward",
)
def _cp_run(d: Derivation) -> str:
    cases = []
    for cp, pp, dp, heads, kv, tp in ((2, 1, 1, 8, 2, 1), (4, 2, 2, 4, 4, 2), (8, 1, 2, 16, 1, 1),
                                      (2, 1, 1, 16, 8, 4), (4, 1, 1, 16, 2, 8)):  # fmt: skip
        layers, dm, batch = 4 * pp, 32, 16 * cp * dp
        tokens = batch // (cp * dp)
        # The key and value heads dealt out round-robin over the tensor-parallel ranks: rank 0
        # holds heads 0, tp, 2 tp, ... (at least head 0): kv / tp heads where tp divides kv,
        # and one where kv < tp (a head repeated on several ranks); no other layout is counted.
        assert kv % tp == 0 or kv < tp
        own = [h for h in range(kv) if h % tp == 0]
        kv_words = tokens * 2 * (dm // heads) * len(own)
        words = 0
        for _layer in range(layers // pp):
            for _step in range(cp - 1):
                words += kv_words  # forward: keys and values
                words += 2 * kv_words  # backward: keys and values, and their gradients
        v = {"B": batch, "L": layers, "d_model": dm, "w_word": 2, "N_CP": cp, "N_PP": pp,
             "N_DP": dp, "n_h": heads, "n_kv": kv, "N_TP": tp}  # fmt: skip
        cases.append((v, words * 2))
    return compare_cases(d.result, "V_CP", cases)


@oracle(
    "run-mfu",
    "simulation",
    "a step whose pipeline is laid out pass by pass (pipeline.schedule, breadth-first): "
    "model FLOP over the peak's FLOP in the longer of the stretched compute, at the effective "
    "utilization, and the overlapped communication",
)
def _mfu(d: Derivation) -> str:
    cases = []
    for n, m, v_pp, t_ovl in ((1, 1, 1, 0.0), (4, 8, 1, 0.0), (4, 8, 2, 0.0), (8, 8, 1, 50.0)):
        batch, f_tok, f_model, peak, gpus = 1e6, 6e9, 5.5e9, 1e15, 64
        sched = ppm.schedule(n, m, v_pp, "breadth-first" if v_pp > 1 else "1f1b")
        stretch = sched.makespan / sched.busy(0)
        eta = 0.7
        t = max(t_ovl, batch * f_tok / (peak * gpus * eta) * stretch)
        vals = {"B": batch, "F_tok": f_tok, "F_tok_model": f_model, "F_p": peak, "N_GPU": gpus,
                "N_PP": n, "m_micro": m, "v_PP": v_pp, "t_ovl": t_ovl, "eta": eta}  # fmt: skip
        cases.append((vals, batch * f_model / (peak * gpus * t)))
    return compare_cases(d.result, "U_MFU", cases)


@oracle(
    "run-memory-state",
    "hand count",
    "mixed-precision Adam's bytes per parameter listed (bf16 weight and gradient, fp32 "
    "master weight and two moments; Rajbhandari et al. 2020) and the parameters of a "
    "rank's shard dealt out to the ZeRO group one by one",
)
def _memory_state(d: Derivation) -> str:
    cases = []
    per_param = {"weight": 2, "gradient": 2, "master": 4, "momentum": 4, "variance": 4}
    for n, tp, pp, g in ((4096, 2, 2, 4), (1200, 1, 3, 5), (64, 4, 1, 16)):
        shard = n // (tp * pp)
        mine = sum(1 for i in range(shard) if i % g == 0)  # rank 0's share, dealt round-robin
        v = {"N": n, "N_TP": tp, "N_PP": pp, "g_mem": g}
        cases.append((v, mine * sum(per_param.values())))
    return compare_cases(d.result, "M_state", cases)


@oracle(
    "run-memory-activations",
    "published value",
    "Korthikanti et al. (2022), table 2: $34 s b h$ bytes of activations per GPT layer "
    "with FlashAttention-style scores ($5 a s / h$ more without), split $t$ ways by "
    "sequence parallelism; the tensor-by-tensor count (step 3) for a GPT block, with keys and "
    "values as wide as the model, a plain MLP four times as wide, 16-bit values and two "
    "one-byte dropout masks, must give it",
)
def _memory_activations(d: Derivation) -> str:
    cases = []
    count = d.steps[2].expr
    for b, seq, dm, tp in ((1, 2048, 4096, 1), (4, 4096, 8192, 8)):
        v = {"b_mem": b, "s_mem": seq, "d_model": dm, "N_TP": tp, "d_kv": dm, "d_ff": 4 * dm,
             "g_mlp": 2, "w_act": 2, "m_drop": 2 * dm}  # fmt: skip
        cases.append((v, 34 * seq * b * dm / tp))
    return compare_cases(count, "M_act", cases)


def _op_policy_kept(d_model: int, d_kv: int, d_ff: int, gated: bool, tp: int, sp_: bool) -> float:
    """Values per token a block keeps under torchtitan's per-op policy, by walking its matmuls
    in forward order and keeping every second output (index 0, 2, ...), each as wide as the
    matmul's output on one rank (column-parallel: split ``tp`` ways; row-parallel: a whole
    partial sum), then the attention kernel's output and the block's input."""
    column, row = (lambda w: w / tp), (lambda w: w)
    mlp = [column(d_ff), column(d_ff), row(d_model)] if gated else [column(d_ff), row(d_model)]
    walk = [column(d_model), column(d_kv), column(d_kv), row(d_model), *mlp]
    kept = sum(out for i, out in enumerate(walk) if i % 2 == 0)
    return kept + d_model / tp + d_model / (tp if sp_ else 1)


@oracle(
    "run-memory-op-selective",
    "simulation",
    "a block's matmuls walked in forward order (q, k, v, o, then the MLP's), every second "
    "output kept as wide as it is on one rank, with the attention's output and the block's "
    "input: the first step for a gated and a plain MLP, with and without sequence "
    "parallelism, and the last for a Llama block",
)
def _memory_op_selective(d: Derivation) -> str:
    first, cases, last = d.steps[0].expr, [], []
    for dm, kv, ff, tp in ((4096, 1024, 14336, 1), (8192, 1024, 28672, 8), (2048, 2048, 8192, 4)):
        for gated, sp_ in itertools.product((True, False), (True, False)):
            v = {"d_model": dm, "d_kv": kv, "d_ff": ff, "g_mlp": 3 if gated else 2, "N_TP": tp,
                 "t_sp": tp if sp_ else 1, "w_act": 2}  # fmt: skip
            cases.append((v, 2 * _op_policy_kept(dm, kv, ff, gated, tp, sp_)))
        want = 2 * _op_policy_kept(dm, kv, ff, True, tp, True)
        last.append(({"d_model": dm, "d_kv": kv, "d_ff": ff, "N_TP": tp}, want))
    return compare_cases(first, "M_op", cases) + "; " + compare_cases(d.result, "M_op", last)


# --- Expert parallelism ------------------------------------------------------------------------
def _routing(n0: int, n1: int, experts: int) -> tuple[float, float]:
    """Experts dealt round-robin to the GPUs of a group of ``n0`` GPUs in each of ``n1``
    nodes; for a token on each GPU and each next expert equally likely, the shares that land
    on another GPU of the same node and in another node."""
    owner = [e % (n0 * n1) for e in range(experts)]
    same = other = 0
    for here in range(n0 * n1):
        for e in range(experts):
            there = owner[e]
            if there // n0 == here // n0 and there != here:
                same += 1
            elif there // n0 != here // n0:
                other += 1
    total = n0 * n1 * experts
    return same / total, other / total


_GROUPS = ((2, 1, 4), (1, 4, 8), (4, 2, 16), (2, 3, 12), (8, 8, 128))


@oracle(
    "expert-parallel-same-node",
    "hand count",
    "experts dealt to the group's GPUs and every pair of a token's GPU and its next "
    "expert enumerated: the share on another GPU of the node",
)
def _ep_same(d: Derivation) -> str:
    cases = [({"N_EP0": a, "N_EP1": b, "S": s}, _routing(a, b, s)[0]) for a, b, s in _GROUPS]
    return compare_cases(d.result, "P_EP0", cases)


@oracle(
    "expert-parallel-other-node",
    "hand count",
    "experts dealt to the group's GPUs and every pair of a token's GPU and its next "
    "expert enumerated: the share in another node",
)
def _ep_other(d: Derivation) -> str:
    cases = [({"N_EP0": a, "N_EP1": b, "S": s}, _routing(a, b, s)[1]) for a, b, s in _GROUPS]
    return compare_cases(d.result, "P_EP1", cases)


@oracle(
    "expert-parallel-remote",
    "hand count",
    "experts dealt to the group's GPUs and every pair of a token's GPU and its next "
    "expert enumerated: the share that leaves the token's GPU",
)
def _ep_remote(d: Derivation) -> str:
    cases = [({"N_EP0": a, "N_EP1": b, "S": s}, sum(_routing(a, b, s))) for a, b, s in _GROUPS]
    return compare_cases(d.result, "P_EP_rem", cases)


def _ep_bytes(n0: int, n1: int, experts: int, tokens: int, gpus: int, dm: int) -> tuple[float, ...]:
    """Bytes one GPU sends over each level at one interface, forward and backward: its share
    of the tokens, each going where its next expert is (enumerated), d_model two-byte words."""
    same, other = _routing(n0, n1, experts)
    per_gpu = tokens / gpus
    return (2 * same * per_gpu * dm * 2, 2 * other * per_gpu * dm * 2)


@oracle(
    "expert-parallel-interface",
    "hand count",
    "a GPU's tokens sent where the enumerated expert placement puts their next expert, "
    "forward and backward, at each interface, over each level's one-way bandwidth",
)
def _ep_interface(d: Derivation) -> str:
    cases = []
    for (a, b, s), n_if in itertools.product(_GROUPS, (1, 3)):
        tokens, gpus, dm, w0, w1 = 4096, a * b * 2, 64, 300.0, 50.0
        q0, q1 = _ep_bytes(a, b, s, tokens, gpus, dm)
        v = {"N_EP0": a, "N_EP1": b, "n_tok_PP": tokens, "N_GPU": gpus, "d_model": dm,
             "w_word": 2, "W_net0": w0, "W_net1": w1, "n_if_EP": n_if}  # fmt: skip
        cases.append((v, n_if * (q0 / (w0 / 2) + q1 / (w1 / 2))))
    return compare_cases(d.result, "t_EP_bw", cases)


@oracle(
    "expert-parallel-crossing",
    "hand count",
    "at a stage boundary inside a node every token moves, over InfiniBand exactly when "
    "the enumerated placement puts its next expert in another node",
)
def _ep_crossing(d: Derivation) -> str:
    cases = []
    for a, b, s in _GROUPS:
        tokens, gpus, dm, w0, w1 = 4096, a * b * 2, 64, 300.0, 50.0
        _, other = _routing(a, b, s)
        per_gpu_bytes = 2 * tokens / gpus * dm * 2  # forward and backward
        t = per_gpu_bytes * (1 - other) / (w0 / 2) + per_gpu_bytes * other / (w1 / 2)
        v = {"N_EP1": b, "n_tok_PP": tokens, "N_GPU": gpus, "d_model": dm, "w_word": 2,
             "W_net0": w0, "W_net1": w1}  # fmt: skip
        cases.append((v, t))
    return compare_cases(d.result, "t_X_bw_EP", cases)


@oracle(
    "expert-parallel-interfaces",
    "hand count",
    "$L$ layers dealt round-robin to $v N_{\\mathrm{PP}}$ chunks of consecutive layers: "
    "the interfaces between two layers of one chunk, counted",
)
def _ep_interfaces(d: Derivation) -> str:
    cases = []
    for layers, n, v in ((8, 2, 2), (12, 3, 1), (16, 4, 4), (6, 1, 1)):
        size = layers // (n * v)
        inside = sum(1 for i in range(layers - 1) if i // size == (i + 1) // size)
        cases.append(({"L": layers, "N_PP": n, "v_PP": v}, inside))
    before = compare_cases(d.steps[1].expr, "n_EP_only", cases)
    full = [({"L": n * k, "N_PP": n}, 0) for n, k in ((2, 1), (4, 1))]
    after = compare_cases(d.result, "n_EP_only", full)
    return f"{before} of step 2, {after} of the result"


@oracle(
    "expert-parallel-versus-compute",
    "hand count",
    "the enumerated expert traffic of one interface over the layer's multiply-accumulates"
    " for the same tokens, counted in three passes",
)
def _ep_versus(d: Derivation) -> str:
    cases = []
    for a, b, s in _GROUPS:
        tokens, gpus, dm, w0, w1, flops, eta = 4096, a * b * 2, 64, 300.0, 50.0, 1e15, 0.7
        q0, q1 = _ep_bytes(a, b, s, tokens, gpus, dm)
        macs = sum(tokens * dm * 4 * dm for _matrix in range(2) for _kind in range(3))
        t_comp = 2 * macs / (flops * gpus * eta)
        v = {"N_EP0": a, "N_EP1": b, "w_word": 2, "W_net0": w0, "W_net1": w1, "F": flops,
             "eta": eta, "d_ff": 4 * dm, "c_MAC": 2}  # fmt: skip
        cases.append((v, (q0 / (w0 / 2) + q1 / (w1 / 2)) / t_comp))
    return compare_cases(d.result, "rho_EP", cases)


# --- The search: the authors' final code's utilization -----------------------------------------
#: Grid points of the ``h100`` sweep where the search is compared with the authors' code.
SEARCH_POINTS = 8


def _search_against_authors(d: Derivation, name: str) -> str:
    """Run the search at a few h100 grid points with the step's ``name`` formula taken from
    ``d`` (not from the library's copy) and compare with the authors' utilization."""

    scn = resolve("h100")
    original = step.numeric

    def numeric(which: str):
        if which != name:
            return original(which)
        args = original(which).__code__.co_varnames[: original(which).__code__.co_argcount]
        expr = model.PASS_COUNTS.apply(d.result.rhs)
        by_name = {str(x): x for x in expr.free_symbols}
        return sp.lambdify([by_name.get(a, sp.Symbol(a)) for a in args], expr, "numpy")

    reference = [r for r in search.reference_rows("h100") if r["feasible"]]
    picked = reference[:: max(1, len(reference) // SEARCH_POINTS)][:SEARCH_POINTS]
    points = {p.d_model: p for p in search.points(scn)}
    worst = 0.0
    with mock.patch.object(step, "numeric", numeric):
        for r in picked:
            pt = points.get(int(r["d_model"]))
            if pt is None:
                raise PremiseError(f"no grid point of width {r['d_model']:g}")
            got = search.optimal(scn, pt)
            gap = abs(got["utilization"] - r["utilization"]) if got["feasible"] else math.inf
            if not gap <= search.REFERENCE_TOLERANCE:
                raise PremiseError(
                    f"at {r['training_flop_16bit']:.3g} FLOP the search gives "
                    f"{got.get('utilization', float('nan')):.4f}, the authors' code "
                    f"{r['utilization']:.4f}"
                )
            worst = max(worst, gap)
    return f"{len(picked)} grid points, within {worst:.1e}"


@oracle(
    "search-step-time",
    "published value",
    "the utilization the authors' final code finds at grid points of the `h100` sweep "
    "(`data/paper1_reference_sweeps.csv`), the search run with this step time",
)
def _search_step(d: Derivation) -> str:
    return _search_against_authors(d, "step_time")


@oracle(
    "search-network-time",
    "published value",
    "the utilization the authors' final code finds at grid points of the `h100` sweep, "
    "the search run with this network time",
)
def _search_network(d: Derivation) -> str:
    return _search_against_authors(d, "network_time")


@oracle(
    "search-utilization",
    "published value",
    "the utilization the authors' final code finds at grid points of the `h100` sweep, "
    "the search run with this utilization",
)
def _search_utilization(d: Derivation) -> str:
    return _search_against_authors(d, "utilization")


# --- The operations of a step ------------------------------------------------------------------
def _block_kernels(d: int, kv: int, ff: int, gated: bool, tp: int, seq_par: bool) -> list[float]:
    """Values one forward kernel of a block reads and writes per token on one rank, kernel by
    kernel in the order they run: a norm, the rotary embedding, a residual addition, a norm, the
    MLP's nonlinearity, a residual addition.  Norms and residuals see the whole hidden vector
    unless sequence parallelism splits it; the rest see a tensor-parallel shard."""
    hidden = d / (tp if seq_par else 1)
    norm = hidden + hidden  # read x, write its normalized copy
    rotary = 2 * (d + kv) / tp  # read q and k, write them rotated
    residual = 3 * hidden  # read two vectors, write their sum
    nonlinearity = (3 if gated else 2) * ff / tp  # read the up-projections, write one
    return [norm, rotary, residual, norm, nonlinearity, residual]


def _walked_bytes(dm, kv, ff, gated, tp, seq_par, rb, word=2) -> float:
    """Bytes per token a block's memory-bound kernels move in a step, kernel by kernel: each
    forward kernel once, again when recomputed, and its backward at twice its bytes."""
    return sum(
        passes * per_token * word
        for per_token in _block_kernels(dm, kv, ff, gated, tp, seq_par)
        for passes in [1] * (1 + rb) + [2]
    )


_BLOCKS = (
    (4096, 1024, 14336, True, 1, False, 0),
    (8192, 1024, 28672, True, 8, True, 1),
    (2048, 2048, 8192, False, 2, False, 1),
)


@oracle(
    "run-operations-bytes",
    "hand count",
    "a block's memory-bound kernels listed in the order they run (a norm, the rotary "
    "embedding, a residual addition, a norm, the MLP's nonlinearity, a residual addition), "
    "what each reads and writes per token on one rank added up for the forward pass, the "
    "recomputed forward and a backward of twice the forward's bytes",
)
def _operations_bytes(d: Derivation) -> str:
    cases = []
    for dm, kv, ff, gated, tp, seq_par, rb in _BLOCKS:
        vals = {"d_model": dm, "d_kv": kv, "d_ff": ff, "g_mlp": 3 if gated else 2, "N_TP": tp,
                "t_sp": tp if seq_par else 1, "rho_b": rb, "w_word": 2}  # fmt: skip
        cases.append((vals, _walked_bytes(dm, kv, ff, gated, tp, seq_par, rb)))
    return compare_cases(d.result, "Q_blk", cases)


@oracle(
    "run-operations-memory",
    "simulation",
    "a step of the last pipeline stage walked kernel by kernel: every memory-bound kernel of "
    "every block on one GPU, for every micro-batch and pass (forward, recomputed forward, a "
    "backward of twice the forward's bytes), each paying the kernel latency and its bytes over "
    "HBM bandwidth; then the fp32 loss's four vocabulary-wide passes over every token of the "
    "GPU's pipeline and Adam's thirty bytes a parameter of the GPU's shard",
)
def _operations_memory(d: Derivation) -> str:
    cases = []
    for (dm, kv, ff, gated, tp, seq_par, rb), (pp, dp, cp, g_o) in zip(
        _BLOCKS, ((1, 8, 1, 8), (4, 2, 2, 4), (2, 4, 1, 1)), strict=True
    ):
        layers, vocab, params, batch, mbs_tokens = 16, 32000, 3e9, 2**20, 4096
        word, latency, bw = 2, 4e-6, 3e12
        tokens = batch / (dp * cp)  # through this GPU's pipeline, per context rank
        micro = tokens / mbs_tokens
        t = 0.0
        for _layer in range(layers // pp):
            for _mb in range(int(micro)):
                for per_token in _block_kernels(dm, kv, ff, gated, tp, seq_par):
                    for passes in [1] * (1 + rb) + [2]:  # forward(s), then the backward
                        t += latency + passes * per_token * word * mbs_tokens / bw
        t += tokens * 4 * 4 * vocab / tp / bw  # the loss: the last stage, every token
        t += 30 * params / (tp * pp * g_o) / bw
        vals = {"N_TP": tp, "N_PP": pp, "T_GPU": batch / (dp * cp), "rho_b": rb, "g_o": g_o,
                "L": layers, "V_voc": vocab, "N": params, "m_micro": micro,
                "t_kern": latency, "W_HBM": bw,
                "Q_blk": _walked_bytes(dm, kv, ff, gated, tp, seq_par, rb, word)}  # fmt: skip
        cases.append((vals, t))
    return compare_cases(d.result, "t_mem", cases)


def _score_kernels(dropout: bool, word: float, mask: float) -> list[tuple[str, float]]:
    """The score kernels of an unfused attention in the order one pass runs them, with the
    bytes each moves per score: ``("forward", ...)`` then ``("backward", ...)`` entries."""
    fwd = [("forward", word + word)]  # softmax: reads the scores, writes the probabilities
    bwd = []
    if dropout:
        fwd.append(("forward", word + word + mask))  # reads them, writes output and mask
        bwd.append(("backward", word + mask + word))  # reads grad and mask, writes a grad
    bwd.append(("backward", word + word + word))  # softmax's: reads grad and probs, writes
    return fwd + bwd


_SCORE_CASES = (  # heads, seq, tp, dropout, recompute
    (16, 1024, 1, True, 1),
    (32, 2048, 4, False, 0),
    (96, 4096, 8, True, 0),
)


@oracle(
    "run-operations-scores-bytes",
    "hand count",
    "for each of the rank's heads, a token's row of scores walked through the softmax and "
    "dropout kernels of the forward pass (again when recomputed) and their backward kernels, "
    "what each reads and writes (two bytes a value, one a mask entry) added up",
)
def _scores_bytes(d: Derivation) -> str:
    cases = []
    for heads, seq, tp, dropout, rb in _SCORE_CASES:
        per_score = 0.0
        for kind, nbytes in _score_kernels(dropout, 2, 1):
            per_score += nbytes * ((1 + rb) if kind == "forward" else 1)
        vals = {"n_h": heads, "s_seq": seq, "N_TP": tp, "rho_b": rb, "w_word": 2,
                "delta_drop": 1 if dropout else 0}  # fmt: skip
        cases.append((vals, heads // tp * seq * per_score))
    return compare_cases(d.result, "Q_sc", cases)


@oracle(
    "run-operations-scores",
    "simulation",
    "a stage's step walked block by block and micro-batch by micro-batch: every score kernel "
    "of every pass paying the kernel latency, and the scores of the micro-batch's tokens "
    "moving through HBM at its bandwidth",
)
def _scores_time(d: Derivation) -> str:
    cases = []
    for (heads, seq, tp, dropout, rb), (pp, dp, layers) in zip(
        _SCORE_CASES, ((1, 2, 12), (2, 4, 16), (4, 1, 8)), strict=True
    ):
        latency, bw, mbs_tokens, batch = 4.5e-6, 2e12, 2 * seq, 8 * seq * dp
        tokens = batch / dp
        micro = tokens / mbs_tokens
        per_token = 0.0
        kernels = 0
        for kind, nbytes in _score_kernels(dropout, 2, 1):
            passes = (1 + rb) if kind == "forward" else 1
            kernels += passes
            per_token += passes * nbytes * heads / tp * seq
        t = 0.0
        for _layer in range(layers // pp):
            for _mb in range(int(micro)):
                t += kernels * latency + per_token * mbs_tokens / bw
        vals = {"L": layers, "N_PP": pp, "m_micro": micro, "rho_b": rb, "t_kern": latency,
                "T_GPU": tokens, "W_HBM": bw, "delta_drop": 1 if dropout else 0,
                "Q_sc": per_token}  # fmt: skip
        cases.append((vals, t))
    return compare_cases(d.result, "t_sc", cases)


@oracle(
    "ep-traffic",
    "simulation",
    "experts dealt round-robin to the expert-parallel ranks and every token's copies routed "
    "evenly over the experts: the copies whose expert another rank holds, counted expert by "
    "expert, sent as model-wide vectors in each all-to-all (dispatch and combine, forward, "
    "backward and a recomputed forward)",
)
def _ep_run(d: Derivation) -> str:
    cases = []
    for ep, experts, k, tp, pp, dp, cp, recompute in (
        (2, 8, 2, 1, 1, 4, 1, 0), (8, 64, 6, 2, 2, 8, 1, 1), (4, 16, 1, 1, 4, 4, 2, 0),
    ):  # fmt: skip
        layers, dm, word, batch = 4 * pp, 32, 2, 96 * dp * cp * tp
        routed = batch / (dp * cp * tp)  # tokens this GPU routes a step
        owner = [e % ep for e in range(experts)]
        leaving = sum(routed * k / experts for e in range(experts) if owner[e] != 0)
        calls = (2 + 2 + 2 * recompute) * layers // pp
        v = {"B": batch, "L_MoE": layers, "d_model": dm, "w_word": word, "N_TP": tp,
             "N_PP": pp, "N_DP": dp, "N_CP": cp, "N_EP": ep, "k_e": k,
             "rho_b": recompute}  # fmt: skip
        cases.append((v, calls * leaving * dm * word))
    return compare_cases(d.result, "V_EP", cases)
