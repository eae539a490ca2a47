"""The SSH transport and ``hosts-check`` against real sshd hosts in network namespaces
(:mod:`tests.integration.sshlab`): commands, files, forwarded unix sockets and clock offsets
through the OpenSSH master; a healthy lab checks clean; each broken inventory gives its line and
exit 2; a killed orchestrator leaves no ssh process behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from migrate.testbed.hosts import (
    AuthRefused,
    HostKeyMismatch,
    HostKeyUnknown,
    HostUnreachable,
    RemoteCommandError,
    SshHost,
    connect,
)
from migrate.testbed.inventory import load
from tests.integration.conftest import REPO, require_root_and
from tests.integration.sshlab import SshLab, keygen

NASTY = ["a b", "c'd", 'e"f', "$HOME", "`id`", "g;h", "*", "", "-n", "tab\there", "new\nline", "\\x"]


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshLab]:
    require_root_and("ssh", "ssh-keygen", "/usr/sbin/sshd", "crosstraffic/bin/vrgen", "probes/bin/vrsampler")
    lab = SshLab(tmp_path_factory.mktemp("sshlab"), REPO)
    lab.up()
    try:
        yield lab
    finally:
        lab.down()


@pytest.fixture
def ctl(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("ctl")


def _host(lab: SshLab, ctl: Path, role: str = "A", path: Path | None = None) -> SshHost:
    return SshHost(load(path or lab.path).host(role), ctl)


def _ssh_pids(needle: str) -> list[int]:
    """PIDs of processes whose command line mentions ``needle`` (inspection only)."""
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                if needle.encode() in Path("/proc", d, "cmdline").read_bytes():
                    out.append(int(d))
            except OSError:
                continue
    return out


def _running(pid: int) -> bool:
    """The process exists and is not a zombie waiting for its new parent to reap it."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


def test_run_argv_survives_the_remote_shell(lab: SshLab, ctl: Path) -> None:
    with _host(lab, ctl) as h:
        cp = h.run(["printf", "%s\\0", *NASTY])
        assert cp.stdout.split(b"\0")[:-1] == [x.encode() for x in NASTY]
        with pytest.raises(RemoteCommandError, match="status 3"):
            h.run(["sh", "-c", "exit 3"])
        assert h.run(["cat"], input=b"in\x00put").stdout == b"in\x00put"


def test_put_fetch_binary_round_trip(lab: SshLab, ctl: Path, tmp_path: Path) -> None:
    data = bytes(range(256)) * 4096 + os.urandom(12345)
    remote = f"{lab.deploy_dir}/a dir $x/it's.bin"
    with _host(lab, ctl) as h:
        h.run(["mkdir", "-p", os.path.dirname(remote)])
        h.put(data, remote, mode=0o600)
        assert h.run(["stat", "-c", "%a %s", remote]).stdout.split() == [b"600", str(len(data)).encode()]
        h.fetch(remote, tmp_path / "back.bin")
        assert (tmp_path / "back.bin").read_bytes() == data
        # the deploy directory is the host's own: the orchestrator does not see the file
        assert not Path(remote).exists()
        with pytest.raises(RemoteCommandError, match="cannot fetch"):
            h.fetch(f"{lab.deploy_dir}/absent", tmp_path / "absent")
        assert not (tmp_path / "absent").exists() and not (tmp_path / "absent.part").exists()


SERVER = """
import os, socket, sys
p = sys.argv[1]
s = socket.socket(socket.AF_UNIX)
s.bind(p); s.listen(1)
print("ready", flush=True)
c, _ = s.accept()
c.sendall(c.recv(100).upper())
c.close(); os.unlink(p)
"""


def test_forward_unix_reaches_a_remote_socket(lab: SshLab, ctl: Path, tmp_path: Path) -> None:
    import socket

    remote = f"{lab.deploy_dir}/qmp.sock"
    local = tmp_path / "qmp.sock"
    with _host(lab, ctl) as h:
        srv = subprocess.Popen(h.ssh_argv(["python3", "-c", SERVER, remote]), stdout=subprocess.PIPE)
        try:
            assert srv.stdout and srv.stdout.readline() == b"ready\n"
            h.forward_unix(local, remote)
            with socket.socket(socket.AF_UNIX) as c:
                c.connect(str(local))
                c.sendall(b"qmp hello")
                assert c.recv(100) == b"QMP HELLO"
            assert srv.wait(timeout=10) == 0
        finally:
            if srv.poll() is None:
                srv.kill()
                srv.wait()
        h.cancel_forward(local)
        assert not local.exists()


def test_clock_of_a_same_clock_host_is_zero_within_its_bound(lab: SshLab, ctl: Path) -> None:
    with _host(lab, ctl) as h:
        for _ in range(2):  # the second call reuses the session
            c = h.clock(samples=20)
            assert c.n == 20 and c.rtt_min_ns > 0
            assert abs(c.offset_ns) <= c.uncertainty_ns, c
            assert c.uncertainty_ns < 50_000_000
        state = h.sync_state()
        assert state["method"] in ("none", "chrony", "ptp4l", "timesyncd")


def test_connect_opens_all_in_parallel_and_masters_outlive_the_threads(lab: SshLab, ctl: Path) -> None:
    hosts = connect(load(lab.path), ctl)
    try:
        assert sorted(hosts) == sorted(lab.mgmt)
        # a master forked by a thread that has exited would get its PDEATHSIG
        t = threading.Thread(target=lambda: None)
        t.start()
        t.join()
        for h in hosts.values():
            assert h.run(["true"]).returncode == 0
            assert isinstance(h, SshHost) and h.is_open
    finally:
        for h in hosts.values():
            h.close()
    assert not any(p.exists() for p in ctl.glob("*.ctl"))


def test_connect_closes_the_opened_hosts_when_one_fails(lab: SshLab, ctl: Path) -> None:
    def wrong_port(inv: dict[str, Any]) -> None:
        inv["hosts"]["R2"]["ssh"]["port"] = 2222

    with pytest.raises(HostUnreachable, match="R2"):
        connect(load(lab.variant("connect-fail", wrong_port)), ctl)
    assert not _ssh_pids(str(ctl))


def test_open_errors_are_distinguishable(lab: SshLab, ctl: Path, tmp_path: Path) -> None:
    other = keygen(tmp_path / "other_key")

    def key(inv: dict[str, Any]) -> None:
        inv["hosts"]["A"]["ssh"]["key"] = str(other)

    def port(inv: dict[str, Any]) -> None:
        inv["hosts"]["A"]["ssh"]["port"] = 2222

    def unknown(inv: dict[str, Any]) -> None:
        (tmp_path / "kh-empty").write_text("")
        inv["hosts"]["A"]["ssh"]["known_hosts"] = str(tmp_path / "kh-empty")

    def mismatch(inv: dict[str, Any]) -> None:
        line = f"{lab.mgmt['A']} {Path(str(other) + '.pub').read_text()}"
        (tmp_path / "kh-wrong").write_text(line)
        inv["hosts"]["A"]["ssh"]["known_hosts"] = str(tmp_path / "kh-wrong")

    for edit, exc in (
        (key, AuthRefused),
        (port, HostUnreachable),
        (unknown, HostKeyUnknown),
        (mismatch, HostKeyMismatch),
    ):
        h = _host(lab, ctl, path=lab.variant(f"open-{edit.__name__}", edit))
        with pytest.raises(exc) as err:
            h.open()
        assert "A (root@" in str(err.value)
        assert not h.is_open and not _ssh_pids(str(h.control_path))


CHILD = """
import subprocess, sys, time
from pathlib import Path
from migrate.testbed.hosts import SshHost
from migrate.testbed.inventory import load
h = SshHost(load(sys.argv[1]).host("A"), Path(sys.argv[2]))
h.open()
h.clock(samples=2)
up = subprocess.Popen(h.ssh_argv(["sh", "-c", "echo up; exec sleep 600"]), stdout=subprocess.PIPE)
assert up.stdout.readline() == b"up\\n"  # this session is established through the master
racing = subprocess.Popen(h.ssh_argv(["sleep", "600"]))  # this one may still be in its handshake
print(h.master.pid, up.pid, racing.pid, flush=True)
time.sleep(600)
"""


def test_killed_orchestrator_leaves_no_local_ssh(lab: SshLab, ctl: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(lab.path), str(ctl)], stdout=subprocess.PIPE, env=env, text=True
    )
    try:
        assert child.stdout is not None
        pids = [int(x) for x in child.stdout.readline().split()]
        assert _ssh_pids(str(ctl / "A.ctl")), "no ssh process found before the kill"
        child.send_signal(signal.SIGKILL)
        child.wait()
        deadline = time.monotonic() + 10
        while _ssh_pids(str(ctl / "A.ctl")) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _ssh_pids(str(ctl / "A.ctl")), "ssh processes outlived the orchestrator"
        assert not [p for p in pids if _running(p)]
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def _hosts_check(path: Path, *extra: str) -> tuple[int, str, str]:
    cp = subprocess.run(
        [sys.executable, "-m", "migrate", "hosts-check", "--testbed", str(path), *extra],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=120,
    )
    return cp.returncode, cp.stdout, cp.stderr


def test_hosts_check_healthy_lab(lab: SshLab) -> None:
    rc, out, err = _hosts_check(lab.path)
    assert rc == 0, out + err
    rows = [line for line in out.splitlines() if line.split()[:1] and line.split()[0] in lab.mgmt]
    assert [r.split()[0] for r in rows] == ["A", "C", "B", "D", "R1", "R2"]
    assert "ERROR" not in out and "hosts-check: OK: 6 hosts, 0 error(s)" in out
    rc, out, _ = _hosts_check(lab.path, "--json")
    doc = json.loads(out)
    assert rc == 0 and doc["ok"] and len(doc["hosts"]) == 6
    assert all(abs(h["clock"]["offset_ns"]) <= h["clock"]["uncertainty_ns"] for h in doc["hosts"])


def _set(role: str, key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(inv: dict[str, Any]) -> None:
        t = inv["hosts"][role]
        *path, last = key.split(".")
        for k in path:
            t = t[k]
        t[last] = value

    return edit


def _broken(lab: SshLab, tmp_path: Path) -> list[tuple[str, Callable[[dict[str, Any]], None], list[str], str]]:
    other = keygen(tmp_path / "wrong_key")
    (tmp_path / "kh-empty").write_text("")

    def no_helpers(inv: dict[str, Any]) -> None:
        inv["deploy_dir"] = "/var/lib/vrmig-absent"

    def libvirt(inv: dict[str, Any]) -> None:
        inv["hosts"]["R1"]["libvirt_uri"] = (
            f"qemu+ssh://root@{lab.mgmt['R1']}/system?socket=/nonexistent/libvirt-sock"
            f"&keyfile={lab.key}&known_hosts={lab.known_hosts}&no_tty=1"
        )

    return [
        ("wrong-key", _set("A", "ssh.key", str(other)), [], "A: root@{A}: authentication refused"),
        ("wrong-port", _set("B", "ssh.port", 2222), [], "B: root@{B}:2222: unreachable"),
        (
            "unknown-hostkey",
            _set("C", "ssh.known_hosts", str(tmp_path / "kh-empty")),
            [],
            "C: root@{C}: host key unknown",
        ),
        ("no-iface", _set("D", "interface", "eth9"), [], "D: interface eth9 missing (hosts.D.interface"),
        ("iface-down", _set("D", "interface", "dn0"), [], "D: interface dn0 is down"),
        ("no-addr", _set("A", "ipv4", "198.18.1.20/24"), [], "A: address 198.18.1.20/24 not on eth0"),
        ("no-mig-addr", _set("R2", "migration.ipv4", "198.19.255.3/30"), [], "R2: address 198.19.255.3/30 not on mig0"),
        ("no-uplink", _set("R1", "uplinks.L", "upX"), [], "R1: interface upX missing"),
        (
            "no-helpers",
            no_helpers,
            [],
            "A: helper missing: /var/lib/vrmig-absent/bin/vrgen, vrsink, vrsampler (run make hosts-setup TESTBED=",
        ),
        ("libvirt", libvirt, [], f"R1: libvirt unreachable at qemu+ssh://root@{lab.mgmt['R1']}/system"),
        ("offset", lambda inv: None, ["--max-offset-ms", "0.000001"], "A: clock offset"),
    ]


def test_hosts_check_each_problem_has_its_line_and_exit_2(lab: SshLab, tmp_path: Path) -> None:
    require_root_and("virsh")
    failures = []
    for name, edit, extra, want in _broken(lab, tmp_path):
        want = want.format(**lab.mgmt)
        rc, out, err = _hosts_check(lab.variant(name, edit), *extra)
        if rc != 2 or not any(want in line and line.startswith("ERROR") for line in out.splitlines()):
            failures.append(f"{name}: rc {rc}, wanted an ERROR line with {want!r}:\n{out}{err}")
    assert not failures, "\n".join(failures)
