"""The scenarios whose sweeps a book's chapters read, listed for the build to sweep up front.

A build asks for them before any chapter runs (:func:`dmlimits.build.engine.sweep_up_front`),
so they live apart from the figures and tables that read the sweeps
(:mod:`dmlimits.book.whole_run`): listing them imports the search and the what-if variants, not
matplotlib.
"""

from __future__ import annotations

from dmlimits import search
from dmlimits.book import explorer
from dmlimits.core.scenario import PAPER_PRESETS, Scenario, compared, resolve_overrides
from dmlimits.search import whatif

#: The option under which the authors' final code is reproduced exactly: their search notebook's
#: year (3.154e7 s against 365.25 days) and their rule for the network levels.
AUTHORS_EXACT = {"training.year_seconds": 3.154e7, "search.level_times": "authors"}


#: One alternative for each modelling choice of the search whose effect the book shows: each
#: default is the rule its chapter derives (tests/test_choices.py); these are the others.
CHOICE_ALTERNATIVES = {
    "the authors' level rule (`search.level_times=authors`)": {"search.level_times": "authors"},
    "levels overlapped per parallelism (`search.level_times=max`)": {"search.level_times": "max"},
    "levels added (`search.level_times=sum`)": {"search.level_times": "sum"},
    "gradient all-reduce overlapped (`search.dp_overlap=true`)": {"search.dp_overlap": True},
    "microbatches of whole sequences (`search.microbatch_unit=sequence`)": {
        "search.microbatch_unit": "sequence"
    },
    "no zero-bubble schedule (`search.zero_bubble=false`)": {"search.zero_bubble": False},
    "zero bubble with 2N - 1 microbatches (`search.zero_bubble_min=2n-1`)": {
        "search.zero_bubble_min": "2n-1"
    },
    "expected expert latency (`search.expert_latency=expected`)": {
        "search.expert_latency": "expected"
    },
    "exact 2D split rule (`search.tp_split_rule=exact`)": {"search.tp_split_rule": "exact"},
    "the authors' search year of 3.154e7 s (`training.year_seconds=3.154e7`)": {
        "training.year_seconds": AUTHORS_EXACT["training.year_seconds"]
    },
    "latency paid for every microbatch (`search.latency_paid=microbatch`)": {
        "search.latency_paid": "microbatch"
    },
}


#: The hardware generations compared, oldest first (the presets of issue #6 and the paper's).
GENERATIONS = ("gtx580", "v100", "a100", "h100", "h200", "b200", "gb200-nvl72")


def authors_year(scn: Scenario) -> Scenario:
    """``scn`` with the authors' search year (:data:`AUTHORS_EXACT`), as
    :func:`dmlimits.book.whole_run.reference_exceptions` sweeps it again."""
    return resolve_overrides(scn, {"training.year_seconds": AUTHORS_EXACT["training.year_seconds"]})


def scenarios_swept_next(scn: Scenario) -> list[Scenario]:
    """The sweeps the chapters of a book built for ``scn`` read that depend on the results of
    those of :func:`scenarios_swept` (so a build sweeps them second, on every core): each
    paper setting whose configurations differ anywhere from the authors' is swept again with
    the authors' year (:func:`dmlimits.book.whole_run.reference_exceptions`).  A setting whose
    comparison cannot be made is left to its chapter, which says why."""
    out = []
    for preset in compared(PAPER_PRESETS, scn).values():
        try:
            rows = search.reference_comparison(preset)
        except ValueError:
            continue
        if not all(r["same_configuration"] for r in rows):
            out.append(authors_year(preset))
    return out


def unique(scenarios: list[Scenario]) -> list[Scenario]:
    """``scenarios`` without repeats: the first of those the search would sweep alike."""
    seen: dict[str, Scenario] = {}
    for s in scenarios:
        seen.setdefault(search.scenario_key(s), s)
    return list(seen.values())


def chapters_swept(scn: Scenario) -> list[Scenario]:
    """The scenarios the chapters other than the explorer read (see :func:`scenarios_swept`)."""
    out = [scn]
    if scn["model.sparse"]:
        out.append(resolve_overrides(scn, {"model.sparse": False}))
    out += compared(PAPER_PRESETS, scn).values()
    out += compared(GENERATIONS, scn).values()
    out += [resolve_overrides(scn, changes) for changes in CHOICE_ALTERNATIVES.values()]
    out += whatif.tornado_variants(scn).values()
    out += whatif.uncertainty_variants(scn)
    return unique(out)


def explorer_only(scn: Scenario) -> list[Scenario]:
    """The explorer's settings that no other chapter sweeps: what the explorer adds to a
    build."""
    others = {search.scenario_key(s) for s in chapters_swept(scn)}
    return [s for s in unique(list(explorer.settings(scn).values()))
            if search.scenario_key(s) not in others]  # fmt: skip


def scenarios_swept(scn: Scenario) -> list[Scenario]:
    """The scenarios whose sweeps the chapters of a book built for ``scn`` read, each once:
    the scenario, its dense counterpart (closed forms), the paper's settings and the GPU
    generations as the chapters compare them, the search chapter's alternatives, the what-if
    chapter's variants and the explorer's settings
    (:func:`dmlimits.book.explorer.settings`).  A build sweeps them up front on every core; a
    sweep a chapter needs beyond these is computed when it is first asked for, and cached
    alike."""
    return unique([*chapters_swept(scn), *explorer.settings(scn).values()])
