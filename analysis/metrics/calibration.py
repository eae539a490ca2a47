"""Calibration of the downtime estimators against outages of known duration (``make calibrate``).

The orchestrator interrupts the router's forwarding path for a known time while the usual
instruments run, and records each interruption's two *edges*: CLOCK_REALTIME ns immediately
before and immediately after the command that starts it (``cut``/``pause``) and the one that ends
it (``restore``/``resume``).  Each edge happened somewhere in its bracket [before, after], so

    true_s        = mid(end edge) − mid(start edge),   mid = (before + after) / 2
    uncertainty_s = (width(start edge) + width(end edge)) / 2

bounds how far the real duration can be from ``true_s``.  Every downtime estimator of
:mod:`analysis.metrics.downtime` is run on the whole trace with the search span a migration
would give it (:func:`event_spans`): the event's edges widened by the migration window's margin
(:data:`analysis.metrics.window.MARGIN_S`), but never back past the previous event's recovery
(B seen forwarding again) nor on to the next event's start.  The estimator picks the outage among
every gap or stall of that stretch of the stream, as it does in a migration's window, so its
selection is calibrated with its length; and

    error_s = measured_s − true_s

(an estimator that finds no outage has no measurement — flags ``no_gap``/``no_stall`` — and,
for a cut, fails).

* kind ``cut`` (the path is cut in the network, the router keeps running): the outage *is* the
  cut.  Targets, fixed before any data is seen:

  - packets: |error| ≤ 2 × edge spacing + uncertainty.  The last packet before the cut and the
    first after it each lie within one spacing of the stream at B of an edge.  The edge spacing
    is the longest spacing the instrument counts as the stream's normal flow: the sink's gap
    threshold (``--gap-us``: a shorter gap at B is not an outage by its definition), or the
    generator's departure interval when that is longer (:func:`edge_spacing_s`; a departure
    interval is one packet interval, or the burst quantum when the generator sends the packets
    due within a quantum together: :func:`departure_interval_s`).  The departure interval alone
    is not enough: the forwarding path spaces the stream in bursts of its own (a VM under TCG,
    a busy host's softirqs), which B sees as gaps of up to about the threshold at either edge;
    the outage at B exceeds the cut by those, so the error is mostly positive
    (docs/measurements/2026-12-06-calibration-targets.md).
  - counters: |error| ≤ 1 sampling period + 2 × edge spacing + uncertainty (each end of a
    stall is dated at the midpoint of its sampling interval, within half a period, and the
    stall is the same outage at B as the packets', edge spacings included; without the sink's
    record, 1 period + uncertainty).

  A (kind, estimator, duration) row passes when the estimator found every event's outage and
  more than half of its events are within their own targets; an event beyond its target is a
  miss in the event table and in the verdict line's event count.
  Informational: the stream's own granularity near the event (:func:`stream_gap_s`, the longest
  other inter-arrival gap at B within 1 s) and a second verdict with a target of twice it added.
* kind ``pause`` (the hypervisor pauses the router): error = how much longer the data-plane
  outage is than the pause (the resume overhead).  A measurement: no target, ``passed`` None.

Pure functions: arrays and edges in, dataclasses out.  :func:`analyse_dir` reads a results
directory and writes ``calibration.csv``/``calibration_events.csv``/``calibration.json``."""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from analysis.metrics.calibration_event import Edge, Event
from analysis.metrics.downtime import counters_downtime, packets_downtime
from analysis.metrics.window import MARGIN_S, Spans
from migrate.core.rundir import (
    ACTIONS_JSONL,
    CALIBRATION_CSV,
    CALIBRATION_EVENTS_CSV,
    CALIBRATION_JSON,
    COUNTERS_TSV,
    GEN_JSON,
    META_JSON,
    SINK_JSON,
)

if TYPE_CHECKING:
    from analysis.metrics.calibration_control import ControlCalibration

KINDS = ("cut", "pause")
ESTIMATORS = ("packets", "counters")
#: action names of an event's start and end edge, per kind (actions.jsonl)
EDGE_ACTIONS = {"cut": ("cut", "restore"), "pause": ("pause", "resume")}
TARGET_PACKET_INTERVALS = 2
TARGET_PERIODS = 1
#: an event's search span ends this long before the next event's start edge: the next outage's
#: gap at B opens with the last packet before that cut, up to one burst of the path earlier
NEXT_EVENT_GUARD_S = 0.05
#: how far around an event the stream's own inter-arrival gaps are looked at (``stream_gap_s``)
STREAM_WINDOW_S = 1.0
P95 = 95.0
CSV_NAME, EVENTS_CSV_NAME, JSON_NAME = CALIBRATION_CSV, CALIBRATION_EVENTS_CSV, CALIBRATION_JSON
ROW_COLUMNS = (
    "hv", "kind", "estimator", "pause_ms", "n", "detected", "median_true_ms", "median_measured_ms",
    "median_error_ms", "p95_error_ms", "max_abs_error_ms", "resolution_ms", "uncertainty_ms", "target_ms",
    "pass", "stream_gap_ms", "stream_target_ms", "pass_stream", "note",
)  # fmt: skip
EVENT_COLUMNS = (
    "hv", "kind", "estimator", "index", "rep", "pause_ms", "true_ms", "uncertainty_ms", "measured_ms", "detected",
    "error_ms", "resolution_ms", "target_ms", "pass", "stream_gap_ms", "stream_target_ms", "pass_stream",
    "start_before_ns", "start_after_ns", "end_before_ns", "end_after_ns", "outage_start_ns", "outage_end_ns",
    "estimator_resolution_ms", "lost_in_gap", "flags",
)  # fmt: skip


@dataclass(frozen=True)
class Estimate:
    """What one estimator made of one event."""

    event: Event
    estimator: str
    measured_s: float | None
    error_s: float | None
    resolution_s: float
    target_s: float | None
    passed: bool | None
    stream_target_s: float | None
    passed_stream: bool | None
    outage_start_ns: int | None
    outage_end_ns: int | None
    estimator_resolution_s: float | None
    lost_in_gap: int | None
    stream_gap_s: float | None
    flags: tuple[str, ...]

    @property
    def detected(self) -> bool:
        """The estimator found an outage for this event."""
        return self.measured_s is not None


@dataclass(frozen=True)
class Row:
    """All events of one (kind, estimator, nominal duration).

    Over the events whose outage the estimator found (``detected`` of ``n``; None if none):
    ``median_error_s`` = median signed error (measured − true), ``p95_error_s`` = 95th percentile
    (linear interpolation) of |error|.  ``uncertainty_s``: the largest event uncertainty;
    ``target_s`` = resolution + that (cuts only); ``passed``: every event seen and within its own
    target (cuts only); ``stream_gap_s``: the largest of the events' :func:`stream_gap_s` (None:
    none above the sink's gap threshold); ``stream_target_s``/``passed_stream``: the same with the
    stream allowance (target + 2 × the event's stream gap), informational."""

    kind: str
    estimator: str
    nominal_ms: float
    n: int
    detected: int
    median_true_s: float
    median_measured_s: float | None
    median_error_s: float | None
    p95_error_s: float | None
    max_abs_error_s: float | None
    resolution_s: float
    uncertainty_s: float
    target_s: float | None
    passed: bool | None
    stream_gap_s: float | None
    stream_target_s: float | None
    passed_stream: bool | None
    note: str


@dataclass(frozen=True)
class Calibration:
    """Per-event estimates, per-row summary and the overall verdict: the cut targets and, with
    routing peers, the control-plane checks (``control``, :mod:`analysis.metrics.calibration_control`);
    None: neither applies."""

    estimates: tuple[Estimate, ...]
    rows: tuple[Row, ...]
    passed: bool | None
    packet_interval_s: float | None
    departure_interval_s: float | None
    gap_threshold_s: float | None
    period_s: float | None
    notes: tuple[str, ...]
    control: ControlCalibration | None = None  # None: no routing peers


#: ``kind`` of the priming cut's records in actions.jsonl (migrate.experiment.calibrate): not an
#: event, never judged
PRIME_KIND = "prime"


def events_from_actions(actions: Iterable[Mapping[str, Any]]) -> tuple[list[Event], list[str]]:
    """Pair the start and end edge records of every event in ``actions.jsonl`` by ``index``.

    Edge records: ``{"action": "cut"|"restore"|"pause"|"resume", "index", "kind", "nominal_ms",
    "rep", "before_ns", "after_ns"}``.  An event without both edges (an interrupted run) is left
    out with a note."""
    starts: dict[int, Mapping[str, Any]] = {}
    ends: dict[int, Mapping[str, Any]] = {}
    for a in actions:
        kind = a.get("kind")
        if kind not in EDGE_ACTIONS or not isinstance(a.get("index"), int):
            continue
        first, last = EDGE_ACTIONS[kind]
        if a.get("action") == first:
            starts[a["index"]] = a
        elif a.get("action") == last and a.get("reason") is None:
            ends[a["index"]] = a
    recovered = {
        int(a["index"]): int(a["t_ns"])
        for a in actions
        if a.get("action") == "forwarding-observed" and all(isinstance(a.get(k), int) for k in ("index", "t_ns"))
    }
    events, notes = [], []
    for i in sorted(starts):
        s = starts[i]
        e = ends.get(i)
        if e is None:
            notes.append(f"event {i} ({s['kind']} {s.get('nominal_ms')} ms) has no end edge: left out")
            continue
        events.append(
            Event(
                index=i,
                kind=str(s["kind"]),
                nominal_ms=float(s["nominal_ms"]),
                rep=int(s.get("rep", 0)),
                start=Edge(int(s["before_ns"]), int(s["after_ns"])),
                end=Edge(int(e["before_ns"]), int(e["after_ns"])),
                recovered_ns=recovered.get(i),
            )
        )
    return events, notes


def primed_ns(actions: Iterable[Mapping[str, Any]]) -> int | None:
    """When the orchestrator saw B receive again after the priming cut (``forwarding-observed``
    with ``kind`` "prime"), None without one (a run from before the priming cut)."""
    for a in actions:
        if a.get("action") == "forwarding-observed" and a.get("kind") == PRIME_KIND and isinstance(a.get("t_ns"), int):
            return int(a["t_ns"])
    return None


def event_spans(events: Sequence[Event], margin_s: float = MARGIN_S, floor_ns: int | None = None) -> list[Spans]:
    """One span per event (events in time order), as a migration's window would give it: the
    event's [start.before, end.after] widened by ``margin_s`` on each side, but starting no
    earlier than the previous event's recovery (``recovered_ns``, else its end edge) and ending
    :data:`NEXT_EVENT_GUARD_S` before the next event's start edge; the first event's span starts
    no earlier than ``floor_ns`` (the recovery from the priming cut).  Search and clip span are
    the same stretch: an outage reaching beyond it is cut there and flagged ``clipped_*``."""
    margin_ns, guard_ns = int(margin_s * 1e9), int(NEXT_EVENT_GUARD_S * 1e9)
    out = []
    for i, ev in enumerate(events):
        lo = ev.start.before_ns - margin_ns
        hi = ev.end.after_ns + margin_ns
        if floor_ns is not None:
            lo = max(lo, floor_ns)
        if i > 0:
            prev = events[i - 1]
            lo = max(lo, prev.recovered_ns if prev.recovered_ns is not None else prev.end.after_ns)
        if i + 1 < len(events):
            hi = min(hi, events[i + 1].start.before_ns - guard_ns)
        lo, hi = min(lo, ev.start.before_ns), max(hi, ev.end.after_ns)
        out.append(Spans(lo, hi, lo, hi))
    return out


NOT_FOUND_FLAGS = frozenset({"no_gap", "no_stall", "no_samples"})


def outage_length_s(d: Any) -> float | None:
    """An estimator result's outage length: ``downtime_s``, else the bound it gives (``extent_s``,
    ``lower_s``: clipped or open outages, flagged); None when it found no outage (flags
    ``no_gap``/``no_stall``) — no outage found is not an outage of 0 s."""
    if NOT_FOUND_FLAGS & set(d.flags):
        return None
    for attr in ("downtime_s", "extent_s", "lower_s"):
        value = getattr(d, attr, None)
        if value is not None:
            return float(value)
    return None


def _judge(ev: Event, measured_s: float | None, resolution_s: float, stream_s: float | None) -> dict[str, Any]:
    """Error and verdicts: a cut the estimator did not see fails; pauses get no verdict.  The
    stream allowance adds 2 × ``stream_s``: the outage at B can exceed the cut by the stream's
    own gaps straddling its two edges."""
    error_s = None if measured_s is None else measured_s - ev.true_s
    if ev.kind != "cut":
        return {"error_s": error_s, "target_s": None, "passed": None, "stream_target_s": None, "passed_stream": None}
    target_s = resolution_s + ev.uncertainty_s
    stream_target_s = target_s + 2 * (stream_s or 0.0)
    return {
        "error_s": error_s,
        "target_s": target_s,
        "passed": error_s is not None and abs(error_s) <= target_s,
        "stream_target_s": stream_target_s,
        "passed_stream": error_s is not None and abs(error_s) <= stream_target_s,
    }


def stream_gap_s(
    gaps: np.ndarray,
    span: Spans,
    outage: tuple[int, int] | None,
    window_s: float = STREAM_WINDOW_S,
    around: tuple[int, int] | None = None,
) -> float | None:
    """The stream's own granularity near an event: the longest inter-arrival gap the sink
    recorded within ``window_s`` of ``around`` (the event's edges; default: the search span),
    inside the clip span, that does not overlap the event's outage ``outage`` = (t_before,
    t_after).  None when the sink recorded none there (every such gap was below its threshold)."""
    g = np.asarray(gaps, dtype=np.int64).reshape(-1, 4)
    w = int(window_s * 1e9)
    a_lo, a_hi = around if around is not None else (span.search_lo_ns, span.search_hi_ns)
    lo, hi = max(span.clip_lo_ns, a_lo - w), min(span.clip_hi_ns, a_hi + w)
    near = (g[:, 0] >= lo) & (g[:, 1] <= hi)
    if outage is not None:
        near &= ~((g[:, 0] < outage[1]) & (g[:, 1] > outage[0]))
    return float((g[near, 1] - g[near, 0]).max() / 1e9) if near.any() else None


def _packets(ev: Event, span: Spans, gaps: np.ndarray, resolution_s: float) -> Estimate:
    d = packets_downtime(gaps, span)
    measured = outage_length_s(d)
    outage = (d.t_before_ns, d.t_after_ns) if measured is not None else None
    stream_s = stream_gap_s(gaps, span, outage, around=(ev.start.before_ns, ev.end.after_ns))
    return Estimate(
        event=ev, estimator="packets", measured_s=measured, resolution_s=resolution_s,
        outage_start_ns=d.t_before_ns, outage_end_ns=d.t_after_ns, estimator_resolution_s=None,
        lost_in_gap=d.lost_in_gap, stream_gap_s=stream_s, flags=tuple(d.flags),
        **_judge(ev, measured, resolution_s, stream_s),
    )  # fmt: skip


def _counters(
    ev: Event,
    span: Spans,
    t_ns: np.ndarray,
    rx: np.ndarray,
    period_ns: int,
    pkt_s: float | None,
    stream_s: float | None,
    spacing_s: float,
) -> Estimate:
    resolution_s = TARGET_PERIODS * period_ns / 1e9 + TARGET_PACKET_INTERVALS * spacing_s
    d = counters_downtime(t_ns, rx, period_ns, span, pkt_s)
    if d is None:
        flags, measured, start, end, res = ("no_samples",), None, None, None, None
    else:
        flags, measured, res = tuple(d.flags), outage_length_s(d), d.resolution_s
        start, end = d.t_before_ns, d.t_after_ns
    return Estimate(
        event=ev, estimator="counters", measured_s=measured, resolution_s=resolution_s,
        outage_start_ns=start, outage_end_ns=end, estimator_resolution_s=res, lost_in_gap=None,
        stream_gap_s=stream_s, flags=flags, **_judge(ev, measured, resolution_s, stream_s),
    )  # fmt: skip


def departure_interval_s(packet_interval_s: float, send_quantum_s: float | None) -> float:
    """Time between the generator's departures: one packet interval, or, when it sends the
    packets due within a quantum together (vrgen's burst pacing), the quantum."""
    return max(packet_interval_s, send_quantum_s or 0.0)


def edge_spacing_s(departure_s: float, gap_threshold_s: float | None) -> float:
    """How far from an edge the last packet before it (or the first after it) may arrive at B
    in a stream the instrument counts as flowing normally: the sink's gap threshold (a shorter
    gap is the stream's normal spacing by the sink's own definition), or the departure interval
    when that is longer; the departure interval alone when the threshold is unknown."""
    return max(departure_s, gap_threshold_s or 0.0)


def calibrate(
    events: Sequence[Event],
    b_t_ns: np.ndarray | None,
    b_rx_packets: np.ndarray | None,
    period_ns: int | None,
    gaps: np.ndarray | None,
    packet_interval_s: float | None,
    send_quantum_s: float | None = None,
    gap_threshold_s: float | None = None,
    margin_s: float = MARGIN_S,
    floor_ns: int | None = None,
) -> Calibration:
    """Run every estimator on every event and compare (see the module docstring).

    ``b_t_ns``/``b_rx_packets``: B eth0's sampled rx_packets; ``gaps``: the sink's recorded
    inter-arrival gaps ``[t_before_ns, t_after_ns, seq_before, seq_after]``; ``packet_interval_s``:
    1 / the generator's achieved packet rate; ``send_quantum_s``: the span within which it sends
    the packets due together (gen.json ``quantum_us`` when a quantum holds more than one packet);
    ``gap_threshold_s``: the sink's gap threshold (sink.json ``gap_threshold_ns``).  The packets
    target is 2 edge spacings (:func:`edge_spacing_s`).  ``floor_ns``: no span starts earlier
    (the priming cut's recovery, :func:`primed_ns`).  An estimator whose data is missing is
    left out with a note."""
    evs = sorted(events, key=lambda e: e.start.before_ns)
    spans = event_spans(evs, margin_s, floor_ns)
    notes: list[str] = []
    have_packets = gaps is not None and packet_interval_s is not None and packet_interval_s > 0
    have_counters = b_t_ns is not None and b_rx_packets is not None and bool(period_ns)
    if not have_packets:
        notes.append("no sink gaps or packet rate: packets estimator not calibrated")
    if not have_counters:
        notes.append("no B eth0 counters or sampling period: counters estimator not calibrated")
    dep_s = departure_interval_s(float(packet_interval_s), send_quantum_s) if have_packets else None
    # the outage at B both estimators see: the cut plus up to one edge spacing at each edge
    spacing = edge_spacing_s(dep_s, gap_threshold_s) if dep_s is not None else 0.0
    if have_packets and not gap_threshold_s:
        notes.append("the sink's gap threshold is not recorded: the packets target allows departure intervals only")
    g = np.asarray(gaps if gaps is not None else [], dtype=np.int64).reshape(-1, 4)
    estimates: list[Estimate] = []
    for ev, span in zip(evs, spans, strict=True):
        stream_s = None
        if have_packets:
            assert dep_s is not None
            est = _packets(ev, span, g, TARGET_PACKET_INTERVALS * spacing)
            stream_s = est.stream_gap_s
            estimates.append(est)
        if have_counters:
            assert period_ns is not None
            t, rx = np.asarray(b_t_ns, dtype=np.int64), np.asarray(b_rx_packets)
            estimates.append(_counters(ev, span, t, rx, int(period_ns), packet_interval_s, stream_s, spacing))
    rows = summarise(estimates)
    cut_rows = [r for r in rows if r.kind == "cut"]
    passed = all(bool(r.passed) for r in cut_rows) if cut_rows else None
    return Calibration(
        estimates=tuple(estimates),
        rows=tuple(rows),
        passed=passed,
        packet_interval_s=packet_interval_s if have_packets else None,
        departure_interval_s=dep_s,
        gap_threshold_s=gap_threshold_s if have_packets else None,
        period_s=period_ns / 1e9 if have_counters and period_ns else None,
        notes=tuple(notes),
    )


def _row_note(kind: str, group: list[Estimate]) -> str:
    missed = [e for e in group if not e.detected]
    if not missed:
        return ""
    what = "no outage found" if kind == "pause" else "cut not seen"
    return f"{what} in {len(missed)} of {len(group)} ({', '.join(sorted({f for e in missed for f in e.flags}))})"


def _row_key(key: tuple[str, str, float], order: Mapping[str, int]) -> tuple[int, int, float]:
    return order[key[0]], order[key[1]], key[2]


def _majority_within(group: Sequence[Estimate], verdict: str) -> bool:
    """A row's verdict: every event's outage found, and more than half of the events within their
    own targets.  A single event beyond its target (the router's own gap at an edge: under TCG
    its vCPU and I/O thread stall now and then for milliseconds, see
    docs/measurements/2026-12-06-calibration-targets.md) is a miss in the event table and in
    the verdict line's event count; a systematic error fails the row."""
    if not all(e.detected for e in group):
        return False
    return 2 * sum(bool(getattr(e, verdict)) for e in group) > len(group)


def summarise(estimates: Sequence[Estimate]) -> list[Row]:
    """One :class:`Row` per (kind, estimator, nominal duration), in that order."""
    groups: dict[tuple[str, str, float], list[Estimate]] = {}
    for e in estimates:
        groups.setdefault((e.event.kind, e.estimator, e.event.nominal_ms), []).append(e)
    order = {k: i for i, k in enumerate(KINDS)} | {k: i for i, k in enumerate(ESTIMATORS)}
    rows = []
    for (kind, est, nominal), group in sorted(
        groups.items(), key=lambda kv: (order[kv[0][0]], order[kv[0][1]], kv[0][2])
    ):
        seen = [e for e in group if e.error_s is not None]
        err = np.array([e.error_s for e in seen], dtype=float)
        measured = [e.measured_s for e in seen]
        uncertainty = max(e.event.uncertainty_s for e in group)
        resolution = max(e.resolution_s for e in group)
        rows.append(
            Row(
                kind=kind, estimator=est, nominal_ms=nominal, n=len(group),
                detected=sum(e.detected for e in group),
                median_true_s=float(np.median([e.event.true_s for e in group])),
                median_measured_s=float(np.median(measured)) if seen else None,
                median_error_s=float(np.median(err)) if seen else None,
                p95_error_s=float(np.percentile(np.abs(err), P95)) if seen else None,
                max_abs_error_s=float(np.max(np.abs(err))) if seen else None,
                resolution_s=resolution, uncertainty_s=uncertainty,
                target_s=resolution + uncertainty if kind == "cut" else None,
                passed=_majority_within(group, "passed") if kind == "cut" else None,
                stream_gap_s=max((e.stream_gap_s for e in group if e.stream_gap_s is not None), default=None),
                stream_target_s=max(e.stream_target_s or 0.0 for e in group) if kind == "cut" else None,
                passed_stream=_majority_within(group, "passed_stream") if kind == "cut" else None,
                note=_row_note(kind, group),
            )
        )  # fmt: skip
    return rows


# -- files ------------------------------------------------------------------------------------


def _ms(x: float | None, nd: int = 3) -> str:
    return "" if x is None or not math.isfinite(x) else f"{x * 1e3:.{nd}f}"


def _flag(b: bool | None) -> str:
    return "" if b is None else ("true" if b else "false")


def row_record(hv: str, r: Row) -> dict[str, str]:
    """A row as CSV text fields (ms with µs resolution; ``pass`` empty for pauses)."""
    return {
        "hv": hv, "kind": r.kind, "estimator": r.estimator, "pause_ms": f"{r.nominal_ms:g}", "n": str(r.n),
        "detected": str(r.detected), "median_true_ms": _ms(r.median_true_s),
        "median_measured_ms": _ms(r.median_measured_s),
        "median_error_ms": _ms(r.median_error_s), "p95_error_ms": _ms(r.p95_error_s),
        "max_abs_error_ms": _ms(r.max_abs_error_s), "resolution_ms": _ms(r.resolution_s),
        "uncertainty_ms": _ms(r.uncertainty_s), "target_ms": _ms(r.target_s), "pass": _flag(r.passed),
        "stream_gap_ms": _ms(r.stream_gap_s), "stream_target_ms": _ms(r.stream_target_s),
        "pass_stream": _flag(r.passed_stream), "note": r.note,
    }  # fmt: skip


def event_record(hv: str, e: Estimate) -> dict[str, str]:
    """One estimate as CSV text fields."""
    ev = e.event

    def opt(x: int | None) -> str:
        return "" if x is None else str(x)

    return {
        "hv": hv, "kind": ev.kind, "estimator": e.estimator, "index": str(ev.index), "rep": str(ev.rep),
        "pause_ms": f"{ev.nominal_ms:g}", "true_ms": _ms(ev.true_s), "uncertainty_ms": _ms(ev.uncertainty_s),
        "measured_ms": _ms(e.measured_s), "detected": _flag(e.detected), "error_ms": _ms(e.error_s),
        "resolution_ms": _ms(e.resolution_s), "target_ms": _ms(e.target_s), "pass": _flag(e.passed),
        "stream_target_ms": _ms(e.stream_target_s), "pass_stream": _flag(e.passed_stream),
        "start_before_ns": str(ev.start.before_ns), "start_after_ns": str(ev.start.after_ns),
        "end_before_ns": str(ev.end.before_ns), "end_after_ns": str(ev.end.after_ns),
        "outage_start_ns": opt(e.outage_start_ns), "outage_end_ns": opt(e.outage_end_ns),
        "estimator_resolution_ms": _ms(e.estimator_resolution_s), "lost_in_gap": opt(e.lost_in_gap),
        "stream_gap_ms": _ms(e.stream_gap_s), "flags": " ".join(e.flags),
    }  # fmt: skip


def _write_csv(path: Path, columns: Sequence[str], records: Iterable[dict[str, str]]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=list(columns), lineterminator="\n")
        w.writeheader()
        w.writerows(records)
    tmp.replace(path)


def send_timing(gen: Mapping[str, Any]) -> tuple[float | None, float | None]:
    """(packet interval = 1 / achieved pps, burst quantum) from ``gen.json``; the quantum only
    when vrgen sent more than one packet per quantum (its ``quantum_packets``), else None."""
    pps = gen.get("achieved_pps")
    pkt = 1.0 / pps if isinstance(pps, int | float) and pps > 0 else None
    q_us, q_pkts = gen.get("quantum_us"), gen.get("quantum_packets")
    quantum = q_us / 1e6 if isinstance(q_us, int | float) and isinstance(q_pkts, int | float) and q_pkts > 1 else None
    return pkt, quantum


def load_and_calibrate(run_dir: Path) -> tuple[Calibration, str]:
    """Read a calibration results directory (actions.jsonl, counters.tsv, sink.json, gen.json,
    meta.json) and calibrate; returns the calibration and the HV label."""
    from analysis.load import load_counters, read_json, read_jsonl, sink_gaps
    from analysis.metrics.calibration_control import load_control
    from analysis.metrics.clock import GEN_ROLE, SINK_ROLE, clock_figures, sink_on_orchestrator_clock

    run_dir = Path(run_dir)
    notes: list[str] = []
    meta = read_json(run_dir / META_JSON) if (run_dir / META_JSON).exists() else {}
    spec = meta.get("calibration") or {}
    hv = str(spec.get("hv", "?")) + ("" if spec.get("driver", "qmp") == "qmp" else f"-{spec.get('driver')}")
    actions = read_jsonl(run_dir / ACTIONS_JSONL) if (run_dir / ACTIONS_JSONL).exists() else []
    events, ev_notes = events_from_actions(actions)
    notes += ev_notes
    t = rx = period = None
    if (run_dir / COUNTERS_TSV).exists():
        c = load_counters(run_dir / COUNTERS_TSV)
        b = c.get("B", "eth0")
        if b is not None:
            t, rx, period = b.t_ns, b.rx_packets, c.period_ns
    gaps = pkt = quantum = threshold = None
    if (run_dir / SINK_JSON).exists():
        sink = read_json(run_dir / SINK_JSON)
        t_ns = sink.get("gap_threshold_ns")
        threshold = t_ns / 1e9 if isinstance(t_ns, int | float) and not isinstance(t_ns, bool) and t_ns > 0 else None
        clock = clock_figures(meta)
        if clock.testbed == "lab":  # the edges are the orchestrator's, the gaps B's: one clock
            if {SINK_ROLE, GEN_ROLE} <= set(clock.offsets_ns):
                off = clock.offsets_ns
                sink = sink_on_orchestrator_clock(sink, off[SINK_ROLE], off[GEN_ROLE])
            else:
                notes.append("clock: no measured offset of B: the sink's gaps stay on B's clock")
        gaps = sink_gaps(sink)
    if (run_dir / GEN_JSON).exists():
        pkt, quantum = send_timing(read_json(run_dir / GEN_JSON))
    cal = calibrate(events, t, rx, period, gaps, pkt, quantum, threshold, floor_ns=primed_ns(actions))
    control = load_control(run_dir, meta, events)
    if control is None and (spec.get("peering") or ""):
        notes.append("PEERING was asked but meta.json has no peering record (the peers never came up)")
    passed = combine(cal.passed, None if control is None else control.passed)
    return replace(cal, notes=(*notes, *cal.notes), control=control, passed=passed), hv


def combine(*verdicts: bool | None) -> bool | None:
    """The overall verdict: False if any is False, True if some are True and none False, None
    if none applies."""
    known = [v for v in verdicts if v is not None]
    return all(known) if known else None


def write_outputs(run_dir: Path, cal: Calibration, hv: str) -> None:
    """``calibration.csv`` (rows), ``calibration_events.csv`` (one line per event and estimator)
    and ``calibration.json`` (rows, verdict, notes)."""
    from analysis.metrics import calibration_control as ccm

    run_dir = Path(run_dir)
    _write_csv(run_dir / CSV_NAME, ROW_COLUMNS, (row_record(hv, r) for r in cal.rows))
    _write_csv(run_dir / EVENTS_CSV_NAME, EVENT_COLUMNS, (event_record(hv, e) for e in cal.estimates))
    if cal.control is not None:
        _write_csv(run_dir / ccm.CSV_NAME, ccm.COLUMNS, (ccm.record(c) for c in cal.control.checks))
    doc = {
        "hv": hv,
        "passed": cal.passed,
        "packet_interval_s": cal.packet_interval_s,
        "departure_interval_s": cal.departure_interval_s,
        "gap_threshold_s": cal.gap_threshold_s,
        "period_s": cal.period_s,
        "targets": {
            "packets": f"{TARGET_PACKET_INTERVALS} edge spacings (the sink's gap threshold, or the departure "
            "interval if longer) + edge uncertainty",
            "counters": f"{TARGET_PERIODS} sampling period + {TARGET_PACKET_INTERVALS} edge spacings + edge "
            "uncertainty",
        },
        "rows": [asdict(r) for r in cal.rows],
        "control_plane": None if cal.control is None else ccm.to_json(cal.control),
        "notes": list(cal.notes),
    }
    tmp = run_dir / f".{JSON_NAME}.tmp"
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    tmp.replace(run_dir / JSON_NAME)


def analyse_dir(run_dir: Path) -> tuple[Calibration, str]:
    """Calibrate a results directory and write its outputs."""
    cal, hv = load_and_calibrate(run_dir)
    write_outputs(run_dir, cal, hv)
    return cal, hv


def format_table(cal: Calibration, hv: str) -> str:
    """The human summary printed by ``make calibrate`` (ms)."""
    dep = cal.departure_interval_s
    lines = [
        f"calibration {hv}: packet interval {_ms(cal.packet_interval_s)} ms, departures every {_ms(dep)} ms, "
        f"sink gap threshold {_ms(cal.gap_threshold_s) or '-'} ms, sampling period {_ms(cal.period_s, 1)} ms; "
        "error = measured − true (pause: how much longer the outage is)",
        f"  {'kind':5} {'estimator':9} {'dur':>5} {'n':>3} {'seen':>4} {'true':>8} {'measured':>9} "
        f"{'med err':>8} {'p95|err|':>8} {'max|err|':>8} {'target':>7} pass {'stream':>7} {'target':>7} pass",
    ]
    for r in cal.rows:
        verdict = "" if r.passed is None else ("yes" if r.passed else "NO")
        verdict_s = "" if r.passed_stream is None else ("yes" if r.passed_stream else "NO")
        lines.append(
            f"  {r.kind:5} {r.estimator:9} {r.nominal_ms:>5g} {r.n:>3} {r.detected:>4} {_ms(r.median_true_s, 2):>8} "
            f"{_ms(r.median_measured_s, 2) or '-':>9} {_ms(r.median_error_s, 2) or '-':>8} "
            f"{_ms(r.p95_error_s, 2) or '-':>8} {_ms(r.max_abs_error_s, 2) or '-':>8} {_ms(r.target_s, 2) or '-':>7} "
            f"{verdict:4} {_ms(r.stream_gap_s, 2) or '-':>7} {_ms(r.stream_target_s, 2) or '-':>7} {verdict_s:4}"
            + (f"  ({r.note})" if r.note else "")
        )
    cut_rows = [r for r in cal.rows if r.kind == "cut"]
    if cut_rows:
        cut_events = [e for e in cal.estimates if e.event.kind == "cut" and e.passed is not None]
        lines.append(
            f"  cut targets met: {sum(bool(r.passed) for r in cut_rows)} of {len(cut_rows)} rows "
            f"(events within their own targets: {sum(bool(e.passed) for e in cut_events)} of {len(cut_events)})"
        )
    lines.append(
        "  stream = the longest other inter-arrival gap at B within 1 s of the events ('-': none recorded); "
        "the second target adds twice it (informational)"
    )
    if cal.control is not None:
        from analysis.metrics.calibration_control import format_lines

        lines += format_lines(cal.control)
    lines += [f"  note: {n}" for n in cal.notes]
    return "\n".join(lines)


if __name__ == "__main__":
    import sys

    result, label = analyse_dir(Path(sys.argv[1]))
    print(format_table(result, label))
