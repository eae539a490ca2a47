"""D-ITG backend: ``ITGSend`` (generator) and ``ITGRecv`` (sink), results decoded by ``ITGDec``.

Both D-ITG tools write a binary per-packet log; ``ITGDec <log>`` turns it into the summary that
:meth:`DitgBackend.parse_gen` / :meth:`DitgBackend.parse_sink` read (:meth:`gen_decode_argv` /
:meth:`sink_decode_argv` give the decoder's argv).  One instance describes one run: it keeps the
log paths and the requested rate, which D-ITG's summary does not contain.

Conversions and limits (measured with D-ITG 2.8.1 on Debian 12):

* Rate: ``-C`` packets/s = ``rate_bps / (frame_bytes*8)`` (fractions accepted), ``-c`` payload
  bytes = frame - 46 (IPv4) / - 66 (IPv6); ``-poll`` (busy-wait for inter-departure times below
  1 ms) because without it the achieved rate fell 50-60 % short at 20 kpps on this host.
* D-ITG has no unpaced mode: ``rate_bps=0`` requests ``UNPACED_PPS`` packets/s, more than one core
  can send, so ITGSend sends back to back (its mean-rate guarantee makes it catch up).
* Payload: the default metadata (flow id, sequence number, send time; 20 B) is used when the
  payload has room for it; smaller payloads (64 B IPv4 frames: 18 B) get ``-p 1`` (flow id and
  sequence number only, 8 B), and then the receiver's delay figures are meaningless (0).
* Timestamps are user space (gettimeofday, µs); the summary has no absolute times, so
  ``start_ns``/``end_ns`` are 0 and the send span (``raw["times_relative"]`` is True).
* ITGSend ignores SIGINT/SIGTERM until its ``-t`` duration ends, so ``duration_s`` must be > 0.
* ITGRecv is stopped with SIGINT ("Finish with CTRL-C"); it is ready when its signalling TCP port
  listens.  Its log costs 144 B per packet (1 Mpps for 10 s = 1.4 GB): for short runs.
"""

from __future__ import annotations

import dataclasses
import re
import signal
from pathlib import Path
from typing import Any

from crosstraffic.backend import (
    Backend,
    GenRequest,
    GenResult,
    SinkRequest,
    SinkResult,
    TrafficError,
    check_cpu,
    count_capabilities,
    count_sink_result,
    family_of,
    frame_for_payload,
    payload_bytes,
    recorded_request,
    short_decimal,
    span_gen_result,
)

TOOL = "ditg"
SIGNAL_PORT = 9100  # ITGRecv's TCP signalling port (D-ITG's default 9000 is vrmig's traffic port)
UNPACED_PPS = 10_000_000
FULL_META_BYTES = 20  # payload metadata with send timestamps (ITGSend default)
MIN_META_BYTES = 8  # -p 1: flow id + sequence number
SPINNER = re.compile(r"(?:[|\\/-]{4,})")  # ITGDec's progress spinner "|\-/|\-/..." on stdout

_FIELDS = {
    "flows": r"Number of flows\s*=\s*(\d+)",
    "total_time_s": r"Total time\s*=\s*(-?[0-9.]+) s",
    "packets": r"Total packets\s*=\s*(\d+)",
    "delay_min_s": r"Minimum delay\s*=\s*(-?[0-9.]+) s",
    "delay_max_s": r"Maximum delay\s*=\s*(-?[0-9.]+) s",
    "delay_avg_s": r"Average delay\s*=\s*(-?[0-9.]+) s",
    "jitter_avg_s": r"Average jitter\s*=\s*([0-9.]+) s",
    "bytes": r"Bytes received\s*=\s*(\d+)",
    "bitrate_kbps": r"Average bitrate\s*=\s*([0-9.]+) Kbit/s",
    "pkt_rate_pps": r"Average packet rate\s*=\s*([0-9.]+) pkt/s",
    "dropped": r"Packets dropped\s*=\s*(-?\d+)",
    "error_lines": r"Error lines\s*=\s*(\d+)",
}


class DitgBackend(Backend):
    """ITGSend -> ITGRecv, decoded by ITGDec."""

    name = "ditg"
    sink_stop_signal = signal.SIGINT
    capabilities = count_capabilities(
        reordering=False,
        ipv6=True,
        unpaced=True,
        payload_header_bytes=MIN_META_BYTES,
        notes=(
            "ITGDec summary: sent/received packets, loss from sequence numbers, send/receive span; average "
            "delay only (in raw, user-space timestamps, and only with payloads >= 20 B); rate 0 = -C "
            f"{UNPACED_PPS} (no unpaced mode); no absolute start time"
        ),
    )

    def __init__(self, workdir: str | Path = "/tmp", signal_port: int = SIGNAL_PORT, exe_dir: str = "") -> None:
        """``workdir``: where ITGSend/ITGRecv write their binary logs (``ditg-send.log``, ``ditg-recv.log``)."""
        self.validate_port(signal_port)
        self.workdir = Path(workdir)
        self.signal_port = signal_port
        self.exe_dir = exe_dir
        self.send_log = self.workdir / "ditg-send.log"
        self.recv_log = self.workdir / "ditg-recv.log"
        self._request: GenRequest | None = None

    def _exe(self, name: str) -> str:
        return f"{self.exe_dir.rstrip('/')}/{name}" if self.exe_dir else name

    def executables(self) -> dict[str, str]:
        """ITGSend, ITGRecv and the decoder ITGDec."""
        return {"gen": self._exe("ITGSend"), "sink": self._exe("ITGRecv"), "decoder": self._exe("ITGDec")}

    def sink_readiness(self, port: int) -> tuple[str, str | int]:
        """ITGRecv is ready when its signalling channel listens."""
        return ("tcp-listen", self.signal_port)

    def sink_argv(self, req: SinkRequest) -> list[str]:
        """[taskset -c CPU] ITGRecv -Sp SIGNAL_PORT [-a BIND (IPv4 only)] -l RECV_LOG (data port: from ITGSend)."""
        self.validate_sink(req)
        if req.duration_s:
            raise TrafficError("ditg: ITGRecv has no duration; it is stopped with SIGINT")
        if req.log is not None:
            raise TrafficError("ditg: the per-packet log is D-ITG's own binary log (ITGDec -l decodes it)")
        argv = [self.executables()["sink"], "-Sp", str(self.signal_port)]
        if req.bind is not None and family_of(req.bind) == 4:  # ITGRecv -a with an IPv6 address never answers ITGSend
            argv += ["-a", req.bind]
        argv += ["-l", str(self.recv_log)]
        return _pinned(argv, req.cpu)

    def gen_argv(self, req: GenRequest) -> list[str]:
        """[taskset -c CPU] ITGSend -a DST -Sdp SIGPORT -rp PORT -T UDP -C PPS -c PAYLOAD [-p 1] -poll -t MS -l LOG."""
        fam = self.validate_gen(req)
        if req.duration_s <= 0:
            raise TrafficError("ditg: duration_s must be > 0 (ITGSend ignores SIGINT/SIGTERM until its -t ends)")
        payload = payload_bytes(req.frame_bytes, fam)
        pps = req.rate_bps / (req.frame_bytes * 8) if req.rate_bps > 0 else UNPACED_PPS
        duration_ms = max(1, round(req.duration_s * 1000))
        self._request = dataclasses.replace(req, duration_s=duration_ms / 1000)
        argv = [
            self.executables()["gen"],
            "-a",
            req.dst.split("%", 1)[0],
            "-Sdp",
            str(self.signal_port),
            "-rp",
            str(req.port),
            "-T",
            "UDP",
            "-C",
            short_decimal(pps, 6),
            "-c",
            str(payload),
        ]
        if payload < FULL_META_BYTES:
            argv += ["-p", "1"]
        argv += ["-poll", "-t", str(duration_ms), "-l", str(self.send_log)]
        return _pinned(argv, req.cpu)

    def gen_decode_argv(self) -> list[str] | None:
        """ITGDec SEND_LOG."""
        return [self.executables()["decoder"], str(self.send_log)]

    def sink_decode_argv(self) -> list[str] | None:
        """ITGDec RECV_LOG."""
        return [self.executables()["decoder"], str(self.recv_log)]

    def parse_gen(self, stdout: str) -> GenResult:
        """ITGDec summary of the sender log -> GenResult (needs this instance's gen_argv call)."""
        r = recorded_request(self._request, TOOL)
        d = parse_itgdec(stdout)
        payload = _payload(d)
        frame = frame_for_payload(payload, r.family) if payload else r.frame_bytes
        dst, port = d.get("to", (r.dst, r.port))
        return span_gen_result(
            tool="ITGSend",
            family=r.family,
            dst=dst,
            port=port,
            frame_bytes=frame,
            payload_bytes=payload,
            requested_bps=r.rate_bps,
            duration_s=r.duration_s,
            start_ns=0,
            packets=d["packets"],
            span_s=d["total_time_s"],
            stopped_by="duration",
            raw={**d, "times_relative": True},
        )

    def parse_sink(self, stdout: str) -> SinkResult:
        """ITGDec summary of the receiver log -> SinkResult (loss only; no gaps, histogram, times)."""
        d = parse_itgdec(stdout)
        payload = _payload(d)
        to = d.get("to")
        fam = family_of(to[0]) if to else (self._request.family if self._request else 4)
        return count_sink_result(
            tool="ITGRecv",
            timestamps="user",
            packets=d["packets"],
            bytes=d["bytes"],
            frame_bytes=frame_for_payload(payload, fam) if payload else 0,
            lost=max(0, d["dropped"]),
            reordered=None,
            raw={**d, "times_relative": True},
        )


def _pinned(argv: list[str], cpu: int | None) -> list[str]:
    if cpu is None:
        return argv
    return ["taskset", "-c", str(check_cpu(cpu)), *argv]


def _payload(d: dict[str, Any]) -> int:
    return round(d["bytes"] / d["packets"]) if d["packets"] else 0


def parse_itgdec(stdout: str) -> dict[str, Any]:
    """The TOTAL RESULTS section of an ``ITGDec <log>`` summary (one flow), spinner removed.

    Keys: ``flows, total_time_s, packets, bytes, dropped, delay_*_s, jitter_avg_s, bitrate_kbps,
    pkt_rate_pps, error_lines`` and, from the flow header, ``from``/``to`` as (address, port).
    """
    text = SPINNER.sub("\n", stdout)
    if "TOTAL RESULTS" not in text:
        raise TrafficError("ditg: ITGDec output has no TOTAL RESULTS section (empty or unreadable log?)")
    head, _, total = text.partition("TOTAL RESULTS")
    out: dict[str, Any] = {}
    for key, rx in _FIELDS.items():
        m = re.search(rx, total)
        if m is None:
            raise TrafficError(f"ditg: ITGDec summary lacks {key!r}")
        v = m.group(1)
        out[key] = float(v) if "." in v else int(v)
        if key == "flows" and out["flows"] != 1:  # an empty log decodes to 0 flows and nonsense times
            raise TrafficError(f"ditg: the log holds {out['flows']} flows, expected 1 (one ITGSend run per log)")
    for key in ("from", "to"):
        m = re.search(rf"{key.capitalize()}\s+(\S+):(\d+)\s*$", head, re.MULTILINE)
        if m:
            out[key] = (m.group(1), int(m.group(2)))
    return out
