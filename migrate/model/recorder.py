"""Append-only JSONL streams of a run: orchestrator actions, QMP events and QMP samples."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

from migrate.core.rundir import ACTIONS_JSONL, QMP_EVENTS_JSONL, QMP_SAMPLES_JSONL

#: stream -> its file in the run directory
STREAMS = {"actions": ACTIONS_JSONL, "qmp_events": QMP_EVENTS_JSONL, "qmp_samples": QMP_SAMPLES_JSONL}


class Recorder:
    """Thread-safe writers for actions.jsonl, qmp_events.jsonl and qmp_samples.jsonl."""

    def __init__(self, run_dir: Path) -> None:
        self._lock = threading.Lock()
        self._files = {stream: open(run_dir / name, "a", encoding="utf-8") for stream, name in STREAMS.items()}

    def _write(self, stream: str, obj: dict[str, Any]) -> None:
        with self._lock:
            fh = self._files[stream]
            fh.write(json.dumps(obj) + "\n")
            fh.flush()

    def action(self, action: str, t_ns: int | None = None, **info: Any) -> int:
        """Record what the orchestrator did; returns the CLOCK_REALTIME ns it was recorded at."""
        t = t_ns if t_ns is not None else time.time_ns()
        self._write("actions", {"t_ns": t, "action": action, **info})
        return t

    def event(self, ev: dict[str, Any]) -> None:
        """Record a QMP event (already timestamped by the QMP reader)."""
        self._write("qmp_events", ev)

    def sample(self, side: str, t_ns: int, reply: dict[str, Any]) -> None:
        """Record one query-migrate reply."""
        self._write("qmp_samples", {"t_ns": t_ns, "side": side, "reply": reply})

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Flush and close all streams."""
        with self._lock:
            for fh in self._files.values():
                fh.close()
