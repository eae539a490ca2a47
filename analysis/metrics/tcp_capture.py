"""The TCP flows' goodput outage seen by an independent capture at B: tcpdump's kernel time stamps
of every segment carrying new data, against the receiver's own read times (analysis.metrics.tcp).

Definition: for each flow, the data segments (payload > 0) that let the receiver read more (they
advance the next in-order byte, RCV.NXT: a retransmission of data already delivered does not,
and a segment beyond a hole counts only when the hole fills) ordered by arrival; the flow's
capture outage is the longest interval between two consecutive
such arrivals that overlaps the migration window [start_ns, end_ns].  Resolution: the capture's
time stamps (ns, kernel); the receiver reads shortly after the arrival, so the two figures differ
by the receiver's scheduling delay, well below one 10 ms sampling interval on an idle end host."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

#: TCP sequence numbers wrap at 2^32
SEQ_MOD = 1 << 32


@dataclass(frozen=True)
class CaptureSegments:
    """The captured TCP segments of the bulk flows, in capture order: arrival (CLOCK_REALTIME ns),
    the sender's port (which names the flow), sequence number and payload bytes."""

    t_ns: np.ndarray
    sport: np.ndarray
    seq: np.ndarray
    payload: np.ndarray


@dataclass(frozen=True)
class CaptureOutage:
    """One flow's longest silence of in-order data at the capture point overlapping the window
    (ms), its ends (ns), and how many data segments advanced the in-order byte; ``outage_ms`` None with a reason
    when the flow had none in the capture."""

    flow: int
    outage_ms: float | None
    t_before_ns: int | None
    t_after_ns: int | None
    new_data_segments: int
    reason: str | None = None


def _unwrap(seq: np.ndarray) -> np.ndarray:
    """Sequence numbers made monotone across 2^32 wraps (consecutive differences taken mod 2^32
    as signed steps, as TCP compares them)."""
    s = seq.astype(np.int64)
    if s.size == 0:
        return s
    step = np.diff(s) % SEQ_MOD
    step = np.where(step >= SEQ_MOD // 2, step - SEQ_MOD, step)
    return np.concatenate([[s[0]], s[0] + np.cumsum(step)])


def new_data_arrivals(t_ns: np.ndarray, seq: np.ndarray, payload: np.ndarray) -> np.ndarray:
    """Arrival times of one flow's segments that let the receiver read more: those that advance
    the next byte expected in order (TCP's RCV.NXT), starting at the first data segment's
    sequence number.  A segment beyond a hole is held (as the receiver's out-of-order queue holds
    it) and counts only when the hole fills; a segment of bytes already delivered counts never.
    Segments in capture order (a Python loop: a flow captures ~10^5 segments, well within a
    second)."""
    data = payload > 0
    t, s, n = t_ns[data].astype(np.int64), _unwrap(seq[data]), payload[data].astype(np.int64)
    out: list[int] = []
    if t.size == 0:
        return np.asarray(out, dtype=np.int64)
    nxt = int(s[0])
    held: dict[int, int] = {}  # out-of-order segments: start -> end
    for ti, si, ni in zip(t.tolist(), s.tolist(), n.tolist(), strict=True):
        end = si + ni
        if end <= nxt:
            continue  # all of it delivered before
        if si > nxt:
            held[si] = max(end, held.get(si, end))
            continue
        nxt = end
        while True:  # the hole is filled: what was held behind it is readable too
            nxt_before = nxt
            for a in [a for a in held if a <= nxt]:
                nxt = max(nxt, held.pop(a))
            if nxt == nxt_before:
                break
        out.append(ti)
    return np.asarray(out, dtype=np.int64)


def capture_outages(
    seg: CaptureSegments, flow_of_port: Mapping[int, int], start_ns: int, end_ns: int
) -> list[CaptureOutage]:
    """Per flow (``flow_of_port``: the sender's source port -> flow index), the longest interval
    between consecutive new-data arrivals that overlaps [start_ns, end_ns]; an interval overlaps
    when it starts before end_ns and ends after start_ns.  A flow with new data only on one side
    of the window, or none, has no figure (reason given)."""
    out = []
    for port, flow in sorted(flow_of_port.items(), key=lambda kv: kv[1]):
        mine = seg.sport == port
        t = new_data_arrivals(seg.t_ns[mine], seg.seq[mine], seg.payload[mine])
        if t.size < 2:
            out.append(CaptureOutage(flow, None, None, None, int(t.size), "fewer than two new-data segments captured"))
            continue
        t = np.sort(t)
        a, b = t[:-1], t[1:]
        over = (a < end_ns) & (b > start_ns)
        if not over.any():
            out.append(CaptureOutage(flow, None, None, None, int(t.size), "no captured interval overlaps the window"))
            continue
        gaps = np.where(over, b - a, -1)
        i = int(np.argmax(gaps))
        out.append(CaptureOutage(flow, float(gaps[i]) / 1e6, int(a[i]), int(b[i]), int(t.size)))
    return out
