"""Booting a router image the suite did not build: its disk, a per-run overlay and its
configuration medium.

Each run boots from its own qcow2 overlay on the profile's image (``qemu-img create -b``), so the
image itself is never written and every run starts from the same state.  On the embedded
testbed R1's and R2's QEMU open the same overlay file: migration moves memory and device state
only, as paper 004's testbed shares the router's storage between both hosts; QEMU's destination
holds its images inactive until the migration completes, so the two never write at once.

The configuration reaches the router as the profile's ``[config] method`` says; ``nocloud``
renders the profile's template into cloud-init's user-data and attaches it as a read-only NoCloud
seed disk (label ``cidata``) beside the overlay (the seed's instance-id names the run, so
cloud-init configures every boot of the image afresh); ``console`` renders it into the commands
the suite types on the router's serial console once it has booted
(migrate.drivers.console_config)."""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from migrate.core.errors import DependencyError
from migrate.drivers.guest_vm import GuestDisk, UefiFirmware

QEMU_IMG = "qemu-img"
QEMU_IMG_TIMEOUT_S = 60.0
OVERLAY_NAME = "router-disk.qcow2"
SEED_NAME = "router-seed.img"
USER_DATA_NAME = "router-user-data"
#: the rendered configuration as the run's directory keeps it, by config method
CONFIG_NAMES = {"nocloud": USER_DATA_NAME, "console": "router-console-commands"}


#: Debian's ovmf: EDK II for x86-64 without Secure Boot, 4 MiB flash (code and its variable store's template)
OVMF_CODE = Path("/usr/share/OVMF/OVMF_CODE_4M.fd")
OVMF_VARS = Path("/usr/share/OVMF/OVMF_VARS_4M.fd")
EFIVARS_NAME = "router-efivars.fd"


@dataclass(frozen=True)
class BootMedia:
    """What one run boots: the overlay (on the profile's image), the seed (None without one) and,
    for a UEFI image, the run's copy of the firmware's variable store, as paths on the host that
    opens them, and the rendered configuration kept in the results."""

    overlay: Path
    seed: Path | None
    config_text: str | None
    efivars: Path | None = None

    def uefi(self) -> UefiFirmware | None:
        """The UEFI firmware this image boots with (None: BIOS)."""
        return None if self.efivars is None else UefiFirmware(OVMF_CODE, self.efivars)

    def disks(self) -> tuple[GuestDisk, ...]:
        """The router VM's disks in guest order: the overlay first (the BIOS boots it), then the seed."""
        out = [GuestDisk(self.overlay, "qcow2")]
        if self.seed is not None:
            out.append(GuestDisk(self.seed, "raw", readonly=True))
        return tuple(out)


def image_info(path: Path) -> dict[str, Any]:
    """``qemu-img info`` of ``path`` (format, virtual size, backing file) as QEMU reads it."""
    try:
        done = subprocess.run(
            [QEMU_IMG, "info", "--output=json", "-U", str(path)],
            capture_output=True, text=True, timeout=QEMU_IMG_TIMEOUT_S, check=False,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as err:
        raise DependencyError(f"{QEMU_IMG} info {path} failed: {err}: install qemu-utils (make setup)") from err
    if done.returncode != 0:
        raise DependencyError(f"{QEMU_IMG} cannot read {path}: {done.stderr.strip()}")
    info: dict[str, Any] = json.loads(done.stdout)
    return info


def make_overlay_argv(base: str, fmt: str, out: str) -> list[str]:
    """``qemu-img create`` of a qcow2 ``out`` backed by ``base`` (an absolute path, format ``fmt``)."""
    return [QEMU_IMG, "create", "-q", "-f", "qcow2", "-b", base, "-F", fmt, out]


def make_overlay(base: Path, fmt: str, out: Path) -> Path:
    """A qcow2 file ``out`` whose reads fall through to ``base`` (of format ``fmt``) and which
    takes every write; ``base`` stays untouched."""
    argv = make_overlay_argv(str(base.resolve()), fmt, str(out))
    done = subprocess.run(argv, capture_output=True, text=True, timeout=QEMU_IMG_TIMEOUT_S, check=False)
    if done.returncode != 0:
        raise DependencyError(f"{QEMU_IMG} create (overlay on {base}) failed: {done.stderr.strip()}")
    return out


def meta_data(instance_id: str, hostname: str) -> str:
    """cloud-init's NoCloud meta-data: a new instance-id makes cloud-init run its modules again."""
    return f"instance-id: {instance_id}\nlocal-hostname: {hostname}\n"


def prepare(profile: Any, settings: Any, out_dir: Path, instance_id: str) -> BootMedia:
    """The boot media of one run of ``profile`` in ``out_dir``: an overlay on its disk image
    and, for ``[config] method = "nocloud"``, the seed with its template rendered from the
    testbed and ``settings``' PEERING (``config_text``: the rendered user-data, for the results)."""
    from migrate.model.router_config import testbed_context
    from routers.disk_image import nocloud_seed
    from routers.profile_file import render_config

    image = profile.image
    overlay = make_overlay(Path(image.disk), image.format, out_dir / OVERLAY_NAME)
    efivars = None
    if image.firmware == "uefi":  # the image's own variable store, from the firmware's template
        efivars = out_dir / EFIVARS_NAME
        shutil.copyfile(require_ovmf()[1], efivars)
    if profile.config.method not in CONFIG_NAMES:
        return BootMedia(overlay, None, None, efivars)
    text = render_config(profile, testbed_context(profile, settings))
    if profile.config.method == "console":  # typed after boot (migrate.drivers.console_config)
        return BootMedia(overlay, None, text, efivars)
    seed = nocloud_seed(out_dir / SEED_NAME, text, meta_data(instance_id, profile.router.name), None)
    return BootMedia(overlay, seed, text, efivars)


def require_ovmf() -> tuple[Path, Path]:
    """The host's OVMF code and variable-store template, or DependencyError naming the package."""
    missing = [str(p) for p in (OVMF_CODE, OVMF_VARS) if not p.is_file()]
    if missing:
        raise DependencyError(f"{', '.join(missing)} not found: a UEFI router image needs Debian's ovmf (make apt)")
    return OVMF_CODE, OVMF_VARS


def check_config(profile: Any, settings: Any) -> None:
    """Render the profile's template for ``settings`` once, before the run builds anything: a
    template that fails is one ProfileFileError line (exit 2) naming the template and its line."""
    from migrate.model.router_config import testbed_context
    from routers.profile_file import render_config

    if profile.config.template is not None:
        render_config(profile, testbed_context(profile, settings))


def _uefi_facts() -> dict[str, Any]:
    """The OVMF a UEFI image boots with: its files and the ovmf package's version (None if dpkg
    cannot tell)."""
    code, template = require_ovmf()
    done = subprocess.run(["dpkg-query", "-W", "-f=${Version}", "ovmf"], capture_output=True, text=True, check=False)
    return {
        "code": str(code),
        "vars_template": str(template),
        "ovmf": done.stdout.strip() or None if done.returncode == 0 else None,
        "secure_boot": False,
    }


def describe_image(profile: Any) -> dict[str, Any]:
    """meta.json ``guest_image`` of a profile's disk: the profile file, the image as QEMU reads it
    (format, virtual size) and, when a recipe built it, that build's manifest (package versions,
    sha256)."""
    image = profile.image
    info = image_info(Path(image.disk))
    manifest_path = Path(image.disk).parent / "manifest.json"
    manifest: dict[str, Any] | None = None
    if manifest_path.is_file():
        try:
            manifest = json.loads(manifest_path.read_text())
        except ValueError:
            manifest = None
    return {
        "profile": str(profile.path),
        "name": profile.router.name,
        "disk": str(image.disk),
        "format": info.get("format"),
        "virtual_size_bytes": info.get("virtual-size"),
        "firmware": image.firmware,
        "uefi": _uefi_facts() if image.firmware == "uefi" else None,
        "config_method": profile.config.method,
        "recipe": image.recipe,
        "manifest": manifest,
        "router": {
            "software": profile.router.software,
            "version": profile.router.version or (manifest or {}).get("versions", {}).get(profile.router.software),
            "source": f"profile {profile.path}",
        },
    }
