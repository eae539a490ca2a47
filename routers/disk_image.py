"""Bootable router disk images from a recipe, with Debian's own tools (``python -m routers disk``).

Unlike :mod:`routers.build` (a kernel + initramfs the suite assembles itself), this builds an
ordinary BIOS-bootable disk as an operator would bring one: a Debian system installed by
``mmdebstrap`` (systemd, cloud-init, the router software) and configured at first boot by
cloud-init from a NoCloud seed (:func:`nocloud_seed`).  The suite uses it as a fixture it did not
build with its own builder.  Output in ``<cache>/images/<recipe>/``::

    disk.qcow2      the image (boot it through a per-boot overlay so it is never written)
    manifest.json   recipe, cache key, package versions, build date, SHA-256 and size

How, and why so:

* ``mmdebstrap`` (root mode, a directory): a Debian tree from one mirror
  (``$VRMIG_DEBIAN_MIRROR`` or deb.debian.org), no recommends, dpkg path filters for docs and
  locales; the recipe's ``rootfs/`` is synced in by mmdebstrap's own ``sync-in`` hook after the
  essential packages, so no shell string is ever passed (argv lists only, :func:`mmdebstrap_argv`).
  Units are enabled and masked with ``systemctl`` chrooted into the tree (the image's own systemd).
* No mount and no loop device anywhere: the root partition is ``mkfs.ext4 -d <tree>`` into a
  file, the boot partition a FAT16 file made by ``mkfs.vfat`` and filled with ``mcopy``, and
  ``syslinux --install`` writes its loader into that file through mtools.  ``sfdisk`` writes an
  MBR partition table into the raw disk, syslinux's ``mbr.bin`` the boot code, and the two
  partition files are copied in at their offsets (sparse), then ``qemu-img convert -O qcow2``.
  GRUB would need the partitions mounted (grub-install) or a loop device; extlinux too.
* The root is found by file-system label (``root=LABEL=<root_label>``, in ``/etc/fstab`` too), so
  nothing in the image names the build host's devices or UUIDs.
* The NoCloud seed is a small FAT file system labelled ``CIDATA`` made with ``mkfs.vfat`` and
  ``mcopy`` (Debian's dosfstools and mtools): no root, no mount, and it reads back with
  ``mtype`` (so unit tests can check it).  ``cloud-localds`` (cloud-image-utils) makes an ISO via
  genisoimage or a FAT image only through a loop mount; an ISO would need xorriso, a third tool.

Cached: nothing is done when ``manifest.json`` records the recipe's key
(:func:`routers.disk_recipe.recipe_key`) and ``disk.qcow2`` still matches its SHA-256.
Building needs root (mmdebstrap's root mode, chroot, file ownership in the ext4 tree).
"""

from __future__ import annotations

import datetime
import hashlib
import json
import logging
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from migrate.core import privapt
from routers import paths
from routers.disk_recipe import Recipe, load, recipe_key
from routers.errors import BuildError, DependencyError, SeedError

log = logging.getLogger(__name__)

DISK_NAME = "disk.qcow2"
MANIFEST_NAME = "manifest.json"
MANIFEST_FORMAT = 1
SECTOR_BYTES = 512
MIB = 1024 * 1024
#: the first partition starts at 1 MiB (sector 2048): MBR, alignment
FIRST_LBA = 2048
SEED_LABEL = "CIDATA"
SEED_KIB = 1024
SEED_FILES = ("meta-data", "user-data", "network-config")
#: where Debian's syslinux-common keeps the MBR boot code
MBR_CANDIDATES = (Path("/usr/lib/syslinux/mbr/mbr.bin"), Path("/usr/share/syslinux/mbr.bin"))
#: Debian packages the disk builder and the seed builder run on the host (Makefile APT_PACKAGES)
HOST_PACKAGES = (
    "mmdebstrap",
    "e2fsprogs",
    "dosfstools",
    "mtools",
    "syslinux",
    "syslinux-common",
    "fdisk",
    "qemu-utils",
)
TOOLS = ("mmdebstrap", "mkfs.ext4", "mkfs.vfat", "mcopy", "mmd", "syslinux", "sfdisk", "qemu-img", "chroot")
MMDEBSTRAP_TIMEOUT_S = 1800.0
TOOL_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class DiskImage:
    """A built disk image and its manifest."""

    disk: Path
    manifest: dict[str, Any]


@dataclass(frozen=True)
class DiskBuild:
    """The result of :func:`build`: the image, whether it was built now, and how long that took."""

    image: DiskImage
    built: bool
    seconds: float


def image_dir(recipe_name: str, cache: Path | str | None = None) -> Path:
    """``<cache>/images/<recipe>``."""
    return paths.cache_dir(cache) / "images" / recipe_name


def _run(
    argv: list[str],
    timeout: float = TOOL_TIMEOUT_S,
    stdin: str | None = None,
    packages: tuple[str, ...] = HOST_PACKAGES,
) -> str:
    """Run ``argv`` (a list, never a shell string); its stdout, or BuildError with its last lines
    (a missing program: DependencyError naming ``packages``)."""
    log.debug("running %s", " ".join(argv[:4]) + (" ..." if len(argv) > 4 else ""))
    try:
        res = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=timeout, check=False)
    except FileNotFoundError:
        raise DependencyError(f"{argv[0]} not found: install {' '.join(packages)} (make apt)") from None
    except subprocess.TimeoutExpired:
        raise BuildError(f"{' '.join(argv[:3])} ... did not finish within {timeout:.0f} s") from None
    if res.returncode != 0:
        tail = " | ".join((res.stderr.strip() or res.stdout.strip()).splitlines()[-4:])
        raise BuildError(f"{' '.join(argv[:3])} ... failed (exit {res.returncode}): {tail}")
    return res.stdout


def mmdebstrap_argv(recipe: Any, target: Path, mirror: str = privapt.MIRROR) -> list[str]:
    """The mmdebstrap command line that installs ``recipe`` (a disk recipe, or any recipe with its
    [debian] fields and ``overlay``: routers.oci_image) into the directory ``target``."""
    argv = [
        "mmdebstrap",
        "--mode=root",
        "--format=directory",
        f"--variant={recipe.variant}",
        f"--architectures={recipe.architecture}",
        f"--include={','.join(recipe.packages)}",
        "--aptopt=Acquire::Languages=none",
    ]
    argv += [f"--dpkgopt=path-exclude={p}" for p in recipe.path_exclude]
    argv += [f"--dpkgopt=path-include={p}" for p in recipe.path_include]
    if recipe.overlay is not None:
        argv.append(f"--essential-hook=sync-in {recipe.overlay} /")
    argv += [recipe.suite, str(target), mirror]
    return argv


def syslinux_cfg(recipe: Recipe) -> str:
    """``syslinux.cfg`` of the boot partition: no menu, no wait, the loader's lines on ttyS0 too."""
    return (
        "SERIAL 0 115200\n"
        "DEFAULT linux\n"
        "PROMPT 0\n"
        "TIMEOUT 0\n"
        "LABEL linux\n"
        "  KERNEL /vmlinuz\n"
        f"  APPEND initrd=/initrd.img root=LABEL={recipe.root_label} {recipe.kernel_cmdline}\n"
    )


#: systemd-boot's UEFI binary in the image's own tree (Debian's systemd-boot-efi)
SYSTEMD_BOOT_EFI = Path("usr/lib/systemd/boot/efi/systemd-bootx64.efi")


def loader_conf() -> str:
    """systemd-boot's ``loader/loader.conf``: the one entry, no menu, no wait."""
    return "default vrmig.conf\ntimeout 0\nconsole-mode keep\n"


def loader_entry(recipe: Recipe) -> str:
    """systemd-boot's ``loader/entries/vrmig.conf``: the kernel and initrd of the ESP, the root by label."""
    return (
        "title vrmig router\n"
        "linux /vmlinuz\n"
        "initrd /initrd.img\n"
        f"options root=LABEL={recipe.root_label} {recipe.kernel_cmdline}\n"
    )


def fstab(recipe: Recipe) -> str:
    """``/etc/fstab``: the root by label, no fsck pass (the file system is new; no boot waits for it)."""
    return f"LABEL={recipe.root_label} / ext4 defaults,noatime 0 0\n"


def sfdisk_script(recipe: Recipe) -> str:
    """The MBR layout: a bootable FAT16 (type c) boot partition, then the Linux root partition."""
    boot_sectors = recipe.boot_mib * MIB // SECTOR_BYTES
    root_sectors = recipe.root_mib * MIB // SECTOR_BYTES
    return (
        "label: dos\nunit: sectors\n\n"
        f"start={FIRST_LBA}, size={boot_sectors}, type={'ef' if recipe.firmware == 'uefi' else 'c'}, bootable\n"
        f"start={FIRST_LBA + boot_sectors}, size={root_sectors}, type=83\n"
    )


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(MIB), b""):
            h.update(chunk)
    return h.hexdigest()


def _copy_sparse(src: Path, dst: Path, offset: int) -> None:
    """Write ``src`` into ``dst`` at byte ``offset``, skipping all-zero MiB chunks (they stay holes)."""
    zero = bytes(MIB)
    with src.open("rb") as fi, dst.open("r+b") as fo:
        pos = offset
        for chunk in iter(lambda: fi.read(MIB), b""):
            if chunk != zero[: len(chunk)]:
                fo.seek(pos)
                fo.write(chunk)
            pos += len(chunk)


def _mbr_code() -> bytes:
    for p in MBR_CANDIDATES:
        if p.is_file():
            return p.read_bytes()[:440]
    raise DependencyError(f"syslinux MBR code not found ({MBR_CANDIDATES[0]}): install syslinux-common (make apt)")


def _check_host() -> None:
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if missing:
        raise DependencyError(f"{', '.join(missing)} not found: install {' '.join(HOST_PACKAGES)} (make apt)")
    if os.geteuid() != 0:
        raise DependencyError("building a disk image needs root (mmdebstrap --mode=root, chroot): run as root")


def installed_versions(root: Path) -> dict[str, str]:
    """{package: version} of every package installed in the tree ``root``."""
    out = _run(["dpkg-query", f"--admindir={root}/var/lib/dpkg", "-W", "-f=${Package}\t${Version}\t${Status}\n"])
    versions: dict[str, str] = {}
    for line in out.splitlines():
        name, version, status = [*line.split("\t"), "", ""][:3]
        if status.endswith(" installed"):
            versions[name] = version
    return versions


def reported_versions(recipe: Recipe, versions: dict[str, str]) -> dict[str, str]:
    """The versions the recipe's ``report_versions`` names (``name*`` matches a prefix)."""
    out: dict[str, str] = {}
    for pattern in recipe.report_versions:
        if pattern.endswith("*"):
            out.update({k: v for k, v in versions.items() if k.startswith(pattern[:-1])})
        elif pattern in versions:
            out[pattern] = versions[pattern]
    return dict(sorted(out.items()))


def _single(boot: Path, glob: str) -> Path:
    found = sorted(boot.glob(glob))
    if len(found) != 1:
        raise BuildError(f"{boot}: expected one {glob}, found {[p.name for p in found]}: check the kernel packages")
    return found[0]


def _configure_tree(recipe: Recipe, root: Path) -> str:
    """fstab, units, machine-id of the installed tree; the kernel release."""
    (root / "etc" / "fstab").write_text(fstab(recipe))
    if recipe.enable_units:
        _run(["chroot", str(root), "systemctl", "enable", *recipe.enable_units])
    if recipe.mask_units:
        _run(["chroot", str(root), "systemctl", "mask", *recipe.mask_units])
    (root / "etc" / "machine-id").write_text("")  # a new one at each first boot
    if recipe.root_password is not None:
        _run(["chroot", str(root), "chpasswd"], stdin=f"root:{recipe.root_password}\n")
    kernel = _single(root / "boot", "vmlinuz-*")
    return kernel.name.removeprefix("vmlinuz-")


def _boot_partition(recipe: Recipe, root: Path, release: str, work: Path) -> Path:
    """The FAT16 boot partition file: the kernel and the initrd, and syslinux with its config
    (BIOS) or, as the EFI system partition, the tree's systemd-boot as the removable-media
    loader ``EFI/BOOT/BOOTX64.EFI`` with its loader entry (UEFI: no NVRAM boot entry needed)."""
    boot = work / "boot.vfat"
    _run(["mkfs.vfat", "-F", "16", "-n", recipe.boot_label, "-C", str(boot), str(recipe.boot_mib * 1024)])
    img = f"-i{boot}"
    _run(["mcopy", img, str(root / "boot" / f"vmlinuz-{release}"), "::vmlinuz"])
    _run(["mcopy", img, str(root / "boot" / f"initrd.img-{release}"), "::initrd.img"])
    if recipe.firmware == "uefi":
        efi = root / SYSTEMD_BOOT_EFI
        if not efi.is_file():
            raise BuildError(f"{efi} is not in the tree: add systemd-boot-efi to the recipe's packages")
        for d in ("::EFI", "::EFI/BOOT", "::loader", "::loader/entries"):
            _run(["mmd", img, d])
        (work / "loader.conf").write_text(loader_conf())
        (work / "vrmig.conf").write_text(loader_entry(recipe))
        _run(["mcopy", img, str(efi), "::EFI/BOOT/BOOTX64.EFI"])
        _run(["mcopy", img, str(work / "loader.conf"), "::loader/loader.conf"])
        _run(["mcopy", img, str(work / "vrmig.conf"), "::loader/entries/vrmig.conf"])
        return boot
    cfg = work / "syslinux.cfg"
    cfg.write_text(syslinux_cfg(recipe))
    _run(["mcopy", img, str(cfg), "::syslinux.cfg"])
    _run(["syslinux", "--install", str(boot)])
    return boot


def _root_partition(recipe: Recipe, root: Path, work: Path) -> Path:
    part = work / "root.ext4"
    _run(["mkfs.ext4", "-q", "-F", "-L", recipe.root_label, "-d", str(root), str(part), f"{recipe.root_mib}M"])
    return part


def _assemble(recipe: Recipe, boot: Path, rootfs: Path, work: Path) -> Path:
    """The raw disk: MBR table (sfdisk), boot code, both partitions at their offsets."""
    raw = work / "disk.raw"
    with raw.open("wb") as f:
        f.truncate(recipe.size_mib * MIB)
    _run(["sfdisk", "--no-reread", "--no-tell-kernel", "-q", str(raw)], stdin=sfdisk_script(recipe))
    with raw.open("r+b") as f:
        f.write(_mbr_code())
    _copy_sparse(boot, raw, FIRST_LBA * SECTOR_BYTES)
    _copy_sparse(rootfs, raw, FIRST_LBA * SECTOR_BYTES + recipe.boot_mib * MIB)
    return raw


def _tool_versions() -> dict[str, str]:
    out = {}
    for tool, argv in (("mmdebstrap", ["mmdebstrap", "--version"]), ("syslinux", ["syslinux", "--version"])):
        res = subprocess.run(argv, capture_output=True, text=True, check=False)
        out[tool] = (res.stdout.strip() or res.stderr.strip()).splitlines()[0] if res.stdout or res.stderr else "?"
    return out


def mounts_under(path: Path, mountinfo: str | None = None) -> list[str]:
    """Mount points at or below ``path`` (from ``/proc/self/mountinfo`` unless ``mountinfo`` is given)."""
    if mountinfo is None:
        try:
            mountinfo = Path("/proc/self/mountinfo").read_text()
        except OSError:
            return []
    prefix = str(path.resolve()).rstrip("/")
    found = []
    for line in mountinfo.splitlines():
        fields = line.split()
        if len(fields) > 4:
            point = fields[4].replace("\\040", " ")
            if point == prefix or point.startswith(prefix + "/"):
                found.append(point)
    return found


def _remove_work(work: Path) -> None:
    """Remove the build directory, unless something is still mounted in it (mmdebstrap's /proc,
    /sys or device binds after a kill): deleting through those would reach the host's files."""
    mounted = mounts_under(work)
    if mounted:
        log.error("not removing %s: still mounted there: %s (umount them, then remove it)", work, ", ".join(mounted))
        return
    shutil.rmtree(work, ignore_errors=True)


def read_image(recipe_name: str, cache: Path | str | None = None) -> DiskImage | None:
    """The built image of ``recipe_name`` if its manifest and disk are there, else None."""
    d = image_dir(recipe_name, cache)
    try:
        manifest = json.loads((d / MANIFEST_NAME).read_text())
    except (OSError, ValueError):
        return None
    if manifest.get("format") != MANIFEST_FORMAT or not (d / DISK_NAME).is_file():
        return None
    return DiskImage(disk=d / DISK_NAME, manifest=manifest)


def up_to_date(recipe: Recipe, cache: Path | str | None = None) -> DiskImage | None:
    """The built image if it was built from this recipe content and is intact, else None."""
    image = read_image(recipe.name, cache)
    if image is None or image.manifest.get("recipe_key") != recipe_key(recipe):
        return None
    if image.manifest.get("disk", {}).get("sha256") != _sha256(image.disk):
        return None
    return image


def build(spec: str | Path, cache: Path | str | None = None, force: bool = False) -> DiskBuild:
    """Build the disk image of the recipe ``spec`` (name or directory) unless it is up to date."""
    recipe = load(spec)
    t0 = time.monotonic()
    if not force and (image := up_to_date(recipe, cache)) is not None:
        return DiskBuild(image=image, built=False, seconds=time.monotonic() - t0)
    _check_host()
    out = image_dir(recipe.name, cache)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".build-", dir=out))
    try:
        root = work / "root"
        _run(mmdebstrap_argv(recipe, root), MMDEBSTRAP_TIMEOUT_S)
        release = _configure_tree(recipe, root)
        versions = installed_versions(root)
        boot = _boot_partition(recipe, root, release, work)
        raw = _assemble(recipe, boot, _root_partition(recipe, root, work), work)
        tmp_disk = work / DISK_NAME
        _run(["qemu-img", "convert", "-f", "raw", "-O", "qcow2", str(raw), str(tmp_disk)])
        seconds = time.monotonic() - t0
        manifest = {
            "format": MANIFEST_FORMAT,
            "recipe": recipe.name,
            "recipe_dir": str(recipe.directory),
            "recipe_key": recipe_key(recipe),
            "description": recipe.description,
            "suite": recipe.suite,
            "variant": recipe.variant,
            "mirror": privapt.MIRROR,
            "built": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "build_seconds": round(seconds, 1),
            "kernel_release": release,
            "kernel_cmdline": f"root=LABEL={recipe.root_label} {recipe.kernel_cmdline}",
            "firmware": recipe.firmware,
            "versions": reported_versions(recipe, versions),
            "packages": versions,
            "tools": _tool_versions(),
            "disk": {
                "file": DISK_NAME,
                "sha256": _sha256(tmp_disk),
                "bytes": tmp_disk.stat().st_size,
                "virtual_bytes": recipe.size_mib * MIB,
            },
        }
        os.replace(tmp_disk, out / DISK_NAME)
        (out / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2) + "\n")
    finally:
        _remove_work(work)
    image = read_image(recipe.name, cache)
    if image is None:
        raise BuildError(f"{out}: the image was built but cannot be read back: rerun with --force")
    return DiskBuild(image=image, built=True, seconds=seconds)


def seed_argv(out: Path) -> list[list[str]]:
    """The commands that make the empty seed file system ``out`` (FAT, label CIDATA)."""
    return [["mkfs.vfat", "-n", SEED_LABEL, "-C", str(out), str(SEED_KIB)]]


def nocloud_seed(out: Path, user_data: str, meta_data: str, network_config: str | None) -> Path:
    """A NoCloud seed disk at ``out`` (raw FAT, label ``CIDATA``) holding ``user-data``,
    ``meta-data`` and, if given, ``network-config``; attach it read-only (``format=raw``)."""
    if shutil.which("mkfs.vfat") is None or shutil.which("mcopy") is None:
        raise DependencyError("mkfs.vfat or mcopy not found: install dosfstools and mtools (make apt)")
    if not user_data.startswith("#cloud-config") and not user_data.startswith("#!"):
        raise SeedError("user-data must start with '#cloud-config' (or '#!' for a script): cloud-init ignores it")
    out = Path(out)
    out.unlink(missing_ok=True)
    contents = {"meta-data": meta_data, "user-data": user_data}
    if network_config is not None:
        contents["network-config"] = network_config
    with tempfile.TemporaryDirectory(prefix="vrmig-seed-") as tmp:
        for argv in seed_argv(out):
            _run(argv)
        for name, text in contents.items():
            src = Path(tmp) / name
            src.write_text(text)
            _run(["mcopy", f"-i{out}", str(src), f"::{name}"])
    return out
