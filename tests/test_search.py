"""The search for the best parallelism (dmlimits.search) and the step time (dmlimits.costs.step).

The acceptance of the reproduction: the h100 presets against the authors' configurations as
rerun (the project's data file), and the linear-scaling end at the published grid point."""

from __future__ import annotations

import math

import numpy as np
import pytest
import sympy as sp
from conftest import derivations_of
from dmlimits import search
from dmlimits.core import published
from dmlimits.core import scenario as sc
from dmlimits.core import units as u
from dmlimits.core.derivation import DerivationError, Step, derivation
from dmlimits.core.symbols import REGISTRY
from dmlimits.costs import step
from dmlimits.search import sweeps


@pytest.fixture(scope="module")
def h100():
    return sc.resolve("h100")


@pytest.mark.parametrize("preset", sc.PAPER_PRESETS)
def test_every_setting_reproduces_the_authors_final_code(preset):
    """Issue #12: wherever the authors' final code finds a configuration, so does the search;
    utilization within 0.01 at nine grid points in ten or more; the same linear-scaling end
    within 2%."""
    summary = search.reference_summary(sc.resolve(preset))
    assert summary["points"] >= 20, summary
    assert summary["found"] == summary["points"], summary
    assert summary["within"] >= 0.9 * summary["points"], summary
    assert summary["same_configuration"] >= 0.9 * summary["points"], summary
    assert abs(summary["linear_end_ratio"] - 1) <= 0.02, summary


AUTHORS_OPTIONS = ("search.level_times=authors", "training.year_seconds=3.154e7")


@pytest.mark.parametrize("preset", sc.PAPER_PRESETS)
def test_the_authors_options_reproduce_every_grid_point(preset):
    """With the authors' level rule and their search notebook's year, every grid point is the
    authors' configuration and utilization (to the file's six decimals)."""
    rows = search.reference_comparison(sc.resolve(preset, AUTHORS_OPTIONS), preset)
    assert rows and all(r["found"] and r["same_configuration"] for r in rows), preset
    assert max(abs(r["difference"]) for r in rows) < 1e-5


def test_the_sweep_file_agrees_with_the_reference_configurations():
    """The rerun of all sixteen settings (paper1_reference_sweeps.csv) prints, for the two
    settings of the shared reference (paper1_reference_configs.csv), the same numbers."""
    names = {"Default scaling": "h100", "No scaling": "h100-no-batch-scaling"}
    configs = published.data_rows("paper1_reference_configs.csv")
    assert len(configs) >= 40
    for ref in configs:
        rows = search.reference_rows(names[ref["setting"]])
        c = float(ref["training_flop_16bit"])
        match = min(rows, key=lambda r: abs(math.log(r["training_flop_16bit"] / c)))
        assert f"{match['training_flop_16bit']:.3g}" == f"{c:.3g}"
        assert round(match["utilization"], 3) == pytest.approx(float(ref["utilization"]), abs=1e-3)
        for k in ("tp_model", "tp_ff", "pp", "dp", "ep", "pp_interleave"):
            assert match[k] == float(ref[k]), (k, ref)
        assert f"{match['n_gpu']:.3g}" == f"{float(ref['n_gpu']):.3g}"


def test_reference_rows_refuse_an_unknown_setting():
    with pytest.raises(ValueError, match="h100-sprase"):
        search.reference_rows("h100-sprase")


def test_infeasible_points_have_no_configuration(h100):
    rows = [r for r in search.sweep(h100) if not r["feasible"]]
    assert rows
    assert all(r["utilization"] != r["utilization"] and r["binding"] == "infeasible" for r in rows)


@pytest.mark.parametrize(
    ("preset", "key"),
    [
        ("h100", "paper1.rerun_linear_end_flop"),
        ("h100-no-batch-scaling", "paper1.rerun_linear_end_no_batch_flop"),
    ],
)
def test_linear_scaling_ends_at_the_published_grid_point(preset, key):
    end = search.headline(sc.resolve(preset))["linear_scaling_end_flop"]
    assert f"{end:.3g}" == f"{published.value(key):.3g}"


def test_last_feasible_point_is_the_published_one(h100):
    last = search.headline(h100)["last_feasible_flop"]
    assert f"{last:.3g}" == f"{published.value('paper1.rerun_last_feasible_flop'):.3g}"


@pytest.mark.parametrize(
    ("preset", "key"),
    [
        ("h100", "paper1.rerun_linear_end_flop"),
        ("h100-no-batch-scaling", "paper1.rerun_linear_end_no_batch_flop"),
        ("h100", "paper1.rerun_last_feasible_flop"),
    ],
)
def test_the_rerun_values_are_the_authors_sweeps(preset, key):
    """The published file's "as rerun" values are what the authors' final code gives in this
    book's run of it (data/paper1_reference_sweeps.csv), by the paper's rules: the first grid
    point at or below the linear-end threshold, and the last model trained in time."""
    scn = sc.resolve(preset)
    if key.endswith("last_feasible_flop"):
        rows = [r for r in search.reference_rows(preset) if r["feasible"]]
        value = rows[-1]["training_flop_16bit"]
    else:
        value = search.reference_linear_end(scn, preset)
    assert f"{value:.3g}" == f"{published.value(key):.3g}"


def test_linear_end_threshold_is_the_papers_fraction(h100):
    eff = h100["hardware.effective_utilization"]
    assert search.linear_end_threshold(h100) == pytest.approx(0.8 * eff)


def test_headline_is_consistent_with_the_rows(h100):
    head = search.headline(h100)
    rows = search.rows(h100)
    feasible = [r for r in rows if r["feasible"]]
    before = [r for r in feasible if r["training_flop"] < head["linear_scaling_end_flop"]]
    assert before and all(r["utilization"] > search.linear_end_threshold(h100) for r in before)
    assert head["plateau_utilization"] <= h100["hardware.effective_utilization"] + 1e-9
    assert head["plateau_utilization"] == max(r["utilization"] for r in feasible)
    # Once infeasible, always infeasible: the grid grows in compute.
    flags = [r["feasible"] for r in rows]
    assert flags == sorted(flags, reverse=True)


def test_rows_have_the_interface_columns(h100):
    rows = search.rows(h100)
    assert len(rows) == len(search.points(h100))
    for r in rows:
        assert tuple(r) == search.ROW_FIELDS
        assert r["scenario"] == "h100"
    r = next(r for r in rows if r["feasible"])
    assert isinstance(r["n_gpu"], int) and isinstance(r["zero_bubble"], bool)
    # The degrees multiply to the cluster.
    for r in rows:
        if r["feasible"]:
            assert r["tp_model"] * r["tp_ff"] * r["pp"] * r["dp"] * r["ep"] == r["n_gpu"]
            assert r["layers"] % r["pp"] == 0


def test_utilization_is_recomputed_from_the_step_time(h100):
    for r in search.sweep(h100):
        if not r["feasible"]:
            continue
        flop = 6 * r["n_params_total"] / r["sparsity"] * r["batch_tokens"]
        assert r["utilization"] == pytest.approx(
            flop / (r["n_gpu"] * h100.peak_flops * r["t_step"])
        )
        assert r["train_seconds"] <= h100.train_seconds


def test_losses_split_the_step_exactly(h100):
    eff = h100["hardware.effective_utilization"]
    for r in search.sweep(h100):
        if not r["feasible"]:
            continue
        ideal = 6 * r["n_params_total"] * r["batch_tokens"] / (r["n_gpu"] * h100.peak_flops * eff)
        total = ideal + sum(r[f"loss_{k}"] for k in search.LOSSES)
        assert total == pytest.approx(r["t_step"], rel=1e-9)
        assert all(r[f"loss_{k}"] >= -1e-12 * r["t_step"] for k in search.LOSSES)
        assert r["binding"] in (*search.LOSSES, "none")


def test_the_step_time_is_the_derived_composition(h100):
    """The search's step time is the step chapter's formula applied to the search's parts."""
    r = next(r for r in search.sweep(h100) if r["feasible"] and r["training_flop"] > 1e29)
    dp_after = r["t_dp"]  # the gradient all-reduce follows the pipeline by default
    assert not h100["search.dp_overlap"]
    assert r["t_latency"] == pytest.approx(r["t_latency_pipe"] + r["t_latency_dp"])
    busy = max(r["t_matmul"], r["t_network"]) / (1 - r["bubble"])
    pipe = max(busy, r["t_latency_pipe"]) if r["zero_bubble"] else busy + r["t_latency_pipe"]
    assert r["t_step"] == pytest.approx(pipe + dp_after + r["t_latency_dp"], rel=1e-12)


def test_best_on_restricted_to_the_reference_configuration(h100):
    """Forcing the authors' configuration at the linear-scaling end gives their utilization."""
    ref = next(
        r
        for r in search.reference_comparison(h100)
        if f"{r['training_flop']:.3g}" == f"{published.value('paper1.rerun_linear_end_flop'):.3g}"
    )
    assert ref["same_configuration"]
    pt = min(search.points(h100), key=lambda p: abs(math.log(p.compute / ref["training_flop"])))
    full = search.optimal(h100, pt)
    only = {k: int(full[k]) for k in ("tp_model", "tp_ff", "dp", "pp", "ep")}
    found = search.best_on(h100, pt, int(full["n_gpu"]), search.Choices.of(h100), only=only)
    assert found["t_step"] == pytest.approx(full["t_step"])
    # A worse configuration of the same cluster is slower.
    worse = {**only, "pp": only["pp"] * 2, "dp": only["dp"] // 2}
    slower = search.best_on(h100, pt, int(full["n_gpu"]), search.Choices.of(h100), only=worse)
    assert slower is None or slower["t_step"] >= found["t_step"]


@pytest.mark.parametrize(
    ("setting", "direction"),
    [
        ("training.months=6", +1),  # more time: linear scaling goes further
        ("network.inter_node.bandwidth=25e9", -1),  # a quarter of the InfiniBand bandwidth
        ("batch.exponent=0.25", +1),  # faster batch growth
    ],
)
def test_an_override_moves_the_linear_scaling_end(h100, setting, direction):
    base = search.headline(h100)["linear_scaling_end_flop"]
    moved = search.headline(sc.resolve("h100", [setting]))["linear_scaling_end_flop"]
    assert np.sign(moved - base) == direction, (setting, base, moved)


def test_search_choices_come_from_the_scenario(h100):
    ch = search.Choices.of(sc.resolve("h100", ["search.level_times=sum"]))
    assert ch.level_times == "sum" and search.Choices.of(h100).level_times == "links"
    # The 'sum' rule charges more network time: utilization never rises.
    u_links = [r["utilization"] for r in search.sweep(h100) if r["feasible"]][:12]
    summed = search.sweep(sc.resolve("h100", ["search.level_times=sum"]))
    u_sum = [r["utilization"] for r in summed][: len(u_links)]
    assert all(b <= a + 1e-12 for a, b in zip(u_links, u_sum, strict=True))
    assert any(b < a - 1e-6 for a, b in zip(u_links, u_sum, strict=True))


def test_sweep_is_cached_per_assumptions(h100):
    a = search.sweep(h100)
    b = search.sweep(sc.resolve("h100"))
    assert a == b and a is not b  # copies: a caller cannot corrupt the cache
    a[0]["utilization"] = -1.0
    assert search.sweep(h100)[0]["utilization"] != -1.0


@pytest.mark.parametrize("preset", sc.PAPER_PRESETS)
def test_every_paper_preset_sweeps(preset):
    scn = sc.resolve(preset)
    rows = search.rows(scn)
    feasible = [r for r in rows if r["feasible"]]
    assert feasible, preset
    eff = scn["hardware.effective_utilization"]
    assert all(0 < r["utilization"] <= eff + 1e-9 for r in feasible)
    if scn["model.sparse"]:
        assert all(r["sparsity"] > 1 and r["n_gpu"] % r["sparsity"] == 0 for r in feasible)


def test_paper_presets_are_the_sixteen_of_the_issue():
    assert len(sc.PAPER_PRESETS) == 16 == len(set(sc.PAPER_PRESETS))
    assert set(sc.PAPER_PRESETS) <= set(sc.preset_names())


# --- The step-time derivations ---------------------------------------------------------------
def test_step_derivations_are_registered():
    found = derivations_of("costs.step")
    assert {d.name for d in found} == {
        "search-step-time",
        "search-network-time",
        "search-utilization",
    }


def test_a_wrong_step_is_caught():
    d = step.step_time_derivation()
    broken = list(d.steps)
    last = broken[-1]
    broken[-1] = Step(last.text, sp.Eq(last.expr.lhs, 2 * last.expr.rhs), using=last.using)
    with pytest.raises(DerivationError):
        derivation(d.name, d.title, broken).verify()


@pytest.mark.parametrize("name", sorted(step.COST_FORMULAS))
def test_step_formulas_have_their_units(name):
    expr, unit = step.COST_FORMULAS[name]
    u.check_unit(expr, REGISTRY.units, unit)


def test_step_time_formula_by_hand():
    # 1F1B, bubble 1/4, matmuls 3 s behind which 2 s of transfers hide, latency 0.5 s, then 1 s
    # of gradient all-reduce and 0.25 s of its latency.
    assert float(step.step_time(3.0, 2.0, 1.0, 0.5, 0.25, 0.25, 0)) == pytest.approx(
        3.0 / 0.75 + 0.5 + 1.0 + 0.25
    )
    # Zero-bubble overlaps the latency with the work.
    assert float(step.step_time(3.0, 2.0, 1.0, 0.5, 0.25, 0.0, 1)) == pytest.approx(4.25)


def test_the_search_tries_the_pipeline_chapters_microbatch_counts(h100):
    """1F1B tries the four smallest valid microbatch counts, as the pipeline chapter says."""
    from dmlimits.costs import pipeline as ppm

    assert search.Choices.of(h100).microbatch_candidates == ppm.SEARCH_MICROBATCH_COUNT
    assert ppm.valid_microbatches(8, 64) == (8, 16, 32, 64)


def test_the_disk_cache_returns_the_same_sweep(tmp_path, monkeypatch):
    """A sweep read back from the disk cache is the computed one, value for value and type for
    type (NaN where it was NaN); another scenario, or another library, has another address."""
    scn = sc.resolve("h100-no-batch-scaling", ["sweep.d_model_max_factor=2"])
    monkeypatch.setenv(search.CACHE_ENV, "off")
    assert search.cache_path(scn) is None
    monkeypatch.setenv(search.CACHE_ENV, str(tmp_path))
    search.forget(scn)
    computed = search.sweep(scn)
    path = search.cache_path(scn)
    assert path.is_file() and path.parent == tmp_path
    search.forget(scn)
    read = search.sweep(scn)
    for a, b in zip(computed, read, strict=True):
        assert a.keys() == b.keys()
        for k in a:
            same = a[k] == b[k] or (a[k] != a[k] and b[k] != b[k])
            assert same and type(a[k]) is type(b[k]), (k, a[k], b[k])
    other = sc.resolve("h100-no-batch-scaling", ["sweep.d_model_max_factor=2", "training.months=4"])
    assert search.cache_path(other) != path
    assert len(search.sweep_fingerprint()) == 64
    monkeypatch.setattr(sweeps, "sweep_fingerprint", lambda: "another library")
    assert search.cache_path(scn) != path


def test_workers_take_one_scenario_of_each_other_formula_family_first():
    """sweep_many hands its workers one scenario of each formula family the first scenario is
    not of (its formulas are then built once, by one worker), then the first's family, then
    the rest; the same scenarios, each once, whatever the order."""
    h100, a100, v100, b200 = (sc.resolve(n) for n in ("h100", "a100", "v100", "b200"))
    assert sweeps.formula_family(h100) == sweeps.formula_family(b200)
    assert sweeps.formula_family(a100) == sweeps.formula_family(v100)
    assert sweeps.formula_family(h100) != sweeps.formula_family(a100)
    rest = [b200, a100, v100, sc.resolve("h100-sparse")]
    ordered = sweeps.families_first(h100, rest)
    assert [x.name for x in ordered] == ["a100", "b200", "h100-sparse", "v100"]
    assert sweeps.families_first(h100, [b200]) == [b200]


# --- Which parallelism when (the decision chart) -------------------------------------------------
def test_parallelism_label_names_the_degrees_above_one():
    one = {"tp_model": 1, "tp_ff": 1, "pp": 1, "dp": 1, "ep": 1}
    assert search.parallelism_label(one) == "one GPU"
    assert search.parallelism_label({**one, "tp_ff": 4, "dp": 8}) == "TP + DP"
    assert search.parallelism_label({**one, "tp_model": 2, "pp": 4, "dp": 2, "ep": 8}) == (
        "TP + PP + DP + EP"
    )


def test_the_parallelism_map_is_the_search_cell_by_cell(h100):
    m = search.parallelism_map(h100, every=9, doublings=30)
    pts = search.points(h100)[::9]
    assert m["gpus"].shape == (len(pts), 30) and len(m["labels"]) == len(pts)
    ch = search.Choices.of(h100)
    for a, i in ((0, 11), (1, 20), (len(pts) - 1, 29)):
        found = search.best_on(h100, pts[a], int(m["gpus"][a, i]), ch)
        assert m["labels"][a][i] == (None if found is None else search.parallelism_label(found))
    # Where the sweep trains a model, the map has that cluster finishing in time, and the same
    # parallelisms; one doubling fewer does not finish.
    sweep = {r["d_model"]: r for r in search.sweep(h100) if r["feasible"]}
    checked = 0
    for a, pt in enumerate(pts):
        r = sweep.get(pt.d_model)
        if r is None:
            continue
        i = round(math.log2(r["n_gpu"] / pt.experts))
        if i >= m["gpus"].shape[1]:
            continue
        assert m["in_time"][a, i] and m["labels"][a][i] == search.parallelism_label(r)
        assert i == 0 or not m["in_time"][a, i - 1]
        checked += 1
    assert checked >= 2


def test_the_parallelism_map_refuses_bad_arguments(h100):
    with pytest.raises(ValueError, match="every, doublings: got 0, 5"):
        search.parallelism_map(h100, every=0, doublings=5)


def test_the_decision_chart_is_drawn_from_the_map(h100):
    from dmlimits.book import figures, whole_run

    m = search.parallelism_map(h100, every=9, doublings=30)
    fig = whole_run.decision_chart(h100, m)
    figures.fit_to_read(fig)
    assert figures.check_figure(fig) == []
    labels = {t.get_text() for t in fig.axes[0].get_legend().get_texts()}
    assert {x for row in m["labels"] for x in row if x} <= labels
