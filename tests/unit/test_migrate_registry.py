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


class _Interrupted(Exception):
    pass


def _signal_main_thread(signum):
    """SIGTERM as the kernel hands it to the main thread (a process with no other threads)."""
    import signal
    import threading

    signal.pthread_kill(threading.main_thread().ident, signum)


def _signal_via_other_thread(signum):
    """SIGTERM taken by another thread whose mask lets it in, as the kernel may choose in a
    process with QMP readers or a leftover test thread (the CI failure of the mask-only hold):
    its C handler trips the flag and CPython runs the Python handler in the main thread at the
    next bytecode.  Joined, so the C handler has run when this returns."""
    import signal
    import threading

    ready, go = threading.Event(), threading.Event()

    def other():
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signum})
        ready.set()
        go.wait(timeout=10)

    t = threading.Thread(target=other)
    t.start()
    ready.wait(timeout=10)
    signal.pthread_kill(t.ident, signum)
    go.set()
    t.join()


@pytest.mark.parametrize("deliver", [_signal_main_thread, _signal_via_other_thread])
def test_a_signal_during_namespace_creation_surfaces_only_after_it_exists(state_root, monkeypatch, deliver):
    """pyroute2 creates a namespace in a child process; a SIGTERM that interrupted the wait let
    teardown run before the child mounted the namespace (a leaked ``<prefix>-SW``).  Here a fake
    create signals its own process halfway: the interrupt must arrive after creation finished."""
    import signal

    from pyroute2 import netns

    created: list[str] = []

    def fake_create(name):
        deliver(signal.SIGTERM)  # delivered now, unless held
        for _ in range(1000):  # Python runs pending handlers between bytecodes
            pass
        created.append(name)

    def handler(signum, frame):
        raise _Interrupted(f"seen with {list(created)}")

    monkeypatch.setattr(netns, "create", fake_create)
    old = signal.signal(signal.SIGTERM, handler)
    reg = regmod.Registry("vmtest03")
    reg.open()
    try:
        with pytest.raises(_Interrupted, match=r"seen with \['vmtest03-SW'\]"):
            reg.create_netns("vmtest03-SW")
        assert json.loads(reg.state_file.read_text())["namespaces"] == ["vmtest03-SW"]
        assert signal.getsignal(signal.SIGTERM) is handler, "the held handler was not put back"
    finally:
        signal.signal(signal.SIGTERM, old)
        reg.namespaces.clear()
        reg.teardown()


def test_a_signal_while_starting_a_helper_surfaces_once_its_pid_is_recorded(state_root, tmp_path, monkeypatch):
    """Proc.start: an interrupt between fork and add_process would leave a child no teardown
    knows of.  The hold is Python-level only: the child must not inherit SIGTERM blocked."""
    import signal
    import subprocess as sp

    from migrate import procs

    real_popen = sp.Popen
    recorded: list[list[int]] = []

    def popen_then_signal(*a, **k):
        p = real_popen(*a, **k)
        _signal_main_thread(signal.SIGTERM)  # after the fork, before the PID is recorded
        for _ in range(1000):
            pass
        return p

    def handler(signum, frame):
        recorded.append([p["pid"] for p in reg.processes])
        raise _Interrupted("stop")

    monkeypatch.setattr(procs.subprocess, "Popen", popen_then_signal)
    old = signal.signal(signal.SIGTERM, handler)
    reg = regmod.Registry("vmtest04")
    reg.open()
    try:
        proc = procs.Proc("sleeper", ["sh", "-c", "grep SigBlk /proc/self/status; exec sleep 60"], reg, tmp_path)
        with pytest.raises(_Interrupted):
            proc.start()
        assert recorded == [[proc.pid]], "the interrupt surfaced before the PID was recorded"
        proc.wait_for("SigBlk", timeout_s=10, path=proc.stdout_path)
        blocked = int(proc.stdout_path.read_text().split()[1], 16)
        assert not blocked & (1 << (signal.SIGTERM - 1)), "the helper inherited a blocked SIGTERM"
    finally:
        signal.signal(signal.SIGTERM, old)
        assert reg.teardown() == []
