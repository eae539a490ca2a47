"""``make bench-traffic``: every traffic backend on the same A -> switch -> B testbed, one run.

    sudo .venv/bin/python -m crosstraffic.bench_traffic --out results/bench/traffic.csv

For 64 B and 1500 B IPv4 frames and every backend (builtin = vrgen/vrsink over a UDP socket and in
``--packet`` mode, iperf3, D-ITG, trafgen with its sequence counter and as static frames):

* maximum rate: unpaced (``requested_bps`` 0), ``--reps`` times, the variants interleaved;
* rate accuracy: 10M, 100M and 500M (``--rates``), once each.

Generators run on CPU 0, sinks on CPU 1; RPS moves the receive path behind the first veth to
CPU 1 (``--rx-cpu``, see :mod:`crosstraffic.benchbed`).  Rates count Ethernet-frame bits
(frame incl. FCS).  ``loss_ratio`` = 1 - received / sent with both counts from the tools
(generator's sent packets, sink's received unique packets); ``sink_socket_drops`` is the loss the
sink's own socket caused (vrsink only).  Writes the CSV (one row per run), ``<out>.meta.json``
(load averages, tool versions, kernel, CPUs, testbed, argv) next to it, and prints a markdown
table of the medians plus the issue's targets.  Every process is started and stopped by PID; the
namespaces (``vrt-bt-*``) and D-ITG's logs are removed at the end, also on Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import logging
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from crosstraffic import get_backend
from crosstraffic.backend import Backend, TrafficError
from crosstraffic.benchbed import BedError, BridgeBed, bridge_bed
from crosstraffic.runner import REPO, Child, RunError, run, wait_tcp_listen

log = logging.getLogger("crosstraffic.bench_traffic")

PORT = 9000
GEN_CPU, SINK_CPU = 0, 1
FRAMES = (64, 1500)
RATES_BPS = (10_000_000, 100_000_000, 500_000_000)
READY_TIMEOUT_S = 10.0
GEN_GRACE_S = 60.0
RATE_ERROR_TARGET = 0.01
TARGET_X_IPERF3 = 2.5
TARGET_X_TRAFGEN = 1.2


@dataclass(frozen=True)
class Variant:
    """One backend configuration of the benchmark."""

    label: str  # e.g. "builtin/packet"
    backend: str  # registry name
    mode: str
    runs: str  # "all": maximum and paced rates; "max": only unpaced; "paced": only the paced rates
    make: Callable[[BridgeBed, Path], Backend]


VARIANTS = (
    Variant("builtin/udp", "builtin", "udp", "all", lambda bed, wd: get_backend("builtin")),
    Variant(
        "builtin/packet",
        "builtin",
        "packet",
        "all",
        lambda bed, wd: get_backend("builtin", packet_dev=bed.a_if, dst_mac=bed.b_mac),
    ),
    Variant("iperf3", "iperf3", "udp", "all", lambda bed, wd: get_backend("iperf3")),
    Variant("ditg", "ditg", "udp", "all", lambda bed, wd: get_backend("ditg", workdir=wd)),
    Variant(
        "trafgen/counter",
        "trafgen",
        "counter",
        "all",
        lambda bed, wd: get_backend("trafgen", dev=bed.a_if, src_mac=bed.a_mac, dst_mac=bed.b_mac, src_ip=bed.a4),
    ),
    Variant(
        "trafgen/gap",
        "trafgen",
        "gap",
        "paced",
        lambda bed, wd: get_backend(
            "trafgen", dev=bed.a_if, src_mac=bed.a_mac, dst_mac=bed.b_mac, src_ip=bed.a4, pacing="gap"
        ),
    ),
    Variant(
        "trafgen/static",
        "trafgen",
        "static",
        "max",
        lambda bed, wd: get_backend(
            "trafgen", dev=bed.a_if, src_mac=bed.a_mac, dst_mac=bed.b_mac, src_ip=bed.a4, counter=False
        ),
    ),
)


@dataclass(frozen=True)
class Row:
    """One run: the CSV columns."""

    backend: str
    mode: str
    frame_bytes: int
    requested_bps: int
    achieved_bps: float
    achieved_pps: float
    loss_ratio: float
    rate_error: float | None
    sent: int
    received: int
    sink_lost: int | None
    sink_socket_drops: int | None
    max_gap_ms: float | None
    send_errors: int | None
    elapsed_s: float
    gen_cpu_s: float
    pps_per_cpu_s: float | None
    rep: int
    loadavg_1m: float
    started_unix_s: float


def loadavg() -> list[float]:
    """1, 5, 15 min load averages."""
    with open("/proc/loadavg") as f:
        return [float(x) for x in f.read().split()[:3]]


class Children:
    """Every child process of the benchmark; all killed by PID when the block ends."""

    def __init__(self) -> None:
        self.children: list[Child] = []
        self.last_gen_argv: tuple[str, ...] = ()

    def start(self, argv: Sequence[str], netns: str | None, gen: bool = False) -> Child:
        """Start one child (own session, stdout/stderr piped)."""
        c = Child(argv, netns=netns)
        self.children.append(c)
        if gen:
            self.last_gen_argv = c.argv
        return c

    def kill_all(self) -> None:
        """SIGKILL what is still running (by PID) and reap it."""
        for c in self.children:
            c.kill()
        self.children.clear()


def finish_with_rusage(child: Child, timeout_s: float) -> tuple[int, str, str, float]:
    """Wait for ``child`` with wait4() to get its CPU time (user + system, its own and that of the
    children it waited for: trafgen's worker, timeout's trafgen); returns (rc, stdout, stderr, cpu_s).

    The generator's stdout is small (a summary), so the pipe cannot fill up while we poll."""
    deadline = time.monotonic() + timeout_s
    while True:
        pid, status, ru = os.wait4(child.pid, os.WNOHANG)
        if pid == child.pid:
            break
        if time.monotonic() > deadline:
            child.kill()
            raise RunError(f"{' '.join(child.argv)} did not exit within {timeout_s:.0f} s")
        time.sleep(0.02)  # polling the exit, not waiting for readiness
    child.popen.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait again
    out, err = child.popen.communicate()
    return child.popen.returncode, out.decode(errors="replace"), err.decode(errors="replace"), ru.ru_utime + ru.ru_stime


def _wait_ready(b: Backend, sink: Child, netns: str) -> None:
    kind, what = b.sink_readiness(PORT)
    if kind == "stderr-line":
        sink.wait_line(str(what), READY_TIMEOUT_S)
    else:
        wait_tcp_listen(netns, int(what), READY_TIMEOUT_S, sink)


def _decoded(argv: list[str] | None, own_stdout: str) -> str:
    if argv is None:
        return own_stdout
    f = run(argv, timeout_s=300)
    if f.returncode != 0:
        raise RunError(f"{' '.join(argv)} failed ({f.returncode}): {f.stderr.strip()[-300:]}")
    return f.stdout


def run_one(
    v: Variant, b: Backend, bed: BridgeBed, kids: Children, rate: int, frame: int, duration_s: float, rep: int
) -> Row:
    """One generator -> sink run of one variant."""
    started, la = time.time(), loadavg()[0]
    sink = kids.start(b.sink_argv(port=PORT, bind=bed.b4, cpu=SINK_CPU), bed.b)
    _wait_ready(b, sink, bed.b)
    gen = kids.start(
        b.gen_argv(dst=bed.b4, port=PORT, rate_bps=rate, frame_bytes=frame, duration_s=duration_s, cpu=GEN_CPU),
        bed.a,
        gen=True,
    )
    rc, gen_out, gen_err, gen_cpu = finish_with_rusage(gen, duration_s + GEN_GRACE_S)
    if not b.gen_exit_ok(rc):
        raise RunError(f"{v.label} generator exited with {rc}: {gen_err.strip()[-300:]}")
    if not b.sink_stops_itself:
        sink.signal(b.sink_stop_signal)
    sf = sink.finish(60)
    g = b.parse_gen(_decoded(b.gen_decode_argv(), gen_out))
    s = b.parse_sink(_decoded(b.sink_decode_argv(), sf.stdout))
    elapsed = (g.end_ns - g.start_ns) / 1e9
    return Row(
        backend=v.backend,
        mode=v.mode,
        frame_bytes=g.frame_bytes,
        requested_bps=rate,
        achieved_bps=round(g.achieved_bps, 1),
        achieved_pps=round(g.achieved_pps, 1),
        loss_ratio=round(1 - s.packets / g.packets, 6) if g.packets else 0.0,
        rate_error=round(g.rate_error, 6) if g.rate_error is not None else None,
        sent=g.packets,
        received=s.packets,
        sink_lost=s.lost if b.capabilities.loss else None,
        sink_socket_drops=s.socket_drops,
        max_gap_ms=(round(s.max_gap.duration_ns / 1e6, 3) if s.max_gap else 0.0) if s.gaps is not None else None,
        send_errors=g.send_errors,
        elapsed_s=round(elapsed, 6),
        gen_cpu_s=round(gen_cpu, 3),
        pps_per_cpu_s=round(g.packets / gen_cpu, 1) if gen_cpu > 0 else None,
        rep=rep,
        loadavg_1m=la,
        started_unix_s=round(started, 3),
    )


def plan(variants: Sequence[Variant], frames: Sequence[int], rates: Sequence[int], reps: int) -> list[tuple]:
    """(variant, rate, frame, rep) in run order: maxima interleaved per repetition, then the paced rates."""
    out: list[tuple] = []
    for rep in range(reps):
        for frame in frames:
            out += [(v, 0, frame, rep) for v in variants if v.runs != "paced"]
    for frame in frames:
        for rate in rates:
            out += [(v, rate, frame, 0) for v in variants if v.runs != "max"]
    return out


def _first_line(argv: Sequence[str]) -> str:
    try:
        r = subprocess.run(list(argv), capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"unavailable ({e})"
    lines = [ln.strip() for ln in (r.stdout + r.stderr).splitlines() if ln.strip()]
    return lines[0] if lines else "unknown"


def tool_versions() -> dict[str, str]:
    """Versions of the tools and of vrmig's own helpers."""
    git = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True, check=False)
    dirty = subprocess.run(
        ["git", "-C", str(REPO), "status", "--porcelain", "crosstraffic"], capture_output=True, text=True, check=False
    )
    return {
        "vrgen/vrsink": f"vrmig git {git.stdout.strip() or 'unknown'}"
        + (" + local changes" if dirty.stdout.strip() else ""),
        "iperf3": _first_line(["iperf3", "--version"]),
        "d-itg": _first_line(["ITGSend", "-h"]),
        "trafgen": _first_line(["trafgen", "-v"]),
        "kernel": platform.release(),
    }


def _cpu_model() -> str:
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def _median(xs: Sequence[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def summarize(rows: Sequence[Row]) -> list[dict[str, Any]]:
    """Medians per (backend, mode, frame, requested rate)."""
    groups: dict[tuple, list[Row]] = {}
    for r in rows:
        groups.setdefault((r.backend, r.mode, r.frame_bytes, r.requested_bps), []).append(r)
    order = {(v.backend, v.mode): i for i, v in enumerate(VARIANTS)}
    out = []
    for (backend, mode, frame, rate), rs in sorted(
        groups.items(), key=lambda kv: (kv[0][2], kv[0][3], order.get(kv[0][:2], 99))
    ):
        errs = [r.rate_error for r in rs if r.rate_error is not None]
        drops = [r.sink_socket_drops for r in rs if r.sink_socket_drops is not None]
        out.append(
            {
                "backend": backend,
                "mode": mode,
                "frame_bytes": frame,
                "requested_bps": rate,
                "runs": len(rs),
                "achieved_pps": _median([r.achieved_pps for r in rs]),
                "achieved_bps": _median([r.achieved_bps for r in rs]),
                "delivered_pps": _median([r.achieved_pps * (1 - r.loss_ratio) for r in rs]),
                "pps_per_cpu_s": _median([r.pps_per_cpu_s or 0.0 for r in rs]),
                "rate_error": _median(errs) if errs else None,
                "loss_ratio": _median([r.loss_ratio for r in rs]),
                "sink_socket_drops": max(drops) if drops else None,
                "max_gap_ms": max(gaps) if (gaps := [r.max_gap_ms for r in rs if r.max_gap_ms is not None]) else None,
            }
        )
    return out


def markdown(summary: Sequence[dict[str, Any]]) -> str:
    """The summary as a markdown table."""
    lines = [
        "| backend | mode | frame B | requested | achieved kpps | achieved Mbit/s | rate error | loss | sink drops "
        "| max gap ms | k packets per gen CPU-s |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in summary:
        req = "max (unpaced)" if s["requested_bps"] == 0 else f"{s['requested_bps'] / 1e6:g}M"
        runs = f" ({s['runs']} runs, median)" if s["runs"] > 1 else ""
        err = "" if s["rate_error"] is None else f"{s['rate_error'] * 100:+.2f} %"
        drops = "–" if s["sink_socket_drops"] is None else str(s["sink_socket_drops"])
        gap = "–" if s["max_gap_ms"] is None else ("< 1" if s["max_gap_ms"] == 0 else f"{s['max_gap_ms']:,.1f}")
        lines.append(
            f"| {s['backend']} | {s['mode']} | {s['frame_bytes']} | {req}{runs} | {s['achieved_pps'] / 1e3:,.1f} "
            f"| {s['achieved_bps'] / 1e6:,.1f} | {err} | {s['loss_ratio'] * 100:.2f} % | {drops} | {gap} "
            f"| {s['pps_per_cpu_s'] / 1e3:,.0f} |"
        )
    return "\n".join(lines)


def targets(summary: Sequence[dict[str, Any]]) -> list[str]:
    """The issue's targets for the built-in generator, judged on this run's medians."""
    at64 = {(s["backend"], s["mode"]): s for s in summary if s["frame_bytes"] == 64 and s["requested_bps"] == 0}
    out = []
    for mode in ("udp", "packet"):
        me = at64.get(("builtin", mode))
        if not me:
            continue
        for other, need in (
            (("iperf3", "udp"), TARGET_X_IPERF3),
            (("trafgen", "static"), TARGET_X_TRAFGEN),
            (("trafgen", "counter"), TARGET_X_TRAFGEN),
        ):
            o = at64.get(other)
            if o and o["achieved_pps"] > 0 and o["delivered_pps"] > 0 and o["pps_per_cpu_s"] > 0:
                x = me["achieved_pps"] / o["achieved_pps"]
                xd = me["delivered_pps"] / o["delivered_pps"]
                xc = me["pps_per_cpu_s"] / o["pps_per_cpu_s"]
                out.append(
                    f"builtin/{mode} at 64 B vs {'/'.join(other)} (target >= {need}x): sent {x:.2f}x "
                    f"({'met' if x >= need else 'NOT met'}), delivered {xd:.2f}x, per generator CPU-second "
                    f"{xc:.2f}x"
                )
    paced = [s for s in summary if s["backend"] == "builtin" and s["requested_bps"] > 0]
    for mode in ("udp", "packet"):
        errs = [(s["frame_bytes"], s["requested_bps"], s["rate_error"]) for s in paced if s["mode"] == mode]
        bad = [f"{f} B/{r / 1e6:g}M {e * 100:+.2f} %" for f, r, e in errs if e is None or abs(e) > RATE_ERROR_TARGET]
        if errs:
            out.append(f"builtin/{mode} rate error <= 1 %: {'met' if not bad else 'NOT met at ' + ', '.join(bad)}")
    drops = [s["sink_socket_drops"] for s in summary if s["backend"] in ("builtin", "trafgen")]
    if drops:
        out.append(
            f"vrsink socket drops (sink-caused loss): max {max(d or 0 for d in drops)} "
            f"({'met' if not any(drops) else 'NOT met'})"
        )
    return out


def write_csv(path: Path, rows: Sequence[Row]) -> None:
    """All runs, one row each (atomically replaced)."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    with tmp.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=[fl.name for fl in fields(Row)])
        w.writeheader()
        for r in rows:
            w.writerow(asdict(r))
    tmp.replace(path)


def _raise_interrupt(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    old = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def _preflight(variants: Sequence[Variant]) -> list[str]:
    probe_bed = BridgeBed(a="", sw="", b="", a_mac="02:00:00:00:00:01", b_mac="02:00:00:00:00:02", rx_cpu=None)
    problems = []
    for v in variants:
        missing = v.make(probe_bed, Path(tempfile.gettempdir())).missing()
        if missing:
            problems.append(f"{v.label}: {', '.join(missing)} missing (make setup / make helpers)")
    return problems


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; write CSV + meta; print the markdown table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="CSV path (meta goes to <out minus .csv>.meta.json)")
    ap.add_argument("--duration", type=float, default=4.0, help="whole seconds per run (default 4)")
    ap.add_argument("--reps", type=int, default=3, help="repetitions of the unpaced maxima (default 3)")
    ap.add_argument(
        "--rates", default=",".join(str(r) for r in RATES_BPS), help="paced rates in bit/s, comma-separated"
    )
    ap.add_argument("--frames", default=",".join(str(f) for f in FRAMES), help="frame sizes, comma-separated")
    ap.add_argument("--only", default="", help="comma-separated variant labels (default: all)")
    ap.add_argument(
        "--rx-cpu",
        default="none",
        help="move the receive path behind the first veth to this CPU with RPS (default 'none': a veth "
        "runs it on the sender's CPU)",
    )
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    try:
        rates = [int(x) for x in args.rates.split(",") if x.strip()]
        frames = [int(x) for x in args.frames.split(",") if x.strip()]
        rx_cpu = None if args.rx_cpu == "none" else int(args.rx_cpu)
    except ValueError as e:
        print(f"bench-traffic: bad --rates/--frames/--rx-cpu: {e}", file=sys.stderr)
        return 2
    wanted = {x for x in args.only.split(",") if x}
    variants = [v for v in VARIANTS if not wanted or v.label in wanted]
    if wanted - {v.label for v in VARIANTS}:
        print(
            f"bench-traffic: unknown --only {sorted(wanted - {v.label for v in VARIANTS})}: choose from "
            f"{', '.join(v.label for v in VARIANTS)}",
            file=sys.stderr,
        )
        return 2
    bad_duration = args.duration < 1 or args.duration != int(args.duration)
    if bad_duration or args.reps < 1 or any(f < 64 or f > 1518 for f in frames) or any(r <= 0 for r in rates):
        # whole seconds: iperf3 -t takes integers; trafgen --rate sends whole seconds' bursts
        print(
            "bench-traffic: --duration whole seconds >= 1, --reps >= 1, frames 64..1518, rates > 0 please",
            file=sys.stderr,
        )
        return 2
    if os.geteuid() != 0:
        print("bench-traffic: needs root (creates network namespaces)", file=sys.stderr)
        return 2
    if (os.cpu_count() or 1) < 2:
        print("bench-traffic: needs 2 CPUs (generator on CPU 0, sink on CPU 1)", file=sys.stderr)
        return 2
    problems = _preflight(variants)
    if problems:
        print("bench-traffic: " + "; ".join(problems), file=sys.stderr)
        return 2
    args.out.parent.mkdir(parents=True, exist_ok=True)
    meta_path = args.out.with_name(args.out.name.removesuffix(".csv") + ".meta.json")
    meta: dict[str, Any] = {
        "format": "vrmig-bench-traffic/1",
        "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "loadavg_before": loadavg(),
        "cpus": os.cpu_count(),
        "cpu_model": _cpu_model(),
        "versions": tool_versions(),
        "duration_s": args.duration,
        "reps_unpaced": args.reps,
        "gen_cpu": GEN_CPU,
        "sink_cpu": SINK_CPU,
        "rate_convention": "Ethernet-frame bits (frame incl. 4 B FCS, no preamble/IFG)",
        "loss_ratio": "1 - received/sent (sink's unique packets / generator's sent packets)",
        "note": "shared machine: other workloads run concurrently; see loadavg per run (loadavg_1m)",
    }
    rows: list[Row] = []
    kids = Children()
    workdir = Path(tempfile.mkdtemp(prefix="vrt-bt-work-"))
    try:
        with _sigterm_as_interrupt(), bridge_bed(rx_cpu=rx_cpu) as bed:
            meta["testbed"] = bed.describe()
            backends = {v.label: v.make(bed, workdir) for v in variants}
            meta["variants"] = {
                v.label: {"backend": v.backend, "mode": v.mode, "capabilities": asdict(backends[v.label].capabilities)}
                for v in variants
            }
            todo = plan(variants, frames, rates, args.reps)
            for i, (v, rate, frame, rep) in enumerate(todo, 1):
                b = backends[v.label]
                for f in workdir.iterdir():
                    f.unlink()
                try:
                    row = run_one(v, b, bed, kids, rate, frame, args.duration, rep)
                except (RunError, TrafficError) as e:
                    log.warning("[%d/%d] %s %d B %s: failed: %s", i, len(todo), v.label, frame, rate or "max", e)
                    meta.setdefault("failures", []).append(f"{v.label} {frame} B {rate}: {e}")
                    continue
                finally:
                    kids.kill_all()
                rows.append(row)
                meta.setdefault("argv_example", {}).setdefault(v.label, list(kids.last_gen_argv))
                log.info(
                    "[%d/%d] %-16s %4d B %5s  %9.0f pps %8.1f Mbit/s  err %s  loss %.4f  (load %.1f)",
                    i,
                    len(todo),
                    v.label,
                    frame,
                    f"{rate / 1e6:g}M" if rate else "max",
                    row.achieved_pps,
                    row.achieved_bps / 1e6,
                    "-" if row.rate_error is None else f"{row.rate_error * 100:+.3f}%",
                    row.loss_ratio,
                    row.loadavg_1m,
                )
                write_csv(args.out, rows)
    except KeyboardInterrupt:
        log.warning("bench-traffic: interrupted; partial results kept")
        meta["interrupted"] = True
    except BedError as e:
        print(f"bench-traffic: testbed: {e}", file=sys.stderr)
        return 1
    finally:
        kids.kill_all()
        shutil.rmtree(workdir, ignore_errors=True)
    summary = summarize(rows)
    meta.update(
        finished_utc=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        loadavg_after=loadavg(),
        runs=len(rows),
        summary=summary,
        targets=targets(summary),
        csv=args.out.name,
    )
    write_csv(args.out, rows)
    meta_path.write_text(json.dumps(meta, indent=1) + "\n")
    la0, la1 = meta["loadavg_before"], meta["loadavg_after"]
    print(
        f"traffic benchmark, {meta['cpus']} CPUs ({meta['cpu_model']}), load average before {la0[0]:.2f} "
        f"after {la1[0]:.2f} (shared machine: numbers vary between runs)\n"
    )
    print(markdown(summary))
    print()
    for t in meta["targets"]:
        print(f"- {t}")
    print(f"\n{args.out}\n{meta_path}")
    return 130 if meta.get("interrupted") else 0


if __name__ == "__main__":
    sys.exit(main())
