"""The hypervisor driver interface, named after migration phases, and a lazy registry so a
missing backend breaks nothing else (after CRIU's P.Haul)."""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from migrate.core.errors import ConfigError
from migrate.core.registry import Registry
from migrate.model.recorder import Recorder
from migrate.model.scenario import Scenario
from migrate.testbed.builder import Testbed

#: (HV, DRIVER) -> "module:class", imported only when chosen
DRIVERS = {
    ("kvm", "qmp"): "migrate.drivers.kvm.driver:KvmDriver",
    ("kvm", "libvirt"): "migrate.drivers.libvirt.driver:LibvirtDriver",
    # DRIVER only varies for kvm; other HVs are registered under the default DRIVER
    ("criu", "qmp"): "migrate.drivers.criu.driver:CriuDriver",
    ("openvz", "qmp"): "migrate.drivers.openvz:OpenvzDriver",
    ("xen", "qmp"): "migrate.drivers.xen.driver:XenDriver",
}
#: drivers whose lab (TESTBED=) form is another class; the others drive a lab's hosts themselves
LAB_DRIVERS = {
    ("criu", "qmp"): "migrate.drivers.criu.lab:LabCriuDriver",
}


@dataclass
class RunContext:
    """What a driver gets: the scenario, the built testbed and where to record."""

    scenario: Scenario
    testbed: Testbed
    registry: Registry
    run_dir: Path
    recorder: Recorder
    abort: Any = None  # callable -> bool, true once an interruption was requested
    faults: Any = None  # migrate.model.faults.FaultInjector (on_progress(reply) per source sample)


@dataclass
class MigrationOutcome:
    """How the migration ended, as the hypervisor reports it."""

    completed: bool
    failure: str | None = None
    hypervisor: dict[str, Any] = field(default_factory=dict)


class Driver(ABC):
    """One hypervisor technology.  The orchestrator calls the phases in order."""

    name: str = ""
    #: DIRTY=: the guest's dirtying load as its start line reported it (rate_mb_s, wss_mib, wss_s)
    dirty_load: dict[str, float] | None = None

    def __init__(self, ctx: RunContext, facts: dict[str, Any]) -> None:
        self.ctx = ctx
        self.facts = facts

    @classmethod
    @abstractmethod
    def preflight(cls, scenario: Scenario) -> dict[str, Any]:
        """Check dependencies without side effects; return versions and facts for meta.json."""

    @classmethod
    def preflight_start(cls, scenario: Scenario) -> dict[str, Any]:
        """The checks for starting the router on R1 that is never migrated (``make baseline``):
        by default those of :meth:`preflight`."""
        return cls.preflight(scenario)

    @abstractmethod
    def start_source(self) -> None:
        """Start the router on R1 and return once it routes (observed, not slept)."""

    @abstractmethod
    def prepare_destination(self) -> None:
        """Make R2 ready to receive the router."""

    @abstractmethod
    def migrate(self) -> MigrationOutcome:
        """Migrate R1 -> R2 over the dedicated link; block until done, failed or timed out."""

    @abstractmethod
    def verify(self) -> dict[str, Any]:
        """Report where the router runs now (e.g. source/destination run states)."""

    def __enter__(self) -> Driver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @abstractmethod
    def stop(self) -> None:
        """Stop everything the driver started (the registry kills leftovers by PID)."""

    def describe(self) -> dict[str, Any]:
        """Effective hypervisor settings for meta.json (after the run)."""
        return {}

    def measure_dirty_rate(self) -> dict[str, Any]:
        """Measure the guest's dirty page rate now, blocking until done (meta.json ``dirty_rate``,
        see migrate.model.dirty); a driver without a measurement records why."""
        from migrate.model.dirty import unsupported

        return unsupported(self.ctx.scenario.hv)

    def fault_targets(self) -> dict[str, Any]:
        """Fault name -> action (callable) for the faults this driver can suffer."""
        return {}

    def source_running(self) -> bool:
        """True if the router still runs on the source host (after a failed migration)."""
        return False

    def source_processes(self) -> tuple[dict[str, int], dict[str, int]]:
        """The source router's processes on R1 by PID there, for CPU accounting (``make
        baseline``): (single processes, process trees by their root: every descendant counts)."""
        return {}, {}


def load_driver(hv: str, driver: str = "qmp", lab: bool = False) -> type[Driver]:
    """Import the driver class for ``hv`` driven by ``driver`` (qmp|libvirt) lazily (``lab``: its
    form for a lab's hosts, TESTBED=)."""
    try:
        target = (lab and LAB_DRIVERS.get((hv, driver))) or DRIVERS[(hv, driver)]
    except KeyError:
        known = ", ".join(f"HV={h} DRIVER={d}" for h, d in DRIVERS)
        raise ConfigError(f"HV={hv!r} DRIVER={driver!r} has no driver: choose one of {known}") from None
    module, cls = target.split(":")
    return getattr(importlib.import_module(module), cls)
