"""What ``make hosts-setup`` ships to a lab's hypervisor hosts for HV=criu, as tar archives built
here: the criu this machine chose (``make criu``) and each router's container rootfs.

The archives are reproducible (entries sorted, owners numeric, the files' own modes and mtimes,
no access times), so an unchanged tree gives a byte-identical archive, Ansible's ``copy`` sees the
same checksum and a second ``hosts-setup`` changes nothing.  ``tarfile`` from the standard library
writes them: a library for what ``tar --sort=name`` would do, with the entry filter in Python."""

from __future__ import annotations

import os
import stat
import tarfile
from pathlib import Path
from typing import Any

from migrate.core.atomic import write_bytes

#: on a host, relative to the lab's deploy_dir (migrate.drivers.criu.lab reads them there)
CRIU_ROOT = "criu/root"


def _special(mode: int) -> bool:
    return stat.S_ISSOCK(mode) or stat.S_ISFIFO(mode) or stat.S_ISCHR(mode) or stat.S_ISBLK(mode)


def _entries(root: Path) -> list[Path]:
    """Every path under ``root`` (itself excluded), sorted, sockets/FIFOs/devices left out."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in [*dirnames, *sorted(filenames)]:
            p = Path(dirpath) / name
            if not _special(p.lstat().st_mode):
                out.append(p)
    return sorted(out, key=lambda p: p.relative_to(root).as_posix())


def _normalised(ti: tarfile.TarInfo) -> tarfile.TarInfo:
    ti.uname = ti.gname = ""
    ti.pax_headers = {}
    ti.mtime = int(ti.mtime)
    return ti


def write_tree_tar(root: Path, out: Path, extra: dict[str, tuple[bytes | None, int]] | None = None) -> Path:
    """Archive the tree ``root`` (paths relative to it) plus ``extra`` entries (``name -> (data,
    mode)``, data None for a directory; replacing a tree entry of the same name; their mtime that
    of ``root``) into ``out``, written only if its bytes changed."""
    import io

    extra = dict(extra or {})
    buf = io.BytesIO()
    mtime = int(root.stat().st_mtime)
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for p in _entries(root):
            name = p.relative_to(root).as_posix()
            if name in extra:
                continue
            tar.add(p, arcname=name, recursive=False, filter=_normalised)
        for name in sorted(extra):
            data, mode = extra[name]
            ti = tarfile.TarInfo(name)
            ti.mode, ti.mtime = mode, mtime
            if data is None:
                ti.type = tarfile.DIRTYPE
                tar.addfile(ti)
            else:
                ti.size = len(data)
                tar.addfile(ti, io.BytesIO(data))
    data = buf.getvalue()
    if not (out.exists() and out.read_bytes() == data):
        out.parent.mkdir(parents=True, exist_ok=True)
        write_bytes(out, data)
    return out


def criu_bundle(deploy_dir: str, out_dir: Path, cache: Path | None = None) -> dict[str, Any] | None:
    """The criu ``make criu`` chose, for the hosts: ``{"tar": archive path, "json": criu.json}``
    where criu.json gives its argv under ``<deploy_dir>/criu/root`` (its own loader and
    libraries, as here), its version and its source.  The system's criu ships nothing (the hosts
    must have it on PATH); None if ``make criu`` never ran here."""
    from migrate.drivers.criu.setup import read_manifest

    manifest = read_manifest(cache)
    if manifest is None:
        return None
    chosen = manifest["chosen"]
    info = {"version": chosen["version"], "source": chosen["source"]}
    if chosen["source"] == "system":
        return {"tar": None, "json": {**info, "argv": ["criu"]}}
    root = Path(chosen["root"])
    there = f"{deploy_dir}/{CRIU_ROOT}"
    argv = [there + a[len(str(root)) :] if a.startswith(str(root)) else a for a in chosen["argv"]]
    tar = write_tree_tar(root, out_dir / f"criu-{chosen['source']}.tar")
    return {"tar": str(tar), "json": {**info, "argv": argv}}


#: where hosts-setup puts the default stack's QEMU, relative to the deploy dir (``qemu.json`` beside
#: ``root``: its argv there, version, release, source, packages; migrate.experiment.place.lab_facts)
QEMU_DIR = "qemu"
#: beside ``root``: the script a libvirt domain's ``<emulator>`` names to run that QEMU under the
#: hosts' own libvirtd (DRIVER=libvirt on a lab; migrate.core.stack.emulator_text)
EMULATOR = "emulator"


def qemu_bundle(deploy_dir: str, out_dir: Path, spec: str | None = None) -> dict[str, Any] | None:
    """The QEMU release ``spec`` (default: the default stack's) as ``make qemu`` fetched it here,
    for the hypervisor hosts: ``{"spec", "tar", "json", "emulator"}`` where qemu.json gives its
    argv under ``<deploy_dir>/qemu/<spec>/root`` and the path of its ``<emulator>`` script, whose
    text is ``emulator``; None if it was never fetched here."""
    from migrate.core.privapt import LIBDIR
    from migrate.core.stack import DEFAULT_QEMU, QEMU_MODULE_DIR, emulator_text, read_manifest

    spec = spec or DEFAULT_QEMU
    manifest = read_manifest(spec)
    if manifest is None:
        return None
    root = str(Path(manifest["binary"]).parents[2])  # <root>/usr/bin/qemu-system-x86_64
    there = f"{deploy_dir}/{QEMU_DIR}/{spec}/root"
    argv = [there + a[len(root) :] if a.startswith(root) else a for a in manifest["argv"]]
    keys = ("spec", "version", "release", "source", "packages")
    emulator = f"{deploy_dir}/{QEMU_DIR}/{spec}/{EMULATOR}"
    info = {k: manifest.get(k) for k in keys} | {
        "argv": argv,
        "binary": there + manifest["binary"][len(root) :],
        "emulator": emulator,
    }
    # the release's own modules, as on this machine (migrate.core.stack.qemu_module_mount)
    mount = (f"{there}/{LIBDIR}/qemu", QEMU_MODULE_DIR) if (Path(root) / LIBDIR / "qemu").is_dir() else None
    tar = write_tree_tar(Path(root), out_dir / f"qemu-{spec}.tar")
    return {"spec": spec, "tar": str(tar), "json": info, "emulator": emulator_text(argv, mount, "/usr/bin/unshare")}


#: where hosts-setup puts the default stack's libvirt, relative to the deploy dir (``libvirt.json``
#: beside ``root``: the LibvirtBuild record with its paths there; a run with LIBVIRT= that release
#: starts its own libvirtd of it, migrate.drivers.libvirt.daemon.LabRunLibvirtd)
LIBVIRT_DIR = "libvirt"


def libvirt_bundle(deploy_dir: str, out_dir: Path, spec: str | None = None) -> dict[str, Any] | None:
    """The libvirt release ``spec`` (default: the default stack's) as ``make setup`` fetched it
    here, for the hypervisor hosts: ``{"spec", "tar", "json"}`` where libvirt.json is its
    LibvirtBuild record (migrate.core.stack) with every path of the tree rewritten to
    ``<deploy_dir>/libvirt/<spec>/root``; None if it was never fetched here."""
    from migrate.core.stack import DEFAULT_LIBVIRT, LibvirtBuild, read_libvirt_manifest

    spec = spec or DEFAULT_LIBVIRT
    manifest = read_libvirt_manifest(spec)
    if manifest is None:
        return None
    root = str(Path(manifest["daemon"]).parents[2])  # <root>/usr/sbin/libvirtd
    there = f"{deploy_dir}/{LIBVIRT_DIR}/{spec}/root"

    def moved(path: str) -> str:
        return path.replace(root, there)  # argv, library paths (':'-joined), driver directory

    local = LibvirtBuild.from_meta(manifest)
    info = local.to_meta() | {
        "argv": [moved(a) for a in local.argv],
        "daemon": moved(local.daemon),
        "env": {k: moved(v) for k, v in local.env.items()},
        "mounts": [[moved(src), target] for src, target in local.mounts],
    }
    tar = write_tree_tar(Path(root), out_dir / f"libvirt-{spec}.tar")
    return {"spec": spec, "tar": str(tar), "json": info}


def container_bundles(profiles: list[str], out_dir: Path, cache: Path | None = None) -> list[dict[str, str]]:
    """``{"profile", "tar"}`` for each profile whose image has a rootfs: the container's rootfs
    as ``routers.container_image.stage_rootfs`` stages it (plus its init and pivot_root point)."""
    from routers.container_image import INIT_PATH, INIT_SCRIPT, OLDROOT
    from routers.guest import guest_image

    out = []
    for profile in profiles:
        image = guest_image(profile, cache, verify=False)
        if image.rootfs is None or not image.rootfs.is_dir():
            continue
        extra: dict[str, tuple[bytes | None, int]] = {
            INIT_PATH: (INIT_SCRIPT.read_bytes(), 0o755),
            OLDROOT: (None, 0o755),
        }
        tar = write_tree_tar(image.rootfs, out_dir / f"container-{profile}.tar", extra)
        out.append({"profile": profile, "tar": str(tar)})
    return out


def peer_bird_bundle(containers: list[dict[str, str]], out_dir: Path, cache: Path | None = None) -> str | None:
    """The bird router image's rootfs archive for PEERING's peers on a lab's A and B (they run
    its BIRD through its own loader, as the embedded peers do): the container bundle's when
    PROFILES has bird, else made here; None when the bird image is not built (the peers' hosts
    then get no BIRD, and a PEERING run on the lab says to run hosts-setup after `make guest`)."""
    from routers.errors import RouterError

    for c in containers:
        if c["profile"] == "bird":
            return c["tar"]
    try:
        made = container_bundles(["bird"], out_dir, cache)
    except RouterError:
        return None
    return made[0]["tar"] if made else None
