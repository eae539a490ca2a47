"""libvirt's own migration figures, for runs with DRIVER=libvirt (pure functions).

Raw inputs (written by ``migrate.drivers.libvirt.driver``):

* ``libvirt_jobinfo.json``: ``{"t_ns", "source", "stats"}`` where ``stats`` are libvirt's
  completed-job typed parameters (times in ms, sizes in bytes, ``memory_bps`` in bytes/s) from the
  source's job-completed event ("job-completed-event"), the destination's completed-job record
  ("destination") or, after a failure, the source's failed-job record ("source-failed-job").
* ``libvirt_events.jsonl``: ``{"t_ns", "side", "event", "data"}``; ``job-completed``,
  ``migration-iteration``, ``lifecycle`` and ``migrate-api-returned`` (the migrateToURI3 call ended,
  ``data.status`` completed|failed).

They become the same ``HypervisorFigures`` as QEMU's query-migrate reply does for the QMP driver,
so summary.json has one schema for both drivers."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from analysis.hypervisors.qemu import HypervisorFigures
from analysis.load import read_json, read_jsonl
from analysis.metrics.window import Window
from migrate.core.rundir import LIBVIRT_EVENTS_JSONL, LIBVIRT_JOBINFO_JSON

JOBINFO_NAME = LIBVIRT_JOBINFO_JSON
EVENTS_NAME = LIBVIRT_EVENTS_JSONL
COMPLETED_SOURCES = ("job-completed-event", "destination")
RESUMED_MIGRATED = 1  # VIR_DOMAIN_EVENT_RESUMED_MIGRATED


@dataclass(frozen=True)
class LibvirtRaw:
    """The libvirt records of one run (``jobinfo`` None when libvirt reported no job record)."""

    jobinfo: dict[str, Any] | None
    events: list[dict[str, Any]]


def load_libvirt(run_dir: Path, notes: list[str]) -> LibvirtRaw:
    """Read the libvirt records of ``run_dir``; missing or unreadable files become notes."""
    out: dict[str, Any] = {"jobinfo": None, "events": []}
    for key, name, reader in (("jobinfo", JOBINFO_NAME, read_json), ("events", EVENTS_NAME, read_jsonl)):
        path = Path(run_dir) / name
        if not path.exists():
            notes.append(f"{name} missing")
            continue
        try:
            out[key] = reader(path)
        except (OSError, ValueError) as err:
            notes.append(f"{name} unreadable: {err}")
    return LibvirtRaw(**out)


def window_events(events: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The migration's end as the source-side ``MIGRATION`` status events that
    ``analysis.metrics.window.migration_window`` reads (the earliest one counts):

    * the destination resuming the migrated guest (lifecycle ``resumed``, detail
      ``RESUMED_MIGRATED``): the end of the transfer, where QEMU's own MIGRATION completed
      event ends the window under DRIVER=qmp (post-copy resumes with another detail earlier);
    * the source's job-completed event (libvirt emits it once the source QEMU has exited);
    * the end of the migrateToURI3 call with its status (the only end of a failed migration)."""
    out: list[dict[str, Any]] = []
    for ev in events:
        t_ns, kind, data = ev.get("t_ns"), ev.get("event"), ev.get("data") or {}
        if not isinstance(t_ns, int):
            continue
        if ev.get("side") == "dst" and kind == "lifecycle":
            if data.get("event") == "resumed" and data.get("detail") == RESUMED_MIGRATED:
                out.append({"t_ns": t_ns, "side": "src", "event": "MIGRATION", "data": {"status": "completed"}})
            continue
        if ev.get("side") != "src":
            continue
        if kind == "job-completed":
            out.append({"t_ns": t_ns, "side": "src", "event": "MIGRATION", "data": {"status": "completed"}})
        elif kind == "migrate-api-returned":
            status = data.get("status")
            if status in ("completed", "failed"):
                out.append({"t_ns": t_ns, "side": "src", "event": "MIGRATION", "data": {"status": status}})
    return sorted(out, key=lambda e: e["t_ns"])


def _num(stats: Mapping[str, Any], key: str, divisor: float = 1.0) -> float | None:
    v = stats.get(key)
    return float(v) / divisor if isinstance(v, int | float) and not isinstance(v, bool) else None


def _int(stats: Mapping[str, Any], key: str) -> int | None:
    v = stats.get(key)
    return int(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def libvirt_details(jobinfo: Mapping[str, Any], events: list[Mapping[str, Any]]) -> dict[str, Any]:
    """libvirt's figures that QEMU's reply has no field for: downtime and elapsed time without
    network ("w/o network": before the destination's network was set up), data and memory
    processed, memory bandwidth, iterations (from the statistics and as the iteration events
    arrived, in s after the first one) and the error of a failed job."""
    stats = jobinfo.get("stats") if isinstance(jobinfo.get("stats"), Mapping) else {}
    iters = sorted(
        ((int(e["t_ns"]), _int(e.get("data") or {}, "iteration")) for e in events
         if e.get("side") == "src" and e.get("event") == "migration-iteration" and isinstance(e.get("t_ns"), int)),
        key=lambda ti: ti[0],
    )  # fmt: skip
    t0 = iters[0][0] if iters else 0
    return {
        "source": jobinfo.get("source"),
        "downtime_net_s": _num(stats, "downtime_net", 1e3),
        "time_elapsed_net_s": _num(stats, "time_elapsed_net", 1e3),
        "data_processed_bytes": _int(stats, "data_processed"),
        "data_total_bytes": _int(stats, "data_total"),
        "memory_processed_bytes": _int(stats, "memory_processed"),
        "memory_bandwidth_bps": _num(stats, "memory_bps", 1 / 8),  # libvirt gives bytes/s
        "memory_iterations": _int(stats, "memory_iteration"),
        "dirty_rate_pages_per_s": _int(stats, "memory_dirty_rate"),
        "postcopy_requests": _int(stats, "memory_postcopy_requests"),
        "iteration_events_s": [[n, (t - t0) / 1e9] for t, n in iters],
        "error": stats.get("errmsg"),
    }


def libvirt_figures(
    jobinfo: Mapping[str, Any] | None, events: list[Mapping[str, Any]], window: Window | None
) -> HypervisorFigures | None:
    """libvirt's completed-job statistics as HypervisorFigures.

    Definitions: downtime_s = ``downtime`` (ms → s); total_time_s = ``time_elapsed`` (libvirt's
    migration duration: from the start of the job, which includes preparing the destination,
    to the end of the transfer); setup_time_s = ``setup_time``; ram_transferred_bytes /
    ram_total_bytes = ``memory_processed`` / ``memory_total`` (QEMU's ram.transferred / total,
    as libvirt reads them).  Time figures only for a completed job.  command_to_end_s = migrate
    call → end of the window (see ``window_events``).  ``libvirt`` holds ``libvirt_details``.
    None when there is neither a job record nor a window."""
    if not jobinfo and window is None:
        return None
    jobinfo = jobinfo or {}
    stats = jobinfo.get("stats") if isinstance(jobinfo.get("stats"), Mapping) else {}
    completed = jobinfo.get("source") in COMPLETED_SOURCES and stats.get("success", True) is not False
    if jobinfo:
        status: str | None = "completed" if completed else "failed"
    else:
        status = window.end_status if window is not None else None
    cmd_end = None
    if window is not None and window.completed_ns is not None:
        cmd_end = (window.completed_ns - window.migrate_ns) / 1e9
    times = {
        "downtime_s": _num(stats, "downtime", 1e3) if completed else None,
        "total_time_s": _num(stats, "time_elapsed", 1e3) if completed else None,
        "setup_time_s": _num(stats, "setup_time", 1e3) if completed else None,
    }
    why = "not_completed" if jobinfo and not completed else ("not_reported" if jobinfo else "no_hypervisor_data")
    absent = {k: why for k, v in times.items() if v is None}
    if _int(stats, "memory_processed") is None:
        absent["ram_transferred_bytes"] = "not_reported" if jobinfo else "no_hypervisor_data"
    return HypervisorFigures(
        status=status,
        downtime_s=times["downtime_s"],
        total_time_s=times["total_time_s"],
        setup_time_s=times["setup_time_s"],
        ram_transferred_bytes=_int(stats, "memory_processed"),
        ram_total_bytes=_int(stats, "memory_total"),
        command_to_end_s=cmd_end,
        stop_to_cont_s=None,
        reply_source=f"libvirt:{jobinfo.get('source')}" if jobinfo else "libvirt:no-job-record",
        libvirt=libvirt_details(jobinfo, events),
        absent=absent or None,
    )
