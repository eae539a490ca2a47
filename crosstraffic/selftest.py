"""Quick self-test of vrgen/vrsink over loopback (``make -C crosstraffic check``).

Runs the (sanitizer-instrumented) binaries through argument errors, paced and unpaced IPv4/IPv6
runs, the pacing schedule (every payload's send stamp against vrgen's schedule), several flows
and frame-size mixes, signal stops and crafted sequence numbers, and fails on any wrong result or
any AddressSanitizer / LeakSanitizer / UndefinedBehaviorSanitizer report.  Needs no root.

    python -m crosstraffic.selftest --bin crosstraffic/bin/san
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import struct
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from crosstraffic.runner import BIN_DIR, Child, Finished, RunError, free_udp_port, run

SANITIZER_MARKERS = ("AddressSanitizer", "LeakSanitizer", "UndefinedBehaviorSanitizer", "runtime error:")
READY_TIMEOUT_S = 10.0
EARLY_TOLERANCE_NS = 1_000  # CLOCK_REALTIME stamps vs a schedule kept on CLOCK_MONOTONIC
RECV_IDLE_S = 0.5
V4_OVERHEAD, V6_OVERHEAD = 46, 66  # Ethernet frame bytes around the UDP payload (vrgen's convention)


def size_cycle(sizes: Sequence[tuple[int, int]]) -> list[int]:
    """vrgen's cycle of frame sizes for ``--sizes`` (size, weight) pairs: smooth weighted round-robin,
    written out again here so the self-test checks vrgen against an independent copy."""
    total = sum(w for _, w in sizes)
    cur = [0] * len(sizes)
    out: list[int] = []
    for _ in range(total):
        best = 0
        for i, (_, w) in enumerate(sizes):
            cur[i] += w
            if cur[i] > cur[best]:
                best = i
        cur[best] -= total
        out.append(sizes[best][0])
    return out


def cum_bits(cycle: Sequence[int], k: int) -> int:
    """Frame bits of packets 0 .. k-1 of a run whose sizes repeat ``cycle``."""
    whole, part = divmod(k, len(cycle))
    return whole * 8 * sum(cycle) + 8 * sum(cycle[:part])


def scheduled_packets(cycle: Sequence[int], rate_bps: int, duration_ns: int) -> int:
    """How many packets vrgen's schedule sends in ``duration_ns``: those k with
    ``cum_bits(k) * 1e9 <= (duration_ns - 1) * rate_bps``."""
    limit = (duration_ns - 1) * rate_bps // 1_000_000_000
    cycle_bits = 8 * sum(cycle)
    whole, rest = divmod(limit, cycle_bits)
    return whole * len(cycle) + sum(1 for j in range(len(cycle)) if cum_bits(cycle, j) <= rest)


@dataclass(frozen=True)
class PacingCheck:
    """Received payloads (seq, CLOCK_REALTIME send stamp) against vrgen's schedule: packet k is due
    at ``start_ns + k * frame_bits * 1e9 // rate_bps`` (integer ns); with a size mix at
    ``start_ns + cum_bits(k) * 1e9 // rate_bps``."""

    received: int  # distinct sequence numbers
    missing: int  # of 0 .. expected - 1
    early: int  # packets stamped more than EARLY_TOLERANCE_NS before they were due
    dev_p50_ns: int  # stamp - due time
    dev_max_ns: int
    bursts: int  # runs of consecutive sequence numbers with one stamp
    burst_median: float  # packets per burst


def pacing_check(
    records: Sequence[tuple[int, int]],
    start_ns: int,
    frame_bytes: int,
    rate_bps: int,
    expected: int,
    cycle: Sequence[int] | None = None,
) -> PacingCheck:
    """Compare each packet's send stamp with its due time; group packets into bursts (consecutive
    sequence numbers sharing one stamp).  ``cycle``: the frame sizes of a ``--sizes`` mix (see
    ``size_cycle``); then ``frame_bytes`` is not used."""
    first: dict[int, int] = {}
    for seq, stamp in records:
        first.setdefault(seq, stamp)
    sizes = cycle if cycle is not None else [frame_bytes]
    devs = sorted(stamp - (start_ns + cum_bits(sizes, seq) * 1_000_000_000 // rate_bps) for seq, stamp in first.items())
    sizes: list[int] = []
    prev: tuple[int, int] | None = None
    for seq in sorted(first):
        if prev is not None and seq == prev[0] + 1 and first[seq] == prev[1]:
            sizes[-1] += 1
        else:
            sizes.append(1)
        prev = (seq, first[seq])
    sizes.sort()
    return PacingCheck(
        received=len(first),
        missing=sum(1 for k in range(expected) if k not in first),
        early=sum(1 for d in devs if d < -EARLY_TOLERANCE_NS),
        dev_p50_ns=devs[len(devs) // 2] if devs else 0,
        dev_max_ns=devs[-1] if devs else 0,
        bursts=len(sizes),
        burst_median=float(sizes[len(sizes) // 2]) if sizes else 0.0,
    )


class Failure(AssertionError):
    """A self-test check failed."""


def check(cond: bool, msg: str) -> None:
    """Fail the current case with ``msg`` unless ``cond``."""
    if not cond:
        raise Failure(msg)


def clean(f: Finished) -> Finished:
    """Fail on any sanitizer report in the output."""
    for m in SANITIZER_MARKERS:
        if m in f.stderr:
            raise Failure(f"sanitizer report from {f.argv[0]}:\n{f.stderr}")
    return f


def handler_installed(pid: int, sig: int) -> bool:
    """True once the process has a handler for ``sig`` (from /proc/PID/status SigCgt)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("SigCgt:"):
                return bool(int(line.split()[1], 16) & (1 << (sig - 1)))
    except FileNotFoundError:
        return False
    return False


class SelfTest:
    """The self-test cases; ``bindir`` holds vrgen and vrsink."""

    def __init__(self, bindir: Path) -> None:
        self.gen = str(bindir / "vrgen")
        self.sink = str(bindir / "vrsink")

    def start_sink(self, *args: str) -> Child:
        """Start a sink and wait for READY."""
        c = Child([self.sink, *args])
        c.wait_line("READY", READY_TIMEOUT_S)
        return c

    def stop_sink(self, c: Child) -> dict:
        """SIGTERM the sink, check it exits 0 and return its sink.json."""
        c.signal(signal.SIGTERM)
        f = clean(c.finish(10))
        check(f.returncode == 0, f"vrsink exit {f.returncode}: {f.stderr}")
        return json.loads(f.stdout)

    def gen_json(self, *args: str, timeout_s: float = 30) -> dict:
        """Run vrgen to completion and return its gen.json."""
        f = clean(run([self.gen, *args], timeout_s=timeout_s))
        check(f.returncode == 0, f"vrgen {' '.join(args)}: exit {f.returncode}: {f.stderr}")
        return json.loads(f.stdout)

    # ---- cases ----

    def case_bad_args(self) -> None:
        rate_1m = ["--dst", "127.0.0.1", "--port", "9", "--rate", "1M"]
        dst_mac = ["--dst-mac", "02:00:00:00:00:01"]
        cases = [
            (self.gen, []),
            (self.gen, [*rate_1m, "--frame", "63"]),
            (self.gen, [*rate_1m, "--frame", "1519"]),
            (self.gen, ["--dst", "127.0.0.1", "--port", "9", "--rate", "-5"]),
            (self.gen, ["--dst", "127.0.0.1", "--port", "9", "--rate", "10X"]),
            (self.gen, ["--dst", "not-an-address", "--port", "9", "--rate", "1M"]),
            (self.gen, ["--dst", "::1", "--port", "9", "--rate", "1M", "--frame", "64"]),
            (self.gen, ["--dst", "127.0.0.1", "--port", "0", "--rate", "1M"]),
            (self.gen, [*rate_1m, "--bogus"]),
            (self.gen, ["--dst", "127.0.0.1", "--port", "9", "--rate"]),
            (self.sink, []),
            (self.sink, ["--port", "9", "-6", "--bind", "127.0.0.1"]),
            (self.sink, ["--port", "9", "--gap-us", "x"]),
            (self.gen, [*rate_1m, "--packet", "lo"]),
            (self.gen, [*rate_1m, "--packet", "lo", "--dst-mac", "zz"]),
            (self.gen, [*rate_1m, "--packet", "lo", "--gso", *dst_mac]),
            (self.gen, [*rate_1m, "--packet", "lo", *dst_mac]),
            (self.gen, [*rate_1m, "--packet", "vrt-no-such-if", *dst_mac]),
            (self.gen, [*rate_1m, "--flows", "0"]),
            (self.gen, [*rate_1m, "--flows", "257"]),
            (self.gen, [*rate_1m, "--flow-run", "0"]),
            (self.gen, [*rate_1m, "--flows", "2", "--packet", "lo", *dst_mac]),
            (self.gen, [*rate_1m, "--flows", "2", "--gso"]),
            (self.gen, ["--dst", "::1", "--port", "9", "--rate", "1M", "--sizes", "100:1,81:2"]),
            (self.gen, [*rate_1m, "--sizes", "64:0"]),
            (self.gen, [*rate_1m, "--sizes", "64:1", "--frame", "64"]),
            (self.gen, [*rate_1m, "--frame", "64", "--sizes", "64:1"]),
            (self.gen, [*rate_1m, "--sizes", "64:1,1519:1"]),
            (self.gen, [*rate_1m, "--sizes", "64:2049,100:2048"]),
            (self.gen, [*rate_1m, "--sizes", ",".join(["64:1"] * 17)]),
            (self.gen, [*rate_1m, "--sizes", "64"]),
            (self.gen, [*rate_1m, "--sizes", "64:1,"]),
            (self.gen, [*rate_1m, "--sizes", "64:1,100:1", "--gso"]),
            (self.gen, [*rate_1m, "--sizes", "64:1", "--packet", "lo", *dst_mac]),
        ]
        for exe, args in cases:
            f = clean(run([exe, *args], timeout_s=10))
            lines = f.stderr.strip().splitlines()
            check(f.returncode == 2, f"{exe} {args}: exit {f.returncode}, want 2")
            check(len(lines) == 1 and f.stdout == "", f"{exe} {args}: want one stderr line, got {f.stderr!r}")
        f = clean(run([self.gen, "--dst", "::1", "--port", "9", "--rate", "1M", "--frame", "81"], timeout_s=10))
        check("minimum frame 82" in f.stderr, f"IPv6 small-frame message unclear: {f.stderr!r}")
        f = clean(run([self.gen, "--dst", "::1", "--port", "9", "--rate", "1M", "--sizes", "100:1,81:2"], timeout_s=10))
        check("size 81" in f.stderr and "minimum frame 82" in f.stderr, f"--sizes IPv6 message unclear: {f.stderr!r}")

    def _paced(self, fam: int, dst: str, rate: str, frame: int, log: bool) -> None:
        port = free_udp_port(fam)
        with tempfile.TemporaryDirectory() as tmp:
            logf = Path(tmp) / "sink_packets.bin"
            sargs = ["--port", str(port), "--bind", dst] + (["--log", str(logf)] if log else [])
            sink = self.start_sink(*sargs)
            try:
                g = self.gen_json("--dst", dst, "--port", str(port), "--rate", rate, "--frame", str(frame),
                                  "--duration", "1")  # fmt: skip
            finally:
                s = self.stop_sink(sink)
            check(g["packets"] > 0 and g["send_errors"] == 0, f"gen: {g}")
            # the schedule's packets, every one: the pacing's arithmetic is exact
            due = g["requested_pps"] * g["duration_s"]
            check(abs(g["packets"] - due) <= 1, f"sent {g['packets']} packets, the schedule has {due:.1f}")
            # the achieved rate is over the run's real length: a run that ended late (the last
            # wakeup late, 1.5 ms once under ASAN on a busy 2-core machine) reads lower by that
            # lateness alone, which is allowed for; any other error is the pacer's
            err = abs(g["achieved_bps"] - g["requested_bps"]) / g["requested_bps"]
            late = max(0.0, g["elapsed_s"] - g["duration_s"]) / g["duration_s"]
            check(err < 0.001 + late, f"rate error {err:.5f} (run {late:.5f} late)")
            d = g["sched_dev_ns"]  # never before the due time; every packet counted
            check(d["count"] == g["packets"] and d["min"] >= 0 and d["p50"] <= d["p99"] <= d["max"], f"{d}")
            check(s["packets"] == g["packets"] and s["lost"] == 0, f"sink {s['packets']} vs gen {g['packets']}")
            check(s["frame_bytes"] == frame and s["timestamps"] == "kernel", f"sink: {s}")
            check(sum(s["hist_ms"]) == s["received"] - s["malformed"], "histogram does not add up")
            # no loss: every send-ms bucket of the generator is received in full, by the same stamps
            check(g["sent_hist_dropped"] == 0 and sum(g["sent_hist_ms"]) == g["packets"], "gen sent_hist_ms")
            check((s["tx_hist_start_ms"], s["tx_hist_ms"]) == (g["sent_hist_start_ms"], g["sent_hist_ms"]),
                  "sink tx_hist_ms differs from gen sent_hist_ms without loss")  # fmt: skip
            check(0 <= s["owd_ns"]["min"] <= s["owd_ns"]["median"] <= s["owd_ns"]["max"], f"owd {s['owd_ns']}")
            if log:
                data = logf.read_bytes()
                check(len(data) == 16 * s["received"], f"log size {len(data)} for {s['received']} packets")
                seqs = [struct.unpack_from("<Q", data, i)[0] for i in range(0, len(data), 16)]
                check(sorted(seqs) == list(range(g["packets"])), "log sequence numbers")

    def case_pacing_schedule(self) -> None:
        """Bursts of the packets due within --quantum-us, none sent before it is due, at the rate.

        1M of 64 B frames (512 µs apart) with a 5 ms quantum: bursts of 9 packets, the first of which
        waited 8 intervals; the payloads are read here, not by vrsink, to see every send stamp."""
        rate, frame, quantum_us, duration_s = 1_000_000, 64, 5000, 1.0
        interval_ns = frame * 8 * 1_000_000_000 // rate
        per_burst = quantum_us * 1000 // interval_ns  # packets due within the quantum: 9
        expected = (int(duration_s * 1e9) - 1) * rate // (frame * 8 * 1_000_000_000) + 1  # due before the end
        records: list[tuple[int, int]] = []
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as rx:
            rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 22)
            rx.bind(("127.0.0.1", 0))
            rx.settimeout(RECV_IDLE_S)
            port = rx.getsockname()[1]
            gen = Child([self.gen, "--dst", "127.0.0.1", "--port", str(port), "--rate", str(rate), "--frame",
                         str(frame), "--duration", str(duration_s), "--quantum-us", str(quantum_us),
                         "--late-us", "20000"])  # fmt: skip
            try:
                while True:
                    try:
                        data = rx.recv(2048)
                    except TimeoutError:
                        if gen.popen.poll() is not None:
                            break
                        continue
                    records.append(struct.unpack_from("<Qq", data))
                f = clean(gen.finish(10))
            finally:
                gen.kill()
        check(f.returncode == 0, f"vrgen exit {f.returncode}: {f.stderr}")
        g = json.loads(f.stdout)
        check(g["quantum_packets"] == per_burst, f"quantum_packets {g['quantum_packets']}, want {per_burst}")
        err = abs(g["achieved_bps"] - g["requested_bps"]) / g["requested_bps"]
        check(g["packets"] == expected and err <= 0.001, f"sent {g['packets']} (want {expected}), rate error {err}")
        c = pacing_check(records, g["start_ns"], frame, rate, expected)
        check(c.received == expected and c.missing == 0, f"received {c.received} of {expected}")
        check(c.early == 0, f"{c.early} packets stamped before they were due")
        # bursts happened (not one wakeup per packet) and kept the schedule: half of the packets
        # waited less than the quantum (wakeup latency allowed for), the median burst is full
        check(c.burst_median >= per_burst, f"median burst {c.burst_median} packets, want >= {per_burst}")
        check(1_000_000 <= c.dev_p50_ns <= quantum_us * 1000 + 2_000_000, f"median deviation {c.dev_p50_ns} ns")
        d = g["sched_dev_ns"]
        check(d["count"] == g["packets"] and d["min"] >= 0, f"sched_dev_ns {d}")
        check(c.dev_p50_ns - 2000 <= d["p50"] <= c.dev_p50_ns * 1.01 + 2000, f"p50 {d['p50']} vs {c.dev_p50_ns}")
        check(c.dev_max_ns - 2000 <= d["max"] <= c.dev_max_ns + 2000, f"max {d['max']} vs {c.dev_max_ns}")

    def _receive(self, fam: int, gen_args: Sequence[str]) -> tuple[list[tuple[int, int, int, int]], dict]:
        """Run vrgen into a socket of this process until vrgen exits; every datagram as
        (seq, send stamp, UDP payload bytes, source port), and gen.json."""
        records: list[tuple[int, int, int, int]] = []
        with socket.socket(fam, socket.SOCK_DGRAM) as rx:
            rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 22)
            dst = "::1" if fam == socket.AF_INET6 else "127.0.0.1"
            rx.bind((dst, 0))
            rx.settimeout(RECV_IDLE_S)
            gen = Child([self.gen, "--dst", dst, "--port", str(rx.getsockname()[1]), *gen_args])
            try:
                while True:
                    try:
                        data, src = rx.recvfrom(2048)
                    except TimeoutError:
                        if gen.popen.poll() is not None:
                            break
                        continue
                    seq, stamp = struct.unpack_from("<Qq", data)
                    records.append((seq, stamp, len(data), src[1]))
                f = clean(gen.finish(10))
            finally:
                gen.kill()
        check(f.returncode == 0, f"vrgen exit {f.returncode}: {f.stderr}")
        return records, json.loads(f.stdout)

    def case_flows(self) -> None:
        """--flows 4: four source ports, each flow's packets counted by the sink as sent, no
        reordering; the packets per flow are those of runs of --flow-run (8) sequence numbers."""
        flows, flow_run, rate, frame, duration_ns = 4, 8, 10_000_000, 64, 500_000_000
        port = free_udp_port()
        sink = self.start_sink("--port", str(port), "--bind", "127.0.0.1")
        try:
            g = self.gen_json("--dst", "127.0.0.1", "--port", str(port), "--rate", str(rate), "--frame", str(frame),
                              "--duration", str(duration_ns / 1e9), "--flows", str(flows))  # fmt: skip
        finally:
            s = self.stop_sink(sink)
        n = scheduled_packets([frame], rate, duration_ns)
        check(g["packets"] == n and g["send_errors"] == 0, f"gen sent {g['packets']} of {n}: {g}")
        check((g["flows"], g["flow_run"]) == (flows, flow_run), f"gen flows {g['flows']} run {g['flow_run']}")
        ports = g["flow_src_ports"]
        check(len(set(ports)) == flows and port not in ports, f"gen source ports {ports}")
        want = [sum(1 for k in range(n) if (k // flow_run) % flows == f) for f in range(flows)]
        check(g["flow_packets"] == want and g["flow_send_errors"] == [0] * flows, f"gen {g['flow_packets']} != {want}")
        check(g["frame_bytes_total"] == frame * n and g["sizes"] == [[frame, 1]], f"gen {g['frame_bytes_total']}")
        sf = s["flows"]
        check([f["src"] for f in sf] == [f"127.0.0.1:{p}" for p in sorted(ports)], f"sink flows {sf}")
        check(s["flows_overflow"] == 0 and s["lost"] == 0 and s["reordered"] == 0, f"sink: {s}")
        for f in sf:
            i = ports.index(int(f["src"].rsplit(":", 1)[1]))
            check(f["packets"] == g["flow_packets"][i], f"flow {f['src']}: {f['packets']} of {g['flow_packets'][i]}")
            check(f["duplicates"] == 0 and f["reordered"] == 0, f"flow {f}")
            check(f["first_ns"] <= f["max_gap_t0_ns"] < f["max_gap_t0_ns"] + f["max_gap_ns"] <= f["last_ns"], f"{f}")
        check(sum(f["packets"] for f in sf) == s["packets"] == g["packets"], "per-flow packets do not add up")
        check(s["frame_bytes_total"] == g["frame_bytes_total"], f"sink {s['frame_bytes_total']} bytes")

    def _sizes(self, fam: int, sizes: Sequence[tuple[int, int]]) -> None:
        """A frame-size mix at 10M for 1 s, read here: every packet's size is its place in the cycle,
        whole cycles carry the weights, every send stamp is at or after its due time on the
        cumulative-bits schedule, the flow of each packet is its run's (3 flows, runs of 5, so the
        runs cut across cycles); then into vrsink for the frame bytes on both sides."""
        rate, duration_ns, quantum_us = 10_000_000, 1_000_000_000, 500
        spec = ",".join(f"{sz}:{w}" for sz, w in sizes)
        overhead = V6_OVERHEAD if fam == socket.AF_INET6 else V4_OVERHEAD
        cycle = size_cycle(sizes)
        n = scheduled_packets(cycle, rate, duration_ns)
        args = ["--rate", str(rate), "--sizes", spec, "--duration", str(duration_ns / 1e9), "--late-us", "20000"]
        records, g = self._receive(fam, [*args, "--flows", "3", "--flow-run", "5"])
        check(g["packets"] == n and g["send_errors"] == 0, f"gen sent {g['packets']}, the schedule has {n}")
        check(g["sizes"] == [list(x) for x in sizes] and g["frame_bytes"] == min(sz for sz, _ in sizes), f"{g}")
        check(g["mean_frame_bytes"] == sum(cycle) / len(cycle), f"mean_frame_bytes {g['mean_frame_bytes']}")
        check(g["frame_bytes_total"] == cum_bits(cycle, n) // 8, f"frame_bytes_total {g['frame_bytes_total']}")
        check([r[0] for r in records] == list(range(n)), "not every packet arrived once and in order")
        frames = [length + overhead for _, _, length, _ in records]
        check(frames == [cycle[k % len(cycle)] for k in range(n)], "a packet's size is not its place in the cycle")
        whole = n // len(cycle) * len(cycle)
        got = {sz: frames[:whole].count(sz) for sz, _ in sizes}
        check(got == {sz: w * (whole // len(cycle)) for sz, w in sizes}, f"sizes over whole cycles {got}")
        ports = g["flow_src_ports"]
        check(all(ports[(seq // 5) % 3] == src for seq, _, _, src in records), "a packet left on another flow")
        c = pacing_check([r[:2] for r in records], g["start_ns"], 0, rate, n, cycle=cycle)
        check(c.received == n and c.missing == 0 and c.early == 0, f"{c.early} packets stamped before due: {c}")
        check(0 <= c.dev_p50_ns <= quantum_us * 1000 + 2_000_000, f"median deviation {c.dev_p50_ns} ns")
        # the rate: the last packet due before the end carries up to one largest frame beyond
        # rate * duration; a run that ended late reads lower by that lateness (see _paced)
        err = abs(g["achieved_bps"] - rate) / rate
        late = max(0.0, g["elapsed_s"] - g["duration_s"]) / g["duration_s"]
        tol = 0.001 + 8 * max(cycle) * 1e9 / (rate * duration_ns)
        check(err < tol + late, f"rate error {err:.5f} (tolerance {tol:.5f}, run {late:.5f} late)")
        port = free_udp_port(fam)
        sink = self.start_sink("--port", str(port), "--bind", "::1" if fam == socket.AF_INET6 else "127.0.0.1")
        try:
            g = self.gen_json("--dst", "::1" if fam == socket.AF_INET6 else "127.0.0.1", "--port", str(port), *args)
        finally:
            s = self.stop_sink(sink)
        check(s["packets"] == g["packets"] == n and s["lost"] == 0, f"sink {s['packets']} gen {g['packets']} of {n}")
        check(s["frame_bytes_total"] == g["frame_bytes_total"], f"sink {s['frame_bytes_total']} gen {g}")
        check(s["bytes"] == g["frame_bytes_total"] - overhead * n, f"sink bytes {s['bytes']}")
        check(len(s["flows"]) == 1 and s["flows"][0]["packets"] == n, f"sink flows {s['flows']}")

    def case_sizes_imix_v4(self) -> None:
        self._sizes(socket.AF_INET, [(64, 7), (570, 4), (1518, 1)])

    def case_sizes_mix_v6(self) -> None:
        self._sizes(socket.AF_INET6, [(82, 3), (1000, 2), (1518, 1)])

    def case_paced_v4_64(self) -> None:
        self._paced(socket.AF_INET, "127.0.0.1", "10M", 64, log=True)

    def case_paced_v6_1518(self) -> None:
        self._paced(socket.AF_INET6, "::1", "100M", 1518, log=False)

    def case_unpaced(self) -> None:
        port = free_udp_port()
        sink = self.start_sink("--port", str(port), "--bind", "127.0.0.1")
        try:
            g = self.gen_json("--dst", "127.0.0.1", "--port", str(port), "--rate", "0", "--duration", "0.5")
        finally:
            s = self.stop_sink(sink)
        check(g["requested_bps"] == 0 and g["packets"] > 1000, f"gen: {g}")
        check(s["received"] + s["socket_drops"] >= g["packets"] - s["lost"], f"sink: {s}")
        unreceived = sum(g["sent_hist_ms"]) - sum(s["tx_hist_ms"])  # loss by send time, in total
        check(
            unreceived == g["packets"] - s["packets"],
            f"send-time loss {unreceived}, want {g['packets'] - s['packets']}",
        )

    def _gso(self, sink_args: tuple[str, ...]) -> dict:
        port = free_udp_port()
        sink = self.start_sink("--port", str(port), "--bind", "127.0.0.1", *sink_args)
        try:
            f = clean(run([self.gen, "--dst", "127.0.0.1", "--port", str(port), "--rate", "50M", "--frame", "200",
                           "--duration", "0.5", "--gso", "--quantum-us", "1000"], timeout_s=30))  # fmt: skip
        finally:
            s = self.stop_sink(sink)
        check(f.returncode == 0, f"vrgen --gso: {f.stderr}")
        g = json.loads(f.stdout)
        check(g["gso_segments"] > 1 and g["send_errors"] == 0, f"gen: {g}")
        check(s["packets"] == g["packets"] and s["lost"] == 0 and s["frame_bytes"] == 200, f"sink: {s}")
        check(sum(s["hist_ms"]) == s["received"], "histogram does not add up")
        return s

    def case_gso_into_gro_sink(self) -> None:
        """GSO buffers arrive as UDP GRO aggregates and are split by the sink."""
        s = self._gso(())
        check(s["gro_segments"] > 0, f"no GRO aggregates seen: {s['gro_segments']}")

    def case_gso_into_plain_sink(self) -> None:
        """Without UDP_GRO the kernel splits the GSO buffers itself."""
        s = self._gso(("--no-gro",))
        check(s["gro_segments"] == 0, f"unexpected aggregates: {s['gro_segments']}")

    def case_signal_stop(self) -> None:
        port = free_udp_port()
        sink = self.start_sink("--port", str(port), "--bind", "127.0.0.1", "--gap-us", "100000")
        gen = Child([self.gen, "--dst", "127.0.0.1", "--port", str(port), "--rate", "1M", "--duration", "0"])
        try:
            deadline = time.monotonic() + READY_TIMEOUT_S
            while not handler_installed(gen.pid, signal.SIGTERM):
                check(time.monotonic() < deadline and gen.popen.poll() is None, "vrgen never installed handlers")
                time.sleep(0.001)
            gen.signal(signal.SIGTERM)
            f = clean(gen.finish(10))
        finally:
            gen.kill()
            s = self.stop_sink(sink)
        check(f.returncode == 0, f"vrgen exit {f.returncode}: {f.stderr}")
        g = json.loads(f.stdout)
        check(g["stopped_by"] == "signal", f"gen: {g}")
        check(s["stopped_by"] == "signal" and s["packets"] == g["packets"], f"sink {s['packets']} gen {g['packets']}")

    def case_crafted_sequence(self) -> None:
        """Loss, reordering, duplicates, a short datagram and one gap, by hand."""
        port = free_udp_port()
        sink = self.start_sink("--port", str(port), "--bind", "127.0.0.1", "--gap-us", "20000")
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:

                def send(seq: int) -> None:
                    s.sendto(struct.pack("<Qq", seq, time.clock_gettime_ns(time.CLOCK_REALTIME)) + bytes(2),
                             ("127.0.0.1", port))  # fmt: skip

                for q in (0, 1, 2, 5, 3, 3, 4):
                    send(q)
                s.sendto(b"short", ("127.0.0.1", port))
                time.sleep(0.05)  # the stimulus: a 50 ms silence the sink must report as a gap
                send(10)
        finally:
            j = self.stop_sink(sink)
        want = {"packets": 7, "first_seq": 0, "last_seq": 10, "lost": 4, "reordered": 2, "duplicates": 1,
                "malformed": 1, "received": 9, "frame_bytes": 64}  # fmt: skip
        got = {k: j[k] for k in want}
        check(got == want, f"crafted sequence: got {got}, want {want}")
        check(len(j["gaps"]) == 1, f"gaps: {j['gaps']}")
        t0, t1, s0, s1 = j["gaps"][0]
        check((s0, s1) == (4, 10) and 45e6 <= t1 - t0 <= 1e9, f"gap {j['gaps'][0]}")

    def case_crafted_flows(self) -> None:
        """Per-flow duplicates, reordering and silence by hand, from two IPv6 sockets."""
        port = free_udp_port(socket.AF_INET6)
        sink = self.start_sink("--port", str(port), "--bind", "::1")
        try:
            with (
                socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as a,
                socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as b,
            ):

                def send(s: socket.socket, seq: int) -> None:
                    s.sendto(struct.pack("<Qq", seq, time.clock_gettime_ns(time.CLOCK_REALTIME)), ("::1", port))

                for s, q in ((a, 0), (a, 1), (a, 3), (a, 2), (b, 5), (b, 4), (b, 1)):
                    send(s, q)
                a.sendto(b"short", ("::1", port))
                time.sleep(0.05)  # the stimulus: a 50 ms silence of flow a
                send(a, 6)
                srcs = {f"[::1]:{a.getsockname()[1]}": "a", f"[::1]:{b.getsockname()[1]}": "b"}
        finally:
            j = self.stop_sink(sink)
        flows = {srcs.get(f["src"], f["src"]): f for f in j["flows"]}
        got = {k: (f["packets"], f["duplicates"], f["reordered"]) for k, f in flows.items()}
        check(got == {"a": (5, 0, 1), "b": (2, 1, 1)}, f"per-flow (packets, duplicates, reordered): {got}")
        check((j["packets"], j["duplicates"], j["reordered"]) == (7, 1, 2), f"sink totals: {j}")
        fa, fb = flows["a"], flows["b"]
        check(fa["max_gap_ns"] >= 45e6 and fa["max_gap_t0_ns"] + fa["max_gap_ns"] == fa["last_ns"], f"flow a {fa}")
        check(
            fb["max_gap_ns"] < 45e6 and fb["first_ns"] <= fb["max_gap_t0_ns"] < fb["last_ns"] < fa["last_ns"], f"{fb}"
        )
        check(j["frame_bytes_total"] == 7 * (16 + V6_OVERHEAD) and j["flows_overflow"] == 0, f"sink: {j}")

    def case_flows_overflow(self) -> None:
        """Sources beyond the 256th are counted in flows_overflow, and otherwise as all others."""
        port = free_udp_port()
        sink = self.start_sink("--port", str(port), "--bind", "127.0.0.1")
        socks = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(260)]
        try:
            for q, s in enumerate(socks):
                s.sendto(struct.pack("<Qq", q, time.clock_gettime_ns(time.CLOCK_REALTIME)), ("127.0.0.1", port))
            socks[0].sendto(struct.pack("<Qq", 260, time.clock_gettime_ns(time.CLOCK_REALTIME)), ("127.0.0.1", port))
        finally:
            for s in socks:
                s.close()
            j = self.stop_sink(sink)
        ports = [int(f["src"].rsplit(":", 1)[1]) for f in j["flows"]]
        check(
            len(ports) == 256 and ports == sorted(ports) and j["flows_overflow"] == 4, f"overflow {j['flows_overflow']}"
        )
        check(j["packets"] == 261 and sum(f["packets"] for f in j["flows"]) == 257, f"sink: {j['packets']} packets")

    def case_foreign_payloads(self) -> None:
        """Extreme sequence numbers and send times (not vrgen's) must not upset the sink."""
        port = free_udp_port()
        sink = self.start_sink("--port", str(port), "--bind", "127.0.0.1")
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                for seq, ts in ((2**64 - 1, -(2**63)), (0, 2**63 - 1), (2**63, 0), (2**64 - 1, 1)):
                    s.sendto(struct.pack("<Qq", seq, ts) + os.urandom(7), ("127.0.0.1", port))
        finally:
            j = self.stop_sink(sink)
        check(j["received"] == 4 and j["packets"] == 3 and j["duplicates"] == 1, f"foreign payloads: {j}")

    def case_seq_crt(self) -> None:
        """--seq-crt: sequence numbers as residues mod 256, 255, ... (trafgen's one-byte counters)."""
        moduli = (256, 255, 253, 251, 247, 241, 239, 233)

        def crt(seq: int) -> bytes:
            return bytes(seq % m for m in moduli)

        port = free_udp_port()
        sink = self.start_sink("--port", str(port), "--bind", "127.0.0.1", "--seq-crt")
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                for q in (1, 2, 3, 5, 4, 4, 300, 299):
                    s.sendto(crt(q) + bytes(10), ("127.0.0.1", port))
                s.sendto(bytes([0, 255, 0, 0, 0, 0, 0, 0]) + bytes(10), ("127.0.0.1", port))  # 255 >= 255: invalid
                s.sendto(b"short", ("127.0.0.1", port))
        finally:
            j = self.stop_sink(sink)
        want = {"packets": 7, "first_seq": 1, "last_seq": 300, "lost": 293, "reordered": 2, "duplicates": 1,
                "malformed": 2, "received": 10, "seq_format": "crt8"}  # fmt: skip
        got = {k: j[k] for k in want}
        check(got == want and j["owd_ns"]["count"] == 0, f"--seq-crt: got {got} owd {j['owd_ns']}, want {want}")
        top = 13741755155627516160 - 1  # the largest number the residues can carry
        port = free_udp_port()
        sink = self.start_sink("--port", str(port), "--bind", "127.0.0.1", "--seq-crt")
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.sendto(crt(top), ("127.0.0.1", port))
        finally:
            j = self.stop_sink(sink)
        check(j["first_seq"] == j["last_seq"] == top and j["packets"] == 1, f"--seq-crt top: {j['last_seq']}")

    def case_state_and_after_file(self) -> None:
        """--state: the live state file; --after-file: the first packet sent at or after a threshold
        given while running (read late: found in the ring), its count against tx_hist_ms, and a
        threshold the ring no longer reaches back to ("complete": false)."""
        with tempfile.TemporaryDirectory() as tmp:
            state, after = Path(tmp) / "state.json", Path(tmp) / "after"
            port = free_udp_port()
            sink = self.start_sink("--port", str(port), "--bind", "127.0.0.1", "--state", str(state),
                                   "--state-ms", "5", "--after-file", str(after))  # fmt: skip
            try:
                g = self.gen_json("--dst", "127.0.0.1", "--port", str(port), "--rate", "10M", "--frame", "1000",
                                  "--duration", "0.6")  # fmt: skip
                threshold = (g["start_ns"] + g["end_ns"]) // 2
                after.write_text(f"{threshold}\n")  # after the last packet: every one comes from the ring
                deadline = time.monotonic() + READY_TIMEOUT_S
                while (live := json.loads(state.read_text()))["after"] is None:
                    check(time.monotonic() < deadline, f"state never showed the threshold: {live}")
                    time.sleep(0.005)
            finally:
                s = self.stop_sink(sink)
            a = s["after"]
            check(live["after"] == a and live["packets"] == s["packets"] == g["packets"], f"state {live} vs {s}")
            check(a["threshold_ns"] == threshold and a["complete"] is True, f"after: {a}")
            first = a["first"] or {}
            check(first.get("tx_ns", -1) >= threshold and first["rx_ns"] >= first["tx_ns"], f"first: {a}")
            b = threshold // 1_000_000 - s["tx_hist_start_ms"]  # the threshold's send-ms bucket
            later, from_bucket = sum(s["tx_hist_ms"][b + 1 :]), sum(s["tx_hist_ms"][b:])
            check(later <= a["packets"] <= from_bucket and a["packets"] > 0, f"after {a['packets']} vs {later}..")
            check(s["max_tx"]["seq"] == g["packets"] - 1 and s["state_writes"] > 0 == s["state_errors"], f"{s}")
            # more packets than the ring holds arrive after the threshold, before it is given
            after.unlink()
            state.unlink()
            port = free_udp_port()
            sink = self.start_sink("--port", str(port), "--bind", "127.0.0.1", "--after-file", str(after),
                                   "--state", str(state), "--state-ms", "5")  # fmt: skip
            try:
                threshold = time.clock_gettime_ns(time.CLOCK_REALTIME)
                g = self.gen_json("--dst", "127.0.0.1", "--port", str(port), "--rate", "0", "--frame", "64",
                                  "--duration", "1.5")  # fmt: skip
                self._wait_drained(state, g["packets"])
                after.write_text(str(threshold))
                time.sleep(0.1)  # the stimulus: a threshold in place before the stop (read every 10 ms)
            finally:
                s = self.stop_sink(sink)
            a = s["after"]
            check(s["packets"] > 2**17, f"only {s['packets']} packets: the ring was not overrun")
            check(a["complete"] is False and a["packets"] == 2**17, f"overrun ring: {a}")

    @staticmethod
    def _wait_drained(state: Path, sent: int) -> None:
        """Wait until a sink with ``--state`` has received ``sent`` datagrams, or (after a loss) until
        two of its state writes show the same count: a receive call between them found the queue
        empty, and the generator has exited, so nothing further arrives."""
        deadline = time.monotonic() + READY_TIMEOUT_S
        prev: tuple[int, int] | None = None
        while True:
            check(time.monotonic() < deadline, f"the sink never caught up with {sent} datagrams: {prev}")
            try:
                live = json.loads(state.read_text())
            except FileNotFoundError:
                live = None
            if live is not None:
                if live["received"] >= sent or (
                    prev is not None and live["t_ns"] != prev[0] and live["received"] == prev[1]
                ):
                    return
                prev = (live["t_ns"], live["received"])
            time.sleep(0.001)

    def case_sink_duration(self) -> None:
        f = clean(run([self.sink, "--port", str(free_udp_port()), "--duration", "0.2"], timeout_s=10))
        check(f.returncode == 0 and "READY" in f.stderr, f"vrsink --duration: {f}")
        j = json.loads(f.stdout)
        check(j["stopped_by"] == "duration" and j["packets"] == 0 and j["gaps"] == [], f"idle sink: {j}")


def main(argv: list[str] | None = None) -> int:
    """Run every case; exit 1 on the first failure."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", type=Path, default=BIN_DIR, help="directory with vrgen and vrsink")
    args = ap.parse_args(argv)
    os.environ.setdefault("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=0:exitcode=99")
    os.environ.setdefault("UBSAN_OPTIONS", "print_stacktrace=1:halt_on_error=1")
    t = SelfTest(args.bin.resolve())
    cases: list[tuple[str, Callable[[], None]]] = [
        (name[5:], getattr(t, name)) for name in dir(t) if name.startswith("case_")
    ]
    for name, fn in cases:
        t0 = time.monotonic()
        try:
            fn()
        except (Failure, RunError, OSError, json.JSONDecodeError, KeyError) as e:
            print(f"selftest {name}: FAIL: {e}", file=sys.stderr)
            return 1
        print(f"selftest {name}: ok ({time.monotonic() - t0:.1f} s)")
    print(f"selftest: {len(cases)} cases passed ({args.bin})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
