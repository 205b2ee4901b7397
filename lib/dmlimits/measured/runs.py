"""The step time of a real training run: sharded data, tensor, pipeline and context parallelism.

The first paper's model (Erdil & Schneider-Joseph 2024) bounds utilization under ideal
assumptions: replicated parameters, no attention, perfect overlap, the batch at its critical
size.  Measured runs (Fernandez et al. 2024, and the published runs in ``published_runs.csv``)
shard parameters (ZeRO, FSDP), train transformers at a fixed batch, and overlap imperfectly.
This module extends the accounting just enough to meet them.  Per optimizer step and GPU:

* **Compute.** In the bound, ``B F_tok / (N_GPU F_p eta_mm)``: the batch's training FLOP
  (:mod:`dmlimits.measured.transformer`, recomputation counted) over the cluster's peak at the
  run's precision, derated by a matmul efficiency ``eta_mm``; in an FP8 run only the blocks'
  linear layers run at the FP8 peak, attention's core and the output layer at the 16-bit one. The
  calibrated mode times the step's operations one by one instead
  (:mod:`dmlimits.measured.operations`): each matmul by the book's matmul model, over ``eta_mm``;
  attention's core at FlashAttention's published utilization; the memory-bound operations and the
  optimizer step from HBM bandwidth. The 1F1B pipeline adds to the step its bubble,
  ``(N_PP - 1) / (v m)`` of the blocks' time, with ``m`` micro-batches per pipeline and ``v``
  chunks a GPU (the pipeline chapter). Where the last stage also runs the output layer and the
  loss it sets the pace, and the step holds its whole compute. The bound counts every stage an
  equal share of them; the calibrated mode places them where each run's framework does, and times
  a split that makes the stages uneven by the schedule laid out pass by pass
  (:data:`dmlimits.measured.operations.STAGES`).
* **Sharded data parallelism** over the ``g = N_DP N_CP`` ranks that hold the same parameters.
  A ring all-gather or reduce-scatter of a buffer makes each rank send ``(g - 1) / g`` of it.
  ZeRO-1 and ZeRO-2 reduce-scatter the gradients and all-gather the updated parameters once a
  step (the bytes of one all-reduce, as plain data parallelism sends); ZeRO-3 and FSDP gather
  the parameters for the forward and again for the backward pass: three buffers' worth.
  Hybrid sharding (HSDP) shards over a group of ``h`` ranks and all-reduces the shards across
  the ``g / h`` groups.
* **Tensor parallelism** (Megatron-LM, 1D): two all-reduces of the activations per block
  forward, two backward, two more when the forward is recomputed; with sequence parallelism
  each becomes a reduce-scatter and an all-gather of the same total bytes (it saves activation
  memory, which this model does not track, not time).
* **Context parallelism** (ring attention): each rank passes its keys and values around the
  ring of ``N_CP`` ranks, forward, and twice that backward (keys and values, and their
  gradients).
* **Expert parallelism** (mixtures of experts): the routed experts are split over ``N_EP`` of the
  data-parallel ranks; each MoE layer's all-to-alls (dispatch and combine, forward and backward)
  send every routed copy of a token whose expert another rank holds, in series with compute.
* **Pipeline boundaries**: activations forward and their gradients backward, once each.
* **Links.**  Ranks are laid out tensor-parallel innermost, then context, data and pipeline
  parallel.  A group inside one node uses NVLink; a group across nodes gets the NICs of its
  members in each node (a hierarchical collective's bus bandwidth, as the all-reduce
  measurements of :mod:`dmlimits.measured.nccl` show).
* **The step.**  ``t = t_pipe + t_ser + max(t_ovl, phi t_pipe) - phi t_pipe``: serial communication
  adds to the pipeline's time; overlappable communication hides behind up to a fraction ``phi``
  of it.

Two modes.  The **bound** keeps the paper's ideal assumptions (matmuls at the GPU's effective
utilization, ``eta_mm = eta``, the paper's clock derate; every collective at its link's full
bandwidth, no latency, all communication overlappable and ``phi = 1``): no run can beat it in
this accounting. The **calibrated** mode times the step operation by operation (above) and names
three efficiency factors: the matmul efficiency ``eta_mm`` (the share of the matmul model's
throughput the runs' matmuls reach), fitted on the development split (:func:`dev_rows`: the
published runs of ``published_runs.csv``, every row of it;
:func:`dmlimits.measured.confront.held_out` validates the fit source by source); the collective
efficiency ``eta_c`` (the fraction of a link's bandwidth a collective achieves), measured rather
than fitted: the all-reduce measurements' bus bandwidth over the line rate of a node's NICs
(:func:`measured_collective_efficiency`); and the overlap ``phi``, none (``phi = 0``). Fitting all
three on the runs gave about the same error in sample and a larger one on a source left out
(:data:`FITTED`); tensor-parallel collectives are serial (they sit between a block's matmuls), and
network collectives pay a latency for every call: all-reduces the latency of the all-reduce fit
(:mod:`dmlimits.measured.nccl`, growing with log2 of the nodes), FSDP's all-gathers and
reduce-scatters, which NCCL runs as rings, one step of the paper's network latency per rank.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, field, replace
from functools import cache, lru_cache
from typing import Any

import numpy as np
import sympy as sp

from dmlimits.core import published
from dmlimits.core import symbols as s
from dmlimits.core import units as u
from dmlimits.core.derivation import Derivation, Step, Substitution, derivation, register
from dmlimits.core.scenario import SCHEMA
from dmlimits.costs import data_parallel as dpm
from dmlimits.costs import expert_parallel as epm
from dmlimits.costs import pipeline as ppm
from dmlimits.costs import tensor_parallel as tpm
from dmlimits.costs.matmul import word
from dmlimits.measured import memory, nccl, operations, transformer
from dmlimits.measured.configuration import (  # what a run is; runs, memory and operations share it
    ATTENTION_KERNELS,
    BOUND,
    CLUSTERS,
    FP8_BYTES,
    SHARDING,
    STAGE_PLACEMENTS,
    UNEVEN_SPLITS,
    Cluster,
    Config,
    Factors,
    cluster,
)

CHAPTER = "diminishing_returns"
DATA = "published_runs.csv"
#: Published runs no fit reads: MosaicML's MPT benchmarks (llm-foundry), a framework family the
#: development split does not have.
HOLDOUT = "published_runs_holdout.csv"
#: NVIDIA's Megatron-Bridge (NeMo) benchmarks: FP8, Blackwell GPUs and a mixture of experts,
#: held out of every fit too (:func:`nemo_rows`).
NEMO = "published_runs_nemo.csv"
WORD_BYTES = float(SCHEMA["model.word_bytes"].default)  # a 16-bit word, as the paper's model

_decl = s.REGISTRY.declare
_S, _B = u.second, u.byte

n_cp = _decl(
    "N_CP",
    r"N_{\mathrm{CP}}",
    "context-parallel degree: GPUs that split one sequence",
    defined_in=CHAPTER,
    integer=True,
)
g_shard = _decl(
    "g_DP", r"g_{\mathrm{DP}}", "ranks holding the same parameters: N_DP N_CP", defined_in=CHAPTER
)
n_ag = _decl(
    "n_AG", r"n_{\mathrm{AG}}", "parameter all-gathers per step (ZeRO stage)", defined_in=CHAPTER
)
n_rs = _decl("n_RS", r"n_{\mathrm{RS}}", "gradient reduce-scatters per step", defined_in=CHAPTER)
p_shard = _decl(
    "P_s", r"P_{\mathrm{s}}", "parameters one model-parallel rank holds", defined_in=CHAPTER
)
v_dp = _decl(
    "V_DP",
    r"V_{\mathrm{DP}}",
    "bytes one GPU sends for data parallelism per step",
    _B,
    defined_in=CHAPTER,
)
v_tp = _decl(
    "V_TP",
    r"V_{\mathrm{TP}}",
    "bytes one GPU sends for tensor parallelism per step",
    _B,
    defined_in=CHAPTER,
)
v_cp = _decl(
    "V_CP",
    r"V_{\mathrm{CP}}",
    "bytes one GPU sends for context parallelism per step",
    _B,
    defined_in=CHAPTER,
)
n_ar_tp = _decl(
    "n_TPAR",
    r"n_{\mathrm{AR}}",
    "activation all-reduces per block per micro-batch",
    defined_in=CHAPTER,
)
t_rep = _decl(
    "T_r",
    r"T_{\mathrm{r}}",
    "tokens one tensor-parallel group processes per step",
    defined_in=CHAPTER,
)
v_ep = _decl(
    "V_EP",
    r"V_{\mathrm{EP}}",
    "bytes one GPU sends for expert parallelism per step",
    _B,
    defined_in=CHAPTER,
)
n_a2a = _decl(
    "n_A2A", r"n_{\mathrm{A2A}}", "all-to-alls per MoE layer per micro-batch", defined_in=CHAPTER
)
l_moe = _decl("L_MoE", r"L_{\mathrm{MoE}}", "blocks with a mixture of experts", defined_in=CHAPTER)
k_route = _decl("k_e", r"k_{\mathrm{e}}", "experts a token is routed to", defined_in=CHAPTER)
t_route = _decl(
    "T_route",
    r"T_{\mathrm{route}}",
    "tokens of a step one GPU routes to experts",
    defined_in=CHAPTER,
)
mfu = _decl("U_MFU", r"U_{\mathrm{MFU}}", "model FLOP utilization", defined_in=CHAPTER)
peak_p = _decl(
    "F_p",
    r"F_{\mathrm{p}}",
    "peak dense throughput of one GPU at the run's precision",
    u.flop / _S,
    defined_in=CHAPTER,
)
t_stp = _decl(
    "t_step_run", r"t_{\mathrm{step,run}}", "time of one optimizer step", _S, defined_in=CHAPTER
)
t_pipe = _decl(
    "t_pipe_run",
    r"t_{\mathrm{pipe}}",
    "compute time of one step, pipeline bubble included",
    _S,
    defined_in=CHAPTER,
)
t_cmp = _decl(
    "t_comp_run",
    r"t_{\mathrm{comp,run}}",
    "compute time of one step on the busiest (last) pipeline stage",
    _S,
    defined_in=CHAPTER,
)
t_last = _decl(
    "t_last",
    r"t_{\mathrm{last}}",
    "compute time of one step the last pipeline stage spends beyond the others: the output "
    "layer and the loss",
    _S,
    defined_in=CHAPTER,
)
t_ser = _decl(
    "t_ser",
    r"t_{\mathrm{ser}}",
    "communication that cannot overlap compute",
    _S,
    defined_in=CHAPTER,
)
t_ovl = _decl(
    "t_ovl", r"t_{\mathrm{ovl}}", "communication that can overlap compute", _S, defined_in=CHAPTER
)
eta_mm = _decl(
    "eta_mm",
    r"\eta_{\mathrm{mm}}",
    "matmul efficiency: share of peak compute achieved",
    defined_in=CHAPTER,
)
phi = _decl(
    "phi_ovl",
    r"\varphi",
    "overlap: share of the compute time that hides communication",
    defined_in=CHAPTER,
)

L, d = s.n_layers, s.d_model
RING = (g_shard - 1) / g_shard
ZERO_COUNTS = {0: (1, 1), 1: (1, 1), 2: (1, 1), 3: (2, 1)}  # (n_AG, n_RS) per ZeRO stage


@register
def dp_traffic_derivation() -> Derivation:
    e1 = sp.Eq(v_dp, (n_ag + n_rs) * RING * p_shard * word)
    shard = Substitution(
        "a model-parallel rank holds its share of the parameters",
        {p_shard: s.n_params / (tpm.n_tp * ppm.n_pp)},
    )
    e2 = shard.apply(e1)
    zero3 = Substitution(
        "ZeRO-3 and FSDP gather the parameters forward and backward",
        {n_ag: 2, n_rs: 1},
        kind="assumption",
    )
    e3 = zero3.apply(e2)
    return derivation(
        "sharded-dp-traffic",
        "Bytes a GPU sends for sharded data parallelism in one step",
        [
            Step(
                "Each parameter all-gather and gradient reduce-scatter of a ring sends all but "
                "the rank's own share of the buffer",
                e1,
            ),
            Step("The buffer is the rank's share of the model", e2, using=shard),
            Step(
                "Sharding the parameters too: three buffers' worth, against two for ZeRO-1 and "
                "ZeRO-2 (and plain data parallelism's all-reduce)",
                e3,
                using=zero3,
            ),
        ],
        chapter=CHAPTER,
    )


@register
def tp_traffic_derivation() -> Derivation:
    e1 = sp.Eq(v_tp, n_ar_tp * 2 * (tpm.n_tp - 1) / tpm.n_tp * t_rep * d * word * L / ppm.n_pp)
    megatron = Substitution(
        "two all-reduces per block forward, two backward, two more when recomputed",
        {n_ar_tp: 4 + 2 * transformer.rho_b},
        kind="assumption",
        source="Shoeybi et al. 2019",
    )
    e2 = megatron.apply(e1)
    share = Substitution(
        "a tensor-parallel group processes its replica's tokens",
        {t_rep: s.batch / (dpm.n_dp * n_cp)},
    )
    e3 = share.apply(e2)
    return derivation(
        "tp-traffic",
        "Bytes a GPU sends for tensor parallelism in one step",
        [
            Step(
                "Each all-reduce of a block's activations (its tokens by the model width) "
                "sends twice the ring share",
                e1,
            ),
            Step("Megatron-LM's blocks", e2, using=megatron),
            Step("Tokens per tensor-parallel group", e3, using=share),
        ],
        chapter=CHAPTER,
    )


#: The all-to-alls of an MoE layer per micro-batch; the derivation and the latency count of
#: :func:`components` both read it.
A2A_PASSES = Substitution(
    "dispatch and combine, forward and backward, again when recomputed",
    {n_a2a: 4 + 2 * transformer.rho_b},
    kind="assumption",
    source="lepikhin2020gshard",
)


@register
def ep_traffic_derivation() -> Derivation:
    e1 = sp.Eq(
        v_ep,
        n_a2a * (epm.n_ep - 1) / epm.n_ep * t_route * k_route * d * word * l_moe / ppm.n_pp,
    )
    passes = A2A_PASSES
    e2 = passes.apply(e1)
    share = Substitution(
        "a GPU routes its replica's tokens, split over its tensor-parallel ranks",
        {t_route: s.batch / (dpm.n_dp * n_cp * tpm.n_tp)},
        kind="assumption",
    )
    return derivation(
        "ep-traffic",
        "Bytes a GPU sends for expert parallelism in one step",
        [
            Step(
                "Each all-to-all sends every routed copy of a token (a vector as wide as the "
                "model) to the rank that holds its expert; with the experts dealt evenly and "
                "tokens routed evenly, all but one expert-parallel rank's share leaves the GPU",
                e1,
            ),
            Step("Dispatch and combine in each pass", e2, using=passes),
            Step("Tokens a GPU routes", share.apply(e2), using=share),
        ],
        chapter=CHAPTER,
    )


@register
def cp_traffic_derivation() -> Derivation:
    t_local = s.batch / (dpm.n_dp * n_cp)
    kv = 2 * d * transformer.n_kv / transformer.n_heads
    e1 = sp.Eq(v_cp, 3 * (n_cp - 1) * kv * t_rep * word * L / ppm.n_pp)
    share = Substitution(
        "a context-parallel rank holds its share of each sequence", {t_rep: t_local}
    )
    e2 = share.apply(e1)
    heads = Substitution(
        "a tensor-parallel rank holds its share of the key and value heads, and at least one",
        {transformer.n_kv: sp.Max(transformer.n_kv / tpm.n_tp, 1)},
    )
    e3 = heads.apply(e2)
    return derivation(
        "cp-traffic",
        "Bytes a GPU sends for context parallelism (ring attention) in one step",
        [
            Step(
                "Keys and values of the rank's tokens travel the ring once forward, and keys, "
                "values and their gradients backward",
                e1,
            ),
            Step("Each rank holds its share of the replica's tokens", e2, using=share),
            Step(
                "Tensor parallelism splits attention by heads, so a rank passes on only the "
                "keys and values of its own heads: its share of them, and at least one head "
                "where there are fewer key and value heads than tensor-parallel ranks",
                e3,
                using=heads,
            ),
        ],
        chapter=CHAPTER,
    )


@register
def mfu_derivation() -> Derivation:
    e1 = sp.Eq(mfu, transformer.flop_token_model * s.batch / (s.n_gpu * peak_p * t_stp))
    overlap = Substitution(
        "serial communication adds; overlappable communication hides behind a share of compute",
        {t_stp: t_pipe + t_ser + sp.Max(t_ovl, phi * t_pipe) - phi * t_pipe},
        kind="assumption",
    )
    e2 = overlap.apply(e1)
    bubble = Substitution(
        "the 1F1B bubble behind the last stage",
        {
            t_pipe: t_cmp * (1 + (ppm.n_pp - 1) / (ppm.interleave * ppm.n_micro))
            - t_last * (ppm.n_pp - 1) / (ppm.interleave * ppm.n_micro)
        },
    )
    e3 = bubble.apply(e2)
    comp = Substitution(
        "the batch's training FLOP at the matmul efficiency, every stage an equal share",
        {t_cmp: transformer.flop_token * s.batch / (s.n_gpu * peak_p * eta_mm), t_last: 0},
        kind="assumption",
    )
    e4 = comp.apply(e3)
    ideal = Substitution(
        "the paper's ideal: matmuls at its effective utilization, perfect overlap",
        {eta_mm: s.eff_util, phi: 1, t_ser: 0},
        kind="assumption",
        source="erdil2024datamovement",
    )
    e5 = ideal.apply(e4)
    return derivation(
        "run-mfu",
        "Model FLOP utilization of one step",
        [
            Step(
                "MFU: the model FLOP of a step over what the cluster's peak could do in its time",
                e1,
            ),
            Step("The step", e2, using=overlap),
            Step(
                "The pipeline stretches compute. Where the last stage also runs the output "
                "layer and the loss, $t_{\\mathrm{last}}$ more than the others, it sets the "
                "pace: the step holds its whole compute, and the warm-up and cool-down wait "
                "on the other stages' blocks, $(N_{\\mathrm{PP}} - 1) / (v m)$ of their "
                "compute (1F1B, or Megatron-LM's interleaved 1F1B with $v$ chunks a GPU). "
                "The calibrated mode places them where each run's framework does: on the last "
                "stage under Megatron-LM's default split. Where the framework's split makes "
                "the stages uneven otherwise (nanotron's and Megatron-Core's counting the "
                "embedding and the loss as layers, which weigh them; torchtitan's default "
                "split points), it lays the schedule out pass by pass with each stage's work "
                "instead.",
                e3,
                using=bubble,
            ),
            Step(
                "Compute at the matmul efficiency: the step's FLOP, every stage an equal share "
                "of them, the output layer's and the loss's too ($t_{\\mathrm{last}} = 0$). The "
                "calibrated mode times each operation instead of the FLOP, on the stage that "
                "runs it",
                e4,
                using=comp,
            ),
            Step(
                "The bound: the paper's idealisations, with matmuls at the GPU's effective "
                "utilization (its clock derate), communication hidden and nothing in series",
                e5,
                using=ideal,
            ),
        ],
        chapter=CHAPTER,
    )


COST_FORMULAS = {
    "dp_bytes": (dp_traffic_derivation().steps[1].expr.rhs, _B),
    "tp_bytes": (tp_traffic_derivation().result.rhs, _B),
    "cp_bytes": (cp_traffic_derivation().result.rhs, _B),
    "ep_bytes": (ep_traffic_derivation().result.rhs, _B),
    "mfu": (mfu_derivation().steps[3].expr.rhs, u.one),
}


@cache
def numeric_functions() -> dict[str, Any]:
    f = {}
    f["dp"] = sp.lambdify(
        (n_ag, n_rs, g_shard, s.n_params, tpm.n_tp, ppm.n_pp, word),
        COST_FORMULAS["dp_bytes"][0],
        "numpy",
    )
    f["tp"] = sp.lambdify(
        (transformer.rho_b, tpm.n_tp, s.batch, dpm.n_dp, n_cp, d, word, L, ppm.n_pp),
        COST_FORMULAS["tp_bytes"][0],
        "numpy",
    )
    f["cp"] = sp.lambdify(
        (n_cp, d, transformer.n_kv, transformer.n_heads, s.batch, dpm.n_dp, word, L, ppm.n_pp,
         tpm.n_tp),
        COST_FORMULAS["cp_bytes"][0],
        "numpy",
    )
    f["ep"] = sp.lambdify(
        (
            transformer.rho_b,
            epm.n_ep,
            s.batch,
            dpm.n_dp,
            n_cp,
            tpm.n_tp,
            k_route,
            d,
            word,
            l_moe,
            ppm.n_pp,
        ),
        COST_FORMULAS["ep_bytes"][0],
        "numpy",
    )
    return f


def group_bandwidth(cfg: Config, degree: int, stride: int) -> tuple[float, float]:
    """(byte/s a member gets at full efficiency, nodes the group spans) for a group of
    ``degree`` ranks spaced ``stride`` apart."""
    c = cfg.cluster
    if degree <= 1:
        return math.inf, 1.0
    if degree * stride <= c.node_size:
        return c.nvlink, 1.0
    per_node = max(1, min(degree, c.node_size // stride))
    return min(c.nvlink, per_node * c.nic), degree / per_node


def _calls_latency(nodes: float, calls: float) -> float:
    """Latency of ``calls`` network collectives over ``nodes`` nodes, from the all-reduce fit."""
    if nodes <= 1:
        return 0.0
    return calls * nccl.fit().latency(nodes)


def _ring_latency(cfg: Config, ranks: int, nodes: float, calls: float) -> float:
    """Latency of ``calls`` ring all-gathers or reduce-scatters over ``ranks`` ranks spanning
    ``nodes`` nodes: a ring takes ``ranks - 1`` steps, each waiting one network latency (NCCL
    runs these collectives as rings only, so their latency grows with the rank count, not its
    logarithm)."""
    if nodes <= 1:
        return 0.0
    return calls * (ranks - 1) * cfg.cluster.hop_latency


PARTS = (
    "compute",
    "derate",
    "linear",
    "attention",
    "memory",
    "optimizer",
    "head",
    "loss",
    "bubble_ratio",
    "stage_bubble_ratio",
    "dp_bw",
    "dp_lat",
    "tp_bw",
    "tp_lat",
    "cp_bw",
    "ep_bw",
    "ep_lat",
    "pp_bw",
    "micro_batches",
    "stage_layers",
    "host",
    "tp_overlap",
    "tp_degree",
)

#: Where each overlappable collective can run beside compute, when the factors' ``windows`` is
#: on (:func:`combine`): it hides behind that compute, and only data parallelism keeps a part
#: it cannot hide.  As frameworks can schedule them (gradients reduced in buckets during the
#: backward pass, parameters gathered a layer ahead, ring attention); what each run of the
#: book's files did, its table does not say.  Each collective is set against its window
#: alone: collectives that share a window do not slow each other here, and context
#: parallelism's window is attention's time as the operations time it (``operations``;
#: without it, none).
OVERLAP_WINDOWS = {
    "data parallel": "one micro-batch's forward and backward (the model counts a step's "
    "gathers and reductions once, as a step of one micro-batch runs them, layer by layer; "
    "with several micro-batches the gradients are reduced only in the last one's backward); "
    "the last layer's share cannot hide",
    "context parallel": "attention's core: each block of keys and values is passed on while "
    "the current one is attended to",
    "pipeline boundaries": "the stage's compute: sends and receives run beside it (the "
    "warm-up's and cool-down's, which the schedule waits for, are not charged apart)",
    "tensor parallel": "none: a block's next matmul needs the collective's result",
    "expert parallel": "none: the experts need the tokens the all-to-all sends",
}


def components(cfg: Config) -> dict[str, float]:
    """The parts of a step that do not depend on the efficiency factors: compute time at peak,
    the bubble's ratio to compute, and each parallelism's bandwidth time (at the links' full
    bandwidth) and latency (at the all-reduce fit's); and the step's operations one by one
    (:func:`dmlimits.measured.operations.parts`).  Computed once per configuration and
    attention utilizations in a process (the fits and validations ask for the same rows many
    times); a fresh dict each call."""
    return dict(_components(cfg, operations.utilization_state()))


@lru_cache(maxsize=16384)
def _components(cfg: Config, _state: tuple) -> dict[str, float]:
    sh = cfg.shape
    peak = cfg.cluster.peak(cfg.precision)
    w = WORD_BYTES
    rb, _ = transformer.RECOMPUTE[cfg.recompute]
    B = cfg.global_batch_tokens
    m = cfg.micro_batches
    fns = numeric_functions()
    layers = sh.layers
    stage_layers = layers / cfg.pp
    out = dict.fromkeys(PARTS, 0.0)
    out["derate"] = cfg.cluster.derate
    # FP8 runs use FP8 for the blocks' linear layers; attention's core and the output layer
    # stay in 16-bit (the frameworks that keep it so: dmlimits.measured.operations).
    attn = sh.attention_flop_per_token(cfg.seq_len, cfg.recompute)
    if cfg.precision == "fp8":
        head = sh.output_flop_per_token(cfg.recompute)
        linear = sh.flop_per_token(cfg.seq_len, cfg.recompute) - attn - head
        out["compute"] = B * (linear / peak + (attn + head) / cfg.cluster.peak_16bit) / cfg.n_gpus
    else:
        linear = sh.flop_per_token(cfg.seq_len, cfg.recompute) - attn
        out["compute"] = B * (linear / peak + attn / cfg.cluster.peak_16bit) / cfg.n_gpus
    # The bound's bubble (run-mfu): equal stages.  The calibrated mode's, stage_bubble_ratio, is
    # the same but where the framework's split makes the stages uneven and the output layer is
    # placed as it puts it: the simulated schedule's stretch over equal shares.
    out["bubble_ratio"] = out["stage_bubble_ratio"] = (cfg.pp - 1) / (cfg.vpp * m)
    uneven = cfg.stages in UNEVEN_SPLITS and operations.STAGES["head"] == "placed"
    if cfg.pp > 1 and uneven:
        out["stage_bubble_ratio"] = operations.pipeline_stretch(cfg) - 1
    out["micro_batches"] = m
    out["stage_layers"] = stage_layers
    out.update(operations.parts(cfg))

    # Data parallelism over g = dp x cp ranks, laid out outside tp.
    g = cfg.dp * cfg.cp
    stage = SHARDING[cfg.sharding]
    nag, nrs = ZERO_COUNTS[stage]
    w_ag = w
    if cfg.fp8_allgather:
        # FP8 all-gathers (torchtitan's) cover the converted linear layers alone: the embedding
        # and the output layer travel in 16-bit.  Bytes a parameter, averaged over the gather.
        embed = sh.params - sh.block_params
        w_ag = ((cfg.params_held - embed) * FP8_BYTES + embed * w) / cfg.params_held
    params = cfg.params_held
    if g > 1 and cfg.sharding == "hsdp":
        h = cfg.shard_group
        r = g // h
        bw_h, nodes_h = group_bandwidth(cfg, h, cfg.tp)
        bw_r, nodes_r = group_bandwidth(cfg, r, cfg.tp * h)
        shard = float(fns["dp"](nag, 0, h, params, cfg.tp, cfg.pp, w_ag)) + float(
            fns["dp"](0, nrs, h, params, cfg.tp, cfg.pp, w)
        )
        across = float(fns["dp"](1, 1, r, params / h, cfg.tp, cfg.pp, w)) if r > 1 else 0.0
        out["dp_bw"] = shard / bw_h + (across / bw_r if r > 1 else 0.0)
        out["dp_lat"] = _ring_latency(cfg, h, nodes_h, 3 * stage_layers) + _calls_latency(
            nodes_r, stage_layers
        )
    elif g > 1:
        bw, nodes = group_bandwidth(cfg, g, cfg.tp)
        ag = float(fns["dp"](nag, 0, g, params, cfg.tp, cfg.pp, w_ag))
        rs = float(fns["dp"](0, nrs, g, params, cfg.tp, cfg.pp, w))
        out["dp_bw"] = (ag + rs) / bw
        if stage == 3:  # per-layer all-gathers and reduce-scatters: rings
            out["dp_lat"] = _ring_latency(cfg, g, nodes, (nag + nrs) * stage_layers)
        else:  # one all-reduce per layer's gradients, at the all-reduce fit's latency
            out["dp_lat"] = _calls_latency(nodes, stage_layers)
    # Tensor parallelism, innermost.
    if cfg.tp > 1:
        bw, nodes = group_bandwidth(cfg, cfg.tp, 1)
        vol = float(fns["tp"](rb, cfg.tp, B, cfg.dp, cfg.cp, sh.d_model, w, layers, cfg.pp))
        out["tp_bw"] = vol / bw
        out["tp_lat"] = _calls_latency(nodes, (4 + 2 * rb) * stage_layers * m)
        out["tp_overlap"] = 1.0 if cfg.tp_comm_overlap else 0.0
    out["tp_degree"] = float(cfg.tp)
    # Context parallelism, inside data parallelism.
    if cfg.cp > 1:
        bw, _ = group_bandwidth(cfg, cfg.cp, cfg.tp)
        vol = float(
            fns["cp"](cfg.cp, sh.d_model, sh.kv_heads, sh.heads, B, cfg.dp, w, layers, cfg.pp,
                      cfg.tp)
        )
        out["cp_bw"] = vol / bw
    # Expert parallelism, over data-parallel ranks next to the tensor-parallel group.
    if cfg.ep > 1:
        bw, nodes = group_bandwidth(cfg, cfg.ep, cfg.tp)
        vol = float(fns["ep"](rb, cfg.ep, B, cfg.dp, cfg.cp, cfg.tp, sh.top_k, sh.d_model, w,
                              sh.moe_layers, cfg.pp))  # fmt: skip
        out["ep_bw"] = vol / bw
        calls = float(A2A_PASSES.mapping[n_a2a].subs(transformer.rho_b, rb))
        out["ep_lat"] = _calls_latency(nodes, calls * sh.moe_layers / cfg.pp * m)
    # Pipeline boundaries, outermost: activations forward, gradients backward.
    if cfg.pp > 1:
        bw, _ = group_bandwidth(cfg, cfg.pp, cfg.tp * cfg.cp * cfg.dp)
        out["pp_bw"] = ppm.BOUNDARY_PASSES * B / (cfg.dp * cfg.cp) * sh.d_model * w / cfg.tp / bw
    return out


def combine(parts: dict, factors: Factors) -> dict:
    """Step time and its split from :func:`components` and the factors; works elementwise on
    arrays (of rows, or of factor values) as on numbers."""
    derate = parts["derate"] if factors.derate else 1.0
    if factors.operations:  # a stage's: its blocks (and, as placed, the output layer and loss)
        t_head = parts["head"] / factors.matmul + parts["loss"]
        t_comp = (parts["linear"] + parts["head"]) / factors.matmul + parts["attention"]
        t_mem, t_opt = parts["memory"] + parts["loss"], parts["optimizer"]
    else:  # the bound's: every stage an equal share of the FLOP
        t_comp = parts["compute"] / (factors.matmul * derate)
        t_head = t_mem = t_opt = 0.0 * t_comp
    # The last stage sets the pace; the warm-up and cool-down wait on the other stages' blocks
    # (run-mfu's third step).  With equal stages t_head is 0; where a split makes the stages
    # uneven otherwise, the bubble ratio is the simulated schedule's (pipeline_stretch).
    # Where the framework's host-side work for its blocks takes longer than the GPU's work on
    # them (the output layer and the loss apart), the GPU waits: the excess is the framework's
    # overhead (Config.host_floor_s).
    blocks = t_comp + t_mem - t_head
    t_host = np.maximum(0.0, parts["host"] - blocks) if factors.operations else 0.0
    ratio = parts["stage_bubble_ratio"] if factors.operations else parts["bubble_ratio"]
    t_bubble = (t_comp + t_mem + t_host - t_head) * ratio
    lat = 1.0 if factors.latency else 0.0
    t_dp = parts["dp_bw"] / factors.collective + lat * parts["dp_lat"]
    t_tp = parts["tp_bw"] / factors.collective + lat * parts["tp_lat"]
    if factors.serial_tp and factors.operations:
        # Overlapped with the blocks' matmuls they feed (Config.tp_comm_overlap): each
        # collective split into as many steps as there are tensor-parallel ranks, each step's
        # transfer beside the matmul of the step before; the first step's transfer waits (an
        # all-gather's first chunk is the rank's own, so this over-charges it by up to one
        # step), and what the matmuls cannot cover.  Their latencies stay in series.
        n = np.maximum(parts["tp_degree"], 1.0)
        t_bw = parts["tp_bw"] / factors.collective
        t_lin = parts["linear"] / factors.matmul
        hidden = t_bw / n + np.maximum(0.0, t_bw - t_lin) * (n - 1) / n + lat * parts["tp_lat"]
        t_tp = np.where(parts["tp_overlap"] > 0, hidden, t_tp)
    t_cp = parts["cp_bw"] / factors.collective
    t_pp = parts["pp_bw"] / factors.collective
    # The all-to-alls sit between a block's router and its experts: serial, as tensor
    # parallelism's collectives are.
    t_ep = parts["ep_bw"] / factors.collective + lat * parts["ep_lat"]
    t_p = t_comp + t_mem + t_host + t_bubble + t_opt
    serial = (t_tp + t_ep) if factors.serial_tp else 0.0 * t_tp
    if factors.windows:  # each collective behind its own window (OVERLAP_WINDOWS)
        work = t_comp + t_mem + t_host
        attention = parts["attention"] if factors.operations else 0.0 * t_comp
        exposed = (
            np.maximum(t_dp / parts["stage_layers"], t_dp - work / parts["micro_batches"])
            + np.maximum(0.0, t_cp - attention)
            + np.maximum(0.0, t_pp - work)
            + (0.0 * t_tp if factors.serial_tp else t_tp + t_ep)
        )
    else:
        overlappable = t_dp + t_cp + t_pp + (0.0 * t_tp if factors.serial_tp else t_tp + t_ep)
        exposed = np.maximum(overlappable, factors.overlap * t_p) - factors.overlap * t_p
    return {
        "step": t_p + serial + exposed,
        "exposed": serial + exposed,
        "compute": t_comp,
        "memory-bound operations": t_mem,
        "framework overhead": t_host + 0.0 * t_comp,
        "optimizer step": t_opt,
        "pipeline bubble": t_bubble,
        "data parallel": t_dp,
        "tensor parallel": t_tp,
        "context parallel": t_cp,
        "expert parallel": t_ep,
        "pipeline boundaries": t_pp,
    }


#: The parts of a step's breakdown that are the GPU's own work, not communication.
COMPUTE_PARTS = (
    "compute",
    "memory-bound operations",
    "framework overhead",
    "optimizer step",
    "pipeline bubble",
)


@dataclass(frozen=True)
class Prediction:
    step_time_s: float
    mfu: float
    hfu: float
    tokens_per_s_per_gpu: float
    tokens_per_s: float
    breakdown: dict[str, float] = field(default_factory=dict)  # seconds by cause
    exposed_comm_s: float = 0.0
    energy_per_token_j: float = 0.0

    def as_dict(self) -> dict:
        return asdict(self)


@cache
def _ideal_fn():
    """The MFU derivation's first step times the step time: the step's FLOP at peak."""
    e1 = mfu_derivation().steps[0].expr
    return sp.lambdify(
        (transformer.flop_token_model, s.batch, s.n_gpu, peak_p), e1.rhs * t_stp, "numpy"
    )


def flop_per_token(cfg: Config, counting: str) -> float:
    """FLOP per token as a metric counts them: ``model`` (MFU) or ``hardware`` (HFU, with
    recomputation)."""
    if counting == "model":
        return cfg.shape.model_flop_per_token(cfg.seq_len)
    return cfg.shape.flop_per_token(cfg.seq_len, cfg.recompute)


def ideal_time(cfg: Config, counting: str) -> float:
    """Seconds the step's FLOP (in the given counting) take at the cluster's peak: the
    utilization of a step is this over its time."""
    return float(
        _ideal_fn()(
            flop_per_token(cfg, counting),
            cfg.global_batch_tokens,
            cfg.n_gpus,
            cfg.cluster.peak(cfg.precision),
        )
    )


def predict(cfg: Config, factors: Factors = BOUND, parts: dict | None = None) -> Prediction:
    """Step time, throughput and utilization of one configuration (``parts``: its
    :func:`components`, when already computed)."""
    B = cfg.global_batch_tokens
    res = combine(components(cfg) if parts is None else parts, factors)
    t_step = float(res["step"])
    tokens_per_s = B / t_step
    return Prediction(
        step_time_s=t_step,
        mfu=ideal_time(cfg, "model") / t_step,
        hfu=ideal_time(cfg, "hardware") / t_step,
        tokens_per_s_per_gpu=tokens_per_s / cfg.n_gpus,
        tokens_per_s=tokens_per_s,
        breakdown={k: float(v) for k, v in res.items() if k not in ("step", "exposed")},
        exposed_comm_s=float(res["exposed"]),
        energy_per_token_j=cfg.n_gpus * cfg.cluster.power_w * t_step / B,
    )


#: What :func:`operation_split` splits a step into, in the order the chapter's figure stacks
#: them.
OPERATIONS = (
    "matmuls",
    "attention",
    "memory-bound operations",
    "framework overhead",
    "optimizer step",
    "pipeline bubble",
    "communication in series",
)


def operation_split(cfg: Config, factors: Factors | None = None) -> dict[str, float]:
    """Seconds of one step by operation (:data:`OPERATIONS`) in a mode that times operations
    (the calibrated mode's factors by default); they add up to the step time."""
    factors = factors or calibrated()
    if not factors.operations:
        raise ValueError("operation_split needs factors with operations=True (the calibrated mode)")
    parts = components(cfg)
    res = combine(parts, factors)
    matmuls = (parts["linear"] + parts["head"]) / factors.matmul
    return {
        "matmuls": matmuls,
        "attention": parts["attention"],
        "memory-bound operations": float(res["memory-bound operations"]),
        "framework overhead": float(res["framework overhead"]),
        "optimizer step": float(res["optimizer step"]),
        "pipeline bubble": float(res["pipeline bubble"]),
        "communication in series": float(res["exposed"]),
    }


# --- Published runs ---------------------------------------------------------------------------
THROUGHPUT_METRICS = {
    # metric -> how it counts FLOP ("model" or "hardware")
    "MFU": "model",
    "HFU": "hardware",
    "pct_of_peak_flops": "hardware",
    "achieved_tflops_per_gpu": "hardware",
    "aggregate_pflops": "hardware",
    "tokens_per_s_per_gpu": "model",
    "iteration_time_full_recompute": "model",
    "iteration_time": "model",
    "iteration_time_seqpar_selective": "model",
}
# The Ultra-Scale Playbook names its models by size only.  Our reading: the Llama 3 shape of that
# size with untied embeddings (nanotron's default); the 80B model as Llama 3's 70B shape with the
# MLP widened to 80 billion parameters.  The chapter checks the reading: with it, the MFU the
# Playbook reports and the MFU its tokens per second give under our FLOP count agree.
PLAYBOOK_SHAPES = {
    "1b": ("llama3.2-1b", None),
    "3b": ("llama3.2-3b", None),
    "8b": ("llama3-8b", None),
    "80b": ("llama3-70b", 80e9),
}
DEFAULT_SEQ = 8192  # torchtitan's Llama 3 default; its benchmark tables leave it out


@dataclass(frozen=True)
class Interpretation:
    config: Config
    counting: str  # "model" or "hardware": the FLOP the row's metric counts
    reported: float | None  # the row's utilization in its own counting, or None
    assumed: tuple[str, ...] = ()


def _int(row: dict, key: str, default: int | None = None) -> int | None:
    text = (row.get(key) or "").strip()
    if not text:
        return default
    value = float(text)
    if value != int(value):
        raise ValueError(f"column {key} must be a whole number, got {text!r}")
    return int(value)


def gpu_name(text: str) -> str:
    t = text.upper()
    if t.startswith("A100"):
        return "a100"
    if t.startswith("H100") and "500W" in t.replace(" ", ""):
        return "h100-500w"
    if t.startswith("H100"):
        return "h100"
    if t.startswith("H200"):
        return "h200"
    if t.startswith("GB200"):
        return "gb200"
    if t.startswith("B200"):
        return "b200"
    raise ValueError(f"GPU {text!r} is not one of the modelled clusters ({', '.join(CLUSTERS)})")


def row_shape(row: dict, assumed: list[str]) -> transformer.Shape:
    """The shape a row's run trained: the preset its model names (or the shape its layers and
    d_model give), with every shape column the row states (:data:`OVERRIDE_COLUMNS`) put in
    place of the preset's value, so that a row means what it says: a model truncated to 12 of
    its 80 layers is timed and sized with 12 (its embedding and output layer kept, since those
    depend on the vocabulary and width, not on the layer count)."""
    return _row_overrides(_named_shape(row, assumed), row)


#: The shape columns a row may state that override its preset's values: the layer count, the
#: model width, query heads, key-value heads, the MLP width and the vocabulary.  (The sequence
#: is the row's ``seq_len`` always: a shape has none of its own.)
OVERRIDE_COLUMNS = ("layers", "d_model", "heads", "kv_heads", "d_ff", "vocab")


def _row_overrides(shape: transformer.Shape, row: dict) -> transformer.Shape:
    """``shape`` with the values the row states in :data:`OVERRIDE_COLUMNS` (and ``tied`` and
    ``dropout``) in place of its own.  Query heads given without key-value heads keep the
    preset's grouping where it divides them (multi-head attention stays multi-head)."""
    values = {k: v for k in OVERRIDE_COLUMNS if (v := _int(row, k)) is not None}
    for flag in ("tied", "dropout"):
        if (stated := _flag(row, flag)) is not None:
            values[flag] = stated
    changed = {k: v for k, v in values.items() if getattr(shape, k) != v}
    if not changed:
        return shape
    if "heads" in changed and "kv_heads" not in values:
        heads = changed["heads"]
        if shape.kv_heads == shape.heads or heads % shape.kv_heads:
            changed["kv_heads"] = heads
    layers = changed.get("layers", shape.layers)
    if shape.moe and shape.dense_layers >= layers:
        raise ValueError(
            f"row {row.get('model', '')!r}: layers={layers} leaves no MoE layer of {shape.name} "
            f"(it has {shape.dense_layers} dense layers first); expected more than "
            f"{shape.dense_layers} layers"
        )
    given = ", ".join(f"{k}={v}" for k, v in changed.items())
    return replace(shape, **changed, source=f"the row's {given} over {shape.name}; {shape.source}")


#: Every preset of :data:`dmlimits.measured.transformer.SHAPES` under its name without case or
#: separators ("llama2-13b" as ``llama213b``; NeMo's "GPT3-5B" as ``gpt35b``), longest first so
#: that a longer name is never taken for a shorter one inside it.  A name written otherwise
#: ("Nemotron-4 340B") is not found.  GPT-3's sizes of Brown et al. are matched from their
#: sizes and labels, after these.
PRESET_ALIASES = tuple(sorted(
    {re.sub(r"[-_.]", "", k.removeprefix("nemo-")): k
     for k in transformer.SHAPES if not k.startswith("gpt3-")}.items(),
    key=lambda pair: -len(pair[0]),
))  # fmt: skip


def _named_shape(row: dict, assumed: list[str]) -> transformer.Shape:
    name = row.get("model", "")
    layers, width = _int(row, "layers"), _int(row, "d_model")
    params = float(row["params_b"]) * 1e9 if (row.get("params_b") or "").strip() else None
    key = name.lower().replace(" ", "")
    # Names are matched whatever their case and separators: "Llama-2 7B", "LLAMA2-7B" and
    # "llama_2_7b" are one model.  Llama 3 and 3.1 share their shapes.
    bare = re.sub(r"[-_.]", "", key)
    for alias, preset in (
        ("llama318b", "llama3-8b"),
        ("llama3170b", "llama3-70b"),
        ("llama31405b", "llama3-405b"),
        *PRESET_ALIASES,
    ):
        if alias in bare:
            return transformer.SHAPES[preset]
    size = re.search(r"(\d+)b\b", key.replace("(", " ").replace(")", " ") + " ")
    if "nanotron" in key or key in PLAYBOOK_SHAPES:
        label = key if key in PLAYBOOK_SHAPES else (size.group(1) + "b" if size else "")
        if label not in PLAYBOOK_SHAPES:
            raise ValueError(
                f"no Playbook shape for {name!r}; expected one of {', '.join(PLAYBOOK_SHAPES)}"
            )
        preset, widen = PLAYBOOK_SHAPES[label]
        out = transformer.untied(transformer.SHAPES[preset])
        if widen:
            out = out.with_params(widen)
        assumed.append(f"shape: {out.name}")
        return out
    if layers and width:
        if "llama" in key:
            raise ValueError(f"no Llama preset matches {name!r}")
        return _with_row_shape(transformer.gpt_shape(name, layers, width), row)
    if gpt3 := _gpt3(name):
        return gpt3
    if params and "llama" in key:
        nearest = min(
            transformer.LLAMA_FAMILY,
            key=lambda k: abs(math.log(transformer.SHAPES[k].params / params)),
        )
        base = transformer.SHAPES[nearest]
        assumed.append(f"shape of {base.name} with the MLP widened to {params / 1e9:g}B parameters")
        return base.with_params(params)
    raise ValueError(
        f"cannot infer the shape of {name!r}: expected layers and d_model, or a "
        "Llama-style model with params_b"
    )


#: Optional columns that refine a shape given by layers and d_model (``gpt_shape``'s defaults
#: otherwise: heads of 128 wide, keys and values as wide as the model, a plain MLP four times as
#: wide, Megatron-LM's vocabulary, untied embeddings); ``tied`` and ``dropout`` (true or false)
#: too.
SHAPE_COLUMNS = ("heads", "kv_heads", "d_ff", "vocab")


def _with_row_shape(shape: transformer.Shape, row: dict) -> transformer.Shape:
    values = {k: _int(row, k) for k in SHAPE_COLUMNS if _int(row, k) is not None}
    if "heads" in values and "kv_heads" not in values:
        values["kv_heads"] = values["heads"]
    for flag in ("tied", "dropout"):
        if (stated := _flag(row, flag)) is not None:
            values[flag] = stated
    if not values:
        return shape
    given = ", ".join(k for k in (*SHAPE_COLUMNS, "tied", "dropout") if k in values)
    return replace(shape, **values, source=f"the row: layers, d_model, {given}; {shape.source}")


def _gpt3(name: str) -> transformer.Shape | None:
    """The GPT-3 of Brown et al. (2020) a name gives by size ("GPT-3 175B", "gpt3-1.3b") or by
    label ("GPT-3 XL"); ``None`` when the name is not GPT-3's.  (A row that gives layers and
    d_model is modelled from them instead, with Megatron-LM's vocabulary.)"""
    text = name.lower()
    if not re.search(r"gpt[-_ ]?3(?![.\d])", text):
        return None
    for size, (label, *_) in transformer.GPT3_SIZES.items():
        if re.search(rf"(?<![\d.]){re.escape(size)}\b", text) or re.search(
            rf"\b{re.escape(label.lower())}\b", text
        ):
            return transformer.SHAPES[f"gpt3-{size}"]
    return None


PLAYBOOK_COLUMNS = {"gpus", "zero_stage", "micro_batch", "mfu_pct"}


def normalize(row: dict) -> tuple[dict, list[str]]:
    """A row in the layout of published_runs.csv.  Rows of the Ultra-Scale Playbook's benchmark
    file (columns ``gpus``, ``zero_stage``, ``micro_batch``, ``mfu_pct``, ...) are mapped to it:
    eight H100s a node and bf16, as the Playbook describes its runs, trained with nanotron.  So
    are rows of vTrain's single-node file (:data:`VTRAIN_COLUMNS`)."""
    if VTRAIN_COLUMNS <= set(row) and not row.get("n_gpus"):
        return _vtrain(row), [
            "vTrain's layout: Megatron-DeepSpeed on A100s in one node, fp16, full "
            "recomputation, GPT-2's vocabulary padded as Megatron-LM pads it, dropout"
        ]
    if not PLAYBOOK_COLUMNS <= set(row) or row.get("n_gpus"):
        return row, []
    model = (row.get("model") or "").strip()
    return {
        "model": f"{model} (nanotron)",
        "gpu": "H100-SXM5-80GB (8/node)",
        "n_gpus": row.get("gpus", ""),
        "tp": row.get("tp", ""),
        "pp": row.get("pp", ""),
        "dp": row.get("dp", ""),
        "cp": "1",
        "ep": "1",
        "seq_len": row.get("seq_len", ""),
        "global_batch_tokens": row.get("global_batch_tokens", ""),
        "mbs": row.get("micro_batch", ""),
        "sharding": f"ZeRO-{row.get('zero_stage', '')}",
        "precision": "bf16",
        "metric": "MFU",
        "value": row.get("mfu_pct", ""),
        "source": "Ultra-Scale Playbook benchmarks",
        "notes": "",
        "framework": "nanotron",
    }, ["the Ultra-Scale Playbook's layout: H100s, eight a node, bf16"]


#: The columns of vTrain's published single-node measurements (Bang et al. 2024, VIA-Research/vTrain
#: ``data/ground_truth_single.csv``) by which :func:`normalize` knows its layout.
VTRAIN_COLUMNS = {"GPUs", "hidden size", "# layers", "iteration time (ms)"}
#: What vTrain's runs did that its file does not say, read from its repository (VIA-Research/vTrain
#: at f8dda84): every run with Megatron-DeepSpeed (``data/README.md``), in 16-bit floating point
#: with full activation recomputation (``use_checkpoint`` in each run's configuration under
#: ``config/validation/single``), GPT-2's vocabulary of 50,257 words with dropout
#: (``src/model/gpt_model.py``), on A100s in one node of eight.
VTRAIN_VOCAB = 50257


def _padded_vocab(vocab: int, tp: int) -> int:
    """The vocabulary as Megatron-LM pads it: up to a multiple of 128 times the tensor-parallel
    degree (``--make-vocab-size-divisible-by``, 128 by default), so that each rank's share of the
    output layer is a multiple of 128 wide."""
    step = 128 * tp
    return -(-vocab // step) * step


def _vtrain(row: dict) -> dict:
    """A row of vTrain's layout (:data:`VTRAIN_COLUMNS`) in that of published_runs.csv, with
    the columns of :data:`RUN_COLUMNS` and :data:`OPTIONAL_COLUMNS` a user added to it kept
    (they override vTrain's ways, as in any row)."""
    tp = int(float(row.get("tensor parallelism") or 1))
    seq = row.get("sequence length", "")
    batch = float(row.get("global batch") or "nan") * float(seq or "nan")
    ms = (row.get("iteration time (ms)") or "").strip()
    ways = (*RUN_COLUMNS, *OPTIONAL_COLUMNS)
    stated = {k: v for k, v in row.items() if k in ways and (v or "").strip()}
    return {
        "model": f"GPT d_model {row.get('hidden size', '')}, {row.get('# layers', '')} layers",
        "layers": row.get("# layers", ""),
        "d_model": row.get("hidden size", ""),
        "heads": row.get("attention heads", ""),
        "vocab": str(_padded_vocab(VTRAIN_VOCAB, tp)),
        "dropout": "true",
        "gpu": "A100-SXM4 (8/node)",
        "n_gpus": row.get("GPUs", ""),
        "tp": str(tp),
        "pp": row.get("pipeline parallelism", ""),
        "dp": row.get("data parallelism", ""),
        "cp": "1",
        "ep": "1",
        "seq_len": seq,
        "global_batch_tokens": f"{batch:.0f}" if math.isfinite(batch) else "",
        "mbs": row.get("micro batch", ""),
        "sharding": "none",
        "precision": "fp16",
        "recompute": "full",
        "metric": "iteration_time",
        "value": f"{float(ms) / 1e3:.9g}" if ms else "",
        "source": "vTrain single-node measurements",
        "notes": "",
        "framework": "megatron-deepspeed",
    } | stated


#: The columns that state what a run did beyond its shape, GPUs, degrees and batch, each read
#: by :func:`interpret` (the data files' ``#`` lines say what each holds).  A row's ``notes``
#: and ``source`` are for the reader and are never read: what they say that the model needs is
#: in these columns.  Empty where the row does not state it.
RUN_COLUMNS = (
    "framework",  # the training framework: one of FRAMEWORKS
    "recompute",  # activation recomputation: none, selective or full (empty: none)
    "sequence_parallel",  # true or false: Megatron-LM's sequence parallelism
    "interleaved",  # true or false: an interleaved 1F1B pipeline schedule
    "local_batch",  # sequences a data-parallel rank a step (torchtitan's "local batch")
    "global_batch_seqs",  # sequences a step
    "fabric_stated",  # false where the source does not state the nodes' network
)
#: Columns a row may add to say more than the data files do, each read where it is not empty:
#: ``stages`` (:data:`~dmlimits.measured.configuration.STAGE_PLACEMENTS`),
#: ``attention_kernel`` (:data:`~dmlimits.measured.configuration.ATTENTION_KERNELS`),
#: ``tp_comm_overlap`` (true or false) and ``host_floor_s`` (seconds of host-side work a block and
#: micro-batch), each otherwise the framework's way.
OPTIONAL_COLUMNS = ("stages", "attention_kernel", "tp_comm_overlap", "host_floor_s")
#: The frameworks a row's ``framework`` column can name: Megatron-LM (Narayanan et al. 2021,
#: Korthikanti et al. 2022), Microsoft's Megatron-DeepSpeed (vTrain's runs), torchtitan,
#: nanotron (the Ultra-Scale Playbook's), MosaicML's llm-foundry and NVIDIA's Megatron-Bridge.
#: Empty: none named, Megatron-LM's ways taken.
FRAMEWORKS = (
    "megatron-lm",
    "megatron-deepspeed",
    "torchtitan",
    "nanotron",
    "llm-foundry",
    "megatron-bridge",
)
#: Frameworks whose tensor parallelism also splits the sequence outside its region.
#: torchtitan's tensor-parallel plan shards the norms over the sequence (its
#: ``SequenceParallel`` layers); nanotron, the Ultra-Scale Playbook's framework, runs in its
#: ``REDUCE_SCATTER`` mode, which does the same.
SEQUENCE_PARALLEL_FRAMEWORKS = ("torchtitan", "nanotron")
#: Of those, the frameworks that keep the gathered inputs of their column-parallel linears for
#: the backward pass: torchtitan (autograd saves the output of the all-gather).  nanotron
#: gathers them again in the backward pass instead (``tp_recompute_allgather``, True by default
#: since July 2024: huggingface/nanotron, ``parallel/tensor_parallel/functional.py``), as
#: Megatron-LM does.  The Playbook's recorded peaks agree: with the gathered inputs kept, the
#: predicted peak runs from a third too low at one tensor-parallel rank to twice too high at 32;
#: without them the error no longer moves with the degree (the errors ``bench/bench_predict.py``
#: reports).
KEEPS_GATHERED_FRAMEWORKS = ("torchtitan",)
#: Frameworks whose GPT model runs attention unfused (``Config.attention_kernel``): Microsoft's
#: Megatron-DeepSpeed computes the scores with one batched matmul, scales, masks and
#: normalizes them in a fused softmax kernel, applies dropout and multiplies by the values in a
#: second (``CoreAttention`` in ``megatron/model/transformer.py``: ``torch.baddbmm``,
#: ``FusedScaleMaskSoftmax``, dropout, ``torch.bmm``; microsoft/Megatron-DeepSpeed at f4157be,
#: as vTrain names no commit).  FlashAttention runs only with ``--use-flash-attn`` or its
#: variants, which vTrain's configurations have no switch for.  A row's ``attention_kernel``
#: column overrides it.
UNFUSED_ATTENTION_FRAMEWORKS = ("megatron-deepspeed",)
#: Frameworks whose runs overlap tensor parallelism's collectives with the matmuls they feed
#: (``Config.tp_comm_overlap``): Megatron-Bridge's performance recipes for the Llama models set
#: ``tp_comm_overlap=True`` with Transformer Engine's userbuffers, every collective of a block
#: split and run beside its matmul (ring exchange for the forward and the activation
#: gradients, bulk overlap for the weight gradients: ``scripts/performance/configs/llama`` and
#: ``src/megatron/bridge/training/comm_overlap.py`` at 00b7660be0, the commit of its published
#: benchmarks).  torchtitan's asynchronous tensor parallelism is not modelled: the book has not
#: read how far its code overlaps the collectives of the runs it names.  A row's
#: ``tp_comm_overlap`` column (true or false) overrides it.
TP_OVERLAP_FRAMEWORKS = ("megatron-bridge",)
#: The frameworks whose host-side floor under a block's time is measured
#: (:func:`host_floor`), each with the file it is measured on.
HOST_FLOOR = {"megatron-deepspeed": "vtrain_single_node_d1024.csv"}
#: The GPU whose nodes each host-side floor of :data:`HOST_FLOOR` was measured on: a floor is the
#: host's and the framework's together, so another GPU's nodes are not given it.
HOST_FLOOR_GPU = {"megatron-deepspeed": "a100"}


#: Frameworks that split their pipeline's blocks otherwise than Megatron-LM's default, and how
#: (:data:`~dmlimits.measured.configuration.STAGE_PLACEMENTS`).  nanotron deals the blocks to
#: the stages by a compute cost that counts the output layer, greedily (``build_model`` in
#: ``nanotron/models/base.py``; :func:`dmlimits.measured.operations.nanotron_split`); its
#: stages come out uneven all the same.  torchtitan, given no split points, gives the first
#: stage the fewest blocks and the middle ones the remainder
#: (:func:`dmlimits.measured.operations.torchtitan_split`).  A row's ``stages`` column overrides
#: the rule (NVIDIA's runs say how their recipes split the stages); every other framework's runs
#: are placed with Megatron-LM's default split, equal blocks a stage and the output layer and
#: loss on the last.  Read by the calibrated mode's placement
#: (:func:`dmlimits.measured.operations.parts`, ``placement("placed")``).
FRAMEWORK_SPLITS = {"nanotron": "nanotron", "torchtitan": "torchtitan"}
#: What each placement of the pipeline's stages other than Megatron-LM's default (``last``) is
#: taken to be, said of a pipelined row placed so.
STAGE_ASSUMPTIONS = {
    "nanotron": "pipeline stages as nanotron splits the blocks by its compute count, "
    "timed by the schedule pass by pass",
    "layers": "pipeline stages as Megatron-Core splits the blocks with the embedding and "
    "the loss counted as a layer each, timed by the schedule pass by pass",
    "layout": "the recipe's pipeline layout (assumed where the row's notes say so) "
    "counted as equal stages",
    "torchtitan": "pipeline stages as torchtitan splits the blocks given no split "
    "points (the first stage the fewest blocks, the output layer and the loss on "
    "the last), timed by the schedule pass by pass",
}


def _check_split(cfg: Config) -> None:
    """A ValueError, with the reason, where the calibrated mode cannot lay out the schedule of
    ``cfg``'s uneven split (:func:`dmlimits.measured.operations.pipeline_stretch`).  Such a row
    is not modelled at all, the bound included: the calibrated mode is what a row is read for."""
    operations.SPLITS[cfg.stages](cfg)  # raises where the layers do not split so
    m = cfg.micro_batches
    stalls = cfg.vpp > 1 and round(m) > cfg.pp and round(m) % cfg.pp  # Megatron-LM's order
    if abs(m - round(m)) > 1e-9 or stalls:
        raise ValueError(
            f"{m:g} micro-batches a step cannot be laid out for the {cfg.stages} split over "
            f"{cfg.pp} stages and {cfg.vpp} chunks a stage: expected a whole number"
            + (", at most the stages or a multiple of them" if cfg.vpp > 1 else "")
        )


def _choice(row: dict, key: str, choices) -> str:
    """The row's ``key`` column, lower-cased, where it is one of ``choices``; empty where the
    column is; a ValueError otherwise."""
    text = (row.get(key) or "").strip().lower()
    if text and text not in choices:
        raise ValueError(
            f"column {key} must be one of {', '.join(choices)} or empty, got {row.get(key)!r}"
        )
    return text


def _flag(row: dict, key: str) -> bool | None:
    """The row's ``key`` column read as true or false; ``None`` where it is empty."""
    text = (row.get(key) or "").strip().lower()
    if text not in ("", "true", "false"):
        raise ValueError(f"column {key} must be true or false, got {row.get(key)!r}")
    return None if not text else text == "true"


def _stages(row: dict, framework: str) -> str:
    """Where the row's framework runs the pipeline's output layer and loss (:class:`Config`'s
    ``stages``): the row's ``stages`` column where it has one, else its framework's split
    (:data:`FRAMEWORK_SPLITS`), else ``last`` (Megatron-LM's default split)."""
    return _choice(row, "stages", STAGE_PLACEMENTS) or FRAMEWORK_SPLITS.get(framework, "last")


def _activation_factor(framework: str) -> float:
    """The fitted activation factor of nanotron's runs (the Ultra-Scale Playbook's), 1 for every
    other framework (the count alone): see
    :data:`dmlimits.measured.memory.PLAYBOOK_ACTIVATION_FACTOR`."""
    return memory.PLAYBOOK_ACTIVATION_FACTOR if framework == "nanotron" else 1.0


def interpret(row: dict) -> Interpretation:
    """A published row as a configuration, with every value the row leaves out assumed and
    named.  Raises ValueError (with the reason) when the row cannot be modelled.  What the run
    did beyond its layout is read from :data:`RUN_COLUMNS`; the row's ``notes`` and ``source``
    are not read.

    Kept in the process for each row and set of model shapes (the fits and validations
    interpret the same few hundred rows about twenty thousand times a chapter): an
    interpretation reads the row, this module's constants and the model shapes, which
    :func:`dmlimits.measured.transformer.preset_values` changes for a while; what it returns
    is frozen."""
    items = tuple(row.items())
    try:
        hash(items)
    except TypeError:  # a value that cannot be a key (a list, say): interpreted afresh
        return _interpret(row)
    # The shapes by identity: the entry holds them, so no other shape can take their ids.
    shapes = tuple(transformer.SHAPES.items())
    key = (items, tuple((name, id(v)) for name, v in shapes))
    kept = _INTERPRETED.get(key)
    if kept is None:
        if len(_INTERPRETED) >= INTERPRETATIONS_KEPT:
            _INTERPRETED.clear()
        kept = _INTERPRETED[key] = (shapes, _interpret(row))
    return kept[1]


#: Interpretations kept per process (the book's chapters make a few hundred).
INTERPRETATIONS_KEPT = 4096
_INTERPRETED: dict[tuple, tuple[tuple, Interpretation]] = {}


def _interpret(row: dict) -> Interpretation:
    """One row read afresh (:func:`interpret`): its layout and batch, then what its framework
    does where the row does not say, then its measured value in the model's counting."""
    row, assumed = normalize(row)
    framework = _choice(row, "framework", FRAMEWORKS)
    shape = row_shape(row, assumed)
    cl = cluster(gpu_name(row.get("gpu", "")))
    if _flag(row, "fabric_stated") is False:
        assumed.append(f"the fabric of the book's {cl.name} cluster: {cl.label}")
    n = _int(row, "n_gpus")
    if n is None:
        raise ValueError("n_gpus is empty")
    tp, pp, dp = _int(row, "tp", 1), _int(row, "pp", 1), _int(row, "dp", 1)
    cp, ep = _int(row, "cp", 1), _int(row, "ep", 1)
    seq = _int(row, "seq_len")
    if seq is None:
        seq = DEFAULT_SEQ
        assumed.append(f"sequence length {DEFAULT_SEQ} (torchtitan's default)")
    mbs, batch = _batch(row, framework, pp, dp, seq, assumed)
    sharding = _sharding(row)
    precision_text = (row.get("precision") or "").lower()
    precision = _precision(precision_text)
    recompute = _choice(row, "recompute", transformer.RECOMPUTE) or "none"
    cfg = Config(
        shape=shape,
        cluster=cl,
        n_gpus=n,
        global_batch_tokens=batch,
        seq_len=seq,
        tp=tp,
        pp=pp,
        dp=dp,
        cp=cp,
        ep=ep,
        sharding=sharding,
        mbs=mbs,
        precision=precision,
        recompute=recompute,
        fp8_allgather="fp8 all-gather" in precision_text,
        **_framework_ways(row, framework, cl.name, tp, pp, recompute, assumed),
    )
    if pp > 1 and cfg.stages in UNEVEN_SPLITS:
        _check_split(cfg)
    counting, reported = _reported(row, cfg, assumed)
    return Interpretation(cfg, counting or "model", reported, tuple(assumed))


def _batch(
    row: dict, framework: str, pp: int, dp: int, seq: int, assumed: list[str]
) -> tuple[int, float]:
    """The row's micro-batch (sequences) and global batch (tokens a step).  The micro-batch is
    the ``mbs`` column; where it is empty, torchtitan's pipelined runs take the local batch
    over the pipeline degree (its ``pipeline_parallel_microbatches`` defaults to the degree:
    ``build_pipeline_schedule`` in ``torchtitan/parallelisms/pipelining_utils.py`` at 9dec370),
    every other run one sequence.  The global batch is ``global_batch_tokens``, else
    ``global_batch_seqs`` sequences, else the local batch on every data-parallel rank, else one
    micro-batch on every one."""
    local = _int(row, "local_batch")
    mbs = _int(row, "mbs")
    torchtitan_default = framework == "torchtitan" and pp > 1 and local is not None
    if mbs is None and torchtitan_default and not local % pp:
        mbs = local // pp
        assumed.append(
            f"{pp} micro-batches of {mbs} sequence{'s' if mbs > 1 else ''} a step, one a "
            "pipeline stage (torchtitan's default)"
        )
    if mbs is None:
        mbs = 1
        assumed.append("micro-batches of one sequence")
    tokens = (row.get("global_batch_tokens") or "").strip()
    sequences = _int(row, "global_batch_seqs")
    if tokens:
        return mbs, float(tokens)
    if sequences is not None:
        return mbs, float(sequences) * seq
    if local is not None:
        assumed.append("global batch: the notes' local batch on every data-parallel rank")
        return mbs, float(local) * dp * seq
    assumed.append("global batch: one micro-batch on every data-parallel rank")
    return mbs, float(mbs * dp * seq)


def _sharding(row: dict) -> str:
    """The row's ``sharding`` column as :class:`Config`'s: ``fsdp`` for ZeRO-3 and FSDP,
    ``zero1`` and ``zero2`` for those stages, ``none`` otherwise."""
    text = (row.get("sharding") or "").lower()
    if "zero-3" in text or "fsdp" in text:
        return "fsdp"
    if m := re.search(r"zero-(\d)", text):
        return f"zero{m.group(1)}"
    return "none"


def _precision(text: str) -> str:
    """The precision a row's ``precision`` column (lower-cased) names: ``fp8`` for FP8 and
    Float8 runs, ``fp16``, else ``bf16``."""
    if "float8" in text or "fp8" in text:
        return "fp8"
    return "fp16" if "fp16" in text else "bf16"


def _framework_ways(
    row: dict, framework: str, gpu: str, tp: int, pp: int, recompute: str, assumed: list[str]
) -> dict[str, Any]:
    """The :class:`Config` fields that follow from the row's framework, each assumption named in
    ``assumed``: torchtitan's interleaved schedule where the row gives no ``vpp`` (two model
    chunks a stage, given no split points: ``generate_split_points`` at 9dec370), its per-op
    selective recomputation and its FSDP under pipelining; sequence parallelism with tensor
    parallelism (:data:`SEQUENCE_PARALLEL_FRAMEWORKS`) unless the row's ``sequence_parallel`` is
    false, and whether the gathered inputs are kept (:data:`KEEPS_GATHERED_FRAMEWORKS`); the
    pipeline split where the row gives no ``stages`` (:data:`FRAMEWORK_SPLITS`); the activation
    factor (:func:`_activation_factor`)."""
    torchtitan = framework == "torchtitan"
    vpp, interleaved = _int(row, "vpp"), _flag(row, "interleaved")
    if vpp is None and torchtitan and pp > 1 and interleaved:
        vpp = 2
        assumed.append("interleaved 1F1B with two model chunks a stage (torchtitan's default)")
    stated = _flag(row, "sequence_parallel")
    sequence_parallel = bool(stated)
    keeps_gathered = tp > 1 and framework in KEEPS_GATHERED_FRAMEWORKS
    if tp > 1 and framework in SEQUENCE_PARALLEL_FRAMEWORKS and stated is not False:
        sequence_parallel = True
        assumed.append(
            "tensor parallelism with sequence parallelism, the gathered inputs "
            + ("kept" if keeps_gathered else "gathered again in the backward pass")
            + " (the framework's way)"
        )
    if torchtitan and recompute == "selective":
        assumed.append(
            "selective recomputation by torchtitan's per-op policy: every other matmul's "
            "output kept (the memory count)"
        )
    if torchtitan and pp > 1:
        assumed.append(
            "FSDP keeps each pipeline stage's weights gathered and its gradients unsharded "
            "until the last micro-batch (torchtitan's way; the memory count)"
        )
    stages = _stages(row, framework)
    if pp > 1 and stages != "last":
        assumed.append(STAGE_ASSUMPTIONS[stages])
    factor = _activation_factor(framework)
    if factor != 1.0:
        assumed.append(
            f"activation memory {factor:g} times the count (the Playbook's fitted factor)"
        )
    kernel = _choice(row, "attention_kernel", ATTENTION_KERNELS)
    if not kernel:
        kernel = "unfused" if framework in UNFUSED_ATTENTION_FRAMEWORKS else "flash"
        if kernel == "unfused":
            assumed.append("attention unfused, its scores through HBM (the framework's way)")
    overlap = _flag(row, "tp_comm_overlap")
    if overlap is None:
        overlap = framework in TP_OVERLAP_FRAMEWORKS
        if overlap and tp > 1:
            assumed.append(
                "tensor parallelism's collectives overlapped with their matmuls (the "
                "framework's recipes)"
            )
    stated_floor = (row.get("host_floor_s") or "").strip()
    if stated_floor:
        try:
            floor = float(stated_floor)
        except ValueError:
            raise ValueError(
                f"column host_floor_s must be a number of seconds, got {stated_floor!r}"
            ) from None
    elif framework in HOST_FLOOR and gpu == HOST_FLOOR_GPU[framework]:
        floor = host_floor(framework)
        assumed.append(
            f"a host-side floor of {floor * 1e3:.2f} ms a block and micro-batch (the "
            f"framework's, measured on vTrain's runs on {gpu} nodes)"
        )
    else:
        floor = 0.0
        if framework in HOST_FLOOR:
            assumed.append(
                f"no host-side floor: the framework's was measured on "
                f"{HOST_FLOOR_GPU[framework]} nodes, not {gpu}"
            )
    return dict(
        tp_comm_overlap=overlap,
        attention_kernel=kernel,
        host_floor_s=floor,
        vpp=vpp or 1,
        sequence_parallel=sequence_parallel,
        keeps_gathered_inputs=keeps_gathered,
        activation_factor=factor,
        selective_policy="op" if torchtitan else "attention",
        stage_keeps_gathered=torchtitan,
        stages=stages,
    )


def host_floor(framework: str) -> float:
    """Seconds of ``framework``'s host-side work for one block and one micro-batch (forward,
    recomputed forward and backward), below which a block's time does not fall however small
    its kernels (:data:`HOST_FLOOR`, ``Config.host_floor_s``).

    Measured, not derived: the median, over the runs of the framework's file with one sequence
    a micro-batch and no pipeline, of the measured step less what the calibrated mode gives the
    rest of the step (the output layer, the loss, the optimizer and the collectives), per block
    and micro-batch (:func:`host_floors_by_degree` splits it by tensor-parallel degree).  In
    vTrain's Megatron-DeepSpeed runs (d_model 1024 on A100s) a block's time hardly moves from
    one sequence a micro-batch to two, or from one tensor-parallel rank to four, although the
    GPU's work doubles or halves: the GPU waits on the framework.  It is hundreds of the matmul
    model's kernel latencies, so no count of kernels at that latency explains it; what the
    framework does on the host (Python, autograd, the recomputation's wrapper) is not modelled
    further here.  The calibrated factors it uses are fitted on the development rows, which
    hold no run of the framework (a ValueError if they do)."""
    samples = _floor_samples(framework, operations.utilization_state())
    return float(np.median([v for _, v in samples]))


def host_floors_by_degree(framework: str) -> dict[int, float]:
    """:func:`host_floor`'s median for each tensor-parallel degree of the runs it is measured
    on, in seconds: how far one floor for every degree is from each."""
    by: dict[int, list[float]] = {}
    for tp, v in _floor_samples(framework, operations.utilization_state()):
        by.setdefault(tp, []).append(v)
    return {tp: float(np.median(v)) for tp, v in sorted(by.items())}


@cache
def _floor_samples(framework: str, _state: tuple) -> tuple[tuple[int, float], ...]:
    """Each measured run's share of :func:`host_floor`: its tensor-parallel degree and the
    seconds a block and micro-batch took beyond the rest of its step, for one state of the
    single-GPU models (:func:`dmlimits.measured.operations.utilization_state`), which the
    calibrated factors it uses depend on."""
    if framework not in HOST_FLOOR:
        raise ValueError(
            f"no host-side floor measured for framework {framework!r}; expected one of "
            f"{', '.join(HOST_FLOOR)}"
        )
    if any((r.get("framework") or "").strip().lower() == framework for r in dev_rows()):
        raise ValueError(
            f"the development rows hold runs of {framework!r}: its host-side floor would enter "
            "the fit it is measured with; expected none"
        )
    factors = calibrated()
    out = []
    for raw in published.data_rows(HOST_FLOOR[framework]):
        # Interpreted without a floor (the row states none), and timed by the calibrated mode.
        it = interpret(dict(raw, host_floor_s="0"))
        cfg = it.config
        if normalize(raw)[0].get("framework") != framework or cfg.mbs != 1 or cfg.pp != 1:
            continue
        parts = components(cfg)
        res = combine(parts, factors)
        head = parts["head"] / factors.matmul + parts["loss"]
        rest = float(res["step"]) - float(res["compute"] + res["memory-bound operations"] - head)
        measured = ideal_time(cfg, it.counting) / it.reported
        out.append((cfg.tp, (measured - rest) / (cfg.micro_batches * cfg.shape.layers)))
    return tuple(out)


def _reported(row: dict, cfg: Config, assumed: list[str]) -> tuple[str | None, float | None]:
    """How the row's metric counts FLOP (:data:`THROUGHPUT_METRICS`; ``None`` for a metric
    that is no throughput) and the utilization its value gives in that counting: a percentage
    as a fraction, TFLOP/s a GPU and PFLOP/s a cluster over the peak at the run's precision,
    tokens per second a GPU times the FLOP a token over that peak, an iteration time (seconds)
    as the ideal step over it; ``None`` where the row has no value."""
    metric = row.get("metric", "")
    counting = THROUGHPUT_METRICS.get(metric)
    value_text = (row.get("value") or "").strip()
    if counting is None:
        return None, None
    if not value_text:
        assumed.append("no measured value: nothing to compare")
        return counting, None
    value, peak = float(value_text), cfg.cluster.peak(cfg.precision)
    if metric in ("MFU", "HFU", "pct_of_peak_flops"):
        if cfg.precision == "fp8":
            assumed.append("reported percentage taken against the FP8 peak")
        return counting, value / 100
    if metric == "achieved_tflops_per_gpu":
        return counting, value * 1e12 / peak
    if metric == "aggregate_pflops":
        return counting, value * 1e15 / (cfg.n_gpus * peak)
    if metric == "tokens_per_s_per_gpu":
        return counting, value * flop_per_token(cfg, counting) / peak
    return counting, ideal_time(cfg, counting) / value  # iteration times


def utilization(pred: Prediction, counting: str) -> float:
    return pred.hfu if counting == "hardware" else pred.mfu


OUTPUT_COLUMNS = (
    "predicted_mfu_bound",
    "predicted_mfu_calibrated",
    "predicted_step_time_s",
    "predicted_tokens_per_s_per_gpu",
    "predicted_peak_memory_gib",
    "predicted_fits",
    "reported_utilization",
    "counting",
    "prediction_assumed",
    "prediction_error",
)


def predict_rows(rows, factors: Factors | None = None) -> list[dict]:
    """Every input row with the prediction columns added (with the peak memory per GPU and
    whether it fits, :mod:`dmlimits.measured.memory`); a row that cannot be modelled gets empty
    predictions and its reason in ``prediction_error`` (never an exception)."""
    factors = factors or calibrated()
    out = []
    for row in rows:
        new = dict(row)
        for col in OUTPUT_COLUMNS:
            new[col] = ""
        try:
            it = interpret(row)
            parts = components(it.config)
            bound = predict(it.config, BOUND, parts)
            cal = predict(it.config, factors, parts)
            mem = memory.peak(it.config)
            can_fit = memory.can_fit(it.config)
            new.update(
                predicted_peak_memory_gib=f"{mem.total / 2**30:.2f}",
                # Could it run at all: the row's recomputation is often not stated.
                predicted_fits=str(can_fit).lower(),
            )
            assumed = list(it.assumed)
            if can_fit and not mem.fits:
                # The two columns then disagree at first sight; say why in the row.
                assumed.append(
                    f"the peak memory is with {it.config.recompute} recomputation, more than "
                    "the GPU holds; it fits with full recomputation (predicted_fits)"
                )
            new.update(
                predicted_mfu_bound=f"{utilization(bound, it.counting):.4f}",
                predicted_mfu_calibrated=f"{utilization(cal, it.counting):.4f}",
                predicted_step_time_s=f"{cal.step_time_s:.6g}",
                predicted_tokens_per_s_per_gpu=f"{cal.tokens_per_s_per_gpu:.6g}",
                reported_utilization="" if it.reported is None else f"{it.reported:.4f}",
                counting=it.counting,
                prediction_assumed="; ".join(assumed),
            )
        except (ValueError, KeyError, ZeroDivisionError, OverflowError) as exc:
            new["prediction_error"] = str(exc) or type(exc).__name__
        out.append(new)
    return out


@cache
def dev_rows() -> tuple[dict[str, str], ...]:
    """The development split: every row of the project's published-runs file, which the
    calibration fits on.  Out-of-sample errors come from leaving one source out
    (:func:`dmlimits.measured.confront.held_out`), from the runs of :data:`HOLDOUT`, which no
    fit reads (:func:`holdout_rows`, :func:`dmlimits.measured.confront.outside_split`) and,
    where it is beside the project, from the Ultra-Scale Playbook's full benchmark file
    (``bench/bench_predict.py``)."""
    return published.data_rows(DATA)


@cache
def nemo_rows() -> tuple[dict[str, str], ...]:
    """NVIDIA's Megatron-Bridge benchmarks (:data:`NEMO`): only compared with predictions,
    never fitted on."""
    return published.data_rows(NEMO)


@cache
def vtrain_rows() -> tuple[dict[str, str], ...]:
    """vTrain's single-node runs as published (the d_model 1024 half the project holds), on
    which Megatron-DeepSpeed's host-side floor is measured (:data:`HOST_FLOOR`)."""
    return published.data_rows(HOST_FLOOR["megatron-deepspeed"])


@cache
def holdout_rows() -> tuple[dict[str, str], ...]:
    """Published runs outside the development split (:data:`HOLDOUT`): only compared with
    predictions, never fitted on."""
    return published.data_rows(HOLDOUT)


@dataclass(frozen=True)
class Comparison:
    rows: tuple[dict, ...]
    interpretations: tuple[Interpretation, ...]
    reported: np.ndarray
    bound: np.ndarray
    calibrated: np.ndarray

    @property
    def n(self) -> int:
        return len(self.reported)

    @property
    def below_bound(self) -> np.ndarray:
        return self.reported <= self.bound

    @property
    def errors(self) -> np.ndarray:
        return self.calibrated - self.reported

    @property
    def median_abs_error_points(self) -> float:
        return float(np.median(np.abs(self.errors)) * 100)


def compare(rows, factors: Factors) -> Comparison:
    """The rows whose throughput can be modelled, with reported, bound and calibrated
    utilization in each row's own FLOP counting."""
    kept, its, rep, bnd, cal = [], [], [], [], []
    for row in rows:
        try:
            it = interpret(row)
        except ValueError:
            continue
        if it.reported is None:
            continue
        kept.append(row)
        its.append(it)
        rep.append(it.reported)
        parts = components(it.config)
        bnd.append(utilization(predict(it.config, BOUND, parts), it.counting))
        cal.append(utilization(predict(it.config, factors, parts), it.counting))
    return Comparison(tuple(kept), tuple(its), np.array(rep), np.array(bnd), np.array(cal))


#: The values of each calibration factor a fit may try (:func:`calibrate`).
CALIBRATION_GRID = {
    "matmul": np.round(np.arange(0.30, 1.0001, 0.025), 3),
    "collective": np.round(np.arange(0.20, 1.0001, 0.05), 3),
    "overlap": np.round(np.arange(0.0, 1.0001, 0.1), 3),
}


def _modelled(rows) -> list[Interpretation]:
    out = []
    for row in rows:
        try:
            it = interpret(row)
        except ValueError:
            continue
        if it.reported is not None:
            out.append(it)
    return out


#: The factors :func:`calibrate` fits by default: the matmul efficiency alone.  The collective
#: efficiency is measured (:func:`measured_collective_efficiency`) and the overlap is none.
#: Fitting all three on the development rows gave about the same median error in sample and
#: a larger one on a source left out, the fitted collective efficiency moving widely with the
#: source left out: the three trade off against each other on these rows (the chapter *Real
#: runs* compares the two fits, with their errors).
FITTED = ("matmul",)
#: The overlap when it is not fitted: communication adds to the step (the three-factor fit
#: on every development row chose it too).
FIXED_OVERLAP = 0.0


@cache
def measured_collective_efficiency() -> float:
    """The all-reduce measurements' fitted bus bandwidth (:func:`dmlimits.measured.nccl.fit`,
    Fernandez et al.'s scan on nodes of H100s) over the line rate of a node's NICs, one a GPU
    (the ``h100`` cluster's): the share of the network a collective achieves, measured
    apart from any training run."""
    h100 = CLUSTERS["h100"]
    return nccl.fit().bus_bandwidth / (h100.node_size * h100.nic)


def calibrate(
    rows=None,
    grid: dict | None = None,
    fitted: tuple[str, ...] = FITTED,
    operations: bool = True,
    windows: bool = False,
) -> Factors:
    """The factors minimising the median absolute error of utilization over ``rows`` (the
    development rows by default), by exhaustive search over :data:`CALIBRATION_GRID`; ties go
    to the smaller mean absolute error.  Only the factors named in ``fitted`` are searched
    (:data:`FITTED` by default); the collective efficiency is otherwise
    :func:`measured_collective_efficiency` and the overlap :data:`FIXED_OVERLAP`.
    ``operations``: the step timed operation by operation (:mod:`dmlimits.measured.operations`,
    the calibrated mode's way) or, ``False``, as its FLOP at one matmul efficiency (the simpler
    step model; the chapter *Real runs* compares the two).
    ``windows``: each collective hidden behind its own window of compute
    (:data:`OVERLAP_WINDOWS`) rather than behind the overlap factor's share of the step."""
    unknown = set(fitted) - set(CALIBRATION_GRID)
    if unknown or not fitted:
        raise ValueError(
            f"fitted: got {fitted!r}; expected one or more of {sorted(CALIBRATION_GRID)}"
        )
    its = _modelled(dev_rows() if rows is None else rows)
    if not its:
        raise ValueError("no row with a throughput metric to calibrate on")
    fixed = {
        "matmul": CALIBRATION_GRID["matmul"],
        "collective": np.array([measured_collective_efficiency()]),
        "overlap": np.array([FIXED_OVERLAP]),
    }
    grid = {k: (grid or CALIBRATION_GRID)[k] if k in fitted else fixed[k] for k in fixed}
    reported = np.array([it.reported for it in its])
    # Utilization = ideal time (the row's FLOP at peak) over the modelled step time.
    ideal = np.array([ideal_time(it.config, it.counting) for it in its])
    comps = [components(it.config) for it in its]
    mm, cc, ov = np.meshgrid(grid["matmul"], grid["collective"], grid["overlap"], indexing="ij")
    shape = (*mm.shape, 1)
    parts = {k: np.array([c[k] for c in comps]) for k in PARTS}
    f = Factors(
        mm.reshape(shape),
        cc.reshape(shape),
        ov.reshape(shape),
        serial_tp=True,
        latency=True,
        derate=True,
        operations=operations,
        windows=windows,
    )
    step = combine(parts, f)["step"]
    err = np.abs(ideal / step - reported)
    median = np.round(np.median(err, axis=-1), 6)
    mean = np.mean(err, axis=-1)
    order = np.lexsort((mean.ravel(), median.ravel()))
    i = np.unravel_index(order[0], median.shape)
    return Factors(
        float(mm[i]),
        float(cc[i]),
        float(ov[i]),
        serial_tp=True,
        latency=True,
        derate=True,
        operations=operations,
        windows=windows,
    )


def calibrated() -> Factors:
    """The calibrated mode's factors: :func:`calibrate` on the development rows, once for each
    state of the single-GPU models (:func:`dmlimits.measured.operations.utilization_state`)."""
    return _calibrated(operations.utilization_state())


@cache
def _calibrated(_state: tuple) -> Factors:
    return calibrate()


def with_factors(**values: float) -> Factors:
    return replace(calibrated(), **values)


def describe(cfg: Config) -> dict:
    """A configuration as plain values (for JSON)."""
    out = {k: v for k, v in asdict(cfg).items() if k not in ("shape", "cluster")}
    out["model"] = cfg.shape.name
    out["params"] = cfg.shape.params
    out["gpu"] = cfg.cluster.name
    out["micro_batches"] = cfg.micro_batches
    return out


# --- Strong scaling at a fixed batch (Fernandez et al. 2024) ------------------------------------
GPU_COUNTS = (8, 16, 32, 64, 128, 256, 512, 1024, 2048)
SEQ_LEN = 4096  # Llama 2's context
# The fixed global batch: the smallest batch of whole sequences that still gives each of 2048
# GPUs one sequence under FSDP alone (Fernandez et al. do not state theirs).
FIXED_BATCH_TOKENS = max(GPU_COUNTS) * SEQ_LEN
STRATEGIES = {
    "FSDP": {},
    "FSDP + TP 2": {"tp": 2},
    "FSDP + TP 4": {"tp": 4},
    "FSDP + PP 2": {"pp": 2},
    "FSDP + PP 4": {"pp": 4},
}


def scaling_config(
    shape: str,
    gpu: str,
    n_gpus: int,
    strategy: str,
    batch_tokens: float = FIXED_BATCH_TOKENS,
    hardware: Cluster | None = None,
) -> Config:
    """The configuration of Fernandez et al.'s setting at ``n_gpus`` GPUs with ``strategy``;
    ``hardware``, when given, replaces the named GPU's cluster (to test a changed fabric)."""
    try:
        extra = STRATEGIES[strategy]
    except KeyError:
        raise ValueError(
            f"unknown strategy {strategy!r}; expected one of {', '.join(STRATEGIES)}"
        ) from None
    tp, pp = extra.get("tp", 1), extra.get("pp", 1)
    # The least recomputation that fits the GPU's memory, as a practitioner would choose it;
    # full recomputation when nothing fits (memory.peak says so).
    for recompute in ("none", "full"):
        cfg = Config(
            shape=transformer.shape(shape),
            cluster=cluster(gpu) if hardware is None else hardware,
            n_gpus=n_gpus,
            global_batch_tokens=batch_tokens,
            seq_len=SEQ_LEN,
            tp=tp,
            pp=pp,
            dp=n_gpus // (tp * pp),
            sharding="fsdp",
            recompute=recompute,
        )
        if memory.peak(cfg).fits:
            break
    return cfg


def strong_scaling(
    shape: str,
    gpu: str,
    strategy: str,
    factors: Factors | None = None,
    counts: tuple[int, ...] = GPU_COUNTS,
    batch_tokens: float = FIXED_BATCH_TOKENS,
    hardware: Cluster | None = None,
) -> dict[str, np.ndarray]:
    """Per-GPU and overall throughput, MFU and exposed communication against the GPU count;
    ``fits`` says which configurations fit the GPUs' memory (:mod:`dmlimits.measured.memory`),
    and the others' throughput, MFU and times are ``NaN``: they do not run."""
    factors = factors or calibrated()
    cfgs = [scaling_config(shape, gpu, n, strategy, batch_tokens, hardware) for n in counts]
    fits = np.array([memory.peak(c).fits for c in cfgs])
    preds = [predict(c, factors) for c in cfgs]
    out = {
        "gpus": np.array(counts, dtype=float),
        "tokens_per_s_per_gpu": np.array([p.tokens_per_s_per_gpu for p in preds]),
        "tokens_per_s": np.array([p.tokens_per_s for p in preds]),
        "mfu": np.array([p.mfu for p in preds]),
        "exposed_s": np.array([p.exposed_comm_s for p in preds]),
        "comm_s": np.array(
            [sum(v for k, v in p.breakdown.items() if k not in COMPUTE_PARTS) for p in preds]
        ),
        "compute_s": np.array([sum(p.breakdown[k] for k in COMPUTE_PARTS) for p in preds]),
        "step_s": np.array([p.step_time_s for p in preds]),
        "energy_per_token_j": np.array([p.energy_per_token_j for p in preds]),
    }
    for key in out:
        if key != "gpus":
            out[key] = np.where(fits, out[key], np.nan)
    out["fits"] = fits
    out["recompute"] = np.array([c.recompute for c in cfgs])
    return out
