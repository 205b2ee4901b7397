"""What the chapters on measured runs compute: strong scaling at a fixed batch (Fernandez et al.
2024) and the published runs against the bound and the calibrated mode.

Every number these chapters print comes from here or from :mod:`dmlimits.measured.runs`; the
published values they set beside them come from ``published_values.csv``.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import replace
from functools import cache
from typing import Any

import numpy as np

from dmlimits.core import plumbing, published
from dmlimits.measured import memory, nccl, operations, runs, transformer

SHAPES = ("llama2-7b", "llama2-70b")
# "Communication-bound": exposed communication takes at least this share of the step, where
# it starts to show in throughput.
COMM_BOUND_SHARE = 0.1
# The A100 against the H100: one configuration for both (Fernandez et al. do not state theirs):
# the 7B shape with FSDP at the GPU count where the paper places the onset of communication.
#: (model, sharding, GPUs) of the one configuration run on both the A100 and the H100.
COMMON = ("llama2-7b", "FSDP", 128)
DROP_RANGE = (128, 2048)


def scaling(gpu: str = "h100") -> dict:
    """Every shape and strategy of the chapter, calibrated, on one GPU."""
    return {
        (shape, strategy): runs.strong_scaling(shape, gpu, strategy)
        for shape in SHAPES
        for strategy in runs.STRATEGIES
    }


def per_gpu_drop(curve: dict, lo: int = DROP_RANGE[0], hi: int = DROP_RANGE[1]) -> float:
    """Fractional drop of tokens per second per GPU from ``lo`` to ``hi`` GPUs."""
    g = list(curve["gpus"])
    t = curve["tokens_per_s_per_gpu"]
    return float(1 - t[g.index(hi)] / t[g.index(lo)])


def comm_bound_onset(curve: dict, share: float = COMM_BOUND_SHARE) -> float | None:
    """The first GPU count whose exposed communication is at least ``share`` of the step."""
    hit = np.nonzero(curve["exposed_s"] / curve["step_s"] >= share)[0]
    return float(curve["gpus"][hit[0]]) if hit.size else None


def crossover(curves: dict, shape: str) -> tuple[float | None, str | None]:
    """The first GPU count at which some model-parallel strategy's overall throughput beats
    FSDP alone, and that strategy."""
    base = curves[(shape, "FSDP")]
    for i, n in enumerate(base["gpus"]):
        best = max(
            (s for s in runs.STRATEGIES if s != "FSDP"),
            key=lambda s: curves[(shape, s)]["tokens_per_s"][i],
        )
        if curves[(shape, best)]["tokens_per_s"][i] > base["tokens_per_s"][i]:
            return float(n), best
    return None, None


def common_mfu(gpu: str) -> float:
    shape, strategy, n = COMMON
    cfg = runs.scaling_config(shape, gpu, n, strategy)
    return runs.predict(cfg, runs.calibrated()).mfu


# --- Why the onset comes late: one change at a time ------------------------------------------
def _one_nic(c: runs.Cluster) -> runs.Cluster:
    return replace(c, nic=c.nic / c.node_size)


def _slow_rings(c: runs.Cluster) -> runs.Cluster:
    return replace(c, hop_latency=RING_LATENCY_FACTOR * c.hop_latency)


#: How many times the paper's per-step network latency the slow-ring hypothesis takes.
RING_LATENCY_FACTOR = 10


def _lowest_held_out_collective() -> float:
    """The lowest collective efficiency a leave-one-source-out fit of all three factors finds
    (:func:`held_out`; the calibrated mode does not fit it)."""
    return min(g["factors"].collective for g in held_out(fitted=FITS["three"])["by_source"])


#: Each hypothesis changes one thing of the calibrated model: (label, what it changes, the
#: factors changed from the calibrated ones, the cluster changed from the GPU's).  A callable
#: gives its value when the hypotheses are evaluated.
HYPOTHESES = (
    ("the model as calibrated", "nothing", {}, None),
    ("one NIC a GPU", "a collective across nodes gets its own GPU's NIC only, not the node's "
     "NICs pooled", {}, _one_nic),
    ("slow rings", f"each step of a ring all-gather or reduce-scatter across nodes waits "
     f"{RING_LATENCY_FACTOR} times the paper's network latency", {}, _slow_rings),
    ("slow collectives", "the collective efficiency of the least efficient "
     "leave-one-source-out fit of all three factors", {"collective": _lowest_held_out_collective},
     None),
)  # fmt: skip


def hypotheses(gpu: str = "h100") -> list[dict]:
    """FSDP alone in Fernandez et al.'s setting under each of :data:`HYPOTHESES`: the GPU
    count where communication starts to bind (:func:`comm_bound_onset`) and the per-GPU drop
    from 128 to 2048 GPUs (:func:`per_gpu_drop`), for both shapes.  ``factors`` gives the
    factors each was evaluated with."""
    base = runs.calibrated()
    out = []
    for label, change, changed, cluster_fn in HYPOTHESES:
        hw = None if cluster_fn is None else cluster_fn(runs.cluster(gpu))
        factors = {k: (v() if callable(v) else v) for k, v in changed.items()}
        row = {"label": label, "change": change, "factors": replace(base, **factors)}
        for shape in SHAPES:
            c = runs.strong_scaling(shape, gpu, "FSDP", row["factors"], hardware=hw)
            row[shape] = {"onset": comm_bound_onset(c), "drop": per_gpu_drop(c), "curve": c}
        out.append(row)
    return out


def fsdp_variant(shape: str, windows: bool = False, regather: bool = False, gpu: str = "h100"):
    """FSDP alone in Fernandez et al.'s setting (:func:`dmlimits.measured.runs.strong_scaling`'s
    configurations), calibrated, with one or both of two things changed: ``windows``, each
    collective hidden behind its own window of compute (the matmul efficiency fitted afresh for that
    rule: :data:`dmlimits.measured.runs.OVERLAP_WINDOWS`); ``regather``, FSDP's gathers and
    reductions run again for every micro-batch (as a run that holds one layer's weights at a
    time, as this book's memory count has it, must), not once a step as the model counts
    them; with ``windows`` too, each micro-batch's collectives hide behind that micro-batch's
    compute.  Returns the GPU counts, the share of each step that exposed communication takes
    (``NaN`` where the configuration does not fit), the onset (:func:`comm_bound_onset`) and the
    per-GPU drop (:func:`per_gpu_drop`)."""
    factors = runs.calibrate(windows=True) if windows else runs.calibrated()
    gpus, tokens, exposed, step = [], [], [], []
    for n in runs.GPU_COUNTS:
        cfg = runs.scaling_config(shape, gpu, n, "FSDP")
        parts = runs.components(cfg)
        if regather:
            m = cfg.micro_batches
            parts = dict(parts, dp_bw=m * parts["dp_bw"], dp_lat=m * parts["dp_lat"],
                         micro_batches=1.0)  # fmt: skip
        pred = runs.predict(cfg, factors, parts)
        fits = memory.peak(cfg).fits
        gpus.append(float(n))
        tokens.append(pred.tokens_per_s_per_gpu if fits else np.nan)
        exposed.append(pred.exposed_comm_s if fits else np.nan)
        step.append(pred.step_time_s if fits else np.nan)
    curve = {  # as strong_scaling gives it, for comm_bound_onset and per_gpu_drop
        "gpus": np.array(gpus),
        "tokens_per_s_per_gpu": np.array(tokens),
        "exposed_s": np.array(exposed),
        "step_s": np.array(step),
    }
    return {"gpus": curve["gpus"], "share": curve["exposed_s"] / curve["step_s"],
            "onset": comm_bound_onset(curve), "drop": per_gpu_drop(curve)}  # fmt: skip


def drop_for_share(share: float, lo: int = DROP_RANGE[0], hi: int = DROP_RANGE[1]) -> float:
    """The per-GPU throughput drop from ``lo`` to ``hi`` GPUs at a fixed batch when exposed
    communication takes ``share`` of the step at ``lo`` and stays constant per GPU (the least
    drop for a cost that does not shrink; see :func:`largest_share_for_drop`)."""
    if not 0 <= share < 1 or not 0 < lo < hi:
        raise ValueError(f"expected 0 <= share < 1 and 0 < lo < hi, got {share!r}, {lo!r}, {hi!r}")
    return 1 - lo / (lo * (1 - share) + share * hi)


def largest_share_for_drop(drop: float, lo: int = DROP_RANGE[0], hi: int = DROP_RANGE[1]) -> float:
    """The largest share of the step at ``lo`` GPUs that exposed communication can take, given
    a per-GPU throughput drop of ``drop`` from ``lo`` to ``hi`` GPUs at a fixed batch.

    At a fixed batch a step is ``C / n + c(n)``: compute shrinks as one over the GPUs.  If the
    exposed cost ``c`` does not shrink as GPUs are added (this model's FSDP bytes per GPU do
    not; latencies grow), per-GPU throughput ``(B / n) / step`` falls from ``lo`` to ``hi`` by
    at least ``1 - lo / (lo (1 - sigma) + sigma hi)``, where ``sigma = c / step`` at ``lo``,
    with equality for a constant cost.  Solving for ``sigma``: ``lo drop / ((1 - drop) (hi - lo))``.

    The premise is that a step's communication does not fall as GPUs are added: true of this
    model, which counts FSDP's gathers and reductions once a step; not of a run that gathers
    once per micro-batch with fewer micro-batches per GPU at scale."""
    if not 0 <= drop < 1 or not 0 < lo < hi:
        raise ValueError(f"expected 0 <= drop < 1 and 0 < lo < hi, got {drop!r}, {lo!r}, {hi!r}")
    if drop >= 1 - lo / hi:
        raise ValueError(
            f"a drop of {drop:.1%} from {lo} to {hi} GPUs is more than a cost that takes the "
            f"whole step can give ({1 - lo / hi:.1%}): expected a smaller drop"
        )
    return lo * drop / ((1 - drop) * (hi - lo))


def hypotheses_markdown(rows: list[dict]) -> str:
    names = {s: s.replace("llama2-", "").upper() for s in SHAPES}
    head = " | ".join(f"onset, {names[s]} | drop, {names[s]}" for s in SHAPES)
    lines = [f"| Hypothesis | What it changes | {head} |", "|---|---|" + "---|" * 2 * len(SHAPES)]
    for r in rows:
        cells = []
        for s in SHAPES:
            onset = r[s]["onset"]
            cells += ["beyond 2,048" if onset is None else f"{onset:,.0f}", f"{r[s]['drop']:.0%}"]
        change = r["change"]
        if r["factors"].collective != runs.calibrated().collective:
            change += f" ({r['factors'].collective:.2g})"
        lines.append(f"| {r['label']} | {change} | " + " | ".join(cells) + " |")
    return "\n".join(lines).replace("%", "\\%")


def fit_summary() -> dict:
    f = nccl.fit()
    m = nccl.measurements()
    return {
        "alpha_us": f.alpha * 1e6,
        "bus_GBps": f.bus_bandwidth / nccl.GB,
        "median_err_pct": 100 * f.median_abs_error,
        "max_err_pct": 100 * f.max_abs_error,
        "n_points": len(m.busbw),
        "node_counts": sorted({int(n) for n in m.nodes}),
        "half_small_MiB": f.half_peak_message(min(m.nodes)) / 2**20,
        "half_large_MiB": f.half_peak_message(max(m.nodes)) / 2**20,
        # The fit's bus bandwidth over the node's network ports (one a GPU).
        "nic_efficiency": runs.measured_collective_efficiency(),
        # The largest message measured: its bus bandwidths and the fit's error there (the fit
        # weighs every point's relative error alike, and most points are smaller messages).
        **_largest_message(f, m),
    }


def _largest_message(f: nccl.Fit, m: nccl.Measurements) -> dict:
    at = m.message_bytes == m.message_bytes.max()
    errors = f.relative_errors[at]
    return {
        "largest_GiB": float(m.message_bytes.max()) / 2**30,
        "largest_lo_GBps": float(m.busbw[at].min()) / nccl.GB,
        "largest_hi_GBps": float(m.busbw[at].max()) / nccl.GB,
        "largest_err_lo_pct": -100 * float(errors.max()),
        "largest_err_hi_pct": -100 * float(errors.min()),
        "largest_all_below": bool(np.all(errors < 0)),
    }


# --- The published runs against the model ----------------------------------------------------
def source_label(row: dict) -> str:
    src = row.get("source", "")
    for key, label in (
        ("Narayanan et al. 2021 (SC21) Table 1", "Megatron-LM weak scaling"),
        ("Narayanan et al. 2021 Table 2", "Megatron-LM against ZeRO-3"),
        ("Korthikanti", "Megatron-LM, sequence parallelism"),
        ("torchtitan", "torchtitan"),
        ("Ultra-Scale", "Ultra-Scale Playbook"),
    ):
        if key in src:
            return label
    return "other"


def comparison() -> runs.Comparison:
    return runs.compare(runs.dev_rows(), runs.calibrated())


def summary(cmp: runs.Comparison) -> dict:
    rows = runs.dev_rows()
    err = np.abs(cmp.errors) * 100
    return {
        "n_rows": len(rows),
        "n_modelled": cmp.n,
        "n_other_metric": len(rows) - cmp.n,
        "other_metrics": ", ".join(
            sorted({r["metric"] for r in rows} - {r["metric"] for r in cmp.rows})
        ),
        "n_below": int(cmp.below_bound.sum()),
        "share_below": float(cmp.below_bound.mean()),
        "n_exceptions": int((~cmp.below_bound).sum()),
        "median_err": float(np.median(err)),
        "mean_err": float(np.mean(err)),
        "within5": float(np.mean(err <= 5)),
        "median_bias": float(np.median(cmp.errors) * 100),
        "median_ratio_to_bound": float(np.median(cmp.reported / cmp.bound)),
        "min_ratio_to_bound": float(np.min(cmp.reported / cmp.bound)),
    }


def by_source(cmp: runs.Comparison) -> list[dict]:
    groups: dict[str, list[int]] = {}
    for i, row in enumerate(cmp.rows):
        groups.setdefault(source_label(row), []).append(i)
    out = []
    for label, idx in groups.items():
        idx = np.array(idx)
        out.append(
            {
                "source": label,
                "rows": len(idx),
                "reported": float(np.median(cmp.reported[idx])),
                "bound": float(np.median(cmp.bound[idx])),
                "calibrated": float(np.median(cmp.calibrated[idx])),
                "median_err": float(np.median(np.abs(cmp.errors[idx])) * 100),
            }
        )
    return out


def by_source_markdown(cmp: runs.Comparison) -> str:
    lines = [
        "| Source | Rows | Reported (median) | Bound (median) | Calibrated (median) | "
        "Median error (points) |",
        "|---|---|---|---|---|---|",
    ]
    for g in by_source(cmp):
        lines.append(
            f"| {g['source']} | {g['rows']} | {g['reported']:.1%} | {g['bound']:.1%} | "
            f"{g['calibrated']:.1%} | {g['median_err']:.1f} |"
        )
    return "\n".join(lines).replace("%", "\\%")


def worst_markdown(cmp: runs.Comparison, n: int = 8) -> str:
    order = np.argsort(-np.abs(cmp.errors))[:n]
    lines = [
        "| Run | GPUs | Parallelism | Metric | Reported | Calibrated | Bound |",
        "|---|---|---|---|---|---|---|",
    ]
    for i in order:
        r, c = cmp.rows[i], cmp.interpretations[i].config
        par = f"TP {c.tp}, PP {c.pp}, DP {c.dp}" + (f", CP {c.cp}" if c.cp > 1 else "")
        lines.append(
            f"| {r['model']} ({source_label(r)}) | {c.n_gpus} | {par}, {c.sharding} | "
            f"{r['metric']} | {cmp.reported[i]:.1%} | {cmp.calibrated[i]:.1%} | "
            f"{cmp.bound[i]:.1%} |"
        )
    return "\n".join(lines).replace("%", "\\%")


def exceptions_markdown(cmp: runs.Comparison) -> str:
    idx = np.nonzero(~cmp.below_bound)[0]
    if not idx.size:
        return "No row reports more than its bound."
    lines = ["| Run | GPUs | Metric | Reported | Bound | Counting |", "|---|---|---|---|---|---|"]
    for i in idx:
        r = cmp.rows[i]
        lines.append(
            f"| {r['model']} ({source_label(r)}) | {r['n_gpus']} | {r['metric']} | "
            f"{cmp.reported[i]:.1%} | {cmp.bound[i]:.1%} | "
            f"{cmp.interpretations[i].counting} |"
        )
    return "\n".join(lines).replace("%", "\\%")


# --- Out of sample: each source predicted by the factors fitted without it ---------------------
def step_time_errors(reported: np.ndarray, predicted: np.ndarray) -> np.ndarray:
    """Relative error of the predicted step time, positive when the prediction is slower than
    the run.  Utilization is the step's FLOP time at peak over the step time, so the ratio of
    step times is the inverse ratio of utilizations: ``reported / predicted - 1``."""
    return np.asarray(reported) / np.asarray(predicted) - 1


def family_label(row: dict) -> str:
    """The framework family of a row: its source (:func:`source_label`), with Megatron-LM's
    three sources one family."""
    label = source_label(row)
    return "Megatron-LM" if label.startswith("Megatron-LM") else label


def held_out(
    rows=None,
    fitted: tuple[str, ...] = runs.FITTED,
    label=source_label,
    operations: bool = True,
    windows: bool = False,
) -> dict:
    """Leave-one-source-out validation of the calibrated mode.

    For each source of ``label`` (:func:`source_label`; :func:`family_label` leaves a whole
    framework out), the factors are fitted (:func:`dmlimits.measured.runs.calibrate`) on the
    rows of every other source and predict that source's rows, which the fit never saw.
    ``fitted``: the factors each fit searches, and ``operations`` and ``windows`` how it times
    a step and hides its collectives (:func:`dmlimits.measured.runs.calibrate`).
    Returns ``by_source`` (one dict a source: its rows, the factors fitted without it, and the
    median absolute MFU error and median absolute step-time error in sample and held out), the
    pooled median errors over every modelled row, each row predicted by the fit that left its
    source out, ``per_row``: each modelled row's reported, in-sample and held-out
    utilization, and whether it runs across nodes, and ``factors``: the fit on every row."""
    rows = runs.dev_rows() if rows is None else tuple(rows)
    default = rows is runs.dev_rows() and fitted == runs.FITTED and operations and not windows
    every = (
        runs.calibrated()
        if default
        else runs.calibrate(rows, fitted=fitted, operations=operations, windows=windows)
    )
    labels = [label(r) for r in rows]
    out, pooled_in, pooled_out, step_in, step_out = [], [], [], [], []
    per_row: dict[str, list] = {
        "reported": [], "in_sample": [], "held_out": [], "multi_node": [], "regime": [],
    }  # fmt: skip
    for label in dict.fromkeys(labels):
        mine = [r for r, lab in zip(rows, labels, strict=True) if lab == label]
        rest = [r for r, lab in zip(rows, labels, strict=True) if lab != label]
        inside = runs.compare(mine, every)
        if not inside.n:
            continue
        fit = runs.calibrate(rest, fitted=fitted, operations=operations, windows=windows)
        outside = runs.compare(mine, fit)
        s_in = step_time_errors(inside.reported, inside.calibrated)
        s_out = step_time_errors(outside.reported, outside.calibrated)
        pooled_in.append(np.abs(inside.errors))
        pooled_out.append(np.abs(outside.errors))
        step_in.append(np.abs(s_in))
        step_out.append(np.abs(s_out))
        per_row["reported"].append(inside.reported)
        per_row["in_sample"].append(inside.calibrated)
        per_row["held_out"].append(outside.calibrated)
        per_row["multi_node"].append(
            np.array(
                [it.config.n_gpus > it.config.cluster.node_size for it in inside.interpretations]
            )
        )
        per_row["regime"].append(
            np.array(
                [
                    regime(it.config, r.get("framework", ""))
                    for r, it in zip(inside.rows, inside.interpretations, strict=True)
                ],
                dtype=object,
            )
        )
        out.append(
            {
                "source": label,
                "rows": inside.n,
                "factors": fit,
                "in_sample_points": inside.median_abs_error_points,
                "held_out_points": outside.median_abs_error_points,
                "in_sample_step": float(np.median(np.abs(s_in))),
                "held_out_step": float(np.median(np.abs(s_out))),
                "held_out_bias_points": float(np.median(outside.errors) * 100),
            }
        )
    if not out:
        raise ValueError("no row with a throughput metric: nothing to validate")
    return {
        "by_source": out,
        "in_sample_points": float(np.median(np.concatenate(pooled_in)) * 100),
        "held_out_points": float(np.median(np.concatenate(pooled_out)) * 100),
        "in_sample_step": float(np.median(np.concatenate(step_in))),
        "held_out_step": float(np.median(np.concatenate(step_out))),
        "per_row": {k: np.concatenate(v) for k, v in per_row.items()},
        "factors": every,
    }


#: The two calibrations :func:`fits_compared` sets side by side: the matmul efficiency alone
#: (the calibrated mode's) and all three factors.
FITS = {"one": runs.FITTED, "three": ("matmul", "collective", "overlap")}


def fits_compared(rows=None) -> dict[str, dict]:
    """For each calibration of :data:`FITS`, :func:`held_out` and its step-time errors split
    into multi-node and single-node runs (``step_multi``, ``step_single``: median absolute
    error, each row predicted by the fit that left its source out), and the range of each
    factor over the fits that left one source out (``ranges``: factor -> (lowest, highest))."""
    out = {}
    for key, fitted in FITS.items():
        result = held_out(rows, fitted)
        pr = result["per_row"]
        multi = pr["multi_node"].astype(bool)
        step = np.abs(step_time_errors(pr["reported"], pr["held_out"]))
        factors = [g["factors"] for g in result["by_source"]]
        result["step_multi"] = float(np.median(step[multi])) if multi.any() else float("nan")
        result["step_single"] = float(np.median(step[~multi])) if (~multi).any() else float("nan")
        result["ranges"] = {
            name: (min(getattr(f, name) for f in factors), max(getattr(f, name) for f in factors))
            for name in FITS["three"]
        }
        out[key] = result
    return out


def fits_compared_markdown(result: dict[str, dict]) -> str:
    """The table of :func:`fits_compared`."""
    lines = [
        "| Fitted on the runs | Matmul efficiency | Collective efficiency | Overlap | "
        "MFU error in sample (points) | MFU error held out (points) | "
        "Step-time error held out, across nodes | within a node |",
        "|---|---|---|---|---|---|---|---|",
    ]
    names = {"one": "matmul efficiency alone", "three": "all three factors"}
    for key, r in result.items():

        def cell(name: str, fmt: str, r: dict = r) -> str:
            lo, hi = r["ranges"][name]
            value = format(getattr(r["factors"], name), fmt)
            return value if lo == hi else f"{value} ({lo:{fmt}} to {hi:{fmt}} held out)"

        lines.append(
            f"| {names[key]} | {cell('matmul', '.3g')} | {cell('collective', '.3g')} | "
            f"{cell('overlap', '.2g')} | {r['in_sample_points']:.1f} | "
            f"{r['held_out_points']:.1f} | {r['step_multi']:.0%} | {r['step_single']:.0%} |"
        )
    return "\n".join(lines).replace("%", "\\%")


def outside_split(
    rows=None,
    fitted: tuple[str, ...] = runs.FITTED,
    operations: bool = True,
    windows: bool = False,
    factors: runs.Factors | None = None,
) -> dict:
    """The calibrated mode on published runs outside the development split
    (:func:`dmlimits.measured.runs.holdout_rows`, which no fit reads): the median absolute MFU
    error, its median sign, and the median absolute step-time error on multi-node and
    single-node runs.  ``fitted``: the factors fitted on the development rows, and
    ``operations`` and ``windows`` how the step is timed and its collectives hidden
    (:func:`dmlimits.measured.runs.calibrate`); or ``factors``, already fitted so."""
    if factors is None:
        factors = (
            runs.calibrated()
            if fitted == runs.FITTED and operations and not windows
            else runs.calibrate(
                runs.dev_rows(), fitted=fitted, operations=operations, windows=windows
            )
        )
    cmp = runs.compare(runs.holdout_rows() if rows is None else rows, factors)
    if not cmp.n:
        raise ValueError("no row with a throughput metric outside the development split")
    step = np.abs(step_time_errors(cmp.reported, cmp.calibrated))
    multi = np.array([it.config.n_gpus > it.config.cluster.node_size for it in cmp.interpretations])
    return {
        "comparison": cmp,
        "rows": cmp.n,
        "mfu_points": cmp.median_abs_error_points,
        "bias_points": float(np.median(cmp.errors) * 100),
        "below_bound": float(cmp.below_bound.mean()),
        "multi_node_rows": int(multi.sum()),
        "step_multi_node": float(np.median(step[multi])) if multi.any() else float("nan"),
        "step_single_node": float(np.median(step[~multi])) if (~multi).any() else float("nan"),
        "max_gpus": max(it.config.n_gpus for it in cmp.interpretations),
    }


def communication_cannot_explain(cmp: runs.Comparison) -> dict:
    """Whether a prediction that is too slow could be mended by communication alone.  For each
    row of ``cmp`` (the calibrated mode, which times each operation): the share of the
    predicted step that is the GPU's own work (every part of
    :func:`dmlimits.measured.runs.operation_split` but the communication in series), and the
    speed-up the run shows over the prediction (predicted step time over the reported one).
    Making every collective free shortens the predicted step by at most the inverse of that
    share; a row whose speed-up exceeds it is too slow in its computation, whatever the
    network does."""
    factors = runs.calibrated()
    own = []
    for it in cmp.interpretations:
        split = runs.operation_split(it.config, factors)
        own.append(1 - split["communication in series"] / sum(split.values()))
    own_arr = np.array(own)
    needed_arr = 1 + step_time_errors(cmp.reported, cmp.calibrated)
    too_slow = needed_arr > 1
    beyond = too_slow & (needed_arr > 1 / own_arr)
    return {
        "own_share": own_arr,
        "speedup": needed_arr,
        "too_slow": int(too_slow.sum()),
        "beyond_communication": int(beyond.sum()),
        "own_share_min": float(own_arr.min()),
        "own_share_median": float(np.median(own_arr)),
    }


#: The mixtures of experts among the shapes, with the key of their published sizes in
#: ``published_values.csv``.
MOE_PRESETS = {"mixtral-8x7b": "mixtral", "deepseek-v3": "deepseek_v3"}


def moe_presets_markdown(seq_len: int) -> str:
    """The mixtures of experts' parameters and active parameters (matmul weights a token
    meets: its model FLOP without attention's core, over six, at ``seq_len``) as counted,
    beside the published ones."""
    lines = [
        "| Model | Experts | Parameters, counted (billions) | published | "
        "Active, counted | published |",
        "|---|---|---|---|---|---|",
    ]
    for key, pub in MOE_PRESETS.items():
        sh = transformer.SHAPES[key]
        active = (sh.model_flop_per_token(seq_len) - sh.attention_flop_per_token(seq_len)) / 6
        experts = f"{sh.experts} ({sh.top_k} a token" + (
            f", {sh.shared_experts} shared)" if sh.shared_experts else ")"
        )
        lines.append(
            f"| {sh.name} | {experts} | {sh.params / 1e9:.1f} | "
            f"{published.value(pub + '.total_params') / 1e9:.0f} | {active / 1e9:.1f} | "
            f"{published.value(pub + '.active_params') / 1e9:.0f} |"
        )
    return "\n".join(lines)


def operation_cases() -> dict[str, runs.Config]:
    """The configurations whose steps the chapter splits by operation: Llama 2 7B with FSDP
    on a node and on the largest cluster of Fernandez et al.'s setting, and there with
    pipeline parallelism of four too; Llama 2 70B with FSDP and tensor parallelism of four at
    the largest; and GPT-3 350M (Brown et al. 2020) on one
    node of A100s, data parallel, four sequences of 2,048 tokens a GPU."""
    lo, hi = runs.GPU_COUNTS[0], runs.GPU_COUNTS[-1]
    small = runs.Config(
        shape=transformer.SHAPES["gpt3-350m"], cluster=runs.cluster("a100"), n_gpus=8,
        global_batch_tokens=8 * 4 * 2048, seq_len=2048, dp=8, mbs=4, sharding="ddp",
    )  # fmt: skip
    return {
        f"Llama 2 7B, FSDP, {lo} H100s": runs.scaling_config("llama2-7b", "h100", lo, "FSDP"),
        f"Llama 2 7B, FSDP, {hi:,} H100s": runs.scaling_config("llama2-7b", "h100", hi, "FSDP"),
        f"Llama 2 7B, FSDP + PP 4, {hi:,} H100s": runs.scaling_config(
            "llama2-7b", "h100", hi, "FSDP + PP 4"
        ),
        f"Llama 2 70B, FSDP + TP 4, {hi:,} H100s": runs.scaling_config(
            "llama2-70b", "h100", hi, "FSDP + TP 4"
        ),
        f"{small.shape.name}, DDP, {small.n_gpus} A100s": small,
    }


#: The two ways of timing a step :func:`operations_compared` sets side by side: operation by
#: operation (:mod:`dmlimits.measured.operations`, the calibrated mode's) and as the step's FLOP
#: at one matmul efficiency (the simpler step model).
STEP_MODELS = {"operations": True, "flop": False}


def step_rule(rows, operations: bool, windows: bool = False) -> dict:
    """One way of timing a step, with the one fitted factor: the fitted matmul efficiency, the
    MFU and step-time errors in sample and with one source left out (:func:`held_out`, each
    source's errors under ``by_source``), the worst framework family left out
    (:func:`family_label`), and the errors on MosaicML's runs and NVIDIA's, outside the
    development split (:func:`outside_split`)."""
    loso = held_out(rows, operations=operations, windows=windows)
    families = held_out(rows, label=family_label, operations=operations, windows=windows)
    worst = max(families["by_source"], key=lambda g: g["held_out_points"])
    fit = loso["factors"]  # on every development row, as outside_split would fit
    outside = outside_split(operations=operations, windows=windows, factors=fit)
    nemo = outside_split(runs.nemo_rows(), operations=operations, windows=windows, factors=fit)
    return {
        "matmul": loso["factors"].matmul,
        "in_sample_points": loso["in_sample_points"],
        "held_out_points": loso["held_out_points"],
        "held_out_step": loso["held_out_step"],
        "by_source": {g["source"]: g["held_out_points"] for g in loso["by_source"]},
        "worst_family": worst["source"],
        "worst_family_points": worst["held_out_points"],
        "outside_points": outside["mfu_points"],
        "outside_bias_points": outside["bias_points"],
        "outside_step_multi": outside["step_multi_node"],
        "outside_step_single": outside["step_single_node"],
        "nemo_points": nemo["mfu_points"],
        "nemo_step_multi": nemo["step_multi_node"],
    }


def operations_compared(rows=None) -> dict[str, dict]:
    """For each way of timing a step (:data:`STEP_MODELS`), one fitted factor each: the
    figures of :func:`step_rule`."""
    return {key: step_rule(rows, operations) for key, operations in STEP_MODELS.items()}


#: The two ways of hiding collectives :func:`overlap_compared` sets side by side: none (the
#: calibrated mode's overlap of 0: every collective adds to the step) and each overlappable
#: collective behind its own window of compute (:data:`dmlimits.measured.runs.OVERLAP_WINDOWS`).
OVERLAP_RULES = {"none": False, "windows": True}


def overlap_compared(rows=None) -> dict[str, dict]:
    """For each way of hiding collectives (:data:`OVERLAP_RULES`), the step timed operation by
    operation and the matmul efficiency fitted afresh: the figures of :func:`step_rule`."""
    return {key: step_rule(rows, True, windows) for key, windows in OVERLAP_RULES.items()}


def stages_compared(rows=None) -> dict[str, dict]:
    """For each placement of the output layer and the loss
    (:data:`dmlimits.measured.operations.PLACEMENTS`), the step timed operation by operation and
    the matmul efficiency fitted afresh: the figures of :func:`step_rule`."""
    out = {}
    for rule in operations.PLACEMENTS:
        with operations.placement(rule):  # runs.calibrated() refits inside it
            out[rule] = step_rule(rows, True)
    return out


def attention_rules_compared(rows=None) -> dict[str, dict]:
    """For each way of timing attention's core where the GPU has kernel measurements
    (:data:`dmlimits.measured.operations.ATTENTION_RULES`), the step timed operation by
    operation and the matmul efficiency fitted afresh: the figures of :func:`step_rule`."""
    out = {}
    for rule in operations.ATTENTION_RULES:
        with operations.attention_rule(rule):  # runs.calibrated() refits inside it
            out[rule] = step_rule(rows, True)
    return out


def without_tp_overlap(rows) -> list[dict]:
    """``rows`` with their tensor-parallel collectives in series whatever their framework does
    (each row's ``tp_comm_overlap`` set to false): what the overlap of
    :data:`dmlimits.measured.runs.TP_OVERLAP_FRAMEWORKS` changes."""
    return [dict(r, tp_comm_overlap="false") for r in rows]


def stage_imbalance(rows=None) -> dict:
    """The busiest pipeline stage's compute over an equal share of the step's
    (:func:`dmlimits.measured.operations.busiest_stage_excess`) on the pipelined development
    rows whose framework splits its stages by compute cost (nanotron's), as nanotron splits
    them and as Megatron-LM's default split would (where their layers divide evenly over the
    stages): the row count, the least and greatest excess of each, and whether nanotron's
    busiest stage is in the first half of every pipeline."""
    nanotron, megatron, early = [], [], True
    for row in runs.dev_rows() if rows is None else rows:
        cfg = runs.interpret(row).config
        if cfg is None or cfg.pp == 1 or cfg.stages != "nanotron":
            continue
        nanotron.append(operations.busiest_stage_excess(cfg, "nanotron"))
        early &= int(operations.stage_times(cfg, "nanotron").argmax()) < cfg.pp / 2
        if cfg.shape.layers % cfg.pp == 0:
            megatron.append(operations.busiest_stage_excess(cfg, "last"))
    if not nanotron:
        raise ValueError("stage_imbalance: no pipelined row is split by nanotron")
    return {
        "rows": len(nanotron),
        "nanotron": (min(nanotron), max(nanotron)),
        "megatron_rows": len(megatron),
        "megatron": (min(megatron), max(megatron)) if megatron else (np.nan, np.nan),
        "busiest_early": early,
    }


def attention_sensitivity(values: dict[str, float], outside_rows=None) -> dict[str, float]:
    """The calibrated mode refitted with attention's core at ``values`` (cluster name -> share of
    peak, :func:`dmlimits.measured.operations.attention_utilizations`): its fitted matmul
    efficiency, its pooled MFU error with one source left out, and its MFU error on runs
    outside the development split (``outside_rows``; MosaicML's by default)."""
    with operations.attention_utilizations(values):
        loso = held_out()  # runs.calibrated() refits inside the block
        fit = runs.calibrate(runs.dev_rows())
        rows = runs.holdout_rows() if outside_rows is None else outside_rows
        outside = runs.compare(rows, fit)
    return {
        "matmul": fit.matmul,
        "held_out_points": loso["held_out_points"],
        "outside_points": outside.median_abs_error_points,
    }


def faster_hopper_attention(rows, utilization: float | None = None) -> dict:
    """:func:`outside_split` of ``rows`` with attention's core on the Hopper GPUs (those the model
    runs at FlashAttention-2's H100 figure) at ``utilization`` of the 16-bit peak,
    FlashAttention-3's published forward figure by default, and the development rows' fit
    unchanged.  Not the calibrated mode: a test of how much of NVIDIA's H100 runs' error a
    faster attention kernel than the development rows' could explain (their Transformer
    Engine prefers cuDNN's fused attention on Hopper, for which the book has no published
    training figure)."""
    flash2 = published.value("flash3.h100_flash2_utilization")
    faster = published.value("flash3.h100_utilization") if utilization is None else utilization
    hopper = {name: faster for name, value in operations.ATTENTION_UTILIZATION.items()
              if value == flash2}  # fmt: skip
    fit = runs.calibrated()  # fitted outside the block, with the development rows' attention
    with operations.attention_utilizations(hopper):
        return outside_split(rows=rows, factors=fit)


#: The columns' names of the two comparisons' tables.
RULE_NAMES = {
    "operations": "operation by operation",
    "flop": "the step's FLOP at one efficiency",
    "none": "no overlap (the calibrated mode)",
    "windows": "each collective behind its own window",
    "even": "equal shares of every stage",
    "placed": "where each framework puts them (the calibrated mode)",
    "last": "on the last stage, every run",
}


def operations_compared_markdown(result: dict[str, dict], nvidia: bool = False) -> str:
    """The table of :func:`operations_compared`, :func:`overlap_compared` or
    :func:`stages_compared`: one row a
    measure, one column a way of timing the step (:data:`RULE_NAMES`); ``nvidia``: also the
    signed error on MosaicML's runs and the errors on NVIDIA's."""
    names = RULE_NAMES
    rows = (
        ("fitted matmul efficiency", lambda r: f"{r['matmul']:.3g}"),
        ("MFU error in sample (points)", lambda r: f"{r['in_sample_points']:.1f}"),
        ("MFU error, one source held out", lambda r: f"{r['held_out_points']:.1f}"),
        ("MFU error, worst family held out",
         lambda r: f"{r['worst_family_points']:.1f} ({r['worst_family']})"),
        ("MFU error, MosaicML's runs (never fitted)", lambda r: f"{r['outside_points']:.1f}"),
        ("step-time error, one source held out", lambda r: f"{r['held_out_step']:.0%}"),
        ("step-time error, MosaicML across nodes", lambda r: f"{r['outside_step_multi']:.0%}"),
        ("step-time error, MosaicML within a node", lambda r: f"{r['outside_step_single']:.0%}"),
    )  # fmt: skip
    if nvidia:
        rows += (
            ("MFU error on MosaicML's runs, signed (points)",
             lambda r: f"{r['outside_bias_points']:+.1f}"),
            ("MFU error, NVIDIA's runs (never fitted)", lambda r: f"{r['nemo_points']:.1f}"),
            ("step-time error, NVIDIA's across nodes", lambda r: f"{r['nemo_step_multi']:.0%}"),
        )  # fmt: skip
    lines = [
        "| Step timed | " + " | ".join(names[k] for k in result) + " |",
        "|---|" + "---|" * len(result),
    ]
    for label, cell in rows:
        lines.append(f"| {label} | " + " | ".join(cell(r) for r in result.values()) + " |")
    return "\n".join(lines).replace("%", "\\%")


def held_out_markdown(result: dict) -> str:
    lines = [
        "| Source | Rows | Factors without it (matmul, collective, overlap) | "
        "MFU error in sample (points) | MFU error held out (points) | "
        "Step-time error in sample | Step-time error held out |",
        "|---|---|---|---|---|---|---|",
    ]
    for g in result["by_source"]:
        f = g["factors"]
        lines.append(
            f"| {g['source']} | {g['rows']} | {f.matmul:.3g}, {f.collective:.3g}, "
            f"{f.overlap:.2g} | {g['in_sample_points']:.1f} | {g['held_out_points']:.1f} | "
            f"{g['in_sample_step']:.0%} | {g['held_out_step']:.0%} |"
        )
    return "\n".join(lines).replace("%", "\\%")


def playbook_ratios(cmp: runs.Comparison) -> dict[tuple, float]:
    """For each Playbook configuration that reports both, the ratio of the MFU the Playbook
    reports to the MFU its tokens per second give under this book's FLOP count, by (model,
    GPUs, tp, pp, dp)."""
    mfu, tok = {}, {}
    for i, r in enumerate(cmp.rows):
        if source_label(r) != "Ultra-Scale Playbook":
            continue
        key = (r["model"], r["n_gpus"], r["tp"], r["pp"], r["dp"])
        (mfu if r["metric"] == "MFU" else tok)[key] = cmp.reported[i]
    return {k: float(mfu[k] / tok[k]) for k in mfu if k in tok}


def playbook_agreement(cmp: runs.Comparison) -> float:
    """Median of :func:`playbook_ratios` over the Playbook's configurations."""
    return float(np.median(list(playbook_ratios(cmp).values())))


def playbook_spread(cmp: runs.Comparison) -> dict:
    """How far :func:`playbook_ratios` moves within one model: a FLOP count per token gives
    every layout of a model one ratio.  ``model``: the model whose ratio moves most;
    ``lo``/``hi``: its lowest and highest ratio; ``min``/``max``: over every configuration."""
    by_model: dict[str, list[float]] = {}
    ratios = playbook_ratios(cmp)
    for key, ratio in ratios.items():
        by_model.setdefault(key[0], []).append(ratio)
    model = max(by_model, key=lambda m: max(by_model[m]) / min(by_model[m]))
    return {
        "model": model,
        "lo": min(by_model[model]),
        "hi": max(by_model[model]),
        "min": min(ratios.values()),
        "max": max(ratios.values()),
    }


def counting_counts(cmp: runs.Comparison) -> Counter:
    return Counter(it.counting for it in cmp.interpretations)


def published_peak_errors() -> list[tuple[dict, float]]:
    """Each published row that reports a peak (torchtitan's) with the relative error of the
    predicted peak against it."""
    out = []
    for r in runs.dev_rows():
        if r["metric"] != "peak_memory":
            continue
        unit = {"GiB": 2**30, "GB": 1e9}[r["unit"]]
        predicted = memory.peak(runs.interpret(r).config).total
        out.append((r, predicted / (float(r["value"]) * unit) - 1))
    return out


def outside_the_fit() -> dict[str, Any]:
    """The memory check on the book's own runs, none of which its constants were fitted on:
    MosaicML's MPT runs (``published_runs_holdout.csv``; all ran), how many it calls fitting,
    and how many it would with the Playbook's activation factor; and the published rows that
    report a peak (torchtitan's, :func:`published_peak_errors`), the median relative error of
    the predicted peak, absolute and signed, and the notes of the rows it misses most (by
    absolute error, the worst first)."""
    mpt = [runs.interpret(r).config for r in runs.holdout_rows()]
    peaks = published_peak_errors()
    err = np.array([e for _, e in peaks])
    worst = sorted(peaks, key=lambda p: -abs(p[1]))
    return {
        "holdout_runs": len(mpt),
        "holdout_called_fitting": sum(memory.peak(c).fits for c in mpt),
        "holdout_called_fitting_with_playbook_factor": sum(
            memory.peak(c, factor=memory.PLAYBOOK_ACTIVATION_FACTOR).fits for c in mpt
        ),
        "peak_rows": len(err),
        "peak_median_abs_error": float(np.median(np.abs(err))),
        "peak_median_signed_error": float(np.median(err)),
        "peak_worst": [(r["notes"], e) for r, e in worst],
    }


# --- The error bar of a prediction (issue #55, item 3) -------------------------------------

#: The regimes a prediction's error bar is read from, each named by four facts of the run:
#: the GPU (the cluster's name), the framework family (the row's ``framework`` column, or
#: ``unstated``), the scale (:data:`SCALES`) and the sequence length (:data:`SEQUENCES`).  A
#: regime is the set of development rows that share those facts.
REGIME_FACTS = ("gpu", "family", "scale", "sequence")
#: Scale bins, by GPUs (the cluster's node size sets "one node"): upper bounds in nodes, with
#: the name of each bin.  Communication across nodes, then at many nodes, changes what sets the
#: step.
SCALES = ((1, "one node"), (32, "2-32 nodes"), (float("inf"), "more than 32 nodes"))
#: Sequence bins: upper bounds in tokens and their names.  Attention's share of the step grows
#: with the sequence.
SEQUENCES = ((2048, "up to 2K"), (8192, "2K-8K"), (float("inf"), "over 8K"))
#: The key under which :func:`regime_intervals` keeps the intervals of a framework family no
#: development row has: the residuals of every development row predicted by the fit that left
#: its whole family out (:func:`held_out` with :func:`family_label`), pooled over the families
#: (each GPU's development rows are one family's, whose spread says little of another's).
NEW_FAMILY = "new family"
#: Fewest leave-one-source-out residuals a regime needs for its own interval; a regime with
#: fewer borrows the interval of the coarser regime that drops its last fact (sequence, then
#: scale, then family), and the pooled residuals of every row when even the GPU has too few.
MIN_REGIME_ROWS = 8
#: The quantiles of the held-out step-time ratio (measured over predicted) that bound the
#: interval: a central 80% interval, the issue's coverage target.
INTERVAL_QUANTILES = (0.10, 0.90)
#: The share of runs the interval promises to hold: the central share between those quantiles.
INTERVAL_SHARE = INTERVAL_QUANTILES[1] - INTERVAL_QUANTILES[0]
#: The columns :func:`with_intervals` adds to ``predict --runs``'s output.
INTERVAL_COLUMNS = (
    "predicted_step_time_low_s",
    "predicted_step_time_high_s",
    "interval_regime",
    "interval_rows",
    "outside_validated_regimes",
)


def regime(cfg: runs.Config, framework: str = "") -> tuple[str, str, str, str]:
    """The regime of a configuration (:data:`REGIME_FACTS`): its GPU, framework family (the
    row's ``framework``, ``unstated`` where empty), scale and sequence-length bins."""
    nodes = cfg.n_gpus / cfg.cluster.node_size
    scale = next(name for top, name in SCALES if nodes <= top)
    sequence = next(name for top, name in SEQUENCES if cfg.seq_len <= top)
    return (cfg.cluster.name, (framework or "").strip() or "unstated", scale, sequence)


def regime_levels(key: tuple[str, ...]) -> list[tuple[str, ...]]:
    """The regime and its coarser ones, finest first: each drops the last fact kept."""
    return [key[:n] for n in range(len(key), 0, -1)] + [()]


def regime_intervals() -> dict[tuple[str, ...], tuple[float, float, int]]:
    """For every regime (and each coarser prefix of its facts, down to ``()``: every row), the
    :data:`INTERVAL_QUANTILES` of the development rows' held-out ratio of measured to predicted
    step time, each row predicted by the fit that left its source out (:func:`held_out`), and
    the number of rows; and under :data:`NEW_FAMILY` the same for every row predicted by the
    fit that left its whole family out.  Only regimes with
    :data:`MIN_REGIME_ROWS` rows or more are kept.  Computed once for each state of the
    single-GPU models, as :func:`dmlimits.measured.runs.calibrated` is."""
    return validation(operations.utilization_state())[0]


@cache
def validation(_state: tuple) -> tuple[dict[tuple[str, ...], tuple[float, float, int]], tuple]:
    """:func:`regime_intervals`' table and the regimes of the development rows (each a tuple of
    :data:`REGIME_FACTS`), for one state of the single-GPU models
    (:func:`dmlimits.measured.operations.utilization_state`)."""
    per_row = held_out()["per_row"]
    # Utilization is FLOP time over step time: measured / predicted step time is the
    # predicted over the reported utilization.
    ratio = np.asarray(per_row["held_out"]) / np.asarray(per_row["reported"])
    groups: dict[tuple[str, ...], list[float]] = {}
    for key, r in zip(per_row["regime"], ratio, strict=True):
        for level in regime_levels(tuple(key)):
            groups.setdefault(level, []).append(float(r))
    lo, hi = INTERVAL_QUANTILES
    table = {}
    for level, values in groups.items():
        if len(values) >= MIN_REGIME_ROWS or level == ():
            q = np.quantile(values, [lo, hi])
            table[level] = (float(q[0]), float(q[1]), len(values))
    # A framework family no development row has: every row predicted by the fit that left its
    # whole family out, pooled over the families.
    per_family = held_out(label=family_label)["per_row"]
    ratio = np.asarray(per_family["held_out"]) / np.asarray(per_family["reported"])
    q = np.quantile(ratio, [lo, hi])
    table[(NEW_FAMILY,)] = (float(q[0]), float(q[1]), len(ratio))
    return table, tuple(sorted({tuple(k) for k in per_row["regime"]}))


#: The files whose rows set how much the development rows' intervals are widened
#: (:func:`widening`): runs no fit reads, from sources and framework families the development
#: split lacks (MosaicML's MPT runs, NVIDIA's Megatron-Bridge benchmarks).
CALIBRATION_ROWS = {"MosaicML": runs.holdout_rows, "NVIDIA": runs.nemo_rows}


def _bar(cfg: runs.Config, framework: str) -> tuple[float, float, int, str, bool]:
    """The unwidened interval of ``cfg``'s regime: low and high ratios of measured to predicted
    step time, its rows, its name and whether some development row shares the regime."""
    table, validated_regimes = validation(operations.utilization_state())
    key = regime(cfg, framework)
    families = {k[1] for k in validated_regimes}
    # A row that does not name its family is given its GPU's interval (over every family); a
    # row of a family no development row has, the interval of a family left out of the fit.
    if key[1] == "unstated":
        levels = [key[:1], ()]
    elif key[1] not in families:
        # Over every family: a GPU's development rows are one family's, not a new one's.
        levels = [(NEW_FAMILY,)]
    else:
        levels = regime_levels(key)
    level = next(k for k in levels if k in table)
    lo, hi, n = table[level]

    validated = is_validated(key)
    if level == (NEW_FAMILY,):
        named = "a family left out, every row"
    else:
        named = ", ".join(f"{f}={v}" for f, v in zip(REGIME_FACTS, level, strict=False))
    return lo, hi, n, named or "every row", validated


def _log_centre_half(lo: float, hi: float) -> tuple[float, float]:
    """The log-space centre and half-width of the interval ``lo`` to ``hi``."""
    return (np.log(lo) + np.log(hi)) / 2, (np.log(hi) - np.log(lo)) / 2


def is_validated(key: tuple[str, ...]) -> bool:
    """Whether some development row shares the regime ``key`` (:func:`regime`'s four facts); a
    family left unstated matches any, so the other three facts decide."""
    rows_regimes = validation(operations.utilization_state())[1]
    return any(
        all(a == b or (f == "family" and b == "unstated")
            for f, a, b in zip(REGIME_FACTS, k, key, strict=True))
        for k in rows_regimes
    )  # fmt: skip


def widen(lo: float, hi: float, k: float) -> tuple[float, float]:
    """The interval ``lo`` to ``hi`` (ratios of measured to predicted step time) with its
    half-width in log space multiplied by ``k`` about its log-space centre: the same interval
    for ``k = 1``, a wider one about the same geometric middle for ``k > 1``."""
    centre, half = _log_centre_half(lo, hi)
    return float(np.exp(centre - k * half)), float(np.exp(centre + k * half))


def _scores(rows) -> np.ndarray:
    """Each row's distance from the centre of its unwidened interval in log space, in
    half-widths: at most 1 where the interval holds the measured step time."""
    cmp = runs.compare(rows, runs.calibrated())
    out = []
    for row, it, rep, cal in zip(cmp.rows, cmp.interpretations, cmp.reported, cmp.calibrated,
                                 strict=True):  # fmt: skip
        lo, hi, *_ = _bar(it.config, runs.normalize(row)[0].get("framework", ""))
        centre, half = _log_centre_half(lo, hi)
        # Measured over predicted step time is predicted over reported utilization.
        out.append(abs(np.log(cal / rep) - centre) / half)
    return np.asarray(out)


def widening() -> dict[str, Any]:
    """How much every interval is widened, and why (a split-conformal calibration, after
    Vovk et al. 2005 and Lei et al. 2018): the development rows' held-out residuals come from
    sources like each other, and runs from other sources lie further out.  For each file of
    :data:`CALIBRATION_ROWS`, the factor on its rows' unwidened half-widths (each row's
    distance from its interval's log-space centre, in half-widths) that holds the central share
    of :data:`INTERVAL_QUANTILES` of a further row from the same source (the conformal rank of
    its rows' scores); the widening is the largest over the files (so that each such source is
    held as the quantiles promise), and at least 1.  Returns ``factor`` and each file's
    ``by_source`` factor and rows.  Those files' coverage is in sample for the widening; only
    runs outside every file here test it.  Their rows are of families no development row has,
    so all of them take the interval of a family left out (:data:`NEW_FAMILY`); the factor
    they set widens every regime's.  Computed once for each state of the single-GPU
    models."""
    return _widening(operations.utilization_state())


@cache
def _widening(_state: tuple) -> dict[str, Any]:
    share = INTERVAL_SHARE
    by_source = {}
    for name, rows in CALIBRATION_ROWS.items():
        s = np.sort(_scores(rows()))
        s = s[np.isfinite(s)]
        # The conformal rank: the ceil((n + 1) q)-th smallest of n scores, which holds a
        # further row from the same source with probability at least q (the largest where
        # that rank passes n).
        rank = min(len(s), math.ceil((len(s) + 1) * share - 1e-9))
        by_source[name] = {"factor": float(s[rank - 1]), "rows": len(s)}
    factor = max([1.0] + [g["factor"] for g in by_source.values()])
    return {"factor": factor, "by_source": by_source}


def interval(cfg: runs.Config, step_time_s: float, framework: str = "") -> dict:
    """The error bar of a predicted step time: the low and high step times of the finest
    regime of ``cfg`` with enough held-out rows (:func:`regime_intervals`), widened by
    :func:`widening`, that regime's facts and rows, and whether the configuration lies outside
    every regime the model was validated on (no development row shares its GPU, family, scale
    and sequence bins; a family left unstated matches any).  Raises ValueError for a step time
    that is not a positive number of seconds."""
    if not step_time_s > 0:
        raise ValueError(f"step_time_s must be a positive time in seconds, got {step_time_s!r}")
    lo, hi, n, named, validated = _bar(cfg, framework)
    lo, hi = widen(lo, hi, widening()["factor"])
    return {
        "predicted_step_time_low_s": step_time_s * lo,
        "predicted_step_time_high_s": step_time_s * hi,
        "interval_regime": named,
        "interval_rows": n,
        "outside_validated_regimes": not validated,
    }


def with_intervals(out_rows: list[dict]) -> list[dict]:
    """``predict --runs``'s rows (:func:`dmlimits.measured.runs.predict_rows`) with
    :data:`INTERVAL_COLUMNS` added where a step time was predicted (empty where not)."""
    result = []
    for row in out_rows:
        extra = dict.fromkeys(INTERVAL_COLUMNS, "")
        step = row.get("predicted_step_time_s")
        if step not in (None, "") and not row.get("prediction_error"):
            try:
                cfg = runs.interpret(row).config
            except ValueError:
                cfg = None
            if cfg is not None:
                framework = runs.normalize(row)[0].get("framework", "")
                bar = interval(cfg, float(step), framework)
                extra = {
                    **bar,
                    "predicted_step_time_low_s": f"{bar['predicted_step_time_low_s']:.6g}",
                    "predicted_step_time_high_s": f"{bar['predicted_step_time_high_s']:.6g}",
                    "outside_validated_regimes": str(bar["outside_validated_regimes"]).lower(),
                }
        result.append({**row, **extra})
    return result


def interval_rows(rows) -> list[dict[str, Any]]:
    """Each of ``rows`` with a throughput, predicted by the calibrated mode fitted on the
    development rows: its configuration and framework, reported and predicted utilization,
    its interval (:func:`interval`), whether the measured step lies inside it and whether it
    is flagged as outside every validated regime."""
    cmp = runs.compare(rows, runs.calibrated())
    out = []
    for row, it, rep, cal in zip(cmp.rows, cmp.interpretations, cmp.reported, cmp.calibrated,
                                 strict=True):  # fmt: skip
        framework = runs.normalize(row)[0].get("framework", "")
        bar = interval(it.config, 1.0, framework)
        # Measured over predicted step time is predicted over reported utilization.
        ratio = cal / rep
        inside = bar["predicted_step_time_low_s"] <= ratio <= bar["predicted_step_time_high_s"]
        out.append({"config": it.config, "framework": framework, "reported": rep,
                    "predicted": cal, "bar": bar, "inside": bool(inside),
                    "flagged": bool(bar["outside_validated_regimes"])})  # fmt: skip
    return out


def interval_coverage(rows) -> dict:
    """How often a set of rows' measured step time lies inside its predicted interval
    (:func:`interval`), the model fitted on the development rows only; by regime too.  Returns
    ``rows``, ``inside`` (the share) and ``by_regime`` (regime name: rows and share)."""
    hits: dict[str, list[bool]] = {}
    for r in interval_rows(rows):
        hits.setdefault(r["bar"]["interval_regime"], []).append(r["inside"])
    every = [h for v in hits.values() for h in v]
    return {
        "rows": len(every),
        "inside": float(np.mean(every)) if every else float("nan"),
        "by_regime": {k: {"rows": len(v), "inside": float(np.mean(v))} for k, v in hits.items()},
    }


def outside_by_regime(rows) -> dict[str, dict]:
    """Rows no fit reads, predicted by the calibrated mode fitted on every development row: by
    regime (:func:`regime`, named by its facts), the rows, the median absolute step-time error
    (:func:`step_time_errors`), the median absolute MFU error in points and the share whose
    measured step lies inside its interval (:func:`interval`), and how many are flagged as
    outside every validated regime."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in interval_rows(rows):
        name = ", ".join(regime(r["config"], r["framework"]))
        groups.setdefault(name, []).append(r)
    return {
        name: {
            "rows": len(g),
            "step": float(np.median([abs(float(step_time_errors(r["reported"], r["predicted"])))
                                     for r in g])),
            "mfu_points": float(np.median([abs(r["predicted"] - r["reported"]) * 100
                                           for r in g])),
            "inside": float(np.mean([r["inside"] for r in g])),
            "flagged": sum(r["flagged"] for r in g),
        }
        for name, g in sorted(groups.items())
    }  # fmt: skip


def fingerprint() -> str:
    """A digest of what the calibrated mode predicts: its fitted factors, the predicted
    utilization of every row of the project's run files (development, MosaicML's, NVIDIA's,
    vTrain's) to six significant figures, the intervals' table and their widening, and the step
    time and interval of every shape preset in a few layouts (:func:`fingerprint_probes`).  A
    score recorded with it stands for the model that gave it: a change of those predictions,
    of a preset or of a parallelism's cost in those layouts changes it."""
    factors = vars(runs.calibrated())
    parts = [";".join(f"{k}={v:.6g}" for k, v in sorted(factors.items()))]
    for rows in (runs.dev_rows(), runs.holdout_rows(), runs.nemo_rows(), runs.vtrain_rows()):
        cmp = runs.compare(rows, runs.calibrated())
        parts.append(",".join(f"{x:.6g}" for x in cmp.calibrated))
    table = regime_intervals()
    parts.append(";".join(f"{k}:{v[0]:.6g},{v[1]:.6g},{v[2]}" for k, v in sorted(table.items())))
    parts.append(f"{widening()['factor']:.6g}")
    for cfg in fingerprint_probes():
        step = runs.predict(cfg, runs.calibrated()).step_time_s
        bar = interval(cfg, step)
        low, high = bar["predicted_step_time_low_s"], bar["predicted_step_time_high_s"]
        parts.append(f"{step:.6g},{low:.6g},{high:.6g},{bar['interval_regime']}")
    return plumbing.digest(*parts)


#: The layouts :func:`fingerprint_probes` times every preset in: GPUs, tensor, pipeline and
#: context parallelism, on the H100 and A100 clusters, so that a change of any shape, of any
#: parallelism's cost or of the interval rules moves the fingerprint.
PROBE_LAYOUTS = ((8, 1, 1, 1), (64, 8, 1, 1), (256, 4, 4, 2), (1024, 8, 4, 8))


def fingerprint_probes() -> list[runs.Config]:
    """Every shape preset in each of :data:`PROBE_LAYOUTS` (data parallelism over the rest;
    128 sequences of 8,192 tokens for each data-parallel replica, ZeRO-1, one sequence a
    micro-batch), on each probed cluster."""
    out = []
    for gpu in ("h100", "a100"):
        for shape in transformer.SHAPES.values():
            for n, tp, pp, cp in PROBE_LAYOUTS:
                out.append(runs.Config(
                    shape=shape, cluster=runs.cluster(gpu), n_gpus=n, seq_len=8192,
                    global_batch_tokens=8192 * 128 * n // (tp * pp * cp), tp=tp, pp=pp,
                    dp=n // (tp * pp * cp), cp=cp, sharding="zero1", mbs=1,
                ))  # fmt: skip
    return out


#: The two causes of small shapes' time the calibrated mode models (:func:`small_shapes`), each
#: as the change to a configuration that takes it away.
SMALL_SHAPE_CAUSES = {
    "unfused attention": {"attention_kernel": "flash"},
    "host-side floor": {"host_floor_s": 0.0},
}


def small_shapes_rows(rows=None) -> dict[str, Any]:
    """vTrain's single-node runs (the project's d_model 1024 half, ``rows`` by default), row by
    row: ``measured_s`` (the iteration time), ``mbs`` (sequences a micro-batch), ``layers``,
    ``tp`` and, for each variant of :func:`small_shapes` (``both``, each cause taken away,
    ``neither``), the predicted step time in seconds, as arrays."""
    rows = runs.vtrain_rows() if rows is None else rows
    factors = runs.calibrated()
    its = [runs.interpret(r) for r in rows]
    variants = {"both": {}, **{f"without {k}": v for k, v in SMALL_SHAPE_CAUSES.items()}}
    variants["neither"] = {
        k: v for change in SMALL_SHAPE_CAUSES.values() for k, v in change.items()
    }
    out: dict[str, Any] = {
        "measured_s": np.array(
            [runs.ideal_time(it.config, it.counting) / it.reported for it in its]
        ),
        "mbs": np.array([it.config.mbs for it in its]),
        "layers": np.array([it.config.shape.layers for it in its]),
        "tp": np.array([it.config.tp for it in its]),
    }
    for name, change in variants.items():
        out[name] = np.array(
            [runs.predict(replace(it.config, **change), factors).step_time_s for it in its]
        )
    return out


def small_shapes(rows=None) -> dict[str, Any]:
    """How vTrain's single-node runs (the project's d_model 1024 half, ``rows`` by default) are
    predicted with both causes of their time that the FLOP count alone misses, with each taken
    away, and with neither (:data:`SMALL_SHAPE_CAUSES`): the median absolute relative error of
    the step time and its median signed error (positive: predicted slower), pooled and by
    sequences a micro-batch, and the worst ratio of the two step times either way.  In
    sample: the host-side floor is measured on these rows
    (:func:`dmlimits.measured.runs.host_floor`)."""
    per_row = small_shapes_rows(rows)
    measured, mbs = per_row["measured_s"], per_row["mbs"]
    out: dict[str, Any] = {"rows": len(measured)}
    for name in ("both", *(f"without {k}" for k in SMALL_SHAPE_CAUSES), "neither"):
        err = per_row[name] / measured - 1
        ratio = np.maximum(measured / per_row[name], per_row[name] / measured)
        out[name] = {
            "median_abs": float(np.median(np.abs(err))),
            "median_signed": float(np.median(err)),
            "worst_ratio": float(ratio.max()),
            "by_micro_batch": {
                int(b): float(np.median(np.abs(err[mbs == b]))) for b in sorted(set(mbs.tolist()))
            },
        }
    return out


def intervals_markdown() -> str:
    """The error bars of :func:`regime_intervals` as a Markdown table: each full regime with its
    own interval, then each GPU's and every row's (which a regime with too few rows borrows;
    the levels between repeat them here), with the held-out rows and the range of the measured
    over the predicted step time that holds the central share :data:`INTERVAL_QUANTILES` of
    them, and the interval a prediction is given from them (widened by :func:`widening`)."""
    table = regime_intervals()
    factor = widening()["factor"]
    lines = [
        "| regime | held-out rows | measured / predicted step time, held out | interval |",
        "|---|---:|---|---|",
    ]
    shown = [k for k in table if len(k) in (len(REGIME_FACTS), 1, 0)]
    for key in sorted(shown, key=lambda k: (-len(k), k)):
        lo, hi, n = table[key]
        named = ", ".join(str(v) for v in key) if key else "every row"
        wlo, whi = widen(lo, hi, factor)
        lines.append(f"| {named} | {n} | {lo:.2f} to {hi:.2f} | {wlo:.2f} to {whi:.2f} |")
    return "\n".join(lines)


def errors_by_regime(rows=None) -> dict[str, dict]:
    """The development rows' (``rows``) median absolute step-time error by regime
    (:func:`regime`, named by its facts), in sample and with each row's source left out of the
    fit (:func:`held_out`), with the rows of each."""
    per_row = held_out(rows)["per_row"]
    rep = np.asarray(per_row["reported"])
    s_in = np.abs(step_time_errors(rep, per_row["in_sample"]))
    s_out = np.abs(step_time_errors(rep, per_row["held_out"]))
    names = np.array([", ".join(k) for k in per_row["regime"]])
    return {
        name: {
            "rows": int((names == name).sum()),
            "in_sample": float(np.median(s_in[names == name])),
            "held_out": float(np.median(s_out[names == name])),
        }
        for name in sorted(set(names.tolist()))
    }


def floor_shares(cfg: runs.Config, sizes=(1, 2, 4, 8, 16, 32)) -> dict[int, float]:
    """For each micro-batch of ``sizes`` sequences (as many micro-batches a step as ``cfg``
    has), the share of the calibrated step that is the framework's overhead: the time its
    host-side floor adds beyond the GPU's work on the blocks (``Config.host_floor_s``).  Where
    it reaches 0 the GPU, not the host, sets the pace."""
    factors = runs.calibrated()
    out = {}
    for b in sizes:
        if b < 1 or int(b) != b:
            raise ValueError(f"micro-batch sizes must be whole numbers of sequences, got {b!r}")
        tokens = cfg.micro_batches * cfg.dp * b * cfg.seq_len
        p = runs.predict(replace(cfg, mbs=int(b), global_batch_tokens=tokens), factors)
        out[int(b)] = p.breakdown["framework overhead"] / p.step_time_s
    return out
