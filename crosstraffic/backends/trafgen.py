"""trafgen backend (netsniff-ng): whole Ethernet frames from an AF_PACKET socket, vrsink as the sink.

trafgen only sends.  Its packet configuration (passed on the command line, nothing is written)
is a complete frame in trafgen's byte language: Ethernet header, IPv4 (DF, TTL 64, ``csumip``) or
IPv6 header, UDP header with ``csumudp``/``csumudp6`` and a payload of frame - 46 (IPv4) / - 66
(IPv6) bytes.  trafgen's only runtime counters are single bytes (``dinc``), so the sequence
number is carried as residues: payload byte *i* counts modulo 256, 255, 253, 251, 247, 241, 239,
233 (pairwise coprime, product ~2^63.6) and ``vrsink --seq-crt`` reconstructs it (Chinese
remainder theorem).  trafgen increments before sending, so its first packet carries 1.  The
payload has no send time: no one-way delay.  ``counter=False`` sends a static frame (trafgen's
fastest mode); the sink then only counts datagrams and ``lost`` is not known to it.

Rate (both make trafgen use ``sendto()`` per packet; ``rate_bps=0`` uses its TX_RING fast path):

* ``pacing="rate"`` (default): ``--rate <pps>pps`` (integer packets/s; trafgen 0.6.8's byte/bit
  units sent twice the requested rate here).  The average is exact, but trafgen 0.6.8 sends each
  second's packets as one burst and then sleeps: at 20 Mbit/s of 1500 B frames all 1667 packets
  of a second arrived within 9 ms (sink histogram), so the sink sees ~1 s gaps.  A run shorter
  than a second is one burst, and trafgen then reports the burst's rate (use whole seconds).
* ``pacing="gap"``: ``-t <ns>ns``, a relative ``nanosleep`` after every packet: smooth, but each
  interval is the gap plus the send time and the sleep's overshoot, so the rate falls short.

trafgen forks one process per ``-P``; ``-P 1`` pins it to CPU 0 (so ``cpu``
may only be 0).  ``--no-sock-mem`` and ``-Q`` keep it from changing host-wide socket-memory
sysctls and IRQ affinities (the machine is shared).

Stopping: paced runs send ``-n`` = the packets due in ``duration_s`` and exit; unpaced runs are
ended by ``timeout -s INT duration_s`` (exit status 124, which :meth:`gen_exit_ok` accepts);
``duration_s=0`` runs until SIGINT/SIGTERM.  trafgen prints packets, bytes and the send time
("S sec, U usec on CPU0"), which :meth:`parse_gen` reads; there is no absolute start time
(``start_ns`` is 0).
"""

from __future__ import annotations

import dataclasses
import ipaddress
import math
import re
from pathlib import Path
from typing import Any

from crosstraffic.backend import (
    Backend,
    GenRequest,
    GenResult,
    SinkRequest,
    SinkResult,
    TrafficError,
    family_of,
    payload_bytes,
    recorded_request,
    span_gen_result,
)
from crosstraffic.backends.builtin import BuiltinBackend, check_mac

TOOL = "trafgen"
CRT_MODULI = (256, 255, 253, 251, 247, 241, 239, 233)
COUNTER_BYTES = len(CRT_MODULI)
SRC_PORT = 9001
TTL = 64
PAUSE_GRACE_S = 5.0  # extra time before a paced run is interrupted (trafgen falling behind)

_OUT = {
    "packets": r"^\s*(\d+) packets outgoing",
    "bytes": r"^\s*(\d+) bytes outgoing",
}
_CPU = re.compile(r"^\s*(\d+) sec, (\d+) usec on CPU(\d+) \((\d+) packets\)", re.MULTILINE)


def _pps(req: GenRequest) -> int:
    """The integer packets/s of trafgen --rate for ``req`` (0 = unpaced)."""
    return round(req.rate_bps / (req.frame_bytes * 8)) if req.rate_bps > 0 else 0


def crt_residues(seq: int) -> bytes:
    """The 8 payload bytes that encode ``seq`` for ``vrsink --seq-crt``."""
    return bytes(seq % m for m in CRT_MODULI)


def _hexbytes(b: bytes) -> str:
    return ", ".join(f"0x{x:02x}" for x in b)


def _mac_bytes(mac: str) -> bytes:
    return bytes(int(x, 16) for x in check_mac(mac).split(":"))


def packet_config(
    *,
    src_mac: str,
    dst_mac: str,
    src_ip: str,
    dst_ip: str,
    src_port: int,
    dst_port: int,
    frame_bytes: int,
    counter: bool = True,
) -> str:
    """trafgen packet configuration for one UDP frame of ``frame_bytes`` (incl. 4 B FCS)."""
    fam = family_of(dst_ip)
    if family_of(src_ip) != fam:
        raise TrafficError(f"src_ip {src_ip} and dst {dst_ip} are of different families")
    payload = payload_bytes(frame_bytes, fam)
    if counter and payload < COUNTER_BYTES:
        raise TrafficError(
            f"frame_bytes={frame_bytes} leaves {payload} B of payload, the counter needs {COUNTER_BYTES}"
        )
    src = ipaddress.ip_address(src_ip.split("%", 1)[0]).packed
    dst = ipaddress.ip_address(dst_ip.split("%", 1)[0]).packed
    udp_len = 8 + payload
    parts = [_hexbytes(_mac_bytes(dst_mac)), _hexbytes(_mac_bytes(src_mac))]
    if fam == 4:
        parts += [
            "c16(0x0800)",
            "0x45, 0",
            f"c16({20 + udp_len})",
            "c16(0)",
            "0x40, 0",
            f"{TTL}, 17",
            "csumip(14, 33)",
            _hexbytes(src),
            _hexbytes(dst),
        ]
        csum = "csumudp(14, 34)"
    else:
        parts += ["c16(0x86dd)", "0x60, 0, 0, 0", f"c16({udp_len})", f"17, {TTL}", _hexbytes(src), _hexbytes(dst)]
        csum = "csumudp6(14, 54)"
    parts += [f"c16({src_port})", f"c16({dst_port})", f"c16({udp_len})", csum]
    if counter:
        parts += [f"dinc(0, {m - 1}, 1)" for m in CRT_MODULI]
        rest = payload - COUNTER_BYTES
    else:
        rest = payload
    if rest:
        parts.append(f"fill(0, {rest})")
    return "{ " + ", ".join(parts) + " }"


class TrafgenBackend(Backend):
    """trafgen (generator) and vrsink (sink, ``--seq-crt``)."""

    name = "trafgen"
    # the sink is vrsink: what it measures, except the one-way delay (no send time in the payload)
    capabilities = dataclasses.replace(
        BuiltinBackend.capabilities,
        owd=False,
        payload_header_bytes=COUNTER_BYTES,
        notes=(
            "trafgen sends (AF_PACKET, PACKET_QDISC_BYPASS), vrsink --seq-crt receives: loss, reordering, "
            "duplicates, gaps, per-ms histogram; no one-way delay (no send time in the payload); paced "
            "rates are integer packets/s; no absolute start time; needs interface, MACs and source address"
        ),
    )

    def __init__(
        self,
        *,
        dev: str = "",
        src_mac: str = "",
        dst_mac: str = "",
        src_ip: str = "",
        src_port: int = SRC_PORT,
        counter: bool = True,
        pacing: str = "rate",
        exe: str = "trafgen",
        bin_dir: str | Path | None = None,
    ) -> None:
        """``dev``: sending interface; ``src_mac``/``src_ip``: its addresses; ``dst_mac``: the next hop."""
        self.validate_port(src_port)
        if pacing not in ("rate", "gap"):
            raise TrafficError(f"trafgen pacing={pacing!r}: choose 'rate' (--rate pps) or 'gap' (-t ns)")
        self.pacing = pacing
        for mac in (src_mac, dst_mac):
            if mac:
                check_mac(mac)
        if src_ip:
            family_of(src_ip)
        self.dev, self.src_mac, self.dst_mac, self.src_ip = dev, src_mac, dst_mac, src_ip
        self.src_port, self.counter, self.exe = src_port, counter, exe
        self.sink = BuiltinBackend(bin_dir=bin_dir)
        self._request: GenRequest | None = None
        if not counter:  # a static frame: the sink can only count datagrams
            self.capabilities = dataclasses.replace(
                type(self).capabilities,
                loss=False,
                reordering=False,
                duplicates=False,
                gaps=False,
                notes="static frames (trafgen's fastest mode): the sink counts datagrams only; compare with the "
                "generator's count for loss",
            )

    def executables(self) -> dict[str, str]:
        """trafgen (generator) and vrsink (sink)."""
        return {"gen": self.exe, "sink": self.sink.executables()["sink"]}

    def gen_exit_ok(self, returncode: int) -> bool:
        """0, or 124 when ``timeout`` ended an unpaced run (trafgen then still prints its counts)."""
        return returncode in (0, 124)

    def sink_argv(self, req: SinkRequest) -> list[str]:
        """vrsink ... [--seq-crt] (see BuiltinBackend.sink_argv)."""
        argv = self.sink.sink_argv(req)
        return [*argv, "--seq-crt"] if self.counter else argv

    def gen_argv(self, req: GenRequest) -> list[str]:
        """[timeout -s INT S] trafgen -o DEV -P 1 --no-sock-mem -Q [--rate PPSpps | -t NSns] [-n N] 'CONFIG'."""
        self.validate_gen(req)
        missing = [k for k in ("dev", "src_mac", "dst_mac", "src_ip") if not getattr(self, k)]
        if missing:
            raise TrafficError(f"trafgen builds whole frames: set {', '.join(missing)} (TrafgenBackend(...))")
        if req.cpu not in (None, 0):
            raise TrafficError(f"trafgen -P 1 always pins itself to CPU 0 (cpu={req.cpu!r})")
        rate_bps, frame_bytes, duration_s = req.rate_bps, req.frame_bytes, req.duration_s
        config = packet_config(
            src_mac=self.src_mac,
            dst_mac=self.dst_mac,
            src_ip=self.src_ip,
            dst_ip=req.dst,
            src_port=self.src_port,
            dst_port=req.port,
            frame_bytes=frame_bytes,
            counter=self.counter,
        )
        exact_pps = rate_bps / (frame_bytes * 8)
        pps = _pps(req)
        if rate_bps > 0 and pps < 1:
            raise TrafficError(f"rate_bps={rate_bps} is below 1 packet/s at frame_bytes={frame_bytes} (trafgen --rate)")
        self._request = dataclasses.replace(req, duration_s=float(duration_s))
        argv = [self.exe, "-o", self.dev, "-P", "1", "--no-sock-mem", "-Q"]
        if pps:
            if self.pacing == "rate":
                argv += ["--rate", f"{pps}pps"]
            else:
                argv += ["-t", f"{max(1, round(1e9 / exact_pps))}ns"]
            if duration_s > 0:
                argv += ["-n", str(max(1, math.ceil((pps if self.pacing == "rate" else exact_pps) * duration_s)))]
        argv.append(config)
        if duration_s > 0:
            limit = duration_s if not pps else duration_s + max(PAUSE_GRACE_S, duration_s)
            argv = ["timeout", "-s", "INT", f"{limit:g}", *argv]
        return argv

    def parse_gen(self, stdout: str) -> GenResult:
        """trafgen's exit report -> GenResult (needs this instance's gen_argv call)."""
        r = recorded_request(self._request, TOOL)
        d = parse_trafgen(stdout)
        packets = d["packets"]
        frame = round(d["bytes"] / packets) + 4 if packets else r.frame_bytes
        return span_gen_result(
            tool=TOOL,
            family=r.family,
            dst=r.dst,
            port=r.port,
            frame_bytes=frame,
            payload_bytes=payload_bytes(frame, r.family),
            requested_bps=r.rate_bps,
            duration_s=r.duration_s,
            start_ns=0,
            packets=packets,
            span_s=d["send_s"],
            stopped_by=None,
            raw={**d, "requested_pps": _pps(r), "times_relative": True},
        )

    def parse_sink(self, stdout: str) -> SinkResult:
        """vrsink's sink.json; trafgen's sequence starts at 1, so earlier missing numbers count as lost."""
        s = self.sink.parse_sink(stdout)
        if not self.counter:
            received = int(s.raw.get("received", 0)) - int(s.raw.get("malformed", 0))
            return dataclasses.replace(
                s, packets=received, lost=0, reordered=None, duplicates=None, first_seq=None, last_seq=None, owd_ns=None
            )
        if s.raw.get("seq_format") != "crt8":
            raise TrafficError("trafgen: the sink did not run with --seq-crt")
        missing_at_start = max(0, (s.first_seq or 1) - 1) if s.packets else 0
        return dataclasses.replace(s, lost=s.lost + missing_at_start, owd_ns=None)


def parse_trafgen(stdout: str) -> dict[str, Any]:
    """``packets``, ``bytes`` and ``send_s`` (sum over CPUs of the send time) from trafgen's exit report."""
    text = stdout.replace("\r", "")
    out: dict[str, Any] = {}
    for key, rx in _OUT.items():
        m = re.search(rx, text, re.MULTILINE)
        if m is None:
            raise TrafficError(f"trafgen: output lacks '{key} outgoing' (did it start? see its stderr)")
        out[key] = int(m.group(1))
    cpus = _CPU.findall(text)
    if not cpus:
        raise TrafficError("trafgen: output lacks the per-CPU send time (do not pass -C)")
    if len(cpus) != 1:
        raise TrafficError(f"trafgen: {len(cpus)} sending processes, expected one (-P 1)")
    sec, usec, cpu, pkts = (int(x) for x in cpus[0])
    out.update(send_s=sec + usec / 1e6, cpu=cpu)
    if pkts != out["packets"]:
        raise TrafficError(f"trafgen: CPU{cpu} sent {pkts} packets but the total is {out['packets']}")
    return out
