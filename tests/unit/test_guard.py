"""The remote process guard, run locally (it is plain python3): it records the helper, reports
its exit status and CPU time, and kills the helper's process group when its stdin closes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from migrate.testbed.guard import guard_argv, parse_exit, parse_started


def _spawn(tmp_path: Path, argv: list[str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        guard_argv(str(tmp_path / "state"), "t", argv, python=sys.executable),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def _first_line(p: subprocess.Popen[bytes]) -> str:
    assert p.stderr is not None
    return p.stderr.readline().decode().strip()


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_helper_exit_is_reported_with_status_and_cpu(tmp_path):
    p = _spawn(tmp_path, [sys.executable, "-c", "import sys; sum(range(3_000_000)); print('hi'); sys.exit(3)"])
    pid, start = parse_started(_first_line(p))
    rec = json.loads((tmp_path / "state" / f"{pid}.json").read_text())
    assert rec["pid"] == pid and rec["start"] == start and rec["what"] == "t"
    assert p.stdout is not None and p.stderr is not None
    out = p.stdout.read()  # stdin stays open: closing it would stop the helper
    err = p.stderr.read()
    p.wait(timeout=30)
    assert out == b"hi\n" and p.returncode == 3
    code, cpu = parse_exit(err.decode().strip().splitlines()[-1])
    assert code == 3 and cpu > 0.01
    assert not (tmp_path / "state" / f"{pid}.json").exists()


def test_stdin_eof_kills_the_helpers_process_group(tmp_path):
    # the helper starts a grandchild: both must go when the orchestrator's end of stdin closes
    script = "import subprocess as s, time; c = s.Popen(['sleep', '600']); print(c.pid, flush=True); time.sleep(600)"
    p = _spawn(tmp_path, [sys.executable, "-c", script])
    pid, _ = parse_started(_first_line(p))
    assert p.stdout is not None
    grandchild = int(p.stdout.readline())
    assert _alive(pid) and _alive(grandchild)
    assert p.stdin is not None
    p.stdin.close()  # what a dead SSH client looks like from the remote side
    p.wait(timeout=10)
    assert p.returncode == 128 + 15  # SIGTERM
    deadline = time.monotonic() + 5
    while _alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(pid) and not _alive(grandchild)
    assert not list((tmp_path / "state").iterdir())


def test_a_missing_program_is_127_and_named(tmp_path):
    p = _spawn(tmp_path, ["/nonexistent/vrgen"])
    assert p.stderr is not None
    err = p.stderr.read()  # the child's message may come before or after the guard's first line
    p.wait(timeout=10)
    assert p.returncode == 127 and b"cannot run /nonexistent/vrgen" in err
    assert os.path.isdir(tmp_path / "state")
