"""What a run's framework does that the model reads from the framework's own code (issue #55,
item 2): Megatron-Bridge's overlap of tensor parallelism with the matmuls, and the attention
kernels measured by FlashAttention-2's benchmark, kept as a test of the calibrated mode's one
share of the peak."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from dmlimits.core import published
from dmlimits.core import symbols as s
from dmlimits.costs import model
from dmlimits.measured import confront, operations, runs, transformer


def _nemo_tp_row() -> dict:
    return next(r for r in runs.nemo_rows() if int(r["tp"] or 1) > 1 and r["gpu"].startswith("H"))


# --- Tensor parallelism overlapped ---------------------------------------------------------------
def test_megatron_bridge_runs_overlap_their_tensor_parallel_collectives():
    it = runs.interpret(_nemo_tp_row())
    assert it.config.tp_comm_overlap
    assert any("overlapped with their matmuls" in a for a in it.assumed)
    dev = [runs.interpret(r).config for r in runs.dev_rows()]
    assert not any(c.tp_comm_overlap for c in dev)


def test_a_row_can_say_its_collectives_ran_in_series():
    row = _nemo_tp_row()
    serial = runs.interpret(dict(row, tp_comm_overlap="false")).config
    assert not serial.tp_comm_overlap
    with pytest.raises(ValueError, match="column tp_comm_overlap must be true or false"):
        runs.interpret(dict(row, tp_comm_overlap="maybe"))


def test_the_overlap_hides_what_the_matmuls_cover_and_no_more():
    cfg = runs.interpret(_nemo_tp_row()).config
    fac = runs.calibrated()
    over = runs.predict(cfg, fac)
    serial = runs.predict(dataclasses.replace(cfg, tp_comm_overlap=False), fac)
    t_tp = serial.breakdown["tensor parallel"]
    assert over.step_time_s < serial.step_time_s
    # With the matmuls longer than the transfers, one step in tp of each collective waits.
    parts = runs.components(cfg)
    assert (parts["linear"] + parts["head"]) / fac.matmul > t_tp
    latency = parts["tp_lat"]
    want = _ring_exchange(t_tp - latency, (parts["linear"]) / fac.matmul, cfg.tp) + latency
    assert over.breakdown["tensor parallel"] == pytest.approx(want)
    assert serial.step_time_s - over.step_time_s == pytest.approx(t_tp - want)


def _ring_exchange(t_bw: float, t_lin: float, n: int) -> float:
    """Exposed transfer time of a collective split into n steps beside its matmul, simulated
    step by step: the first transfer alone, then each transfer beside the previous step's
    matmul, then the last matmul alone."""
    clock = t_bw / n  # the first step's transfer: nothing to run beside it yet
    for _ in range(n - 1):
        clock += max(t_bw / n, t_lin / n)  # a transfer beside the matmul of the step before
    clock += t_lin / n  # the last step's matmul
    return clock - t_lin


@pytest.mark.parametrize("scale", [0.2, 3.0])
def test_the_overlap_is_the_ring_exchange_simulated(scale):
    """With transfers shorter (0.2) and longer (3) than the matmuls, the exposed time of an
    overlapped collective is the step-by-step simulation's, on arrays as on one row."""
    cfg = runs.interpret(_nemo_tp_row()).config
    fac = runs.calibrated()
    parts = runs.components(cfg)
    t_lin = parts["linear"] / fac.matmul
    parts = {k: np.array([v, v]) for k, v in parts.items()}
    parts["tp_bw"] = np.array([scale, scale]) * t_lin * fac.collective
    got = runs.combine(parts, fac)["tensor parallel"]
    want = _ring_exchange(scale * t_lin, t_lin, cfg.tp) + parts["tp_lat"][0]
    assert got == pytest.approx(np.array([want, want]))


def test_a_single_rank_has_nothing_to_overlap():
    row = next(r for r in runs.nemo_rows() if int(r["tp"] or 1) == 1)
    cfg = runs.interpret(row).config
    fac = runs.calibrated()
    off = dataclasses.replace(cfg, tp_comm_overlap=not cfg.tp_comm_overlap)
    assert runs.predict(cfg, fac).step_time_s == pytest.approx(runs.predict(off, fac).step_time_s)


def test_nvidias_rows_are_predicted_better_with_the_overlap():
    """The rows that led to it (not blind to it: said in the chapter and the bench)."""
    with_overlap = confront.outside_split(rows=runs.nemo_rows())
    serial = confront.outside_split(rows=confront.without_tp_overlap(runs.nemo_rows()))
    assert with_overlap["step_multi_node"] < serial["step_multi_node"]
    assert with_overlap["mfu_points"] < serial["mfu_points"]


# --- Attention kernels as measured --------------------------------------------------------------
def test_the_kernel_file_has_both_gpus_masks_and_head_dimensions():
    rows = published.data_rows(operations.ATTENTION_KERNEL_DATA)
    keys = {(r["gpu"], r["kernel"], r["causal"], r["head_dim"]) for r in rows}
    for gpu in ("a100", "h100"):
        for causal in ("true", "false"):
            for dim in ("64", "128"):
                assert (gpu, operations.FUSED_KERNEL, causal, dim) in keys
    assert {r["read"] for r in rows} == {"label", "bar"}
    # FlashAttention-2's published A100 figure, causal, head dimension 128, 16k tokens.
    assert operations.kernel_rate("a100", "flash2", 128, 16384) == pytest.approx(189e12)


def test_the_rate_is_interpolated_and_held_at_the_ends():
    seqs, rates = operations.kernel_table()[("h100", "flash2", True, 128)]
    mid = operations.kernel_rate("h100", "flash2", 128, np.sqrt(seqs[2] * seqs[3]))
    assert mid == pytest.approx((rates[2] + rates[3]) / 2)
    assert operations.kernel_rate("h100", "flash2", 128, 1e6) == rates[-1]
    assert operations.kernel_rate("h100", "flash2", 256, 4096) == operations.kernel_rate(
        "h100", "flash2", 128, 4096
    )
    between = operations.kernel_rate("a100", "flash2", 96, 4096)
    lo, hi = (operations.kernel_rate("a100", "flash2", d, 4096) for d in (64, 128))
    assert between == pytest.approx((lo + hi) / 2)
    with pytest.raises(ValueError, match="no measurements of kernel 'flash3' on 'h100'"):
        operations.kernel_rate("h100", "flash3", 128, 4096)


def test_the_measured_rule_times_attention_from_the_kernel_and_the_scalar_overrides_it():
    cfg = runs.Config(shape=transformer.shape("llama3-8b"), cluster=runs.cluster("h100"),
                      n_gpus=8, dp=8, global_batch_tokens=64 * 8192, seq_len=8192)  # fmt: skip
    flop = cfg.shape.attention_flop_per_token(cfg.seq_len, cfg.recompute)
    share = cfg.global_batch_tokens * flop / cfg.n_gpus
    with operations.attention_rule("measured"):
        got = operations.fused_attention(cfg)
        rate = operations.kernel_rate("h100", "flash2", 128, 8192)
        passes = model.PASS_COUNTS.mapping[s.macs_per_param_token]  # the model's count
        counted = share * operations.CAUSAL_SHARE * operations.BENCHMARK_PASSES / passes
        assert got == pytest.approx(counted / rate)
        with operations.attention_utilizations({"h100": 0.5}):
            assert operations.fused_attention(cfg) == pytest.approx(
                share / (cfg.cluster.peak_16bit * 0.5)
            )
    scalar = operations.fused_attention(cfg)
    assert scalar == pytest.approx(
        share / (cfg.cluster.peak_16bit * operations.ATTENTION_UTILIZATION["h100"])
    )
    with pytest.raises(ValueError, match="attention rule: got 'x'; expected one of measured"):
        with operations.attention_rule("x"):
            pass


def test_the_kernels_measured_speed_is_not_the_calibrated_mode_because_it_predicts_worse():
    """What the module says: with FlashAttention-2's measured throughput the development rows
    are predicted worse held out than at one published share of the peak."""
    got = confront.attention_rules_compared()
    assert got["measured"]["held_out_points"] > got["utilization"]["held_out_points"]
    assert operations.ATTENTION["rule"] == "utilization"
