"""The search for the best parallelism at every model size (Erdil & Schneider-Joseph 2024).

For one model of the sweep and one cluster of ``N`` GPUs, every candidate configuration is
enumerated at once as numpy arrays: the factorization ``N / N_EP = N_TP N_DP N_PP`` with the
paper's divisibility rules, the 2D split of ``N_TP``, 1F1B with the smallest valid microbatch
counts or zero-bubble, and every placement of the five degrees on the two network levels.  Each
parallelism's cost comes from its own chapter's module (the lambdified sympy formulas); the
step time composes them as :mod:`dmlimits.costs.step` derives.  The best candidate is the fastest,
ties going to less network time; the cluster is the smallest ``S 2^i`` whose best configuration
trains the model within the training time (Erdil & Schneider-Joseph 2024).

The package's modules, each importing only from those before it: :mod:`.candidates` (the grid of
models and every configuration of a cluster), :mod:`.engine` (the costs, the bounds and the
best configuration), :mod:`.sweeps` (the sweep of a scenario and its caches), :mod:`.results`
(what a sweep says: rows, the map of parallelisms, the headline), :mod:`.reference` (the
authors' configurations) and :mod:`.whatif` (the assumptions varied one at a time).  The names
below are theirs, offered here as the package's.

The per-level costs of a candidate depend only on that parallelism's own level-0 factor, so
each is computed once per option and the placements are gathered from those tables.  Each
level's bandwidth time comes from the derivation's own term for that level, in one evaluation
(``*_level_times`` of the cost modules).

Five things make it fast without changing a result (tests/test_search_pruning.py):

* the candidates of every model still searching are costed together, one pass of array operations
  per doubling of the clusters (:func:`~dmlimits.search.engine.optimal_many`,
  :func:`~dmlimits.search.engine.best_on_many`);
* each parallelism's cost, and the matmuls', is computed once per distinct combination of the
  degrees it depends on (:data:`~dmlimits.search.candidates.GROUPS`), found without sorting from
  codes given as the configurations are listed;
* two lower bounds on each candidate's step time over its placements prune the candidates that
  cannot beat what those of least bound achieve (:data:`~dmlimits.search.engine.PRUNE_ENV`): first
  its compute alone (:func:`~dmlimits.search.engine.compute_bound`), before any parallelism is
  costed, so that the costs are computed for fewer candidates; then each parallelism's least time on
  each level (:func:`~dmlimits.search.engine.lower_bound`);
* the cost modules take the arrays the search built as given, without checking each element
  again (:func:`dmlimits.core.checks.trusted_arguments`);
* a cluster's configurations, and their matmul times and bubbles under the same hardware
  (:func:`dmlimits.costs.matmul.hardware_key`), are kept for every scenario that asks for them
  again: the presets and the what-if variants that differ in the network or the latency
  share them.
"""

from __future__ import annotations

from dmlimits.search.candidates import (
    CODES,
    COUNTS,
    DEGREES,
    LAYOUTS_KEPT,
    LOOKAHEAD,
    LOOKAHEAD_PAIRS,
    MAX_DOUBLINGS,
    MIN_GAIN,
    PATIENCE,
    POINT_COLUMNS,
    CandidateRows,
    Choices,
    Point,
    bases,
    compute_times,
    distinct_codes,
    divisors,
    placements,
    points,
    take,
)
from dmlimits.search.engine import (
    BINDING_SHARE,
    BLOCK,
    LOSS_LABELS,
    LOSSES,
    PRUNE_ENV,
    SEEDS,
    best_on,
    best_on_many,
    losses,
    optimal,
    optimal_many,
    pruning,
    used_node,
)
from dmlimits.search.reference import (
    REFERENCE_FILE,
    REFERENCE_TOLERANCE,
    reference_comparison,
    reference_linear_end,
    reference_rows,
    reference_setting,
    reference_summary,
)
from dmlimits.search.results import (
    HEADLINE_MEANINGS,
    PARALLELISMS,
    ROW_FIELDS,
    Meaning,
    headline,
    linear_end_threshold,
    parallelism_label,
    parallelism_map,
    rows,
)
from dmlimits.search.sweeps import (
    CACHE_ENV,
    cache_dir,
    cache_path,
    forget,
    library_fingerprint,
    scenario_key,
    sweep,
    sweep_fingerprint,
    sweep_many,
)

#: What the package offers: the names of its modules that the book and the tests use.
__all__ = [
    "BINDING_SHARE",
    "BLOCK",
    "CACHE_ENV",
    "CODES",
    "COUNTS",
    "DEGREES",
    "HEADLINE_MEANINGS",
    "LAYOUTS_KEPT",
    "LOOKAHEAD",
    "LOOKAHEAD_PAIRS",
    "LOSSES",
    "LOSS_LABELS",
    "MAX_DOUBLINGS",
    "MIN_GAIN",
    "PARALLELISMS",
    "PATIENCE",
    "POINT_COLUMNS",
    "PRUNE_ENV",
    "REFERENCE_FILE",
    "REFERENCE_TOLERANCE",
    "ROW_FIELDS",
    "SEEDS",
    "CandidateRows",
    "Choices",
    "Meaning",
    "Point",
    "bases",
    "best_on",
    "best_on_many",
    "cache_dir",
    "cache_path",
    "compute_times",
    "distinct_codes",
    "divisors",
    "forget",
    "headline",
    "library_fingerprint",
    "linear_end_threshold",
    "losses",
    "optimal",
    "optimal_many",
    "parallelism_label",
    "parallelism_map",
    "placements",
    "points",
    "pruning",
    "reference_comparison",
    "reference_linear_end",
    "reference_rows",
    "reference_setting",
    "reference_summary",
    "rows",
    "scenario_key",
    "sweep",
    "sweep_fingerprint",
    "sweep_many",
    "take",
    "used_node",
]
