"""CPU-time snapshots from /proc: the host's /proc/stat and processes' /proc/<pid>/stat.

A snapshot is plain JSON (written raw into each baseline point); ``analysis`` turns two of them
into CPU-seconds per second.  Times are in clock ticks (USER_HZ) as the kernel reports them.

The module needs nothing but the standard library, so that a lab host (``TESTBED=``), where the
suite's package is not installed, takes the same snapshot by running this very file with
``python3 -c`` (:func:`remote_argv`): one copy of the code, whichever host reads its /proc."""

from __future__ import annotations

import contextlib
import json
import os
import sys
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


def parse_vm_rss_kib(status: str) -> int | None:
    """``VmRSS`` of a /proc/<pid>/status text, in KiB (None when the line is absent: a kernel
    thread, or a process that has exited)."""
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            parts = line.split()
            if len(parts) >= 2 and parts[1].isdigit():
                return int(parts[1])
    return None


def process_tree(pid: int) -> list[int]:
    """``pid`` and all its descendants (from /proc; processes that exit meanwhile are skipped)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            tasks = list(Path(f"/proc/{p}/task").iterdir())
        except OSError:
            continue
        out.append(p)
        for task in tasks:
            with contextlib.suppress(OSError):
                todo.extend(int(x) for x in (task / "children").read_text().split())
    return out


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


def with_trees(pids: dict[str, int], trees: dict[str, int]) -> dict[str, int]:
    """``pids`` plus, for each ``prefix -> root`` of ``trees``, every process of the root's tree
    as ``<prefix><pid>`` (a container's init, daemons and helpers, looked up now)."""
    out = dict(pids)
    for prefix, root in trees.items():
        out.update({f"{prefix}{p}": p for p in process_tree(root)})
    return out


def remote_argv(pids: dict[str, int], trees: dict[str, int] | None = None) -> list[str]:
    """The argv that prints, as JSON, :func:`snapshot` of ``with_trees(pids, trees)`` taken on
    the host that runs it (this file's own text, run by that host's ``python3``)."""
    return ["python3", "-c", Path(__file__).read_text(), json.dumps({"pids": pids, "trees": trees or {}})]


if __name__ == "__main__":  # python3 -c <this file> '{"pids": {...}, "trees": {...}}' on a lab host
    _req = json.loads(sys.argv[1])
    print(json.dumps(snapshot(with_trees(_req["pids"], _req["trees"]))))
