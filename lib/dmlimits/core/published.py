"""Published values the book quotes, from one data file, each with its citation.

``data/published_values.csv`` holds every published number the prose quotes: its value, unit,
what it measures, the bibliography key to cite and where in the source it stands.  Prose pastes
them with glue and cites the key; nothing published is typed by hand.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path

from dmlimits.core.printing import significant_digits


def read_table(lines) -> tuple[list[str], list[dict[str, str]]]:
    """The column names and rows (dictionaries of strings) of a CSV whose ``#`` lines are
    comments (a data file's source and licence), given as its lines.  Blank lines before the
    header are skipped; a quoted field may span lines.  Where the first record holds only
    numbers and the last comment before it splits into as many fields, every one a name, that
    comment is the header: vTrain's published file names its columns so
    (``vtrain_single_node_d1024.csv``).  (A comment of words only, as many as the columns, is
    taken for the header: end such comments with a lone ``#``.)  A short row's missing fields
    are empty; a row with more fields than the header is refused, with its number."""
    comments, body = [], []
    for k, line in enumerate(lines):
        line = line.lstrip("\ufeff") if k == 0 else line  # a byte-order mark hides the '#'
        if line.startswith("#"):
            if not body:
                comments.append(line)
            continue
        if body or line.strip():
            body.append(line)
    records = [r for r in csv.reader(io.StringIO("\n".join(body))) if r]
    if not records:
        return [], []
    header, data = records[0], records[1:]
    if comments and all(_is_number(field) for field in header):
        named = next(csv.reader([comments[-1].lstrip("#").strip()]), [])
        if len(named) == len(header) and all(n.strip() and not _is_number(n) for n in named):
            header, data = named, records
    rows = []
    for n, fields in enumerate(data, start=1):
        if len(fields) > len(header):
            raise ValueError(
                f"data row {n} has {len(fields)} fields, expected at most {len(header)} (the "
                f"header's: {', '.join(header)})"
            )
        rows.append(dict(zip(header, fields + [""] * (len(header) - len(fields)), strict=True)))
    return header, rows


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def data_path(filename: str) -> Path:
    """Where one of the project's data files is: ``data/FILENAME`` in the package."""
    return Path(str(resources.files("dmlimits") / "data" / filename))


@cache
def data_rows(filename: str) -> tuple[dict[str, str], ...]:
    """The rows of one of the project's data files (``data/FILENAME``, a CSV whose leading
    ``#`` lines name its source, :func:`read_table`), as dictionaries of strings."""
    text = data_path(filename).read_text()
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

