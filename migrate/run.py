"""One migration run: scenario -> checks -> testbed -> router -> traffic -> migration ->
raw data -> analysis.  Everything created is registered and removed in ``finally``."""

from __future__ import annotations

import datetime as dt
import logging
import os
import signal
import time
from pathlib import Path
from typing import Any

from migrate import meta as metamod
from migrate import topology as topo
from migrate.atomic import write_json
from migrate.console import crash_in
from migrate.drivers.base import Driver, RunContext, load_driver
from migrate.errors import ConfigError, DependencyError, Interrupted, MigrationError, VrmigError
from migrate.faults import FaultInjector, kill_pid, link_cap, link_down
from migrate.recorder import Recorder
from migrate.registry import Registry, clean_stale
from migrate.scenario import Scenario
from migrate.sighold import signal_handlers
from migrate.testbed import Testbed, TestbedBuilder, new_prefix
from migrate.traffic import Instruments, rx_packets

log = logging.getLogger(__name__)

RESULTS_MARKER = ".vrmig-run"
RESULTS_ROOT_MARKER = ".vrmig-results"
MIN_FREE_BYTES = 64 * 2**20  # a 20 s run at 1G of 64 B frames writes well under this


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


def check_results_root(results_root: Path) -> None:
    """The results root must be ours (absent, empty, or carrying our marker) and have room."""
    if results_root.exists():
        if not results_root.is_dir():
            raise ConfigError(f"RESULTS={results_root} exists and is not a directory: choose another path")
        entries = list(results_root.iterdir())
        ours = all((e / RESULTS_MARKER).exists() for e in entries if e.name != RESULTS_ROOT_MARKER)
        default_root = results_root.resolve() == metamod.REPO / "results"  # the repo's git-ignored results/
        if entries and not (results_root / RESULTS_ROOT_MARKER).exists() and not ours and not default_root:
            raise ConfigError(
                f"RESULTS={results_root} exists and is not a vrmig results directory "
                f"(no {RESULTS_ROOT_MARKER} marker): choose a new or empty path"
            )
        probe = results_root
    else:
        probe = next((p for p in results_root.parents if p.exists()), Path("/"))
    if not os.access(probe, os.W_OK):
        raise ConfigError(f"RESULTS={results_root}: {probe} is not writable")
    st = os.statvfs(probe)
    free = st.f_bavail * st.f_frsize
    if free < MIN_FREE_BYTES:
        raise ConfigError(
            f"RESULTS={results_root}: only {free // 2**20} MiB free on that file system; "
            f"a run needs at least {MIN_FREE_BYTES // 2**20} MiB"
        )


def mark_results_root(results_root: Path) -> None:
    """Create ``results_root`` if needed and mark it as a vrmig results root."""
    results_root.mkdir(parents=True, exist_ok=True)
    marker = results_root / RESULTS_ROOT_MARKER
    if not marker.exists():
        marker.write_text("vrmig results root\n")


def make_run_dir(results_root: Path, scenario: Scenario) -> Path:
    """Create ``results/<UTC time>-<name>/`` (fails if it exists) and mark it as ours."""
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S.%fZ")[:-4] + "Z"
    mark_results_root(results_root)
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
    driver_cls = load_driver(scenario.hv, scenario.driver)
    return driver_cls, driver_cls.preflight(scenario)


def run(scenario: Scenario, results_root: Path, extra_meta: dict[str, Any] | None = None) -> Path:
    """Execute one migration experiment and return its results directory (``extra_meta`` is
    merged into meta.json: how the CRIU host VM ran it)."""
    from migrate import criuvm

    if scenario.criu_host == "vm" and not criuvm.in_vm():
        return criuvm.run_in_vm(scenario, results_root)
    check_results_root(results_root)
    driver_cls, facts = preflight(scenario)
    for prefix in clean_stale():
        log.warning("removed leftovers of crashed run %s", prefix)

    abort = _Abort()
    with signal_handlers(abort.handler):
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
            **(extra_meta or {}),
        }
        write_json(run_dir / "meta.json", meta)
        registry = Registry(new_prefix(), run_dir=str(run_dir.resolve()))
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
            if abort.signum is not None and meta["status"] != "interrupted":
                # the signal surfaced as another error (a library swallowed Interrupted, a wait saw
                # the abort flag): an operator stop, not a failed migration
                why = f"interrupted by {signal.Signals(abort.signum).name}"
                meta["status"], meta["failure"] = "interrupted", f"{why} ({meta['failure']})"
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
        injector = FaultInjector(scenario.fault, recorder.action)
        ctx = RunContext(scenario, tb, registry, run_dir, recorder, abort, injector)
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
        injector.targets = {**driver.fault_targets(), **fault_actions(tb, instruments)}
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
            meta["after_migration"] = observe_forwarding(tb, "R2", recorder)
            if not meta["after_migration"]["forwarding"]:
                meta["status"] = "failed"
                meta["failure"] = (
                    f"the hypervisor reported the migration complete, but the router did not forward "
                    f"from R2 within {AFTER_MIGRATION_OBSERVE_S:.0f} s (R2 tapR rx did not grow)"
                )
                crash = crash_in(run_dir / "console-R2.log")
                if crash:
                    meta["failure"] += f"; the router crashed on R2: {crash}"
                log.error("%s", meta["failure"])
        except MigrationError as err:
            meta["status"], meta["failure"] = "failed", str(err)
            log.error("migration failed: %s", err)
            meta["recovery"] = observe_recovery(driver, instruments, tb)
        t_end = time.monotonic()
        _sleep_until(max(t0 + scenario.duration_s, t_end + scenario.after_s), abort)
        dead = instruments.dead()
        if dead and meta["status"] == "completed":
            meta["status"], meta["failure"] = "failed", f"instrument died during the run: {dead}"
            log.error("%s", meta["failure"])
        instruments.stop()
        meta["verify"] = driver.verify()
        meta["hypervisor"].update(driver.describe())
    finally:
        abort.armed = False  # a signal from here on is recorded, not raised: teardown must finish
        problems: list[str] = []
        for step, fn in (
            ("stop instruments", instruments.kill if instruments is not None else None),
            ("stop hypervisor", driver.stop if driver is not None else None),
            ("close recorder", recorder.close),
        ):
            if fn is None:
                continue
            try:
                fn()
            except Exception as err:  # teardown must go on: the registry removes the rest by PID
                problems.append(f"{step}: {type(err).__name__}: {err}")
                log.warning("%s failed: %s", step, err)
        problems += registry.teardown()
        if problems:
            meta["teardown_problems"] = problems
            log.error("teardown problems: %s", "; ".join(problems))


RECOVERY_OBSERVE_S = 3.0


def fault_actions(tb: Testbed, instruments: Instruments) -> dict[str, Any]:
    """Faults of the testbed and the instruments (the driver adds its own)."""
    r1 = tb.ns("R1")
    gen = instruments.procs.get("gen")
    return {
        "link-down": link_down(r1),
        "link-cap": link_cap(r1),
        "gen-dies": kill_pid(lambda: gen.pid if gen and gen.alive() else None),
    }


AFTER_MIGRATION_OBSERVE_S = 10.0
FORWARDING_MIN_PACKETS = 10


def observe_forwarding(tb: Testbed, host: str, recorder: Recorder) -> dict[str, Any]:
    """Does the router forward from ``host`` now?  Observed on that host's right-hand tap: frames
    the router sends toward segment R (cross-traffic to B, or at RATE=0 the probes to D).  A
    hypervisor can report 'completed' for a guest that crashed on arrival; this catches it."""
    out: dict[str, Any] = {"host": host, "forwarding": False}
    try:
        before = rx_packets(tb.ns(host), "tapR")
        t0 = time.monotonic()
        while time.monotonic() - t0 < AFTER_MIGRATION_OBSERVE_S:
            delta = rx_packets(tb.ns(host), "tapR") - before
            if delta >= FORWARDING_MIN_PACKETS:
                out.update(forwarding=True, packets=delta, seen_after_s=round(time.monotonic() - t0, 3))
                recorder.action("forwarding-observed", host=host, packets=delta)
                break
            time.sleep(0.02)
    except (OSError, IndexError) as err:
        out["error"] = str(err)
    return out


def observe_recovery(driver: Driver, instruments: Instruments, tb: Testbed) -> dict[str, Any]:
    """After a failed migration: does the router still run on R1, and does it still forward?
    Observed from R1's right-hand tap (frames the router sends toward B)."""
    running = driver.source_running()
    out: dict[str, Any] = {"source_running": running, "forwarding_on_R1": False}
    if not running or instruments.s.rate_bps == 0:
        return out
    try:
        before = rx_packets(tb.ns("R1"), "tapR")
        deadline = time.monotonic() + RECOVERY_OBSERVE_S
        while time.monotonic() < deadline:
            delta = rx_packets(tb.ns("R1"), "tapR") - before
            if delta >= 10:
                out.update(forwarding_on_R1=True, packets_observed=delta)
                break
            time.sleep(0.05)
    except (OSError, IndexError) as err:
        out["error"] = str(err)
    log.info("after the failed migration: source running=%s, forwarding on R1=%s", running, out["forwarding_on_R1"])
    return out


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
