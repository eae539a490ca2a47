"""Regression detection for small samples (pure functions).

A metric of tonight's runs at one matrix point regresses against the baseline's runs when BOTH
  1. the exact one-sided Mann–Whitney U test (rank-sum permutation test, ties handled exactly)
     says tonight is worse with p <= alpha, and
  2. the medians differ by at least the metric's minimum effect: tonight's median is worse than
     the baseline's by >= ``min_abs`` (in the metric's unit) AND by >= ``min_rel`` of the
     baseline median.
The test bounds the false-positive rate of each check by alpha whatever the noise distribution;
the minimum effect keeps statistically clear but operationally irrelevant shifts (a few ms, a
few percent) from failing the night.  Failure rates use Fisher's exact test instead.

A night makes many checks; :func:`holm` re-decides them together (Holm's step-down procedure)
so that the probability that pure noise fails a night at all stays below alpha, whatever the
correlation between the checks."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from analysis.stats import fisher_greater, mann_whitney_greater, min_p_value

WORSE = ("higher", "lower")
MIN_N = 2
FAILURE_RATE = "failure_rate"


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
class Verdict:
    """Outcome of one check: 'pass', 'regression' or 'skipped' (with the numbers behind it)."""

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


def _clean(values: Sequence[Any]) -> list[float]:
    out = []
    for v in values:
        if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v):
            out.append(float(v))
    return out


def _fmt(x: float | None) -> str:
    return "–" if x is None else f"{x:.4g}"


def check_metric(rule: Rule, baseline: Sequence[Any], tonight: Sequence[Any], alpha: float) -> Verdict:
    """Judge one metric (None/NaN values are ignored)."""
    base, cand = _clean(baseline), _clean(tonight)
    common = {"metric": rule.metric, "n_base": len(base), "n_cand": len(cand)}
    if len(base) < MIN_N or len(cand) < MIN_N:
        reason = f"not enough data (baseline n={len(base)}, tonight n={len(cand)}; need {MIN_N} each)"
        return Verdict(status="skipped", reason=reason, **common)
    if not detectable(len(base), len(cand), alpha):
        reason = (
            f"samples too small for alpha {alpha}: the exact test cannot go below p="
            f"{min_p_value(len(cand), len(base)):.4f} (baseline n={len(base)}, tonight n={len(cand)})"
        )
        return Verdict(status="skipped", reason=reason, **common)
    mb, mc = float(np.median(base)), float(np.median(cand))
    sign = 1.0 if rule.worse == "higher" else -1.0
    worse_by = sign * (mc - mb)
    worse_rel = worse_by / abs(mb) if mb != 0 else (math.inf if worse_by > 0 else 0.0)
    _, p = mann_whitney_greater([sign * v for v in cand], [sign * v for v in base])
    effect = worse_by >= rule.min_abs and worse_rel >= rule.min_rel and worse_by > 0
    rel = f"{worse_rel:+.0%}" if math.isfinite(worse_rel) else "new"
    desc = f"median {_fmt(mc)} vs baseline {_fmt(mb)} (worse by {_fmt(worse_by)}, {rel}), U-test p={p:.3g}"
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


def check_failures(rule: Rule, base_failed: int, base_n: int, cand_failed: int, cand_n: int, alpha: float) -> Verdict:
    """Judge the failure rate with Fisher's exact test and a minimum absolute increase."""
    common = {"metric": rule.metric, "n_base": base_n, "n_cand": cand_n}
    if base_n < 1 or cand_n < 1:
        return Verdict(status="skipped", reason=f"no runs (baseline n={base_n}, tonight n={cand_n})", **common)
    rb, rc = base_failed / base_n, cand_failed / cand_n
    p = fisher_greater(cand_failed, cand_n, base_failed, base_n)
    nums = {"median_base": rb, "median_cand": rc, "worse_by": rc - rb, "p_value": p}
    desc = f"failed {cand_failed}/{cand_n} vs baseline {base_failed}/{base_n}, Fisher exact p={p:.3g}"
    effect = rc - rb >= rule.min_abs and rc > rb
    v = Verdict(status="pass", reason="", effect=effect, desc=desc, min_effect=f"+{rule.min_abs:g}", **common, **nums)
    return _decide(v, alpha)


def detectable(n_base: int, n_cand: int, alpha: float) -> bool:
    """Whether the exact test can reach p <= alpha at all with these sample sizes."""
    return n_base > 0 and n_cand > 0 and min_p_value(n_cand, n_base) <= alpha
