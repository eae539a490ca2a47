"""The migration stream as seen on the wire: R1 mig0 tx_bytes -> first/last byte, duration, volume."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from analysis.metrics.counters import intervals
from analysis.metrics.window import Spans

NOISE_BYTES = 2000  # per sampling interval: ARP/ND and TCP teardown stay below this


@dataclass(frozen=True)
class LinkActivity:
    """Migration-link figures (see ``link_activity``)."""

    duration_s: float | None
    volume_bytes: int
    first_byte_ns: int
    last_byte_ns: int
    span_start_ns: int
    span_end_ns: int
    active_intervals: int
    peak_bps: float
    resolution_s: float
    noise_bytes: int
    flags: tuple[str, ...]
    duration_upper_s: float | None = None


def link_activity(
    t_ns: np.ndarray, tx_bytes: np.ndarray, period_ns: int, span: Spans, noise_bytes: int = NOISE_BYTES
) -> LinkActivity | None:
    """First/last byte, duration and volume of the migration stream from R1 mig0 tx_bytes.

    Definition: among the sampling intervals overlapping [migration start, search end] (search end =
    min(end + margin, traffic-stop)), the *active* ones carry more than ``noise_bytes`` (2000 B) of
    tx_bytes.  k = first, j = last active interval.  first_byte_ns = mid(k), last_byte_ns = mid(j)
    (interval midpoints, each ±half an interval); duration_s = mid(j) − mid(k), ±1 period
    (resolution_s = (Δt_k + Δt_j) / 2); span_start/end_ns = t_k, t_j+1 (the outer bounds).  When
    one interval holds the whole stream (k = j: a stop-and-copy of a small container crosses the
    link in a few ms) the duration is not 0 but unknown below one interval: duration_s is None,
    ``duration_upper_s`` = Δt_k bounds it and the flag ``below_resolution`` says so.
    volume_bytes = sum of the wrap-corrected tx_bytes increases of intervals k..j (all of them,
    idle gaps between bursts included).  It counts what the kernel counts on the veth: Ethernet
    header (14 B, no FCS/preamble), IP and TCP headers and payload, plus TCP retransmissions — so it
    exceeds QEMU's ``ram.transferred`` by the header overhead and the non-RAM device state.
    Returns None when no interval is active (no migration traffic seen)."""
    t = np.asarray(t_ns, dtype=np.int64)
    if t.size < 2:
        return None
    iv = intervals(t, tx_bytes, period_ns)
    overlap = (iv.t1_ns > span.search_lo_ns) & (iv.t0_ns < span.search_hi_ns)
    active = np.flatnonzero(overlap & (iv.delta > noise_bytes))
    if active.size == 0:
        return None
    k, j = int(active[0]), int(active[-1])
    flags = []
    if iv.irregular[k : j + 1].any():
        flags.append("missing_samples")
    if iv.wraps:
        flags.append("counter_wrap")
    seg = iv.delta[k : j + 1]
    if np.isnan(seg).any():
        flags.append("counter_reset")
    mid, dt = iv.mid_ns, iv.dt_ns
    with np.errstate(divide="ignore", invalid="ignore"):
        rates = seg * 8 / (dt[k : j + 1] / 1e9)
    one = k == j
    if one:
        flags.append("below_resolution")
    return LinkActivity(
        duration_s=None if one else int(mid[j] - mid[k]) / 1e9,
        duration_upper_s=int(dt[k]) / 1e9 if one else None,
        volume_bytes=int(np.nansum(seg)),
        first_byte_ns=int(mid[k]),
        last_byte_ns=int(mid[j]),
        span_start_ns=int(iv.t0_ns[k]),
        span_end_ns=int(iv.t1_ns[j]),
        active_intervals=int(active.size),
        peak_bps=float(np.nanmax(rates)),
        resolution_s=(int(dt[k]) + int(dt[j])) / 2e9,
        noise_bytes=noise_bytes,
        flags=tuple(flags),
    )
