"""The error bar of a prediction (issue #55): an interval from the leave-one-source-out
residuals of the run's regime, and a flag for a run outside every regime the model was
validated on."""

from __future__ import annotations

import numpy as np
import pytest
from dmlimits.cli import main
from dmlimits.measured import confront, runs, transformer


def test_every_regime_level_has_its_quantiles_and_enough_rows():
    table = confront.regime_intervals()
    assert () in table
    for level, (lo, hi, n) in table.items():
        assert 0 < lo < hi
        assert n >= confront.MIN_REGIME_ROWS or level == ()


def test_the_interval_holds_the_held_out_rows_as_its_quantiles_say():
    per_row = confront.held_out()["per_row"]
    ratio = per_row["held_out"] / per_row["reported"]
    table = confront.regime_intervals()
    inside = []
    for key, r in zip(per_row["regime"], ratio, strict=True):
        level = next(k for k in confront.regime_levels(tuple(key)) if k in table)
        lo, hi, _ = table[level]
        inside.append(lo <= r <= hi)
    share = float(np.mean(inside))
    central = confront.INTERVAL_SHARE
    assert share == pytest.approx(central, abs=0.1)


def test_predicted_rows_carry_the_interval_of_their_regime():
    out = confront.with_intervals(runs.predict_rows(runs.dev_rows()[:12]))
    table = confront.regime_intervals()
    for row in out:
        step = float(row["predicted_step_time_s"])
        low, high = (
            float(row["predicted_step_time_low_s"]),
            float(row["predicted_step_time_high_s"]),
        )
        assert 0 < low < high
        level = next(k for k in table if len(k) == 4 and row["interval_regime"].endswith(k[3]))
        widened = confront.widen(table[level][0], table[level][1], confront.widening()["factor"])
        assert (low / step, high / step) == pytest.approx(widened, rel=1e-4)
        assert row["outside_validated_regimes"] == "false"


def test_a_family_the_model_never_saw_is_flagged():
    foundry = [r for r in runs.holdout_rows() if r.get("framework") == "llm-foundry"][:3]
    assert foundry
    out = confront.with_intervals(runs.predict_rows(foundry))
    assert {r["outside_validated_regimes"] for r in out} == {"true"}
    assert all(r["predicted_step_time_low_s"] for r in out)


def test_a_step_time_that_is_not_positive_is_refused():
    cfg = runs.interpret(runs.dev_rows()[0]).config
    with pytest.raises(ValueError, match="step_time_s must be a positive time"):
        confront.interval(cfg, 0.0)


def test_predict_prints_the_interval(capsys):
    assert main(["predict", "--gpus", "64", "--mode", "calibrated"]) == 0
    text = capsys.readouterr().out
    assert "80% interval" in text and "held-out errors of" in text


def test_interval_coverage_counts_rows_inside_their_interval():
    result = confront.interval_coverage(runs.dev_rows())
    central = confront.INTERVAL_SHARE
    assert result["rows"] == sum(g["rows"] for g in result["by_regime"].values())
    # In sample, the residuals are smaller than held out: at least the central share holds.
    assert result["inside"] >= central - 0.05


def test_a_framework_no_development_row_used_takes_the_left_out_families_spread():
    """A row of a family the development rows lack (vTrain's Megatron-DeepSpeed) is given the
    interval of every development row predicted with its family left out of the fit, and is
    flagged; a known family's row keeps its regime's."""
    table = confront.regime_intervals()
    lo, hi, n = table[(confront.NEW_FAMILY,)]
    assert lo < 1 < hi and n == len(runs.dev_rows()) - sum(
        1 for r in runs.dev_rows() if r["metric"] not in runs.THROUGHPUT_METRICS
    )
    row = runs.vtrain_rows()[0]
    cfg = runs.interpret(row).config
    bar = confront.interval(cfg, 1.0, "megatron-deepspeed")
    assert bar["interval_regime"] == "a family left out, every row"
    assert (bar["predicted_step_time_low_s"], bar["predicted_step_time_high_s"]) == (
        confront.widen(lo, hi, confront.widening()["factor"])
    )
    assert bar["outside_validated_regimes"]
    known = confront.interval(runs.interpret(runs.dev_rows()[0]).config, 1.0, "megatron-lm")
    assert known["interval_regime"] != bar["interval_regime"]


def test_errors_by_regime_cover_every_validated_row_once():
    by = confront.errors_by_regime()
    per_row = confront.held_out()["per_row"]
    assert sum(g["rows"] for g in by.values()) == len(per_row["reported"])
    assert {tuple(k.split(", ")) for k in by} == {tuple(k) for k in per_row["regime"]}
    assert all(0 <= g["in_sample"] < 1 and 0 <= g["held_out"] < 1 for g in by.values())


def test_widen_keeps_the_geometric_middle_and_scales_the_log_half_width():
    assert confront.widen(0.8, 1.25, 1.0) == pytest.approx((0.8, 1.25))
    lo, hi = confront.widen(0.9, 1.6, 2.0)
    assert lo * hi == pytest.approx(0.9 * 1.6)
    assert np.log(hi / lo) == pytest.approx(2 * np.log(1.6 / 0.9))


def test_the_widening_holds_each_calibration_source_as_the_quantiles_promise():
    """The widened intervals hold at least the central share of each calibration file's rows
    (in sample for the widening, so this checks that the factor reaches every interval), and
    the factor is the largest file's, never below 1."""
    w = confront.widening()
    central = confront.INTERVAL_SHARE
    assert set(w["by_source"]) == set(confront.CALIBRATION_ROWS) and w["factor"] >= 1
    for name, rows in confront.CALIBRATION_ROWS.items():
        assert confront.interval_coverage(rows())["inside"] >= central, name
        assert w["by_source"][name]["rows"] > 0


def test_without_the_widening_some_calibration_source_falls_short(monkeypatch):
    """The widening is not idle: at factor 1 some calibration file's rows lie outside their
    intervals more often than the quantiles promise."""
    central = confront.INTERVAL_SHARE
    monkeypatch.setattr(confront, "widening", lambda: {"factor": 1.0, "by_source": {}})
    shares = [confront.interval_coverage(rows())["inside"]
              for rows in confront.CALIBRATION_ROWS.values()]  # fmt: skip
    assert min(shares) < central


def test_the_fingerprint_is_stable_and_moves_with_any_prediction(monkeypatch):
    """The same model gives the same fingerprint; a change of one preset's shape, which no
    run file of the project names, moves it (through the probes), as does a fitted factor."""
    from dataclasses import replace

    first = confront.fingerprint()
    assert first == confront.fingerprint() and len(first) == 64
    with transformer.preset_values("nemotron-22b", layers=41):
        assert confront.fingerprint() != first
    assert confront.fingerprint() == first
    fitted = runs.calibrated()
    monkeypatch.setattr(runs, "calibrated", lambda: replace(fitted, matmul=fitted.matmul * 0.99))
    assert confront.fingerprint() != first


def test_rows_outside_the_fit_by_regime_add_up_to_their_coverage():
    rows = runs.nemo_rows()
    by = confront.outside_by_regime(rows)
    whole = confront.interval_coverage(rows)
    assert sum(g["rows"] for g in by.values()) == whole["rows"]
    inside = sum(g["inside"] * g["rows"] for g in by.values()) / whole["rows"]
    assert inside == pytest.approx(whole["inside"])
    assert all(g["step"] >= 0 and g["mfu_points"] >= 0 for g in by.values())
