"""The on-disk format of a sweep (or nightly) directory, and its validation.

```
<sweep dir>/
  .vrmig-sweep          marker: this directory was made by vrmig
  meta.json             kind (sweep|nightly), grid/points, reps, seed, run order, versions
  state.json            progress: outcome of every finished run, abandoned attempts, the run in flight
  runs/                 one results directory per run (migrate.experiment.run.run)
  runs.csv points.csv *.png report.html   (outputs, rebuilt from runs/ by `vrmig report`)
  ab/                   a night's in-night A/B (migrate.campaigns.ab): accepted/ and tonight/ (one
                        results directory per run), ab.json, build.log, accepted.log, tonight.log
```
Every file is written atomically; nothing here ever deletes a run directory."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

from migrate.core.atomic import write_json
from migrate.core.errors import ConfigError
from migrate.core.rundir import META_JSON, SWEEP_FORMAT, SWEEP_KINDS

SWEEP_MARKER = ".vrmig-sweep"
FORMAT_VERSION = SWEEP_FORMAT  # of meta.json and state.json (the results contract, migrate.core.rundir)
KINDS = SWEEP_KINDS
META_NAME = META_JSON
STATE_NAME = "state.json"
RUNS_SUBDIR = "runs"
DONE = ("completed", "failed")  # a run with one of these outcomes is never redone


def now_utc() -> str:
    """ISO 8601 UTC timestamp."""
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")


def stamp_utc() -> str:
    """Compact UTC timestamp for directory names."""
    return dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")


def read_json(path: Path, what: str) -> dict[str, Any]:
    """A JSON object from ``path`` or a ConfigError naming the file (the file is left alone)."""
    try:
        obj = json.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{what}: {path} is missing") from None
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"{what}: cannot read {path}: {err}") from None
    except json.JSONDecodeError as err:
        raise ConfigError(f"{what}: {path} is corrupted (not valid JSON: {err}); nothing was changed") from None
    if not isinstance(obj, dict):
        raise ConfigError(f"{what}: {path} is corrupted (not a JSON object); nothing was changed")
    return obj


def is_sweep_dir(path: Path) -> bool:
    """True if ``path`` carries the sweep marker."""
    return (path / SWEEP_MARKER).is_file()


def new_state() -> dict[str, Any]:
    """An empty progress state."""
    return {"format_version": FORMAT_VERSION, "runs": {}, "attempts": [], "current": None, "updated_utc": now_utc()}


def save_state(sweep_dir: Path, state: dict[str, Any]) -> None:
    """Atomically rewrite state.json."""
    state["updated_utc"] = now_utc()
    write_json(sweep_dir / STATE_NAME, state)


def _require(cond: bool, what: str, msg: str) -> None:
    if not cond:
        raise ConfigError(f"{what}: {msg}; nothing was changed")


def open_sweep(sweep_dir: Path, what: str = "RESUME") -> tuple[dict[str, Any], dict[str, Any]]:
    """Validate a sweep directory and return (meta, state); a foreign or corrupted directory
    raises ConfigError and is left untouched."""
    _require(sweep_dir.is_dir(), what, f"{sweep_dir} is not a directory")
    _require(
        is_sweep_dir(sweep_dir),
        what,
        f"{sweep_dir} is not a vrmig sweep directory (no {SWEEP_MARKER} marker)",
    )
    meta = read_json(sweep_dir / META_NAME, what)
    _require(meta.get("kind") in KINDS, what, f"{sweep_dir / META_NAME} has kind {meta.get('kind')!r}, not a sweep")
    _require(
        meta.get("format_version") == FORMAT_VERSION,
        what,
        f"{sweep_dir / META_NAME} has format_version {meta.get('format_version')!r}; this vrmig reads {FORMAT_VERSION}",
    )
    points, order = meta.get("points"), meta.get("order")
    _require(isinstance(points, list) and points, what, f"{sweep_dir / META_NAME} lists no grid points")
    _require(isinstance(order, list) and order, what, f"{sweep_dir / META_NAME} has no run order")
    labels = {p.get("label") for p in points if isinstance(p, dict)}
    _require(len(labels) == len(points), what, f"{sweep_dir / META_NAME} has malformed or duplicate points")
    ids = [r.get("run_id") for r in order if isinstance(r, dict)]
    _require(len(ids) == len(order) == len(set(ids)), what, f"{sweep_dir / META_NAME} has a malformed run order")
    _require(
        all(r.get("point") in labels for r in order), what, f"{sweep_dir / META_NAME}: run order names unknown points"
    )
    state_path = sweep_dir / STATE_NAME
    state = read_json(state_path, what) if state_path.exists() else new_state()
    _require(isinstance(state.get("runs"), dict), what, f"{state_path} is corrupted (no 'runs' object)")
    _require(isinstance(state.get("attempts", []), list), what, f"{state_path} is corrupted ('attempts' not a list)")
    for run_id, rec in state["runs"].items():
        _require(run_id in ids, what, f"{state_path} records run {run_id!r} that is not in the sweep's order")
        _require(
            isinstance(rec, dict) and rec.get("status") in DONE and isinstance(rec.get("run_dir"), str),
            what,
            f"{state_path}: the record of {run_id!r} is malformed",
        )
        _require(
            (sweep_dir / rec["run_dir"]).is_dir(),
            what,
            f"run {run_id!r}: its results directory {sweep_dir / rec['run_dir']} is missing",
        )
    state.setdefault("attempts", [])
    state.setdefault("current", None)
    return meta, state
