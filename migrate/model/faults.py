"""Fault injection for ``make chaos`` and for studying failed migrations (``--fault``).

Each fault is real: a process killed by PID, the migration link taken down or throttled, a
guest that cannot boot, a destination whose network is not wired up (the router arrives there
and runs, but nothing it sends reaches segment R).  The run must end as ``status: failed`` with a
specific reason within a bounded time, and where QEMU recovers the run records whether the
router kept forwarding on R1.
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Callable
from typing import Any

from migrate.core.netlink import iproute
from migrate.model.scenario import FAULTS
from migrate.testbed import topology as topo

log = logging.getLogger(__name__)

__all__ = ["FAULTS", "FaultInjector", "kill_pid", "link_cap", "link_down", "unplug"]
#: faults fired once the migration has moved this much RAM (so they hit it mid-flight)
TRIGGER_TRANSFERRED_BYTES = 8 * 2**20
LINK_CAP_BPS = 8_000  # "capped to near zero"


class FaultInjector:
    """Fires the scenario's fault once, mid-migration, and records when."""

    def __init__(self, fault: str | None, record: Callable[..., int]) -> None:
        self.fault = fault
        self.record = record
        self.fired = False
        self.targets: dict[str, Callable[[], Any]] = {}

    def on_progress(self, reply: dict[str, Any]) -> None:
        """Called with every source query-migrate reply; fires the fault when it is time."""
        if self.fired or self.fault in (None, "guest-never-ready"):
            return
        transferred = reply.get("ram", {}).get("transferred", 0)
        if reply.get("status") == "active" and transferred >= TRIGGER_TRANSFERRED_BYTES:
            self.fire()

    def fire(self) -> None:
        """Inject the fault now."""
        self.fired = True
        action = self.targets.get(self.fault or "")
        if action is None:
            log.warning("fault %s has no target in this run", self.fault)
            return
        self.record("fault", fault=self.fault)
        log.warning("injecting fault: %s", self.fault)
        action()


def kill_pid(pid_of: Callable[[], int | None]) -> Callable[[], None]:
    """A fault action that SIGKILLs one process by PID."""

    def act() -> None:
        pid = pid_of()
        if pid is not None:
            os.kill(pid, signal.SIGKILL)

    return act


def link_down(ns: str) -> Callable[[], None]:
    """A fault action that takes R1's end of the migration link down."""

    def act() -> None:
        with iproute(ns) as ipr:
            ipr.link("set", index=ipr.link_lookup(ifname=topo.MIGRATION_IF)[0], state="down")

    return act


def link_cap(ns: str) -> Callable[[], None]:
    """A fault action that throttles R1's end of the migration link to near zero."""

    def act() -> None:
        with iproute(ns) as ipr:
            idx = ipr.link_lookup(ifname=topo.MIGRATION_IF)[0]
            ipr.tc("replace", "tbf", index=idx, handle="1:", rate=f"{LINK_CAP_BPS}bit", burst=1600, latency="50ms")

    return act


def unplug(ns: str, ifname: str) -> Callable[[], None]:
    """A fault action that takes ``ifname`` (R2's tapR: the router's link to segment R on the
    destination) out of its bridge.  Fired mid-migration, while the source still forwards: the
    router arrives on R2 and runs and sends on that link (the tap's rx counter grows), but nothing
    it sends reaches the segment, as on a destination host whose network is not wired up."""

    def act() -> None:
        with iproute(ns) as ipr:
            ipr.link("set", index=ipr.link_lookup(ifname=ifname)[0], master=0)

    return act
