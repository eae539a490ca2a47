"""``vrmig baseline`` (= ``make baseline``): running or resuming it and the printed summary (its
flags: migrate.baseline.args)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from migrate.baseline.args import resume_spec, spec_from_args
from migrate.baseline.lab import resume_testbed
from migrate.baseline.spec import NONE_NIC
from migrate.core.rundir import SUMMARY_JSON, read_meta, read_summary


def run_command(a: argparse.Namespace, campaign: Any = None) -> int:
    """Run or resume the baseline; print a short table and, last, the results directory
    (``campaign``: the migrate.campaigns.campaign.Campaign this baseline runs, if any)."""
    from migrate.baseline.run import load_resume, run_baseline

    testbed = getattr(a, "testbed", None)
    if a.resume is not None:
        stored, meta = load_resume(a.resume)
        spec = resume_spec(a, stored)
        testbed = resume_testbed(a.resume, meta, testbed)
    else:
        spec = spec_from_args(a)
    record = (campaign.record(), campaign.text) if campaign is not None else None
    run_dir = run_baseline(spec, a.results, resume_dir=a.resume, campaign=record, testbed=testbed)
    _print_summary(run_dir)
    print(run_dir)
    status = read_meta(run_dir).get("status")
    return 0 if status == "completed" else 4


def _mbit(d: dict[str, Any] | None) -> str:
    if not d:
        return "-"
    ci = f" ±{d['ci95'] / 1e6:.1f}" if d.get("ci95") is not None else ""
    return f"{d['mean'] / 1e6:.1f}{ci}"


def _print_summary(run_dir: Path) -> None:
    path = run_dir / SUMMARY_JSON
    if not path.exists():
        print(f"(no summary.json; analysis failed — raw data in {run_dir})")
        return
    s = read_summary(run_dir)
    accel = s.get("accel") or "n/a (no VM)"
    print(f"baseline accel={accel}  points {s['points_total']} ({s['points_failed']} failed)  [Mbit/s, ±95% CI]")
    endhost = any(c.get("role", "router") != "router" or c.get("proto", "udp") != "udp" for c in s["configs"])
    head = ("hv/nic", "ip", "size", "rtrs", "load", "max fwd", "loss-free(sweep)", "NDR")
    extra = "  {:6} {:5} {:>5} {:>6}".format("role", "proto", "E", "v6/v4") if endhost else ""
    print("  {:12} {:>2} {:>5} {:>4} {:9} {:>14} {:>16} {:>14}".format(*head) + extra)
    for c in s["configs"]:
        mf = c["max_forwarded"]["forwarded_bps"] if c.get("max_forwarded") else None
        ndr = c["ndr"]["ndr_bps"] if c.get("ndr") else None
        lf = c.get("sweep_loss_free_bps")
        name = c["hv"] if c["nic"] == NONE_NIC else f"{c['hv']}/{c['nic']}"
        line = (
            f"  {name:12} {c['ip']:>2} {c['frame_bytes']:>5} {c['routers']:>4} {c['load']:9} {_mbit(mf):>14} "
            f"{'-' if lf is None else f'{lf / 1e6:.1f}':>16} {_mbit(ndr):>14}"
        )
        if endhost:
            e = (c.get("efficiency") or {}).get("max_forwarded")
            line += f"  {c.get('role', 'router'):6} {c.get('proto', 'udp'):5} {'-' if e is None else f'{e:.2f}':>5}"
            line += f" {_v6_over_v4(c, mf):>6}"
        print(line)


def _v6_over_v4(c: dict[str, Any], max_fwd: dict[str, Any] | None) -> str:
    """The IPv6/IPv4 ratio at the rate of the configuration's max forwarded (or received) rate."""
    if max_fwd is None or not c.get("ipv6_over_ipv4") or not c.get("max_forwarded"):
        return "-"
    rate = c["max_forwarded"]["rate_bps"]
    r = next((x["forwarded_bps"]["ratio"] for x in c["ipv6_over_ipv4"] if x["rate_bps"] == rate), None)
    return "-" if r is None else f"{r:.3f}"
