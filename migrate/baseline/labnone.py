"""HV=none on a lab's R1 (``make baseline TESTBED= HV=none``): the classical Linux router, the
router software as host processes forwarding with R1's own kernel, as paper 004's bare-Linux
reference ran on its physical R1.

It is the embedded HV=none router (:class:`migrate.baseline.routers.NsRouter`) built from what
``make hosts-setup`` put on R1 for HV=criu (``<deploy_dir>/containers/<profile>``: the router
image's tree), in the run's directory there:

1. the tree is copied for the run, and ``hoststeps keep`` guards the copy and R1's taps: when the
   run ends, or the orchestrator or its SSH connection dies, it kills every process whose root
   is the copy (the chrooted daemons) and puts the taps back as hosts-setup made them;
2. R1's taps give way to a veth pair per port: the outer end takes the tap's name and bridge,
   the inner end (the router's MAC) goes into a new network namespace, that of a launcher
   started with ``unshare --net``.  The launcher waits until it sees eth0 and eth1, then runs
   :func:`routers.guest.chroot_argv`: the image's own ``vrmig-router`` in a private mount
   namespace, chrooted into the copy.  It prints READY and the daemons' PIDs, then exits;
3. the daemons keep the network namespace alive.  They are recorded by (host, PID, start time)
   and stopped by PID; the keeper catches whatever is left.  With the last of them the namespace
   goes, and so do its veths.

No named namespace is created on R1, so none can be left behind."""

from __future__ import annotations

import contextlib
import logging
import time
from pathlib import Path
from typing import Any

from migrate.baseline.routers import ChrootDaemons
from migrate.core.errors import DependencyError, GuestError
from migrate.core.procs import Proc, ProcessError
from migrate.core.registry import Registry
from migrate.testbed import topology as topo

log = logging.getLogger(__name__)

HOST = "R1"
COPY_TIMEOUT_S = 120.0
READY_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 5.0
POLL_S = 0.05

#: the launcher: argv = timeout_s, then the command to exec once eth0 and eth1 exist in its own
#: network namespace.  Its first line, NETNS_MARK, says that namespace exists (unshare has run):
#: only then may the orchestrator move the ports in by the launcher's PID
NETNS_MARK = "VRMIG-NETNS"
LAUNCH_SH = r"""
echo VRMIG-NETNS
t=$1
shift
n=0
until ip link show dev eth0 >/dev/null 2>&1 && ip link show dev eth1 >/dev/null 2>&1; do
    n=$((n + 1))
    if [ "$n" -gt $((t * 50)) ]; then echo "VRMIG-FAIL eth0/eth1 did not appear within $t s"; exit 1; fi
    sleep 0.02
done
exec "$@"
"""


class LabNsRouter(ChrootDaemons):
    """The HV=none router on the lab's R1 (see the module docstring)."""

    who = f"the HV=none router on {HOST}"
    late = "was not ready"

    def __init__(self, lab: Any, profile: str, registry: Registry, out_dir: Path) -> None:
        super().__init__()
        self.lab, self.profile, self.reg, self.out = lab, profile, registry, out_dir
        self.inv = lab.inventory
        self.root = f"{lab.run_dir()}/rootfs-none"
        self.keeper: Proc | None = None

    def _run(self, argv: list[str], timeout_s: float = 30.0) -> Any:
        return self.lab.run(HOST, argv, timeout_s=timeout_s)

    def _check(self, argv: list[str], what: str, timeout_s: float = 30.0) -> None:
        res = self._run(argv, timeout_s)
        if res.returncode != 0:
            raise GuestError(f"{HOST}: {what}: {res.stderr.decode(errors='replace').strip()}")

    def _start_ticks(self, pid: int) -> int | None:
        from migrate.drivers.criu.lab import remote_start_ticks

        return remote_start_ticks(self._run, pid)

    def start(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Copy, keeper, veths, launcher; return once the router printed READY."""
        from migrate.drivers.criu.lab import CONTAINERS_DIR, LIB_DIR, host_ports
        from routers.guest import chroot_argv

        src = f"{self.inv.deploy_dir}/{CONTAINERS_DIR}/{self.profile}"
        res = self._run(["cp", "-a", "--", src, self.root], timeout_s=COPY_TIMEOUT_S)
        if res.returncode != 0:
            raise DependencyError(
                f"{HOST}: no router tree for ROUTER={self.profile} at {src} "
                f"({res.stderr.decode(errors='replace').strip()}): run `make hosts-setup TESTBED={self.inv.path}`"
            )
        ports = host_ports(self.inv, HOST)
        keep = ["python3", f"{self.inv.deploy_dir}/{LIB_DIR}/hoststeps.py", "keep", "--root", self.root]
        keep += [a for _inner, outer, br, _mac in ports for a in ("--tap", f"{outer}@{br}")]
        self.keeper = self.lab.spawn(HOST, "keeper-none", keep, self.reg, self.out)
        try:
            self.keeper.wait_for("READY", READY_TIMEOUT_S, path=self.keeper.stdout_path)
        except ProcessError as err:
            raise GuestError(f"the router tree's keeper on {HOST} did not start: {err}") from err
        for _inner, outer, _br, _mac in ports:
            self._run(["ip", "link", "del", "dev", outer])
        left, right = (self.inv.router[seg] for seg in topo.SEGMENTS)
        argv = ["unshare", "--net", "--", "sh", "-c", LAUNCH_SH, "vrmig-ns-launch", str(int(timeout_s)),
                *chroot_argv(self.root, self.profile, [left.ipv4, left.ipv6], [right.ipv4, right.ipv6])]  # fmt: skip
        launcher = self.lab.spawn(HOST, "router-none", argv, self.reg, self.out, stdout_name="router-none.log")
        pid = getattr(launcher, "remote_pid", None)
        assert pid is not None
        try:
            launcher.wait_for(NETNS_MARK, READY_TIMEOUT_S, path=launcher.stdout_path)
        except ProcessError as err:
            raise GuestError(f"the HV=none router's launcher on {HOST}: {err}") from err
        for inner, outer, br, mac in ports:
            self._check(["ip", "link", "add", outer, "type", "veth", "peer", "name", inner, "address", mac,
                         "netns", str(pid)], f"the router's port {inner}")  # fmt: skip
            self._check(["ip", "link", "set", "dev", outer, "master", br, "up"], f"{outer} on {br}")
        rc = launcher.wait(timeout_s + 30.0)
        text = launcher.stdout_path.read_text(errors="replace") if launcher.stdout_path.exists() else ""
        self._adopt(text)
        self._started(rc, text, timeout_s, launcher.stop)

    def _record(self, pid: int) -> int | None:
        """Register daemon ``pid`` by (host, PID, start); its start time on R1."""
        start = self._start_ticks(pid)
        self.reg.add_remote(HOST, pid, start, "router-none daemon")
        return start

    def pids(self) -> dict[str, int]:
        """The daemons, named as the embedded HV=none's (their CPU: the router's control plane;
        the forwarding runs in R1's softirq)."""
        return {f"router0-daemon{i}": pid for i, (pid, _) in enumerate(self.daemons)}

    def running(self) -> bool:
        """Every daemon still runs (same PID and start time)."""
        return bool(self.daemons) and all(self._start_ticks(p) == st for p, st in self.daemons)

    def stop(self) -> None:
        """SIGTERM the daemons by PID, then the keeper (it kills what is left in the copy and
        puts the taps back)."""
        live = [str(p) for p, st in self.daemons if self._start_ticks(p) == st]
        if live:
            self._run(["kill", "-TERM", *live])
            deadline = time.monotonic() + STOP_TIMEOUT_S
            while any(self._start_ticks(p) == st for p, st in self.daemons) and time.monotonic() < deadline:
                time.sleep(POLL_S)
        if self.keeper is not None:
            with contextlib.suppress(ProcessError):
                self.keeper.stop(timeout_s=STOP_TIMEOUT_S)

    def describe(self) -> dict[str, Any]:
        """How this router ran (meta.json)."""
        return {"kind": "netns-chroot on R1", "root": self.root, "ready": self.ready_line, "daemon_pids": self.daemons}
