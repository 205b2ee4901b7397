"""Peak memory per GPU (dmlimits.measured.memory): what fits, counted by hand and against
measured runs (issue #12: Llama 2 70B with FSDP on 8 H100s cannot run)."""

from __future__ import annotations

import csv
import dataclasses
import json
from importlib import resources
from pathlib import Path

import pytest
from conftest import derivations_of
from dmlimits import cli
from dmlimits.core import units as u
from dmlimits.core.symbols import REGISTRY
from dmlimits.measured import confront, memory, runs, transformer

BENCH = Path(str(resources.files("dmlimits") / "data" / "hf_ultrascale_benchmarks.csv"))


def _config(shape="llama2-70b", n=8, **kw) -> runs.Config:
    kw.setdefault("dp", n // (kw.get("tp", 1) * kw.get("pp", 1)))
    return runs.Config(shape=transformer.shape(shape), cluster=runs.cluster("h100"), n_gpus=n,
                       global_batch_tokens=n * 4096, seq_len=4096, **kw)  # fmt: skip


def test_derivations_are_registered_and_have_units():
    found = derivations_of("measured.memory")
    assert {d.name for d in found} == {
        "run-memory-state",
        "run-memory-activations",
        "run-memory-op-selective",
    }
    for expr, unit in memory.COST_FORMULAS.values():
        u.check_unit(expr, REGISTRY.units, unit)


def test_llama2_70b_with_fsdp_does_not_fit_on_eight_h100s():
    cfg = _config(sharding="fsdp")
    m = memory.peak(cfg)
    state = m.weights + m.gradients + m.optimizer
    # A hand count: sixteen bytes a parameter, split over eight ranks.
    assert state == pytest.approx(16 * cfg.shape.params / 8)
    assert state > cfg.cluster.hbm and not m.fits and not memory.can_fit(cfg)
    assert memory.can_fit(_config(n=64, sharding="fsdp"))


def test_zero_stages_split_what_they_say():
    p = _config(n=64, sharding="ddp").shape.params
    for sharding, (w, g, o) in {"ddp": (1, 1, 1), "zero1": (1, 1, 64), "zero2": (1, 64, 64),
                                "zero3": (64, 64, 64)}.items():  # fmt: skip
        m = memory.peak(_config(n=64, sharding=sharding))
        assert (m.weights, m.gradients, m.optimizer) == pytest.approx(
            (2 * p / w, 2 * p / g, 12 * p / o)
        ), sharding


def _llama_layer_bytes(sh) -> float:
    """One Llama layer's activations per token, tensor by tensor, 2 bytes a value: the
    attention block's norm input and output, query, keys, values and attention output; the MLP
    block's norm input and output, gate and up outputs, the SiLU of the gate and the product."""
    d, f, kv = sh.d_model, sh.d_ff, sh.kv_width
    attention = d + d + d + kv + kv + d
    mlp = d + d + f + f + f + f
    return 2 * (attention + mlp)


def test_activations_by_hand():
    """Llama 2 7B keeps its tensors (no scores: FlashAttention) for every layer, and the
    logits (10 bytes a vocabulary entry) at the loss; tensor parallelism without sequence
    parallelism splits all but the norms' inputs and outputs; full recomputation keeps the
    layers' inputs and one layer's tensors."""
    sh = transformer.shape("llama2-7b")
    tok, d, L = 4096, sh.d_model, sh.layers
    per_layer = _llama_layer_bytes(sh)
    base = memory.peak(_config("llama2-7b", n=8, sharding="fsdp"))
    assert base.activations == pytest.approx(per_layer * tok * L)
    assert base.logits == pytest.approx(10 * tok * sh.vocab)
    tp = memory.peak(_config("llama2-7b", n=8, tp=4, sharding="fsdp"))
    norms = 2 * 4 * d
    assert tp.activations == pytest.approx((norms + (per_layer - norms) / 4) * tok * L)
    assert tp.logits == pytest.approx(10 * tok * sh.vocab / 4)
    full = memory.peak(_config("llama2-7b", n=8, sharding="fsdp", recompute="full"))
    assert full.activations == pytest.approx(2 * d * tok * L + per_layer * tok)


def test_a_gpt_block_keeps_korthikantis_34_bytes():
    sh = transformer.gpt_shape("gpt", 24, 2048)
    total, unsplit = memory.layer_bytes_per_token(sh)
    assert (total, unsplit) == (34 * 2048, 10 * 2048)


def test_a_block_without_dropout_keeps_no_masks():
    """MPT trains its GPT-style blocks without dropout (the held-out rows say so): two bytes a
    hidden unit fewer than Megatron-LM's."""
    from dataclasses import replace

    sh = replace(transformer.gpt_shape("gpt", 24, 2048), dropout=False)
    assert memory.layer_bytes_per_token(sh) == (32 * 2048, 8 * 2048)
    mpt = runs.interpret(runs.holdout_rows()[0]).config.shape
    assert mpt.dropout is False and not mpt.gated


def test_sequence_parallelism_splits_everything_but_what_it_gathers():
    """With sequence parallelism a layer's tensors are split t ways; a framework that keeps the
    gathered inputs of its column-parallel linears adds two whole hidden vectors a token."""
    sh = transformer.shape("llama2-7b")
    tok, d, L = 4096, sh.d_model, sh.layers
    per_layer = _llama_layer_bytes(sh)
    sp = memory.peak(_config("llama2-7b", n=8, tp=4, sharding="fsdp", sequence_parallel=True))
    assert sp.activations == pytest.approx(per_layer / 4 * tok * L)
    kept = memory.peak(_config("llama2-7b", n=8, tp=4, sharding="fsdp", sequence_parallel=True,
                               keeps_gathered_inputs=True))  # fmt: skip
    assert kept.activations - sp.activations == pytest.approx(2 * 2 * d * tok * L)


def test_the_busiest_pipeline_stage_sets_the_peak():
    """In 1F1B the first stage holds as many micro-batches as there are stages, of its share of
    the layers; the last holds one and the logits.  The peak is the larger, not their sum."""
    sh = transformer.shape("llama2-7b")
    tok, L = 4096, sh.layers
    per_layer = _llama_layer_bytes(sh)
    cfg = runs.Config(shape=sh, cluster=runs.cluster("h100"), n_gpus=8, pp=4, dp=2,
                      global_batch_tokens=64 * tok, seq_len=tok, sharding="zero1")  # fmt: skip
    m = memory.peak(cfg)
    first = 4 * per_layer * tok * L / 4
    last = per_layer * tok * L / 4 + 10 * tok * sh.vocab
    assert m.activations + m.logits == pytest.approx(max(first, last))
    assert m.logits == (0.0 if first > last else pytest.approx(10 * tok * sh.vocab))
    # One micro-batch a step: the first stage holds one, and the last, with the logits, wins.
    single = runs.Config(shape=sh, cluster=runs.cluster("h100"), n_gpus=8, pp=4, dp=2,
                         global_batch_tokens=2 * tok, seq_len=tok, sharding="zero1")  # fmt: skip
    one = memory.peak(single)
    assert one.logits == pytest.approx(10 * tok * sh.vocab)
    assert one.activations == pytest.approx(per_layer * tok * L / 4)


def test_predict_says_it_does_not_fit(capsys):
    args = ["predict", "--model", "llama2-70b", "--gpu", "h100", "--gpus", "8",
            "--sharding", "fsdp"]  # fmt: skip
    assert cli.main(args) == 0
    out = capsys.readouterr().out
    assert "DOES NOT FIT" in out and "no recomputation makes it fit" in out
    assert cli.main([*args, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["fits"] is False and result["peak_memory_gib"] > 80


def test_every_published_row_gets_the_memory_columns(capsys):
    assert cli.main(["predict", "--runs", "lib/dmlimits/data/published_runs.csv",
                     "--format", "csv"]) == 0  # fmt: skip
    rows = list(csv.DictReader(capsys.readouterr().out.splitlines()))
    assert rows and all(r["predicted_peak_memory_gib"] and r["predicted_fits"] for r in rows)
    # Every published run ran: none is called impossible.
    assert all(r["predicted_fits"] == "true" for r in rows)


def _bench_rows():
    with BENCH.open() as fh:
        return list(csv.DictReader(fh))


def test_the_check_agrees_with_recorded_out_of_memory_outcomes():
    """On the Ultra-Scale Playbook's 3,287 runs (crashed or out of memory, or ran), the peak
    estimate's verdict agrees with the outcome 92% of the time (measured, in sample: the two
    constants are fitted on this file); the floor here is issue #14's 90%."""
    rows = _bench_rows()
    agree = sum(memory.peak(runs.interpret(r).config).fits == (r["status"] == "ok") for r in rows)
    assert agree / len(rows) >= 0.90


def test_the_constants_are_the_fit_on_the_benchmark_file():
    """PLAYBOOK_ACTIVATION_FACTOR and OVERHEAD_BYTES are what fit_constants finds on the runs
    that ran: a changed formula that moves the fit fails here until they are refitted.  The
    fitted peak is within 15% of the recorded one for the median run (measured: 12%), and
    within 20% for each model size held out of the fit (measured: 11% to 19%)."""
    rows = _bench_rows()
    configs = [runs.interpret(r).config for r in rows]
    measured = [float(r["gpu_memory_gb"]) * 1e9 if r["gpu_memory_gb"] else float("nan")
                for r in rows]  # fmt: skip
    ran = [r["status"] == "ok" for r in rows]
    fit = [(c, m) for c, m, ok in zip(configs, measured, ran, strict=True) if ok and m == m]
    assert memory.fit_constants(*zip(*fit, strict=True)) == (
        memory.PLAYBOOK_ACTIVATION_FACTOR,
        memory.OVERHEAD_BYTES,
    )
    errors = sorted(abs(memory.peak(c).total / m - 1) for c, m in fit)
    assert errors[len(errors) // 2] <= 0.15
    held = memory.held_out(configs, measured, ran, [r["model"] for r in rows])
    assert set(held) == {"1B", "3B", "8B", "80B"}
    assert all(g["median_abs_error"] <= 0.20 for g in held.values()), held


def _known_configs() -> list[runs.Config]:
    shapes = ("llama2-7b", "llama2-13b", "llama2-70b")
    return [
        _config(sh, n=8, sharding="fsdp", recompute=r) for r in ("none", "full") for sh in shapes
    ]


def test_fit_constants_finds_known_constants_and_refuses_mismatched_input():
    configs = _known_configs()
    measured = [memory.peak(c, factor=1.5, overhead=2 * 2**30).total for c in configs]
    assert memory.fit_constants(configs, measured) == (1.5, 2 * 2**30)
    with pytest.raises(ValueError, match="one measured peak a configuration"):
        memory.fit_constants(configs, [1e9])


def test_each_group_held_out_is_predicted_by_the_others_fit():
    """Runs made from known constants: every group held out gets them back from the others,
    and its peaks and out-of-memory calls are right; a group whose every run failed gets no
    peak error, and a fit with nothing to fit on says so."""
    configs = _known_configs()
    measured = [memory.peak(c, factor=1.3, overhead=2**30).total for c in configs]
    ran = [True] * len(configs)
    groups = ["a", "b", "c"] * 2
    held = memory.held_out(configs, measured, ran, groups)
    assert set(held) == {"a", "b", "c"}
    for g in held.values():
        assert (g["factor"], g["overhead"], g["runs"]) == (1.3, 2**30, 2)
        assert g["median_abs_error"] == pytest.approx(0, abs=1e-12)
    with pytest.raises(ValueError, match="one measured peak, outcome and group"):
        memory.held_out(configs, measured, ran, groups[:-1])
    with pytest.raises(ValueError, match="outside group 'a'"):
        memory.held_out(configs, measured, ran, ["a"] * len(configs))


def test_only_the_playbooks_runs_take_the_fitted_factor_and_only_torchtitan_keeps_gathers():
    """The Playbook's nanotron runs gather the inputs of their column-parallel linears again
    in the backward pass (nanotron's tp_recompute_allgather) and take the fitted activation
    factor; torchtitan's keep the gathered inputs; every other source takes the count alone."""
    row = {"model": "8B", "nodes": "1", "gpus": "8", "dp": "1", "tp": "8", "pp": "1",
           "zero_stage": "0", "micro_batch": "1", "grad_accum": "1", "global_batch_seqs": "1",
           "seq_len": "4096", "global_batch_tokens": "4096", "status": "ok", "mfu_pct": "40",
           "tokens_per_s_per_gpu": "1000", "gpu_memory_gb": "30"}  # fmt: skip
    playbook = runs.interpret(row).config
    assert playbook.sequence_parallel and not playbook.keeps_gathered_inputs
    assert playbook.activation_factor == memory.PLAYBOOK_ACTIVATION_FACTOR > 1
    for r in runs.dev_rows():
        if int(r.get("tp") or 1) > 1 and "torchtitan" in r["source"].lower():
            cfg = runs.interpret(r).config
            assert cfg.keeps_gathered_inputs and cfg.activation_factor == 1.0
    assert all(runs.interpret(r).config.activation_factor == 1.0 for r in runs.holdout_rows())
    with pytest.raises(
        ValueError, match=r"activation_factor must be a number of at least 1, got 0\.5"
    ):
        _config(activation_factor=0.5)


def test_most_runs_outside_the_development_split_are_called_fitting():
    """MosaicML's MPT runs all ran, and the memory count saw none of them when its constants were
    fitted (nor does the Playbook's activation factor apply to them): it calls 88 of the 95
    fitting (measured; the seven misses hold 24,576 to 49,152 tokens in a micro-batch, where
    activations and logits weigh most).  The floor here is 85%."""
    ran = [runs.interpret(r).config for r in runs.holdout_rows()]
    assert sum(memory.peak(c).fits for c in ran) / len(ran) >= 0.85


def test_the_playbooks_factor_is_not_every_frameworks():
    """What the chapter says of the factor, and glues: applied to MosaicML's runs, which all
    ran, it would call most of them out of memory (measured: 32 of 95 fitting, against 88
    without it).  And the numbers it glues are the library's."""
    out = confront.outside_the_fit()
    ran = [runs.interpret(r).config for r in runs.holdout_rows()]
    assert out["holdout_runs"] == len(ran)
    assert out["holdout_called_fitting"] == sum(memory.peak(c).fits for c in ran)
    assert out["holdout_called_fitting_with_playbook_factor"] < out["holdout_runs"] / 2
    assert out["holdout_called_fitting"] > out["holdout_called_fitting_with_playbook_factor"]
    assert out["peak_rows"] == sum(r["metric"] == "peak_memory" for r in runs.dev_rows()) > 0


def test_torchtitans_selective_recomputation_keeps_every_other_matmul():
    """By hand for a Llama block: its input, the outputs of q, v, gate and down (the first,
    third, fifth and seventh matmuls) and the attention's output, 2 bytes a value; under tensor
    parallelism the row-parallel down projection's partial sum stays whole, and the input is
    split only with sequence parallelism.  A torchtitan row takes the policy, a Megatron-LM row
    does not, and the policy shrinks the peak against keeping everything."""
    sh = transformer.shape("llama2-7b")
    d, kv, f = sh.d_model, sh.kv_width, sh.d_ff
    assert memory.op_saved_bytes_per_token(sh, 1, False) == 2 * (d + d + kv + d + f + d)
    assert memory.op_saved_bytes_per_token(sh, 4, False) == pytest.approx(
        2 * (d + (d + kv + d + f) / 4 + d)
    )
    assert memory.op_saved_bytes_per_token(sh, 4, True) == pytest.approx(
        2 * ((d + d + kv + d + f) / 4 + d)
    )
    # A plain MLP runs q, k, v, o, up, down: q, v and up are kept, the down projection is not.
    plain = dataclasses.replace(sh, gated=False)
    assert memory.op_saved_bytes_per_token(plain, 2, False) == pytest.approx(
        2 * ((d + kv + d + f) / 2 + d)
    )
    kept = memory.peak(_config("llama2-7b", n=8, recompute="selective", selective_policy="op"))
    megatron = memory.peak(_config("llama2-7b", n=8, recompute="selective"))
    assert (
        kept.activations
        < megatron.activations
        == memory.peak(_config("llama2-7b", n=8)).activations
    )
    for r in runs.dev_rows():
        policy = runs.interpret(r).config.selective_policy
        assert policy == ("op" if "torchtitan" in r["source"].lower() else "attention"), r["source"]
    with pytest.raises(ValueError, match="selective_policy must be 'attention' or 'op', got 'x'"):
        _config(selective_policy="x")


def test_a_torchtitan_pipeline_stage_keeps_its_weights_and_gradients_whole():
    """Under pipeline parallelism torchtitan's FSDP keeps a stage's 16-bit weights gathered and
    accumulates its gradients unsharded in fp32: six bytes a parameter of the stage, against one
    layer's weights and gradients at a time otherwise; without pipeline stages nothing moves."""
    from dataclasses import replace

    cfg = runs.Config(shape=transformer.shape("llama2-70b"), cluster=runs.cluster("h100"),
                      n_gpus=64, global_batch_tokens=64 * 4096 * 4, seq_len=4096,
                      pp=4, dp=16, sharding="fsdp", stage_keeps_gathered=True)  # fmt: skip

    p_stage = cfg.shape.params / 4
    assert memory.peak(cfg).gathered == pytest.approx(6 * p_stage)
    plain = memory.peak(replace(cfg, stage_keeps_gathered=False)).gathered
    assert plain == pytest.approx(4 * p_stage / cfg.shape.layers * 4)
    flat = replace(cfg, pp=1, dp=64, stage_keeps_gathered=True)
    assert (
        memory.peak(flat).gathered
        == memory.peak(replace(flat, stage_keeps_gathered=False)).gathered
    )
    for r in runs.dev_rows():
        keeps = runs.interpret(r).config.stage_keeps_gathered
        assert keeps == ("torchtitan" in r["source"].lower()), r["source"]


def test_what_the_memory_count_assumes_of_a_framework_is_named():
    """A row's interpretation names every memory assumption it takes from the framework."""
    notes = {}
    for r in runs.dev_rows():
        i = runs.interpret(r)
        text = " ".join(i.assumed)
        if i.config.recompute == "selective" and i.config.selective_policy == "op":
            notes.setdefault("op", []).append("per-op policy" in text)
        if i.config.stage_keeps_gathered and i.config.pp > 1:
            notes.setdefault("stage", []).append("pipeline stage's weights gathered" in text)
    assert set(notes) == {"op", "stage"} and all(all(v) for v in notes.values()), notes
    row = {"model": "8B", "nodes": "1", "gpus": "8", "dp": "8", "tp": "1", "pp": "1",
           "zero_stage": "0", "micro_batch": "1", "grad_accum": "1", "global_batch_seqs": "8",
           "seq_len": "4096", "global_batch_tokens": "32768", "status": "ok", "mfu_pct": "40",
           "tokens_per_s_per_gpu": "1000", "gpu_memory_gb": "30"}  # fmt: skip
    assert any("fitted factor" in a for a in runs.interpret(row).assumed)


def test_a_peak_above_the_gpu_that_fits_with_recomputation_says_so(capsys):
    """NVIDIA's Llama 3 70B FSDP run on 64 GB200s (recomputation not stated): at no
    recomputation its peak exceeds the GPU's memory, yet it ran; the row says which policy each
    memory column is at, so the two columns do not read as a contradiction."""
    assert cli.main(["predict", "--runs", "lib/dmlimits/data/published_runs_nemo.csv",
                     "--format", "csv"]) == 0  # fmt: skip
    rows = list(csv.DictReader(capsys.readouterr().out.splitlines()))
    over = [r for r in rows if not memory.peak(runs.interpret(r).config).fits]
    assert all(float(r["predicted_peak_memory_gib"]) * 2**30 > runs.interpret(r).config.cluster.hbm
               for r in over)  # fmt: skip
    assert over, "expected a row whose peak without recomputation exceeds its GPU"
    for r in rows:
        noted = "fits with full recomputation" in r["prediction_assumed"]
        assert noted == (r in over and r["predicted_fits"] == "true"), r["model"]
