"""``make bench-lab``: the same migrations on the embedded testbed and on a lab (TESTBED=),
interleaved run by run, side by side: downtime, duration and volume by each method, and each
run's wall time (from the orchestrator's start to its results), so that what the lab path adds
is measured in the same session on the same machine.

Usage: ``python -m migrate.cli.bench_lab --testbed LAB.toml [--hv kvm|criu|xen] [--reps 5] [--modes precopy,stopcopy]
[--drivers qmp,libvirt] [--rate 10M] [--mem MiB] [--results results]``; prints a markdown table and saves every run's
figures as ``<results>/bench-lab-<UTC>.json``.  HV=criu runs ROUTER=bird (CRIU cannot checkpoint FRR), MODE=stopcopy
by default; HV=xen MODE=precopy (xl migrate) at RATE=1M by default (what the nested router carries)."""

from __future__ import annotations

import argparse
import datetime as dt
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from migrate.core.atomic import write_json
from migrate.core.convert import rate
from migrate.core.errors import VrmigError
from migrate.core.rundir import read_summary
from migrate.experiment.run import run
from migrate.model.scenario import Scenario

FIGURES = (
    ("downtime packets [ms]", ("downtime_s", "packets"), 1e3),
    ("downtime hypervisor [ms]", ("downtime_s", "hypervisor"), 1e3),
    ("duration link [s]", ("duration_s", "link"), 1.0),
    ("duration hypervisor [s]", ("duration_s", "hypervisor"), 1.0),
    ("volume link [MB]", ("volume_bytes", "link"), 1e-6),
    ("volume hypervisor [MB]", ("volume_bytes", "hypervisor"), 1e-6),
)


def _get(summary: dict[str, Any], path: tuple[str, str]) -> float | None:
    v = summary.get(path[0], {}).get(path[1])
    return float(v) if isinstance(v, int | float) else None


def _cell(values: list[float | None], scale: float) -> str:
    """median [min–max] (n), absent values counted apart."""
    xs = [v * scale for v in values if v is not None]
    absent = len(values) - len(xs)
    if not xs:
        return f"– ({absent} absent)"
    txt = f"{statistics.median(xs):.3g} [{min(xs):.3g}–{max(xs):.3g}] (n={len(xs)})"
    return txt + (f", {absent} absent" if absent else "")


def build_parser() -> argparse.ArgumentParser:
    """The options (the Make variables of ``make bench-lab``)."""
    p = argparse.ArgumentParser(prog="bench-lab", description=__doc__.splitlines()[0])
    p.add_argument("--testbed", type=Path, required=True, help="the lab's inventory (make lab-up prints one)")
    p.add_argument("--hv", choices=("kvm", "criu", "xen"), default="kvm", help="hypervisor: kvm, criu or xen")
    p.add_argument("--reps", type=int, default=5, help="runs per mode and driver, at each place")
    p.add_argument("--modes", default=None, help="migration modes (default precopy,stopcopy; HV=criu: stopcopy)")
    p.add_argument("--drivers", default="qmp", help="HV=kvm drivers, comma-separated: qmp,libvirt")
    p.add_argument("--rate", type=rate, default=None, help="cross-traffic rate (default 10M; HV=xen: 1M)")
    p.add_argument("--mem", type=int, default=None, help="router memory, MiB (default: the scenario's)")
    p.add_argument("--duration", type=float, default=20.0, help="seconds of traffic per run")
    p.add_argument("--results", type=Path, default=Path("results"), help="results root")
    return p


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; exit 0 if every run completed."""
    a = build_parser().parse_args(argv)
    default_modes = {"criu": "stopcopy", "xen": "precopy"}.get(a.hv, "precopy,stopcopy")
    modes = [m for m in (a.modes or default_modes).split(",") if m]
    drivers = [d for d in a.drivers.split(",") if d]
    if not drivers or set(drivers) - {"qmp", "libvirt"} or (a.hv != "kvm" and drivers != ["qmp"]):
        print(
            f"bench-lab: DRIVERS={a.drivers!r}: give qmp, libvirt or qmp,libvirt (HV=criu, xen: qmp)", file=sys.stderr
        )
        return 2
    if a.rate is None:
        a.rate = 1_000_000 if a.hv == "xen" else 10_000_000
    extra: dict[str, Any] = {"mem_mib": a.mem} if a.mem is not None else {}
    router = "bird" if a.hv == "criu" else "frr"
    rows: list[dict[str, Any]] = []
    try:
        for rep in range(a.reps):
            for driver in drivers:
                for mode in modes:
                    for bed in ("embedded", "lab"):
                        s = Scenario(
                            hv=a.hv,
                            driver=driver,
                            mode=mode,
                            router=router,
                            rate_bps=a.rate,
                            duration_s=a.duration,
                            **extra,
                        )
                        t0 = time.monotonic()
                        run_dir = run(s, a.results, testbed=a.testbed if bed == "lab" else None)
                        wall = time.monotonic() - t0
                        summary = read_summary(run_dir)
                        rows.append(
                            {"rep": rep, "driver": driver, "mode": mode, "testbed": bed, "wall_s": round(wall, 3),
                             "run_dir": str(run_dir), "status": summary["status"], "accel": summary.get("accel"),
                             **{name: _get(summary, path) for name, path, _ in FIGURES}}
                        )  # fmt: skip
                        print(f"bench-lab: rep {rep + 1}/{a.reps} {driver} {mode} {bed}: {summary['status']} "
                              f"in {wall:.1f} s", file=sys.stderr, flush=True)  # fmt: skip
    except VrmigError as err:
        print(f"bench-lab: error: {err}", file=sys.stderr)
        return err.exit_code
    out = a.results / f"bench-lab-{dt.datetime.now(dt.UTC).strftime('%Y%m%dT%H%M%SZ')}.json"
    write_json(out, {"argv": sys.argv, "testbed": str(a.testbed), "hv": a.hv, "router": router, "reps": a.reps,
                     "rate_bps": a.rate, "duration_s": a.duration, "drivers": drivers, "mem_mib": a.mem,
                     "rows": rows})  # fmt: skip
    for driver, mode in ((d, m) for d in drivers for m in modes):
        print(
            f"\n{mode}, RATE={a.rate / 1e6:g}M, DURATION={a.duration:g} s, HV={a.hv} DRIVER={driver} ROUTER={router}\n"
        )
        print("| figure | embedded | lab |\n|---|---|---|")
        sel = {
            b: [r for r in rows if r["driver"] == driver and r["mode"] == mode and r["testbed"] == b]
            for b in ("embedded", "lab")
        }
        for name, _, scale in FIGURES:
            print(f"| {name} | {_cell([r[name] for r in sel['embedded']], scale)} "
                  f"| {_cell([r[name] for r in sel['lab']], scale)} |")  # fmt: skip
        print(f"| completed | {sum(r['status'] == 'completed' for r in sel['embedded'])}/{len(sel['embedded'])} "
              f"| {sum(r['status'] == 'completed' for r in sel['lab'])}/{len(sel['lab'])} |")  # fmt: skip
        we, wl = (statistics.median([r["wall_s"] for r in sel[b]]) for b in ("embedded", "lab"))
        print(f"| wall time of a run [s] | {_cell([r['wall_s'] for r in sel['embedded']], 1.0)} "
              f"| {_cell([r['wall_s'] for r in sel['lab']], 1.0)} ({(wl / we - 1) * 100:+.0f} % median) |")  # fmt: skip
    print(f"\n{out}")
    return 0 if all(r["status"] == "completed" for r in rows) else 4


if __name__ == "__main__":
    sys.exit(main())
