"""How late QMP events reach the orchestrator: for every record of ``qmp_events.jsonl``, its
arrival stamp (``t_ns``, the orchestrator's CLOCK_REALTIME when its QMP client dispatched the
event) minus QEMU's own timestamp of it (``qemu_t_ns``: QEMU stamps each event with
CLOCK_REALTIME when it emits it), per event kind.  On the embedded testbed both stamps come from
the one host clock, so the difference is the delivery delay of the event: QEMU's monitor writing
it, the socket, and the client reading and parsing it.  On a lab QEMU runs on R1 (``side``
src) or R2 (dst), whose clocks are not the orchestrator's: QEMU's stamp is first put on the
orchestrator's clock by its host's measured offset (meta.json ``lab.offsets_ns``, host minus
orchestrator), and an event whose host's offset was not measured is left out and counted
(``unplaced``), never compared across two clocks.  The delivery then includes the SSH forward
of the monitor socket, so lab and embedded runs are never pooled: each DIR gives one group per
testbed (``testbed`` column).

``python -m analysis.hypervisors.qmp_arrival [--out CSV] DIR...`` (``make bench-qmp``): each DIR
is a run directory or a results root (every run directory below it that holds a
``qmp_events.jsonl``); the events of one DIR and testbed are pooled and labelled by its name."""

from __future__ import annotations

import argparse
import csv
import sys
from collections.abc import Iterable, Mapping
from dataclasses import astuple, dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np

from migrate.core.rundir import META_JSON, QMP_EVENTS_JSONL

ALL = "(all)"
#: which host's QEMU emitted an event of each ``side``
SIDE_HOST = {"src": "R1", "dst": "R2"}


@dataclass(frozen=True)
class ArrivalLatency:
    """Arrival minus QEMU timestamp of the events of one kind (ms); min/median/p95/max are None
    when no event of the kind carried both stamps.  p95 is numpy's linear interpolation between
    order statistics (with fewer than 20 events it lies between the two largest)."""

    label: str
    testbed: str
    runs: int
    event: str
    n: int
    unplaced: int
    min_ms: float | None
    median_ms: float | None
    p95_ms: float | None
    max_ms: float | None


COLUMNS = tuple(f.name for f in fields(ArrivalLatency))


def arrival_latency_ms(
    events: Iterable[Mapping[str, Any]], offsets_ns: Mapping[str, int | None] | None = None
) -> tuple[dict[str, np.ndarray], dict[str, int]]:
    """(event kind -> (arrival - QEMU timestamp) in ms of its events in file order, event kind ->
    events left unplaced).  ``offsets_ns``: on a lab, each host's clock offset against the
    orchestrator (None or missing: not measured); None on one clock.  Records without QEMU's
    timestamp (``qemu_t_ns`` missing or 0) or without an arrival stamp are left out; those whose
    host (by ``side``) has no measured offset are counted as unplaced."""
    out: dict[str, list[float]] = {}
    unplaced: dict[str, int] = {}
    for ev in events:
        t, q = ev.get("t_ns"), ev.get("qemu_t_ns")
        if not isinstance(t, int) or not isinstance(q, int) or q <= 0:
            continue
        kind = str(ev.get("event"))
        off: int | None = 0
        if offsets_ns is not None:
            off = offsets_ns.get(SIDE_HOST.get(str(ev.get("side")), ""))
        if off is None:
            unplaced[kind] = unplaced.get(kind, 0) + 1
            continue
        out.setdefault(kind, []).append((t - (q - off)) / 1e6)
    return {k: np.asarray(v, dtype=float) for k, v in out.items()}, unplaced


def _stats(label: str, testbed: str, runs: int, event: str, d: np.ndarray, unplaced: int) -> ArrivalLatency:
    if d.size == 0:
        return ArrivalLatency(label, testbed, runs, event, 0, unplaced, None, None, None, None)
    return ArrivalLatency(
        label,
        testbed,
        runs,
        event,
        int(d.size),
        unplaced,
        float(d.min()),
        float(np.median(d)),
        float(np.percentile(d, 95)),
        float(d.max()),
    )


def summarize(
    label: str,
    runs: int,
    events: Iterable[Mapping[str, Any]],
    testbed: str = "embedded",
    offsets_ns: Mapping[str, int | None] | None = None,
) -> list[ArrivalLatency]:
    """One row per event kind (by name) and a last row over all events (``event`` = ``(all)``) of
    ``runs`` runs of one testbed pooled under ``label`` (``offsets_ns`` as for
    :func:`arrival_latency_ms`)."""
    per_kind, unplaced = arrival_latency_ms(events, offsets_ns)
    return _rows(label, testbed, runs, per_kind, unplaced)


def _rows(
    label: str, testbed: str, runs: int, per_kind: Mapping[str, np.ndarray], unplaced: Mapping[str, int]
) -> list[ArrivalLatency]:
    kinds = sorted(set(per_kind) | set(unplaced))
    rows = [_stats(label, testbed, runs, k, per_kind.get(k, np.empty(0)), unplaced.get(k, 0)) for k in kinds]
    pooled = np.concatenate(list(per_kind.values())) if per_kind else np.empty(0)
    return [*rows, _stats(label, testbed, runs, ALL, pooled, sum(unplaced.values()))]


def run_clock(meta: Mapping[str, Any]) -> tuple[str, dict[str, int | None] | None]:
    """(testbed, host offsets) of a run from its meta.json: ("embedded", None) on one clock;
    ("lab", R1's and R2's measured offsets, None where not measured)."""
    from analysis.metrics.clock import clock_figures

    clock = clock_figures(dict(meta))
    if clock.testbed == "embedded":
        return "embedded", None
    return clock.testbed, {r: clock.offsets_ns.get(r) for r in SIDE_HOST.values()}


def run_dirs(root: Path) -> list[Path]:
    """``root`` itself if it is a run directory, else every run directory below it (sorted)."""
    if (root / QMP_EVENTS_JSONL).is_file():
        return [root]
    return sorted(p.parent for p in root.rglob(QMP_EVENTS_JSONL))


def _fmt(v: float | int | None) -> str:
    if v is None:
        return "null"
    return str(v) if isinstance(v, int) else f"{v:.3f}"


def format_table(rows: list[ArrivalLatency]) -> str:
    """A markdown table of the rows."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(v if isinstance(v, str) else _fmt(v) for v in astuple(r)) + " |" for r in rows]
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    """The arguments (``RUNS``: the Make variable of ``make bench-qmp``)."""
    p = argparse.ArgumentParser(prog="python -m analysis.hypervisors.qmp_arrival", description=__doc__)
    p.add_argument("dirs", nargs="+", type=Path, metavar="RUNS", help="run directories or results roots")
    p.add_argument("--out", type=Path, help="CSV to write (columns: " + ", ".join(COLUMNS) + ")")
    return p


def main(argv: list[str] | None = None) -> int:
    """Print (and with ``--out`` write as CSV) the arrival latency of each DIR's QMP events."""
    from analysis.load import read_json, read_jsonl

    a = build_parser().parse_args(argv)
    rows: list[ArrivalLatency] = []
    for d in a.dirs:
        runs = run_dirs(d) if d.is_dir() else []
        if not runs:
            why = f"no {QMP_EVENTS_JSONL} in or below {d}: pass run directories of HV=kvm"
            print(f"qmp_arrival: {why}", file=sys.stderr)
            return 2
        # per testbed: runs, event kind -> latencies, event kind -> unplaced (each run with its own offsets)
        groups: dict[str, tuple[int, dict[str, list[np.ndarray]], dict[str, int]]] = {}
        for r in runs:
            meta = read_json(r / META_JSON) if (r / META_JSON).is_file() else {}
            testbed, offsets = run_clock(meta if isinstance(meta, dict) else {})
            per_kind, unplaced = arrival_latency_ms(read_jsonl(r / QMP_EVENTS_JSONL), offsets)
            n, lat, left = groups.get(testbed, (0, {}, {}))
            for k, v in per_kind.items():
                lat.setdefault(k, []).append(v)
            for k, c in unplaced.items():
                left[k] = left.get(k, 0) + c
            groups[testbed] = (n + 1, lat, left)
        for testbed, (n, lat, left) in sorted(groups.items()):
            rows += _rows(d.name, testbed, n, {k: np.concatenate(v) for k, v in lat.items()}, left)
    print(format_table(rows))
    if a.out is not None:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        with a.out.open("w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(COLUMNS)
            w.writerows(["" if v is None else v for v in astuple(r)] for r in rows)
        print(a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
