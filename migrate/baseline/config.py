"""One baseline configuration (hv, nic, routers, load): build the testbed, start the routers and
the neighbour, measure every point (sweep, then the NDR search), tear everything down.

Files: ``configs/<config>/`` (router and QEMU output, consoles, the load flow's output) and
``points/<config>/<point>/`` (one directory per measurement)."""

from __future__ import annotations

import logging
import signal
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crosstraffic.backend import GenRequest, SinkRequest
from migrate.baseline.bed import BaselineBed, netns_runner, ping_until
from migrate.baseline.endhost import EndHost
from migrate.baseline.plan import Slot, check_slot0_matches_testbed, slot
from migrate.baseline.point import PointContext, run_point
from migrate.baseline.routers import BusyLoop, CtRouter, NsRouter, VmRouter
from migrate.baseline.spec import LOAD_FRAME_BYTES, BaselineSpec, Config, PointKey
from migrate.core import cpustat
from migrate.core.errors import GuestError, Interrupted
from migrate.core.procs import Proc
from migrate.core.progress import Progress
from migrate.core.registry import Registry
from migrate.core.rundir import POINT_JSON
from migrate.core.sighold import Abort
from migrate.experiment.instruments import BUILTIN, IRTT_PORT, READY_TIMEOUT_S, TRAFFIC_PORT
from migrate.testbed import topology as topo
from migrate.testbed.builder import TestbedBuilder, new_prefix

log = logging.getLogger(__name__)

Router = NsRouter | VmRouter | CtRouter
#: the guest's console shell answering once the router VM is READY
SHELL_TIMEOUT_S = 30.0


class _Pending(Exception):
    """Raised by a dry pass at the first point that still has to be measured."""


@dataclass(frozen=True)
class ConfigJob:
    """What one configuration's run is made from: the baseline, the configuration, the testbed's
    facts, the run's directory and abort flag, the configuration's meta.json entry, the progress."""

    spec: BaselineSpec
    config: Config
    facts: dict[str, Any]
    run_dir: Path
    abort: Abort
    info: dict[str, Any]
    progress: Progress | None = None


class ConfigRun:
    """Everything one configuration creates, and its measurement loop."""

    def __init__(self, job: ConfigJob) -> None:
        spec, config, run_dir, progress = job.spec, job.config, job.run_dir, job.progress
        self.spec, self.config, self.facts = spec, config, job.facts
        self.progress = progress or Progress("baseline", spec.sweep_points(config), "points", enabled=False)
        self.counted = 0  # points (sweep and NDR) this configuration has advanced the progress by
        self.ndr_trials = 0
        self.run_dir, self.abort, self.info = run_dir, job.abort, job.info
        self.out = run_dir / "configs" / config.name
        self.points_dir = run_dir / "points" / config.name
        self.registry = Registry(new_prefix(), run_dir=str(run_dir.resolve()))
        self.slots = [slot(k) for k in range(config.routers)]
        self.nb_slot: Slot | None = slot(config.routers) if config.load != "none" else None
        self.routers: list[Router] = []
        self.neighbour: list[Router | BusyLoop] = []
        self.procs: list[Proc] = []
        self.done = 0
        self.dry = False
        self._ct_dir: Path | None = None
        self.endhost: EndHost | None = None
        self.peer: EndHost | None = None  # ROLE=vm-vm: router 1, the receiving end host
        self.tb: Any = None  # the built testbed (migrate.testbed.builder.Testbed)

    # -------------------------------------------------------------- set-up
    def _ct_work(self) -> Path:
        """HV=criu: the directory of this configuration's rootfs copies (a tmpfs if there is one,
        as for the CRIU driver), registered before it is created."""
        if self._ct_dir is None:
            from migrate.drivers.criu.driver import work_root

            path = work_root(self.registry.dir.parent) / f"vrmig-{self.registry.prefix}-ct"
            self.registry.add_path(path)
            path.mkdir(mode=0o700)
            self._ct_dir = path
        return self._ct_dir

    def _make_router(self, bed: BaselineBed, s: Slot) -> Router:
        if self.config.hv == "none":
            ns = bed.add_router_netns(s)
            return NsRouter(s, ns, self.spec.router, self.registry, self.out)
        if self.config.hv == "criu":
            return CtRouter(s, bed.tb.ns("R1"), self.spec.router, self.registry, self.out, self._ct_work())
        if self.config.hv == "xen":
            from migrate.baseline.xen import XenRouter

            return XenRouter(
                s, bed.add_router_taps(s), r1_ns=bed.tb.ns("R1"), prefix=self.registry.prefix, profile=self.spec.router,
                nic=self.config.nic, accel=self.facts["accel"], mem_mib=self.spec.mem_mib, registry=self.registry,
                out_dir=self.out,
            )  # fmt: skip
        return VmRouter(
            s, bed.add_router_taps(s), r1_ns=bed.tb.ns("R1"), prefix=self.registry.prefix, profile=self.spec.router,
            nic=self.config.nic, accel=self.facts["accel"], mem_mib=self.spec.mem_mib, registry=self.registry,
            out_dir=self.out, qemu=tuple(self.facts.get("qemu_argv") or ("qemu-system-x86_64",)),
        )  # fmt: skip

    def _start_routers(self, routers: list[Router]) -> None:
        for r in routers:
            if isinstance(r, NsRouter):
                self.abort.armed = False  # the chroot script's daemons are registered once it exits
                try:
                    r.start()
                finally:
                    self.abort.armed = True
                if self.abort():
                    raise Interrupted("interrupted while starting the routers")
            elif isinstance(r, CtRouter):
                r.start(self.spec.boot_timeout_s, abort=self.abort)
            else:
                r.start()
        for r in routers:
            if isinstance(r, VmRouter) or type(r).__name__ == "XenRouter":
                r.wait_ready(self.spec.boot_timeout_s, abort=self.abort)

    def _proc(self, what: str, argv: list[str], role: str, **kw: Any) -> Proc:
        p = Proc(what, argv, self.registry, self.out, netns=self.registry.prefix + "-" + role, **kw).start()
        self.procs.append(p)
        return p

    def _start_servers(self) -> None:
        from probes.irtt import server_argv, wait_irtt_server

        d = topo.host("D")
        for ip in self.spec.ips:
            addr = topo.addr(d.ipv4 if ip == 4 else d.ipv6)
            srv = self._proc(f"irtt-server-ip{ip}", server_argv(addr, IRTT_PORT), "D")
            wait_irtt_server(self.registry.prefix + "-D", addr, IRTT_PORT, READY_TIMEOUT_S, pid=srv.pid,
                             abort=lambda s=srv: not s.alive())  # fmt: skip

    def _prime(self, slots: list[Slot]) -> None:
        """Ping through every router (both families in use): neighbours resolved, forwarding seen."""

        def ping(role: str, dst: str) -> None:
            ping_until(self._ping_runner(role), f"{self.registry.prefix}-{role}", dst, abort=self.abort)

        for s in slots:
            for ip in self.spec.ips:
                ping(s.source_role, s.sink_addr(ip))
        d = topo.host("D")
        for ip in self.spec.ips:
            ping("C", topo.addr(d.ipv4 if ip == 4 else d.ipv6))

    def _ping_runner(self, role: str) -> Callable[[list[str]], int]:
        """How a command runs on ``role`` (here: in its namespace)."""
        return netns_runner(f"{self.registry.prefix}-{role}")

    def _start_load_flow(self, s: Slot) -> None:
        """LOAD=smallpkts: the neighbour forwards 64 B frames at LOAD_RATE for the whole configuration."""
        sink = self._proc("load-sink", BUILTIN.sink_argv(SinkRequest(port=TRAFFIC_PORT, bind=s.sink_addr(4))),
                          s.sink_role, stdout_name="load-sink.json")  # fmt: skip
        sink.wait_for("READY", READY_TIMEOUT_S)
        load = GenRequest(dst=s.sink_addr(4), port=TRAFFIC_PORT, rate_bps=self.spec.load_rate_bps,
                          frame_bytes=LOAD_FRAME_BYTES, duration_s=0)  # fmt: skip
        self._proc("load-gen", BUILTIN.gen_argv(load),
                   s.source_role, stdout_name="load-gen.json")  # fmt: skip

    def _busy_loop(self) -> BusyLoop:
        """LOAD=cpu: HV=none spins in the neighbour's namespace, HV=criu inside the neighbour
        container, HV=kvm in R1 (the guest has no agent to run one)."""
        assert self.nb_slot is not None
        nb = self.neighbour[0]
        if isinstance(nb, CtRouter):
            return BusyLoop(None, self.registry, self.out, enter_pid=nb.pid)
        role = "R1" if self.config.hv == "kvm" else self.nb_slot.router_role
        return BusyLoop(f"{self.registry.prefix}-{role}", self.registry, self.out)

    def cpu_pids(self) -> dict[str, int]:
        """Processes whose CPU time each point records: routers, and the neighbour with 'nb-'."""
        pids: dict[str, int] = {}
        for r in self.routers:
            pids.update(r.pids())
        for n in self.neighbour:
            pids.update({f"nb-{k}": v for k, v in n.pids().items()})
        return pids

    def setup(self) -> PointContext:
        """Testbed, routers, neighbour, probes; returns what the points share."""
        check_slot0_matches_testbed()
        self.registry.open()
        self.out.mkdir(parents=True, exist_ok=True)
        self.info["prefix"] = self.registry.prefix
        log.info("[%s] building testbed %s", self.config.name, self.registry.prefix)
        builder = TestbedBuilder(self.registry)
        builder.build()
        self.tb = builder.tb  # an end host entered by PID runs its tools through it, in R1
        bed = BaselineBed(builder)
        for s in self.slots:
            bed.add_hosts(s)
        if self.nb_slot is not None and self.config.load == "smallpkts":
            bed.add_hosts(self.nb_slot)
        self.routers = [self._make_router(bed, s) for s in self.slots]
        if self.nb_slot is not None:
            self.neighbour.append(self._make_router(bed, self.nb_slot))
        log.info("[%s] starting %d router(s)%s", self.config.name, len(self.routers),
                 f" and a neighbour (LOAD={self.config.load})" if self.neighbour else "")  # fmt: skip
        if self.config.role != "router":
            for r in self.routers:
                if isinstance(r, VmRouter) or type(r).__name__ == "XenRouter":
                    r.shell = True  # type: ignore[union-attr]
        self._start_routers([*self.routers, *self.neighbour])  # type: ignore[list-item]
        if self.config.role != "router":
            self.endhost = self._endhost(self.routers[0])
        if self.config.role == "vm-vm":
            assert self.endhost is not None
            self.peer = self._endhost(self.routers[1])
            self.endhost.route_to(self.peer)
            self.peer.route_to(self.endhost)
        self.info["routers"] = [r.describe() for r in self.routers]
        self.info["neighbour"] = [n.describe() for n in self.neighbour if not isinstance(n, BusyLoop)]
        self._start_servers()
        self._prime(self.slots + ([self.nb_slot] if self.nb_slot and self.config.load == "smallpkts" else []))
        if self.config.load == "cpu":
            busy = self._busy_loop()
            busy.start()
            self.neighbour.append(busy)
        if self.config.load == "smallpkts":
            assert self.nb_slot is not None
            self._start_load_flow(self.nb_slot)
        return PointContext(
            tb=builder.tb, registry=self.registry, slots=self.slots, duration_s=self.spec.duration_s,
            probe_ms=self.spec.probe_ms, cpu_snapshot=lambda: cpustat.snapshot(self.cpu_pids()),
            load_slot=self.nb_slot if self.config.load == "smallpkts" else None, abort=self.abort,
            endhost=self.endhost, peer=self.peer,
        )  # fmt: skip

    def _endhost(self, router: Router) -> EndHost:
        """ROLE=vm-tx/vm-rx/vm-vm: the end host in ``router`` (router 0; vm-vm: and router 1): its
        console shell (HV=kvm; HV=xen: the domU's, relayed by dom0), its container (HV=criu) or its
        namespace (HV=none, the bare host)."""
        if isinstance(router, NsRouter):
            pid = router.daemons[0][0] if router.daemons else None
            return EndHost(self.config.role, router.slot, self.registry, netns=router.ns, ns_pid=pid)
        if isinstance(router, CtRouter):
            if router.pid is None:
                raise GuestError(f"ROLE={self.config.role}: the router container has no init process")
            return EndHost(self.config.role, router.slot, self.registry, enter_pid=router.pid, host=(self.tb, "R1"))
        if type(router).__name__ == "XenRouter":
            shell = router.connect_shell(SHELL_TIMEOUT_S, abort=self.abort)  # type: ignore[union-attr]
            return EndHost(self.config.role, router.slot, self.registry, shell=shell)
        if not isinstance(router, VmRouter) or router.console_socket is None or router.proc is None:
            raise GuestError(f"ROLE={self.config.role} needs HV=none, kvm or criu (got {self.config.hv})")
        from migrate.drivers.guest_shell import GuestShell

        proc = router.proc
        shell = GuestShell.connect(router.console_socket, timeout_s=SHELL_TIMEOUT_S, alive=proc.alive, abort=self.abort)
        return EndHost(self.config.role, router.slot, self.registry, shell=shell)

    # -------------------------------------------------------------- measurement
    def _healthy(self) -> None:
        dead = [f"router {r.slot.k}" for r in self.routers if not r.alive()]
        dead += [f"neighbour {type(n).__name__}" for n in self.neighbour if not n.alive()]
        dead += [p.what for p in self.procs if not p.alive()]
        if dead:
            raise GuestError(f"{', '.join(dead)} stopped during the measurements")

    def measure(self, ctx: PointContext | None, key: PointKey) -> float | None:
        """Measure ``key`` unless a finished point.json exists (RESUME); return its loss ratio."""
        from analysis.baseline.points import analyse_point

        point_dir = self.points_dir / key.name
        res = analyse_point(point_dir) if (point_dir / POINT_JSON).exists() else None
        if not self.dry and key.phase == "ndr":  # NDR trials: known only once the search schedules them
            self.ndr_trials += 1
            self.progress.add_total(1)
        if res is None or res[0]["status"] != "ok":
            if self.dry:
                raise _Pending(key.name)
            self._healthy()
            from migrate.baseline.spec import rate_text

            log.info("[%s] %s rep %d: IPv%d %d B at %s per router", self.config.name, key.phase, key.rep, key.ip,
                     key.frame_bytes, rate_text(key.rate_bps))  # fmt: skip
            assert ctx is not None
            self.progress.start(f"{self.config.name} {key.name}")
            run_point(ctx, key, point_dir)
            res = analyse_point(point_dir)
            self.progress.finish(res is not None and res[0]["status"] == "ok")
            self.counted += 1
            self.done += 1
        elif not self.dry:
            self.progress.skip()
            self.counted += 1
        return None if res is None else res[0]["loss_ratio"]

    def unfinished(self) -> int:
        """Points this configuration has not advanced the progress by (all of them when it was
        found finished on resume; the rest when it failed)."""
        return self.spec.sweep_points(self.config) + self.ndr_trials - self.counted

    def _ndr(
        self, ctx: PointContext | None, rep: int, ip: int, size: int, sweep_losses: dict[int, float | None]
    ) -> None:
        from analysis.baseline.ndr import ndr_next

        trials = [(r, loss) for r, loss in sweep_losses.items() if loss is not None and r > 0]
        hi = self.spec.ndr_hi_bps
        assert hi is not None
        while (rate := ndr_next(trials, hi, precision=self.spec.ndr_precision)) is not None:
            loss = self.measure(ctx, PointKey(self.config, ip, size, rate, rep, phase="ndr"))
            if loss is None:  # a failed trial: the search cannot continue reliably
                log.warning("[%s] NDR search IPv%d %d B rep %d stopped: trial at %d bit/s failed",
                            self.config.name, ip, size, rep, rate)  # fmt: skip
                return
            trials.append((rate, loss))

    def _loop(self, ctx: PointContext | None) -> None:
        for rep in range(1, self.spec.reps + 1):
            losses: dict[tuple[int, int], dict[int, float | None]] = {}
            for key in self.spec.sweep(self.config, rep):
                losses.setdefault((key.ip, key.frame_bytes), {})[key.rate_bps] = self.measure(ctx, key)
            if self.spec.search == "ndr":
                for (ip, size), sweep in losses.items():
                    self._ndr(ctx, rep, ip, size, sweep)

    def finished(self) -> bool:
        """Every point (and NDR trial) already has an ``ok`` point.json (RESUME): nothing to build."""
        self.dry = True
        try:
            self._loop(None)
            return True
        except _Pending:
            return False
        finally:
            self.dry = False

    def execute(self) -> None:
        """Set up, measure everything, tear down (always)."""
        if self.finished():
            log.info("[%s] every point is already measured", self.config.name)
            self.info["points_measured"] = 0
            return
        try:
            ctx = self.setup()
            self._loop(ctx)
            self.info["points_measured"] = self.done
        finally:
            self.teardown()

    def teardown(self) -> None:
        """Stop every process we started (by PID), then remove the namespaces."""
        self.abort.armed = False
        for end in (self.endhost, self.peer):
            if end is not None:
                end.close()
        for p in reversed(self.procs):
            if p.alive():
                p.stop(signal.SIGINT if p.what.startswith("irtt") else signal.SIGTERM)
        for r in [*self.neighbour, *self.routers]:
            try:
                r.stop()
            except OSError as err:
                log.warning("stopping %s: %s", type(r).__name__, err)
        problems = self.registry.teardown()
        if problems:
            self.info["teardown_problems"] = problems
            log.error("teardown problems: %s", "; ".join(problems))
        if (self.out / "load-sink.json").exists():
            self.info["load_flow_files"] = ["load-gen.json", "load-sink.json"]
        self.abort.armed = True
