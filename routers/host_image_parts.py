"""Parts the host images built from Debian packages share (the CRIU host VM image,
:mod:`routers.criu_vm_image`, and the nested Xen host image, :mod:`routers.xen_image`): a busybox
root file system staged for the initrd, its packing into a gzip newc initrd, and the fields their
manifests start and end with.  An image's recipe hash covers this module's source
(:data:`SOURCE`) beside its own."""

from __future__ import annotations

import gzip
import io
import shutil
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from routers import cpio, debs
from routers.build import Rootfs, _add_busybox, apt_state, cached_resolution
from routers.guest import sha256_file

#: this module's source, part of each image's recipe hash (it shapes the images it packs)
SOURCE = Path(__file__).resolve()

#: ``assemble(cdir, inputs, fingerprint, t0, pools)``: an image built from the extracted packages
Assemble = Callable[[Path, dict[str, Any], str, float, dict[str, Path]], None]


def pinned_inputs(
    cdir: Path, name: str, image_format: int, compute: Callable[[], dict[str, Any]], recipe_sha256: str
) -> dict[str, Any]:
    """An image's inputs: ``compute()``'s pinned packages (cached per apt state), its format and recipe hash."""
    key = {"apt_state": apt_state(), "format": image_format}
    value = cached_resolution(cdir / f"resolved-{name}.json", key, compute)
    return {**value, "format": image_format, "recipe_sha256": recipe_sha256}


def build_from_packages(label: str, assemble: Assemble) -> Callable[[Path, dict[str, Any], str, float], None]:
    """A build step for routers.build.cached_build: fetch the pinned ``packages``, then ``assemble`` from them."""

    def build(cdir: Path, inputs: dict[str, Any], fingerprint: str, t0: float) -> None:
        debs.fetch_and_assemble(
            label, inputs["packages"], cdir, lambda pools: assemble(cdir, inputs, fingerprint, t0, pools)
        )

    return build


def busybox_rootfs(stage: Path, busybox: Path) -> Rootfs:
    """A new root file system at ``<stage>/rootfs`` with busybox from its extracted package ``busybox``."""
    root = stage / "rootfs"
    root.mkdir()
    rootfs = Rootfs(root)
    _add_busybox(rootfs, busybox)
    return rootfs


def pack_initrd(root: Path, dest: Path, compresslevel: int) -> int:
    """Write ``root`` (plus /dev/console) to ``dest`` as a gzip newc initrd, remove ``root``, return the cpio bytes."""
    raw = io.BytesIO()
    size = cpio.write(raw, [*cpio.tree_entries(root), cpio.char_device("dev/console", 5, 1, 0o600)])
    dest.write_bytes(gzip.compress(raw.getvalue(), compresslevel=compresslevel, mtime=0))
    shutil.rmtree(root)
    return size


def manifest_head(image_format: int, t0: float, fingerprint: str) -> dict[str, Any]:
    """The fields a host image's manifest starts with: format, build time and length, the inputs' hash."""
    return {
        "format": image_format,
        "built_at": datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
        "build_seconds": round(time.monotonic() - t0, 1),
        "inputs_sha256": fingerprint,
    }


def file_facts(stage: Path, names: Iterable[str]) -> dict[str, dict[str, Any]]:
    """A manifest's ``files``: SHA-256 and size of each named file in ``stage``."""
    return {n: {"sha256": sha256_file(stage / n), "bytes": (stage / n).stat().st_size} for n in names}
