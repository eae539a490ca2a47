"""When to stop pre-dumping (HV=criu MODE=precopy), after CRIU's P.Haul: iterate while the
dirty set keeps shrinking, within a round limit; named thresholds, pure logic."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

#: pre-dump rounds at most (P.Haul: 8)
MAX_ROUNDS = 8
#: pre-dump rounds at least: the first copies everything, the second shows the dirty set
MIN_ROUNDS = 2
#: a round that wrote this few pages leaves so little that the final dump may follow (P.Haul: 64)
SMALL_ROUND_PAGES = 64
#: the dirty set "keeps shrinking" while a round writes at most this fraction of the previous one
SHRINK_FACTOR = 0.9


@dataclass(frozen=True)
class Decision:
    """Whether to pre-dump again, and why (recorded with the rounds)."""

    again: bool
    reason: str


def next_round(pages_written: Sequence[int]) -> Decision:
    """Decide after the rounds so far (``pages_written``: CRIU's "Memory pages written" of each
    pre-dump, in order)."""
    n = len(pages_written)
    if n == 0:
        return Decision(True, "no pre-dump yet")
    if n >= MAX_ROUNDS:
        return Decision(False, f"round limit ({MAX_ROUNDS}) reached")
    if n < MIN_ROUNDS:
        return Decision(True, f"fewer than {MIN_ROUNDS} rounds")
    last, prev = pages_written[-1], pages_written[-2]
    if last <= SMALL_ROUND_PAGES:
        return Decision(False, f"dirty set small ({last} <= {SMALL_ROUND_PAGES} pages)")
    if last > SHRINK_FACTOR * prev:
        return Decision(False, f"dirty set stopped shrinking ({last} > {SHRINK_FACTOR:g} x {prev} pages)")
    return Decision(True, f"dirty set shrinking ({last} <= {SHRINK_FACTOR:g} x {prev} pages)")
