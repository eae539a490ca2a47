"""The nested Xen host image (``make xen`` = ``python -m routers xen``), from Debian packages.

Output in ``<cache>/xen/`` (downloaded with ``apt-get download``, unpacked with ``dpkg-deb -x``,
never installed on this machine)::

    xen.elf           the hypervisor (xen-hypervisor-4.17-amd64's xen-4.17-amd64.gz, gunzipped:
                      a multiboot ELF that QEMU's -kernel loads, no GRUB needed)
    dom0-vmlinuz      dom0's kernel: the generic linux-image-amd64 (the cloud flavour has no
                      CONFIG_XEN_DOM0)
    dom0-initrd.img   dom0's userspace (gzip newc cpio): busybox, xl and the xen tools of the
                      hypervisor's version with their libraries, xenstore-utils, socat, the
                      Xen backend / bridge / NIC / virtio-serial modules, /init (xenfs/dom0-init)
    manifest.json     versions, hashes, the hypervisor's build facts (shadow paging or not)
    router-<profile>/ the router domU for a profile (built on demand by :func:`host_initrd`):
        payload.cpio      /xen/domu/{vmlinuz,initrd.img}: the KVM guest's kernel and initrd,
                          the initrd extended by a second cpio member with xen-netfront
        dom0-initrd.img   dom0-initrd.img + payload.cpio (Linux unpacks concatenated archives)

The router domU boots the same kernel, initrd and kernel command line contract as the KVM guest
(:mod:`routers.guest`); only its console is ``hvc0`` and it loads ``xen-netfront`` first.
Idempotent like the guest build: nothing is done when the manifest records the same inputs."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import logging
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from migrate.core.atomic import write_bytes
from routers import cpio, debs, paths
from routers import host_image_parts as parts
from routers.build import (
    BUSYBOX_PACKAGE,
    LibraryResolver,
    Rootfs,
    cached_build,
    install_modules,
    kernel_image_package,
    read_manifest,
    resolve_modules,
    single_kernel,
    staged_dir,
)
from routers.errors import BuildError, NotBuiltError
from routers.guest import guest_image, sha256_file

log = logging.getLogger(__name__)

XEN_FORMAT = 2
XEN_VERSION = "4.17"
HYPERVISOR_PACKAGE = f"xen-hypervisor-{XEN_VERSION}-amd64"
UTILS_PACKAGE = f"xen-utils-{XEN_VERSION}"
XENSTORE_PACKAGE = "xenstore-utils"
SOCAT_PACKAGE = "socat"
#: sshd in dom0: started only when the initrd carries /etc/vrmig/sshd_config (an emulated lab's
#: Xen host, reached like a real dom0 over SSH; :mod:`migrate.labs.emulated`)
SSH_PACKAGE = "openssh-server"
SSHD = "/usr/sbin/sshd"
DOM0_KERNEL_META = "linux-image-amd64"
XEN_BIN = f"/usr/lib/xen-{XEN_VERSION}/bin"
#: xen-utils binaries dom0 needs: the toolstack, its save/restore helper and the daemons
XEN_TOOLS = ("xl", "libxl-save-helper", "xenstored", "xenconsoled", "xen-init-dom0", "xenconsole")
XENSTORE_TOOLS = ("xenstore-read", "xenstore-write", "xenstore-rm", "xenstore-ls", "xenstore-watch",
                  "xenstore-list", "xenstore-exists", "xenstore-chmod")  # fmt: skip
#: dom0 kernel modules (plus dependencies): Xen device files, netback, bridge, NICs, control port
DOM0_MODULES = ("xenfs", "xen_evtchn", "xen_gntdev", "xen_gntalloc", "xen_privcmd", "xen_netback", "bridge",
                "virtio_pci", "virtio_net", "virtio_console", "e1000")  # fmt: skip
#: the router domU's extra module (the KVM guest image has only virtio/e1000 NIC drivers)
DOMU_MODULES = ("xen_netfront",)
XENFS = Path(__file__).resolve().parent / "xenfs"
GZIP_LEVEL = 6
XEN_ELF, DOM0_KERNEL, DOM0_INITRD, MANIFEST = "xen.elf", "dom0-vmlinuz", "dom0-initrd.img", "manifest.json"
DOMU_DIR = "/xen/domu"  # where dom0 keeps the router domU's kernel and initrd

XL_CONF = 'autoballoon="off"\nrun_hotplug_scripts=1\nlockfile="/var/lock/xl"\n'


@dataclass(frozen=True)
class XenImage:
    """A built nested Xen host image."""

    xen: Path
    kernel: Path
    initrd: Path
    manifest: dict[str, Any]

    @property
    def shadow_paging(self) -> bool | None:
        """Whether the hypervisor was built with shadow paging (PV guests' log-dirty needs it)."""
        return self.manifest.get("hypervisor", {}).get("shadow_paging")


def xen_dir(cache: Path | str | None = None) -> Path:
    """``<cache>/xen``."""
    return paths.cache_dir(cache) / "xen"


def xen_image(cache: Path | str | None = None, verify: bool = True) -> XenImage:
    """The built image, or NotBuiltError ("run `make xen`")."""
    d = xen_dir(cache)
    files = [d / n for n in (XEN_ELF, DOM0_KERNEL, DOM0_INITRD)]
    manifest = read_manifest(
        d, (XEN_ELF, DOM0_KERNEL, DOM0_INITRD), MANIFEST, XEN_FORMAT, "nested Xen host", "make xen"
    )
    if verify:
        for p in files:
            if manifest.get("files", {}).get(p.name, {}).get("sha256") != sha256_file(p):
                raise NotBuiltError(f"{p} does not match its manifest: run `python -m routers xen --force`")
    return XenImage(xen=files[0], kernel=files[1], initrd=files[2], manifest=manifest)


# ------------------------------------------------------------------------------------ inputs
def _recipe_sha256() -> str:
    h = hashlib.sha256(Path(__file__).read_bytes() + parts.SOURCE.read_bytes())
    for p in sorted(XENFS.iterdir()):
        h.update(p.name.encode() + b"\0" + p.read_bytes())
    h.update(json.dumps([XEN_FORMAT, XEN_TOOLS, XENSTORE_TOOLS, DOM0_MODULES, XL_CONF]).encode())
    return h.hexdigest()


def resolve_inputs(cdir: Path) -> dict[str, Any]:
    """Pinned package versions (cached per apt state) and the recipe's hash."""

    def compute() -> dict[str, Any]:
        kpkg = kernel_image_package(DOM0_KERNEL_META)
        libs: set[str] = set()
        for top in (UTILS_PACKAGE, XENSTORE_PACKAGE, SOCAT_PACKAGE, SSH_PACKAGE):
            libs.update(debs.library_closure(top))
        pinned = debs.candidates({HYPERVISOR_PACKAGE, kpkg, BUSYBOX_PACKAGE, *libs})
        if pinned[HYPERVISOR_PACKAGE] != pinned[UTILS_PACKAGE]:
            raise BuildError(f"{HYPERVISOR_PACKAGE} {pinned[HYPERVISOR_PACKAGE]} and {UTILS_PACKAGE} "
                             f"{pinned[UTILS_PACKAGE]} differ: the tools must match the hypervisor")  # fmt: skip
        return {"kernel_package": kpkg, "packages": pinned}

    return parts.pinned_inputs(cdir, "xen", XEN_FORMAT, compute, _recipe_sha256())


# ------------------------------------------------------------------------------------ build
def build(cache: Path | str | None = None, *, force: bool = False) -> tuple[XenImage, bool, float]:
    """Build (or confirm up to date) the image; returns (image, built, seconds)."""
    image, built, seconds = cached_build(paths.cache_dir(cache), "xen", resolve_inputs, xen_image, _build, force=force)
    if built:
        log.info("built the nested Xen host image in %.1f s", seconds)
    return image, built, seconds


def _hypervisor_config(text: str) -> dict[str, Any]:
    """Facts from the hypervisor's build config (``xen-4.17-amd64.config``)."""
    return {
        "shadow_paging": "CONFIG_SHADOW_PAGING=y" in text.splitlines(),
        "hvm": "CONFIG_HVM=y" in text.splitlines(),
        "pv": "CONFIG_PV=y" in text.splitlines(),
    }


def _assemble(cdir: Path, inputs: dict[str, Any], fingerprint: str, t0: float, pools: dict[str, Path]) -> None:
    """dom0's rootfs (Xen tools, busybox, modules), its initrd, the hypervisor and the dom0 kernel
    from the extracted packages, with the manifest, staged and swapped in."""
    pinned: dict[str, str] = inputs["packages"]
    hyp = pools[HYPERVISOR_PACKAGE] / "boot"
    kroot = pools[inputs["kernel_package"]]
    kver, vmlinuz = single_kernel(kroot, inputs["kernel_package"])
    gz = sorted(hyp.glob("xen-*-amd64.gz"))
    cfg = sorted(hyp.glob("xen-*-amd64.config"))
    if len(gz) != 1:
        raise BuildError(f"{HYPERVISOR_PACKAGE}: expected one xen-*-amd64.gz in /boot, found {[p.name for p in gz]}")
    hyp_facts = _hypervisor_config(cfg[0].read_text()) if cfg else {}

    with staged_dir(xen_dir(cdir)) as stage:
        (stage / XEN_ELF).write_bytes(gzip.decompress(gz[0].read_bytes()))
        shutil.copyfile(vmlinuz, stage / DOM0_KERNEL)
        rootfs = parts.busybox_rootfs(stage, pools[BUSYBOX_PACKAGE])
        root = rootfs.root
        modules = _add_modules(rootfs, kroot, kver)
        resolver = LibraryResolver([pools[p] for p in sorted(pools)], rootfs)
        for tool in XEN_TOOLS:
            resolver.add(pools[UTILS_PACKAGE], f"{XEN_BIN}/{tool}")
        for tool in XENSTORE_TOOLS:
            resolver.add(pools[XENSTORE_PACKAGE], f"/usr/bin/{tool}")
        resolver.add(pools[SOCAT_PACKAGE], "/usr/bin/socat")
        resolver.add(pools[SSH_PACKAGE], SSHD)
        resolver.add_soname("libgcc_s.so.1")
        if resolver.missing:
            raise BuildError(f"dom0: shared libraries not found in the packages: {', '.join(resolver.missing)}")
        (root / "init").unlink()  # busybox's init symlink: dom0 has its own /init
        rootfs.write("/init", (XENFS / "dom0-init").read_bytes(), 0o755)
        for name in ("vrmig-agent", "vrmig-vif"):
            rootfs.write(f"/usr/sbin/{name}", (XENFS / name).read_bytes(), 0o755)
        rootfs.write("/etc/xen/xl.conf", XL_CONF)
        # xl and the xenstore tools on the default PATH (an SSH session gets sshd's, not /init's)
        for tool in XEN_TOOLS:
            rootfs.symlink(f"/usr/sbin/{tool}", f"{XEN_BIN}/{tool}")
        # sshd's privilege separation user (its chroot: /run/sshd, made by /init)
        rootfs.write("/etc/passwd", "root:x:0:0:root:/root:/bin/sh\nsshd:x:100:65534::/run/sshd:/bin/false\n")
        rootfs.write("/etc/group", "root:x:0:\nnogroup:x:65534:\n")
        rootfs.write("/etc/hosts", "127.0.0.1 localhost\n")
        rootfs.write("/etc/vrmig/packages.json", json.dumps(pinned, indent=1, sort_keys=True) + "\n")
        for d in ("var/lib/xen", "var/log/xen", "var/lock", "xen/domu", "etc/xen/scripts"):
            (root / d).mkdir(parents=True, exist_ok=True)
        size = parts.pack_initrd(root, stage / DOM0_INITRD, compresslevel=GZIP_LEVEL)
        files = parts.file_facts(stage, (XEN_ELF, DOM0_KERNEL, DOM0_INITRD))
        files[DOM0_INITRD]["uncompressed_bytes"] = size
        manifest = {
            **parts.manifest_head(XEN_FORMAT, t0, fingerprint),
            "hypervisor": {"package": HYPERVISOR_PACKAGE, "version": pinned[HYPERVISOR_PACKAGE], **hyp_facts},
            "tools": {"package": UTILS_PACKAGE, "version": pinned[UTILS_PACKAGE]},
            "dom0_kernel": {
                "package": inputs["kernel_package"],
                "version": pinned[inputs["kernel_package"]],
                "release": kver,
            },
            "modules": modules,
            "packages": pinned,
            "files": files,
        }
        (stage / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")


_build = parts.build_from_packages("xen image", _assemble)


def _add_modules(rootfs: Rootfs, kroot: Path, kver: str) -> dict[str, Any]:
    moddir = kroot / "lib" / "modules" / kver
    order, builtin, missing = resolve_modules(moddir, DOM0_MODULES)
    lines = install_modules(rootfs, moddir, kver, order)
    return {"load_order": [Path(r).name.removesuffix(".ko") for r in lines], "builtin": builtin, "missing": missing}


# ------------------------------------------------------------------------------------ router domU
def _domu_overlay(profile: str, cache: Path | str | None) -> bytes:
    """A cpio member appended to the guest's initrd: xen-netfront and a module list that loads it
    first (later members replace earlier files when the kernel unpacks the initramfs)."""
    image = guest_image(profile, cache)
    kpkg = image.manifest["kernel_package"]
    kver = kpkg["release"]
    pool = paths.cache_dir(cache) / "pool"
    kroots = [p for p in pool.glob(f"{kpkg['name']}_*") if (p / "lib" / "modules" / kver).is_dir()]
    if not kroots:
        raise NotBuiltError(f"the guest kernel's modules ({kpkg['name']}) are not in {pool}: run `make setup`")
    moddir = kroots[0] / "lib" / "modules" / kver
    order, _builtin, missing = resolve_modules(moddir, DOMU_MODULES)
    if missing:
        raise BuildError(f"{kver} has no {', '.join(missing)}: the router cannot run as a Xen domU")
    entries: list[cpio.Entry] = []
    lines = []
    for ko in order:
        rel = ko.relative_to(moddir).as_posix()
        entries.append(cpio.Entry(f"lib/modules/{kver}/{rel}", 0o100644, ko.read_bytes()))
        lines.append(rel)
    if image.rootfs is None:
        raise NotBuiltError(f"router guest image {profile!r} has no rootfs/: run `make setup`")
    base = (image.rootfs / "etc/vrmig/modules").read_text()
    entries.append(cpio.Entry("etc/vrmig/modules", 0o100644, ("".join(f"{ln}\n" for ln in lines) + base).encode()))
    raw = io.BytesIO()
    cpio.write(raw, entries)
    return raw.getvalue()


def _pad4(archive: bytes) -> bytes:
    """Zero-pad to a multiple of 4: the kernel looks for the next concatenated archive there."""
    return archive + b"\0" * (-len(archive) % 4)


DOMU_INITRD = "domu-initrd.img"


def domu_files(profile: str, cache: Path | str | None = None) -> tuple[Path, Path]:
    """The router domU of ``profile``: (kernel, initrd), the files a Xen host's dom0 boots it
    from (a nested host has them in its initrd, :func:`host_initrd`; a real Xen host gets them
    copied by the driver).  Built with :func:`host_initrd`."""
    host_initrd(profile, cache)
    return guest_image(profile, cache, verify=False).kernel, xen_dir(cache) / f"router-{profile}" / DOMU_INITRD


def host_initrd(profile: str, cache: Path | str | None = None) -> Path:
    """dom0's initrd with the router domU of ``profile`` inside (``/xen/domu``); built on demand
    and reused while the Xen image and the guest image are unchanged."""
    image = xen_image(cache, verify=False)
    guest = guest_image(profile, cache, verify=False)
    key = hashlib.sha256(
        json.dumps([image.manifest["inputs_sha256"], guest.manifest.get("inputs_sha256"), _recipe_sha256()]).encode()
    ).hexdigest()[:16]
    d = xen_dir(cache) / f"router-{profile}"
    out = d / DOM0_INITRD
    stamp = d / "key"
    if out.is_file() and (d / DOMU_INITRD).is_file() and stamp.is_file() and stamp.read_text().strip() == key:
        return out
    d.mkdir(parents=True, exist_ok=True)
    # one gzip stream (libxc tries to gunzip a module and complains about trailing data)
    both = _pad4(gzip.decompress(guest.initrd.read_bytes())) + _domu_overlay(profile, cache)
    domu_initrd = gzip.compress(both, compresslevel=GZIP_LEVEL, mtime=0)
    write_bytes(d / DOMU_INITRD, domu_initrd)
    raw = io.BytesIO()
    cpio.write(
        raw,
        [
            cpio.directory("xen"),
            cpio.directory(DOMU_DIR.lstrip("/")),
            cpio.Entry(f"{DOMU_DIR.lstrip('/')}/vmlinuz", 0o100644, guest.kernel.read_bytes()),
            cpio.Entry(f"{DOMU_DIR.lstrip('/')}/initrd.img", 0o100644, domu_initrd),
        ],
    )
    write_bytes(d / "payload.cpio", raw.getvalue())
    write_bytes(out, _pad4(image.initrd.read_bytes()) + raw.getvalue())
    stamp.write_text(key + "\n")
    return out
