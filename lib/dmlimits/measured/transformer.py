"""Transformer blocks with attention: parameters and FLOP per token of Llama- and GPT-style models.

The first paper's model (Erdil & Schneider-Joseph 2024) is a stack of MLP blocks: every
parameter is a matmul weight and no cost grows with the sequence.  Measured runs (Fernandez et
al. 2024; the published runs of :mod:`dmlimits.measured.runs`) train transformers, whose blocks add
attention.  This module derives, in sympy, what that adds:

* **Parameters of one block.**  The query and output projections hold ``d²`` weights each; the
  key and value projections ``d · d_kv`` each, where grouped-query attention shares each key and
  value head among ``n_h / n_kv`` query heads, ``d_kv = d n_kv / n_h``.  A gated MLP (SwiGLU, as
  in Llama) has three ``d × d_ff`` matrices, a plain one two (``g`` below).  Norms and biases are
  left out (under a thousandth of the parameters).
* **FLOP per token.**  Each matmul weight costs one multiply-accumulate per token forward and two
  backward (``m_pass`` of the model chapter); the output projection to the vocabulary is a
  matmul too, the input embedding a lookup.  Attention adds, per block and token, the scores
  ``Q K^T`` and their product with ``V``: ``s (w_qk + w_v)`` multiply-accumulates forward over
  the sequence length ``s`` and the queries' and values' widths summed over the heads (``2 s d``
  for plain attention), the convention of PaLM (Chowdhery et al. 2022) and torchtitan, which
  does not halve them for the causal mask.
* **Recomputation.**  Activation checkpointing recomputes forward work in the backward pass:
  ``full`` recomputes each block's forward (``rho_b = rho_a = 1``), ``selective`` only attention's
  core (``rho_a = 1``, Korthikanti et al. 2022).  Model FLOPs (for MFU) never count it; hardware
  FLOPs (HFU, and Megatron's published TFLOP/s) do.

* **Latent attention** (DeepSeek-V2 and V3).  Multi-head latent attention projects a token's
  vector down to a compressed query and a compressed key-and-value, and up from them to every
  head's query, key and value; each head's query also has a rotary part, and one rotary key,
  projected from the token's vector, serves every head.  Its weights are those projections, and
  its core costs, per token and position, the heads' query and value widths rather than twice
  the model's.

* **Mixtures of experts** (Mixtral, DeepSeek-V3).  An MoE layer's MLP is ``experts`` MLPs of
  width ``expert_d_ff``, of which a token goes to ``top_k`` (and to every shared expert).  A
  block's MLP weights are linear in its width, so the parameters count an MoE layer as a dense
  MLP as wide as all its experts, the FLOP as one as wide as a token's experts, each with the
  router's ``d_model x experts`` weights.

Shapes of named models are in :data:`SHAPES`, each with its source.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, fields, replace
from functools import cache

import numpy as np
import sympy as sp

from dmlimits.core import symbols as s
from dmlimits.core import units as u
from dmlimits.core.derivation import Derivation, Step, Substitution, derivation, register
from dmlimits.costs import model

CHAPTER = "diminishing_returns"

_decl = s.REGISTRY.declare
_F = u.flop

n_heads = _decl("n_h", r"n_{\mathrm{h}}", "attention (query) heads per block", defined_in=CHAPTER)
n_kv = _decl(
    "n_kv",
    r"n_{\mathrm{kv}}",
    "key and value heads per block (grouped-query attention)",
    defined_in=CHAPTER,
)
vocab = _decl("V_voc", "V", "vocabulary size", defined_in=CHAPTER)
seq = _decl("s_seq", "s", "sequence length in tokens", defined_in=CHAPTER)
mlp_mats = _decl(
    "g_mlp",
    r"m_{\mathrm{MLP}}",
    "weight matrices of one MLP: 3 gated (SwiGLU), 2 plain",
    defined_in=CHAPTER,
)
p_attn = _decl("P_attn", r"P_{\mathrm{attn}}", "attention weights of one block", defined_in=CHAPTER)
w_qk = _decl(
    "w_qk",
    r"w_{\mathrm{qk}}",
    "width of a block's queries (and keys), summed over the heads",
    defined_in=CHAPTER,
)
w_v = _decl(
    "w_v", r"w_{\mathrm{v}}", "width of a block's values, summed over the heads", defined_in=CHAPTER
)
r_q = _decl(
    "r_q",
    r"d_{\mathrm{c}}'",
    "latent attention: width of the compressed queries",
    defined_in=CHAPTER,
)
r_kv = _decl(
    "r_kv",
    r"d_{\mathrm{c}}",
    "latent attention: width of the compressed keys and values",
    defined_in=CHAPTER,
)
d_head = _decl(
    "d_hd",
    r"d_{\mathrm{h}}",
    "latent attention: width of one head's query, key and value",
    defined_in=CHAPTER,
)
d_rope = _decl(
    "d_rope",
    r"d_{\mathrm{h}}^{R}",
    "latent attention: width of one head's rotary query and of the key they share",
    defined_in=CHAPTER,
)
p_mlp = _decl("P_mlp", r"P_{\mathrm{mlp}}", "MLP weights of one block", defined_in=CHAPTER)
n_matmul = _decl(
    "N_mm",
    r"N_{\mathrm{mm}}",
    "matmul parameters: every block's weights and the output projection",
    defined_in=CHAPTER,
)
rho_b = _decl(
    "rho_b",
    r"\rho_{\mathrm{b}}",
    "block forwards recomputed in the backward pass (0 or 1)",
    defined_in=CHAPTER,
)
rho_a = _decl(
    "rho_a",
    r"\rho_{\mathrm{a}}",
    "attention cores recomputed in the backward pass (0 or 1)",
    defined_in=CHAPTER,
)
flop_token = _decl(
    "F_tok",
    r"F_{\mathrm{tok}}",
    "training FLOP per token, recomputation included",
    _F,
    defined_in=CHAPTER,
)
flop_token_model = _decl(
    "F_tok_model",
    r"F_{\mathrm{tok}}^{\mathrm{model}}",
    "model FLOP per token: training FLOP without recomputation (the numerator of MFU)",
    _F,
    defined_in=CHAPTER,
)

d, L, dff = s.d_model, s.n_layers, s.d_ff
RECOMPUTE = {"none": (0, 0), "selective": (0, 1), "full": (1, 1)}

# A block's weights: query and output projections (d x d each), keys and values (d x d_kv each,
# d_kv = d n_kv / n_h) and the MLP's g matrices; its queries, keys and values as wide as the
# model.  The derivation and the parameter counts of :class:`Shape` both use this one
# substitution.
LLAMA_BLOCK = Substitution(
    "Llama-style block",
    {
        p_attn: 2 * d**2 + 2 * d * (d * n_kv / n_heads),
        p_mlp: mlp_mats * d * dff,
        w_qk: d,
        w_v: d,
    },
    kind="definition",
    source="Touvron et al. 2023",
)
# Multi-head latent attention (DeepSeek-V2 and V3): each head's query and key are d_h wide plus a
# rotary part d_h^R wide, its value d_h wide.  Its weights: the queries' down-projection to d_c'
# and up-projection to every head's query, the keys' and values' joint down-projection to d_c
# with the rotary key beside it (one for all heads), their up-projection to every head's key and
# value, and the output projection from every head's value.
LATENT_WIDTHS = Substitution(
    "latent attention's heads",
    {w_qk: n_heads * (d_head + d_rope), w_v: n_heads * d_head},
    kind="definition",
    source="deepseek2024v3",
)
LATENT_WEIGHTS = Substitution(
    "latent attention's projections",
    {
        p_attn: (
            d * r_q
            + r_q * n_heads * (d_head + d_rope)
            + d * (r_kv + d_rope)
            + r_kv * n_heads * 2 * d_head
            + n_heads * d_head * d
        ),
        p_mlp: mlp_mats * d * dff,
    },
    kind="definition",
    source="deepseek2024v3",
)
NO_RECOMPUTE = Substitution(
    "model FLOPs count no recomputation", {rho_b: 0, rho_a: 0}, kind="definition"
)


def _any_block() -> sp.Expr:
    """Training FLOP per token of any block: its weights, the output projection and attention's
    core, before a block is chosen (the first step of both FLOP derivations)."""
    attn_core = L * seq * (w_qk + w_v)  # multiply-accumulates of Q K^T and A V, per token
    block_w = p_attn + p_mlp
    return s.flop_per_mac * (
        (s.macs_per_param_token + rho_b) * L * block_w
        + s.macs_per_param_token * vocab * d
        + (s.macs_per_param_token + rho_a) * attn_core
    )


_FIRST_STEP = (
    "Every matmul weight costs a multiply-accumulate per token in each of the three passes, "
    "plus one more when its block's forward is recomputed; attention's scores cost, per token, "
    "block and position of the sequence, as many multiply-accumulates as the queries are wide "
    "(summed over the heads), and their product with the values as many as the values are wide"
)


def _counting_steps(block: sp.Expr) -> list[Step]:
    """The two steps that end both FLOP derivations' counts, from a block's FLOP per token:
    the model chapter's pass counts, then no recomputation."""
    counted = model.PASS_COUNTS.apply(block)
    return [
        Step(
            "Counting FLOP as the model chapter does",
            sp.Eq(flop_token, counted),
            using=model.PASS_COUNTS,
        ),
        Step(
            "Without recomputation, the model FLOP per token",
            sp.Eq(flop_token, NO_RECOMPUTE.apply(counted)),
            using=NO_RECOMPUTE,
        ),
    ]


@register
def flop_derivation() -> Derivation:
    e1 = _any_block()
    e2 = LLAMA_BLOCK.apply(e1)
    e5 = 6 * (L * d * (2 * d * (1 + n_kv / n_heads) + mlp_mats * dff) + vocab * d) + (
        12 * L * seq * d
    )
    return derivation(
        "transformer-flop",
        "Training FLOP per token of a transformer",
        [
            Step(_FIRST_STEP, sp.Eq(flop_token, e1)),
            Step(
                "A block's weights: query and output projections, keys and values shared among "
                "the query heads, and the MLP's matrices; its queries, keys and values are as "
                "wide as the model",
                sp.Eq(flop_token, e2),
                using=LLAMA_BLOCK,
            ),
            *_counting_steps(e2),
            Step(
                "Gathered: six FLOP per matmul parameter, and an attention term that grows with "
                "the sequence",
                sp.Eq(flop_token, e5),
            ),
        ],
        chapter=CHAPTER,
    )


@register
def latent_flop_derivation() -> Derivation:
    e1 = _any_block()
    e2 = LATENT_WIDTHS.apply(e1)
    e3 = LATENT_WEIGHTS.apply(e2)
    weights = LATENT_WEIGHTS.mapping[p_attn] + mlp_mats * d * dff
    e6 = 6 * (L * weights + vocab * d) + 6 * L * seq * n_heads * (2 * d_head + d_rope)
    return derivation(
        "transformer-flop-latent",
        "Training FLOP per token of a transformer with latent attention",
        [
            Step(_FIRST_STEP, sp.Eq(flop_token, e1)),
            Step(
                "Each head's query and key are a head's width plus a rotary part wide; its "
                "value is a head's width",
                sp.Eq(flop_token, e2),
                using=LATENT_WIDTHS,
            ),
            Step(
                "The weights: the queries' down- and up-projections, the keys' and values' "
                "joint down-projection with the rotary key beside it, their up-projection, the "
                "output projection and the MLP's matrices",
                sp.Eq(flop_token, e3),
                using=LATENT_WEIGHTS,
            ),
            *_counting_steps(e3),
            Step(
                "Gathered: six FLOP per matmul parameter, and an attention term that grows with "
                "the sequence and with the heads' widths, not with the model's",
                sp.Eq(flop_token, e6),
            ),
        ],
        chapter=CHAPTER,
    )


def _final_rhs() -> tuple[sp.Expr, sp.Expr]:
    """Hardware FLOP per token with the pass counts symbolic (for the unit check), and the
    same counted (recomputation symbols kept), from the derivation's steps."""
    steps = flop_derivation().steps
    return steps[1].expr.rhs, steps[2].expr.rhs


# Any block's FLOP per token, counted, with its weights and widths as arguments: each shape puts
# in its own block's (:meth:`Shape.attention_params`, :meth:`Shape.attention_widths`).
_ARGS = (L, d, vocab, seq, rho_b, rho_a, p_attn, p_mlp, w_qk, w_v)


@cache
def _flop_fn():
    return sp.lambdify(_ARGS, model.PASS_COUNTS.apply(_any_block()), "numpy")


@cache
def _attention_fns():
    """A block's attention weights and its query and value widths, for each kind of block."""
    llama = sp.lambdify(
        (d, n_heads, n_kv),
        (LLAMA_BLOCK.mapping[p_attn], LLAMA_BLOCK.mapping[w_qk], LLAMA_BLOCK.mapping[w_v]),
    )
    latent = sp.lambdify(
        (d, n_heads, r_q, r_kv, d_head, d_rope),
        (LATENT_WEIGHTS.mapping[p_attn], LATENT_WIDTHS.mapping[w_qk], LATENT_WIDTHS.mapping[w_v]),
    )
    return llama, latent


COST_FORMULAS = {
    "flop_per_token": (_final_rhs()[0], _F),
    "model_flop_per_token": (NO_RECOMPUTE.apply(_final_rhs()[0]), _F),
    "latent_flop_per_token": (latent_flop_derivation().steps[2].expr.rhs, _F),
}


# --- Shapes -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Shape:
    """A transformer's shape.  ``tied`` embeddings share the input and output matrices."""

    name: str
    layers: int
    d_model: int
    heads: int
    kv_heads: int
    d_ff: int
    vocab: int
    gated: bool = True
    tied: bool = False
    source: str = ""
    #: Whether training applies dropout (it keeps a mask per dropout); ``None``: as the block's
    #: family does, Megatron-LM's GPT blocks yes, Llama-style blocks no.
    dropout: bool | None = None
    #: A mixture of experts: routed experts of each MoE layer (1: a dense model), how many a
    #: token goes to, the MLP width of one expert, experts every token also goes to (shared),
    #: and the leading layers that keep a dense MLP of width ``d_ff``.
    experts: int = 1
    top_k: int = 1
    expert_d_ff: int = 0
    shared_experts: int = 0
    dense_layers: int = 0
    #: Multi-head latent attention (DeepSeek-V2 and V3) where ``kv_rank`` > 0: the widths of the
    #: compressed queries (``q_rank``) and keys and values (``kv_rank``), of one head's query,
    #: key and value (``head_dim``) and of its rotary part (``rope_dim``).  Its weights, FLOP and
    #: matmuls are its own (derivation ``transformer-flop-latent``); its activations, the
    #: traffic of its memory-bound operations and of context parallelism are counted as those of
    #: plain attention of ``heads`` heads as wide as ``d_model / heads``.
    q_rank: int = 0
    kv_rank: int = 0
    head_dim: int = 0
    rope_dim: int = 0

    def __post_init__(self) -> None:
        for field in ("layers", "d_model", "heads", "kv_heads", "d_ff", "vocab", "experts",
                      "top_k"):  # fmt: skip
            value = getattr(self, field)
            if not isinstance(value, int | np.integer) or value < 1:
                raise ValueError(
                    f"shape {self.name!r}: {field} must be a positive whole number, got {value!r}"
                )
        if self.heads % self.kv_heads:
            raise ValueError(
                f"shape {self.name!r}: kv_heads={self.kv_heads} must divide heads={self.heads}"
            )
        latent = (self.q_rank, self.kv_rank, self.head_dim, self.rope_dim)
        if any(latent) and not (
            all(isinstance(v, int | np.integer) for v in latent)
            and min(self.q_rank, self.kv_rank, self.head_dim) >= 1 and self.rope_dim >= 0
        ):  # fmt: skip
            raise ValueError(
                f"shape {self.name!r}: latent attention needs whole q_rank, kv_rank and "
                f"head_dim >= 1 and rope_dim >= 0, got q_rank={self.q_rank!r}, "
                f"kv_rank={self.kv_rank!r}, head_dim={self.head_dim!r}, "
                f"rope_dim={self.rope_dim!r}"
            )
        if self.experts > 1 and not (
            self.top_k <= self.experts and self.expert_d_ff >= 1
            and 0 <= self.dense_layers < self.layers and self.shared_experts >= 0
        ):  # fmt: skip
            raise ValueError(
                f"shape {self.name!r}: a mixture of experts needs top_k <= experts "
                f"({self.top_k} of {self.experts}), an expert width expert_d_ff >= 1 (got "
                f"{self.expert_d_ff}) and fewer dense layers than layers (got "
                f"{self.dense_layers} of {self.layers})"
            )

    @property
    def trains_with_dropout(self) -> bool:
        """Whether training applies dropout: ``dropout`` where stated, else as the block's
        family does (Megatron-LM's GPT blocks, with a plain MLP, yes; Llama-style blocks no)."""
        return (not self.gated) if self.dropout is None else self.dropout

    @property
    def moe(self) -> bool:
        return self.experts > 1

    @property
    def moe_layers(self) -> int:
        return self.layers - self.dense_layers if self.moe else 0

    @property
    def active_d_ff(self) -> float:
        """The MLP width a token passes through, averaged over the layers: ``d_ff`` in a dense
        layer, the widths of its ``top_k`` routed and its shared experts in an MoE layer."""
        if not self.moe:
            return float(self.d_ff)
        moe = self.expert_d_ff * (self.top_k + self.shared_experts)
        return (self.dense_layers * self.d_ff + self.moe_layers * moe) / self.layers

    @property
    def expert_params(self) -> float:
        """Weights of the routed experts, which expert parallelism splits (0 for a dense model).
        An expert's MLP has the block's ``mlp_mats`` matrices, as the dense MLP does."""
        return float(self.moe_layers * self.experts * self.mlp_mats * self.d_model
                     * self.expert_d_ff)  # fmt: skip

    @property
    def mlp_mats(self) -> int:
        return 3 if self.gated else 2

    @property
    def latent(self) -> bool:
        """Whether the blocks' attention is multi-head latent attention."""
        return self.kv_rank > 0

    def _attention(self) -> tuple[float, float, float]:
        llama, latent = _attention_fns()
        if self.latent:
            out = latent(self.d_model, self.heads, self.q_rank, self.kv_rank, self.head_dim,
                         self.rope_dim)  # fmt: skip
        else:
            out = llama(self.d_model, self.heads, self.kv_heads)
        return tuple(float(v) for v in out)

    @property
    def attention_params(self) -> float:
        """Attention weights of one block (``LLAMA_BLOCK`` or ``LATENT_WEIGHTS``)."""
        return self._attention()[0]

    @property
    def attention_widths(self) -> tuple[float, float]:
        """A block's query (and key) width and value width, summed over the heads: the
        multiply-accumulates of attention's core per token and position of the sequence."""
        return self._attention()[1:]

    def _mlp_params(self, d_ff: float) -> float:
        return self.mlp_mats * self.d_model * d_ff

    @property
    def block_params(self) -> float:
        """Weights of all blocks (of a mixture of experts: every expert's, shared and routed,
        and each MoE layer's router, a ``d_model x experts`` matrix)."""
        attn = self.attention_params
        if self.moe:
            width = self.expert_d_ff * (self.experts + self.shared_experts)
            return (
                self.dense_layers * (attn + self._mlp_params(self.d_ff))
                + self.moe_layers * (attn + self._mlp_params(width))
                + self.moe_layers * self.d_model * self.experts
            )
        return self.layers * (attn + self._mlp_params(self.d_ff))

    @property
    def params(self) -> float:
        """Every parameter: blocks, input embedding and (unless tied) output projection."""
        return self.block_params + self.vocab * self.d_model * (1 if self.tied else 2)

    @property
    def kv_width(self) -> float:
        return self.d_model * self.kv_heads / self.heads

    def flop_per_token(self, seq_len: float, recompute: str = "none") -> float:
        """Training FLOP per token (hardware FLOP: recomputation counted)."""
        if recompute not in RECOMPUTE:
            raise ValueError(f"recompute must be one of {', '.join(RECOMPUTE)}, got {recompute!r}")
        rb, _ = RECOMPUTE[recompute]

        def count(layers, d_ff, vocab):
            return self._count(layers, d_ff, vocab, seq_len, recompute)

        if self.moe:
            # The derivation's count for each group of layers (vocab 0: no output projection),
            # the output projection once (no layers), and each router's d_model x experts
            # weights as matmul weights.
            active = self.expert_d_ff * (self.top_k + self.shared_experts)
            per_mac = model.PASS_COUNTS.mapping[s.flop_per_mac]
            passes = model.PASS_COUNTS.mapping[s.macs_per_param_token] + rb
            router = per_mac * passes * self.moe_layers * self.d_model * self.experts
            return (
                count(0, self.d_ff, self.vocab)
                + count(self.dense_layers, self.d_ff, 0)
                + count(self.moe_layers, active, 0)
                + float(router)
            )
        return count(self.layers, self.d_ff, self.vocab)

    def attention_flop_per_token(self, seq_len: float, recompute: str = "none") -> float:
        """The part of :meth:`flop_per_token` that attention's scores and values cost."""
        return self.flop_per_token(seq_len, recompute) - self.flop_per_token(0, recompute)

    def output_flop_per_token(self, recompute: str = "none") -> float:
        """The part of :meth:`flop_per_token` that the output projection costs (the count with
        no layers)."""
        return self._count(0, self.d_ff, self.vocab, 0, recompute)

    def _count(self, layers: float, d_ff: float, vocab: float, seq_len: float, recompute: str):
        """The transformer chapter's FLOP count of ``layers`` blocks of MLP width ``d_ff`` and
        an output projection over ``vocab`` words."""
        if recompute not in RECOMPUTE:
            raise ValueError(f"recompute must be one of {', '.join(RECOMPUTE)}, got {recompute!r}")
        rb, ra = RECOMPUTE[recompute]
        attn, (wqk, wv) = self.attention_params, self.attention_widths
        return float(_flop_fn()(layers, self.d_model, vocab, seq_len, rb, ra, attn,
                                self._mlp_params(d_ff), wqk, wv))  # fmt: skip

    def model_flop_per_token(self, seq_len: float) -> float:
        """Model FLOP per token, the numerator of MFU."""
        return self.flop_per_token(seq_len, "none")

    def with_params(self, params: float) -> Shape:
        """The same shape with the MLP width set so that the parameter count is ``params``."""
        embed = self.vocab * self.d_model * (1 if self.tied else 2)
        attn = self.attention_params
        d_ff = round(((params - embed) / self.layers - attn) / (self.mlp_mats * self.d_model))
        if d_ff < 1:
            raise ValueError(
                f"no {self.name} shape has {params:.3g} parameters: expected more than "
                f"{embed + self.layers * attn:.3g}"
            )
        return replace(self, name=f"{self.name} (MLP width {d_ff})", d_ff=d_ff)


LLAMA2 = "Touvron et al. 2023, Llama 2 (arXiv:2307.09288), Table 1 and the released configs"
LLAMA3 = "Llama Team 2024, The Llama 3 Herd of Models (arXiv:2407.21783), Table 3"
LLAMA32 = "Meta, Llama 3.2 model card and released config.json (2024)"

#: Named model shapes, each with its source.
SHAPES: dict[str, Shape] = {
    "llama2-7b": Shape("Llama 2 7B", 32, 4096, 32, 32, 11008, 32000, source=LLAMA2),
    "llama2-13b": Shape("Llama 2 13B", 40, 5120, 40, 40, 13824, 32000, source=LLAMA2),
    "llama2-70b": Shape("Llama 2 70B", 80, 8192, 64, 8, 28672, 32000, source=LLAMA2),
    "llama3.2-1b": Shape("Llama 3.2 1B", 16, 2048, 32, 8, 8192, 128256, tied=True, source=LLAMA32),
    "llama3.2-3b": Shape("Llama 3.2 3B", 28, 3072, 24, 8, 8192, 128256, tied=True, source=LLAMA32),
    "llama3-8b": Shape("Llama 3.1 8B", 32, 4096, 32, 8, 14336, 128256, source=LLAMA3),
    "llama3-70b": Shape("Llama 3.1 70B", 80, 8192, 64, 8, 28672, 128256, source=LLAMA3),
    "llama3-405b": Shape("Llama 3.1 405B", 126, 16384, 128, 8, 53248, 128256, source=LLAMA3),
}
LLAMA_FAMILY = ("llama3.2-1b", "llama3.2-3b", "llama3-8b", "llama3-70b", "llama3-405b")

MIXTRAL = "Jiang et al. 2024, Mixtral of Experts (arXiv:2401.04088), Table 1"
DEEPSEEK_V3 = (
    "DeepSeek-AI 2024, DeepSeek-V3 Technical Report (arXiv:2412.19437), section 4.2 and the "
    "released config.json"
)
#: Mixtures of experts.  Mixtral 8x7B: Mistral 7B's blocks with eight experts of its MLP, two a
#: token.  DeepSeek-V3: three dense layers, then 256 routed experts of width 2048 (eight a
#: token) and one shared; multi-head latent attention of 128 heads, each 128 wide with a rotary
#: part 64 wide, from queries compressed to 1536 and keys and values to 512 (section 4.2).
SHAPES["mixtral-8x7b"] = Shape(
    "Mixtral 8x7B", 32, 4096, 32, 8, 14336, 32000, experts=8, top_k=2, expert_d_ff=14336,
    source=MIXTRAL,
)  # fmt: skip
SHAPES["deepseek-v3"] = Shape(
    "DeepSeek-V3", 61, 7168, 128, 128, 18432, 129280, experts=256, top_k=8, expert_d_ff=2048,
    shared_experts=1, dense_layers=3, q_rank=1536, kv_rank=512, head_dim=128, rope_dim=64,
    source=DEEPSEEK_V3,
)  # fmt: skip

GPT3 = "Brown et al. 2020, Language Models are Few-Shot Learners (arXiv:2005.14165), Table 2.1"
#: GPT-3's vocabulary: GPT-2's byte-pair encoding (Radford et al. 2019), as GPT-3 reuses it.
GPT3_VOCAB = 50257
#: The GPT-3 family (Brown et al. 2020, Table 2.1): layers, d_model and heads by size; a plain MLP
#: four times as wide and the input embedding shared with the output (GPT-2's architecture).
GPT3_SIZES = {
    "125m": ("Small", 12, 768, 12),
    "350m": ("Medium", 24, 1024, 16),
    "760m": ("Large", 24, 1536, 16),
    "1.3b": ("XL", 24, 2048, 24),
    "2.7b": ("2.7B", 32, 2560, 32),
    "6.7b": ("6.7B", 32, 4096, 32),
    "13b": ("13B", 40, 5140, 40),
    "175b": ("175B", 96, 12288, 96),
}
for _size, (_label, _layers, _width, _heads) in GPT3_SIZES.items():
    SHAPES[f"gpt3-{_size}"] = Shape(
        f"GPT-3 {_label}", _layers, _width, _heads, _heads, 4 * _width, GPT3_VOCAB,
        gated=False, tied=True, source=GPT3,
    )  # fmt: skip

NEMO_LAUNCHER = (
    "NVIDIA NeMo-Framework-Launcher at 26e42fa9, launcher_scripts/conf/training/{}.yaml "
    "(the shapes of NeMo's performance tables)"
)
#: Nemotron's tokenizer: the 256K SentencePiece model the 340B configuration names
#: (``nemotron_2_256k.model``); the 8B and 22B configurations name none, so theirs is assumed.
NEMOTRON_VOCAB = 256_000
#: The shapes NVIDIA's NeMo performance tables name (NeMo 24.07): layers, width, heads,
#: key-value heads, MLP width, from each model's launcher configuration.  GPT-3 5B and 20B are
#: NeMo's sizes, not Brown et al.'s: GPT-2's vocabulary, a GELU MLP four times as wide,
#: embeddings shared (NeMo's default, which those files leave).  Nemotron: a squared-ReLU MLP
#: (not gated), untied embeddings.
NEMO_SHAPES = {
    "nemo-gpt3-5b": ("GPT-3 5B (NeMo)", 24, 4096, 32, 32, 16384, GPT3_VOCAB, True, "gpt3/5b"),
    "nemo-gpt3-20b": ("GPT-3 20B (NeMo)", 44, 6144, 48, 48, 24576, GPT3_VOCAB, True, "gpt3/20b"),
    "nemotron-8b": ("Nemotron 8B", 32, 4096, 32, 32, 16384, NEMOTRON_VOCAB, False,
                    "nemotron/nemotron_8b"),
    "nemotron-22b": ("Nemotron 22B", 40, 6144, 48, 48, 24576, NEMOTRON_VOCAB, False,
                     "nemotron/nemotron_22b"),
    "nemotron-340b": ("Nemotron 340B", 96, 18432, 96, 8, 73728, NEMOTRON_VOCAB, False,
                      "nemotron/nemotron_340b"),
}  # fmt: skip
for _key, (_label, _layers, _width, _heads, _kv, _ff, _vocab, _tied, _file) in NEMO_SHAPES.items():
    SHAPES[_key] = Shape(
        _label, _layers, _width, _heads, _kv, _ff, _vocab, gated=False, tied=_tied,
        source=NEMO_LAUNCHER.format(_file),
    )  # fmt: skip

GPT_VOCAB = 51200  # Narayanan et al. 2021, section 5.1 (and the published rows' notes)
GPT_HEAD_WIDTH = 128  # heads do not change the FLOP count of multi-head attention


def untied(base: Shape) -> Shape:
    """The same shape with separate input and output embeddings."""
    return replace(base, name=f"{base.name}, untied embeddings", tied=False)


def gpt_shape(name: str, layers: int, d_model: int) -> Shape:
    """A GPT-style block (multi-head attention, plain MLP four times as wide), as Megatron-LM's
    published runs train (Narayanan et al. 2021)."""
    heads = max(1, d_model // GPT_HEAD_WIDTH)
    return Shape(
        name,
        layers,
        d_model,
        heads,
        heads,
        4 * d_model,
        GPT_VOCAB,
        gated=False,
        source="Narayanan et al. 2021 (GPT-style: plain MLP of width 4 d, vocabulary 51200)",
    )


#: The fields that make a shape's attention latent, at the values that make it plain.
PLAIN_ATTENTION = {"q_rank": 0, "kv_rank": 0, "head_dim": 0, "rope_dim": 0}


@contextmanager
def preset_values(name: str, **values):
    """Within the ``with`` block, the preset ``name`` of :data:`SHAPES` has ``values`` (fields
    of :class:`Shape`) changed: to test how much a result depends on them, for example
    DeepSeek-V3's attention counted as plain (``preset_values("deepseek-v3",
    **PLAIN_ATTENTION)``).  A bad name, field or value is refused here, naming it."""
    base = shape(name)
    known = {f.name for f in fields(Shape)}
    bad = sorted(set(values) - known)
    if bad:
        raise ValueError(
            f"no field {', '.join(bad)} in a shape; expected some of {', '.join(sorted(known))}"
        )
    SHAPES[name] = replace(base, **values)  # Shape refuses a bad value
    try:
        yield SHAPES[name]
    finally:
        SHAPES[name] = base


def shape(name: str) -> Shape:
    """A named shape, or a clear error listing the names."""
    try:
        return SHAPES[name]
    except KeyError:
        raise ValueError(
            f"unknown model shape {name!r}; expected one of {', '.join(SHAPES)}"
        ) from None
