"""Shared paths and fixtures.  Tests marked ``book`` read the default build (make book)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "_build"
HTML = BUILD / "html"
EXECUTED = BUILD / "executed"
SHARED = ROOT.parent / "shared"


def toc_notebooks() -> list[str]:
    from dmlimits.build import toc_notebooks as names

    return [Path(n).name for n in names(ROOT)]


@pytest.fixture(scope="session")
def built_book() -> Path:
    """The default book; fails (never skips) when it is missing: run `make book` first."""
    if not (HTML / "index.html").is_file() or not EXECUTED.is_dir():
        pytest.fail("the default book is not built: run `make book` (make test does it)")
    return HTML


def run_cli(
    *args: str, cwd: Path = ROOT, timeout: float = 600, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """``python -m dmlimits ARGS``; ``env`` adds to (or, with "", removes from) the environment."""
    full = dict(os.environ)
    for key, value in (env or {}).items():
        if value:
            full[key] = value
        else:
            full.pop(key, None)
    return subprocess.run(
        [sys.executable, "-m", "dmlimits", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full,
    )


def pytest_collection_modifyitems(config, items):
    """Every test that reads the built book is marked ``book``, so that ``-m "not book"`` (make
    check) runs the library tests without a build."""
    for item in items:
        if "built_book" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.book)
