"""The router as a container (HV=criu): a per-run copy of the profile's rootfs (the same tree the
VM guest's initramfs is made of, so the router software is identical) plus the container's own
set-up and init scripts (``routers/containerfs/``).

:func:`stage_rootfs` prepares the tree; :func:`container_argv` is the command that turns it into
a real container: util-linux ``unshare`` creates mount, pid, uts, ipc and network namespaces,
then the rootfs's own static busybox mounts /proc, /sys, a private /dev and tmpfs, pivots into
the tree, closes every inherited descriptor and execs the container's init (a session leader,
PID 1 of its pid namespace).  Its console is ``/run/console.log`` inside the container."""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Sequence
from pathlib import Path

from routers import profiles
from routers.errors import NotBuiltError
from routers.guest import _addresses, _build_hint, guest_image

CONTAINERFS = Path(__file__).resolve().parent / "containerfs"
SETUP_SCRIPT = CONTAINERFS / "vrmig-ct-setup"
INIT_SCRIPT = CONTAINERFS / "vrmig-ct-init"
INIT_PATH = "usr/sbin/vrmig-ct-init"
OLDROOT = ".oldroot"
CONSOLE = "run/console.log"  # relative to the container's root
BUSYBOX = "bin/busybox"
NAMESPACES = ("--mount", "--uts", "--ipc", "--net", "--pid")


def _special_files(directory: str, names: list[str]) -> list[str]:
    """Sockets, FIFOs and device nodes are not part of an image (a router run in the tree may
    have left some): skip them."""
    out = []
    for name in names:
        mode = os.lstat(os.path.join(directory, name)).st_mode
        if stat.S_ISSOCK(mode) or stat.S_ISFIFO(mode) or stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
            out.append(name)
    return out


def stage_rootfs(profile: str, dest: Path, cache: Path | None = None) -> Path:
    """Copy the built rootfs of ``profile`` to ``dest`` (must not exist) and add the container's
    init and the pivot_root mount point; returns ``dest``."""
    image = guest_image(profile, cache, verify=False)
    if image.rootfs is None:
        raise NotBuiltError(f"router image {profile!r} has no rootfs/: {_build_hint(profile)}")
    if not (image.rootfs / BUSYBOX).exists():
        raise NotBuiltError(f"{image.rootfs} has no {BUSYBOX}: {_build_hint(profile)}")
    shutil.copytree(image.rootfs, dest, symlinks=True, ignore=_special_files)
    (dest / OLDROOT).mkdir(exist_ok=True)
    init = dest / INIT_PATH
    shutil.copyfile(INIT_SCRIPT, init)
    init.chmod(0o755)
    return dest


def container_argv(
    rootfs: Path, profile: str, if0: list[str], if1: list[str], rib_routes: int = 0, routing: Sequence[str] = ()
) -> list[str]:
    """argv that starts the container on ``rootfs`` (see the module docstring).  ``if0``/``if1``
    are the addresses of ``eth0``/``eth1``, which the caller moves into the container's network
    namespace after it started (the init waits for them); ``rib_routes`` routes are held in the
    router's RIB (``vrmig-router rib=N``); ``routing`` are vrmig-router's peering arguments."""
    return [
        "unshare", *NAMESPACES, "--fork", "--propagation", "private", "--",
        str(rootfs / BUSYBOX), "sh", "-c", SETUP_SCRIPT.read_text(), "vrmig-ct-setup",
        str(rootfs), profiles.family_of(profile), f"eth0={_addresses('if0', if0)}",
        f"eth1={_addresses('if1', if1)}", *([f"rib={rib_routes}"] if rib_routes else []),
        *routing,
    ]  # fmt: skip
