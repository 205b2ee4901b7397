"""The command line: ``python -m dmlimits COMMAND``.

Commands:

* ``build``       build the whole book for a scenario (validated before anything runs);
* ``scenarios``   list the scenario presets, or every key a scenario may set (``--keys``),
                  or one resolved scenario (``--show NAME``);
* ``derivations`` list every derivation of the library; ``--verify`` proves each step.

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


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    handler = {"build": _cmd_build, "scenarios": _cmd_scenarios, "derivations": _cmd_derivations}[
        args.command
    ]
    try:
        return handler(args)
    except ScenarioError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
