"""HV=criu: the router as a container, moved R1 -> R2 by CRIU checkpoint/restore.

* start_source: a real container on R1 (``routers.container_image``: own rootfs copy, mount/pid/uts/
  ipc/net namespaces, pivot_root, own /proc and /dev) whose veths hang off R1's bridges; ready
  when the router daemon reports both connected routes.
* prepare_destination: R2 gets its own copy of the rootfs (pre-provisioned, as a VM image would
  be); the image receiver (and, for pre-copy, CRIU's page server) on R2's ``mig0`` address is
  started, and connected to, before the final dump freezes the router.
* migrate, MODE=stopcopy (OpenVZ's method: dump file, copy, undump): ``criu dump`` freezes the
  container and writes its images to memory (tmpfs) on R1, they cross the migration link
  (``migrate.drivers.criu.imgxfer``), ``criu restore`` recreates the container on R2 with its veths bridged
  to R2's ``brL``/``brR``, and the router's MACs are announced there.
* migrate, MODE=precopy (P.Haul's method): ``criu pre-dump --track-mem`` rounds, each streaming
  the pages to a fresh page server on R2 (parent images chained), while the dirty set shrinks
  (``criu_rounds``); then the final dump (dirty pages to the page server), transfer of the other
  images and restore as above.  Needs the kernel's soft-dirty page tracking.

Every CRIU command, its log and ``--display-stats`` output are kept in the results directory;
``criu.json`` holds the rounds and CRIU's statistics that ``analysis`` reads."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import socket
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from migrate.core.atomic import write_json
from migrate.core.errors import DependencyError, GuestError, MigrationError
from migrate.core.nsock import NetDevCounters, netns_path, socket_in
from migrate.core.procs import Proc, ProcessError
from migrate.core.rundir import CRIU_JSON, CRIU_JSON_FORMAT
from migrate.drivers.base import Driver, MigrationOutcome, RunContext
from migrate.drivers.criu import hostvm
from migrate.drivers.criu import rounds as criu_rounds
from migrate.drivers.criu.announce import announce
from migrate.drivers.criu.container import Container, delete_links, peers_in, veth_specs
from migrate.drivers.criu.imgxfer import MAGIC, TransferError, send_files
from migrate.drivers.criu.stats import error_excerpt, parse_display_stats
from migrate.drivers.criu.tool import (
    CriuBinary,
    dump_args,
    locate,
    page_server_args,
    require_mode,
    restore_args,
)
from migrate.model import routing
from migrate.model.scenario import Scenario, profile_of
from migrate.testbed import topology as topo

log = logging.getLogger(__name__)

PAGE_SERVER_PORT = topo.MIGRATION_PORT
XFER_PORT = topo.MIGRATION_PORT + 1
READY_TIMEOUT_S = 10.0
#: inside the CRIU host VM (CRIU_HOST=vm: everything emulated under TCG on a host without VT-x) a
#: helper's Python starts from the 9p-shared repository; the image receiver missed READY within
#: 10 s in 2 of 2 full test runs on a fresh machine
READY_TIMEOUT_VM_S = 60.0


def ready_timeout_s() -> float:
    """How long a helper may take to report ready: longer inside the CRIU host VM."""
    return READY_TIMEOUT_VM_S if hostvm.in_vm() else READY_TIMEOUT_S


POLL_S = 0.005
#: release the router's host-side ports from the bridges while CRIU has it frozen (see
#: action.sh): without it the container's kernel forwards on while the router is frozen
LOCK_DATA_PLANE = True
#: MODE=stopcopy streams the pages through CRIU's page server during the dump (True) or, as
#: OpenVZ's vzmigrate does, dumps to local memory (tmpfs) and ships all images after it (False).
#: CRIU corks its page-server socket and waits for the server's answer at disconnect without
#: uncorking, which costs up to the kernel's 200 ms cork ceiling of frozen time per dump.
STOPCOPY_VIA_PAGE_SERVER = False
ACTION_SCRIPT = Path(__file__).resolve().parent / "action.sh"
WORK_ROOT = Path("/dev/shm")
CRIU_JSON_VERSION = CRIU_JSON_FORMAT
#: routers CRIU cannot checkpoint, and why (checked before anything is created)
UNSUPPORTED_ROUTERS = {
    "frr": (
        "CRIU cannot checkpoint FRR: zebra subscribes a netlink socket to multicast groups above 32 "
        '(RTNLGRP_TUNNEL), which CRIU refuses to dump (criu/sk-netlink.c: "has more than 32 groups"): '
        "use ROUTER=bird"
    ),
}
HOST_TOOLS = {
    "unshare": "util-linux",
    "ip": "iproute2",
    "iptables-restore": "iptables (CRIU's network lock)",
    "tar": "tar (CRIU saves tmpfs contents with it)",
}


def work_root(fallback: Path) -> Path:
    """Where images and rootfs copies live: ``WORK_ROOT`` if it is a tmpfs (images in memory, as
    P.Haul keeps them; a disk would add its write latency to the frozen time), else ``fallback``."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/mounts").read_text().splitlines():
            fields = line.split()
            if len(fields) > 2 and fields[1] == str(WORK_ROOT) and fields[2] == "tmpfs":
                return WORK_ROOT
    return fallback


class CriuDriver(Driver):
    """Container checkpoint/restore with CRIU (stop-and-copy, or iterative pre-dump)."""

    name = "criu"

    def __init__(self, ctx: RunContext, facts: dict[str, Any]) -> None:
        super().__init__(ctx, facts)
        c = facts["criu"]
        self.criu = CriuBinary(tuple(c["argv"]), c["version"], c["source"])
        tb = ctx.testbed
        self.src_ns, self.dst_ns = tb.ns("R1"), tb.ns("R2")
        self.base = work_root(ctx.registry.dir.parent) / f"vrmig-{ctx.registry.prefix}-criu"
        self.src: Container | None = None
        self.dst: Container | None = None
        self.receiver: Proc | None = None
        self.page_server: Proc | None = None
        self.procs: list[Proc] = []
        self.record: dict[str, Any] = {
            "version": CRIU_JSON_VERSION,
            "criu": {"version": self.criu.version, "source": self.criu.source, "argv": list(self.criu.argv)},
            "mode": ctx.scenario.mode,
            "page_size_bytes": os.sysconf("SC_PAGE_SIZE"),
            "lock_data_plane": LOCK_DATA_PLANE,
            "rounds": [],
            "status": "not started",
        }
        self.deadline = 0.0
        self.counters: NetDevCounters | None = None
        #: a router of a profile's OCI image (None: the suite's own rootfs)
        self.profile: Any = profile_of(ctx.scenario.router)
        self.config_text: str | None = None

    # -- paths -----------------------------------------------------------------------------
    def _dir(self, name: str) -> Path:
        return self.base / name

    def _images(self, host: str, index: int) -> Path:
        return self._dir(f"img-{host}") / str(index)

    # -- preflight -------------------------------------------------------------------------
    @classmethod
    def preflight(cls, scenario: Scenario) -> dict[str, Any]:
        """criu present and working here (``criu check``, the mode's kernel features), host tools,
        a router CRIU can checkpoint and its built rootfs — without side effects.  A profile's
        OCI image runs its FRR under the netlink filter (``nlfilter``), which CRIU can checkpoint."""
        if profile_of(scenario.router) is None and scenario.router_software in UNSUPPORTED_ROUTERS:
            raise DependencyError(
                f"ROUTER={scenario.router} with HV=criu: {UNSUPPORTED_ROUTERS[scenario.router_software]}"
            )
        return cls.preflight_start(scenario)

    @classmethod
    def preflight_start(cls, scenario: Scenario) -> dict[str, Any]:
        """:meth:`preflight` for a container that is never checkpointed (``make baseline``): any
        router, FRR included."""
        missing = [f"{t} ({pkg})" for t, pkg in HOST_TOOLS.items() if shutil.which(t) is None]
        if missing:
            raise DependencyError(f"HV=criu needs {', '.join(missing)}: run `make setup`")
        profile = profile_of(scenario.router)
        if profile is not None:
            return cls._preflight_profile(scenario, profile)
        from routers.build import run_image
        from routers.profiles import get as get_profile

        ok, why = get_profile(scenario.router).available()
        if not ok:
            raise DependencyError(f"ROUTER={scenario.router} is unavailable: {why}")
        image = run_image(scenario.router, verify=False)
        if image.rootfs is None:
            raise DependencyError(f"the {scenario.router} router image has no rootfs: run `make setup`")
        criu = locate()
        require_mode(criu, scenario.mode)
        return {
            "criu": {"version": criu.version, "source": criu.source, "argv": list(criu.argv)},
            "accel": "none",
            "accel_reason": "a container shares the host kernel: no hardware virtualisation involved",
            "rootfs": str(image.rootfs),
            "router_version": image.manifest.get("router_version") or image.manifest.get("version"),
            "guest_image": {"rootfs": str(image.rootfs), **image.manifest},
        }

    @classmethod
    def _preflight_profile(cls, scenario: Scenario, profile: Any) -> dict[str, Any]:
        """A profile's OCI image: the host tools of its set-up, a template that renders, the image's
        tag and run configuration (meta.json ``guest_image``), a working criu."""
        from migrate.drivers.criu import ocict
        from migrate.drivers.disk_boot import check_config

        missing = ocict.host_tools_missing()
        if missing:
            raise DependencyError(f"HV=criu with ROUTER={profile.path} needs {', '.join(missing)}: run `make setup`")
        check_config(profile, scenario)  # a template that fails to render: one line, before anything starts
        record = ocict.image_record(profile)
        criu = locate()
        require_mode(criu, scenario.mode)
        return {
            "criu": {"version": criu.version, "source": criu.source, "argv": list(criu.argv)},
            "accel": "none",
            "accel_reason": "a container shares the host kernel: no hardware virtualisation involved",
            "router_version": record["router"]["version"],
            "guest_image": record,
        }

    # -- helpers ---------------------------------------------------------------------------
    def _addresses(self) -> tuple[list[str], list[str]]:
        left, right = (topo.router_port(seg) for seg in topo.SEGMENTS)
        return [left.ipv4, left.ipv6], [right.ipv4, right.ipv6]

    def _stage(self, host: str) -> Path:
        """``host``'s rootfs copy, recorded as a container root: every process whose root it is
        (the container started on it or restored onto it, PID-recorded or not yet) is stopped
        at teardown, and by the reaper if the orchestrator dies.  (The init cannot simply die
        with its launcher, ``unshare --kill-child``: CRIU checkpoints the death signal and it
        fires on the restored init as soon as ``criu restore`` exits.)"""
        from routers.container_image import stage_rootfs

        if self.profile is not None:
            rootfs = self._stage_image(host)
        else:
            rootfs = stage_rootfs(self.ctx.scenario.router, self._dir(f"rootfs-{host}"))
        self.ctx.registry.add_root(rootfs)
        return rootfs

    def _stage_image(self, host: str) -> Path:
        """``host``'s copy of the profile's OCI image (unpacked once per run), its configuration
        rendered from the testbed and written in (kept in the run's directory too)."""
        from migrate.drivers.criu import ocict
        from migrate.model.router_config import testbed_context
        from routers.profile_file import render_config

        s, cfg = self.ctx.scenario, self.profile.config
        if self.config_text is None:
            self.config_text = render_config(self.profile, testbed_context(self.profile, s))
            (self.ctx.run_dir / f"router-{Path(cfg.path).name}").write_text(self.config_text)
        t0 = time.monotonic()
        unpacked = ocict.unpack_once(self.profile, self.base)
        rootfs = ocict.stage(
            unpacked, self._dir(f"rootfs-{host}"), cfg.path, self.config_text, self.profile.router.software,
            s.peering_protocols, as_root=self._frr_as_root(),
        )  # fmt: skip
        self.ctx.recorder.action(
            "router-staged", host=host, rootfs=str(rootfs), seconds=round(time.monotonic() - t0, 3)
        )
        return rootfs

    def _env(self, side: str) -> list[str]:
        ports = " ".join(f"{outer}@{br}" for _i, outer, br in veth_specs()) if LOCK_DATA_PLANE else ""
        return [
            "env",
            f"VRMIG_SIDE={side}",
            f"VRMIG_CRIU_EVENTS={self._dir('events-' + side)}",
            f"VRMIG_HOST_PORTS={ports}",
        ]

    def _start(self, what: str, argv: list[str], host: str) -> Proc:
        """Start ``argv`` on ``host`` (R1/R2): here, in the host's namespace."""
        p = Proc(what, argv, self.ctx.registry, self.ctx.run_dir, netns=self.ctx.testbed.ns(host)).start()
        self.procs.append(p)
        return p

    # -- what differs on a lab (migrate.drivers.criu.lab overrides these) --------------------
    def _read_text(self, host: str, path: Path) -> str | None:
        """A file CRIU or the action script wrote on ``host`` (None if absent)."""
        try:
            return path.read_text(errors="replace")
        except FileNotFoundError:
            return None

    def _take_events(self, side: str) -> str:
        """The action script's hook lines of ``side`` so far, and start afresh."""
        path = self._dir(f"events-{side}")
        text = self._read_text("R1" if side == "src" else "R2", path) or ""
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        return text

    def _local_ns(self, host: str, t_ns: int) -> int:
        """A timestamp of ``host``'s clock on the orchestrator's (one clock here)."""
        return t_ns

    def _mkdir(self, host: str, path: Path, parents: bool = False) -> None:
        """Create a directory on ``host``."""
        path.mkdir(parents=parents)

    def _open_counters(self) -> None:
        """Open R1's interface counters (read at the final dump's edges)."""
        self.counters = NetDevCounters(netns_path(self.src_ns))

    def _tx_bytes(self) -> int:
        """Bytes R1 has sent on the migration link so far."""
        assert self.counters is not None
        return self.counters.tx_bytes(topo.MIGRATION_IF)

    def _free_ports(self, host: str) -> None:
        """``host``'s pre-created taps make way for the container's veths' outer ends."""
        delete_links(self.ctx.testbed.ns(host), [outer for _i, outer, _b in veth_specs()])

    def _imgxfer_argv(self, *args: str) -> list[str]:
        """The image transfer program with ``args``."""
        return [sys.executable, "-m", "migrate.drivers.criu.imgxfer", *args]

    def _wait(self, proc: Proc, what: str) -> int:
        """Wait for a CRIU step to exit within the migration deadline; returns its exit status."""
        while proc.alive():
            if self.ctx.abort and self.ctx.abort():
                proc.stop()
                raise MigrationError(f"interrupted during {what}")
            if time.monotonic() > self.deadline:
                proc.stop()
                raise MigrationError(
                    f"{what} did not finish within MIGRATE_TIMEOUT={self.ctx.scenario.migrate_timeout_s:.0f} s"
                )
            time.sleep(POLL_S)
        rc = proc.returncode()
        assert rc is not None
        return rc

    def _events(self, side: str) -> None:
        """Turn the action script's hook times into actions (criu-<hook>), then start afresh."""
        host = "R1" if side == "src" else "R2"
        for line in self._take_events(side).splitlines():
            hook, _, t = line.partition(" ")
            if t.isdigit():
                self.ctx.recorder.action(f"criu-{hook}", t_ns=self._local_ns(host, int(t)), side=side)

    def _keep_log(self, host: str, images: Path, name: str, as_name: str) -> str:
        """Copy a criu log on ``host`` into ``<run>/criu/``; returns its text."""
        text = self._read_text(host, images / name)
        if text is None:
            return ""
        out = self.ctx.run_dir / "criu"
        out.mkdir(exist_ok=True)
        (out / as_name).write_text(text)
        return text

    def _page_server(self, index: int) -> Proc:
        """CRIU's page server on R2's mig0 address, writing into R2's image dir ``index``
        (chained to ``index - 1``); returns once it listens."""
        images = self._images("R2", index)
        self._mkdir("R2", images, parents=True)
        prev = f"../{index - 1}" if index > 1 else None
        addr = self._r2_addr()
        p = self._start(
            f"criu-page-server-{index}",
            self.criu.cmd(*page_server_args(images, addr, PAGE_SERVER_PORT, prev)),
            "R2",
        )
        try:
            p.wait_for("\0", ready_timeout_s(), path=p.stdout_path, abort=self.ctx.abort)
        except ProcessError as err:
            excerpt = error_excerpt(self._keep_log("R2", images, "page-server.log", f"page-server-{index}.log"))
            raise MigrationError(f"criu page-server on R2 did not start: {err}: {excerpt}") from err
        return p

    # -- phases ----------------------------------------------------------------------------
    def start_source(self) -> None:
        """Stage R1's rootfs, replace R1's taps with the container's veth peers, start the
        container and wait until the router reports both connected routes."""
        from routers.container_image import container_argv

        self.ctx.registry.add_path(self.base)
        self.base.mkdir(mode=0o700)
        rec = self.ctx.recorder
        rec.action("boot", host="R1")
        rootfs = self._stage("R1")
        delete_links(self.src_ns, [outer for _i, outer, _b in veth_specs()])
        self.src = Container("R1", self.src_ns, self.ctx.registry, self.ctx.run_dir)
        if0, if1 = self._addresses()
        if self.profile is not None:
            self._start_image(rootfs, if0, if1)
            rec.action("router-ready", host="R1", pid=self.src.pid)
            return
        try:
            self.src.start(
                container_argv(
                    rootfs,
                    self.ctx.scenario.router,
                    if0,
                    if1,
                    self.ctx.scenario.rib_routes,
                    routing=routing.router_args(self.ctx.scenario),
                ),
                self.ctx.scenario.boot_timeout_s,
                self.ctx.abort,
            )
        except (GuestError, ProcessError) as err:
            self.src.save_console()
            raise GuestError(f"router container not ready: {err}") from err
        rec.action("router-ready", host="R1", pid=self.src.pid)

    def _frr_as_root(self) -> bool:
        """FRR's daemons keep root's identity when criu could not read their resource limits
        otherwise (no CAP_SYS_RESOURCE here); criu.json ``frr_daemons_as_root`` says so."""
        from migrate.drivers.criu import ocict

        as_root = self.profile.router.software == "frr" and ocict.lacks_sys_resource()
        self.record["frr_daemons_as_root"] = as_root
        return as_root

    def _start_image(self, rootfs: Path, if0: list[str], if1: list[str]) -> None:
        """Start the profile's image on R1 and wait until it forwards (after the profile's console
        marker, if it names one), within ``[readiness] timeout_s`` or BOOT_TIMEOUT."""
        from migrate.drivers.criu import ocict
        from migrate.drivers.readiness import wait_forwarding
        from migrate.model.router_config import testbed_context
        from routers.oci_image import image_config

        assert self.src is not None
        image = self.profile.image
        cfg = image_config(image.oci, image.oci_tag or "latest")
        hostname = testbed_context(self.profile).router["hostname"]
        own = self.profile.readiness.timeout_s
        timeout_s = float(own if own is not None else self.ctx.scenario.boot_timeout_s)
        deadline = time.monotonic() + timeout_s
        try:
            self.src.launch(ocict.container_argv(rootfs, cfg, hostname, if0, if1))
            marker = self.profile.readiness.console_marker
            if marker:
                self._wait_marker(marker, deadline)
            left = max(0.0, deadline - time.monotonic())
            ready = wait_forwarding(
                self.ctx.testbed,
                self.ctx.scenario.ip,
                left,
                self.src.alive,
                self.ctx.abort or (lambda: False),
                self.src.console_path(),
            )
        except (GuestError, ProcessError) as err:
            self.src.save_console()
            raise GuestError(f"router container not ready: {err}") from err
        self.ctx.recorder.action("router-forwarding", host="R1", **ready.to_dict())
        self.src.read_console()  # kept: the source's console is unreadable once CRIU dumped it

    def _wait_marker(self, marker: str, deadline: float) -> None:
        """Wait for ``marker`` on the source container's console (its death or the deadline raise
        GuestError)."""
        assert self.src is not None
        while marker not in self.src.read_console():
            if not self.src.alive():
                raise GuestError(f"router container on R1 exited before {marker!r}: {self.src.console_text[-300:]}")
            if (self.ctx.abort and self.ctx.abort()) or time.monotonic() > deadline:
                raise GuestError(f"router container on R1 printed no {marker!r} in time")
            time.sleep(POLL_S * 4)

    def prepare_destination(self) -> None:
        """R2: its own copy of the rootfs (pre-provisioned, as a VM image would be) and the image
        directories; the receiver and page servers start with the migration."""
        if self.src is not None:
            self.src.read_console()  # the source's console as it was last readable
        self._stage("R2")
        self._images("R1", 1).parent.mkdir()
        self._images("R2", 1).parent.mkdir()
        self.ctx.recorder.action("incoming", host="R2", page_server_port=PAGE_SERVER_PORT, xfer_port=XFER_PORT)

    def _start_receiver(self, index: int) -> None:
        """The image receiver on R2's mig0 address, writing into R2's image dir ``index``."""
        self.receiver = self._start(
            "imgxfer-recv",
            self._imgxfer_argv(
                "recv", "--dir", str(self._images("R2", index)), "--listen", f"{self._r2_addr()}:{XFER_PORT}"
            ),
            "R2",
        )
        try:
            self.receiver.wait_for("READY", ready_timeout_s(), path=self.receiver.stdout_path, abort=self.ctx.abort)
        except ProcessError as err:
            raise MigrationError(f"image receiver on R2 did not start: {err}") from err

    def migrate(self) -> MigrationOutcome:
        """Pre-dump rounds (precopy), final dump, image transfer, restore on R2, announcement.

        Between the freeze and the announcement only CRIU and the transfer run: the image stream
        is connected beforehand, counters are read from an open file, bookkeeping comes after."""
        assert self.src is not None and self.src.pid is not None
        s, rec = self.ctx.scenario, self.ctx.recorder
        self.deadline = time.monotonic() + s.migrate_timeout_s
        self.record["status"] = "running"
        self._open_counters()
        self._memberships("before", self.src.pid)
        try:
            index = 1
            if s.mode == "precopy":
                rec.action("migrate", side="src", mode=s.mode)
                index = self._precopy_rounds()
            if self._via_page_server():
                self.page_server = self._page_server(index)
            else:
                self.page_server = None
                self._mkdir("R2", self._images("R2", index))
            # R2's unused pre-created taps make way for the restored veths' outer ends
            self._free_ports("R2")
            self._start_receiver(index)
            stream = self._connect_receiver()
            self._fire_fault()
            tx0 = self._tx_bytes()
            if s.mode == "stopcopy":
                rec.action("stop", side="src")
                rec.action("migrate", side="src", mode=s.mode)
            else:
                rec.action("stop", side="src", final_dump=index)
            dump = self._run_dump(index)
            self._transfer(stream, index)
            restore = self._restore(index)
            self._announce()
            tx1 = self._tx_bytes()
            self._account_dump(dump, tx1 - tx0, includes_transfer=True)
            self._account_restore(restore, index)
            assert self.dst is not None and self.dst.pid is not None
            self._memberships("after", self.dst.pid)
            if s.criu_rejoin_mcast:
                self._rejoin_groups(self.dst.pid)
            if self.receiver is not None and self._wait(self.receiver, "image receiver") != 0:
                log.warning(
                    "image receiver exited with %s: %s", self.receiver.returncode(), self.receiver.stderr_tail()
                )
        except MigrationError as err:
            self.record["status"] = "failed"
            self.record["failure"] = str(err)
            rec.action("migration-end", side="src", status="failed", reason=str(err))
            raise
        finally:
            self._write_record()
        self.record["status"] = "completed"
        # the migration ended when the restored router ran on R2 (the restore's end, = cont)
        rec.action("migration-end", t_ns=self.record["restore"]["end_ns"], side="dst", status="completed")
        self._write_record()
        return MigrationOutcome(completed=True, hypervisor=self._outcome())

    def _memberships(self, when: str, pid: int) -> None:
        """criu.json ``multicast``: the router's multicast memberships ``before`` the first dump
        and ``after`` the restore, and those the restore ``lost`` (CRIU does not restore them;
        a restored OSPF router then hears no hello), warned about once."""
        from migrate.drivers.criu import mcast

        m = self.record.setdefault("multicast", {})
        try:  # a reading that fails is recorded, never the migration's failure
            lists = mcast.read_lists(pid)
            for name, text in lists.items():  # the raw lists, kept beside criu.json
                (self.ctx.run_dir / "criu").mkdir(exist_ok=True)
                (self.ctx.run_dir / "criu" / f"{name}-{when}.txt").write_text(text)
            found = mcast.memberships(lists)
        except (OSError, ValueError, IndexError) as err:
            m[when], m[f"{when}_error"] = None, str(err)
            return
        m[when] = found
        if when == "after" and m.get("before") is not None:
            m["lost"] = mcast.lost(m["before"], found)
            if m["lost"]:
                log.warning(
                    "the restored router lost its multicast memberships (%s): CRIU does not restore "
                    "them, so it no longer receives what is sent to those groups (OSPF hellos)",
                    ", ".join(m["lost"]),
                )

    def _rejoin_groups(self, pid: int) -> None:
        """CRIU_REJOIN_MCAST=1: join the groups the restore lost again, on the restored router's
        own OSPF socket (:func:`migrate.drivers.criu.mcast.rejoin`), after the announcement, so the
        data plane's reattachment is not delayed; criu.json ``multicast.rejoin`` (what was joined,
        when) and the lists read again (``rejoined``).  A failure is recorded, never the
        migration's."""
        from migrate.drivers.criu import mcast

        m = self.record.setdefault("multicast", {})
        lost = m.get("lost")
        if not lost:
            m["rejoin"] = {"pairs": [], "note": "nothing lost" if lost == [] else "the memberships were not read"}
            return
        t0 = self.ctx.recorder.action("mcast-rejoin", side="dst", groups=lost)
        try:
            pairs = mcast.rejoin(pid, mcast.lost_pairs(lost))
        except OSError as err:
            m["rejoin"] = {"start_ns": t0, "error": str(err)}
            log.warning("could not put the lost multicast memberships back: %s", err)
            return
        m["rejoin"] = {"start_ns": t0, "end_ns": time.time_ns(), "pairs": pairs}
        self._memberships("rejoined", pid)
        failed = [p for p in pairs if not p.get("joined")]
        if failed:
            log.warning("multicast memberships not put back: %s", failed)

    def _precopy_rounds(self) -> int:
        """P.Haul's iterations: pre-dump while the dirty set shrinks; returns the final dump's index."""
        written: list[int] = []
        decision = criu_rounds.next_round(written)
        while decision.again:
            index = len(written) + 1
            self.page_server = self._page_server(index)
            tx0 = self._tx_bytes()
            run = self._run_dump(index, pre=True)
            self._wait(self.page_server, "criu page-server")  # it exits once the pre-dump disconnected
            stats = self._account_dump(run, self._tx_bytes() - tx0)
            written.append(stats.get("memory_pages_written", 0))
            decision = criu_rounds.next_round(written)
            self.record["rounds"][-1]["decision"] = {"again": decision.again, "reason": decision.reason}
            log.info("pre-dump %d: %d pages written; %s", index, written[-1], decision.reason)
        return len(written) + 1

    def _via_page_server(self) -> bool:
        """Memory pages stream to CRIU's page server on R2 (P.Haul: every pre-dump and the final
        dump), or the dump is written locally and shipped whole after it (OpenVZ's stop-and-copy:
        dump file, copy, undump; see ``STOPCOPY_VIA_PAGE_SERVER``)."""
        return self.ctx.scenario.mode == "precopy" or STOPCOPY_VIA_PAGE_SERVER

    def _fire_fault(self) -> None:
        """Faults of the testbed (link-down, link-cap, gen-dies) hit right before the final dump."""
        inj = self.ctx.faults
        if inj is not None and inj.fault and not inj.fired and inj.fault in inj.targets:
            inj.fire()

    def _run_dump(self, index: int, pre: bool = False) -> dict[str, Any]:
        """One ``criu pre-dump``/``dump`` of the container into R1's image dir ``index``, pages to
        R2's page server.  Returns what ``_account_dump`` needs; a failure is accounted and raised
        (CRIU resumes the container and unlocks its network: it keeps running on R1)."""
        assert self.src is not None and self.src.pid is not None
        kind = "pre-dump" if pre else "dump"
        images = self._images("R1", index)
        self._mkdir("R1", images)
        addr = self._r2_addr() if self._via_page_server() else None
        prev = f"../{index - 1}" if index > 1 else None
        criu = self._env("src") + self.criu.cmd(
            *dump_args(
                self.src.pid, images, addr, PAGE_SERVER_PORT if addr else None, pre=pre, prev=prev,
                track_mem=self.ctx.scenario.mode == "precopy", action_script=self._action_script(),
                tcp_established=self._tcp_established(), file_locks=self.profile is not None,
            )
        )  # fmt: skip
        run = self._dump_on_r1(index, kind, images, criu, pre)
        if run["exit_status"] != 0:
            self._dump_failed(run)
        return run

    def _action_script(self) -> Path:
        """CRIU's action script, where R1's criu reads it."""
        return ACTION_SCRIPT

    def _tcp_established(self) -> bool:
        """Whether the dump and restore take the router's established TCP connections (PEERING's
        BGP sessions) with them."""
        return bool(self.ctx.scenario.peering)

    def _dump_on_r1(self, index: int, kind: str, images: Any, criu: list[str], pre: bool) -> dict[str, Any]:
        """Run the (pre-)dump command ``criu`` on R1 and record its round: the round's record
        (index, kind, process, start and end times, exit status)."""
        t0 = self.ctx.recorder.action(f"criu-{kind}", side="src", round=index)
        proc = self._start(f"criu-{kind}-{index}", criu, "R1")
        rc = self._wait(proc, f"criu {kind}")
        t1 = self.ctx.recorder.action(f"criu-{kind}-end", side="src", round=index, exit_status=rc)
        return {"index": index, "kind": kind, "proc": proc, "start_ns": t0, "end_ns": t1, "exit_status": rc}

    def _dump_failed(self, run: dict[str, Any]) -> None:
        """A (pre-)dump exited non-zero: stop the page server, account the round, raise
        MigrationError with criu's own words (CRIU resumes the container on a failed dump)."""
        assert self.src is not None
        if self.page_server is not None:
            self.page_server.stop()
        text = self._account_dump(run, None)
        running = self.src.alive()
        raise MigrationError(
            f"criu {run['kind']} failed (exit {run['exit_status']}; the container "
            f"{'keeps running' if running else 'is gone'} on R1): {error_excerpt(text['log'])}"
        )

    def _account_dump(self, run: dict[str, Any], link_bytes: int | None, includes_transfer: bool = False) -> Any:
        """Record a (pre-)dump round: CRIU's statistics, its log, the hook times and the bytes R1
        sent on the migration link; returns the statistics (the log text for a failed round)."""
        index, kind, proc = run["index"], run["kind"], run["proc"]
        self._events("src")
        log_text = self._keep_log("R1", self._images("R1", index), f"{kind}.log", f"{kind}-{index}.log")
        self._keep_log("R2", self._images("R2", index), "page-server.log", f"page-server-{index}.log")
        stats = parse_display_stats(proc.stdout_path.read_text(errors="replace")).get("dump", {})
        written = stats.get("memory_pages_written")
        entry = {k: run[k] for k in ("index", "kind", "start_ns", "end_ns", "exit_status")}
        entry |= {
            "pages_written": written,
            "bytes_written": None if written is None else written * self.record["page_size_bytes"],
            "link_tx_bytes": link_bytes,
            "link_tx_includes_image_transfer": includes_transfer,
            "stats": stats,
        }
        self.record["rounds"].append(entry)
        return {"log": log_text} if run["exit_status"] != 0 else stats

    def _r2_addr(self) -> str:
        """R2's address on the migration link."""
        return topo.addr(topo.MIGRATION_ADDR["R2"])

    def _connect_receiver(self) -> socket.socket:
        """TCP connection from R1 to R2's image receiver, opened ahead of the final dump."""
        conn = socket_in(netns_path(self.src_ns), socket.AF_INET, socket.SOCK_STREAM)
        try:
            conn.settimeout(ready_timeout_s())
            conn.connect((self._r2_addr(), XFER_PORT))
            conn.sendall(MAGIC)
        except OSError as err:
            conn.close()
            raise MigrationError(f"cannot reach the image receiver on R2: {err}") from err
        return conn

    def _transfer(self, conn: socket.socket, index: int) -> None:
        """Ship the final dump's images over the migration link (all of them, or all but the
        pages when the page server already carried those)."""
        assert self.receiver is not None
        rec = self.ctx.recorder
        t0 = rec.action("transfer", side="src")
        try:
            with conn:
                summary = send_files(conn, self._images("R1", index))  # returns once R2 wrote them all
        except (OSError, TransferError) as err:
            raise MigrationError(f"image transfer to R2 failed: {err} {self.receiver.stderr_tail()}") from err
        t1 = rec.action("transfer-end", side="dst", files=summary.files, bytes=summary.bytes)
        self.record["transfer"] = {"start_ns": t0, "end_ns": t1, **asdict(summary)}

    def _restore(self, index: int) -> dict[str, Any]:
        """``criu restore`` on R2: veths recreated with their outer ends in R2's bridges."""
        images = self._images("R2", index)
        pidfile = self._dir("restored.pid")
        argv = self._env("dst") + self.criu.cmd(
            *restore_args(
                images, self._dir("rootfs-R2"), veth_specs(), pidfile, action_script=self._action_script(),
                tcp_established=self._tcp_established(), file_locks=self.profile is not None,
            )
        )  # fmt: skip
        t0 = self.ctx.recorder.action("criu-restore", side="dst")
        proc = self._start("criu-restore", argv, "R2")
        rc = self._wait(proc, "criu restore")
        t1 = self.ctx.recorder.action("cont", side="dst", exit_status=rc)
        if pidfile.exists():
            self.dst = Container("R2", self.dst_ns, self.ctx.registry, self.ctx.run_dir)
            self.dst.adopt(int(pidfile.read_text().strip()))
        run = {"proc": proc, "start_ns": t0, "end_ns": t1, "exit_status": rc}
        if rc != 0:
            log_text = self._account_restore(run, index)
            raise MigrationError(
                f"criu restore failed on R2 (exit {rc}; the source was dumped): {error_excerpt(log_text)}"
            )
        return run

    def _account_restore(self, run: dict[str, Any], index: int) -> str:
        """Record the restore: CRIU's statistics, its log, hook times, the images it read."""
        self._events("dst")
        log_text = self._keep_log("R2", self._images("R2", index), "restore.log", "restore.log")
        stats = parse_display_stats(run["proc"].stdout_path.read_text(errors="replace")).get("restore", {})
        self.record["restore"] = {k: run[k] for k in ("start_ns", "end_ns", "exit_status")} | {"stats": stats}
        sizes = self._image_sizes(index)
        self.record["image_bytes"] = sum(sizes.values())
        self.record["image_files"] = sizes
        return log_text

    def _image_sizes(self, index: int) -> dict[str, int]:
        """Bytes of every image file on R2 for the final dump (its dir and its parents')."""
        sizes: dict[str, int] = {}
        for i in range(1, index + 1):
            for f in self._images("R2", i).iterdir():
                if f.is_file() and not f.is_symlink() and not f.name.endswith(".log"):
                    sizes[f"{i}/{f.name}"] = f.stat().st_size
        return sizes

    def _announce(self) -> None:
        """Gratuitous ARP + unsolicited NA from the restored router's own ports."""
        assert self.dst is not None and self.dst.pid is not None
        ports = [(p.guest_ifname, p.mac, [p.ipv4, p.ipv6]) for p in topo.ROUTER_PORTS]
        t = announce(self.dst.pid, ports)
        self.ctx.recorder.action("announce-self", t_ns=t, side="dst")
        self.record["announce_ns"] = t

    def _outcome(self) -> dict[str, Any]:
        final = self.record["rounds"][-1]["stats"] if self.record["rounds"] else {}
        return {
            "status": self.record["status"],
            "rounds": len(self.record["rounds"]),
            "frozen_time_us": final.get("frozen_time_us"),
            "restore_time_us": self.record.get("restore", {}).get("stats", {}).get("restore_time_us"),
            "pages_written": sum(r.get("pages_written") or 0 for r in self.record["rounds"]),
            "image_bytes": self.record.get("image_bytes"),
        }

    def _write_record(self) -> None:
        write_json(self.ctx.run_dir / CRIU_JSON, self.record)

    # -- after the run ---------------------------------------------------------------------
    def verify(self) -> dict[str, Any]:
        """Where the router runs: source container gone, destination container running with its
        veth peers in R2 (and none left in R1)."""
        out: dict[str, Any] = {
            "src_status": "running" if self.src and self.src.alive() else "gone",
            "dst_status": "running" if self.dst and self.dst.alive() else "absent",
        }
        if self.dst is not None and self.dst.alive():
            assert self.dst.pid is not None
            out["dst_pid"] = self.dst.pid
            try:
                out["dst_peers_in_R2"] = peers_in(self.dst.pid, self.dst_ns)
            except OSError as err:
                out["dst_peers_in_R2"] = f"unknown ({err})"
        return out

    def source_processes(self) -> tuple[dict[str, int], dict[str, int]]:
        """The source container: its init and every process below it (daemons, helpers)."""
        return ({}, {"ct": self.src.pid}) if self.src is not None and self.src.pid is not None else ({}, {})

    def source_running(self) -> bool:
        """The source container survived the failed migration."""
        return self.src is not None and self.src.alive()

    # -- pause (make calibrate): the cgroup v2 freezer, as container managers pause ----------
    freezer: Any = None  # migrate.drivers.criu.freezer.Freezer once prepare_pause() ran

    def prepare_pause(self) -> None:
        """Move the router container's processes into a cgroup of their own (registered), whose
        freezer ``pause`` uses; done once, before any pause, so no pause pays for it."""
        from migrate.core.cpustat import process_tree
        from migrate.drivers.criu.freezer import Freezer

        assert self.src is not None and self.src.pid is not None
        self.freezer = Freezer.create(self.ctx.registry, f"vrmig-{self.ctx.registry.prefix}-router")
        pid = self.src.pid
        members = self.freezer.adopt(lambda: process_tree(pid))
        self.ctx.recorder.action("freezer-ready", host="R1", cgroup=str(self.freezer.path), pids=sorted(members))

    def pause(self) -> None:
        """Freeze the router container (returns once the kernel reports every task frozen)."""
        assert self.freezer is not None, "prepare_pause() first"
        self.freezer.freeze()

    def resume(self) -> None:
        """Thaw the frozen router container (returns once the kernel reports it thawed)."""
        assert self.freezer is not None, "prepare_pause() first"
        self.freezer.thaw()

    def release_pause(self) -> None:
        """Remove the freezer's cgroup once the container is gone (after ``stop``)."""
        if self.freezer is not None:
            self.freezer.remove()

    def fault_targets(self) -> dict[str, Any]:
        """No CRIU-specific faults (the testbed's link faults apply before the final dump)."""
        return {}

    def describe(self) -> dict[str, Any]:
        """CRIU version, settings and thresholds."""
        return {
            "criu": self.record["criu"],
            "accel": "none",
            "lock_data_plane": LOCK_DATA_PLANE,
            "page_server_port": PAGE_SERVER_PORT,
            "image_transfer_port": XFER_PORT,
            "precopy": {
                "max_rounds": criu_rounds.MAX_ROUNDS,
                "min_rounds": criu_rounds.MIN_ROUNDS,
                "small_round_pages": criu_rounds.SMALL_ROUND_PAGES,
                "shrink_factor": criu_rounds.SHRINK_FACTOR,
            },
            "rounds": len(self.record["rounds"]),
            "multicast_lost": self.record.get("multicast", {}).get("lost"),
            "multicast_rejoined": [
                f"{p['group']} on {p['device']}"
                for p in (self.record.get("multicast", {}).get("rejoin") or {}).get("pairs", [])
                if p.get("joined")
            ]
            if self.ctx.scenario.criu_rejoin_mcast
            else None,
        }

    def stop(self) -> None:
        """Stop every CRIU step and helper by PID first (a restore killed before it wrote its
        pidfile takes its half-restored tasks with it: CRIU gives them a parent-death signal
        until they resume), then adopt a restored container from the pidfile, save the
        consoles, stop both containers, remove the images and rootfs copies (the registry
        removes whatever remains)."""
        for p in self.procs:
            if p.alive():
                p.stop(timeout_s=3.0)
        pidfile = self._dir("restored.pid")
        if self.dst is None and pidfile.exists():
            with contextlib.suppress(ValueError, OSError):
                self.dst = Container("R2", self.dst_ns, self.ctx.registry, self.ctx.run_dir)
                self.dst.adopt(int(pidfile.read_text().strip()))
        for c in (self.dst, self.src):
            if c is not None:
                with contextlib.suppress(OSError):
                    c.save_console()
                t0 = time.monotonic()
                ended_by = c.stop()
                if ended_by is not None:
                    self.ctx.recorder.action(
                        "router-stopped", host=c.host, signal=ended_by, seconds=round(time.monotonic() - t0, 3)
                    )
        if self.counters is not None:
            self.counters.close()
        if self.base.exists():
            shutil.rmtree(self.base, ignore_errors=True)
