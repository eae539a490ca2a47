"""TRAFFIC=tcp / rr of one run: vrtcp's traces read from the run directory, put on the
orchestrator's clock (a lab's A and B by their measured offsets), and the pure figures of
analysis.metrics.tcp and analysis.metrics.tcp_capture computed from them: summary.json's ``tcp``
and ``rr`` objects (docs/metrics.md "TCP traffic").

The headline figures of ``tcp`` (each None with a reason in ``why_absent`` when it cannot be had):

* ``goodput_outage_ms``: the longest interval in which no bulk flow received a byte, across the
  migration window (exact from the receiver's read times);
* ``flow_outage_max_ms``: the longest single flow's outage (exact gap rows);
* ``time_to_recover_ms``: the slowest flow's time from its outage end to 90 % of its
  pre-migration goodput (a lower bound when a flow never recovered);
* ``rto_expiries``: RTO expiries of all flows in the span (a lower bound: analysis.metrics.tcp);
* ``cwnd_min``: the smallest congestion window any flow had in the span (segments);
* ``capture_agrees``: whether the capture at B tells the same per-flow outage within one sampling
  interval (:data:`CAPTURE_TOLERANCE_MS`).

With ``TRAFFIC=tcp,dir=both`` the B -> A flows (sender on B, receiver on A, their own files:
:data:`DIRECTIONS`) get the same figures under ``tcp.ba``, checked against A's capture of them
(``tcp-A.pcap``; runs from before it existed: ``capture_agrees`` absent, "no tcp-A.pcap")."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from analysis.metrics import tcp as m
from analysis.metrics.tcp_capture import capture_outages
from migrate.core.rundir import (
    RR_CLIENT_JSON,
    RR_TSV,
    TCP_PCAP,
    TCP_PCAP_BA,
    TCP_RECV_BA_GAPS_TSV,
    TCP_RECV_BA_TSV,
    TCP_RECV_GAPS_TSV,
    TCP_RECV_TSV,
    TCP_SEND_BA_JSON,
    TCP_SEND_BA_TSV,
    TCP_SEND_JSON,
    TCP_SEND_TSV,
)

SENDER_ROLE, RECEIVER_ROLE = "A", "B"


@dataclasses.dataclass(frozen=True)
class Direction:
    """One direction of the bulk flows: who sends, who receives, and the files they wrote."""

    sender: str
    receiver: str
    send_json: str
    send_tsv: str
    recv_tsv: str
    recv_gaps_tsv: str
    pcap: str  # the receiver's capture of this direction's segments as its interface got them


DIRECTIONS = {
    "ab": Direction(SENDER_ROLE, RECEIVER_ROLE, TCP_SEND_JSON, TCP_SEND_TSV, TCP_RECV_TSV, TCP_RECV_GAPS_TSV,
                    TCP_PCAP),
    "ba": Direction(RECEIVER_ROLE, SENDER_ROLE, TCP_SEND_BA_JSON, TCP_SEND_BA_TSV, TCP_RECV_BA_TSV,
                    TCP_RECV_BA_GAPS_TSV, TCP_PCAP_BA),
}  # fmt: skip
#: the capture and the receiver's read times must agree on each flow's outage within one 10 ms
#: sampling interval: set before any data, the resolution the suite states for TCP figures
CAPTURE_TOLERANCE_MS = 10.0


def _summary(path: Path) -> dict[str, Any] | None:
    try:
        obj = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return obj if isinstance(obj, dict) else None


def _shift(a: np.ndarray, off: int) -> np.ndarray:
    """Timestamps on the orchestrator's clock: minus the host's offset, -1 (absent) kept."""
    return np.where(a >= 0, a - off, a) if off else a


def tcp_figures(
    run_dir: Path,
    start_ns: int,
    end_ns: int,
    udp_downtime_s: float | None,
    offsets_ns: Mapping[str, int],
    sample_ms: float,
    gap_ms: float,
    notes: list[str],
    direction: str = "ab",
) -> dict[str, Any]:
    """summary.json's ``tcp`` of a run with bulk flows (see the module's docstring), or with
    ``direction`` "ba" its ``tcp.ba``."""
    from crosstraffic import tcp as vrtcp

    run_dir = Path(run_dir)
    d = DIRECTIONS[direction]
    send_off, recv_off = int(offsets_ns.get(d.sender, 0)), int(offsets_ns.get(d.receiver, 0))
    send = _summary(run_dir / d.send_json) or {}
    why: dict[str, str] = {}
    recv = vrtcp.read_sink_trace(run_dir / d.recv_tsv)
    gaps = vrtcp.read_sink_gaps(run_dir / d.recv_gaps_tsv)
    info = vrtcp.read_tcpinfo(run_dir / d.send_tsv)
    for name, rec in ((d.recv_tsv, recv), (d.recv_gaps_tsv, gaps), (d.send_tsv, info)):
        if rec.dropped_partial_line:
            notes.append(f"{name}: a truncated last line was dropped")
    rows = np.stack([_shift(recv.t_ns, recv_off), recv.flow, recv.bytes], axis=1).astype(np.int64)
    grows = np.stack(
        [gaps.flow, _shift(gaps.t_before_ns, recv_off), _shift(gaps.t_after_ns, recv_off), gaps.bytes_before], axis=1
    ).astype(np.int64)
    flows = int(send.get("flows") or (int(recv.flow.max()) + 1 if recv.flow.size else 0))
    tcpext = _tcpext(send)
    figs = []
    for fl in range(flows):
        t, b = m.receiver_flow(rows, fl)
        sel = info.flow == fl
        cols = {c: getattr(info, c)[sel] for c in m.INFO_COLUMNS}
        cols["t_ns"] = _shift(cols["t_ns"], send_off)
        figs.append(m.flow_figures(fl, t, b, grows[grows[:, 0] == fl], cols, start_ns, end_ns, sample_ms, gap_ms,
                                   tcpext))  # fmt: skip
    agg = m.aggregate(figs, rows, grows, start_ns, end_ns, udp_downtime_s, tcpext, sample_ms, gap_ms)
    capture = _capture(run_dir / d.pcap, d.send_json, send, figs, start_ns, end_ns, recv_off, notes)
    out = {
        "flows": flows,
        "cc": send.get("cc"),
        "rate_bps": send.get("rate_bps"),
        "goodput_outage_ms": agg.outage.outage_ms,
        "flow_outage_max_ms": agg.flow_outage_max_lower_ms
        if agg.flow_outage_max_lower_ms == agg.flow_outage_max_upper_ms
        else None,
        "time_to_recover_ms": agg.worst_recovery_ms,
        "rto_expiries": agg.rto_total,
        "cwnd_min": _cwnd_min(figs),
        "capture_agrees": capture.get("agrees"),
        "aggregate": dataclasses.asdict(agg),
        "per_flow": [dataclasses.asdict(f) for f in figs],
        "capture": capture,
    }
    if out["goodput_outage_ms"] is None:
        why["goodput_outage_ms"] = agg.outage.reason or "not measured"
    if out["flow_outage_max_ms"] is None:
        why["flow_outage_max_ms"] = "a flow's outage is a bound, not a value"
    if out["time_to_recover_ms"] is None:
        why["time_to_recover_ms"] = agg.worst_recovery_reason or "not measured"
    if out["cwnd_min"] is None:
        why["cwnd_min"] = "no TCP_INFO sample in the span"
    if out["capture_agrees"] is None:
        why["capture_agrees"] = capture.get("reason") or "no capture"
    out["why_absent"] = why
    return _jsonable(out)


def _cwnd_min(figs: list[m.TcpFlowFigures]) -> int | None:
    vals = [f.cwnd.min_cwnd for f in figs if f.cwnd.min_cwnd is not None]
    return int(min(vals)) if vals else None


def _tcpext(send: Mapping[str, Any]) -> dict[str, int | None] | None:
    """The sender's namespace-wide TcpExt deltas over the run (end minus start), None if absent."""
    start, end = send.get("netstat_start"), send.get("netstat_end")
    if not isinstance(start, dict) or not isinstance(end, dict):
        return None
    out: dict[str, int | None] = {}
    for k in sorted(set(start) | set(end)):
        a, b = start.get(k), end.get(k)
        out[k] = b - a if isinstance(a, int) and isinstance(b, int) else None
    return out


def _capture(
    pcap: Path,
    send_json: str,
    send: Mapping[str, Any],
    figs: list[m.TcpFlowFigures],
    start_ns: int,
    end_ns: int,
    recv_off: int,
    notes: list[str],
) -> dict[str, Any]:
    """The capture's per-flow outages beside the receiver's, and whether they agree within
    :data:`CAPTURE_TOLERANCE_MS`: every flow with both figures agrees, and at least one has both."""
    from analysis.load import read_tcp_capture

    ports = send.get("local_ports")
    if not pcap.exists() or pcap.stat().st_size == 0:
        return {"agrees": None, "reason": f"no {pcap.name}", "per_flow": []}
    if not isinstance(ports, list) or not all(isinstance(p, int) for p in ports):
        return {"agrees": None, "reason": f"{send_json} names no local ports", "per_flow": []}
    try:
        seg = read_tcp_capture(pcap)
    except Exception as err:  # a truncated capture must not cost the other figures
        notes.append(f"{pcap.name} unreadable: {type(err).__name__}: {err}")
        return {"agrees": None, "reason": f"{pcap.name} unreadable", "per_flow": []}
    seg = dataclasses.replace(seg, t_ns=_shift(seg.t_ns, recv_off))
    per = capture_outages(seg, {p: i for i, p in enumerate(ports)}, start_ns, end_ns)
    diffs = []
    for c, f in zip(per, figs, strict=False):
        if c.outage_ms is not None and f.outage.outage_ms is not None:
            diffs.append(abs(c.outage_ms - f.outage.outage_ms))
    out: dict[str, Any] = {
        "tolerance_ms": CAPTURE_TOLERANCE_MS,
        "per_flow": [dataclasses.asdict(c) for c in per],
        "max_difference_ms": max(diffs) if diffs else None,
        "flows_compared": len(diffs),
        "segments": int(seg.t_ns.size),
    }
    out["agrees"] = bool(diffs) and max(diffs) <= CAPTURE_TOLERANCE_MS if diffs else None
    if not diffs:
        out["reason"] = "no flow has an exact outage in both the capture and the receiver's trace"
    return out


def rr_figures(
    run_dir: Path, start_ns: int, end_ns: int, offsets_ns: Mapping[str, int], notes: list[str]
) -> dict[str, Any]:
    """summary.json's ``rr``: the request/response latency spike (analysis.metrics.tcp.rr_spike)
    and the client's counts."""
    from crosstraffic import tcp as vrtcp

    rr = vrtcp.read_rr(Path(run_dir) / RR_TSV)
    if rr.dropped_partial_line:
        notes.append(f"{RR_TSV}: a truncated last line was dropped")
    off = int(offsets_ns.get(SENDER_ROLE, 0))
    spike = m.rr_spike(_shift(rr.t_sched_ns, off), _shift(rr.t_send_ns, off), _shift(rr.t_done_ns, off),
                       start_ns, end_ns)  # fmt: skip
    client = _summary(Path(run_dir) / RR_CLIENT_JSON) or {}
    return _jsonable({"spike": dataclasses.asdict(spike), "client": client, "transactions": int(rr.id.size)})


def _jsonable(obj: Any) -> Any:
    """numpy scalars and tuples as JSON's own types."""
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    return obj
