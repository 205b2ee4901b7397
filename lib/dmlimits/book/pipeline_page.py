"""The pipeline chapter's figures, drawn from what
:mod:`dmlimits.costs.pipeline` computes (the cost module itself never draws)."""

from __future__ import annotations

from typing import Any

import matplotlib.pyplot as plt
import numpy as np

from dmlimits.book import interactive, schematics_compute
from dmlimits.book.figures import PALETTE
from dmlimits.core import checks
from dmlimits.costs.pipeline import (
    BACKWARD_SLOTS,
    ZERO_BUBBLE_MICROBATCHES_PER_STAGE,
    bubble_fraction,
)


# --- Figures -----------------------------------------------------------------------------------
def figure_bubble(
    n_pp_values: Any,
    n_pp_interleaved: Any,
    v_values: Any,
    max_fraction: Any | None = None,
    m_max: Any | None = None,
):
    """The 1F1B bubble against the microbatch count: left, without interleaving for several
    ``N_PP`` (a dot where zero bubble becomes possible, ``m = 2 N_PP``); right, one ``N_PP`` with
    several interleaving factors, the waits ``z`` showing below ``m = N_PP``.  All values from
    :func:`~dmlimits.costs.pipeline.bubble_fraction`; a dashed line at ``max_fraction`` when
    given."""
    stages = [checks.whole("n_pp_values", p) for p in n_pp_values]
    p_int = checks.whole("n_pp_interleaved", n_pp_interleaved)
    factors = [checks.whole("v_values", x) for x in v_values]
    top = checks.whole("m_max", m_max) if m_max is not None else 8 * max([*stages, p_int])
    m = np.arange(1, top + 1)
    fig, (left, right) = plt.subplots(1, 2, figsize=(9.0, 3.8), sharey=True)
    for i, p in enumerate(stages):
        color = PALETTE[i % len(PALETTE)]
        left.plot(m, bubble_fraction(p, m), color=color, label=rf"$N_{{\mathrm{{PP}}}} = {p}$")
        zb = ZERO_BUBBLE_MICROBATCHES_PER_STAGE * p
        if zb <= top:
            left.plot([zb], [bubble_fraction(p, zb)], "o", color=color, ms=5)
    for i, vv in enumerate(factors):
        right.plot(
            m,
            bubble_fraction(p_int, m, vv),
            color=PALETTE[i % len(PALETTE)],
            label=rf"$v = {vv}$",
        )
    right.axvline(p_int, color=PALETTE[-1], lw=0.8, ls=":")
    right.set_title(rf"$N_{{\mathrm{{PP}}}} = {p_int}$, interleaved", fontsize=10)
    left.set_title("1F1B without interleaving (dots: zero bubble possible)", fontsize=10)
    for ax in (left, right):
        ax.set_xscale("log")
        ax.set_xlabel("microbatches per step, $m$")
        if max_fraction is not None:
            ax.axhline(float(max_fraction), color=PALETTE[-1], ls="--", lw=0.9)
        ax.legend(loc="upper right", fontsize=8)
    left.set_ylabel("bubble fraction $f$")
    left.set_ylim(0, 1)
    fig.tight_layout()
    return fig


def figure_schedule(n_pp: Any, m: Any, v: Any, steps: Any = 2, backward: Any = BACKWARD_SLOTS):
    """Gantt charts of ``steps`` steps on ``N_PP`` GPUs with ``m`` microbatches: 1F1B,
    Megatron-LM's interleaved 1F1B with ``v`` chunks per GPU (one flush per step) and ZB-H2
    (steps back to back), stacked and sized for the book's column; drawn by
    :func:`dmlimits.book.schematics_compute.pipeline_schedule` from
    :func:`~dmlimits.costs.pipeline.schedule` and
    :func:`~dmlimits.costs.pipeline.schedule_zero_bubble`."""
    return schematics_compute.pipeline_schedule(n_pp, m, v, steps, backward)


# --- Interactive -------------------------------------------------------------------------------
def bubble_widget(n_pp_values: Any, v_values: Any, m_max: Any) -> Any:
    """The bubble of :func:`figure_bubble` with a reader's controls: the stages, the
    interleaving factor and the microbatches (a mark on the curve), each curve from
    :func:`~dmlimits.costs.pipeline.bubble_fraction` at every whole ``m`` up to ``m_max``."""
    stages = [checks.whole("n_pp_values", p) for p in n_pp_values]
    factors = [checks.whole("v_values", x) for x in v_values]
    top = checks.whole("m_max", m_max)
    m = list(range(1, top + 1))
    series = {}
    for i, p in enumerate(stages):
        for j, vv in enumerate(factors):
            lines = [{"name": f"v = {vv}", "x": m, "y": bubble_fraction(p, np.array(m), vv)}]
            if vv != 1:
                lines.append({"name": "v = 1 (not interleaved)", "x": m,
                              "y": bubble_fraction(p, np.array(m), 1)})  # fmt: skip
            series[(i, j)] = lines
    controls = [
        {"name": "n_pp", "label": "pipeline stages", "values": stages,
         "labels": [str(p) for p in stages], "initial": len(stages) // 2},
        {"name": "v", "label": "interleaving factor v", "values": factors,
         "labels": [str(x) for x in factors], "initial": min(1, len(factors) - 1)},
        {"name": "m", "label": "microbatches per step", "values": m,
         "labels": [str(x) for x in m], "initial": min(top, 2 * stages[len(stages) // 2]) - 1},
    ]  # fmt: skip
    return interactive.curves(
        "pipeline-bubble",
        "The 1F1B bubble: move the stages, the interleaving and the microbatches",
        controls, "m", "microbatches per step, m", "bubble fraction f", series,
        x_log=True, y_percent=True,
        summary="An interactive version of the figure above (needs JavaScript).",
    )
