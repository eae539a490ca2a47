"""The guest's dirty page rate before the migration: QEMU's ``calc-dirty-rate`` measurement as
meta.json ``dirty_rate`` recorded it, and the load the guest ran (``DIRTY=``).

QEMU reports a dirty rate in whole MB/s, MB = 2^20 bytes (migration/dirtyrate.c truncates), so a
reported 0 is a rate below 1 MB/s, not a rate of 0: the figure is then None with ``upper_mb_s``
1.  In ``page-sampling`` mode QEMU hashes ``sample-pages`` random pages per GiB of guest RAM at the
start and the end of ``calc-time`` and scales the share that changed to the RAM size; the
binomial standard error of that share is ``sampling_error_mb_s``."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from analysis.values import finite

#: QEMU's (and libvirt's ``dirtyrate.calc_status``) measurement states
UNSTARTED, MEASURING, MEASURED = "unstarted", "measuring", "measured"
LIBVIRT_STATUS = {0: UNSTARTED, 1: MEASURING, 2: MEASURED}
#: QEMU's default ``sample-pages`` (per GiB), used when libvirt starts the measurement (it passes none)
QEMU_DEFAULT_SAMPLE_PAGES = 512
RESOLUTION_MB_S = 1.0

#: summary.json ``dirty_rate.why_absent`` codes (analysis.qualify.REASON_TEXT has their sentences)
NOT_RECORDED = "dirty_rate_not_recorded"
UNSUPPORTED = "dirty_rate_unsupported"
FAILED = "dirty_rate_failed"
UNFINISHED = "dirty_rate_unfinished"
BELOW_RESOLUTION = "below_rate_resolution"


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


@dataclass(frozen=True)
class Reading:
    """One ``query-dirty-rate`` reply (or libvirt's ``dirtyrate.*`` statistics) as values."""

    status: str | None
    #: QEMU's dirty rate in whole MB/s; None unless the status is measured
    mb_s: int | None
    mode: str | None
    #: page-sampling: pages sampled per GiB of RAM
    sample_pages: int | None
    calc_time_s: float | None
    #: QEMU's start time of the measurement (seconds of its own clock)
    start_time_s: int | None

    @property
    def measured(self) -> bool:
        """QEMU finished the measurement."""
        return self.status == MEASURED


def parse_query_dirty_rate(reply: Mapping[str, Any]) -> Reading:
    """A QMP ``query-dirty-rate`` reply (QEMU 7.2: status, start-time, calc-time, sample-pages,
    mode, and dirty-rate once measured)."""
    status = reply.get("status") if isinstance(reply.get("status"), str) else None
    return Reading(
        status=status,
        mb_s=_int(reply.get("dirty-rate")) if status == MEASURED else None,
        mode=reply.get("mode") if isinstance(reply.get("mode"), str) else None,
        sample_pages=_int(reply.get("sample-pages")),
        calc_time_s=finite(reply.get("calc-time")),
        start_time_s=_int(reply.get("start-time")),
    )


def parse_libvirt_dirtyrate(stats: Mapping[str, Any]) -> Reading:
    """libvirt's domain statistics of group ``dirtyrate`` (``virsh domstats --dirtyrate``;
    libvirt 9.0: calc_status, calc_start_time, calc_period, megabytes_per_second, calc_mode).
    libvirt does not report the sample count: page-sampling then uses QEMU's default."""
    code = _int(stats.get("dirtyrate.calc_status"))
    status = LIBVIRT_STATUS.get(code) if code is not None else None
    mode = stats.get("dirtyrate.calc_mode") if isinstance(stats.get("dirtyrate.calc_mode"), str) else None
    return Reading(
        status=status,
        mb_s=_int(stats.get("dirtyrate.megabytes_per_second")) if status == MEASURED else None,
        mode=mode,
        sample_pages=QEMU_DEFAULT_SAMPLE_PAGES if mode in (None, "page-sampling") else None,
        calc_time_s=finite(stats.get("dirtyrate.calc_period")),
        start_time_s=_int(stats.get("dirtyrate.calc_start_time")),
    )


def reading(record: Mapping[str, Any]) -> Reading | None:
    """The reading of a meta.json ``dirty_rate`` record (its last reply, by interface)."""
    reply = record.get("reply")
    if not isinstance(reply, Mapping):
        return None
    if record.get("interface") == "libvirt":
        return parse_libvirt_dirtyrate(reply)
    return parse_query_dirty_rate(reply)


#: QEMU before 9.0 loses pages that TCG writes during pre-copy: the fast path of its dirty bitmap
#: sync clears the migration bitmap without re-arming the TCG TLB's not-dirty trap, so a vCPU
#: whose TLB entry still holds the page writes it again unrecorded (fixed by QEMU commit 03bfc2188f,
#: "physmem: Fix migration dirty bitmap coherency with TCG memory access").  A guest that dirties
#: memory fast then resumes on the destination with stale pages and crashes.
TCG_DIRTY_FIX_QEMU = (9, 0)


def tcg_precopy_loses_pages(accel: Any, mode: Any, qemu: Any) -> bool:
    """True for a pre-copy migration under TCG with a QEMU older than :data:`TCG_DIRTY_FIX_QEMU`
    (``qemu``: ``qemu-system-x86_64 --version``'s first line)."""
    m = re.search(r"version (\d+)\.(\d+)", qemu) if isinstance(qemu, str) else None
    old = m is not None and (int(m[1]), int(m[2])) < TCG_DIRTY_FIX_QEMU
    return accel == "tcg" and mode == "precopy" and old


def sampling_error_mb_s(mb_s: float, sample_pages: int, mem_mib: float, calc_time_s: float) -> float | None:
    """One binomial standard error of a page-sampling rate: QEMU samples ``sample_pages`` per GiB
    of the ``mem_mib`` MiB of RAM; a share p = rate x calc_time / RAM of them changed."""
    n = sample_pages * mem_mib / 1024
    if n < 1 or mem_mib <= 0 or calc_time_s <= 0:
        return None
    p = min(1.0, max(0.0, mb_s * calc_time_s / mem_mib))
    return math.sqrt(p * (1 - p) / n) * mem_mib / calc_time_s


@dataclass(frozen=True)
class DirtyRate:
    """summary.json ``dirty_rate``: what was asked of the guest and what QEMU measured before the
    migration (None with ``why_absent`` when not measured)."""

    requested_mb_s: float | None
    measured_mb_s: float | None
    method: str | None
    calc_time_s: float | None
    sample_pages: int | None
    why_absent: str | None
    #: the measured rate is below this (QEMU reported 0: below its resolution)
    upper_mb_s: float | None = None
    #: page-sampling: one standard error of the measured rate
    sampling_error_mb_s: float | None = None
    #: qmp (calc-dirty-rate/query-dirty-rate) or libvirt (virDomainStartDirtyRateCalc/domain stats)
    interface: str | None = None
    started_ns: int | None = None
    ended_ns: int | None = None
    #: from the measurement's end to the migrate command
    before_migration_s: float | None = None
    #: how much later than MIGRATE_AT the migration started because the measurement ran late
    delayed_migration_s: float | None = None
    #: the load's start line (``VRMIG-DIRTY``): rate_mb_s, wss_mib, wss_s
    load: dict[str, Any] | None = None
    #: the load printed VRMIG-DIRTY-LAG (the vCPU could not sustain the rate)
    load_lagged: bool | None = None
    error: str | None = None


def dirty_rate(
    meta: Mapping[str, Any], migrate_ns: int | None = None, console: str | None = None
) -> tuple[DirtyRate, list[str]]:
    """The summary figure from meta.json (``scenario.dirty_mbps``, ``dirty_rate``), the time of the
    migrate command and the source console's text (for the load's lag line); and notes."""
    from routers.guest import DIRTY_LAG_MARKER

    notes: list[str] = []
    scenario = meta.get("scenario") if isinstance(meta.get("scenario"), Mapping) else {}
    requested = finite(scenario.get("dirty_mbps"))
    rec = meta.get("dirty_rate")
    if not isinstance(rec, Mapping):
        return DirtyRate(requested, None, None, None, None, NOT_RECORDED), notes
    load = rec.get("load") if isinstance(rec.get("load"), Mapping) else None
    lagged = None if console is None or requested is None else DIRTY_LAG_MARKER in console
    if lagged:
        notes.append(f"DIRTY={requested:g}: the guest's load fell behind (VRMIG-DIRTY-LAG): the rate was not sustained")
    calc = finite(rec.get("calc_time_s"))
    if load is not None and calc is not None and isinstance(load.get("wss_s"), int | float) and load["wss_s"] < calc:
        notes.append(
            f"DIRTY={requested:g}: the load's working set ({load.get('wss_mib')} MiB) holds {load['wss_s']:g} s of "
            f"writes, less than the {calc:g} s measurement: the measured rate is capped by it (raise MEM)"
        )
    hv = meta.get("hypervisor") if isinstance(meta.get("hypervisor"), Mapping) else {}
    if requested is not None and tcg_precopy_loses_pages(meta.get("accel"), scenario.get("mode"), hv.get("qemu")):
        notes.append(
            f"DIRTY={requested:g} with pre-copy under TCG on {hv.get('qemu')}: QEMU before 9.0 can lose pages the "
            "guest writes during pre-copy (QEMU commit 03bfc2188f): a crash on R2 would be QEMU's, not the router's"
        )
    started, ended = _int(rec.get("started_ns")), _int(rec.get("ended_ns"))
    before = (migrate_ns - ended) / 1e9 if migrate_ns is not None and ended is not None else None
    r = reading(rec)
    why = rec.get("why_absent") if isinstance(rec.get("why_absent"), str) else None
    error = rec.get("error") if isinstance(rec.get("error"), str) else None
    sample_pages = r.sample_pages if r is not None else _int(rec.get("sample_pages"))
    method = (r.mode if r is not None else None) or (rec.get("method") if isinstance(rec.get("method"), str) else None)
    measured = upper = se = None
    if why is None and error is not None:
        why = FAILED
    if why is None and (r is None or not r.measured):
        why = UNFINISHED
    if why is None and r is not None and r.mb_s is not None:
        if r.mb_s == 0:
            why, upper = BELOW_RESOLUTION, RESOLUTION_MB_S
        else:
            measured = float(r.mb_s)
            mem = finite(scenario.get("mem_mib"))
            if method == "page-sampling" and sample_pages and mem and calc:
                se = sampling_error_mb_s(measured, sample_pages, mem, calc)
    if error:
        notes.append(f"dirty-rate measurement failed: {error}")
    fig = DirtyRate(
        requested_mb_s=requested,
        measured_mb_s=measured,
        method=method,
        calc_time_s=(r.calc_time_s if r is not None and r.calc_time_s is not None else calc),
        sample_pages=sample_pages,
        why_absent=why,
        upper_mb_s=upper,
        sampling_error_mb_s=se,
        interface=rec.get("interface") if isinstance(rec.get("interface"), str) else None,
        started_ns=started,
        ended_ns=ended,
        before_migration_s=before,
        delayed_migration_s=finite(rec.get("delayed_migration_s")),
        load=dict(load) if load is not None else None,
        load_lagged=lagged,
        error=error,
    )
    return fig, notes
