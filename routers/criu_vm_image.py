"""The CRIU host VM image (``python -m routers criuvm``, part of ``make criu``), from Debian packages.

``CRIU_HOST=vm`` runs a whole ``HV=criu`` experiment inside one QEMU VM that boots Debian's
generic kernel (``linux-image-amd64``: soft-dirty page tracking, which ``criu pre-dump`` needs and
some host kernels lack) with *this machine's own root file system*, read-only over 9p under a
tmpfs overlay.  The suite, its venv, criu and the router rootfs are the ones on the host; only the
kernel differs.  Output in ``<cache>/criu-vm/``::

    vmlinuz         the generic Debian kernel
    initrd.img      busybox, the virtio/9p/overlay modules, /init (routers/criuvmfs/init)
    manifest.json   versions, hashes and ``modules_dir``: the kernel package's unpacked
                    ``lib/modules/<release>`` (depmod run on it), exported to the VM read-only

Idempotent: nothing is done when the manifest records the same inputs."""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from routers import debs, paths
from routers import host_image_parts as parts
from routers.build import (
    BUSYBOX_PACKAGE,
    cached_build,
    install_modules,
    kernel_image_package,
    read_manifest,
    single_kernel,
    staged_dir,
)
from routers.build import resolve_modules as _resolve_modules
from routers.errors import BuildError, NotBuiltError

log = logging.getLogger(__name__)

CRIUVM_FORMAT = 1
KERNEL_META = "linux-image-amd64"
#: modules /init loads before it can mount the root (the rest come from the exported modules_dir)
BOOT_MODULES = ("virtio_pci", "9pnet_virtio", "9p", "overlay")
INIT = Path(__file__).resolve().parent / "criuvmfs" / "init"
KERNEL, INITRD, MANIFEST = "vmlinuz", "initrd.img", "manifest.json"


@dataclass(frozen=True)
class CriuVmImage:
    """A built CRIU host VM image."""

    kernel: Path
    initrd: Path
    modules_dir: Path
    manifest: dict[str, Any]

    @property
    def release(self) -> str:
        """The VM kernel's release (``uname -r``)."""
        return str(self.manifest["kernel"]["release"])


def criuvm_dir(cache: Path | str | None = None) -> Path:
    """``<cache>/criu-vm``."""
    return paths.cache_dir(cache) / "criu-vm"


def criuvm_image(cache: Path | str | None = None) -> CriuVmImage:
    """The built image, or NotBuiltError naming the command that builds it."""
    d = criuvm_dir(cache)
    manifest = read_manifest(d, (KERNEL, INITRD), MANIFEST, CRIUVM_FORMAT, "CRIU host VM", "make criu")
    modules_dir = Path(manifest.get("modules_dir", ""))
    if not (modules_dir / "modules.dep").is_file():
        raise NotBuiltError(f"{modules_dir}/modules.dep is missing: run `python -m routers criuvm --force`")
    return CriuVmImage(kernel=d / KERNEL, initrd=d / INITRD, modules_dir=modules_dir, manifest=manifest)


def resolve_inputs(cdir: Path) -> dict[str, Any]:
    """Pinned package versions (cached per apt state) and the recipe's hash."""

    def compute() -> dict[str, Any]:
        kpkg = kernel_image_package(KERNEL_META)
        return {"kernel_package": kpkg, "packages": debs.candidates({kpkg, BUSYBOX_PACKAGE})}

    recipe = hashlib.sha256(
        Path(__file__).read_bytes() + parts.SOURCE.read_bytes() + INIT.read_bytes() + repr(BOOT_MODULES).encode()
    )
    return parts.pinned_inputs(cdir, "criuvm", CRIUVM_FORMAT, compute, recipe.hexdigest())


def build(cache: Path | str | None = None, *, force: bool = False) -> tuple[CriuVmImage, bool, float]:
    """Build (or confirm up to date) the image; returns (image, built, seconds)."""
    return cached_build(paths.cache_dir(cache), "criuvm", resolve_inputs, criuvm_image, _build, force=force)


def _assemble(cdir: Path, inputs: dict[str, Any], fingerprint: str, t0: float, pools: dict[str, Path]) -> None:
    """The VM's rootfs (busybox, boot modules), its initrd and the kernel from the extracted
    packages, with the manifest, staged and swapped in."""
    pinned: dict[str, str] = inputs["packages"]
    kroot = pools[inputs["kernel_package"]]
    kver, vmlinuz = single_kernel(kroot, inputs["kernel_package"])
    config = (kroot / "boot" / f"config-{kver}").read_text().splitlines()
    if "CONFIG_MEM_SOFT_DIRTY=y" not in config:
        raise BuildError(f"{kver} has no CONFIG_MEM_SOFT_DIRTY: criu pre-dump would not work in the VM either")
    moddir = kroot / "lib" / "modules" / kver
    # the VM loads the rest of its modules on demand (veth, bridge, tbf, nf_tables, ...)
    subprocess.run(["depmod", "-b", str(kroot), kver], check=True, capture_output=True)

    with staged_dir(criuvm_dir(cdir)) as stage:
        shutil.copyfile(vmlinuz, stage / KERNEL)
        rootfs = parts.busybox_rootfs(stage, pools[BUSYBOX_PACKAGE])
        root = rootfs.root
        order, builtin, missing = _resolve_modules(moddir, BOOT_MODULES)
        if missing:
            raise BuildError(f"{kver} lacks the boot modules {', '.join(missing)}")
        install_modules(rootfs, moddir, kver, order)
        (root / "init").unlink()  # busybox's init symlink: this image has its own /init
        rootfs.write("/init", INIT.read_bytes(), 0o755)
        parts.pack_initrd(root, stage / INITRD, compresslevel=6)
        manifest = {
            **parts.manifest_head(CRIUVM_FORMAT, t0, fingerprint),
            "kernel": {
                "package": inputs["kernel_package"],
                "version": pinned[inputs["kernel_package"]],
                "release": kver,
                "soft_dirty": True,
            },
            "boot_modules": {"load_order": [ko.name.removesuffix(".ko") for ko in order], "builtin": builtin},
            "modules_dir": str(moddir),
            "packages": pinned,
            "files": parts.file_facts(stage, (KERNEL, INITRD)),
        }
        (stage / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")


_build = parts.build_from_packages("criu-vm image", _assemble)
