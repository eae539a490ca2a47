"""A router of a profile's OCI image as a container (HV=criu, ``[image] oci``): unpacked once per
run, a copy per host, configured by writing the rendered template into the copy, started by the
same namespaces and pivot_root as the suite's own rootfs (``routers.container_image``) but with
the image's own entry point as PID 1.

* :func:`unpack_once`: ``umoci raw unpack`` into a directory named by the image's digest (one
  unpack per run, whatever the number of hosts).
* :func:`stage`: a host's copy (hard links: the container's root is mounted read-only, and every
  file the suite writes into it replaces the link instead of writing through it, so R2's tree is
  identical to R1's, as CRIU's restore requires); the rendered configuration at the profile's
  ``[config] path`` with the owner and mode of the image's own file; FRR's ``/etc/frr/daemons``
  with the daemons of PEERING= switched on (:func:`frr_daemons`).
* :func:`container_argv`: util-linux ``unshare`` (mount, uts, ipc, net, pid namespaces), the
  netlink filter (``nlfilter.py``, so that CRIU can checkpoint FRR's zebra), the host's
  ``/bin/sh`` running ``oci-setup.sh``, which ends in the image's ``/bin/sh`` running
  ``oci-init.sh``, which execs the image's entry point and command.
* :func:`image_record`: meta.json ``hypervisor.guest_image`` of the image."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from migrate.core.errors import DependencyError, GuestError

HERE = Path(__file__).resolve().parent
SETUP_SCRIPT = HERE / "oci-setup.sh"
INIT_SCRIPT = HERE / "oci-init.sh"
NLFILTER = HERE / "nlfilter.py"
NAMESPACES = ("--mount", "--uts", "--ipc", "--net", "--pid")
OLDROOT = ".oldroot"
HOST_SHELL = "/bin/sh"
HOST_LOADER = Path("/lib64/ld-linux-x86-64.so.2")
HOST_LIBS = ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu")
#: host tools the set-up runs before the pivot (and umount after it, through the host's loader)
HOST_TOOLS = ("mount", "umount", "mknod", "cp", "pivot_root", "umoci")
COPY_TIMEOUT_S = 120.0
FRR_DAEMONS = "etc/frr/daemons"
#: PEERING= protocol -> the FRR daemon that speaks it
FRR_DAEMON_OF = {"bgp": "bgpd", "ospf": "ospfd", "bfd": "bfdd"}
#: capability bit of CAP_SYS_RESOURCE (linux/capability.h)
CAP_SYS_RESOURCE = 24
#: FRR's daemons keep root's identity (``-u root -g root``) where criu lacks CAP_SYS_RESOURCE: it
#: reads every task's resource limits with prlimit(2), which the kernel allows on a task of another
#: user only with that capability (criu: "Can't get rlimit 0: Operation not permitted")
FRR_AS_ROOT_OPTIONS = " -u root -g root"
#: the group whose members FRR's daemons let open their vty sockets; root joins it to run them
FRR_VTY_GROUP = "frrvty"
GROUP_FILE = "etc/group"
#: FRR's directories (and, below, the files the suite writes) handed to root with its daemons:
#: root keeps no CAP_DAC_OVERRIDE in FRR's daemons, so they must own what they write
FRR_DIRS = ("etc/frr", "var/lib/frr", "var/log/frr")
#: frrcommon.sh reads /etc/frr/daemons after its defaults: these make it create /run/frr for root
FRR_ROOT_SETTINGS = "FRR_USER=root\nFRR_GROUP=root\n"


def host_tools_missing() -> list[str]:
    """The host tools the container's set-up needs that are not installed."""
    return [t for t in HOST_TOOLS if shutil.which(t) is None]


def unpack_once(profile: Any, base: Path) -> Path:
    """The root file system of the profile's image, unpacked under ``base`` into a directory
    named by the image's digest (reused if this run unpacked it already); returns it."""
    from routers.oci_image import image_config, unpack

    image = profile.image
    cfg = image_config(image.oci, image.oci_tag or "latest")
    d = base / f"oci-{cfg.digest.partition(':')[2][:16]}"
    rootfs = d / "rootfs"
    if not rootfs.is_dir():
        d.mkdir(parents=True, exist_ok=True)
        unpack(image.oci, image.oci_tag or "latest", rootfs)
        (rootfs / OLDROOT).mkdir(exist_ok=True)
    return rootfs


def lacks_sys_resource(status: str | None = None) -> bool:
    """Whether this process (and so the criu it starts) lacks CAP_SYS_RESOURCE (``status``: the
    text of /proc/self/status, read if None)."""
    text = status if status is not None else Path("/proc/self/status").read_text()
    for line in text.splitlines():
        if line.startswith("CapEff:"):
            return not (int(line.split()[1], 16) >> CAP_SYS_RESOURCE) & 1
    return False


def frr_daemons(text: str, protocols: Sequence[str], as_root: bool = False) -> str:
    """FRR's ``/etc/frr/daemons`` with the daemons of ``protocols`` (PEERING=) set to yes, the
    others as the image has them; ``as_root``: every daemon's options keep root's identity
    (:data:`FRR_AS_ROOT_OPTIONS`)."""
    out = text
    if as_root:
        out = out.rstrip("\n") + "\n# vrmig: criu lacks CAP_SYS_RESOURCE, the daemons run as root\n" + FRR_ROOT_SETTINGS
        out = re.sub(r'(?m)^(\w+_options="[^"\n]*)"', lambda m: f'{m.group(1)}{FRR_AS_ROOT_OPTIONS}"', out)
    for proto in protocols:
        daemon = FRR_DAEMON_OF[proto]
        out, n = re.subn(rf"(?m)^{daemon}=.*$", f"{daemon}=yes", out)
        if n == 0:
            out = out.rstrip("\n") + f"\n{daemon}=yes\n"
    return out


def replace_file(path: Path, text: str, like: Path | None = None) -> None:
    """Write ``text`` to ``path`` as a new file (a hard link to the unpacked image is replaced,
    never written through), with the owner and mode of ``like`` (the file it replaces) if that
    exists, else root's 0644."""
    st = like.stat() if like is not None and like.exists() else None
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.vrmig")
    tmp.write_text(text)
    os.chmod(tmp, (st.st_mode & 0o7777) if st else 0o644)
    if st is not None:
        os.chown(tmp, st.st_uid, st.st_gid)
    tmp.replace(path)


def with_member(group_text: str, group: str, user: str) -> str:
    """``/etc/group`` text with ``user`` added to ``group``'s members (unchanged if it is one
    already or there is no such group)."""
    out = []
    for line in group_text.splitlines(keepends=True):
        fields = line.rstrip("\n").split(":")
        if len(fields) == 4 and fields[0] == group:
            members = [m for m in fields[3].split(",") if m]
            if user not in members:
                fields[3] = ",".join([*members, user])
                line = ":".join(fields) + "\n"
        out.append(line)
    return "".join(out)


def stage(
    unpacked: Path,
    dest: Path,
    config_path: str,
    config_text: str,
    software: str,
    protocols: Sequence[str],
    as_root: bool = False,
) -> Path:
    """``dest`` (must not exist): a copy of the unpacked image made of hard links, with the
    rendered configuration at ``config_path`` and, for FRR, the daemons of ``protocols`` on (and
    run as root, ``as_root``: see :data:`FRR_AS_ROOT_OPTIONS`)."""
    try:
        subprocess.run(["cp", "-al", str(unpacked), str(dest)], check=True, capture_output=True, text=True,
                       timeout=COPY_TIMEOUT_S)  # fmt: skip
    except subprocess.CalledProcessError as err:
        raise GuestError(f"cannot copy the unpacked image to {dest}: {err.stderr.strip()}") from None
    target = dest / config_path.lstrip("/")
    replace_file(target, config_text, like=target)
    daemons = dest / FRR_DAEMONS
    if software == "frr" and (protocols or as_root) and daemons.is_file():
        replace_file(daemons, frr_daemons(daemons.read_text(), protocols, as_root), like=daemons)
        groups = dest / GROUP_FILE
        if as_root and groups.is_file():
            replace_file(groups, with_member(groups.read_text(), FRR_VTY_GROUP, "root"), like=groups)
        if as_root:  # directories and the files written above are this copy's own: no hard links
            for path in [*(dest / d for d in FRR_DIRS), target, daemons]:
                if path.exists():
                    os.chown(path, 0, 0)
    return dest


def _cidrs(name: str, addrs: Sequence[str]) -> str:
    return f"{name}={','.join(addrs)}"


def container_argv(rootfs: Path, image_cfg: Any, hostname: str, if0: Sequence[str], if1: Sequence[str]) -> list[str]:
    """argv that starts the container of the image on ``rootfs`` (see the module docstring);
    ``image_cfg`` is ``routers.oci_image.image_config``'s; ``if0``/``if1`` the addresses of eth0
    and eth1, which the caller moves into the container after it started (the init waits)."""
    loader = HOST_LOADER.resolve()
    if not loader.exists():
        raise DependencyError(f"no dynamic loader at {HOST_LOADER}: HV=criu with an OCI image needs an x86-64 host")
    umount = shutil.which("umount")
    if umount is None:
        raise DependencyError("umount not found: install mount (make apt)")
    return [
        "unshare", *NAMESPACES, "--fork", "--propagation", "private", "--",
        sys.executable, str(NLFILTER), HOST_SHELL, "-c", SETUP_SCRIPT.read_text(), "vrmig-oci-setup",
        str(rootfs), INIT_SCRIPT.read_text(), str(loader), ":".join(HOST_LIBS), str(Path(umount).resolve()),
        hostname, _cidrs("eth0", if0), _cidrs("eth1", if1), image_cfg.workdir, str(len(image_cfg.env)),
        *image_cfg.env, *image_cfg.argv,
    ]  # fmt: skip


def image_record(profile: Any) -> dict[str, Any]:
    """meta.json ``hypervisor.guest_image`` of a profile's OCI image: the profile, the layout,
    tag and manifest digest, the run configuration, the config method and, when a recipe built
    the image, its manifest.json (package versions)."""
    from routers.oci_image import image_config

    image = profile.image
    tag = image.oci_tag or "latest"
    cfg = image_config(image.oci, tag)
    manifest: dict[str, Any] | None = None
    path = Path(image.oci).parent / "manifest.json"
    if path.is_file():
        try:
            manifest = json.loads(path.read_text())
        except ValueError:
            manifest = None
    versions = (manifest or {}).get("versions") or {}
    return {
        "profile": str(profile.path),
        "name": profile.router.name,
        "kind": "container",
        "oci": {"layout": str(image.oci), "tag": tag, "digest": cfg.digest},
        "entrypoint": list(cfg.entrypoint),
        "cmd": list(cfg.cmd),
        "env": list(cfg.env),
        "stop_signal": cfg.stop_signal,
        "config_method": profile.config.method,
        "config_path": profile.config.path,
        "recipe": image.recipe,
        "versions": versions,
        "manifest": manifest,
        "router": {
            "software": profile.router.software,
            "version": profile.router.version or versions.get(profile.router.software),
            "source": f"profile {profile.path}",
        },
    }
