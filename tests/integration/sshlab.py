"""A minimal lab of SSH hosts for the transport's integration tests: one network namespace per
role, a veth from the test's namespace to each (management /30s in 198.19.0.0/16), sshd in the
foreground in each with its own host key, and private tmpfs at the deploy directory (what is
written there over SSH is visible only on that host) and at the home directory.  The roles' data interfaces are veths,
bridges and taps with the inventory's names and addresses, so ``hosts-check`` finds a healthy lab.

Everything is recorded as it is created and removed by :meth:`SshLab.down` (sshd by PID, the
namespaces by name, the mount point directory)."""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import secrets
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from migrate.core.procs import PDEATHSIG_PREFIX
from migrate.testbed.inventory import END_ROLES, HV_ROLES, ROLES
from migrate.testbed.topology import END_HOSTS, MIGRATION_ADDR

SSHD = "/usr/sbin/sshd"
HELPERS = {"vrgen": "crosstraffic/bin/vrgen", "vrsink": "crosstraffic/bin/vrsink", "vrsampler": "probes/bin/vrsampler"}
READY_TIMEOUT_S = 10.0


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


def _link(ns: str, name: str, up: bool = True) -> None:
    """An interface with carrier: one end of a veth pair whose peer (``<name>p``) stays in the
    namespace (no dummy module on every kernel)."""
    _ip("-n", ns, "link", "add", name, "type", "veth", "peer", "name", f"{name}p")
    if up:
        _ip("-n", ns, "link", "set", f"{name}p", "up")
        _ip("-n", ns, "link", "set", name, "up")


def keygen(path: Path) -> Path:
    """A fresh ed25519 key pair at ``path`` (and ``path``.pub)."""
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "vrmig-test", "-f", str(path)], check=True)
    return path


def _free_subnet() -> ipaddress.IPv4Network:
    used = subprocess.run(["ip", "-j", "-4", "addr"], capture_output=True, check=True).stdout
    nets = [
        ipaddress.ip_interface(f"{a['local']}/{a['prefixlen']}").network
        for link in json.loads(used)
        for a in link.get("addr_info", [])
    ]
    for _ in range(50):
        cand = ipaddress.ip_network(f"198.19.{secrets.randbelow(40) + 160}.0/24")
        if not any(cand.overlaps(n) for n in nets):
            return cand
    raise RuntimeError("no free 198.19.x.0/24 for the test lab's management network")


def toml_dump(d: dict[str, Any]) -> str:
    """Enough TOML for an inventory: top-level values, [ssh], [hosts.X] and [router.X] tables
    whose values are strings, integers or inline tables."""

    def val(v: Any) -> str:
        if isinstance(v, dict):
            return "{ " + ", ".join(f"{k} = {val(x)}" for k, x in v.items()) + " }"
        return json.dumps(v)

    lines = [f"{k} = {val(v)}" for k, v in d.items() if not isinstance(v, dict)]
    if "ssh" in d:
        lines += ["", "[ssh]", *(f"{k} = {val(v)}" for k, v in d["ssh"].items())]
    for section in ("hosts", "router"):
        for name, t in d.get(section, {}).items():
            lines += ["", f"[{section}.{name}]", *(f"{k} = {val(v)}" for k, v in t.items())]
    return "\n".join(lines) + "\n"


class SshLab:
    """The lab: :meth:`up` builds it and writes ``lab.toml``; :meth:`down` removes it."""

    def __init__(self, workdir: Path, repo: Path, helpers: bool = True) -> None:
        self.workdir = workdir
        self.repo = repo
        self.helpers = helpers
        self.prefix = "vs" + secrets.token_hex(3)
        self.namespaces: list[str] = []
        self.sshd: dict[str, subprocess.Popen[bytes]] = {}
        self.mgmt: dict[str, str] = {}
        self.deploy_dir = str(workdir / "deploy")
        self.key = workdir / "id_ed25519"
        self.known_hosts = workdir / "known_hosts"
        self.inventory: dict[str, Any] = {}
        self.path = workdir / "lab.toml"

    def ns(self, role: str) -> str:
        """The namespace of ``role``."""
        return f"{self.prefix}-{role}"

    def up(self) -> Path:
        """Build everything; return the inventory path."""
        try:
            self._up()
        except BaseException:
            self.down()
            raise
        return self.path

    def _up(self) -> None:
        keygen(self.key)
        (self.workdir / "authorized_keys").write_text((self.workdir / "id_ed25519.pub").read_text())
        Path(self.deploy_dir).mkdir()
        stage = self.workdir / "stage"
        stage.mkdir()
        if self.helpers:
            for name, rel in HELPERS.items():
                shutil.copy2(self.repo / rel, stage / name)
        Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege separation directory
        net = _free_subnet()
        hosts: dict[str, Any] = {}
        kh = []
        for i, role in enumerate(ROLES):
            ns = self.ns(role)
            _ip("netns", "add", ns)
            self.namespaces.append(ns)
            base = net.network_address + 4 * i
            here, there = f"{self.prefix}m{i}", "mgmt0"
            _ip("link", "add", here, "type", "veth", "peer", "name", there, "netns", ns)
            _ip("addr", "add", f"{base + 1}/30", "dev", here)
            _ip("link", "set", here, "up")
            _ip("-n", ns, "addr", "add", f"{base + 2}/30", "dev", there)
            _ip("-n", ns, "link", "set", there, "up")
            _ip("-n", ns, "link", "set", "lo", "up")
            addr = str(base + 2)
            self.mgmt[role] = addr
            hosts[role] = self._data_interfaces(role, ns)
            hosts[role]["ssh"] = {"host": addr}
            hostkey = keygen(self.workdir / f"hostkey-{role}")
            kh.append(f"{addr} {(self.workdir / f'hostkey-{role}.pub').read_text().strip()}")
            self._start_sshd(role, ns, addr, hostkey, stage)
        self.known_hosts.write_text("\n".join(kh) + "\n")
        for role in ROLES:
            self._wait_listening(role)
        self.inventory = {
            "version": 1,
            "name": f"test-{self.prefix}",
            "deploy_dir": self.deploy_dir,
            "ssh": {"user": "root", "port": 22, "key": str(self.key), "known_hosts": str(self.known_hosts)},
            "hosts": hosts,
        }
        self.write(self.inventory, self.path)

    def _data_interfaces(self, role: str, ns: str) -> dict[str, Any]:
        if role in END_ROLES:
            h = next(h for h in END_HOSTS if h.role == role)
            _link(ns, "eth0")
            _ip("-n", ns, "addr", "add", h.ipv4, "dev", "eth0")
            _ip("-n", ns, "addr", "add", h.ipv6, "dev", "eth0", "nodad")
            _link(ns, "dn0", up=False)  # stays down: the down-interface case
            return {"segment": h.segment, "interface": "eth0", "ipv4": h.ipv4, "ipv6": h.ipv6}
        for seg in ("L", "R"):
            _ip("-n", ns, "link", "add", f"br{seg}", "type", "bridge")
            _link(ns, f"up{seg}")
            _ip("-n", ns, "tuntap", "add", "dev", f"tap{seg}", "mode", "tap")
            for dev in (f"up{seg}", f"tap{seg}"):
                _ip("-n", ns, "link", "set", dev, "master", f"br{seg}")
                _ip("-n", ns, "link", "set", dev, "up")
            _ip("-n", ns, "link", "set", f"br{seg}", "up")
        _link(ns, "mig0")
        _ip("-n", ns, "addr", "add", MIGRATION_ADDR[role], "dev", "mig0")
        assert role in HV_ROLES
        return {
            "uplinks": {"L": "upL", "R": "upR"},
            "bridges": {"L": "brL", "R": "brR"},
            "taps": {"L": "tapL", "R": "tapR"},
            "migration": {"interface": "mig0", "ipv4": MIGRATION_ADDR[role]},
        }

    def _start_sshd(self, role: str, ns: str, addr: str, hostkey: Path, stage: Path) -> None:
        cfg = self.workdir / f"sshd-{role}.conf"
        cfg.write_text(
            f"Port 22\nListenAddress {addr}\nHostKey {hostkey}\nPidFile {self.workdir}/sshd-{role}.pid\n"
            f"AuthorizedKeysFile {self.workdir}/authorized_keys\nPermitRootLogin prohibit-password\n"
            "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\n"
            "Subsystem sftp internal-sftp\n"
        )
        # the host's own home: the orchestrator's ~/.bashrc (which bash reads for ssh commands)
        # is not the lab's
        script = (
            'mount -t tmpfs vrmig-test "$1" && mkdir "$1/bin" && cp -a "$2"/. "$1/bin/" && '
            'mount -t tmpfs vrmig-home "$HOME" && exec "$3" -D -e -f "$4"'
        )
        argv = [
            *PDEATHSIG_PREFIX,
            *("ip", "netns", "exec", ns, "unshare", "-m", "--propagation", "private"),
            *("sh", "-c", script, "sshlab", self.deploy_dir, str(stage), SSHD, str(cfg)),
        ]
        with open(self.workdir / f"sshd-{role}.log", "wb") as log:
            self.sshd[role] = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log)

    def _wait_listening(self, role: str) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            out = subprocess.run(["ss", "-N", self.ns(role), "-ltnH"], capture_output=True, text=True).stdout
            if f"{self.mgmt[role]}:22 " in out:
                return
            if self.sshd[role].poll() is not None:
                raise RuntimeError(f"sshd of {role} exited: {(self.workdir / f'sshd-{role}.log').read_text()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"sshd of {role} not listening after {READY_TIMEOUT_S} s")
            time.sleep(0.01)

    def write(self, inventory: dict[str, Any], path: Path) -> Path:
        """Write ``inventory`` (a dict like :attr:`inventory`) as TOML to ``path``."""
        path.write_text(toml_dump(inventory))
        return path

    def variant(self, name: str, edit: Any) -> Path:
        """A copy of the inventory changed by ``edit(dict)``, written to ``<name>.toml``."""
        inv = json.loads(json.dumps(self.inventory))
        edit(inv)
        return self.write(inv, self.workdir / f"{name}.toml")

    def down(self) -> None:
        """Stop every sshd by PID and every process left in the lab's namespaces, delete the
        namespaces, remove the mount point directory."""
        for p in self.sshd.values():
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p.pid, signal.SIGTERM)
                try:
                    p.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        self.sshd.clear()
        for ns in self.namespaces:
            # what the tests started over SSH (a remote process outlives its client): every
            # process in the lab's namespaces is the lab's
            pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split()
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGKILL)
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        self.namespaces.clear()
        with contextlib.suppress(OSError):
            Path(self.deploy_dir).rmdir()
