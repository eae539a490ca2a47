"""The measure phase of a run, over the resources the boot entered: the instruments on, forwarding
seen before the migration, the dirty-rate measurement, the migration at MIGRATE_AT (later if a
routing session that flapped must come up again first) with its live proof, traffic until the
schedule's end, the instruments off, and the verdict (:class:`~migrate.experiment.proof.Proof`).

The schedule counts from the instruments' start: the migration at MIGRATE_AT, the traffic's end
at DURATION, or AFTER seconds after the migration ended if that is later (paper 004's timeline)."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from migrate.core.errors import Interrupted, VrmigError
from migrate.core.runctx import record_failure
from migrate.core.rundir import write_meta
from migrate.core.sighold import Abort
from migrate.drivers.base import Driver
from migrate.experiment.instruments import Instruments
from migrate.experiment.peering import Peers
from migrate.experiment.proof import Proof
from migrate.experiment.run_progress import Phase
from migrate.model.dirty import measure_before_migration
from migrate.model.faults import FaultInjector, kill_pid, link_cap, link_down, unplug
from migrate.model.scenario import Scenario
from migrate.testbed.builder import Testbed

log = logging.getLogger(__name__)


class Measurement:
    """The measure phase of one run (:meth:`run`); ``peers`` is entered whether or not the
    scenario has routing peers (PEERING), and only then waited for."""

    def __init__(
        self,
        scenario: Scenario,
        driver: Driver,
        instruments: Instruments,
        injector: FaultInjector,
        tb: Testbed,
        run_dir: Path,
        meta: dict[str, Any],
        abort: Abort,
        phase: Phase,
        peers: Peers,
    ) -> None:
        self.s, self.driver, self.instruments, self.injector, self.tb = scenario, driver, instruments, injector, tb
        self.dir, self.meta, self.abort, self.phase, self.peers = run_dir, meta, abort, phase, peers
        self.proof = Proof(scenario, instruments, run_dir, meta, phase, peers if scenario.peering else None)

    def run(self) -> None:
        """Instruments on, forwarding seen, the migration at MIGRATE_AT, traffic until the end, the verdict."""
        s, driver, instruments, meta, progress = self.s, self.driver, self.instruments, self.meta, self.phase.progress
        instruments.start()
        self.injector.targets = {**driver.fault_targets(), **fault_actions(self.tb, instruments)}
        meta["instruments"] = instruments.describe()
        write_meta(self.dir, meta)

        t0 = time.monotonic()  # the schedule's start: MIGRATE_AT and DURATION count from here
        instruments.wait_forwarding(timeout_s=min(s.migrate_at_s, 10.0) + 5.0)
        instruments.start_tcp()
        meta["instruments"] = instruments.describe()
        progress.instruments_started(s.duration_s, s.after_s, at=t0)
        meta["dirty_rate"] = measure_before_migration(driver, s.dirty_mbps, t0 + s.migrate_at_s, self.sleep_until)
        write_meta(self.dir, meta)
        self.sleep_until(t0 + s.migrate_at_s)
        if dead := instruments.dead():
            raise VrmigError(f"instrument died before the migration: {dead}")
        if s.peering:
            meta["peering"]["before_migration"] = before = self.peers.ready_for_migration()
            if before["flaps"]:
                log.warning("routing sessions flapped %d times before the migration; it waited %.1f s for them",
                            before["flaps"], before["waited_s"])  # fmt: skip
        progress.migrating()
        self.proof.migrate(driver)
        progress.migrated()
        t_end = time.monotonic()
        self.sleep_until(max(t0 + s.duration_s, t_end + s.after_s))
        dead = instruments.dead()
        if dead and meta["status"] == "running":
            record_failure(meta, self.phase.current, f"instrument died during the run: {dead}")
            log.error("%s", meta["failure"])
        instruments.stop()
        progress.traffic_ended()
        instruments_cpu(meta, instruments)
        self.tb.finish(meta, self.dir)
        self.proof.verdict(driver)

    def sleep_until(self, t_mono: float) -> None:
        """Wait for a time point of the schedule (not a readiness wait); Interrupted once the run
        is told to stop."""
        while (left := t_mono - time.monotonic()) > 0:
            if self.abort():
                raise Interrupted("interrupted")
            time.sleep(min(left, 0.1))


def instruments_cpu(meta: dict[str, Any], instruments: Instruments) -> None:
    """meta.json's CPU and wall time of the instruments, in all and by process."""
    cpu, wall, per_process = instruments.cpu_report()
    meta["instruments_cpu_s"], meta["instruments_wall_s"] = cpu, wall
    meta["instruments_cpu_by_process_s"] = per_process


def fault_actions(tb: Testbed, instruments: Instruments) -> dict[str, Any]:
    """Faults of the testbed and the instruments (the driver adds its own)."""
    r1 = tb.ns("R1")
    gen = instruments.procs.get("gen")
    return {
        "link-down": link_down(r1),
        "link-cap": link_cap(r1),
        "gen-dies": kill_pid(lambda: gen.pid if gen and gen.alive() else None),
        "dst-unplugged": unplug(tb.ns("R2"), "tapR"),
    }
