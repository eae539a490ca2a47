"""Small-sample statistics without SciPy: Student-t quantiles, Wilson intervals, the exact
Mann–Whitney U (rank-sum permutation) test with ties, and Fisher's exact test.  Pure functions."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

_BETACF_MAX_ITER = 300
_BETACF_EPS = 3e-16


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the regularised incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, _BETACF_MAX_ITER + 1):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c if abs(1.0 + aa / c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c if abs(1.0 + aa / c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < _BETACF_EPS:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """Regularised incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    ln_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    front = math.exp(ln_front)
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """CDF of Student's t distribution with ``df`` degrees of freedom."""
    if df <= 0:
        raise ValueError("degrees of freedom must be > 0")
    tail = 0.5 * betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t > 0 else tail


def t_quantile(p: float, df: float) -> float:
    """Inverse CDF of Student's t (bisection on :func:`t_cdf`; |error| < 1e-12)."""
    if not 0.0 < p < 1.0:
        raise ValueError("p must be in (0, 1)")
    if p == 0.5:
        return 0.0
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12:
            break
    return 0.5 * (lo + hi)


def normal_sf(z: float) -> float:
    """Upper tail of the standard normal distribution."""
    return 0.5 * math.erfc(z / math.sqrt(2.0))


def wilson_interval(k: int, n: int, confidence: float = 0.95) -> tuple[float, float] | None:
    """Wilson score interval of a proportion k/n (None when n == 0)."""
    if n <= 0:
        return None
    z = _normal_quantile(0.5 + confidence / 2.0)
    p = k / n
    denom = 1.0 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def _normal_quantile(p: float) -> float:
    lo, hi = -40.0, 40.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if 1.0 - normal_sf(mid) < p:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def midranks(values: Sequence[float]) -> np.ndarray:
    """Ranks 1..N of ``values``; tied values share the mean of their ranks."""
    x = np.asarray(values, dtype=float)
    order = np.argsort(x, kind="mergesort")
    ranks = np.empty(x.size, dtype=float)
    sx = x[order]
    i = 0
    while i < x.size:
        j = i
        while j + 1 < x.size and sx[j + 1] == sx[i]:
            j += 1
        ranks[order[i : j + 1]] = (i + j) / 2.0 + 1.0
        i = j + 1
    return ranks


def mann_whitney_greater(x: Sequence[float], y: Sequence[float]) -> tuple[float, float]:
    """One-sided Mann–Whitney U test that ``x`` tends to be larger than ``y``.

    Returns (U of x, p).  The p-value is exact: the permutation distribution of x's rank sum
    over all C(n+m, n) splits of the pooled midranks (so ties are handled exactly, and the test
    never rejects more often than its level under the null), counted by dynamic programming."""
    nx, ny = len(x), len(y)
    if nx == 0 or ny == 0:
        raise ValueError("both samples must be non-empty")
    ranks2 = np.rint(2.0 * midranks([*x, *y])).astype(np.int64)  # midranks are multiples of 1/2
    observed = int(ranks2[:nx].sum())
    u_x = observed / 2.0 - nx * (nx + 1) / 2.0
    total = int(ranks2.sum())
    # counts[k, s] = number of k-subsets of the pooled sample with doubled rank sum s
    counts = np.zeros((nx + 1, total + 1), dtype=float)
    counts[0, 0] = 1.0
    for i, r in enumerate(ranks2):
        for k in range(min(i + 1, nx), 0, -1):
            counts[k, r:] += counts[k - 1, : total + 1 - r]
    dist = counts[nx]
    p = float(dist[observed:].sum() / dist.sum())
    return u_x, min(1.0, p)


def min_p_value(nx: int, ny: int) -> float:
    """Smallest p-value the exact one-sided rank-sum test can reach with these sample sizes."""
    return 1.0 / math.comb(nx + ny, nx)


def fisher_greater(k_x: int, n_x: int, k_y: int, n_y: int) -> float:
    """One-sided Fisher exact test that proportion k_x/n_x exceeds k_y/n_y (hypergeometric tail)."""
    if n_x <= 0 or n_y <= 0:
        raise ValueError("both groups must be non-empty")
    k = k_x + k_y
    n = n_x + n_y
    denom = math.comb(n, k)
    tail = sum(math.comb(n_x, i) * math.comb(n_y, k - i) for i in range(k_x, min(k, n_x) + 1))
    return min(1.0, tail / denom)
