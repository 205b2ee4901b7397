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


def read_table(lines) -> tuple[list[str], list[dict[str, str]]]:
    """The column names and rows (dictionaries of strings) of a CSV whose ``#`` lines are
    comments (a data file's source and licence).  Where the first line that is not a comment
    holds no name, only numbers, and the last comment line splits into as many fields, that
    comment is the header: vTrain's published file names its columns so
    (``vtrain_single_node_d1024.csv``).  Fields past the header's are dropped."""
    comments, body = [], []
    for line in lines:
        (body if body or not line.startswith("#") else comments).append(line)
    body = [line for line in body if not line.startswith("#")]
    reader = csv.reader(body)
    first = next(reader, None)
    if first is None:
        return [], []
    header, data = first, []
    if comments and all(_is_number(field) for field in first):
        named = next(csv.reader([comments[-1].lstrip("#").strip()]), [])
        if len(named) == len(first):
            header, data = named, [first]
    data.extend(reader)
    rows = [dict(zip(header, fields, strict=False)) for fields in data if fields]
    return header, rows


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


@cache
def data_rows(filename: str) -> tuple[dict[str, str], ...]:
    """The rows of one of the project's data files (``data/FILENAME``, a CSV whose leading
    ``#`` lines name its source, :func:`read_table`), as dictionaries of strings."""
    text = (resources.files("dmlimits") / "data" / filename).read_text()
    return tuple(read_table(text.splitlines())[1])


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

