"""``make bench-traffic``: every traffic backend on the same A -> switch -> B testbed, one run.

    sudo .venv/bin/python -m crosstraffic.bench.traffic --out results/bench/traffic.csv

For 64 B and 1500 B IPv4 frames and every backend (builtin = vrgen/vrsink over a UDP socket and in
``--packet`` mode, iperf3, D-ITG, trafgen with its sequence counter and as static frames):

* maximum rate: unpaced (``requested_bps`` 0), ``--reps`` times, the variants interleaved;
* rate accuracy: 10M, 100M and 500M (``--rates``), once each.

Per run: the generator's CPU time per packet (``wait4``: its user and system time, which on a
veth includes the receive path that runs on the sender's CPU), and at paced rates the schedule
deviation of the packets (p50/p99/max µs): ``gen_dev_*`` from the generator's own send stamps
(vrgen: against its exact absolute schedule; D-ITG: its send log's µs stamps against the ideal
schedule anchored at its earliest packet), ``arr_dev_*`` from the sink's receive stamps against
the ideal schedule anchored at the earliest packet (vrsink ``--log`` kernel stamps for vrgen and
trafgen, ITGRecv's user-space stamps for D-ITG).  iperf3 reports no per-packet times: no
deviation.

Generators run on CPU 0, sinks on CPU 1; RPS moves the receive path behind the first veth to
CPU 1 (``--rx-cpu``, see :mod:`crosstraffic.bench.bed`).  Rates count Ethernet-frame bits
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
import selectors
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

import numpy as np

from crosstraffic import get_backend
from crosstraffic.backend import Backend, GenRequest, SinkRequest, TrafficError
from crosstraffic.backends.builtin import BIN_DIR
from crosstraffic.bench.bed import BedError, BridgeBed, bridge_bed
from crosstraffic.runner import REPO, Child, RunError, run, wait_tcp_listen, wait_udp_drained

log = logging.getLogger("crosstraffic.bench.traffic")

PORT = 9000
GEN_CPU, SINK_CPU = 0, 1
FRAMES = (64, 1500)
RATES_BPS = (10_000_000, 100_000_000, 500_000_000)
READY_TIMEOUT_S = 10.0
GEN_GRACE_S = 60.0
SINK_DRAIN_S = 10.0  # at most this long for the sink to read what reached it before it is stopped
RATE_ERROR_TARGET = 0.01
TARGET_X_IPERF3 = 2.5
TARGET_X_TRAFGEN = 1.2
PACED_RATE_ERROR_TARGET = 0.001  # vrgen at 10M/100M
PACED_TARGET_RATES_BPS = (10_000_000, 100_000_000)
SINK_LOG = "sink-packets.bin"
SINK_LOG_DTYPE = np.dtype([("seq", "<u8"), ("t_ns", "<i8")])  # vrsink --log records


@dataclass(frozen=True)
class Variant:
    """One backend configuration of the benchmark."""

    label: str  # e.g. "builtin/packet"
    backend: str  # registry name
    mode: str
    runs: str  # "all": maximum and paced rates; "max": only unpaced; "paced": only the paced rates
    make: Callable[[BridgeBed, Path], Backend]
    gen_extra: tuple[str, ...] = ()  # more generator arguments (after --vrgen-quantum-us's)


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
    cpu_us_per_packet: float | None = None  # generator CPU time (wait4) / sent packets
    gen_dev_p50_us: float | None = None  # send time - scheduled time, generator's own stamps
    gen_dev_p99_us: float | None = None
    gen_dev_max_us: float | None = None
    gen_dev_source: str = ""  # "vrgen schedule" | "ditg send log, anchored" | ""
    arr_dev_p50_us: float | None = None  # sink receive time - ideal schedule, anchored at the earliest packet
    arr_dev_p99_us: float | None = None
    arr_dev_max_us: float | None = None
    arr_dev_source: str = ""  # "vrsink kernel stamps" | "ditg recv log (user space)" | ""
    send_call_p99_us: float | None = None  # vrgen: p99 duration of a sendmmsg call = bound on a stamp's error
    sink_gaps: int | None = None  # inter-arrival gaps > 1 ms at vrsink (bursts as long as that show up here)


@dataclass(frozen=True)
class Deviation:
    """Schedule deviation of a run's packets, in µs."""

    p50_us: float
    p99_us: float
    max_us: float
    count: int


def anchored_deviation(seq: np.ndarray, t_ns: np.ndarray, interval_ns: float) -> Deviation | None:
    """How far each packet's time lies behind an ideal schedule ``t_first + (seq - seq_first) *
    interval_ns`` whose origin is chosen so that the earliest packet has deviation 0.

    For tools that do not report their schedule's origin (and for receive stamps, which carry a
    path delay): it measures the spread around a constant-rate schedule, not absolute lateness.
    Duplicates count once (their first occurrence); ``None`` for fewer than two packets."""
    seq = np.asarray(seq, dtype=np.uint64)
    t = np.asarray(t_ns, dtype=np.int64)
    if seq.shape != t.shape:
        raise ValueError(f"seq and t_ns differ in length ({seq.size} vs {t.size})")
    if interval_ns <= 0:
        raise ValueError(f"interval_ns must be > 0, got {interval_ns}")
    _, first = np.unique(seq, return_index=True)
    if first.size < 2:
        return None
    seq, t = seq[first], t[first]
    x = (t - t[0]).astype(np.float64) - (seq - seq[0]).astype(np.float64) * interval_ns
    dev = (x - x.min()) / 1e3
    return Deviation(
        p50_us=float(np.percentile(dev, 50)),
        p99_us=float(np.percentile(dev, 99)),
        max_us=float(dev.max()),
        count=int(dev.size),
    )


def read_sink_log(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """``vrsink --log``: little-endian (u64 seq, i64 t_ns) records -> (seq, t_ns)."""
    rec = np.fromfile(path, dtype=SINK_LOG_DTYPE)
    return rec["seq"], rec["t_ns"]


def parse_itgdec_octave(text: str, rx: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """``ITGDec LOG -o FILE`` lines ``seq txH txM txS rxH rxM rxS size`` -> (seq, t_ns) of the send
    (or with ``rx`` the receive) time; wall-clock times of day (µs), unwrapped across midnight."""
    seqs: list[int] = []
    us: list[int] = []
    col = 4 if rx else 1
    for line in text.splitlines():
        f = line.split()
        if not f:
            continue
        if len(f) != 8:
            raise ValueError(f"ITGDec -o line has {len(f)} fields, want 8: {line!r}")
        h, m, sec = int(f[col]), int(f[col + 1]), float(f[col + 2])
        seqs.append(int(f[0]))
        us.append((h * 3600 + m * 60) * 1_000_000 + round(sec * 1e6))
    t = np.asarray(us, dtype=np.int64)
    if t.size > 1:  # a run across midnight: the time of day falls back by a day
        t = t + np.concatenate(([0], np.cumsum(np.diff(t) < -43_200_000_000))) * 86_400_000_000
    return np.asarray(seqs, dtype=np.uint64), t * 1000


def schedule_interval_ns(backend: str, mode: str, rate_bps: int, frame_bytes: int) -> float:
    """The requested packet interval: trafgen ``--rate`` sends a whole number of packets per second."""
    pps = rate_bps / (frame_bytes * 8)
    if backend == "trafgen" and mode != "gap":
        pps = round(pps)
    return 1e9 / pps


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

    Reads stdout and stderr while it waits: a long run's gen.json (a per-ms histogram, late events)
    is larger than a pipe's buffer, and a generator blocked writing it would never exit."""
    assert child.popen.stdout is not None and child.popen.stderr is not None
    deadline = time.monotonic() + timeout_s
    out = {child.popen.stdout.fileno(): bytearray(), child.popen.stderr.fileno(): bytearray()}
    status: int | None = None
    cpu_s = 0.0
    with selectors.DefaultSelector() as sel:
        for fd in out:
            sel.register(fd, selectors.EVENT_READ)
        while status is None or sel.get_map():
            if status is None:
                pid, st, ru = os.wait4(child.pid, os.WNOHANG)
                if pid == child.pid:
                    status, cpu_s = st, ru.ru_utime + ru.ru_stime
                    child.popen.returncode = os.waitstatus_to_exitcode(st)  # reaped: Popen must not wait or kill
            if time.monotonic() > deadline:
                child.kill()
                raise RunError(f"{' '.join(child.argv)} did not exit within {timeout_s:.0f} s")
            for key, _ in sel.select(0.02):  # polling the exit, not waiting for readiness
                chunk = os.read(key.fd, 65536)
                if chunk:
                    out[key.fd] += chunk
                else:
                    sel.unregister(key.fd)
    child.popen.stdout.close()
    child.popen.stderr.close()
    stdout, stderr = (bytes(b).decode(errors="replace") for b in out.values())
    return int(child.popen.returncode), stdout, stderr, cpu_s


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
    v: Variant,
    b: Backend,
    bed: BridgeBed,
    kids: Children,
    rate: int,
    frame: int,
    duration_s: float,
    rep: int,
    workdir: Path,
    gen_extra: Sequence[str] = (),
) -> Row:
    """One generator -> sink run of one variant (``workdir``: the sink's packet log, D-ITG's logs;
    ``gen_extra``: more generator arguments)."""
    started, la = time.time(), loadavg()[0]
    sink_log = workdir / SINK_LOG if rate and b.capabilities.packet_log else None
    sink = kids.start(b.sink_argv(SinkRequest(port=PORT, bind=bed.b4, cpu=SINK_CPU, log=sink_log)), bed.b)
    _wait_ready(b, sink, bed.b)
    gen_argv = b.gen_argv(
        GenRequest(dst=bed.b4, port=PORT, rate_bps=rate, frame_bytes=frame, duration_s=duration_s, cpu=GEN_CPU)
    )
    gen = kids.start([*gen_argv, *gen_extra], bed.a, gen=True)
    rc, gen_out, gen_err, gen_cpu = finish_with_rusage(gen, duration_s + GEN_GRACE_S)
    if not b.gen_exit_ok(rc):
        raise RunError(f"{v.label} generator exited with {rc}: {gen_err.strip()[-300:]}")
    if not b.sink_stops_itself:
        wait_udp_drained(bed.b, PORT, SINK_DRAIN_S)  # the sink reads what reached it first
        sink.signal(b.sink_stop_signal)
    sf = sink.finish(60)
    g = b.parse_gen(_decoded(b.gen_decode_argv(), gen_out))
    s = b.parse_sink(_decoded(b.sink_decode_argv(), sf.stdout))
    elapsed = (g.end_ns - g.start_ns) / 1e9
    gen_dev, arr_dev = _deviations(v, b, g.raw, rate, frame, sink_log) if rate else (None, None)
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
        cpu_us_per_packet=round(gen_cpu / g.packets * 1e6, 2) if g.packets else None,
        gen_dev_p50_us=gen_dev[0].p50_us if gen_dev else None,
        gen_dev_p99_us=gen_dev[0].p99_us if gen_dev else None,
        gen_dev_max_us=gen_dev[0].max_us if gen_dev else None,
        gen_dev_source=gen_dev[1] if gen_dev else "",
        arr_dev_p50_us=arr_dev[0].p50_us if arr_dev else None,
        arr_dev_p99_us=arr_dev[0].p99_us if arr_dev else None,
        arr_dev_max_us=arr_dev[0].max_us if arr_dev else None,
        arr_dev_source=arr_dev[1] if arr_dev else "",
        send_call_p99_us=_send_call_p99_us(g.raw) if v.backend == "builtin" else None,
        sink_gaps=len(s.gaps) if s.gaps is not None else None,
    )


def _rounded(d: Deviation) -> Deviation:
    return Deviation(round(d.p50_us, 1), round(d.p99_us, 1), round(d.max_us, 1), d.count)


def _send_call_p99_us(raw: Any) -> float | None:
    d = raw.get("send_call_ns") if hasattr(raw, "get") else None
    return round(d["p99"] / 1e3, 1) if d and d.get("count") else None


def _vrgen_deviation(raw: Any) -> Deviation | None:
    d = raw.get("sched_dev_ns") if hasattr(raw, "get") else None
    if not d or not d.get("count"):
        return None  # unpaced, or a vrgen without the field
    return Deviation(d["p50"] / 1e3, d["p99"] / 1e3, d["max"] / 1e3, int(d["count"]))


def _ditg_log(dec: str, log_path: Path, rx: bool, interval_ns: float) -> Deviation | None:
    """Decode one D-ITG log with ``ITGDec -o`` and measure its anchored deviation."""
    out = Path(f"{log_path}.txt")
    f = run([dec, str(log_path), "-o", str(out)], timeout_s=300)
    if f.returncode != 0 or not out.exists():
        raise RunError(f"{dec} {log_path} -o: exit {f.returncode}: {f.stderr.strip()[-300:]}")
    return anchored_deviation(*parse_itgdec_octave(out.read_text(), rx=rx), interval_ns)


def _deviations(
    v: Variant, b: Backend, gen_raw: Any, rate: int, frame: int, sink_log: Path | None
) -> tuple[tuple[Deviation, str] | None, tuple[Deviation, str] | None]:
    """(generator-side, sink-side) schedule deviation of one paced run, each with its source."""
    interval = schedule_interval_ns(v.backend, v.mode, rate, frame)
    gen = arr = None
    if v.backend == "builtin" and (d := _vrgen_deviation(gen_raw)):
        gen = (_rounded(d), "vrgen schedule")
    if sink_log is not None and sink_log.exists() and (d := anchored_deviation(*read_sink_log(sink_log), interval)):
        arr = (_rounded(d), "vrsink kernel stamps")
    if v.backend == "ditg":
        dec = b.executables()["decoder"]
        send_log, recv_log = getattr(b, "send_log", None), getattr(b, "recv_log", None)
        if send_log is not None and Path(send_log).exists() and (d := _ditg_log(dec, send_log, False, interval)):
            gen = (_rounded(d), "ditg send log, anchored")
        if recv_log is not None and Path(recv_log).exists() and (d := _ditg_log(dec, recv_log, True, interval)):
            arr = (_rounded(d), "ditg recv log (user space)")
    return gen, arr


def alt_variants(quanta_us: Sequence[int], baseline_dir: Path | None) -> list[Variant]:
    """Extra builtin variants run side by side with the default ones (paced rates only): vrgen with
    ``--quantum-us N`` (modes ``udp-qN`` / ``packet-qN``) and the vrgen/vrsink of ``baseline_dir``
    (modes ``udp-base`` / ``packet-base``), e.g. a previous build, for before/after tables."""

    def udp(bin_dir: Path | None) -> Callable[[BridgeBed, Path], Backend]:
        return lambda bed, wd: get_backend("builtin", bin_dir=bin_dir)

    def packet(bin_dir: Path | None) -> Callable[[BridgeBed, Path], Backend]:
        return lambda bed, wd: get_backend("builtin", bin_dir=bin_dir, packet_dev=bed.a_if, dst_mac=bed.b_mac)

    out: list[Variant] = []
    for q in quanta_us:
        extra = ("--quantum-us", str(q))
        out.append(Variant(f"builtin/udp-q{q}", "builtin", f"udp-q{q}", "paced", udp(None), extra))
        out.append(Variant(f"builtin/packet-q{q}", "builtin", f"packet-q{q}", "paced", packet(None), extra))
    if baseline_dir is not None:
        out.append(Variant("builtin/udp-base", "builtin", "udp-base", "paced", udp(baseline_dir)))
        out.append(Variant("builtin/packet-base", "builtin", "packet-base", "paced", packet(baseline_dir)))
    return out


def baseline_bin_dir(vrgen: Path, into: Path) -> Path:
    """A bin directory in ``into`` with ``vrgen`` (another build) and this tree's vrsink."""
    d = into / "baseline-bin"
    d.mkdir()
    (d / "vrgen").symlink_to(vrgen.resolve())
    (d / "vrsink").symlink_to(BIN_DIR / "vrsink")
    return d


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
                "cpu_us_per_packet": _median_or_none([r.cpu_us_per_packet for r in rs]),
                **{
                    f"{side}_dev_{q}_us": _median_or_none([getattr(r, f"{side}_dev_{q}_us") for r in rs])
                    for side in ("gen", "arr")
                    for q in ("p50", "p99", "max")
                },
                "send_call_p99_us": _median_or_none([r.send_call_p99_us for r in rs]),
                "sink_gaps": _median_or_none([r.sink_gaps for r in rs]),
                "gen_dev_source": rs[0].gen_dev_source,
                "arr_dev_source": rs[0].arr_dev_source,
            }
        )
    return out


def _median_or_none(xs: Sequence[float | None]) -> float | None:
    vals = [x for x in xs if x is not None]
    return statistics.median(vals) if vals else None


def _dev_cell(s: dict[str, Any], side: str) -> str:
    vals = [s.get(f"{side}_dev_{q}_us") for q in ("p50", "p99", "max")]
    if any(v is None for v in vals):
        return "–"
    return " / ".join(f"{v:,.0f}" if v >= 10 else f"{v:.1f}" for v in vals)


def pacing_markdown(summary: Sequence[dict[str, Any]]) -> str:
    """The paced runs: CPU per packet, rate error and schedule deviation, side by side."""
    lines = [
        "| backend | mode | frame B | requested | achieved Mbit/s | rate error | gen CPU µs/pkt "
        "| send − schedule p50 / p99 / max µs | arrival − schedule (anchored) p50 / p99 / max µs "
        "| sendmmsg p99 µs | sink gaps > 1 ms |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in summary:
        if not s["requested_bps"]:
            continue
        err = "–" if s["rate_error"] is None else f"{s['rate_error'] * 100:+.3f} %"
        cpu = "–" if s["cpu_us_per_packet"] is None else f"{s['cpu_us_per_packet']:.2f}"
        gsrc = {"vrgen schedule": "", "ditg send log, anchored": " (anchored, µs stamps)"}.get(s["gen_dev_source"], "")
        gaps = "–" if s.get("sink_gaps") is None else f"{s['sink_gaps']:g}"
        call = "–" if s.get("send_call_p99_us") is None else f"{s['send_call_p99_us']:,.1f}"
        asrc = {"ditg recv log (user space)": " (user-space stamps)"}.get(s["arr_dev_source"], "")
        lines.append(
            f"| {s['backend']} | {s['mode']} | {s['frame_bytes']} | {s['requested_bps'] / 1e6:g}M "
            f"| {s['achieved_bps'] / 1e6:,.2f} | {err} | {cpu} | {_dev_cell(s, 'gen')}{gsrc} "
            f"| {_dev_cell(s, 'arr')}{asrc} | {call} | {gaps} |"
        )
    return "\n".join(lines)


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
    out += pacing_targets(summary)
    drops = [s["sink_socket_drops"] for s in summary if s["backend"] in ("builtin", "trafgen")]
    if drops:
        out.append(
            f"vrsink socket drops (sink-caused loss): max {max(d or 0 for d in drops)} "
            f"({'met' if not any(drops) else 'NOT met'})"
        )
    return out


def pacing_targets(summary: Sequence[dict[str, Any]]) -> list[str]:
    """vrgen at 10M/100M: rate error <= 0.1 % and CPU per packet <= trafgen's, per point and mode."""
    at = {(s["backend"], s["mode"], s["frame_bytes"], s["requested_bps"]): s for s in summary}
    out = []
    for mode in ("udp", "packet"):
        points = sorted((f, r) for (b, m, f, r) in at if b == "builtin" and m == mode and r in PACED_TARGET_RATES_BPS)
        if not points:
            continue
        errs = [(f, r, at["builtin", mode, f, r]["rate_error"]) for f, r in points]
        bad = [
            f"{f} B/{r / 1e6:g}M {'–' if e is None else f'{e * 100:+.3f} %'}"
            for f, r, e in errs
            if e is None or abs(e) > PACED_RATE_ERROR_TARGET
        ]
        out.append(
            f"builtin/{mode} rate error <= 0.1 % at 10M/100M: {'met' if not bad else 'NOT met at ' + ', '.join(bad)}"
        )
        for tmode in ("counter", "gap"):
            cells, missed, compared = [], 0, 0
            for f, r in points:
                me, other = at["builtin", mode, f, r]["cpu_us_per_packet"], at.get(("trafgen", tmode, f, r))
                ot = other["cpu_us_per_packet"] if other else None
                if me is None or ot is None:
                    cells.append(f"{f} B/{r / 1e6:g}M n/a")
                    continue
                missed += me > ot
                compared += 1
                cells.append(f"{f} B/{r / 1e6:g}M {me:.2f} vs {ot:.2f}{'' if me <= ot else ' (NOT met)'}")
            verdict = "not measured" if not compared else "met" if not missed else "NOT met"
            out.append(f"builtin/{mode} CPU µs/packet <= trafgen/{tmode}'s: {verdict} ({', '.join(cells)})")
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


def build_parser() -> argparse.ArgumentParser:
    """The options (all but ``--out``: the Make variables of ``make bench-traffic``)."""
    ap = argparse.ArgumentParser(prog="python -m crosstraffic.bench.traffic", description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="CSV path (meta goes to <out minus .csv>.meta.json)")
    ap.add_argument("--duration", type=float, default=4.0, help="whole seconds per run (default 4)")
    ap.add_argument("--reps", type=int, default=3, help="repetitions of the unpaced maxima (default 3)")
    ap.add_argument(
        "--rates", default=",".join(str(r) for r in RATES_BPS), help="paced rates in bit/s, comma-separated"
    )
    ap.add_argument("--frames", default=",".join(str(f) for f in FRAMES), help="frame sizes, comma-separated")
    ap.add_argument("--only", default="", help="comma-separated variant labels (default: all)")
    ap.add_argument(
        "--vrgen-quantum-us",
        type=int,
        default=None,
        help="pass --quantum-us N to vrgen (builtin variants; default: vrgen's own default)",
    )
    ap.add_argument(
        "--vrgen-alt-quantum-us",
        default="",
        help="comma-separated quanta: also run vrgen with --quantum-us N at the paced rates, side by side "
        "(modes udp-qN, packet-qN)",
    )
    ap.add_argument(
        "--vrgen-baseline",
        type=Path,
        default=None,
        help="another vrgen binary (e.g. an older build) to run at the paced rates beside the current one, "
        "with the current vrsink (modes udp-base, packet-base)",
    )
    ap.add_argument(
        "--rx-cpu",
        default="none",
        help="move the receive path behind the first veth to this CPU with RPS (default 'none': a veth "
        "runs it on the sender's CPU)",
    )
    return ap


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; write CSV + meta; print the markdown table."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    try:
        rates = [int(x) for x in args.rates.split(",") if x.strip()]
        frames = [int(x) for x in args.frames.split(",") if x.strip()]
        rx_cpu = None if args.rx_cpu == "none" else int(args.rx_cpu)
        alt_quanta = [int(x) for x in args.vrgen_alt_quantum_us.split(",") if x.strip()]
    except ValueError as e:
        print(f"bench-traffic: bad --rates/--frames/--rx-cpu/--vrgen-alt-quantum-us: {e}", file=sys.stderr)
        return 2
    if any(q < 0 for q in alt_quanta):
        print("bench-traffic: --vrgen-alt-quantum-us values must be >= 0 (0 = one wakeup per packet)", file=sys.stderr)
        return 2
    if args.vrgen_baseline is not None and not os.access(args.vrgen_baseline, os.X_OK):
        print(f"bench-traffic: --vrgen-baseline {args.vrgen_baseline}: not an executable file", file=sys.stderr)
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
    scratch = Path(tempfile.mkdtemp(prefix="vrt-bt-bin-"))
    try:
        base = baseline_bin_dir(args.vrgen_baseline, scratch) if args.vrgen_baseline is not None else None
        variants += alt_variants(alt_quanta, base)
        return _main(args, variants, rates, frames, rx_cpu)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _main(
    args: argparse.Namespace, variants: list[Variant], rates: list[int], frames: list[int], rx_cpu: int | None
) -> int:
    """The run itself, after the argument checks that need no scratch directory."""
    bad_duration = args.duration < 1 or args.duration != int(args.duration)
    if bad_duration or args.reps < 1 or any(f < 64 or f > 1518 for f in frames) or any(r <= 0 for r in rates):
        # whole seconds: iperf3 -t takes integers; trafgen --rate sends whole seconds' bursts
        print(
            "bench-traffic: --duration whole seconds >= 1, --reps >= 1, frames 64..1518, rates > 0 please",
            file=sys.stderr,
        )
        return 2
    if args.vrgen_quantum_us is not None and args.vrgen_quantum_us < 0:
        print("bench-traffic: --vrgen-quantum-us must be >= 0 (0 = one wakeup per packet)", file=sys.stderr)
        return 2
    vrgen_extra = () if args.vrgen_quantum_us is None else ("--quantum-us", str(args.vrgen_quantum_us))
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
        "vrgen_extra_args": list(vrgen_extra),
        "vrgen_baseline": str(args.vrgen_baseline) if args.vrgen_baseline else None,
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
                    extra = (*vrgen_extra, *v.gen_extra) if v.backend == "builtin" else ()
                    row = run_one(v, b, bed, kids, rate, frame, args.duration, rep, workdir, extra)
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
    print(pacing_markdown(summary))
    print()
    for t in meta["targets"]:
        print(f"- {t}")
    print(f"\n{args.out}\n{meta_path}")
    return 130 if meta.get("interrupted") else 0


if __name__ == "__main__":
    sys.exit(main())
