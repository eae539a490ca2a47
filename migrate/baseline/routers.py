"""Router instances of the baseline.

* HV=none (:class:`NsRouter`): the router profile's guest rootfs (``~/.cache/vrmig/guest/<profile>/
  rootfs``) chrooted in a private mount namespace inside the network namespace ``RT<k>``
  (:func:`routers.guest.namespace_argv`): the same ``vrmig-router`` script, the same FRR zebra +
  staticd binaries and libraries as in the VM, forwarding done by the host kernel.
* HV=kvm (:class:`VmRouter`): the router VM, booted by QEMU in R1 (``qemu_argv`` of the KVM
  driver) with taps on R1's bridges; ready when the guest prints ``VRMIG-READY``.
* HV=criu (:class:`CtRouter`): the router container of the CRIU driver (``routers.container_image``:
  its own copy of the profile's rootfs, mount/pid/uts/ipc/net namespaces, pivot_root;
  ``migrate.drivers.criu.container.Container`` starts, wires and stops it), never checkpointed here; its
  eth0/eth1 are veths whose host ends (``tapL``/``tapR`` for router 0, ``tapL<k>``/``tapR<k>``
  else) hang off R1's bridges; ready when its console says ``VRMIG-READY``.

All expose the PIDs whose CPU time is charged to the router."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from migrate.baseline.plan import Slot
from migrate.core.errors import GuestError
from migrate.core.procs import RUN_ENV, Proc, ProcessError
from migrate.core.registry import Registry, pid_alive, proc_starttime

log = logging.getLogger(__name__)

ROUTER_START_TIMEOUT_S = 90.0
STOP_GRACE_S = 3.0


class ChrootDaemons:
    """An HV=none router as the image's chroot script leaves it: the daemons whose PIDs it printed
    (VRMIG-PID lines, recorded by PID and start time) and its READY line."""

    #: how errors name the router, and say that it was not ready in time
    who: str
    late = "not ready"

    def __init__(self) -> None:
        self.daemons: list[tuple[int, int | None]] = []
        self.ready_line = ""

    def _record(self, pid: int) -> int | None:
        """Register daemon ``pid`` for the teardown; return its start time."""
        raise NotImplementedError

    def _adopt(self, text: str) -> None:
        """The daemons of the chroot script's VRMIG-PID lines, and its READY line."""
        from routers.guest import parse_ready

        for line in text.splitlines():
            if line.startswith("VRMIG-PID "):
                pid = int(line.split()[1])
                self.daemons.append((pid, self._record(pid)))
            elif parse_ready(line):
                self.ready_line = line.strip()

    def _started(self, rc: int | None, text: str, timeout_s: float, stop: Callable[[], object]) -> None:
        """GuestError unless the chroot script exited 0 after READY and reported its daemons
        (``rc`` None: it did not exit in time and is ended with ``stop``)."""
        if rc is None:
            stop()
            raise GuestError(f"{self.who} {self.late} within {timeout_s:.0f} s")
        if rc != 0 or not self.ready_line:
            tail = " | ".join(text.strip().splitlines()[-3:])
            raise GuestError(f"{self.who} failed to start (status {rc}): {tail}")
        if not self.daemons:
            raise GuestError(f"{self.who} is ready but reported no daemon PIDs (VRMIG-PID lines)")


class NsRouter(ChrootDaemons):
    """HV=none: the router daemons chrooted into the rootfs, in network namespace ``ns``."""

    def __init__(self, slot: Slot, ns: str, profile: str, registry: Registry, out_dir: Path) -> None:
        super().__init__()
        self.slot, self.ns, self.profile, self.reg, self.out = slot, ns, profile, registry, out_dir
        self.who = f"router {slot.k} (HV=none)"

    def _record(self, pid: int) -> int | None:
        """Register daemon ``pid`` by PID; its start time from /proc."""
        self.reg.add_process(pid, f"router-{self.slot.k}-daemon")
        return proc_starttime(pid)

    def start(self, timeout_s: float = ROUTER_START_TIMEOUT_S) -> None:
        """Run the chroot script; it exits after READY, leaving the daemons, whose PIDs it prints."""
        from routers.guest import namespace_argv

        argv = namespace_argv(self.profile, self.slot.router_cidrs("L"), self.slot.router_cidrs("R"))
        # Proc tags children with RUN_ENV=<prefix>; vrmig-router reads the same name as its runtime
        # directory, so the tag must not reach it (it would write into the shared cached rootfs)
        argv = ["env", "-u", RUN_ENV, *argv]
        what = f"router-{self.slot.k}"
        proc = Proc(what, argv, self.reg, self.out, netns=self.ns).start()
        rc = proc.wait(timeout_s)
        text = proc.stdout_path.read_text(errors="replace") if proc.stdout_path.exists() else ""
        self._adopt(text)
        self._started(rc, text, timeout_s, proc.stop)

    def pids(self) -> dict[str, int]:
        """Router daemons (zebra, staticd): their CPU is the router's control plane only; the
        forwarding itself runs in the host kernel's softirq context."""
        return {f"router{self.slot.k}-daemon{i}": pid for i, (pid, _) in enumerate(self.daemons)}

    def alive(self) -> bool:
        """All daemons still run."""
        return bool(self.daemons) and all(pid_alive(p, st) for p, st in self.daemons)

    def stop(self) -> None:
        """SIGTERM the daemons by PID, then anything still inside this run's own namespace."""
        for pid, st in self.daemons:
            if pid_alive(pid, st):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        while any(pid_alive(p, st) for p, st in self.daemons) and time.monotonic() < deadline:
            time.sleep(0.02)
        out = subprocess.run(["ip", "netns", "pids", self.ns], capture_output=True, text=True, check=False).stdout
        for pid in (int(p) for p in out.split()):
            log.warning("process %d still in %s after the router stopped; killing it", pid, self.ns)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def describe(self) -> dict[str, Any]:
        """How this router runs (meta.json)."""
        return {"kind": "netns-chroot", "netns": self.ns, "ready": self.ready_line, "daemon_pids": self.daemons}


class GuestRouter:
    """A router that runs as a guest of a QEMU process in R1 (HV=kvm: the router VM itself;
    HV=xen: a nested Xen host whose domU is the router): the slot, its two bridge ports, the
    process and its console log."""

    console_prefix = "console-rt"
    pid_prefix = "qemu"  # pids()'s key: <pid_prefix><slot>

    def __init__(
        self,
        slot: Slot,
        ports: tuple[tuple[str, str], tuple[str, str]],
        *,
        r1_ns: str,
        prefix: str,
        profile: str,
        nic: str,
        accel: str,
        mem_mib: int,
        registry: Registry,
        out_dir: Path,
        qemu: tuple[str, ...] = ("qemu-system-x86_64",),
    ) -> None:
        self.slot, self.ports, self.r1, self.prefix = slot, ports, r1_ns, prefix
        self.qemu = qemu  # the command prefix of the QEMU to run (migrate.core.stack; HV=kvm)
        self.profile, self.nic, self.accel, self.mem = profile, nic, accel, mem_mib
        self.reg, self.out = registry, out_dir
        self.proc: Proc | None = None
        self.console = out_dir / f"{self.console_prefix}{slot.k}.log"
        self.ready_line = ""

    def pids(self) -> dict[str, int]:
        """The QEMU process (vCPU and I/O threads, and for HV=xen Xen, dom0 and the domU inside
        it: its CPU time is the router's whole cost)."""
        return {f"{self.pid_prefix}{self.slot.k}": self.proc.pid} if self.proc else {}

    def alive(self) -> bool:
        """QEMU still runs."""
        return self.proc is not None and self.proc.alive()

    def stop(self) -> None:
        """SIGTERM QEMU by PID (QEMU exits cleanly on it)."""
        if self.proc is not None:
            self.proc.stop(signal.SIGTERM)


class VmRouter(GuestRouter):
    """HV=kvm: one router VM in R1.  With ``shell`` set before :meth:`start`, the guest keeps a
    root shell on its serial console (``vrmig.shell=1``), which QEMU also offers on the Unix
    socket :attr:`console_socket` (the end host's command channel, migrate.baseline.endhost)."""

    shell = False
    console_socket: Path | None = None

    def start(self) -> None:
        """Start QEMU (returns at once; :meth:`wait_ready` observes the boot)."""
        from migrate.drivers.guest_vm import GuestNic, GuestVm
        from migrate.drivers.kvm.driver import qemu_argv
        from routers.guest import DEFAULT_EXTRA_ARGS, guest_image, kernel_cmdline

        image = guest_image(self.profile)
        extra: tuple[str, ...] = tuple(DEFAULT_EXTRA_ARGS)
        if self.shell:
            extra += ("vrmig.shell=1",)
            self.console_socket = self.reg.dir / f"console-rt{self.slot.k}.sock"
        vm = GuestVm(
            name=f"vrmig-{self.prefix}-rt{self.slot.k}",
            accel=self.accel,
            mem_mib=self.mem,
            vcpus=1,
            kernel=image.kernel,
            initrd=image.initrd,
            cmdline=kernel_cmdline(self.profile, self.slot.router_cidrs("L"), self.slot.router_cidrs("R"), extra=extra),
            console=self.console,
            nic=self.nic,
            nics=tuple(GuestNic(tap, mac) for tap, mac in self.ports),
            console_socket=self.console_socket,
        )
        argv = qemu_argv(vm, qmp=self.reg.dir / f"qmp-rt{self.slot.k}.sock", incoming=False, qemu=self.qemu)
        self.proc = Proc(f"qemu-rt{self.slot.k}", argv, self.reg, self.out, netns=self.r1).start()

    def wait_ready(self, timeout_s: float, abort=None) -> None:
        """Wait for the guest's READY line on its serial console (FAIL or QEMU exit: error)."""
        from routers.guest import FAIL_MARKER, READY_MARKER

        assert self.proc is not None
        try:
            self.proc.wait_for(READY_MARKER, timeout_s, path=self.console, abort=abort)
        except ProcessError as err:
            text = self.console.read_text(errors="replace") if self.console.exists() else ""
            fail = [ln for ln in text.splitlines() if ln.startswith(FAIL_MARKER)]
            raise GuestError(f"router VM {self.slot.k} not ready: {fail[-1] if fail else err}") from err
        text = self.console.read_text(errors="replace")
        self.ready_line = next((ln.strip() for ln in text.splitlines() if ln.startswith(READY_MARKER)), "")

    def describe(self) -> dict[str, Any]:
        """How this router runs (meta.json)."""
        return {
            "kind": "qemu",
            "argv": self.proc.argv if self.proc else None,
            "ready": self.ready_line,
            "console": self.console.name,
        }


class CtRouter:
    """HV=criu: one router container in R1 (the CRIU driver's container, not migrated)."""

    def __init__(self, slot: Slot, r1_ns: str, profile: str, registry: Registry, out_dir: Path, work: Path) -> None:
        from migrate.drivers.criu.container import Container, PortWiring

        self.slot, self.r1, self.profile, self.reg, self.out = slot, r1_ns, profile, registry, out_dir
        self.rootfs = work / f"rootfs-rt{slot.k}"
        ports = [PortWiring(f"eth{i}", slot.tap(side), f"br{side}", slot.mac(side)) for i, side in enumerate("LR")]
        self.ct = Container(f"rt{slot.k}", r1_ns, registry, out_dir, ports=ports)
        self.ready_line = ""
        self.boot_s: float | None = None

    def start(self, timeout_s: float, abort=None) -> None:
        """Stage the rootfs copy, replace R1's taps of this slot by the container's veth peers,
        start the container and wait until the router reports both connected routes."""
        from migrate.drivers.criu.container import delete_links
        from routers.container_image import container_argv, stage_rootfs
        from routers.guest import READY_MARKER

        stage_rootfs(self.profile, self.rootfs)
        delete_links(self.r1, [w.outer for w in self.ct.ports])  # slot 0: the testbed's taps
        argv = container_argv(self.rootfs, self.profile, self.slot.router_cidrs("L"), self.slot.router_cidrs("R"))
        t0 = time.time()
        try:
            t_ready = self.ct.start(argv, timeout_s, abort)
        except (GuestError, ProcessError) as err:
            self.ct.save_console()
            raise GuestError(f"router container {self.slot.k} not ready: {err}") from err
        self.boot_s = t_ready - t0
        text = self.ct.read_console()
        self.ready_line = next((ln.strip() for ln in text.splitlines() if ln.startswith(READY_MARKER)), "")

    @property
    def pid(self) -> int | None:
        """The container's init (PID 1 of its pid namespace), as the host sees it."""
        return self.ct.pid

    def pids(self) -> dict[str, int]:
        """Every process of the container (init, the router daemons, helpers), looked up at each
        snapshot; as with HV=none, the forwarding itself runs in the host kernel's softirq."""
        from migrate.core.cpustat import process_tree

        if self.ct.pid is None or not self.ct.alive():
            return {}
        return {f"router{self.slot.k}-ct{pid}": pid for pid in process_tree(self.ct.pid)}

    def alive(self) -> bool:
        """The container's init still runs."""
        return self.ct.alive()

    def stop(self) -> None:
        """Keep its console, then SIGTERM its init (the pid namespace ends with it), by PID."""
        if self.ct.pid is not None:
            self.ct.save_console()
        self.ct.stop()

    def describe(self) -> dict[str, Any]:
        """How this router runs (meta.json)."""
        from routers.container_image import NAMESPACES

        return {
            "kind": "container",
            "namespaces": [n.lstrip("-") for n in NAMESPACES],
            "init_pid": self.ct.pid,
            "init_starttime": self.ct.starttime,
            "rootfs": str(self.rootfs),
            "ports": [asdict(w) for w in self.ct.ports],
            "ready": self.ready_line,
            "boot_s": self.boot_s,
            "console": f"console-{self.ct.host}.log",
        }


class BusyLoop:
    """LOAD=cpu: one process spinning on a CPU (paper 001's ``stress --cpu 1``), by PID: in
    network namespace ``ns``, or (``enter_pid``) inside the mount/uts/ipc/network namespaces of
    that process (a neighbour container) via ``nsenter``, which then execs in place (no pid
    namespace entered, so no fork: the recorded PID is the spinning process)."""

    ARGV = ("sh", "-c", "while :; do :; done")

    def __init__(self, ns: str | None, registry: Registry, out_dir: Path, enter_pid: int | None = None) -> None:
        argv = list(self.ARGV)
        if enter_pid is not None:
            from migrate.baseline.endhost import CT_NAMESPACES

            argv = ["nsenter", f"--target={enter_pid}", *CT_NAMESPACES, "--", *argv]
        self.proc = Proc("busyloop", argv, registry, out_dir, netns=ns)

    def start(self) -> None:
        """Start spinning."""
        self.proc.start()

    def pids(self) -> dict[str, int]:
        """The spinning process."""
        return {"busyloop": self.proc.pid}

    def alive(self) -> bool:
        """Still spinning."""
        return self.proc.alive()

    def stop(self) -> None:
        """Kill it by PID."""
        self.proc.stop(signal.SIGKILL, timeout_s=5)
