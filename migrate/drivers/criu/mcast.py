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
