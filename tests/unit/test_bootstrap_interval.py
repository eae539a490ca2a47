"""The percentile-bootstrap interval of a mean (analysis.stats.inference.bootstrap_mean_interval),
the per-point ``boot_low``/``boot_high`` of analysis.stats.aggregate and their points.csv columns:
on REAL captured runs (tests/fixtures/nightly/) and on SYNTHETIC samples (named as such)."""

import math

import numpy as np
import pytest

from analysis.stats.aggregate import (
    STAT_SUFFIXES,
    aggregate,
    describe,
    describe_metric,
    point_columns,
    point_row,
)
from analysis.stats.inference import bootstrap_mean_interval, t_half_width
from tests.fixtures.nightly import power

REAL = power.load_points()  # point label -> its REAL runs
# a skewed SYNTHETIC sample of downtimes [s]: one long stall among short ones; the t interval of
# its mean goes below 0 (mean 0.136, half-width 2.776 · 0.259 / √5 = 0.322)
SYNTHETIC_SKEWED = [0.01, 0.012, 0.015, 0.02, 0.6]


def _real(metric: str, point: str = "precopy-100M-1500") -> list[float]:
    return [r[metric] for r in REAL[point] if r["status"] == "completed" and r[metric] is not None]


@pytest.mark.parametrize("metric", ["downtime_packets_s", "duration_link_s", "volume_link_bytes"])
def test_bounds_lie_within_the_range_of_real_runs(metric):
    for k in (2, 3, 5, 10, len(_real(metric))):
        x = _real(metric)[:k]
        lo, hi = bootstrap_mean_interval(x)
        assert min(x) <= lo <= float(np.mean(x)) <= hi <= max(x)


def test_fewer_than_two_values_have_no_interval():
    assert bootstrap_mean_interval([]) is None
    assert bootstrap_mean_interval([0.17]) is None


def test_equal_values_give_a_point_interval():
    assert bootstrap_mean_interval([0.25, 0.25, 0.25]) == (0.25, 0.25)


def test_the_interval_is_reproducible():
    x = _real("downtime_packets_s")[:8]
    assert bootstrap_mean_interval(x) == bootstrap_mean_interval(list(x))
    assert bootstrap_mean_interval(x, 0.9) == bootstrap_mean_interval(x, 0.9)


def test_refuses_non_finite_values_and_a_bad_level():
    with pytest.raises(ValueError, match="finite"):
        bootstrap_mean_interval([0.1, math.nan])
    with pytest.raises(ValueError, match="confidence"):
        bootstrap_mean_interval([0.1, 0.2], 1.0)


def test_non_negative_values_give_a_non_negative_interval_where_t_does_not():
    x = SYNTHETIC_SKEWED
    mean, sd = float(np.mean(x)), float(np.std(x, ddof=1))
    assert mean - t_half_width(sd, len(x)) < 0  # the t interval goes below 0 ms
    lo, hi = bootstrap_mean_interval(x)
    assert 0.0 <= min(x) <= lo < mean < hi <= max(x)


def test_coverage_sanity_on_synthetic_lognormal_samples():
    """SYNTHETIC: 300 samples of 10 draws from lognormal(0, 1), whose mean is e^0.5.  The
    percentile bootstrap under-covers with few values (Efron and Tibshirani 1993, ch. 13): well
    above chance, below the nominal 95 % and below the t interval on the same samples; a narrower
    level covers less."""
    rng = np.random.default_rng(7)
    true_mean = math.exp(0.5)
    samples = [rng.lognormal(0.0, 1.0, 10).tolist() for _ in range(300)]

    def coverage(level: float) -> float:
        hits = 0
        for s in samples:
            lo, hi = bootstrap_mean_interval(s, level)
            hits += lo <= true_mean <= hi
        return hits / len(samples)

    def t_coverage() -> float:
        hits = 0
        for s in samples:
            half = t_half_width(float(np.std(s, ddof=1)), len(s))
            hits += abs(float(np.mean(s)) - true_mean) <= half
        return hits / len(samples)

    c95, c50 = coverage(0.95), coverage(0.5)
    assert 0.65 <= c95 < 0.95
    assert c95 < t_coverage()
    assert 0.25 <= c50 <= 0.6 and c50 < c95


def test_stats_carry_the_bootstrap_interval_of_the_same_values():
    st = describe([*SYNTHETIC_SKEWED, None, math.nan, "x"])  # non-finite entries are not values
    assert st.n == 5
    assert (st.boot_low, st.boot_high) == bootstrap_mean_interval(SYNTHETIC_SKEWED)
    assert st.ci_low < 0 <= st.boot_low  # the tables' t interval is kept beside it
    one = describe([0.3])
    assert (one.n, one.mean, one.boot_low, one.boot_high) == (1, 0.3, None, None)
    assert (describe([]).boot_low, describe([]).boot_high) == (None, None)


def _rec(value, **kw):
    """A SYNTHETIC completed run record with one downtime (None and a censored qualifier: a bound)."""
    rec = {"status": "completed", "series": "synthetic", "hv": "kvm", "accel": "tcg", "mode": "precopy",
           "rate_bps": 1e8, "frame_bytes": 1500, "downtime_counters_s": value, "quals": {}}  # fmt: skip
    rec.update(kw)
    return rec


def test_describe_metric_carries_the_bootstrap_interval_and_leaves_bounds_out():
    recs = [_rec(v) for v in SYNTHETIC_SKEWED]
    recs.append(_rec(None, quals={"downtime_counters_s": {"state": "censored", "lower": 9.0}}))
    st = describe_metric(recs, "downtime_counters_s")
    assert (st.n, st.n_censored, st.lower_max) == (5, 1, 9.0)
    assert (st.boot_low, st.boot_high) == bootstrap_mean_interval(SYNTHETIC_SKEWED)  # the 9 s bound is not in it


def test_points_csv_has_the_bootstrap_columns_last_per_metric():
    assert STAT_SUFFIXES[-2:] == ("boot95_low", "boot95_high")
    assert STAT_SUFFIXES[:10] == ("n", "mean", "median", "sd", "ci95_low", "ci95_high", "n_censored", "lower_max",
                                  "n_absent", "n_incomplete")  # fmt: skip
    cols = point_columns()
    i = cols.index("downtime_counters_s_n")
    assert cols[i + 4 : i + 6] == ["downtime_counters_s_ci95_low", "downtime_counters_s_ci95_high"]
    assert cols[i + 10 : i + 12] == ["downtime_counters_s_boot95_low", "downtime_counters_s_boot95_high"]
    (p,) = aggregate([_rec(v) for v in SYNTHETIC_SKEWED] + [_rec(None)])
    row = point_row(p)
    assert set(row) == set(cols)
    lo, hi = bootstrap_mean_interval(SYNTHETIC_SKEWED)
    assert (row["downtime_counters_s_boot95_low"], row["downtime_counters_s_boot95_high"]) == (lo, hi)
    assert row["downtime_counters_s_ci95_low"] < 0
    assert (row["duration_link_s_boot95_low"], row["duration_link_s_boot95_high"]) == (None, None)  # no value
