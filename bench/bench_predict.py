"""How well ``python -m dmlimits predict`` predicts real runs: the figures of issue #14's targets.

Printed, never asserted (the tests assert what must hold; this measures how far from the targets
the model is):

* **Coverage**: the share of rows on GPUs that are modelled (no ``prediction_error``), in the
  project's published-runs file and, when ``../shared`` is beside the project, in the Ultra-Scale
  Playbook's benchmark file.
* **MFU**: the calibrated mode's median absolute error in sample (fitted on every development
  row) and held out (each source predicted by the factors fitted without it,
  :func:`dmlimits.measured.confront.held_out`), pooled and by source.
* **Step time**: the median absolute relative error of the predicted step, on multi-node and on
  single-node rows, in sample and held out.
* **Outside the development split**: the same errors on MosaicML's MPT runs
  (``published_runs_holdout.csv``) and on NVIDIA's Megatron-Bridge benchmarks
  (``published_runs_nemo.csv``: FP8, Blackwell GPUs, a mixture of experts), which no fit reads,
  each file alone and the two pooled.
* **Small shapes on one node**: vTrain's d_model 1024 runs with both modelled causes of their
  time (an unfused attention, the framework's host-side floor), with each taken away and with
  neither (:func:`dmlimits.measured.confront.small_shapes`; in sample for the floor).
* **Attention and tensor parallelism**: attention at one published share of the peak (the
  calibrated mode's) against FlashAttention-2's measured throughput at each run's shape (a test);
  NVIDIA's runs with and without the tensor-parallel overlap their recipes set.
* **Two step models**: the calibrated mode's (each operation timed,
  :mod:`dmlimits.measured.operations`) and the step's FLOP at one matmul efficiency, with the
  same errors (:func:`dmlimits.measured.confront.operations_compared`).
* **Two overlap rules**: none (the calibrated mode's) and each collective hidden behind its
  own window of compute (:func:`dmlimits.measured.confront.overlap_compared`).
* **Three placements of the output layer and the loss**: equal shares of every pipeline
  stage, where each framework puts them (the calibrated mode's; uneven splits timed by the
  schedule) and on the last stage for every run
  (:func:`dmlimits.measured.confront.stages_compared`).
* **Peak memory**: on the benchmark file (when present), the median relative error of the
  predicted peak against the recorded one, and how often the predicted fit agrees with whether
  the run ran or crashed out of memory, in sample (the activation factor and overhead are
  fitted on that file) and with each model size held out of the fit; on the published rows
  that report a peak memory (torchtitan's), the same error.

    .venv/bin/python bench/bench_predict.py [--json]
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

import numpy as np
from dmlimits.book import measured_figures
from dmlimits.core import hardware, published
from dmlimits.measured import confront, memory, operations, runs, transformer

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT.parent / "shared" / "data" / "hf_ultrascale_benchmarks.csv"
GIB = 2**30
#: The lockbox (issue #55): published runs set aside before the model was tuned on them, one
#: file a source in this folder (:data:`LOCKBOX_FILES`), read by nothing but :func:`lockbox`
#: here, and only when ``--lockbox`` (once) or, once it is scored, ``--spent`` is asked for.
LOCKBOX = ROOT / "lib" / "dmlimits" / "data" / "lockbox"
#: The lockbox's files: every one is scored, none may be left out of :data:`LOCKBOX_DIGEST`.
LOCKBOX_FILES = "published_runs_lockbox*.csv"
#: Each lockbox file's sha256 as recorded with it, a ``<sha256>  <path from the repository>``
#: line a file: a lockbox with a file changed, added or missing is not scored.
LOCKBOX_DIGEST = ROOT / "bench" / "lockbox.sha256"

#: The lockbox's score, written once by ``--lockbox`` with the commit and the fingerprint of
#: the model that gave it (:func:`dmlimits.measured.confront.fingerprint`); ``--lockbox``
#: refuses to run again once it exists: a lockbox is spent when scored (its README).
LOCKBOX_SCORES = published.data_path(measured_figures.LOCKBOX_SCORES)

#: Issue #14's targets.
TARGETS = {
    "step_multi_node_held_out": 0.15,
    "step_single_node_held_out": 0.25,
    "mfu_held_out_points": 4.0,
    "mfu_per_source_held_out_points": 7.0,
    "memory_median_error": 0.15,
    "oom_agreement": 0.90,
    "coverage": 0.95,
    # Issue #55's: the share of the lockbox's rows inside their predicted interval, the share
    # the interval's quantiles promise.
    "interval_coverage_lockbox": confront.INTERVAL_SHARE,
}


def _figures(result: dict) -> dict:
    """The figures of :func:`dmlimits.measured.confront.outside_split`, without its comparison."""
    return _without(result, "comparison")


def _without(d: dict, key: str) -> dict:
    return {k: v for k, v in d.items() if k != key}


#: The figures of :func:`measure` the lockbox's record keeps beside its own.
DEVELOPMENT_FIGURES = ("mfu", "step_time", "by_regime", "interval_coverage", "interval_widening",
                       "outside_pooled")  # fmt: skip


def _coverage(rows) -> tuple[int, int]:
    out = runs.predict_rows(rows)
    return sum(1 for r in out if not r.get("prediction_error")), len(out)


def _memory_on_bench(rows) -> dict:
    configs = [runs.interpret(r).config for r in rows]
    # The column is in GB; nan where a run recorded no peak.
    measured = np.array([float(r["gpu_memory_gb"]) * 1e9 if r.get("gpu_memory_gb") else np.nan
                         for r in rows])  # fmt: skip
    ran = np.array([r["status"] == "ok" for r in rows])
    peaks = [memory.peak(c) for c in configs]
    agree = sum(p.fits == ok for p, ok in zip(peaks, ran, strict=True))
    with_peak = ran & np.isfinite(measured)
    err = np.array([p.total for p in peaks])[with_peak] / measured[with_peak] - 1
    return {
        "runs": len(rows),
        "with_memory": len(err),
        "median_abs_error": float(np.median(np.abs(err))),
        "median_signed_error": float(np.median(err)),
        "oom_agreement": agree / len(rows),
        "held_out_by_model": memory.held_out(configs, measured, ran, [r["model"] for r in rows]),
    }


def _memory_published() -> dict:
    out = confront.outside_the_fit()
    return {"rows": out["peak_rows"], "median_abs_error": out["peak_median_abs_error"],
            "median_signed_error": out["peak_median_signed_error"]}  # fmt: skip


def measure() -> dict:
    rows = runs.dev_rows()
    out: dict = {}
    ok, n = _coverage(rows)
    out["coverage_published"] = {"modelled": ok, "rows": n, "share": ok / n}
    loso = confront.held_out()
    out["mfu"] = {
        "in_sample_points": loso["in_sample_points"],
        "held_out_points": loso["held_out_points"],
        "by_source": {
            g["source"]: {
                "rows": g["rows"],
                "in_sample": g["in_sample_points"],
                "held_out": g["held_out_points"],
            }
            for g in loso["by_source"]
        },
    }
    per_row = loso["per_row"]
    # The target is per framework family: each family left out of the fit in turn.
    by_family = confront.held_out(label=confront.family_label)["by_source"]
    out["mfu"]["by_family"] = {
        g["source"]: {"rows": g["rows"], "held_out": g["held_out_points"]} for g in by_family
    }
    multi = per_row["multi_node"]
    step_held = np.abs(confront.step_time_errors(per_row["reported"], per_row["held_out"]))
    step_in = np.abs(confront.step_time_errors(per_row["reported"], per_row["in_sample"]))
    out["step_time"] = {
        name: {
            "rows": int(sel.sum()),
            "in_sample": float(np.median(step_in[sel])),
            "held_out": float(np.median(step_held[sel])),
        }
        for name, sel in (("multi_node", multi), ("single_node", ~multi))
    }
    outside = confront.outside_split()
    out["outside_split"] = _figures(outside)
    outside = confront.outside_the_fit()
    out["outside_split"]["called_fitting"] = (
        outside["holdout_called_fitting"] / outside["holdout_runs"]
    )
    ok, n = _coverage(runs.holdout_rows())
    out["coverage_holdout"] = {"modelled": ok, "rows": n, "share": ok / n}
    nemo = confront.outside_split(rows=runs.nemo_rows())
    out["nemo"] = _figures(nemo)
    comm = confront.communication_cannot_explain(nemo["comparison"])
    out["nemo"].update({k: v for k, v in comm.items() if not isinstance(v, np.ndarray)})
    # The paper's matmul model on Blackwell (no tensor memory): the extension these rows led to.
    paper = hardware.PAPER_TILES
    with operations.device_values("b200", paper), operations.device_values("gb200-nvl72", paper):
        before = confront.outside_split(rows=runs.nemo_rows())
    out["nemo_paper_tiles"] = _figures(before)
    # DeepSeek-V3's attention counted as plain attention: the other change these rows led to.
    with transformer.preset_values("deepseek-v3", **transformer.PLAIN_ATTENTION):
        before = confront.outside_split(rows=runs.nemo_rows())
    out["nemo_plain_attention"] = _figures(before)
    with (operations.device_values("b200", paper), operations.device_values("gb200-nvl72", paper),
          transformer.preset_values("deepseek-v3", **transformer.PLAIN_ATTENTION)):  # fmt: skip
        before = confront.outside_split(rows=runs.nemo_rows())
    out["nemo_neither"] = _figures(before)
    # A test, not the calibrated mode: attention on the H100s at FlashAttention-3's figure.
    out["nemo_faster_hopper"] = _figures(confront.faster_hopper_attention(runs.nemo_rows()))
    ok, n = _coverage(runs.nemo_rows())
    out["coverage_nemo"] = {"modelled": ok, "rows": n, "share": ok / n}
    # Every published run outside the development split, both files together.
    pooled = confront.outside_split(rows=(*runs.holdout_rows(), *runs.nemo_rows()))
    out["outside_pooled"] = _figures(pooled)
    out["memory_published"] = _memory_published()
    # Step-time errors by regime, and how often the intervals hold the measured step.
    out["by_regime"] = confront.errors_by_regime()
    out["interval_coverage"] = {
        name: {k: v for k, v in confront.interval_coverage(rows).items() if k != "by_regime"}
        for name, rows in (("development", runs.dev_rows()), ("MosaicML", runs.holdout_rows()),
                           ("NVIDIA", runs.nemo_rows()))
    }  # fmt: skip
    # The intervals are widened to hold each of those two files' rows (so their coverage above
    # is in sample for the widening): the factor and each file's.
    out["interval_widening"] = confront.widening()
    # Small shapes on one node: vTrain's d_model 1024 half (in sample for the host floor).
    out["small_shapes"] = confront.small_shapes()
    # The calibrated mode times operations; the step's FLOP at one efficiency, for comparison.
    out["step_models"] = confront.operations_compared()
    # No overlap (the calibrated mode's) against each collective behind its own window.
    out["overlap_rules"] = confront.overlap_compared()
    # The output layer and the loss in equal shares, as placed (the calibrated mode's) or last.
    out["stage_rules"] = confront.stages_compared()
    # Attention at one published share of the peak (the calibrated mode's) or at
    # FlashAttention-2's measured throughput for the run's shape (a test).
    out["attention_rules"] = confront.attention_rules_compared()
    # NVIDIA's runs with tensor parallelism in series, whatever their framework does.
    out["nemo_serial_tp"] = _figures(
        confront.outside_split(rows=confront.without_tp_overlap(runs.nemo_rows()))
    )
    if BENCH.is_file():
        with BENCH.open() as fh:
            bench = list(csv.DictReader(fh))
        ok, n = _coverage(bench)
        out["coverage_benchmark_file"] = {"modelled": ok, "rows": n, "share": ok / n}
        out["memory_benchmark_file"] = _memory_on_bench(bench)
        # Every run of the sweep that ran, not only the best of each cell (the published
        # file's rows): the calibrated mode as fitted on the published rows.
        cmp = runs.compare(bench, runs.calibrated())
        out["mfu_benchmark_file"] = {
            "rows": cmp.n,
            "median_abs_error_points": cmp.median_abs_error_points,
            "median_signed_error_points": float(np.median(cmp.errors) * 100),
        }
    return out


CHANGED = "HAS CHANGED since: these are the scored model's figures, not the present one's"


def side_by_side() -> list[str]:
    """The lockbox's recorded score (:data:`LOCKBOX_SCORES`) beside the development rows' in
    sample and held out, overall and by regime, as the chapter prints them
    (:mod:`dmlimits.book.measured_figures`), and whether the model still gives the predictions
    that were scored; one line saying so when it is not scored."""
    rec = measured_figures.lockbox_record()
    if rec is None:
        return ["", "lockbox: not scored yet (bench/bench_predict.py --lockbox, once)"]
    unchanged = measured_figures.model_unchanged(rec)
    state = "still gives those predictions" if unchanged else CHANGED
    return [
        "",
        f"in sample, leave one source out and lockbox (scored once, at commit "
        f"{rec['commit'][:10]} on {rec['scored_at'][:10]}; the model {state}):",
        measured_figures.side_by_side_markdown(rec),
        "",
        "the lockbox by regime:",
        measured_figures.lockbox_regimes_markdown(rec),
    ]


def _verdict(value: float, target: float, higher_is_better: bool = False) -> str:
    met = value >= target if higher_is_better else value <= target
    return "met" if met else "missed"


def report(m: dict) -> str:
    t = TARGETS
    lines = ["Predicting real runs (issue #14's targets)", ""]
    for key in ("coverage_published", "coverage_holdout", "coverage_nemo",
                "coverage_benchmark_file"):  # fmt: skip
        if key in m:
            c = m[key]
            lines.append(
                f"coverage, {key.split('_', 1)[1].replace('_', ' ')}: {c['modelled']} of "
                f"{c['rows']} rows ({c['share']:.1%}; target {t['coverage']:.0%}: "
                f"{_verdict(c['share'], t['coverage'], True)})"
            )
    mfu = m["mfu"]
    lines += [
        "",
        f"MFU, median absolute error: in sample {mfu['in_sample_points']:.1f} points; held out "
        f"(leave one source out) {mfu['held_out_points']:.1f} points "
        f"(target {t['mfu_held_out_points']:g}: "
        f"{_verdict(mfu['held_out_points'], t['mfu_held_out_points'])})",
    ]
    per_source = t["mfu_per_source_held_out_points"]
    for source, g in mfu["by_source"].items():
        lines.append(
            f"  {source:36s} {g['rows']:3d} rows  in sample {g['in_sample']:5.1f}  held out "
            f"{g['held_out']:5.1f} points ({_verdict(g['held_out'], per_source)} against "
            f"{per_source:g})"
        )
    for fam, g in mfu["by_family"].items():
        lines.append(
            f"  family {fam:29s} {g['rows']:3d} rows  held out {g['held_out']:5.1f} points "
            f"({_verdict(g['held_out'], per_source)} against {per_source:g}; the family left out "
            f"of the fit)"
        )
    o = m["outside_split"]
    lines += [
        "",
        f"outside the development split (MosaicML's MPT runs, {o['rows']} rows, never fitted):",
        f"  MFU median absolute error {o['mfu_points']:.1f} points (signed "
        f"{o['bias_points']:+.1f}; target {t['mfu_held_out_points']:g}: "
        f"{_verdict(o['mfu_points'], t['mfu_held_out_points'])}; per family "
        f"{t['mfu_per_source_held_out_points']:g}: "
        f"{_verdict(o['mfu_points'], t['mfu_per_source_held_out_points'])})",
        f"  step time, multi-node ({o['multi_node_rows']} rows): {o['step_multi_node']:.0%} "
        f"(target {t['step_multi_node_held_out']:.0%}: "
        f"{_verdict(o['step_multi_node'], t['step_multi_node_held_out'])}); single-node: "
        f"{o['step_single_node']:.0%} (target {t['step_single_node_held_out']:.0%}: "
        f"{_verdict(o['step_single_node'], t['step_single_node_held_out'])})",
        f"  these runs ran; the memory check calls {o['called_fitting']:.1%} of them fitting "
        f"(target for the out-of-memory call {t['oom_agreement']:.0%}: "
        f"{_verdict(o['called_fitting'], t['oom_agreement'], True)})",
    ]
    nm = m["nemo"]
    lines += [
        f"outside the development split (NVIDIA's Megatron-Bridge benchmarks, {nm['rows']} rows: "
        "FP8, B200 and GB200, DeepSeek-V3; never fitted, but they led the book to add "
        "Blackwell's tensor memory to the matmul model, DeepSeek-V3's latent attention to "
        "its shape and the tensor-parallel overlap of Megatron-Bridge's recipes):",
        f"  MFU median absolute error {nm['mfu_points']:.2f} points (signed "
        f"{nm['bias_points']:+.1f}; target {t['mfu_held_out_points']:g}: "
        f"{_verdict(nm['mfu_points'], t['mfu_held_out_points'])}; per family "
        f"{t['mfu_per_source_held_out_points']:g}: "
        f"{_verdict(nm['mfu_points'], t['mfu_per_source_held_out_points'])})",
        f"  step time, multi-node ({nm['multi_node_rows']} rows): {nm['step_multi_node']:.0%} "
        f"(target {t['step_multi_node_held_out']:.0%}: "
        f"{_verdict(nm['step_multi_node'], t['step_multi_node_held_out'])}); single-node: "
        f"{nm['step_single_node']:.0%} (target {t['step_single_node_held_out']:.0%}: "
        f"{_verdict(nm['step_single_node'], t['step_single_node_held_out'])})",
        f"  predicted too slow: {nm['too_slow']} rows, {nm['beyond_communication']} of them "
        "slower even with every collective free (the GPU's own work is "
        f"{nm['own_share_min']:.0%} of a predicted step at least, {nm['own_share_median']:.0%} "
        "median)",
        f"  with the paper's matmul model on Blackwell (no tensor memory): MFU "
        f"{m['nemo_paper_tiles']['mfu_points']:.1f} points (signed "
        f"{m['nemo_paper_tiles']['bias_points']:+.1f}); step time, multi-node "
        f"{m['nemo_paper_tiles']['step_multi_node']:.0%}, single-node "
        f"{m['nemo_paper_tiles']['step_single_node']:.0%}",
        f"  with DeepSeek-V3's attention counted as plain attention: MFU "
        f"{m['nemo_plain_attention']['mfu_points']:.2f} points (signed "
        f"{m['nemo_plain_attention']['bias_points']:+.1f}); step time, multi-node "
        f"{m['nemo_plain_attention']['step_multi_node']:.0%}, single-node "
        f"{m['nemo_plain_attention']['step_single_node']:.0%}",
        f"  with neither (the book's model before these rows): MFU "
        f"{m['nemo_neither']['mfu_points']:.2f} points (signed "
        f"{m['nemo_neither']['bias_points']:+.1f}); step time, multi-node "
        f"{m['nemo_neither']['step_multi_node']:.0%}, single-node "
        f"{m['nemo_neither']['step_single_node']:.0%}",
        f"  with tensor parallelism in series (not overlapped as Megatron-Bridge's recipes "
        f"set it): MFU {m['nemo_serial_tp']['mfu_points']:.2f} points (signed "
        f"{m['nemo_serial_tp']['bias_points']:+.1f}); step time, multi-node "
        f"{m['nemo_serial_tp']['step_multi_node']:.0%}, single-node "
        f"{m['nemo_serial_tp']['step_single_node']:.0%}",
        f"  not adopted, a test: attention on the H100s at FlashAttention-3's figure (their "
        f"Transformer Engine prefers cuDNN's kernel there): MFU "
        f"{m['nemo_faster_hopper']['mfu_points']:.2f} points (signed "
        f"{m['nemo_faster_hopper']['bias_points']:+.1f}); step time, multi-node "
        f"{m['nemo_faster_hopper']['step_multi_node']:.0%}, single-node "
        f"{m['nemo_faster_hopper']['step_single_node']:.0%}",
    ]
    lines += ["", "step time by regime (gpu, family, scale, sequence), median absolute error:"]
    for name, g in m["by_regime"].items():
        lines.append(
            f"  {name:52s} {g['rows']:3d} rows  in sample {g['in_sample']:4.0%}  held out "
            f"{g['held_out']:4.0%}"
        )
    share = t["interval_coverage_lockbox"]
    lines.append(f"the predicted interval holds the measured step (target {share:.0%} on the "
                 "lockbox):")  # fmt: skip
    for name, c in m["interval_coverage"].items():
        lines.append(f"  {name:12s} {c['rows']:3d} rows  {c['inside']:.0%}")
    w = m["interval_widening"]
    each = ", ".join(f"{k} {g['factor']:.2f}" for k, g in w["by_source"].items())
    lines.append(f"  (widened {w['factor']:.2f} times in log half-width, the larger of {each}: "
                 "those two files are in sample for it)")  # fmt: skip
    lines.append("")
    ss = m["small_shapes"]
    lines += [
        f"small shapes on one node (vTrain's Megatron-DeepSpeed runs, d_model 1024, "
        f"{ss['rows']} rows; development file: the host-side floor is measured on it, so these "
        f"are in sample; issue #55 measures its {t['step_single_node_held_out']:.0%} target on "
        "vTrain's d_model 2048 half, which the project does not hold):",
    ]
    for name in ("both", "without unfused attention", "without host-side floor", "neither"):
        g = ss[name]
        by = ", ".join(f"{b}: {e:.0%}" for b, e in g["by_micro_batch"].items())
        lines.append(
            f"  {name:28s} step time median {g['median_abs']:.1%} (signed "
            f"{g['median_signed']:+.1%}); by sequences a micro-batch {by}"
        )
    op = m["outside_pooled"]
    lines += [
        f"outside the development split, both files pooled ({op['rows']} rows; not wholly "
        "blind: the NeMo rows led to the extensions above):",
        f"  MFU median absolute error {op['mfu_points']:.2f} points (signed "
        f"{op['bias_points']:+.1f}; target {t['mfu_held_out_points']:g}: "
        f"{_verdict(op['mfu_points'], t['mfu_held_out_points'])})",
        f"  step time, multi-node ({op['multi_node_rows']} rows): {op['step_multi_node']:.0%} "
        f"(target {t['step_multi_node_held_out']:.0%}: "
        f"{_verdict(op['step_multi_node'], t['step_multi_node_held_out'])}); single-node: "
        f"{op['step_single_node']:.0%} (target {t['step_single_node_held_out']:.0%}: "
        f"{_verdict(op['step_single_node'], t['step_single_node_held_out'])})",
    ]
    st = m["step_time"]
    lines.append("")
    for key, target in (("multi_node", "step_multi_node_held_out"),
                        ("single_node", "step_single_node_held_out")):  # fmt: skip
        g = st[key]
        lines.append(
            f"step time, {key.replace('_', '-')} ({g['rows']} rows), median absolute error: in "
            f"sample {g['in_sample']:.0%}; held out {g['held_out']:.0%} (target "
            f"{t[target]:.0%}: {_verdict(g['held_out'], t[target])})"
        )
    for title, key in (
        ("the calibrated mode's step (operations) against its FLOP at one efficiency:",
         "step_models"),
        ("hiding collectives: none (the calibrated mode's) or each behind its window:",
         "overlap_rules"),
        ("the output layer and the loss: equal shares, as placed (the calibrated mode's) or "
         "last:", "stage_rules"),
        ("attention's core: one published share of the peak (the calibrated mode's) or "
         "FlashAttention-2's measured throughput at the run's shape (a test, not adopted):",
         "attention_rules"),
    ):  # fmt: skip
        lines += ["", title]
        for name, r in m[key].items():  # confront.step_rule's figures
            lines.append(
                f"  {name:10s} matmul efficiency {r['matmul']:.3g}; MFU in sample "
                f"{r['in_sample_points']:.1f}, held out {r['held_out_points']:.1f}, worst family "
                f"{r['worst_family_points']:.1f} ({r['worst_family']}); MosaicML "
                f"{r['outside_points']:.1f} points (signed {r['outside_bias_points']:+.1f}); step "
                f"held out {r['held_out_step']:.0%}, MosaicML {r['outside_step_multi']:.0%} "
                f"across nodes, {r['outside_step_single']:.0%} within; NVIDIA "
                f"{r['nemo_points']:.1f} points, {r['nemo_step_multi']:.0%} across nodes"
            )
    mp = m["memory_published"]
    lines += [
        "",
        f"peak memory, published rows ({mp['rows']}, torchtitan; not fitted): median absolute "
        f"error {mp['median_abs_error']:.0%} (signed {mp['median_signed_error']:+.0%})",
    ]
    if "memory_benchmark_file" in m:
        mb = m["memory_benchmark_file"]
        lines += [
            f"peak memory, benchmark file ({mb['with_memory']} runs that ran): median absolute "
            f"error {mb['median_abs_error']:.0%} (signed {mb['median_signed_error']:+.0%}; target "
            f"{t['memory_median_error']:.0%}: "
            f"{_verdict(mb['median_abs_error'], t['memory_median_error'])})",
            f"out of memory called right on {mb['oom_agreement']:.1%} of {mb['runs']} runs "
            f"(target {t['oom_agreement']:.0%}: "
            f"{_verdict(mb['oom_agreement'], t['oom_agreement'], True)})",
        ]
        mf = m["mfu_benchmark_file"]
        lines.append(
            f"MFU, benchmark file (every run that ran, {mf['rows']}; fitted on the published "
            f"rows only): median absolute error {mf['median_abs_error_points']:.1f} points "
            f"(signed {mf['median_signed_error_points']:+.1f}: predicted "
            f"{'above' if mf['median_signed_error_points'] > 0 else 'below'} what ran)"
        )
        lines.append(
            "  each model size held out (the activation factor and overhead fitted on the others):"
        )
        for model, g in mb["held_out_by_model"].items():
            lines.append(
                f"    {model:>4}  {g['runs']:5d} runs  peak error {g['median_abs_error']:4.0%}  "
                f"out of memory called right {g['oom_agreement']:6.1%}  (fitted without it: "
                f"factor {g['factor']:.1f}, overhead {g['overhead'] / GIB:.2f} GiB)"
            )
    else:
        lines.append(f"(no {BENCH}: the benchmark file's figures are left out)")
    lines += side_by_side()
    return "\n".join(lines)


def lockbox_mismatches() -> list[str]:
    """The lockbox files (paths from the repository) whose sha256 differs from the one recorded
    in :data:`LOCKBOX_DIGEST`, and those found on one side only: empty for a sealed lockbox."""
    import hashlib  # only the --lockbox mode needs it

    lines = LOCKBOX_DIGEST.read_text().splitlines()
    recorded = {name: digest for digest, name in (line.split() for line in lines if line.strip())}
    found = {str(p.relative_to(ROOT)): p for p in sorted(LOCKBOX.glob(LOCKBOX_FILES))}
    return sorted(
        name
        for name in recorded.keys() | found.keys()
        if name not in found
        or hashlib.sha256(found[name].read_bytes()).hexdigest() != recorded.get(name)
    )


def lockbox_digest_ok() -> bool:
    """Whether every lockbox file still has the sha256 recorded in :data:`LOCKBOX_DIGEST`, and
    the digest file names every lockbox file and no other (at least one)."""
    return LOCKBOX_DIGEST.read_text().strip() != "" and not lockbox_mismatches()


def lockbox(development: bool = True) -> dict:
    """The lockbox's figures: every file's rows together compared with the model's predictions
    (the model never fitted on them), beside the development split's in-sample and
    leave-one-source-out figures of :func:`measure` (left empty without ``development``), with
    the rows each file gave. Refuses a lockbox whose digests differ from the recorded ones."""
    if not lockbox_digest_ok():
        raise SystemExit(
            f"{LOCKBOX}: sha256 of {', '.join(lockbox_mismatches()) or 'no file'} differs from "
            f"{LOCKBOX_DIGEST} or is missing on one side; expected the recorded lockbox"
        )
    sources = {p.name: published.data_rows(p) for p in sorted(LOCKBOX.glob(LOCKBOX_FILES))}
    rows = tuple(row for file_rows in sources.values() for row in file_rows)
    ok, n = _coverage(rows)
    dev = measure() if development else {key: {} for key in DEVELOPMENT_FIGURES}
    return {
        "development": {key: dev[key] for key in DEVELOPMENT_FIGURES},
        "lockbox_rows_by_source": {name: len(file_rows) for name, file_rows in sources.items()},
        "lockbox": _figures(confront.outside_split(rows=rows)),
        "lockbox_by_regime": confront.outside_by_regime(rows),
        "coverage_lockbox": {"modelled": ok, "rows": n, "share": ok / n},
        # In sample (the intervals' quantiles are these rows' own residuals): not an estimate.
        "interval_development_in_sample": confront.interval_coverage(runs.dev_rows()),
        "interval_lockbox": _without(confront.interval_coverage(rows), "by_regime"),
        "targets": TARGETS,
    }


def spent_report() -> str:
    """The present model on the spent lockbox (read only once it is scored), beside the scored
    model's figures: what a change made since did to those rows, which are no longer a blind
    test of it."""
    rec = measured_figures.lockbox_record()
    if rec is None:
        raise SystemExit(f"{LOCKBOX_SCORES}: not scored; expected a scored lockbox (--lockbox)")
    now = lockbox(development=False)
    lines = [
        f"the spent lockbox ({rec['coverage_lockbox']['rows']} rows), scored at "
        f"{rec['commit'][:10]} and with the present model (in sample: not blind):"
    ]
    for name, r in (("scored", rec), ("present", now)):
        b = r["lockbox"]
        lines.append(
            f"  {name:8s} {r['coverage_lockbox']['modelled']:3d} rows predicted  MFU "
            f"{b['mfu_points']:.1f} points (signed {b['bias_points']:+.1f})  step across nodes "
            f"{b['step_multi_node']:.0%}, on one node {b['step_single_node']:.0%}  interval "
            f"holds {r['interval_lockbox']['inside']:.0%}"
        )
    lines += ["", "the present model by regime:", measured_figures.lockbox_regimes_markdown(
        {**now, "development": {"by_regime": {}}})]  # fmt: skip
    return "\n".join(lines)


def _git(*args: str) -> str:
    import subprocess  # only the --lockbox mode records its commit

    return subprocess.run(("git", "-C", str(ROOT), *args), check=True, capture_output=True,
                          text=True).stdout.strip()  # fmt: skip


def score_lockbox() -> dict:
    """Score the lockbox (:func:`lockbox`) once and record it in :data:`LOCKBOX_SCORES` with
    the commit, the time and the model's fingerprint; refused when it is already recorded (a
    lockbox is spent once scored) or the work tree has changes (the score must stand for a
    commit)."""
    if LOCKBOX_SCORES.exists():
        rec = json.loads(LOCKBOX_SCORES.read_text())
        raise SystemExit(
            f"{LOCKBOX_SCORES}: the lockbox was scored at commit {rec['commit']}; expected no "
            "score (a lockbox is spent once scored: record a new one)"
        )
    if _git("status", "--porcelain"):
        raise SystemExit(f"{ROOT}: the work tree has changes; expected a clean commit to score")
    from datetime import UTC, datetime

    from dmlimits.core import plumbing

    record = {
        "commit": _git("rev-parse", "HEAD"),
        "scored_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "fingerprint": confront.fingerprint(),
        "digests": LOCKBOX_DIGEST.read_text().splitlines(),
        **lockbox(),
    }
    plumbing.atomic_write(LOCKBOX_SCORES, json.dumps(record, indent=2, default=float) + "\n")
    return record


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    ap.add_argument(
        "--lockbox",
        action="store_true",
        help="score the lockbox once, when the model is finished (its README gives the rule)",
    )
    ap.add_argument(
        "--spent",
        action="store_true",
        help="once the lockbox is scored: the present model on it beside the scored one (in "
        "sample: no longer a blind test)",
    )
    args = ap.parse_args(argv)
    if args.lockbox:
        print(json.dumps(score_lockbox(), indent=2, default=float))
        return 0
    if args.spent:
        print(spent_report())
        return 0
    m = measure()
    print(json.dumps(m, indent=2) if args.json else report(m))
    return 0


if __name__ == "__main__":
    sys.exit(main())
