"""The lockbox of issue #55 stays sealed: published runs recorded before the model was tuned on
them, one file a source, read by ``bench/bench_predict.py --lockbox`` and by nothing else, each
with its digest recorded (lib/dmlimits/data/lockbox/README.md gives the rule).  This test reads
each file's bytes for its digest and its header line for its columns, never its rows."""

from __future__ import annotations

import csv
import hashlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FOLDER = ROOT / "lib" / "dmlimits" / "data" / "lockbox"
#: Every lockbox file: each is scored, each must have its digest recorded.
LOCKBOXES = sorted(FOLDER.glob("published_runs_lockbox*.csv"))
DIGEST = ROOT / "bench" / "lockbox.sha256"
#: The one file allowed to name the lockbox (besides this test and the lockbox's own folder).
READER = ROOT / "bench" / "bench_predict.py"
#: The data files whose columns a lockbox file may have, one layout or the other exactly.
LAYOUTS = tuple(ROOT / "lib" / "dmlimits" / "data" / n
                for n in ("published_runs.csv", "published_runs_nemo.csv"))  # fmt: skip
#: Where a reader could hide: every text file of these folders is searched.
SEARCHED = ("lib", "tests", "notebooks", "bench", "book")
SUFFIXES = {".py", ".md", ".ipynb", ".yml", ".yaml", ".toml", ".cfg", ".txt", ".json"}


def header(path: Path) -> list[str]:
    """The column names of a data file: its first line that is not a ``#`` comment."""
    with path.open() as f:
        return next(csv.reader(line for line in f if not line.startswith("#")))


def recorded() -> dict[Path, str]:
    """The digest file's lines: each file it names (from the repository) and its sha256."""
    lines = [line.split() for line in DIGEST.read_text().splitlines() if line.strip()]
    assert all(len(fields) == 2 for fields in lines), f"{DIGEST}: expected '<sha256>  <path>'"
    return {ROOT / name: digest for digest, name in lines}


def test_there_is_a_lockbox_and_every_file_is_recorded():
    assert LOCKBOXES, f"no published_runs_lockbox*.csv in {FOLDER}"
    assert sorted(recorded()) == LOCKBOXES


@pytest.mark.parametrize("path", LOCKBOXES, ids=lambda p: p.name)
def test_digest_matches_the_recorded_one(path):
    assert hashlib.sha256(path.read_bytes()).hexdigest() == recorded()[path]


@pytest.mark.parametrize("path", LOCKBOXES, ids=lambda p: p.name)
def test_columns_are_those_of_a_development_file(path):
    layouts = [header(layout) for layout in LAYOUTS]
    assert header(path) in layouts, f"{path.name}: columns differ from {[p.name for p in LAYOUTS]}"


def test_only_the_benchmark_names_the_lockbox():
    allowed = {READER, Path(__file__).resolve()}
    readers = []
    for folder in SEARCHED:
        for path in (ROOT / folder).rglob("*"):
            if not path.is_file() or path.suffix not in SUFFIXES or FOLDER in path.parents:
                continue
            if "_build" in path.parts or path.resolve() in allowed:
                continue
            text = path.read_text(errors="replace").lower()
            # every lockbox file's name holds the word (LOCKBOXES' pattern)
            if "lockbox" in text:
                readers.append(str(path.relative_to(ROOT)))
    assert not readers, f"files other than {READER.name} name the lockbox: {readers}"


def test_the_benchmark_reads_it_only_in_its_lockbox_mode():
    text = READER.read_text()
    assert text.count("published_runs_lockbox") == 1
    assert "if args.lockbox:" in text and "def lockbox()" in text
