"""The command line of the search: ``sweep`` and ``headline``."""

from __future__ import annotations

import csv
import io
import json

import pytest
from dmlimits import search
from dmlimits.cli import main


def test_sweep_csv_has_the_interface_columns(capsys):
    assert main(["sweep", "--scenario", "h100-no-batch-scaling", "--format", "csv"]) == 0
    out = capsys.readouterr()
    rows = list(csv.DictReader(io.StringIO(out.out)))
    assert tuple(rows[0]) == search.ROW_FIELDS
    assert {r["scenario"] for r in rows} == {"h100-no-batch-scaling"}
    assert "[1/1] h100-no-batch-scaling swept" in out.err  # progress goes to stderr


def test_sweep_json_several_scenarios_and_a_set(capsys):
    args = ["sweep", "--scenario", "h100,v100", "--set", "training.months=6", "--format", "json"]
    assert main(args) == 0
    rows = json.loads(capsys.readouterr().out)
    # A scenario changed by --set is named after its preset and the change.
    assert {r["scenario"] for r in rows} == {"h100+training.months=6.0", "v100+training.months=6.0"}
    assert all(tuple(r) == search.ROW_FIELDS for r in rows)
    infeasible = [r for r in rows if not r["feasible"]]
    assert all(r["utilization"] is None or r["utilization"] >= 0 for r in infeasible)


def test_unknown_scenario_is_refused_with_the_valid_names(capsys):
    assert main(["sweep", "--scenario", "h100,h100-sprase"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'h100-sprase'" in err and "h100-sparse" in err
    assert "v100" in err and "a100-sparse" in err


@pytest.mark.parametrize(
    "args",
    [
        ["sweep", "--scenario", "h100", "--set", "network.latency=-1"],
        ["sweep", "--scenario", "h100", "--set", "closed_forms.alpha=abc"],
        ["headline", "--scenario", "h100,v100"],
    ],
)
def test_bad_input_is_one_line_and_exit_2(capsys, args):
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1


def test_headline_json(capsys):
    assert main(["headline", "--scenario", "h100", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert set(result) == {
        "linear_scaling_end_flop", "linear_scaling_before_flop", "linear_scaling_crossing_flop",
        "plateau_utilization", "last_feasible_flop", "t_crit_flop", "t_limit_flop",
        "t_crit_own_flop", "t_limit_own_flop",
    }  # fmt: skip
    # The crossing lies between the grid point before the end and the end.
    assert result["linear_scaling_before_flop"] < result["linear_scaling_crossing_flop"]
    assert result["linear_scaling_crossing_flop"] <= result["linear_scaling_end_flop"]
    assert f"{result['t_crit_flop']:.3g}" == "1.92e+28"
    assert f"{result['t_limit_flop']:.3g}" == "2.31e+31"
    assert f"{result['linear_scaling_end_flop']:.3g}" == "2.05e+28"
