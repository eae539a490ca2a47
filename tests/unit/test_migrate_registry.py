"""The resource registry kills exactly the recorded PIDs and cleans dead runs' state (no root)."""

import concurrent.futures
import json
import subprocess
import sys
from pathlib import Path

import pytest

from migrate.core import registry as regmod


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

    from migrate.core import procs

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


# -- the reaper, libvirt domains and container roots --------------------------------------------

_OWNER = r"""
import json, subprocess, sys, time
from pathlib import Path
from migrate.core.registry import Registry
run_dir, leftover = Path(sys.argv[1]), Path(sys.argv[2])
reg = Registry("vmreap01", run_dir=str(run_dir))
reg.open()
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
reg.add_process(child.pid, "sleeper")  # no parent-death signal: only the reaper can stop it
reg.add_path(leftover)
leftover.write_text("x")
print(child.pid, flush=True)
time.sleep(60)
"""


def _wait_until(cond, timeout_s=15.0):
    import time

    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_reaper_tears_down_the_run_of_a_killed_orchestrator(tmp_path):
    """SIGKILL the owner: its reaper kills what the state file lists, removes the paths and the
    state directory, and marks the run interrupted, with no further run or clean-testbed."""
    import os
    import signal

    state_root = tmp_path / "state"
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "meta.json").write_text(json.dumps({"status": "running"}))
    leftover = tmp_path / "leftover"
    env = {**os.environ, "VRMIG_STATE": str(state_root)}
    owner = subprocess.Popen([sys.executable, "-c", _OWNER, str(run_dir), str(leftover)], env=env,
                             stdout=subprocess.PIPE, text=True)  # fmt: skip
    child = int(owner.stdout.readline())
    try:
        state = json.loads((state_root / "vmreap01" / "state.json").read_text())
        reaper = state["reaper"]["pid"]
        assert regmod.pid_alive(reaper, state["reaper"]["starttime"]) and regmod.pid_alive(child, None)
        owner.send_signal(signal.SIGKILL)
        owner.wait()
        _wait_until(lambda: not (state_root / "vmreap01").exists())
        assert not regmod.pid_alive(child, None), "the recorded child outlived its orchestrator"
        assert not leftover.exists()
        meta = json.loads((run_dir / "meta.json").read_text())
        assert meta["status"] == "interrupted" and meta["failure"] == regmod.REAPER_WHY
        _wait_until(lambda: not regmod.pid_alive(reaper, state["reaper"]["starttime"]))
    finally:
        owner.kill()
        owner.wait()
        if regmod.pid_alive(child, None):
            os.kill(child, signal.SIGKILL)


def test_reaper_leaves_when_the_run_ends_and_touches_nothing(state_root, tmp_path):
    keep = _sleeper()
    try:
        reg = regmod.Registry("vmreap02")
        reg.open()
        reaper = reg.reaper
        assert reaper is not None and reaper.poll() is None
        assert reg.teardown() == []
        assert reaper.returncode == 0 and reg.reaper is None
        assert keep.poll() is None
    finally:
        keep.kill()
        keep.wait()


def _named(name):
    p = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)", "-name", f"guest={name},debug-threads=on"]
    )
    # until the child has exec'd, /proc/<pid>/cmdline is the parent's (a race seen under load)
    _wait_until(lambda: b"guest=" in Path(f"/proc/{p.pid}/cmdline").read_bytes())
    return p


def test_domain_qemu_is_killed_by_its_pid_file_only_if_it_is_that_domain(tmp_path):
    """The daemon is gone (nothing answers on its socket): the pid file names the QEMU, which is
    killed only if its command line says -name guest=<domain>."""
    qemu, decoy = _named("vrmig-vmdom001"), _named("someone-else")
    try:
        pid_ok, pid_decoy = tmp_path / "ok.pid", tmp_path / "decoy.pid"
        pid_ok.write_text(f"{qemu.pid}\n")
        pid_decoy.write_text(f"{decoy.pid}\n")
        uri = f"qemu+unix:///system?socket={tmp_path / 'gone.sock'}"
        state = {"domains": [{"name": "vrmig-vmdom001", "uri": uri, "pidfile": str(pid_ok)},
                             {"name": "vrmig-vmdom002", "uri": uri, "pidfile": str(pid_decoy)}]}  # fmt: skip
        assert regmod.qemu_named(qemu.pid, "vrmig-vmdom001") and not regmod.qemu_named(decoy.pid, "vrmig-vmdom002")
        assert regmod.teardown_state(state) == []
        assert qemu.wait(timeout=5) is not None
        assert decoy.poll() is None, "a process not named after the domain was killed"
        assert regmod.process_prefixes(qemu.pid) == set()
    finally:
        for p in (qemu, decoy):
            p.kill()
            p.wait()


def test_container_root_stops_processes_rooted_there(tmp_path):
    """A recorded container root: every process whose root is that directory is stopped, found
    by device and inode (here a chroot), whoever its parent is; others are left alone."""
    import os
    import shutil

    if os.geteuid() != 0:
        pytest.skip("chroot needs root")
    root = tmp_path / "vrmig-vm0c0f01-criu" / "rootfs-R1"
    (root / "bin").mkdir(parents=True)
    busybox = shutil.which("busybox")
    if busybox is None:
        pytest.skip("busybox not installed")
    shutil.copy(busybox, root / "bin" / "busybox")
    inside = subprocess.Popen(["chroot", str(root), "/bin/busybox", "sleep", "60"])
    outside = _sleeper()
    try:
        _wait_until(lambda: inside.pid in regmod.processes_with_root(root.stat().st_dev, root.stat().st_ino))
        assert "vm0c0f01" in regmod.process_prefixes(inside.pid)  # detection: the root mount's path
        st = root.stat()
        assert regmod.teardown_state({"roots": [{"path": str(root), "dev": st.st_dev, "ino": st.st_ino}]}) == []
        assert inside.wait(timeout=5) is not None
        assert outside.poll() is None
    finally:
        for p in (inside, outside):
            p.kill()
            p.wait()


def test_clean_stale_leaves_a_run_another_process_is_tearing_down(state_root, tmp_path):
    """A new run's clean_stale() does not wait for a teardown in progress (the reaper holds the
    run's lock): it skips that run at once; once the lock is free it cleans it."""
    path = tmp_path / "leftover.tmp"
    path.write_text("x")
    dead = state_root / "vmdead02"
    dead.mkdir(parents=True)
    (dead / "state.json").write_text(json.dumps({
        "prefix": "vmdead02", "owner_pid": 999999999, "owner_starttime": 1,
        "namespaces": [], "processes": [], "paths": [str(path)],
    }))  # fmt: skip
    holder = subprocess.Popen(
        [sys.executable, "-c", "import fcntl, os, sys, time\n"
         f"fd = os.open({str(dead)!r}, os.O_RDONLY | os.O_DIRECTORY)\n"
         "fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"held\n"
        with concurrent.futures.ThreadPoolExecutor(1) as pool:  # a blocked clean_stale fails, not hangs
            attempt = pool.submit(regmod.clean_stale)
            try:
                assert attempt.result(timeout=10) == []
            finally:
                holder.stdin.close()  # type: ignore[union-attr]  # (frees a blocked attempt too)
        assert path.exists() and dead.exists()
    finally:
        if holder.stdin is not None and not holder.stdin.closed:
            holder.stdin.close()
        holder.wait(timeout=5)
    assert regmod.clean_stale() == ["vmdead02"]
    assert not path.exists() and not dead.exists()
