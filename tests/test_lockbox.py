"""The lockbox of issue #55 stays sealed: published runs recorded before the model was changed,
read by ``bench/bench_predict.py --lockbox`` and by nothing else, with the digest recorded beside
it (lib/dmlimits/data/lockbox/README.md gives the rule)."""

from __future__ import annotations

import hashlib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOCKBOX = ROOT / "lib" / "dmlimits" / "data" / "lockbox" / "published_runs_lockbox.csv"
DIGEST = ROOT / "bench" / "lockbox.sha256"
#: The one file allowed to name the lockbox (besides this test and the lockbox's own folder).
READER = ROOT / "bench" / "bench_predict.py"
#: Where a reader could hide: every text file of these folders is searched.
SEARCHED = ("lib", "tests", "notebooks", "bench", "book")
SUFFIXES = {".py", ".md", ".ipynb", ".yml", ".yaml", ".toml", ".cfg", ".txt", ".json"}


def test_digest_matches_the_recorded_one():
    recorded, name = DIGEST.read_text().split()
    assert (ROOT / name) == LOCKBOX
    assert hashlib.sha256(LOCKBOX.read_bytes()).hexdigest() == recorded


def test_only_the_benchmark_names_the_lockbox():
    allowed = {READER, Path(__file__).resolve()}
    readers = []
    for folder in SEARCHED:
        for path in (ROOT / folder).rglob("*"):
            if not path.is_file() or path.suffix not in SUFFIXES or LOCKBOX.parent in path.parents:
                continue
            if "_build" in path.parts or path.resolve() in allowed:
                continue
            text = path.read_text(errors="replace").lower()
            if "lockbox" in text or "published_runs_lockbox" in text:
                readers.append(str(path.relative_to(ROOT)))
    assert not readers, f"files other than {READER.name} name the lockbox: {readers}"


def test_the_benchmark_reads_it_only_in_its_lockbox_mode():
    text = READER.read_text()
    assert text.count("published_runs_lockbox.csv") == 1
    assert "if args.lockbox:" in text and "def lockbox()" in text
