"""Per-flow figures of the UDP CBR sent as several flows (TRAFFIC=udp:M): vrgen spreads its one
sequence of packets over M sockets (distinct source ports, runs of ``flow_run`` consecutive
sequence numbers per flow), vrsink counts what each source delivered.

Definitions (docs/metrics.md "UDP flows"): per flow, sent = gen.json ``flow_packets`` of that
source port, received = the sink's unique sequence numbers from that port, lost = sent −
received (the sink's socket drops are not attributed to flows: with drops a flow's loss includes
its share of them, flagged ``sink_socket_drops``), longest gap = the longest interval between two
consecutive arrivals of that flow (receive stamps, ns; its resolution is the flow's own packet
spacing, M × flow_run packet intervals, so a flow's gap is at least the data-plane gap, longer by
up to two flow periods and by any pause right after it, when the resumed router forwards the few
packets it held and pauses again before the traffic is back at full rate).  The spread of the
longest gaps across flows shows whether the migration stopped all flows together (spread about
one flow period) or some flows longer (hashing of flows onto queues or paths)."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class UdpFlow:
    """One flow (source port) of the UDP CBR."""

    src_port: int
    sent: int | None  # None: the generator's record does not name this port
    received: int | None  # None: the sink saw no packet from it
    lost: int | None
    loss_ratio: float | None
    duplicates: int | None
    reordered: int | None
    longest_gap_ms: float | None  # None: fewer than two packets received


@dataclass(frozen=True)
class UdpFlows:
    """The flows of one direction and their spread (see the module docstring)."""

    flows: int  # flows the generator sent
    flow_run: int | None  # consecutive sequence numbers per flow (gen.json flow_run)
    per_flow: tuple[UdpFlow, ...]
    flows_with_loss: int | None
    loss_ratio_min: float | None
    loss_ratio_median: float | None
    loss_ratio_max: float | None
    longest_gap_min_ms: float | None
    longest_gap_max_ms: float | None
    unknown_sources: int  # sources the sink saw that the generator does not name
    flags: tuple[str, ...] = ()
    why_absent: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """summary.json's form."""
        d = asdict(self)
        d["flags"] = list(self.flags)
        return d


def _int(v: Any) -> int | None:
    return int(v) if isinstance(v, int) and not isinstance(v, bool) else None


def _port(src: Any) -> int | None:
    """ "ADDR:PORT" or "[ADDR]:PORT" -> PORT."""
    if not isinstance(src, str) or ":" not in src:
        return None
    tail = src.rsplit(":", 1)[1]
    return int(tail) if tail.isdigit() else None


def udp_flows(
    src_ports: Sequence[int],
    sent_per_flow: Sequence[int],
    sink_flows: Sequence[Mapping[str, Any]],
    flow_run: int | None = None,
    sink_socket_drops: int | None = None,
) -> UdpFlows:
    """Per-flow loss and longest gap from the generator's ``flow_src_ports`` / ``flow_packets``
    and the sink's ``flows`` list (module docstring)."""
    if len(src_ports) != len(sent_per_flow) or not src_ports:
        return UdpFlows(
            flows=len(src_ports), flow_run=flow_run, per_flow=(), flows_with_loss=None, loss_ratio_min=None,
            loss_ratio_median=None, loss_ratio_max=None, longest_gap_min_ms=None, longest_gap_max_ms=None,
            unknown_sources=0, why_absent="the generator's record names no flows",
        )  # fmt: skip
    by_port: dict[int, Mapping[str, Any]] = {}
    unknown = 0
    for f in sink_flows:
        port = _port(f.get("src"))
        if port is None or port not in src_ports:
            unknown += 1
            continue
        by_port[port] = f
    rows = []
    for port, sent in zip(src_ports, sent_per_flow, strict=True):
        f = by_port.get(int(port))
        received = _int(f.get("packets")) if f is not None else None
        rec = received if received is not None else 0
        lost = max(int(sent) - rec, 0)
        gap_ns = _int(f.get("max_gap_ns")) if f is not None else None
        rows.append(
            UdpFlow(
                src_port=int(port),
                sent=int(sent),
                received=received,
                lost=lost,
                loss_ratio=lost / sent if sent else None,
                duplicates=_int(f.get("duplicates")) if f is not None else None,
                reordered=_int(f.get("reordered")) if f is not None else None,
                longest_gap_ms=gap_ns / 1e6 if gap_ns and rec >= 2 else None,
            )
        )
    ratios = [r.loss_ratio for r in rows if r.loss_ratio is not None]
    gaps = [r.longest_gap_ms for r in rows if r.longest_gap_ms is not None]
    flags = ["sink_socket_drops"] if sink_socket_drops else []
    flags += ["silent_flows"] if any(r.received is None for r in rows) else []
    return UdpFlows(
        flows=len(rows),
        flow_run=flow_run,
        per_flow=tuple(rows),
        flows_with_loss=sum(1 for r in rows if r.lost),
        loss_ratio_min=min(ratios) if ratios else None,
        loss_ratio_median=statistics.median(ratios) if ratios else None,
        loss_ratio_max=max(ratios) if ratios else None,
        longest_gap_min_ms=min(gaps) if gaps else None,
        longest_gap_max_ms=max(gaps) if gaps else None,
        unknown_sources=unknown,
        flags=tuple(flags),
    )


def udp_flows_from_records(gen: Mapping[str, Any] | None, sink: Mapping[str, Any] | None) -> UdpFlows | None:
    """:func:`udp_flows` from gen.json and sink.json; None when either lacks the per-flow members
    (a generator or sink older than per-flow accounting, or another backend)."""
    if not gen or not sink:
        return None
    ports, sent, flows = gen.get("flow_src_ports"), gen.get("flow_packets"), sink.get("flows")
    if not isinstance(ports, list) or not isinstance(sent, list) or not isinstance(flows, list):
        return None
    if not all(_int(p) is not None for p in [*ports, *sent]):
        return None
    return udp_flows(
        [int(p) for p in ports],
        [int(n) for n in sent],
        [f for f in flows if isinstance(f, Mapping)],
        flow_run=_int(gen.get("flow_run")),
        sink_socket_drops=_int(sink.get("socket_drops")),
    )
