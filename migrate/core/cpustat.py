"""CPU-time snapshots from /proc: the host's /proc/stat and processes' /proc/<pid>/stat.

A snapshot is plain JSON (written raw into each baseline point); ``analysis`` turns two of them
into CPU-seconds per second.  Times are in clock ticks (USER_HZ) as the kernel reports them."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

STAT_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal", "guest", "guest_nice")


def user_hz() -> int:
    """Clock ticks per second of /proc times."""
    return int(os.sysconf("SC_CLK_TCK"))


def parse_proc_stat(text: str) -> dict[str, int]:
    """The aggregate ``cpu`` line of /proc/stat as {field: ticks}."""
    for line in text.splitlines():
        parts = line.split()
        if parts and parts[0] == "cpu":
            return {name: int(v) for name, v in zip(STAT_FIELDS, parts[1:], strict=False)}
    raise ValueError("no aggregate 'cpu' line in /proc/stat")


def parse_pid_stat(text: str) -> tuple[int, int]:
    """(utime, stime) ticks of a process (all its threads) from /proc/<pid>/stat text."""
    rest = text.rsplit(")", 1)[1].split()
    return int(rest[11]), int(rest[12])


def snapshot(pids: dict[str, int]) -> dict[str, Any]:
    """Host CPU counters and (utime, stime) of each named PID (None if it is gone), with the
    CLOCK_MONOTONIC and CLOCK_REALTIME time of the reading."""
    procs: dict[str, list[int] | None] = {}
    for name, pid in pids.items():
        try:
            procs[name] = list(parse_pid_stat(Path(f"/proc/{pid}/stat").read_text()))
        except (OSError, IndexError, ValueError):
            procs[name] = None
    return {
        "mono_ns": time.monotonic_ns(),
        "t_ns": time.time_ns(),
        "user_hz": user_hz(),
        "cpus": os.cpu_count(),
        "host": parse_proc_stat(Path("/proc/stat").read_text()),
        "procs": procs,
    }
