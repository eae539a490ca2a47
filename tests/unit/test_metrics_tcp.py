"""TCP outage, recovery, RTO, cwnd and rr figures on SYNTHETIC traces with known answers.

Nothing here was measured: reads, samples and TCP_INFO rows are generated from exact integer-ns
schedules (a bulk flow read every 1 ms at +0.5 ms, sampled every 10 ms) so that every expected
figure can be worked out by hand."""

import json
from dataclasses import asdict

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analysis.metrics.tcp import (
    GoodputSeries,
    aggregate,
    all_silent,
    flow_figures,
    flow_outage,
    goodput_series,
    rr_spike,
    rto_expiries,
    spurious_retransmissions,
    time_to_recover,
)
from tests.fixtures.analysis.synthetic import MS, T_BASE_NS

T0 = T_BASE_NS
END_TRACE = T0 + 6_000 * MS
START, END = T0 + 3_000 * MS, T0 + 3_500 * MS  # the migration window
READ_B = 1_250_000  # bytes per 1 ms read: 10 Gbit/s


def _flow(flow, silences, slow=(), end=END_TRACE, drop_samples=()):
    """SYNTHETIC receiver of one bulk flow: reads every 1 ms at +0.5 ms except strictly inside the
    ``silences`` (s, e); reads in a ``slow`` span (a, b, factor) carry factor × READ_B.  Returns
    the 10 ms samples (t, cumulative bytes) and the gap rows (silences > 20 ms between reads)."""
    t = np.arange(T0 + MS // 2, end, MS, dtype=np.int64)
    keep = np.ones(t.size, dtype=bool)
    for s, e in silences:
        keep &= ~((t > s) & (t < e))
    t = t[keep]
    size = np.full(t.size, READ_B, dtype=np.int64)
    for a, b, f in slow:
        sel = (t >= a) & (t < b)
        size[sel] = (size[sel] * f).astype(np.int64)
    cum = np.cumsum(size)
    ts = np.arange(T0, end + 1, 10 * MS, dtype=np.int64)
    idx = np.searchsorted(t, ts, side="right")
    b = np.where(idx > 0, cum[np.maximum(idx - 1, 0)], 0)
    i = np.flatnonzero(np.diff(t) > 20 * MS)
    gaps = np.array([[flow, t[k], t[k + 1], cum[k]] for k in i], dtype=np.int64).reshape(-1, 4)
    if drop_samples:
        keep_s = np.ones(ts.size, dtype=bool)
        keep_s[list(drop_samples)] = False
        ts, b = ts[keep_s], b[keep_s]
    return ts, b, gaps


def _info(**events):
    """SYNTHETIC sender TCP_INFO every 10 ms at +3 ms: Open, cwnd 100, no retransmission, rto 204 ms;
    ``events`` maps a column to {sample time in ms after T0: value} overrides."""
    t = np.arange(T0 + 3 * MS, END_TRACE, 10 * MS, dtype=np.int64)
    cols = {
        "t_ns": t,
        "ca_state": np.zeros(t.size, dtype=np.int64),
        "cwnd": np.full(t.size, 100, dtype=np.int64),
        "retransmits": np.zeros(t.size, dtype=np.int64),
        "backoff": np.zeros(t.size, dtype=np.int64),
        "rto_us": np.full(t.size, 204_000, dtype=np.int64),
        "dsack_dups": np.zeros(t.size, dtype=np.int64),
    }
    for col, at in events.items():
        for ms, v in at.items():
            cols[col][t == T0 + ms * MS] = v
    return cols


S40 = (T0 + 3_200_500_000, T0 + 3_240_500_000)  # a 40 ms silence in the window, between two reads
S240 = (T0 + 3_200_500_000, T0 + 3_440_500_000)  # 40 ms data-plane gap + a 200 ms RTO


def _rto_flow():
    """SYNTHETIC flow 2: silent 240 ms; the RTO fires at 3.438 s (retransmits 0 -> 1 -> 0, backoff
    likewise, ca_state Loss for 50 ms, cwnd 100 -> 1 doubling back), goodput at 25 % for 50 ms."""
    recv = _flow(2, [S240], slow=[(S240[1], S240[1] + 50 * MS, 0.25)])
    ramp = dict(zip(range(3443, 3523, 10), [1, 2, 4, 8, 16, 32, 64, 100], strict=True))
    info = _info(
        retransmits={3443: 1},
        backoff={3443: 1},
        ca_state={3443: 4, 3453: 4, 3463: 4, 3473: 4, 3483: 4},
        cwnd=ramp,
    )
    return recv, info


def test_synthetic_40ms_silence_without_rto():
    t, b, gaps = _flow(1, [S40])
    info = _info(ca_state={3243: 3, 3253: 3}, cwnd={3243: 50, 3253: 60, 3263: 80})
    f = flow_figures(1, t, b, gaps, info, START, END)
    o = f.outage
    assert o.outage_ms == pytest.approx(40.0) and (o.lower_ms, o.upper_ms) == (40.0, 40.0)
    assert (o.t_before_ns, o.t_after_ns) == S40 and o.reason is None
    # on the grid: reads at 3200.5 and 3240.5 leave (3210, 3240] empty: 3 intervals, [30, 50] ms
    assert (o.grid.intervals, o.grid.lower_ms, o.grid.upper_ms) == (3, 30.0, 50.0)
    assert o.grid.lower_ms <= o.outage_ms <= o.grid.upper_ms
    r = f.recovery
    assert r.baseline_bps == pytest.approx(8e3 * READ_B * 1000 / 1000)  # 10 Gbit/s
    assert r.recovered_ns == T0 + 3_250 * MS and r.recovery_ms == pytest.approx(9.5)  # first grid point after it
    assert f.recovery_from == "outage_end"
    assert f.rto.count == 0 and f.rto.first_after_outage_start_ms is None and f.rto.loss_entries_unexplained == 0
    assert f.cwnd.min_cwnd == 50 and f.cwnd.median_pre == 100.0
    assert f.cwnd.recovery_ms == pytest.approx(3_273 - 3_240.5)
    assert f.cwnd.ca_states == ["Open", "Recovery", "Open"]
    assert f.cwnd.ca_state_ms[1] == pytest.approx(20.0)
    json.dumps(asdict(f))


def test_synthetic_silence_of_gap_plus_rto():
    (t, b, gaps), info = _rto_flow()
    f = flow_figures(2, t, b, gaps, info, START, END)
    assert f.outage.outage_ms == pytest.approx(240.0)
    rto = f.rto
    assert (rto.count, rto.from_retransmits, rto.from_backoff_only) == (1, 1, 0)
    assert rto.expiry_intervals_ns == [[T0 + 3_433 * MS, T0 + 3_443 * MS]]
    assert rto.first_after_outage_start_ms == pytest.approx([232.5, 242.5])  # the outage is "gap + RTO"
    assert rto.min_rto_ms == pytest.approx(204.0) and not rto.rto_below_safe
    assert f.cwnd.min_cwnd == 1 and f.cwnd.ca_states == ["Open", "Loss", "Open"]
    assert f.cwnd.ca_state_ms[1] == pytest.approx(50.0)
    assert f.cwnd.recovery_ms == pytest.approx(3_513 - 3_440.5)
    # windows from 3.45 s: 40 ms at 25 % -> 70 %; from 3.47 s 85 %; from 3.48 s 92.5 % >= 90 %
    assert f.recovery.recovered_ns == T0 + 3_480 * MS and f.recovery.recovery_ms == pytest.approx(39.5)
    assert f.span_hi_ns == END  # recovered before the window end


def test_synthetic_flow_that_never_recovers_has_a_lower_bound():
    t, b, gaps = _flow(3, [S40], slow=[(S40[1], END_TRACE, 0.5)])
    f = flow_figures(3, t, b, gaps, _info(), START, END)
    r = f.recovery
    assert r.recovery_ms is None and r.recovered_ns is None and "not back to 90%" in r.reason
    # the last window that could be evaluated starts at 5.90 s: the flow had not recovered by 5.91 s
    assert r.lower_ms == pytest.approx(5_910 - 3_240.5)
    assert f.span_hi_ns == T0 + 5_993 * MS  # RTOs and cwnd looked at until the last TCP_INFO sample


def test_synthetic_flow_that_never_receives_again_is_an_open_outage():
    t, b, gaps = _flow(4, [(S40[0], END_TRACE + MS)])
    f = flow_figures(4, t, b, gaps, _info(), START, END)
    o = f.outage
    assert o.outage_ms is None and o.upper_ms is None and o.t_after_ns is None
    assert o.lower_ms == pytest.approx(6_000 - 3_210)  # (3.21 s, 6.00 s] empty on the grid
    assert "trace end" in o.reason and o.grid.open_end
    assert f.recovery.recovery_ms is None and "never received again" in f.recovery.reason


def test_synthetic_short_silence_is_a_bound_not_zero():
    t, b, gaps = _flow(5, [(T0 + 3_200_500_000, T0 + 3_215_500_000)])  # 15 ms < the 20 ms threshold
    o = flow_outage(gaps, goodput_series(t, b), START, END)
    assert o.outage_ms is None and (o.lower_ms, o.upper_ms) == (0.0, 20.0) and "at most 20 ms" in o.reason
    # reads at 3200.5 and 3215.5 ms: no 10 ms interval is empty, the grid only bounds it by 2 intervals
    assert (o.grid.intervals, o.grid.lower_ms, o.grid.upper_ms) == (0, 0.0, 20.0)
    f = flow_figures(5, t, b, gaps, _info(), START, END)
    assert f.recovery_from == "window_end" and f.recovery.from_ns == END


def test_synthetic_no_pre_migration_data():
    start, end = T0 + 800 * MS, T0 + 1_300 * MS  # the window opens before the 1 s settle is over
    t, b, gaps = _flow(6, [(T0 + 1_000_500_000, T0 + 1_040_500_000)])
    f = flow_figures(6, t, b, gaps, _info(), start, end)
    assert f.outage.outage_ms == pytest.approx(40.0)
    assert f.recovery.baseline_bps is None and f.recovery.recovery_ms is None
    assert "no pre-migration data" in f.recovery.reason
    assert f.cwnd.median_pre is None and f.cwnd.recovery_ms is None and "pre-migration" in f.cwnd.reason


def test_synthetic_negative_and_holey_grids_are_reasons_not_zero():
    t, b, gaps = _flow(7, [S40])
    bad = b.copy()
    bad[100] = bad[99] - 1
    g = goodput_series(t, bad)
    assert g.bps == [] and "decrease" in g.reason
    th, bh, _ = _flow(7, [S40], drop_samples=range(300, 306))
    g = goodput_series(th, bh)
    assert g.bps == [] and "hole" in g.reason
    f = flow_figures(7, th, bh, gaps, _info(), START, END)
    assert f.outage.outage_ms == pytest.approx(40.0)  # the exact gap rows do not need the grid
    assert f.outage.grid.intervals is None and "hole" in f.outage.grid.reason
    assert f.recovery.recovery_ms is None and "hole" in f.recovery.reason
    g = goodput_series(t, b)
    assert g.reason is None and len(g.bps) == t.size - 1 and min(g.bps) == 0.0


def test_synthetic_hidden_and_backoff_only_expiries():
    # Loss entered at 3.303 s with no counter moving: an expiry ACKed within the interval?
    # at 3.403 s retransmits stays 1 (reset then a new expiry) while backoff shows 1 -> 2
    info = _info(
        ca_state={3303: 4},
        retransmits={3393: 1, 3403: 1},
        backoff={3393: 1, 3403: 2},
        rto_us={3403: 15_000},
    )
    r = rto_expiries(info, START, END, outage_start_ns=T0 + 3_200 * MS)
    assert r.loss_entries_unexplained == 1
    assert (r.count, r.from_retransmits, r.from_backoff_only) == (2, 1, 1)
    assert r.rto_below_safe and r.min_rto_ms == pytest.approx(15.0)
    assert r.count_whole_trace == 2


def test_synthetic_retransmits_that_fall_still_count_the_new_expiry():
    # 0 -> 1 -> 2 (two expiries), then 1: an ACK reset it and one more expiry followed
    r = rto_expiries(_info(retransmits={3303: 1, 3313: 2, 3323: 1}), START, END)
    assert (r.count, r.from_retransmits, r.from_backoff_only) == (3, 3, 0)  # and 1 -> 0 needs none


def test_synthetic_spurious_retransmissions():
    info = _info(dsack_dups=dict.fromkeys(range(3253, 6000, 10), 3))
    s = spurious_retransmissions(info, START, END, {"TCPSpuriousRTOs": 1, "TCPDSACKRecv": 5})
    assert (s.dsack_dups, s.ns_spurious_rtos, s.ns_dsack_recv, s.reason) == (3, 1, 5, None)
    s = spurious_retransmissions(info, T0 - 10 * MS, END)  # before the first sample
    assert s.dsack_dups is None and "cover" in s.reason and s.ns_spurious_rtos is None


def _agg(flows, udp_s=0.040, tcpext=None):
    figs, recv, gaps = [], [], []
    for fl, (t, b, g), info in flows:
        figs.append(flow_figures(fl, t, b, g, info, START, END))
        recv.append(np.column_stack([t, np.full(t.size, fl), b]))
        gaps.append(g)
    return aggregate(figs, np.concatenate(recv), np.concatenate(gaps), START, END, udp_s, tcpext)


def test_synthetic_aggregate_of_a_gap_flow_and_an_rto_flow():
    rto_recv, rto_info = _rto_flow()
    a = _agg([(1, _flow(1, [S40]), _info()), (2, rto_recv, rto_info)], tcpext={"TCPTimeouts": 1})
    assert a.outage.outage_ms == pytest.approx(40.0)  # both silent only during the first 40 ms
    assert (a.outage.t_before_ns, a.outage.t_after_ns) == S40
    assert (a.grid.intervals, a.grid.lower_ms, a.grid.upper_ms) == (3, 30.0, 50.0)
    assert (a.flow_outage_max_lower_ms, a.flow_outage_max_upper_ms) == (240.0, 240.0)
    assert (a.flow_outage_median_lower_ms, a.flow_outage_median_upper_ms) == (140.0, 140.0)
    assert (a.rto_total, a.flows_with_rto) == (1, 1)
    assert a.worst_recovery_ms == pytest.approx(39.5)
    assert a.relation_to_packet_gap.verdict == "≈ data-plane gap"
    assert a.relation_to_packet_gap.difference_ms == pytest.approx(0.0)
    rel = a.relation_longest_flow
    assert rel.verdict == "gap + RTO" and rel.ratio == pytest.approx(6.0) and rel.difference_ms == pytest.approx(200)
    assert a.rto_check is None
    json.dumps(asdict(a))
    a = _agg([(1, _flow(1, [S40]), _info())], udp_s=None, tcpext={"TCPTimeouts": 0})
    assert a.relation_to_packet_gap.verdict is None and "UDP" in a.relation_to_packet_gap.reason


def test_synthetic_aggregate_outage_is_the_overlap_of_staggered_silences():
    late = (T0 + 3_215_500_000, T0 + 3_255_500_000)
    a = _agg([(1, _flow(1, [S40]), _info()), (2, _flow(2, [late]), _info())], udp_s=0.040)
    assert a.outage.outage_ms == pytest.approx(25.0)  # 3.2155 -> 3.2405
    assert (a.outage.t_before_ns, a.outage.t_after_ns) == (late[0], S40[1])
    assert a.relation_to_packet_gap.verdict == "shorter"
    apart = (T0 + 3_250_500_000, T0 + 3_290_500_000)
    a = _agg([(1, _flow(1, [S40]), _info()), (2, _flow(2, [apart]), _info())])
    assert a.outage.outage_ms is None and (a.outage.lower_ms, a.outage.upper_ms) == (0.0, 20.0)
    assert a.grid.intervals == 0 and a.grid.upper_ms == pytest.approx(20.0)  # never both silent a whole interval


def test_synthetic_worst_recovery_is_a_bound_when_a_flow_never_recovers():
    a = _agg([(1, _flow(1, [S40]), _info()), (3, _flow(3, [S40], slow=[(S40[1], END_TRACE, 0.5)]), _info())])
    assert a.worst_recovery_ms is None and a.worst_recovery_lower_ms == pytest.approx(5_910 - 3_240.5)
    assert "[3]" in a.worst_recovery_reason


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.lists(st.tuples(st.integers(0, 2_000), st.integers(21, 400)), min_size=0, max_size=4),
        min_size=1,
        max_size=4,
    )
)
def test_synthetic_aggregate_never_exceeds_any_flows_outage(per_flow):
    """Property on SYNTHETIC gap rows: an interval in which no flow received lies inside one
    silence of every flow, and that silence overlaps the window too, so the all-flows outage is
    at most every flow's longest silence overlapping the window (a flow with no such silence:
    at most the gap threshold).  The staggered case shows it may be far shorter, even absent."""
    base = T0 + 3_000 * MS
    silences, outages = {}, []
    no_grid = GoodputSeries(10.0, [], [], [], "no grid in this test")
    for fl, rows in enumerate(per_flow):
        iv, t = [], base - 500 * MS
        for off, length in rows:  # disjoint silences, each longer than the 20 ms threshold
            t0 = t + off * MS
            iv.append((t0, t0 + length * MS))
            t = t0 + length * MS + MS
        gaps = np.array([[fl, a, b, 0] for a, b in iv], dtype=np.int64).reshape(-1, 4)
        outages.append(flow_outage(gaps, no_grid, START, END))
        silences[fl] = [(a, b, False) for a, b in iv]
    agg = all_silent(silences, START, END)
    smallest = min(o.upper_ms for o in outages)
    assert agg.lower_ms is not None and agg.lower_ms <= smallest
    if agg.upper_ms is not None:
        assert agg.upper_ms <= max(smallest, 20.0)


def test_synthetic_rr_spike_with_unanswered_and_busy():
    sched = np.arange(T0, T0 + 6_000 * MS, 10 * MS, dtype=np.int64)
    send, done = sched.copy(), sched + MS  # 1 ms answers
    cut = (sched > S40[0]) & (sched < S40[1])  # sent into the outage: answered after an RTO
    first = np.flatnonzero(cut)[0]
    done[first] = T0 + 3_440 * MS
    busy = cut.copy()
    busy[first] = False
    send[busy], done[busy] = -1, -1  # not sent while the first one was outstanding
    slow = (sched >= T0 + 3_250 * MS) & (sched < T0 + 3_280 * MS)
    done[slow] = sched[slow] + 30 * MS  # queued behind the retransmission
    lost = np.flatnonzero((sched >= T0 + 3_300 * MS) & (sched < T0 + 3_320 * MS))
    done[lost] = -1  # sent, never answered
    r = rr_spike(sched, send, done, START, END, trace_end_ns=T0 + 6_000 * MS)
    assert r.before.p50_ms == pytest.approx(1.0) and r.before.p99_ms == pytest.approx(1.0)
    assert r.before.unanswered == 0 and r.before.max_ms == pytest.approx(1.0)
    d = r.during
    assert (d.not_sent, d.unanswered) == (int(busy.sum()), 2)
    assert d.answered == int(((sched >= START) & (sched <= END + 1_000 * MS)).sum()) - d.not_sent - 2
    assert d.max_ms is None  # unanswered ones: the max is only a lower bound
    assert d.max_lower_ms == pytest.approx(6_000 - 3_300)  # the first lost one waited until the trace end
    # 146 answered: 142 at 1 ms, 3 at 30 ms, 1 at 230 ms; p99 sits at rank 143.55 of 0..145
    assert d.p50_ms == pytest.approx(1.0) and d.p99_ms == pytest.approx(30.0)
    assert r.after.max_ms == pytest.approx(1.0) and r.after.p50_ms == pytest.approx(1.0)
    json.dumps(asdict(r))
    with pytest.raises(ValueError, match="before it was sent"):
        rr_spike(sched, send, np.where(done >= 0, done - 2 * MS, -1), START, END)


def test_synthetic_rr_request_sent_just_before_the_window_and_caught_by_it_is_during():
    # sent 0.5 ms before the window starts, answered 1.85 s later: the outage's, not the baseline's
    sched = np.arange(T0, T0 + 6_000 * MS, 10 * MS, dtype=np.int64)
    send, done = sched.copy(), sched + MS
    i = int(np.flatnonzero(sched >= START)[0]) - 1
    send[i] = sched[i] = START - MS // 2
    done[i] = send[i] + 1_850 * MS
    r = rr_spike(sched, send, done, START, END, trace_end_ns=END_TRACE)
    assert r.before.max_ms == pytest.approx(1.0)
    assert r.during.max_ms == pytest.approx(1_850.0)


def test_synthetic_time_to_recover_direct():
    t, b, _ = _flow(8, [S40])
    r = time_to_recover(t, b, START, S40[1])
    assert r.recovery_ms == pytest.approx(9.5) and r.resolution_ms == 10.0
    r = time_to_recover(t, b, START, S40[1], window_ms=50.0)
    assert r.recovery_ms == pytest.approx(9.5)


def test_synthetic_two_silences_that_meet_at_a_read_are_two_not_one():
    # one flow silent 28 ms, reads once, silent 52 ms more: the read is data received, so no
    # all-flows silence spans both (a real run once reported 81 ms here for a 52 ms longest gap)
    t0 = T_BASE_NS
    silences = {0: [(t0, t0 + 28 * MS, False), (t0 + 28 * MS, t0 + 80 * MS, False)]}
    out = all_silent(silences, t0, t0 + 100 * MS)
    assert out.outage_ms == 52.0 and out.t_before_ns == t0 + 28 * MS, out
