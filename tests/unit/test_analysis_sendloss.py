"""analysis.metrics.sendloss on SYNTHETIC per-ms histograms with known answers."""

import numpy as np
import pytest

from analysis.metrics.sendloss import loss_from_raw, lost_per_ms, send_time_loss

MS = 1_000_000
T0_MS = 1_700_000_000_000  # a CLOCK_REALTIME millisecond
PER_MS = 8  # 100 Mbit/s of 1500 B frames, rounded


def _stopcopy_ring():
    """SYNTHETIC stop-and-copy: 10 s at 8 packets/ms; the guest stops at +3000 ms and R2 forwards
    from +3840 ms.  The 8 packets sent in ms 2999 sat in the stopped guest's ring and arrive
    after the outage (so the sequence numbers around the arrival gap are consecutive); everything
    sent in [3000, 3840) is lost."""
    sent = np.full(10_000, PER_MS)
    rx = sent.copy()
    rx[3000:3840] = 0
    return sent, rx


def test_the_outage_loss_that_consecutive_sequence_numbers_hide():
    sent, rx = _stopcopy_ring()
    loss = lost_per_ms(T0_MS, sent, T0_MS, rx)
    # arrival gap: last arrival before = a packet of ms 2998, first after = the ring's ms-2999 packets
    # at +3841 ms; the outage span in send time covers ms 2998..3841
    gap = ((T0_MS + 2998) * MS + 500_000, (T0_MS + 3841) * MS + 100)
    mig = ((T0_MS + 3000) * MS, (T0_MS + 5841) * MS)  # stop .. end + 2 s margin
    r = send_time_loss(loss, mig, gap)
    assert r.outage.lost == r.migration.lost == 840 * PER_MS
    assert r.outage.sent == (3841 - 2998 + 1) * PER_MS
    assert r.outside.lost == 0 and r.outside.sent == 10_000 * PER_MS - r.migration.sent
    assert r.excess_lost == 840 * PER_MS
    assert r.inconsistent_ms == 0 and r.resolution_s == 0.001


def test_reordering_and_baseline_loss():
    """Order of arrival does not matter (counts per send ms); loss outside the span sets the
    baseline that excess_lost removes."""
    sent = np.full(1000, 10)
    rx = sent.copy()
    rx[::10] = 9  # 1 in 100 lost everywhere
    rx[500:510] = 0  # the migration's outage
    loss = lost_per_ms(T0_MS, sent, T0_MS, rx)
    r = send_time_loss(loss, ((T0_MS + 400) * MS, (T0_MS + 599) * MS), None)
    assert r.outage is None
    assert (r.migration.sent, r.migration.lost) == (2000, 100 + 20 - 1)  # ms 500 was already a 9
    assert (r.outside.sent, r.outside.lost) == (8000, 80)
    assert r.outside.loss_ratio == pytest.approx(0.01)
    assert r.excess_lost == pytest.approx(119 - 2000 * 0.01)


def test_histograms_on_different_starts_are_aligned():
    sent = np.array([5, 5, 5, 5])
    rx = np.array([5, 4, 5])  # the sink's first packet was sent in the generator's second ms
    loss = lost_per_ms(T0_MS, sent, T0_MS + 1, rx)
    assert loss.lost.tolist() == [5, 0, 1, 0] and loss.inconsistent_ms == 0


def test_impossible_buckets_are_counted_not_hidden():
    loss = lost_per_ms(T0_MS, np.array([3, 3]), T0_MS - 1, np.array([1, 4, 3, 2]))
    # ms -1 and +2 are outside the generator's span; ms 0 has 4 received of 3 sent
    assert loss.lost.tolist() == [0, 0] and loss.inconsistent_ms == 3


def test_span_boundaries_take_whole_overlapping_buckets():
    loss = lost_per_ms(T0_MS, np.arange(1, 11), T0_MS, np.zeros(10, dtype=int))
    r = send_time_loss(loss, ((T0_MS + 2) * MS + 999_999, (T0_MS + 4) * MS), None)
    assert r.migration.sent == 3 + 4 + 5  # ms 2, 3 and 4 (t1 is the first ns of ms 4)
    r = send_time_loss(loss, ((T0_MS - 50) * MS, (T0_MS + 50) * MS), None)
    assert r.migration.sent == 55 and r.outside.sent == 0 and r.excess_lost is None


def test_loss_from_raw_needs_both_complete_histograms():
    gen = {"sent_hist_start_ms": T0_MS, "sent_hist_ms": [2, 2], "sent_hist_dropped": 0}
    sink = {"tx_hist_start_ms": T0_MS, "tx_hist_ms": [2, 1], "tx_hist_dropped": 0}
    assert loss_from_raw(gen, sink).lost.tolist() == [0, 1]
    assert loss_from_raw(gen, {"hist_ms": [1]}) is None  # iperf3/trafgen/older vrsink
    assert loss_from_raw(None, sink) is None
    assert loss_from_raw(gen, {**sink, "tx_hist_dropped": 4}) is None  # longer than the span
    assert loss_from_raw({**gen, "sent_hist_ms": [2, "x"]}, sink) is None
