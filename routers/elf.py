"""Just enough ELF parsing to assemble a root file system without running anything from it.

* :func:`dynamic_info` - an executable's or library's interpreter, ``DT_NEEDED`` sonames and
  ``DT_RUNPATH``/``DT_RPATH`` (what ``ldd`` would follow, read statically).
* :func:`modinfo` - a kernel module's ``.modinfo`` fields (``depends=``, ``name=``...), so the
  module load order is computed without ``modinfo``/``depmod`` (Debian's kernel .deb ships no
  ``modules.dep``; ``depmod`` runs in its postinst).

Only 64-bit little-endian ELF (x86-64) is supported; that is all the guest runs.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path

ELF_MAGIC = b"\x7fELF"
PT_LOAD, PT_DYNAMIC, PT_INTERP = 1, 2, 3
DT_NULL, DT_NEEDED, DT_STRTAB, DT_SONAME, DT_RPATH, DT_RUNPATH = 0, 1, 5, 14, 15, 29


class ElfError(ValueError):
    """The file is not an ELF object this module can read."""


@dataclass(frozen=True)
class DynamicInfo:
    """The dynamic-linking facts of one ELF object."""

    interpreter: str | None = None
    needed: tuple[str, ...] = ()
    soname: str | None = None
    runpath: tuple[str, ...] = field(default_factory=tuple)


def is_elf(path: Path) -> bool:
    """True if ``path`` is a regular file starting with the ELF magic."""
    try:
        with open(path, "rb") as fh:
            return fh.read(4) == ELF_MAGIC
    except OSError:
        return False


def _header(data: bytes, what: str) -> None:
    if data[:4] != ELF_MAGIC:
        raise ElfError(f"{what}: not an ELF file")
    if data[4] != 2 or data[5] != 1:
        raise ElfError(f"{what}: only 64-bit little-endian ELF is supported")


def _segments(data: bytes) -> list[tuple[int, int, int, int]]:
    """(p_type, p_offset, p_vaddr, p_filesz) of every program header."""
    phoff = struct.unpack_from("<Q", data, 0x20)[0]
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    out = []
    for i in range(phnum):
        p_type, _flags, p_offset, p_vaddr, _paddr, p_filesz = struct.unpack_from("<IIQQQQ", data, phoff + i * phentsize)
        out.append((p_type, p_offset, p_vaddr, p_filesz))
    return out


def _cstr(data: bytes, offset: int) -> str:
    end = data.index(b"\0", offset)
    return data[offset:end].decode("utf-8", "replace")


def dynamic_info(path: Path) -> DynamicInfo:
    """Interpreter, needed sonames, soname and run path of the ELF object at ``path``.

    A static executable returns an empty :class:`DynamicInfo`."""
    data = Path(path).read_bytes()
    _header(data, str(path))
    segs = _segments(data)
    interp = None
    for p_type, off, _vaddr, size in segs:
        if p_type == PT_INTERP:
            interp = data[off : off + size].rstrip(b"\0").decode()
    dyn = next(((off, size) for p_type, off, _v, size in segs if p_type == PT_DYNAMIC), None)
    if dyn is None:
        return DynamicInfo(interpreter=interp)
    entries: list[tuple[int, int]] = []
    off, size = dyn
    for pos in range(off, off + size, 16):
        tag, val = struct.unpack_from("<qQ", data, pos)
        if tag == DT_NULL:
            break
        entries.append((tag, val))
    strtab_vaddr = next((v for t, v in entries if t == DT_STRTAB), None)
    if strtab_vaddr is None:
        raise ElfError(f"{path}: dynamic section without DT_STRTAB")
    strtab = None
    for p_type, p_off, p_vaddr, p_filesz in segs:
        if p_type == PT_LOAD and p_vaddr <= strtab_vaddr < p_vaddr + p_filesz:
            strtab = strtab_vaddr - p_vaddr + p_off
    if strtab is None:
        raise ElfError(f"{path}: DT_STRTAB outside every loadable segment")
    needed = tuple(_cstr(data, strtab + v) for t, v in entries if t == DT_NEEDED)
    soname = next((_cstr(data, strtab + v) for t, v in entries if t == DT_SONAME), None)
    runpath: list[str] = []
    # DT_RUNPATH wins over DT_RPATH when both are present (as in ld.so).
    tags = (DT_RUNPATH,) if any(t == DT_RUNPATH for t, _ in entries) else (DT_RPATH,)
    for t, v in entries:
        if t in tags:
            runpath.extend(p for p in _cstr(data, strtab + v).split(":") if p)
    return DynamicInfo(interpreter=interp, needed=needed, soname=soname, runpath=tuple(runpath))


def modinfo(path: Path) -> dict[str, str]:
    """The ``key=value`` fields of a kernel module's ``.modinfo`` section (last value wins,
    except ``depends`` which is a single comma-separated field anyway)."""
    data = Path(path).read_bytes()
    _header(data, str(path))
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)

    def section(i: int) -> tuple[int, int, int]:
        name, _type, _flags, _addr, offset, size = struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize)
        return name, offset, size

    _n, names_off, _s = section(shstrndx)
    for i in range(shnum):
        name, offset, size = section(i)
        if _cstr(data, names_off + name) == ".modinfo":
            fields: dict[str, str] = {}
            for item in data[offset : offset + size].split(b"\0"):
                if b"=" in item:
                    k, v = item.decode("utf-8", "replace").split("=", 1)
                    fields[k] = v
            return fields
    raise ElfError(f"{path}: no .modinfo section (not a kernel module?)")
