"""Cross-traffic figures: offered (vrgen), forwarded (vrsink and B eth0 counters), lost."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from analysis.load import IfSeries
from analysis.metrics.counters import FCS_BYTES, mean_rate_bps


@dataclass(frozen=True)
class CrossTraffic:
    """Cross-traffic A -> B through the router (see ``cross_traffic``)."""

    offered_bps: float | None
    forwarded_bps: float | None
    forwarded_counters_bps: float | None
    sent_packets: int | None
    gen_send_errors: int | None
    received_packets: int | None
    sink_socket_drops: int | None
    sink_lost_seq: int | None
    lost_packets: int | None
    loss_ratio: float | None
    flags: tuple[str, ...] = ()
    duplicate_packets: int | None = None
    reordered_packets: int | None = None


def _num(d: Mapping[str, Any] | None, key: str) -> float | None:
    if not d:
        return None
    v = d.get(key)
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def _count(d: Mapping[str, Any] | None, key: str) -> int | None:
    v = (d or {}).get(key)
    return int(v) if isinstance(v, int) and not isinstance(v, bool) else None


def _ns(d: Mapping[str, Any] | None, key: str) -> int | None:
    v = (d or {}).get(key)
    return int(v) if isinstance(v, int) and not isinstance(v, bool) else None


def loss(sent: int | None, received: int | None, socket_drops: int | None) -> tuple[int | None, float | None, bool]:
    """(lost packets, loss ratio, inconsistent) by the suite's one loss definition (module
    ``cross_traffic``): lost = sent − received − sink socket drops, ratio = lost / sent."""
    if sent is None or received is None:
        return None, None, False
    lost = sent - received - (socket_drops or 0)
    inconsistent = lost < 0
    lost = max(lost, 0)
    return lost, (lost / sent if sent else None), inconsistent


def cross_traffic(
    gen: Mapping[str, Any] | None, sink: Mapping[str, Any] | None, b_eth0: IfSeries | None
) -> CrossTraffic | None:
    """Offered and forwarded rate and loss of the cross-traffic.

    Definitions (rates in vrgen's convention: Ethernet frame incl. 14 B header and 4 B FCS):
    offered_bps = gen.json ``achieved_bps``.  forwarded_bps = sink packets × frame_bytes × 8 /
    (sink last_ns − first_ns), or, when the sink reports it, sink.json ``frame_bytes_total`` (the
    frame bytes of the unique packets, exact also for a frame-size mix) × 8 / (last_ns − first_ns).
    forwarded_counters_bps = B eth0 (Δrx_bytes + 4 B × Δrx_packets) × 8 / Δt
    between the first and last counter samples inside [sink first_ns, last_ns] (else the
    generator's [start_ns, end_ns]; the kernel's byte counters exclude the FCS, hence the 4 B).

    Loss (the one definition the suite uses): sent_packets = gen.json ``packets``, the packets
    vrgen handed to the kernel — its ``send_errors`` (sequence numbers it skipped because the
    send failed, which the sink sees as lost) are not sent and are shown apart as
    gen_send_errors; received_packets = sink.json ``packets`` (unique sequence numbers);
    sink_socket_drops = packets the sink's own socket dropped (they crossed the router);
    lost_packets = sent − received − sink_socket_drops (packets lost between the generator's
    socket and the sink's, including any sent after the sink's last received sequence number);
    loss_ratio = lost_packets / sent_packets.  sink_lost_seq = sink.json ``lost`` (sequence
    numbers missing between the first and last received, send errors included), for reference.
    duplicate_packets = sink.json ``duplicates`` (a sequence number received again: the one flow
    reached B twice, which a router forwarding on both hosts at once, or an L2 segment flooding
    to both, would do); reordered_packets = sink.json ``reordered`` (received after a higher one).
    Flags: ``sink_socket_drops`` (> 0: sequence-number and send-time figures of the sink count
    them as lost), ``inconsistent_counts`` (received + socket drops > sent: lost taken as 0),
    ``duplicates`` (duplicate_packets > 0).
    None when there is no gen, sink or counter data."""
    if not gen and not sink and b_eth0 is None:
        return None
    received = _count(sink, "packets")
    sent = _count(gen, "packets")
    drops = _count(sink, "socket_drops")
    frame = _num(sink, "frame_bytes") or _num(gen, "frame_bytes")
    first, last = _ns(sink, "first_ns"), _ns(sink, "last_ns")
    if not received:  # vrsink writes 0 for the times of an empty trace
        first = last = None
    forwarded = None
    total = _count(sink, "frame_bytes_total")  # a size mix: the frame bytes of the unique packets
    if received and frame and first is not None and last is not None and last > first:
        forwarded = (total if total else received * frame) * 8 / ((last - first) / 1e9)
    counters_bps = None
    if first is None or last is None:
        first, last = _ns(gen, "start_ns"), _ns(gen, "end_ns")
    if b_eth0 is not None and first is not None and last is not None:
        counters_bps = mean_rate_bps(b_eth0.t_ns, b_eth0.rx_bytes, b_eth0.rx_packets, first, last, FCS_BYTES)
    lost, ratio, inconsistent = loss(sent, received, drops)
    flags = (["sink_socket_drops"] if drops else []) + (["inconsistent_counts"] if inconsistent else [])
    dups = _count(sink, "duplicates")
    flags += ["duplicates"] if dups else []
    return CrossTraffic(
        offered_bps=_num(gen, "achieved_bps"),
        forwarded_bps=forwarded,
        forwarded_counters_bps=counters_bps,
        sent_packets=sent,
        gen_send_errors=_count(gen, "send_errors"),
        received_packets=received,
        sink_socket_drops=drops,
        sink_lost_seq=_count(sink, "lost"),
        lost_packets=lost,
        loss_ratio=ratio,
        flags=tuple(flags),
        duplicate_packets=dups,
        reordered_packets=_count(sink, "reordered"),
    )
