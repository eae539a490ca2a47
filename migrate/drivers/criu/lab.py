"""HV=criu on a lab (TESTBED=lab.toml): the CRIU driver's phases on hypervisor hosts reached only
over SSH.

What ``make hosts-setup`` put on R1 and R2 (``<deploy_dir>``):

* ``criu/``: the criu this machine chose (``make criu``: a private copy unpacked from a Debian
  suite, run through its own loader) and ``criu/criu.json`` (its argv there, version, source);
* ``containers/<profile>/``: the router's container rootfs (the guest image's tree plus the
  container's init), copied per run, as the embedded testbed stages it;
* ``lib/criu/``: ``imgxfer.py``, ``hoststeps.py`` and the action script.

The phases are the embedded driver's (:class:`~migrate.drivers.criu.driver.CriuDriver`), each step
run on its host under the guard instead of in a namespace here:

* the container starts on R1 from its launcher (``unshare``); its init is found in the launcher's
  ``/proc/<pid>/task/<pid>/children`` and recorded by (host, PID, start time); its veths are made
  with ``ip link add <tap> type veth peer ... netns <init>`` and take the names of the inventory's
  taps (so the per-host samplers read the router's ports under the same names as for HV=kvm);
  readiness is the router's READY line on the console, read through ``/proc/<init>/root``;
* the final dump and the image transfer run as one program on R1 and the restore and the MAC
  announcement as one on R2 (:mod:`migrate.drivers.criu.hoststeps`): no orchestrator round trip
  lies in the frozen time; their timestamps (the hosts' clocks) are put on the orchestrator's
  clock with the measured offsets;
* a keeper on each host (``hoststeps keep``, under the guard) kills whatever runs in the run's
  rootfs copies and puts the taps back when the run ends, and when the orchestrator dies: its
  guard sees the SSH channel close.

Not here: ``make calibrate``'s pause (the cgroup freezer) and faults; MODE=precopy needs the
hosts' kernels to track soft-dirty pages (``criu check --feature mem_dirty_track`` on R1 and R2)."""

from __future__ import annotations

import contextlib
import json
import logging
import time
from pathlib import Path, PurePosixPath
from typing import Any

from migrate.core.errors import ConfigError, DependencyError, GuestError, MigrationError
from migrate.core.procs import Proc, ProcessError
from migrate.core.rundir import console_log
from migrate.drivers.base import RunContext
from migrate.drivers.criu.announce import ROUND_GAP_S, ROUNDS, frames
from migrate.drivers.criu.driver import (
    PAGE_SERVER_PORT,
    UNSUPPORTED_ROUTERS,
    XFER_PORT,
    CriuDriver,
)
from migrate.drivers.criu.hoststeps import parse_steps
from migrate.drivers.criu.stats import error_excerpt
from migrate.drivers.criu.tool import MODE_FEATURES, CriuBinary, restore_args
from migrate.model.scenario import Scenario
from migrate.testbed import topology as topo

log = logging.getLogger(__name__)

POLL_S = 0.02
CHILD_TIMEOUT_S = 10.0
#: a host helper (a Python program started over SSH) has this long to print READY; readiness is
#: observed, this only bounds how long a helper that never starts is waited for (the embedded
#: driver's 10 s was tight for a busy host: its CRIU host VM needed 60 s under TCG)
READY_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 5.0
#: where hosts-setup puts the pieces, relative to the lab's deploy_dir
CRIU_JSON = "criu/criu.json"
CONTAINERS_DIR = "containers"
LIB_DIR = "lib/criu"


def host_criu(record: dict[str, Any], deploy_dir: str) -> CriuBinary:
    """The criu a host's ``criu/criu.json`` describes (written by hosts-setup)."""
    argv = [str(a) for a in record.get("argv") or []]
    if not argv:
        raise ValueError("no argv")
    return CriuBinary(tuple(argv), str(record.get("version")), f"{record.get('source')} (deployed in {deploy_dir})")


class RemoteContainer:
    """A router container on a lab host: started from its launcher or adopted after a restore,
    observed and stopped over SSH by PID (start time checked)."""

    def __init__(self, driver: LabCriuDriver, host: str) -> None:
        self.d, self.host = driver, host
        self.launcher: Proc | None = None
        self.pid: int | None = None
        self.starttime: int | None = None
        self.console_text = ""

    def _run(self, argv: list[str], check: bool = False) -> Any:
        return self.d.ssh(self.host).run(argv, check=check, timeout_s=15.0)

    def start(self, argv: list[str], timeout_s: float, abort: Any) -> None:
        """Start the launcher under the guard, find the init, wire its veths, wait for READY."""
        tb = self.d.ctx.testbed
        self.launcher = tb.spawn(self.host, f"container-{self.host}", argv, self.d.ctx.registry, self.d.ctx.run_dir)
        self.d.procs.append(self.launcher)
        lpid = self.launcher.remote_pid  # type: ignore[attr-defined]
        deadline = time.monotonic() + CHILD_TIMEOUT_S
        while True:
            out = self._run(["cat", f"/proc/{lpid}/task/{lpid}/children"]).stdout.decode().split()
            if out:
                break
            if not self.launcher.alive():
                raise GuestError(f"container launcher on {self.host} exited: {self.launcher.stderr_tail()}")
            if time.monotonic() > deadline:
                raise GuestError(f"container launcher on {self.host} forked no init within {CHILD_TIMEOUT_S:.0f} s")
            time.sleep(POLL_S)
        self.adopt(int(out[0]))
        self.d.wire(self.host, self.pid)
        self.wait_ready(timeout_s, abort)

    def adopt(self, pid: int) -> None:
        """Take over the container whose init is ``pid`` on the host (recorded by PID and start)."""
        self.pid, self.starttime = pid, self._start_ticks(pid)
        self.d.ctx.registry.add_remote(self.host, pid, self.starttime, f"container-{self.host} init")

    def _start_ticks(self, pid: int) -> int | None:
        return remote_start_ticks(self._run, pid)

    def alive(self) -> bool:
        """The init still runs (same PID and start time)."""
        return self.pid is not None and self._start_ticks(self.pid) == self.starttime

    def read_console(self) -> str:
        """The console so far, read through the init's root (the last text once it is gone)."""
        if self.pid is not None:
            from routers.container_image import CONSOLE

            res = self._run(["cat", f"/proc/{self.pid}/root/{CONSOLE}"])
            if res.returncode == 0:
                self.console_text = res.stdout.decode(errors="replace")
        return self.console_text

    def wait_ready(self, timeout_s: float, abort: Any) -> None:
        """The router's READY line on the console (FAIL or the init's death raise GuestError)."""
        from migrate.drivers.criu.container import wait_console_ready

        wait_console_ready(self.host, self.read_console, self.alive, timeout_s, abort, POLL_S)

    def save_console(self) -> None:
        """``console-<host>.log`` in the results directory."""
        self.read_console()
        (self.d.ctx.run_dir / console_log(self.host)).write_text(self.console_text)

    def stop(self) -> None:
        """SIGTERM the init (its trap ends the pid namespace), SIGKILL if it lingers, then the
        launcher (the keeper kills whatever is left in the rootfs)."""
        if self.alive():
            self._run(["kill", "-TERM", str(self.pid)])
            deadline = time.monotonic() + STOP_TIMEOUT_S
            while self.alive() and time.monotonic() < deadline:
                time.sleep(POLL_S)
            if self.alive():
                log.warning("container on %s ignored SIGTERM; killing it", self.host)
                self._run(["kill", "-KILL", str(self.pid)])
        if self.launcher is not None:
            self.launcher.stop(timeout_s=STOP_TIMEOUT_S)


def remote_start_ticks(run: Any, pid: int) -> int | None:
    """The start time (clock ticks since boot) of process ``pid`` on a host, read by ``run`` (a
    command runner there, never raising); None if it is gone.  With the PID it names a process."""
    res = run(["cat", f"/proc/{pid}/stat"])
    if res.returncode != 0:
        return None
    try:
        return int(res.stdout.decode().rsplit(")", 1)[1].split()[19])
    except (IndexError, ValueError):
        return None


def host_ports(inv: Any, host: str) -> list[tuple[str, str, str, str]]:
    """(router's ifname, host ifname, bridge, MAC) of the router's ports on a lab's ``host``: the
    veths that replace the inventory's taps take their names (``make baseline`` HV=none's too)."""
    spec = inv.host(host)
    return [
        (p.guest_ifname, spec.taps[p.segment], spec.bridges[p.segment], inv.router[p.segment].mac)
        for p in topo.ROUTER_PORTS
    ]


class LabCriuDriver(CriuDriver):
    """CRIU checkpoint/restore of the router container between a lab's R1 and R2."""

    name = "criu"

    def __init__(self, ctx: RunContext, facts: dict[str, Any]) -> None:
        super().__init__(ctx, facts)
        tb = ctx.testbed
        self.inv = tb.inventory
        self.deploy = self.inv.deploy_dir
        self.base = PurePosixPath(f"{tb.run_dir()}/criu")  # type: ignore[attr-defined, assignment]
        self.lib = f"{self.deploy}/{LIB_DIR}"
        self.keepers: list[Proc] = []
        self.src: RemoteContainer | None = None  # type: ignore[assignment]
        self.dst: RemoteContainer | None = None  # type: ignore[assignment]
        self.last_dump: dict[str, Any] | None = None
        self.last_restore: dict[str, Any] = {"steps": {}}
        self.record["host_clock_offsets_ns"] = {}

    # -- preflight -------------------------------------------------------------------------
    @classmethod
    def preflight(cls, scenario: Scenario) -> dict[str, Any]:
        """Only what this machine decides: the router (CRIU's own limits).  criu itself is
        checked on R1 and R2 once they are reached (``start_source``)."""
        from migrate.model.scenario import profile_of

        profile = profile_of(scenario.router)
        if profile is not None:
            raise DependencyError(
                f"ROUTER={profile.path} with HV=criu on a lab (TESTBED=): a profile's container image runs on the "
                "embedded testbed only so far: run it without TESTBED"
            )
        if scenario.router_software in UNSUPPORTED_ROUTERS:
            raise DependencyError(
                f"ROUTER={scenario.router} with HV=criu: {UNSUPPORTED_ROUTERS[scenario.router_software]}"
            )
        return {
            "criu": {"version": None, "source": "the lab's R1 and R2 (checked there at start)", "argv": []},
            "accel": "none",
            "accel_reason": "a container shares the host kernel: no hardware virtualisation involved",
        }

    # -- the hosts -------------------------------------------------------------------------
    def ssh(self, host: str) -> Any:
        """``host``'s connection."""
        return self.ctx.testbed.hosts[host]  # type: ignore[attr-defined]

    def _run(self, host: str, argv: list[str], timeout_s: float = 30.0) -> Any:
        return self.ssh(host).run(argv, timeout_s=timeout_s)

    def _check_hosts(self) -> None:
        """criu deployed on R1 and R2 (the same), working (``criu check``) and able to do the
        mode; DependencyError with the host and the fix otherwise."""
        found: dict[str, CriuBinary] = {}
        for host in topo.HYPERVISOR_HOSTS:
            res = self.ssh(host).run(["cat", f"{self.deploy}/{CRIU_JSON}"], check=False)
            try:
                found[host] = host_criu(json.loads(res.stdout), self.deploy)
            except (ValueError, TypeError):
                raise DependencyError(
                    f"{host}: no criu deployed ({self.deploy}/{CRIU_JSON} missing or unreadable): "
                    f"run `make criu` here, then `make hosts-setup TESTBED={self.inv.path}`"
                ) from None
            chk = self.ssh(host).run([*found[host].argv, "check"], check=False, timeout_s=60.0)
            if chk.returncode != 0:
                tail = " | ".join((chk.stdout + chk.stderr).decode(errors="replace").strip().splitlines()[-2:])
                raise DependencyError(f"{host}: criu check failed on this host's kernel: {tail}")
            if self.ctx.scenario.mode in MODE_FEATURES:
                feature, _why = MODE_FEATURES[self.ctx.scenario.mode]
                f = self.ssh(host).run([*found[host].argv, "check", "--feature", feature], check=False, timeout_s=60.0)
                if f.returncode != 0:
                    raise DependencyError(
                        f"{host}: MODE={self.ctx.scenario.mode} needs the kernel's soft-dirty page tracking "
                        f"(criu check --feature {feature} failed on {host}): use MODE=stopcopy, or hosts whose "
                        "kernel has CONFIG_MEM_SOFT_DIRTY=y"
                    )
        if found["R1"].version != found["R2"].version:
            raise DependencyError(
                f"R1 runs criu {found['R1'].version} but R2 runs {found['R2'].version}: "
                f"run `make hosts-setup TESTBED={self.inv.path}`"
            )
        self.criu = found["R1"]
        self.record["criu"] = {"version": self.criu.version, "source": self.criu.source, "argv": list(self.criu.argv)}
        page = self._run("R1", ["getconf", "PAGESIZE"]).stdout.decode().strip()
        if page.isdigit():
            self.record["page_size_bytes"] = int(page)

    def _local_ns(self, host: str, t_ns: int) -> int:
        off = self.ctx.testbed.offset_ns(host)[0]  # type: ignore[attr-defined]
        self.record["host_clock_offsets_ns"][host] = off
        return t_ns - off

    def _mkdir(self, host: str, path: Any, parents: bool = False) -> None:
        self._run(host, ["mkdir", *(["-p"] if parents else []), str(path)])

    def _read_text(self, host: str, path: Any) -> str | None:
        data = self.ctx.testbed.read_bytes(host, str(path))
        return None if data is None else data.decode(errors="replace")

    def _take_events(self, side: str) -> str:
        host = "R1" if side == "src" else "R2"
        path = str(self._dir(f"events-{side}"))
        text = self._read_text(host, path) or ""
        self.ssh(host).run(["rm", "-f", path], check=False)
        return text

    def _start(self, what: str, argv: list[str], host: str) -> Proc:
        p = self.ctx.testbed.spawn(host, what, argv, self.ctx.registry, self.ctx.run_dir)
        self.procs.append(p)
        return p

    def _open_counters(self) -> None:
        self.counters = None

    def _tx_bytes(self) -> int:
        mig = self.inv.host("R1").migration_if
        assert mig is not None
        return self.ctx.testbed.counter("R1", mig, "tx_bytes")  # type: ignore[attr-defined, no-any-return]

    def _taps(self, host: str) -> list[tuple[str, str, str, str]]:
        return host_ports(self.inv, host)

    def _veths(self, host: str) -> list[tuple[str, str, str]]:
        return [(inner, outer, br) for inner, outer, br, _mac in self._taps(host)]

    def _free_ports(self, host: str) -> None:
        for _inner, outer, _br, _mac in self._taps(host):
            self.ssh(host).run(["ip", "link", "del", "dev", outer], check=False)

    def wire(self, host: str, pid: int | None) -> None:
        """The container's veths: inner end (fixed MAC) in the init's namespace, outer end named
        as the host's tap, enslaved to the segment's bridge and up."""
        assert pid is not None
        for inner, outer, br, mac in self._taps(host):
            self._run(host, ["ip", "link", "add", outer, "type", "veth", "peer", "name", inner,
                             "address", mac, "netns", str(pid)])  # fmt: skip
            self._run(host, ["ip", "link", "set", "dev", outer, "master", br, "up"])

    def _r2_addr(self) -> str:
        r2 = self.inv.host("R2").migration_ipv4
        assert r2 is not None
        return topo.addr(r2)

    def _env(self, side: str) -> list[str]:
        host = "R1" if side == "src" else "R2"
        ports = " ".join(f"{outer}@{br}" for _i, outer, br in self._veths(host))
        return ["env", f"VRMIG_SIDE={side}", f"VRMIG_CRIU_EVENTS={self._dir('events-' + side)}",
                f"VRMIG_HOST_PORTS={ports}"]  # fmt: skip

    def _keeper(self, host: str, rootfs: str) -> None:
        """The keeper of ``host``'s rootfs copy and taps (see the module docstring)."""
        taps = [a for _i, outer, br, _m in self._taps(host) for a in ("--tap", f"{outer}@{br}")]
        argv = self._step_argv("keep", "--root", rootfs, *taps)
        # not in self.procs: a keeper is stopped last, after the containers
        p = self.ctx.testbed.spawn(host, f"keeper-{host}", argv, self.ctx.registry, self.ctx.run_dir)
        self.keepers.append(p)
        try:
            p.wait_for("READY", READY_TIMEOUT_S, path=p.stdout_path, abort=self.ctx.abort)
        except ProcessError as err:
            raise GuestError(f"the rootfs keeper on {host} did not start: {err}: {p.stderr_tail()}") from err

    def _stage(self, host: str) -> Path:  # type: ignore[override]
        """``host``'s copy of the deployed container rootfs, under its keeper."""
        src = f"{self.deploy}/{CONTAINERS_DIR}/{self.ctx.scenario.router}"
        dst = str(self._dir(f"rootfs-{host}"))
        res = self.ssh(host).run(["cp", "-a", "--", src, dst], check=False, timeout_s=120.0)
        if res.returncode != 0:
            raise DependencyError(
                f"{host}: no container rootfs for ROUTER={self.ctx.scenario.router} at {src} "
                f"({res.stderr.decode(errors='replace').strip()}): run `make hosts-setup TESTBED={self.inv.path}`"
            )
        self._keeper(host, dst)
        return Path(dst)

    # -- phases ----------------------------------------------------------------------------
    def start_source(self) -> None:
        """criu checked on both hosts; R1's rootfs copy under its keeper; the container started
        in place of R1's taps and READY."""
        from routers.container_image import container_argv

        self._check_hosts()
        self._run("R1", ["mkdir", "-m", "0700", str(self.base)])
        rec = self.ctx.recorder
        rec.action("boot", host="R1")
        rootfs = self._stage("R1")
        self._free_ports("R1")
        self.src = RemoteContainer(self, "R1")
        left, right = (self.inv.router[seg] for seg in topo.SEGMENTS)
        try:
            self.src.start(
                container_argv(rootfs, self.ctx.scenario.router, [left.ipv4, left.ipv6], [right.ipv4, right.ipv6],
                               self.ctx.scenario.rib_routes),
                self.ctx.scenario.boot_timeout_s,
                self.ctx.abort,
            )  # fmt: skip
        except (GuestError, ProcessError) as err:
            self.src.save_console()
            raise GuestError(f"router container not ready: {err}") from err
        rec.action("router-ready", host="R1", pid=self.src.pid)

    def prepare_destination(self) -> None:
        """R2: its rootfs copy under its keeper, the image directories."""
        self._run("R2", ["mkdir", "-m", "0700", str(self.base)])
        self._stage("R2")
        self._mkdir("R1", self._dir("img-R1"))
        self._mkdir("R2", self._dir("img-R2"))
        self.ctx.recorder.action("incoming", host="R2", page_server_port=PAGE_SERVER_PORT, xfer_port=XFER_PORT)

    def _connect_receiver(self) -> Any:
        """The final dump's program on R1 connects to the receiver itself."""
        return None

    def _step_argv(self, cmd: str, *args: str) -> list[str]:
        return ["python3", f"{self.lib}/hoststeps.py", cmd, *args]

    def _action_script(self) -> Path:
        """CRIU's action script as hosts-setup deployed it on the hosts."""
        return Path(f"{self.lib}/action.sh")

    def _tcp_established(self) -> bool:
        """A lab's dump and restore have never taken established TCP connections."""
        return False

    def _dump_on_r1(self, index: int, kind: str, images: Any, criu: list[str], pre: bool) -> dict[str, Any]:
        """A pre-dump (``hoststeps run``), or the final dump as ``hoststeps dump-send`` on R1 (the
        images go straight to R2's receiver after it); the round's times are R1's."""
        if pre:
            argv = self._step_argv("run", "--", *criu)
        else:
            argv = self._step_argv(
                "dump-send", "--dir", str(images), "--to", f"{self._r2_addr()}:{XFER_PORT}", "--", *criu
            )
        proc = self._start(f"criu-{kind}-{index}", argv, "R1")
        rc = self._wait(proc, f"criu {kind}")
        steps = parse_steps(proc.stderr_path.read_text(errors="replace"))
        dump = steps.get("run" if pre else "dump")
        if dump is None:
            why = steps.get("connect", {}).get("error") or proc.stderr_tail()
            raise MigrationError(f"criu {kind} on R1 did not start (exit {rc}): {why}")
        rc = int(dump["exit_status"])  # type: ignore[call-overload]
        rec = self.ctx.recorder
        t0 = rec.action(f"criu-{kind}", t_ns=self._local_ns("R1", int(dump["start_ns"])), side="src", round=index)  # type: ignore[call-overload]
        t1 = rec.action(
            f"criu-{kind}-end", t_ns=self._local_ns("R1", int(dump["end_ns"])),  # type: ignore[call-overload]
            side="src", round=index, exit_status=rc,
        )  # fmt: skip
        run = {"index": index, "kind": kind, "proc": proc, "start_ns": t0, "end_ns": t1, "exit_status": rc}
        self.last_dump = run | {"steps": steps}
        return run

    def _transfer(self, conn: Any, index: int) -> None:
        """The transfer that ``dump-send`` made right after the dump, as it reported it."""
        assert self.last_dump is not None and self.receiver is not None
        t = self.last_dump["steps"].get("transfer")
        if t is None or "error" in t:
            why = (t or {}).get("error") or self.last_dump["proc"].stderr_tail()
            raise MigrationError(f"image transfer to R2 failed: {why} {self.receiver.stderr_tail()}")
        t0 = self.ctx.recorder.action("transfer", t_ns=self._local_ns("R1", int(t["start_ns"])), side="src")
        t1 = self.ctx.recorder.action(
            "transfer-end", t_ns=self._local_ns("R1", int(t["end_ns"])), side="dst", files=t["files"], bytes=t["bytes"]
        )
        self.record["transfer"] = {"start_ns": t0, "end_ns": t1, "files": t["files"], "bytes": t["bytes"],
                                   "clock": "R1's, on the orchestrator's with R1's measured offset"}  # fmt: skip

    def _start_receiver(self, index: int) -> None:
        """``hoststeps recv-restore`` on R2, listening before the final dump: the images, then
        ``criu restore`` (veths' outer ends named as R2's taps, in R2's bridges) the moment the
        last byte is written, then the router's announcements from its own ports."""
        images = self._images("R2", index)
        criu = self._env("dst") + self.criu.cmd(
            *restore_args(images, self._dir("rootfs-R2"), self._veths("R2"), self._dir("restored.pid"),  # type: ignore[arg-type]
                          action_script=self._action_script())
        )  # fmt: skip
        ports = []
        for p in topo.ROUTER_PORTS:
            port = self.inv.router[p.segment]
            ports += ["--port", p.guest_ifname, ",".join(f.hex() for f in frames(port.mac, [port.ipv4, port.ipv6]))]
        argv = self._step_argv(
            "recv-restore", "--dir", str(images), "--listen", f"{self._r2_addr()}:{XFER_PORT}",
            "--pidfile", str(self._dir("restored.pid")), "--rounds", str(ROUNDS), "--gap", str(ROUND_GAP_S),
            *ports, "--", *criu,
        )  # fmt: skip
        self.receiver = self._start("criu-restore", argv, "R2")
        try:
            self.receiver.wait_for("READY", READY_TIMEOUT_S, path=self.receiver.stdout_path, abort=self.ctx.abort)
        except ProcessError as err:
            raise MigrationError(f"image receiver on R2 did not start: {err}") from err

    def _restore(self, index: int) -> dict[str, Any]:
        """The restore that ``recv-restore`` ran once the images were in, as it reported it."""
        assert self.receiver is not None
        proc = self.receiver
        rc = self._wait(proc, "criu restore")
        steps = parse_steps(proc.stderr_path.read_text(errors="replace"))
        r = steps.get("restore")
        if r is None:
            why = steps.get("receive", {}).get("error") or proc.stderr_tail()
            raise MigrationError(f"criu restore on R2 did not start (exit {rc}): {why}")
        rc = int(r["exit_status"])  # type: ignore[call-overload]
        got = steps.get("receive") or {}
        if "end_ns" in got:  # the last image byte written on R2, by R2's clock (the sender's
            # transfer end is its receipt of R2's answer, which may come after the restore began)
            self.record["receive"] = {
                "start_ns": self._local_ns("R2", int(got["start_ns"])),  # type: ignore[call-overload]
                "end_ns": self._local_ns("R2", int(got["end_ns"])),  # type: ignore[call-overload]
                "files": got.get("files"),
                "bytes": got.get("bytes"),
            }
        rec = self.ctx.recorder
        t0 = rec.action("criu-restore", t_ns=self._local_ns("R2", int(r["start_ns"])), side="dst")  # type: ignore[call-overload]
        t1 = rec.action("cont", t_ns=self._local_ns("R2", int(r["end_ns"])), side="dst", exit_status=rc)  # type: ignore[call-overload]
        self._adopt_restored()
        run = {"proc": proc, "start_ns": t0, "end_ns": t1, "exit_status": rc}
        self.last_restore = run | {"steps": steps}
        if rc != 0:
            log_text = self._account_restore(run, index)
            raise MigrationError(
                f"criu restore failed on R2 (exit {rc}; the source was dumped): {error_excerpt(log_text)}"
            )
        return run

    def _adopt_restored(self) -> None:
        """The restored container's init, from the pidfile criu wrote on R2."""
        if self.dst is not None:
            return
        text = self._read_text("R2", self._dir("restored.pid"))
        if text and text.strip().isdigit():
            self.dst = RemoteContainer(self, "R2")
            self.dst.adopt(int(text.strip()))

    def _announce(self) -> None:
        """The announcement ``recv-restore`` sent after the restore, as it reported it."""
        a = self.last_restore["steps"].get("announce")
        if a is None or "error" in a:
            raise MigrationError(f"announcing the router's MACs on R2 failed: {(a or {}).get('error')}")
        t = self._local_ns("R2", int(a["t_ns"]))
        self.ctx.recorder.action("announce-self", t_ns=t, side="dst")
        self.record["announce_ns"] = t

    def _image_sizes(self, index: int) -> dict[str, int]:
        dirs = [str(self._images("R2", i)) for i in range(1, index + 1)]
        out = self._run("R2", ["find", *dirs, "-maxdepth", "1", "-type", "f", "-printf", "%h %f %s\\n"]).stdout
        sizes: dict[str, int] = {}
        for line in out.decode().splitlines():
            d, name, size = line.rsplit(" ", 2)
            if not name.endswith(".log"):
                sizes[f"{PurePosixPath(d).name}/{name}"] = int(size)
        return sizes

    # -- after the run ---------------------------------------------------------------------
    def verify(self) -> dict[str, Any]:
        """Where the router runs: the source container gone, the destination's running with its
        veth peers R2's named ports."""
        out: dict[str, Any] = {
            "src_status": "running" if self.src and self.src.alive() else "gone",
            "dst_status": "running" if self.dst and self.dst.alive() else "absent",
        }
        if self.dst is not None and self.dst.alive():
            out["dst_pid"] = self.dst.pid
            out["dst_peers_in_R2"] = self._peers_in_r2()
        return out

    def _peers_in_r2(self) -> dict[str, bool] | str:
        """For each container port: is its veth peer the named port on R2 (each end names the
        other's ifindex)?"""
        assert self.dst is not None and self.dst.pid is not None
        try:
            inner = json.loads(self._run("R2", ["nsenter", f"--net=/proc/{self.dst.pid}/ns/net",
                                                "ip", "-j", "link", "show"]).stdout)  # fmt: skip
            outer = json.loads(self._run("R2", ["ip", "-j", "link", "show"]).stdout)
        except Exception as err:  # reported in the verdict, not raised
            return f"unknown ({err})"
        by_name_in = {link["ifname"]: link for link in inner}
        by_name_out = {link["ifname"]: link for link in outer}
        res = {}
        for name, host_if, _br in self._veths("R2"):
            i, o = by_name_in.get(name), by_name_out.get(host_if)
            res[name] = bool(i and o and i.get("link_index") == o["ifindex"] and o.get("link_index") == i["ifindex"])
        return res

    #: make calibrate's KIND=pause is refused before anything starts (migrate.experiment.calibrate)
    pause_unavailable = "HV=criu on a lab has no pause (the cgroup freezer is local only)"

    def prepare_pause(self) -> None:
        raise ConfigError("HV=criu on a lab has no pause (the cgroup freezer is local only): use KIND=cut")

    def stop(self) -> None:
        """Every step by PID, the restored container adopted from its pidfile, both containers
        stopped (consoles kept), then the keepers: they kill what is left in the rootfs copies and
        put the taps back.  The run's directory on each host goes with the lab's teardown."""
        for p in self.procs:
            if p.alive():
                p.stop(timeout_s=3.0)
        with contextlib.suppress(Exception):
            self._adopt_restored()
        for c in (self.dst, self.src):
            if c is not None:
                with contextlib.suppress(Exception):
                    c.save_console()
                c.stop()
        for k in self.keepers:
            k.stop(timeout_s=STOP_TIMEOUT_S)
            rep = parse_steps(k.stderr_path.read_text(errors="replace")).get("keep")
            if rep is not None:
                self.record.setdefault("keepers", {})[k.what] = rep
                with contextlib.suppress(OSError):
                    self._write_record()
        self.keepers = []
