"""The testbed as a router profile's config template sees it (docs/own-router.md "Template
variables"): the router's two data-plane NICs with their fixed MACs and addresses, the end hosts
of each segment, the static routes and the routing sessions of PEERING=.

It lives in the model, not in routers.profile_file, because routers may not import the topology
or the routing model (tests/unit/test_layout.py); routers.profile_file renders what this builds."""

from __future__ import annotations

import ipaddress

from migrate.model import routing
from migrate.testbed import topology as topo
from routers.profile_context import ConfigContext, HostAddr, Interface, Neighbour, Peering
from routers.profile_file import RouterProfile

#: profile NIC role -> testbed segment
ROLE_SEGMENT = {"left": "L", "right": "R"}
SEGMENT_ROLE = {seg: role for role, seg in ROLE_SEGMENT.items()}


def _host(h: topo.EndHost) -> HostAddr:
    return HostAddr(
        role=h.role, ipv4=h.ipv4, ipv6=h.ipv6, ipv4_address=topo.addr(h.ipv4), ipv6_address=topo.addr(h.ipv6)
    )


def _interface(profile: RouterProfile, role: str) -> Interface:
    seg = ROLE_SEGMENT[role]
    port = topo.router_port(seg)
    index = profile.hardware.nic_index(role)
    assert index is not None  # the loader requires one left and one right NIC
    v4, v6 = ipaddress.ip_interface(port.ipv4), ipaddress.ip_interface(port.ipv6)
    return Interface(
        role=role,
        segment=seg,
        index=index,
        mac=port.mac,
        ipv4=port.ipv4,
        ipv6=port.ipv6,
        ipv4_address=str(v4.ip),
        ipv4_prefixlen=v4.network.prefixlen,
        ipv6_address=str(v6.ip),
        ipv6_prefixlen=v6.network.prefixlen,
        hosts=tuple(_host(h) for h in topo.END_HOSTS if h.segment == seg),
    )


def _peering(s: routing.RoutingSettings) -> Peering:
    protocols = s.peering_protocols
    return Peering(
        protocols=protocols,
        bgp="bgp" in protocols,
        ospf="ospf" in protocols,
        bfd="bfd" in protocols,
        asn=routing.ROUTER_ASN,
        # vrmig-router's router id: the first IPv4 address of the interfaces (segment L's port)
        router_id=topo.addr(topo.router_port(topo.SEGMENTS[0]).ipv4),
        neighbours=tuple(
            Neighbour(
                role=p.role,
                interface=SEGMENT_ROLE[p.segment],
                address=p.addr,
                asn=p.asn,
                local_address=p.router_addr,
                announced=p.announced,
            )
            for p in routing.peers()
        ),
        bfd_interval_ms=s.bfd_interval_ms,
        bfd_multiplier=s.bfd_multiplier,
        bgp_hold_s=s.bgp_hold_s,
        bgp_keepalive_s=s.bgp_hold_s // 3,  # RFC 4271's suggestion, as vrmig-router
        ospf_dead_s=s.ospf_dead_s,
        ospf_hello_s=max(1, s.ospf_dead_s // 4),  # as vrmig-router and the peers
    )


def testbed_context(profile: RouterProfile, settings: routing.RoutingSettings | None = None) -> ConfigContext:
    """The template context of ``profile`` on the Fig. 1 testbed; ``settings`` (a Scenario) gives
    PEERING= and its timers (None or an empty PEERING: no routing sessions).

    No static routes either way, as vrmig-router sets none: without PEERING the cross-traffic goes
    to B's address on segment R (connected), with PEERING to the /32 B announces, which the
    router learns over BGP or OSPF."""
    peering = _peering(settings) if settings is not None and settings.peering else None
    return ConfigContext(
        router={
            "name": profile.router.name,
            "hostname": "".join(c if c.isalnum() or c == "-" else "-" for c in profile.router.name),
            "kind": profile.router.kind,
            "software": profile.router.software,
            "version": profile.router.version,
            "console_marker": profile.readiness.console_marker,
        },
        interfaces=tuple(sorted((_interface(profile, r) for r in ROLE_SEGMENT), key=lambda i: i.index)),
        mgmt=profile.hardware.nic_index("mgmt"),
        static_routes=(),
        peering=peering,
    )
