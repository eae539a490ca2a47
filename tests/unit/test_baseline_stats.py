"""Statistics of ``make baseline`` on synthetic inputs with known answers (no root)."""

import math

import pytest

from analysis.baseline.ndr import (
    LOSS_FREE_RATIO,
    describe,
    efficiency,
    jain_index,
    ndr_next,
    ndr_result,
)


@pytest.mark.parametrize(
    ("df", "expected"),
    [(1, 12.7062), (2, 4.3027), (4, 2.7764), (8, 2.3060), (24, 2.0639), (100, 1.9840)],
)
def test_ci95_uses_the_tabulated_t_quantile(df, expected):
    n = df + 1
    st = describe([float(i) for i in range(n)])  # sd of 0..n-1 = sqrt(n(n+1)/12)
    assert st.std == pytest.approx(math.sqrt(n * (n + 1) / 12))
    assert st.ci95 * math.sqrt(n) / st.std == pytest.approx(expected, abs=1e-4)


def test_describe_mean_std_and_student_t_interval():
    st = describe([1.0, 2.0, 3.0, 4.0, 5.0])
    assert st.n == 5 and st.mean == 3.0
    assert st.std == pytest.approx(math.sqrt(2.5))
    assert st.ci95 == pytest.approx(2.7764451 * math.sqrt(2.5) / math.sqrt(5), rel=1e-6)
    assert st.lo == pytest.approx(3.0 - st.ci95) and st.hi == pytest.approx(3.0 + st.ci95)


def test_describe_ignores_missing_values_and_needs_two_for_an_interval():
    assert describe([]) is None
    assert describe([None, float("nan")]) is None
    one = describe([None, 7.0])
    assert one.n == 1 and one.mean == 7.0 and one.std is None and one.ci95 is None
    assert describe([4.0, 4.0, 4.0]).ci95 == 0.0


def test_jain_index_known_answers():
    assert jain_index([5.0, 5.0, 5.0, 5.0]) == pytest.approx(1.0)
    assert jain_index([1.0, 0.0, 0.0, 0.0]) == pytest.approx(0.25)  # one takes all: 1/n
    assert jain_index([1.0, 2.0, 3.0]) == pytest.approx(36 / 42)
    assert jain_index([0.0, 0.0]) is None
    assert jain_index([]) is None
    assert jain_index([1.0, None]) is None


def test_efficiency():
    assert efficiency(800e6, 1000e6) == pytest.approx(0.8)
    assert efficiency(1200e6, 1000e6) == pytest.approx(1.2)
    assert efficiency(800e6, None) is None
    assert efficiency(800e6, 0.0) is None
    assert efficiency(None, 1e9) is None


def _router(ndr_bps: int):
    """A synthetic router: no loss up to ``ndr_bps``, beyond it forwards exactly ``ndr_bps``."""
    return lambda r: 0.0 if r <= ndr_bps else (r - ndr_bps) / r


def _search(router, trials, hi, **kw):
    trials = list(trials)
    while (nxt := ndr_next(trials, hi, **kw)) is not None:
        assert nxt not in {r for r, _ in trials}
        trials.append((nxt, router(nxt)))
    return ndr_result(trials), trials


@pytest.mark.parametrize("true_ndr", [3_000_000, 11_700_000, 47_000_000, 99_000_000])
def test_ndr_search_brackets_the_true_rate_within_the_precision(true_ndr):
    router = _router(true_ndr)
    sweep = [(r, router(r)) for r in (10_000_000, 50_000_000, 100_000_000)]
    res, trials = _search(router, sweep, 100_000_000, precision=0.02)
    assert res.lowest_fail_bps is not None and res.lowest_fail_bps > true_ndr
    assert true_ndr - 0.02 * res.lowest_fail_bps <= res.rate_bps <= true_ndr
    assert res.lowest_fail_bps - res.rate_bps <= 0.02 * res.lowest_fail_bps
    assert len(trials) <= 16


def test_ndr_search_starts_at_the_upper_bound_and_stops_when_it_passes():
    assert ndr_next([], 1_000_000_000) == 1_000_000_000
    assert ndr_next([(1_000_000_000, 0.0)], 1_000_000_000) is None
    res = ndr_result([(10_000_000, 0.0), (1_000_000_000, LOSS_FREE_RATIO)])  # exactly 0.1 % still passes
    assert res.rate_bps == 1_000_000_000 and res.at_upper_bound


def test_ndr_search_gives_zero_when_nothing_passes_down_to_the_floor():
    res, trials = _search(lambda r: 0.5, [], 10_000_000, floor_bps=100_000)
    assert res.rate_bps == 0 and res.lowest_fail_bps <= 100_000
    assert all(loss == 0.5 for _, loss in trials)


def test_ndr_ignores_a_pass_above_a_failure_and_unpaced_points():
    trials = [(10_000_000, 0.0), (20_000_000, 0.2), (30_000_000, 0.0), (0, 0.0)]
    res = ndr_result(trials)
    assert res.rate_bps == 10_000_000 and res.lowest_fail_bps == 20_000_000
    assert ndr_next(trials, 30_000_000) == 15_000_000


def test_ndr_search_respects_the_trial_budget():
    trials = [(r, 0.0 if r < 5_000_000 else 0.5) for r in range(1_000_000, 17_000_000, 1_000_000)]
    assert len(trials) == 16 and ndr_next(trials, 100_000_000, max_trials=16) is None
