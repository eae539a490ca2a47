"""One migration run: scenario -> checks -> testbed -> router -> traffic -> migration ->
raw data -> analysis.  Everything created is registered and removed in ``finally``."""

from __future__ import annotations

import datetime as dt
import logging
import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from migrate import meta as metamod
from migrate import topology as topo
from migrate.atomic import write_json
from migrate.drivers.base import Driver, RunContext, load_driver
from migrate.errors import ConfigError, DependencyError, Interrupted, MigrationError, VrmigError
from migrate.recorder import Recorder
from migrate.registry import Registry, clean_stale
from migrate.scenario import Scenario
from migrate.testbed import Testbed, TestbedBuilder, new_prefix
from migrate.traffic import Instruments

log = logging.getLogger(__name__)

RESULTS_MARKER = ".vrmig-run"


class _Abort:
    """Set by SIGINT/SIGTERM; the first signal also raises Interrupted in the main thread."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.armed = True
        self.owner_pid = os.getpid()

    def __call__(self) -> bool:
        return self.signum is not None

    def handler(self, signum: int, _frame: Any) -> None:
        if os.getpid() != self.owner_pid:
            # a fork of ours (pyroute2's netns helper) inherited this handler: die as by default
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        first = self.signum is None
        self.signum = signum
        if first and self.armed:
            raise Interrupted(f"interrupted by {signal.Signals(signum).name}")


@contextmanager
def _signals(abort: _Abort) -> Iterator[None]:
    old = {s: signal.signal(s, abort.handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def make_run_dir(results_root: Path, scenario: Scenario) -> Path:
    """Create ``results/<UTC time>-<name>/`` (fails if it exists) and mark it as ours."""
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S.%fZ")[:-4] + "Z"
    if results_root.exists() and not results_root.is_dir():
        raise ConfigError(f"results path {results_root} exists and is not a directory")
    results_root.mkdir(parents=True, exist_ok=True)
    run_dir = results_root / f"{stamp}-{scenario.name}"
    run_dir.mkdir()
    (run_dir / RESULTS_MARKER).write_text("vrmig run directory\n")
    return run_dir


def preflight(scenario: Scenario) -> tuple[type[Driver], dict[str, Any]]:
    """Checks that need no side effects: root, tools, driver dependencies; returns the driver
    class and its facts (versions, accelerator)."""
    if os.geteuid() != 0:
        raise DependencyError("vrmig must run as root (it creates network namespaces): run it as root")
    Instruments.check(scenario)
    driver_cls = load_driver(scenario.hv)
    return driver_cls, driver_cls.preflight(scenario)


def run(scenario: Scenario, results_root: Path) -> Path:
    """Execute one migration experiment and return its results directory."""
    driver_cls, facts = preflight(scenario)
    for prefix in clean_stale():
        log.warning("removed leftovers of crashed run %s", prefix)

    abort = _Abort()
    with _signals(abort):
        run_dir = make_run_dir(results_root, scenario)
        meta: dict[str, Any] = {
            "format_version": metamod.FORMAT_VERSION,
            "kind": "migrate",
            "created_utc": dt.datetime.now(dt.UTC).isoformat(),
            "status": "running",
            "failure": None,
            "scenario": scenario.to_dict(),
            "name": scenario.name,
            "git_commit": metamod.git_commit(),
            "host": metamod.host_facts(),
            "clock": {"timestamps": "CLOCK_REALTIME ns", "offset_start_ns": metamod.clock_offset_ns()},
        }
        write_json(run_dir / "meta.json", meta)
        registry = Registry(new_prefix())
        try:
            _execute(scenario, driver_cls, facts, registry, run_dir, meta, abort)
            if abort.signum is not None:
                raise Interrupted(f"interrupted by {signal.Signals(abort.signum).name} during teardown")
        except Interrupted as err:
            meta["status"], meta["failure"] = "interrupted", str(err)
        except VrmigError as err:
            meta["status"], meta["failure"] = "failed", str(err)
            log.error("%s", err)
        except Exception as err:
            meta["status"], meta["failure"] = "failed", f"internal error: {type(err).__name__}: {err}"
            log.exception("internal error (a bug in vrmig; please report it with this traceback)")
        finally:
            abort.armed = False  # a second Ctrl-C must not break teardown
            meta["clock"]["offset_end_ns"] = metamod.clock_offset_ns()
            meta["finished_utc"] = dt.datetime.now(dt.UTC).isoformat()
            write_json(run_dir / "meta.json", meta)
        _analyse(run_dir)
        if meta["status"] == "interrupted":
            raise Interrupted(f"{meta['failure']}; partial results kept in {run_dir}")
    return run_dir


def _execute(
    scenario: Scenario,
    driver_cls: type[Driver],
    facts: dict[str, Any],
    registry: Registry,
    run_dir: Path,
    meta: dict[str, Any],
    abort: _Abort,
) -> None:
    recorder = Recorder(run_dir)
    driver: Driver | None = None
    instruments: Instruments | None = None
    try:
        registry.open()
        tb = Testbed(registry.prefix)
        meta["testbed"] = {
            "prefix": registry.prefix,
            "namespaces": {role: tb.ns(role) for role in topo.all_roles()},
            "miglink_bps": scenario.miglink_bps,
        }
        ctx = RunContext(scenario, tb, registry, run_dir, recorder, abort)
        driver = driver_cls(ctx, facts)
        meta["hypervisor"] = dict(facts)
        meta["accel"] = facts.get("accel")
        write_json(run_dir / "meta.json", meta)

        log.info("building testbed %s", registry.prefix)
        TestbedBuilder(registry, scenario.miglink_bps).build()
        log.info("booting router (%s, %s, accel=%s)", scenario.router, scenario.hv, meta["accel"])
        driver.start_source()
        driver.prepare_destination()
        instruments = Instruments(scenario, tb, registry, run_dir, recorder)
        instruments.start()
        meta["instruments"] = instruments.describe()
        write_json(run_dir / "meta.json", meta)

        t0 = time.monotonic()
        instruments.wait_forwarding(timeout_s=min(scenario.migrate_at_s, 10.0) + 5.0)
        _sleep_until(t0 + scenario.migrate_at_s, abort)
        log.info("migrating (%s)", scenario.mode)
        try:
            outcome = driver.migrate()
            meta["hypervisor"]["final"] = outcome.hypervisor
            meta["status"] = "completed"
        except MigrationError as err:
            meta["status"], meta["failure"] = "failed", str(err)
            log.error("migration failed: %s", err)
        t_end = time.monotonic()
        _sleep_until(max(t0 + scenario.duration_s, t_end + scenario.after_s), abort)
        instruments.stop()
        meta["verify"] = driver.verify()
        meta["hypervisor"].update(driver.describe())
    finally:
        abort.armed = False  # a signal from here on is recorded, not raised: teardown must finish
        if instruments is not None:
            instruments.kill()
        if driver is not None:
            driver.stop()
        recorder.close()
        problems = registry.teardown()
        if problems:
            meta["teardown_problems"] = problems
            log.error("teardown problems: %s", "; ".join(problems))


def _sleep_until(t_mono: float, abort: _Abort) -> None:
    """Wait for a scenario time point (a schedule, not a readiness wait)."""
    while (left := t_mono - time.monotonic()) > 0:
        if abort():
            raise Interrupted("interrupted")
        time.sleep(min(left, 0.1))


def _analyse(run_dir: Path) -> None:
    """Compute summary.json and the plot from the raw data (never raises)."""
    try:
        from analysis.run import analyse_and_write

        analyse_and_write(run_dir)
    except Exception as err:  # analysis must never lose a run's raw data
        log.exception("analysis failed: %s (raw data kept; re-run `python -m analysis %s`)", err, run_dir)
