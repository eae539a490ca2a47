"""HV=xen in ``make baseline``: one nested Xen host in R1 (the Xen driver's QEMU), the router as
a PVH domU in it, its dom0 bridging the slot's taps to the domU's vifs.  Ready when the domU's
console says ``VRMIG-READY``; the nested host's QEMU is the process whose CPU time is the
router's whole cost (Xen, dom0 with netback and the domU all run in it)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from migrate.baseline.routers import GuestRouter
from migrate.core.errors import GuestError
from migrate.core.procs import Proc
from migrate.testbed.builder import add_tap

UNUSED_MIG_TAP = "tapX"  # dom0 needs its third NIC; the baseline has no migration link


class XenRouter(GuestRouter):
    """HV=xen: one nested Xen host in R1 running the router domU."""

    console_prefix = "console-xen"
    pid_prefix = "qemu-xen"
    #: set before :meth:`start`: the domU keeps a root shell on its console (``vrmig.shell=1``),
    #: which dom0 relays to the nested host's port ``vrmig.shell``, offered on :attr:`shell_socket`
    #: (the end host's command channel: :meth:`connect_shell`)
    shell = False
    shell_socket: Path | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.dom0: Any = None
        self.streams: Any = None
        self.boot_s: float | None = None
        self._t0 = 0.0

    def start(self) -> None:
        """Start the nested host's QEMU (returns at once; :meth:`wait_ready` observes the boot)."""
        from migrate.drivers.xen.dom0 import AgentDom0, StreamLog
        from migrate.drivers.xen.driver import DOM0_MEM_MIB, HOST_MACS, QEMU_HEADROOM_MIB, host_qemu_argv
        from routers.xen_image import host_initrd, xen_image

        add_tap(self.r1, UNUSED_MIG_TAP)
        image = xen_image(verify=False)
        macs = HOST_MACS["R1"]
        ctl, logport = self.reg.dir / f"xenctl-rt{self.slot.k}.sock", self.reg.dir / f"xenlog-rt{self.slot.k}.sock"
        if self.shell:
            self.shell_socket = self.reg.dir / f"xenshell-rt{self.slot.k}.sock"
        argv = host_qemu_argv(
            name=f"vrmig-{self.prefix}-xen{self.slot.k}", accel=self.accel,
            mem_mib=DOM0_MEM_MIB + self.mem + QEMU_HEADROOM_MIB, xen=image.xen, kernel=image.kernel,
            initrd=host_initrd(self.profile),
            dom0_args=f"vrmig.macL={macs[0]} vrmig.macR={macs[1]} vrmig.macM={macs[2]} vrmig.addr=198.19.254.1/30",
            console=self.console, ctl=ctl, logport=logport, qmp=self.reg.dir / f"qmp-xen{self.slot.k}.sock",
            nic=self.nic, macs=macs, taps=(self.ports[0][0], self.ports[1][0], UNUSED_MIG_TAP),
            shell=self.shell_socket,
        )  # fmt: skip
        self._t0 = time.monotonic()
        self.proc = Proc(f"qemu-xen{self.slot.k}", argv, self.reg, self.out, netns=self.r1).start()
        self.streams = StreamLog(self.out / f"xen_log-rt{self.slot.k}.jsonl")
        self.dom0 = AgentDom0("R1", ctl, logport, self.streams, self.proc.alive)

    def wait_ready(self, timeout_s: float, abort=None) -> None:
        """dom0's READY on the serial console, then the router domU's READY on its console."""
        from migrate.drivers.xen.driver import DOM0_FAIL, DOM0_READY, create_router_domu

        assert self.proc is not None
        deadline = time.monotonic() + timeout_s
        while True:
            text = self.console.read_text(errors="replace") if self.console.exists() else ""
            if DOM0_READY in text:
                break
            if DOM0_FAIL in text or not self.proc.alive() or time.monotonic() > deadline or (abort and abort()):
                tail = " | ".join(ln for ln in text.splitlines()[-8:] if ln.strip())
                raise GuestError(f"nested Xen host for router {self.slot.k} did not boot; console: {tail}")
            time.sleep(0.05)
        self.ready_line = create_router_domu(
            self.dom0, self.streams, "R1", self.profile, (self.slot.router_cidrs("L"), self.slot.router_cidrs("R")),
            mem_mib=self.mem, macs=(self.ports[0][1], self.ports[1][1]),
            timeout_s=max(1.0, deadline - time.monotonic()), alive=self.proc.alive,
            extra=("vrmig.shell=1",) if self.shell else (),
        )  # fmt: skip
        self.boot_s = round(time.monotonic() - self._t0, 2)

    def connect_shell(self, timeout_s: float, abort: Any = None) -> Any:
        """The domU's console shell (a :class:`migrate.drivers.guest_shell.GuestShell`): connect
        to the nested host's port first, then start dom0's relay to the domU's console, then wait
        until the shell answers."""
        from migrate.drivers import console_config
        from migrate.drivers.guest_shell import GuestShell
        from migrate.drivers.xen.driver import SHELL_RELAY_SH
        from migrate.drivers.xen.xl import DOMAIN

        assert self.proc is not None and self.shell_socket is not None and self.dom0 is not None
        deadline = time.monotonic() + timeout_s
        sock = console_config.connect(self.shell_socket, timeout_s, self.proc.alive)
        shell = GuestShell(sock, alive=self.proc.alive, abort=abort or (lambda: False))
        try:
            self.dom0.stream("shellrelay", ["sh", "-c", SHELL_RELAY_SH, "sh", DOMAIN])
            shell.wait_ready(max(deadline - time.monotonic(), 0.0))
        except BaseException:
            shell.close()
            raise
        return shell

    def stop(self) -> None:
        """Close the dom0 channel and SIGTERM the QEMU by PID."""
        if self.dom0 is not None:
            self.dom0.close()
        super().stop()
        if self.streams is not None:
            self.streams.close()

    def describe(self) -> dict[str, Any]:
        """How this router runs (meta.json)."""
        return {
            "kind": "xen-nested",
            "xen_guest_type": "pvh",
            "nested": True,
            "accel": self.accel,
            "argv": self.proc.argv if self.proc else None,
            "ready": self.ready_line,
            "boot_s": self.boot_s,
            "console": self.console.name,
        }
