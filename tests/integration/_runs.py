"""Helpers of the integration tests that run real migrations of the frr router VM: the guest image
check, a short low-rate run with its records, and stopping the orchestrators a test started;
and, for HV=xen, the one failure of Xen's own code that a test retries (:func:`nested_xen_save_fault`)."""

from __future__ import annotations

import json
import re
import signal
import subprocess
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tests.integration.conftest import missing_from_setup, require_root_and

if TYPE_CHECKING:
    from routers.guest import GuestImage


def frr_guest_image() -> GuestImage:
    """The built frr guest image; the test fails (or skips) as :func:`missing_from_setup` says without it."""
    from routers.errors import RouterError
    from routers.guest import guest_image

    try:
        return guest_image("frr")
    except RouterError as err:
        missing_from_setup(err)


def run_short(
    tmp_path: Path, mode: str, rate_bps: int, check_guest: Callable[[], object], **kw: Any
) -> tuple[Path, dict[str, Any], dict[str, Any]]:
    """An 8 s run migrating at 3 s, after the root, tool and guest checks: its directory, meta and summary."""
    require_root_and("qemu-system-x86_64", "irtt", "crosstraffic/bin/vrgen", "probes/bin/vrsampler")
    check_guest()
    from migrate.experiment.run import run
    from migrate.model.scenario import Scenario

    s = Scenario(mode=mode, rate_bps=rate_bps, frame_bytes=1500, duration_s=8, migrate_at_s=3, after_s=3, **kw)
    run_dir = run(s, tmp_path)
    meta = json.loads((run_dir / "meta.json").read_text())
    summary = json.loads((run_dir / "summary.json").read_text())
    return run_dir, meta, summary


def stop_still_running(procs: Iterable[subprocess.Popen]) -> None:
    """SIGTERM each of ``procs`` still running and wait for it to exit (120 s at most each)."""
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=120)


#: libxc's save side in a nested dom0 under TCG losing track of the domU's pages, as ``xl migrate``
#: reports it (docs/measurements/2026-11-25-xen-peering.md and -paper004.md: intermittent, with
#: different pages each time, while the same run completes on the next attempt)
NESTED_XEN_SAVE_FAULT = re.compile(
    r"^xl migrate failed \(exit 1\): xc: error: "
    r"(?:Mapping of pfn 0x[0-9a-f]+ \(mfn 0x[0-9a-f]+\) failed -22|Unknown type 0x[0-9a-f]+ for pfn 0x[0-9a-f]+)"
)


def nested_xen_save_fault(meta: dict[str, Any]) -> str | None:
    """The cause to retry after, if the run failed only by Xen's own save-side fault
    (:data:`NESTED_XEN_SAVE_FAULT`) and left the router running on R1; else None (every other
    failure stands)."""
    failure = meta.get("failure") or ""
    recovery = meta.get("recovery") or {}
    if meta.get("failure_class") != "migration" or recovery.get("source_running") is not True:
        return None
    m = NESTED_XEN_SAVE_FAULT.match(failure)
    return f"nested Xen's libxc save fault ({m.group(0).split('xc: error: ', 1)[1]})" if m else None
