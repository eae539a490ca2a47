"""Sub-commands ``sweep``, ``report``, ``compare``, ``nightly`` and ``nightly-accept`` of the vrmig
CLI (added to migrate.cli.main's parser by :func:`add_parsers`).  Each handler prints a short human
summary and, as its last line, the directory it wrote; errors are raised as VrmigError."""

from __future__ import annotations

import argparse
from pathlib import Path

from migrate.cli.args import scenario_from_args, whole
from migrate.core.errors import ConfigError, Interrupted
from migrate.core.units import format_rate


def add_parsers(sub: argparse._SubParsersAction, run_parser: argparse.ArgumentParser) -> None:
    """Add the sub-commands; ``sweep`` takes every scenario flag of ``run`` (the grid template)."""
    s = sub.add_parser("sweep", parents=[run_parser], add_help=False, help="migrations over a RATES×SIZES grid")
    s.add_argument("--rates", default=None, help="RATES: comma-separated cross-traffic rates, e.g. 0,100M,200M")
    s.add_argument("--sizes", default=None, help="SIZES: comma-separated frame bytes (default: --size)")
    s.add_argument("--modes", default=None, help="MODES: comma-separated migration modes, e.g. precopy,stopcopy")
    s.add_argument("--bfds", default=None, help="BFDS: BFD timers with PEERING=bgp,bfd, e.g. 50x3,300x3")
    s.add_argument("--reps", type=whole("REPS"), default=None, help="REPS: repetitions per grid point")
    s.add_argument("--seed", type=whole("SEED"), default=None, help="SEED of the randomized order (default: random)")
    s.add_argument("--resume", type=Path, default=None, help="RESUME: a sweep directory to continue")
    s.set_defaults(handler=cmd_sweep)

    r = sub.add_parser("report", help="rebuild the report of sweeps/runs from their raw data (make report)")
    r.add_argument("dirs", nargs="*", type=Path, help="sweep, night, run or results directories")
    r.add_argument("--out", type=Path, default=None, help="output directory (default: in place for one sweep)")
    r.add_argument("--results", type=Path, default=Path("results"), help="results root for new report directories")
    r.set_defaults(handler=cmd_report)

    c = sub.add_parser("compare", help="overlay two sweeps in one report (make compare)")
    c.add_argument("a", type=Path, help="sweep A")
    c.add_argument("b", type=Path, help="sweep B")
    c.add_argument("--out", type=Path, default=None)
    c.add_argument("--results", type=Path, default=Path("results"))
    c.set_defaults(handler=cmd_compare)

    n = sub.add_parser("nightly", help="run the nightly matrix and check for regressions (make nightly)")
    n.add_argument("--matrix", type=Path, default=None, help="matrix TOML (default: migrate/campaigns/nightly.toml)")
    n.add_argument(
        "--history", type=Path, default=None, help="SQLite history (default: RESULTS/nightly/history.sqlite)"
    )
    n.add_argument("--results", type=Path, default=Path("results"))
    n.add_argument(
        "--testbed", type=Path, default=None, help="TESTBED: run the night on the hosts of this lab inventory"
    )
    n.set_defaults(handler=cmd_nightly)

    a = sub.add_parser("nightly-accept", help="promote the latest night to the baseline (make nightly-accept)")
    a.add_argument("--night", default=None, help="night id or directory (default: the latest finished night)")
    a.add_argument("--history", type=Path, default=None)
    a.add_argument("--results", type=Path, default=Path("results"))
    a.set_defaults(handler=cmd_nightly_accept)


def _print_outputs(out) -> None:
    from migrate.campaigns.reporting import REPORT_NAME, format_points, format_timers

    print(format_points(out.points))
    timers = format_timers(out.records)
    if timers:
        print(timers)
    print(f"report: {out.out_dir / REPORT_NAME}   tables: runs.csv points.csv")
    print(out.out_dir)


def cmd_sweep(a: argparse.Namespace) -> int:
    """``vrmig sweep``: a new sweep from RATES/SIZES/REPS, or RESUME=<dir>."""
    testbed = getattr(a, "testbed", None)
    from migrate.campaigns import sweep as sw
    from migrate.campaigns.sweepdir import open_sweep

    if a.resume is not None:
        meta, _ = open_sweep(a.resume)
        grid = meta.get("grid") or {}
        given = {
            "RATES": sw.parse_rates(a.rates) if a.rates else None,
            "SIZES": sw.parse_sizes(a.sizes) if a.sizes is not None else None,
            "REPS": a.reps,
            "MODES": sw.parse_modes(a.modes) if a.modes is not None else None,
            "BFDS": sw.parse_bfds(a.bfds) if a.bfds is not None else None,
        }
        stored = {
            "RATES": tuple(grid.get("rates_bps", ())),
            "SIZES": tuple(grid.get("frame_bytes", ())),
            "REPS": meta["reps"],
            "MODES": tuple(grid.get("modes", ())),
            "BFDS": tuple(sw.parse_bfd(b) for b in grid.get("bfds", ())),
        }
        for k, v in given.items():
            if v is not None and v != stored[k]:
                was = ",".join(format_rate(x) for x in stored[k]) if k == "RATES" else stored[k]
                if k in ("SIZES", "MODES"):
                    was = ",".join(str(x) for x in stored[k]) or "(none)"
                if k == "BFDS":
                    was = ",".join(f"{i}x{m}" for i, m in stored[k]) or "(none)"
                raise ConfigError(f"RESUME={a.resume} was started with {k}={was}; drop {k} or start a new sweep")
        sweep_dir = a.resume
    else:
        if a.rates is None:
            raise ConfigError("RATES is required, e.g. RATES=0,100M,200M (or RESUME=<sweep dir>)")
        if a.reps is None:
            raise ConfigError("REPS is required, e.g. REPS=5")
        template = scenario_from_args(a)
        sizes = sw.parse_sizes(a.sizes) if a.sizes is not None else (template.frame_bytes,)
        seed = a.seed if a.seed is not None else sw.new_seed()
        modes = sw.parse_modes(a.modes) if a.modes is not None else ()
        bfds = sw.parse_bfds(a.bfds) if a.bfds is not None else ()
        plan = sw.grid_plan(template, sw.parse_rates(a.rates), sizes, sw.check_reps(a.reps), seed, modes, bfds)
        sweep_dir = sw.new_sweep(plan, a.results, testbed)
    try:
        out = sw.run_sweep(sweep_dir, testbed)
    except Interrupted as err:
        raise Interrupted(f"{err}; finished runs are kept: resume with `make sweep RESUME={sweep_dir}`") from None
    _print_outputs(out)
    return 0


def cmd_report(a: argparse.Namespace) -> int:
    """``vrmig report DIR...``."""
    from migrate.campaigns.compare import report

    _print_outputs(report(a.dirs, a.results, a.out))
    return 0


def cmd_compare(a: argparse.Namespace) -> int:
    """``vrmig compare A B``."""
    from migrate.campaigns.compare import compare

    _print_outputs(compare(a.a, a.b, a.results, a.out))
    return 0


def cmd_nightly(a: argparse.Namespace) -> int:
    """``vrmig nightly``: exit 1 on a regression."""
    from migrate.campaigns.nightly import DEFAULT_MATRIX, format_night, run_nightly

    res = run_nightly(a.matrix or DEFAULT_MATRIX, a.results, a.history, a.testbed)
    print(format_night(res))
    print(res.night_dir)
    return res.exit_code


def cmd_nightly_accept(a: argparse.Namespace) -> int:
    """``vrmig nightly-accept``."""
    from migrate.campaigns.nightly import accept

    row = accept(a.results, a.history, a.night)
    print(
        f"accepted night {row['night_id']} ({row['n_completed']} completed runs, status {row['status']}); "
        f"{row['n_accepted']} accepted night(s) now pooled as the history"
    )
    print(row["night_dir"])
    return 0
