"""Counters- and packet-based downtime on SYNTHETIC traces with known stalls."""

import numpy as np
import pytest

from analysis.metrics.downtime import counters_downtime, packets_downtime, stall_threshold_s
from analysis.metrics.window import Spans
from tests.fixtures.analysis.synthetic import MS, T_BASE_NS, arrivals, cumulative, sample_times

P = 10 * MS
T0 = T_BASE_NS
PKT = 120_000  # 100 Mbit/s of 1500 B frames
# the migration window is [3 s, 7 s]; search up to +2 s after its end, clip 2 s before its start
SPAN = Spans(T0 + 3_000 * MS, T0 + 9_000 * MS, T0 + 1_000 * MS, T0 + 9_000 * MS)


def _trace(stalls, interval=PKT, offset=0, first=T0 + 5_000, end=T0 + 12_000 * MS):
    """SYNTHETIC B eth0: arrivals every ``interval`` except inside the stalls, sampled every 10 ms."""
    arr = arrivals(first, end, interval, stalls)
    t = sample_times(T0, T0 + 12_000 * MS, P)
    return t, cumulative(arr, t, offset=offset), arr


def _true_gap_s(arr, stall):
    return (int(arr[arr >= stall[1]][0]) - int(arr[arr <= stall[0]][-1])) / 1e9


def test_170ms_stall_exact_convention():
    stall = (T0 + 6_905 * MS, T0 + 7_075 * MS)  # last packet at +6.904925 s, next at +7.075085 s
    t, c, arr = _trace([stall])
    d = counters_downtime(t, c, P, SPAN, PKT / 1e9)
    assert d.downtime_s == pytest.approx(0.170, abs=1e-12)  # mid(7.070..7.080) − mid(6.900..6.910)
    assert (d.lower_s, d.upper_s, d.resolution_s) == pytest.approx((0.160, 0.180, 0.010), abs=1e-12)
    assert d.t_before_ns == T0 + 6_910 * MS  # last sample showing an increase
    assert d.t_after_ns == T0 + 7_080 * MS  # first sample showing an increase again
    assert d.idle_intervals == 16
    assert d.flags == ()
    assert d.threshold_s == pytest.approx(0.010)
    assert abs(d.downtime_s - _true_gap_s(arr, stall)) <= d.resolution_s


@pytest.mark.parametrize("shift_us", [0, 1_300, 4_999, 5_001, 7_777, 9_990])
def test_any_alignment_is_within_one_period(shift_us):
    stall = (T0 + 5_000 * MS + shift_us * 1000, T0 + 5_170 * MS + shift_us * 1000)
    t, c, arr = _trace([stall])
    d = counters_downtime(t, c, P, SPAN, PKT / 1e9)
    true = _true_gap_s(arr, stall)
    assert abs(d.downtime_s - true) <= 0.010
    assert d.lower_s <= true <= d.upper_s


def test_no_stall_is_absent_not_zero():
    t, c, _ = _trace([])
    d = counters_downtime(t, c, P, SPAN, PKT / 1e9)
    assert d.downtime_s is None and d.lower_s is None and d.extent_s is None  # nothing found is not 0 s
    assert d.flags == ("no_stall",)
    assert d.upper_s == pytest.approx(0.020)  # an outage shorter than threshold + period can go unseen


def test_stall_outside_the_window_is_ignored_and_longest_inside_wins():
    stalls = [(T0 + 500 * MS, T0 + 900 * MS), (T0 + 4_000 * MS, T0 + 4_050 * MS), (T0 + 6_000 * MS, T0 + 6_100 * MS)]
    t, c, arr = _trace(stalls)
    d = counters_downtime(t, c, P, SPAN, PKT / 1e9)
    assert abs(d.downtime_s - _true_gap_s(arr, stalls[2])) <= 0.010
    assert d.t_before_ns < T0 + 6_001 * MS < d.t_after_ns


def test_stall_reaching_before_the_clip_span_is_clipped_and_flagged():
    stall = (T0 + 100 * MS, T0 + 3_205 * MS)  # began long before the migration
    t, c, _ = _trace([stall])
    d = counters_downtime(t, c, P, SPAN, PKT / 1e9)
    assert "clipped_start" in d.flags
    assert d.downtime_s is None  # only a bound is known: never a value
    assert d.extent_s == pytest.approx((3_205 - 1_000) / 1e3, abs=1e-12)  # clip start → mid(3.200..3.210)
    assert d.lower_s == pytest.approx((3_200 - 1_000) / 1e3, abs=1e-12)  # no packet in (clip start, 3.20]
    assert d.upper_s is None


def test_stall_until_end_of_trace_is_open_and_a_lower_bound():
    stall = (T0 + 8_500 * MS, T0 + 20_000 * MS)  # traffic never came back
    t, c, _ = _trace([stall])
    d = counters_downtime(t, c, P, SPAN, PKT / 1e9)
    assert {"open_end", "clipped_end"} <= set(d.flags)
    assert d.downtime_s is None
    assert d.extent_s == pytest.approx(9.0 - 8.495, abs=1e-12)  # last packet +8.499965 s: mid(8.49..8.50)
    assert d.lower_s == pytest.approx(9.0 - 8.50, abs=1e-12)  # idle from 8.50 s to the clip end at least
    assert d.t_after_ns is None and d.upper_s is None


@pytest.mark.parametrize("modulus", [2**32, 2**64])
def test_counter_wrap_gives_the_same_downtime(modulus):
    stall = (T0 + 6_905 * MS, T0 + 7_075 * MS)
    t, c, _ = _trace([stall])
    wrapped = np.array([(int(v) + modulus - 60_000) % modulus for v in c], dtype=np.uint64)
    assert (wrapped[1:] < wrapped[:-1]).sum() == 1  # the counter really wraps, once
    d = counters_downtime(t, wrapped, P, SPAN, PKT / 1e9)
    assert d.downtime_s == pytest.approx(0.170, abs=1e-12)
    assert d.upper_s == pytest.approx(0.180, abs=1e-12)
    assert "counter_wrap" in d.flags


def test_32bit_wrap_just_before_the_stall():
    stall = (T0 + 6_905 * MS, T0 + 7_075 * MS)
    t, c, _ = _trace([stall])
    c32 = (c.astype(np.int64) + (2**32 - int(c[680]) - 5)) % 2**32  # wraps right after +6.80 s
    assert c32[681] < c32[680]
    d = counters_downtime(t, c32.astype(np.uint64), P, SPAN, PKT / 1e9)
    assert d.downtime_s == pytest.approx(0.170, abs=1e-12)


def test_missing_samples_inside_the_stall_do_not_shorten_it():
    stall = (T0 + 6_905 * MS, T0 + 7_075 * MS)
    t, c, _ = _trace([stall])
    keep = np.ones(t.size, dtype=bool)
    keep[[695, 696, 697, 700]] = False  # samples at +6.95, 6.96, 6.97, 7.00 s never written
    d = counters_downtime(t[keep], c[keep], P, SPAN, PKT / 1e9)
    assert d.downtime_s == pytest.approx(0.170, abs=1e-12)
    assert "missing_samples" in d.flags


def test_missing_sample_at_the_stall_edge_widens_the_resolution():
    stall = (T0 + 6_905 * MS, T0 + 7_075 * MS)
    t, c, arr = _trace([stall])
    keep = np.ones(t.size, dtype=bool)
    keep[691] = False  # +6.91 s, the last sample that would have shown an increase
    d = counters_downtime(t[keep], c[keep], P, SPAN, PKT / 1e9)
    assert d.downtime_s == pytest.approx(7.075 - 6.910, abs=1e-12)  # mid(6.90..6.92) = 6.91
    assert d.resolution_s == pytest.approx(0.015)
    assert abs(d.downtime_s - _true_gap_s(arr, stall)) <= d.resolution_s
    assert "missing_samples" in d.flags


def test_missing_samples_during_traffic_invent_no_stall():
    t, c, _ = _trace([])
    keep = np.ones(t.size, dtype=bool)
    keep[400:430] = False  # 300 ms without samples while packets flow
    d = counters_downtime(t[keep], c[keep], P, SPAN, PKT / 1e9)
    assert d.downtime_s is None and "no_stall" in d.flags


def test_counter_reset_is_unknown_not_a_stall():
    t, c, _ = _trace([])
    c = c.copy()
    c[500:] -= c[500] - np.uint64(3)  # interface re-created at +5.0 s: counter restarts near 0
    d = counters_downtime(t, c, P, SPAN, PKT / 1e9)
    assert d.downtime_s is None and "no_stall" in d.flags
    assert "counter_reset" in d.flags


def test_low_rate_needs_the_packet_interval_threshold():
    low = 12 * MS  # 1 Mbit/s of 1500 B frames: idle 10 ms intervals are normal
    t, c, _ = _trace([], interval=low, first=T0 + 3 * MS)
    d = counters_downtime(t, c, P, SPAN, low / 1e9)
    assert d.downtime_s is None
    assert d.threshold_s == pytest.approx(0.036)
    assert set(d.flags) == {"low_rate", "no_stall"}
    naive = counters_downtime(t, c, P, SPAN, None)  # without it, packet spacing looks like a stall
    assert naive.downtime_s > 0


def test_low_rate_real_stall_is_found_within_one_period():
    low = 12 * MS
    stall = (T0 + 6_900 * MS, T0 + 7_070 * MS)
    t, c, arr = _trace([stall], interval=low, first=T0 + 3 * MS)
    d = counters_downtime(t, c, P, SPAN, low / 1e9)
    assert abs(d.downtime_s - _true_gap_s(arr, stall)) <= 0.010
    assert "low_rate" in d.flags


def test_threshold():
    assert stall_threshold_s(0.010, 0.00012) == 0.010
    assert stall_threshold_s(0.010, 0.012) == pytest.approx(0.036)
    assert stall_threshold_s(0.010, None) == 0.010


def test_no_samples_in_the_span_is_none():
    t = sample_times(T0 + 20_000 * MS, T0 + 21_000 * MS, P)
    assert counters_downtime(t, np.arange(t.size), P, SPAN) is None


# -- packets -----------------------------------------------------------------------------
GAPS = np.array(
    [
        [T0 + 1_500 * MS, T0 + 2_100 * MS, 100, 5100],  # longer, but before the migration
        [T0 + 4_000 * MS, T0 + 4_020 * MS, 20_000, 20_166],
        [T0 + 6_904_925_000, T0 + 7_075_085_000, 57_541, 58_959],
        [T0 + 8_000 * MS, T0 + 8_002 * MS, 70_000, 70_016],
    ]
)


def test_packets_longest_gap_overlapping_the_window():
    d = packets_downtime(GAPS, SPAN)
    assert d.downtime_s == pytest.approx(0.17016, abs=1e-12)
    assert d.lower_s == d.upper_s == d.downtime_s  # kernel receive stamps: exact
    assert d.lost_in_gap == 58_959 - 57_541 - 1
    assert (d.seq_before, d.seq_after) == (57_541, 58_959)
    assert d.gaps_in_window == 3
    assert d.flags == ()


def test_packets_no_gap_is_absent_not_zero():
    d = packets_downtime(GAPS[:1], SPAN, gap_threshold_ns=3_600_000)
    assert (d.downtime_s, d.lower_s, d.lost_in_gap, d.flags) == (None, None, None, ("no_gap",))
    assert d.upper_s == d.threshold_s == 0.0036  # no inter-arrival gap in the window was longer
    assert packets_downtime(np.zeros((0, 4)), SPAN).downtime_s is None


def test_packets_gap_clipped_at_the_clip_span():
    gaps = np.array([[T0 + 500 * MS, T0 + 3_100 * MS, 1, 2]])
    d = packets_downtime(gaps, SPAN)
    assert d.downtime_s is None and d.upper_s is None  # a bound, not a value
    assert d.lower_s == pytest.approx(2.1, abs=1e-12)
    assert d.flags == ("clipped_start",)


def test_packets_traffic_that_never_came_back():
    d = packets_downtime(GAPS[:2], SPAN, last_ns=T0 + 6_500 * MS, traffic_end_ns=T0 + 8_000 * MS, gap_threshold_ns=MS)
    assert d.downtime_s is None
    assert d.lower_s == pytest.approx(1.5)
    assert d.flags == ("open_end",)
    assert d.lost_in_gap is None


def test_stray_broadcasts_do_not_split_a_stall():
    stall = (T0 + 6_905 * MS, T0 + 7_075 * MS)
    t, c, _ = _trace([stall])
    c = c.copy()
    c[700:] += np.uint64(1)  # a RARP reaches B in (6.99, 7.00]
    c[720:] += np.uint64(2)  # two more in (7.19, 7.20], while traffic flows
    d = counters_downtime(t, c, P, SPAN, PKT / 1e9)
    assert d.downtime_s == pytest.approx(0.170, abs=1e-12)
    assert d.idle_intervals == 16


def test_stray_tolerance_is_off_at_low_rate():
    low = 1 * MS  # 10 packets per interval: every packet counts
    stall = (T0 + 6_905 * MS, T0 + 7_075 * MS)
    t, c, _ = _trace([stall], interval=low, first=T0 + 500_000)
    c = c.copy()
    c[700:] += np.uint64(1)
    d = counters_downtime(t, c, P, SPAN, low / 1e9)
    assert d.downtime_s == pytest.approx(0.090, abs=1e-12)  # split: 6.905 .. 6.995


# -- the sink's gap list was full (vrsink gaps_dropped) -----------------------------------
def test_gaps_dropped_before_the_window_make_a_found_gap_a_lower_bound():
    # the list filled up at +4.02 s (last recorded gap); the stall at +6.9 s was never recorded
    d = packets_downtime(GAPS[:2], SPAN, gaps_dropped=5)
    assert d.downtime_s is None and d.lower_s == pytest.approx(0.020)
    assert d.flags == ("gaps_dropped",)


def test_gaps_dropped_with_no_gap_recorded_in_the_window_is_absent_for_that_reason():
    d = packets_downtime(GAPS[:1], SPAN, gaps_dropped=1)
    assert (d.downtime_s, d.lower_s, d.flags) == (None, None, ("gaps_dropped",))


def test_gaps_dropped_after_the_window_change_nothing():
    later = np.vstack([GAPS, [[T0 + 9_500 * MS, T0 + 9_502 * MS, 90_000, 90_016]]])
    d = packets_downtime(later, SPAN, gaps_dropped=7)  # the list was full only after +9.5 s
    assert d.downtime_s == pytest.approx(0.17016, abs=1e-12) and d.flags == ()


def test_without_the_sink_threshold_a_silent_tail_is_unjudged_not_an_outage():
    """gap_threshold_ns missing: the sink silent 0.5 ms before the generator stopped is not read
    as traffic that never came back (a 0 threshold did), and the result says why it is absent."""
    last = T0 + 5_000 * MS
    d = packets_downtime(GAPS[:0], SPAN, last_ns=last, traffic_end_ns=last + MS // 2, gap_threshold_ns=None)
    assert (d.downtime_s, d.lower_s, d.threshold_s) == (None, None, None)
    assert d.flags == ("no_gap", "no_gap_threshold")


def test_without_the_sink_threshold_a_found_gap_is_a_lower_bound():
    last = T0 + 8_000 * MS
    d = packets_downtime(GAPS, SPAN, last_ns=last, traffic_end_ns=last + MS, gap_threshold_ns=None)
    assert d.downtime_s is None and d.lower_s is not None and "no_gap_threshold" in d.flags


def test_a_sink_record_without_gaps_dropped_makes_a_found_gap_a_bound():
    """gaps_dropped missing (None): whether the sink's list was full is unknown, so a gap found
    before the span's end is a lower bound; read as 0 it was exact."""
    d = packets_downtime(GAPS[:2], SPAN, gaps_dropped=None)
    assert d.downtime_s is None and d.lower_s is not None and d.flags == ("gaps_dropped_unknown",)
    assert packets_downtime(GAPS[:2], SPAN, gaps_dropped=0).downtime_s is not None
