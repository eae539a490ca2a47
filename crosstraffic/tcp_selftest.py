"""Self-test of vrtcp over loopback, IPv4 and IPv6 (``make -C crosstraffic check``).

Bulk flows (sink + send, paced and unpaced: traces, byte accounting, flow mapping, TCP_INFO),
receive gaps and refused connections at the sink, a connection reset under the sender,
request/response (answered transactions, an unanswering server: busy and outstanding) and every
kind of bad argument (exit 2, one line, no file).  Fails on any wrong result or any
AddressSanitizer / UndefinedBehaviorSanitizer report.  Needs no root.

    python -m crosstraffic.tcp_selftest --bin crosstraffic/bin/san
"""

from __future__ import annotations

import argparse
import json
import os
import select
import signal
import socket
import struct
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from crosstraffic.backend import TrafficError
from crosstraffic.runner import BIN_DIR, Child, Finished, RunError, run
from crosstraffic.selftest import Failure, check, clean
from crosstraffic.tcp import (
    parse_summary,
    read_rr,
    read_sink_gaps,
    read_sink_trace,
    read_tcpinfo,
    rr_client_argv,
    rr_server_argv,
    send_argv,
    sink_argv,
)

READY_TIMEOUT_S = 10.0
DRAIN_TIMEOUT_S = 10.0  # the sink reads what the stopped sender left in flight
BULK_RUN_S = 1.5  # the stimulus: how long the bulk flows run
SAMPLE_MS = 10
# median sampling interval within this factor of --sample-ms: a timerfd on a busy 2-core machine
# under ASan wakes late now and then, but not for most ticks
SAMPLE_SLACK = 2.0
# paced goodput over the last second within this fraction of the rate: loopback segments are
# 64 KiB (2.6 % of a second at 20M), and the kernel paces segment bytes (payload + TCP header)
PACING_TOLERANCE = 0.15
PACED_BPS = 20_000_000
# t_send - t_sched may be negative by the time between reading CLOCK_MONOTONIC and CLOCK_REALTIME
# at the schedule's origin (consecutive vDSO calls)
SCHED_CLOCK_TOLERANCE_NS = 1_000_000
POLL_S = 0.01


def free_tcp_port(family: int) -> int:
    """A TCP port that is free right now on the loopback interface."""
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.bind(("::1" if family == socket.AF_INET6 else "127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(cond: Callable[[], bool], timeout_s: float, what: str) -> None:
    """Poll ``cond`` until true; fail with ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not cond():
        check(time.monotonic() < deadline, f"timed out waiting for {what}")
        time.sleep(POLL_S)


def last_bytes(path: Path) -> dict[int, int]:
    """Cumulative bytes per flow in the sink trace's last rows (so far)."""
    try:
        t = read_sink_trace(path)
    except TrafficError:
        return {}
    return {int(f): int(b) for f, b in zip(t.flow, t.bytes, strict=True)}


class TcpSelfTest:
    """The cases; ``bindir`` holds vrtcp."""

    def __init__(self, bindir: Path) -> None:
        self.bin = bindir / "vrtcp"

    def start(self, argv: list[str]) -> Child:
        """Start a vrtcp subcommand and wait for its READY line."""
        c = Child(argv)
        c.wait_line("READY", READY_TIMEOUT_S)
        return c

    def stop(self, c: Child, mode: str) -> dict:
        """SIGTERM, expect exit 0 and a clean run; the JSON summary."""
        c.signal(signal.SIGTERM)
        return self.summary(clean(c.finish(10)), mode)

    def summary(self, f: Finished, mode: str) -> dict:
        check(f.returncode == 0, f"vrtcp {mode}: exit {f.returncode}: {f.stderr.strip()}")
        try:
            return parse_summary(f.stdout, mode)
        except TrafficError as e:
            raise Failure(str(e)) from None

    # ---- bulk ----

    def _bulk(self, family: int, addr: str, rate_bps: int) -> None:
        port = free_tcp_port(family)
        with tempfile.TemporaryDirectory() as tmp:
            sink_tsv, send_tsv = Path(tmp) / "sink.tsv", Path(tmp) / "send.tsv"
            sink = self.start(sink_argv(bind=addr, port=port, flows=2, sample_ms=SAMPLE_MS, out=sink_tsv,
                                        binary=self.bin))  # fmt: skip
            try:
                send = self.start(send_argv(dst=addr, port=port, flows=2, sample_ms=SAMPLE_MS, out=send_tsv,
                                            cc="reno", rate_bps=rate_bps, binary=self.bin))  # fmt: skip
                try:
                    time.sleep(BULK_RUN_S)  # the stimulus: the flows run
                finally:
                    g = self.stop(send, "send")
                want = dict(enumerate(g["bytes_written"]))
                wait_for(lambda: last_bytes(sink_tsv) == want, DRAIN_TIMEOUT_S, f"the sink to read {want}")
            finally:
                s = self.stop(sink, "sink")
            check(g["cc"] == ["reno", "reno"] and g["rate_bps"] == rate_bps, f"send summary: {g}")
            check(g["errors"] == [] and s["errors"] == [], f"errors: send {g['errors']} sink {s['errors']}")
            check(s["connected"] == 2 and s["bytes"] == g["bytes_written"], f"sink {s['bytes']} vs {g}")
            # flows mapped: the sink saw flow i from the sender's local port of flow i
            ports = {p["flow"]: p["port"] for p in s["peers"]}
            check(ports == dict(enumerate(g["local_ports"])), f"peers {s['peers']} vs {g['local_ports']}")
            tr = read_sink_trace(sink_tsv)
            check(not tr.dropped_partial_line and len(tr.t_ns) == s["samples"], f"sink rows {len(tr.t_ns)}")
            for f in (0, 1):
                m = tr.flow == f
                t, b = tr.t_ns[m], tr.bytes[m]
                check(len(t) >= BULK_RUN_S * 1000 / SAMPLE_MS / 2, f"flow {f}: only {len(t)} sink rows")
                check(bool(np.all(np.diff(b) >= 0) and np.all(np.diff(t) > 0)), f"flow {f}: not monotone")
                check(int(b[-1]) == s["bytes"][f], f"flow {f}: last row {b[-1]} vs {s['bytes'][f]}")
                med = float(np.median(np.diff(t)))
                check(SAMPLE_MS * 1e6 / SAMPLE_SLACK <= med <= SAMPLE_MS * 1e6 * SAMPLE_SLACK, f"interval {med} ns")
                if rate_bps:
                    late = t >= t[-1] - 1_000_000_000
                    rate = (b[late][-1] - b[late][0]) * 8e9 / (t[late][-1] - t[late][0])
                    check(abs(rate / rate_bps - 1) <= PACING_TOLERANCE, f"flow {f}: {rate:.0f} bit/s paced {rate_bps}")
            ti = read_tcpinfo(send_tsv)
            check(len(ti.t_ns) == g["samples"] and g["tcpinfo_len"] > 0, f"tcp_info rows {len(ti.t_ns)}")
            for f in (0, 1):
                m = ti.flow == f
                check(int(m.sum()) >= BULK_RUN_S * 1000 / SAMPLE_MS / 2, f"flow {f}: {m.sum()} TCP_INFO rows")
                check(bool(np.all(ti.cwnd[m] > 0) and np.all(ti.snd_mss[m] > 0)), f"flow {f}: cwnd/mss 0")
                check(bool(np.all(np.diff(ti.bytes_acked[m]) >= 0)), f"flow {f}: bytes_acked not monotone")
                check(0 < int(ti.bytes_acked[m][-1]) <= g["bytes_written"][f] + 1, f"flow {f}: bytes_acked")
            check(set(g["netstat_delta"]) >= {"TCPTimeouts", "TCPSpuriousRTOs", "TCPLossProbes", "TCPDSACKRecv",
                                              "TCPRetransFail"}, f"netstat: {g['netstat_delta']}")  # fmt: skip

    def case_bulk_v4_paced(self) -> None:
        self._bulk(socket.AF_INET, "127.0.0.1", PACED_BPS)

    def case_bulk_v6_unpaced(self) -> None:
        self._bulk(socket.AF_INET6, "::1", 0)

    def case_sink_gap_and_refusals(self) -> None:
        """A 60 ms pause of a hand-driven flow is one gap with its bytes; a bad flow index and a
        connection beyond --flows are refused and recorded."""
        port = free_tcp_port(socket.AF_INET)
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "sink.tsv"
            sink = self.start(sink_argv(bind="127.0.0.1", port=port, flows=1, sample_ms=5, out=out, gap_ms=20,
                                        binary=self.bin))  # fmt: skip
            try:
                with socket.create_connection(("127.0.0.1", port)) as bad:
                    bad.sendall(struct.pack("<I", 7))  # flow 7 of 1
                    check(bad.recv(1) == b"", "the sink kept a connection with flow index 7")
                with socket.create_connection(("127.0.0.1", port)) as c:
                    c.sendall(struct.pack("<I", 0) + bytes(1000))
                    wait_for(lambda: last_bytes(out) == {0: 1000}, READY_TIMEOUT_S, "1000 bytes at the sink")
                    with socket.create_connection(("127.0.0.1", port)) as extra:
                        check(extra.recv(1) == b"", "the sink kept a connection beyond --flows")
                    time.sleep(0.06)  # the stimulus: a 60 ms silence of the flow
                    c.sendall(bytes(500))
                    wait_for(lambda: last_bytes(out) == {0: 1500}, READY_TIMEOUT_S, "1500 bytes at the sink")
            finally:
                s = self.stop(sink, "sink")
            gaps = read_sink_gaps(Path(f"{out}.gaps"))
            check(s["gaps"] == len(gaps.flow) == 1, f"gaps: {s['gaps']} / {gaps}")
            check(int(gaps.flow[0]) == 0 and int(gaps.bytes_before[0]) == 1000, f"gap {gaps}")
            dur = int(gaps.t_after_ns[0] - gaps.t_before_ns[0])
            check(50_000_000 <= dur <= 1_000_000_000, f"gap of {dur} ns for a 60 ms pause")
            check(s["bytes"] == [1500] and len(s["errors"]) == 2, f"sink: {s}")
            check("flow index 7" in s["errors"][0]["error"] and "beyond" in s["errors"][1]["error"], f"{s['errors']}")

    def case_send_survives_a_reset(self) -> None:
        """A peer resetting flow 0 is an error with its time; flow 1 goes on."""
        with socket.create_server(("127.0.0.1", 0)) as lsn, tempfile.TemporaryDirectory() as tmp:
            port = lsn.getsockname()[1]
            out = Path(tmp) / "send.tsv"
            send = Child(send_argv(dst="127.0.0.1", port=port, flows=2, sample_ms=SAMPLE_MS, out=out,
                                   binary=self.bin))  # fmt: skip
            try:
                conns: dict[int, socket.socket] = {}
                lsn.settimeout(READY_TIMEOUT_S)
                for _ in range(2):
                    c, _addr = lsn.accept()
                    c.settimeout(READY_TIMEOUT_S)
                    conns[struct.unpack("<I", c.recv(4, socket.MSG_WAITALL))[0]] = c
                send.wait_line("READY", READY_TIMEOUT_S)
                t_reset = time.clock_gettime_ns(time.CLOCK_REALTIME)
                conns[0].setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                conns[0].close()  # RST
                got, deadline = 0, time.monotonic() + 0.5  # the stimulus: flow 1 runs on for 0.5 s
                while time.monotonic() < deadline:
                    if select.select([conns[1]], [], [], 0.05)[0]:
                        got += len(conns[1].recv(1 << 20))
                g = self.stop(send, "send")
                conns[1].close()
            finally:
                send.kill()
            errs = g["errors"]
            check(len(errs) == 1 and errs[0]["flow"] == 0 and errs[0]["t_ns"] >= t_reset, f"errors: {errs}")
            check(any(w in errs[0]["error"] for w in ("reset", "Broken pipe")), f"error: {errs[0]}")
            check(got > 0 and g["bytes_written"][1] >= got, f"flow 1: read {got}, written {g['bytes_written']}")
            ti = read_tcpinfo(out)
            check(set(ti.flow.tolist()) == {0, 1}, "TCP_INFO rows of both flows")

    # ---- request/response ----

    def _rr(self, family: int, addr: str) -> None:
        port = free_tcp_port(family)
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "rr.tsv"
            srv = self.start(rr_server_argv(bind=addr, port=port, flows=2, resp=2000, binary=self.bin))
            try:
                f = clean(run(rr_client_argv(dst=addr, port=port, flows=2, rate_tps=200, req=100, resp=2000,
                                             out=out, duration_s=1.0, binary=self.bin), timeout_s=30))  # fmt: skip
            finally:
                sv = self.stop(srv, "rr-server")
            c = self.summary(f, "rr-client")
            # transactions due before the 1 s end: k * 5 ms < 1 s
            check(c["scheduled"] == 200 and c["sent"] + c["busy"] == 200, f"client: {c}")
            check(c["answered"] > 0 and c["answered"] + c["outstanding_at_end"] == c["sent"], f"client: {c}")
            check(sv["connected"] == 2 and sv["responses"] == c["answered"], f"server {sv} vs client {c}")
            check(c["errors"] == [] and sv["errors"] == [], f"errors: {c['errors']} {sv['errors']}")
            tr = read_rr(out)
            check(sorted(tr.id.tolist()) == list(range(200)), "transaction ids")
            ok = tr.t_done_ns >= 0
            check(int(ok.sum()) == c["answered"], f"{ok.sum()} answered rows for {c['answered']}")
            check(bool(np.all(tr.t_done_ns[ok] > tr.t_send_ns[ok])), "non-positive latency")
            sent = tr.t_send_ns >= 0
            check(bool(np.all(tr.t_send_ns[sent] >= tr.t_sched_ns[sent] - SCHED_CLOCK_TOLERANCE_NS)), "sent early")
            check(bool(np.all(np.diff(np.sort(tr.t_sched_ns)) == 5_000_000)), "schedule not 5 ms apart")
            check(set(tr.flow[sent].tolist()) == {0, 1}, "both flows carried transactions")

    def case_rr_v4(self) -> None:
        self._rr(socket.AF_INET, "127.0.0.1")

    def case_rr_v6(self) -> None:
        self._rr(socket.AF_INET6, "::1")

    def case_rr_unanswered(self) -> None:
        """A server that never answers: one transaction sent and outstanding, the rest busy."""
        with socket.create_server(("127.0.0.1", 0)) as lsn, tempfile.TemporaryDirectory() as tmp:
            port = lsn.getsockname()[1]
            out = Path(tmp) / "rr.tsv"
            cli = Child(rr_client_argv(dst="127.0.0.1", port=port, flows=1, rate_tps=100, req=8, resp=8, out=out,
                                       duration_s=0.3, binary=self.bin))  # fmt: skip
            try:
                lsn.settimeout(READY_TIMEOUT_S)
                conn, _addr = lsn.accept()
                with conn:
                    f = clean(cli.finish(10))
            finally:
                cli.kill()
            c = self.summary(f, "rr-client")
            want = {"scheduled": 30, "sent": 1, "answered": 0, "busy": 29, "outstanding_at_end": 1}
            check({k: c[k] for k in want} == want, f"client: {c}")
            tr = read_rr(out)
            check(len(tr.id) == 30 and int((tr.flow == -1).sum()) == 29, f"rows: {tr}")
            check(bool(np.all(tr.t_done_ns == -1)), "an answer from a silent server")

    # ---- bad input ----

    def case_bad_input(self) -> None:
        b = str(self.bin)
        with tempfile.TemporaryDirectory() as tmp:
            out = str(Path(tmp) / "x.tsv")
            sink = [b, "sink", "--bind", "127.0.0.1", "--port", "9", "--sample-ms", "10", "--out", out]
            send = [b, "send", "--dst", "127.0.0.1", "--port", "9", "--sample-ms", "10", "--out", out]
            no_dir = [b, "sink", "--bind", "::1", "--port", str(free_tcp_port(socket.AF_INET6)), "--sample-ms", "10"]
            no_dir += ["--out", str(Path(tmp) / "no-such-dir" / "x.tsv")]
            rrc = [b, "rr-client", "--dst", "127.0.0.1", "--port", "9", "--flows", "1", "--out", out]
            cases = [
                [b],
                [b, "bogus"],
                [*sink],  # no --flows
                [*sink, "--flows", "0"],
                [*sink, "--flows", "257"],
                [*sink, "--flows", "2", "--gap-ms", "0"],
                [*sink, "--flows", "2", "--cc", "reno"],
                [*sink, "--flows", "2", "extra"],
                [*no_dir, "--flows", "1"],  # bound, then the file cannot be opened
                [*send, "--flows", "2", "--cc", "no-such-cc"],
                [*send, "--flows", "2", "--rate", "10X"],
                [*send, "--flows", "2", "--write-bytes", "0"],
                [*send, "--flows", "2", "--dst", "not-an-address"],
                [*send, "--flows", "2", "--sample-ms"],
                [*send, "--flows", "2", "--bogus"],
                [*rrc, "--rate", "0", "--req", "8", "--resp", "8"],
                [*rrc, "--rate", "-5", "--req", "8", "--resp", "8"],
                [*rrc, "--rate", "10", "--req", "7", "--resp", "8"],
                [*rrc, "--rate", "10", "--req", "8", "--resp", "65537"],
                [*rrc, "--rate", "10", "--req", "8"],
                [b, "rr-server", "--bind", "127.0.0.1", "--port", "9", "--flows", "1", "--resp", "7"],
                [b, "rr-server", "--bind", "127.0.0.1", "--port", "0", "--flows", "1", "--resp", "8"],
            ]
            for argv in cases:
                f = clean(run(argv, timeout_s=10))
                lines = f.stderr.strip().splitlines()
                check(f.returncode == 2, f"{argv[1:]}: exit {f.returncode}, want 2 ({f.stderr.strip()})")
                check(len(lines) == 1 and lines[0].startswith("vrtcp: ") and f.stdout == "",
                      f"{argv[1:]}: want one 'vrtcp: ' line, got {f.stderr!r}")  # fmt: skip
                check(os.listdir(tmp) == [], f"{argv[1:]}: left {os.listdir(tmp)}")
            f = clean(run([*send, "--flows", "1", "--cc", "no-such-cc"], timeout_s=10))
            check("the kernel does not offer it (available: " in f.stderr, f"--cc message: {f.stderr!r}")


def main(argv: list[str] | None = None) -> int:
    """Run every case; exit 1 on the first failure."""
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--bin", type=Path, default=BIN_DIR, help="directory with vrtcp")
    args = ap.parse_args(argv)
    os.environ.setdefault("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=0:exitcode=99")
    os.environ.setdefault("UBSAN_OPTIONS", "print_stacktrace=1:halt_on_error=1")
    t = TcpSelfTest(args.bin.resolve())
    cases = [(name[5:], getattr(t, name)) for name in dir(t) if name.startswith("case_")]
    for name, fn in cases:
        t0 = time.monotonic()
        try:
            fn()
        except (Failure, RunError, OSError, TrafficError, json.JSONDecodeError, KeyError) as e:
            print(f"tcp_selftest {name}: FAIL: {e}", file=sys.stderr)
            return 1
        print(f"tcp_selftest {name}: ok ({time.monotonic() - t0:.1f} s)")
    print(f"tcp_selftest: {len(cases)} cases passed ({args.bin})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
