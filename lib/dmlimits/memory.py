"""Peak memory of one GPU in a real training run: does a configuration fit?

The first paper checks only that parameters and optimizer state fit the cluster's HBM
(:mod:`dmlimits.data_parallel`).  A real run of :mod:`dmlimits.runs` also holds gradients and
activations, and shards them by its ZeRO stage, FSDP or HSDP group, tensor, sequence, context and
pipeline splits.  This module counts them, in sympy where it is a formula:

* **Model state** (Rajbhandari et al. 2020, ZeRO): mixed-precision training with Adam keeps
  ``k_w = 2`` bytes of 16-bit weights, ``k_g = 2`` bytes of 16-bit gradients and ``k_o = 12``
  bytes of optimizer state (fp32 master weights and two fp32 moments) per parameter.  A GPU
  holds the parameters of its tensor- and pipeline-parallel shard, ``N / (N_TP N_PP)``; ZeRO-1
  splits the optimizer state over the ``g`` ranks that hold the same parameters, ZeRO-2 the
  gradients too, ZeRO-3 and FSDP the weights as well (HSDP: over its sharding group).  ZeRO-3
  also gathers one layer's weights and gradients at a time, unsharded.
* **Activations** (Korthikanti et al. 2022, "Reducing activation recomputation in large
  transformer models", section 4): a layer keeps ``s b h (34 + 5 a s / h)`` bytes per
  micro-batch of ``b`` sequences of ``s`` tokens with hidden width ``h`` and ``a`` heads, without
  recomputation; tensor parallelism with sequence parallelism divides all of it by ``t``
  (without sequence parallelism only ``24`` of the ``34``).  The runs the book models use a
  FlashAttention-style kernel, which keeps no attention scores: the ``5 a s / h`` term goes (as
  it does under selective recomputation).  Full recomputation keeps only each layer's input,
  ``2 s b h``.  Context parallelism divides ``s`` among its ranks.  In 1F1B the first
  stage holds ``min(N_PP, m)`` micro-batches at once, each over its ``L / N_PP`` layers.  The
  last stage also holds the output logits in fp32 for the loss, ``4 s b V / t`` bytes.
* **Overhead**: the CUDA context, NCCL's buffers and the allocator's fragmentation, a named
  constant (:data:`OVERHEAD_BYTES`) that a later fit can replace.

The activation accounting is the paper's for GPT blocks; for a gated (Llama) MLP its counts are
an approximation, and the tests compare the check with the Ultra-Scale Playbook's recorded
out-of-memory outcomes where that file is present.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING

import sympy as sp

from . import pipeline as pl
from . import symbols as s
from . import tensor_parallel as tpm
from . import transformer as tf
from . import units as u
from .derivation import Derivation, Step, Substitution, derivation, register

if TYPE_CHECKING:
    from .runs import Config

CHAPTER = "diminishing_returns"
_B = u.byte
_decl = s.REGISTRY.declare

# --- Constants, each with its source ----------------------------------------------------------
#: Bytes per parameter of mixed-precision Adam (Rajbhandari et al. 2020, section 3.1):
#: 16-bit weights, 16-bit gradients, and fp32 master weights, momentum and variance.
WEIGHT_BYTES, GRAD_BYTES, OPTIMIZER_BYTES = 2, 2, 12
#: Activation bytes per token and hidden unit of one layer without recomputation, and the
#: part of it that tensor parallelism splits without sequence parallelism (Korthikanti et al.
#: 2022, equations 1-2: 34 = 10 + 24).
ACT_BYTES, ACT_SPLIT_BYTES = 34, 24
#: A layer's input kept under full recomputation, 2 bytes a value (Korthikanti et al. 2022,
#: section 4); the attention scores' 5 a s / h is not kept by a FlashAttention-style kernel.
INPUT_BYTES = 2
#: The output logits, fp32 for the loss.
LOGIT_BYTES = 4
#: CUDA context, NCCL buffers and allocator fragmentation per GPU: a documented round figure
#: (a few GiB is what frameworks report), not yet fitted.
OVERHEAD_BYTES = 3 * 2**30

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
heads = tf.n_heads  # the transformer chapter's attention heads: one symbol, one meaning
c_act = _decl("c_act", r"c_{\mathrm{act}}", "activation bytes per token and hidden unit of a layer",
              _B, defined_in=CHAPTER)  # fmt: skip
c_sc = _decl("c_sc", r"c_{\mathrm{sc}}", "bytes of the attention scores' term", _B,
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
        {p_rank: s.n_params / (tpm.n_tp * pl.n_pp)},
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


@register
def activation_derivation() -> Derivation:
    e1 = sp.Eq(m_act, seq * mbs * s.d_model * (c_act + c_sc * heads * seq / s.d_model) / tpm.n_tp)
    korthikanti = Substitution(
        "Korthikanti et al.'s count of a GPT layer's activations (16-bit)",
        {c_act: ACT_BYTES},
        kind="assumption",
        source="korthikanti2022reducing",
    )
    flash = Substitution(
        "a FlashAttention-style kernel keeps no attention scores",
        {c_sc: 0},
        kind="assumption",
    )
    return derivation(
        "run-memory-activations",
        "The activations one layer keeps for one micro-batch",
        [
            Step(
                "A layer keeps a fixed number of bytes per token and hidden unit, plus the "
                "attention scores, which grow with the sequence; with sequence parallelism "
                "tensor parallelism splits all of it.",
                e1,
            ),
            Step(
                "A fused attention kernel (FlashAttention) recomputes the scores instead of "
                "keeping them.",
                flash.apply(e1),
                using=flash,
            ),
            Step(
                "Korthikanti et al. count the rest of a GPT layer's activations at 34 bytes a "
                "token and hidden unit (and the scores at $5 n_{\\mathrm{h}} s_{\\mathrm{GPU}} / "
                "d_{\\mathrm{model}}$ more, without such a kernel).",
                korthikanti.apply(flash.apply(e1)),
                using=korthikanti,
            ),
        ],
        chapter=CHAPTER,
    )


COST_FORMULAS = {
    "model_state": (state_derivation().steps[-2].expr.rhs, _B),
    "activations": (activation_derivation().steps[1].expr.rhs, _B),  # before the counts
}


@cache
def _state_fn():
    expr = state_derivation().steps[1].expr.rhs  # before the ZeRO stage is chosen
    return sp.lambdify((s.n_params, tpm.n_tp, pl.n_pp, k_w, k_g, k_o, g_w, g_g, g_o), expr)


@dataclass(frozen=True)
class Memory:
    """Bytes one GPU needs at its peak, by cause, and whether they fit its HBM."""

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


def _activation_bytes(cfg: Config) -> tuple[float, float]:
    """Activations of the busiest stage (the first, in 1F1B) and the logits (the last)."""
    sh = cfg.shape
    s_tok = cfg.seq_len / cfg.cp
    h = sh.d_model
    t = cfg.tp
    # FlashAttention keeps no scores: without full recomputation a layer keeps 34 bytes a token
    # and hidden unit (run-memory-activations), of which tensor parallelism splits 24, or all
    # of them with sequence parallelism.
    if cfg.recompute == "full":
        per_token = INPUT_BYTES / (t if cfg.sequence_parallel else 1)
    elif cfg.sequence_parallel:
        per_token = ACT_BYTES / t
    else:
        per_token = (ACT_BYTES - ACT_SPLIT_BYTES) + ACT_SPLIT_BYTES / t
    per_layer = s_tok * cfg.mbs * h * per_token
    in_flight = min(cfg.pp, math.ceil(cfg.micro_batches)) if cfg.pp > 1 else 1
    activations = per_layer * (sh.layers / cfg.pp) * in_flight
    logits = LOGIT_BYTES * s_tok * cfg.mbs * sh.vocab / t
    return activations, logits


def peak(cfg: Config, capacity: float | None = None) -> Memory:
    """Peak bytes per GPU of a :class:`~dmlimits.runs.Config` (see the module's docstring)."""
    from .runs import SHARDING

    sh = cfg.shape
    group = cfg.dp * cfg.cp
    if cfg.sharding == "hsdp" and cfg.shard_group:
        group = cfg.shard_group
    stage = SHARDING[cfg.sharding]
    split = [group if on else 1 for on in STATE_SPLIT[stage]]
    p_r = sh.params / (cfg.tp * cfg.pp)
    weights = p_r * WEIGHT_BYTES / split[0]
    gradients = p_r * GRAD_BYTES / split[1]
    optimizer = p_r * OPTIMIZER_BYTES / split[2]
    total_state = float(
        _state_fn()(sh.params, cfg.tp, cfg.pp, WEIGHT_BYTES, GRAD_BYTES, OPTIMIZER_BYTES, *split)
    )
    if not math.isclose(total_state, weights + gradients + optimizer):
        raise RuntimeError("the model state differs from its derivation (run-memory-state)")
    # ZeRO-3 gathers one layer's weights (and reduces its gradients) at a time, unsharded.
    gathered = (WEIGHT_BYTES + GRAD_BYTES) * p_r / sh.layers * cfg.pp if stage == 3 else 0.0
    activations, logits = _activation_bytes(cfg)
    cap = cfg.cluster.hbm if capacity is None else capacity
    return Memory(weights, gradients, optimizer, gathered, activations, logits, OVERHEAD_BYTES, cap)


def frugal(cfg: Config) -> Config:
    """The same run with the least activation memory the model knows: full recomputation, and
    sequence parallelism wherever there is tensor parallelism."""
    from dataclasses import replace

    return replace(cfg, recompute="full", sequence_parallel=cfg.tp > 1)


def can_fit(cfg: Config) -> bool:
    """Whether the run fits its GPUs' memory at all: with the least activation memory
    (:func:`frugal`).  False means no recomputation policy saves it: the model state alone, or
    with the layers' inputs, is too large for the GPUs."""
    return peak(frugal(cfg)).fits
