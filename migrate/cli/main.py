"""Command line: ``vrmig run`` (= ``make migrate``) and ``vrmig clean-testbed``.

Errors print one line and exit non-zero; tracebacks only with ``--debug``.  The last line
printed by ``run`` is the results directory."""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import io
import logging
import signal
import sys
from pathlib import Path

from migrate.cli.args import Parser, boolean, rate, scenario_from_args, seconds, whole
from migrate.core.errors import VrmigError
from migrate.experiment.scenario import FAULTS

log = logging.getLogger("vrmig")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (flags mirror the Make variables)."""
    p = Parser(prog="vrmig", description="Live-migrate a virtual router and measure what traffic sees.")
    p.add_argument("--debug", action="store_true", help="verbose logging and tracebacks")
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="one migration experiment (make migrate)")
    r.add_argument("--hv", default="kvm", help="hypervisor driver (HV): kvm")
    r.add_argument("--driver", default="qmp", help="how HV=kvm is driven (DRIVER): qmp|libvirt")
    r.add_argument("--mode", default="precopy", help="precopy|stopcopy (MODE)")
    r.add_argument("--rate", type=rate("RATE"), default=None, help="cross-traffic bit/s, K/M/G (100M; HV=xen 1M)")
    r.add_argument("--size", type=whole("SIZE"), default=1500, help="Ethernet frame bytes 64-1518")
    r.add_argument("--ip", type=whole("IP"), default=4, help="4|6 for the cross-traffic and probes")
    r.add_argument("--duration", type=seconds("DURATION"), default=20.0, help="seconds of traffic (at least)")
    r.add_argument("--migrate-at", type=seconds("MIGRATE_AT"), default=5.0, help="seconds after traffic start")
    r.add_argument("--after", type=seconds("AFTER"), default=3.0, help="seconds of traffic after the migration")
    r.add_argument("--sample-ms", type=whole("SAMPLE_MS"), default=10)
    r.add_argument("--probe-ms", type=whole("PROBE_MS"), default=10)
    r.add_argument("--mem", type=whole("MEM"), default=256, help="guest MiB")
    r.add_argument("--router", default="frr", help="frr|bird|xorp")
    r.add_argument("--nic", default="virtio", help="virtio|e1000")
    r.add_argument("--accel", default="auto", help="auto|kvm|tcg")
    r.add_argument("--gen", default="builtin", help="cross-traffic backend")
    r.add_argument("--miglink", type=rate("MIGLINK"), default=None, help="cap the migration link, e.g. 1G")
    r.add_argument("--downtime-limit", type=whole("DOWNTIME_LIMIT"), default=None, help="QEMU downtime-limit ms")
    r.add_argument("--max-bandwidth", type=rate("MIGBW"), default=None, help="QEMU max-bandwidth bit/s")
    r.add_argument("--auto-converge", type=boolean(), default=False)
    r.add_argument("--xbzrle", type=boolean(), default=False)
    r.add_argument("--postcopy", type=boolean(), default=False)
    r.add_argument("--migrate-timeout", type=seconds("MIGRATE_TIMEOUT"), default=None, help="s (120; HV=xen 600)")
    r.add_argument("--boot-timeout", type=seconds("BOOT_TIMEOUT"), default=120.0)
    r.add_argument("--xen-guest", default="pvh", help="HV=xen domU type (XEN_GUEST): pvh (pv is refused)")
    r.add_argument("--xen-mig-mtu", type=whole("XEN_MIG_MTU"), default=1500, help="HV=xen: migration link MTU")
    r.add_argument("--rib-routes", type=whole("RIB_ROUTES"), default=0, help="routes in the router's RIB (bird)")
    r.add_argument("--peering", default="", help="routing sessions with peers on both segments: bgp or bgp,bfd")
    r.add_argument("--bfd", default="50x3", help="BFD <interval ms>x<multiplier> (PEERING with bfd)")
    r.add_argument("--bgp-hold", type=whole("BGP_HOLD"), default=9, help="BGP hold time s (keepalive = hold/3)")
    r.add_argument(
        "--testbed",
        type=Path,
        default=None,
        help="an inventory of lab hosts reached over SSH (docs/testbed.md); default: the embedded testbed",
    )
    r.add_argument("--criu-host", default="local", help="HV=criu: local, or vm (a VM whose kernel has soft-dirty)")
    r.add_argument("--fault", default=None, help="inject a fault (chaos testing): " + ", ".join(FAULTS))
    r.add_argument("--results", type=Path, default=Path("results"), help="results root directory")
    ct = sub.add_parser("clean-testbed", help="remove what crashed runs left behind (from their state files)")
    ct.add_argument(
        "--testbed", type=Path, default=None, help="also on the hosts of this inventory (runs of this machine only)"
    )
    from migrate.cli.baseline import add_parser as add_baseline_parser

    add_baseline_parser(sub)
    from migrate.cli.sweep import add_parsers as add_sweep_parsers

    add_sweep_parsers(sub, r)
    from migrate.cli.calibrate import add_parser as add_calibrate_parser

    add_calibrate_parser(sub)
    from migrate.cli.lab import add_parsers as add_lab_parsers

    add_lab_parsers(sub)
    from migrate.cli.hosts import add_parser as add_hosts_parser

    add_hosts_parser(sub)
    from migrate.cli.hosts_setup import add_parser as add_hosts_setup_parser

    add_hosts_setup_parser(sub)
    return p


def _clean_lab(path: Path) -> int:
    """clean-testbed TESTBED=: what dead runs of this machine left on the lab's hosts."""
    import tempfile

    from migrate.testbed.hosts import connect
    from migrate.testbed.inventory import load
    from migrate.testbed.labbed import clean_lab

    inv = load(path)
    with tempfile.TemporaryDirectory(prefix="vrmig-clean-") as d:
        hosts = connect(inv, Path(d))
        try:
            done = clean_lab(hosts, inv.deploy_dir)
        finally:
            for h in hosts.values():
                h.close()
    for line in done:
        print(line)
    print(f"{inv.name}: {'nothing left by dead runs' if not done else f'{len(done)} action(s)'}")
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
    try:
        args = build_parser().parse_args(argv)
        if args.command == "clean-testbed":
            from migrate.core.registry import clean_stale

            cleaned = clean_stale()
            print(f"cleaned {len(cleaned)} stale run(s)" + (f": {', '.join(cleaned)}" if cleaned else ""))
            if args.testbed is not None:
                return _clean_lab(args.testbed)
            return 0
        if args.command == "baseline":
            from migrate.cli.baseline import run_command as run_baseline_command

            return run_baseline_command(args)
        if getattr(args, "handler", None) is not None:  # sweep, report, compare, nightly, nightly-accept
            return args.handler(args)
        scenario = scenario_from_args(args)
        from migrate.experiment.run import run

        run_dir = run(scenario, args.results, testbed=args.testbed)
        _print_summary(run_dir)
        print(run_dir)
        import json

        status = json.loads((run_dir / "meta.json").read_text()).get("status")
        return 0 if status == "completed" else 4
    except VrmigError as err:
        if debug:
            log.exception("error")
        print(f"vrmig: error: {err}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        print("vrmig: interrupted", file=sys.stderr)
        return 130


def _print_summary(run_dir: Path) -> None:
    summary = run_dir / "summary.json"
    if not summary.exists():
        print(f"(no summary.json; analysis failed — see the log; raw data in {run_dir})")
        return
    import json

    from analysis.present.table import format_table

    print(format_table(json.loads(summary.read_text())))
