"""``vrmig chaos``, ``vrmig analyse`` and ``vrmig bench <name>``: the commands that live in modules
of their own (``make chaos``, ``python -m analysis``, ``make bench-*``), reached from the one CLI.
Every argument after the command goes to that module's own parser unchanged (``vrmig chaos
--help`` is the chaos module's help), so each command has one parser, whichever way it is called;
a benchmark's Make conveniences (its default ``--out`` under RESULTS) are ``make``'s, not these."""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Sequence

from migrate.cli.targets import TARGETS, Target

#: command -> the module it runs (``main(argv) -> int``), its subcommand words and help: make
#: chaos's target, and the re-analysis, which has no make target
DELEGATES = {
    "chaos": TARGETS["chaos"],
    "analyse": Target("re-analyse run directories from their raw traces: summary, plots, metrics", "analysis.__main__"),
}


def benches() -> dict[str, Target]:
    """name -> target of every ``make bench-<name>`` that runs a module."""
    return {name.removeprefix("bench-"): t for name, t in TARGETS.items() if name.startswith("bench-") and t.module}


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """The commands in ``vrmig --help`` (their arguments are taken by :func:`dispatch`)."""
    for name, t in DELEGATES.items():
        sub.add_parser(name, help=f"{t.summary}; arguments: see vrmig {name} --help", add_help=False)
    names = ", ".join(sorted(benches()))
    sub.add_parser("bench", help=f"a benchmark (make bench-<name>): vrmig bench <name> [args]; names: {names}",
                   add_help=False)  # fmt: skip


def dispatch(argv: Sequence[str]) -> int | None:
    """Run ``argv`` if its command is one of these (its exit status), else None.  ``argv`` is the
    command line after vrmig's own options."""
    if not argv:
        return None
    command, rest = argv[0], list(argv[1:])
    if command in DELEGATES:
        return _call(DELEGATES[command], rest)
    if command != "bench":
        return None
    table = benches()
    if not rest or rest[0] not in table:
        from migrate.core.errors import ConfigError

        given = f" {rest[0]!r} is not a benchmark" if rest else ""
        raise ConfigError(f"vrmig bench:{given} name one of {', '.join(sorted(table))}")
    return _call(table[rest[0]], rest[1:])


def _call(target: Target, argv: list[str]) -> int:
    """The target's module's ``main`` with its subcommand words (``probes.bench sampler``) and ``argv``."""
    try:
        rc = importlib.import_module(target.module).main([*target.command, *argv])
    except SystemExit as stop:  # a module's argparse: --help (0) or bad input (2)
        code = stop.code
        return code if isinstance(code, int) else (0 if code is None else 2)
    return int(rc or 0)
