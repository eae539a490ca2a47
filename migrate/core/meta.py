"""meta.json: everything needed to interpret a run later (parameters, versions, host)."""

from __future__ import annotations

import datetime as dt
import os
import platform
import re
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from migrate.core.rundir import META_FORMAT, write_meta

FORMAT_VERSION = META_FORMAT  # the results contract's (migrate.core.rundir)
REPO = Path(__file__).resolve().parents[2]


def _cmd(argv: list[str]) -> str | None:
    if shutil.which(argv[0]) is None:
        return None
    try:
        res = subprocess.run(argv, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    out = (res.stdout or res.stderr).strip().splitlines()
    return out[0].strip() if out else None


def git_commit() -> str | None:
    """Commit of the suite's checkout (with '-dirty' when modified); None outside a git checkout
    (a copy of the tree) or without git, never git's error message."""
    if shutil.which("git") is None:
        return None
    try:
        res = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=10, check=False)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return None
    commit = res.stdout.strip()
    if res.returncode != 0 or not re.fullmatch(r"[0-9a-f]{40}", commit):
        return None
    dirty = subprocess.run(
        ["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
        capture_output=True, text=True, check=False,
    ).stdout.strip()  # fmt: skip
    return commit + ("-dirty" if dirty else "")


def opening(kind: str) -> dict[str, Any]:
    """The fields every run-like command's meta.json opens with (``run``, ``calibrate``,
    ``baseline``): format, kind, creation time, status "running" with no failure yet, the
    checkout's commit and the host's facts.  The command adds its own."""
    return {
        "format_version": FORMAT_VERSION,
        "kind": kind,
        "created_utc": dt.datetime.now(dt.UTC).isoformat(),
        "status": "running",
        "failure": None,
        "failure_class": None,
        "git_commit": git_commit(),
        "host": host_facts(),
    }


def clock_fields() -> dict[str, Any]:
    """meta.json ``clock`` at the start: what the time stamps are and CLOCK_REALTIME's offset."""
    return {"timestamps": "CLOCK_REALTIME ns", "offset_start_ns": clock_offset_ns()}


def cpu_model() -> str | None:
    """Host CPU model name."""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return None


def clock_offset_ns() -> int:
    """CLOCK_REALTIME - CLOCK_MONOTONIC now; a change between start and end reveals a clock step."""
    return time.clock_gettime_ns(time.CLOCK_REALTIME) - time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def host_facts() -> dict[str, Any]:
    """Kernel, CPU, OS and tool versions."""
    osr = {}
    if Path("/etc/os-release").exists():
        for line in Path("/etc/os-release").read_text().splitlines():
            if "=" in line:
                k, v = line.split("=", 1)
                osr[k] = v.strip('"')
    return {
        "kernel": platform.release(),
        "kernel_version": platform.version(),
        "os": osr.get("PRETTY_NAME"),
        "cpu_model": cpu_model(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "hostname": platform.node(),
        "tools": {
            "irtt": _cmd(["irtt", "version"]),
            "iperf3": _cmd(["iperf3", "--version"]),
            "iproute2": _cmd(["ip", "-V"]),
            "pyroute2": _pkg_version("pyroute2"),
            "numpy": _pkg_version("numpy"),
        },
    }


def _pkg_version(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


def close_run(meta: dict[str, Any], run_dir: Path, on_close: Callable[[dict[str, Any]], None] | None = None) -> None:
    """A run's last words in ``meta.json``: the end-of-run clock offset (where it has a ``clock``)
    and the finish time, then the kind's own closing fields (``on_close``), then the file written
    (atomically)."""
    if "clock" in meta:
        meta["clock"]["offset_end_ns"] = clock_offset_ns()
    meta["finished_utc"] = dt.datetime.now(dt.UTC).isoformat()
    if on_close is not None:
        on_close(meta)
    write_meta(run_dir, meta)


def with_router(stack: Any, router: str, image: Any) -> dict[str, Any] | None:
    """``stack`` (the QEMU record, or None) with ``router``: what ROUTER= asked for and the
    software, package version, release and package source of the image that ran (from its
    manifest; None without one, e.g. a run that failed before its driver read it)."""
    out = dict(stack) if isinstance(stack, dict) else {}
    r = image.get("router") if isinstance(image, dict) and isinstance(image.get("router"), dict) else None
    out["router"] = {
        "requested": router,
        **(
            {k: r.get(k) for k in ("software", "package", "version", "upstream_version", "release", "source")}
            if r
            else {"version": None, "reason": "the driver recorded no router image"}
        ),
    }
    return out


def versions_of(facts: dict[str, Any]) -> dict[str, Any]:
    """The versions worth recording, from a preflight's facts (``migrate.experiment.place.preflight``)."""
    hv_keys = ("qemu", "qemu_by_host", "accel", "accel_reason", "libvirt", "driver")
    return {
        "git_commit": git_commit(),
        "host": host_facts(),
        "hypervisor": {k: v for k, v in facts.items() if k in hv_keys},
        "router": (facts.get("guest_image") or {}).get("router"),
    }
