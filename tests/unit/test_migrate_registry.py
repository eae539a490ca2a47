"""The resource registry kills exactly the recorded PIDs and cleans dead runs' state (no root)."""

import json
import subprocess
import sys

import pytest

from migrate import registry as regmod


@pytest.fixture
def state_root(tmp_path, monkeypatch):
    root = tmp_path / "state"
    monkeypatch.setattr(regmod, "STATE_ROOT", root)
    return root


def _sleeper():
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])


def test_teardown_kills_recorded_pid_and_leaves_others(state_root):
    reg = regmod.Registry("vmtest01")
    reg.open()
    assert oct(reg.dir.stat().st_mode & 0o777) == "0o700"
    mine, other = _sleeper(), _sleeper()
    try:
        reg.add_process(mine.pid, "sleeper")
        assert json.loads(reg.state_file.read_text())["processes"][0]["pid"] == mine.pid
        assert reg.teardown() == []
        assert mine.wait(timeout=5) is not None
        assert other.poll() is None, "an unrecorded process was touched"
        assert not reg.dir.exists()
    finally:
        other.kill()
        other.wait()
        mine.kill()
        mine.wait()


def test_pid_reuse_is_detected():
    p = _sleeper()
    try:
        st = regmod.proc_starttime(p.pid)
        assert regmod.pid_alive(p.pid, st)
        assert not regmod.pid_alive(p.pid, st + 1)
    finally:
        p.kill()
        p.wait()


def test_clean_stale_only_touches_dead_owners(state_root, tmp_path):
    victim = _sleeper()
    path = tmp_path / "leftover.tmp"
    path.write_text("x")
    try:
        dead = state_root / "vmdead01"
        dead.mkdir(parents=True)
        (dead / "state.json").write_text(json.dumps({
            "prefix": "vmdead01", "owner_pid": 999999999, "owner_starttime": 1,
            "namespaces": [], "processes": [{"pid": victim.pid, "starttime": regmod.proc_starttime(victim.pid),
                                              "what": "x"}], "paths": [str(path)],
        }))  # fmt: skip
        live = regmod.Registry("vmlive01")
        live.open()
        assert regmod.clean_stale() == ["vmdead01"]
        assert victim.wait(timeout=5) is not None
        assert not path.exists() and not dead.exists()
        assert live.state_file.exists(), "a live run's state was touched"
        live.teardown()
    finally:
        victim.kill()
        victim.wait()
