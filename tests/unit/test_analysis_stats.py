"""analysis.stats.inference and analysis.stats.aggregate on SYNTHETIC data with known answers."""

import math

import numpy as np
import pytest

from analysis.stats.aggregate import METRICS, aggregate, describe, point_columns, point_row, run_record
from analysis.stats.inference import (
    betainc,
    fisher_greater,
    mann_whitney_greater,
    midranks,
    min_p_value,
    t_cdf,
    t_quantile,
    wilson_interval,
)

# two-sided 95 % critical values of Student's t (any statistics table)
T975 = {1: 12.7062, 2: 4.3027, 3: 3.1824, 4: 2.7764, 9: 2.2622, 24: 2.0639, 100: 1.9840}


@pytest.mark.parametrize(("df", "expected"), sorted(T975.items()))
def test_t_quantile_matches_tables(df, expected):
    assert t_quantile(0.975, df) == pytest.approx(expected, abs=5e-5)
    assert t_cdf(expected, df) == pytest.approx(0.975, abs=1e-5)
    assert t_quantile(0.025, df) == pytest.approx(-expected, abs=5e-5)


def test_t_cdf_special_cases():
    assert t_cdf(0.0, 7) == 0.5
    assert t_cdf(1.0, 1) == pytest.approx(0.75)  # Cauchy: 1/2 + atan(1)/pi
    assert betainc(2.0, 3.0, 0.4) == pytest.approx(0.5248)  # I_0.4(2,3) = 1 - 0.6^4 - 4*0.4*0.6^3
    assert betainc(1.0, 1.0, 0.3) == pytest.approx(0.3)


def test_describe_known_answer():
    st = describe([1, 2, 3, 4, 5])
    assert (st.n, st.mean, st.median) == (5, 3.0, 3.0)
    assert st.sd == pytest.approx(math.sqrt(2.5))
    half = 2.776445105 * math.sqrt(2.5) / math.sqrt(5)
    assert (st.ci_low, st.ci_high) == (pytest.approx(3 - half), pytest.approx(3 + half))
    assert st.ci_half == pytest.approx(half)


def test_describe_ignores_missing_and_handles_tiny_samples():
    assert describe([]).n == 0 and describe([None, float("nan")]).mean is None
    one = describe([None, 0.25])
    assert (one.n, one.mean, one.median, one.sd, one.ci_low) == (1, 0.25, 0.25, None, None)
    same = describe([2.0, 2.0, 2.0])
    assert (same.ci_low, same.ci_high) == (2.0, 2.0)


def test_ci_covers_the_true_mean_95_percent_of_the_time():
    """SYNTHETIC: 4000 samples of n=5 from N(10, 2); the 95 % CI must cover 10 in ~95 % of them."""
    rng = np.random.default_rng(20261122)
    covered = 0
    trials = 4000
    for _ in range(trials):
        st = describe(rng.normal(10.0, 2.0, 5))
        covered += st.ci_low <= 10.0 <= st.ci_high
    assert abs(covered / trials - 0.95) < 3 * math.sqrt(0.95 * 0.05 / trials)


def test_wilson_interval():
    assert wilson_interval(0, 0) is None
    lo, hi = wilson_interval(0, 10)
    assert lo == 0.0 and hi == pytest.approx(0.2775, abs=1e-4)
    lo, hi = wilson_interval(5, 10)
    assert (lo, hi) == (pytest.approx(0.2366, abs=1e-4), pytest.approx(0.7634, abs=1e-4))


def test_midranks_share_ties():
    assert list(midranks([10, 20, 20, 30])) == [1.0, 2.5, 2.5, 4.0]


def test_mann_whitney_exact_known_p_values():
    # complete separation of 3 vs 3: 1 of C(6,3) = 20 splits
    assert mann_whitney_greater([4, 5, 6], [1, 2, 3]) == (9.0, pytest.approx(0.05))
    assert mann_whitney_greater([1, 2, 3], [4, 5, 6])[1] == pytest.approx(1.0)
    # 5 vs 5 complete separation: 1/252; one swap: 2/252
    assert mann_whitney_greater([6, 7, 8, 9, 10], [1, 2, 3, 4, 5])[1] == pytest.approx(1 / 252)
    assert mann_whitney_greater([5, 7, 8, 9, 10], [1, 2, 3, 4, 6])[1] == pytest.approx(2 / 252)
    # identical samples: p = 1
    assert mann_whitney_greater([1, 1, 1], [1, 1, 1])[1] == pytest.approx(1.0)


def test_mann_whitney_with_ties_matches_brute_force():
    from itertools import combinations

    x, y = [0.05, 0.06, 0.06, 0.07], [0.05, 0.05, 0.06]
    pooled = midranks([*x, *y])
    obs = pooled[: len(x)].sum()
    sums = [sum(pooled[list(c)]) for c in combinations(range(len(pooled)), len(x))]
    expected = sum(s >= obs - 1e-9 for s in sums) / len(sums)
    assert mann_whitney_greater(x, y)[1] == pytest.approx(expected)


def test_min_p_and_fisher():
    assert min_p_value(5, 5) == pytest.approx(1 / 252)
    assert min_p_value(3, 3) == pytest.approx(0.05)
    assert fisher_greater(5, 5, 0, 5) == pytest.approx(1 / 252)
    assert fisher_greater(4, 5, 0, 5) == pytest.approx(5 / 210)
    assert fisher_greater(0, 5, 0, 5) == 1.0


def _summary(downtime, status="completed"):
    return {
        "status": status,
        "downtime_s": {"counters": downtime, "packets": downtime, "hypervisor": None},
        "duration_s": {"link": 1.0, "hypervisor": 0.9},
        "volume_bytes": {"link": 100e6, "hypervisor": 99e6},
        "rtt_ms": {"before": {"median": 1.0, "p99": 2.0}, "during": {"median": 4.0, "p99": 9.0}, "after": {}},
        "cross_traffic": {"offered_bps": 100e6, "forwarded_bps": 90e6, "loss_ratio": 0.1},
        "details": {"window": {} if status == "completed" else None},
    }


def _meta(rate, status="completed"):
    return {"status": status, "scenario": {"hv": "kvm", "mode": "precopy", "rate_bps": rate, "frame_bytes": 1500}}


def test_run_record_flattens_metrics():
    rec = run_record(_summary(0.1), _meta(100e6), run_id="x")
    assert rec["run_id"] == "x" and rec["status"] == "completed" and rec["rate_bps"] == 100e6
    assert rec["downtime_counters_s"] == 0.1 and rec["downtime_hypervisor_s"] is None
    assert rec["rtt_increase_median_ms"] == 3.0 and rec["rtt_increase_p99_ms"] == 7.0
    assert rec["forwarded_ratio"] == pytest.approx(0.9)
    assert {m.name for m in METRICS} <= set(rec)


def test_aggregate_failure_rate_and_stats_over_completed_runs():
    """SYNTHETIC: 3 completed (0.1, 0.2, 0.3 s), 1 failed migration, 1 failed before migrating,
    1 interrupted (not counted) at one point; 2 completed at another."""
    recs = [run_record(_summary(d), _meta(100e6)) for d in (0.1, 0.2, 0.3)]
    recs.append(run_record(_summary(None, "failed"), _meta(100e6, "failed")))
    failed_early = _summary(None, "failed")
    failed_early["details"]["window"] = None
    recs.append(run_record(failed_early, _meta(100e6, "failed")))
    recs[-2]["migration_attempted"] = True
    recs.append(run_record(_summary(None, "failed"), _meta(100e6, "interrupted")))
    recs += [run_record(_summary(d), _meta(0)) for d in (0.05, 0.05)]
    pts = aggregate(recs)
    assert [p.rate_bps for p in pts] == [0, 100e6]
    p = pts[1]
    assert (p.n_runs, p.n_completed, p.n_failed, p.n_excluded, p.n_failed_before_migration) == (6, 3, 2, 1, 1)
    assert p.failure_rate == pytest.approx(2 / 5)
    st = p.stats["downtime_counters_s"]
    assert (st.n, st.mean, st.median) == (3, pytest.approx(0.2), pytest.approx(0.2))
    assert st.ci_half == pytest.approx(4.302652729 * 0.1 / math.sqrt(3))
    row = point_row(p)
    assert set(row) == set(point_columns())
    assert row["downtime_counters_s_ci95_high"] == pytest.approx(st.ci_high)
    assert pts[0].failure_rate == 0.0 and pts[0].stats["downtime_counters_s"].sd == 0.0
