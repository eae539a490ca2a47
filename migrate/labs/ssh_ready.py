"""Waiting for an emulated lab host to take SSH: a poll loop shared by the plain hosts
(:mod:`migrate.labs.emulated`, sshd in a namespace) and the Xen hosts
(:mod:`migrate.labs.emulated_xen`, dom0 in a QEMU VM)."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable

from migrate.core.errors import TestbedError


def wait_ssh(
    p: subprocess.Popen[bytes],
    ssh: list[str],
    timeout_s: float,
    poll_s: float,
    up: Callable[[], bool],
    exited: Callable[[int], str],
    timed_out: Callable[[str], str],
) -> float:
    """Poll until ``up()`` and then ``ssh ... true`` succeed; return the seconds it took.

    Each round: TestbedError(``exited(returncode)``) once ``p`` has exited; ``up()`` (which may
    raise TestbedError itself); when it is true, ``ssh`` with ``true`` appended.  When
    ``timeout_s`` runs out: TestbedError(``timed_out(ssh's last stderr, or "")``)."""
    t0 = time.monotonic()
    deadline = t0 + timeout_s
    last = ""
    while time.monotonic() < deadline:
        if p.poll() is not None:
            raise TestbedError(exited(p.returncode))
        if up():
            res = subprocess.run([*ssh, "true"], capture_output=True, text=True, check=False)
            if res.returncode == 0:
                return time.monotonic() - t0
            last = res.stderr.strip()
        time.sleep(poll_s)
    raise TestbedError(timed_out(last))
