"""Run a program under a seccomp filter that refuses netlink multicast memberships beyond the
32 groups of ``bind(2)``: ``python nlfilter.py PROGRAM ARG...`` (self-contained: it runs before
the container's namespaces have the repository's packages on a path, and imports only ctypes).

Why: CRIU cannot checkpoint a netlink socket subscribed to a group above 32
(criu/sk-netlink.c: "has more than 32 groups"), and FRR's zebra subscribes RTNLGRP_BRVLAN,
RTNLGRP_TUNNEL and others with ``setsockopt(SOL_NETLINK, NETLINK_ADD_MEMBERSHIP)``.  With this
filter the call fails with ENOPROTOOPT, what a kernel without those groups answers; zebra logs a
notice and goes on without those notifications (bridge VLANs, tunnels, next-hop groups... which
a router with two plain ports does not use).  Every other system call is allowed.  The filter is
inherited by every process of the container and CRIU restores it with them."""

from __future__ import annotations

import ctypes
import os
import sys

PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
SECCOMP_RET_ALLOW = 0x7FFF0000
SECCOMP_RET_ERRNO = 0x00050000
AUDIT_ARCH_X86_64 = 0xC000003E
NR_SETSOCKOPT_X86_64 = 54
SOL_NETLINK = 270
NETLINK_ADD_MEMBERSHIP = 1
ENOPROTOOPT = 92
# struct seccomp_data: nr at 0, arch at 4, args[i] at 16 + 8 i (the low 32 bits first, little endian)
_NR, _ARCH, _ARG1, _ARG2 = 0, 4, 24, 32
_LD_W_ABS, _JEQ_K, _RET_K = 0x20, 0x15, 0x06


class SockFilter(ctypes.Structure):
    """struct sock_filter: one classic BPF instruction."""

    _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint)]


class SockFprog(ctypes.Structure):
    """struct sock_fprog: a BPF program."""

    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(SockFilter))]


def program() -> list[tuple[int, int, int, int]]:
    """The filter as (code, jt, jf, k): setsockopt(fd, SOL_NETLINK, NETLINK_ADD_MEMBERSHIP, ...)
    on x86-64 returns ENOPROTOOPT, everything else is allowed (a jump's target is the next
    instruction plus its offset)."""
    return [
        (_LD_W_ABS, 0, 0, _ARCH),
        (_JEQ_K, 0, 7, AUDIT_ARCH_X86_64),
        (_LD_W_ABS, 0, 0, _NR),
        (_JEQ_K, 0, 5, NR_SETSOCKOPT_X86_64),
        (_LD_W_ABS, 0, 0, _ARG1),
        (_JEQ_K, 0, 3, SOL_NETLINK),
        (_LD_W_ABS, 0, 0, _ARG2),
        (_JEQ_K, 0, 1, NETLINK_ADD_MEMBERSHIP),
        (_RET_K, 0, 0, SECCOMP_RET_ERRNO | ENOPROTOOPT),
        (_RET_K, 0, 0, SECCOMP_RET_ALLOW),
    ]


def install() -> None:
    """Install the filter on this process (inherited across fork and exec); OSError if refused."""
    insns = program()
    array = (SockFilter * len(insns))(*(SockFilter(*i) for i in insns))
    prog = SockFprog(len(insns), ctypes.cast(array, ctypes.POINTER(SockFilter)))
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"seccomp filter refused: {os.strerror(err)}")


def main(argv: list[str]) -> None:
    """Install the filter, then exec ``argv``."""
    if not argv:
        sys.exit("usage: nlfilter.py PROGRAM [ARG...]")
    install()
    os.execv(argv[0], argv)


if __name__ == "__main__":
    main(sys.argv[1:])
