"""Migration window, QEMU/orchestrator figures, RTT phases and cross-traffic on SYNTHETIC records."""

import numpy as np
import pytest

from analysis.hypervisors.qemu import hypervisor_figures
from analysis.load import IfSeries
from analysis.metrics.cross import cross_traffic
from analysis.metrics.rtt import rtt_phases, rtt_stats
from analysis.metrics.window import migration_window, spans

MS = 1_000_000
T0 = 1_700_000_000_000_000_000


def _ev(t_ms, status, side="src"):
    return {"t_ns": T0 + t_ms * MS, "side": side, "event": "MIGRATION", "data": {"status": status}}


def _sample(t_ms, reply, side="src"):
    return {"t_ns": T0 + t_ms * MS, "side": side, "reply": reply}


COMPLETED = {
    "status": "completed",
    "total-time": 3999,
    "downtime": 45,
    "setup-time": 3,
    "ram": {"transferred": 140_000_000, "total": 268_566_528},
}


def test_precopy_window_from_migrate_to_completed_event():
    actions = [
        {"t_ns": T0 + 3000 * MS, "action": "migrate", "side": "src"},
        {"t_ns": T0 + 11000 * MS, "action": "traffic-stop"},
    ]
    events = [_ev(3001, "setup"), _ev(7002, "completed", "dst"), _ev(7001, "completed")]
    samples = [_sample(7003, COMPLETED)]
    w = migration_window(actions, events, samples, "precopy")
    assert (w.start_ns, w.end_ns, w.end_source, w.end_status) == (T0 + 3000 * MS, T0 + 7001 * MS, "event", "completed")
    assert w.duration_s == pytest.approx(4.001)
    sp = spans(w)
    assert (sp.search_lo_ns, sp.search_hi_ns, sp.clip_lo_ns) == (T0 + 3000 * MS, T0 + 9001 * MS, T0 + 1000 * MS)


def test_search_span_stops_at_traffic_stop():
    actions = [{"t_ns": T0, "action": "migrate"}, {"t_ns": T0 + 1500 * MS, "action": "traffic-stop"}]
    w = migration_window(actions, [_ev(1000, "completed")], [], "precopy")
    assert spans(w).search_hi_ns == T0 + 1500 * MS


def test_stopcopy_window_from_stop_to_cont():
    actions = [
        {"t_ns": T0 + 2990 * MS, "action": "stop", "side": "src"},
        {"t_ns": T0 + 3000 * MS, "action": "migrate", "side": "src"},
        {"t_ns": T0 + 5040 * MS, "action": "cont", "side": "dst"},
        {"t_ns": T0 + 5041 * MS, "action": "announce-self", "side": "dst"},
    ]
    w = migration_window(actions, [_ev(5000, "completed")], [], "stopcopy")
    assert (w.start_ns, w.end_ns, w.end_source) == (T0 + 2990 * MS, T0 + 5040 * MS, "cont")
    assert (w.stop_ns, w.completed_ns, w.announce_ns) == (T0 + 2990 * MS, T0 + 5000 * MS, T0 + 5041 * MS)
    hv = hypervisor_figures([_sample(5001, COMPLETED)], w)
    assert hv.stop_to_cont_s == pytest.approx(2.050)
    assert hv.command_to_end_s == pytest.approx(2.000)


def test_end_from_samples_when_no_event_and_failed_status():
    actions = [{"t_ns": T0, "action": "migrate"}]
    samples = [
        _sample(50, {"status": "active"}),
        _sample(100, {"status": "failed"}),
        _sample(150, {"status": "failed"}),
    ]
    w = migration_window(actions, [], samples, "precopy")
    assert (w.end_ns, w.end_status, w.end_source) == (T0 + 100 * MS, "failed", "sample")
    hv = hypervisor_figures(samples, w)
    assert hv.status == "failed" and hv.downtime_s is None and hv.total_time_s is None


def test_never_ended_uses_last_sample_and_no_migrate_means_no_window():
    samples = [_sample(50, {"status": "active"}), _sample(100, {"status": "active"})]
    w = migration_window([{"t_ns": T0, "action": "migrate"}], [], samples, "precopy")
    assert (w.end_ns, w.end_source) == (T0 + 100 * MS, "last-sample")
    assert migration_window([{"t_ns": T0, "action": "boot"}], [], samples, "precopy") is None


def test_hypervisor_figures_from_last_completed_reply_or_meta():
    samples = [
        _sample(100, {"status": "active", "ram": {"transferred": 5}}),
        _sample(200, COMPLETED),
        _sample(201, {"status": "completed"}, side="dst"),
    ]
    hv = hypervisor_figures(samples, None)
    assert (hv.downtime_s, hv.total_time_s, hv.setup_time_s) == (0.045, 3.999, 0.003)
    assert (hv.ram_transferred_bytes, hv.ram_total_bytes, hv.reply_source) == (140_000_000, 268_566_528, "qmp_samples")
    from_meta = hypervisor_figures(samples[:1], None, fallback=COMPLETED)
    assert (from_meta.downtime_s, from_meta.reply_source) == (0.045, "meta")
    assert hypervisor_figures([], None) is None


def test_rtt_phases_by_send_time():
    send = T0 + np.arange(0, 1000, 10) * MS  # 100 probes, one per 10 ms
    rtt = np.full(send.size, 1.0e6)
    rtt[30:60] = 5.0e6
    rtt[[40, 41, 42]] = np.nan  # lost
    rtt[70:] = 2.0e6
    ph = rtt_phases(send, rtt, T0 + 300 * MS, T0 + 590 * MS)
    assert (ph.before.median_ms, ph.before.p99_ms, ph.before.sent, ph.before.lost) == (1.0, 1.0, 30, 0)
    assert (ph.during.median_ms, ph.during.sent, ph.during.lost) == (5.0, 30, 3)
    assert ph.after.sent == 40 and ph.after.lost == 0
    assert ph.after.median_ms == 2.0  # 30 probes at 2 ms, 10 at 1 ms


def test_rtt_p99_and_all_lost():
    s = rtt_stats(np.array([1e6] * 99 + [101e6]))
    assert s.median_ms == 1.0
    assert s.p99_ms == pytest.approx(1.0 + 0.01 * 100)  # linear interpolation between the 99th and 100th value
    gone = rtt_stats(np.array([np.nan, np.nan]))
    assert (gone.median_ms, gone.p99_ms, gone.sent, gone.lost) == (None, None, 2, 2)


def test_cross_traffic_rates_and_loss():
    gen = {"achieved_bps": 100e6, "packets": 10_000, "frame_bytes": 1500, "start_ns": T0, "end_ns": T0 + 2 * 10**9}
    sink = {"packets": 9_000, "lost": 900, "frame_bytes": 1500, "first_ns": T0 + MS, "last_ns": T0 + 1 * 10**9 + MS}
    t = T0 + np.arange(0, 2001, 10) * MS
    pk = (np.arange(t.size) * 45).astype(np.uint64)  # 4500 packets/s
    b = IfSeries("vrt-B", "tapB", t, np.zeros(t.size, np.int64), pk, pk * np.uint64(1496), pk * 0, pk * 0)
    c = cross_traffic(gen, sink, b)
    assert c.offered_bps == 100e6
    assert c.forwarded_bps == pytest.approx(9_000 * 1500 * 8 / 1.0)
    assert c.forwarded_counters_bps == pytest.approx(4500 * 1500 * 8)  # samples +0.01 .. +1.00 s, FCS added back
    # one loss definition: lost = sent − received (also the 100 sent after the sink's last sequence
    # number), ratio = lost / sent; the sink's own sequence-gap count is kept for reference
    assert (c.sent_packets, c.received_packets, c.lost_packets, c.sink_lost_seq) == (10_000, 9_000, 1_000, 900)
    assert c.loss_ratio == pytest.approx(0.1)
    assert cross_traffic(None, None, None) is None


def test_send_errors_are_not_router_loss():
    """SYNTHETIC: vrgen skipped 50 sequence numbers on send errors; the sink counts them as lost."""
    gen = {"achieved_bps": 1e6, "packets": 10_000, "send_errors": 50, "frame_bytes": 1500}
    sink = {"packets": 9_000, "lost": 1_050, "first_seq": 0, "last_seq": 10_049, "frame_bytes": 1500}
    c = cross_traffic(gen, sink, None)
    assert (c.lost_packets, c.gen_send_errors, c.sink_lost_seq) == (1_000, 50, 1_050)
    assert c.loss_ratio == pytest.approx(1_000 / 10_000)
    assert c.flags == ()


def test_sink_socket_drops_are_not_router_loss_and_flagged():
    """SYNTHETIC: the sink's socket dropped 30 packets the router had forwarded."""
    gen = {"achieved_bps": 1e6, "packets": 10_000, "send_errors": 0, "frame_bytes": 1500}
    sink = {"packets": 9_900, "lost": 100, "socket_drops": 30, "frame_bytes": 1500}
    c = cross_traffic(gen, sink, None)
    assert (c.lost_packets, c.sink_socket_drops, c.flags) == (70, 30, ("sink_socket_drops",))
    assert c.loss_ratio == pytest.approx(0.007)
    odd = cross_traffic({**gen, "packets": 9_000}, sink, None)  # more received than sent
    assert odd.lost_packets == 0 and "inconsistent_counts" in odd.flags


def test_qemu_total_time_0_is_not_computed_not_zero():
    """SYNTHETIC: QEMU 7.2 answers 'completed' with total-time 0 and downtime 0 before it computes them."""
    early = {**COMPLETED, "total-time": 0, "downtime": 0}
    hv = hypervisor_figures([_sample(200, early)], None)
    assert hv.status == "completed"
    assert (hv.total_time_s, hv.downtime_s) == (None, None)
    assert hv.absent == {"downtime_s": "qemu_not_computed", "total_time_s": "qemu_not_computed"}
    assert hv.ram_transferred_bytes == 140_000_000
    # a later reply with the computed figures wins, even when a 0 reply follows it
    hv = hypervisor_figures([_sample(200, early), _sample(210, COMPLETED), _sample(220, early)], None)
    assert (hv.total_time_s, hv.downtime_s, hv.absent) == (3.999, 0.045, None)
    # meta.json's final reply (read after settling) beats an unsettled sample
    hv = hypervisor_figures([_sample(200, early)], None, fallback=COMPLETED)
    assert (hv.total_time_s, hv.reply_source) == (3.999, "meta")
    # a computed downtime of 0 ms is QEMU's figure (< 1 ms), not absent
    assert hypervisor_figures([_sample(200, {**COMPLETED, "downtime": 0})], None).downtime_s == 0.0


def test_failed_migration_figures_say_why():
    hv = hypervisor_figures([_sample(100, {"status": "failed"})], None)
    assert hv.absent == dict.fromkeys(("downtime_s", "total_time_s", "setup_time_s"), "not_completed")
