"""The model of training: the sweep against the paper's reference configurations, and the
exponents against independent numerical slopes."""

import csv
from importlib import resources

import numpy as np
import pytest
import sympy as sp
from dmlimits.core import symbols as s
from dmlimits.core.scenario import resolve
from dmlimits.costs import model


def reference_rows(setting: str) -> list[dict]:
    text = (resources.files("dmlimits") / "data" / "paper1_reference_configs.csv").read_text()
    rows = csv.DictReader(line for line in text.splitlines() if not line.startswith("#"))
    return [r for r in rows if r["setting"] == setting]


@pytest.mark.parametrize(
    ("setting", "preset"), [("Default scaling", "h100"), ("No scaling", "h100-no-batch-scaling")]
)
def test_sweep_reproduces_the_reference_models(setting, preset):
    """Every reference grid point is a model of our sweep, with the same depth, size, compute
    and batch (the reference prints three significant figures)."""
    sh = model.shapes(resolve(preset))
    rows = reference_rows(setting)
    assert len(rows) > 20
    for row in rows:
        c = float(row["training_flop_16bit"])
        i = int(np.argmin(np.abs(np.log(sh.compute / c))))
        assert sh.compute[i] == pytest.approx(c, rel=5e-3)
        assert sh.layers[i] == int(row["layers"])
        assert sh.params[i] == pytest.approx(float(row["n_params_total"]), rel=5e-3)
        assert sh.batch[i] == pytest.approx(float(row["batch_tokens"]), rel=5e-3)
        assert sh.experts[i] == int(row["sparsity"])


def test_sweep_grid_is_the_papers():
    scn = resolve("h100")
    d = model.width_grid(scn)
    assert d[0] == scn["sweep.d_model_min"]
    assert d[-1] == scn["sweep.d_model_min"] * scn["sweep.d_model_max_factor"]
    octaves = np.log2(d[-1] / d[0])
    assert len(d) == len(model.WIDTH_FACTORS) * octaves + 1
    assert np.all(np.diff(d) > 0)


@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("law", list(model.BATCH_LAWS))
def test_exponents_match_numerical_log_slopes(sparse, law):
    """The symbolic exponents against a finite-difference slope of the lambdified laws."""
    scn = resolve("h100", [f"model.sparse={str(sparse).lower()}", f"batch.law={law}"])
    c = np.array([1e26, 1e29])
    values = model.along_compute(scn, c)
    expected = model.exponent_values(scn)
    for key, alpha in expected.items():
        slope = np.log(values[key][1] / values[key][0]) / np.log(c[1] / c[0])
        assert slope == pytest.approx(alpha, abs=1e-9), key


def test_dense_default_exponents_in_closed_form():
    e = model.exponents(False, "default")
    assert sp.simplify(e["steps"] - (sp.Rational(1, 2) - s.batch_exp)) == 0
    assert sp.simplify(e["batch_per_layer"] - (e["batch"] - e["layers"])) == 0


def test_threshold_makes_the_ratio_exponent_vanish():
    scn = resolve("h100")
    e_b = model.batch_exponent_threshold(scn)
    at = resolve("h100", [f"batch.exponent={e_b}"])
    assert model.exponent_values(at, "default")["batch_per_layer"] == pytest.approx(0, abs=1e-12)


def test_budgets_scale_with_training_time():
    a, b = resolve("h100"), resolve("h100", ["training.months=6"])
    sa, sb = model.shapes(a), model.shapes(b)
    np.testing.assert_allclose(sb.layer_budget / sa.layer_budget, 2.0)
    np.testing.assert_allclose(sb.min_gpus / sa.min_gpus, 0.5)
    np.testing.assert_array_equal(sa.compute, sb.compute)


def test_budget_at_agrees_with_the_grid_at_a_grid_point():
    scn = resolve("h100-no-batch-scaling")
    sh = model.shapes(scn)
    smooth = model.budget_at(scn, float(sh.compute[0]))
    # The grid rounds depth and batch; the smooth law does not: close, not equal.
    assert smooth["layer_budget"] == pytest.approx(sh.layer_budget[0], rel=0.15)


def test_round_to_grid():
    x = np.array([197.8, 3415.5, 1.0, 7.0, 8.4, 1000.0])
    out = model.round_to_grid(x)
    np.testing.assert_array_equal(out, [192, 3584, 1, 7, 8, 1024])
    with pytest.raises(ValueError, match="finite and positive"):
        model.round_to_grid(np.array([0.0]))


def test_unknown_batch_law():
    with pytest.raises(ValueError, match="batch law 'x'"):
        model.closed_forms(False, "x")


def test_a_sparse_batch_splits_evenly_among_the_experts():
    """Issue #12: the sequences per expert are rounded, so every batch is S whole, rounded
    numbers of sequences (the authors' final code); the seven sparse settings need it."""
    scn = resolve("h100-sparse")
    sh = model.shapes(scn)
    seq = scn["model.sequence_length"]
    per_expert = sh.batch / (sh.experts * seq)
    assert np.all(per_expert == np.round(per_expert))
    assert np.all(model.round_to_grid(per_expert) == per_expert)
    assert any(s % 2 for s in sh.experts.astype(int))  # odd expert counts occur (9, 15, ...)
