"""The router slot as an end host (``make baseline ROLE=vm-tx|vm-rx``): the seeds' VM throughput
experiments (papers 000, 001 and 003 measure the VM sending and receiving, not only forwarding).

* ``vm-tx``: the generator runs in the end host and sends from its eth1 to B (B's sink as for a
  forwarding point);
* ``vm-rx``: A's generator sends to the end host's eth0 address, the sink runs in the end host;
* ``vm-vm``: two end hosts on the same machine (routers 0 and 1, two guests, two containers or two
  namespaces): router 0's generator sends from its eth0 to router 1's eth0 address, where the sink
  runs.  Both are on segment L, in different subnets: each gets an on-link host route to the other
  (:meth:`EndHost.route_to`), so the traffic crosses the host's bridge only, never a router.

The end host is slot 0's router itself, with its addresses and MACs: under HV=kvm the router VM
(the guest image carries vrgen, vrsink and vrtcp in /usr/sbin; they run through the guest's
console shell, :class:`migrate.drivers.guest_shell.GuestShell`, booted with ``vrmig.shell=1``);
under HV=criu the router container (paper 001's OpenVZ row: the same tools from the container's
own /usr/sbin, the rootfs of the guest image, started by ``nsenter`` in its mount, uts, ipc and
network namespaces, as :class:`migrate.baseline.routers.BusyLoop` is); under HV=none the router's
network namespace ``RT0`` with the host's own tools: the bare host, the reference of seed 000's
efficiency E.  The router keeps routing (its daemons run), so the
irtt probes C -> D still cross it.

A tool in the guest is driven by :class:`GuestTool`, which offers the part of
:class:`migrate.core.procs.Proc` a baseline point uses (readiness by its READY line, exit,
signals, the output file), so that :mod:`migrate.baseline.point` measures an end-host flow with
the same code as a forwarded one.  Its output is read back over the console once it has exited
and written where a host tool's would be (``gen-0.json``, ``sink-0.json`` and ``.stderr``)."""

from __future__ import annotations

import contextlib
import signal
import subprocess
from pathlib import Path
from typing import Any

from migrate.baseline.plan import Slot
from migrate.core.errors import GuestError
from migrate.core.procs import Proc
from migrate.core.registry import Registry
from migrate.testbed import topology as topo
from migrate.testbed.builder import snmp_counter

#: where the guest image installs the traffic tools (routers.build CROSSTRAFFIC_TOOLS)
GUEST_BIN = "/usr/sbin"
#: one command over the console (start a job, read a file, send a signal)
CMD_TIMEOUT_S = 15.0


SNMP, SNMP6 = "/proc/net/snmp", "/proc/net/snmp6"


def delivered_count(text: str) -> int:
    """Udp InDatagrams + Udp6InDatagrams + Tcp InSegs (IPv4 and IPv6 together) from the text of
    /proc/net/snmp followed by /proc/net/snmp6: the datagrams and segments the kernel delivered
    locally (a forwarded packet counts in none of them).  ValueError when one is missing."""
    six = [ln.split() for ln in text.splitlines() if ln.startswith("Udp6InDatagrams")]
    found = {
        "Udp:InDatagrams": snmp_counter(text, "Udp", "InDatagrams"),
        "Tcp:InSegs": snmp_counter(text, "Tcp", "InSegs"),
        "Udp6InDatagrams": int(six[0][1]) if six and len(six[0]) == 2 else None,
    }
    missing = [k for k, v in found.items() if v is None]
    if missing:
        raise ValueError(f"/proc/net/snmp(6) without {', '.join(missing)}")
    return sum(v for v in found.values() if v is not None)


class GuestTool:
    """A traffic tool running in the guest as a background job of its console shell."""

    def __init__(self, shell: Any, what: str, argv: list[str], out_dir: Path, stdout_name: str | None) -> None:
        self.shell, self.what = shell, what
        self.argv = [f"{GUEST_BIN}/{Path(argv[0]).name}", *argv[1:]]
        self.stdout_path = out_dir / (stdout_name or f"{what}.stdout")
        self.stderr_path = out_dir / f"{what}.stderr"
        self._rc: int | None = None
        self._stderr = ""
        self.rereads = 0  # its files' reads repeated after a checksum mismatch (GuestShell.read_file)
        self.job = shell.start(self.argv, CMD_TIMEOUT_S)
        self.pid = self.job.pid  # in the guest

    def wait_for(self, marker: str, timeout_s: float, abort: Any = None) -> None:
        """Wait until the tool printed ``marker`` on stderr (vrsink's READY)."""
        self.shell.wait_output(self.job, marker, timeout_s)

    def _collect(self, timeout_s: float, sig: str | None) -> int | None:
        try:
            res = self.shell.finish(self.job, timeout_s, signal=sig)
        except GuestError:
            return None
        self._rc, self._stderr = res.rc, res.stderr
        self.rereads += res.rereads
        self.stdout_path.write_text(res.stdout)
        self.stderr_path.write_text(res.stderr)
        return self._rc

    def wait(self, timeout_s: float) -> int | None:
        """Wait for the tool's own exit; its status (output saved), None if it still runs."""
        return self._rc if self._rc is not None else self._collect(timeout_s, None)

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 10.0) -> int | None:
        """Send ``sig`` to the tool in the guest and wait for its exit (KILL after ``timeout_s``)."""
        if self._rc is not None:
            return self._rc
        name = signal.Signals(sig).name.removeprefix("SIG")
        rc = self._collect(timeout_s, name)
        if rc is None and sig != signal.SIGKILL:
            rc = self._collect(CMD_TIMEOUT_S, "KILL")
        return rc

    def alive(self) -> bool:
        """The job has not exited (as far as the shell can tell)."""
        if self._rc is not None:
            return False
        try:
            return self.shell.job_rc(self.job, CMD_TIMEOUT_S) is None
        except GuestError:
            return False

    def returncode(self) -> int | None:
        """Exit status once collected."""
        return self._rc

    def stderr_tail(self, n: int = 5) -> str:
        """Last ``n`` lines of the tool's stderr (once collected)."""
        return " | ".join(self._stderr.strip().splitlines()[-n:])


#: the namespaces a tool enters to run in the router container (not its pid namespace: nsenter
#: then execs in place, so the recorded PID is the tool's own)
CT_NAMESPACES = ("--mount", "--uts", "--ipc", "--net")


class EndHost:
    """Slot 0's router as the end host of ``role``: in the guest (``shell``), in the router
    container (``enter_pid``: its init, HV=criu) or in the router's network namespace
    (``netns``, HV=none).

    An end host entered by ``enter_pid`` runs its commands through its testbed (``host``: the
    testbed and the router host's role, "R1"), as every helper does: in R1's namespace here, over
    R1's SSH connection under its guard on a lab: ``nsenter`` into the container (its own tools) or, with
    ``container`` False, into the network namespace of the bare router's daemon ``enter_pid`` (the
    host's deployed tools); their counters are read from that host's /proc.  A guest's console is
    reached through a forwarded socket (``shell``), as on the embedded testbed."""

    def __init__(
        self,
        role: str,
        slot: Slot,
        registry: Registry,
        *,
        shell: Any = None,
        netns: str | None = None,
        ns_pid: int | None = None,
        enter_pid: int | None = None,
        container: bool = True,
        host: tuple[Any, str] | None = None,
    ) -> None:
        if sum(x is not None for x in (shell, netns, enter_pid)) != 1:
            raise ValueError("an end host runs its tools in one place: a guest shell, a container or a namespace")
        if host is not None and netns is not None:
            raise ValueError("an end host on a lab's host is entered by a process of its namespace, not by name")
        if not container and enter_pid is None:
            raise ValueError("container=False names a bare router's namespace entered by enter_pid")
        self.role, self.slot, self.reg, self.shell, self.netns = role, slot, registry, shell, netns
        self.enter_pid, self.container, self.host = enter_pid, container and enter_pid is not None, host
        # a process of the end host's network namespace (a router daemon, the container's init):
        # its /proc/<pid>/net is the namespace's
        self.ns_pid = enter_pid if enter_pid is not None else ns_pid

    @property
    def name(self) -> str:
        """How point.json names it (``from``/``to`` of the flow): "VM" (its own clock), "CT" (the
        container: the host's kernel and clock) or the bare host's namespace role; router k >= 1
        (ROLE=vm-vm's receiver) with its number, "VM1", "CT1"."""
        if self.shell is None and not self.container:
            return self.slot.router_role
        kind = "VM" if self.shell is not None else "CT"
        return kind if self.slot.k == 0 else f"{kind}{self.slot.k}"

    @property
    def clock_role(self) -> str | None:
        """The lab host whose clock its tools read (the container and the bare router share their
        host's kernel); None on the embedded testbed, and for a guest (its own clock)."""
        return self.host[1] if self.host is not None and self.shell is None else None

    @property
    def own_files(self) -> bool:
        """Its tools write their files in its own filesystem (the guest's or the container's /tmp),
        not in the run directory."""
        return self.shell is not None or self.container

    def file_path(self, point_dir: Path, name: str, unique: str) -> str:
        """Where its tool writes the trace ``name`` of the point ``point_dir``: the guest's or the
        container's /tmp (the trace stays there: a TCP point's figures come from the tools' JSON
        summaries), the point's directory, or on a lab the run's directory on the router host
        (``unique`` there; fetched with the point)."""
        if self.own_files:
            return f"/tmp/{name}"
        if self.host is not None:
            tb, role = self.host
            return str(tb.out_path(role, point_dir, name, unique=unique))
        return str(point_dir / name)

    def _enter(self, argv: list[str], namespaces: tuple[str, ...]) -> list[str]:
        return ["nsenter", f"--target={self.enter_pid}", *namespaces, "--", *argv]

    def _tool(self, argv: list[str]) -> list[str]:
        """``argv`` (its first item: the host's binary) as it starts in the end host."""
        if self.container:
            return self._enter([f"{GUEST_BIN}/{Path(argv[0]).name}", *argv[1:]], CT_NAMESPACES)
        if self.host is not None:
            tb, role = self.host
            return self._enter([tb.helper(role, argv[0]), *argv[1:]], ("--net",))
        return argv

    def runs_on(self) -> tuple[Any, str]:
        """The testbed and role an end host entered by ``enter_pid`` runs its commands on."""
        if self.host is None:
            raise ValueError(f"{self.name}: entered by PID {self.enter_pid} but given no host to run nsenter on")
        return self.host

    def addr(self, ip: int) -> str:
        """The end host's address on segment L (where A's traffic goes)."""
        return topo.addr(self.slot.router_cidrs("L")[0 if ip == 4 else 1])

    def run(self, argv: list[str]) -> None:
        """Run a short command in the end host's network namespace and require exit status 0:
        over the guest's console, or with the host's binary in the container's or namespace's."""
        if self.shell is not None:
            self.shell.check(argv, CMD_TIMEOUT_S)
            return
        if self.enter_pid is not None:
            tb, role = self.runs_on()
            res = tb.run(role, self._enter(argv, ("--net",)), timeout_s=CMD_TIMEOUT_S)
        else:
            full = ["ip", "netns", "exec", str(self.netns), *argv]
            res = subprocess.run(full, capture_output=True, timeout=CMD_TIMEOUT_S, check=False)
        if res.returncode != 0:
            err = res.stderr.decode(errors="replace").strip()[-200:]
            raise GuestError(f"{self.name}: {' '.join(argv)} exited {res.returncode}: {err}")

    def route_to(self, other: EndHost) -> None:
        """An on-link host route over eth0 (segment L) to ``other``'s eth0 addresses, IPv4 and
        IPv6 (ROLE=vm-vm: the two are in different subnets of one segment).  It goes with the end
        host's network namespace or guest."""
        self.run(["ip", "route", "replace", f"{other.addr(4)}/32", "dev", "eth0"])
        self.run(["ip", "-6", "route", "replace", f"{other.addr(6)}/128", "dev", "eth0"])

    def spawn(self, what: str, argv: list[str], out_dir: Path, stdout_name: str | None = None) -> Proc | GuestTool:
        """Start a traffic tool (``argv[0]``: the host's binary) in the end host."""
        if self.shell is not None:
            return GuestTool(self.shell, what, argv, out_dir, stdout_name)
        if self.enter_pid is not None:
            tb, role = self.runs_on()
            return tb.spawn(role, what, self._tool(argv), self.reg, out_dir, stdout_name=stdout_name)
        return Proc(what, argv, self.reg, out_dir, netns=self.netns, stdout_name=stdout_name).start()

    def delivered(self) -> int:
        """What the end host's kernel has delivered to its own sockets so far
        (:func:`delivered_count` of its /proc/net/snmp and snmp6, read in the guest or in the
        namespace or container).  Not an interface counter: the irtt probes C -> D that the router forwards
        meanwhile cross its interfaces every probe interval, and would never let them settle."""
        if self.shell is not None:
            return delivered_count(self.shell.check(["cat", SNMP, SNMP6], CMD_TIMEOUT_S))
        if self.ns_pid is None:
            raise ValueError(f"end host in {self.netns}: no process of the namespace to read its counters through")
        net = f"/proc/{self.ns_pid}/net"
        if self.enter_pid is not None:
            tb, role = self.runs_on()
            texts = [tb.read_bytes(role, f"{net}/{name}") for name in ("snmp", "snmp6")]
            if any(t is None for t in texts):
                raise GuestError(f"{role}: {net}/snmp(6) unreadable: the end host's namespace is gone")
            return delivered_count("".join(t.decode() for t in texts if t is not None))
        return delivered_count(Path(f"{net}/snmp").read_text() + Path(f"{net}/snmp6").read_text())

    def close(self) -> None:
        """Close the console connection (the guest's jobs end with the VM)."""
        if self.shell is not None:
            with contextlib.suppress(Exception):
                self.shell.close()
