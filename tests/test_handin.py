"""The hand-in template records a prediction before the run, and a prediction changed after the
run is detected (``dmlimits.book.handin`` and ``handin/template.md``)."""

import datetime
import json

import jupytext
import pytest
from conftest import ROOT
from dmlimits.book import handin

TEMPLATE = ROOT / "handin" / "template.md"
SAMPLE = {"quantity": "t_crit_own_flop", "factor": 2.0, "reason": "twice the months, twice the run"}


def test_a_record_holds_the_prediction_its_time_and_a_digest(tmp_path):
    when = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
    record = handin.record_prediction(tmp_path / "p.json", SAMPLE, now=when)
    assert record["recorded_at"] == when.isoformat()
    assert record == handin.read_record(tmp_path / "p.json")
    assert record["digest"] == handin.digest(record["prediction"], record["recorded_at"])
    # the same prediction again (the notebook re-run) keeps the first record and its time
    again = handin.record_prediction(tmp_path / "p.json", SAMPLE)
    assert again["recorded_at"] == when.isoformat()


def test_another_prediction_into_the_same_record_is_refused(tmp_path):
    handin.record_prediction(tmp_path / "p.json", SAMPLE)
    with pytest.raises(handin.PredictionChanged, match="recorded once, before the run"):
        handin.record_prediction(tmp_path / "p.json", {**SAMPLE, "factor": 3.0})


def test_a_record_edited_by_hand_fails_its_digest(tmp_path):
    path = tmp_path / "p.json"
    handin.record_prediction(path, SAMPLE)
    record = json.loads(path.read_text())
    record["prediction"]["factor"] = 4.0
    path.write_text(json.dumps(record))
    with pytest.raises(handin.PredictionChanged, match="does not match its digest"):
        handin.read_record(path)


def test_compare_gives_the_error_and_its_sign(tmp_path):
    path = tmp_path / "p.json"
    handin.record_prediction(path, SAMPLE)
    over = handin.compare(path, SAMPLE, 3.0)
    assert over["relative_error"] == pytest.approx(0.5) and over["sign"] == "the run is larger"
    under = handin.compare(path, SAMPLE, 1.0)
    assert under["relative_error"] == pytest.approx(-0.5) and under["sign"] == "the run is smaller"
    with pytest.raises(handin.PredictionChanged, match="changed after recording"):
        handin.compare(path, {**SAMPLE, "factor": 3.0}, 3.0)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("factor", None, "prediction factor: got None; expected a positive number"),
        ("factor", -1.0, "prediction factor: got -1.0; expected a finite positive number"),
        ("reason", " ", "prediction reason: got ' '; expected a sentence"),
        ("quantity", "", "prediction quantity: got ''"),
    ],
)
def test_a_bad_prediction_is_named(field, value, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        handin.check_prediction({**SAMPLE, field: value})


def test_no_record_no_run(tmp_path):
    with pytest.raises(FileNotFoundError, match="record it before the run"):
        handin.read_record(tmp_path / "none.json")


@pytest.fixture
def executed(tmp_path):
    """The template executed by papermill with the sample prediction, in ``tmp_path``."""
    papermill = pytest.importorskip("papermill")
    nb = tmp_path / "template.ipynb"
    jupytext.write(jupytext.read(TEMPLATE), nb)

    def run(prediction=SAMPLE, out="out.ipynb"):
        return papermill.execute_notebook(
            str(nb),
            str(tmp_path / out),
            parameters={
                "ASSUMPTIONS": ["training.months=6"],
                "QUANTITY": prediction["quantity"],
                "PREDICTED_FACTOR": prediction["factor"],
                "REASON": prediction["reason"],
                "RECORD": str(tmp_path / "prediction.json"),
            },
            kernel_name="python3",
            cwd=str(tmp_path),
            progress_bar=False,
        )

    return run


@pytest.mark.slow  # executes a notebook
def test_the_template_records_before_it_runs_and_detects_a_changed_prediction(executed, tmp_path):
    from dmlimits.core.scenario import resolve
    from dmlimits.costs import closed_forms

    executed()
    record = handin.read_record(tmp_path / "prediction.json")
    run = json.loads((tmp_path / "prediction.run.json").read_text())
    assert record["prediction"] == handin.check_prediction(SAMPLE)
    assert record["recorded_at"] <= run["ran_at"], "the run came before the record"
    expected = (
        closed_forms.values(resolve(None, ["training.months=6"]))["t_crit_own_flop"]
        / closed_forms.values(resolve(None))["t_crit_own_flop"]
    )
    assert run["computed_factor"] == pytest.approx(expected, rel=1e-12)
    # the prediction edited after the run: executing again stops at the record
    import papermill

    with pytest.raises(papermill.PapermillExecutionError, match="PredictionChanged"):
        executed({**SAMPLE, "factor": expected}, out="again.ipynb")
    assert handin.read_record(tmp_path / "prediction.json") == record
