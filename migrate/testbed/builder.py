"""Builds the namespace testbed from ``topology`` with pyroute2; every namespace is registered
before it is created, so teardown (and ``clean-testbed`` after a crash) removes exactly it."""

from __future__ import annotations

import logging
import secrets
import subprocess
from dataclasses import dataclass

from pyroute2 import IPRoute

from migrate.core.errors import TestbedError
from migrate.core.registry import Registry
from migrate.testbed import topology as topo

log = logging.getLogger(__name__)

TBF_LATENCY_MS = 50
BRIDGE_OPTS = {"br_stp_state": 0, "br_forward_delay": 0}

# sysctls set in every namespace before its links exist
_COMMON_SYSCTLS = (
    "net.ipv6.conf.default.accept_dad=0",
    "net.ipv6.conf.all.accept_dad=0",
    "net.ipv6.conf.default.accept_ra=0",
    "net.ipv6.conf.default.router_solicitations=0",
)
# bridges-only namespaces: no IPv6 on ports, so no MLD/RS noise in the counters
_L2_SYSCTLS = ("net.ipv6.conf.default.disable_ipv6=1", "net.ipv6.conf.all.disable_ipv6=1")


def new_prefix() -> str:
    """A fresh per-run prefix: 'vm' + 6 hex digits (fits 15-char ifnames and ns names)."""
    return "vm" + secrets.token_hex(3)


def _run(argv: list[str]) -> None:
    res = subprocess.run(argv, capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise TestbedError(f"{' '.join(argv)} failed: {res.stderr.strip()}")


@dataclass
class Testbed:
    """A built testbed: namespace names by role."""

    __test__ = False
    prefix: str

    def ns(self, role: str) -> str:
        """Namespace name of a role ('A', 'R1', ...)."""
        return f"{self.prefix}-{role}"

    def sampler_targets(self) -> dict[str, list[str]]:
        """Interfaces the 10 ms counter sampler reads, per namespace."""
        targets = {self.ns(h.role): [topo.HOST_IF] for h in topo.END_HOSTS}
        for r in topo.HYPERVISOR_HOSTS:
            targets[self.ns(r)] = ["tapL", "tapR", "upL", "upR", topo.MIGRATION_IF]
        return targets


class TestbedBuilder:
    """Creates the testbed's namespaces, bridges, veths and taps inside ``registry``."""

    __test__ = False

    def __init__(self, registry: Registry, miglink_bps: int | None = None) -> None:
        self.registry = registry
        self.tb = Testbed(registry.prefix)
        self.miglink_bps = miglink_bps

    def build(self) -> Testbed:
        """Build everything; on error the caller's teardown removes what was registered."""
        for role in topo.all_roles():
            self._netns(role)
        self._switch()
        for h in topo.END_HOSTS:
            self._end_host(h)
        for r in topo.HYPERVISOR_HOSTS:
            self._hypervisor_host(r)
        self._migration_link()
        log.info("testbed %s built: %s", self.tb.prefix, ", ".join(topo.all_roles()))
        return self.tb

    def _netns(self, role: str) -> None:
        name = self.tb.ns(role)
        self.registry.create_netns(name)
        sysctls = list(_COMMON_SYSCTLS)
        if role == topo.SWITCH or role in topo.HYPERVISOR_HOSTS:
            sysctls += _L2_SYSCTLS
        _run(["ip", "netns", "exec", name, "sysctl", "-qw", *sysctls])
        with IPRoute(netns=name) as ipr:
            ipr.link("set", index=ipr.link_lookup(ifname="lo")[0], state="up")

    @staticmethod
    def _bridge(ipr: IPRoute, name: str) -> int:
        ipr.link("add", ifname=name, kind="bridge", **BRIDGE_OPTS)
        idx = ipr.link_lookup(ifname=name)[0]
        ipr.link("set", index=idx, state="up")
        return idx

    def _switch(self) -> None:
        with IPRoute(netns=self.tb.ns(topo.SWITCH)) as ipr:
            for seg in topo.SEGMENTS:
                self._bridge(ipr, f"seg{seg}")

    def _attach_to_switch(self, sw_port: str, segment: str) -> None:
        with IPRoute(netns=self.tb.ns(topo.SWITCH)) as ipr:
            idx = ipr.link_lookup(ifname=sw_port)[0]
            br = ipr.link_lookup(ifname=f"seg{segment}")[0]
            ipr.link("set", index=idx, master=br, state="up")

    def _end_host(self, h: topo.EndHost) -> None:
        ns = self.tb.ns(h.role)
        sw_port = f"p{h.role}"
        rp = topo.router_port(h.segment)
        with IPRoute(netns=ns) as ipr:
            ipr.link(
                "add",
                ifname=topo.HOST_IF,
                kind="veth",
                peer={"ifname": sw_port, "net_ns_fd": self.tb.ns(topo.SWITCH)},
            )
            idx = ipr.link_lookup(ifname=topo.HOST_IF)[0]
            for cidr in (h.ipv4, h.ipv6):
                a, plen = cidr.split("/")
                ipr.addr("add", index=idx, address=a, prefixlen=int(plen))
            ipr.link("set", index=idx, state="up")
            # permanent neighbour entries: no ARP/ND broadcasts from the hosts during a run
            for gw in (rp.ipv4, rp.ipv6):
                ipr.neigh("add", dst=topo.addr(gw), lladdr=rp.mac, ifindex=idx, state="permanent")
            ipr.route("add", dst="0.0.0.0/0", gateway=topo.addr(rp.ipv4))
            ipr.route("add", dst="::/0", gateway=topo.addr(rp.ipv6), family=10)
        self._attach_to_switch(sw_port, h.segment)

    def _hypervisor_host(self, r: str) -> None:
        ns = self.tb.ns(r)
        with IPRoute(netns=ns) as ipr:
            for seg in topo.SEGMENTS:
                sw_port = f"p{r}{seg}"
                up = f"up{seg}"
                ipr.link(
                    "add",
                    ifname=up,
                    kind="veth",
                    peer={"ifname": sw_port, "net_ns_fd": self.tb.ns(topo.SWITCH)},
                )
                br = self._bridge(ipr, f"br{seg}")
                ipr.link("add", ifname=f"tap{seg}", kind="tuntap", mode="tap")
                for port in (up, f"tap{seg}"):
                    idx = ipr.link_lookup(ifname=port)[0]
                    ipr.link("set", index=idx, master=br, state="up")
                self._attach_to_switch(sw_port, seg)

    def _migration_link(self) -> None:
        r1, r2 = (self.tb.ns(r) for r in topo.HYPERVISOR_HOSTS)
        with IPRoute(netns=r1) as ipr:
            ipr.link(
                "add",
                ifname=topo.MIGRATION_IF,
                kind="veth",
                peer={"ifname": topo.MIGRATION_IF, "net_ns_fd": r2},
            )
        for r in topo.HYPERVISOR_HOSTS:
            with IPRoute(netns=self.tb.ns(r)) as ipr:
                idx = ipr.link_lookup(ifname=topo.MIGRATION_IF)[0]
                a, plen = topo.MIGRATION_ADDR[r].split("/")
                ipr.addr("add", index=idx, address=a, prefixlen=int(plen))
                ipr.link("set", index=idx, state="up")
                if self.miglink_bps:
                    self._cap(ipr, idx, self.miglink_bps)

    @staticmethod
    def _cap(ipr: IPRoute, idx: int, rate_bps: int) -> None:
        """Token-bucket cap on the migration link (egress of each end)."""
        burst = max(rate_bps // 8 // 100, 16 * 1024)  # 10 ms worth, at least 16 KiB
        ipr.tc(
            "add",
            "tbf",
            index=idx,
            handle="1:",
            rate=f"{rate_bps}bit",
            burst=burst,
            latency=f"{TBF_LATENCY_MS}ms",
        )
