"""The bridge from ``make <target> VAR=value`` to the command line: one table, the argument parser.

Every option of a subcommand is a Make variable of its target: a knob's own variable
(migrate.core.knobs: ``MIGBW`` for ``--max-bandwidth``), else the option's name in capitals
(``--downtime-limit`` -> ``DOWNTIME_LIMIT``).  The Makefile's recipe is only
``python -m migrate.cli.make <target>``: the values come from the environment (make exports
the variables of its command line to its recipes), so no value is ever part of a shell line,
and the variables given on make's command line (``MAKEFLAGS`` after ``--``) that the target does
not know are refused with one line naming the nearest known one, exit 2, before anything runs
(``make migrate RATES=0,100M`` used to run the default rate).

``python -m migrate.cli.make --list <subcommand>`` prints the target's variables with their help
text and default, which is what ``make help T=<target>`` shows.  Written here, not taken from a
library: the table is argparse's own, and what is left is forty lines of mapping."""

from __future__ import annotations

import argparse
import difflib
import os
import re
import sys
from collections.abc import Iterator, Mapping

from migrate.core.knobs import KNOB_BY_VAR

#: make targets -> the subcommand of ``vrmig`` each runs
TARGETS: dict[str, str] = {
    "migrate": "run",
    "sweep": "sweep",
    "ab": "ab",
    "baseline": "baseline",
    "calibrate": "calibrate",
}
#: variables of make itself or of every target (never refused)
COMMON = ("RESULTS", "PY", "PYTEST", "SHELL", "MAKEFLAGS", "V")


def subparser(name: str) -> argparse.ArgumentParser:
    """The parser of ``vrmig <name>``."""
    from migrate.cli.main import build_parser

    for action in build_parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action.choices[name]
    raise KeyError(name)


def variables(parser: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.Action]]:
    """(Make variable, option) for each option of ``parser`` (help and debug excluded)."""
    for action in parser._actions:
        longs = [o for o in action.option_strings if o.startswith("--")]
        if not longs or action.dest in ("help", "debug"):
            continue
        meta = action.metavar if isinstance(action.metavar, str) else None
        yield (meta if meta in KNOB_BY_VAR else longs[0][2:].upper().replace("-", "_")), action


def command_line_variables(makeflags: str) -> list[str]:
    """The names of the variables given on make's command line (``MAKEFLAGS``: ``s -- A=x\\ y B=1``)."""
    _, sep, tail = makeflags.partition("-- ")
    if not sep:
        return []
    words = re.split(r"(?<!\\) ", tail)
    return [w.split("=", 1)[0] for w in words if "=" in w]


def argv_for(target: str, environ: Mapping[str, str]) -> list[str]:
    """``vrmig`` argv of ``make <target>`` with the variables of ``environ``; ConfigError for a
    variable on make's command line that the target does not know."""
    from migrate.core.errors import ConfigError

    command = TARGETS[target]
    table = dict(variables(subparser(command)))
    known = {*table, *COMMON}
    unknown = [v for v in command_line_variables(environ.get("MAKEFLAGS", "")) if v not in known]
    if unknown:
        said = []
        for var in unknown:
            near = difflib.get_close_matches(var, sorted(table), n=1, cutoff=0.6)
            said.append(f"{var} (did you mean {near[0]}?)" if near else var)
        what = "is not a variable" if len(unknown) == 1 else "are not variables"
        raise ConfigError(
            f"make {target}: {', '.join(said)} {what} of make {target}; `make help T={target}` lists them"
        )
    argv = [command]
    for var, action in table.items():
        value = environ.get(var, "")
        if not value.strip():
            continue
        opt = next(o for o in action.option_strings if o.startswith("--"))
        if action.nargs == 0:  # a switch: on for 1/yes/true
            if value.strip().lower() in ("1", "yes", "true", "on"):
                argv.append(opt)
            continue
        argv += [opt, value]
    return argv


def listing(target: str) -> str:
    """The variables of ``make <target>``, one per line with the help text and default."""
    command = TARGETS[target]
    rows = []
    for var, action in variables(subparser(command)):
        d = action.default
        if isinstance(d, (tuple, list)):
            d = ",".join(f"{x:g}" if isinstance(x, float) else str(x) for x in d)
        default = "" if d in (None, False, "", argparse.SUPPRESS) else f" (default {d})"
        rows.append(f"  {var:22} {(action.help or '').replace('%%', '%')}{default}")
    return f"make {target} variables:\n" + "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    """``python -m migrate.cli.make [--list] <target>``."""
    from migrate.core.errors import ConfigError

    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) == 2 and args[0] == "--list" and args[1] in TARGETS:
        print(listing(args[1]))
        return 0
    if len(args) != 1 or args[0] not in TARGETS:
        print(f"usage: python -m migrate.cli.make [--list] {{{','.join(TARGETS)}}}", file=sys.stderr)
        return 2
    try:
        run_argv = argv_for(args[0], os.environ)
    except ConfigError as err:
        print(f"vrmig: error: {err}", file=sys.stderr)
        return 2
    from migrate.cli.main import main as vrmig

    return vrmig(run_argv)


if __name__ == "__main__":
    sys.exit(main())
