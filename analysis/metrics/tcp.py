"""TCP flows across the migrating router: goodput outage, recovery, RTO expiries, cwnd and rr latency.

The TCP traffic helper runs N bulk flows A -> B and request/response transactions, and writes
(all times CLOCK_REALTIME ns):

- receiver trace: rows ``(t_ns, flow, bytes)`` every ``sample_ms`` per flow, ``bytes`` the
  cumulative payload received;
- receiver gaps: rows ``(flow, t_before_ns, t_after_ns, bytes_before)``: every silence longer
  than ``gap_ms`` between two reads of one flow, exact at read-syscall resolution;
- the sender's TCP_INFO every ``sample_ms`` per flow (columns named as in the helper's output:
  ``t_ns``, ``ca_state``, ``cwnd``, ``retransmits``, ``backoff``, ``rto_us``, ``dsack_dups``, ...);
- the sender namespace's TcpExt deltas over the run (TCPTimeouts, TCPSpuriousRTOs,
  TCPLossProbes, TCPDSACKRecv);
- rr trace: per transaction ``(id, flow, t_sched_ns, t_send_ns, t_done_ns)``, -1 = not sent /
  not answered.

Pure: numpy arrays in, frozen dataclasses out (JSON-ready with ``dataclasses.asdict``).  A figure
that cannot be computed is None with its reason in a ``reason`` field; a figure known only as a
bound is carried as ``lower_*`` / ``upper_*`` (None on an open side), never as a point."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

#: an interval of the receiver trace longer than this many sample periods is a hole (the grid is
#: then unusable).  Shorter late samples are kept: vrtcp's timer can fire late when the end host's
#: CPU is busy (on one machine it shares two cores with a TCG router), and its cumulative byte
#: count stays exact at each sample's own time, so a late sample only widens that one interval;
#: silences are measured from the exact gap rows, not from the grid
HOLE_FACTOR = 5.0
SAMPLE_MS = 10.0  # the helper's sampling period of the receiver trace and of TCP_INFO
GAP_MS = 20.0  # the helper's default receiver gap threshold: silences longer than this are listed
#: goodput is averaged over this sliding window to judge recovery: ten 10 ms samples smooth the
#: sampler's jitter and ACK-clock bursts, and it stays short against Linux's 200 ms minimum RTO,
#: so that a recovery after an RTO is not blurred into the RTO itself
RECOVERY_WINDOW_MS = 100.0
RECOVERY_FRACTION = 0.9  # recovered = windowed goodput (or cwnd) back to >= 90 % of its pre-migration median
#: the first second of a trace is left out of the pre-migration reference: slow start and the
#: receive-buffer autotuning ramp of a fresh bulk flow are not its steady state
SETTLE_S = 1.0
#: an RTO shorter than this many sample intervals could let two expiries (the second one backed
#: off to twice the RTO) fall between two TCP_INFO samples, and the counting would miss one
RTO_SAFE_INTERVALS = 2
#: rr transactions sent up to this long after the window end still count as "during": a request
#: caught by the outage waits for an RTO (>= 200 ms, doubled at each expiry), 1 s covers two backoffs
RR_MARGIN_S = 1.0
CA_STATES = ("Open", "Disorder", "CWR", "Recovery", "Loss")  # tcpi_ca_state 0..4
CA_LOSS = 4
INFO_COLUMNS = ("t_ns", "ca_state", "cwnd", "retransmits", "backoff", "rto_us", "dsack_dups")


# ----------------------------------------------------------------------------- goodput grid


@dataclass(frozen=True)
class GoodputSeries:
    """Per-interval goodput of one flow on its 10 ms sample grid (see ``goodput_series``).

    Interval j is (t0_ns[j], t1_ns[j]]; ``bps`` its goodput in bit/s.  Empty lists and a
    ``reason`` when the grid cannot be used."""

    sample_ms: float
    t0_ns: list[int]
    t1_ns: list[int]
    bps: list[float]
    reason: str | None


def _grid(t_ns: np.ndarray, bytes_cum: np.ndarray, sample_ms: float) -> tuple[np.ndarray, np.ndarray, str | None]:
    """Validated (t, bytes) int64 arrays, or a reason why the grid is unusable."""
    t = np.asarray(t_ns, dtype=np.int64).ravel()
    b = np.asarray(bytes_cum, dtype=np.int64).ravel()
    if t.size != b.size:
        return t, b, f"receiver trace: {t.size} times but {b.size} byte counts"
    if t.size < 2:
        return t, b, f"receiver trace: {t.size} sample(s), at least 2 are needed for one interval"
    dt = np.diff(t)
    if (dt <= 0).any():
        j = int(np.flatnonzero(dt <= 0)[0])
        return t, b, f"receiver trace: time does not increase at sample {j + 1} ({int(t[j])} -> {int(t[j + 1])} ns)"
    hole = dt > HOLE_FACTOR * sample_ms * 1e6
    if hole.any():
        j = int(np.flatnonzero(hole)[0])
        return t, b, (f"receiver trace: hole in the {sample_ms:g} ms grid after sample {j} "
                      f"({dt[j] / 1e6:.1f} ms without a sample, {hole.sum()} such interval(s))")  # fmt: skip
    db = np.diff(b)
    if (db < 0).any():
        j = int(np.flatnonzero(db < 0)[0])
        return t, b, f"receiver trace: cumulative bytes decrease at sample {j + 1} ({int(b[j])} -> {int(b[j + 1])})"
    return t, b, None


def goodput_series(t_ns: np.ndarray, bytes_cum: np.ndarray, sample_ms: float = SAMPLE_MS) -> GoodputSeries:
    """Goodput per sampling interval, from one flow's cumulative received payload.

    Definition: interval j = (t_j, t_j+1]; goodput_j = 8 × (bytes_j+1 − bytes_j) / (t_j+1 − t_j)
    in bit/s (payload only: no headers, no retransmitted duplicates).  The grid must be usable:
    at least two samples, strictly increasing times, no interval longer than ``HOLE_FACTOR`` ×
    ``sample_ms`` (a hole: the goodput in it is not known at the grid's resolution; a shorter late
    sample widens its interval only) and no decrease of the cumulative count
    (not one flow's counter).  Otherwise the series is empty and ``reason`` says what is wrong —
    a hole or a decrease is never read as zero goodput."""
    t, b, reason = _grid(t_ns, bytes_cum, sample_ms)
    if reason is not None:
        return GoodputSeries(sample_ms, [], [], [], reason)
    bps = 8e9 * np.diff(b).astype(np.float64) / np.diff(t).astype(np.float64)
    return GoodputSeries(sample_ms, t[:-1].tolist(), t[1:].tolist(), bps.tolist(), None)


def _runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """Inclusive (first, last) index pairs of the runs of True in ``mask``."""
    edges = np.flatnonzero(np.diff(np.concatenate([[0], mask.astype(np.int8), [0]])))
    return [(int(a), int(b) - 1) for a, b in zip(edges[0::2], edges[1::2], strict=True)]


@dataclass(frozen=True)
class GridSilence:
    """The longest run of zero-goodput intervals overlapping the window (see ``grid_silence``)."""

    intervals: int | None
    lower_ms: float | None
    upper_ms: float | None
    t0_ns: int | None  # start of the run's first interval (no byte was received after it ...)
    t1_ns: int | None  # end of its last interval (... until after this)
    open_end: bool  # the run reaches the trace end: the flow never received again
    reason: str | None


def grid_silence(t0_ns: Sequence[int], t1_ns: Sequence[int], bps: Sequence[float], start_ns: int,
                 end_ns: int) -> GridSilence:  # fmt: skip
    """Longest silence seen on the sample grid alone, as a bound.

    Definition: among the runs of consecutive intervals with zero goodput whose span
    [t0 of the first, t1 of the last] overlaps [start_ns, end_ns], the one with the most
    intervals, k.  The last read before it lies in the interval before the run and the first
    read after it in the interval after the run, so the true silence lies in
    [t1_last − t0_first, t1_after − t0_before] = [k·dt, (k+2)·dt] on a regular grid.  A run that
    touches the first or last interval of the trace has an open side: upper_ms None (and
    ``open_end`` when it reaches the trace end).  No zero interval overlaps the window: the
    silence is below two intervals, bound [0, 2·dt] with a reason, not 0."""
    t0 = np.asarray(t0_ns, dtype=np.int64)
    t1 = np.asarray(t1_ns, dtype=np.int64)
    g = np.asarray(bps, dtype=np.float64)
    if t0.size == 0:
        return GridSilence(None, None, None, None, None, False, "no goodput grid")
    best: tuple[int, int] | None = None
    for a, b in _runs(g == 0):
        if t0[a] <= end_ns and t1[b] >= start_ns and (best is None or b - a > best[1] - best[0]):
            best = (a, b)
    if best is None:
        dt_ms = float(np.median(t1 - t0)) / 1e6
        why = "no zero-goodput interval overlaps the window: any silence was shorter than two intervals"
        return GridSilence(0, 0.0, 2 * dt_ms, None, None, False, why)
    a, b = best
    lower = (int(t1[b]) - int(t0[a])) / 1e6
    closed = a > 0 and b < g.size - 1
    upper = (int(t1[b + 1]) - int(t0[a - 1])) / 1e6 if closed else None
    open_end = b == g.size - 1
    why = None
    if not closed:
        why = "silent until the trace end: a lower bound" if open_end else "silent since the trace start: a lower bound"
    return GridSilence(b - a + 1, lower, upper, int(t0[a]), int(t1[b]), open_end, why)


# ----------------------------------------------------------------------------- outage


@dataclass(frozen=True)
class Outage:
    """One flow's receive-side outage around the migration (see ``flow_outage``).

    ``outage_ms`` is exact (read-syscall resolution) when a gap row overlaps the window; then
    lower_ms = upper_ms = outage_ms.  Otherwise it is None and [lower_ms, upper_ms] is the bound,
    ``reason`` says why.  The ``grid`` figures are the same silence seen on the 10 ms grid."""

    gap_ms: float
    outage_ms: float | None
    lower_ms: float | None
    upper_ms: float | None
    t_before_ns: int | None  # last read before the silence
    t_after_ns: int | None  # first read after it
    gaps_in_window: int
    reason: str | None
    grid: GridSilence


def _gap_rows(gaps: np.ndarray) -> np.ndarray:
    """(n, 4) int64 rows ``flow, t_before_ns, t_after_ns, bytes_before``; ValueError if not that shape."""
    g = np.asarray(gaps, dtype=np.int64)
    if g.size == 0:
        return g.reshape(0, 4)
    if g.ndim != 2 or g.shape[1] != 4:
        raise ValueError(f"gap rows must be (n, 4): flow, t_before_ns, t_after_ns, bytes_before; got shape {g.shape}")
    if (g[:, 2] < g[:, 1]).any():
        raise ValueError("gap rows: t_after_ns before t_before_ns")
    return g


def flow_outage(gaps: np.ndarray, grid: GoodputSeries, start_ns: int, end_ns: int, gap_ms: float = GAP_MS) -> Outage:
    """Longest receive-side silence of one flow that overlaps the migration window.

    Definition: among the flow's gap rows (every silence longer than ``gap_ms`` between two reads,
    t_after − t_before) whose [t_before, t_after] overlaps [start_ns, end_ns], the longest one:
    outage_ms = (t_after − t_before) / 1e6, exact at read-syscall resolution.  No gap row
    overlaps the window: the silence was at most ``gap_ms`` — bound [0, gap_ms], outage_ms None,
    not 0 — unless the grid shows the flow silent from within the window until the trace end
    (no read closes it, so no gap row exists): then only the lower bound from the grid is known
    (upper_ms None).  An open silence longer than the longest closed one wins the same way.
    The ``grid`` field is ``grid_silence`` of the goodput series, for comparison: the exact
    outage lies in its bound.  ``gaps`` are the rows of this one flow (ValueError if they name
    several)."""
    g = _gap_rows(gaps)
    if g.shape[0] and np.unique(g[:, 0]).size > 1:
        raise ValueError(f"flow_outage: gap rows of several flows ({sorted(set(g[:, 0].tolist()))}): pass one flow's")
    gs = (
        grid_silence(grid.t0_ns, grid.t1_ns, grid.bps, start_ns, end_ns)
        if grid.reason is None
        else GridSilence(None, None, None, None, None, False, grid.reason)
    )
    hit = g[(g[:, 1] <= end_ns) & (g[:, 2] >= start_ns)]
    best = None
    if hit.shape[0]:
        i = int(np.argmax(hit[:, 2] - hit[:, 1]))
        best = (int(hit[i, 1]), int(hit[i, 2]))
    if gs.open_end and gs.lower_ms is not None and (best is None or gs.lower_ms > (best[1] - best[0]) / 1e6):
        why = "the flow received nothing from within the window until the trace end: a lower bound from the grid"
        return Outage(gap_ms, None, gs.lower_ms, None, None, None, int(hit.shape[0]), why, gs)
    if best is None:
        why = f"no receive gap above {gap_ms:g} ms overlaps the window: the silence was at most {gap_ms:g} ms"
        return Outage(gap_ms, None, 0.0, gap_ms, None, None, 0, why, gs)
    ms = (best[1] - best[0]) / 1e6
    return Outage(gap_ms, ms, ms, ms, best[0], best[1], int(hit.shape[0]), None, gs)


# ----------------------------------------------------------------------------- recovery


@dataclass(frozen=True)
class Recovery:
    """Time for one flow's goodput to come back (see ``time_to_recover``)."""

    window_ms: float
    fraction: float
    settle_s: float
    baseline_bps: float | None  # pre-migration median of the windowed goodput
    from_ns: int | None  # the reference instant (normally the outage end)
    recovered_ns: int | None  # start of the first window back to >= fraction × baseline
    recovery_ms: float | None
    lower_ms: float | None  # recovery_ms is at least this (= recovery_ms when recovered)
    resolution_ms: float
    reason: str | None


def _windowed(t: np.ndarray, b: np.ndarray, window_ms: float, sample_ms: float) -> tuple[np.ndarray, int]:
    """Goodput (bit/s) over the forward windows [t_j, t_j+m], m = round(window / sample) intervals."""
    m = max(1, round(window_ms / sample_ms))
    if t.size <= m:
        return np.zeros(0), m
    return 8e9 * (b[m:] - b[:-m]).astype(np.float64) / (t[m:] - t[:-m]).astype(np.float64), m


def time_to_recover(
    t_ns: np.ndarray,
    bytes_cum: np.ndarray,
    start_ns: int,
    from_ns: int,
    sample_ms: float = SAMPLE_MS,
    window_ms: float = RECOVERY_WINDOW_MS,
    fraction: float = RECOVERY_FRACTION,
    settle_s: float = SETTLE_S,
) -> Recovery:
    """Time from ``from_ns`` (the outage end) until the flow's goodput is back to normal.

    Definition: the windowed goodput at grid point j is 8 × (bytes_j+m − bytes_j) / (t_j+m − t_j),
    m = ``window_ms`` / ``sample_ms`` intervals (the goodput of the W following the sample).  The
    baseline is the median of it over the windows that lie entirely in [trace start + ``settle_s``,
    start_ns) (pre-migration, after slow start).  Recovered at the first grid point t_j >= from_ns
    whose window reaches ``fraction`` × baseline; recovery_ms = (t_j − from_ns) / 1e6, dated on the
    grid (resolution one sample interval).  No such window before the trace ends: recovery_ms None
    and lower_ms = (first grid point whose window could not be evaluated − from_ns): the flow had
    not recovered by then, upper side open.  No pre-migration window (or a zero baseline), or an
    unusable grid (see ``goodput_series``): None with the reason."""
    base = Recovery(window_ms, fraction, settle_s, None, from_ns, None, None, None, sample_ms, None)
    t, b, reason = _grid(t_ns, bytes_cum, sample_ms)
    if reason is not None:
        return replace(base, reason=reason)
    w, m = _windowed(t, b, window_ms, sample_ms)
    if w.size == 0:
        return replace(base, reason=f"receiver trace shorter than one {window_ms:g} ms window")
    ws, we = t[:-m], t[m:]
    pre = (ws >= t[0] + int(settle_s * 1e9)) & (we <= start_ns)
    if not pre.any():
        return replace(base, reason=(f"no pre-migration data: no {window_ms:g} ms window between the trace "
                                      f"start + {settle_s:g} s and the migration start"))  # fmt: skip
    baseline = float(np.median(w[pre]))
    if baseline <= 0:
        return replace(base, baseline_bps=baseline, reason="no goodput before the migration: nothing to recover to")
    ok = np.flatnonzero((ws >= from_ns) & (w >= fraction * baseline))
    if ok.size == 0:
        lower = max(int(t[t.size - m]) - from_ns, 0) / 1e6
        why = f"goodput not back to {fraction:.0%} of its pre-migration median before the trace ends"
        return replace(base, baseline_bps=baseline, lower_ms=lower, reason=why)
    j = int(ok[0])
    return replace(base, baseline_bps=baseline, recovered_ns=int(ws[j]), recovery_ms=(int(ws[j]) - from_ns) / 1e6,
                    lower_ms=(int(ws[j]) - from_ns) / 1e6)  # fmt: skip


# ----------------------------------------------------------------------------- TCP_INFO


def _info(info: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The TCP_INFO columns this module reads, as int64 arrays of one length sorted by time."""
    missing = [c for c in INFO_COLUMNS if c not in info]
    if missing:
        raise ValueError(f"TCP_INFO trace lacks column(s) {', '.join(missing)}; expected {', '.join(INFO_COLUMNS)}")
    cols = {c: np.asarray(info[c], dtype=np.int64).ravel() for c in INFO_COLUMNS}
    n = {c: v.size for c, v in cols.items()}
    if len(set(n.values())) != 1:
        raise ValueError(f"TCP_INFO columns differ in length: {n}")
    order = np.argsort(cols["t_ns"], kind="stable")
    return {c: v[order] for c, v in cols.items()}


@dataclass(frozen=True)
class RtoExpiries:
    """RTO expiries of one flow seen in its TCP_INFO samples (see ``rto_expiries``)."""

    count: int  # expiries seen in the span (a lower bound: see the docstring)
    from_retransmits: int  # shown by tcpi_retransmits
    from_backoff_only: int  # shown by tcpi_backoff alone (retransmits had been reset in between)
    span_lo_ns: int
    span_hi_ns: int
    expiry_intervals_ns: list[list[int]]  # [t_before, t_after] sample pair around each expiry
    first_after_outage_start_ms: list[float] | None  # [lo, hi] of the first expiry − outage start
    loss_entries_unexplained: int  # entries into ca_state Loss with no expiry seen: an RTO hidden between samples?
    min_rto_ms: float | None  # smallest tcpi_rto in the span
    rto_below_safe: bool  # some tcpi_rto < 2 sample intervals: two expiries may share an interval
    count_whole_trace: int  # the same count over the whole trace (to compare with TcpExt TCPTimeouts)
    reason: str | None


def _expiries(r: np.ndarray, k: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per sample interval, the fewest expiries each counter's change needs: b − a if it grew or
    stayed, b if it fell (it was reset by an ACK, then grew b times)."""

    def need(c: np.ndarray) -> np.ndarray:
        a, b = c[:-1], c[1:]
        return np.where(b >= a, b - a, b)

    return need(r), need(k)


def rto_expiries(
    info: Mapping[str, np.ndarray],
    span_lo_ns: int,
    span_hi_ns: int,
    outage_start_ns: int | None = None,
    sample_ms: float = SAMPLE_MS,
) -> RtoExpiries:
    """RTO expiries of one flow in [span_lo_ns, span_hi_ns] (the migration window plus the time
    until the flow recovered, or until the trace end).

    Definition: per TCP_INFO sample interval (t_j−1, t_j] overlapping the span, the expiries are
    the larger of what ``retransmits`` (icsk_retransmits: consecutive expiries, reset when an ACK
    advances snd_una) and ``backoff`` (icsk_backoff: +1 per expiry, reset on a valid RTT sample)
    need: a counter going a -> b needs b − a expiries if b >= a, and b if it fell (a reset, then b
    new ones).  ``from_retransmits`` sums the first; ``from_backoff_only`` what backoff shows
    beyond it (retransmits reset by an ACK between samples while backoff was not).  Assumption:
    Linux's minimum RTO is 200 ms and each expiry doubles it, so at a 10 ms sample interval two
    expiries never share an interval and a counter that stays up is always seen; ``rto_below_safe``
    flags a tcpi_rto below 2 sample intervals, which would break that.  What no sampling of these
    two counters can see: an expiry whose retransmission is ACKed (and both counters reset) within
    the same interval — likely when the path is back at the expiry and the RTT is sub-ms.  So
    ``count`` is a lower bound; ``loss_entries_unexplained`` counts entries into ca_state Loss
    (which an RTO expiry causes) with no expiry seen in that interval, as a hint of such hidden
    expiries.  backoff also grows on zero-window probes (not expected: the receiver reads all the
    time).  ``first_after_outage_start_ms``: the first expiry's interval minus the outage start,
    [t_j−1 − start, t_j − start] in ms (None without an outage start or an expiry)."""
    c = _info(info)
    t = c["t_ns"]
    empty = RtoExpiries(0, 0, 0, span_lo_ns, span_hi_ns, [], None, 0, None, False, 0, None)
    if t.size < 2:
        return replace(empty, reason=f"TCP_INFO trace has {t.size} sample(s): no interval")
    er, eb = _expiries(c["retransmits"], c["backoff"])
    e = np.maximum(er, eb)
    in_span = (t[1:] > span_lo_ns) & (t[:-1] < span_hi_ns)
    if not in_span.any():
        return replace(empty, count_whole_trace=int(e.sum()), reason="no TCP_INFO sample interval overlaps the span")
    idx = np.flatnonzero(in_span & (e > 0))
    intervals = [[int(t[j]), int(t[j + 1])] for j in idx]
    first = None
    if idx.size and outage_start_ns is not None:
        j = int(idx[0])
        first = [(int(t[j]) - outage_start_ns) / 1e6, (int(t[j + 1]) - outage_start_ns) / 1e6]
    ca = c["ca_state"]
    loss_entry = (ca[1:] == CA_LOSS) & (ca[:-1] != CA_LOSS) & (e == 0) & in_span
    s_lo, s_hi = int(np.flatnonzero(in_span)[0]), int(np.flatnonzero(in_span)[-1]) + 1
    rto = c["rto_us"][s_lo : s_hi + 1]
    rto = rto[rto > 0]
    min_rto = float(rto.min()) / 1e3 if rto.size else None
    return RtoExpiries(
        count=int(e[in_span].sum()),
        from_retransmits=int(er[in_span].sum()),
        from_backoff_only=int(np.maximum(eb - er, 0)[in_span].sum()),
        span_lo_ns=span_lo_ns,
        span_hi_ns=span_hi_ns,
        expiry_intervals_ns=intervals,
        first_after_outage_start_ms=first,
        loss_entries_unexplained=int(loss_entry.sum()),
        min_rto_ms=min_rto,
        rto_below_safe=min_rto is not None and min_rto < RTO_SAFE_INTERVALS * sample_ms,
        count_whole_trace=int(e.sum()),
        reason=None,
    )


@dataclass(frozen=True)
class Spurious:
    """Spurious retransmissions of one flow (see ``spurious_retransmissions``)."""

    dsack_dups: int | None  # increase of tcpi_dsack_dups over the span
    reason: str | None
    ns_spurious_rtos: int | None  # namespace-wide TcpExt TCPSpuriousRTOs delta over the run, as given
    ns_dsack_recv: int | None  # namespace-wide TcpExt TCPDSACKRecv delta over the run, as given


def _tcpext(tcpext: Mapping[str, int | None] | None, key: str) -> int | None:
    v = (tcpext or {}).get(key)
    return int(v) if isinstance(v, int | np.integer) else None


def spurious_retransmissions(
    info: Mapping[str, np.ndarray],
    span_lo_ns: int,
    span_hi_ns: int,
    tcpext: Mapping[str, int | None] | None = None,
) -> Spurious:
    """DSACKs received by one flow's sender over [span_lo_ns, span_hi_ns].

    Definition: dsack_dups(first sample at or after span_hi) − dsack_dups(last sample at or
    before span_lo); tcpi_dsack_dups counts the DSACK blocks the receiver sent back, i.e. segments
    it got twice: retransmissions that were not needed (or duplicated by the network).  None with
    a reason when the TCP_INFO trace does not cover both ends of the span, or when the counter
    fell (not one socket's counter).  The namespace-wide TcpExt deltas (whole run, every socket
    of the sender's namespace, rr included) are passed through as given (None if absent)."""
    c = _info(info)
    t, d = c["t_ns"], c["dsack_dups"]
    ns = (_tcpext(tcpext, "TCPSpuriousRTOs"), _tcpext(tcpext, "TCPDSACKRecv"))
    before, after = np.flatnonzero(t <= span_lo_ns), np.flatnonzero(t >= span_hi_ns)
    if before.size == 0 or after.size == 0:
        return Spurious(None, "the TCP_INFO trace does not cover the span at both ends", *ns)
    v = int(d[after[0]]) - int(d[before[-1]])
    if v < 0 or (np.diff(d[before[-1] : after[0] + 1]) < 0).any():
        return Spurious(None, "tcpi_dsack_dups decreased within the span: not one socket's counter", *ns)
    return Spurious(v, None, *ns)


@dataclass(frozen=True)
class CwndDip:
    """One flow's congestion window through the migration (see ``cwnd_dip``)."""

    min_cwnd: int | None  # smallest tcpi_snd_cwnd sampled in the span (segments)
    min_cwnd_ns: int | None
    median_pre: float | None  # median cwnd in [trace start + settle, start_ns)
    from_ns: int | None
    recovered_ns: int | None  # first sample >= from_ns with cwnd >= fraction × median_pre
    recovery_ms: float | None
    lower_ms: float | None  # recovery_ms is at least this (= recovery_ms when recovered)
    ca_states: list[str]  # ca_state sequence in the span, one entry per run of equal samples
    ca_state_ms: list[float]  # time in each: first sample of the run to first sample of the next
    reason: str | None


def cwnd_dip(
    info: Mapping[str, np.ndarray],
    start_ns: int,
    span_hi_ns: int,
    from_ns: int | None,
    fraction: float = RECOVERY_FRACTION,
    settle_s: float = SETTLE_S,
) -> CwndDip:
    """Minimum cwnd and congestion-state sequence in [start_ns, span_hi_ns], and cwnd recovery.

    Definition: min_cwnd = the smallest tcpi_snd_cwnd sampled in the span; median_pre = median of
    the samples in [first sample + ``settle_s``, start_ns); recovery_ms = time from ``from_ns``
    (the outage end) to the first sample at or after it with cwnd >= ``fraction`` × median_pre
    (resolution one sample interval).  Never reached by the last sample: recovery_ms None,
    lower_ms = last sample − from_ns.  ca_states: tcpi_ca_state of the samples in the span,
    run-length encoded (Open, Disorder, CWR, Recovery, Loss), each with the time from its first
    sample to the next run's first sample (the last run: to the last sample in the span); states
    held for less than a sample interval may not appear."""
    c = _info(info)
    t, cw, ca = c["t_ns"], c["cwnd"], c["ca_state"]
    reasons: list[str] = []
    sel = np.flatnonzero((t >= start_ns) & (t <= span_hi_ns))
    min_cwnd = min_ns = None
    states: list[str] = []
    state_ms: list[float] = []
    if sel.size:
        k = int(sel[np.argmin(cw[sel])])
        min_cwnd, min_ns = int(cw[k]), int(t[k])
        for a, b in _runs_of_equal(ca[sel]):
            s = int(ca[sel[a]])
            states.append(CA_STATES[s] if 0 <= s < len(CA_STATES) else f"state{s}")
            nxt = int(t[sel[b + 1]]) if b + 1 < sel.size else int(t[sel[-1]])
            state_ms.append((nxt - int(t[sel[a]])) / 1e6)
    else:
        reasons.append("no TCP_INFO sample in the span")
    pre = cw[(t >= (t[0] if t.size else 0) + int(settle_s * 1e9)) & (t < start_ns)]
    median_pre = float(np.median(pre)) if pre.size else None
    rec_ns = rec_ms = lower = None
    if median_pre is None:
        reasons.append(f"no pre-migration TCP_INFO sample after the first {settle_s:g} s")
    elif from_ns is None:
        reasons.append("no outage end to measure the cwnd recovery from")
    else:
        ok = np.flatnonzero((t >= from_ns) & (cw >= fraction * median_pre))
        if ok.size:
            rec_ns = int(t[ok[0]])
            rec_ms = lower = (rec_ns - from_ns) / 1e6
        else:
            lower = max(int(t[-1]) - from_ns, 0) / 1e6
            reasons.append(f"cwnd not back to {fraction:.0%} of its pre-migration median by the last sample")
    return CwndDip(min_cwnd, min_ns, median_pre, from_ns, rec_ns, rec_ms, lower, states, state_ms,
                   "; ".join(reasons) or None)  # fmt: skip


def _runs_of_equal(v: np.ndarray) -> list[tuple[int, int]]:
    """Inclusive (first, last) index pairs of the runs of equal values."""
    if v.size == 0:
        return []
    cut = np.flatnonzero(np.diff(v) != 0)
    starts = np.concatenate([[0], cut + 1])
    ends = np.concatenate([cut, [v.size - 1]])
    return [(int(a), int(b)) for a, b in zip(starts, ends, strict=True)]


# ----------------------------------------------------------------------------- one flow


@dataclass(frozen=True)
class TcpFlowFigures:
    """Every figure of one bulk flow (see ``flow_figures``)."""

    flow: int
    goodput_reason: str | None  # why the 10 ms grid is unusable (None: it is usable)
    outage: Outage
    recovery_from: str  # "outage_end", or "window_end" when the outage end is not known
    recovery: Recovery
    span_hi_ns: int  # end of the span of the RTO, DSACK and cwnd figures
    rto: RtoExpiries
    spurious: Spurious
    cwnd: CwndDip


def flow_figures(
    flow: int,
    recv_t_ns: np.ndarray,
    recv_bytes: np.ndarray,
    gaps: np.ndarray,
    info: Mapping[str, np.ndarray],
    start_ns: int,
    end_ns: int,
    sample_ms: float = SAMPLE_MS,
    gap_ms: float = GAP_MS,
    tcpext: Mapping[str, int | None] | None = None,
) -> TcpFlowFigures:
    """All figures of one flow: ``flow_outage``, ``time_to_recover``, ``rto_expiries``,
    ``spurious_retransmissions``, ``cwnd_dip``.

    Recovery (goodput and cwnd) is measured from the outage end (t_after of its gap row); when
    the outage is below the gap threshold its end is not known and the window end is used
    (``recovery_from`` = "window_end"); when the flow never received again there is nothing to
    measure from (recovery None).  The RTO, DSACK and cwnd span is [start_ns, span_hi_ns] with
    span_hi_ns = max(end_ns, goodput recovery instant), or the last TCP_INFO sample when the
    goodput did not recover."""
    g = _gap_rows(gaps)
    grid = goodput_series(recv_t_ns, recv_bytes, sample_ms)
    outage = flow_outage(g, grid, start_ns, end_ns, gap_ms)
    c = _info(info)
    info_end = int(c["t_ns"][-1]) if c["t_ns"].size else end_ns
    if outage.t_after_ns is not None:
        origin, from_ns = "outage_end", outage.t_after_ns
    elif outage.upper_ms is None:
        origin, from_ns = "outage_end", None
    else:
        origin, from_ns = "window_end", end_ns
    if from_ns is None:
        recovery = Recovery(RECOVERY_WINDOW_MS, RECOVERY_FRACTION, SETTLE_S, None, None, None, None, None, sample_ms,
                            "the flow never received again: no recovery")  # fmt: skip
    else:
        recovery = time_to_recover(recv_t_ns, recv_bytes, start_ns, from_ns, sample_ms)
    span_hi = max(end_ns, recovery.recovered_ns) if recovery.recovered_ns is not None else max(end_ns, info_end)
    return TcpFlowFigures(
        flow=int(flow),
        goodput_reason=grid.reason,
        outage=outage,
        recovery_from=origin,
        recovery=recovery,
        span_hi_ns=span_hi,
        rto=rto_expiries(c, start_ns, span_hi, outage.t_before_ns, sample_ms),
        spurious=spurious_retransmissions(c, start_ns, span_hi, tcpext),
        cwnd=cwnd_dip(c, start_ns, span_hi, from_ns),
    )


# ----------------------------------------------------------------------------- all flows


@dataclass(frozen=True)
class PacketGapRelation:
    """A TCP outage against the UDP packet downtime of the same run (see ``packet_gap_relation``)."""

    tcp_ms: float | None
    udp_ms: float | None
    difference_ms: float | None  # tcp − udp
    ratio: float | None  # tcp / udp
    verdict: str | None  # "≈ data-plane gap", "gap + RTO", "longer" or "shorter"
    reason: str | None


def packet_gap_relation(tcp_ms: float | None, udp_s: float | None, rto_in_outage: bool,
                        sample_ms: float = SAMPLE_MS) -> PacketGapRelation:  # fmt: skip
    """Difference (tcp − udp, ms) and ratio (tcp / udp) of an exact TCP outage and the UDP packet
    downtime, and a verdict: "≈ data-plane gap" when |difference| < one sample interval; else
    "gap + RTO" when an RTO expiry fell in the TCP outage; else "longer" (or "shorter", which a
    TCP silence should not be: every flow crossing the router is cut as long as the packets are).
    None with a reason when either figure is absent or only a bound."""
    udp_ms = udp_s * 1e3 if udp_s is not None else None
    if tcp_ms is None or udp_ms is None:
        why = "no exact TCP outage (only a bound)" if tcp_ms is None else "no UDP packet downtime"
        return PacketGapRelation(tcp_ms, udp_ms, None, None, None, why)
    diff = tcp_ms - udp_ms
    ratio = tcp_ms / udp_ms if udp_ms > 0 else None
    if abs(diff) < sample_ms:
        verdict = "≈ data-plane gap"
    elif rto_in_outage:
        verdict = "gap + RTO"
    else:
        verdict = "longer" if diff > 0 else "shorter"
    return PacketGapRelation(tcp_ms, udp_ms, diff, ratio, verdict, None if ratio is not None else "UDP downtime is 0")


@dataclass(frozen=True)
class AllSilent:
    """The longest interval in which no flow received anything (see ``all_silent``)."""

    outage_ms: float | None
    lower_ms: float | None
    upper_ms: float | None
    t_before_ns: int | None  # the last read (of any flow) before it
    t_after_ns: int | None  # the first read (of any flow) after it
    reason: str | None


def _merge(iv: list[tuple[int, int, bool]]) -> list[tuple[int, int, bool]]:
    out: list[tuple[int, int, bool]] = []
    for a, b, o in sorted(iv):
        if out and a < out[-1][1]:  # touching silences meet at a read: data came, not one silence
            pa, pb, po = out[-1]
            out[-1] = (pa, max(pb, b), po or o) if b >= pb else (pa, pb, po)
        else:
            out.append((a, b, o))
    return out


def _intersect(x: list[tuple[int, int, bool]], y: list[tuple[int, int, bool]]) -> list[tuple[int, int, bool]]:
    """Intersection of two sorted lists of disjoint intervals; ``open`` kept from the side that ends it."""
    out, i, j = [], 0, 0
    while i < len(x) and j < len(y):
        a, b = max(x[i][0], y[j][0]), min(x[i][1], y[j][1])
        if a < b:
            out.append((a, b, (x[i][2] and x[i][1] == b) or (y[j][2] and y[j][1] == b)))
        if x[i][1] < y[j][1]:
            i += 1
        else:
            j += 1
    return out


def all_silent(silences: Mapping[int, Sequence[tuple[int, int, bool]]], start_ns: int, end_ns: int,
               gap_ms: float = GAP_MS) -> AllSilent:  # fmt: skip
    """Longest interval overlapping [start_ns, end_ns] in which no flow received anything.

    ``silences`` maps each flow to its silences (t_before, t_after, open): its gap rows (open
    False) and, if it never received again, (start of its trailing zero-goodput interval run, last
    sample, True).  Definition: the longest interval of the intersection over flows of their
    silences that overlaps the window.  Its ends are reads of some flow, so it is exact when no
    open silence ends it; an all-silent stretch longer than ``gap_ms`` is a listed silence of
    every flow, so none is missed.  Found one shorter than ``gap_ms``, or none: an unlisted
    all-silent stretch of up to ``gap_ms`` may exist — bound [found or 0, gap_ms].  Ended by an
    open silence: lower bound only."""
    if not silences:
        return AllSilent(None, None, None, None, None, "no flow")
    common: list[tuple[int, int, bool]] | None = None
    for iv in silences.values():
        m = _merge([(int(a), int(b), bool(o)) for a, b, o in iv])
        common = m if common is None else _intersect(common, m)
    hit = [(a, b, o) for a, b, o in (common or []) if a <= end_ns and b >= start_ns]
    if not hit:
        why = f"no silence of all flows overlaps the window beyond the {gap_ms:g} ms gap threshold"
        return AllSilent(None, 0.0, gap_ms, None, None, why)
    a, b, o = max(hit, key=lambda r: r[1] - r[0])
    ms = (b - a) / 1e6
    if o:
        return AllSilent(None, ms, None, a, None, "no flow received again before the trace end: a lower bound")
    if ms < gap_ms:
        why = f"all flows silent {ms:.1f} ms, below the {gap_ms:g} ms gap threshold: a longer one may be unlisted"
        return AllSilent(None, ms, gap_ms, a, b, why)
    return AllSilent(ms, ms, ms, a, b, None)


@dataclass(frozen=True)
class TcpAggregate:
    """All bulk flows of one run together (see ``aggregate``)."""

    flows: int
    outage: AllSilent  # no flow received anything (exact gap rows)
    grid: GridSilence  # the same on the 10 ms grid of the summed goodput
    flow_outage_max_lower_ms: float | None  # bound of the longest per-flow outage
    flow_outage_max_upper_ms: float | None
    flow_outage_median_lower_ms: float | None  # bound of the median per-flow outage
    flow_outage_median_upper_ms: float | None
    rto_total: int  # RTO expiries seen, all flows (a lower bound, see rto_expiries)
    flows_with_rto: int
    loss_entries_unexplained: int
    worst_recovery_ms: float | None
    worst_recovery_lower_ms: float | None
    worst_recovery_reason: str | None
    relation_to_packet_gap: PacketGapRelation  # the all-flows outage against the UDP downtime
    relation_longest_flow: PacketGapRelation  # the longest exact per-flow outage against it
    tcpext: dict[str, int | None]  # namespace-wide TcpExt deltas over the run, as given
    rto_check: str | None  # expiries seen in TCP_INFO (whole traces) against TCPTimeouts


def _bound(lows: list[float | None], highs: list[float | None], f) -> tuple[float | None, float | None]:
    """f (max or median) applied to each side of per-flow bounds; a None side makes that side None."""
    lo = None if not lows or any(v is None for v in lows) else float(f(lows))
    hi = None if not highs or any(v is None for v in highs) else float(f(highs))
    return lo, hi


def _overlaps(intervals: Sequence[Sequence[int]], a: int | None, b: int | None) -> bool:
    return a is not None and b is not None and any(x[0] < b and x[1] > a for x in intervals)


def _open_tail(t: np.ndarray, b: np.ndarray) -> tuple[int, int, bool] | None:
    """(start of the trailing zero-goodput run, last sample, True) when a flow ends silent."""
    if t.size < 2 or b[-1] != b[-2]:
        return None
    k = int(np.flatnonzero(b == b[-1])[0])
    return (int(t[k]), int(t[-1]), True)


def aggregate(
    figures: Sequence[TcpFlowFigures],
    recv_rows: np.ndarray,
    gap_rows: np.ndarray,
    start_ns: int,
    end_ns: int,
    udp_downtime_s: float | None,
    tcpext: Mapping[str, int | None] | None = None,
    sample_ms: float = SAMPLE_MS,
    gap_ms: float = GAP_MS,
) -> TcpAggregate:
    """The bulk flows together: ``figures`` (one per flow, from ``flow_figures``), the receiver
    trace rows (t_ns, flow, bytes) and the gap rows (flow, t_before_ns, t_after_ns, bytes_before)
    of all of them.

    - ``outage``: ``all_silent`` of the flows' gap rows and silent tails (exact); ``grid``:
      ``grid_silence`` of the summed goodput when all flows are sampled at the same instants.
      Since an all-silent interval lies inside one silence of every flow, it never exceeds the
      shortest per-flow outage.
    - per-flow outages: max and median, as bounds (lower from the flows' lower bounds, upper from
      their upper bounds, None if one flow's is open).
    - rto_total / flows_with_rto / loss_entries_unexplained: sums over the flows' ``rto``.
    - worst recovery: the largest recovery_ms; when a flow did not recover or could not be judged,
      only a lower bound (the largest known or lower value) with the reason.
    - ``relation_to_packet_gap``: ``packet_gap_relation`` of the all-flows outage (gap + RTO if an
      expiry of any flow fell in it); ``relation_longest_flow``: the same for the longest exact
      per-flow outage and that flow's expiries.
    - ``rto_check``: Linux counts every RTO expiry in TcpExt TCPTimeouts (namespace-wide, rr sockets
      included), so the bulk flows' expiries over their whole traces should not exceed it."""
    flows = [f.flow for f in figures]
    rr = np.asarray(recv_rows, dtype=np.int64).reshape(-1, 3)
    g = _gap_rows(gap_rows)
    silences: dict[int, list[tuple[int, int, bool]]] = {}
    grids: list[tuple[np.ndarray, np.ndarray]] = []
    for fl in flows:
        t, b = receiver_flow(rr, fl)
        grids.append((t, b))
        rows = g[g[:, 0] == fl]
        iv = [(int(r[1]), int(r[2]), False) for r in rows]
        tail = _open_tail(t, b)
        if tail is not None:
            iv.append(tail)
        silences[fl] = iv
    outage = all_silent(silences, start_ns, end_ns, gap_ms)
    grid = _summed_grid(grids, start_ns, end_ns, sample_ms)
    lows = [f.outage.lower_ms for f in figures]
    highs = [f.outage.upper_ms for f in figures]
    mx = _bound(lows, highs, max)
    md = _bound(lows, highs, np.median)
    rec_known = [f.recovery.recovery_ms for f in figures if f.recovery.recovery_ms is not None]
    rec_lower = [
        f.recovery.lower_ms for f in figures if f.recovery.recovery_ms is None and f.recovery.lower_ms is not None
    ]
    unjudged = [f.flow for f in figures if f.recovery.recovery_ms is None]
    worst = max(rec_known) if rec_known and not unjudged else None
    worst_lo = max(rec_known + rec_lower) if rec_known or rec_lower else None
    worst_why = (
        f"flow(s) {unjudged} without a recovery time: the worst is at least the largest known" if unjudged else None
    )
    all_exp = [x for f in figures for x in f.rto.expiry_intervals_ns]
    rel_all = packet_gap_relation(outage.outage_ms, udp_downtime_s,
                                  _overlaps(all_exp, outage.t_before_ns, outage.t_after_ns), sample_ms)  # fmt: skip
    exact = [f for f in figures if f.outage.outage_ms is not None]
    if exact:
        lf = max(exact, key=lambda f: f.outage.outage_ms or 0.0)
        rto_in = _overlaps(lf.rto.expiry_intervals_ns, lf.outage.t_before_ns, lf.outage.t_after_ns)
        rel_flow = packet_gap_relation(lf.outage.outage_ms, udp_downtime_s, rto_in, sample_ms)
    else:
        rel_flow = packet_gap_relation(None, udp_downtime_s, False, sample_ms)
    ext = {k: _tcpext(tcpext, k) for k in ("TCPTimeouts", "TCPSpuriousRTOs", "TCPLossProbes", "TCPDSACKRecv")}
    seen = sum(f.rto.count_whole_trace for f in figures)
    if ext["TCPTimeouts"] is None:
        check = "no TcpExt TCPTimeouts delta"
    elif seen > ext["TCPTimeouts"]:
        check = f"inconsistent: {seen} expiries seen in TCP_INFO but TCPTimeouts grew by {ext['TCPTimeouts']}"
    elif seen < ext["TCPTimeouts"]:
        check = (f"TCPTimeouts grew by {ext['TCPTimeouts']}, {ext['TCPTimeouts'] - seen} more than the bulk flows' "
                 f"{seen} seen: rr sockets' expiries, or expiries hidden between samples")  # fmt: skip
    else:
        check = None
    return TcpAggregate(
        flows=len(flows),
        outage=outage,
        grid=grid,
        flow_outage_max_lower_ms=mx[0],
        flow_outage_max_upper_ms=mx[1],
        flow_outage_median_lower_ms=md[0],
        flow_outage_median_upper_ms=md[1],
        rto_total=sum(f.rto.count for f in figures),
        flows_with_rto=sum(1 for f in figures if f.rto.count > 0),
        loss_entries_unexplained=sum(f.rto.loss_entries_unexplained for f in figures),
        worst_recovery_ms=worst,
        worst_recovery_lower_ms=worst_lo,
        worst_recovery_reason=worst_why,
        relation_to_packet_gap=rel_all,
        relation_longest_flow=rel_flow,
        tcpext=ext,
        rto_check=check,
    )


def _summed_grid(grids: list[tuple[np.ndarray, np.ndarray]], start_ns: int, end_ns: int,
                 sample_ms: float) -> GridSilence:  # fmt: skip
    """``grid_silence`` of the flows' summed goodput; a reason when they are not on one grid."""
    if not grids:
        return GridSilence(None, None, None, None, None, False, "no flow")
    t0 = grids[0][0]
    if any(t.shape != t0.shape or (t != t0).any() for t, _ in grids):
        return GridSilence(
            None, None, None, None, None, False, "flows not sampled at the same instants: no summed grid"
        )
    s = goodput_series(t0, sum(b for _, b in grids), sample_ms)
    if s.reason is not None:
        return GridSilence(None, None, None, None, None, False, s.reason)
    return grid_silence(s.t0_ns, s.t1_ns, s.bps, start_ns, end_ns)


def receiver_flow(rows: np.ndarray, flow: int) -> tuple[np.ndarray, np.ndarray]:
    """One flow's (t_ns, bytes) from receiver-trace rows (t_ns, flow, bytes), in time order."""
    r = np.asarray(rows, dtype=np.int64).reshape(-1, 3)
    r = r[r[:, 1] == flow]
    r = r[np.argsort(r[:, 0], kind="stable")]
    return r[:, 0].copy(), r[:, 2].copy()


# ----------------------------------------------------------------------------- request/response


@dataclass(frozen=True)
class RrPhase:
    """Request/response transactions of one phase (see ``rr_spike``); latencies in ms."""

    scheduled: int  # transactions in the phase (sent ones by send time, the others by schedule)
    answered: int
    unanswered: int  # sent, never answered
    not_sent: int  # never sent: the previous transaction of the flow was still outstanding (busy)
    p50_ms: float | None  # of the answered
    p99_ms: float | None  # of the answered
    max_ms: float | None  # exact only when every sent transaction was answered
    max_lower_ms: float | None  # the max is at least this (= max_ms when exact)


@dataclass(frozen=True)
class RrSpike:
    """rr latency before, during (+ margin) and after the migration window."""

    margin_s: float
    trace_end_ns: int | None
    before: RrPhase
    during: RrPhase
    after: RrPhase


def _rr_phase(send: np.ndarray, done: np.ndarray, sel: np.ndarray, trace_end_ns: int | None) -> RrPhase:
    sent = sel & (send >= 0)
    ans = sent & (done >= 0)
    una = sent & (done < 0)
    lat = (done[ans] - send[ans]) / 1e6
    p50 = float(np.median(lat)) if lat.size else None
    p99 = float(np.percentile(lat, 99)) if lat.size else None
    mx = float(lat.max()) if lat.size else None
    lower = mx
    if una.any():
        waits = [(trace_end_ns - int(s)) / 1e6 for s in send[una]] if trace_end_ns is not None else []
        lower = max([v for v in [mx, *waits] if v is not None], default=None)
        mx = None
    return RrPhase(int(sel.sum()), int(ans.sum()), int(una.sum()), int((sel & (send < 0)).sum()), p50, p99, mx, lower)


def rr_spike(
    t_sched_ns: np.ndarray,
    t_send_ns: np.ndarray,
    t_done_ns: np.ndarray,
    start_ns: int,
    end_ns: int,
    trace_end_ns: int | None = None,
    margin_s: float = RR_MARGIN_S,
) -> RrSpike:
    """Latency of the request/response transactions around the migration.

    Definition: latency = t_done − t_send of an answered transaction (ms).  A transaction belongs
    to a phase by when it was in flight, from its send time to its answer (a transaction never
    sent, t_send = −1, at its scheduled time; one never answered, until the end): before = over
    before start_ns; after = sent after end_ns + ``margin_s``; during = the rest, every one in
    flight at some time in [start_ns, end_ns + margin] (a request sent just before the window and
    caught by the outage is the migration's, not the baseline's).  Per phase: p50
    and p99 (numpy linear interpolation) of the answered; count answered, unanswered (sent,
    t_done = −1) and not sent (busy: the flow's previous transaction was outstanding).  An
    unanswered transaction's latency is not 0: it counts as unanswered, and the phase's max is
    then only a lower bound, max_lower_ms = max(answered max, trace end − t_send of each
    unanswered), max_ms None.  ``trace_end_ns`` defaults to the latest time in the trace (an
    underestimate of when the recording stopped, so the bound stays a lower one)."""
    sched = np.asarray(t_sched_ns, dtype=np.int64).ravel()
    send = np.asarray(t_send_ns, dtype=np.int64).ravel()
    done = np.asarray(t_done_ns, dtype=np.int64).ravel()
    if not (sched.size == send.size == done.size):
        raise ValueError(f"rr trace: columns differ in length ({sched.size}, {send.size}, {done.size})")
    if ((done >= 0) & (send < 0)).any():
        raise ValueError("rr trace: a transaction answered but never sent (t_done set, t_send -1)")
    if ((done >= 0) & (done < send)).any():
        raise ValueError("rr trace: a transaction answered before it was sent (t_done < t_send)")
    if trace_end_ns is None:
        every = np.concatenate([sched, send, done])
        every = every[every >= 0]
        trace_end_ns = int(every.max()) if every.size else None
    when = np.where(send >= 0, send, sched)
    over = np.where(send < 0, sched, np.where(done >= 0, done, np.iinfo(np.int64).max))
    hi = end_ns + int(margin_s * 1e9)
    before, after = over < start_ns, when > hi
    during = ~before & ~after
    return RrSpike(
        margin_s,
        trace_end_ns,
        _rr_phase(send, done, before, trace_end_ns),
        _rr_phase(send, done, during, trace_end_ns),
        _rr_phase(send, done, after, trace_end_ns),
    )
