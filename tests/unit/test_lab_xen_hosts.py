"""A lab whose R1 and R2 are Xen hosts (``hosts.R*.xen``): the inventory's xen tables, what
``lab-up --xen`` writes, and the shell guard that stops a dom0 command when its SSH channel
closes (run here with this machine's sh: the same POSIX script a dom0 runs)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from migrate.drivers.xen.dom0 import GUARD_CLEAN_SH, GUARD_SH
from migrate.drivers.xen.xl import DomuPaths, domu_config
from migrate.labs import emulated as lab
from migrate.labs import emulated_xen as labxen
from migrate.testbed import inventory as inv

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "lab.example.toml"
XEN = '\n[hosts.{r}.xen]\nssh = {{ host = "{h}", port = 2222 }}\nmigration = {{ interface = "ethM", ipv4 = "{a}" }}\n'
XEN_R1 = XEN.format(r="R1", h="198.19.128.18", a="198.19.254.1/30")
XEN_R2 = XEN.format(r="R2", h="198.19.128.22", a="198.19.254.2/30")


def _with_xen(r1: str = XEN_R1, r2: str = XEN_R2) -> str:
    text = EXAMPLE.read_text()
    text = text.replace('libvirt_tls = "/etc/vrmig/lab/pki/R1"\n', 'libvirt_tls = "/etc/vrmig/lab/pki/R1"\n' + r1)
    return text.replace('libvirt_tls = "/etc/vrmig/lab/pki/R2"\n', 'libvirt_tls = "/etc/vrmig/lab/pki/R2"\n' + r2)


def test_xen_tables_load_with_defaults(tmp_path):
    p = tmp_path / "lab.toml"
    p.write_text(_with_xen())
    i = inv.load(p)
    x1, x2 = i.host("R1").xen, i.host("R2").xen
    assert (x1.ssh.host, x1.ssh.port, x1.ssh.user) == ("198.19.128.18", 2222, "root")
    assert x1.ssh.key == i.host("R1").ssh.key  # the [ssh] defaults apply
    assert (x2.migration_if, x2.migration_ipv4) == ("ethM", "198.19.254.2/30")
    assert x1.bridges == {"L": "xenbrL", "R": "xenbrR"} and x1.deploy_dir == i.deploy_dir
    assert inv.load(EXAMPLE).host("R1").xen is None


def test_an_empty_xen_table_means_dom0_is_the_host_itself(tmp_path):
    p = tmp_path / "lab.toml"
    p.write_text(_with_xen("\n[hosts.R1.xen]\n", "\n[hosts.R2.xen]\n"))
    i = inv.load(p)
    x1 = i.host("R1").xen
    assert x1.ssh == i.host("R1").ssh and (x1.migration_if, x1.migration_ipv4) == ("mig0", "198.19.255.1/30")


BAD = [
    (_with_xen(r2=""), "only one hypervisor host is a Xen host"),
    (_with_xen(r2=XEN_R2.replace("198.19.254.2/30", "198.19.250.2/30")), "not in R1's dom0 subnet"),
    (_with_xen(r2=XEN_R2.replace("198.19.254.2/30", "198.19.254.1/30")), "is also hosts.R1.xen.migration"),
    (_with_xen(r2=XEN_R2.replace("198.19.128.22", "198.19.128.18")), "is also R1.xen's"),
    (_with_xen(r2=XEN_R2 + 'deploy_dir = "/srv/x"\n'), "`deploy_dir` differs from R1's"),
    (_with_xen(r2=XEN_R2 + 'bridges = { L = "b0", R = "b1" }\n'), "`bridges` differs from R1's"),
    (_with_xen(r2=XEN_R2 + "colour = 1\n"), "unknown key 'colour'"),
    (_with_xen(r2=XEN_R2.replace("198.19.254.2/30", "10.1.1.2/30")), "outside the testbed ranges"),
]


@pytest.mark.parametrize(("text", "fragment"), BAD)
def test_bad_xen_table_is_one_line(tmp_path, text, fragment):
    p = tmp_path / "lab.toml"
    p.write_text(text)
    with pytest.raises(inv.InventoryError) as err:
        inv.load(p)
    assert "\n" not in str(err.value) and fragment in str(err.value), str(err.value)


def test_lab_up_inventory_with_xen_hosts_loads(tmp_path):
    mgmt = {r: f"198.19.128.{2 + 4 * i}" for i, r in enumerate(lab.MGMT_ROLES)}
    xen = {
        r: {
            "host": mgmt[r],
            "port": "2222",
            "mig_if": "ethM",
            "mig_ipv4": labxen.DOM0_MIG_ADDR[r],
            "tapL": "xtapL",
            "tapR": "xtapR",
        }
        for r in ("R1", "R2")
    }
    text = lab.render_inventory("x", "/var/lib/vrmig", tmp_path / "k", tmp_path / "kh", mgmt, xen=xen)
    p = tmp_path / "lab.toml"
    p.write_text(text)
    i = inv.load(p)
    assert i.host("R2").xen.ssh.port == 2222 and i.host("R2").xen.migration_ipv4 == "198.19.254.2/30"
    assert i.host("R1").xen.taps == labxen.TAPS
    # the sampler reads the Xen host's ports of dom0's NICs too, and hosts-check expects them on brL/brR
    from migrate.labs.check import _iface_expectations

    assert i.host("R1").interfaces() == ["tapL", "tapR", "upL", "upR", "mig0", "xtapL", "xtapR"]
    assert ("xtapR", "xen.taps.R", False, "brR") in _iface_expectations(i.host("R1"))
    assert "[hosts.R1.xen]" not in lab.render_inventory("x", "/var/lib/vrmig", tmp_path / "k", tmp_path / "kh", mgmt)


def test_dom0_overlay_and_management_network():
    blob = labxen.dom0_overlay("R1", b"KEY", "ssh-ed25519 AAAA lab\n")
    assert blob.startswith(b"070701") and b"etc/ssh/ssh_host_ed25519_key" in blob and b"KEY" in blob
    assert b"ListenAddress 198.19.253.15" in blob and b"ssh-ed25519 AAAA lab" in blob
    net = labxen.mgmt_netdev("198.19.128.18")
    assert "restrict=on" in net and "hostfwd=tcp:198.19.128.18:2222-198.19.253.15:22" in net


def test_domu_config_on_a_real_xen_host():
    dp = DomuPaths.under("/var/lib/vrmig", "frr", {"L": "br-a", "R": "br-b"})
    assert dp.kernel == "/var/lib/vrmig/xen/frr/vmlinuz" and dp.cfg == "/var/lib/vrmig/xen/vrmig-router.cfg"
    cfg = domu_config(dp.kernel, dp.initrd, "x", mem_mib=128, bridges=dp.bridges, vif_script=dp.vif_script)
    assert "bridge=br-a,script=/var/lib/vrmig/xen/vrmig-vif" in cfg and "bridge=br-b," in cfg
    assert "bridge=xenbrL,script=/usr/sbin/vrmig-vif" in domu_config("k", "i", "x", mem_mib=128)


def _guarded(tmp_path: Path, *argv: str) -> tuple[subprocess.Popen[bytes], Path]:
    pidfile = tmp_path / "guard" / "vm000000-t-1.pid"
    p = subprocess.Popen(
        ["sh", "-c", GUARD_SH, "sh", str(pidfile), *argv], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    deadline = time.monotonic() + 10
    while not (pidfile.exists() and len(pidfile.read_text().split()) == 2):
        assert time.monotonic() < deadline, "the guard wrote no pid file"
        time.sleep(0.01)
    return p, pidfile


def _session_left(sid: int, grace_s: float = 2.0) -> list[str]:
    """Live processes still in session ``sid`` (a guarded command's own, made by setsid) after
    at most ``grace_s``; zombies awaiting their new parent's wait do not count."""
    deadline = time.monotonic() + grace_s
    while True:
        out = subprocess.run(["ps", "-o", "pid=,stat=,args=", "-s", str(sid)], capture_output=True, text=True).stdout
        left = [ln.strip() for ln in out.splitlines() if ln.strip() and not ln.split()[1].startswith("Z")]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)


def _pid_of(pidfile: Path) -> int:
    """The PID a guard recorded (waits for its pid file: the command may speak first)."""
    deadline = time.monotonic() + 10
    while not (pidfile.exists() and len(pidfile.read_text().split()) == 2):
        assert time.monotonic() < deadline, "the guard wrote no pid file"
        time.sleep(0.01)
    return int(pidfile.read_text().split()[0])


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


def test_guard_stops_the_command_group_when_its_channel_closes(tmp_path):
    # sh -c 'sleep 300 & sleep 300; ...': a command with a child of its own, like socat's EXEC
    p, pidfile = _guarded(tmp_path, "sh", "-c", "sleep 300 & sleep 300")
    pid = int(pidfile.read_text().split()[0])
    assert os.getpgid(pid) == pid  # its own group (setsid)
    time.sleep(0.2)
    group = [int(x) for x in subprocess.run(["pgrep", "-g", str(pid)], capture_output=True, text=True).stdout.split()]
    assert len(group) >= 2
    p.stdin.close()  # the SSH channel closes
    assert p.wait(10) != 0
    deadline = time.monotonic() + 5
    while any(_alive(g) for g in group) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not any(_alive(g) for g in group) and not pidfile.exists()


def test_guard_survives_sshds_hangup_and_still_cleans_up(tmp_path):
    # sshd hangs the session's process up when the connection drops, then the channel closes
    p, pidfile = _guarded(tmp_path, "sleep", "300")
    pid = int(pidfile.read_text().split()[0])
    p.send_signal(signal.SIGHUP)
    p.stdin.close()
    p.wait(10)
    deadline = time.monotonic() + 5
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not _alive(pid) and not pidfile.exists()


def test_guard_cleans_up_when_its_channel_is_gone_for_writing_too(tmp_path):
    # the channel closed: its stdout/stderr read ends are gone before stdin's end of file
    pidfile = tmp_path / "guard" / "vm000000-t-1.pid"
    r, w = os.pipe()
    p = subprocess.Popen(["sh", "-c", GUARD_SH, "sh", str(pidfile), "sleep", "300"], stdin=subprocess.PIPE,
                         stdout=w, stderr=w)  # fmt: skip
    os.close(w)
    deadline = time.monotonic() + 10
    while not (pidfile.exists() and len(pidfile.read_text().split()) == 2):
        assert time.monotonic() < deadline
        time.sleep(0.01)
    pid = int(pidfile.read_text().split()[0])
    os.close(r)
    p.stdin.close()
    p.wait(10)
    assert not _alive(pid) and not pidfile.exists(), p.returncode


def test_guard_passes_the_exit_status_and_output(tmp_path):
    p, pidfile = _guarded(tmp_path, "sh", "-c", "echo out; sleep 0.3; exit 7")
    out = p.stdout.read()  # the channel stays open: the command ends by itself
    assert p.wait(10) == 7 and out == b"out\n" and not pidfile.exists()
    p.stdin.close()


def test_guard_clean_stops_recorded_groups_and_spares_reused_pids(tmp_path):
    p, pidfile = _guarded(tmp_path, "sleep", "300")
    pid = int(pidfile.read_text().split()[0])
    stale = tmp_path / "guard" / "vm000001-x-1.pid"
    stale.write_text(f"{os.getpid()} 1\n")  # a live PID whose start time is not the recorded one
    out = subprocess.run(["sh", "-c", GUARD_CLEAN_SH, "sh", str(tmp_path / "guard")], capture_output=True, text=True)
    assert f"stopped pid {pid}" in out.stdout and str(os.getpid()) not in out.stdout
    p.wait(10)
    assert not _alive(pid) and not stale.exists()
    p.stdin.close()


def test_calibrate_on_a_labs_xen_hosts_needs_their_taps_to_cut(tmp_path):
    from migrate.core.errors import ConfigError
    from migrate.experiment.calibrate import CalibrationSpec, place_checks

    p = tmp_path / "lab.toml"
    p.write_text(_with_xen())
    with pytest.raises(ConfigError, match="KIND=cut on a Xen host needs `taps`"):
        place_checks(CalibrationSpec(hv="xen"), p)


DOM0_OK = """kernel 6.1.0-56-amd64
xen 4.17.7
if ethM up
if xenbrL unknown
if xenbrR unknown
addr 198.19.254.1/30
"""


@pytest.mark.parametrize(
    ("edit", "fragment"),
    [
        (lambda t: t, None),
        (lambda t: t + "missing socat\n", "socat missing in dom0"),
        (lambda t: t.replace("xen 4.17.7", "xen "), "no Xen version"),
        (lambda t: t.replace("if xenbrR unknown", "noif xenbrR"), "interface xenbrR missing in dom0"),
        (lambda t: t.replace("if ethM up", "if ethM down"), "interface ethM is down"),
        (lambda t: t.replace("addr 198.19.254.1/30", "addr 198.19.254.5/30"), "ethM lacks 198.19.254.1/30"),
        (lambda t: t + "noguestlog\n", "does not log guest consoles"),
        (lambda t: t + "domain vrmig-router--incoming\n", "domain vrmig-router--incoming is there"),
    ],
)
def test_hosts_check_row_of_a_dom0(tmp_path, edit, fragment):
    from migrate.labs.check import ERROR, WARNING, evaluate_dom0

    p = tmp_path / "lab.toml"
    p.write_text(_with_xen())
    x = inv.load(p).host("R1").xen
    row, problems = evaluate_dom0("R1", x, "198.19.128.18:2222", edit(DOM0_OK))
    assert row.role == "R1.xen" and row.reachable == "yes"
    if fragment is None:
        assert problems == [] and row.versions == {"xen": "4.17.7"} and row.interfaces_ok and row.addresses_ok
    else:
        # a leftover domain only stops HV=xen (its driver refuses): a warning, not an error for every run
        severity = WARNING if "is there" in fragment else ERROR
        assert len(problems) == 1 and problems[0].severity == severity and fragment in problems[0].message, problems


def _stand_in_xl(tmp_path: Path, body: str = "") -> tuple[Path, dict[str, str]]:
    """A stand-in ``xl`` on PATH (synthetic: this machine has no Xen) that appends its argv to
    ``xl.log`` and then runs ``body``; returns (that log, the environment that finds it)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "xl.log"
    (bin_dir / "xl").write_text(f'#!/bin/sh\necho "$*" >> {log}\n{body}')
    (bin_dir / "xl").chmod(0o755)
    return log, {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}


def _other_xl(tmp_path: Path, body: str) -> Path:
    """Another process named xl (a script's comm is its file's name) running ``body``."""
    other = tmp_path / "other"
    other.mkdir()
    (other / "xl").write_text(f"#!/bin/sh\n{body}\n")
    (other / "xl").chmod(0o755)
    return other / "xl"


def _guarded_reaper(
    tmp_path: Path, env: dict[str, str], shell: tuple[str, ...] = ("sh",), n: int = 1, out: int = subprocess.PIPE
) -> tuple[subprocess.Popen[bytes], Path]:
    """The domain reaper under its guard, as the driver starts it (``out``: its stdout and
    stderr, a pipe by default); returns (the guard's process, its pid file)."""
    from migrate.drivers.xen.dom0 import REAPER_SH

    pidfile = tmp_path / "guard" / f"vm000000-reap-{n}.pid"
    argv = [*shell, "-c", GUARD_SH, "sh", str(pidfile), *shell, "-c", REAPER_SH, "sh", "vrmig-router"]
    err = out if out != subprocess.PIPE else None
    return subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=out, stderr=err, env=env), pidfile


def test_reaper_destroys_the_routers_domains_when_its_channel_closes(tmp_path):
    # the stand-in xl records what it is asked
    state = tmp_path / "domains"
    state.write_text("vrmig-router\nvrmig-router--incoming\nother\n")
    log, env = _stand_in_xl(
        tmp_path,
        f'if [ "$1" = list ]; then echo "Name ID"; echo "Domain-0 0"; sed "s/$/ 1/" {state}; fi\n'
        f'if [ "$1" = destroy ]; then grep -vx "$2" {state} > {state}.new; mv {state}.new {state}; fi\n',
    )
    p, pidfile = _guarded_reaper(tmp_path, env)
    assert p.stdout.readline() == b"REAPER-READY\n"
    assert not log.exists()  # nothing destroyed while the channel is open
    sid = _pid_of(pidfile)
    p.stdin.close()
    out = p.stdout.read().decode()
    p.wait(10)
    calls = log.read_text().splitlines()
    assert calls == ["list", "destroy vrmig-router", "destroy vrmig-router--incoming", "list"], calls
    assert state.read_text() == "other\n"
    assert out == "" and not pidfile.exists()  # reaping writes nothing to the closed channel
    assert _session_left(sid) == []  # its idle sleep is gone too


def test_reaper_waits_for_a_dying_xl_before_it_looks(tmp_path):
    # an "xl migrate-receive" still running when the channel closes (a process named xl): the
    # reaper looks only once it is gone, so the --incoming domain it may still create is seen
    log, env = _stand_in_xl(tmp_path)
    receiving = subprocess.Popen([str(_other_xl(tmp_path, "sleep 1.5")), "-vvv", "migrate-receive"])
    p, pidfile = _guarded_reaper(tmp_path, env)
    assert p.stdout.readline() == b"REAPER-READY\n"
    sid = _pid_of(pidfile)
    p.stdin.close()
    time.sleep(0.5)  # the reaper is waiting; nothing may have asked xl yet
    assert receiving.poll() is None and not log.exists()
    receiving.wait(10)
    p.wait(20)
    assert log.read_text().splitlines() == ["list"] and not pidfile.exists()
    assert _session_left(sid) == []


def test_reaper_does_not_wait_for_the_xl_that_watches_a_created_domain(tmp_path):
    # "xl create" leaves an xl process that watches the domain as long as it lives: it is no
    # migration ending, so the reaper must not wait for it (it waited the whole 30 s, and about
    # 90 s in a TCG dom0, so a SIGKILLed run's domain outlived the checks that followed)
    log, env = _stand_in_xl(tmp_path)
    xl = _other_xl(tmp_path, "sleep 60")  # no exec: its comm stays xl
    watcher = subprocess.Popen([str(xl), "create", "/var/lib/vrmig/xen/vrmig-router.cfg"], start_new_session=True)
    try:
        p, pidfile = _guarded_reaper(tmp_path, env)
        assert p.stdout.readline() == b"REAPER-READY\n"
        sid = _pid_of(pidfile)
        p.stdin.close()
        p.wait(10)
        assert log.read_text().splitlines() == ["list"] and not pidfile.exists()
        assert _session_left(sid) == []
        assert watcher.poll() is None  # the watcher is not the reaper's to stop
    finally:
        os.killpg(watcher.pid, signal.SIGKILL)
        watcher.wait()


@pytest.mark.parametrize("shell", [["sh"], ["busybox", "sh"]], ids=["sh", "busybox-sh"])
def test_reaper_reaps_when_its_channel_is_gone_for_writing_too(tmp_path, shell):
    # the orchestrator's death closes the channel's stdout/stderr before stdin reaches end of
    # file; the group's TERM also kills the reaper's idle sleep, and busybox ash (a dom0's sh)
    # reports that job ("Terminated") on stderr: on the closed channel that write was a SIGPIPE
    # that killed the reaper before it reaped, now and then (a SIGKILLed run left its domain)
    state = tmp_path / "domains"
    log, env = _stand_in_xl(
        tmp_path,
        f'if [ "$1" = list ]; then echo "Name ID"; sed "s/$/ 1/" {state}; fi\n'
        f'if [ "$1" = destroy ]; then : > {state}; fi\n',
    )
    for n in range(8):
        log.unlink(missing_ok=True)
        state.write_text("vrmig-router\n")
        r, w = os.pipe()
        p, pidfile = _guarded_reaper(tmp_path, env, tuple(shell), n, w)
        os.close(w)
        with os.fdopen(r, "rb") as out:
            assert out.readline() == b"REAPER-READY\n"
            sid = _pid_of(pidfile)
        p.stdin.close()  # the read end is closed first, as when the channel is gone
        p.wait(20)
        assert log.exists() and "destroy vrmig-router" in log.read_text().splitlines(), f"try {n}: nothing reaped"
        assert not pidfile.exists()
        assert _session_left(sid) == []
