"""Command line: ``vrmig run`` (= ``make migrate``) and ``vrmig clean-testbed``.

Errors print one line and exit non-zero; tracebacks only with ``--debug``.  The last line
printed by ``run`` is the results directory."""

from __future__ import annotations

import argparse
import logging
import re
import sys
from pathlib import Path

from migrate.core.errors import ConfigError, VrmigError
from migrate.core.units import parse_rate_bps
from migrate.experiment.scenario import FAULTS, Scenario

log = logging.getLogger("vrmig")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        # "argument --migrate-at: ..." -> "MIGRATE_AT (--migrate-at): ...", named as in the Makefile
        m = re.match(r"argument (--[\w-]+)(?:/\S+)?: (.*)", message)
        if m:
            var = m.group(1).lstrip("-").replace("-", "_").upper()
            hint = " (a negative value is not allowed)" if "expected one argument" in m.group(2) else ""
            message = f"{var} ({m.group(1)}): {m.group(2)}{hint}"
        raise ConfigError(message)


def _int(name: str):
    def conv(text: str) -> int:
        try:
            return int(text)
        except ValueError:
            raise ConfigError(f"{name}={text!r} is not a whole number") from None

    return conv


def _float(name: str):
    def conv(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise ConfigError(f"{name}={text!r} is not a number of seconds") from None
        return value

    return conv


def _rate(name: str):
    return lambda text: parse_rate_bps(text, name)


def _bool(text: str) -> bool:
    if text.lower() in ("1", "yes", "true", "on"):
        return True
    if text.lower() in ("0", "no", "false", "off", ""):
        return False
    raise ConfigError(f"{text!r} is not a boolean: use 1 or 0")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (flags mirror the Make variables)."""
    p = _Parser(prog="vrmig", description="Live-migrate a virtual router and measure what traffic sees.")
    p.add_argument("--debug", action="store_true", help="verbose logging and tracebacks")
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="one migration experiment (make migrate)")
    r.add_argument("--hv", default="kvm", help="hypervisor driver (HV): kvm")
    r.add_argument("--driver", default="qmp", help="how HV=kvm is driven (DRIVER): qmp|libvirt")
    r.add_argument("--mode", default="precopy", help="precopy|stopcopy (MODE)")
    r.add_argument("--rate", type=_rate("RATE"), default=None, help="cross-traffic bit/s, K/M/G (100M; HV=xen 1M)")
    r.add_argument("--size", type=_int("SIZE"), default=1500, help="Ethernet frame bytes 64-1518")
    r.add_argument("--ip", type=_int("IP"), default=4, help="4|6 for the cross-traffic and probes")
    r.add_argument("--duration", type=_float("DURATION"), default=20.0, help="seconds of traffic (at least)")
    r.add_argument("--migrate-at", type=_float("MIGRATE_AT"), default=5.0, help="seconds after traffic start")
    r.add_argument("--after", type=_float("AFTER"), default=3.0, help="seconds of traffic after the migration")
    r.add_argument("--sample-ms", type=_int("SAMPLE_MS"), default=10)
    r.add_argument("--probe-ms", type=_int("PROBE_MS"), default=10)
    r.add_argument("--mem", type=_int("MEM"), default=256, help="guest MiB")
    r.add_argument("--router", default="frr", help="frr|bird|xorp")
    r.add_argument("--nic", default="virtio", help="virtio|e1000")
    r.add_argument("--accel", default="auto", help="auto|kvm|tcg")
    r.add_argument("--gen", default="builtin", help="cross-traffic backend")
    r.add_argument("--miglink", type=_rate("MIGLINK"), default=None, help="cap the migration link, e.g. 1G")
    r.add_argument("--downtime-limit", type=_int("DOWNTIME_LIMIT"), default=None, help="QEMU downtime-limit ms")
    r.add_argument("--max-bandwidth", type=_rate("MIGBW"), default=None, help="QEMU max-bandwidth bit/s")
    r.add_argument("--auto-converge", type=_bool, default=False)
    r.add_argument("--xbzrle", type=_bool, default=False)
    r.add_argument("--postcopy", type=_bool, default=False)
    r.add_argument("--migrate-timeout", type=_float("MIGRATE_TIMEOUT"), default=None, help="s (120; HV=xen 600)")
    r.add_argument("--boot-timeout", type=_float("BOOT_TIMEOUT"), default=120.0)
    r.add_argument("--xen-guest", default="pvh", help="HV=xen domU type (XEN_GUEST): pvh (pv is refused)")
    r.add_argument("--xen-mig-mtu", type=_int("XEN_MIG_MTU"), default=1500, help="HV=xen: migration link MTU")
    r.add_argument("--rib-routes", type=_int("RIB_ROUTES"), default=0, help="routes in the router's RIB (bird)")
    r.add_argument("--criu-host", default="local", help="HV=criu: local, or vm (a VM whose kernel has soft-dirty)")
    r.add_argument("--fault", default=None, help="inject a fault (chaos testing): " + ", ".join(FAULTS))
    r.add_argument("--results", type=Path, default=Path("results"), help="results root directory")
    sub.add_parser("clean-testbed", help="remove what crashed runs left behind (from their state files)")
    from migrate.cli.baseline import add_parser as add_baseline_parser

    add_baseline_parser(sub)
    from migrate.cli.sweep import add_parsers as add_sweep_parsers

    add_sweep_parsers(sub, r)
    from migrate.experiment.calibrate import add_parser as add_calibrate_parser

    add_calibrate_parser(sub)
    return p


#: HV=xen defaults: the nested router forwards little, and 256 MiB take ~40 s at nested-link speed
XEN_DEFAULT_RATE_BPS = 1_000_000
XEN_DEFAULT_MIGRATE_TIMEOUT_S = 600.0


def scenario_from_args(a: argparse.Namespace) -> Scenario:
    """Build (and validate) the Scenario from parsed flags."""
    xen = a.hv == "xen"
    rate = a.rate if a.rate is not None else (XEN_DEFAULT_RATE_BPS if xen else parse_rate_bps("100M"))
    mig_timeout = (
        a.migrate_timeout if a.migrate_timeout is not None else (XEN_DEFAULT_MIGRATE_TIMEOUT_S if xen else 120.0)
    )
    return Scenario(
        hv=a.hv, mode=a.mode, rate_bps=rate, frame_bytes=a.size, ip=a.ip,
        duration_s=a.duration, migrate_at_s=a.migrate_at, after_s=a.after,
        sample_ms=a.sample_ms, probe_ms=a.probe_ms, mem_mib=a.mem, router=a.router, nic=a.nic,
        accel=a.accel, gen=a.gen, miglink_bps=a.miglink, downtime_limit_ms=a.downtime_limit,
        max_bandwidth_bps=a.max_bandwidth, auto_converge=a.auto_converge, xbzrle=a.xbzrle,
        postcopy=a.postcopy, migrate_timeout_s=mig_timeout, boot_timeout_s=a.boot_timeout,
        fault=a.fault, driver=a.driver, xen_guest=getattr(a, "xen_guest", "pvh"),
        xen_mig_mtu=getattr(a, "xen_mig_mtu", 1500), criu_host=getattr(a, "criu_host", "local"),
        rib_routes=getattr(a, "rib_routes", 0),
    )  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status."""
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
            return 0
        if args.command == "baseline":
            from migrate.cli.baseline import run_command as run_baseline_command

            return run_baseline_command(args)
        if getattr(args, "handler", None) is not None:  # sweep, report, compare, nightly, nightly-accept
            return args.handler(args)
        scenario = scenario_from_args(args)
        from migrate.experiment.run import run

        run_dir = run(scenario, args.results)
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
