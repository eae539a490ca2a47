"""Benchmarks of the probes on this machine (root: creates network namespaces ``vrt-pr-*``).

    python -m probes.bench sampler --out results/bench/sampler.csv
    python -m probes.bench methods --out results/bench/methods.csv
    python -m probes.bench irtt --out results/bench/irtt.csv

``sampler``: period jitter (wake-up lateness per round) and CPU of vrsampler at 10 ms, sampling
several interfaces in 3 namespaces, idle and with load: one busy-loop process (a core saturated),
one busy loop per core, and a UDP blast routed across the namespaces (softirq load).
``methods``: the same, idle, for each netlink read method of vrsampler.
``irtt``: irtt clients at 1/2/5/10 ms with irtt's default timer and its busy-wait timer between two
of the namespaces: probes sent vs. expected, skipped sends, send-interval spread, client CPU
(columns IRTT_COLUMNS).

CSV columns: condition,period_ms,p50_late_ms,p99_late_ms,max_late_ms,cpu_percent; the lateness
percentiles are over sampling rounds, cpu_percent is the sampler's CPU time / wall time.
Load processes are started by this module and killed by PID; namespaces are removed in ``finally``.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from probes.irtt import client_argv, load_irtt, server_argv, wait_irtt_server
from probes.sampler import VRSAMPLER, load_counters, sampler_argv

COLUMNS = ("condition", "period_ms", "p50_late_ms", "p99_late_ms", "max_late_ms", "cpu_percent")
CONDITIONS = ("idle", "busy-1core", "busy-all-cores", "udp-blast")
METHODS = ("stats-dump", "stats-get", "link-get", "link-dump")
IRTT_COLUMNS = (
    "timer", "interval_ms", "expected", "sent", "timer_misses", "lost",
    "p50_interval_ms", "p99_interval_ms", "max_interval_ms", "median_rtt_ms", "client_cpu_percent",
)  # fmt: skip
IRTT_INTERVALS_MS = (1, 2, 5, 10)
IRTT_TIMERS = ("comp", "busy")
IRTT_PORT = 2112
POLL_S = 0.01
READY_TIMEOUT_S = 10.0

BUSY_LOOP = "while True: pass"
# UDP blast: as fast as one Python process can send 64-byte datagrams
UDP_BLAST = (
    "import socket, sys\n"
    "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
    "dst = (sys.argv[1], 9)\n"
    "b = bytes(64)\n"
    "while True:\n"
    "    try:\n"
    "        s.sendto(b, dst)\n"
    "    except OSError:\n"
    "        pass\n"
)


@dataclass(frozen=True)
class Result:
    """One benchmark row."""

    condition: str
    period_ms: float
    p50_late_ms: float
    p99_late_ms: float
    max_late_ms: float
    cpu_percent: float

    def row(self) -> list[str]:
        """CSV cells."""
        return [
            self.condition,
            f"{self.period_ms:g}",
            f"{self.p50_late_ms:.4f}",
            f"{self.p99_late_ms:.4f}",
            f"{self.max_late_ms:.4f}",
            f"{self.cpu_percent:.3f}",
        ]


def summarize(condition: str, counters_path: Path) -> Result:
    """Lateness percentiles (per round) and CPU% of one sampler run, from its counters.tsv."""
    c = load_counters(counters_path)
    _, late = c.rounds()
    if len(late) == 0:
        raise RuntimeError(f"{counters_path}: no samples")
    wall = c.footer_number("wall_s") or 0.0
    sched_ns = c.footer_number("cpu_sched_ns")
    if sched_ns is not None and sched_ns >= 0:
        cpu_s = sched_ns / 1e9
    else:
        cpu_s = (c.footer_number("cpu_user_s") or 0.0) + (c.footer_number("cpu_sys_s") or 0.0)
    p50, p99 = np.percentile(late, [50, 99]) / 1e6
    return Result(
        condition=condition,
        period_ms=c.period_ms,
        p50_late_ms=float(p50),
        p99_late_ms=float(p99),
        max_late_ms=float(late.max()) / 1e6,
        cpu_percent=100.0 * cpu_s / wall if wall > 0 else float("nan"),
    )


def write_csv(path: Path, results: list[Result]) -> None:
    """Write the results table (header COLUMNS)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(COLUMNS)
        for r in results:
            w.writerow(r.row())


def format_table(results: list[Result]) -> str:
    """Fixed-width text table of the results."""
    rows = [list(COLUMNS)] + [r.row() for r in results]
    widths = [max(len(r[i]) for r in rows) for i in range(len(COLUMNS))]
    return "\n".join("  ".join(cell.rjust(widths[i]) for i, cell in enumerate(r)) for r in rows)


# ------------------------------------------------------------------ testbed


def _ip(*args: str) -> None:
    res = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {res.stderr.strip()}")


def tx_packets(ns: str, ifname: str) -> int:
    """tx_packets of an interface, from sysfs inside the namespace."""
    out = subprocess.run(
        ["ip", "netns", "exec", ns, "cat", f"/sys/class/net/{ifname}/statistics/tx_packets"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return int(out)


@contextlib.contextmanager
def bench_namespaces(n: int = 3) -> Iterator[tuple[dict[str, list[str]], str, str]]:
    """A chain of ``n`` >= 2 namespaces ``vrt-pr-b<pid>-<i>`` joined by veth pairs, routed end to end;
    each inner namespace also holds a spare veth pair.  Yields (sampler targets, source namespace,
    destination address).  Everything is removed on exit."""
    if n < 2:
        raise ValueError("need at least 2 namespaces")
    names = [f"vrt-pr-b{os.getpid()}-{i}" for i in range(n)]
    made: list[str] = []
    try:
        for ns in names:
            _ip("netns", "add", ns)
            made.append(ns)
            _ip("-n", ns, "link", "set", "lo", "up")
        targets: dict[str, list[str]] = {ns: ["lo"] for ns in names}
        for i in range(n - 1):
            left, right = names[i], names[i + 1]
            _ip("link", "add", f"r{i}", "netns", left, "type", "veth", "peer", "name", f"l{i}", "netns", right)
            _ip("-n", left, "addr", "add", f"198.18.{100 + i}.1/24", "dev", f"r{i}")
            _ip("-n", right, "addr", "add", f"198.18.{100 + i}.2/24", "dev", f"l{i}")
            _ip("-n", left, "link", "set", f"r{i}", "up")
            _ip("-n", right, "link", "set", f"l{i}", "up")
            targets[left].append(f"r{i}")
            targets[right].append(f"l{i}")
        for i, ns in enumerate(names):
            if 0 < i < n - 1:
                _ip("-n", ns, "link", "add", "spare0", "type", "veth", "peer", "name", "spare1")
                targets[ns] += ["spare0", "spare1"]
                subprocess.run(["ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv4.ip_forward=1"], check=True)
            if i < n - 1:
                _ip("-n", ns, "route", "replace", "198.18.0.0/15", "via", f"198.18.{100 + i}.2")
            if i > 0:
                _ip("-n", ns, "route", "replace", "default", "via", f"198.18.{100 + i - 1}.1")
        yield targets, names[0], f"198.18.{100 + n - 2}.2"
    finally:
        for ns in made:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)


class Loads:
    """Load processes started here, stopped by PID."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, argv: list[str]) -> subprocess.Popen[bytes]:
        """Start one load process."""
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.procs.append(p)
        return p

    def busy(self, count: int) -> None:
        """``count`` busy-loop processes; returns once each has run on a CPU."""
        started = [self.start([sys.executable, "-c", BUSY_LOOP]) for _ in range(count)]
        for p in started:
            _wait(lambda p=p: _cpu_ticks(p.pid) > 0, f"busy loop {p.pid} running")

    def udp_blast(self, src_ns: str, dst: str, src_if: str) -> None:
        """A UDP sender in ``src_ns`` toward ``dst``; returns once ``src_if`` transmits."""
        before = tx_packets(src_ns, src_if)
        self.start(["ip", "netns", "exec", src_ns, sys.executable, "-c", UDP_BLAST, dst])
        _wait(lambda: tx_packets(src_ns, src_if) > before + 1000, "UDP blast flowing")

    def stop(self) -> None:
        """Kill every load process started here (by PID) and reap it."""
        for p in self.procs:
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p.pid, signal.SIGKILL)
        for p in self.procs:
            p.wait()
        self.procs.clear()


def _cpu_ticks(pid: int) -> int:
    with contextlib.suppress(OSError):
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])
    return 0


def _wait(cond: Callable[[], bool], what: str, timeout_s: float = READY_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(POLL_S)


def run_sampler(
    out: Path, targets: dict[str, list[str]], period_ms: int, duration_s: float, rt: bool, method: str | None = None
) -> None:
    """Run vrsampler for ``duration_s`` (its own --duration) and check its exit status."""
    argv = sampler_argv(out, targets, period_ms, rt, duration_s=duration_s)
    if method:
        argv[1:1] = ["--method", method]
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        _, err = p.communicate(timeout=duration_s + 30)
    finally:
        if p.poll() is None:
            os.kill(p.pid, signal.SIGKILL)
            p.wait()
    if p.returncode != 0:
        raise RuntimeError(f"vrsampler exited {p.returncode}: {err.decode(errors='replace').strip()}")


def bench_sampler(
    conditions: list[str], period_ms: int, duration_s: float, rt: bool, namespaces: int, workdir: Path
) -> list[Result]:
    """Run the sampler under each condition; one Result per condition."""
    results = []
    ncpu = os.cpu_count() or 1
    with bench_namespaces(namespaces) as (targets, src_ns, dst):
        src_if = targets[src_ns][1]
        for cond in conditions:
            loads = Loads()
            try:
                if cond == "busy-1core":
                    loads.busy(1)
                elif cond == "busy-all-cores":
                    loads.busy(ncpu)
                elif cond == "udp-blast":
                    loads.udp_blast(src_ns, dst, src_if)
                elif cond != "idle":
                    raise ValueError(f"unknown condition {cond}")
                out = workdir / f"{cond}.tsv"
                run_sampler(out, targets, period_ms, duration_s, rt)
            finally:
                loads.stop()
            results.append(summarize(cond if rt else f"{cond}/no-rt", out))
    return results


def bench_methods(period_ms: int, duration_s: float, rt: bool, namespaces: int, workdir: Path) -> list[Result]:
    """Idle run of each netlink read method; condition = method name."""
    results = []
    with bench_namespaces(namespaces) as (targets, _, _):
        for m in METHODS:
            out = workdir / f"{m}.tsv"
            run_sampler(out, targets, period_ms, duration_s, rt, method=m)
            results.append(summarize(m, out))
    return results


def bench_irtt(duration_s: float, workdir: Path) -> list[list[str]]:
    """irtt client runs between the first and last bench namespace; one row (IRTT_COLUMNS) each."""
    import resource

    rows = []
    with bench_namespaces(2) as (targets, src_ns, dst):
        dst_ns = list(targets)[-1]
        srv = subprocess.Popen(
            ["ip", "netns", "exec", dst_ns, *server_argv(f"{dst}:{IRTT_PORT}")],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            wait_irtt_server(dst_ns, dst, IRTT_PORT, READY_TIMEOUT_S, pid=srv.pid, abort=lambda: srv.poll() is not None)
            for timer in IRTT_TIMERS:
                for ms in IRTT_INTERVALS_MS:
                    out = workdir / f"irtt-{timer}-{ms}ms.json.gz"
                    argv = client_argv(f"{dst}:{IRTT_PORT}", ms, duration_s, out, timer=timer)
                    before = resource.getrusage(resource.RUSAGE_CHILDREN)
                    t0 = time.monotonic()
                    subprocess.run(["ip", "netns", "exec", src_ns, *argv], check=True, timeout=duration_s + 60)
                    wall = time.monotonic() - t0
                    after = resource.getrusage(resource.RUSAGE_CHILDREN)
                    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
                    t = load_irtt(out)
                    d = np.diff(t.send_ns) / 1e6
                    rows.append(
                        [timer, str(ms), str(round(duration_s * 1000 / ms)), str(len(t)), str(t.timer_misses),
                         str(int((~t.received).sum())), f"{np.median(d):.3f}", f"{np.percentile(d, 99):.3f}",
                         f"{d.max():.3f}", f"{np.nanmedian(t.rtt_ns) / 1e6:.3f}", f"{100 * cpu / wall:.1f}"]
                    )  # fmt: skip
        finally:
            if srv.poll() is None:
                os.kill(srv.pid, signal.SIGKILL)
            srv.wait()
    return rows


def _write_rows(path: Path, columns: tuple[str, ...], rows: list[list[str]]) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(columns)
        w.writerows(rows)
    table = [list(columns), *rows]
    widths = [max(len(r[i]) for r in table) for i in range(len(columns))]
    return "\n".join("  ".join(c.rjust(widths[i]) for i, c in enumerate(r)) for r in table)


def _conditions(text: str) -> list[str]:
    """``--conditions``: a comma-separated list of :data:`CONDITIONS`."""
    conds = [c for c in text.split(",") if c]
    unknown = set(conds) - set(CONDITIONS)
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown conditions {sorted(unknown)}: choose from {','.join(CONDITIONS)}")
    return conds


def build_parser() -> argparse.ArgumentParser:
    """The subcommands and their options (``sampler``'s are the Make variables of ``make bench-sampler``)."""
    ap = argparse.ArgumentParser(prog="python -m probes.bench", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="what", required=True)
    for name in ("sampler", "methods", "irtt"):
        p = sub.add_parser(name)
        p.add_argument("--out", type=Path, required=True, help="CSV file to write")
        p.add_argument("--period-ms", type=int, default=10, help="the sampler's period, ms")
        p.add_argument("--duration", type=float, default=5.0, help="seconds per condition")
        p.add_argument("--namespaces", type=int, default=3, help="network namespaces sampled")
        p.add_argument("--no-rt", action="store_true", help="run the sampler without --rt")
        p.add_argument("--keep", type=Path, help="keep the counters files in this directory")
        if name == "sampler":
            p.add_argument("--conditions", type=_conditions, default=",".join(CONDITIONS), help="comma-separated")
            p.add_argument("--both", action="store_true", help="each condition with and without --rt")
    return ap


def main(argv: list[str] | None = None) -> int:
    """CLI entry point."""
    a = build_parser().parse_args(argv)
    if os.geteuid() != 0:
        print("probes.bench: needs root (creates network namespaces)", file=sys.stderr)
        return 2
    if not VRSAMPLER.exists():
        print(f"probes.bench: {VRSAMPLER} not built: run `make -C probes`", file=sys.stderr)
        return 2
    with contextlib.ExitStack() as stack:
        if a.keep:
            a.keep.mkdir(parents=True, exist_ok=True)
            workdir = a.keep
        else:
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="vrt-pr-bench-")))
        if a.what == "sampler":
            conds = a.conditions
            modes = [True, False] if a.both else [not a.no_rt]
            results = []
            for rt in modes:
                results += bench_sampler(conds, a.period_ms, a.duration, rt, a.namespaces, workdir)
        elif a.what == "irtt":
            print(_write_rows(a.out, IRTT_COLUMNS, bench_irtt(a.duration, workdir)))
            return 0
        else:
            results = bench_methods(a.period_ms, a.duration, not a.no_rt, a.namespaces, workdir)
    write_csv(a.out, results)
    print(format_table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
