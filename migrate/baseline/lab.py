"""``make baseline TESTBED=lab.toml``: the forwarding baseline on a lab's hosts, reached over SSH.

A lab configuration measures one router on R1, started by the lab form of its hypervisor's
migration driver (the same QEMU, container or nested Xen host that ``make migrate TESTBED=``
starts there, never migrated), with the points of :mod:`migrate.baseline.point` run on the lab's
own hosts: vrsink on B, vrgen on A, irtt C -> D, R1's CPU read on R1
(:func:`migrate.core.cpustat.remote_argv`), the sinks' drain read from B's counters, and each
point's clock offsets of A, B and C measured at its end (the one-way delay and the RTT window
combine their clocks; ``analysis.baseline.points`` corrects them).

HV=none is the classical Linux router on R1 itself (:mod:`migrate.baseline.labnone`).  What needs
the embedded testbed's own switch is refused before anything starts, one line each: ROUTERS above
1, LOAD and ROLE=vm-vm (they add end hosts, a neighbour router or a second router), and whatever
a lab migration run refuses for the same hypervisor (:func:`migrate.experiment.place.lab_supports`).

ROLE=vm-tx/vm-rx make the router on R1 the end host (:meth:`LabConfigRun._endhost`), PROTO=tcp
runs vrtcp on the lab's hosts; the tools' traces are fetched with each point."""

from __future__ import annotations

import contextlib
import json
import logging
import signal
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from migrate.baseline.config import SHELL_TIMEOUT_S, ConfigJob, ConfigRun
from migrate.baseline.endhost import EndHost
from migrate.baseline.plan import check_slot0_matches_testbed
from migrate.baseline.point import PointContext
from migrate.baseline.spec import BaselineSpec, Config
from migrate.core import cpustat
from migrate.core.errors import ConfigError, GuestError, VrmigError
from migrate.core.procs import ProcessError
from migrate.experiment.instruments import IRTT_PORT, READY_TIMEOUT_S
from migrate.model.scenario import Scenario
from migrate.testbed import topology as topo

log = logging.getLogger(__name__)

#: meta.json notes of a lab baseline (beside the embedded baseline's)
NOTES = {
    "lab": (
        "TESTBED=: vrgen on A, vrsink on B, irtt C -> D and the router on R1 are the lab's hosts, reached over SSH; "
        "cpu_host and cpu_softirq are R1's as its SSH login reads /proc (on a Xen host: dom0's, not Xen's), cpu_gen "
        "is A's generator's own"
    ),
    "lab_clock": (
        "owd_median_ms subtracts B's clock offset minus A's (each point measures A, B and C at its end, "
        "round-trip bounded over SSH); owd_uncertainty_ms is the sum of their bounds; the RTT window is moved "
        "onto C's clock the same way"
    ),
    "lab_generator": (
        "generator_capability is null on a lab: GEN_CHECK measures this machine's generator, not A's; "
        "gen_limited still flags points whose offered rate fell short"
    ),
}


@dataclass
class LabPlan:
    """What a lab baseline checked before anything started: the inventory and its preflight
    check, and each hypervisor's lab driver class and facts."""

    testbed: Path
    inv: Any  # migrate.testbed.inventory.Inventory
    check: dict[str, Any]
    #: hv -> (its lab driver class, None for HV=none; the facts of its preflight)
    drivers: dict[str, tuple[type | None, dict[str, Any]]] = field(default_factory=dict)

    def describe(self) -> dict[str, Any]:
        """meta.json ``lab``: the inventory and what each hypervisor's preflight found."""
        return {
            "inventory": str(self.testbed),
            "drivers": {
                hv: {"class": cls.__name__ if cls else "migrate.baseline.labnone.LabNsRouter", **facts}
                for hv, (cls, facts) in self.drivers.items()
            },
        }

    def preflight(self) -> tuple[dict[str, Any], dict[str, Any] | None]:
        """The baseline's facts and generator capability: the lab's accelerator only (this
        machine's router image and generator are not what the lab's hosts run, see
        ``NOTES["lab_generator"]``); everything else was checked by :func:`plan`."""
        return {"router_image": None, "accel": lab_accel(self)}, None

    def add_meta(self, meta: dict[str, Any]) -> None:
        """A new lab baseline's meta.json: ``lab``, ``lab_check`` and the lab's notes."""
        meta["lab"] = self.describe()
        meta["lab_check"] = self.check
        meta["notes"].update(NOTES)

    def config_run(self, job: ConfigJob) -> ConfigRun:
        """``job``'s configuration on the lab's hosts, with the facts of its hypervisor's lab
        preflight (the baseline's ``facts`` are the lab's accelerator only)."""
        return LabConfigRun(replace(job, facts=self.drivers[job.config.hv][1]), plan=self)


def scenario_for(spec: BaselineSpec, config: Config) -> Scenario:
    """The migration scenario whose lab driver starts ``config``'s router (only its router,
    hypervisor and guest settings matter: nothing is migrated)."""
    nic = config.nic if config.hv in ("kvm", "xen") else Scenario.nic
    # HV=criu: stop-and-copy needs no kernel feature of the hosts (pre-copy needs soft-dirty tracking)
    mode = "stopcopy" if config.hv == "criu" else Scenario.mode
    return Scenario(
        hv=config.hv, mode=mode, driver="qmp", router=spec.router, nic=nic, accel=spec.accel, mem_mib=spec.mem_mib,
        boot_timeout_s=spec.boot_timeout_s, rate_bps=0,
    )  # fmt: skip


def refuse(spec: BaselineSpec) -> None:
    """ConfigError (one line, nothing started) for what a lab baseline cannot run."""
    if spec.routers != (1,):
        raise ConfigError(
            "TESTBED=: baselines run ROUTERS=1 (further routers need end hosts A<k>/B<k> that only the embedded "
            "testbed adds): drop ROUTERS, or run without TESTBED"
        )
    if spec.loads != ("none",):
        raise ConfigError(
            "TESTBED=: baselines run LOAD=none (a neighbour router and its hosts exist only on the embedded "
            "testbed): drop LOAD, or run without TESTBED"
        )
    if "xen" in spec.hvs and spec.roles != ("router",):
        raise ConfigError(
            "TESTBED=: ROLE=vm-tx/vm-rx with HV=xen needs the domU's console relayed by a nested host's dom0, "
            "which only the embedded testbed starts: drop xen from HV, or run without TESTBED"
        )
    if "vm-vm" in spec.roles:
        raise ConfigError(
            "TESTBED=: ROLE=vm-vm needs a second router on R1, which only the embedded testbed starts: "
            "choose ROLE=router, vm-tx or vm-rx, or run without TESTBED"
        )


def plan(spec: BaselineSpec, testbed: Path) -> LabPlan:
    """Load and check the inventory and every hypervisor's lab driver before anything starts:
    bad input, an unreachable host or a missing tool is one line (ConfigError/DependencyError)."""
    from migrate.drivers.base import load_driver
    from migrate.experiment.instruments import Instruments
    from migrate.experiment.place import lab_facts, lab_preflight, lab_supports
    from migrate.testbed.inventory import load

    inv = load(testbed)
    refuse(spec)
    scenarios = {c.hv: scenario_for(spec, c) for c in spec.configs() if c.hv != "none"}
    for s in scenarios.values():
        lab_supports(s, inv)
    local: dict[str, tuple[type | None, dict[str, Any]]] = {}
    if "none" in spec.hvs:
        local["none"] = (None, {"accel": None, "router": "the router image's tree chrooted on R1 (netns-chroot)"})
    Instruments.check()
    for hv, s in scenarios.items():
        cls = load_driver(hv, s.driver, lab=True)
        local[hv] = (cls, cls.preflight_start(s))
    check = lab_preflight(inv, testbed)  # every host over SSH: after the checks of this machine
    out = LabPlan(testbed, inv, check)
    for hv, (cls, facts) in local.items():
        out.drivers[hv] = (cls, {**facts, **lab_facts(check, scenarios[hv], facts)} if hv in scenarios else facts)
    return out


def resume_testbed(resume: Path, meta: dict[str, Any], given: Path | None) -> Path | None:
    """The testbed a resumed baseline goes on with: the one its meta.json names (a lab
    inventory, or none: the embedded testbed); a different TESTBED is refused (ConfigError, one
    line): its points would mix testbeds."""
    stored = (meta.get("lab") or {}).get("inventory")
    if given is not None and (stored is None or Path(stored).resolve() != given.resolve()):
        where = f"TESTBED={stored}" if stored else "the embedded testbed"
        raise ConfigError(f"RESUME={resume} ran on {where}: drop TESTBED={given} or start a new baseline")
    if stored is not None and not Path(stored).is_file():
        raise ConfigError(f"RESUME={resume} ran on TESTBED={stored}, which is gone: restore it or start a new baseline")
    return Path(stored) if stored else None


def lab_accel(p: LabPlan) -> str | None:
    """The accelerator the lab's VMs ran with (KVM only if R1 and R2 both have it); None for a
    baseline without a VM."""
    accels = {facts.get("accel") for _, facts in p.drivers.values()} - {None, "none"}
    return "+".join(sorted(accels)) if accels else None


class LabConfigRun(ConfigRun):
    """One configuration on a lab: the lab's hosts opened, the router started on R1 by its
    driver, the irtt server on D, forwarding seen; everything left again in ``teardown``."""

    def __init__(self, job: ConfigJob, *, plan: LabPlan) -> None:
        super().__init__(job)
        self.plan = plan
        self.stack = contextlib.ExitStack()
        self.driver: Any = None
        self.nsrouter: Any = None  # HV=none: migrate.baseline.labnone.LabNsRouter
        self.lab: Any = None

    def setup(self) -> PointContext:
        from migrate.drivers.base import RunContext
        from migrate.experiment.place import open_lab
        from migrate.model.recorder import Recorder
        from migrate.testbed.labbed import lab_testbed_meta

        check_slot0_matches_testbed()
        self.registry.open()
        self.out.mkdir(parents=True, exist_ok=True)
        self.info["prefix"] = self.registry.prefix
        driver_cls, facts = self.plan.drivers[self.config.hv]
        log.info("[%s] on the lab %s (run %s)", self.config.name, self.plan.testbed, self.registry.prefix)
        self.lab = lab = self.stack.enter_context(open_lab(self.plan.inv, self.registry))
        self.info["testbed"] = lab_testbed_meta(lab)
        if driver_cls is None:
            from migrate.baseline.labnone import LabNsRouter

            log.info("[%s] starting the router on R1 (HV=none: the router's tree chrooted)", self.config.name)
            self.nsrouter = LabNsRouter(lab, self.spec.router, self.registry, self.out)
            self.stack.callback(self.nsrouter.stop)
            self.nsrouter.start()
            how = {"driver": None, **self.nsrouter.describe()}
        else:
            recorder = self.stack.enter_context(Recorder(self.out))
            scenario = scenario_for(self.spec, self.config)
            ctx = RunContext(scenario, lab, self.registry, self.out, recorder, self.abort)
            self.driver = self.stack.enter_context(driver_cls(ctx, facts))
            if self.config.role != "router" and self.config.hv == "kvm":
                self.driver.console_shell = True  # the end host's command channel
            log.info("[%s] starting the router on R1 (%s, accel=%s)", self.config.name, driver_cls.__name__,
                     facts.get("accel"))  # fmt: skip
            self.driver.start_source()
            how = {"driver": driver_cls.__name__}
        pids, trees = self.router_processes()
        self.info["routers"] = [{"slot": 0, "host": "R1", "accel": facts.get("accel"), **how, "processes": pids,
                                 "process_trees": trees}]  # fmt: skip
        endhost = self._endhost() if self.config.role != "router" else None
        self._start_servers()
        self._prime(self.slots)
        return PointContext(
            tb=lab, registry=self.registry, slots=self.slots, duration_s=self.spec.duration_s,
            probe_ms=self.spec.probe_ms, cpu_snapshot=self.cpu_snapshot, abort=self.abort, clocks=lab.offsets,
            endhost=endhost,
        )  # fmt: skip

    def _endhost(self) -> EndHost:
        """ROLE=vm-tx/vm-rx on the lab: the router on R1 as the end host, its tools started over
        R1's SSH connection: in the bare router's namespace (HV=none: R1's deployed tools,
        ``nsenter`` by a daemon's PID), in the container (HV=criu: its own tools, ``nsenter`` by
        its init's PID), or in the guest through its console shell, whose socket on R1 is
        forwarded here over SSH (HV=kvm)."""
        slot, role = self.slots[0], self.config.role
        if self.nsrouter is not None:
            if not self.nsrouter.daemons:
                raise GuestError(f"ROLE={role}: the HV=none router on R1 has no daemon to enter its namespace by")
            pid = self.nsrouter.daemons[0][0]
            return EndHost(role, slot, self.registry, enter_pid=pid, container=False, host=(self.lab, "R1"))
        if self.config.hv == "criu":
            init = self.driver.source_processes()[1].get("ct")
            if init is None:
                raise GuestError(f"ROLE={role}: the router container on R1 has no init process")
            return EndHost(role, slot, self.registry, enter_pid=init, host=(self.lab, "R1"))
        from migrate.drivers.guest_shell import GuestShell

        local, remote = self.driver.shell_socket("R1")
        alive = self.driver.source_running
        self.lab.forward_socket("R1", local, remote, SHELL_TIMEOUT_S, alive, "QEMU", "console")
        shell = GuestShell.connect(local, timeout_s=SHELL_TIMEOUT_S, alive=alive, abort=self.abort)
        self.stack.callback(shell.close)
        return EndHost(role, slot, self.registry, shell=shell, host=(self.lab, "R1"))

    def _start_servers(self) -> None:
        from probes.irtt import server_argv

        d = topo.host("D")
        for ip in self.spec.ips:
            addr = topo.addr(d.ipv4 if ip == 4 else d.ipv6)
            srv = self.lab.spawn("D", f"irtt-server-ip{ip}", server_argv(addr, IRTT_PORT), self.registry, self.out)
            self.procs.append(srv)
            self.lab.wait_udp_bound("D", addr, IRTT_PORT, READY_TIMEOUT_S, abort=lambda s=srv: not s.alive())

    def _ping_runner(self, role: str) -> Any:
        return lambda argv: self.lab.run(role, argv).returncode

    def router_processes(self) -> tuple[dict[str, int], dict[str, int]]:
        """The router's processes on R1 under the names the analysis reads (``qemu0``,
        ``router0-daemon<i>``; trees: ``router0-ct`` + each PID)."""
        if self.nsrouter is not None:
            return self.nsrouter.pids(), {}
        pids, trees = self.driver.source_processes()
        return {f"{n}0": p for n, p in pids.items()}, {f"router0-{n}": p for n, p in trees.items()}

    def cpu_snapshot(self) -> dict[str, Any]:
        """R1's CPU counters and the router's processes there, read on R1 (its own clock and
        USER_HZ: both snapshots of a point come from the same host)."""
        argv = cpustat.remote_argv(*self.router_processes())
        res = self.lab.run("R1", argv)
        if res.returncode != 0:
            raise ProcessError(f"R1: reading the CPU counters failed: {res.stderr.decode(errors='replace').strip()}")
        return json.loads(res.stdout)

    def _healthy(self) -> None:
        running = self.nsrouter.running() if self.nsrouter is not None else self.driver.source_running()
        dead = [] if running else ["the router on R1"]
        dead += [p.what for p in self.procs if not p.alive()]
        if dead:
            raise GuestError(f"{', '.join(dead)} stopped during the measurements")

    def teardown(self) -> None:
        """Stop the servers by PID, stop the router (its driver), leave the lab's hosts (their
        run directories removed, which the guards' processes do not outlive), then the registry."""
        self.abort.armed = False
        problems: list[str] = []
        for p in reversed(self.procs):
            if p.alive():
                p.stop(signal.SIGTERM)
        try:
            self.stack.close()
        except (VrmigError, OSError) as err:
            problems.append(str(err))
        problems += self.registry.teardown()
        if problems:
            self.info["teardown_problems"] = problems
            log.error("teardown problems: %s", "; ".join(problems))
        self.abort.armed = True
