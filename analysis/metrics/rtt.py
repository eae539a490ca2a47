"""RTT probes C -> D before, during and after the migration."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class RttStats:
    """RTT of one phase: median and 99th percentile of the answered probes, probes sent and lost."""

    median_ms: float | None
    p99_ms: float | None
    sent: int
    lost: int


@dataclass(frozen=True)
class RttPhases:
    """RTT before, during and after the migration window."""

    before: RttStats
    during: RttStats
    after: RttStats


def rtt_stats(rtt_ns: np.ndarray) -> RttStats:
    """Median and p99 (numpy's linear-interpolation percentile) of the finite RTTs in ms; NaN = lost."""
    r = np.asarray(rtt_ns, dtype=np.float64)
    ok = r[np.isfinite(r)] / 1e6
    if ok.size == 0:
        return RttStats(None, None, int(r.size), int(r.size))
    return RttStats(float(np.median(ok)), float(np.percentile(ok, 99)), int(r.size), int(r.size - ok.size))


def rtt_jitter_ms(rtt_ns: np.ndarray) -> float | None:
    """RTT jitter: the mean absolute difference between the RTTs of consecutive probes that were
    both answered (NaN = lost; a pair with a lost probe is skipped), in ms: the IP packet delay
    variation of RFC 3393 between successive probes, taken on the round trip, unsmoothed (RFC
    3550's interarrival jitter is its exponentially smoothed one-way form).  None with no such
    pair."""
    r = np.asarray(rtt_ns, dtype=np.float64)
    d = np.abs(np.diff(r))
    d = d[np.isfinite(d)]
    return float(d.mean() / 1e6) if d.size else None


def rtt_phases(send_ns: np.ndarray, rtt_ns: np.ndarray, start_ns: int, end_ns: int) -> RttPhases:
    """RTT statistics per phase, by probe send time.

    Definition: before = probes sent in [trace start, start_ns); during = [start_ns, end_ns];
    after = (end_ns, trace end].  Per phase: median and p99 RTT in ms over the probes that were
    answered (numpy linear-interpolation percentiles), sent = probes sent in it, lost = probes irtt
    marks lost (any of true, true_down, true_up)."""
    t = np.asarray(send_ns, dtype=np.int64)
    r = np.asarray(rtt_ns, dtype=np.float64)
    before, after = t < start_ns, t > end_ns
    during = ~before & ~after
    return RttPhases(rtt_stats(r[before]), rtt_stats(r[during]), rtt_stats(r[after]))
