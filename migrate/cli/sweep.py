"""Sub-commands ``sweep``, ``report``, ``compare``, ``nightly`` and ``nightly-accept`` of the vrmig
CLI (added to migrate.cli.main's parser by :func:`add_parsers`).  Each handler prints a short human
summary and, as its last line, the directory it wrote; errors are raised as VrmigError."""

from __future__ import annotations

import argparse
from pathlib import Path

from migrate.cli.plot_formats import add_plot_formats_argument
from migrate.core.convert import whole
from migrate.core.errors import ConfigError, Interrupted
from migrate.core.units import format_rate
from migrate.experiment.args import knob_values, scenario_from_args


def _add_campaign_place(p: argparse.ArgumentParser, testbed_help: str) -> None:
    """Where a campaign runs and writes: ``--testbed`` (a lab inventory; default this machine) and ``--results``."""
    p.add_argument("--testbed", type=Path, default=None, help=testbed_help)
    p.add_argument("--results", type=Path, default=Path("results"), help="results root directory")


def add_parsers(sub: argparse._SubParsersAction, run_parser: argparse.ArgumentParser) -> None:
    """Add the sub-commands; ``sweep`` takes every scenario flag of ``run`` (the grid template)."""
    s = sub.add_parser(
        "sweep", parents=[run_parser], add_help=False,
        help="migrations over a RATES×SIZES grid (a QEMU knob given a list, e.g. MULTIFD=1,4, is an axis too)",
    )  # fmt: skip
    s.add_argument("--rates", default=None, help="RATES: comma-separated cross-traffic rates, e.g. 0,100M,200M")
    s.add_argument("--sizes", default=None, help="SIZES: comma-separated frame bytes (default: --size)")
    s.add_argument("--modes", default=None, help="MODES: comma-separated migration modes, e.g. precopy,stopcopy")
    s.add_argument("--bfds", default=None, help="BFDS: BFD timers with PEERING=bgp,bfd, e.g. 50x3,300x3")
    s.add_argument("--reps", type=whole("REPS"), default=None, help="REPS: repetitions per grid point")
    s.add_argument("--seed", type=whole("SEED"), default=None, help="SEED of the randomized order (default: random)")
    s.add_argument("--resume", type=Path, default=None, help="RESUME: a sweep directory to continue")
    s.set_defaults(handler=cmd_sweep)

    k = sub.add_parser("campaign", help="run a campaign file (make campaign FILE=campaigns/<name>.toml)")
    # a metavar in capitals is the argument's Make variable (migrate/cli/make.py)
    k.add_argument(
        "files", nargs="*", type=Path, metavar="FILE", help="the campaign file(s); several only with CHECK=1"
    )
    k.add_argument("--reps", type=whole("REPS"), default=None, help="override the file's reps")
    k.add_argument("--seed", type=whole("SEED"), default=None, help="override the file's seed")
    k.add_argument("--resume", type=Path, default=None, help="a campaign directory to continue")
    k.add_argument("--check", action="store_true", help="1: validate the file(s), run nothing")
    k.add_argument(
        "--scheduler", default=None, help="SCHEDULER: a Dask scheduler's address; the runs go to its lab workers"
    )
    k.add_argument("--labs", choices=("refuse", "axis"), default="refuse",
                   help="LABS: with SCHEDULER, labs that differ refuse the campaign or become its axis")  # fmt: skip
    _add_campaign_place(k, "run on the hosts of this lab inventory")
    k.set_defaults(handler=cmd_campaign)

    pp = sub.add_parser("paper", help="paper 004's campaigns and the side-by-side report (make paper)")
    pp.add_argument("--reps", type=whole("REPS"), default=None, help="override the campaigns' repetitions")
    pp.add_argument("--fig2", type=Path, default=None, help="reuse (or resume) this baseline directory")
    pp.add_argument("--fig3", type=Path, default=None, help="reuse (or resume) this campaign directory")
    pp.add_argument("--parts", default="fig2,fig3", help="which campaigns to run (fig2, fig3)")
    _add_campaign_place(pp, "run both campaigns on this lab's hosts")
    pp.set_defaults(handler=cmd_paper)

    r = sub.add_parser("report", help="rebuild the report of sweeps/runs from their raw data (make report)")
    r.add_argument("dirs", nargs="*", type=Path, metavar="RUNS", help="sweep, night, run or results directories")
    r.add_argument("--out", type=Path, default=None, help="output directory (default: in place for one sweep)")
    r.add_argument("--results", type=Path, default=Path("results"), help="results root for new report directories")
    add_plot_formats_argument(r)
    r.set_defaults(handler=cmd_report)

    ab = sub.add_parser(
        "ab", parents=[run_parser], add_help=False,
        help='two stacks or settings of one scenario side by side (make ab A="QEMU=system" B="QEMU=10.0")',
    )  # fmt: skip
    ab.add_argument("--a", required=True, metavar="A", help='arm A\'s variables, e.g. "QEMU=system"')
    ab.add_argument("--b", required=True, metavar="B", help='arm B\'s variables, e.g. "QEMU=10.0"')
    ab.add_argument("--reps", type=whole("REPS"), default=None, help="REPS: runs per arm (30)")
    ab.add_argument("--seed", type=whole("SEED"), default=None, help="SEED of the interleaved order (default: random)")
    ab.set_defaults(handler=cmd_ab)
    c = sub.add_parser("compare", help="overlay two sweeps in one report (make compare)")
    c.add_argument("a", type=Path, help="sweep (or night) A")
    c.add_argument("b", type=Path, help="sweep (or night) B")
    c.add_argument("--out", type=Path, default=None, help="output directory (default: a new one under RESULTS)")
    c.add_argument("--results", type=Path, default=Path("results"), help="results root for new report directories")
    c.set_defaults(handler=cmd_compare)

    n = sub.add_parser("nightly", help="run the nightly matrix and check for regressions (make nightly)")
    n.add_argument("--matrix", type=Path, default=None, help="matrix TOML (default: migrate/campaigns/nightly.toml)")
    n.add_argument(
        "--history", type=Path, default=None, help="SQLite history (default: RESULTS/nightly/history.sqlite)"
    )
    n.add_argument("--results", type=Path, default=Path("results"), help="results root (the night goes to nightly/)")
    n.add_argument("--testbed", type=Path, default=None, help="run the night on the hosts of this lab inventory")
    n.add_argument(
        "--ab", default=None,
        help="the commit the matrix's [ab] runs against tonight's in the same night (default: that of the "
        "most recently accepted night; none: no A/B)",
    )  # fmt: skip
    n.set_defaults(handler=cmd_nightly)

    a = sub.add_parser("nightly-accept", help="promote the latest night to the baseline (make nightly-accept)")
    a.add_argument("--night", default=None, help="night id or directory (default: the latest finished night)")
    a.add_argument(
        "--history", type=Path, default=None, help="SQLite history (default: RESULTS/nightly/history.sqlite)"
    )
    a.add_argument("--results", type=Path, default=Path("results"), help="results root of the nights")
    a.set_defaults(handler=cmd_nightly_accept)


def _print_outputs(out, comparison: str = "", tables: str = "runs.csv points.csv") -> None:
    from migrate.campaigns.reporting import REPORT_NAME, format_knobs, format_labs, format_points, format_timers

    print(format_points(out.points))
    for table in (format_timers(out.records), format_knobs(out.points), format_labs(out.records)):
        if table:
            print(table)
    if comparison:
        print(comparison)
    print(f"report: {out.out_dir / REPORT_NAME}   tables: {tables}")
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
        stored_knobs = grid.get("knobs") or {}
        for knob, values in knob_values(a):
            if len(values) > 1 and values != stored_knobs.get(knob.var):
                was = "/" if knob.tuple_valued else ","
                was = was.join(stored_knobs.get(knob.var) or []) or "(not an axis)"
                raise ConfigError(
                    f"RESUME={a.resume} was started with {knob.var}={was}; drop {knob.var} or start a new sweep"
                )
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
        template = scenario_from_args(a, axes=True)
        sizes = sw.parse_sizes(a.sizes) if a.sizes is not None else (template.frame_bytes,)
        seed = a.seed if a.seed is not None else sw.new_seed()
        modes = sw.parse_modes(a.modes) if a.modes is not None else ()
        bfds = sw.parse_bfds(a.bfds) if a.bfds is not None else ()
        rates = sw.parse_rates(a.rates)
        axes = [(k.var, values) for k, values in knob_values(a) if len(values) > 1]  # MULTIFD=1,4: an axis
        plan = sw.grid_plan(template, rates, sizes, sw.check_reps(a.reps), seed, modes, bfds, axes)
        sweep_dir = sw.new_sweep(plan, a.results, testbed)
        from migrate.campaigns.campaign import sweep_campaign

        (sweep_dir / sw.CAMPAIGN_COPY).write_text(sweep_campaign(a, rates, sizes, plan.reps, seed, modes, bfds, axes))
    try:
        out = sw.run_sweep(sweep_dir, testbed)
    except Interrupted as err:
        raise Interrupted(f"{err}; finished runs are kept: resume with `make sweep RESUME={sweep_dir}`") from None
    _print_outputs(out)
    return 0


def cmd_ab(a: argparse.Namespace) -> int:
    """``vrmig ab``: arm A against arm B (migrate.campaigns.abarms); exit 1 on a regression of B."""
    from migrate.campaigns import abarms
    from migrate.campaigns import campaign as cp
    from migrate.campaigns import sweep as sw

    arm_a, arm_b = abarms.parse_arm(a.a, "A"), abarms.parse_arm(a.b, "B")
    reps = a.reps if a.reps is not None else abarms.AB_REPS
    if reps < 1:
        raise ConfigError(f"REPS={reps}: give at least 1 run per arm ({abarms.AB_REPS} by default)")
    seed = a.seed if a.seed is not None else sw.new_seed()
    template = cp.template_variables(a)
    try:
        out_dir, j = abarms.run_ab(template, arm_a, arm_b, reps, seed, a.results, getattr(a, "testbed", None))
    except Interrupted as err:
        raise Interrupted(f"{err}; finished runs are kept") from None
    print(f"report: {out_dir / 'report.html'}   tables: {abarms.AB_CSV} runs.csv points.csv")
    if j.power_note:
        print(j.power_note)
    print(j.line(arm_a, arm_b))
    print(out_dir)
    return j.exit_code


def cmd_campaign(a: argparse.Namespace) -> int:
    """``vrmig campaign FILE``: validate (CHECK=1), run, or RESUME a campaign."""
    from migrate.campaigns import campaign as cp
    from migrate.campaigns import sweep as sw

    if a.check:
        if not a.files:
            raise ConfigError("FILE is required, e.g. FILE=campaigns/knobs-kvm.toml")
        for f in a.files:
            c = cp.load(f, a.reps, a.seed)
            n = c.n_runs
            budget = f", budget {cp._hms(c.budget_s)}" if c.budget_s else ""
            print(f"{f}: {c.command} campaign {c.name}: {len(c.points)} points x {c.reps} reps = {n} runs, "
                  f"about {cp._hms(c.estimate_s())}{budget}")  # fmt: skip
        return 0
    if len(a.files) > 1:
        raise ConfigError("give one FILE to run (several only with CHECK=1)")
    if a.resume is not None:
        from migrate.campaigns.sweepdir import open_sweep

        meta, _ = open_sweep(a.resume)
        rec = meta.get("campaign")
        if not isinstance(rec, dict):
            raise ConfigError(f"RESUME={a.resume} is not a campaign directory (resume a sweep with make sweep)")
        if a.files:
            c = cp.load(a.files[0], a.reps, a.seed)
            if c.sha256 != rec.get("sha256") and c.text != (a.resume / sw.CAMPAIGN_COPY).read_text():
                raise ConfigError(f"RESUME={a.resume} ran another version of {a.files[0]}: drop FILE or start anew")
        if a.reps is not None and a.reps != meta.get("reps"):
            raise ConfigError(f"RESUME={a.resume} was started with REPS={meta.get('reps')}; drop REPS")
        sweep_dir = a.resume
        if a.scheduler is None:
            return _run_campaign(sweep_dir, a, None)
        from migrate.campaigns.distributed import Engine

        with Engine(a.scheduler) as engine:
            return _run_campaign(sweep_dir, a, engine)
    if not a.files:
        raise ConfigError("FILE is required, e.g. make campaign FILE=campaigns/knobs-kvm.toml")
    c = cp.load(a.files[0], a.reps, a.seed)
    if a.scheduler is None:
        if c.command == "baseline":
            return _baseline_campaign(c, a)
        return _run_campaign(sw.new_campaign(c, a.results, a.testbed), a, None)
    if c.command == "baseline":
        raise ConfigError("SCHEDULER= runs migrate campaigns; a baseline campaign runs on one testbed (drop SCHEDULER)")
    if a.testbed is not None:
        raise ConfigError("TESTBED= and SCHEDULER= together: a campaign on workers runs on the workers' labs")
    from migrate.campaigns.distributed import Engine

    with Engine(a.scheduler) as engine:
        return _run_campaign(sw.new_distributed_campaign(c, a.results, engine, a.labs), a, engine)


def _run_campaign(sweep_dir: Path, a: argparse.Namespace, engine) -> int:
    from migrate.campaigns import sweep as sw

    try:
        out = sw.run_sweep(sweep_dir, a.testbed, engine)
    except Interrupted as err:
        again = f" SCHEDULER={a.scheduler}" if a.scheduler else ""
        raise Interrupted(
            f"{err}; finished runs are kept: resume with `make campaign RESUME={sweep_dir}{again}`"
        ) from None
    _print_outputs(out)
    return 0


def _baseline_campaign(c, a: argparse.Namespace) -> int:
    """A baseline campaign: one ``vrmig baseline`` over the campaign's variables and reps."""
    from migrate.campaigns import campaign as cp
    from migrate.cli import baseline as bl
    from migrate.labs.where import where_for

    extra = where_for(a.testbed).argv()
    ns = cp.namespace("baseline", c.points[0].variables, "--reps", str(c.reps), "--results", str(a.results), *extra)
    return bl.run_command(ns, campaign=c)


def cmd_paper(a: argparse.Namespace) -> int:
    """``vrmig paper``: the paper's campaigns, then paper.md/paper.csv/report.html side by side."""
    import shlex
    import sys

    from migrate.campaigns.paper import format_claims, run_paper

    try:
        out, claims = run_paper(
            a.results, a.reps, a.fig2, a.fig3, shlex.join(["vrmig", *sys.argv[1:]]), a.parts, a.testbed
        )
    except Interrupted as err:
        raise Interrupted(f"{err}; finished runs are kept: give their directories as FIG2=/FIG3= to go on") from None
    print(format_claims(claims))
    print(f"report: {out / 'report.html'}   tables: paper.md paper.csv")
    print(out)
    return 0


def cmd_report(a: argparse.Namespace) -> int:
    """``vrmig report DIR...``."""
    from migrate.campaigns.compare import report

    _print_outputs(report(a.dirs, a.results, a.out))
    return 0


def cmd_compare(a: argparse.Namespace) -> int:
    """``vrmig compare A B``."""
    from migrate.campaigns.compare import COMPARE_CSV, compare, format_comparison

    out = compare(a.a, a.b, a.results, a.out)
    _print_outputs(out, format_comparison(out.rows), f"runs.csv points.csv {COMPARE_CSV}")
    return 0


def cmd_nightly(a: argparse.Namespace) -> int:
    """``vrmig nightly``: exit 1 on a regression."""
    from migrate.campaigns.nightly import DEFAULT_MATRIX, format_night, run_nightly

    res = run_nightly(a.matrix or DEFAULT_MATRIX, a.results, a.history, a.testbed, a.ab)
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
