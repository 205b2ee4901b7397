"""The pipeline chapter's figures, drawn from what
:mod:`dmlimits.costs.pipeline` computes (the cost module itself never draws)."""

from __future__ import annotations

from typing import Any

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.patches import Patch

from dmlimits.book import interactive
from dmlimits.book.figures import PALETTE
from dmlimits.core import checks
from dmlimits.costs.pipeline import (
    BACKWARD_SLOTS,
    ZERO_BUBBLE_MICROBATCHES_PER_STAGE,
    Schedule,
    bubble_fraction,
    schedule,
    schedule_zero_bubble,
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


def _draw_schedule(
    ax: Any, sched: Schedule, scale: float, offset: float = 0.0, first_step: int = 0
) -> None:
    colors = {"F": PALETTE[0], "B": PALETTE[1], "W": PALETTE[2]}
    # One collection of bars per GPU and look (kind, pale step, later chunk): a schedule has
    # hundreds of passes, and a collection each would make the figure slow to draw.
    bars: dict[tuple[int, str, bool, bool], list[tuple[float, float]]] = {}
    for p in sched.passes:
        step, micro = divmod(p.micro, sched.m)
        start, width = offset + p.start / scale, (p.end - p.start) / scale
        look = (p.gpu, p.kind, bool((step + first_step) % 2), p.chunk >= sched.n_pp)
        bars.setdefault(look, []).append((start, width))
        if width >= 1:
            # Inside its bar, so inside the axes: left out of the layout's measures, which
            # would otherwise size each of hundreds of labels to find the axes' extent.
            ax.text(
                start + width / 2, p.gpu, str(micro + 1), ha="center", va="center",
                fontsize=6, color="white", in_layout=False,
            )  # fmt: skip
    for (gpu, kind, pale, later), ranges in bars.items():
        ax.broken_barh(
            ranges, (gpu - 0.42, 0.84), facecolors=colors[kind], alpha=0.55 if pale else 1.0,
            edgecolor="white", linewidth=0.6, hatch="////" if later else None,
        )  # fmt: skip


def figure_schedule(n_pp: Any, m: Any, v: Any, steps: Any = 2, backward: Any = BACKWARD_SLOTS):
    """Gantt charts of ``steps`` steps on ``N_PP`` GPUs with ``m`` microbatches: 1F1B, Megatron-LM's
    interleaved 1F1B with ``v`` chunks per GPU (one flush per step) and ZB-H2 (steps back to
    back), from :func:`~dmlimits.costs.pipeline.schedule` and
    :func:`~dmlimits.costs.pipeline.schedule_zero_bubble`.  Time in slots of one forward pass
    through a whole stage; numbers are microbatches; every second step pale, passes through
    a GPU's second and later chunks hatched."""
    p, mm, vv = checks.whole("n_pp", n_pp), checks.whole("m", m), checks.whole("v", v)
    k, b = checks.whole("steps", steps), checks.whole("backward", backward)
    plain = schedule(p, mm, 1, "1f1b", b)
    inter = schedule(p, mm, vv, "interleaved", b)
    zb = schedule_zero_bubble(p, mm, k)
    fig, axes = plt.subplots(3, 1, figsize=(9.5, 6.2), sharex=True)
    panels = [
        (plain, 1, f"1F1B: bubble {float(plain.bubble):.0%} of every flush"),
        (inter, vv, f"interleaved 1F1B, v = {vv}: bubble {float(inter.bubble):.0%}"),
        (zb, 1, "ZB-H2, steps back to back: no GPU idles between its first and last pass"),
    ]
    for ax, (sched, scale, title) in zip(axes, panels, strict=True):
        if sched.steps > 1:
            _draw_schedule(ax, sched, scale)
        else:
            for step in range(k):
                _draw_schedule(ax, sched, scale, step * sched.makespan / scale, step)
        ax.set_title(title, fontsize=9, loc="left")
        ax.set_yticks(range(p), [f"GPU {g + 1}" for g in range(p)])
        ax.set_ylim(p - 0.5, -0.5)
        ax.grid(False)
    axes[-1].set_xlabel("time (slots of one forward pass through a stage)")
    handles = [
        Patch(color=PALETTE[0], label="forward"),
        Patch(color=PALETTE[1], label="backward"),
        Patch(color=PALETTE[2], label="weight gradient (ZB-H2)"),
        Patch(facecolor="white", edgecolor=PALETTE[-1], hatch="////", label="later chunk"),
    ]
    fig.legend(handles=handles, loc="upper center", fontsize=8, ncol=4)
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    return fig


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
