"""Address plan of the baseline's co-located routers (pure data, no side effects).

Router slot ``k`` (0 = the testbed's own router; 1..7 = further co-located routers; the slot
after the measured routers = the LOAD neighbour) gets its own /24 pair inside the RFC 2544
range 198.18.0.0/15 and the matching /64 pair inside RFC 5180's 2001:2::/48::

    slot k   left  198.18.(2k+1).0/24   2001:2:0:(2k+1)::/64    router .1 / ::1, source .10 / ::10
             right 198.18.(2k+2).0/24   2001:2:0:(2k+2)::/64    router .1 / ::1, sink   .10 / ::10
             MACs  52:54:00:c6:(0x12+k):01 (left), :02 (right)

The IPv6 group is written with the same digits as the IPv4 third octet (slot 5 left:
198.18.11.0/24 and 2001:2:0:11::/64).  Slot 0 is exactly the migrate testbed (A 198.18.1.10 -> B
198.18.2.10 via 198.18.1.1/198.18.2.1, MACs 52:54:00:c6:12:01/02), so its source and sink are
the testbed's A and B and RTT probes run C -> D through it.  Slots k >= 1 add namespaces
``A<k>`` (source, left segment) and ``B<k>`` (sink, right segment).  All routers share the two
L2 segments (bridges brL/brR on R1), like paper 000's virtual routers sharing two NICs.
"""

from __future__ import annotations

from dataclasses import dataclass

from migrate.testbed import topology as topo

MAX_SLOTS = 9  # 8 measured routers + 1 neighbour: subnets up to 198.18.18.0/24
MAC_BASE = 0x12


@dataclass(frozen=True)
class Slot:
    """One router and the end hosts of its flow."""

    k: int

    def _net(self, side: str) -> int:
        return 2 * self.k + (1 if side == "L" else 2)

    def router_cidrs(self, side: str) -> list[str]:
        """The router's IPv4 and IPv6 address (with prefix) on segment ``side`` ('L' or 'R')."""
        n = self._net(side)
        return [f"198.18.{n}.1/24", f"2001:2:0:{n}::1/64"]

    def host_cidrs(self, side: str) -> list[str]:
        """The source (L) or sink (R) host's IPv4 and IPv6 address with prefix."""
        n = self._net(side)
        return [f"198.18.{n}.10/24", f"2001:2:0:{n}::10/64"]

    def mac(self, side: str) -> str:
        """The router's fixed MAC on segment ``side``."""
        return f"52:54:00:c6:{MAC_BASE + self.k:02x}:{1 if side == 'L' else 2:02x}"

    def sink_addr(self, ip: int) -> str:
        """Address the generator sends to (the sink host's)."""
        return topo.addr(self.host_cidrs("R")[0 if ip == 4 else 1])

    @property
    def source_role(self) -> str:
        """Namespace role of the traffic source."""
        return "A" if self.k == 0 else f"A{self.k}"

    @property
    def sink_role(self) -> str:
        """Namespace role of the traffic sink."""
        return "B" if self.k == 0 else f"B{self.k}"

    @property
    def router_role(self) -> str:
        """Namespace role of the router for HV=none."""
        return f"RT{self.k}"

    def tap(self, side: str) -> str:
        """Name of the router's port on R1's bridge: the testbed's tapL/tapR for slot 0, else
        tap<side><k>; for HV=none the veth end on R1 is called v<side><k>."""
        return f"tap{side}" if self.k == 0 else f"tap{side}{self.k}"

    def veth(self, side: str) -> str:
        """R1's end of the veth to the HV=none router namespace."""
        return f"v{side}{self.k}"


def slot(k: int) -> Slot:
    """Slot ``k`` (0 <= k < MAX_SLOTS)."""
    if not 0 <= k < MAX_SLOTS:
        raise ValueError(f"router slot {k} is outside 0..{MAX_SLOTS - 1}")
    return Slot(k)


def check_slot0_matches_testbed() -> None:
    """Slot 0 must be the migrate testbed's router (the plan relies on it)."""
    s = Slot(0)
    for side in topo.SEGMENTS:
        port = topo.router_port(side)
        assert s.router_cidrs(side) == [port.ipv4, port.ipv6], side
        assert s.mac(side) == port.mac, side
