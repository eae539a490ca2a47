"""Migration-link first/last byte, duration and volume on SYNTHETIC R1 mig0 counters."""

import numpy as np
import pytest

from analysis.metrics.link import link_activity
from analysis.metrics.window import Spans
from tests.fixtures.analysis.synthetic import MS, T_BASE_NS, sample_times

P = 10 * MS
T0 = T_BASE_NS
SPAN = Spans(T0 + 1_000 * MS, T0 + 5_000 * MS, T0 - 1_000 * MS, T0 + 5_000 * MS)


def _tx(per_interval: dict[int, int], n: int = 800, offset: int = 0):
    """SYNTHETIC tx_bytes: given bytes in given intervals (index k = (t_k, t_k+1]), 0 elsewhere."""
    t = sample_times(T0, T0 + n * P, P)
    per = np.zeros(t.size - 1, dtype=np.int64)
    for k, b in per_interval.items():
        per[k] = b
    return t, np.concatenate([[0], np.cumsum(per)]).astype(np.uint64) + np.uint64(offset)  # wraps mod 2**64


def test_bursts_first_last_byte_volume():
    bursts = {k: 1_250_000 for k in range(102, 150)}  # 1 Gbit/s from +1.02 s
    bursts |= {k: 600_000 for k in range(200, 260)}
    bursts |= {k: 1_250_000 for k in range(330, 341)}  # final burst ends in (3.40, 3.41]
    noise = {50: 1500, 120 + 60: 90, 400: 1999, 700: 100_000}  # ARP noise; a later unrelated flow
    t, tx = _tx(bursts | noise)
    a = link_activity(t, tx, P, SPAN)
    assert a.first_byte_ns == T0 + 1_025 * MS
    assert a.last_byte_ns == T0 + 3_405 * MS
    assert a.duration_s == pytest.approx(2.380, abs=1e-12)
    assert (a.span_start_ns, a.span_end_ns) == (T0 + 1_020 * MS, T0 + 3_410 * MS)
    assert a.volume_bytes == sum(bursts.values()) + 90  # idle-gap noise inside the span is part of it
    assert a.active_intervals == len(bursts)
    assert a.peak_bps == pytest.approx(1e9)
    assert a.resolution_s == pytest.approx(0.010)
    assert a.flags == ()


def test_no_migration_traffic_is_none():
    t, tx = _tx({50: 1500, 300: 1999})
    assert link_activity(t, tx, P, SPAN) is None


def test_wrap_and_missing_samples():
    bursts = {k: 1_000_000 for k in range(150, 250)}
    t, tx = _tx(bursts, offset=2**64 - 50_000_000)
    keep = np.ones(t.size, dtype=bool)
    keep[[180, 181, 182]] = False
    a = link_activity(t[keep], tx[keep], P, SPAN)
    assert a.volume_bytes == 100_000_000
    assert a.duration_s == pytest.approx(0.99, abs=1e-12)
    assert set(a.flags) == {"counter_wrap", "missing_samples"}


def test_a_stream_within_one_interval_is_bounded_not_zero():
    """SYNTHETIC: the whole stream in one 10 ms interval: the duration is not 0 but <= 10 ms."""
    t, tx = _tx({120: 900_000})
    a = link_activity(t, tx, P, SPAN)
    assert a.duration_s is None and a.duration_upper_s == pytest.approx(0.010)
    assert "below_resolution" in a.flags and a.volume_bytes == 900_000
    assert a.first_byte_ns == a.last_byte_ns


def test_the_bound_reaches_summary_and_table_as_a_bound():
    from analysis import qualify as q
    from analysis.present.table import _fig

    qual = q.at_most(0.010, ("below_resolution",))
    assert qual.state == q.CENSORED and qual.lower is None and qual.upper == 0.010
    assert q.short(qual, fmt=".3f") == "<= 0.010 (below_resolution)"
    s = {"duration_s": {"link": None}, "qualifiers": {"duration_s.link": qual.to_dict()}}
    assert _fig(s, "duration_s.link") == "<= 0.010 (below_resolution)"
