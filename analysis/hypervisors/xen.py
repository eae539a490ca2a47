"""Xen's own migration figures, for runs with HV=xen (pure functions).

Raw input: ``xen_log.jsonl`` (written by ``migrate.drivers.xen.driver``): every line that ``xl -vvv
migrate`` printed on R1 (tag ``send``) and ``xl -vvv migrate-receive`` printed on R2 (tag
``recv``), each with the CLOCK_REALTIME ns at which the orchestrator received it over the dom0
channel (a few ms after xl wrote it); the router domU's console (tag ``con``); the stream's exit
status as a last line ``VRMIG-EXIT <status>``.  ``xen.json`` holds dom0's own byte counters of its
migration NIC before and after ``xl migrate``.

They become the same ``HypervisorFigures`` as QEMU's query-migrate reply does:

* ``downtime_s`` = resumed on the destination − suspended on the source: from the source's libxl
  line announcing that the guest has suspended (:data:`SUSPENDED`) to the earlier of the
  destination's "Domain started" line (:data:`RESUMED`, printed right after the unpause) and the
  source's "Target reports successful startup" (:data:`RESUMED_SRC`, which the destination sends
  after the unpause).  Both are upper bounds of the resume moment as received here; each dom0's
  channel delivers with its own delay (R2's lagged R1's by up to ~1 s on a loaded machine), so
  the earlier one is the tighter bound;
* ``total_time_s`` = xl's migration on the source: its first line (:data:`STREAM_START`, "Saving
  to migration stream") to "Migration successful" (or, failing that, its exit);
* ``ram_transferred_bytes`` = bytes dom0 R1 sent on its migration NIC during ``xl migrate``
  (``xen.json``; includes TCP/IP headers): xl/libxc print no byte count;
* ``ram_total_bytes`` = the domain's memory (``memory`` of the xl config, MiB → bytes).

``xl_phases`` (in ``xen``) lists xl's phase messages with their times relative to the command."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from analysis.hypervisors.qemu import HypervisorFigures
from analysis.load import read_json, read_jsonl
from analysis.metrics.window import Window
from migrate.core.rundir import XEN_JSON, XEN_LOG_JSONL

XEN_LOG = XEN_LOG_JSONL
EXIT_MARK = "VRMIG-EXIT"

#: (side tag, substring) of xl's phase messages, in the order they normally appear
PHASES: tuple[tuple[str, str, str], ...] = (
    ("recv", "ready", "migration target: Ready to receive domain"),
    ("send", "stream-start", "Saving to migration stream"),
    ("recv", "loading", "Loading new save file"),
    ("send", "suspend-request", "suspend request via XenBus"),
    ("send", "suspend-acknowledged", "guest acknowledged suspend request"),
    ("send", "suspended", "guest has suspended"),
    ("send", "save-complete", "libxl-save-helper: debug: complete r=0"),
    ("recv", "restore-complete", "xc: info: Restore successful"),
    ("recv", "transfer-complete", "migration target: Transfer complete"),
    ("send", "target-acknowledged", "migration sender: Target has acknowledged transfer"),
    ("send", "permission-given", "migration sender: Giving target permission to start"),
    ("recv", "permission-got", "migration target: Got permission, starting domain"),
    ("recv", "started", "migration target: Domain started successsfully"),
    ("send", "target-started", "migration sender: Target reports successful startup"),
    ("send", "successful", "Migration successful"),
)
STREAM_START = "Saving to migration stream"
SUSPENDED = ("guest has suspended", "Domain has suspended")
RESUMED = ("migration target: Domain started successsfully", "migration target: Domain started successfully")
RESUMED_SRC = ("migration sender: Target reports successful startup",)
SUCCESS = "Migration successful"


@dataclass(frozen=True)
class XenFigures(HypervisorFigures):
    """HypervisorFigures plus xl's phase messages and the moments derived from them (``xen``)."""

    xen: dict[str, Any] | None = None


def load_xen(run_dir: Path, notes: list[str]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """(lines of ``xen_log.jsonl``, ``xen.json``); empty with a note when missing."""
    path = Path(run_dir) / XEN_LOG
    lines: list[dict[str, Any]] = []
    if path.exists():
        try:
            lines = [r for r in read_jsonl(path) if isinstance(r, dict)]
        except (OSError, ValueError) as err:
            notes.append(f"{XEN_LOG} unreadable: {err}")
    else:
        notes.append(f"{XEN_LOG} missing")
    extra: dict[str, Any] = {}
    jpath = Path(run_dir) / XEN_JSON
    if jpath.exists():
        try:
            data = read_json(jpath)
            extra = data if isinstance(data, dict) else {}
        except (OSError, ValueError) as err:
            notes.append(f"{XEN_JSON} unreadable: {err}")
    return lines, extra


def _first(lines: Sequence[Mapping[str, Any]], tag: str, needles: Sequence[str], after_ns: int = 0) -> int | None:
    for r in lines:
        if r.get("tag") == tag and isinstance(r.get("t_ns"), int) and r["t_ns"] >= after_ns:
            if any(n in str(r.get("line", "")) for n in needles):
                return int(r["t_ns"])
    return None


def exit_status(lines: Sequence[Mapping[str, Any]], tag: str = "send") -> int | None:
    """The exit status of the tagged command (its ``VRMIG-EXIT`` line), None if not seen."""
    for r in lines:
        line = str(r.get("line", ""))
        if r.get("tag") == tag and line.startswith(EXIT_MARK):
            try:
                return int(line.split()[1])
            except (IndexError, ValueError):
                return None
    return None


def xl_phases(lines: Sequence[Mapping[str, Any]], t0_ns: int | None = None) -> list[dict[str, Any]]:
    """xl's phase messages that occur, in time order: {phase, side, t_ns, t_s (from ``t0_ns``), line}."""
    out = []
    for tag, phase, needle in PHASES:
        for r in lines:
            if r.get("tag") == tag and needle in str(r.get("line", "")) and isinstance(r.get("t_ns"), int):
                t = int(r["t_ns"])
                out.append({"phase": phase, "side": "src" if tag == "send" else "dst", "t_ns": t,
                            "t_s": (t - t0_ns) / 1e9 if t0_ns is not None else None,
                            "line": str(r["line"])[:300]})  # fmt: skip
                break
    return sorted(out, key=lambda p: p["t_ns"])


def _mem_bytes(meta: Mapping[str, Any]) -> int | None:
    mem = (meta.get("scenario") or {}).get("mem_mib")
    return int(mem) * 2**20 if isinstance(mem, int) else None


def xen_figures(
    lines: Sequence[Mapping[str, Any]],
    extra: Mapping[str, Any],
    window: Window | None,
    meta: Mapping[str, Any] | None = None,
) -> XenFigures | None:
    """Xen's figures as HypervisorFigures (definitions: module docstring); None without data."""
    if not lines and window is None:
        return None
    after = window.migrate_ns if window is not None else 0
    lines = sorted((r for r in lines if isinstance(r.get("t_ns"), int)), key=lambda r: r["t_ns"])
    rc = exit_status([r for r in lines if r["t_ns"] >= after])
    start = _first(lines, "send", (STREAM_START,), after)
    success = _first(lines, "send", (SUCCESS,), after)
    end_exit = _first(lines, "send", (EXIT_MARK,), after)
    suspended = _first(lines, "send", SUSPENDED, after)
    resumed_dst = _first(lines, "recv", RESUMED, after)
    resumed_src = _first(lines, "send", RESUMED_SRC, after)
    resumed = min((t for t in (resumed_dst, resumed_src) if t is not None), default=None)
    completed = rc == 0
    downtime = (resumed - suspended) / 1e9 if completed and suspended and resumed and resumed > suspended else None
    end = success if success is not None else end_exit
    total = (end - start) / 1e9 if completed and start is not None and end is not None else None
    tx = extra.get("dom0_mig_tx_bytes")
    cmd_end = None
    if window is not None and window.completed_ns is not None:
        cmd_end = (window.completed_ns - window.migrate_ns) / 1e9
    notes = []
    if suspended is None:
        notes.append("no 'guest has suspended' line from libxl on R1: no suspend moment")
    if resumed is None:
        notes.append("neither R2's 'Domain started' nor R1's 'Target reports successful startup': no resume moment")
    why = "not_reported" if completed else "not_completed"
    absent = {k: why for k, v in (("downtime_s", downtime), ("total_time_s", total)) if v is None}
    if not isinstance(tx, int | float):
        absent["ram_transferred_bytes"] = "not_reported"
    return XenFigures(
        status="completed" if completed else ("failed" if rc is not None else None),
        downtime_s=downtime,
        total_time_s=total,
        setup_time_s=(start - window.migrate_ns) / 1e9 if window is not None and start is not None else None,
        ram_transferred_bytes=int(tx) if isinstance(tx, int | float) else None,
        ram_total_bytes=_mem_bytes(meta or {}),
        command_to_end_s=cmd_end,
        stop_to_cont_s=None,
        reply_source="xl",
        absent=absent or None,
        xen={
            "xl_exit_status": rc,
            "suspended_ns": suspended,
            "resumed_ns": resumed,
            "resumed_dst_line_ns": resumed_dst,
            "resumed_src_line_ns": resumed_src,
            "stream_start_ns": start,
            "successful_ns": success,
            "phases": xl_phases(lines, window.migrate_ns if window is not None else None),
            "volume_source": "dom0 R1 migration NIC tx_bytes during xl migrate (xl/libxc print no byte count)",
            "dom0_mig_tx_bytes": tx,
            "dom0_mig_rx_bytes_dst": extra.get("dom0_mig_rx_bytes_dst"),
            "xen_guest_type": (meta or {}).get("hypervisor", {}).get("xen_guest_type"),
            "nested": (meta or {}).get("hypervisor", {}).get("nested"),
            "notes": notes,
        },
    )
