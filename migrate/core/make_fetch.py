"""The ending of a ``make`` target that fetches a tool (``make qemu``, ``make libvirt``,
``make criu``): a one-line description on success, a one-line error otherwise.

Standard library only (run with the system ``python3`` or the venv)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def report_fetch(
    target: str,
    fetch: Callable[[], T],
    errors: tuple[type[Exception], ...],
    describe: Callable[[T], str],
    code: int,
) -> int:
    """Run ``fetch``: print its ``describe`` line, 0; on ``errors`` ``make <target>: <error>``, ``code``."""
    try:
        result = fetch()
    except errors as err:
        print(f"make {target}: {err}", file=sys.stderr)
        return code
    print(describe(result))
    return 0
