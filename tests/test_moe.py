"""Mixtures of experts in the model of measured runs (issue #14: presets for Mixtral and
DeepSeek-V3, expert parallelism): their parameters, FLOP, memory and all-to-all traffic."""

from __future__ import annotations

import dataclasses

import pytest
from conftest import derivations_of
from dmlimits.core import published
from dmlimits.core import units as u
from dmlimits.core.symbols import REGISTRY
from dmlimits.measured import memory, operations, runs, transformer

MIXTRAL = transformer.SHAPES["mixtral-8x7b"]
DEEPSEEK = transformer.SHAPES["deepseek-v3"]


def _config(shape=MIXTRAL, n=64, ep=8, tp=1, **kw) -> runs.Config:
    return runs.Config(shape=shape, cluster=runs.cluster("h100"), n_gpus=n,
                       global_batch_tokens=2 * n * 4096, seq_len=4096, tp=tp, dp=n // tp,
                       ep=ep, **kw)  # fmt: skip


def _matmul_params(shape) -> float:
    """Matmul weights a token meets: its training FLOP without attention, over six."""
    return (shape.model_flop_per_token(4096) - shape.attention_flop_per_token(4096)) / 6


@pytest.mark.parametrize(("shape", "key"), [(MIXTRAL, "mixtral"), (DEEPSEEK, "deepseek_v3")])
def test_presets_have_their_published_sizes(shape, key):
    """Total within 3% and active within 5% of the published counts, which are rounded to two
    or three significant digits."""
    assert shape.params == pytest.approx(published.value(f"{key}.total_params"), rel=0.03)
    assert _matmul_params(shape) == pytest.approx(published.value(f"{key}.active_params"), rel=0.05)


def test_an_moe_layer_costs_its_active_experts():
    """Mixtral's FLOP are a dense model's whose MLP is two experts wide, plus the routers."""
    dense = dataclasses.replace(MIXTRAL, experts=1, top_k=1, expert_d_ff=0, d_ff=2 * 14336)
    router = 2 * 3 * MIXTRAL.layers * MIXTRAL.d_model * MIXTRAL.experts
    assert MIXTRAL.model_flop_per_token(4096) == pytest.approx(
        dense.model_flop_per_token(4096) + router
    )
    assert MIXTRAL.active_d_ff == 2 * 14336
    # DeepSeek-V3: three dense layers of width 18432, the rest eight routed and one shared.
    want = (3 * 18432 + 58 * 2048 * 9) / 61
    assert DEEPSEEK.active_d_ff == pytest.approx(want)


def test_expert_parallelism_splits_the_experts_state():
    one, eight = _config(ep=1), _config(ep=8)
    assert eight.params_held == pytest.approx(MIXTRAL.params - MIXTRAL.expert_params * 7 / 8)
    m1, m8 = memory.peak(one), memory.peak(eight)
    assert m8.weights == pytest.approx(m1.weights * eight.params_held / MIXTRAL.params)


def test_expert_parallelism_is_refused_where_it_cannot_be():
    with pytest.raises(ValueError, match="Llama 2 7B is dense"):
        _config(shape=transformer.SHAPES["llama2-7b"], ep=8)
    with pytest.raises(ValueError, match="ep=3 must divide the experts"):
        _config(ep=3)
    with pytest.raises(ValueError, match="a mixture of experts needs top_k <= experts"):
        dataclasses.replace(MIXTRAL, top_k=9)


def test_the_all_to_alls_are_derived_and_charged():
    assert "ep-traffic" in {d.name for d in derivations_of("measured.runs")}
    expr, unit = runs.COST_FORMULAS["ep_bytes"]
    u.check_unit(expr, REGISTRY.units, unit)
    cfg = _config(tp=2, ep=8)  # the expert-parallel group spans two nodes: it pays latency
    parts = runs.components(cfg)
    assert parts["ep_bw"] > 0 and parts["ep_lat"] > 0
    assert runs.components(_config(ep=8))["ep_lat"] == 0  # within a node: NVLink
    pred = runs.predict(cfg, runs.calibrated())
    assert pred.breakdown["expert parallel"] > 0
    # In series: the step grows by all of it.
    no_ep = dict(parts, ep_bw=0.0, ep_lat=0.0)
    slower = pred.step_time_s - runs.predict(cfg, runs.calibrated(), no_ep).step_time_s
    assert slower == pytest.approx(pred.breakdown["expert parallel"])


def test_the_expert_matmuls_do_the_active_work():
    """Over a micro-batch, the forward multiply-accumulates of one block's matmuls on one
    tensor-parallel rank are its active weights' (attention and the experts a token goes to)
    times the tokens, over the tensor-parallel degree, plus the router's, whole on every rank
    (d_model x experts, in the MoE layers only)."""
    for cfg in (_config(), _config(tp=2, ep=8), _config(shape=DEEPSEEK, n=512, ep=64)):
        sh, b = cfg.shape, 4096.0
        macs = sum(d1 * d2 * nano * n for d1, d2, nano, n in operations.block_matmuls(cfg, b))
        # Plain attention's weights counted here (query and output d x d, keys and values
        # d x d_kv each), not taken from the shape; latent attention's are checked below.
        attn = (
            sh.attention_params if sh.latent else 2 * sh.d_model**2 + 2 * sh.d_model * sh.kv_width
        )
        active = attn + sh.mlp_mats * sh.d_model * sh.active_d_ff
        router = sh.d_model * sh.experts * sh.moe_layers / sh.layers
        assert macs == pytest.approx(b * (active / cfg.tp + router), rel=1e-9)


def test_latent_attention_is_counted_as_deepseek_publishes_it():
    """DeepSeek-V3's attention: its five projections hold the weights its shape counts; tensor
    parallelism splits all but the two down-projections; its core costs its heads' query and
    value widths (128 heads of 192 and 128), not twice the model's width."""
    sh, b = DEEPSEEK, 4096.0
    assert sh.latent and not MIXTRAL.latent
    # The report's projections (section 4.2), matrix by matrix: the queries' down (d x d_c') and
    # up with their rotary part (d_c' x 128 (128 + 64)), the keys' and values' down (d x d_c)
    # with the shared rotary key (d x 64), their up (d_c x 128 x 128, twice), the output.
    d = 7168
    matrices = [(d, 1536), (1536, 128 * 192), (d, 512), (d, 64), (512, 128 * 128),
                (512, 128 * 128), (128 * 128, d)]  # fmt: skip
    assert sh.attention_params == sum(a * c for a, c in matrices) == 187_105_280
    assert sh.attention_widths == (128 * (128 + 64), 128 * 128)
    down = sh.d_model * (sh.q_rank + sh.kv_rank + sh.rope_dim)
    for tp in (1, 2, 8):
        cfg = _config(shape=sh, n=512, ep=64, tp=tp)
        macs = sum(d1 * d2 * nano * n for d1, d2, nano, n in operations.block_matmuls(cfg, b)[:5])
        assert macs == pytest.approx(b * (down + (sh.attention_params - down) / tp), rel=1e-9)
    # The rendered derivation's attention term (its result less the same at a sequence of zero).
    tf = transformer
    rhs = tf.latent_flop_derivation().result.rhs
    term = (rhs - rhs.subs(tf.seq, 0)).subs({
        tf.seq: 4096, tf.L: sh.layers, tf.n_heads: sh.heads, tf.d_head: sh.head_dim,
        tf.d_rope: sh.rope_dim,
    })  # fmt: skip
    assert sh.attention_flop_per_token(4096) == pytest.approx(float(term), rel=1e-12)
    plain = dataclasses.replace(sh, **transformer.PLAIN_ATTENTION)
    assert sh.attention_flop_per_token(4096) > 2.8 * plain.attention_flop_per_token(4096)
    # Its weights are close to plain attention's: within 0.2% of the model.
    assert abs(sh.params - plain.params) < 2e-3 * sh.params
    with pytest.raises(ValueError, match="latent attention needs whole q_rank"):
        dataclasses.replace(sh, head_dim=0)


def test_moe_rows_are_read_by_name():
    rows = [
        {"model": "Mixtral 8x7B", "gpu": "H100", "n_gpus": "64", "dp": "64", "ep": "8",
         "seq_len": "4096", "global_batch_tokens": "524288", "sharding": "FSDP",
         "metric": "MFU", "value": "", "source": "test", "notes": ""},
        {"model": "DeepSeek-V3", "gpu": "H100", "n_gpus": "2048", "pp": "16",
         "dp": "128", "ep": "64", "seq_len": "4096", "global_batch_tokens": "16777216",
         "sharding": "ZeRO-1", "metric": "MFU", "value": "", "source": "test",
         "notes": "full AC"},
    ]  # fmt: skip
    out = runs.predict_rows(rows)
    assert [r["prediction_error"] for r in out] == ["", ""]
    assert all(0 < float(r["predicted_mfu_calibrated"]) < 1 for r in out)


def test_a_preset_can_be_changed_for_a_block_and_is_restored():
    """``preset_values`` changes a preset inside its block (the rows that name it follow) and
    restores it after; a bad field or value is refused naming it."""
    row = {"model": "DeepSeek-V3", "gpu": "H100", "n_gpus": "2048", "pp": "16", "dp": "128",
           "ep": "64", "seq_len": "4096", "global_batch_tokens": "16777216",
           "metric": "MFU", "value": "", "source": "test", "notes": ""}  # fmt: skip
    with transformer.preset_values("deepseek-v3", **transformer.PLAIN_ATTENTION) as plain:
        assert not plain.latent and runs.interpret(row).config.shape is plain
    assert runs.interpret(row).config.shape is DEEPSEEK and DEEPSEEK.latent
    with pytest.raises(ValueError, match="no field q_lora"):
        with transformer.preset_values("deepseek-v3", q_lora=1):
            pass
    with pytest.raises(ValueError, match="latent attention needs"):
        with transformer.preset_values("deepseek-v3", rope_dim=-1):
            pass
    with pytest.raises(ValueError, match="unknown model shape 'gpt-5'"):
        with transformer.preset_values("gpt-5", layers=2):
            pass
    with pytest.raises(RuntimeError, match="inside"):
        with transformer.preset_values("deepseek-v3", **transformer.PLAIN_ATTENTION):
            raise RuntimeError("inside the block")
    assert transformer.SHAPES["deepseek-v3"] is DEEPSEEK
