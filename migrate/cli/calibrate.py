"""``vrmig calibrate`` (= ``make calibrate``): flags, the spec they make, the printed table."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from migrate.core.convert import rate, whole
from migrate.core.rundir import read_meta
from migrate.experiment.calibrate import (
    DEFAULT_DURATIONS_MS,
    KINDS,
    XEN_BOOT_TIMEOUT_S,
    XEN_DEFAULT_RATE_BPS,
    CalibrationSpec,
    parse_durations,
    parse_kinds,
    run_calibration,
)
from migrate.model.scenario import parse_bfd


def add_parser(sub: Any) -> None:
    """The ``calibrate`` subcommand (flags mirror the Make variables)."""
    c = sub.add_parser("calibrate", help="downtime estimators against known outages (make calibrate)")
    c.add_argument("--hv", default="kvm", help="kvm|criu|xen (HV)")
    c.add_argument("--driver", default="qmp", help="HV=kvm: qmp|libvirt (DRIVER)")
    c.add_argument("--kind", type=parse_kinds, default=KINDS, help="cut, pause or cut,pause (KIND)")
    c.add_argument("--durations", type=parse_durations, default=DEFAULT_DURATIONS_MS, help="ms, e.g. 20,50 (DURATIONS)")
    c.add_argument("--reps", type=whole("REPS"), default=5, help="repetitions per duration and kind (REPS)")
    c.add_argument("--rate", type=rate("RATE"), default=None, help="cross-traffic (100M; xen 10M)")
    c.add_argument("--size", type=whole("SIZE"), default=1500, help="Ethernet frame bytes (SIZE)")
    c.add_argument("--router", default=None, help="frr|bird (ROUTER; HV=criu: bird)")
    c.add_argument("--accel", default="auto", help="auto|kvm|tcg (ACCEL)")
    c.add_argument("--mem", type=whole("MEM"), default=256, help="guest MiB (MEM)")
    c.add_argument("--sample-ms", type=whole("SAMPLE_MS"), default=10, help="counter sampling period ms (SAMPLE_MS)")
    c.add_argument("--boot-timeout", type=float, default=None, help="s (120; HV=xen 300)")
    c.add_argument("--seed", type=whole("SEED"), default=1, help="order of the durations (SEED)")
    c.add_argument("--peering", default="", help="routing sessions with peers on both segments: bgp or bgp,bfd")
    c.add_argument("--bfd", default="50x3", help="BFD <interval ms>x<multiplier> (PEERING with bfd)")
    c.add_argument("--bgp-hold", type=whole("BGP_HOLD"), default=9, help="BGP hold time s (keepalive = hold/3)")
    c.add_argument("--results", type=Path, default=Path("results"), help="results root directory")
    c.add_argument("--testbed", type=Path, default=None, help="a lab's inventory (TESTBED; docs/testbed.md)")
    c.set_defaults(handler=run_command)


def spec_from_args(a: argparse.Namespace) -> CalibrationSpec:
    """The spec from parsed flags (HV-dependent defaults filled in)."""
    xen = a.hv == "xen"
    bfd = parse_bfd(a.bfd)
    return CalibrationSpec(
        hv=a.hv, driver=a.driver, kinds=a.kind, durations_ms=a.durations, reps=a.reps,
        rate_bps=a.rate if a.rate is not None else (XEN_DEFAULT_RATE_BPS if xen else 100_000_000),
        frame_bytes=a.size, router=a.router or ("bird" if a.hv == "criu" else "frr"), accel=a.accel,
        mem_mib=a.mem, sample_ms=a.sample_ms, seed=a.seed,
        boot_timeout_s=a.boot_timeout if a.boot_timeout is not None else (XEN_BOOT_TIMEOUT_S if xen else 120.0),
        peering=a.peering, bfd_interval_ms=bfd[0], bfd_multiplier=bfd[1], bgp_hold_s=a.bgp_hold,
    )  # fmt: skip


def run_command(a: argparse.Namespace) -> int:
    """Run it; print the table, write report.html and print, last, the results directory.  Exit 0
    when every cut target (and, with PEERING, every control-plane check) is met, 1 when one is
    missed, 4 when the run failed."""
    from analysis.metrics.calibration import format_table, load_and_calibrate
    from analysis.present.calibration_report import try_write_calibration_report

    spec = spec_from_args(a)
    run_dir = run_calibration(spec, a.results, a.testbed)
    hv = None
    try:
        cal, hv = load_and_calibrate(run_dir)
        print(format_table(cal, hv))
    except Exception as err:  # the raw data is kept; say so
        cal = None
        print(f"(calibration analysis failed: {type(err).__name__}: {err}; raw data in {run_dir})")
    note = try_write_calibration_report(run_dir, cal, hv)
    if note is not None:
        print(f"({note}; the tables are in calibration.csv)")
    print(run_dir)
    status = read_meta(run_dir).get("status")
    if status != "completed":
        return 4
    return 1 if cal is None or cal.passed is False else 0
