"""analysis.metrics.postcopy on SYNTHETIC events, samples, probes and loss (hand-made, nothing measured)."""

from __future__ import annotations

import numpy as np

from analysis.metrics.postcopy import postcopy_price
from analysis.metrics.sendloss import LossPerMs

S = 1_000_000_000
T0 = 1_000 * S  # migration start


def _ev(t, side, event, status=None):
    return {"t_ns": t, "side": side, "event": event, **({"data": {"status": status}} if status else {})}


EVENTS = [
    _ev(T0, "src", "MIGRATION", "active"),
    _ev(T0 + 3 * S, "src", "MIGRATION", "postcopy-active"),
    _ev(T0 + 3 * S + 40_000_000, "dst", "RESUME"),
    _ev(T0 + 4 * S, "src", "MIGRATION", "completed"),
]
SAMPLES = [{"t_ns": T0 + 4 * S + 1, "side": "dst", "reply": {"status": "completed", "postcopy-blocktime": 180,
                                                               "postcopy-vcpu-blocktime": [180]}}]  # fmt: skip


def _probes():
    send = np.arange(T0 - 3 * S, T0 + 8 * S, 10_000_000, dtype=np.int64)  # every 10 ms
    rtt = np.full(send.size, 1e6)  # 1 ms
    resume = T0 + 3 * S + 40_000_000
    after = (send >= resume) & (send < resume + 2 * S)
    rtt[after] = 5e6  # 5 ms while pages are pulled
    rtt[after & (send < resume + 100_000_000)] = np.nan  # 10 probes lost
    return send, rtt


def _loss():
    start_ms = (T0 - 3 * S) // 1_000_000
    n = 11_000
    sent = np.full(n, 10, dtype=np.int64)
    lost = np.zeros(n, dtype=np.int64)
    resume_ms = (T0 + 3 * S + 40_000_000) // 1_000_000 - start_ms
    lost[resume_ms : resume_ms + 50] = 10  # 50 ms of loss after the resume
    return LossPerMs(start_ms, sent, lost, 0)


def test_synthetic_postcopy_price():
    send, rtt = _probes()
    p = postcopy_price(EVENTS, SAMPLES, T0, 0.012, send, rtt, _loss())
    assert p.switchover_ns == T0 + 3 * S and p.resume_ns == T0 + 3 * S + 40_000_000
    assert abs(p.phase_s - 0.96) < 1e-9
    assert p.blocktime_ms == 180.0 and p.vcpu_blocktime_ms == [180.0]
    assert p.rtt_before.median_ms == 1.0 and p.rtt_after.median_ms == 5.0 and p.rtt_after.lost == 10
    assert p.loss_after.lost == 500 and p.loss_after.sent >= 20_000
    assert p.why_absent == {}


def test_synthetic_precopy_end_is_absent_with_reasons():
    events = [e for e in EVENTS if (e.get("data") or {}).get("status") != "postcopy-active"]
    send, rtt = _probes()
    p = postcopy_price(events, [], T0, 0.012, send, rtt, None)
    assert p.switchover_ns is None and p.phase_s is None and p.rtt_after is None and p.loss_after is None
    assert "ended in pre-copy" in p.why_absent["switchover"]
    assert "postcopy-blocktime" in p.why_absent["blocktime"] and "loss" in p.why_absent


def test_postcopy_runs_ask_the_destination_for_its_blocktime():
    from migrate.drivers.kvm.driver import migration_capabilities
    from migrate.model.scenario import Scenario

    caps = {c["capability"]: c["state"] for c in migration_capabilities(Scenario(postcopy=True))}
    assert caps["postcopy-ram"] is True and caps["postcopy-blocktime"] is True
    assert "postcopy-blocktime" not in {c["capability"] for c in migration_capabilities(Scenario())}
