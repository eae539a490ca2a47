"""Which clocks a run's figures rest on, and how well they agree.

On the embedded testbed every instrument reads this machine's one ``CLOCK_REALTIME``. On a lab
(``TESTBED=``) each host has its own clock: the orchestrator measures every host's offset at the
start and the end of the run (round-trip bounded, meta.json ``clock.hosts``) and merges the
per-host counters with the mean offsets (meta.json ``lab.offsets_ns``); the analysis puts the
sink's, the generator's and irtt's timestamps on the orchestrator's clock with the same offsets
(``*_on_orchestrator_clock``).  A figure that combines timestamps of two hosts (the migration
window from QMP events against B's packet arrivals or a host's counters) is then uncertain by
those offsets' uncertainty; the packet downtime itself is an inter-arrival gap at B and uses B's
clock alone."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True)
class ClockFigures:
    """``testbed``: "embedded" (one clock) or "lab"; per-host offset and uncertainty (ns,
    host minus orchestrator), whether each host said its clock is synchronised (None: unknown),
    and the largest uncertainty of any cross-host figure (0 on one clock; None if a lab host's
    offset was not measured)."""

    testbed: str
    offsets_ns: dict[str, int] = field(default_factory=dict)
    uncertainty_ns: dict[str, int] = field(default_factory=dict)
    synchronised: dict[str, bool | None] = field(default_factory=dict)
    max_uncertainty_ns: int | None = 0
    packet_downtime_clock: str = "B (inter-arrival gaps at the sink)"
    #: record -> the role whose measured offset was subtracted from its timestamps (lab runs)
    corrected: dict[str, str] = field(default_factory=dict)


def clock_figures(meta: dict[str, Any]) -> ClockFigures:
    """The clock figures of a run from its meta.json."""
    tb = meta.get("testbed") or {}
    if not tb.get("inventory"):
        return ClockFigures("embedded")
    lab = meta.get("lab") or {}
    offs = lab.get("offsets_ns") or {}
    hosts = (meta.get("clock") or {}).get("hosts") or {}
    roles = sorted(set(hosts) | set(offs))
    sync = {r: (hosts.get(r, {}).get("sync") or {}).get("synchronised") for r in roles}
    offsets = {r: int(offs[r]["offset"]) for r in roles if r in offs}
    unc = {r: int(offs[r]["uncertainty"]) for r in roles if r in offs}
    missing = [r for r in roles if r not in offs]
    return ClockFigures(
        "lab",
        offsets,
        unc,
        sync,
        None if missing or not unc else max(unc.values()),
    )


#: the role whose clock stamps each instrument's records (docs/testbed.md "What runs where"):
#: vrsink's receive times are B's, the send stamps vrgen writes into each payload (and so the
#: sink's send-time histogram) are A's, irtt's client send and receive times are C's
SINK_ROLE, GEN_ROLE, IRTT_ROLE = "B", "A", "C"
_SINK_NS = ("first_ns", "last_ns", "start_ns", "end_ns")
_GEN_NS = ("start_ns", "end_ns")
#: vrsink's one-way delay statistics (B's receive minus A's send stamp): each shifts by the same
#: amount when both are put on one clock; the count of negative delays is as B saw them
_OWD_NS = ("min", "median", "max", "p99", "p999", "mean")


def _ms(offset_ns: int) -> int:
    """An offset in whole milliseconds, for the 1 ms histograms (rounded: the histogram start is
    then within 0.5 ms of exact, below its bin width)."""
    return round(offset_ns / 1e6)


def sink_on_orchestrator_clock(sink: Mapping[str, Any], b_offset_ns: int, a_offset_ns: int) -> dict[str, Any]:
    """sink.json with its receive times (B's clock: first/last packet, start/end, every gap's
    before/after time, the receive histogram's start) minus B's offset and its send-time
    histogram's start (A's stamps) minus A's, i.e. on the orchestrator's clock.  ``owd_ns``
    (B's receive minus A's send stamp, per packet) becomes ``(rx - b) - (tx - a)``: each statistic
    minus B's offset plus A's (its ``negative`` count stays the raw one, a sign of the offset)."""
    out = dict(sink)
    for k in _SINK_NS:
        if isinstance(out.get(k), int):
            out[k] = out[k] - b_offset_ns
    gaps = out.get("gaps")
    if isinstance(gaps, list):
        out["gaps"] = [
            [g[0] - b_offset_ns, g[1] - b_offset_ns, g[2], g[3]] if isinstance(g, list | tuple) and len(g) == 4 else g
            for g in gaps
        ]
    if isinstance(out.get("hist_start_ms"), int):
        out["hist_start_ms"] -= _ms(b_offset_ns)
    if isinstance(out.get("tx_hist_start_ms"), int):
        out["tx_hist_start_ms"] -= _ms(a_offset_ns)
    owd = out.get("owd_ns")
    if isinstance(owd, Mapping) and b_offset_ns != a_offset_ns:
        shift = a_offset_ns - b_offset_ns
        out["owd_ns"] = {k: v + shift if k in _OWD_NS and isinstance(v, int | float) else v for k, v in owd.items()}
    return out


def gen_on_orchestrator_clock(gen: Mapping[str, Any], a_offset_ns: int) -> dict[str, Any]:
    """gen.json with its start, end and send histogram's start minus A's offset."""
    out = dict(gen)
    for k in _GEN_NS:
        if isinstance(out.get(k), int):
            out[k] = out[k] - a_offset_ns
    if isinstance(out.get("sent_hist_start_ms"), int):
        out["sent_hist_start_ms"] -= _ms(a_offset_ns)
    return out


def irtt_on_orchestrator_clock(trace: Any, c_offset_ns: int) -> Any:
    """irtt's trace (analysis.load.RttTrace) with its send times minus C's offset; round-trip
    times are differences on C's clock and stay as they are."""
    import dataclasses

    return dataclasses.replace(trace, send_ns=trace.send_ns - c_offset_ns)


def peer_records_on_orchestrator_clock(
    logs: Mapping[str, list[Any]],
    captures: Mapping[str, tuple[np.ndarray, np.ndarray, np.ndarray]],
    offsets_ns: Mapping[str, int],
) -> tuple[dict[str, list[Any]], dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]], list[str]]:
    """The routing peers' records of a lab run (PEERING) on the orchestrator's clock: each
    peer's log events (``LogEvent.t_ns``, the daemon's stamps) and captured packets (tcpdump's
    kernel stamps) are its own host's CLOCK_REALTIME, and lose that host's measured offset.
    Returns (logs, captures, the roles left on their own clock: no measured offset)."""
    import dataclasses

    out_logs: dict[str, list[Any]] = {}
    out_caps: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
    left = sorted((set(logs) | set(captures)) - set(offsets_ns))
    for role, events in logs.items():
        off = offsets_ns.get(role)
        out_logs[role] = events if off is None else [dataclasses.replace(e, t_ns=e.t_ns - off) for e in events]
    for role, (t, src, kind) in captures.items():
        off = offsets_ns.get(role)
        out_caps[role] = (t if off is None else t - np.int64(off), src, kind)
    return out_logs, out_caps, left
