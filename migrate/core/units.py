"""Parsing and formatting of user-facing quantities (rates with K/M/G suffixes)."""

from __future__ import annotations

import re

from migrate.core.errors import ConfigError

_SUFFIX = {"": 1, "K": 10**3, "M": 10**6, "G": 10**9}
_RATE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kKmMgG]?)(?:bit|bps|b)?\s*$")


def parse_rate_bps(text: str, what: str = "RATE") -> int:
    """Parse ``500M``, ``1G``, ``10k``, ``0`` into bit/s; raise ConfigError on anything else."""
    m = _RATE_RE.match(str(text))
    if not m:
        raise ConfigError(f"{what}={text!r} is not a rate: use bit/s with an optional K/M/G suffix, e.g. 500M")
    value = float(m.group(1)) * _SUFFIX[m.group(2).upper()]
    if value != int(value):
        raise ConfigError(f"{what}={text!r} is not a whole number of bit/s")
    return int(value)


def format_rate(rate_bps: int) -> str:
    """Format bit/s compactly for names: 500000000 -> '500M', 1500 -> '1500'."""
    for suffix, mult in (("G", 10**9), ("M", 10**6), ("K", 10**3)):
        if rate_bps >= mult and rate_bps % mult == 0:
            return f"{rate_bps // mult}{suffix}"
    return str(rate_bps)
