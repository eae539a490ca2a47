"""Network downtime of the migration, from the sink's packet gaps and from the 10 ms counters."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from analysis.metrics.counters import Intervals, intervals
from analysis.metrics.window import Spans

STALL_K = 3  # a stall must exceed STALL_K expected packet intervals (cf. vrsink's gap threshold)
STRAY_PACKETS = 2  # stray broadcasts (ARP, QEMU's RARP announce, ND) that B may see during a stall ...
STRAY_MIN_EXPECTED = 20  # ... are ignored only when an interval normally carries at least this many packets


@dataclass(frozen=True)
class CountersDowntime:
    """Downtime seen in B eth0's rx_packets counter (see ``counters_downtime``).

    ``downtime_s`` is None when no stall qualified (flag ``no_stall``) or when only a lower bound
    is known (``open_*``/``clipped_*``): then ``lower_s`` holds the bound."""

    downtime_s: float | None
    extent_s: float | None
    lower_s: float | None
    upper_s: float | None
    resolution_s: float
    threshold_s: float
    t_before_ns: int | None
    t_after_ns: int | None
    idle_intervals: int
    flags: tuple[str, ...]


@dataclass(frozen=True)
class PacketsDowntime:
    """Downtime seen by the sink (see ``packets_downtime``).

    ``downtime_s`` is None when no gap was found (flag ``no_gap``, or ``gaps_dropped`` when the
    sink's gap list was full before the window) or when only a lower bound is known
    (``open_end``/``clipped_*``/``gaps_dropped``): then ``lower_s`` holds the bound."""

    downtime_s: float | None
    lower_s: float | None
    upper_s: float | None
    threshold_s: float | None
    lost_in_gap: int | None
    t_before_ns: int | None
    t_after_ns: int | None
    seq_before: int | None
    seq_after: int | None
    gaps_in_window: int
    flags: tuple[str, ...]


def stall_threshold_s(period_s: float, packet_interval_s: float | None, k: int = STALL_K) -> float:
    """θ = max(period, k × expected packet interval); just the period when the rate is unknown."""
    if not packet_interval_s or not np.isfinite(packet_interval_s):
        return period_s
    return max(period_s, k * packet_interval_s)


def _runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """Inclusive (first, last) index pairs of the runs of True in ``mask``."""
    edges = np.flatnonzero(np.diff(np.concatenate([[0], mask.astype(np.int8), [0]])))
    return [(int(a), int(b) - 1) for a, b in zip(edges[0::2], edges[1::2], strict=True)]


def counters_downtime(
    t_ns: np.ndarray,
    rx_packets: np.ndarray,
    period_ns: int,
    span: Spans,
    packet_interval_s: float | None = None,
    k: int = STALL_K,
) -> CountersDowntime | None:
    """Downtime from B eth0 rx_packets sampled every ``period_ns`` (the paper's method).

    Definition.  Interval j = (t_j, t_j+1] is *active* if rx_packets grew in it by more than
    ``stray`` packets, *idle* if not, *unknown* if the counter was reset (wraps are corrected, see
    analysis.metrics.counters).  stray = 2 if an interval is expected to carry at least 20 packets
    (period / expected packet interval), else 0: a couple of broadcast frames reaching B (ARP, ND,
    QEMU's RARP self-announce) must not split a stall.  Intervals longer than 1.5 periods (missing
    samples) are classified the same way — a zero increase between two real reads proves no
    packet was counted, and a positive one rules out a stall — but flag ``missing_samples``.
    A *stall* is a maximal run of idle intervals a..b.  With active intervals a−1 (holding the last
    packet before) and b+1 (holding the first packet after) on both sides, the stall is dated by
    interval midpoints:

        downtime_s = mid(b+1) − mid(a−1),  mid(j) = (t_j + t_j+1) / 2

    i.e. t(first sample showing an increase after the stall) − t(last sample showing one before
    it), minus half of each of the two bounding intervals; with regular sampling,
    (idle intervals + 1) × period.  The true gap between the last packet before and the first
    after lies in [lower_s, upper_s] = [t_b+1 − t_a, t_b+2 − t_a−1]; resolution_s = half that width
    = (Δt_a−1 + Δt_b+1) / 2, i.e. ±1 period for regular sampling (when stray > 0, up to 2 packet
    intervals more at each end, ≤ 0.1 period).

    Selection: among stalls whose idle span [t_a, t_b+1] overlaps the search span
    [migration start, min(end + margin, traffic-stop)), the one with the largest extent_s (the
    value above, with an open or clipped side taken at the edge), counted only if extent_s >
    threshold_s = max(period, k × expected packet interval), k = 3 (flag ``low_rate`` when the
    second term wins: idle intervals are then normal between packets).  None qualifies:
    downtime_s, extent_s and lower_s None, flag ``no_stall``, upper_s = threshold + period (the
    longest outage that can go unseen) — no outage found is not an outage of 0 s.  A side not
    bounded by an active interval (trace start or end, counter reset) is ``open_start`` /
    ``open_end`` and taken at the idle span's edge; a side beyond the clip span [start − margin,
    search end] is cut there (``clipped_start`` / ``clipped_end``); then only a bound is known:
    downtime_s None, lower_s = the (clipped) idle span, upper_s None and resolution_s the nominal
    period.  Returns None when no sampling interval overlaps the clip span."""
    t = np.asarray(t_ns, dtype=np.int64)
    if t.size < 2 or not ((t[1:] > span.clip_lo_ns) & (t[:-1] < span.clip_hi_ns)).any():
        return None
    iv = intervals(t, rx_packets, period_ns)
    period_s = period_ns / 1e9
    theta_s = stall_threshold_s(period_s, packet_interval_s, k)
    base_flags: list[str] = []
    if theta_s > period_s:
        base_flags.append("low_rate")
    if iv.wraps:
        base_flags.append("counter_wrap")
    if iv.resets:
        base_flags.append("counter_reset")
    expected = period_s / packet_interval_s if packet_interval_s else 0.0
    stray = STRAY_PACKETS if expected >= STRAY_MIN_EXPECTED else 0
    best: CountersDowntime | None = None
    for a, b in _runs(iv.delta <= stray):
        if not (iv.t0_ns[a] < span.search_hi_ns and iv.t1_ns[b] > span.search_lo_ns):
            continue
        stall = _stall(iv, a, b, iv.delta > stray, span, period_s, theta_s, base_flags)
        assert stall.extent_s is not None
        if stall.extent_s > theta_s and (best is None or stall.extent_s > (best.extent_s or 0.0)):
            best = stall
    if best is None:
        flags = (*base_flags, "no_stall")
        return CountersDowntime(None, None, None, theta_s + period_s, period_s, theta_s, None, None, 0, flags)
    return best


def _stall(
    iv: Intervals,
    a: int,
    b: int,
    active: np.ndarray,
    span: Spans,
    period_s: float,
    theta_s: float,
    base_flags: list[str],
) -> CountersDowntime:
    """Date the idle run a..b (see ``counters_downtime``)."""
    lo_ns, hi_ns = int(iv.t0_ns[a]), int(iv.t1_ns[b])
    closed_start, closed_end = a > 0 and bool(active[a - 1]), b < active.size - 1 and bool(active[b + 1])
    s = int(iv.mid_ns[a - 1]) if closed_start else lo_ns
    e = int(iv.mid_ns[b + 1]) if closed_end else hi_ns
    flags = list(base_flags) + ([] if closed_start else ["open_start"]) + ([] if closed_end else ["open_end"])
    if s < span.clip_lo_ns:
        s = span.clip_lo_ns
        flags.append("clipped_start")
    if e > span.clip_hi_ns:
        e = span.clip_hi_ns
        flags.append("clipped_end")
    if iv.irregular[max(a - 1, 0) : b + 2].any():
        flags.append("missing_samples")
    exact = closed_start and closed_end and not {"clipped_start", "clipped_end"} & set(flags)
    dt = iv.dt_ns
    return CountersDowntime(
        downtime_s=(e - s) / 1e9 if exact else None,
        extent_s=(e - s) / 1e9,
        lower_s=(min(hi_ns, span.clip_hi_ns) - max(lo_ns, span.clip_lo_ns)) / 1e9,
        upper_s=(int(iv.t1_ns[b + 1]) - int(iv.t0_ns[a - 1])) / 1e9 if exact else None,
        resolution_s=(int(dt[a - 1]) + int(dt[b + 1])) / 2e9 if exact else period_s,
        threshold_s=theta_s,
        t_before_ns=lo_ns if closed_start else None,
        t_after_ns=int(iv.t1_ns[b + 1]) if closed_end else None,
        idle_intervals=b - a + 1,
        flags=tuple(flags),
    )


def packets_downtime(
    gaps: np.ndarray,
    span: Spans,
    last_ns: int | None = None,
    traffic_end_ns: int | None = None,
    gap_threshold_ns: int | None = None,
    gaps_dropped: int | None = 0,
) -> PacketsDowntime:
    """Downtime from the sink's inter-arrival gaps ``[t_before_ns, t_after_ns, seq_before, seq_after]``.

    Definition: the longest gap (t_after − t_before, in s) among the sink's recorded gaps (every
    inter-arrival gap above its threshold, max(1 ms, 3 packet intervals)) that overlaps the search
    span [migration start, min(end + margin, traffic-stop)); lost_in_gap = seq_after − seq_before − 1
    (0 if reordered).  A closed gap inside the clip span is exact: downtime_s = lower_s = upper_s.
    Parts beyond the clip span [start − margin, search end] are cut (``clipped_start`` /
    ``clipped_end``).  If the generator went on sending (until ``traffic_end_ns``, gen.json end_ns)
    for more than the gap threshold after the sink's last packet (``last_ns``), the traffic never
    came back: that open gap [last_ns, traffic_end_ns] is a candidate too (``open_end``,
    lost_in_gap None).  The sink records its gaps in arrival order until its list is full
    (``gaps_dropped`` > 0 counts the rest): if the last recorded gap ends before the search span
    does, gaps of the window may be missing (flag ``gaps_dropped``); ``gaps_dropped`` None (the
    record does not say) is treated the same way, flag ``gaps_dropped_unknown``.  Without the
    sink's threshold (``gap_threshold_ns`` None) a sink silent before the generator stopped
    cannot be told from the normal spacing of packets: that tail is not a candidate, and any
    result is flagged ``no_gap_threshold`` (a longer outage at the end may have gone unjudged).
    A clipped, open or possibly incomplete result is a lower bound: downtime_s None, lower_s =
    its length, upper_s None.  No gap: downtime_s and lower_s None, flag ``no_gap`` (or
    ``gaps_dropped``, ``gaps_dropped_unknown`` or ``no_gap_threshold`` if gaps may have gone
    unseen), upper_s = the gap threshold (no inter-arrival gap in the window was longer)."""
    g = np.asarray(gaps, dtype=np.int64).reshape(-1, 4)
    rows: list[tuple[int, int, int | None, int | None, tuple[str, ...]]] = [
        (int(r[0]), int(r[1]), int(r[2]), int(r[3]), ()) for r in g
    ]
    threshold_s = gap_threshold_ns / 1e9 if gap_threshold_ns else None
    listed_to_end = g.shape[0] > 0 and int(g[:, 1].max()) >= span.search_hi_ns
    truncated = not listed_to_end and (gaps_dropped is None or gaps_dropped > 0)
    dropped_flag = "gaps_dropped_unknown" if gaps_dropped is None else "gaps_dropped"
    unjudged = False  # a silent tail that, without the threshold, is neither a gap nor none
    if last_ns is not None and traffic_end_ns is not None and traffic_end_ns > last_ns:
        if not gap_threshold_ns:
            unjudged = last_ns < span.search_hi_ns and traffic_end_ns > span.search_lo_ns
        elif traffic_end_ns - last_ns > gap_threshold_ns:
            rows.append((int(last_ns), int(traffic_end_ns), None, None, ("open_end",)))
    hits = [r for r in rows if r[0] < span.search_hi_ns and r[1] > span.search_lo_ns]
    best: tuple[float, int, int, int | None, int | None, list[str]] | None = None
    for t0, t1, s0, s1, extra in hits:
        flags = list(extra)
        if t0 < span.clip_lo_ns:
            t0, flags = span.clip_lo_ns, [*flags, "clipped_start"]
        if t1 > span.clip_hi_ns:
            t1, flags = span.clip_hi_ns, [*flags, "clipped_end"]
        length_s = (t1 - t0) / 1e9
        if best is None or length_s > best[0]:
            best = (length_s, t0, t1, s0, s1, flags)
    if best is None:
        why = (dropped_flag if truncated else "no_gap", *(("no_gap_threshold",) if unjudged else ()))
        return PacketsDowntime(None, None, threshold_s, threshold_s, None, None, None, None, None, 0, why)
    length_s, t0, t1, s0, s1, flags = best
    if truncated:
        flags.append(dropped_flag)
    if unjudged:
        flags.append("no_gap_threshold")
    lost = max(s1 - s0 - 1, 0) if s0 is not None and s1 is not None else None
    exact = not flags
    return PacketsDowntime(
        downtime_s=length_s if exact else None,
        lower_s=length_s,
        upper_s=length_s if exact else None,
        threshold_s=threshold_s,
        lost_in_gap=lost,
        t_before_ns=t0,
        t_after_ns=t1,
        seq_before=s0,
        seq_after=s1,
        gaps_in_window=len(hits),
        flags=tuple(flags),
    )
