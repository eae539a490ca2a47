"""Whether the router came through its migration, proved by the traffic: when the migration
completed (the records' window end), the live proof that the router forwards from R2 after it
(cross-traffic sent after the completion reached B; at RATE=0, RTT probes reached D), that proof
confirmed from the instruments' records after the run, a crash on R2's console, and, after a
failed migration, whether the router still forwards from R1 (docs/data-formats.md
``after_migration``, ``recovery``)."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from analysis.metrics.clock import GEN_ROLE, IRTT_ROLE
from migrate.core.errors import MigrationError
from migrate.core.runctx import record_failure
from migrate.core.rundir import (
    ACTIONS_JSONL,
    IRTT_JSON_GZ,
    QMP_EVENTS_JSONL,
    QMP_SAMPLES_JSONL,
    SINK_JSON,
    console_log,
)
from migrate.drivers.base import Driver, MigrationOutcome
from migrate.experiment.console import crash_in
from migrate.experiment.instruments import Instruments
from migrate.experiment.peering import Peers
from migrate.experiment.run_progress import MIGRATION, POST_MIGRATION, Phase
from migrate.model.scenario import Scenario

log = logging.getLogger(__name__)


RECOVERY_OBSERVE_S = 3.0
AFTER_MIGRATION_OBSERVE_S = 10.0
SESSIONS_BACK_MAX_S = 30.0  # after the completion: how long a routing session may stay down
SESSIONS_POLL_S = 0.25  # reading the peers' logs (parsed whole) is slower than the sink's state
OBSERVE_POLL_S = 0.01
PROBES_MIN = 3  # RATE=0: probes that must reach D to call the router ready


#: QEMU before 9.0 under TCG loses pages the guest writes during pre-copy (docs/migrate.md)
TCG_PRECOPY_BUG = (
    "QEMU before 9.0 under TCG loses pages written during pre-copy (fixed by QEMU commit 03bfc2188f; "
    "docs/migrate.md): use MODE=stopcopy or KVM"
)


def _tcg_precopy_note(scenario: Scenario, meta: dict[str, Any], crash: str | None) -> str:
    """The note " (<TCG_PRECOPY_BUG>)" where that bug can be the cause: a pre-copy migration under
    TCG with a QEMU that loses pages there, no injected fault, and a crash on R2's console
    (``crash``: crash_in's excerpt, the evidence); else ""."""
    from analysis.metrics.dirty import tcg_precopy_loses_pages

    qemu = meta.get("hypervisor", {}).get("qemu")
    if crash is None or scenario.fault is not None or scenario.hv != "kvm":
        return ""
    if tcg_precopy_loses_pages(meta.get("accel"), scenario.mode, qemu):
        return f" ({TCG_PRECOPY_BUG})"
    return ""


def not_forwarding_failure(scenario: Scenario, run_dir: Path, meta: dict[str, Any], live: dict[str, Any]) -> str:
    """The failure of a run whose router was not seen forwarding from R2 after the completion
    (``live``: :func:`observe_forwarding`'s record): what was missing, the crash R2's console
    shows if any, and QEMU's pre-copy bug where it applies."""
    within, why = f"within {AFTER_MIGRATION_OBSERVE_S:.0f} s", live["missing"]
    if live.get("sessions_down_s") is not None:
        within += " of its routing sessions last seen down"
        why = f"{live['sessions_down_s']:.1f} s after the completion; {why}"
    msg = f"the hypervisor reported the migration complete, but the router did not forward from R2 {within} ({why})"
    crash = crash_in(run_dir / console_log("R2"))
    if crash:
        msg += f"; the router crashed on R2: {crash}"
    return msg + _tcg_precopy_note(scenario, meta, crash)


def crashed_after(scenario: Scenario, run_dir: Path, meta: dict[str, Any]) -> None:
    """A router that forwarded from R2 and then crashed there did not come through the migration:
    its console's crash fails the run post-migration (naming QEMU's pre-copy bug where it applies)."""
    crash = crash_in(run_dir / console_log("R2"))
    if crash is None:
        return

    msg = f"the router crashed on R2 after the migration completed: {crash}" + _tcg_precopy_note(scenario, meta, crash)
    record_failure(meta, POST_MIGRATION, msg)
    log.error("%s", msg)


def completion_ns(run_dir: Path, scenario: Scenario, returned_ns: int) -> tuple[int, str]:
    """When the migration completed, as ``analysis.metrics.window`` ends the migration window (the
    source's MIGRATION completed event; stop-and-copy: the destination's ``cont``; drivers without
    QMP: their ``migration-end`` action), read from the records written so far.  Without such a
    record: ``returned_ns``, when the driver's migrate() returned (later than the completion, so
    a packet sent after it was still sent after the completion).  Returns (ns, source)."""
    from analysis.load import read_jsonl
    from analysis.metrics.window import migration_window

    def rows(name: str) -> list[dict[str, Any]]:
        path = run_dir / name
        return read_jsonl(path) if path.exists() else []

    try:
        events = rows(QMP_EVENTS_JSONL)
        if scenario.driver == "libvirt":
            from analysis.hypervisors.libvirt import load_libvirt, window_events

            events = window_events(load_libvirt(run_dir, []).events)
        window = migration_window(rows(ACTIONS_JSONL), events, rows(QMP_SAMPLES_JSONL), scenario.mode)
    except (OSError, ValueError) as err:
        log.warning("completion time from the records: %s; using when migrate() returned", err)
        window = None
    if (
        window is not None
        and window.end_ns is not None
        and window.end_status == "completed"
        and window.end_source != "last-sample"
        and window.end_ns <= returned_ns
    ):
        return window.end_ns, f"window end ({window.end_source})"
    return returned_ns, "migrate() returned"


def sender_offsets(tb: Any) -> dict[str, int]:
    """The clock offsets (host minus orchestrator, ns, as measured at the run's start) of the
    hosts that stamp what the forwarding proof counts: A (vrgen's send stamps) and C (irtt's send
    times); {} on the embedded testbed (one clock).  The completion time is on the orchestrator's
    clock; the proof compares it with those stamps on their hosts' clocks."""
    return tb.clock_offsets((GEN_ROLE, IRTT_ROLE))


def observe_forwarding(
    instruments: Instruments,
    completed_ns: int,
    offsets: dict[str, int] | None = None,
    sessions_down: Callable[[], bool] | None = None,
) -> dict[str, Any]:
    """Live readiness after the migration, observed within AFTER_MIGRATION_OBSERVE_S; returns
    {"seen", "seen_after_s", ...} (what was seen), or "missing" / "instrument_died".
    ``sessions_down``: whether a routing session is down now (the peers' logs); while one is,
    the window is extended to AFTER_MIGRATION_OBSERVE_S past the last such reading, up to
    SESSIONS_BACK_MAX_S after the start (``sessions_down_s``: that last reading, in s).

    With cross-traffic: vrsink is given the completion time and reports the first packet sent at
    or after it that reached B; only the router on R2 can have forwarded it (the source is
    paused or gone by then).  Frames on R2's tapR would not do: they count what the guest sends
    (and QEMU's own announcements), not what reaches the segment.  At RATE=0: RTT probes reach D
    (UDP datagrams delivered in D's namespace grow by PROBES_MIN); which probes were sent after
    the completion is established from irtt's output after the run (``after_record``).
    ``offsets``: :func:`sender_offsets` (vrsink compares the time with A's send stamps)."""
    t0 = time.monotonic()
    cross = instruments.s.rate_bps > 0
    if cross:
        instruments.mark_after(completed_ns + (offsets or {}).get(GEN_ROLE, 0))
    base = None if cross else instruments.probes_at_d()
    deadline = t0 + AFTER_MIGRATION_OBSERVE_S
    next_check, last_down = t0, None
    while True:
        now_m = time.monotonic()
        if sessions_down is not None and now_m >= next_check and now_m - t0 <= SESSIONS_BACK_MAX_S:
            next_check = now_m + SESSIONS_POLL_S
            if sessions_down():
                last_down = round(now_m - t0, 3)
                deadline = max(deadline, now_m + AFTER_MIGRATION_OBSERVE_S)
        if dead := instruments.dead():
            return {"seen": False, "instrument_died": dead}
        seen: dict[str, Any] | None = None
        if cross:
            after = (instruments.sink_state() or {}).get("after")
            if isinstance(after, dict) and after.get("packets", 0) > 0 and after.get("first"):
                first = after["first"]
                seen = {"packets": after["packets"], "first_seq": first["seq"], "first_sent_ns": first["tx_ns"]}
                seen["first_received_ns"] = first["rx_ns"]
        else:
            now = instruments.probes_at_d()
            if base is None:
                base = now
            elif now is not None and now - base >= PROBES_MIN:
                seen = {"probes_at_D": now - base}
        if seen is not None:
            instruments.rec.action("forwarding-observed", host="R2", **seen)
            found = {"seen": True, "seen_after_s": round(time.monotonic() - t0, 3), **seen}
            return found if sessions_down is None else {**found, "sessions_down_s": last_down}
        if time.monotonic() > deadline:
            missing = "no cross-traffic packet sent after the completion reached B"
            gone = {"seen": False, "missing": missing if cross else f"fewer than {PROBES_MIN} RTT probes reached D"}
            return gone if sessions_down is None else {**gone, "sessions_down_s": last_down}
        time.sleep(OBSERVE_POLL_S)


def confirm_forwarding(scenario: Scenario, run_dir: Path, meta: dict[str, Any]) -> None:
    """After the instruments stopped: the definitive record of forwarding after the completion,
    from sink.json ``after`` (cross-traffic) or irtt's output (RATE=0: probes sent after the
    completion and answered), into ``after_migration``; the run fails post-migration without one.
    ``forwarding``: seen live and in the record."""
    after = meta["after_migration"]
    record = after_record(run_dir, scenario.rate_bps, after["completed_ns"], after.get("sender_offsets_ns"))
    after.update(record)
    after["forwarding"] = bool(after["live"]["seen"] and record.get("packets"))
    if not record.get("packets") and meta["status"] == "running":
        msg = (
            "the hypervisor reported the migration complete, but the record shows no "
            f"{'cross-traffic packet' if scenario.rate_bps > 0 else 'RTT probe'} sent after the completion "
            f"that reached {'B' if scenario.rate_bps > 0 else 'D and came back'}"
        )
        if record.get("error"):
            msg += f" ({record['error']})"
        record_failure(meta, POST_MIGRATION, msg)
        log.error("%s", msg)


def after_record(
    run_dir: Path, rate_bps: int, completed_ns: int, offsets: dict[str, int] | None = None
) -> dict[str, Any]:
    """What reached its destination of what was sent at or after ``completed_ns``: ``first``
    ({seq, sent_ns, received_ns}) and ``packets`` (cross-traffic: unique packets received at B,
    from sink.json ``after``, ``complete`` false if vrsink could not count those that arrived
    before it was told the time, and ``last``: the received packet with the highest send stamp;
    RATE=0: irtt probes answered, with ``sent`` probes).  ``offsets``: :func:`sender_offsets`;
    the times in the record are on the senders' clocks, as the hosts wrote them."""
    offsets = offsets or {}
    if rate_bps > 0:
        completed_ns += offsets.get(GEN_ROLE, 0)
        try:
            sink = json.loads((run_dir / SINK_JSON).read_text())
        except (OSError, ValueError) as err:
            return {"first": None, "packets": None, "error": f"sink.json unreadable: {err}"}
        rec = sink.get("after") if isinstance(sink, dict) else None
        if not isinstance(rec, dict) or rec.get("threshold_ns") != completed_ns:
            return {"first": None, "packets": None, "error": "sink.json has no report for the completion time"}
        first, last = rec.get("first"), sink.get("max_tx")
        return {
            "first": None
            if not first
            else {"seq": first["seq"], "sent_ns": first["tx_ns"], "received_ns": first["rx_ns"]},
            "packets": rec.get("packets"),
            "complete": rec.get("complete"),
            "last": None if not last else {"seq": last["seq"], "sent_ns": last["tx_ns"], "received_ns": last["rx_ns"]},
        }
    from probes.irtt import load_irtt

    try:
        trace = load_irtt(run_dir / IRTT_JSON_GZ)
    except (OSError, ValueError, KeyError) as err:
        return {"first": None, "packets": None, "error": f"irtt.json.gz unreadable: {err}"}
    sent = trace.send_ns >= completed_ns + offsets.get(IRTT_ROLE, 0)
    answered = sent & trace.received
    out: dict[str, Any] = {"first": None, "packets": int(answered.sum()), "sent": int(sent.sum())}
    if answered.any():
        i = int(answered.nonzero()[0][0])  # seqno order = send order
        out["first"] = {
            "seq": int(trace.seqno[i]),
            "sent_ns": int(trace.send_ns[i]),
            "received_ns": int(trace.recv_ns[i]),
        }
    return out


def observe_recovery(driver: Driver, instruments: Instruments, failed_ns: int) -> dict[str, Any]:
    """After a failed migration: does the router still run on R1, and does it still forward?
    With cross-traffic: a packet sent after the failure reached B (vrsink's highest send stamp,
    A's clock, put on this machine's by A's measured offset less its uncertainty, passes
    ``failed_ns``); at RATE=0: RTT probes keep reaching D.  A lab host A whose clock offset was
    never measured leaves ``forwarding_on_R1`` None with the reason (a send stamp of another
    clock is not compared as if it were this one's)."""
    running = driver.source_running()
    out: dict[str, Any] = {"source_running": running, "forwarding_on_R1": False}
    if not running:
        return out
    rate = instruments.s.rate_bps
    off_a = unc_a = 0
    if rate > 0:
        try:
            off_a, unc_a = instruments.tb.offset_ns("A")
        except ValueError as err:
            out.update(forwarding_on_R1=None, reason=f"A's send stamps cannot be put on this machine's clock: {err}")
            return out
    out["method"] = "cross-traffic sent after the failure reached B" if rate > 0 else "RTT probes reach D"
    base = instruments.probes_at_d() if rate == 0 else None
    deadline = time.monotonic() + RECOVERY_OBSERVE_S
    while time.monotonic() < deadline:
        if rate > 0:
            top = (instruments.sink_state() or {}).get("max_tx") or {}
            if top.get("tx_ns", 0) - off_a - unc_a >= failed_ns:
                out.update(forwarding_on_R1=True, sent_ns=top["tx_ns"], received_ns=top["rx_ns"])
                if off_a or unc_a:
                    out.update(a_offset_ns=off_a, a_offset_uncertainty_ns=unc_a)
                break
        else:
            now = instruments.probes_at_d()
            if base is None:
                base = now
            elif now is not None and now - base >= PROBES_MIN:
                out.update(forwarding_on_R1=True, probes_at_D=now - base)
                break
        time.sleep(OBSERVE_POLL_S)
    log.info("after the failed migration: source running=%s, forwarding on R1=%s", running, out["forwarding_on_R1"])
    return out


class Proof:
    """The proof of one run: the migration phase and the live proof after it, while the
    instruments run (:meth:`migrate`), then the verdict from their records (:meth:`verdict`).
    ``peers``: the routing peers whose sessions a reconvergence waits for (None without PEERING)."""

    def __init__(
        self,
        scenario: Scenario,
        instruments: Instruments,
        run_dir: Path,
        meta: dict[str, Any],
        phase: Phase,
        peers: Peers | None = None,
    ) -> None:
        self.s, self.instruments, self.dir, self.meta, self.phase, self.peers = (
            scenario, instruments, run_dir, meta, phase, peers
        )  # fmt: skip

    def migrate(self, driver: Driver) -> None:
        """The migration phase and, once the hypervisor reports it completed, the live proof that the
        router forwards from R2 (post-migration phase).  With routing peers, a router whose sessions
        went down forwards again only once they are back: the wait for forwarding lasts until
        AFTER_MIGRATION_OBSERVE_S after the peers' logs last showed a session down (at most
        SESSIONS_BACK_MAX_S after the completion), so a reconvergence is measured, not failed."""
        s, meta, instruments, peers = self.s, self.meta, self.instruments, self.peers
        log.info("migrating (%s)", s.mode)
        self.phase.current = MIGRATION
        try:
            outcome = driver.migrate()
        except MigrationError as err:
            outcome = MigrationOutcome(completed=False, failure=str(err))
        returned_ns = time.time_ns()
        if outcome.completed or outcome.hypervisor:
            meta["hypervisor"]["final"] = outcome.hypervisor
        if not outcome.completed:
            record_failure(meta, MIGRATION, outcome.failure or "the hypervisor reported the migration not completed")
            log.error("migration failed: %s", meta["failure"])
            meta["recovery"] = observe_recovery(driver, instruments, returned_ns)
            return
        if dead := instruments.dead():
            record_failure(meta, MIGRATION, f"instrument died during the run (before the migration completed): {dead}")
            log.error("%s", meta["failure"])
            return
        self.phase.current = POST_MIGRATION
        completed_ns, source = completion_ns(self.dir, s, returned_ns)
        offsets = sender_offsets(instruments.tb)
        sessions_down = None if peers is None else (lambda: peers.sessions_up() is None)
        live = observe_forwarding(instruments, completed_ns, offsets, sessions_down)
        meta["after_migration"] = {
            "forwarding": live["seen"],
            "proof": "cross-traffic" if s.rate_bps > 0 else "rtt-probes",
            "completed_ns": completed_ns,
            "completed_source": source,
            "live": live,
        }
        if offsets:
            meta["after_migration"]["sender_offsets_ns"] = offsets
        if not live["seen"]:
            what = live.get("instrument_died")
            if what:
                msg = f"instrument died after the migration completed: {what}"
            else:
                msg = not_forwarding_failure(s, self.dir, meta, live)
            record_failure(meta, POST_MIGRATION, msg)
            log.error("%s", msg)

    def verdict(self, driver: Driver) -> None:
        """After the instruments stopped: the record's proof of forwarding after the completion,
        the hypervisor's own verification, a crash on R2's console; a run still running completes."""
        meta = self.meta
        if "after_migration" in meta:
            confirm_forwarding(self.s, self.dir, meta)
        meta["verify"] = driver.verify()
        meta["hypervisor"].update(driver.describe())
        if "after_migration" in meta and meta["status"] == "running":
            crashed_after(self.s, self.dir, meta)
        if meta["status"] == "running":
            meta["status"] = "completed"
