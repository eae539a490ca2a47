"""Announce a moved router's MACs on its new host (what QEMU's ``announce-self`` does for a VM):
a gratuitous ARP and an unsolicited neighbour advertisement per port, sent from the router's own
interfaces inside its network namespace, so the segment switches learn where it is now.

Frame builders are pure (unit-tested); :func:`announce` opens AF_PACKET sockets inside the
container's network namespace (``migrate.core.nsock``) and sends the frames from the orchestrator."""

from __future__ import annotations

import ipaddress
import socket
import struct
import time
from collections.abc import Iterable

from migrate.core.nsock import in_netns

ETH_P_ARP = 0x0806
ETH_P_IPV6 = 0x86DD
BROADCAST = b"\xff" * 6
ALL_NODES_V6 = "ff02::1"
ROUNDS = 3
ROUND_GAP_S = 0.02
NA_FLAGS_ROUTER_OVERRIDE = 0xA0000000  # R (the sender is a router) | O (override caches)


def mac_bytes(mac: str) -> bytes:
    """'52:54:00:c6:12:01' -> 6 bytes."""
    b = bytes(int(x, 16) for x in mac.split(":"))
    if len(b) != 6:
        raise ValueError(f"bad MAC {mac!r}")
    return b


def gratuitous_arp(mac: str, ipv4: str) -> bytes:
    """Broadcast ARP request for the sender's own address (sender = target = ``ipv4``)."""
    m, ip = mac_bytes(mac), ipaddress.IPv4Address(ipv4).packed
    eth = BROADCAST + m + struct.pack("!H", ETH_P_ARP)
    arp = struct.pack("!HHBBH", 1, 0x0800, 6, 4, 1) + m + ip + b"\x00" * 6 + ip
    return eth + arp


def inet_checksum(data: bytes) -> int:
    """The Internet checksum of ``data`` (RFC 1071; 0 over data that carries a correct one)."""
    if len(data) % 2:
        data += b"\x00"
    s = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def unsolicited_na(mac: str, ipv6: str) -> bytes:
    """Unsolicited neighbour advertisement (RFC 4861 7.2.6) for ``ipv6`` to all nodes, router
    and override flags set, with the target link-layer address option."""
    m = mac_bytes(mac)
    src, dst = ipaddress.IPv6Address(ipv6).packed, ipaddress.IPv6Address(ALL_NODES_V6).packed
    body = struct.pack("!I", NA_FLAGS_ROUTER_OVERRIDE) + src + struct.pack("!BB", 2, 1) + m
    icmp = struct.pack("!BBH", 136, 0, 0) + body
    pseudo = src + dst + struct.pack("!I", len(icmp)) + b"\x00\x00\x00" + bytes([58])
    icmp = icmp[:2] + struct.pack("!H", inet_checksum(pseudo + icmp)) + icmp[4:]
    ip6 = struct.pack("!IHBB", 6 << 28, len(icmp), 58, 255) + src + dst
    eth = b"\x33\x33\x00\x00\x00\x01" + m + struct.pack("!H", ETH_P_IPV6)
    return eth + ip6 + icmp


def frames(mac: str, addresses: Iterable[str]) -> list[bytes]:
    """The announcement frames of one port (addresses with or without prefix length)."""
    out = []
    for cidr in addresses:
        addr = ipaddress.ip_interface(cidr).ip
        out.append(gratuitous_arp(mac, str(addr)) if addr.version == 4 else unsolicited_na(mac, str(addr)))
    return out


def _bound(ifname: str) -> socket.socket:
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
    s.bind((ifname, 0))
    return s


def announce(pid: int, ports: list[tuple[str, str, list[str]]], rounds: int = ROUNDS) -> int:
    """Send the announcements of ``ports`` = (ifname, mac, addresses) from inside the network
    namespace of process ``pid``; returns the CLOCK_REALTIME ns of the first frame.  No reference
    to the namespace is kept afterwards."""
    socks = in_netns(f"/proc/{pid}/ns/net", lambda: [_bound(p[0]) for p in ports])
    try:
        first = time.time_ns()
        for r in range(rounds):
            for s, (_ifname, mac, addrs) in zip(socks, ports, strict=True):
                for frame in frames(mac, addrs):
                    s.send(frame)
            if r + 1 < rounds:
                time.sleep(ROUND_GAP_S)
        return first
    finally:
        for s in socks:
            s.close()
