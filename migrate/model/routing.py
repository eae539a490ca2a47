"""The routing sessions of PEERING= as data: the router's and the peers' AS numbers and
addresses, and the arguments vrmig-router takes for them (routers/guestfs/vrmig-router).

The drivers pass :func:`router_args` to the router they start; migrate.experiment.peering
runs the peers from the same :func:`peers`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from migrate.testbed import topology as topo

ROUTER_ASN = 65000
#: segment -> the end host that peers with the router there, and its AS
PEER_ROLES = topo.PEER_ROLES
PEER_ASN = {"A": 65001, "B": 65002}
#: the addresses the peers announce (/32 on their loopbacks, topology.ANNOUNCED): the
#: cross-traffic goes to B's
SINK_ROUTED = topo.ANNOUNCED["B"]


class RoutingSettings(Protocol):
    """The PEERING settings of a scenario (migrate.model.scenario.Scenario has them)."""

    @property
    def peering(self) -> str: ...
    @property
    def peering_protocols(self) -> tuple[str, ...]: ...
    @property
    def bfd_interval_ms(self) -> int: ...
    @property
    def bfd_multiplier(self) -> int: ...
    @property
    def bgp_hold_s(self) -> int: ...
    @property
    def ospf_dead_s(self) -> int: ...


@dataclass(frozen=True)
class PeerSpec:
    """One peer: where it runs, its address and AS, and the router's address it peers with."""

    role: str
    segment: str
    addr: str
    asn: int
    router_addr: str
    announced: str


def peers() -> list[PeerSpec]:
    """The peers of the embedded testbed, segment L first."""
    out = []
    for seg, role in PEER_ROLES.items():
        out.append(
            PeerSpec(
                role=role,
                segment=seg,
                addr=topo.addr(topo.host(role).ipv4),
                asn=PEER_ASN[role],
                router_addr=topo.addr(topo.router_port(seg).ipv4),
                announced=topo.ANNOUNCED[role],
            )
        )
    return out


def router_args(s: RoutingSettings) -> list[str]:
    """vrmig-router's peering arguments for ``s`` (none without PEERING)."""
    if not s.peering:
        return []
    return [
        f"peering={','.join(s.peering_protocols)}",
        f"asn={ROUTER_ASN}",
        "peers=" + ",".join(f"{p.addr}/{p.asn}" for p in peers()),
        f"bfd={s.bfd_interval_ms}x{s.bfd_multiplier}",
        f"bgphold={s.bgp_hold_s}",
        *([f"ospfdead={s.ospf_dead_s}"] if "ospf" in s.peering_protocols else []),
    ]


def sink_address(s: RoutingSettings) -> str | None:
    """Where the cross-traffic goes with PEERING (the address B announces); None without."""
    return topo.addr(SINK_ROUTED) if s.peering else None
