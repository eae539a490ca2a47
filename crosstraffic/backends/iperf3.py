"""iperf3 backend (UDP, ``-J`` JSON): loss and out-of-order counts, no per-packet gaps.

Conversions to the vrmig conventions:

* iperf3's ``-b`` counts UDP *payload* bits; vrmig rates count Ethernet-frame bits, so the
  generator gets ``-b rate_bps * payload / frame`` and ``-l payload`` (frame - 46 / - 66).
* iperf3 reports its start time only to the second (``start.timestamp.timesecs``); ``start_ns`` and
  ``end_ns`` therefore carry a 1 s uncertainty and are not usable for downtime.
* The server's ``packets`` is the highest sequence number seen; received = packets - lost_packets.
* Stopping the client with SIGTERM/SIGINT is the normal way the orchestrator ends a run: the
  resulting ``"error": "interrupt - the client has terminated"`` is accepted and the partial
  ``end`` section is used.

The sink is ready when its namespace has a TCP listener on the port (iperf3 -J prints nothing
before the test ends).
"""

from __future__ import annotations

import ipaddress
from typing import Any

from crosstraffic.backend import (
    Backend,
    GenRequest,
    GenResult,
    SinkRequest,
    SinkResult,
    TrafficError,
    count_capabilities,
    count_sink_result,
    family_of,
    frame_for_payload,
    load_json,
    payload_bytes,
    require,
    short_decimal,
    span_gen_result,
)

PAYLOAD_HEADER_BYTES = 16  # iperf3 rejects UDP blocks below 16 B (sec, usec, 64-bit counter)
TOOL = "iperf3"


class Iperf3Backend(Backend):
    """iperf3 client (generator) and one-shot server (sink)."""

    name = "iperf3"
    sink_stops_itself = True  # -s -1: the server reports and exits after one test
    capabilities = count_capabilities(
        reordering=True,
        ipv6=True,
        unpaced=True,
        payload_header_bytes=PAYLOAD_HEADER_BYTES,
        notes="loss, out-of-order and jitter per 1 s interval; start time known only to the second",
    )

    def __init__(self, exe: str = "iperf3", pacing_timer_us: int | None = None) -> None:
        self.exe = exe
        self.pacing_timer_us = pacing_timer_us

    def executables(self) -> dict[str, str]:
        """Both roles run the same binary."""
        return {"gen": self.exe, "sink": self.exe}

    def sink_readiness(self, port: int) -> tuple[str, str | int]:
        """iperf3 -J is silent until the end: wait for its TCP control listener."""
        return ("tcp-listen", port)

    def sink_argv(self, req: SinkRequest) -> list[str]:
        """iperf3 -s -1 -J -p PORT [-B ADDR | -6] [-A CPU]; ``gap_us`` and ``duration_s`` do not apply."""
        fam = self.validate_sink(req)
        if req.log is not None:
            raise TrafficError("iperf3 backend cannot write a per-packet log (use the builtin backend)")
        argv = [self.exe, "-s", "-1", "-J", "-p", str(req.port)]
        if req.bind is not None:
            argv += ["-B", req.bind]
        elif fam == 6:
            argv.append("-6")
        if req.cpu is not None:
            argv += ["-A", str(req.cpu)]
        return argv

    def gen_argv(self, req: GenRequest) -> list[str]:
        """iperf3 -c DST -p PORT -u -b PAYLOAD_BPS -l PAYLOAD -t S -J --udp-counters-64bit [-A CPU]."""
        fam = self.validate_gen(req)
        rate_bps, frame_bytes, duration_s = req.rate_bps, req.frame_bytes, req.duration_s
        if duration_s != int(duration_s):  # iperf3 3.12 reads -t as an integer: -t 0.5 became 0 = forever
            raise TrafficError(f"iperf3: duration_s={duration_s} must be whole seconds (-t; 0 = until stopped)")
        payload = payload_bytes(frame_bytes, fam)
        payload_bps = round(rate_bps * payload / frame_bytes)
        if rate_bps > 0 and payload_bps < 1:
            raise TrafficError(f"rate_bps={rate_bps} is below 1 payload bit/s at frame_bytes={frame_bytes}")
        argv = [self.exe, "-c", req.dst, "-p", str(req.port), "-u", "-b", str(payload_bps), "-l", str(payload),
                "-t", short_decimal(duration_s, 3), "-J", "--udp-counters-64bit"]  # fmt: skip
        if self.pacing_timer_us is not None:
            argv += ["--pacing-timer", str(self.pacing_timer_us)]
        if req.cpu is not None:
            argv += ["-A", str(req.cpu)]
        return argv

    def parse_gen(self, stdout: str) -> GenResult:
        """Client JSON -> GenResult (send_errors unknown: None)."""
        d, stopped_by = _load(stdout, "client")
        start = require(d, "start", dict, TOOL)
        ts = require(start, "test_start", dict, TOOL)
        fam, _local, remote = _endpoints(start)
        payload = require(ts, "blksize", int, TOOL)
        frame = frame_for_payload(payload, fam)
        s = _sum(d, "sum_sent")
        seconds = float(require(s, "seconds", (int, float), TOOL))
        packets = require(s, "packets", int, TOOL)
        target = require(ts, "target_bitrate", int, TOOL)
        start_ns = _start_ns(start)
        return span_gen_result(
            tool=TOOL,
            family=fam,
            dst=remote[0],
            port=remote[1],
            frame_bytes=frame,
            payload_bytes=payload,
            requested_bps=round(target * frame / payload),
            duration_s=float(require(ts, "duration", (int, float), TOOL)),
            start_ns=start_ns,
            packets=packets,
            span_s=seconds,
            stopped_by=stopped_by,
            raw=d,
        )

    def parse_sink(self, stdout: str) -> SinkResult:
        """Server JSON -> SinkResult (no timestamps, gaps, histogram or delay)."""
        d, _ = _load(stdout, "server")
        start = require(d, "start", dict, TOOL)
        ts = require(start, "test_start", dict, TOOL)
        fam, _, _ = _endpoints(start)
        payload = require(ts, "blksize", int, TOOL)
        s = _sum(d, "sum_received")
        expected = require(s, "packets", int, TOOL)
        lost = require(s, "lost_packets", int, TOOL)
        streams = require(require(d, "end", dict, TOOL), "streams", list, TOOL)
        ooo = sum(int(st.get("udp", {}).get("out_of_order", 0)) for st in streams if isinstance(st, dict))
        received = max(0, expected - lost)
        return count_sink_result(
            tool=TOOL,
            timestamps="none",
            packets=received,
            bytes=int(s.get("bytes") or received * payload),
            frame_bytes=frame_for_payload(payload, fam),
            lost=lost,
            reordered=ooo,
            raw=d,
        )


def _load(stdout: str, role: str) -> tuple[dict[str, Any], str | None]:
    """JSON with iperf3's own error handling: interrupts are a normal stop, other errors are fatal."""
    d = load_json(stdout, f"{TOOL} {role}")
    err = d.get("error")
    stopped_by = "duration"
    if err:
        if "terminated" not in str(err):
            raise TrafficError(f"iperf3 {role} failed: {err}")
        stopped_by = "signal"
    end = d.get("end")
    if not isinstance(end, dict) or not isinstance(end.get("sum_sent" if role == "client" else "sum_received"), dict):
        raise TrafficError(f"iperf3 {role}: no results in the output ({err or 'no end section'})")
    return d, stopped_by


def _sum(d: dict[str, Any], key: str) -> dict[str, Any]:
    end = require(d, "end", dict, TOOL)
    s = require(end, key, dict, TOOL)
    # iperf3 3.12 leaves the UDP client's packet count only in "sum"; prefer the richer one.
    alt = end.get("sum")
    if isinstance(alt, dict) and "packets" not in s and "packets" in alt:
        return alt
    return s


def _endpoints(start: dict[str, Any]) -> tuple[int, tuple[str, int], tuple[str, int]]:
    conns = require(start, "connected", list, TOOL)
    if not conns or not isinstance(conns[0], dict):
        raise TrafficError("iperf3: output has no connected stream")
    c = conns[0]
    local = (require(c, "local_host", str, TOOL), require(c, "local_port", int, TOOL))
    remote = (require(c, "remote_host", str, TOOL), require(c, "remote_port", int, TOOL))
    return _family(remote[0]), local, remote


def _family(host: str) -> int:
    """4 or 6; an IPv4-mapped IPv6 address (dual-stack listener) counts as IPv4."""
    fam = family_of(host)
    if fam == 6 and ipaddress.IPv6Address(host.split("%", 1)[0]).ipv4_mapped is not None:
        return 4
    return fam


def _start_ns(start: dict[str, Any]) -> int:
    stamp = require(start, "timestamp", dict, TOOL)
    return require(stamp, "timesecs", int, TOOL) * 1_000_000_000
