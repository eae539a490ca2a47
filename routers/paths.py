"""Where the build keeps things.

``<cache>`` is ``--cache DIR``, else ``$VRMIG_CACHE``, else ``~/.cache/vrmig``::

    <cache>/debs/                     downloaded .debs (kept: a rebuild does not download again)
    <cache>/pool/<pkg>_<version>/     each .deb extracted (dpkg-deb -x), shared by all profiles
    <cache>/guest/<profile>/
        vmlinuz  initrd.img  manifest.json
        rootfs/                       the unpacked initramfs tree: busybox, kernel modules,
                                      router binaries + libraries, /init, /usr/sbin/vrmig-router;
                                      reusable as a chroot for HV=none / a CRIU container
"""

from __future__ import annotations

import os
from pathlib import Path

KERNEL_NAME = "vmlinuz"
INITRD_NAME = "initrd.img"
MANIFEST_NAME = "manifest.json"
ROOTFS_NAME = "rootfs"


def default_cache() -> Path:
    """``$VRMIG_CACHE`` or ``~/.cache/vrmig``."""
    env = os.environ.get("VRMIG_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "vrmig"


def cache_dir(cache: Path | str | None = None) -> Path:
    """The cache directory to use (``cache`` if given)."""
    return Path(cache).expanduser() if cache is not None else default_cache()


def guest_dir(profile: str, cache: Path | str | None = None) -> Path:
    """``<cache>/guest/<profile>``."""
    return cache_dir(cache) / "guest" / profile


def rootfs_dir(profile: str, cache: Path | str | None = None) -> Path:
    """The profile's staging root file system (the initramfs content, unpacked)."""
    return guest_dir(profile, cache) / ROOTFS_NAME
