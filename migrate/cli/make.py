"""The bridge from ``make <target> VAR=value`` to the command line: one table of targets, and each
target's argument parser the table of its variables.

A target that takes variables has a recipe of one line, ``python -m migrate.cli.make <target>``,
and an entry in :data:`TARGETS` naming the module it runs (``migrate``: a ``vrmig`` subcommand;
else a module with ``build_parser()`` and ``main(argv)``), the subcommand words, and what the
Makefile always passes (``--out {RESULTS}/bench/qmp.csv``).  Every other option of that parser is
a Make variable of the target, named by its metavar when that is in capitals (a knob's own
variable, ``MIGBW`` for ``--max-bandwidth``; ``LAB_NAME`` for ``--name``; ``FILE`` for a
positional), else by its option (``--downtime-limit`` -> ``DOWNTIME_LIMIT``; a switch such as
``--check`` is on for ``CHECK=1``) or, for a positional, its name (``a`` -> ``A``).  An argument
that takes several values splits its variable into words (``RUNS="a b"``, quotes and ``*``
patterns as a shell would).

The values come from the environment (make exports the variables of its command line to its
recipes), so no value is ever part of a shell line.  Before anything runs, the variables given on
make's command line (``MAKEFLAGS`` after ``--``) that no goal of that command line takes are
refused with one line naming the nearest known one, exit 2 (else ``make migrate RATES=0,100M``
would run the default rate), then a required variable left unset, then a value its option refuses.
Variables of make itself (:data:`COMMON`) are never refused.  Targets that run no command with
variables (lint, the tests) keep plain recipes, and so do setup and its parts, whose variables
(``QEMU``, ``QEMU_FIRMWARE``, ``LIBVIRT``, ``ROUTER``) one ``make setup`` command line gives to all
of them: these check no variables (make itself never does); :data:`TARGETS` lists them for
``make help`` only.

``python -m migrate.cli.make --list`` prints every target, one line each (``make help``); with
``T=<target>`` in the environment, that target's variables with help text and default
(``make help T=<target>``).  ``--check <target>`` only checks the variables (for a recipe that
builds something before it runs the command), ``--dry <target>`` (or ``VRMIG_MAKE_DRY=1`` in the
environment: ``VRMIG_MAKE_DRY=1 make sweep RATES=0,1M REPS=2``) prints the command instead of
running it.  Written here, not taken from a library: the table is argparse's own."""

from __future__ import annotations

import argparse
import difflib
import glob
import importlib
import os
import re
import shlex
import sys
from collections.abc import Callable, Iterator, Mapping

from migrate.cli.targets import TARGETS, VRMIG, Target
from migrate.core.errors import ConfigError

#: the results root when ``RESULTS`` is not set
DEFAULT_RESULTS = "results"
#: variables of make itself or of every target (never refused)
COMMON = ("RESULTS", "PY", "PYTEST", "SHELL", "MAKEFLAGS", "V")
#: the Makefile exports make's goals under this name, so that a variable of another goal of the
#: same command line (``make lab-down lab-up TESTBED=... LAB_NAME=...``) is not refused
GOALS_ENV = "VRMIG_MAKE_GOALS"
#: ``1`` in the environment: print each target's command instead of running it
DRY_ENV = "VRMIG_MAKE_DRY"
_ON = ("1", "yes", "true", "on")
_OFF = ("0", "no", "false", "off")


def _bridged(target: str) -> Target:
    t = TARGETS.get(target)
    if t is None or not t.bridged:
        raise KeyError(target)
    return t


def subparser(name: str) -> argparse.ArgumentParser:
    """The parser of ``vrmig <name>``."""
    return _descend(_top_parser(VRMIG), (name,))


def _top_parser(module: str) -> argparse.ArgumentParser:
    """The whole parser of ``python -m <module>``."""
    name = "migrate.cli.main" if module == VRMIG else module
    build: Callable[[], argparse.ArgumentParser] = importlib.import_module(name).build_parser
    return build()


def _descend(parser: argparse.ArgumentParser, words: tuple[str, ...]) -> argparse.ArgumentParser:
    for word in words:
        subs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = subs.choices[word]
    return parser


def parser_of(target: str) -> argparse.ArgumentParser:
    """The parser whose options are the variables of ``make <target>``."""
    t = _bridged(target)
    return _descend(_top_parser(t.module), t.command)


def make_variable(action: argparse.Action) -> str:
    """The Make variable of an option or positional argument."""
    if isinstance(action.metavar, str) and re.fullmatch(r"[A-Z][A-Z0-9_]*", action.metavar):
        return action.metavar
    longs = [o for o in action.option_strings if o.startswith("--")]
    name = longs[0][2:] if longs else action.dest
    return name.upper().replace("-", "_")


def variables(parser: argparse.ArgumentParser, fixed: tuple[str, ...] = ()) -> Iterator[tuple[str, argparse.Action]]:
    """(Make variable, argument) for each argument of ``parser``: not help, debug, subcommands,
    short-only options, nor the options in ``fixed``."""
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)) or action.dest == "debug":
            continue
        if action.option_strings and not any(o.startswith("--") for o in action.option_strings):
            continue
        if set(action.option_strings) & set(fixed):
            continue
        yield make_variable(action), action


def table(target: str) -> dict[str, argparse.Action]:
    """The variables of ``make <target>``."""
    return dict(variables(parser_of(target), _bridged(target).fixed))


def command_line_variables(makeflags: str) -> list[str]:
    """The names of the variables given on make's command line (``MAKEFLAGS``: ``s -- A=x\\ y B:=1``)."""
    _, sep, tail = makeflags.partition("-- ")
    if not sep:
        return []
    words = re.split(r"(?<!\\) ", tail)
    return [m.group(0) for w in words if "=" in w and (m := re.match(r"[^:+?!=]+", w))]


def _check_names(target: str, own: Mapping[str, argparse.Action], environ: Mapping[str, str]) -> None:
    """ConfigError for a variable of make's command line that no goal of that command line takes."""
    goals = [g for g in environ.get(GOALS_ENV, "").split() if g in TARGETS and TARGETS[g].bridged]
    goals = goals if target in goals else [target]
    known = {*own, *COMMON}
    for goal in goals:
        if goal != target:
            known |= set(table(goal))
    unknown = [v for v in command_line_variables(environ.get("MAKEFLAGS", "")) if v not in known]
    if not unknown:
        return
    said = []
    for var in unknown:
        near = difflib.get_close_matches(var, sorted(known - {"MAKEFLAGS"}), n=1, cutoff=0.6)
        said.append(f"{var} (did you mean {near[0]}?)" if near else var)
    what = "is not a variable" if len(unknown) == 1 else "are not variables"
    of = " or ".join(f"make {g}" for g in goals)
    help_t = goals[0] if len(goals) == 1 else "<target>"
    raise ConfigError(f"make {target}: {', '.join(said)} {what} of {of}; `make help T={help_t}` lists them")


def _words(var: str, value: str) -> list[str]:
    """A variable of several values split into words as a shell would: quotes kept together,
    ``*?[`` patterns expanded (a pattern that matches nothing stays as it is)."""
    try:
        words = shlex.split(value)
    except ValueError as err:
        raise ConfigError(f"{var}={value!r}: {err}") from None
    out: list[str] = []
    for w in words:
        matches = sorted(glob.glob(w)) if any(c in w for c in "*?[") else []
        out += matches or [w]
    return out


def argv_for(target: str, environ: Mapping[str, str]) -> list[str]:
    """The argv (after ``python -m <module>``) of ``make <target>`` with the variables of
    ``environ``; ConfigError for a variable of make's command line that the target does not
    take, a required one left unset, or a switch given a value other than 1/0."""
    t = _bridged(target)
    own = table(target)
    _check_names(target, own, environ)
    results = environ.get("RESULTS", "").strip() or DEFAULT_RESULTS
    positionals: list[str] = []
    options: list[str] = []
    missing: list[str] = []
    for var, action in own.items():
        value = environ.get(var, "").strip() or t.defaults.get(var, "").replace("{RESULTS}", results)
        several = action.nargs in ("*", "+")
        if not value:
            if action.required and action.nargs not in ("*", "?"):
                missing.append(f"{var} ({action.help})" if action.help else var)
            continue
        if not action.option_strings:
            positionals += _words(var, value) if several else [value]
            continue
        opt = next(o for o in action.option_strings if o.startswith("--"))
        if action.nargs == 0:  # a switch: on for 1/yes/true/on, off for 0/no/false/off
            if value.lower() not in (*_ON, *_OFF):
                raise ConfigError(f"make {target}: {var}={value!r}: give 1 (on) or 0 (off)")
            options += [opt] if value.lower() in _ON else []
            continue
        options += [opt, *_words(var, value)] if several else [opt, value]
    if missing:
        raise ConfigError(f"make {target}: set {', '.join(missing)}; `make help T={target}` lists the variables")
    fixed = [w.replace("{RESULTS}", results) for w in t.fixed]
    return [*t.command, *positionals, *fixed, *options]


def check_values(target: str, argv: list[str]) -> None:
    """Parse ``argv`` with the target's parser as its command will: ConfigError, one line naming the
    Make variable, for a value an option refuses (``vrmig``'s own parser says so itself)."""
    t = _bridged(target)
    top = _top_parser(t.module)
    if t.module == VRMIG:
        top.parse_args(argv)
        return
    names: dict[str, str] = {}
    for var, action in variables(_descend(top, t.command), t.fixed):
        for name in (*action.option_strings, action.metavar, action.dest):
            if isinstance(name, str):
                names[name] = var

    def error(message: str) -> None:
        m = re.match(r"argument ([^:]+): (.*)", message)
        if m:  # "argument --reps: invalid int value: 'x'" -> "REPS (--reps): invalid int value: 'x'"
            arg = next((a for a in m.group(1).split("/") if a.startswith("--")), m.group(1))
            message = f"{names.get(arg, arg)} ({arg}): {m.group(2)}" if arg.startswith("-") else m.group(2)
            message = message if arg.startswith("-") else f"{names.get(arg, arg)}: {message}"
        raise ConfigError(f"make {target}: {message}")

    parsers = [top]
    while parsers:
        p = parsers.pop()
        p.error = error  # type: ignore[method-assign]
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction):
                parsers += list(a.choices.values())
    top.parse_args(argv)


def _default_text(target: str, var: str, action: argparse.Action) -> str:
    t = _bridged(target)
    d = t.defaults.get(var, action.default)
    if isinstance(d, str):
        d = d.replace("{RESULTS}", "$(RESULTS)")
    if isinstance(d, (tuple, list)):
        d = ",".join(f"{x:g}" if isinstance(x, float) else str(x) for x in d)
    if d in (None, False, "", argparse.SUPPRESS) or "default" in (action.help or "").lower():
        return ""
    return f" (default {d})"


def listing(target: str) -> str:
    """The variables of ``make <target>``, one per line with the help text and default."""
    t = TARGETS[target]
    if not t.bridged:
        return f"make {target}: {t.summary}; it takes no variables that are checked"
    rows = []
    own = table(target)
    for var, action in own.items():
        required = action.required and action.nargs not in ("*", "?") and var not in t.defaults
        req = "required: " if required else ""
        text = (action.help or "").replace("%%", "%")
        rows.append(f"  {var:22} {req}{text}{_default_text(target, var, action)}".rstrip())
    writes = [w for w in t.fixed if "{RESULTS}" in w]
    if "RESULTS" not in own and writes:
        where = ", ".join(w.replace("{RESULTS}", "$(RESULTS)") for w in writes)
        rows.append(f"  {'RESULTS':22} results root: writes {where} (default {DEFAULT_RESULTS})")
    return f"make {target} variables:\n" + "\n".join(rows)


def overview() -> str:
    """Every target, one line each."""
    lines = ["make <target> [VAR=value ...]; make help T=<target> lists a target's variables (README.md)"]
    lines += [f"  {name:20} {t.summary}" for name, t in TARGETS.items()]
    return "\n".join(lines)


def _shown(module: str, argv: list[str]) -> str:
    return shlex.join(["python", "-m", module, *argv])


def main(argv: list[str] | None = None) -> int:
    """``python -m migrate.cli.make [--list | --check <target> | --dry <target> | <target>]``."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args == ["--list"]:
        which = os.environ.get("T", "").strip()
        if not which:
            print(overview())
            return 0
        if which not in TARGETS:
            near = difflib.get_close_matches(which, list(TARGETS), n=1, cutoff=0.6)
            hint = f" (did you mean {near[0]}?)" if near else ""
            print(f"vrmig: error: make help: T={which} is not a target{hint}; `make help` lists them", file=sys.stderr)
            return 2
        print(listing(which))
        return 0
    mode = args.pop(0) if args and args[0] in ("--check", "--dry") else ""
    mode = mode or ("--dry" if os.environ.get(DRY_ENV, "").strip() == "1" else "")
    bridged = [name for name, t in TARGETS.items() if t.bridged]
    if len(args) != 1 or args[0] not in bridged:
        choices = ",".join(bridged)
        print(f"usage: python -m migrate.cli.make [--list | [--check | --dry] {{{choices}}}]", file=sys.stderr)
        return 2
    target = args[0]
    module = TARGETS[target].module
    try:
        run_argv = argv_for(target, os.environ)
        if module != VRMIG or mode:  # vrmig parses its argv itself when it runs
            check_values(target, run_argv)
    except ConfigError as err:
        print(f"vrmig: error: {err}", file=sys.stderr)
        return 2
    if mode == "--check":
        return 0
    if mode == "--dry":
        print(_shown(module, run_argv))
        return 0
    if module == VRMIG:
        from migrate.cli.main import main as vrmig

        return vrmig(run_argv)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, "-m", module, *run_argv])
    return 0  # not reached: execv replaces the process


if __name__ == "__main__":
    sys.exit(main())
