"""Reading figures from JSON records, where absent is not zero."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any


def finite(x: Any) -> float | None:
    """``x`` as a float if it is a finite number (a bool is not one); None otherwise: a figure
    that is missing, null, NaN or of another type is absent, never 0."""
    if isinstance(x, bool) or not isinstance(x, int | float) or not math.isfinite(x):
        return None
    return float(x)


def dig(obj: Any, *keys: str) -> Any:
    """The value at ``keys`` in nested mappings (``dig(s, "downtime_s", "packets")`` is
    ``s["downtime_s"]["packets"]``); None where a key is missing or a level is not a mapping."""
    for k in keys:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(k)
    return obj
