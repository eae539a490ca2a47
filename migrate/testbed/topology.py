"""The paper-004 Fig. 1 testbed, described as data (addresses, MACs, links)."""

from __future__ import annotations

from dataclasses import dataclass

SEGMENTS = ("L", "R")


@dataclass(frozen=True)
class EndHost:
    """A host on one L2 segment (A, B, C, D)."""

    role: str
    segment: str
    ipv4: str
    ipv6: str


@dataclass(frozen=True)
class RouterPort:
    """The router VM's interface on a segment, and the fixed MAC it keeps across migration."""

    segment: str
    guest_ifname: str
    ipv4: str
    ipv6: str
    mac: str


END_HOSTS = (
    EndHost("A", "L", "198.18.1.10/24", "2001:2:0:1::10/64"),
    EndHost("C", "L", "198.18.1.11/24", "2001:2:0:1::11/64"),
    EndHost("B", "R", "198.18.2.10/24", "2001:2:0:2::10/64"),
    EndHost("D", "R", "198.18.2.11/24", "2001:2:0:2::11/64"),
)
ROUTER_PORTS = (
    RouterPort("L", "eth0", "198.18.1.1/24", "2001:2:0:1::1/64", "52:54:00:c6:12:01"),
    RouterPort("R", "eth1", "198.18.2.1/24", "2001:2:0:2::1/64", "52:54:00:c6:12:02"),
)
#: PEERING=: the addresses the routing peers on A and B announce over BGP (/32s on their
#: loopbacks, outside both segments); the cross-traffic then goes to B's
ANNOUNCED = {"A": "198.18.3.10/32", "B": "198.18.4.10/32"}
#: PEERING=: segment -> the end host that peers with the router there
PEER_ROLES = {"L": "A", "R": "B"}
HYPERVISOR_HOSTS = ("R1", "R2")
SWITCH = "SW"
MIGRATION_ADDR = {"R1": "198.19.255.1/30", "R2": "198.19.255.2/30"}
MIGRATION_IF = "mig0"
MIGRATION_PORT = 4444
HOST_IF = "eth0"


def host(role: str) -> EndHost:
    """The end host with this role."""
    return next(h for h in END_HOSTS if h.role == role)


def router_port(segment: str) -> RouterPort:
    """The router port on this segment."""
    return next(p for p in ROUTER_PORTS if p.segment == segment)


def addr(cidr: str) -> str:
    """'198.18.1.1/24' -> '198.18.1.1'."""
    return cidr.split("/", 1)[0]


def all_roles() -> list[str]:
    """Every namespace role of the testbed, in build order."""
    return [SWITCH, *HYPERVISOR_HOSTS, *(h.role for h in END_HOSTS)]
