"""The command line a student can learn from its help: every option that reads a scenario
says what it takes with an example, and a missing file is named in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from dmlimits import cli
from dmlimits.cli import main


def _subparsers():
    parser = cli._parser()
    (action,) = [a for a in parser._actions if a.dest == "command"]
    return action.choices


def _help(capsys, command: str) -> str:
    with pytest.raises(SystemExit) as exit_:
        main([command, "--help"])
    assert exit_.value.code == 0
    return " ".join(capsys.readouterr().out.split())  # argparse wraps lines: unwrap them


@pytest.mark.parametrize("command", sorted(_subparsers()))
def test_scenario_and_set_are_described_with_an_example(capsys, command):
    text = _help(capsys, command)
    options = {o for a in _subparsers()[command]._actions for o in a.option_strings}
    if "--scenario" in options:
        assert "--scenario a100" in text or "--scenario h100,a100" in text
        assert "--scenario my.yaml" in text
    if "--set" in options:
        assert "e.g. --set " in text and "scenarios --keys" in text


def test_the_commands_that_read_one_scenario_take_the_same_pair():
    subs = _subparsers()
    for command in ("build", "headline"):
        helps = {a.dest: a.help for a in subs[command]._actions}
        assert helps["scenario"] == cli.SCENARIO_HELP and helps["sets"] == cli.SET_HELP


@pytest.mark.parametrize("command", ["headline", "sweep", "build", "scenarios"])
def test_a_missing_scenario_file_says_no_such_file(capsys, tmp_path, command):
    path = tmp_path / "mine.yaml"
    flag = "--show" if command == "scenarios" else "--scenario"
    assert main([command, flag, str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"no such file: {path}" in err


def test_every_headline_key_has_a_meaning_and_its_chapter_exists():
    from dmlimits import search
    from dmlimits.core.scenario import resolve

    root = Path(__file__).resolve().parents[1]
    for spec in ("h100", "h100-sparse"):  # a sparse scenario has NaN closed forms: same keys
        assert set(search.headline(resolve(spec))) == set(search.HEADLINE_MEANINGS), spec
    for key, m in search.HEADLINE_MEANINGS.items():
        assert m.unit and len(m.meaning.split()) >= 8, key
        assert (root / f"{m.chapter}.md").is_file(), (key, m.chapter)


def test_headline_explain_prints_each_key_with_its_unit_and_chapter(capsys):
    from dmlimits import search

    assert main(["headline", "--explain"]) == 0
    out = capsys.readouterr().out
    heads = [line for line in out.splitlines() if not line.startswith(" ")]
    assert heads == [
        f"{k}  [{m.unit}; derived in {m.chapter}]" for k, m in search.HEADLINE_MEANINGS.items()
    ]
    text = " ".join(out.split())  # the meanings are wrapped: unwrap them
    assert all(m.meaning in text for m in search.HEADLINE_MEANINGS.values())


def test_headline_text_names_the_units_and_points_to_explain(capsys):
    assert main(["headline", "--scenario", "h100"]) == 0
    out = capsys.readouterr().out
    assert "t_limit_flop" in out and " FLOP\n" in out and "headline --explain" in out


def test_list_models_gives_each_preset_its_main_numbers(capsys):
    from dmlimits.measured import runs, transformer

    assert main(["predict", "--list-models"]) == 0
    rows = {
        line.split()[0]: line.split()
        for line in capsys.readouterr().out.splitlines()
        if line.strip()
    }
    for name, sh in transformer.SHAPES.items():
        assert rows[name][1:5] == [
            str(sh.layers),
            str(sh.d_model),
            str(sh.heads),
            f"{sh.params / 1e9:.3g}",
        ]
    for name, c in runs.CLUSTERS.items():
        assert name in rows and c.label.split()[0] in rows[name]


@pytest.mark.parametrize(
    ("flag", "spelt", "meant"),
    [("--model", "Llama-3-8B", "llama3-8b"), ("--model", "LLAMA_2_7B", "llama2-7b"),
     ("--model", "mixtral8x7b", "mixtral-8x7b"), ("--gpu", "H100-500W", "h100-500w"),
     ("--gpu", "B200", "b200")],
)  # fmt: skip
def test_model_and_gpu_names_match_whatever_their_case_and_dashes(capsys, flag, spelt, meant):
    def config(name):
        assert main(["predict", flag, name, "--mode", "bound", "--json"]) == 0
        return json.loads(capsys.readouterr().out)["config"]

    assert config(spelt) == config(meant)


@pytest.mark.parametrize(
    ("args", "needle"),
    [(["--model", "lama-2-7b"], "(did you mean llama2-7b?)"),
     (["--gpu", "h2000"], "(did you mean h200?)")],
)  # fmt: skip
def test_a_misspelt_name_is_refused_with_the_nearest(capsys, args, needle):
    assert main(["predict", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and err.rstrip().endswith(needle)


def _note_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("note: ")]


def test_headline_says_once_when_the_closed_forms_ignore_a_change(capsys):
    from dmlimits.costs import closed_forms

    assert main(["headline", "--set", "network.latency=1e-7"]) == 0
    (note,) = _note_lines(capsys.readouterr().out)
    assert "network.latency" in note and closed_forms.LEFT_OUT["network.latency"] in note
    assert "t_limit_flop" in note


def test_headline_is_silent_where_the_closed_forms_follow_the_change(capsys):
    # The latency wall follows the kernel latency; nothing changed, nothing to say.
    for sets in (["--set", "hardware.kernel_latency=2e-6"], []):
        assert main(["headline", *sets]) == 0
        assert _note_lines(capsys.readouterr().out) == [], sets


def test_headline_json_stays_json_and_the_note_goes_to_stderr(capsys):
    assert main(["headline", "--json", "--set", "search.zero_bubble=false"]) == 0
    out = capsys.readouterr()
    assert "t_limit_flop" in json.loads(out.out)
    (note,) = _note_lines(out.err)
    assert "search.zero_bubble" in note


def test_ignored_names_only_keys_the_limits_do_not_follow():
    from dmlimits.core.scenario import resolve
    from dmlimits.costs import closed_forms

    base = resolve("h100")
    changed = resolve(
        "h100", ["network.latency=1e-7", "hardware.kernel_latency=2e-6", "training.months=6"]
    )
    keys = ["network.latency", "hardware.kernel_latency", "training.months"]
    assert [k for k, _ in closed_forms.ignored(changed, base, keys)] == ["network.latency"]
    # The claim checked directly: the limits are the same with and without the change.
    alone = resolve("h100", ["network.latency=1e-7"])
    here, there = closed_forms.values(alone), closed_forms.values(base)
    assert all(here[k] == there[k] for k in closed_forms.LIMITS)
    assert closed_forms.values(changed)["t_limit_flop"] != there["t_limit_flop"]
