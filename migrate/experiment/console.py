"""What a router's serial console says about a crash: the lines worth quoting in a failure."""

from __future__ import annotations

import re
from pathlib import Path

#: Lines that name why a Linux guest died (the first one found is quoted with the panic line).
CAUSE = re.compile(
    r"(kernel BUG at|BUG: |Oops|general protection fault|list_(?:add|del) corruption|"
    r"Unable to handle|unable to handle|invalid opcode|double fault)"
)
PANIC = re.compile(r"Kernel panic - not syncing")
STAMP = re.compile(r"^\[\s*\d+\.\d+\]\s*")
MAX_LINE_CHARS = 160


def crash_excerpt(text: str) -> str | None:
    """``"<first cause line> | <panic line>"`` if the console shows a kernel crash, else None."""
    lines = [STAMP.sub("", ln).strip() for ln in text.splitlines()]
    cause = next((ln for ln in lines if CAUSE.search(ln)), None)
    panic = next((ln for ln in lines if PANIC.search(ln)), None)
    found = [ln[:MAX_LINE_CHARS] for ln in dict.fromkeys((cause, panic)) if ln]
    return " | ".join(found) or None


def crash_in(path: Path) -> str | None:
    """:func:`crash_excerpt` of a console log file (None if it is missing)."""
    try:
        return crash_excerpt(path.read_text(errors="replace"))
    except FileNotFoundError:
        return None
