"""Figures of the chapters on measured runs (Fernandez et al. 2024 and other published runs),
drawn from what :mod:`dmlimits.measured.confront` and :mod:`dmlimits.measured.runs` compute.
Each function returns a matplotlib figure for the chapter to glue; none computes a result.
"""

from __future__ import annotations

from typing import Any

import matplotlib.pyplot as plt
import numpy as np

from dmlimits.book import interactive
from dmlimits.book.figures import PALETTE
from dmlimits.core import published
from dmlimits.measured import confront, runs, transformer

#: Drawn in black beside the model's curves: what Fernandez et al. (2024) report.
PUBLISHED_STYLE = {"color": "black", "zorder": 5}


def scaling_figure(curves: dict):
    """Strong scaling of both shapes on the H100: per-GPU and whole-cluster throughput and
    exposed communication, with Fernandez et al.'s reported numbers drawn where they apply:
    their per-GPU drop from 128 to 2048 GPUs (anchored at the model's FSDP value at 128, their
    model not being stated), the GPU count where communication starts to bind, and the range
    where model parallelism overtakes FSDP alone."""
    drop = published.value("paper2.per_gpu_throughput_drop_pct") / 100
    onset = published.value("paper2.comm_bound_onset_gpus")
    lo, hi = confront.DROP_RANGE
    band = (published.value("paper2.mp_crossover_gpus_low"),
            published.value("paper2.mp_crossover_gpus_high"))  # fmt: skip
    fig, axes = plt.subplots(2, 3, figsize=(11, 6.8), sharex=True)
    for row, shape in enumerate(confront.SHAPES):
        for k, strategy in enumerate(runs.STRATEGIES):
            c = curves[(shape, strategy)]
            style = dict(color=PALETTE[k % len(PALETTE)], marker="o", ms=3, lw=1.3, label=strategy)
            axes[row, 0].plot(c["gpus"], c["tokens_per_s_per_gpu"], **style)
            axes[row, 1].plot(c["gpus"], c["tokens_per_s"], **style)
            axes[row, 2].plot(c["gpus"], 100 * c["exposed_s"] / c["step_s"], **style)
        fsdp = curves[(shape, "FSDP")]
        at_lo = fsdp["tokens_per_s_per_gpu"][list(fsdp["gpus"]).index(lo)]
        axes[row, 0].plot([lo, hi], [at_lo, at_lo * (1 - drop)], ls="--", marker="D", ms=5,
                          mfc="none", lw=1.0, label=f"reported drop, {lo} to {hi} GPUs",
                          **PUBLISHED_STYLE)  # fmt: skip
        axes[row, 1].axvspan(*band, color="0.85", zorder=0,
                             label="reported: model parallelism wins")  # fmt: skip
        axes[row, 2].axvline(onset, ls="--", lw=1.0, label="reported onset", **PUBLISHED_STYLE)
        name = transformer.shape(shape).name
        axes[row, 0].set_ylabel(f"{name}\ntokens/s per GPU")
        axes[row, 1].set_ylabel("tokens/s, whole cluster")
        axes[row, 2].set_ylabel("exposed communication (% of step)")
        axes[row, 1].set_yscale("log")
    for ax in axes[1]:
        ax.set_xlabel("H100 GPUs")
    for ax in axes.ravel():
        ax.set_xscale("log", base=2)
    handles: dict = {}
    for ax in axes[0]:
        for h, label in zip(*ax.get_legend_handles_labels(), strict=True):
            handles.setdefault(label, h)
    fig.tight_layout(rect=(0, 0.09, 1, 1))
    fig.legend(handles.values(), handles.keys(), loc="lower center", ncol=4, fontsize=8,
               frameon=False)  # fmt: skip
    return fig


def mfu_figure(curves_by_gpu: dict):
    """MFU against GPU count, FSDP alone, for each GPU and shape, with the MFU Fernandez et al.
    report for each GPU in one common configuration, drawn at the configuration the chapter
    compares it with (:data:`dmlimits.measured.confront.COMMON`)."""
    fig, ax = plt.subplots(figsize=(7.2, 4.2))
    k = 0
    shape, _, n_common = confront.COMMON
    for gpu, curves in curves_by_gpu.items():
        for s in confront.SHAPES:
            c = curves[(s, "FSDP")]
            ax.plot(
                c["gpus"],
                100 * c["mfu"],
                marker="o",
                ms=3,
                color=PALETTE[k % len(PALETTE)],
                label=f"{transformer.shape(s).name}, {runs.cluster(gpu).label}",
            )
            if s == shape:
                ax.plot([n_common], [published.value(f"paper2.mfu_{gpu}_pct")], marker="*",
                        ms=11, ls="none", mec="black", color=PALETTE[k % len(PALETTE)],
                        label=f"reported, {runs.cluster(gpu).label}", zorder=5)  # fmt: skip
            k += 1
    ax.set_xscale("log", base=2)
    ax.set_xlabel("GPUs")
    ax.set_ylabel("MFU (%), calibrated, FSDP")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def scatter_figure(cmp: runs.Comparison):
    fig, axes = plt.subplots(1, 2, figsize=(10.5, 4.6), sharey=True)
    labels = [confront.source_label(r) for r in cmp.rows]
    kinds = list(dict.fromkeys(labels))
    for ax, pred, title in (
        (axes[0], cmp.bound, "ideal bound"),
        (axes[1], cmp.calibrated, "calibrated"),
    ):
        for k, kind in enumerate(kinds):
            sel = np.array([lab == kind for lab in labels])
            ax.plot(
                100 * pred[sel],
                100 * cmp.reported[sel],
                "o",
                ms=4,
                alpha=0.8,
                color=PALETTE[k % len(PALETTE)],
                label=kind,
            )
        ax.axline((0, 0), slope=1, color="0.4", lw=0.8, ls="--")  # predicted = reported
        ax.set_xlim(0, 105)
        ax.set_ylim(0, max(70.0, 5 * np.ceil(21 * float(np.nanmax(cmp.reported)))))
        ax.set_xlabel(f"predicted utilization (%), {title}")
        ax.set_title(title)
    axes[0].set_ylabel("reported utilization (%)")
    axes[1].legend(fontsize=7)
    fig.tight_layout()
    return fig


def operations_figure(cases: dict):
    """Each configuration's step split by operation (:func:`dmlimits.measured.runs.operation_split`,
    the calibrated mode), as shares of the step, one bar a configuration."""
    splits = {label: runs.operation_split(cfg) for label, cfg in cases.items()}
    fig, ax = plt.subplots(figsize=(8.4, 0.5 * len(cases) + 1.6))
    labels = list(splits)
    left = np.zeros(len(labels))
    for k, op in enumerate(runs.OPERATIONS):
        share = np.array([100 * splits[lab][op] / sum(splits[lab].values()) for lab in labels])
        ax.barh(labels, share, left=left, color=PALETTE[k % len(PALETTE)], label=op)
        left += share
    ax.invert_yaxis()
    ax.set_axisbelow(True)  # the grid behind the bars
    ax.set_xlim(0, 100)
    ax.set_xlabel("share of the step (%), calibrated mode")
    fig.tight_layout(rect=(0, 0.14, 1, 1))
    fig.legend(*ax.get_legend_handles_labels(), loc="lower center", ncol=3, fontsize=8,
               frameon=False)  # fmt: skip
    return fig


# --- Interactive -------------------------------------------------------------------------------
def scaling_widget(curves_by_gpu: dict) -> Any:
    """The strong-scaling curves of :func:`scaling_figure` for a GPU and a model a reader picks,
    with a mark at a GPU count: tokens per second per GPU of each strategy, as
    :func:`~dmlimits.measured.runs.strong_scaling` gives them (a gap where a configuration does
    not fit the GPUs' memory)."""
    gpus = list(curves_by_gpu)
    counts = [int(n) for n in runs.GPU_COUNTS]
    series = {}
    for i, gpu in enumerate(gpus):
        for j, shape in enumerate(confront.SHAPES):
            series[(i, j)] = [
                {"name": strategy, "x": [int(n) for n in c["gpus"]], "y": c["tokens_per_s_per_gpu"]}
                for strategy in runs.STRATEGIES
                for c in [curves_by_gpu[gpu][(shape, strategy)]]
            ]  # fmt: skip
    controls = [
        {"name": "gpu", "label": "GPU", "values": list(range(len(gpus))),
         "labels": [g.upper() for g in gpus], "initial": 0},
        {"name": "shape", "label": "model", "values": list(range(len(confront.SHAPES))),
         "labels": [transformer.shape(s).name for s in confront.SHAPES], "initial": 0},
        {"name": "gpus", "label": "GPUs", "values": counts,
         "labels": [f"{n:,}" for n in counts], "initial": len(counts) - 1},
    ]  # fmt: skip
    return interactive.curves(
        "strong-scaling", "Strong scaling at a fixed batch: move the GPU, the model and the count",
        controls, "gpus", "GPUs", "tokens per second per GPU", series, x_log=True,
        y_unit="tokens/s",
        summary="An interactive version of the figure above (needs JavaScript).",
    )
