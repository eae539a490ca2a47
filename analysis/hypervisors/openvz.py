"""vzmigrate's output (HV=openvz) -> phases with timestamps, its own timing table, errors, and the
hypervisor-side figures.  Pure functions over captured lines; nothing here runs a tool.

Two generations of vzmigrate print differently:

* OpenVZ's vzctl 4.x ``vzmigrate`` (a shell script, ``bin/vzmigrate.in`` in vzctl's source):
  untimed lines, ``log 1`` messages as they are (``Starting live migration of CT 101 to host``,
  ``Preparing remote node``, ``Syncing private``, ``Live migrating container...``, ``Cleaning up``),
  ``log 2`` messages with ``-v`` indented by three spaces (``   Suspending container``,
  ``   Dumping container``, ``   Copying dumpfile``, ``   Undumping container``,
  ``   Resuming container``), errors as ``Error: ...`` on stderr, and with ``-v``/``--times`` after
  a live migration a table ``printf '  %20s: %6.2f\\n'`` (``Suspend + Dump``, ``Copy dump file``,
  ``Second rsync``, ``2nd level quota``, ``Undump + Resume``, ``Total suspended time``, seconds).
* Virtuozzo 7's ``vzmigrate`` (C++, P.Haul/CRIU underneath): every line starts with the tool's own
  ``YYYY-MM-DD HH:MM:SS.mmm: `` time (``Live migration stage started``, ``... completed``).

Each line is paired with the time the host received it (``t_s``, CLOCK_REALTIME seconds), so
phases have timestamps even where the tool prints none.  The phase names below map one message
each; messages that are not known are kept as ``other`` lines, never dropped.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

#: vzctl 4.x messages (exact text after stripping) -> phase name, in the order the script prints them
PHASES: dict[str, str] = {
    "Preparing remote node": "prepare-remote",
    "Initializing remote quota": "quota-init",
    "Syncing private": "sync-private",
    "Live migrating container...": "live-migrate",
    "Suspending container": "suspend",
    "Dumping container": "dump",
    "Copying dumpfile": "copy-dump",
    "Stopping container": "stop",
    "Syncing private (2nd pass)": "sync-private-2",
    "Syncing 2nd level quota": "quota-sync",
    "Undumping container": "undump",
    "Resuming container": "resume",
    "Starting container": "start-destination",
    "Cleaning up": "cleanup",
    # Virtuozzo 7 (vzmigrate/common.h MIG_INFO_*)
    "Checking preconditions": "check-preconditions",
    "Copying static data": "copy-static-data",
    "Live migration stage started": "live-start",
    "Live migration stage completed": "live-completed",
}
#: the --times table's labels (vzmigrate.in print_times) -> VzTimes field
TIME_LABELS = {
    "Suspend + Dump": "suspend_dump_s",
    "Pcopy after suspend": "pcopy_after_suspend_s",
    "Copy dump file": "copy_dump_s",
    "Second rsync": "second_rsync_s",
    "2nd level quota": "quota2_s",
    "Undump + Resume": "undump_resume_s",
    "Total suspended time": "total_suspended_s",
}
_START = re.compile(r"^(Starting|Checking) (live )?migration of CT (?P<ct>\S+) to (?P<dst>\S+)$")
_LOCKED = re.compile(r"^Locked CT (?P<ct>\S+)$")
_TIME = re.compile(r"^\s*(?P<label>[^:]+?):\s+(?P<value>-?\d+(?:\.\d+)?)$")
_VZ7_STAMP = re.compile(r"^(?P<stamp>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}): (?P<rest>.*)$")
_VZ7_ERROR = re.compile(r"^error \[(?P<code>-?\d+)\] : (?P<msg>.*)$")
#: where the data plane stops / starts again, by migration kind (first marker present wins)
DOWN_START = ("suspend", "live-migrate", "live-start", "stop")
DOWN_END_AFTER = ("resume", "start-destination")  # the line *after* these ends the outage
DOWN_END = ("live-completed", "cleanup")


@dataclass(frozen=True)
class Line:
    """One line of output: host receive time (None if unknown), the tool's own time if it
    printed one, the message without that stamp, and what it is."""

    t_s: float | None
    text: str
    tool_t_s: float | None
    message: str
    kind: str  # a phase name, "start", "locked", "time", "error", "other"


@dataclass(frozen=True)
class Phase:
    """A step vzmigrate announced: name, host receive time, the tool's own time, the message and
    the index of its line."""

    name: str
    t_s: float | None
    tool_t_s: float | None
    message: str
    index: int


@dataclass(frozen=True)
class VzTimes:
    """vzmigrate's own ``--times`` table (seconds; None where it printed no such row)."""

    suspend_dump_s: float | None = None
    pcopy_after_suspend_s: float | None = None
    copy_dump_s: float | None = None
    second_rsync_s: float | None = None
    quota2_s: float | None = None
    undump_resume_s: float | None = None
    total_suspended_s: float | None = None


@dataclass(frozen=True)
class VzmigrateReport:
    """Everything parsed from one vzmigrate run."""

    lines: list[Line]
    phases: list[Phase]
    times: VzTimes | None
    errors: list[str]
    ctid: str | None = None
    destination: str | None = None
    live: bool | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def phase(self, name: str) -> Phase | None:
        """The first phase called ``name``."""
        return next((p for p in self.phases if p.name == name), None)


def _tool_time(stamp: str) -> float:
    """Virtuozzo 7 prints local time without a zone: seconds of that naive time read as UTC
    (good for differences between its own lines, not as an absolute time)."""
    return dt.datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S.%f").replace(tzinfo=dt.UTC).timestamp()


def parse_line(text: str, t_s: float | None = None) -> Line:
    """Classify one line of vzmigrate output."""
    text = text.rstrip("\r\n")
    tool_t, msg = None, text.strip()
    m = _VZ7_STAMP.match(msg)
    if m:
        tool_t, msg = _tool_time(m["stamp"]), m["rest"].strip()
        inner = _VZ7_STAMP.match(msg)  # lines relayed from the other side carry a second stamp
        if inner:
            msg = inner["rest"].strip()
    if msg in PHASES:
        kind = PHASES[msg]
    elif _START.match(msg):
        kind = "start"
    elif _LOCKED.match(msg):
        kind = "locked"
    elif msg.startswith("Error:") or _VZ7_ERROR.match(msg) or msg.startswith("ERROR"):
        kind = "error"
    elif (tm := _TIME.match(text)) and tm["label"].strip() in TIME_LABELS:
        kind = "time"
    else:
        kind = "other"
    return Line(t_s, text, tool_t, msg, kind)


def parse_output(lines: Iterable[tuple[float | None, str] | str]) -> VzmigrateReport:
    """Parse vzmigrate's output: ``(host receive time, line)`` pairs, or bare lines."""
    parsed = [parse_line(x) if isinstance(x, str) else parse_line(x[1], x[0]) for x in lines]
    phases, errors, times = [], [], {}
    ctid = dst = None
    live: bool | None = None
    for i, ln in enumerate(parsed):
        if ln.kind == "start":
            m = _START.match(ln.message)
            assert m is not None
            ctid, dst, live = m["ct"], m["dst"], bool(m.group(2))
            phases.append(Phase("start", ln.t_s, ln.tool_t_s, ln.message, i))
        elif ln.kind == "locked":
            ctid = ctid or _LOCKED.match(ln.message)["ct"]  # type: ignore[index]
            phases.append(Phase("locked", ln.t_s, ln.tool_t_s, ln.message, i))
        elif ln.kind == "error":
            errors.append(ln.message)
        elif ln.kind == "time":
            tm = _TIME.match(ln.text)
            assert tm is not None
            times[TIME_LABELS[tm["label"].strip()]] = float(tm["value"])
        elif ln.kind != "other":
            phases.append(Phase(ln.kind, ln.t_s, ln.tool_t_s, ln.message, i))
            if ln.kind in ("live-start", "live-migrate", "suspend"):
                live = True if live is None else live
    return VzmigrateReport(
        lines=parsed, phases=phases, times=VzTimes(**times) if times else None, errors=errors,
        ctid=ctid, destination=dst, live=live,
    )  # fmt: skip


def _first(report: VzmigrateReport, names: tuple[str, ...]) -> Phase | None:
    for name in names:
        if (p := report.phase(name)) is not None:
            return p
    return None


def _line_after(report: VzmigrateReport, phase: Phase) -> Line | None:
    """The first line received after ``phase``'s line (its step has then finished)."""
    return report.lines[phase.index + 1] if phase.index + 1 < len(report.lines) else None


def _elapsed(a: Phase | Line, b: Phase | Line) -> tuple[float | None, str]:
    """b - a by the tool's own clock if both lines carry one, else by host receive times."""
    if a.tool_t_s is not None and b.tool_t_s is not None:
        return b.tool_t_s - a.tool_t_s, "tool-timestamps"
    if a.t_s is not None and b.t_s is not None:
        return b.t_s - a.t_s, "receive-times"
    return None, "no-timestamps"


def downtime(report: VzmigrateReport) -> tuple[float | None, str]:
    """The container's outage as vzmigrate saw it, and how it was obtained: its own ``Total
    suspended time`` if printed, else from phase timestamps (suspend/live-migrate/stop -> the line
    after resume/start, or live-completed/cleanup)."""
    if report.times is not None and report.times.total_suspended_s is not None:
        return report.times.total_suspended_s, "vzmigrate --times: Total suspended time"
    start = _first(report, DOWN_START)
    if start is None:
        return None, "vzmigrate printed neither its timing table nor a suspend/stop step"
    end: Phase | Line | None = None
    after = _first(report, DOWN_END_AFTER)
    if after is not None:
        end = _line_after(report, after)
    end = end or _first(report, DOWN_END)
    if end is None:
        return None, f"vzmigrate printed {start.name!r} but no step after which the container ran again"
    value, how = _elapsed(start, end)
    return value, f"{start.name} -> {getattr(end, 'name', None) or end.message!r} ({how})"


def hypervisor_figures(report: VzmigrateReport, started_s: float, ended_s: float, exit_status: int) -> dict[str, Any]:
    """The hypervisor-side figures of a run (same keys as the other drivers' ``hypervisor``)."""
    down, down_how = downtime(report)
    return {
        "downtime_s": down,
        "downtime_source": down_how,
        "duration_s": ended_s - started_s,
        "duration_source": "vzmigrate command start -> exit (host clock)",
        "volume_bytes": None,
        "volume_reason": "vzmigrate prints no transfer sizes (rsync and scp run quietly without -vv)",
        "exit_status": exit_status,
        "completed": exit_status == 0 and not report.errors,
        "errors": report.errors,
        "times": None if report.times is None else asdict(report.times),
        "phases": [asdict(p) for p in report.phases],
        "ctid": report.ctid,
        "destination": report.destination,
        "live": report.live,
    }
