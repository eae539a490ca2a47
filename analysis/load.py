"""Loaders: raw run files -> numpy arrays and plain dicts (formats: docs/data-formats.md).

Loaders are tolerant of what a killed instrument leaves behind (a truncated last line) but
never invent data: a malformed line is skipped, a missing file raises ``FileNotFoundError``.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from migrate.core.rundir import control_pcap, peer_log
from probes.sampler import Series as IfSeries  # one interface's samples, as the sampler's loader gives them
from probes.sampler import load_counters as parse_counters

COUNTER_COLUMNS = ("t_ns", "late_ns", "netns", "ifname", "rx_packets", "rx_bytes", "tx_packets", "tx_bytes")


@dataclass(frozen=True, eq=False)
class Counters:
    """All interface series of a counters.tsv, keyed by (role, ifname).

    ``role`` is the namespace name's suffix after the last '-' (``vm1a2b3c-R1`` -> ``R1``)."""

    period_ns: int | None
    series: Mapping[tuple[str, str], IfSeries]
    late_ns: np.ndarray
    #: the sampler's closing line (``# cpu_user_s=... missed=... read_errors=...``), numbers only;
    #: empty when the sampler was killed before writing it
    tail: Mapping[str, float] = field(default_factory=dict)

    def get(self, role: str, ifname: str) -> IfSeries | None:
        """The series of ``ifname`` in namespace role ``role``, or None."""
        return self.series.get((role, ifname))


@dataclass(frozen=True, eq=False)
class RttTrace:
    """RTT probes in send order: send time, RTT (NaN = lost) and sequence number."""

    send_ns: np.ndarray
    rtt_ns: np.ndarray
    seqno: np.ndarray


def role_of(netns: str) -> str:
    """Namespace name -> role: the suffix after the last '-' (the whole name if there is none)."""
    return netns.rsplit("-", 1)[-1]


def _open_text(path: Path) -> str:
    raw = Path(path).read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    return raw.decode("utf-8", errors="replace")


def _tail(footer: Mapping[str, str]) -> dict[str, float]:
    """The numbers of vrsampler's closing comment line (``# cpu_user_s=... rounds=...``); empty
    when the sampler was killed before writing it."""
    if "cpu_user_s" not in footer:
        return {}
    out: dict[str, float] = {}
    for key, value in footer.items():
        try:
            out[key] = float(value)
        except ValueError:
            continue
    return out


def load_counters(path: Path) -> Counters:
    """Read a vrsampler ``counters.tsv`` into per-(role, ifname) uint64 series sorted by t_ns.

    Parsing is :func:`probes.sampler.load_counters` (tolerant: malformed lines and a last line
    without its newline are skipped); this regroups its series by role, orders each by time and
    keeps the closing line's numbers (CPU seconds, rounds, missed rounds, read errors) in ``tail``."""
    c = parse_counters(path, strict=False)
    series: dict[tuple[str, str], IfSeries] = {}
    for s in c:
        order = np.argsort(s.t_ns, kind="stable")
        series[(role_of(s.netns), s.ifname)] = replace(
            s,
            **{n: np.ascontiguousarray(getattr(s, n)[order]) for n in COUNTER_COLUMNS if n not in ("netns", "ifname")},
        )
    late = np.concatenate([s.late_ns for s in c]) if len(c) else np.zeros(0, np.int64)
    return Counters(c.period_ns, series, late, _tail(c.footer))


def load_irtt(path: Path) -> RttTrace:
    """Read irtt client ``-o`` JSON (gzip or plain) into an RttTrace sorted by send time.

    Parsing is :func:`probes.irtt.load_irtt` (tolerant: round trips without a send wall time,
    never sent, are left out).  Send time = ``timestamps.client.send.wall`` (ns); RTT =
    ``delay.rtt`` (ns), NaN when ``lost`` is anything but false or the RTT is absent."""
    from probes.irtt import load_irtt as parse

    t = parse(path, strict=False)
    order = np.argsort(t.send_ns, kind="stable")
    return RttTrace(t.send_ns[order], np.asarray(t.rtt_ns, dtype=np.float64)[order], t.seqno[order])


def read_json(path: Path) -> dict[str, Any]:
    """One JSON object from a file (gzip or plain); ValueError if it is not an object."""
    obj = json.loads(_open_text(path))
    if not isinstance(obj, dict):
        raise ValueError(f"{path}: expected a JSON object")
    return obj


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """JSON objects, one per line; blank, truncated or non-object lines are skipped."""
    out: list[dict[str, Any]] = []
    for line in _open_text(path).splitlines():
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(obj, dict):
            out.append(obj)
    return out


def sink_gaps(sink: Mapping[str, Any]) -> np.ndarray:
    """sink.json ``gaps`` as an int64 array of shape (n, 4): t_before_ns, t_after_ns, seq_before, seq_after."""
    gaps = [g for g in sink.get("gaps") or [] if isinstance(g, list | tuple) and len(g) == 4]
    return np.asarray(gaps, dtype=np.int64).reshape(-1, 4)


def read_pcap(path: Path) -> list[Any]:
    """The packets of a pcap file as scapy packets, decoded down to IP/TCP/UDP.

    scapy decodes a packet's layers only as far as the layer modules imported *at read time*
    allow: a capture read before ``scapy.layers.inet`` is imported comes back as Ethernet
    frames with raw payloads (no IP), however it is dissected afterwards.  Both modules are
    therefore imported here, before ``rdpcap``."""
    import scapy.layers.inet
    import scapy.layers.l2  # noqa: F401  (Ethernet: the captures' link type)
    from scapy.utils import rdpcap

    return list(rdpcap(str(path)))


def read_peer_records(
    run_dir: Path, roles: Iterable[str], notes: list[str], daemon: str = "bird"
) -> tuple[dict[str, list[Any]], dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]]:
    """The routing peers' records of a run (PEERING): per role, ``peer-<role>.log`` parsed as
    ``daemon``'s log (bird or frr) and the dissected ``control-<role>.pcap``
    (analysis.metrics.control_plane); a missing file leaves the role out, an unreadable
    capture (a killed tcpdump) too, with a note."""
    from analysis.metrics.control_plane import dissect, parse_peer_log

    logs: dict[str, list[Any]] = {}
    captures: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
    for role in roles:
        log = Path(run_dir) / peer_log(role)
        if log.exists():
            logs[role] = parse_peer_log(log.read_text(errors="replace"), daemon)
        pcap = Path(run_dir) / control_pcap(role)
        if pcap.exists() and pcap.stat().st_size > 0:
            try:
                captures[role] = dissect(read_pcap(pcap))
            except Exception as err:  # a truncated capture must not cost the other figures
                notes.append(f"{pcap.name} unreadable: {type(err).__name__}: {err}")
    return logs, captures


def read_tcp_capture(path: Path) -> Any:
    """The TCP segments of a capture of Ethernet frames (TRAFFIC=tcp's ``tcp-B.pcap``) as
    :class:`analysis.metrics.tcp_capture.CaptureSegments`.  scapy's RawPcapReader reads the
    records (microsecond or nanosecond pcap); the fixed IPv4/IPv6 and TCP header fields are
    unpacked here rather than by scapy's dissectors, which take ~100 us a packet and a bulk flow
    captures ~10^5 packets.  A truncated last record (a killed tcpdump) ends the read."""
    import struct

    from scapy.utils import RawPcapReader

    from analysis.metrics.tcp_capture import CaptureSegments

    t: list[int] = []
    sport: list[int] = []
    seq: list[int] = []
    payload: list[int] = []
    with RawPcapReader(str(path)) as reader:
        scale = 1 if getattr(reader, "nano", False) else 1000
        for data, meta in reader:
            if len(data) < 14:
                continue
            etype = struct.unpack_from("!H", data, 12)[0]
            if etype == 0x0800 and len(data) >= 34:
                ihl = (data[14] & 0x0F) * 4
                if data[23] != 6:
                    continue
                ip_len = struct.unpack_from("!H", data, 16)[0]
                l4, l3_payload = 14 + ihl, ip_len - ihl
            elif etype == 0x86DD and len(data) >= 54:
                if data[20] != 6:  # next header: TCP directly (no extension headers here)
                    continue
                l4, l3_payload = 54, struct.unpack_from("!H", data, 18)[0]
            else:
                continue
            if len(data) < l4 + 13:
                continue
            sp, _dp, sq = struct.unpack_from("!HHI", data, l4)
            doff = (data[l4 + 12] >> 4) * 4
            t.append(meta.sec * 1_000_000_000 + meta.usec * scale)
            sport.append(sp)
            seq.append(sq)
            payload.append(max(0, l3_payload - doff))
    return CaptureSegments(
        t_ns=np.asarray(t, dtype=np.int64),
        sport=np.asarray(sport, dtype=np.int64),
        seq=np.asarray(seq, dtype=np.int64),
        payload=np.asarray(payload, dtype=np.int64),
    )
