"""Cross-traffic figures: offered (vrgen), forwarded (vrsink and B eth0 counters), lost."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from analysis.counters import FCS_BYTES, mean_rate_bps
from analysis.load import IfSeries


@dataclass(frozen=True)
class CrossTraffic:
    """Cross-traffic A -> B through the router (see ``cross_traffic``)."""

    offered_bps: float | None
    forwarded_bps: float | None
    forwarded_counters_bps: float | None
    sent_packets: int | None
    received_packets: int | None
    lost_packets: int | None
    loss_ratio: float | None
    unreceived_ratio: float | None


def _num(d: Mapping[str, Any] | None, key: str) -> float | None:
    if not d:
        return None
    v = d.get(key)
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def _ns(d: Mapping[str, Any] | None, key: str) -> int | None:
    v = (d or {}).get(key)
    return int(v) if isinstance(v, int) and not isinstance(v, bool) else None


def cross_traffic(
    gen: Mapping[str, Any] | None, sink: Mapping[str, Any] | None, b_eth0: IfSeries | None
) -> CrossTraffic | None:
    """Offered and forwarded rate and loss of the cross-traffic.

    Definitions (rates in vrgen's convention: Ethernet frame incl. 14 B header and 4 B FCS):
    offered_bps = gen.json ``achieved_bps``.  forwarded_bps = sink packets × frame_bytes × 8 /
    (sink last_ns − first_ns).  forwarded_counters_bps = B eth0 (Δrx_bytes + 4 B × Δrx_packets) × 8 / Δt
    between the first and last counter samples inside [sink first_ns, last_ns] (else the
    generator's [start_ns, end_ns]; the kernel's byte counters exclude the FCS, hence the 4 B).
    lost_packets = sink ``lost`` (sequence numbers never received between first_seq and last_seq);
    loss_ratio = lost / (received + lost); unreceived_ratio = 1 − received / gen packets (also
    counts packets after the sink's last_seq).  None when there is no gen, sink or counter data."""
    if not gen and not sink and b_eth0 is None:
        return None
    received = _num(sink, "packets")
    lost = _num(sink, "lost")
    sent = _num(gen, "packets")
    frame = _num(sink, "frame_bytes") or _num(gen, "frame_bytes")
    first, last = _ns(sink, "first_ns"), _ns(sink, "last_ns")
    forwarded = None
    if received and frame and first is not None and last is not None and last > first:
        forwarded = received * frame * 8 / ((last - first) / 1e9)
    counters_bps = None
    if first is None or last is None:
        first, last = _ns(gen, "start_ns"), _ns(gen, "end_ns")
    if b_eth0 is not None and first is not None and last is not None:
        counters_bps = mean_rate_bps(b_eth0.t_ns, b_eth0.rx_bytes, b_eth0.rx_packets, first, last, FCS_BYTES)
    loss_ratio = lost / (received + lost) if lost is not None and received is not None and received + lost else None
    unreceived = 1 - received / sent if sent and received is not None else None
    return CrossTraffic(
        offered_bps=_num(gen, "achieved_bps"),
        forwarded_bps=forwarded,
        forwarded_counters_bps=counters_bps,
        sent_packets=None if sent is None else int(sent),
        received_packets=None if received is None else int(received),
        lost_packets=None if lost is None else int(lost),
        loss_ratio=loss_ratio,
        unreceived_ratio=unreceived,
    )
