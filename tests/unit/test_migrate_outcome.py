"""How a run's outcome is decided (no root): failure classes by phase, the proof that the router
forwards after the migration (cross-traffic sent after the completion reached B; RTT probes at
RATE=0), the instruments' CPU time, and post-completion faults.

Fakes stand in for the driver and the instruments; sink.json/state objects written here are
SYNTHETIC; the irtt trace is a real capture (tests/fixtures/probes)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from migrate.core import registry as regmod
from migrate.core.errors import Interrupted, MigrationError, TestbedError
from migrate.core.runctx import record_failure, record_interrupted
from migrate.drivers.base import MigrationOutcome
from migrate.experiment import proof as proofmod
from migrate.experiment import run as runmod
from migrate.experiment.run_progress import Phase
from migrate.model.faults import FaultInjector
from migrate.model.scenario import Scenario

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
T_COMPLETED = 1_800_000_000_000_000_000


class FakeDriver:
    """A driver whose migrate() returns or raises what it is told."""

    def __init__(self, outcome: MigrationOutcome | Exception, source_running: bool = True) -> None:
        self.outcome, self.running = outcome, source_running

    def migrate(self) -> MigrationOutcome:
        if isinstance(self.outcome, Exception):
            raise self.outcome
        return self.outcome

    def source_running(self) -> bool:
        return self.running


class FakeInstruments:
    """Instruments whose sink state and liveness are scripted."""

    def __init__(
        self, rate_bps: int, states: list[dict[str, Any] | None], dead: str | None = None, a_clock=lambda r: (0, 0)
    ) -> None:
        self.s = SimpleNamespace(rate_bps=rate_bps)
        # default: the embedded testbed, one clock
        self.tb = SimpleNamespace(offset_ns=a_clock, clock_offsets=lambda roles: {})
        self.states, self.dead_what = list(states), dead
        self.after_ns: int | None = None
        self.actions: list[tuple[str, dict[str, Any]]] = []
        self.rec = SimpleNamespace(action=lambda name, **kw: self.actions.append((name, kw)))
        self.probes = iter([100, 101, 102, 104, 110])

    def dead(self) -> str | None:
        return self.dead_what

    def mark_after(self, t_ns: int) -> None:
        self.after_ns = t_ns

    def sink_state(self) -> dict[str, Any] | None:
        return self.states.pop(0) if len(self.states) > 1 else self.states[0]

    def probes_at_d(self) -> int | None:
        return next(self.probes, 110)


def _state(after: dict[str, Any] | None = None, max_tx_ns: int = 0) -> dict[str, Any]:
    """A vrsink --state object (SYNTHETIC)."""
    return {"t_ns": 0, "packets": 10, "received": 10, "last_rx_ns": 0,
            "max_tx": {"seq": 9, "tx_ns": max_tx_ns, "rx_ns": max_tx_ns + 1000}, "after": after}  # fmt: skip


def _after(packets: int, tx_ns: int = T_COMPLETED + 500_000) -> dict[str, Any]:
    return {"threshold_ns": T_COMPLETED, "read_ns": T_COMPLETED + 10**7, "packets": packets, "complete": True,
            "first": {"seq": 4242, "tx_ns": tx_ns, "rx_ns": tx_ns + 80_000} if packets else None}  # fmt: skip


def _migrate(tmp_path, monkeypatch, driver, instruments, mode="precopy"):
    """Run the migration phase of migrate.experiment.run with fakes; returns (meta, phase)."""
    monkeypatch.setattr(proofmod, "AFTER_MIGRATION_OBSERVE_S", 0.2)
    monkeypatch.setattr(proofmod, "RECOVERY_OBSERVE_S", 0.2)
    monkeypatch.setattr(proofmod, "completion_ns", lambda run_dir, s, returned: (T_COMPLETED, "window end (event)"))
    meta: dict[str, Any] = {"status": "running", "failure": None, "failure_class": None, "hypervisor": {}}
    phase = Phase()
    s = Scenario(mode=mode, rate_bps=instruments.s.rate_bps)
    proofmod.Proof(s, instruments, tmp_path, meta, phase).migrate(driver)
    return meta, phase


# ---------------------------------------------------------------- failure classes


def test_failed_migration_is_class_migration_and_recovery_uses_sent_after_failure(tmp_path, monkeypatch):
    now = time.time_ns()
    inst = FakeInstruments(10_000_000, [_state(max_tx_ns=now - 10**9), _state(max_tx_ns=now + 10**9)])
    meta, phase = _migrate(tmp_path, monkeypatch, FakeDriver(MigrationError("migration did not complete")), inst)
    assert (meta["status"], meta["failure_class"], phase.current) == ("failed", "migration", "migration")
    assert meta["failure"] == "migration did not complete"
    rec = meta["recovery"]
    # the first state's highest send stamp predates the failure: only the second proves forwarding
    assert rec["source_running"] is True and rec["forwarding_on_R1"] is True and rec["sent_ns"] == now + 10**9


def test_recovery_not_claimed_from_packets_sent_before_the_failure(tmp_path, monkeypatch):
    inst = FakeInstruments(10_000_000, [_state(max_tx_ns=time.time_ns() - 10**9)])
    meta, _ = _migrate(tmp_path, monkeypatch, FakeDriver(MigrationError("cancelled")), inst)
    assert meta["recovery"]["forwarding_on_R1"] is False


def test_recovery_puts_a_labs_send_stamps_on_this_machines_clock(tmp_path, monkeypatch):
    """A lab's A runs 5 s ahead: its stamp 1 s past the failure on its own clock was sent 4 s
    before it on this one; a stamp within A's offset uncertainty of the failure is not enough."""
    now = time.time_ns()
    ahead = lambda role: (5 * 10**9, 2 * 10**6)  # noqa: E731
    inst = FakeInstruments(10_000_000, [_state(max_tx_ns=now + 10**9)], a_clock=ahead)
    meta, _ = _migrate(tmp_path, monkeypatch, FakeDriver(MigrationError("cancelled")), inst)
    assert meta["recovery"]["forwarding_on_R1"] is False
    inst = FakeInstruments(10_000_000, [_state(max_tx_ns=now + 5 * 10**9 + 10**6)], a_clock=ahead)
    meta, _ = _migrate(tmp_path, monkeypatch, FakeDriver(MigrationError("cancelled")), inst)
    assert meta["recovery"]["forwarding_on_R1"] is False  # inside the 2 ms uncertainty
    inst = FakeInstruments(10_000_000, [_state(max_tx_ns=now + 6 * 10**9)], a_clock=ahead)
    meta, _ = _migrate(tmp_path, monkeypatch, FakeDriver(MigrationError("cancelled")), inst)
    rec = meta["recovery"]
    assert rec["forwarding_on_R1"] is True and rec["a_offset_ns"] == 5 * 10**9, rec


def test_recovery_with_an_unmeasured_clock_of_a_is_unknown_not_false(tmp_path, monkeypatch):
    def unmeasured(role: str) -> tuple[int, int]:
        raise ValueError(f"no clock measurement of {role}")

    inst = FakeInstruments(10_000_000, [_state(max_tx_ns=time.time_ns() + 10**9)], a_clock=unmeasured)
    meta, _ = _migrate(tmp_path, monkeypatch, FakeDriver(MigrationError("cancelled")), inst)
    rec = meta["recovery"]
    assert rec["forwarding_on_R1"] is None and "no clock measurement of A" in rec["reason"], rec


def test_outcome_not_completed_without_exception_is_a_failed_migration(tmp_path, monkeypatch):
    """A driver may report failure in its outcome (HV=openvz) instead of raising."""
    inst = FakeInstruments(10_000_000, [_state()])
    driver = FakeDriver(MigrationOutcome(completed=False, failure="vzmigrate exited 1"), source_running=False)
    meta, _ = _migrate(tmp_path, monkeypatch, driver, inst)
    assert (meta["status"], meta["failure_class"], meta["failure"]) == ("failed", "migration", "vzmigrate exited 1")
    assert "after_migration" not in meta


def test_completed_but_nothing_sent_after_completion_reaches_b_is_post_migration(tmp_path, monkeypatch):
    """The hypervisor says completed; the sink sees packets, but none sent after the completion."""
    inst = FakeInstruments(10_000_000, [None, _state(_after(0), max_tx_ns=T_COMPLETED - 1)])
    meta, phase = _migrate(tmp_path, monkeypatch, FakeDriver(MigrationOutcome(completed=True)), inst)
    assert inst.after_ns == T_COMPLETED  # vrsink was given the completion time
    assert (meta["status"], meta["failure_class"], phase.current) == ("failed", "post-migration", "post-migration")
    assert "did not forward from R2" in meta["failure"] and "no cross-traffic packet sent after" in meta["failure"]
    assert meta["after_migration"]["forwarding"] is False and meta["after_migration"]["live"]["seen"] is False


def test_completed_and_forwarding_records_the_first_packet_sent_after(tmp_path, monkeypatch):
    inst = FakeInstruments(10_000_000, [_state(None), _state(_after(0)), _state(_after(3))])
    meta, phase = _migrate(tmp_path, monkeypatch, FakeDriver(MigrationOutcome(completed=True)), inst)
    assert meta["status"] == "running" and meta["failure_class"] is None and phase.current == "post-migration"
    after = meta["after_migration"]
    assert after["forwarding"] is True and after["proof"] == "cross-traffic"
    assert (after["completed_ns"], after["completed_source"]) == (T_COMPLETED, "window end (event)")
    live = after["live"]
    assert live["first_sent_ns"] == T_COMPLETED + 500_000 and live["first_received_ns"] == T_COMPLETED + 580_000
    assert live["packets"] == 3 and live["first_seq"] == 4242
    assert inst.actions[0][0] == "forwarding-observed"


class TimedInstruments(FakeInstruments):
    """The sink sees a packet sent after the completion only ``forward_after_s`` after the first
    read (SYNTHETIC): a router that forwards again only once its routing sessions are back."""

    def __init__(self, forward_after_s: float) -> None:
        super().__init__(10_000_000, [])
        self.t0: float | None = None
        self.forward_after_s = forward_after_s

    def sink_state(self) -> dict[str, Any] | None:
        self.t0 = self.t0 or time.monotonic()
        late = time.monotonic() - self.t0 >= self.forward_after_s
        return _state(_after(3 if late else 0))


def _peers_down_for(seconds: float) -> Any:
    """A sessions_down reading that says "down" for ``seconds`` after its first call."""
    calls: list[float] = []

    def down() -> bool:
        calls.append(time.monotonic())
        return calls[-1] - calls[0] < seconds

    return down


def test_forwarding_waits_for_routing_sessions_that_are_down(monkeypatch):
    """The base window (0.2 s) passes while a session is down; the router forwards 0.4 s in,
    0.1 s after the sessions came back: seen, with when they were last down."""
    monkeypatch.setattr(proofmod, "AFTER_MIGRATION_OBSERVE_S", 0.2)
    monkeypatch.setattr(proofmod, "SESSIONS_POLL_S", 0.01)
    down = _peers_down_for(0.3)
    live = proofmod.observe_forwarding(TimedInstruments(0.4), T_COMPLETED, None, down)
    assert live["seen"] is True and 0.38 <= live["seen_after_s"] < 0.49, live
    assert 0.25 <= live["sessions_down_s"] <= 0.31, live
    # without the sessions' reading the same router is declared not forwarding after 0.2 s
    live = proofmod.observe_forwarding(TimedInstruments(0.4), T_COMPLETED, None, None)
    assert live["seen"] is False and "sessions_down_s" not in live


def test_forwarding_wait_for_sessions_is_bounded_and_named(monkeypatch):
    """Sessions that never come back extend the wait only to SESSIONS_BACK_MAX_S (+ the window)."""
    monkeypatch.setattr(proofmod, "AFTER_MIGRATION_OBSERVE_S", 0.2)
    monkeypatch.setattr(proofmod, "SESSIONS_POLL_S", 0.01)
    monkeypatch.setattr(proofmod, "SESSIONS_BACK_MAX_S", 0.4)
    down = _peers_down_for(1e9)
    t = time.monotonic()
    live = proofmod.observe_forwarding(TimedInstruments(1e9), T_COMPLETED, None, down)
    assert live["seen"] is False and 0.35 <= live["sessions_down_s"] <= 0.41, live
    assert 0.55 <= time.monotonic() - t < 1.0


def test_post_migration_failure_names_the_sessions(tmp_path, monkeypatch):
    monkeypatch.setattr(proofmod, "SESSIONS_POLL_S", 0.01)
    monkeypatch.setattr(proofmod, "SESSIONS_BACK_MAX_S", 0.1)
    peers = SimpleNamespace(sessions_up=lambda: None)  # never all up
    inst = FakeInstruments(10_000_000, [_state(_after(0))])
    monkeypatch.setattr(proofmod, "AFTER_MIGRATION_OBSERVE_S", 0.2)
    monkeypatch.setattr(proofmod, "completion_ns", lambda run_dir, s, returned: (T_COMPLETED, "window end (event)"))
    meta: dict[str, Any] = {"status": "running", "failure": None, "failure_class": None, "hypervisor": {}}
    s = Scenario(mode="precopy", rate_bps=10_000_000)
    proofmod.Proof(s, inst, tmp_path, meta, Phase(), peers).migrate(FakeDriver(MigrationOutcome(completed=True)))
    assert meta["failure_class"] == "post-migration"
    assert "of its routing sessions last seen down" in meta["failure"], meta["failure"]


def test_instrument_dead_at_completion_is_class_migration(tmp_path, monkeypatch):
    inst = FakeInstruments(10_000_000, [_state()], dead="gen (exit status -9)")
    meta, _ = _migrate(tmp_path, monkeypatch, FakeDriver(MigrationOutcome(completed=True)), inst)
    assert (meta["failure_class"], meta["failure"]) == (
        "migration",
        "instrument died during the run (before the migration completed): gen (exit status -9)",
    )


def test_rate_0_live_readiness_counts_probes_at_d(tmp_path, monkeypatch):
    inst = FakeInstruments(0, [None])
    meta, _ = _migrate(tmp_path, monkeypatch, FakeDriver(MigrationOutcome(completed=True)), inst)
    live = meta["after_migration"]["live"]
    assert meta["after_migration"]["proof"] == "rtt-probes" and inst.after_ns is None
    assert live["seen"] is True and live["probes_at_D"] >= proofmod.PROBES_MIN


def test_record_failure_keeps_the_first_failure_and_its_class():
    meta: dict[str, Any] = {"status": "running"}
    record_failure(meta, "migration", "migration did not complete")
    record_failure(meta, "post-migration", "instrument died")
    assert (
        meta["failure_class"] == "migration" and meta["failure"] == "migration did not complete; then: instrument died"
    )
    record_interrupted(meta, "interrupted by SIGINT")
    assert (
        meta["status"] == meta["failure_class"] == "interrupted"
        and "after: migration did not complete" in meta["failure"]
    )


def _run_with(tmp_path, monkeypatch, execute):
    """migrate.experiment.run.run() with its side effects replaced: ``execute(phase, meta)`` plays _execute."""
    monkeypatch.setattr(runmod, "preflight", lambda s, lab=False: (object, {}))
    monkeypatch.setattr(regmod, "STATE_ROOT", tmp_path / "state")  # clean-stale finds no runs
    monkeypatch.setattr(runmod, "_analyse", lambda run_dir: None)
    monkeypatch.setattr(
        runmod, "_execute", lambda s, cls, facts, reg, run_dir, meta, abort, phase, inv=None: execute(phase, meta)
    )
    try:
        run_dir = runmod.run(Scenario(), tmp_path / "results")
    except Interrupted:
        run_dir = next((tmp_path / "results").glob("*-kvm-*"))
    return json.loads((run_dir / "meta.json").read_text())


@pytest.mark.parametrize(
    ("phase", "error", "status", "cls", "failure"),
    [
        ("setup", TestbedError("ip link add failed"), "failed", "setup", "ip link add failed"),
        ("setup", KeyError("x"), "failed", "setup", "internal error: KeyError: 'x'"),
        ("migration", RuntimeError("boom"), "failed", "migration", "internal error: RuntimeError: boom"),
        ("post-migration", ValueError("odd"), "failed", "post-migration", "internal error: ValueError: odd"),
        ("migration", Interrupted("interrupted by SIGINT"), "interrupted", "interrupted", "interrupted by SIGINT"),
        ("post-migration", None, "completed", None, None),
    ],
)
def test_run_classes_failures_by_phase(tmp_path, monkeypatch, phase, error, status, cls, failure):
    def execute(ph, meta):
        ph.current = phase
        if error is not None:
            raise error
        meta["status"] = "completed"

    meta = _run_with(tmp_path, monkeypatch, execute)
    assert (meta["status"], meta["failure_class"], meta["failure"]) == (status, cls, failure)


def test_signal_surfacing_as_another_error_is_interrupted(tmp_path, monkeypatch):
    def execute(ph, meta):
        ph.current = "migration"
        signal.raise_signal(signal.SIGTERM)  # the handler raises Interrupted ...

    meta = _run_with(tmp_path, monkeypatch, execute)
    assert (meta["status"], meta["failure_class"]) == ("interrupted", "interrupted")


# ---------------------------------------------------------------- the definitive record


def test_after_record_from_sink_json(tmp_path):
    last = {"seq": 9000, "tx_ns": T_COMPLETED + 5 * 10**9, "rx_ns": T_COMPLETED + 5 * 10**9 + 70_000}
    sink = {"tool": "vrsink", "after": _after(57), "max_tx": last}  # SYNTHETIC sink.json (the fields used)
    (tmp_path / "sink.json").write_text(json.dumps(sink))
    rec = proofmod.after_record(tmp_path, 10_000_000, T_COMPLETED)
    assert rec == {
        "first": {"seq": 4242, "sent_ns": T_COMPLETED + 500_000, "received_ns": T_COMPLETED + 580_000},
        "packets": 57,
        "complete": True,
        "last": {"seq": 9000, "sent_ns": last["tx_ns"], "received_ns": last["rx_ns"]},
    }
    assert proofmod.after_record(tmp_path, 10_000_000, T_COMPLETED + 1)["packets"] is None  # another threshold
    (tmp_path / "sink.json").write_text('{"tool": "vrsink", "pack')  # a sink killed mid-write
    assert "unreadable" in proofmod.after_record(tmp_path, 10_000_000, T_COMPLETED)["error"]


def test_after_record_rate_0_counts_answered_probes_sent_after(tmp_path):
    """Real irtt output: probes 54.. were lost upstream while a blackhole route was in place."""
    from probes.irtt import load_irtt

    shutil.copy(FIXTURES / "probes" / "irtt_10ms_loss.json.gz", tmp_path / "irtt.json.gz")
    trace = load_irtt(tmp_path / "irtt.json.gz")
    t54 = int(trace.send_ns[trace.seqno == 54][0])
    rec = proofmod.after_record(tmp_path, 0, t54)
    after = trace.send_ns >= t54
    assert rec["sent"] == int(after.sum()) and rec["packets"] == int((after & trace.received).sum())
    first = rec["first"]
    assert first["seq"] > 54 and first["sent_ns"] > t54 and first["received_ns"] > first["sent_ns"]
    assert not trace.received[(trace.seqno >= 54) & (trace.seqno < first["seq"])].any()  # all lost before it
    assert proofmod.after_record(tmp_path, 0, int(trace.send_ns[-1]) + 1) == {"first": None, "packets": 0, "sent": 0}


def test_confirm_fails_a_run_whose_record_shows_nothing_sent_after(tmp_path):
    (tmp_path / "sink.json").write_text(json.dumps({"after": _after(0)}))  # SYNTHETIC
    meta: dict[str, Any] = {
        "status": "running",
        "after_migration": {"completed_ns": T_COMPLETED, "live": {"seen": True}},
    }
    proofmod.confirm_forwarding(Scenario(rate_bps=10_000_000), tmp_path, meta)
    assert (meta["status"], meta["failure_class"]) == ("failed", "post-migration")
    assert meta["after_migration"]["forwarding"] is False and "record shows no cross-traffic packet" in meta["failure"]


# ---------------------------------------------------------------- instruments' CPU


def test_stop_measured_counts_cpu_spent_while_exiting(tmp_path):
    """A child burns CPU in its SIGTERM handler: its time is read after it exited, before reaping."""
    from migrate.core.procs import Proc
    from migrate.experiment.instruments import proc_cpu_s, stop_measured

    code = (
        "import signal, sys, time\n"
        "def bye(*_):\n"
        "    t = time.process_time()\n"
        "    while time.process_time() - t < 0.3: pass\n"
        "    sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, bye)\n"
        "print('READY', file=sys.stderr, flush=True)\n"
        "while True: time.sleep(0.01)\n"
    )
    reg = SimpleNamespace(prefix="vm000000", add_process=lambda pid, what: None)
    p = Proc("busy", [sys.executable, "-c", code], reg, tmp_path)  # type: ignore[arg-type]
    p.start()
    p.wait_for("READY", 10)
    before = proc_cpu_s(p.pid)
    cpu = stop_measured(p, signal.SIGTERM)
    assert before is not None and cpu is not None and cpu >= before + 0.25, (before, cpu)
    assert p.returncode() == 0
    assert stop_measured(p, signal.SIGTERM) is None  # reaped: unknown, not 0


def test_cpu_report_groups_the_prober_and_keeps_unknown_as_null():
    from migrate.experiment.instruments import Instruments

    inst = Instruments.__new__(Instruments)
    inst.procs = {k: object() for k in ("sink", "sampler", "irtt-client", "irtt-server")}  # no gen: RATE=0
    inst.cpu_by_proc = {"sink": 0.5, "sampler": 0.25, "irtt-client": 0.125, "irtt-server": 0.0625}
    inst.t_start, inst.t_stop = 100.0, 111.5
    cpu, wall, parts = inst.cpu_report()
    assert cpu == {"gen": None, "sink": 0.5, "sampler": 0.25, "prober": 0.188} and wall == 11.5
    assert parts["irtt-server"] == 0.0625
    inst.cpu_by_proc["irtt-server"] = None  # killed after ignoring its signal: the sum is unknown
    assert inst.cpu_report()[0]["prober"] is None


def test_proc_cpu_s_of_this_process_and_of_none():
    from migrate.experiment.instruments import proc_cpu_s

    t = time.process_time()
    while time.process_time() - t < 0.05:
        pass
    assert proc_cpu_s(os.getpid()) >= 0.04
    assert proc_cpu_s(2**22 + 12345) is None


# ---------------------------------------------------------------- dst-unplugged


def test_dst_unplugged_fires_mid_migration_and_is_a_known_fault():
    from migrate.model.scenario import FAULTS

    fired: list[str] = []
    inj = FaultInjector("dst-unplugged", lambda *a, **k: 0)
    inj.targets = {"dst-unplugged": lambda: fired.append("unplugged")}
    inj.on_progress({"status": "active", "ram": {"transferred": 1 * 2**20}})
    assert fired == []
    inj.on_progress({"status": "active", "ram": {"transferred": 10 * 2**20}})
    inj.on_progress({"status": "active", "ram": {"transferred": 20 * 2**20}})
    assert fired == ["unplugged"] and "dst-unplugged" in FAULTS


def test_after_record_on_a_lab_compares_on_the_senders_clocks(tmp_path):
    """The completion time is on the orchestrator's clock; vrsink was given it on A's clock (A's
    offset added) and irtt's send times are C's: the record is read with the same offsets."""
    from probes.irtt import load_irtt

    a_off = -3_000_000  # A's clock 3 ms behind the orchestrator's
    sink = {"tool": "vrsink", "after": {**_after(57), "threshold_ns": T_COMPLETED + a_off}, "max_tx": None}
    (tmp_path / "sink.json").write_text(json.dumps(sink))
    assert proofmod.after_record(tmp_path, 10_000_000, T_COMPLETED, {"A": a_off})["packets"] == 57
    assert proofmod.after_record(tmp_path, 10_000_000, T_COMPLETED)["packets"] is None  # read as if on one clock

    shutil.copy(FIXTURES / "probes" / "irtt_10ms_loss.json.gz", tmp_path / "irtt.json.gz")
    trace = load_irtt(tmp_path / "irtt.json.gz")
    t54 = int(trace.send_ns[trace.seqno == 54][0])
    c_off = 25_000_000  # C 25 ms ahead: on C's clock the completion is at t54 + 25 ms
    on_c = proofmod.after_record(tmp_path, 0, t54, {"C": c_off})
    assert on_c["sent"] == int((trace.send_ns >= t54 + c_off).sum())
    assert on_c["sent"] < proofmod.after_record(tmp_path, 0, t54)["sent"]


def test_sender_offsets_are_the_lab_hosts_start_offsets():
    from migrate.testbed.builder import Testbed
    from migrate.testbed.labbed import LabBed

    class Lab:
        """A lab testbed's clock measurements: A measured 1.234 us behind, C not measured."""

        clock_offsets = LabBed.clock_offsets

        def offset_ns(self, role):
            if role == "C":
                raise ValueError("no clock measurement of C")
            return {"A": (-1234, 40_000)}[role]

    class Embedded:
        clock_offsets = Testbed.clock_offsets

        def offset_ns(self, role):
            return 0, 0

    assert proofmod.sender_offsets(Lab()) == {"A": -1234}
    assert proofmod.sender_offsets(Embedded()) == {}


def test_a_router_that_crashed_on_r2_after_forwarding_fails_post_migration(tmp_path):
    """A real console of a router that panicked on R2 after a TCG pre-copy migration
    (tests/fixtures/console): a run that had seen it forward is not completed; QEMU's pre-copy
    bug is named."""
    shutil.copy(FIXTURES / "console" / "kvm_tcg_panic_after_precopy.log", tmp_path / "console-R2.log")
    meta: dict[str, Any] = {"status": "running", "failure": None, "failure_class": None, "accel": "tcg",
                            "hypervisor": {"qemu": "QEMU emulator version 7.2.22 (Debian 1:7.2+dfsg-7+deb12u18+b3)"},
                            "after_migration": {"forwarding": True}}  # fmt: skip
    proofmod.crashed_after(Scenario(mode="precopy"), tmp_path, meta)
    assert (meta["status"], meta["failure_class"]) == ("failed", "post-migration")
    assert meta["failure"].startswith("the router crashed on R2 after the migration completed: ")
    assert "Kernel panic" in meta["failure"] and "QEMU before 9.0 under TCG" in meta["failure"]
    # stop-and-copy, or a QEMU with the fix: the crash without the pre-copy note
    for s, qemu in ((Scenario(mode="stopcopy"), "version 7.2.22"), (Scenario(mode="precopy"), "version 9.0.0")):
        m = {**meta, "status": "running", "failure": None, "failure_class": None, "hypervisor": {"qemu": qemu}}
        proofmod.crashed_after(s, tmp_path, m)
        assert m["failure_class"] == "post-migration" and "QEMU before 9.0" not in m["failure"], m
    # a clean console: nothing changes
    (tmp_path / "console-R2.log").write_text("[    1.0] VRMIG-READY\n")
    clean = {**meta, "status": "running", "failure": None, "failure_class": None}
    proofmod.crashed_after(Scenario(mode="precopy"), tmp_path, clean)
    assert clean["status"] == "running" and clean["failure"] is None


def test_a_router_not_seen_forwarding_after_a_tcg_precopy_names_qemus_bug(tmp_path):
    """The peering run's real failure (a panic on R2's console, tests/fixtures/console) names QEMU's
    pre-copy bug under TCG with QEMU 7.2, not under stop-and-copy, QEMU 9 or an injected fault; the
    lab sweep's (no packet after the completion, R2's console empty) does not: no evidence."""
    meta: dict[str, Any] = {"accel": "tcg", "hypervisor": {"qemu": "QEMU emulator version 7.2.22 (Debian)"}}
    live = {"seen": False, "missing": "no cross-traffic packet sent after the completion reached B"}
    (tmp_path / "console-R2.log").write_text("")
    msg = proofmod.not_forwarding_failure(Scenario(mode="precopy"), tmp_path, meta, live)
    assert msg.startswith("the hypervisor reported the migration complete, but the router did not forward from R2 ")
    assert "crashed" not in msg and proofmod.TCG_PRECOPY_BUG not in msg
    shutil.copy(FIXTURES / "console" / "kvm_tcg_panic_after_precopy.log", tmp_path / "console-R2.log")
    msg = proofmod.not_forwarding_failure(Scenario(mode="precopy"), tmp_path, meta, {**live, "sessions_down_s": 29.9})
    assert "of its routing sessions last seen down (29.9 s after" in msg and "the router crashed on R2: " in msg
    assert msg.endswith(f"({proofmod.TCG_PRECOPY_BUG})")
    for s, qemu in ((Scenario(mode="stopcopy"), "version 7.2.22"), (Scenario(mode="precopy"), "version 9.0.0")):
        m = {**meta, "hypervisor": {"qemu": qemu}}
        assert proofmod.TCG_PRECOPY_BUG not in proofmod.not_forwarding_failure(s, tmp_path, m, live)
    unplugged = Scenario(mode="precopy", fault="dst-unplugged")
    assert proofmod.TCG_PRECOPY_BUG not in proofmod.not_forwarding_failure(unplugged, tmp_path, meta, live)
