"""The nightly regression decision (pure functions): tonight's runs of each matrix point against
the pooled runs of every accepted night of that point.

Metric checks.  A metric of a point regresses when BOTH
  1. the one-sided Mann–Whitney U test (``scipy.stats.mannwhitneyu``, ``method="exact"``: the
     exact null distribution of U; tied values count ½ in U and are then judged against the
     distribution without ties, which is conservative: it rejects less often than its level) says
     tonight's runs are worse than the accepted ones, significant after Holm's step-down
     procedure over all metric checks of the night at family-wise level ``alpha``, and
  2. tonight's median is worse than the accepted median by at least the rule's minimum effect,
     ``min_abs`` (the metric's unit) AND ``min_rel`` (fraction of the accepted median).
With exchangeable runs the test bounds the false-alarm rate by ``alpha`` whatever the noise
distribution; the minimum effect keeps shifts that do not matter, and the drift between nights
that a pooled test over runs does not model, from failing a night.

Migration failures.  Only migration attempts count (completed runs and runs that failed in the
migration or after it, meta.json ``failure_class`` ``migration``/``post-migration``; a failed run
without a class counts as ``migration``).  A point fails the night when tonight has at least
``min_failures`` failed attempts and, with the accepted failure rate of the point taken as at
least ``min_rate``, that many failures or more in tonight's attempts have binomial probability
``scipy.stats.binom.sf(k - 1, n, rate) <= alpha``.  Runs that failed before a migration
(``setup``) are not attempts: they make an ``error`` verdict (a JUnit error), never a regression.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from scipy import stats

from analysis.stats.aggregate import ATTEMPT_CLASSES

WORSE = ("higher", "lower")
MIN_N = 2
FAILURES = "migration_failures"
SETUP = "setup_failures"
#: a failed run without failure_class (recorded before the field existed) counts as this class
DEFAULT_FAILURE_CLASS = "migration"
SETUP_CLASS = "setup"


@dataclass(frozen=True)
class Rule:
    """How to judge one metric: which direction is worse and the minimum effect that matters."""

    metric: str
    worse: str = "higher"
    min_rel: float = 0.0
    min_abs: float = 0.0

    def __post_init__(self) -> None:
        if self.worse not in WORSE:
            raise ValueError(f"{self.metric}: worse must be 'higher' or 'lower', not {self.worse!r}")
        if self.min_rel < 0 or self.min_abs < 0:
            raise ValueError(f"{self.metric}: min_rel and min_abs must be >= 0")


@dataclass(frozen=True)
class FailureRule:
    """When migration failures fail a night (see the module docstring)."""

    min_failures: int = 2
    alpha: float = 0.01
    min_rate: float = 0.02

    def __post_init__(self) -> None:
        if self.min_failures < 1:
            raise ValueError(f"min_failures={self.min_failures} must be at least 1")
        if not 0 < self.alpha < 1 or not 0 <= self.min_rate < 1:
            raise ValueError("alpha must be in (0, 1) and min_rate in [0, 1)")


@dataclass(frozen=True)
class Verdict:
    """Outcome of one check: 'pass', 'regression', 'error' or 'skipped' (with the numbers behind it)."""

    metric: str
    status: str
    reason: str
    n_base: int = 0
    n_cand: int = 0
    median_base: float | None = None
    median_cand: float | None = None
    worse_by: float | None = None
    worse_by_rel: float | None = None
    p_value: float | None = None
    effect: bool = False  # the minimum effect is reached (and tonight is worse)
    desc: str = ""
    min_effect: str = ""

    @property
    def regression(self) -> bool:
        """True when this check failed."""
        return self.status == "regression"


@dataclass(frozen=True)
class PointRuns:
    """One matrix point: its rules, the accepted runs, tonight's runs (history row mappings with
    ``status``, ``failure_class`` and the metric columns) and why it cannot be compared, if so."""

    label: str
    rules: tuple[Rule, ...]
    accepted: Sequence[Mapping[str, Any]]
    tonight: Sequence[Mapping[str, Any]]
    skip: str | None = None


def _clean(values: Sequence[Any]) -> list[float]:
    out = []
    for v in values:
        if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v):
            out.append(float(v))
    return out


def _fmt(x: float | None) -> str:
    return "–" if x is None else f"{x:.4g}"


def min_p_value(n_cand: int, n_base: int) -> float:
    """Smallest p-value the exact one-sided rank-sum test reaches with these sample sizes."""
    return 1.0 / math.comb(n_cand + n_base, n_cand)


def detectable(n_base: int, n_cand: int, alpha: float) -> bool:
    """Whether the exact rank-sum test can reach p <= alpha at all with these sample sizes."""
    return n_base > 0 and n_cand > 0 and min_p_value(n_cand, n_base) <= alpha


def check_metric(
    rule: Rule, accepted: Sequence[Any], tonight: Sequence[Any], alpha: float, tonight_bounds: int = 0
) -> Verdict:
    """Judge one metric at one point (None/NaN values are ignored).  ``tonight_bounds`` says how
    many of tonight's values are lower bounds of a higher-is-worse metric (so tonight's median is
    itself a lower bound, and the check can only understate a regression)."""
    base, cand = _clean(accepted), _clean(tonight)
    common = {"metric": rule.metric, "n_base": len(base), "n_cand": len(cand)}
    if len(base) < MIN_N or len(cand) < MIN_N:
        reason = f"not enough data (accepted n={len(base)}, tonight n={len(cand)}; need {MIN_N} each)"
        return Verdict(status="skipped", reason=reason, **common)
    if not detectable(len(base), len(cand), alpha):
        reason = (
            f"samples too small for alpha {alpha:g}: the rank test cannot go below p="
            f"{min_p_value(len(cand), len(base)):.4f} (accepted n={len(base)}, tonight n={len(cand)}); "
            "accept more nights"
        )
        return Verdict(status="skipped", reason=reason, **common)
    mb, mc = float(np.median(base)), float(np.median(cand))
    sign = 1.0 if rule.worse == "higher" else -1.0
    worse_by = sign * (mc - mb)
    worse_rel = worse_by / abs(mb) if mb != 0 else (math.inf if worse_by > 0 else 0.0)
    p = float(
        stats.mannwhitneyu(
            sign * np.asarray(cand), sign * np.asarray(base), alternative="greater", method="exact"
        ).pvalue
    )
    effect = worse_by >= rule.min_abs and worse_rel >= rule.min_rel and worse_by > 0
    rel = f"{worse_rel:+.0%}" if math.isfinite(worse_rel) else "new"
    at_least = ">= " if tonight_bounds else ""
    desc = f"median {at_least}{_fmt(mc)} vs accepted {_fmt(mb)} (worse by {_fmt(worse_by)}, {rel}), U-test p={p:.3g}"
    if tonight_bounds:
        desc += f" ({tonight_bounds} of tonight's {len(cand)} values are lower bounds)"
    nums = {"median_base": mb, "median_cand": mc, "worse_by": worse_by, "worse_by_rel": worse_rel, "p_value": p}
    min_effect = f"+{rule.min_abs:g} and {rule.min_rel:+.0%}"
    v = Verdict(status="pass", reason="", effect=effect, desc=desc, min_effect=min_effect, **common, **nums)
    return _decide(v, alpha)


def _decide(v: Verdict, level: float, holm_m: int | None = None) -> Verdict:
    """Status and reason of a verdict whose p-value is compared with ``level``."""
    if v.p_value is None:  # skipped: nothing to decide
        return v
    where = f" after Holm over {holm_m} checks" if holm_m else ""
    if v.p_value <= level and v.effect:
        return replace(v, status="regression", reason=f"REGRESSION: {v.desc} <= {level:.3g}{where}")
    if (v.worse_by or 0) <= 0:
        why = "not worse"
    elif v.p_value > level:
        why = f"not significant{where} (p > {level:.3g})"
    else:
        why = f"below the minimum effect ({v.min_effect})"
    return replace(v, status="pass", reason=f"{v.desc}: {why}")


def holm(verdicts: Sequence[Verdict], alpha: float) -> list[Verdict]:
    """Re-decide the (non-skipped) verdicts of one night with Holm's step-down procedure at
    family-wise level ``alpha``: the k-th smallest p-value (k = 0, 1, ...) is compared with
    alpha / (m − k) until the first one that is not significant; later ones are not either.
    The minimum effect still applies."""
    tested = sorted((i for i, v in enumerate(verdicts) if v.p_value is not None), key=lambda i: verdicts[i].p_value)
    m = len(tested)
    out = list(verdicts)
    stopped = False
    for k, i in enumerate(tested):
        v = verdicts[i]
        level = alpha / (m - k)
        earlier = stopped
        stopped = stopped or v.p_value > level
        if stopped and (v.worse_by or 0) > 0:
            why = "an earlier step was not significant" if earlier and v.p_value <= level else f"p > {level:.3g}"
            out[i] = replace(v, status="pass", reason=f"{v.desc}: not significant after Holm over {m} checks ({why})")
        else:
            out[i] = _decide(v, 0.0 if stopped else level, m)
    return out


def run_class(run: Mapping[str, Any]) -> str | None:
    """'completed', the failure class of a failed run ('migration' when it has none), or None
    for a run that is neither (interrupted by the operator)."""
    status = run.get("status")
    if status == "completed":
        return "completed"
    if status != "failed":
        return None
    cls = run.get("failure_class")
    return cls if isinstance(cls, str) and cls else DEFAULT_FAILURE_CLASS


@dataclass(frozen=True)
class Attempts:
    """Migration attempts of a set of runs and how many failed; setup failures apart."""

    n: int
    failed: int
    setup_failed: int


def count_attempts(runs: Sequence[Mapping[str, Any]]) -> Attempts:
    """Count migration attempts (completed + failed in or after the migration) and failures."""
    classes = [run_class(r) for r in runs]
    failed = sum(c in ATTEMPT_CLASSES for c in classes)
    return Attempts(failed + classes.count("completed"), failed, classes.count(SETUP_CLASS))


def check_failures(rule: FailureRule, accepted: Attempts, tonight: Attempts) -> Verdict:
    """Judge tonight's migration failures of one point against the accepted failure rate."""
    common = {"metric": FAILURES, "n_base": accepted.n, "n_cand": tonight.n}
    if accepted.n < 1 or tonight.n < 1:
        why = f"no migration attempts (accepted n={accepted.n}, tonight n={tonight.n})"
        return Verdict(status="skipped", reason=why, **common)
    k, n = tonight.failed, tonight.n
    rate_acc = accepted.failed / accepted.n
    rate = max(rate_acc, rule.min_rate)
    p = float(stats.binom.sf(k - 1, n, rate)) if k > 0 else 1.0
    desc = f"{k} of {n} migration attempts failed; accepted {accepted.failed}/{accepted.n}"
    if k > 0:
        desc += f", rate taken as {rate:.3g} (at least {rule.min_rate:g}): P(>= {k} failures) = {p:.3g}"
    nums = {"median_base": rate_acc, "median_cand": k / n, "worse_by": k / n - rate_acc, "p_value": p}
    v = Verdict(status="pass", reason="", effect=k >= rule.min_failures, desc=desc, **common, **nums)
    if v.effect and p <= rule.alpha:
        return replace(v, status="regression", reason=f"REGRESSION: {desc} <= {rule.alpha:g}")
    why = f"fewer than {rule.min_failures} failures" if not v.effect else f"p > {rule.alpha:g}"
    return replace(v, reason=f"{desc}: {why}")


def check_setup(runs: Sequence[Mapping[str, Any]]) -> Verdict | None:
    """An 'error' verdict when runs failed before their migration (never a regression); None
    when none did."""
    failed = [r for r in runs if run_class(r) == SETUP_CLASS]
    if not failed:
        return None
    first = str(failed[0].get("failure") or "no reason recorded")
    reason = f"{len(failed)} of {len(runs)} runs failed before the migration (setup; not attempts): {first}"
    return Verdict(SETUP, "error", reason, n_cand=len(runs))


def _values(rule: Rule, runs: Sequence[Mapping[str, Any]], bounds: bool = False) -> tuple[list[Any], int]:
    """The metric of the completed runs and how many of them are lower bounds: with ``bounds``
    (tonight's runs only), a higher-is-worse metric known only as a lower bound
    (``<metric>_lower``) counts as its bound, since the run was at least that bad; accepted runs
    never contribute a bound."""
    out, n_bounds = [], 0
    for r in runs:
        if r.get("status") != "completed":
            continue
        v = r.get(rule.metric)
        if v is None and bounds and rule.worse == "higher" and r.get(f"{rule.metric}_lower") is not None:
            v = r.get(f"{rule.metric}_lower")
            n_bounds += 1
        out.append(v)
    return out, n_bounds


def decide_ab(
    rules: Sequence[Rule], accepted: Sequence[Mapping[str, Any]], tonight: Sequence[Mapping[str, Any]], alpha: float
) -> list[Verdict]:
    """The in-night A/B: each metric of tonight's arm against the accepted commit's arm, both run
    in the same night (run rows as for :func:`decide_night`; only completed runs count, tonight's
    lower bounds as their bound).  Each check is decided at ``alpha`` on its own, outside the
    matrix's Holm family: the A/B is a separate test with its own level."""
    out = []
    for rule in rules:
        cand, n_bounds = _values(rule, tonight, bounds=True)
        out.append(check_metric(rule, _values(rule, accepted)[0], cand, alpha, n_bounds))
    return out


def decide_night(points: Sequence[PointRuns], alpha: float, failures: FailureRule) -> list[tuple[str, Verdict]]:
    """Every check of a night: per point its metric rules, ``migration_failures`` and, when runs
    failed before their migration, ``setup_failures`` (an error).  The metric checks of all
    points are decided together by Holm at ``alpha`` (a check whose sample sizes cannot reach
    Holm's first level, alpha / checks, is skipped: too few accepted nights); each point's
    failure check has its own level ``failures.alpha``."""
    out: list[tuple[str, Verdict]] = []
    metric_idx: list[int] = []
    for p in points:
        for rule in p.rules:
            if p.skip:
                out.append((p.label, Verdict(rule.metric, "skipped", p.skip, n_cand=len(p.tonight))))
                continue
            metric_idx.append(len(out))
            tonight, n_bounds = _values(rule, p.tonight, bounds=True)
            v = check_metric(rule, _values(rule, p.accepted)[0], tonight, alpha, n_bounds)
            out.append((p.label, v))
        attempts = count_attempts(p.tonight)
        if p.skip:
            out.append((p.label, Verdict(FAILURES, "skipped", p.skip, n_cand=attempts.n)))
        else:
            out.append((p.label, check_failures(failures, count_attempts(p.accepted), attempts)))
        setup = check_setup(p.tonight)
        if setup is not None:
            out.append((p.label, setup))
    tested = [i for i in metric_idx if out[i][1].p_value is not None]
    first = alpha / max(1, len(tested))
    for i in tested:
        v = out[i][1]
        if not detectable(v.n_base, v.n_cand, first):
            why = (
                f"accepted n={v.n_base} and tonight n={v.n_cand} cannot reach Holm's first level {first:.3g} "
                f"over {len(tested)} checks (the rank test's smallest p is {min_p_value(v.n_cand, v.n_base):.3g}): "
                f"accept more nights; {v.desc}"
            )
            out[i] = (out[i][0], replace(v, status="skipped", reason=why, p_value=None))
    metric_idx = [i for i in metric_idx if out[i][1].p_value is not None]
    decided = holm([out[i][1] for i in metric_idx], alpha)
    for i, v in zip(metric_idx, decided, strict=True):
        out[i] = (out[i][0], v)
    return out


@dataclass(frozen=True)
class Detectable:
    """The smallest change of a metric's median a one-sided rank test finds with ``power`` at
    ``alpha`` with ``n`` runs per arm, as a ratio (``ratio`` 1.30: a 30 % worse median), from the
    spread of one arm's values (None with ``why`` when it cannot be said)."""

    n: int
    ratio: float | None
    why: str = ""


def detectable_ratio(values: Sequence[Any], n: int, alpha: float, power: float = 0.8) -> Detectable:
    """:class:`Detectable` by the normal approximation on the log scale: a shift of
    ``(z(1-alpha) + z(power)) * sd(log x) * sqrt(2 / n)`` for a t-test, divided by the square root of
    the Mann–Whitney test's asymptotic relative efficiency 3/pi (normal data; more efficient than
    the t-test for heavier tails, so this errs large).  Positive values only (a ratio of zero or
    negative medians means nothing)."""
    x = np.asarray(_clean(values), dtype=float)
    if x.size < 3:
        return Detectable(n, None, f"{x.size} values: too few to estimate the spread")
    if np.any(x <= 0):
        return Detectable(n, None, "values of zero or below: no ratio")
    sd = float(np.std(np.log(x), ddof=1))
    z = float(stats.norm.ppf(1 - alpha) + stats.norm.ppf(power))
    shift = z * sd * math.sqrt(2.0 / n) / math.sqrt(3.0 / math.pi)
    return Detectable(n, math.exp(shift))
