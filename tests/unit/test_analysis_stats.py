"""analysis.stats.inference and analysis.stats.aggregate: against reference values from statistics
tables and the literature, on REAL captured runs (tests/fixtures/nightly/) with reference values
computed once with scipy.stats, and on SYNTHETIC data with known answers (named as such)."""

import math
from itertools import combinations

import numpy as np
import pytest
from scipy import stats

from analysis.stats.aggregate import METRICS, aggregate, describe, point_columns, point_row, run_record
from analysis.stats.inference import MAX_EXACT_SPLITS, mann_whitney_p, t_half_width, wilson_interval
from tests.fixtures.nightly import power

# two-sided 95 % and 99 % critical values of Student's t (any statistics table)
T975 = {1: 12.7062, 2: 4.3027, 3: 3.1824, 4: 2.7764, 9: 2.2622, 24: 2.0639, 100: 1.9840}
T995 = {1: 63.6567, 4: 4.6041, 9: 3.2498}
REAL = power.load_points()  # point label -> its 50 REAL runs
NIGHTS = sorted({r["night_id"] for r in REAL["precopy-100M-1500"]})
SCENARIO = {
    "precopy-100M-1500": {"hv": "kvm", "mode": "precopy", "rate_bps": 100e6, "frame_bytes": 1500, "accel": "tcg"},
    "stopcopy-20M-1500": {"hv": "kvm", "mode": "stopcopy", "rate_bps": 20e6, "frame_bytes": 1500, "accel": "tcg"},
}


def _real(metric: str, nights=None, point: str = "precopy-100M-1500") -> list[float]:
    """The metric of the completed REAL runs of ``point`` (of ``nights`` only, if given)."""
    return [
        r[metric]
        for r in REAL[point]
        if r["status"] == "completed" and r[metric] is not None and (nights is None or r["night_id"] in nights)
    ]


@pytest.mark.parametrize(("df", "expected"), sorted(T975.items()))
def test_t_half_width_is_the_tabulated_quantile(df, expected):
    n = df + 1  # sd = sqrt(n) makes the half-width the quantile itself
    assert t_half_width(math.sqrt(n), n) == pytest.approx(expected, abs=5e-5)
    assert t_half_width(2.0, n) == pytest.approx(expected * 2.0 / math.sqrt(n), abs=1e-4)
    if df in T995:
        assert t_half_width(math.sqrt(n), n, 0.99) == pytest.approx(T995[df], abs=5e-4)


def test_t_half_width_refuses_what_has_no_interval():
    with pytest.raises(ValueError, match="at least 2"):
        t_half_width(1.0, 1)
    with pytest.raises(ValueError, match="confidence"):
        t_half_width(1.0, 5, 1.0)


@pytest.mark.parametrize(
    ("label", "metric", "n", "ci_low", "ci_high"),
    [
        ("precopy-100M-1500", "downtime_packets_s", 49, 0.03611312903435615, 0.04812159814931731),
        ("precopy-100M-1500", "duration_link_s", 49, 0.7917445982547732, 0.8135515124391043),
        ("stopcopy-20M-1500", "downtime_packets_s", 50, 0.8175218442031649, 0.8326812513568351),
    ],
)
def test_point_statistics_of_real_runs(label, metric, n, ci_low, ci_high):
    """REAL: the 50 runs of a nightly point aggregated as a report aggregates them; the reference
    is scipy.stats.t.interval(0.95, n - 1, loc=mean, scale=scipy.stats.sem(x)), computed once."""
    (point,) = aggregate([{**r, **SCENARIO[label]} for r in REAL[label]])
    st = point.stats[metric]
    assert st.n == n and st.mean == pytest.approx(np.mean(_real(metric, point=label)), rel=1e-12)
    assert (st.ci_low, st.ci_high) == (pytest.approx(ci_low, rel=1e-12), pytest.approx(ci_high, rel=1e-12))


def test_t_interval_of_one_real_night():
    """REAL: downtime_packets_s of the first night's 5 pre-copy runs (reference as above)."""
    st = describe(_real("downtime_packets_s", NIGHTS[:1]))
    assert st.n == 5
    assert (st.ci_low, st.ci_high) == (
        pytest.approx(0.011280487593769494, rel=1e-12),
        pytest.approx(0.061476241206230506, rel=1e-12),
    )


@pytest.mark.parametrize(
    ("k", "n", "low", "high"),
    [(81, 263, 0.2553, 0.3662), (15, 148, 0.0624, 0.1605), (0, 20, 0.0, 0.1611), (1, 29, 0.0061, 0.1718)],
)
def test_wilson_interval_matches_newcombe_1998(k, n, low, high):
    """Newcombe, Statistics in Medicine 17 (1998) 857-872, Table II, method 3 (score, no continuity correction)."""
    assert wilson_interval(k, n) == (pytest.approx(low, abs=5e-5), pytest.approx(high, abs=5e-5))


def test_failure_interval_of_real_runs():
    """REAL: 1 of the 50 pre-copy migration attempts failed, none of the 50 stop-and-copy ones;
    the reference is Wilson's formula (p + z²/2n ± z·sqrt(p(1-p)/n + z²/4n²)) / (1 + z²/n)."""
    assert wilson_interval(0, 0) is None
    for label, k in (("precopy-100M-1500", 1), ("stopcopy-20M-1500", 0)):
        (point,) = aggregate([{**r, **SCENARIO[label]} for r in REAL[label]])
        assert (point.n_attempts, point.n_failed) == (50, k)
        z, p, n = 1.959963984540054, k / 50, 50
        centre, half = p + z * z / (2 * n), z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
        ref = ((centre - half) / (1 + z * z / n), (centre + half) / (1 + z * z / n))
        assert point.failure_ci == (pytest.approx(ref[0], abs=1e-15), pytest.approx(ref[1], rel=1e-12))


def _exact_mw_greater(x, y) -> float:
    """Reference: the permutation distribution of x's midrank sum over every split, enumerated."""
    pooled = stats.rankdata([*x, *y])
    obs = pooled[: len(x)].sum()
    sums = [pooled[list(c)].sum() for c in combinations(range(len(pooled)), len(x))]
    return sum(s >= obs - 1e-9 for s in sums) / len(sums)


def test_mann_whitney_5_vs_5():
    # complete separation: 1 of C(10, 5) = 252 splits; one swap: 2 of 252; two-sided doubles
    assert mann_whitney_p([6, 7, 8, 9, 10], [1, 2, 3, 4, 5], "greater") == pytest.approx(1 / 252)
    assert mann_whitney_p([5, 7, 8, 9, 10], [1, 2, 3, 4, 6], "greater") == pytest.approx(2 / 252)
    assert mann_whitney_p([6, 7, 8, 9, 10], [1, 2, 3, 4, 5]) == pytest.approx(2 / 252)
    assert mann_whitney_p([1, 2, 3, 4, 5], [6, 7, 8, 9, 10], "less") == pytest.approx(1 / 252)
    assert mann_whitney_p([1, 2, 3], [4, 5, 6], "greater") == pytest.approx(1.0)
    assert mann_whitney_p([1, 1, 1], [1, 1, 1]) == pytest.approx(1.0)  # identical samples


def test_mann_whitney_of_two_real_nights():
    """REAL: downtime_packets_s of two nights' 5 pre-copy runs (no ties)."""
    a, b = _real("downtime_packets_s", NIGHTS[:1]), _real("downtime_packets_s", NIGHTS[1:2])
    assert mann_whitney_p(a, b, "greater") == pytest.approx(_exact_mw_greater(a, b), rel=1e-12)
    assert mann_whitney_p(a, b, "greater") == pytest.approx(224 / 252, rel=1e-12)
    assert mann_whitney_p(a, b) == pytest.approx(78 / 252, rel=1e-12)


def test_mann_whitney_with_a_real_tie_is_exact():
    """REAL: duration_link_s of two nights' 5 pre-copy runs, one value (0.809996004 s) in both."""
    a, b = _real("duration_link_s", NIGHTS[1:2]), _real("duration_link_s", NIGHTS[4:5])
    assert len(set(a) & set(b)) == 1
    assert mann_whitney_p(a, b, "greater") == pytest.approx(_exact_mw_greater(a, b), rel=1e-12)
    assert mann_whitney_p(a, b, "greater") == pytest.approx(241 / 252, rel=1e-12)
    assert mann_whitney_p(a, b) == pytest.approx(26 / 252, rel=1e-12)
    # SYNTHETIC: heavy ties, and a lone value (which scipy's permutation test does not take)
    for x, y in (([0.05, 0.06, 0.06, 0.07], [0.05, 0.05, 0.06]), ([3], [1, 2, 3, 2]), ([1, 2, 2, 4], [1])):
        greater, less = _exact_mw_greater(x, y), _exact_mw_greater(y, x)
        assert mann_whitney_p(x, y, "greater") == pytest.approx(greater), (x, y)
        assert mann_whitney_p(x, y, "less") == pytest.approx(less), (x, y)
        assert mann_whitney_p(x, y) == pytest.approx(min(1.0, 2 * min(greater, less))), (x, y)


def test_mann_whitney_of_large_tied_samples_is_the_normal_approximation():
    """REAL: duration_link_s of nights 1-5 against nights 6-10 (24 vs 25 runs, one tie): too many
    splits to enumerate, so the tie-corrected normal approximation (reference computed once with
    scipy.stats.mannwhitneyu(method="asymptotic"); the exact permutation p is 0.83122)."""
    a, b = _real("duration_link_s", NIGHTS[:5]), _real("duration_link_s", NIGHTS[5:])
    assert math.comb(len(a) + len(b), len(a)) > MAX_EXACT_SPLITS
    assert mann_whitney_p(a, b) == pytest.approx(0.8336634917144932, rel=1e-12)


def test_mann_whitney_refuses_bad_input():
    with pytest.raises(ValueError, match="non-empty"):
        mann_whitney_p([], [1.0])
    with pytest.raises(ValueError, match="alternative"):
        mann_whitney_p([1.0], [2.0], "bigger")


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
