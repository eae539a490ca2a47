"""Benchmark vrgen/vrsink (and iperf3 for comparison) in two fresh namespaces joined by a veth pair.

    sudo .venv/bin/python -m crosstraffic.bench [--duration 5] [--reps 3] [--out bench.json]

* rate accuracy: vrgen -> vrsink at 10M/100M/500M with 64 B and 1500 B frames (IPv4);
* maximum packet rate at 64 B on one core: vrgen unpaced vs iperf3 ``-b 0 -l 18``, interleaved
  ``--reps`` times (medians reported), and vrgen ``--gso`` for information.

The generator is pinned to CPU 0 and the sink to CPU 1 (iperf3: ``-A``).  Namespaces are named
``vrt-ct-bench-*`` and removed at the end; every process is started and stopped by PID.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from crosstraffic import GenRequest, GenResult, SinkRequest, SinkResult, get_backend
from crosstraffic.runner import BIN_DIR, Child, RunError, VethPair, veth_pair, wait_tcp_listen

PORT = 9000
IPERF_PORT = 5201
GEN_CPU, SINK_CPU = 0, 1
RATES = (10_000_000, 100_000_000, 500_000_000)
FRAMES = (64, 1500)


def _load() -> dict[str, Any]:
    """Machine load at this moment (the benchmark shares the CPUs with everything else)."""
    with open("/proc/loadavg") as f:
        la = f.read().split()[:3]
    return {"loadavg": [float(x) for x in la], "cpus": os.cpu_count()}


def _delivery(g: GenResult, s: SinkResult, rate: int, frame: int) -> dict[str, Any]:
    """The numbers every run reports: requested and achieved rates, packets sent, received and lost."""
    return {
        "rate_bps": rate,
        "frame_bytes": frame,
        "gen_pps": g.achieved_pps,
        "gen_bps": g.achieved_bps,
        "rate_error": g.rate_error,
        "sent": g.packets,
        "received": s.packets,
        "delivered_pps": s.packets / ((g.end_ns - g.start_ns) / 1e9),
        "lost": s.lost,
        "not_received": g.packets - s.packets,
    }


def run_builtin(p: VethPair, rate: int, frame: int, duration: float, gen_extra: Sequence[str] = ()) -> dict[str, Any]:
    """One vrgen -> vrsink run; returns the parsed results and derived numbers."""
    b = get_backend("builtin")
    sink = Child(b.sink_argv(SinkRequest(port=PORT, bind=p.b4, gap_us=1000, cpu=SINK_CPU)), netns=p.b)
    try:
        sink.wait_line("READY", 10)
        gen = Child(
            [*b.gen_argv(GenRequest(dst=p.b4, port=PORT, rate_bps=rate, frame_bytes=frame, duration_s=duration,
                                    cpu=GEN_CPU)),
             *gen_extra],
            netns=p.a,
        )  # fmt: skip
        gf = gen.finish(duration + 60)
        if gf.returncode != 0:
            raise RunError(f"vrgen failed: {gf.stderr.strip()}")
    finally:
        sink.signal(signal.SIGTERM)
        sf = sink.finish(30)
    g, s = b.parse_gen(gf.stdout), b.parse_sink(sf.stdout)
    return {
        "tool": "vrgen" + ("".join(f" {x}" for x in gen_extra)),
        **_delivery(g, s, rate, frame),
        "socket_drops": s.socket_drops,
        "max_late_ms": g.raw.get("max_late_ns", 0) / 1e6,
        "late_events": len(g.raw.get("late_events", [])),
        "gaps_over_1ms": len(s.gaps or ()),
        "owd_median_us": s.owd_ns.median / 1e3 if s.owd_ns else None,
        "gen_cpu_s": (cpu := g.raw.get("cpu_user_s", 0) + g.raw.get("cpu_sys_s", 0)),
        "pps_per_cpu_s": g.packets / cpu if cpu else None,
        "sink_cpu_s": s.raw.get("cpu_user_s", 0) + s.raw.get("cpu_sys_s", 0),
    }


def run_iperf3(p: VethPair, rate: int, frame: int, duration: float) -> dict[str, Any]:
    """One iperf3 client -> server run."""
    b = get_backend("iperf3")
    srv = Child(b.sink_argv(SinkRequest(port=IPERF_PORT, bind=p.b4, cpu=SINK_CPU)), netns=p.b)
    try:
        wait_tcp_listen(p.b, IPERF_PORT, 10, srv)
        cli = Child(
            b.gen_argv(
                GenRequest(
                    dst=p.b4, port=IPERF_PORT, rate_bps=rate, frame_bytes=frame, duration_s=duration, cpu=GEN_CPU
                )
            ),
            netns=p.a,
        )
        cf = cli.finish(duration + 60)
        sf = srv.finish(30)
    finally:
        srv.kill()
    g, s = b.parse_gen(cf.stdout), b.parse_sink(sf.stdout)
    util = g.raw.get("end", {}).get("cpu_utilization_percent", {}).get("host_total")
    cpu = util / 100 * (g.end_ns - g.start_ns) / 1e9 if util else None
    return {
        "tool": "iperf3",
        "gen_cpu_s": cpu,
        "pps_per_cpu_s": g.packets / cpu if cpu else None,
        **_delivery(g, s, rate, frame),
    }


def _fmt(r: dict[str, Any]) -> str:
    err = "" if r.get("rate_error") is None else f"{r['rate_error'] * 100:+.3f}%"
    extra = ""
    if "max_late_ms" in r:
        extra = (
            f" late<={r['max_late_ms']:.1f}ms gaps={r['gaps_over_1ms']} owd50={r['owd_median_us']:.0f}us"
            f" cpu gen={r['gen_cpu_s']:.2f}s sink={r['sink_cpu_s']:.2f}s"
        )
    if r.get("pps_per_cpu_s"):
        extra += f" {r['pps_per_cpu_s']:,.0f} pkt/CPU-s"
    return (
        f"{r['tool']:<12} {r['rate_bps'] / 1e6:>6.0f}M {r['frame_bytes']:>5}B  {r['gen_pps']:>11,.0f} pps"
        f" {r['gen_bps'] / 1e6:>9.2f} Mbit/s {err:>9}  delivered {r['delivered_pps']:>11,.0f} pps"
        f"  sent={r['sent']} recv={r['received']} lost={r['lost']}"
        f" drops={r.get('socket_drops', '-')}{extra}"
    )


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; print a table and optionally write JSON."""
    ap = argparse.ArgumentParser(prog="python -m crosstraffic.bench", description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=float, default=5.0, help="seconds per run (default 5)")
    ap.add_argument("--reps", type=int, default=3, help="repetitions of the max-pps comparison (default 3)")
    ap.add_argument("--skip-rates", action="store_true", help="only the max-pps comparison")
    ap.add_argument("--out", type=Path, help="write all results as JSON here")
    args = ap.parse_args(argv)
    if os.geteuid() != 0:
        print("crosstraffic.bench: needs root (creates network namespaces)", file=sys.stderr)
        return 2
    missing = [str(BIN_DIR / x) for x in ("vrgen", "vrsink") if not (BIN_DIR / x).exists()]
    if missing:
        print(f"crosstraffic.bench: {', '.join(missing)} not built: run `make -C crosstraffic`", file=sys.stderr)
        return 2
    has_iperf3 = not get_backend("iperf3").missing()
    out: dict[str, Any] = {"started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "load_before": _load(), "rates": []}
    with veth_pair("bench") as p:
        if not args.skip_rates:
            print("# rate accuracy: vrgen -> vrsink, IPv4, gen on CPU 0, sink on CPU 1")
            for frame in FRAMES:
                for rate in RATES:
                    r = run_builtin(p, rate, frame, args.duration)
                    out["rates"].append(r)
                    print(_fmt(r), flush=True)
        print("# maximum packet rate, 64 B frames, unpaced, one core for the generator")
        runs: dict[str, list[dict[str, Any]]] = {"vrgen": [], "iperf3": [], "vrgen --gso": []}
        for _ in range(args.reps):
            runs["vrgen"].append(run_builtin(p, 0, 64, args.duration))
            print(_fmt(runs["vrgen"][-1]), flush=True)
            if has_iperf3:
                runs["iperf3"].append(run_iperf3(p, 0, 64, args.duration))
                print(_fmt(runs["iperf3"][-1]), flush=True)
            runs["vrgen --gso"].append(run_builtin(p, 0, 64, args.duration, gen_extra=("--gso",)))
            print(_fmt(runs["vrgen --gso"][-1]), flush=True)
        out["max_pps"] = runs
        for what in ("gen_pps", "delivered_pps", "pps_per_cpu_s"):
            med = {k: statistics.median(r[what] or 0 for r in v) for k, v in runs.items() if v}
            out[f"median_{what}"] = med
            print(f"# median {what}: " + ", ".join(f"{k} {v:,.0f}" for k, v in med.items()))
            if med.get("iperf3"):
                print("#   ratio to iperf3: " + ", ".join(f"{k} {med[k] / med['iperf3']:.2f}x" for k in med))
    out["load_after"] = _load()
    if args.out:
        args.out.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
