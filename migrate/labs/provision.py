"""Preparing the machines of a lab with Ansible (``make hosts-setup``, docs/testbed.md).

The TOML testbed inventory (:mod:`migrate.testbed.inventory`) becomes an Ansible inventory in a
temporary directory (:func:`ansible_inventory`): one host per role with its SSH target, its known
host keys (``StrictHostKeyChecking=yes``), its role and the lab's ``deploy_dir``.  The playbook
``ansible/hosts-setup.yml`` installs the Debian packages each role needs, builds the C helpers on
each host, copies the router guest images to R1 and R2 and creates their taps.  ``ansible-playbook``
runs with an argv (never a shell string) and an environment that keeps all of Ansible's own files
in that temporary directory (:func:`ansible_env`); its output goes to a log file, and its
``PLAY RECAP`` (:func:`parse_recap`) and ``fatal:`` lines (:func:`parse_failures`) give the
per-host result."""

from __future__ import annotations

import io
import ipaddress
import json
import logging
import os
import re
import shlex
import shutil
import subprocess
import tarfile
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from migrate.core.errors import ConfigError, DependencyError
from migrate.core.procs import terminate_and_wait
from migrate.core.rundir import KIND_HOSTS_SETUP, write_summary
from migrate.drivers.libvirt.daemon import tls_settings
from migrate.testbed import pki
from migrate.testbed import results as resultsmod
from migrate.testbed import topology as topo
from migrate.testbed.inventory import END_ROLES, HV_ROLES, ROLES, HostSpec, Inventory, InventoryError

log = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parents[2]
PLAYBOOK = REPO / "ansible" / "hosts-setup.yml"
#: the router guest files R1 and R2 get (routers/paths.py names them)
IMAGE_FILES = ("vmlinuz", "initrd.img", "manifest.json")
#: the interpreter Ansible's modules run with on every host (python3 is one of the packages)
REMOTE_PYTHON = "/usr/bin/python3"
END_GROUP, HV_GROUP = "end_hosts", "hypervisors"

_RECAP_RE = re.compile(r"^(?P<host>\S+)\s+:\s+(?P<counts>(?:\w+=\d+\s*)+)$")
_FATAL_RE = re.compile(
    r"^(?:fatal|failed): \[(?P<host>[^\]]+)\](?:: (?P<kind>[A-Z]+)!)?(?: \(item=.*?\))? => (?P<body>.*)$"
)
_TASK_RE = re.compile(r"^TASK \[(?P<name>.*)\] \**$")
_PLAY_RE = re.compile(r"^PLAY \[(?P<name>.*)\] \**$")


def count_plays(playbook: Path) -> int:
    """The plays of ``playbook``: its top-level list items (``- name: ...`` at column 0)."""
    return sum(1 for line in playbook.read_text().splitlines() if line.startswith("- "))


@dataclass(frozen=True)
class HostRecap:
    """One host's line of Ansible's ``PLAY RECAP``."""

    host: str
    ok: int
    changed: int
    unreachable: int
    failed: int
    skipped: int = 0
    rescued: int = 0
    ignored: int = 0

    @property
    def good(self) -> bool:
        """Neither unreachable nor failed."""
        return self.unreachable == 0 and self.failed == 0


@dataclass(frozen=True)
class Outcome:
    """What one ``ansible-playbook`` run did: per-host recap, per-host failure reason, its log."""

    returncode: int
    recap: dict[str, HostRecap]
    failures: dict[str, str]
    log_path: Path
    run_dir: Path

    @property
    def changed(self) -> int:
        """Tasks that changed something, summed over the hosts."""
        return sum(r.changed for r in self.recap.values())


def helper_sources(repo: Path = REPO) -> list[str]:
    """Repo-relative paths of what ``make -C crosstraffic`` and ``make -C probes`` read (their
    Makefiles, C sources and headers)."""
    files = ["crosstraffic/Makefile", "probes/Makefile"]
    files += sorted(str(p.relative_to(repo)) for pat in ("*.c", "*.h") for p in (repo / "crosstraffic/src").glob(pat))
    files += sorted(str(p.relative_to(repo)) for p in (repo / "probes").glob("*.c"))
    return files


def helper_archive(dest: Path, repo: Path = REPO) -> Path:
    """The helpers' sources (:func:`helper_sources`) as one tar at ``dest``, byte for byte the same
    while they are (members in order, owner root, mode 0644, mtime 0; rewritten only when its
    bytes change): a host gets one copy and one unpack (``vrmig_unpack``, which replaces the source
    tree, so the helpers are built afresh exactly when a source changed) instead of one Ansible
    copy per file, the first run's costliest task (12 s of every host's 60 here)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for rel in helper_sources(repo):
            data = (repo / rel).read_bytes()
            info = tarfile.TarInfo(rel)
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            tar.addfile(info, io.BytesIO(data))
    data = buf.getvalue()
    if not dest.is_file() or dest.read_bytes() != data:
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_suffix(".tmp")
        tmp.write_bytes(data)
        tmp.replace(dest)
    return dest


def image_files(profiles: list[str], cache: Path | None = None) -> list[dict[str, str]]:
    """``{"profile", "src", "name"}`` for each file of each profile's locally built guest image
    (verified against its manifest; raises the router layer's NotBuiltError otherwise)."""
    from routers.build import run_image

    out = []
    for profile in profiles:
        img = run_image(profile, cache)  # a release other than the default is built on first use
        gdir = img.kernel.parent
        for name in IMAGE_FILES:
            out.append({"profile": profile, "src": str(gdir / name), "name": name})
    return out


def xen_files(profiles: list[str], cache: Path | None = None) -> list[dict[str, str]]:
    """``{"src", "name"}`` of the nested Xen host's files for a lab's R1 and R2 (HV=xen):
    Xen, dom0's kernel, the image's manifest and, per profile, dom0's initrd with that router
    inside (``routers.xen_image.host_initrd``, built here on demand); [] when ``make xen`` has
    not built the image here (HV=xen on the lab then says to build and copy it)."""
    from routers.errors import RouterError
    from routers.xen_image import host_initrd, xen_image

    try:
        image = xen_image(cache)
    except RouterError:
        return []
    out = [
        {"src": str(image.xen), "name": "xen.elf"},
        {"src": str(image.kernel), "name": "dom0-vmlinuz"},
        {"src": str(image.xen.parent / "manifest.json"), "name": "manifest.json"},
    ]
    out += [{"src": str(host_initrd(p, cache)), "name": f"dom0-initrd-{p}.img"} for p in profiles]
    return out


def ssh_common_args(h: HostSpec) -> str:
    """``ansible_ssh_common_args`` of an SSH host: its known host keys only, checked strictly,
    and only its own key offered."""
    assert h.ssh is not None
    opts = [
        "-o", "StrictHostKeyChecking=yes",
        "-o", f"UserKnownHostsFile={h.ssh.known_hosts}",
        "-o", "IdentitiesOnly=yes",
        "-o", "BatchMode=yes",
    ]  # fmt: skip
    return " ".join(shlex.quote(o) for o in opts)


def host_vars(h: HostSpec, deploy_dir: str) -> dict[str, Any]:
    """Ansible host variables of one role's host."""
    v: dict[str, Any] = {
        "vrmig_role": h.role,
        "vrmig_deploy_dir": deploy_dir,
        "ansible_python_interpreter": REMOTE_PYTHON,
    }
    if h.transport == "local":
        v["ansible_connection"] = "local"
    else:
        assert h.ssh is not None
        v.update(
            ansible_connection="ssh",
            ansible_host=h.ssh.host,
            ansible_port=h.ssh.port,
            ansible_user=h.ssh.user,
            ansible_ssh_private_key_file=str(h.ssh.key),
            ansible_ssh_common_args=ssh_common_args(h),
        )
    if h.role in HV_ROLES:
        v["vrmig_taps"] = [{"name": h.taps[s], "bridge": h.bridges[s]} for s in sorted(h.taps)]
        # the host's address on the migration link (libvirt's qemu.conf migration_host)
        v["vrmig_migration_address"] = str(ipaddress.ip_interface(h.migration_ipv4 or "").ip)
        if h.libvirt_tls is not None:  # libvirt's TLS files, installed in pki.LIBVIRT_PKI_DIR
            v["vrmig_libvirt_tls"] = str(h.libvirt_tls)
            v["vrmig_libvirt_pki_dir"] = pki.LIBVIRT_PKI_DIR
            v["vrmig_libvirt_tls_settings"] = [{"key": k, "value": val} for k, val in tls_settings(pki.LIBVIRT_PKI_DIR)]
    return v


def ansible_inventory(
    inv: Inventory,
    images: list[dict[str, str]],
    repo: Path = REPO,
    criu: dict[str, Any] | None = None,
    containers: list[dict[str, str]] | None = None,
    xen: list[dict[str, str]] | None = None,
    peer_bird: str | None = None,
    qemu: dict[str, Any] | None = None,
    libvirt: dict[str, Any] | None = None,
    helpers: Path | None = None,
) -> dict[str, Any]:
    """The Ansible inventory (YAML inventory plugin's structure) of ``inv``: groups ``end_hosts``
    (A, C, B, D) and ``hypervisors`` (R1, R2); ``images``, the ``criu`` bundle, the
    ``containers`` rootfs archives (:mod:`migrate.labs.bundles`) and the nested Xen host's
    files (:func:`xen_files`) go to the hypervisors; ``peer_bird``, the bird image's rootfs
    archive, to the peer hosts A and B (PEERING's BIRD)."""
    return {
        "all": {
            "vars": {"vrmig_repo": str(repo), "vrmig_helper_archive": str(helpers) if helpers else None},
            "children": {
                END_GROUP: {
                    "hosts": {r: host_vars(inv.hosts[r], inv.deploy_dir) for r in END_ROLES},
                    "vars": {"vrmig_peer_bird": peer_bird, "vrmig_peer_roles": sorted(topo.PEER_ROLES.values())},
                },
                HV_GROUP: {
                    "hosts": {r: host_vars(inv.hosts[r], inv.deploy_dir) for r in HV_ROLES},
                    "vars": {
                        "vrmig_images": images,
                        "vrmig_criu": criu,
                        "vrmig_containers": containers or [],
                        "vrmig_xen": xen or [],
                        "vrmig_qemu": qemu,
                        "vrmig_libvirt": libvirt,
                    },
                },
            },
        }
    }


def ansible_env(tmp: Path, deploy_dir: str, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of ``ansible-playbook``: Ansible's local files (configuration, temporary
    files, SSH control sockets) under ``tmp``, its remote temporary files under
    ``<deploy_dir>/tmp``, strict host key checking, no retry files, plain uncoloured output."""
    env = dict(os.environ if base is None else base)
    env.update(
        ANSIBLE_CONFIG=str(tmp / "ansible.cfg"),  # empty: no ./ansible.cfg or ~/.ansible.cfg applies
        ANSIBLE_HOME=str(tmp / "home"),
        ANSIBLE_LOCAL_TEMP=str(tmp / "local"),
        ANSIBLE_REMOTE_TEMP=str(PurePosixPath(deploy_dir) / "tmp"),
        ANSIBLE_SSH_CONTROL_PATH_DIR=str(tmp / "cp"),
        ANSIBLE_HOST_KEY_CHECKING="True",
        ANSIBLE_RETRY_FILES_ENABLED="False",
        ANSIBLE_STDOUT_CALLBACK="default",
        ANSIBLE_DISPLAY_SKIPPED_HOSTS="False",
        ANSIBLE_NOCOLOR="True",
        ANSIBLE_FORCE_COLOR="False",
        ANSIBLE_PIPELINING="True",
        ANSIBLE_GATHERING="explicit",
        ANSIBLE_INVENTORY_ENABLED="yaml",
        LC_ALL="C.UTF-8",
    )
    return env


def playbook_argv(inventory: Path, playbook: Path = PLAYBOOK, forks: int = len(ROLES)) -> list[str]:
    """argv of the ``ansible-playbook`` run (a list: no shell ever sees it)."""
    return ["ansible-playbook", "-i", str(inventory), "--forks", str(forks), str(playbook)]


def parse_recap(text: str) -> dict[str, HostRecap]:
    """The ``PLAY RECAP`` of ``ansible-playbook``'s output: host -> counts."""
    out: dict[str, HostRecap] = {}
    lines = text.splitlines()
    start = max((i for i, line in enumerate(lines) if line.startswith("PLAY RECAP")), default=None)
    if start is None:
        return out
    for line in lines[start + 1 :]:
        m = _RECAP_RE.match(line.strip())
        if not m:
            if line.strip():
                break
            continue
        counts = {k: int(v) for k, v in (kv.split("=") for kv in m["counts"].split())}
        out[m["host"]] = HostRecap(
            m["host"],
            **{
                f: counts.get(f, 0) for f in ("ok", "changed", "unreachable", "failed", "skipped", "rescued", "ignored")
            },
        )
    return out


def _reason(body: str) -> str:
    """The message of a ``fatal:`` result: ``msg``, then the last line of stderr if any."""
    try:
        res = json.loads(body)
    except ValueError:
        return body.strip()
    if not isinstance(res, dict):
        return body.strip()
    msg = str(res.get("msg") or "").strip()
    err = str(res.get("stderr") or res.get("module_stderr") or "").strip()
    last = err.splitlines()[-1].strip() if err else ""
    return f"{msg}: {last}" if msg and last and last not in msg else (msg or last or body.strip())


def parse_failures(text: str) -> dict[str, str]:
    """Per host, the first failure of ``ansible-playbook``'s output as one line: ``unreachable:
    <ssh's reason>`` or ``task '<name>' failed: <reason>``."""
    out: dict[str, str] = {}
    task = ""
    for line in text.splitlines():
        t = _TASK_RE.match(line)
        if t:
            task = t["name"]
            continue
        m = _FATAL_RE.match(line)
        if not m or m["host"] in out:
            continue
        reason = " ".join(_reason(m["body"]).split())
        if len(reason) > 300:
            reason = reason[:297] + "..."
        out[m["host"]] = f"unreachable: {reason}" if m["kind"] == "UNREACHABLE" else f"task '{task}' failed: {reason}"
    return out


def explain_unreachable(inv: Inventory, failures: dict[str, str], control_dir: Path) -> dict[str, str]:
    """``failures`` with each SSH host that Ansible found unreachable probed by one login of our
    own (:class:`migrate.testbed.hosts.SshHost`): its classified reason (authentication refused,
    host key unknown or changed, unreachable) first, Ansible's after it.  Ansible's own message
    for the same refused key varies ("Permission denied", or "Broken pipe" when its connection
    multiplexing lost the race), so the line a user reads does not depend on that."""
    from migrate.testbed.hosts import SshError, SshHost

    out = dict(failures)
    for role, reason in failures.items():
        h = inv.hosts.get(role)
        if not reason.startswith("unreachable") or h is None or h.ssh is None:
            continue
        host = SshHost(h, control_dir)
        try:
            host.open()
        except SshError as err:
            out[role] = f"unreachable: {err} (Ansible: {reason.removeprefix('unreachable: ')})"
        else:
            out[role] = f"{reason} (a login of its own succeeded right after)"
        finally:
            host.close()
    return out


class HostsUnreachable(ConfigError):
    """One or more hosts refused or missed a login of our own before Ansible ran (exit 2, nothing
    changed on any host); ``reasons``: role -> its classified reason."""

    def __init__(self, reasons: dict[str, str]) -> None:
        super().__init__("; ".join(f"{r}: {why}" for r, why in reasons.items()))
        self.reasons = reasons


def unreachable_hosts(inv: Inventory, control_dir: Path) -> dict[str, str]:
    """Each host of ``inv`` that one login of our own cannot open, with its classified reason
    (authentication refused, host key unknown or changed, unreachable), all logins in parallel
    (:func:`migrate.testbed.hosts.open_all`); every host that opened is closed again.  Run before
    Ansible, so that an unreachable host stops hosts-setup before it changes any other host."""
    from migrate.testbed.hosts import SshError, open_all

    out: dict[str, str] = {}
    for role, h in open_all(inv, control_dir).items():
        if isinstance(h, SshError):
            out[role] = f"unreachable: {h}"
        else:
            h.close()
    return out


def check_local_files(inv: Inventory) -> None:
    """Each SSH host's key and known-hosts file, and a hypervisor host's libvirt TLS files, must
    exist here (else InventoryError, exit 2)."""
    for r, h in inv.hosts.items():
        if h.ssh is None:
            continue
        for what, p in (("key", h.ssh.key), ("known_hosts", h.ssh.known_hosts)):
            if not p.is_file():
                raise InventoryError(
                    f"{inv.path}: hosts.{r}.ssh: {what} {p} does not exist (fix the path or create it)"
                )
        if h.libvirt_tls is not None:
            missing = [f for f in pki.FILES if not (h.libvirt_tls / f).is_file()]
            if missing:
                raise InventoryError(
                    f"{inv.path}: hosts.{r}.libvirt_tls: {h.libvirt_tls} lacks {', '.join(missing)} (a directory "
                    f"with libvirt's {', '.join(pki.FILES)} for this host; docs/testbed.md)"
                )


def _stop_control_masters(cp_dir: Path) -> None:
    """Ask every OpenSSH control master Ansible left in ``cp_dir`` to exit (ControlPersist keeps
    them otherwise), each by its own socket."""
    if not cp_dir.is_dir():
        return
    for sock in sorted(cp_dir.iterdir()):
        subprocess.run(
            ["ssh", "-o", f"ControlPath={sock}", "-O", "exit", "vrmig-control-master"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=10,
            check=False,
        )


def run_playbook(
    inv: Inventory,
    profiles: list[str],
    results_root: Path,
    cache: Path | None = None,
    playbook: Path = PLAYBOOK,
) -> Outcome:
    """Run the playbook on the lab of ``inv``; Ansible's output goes to ``ansible.log`` in a new
    results directory.  Raises InventoryError (bad key paths), HostsUnreachable (a host refused or
    missed our login), the router layer's NotBuiltError (an image is not built), DependencyError
    (no ``ansible-playbook``) before starting anything."""
    check_local_files(inv)
    with tempfile.TemporaryDirectory(prefix="vrmig-probe-") as probe_dir:
        down = unreachable_hosts(inv, Path(probe_dir))
    if down:
        raise HostsUnreachable(down)
    images = image_files(profiles, cache)
    from migrate.labs import bundles
    from routers.paths import cache_dir

    bundle_dir = cache_dir(cache) / "lab"
    criu = bundles.criu_bundle(inv.deploy_dir, bundle_dir, cache)
    containers = bundles.container_bundles(profiles, bundle_dir, cache)
    peer_bird = bundles.peer_bird_bundle(containers, bundle_dir, cache)
    xen = xen_files(profiles, cache)
    qemu = bundles.qemu_bundle(inv.deploy_dir, bundle_dir)
    libvirt = bundles.libvirt_bundle(inv.deploy_dir, bundle_dir)
    helpers = helper_archive(bundle_dir / "helpers-src.tar")
    if shutil.which("ansible-playbook") is None:
        raise DependencyError("ansible-playbook not found: install Debian's ansible-core (`make apt`)")
    resultsmod.check_results_root(results_root)
    run_dir = resultsmod.new_run_dir(results_root, f"hosts-setup-{inv.name}", kind=KIND_HOSTS_SETUP)
    log_path = run_dir / "ansible.log"
    with tempfile.TemporaryDirectory(prefix="vrmig-ansible-") as tmp_s:
        tmp = Path(tmp_s)
        (tmp / "ansible.cfg").write_text("")
        for d in ("home", "local", "cp"):
            (tmp / d).mkdir(mode=0o700)
        inv_text = (
            json.dumps(
                ansible_inventory(inv, images, REPO, criu, containers, xen, peer_bird, qemu, libvirt, helpers), indent=1
            )
            + "\n"
        )  # JSON is YAML
        (tmp / "inventory.yml").write_text(inv_text)
        (run_dir / "ansible-inventory.yml").write_text(inv_text)
        argv = playbook_argv(tmp / "inventory.yml", playbook)
        log.info("hosts-setup: %s (Ansible's output: %s)", " ".join(shlex.quote(a) for a in argv), log_path)
        try:
            rc = _stream(argv, ansible_env(tmp, inv.deploy_dir), log_path, count_plays(playbook))
        finally:
            _stop_control_masters(tmp / "cp")
    text = log_path.read_text(errors="replace")
    failures = parse_failures(text)
    if any(r.startswith("unreachable") for r in failures.values()):
        with tempfile.TemporaryDirectory(prefix="vrmig-probe-") as probe_dir:
            failures = explain_unreachable(inv, failures, Path(probe_dir))
    out = Outcome(rc, parse_recap(text), failures, log_path, run_dir)
    summary = {"returncode": rc, "profiles": profiles, "recap": {h: asdict(r) for h, r in out.recap.items()},
               "failures": out.failures}  # fmt: skip
    write_summary(run_dir, summary)
    return out


def _stream(argv: list[str], env: dict[str, str], log_path: Path, plays: int) -> int:
    """Run ``argv`` with its output into ``log_path``; its ``plays`` plays are the progress's
    items (migrate.core.progress: ETA from the plays done so far), the task in hand its label,
    and each task's name is logged.  On any exception (Ctrl-C) the process is terminated by its
    PID and waited for."""
    from migrate.core.progress import Progress

    with log_path.open("w") as logf, Progress("hosts-setup", plays, "plays") as progress:
        proc = subprocess.Popen(
            argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        play = ""
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                logf.write(line)
                logf.flush()
                t = _TASK_RE.match(line.rstrip("\n"))
                if t:
                    log.info("hosts-setup: %s", t["name"])
                    if progress.label is not None:
                        progress.label = f"{play}: {t['name']}"
                pl = _PLAY_RE.match(line.rstrip("\n"))
                if pl:
                    if progress.label is not None:
                        progress.finish()
                    play = pl["name"]
                    progress.start(play)
            rc = proc.wait()
            if rc == 0 and progress.label is not None:
                progress.finish()
            return rc
        finally:
            terminate_and_wait(proc, 10.0)
