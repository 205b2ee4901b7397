"""The command line: ``python -m dmlimits COMMAND``.

Commands:

* ``build``       build the whole book for a scenario (validated before anything runs);
* ``scenarios``   list the scenario presets, or every key a scenario may set (``--keys``),
                  or one resolved scenario (``--show NAME``);
* ``derivations`` list every derivation of the library; ``--verify`` proves each step;
* ``matmul``      time and efficiency of one matmul on one GPU (the single-GPU model).

Errors in the reader's input print one line, ``error: ...``, and exit with status 2; a failed
build exits with status 1 and leaves the previous book as it was.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from .scenario import DEFAULT_SCENARIO, ScenarioError, describe_presets, resolve


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m dmlimits",
        description="Data Movement Limits: build, inspect and check the book's model.",
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    b = sub.add_parser("build", help="execute every notebook and build the HTML book")
    b.add_argument(
        "--scenario",
        default=DEFAULT_SCENARIO,
        metavar="NAME|FILE",
        help="a preset name (see 'scenarios') or a YAML file; default: %(default)s",
    )
    b.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one assumption, e.g. --set training.months=6 (repeatable)",
    )
    b.add_argument(
        "--output",
        metavar="DIR",
        help="where the HTML goes (default: _build/html "
        "for the default scenario, _build/scenarios/NAME/html otherwise)",
    )
    b.add_argument(
        "--jobs", type=int, default=None, help="notebooks executed at once (default: one per core)"
    )

    s = sub.add_parser("scenarios", help="list presets, keys, or one resolved scenario")
    s.add_argument("--keys", action="store_true", help="every key a scenario may set")
    s.add_argument("--show", metavar="NAME|FILE", help="print one scenario, resolved, as YAML")
    s.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE")

    d = sub.add_parser("derivations", help="list the library's derivations")
    d.add_argument("--verify", action="store_true", help="prove every step; exit 1 on failure")

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
        help="override a hardware assumption, e.g. hardware.max_clock=1980e6",
    )
    m.add_argument("--json", action="store_true", help="print JSON for machines")
    return p


def _cmd_build(args: argparse.Namespace) -> int:
    from .build import BuildError, build

    scn = resolve(args.scenario, args.sets)  # validated before anything runs
    if args.jobs is not None and args.jobs < 1:
        raise ScenarioError(f"--jobs: got {args.jobs}; expected a whole number of at least 1")
    print(f"scenario: {scn.name} ({scn.origin})", flush=True)
    try:
        build(scn, output=args.output, jobs=args.jobs)
    except BuildError as exc:
        print(f"build failed; the previous book is unchanged.\n{exc}", file=sys.stderr)
        return 1
    return 0


def _cmd_scenarios(args: argparse.Namespace) -> int:
    if args.keys:
        from .build import scenario_keys

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
    from .derivation import DerivationError, all_derivations

    failed = 0
    derivations = all_derivations()
    width = max(len(d.name) for d in derivations) + 2
    for d in derivations:
        status = ""
        if args.verify:
            try:
                d.verify()
                status = "  verified"
            except DerivationError as exc:
                status = f"  FAILED: {exc}"
                failed += 1
        print(f"{d.name:<{width}} {len(d.steps):>2} steps{status}")
    if args.verify:
        print(f"{'all derivations verified' if not failed else f'{failed} failed'}")
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
    import json

    from . import matmul

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


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    handler = {
        "build": _cmd_build,
        "scenarios": _cmd_scenarios,
        "derivations": _cmd_derivations,
        "matmul": _cmd_matmul,
    }[args.command]
    try:
        return handler(args)
    except ScenarioError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
