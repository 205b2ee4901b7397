"""The whatif chapter's figures and the words of its band, from what
:mod:`dmlimits.search.whatif` computes (the cost module itself never draws)."""

from __future__ import annotations

import math
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.patches import Patch

from dmlimits import search
from dmlimits.book.figures import PALETTE, compute_axis
from dmlimits.core.scenario import Scenario
from dmlimits.search.whatif import DRAWS, FACTOR, TornadoRow, uncertainty_variants

#: The share of the draws left out at each end of the band of a limit: with twelve draws, one
#: at each end, so that the band is the range of the middle ten.
TAIL_SHARE = 0.1


# --- The band of the limits, by count of draws ---------------------------------------------
def draw_limits(scn: Scenario, n: int = DRAWS, seed: int = 0) -> dict[str, list[float]]:
    """The end of linear scaling and the last feasible run of each of the ``n`` joint draws of
    :func:`dmlimits.search.whatif.uncertainty` (``NaN`` where a draw has none), in FLOP."""
    heads = [search.headline(v) for v in uncertainty_variants(scn, n, seed)]
    return {"linear_end": [float(h["linear_scaling_end_flop"]) for h in heads],
            "wall": [float(h["last_feasible_flop"]) for h in heads]}  # fmt: skip


def middle_draws(values: list[float], tail: float = TAIL_SHARE) -> dict[str, Any]:
    """The range of the middle draws by count: the draws that have a value (``finite``),
    sorted, less ``floor(tail * finite)`` at each end.  With as few draws as the book makes, a
    quantile between two draws would claim a precision the sample does not have; the range of
    the draws kept is what the sample says.  ``lo`` and ``hi`` are ``NaN`` when no draw has a
    value; ``kept`` is how many draws the range spans."""
    finite = sorted(x for x in values if x == x)
    drop = math.floor(tail * len(finite))
    kept = finite[drop : len(finite) - drop]
    return {"lo": kept[0] if kept else math.nan, "hi": kept[-1] if kept else math.nan,
            "kept": len(kept), "finite": len(finite), "n": len(values)}  # fmt: skip


def middle_words(middle: dict[str, Any]) -> str:
    """Which draws a band spans, in words: "the middle 10 of the 12 draws", "all 5 draws",
    "the middle 8 of the 10 draws that have one" (when some draws have no value)."""
    kept, finite, n = middle["kept"], middle["finite"], middle["n"]
    if finite == 0:
        return f"none of the {n} draws"
    have = "" if finite == n else " that has one" if finite == 1 else " that have one"
    if kept == finite:
        return f"all {finite} draws{have}" if finite > 1 else f"the one draw{have}"
    return f"the middle {kept} of the {finite} draws{have}"


# --- Figures -----------------------------------------------------------------------------------
def tornado_figure(base: dict[str, float], rows: list[TornadoRow], factor: float = FACTOR):
    """Two tornado charts: how many decades the linear-scaling end and the latency wall move
    when each assumption is divided or multiplied by ``factor``.  A variant with no linear end
    or no feasible run is marked "none" at the edge."""
    fig, axes = plt.subplots(1, 2, figsize=(7.6, 0.42 * len(rows) + 1.4), sharey=True)
    labels = [r.label for r in rows][::-1]
    y = np.arange(len(rows))
    for ax, what, base_value in (
        (axes[0], "linear_end", base["linear_end"]),
        (axes[1], "wall", base["wall"]),
    ):
        lows = [getattr(r, f"{what}_low") for r in rows][::-1]
        highs = [getattr(r, f"{what}_high") for r in rows][::-1]
        finite = [abs(math.log10(x / base_value)) for x in lows + highs if x == x and x > 0]
        edge = max([*finite, 1.0]) * 1.1
        for values, color, sign in ((lows, PALETTE[0], -1), (highs, PALETTE[1], 1)):
            for yi, x in zip(y, values, strict=True):
                if x == x and x > 0:
                    ax.barh([yi], [math.log10(x / base_value)], color=color, alpha=0.8, height=0.7)
                else:  # no linear end, or no feasible run at all, in this variant
                    ax.text(sign * 0.97 * edge, yi, "none", ha="right" if sign > 0 else "left",
                            va="center", fontsize=7, color=color)  # fmt: skip
        ax.axvline(0, color="0.2", lw=0.8)
        ax.set_xlim(-edge, edge)
        ax.set_xlabel("decades of compute moved")
    axes[0].set_yticks(y, labels, fontsize=8)
    axes[0].set_title("end of linear scaling", fontsize=10)
    axes[1].set_title("latency wall (last feasible run)", fontsize=10)

    fig.tight_layout(rect=(0, 0.06, 1, 1))
    fig.legend(
        handles=[Patch(color=PALETTE[0], alpha=0.8, label=f"divided by {factor:g}"),
                 Patch(color=PALETTE[1], alpha=0.8, label=f"multiplied by {factor:g}")],
        fontsize=8, loc="lower center", ncol=2, frameon=False,
    )  # fmt: skip
    return fig


def band_label(band: dict[str, Any]) -> str:
    """The band's legend: the percentiles it spans at each compute, over how many draws."""
    q_lo, q_hi = band["quantiles"]
    return f"{100 * q_lo:.0f}th to {100 * q_hi:.0f}th percentile of {band['n']} draws"


def band_figure(band: dict[str, Any], label: str):
    """The utilization curve of the scenario with the band of the joint draws around it."""
    fig, ax = plt.subplots()
    c = band["compute"]
    ok = np.isfinite(band["low"]) & np.isfinite(band["high"])
    ax.fill_between(c[ok], band["low"][ok], band["high"][ok], color=PALETTE[0], alpha=0.25,
                    label=band_label(band))  # fmt: skip
    ax.plot(c[ok], band["median"][ok], color=PALETTE[0], lw=1, ls="--", label="median of the draws")
    ax.plot(band["base_compute"], band["base"], "o-", color=PALETTE[1], ms=3, lw=1.2, label=label)
    compute_axis(ax)
    ax.set_ylabel("utilization")
    ax.set_ylim(0, None)
    ax.legend(fontsize=8, loc="lower left")
    fig.tight_layout()
    return fig
