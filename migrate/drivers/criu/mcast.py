"""The router's multicast group memberships before the dump and after the restore.

A routing daemon that speaks OSPF joins AllSPFRouters (224.0.0.5, and 224.0.0.6 as DR/BDR; OSPFv3
ff02::5/ff02::6) on its interfaces with IP_ADD_MEMBERSHIP.  The kernel delivers a multicast
packet to local sockets only if the receiving interface has joined the group, and CRIU does not
restore a socket's memberships (checkpoint-restore/criu#2873: no support, no test), so a restored
daemon sends hellos but hears none.  The driver reads the kernel's own lists (/proc/<pid>/net/igmp
and igmp6 of the router's network namespace) on both sides and records what the restore lost.

Read outside the freeze: before the first dump round and after the announcement."""

from __future__ import annotations

import socket
import struct
from pathlib import Path

#: groups the kernel joins by itself, without a socket asking: all-hosts, IPv6 all-nodes, and
#: all-routers on an interface that forwards IPv6 (plus the solicited-node groups of its addresses)
KERNEL_GROUPS = {"224.0.0.1", "ff01::1", "ff02::1", "ff01::2", "ff02::2", "ff05::2"}


def parse_igmp(text: str) -> dict[str, set[str]]:
    """/proc/net/igmp: {device: {group}}; a device line ("<idx>\\t<dev> : ...") is followed by
    tab-indented group lines whose first field is the group in hex, in the kernel's byte order
    (a __be32 printed as a host u32)."""
    out: dict[str, set[str]] = {}
    dev: str | None = None
    for line in text.splitlines()[1:]:
        if not line.strip():
            continue
        if not line[0].isspace():
            dev = line.split()[1]
            out.setdefault(dev, set())
        elif dev is not None:
            raw = int(line.split()[0], 16)
            out[dev].add(socket.inet_ntop(socket.AF_INET, struct.pack("=I", raw)))
    return out


def parse_igmp6(text: str) -> dict[str, set[str]]:
    """/proc/net/igmp6: one line per (index, device, group as 32 hex digits, users, flags, timer)."""
    out: dict[str, set[str]] = {}
    for line in text.splitlines():
        f = line.split()
        if len(f) >= 3 and len(f[2]) == 32:
            out.setdefault(f[1], set()).add(socket.inet_ntop(socket.AF_INET6, bytes.fromhex(f[2])))
    return out


def is_kernel_group(group: str) -> bool:
    """Joined by the kernel, not by a socket: KERNEL_GROUPS and solicited-node (ff02::1:ffXX:XXXX)."""
    return group in KERNEL_GROUPS or group.startswith("ff02::1:ff")


def read_lists(pid: int, proc: Path = Path("/proc")) -> dict[str, str]:
    """The kernel's lists of ``pid``'s network namespace as read: {"igmp": text, "igmp6": text}
    (a list the kernel does not have, e.g. without IPv6, is left out)."""
    out = {}
    for name in ("igmp", "igmp6"):
        path = proc / str(pid) / "net" / name
        if path.exists():
            out[name] = path.read_text()
    return out


def memberships(lists: dict[str, str]) -> dict[str, list[str]]:
    """The groups sockets joined on each interface (kernel-joined groups and loopback left out),
    sorted, from :func:`read_lists`' texts."""
    groups: dict[str, set[str]] = {}
    for name, parse in (("igmp", parse_igmp), ("igmp6", parse_igmp6)):
        for dev, gs in parse(lists.get(name, "")).items():
            groups.setdefault(dev, set()).update(g for g in gs if not is_kernel_group(g))
    return {dev: sorted(gs) for dev, gs in sorted(groups.items()) if gs and dev != "lo"}


def lost(before: dict[str, list[str]], after: dict[str, list[str]]) -> list[str]:
    """Memberships present before the dump and missing after the restore, as "<group> on <dev>"."""
    return [f"{g} on {dev}" for dev, gs in before.items() for g in gs if g not in set(after.get(dev, ()))]


# -- putting the lost memberships back (CRIU_REJOIN_MCAST=1) ------------------------------------
#: protocol number of OSPF, the IP protocol of the raw sockets that hold AllSPFRouters
OSPF_PROTO = 89
_SYS_PIDFD_GETFD = 438  # x86_64 and every architecture with the unified syscall table
SO_BINDTODEVICE = 25


def device_indexes(igmp_text: str) -> dict[str, int]:
    """/proc/net/igmp: {device: ifindex} of every device line (the kernel lists every IPv4
    device, each at least in all-hosts)."""
    out = {}
    for line in igmp_text.splitlines()[1:]:
        if line.strip() and not line[0].isspace():
            idx, dev = line.split()[:2]
            out[dev] = int(idx)
    return out


def raw_socket_inodes(net_raw_text: str, proto: int = OSPF_PROTO) -> list[int]:
    """/proc/net/raw: the inodes of raw sockets of IP protocol ``proto`` (a raw socket's "port"
    in ``local_address`` is its protocol)."""
    out = []
    for line in net_raw_text.splitlines()[1:]:
        f = line.split()
        if len(f) >= 10 and ":" in f[1] and int(f[1].split(":")[1], 16) == proto:
            out.append(int(f[9]))
    return out


def socket_fds(pid: int, proc: Path = Path("/proc")) -> dict[int, int]:
    """{socket inode: fd} of ``pid``'s open sockets."""
    import os

    out = {}
    for fd in (proc / str(pid) / "fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue  # closed meanwhile
        if target.startswith("socket:["):
            out[int(target[8:-1])] = int(fd.name)
    return out


def descendants(pid: int, proc: Path = Path("/proc")) -> list[int]:
    """``pid`` and every process below it (``/proc/<pid>/task/<tid>/children``), parents first."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop(0)
        out.append(p)
        for task in (proc / str(p) / "task").glob("*"):
            try:
                todo += [int(c) for c in (task / "children").read_text().split()]
            except OSError:
                continue  # gone meanwhile
    return out


def pidfd_getfd(pid: int, fd: int) -> int:
    """A duplicate, in this process, of ``pid``'s file descriptor ``fd`` (pidfd_getfd(2), Linux
    5.6; needs ptrace rights over ``pid``).  Python 3.11's os has pidfd_open but not this call."""
    import ctypes
    import os

    libc = ctypes.CDLL(None, use_errno=True)
    pidfd = os.pidfd_open(pid)
    try:
        dup = libc.syscall(_SYS_PIDFD_GETFD, pidfd, fd, 0)
        if dup < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"pidfd_getfd({pid}, {fd}): {os.strerror(err)}")
        return int(dup)
    finally:
        os.close(pidfd)


def rejoin(pid: int, lost_pairs: list[tuple[str, str]], proc: Path = Path("/proc")) -> list[dict[str, object]]:
    """Join each lost (IPv4 group, device) again, on the OSPF raw socket of the restored process
    ``pid`` or of a process below it (the container's init runs the routing daemon):
    the socket is duplicated into this process (:func:`pidfd_getfd`) and IP_ADD_MEMBERSHIP set on
    the duplicate, which is the same socket; closing the duplicate leaves the membership with
    the process's descriptor.  A socket bound to a device (SO_BINDTODEVICE) takes that device's
    groups; otherwise the first unbound one takes them.  Returns one record per pair: the socket's
    inode, the device and group, and ``joined`` or the error."""
    import os

    net = proc / str(pid) / "net"
    indexes = device_indexes((net / "igmp").read_text())
    inodes = raw_socket_inodes((net / "raw").read_text())
    holders: dict[int, tuple[int, int]] = {}  # socket inode -> (pid, fd)
    for p in descendants(pid, proc):
        try:
            fds = socket_fds(p, proc)
        except OSError:
            continue  # gone meanwhile
        holders.update({i: (p, fd) for i, fd in fds.items() if i in inodes and i not in holders})
    socks: list[tuple[int, str, socket.socket]] = []
    out: list[dict[str, object]] = []
    try:
        for inode in inodes:
            if inode not in holders:
                continue
            s = socket.socket(fileno=pidfd_getfd(*holders[inode]))
            bound = s.getsockopt(socket.SOL_SOCKET, SO_BINDTODEVICE, 16).rstrip(b"\0").decode()
            socks.append((inode, bound, s))
        for group, dev in lost_pairs:
            rec: dict[str, object] = {"group": group, "device": dev}
            if ":" in group:
                out.append({**rec, "error": "IPv6 groups are not put back"})
                continue
            mine = [x for x in socks if x[1] == dev] or [x for x in socks if not x[1]]
            if not mine or dev not in indexes:
                why = "no OSPF raw socket in the process" if not mine else f"no device {dev} after the restore"
                out.append({**rec, "error": why})
                continue
            inode, _bound, s = mine[0]
            mreqn = struct.pack("=4s4si", socket.inet_aton(group), b"\0\0\0\0", indexes[dev])
            try:
                s.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, mreqn)
                out.append({**rec, "socket_inode": inode, "pid": holders[inode][0], "joined": True})
            except OSError as err:
                out.append({**rec, "socket_inode": inode, "error": os.strerror(err.errno or 0)})
    finally:
        for _i, _b, s in socks:
            s.close()
    return out


def lost_pairs(lost_text: list[str]) -> list[tuple[str, str]]:
    """:func:`lost`'s "<group> on <dev>" as (group, device)."""
    return [tuple(x.split(" on ", 1)) for x in lost_text]  # type: ignore[misc]
