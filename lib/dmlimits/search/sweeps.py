"""The sweep of a scenario: the optimal configuration at every model of its grid, kept in the
process and on disk (content-addressed by the search's code, the data and every value of the
scenario: :data:`CACHE_ENV`), and several scenarios swept on every core.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from dmlimits.core.checks import require_scenario
from dmlimits.core.formula_cache import closure_fingerprint
from dmlimits.core.formula_cache import library_fingerprint as fingerprint
from dmlimits.core.plumbing import cache_folder, digest, read_json, write_json
from dmlimits.core.scenario import Scenario
from dmlimits.search.candidates import Choices, points
from dmlimits.search.engine import losses, optimal_many

_SWEEPS: dict[str, list[dict[str, Any]]] = {}
#: The folder of the sweep cache on disk, from this environment variable (unset or "off": no
#: disk cache).  ``make`` sets it to ``_build/cache/sweeps`` for the book and the tests.
CACHE_ENV = "DMLIMITS_SWEEP_CACHE"


def scenario_key(scn: Scenario) -> str:
    return repr(sorted(scn.values.items()))


def library_fingerprint() -> str:
    """A hash of every file of the installed library (code, data, presets): a changed formula
    or constant changes it (:func:`dmlimits.core.formula_cache.library_fingerprint`)."""
    return fingerprint()


def sweep_fingerprint() -> str:
    """A hash of what a sweep can depend on: every module this one imports, directly or
    through others, anywhere in their source, and every data file and preset of the library
    (:func:`dmlimits.core.formula_cache.closure_fingerprint`).  A changed formula or constant
    changes it; a change to a module the search never imports (a chapter's figures, the model
    of measured runs) does not, and the sweeps kept on disk stay valid."""
    return closure_fingerprint(__name__)


def cache_dir() -> Any:
    """The folder of the sweep cache (:data:`CACHE_ENV`), or ``None`` when it is off."""
    return cache_folder(CACHE_ENV)


def cache_path(scn: Scenario) -> Any:
    """Where the sweep of ``scn`` is cached on disk (content-addressed: :func:`sweep_fingerprint`
    and every value of the scenario), or ``None`` when the disk cache is off."""
    folder = cache_dir()
    if folder is None:
        return None
    return folder / f"{digest(sweep_fingerprint(), scenario_key(scn))}.json"


def _load(path: Any) -> list[dict[str, Any]] | None:
    """The sweep kept at ``path``, marked used now (the build removes the sweeps used longest
    ago first: :func:`dmlimits.build.engine.prune_sweep_cache`); ``None`` when there is none."""

    results = read_json(path)
    if results is not None:
        with contextlib.suppress(OSError):  # a cache that cannot be written is still read
            os.utime(path)
    return results


def _store(path: Any, results: list[dict[str, Any]]) -> None:
    """Write atomically: a reader sees the whole sweep or none (two builds may race)."""
    write_json(path, results)


def forget(scn: Scenario | None = None) -> None:
    """Drop the sweep of ``scn`` kept in this process (every one when ``None``), so that the next
    :func:`sweep` reads the disk cache or searches again."""
    if scn is None:
        _SWEEPS.clear()
    else:
        _SWEEPS.pop(scenario_key(scn), None)


def sweep(scn: Scenario) -> list[dict[str, Any]]:
    """The optimal configuration at every model of the scenario's sweep (full results, with every
    time of the step; :func:`~dmlimits.search.results.rows` gives the public columns).  Cached per
    set of assumptions in this process, and on disk when :data:`CACHE_ENV` names a folder: notebooks
    ask for the same sweeps many times, and a build sweeps them up front."""
    scn = require_scenario(scn)
    key = scenario_key(scn)
    if key not in _SWEEPS:
        path = cache_path(scn)
        results = _load(path) if path is not None else None
        if results is None:
            ch = Choices.of(scn)
            results = optimal_many(scn, points(scn), ch)
            for r in results:
                r.update(losses(scn, r))
            if path is not None:
                _store(path, results)
        _SWEEPS[key] = results
    return [dict(r) for r in _SWEEPS[key]]


def formula_family(scn: Scenario) -> tuple[Any, ...]:
    """The values of a scenario that decide which formulas its sweep builds beyond those every
    sweep builds: the matmul model's, with or without multicast, which are slow to build
    (:func:`dmlimits.costs.matmul.cost_expressions` and the functions lambdified from them)."""
    return (bool(scn["hardware.distributed_shared_memory"]),)


def families_first(first: Scenario, rest: list[Scenario]) -> list[Scenario]:
    """``rest`` in the order :func:`sweep_many`'s workers take them: first one scenario of each
    formula family that ``first`` (swept before the workers were forked, its formulas theirs)
    is not of, so that one worker builds that family's formulas and keeps them on disk while
    the others sweep; then the scenarios of ``first``'s family; then the others, whose
    formulas are kept on disk by then for every worker to read.  Taken in the order given,
    both workers of the book's build would build the same formulas without multicast at once.
    The order changes no result."""
    own = formula_family(first)
    leads: list[Scenario] = []
    alike: list[Scenario] = []
    later: list[Scenario] = []
    seen = {own}
    for scn in rest:
        family = formula_family(scn)
        if family == own:
            alike.append(scn)
        elif family in seen:
            later.append(scn)
        else:
            seen.add(family)
            leads.append(scn)
    return leads + alike + later


def _sweep_in_child(scn: Scenario) -> list[dict[str, Any]]:
    return sweep(scn)


def sweep_many(
    scns: list[Scenario], jobs: int | None = None, progress: Any = None
) -> list[list[dict[str, Any]]]:
    """:func:`sweep` for several scenarios, on ``jobs`` processes (default: one per core).

    The first scenario is swept here, which also prepares every lambdified formula; the
    others go to forked workers that inherit them.  ``progress(scn, seconds)`` is called as
    each scenario finishes.  The results fill the cache of this process."""
    scns = [require_scenario(x) for x in scns]
    jobs = max(1, jobs or os.cpu_count() or 1)
    for scn in scns:  # what the disk cache holds is read here, not swept again
        path = cache_path(scn)
        if scenario_key(scn) not in _SWEEPS and path is not None and path.is_file():
            sweep(scn)
    todo = [x for x in scns if scenario_key(x) not in _SWEEPS]
    for scn in scns:
        if scenario_key(scn) in _SWEEPS and progress is not None:
            progress(scn, 0.0)  # already swept in this process

    def done(scn: Scenario, start: float) -> None:
        if progress is not None:
            progress(scn, time.perf_counter() - start)

    if todo:
        start = time.perf_counter()
        sweep(todo[0])
        done(todo[0], start)
        rest = [x for x in todo[1:] if scenario_key(x) not in _SWEEPS]
        if jobs > 1 and len(rest) > 1:
            rest = families_first(todo[0], rest)

            ctx = multiprocessing.get_context("fork")
            pool = ProcessPoolExecutor(max_workers=min(jobs, len(rest)), mp_context=ctx)
            try:
                started = time.perf_counter()
                futures = {pool.submit(_sweep_in_child, x): x for x in rest}
                for future in futures:
                    scn = futures[future]
                    _SWEEPS.setdefault(scenario_key(scn), future.result())
                    done(scn, started)
            except BaseException:  # interrupted: stop the workers now rather than wait
                for process in list(getattr(pool, "_processes", {}).values()):
                    process.terminate()
                pool.shutdown(wait=False, cancel_futures=True)
                raise
            pool.shutdown(wait=True)
        else:
            for scn in rest:
                start = time.perf_counter()
                sweep(scn)
                done(scn, start)
    return [sweep(x) for x in scns]
