"""The command line: ``python -m dmlimits COMMAND``.

Commands:

* ``build``       build the whole book for a scenario (validated before anything runs);
                  ``--pdf``: the default book's PDF, from its executed chapters;
* ``scenarios``   list the scenario presets, or every key a scenario may set (``--keys``),
                  or one resolved scenario (``--show NAME``);
* ``derivations`` list every derivation of the library; ``--verify`` proves each step;
* ``matmul``      time and efficiency of one matmul on one GPU (the single-GPU model);
* ``sweep``       the optimal parallelism at every model size, one CSV or JSON row each;
* ``headline``    a scenario's headline numbers (linear-scaling end, latency wall, ...);
                  ``--explain`` says what each means, its unit and the chapter deriving it;
                  a ``--set`` no closed form depends on is named with why;
* ``predict``     step time, throughput and MFU of one training configuration (transformer,
                  sharded data, tensor, pipeline and context parallelism), or of every row of
                  a CSV of runs (``--runs FILE.csv``).

Errors in the reader's input print one line, ``error: ...``, and exit with status 2; a failed
build exits with status 1 and leaves the previous book as it was.
"""

from __future__ import annotations

import argparse
import csv
import difflib
import json
import math
import os
import re
import signal
import sys
import textwrap
import time
from collections.abc import Sequence
from pathlib import Path

from dmlimits.build.engine import EDITIONS, BuildError, RepositoryError
from dmlimits.core import published
from dmlimits.core.scenario import (
    DEFAULT_SCENARIO,
    ScenarioError,
    describe_presets,
    parse_set,
    resolve,
)

#: The help of every ``--scenario`` option that takes one scenario: a preset or a file.
SCENARIO_HELP = (
    "the assumptions to use: a preset name (list them with 'scenarios') or a YAML file of "
    "your own, e.g. --scenario a100 or --scenario my.yaml; default: %(default)s"
)
#: The help of every ``--set`` option.
SET_HELP = (
    "change one assumption of the scenario, e.g. --set network.latency=2e-6 or --set "
    "training.months=6 (repeatable; every key and its meaning: 'scenarios --keys')"
)


def _add_scenario_options(p: argparse.ArgumentParser, several: bool = False) -> None:
    """The pair of options every command that reads a scenario takes: ``--scenario`` (one, or
    with ``several`` a comma-separated list) and ``--set``."""
    if several:
        p.add_argument(
            "--scenario",
            default=DEFAULT_SCENARIO,
            metavar="NAME|FILE[,...]",
            help="preset names or YAML files, comma-separated, or 'all' (every preset), e.g. "
            "--scenario h100,a100 or --scenario my.yaml; default: %(default)s",
        )
    else:
        p.add_argument(
            "--scenario", default=DEFAULT_SCENARIO, metavar="NAME|FILE", help=SCENARIO_HELP
        )
    p.add_argument(
        "--set", dest="sets", action="append", default=[], metavar="KEY=VALUE", help=SET_HELP
    )


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m dmlimits",
        description="Data Movement Limits: build, inspect and check the book's model.",
        epilog="Every command's own help: python -m dmlimits COMMAND --help.",
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    b = sub.add_parser("build", help="execute every notebook and build the HTML book")
    _add_scenario_options(b)
    b.add_argument(
        "--output",
        metavar="DIR",
        help="where the HTML goes (default: _build/html "
        "for the default scenario, _build/scenarios/NAME/html otherwise)",
    )
    b.add_argument(
        "--jobs", type=int, default=None, help="notebooks executed at once (default: one per core)"
    )
    b.add_argument(
        "--edition",
        default=EDITIONS[0],
        choices=EDITIONS,
        help="instructors: the book with every solution (collapsed) and the instructors' pages "
        "(default); student: no solution and no instructors' page, into "
        "_build/student/html (or beside the scenario's own html)",
    )
    b.add_argument(
        "--pdf",
        action="store_true",
        help="build the default book's PDF (_build/pdf/) from its executed chapters instead",
    )

    s = sub.add_parser("scenarios", help="list presets, keys, or one resolved scenario")
    s.add_argument("--keys", action="store_true", help="every key a scenario may set")
    s.add_argument(
        "--show",
        metavar="NAME|FILE",
        help="print one scenario, resolved, as YAML, e.g. --show a100 or --show my.yaml",
    )
    s.add_argument(
        "--set", dest="sets", action="append", default=[], metavar="KEY=VALUE", help=SET_HELP
    )

    d = sub.add_parser("derivations", help="list the library's derivations")
    d.add_argument(
        "--verify",
        action="store_true",
        help="prove every step and check every premise (cited results, oracles); exit 1 on failure",
    )

    m = sub.add_parser("matmul", help="time and efficiency of one matmul on one GPU")
    m.add_argument("--gpu", default="h100", help="GPU preset (default: %(default)s)")
    m.add_argument("--shape", required=True, metavar="D1xD2", help="weight shard, e.g. 4096x16384")
    m.add_argument("--nanobatch", required=True, metavar="B", help="tokens in the matmul")
    m.add_argument("--kind", default="forward", help="forward, activation-grad or weight-grad")
    m.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="change one hardware assumption of the GPU preset, e.g. --set "
        "hardware.max_clock=1755e6 or --set hardware.kernel_latency=2e-6 (repeatable; every "
        "key: 'scenarios --keys')",
    )
    m.add_argument("--json", action="store_true", help="print JSON for machines")

    w = sub.add_parser("sweep", help="the optimal parallelism at every model size of the sweep")
    _add_scenario_options(w, several=True)
    w.add_argument("--format", choices=("json", "csv"), default="csv", help="default: csv")
    w.add_argument(
        "--jobs", type=int, default=None, help="scenarios swept at once (default: one per core)"
    )

    h = sub.add_parser("headline", help="a scenario's headline numbers")
    _add_scenario_options(h)
    h.add_argument("--json", action="store_true", help="print JSON for machines")
    h.add_argument(
        "--explain",
        action="store_true",
        help="say what each output key means (its unit and the chapter that derives it) and stop",
    )
    _add_predict(sub)
    return p


def _cmd_build(args: argparse.Namespace) -> int:
    from dmlimits.build.engine import (  # a command imports the layers it runs only
        BuildError,
        BuildInterrupted,
        build,
        check_repository,
    )

    # Ctrl-C stops a build from its first line, even when it was started with SIGINT ignored
    # (as a background job or a test runner's worker starts it): the build stops itself on
    # SIGINT once it runs (build.stop_on_signals), and main() turns an earlier one into 130.
    signal.signal(signal.SIGINT, signal.default_int_handler)

    if args.pdf:
        return _build_pdf(args)
    scn = resolve(args.scenario, args.sets)  # validated before anything runs
    check_repository()
    if args.jobs is not None and args.jobs < 1:
        raise ScenarioError(f"--jobs: got {args.jobs}; expected a whole number of at least 1")
    print(f"scenario: {scn.name} ({scn.origin})", flush=True)
    try:
        build(scn, output=args.output, jobs=args.jobs, edition=args.edition)
    except BuildInterrupted as exc:
        print(
            f"build {exc}: every notebook stopped, the stage removed; the previous book is "
            "unchanged.",
            file=sys.stderr,
            flush=True,
        )
        sys.stdout.flush()
        # Leave now: threads still waiting on the stopped kernels would hold the exit up.
        os._exit(exc.exit_code)
    except BuildError as exc:
        print(f"build failed; the previous book is unchanged.\n{exc}", file=sys.stderr)
        return 1
    return 0


def _build_pdf(args: argparse.Namespace) -> int:
    """``build --pdf``: the default book's PDF, from the chapters its HTML build executed."""
    from dmlimits.build.pdf import build_pdf  # a command imports the layers it runs only

    if args.scenario != DEFAULT_SCENARIO or args.sets or args.output:
        raise ScenarioError(
            "build --pdf: got --scenario, --set or --output; expected none (the PDF is the "
            "default book's, from _build/executed)"
        )
    try:
        build_pdf()
    except BuildError as exc:
        print(f"build --pdf failed; the previous PDF is unchanged.\n{exc}", file=sys.stderr)
        return 1
    return 0


def _cmd_scenarios(args: argparse.Namespace) -> int:
    if args.keys:
        from dmlimits.build.engine import scenario_keys  # a command imports the layers it runs only

        for key, expected, doc in scenario_keys():
            print(f"{key:<38} {doc}; {expected}")
        return 0
    if args.show:
        print(resolve(args.show, args.sets).to_yaml(), end="")
        return 0
    presets = describe_presets()
    width = max(len(n) for n, _ in presets)
    for name, description in presets:
        print(f"{name:<{width}}  {description}")
    return 0


def _cmd_derivations(args: argparse.Namespace) -> int:
    from dmlimits.core.derivation import (  # a command imports the layers it runs only
        DerivationError,
        all_derivations,
    )
    from dmlimits.premises import PremiseError, check  # a command imports the layers it runs only

    failed = 0
    derivations = all_derivations()
    width = max(len(d.name) for d in derivations) + 2
    for d in derivations:
        status = ""
        if args.verify:
            try:
                status = "  " + check(d).line()
            except (DerivationError, PremiseError) as exc:
                status = f"  FAILED: {exc}"
                failed += 1
        print(f"{d.name:<{width}} {len(d.steps):>2} steps{status}", flush=True)
    if args.verify:
        print(
            "all derivations verified: every step proved, every premise derived or checked"
            if not failed
            else f"{failed} failed"
        )
    return 1 if failed else 0


def _whole(name: str, text: str) -> int:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not (value > 0 and value.is_integer()):
        raise ScenarioError(f"{name}: got {text!r}; expected a whole number greater than zero")
    return int(value)


def _cmd_matmul(args: argparse.Namespace) -> int:
    from dmlimits.costs import matmul  # a command imports the layers it runs only

    scn = resolve("h100", [f"gpu={args.gpu}", *args.sets])
    parts = args.shape.lower().split("x")
    if len(parts) != 2:
        raise ScenarioError(f"--shape: got {args.shape!r}; expected D1xD2, e.g. 4096x16384")
    d1, d2 = (_whole("--shape", part) for part in parts)
    b = _whole("--nanobatch", args.nanobatch)
    try:
        kind = matmul.check_kind(args.kind)
    except ValueError as exc:
        raise ScenarioError(f"--kind: {exc}") from None
    times = matmul.level_times(scn, d1, d2, b, kind)
    result = {
        "gpu": scn["gpu"],
        "d1": d1,
        "d2": d2,
        "nanobatch": b,
        "kind": kind,
        "time_s": float(times["total"]),
        "efficiency": float(matmul.matmul_efficiency(scn, d1, d2, b, kind)),
        "binding": str(times["binding"]),
        "parts_s": {k: float(times[k]) for k in (*matmul.LEVELS, "arithmetic", "latency")},
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(
            f"{scn.gpu_label}, {d1} x {d2} shard, {b} tokens, {kind}: "
            f"{result['time_s'] * 1e6:.2f} us, efficiency {result['efficiency']:.3f} of peak "
            f"(bound by {result['binding']})"
        )
    return 0


def _looks_like_path(spec: str) -> bool:
    return spec.endswith((".yaml", ".yml")) or "/" in spec or os.sep in spec


def _scenario_specs(text: str) -> list[str]:
    """The scenarios a ``--scenario`` argument names; an unknown preset is refused with the
    list of valid names before anything runs."""
    from dmlimits.core.scenario import (  # a command imports the layers it runs only
        PAPER_PRESETS,
        preset_names,
    )

    names = preset_names()
    if text.strip() == "all":
        return [n for n in PAPER_PRESETS if n in names] + [
            n for n in names if n not in PAPER_PRESETS
        ]
    specs = [part.strip() for part in text.split(",") if part.strip()]
    if not specs:
        raise ScenarioError("--scenario: got an empty list; expected preset names or 'all'")
    for spec in specs:
        if spec not in names and _looks_like_path(spec) and not Path(spec).is_file():
            raise ScenarioError(f"--scenario: no such file: {spec}")
        if spec not in names and not Path(spec).is_file():
            raise ScenarioError(
                f"--scenario: unknown scenario {spec!r}; expected 'all', a YAML file or one "
                f"of: {', '.join(names)}"
            )
    return specs


def _jsonable(x):
    return None if isinstance(x, float) and not math.isfinite(x) else x


def _cmd_sweep(args: argparse.Namespace) -> int:
    from dmlimits import search  # a command imports the layers it runs only

    scenarios = [resolve(spec, args.sets) for spec in _scenario_specs(args.scenario)]
    if args.jobs is not None and args.jobs < 1:
        raise ScenarioError(f"--jobs: got {args.jobs}; expected a whole number of at least 1")
    finished = []
    start = time.perf_counter()

    def progress(scn, seconds: float) -> None:
        finished.append(scn.name)
        print(
            f"[{len(finished)}/{len(scenarios)}] {scn.name} swept "
            f"({time.perf_counter() - start:.1f} s so far)",
            file=sys.stderr,
            flush=True,
        )

    search.sweep_many(scenarios, jobs=args.jobs, progress=progress)
    out = [row for scn in scenarios for row in search.rows(scn)]
    if args.format == "json":
        print(json.dumps([{k: _jsonable(v) for k, v in r.items()} for r in out], indent=1))
    else:
        writer = csv.DictWriter(sys.stdout, fieldnames=search.ROW_FIELDS, lineterminator="\n")
        writer.writeheader()
        for r in out:
            writer.writerow({k: ("" if v is None else v) for k, v in r.items()})
    return 0


def _cmd_headline(args: argparse.Namespace) -> int:
    from dmlimits import search  # a command imports the layers it runs only

    if args.explain:
        pad = " " * 4
        for key, m in search.HEADLINE_MEANINGS.items():
            print(f"{key}  [{m.unit}; derived in {m.chapter}]")
            print(textwrap.fill(m.meaning, 96, initial_indent=pad, subsequent_indent=pad))
        return 0
    specs = _scenario_specs(args.scenario)
    if len(specs) != 1:
        raise ScenarioError(f"--scenario: got {args.scenario!r}; expected one scenario")
    scn = resolve(specs[0], args.sets)
    result = search.headline(scn)
    if args.json:
        print(json.dumps({k: _jsonable(v) for k, v in result.items()}, indent=2))
    else:
        width = max(map(len, result))
        for key, value in result.items():
            print(f"{key:<{width}} {value:.3g} {search.HEADLINE_MEANINGS[key].unit}")
        print("(what each number means: headline --explain)")
    # Tell a reader whose change left the closed forms where they were why (on stderr under
    # --json, which machines read).
    for line in _ignored_changes(specs[0], scn, args.sets):
        print(line, file=sys.stderr if args.json else sys.stdout)
    return 0


def _ignored_changes(spec: str, scn, sets: Sequence[str]) -> list[str]:
    """One line for each assumption the reader changed with ``--set`` (other than ``gpu``,
    which changes the hardware with it) that no closed form depends on."""
    from dmlimits.costs import closed_forms  # a command imports the layers it runs only

    keys = [parse_set(text)[0] for text in sets]
    keys = [k for k in keys if k != "gpu"]
    if not keys:
        return []
    limits = ", ".join(closed_forms.LIMITS)
    return [
        f"note: you changed {key}, but no closed form ({limits}) depends on it"
        + (f": {why}" if why else "")
        for key, why in closed_forms.ignored(scn, resolve(spec), keys)
    ]


def _add_predict(sub) -> None:
    p = sub.add_parser("predict", help="step time, throughput and MFU of a training configuration")
    p.add_argument(
        "--runs",
        metavar="FILE.csv",
        help="predict every row of a CSV with the columns of published_runs.csv",
    )
    p.add_argument(
        "--format",
        choices=("csv", "json"),
        default="csv",
        help="output of --runs (default: %(default)s)",
    )
    p.add_argument(
        "--model",
        default="llama2-7b",
        help="a shape preset, in any case, with or without dashes (Llama-3-8B is llama3-8b); "
        "--list-models lists them; default: %(default)s",
    )
    p.add_argument(
        "--gpu",
        default="h100",
        help="a GPU and its fabric, named as --model is; --list-models lists them; "
        "default: %(default)s",
    )
    p.add_argument(
        "--list-models",
        action="store_true",
        help="list the shape presets (layers, d_model, heads, parameters) and the GPU presets, "
        "and stop",
    )
    p.add_argument("--gpus", type=int, default=8, help="GPU count; default: %(default)s")
    for name in ("tp", "pp", "dp", "ep", "cp"):
        p.add_argument(
            f"--{name}",
            type=int,
            default=None if name == "dp" else 1,
            help=f"{name.upper()} degree"
            + (" (default: the GPUs left)" if name == "dp" else " (default: 1)"),
        )
    p.add_argument(
        "--sharding",
        default="fsdp",
        help="none, ddp, zero1, zero2, zero3, fsdp or hsdp; default: %(default)s",
    )
    p.add_argument("--shard-group", type=int, default=None, help="HSDP sharding group size")
    p.add_argument("--micro-batch", type=int, default=1, help="sequences per micro-batch")
    p.add_argument(
        "--global-batch-tokens",
        type=float,
        default=4 * 2**20,
        help="tokens per optimizer step; default: %(default)d",
    )
    p.add_argument("--seq-len", type=int, default=4096, help="default: %(default)s")
    p.add_argument("--precision", default="bf16", help="bf16, fp16 or fp8; default: %(default)s")
    p.add_argument("--recompute", default="none", help="none, selective or full")
    p.add_argument("--vpp", type=int, default=1, help="model chunks a GPU (interleaved 1F1B)")
    p.add_argument(
        "--mode",
        choices=("bound", "calibrated", "both"),
        default="both",
        help="bound: the paper's ideal (matmuls at the GPU's effective utilization, every "
        "collective hidden, no latency); calibrated: the step timed operation by operation "
        "(matmuls by the book's matmul model over a matmul efficiency fitted on published "
        "runs, attention at FlashAttention's published utilization, memory-bound operations "
        "and the optimizer from HBM bandwidth), the collective efficiency of the all-reduce "
        "measurements, no overlap; "
        "default: %(default)s",
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")


def _bare(name: str) -> str:
    """A name without its case, spaces, dashes, underscores and dots: how names are matched."""
    return re.sub(r"[\s_.-]", "", name.lower())


def _pick(what: str, flag: str, text: str, names: Sequence[str]) -> str:
    """The one of ``names`` that ``text`` spells whatever its case and separators (as the rows
    of a runs file are matched, ``measured.runs.row_shape``); otherwise a one-line error with
    the names and the nearest one."""
    matches = [n for n in names if _bare(n) == _bare(text)]
    if len(matches) == 1:
        return matches[0]
    bare = {_bare(n): n for n in names}
    close = difflib.get_close_matches(_bare(text), list(bare), n=1)
    hint = f" (did you mean {bare[close[0]]}?)" if close else ""
    raise ScenarioError(
        f"{flag}: unknown {what} {text!r}; expected one of {', '.join(names)}{hint}"
    )


def _list_models() -> None:
    from dmlimits.measured import runs, transformer  # a command imports the layers it runs only

    print("Model shapes (--model):")
    width = max(map(len, transformer.SHAPES))
    print(f"  {'name':<{width}}  {'layers':>6}  {'d_model':>7}  {'heads':>5}  parameters")
    for name, sh in transformer.SHAPES.items():
        experts = f" ({sh.experts} experts, {sh.top_k} a token)" if sh.moe else ""
        print(
            f"  {name:<{width}}  {sh.layers:>6}  {sh.d_model:>7}  {sh.heads:>5}  "
            f"{sh.params / 1e9:.3g} B{experts}"
        )
    print("\nGPUs and their fabrics (--gpu):")
    clusters = runs.CLUSTERS
    width = max(map(len, clusters))
    for name, c in clusters.items():
        print(
            f"  {name:<{width}}  {c.label}: {c.peak_16bit / 1e12:.4g} TFLOP/s dense 16-bit, "
            f"{c.hbm / 1e9:.4g} GB HBM, {c.node_size} GPUs a node"
        )


def _cmd_predict(args: argparse.Namespace) -> int:
    from dmlimits.measured import (  # a command imports the layers it runs only
        confront,
        memory,
        runs,
        transformer,
    )

    if args.list_models:
        _list_models()
        return 0
    if args.runs:
        try:
            with open(args.runs, newline="") as fh:
                # '#' lines (a data file's source) are comments.
                columns, rows = published.read_table(fh.read().splitlines())
        except FileNotFoundError:
            raise ScenarioError(f"--runs: no such file: {args.runs}") from None
        except OSError as exc:
            raise ScenarioError(f"--runs: cannot read {args.runs!r} ({exc.strerror})") from None
        except ValueError as exc:  # a row the header cannot name (published.read_table)
            raise ScenarioError(f"--runs: {args.runs}: {exc}") from None
        out = confront.with_intervals(runs.predict_rows(rows))
        if args.format == "json":
            print(json.dumps(out, indent=1))
            return 0
        added = (*runs.OUTPUT_COLUMNS, *confront.INTERVAL_COLUMNS)
        fields = columns + [c for c in added if c not in columns]
        writer = csv.DictWriter(
            sys.stdout, fieldnames=fields, lineterminator="\n", extrasaction="ignore", restval=""
        )
        writer.writeheader()
        writer.writerows(out)
        return 0
    try:
        shape = transformer.shape(
            _pick("model shape", "--model", args.model, list(transformer.SHAPES))
        )
        gpu = _pick("GPU", "--gpu", args.gpu, list(runs.CLUSTERS))
        dp = args.dp
        if dp is None:
            rest = args.tp * args.pp * args.cp
            if args.gpus % rest:
                raise ValueError(f"--gpus {args.gpus} is not a multiple of tp x pp x cp = {rest}")
            dp = args.gpus // rest
        cfg = runs.Config(
            shape=shape,
            cluster=runs.cluster(gpu),
            n_gpus=args.gpus,
            global_batch_tokens=args.global_batch_tokens,
            seq_len=args.seq_len,
            tp=args.tp,
            pp=args.pp,
            dp=dp,
            cp=args.cp,
            ep=args.ep,
            sharding=args.sharding,
            shard_group=args.shard_group,
            mbs=args.micro_batch,
            vpp=args.vpp,
            precision=args.precision,
            recompute=args.recompute,
        )
    except ValueError as exc:
        raise ScenarioError(str(exc)) from None
    modes = {"bound": runs.BOUND, "calibrated": runs.calibrated()}
    if args.mode != "both":
        modes = {args.mode: modes[args.mode]}
    result = {name: runs.predict(cfg, f).as_dict() for name, f in modes.items()}
    if "calibrated" in result:
        result["calibrated"]["interval"] = confront.interval(
            cfg, result["calibrated"]["step_time_s"]
        )
    mem = memory.peak(cfg)
    if args.json:
        fit = {
            "peak_memory_gib": mem.total / 2**30, "fits": mem.fits,
            "fits_with_full_recompute": memory.can_fit(cfg),
        }  # fmt: skip
        print(json.dumps({"config": runs.describe(cfg), **fit, **result}, indent=2))
        return 0
    print(
        f"{shape.name} on {cfg.n_gpus} x {cfg.cluster.label}: tp={cfg.tp} pp={cfg.pp} "
        f"dp={cfg.dp} cp={cfg.cp}, {cfg.sharding}, {cfg.precision}, "
        f"batch {cfg.global_batch_tokens:.4g} tokens of {cfg.seq_len}"
    )
    print(f"peak memory per GPU: {mem.describe()}")
    if not mem.fits:
        gib = 2**30
        rescue = (
            "full recomputation would make it fit"
            if memory.can_fit(cfg)
            else "no recomputation makes it fit: more GPUs would"
            + ("" if runs.SHARDING[cfg.sharding] == 3 else ", or ZeRO-3")
        )
        print(
            f"DOES NOT FIT: {mem.total / gib:.1f} GiB needed (model state "
            f"{(mem.weights + mem.gradients + mem.optimizer) / gib:.1f}, activations "
            f"{mem.activations / gib:.1f}), {mem.capacity / gib:.1f} GiB on each GPU; {rescue}. "
            "The times below are what it would take if it ran."
        )
    for name, r in result.items():
        print(f"\n[{name}]")
        print(f"  step time                {r['step_time_s']:.4g} s")
        if bar := r.get("interval"):
            lo, hi = bar["predicted_step_time_low_s"], bar["predicted_step_time_high_s"]
            share = confront.INTERVAL_SHARE
            print(
                f"  {share:.0%} interval             {lo:.4g} to {hi:.4g} s (held-out errors of "
                f"{bar['interval_rows']} rows: {bar['interval_regime']})"
            )
            if bar["outside_validated_regimes"]:
                print("  OUTSIDE every regime the model was validated on: trust it less")
        print(f"  tokens/s per GPU         {r['tokens_per_s_per_gpu']:.4g}")
        print(f"  MFU                      {r['mfu']:.1%}")
        print(f"  exposed communication    {r['exposed_comm_s']:.4g} s")
        print(f"  energy per token         {r['energy_per_token_j']:.4g} J")
        print("  time by cause (s):")
        for cause, seconds in r["breakdown"].items():
            print(f"    {cause:<24} {seconds:.4g}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    handler = {
        "build": _cmd_build,
        "scenarios": _cmd_scenarios,
        "derivations": _cmd_derivations,
        "matmul": _cmd_matmul,
        "sweep": _cmd_sweep,
        "headline": _cmd_headline,
        "predict": _cmd_predict,
    }[args.command]
    try:
        return handler(args)
    except (ScenarioError, RepositoryError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader piped the output into head: not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:  # Ctrl-C before a build stops itself (or in another command)
        print("interrupted: nothing was built or changed", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
