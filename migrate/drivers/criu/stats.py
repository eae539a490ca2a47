"""CRIU's own statistics as printed by ``--display-stats`` (the same figures criu keeps in its
``stats-dump`` / ``stats-restore`` images): parsed into plain dicts with units in the keys.

Dump example (criu 4.2.1)::

    Displaying dump stats:
    Freezing time: 327 us
    Frozen time: 138431 us
    Memory pages written: 218 (0xda)

becomes ``{"freezing_time_us": 327, "frozen_time_us": 138431, "memory_pages_written": 218}``."""

from __future__ import annotations

import re

_LINE = re.compile(r"^\s*([A-Za-z][A-Za-z0-9 /()-]*?):\s+(\d+)\s*(us|\(0x[0-9a-fA-F]+\))?\s*$")
_HEAD = re.compile(r"^Displaying (dump|restore) stats:\s*$")


def _key(name: str, unit: str | None) -> str:
    key = re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")
    return f"{key}_us" if unit == "us" else key


def parse_display_stats(text: str) -> dict[str, dict[str, int]]:
    """``{"dump": {...}, "restore": {...}}`` from criu's ``--display-stats`` output (only the
    sections present; lines outside a section are ignored)."""
    out: dict[str, dict[str, int]] = {}
    section: dict[str, int] | None = None
    for line in text.splitlines():
        head = _HEAD.match(line.strip())
        if head:
            section = out.setdefault(head.group(1), {})
            continue
        m = _LINE.match(line)
        if m and section is not None:
            section[_key(m.group(1), m.group(3))] = int(m.group(2))
        elif line.strip() and section is not None and not m:
            section = None  # the stats block ended
    return out


def error_excerpt(log_text: str, max_lines: int = 8) -> str:
    """The lines of a criu log that explain a failure (its ``Error`` lines, else its tail)."""
    lines = [ln.strip() for ln in log_text.splitlines() if ln.strip()]
    errors = [ln for ln in lines if "Error" in ln and "RLIMIT_NOFILE" not in ln]
    picked = errors[-max_lines:] if errors else lines[-max_lines:]
    return " | ".join(picked)
