"""One migration run: scenario -> checks -> testbed -> router -> traffic -> migration ->
raw data -> analysis.  Everything created is registered and removed in ``finally``.

This module holds the checks and the boot (the run's resources as nested ``with`` blocks); the
measure phase is :class:`~migrate.experiment.measure.Measurement`, the proof of forwarding
after the migration :class:`~migrate.experiment.proof.Proof`.

A run that does not complete carries the phase it ended in as meta.json ``failure_class``
(setup, migration, post-migration, interrupted).  A migration the hypervisor reports completed
counts only once cross-traffic sent after the completion reached B (at RATE=0: RTT probes sent
after it were answered), seen live and in the instruments' records (docs/data-formats.md)."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from migrate.core import meta as metamod
from migrate.core.registry import Registry
from migrate.core.runctx import open_run
from migrate.core.rundir import (
    KIND_MIGRATE,
    write_meta,
)
from migrate.core.sighold import Abort, Teardown
from migrate.drivers.base import Driver, RunContext
from migrate.experiment.churn import Churn
from migrate.experiment.instruments import Instruments
from migrate.experiment.measure import Measurement, instruments_cpu
from migrate.experiment.peering import Peers
from migrate.experiment.place import Embedded, Place, place_for, preflight
from migrate.experiment.run_progress import Phase
from migrate.model.faults import FaultInjector
from migrate.model.recorder import Recorder
from migrate.model.scenario import Scenario
from migrate.testbed.builder import new_prefix
from migrate.testbed.results import check_results_root, new_run_dir

log = logging.getLogger(__name__)


def make_run_dir(results_root: Path, scenario: Scenario, fill: Callable[[Path], None] | None = None) -> Path:
    """Create ``results/<UTC time>-<name>/`` (fails if it exists) and mark it as ours; ``fill``
    writes its first files before it appears (:func:`~migrate.testbed.results.new_run_dir`)."""
    return new_run_dir(results_root, scenario.name, fill=fill)


def run(
    scenario: Scenario,
    results_root: Path,
    extra_meta: dict[str, Any] | None = None,
    testbed: Path | None = None,
) -> Path:
    """Execute one migration experiment and return its results directory (``extra_meta`` is
    merged into meta.json: how the CRIU host VM ran it; ``testbed``: an inventory of lab hosts
    reached over SSH instead of the embedded namespace testbed)."""
    from migrate.drivers.criu import hostvm as criuvm

    place = place_for(testbed)  # bad input: one line, exit 2, nothing started
    place.admit(scenario)
    place.preflight()
    if scenario.criu_host == "vm" and not criuvm.in_vm():
        return criuvm.run_in_vm(scenario, results_root, _analyse)
    check_results_root(results_root)
    driver_cls, facts = preflight(scenario, place)
    phase = Phase(shown=True)

    def describe(meta: dict[str, Any], _run_dir: Path) -> None:
        meta.update(scenario=scenario.to_dict(), name=scenario.name, clock=metamod.clock_fields())
        meta.update(extra_meta or {})
        place.describe(meta)

    make_dir = functools.partial(make_run_dir, results_root, scenario)
    with phase.progress, open_run(KIND_MIGRATE, make_dir, describe, logger=log,
                                  failure_class=lambda: phase.current, analyse=_analyse) as opened:  # fmt: skip
        registry = Registry(new_prefix(), run_dir=str(opened.dir.resolve()))
        _execute(scenario, driver_cls, facts, registry, opened.dir, opened.meta, opened.abort, phase, place)
    return opened.dir


def _execute(
    scenario: Scenario,
    driver_cls: type[Driver],
    facts: dict[str, Any],
    registry: Registry,
    run_dir: Path,
    meta: dict[str, Any],
    abort: Abort,
    phase: Phase,
    place: Place | None = None,
) -> None:
    """The run as nested ``with`` blocks: each resource is left, in the reverse order of entry,
    however the block ends (instruments, hypervisor, recorder, then the registry removes what
    remains by PID and name); a teardown step that fails is recorded, never raised."""
    td = Teardown(abort)
    # the QEMU and the router that ran, their versions and sources (docs/stack.md)
    stack = metamod.with_router(facts.get("stack"), scenario.router, facts.get("guest_image"))
    recorder = Recorder(run_dir)
    injector = FaultInjector(scenario.fault, recorder.action)
    try:
        with (
            td.step("tear down", registry),
            td.step("close recorder", recorder),
            td.step("leave the testbed", (place or Embedded()).open(registry, scenario.miglink_bps)) as tb,
        ):
            meta["testbed"] = tb.describe()
            ctx = RunContext(scenario, tb, registry, run_dir, recorder, abort, injector)
            with td.step("stop hypervisor", driver_cls(ctx, facts)) as driver:
                meta["hypervisor"] = dict(facts)
                meta["accel"] = facts.get("accel")
                meta["stack"] = stack
                write_meta(run_dir, meta)

                tb.build(registry)
                with td.step("stop routing peers", Peers(scenario, tb, registry, run_dir)) as peers:
                    if scenario.peering:
                        log.info("starting routing peers (%s)", scenario.peering)
                        peers.start()
                    log.info("booting router (%s, %s, accel=%s)", scenario.router, scenario.hv, meta["accel"])
                    driver.start_source()
                    if scenario.peering:
                        peers.wait_established()
                        meta["peering"] = peers.describe()
                        write_meta(run_dir, meta)
                    with td.step("stop route churn", Churn(scenario, tb, registry, run_dir)) as churn:
                        try:
                            churn.start()
                            driver.prepare_destination()
                            instruments = Instruments(scenario, tb, registry, run_dir, recorder)
                            try:
                                with td.step("stop instruments", instruments):
                                    Measurement(
                                        scenario, driver, instruments, injector, tb, run_dir, meta, abort, phase, peers
                                    ).run()
                            finally:
                                if "instruments_cpu_s" not in meta:
                                    instruments_cpu(meta, instruments)
                        finally:
                            churn.stop()
                            if scenario.churn_rps is not None:
                                meta["churn"] = churn.describe()
    finally:
        problems = td.problems + registry.teardown_problems
        if problems:
            meta["teardown_problems"] = problems
            log.error("teardown problems: %s", "; ".join(problems))


def _analyse(run_dir: Path) -> None:
    """Compute summary.json and the plot from the raw data (never raises).  Inside the CRIU host
    VM this is left to the outer host (hostvm.run_in_vm), which runs it on its own CPU."""
    from migrate.drivers.criu import hostvm as criuvm

    if criuvm.in_vm():
        return
    try:
        from analysis.run import analyse_and_write

        analyse_and_write(run_dir)
    except Exception as err:  # analysis must never lose a run's raw data
        log.exception("analysis failed: %s (raw data kept; re-run `python -m analysis %s`)", err, run_dir)
