"""The operations of a step (dmlimits.measured.operations): matmuls by the matmul model,
attention at its published utilization, memory-bound operations and the optimizer from HBM
bandwidth (issue #14: a per-operation step model)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from conftest import derivations_of
from dmlimits.core import hardware, published
from dmlimits.core import units as u
from dmlimits.core.symbols import REGISTRY
from dmlimits.costs import matmul
from dmlimits.measured import confront, operations, runs, transformer


def _config(shape="llama2-7b", gpu="h100", n=8, **kw) -> runs.Config:
    kw.setdefault("dp", n // (kw.get("tp", 1) * kw.get("pp", 1)))
    return runs.Config(shape=transformer.shape(shape), cluster=runs.cluster(gpu), n_gpus=n,
                       global_batch_tokens=64 * 4096, seq_len=4096, **kw)  # fmt: skip


def test_derivation_is_registered_and_has_units():
    assert {d.name for d in derivations_of("measured.operations")} == {
        "run-operations-bytes",
        "run-operations-memory",
        "run-operations-scores-bytes",
        "run-operations-scores",
    }
    for expr, unit in operations.COST_FORMULAS.values():
        u.check_unit(expr, REGISTRY.units, unit)


def test_every_cluster_has_a_single_gpu_model():
    for c in runs.CLUSTERS.values():
        scn = operations.device(c.name)
        assert scn["hardware.kernel_latency"] > 0
        assert operations.attention_utilization(c) > 0
    with pytest.raises(ValueError, match="no single-GPU model for cluster 'tpu'"):
        operations.device("tpu")


def test_the_a100_clusters_device_has_the_80_gb_cards_bandwidth():
    """The A100 runs were on 80 GB cards; the book's A100 preset is the 40 GB card."""
    assert operations.device("a100")["hardware.hbm_bandwidth"] == pytest.approx(2.039e12)
    assert operations.device("h100")["hardware.hbm_bandwidth"] == pytest.approx(3.352e12)


def test_attention_runs_at_flashattentions_published_utilization():
    cfg = _config()
    p = operations.parts(cfg)
    flop = cfg.shape.attention_flop_per_token(cfg.seq_len, cfg.recompute)
    want = (
        cfg.global_batch_tokens
        * flop
        / (cfg.cluster.peak_16bit * published.value("flash3.h100_flash2_utilization") * cfg.n_gpus)
    )
    assert p["attention"] == pytest.approx(want)
    a100 = _config(gpu="a100")
    assert operations.attention_utilization(a100.cluster) == published.value(
        "flash2.a100_utilization_max"
    )
    # Blackwell: nothing published; the clock derate stands in.
    b200 = runs.cluster("b200")
    assert operations.attention_utilization(b200) == b200.derate


def test_large_matmuls_run_at_the_derate_thin_ones_below_it():
    """A large model's matmuls take about their FLOP at the clock derate; a small model's
    split eight ways, with one short sequence a micro-batch, take markedly longer."""

    def ratio(cfg):
        p = operations.parts(cfg)
        attn = cfg.shape.attention_flop_per_token(cfg.seq_len, cfg.recompute)
        linear_flop = cfg.shape.flop_per_token(cfg.seq_len, cfg.recompute) - attn
        at_derate = (
            cfg.global_batch_tokens
            * linear_flop
            / (cfg.cluster.peak_16bit * cfg.cluster.derate * cfg.n_gpus)
        )
        return p["linear"] / at_derate

    big = _config("llama2-70b", n=64, tp=8, sharding="fsdp")
    small = runs.Config(
        shape=transformer.SHAPES["gpt3-350m"], cluster=runs.cluster("a100"), n_gpus=8,
        global_batch_tokens=64 * 1024, seq_len=1024, tp=8, dp=1,
    )  # fmt: skip
    assert ratio(big) == pytest.approx(1.0, abs=0.05)
    assert ratio(small) > 1.3


def test_fp8_halves_the_matmuls_and_leaves_attention():
    bf16, fp8 = _config(), _config(precision="fp8")
    p, q = operations.parts(bf16), operations.parts(fp8)
    assert q["linear"] == pytest.approx(p["linear"] / 2)
    assert q["attention"] == pytest.approx(p["attention"])


def test_sequence_parallelism_splits_the_norms_and_residuals():
    plain = _config(n=8, tp=8, dp=1)
    split = dataclasses.replace(plain, sequence_parallel=True)
    assert operations.parts(split)["memory"] < operations.parts(plain)["memory"]
    assert operations.parts(split)["linear"] == operations.parts(plain)["linear"]


def test_the_optimizer_step_shrinks_with_the_zero_group():
    ddp = _config(n=8, sharding="ddp")
    zero1 = _config(n=8, sharding="zero1")
    assert operations.parts(ddp)["optimizer"] == pytest.approx(
        8 * operations.parts(zero1)["optimizer"]
    )
    # Adam's thirty bytes a parameter over the HBM bandwidth, unsharded.
    bw = operations.device("h100")["hardware.hbm_bandwidth"]
    want = operations.OPTIMIZER_BYTES * ddp.shape.params / bw
    assert operations.parts(ddp)["optimizer"] == pytest.approx(want)


def test_the_operations_add_up_to_the_calibrated_step():
    for cfg in (_config(), _config(n=64, pp=4, dp=16), _config(n=64, tp=8, dp=8)):
        split = runs.operation_split(cfg)
        assert sum(split.values()) == pytest.approx(
            runs.predict(cfg, runs.calibrated()).step_time_s
        )
        assert all(v >= 0 for v in split.values())
    with pytest.raises(ValueError, match="operations=True"):
        runs.operation_split(_config(), runs.BOUND)


def test_the_calibrated_mode_times_operations_and_the_bound_does_not():
    cfg = _config()
    assert runs.calibrated().operations and not runs.BOUND.operations
    flop_only = dataclasses.replace(runs.calibrated(), operations=False)
    p = runs.components(cfg)
    res = runs.combine(p, flop_only)
    assert float(res["memory-bound operations"]) == 0.0
    assert float(res["compute"]) == pytest.approx(p["compute"] / (flop_only.matmul * p["derate"]))


def test_combine_works_on_arrays_of_factors():
    cfg = _config(n=64, pp=4, dp=16)
    p = runs.components(cfg)
    f = np.array([0.5, 0.75, 1.0])
    many = runs.combine(p, runs.Factors(matmul=f, derate=True, operations=True))["step"]
    one = [runs.combine(p, runs.Factors(matmul=x, derate=True, operations=True))["step"] for x in f]
    assert np.allclose(many, one)
    assert many[0] > many[1] > many[2]


def test_attention_utilizations_are_overridden_and_restored():
    cfg = _config()
    before = operations.parts(cfg)["attention"]
    kept = runs.components(cfg)["attention"]
    with operations.attention_utilizations({"h100": 0.7}):
        assert operations.parts(cfg)["attention"] == pytest.approx(before / 2)
        # The configuration's components, computed once per process, follow the change.
        assert runs.components(cfg)["attention"] == pytest.approx(kept / 2)
    assert operations.parts(cfg)["attention"] == before
    assert runs.components(cfg)["attention"] == kept
    with pytest.raises(ValueError, match="expected a share in"):
        with operations.attention_utilizations({"h100": 1.5}):
            pass
    with pytest.raises(ValueError, match="no cluster 'x100'"):
        with operations.attention_utilizations({"x100": 0.5}):
            pass
    assert operations.parts(cfg)["attention"] == before


def test_device_values_are_overridden_and_restored():
    """Blackwell's tensor memory, switched off inside the block, slows the B200's matmuls (the
    paper's model lets shared memory bind there); the H100, which has none, does not change."""
    cfg, h100 = _config(gpu="b200"), _config()
    before, kept = operations.parts(cfg)["linear"], runs.components(cfg)["linear"]
    h100_before = operations.parts(h100)["linear"]
    with operations.device_values("b200", hardware.PAPER_TILES):
        assert operations.parts(cfg)["linear"] > 1.2 * before
        assert runs.components(cfg)["linear"] > 1.2 * kept
        assert operations.parts(h100)["linear"] == h100_before
    assert operations.parts(cfg)["linear"] == before
    assert runs.components(cfg)["linear"] == kept
    with pytest.raises(ValueError, match=r"hardware\.mma_sms"):
        with operations.device_values("b200", {"hardware.mma_sms": 0}):
            pass
    with pytest.raises(ValueError, match="no single-GPU model for cluster 'x100'"):
        with operations.device_values("x100", hardware.PAPER_TILES):
            pass
    assert operations.parts(cfg)["linear"] == before


def test_the_chapters_cases_are_valid_configurations():
    cases = confront.operation_cases()
    assert len(cases) == 5
    for cfg in cases.values():
        assert sum(runs.operation_split(cfg).values()) > 0


def test_the_matmul_model_is_the_books():
    """The matmuls are timed by dmlimits.costs.matmul itself: one matmul's three passes."""
    cfg = _config()
    scn = operations.device("h100")
    b = cfg.mbs * cfg.seq_len
    d1, d2, nano, count = operations.block_matmuls(cfg, b)[0]
    assert (nano, count) == (b, 1.0)
    want = sum(float(matmul.matmul_time(scn, d1, round(d2), b, k)) for k in matmul.KINDS)
    got = operations.passes_time(scn, [(d1, d2, b, 1.0)], [0])[0]
    assert got == pytest.approx(want)


def test_the_output_layer_and_the_loss_as_placed():
    """The calibrated mode places the output layer's matmuls and the loss where each run's
    framework does: on the last stage under Megatron-LM's default split (``head`` and ``loss``
    apart), and under nanotron's split every stage's parts alike, the uneven stages timed by
    the schedule (a bubble ratio from :func:`operations.pipeline_stretch`).  Inside
    ``placement("even")`` they are every stage's in equal shares, and the fit the calibrated
    mode uses is redone for that state, then restored."""

    def config(stages="last", pp=4):
        return runs.Config(shape=transformer.shape("llama2-7b"), cluster=runs.cluster("h100"),
                           n_gpus=8, pp=pp, dp=8 // pp, global_batch_tokens=16 * 4096.0,
                           seq_len=4096, stages=stages)  # fmt: skip

    cfg, nano = config(), config("nanotron")
    last = operations.parts(cfg)
    assert last["head"] > 0 and last["loss"] > 0
    parts_nano = operations.parts(nano)
    assert parts_nano["head"] == parts_nano["loss"] == 0
    stretch = operations.pipeline_stretch(nano)
    ratio = (cfg.pp - 1) / cfg.micro_batches
    assert runs.components(nano)["stage_bubble_ratio"] == pytest.approx(stretch - 1)
    assert runs.components(nano)["bubble_ratio"] == pytest.approx(ratio)  # the bound's
    assert runs.components(cfg)["stage_bubble_ratio"] == pytest.approx(ratio)
    # nanotron's stages are uneven: the step is longer than with equal stages, and at least as
    # long as its busiest stage's work.
    times = operations.stage_times(nano, "nanotron")
    assert stretch > 1 + ratio and stretch >= times.max() / times.mean()
    fit = runs.calibrated()
    f = runs.Factors(fit.matmul, fit.collective, 0.0, serial_tp=True, latency=True,
                     operations=True)  # fmt: skip
    step_last = runs.combine(runs.components(cfg), f)
    with operations.placement("even"):
        even = operations.parts(cfg)
        assert even["head"] == even["loss"] == 0 and operations.parts(nano) == even
        assert even["linear"] == pytest.approx(last["linear"] + last["head"] / cfg.pp)
        assert even["memory"] == pytest.approx(last["memory"] + last["loss"] / cfg.pp)
        assert runs.components(nano)["stage_bubble_ratio"] == pytest.approx(ratio)
        step_even = runs.combine(runs.components(cfg), f)
        refit = runs.calibrated()
    # The last stage's whole output layer against a quarter of it: as placed, slower.
    assert step_last["step"] > step_even["step"]
    assert refit.matmul != fit.matmul  # fitted afresh in that state (the chapter's table)
    assert operations.parts(cfg) == last and runs.calibrated() == fit
    # One stage runs everything: the placements agree.
    one = config(pp=1)
    with operations.placement("even"):
        spread = runs.combine(runs.components(one), f)["step"]
    assert spread == pytest.approx(runs.combine(runs.components(one), f)["step"])
    with pytest.raises(ValueError, match="stages must be one of last, nanotron, layers, layout, "
                       "torchtitan, got 'first'"):  # fmt: skip
        dataclasses.replace(cfg, stages="first")
    with pytest.raises(ValueError, match="placement: got 'first'; expected one of even"):
        with operations.placement("first"):
            pass
    with operations.placement("last"):  # every run's on the last stage, nanotron's too
        assert operations.parts(nano) == last
        assert runs.components(nano)["stage_bubble_ratio"] == pytest.approx(ratio)


def test_the_pipeline_stretch_by_hand():
    """Alike chunks stretch the step by the bubble, ``1 + (N_PP - 1) / (v m)``; Megatron-Core's
    split with the embedding and the loss counted as layers (Llama 3.1 405B's recipe: 126 layers
    and two slots over 8 stages of 8 chunks) leaves the first and the last chunk one block of
    their two; a whole micro-batch count is needed to lay the schedule out."""
    cfg = runs.Config(shape=transformer.shape("llama3-405b"), cluster=runs.cluster("h100"),
                      n_gpus=64, tp=8, pp=8, vpp=8, global_batch_tokens=16 * 8192.0, seq_len=8192,
                      stages="layers")  # fmt: skip
    blocks, head = operations.layer_slots_split(cfg)
    assert blocks == (1,) + (2,) * 62 + (1,) and head == 63
    times = operations.stage_times(cfg, "layers")
    assert times.argmax() not in (0, 7)  # the stages between carry whole chunks
    assert operations.pipeline_stretch(cfg) > 1 + 7 / (8 * 16)
    assert operations.stretch(4, 8, 2, (1.0,) * 8) == pytest.approx(1 + 3 / 16)
    assert operations.stretch(4, 8, 1, (1.0,) * 4) == pytest.approx(1 + 3 / 8)
    odd = dataclasses.replace(cfg, global_batch_tokens=8.5 * 8192.0)
    with pytest.raises(ValueError, match="micro-batches a step; expected a whole number"):
        operations.pipeline_stretch(odd)
    with pytest.raises(ValueError, match="128 layers and the embedding and the loss do not"):
        operations.layer_slots_split(
            dataclasses.replace(cfg, shape=dataclasses.replace(cfg.shape, layers=128))
        )


def test_the_playbooks_pipelines_are_split_by_nanotron_and_megatrons_are_not():
    """Where each framework puts the output layer: the Ultra-Scale Playbook's runs split their
    stages as nanotron does, Megatron-LM's runs keep it on the last stage."""
    placed = {}
    for row in runs.dev_rows():
        cfg = runs.interpret(row).config
        if cfg is not None and cfg.pp > 1:
            placed.setdefault(confront.family_label(row), set()).add(cfg.stages)
    assert placed["Ultra-Scale Playbook"] == {"nanotron"}
    assert placed["Megatron-LM"] == {"last"}
    assert placed["torchtitan"] == {"torchtitan"}


def test_torchtitans_split_by_hand():
    """torchtitan's generate_split_points with no split points: the first chunk floor(L / T)
    blocks, the middle ones one more while the remainder lasts, the last the rest and the
    output layer; with blocks that divide evenly, Megatron-LM's split."""
    cfg = _small(126, 8)
    assert operations.torchtitan_split(cfg) == ((15,) + (16,) * 6 + (15,), 7)
    interleaved = dataclasses.replace(cfg, vpp=2)
    assert operations.torchtitan_split(interleaved) == ((7,) + (8,) * 14 + (7,), 15)
    # A remainder larger than the middle chunks: the last chunk takes what is left over.
    assert operations.torchtitan_split(_small(11, 4)) == ((2, 3, 3, 3), 3)
    assert operations.torchtitan_split(_small(32, 4)) == operations.megatron_split(_small(32, 4))
    assert operations.torchtitan_split(_small(7, 2)) == ((3, 4), 1)  # two chunks: no middle
    for layers, pp, vpp in ((126, 8, 1), (126, 8, 2), (11, 4, 1), (61, 4, 3)):
        blocks, head = operations.torchtitan_split(dataclasses.replace(_small(layers, pp), vpp=vpp))
        assert sum(blocks) == layers and len(blocks) == pp * vpp and head == pp * vpp - 1
        assert min(blocks) == blocks[0] and max(blocks) - min(blocks) <= 1 + layers % (pp * vpp)
    with pytest.raises(ValueError, match="torchtitan_split: 8 model chunks for 4 layers"):
        operations.torchtitan_split(_small(4, 8))


def test_torchtitans_pipelined_rows_take_its_defaults():
    """torchtitan's 405B rows give no micro-batches or chunks: its defaults at the benchmark's
    commit are taken (as many micro-batches as stages; two chunks a stage when interleaved),
    and said; the interleaved row is predicted faster than the 1F1B row at the same settings,
    as it ran."""
    rows = [r for r in runs.dev_rows() if "torchtitan" in r["source"] and r["pp"].strip() == "8"
            and r["metric"] == "tokens_per_s_per_gpu"]  # fmt: skip
    seen = {}
    for row in rows:
        it = runs.interpret(row)
        cfg = it.config
        assert cfg.stages == "torchtitan" and round(cfg.micro_batches) == cfg.pp == 8
        interleaved = "interleaved" in row["notes"].lower()
        assert cfg.vpp == (2 if interleaved else 1)
        assert any("one a pipeline stage (torchtitan's default)" in a for a in it.assumed)
        assert interleaved == any("two model chunks a stage" in a for a in it.assumed)
        if "local batch 32" in row["notes"]:
            seen[interleaved] = (float(row["value"]), runs.predict(cfg, runs.calibrated()))
    assert set(seen) == {False, True}
    (one_value, one), (inter_value, inter) = seen[False], seen[True]
    assert inter_value > one_value and inter.tokens_per_s_per_gpu > one.tokens_per_s_per_gpu
    # A row that gives its micro-batch keeps it.
    given = dict(rows[0], mbs="2")
    assert runs.interpret(given).config.mbs == 2


def _small(layers, pp, d_ff=32, vocab=128):
    shape = transformer.Shape("small", layers=layers, d_model=8, heads=2, kv_heads=2, d_ff=d_ff,
                              vocab=vocab)  # fmt: skip
    return runs.Config(shape=shape, cluster=runs.cluster("h100"), n_gpus=pp, pp=pp,
                       global_batch_tokens=8 * 512.0, seq_len=512)  # fmt: skip


def test_nanotrons_split_by_hand():
    """nanotron's count: a block costs 4 d^2 + 3 d d_ff = 1024 here, the output layer V d = 1024.
    Over two stages the shares end at 2560 and 5120: the third block crosses 2560 and stays on
    the first stage, so it gets three blocks and the second one block and the output layer."""
    assert operations.nanotron_split(_small(4, 2)) == ((3, 1), 1)
    # The output layer eight blocks' worth, four stages, shares ending at 3072, 6144, ...: the
    # fourth block crosses the first share, the output layer the second, and the last two
    # stages are left with nothing.
    assert operations.nanotron_split(_small(4, 4, vocab=128 * 8)) == ((4, 0, 0, 0), 1)
    assert operations.megatron_split(_small(4, 2)) == ((2, 2), 1)
    with pytest.raises(ValueError, match="5 layers do not split evenly over 2 model chunks"):
        operations.megatron_split(_small(5, 2))
    with pytest.raises(ValueError, match="split: got 'even'; expected one of last, nanotron"):
        operations.stage_times(_small(4, 2), "even")


def test_the_busiest_stage_over_an_equal_share():
    """Megatron-LM's split puts the output layer and the loss (``h``) on the last of ``N_PP``
    stages of ``L / N_PP`` blocks (``t`` each): the last does ``(N_PP - 1) h / (L t + h)`` more
    than an equal share of the step.  The stages' times add up to the step's compute whatever
    the split, and nanotron's greedy split of the Playbook's 70B model over 16 stages leaves
    its busiest stage, the first, more than 10% above an equal share."""
    cfg = runs.Config(shape=transformer.shape("llama2-7b"), cluster=runs.cluster("h100"),
                      n_gpus=8, pp=4, dp=2, global_batch_tokens=16 * 4096.0,
                      seq_len=4096)  # fmt: skip
    meg, nano = (operations.stage_times(cfg, s) for s in ("last", "nanotron"))
    with operations.placement("last"):
        p = operations.parts(cfg)
    h = p["head"] + p["loss"]
    t = (p["linear"] + p["attention"] + p["memory"]) * cfg.pp / cfg.shape.layers
    assert meg[-1] - meg[0] == pytest.approx(h)
    assert meg.sum() == pytest.approx(nano.sum())
    want = (cfg.pp - 1) * h / (cfg.shape.layers * t + h)
    assert operations.busiest_stage_excess(cfg, "last") == pytest.approx(want)
    shape = transformer.untied(transformer.shape("llama3-70b"))
    seventy = dataclasses.replace(cfg, shape=shape, pp=16, n_gpus=16, dp=1)
    times = operations.stage_times(seventy, "nanotron")
    assert times.argmax() == 0 and operations.busiest_stage_excess(seventy, "nanotron") > 0.1


def test_a_rows_stages_column():
    """A row can say where its pipeline's output layer runs (NVIDIA's file does, from its
    recipes); a bad value names itself."""
    placed = {(r["model"], runs.interpret(r).config.stages) for r in runs.nemo_rows()
              if runs.interpret(r).config.pp > 1}  # fmt: skip
    assert ("LLAMA3.1_405B", "layers") in placed and ("LLAMA3_70B", "last") in placed
    assert ("DeepSeekV3", "layout") in placed
    row = dict(next(r for r in runs.nemo_rows() if r["model"] == "LLAMA3_70B"), stages="first")
    with pytest.raises(ValueError, match="column stages must be one of last, nanotron, layers, "
                       "layout, torchtitan or empty, got 'first'"):  # fmt: skip
        runs.interpret(row)


def test_a_split_that_cannot_be_laid_out_names_why():
    """A row whose framework's split the calibrated mode cannot lay out (nanotron interleaved,
    Megatron-Core's slots that do not divide) is a row that cannot be modelled, with the reason,
    not a crash."""
    row = dict(next(r for r in runs.nemo_rows() if r["model"] == "LLAMA3_70B" and r["pp"] == "8"))
    with pytest.raises(ValueError, match="nanotron_split: got vpp=5; expected 1"):
        runs.interpret(dict(row, stages="nanotron"))
    with pytest.raises(ValueError, match="80 layers and the embedding and the loss do not split"):
        runs.interpret(dict(row, stages="layers"))
    out = runs.predict_rows([dict(row, stages="layers")])
    assert "do not split evenly" in out[0]["prediction_error"]
    # 405B's recipe split (126 + 2 slots over 8 x 8 chunks) with 8.5 micro-batches a step.
    big = next(r for r in runs.nemo_rows() if r["model"] == "LLAMA3.1_405B")
    tokens = float(big["global_batch_tokens"]) * 8.5 / runs.interpret(big).config.micro_batches
    with pytest.raises(ValueError, match=r"8\.5 micro-batches a step cannot be laid out "
                       r"for the layers split"):  # fmt: skip
        runs.interpret(dict(big, global_batch_tokens=repr(tokens)))


def test_faster_hopper_attention_speeds_the_hopper_runs_alone():
    """NVIDIA's runs with attention's core at FlashAttention-3's figure on the Hopper GPUs: the
    H100 rows are predicted faster, every other row exactly as the calibrated mode predicts
    it, the fit is the development rows' (not refitted), and the figures are restored after."""
    from dmlimits.measured import confront

    rows = runs.nemo_rows()
    plain = confront.outside_split(rows=rows)
    faster = confront.faster_hopper_attention(rows)
    flash2 = published.value("flash3.h100_flash2_utilization")
    hopper = np.array([
        operations.ATTENTION_UTILIZATION[it.config.cluster.name] == flash2
        for it in plain["comparison"].interpretations
    ])  # fmt: skip
    assert hopper.any() and not hopper.all()
    before, after = plain["comparison"].calibrated, faster["comparison"].calibrated
    assert np.all(after[hopper] > before[hopper])
    assert np.array_equal(after[~hopper], before[~hopper])
    # At FlashAttention-2's own figure nothing moves.
    same = confront.faster_hopper_attention(rows, flash2)
    assert np.array_equal(same["comparison"].calibrated, before)
    assert np.array_equal(confront.outside_split(rows=rows)["comparison"].calibrated, before)


def test_an_fp8_runs_output_layer_stays_in_16_bit():
    """FP8 runs: the blocks' matmuls at the FP8 peak, the output layer at the 16-bit rate (as
    Megatron-Core and torchtitan keep it), in the calibrated mode's parts and in the bound."""
    with operations.placement("last"):  # the output layer's time apart, on the last stage
        bf16, fp8 = _config(precision="bf16"), _config(precision="fp8")
        p16, p8 = operations.parts(bf16), operations.parts(fp8)
        c = bf16.cluster
        assert p8["head"] == p16["head"] > 0
        assert p8["linear"] == pytest.approx(p16["linear"] * c.peak_16bit / c.peak_fp8)
        assert p8["attention"] == p16["attention"]
    sh = fp8.shape
    attn = sh.attention_flop_per_token(fp8.seq_len)
    head = sh.output_flop_per_token()
    assert head == 6 * sh.d_model * sh.vocab  # forward and two backward matmuls, never recomputed
    blocks = sh.flop_per_token(fp8.seq_len) - attn - head
    expected = fp8.global_batch_tokens * (blocks / c.peak_fp8 + (attn + head) / c.peak_16bit)
    assert runs.components(fp8)["compute"] == pytest.approx(expected / fp8.n_gpus)
    # A 16-bit run's bound is the count over the 16-bit peak, to the last bit as before.
    linear = sh.flop_per_token(bf16.seq_len) - attn
    before = bf16.global_batch_tokens * (linear / c.peak_16bit + attn / c.peak_16bit)
    assert runs.components(bf16)["compute"] == before / bf16.n_gpus


def test_fp8_all_gathers_keep_the_embedding_and_output_layer_in_16_bit():
    """torchtitan's FP8 all-gather converts the blocks' linear layers alone: of the gathered
    bytes, the blocks' parameters travel at one byte and the embedding and the output layer at
    the 16-bit word, so the saving is half the gather's bytes times the blocks' share."""
    cfg = _config(precision="fp8", sharding="fsdp", fp8_allgather=True, n=16)
    plain = dataclasses.replace(cfg, fp8_allgather=False)
    saved = runs.components(plain)["dp_bw"] - runs.components(cfg)["dp_bw"]
    g = cfg.dp * cfg.cp
    bw, _ = runs.group_bandwidth(cfg, g, cfg.tp)
    nag, _ = runs.ZERO_COUNTS[runs.SHARDING[cfg.sharding]]
    w = runs.WORD_BYTES
    dp_time = runs.numeric_functions()["dp"]
    gather = float(dp_time(nag, 0, g, cfg.params_held, cfg.tp, cfg.pp, w)) / bw
    blocks = cfg.shape.block_params / cfg.params_held
    assert 0 < blocks < 1
    assert saved == pytest.approx(gather * (w - runs.FP8_BYTES) / w * blocks)


def test_kept_matmul_times_are_per_scenario_not_per_name():
    """The matmul times parts() keeps are read back only for the scenario they were computed
    with: another scenario of the same name with other values (a slower memory) is timed
    afresh."""
    cfg = _config()
    scn = operations.device(cfg.cluster.name)
    matmuls = operations.block_matmuls(cfg, 8192.0)
    rb = [0.0] * len(matmuls)
    fast = operations.passes_time(scn, matmuls, rb)
    slow_values = {**scn.values, "hardware.hbm_bandwidth": scn["hardware.hbm_bandwidth"] / 100}
    slow = dataclasses.replace(scn, values=slow_values)
    assert slow.name == scn.name
    assert operations.passes_time(slow, matmuls, rb).sum() > 1.5 * fast.sum()
    assert np.array_equal(operations.passes_time(scn, matmuls, rb), fast)
