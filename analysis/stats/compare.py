"""A against B, one metric at one grid point at a time, then all comparisons of a report together
(pure functions: arrays in, dataclasses out).

For one metric at one point, the completed runs of A and of B are two small samples (often 5
against 5) of figures that are not normal (downtimes, durations: skewed, with outliers).
:func:`compare_samples` gives

* the **Hodges–Lehmann shift** B − A (Hodges and Lehmann 1963): the median of the n_a·n_b
  pairwise differences b_j − a_i, with its **exact distribution-free confidence interval**
  [D_(k), D_(n_a·n_b − k + 1)] of the sorted differences D (Bauer 1972; Hollander and Wolfe,
  *Nonparametric Statistical Methods*, 3rd ed., §4.3), k from the exact null distribution of the
  Mann–Whitney U statistic (``scipy.stats.mannwhitneyu``, ``method="exact"``).  The shift rather
  than the difference of the two medians, because it is the estimate that belongs to the rank
  test reported beside it and it has an exact interval: for any continuous distribution that B
  shifts, the interval covers the shift with at least the nominal probability at every n, and it
  excludes 0 exactly when the exact two-sided rank test rejects at 1 − confidence (untied
  samples).  A bootstrap interval of the difference of medians (``scipy.stats.bootstrap``) has
  neither property with 5 runs a side: the bootstrap distribution of a median of 5 takes at most 5
  values and its percentile and BCa intervals undercover.  The two medians are reported as well.
  Ties (values repeated, e.g. counts) leave the interval's coverage approximate, since k comes
  from the untied distribution.  When the samples are so small that even the widest interval,
  the smallest to the largest difference, covers less than the confidence (n_a = n_b = 3: 90 %),
  there is no interval: None, and ``ci_note`` says why.
* **Cliff's delta** (Cliff 1993) δ = P(B > A) − P(B < A) = 2·U_B / (n_a·n_b) − 1, with U_B the
  Mann–Whitney statistic of B from ``scipy.stats.mannwhitneyu`` (ties count ½); δ = 2·Â − 1 with
  Vargha and Delaney's Â (2000).  It is ordinal, needs no normality and no unit, and is defined
  at any n.  Conventional reading (Romano et al. 2006): |δ| < 0.147 negligible, < 0.33 small,
  < 0.474 medium, otherwise large.
* the two-sided Mann–Whitney U p (:func:`analysis.stats.inference.mann_whitney_p`: exact, or the
  exact permutation distribution with ties) and the smallest p the test can reach with these
  sample sizes, 2 / C(n_a + n_b, n_a).  When that exceeds alpha the comparison is
  **undecidable** with that n: no outcome of the runs could have been significant, so a large p
  is not evidence of no difference.

:func:`compare_sides` adds what the samples leave out: a side without runs, without completed
runs or without any figure is *not compared* (the reason is given; absent is never 0), and so is
a side with a figure known only by a bound (censored: ``analysis.qualify``): a rank test and a
shift would take the bound for a value, which at the censored end (a stall cut by the trace,
traffic that never came back) is the value that matters most.

:func:`adjust` decides the comparisons of one report together with **Holm's** step-down procedure
(Holm 1979) at family-wise level alpha: adjusted p_(i) = max over j <= i of min(1, (m − j + 1)·p_(j))
for the m comparisons of the family sorted by p, significant when it is <= alpha.  Holm rather
than Benjamini–Hochberg: a row marked significant should be a difference with probability
1 − alpha for the whole table, as in the nightly decision (:mod:`analysis.stats.regression`);
Holm holds under any dependence between the tests, and the metrics of one point are strongly
dependent (counters, packets and the outage measure the same gap), which BH's guarantee does not
cover without positive regression dependence; with the dozen comparisons of a report, what FDR
control would gain is small.  ``scipy.stats.false_discovery_control`` offers BH and BY only, and
:func:`analysis.stats.regression.holm` re-decides nightly verdicts (with a minimum effect), so
the adjusted p-values are computed here (three array operations).

The family.  A rank test on small samples is discrete: with 5 runs against 5 its p is never below
2/252 = 0.0079, so among 13 comparisons (Holm's first level 0.05/13 = 0.0038) no row could ever be
significant.  Following Tarone (1990), the family is the comparisons whose smallest reachable p
is <= alpha / K, with K the smallest number such that at most K comparisons reach alpha / K
(:func:`tarone_level`); the others are **undecidable in this table**.  Which comparisons are in
the family depends only on the sample sizes, never on the values, so Holm over it keeps the
family-wise level, and a comparison left out could not have been significant at Tarone's level
anyway (one whose n cannot reach alpha itself is undecidable whatever the table).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
from scipy import stats

from analysis.stats.inference import mann_whitney_p

ALPHA = 0.05
CONFIDENCE = 0.95
CORRECTION = "holm-tarone"  # Holm over Tarone's family
#: Romano et al. (2006): upper ends of |Cliff's delta| for negligible, small and medium effects
CLIFF_THRESHOLDS = ((0.147, "negligible"), (0.33, "small"), (0.474, "medium"))

SIGNIFICANT = "significant"
NOT_SIGNIFICANT = "not significant"
UNDECIDABLE = "undecidable"
NOT_COMPARED = "not compared"
TESTED = "tested"  # before adjust(): decidable, awaiting the correction
IN_THIS_TABLE = "undecidable in this table"  # adjust()'s reason for a comparison left out of the family
VERDICTS = (SIGNIFICANT, NOT_SIGNIFICANT, UNDECIDABLE, NOT_COMPARED)


@dataclass(frozen=True)
class Side:
    """One side's runs of one metric at one point.

    values: the figures of the completed runs that measured it (point values only);
    n_runs: runs at the point (any status); n_completed: completed runs;
    n_censored: completed runs whose figure is known only by a bound (not in ``values``;
    ``bound_note`` describes the bounds, e.g. '≥ 3050 ms'); the other completed runs without a
    figure are absent, ``absent_reasons`` says why (their qualifiers' texts); n_incomplete: values
    built from incomplete instrument records (in ``values``, and said in the notes)."""

    values: tuple[float, ...] = ()
    n_runs: int = 0
    n_completed: int = 0
    n_censored: int = 0
    bound_note: str = ""
    absent_reasons: tuple[str, ...] = ()
    n_incomplete: int = 0

    @property
    def n_absent(self) -> int:
        """Completed runs with neither a value nor a bound."""
        return self.n_completed - len(self.values) - self.n_censored


@dataclass(frozen=True)
class Comparison:
    """B against A for one metric at one point (None where a figure is not defined).

    shift: Hodges–Lehmann estimate of B − A; ci_low/ci_high: its exact interval, whose actual
    coverage is ci_confidence (>= the nominal ``confidence``); ci_note: why there is none;
    cliffs_delta: P(B > A) − P(B < A), effect: its conventional size; p: two-sided Mann–Whitney p;
    min_p: the smallest p these sample sizes allow; p_adjusted: Holm-adjusted p over ``family``
    comparisons (``correction``); verdict: one of :data:`VERDICTS` (``tested`` before
    :func:`adjust`); reason: why, in words; notes: what the samples leave out (absent runs)."""

    n_a: int
    n_b: int
    median_a: float | None = None
    median_b: float | None = None
    shift: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    ci_confidence: float | None = None
    ci_note: str = ""
    cliffs_delta: float | None = None
    effect: str | None = None
    p: float | None = None
    min_p: float | None = None
    p_adjusted: float | None = None
    correction: str = ""
    family: int = 0
    alpha: float = ALPHA
    confidence: float = CONFIDENCE
    verdict: str = NOT_COMPARED
    reason: str = ""
    notes: str = ""

    @property
    def significant(self) -> bool:
        """Significant after the correction."""
        return self.verdict == SIGNIFICANT


def min_two_sided_p(n_a: int, n_b: int) -> float:
    """The smallest two-sided p of the exact rank-sum test with n_a and n_b untied values: the two
    most extreme of the C(n_a + n_b, n_a) equally likely splits (ties can only raise it)."""
    return min(1.0, 2.0 / math.comb(n_a + n_b, n_a))


def runs_needed(comparisons: int, alpha: float = ALPHA) -> int:
    """The smallest n such that n runs on each side let the exact rank test reach alpha / comparisons
    (then every one of ``comparisons`` comparisons with that many runs is in Tarone's family)."""
    n = 1
    while min_two_sided_p(n, n) > alpha / max(1, comparisons):
        n += 1
    return n


def u_cdf(j: int, m: int, n: int) -> float:
    """P(U <= j) under the null hypothesis for the Mann–Whitney U of m against n untied values,
    from scipy's exact distribution: queried with a pair of untied samples whose U is exactly j
    (x_i = c_i − ½ among y = 0, 1, ..., n − 1 is above c_i of the y; the c_i sum to j)."""
    if j < 0:
        return 0.0
    if j >= m * n:
        return 1.0
    y = np.arange(n, dtype=float)
    counts, left = [], j
    for _ in range(m):
        counts.append(min(n, left))
        left -= counts[-1]
    x = np.array([c - 0.5 + 1e-3 * i for i, c in enumerate(counts)])
    return float(stats.mannwhitneyu(x, y, alternative="less", method="exact").pvalue)


def hodges_lehmann(
    a: Sequence[float], b: Sequence[float], confidence: float = CONFIDENCE
) -> tuple[float, float | None, float | None, float | None, str]:
    """(shift, ci_low, ci_high, actual coverage, note) of B − A, as the module docstring says; the
    interval is None, with the note saying why, when no exact interval reaches ``confidence``."""
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    diffs = np.sort(np.subtract.outer(y, x).ravel())
    shift = float(np.median(diffs))
    m, n = x.size, y.size
    tail = (1.0 - confidence) / 2.0
    k = 0  # the interval is [D_(k), D_(mn-k+1)] with P(U <= k - 1) <= tail, k as large as it goes
    while k < m * n // 2 and u_cdf(k, m, n) <= tail:
        k += 1
    if k == 0:
        widest = 1.0 - 2.0 * u_cdf(0, m, n)
        note = (
            f"n={m} vs {n}: no {confidence * 100:g} % interval (even the smallest to the largest difference "
            f"covers only {widest * 100:.1f} %)"
        )
        return shift, None, None, None, note
    coverage = 1.0 - 2.0 * u_cdf(k - 1, m, n)
    return shift, float(diffs[k - 1]), float(diffs[m * n - k]), coverage, ""


def cliffs_delta(a: Sequence[float], b: Sequence[float]) -> float:
    """P(B > A) − P(B < A) from the Mann–Whitney U statistic of B (scipy; ties count ½)."""
    u_b = float(stats.mannwhitneyu(b, a, method="asymptotic").statistic)
    return 2.0 * u_b / (len(a) * len(b)) - 1.0


def effect_size_label(delta: float) -> str:
    """Romano et al. (2006): negligible, small, medium or large."""
    for upper, label in CLIFF_THRESHOLDS:
        if abs(delta) < upper:
            return label
    return "large"


def _finite(values: Sequence[float], side: str) -> np.ndarray:
    x = np.asarray(values, dtype=float).ravel()
    if not np.all(np.isfinite(x)):
        raise ValueError(f"{side}: values must be finite numbers")
    return x


def compare_samples(
    a: Sequence[float], b: Sequence[float], alpha: float = ALPHA, confidence: float = CONFIDENCE
) -> Comparison:
    """Compare the point values ``a`` and ``b`` (both non-empty, finite): medians, Hodges–Lehmann
    shift B − A with its exact interval, Cliff's delta, two-sided Mann–Whitney p; the verdict is
    ``undecidable`` when no p could reach ``alpha`` with these sample sizes, else ``tested``
    (decided by :func:`adjust`)."""
    if not 0.0 < alpha < 1.0 or not 0.0 < confidence < 1.0:
        raise ValueError(f"alpha {alpha} and confidence {confidence} must be in (0, 1)")
    x, y = _finite(a, "A"), _finite(b, "B")
    if x.size == 0 or y.size == 0:
        raise ValueError("both samples must be non-empty (compare_sides says why one is not)")
    shift, low, high, coverage, note = hodges_lehmann(x, y, confidence)
    delta = cliffs_delta(x, y)
    p = mann_whitney_p(y, x, "two-sided")
    min_p = min_two_sided_p(x.size, y.size)
    common = {
        "n_a": int(x.size), "n_b": int(y.size), "median_a": float(np.median(x)), "median_b": float(np.median(y)),
        "shift": shift, "ci_low": low, "ci_high": high, "ci_confidence": coverage, "ci_note": note,
        "cliffs_delta": delta, "effect": effect_size_label(delta), "p": p, "min_p": min_p, "alpha": alpha,
        "confidence": confidence,
    }  # fmt: skip
    if min_p > alpha:
        why = (
            f"undecidable with n={x.size} vs {y.size}: the smallest two-sided p these sample sizes allow is "
            f"{min_p:.3g} > {alpha:g}"
        )
        return Comparison(**common, verdict=UNDECIDABLE, reason=why)
    return Comparison(**common, verdict=TESTED)


def _missing(name: str, s: Side) -> str:
    """Why side ``name`` has nothing to compare ('' when it has values or only bounds)."""
    if s.values or s.n_censored:
        return ""
    if s.n_runs == 0:
        return f"{name} has no runs at this point"
    if s.n_completed == 0:
        return f"{name}: no completed runs ({s.n_runs} failed or stopped)"
    why = "; ".join(s.absent_reasons) or "no figure recorded"
    return f"{name}: no values ({s.n_completed} completed runs without the figure: {why})"


def compare_sides(a: Side, b: Side, alpha: float = ALPHA, confidence: float = CONFIDENCE) -> Comparison:
    """:func:`compare_samples` of the sides' values, or ``not compared`` with the reason when a side
    has no values or has runs known only by a bound; runs that did not complete and completed runs
    without the figure are left out and counted in the ``notes`` of a compared row ('A: 1 of 5
    completed runs without the figure, left out (why)')."""
    medians = {
        "median_a": float(np.median(a.values)) if a.values else None,
        "median_b": float(np.median(b.values)) if b.values else None,
    }
    counts = {"n_a": len(a.values), "n_b": len(b.values), "alpha": alpha, "confidence": confidence}
    missing = [w for w in (_missing("A", a), _missing("B", b)) if w]
    if missing:
        return Comparison(**counts, **medians, verdict=NOT_COMPARED, reason="; ".join(missing))
    bounds = [
        f"{name}: {s.n_censored} of {s.n_completed} completed runs known only by a bound"
        + (f" ({s.bound_note})" if s.bound_note else "")
        for name, s in (("A", a), ("B", b))
        if s.n_censored
    ]
    if bounds:
        why = "; ".join(bounds) + ": a rank comparison would take a bound for a value"
        return Comparison(**counts, **medians, verdict=NOT_COMPARED, reason=why)
    left_out = []
    for name, s in (("A", a), ("B", b)):
        if s.n_runs > s.n_completed:
            left_out.append(f"{name}: {s.n_runs - s.n_completed} of {s.n_runs} runs not completed, left out")
        if s.n_absent:
            why = f" ({'; '.join(s.absent_reasons)})" if s.absent_reasons else ""
            left_out.append(f"{name}: {s.n_absent} of {s.n_completed} completed runs without the figure, left out{why}")
        if s.n_incomplete:
            left_out.append(f"{name}: {s.n_incomplete} of {len(s.values)} values from incomplete instrument records")
    return replace(compare_samples(a.values, b.values, alpha, confidence), notes="; ".join(left_out))


def holm_adjusted(p: Sequence[float]) -> list[float]:
    """Holm's adjusted p-values, in the order of ``p``."""
    ps = np.asarray(p, dtype=float)
    order = np.argsort(ps, kind="stable")
    m = ps.size
    steps = np.minimum(1.0, (m - np.arange(m)) * ps[order])
    out = np.empty(m)
    out[order] = np.maximum.accumulate(steps)
    return [float(v) for v in out]


def tarone_level(min_ps: Sequence[float], alpha: float = ALPHA) -> int:
    """Tarone's (1990) K for discrete tests whose smallest reachable p-values are ``min_ps``: the
    smallest K such that at most K of them are <= alpha / K (at most ``len(min_ps)``; 0 when empty)."""
    for k in range(1, len(min_ps) + 1):
        if sum(1 for p in min_ps if p <= alpha / k) <= k:
            return k
    return 0


def adjust(comparisons: Sequence[Comparison], alpha: float = ALPHA) -> list[Comparison]:
    """Decide the ``tested`` comparisons together at family-wise level ``alpha``: Holm over the
    family of those whose sample sizes can reach Tarone's level alpha / K (:func:`tarone_level`);
    a tested comparison outside it becomes ``undecidable`` in this table, with the reason.  The
    others (undecidable with their n, not compared) are returned undecided.  Every comparison
    gets the method and the family size."""
    out = [replace(c, correction=CORRECTION, alpha=alpha) for c in comparisons]
    ps: dict[int, tuple[float, float]] = {}  # tested: (p, the smallest p its n allows)
    for i, c in enumerate(comparisons):
        if c.verdict != TESTED:
            continue
        if c.p is None or c.min_p is None:  # a missing p is not p = 0: not decided
            out[i] = replace(out[i], verdict=UNDECIDABLE, reason="no p-value computed")
            continue
        ps[i] = (float(c.p), float(c.min_p))
    tested = list(ps)
    min_ps = {i: ps[i][1] for i in tested}
    k = tarone_level(list(min_ps.values()), alpha)
    family = [i for i in tested if min_ps[i] <= alpha / k]
    m = len(family)
    out = [replace(c, family=m) for c in out]
    for i in tested:
        if i not in family:
            c = out[i]
            why = (
                f"{IN_THIS_TABLE}: with n={c.n_a} vs {c.n_b} the smallest p ({min_ps[i]:.3g}) is above "
                f"{alpha:g}/{k} = {alpha / k:.3g}, the level of the {m} of {len(tested)} tested comparisons whose n "
                "can reach it (Tarone 1990)"
            )
            out[i] = replace(c, verdict=UNDECIDABLE, reason=why)
    for i, p_adj in zip(family, holm_adjusted([ps[i][0] for i in family]), strict=True):
        level = f"Holm-adjusted p {p_adj:.3g} over {m} comparisons"
        if p_adj <= alpha:
            verdict, why = SIGNIFICANT, f"{level} <= {alpha:g}"
        else:
            verdict, why = NOT_SIGNIFICANT, f"{level} > {alpha:g}"
        out[i] = replace(out[i], p_adjusted=p_adj, verdict=verdict, reason=why)
    return out
