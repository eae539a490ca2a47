"""Synthetic rows and traces: the end host's figures of a baseline (IPv6/IPv4 ratio with its
bootstrap interval, E against the bare host per role) and the RTT jitter."""

import math

import numpy as np
import pytest

from analysis.baseline.summary import ip_ratio, summarise
from analysis.metrics.rtt import rtt_jitter_ms
from analysis.stats.inference import bootstrap_ratio_interval


def _row(hv, ip, role, fwd, rep, rate=0, status="ok"):
    return {"hv": hv, "nic": "virtio" if hv == "kvm" else "veth", "ip": ip, "frame_bytes": 1516, "routers": 1,
            "load": "none", "role": role, "rate_bps": rate, "phase": "sweep", "rep": rep, "status": status,
            "forwarded_bps": fwd, "forwarded_pps": fwd / (1516 * 8), "offered_bps": fwd, "loss_ratio": 0.0}  # fmt: skip


def test_jitter_is_the_mean_absolute_difference_of_consecutive_answered_probes():
    ms = 1e6
    assert rtt_jitter_ms(np.array([1, 3, 2, 2]) * ms) == pytest.approx((2 + 1 + 0) / 3)
    # a lost probe (NaN) breaks its two pairs: only 1 -> 3 and 5 -> 4 count
    assert rtt_jitter_ms(np.array([1, 3, np.nan, 5, 4]) * ms) == pytest.approx(1.5)
    assert rtt_jitter_ms(np.array([1.0 * ms])) is None
    assert rtt_jitter_ms(np.array([1 * ms, np.nan, 2 * ms])) is None


def test_ratio_interval_contains_the_ratio_of_means_and_needs_two_values_each():
    x, y = [90.0, 95.0, 100.0], [100.0, 101.0, 99.0]
    lo, hi = bootstrap_ratio_interval(x, y)
    assert lo < np.mean(x) / np.mean(y) < hi and lo >= 90 / 101 and hi <= 100 / 99
    assert bootstrap_ratio_interval([1.0], [1.0, 2.0]) is None
    assert bootstrap_ratio_interval([1.0, 2.0], [0.0, 1.0]) is None
    assert bootstrap_ratio_interval([2.0, 2.0], [4.0, 4.0]) == (0.5, 0.5)


def test_ipv6_over_ipv4_per_rate_from_the_repetitions():
    v6 = [_row("kvm", 6, "vm-tx", f, i) for i, f in enumerate((80e6, 82e6, 84e6))]
    v4 = [_row("kvm", 4, "vm-tx", f, i) for i, f in enumerate((100e6, 100e6, 100e6))]
    v4.append(_row("kvm", 4, "vm-tx", 1e6, 9, status="failed"))  # a failed point is no value
    (r,) = ip_ratio(v6, v4)
    assert r["rate_bps"] == 0 and r["forwarded_bps"]["ratio"] == pytest.approx(0.82)
    assert r["forwarded_bps"]["boot95_low"] <= 0.82 <= r["forwarded_bps"]["boot95_high"]


def test_summary_compares_each_role_with_the_bare_host_of_the_same_role():
    rows = []
    for rep in range(3):
        rows += [_row("none", 4, "vm-tx", 400e6, rep), _row("none", 4, "vm-rx", 200e6, rep),
                 _row("kvm", 4, "vm-tx", 100e6, rep), _row("kvm", 4, "vm-rx", 100e6, rep),
                 _row("kvm", 6, "vm-tx", 90e6, rep)]  # fmt: skip
    s = summarise(rows)
    e = {(c["hv"], c["ip"], c["role"]): c["efficiency"]["max_forwarded"] for c in s["configs"]}
    assert e[("kvm", 4, "vm-tx")] == pytest.approx(0.25) and e[("kvm", 4, "vm-rx")] == pytest.approx(0.5)
    assert e[("none", 4, "vm-tx")] == pytest.approx(1.0)
    assert e[("kvm", 6, "vm-tx")] is None  # no bare host over IPv6: absent, not 1 or 0
    ratio = {(c["hv"], c["ip"], c["role"]): c.get("ipv6_over_ipv4") for c in s["configs"]}
    assert ratio[("kvm", 6, "vm-tx")][0]["forwarded_bps"]["ratio"] == pytest.approx(0.9)
    assert ratio[("kvm", 4, "vm-tx")] is None
    assert not math.isnan(s["configs"][0]["points"][0]["forwarded_bps"]["mean"])


def test_a_tcp_flow_is_payload_bits_over_the_senders_span(tmp_path):
    import json

    from analysis.baseline.points import _tcp_flow

    send = {"tool": "vrtcp", "mode": "send", "bytes_written": [2_500_000], "t_start_ns": 10**9, "t_end_ns": 3 * 10**9}
    # the sink reads on its own clock (the guest's, 0.5 s behind): its span, 2 s, is what counts
    sink = {"tool": "vrtcp", "mode": "sink", "bytes": [2_500_000], "t_first_ns": 5 * 10**8, "t_last_ns": 25 * 10**8}
    (tmp_path / "tcp-send-0.json").write_text(json.dumps(send))
    (tmp_path / "tcp-sink-0.json").write_text(json.dumps(sink))
    flow = {"router": 0, "proto": "tcp", "gen": "tcp-send-0.json", "sink": "tcp-sink-0.json", "from": "A", "to": "VM"}
    f = _tcp_flow(tmp_path, flow)
    assert f["forwarded_bps"] == pytest.approx(10e6) and (f["start_ns"], f["end_ns"]) == (10**9, 3 * 10**9)
    assert f["offered_bps"] is None and f["loss_ratio"] is None and f["forwarded_pps"] is None  # absent, not 0
    # the guest sent: the window (for the RTT probes) is the sink's, on the host's clock
    f = _tcp_flow(tmp_path, {**flow, "from": "VM", "to": "B"})
    assert (f["start_ns"], f["end_ns"]) == (5 * 10**8, 25 * 10**8)
    (tmp_path / "tcp-sink-0.json").unlink()
    assert _tcp_flow(tmp_path, flow) is None


def test_a_udp_flow_with_the_guest_at_one_end_has_no_one_way_delay(tmp_path):
    import json

    from analysis.baseline.points import _flow

    gen = {"packets": 100, "achieved_bps": 1e6, "achieved_pps": 100.0, "start_ns": 10**9, "end_ns": 2 * 10**9}
    sink = {"packets": 100, "owd_ns": {"median": 461_000_000}, "first_ns": 3 * 10**9, "last_ns": 4 * 10**9}
    (tmp_path / "gen-0.json").write_text(json.dumps(gen))
    (tmp_path / "sink-0.json").write_text(json.dumps(sink))
    flow = {"router": 0, "gen": "gen-0.json", "sink": "sink-0.json"}
    forwarded = _flow(tmp_path, {**flow, "from": "A", "to": "B"}, 1250)
    assert forwarded["owd_median_ms"] == pytest.approx(461.0) and forwarded["start_ns"] == 10**9
    from_guest = _flow(tmp_path, {**flow, "from": "VM", "to": "B"}, 1250)
    assert from_guest["owd_median_ms"] is None and (from_guest["start_ns"], from_guest["end_ns"]) == (3e9, 4e9)
    to_guest = _flow(tmp_path, {**flow, "from": "A", "to": "VM"}, 1250)
    assert to_guest["owd_median_ms"] is None and to_guest["start_ns"] == 10**9
    assert from_guest["forwarded_bps"] == to_guest["forwarded_bps"] == pytest.approx(1e6)


def test_a_flow_between_two_guests_is_windowed_by_the_orchestrators_bracket(tmp_path):
    """ROLE=vm-vm under HV=kvm: both ends read guest clocks, so neither the sender's nor the sink's
    span is on a host's clock: the RTT window is the point's CPU snapshots (host CLOCK_REALTIME)
    around the flow, and the one-way delay is absent.  Two containers ("CT" -> "CT1") share the
    host's clock: their one-way delay and the sender's span are kept."""
    import json

    from analysis.baseline.points import _flow, _tcp_flow

    gen = {"packets": 100, "achieved_bps": 1e6, "achieved_pps": 100.0, "start_ns": 10**9, "end_ns": 2 * 10**9}
    sink = {"packets": 100, "owd_ns": {"median": 461_000_000}, "first_ns": 3 * 10**9, "last_ns": 4 * 10**9}
    (tmp_path / "gen-0.json").write_text(json.dumps(gen))
    (tmp_path / "sink-0.json").write_text(json.dumps(sink))
    flow = {"router": 0, "gen": "gen-0.json", "sink": "sink-0.json"}
    bracket = (9 * 10**9, 12 * 10**9)
    vms = _flow(tmp_path, {**flow, "from": "VM", "to": "VM1"}, 1250, None, bracket)
    assert vms["owd_median_ms"] is None and (vms["start_ns"], vms["end_ns"]) == bracket
    cts = _flow(tmp_path, {**flow, "from": "CT", "to": "CT1"}, 1250, None, bracket)
    assert cts["owd_median_ms"] == pytest.approx(461.0) and (cts["start_ns"], cts["end_ns"]) == (10**9, 2 * 10**9)
    assert _flow(tmp_path, {**flow, "from": "VM", "to": "VM1"}, 1250) is None  # no bracket recorded: no window
    send = {"tool": "vrtcp", "mode": "send", "bytes_written": [2_500_000], "t_start_ns": 10**9, "t_end_ns": 3 * 10**9}
    tsink = {"tool": "vrtcp", "mode": "sink", "bytes": [2_500_000], "t_first_ns": 5 * 10**8, "t_last_ns": 25 * 10**8}
    (tmp_path / "tcp-send-0.json").write_text(json.dumps(send))
    (tmp_path / "tcp-sink-0.json").write_text(json.dumps(tsink))
    tflow = {"router": 0, "proto": "tcp", "gen": "tcp-send-0.json", "sink": "tcp-sink-0.json"}
    t = _tcp_flow(tmp_path, {**tflow, "from": "VM", "to": "VM1"}, bracket)
    assert (t["start_ns"], t["end_ns"]) == bracket and t["forwarded_bps"] == pytest.approx(10e6)
