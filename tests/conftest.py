"""Shared paths and fixtures.  Tests marked ``book`` read the default build (make book)."""

from __future__ import annotations

import functools
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


@pytest.fixture(autouse=True)
def _same_working_directory():
    """Every test leaves the working directory where it found it: a test that moves it and
    does not come back fails, and the next test on its worker starts where it should."""
    before = os.getcwd()
    yield
    after = os.getcwd()
    if after != before:
        os.chdir(before)
        pytest.fail(f"the test left the working directory at {after} (it was {before})")


@functools.cache
def _builders() -> dict:
    from dmlimits.core.derivation import builders

    return builders()


@functools.cache
def _built(key: str):
    """The derivation of one builder, built once per test process (derivations are frozen; no
    test changes one)."""
    return _builders()[key]()


def derivation_names() -> list[str]:
    """The names the derivation and premise tests parametrize over, without building a
    derivation: the oracles' (``test_premises`` checks that they are every derivation's name).
    Building all of them at collection took seconds in every test worker, also in one that
    then ran no derivation test."""
    from dmlimits.premises import ORACLES

    return sorted(ORACLES)


def every_derivation() -> tuple:
    """Every derivation of the library, each built once per test process."""
    return tuple(_built(key) for key in _builders())


def derivation_called(name: str):
    """The derivation called ``name`` among :func:`every_derivation`."""
    found = [d for d in every_derivation() if d.name == name]
    assert found, f"no derivation is called {name!r}"
    return found[0]


def derivations_of(module: str) -> list:
    """The derivations registered by ``dmlimits.<module>``, built once per test process: a
    chapter's tests check their names and shape; ``test_derivation.py`` proves each step of
    each one (so that ``make check`` proves every derivation once, not once a module)."""
    prefix = f"dmlimits.{module}."
    return [_built(key) for key in _builders() if key.startswith(prefix)]


def toc_notebooks() -> list[str]:
    from dmlimits.build.engine import toc_notebooks as names

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


#: What nbval's kernels run without: the build's sweep cache, its kept formulas and the
#: search's pruning.  nbval re-executes every notebook of the default book, which was built
#: with all three (and with the cache of executed notebooks), and compares every output: so the
#: book built with them is checked to be the book computed without them.
UNCACHED = {
    "DMLIMITS_SWEEP_CACHE": "off",
    "DMLIMITS_FORMULA_CACHE": "off",
    "DMLIMITS_SEARCH_PRUNE": "off",
}


def _nbval_uncached(collector) -> None:
    """Start this notebook's kernel with :data:`UNCACHED` and compare its figures too (nbval
    skips PNG outputs unless told; the book's figures are byte-for-byte reproducible)."""
    if getattr(collector, "_dmlimits_uncached", False):
        return
    collector._dmlimits_uncached = True
    collector.skip_compare = tuple(k for k in collector.skip_compare if k != "image/png")
    start = collector.setup

    def setup() -> None:
        saved = {k: os.environ.get(k) for k in UNCACHED}
        os.environ.update(UNCACHED)
        try:
            start()  # the kernel inherits the environment it starts with
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v

    collector.setup = setup


#: Seconds each of the longest files took in ``make test`` (``--durations=0`` summed by file,
#: on the project's 2-core machine; nbval's notebooks by their executed file).  make test hands
#: out whole files to its workers in collection order (--dist loadfile): the longest go first,
#: so that the short ones fill in beside them and no long file starts last.  Files not listed
#: keep their order after these.
LONGEST_FIRST = {
    "test_build.py": 154, "test_browser.py": 48, "test_derivation.py": 45, "whatif.ipynb": 38,
    "test_formula_cache.py": 38, "generations.ipynb": 36, "test_chapter_reads.py": 33,
    "search.ipynb": 29, "test_build_runs.py": 26, "reproduction.ipynb": 25,
    "test_search_pruning.py": 23, "closed_forms.ipynb": 20, "test_premises.py": 19,
    "test_properties.py": 18, "test_teaching.py": 13, "diminishing_returns.ipynb": 10,
    "test_browser_widgets.py": 60, "explorer.ipynb": 28,
}  # fmt: skip


def _run_order(item) -> int:
    return -LONGEST_FIRST.get(Path(str(item.fspath)).name, 0)


def pytest_collection_modifyitems(config, items):
    """Every test that reads the built book is marked ``book``, so that ``-m "not book"`` (make
    check) runs the library tests without a build; nbval's notebooks run uncached; the longest
    files are run first (:data:`LONGEST_FIRST`; the sort is stable)."""
    for item in items:
        if "built_book" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.book)
        if type(item.parent).__name__ == "IPyNbFile":
            _nbval_uncached(item.parent)
    items.sort(key=_run_order)


def assert_levels_add_up(levels, whole, unlimited: bool) -> None:
    """A cost module's ``*_level_times`` (each level's bandwidth time apart) against its whole
    time without overlap: the two levels add up to the bandwidth time, the latency is the same;
    on an unlimited network both levels are nothing, otherwise each carries some traffic."""
    import numpy as np

    np.testing.assert_allclose(levels.level0 + levels.level1, whole.bandwidth, rtol=1e-14)
    np.testing.assert_allclose(levels.latency, whole.latency, rtol=1e-14)
    if unlimited:
        assert not np.any(levels.level0) and not np.any(levels.level1)
    else:
        assert (levels.level0 > 0).any() and (levels.level1 > 0).any()


def pixels_of_colour(fig, ax, x0: float, x1: float, y: float, colour: str) -> int:
    """How many pixels of ``fig`` as drawn show ``colour`` (faded by antialiasing no more than to
    half) within 1.3 points (two pixels at 110 per inch) of the horizontal line ``y`` of ``ax``
    between ``x0`` and ``x1`` (data coordinates; a curve there is nearly horizontal, or ``y``
    is one point of it)."""
    import matplotlib.colors as mcolors
    import numpy as np

    fig.canvas.draw()
    rgb = np.asarray(fig.canvas.buffer_rgba())[..., :3].astype(float) / 255
    (a, row), (b, _) = ax.transData.transform([(x0, y), (x1, y)])
    row = rgb.shape[0] - round(float(row))
    half = max(2, round(1.3 * fig.dpi / 72))  # the band's half-height in pixels
    band = rgb[row - half : row + half + 1, int(min(a, b)) : int(max(a, b)) + 1].reshape(-1, 3)
    ink = 1 - band  # a pixel is the colour's ink times its alpha on white
    target = 1 - np.array(mcolors.to_rgb(colour))
    alpha = ink @ target / (target @ target)
    off = np.linalg.norm(ink - alpha[:, None] * target, axis=1)
    return int(np.sum((alpha > 0.5) & (off < 0.08)))
