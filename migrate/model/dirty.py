"""The guest's dirty page rate: the load that sets it (``DIRTY=``, the guest's ``vrmig-dirty``)
and QEMU's measurement of it before the migration (meta.json ``dirty_rate``; summary.json
``dirty_rate`` from :mod:`analysis.metrics.dirty`).

The measurement is QEMU's ``calc-dirty-rate`` over :data:`CALC_TIME_S`, read back with
``query-dirty-rate`` (or libvirt's ``virDomainStartDirtyRateCalc`` and its ``dirtyrate`` domain
statistics) until QEMU reports it measured.  It runs while the cross-traffic flows, ending
:data:`LEAD_MARGIN_S` before MIGRATE_AT, so that it measures the guest as the migration finds it
without moving the migration's start.

Mode: ``page-sampling`` with QEMU 7.2's largest sample (16384 pages per GiB).  Under TCG the two
other modes kill the source QEMU: ``dirty-bitmap`` and ``dirty-ring`` read KVM's state, which TCG
has not got (QEMU 7.2 segfaults on either; seen here, docs/measurements/2026-11-25-dirty-rate.md)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from analysis.metrics.dirty import UNSUPPORTED, parse_libvirt_dirtyrate, parse_query_dirty_rate
from migrate.core.errors import GuestError
from migrate.core.procs import MarkerScan
from routers.guest import DIRTY_FAIL_MARKER, DIRTY_MARKER, parse_dirty

log = logging.getLogger(__name__)

CALC_TIME_S = 1
MODE = "page-sampling"
SAMPLE_PAGES_PER_GIB = 16384  # QEMU 7.2's range is 128-16384
LEAD_MARGIN_S = 0.5  # QEMU took 1.01-1.04 s for a 1 s measurement here
POLL_S = 0.02
FINISH_GRACE_S = 5.0  # QEMU reports the measurement done within calc-time + this, or it is unfinished
LOAD_START_TIMEOUT_S = 60.0  # vrmig-dirty touches its working set once before it prints its line


def lead_s() -> float:
    """How long before MIGRATE_AT the measurement starts."""
    return CALC_TIME_S + LEAD_MARGIN_S


def unsupported(hv: str) -> dict[str, Any]:
    """The record of a driver that does not measure the dirty rate."""
    return {"why_absent": UNSUPPORTED, "interface": None, "hv": hv}


def wait_load(console: Path, timeout_s: float, alive: Callable[[], bool], abort: Any = None) -> dict[str, float]:
    """Wait for the guest's ``VRMIG-DIRTY`` line on its serial console (after READY) and return
    its fields (rate_mb_s, wss_mib, wss_s, pid); GuestError if the load failed, the guest stopped
    or the line did not come within ``timeout_s``."""
    ok, bad = MarkerScan(console, DIRTY_MARKER), MarkerScan(console, DIRTY_FAIL_MARKER)
    deadline = time.monotonic() + timeout_s
    while True:
        if bad.seen():
            raise GuestError(f"the guest's dirtying load did not start: {_line(console, DIRTY_FAIL_MARKER)}")
        if ok.seen():
            fields = parse_dirty(_line(console, DIRTY_MARKER))
            if fields is None:
                raise GuestError(f"unreadable {DIRTY_MARKER!r} line on {console.name}")
            return fields
        if not alive():
            raise GuestError(f"router guest stopped before its dirtying load started ({console.name})")
        if abort and abort():
            raise GuestError("interrupted while waiting for the guest's dirtying load")
        if time.monotonic() > deadline:
            raise GuestError(
                f"the guest printed no {DIRTY_MARKER.split()[0]!r} line within {timeout_s:.0f} s of READY: its image "
                "lacks vrmig-dirty (make guest; on a lab, make hosts-setup)"
            )
        time.sleep(POLL_S)


def _line(console: Path, marker: str) -> str:
    text = console.read_text(errors="replace")
    i = text.rfind(marker)
    return text[i:].splitlines()[0].strip() if i >= 0 else ""


def measure_qmp(cmd: Callable[..., Any], action: Callable[..., int], abort: Any = None) -> dict[str, Any]:
    """``calc-dirty-rate`` then ``query-dirty-rate`` until QEMU reports it measured (``cmd``: the
    source's QMP command call; ``action``: the recorder's).  The meta.json record: the arguments,
    QEMU's last reply, when it ran (CLOCK_REALTIME ns) and how many queries it took."""
    args = {"calc-time": CALC_TIME_S, "mode": MODE, "sample-pages": SAMPLE_PAGES_PER_GIB}
    rec: dict[str, Any] = {
        "interface": "qmp",
        "method": MODE,
        "calc_time_s": CALC_TIME_S,
        "sample_pages": SAMPLE_PAGES_PER_GIB,
        "command": {"execute": "calc-dirty-rate", "arguments": args},
    }
    rec["started_ns"] = action("calc-dirty-rate", side="src", **args)
    try:
        cmd("calc-dirty-rate", **args)
    except Exception as err:  # QMPError: QEMU refused it or the connection failed
        rec.update(error=str(err), ended_ns=time.time_ns())
        return rec
    return _poll(rec, lambda: cmd("query-dirty-rate", timeout_s=5.0), parse_query_dirty_rate, action, abort)


def measure_libvirt(dom: Any, conn: Any, libvirt: Any, action: Callable[..., int], abort: Any = None) -> dict[str, Any]:
    """libvirt's ``virDomainStartDirtyRateCalc`` (page-sampling: libvirt passes no sample count, so
    QEMU samples its default 512 pages per GiB) and the domain's ``dirtyrate`` statistics until
    measured."""
    rec: dict[str, Any] = {
        "interface": "libvirt",
        "method": MODE,
        "calc_time_s": CALC_TIME_S,
        "sample_pages": None,
        "command": {"api": "virDomainStartDirtyRateCalc", "seconds": CALC_TIME_S, "flags": 0},
    }
    rec["started_ns"] = action("start-dirty-rate-calc", side="src", seconds=CALC_TIME_S, mode=MODE)
    try:
        dom.startDirtyRateCalc(CALC_TIME_S, 0)  # 0: VIR_DOMAIN_DIRTYRATE_MODE_PAGE_SAMPLING
    except libvirt.libvirtError as err:
        rec.update(error=err.get_error_message() or str(err), ended_ns=time.time_ns())
        return rec

    def query() -> dict[str, Any]:
        got = conn.domainListGetStats([dom], libvirt.VIR_DOMAIN_STATS_DIRTYRATE)
        return dict(got[0][1]) if got else {}

    return _poll(rec, query, parse_libvirt_dirtyrate, action, abort)


def _poll(
    rec: dict[str, Any],
    query: Callable[[], Any],
    parse: Callable[[Any], Any],
    action: Callable[..., int],
    abort: Any,
) -> dict[str, Any]:
    deadline = time.monotonic() + CALC_TIME_S + FINISH_GRACE_S
    polls = 0
    reply: Any = None
    while True:
        try:
            reply = query()
        except Exception as err:  # QMPError / libvirtError
            rec["error"] = str(err)
            break
        polls += 1
        if parse(reply).measured:
            break
        if time.monotonic() > deadline or (abort and abort()):
            break
        time.sleep(POLL_S)
    rec.update(reply=reply, polls=polls, ended_ns=time.time_ns())
    r = parse(reply) if reply is not None else None
    action("dirty-rate-measured" if r and r.measured else "dirty-rate-unfinished", side="src",
           mb_s=r.mb_s if r else None, status=r.status if r else None)  # fmt: skip
    return rec


def measure_before_migration(
    driver: Any, requested_mb_s: float | None, migrate_at_mono: float, sleep_until: Callable[[float], None]
) -> dict[str, Any]:
    """Wait until :func:`lead_s` before ``migrate_at_mono`` (CLOCK_MONOTONIC s), let the driver
    measure, and return the meta.json ``dirty_rate`` record: the measurement, the requested rate,
    the load's start line and how late the measurement ended for MIGRATE_AT (0 when in time)."""
    sleep_until(migrate_at_mono - lead_s())
    rec = dict(driver.measure_dirty_rate())
    late = time.monotonic() - migrate_at_mono
    rec["requested_mb_s"] = requested_mb_s
    rec["load"] = getattr(driver, "dirty_load", None)
    rec["delayed_migration_s"] = round(max(0.0, late), 6)
    if late > 0:
        log.info("the dirty-rate measurement ended %.2f s after MIGRATE_AT: the migration starts late", late)
    return rec
