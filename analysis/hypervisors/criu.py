"""CRIU's own migration figures, for runs with HV=criu (pure functions).

Raw input: ``criu.json`` (written by ``migrate.drivers.criu.driver``): the rounds (``pre-dump`` ...,
then ``dump``) with CRIU's ``--display-stats`` dump statistics (``freezing_time_us``,
``frozen_time_us``, ``memory_dump_time_us``, ``memory_write_time_us``, ``memory_pages_scanned``,
``memory_pages_written``, ...), the image transfer, the restore with its statistics
(``restore_time_us``, ``forking_time_us``, ``pages_restored``, ...), ``page_size_bytes`` and
``image_bytes`` (all image files the restore read).

They become the same ``HypervisorFigures`` as QEMU's query-migrate reply does, so summary.json
keeps one schema:

* ``downtime_s`` = frozen time of the final dump + restore time: how long CRIU itself had the
  router stopped by its own clocks (it excludes the image transfer between the two commands and
  the commands' start-up; the orchestrator's final-dump-start -> restore-end time is
  ``stop_to_cont_s`` for stop-and-copy and ``criu.final_dump_to_restored_s`` for both modes);
* ``total_time_s`` = the time CRIU spent on the migration by its own clocks: per pre-dump
  freezing + frozen + memory write (written after the tasks resumed), for the final dump freezing
  + frozen, plus the restore time;
* ``ram_transferred_bytes`` = memory pages CRIU wrote over all rounds x page size (None when a
  round lacks ``pages_written``: a missing statistic is unknown, not 0 pages);
* ``ram_total_bytes`` = pages the final dump scanned x page size."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from analysis.hypervisors.qemu import HypervisorFigures
from analysis.load import read_json
from analysis.metrics.window import Window
from migrate.core.rundir import CRIU_JSON

CRIU_NAME = CRIU_JSON
US = 1e6


@dataclass(frozen=True)
class CriuFigures(HypervisorFigures):
    """HypervisorFigures plus CRIU's per-round and restore statistics (``criu``)."""

    criu: dict[str, Any] | None = None


def load_criu(run_dir: Path, notes: list[str]) -> dict[str, Any] | None:
    """``criu.json`` of the run, or None (with a note)."""
    path = Path(run_dir) / CRIU_NAME
    if not path.exists():
        notes.append(f"{CRIU_NAME} missing")
        return None
    try:
        data = read_json(path)
    except (OSError, ValueError) as err:
        notes.append(f"{CRIU_NAME} unreadable: {err}")
        return None
    return data if isinstance(data, dict) else None


def _s(stats: Mapping[str, Any], key: str) -> float | None:
    v = stats.get(key)
    return float(v) / US if isinstance(v, int | float) else None


def _round_time_s(r: Mapping[str, Any]) -> float | None:
    """CRIU's own time for one (pre-)dump (see the module docstring)."""
    st = r.get("stats") or {}
    parts = [_s(st, "freezing_time_us"), _s(st, "frozen_time_us")]
    if r.get("kind") == "pre-dump":
        parts.append(_s(st, "memory_write_time_us"))
    return None if any(p is None for p in parts) else sum(p for p in parts if p is not None)


def _round_detail(r: Mapping[str, Any]) -> dict[str, Any]:
    st = r.get("stats") or {}
    start, end = r.get("start_ns"), r.get("end_ns")
    return {
        "index": r.get("index"),
        "kind": r.get("kind"),
        "exit_status": r.get("exit_status"),
        "command_s": (end - start) / 1e9 if isinstance(start, int) and isinstance(end, int) else None,
        "freezing_time_s": _s(st, "freezing_time_us"),
        "frozen_time_s": _s(st, "frozen_time_us"),
        "memory_dump_time_s": _s(st, "memory_dump_time_us"),
        "memory_write_time_s": _s(st, "memory_write_time_us"),
        "pages_scanned": st.get("memory_pages_scanned"),
        "pages_skipped_from_parent": st.get("memory_pages_skipped_from_parent"),
        "pages_written": r.get("pages_written"),
        "bytes_written": r.get("bytes_written"),
        "link_tx_bytes": r.get("link_tx_bytes"),
        "decision": (r.get("decision") or {}).get("reason"),
    }


def criu_details(record: Mapping[str, Any]) -> dict[str, Any]:
    """Per-round figures, restore, transfer and settings for summary.json ``details``."""
    rounds = [r for r in record.get("rounds") or [] if isinstance(r, Mapping)]
    restore = record.get("restore") or {}
    rst = restore.get("stats") or {}
    transfer = record.get("transfer") or {}
    final = rounds[-1] if rounds else {}
    final_to_restored = None
    if isinstance(final.get("start_ns"), int) and isinstance(restore.get("end_ns"), int):
        final_to_restored = (restore["end_ns"] - final["start_ns"]) / 1e9
    t_start, t_end = transfer.get("start_ns"), transfer.get("end_ns")
    return {
        "version": (record.get("criu") or {}).get("version"),
        "source": (record.get("criu") or {}).get("source"),
        "lock_data_plane": record.get("lock_data_plane"),
        "rounds": [_round_detail(r) for r in rounds],
        "pre_dump_rounds": sum(1 for r in rounds if r.get("kind") == "pre-dump"),
        "restore_time_s": _s(rst, "restore_time_us"),
        "forking_time_s": _s(rst, "forking_time_us"),
        "pages_restored": rst.get("pages_restored"),
        "image_bytes": record.get("image_bytes"),
        "transfer_bytes": transfer.get("bytes"),
        "transfer_s": (t_end - t_start) / 1e9 if isinstance(t_start, int) and isinstance(t_end, int) else None,
        "final_dump_to_restored_s": final_to_restored,
    }


def criu_figures(record: Mapping[str, Any] | None, window: Window | None) -> CriuFigures | None:
    """CRIU's figures as HypervisorFigures (definitions: module docstring); None without data."""
    if not record and window is None:
        return None
    record = record or {}
    rounds = [r for r in record.get("rounds") or [] if isinstance(r, Mapping)]
    final = rounds[-1] if rounds else {}
    fst = final.get("stats") or {}
    rst = (record.get("restore") or {}).get("stats") or {}
    completed = record.get("status") == "completed"
    frozen, restore_s = _s(fst, "frozen_time_us"), _s(rst, "restore_time_us")
    downtime = frozen + restore_s if completed and frozen is not None and restore_s is not None else None
    times = [_round_time_s(r) for r in rounds]
    total = None
    if completed and times and all(t is not None for t in times) and restore_s is not None:
        total = sum(t for t in times if t is not None) + restore_s
    page = record.get("page_size_bytes")
    written = [r.get("pages_written") for r in rounds]
    complete = bool(rounds) and all(isinstance(w, int) and not isinstance(w, bool) for w in written)
    # a round without pages_written is unknown, not 0 pages: then the sum is unknown too
    transferred = sum(w for w in written if isinstance(w, int)) * page if isinstance(page, int) and complete else None
    scanned = fst.get("memory_pages_scanned")
    cmd_end = stop_cont = None
    if window is not None:
        if window.completed_ns is not None:
            cmd_end = (window.completed_ns - window.migrate_ns) / 1e9
        if window.stop_ns is not None and window.cont_ns is not None:
            stop_cont = (window.cont_ns - window.stop_ns) / 1e9
    absent: dict[str, str] = {}
    if downtime is None or total is None:
        why = "not_completed" if not completed else "not_reported"
        absent.update({k: why for k, v in (("downtime_s", downtime), ("total_time_s", total)) if v is None})
    if transferred is None:
        absent["ram_transferred_bytes"] = "criu_pages_written_missing" if rounds else "not_reported"
    return CriuFigures(
        status=record.get("status"),
        downtime_s=downtime,
        total_time_s=total,
        setup_time_s=None,
        ram_transferred_bytes=transferred,
        ram_total_bytes=scanned * page if isinstance(scanned, int) and isinstance(page, int) else None,
        command_to_end_s=cmd_end,
        stop_to_cont_s=stop_cont,
        reply_source="criu",
        absent=absent or None,
        criu=criu_details(record) if record else None,
    )
