"""Small shapes on one node (issue #55, item 2): vTrain's Megatron-DeepSpeed runs of GPT shapes
with d_model 1024 on 2 to 8 A100s, read from their published layout, timed with an unfused
attention (its scores through HBM) and the framework's host-side floor under a block's time."""

from __future__ import annotations

import csv
import dataclasses
import io
import subprocess
import sys
from importlib import resources
from pathlib import Path

import numpy as np
import pytest
from conftest import SHARED
from dmlimits.core import published
from dmlimits.measured import confront, memory, operations, runs

VTRAIN = runs.HOST_FLOOR["megatron-deepspeed"]


@pytest.fixture(scope="module")
def rows() -> tuple[dict[str, str], ...]:
    return runs.vtrain_rows()


@pytest.fixture(scope="module")
def predicted(rows) -> list[dict]:
    return runs.predict_rows(rows)


def _errors(predicted) -> np.ndarray:
    measured = np.array([float(r["iteration time (ms)"]) / 1e3 for r in predicted])
    model = np.array([float(r["predicted_step_time_s"]) for r in predicted])
    return model / measured - 1


# --- Reading the file ---------------------------------------------------------------------------
def test_a_header_in_the_last_comment_line_is_read_as_the_header():
    lines = ["# source", "# a,b,c", "1,2,3", "4,5,6"]
    header, rows = published.read_table(lines)
    assert header == ["a", "b", "c"]
    assert rows == [{"a": "1", "b": "2", "c": "3"}, {"a": "4", "b": "5", "c": "6"}]


def test_blank_lines_quoted_fields_and_prose_comments_are_read_as_written():
    lines = ["# Source: a paper, a table", "", "name,note", 'x,"two', 'lines"', "y,plain", ""]
    header, rows = published.read_table(lines)
    assert header == ["name", "note"]
    assert rows == [{"name": "x", "note": "two\nlines"}, {"name": "y", "note": "plain"}]
    # A comment with a number among its fields is no header; a lone '#' line ends the comments.
    assert published.read_table(["# 2024, eight GPUs", "1,2", "3,4"])[0] == ["1", "2"]
    assert published.read_table(["# a, b", "#", "1,2"])[0] == ["1", "2"]
    # A short row's missing fields are empty; a long one is refused with its number.
    assert published.read_table(["a,b,c", "1,2"])[1] == [{"a": "1", "b": "2", "c": ""}]
    with pytest.raises(ValueError, match="data row 2 has 4 fields, expected at most 3"):
        published.read_table(["a,b,c", "1,2,3", "1,2,3,4"])
    assert published.read_table(["\ufeff# source", "# a,b", "1,2"])[0] == ["a", "b"]


def test_a_named_header_row_wins_over_a_comment():
    header, rows = published.read_table(["# x,y", "a,b", "1,2"])
    assert header == ["a", "b"] and rows == [{"a": "1", "b": "2"}]
    # A numeric first row whose comment has another field count: no header is made up.
    header, rows = published.read_table(["# a note", "1,2", "3,4"])
    assert header == ["1", "2"] and rows == [{"1": "3", "2": "4"}]


def test_the_project_file_has_every_published_column(rows):
    assert len(rows) == 720
    assert runs.VTRAIN_COLUMNS <= set(rows[0])
    assert {r["hidden size"] for r in rows} == {"1024"}


def test_a_vtrain_row_means_what_vtrain_ran(rows):
    row = next(r for r in rows if r["tensor parallelism"] == "4")
    it = runs.interpret(row)
    cfg = it.config
    assert (cfg.tp, cfg.pp, cfg.dp) == tuple(
        int(row[k]) for k in ("tensor parallelism", "pipeline parallelism", "data parallelism")
    )
    assert cfg.shape.layers == int(row["# layers"]) and cfg.shape.d_model == 1024
    assert cfg.shape.heads == 16 and cfg.shape.trains_with_dropout
    assert cfg.shape.vocab == 50688  # 50,257 padded to a multiple of 128 x 4
    assert (cfg.precision, cfg.recompute) == ("fp16", "full")
    assert cfg.attention_kernel == "unfused"
    assert cfg.host_floor_s == pytest.approx(runs.host_floor("megatron-deepspeed"))
    assert cfg.global_batch_tokens == int(row["global batch"]) * int(row["sequence length"])
    assert it.reported == pytest.approx(
        runs.ideal_time(cfg, "model") / (float(row["iteration time (ms)"]) / 1e3)
    )
    assert any("vTrain's layout" in a for a in it.assumed)


def test_every_row_is_predicted_with_an_interval(predicted):
    out = confront.with_intervals(predicted)
    assert all(not r["prediction_error"] for r in out)
    for col in (*runs.OUTPUT_COLUMNS, *confront.INTERVAL_COLUMNS):
        assert col in out[0]
    assert all(r["predicted_step_time_s"] and r["predicted_step_time_low_s"] for r in out)


def test_predict_runs_reads_the_shared_layout_from_the_command_line(tmp_path):
    """The file as published, its header a comment line, through ``predict --runs``."""
    path = tmp_path / "vtrain.csv"
    text = (resources.files("dmlimits") / "data" / VTRAIN).read_text()
    path.write_text("\n".join(text.splitlines()[:12]) + "\n")
    out = subprocess.run(
        [sys.executable, "-m", "dmlimits", "predict", "--runs", str(path)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    got = list(csv.DictReader(io.StringIO(out.stdout)))
    assert len(got) == 8
    assert all(r["predicted_step_time_s"] and not r["prediction_error"] for r in got)
    assert "iteration time (ms)" in got[0]


# --- What the model does with them --------------------------------------------------------------
def test_an_unfused_attention_costs_more_and_grows_with_the_square_of_the_sequence(rows):
    cfg = runs.interpret(rows[0]).config
    flash = dataclasses.replace(cfg, attention_kernel="flash")
    assert operations.parts(cfg)["attention"] > 1.5 * operations.parts(flash)["attention"]

    def scores(seq: int) -> float:
        c = dataclasses.replace(cfg, seq_len=seq, global_batch_tokens=cfg.sequences * seq)
        return operations.unfused_attention(c) / c.global_batch_tokens

    # Per token, the scores' bytes and FLOP grow with the sequence: from 1024 to 4096 tokens
    # about four times, less the kernels' latency spread over more tokens.
    assert 3.0 < scores(4096) / scores(1024) < 4.5


def test_the_host_floor_binds_for_one_sequence_and_not_for_eight(rows):
    fac = runs.calibrated()

    def overhead_share(mbs: str) -> float:
        row = next(r for r in rows if r["micro batch"] == mbs and r["pipeline parallelism"] == "1"
                   and r["tensor parallelism"] == "1")  # fmt: skip
        p = runs.predict(runs.interpret(row).config, fac)
        return p.breakdown["framework overhead"] / p.step_time_s

    assert overhead_share("1") > 0.5
    assert overhead_share("8") == 0.0


def test_a_changed_floor_reaches_the_step(rows):
    cfg = runs.interpret(next(r for r in rows if r["micro batch"] == "1")).config
    fac = runs.calibrated()
    none = runs.predict(dataclasses.replace(cfg, host_floor_s=0.0), fac).step_time_s
    twice = runs.predict(dataclasses.replace(cfg, host_floor_s=2 * cfg.host_floor_s), fac)
    assert twice.step_time_s > runs.predict(cfg, fac).step_time_s > none


def test_one_floor_serves_one_to_four_ranks_and_not_eight():
    """What the docstring and the chapter say of the floor: within a tenth of it from one
    tensor-parallel rank to four, and more than a quarter above it at eight (the runs' own
    spread, measured; a floor per degree would be fitted to it)."""
    floor = runs.host_floor("megatron-deepspeed")
    by = runs.host_floors_by_degree("megatron-deepspeed")
    assert set(by) == {1, 2, 4, 8}
    assert all(abs(v / floor - 1) < 0.1 for tp, v in by.items() if tp <= 4)
    assert by[8] > 1.25 * floor
    # Below the rows' raw time a block and micro-batch: the rest of the step is taken out.
    raw = [
        float(r["iteration time (ms)"]) / 1e3
        / (int(r["global batch"]) / (int(r["data parallelism"]) * int(r["micro batch"])))
        / int(r["# layers"])
        for r in runs.vtrain_rows()
        if r["micro batch"] == "1" and r["pipeline parallelism"] == "1"
    ]  # fmt: skip
    assert floor < float(np.median(raw))
    with pytest.raises(ValueError, match="no host-side floor measured for framework 'nanotron'"):
        runs.host_floor("nanotron")


def test_the_floor_is_the_a100_nodes_and_a_row_can_state_its_own(rows):
    row = dict(rows[0], host_floor_s="0.002")
    assert runs.interpret(row).config.host_floor_s == 0.002
    with pytest.raises(ValueError, match="column host_floor_s must be a number of seconds"):
        runs.interpret(dict(rows[0], host_floor_s="fast"))
    h100 = dict(runs.normalize(rows[0])[0], gpu="H100-SXM5-80GB (8/node)")
    it = runs.interpret(h100)
    assert it.config.host_floor_s == 0.0
    assert any("measured on a100 nodes, not h100" in a for a in it.assumed)


# --- Against the measurements (in sample: the floor is measured on this file) -------------------
def test_the_d1024_half_is_predicted_within_fifteen_percent(predicted):
    """In sample (the floor is measured on these rows); without either cause the median error
    is several times larger (confront.small_shapes, the chapter's figure)."""
    err = _errors(predicted)
    assert np.median(np.abs(err)) <= 0.15
    assert np.quantile(np.abs(err), 0.9) <= 0.35


def test_the_time_follows_the_work_where_the_gpu_binds(predicted):
    """Where eight sequences a micro-batch keep the GPU busy, the step grows with the layers as
    measured: the ratio of 24 layers to 12 within a tenth of the measured one."""
    def mean_time(layers: str, key: str) -> float:
        sel = [r for r in predicted if r["micro batch"] == "8" and r["# layers"] == layers
               and r["pipeline parallelism"] == "1"]  # fmt: skip
        return float(np.mean([float(r[key]) for r in sel]))

    measured = mean_time("24", "iteration time (ms)") / mean_time("12", "iteration time (ms)")
    model = mean_time("24", "predicted_step_time_s") / mean_time("12", "predicted_step_time_s")
    assert model == pytest.approx(measured, rel=0.1)


def test_bad_settings_are_refused_with_the_value(rows):
    cfg = runs.interpret(rows[0]).config
    with pytest.raises(ValueError, match="attention_kernel must be one of flash, unfused, got 'x'"):
        dataclasses.replace(cfg, attention_kernel="x")
    with pytest.raises(ValueError, match=r"host_floor_s must be a number of seconds >= 0, got -1"):
        dataclasses.replace(cfg, host_floor_s=-1)
    row = dict(rows[0], attention_kernel="fused")
    with pytest.raises(ValueError, match="column attention_kernel must be one of flash, unfused"):
        runs.interpret(row)


# --- Issue #55's acceptance: every data file, with no crash ---------------------------------------
#: The project's run files whose names do not say "runs".
RUN_FILES = {"hf_ultrascale_benchmarks.csv", "vtrain_single_node_d1024.csv"}
def _run_files():
    """Every CSV at the top of the project's data folder (its subfolders are not read here)
    and, where it is beside the project, the two run files of ../shared."""
    data = resources.files("dmlimits") / "data"
    ours = sorted(p.name for p in data.iterdir() if p.name.endswith(".csv"))
    shared = SHARED / "data"
    theirs = [shared / n for n in ("published_runs_dev.csv", "vtrain_single_node_d1024.csv")]
    return [("project", n) for n in ours] + [("shared", str(p)) for p in theirs if p.exists()]


@pytest.mark.parametrize(("where", "name"), _run_files())
def test_predict_runs_writes_every_new_column_for_every_row(where, name):
    """``predict --runs`` (in process: the rows it reads, predicted and given intervals) on every
    data file: each row gets every prediction and interval column, a prediction or its reason,
    and nothing raises.  Files that hold no runs get the reason on every row."""
    if where == "project":
        rows = published.data_rows(name)
    else:
        with open(name, newline="") as fh:
            rows = published.read_table(fh.read().splitlines())[1]
    out = confront.with_intervals(runs.predict_rows(rows))
    assert len(out) == len(rows)
    for r in out:
        for col in (*runs.OUTPUT_COLUMNS, *confront.INTERVAL_COLUMNS):
            assert col in r
    holds_runs = "runs" in Path(name).name or Path(name).name in RUN_FILES
    if holds_runs:  # every run is predicted, with its interval
        assert all(r["predicted_step_time_s"] and r["predicted_step_time_low_s"] for r in out), [
            r["prediction_error"] for r in out if r["prediction_error"]
        ][:3]
    else:  # a file of other numbers: every row says why it is not a run
        assert all(r["prediction_error"] for r in out)


def test_an_unfused_attention_keeps_its_scores_unless_recomputed(rows):
    """Korthikanti et al.'s 5 a s^2 b a layer: the softmax's output, the dropout mask and the
    dropout's output, a row of the sequence for each of the rank's heads; one pipeline stage."""
    row = next(r for r in rows if r["tensor parallelism"] == "2"
               and r["pipeline parallelism"] == "1")  # fmt: skip
    cfg = runs.interpret(row).config
    per_token = memory.unfused_score_bytes_per_token(cfg)
    assert per_token == memory.UNFUSED_SCORE_BYTES[True] * cfg.shape.heads / cfg.tp * cfg.seq_len
    flash = dataclasses.replace(cfg, attention_kernel="flash")
    assert memory.unfused_score_bytes_per_token(flash) == 0.0
    tokens = cfg.mbs * cfg.seq_len
    for recompute, layers in (("none", cfg.shape.layers), ("full", 1),
                              ("selective", 1)):  # fmt: skip
        unfused = memory.peak(dataclasses.replace(cfg, recompute=recompute))
        fused = memory.peak(dataclasses.replace(flash, recompute=recompute))
        assert unfused.total - fused.total == pytest.approx(per_token * tokens * layers, rel=1e-9)


def test_the_floor_stops_binding_at_a_larger_micro_batch_on_more_ranks(rows):
    def first_free(tp: str) -> int:
        row = next(r for r in rows if r["tensor parallelism"] == tp
                   and r["pipeline parallelism"] == "1" and r["# layers"] == "24")  # fmt: skip
        shares = confront.floor_shares(runs.interpret(row).config)
        assert all(0 <= s < 1 for s in shares.values())
        assert list(shares.values()) == sorted(shares.values(), reverse=True)
        return min(b for b, s in shares.items() if s == 0)

    assert first_free("4") > first_free("1")
    with pytest.raises(ValueError, match="micro-batch sizes must be whole numbers"):
        confront.floor_shares(runs.interpret(rows[0]).config, sizes=(1.5,))
