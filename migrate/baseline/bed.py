"""The baseline's additions to the migrate testbed (see :mod:`migrate.baseline.plan`): end hosts
``A<k>``/``B<k>`` for the flows of further routers, the HV=none router namespaces ``RT<k>``
joined to R1's bridges by veths, and R1 taps for further router VMs.  Every namespace is
registered before it is created (teardown and ``clean-testbed`` remove it)."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable

from migrate.baseline.plan import Slot
from migrate.core.errors import TestbedError
from migrate.core.netlink import Rtnl, iproute
from migrate.testbed import topology as topo
from migrate.testbed.builder import Testbed, TestbedBuilder, add_tap

PING_TIMEOUT_S = 60.0
PING_WAIT_S = 1


def _index(ipr: Rtnl, name: str) -> int:
    found = ipr.link_lookup(ifname=name)
    if not found:
        raise TestbedError(f"interface {name} not found")
    return int(found[0])


class BaselineBed:
    """Adds slots to a built testbed (``builder`` built it; its registry owns everything)."""

    def __init__(self, builder: TestbedBuilder) -> None:
        self.builder = builder
        self.tb: Testbed = builder.tb

    def add_hosts(self, s: Slot) -> None:
        """Source ``A<k>`` on the left segment and sink ``B<k>`` on the right one (slot 0 uses the
        testbed's A and B)."""
        if s.k == 0:
            return
        for role, side in ((s.source_role, "L"), (s.sink_role, "R")):
            self.builder._netns(role)
            ns = self.tb.ns(role)
            sw_port = f"p{role}"
            with iproute(ns) as ipr:
                ipr.link(
                    "add", ifname=topo.HOST_IF, kind="veth", peer={"ifname": sw_port, "net_ns_fd": self.tb.ns("SW")}
                )
                idx = _index(ipr, topo.HOST_IF)
                for cidr in s.host_cidrs(side):
                    a, plen = cidr.split("/")
                    ipr.addr("add", index=idx, address=a, prefixlen=int(plen))
                ipr.link("set", index=idx, state="up")
                gw4, gw6 = (topo.addr(c) for c in s.router_cidrs(side))
                for gw in (gw4, gw6):
                    ipr.neigh("add", dst=gw, lladdr=s.mac(side), ifindex=idx, state="permanent")
                ipr.route("add", dst="0.0.0.0/0", gateway=gw4)
                ipr.route("add", dst="::/0", gateway=gw6, family=10)
            self.builder._attach_to_switch(sw_port, side)

    def add_router_netns(self, s: Slot) -> str:
        """HV=none: namespace ``RT<k>`` with eth0 (left) / eth1 (right) carrying the router's MACs,
        their peers ``vL<k>``/``vR<k>`` on R1's brL/brR.  Returns the namespace name."""
        self.builder._netns(s.router_role)
        ns = self.tb.ns(s.router_role)
        r1 = self.tb.ns("R1")
        for i, side in enumerate(topo.SEGMENTS):
            with iproute(r1) as ipr:
                ipr.link("add", ifname=s.veth(side), kind="veth", peer={"ifname": f"eth{i}", "net_ns_fd": ns})
                ipr.link("set", index=_index(ipr, s.veth(side)), master=_index(ipr, f"br{side}"), state="up")
            with iproute(ns) as ipr:
                ipr.link("set", index=_index(ipr, f"eth{i}"), address=s.mac(side))
        return ns

    def add_router_taps(self, s: Slot) -> tuple[tuple[str, str], tuple[str, str]]:
        """HV=kvm: taps on R1's bridges for slot ``k`` (slot 0: the testbed's tapL/tapR); returns
        ((tap, MAC) left, (tap, MAC) right) for QEMU."""
        if s.k > 0:
            with iproute(self.tb.ns("R1")) as ipr:
                for side in topo.SEGMENTS:
                    add_tap(self.tb.ns("R1"), s.tap(side))
                    ipr.link("set", index=_index(ipr, s.tap(side)), master=_index(ipr, f"br{side}"), state="up")
        left, right = ((s.tap(side), s.mac(side)) for side in topo.SEGMENTS)
        return left, right


def netns_runner(ns: str) -> Callable[[list[str]], int]:
    """Run a command in namespace ``ns``; its exit status."""
    return lambda argv: subprocess.run(["ip", "netns", "exec", ns, *argv], capture_output=True, check=False).returncode


def ping_until(
    run: Callable[[list[str]], int], ns: str, dst: str, timeout_s: float = PING_TIMEOUT_S, abort=None
) -> float:
    """Ping ``dst`` from ``ns`` (a namespace, or a lab's host: ``run`` runs the command there)
    until one reply (each try waits up to 1 s); return the seconds it took.  Resolves the
    router's neighbours and proves that it forwards (observed, not assumed)."""
    t0 = time.monotonic()
    while True:
        if run(["ping", "-n", "-q", "-c", "1", "-W", str(PING_WAIT_S), dst]) == 0:
            return time.monotonic() - t0
        if abort is not None and abort():
            raise TestbedError(f"aborted while pinging {dst} from {ns}")
        if time.monotonic() - t0 > timeout_s:
            raise TestbedError(f"{ns} got no reply from {dst} within {timeout_s:.0f} s: the router does not forward")


def link_packets(ns: str, ifname: str = topo.HOST_IF) -> tuple[int, int]:
    """(rx_packets, tx_packets) of an interface."""
    with iproute(ns) as ipr:
        stats = ipr.link("get", ifname=ifname)[0].get_attr("IFLA_STATS64")
        return int(stats["rx_packets"]), int(stats["tx_packets"])
