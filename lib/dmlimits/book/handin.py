"""A student's prediction, recorded before the run, and its comparison with the run.

The course grades a Compute problem's prediction before its number (the instructors' guide): a
prediction written after the run is worth nothing.  The hand-in template
(``handin/template.md``) therefore records the prediction first, with the time it was recorded
(UTC) and a SHA-256 digest of both, refuses to run the library until a record exists, and checks
the record again when it compares: a prediction edited after the run (in the notebook or in the
record) no longer matches its record, and the comparison says so instead of grading it.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import math
from pathlib import Path

#: The fields of a prediction: the headline quantity predicted (a key of
#: :func:`dmlimits.costs.closed_forms.values`), the factor it moves by when the student's
#: assumptions replace the scenario's (changed over baseline, dimensionless), and the reason
#: given before the run.
PREDICTION_FIELDS = ("quantity", "factor", "reason")


class PredictionChanged(ValueError):
    """The prediction in the notebook or in its record is not the one recorded before the run."""


def _canonical(prediction: dict, recorded_at: str) -> bytes:
    both = {"prediction": prediction, "recorded_at": recorded_at}
    return json.dumps(both, sort_keys=True).encode()


def check_prediction(prediction: dict) -> dict:
    """``prediction`` as recorded: its quantity a non-empty name, its factor a finite positive
    number, its reason a non-empty sentence; a one-line error names the field otherwise."""
    if not isinstance(prediction, dict) or set(prediction) != set(PREDICTION_FIELDS):
        raise ValueError(f"prediction: got {prediction!r}; expected the keys {PREDICTION_FIELDS}")
    quantity, factor, reason = (prediction[k] for k in PREDICTION_FIELDS)
    if not isinstance(quantity, str) or not quantity.strip():
        raise ValueError(f"prediction quantity: got {quantity!r}; expected a quantity's name")
    if isinstance(factor, bool) or not isinstance(factor, (int, float)):
        raise ValueError(f"prediction factor: got {factor!r}; expected a positive number")
    if not (math.isfinite(factor) and factor > 0):
        raise ValueError(f"prediction factor: got {factor!r}; expected a finite positive number")
    if not isinstance(reason, str) or not reason.strip():
        raise ValueError(f"prediction reason: got {reason!r}; expected a sentence, before the run")
    return {"quantity": quantity, "factor": float(factor), "reason": reason}


def digest(prediction: dict, recorded_at: str) -> str:
    """The SHA-256 digest (hex) of a prediction and the time it was recorded."""
    return hashlib.sha256(_canonical(prediction, recorded_at)).hexdigest()


def record_prediction(
    path: str | Path, prediction: dict, now: datetime.datetime | None = None
) -> dict:
    """Write ``prediction`` to ``path`` (JSON) with the time (UTC, ISO 8601) and its digest, and
    return the record.  A record already at ``path`` is kept when it holds the same prediction
    (the notebook re-run) and refused when it holds another: a prediction is made once."""
    prediction = check_prediction(prediction)
    path = Path(path)
    if path.exists():
        record = read_record(path)
        if record["prediction"] != prediction:
            raise PredictionChanged(
                f"{path} records the prediction {record['prediction']} made at "
                f"{record['recorded_at']}; this notebook now predicts {prediction}: a prediction "
                "is recorded once, before the run (start a new record file for a new one)"
            )
        return record
    utc = datetime.UTC
    when = (now or datetime.datetime.now(utc)).astimezone(utc).isoformat()
    record = {"prediction": prediction, "recorded_at": when, "digest": digest(prediction, when)}
    path.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    return record


def read_record(path: str | Path) -> dict:
    """The record at ``path``, its digest checked: a record edited by hand fails here."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no prediction recorded at {path}: record it before the run")
    record = json.loads(path.read_text())
    if record.get("digest") != digest(record.get("prediction"), record.get("recorded_at")):
        raise PredictionChanged(f"{path}: the record does not match its digest; it was edited")
    return record


def compare(path: str | Path, prediction: dict, computed: float) -> dict:
    """The run's factor ``computed`` against the recorded prediction: the prediction must still
    be the recorded one (else :class:`PredictionChanged`); returns the predicted and computed
    factors, the relative error (computed over predicted, minus one), its sign in words and the
    time of the record."""
    record = read_record(path)
    if check_prediction(prediction) != record["prediction"]:
        raise PredictionChanged(
            f"the notebook's prediction {prediction} is not the one recorded at "
            f"{record['recorded_at']} ({record['prediction']}): it was changed after recording"
        )
    if not (isinstance(computed, (int, float)) and math.isfinite(computed) and computed > 0):
        raise ValueError(f"computed factor: got {computed!r}; expected a finite positive number")
    predicted = record["prediction"]["factor"]
    error = computed / predicted - 1
    sign = "exact" if error == 0 else ("the run is larger" if error > 0 else "the run is smaller")
    return {
        "quantity": record["prediction"]["quantity"],
        "predicted": predicted,
        "computed": float(computed),
        "relative_error": error,
        "sign": sign,
        "recorded_at": record["recorded_at"],
    }
