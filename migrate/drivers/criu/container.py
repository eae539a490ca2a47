"""Router containers on a hypervisor host (HV=criu): start one on R1 from a staged rootfs, wire
its network namespace to the host's bridges with veth pairs, observe its console, adopt the one
CRIU restores on R2, and stop them by PID.

Network: the container's ``eth0``/``eth1`` carry the router's fixed MACs (``topology``); their
host-side peers are named ``tapL``/``tapR`` and enslaved to ``brL``/``brR``, so the counter
sampler reads the same interface names as with a VM's taps (the testbed's pre-created taps are
deleted first)."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from migrate.core.errors import GuestError
from migrate.core.netlink import iproute
from migrate.core.procs import Proc
from migrate.core.registry import Registry, pid_alive, proc_starttime
from migrate.core.rundir import console_log
from migrate.testbed import topology as topo

log = logging.getLogger(__name__)

POLL_S = 0.01
CHILD_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 5.0


def host_ifname(port: topo.RouterPort) -> str:
    """Host-side name of the veth peer of a router port: tapL / tapR (as the VM's taps)."""
    return f"tap{port.segment}"


def bridge(port: topo.RouterPort) -> str:
    """The host bridge a router port hangs off: brL / brR."""
    return f"br{port.segment}"


def veth_specs() -> list[tuple[str, str, str]]:
    """(container ifname, host ifname, host bridge) of every router port."""
    return [(p.guest_ifname, host_ifname(p), bridge(p)) for p in topo.ROUTER_PORTS]


def delete_links(ns: str, names: list[str]) -> list[str]:
    """Delete the named links in namespace ``ns`` (those that exist); returns the deleted ones."""
    deleted = []
    with iproute(ns) as ipr:
        for name in names:
            idx = ipr.link_lookup(ifname=name)
            if idx:
                ipr.link("del", index=idx[0])
                deleted.append(name)
    return deleted


def set_bridged(ns: str, attached: bool) -> None:
    """Enslave (or release) the host-side veth peers in ``ns`` to (from) their bridges: released,
    no frame reaches the container and none of its frames is bridged (the data-plane lock)."""
    with iproute(ns) as ipr:
        for _inner, outer, br in veth_specs():
            idx = ipr.link_lookup(ifname=outer)
            if not idx:
                continue
            master = ipr.link_lookup(ifname=br)[0] if attached else 0
            ipr.link("set", index=idx[0], master=master)


@dataclass(frozen=True)
class PortWiring:
    """One router port: the container's interface, its host-side veth peer, the host bridge the
    peer hangs off, and the port's fixed MAC."""

    inner: str
    outer: str
    bridge: str
    mac: str


def default_wiring() -> list[PortWiring]:
    """The migrate testbed's router ports: eth0/eth1 <-> tapL/tapR on brL/brR."""
    return [PortWiring(p.guest_ifname, host_ifname(p), bridge(p), p.mac) for p in topo.ROUTER_PORTS]


def children(pid: int) -> list[int]:
    """Direct children of ``pid`` (from /proc; empty if it is gone)."""
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(x) for x in text.split()]


class Container:
    """One router container, either started here (``start``) or restored by CRIU (``adopt``)."""

    def __init__(
        self,
        host: str,
        host_ns: str,
        registry: Registry,
        run_dir: Path,
        ports: Sequence[PortWiring] | None = None,
    ) -> None:
        self.host, self.host_ns, self.registry, self.run_dir = host, host_ns, registry, run_dir
        self.ports = list(ports) if ports is not None else default_wiring()
        self.launcher: Proc | None = None
        self.pid: int | None = None
        self.starttime: int | None = None
        self.console_text = ""

    # -- life cycle -------------------------------------------------------------------------
    def start(self, argv: list[str], timeout_s: float, abort: Callable[[], bool] | None = None) -> float:
        """Start the container (argv from ``routers.container_image.container_argv``), move its veths
        in and wait until its console says READY; returns the CLOCK_REALTIME s it was seen."""
        self.launch(argv)
        return self.wait_ready(timeout_s, abort)

    def launch(self, argv: list[str]) -> None:
        """Start the container and move its veths in, without waiting for anything inside it (a
        router of a profile's image prints no READY: its readiness is forwarding)."""
        self.launcher = Proc(f"container-{self.host}", argv, self.registry, self.run_dir).start()
        self._find_init()
        self._wire()

    def _find_init(self) -> None:
        """The launcher forks the container's PID 1: observe it in /proc and register it."""
        assert self.launcher is not None
        deadline = time.monotonic() + CHILD_TIMEOUT_S
        while not (kids := children(self.launcher.pid)):
            if not self.launcher.alive():
                raise GuestError(
                    f"container launcher exited ({self.launcher.returncode()}): {self.launcher.stderr_tail()}"
                )
            if time.monotonic() > deadline:
                raise GuestError(f"container launcher forked no init within {CHILD_TIMEOUT_S:.0f} s")
            time.sleep(POLL_S)
        self.adopt(kids[0])

    def adopt(self, pid: int) -> None:
        """Take over the container whose init is ``pid`` (registered for teardown by PID)."""
        self.pid, self.starttime = pid, proc_starttime(pid)
        self.registry.add_process(pid, f"container-{self.host} init")

    def _wire(self) -> None:
        """veth pairs: container eth0/eth1 (fixed MACs) <-> host tapL/tapR (or the given names)
        enslaved to brL/brR."""
        assert self.pid is not None
        with iproute(self.host_ns) as ipr:
            for w in self.ports:
                ipr.link(
                    "add",
                    ifname=w.outer,
                    kind="veth",
                    peer={"ifname": w.inner, "address": w.mac, "net_ns_pid": self.pid},
                )
                idx = ipr.link_lookup(ifname=w.outer)[0]
                ipr.link("set", index=idx, master=ipr.link_lookup(ifname=w.bridge)[0], state="up")

    def alive(self) -> bool:
        """The container's init still runs (same PID and start time)."""
        return self.pid is not None and pid_alive(self.pid, self.starttime)

    def console_path(self) -> Path | None:
        """The container's console, seen through its init's root (None once it is gone)."""
        return None if self.pid is None else Path(f"/proc/{self.pid}/root/{_console_rel()}")

    def read_console(self) -> str:
        """Current console text (the last text seen if the container is gone)."""
        path = self.console_path()
        if path is not None:
            with contextlib.suppress(OSError):
                self.console_text = path.read_text(errors="replace")
        return self.console_text

    def wait_ready(self, timeout_s: float, abort: Callable[[], bool] | None = None) -> float:
        """Wait for the router's READY line on the console (FAIL or death raise GuestError)."""
        return wait_console_ready(self.host, self.read_console, self.alive, timeout_s, abort, POLL_S)

    def save_console(self) -> None:
        """Write the console seen so far to ``console-<host>.log`` in the results directory."""
        self.read_console()
        (self.run_dir / console_log(self.host)).write_text(self.console_text)

    def stop(self) -> str | None:
        """SIGTERM the init (its trap exits, which ends the whole pid namespace); SIGKILL if it
        lingers; then reap the launcher.  Returns the signal that ended the container (None if it
        was gone already)."""
        ended_by = None
        if self.alive():
            ended_by = "SIGTERM"
            assert self.pid is not None
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGTERM)
            deadline = time.monotonic() + STOP_TIMEOUT_S
            while self.alive() and time.monotonic() < deadline:
                time.sleep(POLL_S)
            if self.alive():
                log.warning("container on %s ignored SIGTERM; killing it", self.host)
                ended_by = "SIGKILL"
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.pid, signal.SIGKILL)
        if self.launcher is not None:
            self.launcher.stop(timeout_s=STOP_TIMEOUT_S)
        return ended_by


def wait_console_ready(
    host: str,
    read_console: Callable[[], str],
    alive: Callable[[], bool],
    timeout_s: float,
    abort: Callable[[], bool] | None = None,
    poll_s: float = POLL_S,
) -> float:
    """Poll a router container's console (``read_console``, here or on a lab host) for the
    router's READY line; returns the CLOCK_REALTIME s it was seen.  FAIL on the console, the
    init's death (``alive``), an abort or the timeout raise GuestError."""
    from routers.guest import FAIL_MARKER, READY_MARKER

    deadline = time.monotonic() + timeout_s
    while True:
        text = read_console()
        if READY_MARKER in text:
            return time.time()
        if FAIL_MARKER in text:
            line = next(ln for ln in text.splitlines() if FAIL_MARKER in ln)
            raise GuestError(f"router container on {host} failed: {line}")
        if not alive():
            raise GuestError(f"router container on {host} exited before READY: {text.strip()[-300:]}")
        if abort and abort():
            raise GuestError(f"aborted while waiting for the router container on {host}")
        if time.monotonic() > deadline:
            raise GuestError(f"router container on {host} not READY within {timeout_s:.0f} s")
        time.sleep(poll_s)


def _console_rel() -> str:
    from routers.container_image import CONSOLE

    return CONSOLE


def peers_in(pid: int, host_ns: str) -> dict[str, bool]:
    """For each container port: is its veth peer the host-side tap in ``host_ns``?  (Both ends
    name each other's ifindex; read from the container's namespace via /proc, nothing kept open.)"""
    out: dict[str, bool] = {}
    inner: dict[str, tuple[int, int | None]] = {}
    with iproute(f"/proc/{pid}/ns/net") as ipr:
        for link in ipr.get_links():
            inner[link.get_attr("IFLA_IFNAME")] = (link["index"], link.get_attr("IFLA_LINK"))
    with iproute(host_ns) as ipr:
        for name, outer, _br in veth_specs():
            found = ipr.link_lookup(ifname=outer)
            if not found or name not in inner:
                out[name] = False
                continue
            link = ipr.get_links(found[0])[0]
            out[name] = link.get_attr("IFLA_LINK") == inner[name][0] and inner[name][1] == found[0]
    return out
