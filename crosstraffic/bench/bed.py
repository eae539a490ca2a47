"""The traffic benchmark's testbed: namespaces A -> SW (a Linux bridge) -> B, no router.

    with bridge_bed(rx_cpu=1) as bed:
        ...  # bed.a, bed.sw, bed.b namespaces; bed.b4 the sink address; bed.b_mac, bed.a_mac

``A:eth0 <-veth-> SW:pA``, ``SW:pB <-veth-> B:eth0``, ``pA`` and ``pB`` on bridge ``br0``.
Neighbour entries (IPv4 and IPv6) and the bridge's forwarding entries are static, so no ARP/ND
or flooding disturbs a run.  With ``rx_cpu`` set, RPS on ``SW:pA`` moves everything after the
first veth hop (bridge, B's IP/UDP receive, socket enqueue) to that CPU: the generator's core
then carries only the sending side, as a real sender host would.  Without it, a veth hands each
packet to the receiving stack on the sender's own CPU.

Namespaces are named ``vrt-bt-<random>-{A,SW,B}``, recorded in a run registry
(``migrate.core.registry``: its state file and reaper) before they are created, and deleted when
the block ends (Ctrl-C included) or, if the benchmark is killed (SIGKILL), by the registry's
reaper; readiness is a ping A -> B.
"""

from __future__ import annotations

import contextlib
import functools
import secrets
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass

from crosstraffic.runner import End, address_ends, ip, link_mac, wait_reachable
from migrate.core.registry import Registry

NS_PREFIX = "vrt-bt-"


class BedError(RuntimeError):
    """The testbed could not be built."""


@dataclass(frozen=True)
class BridgeBed:
    """Names and addresses of one A -> SW -> B testbed."""

    a: str
    sw: str
    b: str
    a_mac: str
    b_mac: str
    rx_cpu: int | None
    a_if: str = "eth0"
    b_if: str = "eth0"
    a4: str = "198.18.120.1"
    b4: str = "198.18.120.2"
    a6: str = "2001:2:0:120::1"
    b6: str = "2001:2:0:120::2"

    def describe(self) -> dict[str, object]:
        """For meta files."""
        return {
            "topology": "A:eth0 -veth- SW:pA [br0] SW:pB -veth- B:eth0 (no router)",
            "namespaces": [self.a, self.sw, self.b],
            "a": {"ipv4": self.a4, "ipv6": self.a6, "mac": self.a_mac},
            "b": {"ipv4": self.b4, "ipv6": self.b6, "mac": self.b_mac},
            "rps_rx_cpu": self.rx_cpu,
        }


# ``ip`` commands and MAC look-ups of the bed: their failures are BedError
_ip = functools.partial(ip, error=BedError)
_mac = functools.partial(link_mac, error=BedError)


def _in_ns(ns: str, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", "netns", "exec", ns, *argv], capture_output=True, text=True, check=False)


def _set_rps(ns: str, ifname: str, cpu: int) -> None:
    """Steer the receive processing of ``ifname`` (in ``ns``) to ``cpu`` (RPS; sysfs of that netns)."""
    mask = format(1 << cpu, "x")
    # a fixed script; mask and interface name only as positional arguments
    r = _in_ns(ns, "sh", "-c", 'echo "$1" > "/sys/class/net/$2/queues/rx-0/rps_cpus"', "sh", mask, ifname)
    if r.returncode != 0:
        raise BedError(f"RPS on {ns}:{ifname} -> CPU {cpu}: {r.stderr.strip()}")


@contextlib.contextmanager
def bridge_bed(rx_cpu: int | None = 1) -> Iterator[BridgeBed]:
    """Build A -> SW(br0) -> B; always delete the three namespaces afterwards (the registry's
    teardown, or its reaper if this process is killed)."""
    token = secrets.token_hex(3)
    base = f"{NS_PREFIX}{token}"
    a, sw, b = f"{base}-A", f"{base}-SW", f"{base}-B"
    with Registry(f"bt{token}") as reg:
        for ns in (a, sw, b):
            reg.create_netns(ns)  # recorded first, then created with signals held
        _ip("-n", a, "link", "add", "eth0", "type", "veth", "peer", "name", "pA", "netns", sw)
        _ip("-n", b, "link", "add", "eth0", "type", "veth", "peer", "name", "pB", "netns", sw)
        _ip("-n", sw, "link", "add", "br0", "type", "bridge", "stp_state", "0")
        for port in ("pA", "pB"):
            _ip("-n", sw, "link", "set", port, "master", "br0")
            _ip("-n", sw, "link", "set", port, "up")
        for ns in (a, sw, b):
            _ip("-n", ns, "link", "set", "lo", "up")
        _ip("-n", sw, "link", "set", "br0", "up")
        bed = BridgeBed(a=a, sw=sw, b=b, a_mac=_mac(a, "eth0"), b_mac=_mac(b, "eth0"), rx_cpu=rx_cpu)
        address_ends(
            End(a, bed.a_if, bed.a4, bed.a6, bed.a_mac), End(b, bed.b_if, bed.b4, bed.b6, bed.b_mac), error=BedError
        )
        for mac, port in ((bed.b_mac, "pB"), (bed.a_mac, "pA")):
            _ip("-n", sw, "link", "set", port, "type", "bridge_slave", "learning", "off")
            r = subprocess.run(
                ["bridge", "-n", sw, "fdb", "replace", mac, "dev", port, "master", "static"],
                capture_output=True,
                text=True,
                check=False,
            )
            if r.returncode != 0:
                raise BedError(f"bridge fdb {mac} {port}: {r.stderr.strip()}")
        if rx_cpu is not None:
            _set_rps(sw, "pA", rx_cpu)
        wait_reachable(a, (bed.b4, bed.b6), "through the bridge", error=BedError)
        yield bed
    if reg.teardown_problems:
        raise BedError("; ".join(reg.teardown_problems))
