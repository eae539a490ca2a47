"""Command line: ``vrmig run`` (= ``make migrate``) and ``vrmig clean-testbed``; every subcommand
names its handler (``set_defaults(handler=...)``), which ``main`` calls.

Errors print one line and exit non-zero; tracebacks only with ``--debug``.  The last line
printed by ``run`` is the results directory."""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import io
import logging
import os
import signal
import sys
from pathlib import Path

from migrate.cli.plot_formats import add_plot_formats_argument, apply_plot_formats
from migrate.core.atomic import write_text
from migrate.core.errors import ConfigError, VrmigError
from migrate.core.rundir import METRICS_PROM, SUMMARY_JSON, read_meta, read_summary
from migrate.experiment.args import Parser, add_run_arguments, add_run_only_arguments, scenario_from_args

log = logging.getLogger("vrmig")


def version_line() -> str:
    """``vrmig <version> (commit <sha>[-dirty] | not a git checkout), results format <n>``: what
    a bug report or a paper's methods section needs to name the suite that measured."""
    from importlib.metadata import PackageNotFoundError, version

    from migrate.core.meta import FORMAT_VERSION, git_commit

    try:
        release = version("vrmig")
    except PackageNotFoundError:
        release = "(not installed: run `make setup`)"
    commit = git_commit()
    where = f"commit {commit}" if commit else "not a git checkout"
    return f"vrmig {release} ({where}), results format {FORMAT_VERSION}"


class _VersionAction(argparse.Action):
    """``--version``: print :func:`version_line` and exit 0 (git is asked only then)."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS, **kw: object) -> None:
        super().__init__(
            option_strings, dest, nargs=0, default=argparse.SUPPRESS, help="print the suite's version and commit"
        )

    def __call__(self, parser: argparse.ArgumentParser, *_args: object, **_kw: object) -> None:
        print(version_line())
        parser.exit(0)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (flags mirror the Make variables)."""
    p = Parser(prog="vrmig", description="Live-migrate a virtual router and measure what traffic sees.")
    p.add_argument("--version", action=_VersionAction)
    p.add_argument("--debug", action="store_true", help="verbose logging and tracebacks")
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="one migration experiment (make migrate)")
    add_run_arguments(r)
    add_plot_formats_argument(r)  # before sweep and ab copy run's flags: theirs too
    r.set_defaults(handler=_run_command)
    ct = sub.add_parser("clean-testbed", help="remove what crashed runs left behind (from their state files)")
    ct.add_argument(
        "--testbed", type=Path, default=None, help="also on the hosts of this inventory (runs of this machine only)"
    )
    ct.set_defaults(handler=_clean_testbed)
    from migrate.baseline.args import add_parser as add_baseline_parser

    add_baseline_parser(sub)
    sub.choices["baseline"].set_defaults(handler=_baseline_command)
    from migrate.cli.sweep import add_parsers as add_sweep_parsers

    add_sweep_parsers(sub, r)
    from migrate.cli.calibrate import add_parser as add_calibrate_parser

    add_calibrate_parser(sub)
    from migrate.cli.lab import add_parsers as add_lab_parsers

    add_lab_parsers(sub)
    from migrate.cli.hosts import add_parser as add_hosts_parser

    add_hosts_parser(sub)
    from migrate.cli.worker import add_parsers as add_worker_parsers

    add_worker_parsers(sub)
    from migrate.cli.hosts_setup import add_parser as add_hosts_setup_parser

    add_hosts_setup_parser(sub)
    from migrate.cli.delegate import add_parsers as add_delegate_parsers

    add_delegate_parsers(sub)
    # run's alone (added after sweep and ab copied run's flags); Make variable METRICS
    add_run_only_arguments(r)
    return p


def _baseline_command(args: argparse.Namespace) -> int:
    """``baseline`` (make baseline)."""
    from migrate.cli.baseline import run_command

    return run_command(args)


def _run_command(args: argparse.Namespace) -> int:
    """``run`` (make migrate): one migration, its summary table, and the results directory last;
    with ``--metrics FILE``, its metrics.prom copied to FILE (checked before anything starts)."""
    if args.metrics is not None:
        check_metrics_file(args.metrics)
    scenario = scenario_from_args(args)
    from migrate.experiment.run import run
    from migrate.model.scenario import profile_of

    run_dir = run(scenario, args.results, testbed=args.testbed)
    _print_summary(run_dir)
    meta = read_meta(run_dir)
    status = meta.get("status")
    rc = 0 if status == "completed" else 4
    if status != "completed" and meta.get("failure_class") == "setup" and profile_of(scenario.router) is not None:
        # a router of a profile file that never became ready: the profile is the bad input
        print(
            f"vrmig: error: ROUTER={scenario.router}: {meta.get('failure')}: check the profile's [config] template "
            f"and [readiness] (the rendered configuration and the console are in {run_dir})",
            file=sys.stderr,
        )
        rc = 2
    if args.metrics is not None and not _write_metrics_file(run_dir, args.metrics):
        rc = rc or 1
    print(run_dir)
    return rc


def check_metrics_file(path: Path) -> None:
    """ConfigError (exit 2, before anything runs) unless ``path`` can be written as a file: it is
    not a directory nor another kind of non-regular file (a device would be replaced), and its
    directory exists and is writable."""
    where = f"METRICS={path}"
    if path.is_dir():
        raise ConfigError(f"{where} is a directory: give a file name in it, e.g. METRICS={path / METRICS_PROM}")
    if path.exists() and not path.is_file():
        raise ConfigError(f"{where} exists and is not a regular file: give the path of a file")
    parent = path.resolve().parent
    if not parent.exists():
        raise ConfigError(f"{where}: the directory {parent} does not exist: create it or choose another path")
    if not parent.is_dir():
        raise ConfigError(f"{where}: {parent} is not a directory: choose a path in an existing directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ConfigError(f"{where}: the directory {parent} is not writable: choose a directory you can write to")


def _write_metrics_file(run_dir: Path, path: Path) -> bool:
    """Write the run's metrics.prom (if analysis left none, the same text made from its meta.json
    and summary.json) to ``path`` atomically; False, with the reason logged, if that failed."""
    from analysis.run import metrics_text

    own = run_dir / METRICS_PROM
    try:
        text = own.read_text() if own.is_file() else metrics_text(run_dir)
        write_text(path.resolve(), text)
    except (OSError, UnicodeError) as err:
        log.error("METRICS=%s not written: %s (the run's own copy: %s)", path, err, own)
        return False
    return True


def _clean_testbed(args: argparse.Namespace) -> int:
    """``clean-testbed``: what dead runs left here (and on a lab's hosts with ``--testbed``)."""
    from migrate.core.registry import clean_stale

    cleaned = clean_stale()
    print(f"cleaned {len(cleaned)} stale run(s)" + (f": {', '.join(cleaned)}" if cleaned else ""))
    from migrate.campaigns.ab import clean_stale_trees

    for tree in clean_stale_trees():
        print(f"removed a dead night's A/B worktree {tree}")
    from migrate.labs.where import where_for

    for line in where_for(args.testbed).clean_hosts():
        print(line)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status.  ``kill -USR1 PID`` makes a live run print every
    thread's Python stack to its stderr (how ``make chaos`` names the cause of a hung run)."""
    with contextlib.suppress(AttributeError, ValueError, io.UnsupportedOperation):  # stderr without a file
        faulthandler.register(signal.SIGUSR1, file=sys.stderr, all_threads=True, chain=False)
    debug = "--debug" in (argv if argv is not None else sys.argv[1:])
    logging.basicConfig(
        level=logging.DEBUG if debug else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s" if debug else "vrmig: %(message)s",
        stream=sys.stderr,
    )
    logging.getLogger("pyroute2").setLevel(logging.WARNING)
    words = list(argv if argv is not None else sys.argv[1:])
    first = next((i for i, w in enumerate(words) if not w.startswith("-")), len(words))  # the command
    try:
        from migrate.cli.delegate import dispatch

        # chaos, analyse and bench: their own modules' parsers take every word after the command
        delegated = dispatch(words[first:]) if all(w == "--debug" for w in words[:first]) else None
        if delegated is not None:
            return delegated
        args = build_parser().parse_args(argv)
        apply_plot_formats(args)
        return args.handler(args)
    except VrmigError as err:
        if debug:
            log.exception("error")
        print(f"vrmig: error: {err}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        print("vrmig: interrupted", file=sys.stderr)
        return 130


def _print_summary(run_dir: Path) -> None:
    summary = run_dir / SUMMARY_JSON
    if not summary.exists():
        print(f"(no summary.json; analysis failed — see the log; raw data in {run_dir})")
        return
    from analysis.present.table import format_table

    print(format_table(read_summary(run_dir)))
