"""The operations of one training step on one GPU, besides its collectives.

The bound of :mod:`dmlimits.measured.runs` times a step's compute as its FLOP at one efficiency,
the same for every matmul of every model.  A step runs more than that: matmuls whose efficiency
depends on their shape, and between them operations that do almost no arithmetic and whose time
is the bytes they move through HBM.  The calibrated mode times both:

* **Matmuls** by the book's single-GPU matmul model (:mod:`dmlimits.costs.matmul`, the first paper's
  roofline over HBM, L2 and shared memory, plus a kernel latency), one call for each of a block's
  four weight matrices on one tensor-parallel rank (the fused query, key and value projection;
  the output projection; the MLP's up-projections, fused; its down-projection; latent attention
  has five projections of its own, and a mixture of experts' layers add their experts' and
  their router's, :func:`block_matmuls`) and for the output projection to the vocabulary, at
  the nanobatch of one micro-batch: ``b = b_mb s / N_CP`` tokens.  Each runs forward (again
  when recomputed), for the activation gradient and for the weight gradient.  A small model's
  matmuls, or a large tensor-parallel degree's thin shards, run below the clock derate: the
  kernel latency is a larger share and the tiles fill less.
  FP8 runs take the matmul model's time at the ratio of the 16-bit to the FP8 peak for their
  blocks' matmuls; the output layer stays in 16-bit, as every framework of the project's FP8
  rows runs it.  Megatron-Core's ``GPTModel`` builds it as ``tensor_parallel.ColumnParallelLinear``,
  not a Transformer Engine module, which FP8's autocast leaves alone (NVIDIA/Megatron-LM at
  92c8482, the commit Megatron-Bridge 00b7660be0 pins, under NVIDIA's runs); torchtitan's Float8
  conversion skips the module ``output`` (``module_filter_fn`` in ``torchtitan/float8.py`` at
  9dec370, its December 2024 H100 runs; ``filter_fqns = ["output"]`` in ``llama3_8b.toml`` at
  e7c0cae, its June 2025 H200 runs).
* **Attention's core** at the utilization FlashAttention-2 reaches on the GPU: the upper end of
  its published range on the A100 (Dao 2023) and its published utilization on the H100 (Shah
  et al. 2024), which Hopper GPUs share (:data:`ATTENTION_UTILIZATION`).  The runs of the
  development split and of the holdout file used FlashAttention-style kernels or (Megatron-LM in
  2021-22) kernels that kept the scores, which this counts as FlashAttention's.
* **Memory-bound operations**, counted operation by operation (derivations ``run-operations-bytes``
  and ``run-operations-memory``): a block's two norms, two residual additions, rotary embedding of
  its queries and keys and its MLP's nonlinearity read and write the token's vectors through HBM (a
  GPT block's two dropouts stand in for the rotary embedding: the same traffic, to a few per cent),
  each a kernel that pays the kernel latency; the loss over the vocabulary; and Adam's update of
  the GPU's share of the optimizer state, once a step.

Every number is the hardware preset's, a published measurement or a count; nothing here is
fitted.  The calibrated mode still fits one factor, the matmul efficiency, which divides the
matmul model's time (:func:`dmlimits.measured.runs.calibrate`).
"""

from __future__ import annotations

from contextlib import contextmanager
from functools import cache
from typing import TYPE_CHECKING

import numpy as np
import sympy as sp

from dmlimits.core import published
from dmlimits.core import scenario as sc
from dmlimits.core import symbols as s
from dmlimits.core import units as u
from dmlimits.core.derivation import Derivation, Step, Substitution, derivation, register
from dmlimits.costs import matmul, model
from dmlimits.costs import pipeline as ppm
from dmlimits.costs import tensor_parallel as tpm
from dmlimits.measured import memory, transformer
from dmlimits.measured.configuration import SHARDING

if TYPE_CHECKING:
    from dmlimits.measured.configuration import Config

CHAPTER = "diminishing_returns"
_S, _B = u.second, u.byte
_decl = s.REGISTRY.declare

# --- Symbols -----------------------------------------------------------------------------------
t_mem = _decl("t_mem", r"t_{\mathrm{mem}}", "time of a step's memory-bound operations on one GPU",
              _S, defined_in=CHAPTER)  # fmt: skip
q_blk = _decl("Q_blk", r"Q_{\mathrm{blk}}", "bytes a block's memory-bound operations move per "
              "token in a step", _B, defined_in=CHAPTER)  # fmt: skip
q_fwd = _decl("Q_fwd", r"Q_{\mathrm{fwd}}", "bytes a block's memory-bound operations move per "
              "token in one forward pass", _B, defined_in=CHAPTER)  # fmt: skip
k_bwd = _decl("k_bwd", r"k_{\mathrm{bwd}}", "traffic of a memory-bound operation's backward pass, "
              "in forward passes", defined_in=CHAPTER)  # fmt: skip
n_kern = _decl("n_k", r"n_{\mathrm{k}}", "memory-bound kernels of a block's forward pass",
               defined_in=CHAPTER)  # fmt: skip
q_head = _decl("Q_head", r"Q_{\mathrm{head}}", "bytes the loss over the vocabulary moves per "
               "token", _B, defined_in=CHAPTER)  # fmt: skip
q_opt = _decl("Q_opt", r"Q_{\mathrm{opt}}", "bytes the optimizer step moves per parameter", _B,
              defined_in=CHAPTER)  # fmt: skip
tokens_gpu = _decl("T_GPU", r"T_{\mathrm{GPU}}", "tokens that pass through one GPU's layers in a "
                   "step: B / (N_DP N_CP)", defined_in=CHAPTER)  # fmt: skip
c_loss = _decl("c_loss", r"c_{\mathrm{loss}}", "bytes the loss moves per vocabulary entry and "
               "token", _B, defined_in=CHAPTER)  # fmt: skip

#: Kernels of a block's forward pass that do no matmul: two norms, two residual additions, the
#: rotary embedding and the MLP's nonlinearity.
FORWARD_KERNELS = 6
#: A memory-bound operation's backward pass reads its saved input and the output's gradient and
#: writes the input's gradient: about twice its forward traffic.
BACKWARD_PASSES = 2
#: The loss in fp32, per vocabulary entry and token: its forward reads the logits and writes
#: their softmax, its backward reads that and writes the logits' gradient; four 4-byte passes.
LOSS_BYTES = 16
#: Mixed-precision Adam per parameter: reads the fp32 gradient, master weight and two moments
#: (16 bytes), writes the master weight and moments (12) and the 16-bit weight (2).
OPTIMIZER_BYTES = 30


@register
def block_bytes_derivation() -> Derivation:
    passes = sp.Eq(q_blk, (1 + transformer.rho_b + k_bwd) * q_fwd)
    count = Substitution(
        "a block's memory-bound operations, one by one",
        {
            q_fwd: matmul.word
            * (10 * s.d_model / memory.t_sp + (2 * (s.d_model + memory.d_kv)
                                               + transformer.mlp_mats * s.d_ff) / tpm.n_tp),
        },
        kind="definition",
    )  # fmt: skip
    e2 = count.apply(passes)
    twice = Substitution(
        "a backward pass moves twice its forward's bytes",
        {k_bwd: BACKWARD_PASSES},
        kind="assumption",
    )
    return derivation(
        "run-operations-bytes",
        "The bytes a block's memory-bound operations move per token",
        [
            Step(
                "A block's traffic per token in a step: its forward pass, the recomputed "
                "forward, and a backward pass that moves some multiple of the forward's bytes.",
                passes,
            ),
            Step(
                "Counted operation by operation: two norms (each reads and writes a vector as "
                "wide as the model), two residual additions (each reads two and writes one), "
                "the rotary embedding of the queries and keys (reads and writes them) and the "
                "MLP's nonlinearity (reads its up-projections, writes one). Norms and residuals "
                "are split over the tensor-parallel ranks only with sequence parallelism.",
                e2,
                using=count,
            ),
            Step(
                "A backward pass reads the operation's saved input and its output's gradient "
                "and writes its input's gradient: twice the forward's bytes.",
                twice.apply(e2),
                using=twice,
            ),
        ],
        chapter=CHAPTER,
    )


@register
def memory_ops_derivation() -> Derivation:
    tokens = tokens_gpu
    per_stage = s.n_layers / ppm.n_pp
    e1 = sp.Eq(
        t_mem,
        per_stage * (ppm.n_micro * (2 + transformer.rho_b) * n_kern * matmul.t_kernel
                     + tokens * q_blk / matmul.bw_hbm)
        + tokens * q_head / matmul.bw_hbm
        + q_opt * s.n_params / (tpm.n_tp * ppm.n_pp * memory.g_o * matmul.bw_hbm),
    )  # fmt: skip
    count = Substitution(
        "a block's memory-bound kernels; the loss, split over the vocabulary",
        {n_kern: FORWARD_KERNELS, q_head: c_loss * transformer.vocab / tpm.n_tp},
        kind="definition",
    )
    e2 = count.apply(e1)
    adam = Substitution(
        "an fp32 loss, mixed-precision Adam",
        {c_loss: LOSS_BYTES, q_opt: OPTIMIZER_BYTES},
        kind="assumption",
        source="rajbhandari2020zero",
    )
    return derivation(
        "run-operations-memory",
        "The memory-bound operations of one step on one GPU",
        [
            Step(
                "On a GPU of the last pipeline stage, which runs the loss: each of its blocks "
                "runs its memory-bound kernels for every micro-batch (forward, recomputed "
                "forward and backward; each pays the kernel latency) and moves its bytes (the "
                "derivation above) for each of the step's tokens that pass through the GPU; "
                "the loss moves its bytes for each of them too, and the optimizer updates the "
                "GPU's share of the optimizer state once a step. (So the calibrated mode "
                "counts the loss under Megatron-LM's default split; where the framework's "
                "split makes the stages uneven otherwise, it gives every stage an equal share "
                "of the loss and times the uneven stages by the schedule.)",
                e1,
            ),
            Step(
                "Six kernels a block's forward pass: two norms, two residual additions, the "
                "rotary embedding and the MLP's nonlinearity. The loss over the vocabulary is "
                "split by tensor parallelism.",
                e2,
                using=count,
            ),
            Step(
                "The loss runs in fp32 (its forward reads the logits and writes their softmax, "
                "its backward reads that and writes the logits' gradient: four passes of four "
                "bytes) and Adam reads and writes thirty bytes a parameter.",
                adam.apply(e2),
                using=adam,
            ),
        ],
        chapter=CHAPTER,
    )


q_sc = _decl("Q_sc", r"Q_{\mathrm{sc}}", "bytes an unfused attention's score operations move "
             "per token and block in a step", _B, defined_in=CHAPTER)  # fmt: skip
q_sf = _decl("q_sf", r"q_{\mathrm{sf}}", "bytes the score operations' forward pass moves per "
             "score", _B, defined_in=CHAPTER)  # fmt: skip
q_sb = _decl("q_sb", r"q_{\mathrm{sb}}", "bytes the score operations' backward pass moves per "
             "score", _B, defined_in=CHAPTER)  # fmt: skip
c_mask = _decl("c_mask", r"c_{\mathrm{mask}}", "bytes of a dropout mask per element", _B,
               defined_in=CHAPTER)  # fmt: skip
drop = _decl("delta_drop", r"\delta_{\mathrm{drop}}", "1 where attention's probabilities pass "
             "through dropout, 0 where not", defined_in=CHAPTER)  # fmt: skip
t_sc = _decl("t_sc", r"t_{\mathrm{sc}}", "time of a step's unfused score operations on one GPU",
             _S, defined_in=CHAPTER)  # fmt: skip
n_sk = _decl("n_sk", r"n_{\mathrm{sk}}", "score kernels of a block's forward pass",
             defined_in=CHAPTER)  # fmt: skip

#: Bytes of a dropout mask per element: PyTorch's dropout keeps a one-byte boolean mask.
MASK_BYTES = 1


@register
def scores_bytes_derivation() -> Derivation:
    rows = transformer.seq * transformer.n_heads / tpm.n_tp  # a token's scores on one rank
    per_token = sp.Eq(q_sc, rows * ((1 + transformer.rho_b) * q_sf + q_sb))
    count = Substitution(
        "the score operations, one by one",
        {
            q_sf: 2 * matmul.word + drop * (2 * matmul.word + c_mask),
            q_sb: 3 * matmul.word + drop * (2 * matmul.word + c_mask),
        },
        kind="definition",
    )
    e2 = count.apply(per_token)
    mask = Substitution(
        "a one-byte dropout mask",
        {c_mask: MASK_BYTES},
        kind="assumption",
        source="paszke2019pytorch",
    )
    return derivation(
        "run-operations-scores-bytes",
        "The bytes an attention that is not fused moves through its scores",
        [
            Step(
                "Without a fused kernel, attention writes each token's scores against every "
                "token of its sequence, one row for each of the rank's heads, to HBM and reads "
                "them back at every operation between its two batched matmuls: in the forward "
                "pass, again when it is recomputed, and in the backward pass.",
                per_token,
            ),
            Step(
                "Forward: the softmax (scaled and masked in the same kernel) reads the scores "
                "and writes the probabilities; dropout reads those and writes the dropped "
                "probabilities and its mask. Backward: dropout's reads the gradient and the "
                "mask and writes a gradient; the softmax's reads that and the probabilities and "
                "writes the scores' gradient.",
                e2,
                using=count,
            ),
            Step(
                "PyTorch's dropout keeps a one-byte mask per element.",
                mask.apply(e2),
                using=mask,
            ),
        ],
        chapter=CHAPTER,
    )


@register
def scores_time_derivation() -> Derivation:
    e1 = sp.Eq(
        t_sc,
        s.n_layers / ppm.n_pp
        * (ppm.n_micro * (2 + transformer.rho_b) * n_sk * matmul.t_kernel
           + tokens_gpu * q_sc / matmul.bw_hbm),
    )  # fmt: skip
    kernels = Substitution(
        "the score kernels of one pass",
        {n_sk: 1 + drop},
        kind="definition",
    )
    return derivation(
        "run-operations-scores",
        "The score operations of an attention that is not fused, in one step on one GPU",
        [
            Step(
                "Each block of a stage runs the score kernels for every micro-batch (forward, "
                "recomputed forward and backward: each pays the kernel latency) and moves their "
                "bytes (the derivation above) for every token that passes through the GPU.",
                e1,
            ),
            Step(
                "A softmax kernel, and a dropout kernel where there is dropout, in each pass.",
                kernels.apply(e1),
                using=kernels,
            ),
        ],
        chapter=CHAPTER,
    )


# Dimension-checked before the assumptions' numbers replace the bytes a pass, loss and
# parameter move.
COST_FORMULAS = {
    "q_blk": (block_bytes_derivation().steps[1].expr.rhs, _B),
    "t_mem": (memory_ops_derivation().steps[1].expr.rhs, _S),
    "q_sc": (scores_bytes_derivation().steps[1].expr.rhs, _B),
    "t_sc": (scores_time_derivation().steps[1].expr.rhs, _S),
}

_ARGS = (
    tokens_gpu, s.n_layers, ppm.n_pp, ppm.n_micro, transformer.rho_b, matmul.t_kernel,
    matmul.bw_hbm, matmul.word, s.d_model, memory.t_sp, memory.d_kv, transformer.mlp_mats, s.d_ff,
    tpm.n_tp, transformer.vocab, s.n_params, k_bwd, c_loss, q_opt, memory.g_o,
)  # fmt: skip


_SCORE_ARGS = (
    tokens_gpu, s.n_layers, ppm.n_pp, ppm.n_micro, transformer.rho_b, matmul.t_kernel,
    matmul.bw_hbm, matmul.word, transformer.seq, transformer.n_heads, tpm.n_tp, drop,
)  # fmt: skip


@cache
def _scores_fn():
    """The time of a step's unfused score operations, their bytes put into it."""
    expr = scores_time_derivation().steps[-1].expr.rhs.subs(
        q_sc, scores_bytes_derivation().steps[-1].expr.rhs
    )
    return sp.lambdify(_SCORE_ARGS, expr, "numpy")


def unfused_attention(cfg: Config) -> float:
    """Seconds of a step's attention core on one GPU where it is not fused
    (``cfg.attention_kernel == "unfused"``): the scores' and the weighted values' batched
    matmuls by the matmul model, each one kernel over the micro-batch's sequences and the
    rank's heads (queries and keys of the head's width, every score of the sequence computed:
    the causal mask is applied after), for every block and micro-batch, forward (again when
    recomputed) and backward; and the score operations between them
    (:func:`scores_time_derivation`)."""
    sh, scn = cfg.shape, device(cfg.cluster.name)
    if cfg.cp > 1:
        raise ValueError(
            f"cp={cfg.cp}: an unfused attention is modelled without context parallelism; "
            "expected cp=1"
        )
    rb, _ = transformer.RECOMPUTE[cfg.recompute]
    d_head, seq = sh.d_model / sh.heads, cfg.seq_len
    rows = cfg.mbs * sh.heads / cfg.tp * seq  # score rows of a micro-batch on one rank
    matmuls = [(d_head, seq, rows, 1.0), (seq, d_head, rows, 1.0)]
    m = cfg.micro_batches
    core = m * sh.layers / cfg.pp * float(passes_time(scn, matmuls, [rb, rb]).sum())
    scores = _scores_fn()(
        cfg.global_batch_tokens / cfg.dp, sh.layers, cfg.pp, m, rb,
        float(scn["hardware.kernel_latency"]), float(scn["hardware.hbm_bandwidth"]),
        float(scn["model.word_bytes"]), seq, sh.heads, cfg.tp, float(sh.trains_with_dropout),
    )  # fmt: skip
    return core + float(scores)


@cache
def _memory_fn():
    """The memory-bound time of a step, the block's bytes put into it."""
    expr = COST_FORMULAS["t_mem"][0].subs(q_blk, COST_FORMULAS["q_blk"][0])
    return sp.lambdify(_ARGS, expr, "numpy")


# --- The GPUs' single-device models -------------------------------------------------------------
#: The book's hardware preset that times each cluster's matmuls and memory-bound operations,
#: with what differs from it.  The clusters of the published A100 runs have the 80 GB A100,
#: whose HBM2e moves 2,039 GB/s (NVIDIA A100 datasheet); the preset is the 40 GB card.
PRESETS: dict[str, tuple[str, dict[str, float]]] = {
    "a100": ("a100", {"hardware.hbm_bandwidth": 2.039e12, "hardware.hbm_capacity": 80e9}),
    "h100": ("h100", {}),
    "h100-500w": ("h100", {}),
    "h200": ("h200", {}),
    "b200": ("b200", {}),
    "gb200-nvl72": ("gb200-nvl72", {}),
}


#: The share of the 16-bit peak attention's core reaches on each cluster's GPU: FlashAttention-2's
#: published utilization (the upper end of its range on the A100; on the H100, which the H200
#: shares); ``None``: no published figure (Blackwell), the GPU's clock derate instead.
ATTENTION_UTILIZATION: dict[str, float | None] = {
    "a100": published.value("flash2.a100_utilization_max"),
    "h100": published.value("flash3.h100_flash2_utilization"),
    "h100-500w": published.value("flash3.h100_flash2_utilization"),
    "h200": published.value("flash3.h100_flash2_utilization"),
    "b200": None,
    "gb200-nvl72": None,
}


#: FlashAttention-2's measured forward and backward throughput on the A100 and the H100, by head
#: dimension, sequence length and mask (Dao 2023; the data file's ``#`` lines say how it was
#: read and how its FLOP are counted).
ATTENTION_KERNEL_DATA = "attention_kernels.csv"
#: The GPU of :data:`ATTENTION_KERNEL_DATA` whose measurements time each cluster's attention:
#: the H200 is the H100's chip with more and faster HBM, which FlashAttention's kernel, bound by
#: its arithmetic, does not use.  A cluster not named here has no measurements: its attention
#: is timed at :data:`ATTENTION_UTILIZATION` (the clock derate where that has none).
KERNEL_GPUS = {"a100": "a100", "h100": "h100", "h100-500w": "h100", "h200": "h100"}
#: The kernel of the table a fused attention runs (``Config.attention_kernel`` ``flash``).
FUSED_KERNEL = "flash2"
#: How the benchmark behind :data:`ATTENTION_KERNEL_DATA` counts a fused attention's FLOP, in
#: forward passes (its backward is 2.5 forwards: the kernel computes the scores again), and
#: the share a causal mask leaves (every run the book models trains a causal language model).
BENCHMARK_PASSES, CAUSAL_SHARE = 3.5, 0.5
#: How attention's core is timed where its GPU has kernel measurements (:func:`attention_rule`).
ATTENTION_RULES = {
    "measured": "FlashAttention-2's measured throughput at the run's head dimension and sequence "
    "length, with the causal mask (ATTENTION_KERNEL_DATA)",
    "utilization": "one published share of the 16-bit peak per GPU, whatever the shape "
    "(ATTENTION_UTILIZATION)",
}
#: The rule in force: one published share of the peak per GPU.  FlashAttention-2's measured
#: throughput, at each run's head dimension and sequence, predicts the development rows worse
#: (its kernel alone runs faster than attention does in the runs: the long sequences most;
#: ``bench/bench_predict.py`` prints both), so it is a test, not the calibrated mode.
ATTENTION = {"rule": "utilization"}


@cache
def kernel_table() -> dict[tuple[str, str, bool, int], tuple[np.ndarray, np.ndarray]]:
    """:data:`ATTENTION_KERNEL_DATA` by ``(gpu, kernel, causal, head_dim)``: the sequence
    lengths measured and the throughput at each (FLOP/s, as the benchmark counts them)."""
    table: dict[tuple[str, str, bool, int], list[tuple[float, float]]] = {}
    for row in published.data_rows(ATTENTION_KERNEL_DATA):
        key = (row["gpu"], row["kernel"], row["causal"] == "true", int(row["head_dim"]))
        table.setdefault(key, []).append((float(row["seq_len"]), float(row["tflops"]) * 1e12))
    return {
        k: (np.array([s for s, _ in sorted(v)]), np.array([f for _, f in sorted(v)]))
        for k, v in table.items()
    }


def kernel_rate(gpu: str, kernel: str, head_dim: float, seq_len: float, causal: bool = True):
    """The measured throughput (FLOP/s, the benchmark's count) of attention kernel ``kernel`` on
    ``gpu`` (a GPU of :data:`ATTENTION_KERNEL_DATA`) at a head dimension and sequence length:
    linear in the logarithm of the sequence between the lengths measured, the nearest one's
    outside them; linear in the head dimension between the two measured (64 and 128), the
    nearer one's outside them."""
    dims = sorted({k[3] for k in kernel_table() if k[:3] == (gpu, kernel, causal)})
    if not dims:
        raise ValueError(
            f"no measurements of kernel {kernel!r} on {gpu!r}; expected one of "
            f"{', '.join(sorted({f'{k[1]} on {k[0]}' for k in kernel_table()}))}"
        )

    def at(dim: int) -> float:
        seqs, rates = kernel_table()[(gpu, kernel, causal, dim)]
        return float(np.interp(np.log2(seq_len), np.log2(seqs), rates))

    lo, hi = dims[0], dims[-1]
    h = min(max(float(head_dim), lo), hi)
    if hi == lo:
        return at(lo)
    w = (h - lo) / (hi - lo)
    return (1 - w) * at(lo) + w * at(hi)


@contextmanager
def attention_rule(rule: str):
    """Within the ``with`` block, attention's core is timed by ``rule``
    (:data:`ATTENTION_RULES`): to measure what the kernel measurements change.  Inside it,
    :func:`dmlimits.measured.runs.calibrated` fits afresh, as in :func:`attention_utilizations`."""
    if rule not in ATTENTION_RULES:
        raise ValueError(
            f"attention rule: got {rule!r}; expected one of {', '.join(ATTENTION_RULES)}"
        )
    saved = ATTENTION["rule"]
    ATTENTION["rule"] = rule
    try:
        yield
    finally:
        ATTENTION["rule"] = saved


def fused_attention(cfg: Config) -> float:
    """Seconds of a step's fused attention core on one GPU: its FLOP over FlashAttention-2's
    measured throughput on the GPU at the run's head dimension and sequence length, causal
    (:func:`kernel_rate`), the FLOP counted as the measurements count them (the model's count
    of a full score matrix, halved by the causal mask, and the backward as 2.5 forwards, plus
    a forward for each recomputation); or, under the ``utilization`` rule and on a GPU without
    measurements, the model's count at :func:`attention_utilization`."""
    sh, c = cfg.shape, cfg.cluster
    flop = sh.attention_flop_per_token(cfg.seq_len, cfg.recompute)
    share = cfg.global_batch_tokens * flop / cfg.n_gpus  # the GPU's share of the step's FLOP
    gpu = KERNEL_GPUS.get(c.name)
    if gpu is None or ATTENTION["rule"] == "utilization" or c.name in _SCALAR:
        return share / (c.peak_16bit * attention_utilization(c))
    _, ra = transformer.RECOMPUTE[cfg.recompute]
    passes = model.PASS_COUNTS.mapping[s.macs_per_param_token]  # the model's count: 3
    counted = share * CAUSAL_SHARE * (BENCHMARK_PASSES + ra) / (passes + ra)
    head_dim = sh.attention_widths[0] / sh.heads
    return counted / kernel_rate(gpu, FUSED_KERNEL, head_dim, cfg.seq_len)


#: Clusters whose attention :func:`attention_utilizations` has set to one share of the peak
#: for a while: timed at it, not by the kernel measurements.
_SCALAR: set[str] = set()


@contextmanager
def attention_utilizations(values: dict[str, float]):
    """Within the ``with`` block, attention's core reaches ``values`` (cluster name -> share of
    the 16-bit peak) instead of :data:`ATTENTION_UTILIZATION`'s, and those clusters are timed
    at that share rather than by the kernel measurements (:func:`fused_attention`): to test how
    much a result depends on them.  Inside it, :func:`dmlimits.measured.runs.calibrated` fits
    the factors afresh (once for each state, :func:`utilization_state`)."""
    for name, value in values.items():
        if name not in ATTENTION_UTILIZATION:
            raise ValueError(
                f"no cluster {name!r}; expected one of {', '.join(ATTENTION_UTILIZATION)}"
            )
        if not 0 < value <= 1:
            raise ValueError(f"utilization of {name}: expected a share in (0, 1], got {value!r}")
    saved, saved_scalar = dict(ATTENTION_UTILIZATION), set(_SCALAR)
    ATTENTION_UTILIZATION.update(values)
    _SCALAR.update(values)
    try:
        yield
    finally:
        _SCALAR.clear()
        _SCALAR.update(saved_scalar)
        ATTENTION_UTILIZATION.clear()
        ATTENTION_UTILIZATION.update(saved)


def _preset_of(cluster: str) -> tuple[str, dict[str, float]]:
    """The preset and overrides of :data:`PRESETS` that time ``cluster``'s GPU."""
    try:
        return PRESETS[cluster]
    except KeyError:
        raise ValueError(
            f"no single-GPU model for cluster {cluster!r}; expected one of {', '.join(PRESETS)}"
        ) from None


@contextmanager
def device_values(cluster: str, values: dict[str, float]):
    """Within the ``with`` block, ``cluster``'s GPU is timed with ``values`` (scenario keys ->
    values) over what :data:`PRESETS` gives it: to test how much a result depends on them, for
    example Blackwell's tensor memory switched off (``hardware.tensor_memory_per_sm=0`` and
    ``hardware.mma_sms=1``, the paper's model unchanged).  A bad key or value raises the
    scenario's error.  Inside it, :func:`dmlimits.measured.runs.calibrated` fits afresh, as in
    :func:`attention_utilizations`."""
    preset, overrides = _preset_of(cluster)
    changed = {**overrides, **values}
    with sc.unwatched():
        sc.resolve(preset, overrides=changed)  # refuses a bad key or value here
    PRESETS[cluster] = (preset, changed)
    device.cache_clear()
    try:
        yield
    finally:
        PRESETS[cluster] = (preset, overrides)
        device.cache_clear()


#: Where :func:`parts` can put a pipeline's output layer and loss (:func:`placement`).
PLACEMENTS = {
    "even": "every stage an equal share of them (the bound's)",
    "placed": "where each run's framework puts them: on the last stage beside an equal share "
    "of the blocks (Megatron-LM's default split), or as the framework's split deals them and "
    "the blocks, its uneven stages timed by the schedule (nanotron's; Megatron-Core's with the "
    "embedding and the loss counted as layers; torchtitan's: the configuration's ``stages``)",
    "last": "on the last stage, for every run",
}
#: The placement in force: the calibrated mode places the output layer and the loss where each
#: run's framework does, because that is what the frameworks do.  Held out, the development
#: rows are predicted better than in equal shares, and as well as with the last stage for
#: every run on MFU and on step time (the chapter *Real runs*).
STAGES = {"head": "placed"}


@contextmanager
def placement(rule: str):
    """Within the ``with`` block, the output layer and the loss are placed by ``rule``
    (:data:`PLACEMENTS`): to measure what the placement changes
    (:func:`dmlimits.measured.confront.stages_compared`).  Inside it,
    :func:`dmlimits.measured.runs.calibrated` fits afresh, as in :func:`attention_utilizations`."""
    if rule not in PLACEMENTS:
        raise ValueError(f"placement: got {rule!r}; expected one of {', '.join(PLACEMENTS)}")
    saved = STAGES["head"]
    STAGES["head"] = rule
    try:
        yield
    finally:
        STAGES["head"] = saved


def utilization_state() -> tuple:
    """The attention utilizations, single-GPU models and placement of the output layer in force
    (:data:`ATTENTION_UTILIZATION`, :data:`PRESETS` and :data:`STAGES`, as changed by
    :func:`attention_utilizations`, :func:`device_values` and :func:`placement`), as a key
    for what depends on them."""
    devices = tuple((k, p, tuple(sorted(o.items()))) for k, (p, o) in sorted(PRESETS.items()))
    return (
        tuple(sorted(ATTENTION_UTILIZATION.items())),
        devices,
        STAGES["head"],
        ATTENTION["rule"],
        tuple(sorted(_SCALAR)),
    )


def attention_utilization(cluster) -> float:
    """The share of its 16-bit peak a cluster's GPU reaches in attention's core
    (:data:`ATTENTION_UTILIZATION`; the clock derate where nothing is published)."""
    value = ATTENTION_UTILIZATION.get(cluster.name)
    return cluster.derate if value is None else value


@cache
def device(cluster: str) -> sc.Scenario:
    """The scenario whose hardware times one GPU of ``cluster`` (:data:`PRESETS`)."""
    preset, overrides = _preset_of(cluster)
    with sc.unwatched():  # the GPU the run was measured on, whatever the book's
        return sc.resolve(preset, overrides=overrides)


def block_matmuls(cfg: Config, b: float) -> list[tuple[float, float, float, float]]:
    """One block's matmuls on one tensor-parallel rank for a micro-batch of ``b`` tokens, as
    ``(d1, d2, nanobatch, count)``: the weight shape, the tokens each meets and how many such
    matmuls a block runs (averaged over the layers of a mixture of experts, whose dense layers
    and MoE layers differ; an MoE layer's router included)."""
    sh, t = cfg.shape, cfg.tp
    d = sh.d_model
    if sh.latent:
        # Latent attention: the down-projections (to the compressed query, and to the compressed
        # key-and-value with the rotary key) whole on every rank, as DeepSeek-V3's released
        # model code keeps them; the up-projections split by heads (column-parallel); the
        # output projection row-parallel.  (How Megatron, which NVIDIA's runs use, splits the
        # down-projections is not checked here; every DeepSeek-V3 row the book has runs
        # without tensor parallelism, where the question does not arise.)
        wqk, wv = sh.attention_widths
        out = [
            (d, sh.q_rank, b, 1.0),
            (sh.q_rank, wqk / t, b, 1.0),
            (d, sh.kv_rank + sh.rope_dim, b, 1.0),
            (sh.kv_rank, (wqk - sh.heads * sh.rope_dim + wv) / t, b, 1.0),
            (wv / t, d, b, 1.0),
        ]
    else:
        out = [
            (d, (d + 2 * sh.kv_width) / t, b, 1.0),  # queries, keys and values, fused (column)
            (d / t, d, b, 1.0),  # the attention's output projection (row-parallel)
        ]
    mats = sh.mlp_mats - 1  # the up-projections, fused
    if not sh.moe:
        return [*out, (d, mats * sh.d_ff / t, b, 1.0), (sh.d_ff / t, d, b, 1.0)]
    dense, moe = sh.dense_layers / sh.layers, sh.moe_layers / sh.layers
    # Each of a GPU's experts meets the tokens routed to it from every expert-parallel rank.
    local = sh.experts / cfg.ep
    routed = b * sh.top_k * cfg.ep / sh.experts
    out += [
        (d, mats * sh.d_ff / t, b, dense),
        (sh.d_ff / t, d, b, dense),
        (d, mats * sh.expert_d_ff / t, routed, moe * local),
        (sh.expert_d_ff / t, d, routed, moe * local),
    ]
    if sh.shared_experts:
        width = sh.shared_experts * sh.expert_d_ff
        out += [(d, mats * width / t, b, moe), (width / t, d, b, moe)]
    # The router: every token's scores for every expert, a d_model x experts matmul on each
    # tensor-parallel rank for every token of the micro-batch (its FLOP are in the model's
    # count: Shape.flop_per_token).  A framework with sequence parallelism may route each
    # rank's share of the tokens only; every mixture-of-experts row of the book's files runs
    # without tensor parallelism, where the two agree.
    out.append((d, sh.experts, b, moe))
    return [m for m in out if m[3] > 0]


#: What :func:`passes_time` gave, per GPU's scenario, matmuls and recomputation: the real-runs
#: chapter asks about 1,300 times for about a hundred of them.  Each entry holds the scenario
#: it was computed with (by identity: :func:`device` keeps one per cluster until its values
#: change, as :func:`device_values` changes them for a while).
_PASSES_TIMED: dict[tuple, tuple[sc.Scenario, np.ndarray]] = {}
#: Entries of the kept matmul times per process (the book's chapters make about a hundred).
PASSES_TIMED_KEPT = 4096


def passes_time(scn, matmuls: list[tuple[float, float, float, float]], rb) -> np.ndarray:
    """Each matmul's forward (``1 + rb`` times), activation-gradient and weight-gradient time,
    times its count, for matmuls ``(d1, d2, nanobatch, count)`` (read-only; kept per process,
    ``_PASSES_TIMED``)."""
    key = (scn.name, tuple(matmuls), tuple(rb))
    kept = _PASSES_TIMED.get(key)
    if kept is not None and kept[0] is scn:
        return kept[1]
    times = _passes_time_of(scn, matmuls, rb)
    times.flags.writeable = False
    if len(_PASSES_TIMED) >= PASSES_TIMED_KEPT:
        _PASSES_TIMED.clear()
    _PASSES_TIMED[key] = (scn, times)
    return times


def _passes_time_of(scn, matmuls: list[tuple[float, float, float, float]], rb) -> np.ndarray:
    d1 = np.array([max(1, round(m[0])) for m in matmuls], dtype=float)
    d2 = np.array([max(1, round(m[1])) for m in matmuls], dtype=float)
    b = np.array([max(1.0, m[2]) for m in matmuls])
    count = np.array([m[3] for m in matmuls])
    fwd = matmul.matmul_time(scn, d1, d2, b, "forward")
    act = matmul.matmul_time(scn, d1, d2, b, "activation-grad")
    wgt = matmul.matmul_time(scn, d1, d2, b, "weight-grad")
    return count * ((1 + np.asarray(rb, dtype=float)) * fwd + act + wgt)


def parts(cfg: Config) -> dict[str, float]:
    """Seconds of one step on one GPU of each pipeline stage: ``linear``, its blocks' matmuls
    by the matmul model (clock derate and kernel latency included); ``attention``, attention's
    core at its utilization (:func:`attention_utilization`); ``memory``, the memory-bound
    operations of its blocks (:func:`memory_ops_derivation` without the loss and the
    optimizer); ``optimizer``, Adam's update.  Placed on the last stage (Megatron-LM's default
    split, in the calibrated mode's placement, :data:`STAGES`), the output layer's matmuls and
    the loss's memory-bound operations are its alone: ``head`` and ``loss`` (with one stage,
    the only stage runs them).  In equal shares (:func:`placement` ``"even"``), and where the
    framework's split makes the stages uneven otherwise (its stages timed by
    :func:`pipeline_stretch`), they are every stage's alike, in ``linear`` and ``memory``.
    The optimizer's share is every stage's alike: the last stage's output layer is not counted
    apart there."""
    sh, c = cfg.shape, cfg.cluster
    scn = device(c.name)
    rb, _ = transformer.RECOMPUTE[cfg.recompute]
    b = cfg.mbs * cfg.seq_len / cfg.cp
    m = cfg.micro_batches
    matmuls = [*block_matmuls(cfg, b), (sh.d_model, sh.vocab / cfg.tp, b, 1.0)]
    times = passes_time(scn, matmuls, [rb] * (len(matmuls) - 1) + [0])
    per_block, head = float(times[:-1].sum()), float(times[-1])
    # The matmul model runs at the 16-bit peak; the blocks' FP8 matmuls at the FP8 peak, the
    # output layer's in 16-bit (the module's docstring says which frameworks keep it so).
    speed = c.peak_16bit / c.peak(cfg.precision)
    linear = speed * m * sh.layers / cfg.pp * per_block
    if cfg.attention_kernel == "unfused":
        attention = unfused_attention(cfg)
    else:
        attention = fused_attention(cfg)
    # The ranks the optimizer state is split over, as the memory count splits it.
    group = cfg.shard_group if cfg.sharding == "hsdp" and cfg.shard_group else cfg.dp * cfg.cp
    g_o = group if memory.STATE_SPLIT[SHARDING[cfg.sharding]][2] else 1
    sp_split = cfg.tp if cfg.sequence_parallel else 1
    args = (
        cfg.global_batch_tokens / (cfg.dp * cfg.cp), sh.layers, cfg.pp, m, rb,
        float(scn["hardware.kernel_latency"]), float(scn["hardware.hbm_bandwidth"]),
        float(scn["model.word_bytes"]), sh.d_model, sp_split, sh.kv_width, sh.mlp_mats,
        sh.active_d_ff, cfg.tp, sh.vocab, cfg.params_held, BACKWARD_PASSES, LOSS_BYTES,
        OPTIMIZER_BYTES,
    )  # fmt: skip
    with_opt = float(_memory_fn()(*args, g_o))
    without = float(_memory_fn()(*args, np.inf))
    # The same formula without a vocabulary: the blocks alone, as every stage runs them.
    no_vocab = list(args)
    no_vocab[_ARGS.index(transformer.vocab)] = 0
    blocks = float(_memory_fn()(*no_vocab, np.inf))
    out = {
        "linear": linear,
        "attention": attention,
        "memory": blocks,
        "optimizer": with_opt - without,
        "head": m * head,
        "loss": without - blocks,
        # The framework's host-side floor under its blocks' time (Config.host_floor_s).
        "host": m * sh.layers / cfg.pp * cfg.host_floor_s,
    }
    rule = STAGES["head"]
    # Equal shares, and as placed where the split makes the stages uneven otherwise: its
    # stages are timed by the schedule instead (pipeline_stretch).
    if rule == "even" or (rule == "placed" and cfg.stages != "last"):
        out["linear"] += out.pop("head") / cfg.pp
        out["memory"] += out.pop("loss") / cfg.pp
        out["head"] = out["loss"] = 0.0
    return out


def nanotron_split(cfg: Config) -> tuple[tuple[int, ...], int]:
    """The blocks on each pipeline stage and the stage of the output layer as nanotron deals
    them (``build_model`` in ``nanotron/models/base.py``, huggingface/nanotron): in order, each
    block goes to the current stage, which moves on once the blocks' cumulative cost passes its
    share of the total.  The cost is nanotron's count for a Llama-style model
    (``get_block_compute_costs``): ``4 d^2 + 3 d d_ff`` a block (queries, keys, values and
    output counted at the model's width, grouped-query attention or not) and ``V d`` for the
    output layer.  The block that crosses a stage's share stays on that stage, so the split is
    not even.  The loss is counted beside the output layer, where nanotron puts it unless the
    output layer crosses a stage's share before the last (a split that leaves stages empty),
    when the loss goes to the next stage.  nanotron does not interleave: one chunk a stage."""
    sh, pp = cfg.shape, cfg.pp
    if cfg.vpp != 1:
        raise ValueError(f"nanotron_split: got vpp={cfg.vpp}; expected 1 (nanotron runs one "
                         "chunk a stage)")  # fmt: skip
    block = 4 * sh.d_model**2 + 3 * sh.d_model * sh.d_ff
    costs = [block] * sh.layers + [sh.vocab * sh.d_model]
    total = sum(costs)
    thresholds = [total * (rank + 1) / pp for rank in range(pp)]
    blocks, head, stage, cumulative = [0] * pp, 0, 0, 0
    for i, cost in enumerate(costs):
        cumulative += cost
        if i < sh.layers:
            blocks[stage] += 1
        else:
            head = stage
        if cumulative > thresholds[stage]:
            stage += 1
    return tuple(blocks), head


def megatron_split(cfg: Config) -> tuple[tuple[int, ...], int]:
    """The blocks in each of the ``v N_PP`` model chunks (chunk ``k`` on stage ``k mod N_PP``)
    and the chunk of the output layer in Megatron-LM's default split: the same number of blocks
    in every chunk, the output layer and the loss in the last."""
    chunks = cfg.pp * cfg.vpp
    if cfg.shape.layers % chunks:
        raise ValueError(
            f"megatron_split: {cfg.shape.layers} layers do not split evenly over {chunks} "
            "model chunks; expected a multiple of the pipeline degree times the chunks a stage"
        )
    return (cfg.shape.layers // chunks,) * chunks, chunks - 1


def layer_slots_split(cfg: Config) -> tuple[tuple[int, ...], int]:
    """The blocks in each of the ``v N_PP`` model chunks and the chunk of the output layer when
    Megatron-Core counts the embedding and the loss as a layer each in the pipeline split
    (``account_for_embedding_in_pipeline_split`` and ``account_for_loss_in_pipeline_split``;
    ``get_num_layers_to_build`` in ``megatron/core/transformer/transformer_block.py``): ``L + 2``
    layers split evenly over the chunks, the first chunk one block short for the embedding and
    the last one block short for the output layer and the loss."""
    chunks, slots = cfg.pp * cfg.vpp, cfg.shape.layers + 2
    if slots % chunks or slots // chunks < 1:
        raise ValueError(
            f"layer_slots_split: {cfg.shape.layers} layers and the embedding and the loss do not "
            f"split evenly over {chunks} model chunks; expected L + 2 a multiple of them"
        )
    blocks = [slots // chunks] * chunks
    blocks[0] -= 1
    blocks[-1] -= 1
    return tuple(blocks), chunks - 1


def torchtitan_split(cfg: Config) -> tuple[tuple[int, ...], int]:
    """The blocks in each of the ``v N_PP`` model chunks and the chunk of the output layer as
    torchtitan splits them when no split points are given (``generate_split_points`` in
    ``torchtitan/parallelisms/pipelining_utils.py`` at 9dec370, the commit of its December
    2024 benchmarks): the first chunk ``floor(L / (v N_PP))`` blocks, each middle chunk one
    more while the remainder lasts, the last chunk the rest and the output layer and the loss
    (the first chunk's embedding, a lookup, is not counted).
    Chunk ``k`` runs on stage ``k mod N_PP`` (``stage_ids_this_rank``, style ``loop``), and
    its interleaved schedule is laid out in Megatron-LM's interleaved order, which PyTorch's
    ``ScheduleInterleaved1F1B`` follows.  Where the blocks divide evenly this is Megatron-LM's
    default split."""
    chunks, layers = cfg.pp * cfg.vpp, cfg.shape.layers
    if chunks > layers:
        raise ValueError(
            f"torchtitan_split: {chunks} model chunks for {layers} layers; expected at most "
            "one chunk a layer"
        )
    base, extra = divmod(layers, chunks)
    blocks = [base]
    for _ in range(chunks - 2):
        more = 1 if extra > 0 else 0
        extra -= more
        blocks.append(base + more)
    if chunks > 1:
        blocks.append(layers - sum(blocks))
    return tuple(blocks), chunks - 1


#: The splits :func:`stage_times` and :func:`pipeline_stretch` take, by
#: :class:`~dmlimits.measured.configuration.Config`'s ``stages``: Megatron-LM's default, nanotron's,
#: Megatron-Core's with the embedding and the loss counted as layers, and torchtitan's.
SPLITS = {
    "last": megatron_split,
    "nanotron": nanotron_split,
    "layers": layer_slots_split,
    "torchtitan": torchtitan_split,
}


def _chunk_work(cfg: Config, split: str) -> np.ndarray:
    """Each model chunk's compute in one step, seconds (see :func:`stage_times`)."""
    if split not in SPLITS:
        raise ValueError(f"split: got {split!r}; expected one of {', '.join(SPLITS)}")
    blocks, head_chunk = SPLITS[split](cfg)
    with placement("last"):
        p = parts(cfg)
    per_block = (p["linear"] + p["attention"] + p["memory"]) * cfg.pp / cfg.shape.layers
    work = per_block * np.array(blocks, dtype=float)
    work[head_chunk] += p["head"] + p["loss"]
    return work


def stage_times(cfg: Config, split: str) -> np.ndarray:
    """Seconds of one step's compute on each pipeline stage of ``cfg`` as ``split`` deals the
    blocks (:data:`SPLITS`), each block timed alike (:func:`parts`: its matmuls at the matmul
    model's time, attention's core and memory-bound operations; the optimizer apart) and the
    output layer and loss on their stage."""
    work = _chunk_work(cfg, split)
    return work.reshape(-1, cfg.pp).sum(axis=0)


def busiest_stage_excess(cfg: Config, split: str) -> float:
    """How much more compute the busiest pipeline stage does than an equal share of the step's
    (what the bound counts): ``max / mean - 1`` of :func:`stage_times`."""
    times = stage_times(cfg, split)
    return float(times.max() / times.mean() - 1)


def pipeline_stretch(cfg: Config) -> float:
    """The pipelined compute of a step over an equal share of it, where ``cfg.stages``'s split
    (:data:`SPLITS`) gives the chunks unequal work: the schedule laid out pass by pass
    (:func:`dmlimits.costs.pipeline.schedule`, 1F1B or Megatron-LM's interleaved order) with each
    chunk's passes as long as its work (:func:`stage_times`), its makespan
    (:func:`dmlimits.costs.pipeline.makespan`) over ``v m`` chunks' forward and backward passes of
    the mean chunk.  ``1 + (N_PP - 1) / (v m)`` where the chunks are alike.  The chunks are
    weighed at the matmul model's times, not over the fitted matmul efficiency (which divides
    the matmuls alone, so it would weigh the output layer, mostly matmul, a little heavier
    against the blocks)."""
    work = _chunk_work(cfg, cfg.stages)
    shares = work / work.mean()
    m = round(cfg.micro_batches)
    if m < 1 or abs(cfg.micro_batches - m) > 1e-9:
        raise ValueError(f"pipeline_stretch: got {cfg.micro_batches!r} micro-batches a step; "
                         "expected a whole number to lay the schedule out")  # fmt: skip
    return stretch(cfg.pp, m, cfg.vpp, tuple(round(float(x), 6) for x in shares))


@cache
def stretch(n_pp: int, m: int, v: int, shares: tuple[float, ...]) -> float:
    order = "interleaved" if v > 1 else "1f1b"
    return float(
        ppm.makespan(n_pp, m, v, order=order, work=shares) / (v * m * (1 + ppm.BACKWARD_SLOTS))
    )
