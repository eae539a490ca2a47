"""Builds the namespace testbed from ``topology`` with pyroute2; every namespace is registered
before it is created, so teardown (and ``clean-testbed`` after a crash) removes exactly it."""

from __future__ import annotations

import functools
import logging
import secrets
import shutil
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from migrate.core.atomic import write_bytes
from migrate.core.errors import TestbedError
from migrate.core.netlink import Rtnl, iproute
from migrate.core.procs import Proc
from migrate.core.registry import Registry
from migrate.core.rundir import COUNTERS_TSV
from migrate.testbed import topology as topo
from migrate.testbed.bridgeport import PortCut, RxPackets
from migrate.testbed.inventory import Inventory, embedded

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


def snmp_counter(snmp: str, section: str, name: str) -> int | None:
    """Counter ``name`` of ``section`` (``"Udp"``, ``"Tcp"``) from the text of a
    ``/proc/<pid>/net/snmp`` (a header line and a value line per section); None if it has none."""
    rows = [ln.split() for ln in snmp.splitlines() if ln.startswith(section + ":")]
    try:
        return int(rows[1][rows[0].index(name)])
    except (IndexError, ValueError):
        return None


def snmp_udp_in_datagrams(snmp: str) -> int | None:
    """``Udp: InDatagrams`` from the text of a ``/proc/<pid>/net/snmp``; None if it has none."""
    return snmp_counter(snmp, "Udp", "InDatagrams")


def new_prefix() -> str:
    """A fresh per-run prefix: 'vm' + 6 hex digits (fits 15-char ifnames and ns names)."""
    return "vm" + secrets.token_hex(3)


def _run(argv: list[str]) -> None:
    res = subprocess.run(argv, capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise TestbedError(f"{' '.join(argv)} failed: {res.stderr.strip()}")


def add_tap(ns: str, name: str) -> None:
    """Create the persistent tap ``name`` in namespace ``ns`` with iproute2 (``ip -n NS tuntap``).

    Not with pyroute2: its tuntap kind in a namespace forks a child that joins the namespace
    and opens /dev/net/tun with a 4 s reply timeout, and then fakes the netlink answer.  Under load
    (several QEMUs on two cores) the next request on that socket was seen to wait for ever
    (``link_lookup`` in epoll_wait, lab-up stuck after creating a tap)."""
    _run(["ip", "-n", ns, "tuntap", "add", "dev", name, "mode", "tap"])


@dataclass
class Testbed:
    """The embedded testbed: every role a network namespace of this machine, named by role.

    The run reaches the roles only through the methods below, which a lab of hosts reached over
    SSH (``migrate.testbed.labbed.LabBed``) provides as well."""

    __test__ = False
    prefix: str
    #: the migration link's rate cap (MIGLINK), or None: the veth pair as it is
    miglink_bps: int | None = None
    remote = False

    def describe(self) -> dict[str, Any]:
        """meta.json ``testbed``: the run's prefix, each role's namespace and the migration link's cap."""
        return {
            "prefix": self.prefix,
            "namespaces": {role: self.ns(role) for role in topo.all_roles()},
            "miglink_bps": self.miglink_bps,
        }

    def build(self, registry: Registry) -> None:
        """Create the namespaces, links and bridges of paper 004's Fig. 1 (registered first)."""
        if registry.prefix != self.prefix:
            raise TestbedError(f"registry {registry.prefix} is not the testbed's ({self.prefix})")
        log.info("building testbed %s", self.prefix)
        TestbedBuilder(registry, self.miglink_bps).build()

    def finish(self, meta: dict[str, Any], run_dir: Path) -> None:
        """After the instruments stopped: what the testbed adds to meta.json (one clock here: nothing)."""

    def router_port(self, role: str, side: str, hv: str) -> str:
        """The interface of hypervisor host ``role`` that is the bridge port of the router's
        interface on segment ``side`` (the inventory's ``taps``; HV=xen on a lab's Xen hosts:
        the host's interface that carries dom0's NIC)."""
        host = self.inventory.host(role)
        x = host.xen if hv == "xen" else None
        return (x.taps if x is not None else host.taps)[side]

    def wait_udp_bound(
        self,
        role: str,
        addr: str,
        port: int,
        timeout_s: float,
        abort: Callable[[], bool] | None = None,
        pid: int | None = None,
    ) -> None:
        """Wait until a UDP socket (of process ``pid`` on ``role``'s host, if given: ``Proc.host_pid``)
        is bound to ``addr:port`` on ``role``'s host (``ss`` by :meth:`run`: probes.irtt.wait_udp_bound)."""
        from probes.irtt import wait_udp_bound

        def ss(argv: list[str]) -> tuple[int, str, str]:
            res = self.run(role, argv)
            return res.returncode, res.stdout.decode(errors="replace"), res.stderr.decode(errors="replace")

        wait_udp_bound(ss, addr, port, timeout_s, where=role, pid=pid, abort=abort)

    def write_atomic(self, role: str, path: str, data: bytes) -> None:
        """Replace the file ``path`` that a helper on ``role`` reads (it polls it) in one step."""
        write_bytes(Path(path), data, fsync=False)

    def udp_in_datagrams(self, role: str, proc: Proc) -> int | None:
        """``Udp: InDatagrams`` of the network namespace of helper ``proc`` (``/proc/<pid>/net/snmp``);
        None if unreadable."""
        try:
            text = Path(f"/proc/{proc.pid}/net/snmp").read_text()
        except OSError:
            return None
        return snmp_udp_in_datagrams(text)

    def router_image(self, profile: str, kernel: Path, initrd: Path) -> tuple[Path, Path]:
        """The router image's kernel and initrd of ``profile`` as the hypervisor hosts see them:
        here, this machine's files."""
        return kernel, initrd

    #: R1 and R2 open one file system: a router's disk is one file both hosts' QEMU open, as
    #: paper 004's hosts share the router's storage (migration moves memory and devices only)
    shares_storage = True

    def place_image(self, role: str, local: Path, sha256: str) -> str:
        """The file ``local`` (content ``sha256``) as ``role``'s host opens it: here, itself."""
        return str(local)

    def console_output(self, role: str, local: Path) -> tuple[Path, str | None]:
        """Where QEMU on ``role`` writes the serial console that ends up in ``local`` (a file of
        the results directory), and the name of the stdout file that brings it there (None: it
        writes ``local`` itself)."""
        return local, None

    def follow_file(self, role: str, path: str, registry: Registry, run_dir: Path, name: str) -> Proc | None:
        """Copy the growing file ``path`` of ``role`` into ``run_dir``/``name`` as it is written
        (here ``path`` is that file already: nothing to do)."""
        return None

    def forward_qmp(self, role: str, local: Path, remote: str, timeout_s: float, alive: Callable[[], bool]) -> None:
        """Make QEMU's QMP socket ``remote`` on ``role`` reachable at ``local`` (here they are one file)."""

    def forward_socket(
        self,
        role: str,
        local: Path,
        remote: str,
        timeout_s: float,
        alive: Callable[[], bool],
        owner: str,
        what: str = "socket",
    ) -> None:
        """Make ``owner``'s Unix socket ``remote`` on ``role`` reachable at ``local`` (here they
        are one file: a client connects once the socket is there)."""

    def port_cut(self, role: str, ifname: str, registry: Registry) -> PortCut:
        """Cut and restore bridge port ``ifname`` of ``role`` (one netlink request each, from here)."""
        return PortCut(self.ns(role), ifname)

    def rx_counter(self, role: str, ifname: str) -> RxPackets:
        """``ifname``'s receive packet counter on ``role``, for polling."""
        return RxPackets(self.ns(role), ifname)

    def ns(self, role: str) -> str:
        """Namespace name of a role ('A', 'R1', ...)."""
        return f"{self.prefix}-{role}"

    @property
    def inventory(self) -> Inventory:
        """The testbed described as an inventory."""
        return embedded()

    def host_if(self, role: str) -> str:
        """The interface of end host ``role`` (A, B, C, D) on its segment: the one the
        inventory names (a lab's own), the embedded testbed's ``eth0`` otherwise."""
        return self.inventory.host(role).interface or topo.HOST_IF

    def spawn(
        self,
        role: str,
        what: str,
        argv: list[str],
        registry: Registry,
        out_dir: Path,
        stdout_name: str | None = None,
        wait: bool = True,
    ) -> Proc:
        """Start ``argv`` on ``role``'s host (output in ``out_dir``) and return once its PID is
        recorded; ``wait=False``: at once where that takes a round trip (a lab host), and the
        caller then calls ``started()``, so that several start together."""
        p = self.proc_kind(role)(what, argv, registry, out_dir, stdout_name=stdout_name).start()
        return p.started() if wait else p

    def proc_kind(self, role: str) -> Callable[..., Proc]:
        """How a process on ``role``'s host is made (Proc's arguments after ``netns``): a child of
        this machine in ``role``'s namespace."""
        return functools.partial(Proc, netns=self.ns(role))

    def out_path(self, role: str, run_dir: Path, name: str, unique: str | None = None) -> str:
        """Where a helper running on ``role`` writes the file ``name``: the results directory
        ``run_dir``.  ``unique``: the name to use instead where every file of the run shares one
        directory, as on a lab's host (``name`` recurs in several ``run_dir``); unused here."""
        return str(run_dir / name)

    def helper(self, role: str, argv0: str) -> str:
        """The path on ``role`` of a helper program given by its path on this machine."""
        return argv0

    def offset_ns(self, role: str) -> tuple[int, int]:
        """(offset, uncertainty) in ns of ``role``'s clock against this machine's: every role
        reads this machine's CLOCK_REALTIME, so (0, 0)."""
        return 0, 0

    def clock_offsets(self, roles: Sequence[str]) -> dict[str, int]:
        """The offsets to apply where stamps of ``roles`` meet this machine's: none, as every
        role reads one clock."""
        return {}

    def rx_packets(self, role: str, ifname: str) -> int:
        """Kernel rx packet counter of one interface of ``role``."""
        with iproute(self.ns(role)) as ipr:
            link = ipr.link("get", ifname=ifname)[0]
            return int(link.get_attr("IFLA_STATS64")["rx_packets"])

    def run(self, role: str, argv: list[str], timeout_s: float = 30.0) -> subprocess.CompletedProcess[bytes]:
        """Run a short command in ``role``'s namespace, output captured, never raising on its
        exit status (a lab host runs it over SSH)."""
        return subprocess.run(
            ["ip", "netns", "exec", self.ns(role), *argv], capture_output=True, timeout=timeout_s, check=False
        )

    def fetch(self, role: str, path: str, local: Path) -> None:
        """Copy the file ``path`` of ``role`` to ``local``: here they are one file system, so
        nothing is copied when ``path`` is ``local`` already."""
        if Path(path).resolve() != local.resolve():
            shutil.copyfile(path, local)

    def read_bytes(self, role: str, path: str) -> bytes | None:
        """A file a helper on ``role`` writes (None if it does not exist yet)."""
        try:
            return Path(path).read_bytes()
        except OSError:
            return None

    def sampler_plan(self) -> list[tuple[str, dict[str, list[str]], str]]:
        """(role the sampler runs on, its targets, its output name): one sampler in R1 reading
        every namespace."""
        return [("R1", self.sampler_targets(), COUNTERS_TSV)]

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
        with iproute(name) as ipr:
            ipr.link("set", index=ipr.link_lookup(ifname="lo")[0], state="up")

    @staticmethod
    def _bridge(ipr: Rtnl, name: str) -> int:
        ipr.link("add", ifname=name, kind="bridge", **BRIDGE_OPTS)
        idx = ipr.link_lookup(ifname=name)[0]
        ipr.link("set", index=idx, state="up")
        return idx

    def _switch(self) -> None:
        with iproute(self.tb.ns(topo.SWITCH)) as ipr:
            for seg in topo.SEGMENTS:
                self._bridge(ipr, f"seg{seg}")

    def _attach_to_switch(self, sw_port: str, segment: str) -> None:
        with iproute(self.tb.ns(topo.SWITCH)) as ipr:
            idx = ipr.link_lookup(ifname=sw_port)[0]
            br = ipr.link_lookup(ifname=f"seg{segment}")[0]
            ipr.link("set", index=idx, master=br, state="up")

    def _end_host(self, h: topo.EndHost) -> None:
        ns = self.tb.ns(h.role)
        sw_port = f"p{h.role}"
        rp = topo.router_port(h.segment)
        with iproute(ns) as ipr:
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
        with iproute(ns) as ipr:
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
                add_tap(ns, f"tap{seg}")
                for port in (up, f"tap{seg}"):
                    idx = ipr.link_lookup(ifname=port)[0]
                    ipr.link("set", index=idx, master=br, state="up")
                self._attach_to_switch(sw_port, seg)

    def _migration_link(self) -> None:
        r1, r2 = (self.tb.ns(r) for r in topo.HYPERVISOR_HOSTS)
        with iproute(r1) as ipr:
            ipr.link(
                "add",
                ifname=topo.MIGRATION_IF,
                kind="veth",
                peer={"ifname": topo.MIGRATION_IF, "net_ns_fd": r2},
            )
        for r in topo.HYPERVISOR_HOSTS:
            with iproute(self.tb.ns(r)) as ipr:
                idx = ipr.link_lookup(ifname=topo.MIGRATION_IF)[0]
                a, plen = topo.MIGRATION_ADDR[r].split("/")
                ipr.addr("add", index=idx, address=a, prefixlen=int(plen))
                ipr.link("set", index=idx, state="up")
                if self.miglink_bps:
                    self._cap(ipr, idx, self.miglink_bps)

    @staticmethod
    def _cap(ipr: Rtnl, idx: int, rate_bps: int) -> None:
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
