"""Atomic file writes: a crash mid-write leaves the previous file intact.  The only place in the
project that writes a file through a temporary name and a rename, except the guard program
(:mod:`migrate.testbed.guard`), which runs on lab hosts as standard-library text and so cannot
import this module."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any


@contextlib.contextmanager
def replacing(path: Path) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; when the block ends without an error, rename it
    onto ``path`` (for writers that want a file name, e.g. matplotlib's savefig).  The temporary
    file is removed whatever happens."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_bytes(path: Path, data: bytes, *, fsync: bool = True) -> None:
    """Write ``data`` to ``path`` via a temporary file (fsync'd unless ``fsync=False``, for files
    another process polls and that need not survive a power cut) and a rename."""
    with replacing(path) as tmp, open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        if fsync:
            os.fsync(fh.fileno())


def write_text(path: Path, text: str, *, fsync: bool = True) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically, as :func:`write_bytes`."""
    write_bytes(path, text.encode("utf-8"), fsync=fsync)


def write_json(path: Path, obj: Any) -> None:
    """Atomically write ``obj`` as indented JSON."""
    write_text(path, json.dumps(obj, indent=2, sort_keys=False, default=str) + "\n")
