"""``make calibrate``: the downtime estimators against outages of known duration, no migration.

The testbed, router and instruments of ``make migrate`` (Registry, TestbedBuilder, the driver,
Instruments, Recorder) run as usual; then, under the cross-traffic, the router's forwarding path
is interrupted ``REPS`` times for each of ``DURATIONS`` ms:

* ``cut``: R1's bridge port of the router's right-hand interface (``tapR`` on ``brR``) is set to
  the bridge's *disabled* state and back to *forwarding* (IFLA_BRPORT_STATE, one RTM_SETLINK
  netlink request each, from a socket the orchestrator keeps open in R1's namespace: no process
  starts inside the outage).  The router keeps running; only the network path is cut.
* ``pause``: the hypervisor pauses the router itself (the driver's ``pause``/``resume``: QMP
  ``stop``/``cont``, ``virDomainSuspend``/``Resume``, the cgroup v2 freezer, ``xl pause``).

Each edge is timestamped (CLOCK_REALTIME ns, the clock of every trace) immediately before and
after its command and written to ``actions.jsonl``; events follow each other only once the
router was seen forwarding again and ``SPACING_S`` has passed, in a seeded random order of the
durations per repetition.  :mod:`analysis.metrics.calibration` then compares every estimator with every
event (``calibration.csv``, ``calibration_events.csv``).

On a lab (``TESTBED=``) the same run drives the inventory's hosts over SSH, as ``make migrate``
does: the cut is the same RTM_SETLINK request on R1's tap (the inventory's ``taps.R``), sent by a
small standard-library program that R1 runs for the whole run on one SSH session, reading one
request per line on stdin and answering each with the kernel's acknowledgement (so an edge's
bracket is one round trip on an open channel, no process start); B's receive counter is read
over SSH."""

from __future__ import annotations

import collections
import contextlib
import logging
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from analysis.metrics.calibration import PRIME_KIND
from migrate.core import meta as metamod
from migrate.core.errors import ConfigError, DependencyError, VrmigError
from migrate.core.progress import Progress
from migrate.core.registry import Registry
from migrate.core.runctx import open_run
from migrate.core.rundir import KIND_CALIBRATE, write_meta
from migrate.core.sighold import Abort, Teardown
from migrate.core.units import format_rate
from migrate.drivers.base import Driver, RunContext
from migrate.experiment import peering
from migrate.experiment.instruments import FORWARD_MIN_PACKETS, Instruments
from migrate.experiment.peering import Peers
from migrate.experiment.place import Embedded, Place, place_for
from migrate.model.recorder import Recorder
from migrate.model.scenario import DRIVERS, HVS, Scenario
from migrate.model.variables import default
from migrate.testbed.bridgeport import LabPortCut, LabRxPackets, PortCut, RxPackets
from migrate.testbed.builder import Testbed, new_prefix
from migrate.testbed.results import check_results_root, new_run_dir

log = logging.getLogger(__name__)

KINDS = ("cut", "pause")
EDGE_ACTIONS = {"cut": ("cut", "restore"), "pause": ("pause", "resume")}
MIN_DURATION_MS, MAX_DURATION_MS = 1.0, 10_000.0
MAX_REPS = 100
DEFAULT_DURATIONS_MS = (20.0, 50.0, 100.0, 200.0, 500.0)
#: HV=xen: the nested router forwards ~10 Mbit/s of 1500 B frames without loss
#: (docs/measurements/2026-11-23-xen-baseline.md)
XEN_DEFAULT_RATE_BPS = 10_000_000
XEN_BOOT_TIMEOUT_S = 300.0
SPACING_S = 1.0  # normal forwarding between one event's end (forwarding seen again) and the next
FORWARD_TIMEOUT_S = 15.0  # the router must forward again this soon after an event
FORWARD_POLL_S = 0.002
MIN_FORWARD_WINDOW_S = 0.02
WARMUP_TIMEOUT_S = 30.0
#: PEERING: how long every session may take to be up again after an event (BFD down, BGP after
#: it: the peers' 1 s error wait, then OPEN), and the allowance per event in the probes' duration
SESSIONS_UP_TIMEOUT_S = 30.0
PEERING_RECOVERY_S = 10.0
#: PEERING: how many times the wait for sessions and forwarding is repeated when a session went
#: down during the spacing after it (a down the peers logged only after the end edge)
SETTLE_ROUNDS = 3
#: the priming cut before the planned events (:meth:`Calibrator._prime`); its records' kind is
#: the analysis' PRIME_KIND
PRIME_MS = 50.0
#: before each event a seeded random delay, uniform in [0, PHASE_MAX_S), puts its start edge at an
#: independent phase of every periodic process near the stream: the generator's send quantum
#: (0.5 ms), the kernel's tick (4 ms at HZ=250), the counter sampling period (10 ms) and the
#: router's own forwarding batches.  Without it each event started one fixed SPACING_S after B was
#: seen forwarding, so the events of a run could share one phase and one edge error: three cuts of
#: a CI run erred by 2.89, 2.91 and 2.92 ms, which made a row's majority rule one draw, not three
PHASE_MAX_S = 0.010
CUT_PORT = "tapR"  # R1's bridge port of the router's right-hand interface (toward B)


@dataclass(frozen=True)
class CalibrationSpec:
    """One calibration run (every field is recorded in meta.json)."""

    hv: str = "kvm"
    driver: str = "qmp"
    kinds: tuple[str, ...] = KINDS
    durations_ms: tuple[float, ...] = DEFAULT_DURATIONS_MS
    reps: int = 5
    rate_bps: int = 100_000_000
    frame_bytes: int = 1500
    #: the router guest's settings, with make migrate's defaults (migrate.model.variables), checked by
    #: the Scenario of scenario()
    router: str = default("router")
    accel: str = default("accel")
    mem_mib: int = default("mem_mib")
    sample_ms: int = 10
    boot_timeout_s: float = 120.0
    seed: int = 1
    #: routing peers on both segments (``PEERING=``, docs/peering.md): "" none, "bgp" or "bgp,bfd"
    peering: str = ""
    bfd_interval_ms: int = 50
    bfd_multiplier: int = 3
    bgp_hold_s: int = 9

    def __post_init__(self) -> None:
        validate(self)

    @property
    def name(self) -> str:
        """Results directory suffix, from the parameters."""
        hv = self.hv if self.driver == "qmp" else f"{self.hv}-{self.driver}"
        peers = f"-{self.peering.replace(',', '+')}" if self.peering else ""
        return f"calibrate-{hv}-{'+'.join(self.kinds)}-{format_rate(self.rate_bps)}-{self.frame_bytes}{peers}"

    def planned_s(self) -> float:
        """A generous estimate of the event phase's length (for the probes' duration)."""
        n = len(self.kinds) * len(self.durations_ms) * self.reps
        recovery = PEERING_RECOVERY_S if self.peering else 1.0
        return sum(self.durations_ms) / 1e3 * len(self.kinds) * self.reps + n * (SPACING_S + recovery) + 30.0

    def scenario(self) -> Scenario:
        """The Scenario the driver and the instruments are built from (no migration happens;
        HV=criu: stop-and-copy, whose checks need no soft-dirty tracking)."""
        total = self.planned_s()
        return Scenario(
            hv=self.hv, driver=self.driver, mode="stopcopy" if self.hv == "criu" else "precopy",
            rate_bps=self.rate_bps, frame_bytes=self.frame_bytes,
            duration_s=total, migrate_at_s=total / 2, sample_ms=self.sample_ms, mem_mib=self.mem_mib,
            router=self.router, accel=self.accel, boot_timeout_s=self.boot_timeout_s, peering=self.peering,
            bfd_interval_ms=self.bfd_interval_ms, bfd_multiplier=self.bfd_multiplier, bgp_hold_s=self.bgp_hold_s,
        )  # fmt: skip


def validate(spec: CalibrationSpec) -> None:
    """ConfigError with one actionable line for the first invalid parameter."""
    if spec.hv not in HVS:
        raise ConfigError(f"HV={spec.hv!r} is not supported: choose one of {', '.join(HVS)}")
    if spec.driver not in DRIVERS:
        raise ConfigError(f"DRIVER={spec.driver!r} is unknown: choose one of {', '.join(DRIVERS)}")
    if not spec.kinds or any(k not in KINDS for k in spec.kinds):
        raise ConfigError(f"KIND={','.join(spec.kinds)!r} is unknown: choose cut, pause or cut,pause")
    for d in spec.durations_ms:
        if not MIN_DURATION_MS <= d <= MAX_DURATION_MS:
            raise ConfigError(
                f"DURATIONS={d:g} ms is outside {MIN_DURATION_MS:g} ms-{MAX_DURATION_MS / 1e3:g} s: "
                "give outage lengths in ms, e.g. 20,50,100,200,500"
            )
    if not 1 <= spec.reps <= MAX_REPS:
        raise ConfigError(f"REPS={spec.reps} must be between 1 and {MAX_REPS}")
    if spec.rate_bps <= 0:
        raise ConfigError(f"RATE={spec.rate_bps}: a calibration needs cross-traffic (the estimators measure it)")
    if "ospf" in spec.peering.split(","):
        raise ConfigError(
            f"PEERING={spec.peering}: make calibrate judges BGP and BFD sessions; use PEERING=bgp or bgp,bfd"
        )
    spec.scenario()  # SIZE, ROUTER, ACCEL, MEM, SAMPLE_MS, DRIVER/HV combinations: the Scenario's own checks


def parse_durations(text: str) -> tuple[float, ...]:
    """``20,50,100`` -> (20.0, 50.0, 100.0) ms, duplicates removed, in the given order."""
    items = [t.strip() for t in text.split(",")]
    if not text.strip() or any(not t for t in items):
        raise ConfigError(f"DURATIONS={text!r} must be a comma-separated list of ms without empty items, e.g. 20,50")
    out: list[float] = []
    for t in items:
        try:
            value = float(t)
        except ValueError:
            raise ConfigError(f"DURATIONS={t!r} is not a number of milliseconds") from None
        if value not in out:
            out.append(value)
    return tuple(out)


def parse_kinds(text: str) -> tuple[str, ...]:
    """``cut``, ``pause``, ``cut,pause`` (or ``both``) -> kinds in canonical order."""
    items = {t.strip() for t in text.split(",")}
    if items == {"both"}:
        return KINDS
    unknown = items - set(KINDS)
    if unknown or not items:
        raise ConfigError(f"KIND={text!r} is unknown: choose cut, pause or cut,pause")
    return tuple(k for k in KINDS if k in items)


def check_pause_capability(spec: CalibrationSpec, place: Place | None = None) -> type[Driver]:
    """The driver class (in its form for ``place``; default: the embedded testbed); ConfigError
    (nothing started) if pauses are asked of one without them."""
    driver_cls = (place if place is not None else Embedded()).driver(spec.hv, spec.driver)
    unavailable = getattr(driver_cls, "pause_unavailable", None)
    if "pause" in spec.kinds and unavailable:
        raise ConfigError(f"KIND=pause: {unavailable}: use KIND=cut")
    if "pause" in spec.kinds and not callable(getattr(driver_cls, "pause", None)):
        hv = spec.hv if spec.driver == "qmp" else f"{spec.hv} DRIVER={spec.driver}"
        raise ConfigError(f"KIND=pause: HV={hv} has no way to pause the router here: use KIND=cut")
    return driver_cls


@dataclass(frozen=True)
class Planned:
    """One event to run."""

    index: int
    kind: str
    nominal_ms: float
    rep: int


def plan(spec: CalibrationSpec) -> list[Planned]:
    """Per repetition and kind, every duration once, in a seeded random order."""
    rng = random.Random(spec.seed)
    out: list[Planned] = []
    for rep in range(spec.reps):
        for kind in spec.kinds:
            durations = list(spec.durations_ms)
            rng.shuffle(durations)
            out += [Planned(len(out) + i, kind, d, rep) for i, d in enumerate(durations)]
    return out


def forward_window_s(spec: CalibrationSpec) -> float:
    """PEERING: the time within which B must receive ``FORWARD_MIN_PACKETS`` for the router to
    count as forwarding again: that many packets at half the cross-traffic's packet rate, and
    at least ``MIN_FORWARD_WINDOW_S`` (the counter's polling)."""
    pps = spec.rate_bps / (spec.frame_bytes * 8)
    return max(FORWARD_MIN_PACKETS / (0.5 * pps), MIN_FORWARD_WINDOW_S)


def _sleep_until_ns(t_ns: int) -> None:
    """Wait for a scheduled instant (an event's planned end: a schedule, not a readiness wait)."""
    while (left := t_ns - time.time_ns()) > 0:
        time.sleep(min(left / 1e9, 0.1))


class Calibrator:
    """The run: testbed, router, instruments, then the planned events, then teardown."""

    def __init__(
        self,
        spec: CalibrationSpec,
        driver_cls: type[Driver],
        facts: dict[str, Any],
        run_dir: Path,
        place: Place | None = None,
    ) -> None:
        self.spec, self.driver_cls, self.facts, self.run_dir = spec, driver_cls, facts, run_dir
        self.place = place if place is not None else Embedded()
        self.testbed_stack = contextlib.ExitStack()
        self.scenario = spec.scenario()
        self.registry = Registry(new_prefix(), run_dir=str(run_dir.resolve()))
        self.tb: Testbed | None = None
        self.driver: Driver | None = None
        self.instruments: Instruments | None = None
        self.peers: Peers | None = None
        self.port: PortCut | LabPortCut | None = None
        self.rx_b: RxPackets | LabRxPackets | None = None
        self.active: Planned | None = None  # the event whose path is cut or paused right now
        self.end_half_ns = {k: 0 for k in KINDS}  # last half-width of each kind's end edge
        self.phase_rng = random.Random(f"phase-{spec.seed}")

    def execute(self, meta: dict[str, Any], abort: Abort) -> None:
        """Everything up to and including the last event; the caller tears down (``teardown``)."""
        self.recorder = Recorder(self.run_dir)
        self.registry.open()
        self.tb = tb = self.testbed_stack.enter_context(self.place.open(self.registry))
        meta["testbed"] = tb.describe()
        ctx = RunContext(self.scenario, tb, self.registry, self.run_dir, self.recorder, abort, None)
        self.driver = self.driver_cls(ctx, self.facts)
        write_meta(self.run_dir, meta)
        tb.build(self.registry)
        if self.scenario.peering:
            log.info("starting routing peers (%s)", self.scenario.peering)
            self.peers = Peers(self.scenario, tb, self.registry, self.run_dir)
            self.peers.start()
        log.info("starting the router (%s, %s, accel=%s)", self.spec.router, self.spec.hv, meta["accel"])
        self.driver.start_source()
        if self.peers is not None:
            self.peers.wait_established()
            meta["peering"] = self.peers.describe()
            write_meta(self.run_dir, meta)
        self.instruments = Instruments(self.scenario, tb, self.registry, self.run_dir, self.recorder)
        self.instruments.start()
        meta["instruments"] = self.instruments.describe()
        write_meta(self.run_dir, meta)
        self.instruments.wait_forwarding(timeout_s=WARMUP_TIMEOUT_S)
        if "cut" in self.spec.kinds:
            self.port = tb.port_cut("R1", tb.router_port("R1", "R", self.spec.hv), self.registry)
        prepare: Callable[[], None] | None = getattr(self.driver, "prepare_pause", None)
        if "pause" in self.spec.kinds and prepare is not None:
            prepare()
        if self.port is not None:
            self._prime()
        events = plan(self.spec)
        time.sleep(SPACING_S)  # schedule: normal forwarding before the first event
        with Progress("calibrate", len(events), "events") as progress:
            for i, ev in enumerate(events):
                log.info("event %d/%d: %s %g ms (rep %d)", i + 1, len(events), ev.kind, ev.nominal_ms, ev.rep + 1)
                progress.start(f"{ev.kind} {ev.nominal_ms:g} ms (rep {ev.rep + 1})")
                self._event(ev)
                self._recovered(ev)
                progress.finish()
        dead = self.instruments.dead()
        if dead:
            raise VrmigError(f"instrument died during the calibration: {dead}")
        self.instruments.stop()
        tb.finish(meta, self.run_dir)
        meta["hypervisor"].update(self.driver.describe())

    def _prime(self) -> None:
        """One cut of :data:`PRIME_MS` before the planned events, never judged: the first state
        change of the bridge port lets B receive again later after its restore than every later
        one does (measured: docs/measurements/2026-12-06-calibration-targets.md, "The first
        cut"), so the first planned cut would carry an outage longer than its edges say.  Its
        records have ``kind`` "prime"; the analysis starts the first event's search after its
        recovery (analysis.metrics.calibration.primed_ns)."""
        port = self.port
        assert port is not None
        t0 = time.time_ns()
        port.cut()
        restored = False
        try:
            t1 = time.time_ns()
            self.recorder.action("prime-cut", t_ns=t0, before_ns=t0, after_ns=t1, kind=PRIME_KIND, nominal_ms=PRIME_MS)
            _sleep_until_ns(t0 + (t1 - t0) // 2 + int(PRIME_MS * 1e6))
            t2 = time.time_ns()
            port.restore()
            restored = True
            t3 = time.time_ns()
            self.recorder.action(
                "prime-restore", t_ns=t2, before_ns=t2, after_ns=t3, kind=PRIME_KIND, nominal_ms=PRIME_MS
            )
        finally:
            if not restored:  # interrupted: the port forwards again before anything else is torn down
                port.restore()
                self.recorder.action("prime-restore", kind=PRIME_KIND, reason="teardown")
        self._forwarding_again(Planned(-1, PRIME_KIND, PRIME_MS, 0))

    def _edge(self, ev: Planned, which: int, fn: Callable[[], None], **extra: Any) -> tuple[int, int]:
        """Run one edge's command between two timestamps and record it (``which``: 0 start, 1 end;
        after an end edge no event is active any more)."""
        t0 = time.time_ns()
        fn()
        t1 = time.time_ns()
        if which == 1:
            self.active = None
        self.recorder.action(
            EDGE_ACTIONS[ev.kind][which], t_ns=t0, before_ns=t0, after_ns=t1, index=ev.index, kind=ev.kind,
            nominal_ms=ev.nominal_ms, rep=ev.rep, **extra,
        )  # fmt: skip
        return t0, t1

    def _actions(self, kind: str) -> tuple[Callable[[], None], Callable[[], None]]:
        if kind == "cut":
            assert self.port is not None
            return self.port.cut, self.port.restore
        assert self.driver is not None
        return self.driver.pause, self.driver.resume  # type: ignore[attr-defined]

    def _event(self, ev: Planned) -> None:
        """Start edge, hold until mid(start) + nominal − (expected half of the end edge), end edge."""
        do, undo = self._actions(ev.kind)
        phase_s = self.phase_rng.uniform(0.0, PHASE_MAX_S)
        time.sleep(phase_s)  # schedule: the event's random phase (PHASE_MAX_S)
        self.active = ev
        t0, t1 = self._edge(ev, 0, do, phase_ms=round(phase_s * 1e3, 3))
        _sleep_until_ns(t0 + (t1 - t0) // 2 + int(ev.nominal_ms * 1e6) - self.end_half_ns[ev.kind])
        t2, t3 = self._edge(ev, 1, undo)
        self.end_half_ns[ev.kind] = (t3 - t2) // 2

    def _recovered(self, ev: Planned) -> None:
        """After an event: (PEERING) every session up again, then the router forwarding again,
        then ``SPACING_S`` of normal forwarding.  The router forwards for a moment right after a
        resume before its BGP session drops, so the sessions come first; a session the peers
        saw go down only during the spacing (the silence ended after the end edge, and the
        detection timer ran out after it) starts the wait again."""
        if self.peers is None:
            self._forwarding_again(ev)
            time.sleep(SPACING_S)  # schedule: normal forwarding before the next event
            return
        what = f"{ev.kind} {ev.nominal_ms:g} ms (event {ev.index})"
        for _ in range(SETTLE_ROUNDS):
            up = self.peers.wait_sessions_up(SESSIONS_UP_TIMEOUT_S, what)
            self.recorder.action("sessions-up", index=ev.index, up_ns=up.up_ns, flaps_seen=up.flaps)
            self._forwarding_again(ev)
            time.sleep(SPACING_S)  # schedule: normal forwarding before the next event
            now = self.peers.sessions_up()
            if now is not None and now.flaps == up.flaps:
                return
        raise VrmigError(f"the routing sessions kept going down after {what} ({SETTLE_ROUNDS} rounds)")

    def _forwarding_again(self, ev: Planned) -> None:
        """Observe B's eth0 receive counter grow by a few packets (the router forwards again).

        With PEERING the router also sends B control packets (BFD every interval, BGP), which
        the counter counts alike: there the packets must arrive within
        :func:`forward_window_s`, at half the cross-traffic's packet rate or more, which the
        control packets alone do not reach."""
        if self.rx_b is None:
            assert self.tb is not None
            self.rx_b = self.tb.rx_counter("B", self.tb.host_if("B"))
        window = forward_window_s(self.spec) if self.spec.peering else None
        readings = collections.deque([(time.monotonic(), self.rx_b.read())])
        deadline = readings[0][0] + FORWARD_TIMEOUT_S
        while True:
            now, count = time.monotonic(), self.rx_b.read()
            readings.append((now, count))
            while window is not None and readings[0][0] < now - window:
                readings.popleft()
            if count - readings[0][1] >= FORWARD_MIN_PACKETS:
                break
            if now > deadline:
                raise VrmigError(
                    f"the router did not forward again within {FORWARD_TIMEOUT_S:.0f} s after "
                    f"{ev.kind} {ev.nominal_ms:g} ms (event {ev.index})"
                )
            time.sleep(FORWARD_POLL_S)
        self.recorder.action("forwarding-observed", host="B", index=ev.index, kind=ev.kind)

    def teardown(self) -> list[str]:
        """Undo an interrupted cut or pause, stop everything, remove what was registered."""
        steps: list[tuple[str, Callable[[], Any] | None]] = []
        if self.active is not None:
            ev = self.active
            _, undo = self._actions(ev.kind)
            steps.append((f"end the interrupted {ev.kind}", lambda: self._edge(ev, 1, undo, reason="teardown")))
        steps += [
            ("stop instruments", self.instruments.kill if self.instruments is not None else None),
            ("stop routing peers", self.peers.stop if self.peers is not None else None),
            ("close netlink socket", self.port.close if self.port is not None else None),
            ("close B's counters", self.rx_b.close if self.rx_b is not None else None),
            ("stop hypervisor", self.driver.stop if self.driver is not None else None),
            ("remove freezer", getattr(self.driver, "release_pause", None)),
            ("leave the testbed", self.testbed_stack.close),
            ("close recorder", self.recorder.close if hasattr(self, "recorder") else None),
        ]
        td = Teardown()  # a failed step is recorded and the teardown goes on: the registry removes the rest
        for step, fn in steps:
            td.call(step, fn)
        return td.problems + self.registry.teardown()


def _run_dir(results_root: Path, spec: CalibrationSpec, fill: Callable[[Path], None] | None = None) -> Path:
    return new_run_dir(results_root, spec.name, "calibration", fill)


def dependencies(spec: CalibrationSpec, driver_cls: type[Driver]) -> dict[str, Any]:
    """Root, the instruments and the driver's dependencies (exit 3), without side effects;
    returns the driver's facts (versions, accelerator)."""
    import os

    if os.geteuid() != 0:
        raise DependencyError("make calibrate must run as root (it creates network namespaces): run it as root")
    Instruments.check()
    peering.check(spec.scenario())
    return driver_cls.preflight(spec.scenario())


def place_checks(spec: CalibrationSpec, testbed: Path | None) -> tuple[Place, type[Driver]]:
    """Where the calibration runs (``testbed``: a lab's inventory, checked as ``make migrate
    TESTBED=`` checks it) and its driver class, pause capability checked; bad input or an
    unready host: one line, nothing started."""
    place = place_for(testbed)
    place.admit(spec.scenario())
    driver_cls = check_pause_capability(spec, place)
    x = place.inventory.host("R1").xen
    if spec.hv == "xen" and x is not None and "cut" in spec.kinds and "R" not in x.taps:
        raise ConfigError(
            f"{testbed}: hosts.R1.xen: KIND=cut on a Xen host needs `taps` (the host's interfaces that carry "
            "dom0's NICs; the right-hand one is cut): add them or use KIND=pause"
        )
    place.preflight()
    return place, driver_cls


def run_calibration(spec: CalibrationSpec, results_root: Path, testbed: Path | None = None) -> Path:
    """Run the calibration and analyse it (``testbed``: on that lab's hosts); returns the results
    directory.  Every check comes before anything is created: the lab's inventory, pause
    capability and RESULTS (exit 2), dependencies (exit 3)."""
    place, driver_cls = place_checks(spec, testbed)
    check_results_root(results_root)
    facts = place.facts(spec.scenario(), dependencies(spec, driver_cls))

    def describe(meta: dict[str, Any], _run_dir: Path) -> None:
        meta.update(calibration=asdict(spec), scenario=spec.scenario().to_dict(), method=_method(spec))
        meta.update(clock=metamod.clock_fields(), hypervisor=dict(facts), accel=facts.get("accel"))
        place.describe(meta)

    # no failure class: a calibration has no migration phases
    with open_run(KIND_CALIBRATE, lambda fill: _run_dir(results_root, spec, fill), describe, logger=log,
                  analyse=_analyse) as opened:  # fmt: skip
        meta = opened.meta
        cal = Calibrator(spec, driver_cls, facts, opened.dir, place)
        try:
            cal.execute(meta, opened.abort)
            opened.complete()
        finally:
            opened.abort.armed = False  # a signal from here on is recorded, not raised: teardown must finish
            problems = cal.teardown()
            if problems:
                meta["teardown_problems"] = problems
    return opened.dir


def _method(spec: CalibrationSpec) -> dict[str, str]:
    pause = {
        ("kvm", "qmp"): "QMP stop / cont on R1's QEMU",
        ("kvm", "libvirt"): "virDomainSuspend / virDomainResume through R1's libvirtd",
        ("criu", "qmp"): "cgroup v2 freezer (cgroup.freeze 1 / 0, until cgroup.events reports it) of the container",
        ("xen", "qmp"): "xl pause / xl unpause in R1's dom0 (over the dom0 agent; on a lab's Xen hosts over SSH)",
    }
    return {
        "cut": f"R1 {CUT_PORT} (bridge port of the router's right-hand interface on brR): IFLA_BRPORT_STATE "
        "disabled / forwarding, one RTM_SETLINK (AF_BRIDGE) netlink request each from the orchestrator",
        "pause": pause.get((spec.hv, spec.driver), "the driver's pause() / resume()"),
        "edges": "CLOCK_REALTIME ns immediately before the command and after it returned (netlink ack, QMP reply, "
        "libvirt call, freezer state, xl exit); true duration = mid(end) - mid(start)",
        "spacing": f"{SPACING_S} s of normal forwarding after the router was seen forwarding again, then a random "
        f"phase uniform in [0, {PHASE_MAX_S * 1e3:g}) ms (seed {spec.seed}; each start edge's phase_ms)",
        "prime": f"with cuts: one cut of {PRIME_MS:g} ms before the first event, not judged (the bridge port's first "
        "restore lets B receive later than every later one)",
        "order": f"per repetition and kind, the durations in a random order (seed {spec.seed})",
    }


def _analyse(run_dir: Path) -> None:
    try:
        from analysis.metrics.calibration import analyse_dir

        analyse_dir(run_dir)
    except Exception as err:  # analysis must never lose the raw data
        log.exception(
            "analysis failed: %s (raw data kept; re-run `python -m analysis.metrics.calibration %s`)",
            err,
            run_dir,
        )
