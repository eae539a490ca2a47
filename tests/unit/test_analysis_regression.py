"""The nightly regression detector on SYNTHETIC data: it must flag a real shift, stay quiet on
pure noise at (at most) its chosen false-positive rate, and ignore shifts below the minimum effect."""

import math

import numpy as np
import pytest

from analysis.junit import junit_xml
from analysis.regression import Rule, Verdict, check_failures, check_metric, holm

ALPHA = 0.01
N = 5  # runs per point tonight and in the baseline, as in migrate/nightly.toml
TRIALS = 3000
DOWNTIME = Rule("downtime_counters_s", "higher", min_rel=0.25, min_abs=0.030)
FORWARDED = Rule("forwarded_ratio", "lower", min_rel=0.05, min_abs=0.02)


def _binomial_upper(p, n, sigmas=3.0):
    return p + sigmas * math.sqrt(p * (1 - p) / n)


def _synthetic_downtimes(rng, n, median_s, sigma):
    """SYNTHETIC downtimes: log-normal around ``median_s``, quantised to the 10 ms sampling period."""
    return np.round(rng.lognormal(math.log(median_s), sigma, n) / 0.010) * 0.010


@pytest.mark.parametrize("sigma", [0.1, 0.3, 0.8])
def test_pure_noise_passes_at_the_chosen_false_positive_rate(sigma):
    """SYNTHETIC: baseline and tonight from the same distribution, TRIALS times."""
    rng = np.random.default_rng(1000 + int(sigma * 10))
    flagged = significant = 0
    for _ in range(TRIALS):
        base = _synthetic_downtimes(rng, N, 0.200, sigma)
        tonight = _synthetic_downtimes(rng, N, 0.200, sigma)
        v = check_metric(DOWNTIME, base, tonight, ALPHA)
        flagged += v.regression
        significant += v.p_value <= ALPHA
    # the exact test alone never rejects more often than alpha under the null (ties only make it conservative)
    assert significant / TRIALS <= _binomial_upper(ALPHA, TRIALS)
    # the minimum effect only removes flags
    assert flagged <= significant
    assert flagged / TRIALS <= _binomial_upper(ALPHA, TRIALS)


NIGHT_ALPHA = 0.05
CHECKS = 12  # 2 points × 6 metrics, as in migrate/nightly.toml


def _night(rng, shift=1.0, sigma=0.3):
    """SYNTHETIC night: CHECKS checks of pure noise; the first one shifted by ``shift``."""
    verdicts = []
    for k in range(CHECKS):
        base = _synthetic_downtimes(rng, N, 0.200, sigma)
        tonight = _synthetic_downtimes(rng, N, 0.200 * (shift if k == 0 else 1.0), sigma)
        verdicts.append(check_metric(DOWNTIME, base, tonight, NIGHT_ALPHA))
    return holm(verdicts, NIGHT_ALPHA)


def test_pure_noise_whole_nights_fail_at_most_at_the_night_alpha():
    """SYNTHETIC nights of pure noise (CV 10 % and 30 %): Holm keeps the share of nights with any
    regression below alpha; without it (each check at alpha) many more nights would fail."""
    rng = np.random.default_rng(7)
    nights = 800
    for sigma in (0.1, 0.3):
        failed = sum(any(v.regression for v in _night(rng, sigma=sigma)) for _ in range(nights))
        assert failed / nights <= _binomial_upper(NIGHT_ALPHA, nights)
    unadjusted = 0
    for _ in range(200):
        vs = [check_metric(DOWNTIME, *(_synthetic_downtimes(rng, N, 0.2, 0.3) for _ in "ab"), NIGHT_ALPHA)
              for _ in range(CHECKS)]  # fmt: skip
        unadjusted += any(v.regression for v in vs)
    assert unadjusted / 200 > 2 * NIGHT_ALPHA  # why the night needs the correction


def test_real_shift_fails_the_night():
    """SYNTHETIC: one metric of the night doubles (CV 10 %): the night fails (almost) always."""
    rng = np.random.default_rng(3)
    nights = [_night(rng, shift=2.0, sigma=0.1) for _ in range(200)]
    assert sum(n[0].regression for n in nights) / 200 >= 0.95
    assert all("after Holm over 12 checks" in n[0].reason for n in nights if n[0].regression)


def test_holm_known_answer():
    ps = [0.04, 0.001, 0.03, 0.01]  # levels in p order: 0.05/4, 0.05/3, 0.05/2, 0.05/1
    vs = [Verdict("m", "pass", "", worse_by=1.0, p_value=p, effect=True) for p in ps]
    vs.append(Verdict("m", "skipped", "no data"))
    out = holm(vs, 0.05)
    # 0.001 <= 0.0125 and 0.01 <= 0.0167 are rejected; 0.03 > 0.025 stops, so 0.04 is not rejected either
    assert [v.status for v in out] == ["pass", "regression", "pass", "regression", "skipped"]
    assert "not significant after Holm over 4 checks" in out[0].reason


@pytest.mark.parametrize(("factor", "sigma", "min_power"), [(2.0, 0.1, 0.99), (1.5, 0.1, 0.95), (2.0, 0.3, 0.6)])
def test_real_shift_is_flagged(factor, sigma, min_power):
    """SYNTHETIC: tonight's downtime median is ``factor`` × the baseline's."""
    rng = np.random.default_rng(42)
    flagged = 0
    for _ in range(500):
        base = _synthetic_downtimes(rng, N, 0.200, sigma)
        tonight = _synthetic_downtimes(rng, N, 0.200 * factor, sigma)
        flagged += check_metric(DOWNTIME, base, tonight, ALPHA).regression
    assert flagged / 500 >= min_power


def test_significant_but_tiny_shift_is_not_a_regression():
    """SYNTHETIC: a clean +10 ms shift (p = 1/252) is below min_abs = 30 ms and min_rel = 25 %."""
    base = [0.100, 0.101, 0.102, 0.103, 0.104]
    tonight = [0.110, 0.111, 0.112, 0.113, 0.114]
    v = check_metric(DOWNTIME, base, tonight, ALPHA)
    assert v.p_value == pytest.approx(1 / 252)
    assert v.status == "pass" and "minimum effect" in v.reason
    worse = check_metric(DOWNTIME, base, [0.2, 0.21, 0.22, 0.23, 0.24], ALPHA)
    assert worse.regression and worse.median_cand == 0.22 and worse.worse_by == pytest.approx(0.118)


def test_improvement_is_never_a_regression_and_direction_lower():
    base = [0.95, 0.96, 0.97, 0.98, 0.99]
    assert not check_metric(DOWNTIME, [0.5] * 5, [0.1] * 5, ALPHA).regression
    assert check_metric(FORWARDED, base, [0.5, 0.51, 0.52, 0.53, 0.54], ALPHA).regression
    assert not check_metric(FORWARDED, base, [0.99, 1.0, 1.0, 1.0, 1.0], ALPHA).regression


def test_skips_when_data_cannot_decide():
    assert check_metric(DOWNTIME, [0.1], [0.5, 0.6], ALPHA).status == "skipped"
    v = check_metric(DOWNTIME, [0.1, 0.1, 0.1], [0.5, 0.6, 0.7], ALPHA)  # min p = 0.05 > alpha
    assert v.status == "skipped" and "too small" in v.reason
    assert check_metric(DOWNTIME, [None, 0.1, float("nan")], [0.2] * 5, ALPHA).status == "skipped"


def test_failure_rate_check():
    rule = Rule("failure_rate", "higher", min_abs=0.4)
    assert check_failures(rule, 0, 5, 5, 5, 0.05).regression
    assert check_failures(rule, 0, 5, 4, 5, 0.05).regression  # p = 5/210
    assert not check_failures(rule, 0, 5, 2, 5, 0.05).regression
    assert check_failures(rule, 0, 0, 2, 5, 0.05).status == "skipped"


def test_junit_xml_has_one_case_per_check():
    import xml.etree.ElementTree as ET

    checks = [
        ("precopy-100M-1500", check_metric(DOWNTIME, [0.1] * 5, [0.3, 0.31, 0.32, 0.33, 0.34], ALPHA)),
        ("precopy-100M-1500", check_metric(FORWARDED, [0.9] * 5, [0.9] * 5, ALPHA)),
        ("stopcopy-20M-1500", Verdict("downtime_counters_s", "skipped", "no baseline yet")),
    ]
    root = ET.fromstring(junit_xml("vrmig.nightly", checks, {"qemu": "x"}, "t", "h", 12.0))
    suite = root.find("testsuite")
    assert (suite.get("tests"), suite.get("failures"), suite.get("skipped")) == ("3", "1", "1")
    cases = suite.findall("testcase")
    assert cases[0].get("classname") == "vrmig.nightly.precopy-100M-1500"
    assert cases[0].find("failure").get("message").startswith("REGRESSION")
    assert cases[1].find("failure") is None and cases[2].find("skipped") is not None
    assert suite.find("properties/property").get("name") == "qemu"
