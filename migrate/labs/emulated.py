"""The emulated lab: paper 004's Fig. 1 on this machine, its hosts reached only over SSH.

``lab_up`` builds the embedded testbed's data plane (:class:`~migrate.testbed.builder.
TestbedBuilder`: namespaces ``<prefix>-<role>``, segments, uplinks, bridges, taps, migration
link) under a lab prefix ``vl<6 hex>``, adds a management network (one veth per host role from
the orchestrator's namespace, a /30 each, out of a /24 of its own per lab) and starts in each host
namespace its own ``sshd`` in a private mount namespace with a tmpfs at the deploy directory.  On
the hypervisor hosts R1 and R2 it then starts a ``libvirtd`` inside that sshd's network and mount
namespaces (private libvirt directories bind-mounted there, the default socket
``/run/libvirt/libvirt-sock``, TCP without authentication on the migration link only), which the
orchestrator reaches only through ``qemu+ssh://`` URIs and the other host's daemon through
``qemu+tcp://`` on the migration link.  It writes the orchestrator key, the hosts' known_hosts
and an inventory in the format of docs/lab.example.toml into the lab directory, and returns the
inventory's path.  ``lab_down``
removes exactly what the lab's state file lists.

A lab outlives the process that made it, so its state file lives in the lab directory (default
``/run/vrmig-lab/<name>/state.json``), never under the runs' ``STATE_ROOT``: a run's
``clean_stale()`` and the leak checks (which know only ``vm<6 hex>`` prefixes) do not see it."""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import json
import logging
import os
import pwd
import re
import secrets
import shutil
import signal
import socket
import subprocess
import time
import urllib.parse
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from types import FrameType
from typing import Any

from migrate.core.atomic import write_json, write_text
from migrate.core.errors import ConfigError, DependencyError, Interrupted, TestbedError
from migrate.core.registry import PREFIX_RE, RUN_ENV, proc_entry_ids, proc_starttime, teardown_state
from migrate.core.sighold import held_signals
from migrate.labs.ssh_ready import wait_ssh
from migrate.labs.sshd import sshd_config
from migrate.testbed import inventory, pki
from migrate.testbed import topology as topo
from migrate.testbed.builder import TestbedBuilder

log = logging.getLogger(__name__)

LAB_ROOT = Path(os.environ.get("VRMIG_LAB_ROOT", "/run/vrmig-lab"))
KIND = "vrmig-emulated-lab"
STATE_VERSION = 1
DEFAULT_NAME = "lab"
DEFAULT_DEPLOY_DIR = "/var/lib/vrmig"
NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,39}$")
#: host roles with a management link, in the order of docs/lab.example.toml (the switch has none)
MGMT_ROLES = ("A", "C", "B", "D", "R1", "R2")
MGMT_IF = "mgmt0"  # the host's end of its management veth
#: each lab's management /24: 198.19.128.0/24 for the first, then .129, ... (inside 198.18.0.0/15)
MGMT_FIRST_OCTET3 = 128
MGMT_LAST_OCTET3 = 191
SSH_PORT = 22
SSHD = "/usr/sbin/sshd"
READY_TIMEOUT_S = 30.0
POLL_S = 0.02
SSH_CONNECT_TIMEOUT_S = 5
NSENTER = "nsenter"
LIBVIRTD = "/usr/sbin/libvirtd"
VIRSH = "virsh"
#: run on the host by libvirt's ssh transport (proxy=auto) when present; else it needs ``nc``
VIRT_SSH_HELPER = "/usr/bin/virt-ssh-helper"
#: the ``command=`` of the hosts' qemu+ssh URIs: ssh with the lab's known_hosts (a file in the lab dir)
LIBVIRT_SSH = "libvirt-ssh"
#: libvirtd probes QEMU's capabilities (under TCG, a few seconds) before it answers
LIBVIRT_READY_TIMEOUT_S = 90.0
VIRSH_TIMEOUT_S = 30.0
#: characters a lab directory may contain: its paths reach ssh's option parser (space- and
#: %-token-sensitive) through the libvirt ssh wrapper and libvirt's URI
LAB_DIR_RE = re.compile(r"^[A-Za-z0-9._/-]+$")


def new_prefix() -> str:
    """A fresh lab prefix: 'vl' + 6 hex digits (outside the runs' ``vm<6 hex>``)."""
    return "vl" + secrets.token_hex(3)


def mgmt_net(octet3: int) -> ipaddress.IPv4Network:
    """The management /24 with third octet ``octet3``."""
    return ipaddress.IPv4Network(f"198.19.{octet3}.0/24")


def mgmt_addresses(net: ipaddress.IPv4Network, role: str) -> tuple[str, str]:
    """(orchestrator side, host side) of ``role``'s management /30 in ``net``, as CIDRs:
    198.19.128.(4i+1)/30 and .(4i+2)/30 with i the role's place in :data:`MGMT_ROLES`."""
    i = MGMT_ROLES.index(role)
    base = net.network_address + 4 * i
    return f"{base + 1}/30", f"{base + 2}/30"


def root_ifname(prefix: str, role: str) -> str:
    """The orchestrator-side name of ``role``'s management veth (at most 15 characters)."""
    return f"{prefix}-m{role}"


def check_name(name: str) -> None:
    """Refuse a lab name that is not a plain lowercase name or that looks like a run prefix."""
    if not NAME_RE.match(name):
        raise ConfigError(f"LAB_NAME (--name) = {name!r}: use 1-40 characters a-z 0-9 _ - starting with a letter/digit")
    if PREFIX_RE.search(name):
        raise ConfigError(f"LAB_NAME (--name) = {name!r} looks like a run prefix (vm<6 hex>); choose another name")


def check_deploy_dir(deploy_dir: str) -> None:
    """The deploy directory must be an absolute path below the root, without '..'."""
    p = PurePosixPath(deploy_dir)
    if not p.is_absolute() or ".." in p.parts or len(p.parts) < 3:
        raise ConfigError(
            f"DEPLOY_DIR (--deploy-dir) = {deploy_dir!r}: give an absolute directory, e.g. /var/lib/vrmig"
        )


def check_lab_dir(lab_dir: Path) -> None:
    """The lab directory's path goes into ssh options and libvirt URIs: plain characters only."""
    if not LAB_DIR_RE.match(str(lab_dir)):
        raise ConfigError(
            f"LAB_DIR (--dir) = {str(lab_dir)!r}: use a path of letters, digits and . _ / - only"
            " (it goes into ssh options and libvirt URIs)"
        )


# -- state ------------------------------------------------------------------------------------
@dataclass
class LabState:
    """What a lab consists of, mirrored to ``<dir>/state.json`` before each part is created.

    Duck-types the part of :class:`~migrate.core.registry.Registry` that the testbed builder
    uses (``prefix``, ``create_netns``)."""

    name: str
    prefix: str
    dir: Path
    deploy_dir: str
    mgmt_net: str
    namespaces: list[str] = field(default_factory=list)
    links: list[str] = field(default_factory=list)  # orchestrator-side management veths
    processes: list[dict[str, Any]] = field(default_factory=list)  # sshd, libvirtd: pid, start time, what
    paths: list[str] = field(default_factory=list)  # outside the lab dir (a created deploy dir)
    link_name: str | None = None  # LAB_ROOT/<name> when the lab dir is elsewhere (--dir)
    xen: bool = False  # R1 and R2 are Xen hosts (migrate.labs.emulated_xen)
    complete: bool = False

    @property
    def state_file(self) -> Path:
        """The lab's state file."""
        return self.dir / "state.json"

    def save(self) -> None:
        """Write the state file (atomically)."""
        write_json(
            self.state_file,
            {
                "kind": KIND,
                "version": STATE_VERSION,
                "name": self.name,
                "prefix": self.prefix,
                "dir": str(self.dir),
                "deploy_dir": self.deploy_dir,
                "mgmt_net": self.mgmt_net,
                "namespaces": self.namespaces,
                "links": self.links,
                "processes": self.processes,
                "paths": self.paths,
                "link_name": self.link_name,
                "xen": self.xen,
                "complete": self.complete,
            },
        )

    @classmethod
    def load(cls, lab_dir: Path) -> LabState | None:
        """The lab whose directory is ``lab_dir`` (None if there is no lab state there)."""
        try:
            raw = json.loads((lab_dir / "state.json").read_text())
        except (OSError, json.JSONDecodeError):
            return None
        if not isinstance(raw, dict) or raw.get("kind") != KIND:
            return None
        return cls(
            name=raw["name"],
            prefix=raw["prefix"],
            dir=Path(raw["dir"]),
            deploy_dir=raw["deploy_dir"],
            mgmt_net=raw["mgmt_net"],
            namespaces=list(raw.get("namespaces", [])),
            links=list(raw.get("links", [])),
            processes=list(raw.get("processes", [])),
            paths=list(raw.get("paths", [])),
            link_name=raw.get("link_name"),
            xen=bool(raw.get("xen")),
            complete=bool(raw.get("complete")),
        )

    def create_netns(self, name: str) -> None:
        """Record a namespace, then create it (signals held until it exists)."""
        from pyroute2 import netns

        self.namespaces.append(name)
        self.save()
        with held_signals():
            netns.create(name)

    def ns(self, role: str) -> str:
        """Namespace of ``role``."""
        return f"{self.prefix}-{role}"

    def host_dir(self, role: str) -> Path:
        """Per-host files: sshd config, host key, pid file, log; libvirt's private tree."""
        return self.dir / "hosts" / role

    def mgmt_addr(self, role: str) -> str:
        """``role``'s management address (no prefix length)."""
        return topo.addr(mgmt_addresses(ipaddress.IPv4Network(self.mgmt_net), role)[1])


def all_labs() -> list[LabState]:
    """Every lab registered under :data:`LAB_ROOT` (its own directory or a link to it)."""
    if not LAB_ROOT.is_dir():
        return []
    out = []
    for entry in sorted(LAB_ROOT.iterdir()):
        st = LabState.load(entry)
        if st is not None:
            out.append(st)
    return out


@contextlib.contextmanager
def _lab_lock() -> Iterator[None]:
    """One lab-up or lab-down at a time (management /24s, the shared deploy mount point)."""
    LAB_ROOT.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(LAB_ROOT / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _addresses_in_root_ns() -> list[ipaddress.IPv4Interface]:
    from migrate.core.netlink import iproute

    with iproute() as ipr:
        return [
            ipaddress.IPv4Interface(f"{a.get_attr('IFA_ADDRESS')}/{a['prefixlen']}")
            for a in ipr.get_addr(family=socket.AF_INET)
        ]


def pick_mgmt_net(taken: list[str], addrs: list[ipaddress.IPv4Interface]) -> ipaddress.IPv4Network:
    """The first management /24 that no other lab uses and that no address of the orchestrator's
    namespace overlaps."""
    for octet3 in range(MGMT_FIRST_OCTET3, MGMT_LAST_OCTET3 + 1):
        net = mgmt_net(octet3)
        if str(net) in taken or any(a.network.overlaps(net) for a in addrs):
            continue
        return net
    raise TestbedError(
        f"no free management /24 in 198.19.{MGMT_FIRST_OCTET3}-{MGMT_LAST_OCTET3}.0: "
        "remove a lab with `make lab-down TESTBED=<its lab.toml>`"
    )


# -- building ---------------------------------------------------------------------------------
def _run(argv: list[str], what: str) -> subprocess.CompletedProcess[str]:
    res = subprocess.run(argv, capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise TestbedError(f"{what} failed ({argv[0]} exit {res.returncode}): {res.stderr.strip()[-300:]}")
    return res


def _keygen(path: Path, comment: str) -> str:
    """Generate an ed25519 key pair at ``path``; return the public key line."""
    _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)], "ssh-keygen")
    return path.with_name(path.name + ".pub").read_text().strip()


def _mgmt_link(st: LabState, role: str) -> None:
    from migrate.core.netlink import iproute

    net = ipaddress.IPv4Network(st.mgmt_net)
    outer, inner = mgmt_addresses(net, role)
    name = root_ifname(st.prefix, role)
    st.links.append(name)
    st.save()
    with iproute() as ipr:
        ipr.link("add", ifname=name, kind="veth", peer={"ifname": MGMT_IF, "net_ns_fd": st.ns(role)})
        idx = ipr.link_lookup(ifname=name)[0]
        a, plen = outer.split("/")
        ipr.addr("add", index=idx, address=a, prefixlen=int(plen))
        ipr.link("set", index=idx, state="up")
    with iproute(st.ns(role)) as ipr:
        idx = ipr.link_lookup(ifname=MGMT_IF)[0]
        a, plen = inner.split("/")
        ipr.addr("add", index=idx, address=a, prefixlen=int(plen))
        ipr.link("set", index=idx, state="up")


def _start_sshd(st: LabState, role: str, authorized_keys: Path) -> subprocess.Popen[bytes]:
    """Start ``role``'s sshd (recorded by PID and start time before anything waits on it)."""
    hd = st.host_dir(role)
    hd.mkdir(mode=0o700, parents=True)
    _keygen(hd / "ssh_host_ed25519_key", f"vrmig-lab {st.name} host {role}")
    cfg = hd / "sshd_config"
    cfg.write_text(
        sshd_config(
            f"sshd of emulated lab host {role} (vrmig lab-up); runs in namespace {st.ns(role)}",
            address=topo.addr(mgmt_addresses(ipaddress.IPv4Network(st.mgmt_net), role)[1]),
            port=SSH_PORT,
            host_key=str(hd / "ssh_host_ed25519_key"),
            pid_file=str(hd / "sshd.pid"),
            authorized_keys=str(authorized_keys),
            sftp=True,
        )
    )
    # private mount namespace: the deploy dir's tmpfs exists only for this host's sshd and its
    # sessions, and so does an empty home (bash reads ~/.bashrc for every command over SSH: the
    # orchestrator's, e.g. a pyenv init, cost ~75 ms per command and is not the host's); the
    # paths reach sh as positional parameters, never inside the script text
    script = (
        'mount -t tmpfs -o mode=0755 vrmig-lab "$1" && mount -t tmpfs -o mode=0700 vrmig-home "$5" && '
        'exec "$2" -D -f "$3" -E "$4"'
    )
    argv = ["ip", "netns", "exec", st.ns(role), "unshare", "-m", "--propagation", "private"]
    argv += ["sh", "-c", script, "sh", st.deploy_dir, SSHD, str(cfg), str(hd / "sshd.log"), pwd.getpwuid(0).pw_dir]
    env = {k: v for k, v in os.environ.items() if k != RUN_ENV}
    with open(hd / "sshd.stderr", "wb") as err, held_signals(mask=False):
        p = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=err, stderr=err, start_new_session=True, close_fds=True, env=env
        )
        st.processes.append({"pid": p.pid, "starttime": proc_starttime(p.pid), "what": f"sshd of {role}"})
        st.save()
    return p


def ssh_argv(key: Path, known_hosts: Path, host: str, *extra: str) -> list[str]:
    """``ssh`` to ``root@host`` with the lab key, the lab's known_hosts and no prompts."""
    return [
        "ssh",
        "-i",
        str(key),
        "-o",
        "BatchMode=yes",
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        f"UserKnownHostsFile={known_hosts}",
        "-o",
        "GlobalKnownHostsFile=/dev/null",
        "-o",
        "IdentitiesOnly=yes",
        "-o",
        f"ConnectTimeout={SSH_CONNECT_TIMEOUT_S}",
        "-F",
        "/dev/null",
        *extra,
        f"root@{host}",
    ]


def _wait_ready(st: LabState, role: str, p: subprocess.Popen[bytes], key: Path, known_hosts: Path) -> float:
    """Wait until ``role``'s sshd listens and a real ``ssh ... true`` succeeds; return the
    seconds it took.  Raises TestbedError if sshd exits or the time runs out."""
    host = topo.addr(mgmt_addresses(ipaddress.IPv4Network(st.mgmt_net), role)[1])
    listening = False

    def up() -> bool:
        nonlocal listening
        if not listening:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                s.settimeout(1.0)
                listening = s.connect_ex((host, SSH_PORT)) == 0
        return listening

    def exited(code: int) -> str:
        tail = (st.host_dir(role) / "sshd.stderr").read_text(errors="replace").strip()[-300:]
        logf = st.host_dir(role) / "sshd.log"
        tail += " " + (logf.read_text(errors="replace").strip()[-300:] if logf.exists() else "")
        return f"sshd of lab host {role} exited with {code}: {tail.strip()}"

    def timed_out(last: str) -> str:
        return f"lab host {role} ({host}): no SSH within {READY_TIMEOUT_S:.0f} s: {last or 'port closed'}"

    return wait_ssh(p, ssh_argv(key, known_hosts, host), READY_TIMEOUT_S, POLL_S, up, exited, timed_out)


# -- libvirt on the hypervisor hosts ---------------------------------------------------------
#: libvirt's ssh transport runs its ``command=`` as ``<command> [-p port] -l user -i keyfile -T -o
#: BatchMode=yes -e none -- host sh -c ...`` (keyfile=, no_tty=1) and has no known_hosts parameter
#: of its own (that one belongs to the libssh/libssh2 transports): this wrapper adds the lab's
#: known_hosts, found next to it, with strict host key checking.  Nothing is interpolated into it.
LIBVIRT_SSH_SCRIPT = f"""\
#!/bin/sh
# ssh for the qemu+ssh:// URIs of this emulated lab (their command= parameter): the lab's
# known_hosts next to this script, host keys checked strictly, never a prompt
d=${{0%/*}}
exec ssh -F /dev/null -o StrictHostKeyChecking=yes -o UserKnownHostsFile="$d/known_hosts" \\
    -o GlobalKnownHostsFile=/dev/null -o IdentitiesOnly=yes -o BatchMode=yes \\
    -o ConnectTimeout={SSH_CONNECT_TIMEOUT_S} "$@"
"""
#: Run by ``nsenter`` inside the host sshd's network and mount namespaces: bind-mount the host's
#: private libvirt tree over the system paths, then exec libvirtd (its PID stays nsenter's).  The
#: paths come in as arguments, nothing is interpolated into the script.
_LIBVIRTD_LAUNCH = r"""
B=$1
L=$2
shift 2
for pair in "$@"; do
    mount --bind "$B/${pair%%=*}" "${pair#*=}" || { echo "vrmig: bind mount $pair failed" >&2; exit 97; }
done
exec "$L" --listen -f "$B/etc/libvirtd.conf" -p "$B/libvirtd.pid"
"""
#: where libvirtd puts its sockets inside the host (its default, so URIs need no socket=)
LIBVIRT_SOCK_DIR = "/run/libvirt"
#: the host's TLS certificates for libvirt, inside the host (under its private /etc/libvirt)
LIBVIRT_PKI_DIR = pki.LIBVIRT_PKI_DIR
#: in the lab directory: the certificate of the lab's CA, for whoever inspects the daemons' TLS
LIBVIRT_CA_NAME = "libvirt-ca.pem"
#: libvirtd's QEMU capabilities cache inside its private tree (one XML file per QEMU binary)
CAPS_SUBDIR = Path("cache") / "qemu" / "capabilities"
#: under LAB_ROOT: the capabilities the first lab's daemon probed (seconds per QEMU binary under
#: TCG), given to every later daemon.  libvirt revalidates each entry against the QEMU binary,
#: itself and the kernel and probes again if it is stale.  A cache: no lab owns it.
CAPS_CACHE_NAME = ".qemu-capabilities"


def libvirt_uri(lab_dir: Path, key: Path, host: str) -> str:
    """The qemu+ssh URI by which the orchestrator reaches the libvirtd of the host at ``host``."""
    params = {"command": str(lab_dir / LIBVIRT_SSH), "keyfile": str(key), "no_verify": "0", "no_tty": "1"}
    query = "&".join(f"{k}={urllib.parse.quote(v, safe='/')}" for k, v in params.items())
    return f"qemu+ssh://root@{host}/system?{query}"


def libvirt_peer_uri(role: str) -> str:
    """The qemu+tls URI by which the other hypervisor host's libvirtd reaches ``role``'s, on the
    migration link (libvirt's default TLS port), with its client certificate from LIBVIRT_PKI_DIR
    inside that host (migrate.testbed.pki)."""
    return f"qemu+tls://{topo.addr(topo.MIGRATION_ADDR[role])}/system?pkipath={LIBVIRT_PKI_DIR}"


def tls_dir(st: LabState, role: str) -> Path:
    """The lab directory's copy of ``role``'s libvirt TLS files (the inventory's ``libvirt_tls``)."""
    return st.dir / "pki" / role


def libvirt_dir(st: LabState, role: str) -> Path:
    """``role``'s private libvirt tree (etc, run, lib, cache, log), bind-mounted inside the host."""
    return st.host_dir(role) / "libvirt"


def _start_libvirtd(st: LabState, role: str, sshd_pid: int, caps: Path, ca: pki.Authority) -> subprocess.Popen[bytes]:
    """Start ``role``'s libvirtd in the network and mount namespaces of its (running) sshd, so
    that SSH sessions (virsh, virt-ssh-helper) see its socket at the default path and the
    daemon sees the host's deploy-dir tmpfs; its QEMU capabilities cache starts with the files
    in ``caps``; it listens for the other host's daemon over TLS with certificates from the
    lab's ``ca``.  Recorded by PID and start time at once."""
    from migrate.drivers.libvirt import daemon as lvd

    comm = Path(f"/proc/{sshd_pid}/comm").read_text().strip()
    if comm != "sshd":  # before its exec chain ends, the PID is not yet in the sshd's mount namespace
        raise TestbedError(f"lab host {role}: PID {sshd_pid} is {comm!r}, not its sshd")
    base = libvirt_dir(st, role)
    base.mkdir(mode=0o700)
    for sub, _ in lvd.MOUNTS:
        (base / sub).mkdir(mode=0o700)
    (base / CAPS_SUBDIR).mkdir(mode=0o755, parents=True)
    for f in _caps_files(caps):
        shutil.copy2(f, base / CAPS_SUBDIR / f.name)
    mig = topo.addr(topo.MIGRATION_ADDR[role])
    # the inventory's copy (libvirt_tls: what hosts-setup installs) and the host's own
    pki.write_host(tls_dir(st, role), ca, role, mig)
    shutil.copytree(tls_dir(st, role), base / "etc" / "pki")
    (base / "etc" / "libvirtd.conf").write_text(
        lvd.libvirtd_conf(Path(LIBVIRT_SOCK_DIR), mig, str(uuid.uuid4()), tls_dir=LIBVIRT_PKI_DIR)
    )
    (base / "etc" / "qemu.conf").write_text(lvd.qemu_conf(mig))
    lvd.ensure_mount_points()
    mounts = list(lvd.MOUNTS)
    for target, lines in lvd.account_overlays().items():
        name = Path(target).name
        text = Path(target).read_text()
        (base / name).write_text(text + ("" if text.endswith("\n") else "\n") + lines)
        mounts.append((name, target))
    argv = [NSENTER, "-t", str(sshd_pid), "-m", "-n", "--", "sh", "-c", _LIBVIRTD_LAUNCH, "vrmig-lab-libvirtd"]
    argv += [str(base), LIBVIRTD, *(f"{sub}={target}" for sub, target in mounts)]
    env = {k: v for k, v in os.environ.items() if k != RUN_ENV}
    with open(st.host_dir(role) / "libvirtd.log", "wb") as err, held_signals(mask=False):
        p = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=err, stderr=err, start_new_session=True, close_fds=True, env=env
        )
        st.processes.append({"pid": p.pid, "starttime": proc_starttime(p.pid), "what": f"libvirtd of {role}"})
        st.save()
    return p


def virsh(uri: str, *args: str, timeout_s: float = VIRSH_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    """``virsh -c uri args...`` on the orchestrator (a timeout is a failed run, exit 124)."""
    try:
        return subprocess.run(
            [VIRSH, "-q", "-c", uri, *args], capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess([VIRSH, *args], 124, "", f"virsh timed out after {timeout_s:.0f} s")


def _wait_libvirtd(st: LabState, role: str, p: subprocess.Popen[bytes], uri: str) -> float:
    """Wait until ``role``'s libvirtd has its socket and answers ``virsh version`` through its
    qemu+ssh URI; return the seconds it took.  Its TCP listener on the migration link is bound
    before it serves any client, so it is up too.  Raises TestbedError if the daemon exits or
    the time runs out."""
    sock = libvirt_dir(st, role) / "run" / "libvirt-sock"  # /run/libvirt/libvirt-sock inside the host
    t0 = time.monotonic()
    deadline = t0 + LIBVIRT_READY_TIMEOUT_S
    last = "no socket"
    while time.monotonic() < deadline:
        if p.poll() is not None:
            logf = st.host_dir(role) / "libvirtd.log"
            tail = logf.read_text(errors="replace").strip()[-400:] if logf.exists() else ""
            raise TestbedError(f"libvirtd of lab host {role} exited with {p.returncode}: {tail}")
        if sock.exists():
            res = virsh(uri, "version")
            if res.returncode == 0 and "Running hypervisor" in res.stdout:
                return time.monotonic() - t0
            last = (res.stderr.strip() or res.stdout.strip())[-300:]
        time.sleep(POLL_S)
    raise TestbedError(
        f"libvirtd of lab host {role}: no answer at {uri} within {LIBVIRT_READY_TIMEOUT_S:.0f} s: {last}"
    )


def _caps_files(d: Path) -> list[Path]:
    return sorted(d.glob("*.xml")) if d.is_dir() else []


def _keep_caps(st: LabState, role: str) -> None:
    """Keep the capabilities ``role``'s daemon holds as the shared cache if they differ from it
    (none yet, or libvirt found it stale and probed again).  lab-up holds the labs' lock: no
    other lab writes the cache meanwhile."""
    shared = LAB_ROOT / CAPS_CACHE_NAME
    files = _caps_files(libvirt_dir(st, role) / CAPS_SUBDIR)
    old = {f.name: f.read_bytes() for f in _caps_files(shared)}
    if not files or old == {f.name: f.read_bytes() for f in files}:
        return
    tmp = LAB_ROOT / f"{CAPS_CACHE_NAME}.{secrets.token_hex(3)}"
    tmp.mkdir(mode=0o700)
    for f in files:
        shutil.copy2(f, tmp / f.name)
    if shared.is_dir():
        shutil.rmtree(shared)
    tmp.rename(shared)


def _start_libvirt(st: LabState, key: Path, sshds: dict[str, subprocess.Popen[bytes]]) -> dict[str, dict[str, str]]:
    """Start R1's and R2's libvirtds and wait until both answer; their URIs by role.  With the
    shared capabilities cache both start at once; without it R1's probes QEMU first and R2's
    gets what it found (two probes at once on two cores take as long as two in a row)."""
    script = st.dir / LIBVIRT_SSH
    script.write_text(LIBVIRT_SSH_SCRIPT)
    script.chmod(0o700)
    uris = {
        r: {"uri": libvirt_uri(st.dir, key, st.mgmt_addr(r)), "peer_uri": libvirt_peer_uri(r),
            "tls": str(tls_dir(st, r))}
        for r in topo.HYPERVISOR_HOSTS
    }  # fmt: skip
    (st.dir / "pki").mkdir(mode=0o700)
    shared = LAB_ROOT / CAPS_CACHE_NAME
    first = topo.HYPERVISOR_HOSTS[0]
    groups = [list(topo.HYPERVISOR_HOSTS)] if _caps_files(shared) else [[first], list(topo.HYPERVISOR_HOSTS[1:])]
    ca = pki.new_authority(st.name)  # its key stays in memory: lab-up issues every certificate now
    (st.dir / LIBVIRT_CA_NAME).write_bytes(ca.pem)
    for group in groups:
        procs = {r: _start_libvirtd(st, r, sshds[r].pid, shared, ca) for r in group}
        for r, p in procs.items():
            log.debug("libvirtd of lab host %s ready after %.3f s", r, _wait_libvirtd(st, r, p, uris[r]["uri"]))
        _keep_caps(st, first)
    return uris


# -- the inventory ----------------------------------------------------------------------------
INVENTORY_TEMPLATE = """\
# A vrmig testbed inventory written by `make lab-up`: the emulated lab {{ name|q }}, paper 004's
# Fig. 1 on one machine, every host a network namespace reached only over SSH (docs/testbed.md,
# "The emulated lab").  Remove it with `make lab-down TESTBED=<this file>`.

version = 1
name = {{ name|q }}
deploy_dir = {{ deploy_dir|q }}

[ssh]
user = "root"
port = {{ port }}
key = {{ key|q }}
known_hosts = {{ known_hosts|q }}
{% for h in end_hosts %}
[hosts.{{ h.role }}]
ssh = { host = {{ h.mgmt|q }} }
segment = {{ h.segment|q }}
interface = {{ h.interface|q }}
ipv4 = {{ h.ipv4|q }}
ipv6 = {{ h.ipv6|q }}
{% endfor %}{% for r in hv_hosts %}
[hosts.{{ r.role }}]
ssh = { host = {{ r.mgmt|q }} }
uplinks = { L = "upL", R = "upR" }
bridges = { L = "brL", R = "brR" }
taps = { L = "tapL", R = "tapR" }
migration = { interface = {{ r.mig_if|q }}, ipv4 = {{ r.mig_ipv4|q }} }
{% if r.libvirt_uri %}libvirt_uri = {{ r.libvirt_uri|q }}
libvirt_peer_uri = {{ r.libvirt_peer_uri|q }}
{% endif %}{% if r.libvirt_tls %}libvirt_tls = {{ r.libvirt_tls|q }}
{% endif %}{% if r.xen %}
[hosts.{{ r.role }}.xen]
ssh = { host = {{ r.xen.host|q }}, port = {{ r.xen.port }} }
migration = { interface = {{ r.xen.mig_if|q }}, ipv4 = {{ r.xen.mig_ipv4|q }} }
taps = { L = {{ r.xen.tapL|q }}, R = {{ r.xen.tapR|q }} }
{% endif %}{% endfor %}{% for p in ports %}
[router.{{ p.segment }}]
ipv4 = {{ p.ipv4|q }}
ipv6 = {{ p.ipv6|q }}
mac = {{ p.mac|q }}
{% endfor %}"""


def toml_str(v: str) -> str:
    """A TOML basic string (JSON's escapes are TOML's, with non-ASCII as \\uXXXX)."""
    return json.dumps(v, ensure_ascii=True)


def render_inventory(
    name: str,
    deploy_dir: str,
    key: Path,
    known_hosts: Path,
    mgmt: dict[str, str],
    port: int = SSH_PORT,
    libvirt: dict[str, dict[str, str]] | None = None,
    xen: dict[str, dict[str, str]] | None = None,
) -> str:
    """The inventory text (docs/lab.example.toml's format) of a lab whose host ``role`` has the
    management address ``mgmt[role]`` and, if given, the libvirt URIs ``libvirt[role]``
    (``uri``, ``peer_uri``, and ``tls``: the directory of its libvirt TLS files) and, if given,
    its Xen dom0 ``xen[role]`` (:func:`migrate.labs.emulated_xen.inventory_tables`)."""
    import jinja2

    env = jinja2.Environment(autoescape=False, keep_trailing_newline=True, undefined=jinja2.StrictUndefined)
    env.filters["q"] = toml_str
    end_hosts = [
        {"role": h.role, "mgmt": mgmt[h.role], "segment": h.segment, "interface": topo.HOST_IF,
         "ipv4": h.ipv4, "ipv6": h.ipv6}
        for h in topo.END_HOSTS
    ]  # fmt: skip
    lv = libvirt or {}
    hv_hosts = [
        {"role": r, "mgmt": mgmt[r], "mig_if": topo.MIGRATION_IF, "mig_ipv4": topo.MIGRATION_ADDR[r],
         "libvirt_uri": lv.get(r, {}).get("uri"), "libvirt_peer_uri": lv.get(r, {}).get("peer_uri"),
         "libvirt_tls": lv.get(r, {}).get("tls"), "xen": (xen or {}).get(r)}
        for r in topo.HYPERVISOR_HOSTS
    ]  # fmt: skip
    return env.from_string(INVENTORY_TEMPLATE).render(
        name=name, deploy_dir=deploy_dir, port=port, key=str(key), known_hosts=str(known_hosts),
        end_hosts=end_hosts, hv_hosts=hv_hosts, ports=topo.ROUTER_PORTS,
    )  # fmt: skip


# -- up and down ------------------------------------------------------------------------------
@contextlib.contextmanager
def _sigterm_interrupts() -> Iterator[None]:
    """SIGTERM during lab-up raises :class:`Interrupted` (as Ctrl-C raises KeyboardInterrupt),
    so the ``except`` that tears the half-made lab down runs."""

    def handler(_signum: int, _frame: FrameType | None) -> None:
        raise Interrupted("lab-up terminated (SIGTERM)")

    old = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def _preflight(xen: bool) -> None:
    if os.geteuid() != 0:
        raise DependencyError("lab-up needs root (it creates network namespaces)")
    for tool in ("ssh", "ssh-keygen", "unshare", NSENTER, "ip", VIRSH):
        if shutil.which(tool) is None:
            raise DependencyError(
                f"{tool} not found: run `make apt` (openssh-server, util-linux, iproute2, libvirt-clients)"
            )
    if not os.access(SSHD, os.X_OK):
        raise DependencyError(f"{SSHD} not found: run `make apt` (it installs openssh-server)")
    for exe in (LIBVIRTD, VIRT_SSH_HELPER):
        if not os.access(exe, os.X_OK):
            raise DependencyError(f"{exe} not found: run `make apt` (libvirt-daemon, libvirt-daemon-driver-qemu)")
    if xen:
        from migrate.labs import emulated_xen as labxen

        labxen.preflight()


def lab_up(
    name: str = DEFAULT_NAME, lab_dir: Path | None = None, deploy_dir: str = DEFAULT_DEPLOY_DIR, xen: bool = False
) -> Path:
    """Build the emulated lab ``name``; return the path of its inventory.  ``xen``: R1 and R2 are
    Xen hosts too, their dom0s reached over SSH (:mod:`migrate.labs.emulated_xen`).  A failure or an
    interrupt on the way removes everything made so far before the error is raised."""
    check_name(name)
    check_deploy_dir(deploy_dir)
    registered = LAB_ROOT / name
    lab_dir = Path(lab_dir).resolve() if lab_dir is not None else registered
    if PREFIX_RE.search(str(lab_dir)):
        raise ConfigError(f"LAB_DIR (--dir) = {str(lab_dir)!r} looks like a run's (vm<6 hex>); choose another")
    check_lab_dir(lab_dir)
    _preflight(xen)
    with _sigterm_interrupts(), _lab_lock():
        if registered.exists() or registered.is_symlink() or lab_dir.exists():
            where = registered if registered.exists() or registered.is_symlink() else lab_dir
            raise ConfigError(
                f"lab {name!r} exists ({where}): remove it with `make lab-down TESTBED={where}/lab.toml`"
                " or choose another LAB_NAME"
            )
        net = pick_mgmt_net([lab.mgmt_net for lab in all_labs()], _addresses_in_root_ns())
        if not lab_dir.parent.is_dir():
            raise ConfigError(f"LAB_DIR (--dir) = {str(lab_dir)!r}: its parent directory does not exist")
        with held_signals():
            lab_dir.mkdir(mode=0o700)
            os.chmod(lab_dir, 0o700)
            st = LabState(name, new_prefix(), lab_dir, deploy_dir, str(net), xen=xen)
            st.save()
        try:
            if lab_dir != registered:
                st.link_name = str(registered)
                st.save()
                registered.symlink_to(lab_dir)
            return _build(st)
        except BaseException:
            with held_signals():
                problems = _teardown(st)
            for p in problems:
                log.warning("lab-up cleanup: %s", p)
            raise


def _deploy_mount_point(st: LabState) -> None:
    """Make the deploy directory (each host mounts its own tmpfs there) if it is missing.  The
    directories made are recorded; another lab on the same deploy directory shares them, and
    the last lab to go removes them."""
    deploy = Path(st.deploy_dir)
    if deploy.exists():
        st.paths += [p for lab in all_labs() for p in lab.paths if deploy.is_relative_to(p) and p not in st.paths]
        st.save()
        return
    missing = [deploy, *(p for p in deploy.parents if not p.exists())]
    for p in reversed(missing):
        st.paths.append(str(p))
        st.save()
        p.mkdir(mode=0o755)


def _build(st: LabState) -> Path:
    """The lab's steps, shown as progress (migrate.core.progress): the network, the hosts' sshds,
    their answers over SSH, the libvirtds, the Xen hosts' dom0s (with ``--xen``), the inventory."""
    from migrate.core.progress import Progress

    with Progress("lab-up", 6 if st.xen else 5, "steps") as progress:
        return _build_steps(st, progress)


def _build_steps(st: LabState, progress: Any) -> Path:
    t0 = time.monotonic()
    progress.start("network: namespaces, links, management")
    TestbedBuilder(st).build()  # type: ignore[arg-type]  # LabState has what the builder uses
    for role in MGMT_ROLES:
        _mgmt_link(st, role)
    _deploy_mount_point(st)
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # openssh's privilege-separation directory
    progress.finish()
    progress.start("hosts' sshds")
    key = st.dir / "id_ed25519"
    authorized = st.dir / "authorized_keys"
    authorized.write_text(_keygen(key, f"vrmig-lab {st.name} orchestrator") + "\n")
    sshds = {role: _start_sshd(st, role, authorized) for role in MGMT_ROLES}
    from migrate.labs import emulated_xen as labxen

    # the Xen hosts boot (tens of seconds under TCG) while the rest of the lab comes up
    def record(pid: int, what: str) -> None:
        st.processes.append({"pid": pid, "starttime": proc_starttime(pid), "what": what})
        st.save()

    xens = {
        r: labxen.start(lab=st.name, role=r, ns=st.ns(r), host_dir=st.host_dir(r), mgmt_addr=st.mgmt_addr(r),
                        authorized_keys=authorized.read_text(), keygen=_keygen, record=record)
        for r in (topo.HYPERVISOR_HOSTS if st.xen else ())
    }  # fmt: skip
    progress.finish()
    progress.start("hosts answering over SSH")
    known_hosts = st.dir / "known_hosts"
    mgmt = {r: st.mgmt_addr(r) for r in MGMT_ROLES}
    lines = []
    for role in MGMT_ROLES:
        ktype, kdata = (st.host_dir(role) / "ssh_host_ed25519_key.pub").read_text().split()[:2]
        lines.append(f"{mgmt[role]} {ktype} {kdata}\n")
    lines += [labxen.known_hosts_line(st.host_dir(r), st.mgmt_addr(r)) for r in xens]
    known_hosts.write_text("".join(lines))
    for role in MGMT_ROLES:
        log.debug("lab host %s ready after %.3f s", role, _wait_ready(st, role, sshds[role], key, known_hosts))
    progress.finish()
    progress.start("R1's and R2's libvirtd")
    libvirt = _start_libvirt(st, key, sshds)
    progress.finish()
    if xens:
        progress.start("Xen hosts: dom0 over SSH")
    for r, p in xens.items():
        ssh = ssh_argv(key, known_hosts, mgmt[r], "-p", str(labxen.XEN_SSH_PORT))
        took = labxen.wait_ready(r, st.host_dir(r), p, ssh)
        log.info("lab Xen host %s: dom0 reachable over SSH after %.1f s", r, took)
    if xens:
        progress.finish()
    progress.start("inventory")
    inv = st.dir / "lab.toml"
    xen_tables = labxen.inventory_tables(mgmt) if st.xen else None
    write_text(inv, render_inventory(st.name, st.deploy_dir, key, known_hosts, mgmt, libvirt=libvirt, xen=xen_tables))
    inventory.load(inv)  # what lab-up writes, the suite reads
    st.complete = True
    st.save()
    progress.finish()
    log.info("lab %s (%s, management %s) up in %.1f s", st.name, st.prefix, st.mgmt_net, time.monotonic() - t0)
    return inv


def _netns_ino(name: str) -> tuple[int, int] | None:
    try:
        s = os.stat(Path("/run/netns") / name)
    except OSError:
        return None
    return s.st_dev, s.st_ino


def processes_in_namespaces(names: list[str]) -> list[dict[str, Any]]:
    """Every process whose network namespace is one of ``names`` (by device and inode), e.g. a
    command started over SSH that outlived its client."""
    wanted = {i for i in (_netns_ino(n) for n in names) if i is not None}
    out: list[dict[str, Any]] = []
    if not wanted:
        return out
    for pid, ident in proc_entry_ids("ns/net"):
        if ident in wanted:
            out.append({"pid": pid, "starttime": proc_starttime(pid), "what": "process in the lab"})
    return out


def _teardown(st: LabState) -> list[str]:
    """Remove everything ``st`` lists; the lab directory last, only if all else went."""
    from migrate.core.netlink import iproute

    procs = processes_in_namespaces(st.namespaces) + list(st.processes)
    problems = teardown_state({"processes": procs})
    with iproute() as ipr:
        for name in reversed(st.links):
            idx = ipr.link_lookup(ifname=name)
            if idx:
                try:
                    ipr.link("del", index=idx[0])
                except OSError as err:
                    problems.append(f"link {name}: {err}")
    problems += teardown_state({"namespaces": st.namespaces})
    if problems:
        return problems
    shared = {p for lab in all_labs() if lab.dir != st.dir for p in lab.paths}
    for p in reversed(st.paths):
        if p in shared:
            continue
        try:
            os.rmdir(p)  # only if empty: files there were not the lab's (its hosts use tmpfs)
        except FileNotFoundError:
            pass
        except OSError as err:
            log.warning("kept %s: %s", p, err.strerror)
    if st.link_name and Path(st.link_name).is_symlink():
        Path(st.link_name).unlink()
    shutil.rmtree(st.dir, ignore_errors=False)
    return []


class NotALab(ConfigError):
    """lab-down was given a path that is not an emulated lab's inventory or directory."""


def lab_dir_of(testbed: Path) -> Path:
    """The lab directory of an inventory path (``<dir>/lab.toml``) or of the directory itself."""
    return testbed if testbed.is_dir() else testbed.parent


def lab_down(testbed: Path) -> tuple[bool, list[str]]:
    """Remove the lab whose inventory (or directory) is ``testbed``: (removed, problems).
    ``removed`` is False when nothing is left of it (a second lab-down).  Raises :class:`NotALab`
    for a path that is not an emulated lab."""
    testbed = Path(testbed)
    d = lab_dir_of(testbed)
    if LabState.load(d) is None:
        if not testbed.exists() and not d.exists() and testbed.name == "lab.toml":
            return False, []  # already removed
        raise NotALab(
            f"{testbed} is not an emulated lab made by `make lab-up` (no lab state.json in {d}); "
            "lab-down removes only those"
        )
    with _lab_lock():
        st = LabState.load(d)
        if st is None:
            return False, []  # removed meanwhile by another lab-down
        with held_signals():
            problems = _teardown(st)
    return True, problems
