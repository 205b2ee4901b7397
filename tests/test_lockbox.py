"""The lockbox of issue #55 stays sealed: published runs recorded before the model was tuned on
them, one file a source, read by ``bench/bench_predict.py --lockbox`` and by nothing else, each
with its digest recorded (lib/dmlimits/data/lockbox/README.md gives the rule); its one score is
recorded beside it, and the book reads that record, never the runs.  This test reads each file's
bytes for its digest and its header line for its columns, never its rows."""

from __future__ import annotations

import csv
import hashlib
import re
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
#: The files that may read the recorded score (``lockbox/scores.json``), and nothing else there.
SCORE_READERS = (ROOT / "lib" / "dmlimits" / "book" / "measured_figures.py",
                 ROOT / "notebooks" / "real_runs.md",
                 ROOT / "notebooks" / "appendix_measured.md")  # fmt: skip
SCORES = FOLDER / "scores.json"
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
    allowed = {READER, Path(__file__).resolve(), *SCORE_READERS}
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
    assert "if args.lockbox:" in text and "def lockbox(" in text
    # Read by the scoring and, once it is scored, by the spent lockbox's report; nowhere else.
    assert text.count("lockbox(development=False)") == 1 and text.count("**lockbox()") == 1
    assert len(re.findall(r"(?<![\w.])lockbox\(", text)) - text.count("def lockbox(") == 2


def test_the_default_report_reads_the_record_not_the_runs(monkeypatch):
    """The benchmark's whole default report, the recorded score's lines included, opens no
    lockbox file: every file read through ``open`` or a path's ``read_text`` is watched."""
    import builtins
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_predict", READER)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    opened = []
    real_open, real_read = builtins.open, Path.read_text

    def watched_open(file, *args, **kwargs):
        opened.append(str(file))
        return real_open(file, *args, **kwargs)

    def watched_read(self, *args, **kwargs):
        opened.append(str(self))
        return real_read(self, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", watched_open)
    monkeypatch.setattr(Path, "read_text", watched_read)
    text = bench.report(bench.measure())
    assert "| lockbox (scored once) |" in text
    assert any(name.endswith("scores.json") for name in opened)
    assert not [name for name in opened if "published_runs_lockbox" in name]


@pytest.mark.parametrize("path", SCORE_READERS, ids=lambda p: p.name)
def test_the_books_readers_name_only_the_recorded_score(path):
    text = path.read_text().lower()
    assert "published_runs_lockbox" not in text
    for hit in re.finditer(r"lockbox/\S*", text):
        assert hit.group().startswith("lockbox/scores.json"), f"{path.name}: {hit.group()!r}"


def test_the_score_is_of_the_recorded_lockbox_at_a_commit_of_this_history():
    """The record names the lockbox's digests as recorded, and a commit that is this
    checkout's or one of its ancestors (where git and the history are at hand)."""
    import json
    import shutil
    import subprocess

    assert SCORES.is_file(), f"{SCORES}: the lockbox is not scored"
    rec = json.loads(SCORES.read_text())
    assert rec["digests"] == DIGEST.read_text().splitlines()
    assert len(rec["commit"]) == 40 and len(rec["fingerprint"]) == 64
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("no git history to place the scored commit in")
    ancestor = subprocess.run(["git", "-C", str(ROOT), "merge-base", "--is-ancestor",
                               rec["commit"], "HEAD"], capture_output=True)  # fmt: skip
    assert ancestor.returncode == 0, f"{rec['commit']} is not in this checkout's history"


def test_the_books_sentences_on_the_score_hold_and_would_catch_a_change():
    """The claims the chapter and appendix glue from the record hold for it, and fail for a
    record whose worst regime is a short-sequence one."""
    import copy

    from dmlimits.book import measured_figures
    from dmlimits.measured import confront

    rec = measured_figures.lockbox_record()
    facts = measured_figures.lockbox_facts(rec)
    assert facts["holds"] and facts["rows"] >= facts["modelled"] > 0
    changed = copy.deepcopy(rec)
    short = next(k for k in changed["lockbox_by_regime"]
                 if not k.endswith(confront.SEQUENCES[-1][1]))  # fmt: skip
    changed["lockbox_by_regime"][short]["step"] = 10.0
    assert not measured_figures.lockbox_facts(changed)["holds"]
