"""Published values the book quotes, from one data file, each with its citation.

``data/published_values.csv`` holds every published number the prose quotes: its value, unit,
what it measures, the bibliography key to cite and where in the source it stands.  Prose pastes
them with glue and cites the key; nothing published is typed by hand.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from functools import cache
from importlib import resources

from dmlimits.core.printing import significant_digits


@cache
def data_rows(filename: str) -> tuple[dict[str, str], ...]:
    """The rows of one of the project's data files (``data/FILENAME``, a CSV whose leading
    ``#`` lines name its source), as dictionaries of strings."""
    text = (resources.files("dmlimits") / "data" / filename).read_text()
    return tuple(csv.DictReader(line for line in text.splitlines() if not line.startswith("#")))


@dataclass(frozen=True)
class Published:
    key: str
    value: float
    unit: str
    what: str
    cite: str
    where: str
    digits: int = 3  # significant digits as published


@cache
def table() -> dict[str, Published]:
    out = {}
    for row in data_rows("published_values.csv"):
        if row["key"] in out:
            raise ValueError(f"published_values.csv: key {row['key']!r} appears twice")
        out[row["key"]] = Published(
            row["key"], float(row["value"]), row["unit"], row["what"], row["cite"], row["where"],
            significant_digits(row["value"]),
        )  # fmt: skip
    return out


def get(key: str) -> Published:
    try:
        return table()[key]
    except KeyError:
        raise KeyError(f"no published value {key!r}; the keys are {', '.join(table())}") from None


def value(key: str) -> float:
    return get(key).value

