"""The emulated lab for real: ``lab-up`` builds Fig. 1 with an sshd per host and a libvirtd on R1
and R2, every check goes over SSH with the lab's key and known_hosts (libvirt's through its
qemu+ssh URIs, the daemons' peer connection over the migration link), and ``lab-down`` leaves
nothing behind (also after a failure half-way and after Ctrl-C during lab-up).

Heavy (builds a testbed): run under ``flock /tmp/vrmig-heavy.lock``."""

from __future__ import annotations

import json
import os
import secrets
import shlex
import signal
import subprocess
import sys
import time
import tomllib
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from migrate.campaigns.chaos import Artefacts
from migrate.core import registry
from migrate.labs import emulated as lab
from migrate.testbed import inventory
from tests.integration.conftest import REPO, require_root_and

pytestmark = pytest.mark.integration
CLI = [sys.executable, "-m", "migrate"]
ENV = {**os.environ, "PYTHONPATH": str(REPO)}


def _require() -> None:
    require_root_and("ip", "ssh", "ssh-keygen", "unshare", "nsenter", "virsh")
    if not os.access(lab.SSHD, os.X_OK):
        pytest.fail(f"{lab.SSHD} not installed: run `make apt` (openssh-server)", pytrace=False)
    for exe in (lab.LIBVIRTD, lab.VIRT_SSH_HELPER):
        if not os.access(exe, os.X_OK):
            pytest.fail(f"{exe} not installed: run `make apt` (libvirt-daemon)", pytrace=False)


def _cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, env=ENV, timeout=timeout, check=False)


def _names() -> set[str]:
    """Namespaces and links of the orchestrator's namespace, by name."""
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True).stdout
    return {f"netns {n}" for n in os.listdir("/run/netns")} | {
        f"link {ln.split(':')[1].strip().split('@')[0]}" for ln in links.splitlines()
    }


def _leftovers(prefix: str, lab_dir: Path, sshd: list[dict]) -> list[str]:
    """Whatever of the lab still exists: namespaces, links, sshd processes, the lab directory."""
    out = [f"netns {n}" for n in os.listdir("/run/netns") if n.startswith(f"{prefix}-")]
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True).stdout
    out += [f"link {ln.split(':')[1].strip()}" for ln in links.splitlines() if f" {prefix}-" in ln]
    out += [f"pid {p['pid']}" for p in sshd if registry.pid_alive(p["pid"], p["starttime"])]
    out += [f"dir {lab_dir}"] if lab_dir.exists() else []
    return out


class Ssh:
    """ssh to the lab's hosts exactly as an inventory describes them (no prompts, strict keys)."""

    def __init__(self, inv: dict) -> None:
        self.key, self.kh = Path(inv["ssh"]["key"]), Path(inv["ssh"]["known_hosts"])
        self.hosts = {r: h["ssh"]["host"] for r, h in inv["hosts"].items()}

    def run(self, role: str, cmd: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
        argv = lab.ssh_argv(self.key, self.kh, self.hosts[role])
        return subprocess.run([*argv, cmd], input=input, capture_output=True, text=True, timeout=30, check=False)

    def out(self, role: str, cmd: str) -> str:
        res = self.run(role, cmd)
        assert res.returncode == 0, f"{role}: {cmd}: {res.stderr}"
        return res.stdout


def test_lab_up_ssh_isolation_and_lab_down():
    _require()
    name = "it" + secrets.token_hex(3)
    before = Artefacts.now()
    deploy_existed = Path(lab.DEFAULT_DEPLOY_DIR).exists()
    t0 = time.monotonic()
    up = _cli("lab-up", "--name", name)
    up_s = time.monotonic() - t0
    assert up.returncode == 0, up.stderr
    inv_path = Path(up.stdout.strip().splitlines()[-1])  # the last line is the inventory
    lab_dir = inv_path.parent
    state = json.loads((lab_dir / "state.json").read_text())
    prefix, sshd = state["prefix"], [p for p in state["processes"] if p["what"].startswith("sshd")]
    try:
        assert inv_path == lab.LAB_ROOT / name / "lab.toml"
        assert (lab_dir.stat().st_mode & 0o777) == 0o700
        raw = tomllib.loads(inv_path.read_text())
        inv = inventory.load(inv_path)
        assert len(sshd) == 6 and all(registry.pid_alive(p["pid"], p["starttime"]) for p in sshd)
        ssh = Ssh(raw)
        deploy = raw["deploy_dir"]
        # every host: its data address on its interface (end hosts) / its Fig. 1 links (R1, R2)
        for role, h in inv.hosts.items():
            if role in inventory.END_ROLES:
                addrs = ssh.out(role, f"ip -o addr show dev {h.interface}")
                assert f" {h.ipv4} " in addrs and f" {h.ipv6} " in addrs, (role, addrs)
                route = ssh.out(role, "ip route get 198.18.2.11" if h.segment == "L" else "ip route get 198.18.1.11")
                assert f"dev {h.interface} " in route and "mgmt0" not in route, (role, route)
            else:
                addrs = ssh.out(role, f"ip -o addr show dev {h.migration_if}")
                assert f" {h.migration_ipv4} " in addrs, (role, addrs)
                links = ssh.out(role, "ip -o link")
                for ifname in (*h.uplinks.values(), *h.bridges.values(), *h.taps.values()):
                    assert f" {ifname}:" in links or f" {ifname}@" in links, (role, ifname)
        # the deploy directory is each host's own: a file written on A is seen only on A
        token = secrets.token_hex(8)
        ssh.out("A", f"echo {token} > {deploy}/lab-test && sync")
        assert ssh.out("A", f"cat {deploy}/lab-test").strip() == token
        assert not Path(deploy, "lab-test").exists()  # not on the orchestrator
        for other in ("B", "C", "R1"):
            assert ssh.run(other, f"test -e {deploy}/lab-test").returncode == 1, other
        # from A, over SSH, nothing else: no other host's management address is reachable
        for other in ("B", "C", "R1"):
            res = ssh.run("A", f"ping -c 1 -W 1 {ssh.hosts[other]}")
            assert res.returncode != 0, f"A reaches {other}'s management address"
        # a remote process that outlives its ssh client (lab-down must still remove it)
        stray = int(ssh.out("A", "setsid sleep 600 </dev/null >/dev/null 2>&1 & echo $!").strip())
        stray_st = registry.proc_starttime(stray)
        assert registry.pid_alive(stray, stray_st)
        # the lab is not a run: no run state names it, run leak checks see none of it
        runs = [p.name for p in registry.STATE_ROOT.iterdir()] if registry.STATE_ROOT.is_dir() else []
        assert prefix not in runs and name not in runs
        new = Artefacts.now().new_since(before, set())
        assert not [x for x in new if prefix in x or name in x or str(lab_dir) in x], new
        assert not set(registry.processes_of()) & {p["pid"] for p in sshd}
        assert registry.clean_stale(only={prefix, name}) == []
        assert all(registry.pid_alive(p["pid"], p["starttime"]) for p in sshd)
    finally:
        t0 = time.monotonic()
        down = _cli("lab-down", str(inv_path))
        down_s = time.monotonic() - t0
    assert down.returncode == 0, down.stdout + down.stderr
    assert _leftovers(prefix, lab_dir, state["processes"]) == []
    assert not registry.pid_alive(stray, stray_st)
    assert Path(lab.DEFAULT_DEPLOY_DIR).exists() == deploy_existed or any(
        s.deploy_dir == lab.DEFAULT_DEPLOY_DIR for s in lab.all_labs()
    )
    again = _cli("lab-down", str(inv_path))
    assert again.returncode == 0 and "nothing to remove" in again.stdout
    print(f"lab-up {up_s:.2f} s, lab-down {down_s:.2f} s")


def _host_uuid(capabilities_xml: str) -> str:
    uuid = ET.fromstring(capabilities_xml).findtext("./host/uuid")
    assert uuid, capabilities_xml[:200]
    return uuid


def _mnt_ns(pid: int) -> int:
    return os.stat(f"/proc/{pid}/ns/mnt").st_ino


def test_lab_libvirtds_over_qemu_ssh_and_the_migration_link(tmp_path):
    """R1's and R2's libvirtds: reached from here only through their qemu+ssh URIs (host keys
    checked against the lab's known_hosts), from each other over the migration link, inside their
    host's mount namespace (they see its deploy-dir tmpfs), gone after lab-down."""
    _require()
    name = "it" + secrets.token_hex(3)
    machine_sock = Path("/run/libvirt/libvirt-sock").exists()
    up = _cli("lab-up", "--name", name)
    assert up.returncode == 0, up.stderr
    inv_path = Path(up.stdout.strip().splitlines()[-1])
    lab_dir = inv_path.parent
    state = json.loads((lab_dir / "state.json").read_text())
    procs = {p["what"]: p for p in state["processes"]}
    try:
        raw = tomllib.loads(inv_path.read_text())
        inv = inventory.load(inv_path)
        ssh = Ssh(raw)
        uri = {r: inv.hosts[r].libvirt_uri for r in ("R1", "R2")}
        peer = {r: inv.hosts[r].libvirt_peer_uri for r in ("R1", "R2")}
        assert all(u and u.startswith(f"qemu+ssh://root@{ssh.hosts[r]}/system?") for r, u in uri.items()), uri
        assert peer == {
            r: f"qemu+tls://198.19.255.{i}/system?pkipath=/etc/libvirt/pki" for i, r in ((1, "R1"), (2, "R2"))
        }
        for r in ("R1", "R2"):
            assert registry.pid_alive(procs[f"libvirtd of {r}"]["pid"], procs[f"libvirtd of {r}"]["starttime"])
        # the orchestrator: virsh through qemu+ssh (virt-ssh-helper on the host; no nc there)
        uuids = {}
        for r in ("R1", "R2"):
            t0 = time.monotonic()
            v = lab.virsh(uri[r], "version")
            dt = time.monotonic() - t0
            assert v.returncode == 0 and "Running hypervisor: QEMU" in v.stdout, (r, v.stderr)
            print(f"virsh version over qemu+ssh to {r}: {dt * 1000:.0f} ms")
            assert lab.virsh(uri[r], "uri").stdout.strip() == uri[r]
            uuids[r] = _host_uuid(lab.virsh(uri[r], "capabilities").stdout)
        assert uuids["R1"] != uuids["R2"]
        assert ssh.run("R1", "command -v nc").returncode != 0  # so the transport used virt-ssh-helper
        # the daemons' own socket is the default path inside the host, not the machine's
        for r in ("R1", "R2"):
            assert ssh.run(r, "test -S /run/libvirt/libvirt-sock").returncode == 0, r
        assert Path("/run/libvirt/libvirt-sock").exists() == machine_sock
        # peer to peer over the migration link, TLS: R1's virsh reaches R2's daemon and back with
        # its host's client certificate; nothing listens on libvirt's plain TCP port
        for src, dst in (("R1", "R2"), ("R2", "R1")):
            assert peer[dst].startswith("qemu+tls://"), peer[dst]
            caps = ssh.out(src, f"virsh -q -c {shlex.quote(peer[dst])} capabilities")
            assert _host_uuid(caps) == uuids[dst], (src, dst)
            listen = ssh.out(dst, "ss -Hltn").split()
            addr = peer[dst].split("/")[2]
            assert f"{addr}:16514" in listen and not [a for a in listen if a.endswith(":16509")], listen
        # a client whose certificate another CA signed is refused by the daemon
        from migrate.testbed import pki

        alien = tmp_path / "alien-pki"
        pki.write_host(alien, pki.new_authority("alien"), "R1", "198.19.255.1")
        ssh.out("R1", f"mkdir -p {raw['deploy_dir']}/alien-pki")
        for name in ("clientcert.pem", "clientkey.pem"):
            ssh.run("R1", f"cat > {raw['deploy_dir']}/alien-pki/{name}", input=(alien / name).read_text())
        # the client trusts both CAs (its own certificate passes libvirt's check of it, R2's server
        # is trusted): only R2's daemon, which trusts the lab's CA alone, can refuse the connection
        both = ssh.out("R1", "cat /etc/libvirt/pki/cacert.pem") + (alien / "cacert.pem").read_text()
        ssh.run("R1", f"cat > {raw['deploy_dir']}/alien-pki/cacert.pem", input=both)
        alien_uri = peer["R2"].replace("pkipath=/etc/libvirt/pki", f"pkipath={raw['deploy_dir']}/alien-pki")
        refused = ssh.run("R1", f"virsh -q -c {shlex.quote(alien_uri)} version")
        assert refused.returncode != 0, refused
        r2_log = (lab_dir / "hosts" / "R2" / "libvirtd.log").read_text(errors="replace")
        assert "authentication failed: Failed to verify peer's certificate" in r2_log, r2_log[-1500:]
        # host keys are checked: the same wrapper with a known_hosts naming another key for R1 fails
        bad = tmp_path / "bad"
        bad.mkdir()
        (bad / lab.LIBVIRT_SSH).write_text((lab_dir / lab.LIBVIRT_SSH).read_text())
        (bad / lab.LIBVIRT_SSH).chmod(0o700)
        other_key = (lab_dir / "hosts" / "R2" / "ssh_host_ed25519_key.pub").read_text().split()[:2]
        (bad / "known_hosts").write_text(f"{ssh.hosts['R1']} {' '.join(other_key)}\n")
        res = lab.virsh(uri["R1"].replace(str(lab_dir / lab.LIBVIRT_SSH), str(bad / lab.LIBVIRT_SSH)), "version")
        assert res.returncode != 0 and "Host key verification failed" in res.stderr, res.stderr
        # the daemon lives in its host's mount namespace: it sees what SSH wrote into R1's tmpfs
        assert _mnt_ns(procs["libvirtd of R1"]["pid"]) == _mnt_ns(procs["sshd of R1"]["pid"])
        assert _mnt_ns(procs["libvirtd of R1"]["pid"]) != _mnt_ns(procs["libvirtd of R2"]["pid"])
        token = "lvt-" + secrets.token_hex(4)
        ssh.out("R1", f"echo x > {raw['deploy_dir']}/{token}")
        seen = {}
        for r in ("R1", "R2"):
            pool = f"vrmigchk{secrets.token_hex(2)}"
            ok = lab.virsh(uri[r], "pool-create-as", pool, "dir", "--target", raw["deploy_dir"])
            assert ok.returncode == 0, ok.stderr
            try:
                seen[r] = lab.virsh(uri[r], "vol-list", pool).stdout
            finally:
                lab.virsh(uri[r], "pool-destroy", pool)
        assert f"{raw['deploy_dir']}/{token}" in seen["R1"] and token not in seen["R2"], seen
    finally:
        down = _cli("lab-down", str(inv_path))
    assert down.returncode == 0, down.stdout + down.stderr
    assert _leftovers(state["prefix"], lab_dir, state["processes"]) == []
    assert not [p for p in procs.values() if registry.pid_alive(p["pid"], p["starttime"])]


def _new_lab_state(name: str) -> dict | None:
    try:
        return json.loads((lab.LAB_ROOT / name / "state.json").read_text())
    except (OSError, ValueError):
        return None


def test_failure_half_way_leaves_nothing(tmp_path):
    """sshd cannot mount its tmpfs on a file: lab-up fails with one line and removes the lab."""
    _require()
    name = "it" + secrets.token_hex(3)
    blocker = tmp_path / "deploy"
    blocker.write_text("a file, not a directory\n")
    before = _names()
    res = _cli("lab-up", "--name", name, "--deploy-dir", str(blocker))
    assert res.returncode == 1, res.stdout + res.stderr
    err = [ln for ln in res.stderr.splitlines() if ln.startswith("vrmig: error:")]
    assert len(err) == 1 and "sshd of lab host" in err[0], res.stderr
    assert res.stdout.strip() == ""
    assert not (lab.LAB_ROOT / name).exists()
    assert {n for n in _names() - before if n.split()[1].startswith("vl")} == set()


@pytest.mark.parametrize("what", ["sshd", "libvirtd"])
def test_ctrl_c_during_lab_up_leaves_nothing(what):
    """SIGINT once the sshds / the libvirtds are starting: lab-up exits 130 and removes all it
    made."""
    _require()
    name = "it" + secrets.token_hex(3)
    # lab-up as started from a terminal: a test run started in the background by a shell without
    # job control has SIGINT ignored, and a child would inherit that (and never see the SIGINT)
    p = subprocess.Popen(
        [*CLI, "lab-up", "--name", name], env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    state = None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and p.poll() is None:
        state = _new_lab_state(name)
        if state and any(x["what"].startswith(what) for x in state["processes"]):
            break
        time.sleep(0.005)
    assert state and any(x["what"].startswith(what) for x in state["processes"]), f"lab-up started no {what}"
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 130, (out, err)
    assert _leftovers(state["prefix"], lab.LAB_ROOT / name, state["processes"]) == []


def test_two_labs_at_once():
    """A second lab gets its own management /24; removing the first leaves the second whole
    (its hosts keep their deploy dir, which the first lab made)."""
    _require()
    deploy_existed = Path(lab.DEFAULT_DEPLOY_DIR).exists()
    invs: list[Path] = []
    try:
        for _ in range(2):
            res = _cli("lab-up", "--name", "it" + secrets.token_hex(3))
            assert res.returncode == 0, res.stderr
            invs.append(Path(res.stdout.strip().splitlines()[-1]))
        raws = [tomllib.loads(p.read_text()) for p in invs]
        nets = {r["hosts"]["A"]["ssh"]["host"].rsplit(".", 1)[0] for r in raws}
        assert len(nets) == 2, nets
        assert _cli("lab-down", str(invs[0])).returncode == 0
        ssh = Ssh(raws[1])
        for role in ssh.hosts:
            assert ssh.out(role, f"findmnt -n -o FSTYPE {raws[1]['deploy_dir']}").strip() == "tmpfs", role
            ssh.out(role, f"touch {raws[1]['deploy_dir']}/still-here")
    finally:
        downs = [_cli("lab-down", str(p)) for p in invs]
    assert all(d.returncode == 0 for d in downs), [d.stdout + d.stderr for d in downs]
    assert Path(lab.DEFAULT_DEPLOY_DIR).exists() == deploy_existed
