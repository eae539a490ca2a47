"""with_pdeathsig: a helper dies with the process that started it, and does not start at all if
that process died before the parent-death signal was set (the fork-to-prctl window)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from migrate.core.procs import with_pdeathsig


def test_a_child_whose_parent_is_already_gone_does_not_run(tmp_path):
    marker = tmp_path / "ran"
    # parent_pid 1: what getppid() says once the forking parent died before the prctl
    res = subprocess.run(with_pdeathsig(["touch", str(marker)], parent_pid=1), capture_output=True, check=False)
    assert res.returncode == 137 and not marker.exists()


def test_argv_reaches_the_command_unchanged_and_keeps_the_pid():
    res = subprocess.run(
        with_pdeathsig([sys.executable, "-c", "import os, sys; print(os.getpid(), sys.argv[1:])", "$HOME; x", "*"]),
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert res.stdout.split(" ", 1)[1].strip() == "['$HOME; x', '*']"


def test_the_child_dies_with_its_parent():
    """A parent process starts the helper, then is SIGKILLed: the helper gets SIGKILL too."""
    _assert_sleep_dies_with(
        "import subprocess, sys, time\n"
        "from migrate.core.procs import with_pdeathsig\n"
        "p = subprocess.Popen(with_pdeathsig(['sleep', '60']))\n"
        "print(p.pid, flush=True)\n"
        "time.sleep(60)\n"
    )


def test_a_traffic_child_dies_with_the_benchmark_that_started_it():
    """crosstraffic.runner.Child (vrgen/vrsink in the benchmarks and self-tests) uses the same
    parent-death signal: a SIGKILLed benchmark leaves no generator or sink running."""
    _assert_sleep_dies_with(
        "import time\n"
        "from crosstraffic.runner import Child\n"
        "c = Child(['sleep', '60'])\n"
        "print(c.pid, flush=True)\n"
        "time.sleep(60)\n"
    )


def _assert_sleep_dies_with(code: str) -> None:
    """Run ``code`` (which starts ``sleep 60`` and prints its PID) in a parent process, SIGKILL the
    parent once the child is ``sleep``, and require the child to be gone within 5 s."""
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=os.environ)
    child = None
    try:
        child = int(parent.stdout.readline())
        deadline = time.monotonic() + 5
        while _comm(child) != "sleep" and time.monotonic() < deadline:  # its exec chain has ended
            time.sleep(0.01)
        assert _comm(child) == "sleep"
    finally:
        parent.send_signal(signal.SIGKILL)
        parent.wait()
    deadline = time.monotonic() + 5
    while _comm(child) == "sleep" and time.monotonic() < deadline:
        time.sleep(0.01)
    alive = _comm(child) == "sleep"
    if alive:
        os.kill(child, signal.SIGKILL)  # this test's own child, by PID
    assert not alive, "the helper outlived its parent"


def _comm(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    if stat.rsplit(")", 1)[1].split()[0] == "Z":  # a zombie is dead (its reaper has not waited yet)
        return None
    return stat[stat.index("(") + 1 : stat.rindex(")")]
