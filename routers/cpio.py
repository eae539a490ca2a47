"""A reproducible ``newc`` cpio writer (the initramfs format), in pure Python.

Written here rather than calling ``cpio`` so that the archive can contain device nodes
(``/dev/console``) without root, every entry is owned by root, timestamps are fixed and the
output is byte-for-byte reproducible from the same tree.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

TRAILER = "TRAILER!!!"


@dataclass(frozen=True)
class Entry:
    """One archive member.  ``name`` is relative (no leading slash); ``data`` is the file content
    or the symlink target; ``rdev`` is ``(major, minor)`` for device nodes."""

    name: str
    mode: int
    data: bytes = b""
    rdev: tuple[int, int] = (0, 0)


def directory(name: str, perm: int = 0o755) -> Entry:
    """A directory entry."""
    return Entry(name, stat.S_IFDIR | perm)


def char_device(name: str, major: int, minor: int, perm: int = 0o600) -> Entry:
    """A character device node (e.g. ``dev/console`` = 5,1)."""
    return Entry(name, stat.S_IFCHR | perm, rdev=(major, minor))


def tree_entries(root: Path) -> Iterator[Entry]:
    """Every file, directory and symlink under ``root`` (not ``root`` itself), parents first,
    in sorted order, without following symlinks."""
    root = Path(root)
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        rel_dir = Path(dirpath).relative_to(root)
        names = sorted(dirnames + filenames)
        for name in names:
            path = Path(dirpath) / name
            rel = (rel_dir / name).as_posix()
            st = path.lstat()
            perm = stat.S_IMODE(st.st_mode)
            if stat.S_ISLNK(st.st_mode):
                yield Entry(rel, stat.S_IFLNK | 0o777, os.readlink(path).encode())
            elif stat.S_ISDIR(st.st_mode):
                yield Entry(rel, stat.S_IFDIR | perm)
            elif stat.S_ISREG(st.st_mode):
                yield Entry(rel, stat.S_IFREG | perm, path.read_bytes())
            else:
                raise ValueError(f"{path}: unsupported file type for the initramfs")
        # os.walk does not descend into symlinked directories (followlinks=False): correct here.


def _pad(n: int) -> bytes:
    return b"\0" * ((4 - n % 4) % 4)


def _header(ino: int, entry: Entry, namesize: int, filesize: int) -> bytes:
    fields = (
        ino,
        entry.mode,
        0,  # uid
        0,  # gid
        2 if stat.S_ISDIR(entry.mode) else 1,
        0,  # mtime: fixed for reproducibility
        filesize,
        0,
        0,
        entry.rdev[0],
        entry.rdev[1],
        namesize,
        0,
    )
    return b"070701" + b"".join(b"%08X" % f for f in fields)


def write(out: BinaryIO, entries: Iterable[Entry]) -> int:
    """Write ``entries`` and the trailer to ``out`` as a newc archive; return the bytes written."""
    total = 0
    seen: set[str] = set()
    ino = 1
    for entry in [*entries, Entry(TRAILER, 0)]:
        name = entry.name.lstrip("/")
        if name in seen:
            raise ValueError(f"duplicate initramfs entry {name!r}")
        seen.add(name)
        raw_name = name.encode() + b"\0"
        data = entry.data if (stat.S_ISREG(entry.mode) or stat.S_ISLNK(entry.mode)) else b""
        head = _header(0 if name == TRAILER else ino, entry, len(raw_name), len(data))
        chunk = head + raw_name + _pad(len(head) + len(raw_name)) + data + _pad(len(data))
        out.write(chunk)
        total += len(chunk)
        ino += 1
    return total
