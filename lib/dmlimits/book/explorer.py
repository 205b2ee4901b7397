"""The explorer: the assumptions readers change most, as controls, and the settings swept for
them.

The page (``notebooks/explorer.md``) lets a reader pick a GPU and move one assumption at a time
(or the network's bandwidth and latency together) and shows, for each position of the controls,
the utilization curve, the headline limits and the optimal configuration at a compute the reader
picks.  Every one of those positions is an ordinary scenario: the GPU's preset, carrying the
book's own assumptions as :func:`dmlimits.core.scenario.compared` carries them, with
``--set``-style overrides.  :func:`settings` lists them, :mod:`dmlimits.book.book_sweeps` has
the build sweep them up front, and :func:`dmlimits.book.explorer_page.data` writes what the
page shows.  The page only looks values up: a position of the controls that was not swept is
said to be off the grid, with the command that builds the book for it.

The grid, for each GPU of :data:`GPUS`: the base scenario and each control of :data:`CONTROLS`
moved alone to each of its stops; for the GPUs of :data:`PAIR_GPUS`, also each pair of
:data:`PAIRS` moved together over all their stops.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dmlimits.core.scenario import Scenario, compared, resolve_overrides

#: The GPUs the explorer offers, one per generation of the paper's presets.
GPUS = ("v100", "a100", "h100")


@dataclass(frozen=True)
class Control:
    """An assumption the explorer moves: its scenario key, what the page calls it, and its
    stops, either multiples of the base scenario's value (``factors``) or the values themselves
    (``choices``, for a law or a switch)."""

    key: str
    label: str
    factors: tuple[float, ...] = ()
    choices: tuple[Any, ...] = ()

    def stops(self, base: Scenario) -> tuple[Any, ...]:
        """The values this control steps through around ``base``."""
        if self.choices:
            return self.choices
        value = base[self.key]
        return tuple(value * f for f in self.factors)

    def base_index(self, base: Scenario) -> int:
        """The stop that is ``base``'s own value."""
        if self.choices:
            return self.choices.index(base[self.key])
        return self.factors.index(1.0)


#: The stops of a bandwidth, a latency, the run's length and the batch law's exponent: halved,
#: as it is and doubled.  Finer or wider stops cost a sweep each per GPU: at these, a cold build
#: grows within its budget (docs/performance.md), and around the book's own GPU they are the
#: what-if chapter's variants, swept anyway.
FACTORS = (0.5, 1.0, 2.0)

#: The assumptions readers change most, in the order the page shows them.
CONTROLS = (
    Control("network.intra_node.bandwidth", "NVLink bandwidth per GPU", FACTORS),
    Control("network.inter_node.bandwidth", "InfiniBand bandwidth per GPU", FACTORS),
    Control("network.latency", "network latency per message", FACTORS),
    Control("hardware.kernel_latency", "kernel latency", FACTORS),
    Control("hardware.hbm_bandwidth", "HBM bandwidth", FACTORS),
    Control("training.months", "length of the run", FACTORS),
    Control("batch.law", "batch-size law", choices=("default", "none", "deepseek")),
    Control("batch.exponent", "batch-law exponent (default law)", FACTORS),
    Control("model.sparse", "mixture of experts", choices=(False, True)),
)

#: Controls swept together over all their stops (each pair costs a sweep for every pair of
#: stops: 4 beyond the one-at-a-time settings).
PAIRS = (("network.inter_node.bandwidth", "network.latency"),)
#: The GPUs the pairs are swept for.
PAIR_GPUS = ("h100",)


def bases(scn: Scenario) -> dict[str, Scenario]:
    """The explorer's base scenario of each GPU: its preset with the book's other assumptions."""
    return compared(GPUS, scn)


def positions(base: Scenario, pairs: bool = True) -> list[tuple[int, ...]]:
    """The positions of the controls (a stop index per control) swept around ``base``: the base,
    each control alone at each other stop, and (``pairs``) each pair of :data:`PAIRS` at every
    pair of stops."""
    home = tuple(c.base_index(base) for c in CONTROLS)
    out = [home]
    for i, c in enumerate(CONTROLS):
        for j in range(len(c.stops(base))):
            if j != home[i]:
                out.append((*home[:i], j, *home[i + 1 :]))
    index = {c.key: i for i, c in enumerate(CONTROLS)}
    for a, b in PAIRS if pairs else ():
        ia, ib = index[a], index[b]
        for ja in range(len(CONTROLS[ia].stops(base))):
            for jb in range(len(CONTROLS[ib].stops(base))):
                p = list(home)
                p[ia], p[ib] = ja, jb
                out.append(tuple(p))
    seen: dict[tuple[int, ...], None] = {}
    for p in out:
        seen.setdefault(p, None)
    return list(seen)


def overrides(base: Scenario, position: tuple[int, ...]) -> dict[str, Any]:
    """The ``--set`` values that move ``base`` to ``position`` (none at the base)."""
    home = tuple(c.base_index(base) for c in CONTROLS)
    return {
        c.key: c.stops(base)[j]
        for c, j, h in zip(CONTROLS, position, home, strict=True)
        if j != h
    }


def setting_id(gpu: str, position: tuple[int, ...]) -> str:
    """The page's name of a position: the GPU and the stop index of each control."""
    return gpu + ":" + ",".join(str(j) for j in position)


def scenario_at(base: Scenario, position: tuple[int, ...]) -> Scenario:
    """The scenario of ``position`` around ``base``."""
    changes = overrides(base, position)
    return resolve_overrides(base, changes) if changes else base


def settings(scn: Scenario) -> dict[str, Scenario]:
    """Every setting the explorer offers for a book built for ``scn``, by :func:`setting_id`."""
    out = {}
    for gpu, base in bases(scn).items():
        for p in positions(base, gpu in PAIR_GPUS):
            out[setting_id(gpu, p)] = scenario_at(base, p)
    return out


def grid_size(scn: Scenario) -> dict[str, int]:
    """How many settings the explorer sweeps, in all and per GPU."""
    per_gpu = {gpu: len(positions(base, gpu in PAIR_GPUS)) for gpu, base in bases(scn).items()}
    return {"total": sum(per_gpu.values()), **per_gpu}
