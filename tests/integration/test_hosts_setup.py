"""``make hosts-setup`` on a lab reached over SSH: every role is a network namespace with its own
sshd and a private tmpfs at the lab's deploy_dir (a host of its own as far as files go).  The lab
is the session's emulated lab (``python -m migrate lab-up``, docs/testbed.md "The emulated lab"),
shared with the lab migration tests (tests/integration/conftest.py), whose first hosts-setup is
judged here; the emulated lab of the tree named by ``VRMIG_LAB_TREE``; otherwise a minimal lab of sshd
namespaces this module builds itself (:class:`SshLab`).

The first run changes the hosts; on the emulated lab a run after R2's libvirt settings were
made a clone's puts back only those; the last run changes nothing on any host.  Then, over SSH,
the helpers built on A and B answer ``--help`` and R1's and R2's guest image files have the
SHA-256 of the local ones; a host offered a wrong key is named on one line and the exit is 2."""

from __future__ import annotations

import hashlib
import ipaddress
import os
import secrets
import shlex
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from tests import nswatch
from tests.integration.conftest import REPO, missing_from_setup, require_root_and

ROLES = ("A", "C", "B", "D", "R1", "R2")
END = {"A": ("L", "198.18.1.10"), "C": ("L", "198.18.1.11"), "B": ("R", "198.18.2.10"), "D": ("R", "198.18.2.11")}
#: candidate management networks (one /29 per role out of a /24), the first one unused here wins
MGMT_NETS = [ipaddress.ip_network(f"198.19.{n}.0/24") for n in range(200, 240)]
READY_TIMEOUT_S = 10.0


def _run(*argv: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), check=True, capture_output=True, text=True, **kw)


def _free_net() -> ipaddress.IPv4Network:
    used = _run("ip", "-4", "-o", "addr", "show").stdout
    for net in MGMT_NETS:
        if f" {net.network_address.exploded.rsplit('.', 1)[0]}." not in used:
            return net
    pytest.skip("no free management /24 in 198.19.200-239.0 on this machine")


class Lab:
    """What the tests need of a lab: its inventory, its deploy_dir, SSH to a role."""

    inventory: Path
    deploy_dir: Path
    work: Path

    def first_setup(self, results: Path) -> tuple[subprocess.CompletedProcess, float]:
        """The first hosts-setup of this lab: run now (the shared lab's has run already)."""
        return _hosts_setup(self.inventory, results)

    def ssh(self, role: str, *argv: str) -> subprocess.CompletedProcess:
        """Run ``argv`` on ``role`` over SSH with the inventory's key and known hosts."""
        from migrate.testbed.inventory import load

        t = load(self.inventory).hosts[role].ssh
        assert t is not None
        cmd = ["ssh", "-i", str(t.key), "-p", str(t.port), "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes"]
        cmd += ["-o", "StrictHostKeyChecking=yes", "-o", f"UserKnownHostsFile={t.known_hosts}"]
        cmd += [f"{t.user}@{t.host}", "--", *argv]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=False)

    def wrong_key_inventory(self, role: str) -> Path:
        """A copy of the inventory whose ``role`` offers a key its host does not know."""
        from migrate.testbed.inventory import load

        key = self.work / "wrong_key"
        if not key.exists():
            _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key))
        t = load(self.inventory).hosts[role].ssh
        assert t is not None
        text = self.inventory.read_text()
        line = f'ssh = {{ host = "{t.host}" }}'
        assert text.count(line) == 1, text
        path = self.work / "wrong-key.toml"
        path.write_text(text.replace(line, f'ssh = {{ host = "{t.host}", key = "{key}" }}'))
        return path


class SharedEmulatedLab(Lab):
    """The session's emulated lab (tests/integration/conftest.py :class:`SharedLab`): hosts-setup
    has run on it once already, under the namespace watch."""

    def __init__(self, work: Path, prepared: Any) -> None:
        from migrate.testbed.inventory import load

        self.work, self.prepared = work, prepared
        self.inventory = prepared.inventory
        self.deploy_dir = Path(load(self.inventory).deploy_dir)

    def first_setup(self, results: Path) -> tuple[subprocess.CompletedProcess, float]:
        assert self.prepared.nswatch_entries == [], f"hosts-setup entered a namespace: {self.prepared.nswatch_entries}"
        return self.prepared.setup, self.prepared.setup_s


class EmulatedLab(Lab):
    """``python -m migrate lab-up`` of ``tree`` (a lab of its own name), ``lab-down`` on exit."""

    def __init__(self, work: Path, tree: Path) -> None:
        self.work, self.tree = work, tree
        self.name = f"hs{os.getpid() % 100000:05d}"
        self.env = {**os.environ, "PYTHONPATH": str(tree)}

    def __enter__(self) -> EmulatedLab:
        cp = subprocess.run(
            [sys.executable, "-m", "migrate", "lab-up", "--name", self.name],
            cwd=self.tree, env=self.env, capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        last = cp.stdout.strip().splitlines()[-1] if cp.stdout.strip() else ""
        if cp.returncode != 0 or not last.endswith(".toml"):
            if last:
                self._down(Path(last))
            raise RuntimeError(f"lab-up failed ({cp.returncode}): {cp.stderr.strip()}")
        self.inventory = Path(last)
        from migrate.testbed.inventory import load

        self.deploy_dir = Path(load(self.inventory).deploy_dir)
        return self

    def _down(self, inventory: Path) -> None:
        cp = subprocess.run(
            [sys.executable, "-m", "migrate", "lab-down", str(inventory)],
            cwd=self.tree, env=self.env, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert cp.returncode == 0, cp.stdout + cp.stderr

    def __exit__(self, *exc: object) -> None:
        self._down(self.inventory)


class SshLab(Lab):
    """Six namespaces with an sshd each (reached from here through a veth), a private tmpfs at
    ``deploy_dir`` in each sshd's mount namespace, bridges brL/brR on R1 and R2; ``inventory``
    is the TOML inventory of it.  Everything is removed on exit (sshds by PID)."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.tag = f"hs{os.getpid() % 100000:05d}"
        self.deploy_dir = work / "deploy"
        self.stack = ExitStack()
        self.procs: dict[str, subprocess.Popen] = {}
        self.addr: dict[str, str] = {}

    def ns(self, role: str) -> str:
        return f"{self.tag}-{role}"

    def __enter__(self) -> SshLab:
        try:
            self._build()
        except BaseException:
            self.stack.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stack.close()

    def _build(self) -> None:
        w = self.work
        self.deploy_dir.mkdir()
        _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(w / "id_ed25519"))
        (w / "authorized_keys").write_text((w / "id_ed25519.pub").read_text())
        Path("/run/sshd").mkdir(exist_ok=True)
        net = _free_net()
        known = []
        for i, role in enumerate(ROLES):
            ns, veth = self.ns(role), f"{self.tag}{i}"
            base = net.network_address + 8 * i
            here, there = f"{base + 1}/29", f"{base + 2}"
            _run("ip", "netns", "add", ns)
            self.stack.callback(subprocess.run, ["ip", "netns", "del", ns], check=False)
            _run("ip", "link", "add", veth, "type", "veth", "peer", "name", "mgmt0", "netns", ns)
            self.stack.callback(subprocess.run, ["ip", "link", "del", veth], check=False, capture_output=True)
            _run("ip", "addr", "add", here, "dev", veth)
            _run("ip", "link", "set", veth, "up")
            _run("ip", "-n", ns, "addr", "add", f"{there}/29", "dev", "mgmt0")
            _run("ip", "-n", ns, "link", "set", "mgmt0", "up")
            _run("ip", "-n", ns, "link", "set", "lo", "up")
            if role.startswith("R"):
                for br in ("brL", "brR"):
                    _run("ip", "-n", ns, "link", "add", br, "type", "bridge")
                    _run("ip", "-n", ns, "link", "set", br, "up")
            hostkey = w / f"hostkey-{role}"
            _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(hostkey))
            known.append(f"{there} {' '.join((w / f'hostkey-{role}.pub').read_text().split()[:2])}")
            cfg = w / f"sshd-{role}.conf"
            cfg.write_text(
                f"ListenAddress {there}\nPort 22\nHostKey {hostkey}\nPidFile {w}/sshd-{role}.pid\n"
                f"AuthorizedKeysFile {w}/authorized_keys\nPermitRootLogin prohibit-password\n"
                "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\n"
                "MaxSessions 30\nMaxStartups 30\nSubsystem sftp internal-sftp\n"
            )
            script = 'mount -t tmpfs vrmig-lab "$1" && exec /usr/sbin/sshd -D -e -f "$2"'
            argv = ["ip", "netns", "exec", ns, "unshare", "-m", "--propagation", "private"]
            argv += ["sh", "-c", script, "sh", str(self.deploy_dir), str(cfg)]
            log = (w / f"sshd-{role}.log").open("w")
            self.stack.callback(log.close)
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
            self.procs[role] = proc
            self.stack.callback(_stop, proc)
            self.addr[role] = there
        (w / "known_hosts").write_text("\n".join(known) + "\n")
        for role in ROLES:
            self._wait_listening(role)
        self.inventory = self.write_inventory(w / "lab.toml")

    def _wait_listening(self, role: str) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.procs[role].poll() is not None:
                raise RuntimeError(f"sshd of {role} exited: {(self.work / f'sshd-{role}.log').read_text()}")
            out = _run("ss", "-N", self.ns(role), "-Hltn", f"src {self.addr[role]}").stdout
            if ":22 " in out:
                return
            time.sleep(0.02)  # polling the listening socket, not waiting for a guess
        raise RuntimeError(f"sshd of {role} not listening after {READY_TIMEOUT_S} s")

    def write_inventory(self, path: Path) -> Path:
        w = self.work
        lines = [
            "version = 1",
            'name = "hslab"',
            f'deploy_dir = "{self.deploy_dir}"',
            "[ssh]",
            'user = "root"',
            f'key = "{w / "id_ed25519"}"',
            f'known_hosts = "{w / "known_hosts"}"',
        ]
        for role in ROLES:
            lines.append(f"[hosts.{role}]")
            lines.append(f'ssh = {{ host = "{self.addr[role]}" }}')
            if role in END:
                seg, ip = END[role]
                lines += [f'segment = "{seg}"', 'interface = "eth0"', f'ipv4 = "{ip}/24"']
                lines.append(f'ipv6 = "2001:2:0:{1 if seg == "L" else 2}::{ip.rsplit(".", 1)[1]}/64"')
            else:
                mig = "198.19.255.1/30" if role == "R1" else "198.19.255.2/30"
                lines += [
                    'uplinks = { L = "upL", R = "upR" }',
                    'bridges = { L = "brL", R = "brR" }',
                    'taps = { L = "tapL", R = "tapR" }',
                    f'migration = {{ interface = "mig0", ipv4 = "{mig}" }}',
                ]
        path.write_text("\n".join(lines) + "\n")
        return path


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _hosts_setup(inventory: Path, results: Path) -> tuple[subprocess.CompletedProcess, float]:
    """``hosts-setup`` on ``inventory``, under the namespace watch (tests/nswatch.py): it reaches
    the hosts over SSH only, and any namespace entry of it or its Ansible fails the test."""
    log = results.parent / f"nswatch-{secrets.token_hex(3)}.log"
    env = nswatch.child_env(log, {**os.environ, "PYTHONPATH": str(REPO)})
    t0 = time.monotonic()
    cp = subprocess.run(
        [sys.executable, "-m", "migrate", "hosts-setup", "--testbed", str(inventory), "--results", str(results)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert nswatch.read_log(log) == [], f"hosts-setup entered a namespace: {nswatch.read_log(log)}"
    return cp, time.monotonic() - t0


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture(scope="module")
def lab(shared_lab):
    """This checkout's emulated lab is the session's shared one (its first hosts-setup already
    run: :meth:`Lab.first_setup`); another tree's (``VRMIG_LAB_TREE``) is a lab of its own, and a
    tree without the emulated lab gets :class:`SshLab`."""
    require_root_and("sshd", "ssh", "ssh-keygen", "ansible-playbook", "unshare")
    from routers.errors import NotBuiltError
    from routers.guest import guest_image

    try:
        guest_image("frr")
    except NotBuiltError as err:
        missing_from_setup(err)
    tree = Path(os.environ.get("VRMIG_LAB_TREE", REPO))
    with tempfile.TemporaryDirectory(prefix="vrmig-hs-") as work:
        if tree == REPO:
            yield SharedEmulatedLab(Path(work), shared_lab.get())
        elif (tree / "migrate" / "labs" / "emulated.py").is_file():
            with EmulatedLab(Path(work), tree) as lab:
                yield lab
        else:
            with SshLab(Path(work)) as lab:
                yield lab


def _recap_lines(stdout: str) -> dict[str, str]:
    return {line.split()[0]: line for line in stdout.splitlines() if line.split() and line.split()[0] in ROLES}


def test_hosts_setup_twice_then_check_over_ssh(lab: Lab, tmp_path: Path) -> None:
    """The first run changes every host; then, on the emulated lab, R2's libvirt settings are
    made a clone's (:func:`_clone_r2s_libvirt`): the second run changes only those, back to its
    own, and fails R2 with the line saying to restart libvirtd (:func:`_r2_set_right_again`); the
    next run changes nothing on any host.  Then, over SSH, the helpers answer and R1's and R2's
    image files are the local ones."""
    first, t1 = lab.first_setup(tmp_path / "results")
    assert first.returncode == 0, first.stdout + first.stderr
    lines = _recap_lines(first.stdout)
    assert set(lines) == set(ROLES), first.stdout
    assert "hosts-setup: nothing changed" not in first.stdout
    assert all(" changed=0 " not in lines[r] for r in ROLES), first.stdout  # helpers built everywhere

    # only the emulated lab's hosts have a private /etc/libvirt
    clone = isinstance(lab, EmulatedLab | SharedEmulatedLab)
    if clone:
        r1_uuid = _clone_r2s_libvirt(lab)
        fixed, _ = _hosts_setup(lab.inventory, tmp_path / "results")
        _r2_set_right_again(lab, fixed, r1_uuid)
        lines = _recap_lines(fixed.stdout)
        for r in ROLES:
            if r != "R2":
                assert " changed=0 failed=0" in lines.get(r, ""), fixed.stdout

    second, t2 = _hosts_setup(lab.inventory, tmp_path / "results")
    assert second.returncode == 0, second.stdout + second.stderr
    lines = _recap_lines(second.stdout)
    assert set(lines) == set(ROLES), second.stdout
    for r in ROLES:
        assert " changed=0 failed=0" in lines[r], second.stdout
    assert second.stdout.splitlines()[-1] == "hosts-setup: nothing changed"
    print(f"\nhosts-setup wall time: first {t1:.1f} s, unchanged {t2:.1f} s")

    for role in ("A", "B"):
        for helper in ("vrgen", "vrsink", "vrsampler"):
            r = lab.ssh(role, f"{lab.deploy_dir}/bin/{helper}", "--help")
            assert r.returncode == 0 and "usage:" in r.stdout + r.stderr, (role, helper, r)
    from routers.guest import guest_image

    img = guest_image("frr")
    for role in ("R1", "R2"):
        for name in ("vmlinuz", "initrd.img", "manifest.json"):
            local = _sha256((img.kernel.parent / name).read_bytes())
            r = lab.ssh(role, "sha256sum", f"{lab.deploy_dir}/images/frr/{name}")
            assert r.returncode == 0 and r.stdout.split()[0] == local, (role, name, r)
        links = lab.ssh(role, "ip", "-o", "link", "show", "master", "brL").stdout
        assert "tapL" in links, links
    # the orchestrator's own deploy_dir is not the hosts' (each sshd has its private tmpfs)
    assert not (lab.deploy_dir / "bin").exists()


def test_a_host_with_a_wrong_key_is_named(lab: Lab, tmp_path: Path) -> None:
    bad = lab.wrong_key_inventory("C")
    cp, _ = _hosts_setup(bad, tmp_path / "results")
    assert cp.returncode == 2, cp.stdout + cp.stderr
    failed = [line for line in cp.stderr.splitlines() if line.startswith("hosts-setup: ")]
    assert len(failed) == 1, cp.stderr
    assert failed[0].startswith("hosts-setup: C: unreachable: "), failed
    # our own login, before Ansible, names the refused key; no host was touched, nothing was written
    assert "authentication refused for key" in failed[0] and "nothing was changed" in failed[0], failed
    assert not (tmp_path / "results").exists()


def _libvirt_setting(lab: Lab, role: str, conf: str, key: str) -> list[str]:
    r = lab.ssh(role, "cat", f"/etc/libvirt/{conf}")
    assert r.returncode == 0, r
    return [line.split("=", 1)[1].strip().strip('"') for line in r.stdout.splitlines() if line.startswith(f"{key} =")]


def _clone_r2s_libvirt(lab: Lab) -> str:
    """Make R2's libvirt settings a clone's: R1's host UUID, no migration_host, its TLS server
    certificate gone (the daemon keeps the one it loaded).  Returns R1's UUID."""
    r1_uuid = _libvirt_setting(lab, "R1", "libvirtd.conf", "host_uuid")
    assert len(r1_uuid) == 1, r1_uuid
    # ssh hands its argv to the remote shell as one string: the sed expressions are quoted for it
    uuid_expr = shlex.quote(f's/^host_uuid = .*/host_uuid = "{r1_uuid[0]}"/')
    assert lab.ssh("R2", "sed", "-i", "-e", uuid_expr, "/etc/libvirt/libvirtd.conf").returncode == 0
    assert (
        lab.ssh("R2", "sed", "-i", "-e", shlex.quote("/^migration_host =/d"), "/etc/libvirt/qemu.conf").returncode == 0
    )
    assert _libvirt_setting(lab, "R2", "libvirtd.conf", "host_uuid") == r1_uuid
    assert _libvirt_setting(lab, "R2", "qemu.conf", "migration_host") == []
    assert lab.ssh("R2", "rm", "/etc/libvirt/pki/servercert.pem").returncode == 0
    return r1_uuid[0]


def _r2_set_right_again(lab: Lab, cp: subprocess.CompletedProcess, r1_uuid: str) -> None:
    """hosts-setup gave the clone R2 a UUID of its own, the migration link's address and the
    inventory's certificate, and, with no systemd to restart libvirtd (the emulated lab's daemons
    are lab-up's), failed R2 with the line saying so."""
    from migrate.testbed.inventory import load

    assert cp.returncode == 2, cp.stdout + cp.stderr
    failed = [line for line in cp.stderr.splitlines() if line.startswith("hosts-setup: ")]
    assert len(failed) == 1 and failed[0].startswith("hosts-setup: R2: "), cp.stderr
    assert "libvirt's settings changed" in failed[0] and "restart this host's libvirtd" in failed[0], failed
    r2_uuid = _libvirt_setting(lab, "R2", "libvirtd.conf", "host_uuid")
    assert len(r2_uuid) == 1 and r2_uuid != [r1_uuid], r2_uuid
    assert _libvirt_setting(lab, "R1", "libvirtd.conf", "host_uuid") == [r1_uuid]  # the first keeps its own
    mig = load(lab.inventory).hosts["R2"].migration_ipv4
    assert mig is not None
    assert _libvirt_setting(lab, "R2", "qemu.conf", "migration_host") == [mig.split("/")[0]]
    tls = load(lab.inventory).hosts["R2"].libvirt_tls  # the inventory's copy, installed again
    assert tls is not None
    r = lab.ssh("R2", "sha256sum", "/etc/libvirt/pki/servercert.pem")
    assert r.returncode == 0 and r.stdout.split()[0] == _sha256((tls / "servercert.pem").read_bytes()), r
    assert _libvirt_setting(lab, "R2", "libvirtd.conf", "listen_tls") == ["1"]
