"""Disk image recipes: a directory with ``recipe.toml`` and an optional ``rootfs/`` overlay.

A recipe is data, never code: which Debian suite and packages (mmdebstrap), which systemd units
to enable or mask, the disk layout and the kernel command line.  ``rootfs/`` is copied into the
image after the essential packages and before the others are installed (so a kernel's initrd
already sees ``/etc/initramfs-tools/conf.d``).  The recipes kept in the repository live in
``routers/recipes/<name>/``; a path to any other directory works too.

The cache key (:func:`recipe_key`) is the SHA-256 of ``recipe.toml`` and every file under
``rootfs/`` (relative path, mode and content) plus :data:`BUILDER_FORMAT`: changing any of them
rebuilds, anything else beside them (notes, example seeds) does not.
"""

from __future__ import annotations

import hashlib
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from routers.errors import RecipeError

RECIPES_DIR = Path(__file__).resolve().parent / "recipes"
RECIPE_FILE = "recipe.toml"
OVERLAY_DIR = "rootfs"
RECIPE_FORMAT = 1
#: bumped when the builder lays out the same recipe differently (part of the cache key)
BUILDER_FORMAT = 1
VARIANTS = ("essential", "apt", "required", "minbase")
FIRMWARES = ("bios", "uefi")
_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9.+-]*$")
_LABEL_RE = re.compile(r"^[A-Za-z0-9_-]{1,16}$")
_FAT_LABEL_RE = re.compile(r"^[A-Z0-9_-]{1,11}$")
_KINDS: dict[type, str] = {int: "an integer", str: "a string", list: "a list", dict: "a table"}
UNIT_HELP = "a systemd unit name with its type (name.service, .timer, .socket, .mount, ...)"
_UNIT_RE = re.compile(r"^[A-Za-z0-9@._:-]+\.(service|timer|socket|target|mount|automount|path)$")


@dataclass(frozen=True)
class Recipe:
    """A parsed recipe (``recipe.toml``) and where it came from."""

    name: str
    directory: Path
    description: str
    suite: str
    variant: str
    architecture: str
    packages: tuple[str, ...]
    path_exclude: tuple[str, ...]
    path_include: tuple[str, ...]
    report_versions: tuple[str, ...]
    enable_units: tuple[str, ...]
    mask_units: tuple[str, ...]
    size_mib: int
    boot_mib: int
    root_label: str
    boot_label: str
    kernel_cmdline: str
    root_password: str | None = field(default=None, repr=False)  # [users]: set by chpasswd in the tree
    firmware: str = "bios"  # [disk]: bios (syslinux in the MBR) or uefi (systemd-boot on an ESP)

    @property
    def overlay(self) -> Path | None:
        """``rootfs/`` beside ``recipe.toml``, if the recipe has one."""
        d = self.directory / OVERLAY_DIR
        return d if d.is_dir() else None

    @property
    def root_mib(self) -> int:
        """The root partition's size: the disk less the first MiB (MBR and alignment) and boot."""
        return self.size_mib - 1 - self.boot_mib


def resolve(spec: str | Path) -> Path:
    """The recipe directory of ``spec``: a name under :data:`RECIPES_DIR` or a directory path."""
    p = Path(spec)
    candidates = [p] if p.is_absolute() or len(p.parts) > 1 else [RECIPES_DIR / p, p]
    for c in candidates:
        if (c / RECIPE_FILE).is_file():
            return c.resolve()
    known = ", ".join(sorted(d.name for d in RECIPES_DIR.iterdir() if (d / RECIPE_FILE).is_file()))
    raise RecipeError(
        f"{spec}: no {RECIPE_FILE} there: name a recipe in {RECIPES_DIR} ({known}) or a directory holding one"
    )


def _field(table: dict[str, Any], key: str, kind: type, where: str, default: Any = None) -> Any:
    """``table[key]`` checked to be a ``kind`` (a missing key: ``default``, or an error if None)."""
    if key not in table:
        if default is None:
            raise RecipeError(f"{where}: field {key!r} is missing: add it (see routers/recipes/*/{RECIPE_FILE})")
        return default
    value = table[key]
    if (kind is int and isinstance(value, bool)) or not isinstance(value, kind):
        raise RecipeError(f"{where}: field {key!r} must be {_KINDS.get(kind, kind.__name__)}, not {value!r}")
    return value


def _strings(
    table: dict[str, Any],
    key: str,
    where: str,
    pattern: re.Pattern[str] | None = None,
    what: str = "a non-empty string",
) -> tuple[str, ...]:
    """A list of strings (empty when absent), each matching ``pattern`` if given (``what`` says how)."""
    values = _field(table, key, list, where, default=[])
    for v in values:
        if not isinstance(v, str) or not v or (pattern is not None and not pattern.match(v)):
            raise RecipeError(f"{where}: field {key!r} has a bad entry {v!r}: each must be {what}")
    return tuple(values)


def load(spec: str | Path) -> Recipe:
    """Parse and check the recipe of ``spec`` (see :func:`resolve`); RecipeError names the field."""
    directory = resolve(spec)
    path = directory / RECIPE_FILE
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as err:
        raise RecipeError(f"{path}: not valid TOML ({err}): fix the syntax") from None
    fmt = data.get("format")
    if fmt != RECIPE_FORMAT:
        raise RecipeError(f"{path}: field 'format' is {fmt!r}: this builder reads format = {RECIPE_FORMAT}")
    deb = _field(data, "debian", dict, str(path))
    systemd = _field(data, "systemd", dict, str(path), default={})
    disk = _field(data, "disk", dict, str(path))
    users = _field(data, "users", dict, str(path), default={})
    root_password = _field(users, "root_password", str, f"{path} [users]", default="") or None
    if root_password is not None and (":" in root_password or "\n" in root_password):
        raise RecipeError(
            f"{path} [users]: field 'root_password' must not contain ':' or a newline (chpasswd's format)"
        )
    w_deb, w_sd, w_disk = f"{path} [debian]", f"{path} [systemd]", f"{path} [disk]"
    variant = _field(deb, "variant", str, w_deb)
    if variant not in VARIANTS:
        raise RecipeError(f"{w_deb}: field 'variant' is {variant!r}: use one of {', '.join(VARIANTS)}")
    packages = _strings(deb, "packages", w_deb, _NAME_RE, "a Debian package name")
    if not packages:
        raise RecipeError(f"{w_deb}: field 'packages' is empty: name at least a kernel and systemd-sysv")
    size_mib = _field(disk, "size_mib", int, w_disk)
    boot_mib = _field(disk, "boot_mib", int, w_disk)
    if not 16 <= boot_mib <= 1024:
        raise RecipeError(f"{w_disk}: field 'boot_mib' is {boot_mib}: give 16 to 1024 (FAT16 boot partition)")
    if size_mib < boot_mib + 257:
        raise RecipeError(f"{w_disk}: field 'size_mib' is {size_mib}: give at least boot_mib + 257")
    root_label = _field(disk, "root_label", str, w_disk)
    if not _LABEL_RE.match(root_label):
        raise RecipeError(f"{w_disk}: field 'root_label' is {root_label!r}: 1-16 letters, digits, '-' or '_'")
    boot_label = _field(disk, "boot_label", str, w_disk)
    if not _FAT_LABEL_RE.match(boot_label):
        raise RecipeError(f"{w_disk}: field 'boot_label' is {boot_label!r}: 1-11 upper-case letters or digits")
    firmware = _field(disk, "firmware", str, w_disk, default="bios")
    if firmware not in FIRMWARES:
        raise RecipeError(f"{w_disk}: field 'firmware' is {firmware!r}: use one of {', '.join(FIRMWARES)}")
    if firmware == "uefi" and "systemd-boot-efi" not in packages:
        raise RecipeError(
            f"{w_deb}: field 'packages' lacks systemd-boot-efi: a uefi image boots the systemd-boot of its own tree"
        )
    cmdline = _field(disk, "kernel_cmdline", str, w_disk)
    if "root=" in cmdline or "\n" in cmdline:
        raise RecipeError(f"{w_disk}: field 'kernel_cmdline' must not set root= (the builder adds root=LABEL=)")
    return Recipe(
        name=directory.name,
        directory=directory,
        description=_field(data, "description", str, str(path), default=""),
        suite=_field(deb, "suite", str, w_deb),
        variant=variant,
        architecture=_field(deb, "architecture", str, w_deb, default="amd64"),
        packages=packages,
        path_exclude=_strings(deb, "path_exclude", w_deb),
        path_include=_strings(deb, "path_include", w_deb),
        report_versions=_strings(deb, "report_versions", w_deb),
        enable_units=_strings(systemd, "enable", w_sd, _UNIT_RE, UNIT_HELP),
        mask_units=_strings(systemd, "mask", w_sd, _UNIT_RE, UNIT_HELP),
        size_mib=size_mib,
        boot_mib=boot_mib,
        root_label=root_label,
        boot_label=boot_label,
        kernel_cmdline=cmdline,
        root_password=root_password,
        firmware=firmware,
    )


def key_files(recipe: Any) -> list[Path]:
    """The files the cache key covers: ``recipe.toml`` and everything under ``rootfs/``, sorted."""
    files = [recipe.directory / RECIPE_FILE]
    if recipe.overlay is not None:
        files += sorted(p for p in recipe.overlay.rglob("*") if p.is_file() or p.is_symlink())
    return files


def recipe_key(recipe: Any, builder: str = f"vrmig-disk-image {BUILDER_FORMAT}") -> str:
    """SHA-256 over ``builder`` (the builder's name and format number) and each key file's
    relative path, mode and content; ``recipe``: a disk recipe or another recipe with a
    ``directory`` and an ``overlay`` (routers.oci_image)."""
    h = hashlib.sha256(f"{builder}\n".encode())
    for f in key_files(recipe):
        rel = f.relative_to(recipe.directory).as_posix()
        if f.is_symlink():
            h.update(f"L {rel} -> {f.readlink()}\n".encode())
            continue
        data = f.read_bytes()
        h.update(f"F {rel} {f.stat().st_mode & 0o7777:o} {len(data)}\n".encode())
        h.update(data)
    return h.hexdigest()
