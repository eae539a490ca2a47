"""Routing sessions against pauses and cuts of known length (``make calibrate PEERING=``).

With routing peers (docs/peering.md) every calibration event is also a known interruption of
the router's control plane.  Per event, protocol (``bgp``, ``bfd``) and peer:

* ``went_down``: whether a session of the protocol at that peer went down (a flap whose
  ``down_ns`` lies in [event start, event end + limit], never past the next event's start);
* ``silence``: the longest gap between the router's control packets of the protocol captured at
  the peer that overlaps the event: from the last packet before the end of the event's start
  edge to the first at or after its end edge (:func:`~analysis.metrics.control_plane.longest_silence`
  over that span); a gap still open at the next event (or at the end of the capture) is cut
  there and flagged ``open`` (a lower bound);
* the event's measured duration from its edges (:class:`~analysis.metrics.calibration_event.Event`).

The verdicts (``limit`` = the detect time: BFD interval x multiplier with BFD, else the BGP
hold time; the *deciding* silence is BFD's at that peer when BFD runs, BGP follows BFD, else
BGP's own):

* a deciding silence below the limit must leave the session up; one above it must bring it
  down (BFD, and BGP with it).  Within ``DETECT_BAND_MS`` of the limit either outcome is
  consistent (the peer's timer runs on BIRD's reception of a packet, the capture dates it in
  the kernel): no verdict, said so;
* BFD: |silence - measured duration| <= ``MATCH_INTERVALS`` x the BFD interval (the router sends
  every interval, so the silence exceeds the interruption by up to one interval, plus the resume
  overhead).  Not applied where the router's BFD itself went down during a cut: it then sends at
  RFC 5880's slow rate (1 s, Sec. 6.8.3), and the silence measures that, not the cut.

A pause stops the router for both peers; a cut of ``tapR`` interrupts only B's side, so A is
reported but not judged for a cut.  Absent records (no log, no capture) give null with the
reason, never 0 and never a pass: a judged row without a verdict fails the calibration.

Pure functions: events, parsed logs and packet arrays in, dataclasses out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from analysis.metrics.calibration_event import Event
from analysis.metrics.control_plane import (
    Flap,
    LogEvent,
    Silence,
    bfd_sessions,
    bgp_sessions,
    control_times,
    longest_silence,
    peer_daemon,
)
from migrate.core.rundir import CALIBRATION_CONTROL_PLANE_CSV

PROTOCOLS = ("bgp", "bfd")
#: the peer whose sessions a cut (R1's tapR, the router's side of segment R) interrupts
CUT_PEER = "B"
MATCH_INTERVALS = 2
#: around the limit, no up/down verdict: BIRD expired a session 150.3-150.6 ms after the last
#: packet its capture dated (BFD=50x3, 2026-11-25), and a packet reaches BIRD some scheduling
#: delay after the kernel stamped it
DETECT_BAND_MS = 2.0
CSV_NAME = CALIBRATION_CONTROL_PLANE_CSV
COLUMNS = (
    "kind", "index", "rep", "pause_ms", "true_ms", "uncertainty_ms", "protocol", "peer", "judged", "limit_ms",
    "silence_ms", "silence_start_ns", "silence_end_ns", "silence_open", "packets", "deciding_silence_ms",
    "flaps", "causes", "went_down", "expected_down", "pass_session", "match_error_ms", "match_target_ms",
    "pass_match", "pass", "reason",
)  # fmt: skip


@dataclass(frozen=True)
class Timers:
    """The sessions' timers (meta.json ``peering.timers``)."""

    bgp_hold_s: float | None  # None: meta.json gave none (no limit, the session verdicts are not made)
    bfd_interval_ms: float | None = None
    bfd_multiplier: int | None = None

    @property
    def bfd(self) -> bool:
        """BFD runs on the sessions."""
        return self.bfd_interval_ms is not None and self.bfd_multiplier is not None

    @property
    def limit_ms(self) -> float | None:
        """The silence the peers tolerate: BFD's detect time, else the BGP hold time (None when
        neither is known: absent, never a 0 ms limit)."""
        if self.bfd_interval_ms is not None and self.bfd_multiplier is not None:
            return self.bfd_interval_ms * self.bfd_multiplier
        return None if self.bgp_hold_s is None else self.bgp_hold_s * 1000.0


@dataclass(frozen=True)
class SessionCheck:
    """One event, protocol and peer.  ``passed``: every check that applies passed (None: not
    judged, or a check could not be made: ``reasons`` says which)."""

    event: Event
    protocol: str
    peer: str
    judged: bool
    borderline: bool  # the deciding silence lies within DETECT_BAND_MS of the limit: no up/down verdict
    limit_ms: float | None
    silence: Silence | None  # this protocol's silence at this peer (None: no capture)
    silence_open: bool  # the gap was still open where the span ends: a lower bound
    deciding_silence_ms: float | None
    deciding_open: bool  # the deciding (BFD's, with BFD) silence was still open where the span ends
    flaps: tuple[Flap, ...] | None  # None: no log of this peer
    went_down: bool | None
    expected_down: bool | None
    passed_session: bool | None
    match_error_ms: float | None
    match_target_ms: float | None
    passed_match: bool | None
    passed: bool | None
    reasons: tuple[str, ...]


@dataclass(frozen=True)
class ControlCalibration:
    """Every check, and the verdict: True when every judged row passed, False when one failed
    or could not be judged for want of records, None when no row is judged."""

    checks: tuple[SessionCheck, ...]
    timers: Timers
    passed: bool | None
    notes: tuple[str, ...]


def silence_span(t_ns: np.ndarray, ev: Event, hi_ns: int) -> tuple[tuple[int, int], bool]:
    """The span :func:`longest_silence` looks at for ``ev``: from its start edge's ``after_ns``
    (packets sent before the pause took effect count as before it) to the first packet at or
    after its end edge's ``before_ns``, or ``hi_ns`` when none came before it (the gap is open:
    True)."""
    t = np.sort(np.asarray(t_ns, dtype=np.int64))
    later = t[(t >= ev.end.before_ns) & (t <= hi_ns)]
    if later.size:
        return (ev.start.after_ns, int(later[0])), False
    return (ev.start.after_ns, hi_ns), True


def _flaps_in(flaps: Sequence[Flap], peer: str, lo: int, hi: int) -> tuple[Flap, ...]:
    return tuple(f for f in flaps if f.peer == peer and lo <= f.down_ns <= hi)


def check_event(
    ev: Event,
    protocol: str,
    peer: str,
    next_start_ns: int | None,
    end_ns: int | None,
    timers: Timers,
    flaps: Mapping[str, Sequence[Flap]] | None,
    times: Mapping[str, np.ndarray] | None,
) -> SessionCheck:
    """One row.  ``flaps``: per protocol, the flaps of every peer (None: no log of ``peer``);
    ``times``: per protocol, the times of the router's control packets at ``peer`` (None: no
    capture); ``next_start_ns``: the next event's start (None: the last), ``end_ns``: where the
    records end (None: unknown)."""
    limit = timers.limit_ms
    caps = [x for x in (next_start_ns, end_ns) if x is not None]
    reasons: list[str] = []
    if limit is None:  # flaps are then looked for up to the next event or the records' end
        reasons.append("no BGP hold time in meta.json: no limit, the session's up/down is not judged")
        hi = min(caps) if caps else ev.end.after_ns
    else:
        hi = min([ev.end.after_ns + int(limit * 1e6), *caps])
    judged = ev.kind == "pause" or peer == CUT_PEER
    if not judged:
        reasons.append(f"not judged: a cut of the router's segment-R port interrupts only {CUT_PEER}'s sessions")

    silences: dict[str, tuple[Silence, bool]] = {}
    if times is not None:
        for proto in {protocol, "bfd" if timers.bfd else protocol}:
            t = np.asarray(times.get(proto, np.zeros(0, dtype=np.int64)), dtype=np.int64)
            # a gap may run up to the next event or the end of the records (of the capture
            # when the log's end is unknown), not beyond
            last = min(caps) if caps else max(ev.end.after_ns, int(t.max()) if t.size else 0)
            span, is_open = silence_span(t, ev, last)
            silences[proto] = (longest_silence(peer, t, span, limit), is_open)
    else:
        reasons.append(f"no capture at {peer}: silence unknown")
    own = silences.get(protocol)
    silence, silence_open = (own[0], own[1]) if own else (None, False)
    deciding = silences.get("bfd" if timers.bfd else protocol)
    deciding_ms = deciding[0].gap_ms if deciding else None
    if deciding is not None and deciding_ms is None:
        reasons.append(f"fewer than two control packets at {peer} around the event: silence unknown")

    mine: tuple[Flap, ...] | None = None
    went_down: bool | None = None
    if flaps is not None:
        mine = _flaps_in(flaps.get(protocol, ()), peer, ev.start.before_ns, hi)
        went_down = bool(mine)
    else:
        reasons.append(f"no log of {peer}: whether its session went down is unknown")

    expected: bool | None = None
    passed_session: bool | None = None
    band = False
    if deciding_ms is not None and limit is not None:
        if abs(deciding_ms - limit) <= DETECT_BAND_MS:
            band = True
            reasons.append(f"silence {deciding_ms:.1f} ms within {DETECT_BAND_MS:g} ms of the {limit:g} ms limit")
        else:
            expected = deciding_ms > limit
            if deciding is not None and deciding[1] and not expected:
                expected = None  # an open gap below the limit is only a lower bound
                reasons.append("silence still open where the records end: a lower bound below the limit")
    if expected is not None and went_down is not None:
        passed_session = went_down == expected

    match_error = match_target = None
    passed_match: bool | None = None
    match_applies = protocol == "bfd" and timers.bfd_interval_ms is not None
    if match_applies and ev.kind == "cut" and went_down:
        match_applies = False
        reasons.append("cut brought BFD down: the router then sends at the 1 s slow rate, not the cut's length")
    if match_applies and timers.bfd_interval_ms is not None:
        match_target = MATCH_INTERVALS * timers.bfd_interval_ms
        if silence is not None and silence.gap_ms is not None and not silence_open:
            match_error = silence.gap_ms - ev.true_s * 1e3
            passed_match = abs(match_error) <= match_target
        elif silence is not None and silence_open:
            reasons.append("silence still open where the records end: no match")

    passed: bool | None = None
    if judged:
        verdicts = [passed_match] if match_applies else []
        if not band:
            verdicts.append(passed_session)
        if verdicts and all(v is not None for v in verdicts):
            passed = all(bool(v) for v in verdicts)
    return SessionCheck(
        event=ev, protocol=protocol, peer=peer, judged=judged, borderline=band, limit_ms=limit, silence=silence,
        silence_open=silence_open, deciding_silence_ms=deciding_ms,
        deciding_open=bool(deciding[1]) if deciding is not None else False, flaps=mine, went_down=went_down,
        expected_down=expected, passed_session=passed_session, match_error_ms=match_error,
        match_target_ms=match_target, passed_match=passed_match, passed=passed, reasons=tuple(reasons),
    )  # fmt: skip


def met(c: SessionCheck) -> bool:
    """A judged row counts as met when it passed, or when its only verdict was withheld by
    design (a borderline silence, closed, its other checks none or passed); a row without a
    verdict for want of records is not met.  A BGP row with BFD is decided by BFD's silence:
    its own (keepalives every hold/3 s, often still open where the records end) does not count."""
    if c.passed is not None:
        return c.passed
    return c.borderline and c.passed_match is not False and not c.deciding_open and c.went_down is not None


def calibrate_control(
    events: Sequence[Event],
    protocols: Sequence[str],
    logs: Mapping[str, list[LogEvent]],
    times: Mapping[str, Mapping[str, np.ndarray]],
    router_addr: Mapping[str, str],
    timers: Timers,
    peers: Sequence[str] | None = None,
) -> ControlCalibration:
    """Every (event, protocol, peer) row.  ``logs``: the peers' parsed BIRD logs (a peer
    missing: no log); ``times``: per peer, per protocol, the times of the router's control
    packets captured there (a peer missing: no capture); ``peers``: the peers of the run
    (default: those with a log or a capture)."""
    evs = sorted(events, key=lambda e: e.start.before_ns)
    roles = list(peers) if peers is not None else sorted(set(logs) | set(times))
    flaps: dict[str, tuple[Flap, ...]] = {}
    end_ns: int | None = None
    if logs:
        sessions = {"bgp": bgp_sessions(dict(logs))}
        if "bfd" in protocols:
            sessions["bfd"] = bfd_sessions(dict(logs), {r: router_addr[r] for r in logs})
        flaps = {p: s.flaps for p, s in sessions.items()}
        end_ns = sessions["bgp"].end_ns
    notes = [f"no log of {r}" for r in roles if r not in logs] + [f"no capture at {r}" for r in roles if r not in times]
    checks = []
    for i, ev in enumerate(evs):
        nxt = evs[i + 1].start.before_ns if i + 1 < len(evs) else None
        for proto in (p for p in PROTOCOLS if p in protocols):
            for peer in roles:
                checks.append(
                    check_event(
                        ev, proto, peer, nxt, end_ns, timers,
                        flaps if peer in logs else None, times.get(peer),
                    )
                )  # fmt: skip
    judged = [c for c in checks if c.judged]
    passed = all(met(c) for c in judged) if judged else None
    return ControlCalibration(tuple(checks), timers, passed, tuple(notes))


def capture_times(
    captures: Mapping[str, tuple[np.ndarray, np.ndarray, np.ndarray]],
    router_addr: Mapping[str, str],
    protocols: Sequence[str],
) -> dict[str, dict[str, np.ndarray]]:
    """Per peer and protocol, the times of the router's control packets in the peer's capture
    (``captures``: :func:`~analysis.metrics.control_plane.dissect` arrays)."""
    return {
        peer: {p: np.sort(control_times(t, src, kind, router_addr[peer], p)) for p in protocols}
        for peer, (t, src, kind) in captures.items()
    }


# -- files ------------------------------------------------------------------------------------


def _f(x: float | None, nd: int = 1) -> str:
    return "" if x is None or not math.isfinite(x) else f"{x:.{nd}f}"


def _b(x: bool | None) -> str:
    return "" if x is None else ("true" if x else "false")


def record(c: SessionCheck) -> dict[str, str]:
    """A row as CSV text fields (ms; empty: absent or not applicable, ``reason`` says which)."""
    ev, s = c.event, c.silence
    return {
        "kind": ev.kind, "index": str(ev.index), "rep": str(ev.rep), "pause_ms": f"{ev.nominal_ms:g}",
        "true_ms": _f(ev.true_s * 1e3, 3), "uncertainty_ms": _f(ev.uncertainty_s * 1e3, 3), "protocol": c.protocol,
        "peer": c.peer, "judged": _b(c.judged), "limit_ms": _f(c.limit_ms),
        "silence_ms": _f(s.gap_ms if s else None, 3),
        "silence_start_ns": "" if s is None or s.start_ns is None else str(s.start_ns),
        "silence_end_ns": "" if s is None or s.end_ns is None else str(s.end_ns),
        "silence_open": _b(c.silence_open if s is not None else None),
        "packets": "" if s is None else str(s.packets),
        "deciding_silence_ms": _f(c.deciding_silence_ms, 3),
        "flaps": "" if c.flaps is None else str(len(c.flaps)),
        "causes": "; ".join(sorted({f.cause or "?" for f in c.flaps or ()})),
        "went_down": _b(c.went_down), "expected_down": _b(c.expected_down), "pass_session": _b(c.passed_session),
        "match_error_ms": _f(c.match_error_ms, 3), "match_target_ms": _f(c.match_target_ms),
        "pass_match": _b(c.passed_match), "pass": _b(c.passed), "reason": "; ".join(c.reasons),
    }  # fmt: skip


def to_json(cc: ControlCalibration) -> dict[str, Any]:
    """``calibration.json`` ``control_plane``."""
    t = cc.timers
    return {
        "passed": cc.passed,
        "limit_ms": t.limit_ms,
        "timers": {
            "bgp_hold_s": t.bgp_hold_s,
            "bfd_interval_ms": t.bfd_interval_ms,
            "bfd_multiplier": t.bfd_multiplier,
        },
        "match_target": f"{MATCH_INTERVALS} BFD intervals",
        "detect_band_ms": DETECT_BAND_MS,
        "rows": [record(c) for c in cc.checks],
        "notes": list(cc.notes),
    }


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:g}"


def format_lines(cc: ControlCalibration) -> list[str]:
    """The printed table's control-plane lines (one per event, protocol and peer)."""
    t = cc.timers
    timers = f"BFD {t.bfd_interval_ms:g}x{t.bfd_multiplier}, " if t.bfd else ""
    out = [
        f"control plane ({timers}limit {_ms(t.limit_ms)} ms, BGP hold {_ms(t.bgp_hold_s)} s): a silence below the "
        f"limit must leave the session up, above it bring it down; BFD silence - true within "
        f"{MATCH_INTERVALS} intervals",
        f"  {'kind':5} {'dur':>5} {'rep':>3} {'true':>8} {'proto':5} {'peer':4} {'silence':>8} {'decides':>8} "
        f"{'down':5} {'expect':6} {'sil-true':>8} pass",
    ]

    def yn(b: bool | None) -> str:
        return "-" if b is None else ("yes" if b else "no")

    for c in cc.checks:
        s = c.silence.gap_ms if c.silence is not None else None
        verdict = "" if not c.judged else ("yes" if met(c) else "NO")
        out.append(
            f"  {c.event.kind:5} {c.event.nominal_ms:>5g} {c.event.rep + 1:>3} {c.event.true_s * 1e3:>8.2f} "
            f"{c.protocol.upper():5} {c.peer:4} {_f(s) or '-':>8}{'+' if c.silence_open else ' '}"
            f"{_f(c.deciding_silence_ms) or '-':>8} {yn(c.went_down):5} {yn(c.expected_down):6} "
            f"{_f(c.match_error_ms) or '-':>8} {verdict}" + (f"  ({'; '.join(c.reasons)})" if c.reasons else "")
        )
    judged = [c for c in cc.checks if c.judged]
    out.append(f"  control-plane checks met: {sum(met(c) for c in judged)} of {len(judged)}")
    out += [f"  note: {n}" for n in cc.notes]
    return out


def load_control(run_dir: Path, meta: Mapping[str, Any], events: Sequence[Event]) -> ControlCalibration | None:
    """The control-plane calibration of a results directory (None: the run had no peers);
    reads ``peer-<role>.log`` and ``control-<role>.pcap`` (a missing or unreadable one leaves
    that peer's figures null with a note)."""
    from analysis.load import read_peer_records

    peering = meta.get("peering")
    if not isinstance(peering, dict):
        return None
    protocols = tuple(peering.get("protocols") or ())
    peers = peering.get("peers") or {}
    router_addr = {r: str(v["router_addr"]) for r, v in peers.items()}
    tm = peering.get("timers") or {}
    timers = Timers(
        bgp_hold_s=float(tm["bgp_hold_s"]) if isinstance(tm.get("bgp_hold_s"), int | float) else None,
        bfd_interval_ms=float(tm["bfd_interval_ms"]) if "bfd_interval_ms" in tm else None,
        bfd_multiplier=int(tm["bfd_multiplier"]) if "bfd_multiplier" in tm else None,
    )
    notes: list[str] = []
    logs, captures = read_peer_records(run_dir, peers, notes, peer_daemon(peering))
    times = capture_times(captures, router_addr, protocols)
    cc = calibrate_control(events, protocols, logs, times, router_addr, timers, list(peers))
    return ControlCalibration(cc.checks, cc.timers, cc.passed, (*notes, *cc.notes))
