"""HV=kvm DRIVER=libvirt: the router guest as a libvirt domain, migrated peer-to-peer
(``migrateToURI3`` with LIVE|PEER2PEER) between two libvirtd "hosts".

On the embedded testbed each hypervisor-host namespace (R1, R2) runs its own libvirtd
(``libvirt_daemon``): the libvirt of LIBVIRT= (default: a fetched 11.3 driving the default QEMU
release, whose domain's ``<emulator>`` is a script running that release; docs/stack.md); the
driver itself only talks to libvirt URIs, so the same code drives the daemons of real hosts
(``qemu+ssh://…``, ``qemu+tls://…``; see docs/testbed.md "Real libvirt hosts").

Raw records in the run directory (the ``hypervisor`` figures of summary.json come from them):

* ``libvirt_jobinfo.json`` - libvirt's completed-job statistics: ``{"t_ns", "source"
  ("job-completed-event" | "destination" | "source-failed-job"), "stats": {typed params}}``.
* ``libvirt_events.jsonl`` - ``{"t_ns", "side", "event", "data"}`` per line: ``migration-iteration``,
  ``job-completed``, ``lifecycle`` and ``migrate-api-returned`` (the migrateToURI3 call ended).
* ``libvirt_jobstats.jsonl`` - ``{"t_ns", "side": "src", "stats"}``: the running job's statistics
  polled every ``POLL_INTERVAL_S``.
"""

from __future__ import annotations

import contextlib
import functools
import ipaddress
import json
import logging
import threading
import time
from pathlib import Path
from typing import Any

from migrate.core import knobs
from migrate.core.errors import DependencyError, GuestError, MigrationError
from migrate.core.procs import MarkerScan
from migrate.core.registry import pid_alive
from migrate.core.rundir import LIBVIRT_EVENTS_JSONL, LIBVIRT_JOBINFO_JSON, LIBVIRT_JOBSTATS_JSONL, console_log
from migrate.core.stack import (
    DEFAULT_LIBVIRT,
    LibvirtBuild,
    QemuBuild,
    emulator_script,
    resolve_libvirt,
)
from migrate.drivers.base import Driver, MigrationOutcome, RunContext
from migrate.drivers.guest_vm import GuestNic, GuestVm
from migrate.drivers.libvirt import flags as lf
from migrate.drivers.libvirt.daemon import LabLibvirtd, LabRunLibvirtd, NamespacedLibvirtd
from migrate.drivers.libvirt.domain_xml import QEMU_BINARY, domain_facts, domain_xml, with_console
from migrate.drivers.profile_boot import ProfileBoot
from migrate.drivers.stack_resolve import resolve_stack
from migrate.model import dirty, routing
from migrate.model.scenario import Scenario, profile_of
from migrate.testbed import topology as topo

log = logging.getLogger(__name__)

POLL_INTERVAL_S = 0.050  # job statistics every 50 ms
POLL_S = 0.01
JOB_EVENT_TIMEOUT_S = 5.0  # wait this long for the job-completed event after the API returned
EFFECTIVE_READ_TIMEOUT_S = 10.0  # and this long for QEMU's effective parameters read during the job
DOMAIN_STOP_TIMEOUT_S = 10.0
STATES = {0: "nostate", 1: "running", 2: "blocked", 3: "paused", 4: "shutdown", 5: "shutoff", 6: "crashed"}
LIFECYCLE = {
    0: "defined", 1: "undefined", 2: "started", 3: "suspended", 4: "resumed", 5: "stopped",
    6: "shutdown", 7: "pmsuspended", 8: "crashed",
}  # fmt: skip
EVENT_LIFECYCLE, EVENT_MIGRATION_ITERATION, EVENT_JOB_COMPLETED = 0, 20, 21
XML_MIGRATABLE = 8  # VIR_DOMAIN_XML_MIGRATABLE
JOB_STATS_COMPLETED = 1  # VIR_DOMAIN_JOB_STATS_COMPLETED


def import_libvirt() -> Any:
    """The libvirt Python binding, or DependencyError saying how to install it."""
    try:
        import libvirt
    except ImportError as err:
        raise DependencyError(
            f"DRIVER=libvirt needs the libvirt Python binding ({err}): run `make setup` "
            "(installs libvirt-dev and `pip install -e '.[libvirt]'`)"
        ) from None
    return libvirt


def libvirt_spec(scenario: Scenario) -> str:
    """The LIBVIRT= the run uses: the scenario's, else :data:`DEFAULT_LIBVIRT`; a scenario without
    a ``libvirt`` field (no LIBVIRT= to give) runs the host's."""
    if not hasattr(scenario, "libvirt"):
        return "system"
    return scenario.libvirt or DEFAULT_LIBVIRT


@functools.cache
def libvirt_build(spec: str) -> LibvirtBuild:
    """The libvirt of LIBVIRT=``spec`` (migrate.core.stack), once per process: a bad or unserved
    release is a ConfigError (exit 2), a missing host libvirtd or a failed fetch a DependencyError."""
    return resolve_stack("LIBVIRT", spec, lambda: resolve_libvirt(spec, log=log.info))


_loop_lock = threading.Lock()
_loop_started = False


def ensure_event_loop(libvirt: Any) -> None:
    """libvirt's default event loop in a daemon thread (once per process, before any connection):
    it delivers domain events and keepalives."""
    global _loop_started
    with _loop_lock:
        if _loop_started:
            return
        libvirt.virEventRegisterDefaultImpl()
        libvirt.registerErrorHandler(lambda _ctx, err: log.debug("libvirt: %s", err), None)

        def run() -> None:
            while True:
                libvirt.virEventRunDefaultImpl()

        threading.Thread(target=run, name="libvirt-events", daemon=True).start()
        _loop_started = True


def wait_for_marker(path: Path, marker: str, timeout_s: float, alive: Any, abort: Any = None) -> None:
    """Wait until ``marker`` appears in ``path`` (the guest's serial console file)."""
    scan = MarkerScan(path, marker)
    deadline = time.monotonic() + timeout_s
    while True:
        if scan.seen():
            return
        if not alive():
            raise GuestError(f"router guest stopped before printing {marker!r} on {path.name}")
        if abort and abort():
            raise GuestError("interrupted while waiting for the router guest")
        if time.monotonic() > deadline:
            raise GuestError(f"router guest did not print {marker!r} on {path.name} within {timeout_s:.0f} s")
        time.sleep(POLL_S)


class _Jsonl:
    """A thread-safe JSONL writer (libvirt events arrive on the event-loop thread)."""

    def __init__(self, path: Path) -> None:
        self._lock = threading.Lock()
        self._fh = open(path, "a", encoding="utf-8")

    def write(self, obj: dict[str, Any]) -> None:
        with self._lock:
            if not self._fh.closed:
                self._fh.write(json.dumps(obj, default=str) + "\n")
                self._fh.flush()

    def close(self) -> None:
        with self._lock:
            self._fh.close()


class _LocalLibvirt:
    """Where the run's libvirtds and QEMU are on the embedded testbed: a libvirtd of the stack's
    release in each of R1's and R2's namespaces, and the preflight's QEMU as ``<emulator>``."""

    def __init__(self, drv: LibvirtDriver) -> None:
        self.drv = drv

    def daemons(self) -> dict[str, Any]:
        ctx = self.drv.ctx
        build = libvirt_build(libvirt_spec(ctx.scenario))
        return {
            h: NamespacedLibvirtd(
                h, ctx.testbed.ns(h), topo.addr(topo.MIGRATION_ADDR[h]), ctx.registry, ctx.run_dir, build
            )
            for h in topo.HYPERVISOR_HOSTS
        }

    def emulator(self) -> str | None:
        """The preflight's QEMU (a script that execs its argv, with its firmware directories,
        where it needs more than the binary), or the host's when the stack has no record."""
        build = self.drv._qemu()
        if build is None:
            return QEMU_BINARY
        return emulator_script(build, self.drv.ctx.registry.dir / "qemu-emulator")


class _LabLibvirt(_LocalLibvirt):
    """Where they are on a lab: the libvirtds of R1 and R2 over their URIs and the QEMU that
    hosts-setup deployed there."""

    def daemons(self) -> dict[str, Any]:
        """The run's own libvirtds of the release hosts-setup deployed (``LIBVIRT=<release>``:
        facts ``stack.libvirt.deployed``), else the hosts' own."""
        ctx = self.drv.ctx
        tb, registry = ctx.testbed, ctx.registry
        specs = {h: tb.inventory.host(h) for h in topo.HYPERVISOR_HOSTS}
        record = (self.drv.facts.get("stack") or {}).get("libvirt") or {}
        if not record.get("deployed"):
            return {h: LabLibvirtd(h, s.libvirt_uri or "", s.libvirt_peer_uri, registry) for h, s in specs.items()}
        build = LibvirtBuild.from_meta(record)
        mig = {h: str(ipaddress.ip_interface(s.migration_ipv4 or "").ip) for h, s in specs.items()}
        return {
            h: LabRunLibvirtd(h, tb, build, mig[h], s.libvirt_peer_uri or "", registry, ctx.run_dir)
            for h, s in specs.items()
        }

    def emulator(self) -> str | None:
        """The script hosts-setup wrote beside the QEMU release it deployed, or None for the
        hosts' own QEMU (their libvirtd's default)."""
        meta = (self.drv.facts.get("stack") or {}).get("qemu") or {}
        return meta.get("emulator") if meta.get("deployed") else None


class LibvirtDriver(Driver):
    """Live migration through libvirt, peer-to-peer between two libvirtds."""

    name = "kvm-libvirt"

    def __init__(self, ctx: RunContext, facts: dict[str, Any]) -> None:
        super().__init__(ctx, facts)
        self.lv = import_libvirt()
        self.accel = facts["accel"]
        self.accel_reason = facts["accel_reason"]
        self.domain = f"vrmig-{ctx.testbed.prefix}"
        #: the daemons' and QEMU's place: this machine's namespaces, or a lab's hosts
        self.site = (_LabLibvirt if ctx.testbed.remote else _LocalLibvirt)(self)
        self.daemons: dict[str, Any] = self.site.daemons()
        self._tails: list[Any] = []
        self.conns: dict[str, Any] = {}
        self._callbacks: list[tuple[Any, int]] = []
        self._events = _Jsonl(ctx.run_dir / LIBVIRT_EVENTS_JSONL)
        self._jobstats = _Jsonl(ctx.run_dir / LIBVIRT_JOBSTATS_JSONL)
        self._completed: dict[str, tuple[int, dict[str, Any]]] = {}
        self._completed_cv = threading.Condition()
        self._described: dict[str, Any] = {}
        self._effective_reader: threading.Thread | None = None
        from routers.guest import guest_image

        self.profile = profile_of(ctx.scenario.router)  # a router image the suite did not build
        self.boot = ProfileBoot(ctx, self.profile) if self.profile is not None else None
        self.image = guest_image(ctx.scenario.router) if self.profile is None else None

    # -- checks ----------------------------------------------------------------------------
    @classmethod
    def preflight(cls, scenario: Scenario) -> dict[str, Any]:
        """The QMP driver's checks (QEMU, router image, accelerator), plus the libvirtd of
        LIBVIRT= (fetched once if it is a release) and the Python binding — without side effects
        on the host.  ``stack`` gains ``libvirt`` beside ``qemu`` (docs/stack.md)."""
        from migrate.drivers.kvm.driver import KvmDriver

        libvirt = import_libvirt()
        build = libvirt_build(libvirt_spec(scenario))
        knobs.check_libvirt(scenario.to_dict(), build.version)
        facts = KvmDriver.preflight(scenario)
        lib = libvirt.getVersion()
        facts["libvirt"] = {
            "daemon": build.version,
            "library": f"{lib // 1_000_000}.{lib // 1000 % 1000}.{lib % 1000}",
            "binding": getattr(libvirt, "__version__", None) or _dist_version("libvirt-python"),
        }
        facts["stack"] = {**(facts.get("stack") or {}), "libvirt": build.to_meta()}
        return facts

    # -- events ----------------------------------------------------------------------------
    def _register_events(self, host: str, conn: Any) -> None:
        side = "src" if host == topo.HYPERVISOR_HOSTS[0] else "dst"

        def lifecycle(_c: Any, dom: Any, event: int, detail: int, _o: Any) -> None:
            data = {"domain": dom.name(), "event": LIFECYCLE.get(event, str(event)), "detail": detail}
            self._events.write({"t_ns": time.time_ns(), "side": side, "event": "lifecycle", "data": data})

        def iteration(_c: Any, dom: Any, n: int, _o: Any) -> None:
            data = {"domain": dom.name(), "iteration": n}
            self._events.write({"t_ns": time.time_ns(), "side": side, "event": "migration-iteration", "data": data})

        def completed(_c: Any, dom: Any, params: dict[str, Any], _o: Any) -> None:
            t_ns = time.time_ns()
            self._events.write({"t_ns": t_ns, "side": side, "event": "job-completed", "data": dict(params)})
            with self._completed_cv:
                self._completed[side] = (t_ns, dict(params))
                self._completed_cv.notify_all()

        for ev, cb in (
            (EVENT_LIFECYCLE, lifecycle),
            (EVENT_MIGRATION_ITERATION, iteration),
            (EVENT_JOB_COMPLETED, completed),
        ):
            self._callbacks.append((conn, conn.domainEventRegisterAny(None, ev, cb, None)))

    def _start_daemon(self, host: str) -> Any:
        ensure_event_loop(self.lv)
        self.ctx.recorder.action("libvirtd-start", host=host)
        conn = self.daemons[host].start(self.lv.open, self.ctx.abort)
        self.conns[host] = conn
        conn.setKeepAlive(5, 3)
        self._register_events(host, conn)
        self.ctx.recorder.action("libvirtd-ready", host=host, uri=self.daemons[host].uri)
        return conn

    # -- phases ----------------------------------------------------------------------------
    def _console(self, host: str) -> Path:
        """Where ``host``'s QEMU writes the serial console: the results directory, or on a lab
        host its run directory there, followed into the results directory as it grows."""
        tb = self.ctx.testbed
        return Path(tb.out_path(host, self.ctx.run_dir, console_log(host)))

    def _follow_console(self, host: str) -> None:
        """On a lab host: follow the console file into ``console-<host>.log`` here (``tail -F``
        under the guard, so it ends with the run)."""
        tail = self.ctx.testbed.follow_file(
            host, str(self._console(host)), self.ctx.registry, self.ctx.run_dir, console_log(host)
        )
        if tail is not None:
            self._tails.append(tail)

    def _xml(self) -> str:
        s = self.ctx.scenario
        from routers.guest import kernel_cmdline

        inv = self.ctx.testbed.inventory
        left, right = (inv.router[seg] for seg in topo.SEGMENTS)
        r1 = inv.host(topo.HYPERVISOR_HOSTS[0])
        emulator = self._emulator()
        extra = {} if emulator is None else {"emulator": emulator}
        if self.boot is not None:  # a profile's disk image: its overlay, seed and console
            sockets = self.boot.console_socket(topo.HYPERVISOR_HOSTS[0])
            vm = GuestVm(
                name=self.domain, accel=self.accel, mem_mib=s.mem_mib, vcpus=s.vcpus, kernel=None, initrd=None,
                cmdline="", console=self._console(topo.HYPERVISOR_HOSTS[0]), nic=s.nic,
                nics=tuple(GuestNic(tap=r1.taps[seg], mac=inv.router[seg].mac) for seg in topo.SEGMENTS),
                disks=self.boot.media().disks(), console_socket=Path(sockets[1]) if sockets is not None else None,
                firmware=self.boot.media().uefi(),
            )  # fmt: skip
            return domain_xml(vm, **extra)
        assert self.image is not None
        kernel, initrd = self.ctx.testbed.router_image(s.router, self.image.kernel, self.image.initrd)
        if s.fault == "guest-never-ready":
            initrd = self.ctx.registry.dir / "empty-initrd.img"  # fault: no init, the kernel panics
            initrd.write_bytes(b"")
        vm = GuestVm(
            name=self.domain,
            accel=self.accel,
            mem_mib=s.mem_mib,
            vcpus=s.vcpus,
            kernel=kernel,
            initrd=initrd,
            cmdline=kernel_cmdline(
                s.router,
                [left.ipv4, left.ipv6],
                [right.ipv4, right.ipv6],
                rib_routes=s.rib_routes,
                routing=routing.router_args(s),
                dirty_mb_s=s.dirty_mbps,
            ),
            console=self._console(topo.HYPERVISOR_HOSTS[0]),
            nic=s.nic,
            nics=tuple(GuestNic(tap=r1.taps[seg], mac=inv.router[seg].mac) for seg in topo.SEGMENTS),
        )
        return domain_xml(vm, **extra)

    def _qemu(self) -> QemuBuild | None:
        """The QEMU of the preflight's stack (None: no record, the host's)."""
        meta = (self.facts.get("stack") or {}).get("qemu")
        if not meta or "binary" not in meta:
            return None
        return QemuBuild(
            spec=meta["spec"], argv=tuple(meta["argv"]), version=meta["version"], release=meta["release"],
            source=meta["source"], binary=meta["binary"],
        )  # fmt: skip

    def _emulator(self) -> str | None:
        """The ``<emulator>`` of the router domain (None: the daemon's default QEMU)."""
        return self.site.emulator()

    def start_source(self) -> None:
        """Start R1's libvirtd, create the router domain there and wait for the guest's READY
        marker on its serial console (a profile's image: configured and forwarding,
        migrate.drivers.profile_boot)."""
        from routers.guest import READY_MARKER

        src = topo.HYPERVISOR_HOSTS[0]
        conn = self._start_daemon(src)
        xml = self._xml()
        (self.ctx.run_dir / "libvirt-domain.xml").write_text(xml)
        self.ctx.recorder.action("boot", host=src)
        self.daemons[src].register_domain(self.domain)
        self._follow_console(src)
        try:
            dom = conn.createXML(xml, 0)
        except self.lv.libvirtError as err:
            raise GuestError(f"libvirt on {src} could not start the router domain: {err}") from err
        pid = self.daemons[src].qemu_pid(self.domain)
        alive = (lambda: pid_alive(pid, None)) if pid is not None else (lambda: _active(dom))
        console = self.ctx.run_dir / console_log("R1")

        def wait_marker(marker: str, timeout_s: float) -> None:
            wait_for_marker(console, marker, timeout_s, alive=alive, abort=self.ctx.abort)

        if self.boot is not None:
            self.boot.wait_ready(src, alive, console, wait_marker)
        else:
            wait_marker(READY_MARKER, self.ctx.scenario.boot_timeout_s)
        self.ctx.recorder.action("router-ready", host=src)
        self._record_rss(dom, "ready")
        if self.ctx.scenario.dirty_mbps is not None:
            self.dirty_load = dirty.wait_load(console, dirty.LOAD_START_TIMEOUT_S, alive, self.ctx.abort)
            self.ctx.recorder.action("dirty-load-running", host=src, **self.dirty_load)

    def measure_dirty_rate(self) -> dict[str, Any]:
        """libvirt's dirty-rate measurement of the domain on R1 (migrate.model.dirty.measure_libvirt)."""
        conn = self.conns[topo.HYPERVISOR_HOSTS[0]]
        try:
            dom = conn.lookupByName(self.domain)
        except self.lv.libvirtError as err:
            return {"interface": "libvirt", "error": err.get_error_message() or str(err), "ended_ns": time.time_ns()}
        return dirty.measure_libvirt(dom, conn, self.lv, self.ctx.recorder.action, self.ctx.abort)

    def prepare_destination(self) -> None:
        """Start R2's libvirtd and have it probe the router domain's QEMU's capabilities now
        (otherwise the first incoming migration pays for it); R2's QEMU is created by libvirt
        during the migration; a profile's disk on hosts that share no storage is placed on R2
        first (its own overlay at the same path, which the incoming domain opens)."""
        dst = topo.HYPERVISOR_HOSTS[1]
        if self.boot is not None and not self.ctx.testbed.shares_storage:
            self.boot.media(dst)
        conn = self._start_daemon(dst)
        self.daemons[dst].register_domain(self.domain)  # created here by the incoming migration
        try:
            emulator = self._emulator()
            conn.getDomainCapabilities(emulator, "x86_64", "q35", "kvm" if self.accel == "kvm" else "qemu", 0)
        except self.lv.libvirtError as err:
            log_tail = self.daemons[dst].log_tail()
            raise DependencyError(f"libvirtd on {dst} cannot use QEMU: {err}; its log: {log_tail}") from err
        self.ctx.recorder.action("libvirtd-capabilities", host=dst)

    def _record_rss(self, dom: Any, when: str) -> None:
        """The source QEMU's resident memory as libvirt reports it (``virDomainMemoryStats``
        ``rss``: the QEMU process's RSS, on the embedded testbed and on a lab's host alike) into
        meta.json ``hypervisor.router_rss``, as the QMP driver records /proc's VmRSS; None with
        the reason when libvirt does not give it."""
        try:
            stats = dom.memoryStats()
        except self.lv.libvirtError as err:
            stats, why = {}, f"virDomainMemoryStats failed: {err}"
        else:
            why = "virDomainMemoryStats has no rss"
        kib = stats.get("rss") if isinstance(stats.get("rss"), int) else None
        entry: dict[str, Any] = {"qemu_rss_kib": kib, "source": "libvirt virDomainMemoryStats rss on R1"}
        if kib is None:
            entry["reason"] = why
        self._described.setdefault("router_rss", {})[when] = entry
        self.ctx.recorder.action("router-rss", host="R1", when=when, qemu_rss_kib=kib)

    def migrate(self) -> MigrationOutcome:
        """migrateToURI3 (in a worker thread) while the job statistics are polled; block until
        the job completes, fails or times out."""
        s, rec = self.ctx.scenario, self.ctx.recorder
        src, dst = topo.HYPERVISOR_HOSTS
        try:
            dom = self.conns[src].lookupByName(self.domain)
            if s.downtime_limit_ms is not None:
                dom.migrateSetMaxDowntime(s.downtime_limit_ms, 0)
            sockets = self.boot.console_socket(dst) if self.boot is not None else None
            dest_xml = with_console(
                dom.XMLDesc(XML_MIGRATABLE), self._console(dst), Path(sockets[1]) if sockets is not None else None
            )
        except self.lv.libvirtError as err:
            raise MigrationError(f"libvirt on {src} cannot prepare the migration: {err}") from err
        self._record_rss(dom, "migration_start")
        self._follow_console(dst)
        dst_addr = self.ctx.testbed.inventory.host(dst).migration_ipv4 or topo.MIGRATION_ADDR[dst]
        migrate_uri = f"tcp://{topo.addr(dst_addr)}"
        peer_uri = self.daemons[dst].peer_uri
        disks = None if self.boot is None else ("shared" if self.ctx.testbed.shares_storage else "copied")
        flags = lf.migrate_flags(s, disks=disks)
        params = lf.migrate_params(s, migrate_uri, dest_xml)
        self._describe_migration(dom, peer_uri, flags, params)
        result: dict[str, Any] = {}

        def call() -> None:
            try:
                dom.migrateToURI3(peer_uri, params, flags)
                result["ok"] = True
            except self.lv.libvirtError as err:
                result["error"] = err.get_error_message() or str(err)
            finally:
                result["t_ns"] = time.time_ns()

        rec.action(
            "migrate", side="src", uri=peer_uri, migrate_uri=migrate_uri, flags=lf.flag_names(flags), mode=s.mode
        )
        worker = threading.Thread(target=call, name="libvirt-migrate", daemon=True)
        worker.start()
        reason = self._poll(dom, worker, time.monotonic() + s.migrate_timeout_s)
        worker.join()
        if self._effective_reader is not None:
            self._effective_reader.join(EFFECTIVE_READ_TIMEOUT_S)
            self._check_effective(result["t_ns"])
        status = "completed" if result.get("ok") else "failed"
        self._events.write(
            {"t_ns": result["t_ns"], "side": "src", "event": "migrate-api-returned",
             "data": {"status": status, "error": result.get("error")}}
        )  # fmt: skip
        if not result.get("ok"):
            self._record_failed_job(dom)
            if reason:
                raise MigrationError(f"{reason} (libvirt: {result.get('error')})")
            raise MigrationError(f"libvirt refused or failed the migration: {result.get('error')}")
        return MigrationOutcome(completed=True, hypervisor=self._completed_stats())

    def _poll(self, dom: Any, worker: threading.Thread, deadline: float) -> str | None:
        """Sample the running job until the worker returns; abort the job on timeout or
        interruption and return why (None if it ended by itself)."""
        s, rec = self.ctx.scenario, self.ctx.recorder
        postcopy_started = False
        reason: str | None = None
        next_t = time.monotonic()
        while worker.is_alive():
            t_ns = time.time_ns()
            try:
                stats = dom.jobStats(0)
            except self.lv.libvirtError as err:
                log.debug("jobStats: %s", err)
                stats = {}
            if stats:
                self._jobstats.write({"t_ns": t_ns, "side": "src", "stats": stats})
                # QEMU's migration is under way (libvirt set its parameters before the migrate
                # command; its job begins earlier, while the destination is being prepared)
                streaming = lf.progress_reply(stats)["status"] == "active" and int(stats.get("memory_total", 0)) > 0
                if streaming and self._effective_reader is None:  # in a thread: the polling never waits on it
                    self._effective_reader = threading.Thread(
                        target=self._read_effective, args=(dom,), name="libvirt-knobs", daemon=True
                    )
                    self._effective_reader.start()
                if self.ctx.faults is not None:
                    self.ctx.faults.on_progress(lf.progress_reply(stats))
            self.daemons[topo.HYPERVISOR_HOSTS[1]].qemu_pid(self.domain)
            iteration = int(stats.get("memory_iteration", 0))
            if s.postcopy and not postcopy_started and iteration >= lf.POSTCOPY_AFTER_ITERATION:
                rec.action("migrate-start-postcopy", side="src")
                postcopy_started = True
                try:
                    dom.migrateStartPostCopy(0)
                except self.lv.libvirtError as err:  # e.g. the migration completed meanwhile
                    rec.action("migrate-start-postcopy-refused", side="src", error=err.get_error_message())
            if reason is None and time.monotonic() > deadline:
                reason = f"migration did not complete within {s.migrate_timeout_s:.0f} s"
                self._abort_job(dom, "timeout")
            if reason is None and self.ctx.abort and self.ctx.abort():
                reason = "interrupted during migration"
                self._abort_job(dom, "interrupted")
            next_t += POLL_INTERVAL_S
            time.sleep(max(0.0, next_t - time.monotonic()))
        return reason

    def _read_effective(self, dom: Any) -> None:
        """QEMU's migration parameters and capabilities as libvirt set them for this job, read
        from the source QEMU once it reports RAM figures (libvirt resets them when the job
        ends): query-migrate-parameters, -capabilities, query-migrate and query-version (the
        QEMU that runs, whichever libvirt reports as its hypervisor) through libvirt's
        monitor passthrough (``virDomainQemuMonitorCommand``, a query job, which the outgoing
        migration job admits; libvirt marks the domain tainted 'custom-monitor').  The
        destination cannot be asked: its incoming migration job admits no other job until it
        ends, and libvirt then resets the parameters there too.  meta.json
        ``hypervisor.libvirt.qemu_effective`` has the replies and their time,
        ``hypervisor.knobs_effective`` the knobs' values (None, with ``knobs_effective_error``,
        when the source did not answer)."""
        import libvirt_qemu

        replies: dict[str, Any] = {}
        try:
            for key, q in (("parameters", "query-migrate-parameters"), ("capabilities", "query-migrate-capabilities"),
                           ("migrate", "query-migrate"), ("version", "query-version")):  # fmt: skip
                reply = json.loads(libvirt_qemu.qemuMonitorCommand(dom, json.dumps({"execute": q}), 0))
                replies[key] = reply.get("return")
        except (self.lv.libvirtError, ValueError) as err:
            self._described["knobs_effective_error"] = f"source QEMU: {err}"
            log.warning("QEMU's effective migration parameters: %s", err)
        self._described["qemu_effective"] = {"src": replies, "t_ns": time.time_ns()}
        self._described["knobs_effective"] = (
            knobs.effective(replies["parameters"], replies.get("capabilities"))
            if isinstance(replies.get("parameters"), dict)
            else None
        )

    def _check_effective(self, api_returned_ns: int) -> None:
        """QEMU's values count only if they were read before the job ended (libvirt then resets them)."""
        read = self._described.get("qemu_effective") or {}
        if self._described.get("knobs_effective") is not None and read.get("t_ns", 0) > api_returned_ns:
            self._described["knobs_effective"] = None
            self._described["knobs_effective_error"] = "read after the migration job ended (libvirt resets them then)"

    def _abort_job(self, dom: Any, why: str) -> None:
        self.ctx.recorder.action("migrate_cancel", side="src", reason=why)
        try:
            dom.abortJob()
        except self.lv.libvirtError as err:
            log.warning("abortJob failed: %s", err)

    def _write_jobinfo(self, t_ns: int, source: str, stats: dict[str, Any]) -> None:
        from migrate.core.atomic import write_json

        write_json(self.ctx.run_dir / LIBVIRT_JOBINFO_JSON, {"t_ns": t_ns, "source": source, "stats": stats})

    def _completed_stats(self) -> dict[str, Any]:
        """The completed job's statistics: the source's job-completed event (waited for), else
        the destination's completed-job record."""
        with self._completed_cv:
            self._completed_cv.wait_for(lambda: "src" in self._completed, timeout=JOB_EVENT_TIMEOUT_S)
            got = self._completed.get("src")
        if got is not None:
            self._write_jobinfo(got[0], "job-completed-event", got[1])
            return got[1]
        log.warning(
            "no job-completed event from the source within %.0f s: reading the destination", JOB_EVENT_TIMEOUT_S
        )
        try:
            dom = self.conns[topo.HYPERVISOR_HOSTS[1]].lookupByName(self.domain)
            stats = dom.jobStats(JOB_STATS_COMPLETED)
        except self.lv.libvirtError as err:
            log.warning("destination completed-job statistics: %s", err)
            return {}
        self._write_jobinfo(time.time_ns(), "destination", stats)
        return stats

    def _record_failed_job(self, dom: Any) -> None:
        """After a failed migration the domain is still on the source: keep its failed-job record."""
        try:
            stats = dom.jobStats(JOB_STATS_COMPLETED)
        except self.lv.libvirtError as err:
            log.debug("failed-job statistics: %s", err)
            return
        if stats.get("type", 0) != 0:  # 0 = no job: refused before one started
            self._write_jobinfo(time.time_ns(), "source-failed-job", stats)

    def _describe_migration(self, dom: Any, peer_uri: str, flags: int, params: dict[str, Any]) -> None:
        max_downtime = None
        with contextlib.suppress(self.lv.libvirtError, AttributeError):
            max_downtime = dom.migrateGetMaxDowntime(0)
        (self.ctx.run_dir / "libvirt-domain-dest.xml").write_text(params.get(lf.PARAM_DEST_XML, ""))
        self._described |= {
            "migrate_flags": lf.flag_names(flags),
            "migrate_params": {k: v for k, v in params.items() if k != lf.PARAM_DEST_XML},
            "dest_xml": "libvirt-domain-dest.xml",
            "max_downtime_ms": max_downtime,
            "peer_uri": peer_uri,
        }

    def verify(self) -> dict[str, Any]:
        """Where the domain is now, as each libvirtd reports it ("absent" = not defined there)."""
        out: dict[str, Any] = {}
        for side, host in zip(("src", "dst"), topo.HYPERVISOR_HOSTS, strict=True):
            out[f"{side}_status"] = self._state(host)
        out["domain"] = self.domain
        return out

    def _state(self, host: str) -> str:
        conn = self.conns.get(host)
        if conn is None:
            return "no daemon"
        try:
            return STATES.get(conn.lookupByName(self.domain).state()[0], "unknown")
        except self.lv.libvirtError as err:
            if err.get_error_code() == self.lv.VIR_ERR_NO_DOMAIN:
                return "absent"
            return f"unknown ({err.get_error_message()})"

    def fault_targets(self) -> dict[str, Any]:
        """The QEMU processes libvirt runs, killed mid-migration by chaos runs."""
        from migrate.model.faults import kill_pid

        src, dst = (self.daemons[h] for h in topo.HYPERVISOR_HOSTS)
        return {
            "dst-qemu-dies": kill_pid(lambda: dst.qemu_pid(self.domain)),
            "src-qemu-dies": kill_pid(lambda: src.qemu_pid(self.domain)),
        }

    def source_running(self) -> bool:
        """The domain still runs under R1's libvirtd (libvirt resumed it after the failure)."""
        return self._state(topo.HYPERVISOR_HOSTS[0]) == "running"

    def pause(self) -> None:
        """Pause the router domain on R1 (``virDomainSuspend``: returns once libvirt has paused it)."""
        self._suspend_or_resume("suspend")

    def resume(self) -> None:
        """Resume the paused router domain on R1 (``virDomainResume``)."""
        self._suspend_or_resume("resume")

    def _suspend_or_resume(self, call: str) -> None:
        src = topo.HYPERVISOR_HOSTS[0]
        try:
            getattr(self.conns[src].lookupByName(self.domain), call)()
        except self.lv.libvirtError as err:
            raise GuestError(f"libvirt on {src} could not {call} the router domain: {err}") from err

    def describe(self) -> dict[str, Any]:
        """Daemon URIs and host UUIDs, the domain, the migration flags and parameters."""
        lv: dict[str, Any] = {"hosts": {}, **self._described}
        for host, d in self.daemons.items():
            lv["hosts"][host] = {"uri": d.uri, "peer_uri": d.peer_uri, "host_uuid": d.host_uuid}
            with contextlib.suppress(Exception):
                conn = self.conns[host]
                lv["hosts"][host]["daemon_version"] = conn.getLibVersion()
                lv["hosts"][host]["hypervisor_version"] = conn.getVersion()
        with contextlib.suppress(OSError, ValueError):
            lv["domain"] = domain_facts((self.ctx.run_dir / "libvirt-domain.xml").read_text())
        effective = lv.pop("knobs_effective", None)
        effective_error = lv.pop("knobs_effective_error", None)
        if effective is None and not effective_error:
            effective_error = (
                "the migration job was never seen running" if self._effective_reader is None
                else f"QEMU's parameters were not read within {EFFECTIVE_READ_TIMEOUT_S:.0f} s"
            )  # fmt: skip
        return {
            "libvirt": {**self.facts.get("libvirt", {}), **lv},
            "knobs_effective": effective,
            "knobs_effective_dst": None,
            "knobs_effective_dst_why": "libvirt admits no query of the destination QEMU during its incoming "
            "migration job, and resets its parameters when the job ends",
            **({"knobs_effective_error": effective_error} if effective_error else {}),
            "accel": self.accel,
            "accel_reason": self.accel_reason,
        }

    def stop(self) -> None:
        """Destroy the domain wherever it runs, close the connections, stop both daemons by PID;
        the registry then kills any QEMU left (by PID) and removes the private trees."""
        for conn in self.conns.values():
            with contextlib.suppress(self.lv.libvirtError):
                conn.lookupByName(self.domain).destroy()
        for conn, cb_id in self._callbacks:
            with contextlib.suppress(self.lv.libvirtError):
                conn.domainEventDeregisterAny(cb_id)
        self._callbacks.clear()
        for conn in self.conns.values():
            with contextlib.suppress(self.lv.libvirtError):
                conn.close()
        self.conns.clear()
        for d in self.daemons.values():
            d.stop()
        for t in self._tails:
            t.stop()
        self._events.close()
        self._jobstats.close()


def _active(dom: Any) -> bool:
    try:
        return bool(dom.isActive())
    except Exception:  # libvirt.libvirtError: the domain is gone
        return False


def _dist_version(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None
