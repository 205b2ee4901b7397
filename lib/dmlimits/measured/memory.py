"""Peak memory of one GPU in a real training run: does a configuration fit?

The first paper checks only that parameters and optimizer state fit the cluster's HBM
(:mod:`dmlimits.costs.data_parallel`).  A real run of :mod:`dmlimits.measured.runs` also holds
gradients and activations, and shards them by its ZeRO stage, FSDP or HSDP group, tensor, sequence,
context and pipeline splits.  This module counts them, in sympy where it is a formula:

* **Model state** (Rajbhandari et al. 2020, ZeRO): mixed-precision training with Adam keeps
  ``k_w = 2`` bytes of 16-bit weights, ``k_g = 2`` bytes of 16-bit gradients and ``k_o = 12``
  bytes of optimizer state (fp32 master weights and two fp32 moments) per parameter.  A GPU
  holds the parameters of its tensor- and pipeline-parallel shard, ``N / (N_TP N_PP)``; ZeRO-1
  splits the optimizer state over the ``g`` ranks that hold the same parameters, ZeRO-2 the
  gradients too, ZeRO-3 and FSDP the weights as well (HSDP: over its sharding group).  ZeRO-3
  also gathers one layer's weights and gradients at a time, unsharded; torchtitan's FSDP under
  pipeline parallelism keeps a stage's weights gathered from its forward to its backward
  (``reshard_after_forward=False``) and, since PyTorch's pipeline schedules reduce gradients
  only after a step's last micro-batch, accumulates the stage's gradients unsharded in fp32
  (``Config.stage_keeps_gathered``).
* **Activations**, counted tensor by tensor (run-memory-activations): per token, a layer keeps
  its two norms' inputs and outputs, the query, keys and values, the attention output, and each
  MLP up-projection's output before and after its nonlinearity (for a gated MLP, the SiLU and
  the product), 2 bytes a value, plus Megatron-LM's dropout masks in a GPT block.  For a GPT
  block that is Korthikanti et al.'s (2022, section 4) ``34 s b h``; a FlashAttention-style
  kernel keeps no attention scores (their ``5 a s / h`` term).  Tensor parallelism splits all
  but the norms' tensors (and the masks), or everything with sequence parallelism; a framework
  whose sequence parallelism keeps the gathered inputs of its column-parallel linears keeps two
  whole hidden vectors more (``Config.keeps_gathered_inputs``).  Full recomputation keeps each
  layer's input and, while it recomputes one layer, that layer's tensors; torchtitan's
  selective recomputation keeps every other matmul's output (:func:`op_saved_bytes_per_token`),
  Megatron-LM's keeps everything but attention's scores.  Context parallelism
  divides ``s`` among its ranks.  The logits at the loss take 10 bytes a token and vocabulary
  entry (16-bit logits, their fp32 copy and its gradient), split over the vocabulary by tensor
  parallelism.  In 1F1B the first stage holds ``min(N_PP, m)`` micro-batches of its
  ``L / N_PP`` layers, the last one micro-batch and the logits; the busier sets the peak.
* **What the count leaves out**, as two constants fitted together by :func:`fit_constants` on
  the peaks recorded in the Ultra-Scale Playbook's benchmark file: a fixed overhead for every
  run (:data:`OVERHEAD_BYTES`: communication buffers, workspaces) and, for that file's nanotron
  runs only, a factor on the layers' activations (:data:`PLAYBOOK_ACTIVATION_FACTOR`).

``bench/bench_predict.py`` reports the errors of this count against that file (where it is
beside the project) and against torchtitan's published peaks; the tests check the fit and the
out-of-memory calls.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import cache
from typing import TYPE_CHECKING

import numpy as np
import sympy as sp

from dmlimits.core import symbols as s
from dmlimits.core import units as u
from dmlimits.core.derivation import Derivation, Step, Substitution, derivation, register
from dmlimits.costs import pipeline as ppm
from dmlimits.costs import tensor_parallel as tpm
from dmlimits.measured import transformer
from dmlimits.measured.configuration import SHARDING

if TYPE_CHECKING:
    from dmlimits.measured.configuration import Config

CHAPTER = "diminishing_returns"
_B = u.byte
_decl = s.REGISTRY.declare

# --- Constants, each with its source ----------------------------------------------------------
#: Bytes per parameter of mixed-precision Adam (Rajbhandari et al. 2020, section 3.1):
#: 16-bit weights, 16-bit gradients, and fp32 master weights, momentum and variance.
WEIGHT_BYTES, GRAD_BYTES, OPTIMIZER_BYTES = 2, 2, 12
#: Bytes per parameter of a gradient accumulated unsharded over a step's micro-batches when
#: FSDP's reduction is put off to the last one (``Config.stage_keeps_gathered``): fp32, FSDP2's
#: reduction dtype in torchtitan (``--training.mixed_precision_reduce``, float32 only).
ACCUMULATED_GRAD_BYTES = 4
#: Bytes of one 16-bit activation value.
VALUE_BYTES = 2
#: Values per token and hidden unit a layer keeps outside the tensor-parallel region, which
#: tensor parallelism does not split without sequence parallelism: each block's norm input and
#: output (Korthikanti et al. 2022, section 4.2).
UNSPLIT_VALUES = 4
#: Values per token and hidden unit of the gathered inputs a sequence-parallel layer keeps when
#: it keeps them (``Config.keeps_gathered_inputs``): the inputs of the attention's and the MLP's
#: column-parallel linears, whole over the sequence.
GATHERED_VALUES = 2
#: Bytes of dropout masks per token and hidden unit of one layer: two one-byte masks (after the
#: attention projection and after the MLP; Korthikanti et al. 2022, section 4.1).  Megatron-LM's
#: GPT runs train with dropout; Llama's reference implementation has none (Touvron et al. 2023).
DROPOUT_MASK_BYTES = 2
#: The output logits and their gradient per token and vocabulary entry at the loss: the 16-bit
#: logits, their fp32 copy for the softmax, and its fp32 gradient (2 + 4 + 4).
LOGIT_BYTES = 10
#: Bytes a GPU of the Ultra-Scale Playbook's runs (nanotron) holds at its peak for each byte of
#: layer activations the count finds (``Config.activation_factor``; the logits are not scaled).
#: What it stands for is not known: temporaries autograd keeps that the count does not list
#: (contiguous or fp32 copies of the query and keys, for instance) or the caching allocator's
#: blocks, reserved and not yet reused.  It is nanotron's, not every framework's: applied to
#: MosaicML's MPT runs (which all ran), it calls most of them out of memory.  Every other
#: source keeps a factor of 1, the count alone.  Fitted with :data:`OVERHEAD_BYTES` by
#: :func:`fit_constants`.
PLAYBOOK_ACTIVATION_FACTOR = 1.9
#: What a GPU holds beyond the counted tensors that does not grow with them (communication
#: buffers, workspaces, the CUDA context's share the allocator sees).  Fitted with
#: :data:`PLAYBOOK_ACTIVATION_FACTOR` by :func:`fit_constants` on the peak memory the
#: Ultra-Scale Playbook's benchmark file records for its runs that ran
#: (nanotron/ultrascale-playbook, ``gpu_memory_gb`` read as 10^9 bytes).  That file is not part
#: of the project; the tests refit both where it is beside the project and fail if they moved.
OVERHEAD_BYTES = 0.25 * 2**30
#: The activation factors :func:`fit_constants` tries: 1 to 2.5 by tenths.
FACTOR_GRID = tuple(round(1 + q / 10, 1) for q in range(16))
#: The overheads :func:`fit_constants` tries, bytes: 0 to 4 GiB by quarters.
OVERHEAD_GRID = tuple(q * 2**28 for q in range(17))

# --- Symbols -----------------------------------------------------------------------------------
m_state = _decl("M_state", r"M_{\mathrm{state}}", "model-state bytes one GPU holds", _B,
                defined_in=CHAPTER)  # fmt: skip
p_rank = _decl("P_rank", r"P_{\mathrm{r}}", "parameters of one model-parallel rank",
               defined_in=CHAPTER)  # fmt: skip
k_w = _decl("k_w", r"k_{\mathrm{w}}", "bytes of a parameter's 16-bit weight", _B,
            defined_in=CHAPTER)  # fmt: skip
k_g = _decl("k_g", r"k_{\mathrm{g}}", "bytes of a parameter's 16-bit gradient", _B,
            defined_in=CHAPTER)  # fmt: skip
k_o = _decl("k_o", r"k_{\mathrm{o}}", "bytes of a parameter's optimizer state", _B,
            defined_in=CHAPTER)  # fmt: skip
g_w = _decl("g_w", r"g_{\mathrm{w}}", "ranks the weights are split over", defined_in=CHAPTER)
g_g = _decl("g_g", r"g_{\mathrm{g}}", "ranks the gradients are split over", defined_in=CHAPTER)
g_o = _decl("g_o", r"g_{\mathrm{o}}", "ranks the optimizer state is split over",
            defined_in=CHAPTER)  # fmt: skip
g_rank = _decl("g_mem", r"g_{\mathrm{s}}", "ranks that hold the same parameters (ZeRO group)",
               defined_in=CHAPTER)  # fmt: skip
m_act = _decl("M_act", r"M_{\mathrm{act}}", "activation bytes of one layer and micro-batch", _B,
              defined_in=CHAPTER)  # fmt: skip
seq = _decl("s_mem", r"s_{\mathrm{GPU}}", "tokens of a sequence on one GPU", defined_in=CHAPTER)
mbs = _decl("b_mem", r"b_{\mathrm{mb}}", "sequences in a micro-batch", defined_in=CHAPTER)
heads = transformer.n_heads  # the transformer chapter's attention heads: one symbol, one meaning
w_val = _decl("w_act", r"w_{\mathrm{act}}", "bytes of one activation value", _B,
              defined_in=CHAPTER)  # fmt: skip
n_val = _decl("n_val", r"n_{\mathrm{val}}", "activation values a layer keeps per token",
              defined_in=CHAPTER)  # fmt: skip
m_drop = _decl("m_drop", r"m_{\mathrm{drop}}", "bytes of dropout masks a layer keeps per token",
               _B, defined_in=CHAPTER)  # fmt: skip
c_sc = _decl("c_sc", r"c_{\mathrm{sc}}", "bytes of the attention scores' term", _B,
             defined_in=CHAPTER)  # fmt: skip
d_kv = _decl("d_kv", r"d_{\mathrm{kv}}", "width of a block's keys (and of its values), "
             "d_model n_kv / n_h", defined_in=CHAPTER)  # fmt: skip
m_op = _decl("M_op", r"M_{\mathrm{op}}", "bytes a layer keeps per token under per-op selective "
             "recomputation", _B, defined_in=CHAPTER)  # fmt: skip
t_sp = _decl("t_sp", r"t_{\mathrm{sp}}", "ranks a block's input is split over: the "
             "tensor-parallel degree with sequence parallelism, else 1",
             defined_in=CHAPTER)  # fmt: skip

STATE_SPLIT = {  # ZeRO stage: (g_w, g_g, g_o) as multiples of the group
    0: (False, False, False), 1: (False, False, True), 2: (False, True, True),
    3: (True, True, True),
}  # fmt: skip


@register
def state_derivation() -> Derivation:
    e1 = sp.Eq(m_state, p_rank * (k_w / g_w + k_g / g_g + k_o / g_o))
    rank = Substitution(
        "a GPU holds the parameters of its tensor- and pipeline-parallel shard",
        {p_rank: s.n_params / (tpm.n_tp * ppm.n_pp)},
    )
    zero3 = Substitution(
        "ZeRO-3 and FSDP split weights, gradients and optimizer state over the ZeRO group",
        {g_w: g_rank, g_g: g_rank, g_o: g_rank},
        kind="assumption",
        source="rajbhandari2020zero",
    )
    adam = Substitution(
        "mixed-precision Adam: 16-bit weights and gradients, fp32 master weights and moments",
        {k_w: WEIGHT_BYTES, k_g: GRAD_BYTES, k_o: OPTIMIZER_BYTES},
        kind="assumption",
        source="rajbhandari2020zero",
    )
    e2 = rank.apply(e1)
    e3 = zero3.apply(e2)
    return derivation(
        "run-memory-state",
        "The model state one GPU holds",
        [
            Step(
                "Each parameter of the GPU's shard needs its weight, its gradient and its "
                "optimizer state; ZeRO splits each of the three over some ranks.",
                e1,
            ),
            Step(
                "The shard is the model over the tensor- and pipeline-parallel degrees.",
                e2,
                using=rank,
            ),
            Step("ZeRO-3 and FSDP split all three over the ZeRO group.", e3, using=zero3),
            Step(
                "With mixed-precision Adam that is sixteen bytes a parameter, split.",
                adam.apply(e3),
                using=adam,
            ),
        ],
        chapter=CHAPTER,
    )


#: The tensors of one block a token keeps for the backward pass, as values: the attention
#: block's norm input and output, query, keys, values (``d_kv`` each) and attention output; the
#: MLP block's norm input and output, and each of its ``g - 1`` up-projections' outputs before
#: and after the nonlinearity (or, gated, the SiLU and the product).
BLOCK_TENSORS = Substitution(
    "the tensors a block keeps for its backward pass",
    {n_val: 6 * s.d_model + 2 * d_kv + 2 * (transformer.mlp_mats - 1) * s.d_ff},
    kind="definition",
)


@register
def activation_derivation() -> Derivation:
    e1 = sp.Eq(m_act, seq * mbs * (w_val * n_val + m_drop + c_sc * heads * seq) / tpm.n_tp)
    flash = Substitution(
        "a FlashAttention-style kernel keeps no attention scores",
        {c_sc: 0},
        kind="assumption",
    )
    llama = Substitution(
        "a Llama-style block: 16-bit values, a gated MLP, no dropout",
        {w_val: VALUE_BYTES, transformer.mlp_mats: 3, m_drop: 0},
        kind="assumption",
        source="touvron2023llama2",
    )
    e2 = flash.apply(e1)
    e3 = BLOCK_TENSORS.apply(e2)
    return derivation(
        "run-memory-activations",
        "The activations one layer keeps for one micro-batch",
        [
            Step(
                "A layer keeps some values per token, each of a few bytes, and its dropout "
                "masks, plus the attention scores, which grow with the sequence; with sequence "
                "parallelism tensor parallelism splits all of it.",
                e1,
            ),
            Step(
                "A fused attention kernel (FlashAttention) recomputes the scores instead of "
                "keeping them.",
                e2,
                using=flash,
            ),
            Step(
                "Counted tensor by tensor: the norms' inputs and outputs, the query, keys and "
                "values, the attention output, and the MLP's up-projections before and after "
                "their nonlinearity.",
                e3,
                using=BLOCK_TENSORS,
            ),
            Step(
                "For a Llama-style block, sixteen-bit values, three MLP matrices and no dropout. "
                "(A GPT block, with keys and values as wide as the model, a plain MLP four times "
                "as wide and two one-byte dropout masks, gives Korthikanti et al.'s "
                "$34 s_{\\mathrm{GPU}} b_{\\mathrm{mb}} d_{\\mathrm{model}}$.)",
                llama.apply(e3),
                using=llama,
            ),
        ],
        chapter=CHAPTER,
    )


@register
def op_selective_derivation() -> Derivation:
    """What torchtitan's per-op selective recomputation keeps of one layer, per token."""
    t = tpm.n_tp
    e1 = sp.Eq(
        m_op,
        w_val
        * (s.d_model / t + d_kv / t + s.d_model / t + s.d_ff / t
           + (transformer.mlp_mats - 2) * s.d_model + s.d_model / t_sp),
    )  # fmt: skip
    sequence = Substitution(
        "sequence parallelism splits the block's input over the tensor-parallel ranks",
        {t_sp: t},
        kind="assumption",
    )
    llama = Substitution(
        "a Llama-style block: 16-bit values, a gated MLP",
        {w_val: VALUE_BYTES, transformer.mlp_mats: 3},
        kind="assumption",
        source="touvron2023llama2",
    )
    e2 = sequence.apply(e1)
    return derivation(
        "run-memory-op-selective",
        "What per-op selective recomputation keeps of a layer",
        [
            Step(
                "torchtitan's per-op policy keeps the output of every second matmul, counted "
                "in forward order within a block, and the attention kernel's output; the "
                "checkpoint keeps the block's input, and everything else is recomputed. The "
                "matmuls run $q, k, v, o$, then the MLP's: so $q$, $v$, the attention's output, "
                "the MLP's first up-projection and, in a gated MLP ($m_{\\mathrm{MLP}} = 3$), "
                "its down projection, whose output is a partial sum as wide as the model on "
                "every rank. Tensor parallelism splits the column-parallel outputs and the "
                "attention's.",
                e1,
            ),
            Step(
                "With sequence parallelism the block's input is split too.",
                e2,
                using=sequence,
            ),
            Step("For a Llama-style block.", llama.apply(e2), using=llama),
        ],
        chapter=CHAPTER,
        notes=(
            "pytorch/torchtitan, ``_apply_ac_to_transformer_block`` (the December 2024 "
            "benchmarks; ``llama3_8b.toml`` sets ``selective_ac_option = 'op'``).",
        ),
    )


COST_FORMULAS = {
    "model_state": (state_derivation().steps[-2].expr.rhs, _B),
    "activations": (activation_derivation().steps[2].expr.rhs, _B),  # before a block is chosen
    "op_selective": (op_selective_derivation().steps[0].expr.rhs, _B),
}


@cache
def _op_selective_fn():
    expr = op_selective_derivation().steps[0].expr.rhs
    return sp.lambdify((s.d_model, d_kv, s.d_ff, transformer.mlp_mats, tpm.n_tp, t_sp, w_val), expr)


@cache
def _state_fn():
    expr = state_derivation().steps[1].expr.rhs  # before the ZeRO stage is chosen
    return sp.lambdify((s.n_params, tpm.n_tp, ppm.n_pp, k_w, k_g, k_o, g_w, g_g, g_o), expr)


#: Bytes an attention that is not fused keeps per score for the backward pass
#: (``Config.attention_kernel`` ``unfused``): the softmax's output (two bytes) and, with dropout,
#: its one-byte mask and its two-byte output: Korthikanti et al. 2022's $5 a s^2 b$ a layer.
UNFUSED_SCORE_BYTES = {True: 5, False: 2}


@cache
def _scores_fn():
    """Bytes a layer keeps per token for its attention scores on one rank: the scores' term of
    run-memory-activations, step 1, for a sequence of one micro-batch."""
    e1 = activation_derivation().steps[0].expr.rhs
    expr = e1.subs({n_val: 0, m_drop: 0, mbs: 1}) / seq
    return sp.lambdify((c_sc, heads, seq, tpm.n_tp), expr)


def unfused_score_bytes_per_token(cfg: Config) -> float:
    """Bytes one layer keeps a token on one GPU for an unfused attention's scores
    (:data:`UNFUSED_SCORE_BYTES` a score, one row of the sequence's scores for each of the rank's
    heads); 0 for a fused kernel, which keeps none."""
    if cfg.attention_kernel != "unfused":
        return 0.0
    per_score = UNFUSED_SCORE_BYTES[cfg.shape.trains_with_dropout]
    return float(_scores_fn()(per_score, cfg.shape.heads, cfg.seq_len, cfg.tp))


@cache
def _activation_fn():
    """Bytes one layer keeps per token, unsplit: the derivation's tensor-by-tensor count
    (run-memory-activations, step 3) for any block."""
    expr = activation_derivation().steps[2].expr.rhs.subs({seq: 1, mbs: 1, tpm.n_tp: 1})
    return sp.lambdify((s.d_model, s.d_ff, d_kv, transformer.mlp_mats, w_val, m_drop), expr)


def layer_bytes_per_token(shape: transformer.Shape) -> tuple[float, float]:
    """(bytes one layer keeps per token, of which outside the tensor-parallel region): the
    count of run-memory-activations for the shape's block, with 16-bit values and, where the
    shape trains with dropout (by default a plain, GPT, MLP: Megatron-LM's), its masks.  A
    mixture of experts keeps the MLP tensors of the experts a token goes to
    (``Shape.active_d_ff``)."""
    d = shape.d_model
    drop = DROPOUT_MASK_BYTES * d if shape.trains_with_dropout else 0.0
    total = float(
        _activation_fn()(d, shape.active_d_ff, shape.kv_width, shape.mlp_mats, VALUE_BYTES, drop)
    )  # fmt: skip
    return total, UNSPLIT_VALUES * VALUE_BYTES * d + drop


def op_saved_bytes_per_token(shape: transformer.Shape, tp: int, sequence_parallel: bool) -> float:
    """Bytes one layer keeps a token on one GPU under torchtitan's per-op selective
    recomputation (``Config.selective_policy == "op"``).

    The policy (pytorch/torchtitan, ``_apply_ac_to_transformer_block``, as of the December 2024
    benchmarks: ``llama3_8b.toml`` sets ``selective_ac_option = 'op'``) saves the output of
    every matmul but every second one, counted in forward order within a block, and the
    attention kernel's output; the checkpoint keeps the block's input; everything else is
    recomputed.  In a Llama block the matmuls run q, k, v, o, gate, up, down, so q, v, gate
    and down are kept; in a plain MLP q, v and up.  Tensor parallelism splits the outputs of
    the column-parallel matmuls and the attention's; a row-parallel matmul's output (o, down)
    is a partial sum as wide as the model on every rank, and the block's input is split only
    with sequence parallelism.  Derived as ``run-memory-op-selective``."""
    return float(
        _op_selective_fn()(
            shape.d_model, shape.kv_width, shape.active_d_ff, shape.mlp_mats, tp,
            tp if sequence_parallel else 1, VALUE_BYTES,
        )
    )  # fmt: skip


@dataclass(frozen=True)
class Memory:
    """Bytes one GPU needs at its peak, by cause, and whether they fit its HBM.  With pipeline
    parallelism the peak is the busier of the first stage (the most micro-batches in flight) and
    the last (the logits); ``activations`` and ``logits`` are that stage's."""

    weights: float
    gradients: float
    optimizer: float
    gathered: float
    activations: float
    logits: float
    overhead: float
    capacity: float

    @property
    def total(self) -> float:
        return (self.weights + self.gradients + self.optimizer + self.gathered
                + self.activations + self.logits + self.overhead)  # fmt: skip

    @property
    def fits(self) -> bool:
        return self.total <= self.capacity

    def describe(self) -> str:
        gib = 2**30
        verdict = "fits" if self.fits else "does not fit"
        return f"{self.total / gib:.1f} GiB of the GPU's {self.capacity / gib:.1f} GiB: {verdict}"


def _activation_bytes(cfg: Config, factor: float) -> tuple[float, float]:
    """Activations and logits of the busiest pipeline stage.

    A layer keeps :func:`layer_bytes_per_token` a token, times ``factor`` (the layers'
    activations only, not the logits: ``Config.activation_factor``); tensor parallelism
    splits the part inside its region, or all of it with sequence parallelism.  Full
    recomputation keeps each layer's input (one value a hidden unit) and, while one layer is
    recomputed, that layer's activations.  An unfused attention's scores
    (:func:`unfused_score_bytes_per_token`) are kept without recomputation and are otherwise
    only in the recomputed layer's working set.  In 1F1B the first stage holds ``min(N_PP, m)``
    micro-batches of its ``L / N_PP`` layers, the last one micro-batch and the logits (split
    over the vocabulary by tensor parallelism)."""
    sh = cfg.shape
    s_tok = cfg.seq_len / cfg.cp
    t = cfg.tp
    total, unsplit = layer_bytes_per_token(sh)
    full = total / t if cfg.sequence_parallel else unsplit + (total - unsplit) / t
    if cfg.sequence_parallel and cfg.keeps_gathered_inputs and t > 1:
        full += GATHERED_VALUES * VALUE_BYTES * sh.d_model
    # An unfused attention's scores: kept without recomputation; otherwise only in the working
    # set of the layer being recomputed (selective recomputation recomputes exactly them).
    scores = unfused_score_bytes_per_token(cfg)
    if cfg.recompute == "full":
        kept = VALUE_BYTES * sh.d_model / (t if cfg.sequence_parallel else 1)
        working = full + scores
    elif cfg.recompute == "selective" and cfg.selective_policy == "op":
        kept = op_saved_bytes_per_token(sh, t, cfg.sequence_parallel)
        working = full + scores
    elif cfg.recompute == "selective":
        kept, working = full, scores
    else:
        kept, working = full + scores, 0.0
    kept, working = factor * kept, factor * working
    tokens = s_tok * cfg.mbs
    stage_layers = sh.layers / cfg.pp
    logits = LOGIT_BYTES * tokens * sh.vocab / t
    last = tokens * (kept * stage_layers + working) + logits
    if cfg.pp == 1:
        return last - logits, logits
    in_flight = min(cfg.pp, math.ceil(cfg.micro_batches))
    first = tokens * (kept * stage_layers * in_flight + working)
    return (first, 0.0) if first > last else (last - logits, logits)


def peak(
    cfg: Config,
    capacity: float | None = None,
    *,
    factor: float | None = None,
    overhead: float = OVERHEAD_BYTES,
) -> Memory:
    """Peak bytes per GPU of a :class:`~dmlimits.measured.configuration.Config` (see the module's
    docstring); ``factor`` defaults to the configuration's activation factor, ``overhead`` to
    the fitted constant."""
    sh = cfg.shape
    group = cfg.dp * cfg.cp
    if cfg.sharding == "hsdp" and cfg.shard_group:
        group = cfg.shard_group
    stage = SHARDING[cfg.sharding]
    split = [group if on else 1 for on in STATE_SPLIT[stage]]
    # A mixture of experts' routed experts are split over the expert-parallel ranks too.
    held = cfg.params_held
    p_r = held / (cfg.tp * cfg.pp)
    weights = p_r * WEIGHT_BYTES / split[0]
    gradients = p_r * GRAD_BYTES / split[1]
    optimizer = p_r * OPTIMIZER_BYTES / split[2]
    total_state = float(
        _state_fn()(held, cfg.tp, cfg.pp, WEIGHT_BYTES, GRAD_BYTES, OPTIMIZER_BYTES, *split)
    )
    if not math.isclose(total_state, weights + gradients + optimizer):
        raise RuntimeError("the model state differs from its derivation (run-memory-state)")
    # ZeRO-3 gathers one layer's weights (and reduces its gradients) at a time, unsharded; a
    # pipeline stage that keeps its weights gathered (torchtitan's FSDP under pipeline
    # parallelism) holds all of them, and its gradients accumulated unsharded.
    if stage == 3 and cfg.pp > 1 and cfg.stage_keeps_gathered:
        gathered = (WEIGHT_BYTES + ACCUMULATED_GRAD_BYTES) * p_r
    elif stage == 3:
        gathered = (WEIGHT_BYTES + GRAD_BYTES) * p_r / sh.layers * cfg.pp
    else:
        gathered = 0.0
    activations, logits = _activation_bytes(
        cfg, cfg.activation_factor if factor is None else factor
    )
    cap = cfg.cluster.hbm if capacity is None else capacity
    return Memory(weights, gradients, optimizer, gathered, activations, logits, overhead, cap)


def fit_constants(configs, measured_bytes) -> tuple[float, float]:
    """(:data:`PLAYBOOK_ACTIVATION_FACTOR`, :data:`OVERHEAD_BYTES`): the pair of
    :data:`FACTOR_GRID` and :data:`OVERHEAD_GRID` that minimises the median absolute relative
    error of the predicted peak against ``measured_bytes`` (one a configuration); ties go to
    the smaller factor, then the smaller overhead."""
    configs = list(configs)
    measured = np.asarray(measured_bytes, dtype=float)
    if not configs or len(configs) != measured.size:
        raise ValueError(
            f"expected one measured peak a configuration, got {measured.size} for "
            f"{len(configs)} configurations"
        )
    best: tuple[float, float, float] | None = None
    for factor in FACTOR_GRID:
        counted = np.array([peak(c, factor=factor, overhead=0.0).total for c in configs])
        for overhead in OVERHEAD_GRID:
            error = round(float(np.median(np.abs((counted + overhead) / measured - 1))), 9)
            if best is None or error < best[0]:
                best = (error, factor, float(overhead))
    assert best is not None
    return best[1], best[2]


def frugal(cfg: Config) -> Config:
    """The same run with the least activation memory the model knows: full recomputation, and
    sequence parallelism wherever there is tensor parallelism."""
    return replace(cfg, recompute="full", sequence_parallel=cfg.tp > 1)


def can_fit(cfg: Config) -> bool:
    """Whether the run fits its GPUs' memory at all: with the least activation memory
    (:func:`frugal`).  False means no recomputation policy saves it: the model state alone, or
    with the layers' inputs, is too large for the GPUs."""
    return peak(frugal(cfg)).fits


def held_out(configs, measured_bytes, ran, groups) -> dict[str, dict[str, float]]:
    """Leave one group out: for each group (a model size, say), :func:`fit_constants` on the
    other groups' runs that ran, then that group's runs predicted with those constants (the
    fitted factor replaces each configuration's own).

    ``measured_bytes`` holds each run's recorded peak (``nan`` where none), ``ran`` whether it
    ran (False: it crashed or ran out of memory).  Per group: ``runs``, ``median_abs_error`` of
    the peak (on its runs that ran and have a peak), ``oom_agreement`` (the share of its runs
    whose predicted fit matches whether they ran), and the constants fitted without it."""
    configs = list(configs)
    measured = np.asarray(measured_bytes, dtype=float)
    ran = np.asarray(ran, dtype=bool)
    groups = np.asarray(groups, dtype=object)
    if not (len(configs) == measured.size == ran.size == groups.size):
        raise ValueError(
            f"expected one measured peak, outcome and group a configuration, got "
            f"{measured.size}, {ran.size} and {groups.size} for {len(configs)}"
        )
    with_peak = ran & np.isfinite(measured)
    out = {}
    for g in sorted(set(groups.tolist()), key=str):
        train = with_peak & (groups != g)
        if not train.any():
            raise ValueError(f"no run with a recorded peak outside group {g!r}: nothing to fit")
        factor, overhead = fit_constants(
            [c for c, t in zip(configs, train, strict=True) if t], measured[train]
        )
        idx = np.flatnonzero(groups == g)
        peaks = [peak(configs[i], factor=factor, overhead=overhead) for i in idx]
        errors = [
            p.total / measured[i] - 1 for p, i in zip(peaks, idx, strict=True) if with_peak[i]
        ]
        agree = [p.fits == ran[i] for p, i in zip(peaks, idx, strict=True)]
        out[str(g)] = {
            "runs": len(idx),
            "median_abs_error": float(np.median(np.abs(errors))) if errors else math.nan,
            "oom_agreement": float(np.mean(agree)),
            "factor": factor,
            "overhead": overhead,
        }
    return out
