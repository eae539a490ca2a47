"""Small-sample inference on top of ``scipy.stats`` (pure functions).

* :func:`t_half_width`: half-width of the Student-t confidence interval of a mean,
  t(½ + c/2, n − 1) · sd / √n with the quantile from ``scipy.stats.t.ppf`` (Student 1908; the
  95 % intervals of papers 001 and 004 over 9 and 25 repetitions).
* :func:`bootstrap_mean_interval`: the percentile bootstrap interval of a mean
  (``scipy.stats.bootstrap(method="percentile")``, seeded so that a re-analysis gives the same
  bounds).  Its bounds are means of resamples, so they lie within [min, max] of the values: an
  interval of non-negative figures (downtimes, durations, volumes) never goes below 0, which the
  symmetric t interval does for skewed small samples.  With few values it is narrower than the
  t interval and covers less than its nominal level (Efron and Tibshirani 1993, ch. 13): it is
  the interval the plots draw, beside the t interval in the tables, not a replacement for it.
* :func:`bootstrap_ratio_interval`: the same for the ratio of two independent samples' means
  (the IPv6/IPv4 throughput ratio of a baseline).
* :func:`wilson_interval`: the Wilson score interval of a proportion k/n (Wilson 1927), from
  ``scipy.stats.binomtest(k, n).proportion_ci(method="wilson")``.
* :func:`mann_whitney_p`: p-value of the Mann–Whitney U test (Mann and Whitney 1947) from
  ``scipy.stats.mannwhitneyu``, exact wherever that is affordable: without ties the exact null
  distribution of U (``method="exact"``); with ties the exact permutation distribution of U over
  all C(n + m, n) splits of the pooled sample (``scipy.stats.PermutationMethod`` with every
  split enumerated, or, when one sample is a single value, the uniform distribution of its
  midrank over the pooled midranks from ``scipy.stats.rankdata``) when there are at most
  :data:`MAX_EXACT_SPLITS` splits; beyond that, with ties, the normal approximation with tie
  correction and continuity correction (``method="asymptotic"``), as scipy's documentation
  recommends for tied samples that are not small.

Holm's step-down procedure (Holm 1979) and the binomial tail of the nightly decision are in
:mod:`analysis.stats.regression`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy import stats

#: enumerate the permutation distribution of tied samples up to this many splits (10 vs 10 runs:
#: 184,756 splits, under 2 s on 2 cores); larger tied samples get the normal approximation
MAX_EXACT_SPLITS = 200_000
ALTERNATIVES = ("two-sided", "greater", "less")


def t_half_width(sd: float, n: int, confidence: float = 0.95) -> float:
    """Half-width of the Student-t ``confidence`` interval of the mean of ``n`` >= 2 values
    whose sample standard deviation (ddof = 1) is ``sd``."""
    if n < 2:
        raise ValueError(f"a t interval needs at least 2 values, not {n}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence {confidence} must be in (0, 1)")
    return float(stats.t.ppf(0.5 + confidence / 2.0, n - 1)) * sd / math.sqrt(n)


#: resamples of :func:`bootstrap_mean_interval` and its fixed seed
BOOTSTRAP_RESAMPLES = 9999
BOOTSTRAP_SEED = 20090817  # paper 004's date (SIGCOMM VISA workshop, 17 August 2009)


def bootstrap_mean_interval(values: Sequence[float], confidence: float = 0.95) -> tuple[float, float] | None:
    """Percentile bootstrap ``confidence`` interval of the mean of ``values`` (finite floats);
    None for fewer than 2 values; (v, v) when all values are equal.  The bounds lie within
    [min(values), max(values)]."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence {confidence} must be in (0, 1)")
    x = np.asarray(values, dtype=float)
    if x.size < 2:
        return None
    if not np.all(np.isfinite(x)):
        raise ValueError("bootstrap_mean_interval takes finite values only")
    if np.all(x == x[0]):
        return float(x[0]), float(x[0])
    res = stats.bootstrap(
        (x,),
        np.mean,
        n_resamples=BOOTSTRAP_RESAMPLES,
        confidence_level=confidence,
        method="percentile",
        rng=np.random.default_rng(BOOTSTRAP_SEED),
    )
    lo, hi = float(res.confidence_interval.low), float(res.confidence_interval.high)
    return max(lo, float(x.min())), min(hi, float(x.max()))


def bootstrap_ratio_interval(
    x: Sequence[float], y: Sequence[float], confidence: float = 0.95
) -> tuple[float, float] | None:
    """Percentile bootstrap ``confidence`` interval of mean(x) / mean(y) for two independent
    samples (``scipy.stats.bootstrap`` resampling each within itself, seeded as
    :func:`bootstrap_mean_interval`); None for fewer than 2 values in either or a resample mean
    of y that is not positive."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence {confidence} must be in (0, 1)")
    a, b = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if a.size < 2 or b.size < 2 or not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))) or not np.all(b > 0):
        return None
    if np.all(a == a[0]) and np.all(b == b[0]):
        return float(a[0] / b[0]), float(a[0] / b[0])
    res = stats.bootstrap(
        (a, b),
        lambda u, v, axis=-1: np.mean(u, axis=axis) / np.mean(v, axis=axis),
        n_resamples=BOOTSTRAP_RESAMPLES,
        confidence_level=confidence,
        method="percentile",
        paired=False,
        rng=np.random.default_rng(BOOTSTRAP_SEED),
    )
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def wilson_interval(k: int, n: int, confidence: float = 0.95) -> tuple[float, float] | None:
    """Wilson score interval (two-sided, ``confidence``) of the proportion k/n; None when n == 0."""
    if n <= 0:
        return None
    ci = stats.binomtest(k, n).proportion_ci(confidence_level=confidence, method="wilson")
    return float(ci.low), float(ci.high)


def mann_whitney_p(x: Sequence[float], y: Sequence[float], alternative: str = "two-sided") -> float:
    """p-value of the Mann–Whitney U test of ``x`` against ``y`` (``alternative`` "greater":
    x tends to be larger; "less"; "two-sided"); exact or approximate as the module docstring says."""
    if alternative not in ALTERNATIVES:
        raise ValueError(f"alternative {alternative!r} must be one of {', '.join(ALTERNATIVES)}")
    a, b = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if a.size == 0 or b.size == 0:
        raise ValueError("both samples must be non-empty")
    pooled = np.concatenate([a, b])
    if np.unique(pooled).size == pooled.size:
        method: str | stats.PermutationMethod = "exact"
    elif min(a.size, b.size) == 1:
        return _lone_value_p(stats.rankdata(pooled), a.size == 1, alternative)
    elif math.comb(pooled.size, a.size) <= MAX_EXACT_SPLITS:
        method = stats.PermutationMethod(n_resamples=np.inf)
    else:
        method = "asymptotic"
    return float(stats.mannwhitneyu(a, b, alternative=alternative, method=method).pvalue)


def _lone_value_p(ranks: np.ndarray, lone_is_x: bool, alternative: str) -> float:
    """The exact permutation p when one sample is a single value (``scipy.stats.permutation_test``
    needs two per sample): that value's midrank (``ranks[0]`` when it is x's, else ``ranks[-1]``)
    is equally likely to be any of the pooled midranks ``ranks``."""
    r = ranks[0] if lone_is_x else ranks[-1]
    larger, smaller = float(np.mean(ranks >= r)), float(np.mean(ranks <= r))
    greater, less = (larger, smaller) if lone_is_x else (smaller, larger)
    if alternative == "greater":
        return greater
    if alternative == "less":
        return less
    return min(1.0, 2.0 * min(greater, less))
