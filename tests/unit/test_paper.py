"""analysis.paper on synthetic inputs (named synthetic: hand-made records and a hand-made baseline
summary, never measurements): each claim's measured text, comparison and absence reasons."""

from __future__ import annotations

import numpy as np

from analysis import paper as ap

FACTS = {"qemu": "7.2.22", "accel": "tcg"}


def _synthetic_runs(hv, frame, rates, metric_fn, reps=3):
    rng = np.random.default_rng(1)
    out = []
    for rate in rates:
        for _ in range(reps):
            out.append({"hv": hv, "frame_bytes": frame, "rate_bps": rate, "status": "completed",
                        **metric_fn(rate, rng)})  # fmt: skip
    return out


def _by_id(claims):
    return {c.id: c for c in claims}


def test_synthetic_flat_kvm_downtime_is_not_dependent_and_compared_to_017():
    recs = _synthetic_runs("kvm", 1500, [0, 100_000_000, 200_000_000, 300_000_000],
                           lambda r, g: {"downtime_packets_s": 0.05 + g.normal(0, 0.005)})  # fmt: skip
    m1 = _by_id(ap.fig3_claims(recs, FACTS))["M1"]
    assert m1.n == 12 and m1.measured.startswith("median 0.05")
    assert "measured/paper = 0.29" in m1.comparison or "measured/paper = 0.3" in m1.comparison
    assert "no dependence on the rate detected" in m1.comparison


def test_synthetic_growing_rtt_is_detected():
    recs = _synthetic_runs("kvm", 1500, [0, 100_000_000, 200_000_000, 300_000_000],
                           lambda r, g: {"rtt_increase_median_ms": r / 1e8 + g.normal(0, 0.1)})  # fmt: skip
    m7 = _by_id(ap.fig3_claims(recs, FACTS))["M7"]
    assert "depends on the rate (Spearman rho=+" in m7.comparison


def test_synthetic_xen_range_inside_and_outside():
    inside = _synthetic_runs("xen", 1500, [1_000_000, 5_000_000], lambda r, g: {"downtime_packets_s": 4.0})
    assert "inside the paper's 3-7 s" in _by_id(ap.fig3_claims(inside, FACTS))["M2"].comparison
    below = _synthetic_runs("xen", 1500, [1_000_000, 5_000_000], lambda r, g: {"downtime_packets_s": 1.5})
    assert "below the paper's 3-7 s (0.50x 3)" in _by_id(ap.fig3_claims(below, FACTS))["M2"].comparison


def test_absent_is_absent_with_a_reason_never_zero():
    claims = ap.fig2_claims(None, FACTS) + ap.fig3_claims([], FACTS)
    assert all(c.measured is None and c.why_absent and c.n == 0 for c in claims)
    # a bound is not a point: a run whose downtime is a bound (None as a point value) is left out
    recs = [{"hv": "kvm", "frame_bytes": 1500, "rate_bps": 0, "status": "completed", "downtime_packets_s": None}]
    assert _by_id(ap.fig3_claims(recs, FACTS))["M1"].why_absent.startswith("no completed HV=kvm")


def test_synthetic_64b_higher_than_1500b():
    recs = _synthetic_runs("kvm", 1500, [0, 5_000_000], lambda r, g: {"downtime_packets_s": 0.05 + g.normal(0, 0.002)},
                           reps=5) + _synthetic_runs("kvm", 64, [0, 5_000_000],
                                                      lambda r, g: {"downtime_packets_s": 0.08 + g.normal(0, 0.002)},
                                                      reps=5)  # fmt: skip
    m8 = _by_id(ap.fig3_claims(recs, FACTS))["M8"]
    assert m8.comparison.endswith(": higher")


def test_synthetic_baseline_summary_forwarding():
    def cfg(hv, frame, fwd, lossfree, nic="none"):
        return {"hv": hv, "nic": nic, "ip": 4, "frame_bytes": frame, "routers": 1, "load": "none",
                "max_forwarded": {"rate_bps": 0, "forwarded_bps": {"mean": fwd, "n": 3}},
                "sweep_loss_free_bps": lossfree}  # fmt: skip

    summary = {"accel": "tcg", "configs": [cfg("none", 1500, 1.1e9, 400e6), cfg("kvm", 1500, 5.12e8, 2e8, "virtio"),
                                           cfg("kvm", 1500, 5e6, 1e6, "e1000")]}  # fmt: skip
    c = _by_id(ap.fig2_claims(summary, FACTS))
    assert c["F1"].measured.startswith("max forwarded 1100.0 Mbit/s (110.0% of 1 Gbit/s) at offered max (unpaced)")
    assert c["F2"].measured.startswith("max forwarded 512.0 Mbit/s")  # virtio, not e1000
    assert c["F2"].comparison == "measured/paper = 0.64 (512.0 vs 800.0 Mbit/s)"
    assert c["F3"].why_absent == "the baseline has no HV=xen configuration at 1500 B"


def test_synthetic_generator_limited_forwarding_is_a_bound():
    c = {"hv": "none", "nic": "none", "ip": 4, "frame_bytes": 64, "routers": 1, "load": "none",
         "max_forwarded": {"rate_bps": 500_000_000, "forwarded_bps": {"mean": 48.3e6, "n": 3}},
         "sweep_loss_free_bps": 48.3e6,
         "points": [{"rate_bps": 500_000_000, "gen_limited": 3, "offered_bps": {"mean": 48.3e6},
                     "forwarded_bps": {"mean": 48.3e6}}]}  # fmt: skip
    f5 = _by_id(ap.fig2_claims({"configs": [c]}, FACTS))["F5"]
    assert f5.measured.startswith("≥ 48.3 Mbit/s (a lower bound")
    assert f5.comparison == "a bound, not a point: measured/paper ≥ 0.16"
    c["points"][0]["forwarded_bps"] = {"mean": 30e6}  # the router lost a third: a point value
    c["max_forwarded"]["forwarded_bps"]["mean"] = 30e6
    assert _by_id(ap.fig2_claims({"configs": [c]}, FACTS))["F5"].measured.startswith("max forwarded 30.0")


def test_rank_correlation_p_is_exact_for_a_few_runs_not_the_t_approximation():
    """5 runs in rate order: 2 of the 120 orderings are as extreme, so p = 1/60 (SciPy's t
    approximation prints 1.4e-24); 3 runs can never reach alpha 0.05 (2 of 6)."""
    rates = np.array([0, 100e6, 200e6, 300e6, 400e6])
    rho, p, how = ap.spearman_p(rates, np.array([1.0, 2, 3, 4, 5]))
    assert (rho, how) == (1.0, "exact") and p == 1 / 60
    assert ap.spearman_p(rates[:3], np.array([3.0, 2, 1]))[1] == 1.0 / 3
    many = np.repeat(rates, 3)
    rho, p, how = ap.spearman_p(many, np.arange(15.0))  # 15 runs: random orderings, seeded
    assert how == "9999 permutations" and p == ap.spearman_p(many, np.arange(15.0))[1] and p < 0.001
