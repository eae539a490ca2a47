"""What the instruments themselves cost and what their records lack (pure functions).

CPU: the orchestrator records each instrument process's CPU time (user + system seconds over the
run) in meta.json ``instruments_cpu_s`` = {"gen", "sink", "sampler", "prober"} (null for one that
did not run or was not measured).  Records: vrgen, vrsink and vrsampler keep bounded lists and
histograms and count what did not fit (``*_dropped``); a non-zero count makes the figures built
from that record incomplete (analysis.qualify)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from analysis.values import finite
from migrate.core.rundir import GEN_JSON

INSTRUMENTS = ("gen", "sink", "sampler", "prober")
#: counted only when meta.json has them (TRAFFIC=tcp / rr: vrtcp's processes and B's capture)
OPTIONAL_INSTRUMENTS = ("tcp",)

#: bounded records of the instruments: (file, counter) -> the figures it affects
DROP_COUNTERS: dict[tuple[str, str], str] = {
    ("gen", "sent_hist_dropped"): "send-time loss (cross_traffic.migration_*/outage_lost_packets)",
    ("gen", "late_events_dropped"): "the generator's late-event list (no figure uses it)",
    ("sink", "gaps_dropped"): "downtime_s.packets (gaps of the window may be missing)",
    ("sink", "tx_hist_dropped"): "send-time loss (cross_traffic.migration_*/outage_lost_packets)",
    ("sink", "hist_dropped"): "the sink's arrival histogram (no figure uses it)",
}


@dataclass(frozen=True)
class Instruments:
    """CPU use of the instruments and the non-zero drop counters of their records.

    cpu_s: each instrument's CPU seconds (meta.json ``instruments_cpu_s``; None = not measured
    or not running); total_cpu_s: sum over the instruments that have a figure (``counted``);
    wall_s: the span the CPU time is spread over, from ``wall_source``: meta.json
    ``instruments_wall_s`` ("meta"), else the generator's start_ns..end_ns (GEN_JSON), else the
    scenario's duration ("scenario"); core_share = total_cpu_s / wall_s (1.0 = one core busy
    all the time).  dropped: "<instrument>.<counter>" -> count, only counters above 0.
    absent: field -> reason code for every None figure."""

    cpu_s: dict[str, float | None] | None
    total_cpu_s: float | None
    counted: tuple[str, ...]
    wall_s: float | None
    wall_source: str | None
    core_share: float | None
    dropped: dict[str, int]
    absent: dict[str, str] | None = None


def _wall(
    meta: Mapping[str, Any], gen: Mapping[str, Any] | None, scenario: Mapping[str, Any]
) -> tuple[float | None, str | None]:
    wall = finite(meta.get("instruments_wall_s"))
    if wall is not None and wall > 0:
        return wall, "meta"
    start, end = (gen or {}).get("start_ns"), (gen or {}).get("end_ns")
    if isinstance(start, int) and isinstance(end, int) and end > start:
        return (end - start) / 1e9, GEN_JSON
    dur = finite(scenario.get("duration_s"))
    if dur is not None and dur > 0:
        return dur, "scenario"
    return None, None


def dropped_counts(gen: Mapping[str, Any] | None, sink: Mapping[str, Any] | None) -> dict[str, int]:
    """Non-zero ``*_dropped`` counters of gen.json and sink.json as {"gen.sent_hist_dropped": n}."""
    out: dict[str, int] = {}
    for (who, key), _ in DROP_COUNTERS.items():
        v = ({"gen": gen, "sink": sink}[who] or {}).get(key)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            out[f"{who}.{key}"] = v
    return out


def instruments(meta: Mapping[str, Any], gen: Mapping[str, Any] | None, sink: Mapping[str, Any] | None) -> Instruments:
    """The instruments' CPU share and drop counters of one run (definitions: ``Instruments``)."""
    raw = meta.get("instruments_cpu_s")
    scenario = meta.get("scenario") if isinstance(meta.get("scenario"), Mapping) else {}
    absent: dict[str, str] = {}
    cpu: dict[str, float | None] | None = None
    total = None
    counted: tuple[str, ...] = ()
    if isinstance(raw, Mapping):
        cpu = {k: finite(raw.get(k)) for k in (*INSTRUMENTS, *(k for k in OPTIONAL_INSTRUMENTS if k in raw))}
        counted = tuple(k for k, v in cpu.items() if v is not None)
        total = sum(v for v in cpu.values() if v is not None) if counted else None
    if total is None:
        absent["total_cpu_s"] = "no_instrument_cpu"
    wall, source = _wall(meta, gen, scenario)
    if wall is None:
        absent["wall_s"] = "no_wall_span"
    share = total / wall if total is not None and wall else None
    if share is None:
        absent["core_share"] = absent.get("total_cpu_s") or absent.get("wall_s") or "no_wall_span"
    return Instruments(cpu, total, counted, wall, source, share, dropped_counts(gen, sink), absent or None)
