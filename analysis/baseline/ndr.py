"""Statistics of the forwarding baseline (``make baseline``): pure functions, no I/O.

* :func:`describe`: mean, sample standard deviation and the Student-t 95 % confidence interval
  of repetitions (papers 001 and 004 plot 95 % CIs of 9 and 25 repetitions);
* :func:`jain_index`: Jain's fairness index (paper 000, eq. 2);
* :func:`efficiency`: E = R_aggregate / R_classical (paper 000, eq. 1);
* :func:`ndr_next` / :func:`ndr_result`: the RFC 2544-style binary search for the highest offered
  rate whose loss ratio is at most :data:`LOSS_FREE_RATIO`, as pure functions of the trials
  measured so far (the orchestrator measures what :func:`ndr_next` asks for until it says None).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from analysis.stats.inference import t_half_width

LOSS_FREE_RATIO = 0.001  # "loss-free" = loss <= 0.1 % (the RFC 2544-style criterion)
CONFIDENCE = 0.95
NDR_PRECISION = 0.05  # stop when (lowest failing - highest passing) <= 5 % of the lowest failing rate
NDR_FLOOR_BPS = 100_000  # a failing rate at or below 100 kbit/s ends the search (NDR = best pass, maybe 0)
NDR_MAX_TRIALS = 16  # safety bound on search trials (sweep points included)
NDR_ROUND_BPS = 1000  # trial rates are whole kbit/s while the bracket is wide enough


@dataclass(frozen=True)
class Stat:
    """Aggregate of repetitions: n values, mean, sample std (ddof=1) and the half-width of the
    Student-t confidence interval (None with fewer than two values)."""

    n: int
    mean: float
    std: float | None
    ci95: float | None

    @property
    def lo(self) -> float | None:
        """Lower end of the confidence interval."""
        return None if self.ci95 is None else self.mean - self.ci95

    @property
    def hi(self) -> float | None:
        """Upper end of the confidence interval."""
        return None if self.ci95 is None else self.mean + self.ci95

    def to_dict(self) -> dict[str, float | int | None]:
        """JSON-ready form."""
        return {"n": self.n, "mean": self.mean, "std": self.std, "ci95": self.ci95}


def _finite(values: Iterable[float | None]) -> list[float]:
    return [float(v) for v in values if v is not None and math.isfinite(float(v))]


def describe(values: Iterable[float | None], confidence: float = CONFIDENCE) -> Stat | None:
    """Mean, sample standard deviation and the Student-t CI half-width of the finite values
    (None and NaN are ignored); None when there is no value."""
    xs = _finite(values)
    n = len(xs)
    if n == 0:
        return None
    mean = math.fsum(xs) / n
    if n < 2:
        return Stat(n, mean, None, None)
    std = math.sqrt(math.fsum((x - mean) ** 2 for x in xs) / (n - 1))
    half = t_half_width(std, n, confidence)
    return Stat(n, mean, std, half)


def jain_index(values: Sequence[float | None]) -> float | None:
    """Jain's fairness index (sum x)^2 / (n * sum x^2): 1 = perfectly fair, 1/n = one takes all.
    None for no values, a missing value, or all zeros (nothing to share)."""
    if not values or any(v is None or not math.isfinite(float(v)) for v in values):
        return None
    xs = [float(v) for v in values]  # type: ignore[arg-type]
    sq = math.fsum(x * x for x in xs)
    if sq == 0.0:
        return None
    return math.fsum(xs) ** 2 / (len(xs) * sq)


def efficiency(r_aggregate: float | None, r_classical: float | None) -> float | None:
    """E = R_aggregate / R_classical (paper 000, eq. 1); None without a positive classical rate."""
    if r_aggregate is None or r_classical is None or not r_classical > 0:
        return None
    return r_aggregate / r_classical


# ------------------------------------------------------------------ NDR search


@dataclass(frozen=True)
class NdrResult:
    """Outcome of a finished (or abandoned) search: the highest passing rate below the lowest
    failing one (0 if none passed), the lowest failing rate (None if every rate passed, i.e. the
    NDR is at least ``rate_bps``, the upper bound), and how many trials were used."""

    rate_bps: int
    lowest_fail_bps: int | None
    trials: int

    @property
    def at_upper_bound(self) -> bool:
        """Nothing failed: the true NDR may be higher than the searched range."""
        return self.lowest_fail_bps is None


def _bracket(trials: Sequence[tuple[int, float]], threshold: float) -> tuple[int, int | None]:
    """(highest pass below the lowest fail, lowest fail).  A pass above a fail (noise, or a
    non-monotonic router) is ignored: the result is conservative."""
    fails = [r for r, loss in trials if r > 0 and loss > threshold]
    lowest_fail = min(fails) if fails else None
    passes = [r for r, loss in trials if r > 0 and loss <= threshold and (lowest_fail is None or r < lowest_fail)]
    return (max(passes) if passes else 0), lowest_fail


def ndr_next(
    trials: Sequence[tuple[int, float]],
    hi_bps: int,
    *,
    threshold: float = LOSS_FREE_RATIO,
    precision: float = NDR_PRECISION,
    floor_bps: int = NDR_FLOOR_BPS,
    max_trials: int = NDR_MAX_TRIALS,
) -> int | None:
    """The next offered rate (bit/s) to try, or None when the search is over.

    ``trials`` are ``(offered rate requested, loss ratio)`` measured so far for one router
    configuration, frame size and repetition (sweep points count; rate 0 = unpaced is ignored);
    ``hi_bps`` is the upper end of the search.  Binary search: first ``hi_bps`` (if no trial
    failed yet), then the midpoint between the highest passing rate and the lowest failing
    rate, until they are within ``precision`` of the failing rate, the failing rate is at or
    below ``floor_bps``, or ``max_trials`` trials were made."""
    if hi_bps <= 0:
        raise ValueError(f"hi_bps must be > 0, got {hi_bps}")
    tried = {r for r, _ in trials}
    if len(trials) >= max_trials:
        return None
    best, lowest_fail = _bracket(trials, threshold)
    if lowest_fail is None:
        return None if hi_bps in tried or best >= hi_bps else hi_bps
    if lowest_fail <= floor_bps or lowest_fail - best <= precision * lowest_fail:
        return None
    nxt = (best + lowest_fail) // 2
    if lowest_fail - best > 2 * NDR_ROUND_BPS:
        nxt -= nxt % NDR_ROUND_BPS  # readable rates; still strictly inside the bracket
    return None if nxt in tried or nxt <= 0 else nxt


def ndr_result(trials: Sequence[tuple[int, float]], threshold: float = LOSS_FREE_RATIO) -> NdrResult:
    """The search's answer from its trials (see :func:`ndr_next`)."""
    best, lowest_fail = _bracket(trials, threshold)
    return NdrResult(rate_bps=best, lowest_fail_bps=lowest_fail, trials=len(trials))
