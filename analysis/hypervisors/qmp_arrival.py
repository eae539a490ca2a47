"""How late QMP events reach the orchestrator: for every record of ``qmp_events.jsonl``, its
arrival stamp (``t_ns``, the orchestrator's CLOCK_REALTIME when its QMP client dispatched the
event) minus QEMU's own timestamp of it (``qemu_t_ns``: QEMU stamps each event with
CLOCK_REALTIME when it emits it), per event kind.  Both stamps come from the one host clock of
the testbed, so the difference is the delivery delay of the event: QEMU's monitor writing it,
the socket, and the client reading and parsing it.

``python -m analysis.hypervisors.qmp_arrival [--out CSV] DIR...`` (``make bench-qmp``): each DIR
is a run directory or a results root (every run directory below it that holds a
``qmp_events.jsonl``); the events of one DIR are pooled and labelled by its name."""

from __future__ import annotations

import argparse
import csv
import sys
from collections.abc import Iterable, Mapping
from dataclasses import astuple, dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np

from migrate.core.rundir import QMP_EVENTS_JSONL

ALL = "(all)"


@dataclass(frozen=True)
class ArrivalLatency:
    """Arrival minus QEMU timestamp of the events of one kind (ms); min/median/p95/max are None
    when no event of the kind carried both stamps.  p95 is numpy's linear interpolation between
    order statistics (with fewer than 20 events it lies between the two largest)."""

    label: str
    runs: int
    event: str
    n: int
    min_ms: float | None
    median_ms: float | None
    p95_ms: float | None
    max_ms: float | None


COLUMNS = tuple(f.name for f in fields(ArrivalLatency))


def arrival_latency_ms(events: Iterable[Mapping[str, Any]]) -> dict[str, np.ndarray]:
    """event kind -> (arrival - QEMU timestamp) in ms of its events, in file order; records without
    QEMU's timestamp (``qemu_t_ns`` missing or 0) or without an arrival stamp are left out."""
    out: dict[str, list[float]] = {}
    for ev in events:
        t, q = ev.get("t_ns"), ev.get("qemu_t_ns")
        if not isinstance(t, int) or not isinstance(q, int) or q <= 0:
            continue
        out.setdefault(str(ev.get("event")), []).append((t - q) / 1e6)
    return {k: np.asarray(v, dtype=float) for k, v in out.items()}


def _stats(label: str, runs: int, event: str, d: np.ndarray) -> ArrivalLatency:
    if d.size == 0:
        return ArrivalLatency(label, runs, event, 0, None, None, None, None)
    return ArrivalLatency(
        label,
        runs,
        event,
        int(d.size),
        float(d.min()),
        float(np.median(d)),
        float(np.percentile(d, 95)),
        float(d.max()),
    )


def summarize(label: str, runs: int, events: Iterable[Mapping[str, Any]]) -> list[ArrivalLatency]:
    """One row per event kind (by name) and a last row over all events (``event`` = ``(all)``) of
    ``runs`` runs pooled under ``label``."""
    per_kind = arrival_latency_ms(events)
    rows = [_stats(label, runs, kind, d) for kind, d in sorted(per_kind.items())]
    pooled = np.concatenate(list(per_kind.values())) if per_kind else np.empty(0)
    return [*rows, _stats(label, runs, ALL, pooled)]


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
    lines += ["| " + " | ".join(_fmt(v) if i > 2 else str(v) for i, v in enumerate(astuple(r))) + " |" for r in rows]
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    """The arguments (``RUNS``: the Make variable of ``make bench-qmp``)."""
    p = argparse.ArgumentParser(prog="python -m analysis.hypervisors.qmp_arrival", description=__doc__)
    p.add_argument("dirs", nargs="+", type=Path, metavar="RUNS", help="run directories or results roots")
    p.add_argument("--out", type=Path, help="CSV to write (columns: " + ", ".join(COLUMNS) + ")")
    return p


def main(argv: list[str] | None = None) -> int:
    """Print (and with ``--out`` write as CSV) the arrival latency of each DIR's QMP events."""
    from analysis.load import read_jsonl

    a = build_parser().parse_args(argv)
    rows: list[ArrivalLatency] = []
    for d in a.dirs:
        runs = run_dirs(d) if d.is_dir() else []
        if not runs:
            why = f"no {QMP_EVENTS_JSONL} in or below {d}: pass run directories of HV=kvm"
            print(f"qmp_arrival: {why}", file=sys.stderr)
            return 2
        events = [ev for r in runs for ev in read_jsonl(r / QMP_EVENTS_JSONL)]
        rows += summarize(d.name, len(runs), events)
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
