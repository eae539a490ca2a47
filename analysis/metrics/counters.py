"""Cumulative interface counters -> per-interval increases (wrap-corrected) and rates.

Sample k is read at ``t_ns[k]``; interval k is (t_ns[k], t_ns[k+1]] and its increase is
``value[k+1] - value[k]``.  Conventions used by every counters-based metric:

* **Wrap**: a decrease is a wrap of a 32-bit counter when every value of the series is below 2**32,
  of a 64-bit counter otherwise; the increase is ``value[k+1] - value[k] + modulus``.  A "wrap"
  that would imply an increase above ``modulus / 2`` is a counter reset: that interval is unknown
  (NaN).
* **Irregular interval** (missing samples): ``t_ns[k+1] - t_ns[k] > 1.5 * period``.  Its increase
  is still exact (both ends are real reads), but events inside it are dated more coarsely.
* **Dating**: an event detected in interval k is dated at its midpoint (t_ns[k] + t_ns[k+1]) / 2,
  which is within half an interval of the truth.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

IRREGULAR_FACTOR = 1.5
FCS_BYTES = 4  # Linux interface byte counters exclude the 4 B FCS; vrgen's frame_bytes include it


@dataclass(frozen=True, eq=False)
class Intervals:
    """Per-interval view of one counter: bounds, increase (NaN = unknown) and irregularity."""

    t0_ns: np.ndarray
    t1_ns: np.ndarray
    delta: np.ndarray
    irregular: np.ndarray
    wraps: int
    resets: int

    @property
    def mid_ns(self) -> np.ndarray:
        """Interval midpoints (int64 ns, rounded down): the date given to anything detected in an interval."""
        return self.t0_ns + (self.t1_ns - self.t0_ns) // 2

    @property
    def dt_ns(self) -> np.ndarray:
        """Interval lengths in ns."""
        return self.t1_ns - self.t0_ns


def counter_deltas(values: np.ndarray) -> tuple[np.ndarray, int, int]:
    """Wrap-corrected increases of a cumulative counter (float64, NaN where the counter was reset).

    Returns (deltas, number of wraps, number of resets); see the module docstring for the rule."""
    v = np.asarray(values).astype(np.uint64)
    if v.size < 2:
        return np.zeros(0, dtype=np.float64), 0, 0
    d = np.diff(v)  # uint64 arithmetic wraps modulo 2**64
    back = v[1:] < v[:-1]
    modulus = 2**32 if int(v.max()) < 2**32 else 2**64
    if modulus == 2**32:
        d = d & np.uint64(2**32 - 1)
    reset = back & (d > np.uint64(modulus // 2))
    out = d.astype(np.float64)
    out[reset] = np.nan
    return out, int(back.sum() - reset.sum()), int(reset.sum())


def intervals(t_ns: np.ndarray, values: np.ndarray, period_ns: int) -> Intervals:
    """The sampling intervals of one counter series (see module docstring)."""
    t = np.asarray(t_ns, dtype=np.int64)
    delta, wraps, resets = counter_deltas(values)
    t0, t1 = t[:-1], t[1:]
    irregular = (t1 - t0) > IRREGULAR_FACTOR * period_ns
    return Intervals(t0, t1, delta, irregular, wraps, resets)


def rate_series(
    t_ns: np.ndarray, byte_values: np.ndarray, packet_values: np.ndarray | None = None, extra_bytes_per_packet: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Per-interval bit rate: (interval midpoints in int64 ns, bit/s).

    bit/s = (Δbytes + extra_bytes_per_packet · Δpackets) · 8 / Δt; pass ``FCS_BYTES`` and the
    packet counter to express a rate in vrgen's frame convention.  Unknown intervals give NaN."""
    t = np.asarray(t_ns, dtype=np.int64)
    if t.size < 2:
        return np.zeros(0), np.zeros(0)
    dbytes, _, _ = counter_deltas(byte_values)
    if packet_values is not None and extra_bytes_per_packet:
        dpk, _, _ = counter_deltas(packet_values)
        dbytes = dbytes + extra_bytes_per_packet * dpk
    dt_s = np.diff(t) / 1e9
    with np.errstate(divide="ignore", invalid="ignore"):
        bps = np.where(dt_s > 0, dbytes * 8 / dt_s, np.nan)
    return t[:-1] + (t[1:] - t[:-1]) // 2, bps


def mean_rate_bps(
    t_ns: np.ndarray,
    byte_values: np.ndarray,
    packet_values: np.ndarray | None,
    t_from_ns: int,
    t_to_ns: int,
    extra_bytes_per_packet: int = 0,
) -> float | None:
    """Mean bit rate between the first sample at/after ``t_from_ns`` and the last at/before ``t_to_ns``.

    Sums the wrap-corrected increases of those samples' intervals; None if fewer than two samples
    fall in the span or an interval in it is unknown."""
    t = np.asarray(t_ns, dtype=np.int64)
    inside = np.flatnonzero((t >= t_from_ns) & (t <= t_to_ns))
    if inside.size < 2:
        return None
    i0, i1 = int(inside[0]), int(inside[-1])
    total = float(counter_deltas(byte_values)[0][i0:i1].sum())
    if packet_values is not None and extra_bytes_per_packet:
        total += extra_bytes_per_packet * float(counter_deltas(packet_values)[0][i0:i1].sum())
    if not np.isfinite(total):
        return None
    return total * 8 / ((t[i1] - t[i0]) / 1e9)


@dataclass(frozen=True)
class SamplerHealth:
    """How well the sampler kept its schedule."""

    period_s: float
    samples: int
    irregular_intervals: int
    late_p50_ms: float | None
    late_p99_ms: float | None
    late_max_ms: float | None
    missed_rounds: int | None = None
    read_errors: int | None = None


def _tail_int(tail: Mapping[str, float] | None, key: str) -> int | None:
    v = (tail or {}).get(key)
    return int(v) if isinstance(v, int | float) else None


def sampler_health(
    t_ns: np.ndarray, late_ns: np.ndarray, period_ns: int, tail: Mapping[str, float] | None = None
) -> SamplerHealth:
    """Lateness percentiles (ms, over all rows' ``late_ns``) and irregular intervals of one series
    ``t_ns``; missed rounds and read errors from the sampler's closing line ``tail`` (None when
    the sampler did not write it: unknown, not 0)."""
    late = np.asarray(late_ns, dtype=np.float64) / 1e6
    t = np.asarray(t_ns, dtype=np.int64)
    irregular = int(np.count_nonzero(np.diff(t) > IRREGULAR_FACTOR * period_ns)) if t.size > 1 else 0
    missed, errors = _tail_int(tail, "missed"), _tail_int(tail, "read_errors")
    if late.size == 0:
        return SamplerHealth(period_ns / 1e9, int(t.size), irregular, None, None, None, missed, errors)
    return SamplerHealth(
        period_s=period_ns / 1e9,
        samples=int(t.size),
        irregular_intervals=irregular,
        late_p50_ms=float(np.percentile(late, 50)),
        late_p99_ms=float(np.percentile(late, 99)),
        late_max_ms=float(late.max()),
        missed_rounds=missed,
        read_errors=errors,
    )
