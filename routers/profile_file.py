"""Router profile files: one TOML file describing a router the operator brings (docs/own-router.md).

A profile names how the router is launched (``[router] kind``: a ``vm`` or a ``container``, as
containerlab's ``kind``), where its image comes from (``[image]``: a disk image as vrnetlab's, the
suite's own kernel + initrd, or an OCI image), its hardware (``[hardware]``: memory, vCPUs, NIC
model and the guest NICs' order by role), how it is configured (``[config]``: a Jinja2 template per
device, as netlab's, delivered by NoCloud, a config drive, the console, SSH, or the kernel command
line of the suite's own images), when it is ready (``[readiness]``) and how to read its routing
state (``[state]``).

:func:`load_profile` reads and checks a file strictly: every mistake is one
:class:`~routers.errors.ProfileFileError` line naming the file, the table and field, what is wrong
and what to do (exit 2).  :func:`render_config` renders the profile's template from a
:class:`~routers.profile_context.ConfigContext` (built from the testbed by
:func:`migrate.model.router_config.testbed_context`).
Nothing here starts a process or opens a socket: the loader reads the profile, the template and the
first bytes of the image, nothing else.
"""

from __future__ import annotations

import functools
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from routers import profiles
from routers.errors import ProfileFileError, RouterError
from routers.profile_context import ConfigContext, compile_template, render_template

KINDS = ("vm", "container")
SOFTWARE = ("frr", "bird", "xorp", "openbgpd", "gobgp", "other")
DISK_FORMATS = ("qcow2", "raw")
FIRMWARE = ("bios", "uefi")
NIC_MODELS = ("virtio", "e1000")
NIC_ROLES = ("left", "right", "mgmt")
METHODS = ("nocloud", "configdrive", "console", "ssh", "cmdline", "file")
#: the config methods each kind can use (a container has no disks to attach a seed to; a VM's root
#: file system is inside its disk image, where the suite writes nothing)
METHODS_OF_KIND = {
    "vm": ("nocloud", "configdrive", "console", "ssh", "cmdline"),
    "container": ("file", "console", "ssh", "cmdline"),
}
#: method file: directories of the container's tree a configuration may not be written into (the
#: container runtime mounts its own file systems there)
FILE_METHOD_FORBIDDEN = ("/proc", "/sys", "/dev", "/run", "/tmp", "/var/tmp", "/var/log")
#: image sources, and the kinds that can run each
SOURCES = {"builtin": KINDS, "disk": ("vm",), "oci": ("container",), "archive": ("container",)}
#: the bounds the orchestrator puts on MEM= and VCPUS= (migrate.model.scenario)
MEM_MIB_RANGE = (64, 16384)
VCPUS_RANGE = (1, 64)
#: the suite's own images have two NICs: eth0 on segment L, eth1 on segment R
BUILTIN_NICS = ("left", "right")

QCOW2_MAGIC = b"QFI\xfb"
MBR_SIGNATURE = b"\x55\xaa"  # at offset 510
GPT_SIGNATURE = b"EFI PART"  # at offset 512 (LBA 1 of a 512-byte-sector disk)
TAR_MAGIC = b"ustar"  # at offset 257 (POSIX and GNU tar; docker save writes it)

TABLES: dict[str, tuple[str, ...]] = {
    "router": ("name", "kind", "software", "version"),
    "image": ("builtin", "disk", "format", "firmware", "oci", "archive", "recipe"),
    "hardware": ("mem_mib", "vcpus", "nic", "nics", "nic_count"),
    "config": ("method", "template", "login", "password", "prompt", "errors", "user", "key", "path"),
    "readiness": ("console_marker", "timeout_s"),
    "state": ("routes", "sessions"),
}
REQUIRED_TABLES = ("router", "image", "config")
#: fields that only one config method reads
METHOD_FIELDS = {
    "login": "console",
    "password": "console",
    "prompt": "console",
    "errors": "console",
    "user": "ssh",
    "key": "ssh",
    "path": "file",
}
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@+-]{0,63}")


@dataclass(frozen=True)
class RouterInfo:
    """``[router]``: what the router is; ``name`` identifies it in results (meta.json)."""

    name: str
    kind: str
    software: str
    version: str | None = None


@dataclass(frozen=True)
class ImageSource:
    """``[image]``: exactly one of ``builtin``, ``disk``, ``oci``, ``archive`` is set."""

    builtin: str | None = None
    disk: Path | None = None
    format: str | None = None  # with disk
    firmware: str | None = None  # with disk
    oci: Path | None = None
    oci_tag: str | None = None
    archive: Path | None = None
    recipe: str | None = None

    @property
    def source(self) -> str:
        """Which source is set: ``builtin``, ``disk``, ``oci`` or ``archive``."""
        return next(s for s in SOURCES if getattr(self, s) is not None)


@dataclass(frozen=True)
class Hardware:
    """``[hardware]``: ``mem_mib`` None leaves MEM='s default; ``nics`` are the guest NICs' roles
    in the guest's order (index 0 first)."""

    mem_mib: int | None = None
    vcpus: int = 1
    nic: str = "virtio"
    nics: tuple[str, ...] = BUILTIN_NICS

    def nic_index(self, role: str) -> int | None:
        """The guest NIC index of ``role`` (None if the profile has no NIC of that role)."""
        return self.nics.index(role) if role in self.nics else None


@dataclass(frozen=True)
class ConfigMethod:
    """``[config]``: how the rendered template reaches the router."""

    method: str
    template: Path | None = None  # None only with method cmdline
    login: str | None = None  # console
    password: str | None = field(default=None, repr=False)  # console
    prompt: str = "# "  # console
    errors: tuple[str, ...] = ()  # console: regular expressions that, in a command's output, fail it
    user: str | None = None  # ssh
    key: Path | None = None  # ssh
    path: str | None = None  # file: where in the container's root file system the rendered template goes


@dataclass(frozen=True)
class Readiness:
    """``[readiness]``: an optional console line; ``timeout_s`` None means BOOT_TIMEOUT."""

    console_marker: str = ""
    timeout_s: float | None = None


@dataclass(frozen=True)
class StateCommands:
    """``[state]``: commands (run over the console or SSH) that print the routing state."""

    routes: str | None = None
    sessions: str | None = None


@dataclass(frozen=True)
class RouterProfile:
    """A loaded, checked profile file; ``path`` is the file (relative paths in it are resolved
    against its directory)."""

    path: Path
    router: RouterInfo
    image: ImageSource
    hardware: Hardware
    config: ConfigMethod
    readiness: Readiness = Readiness()
    state: StateCommands = StateCommands()

    @property
    def name(self) -> str:
        """The router's name in results."""
        return self.router.name


def resolve_router(value: str) -> str | Path:
    """A ROUTER= value as a profile file (a :class:`~pathlib.Path`: it ends in ``.toml`` or
    contains ``/``) or a built-in profile name (the string unchanged, e.g. ``frr@8.4``)::

        >>> resolve_router("frr")
        'frr'
        >>> resolve_router("profiles/frr.toml")
        PosixPath('profiles/frr.toml')
    """
    if value.endswith(".toml") or "/" in value:
        return Path(value)
    return value


def router_profile(router: str) -> RouterProfile | None:
    """The loaded profile of a ROUTER= value that names a profile file (None for a built-in
    name); loaded once per file content, since every check of a scenario asks."""
    if not isinstance(resolve_router(router), Path):
        return None
    path = Path(router).expanduser().resolve()
    try:
        stamp = path.stat().st_mtime_ns
    except OSError:
        stamp = -1  # load_profile names the missing file
    return _load_cached(str(path), stamp)


@functools.lru_cache(maxsize=32)
def _load_cached(path: str, stamp: int) -> RouterProfile:
    return load_profile(path)


# ---------------------------------------------------------------------------- reading fields


def _show(value: object) -> str:
    """A user's value for a one-line message: repr (escapes newlines), shortened."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _key(key: str) -> str:
    """A key the user wrote, for a message: as written if it is a bare TOML key, else quoted."""
    return key if re.fullmatch(r"[A-Za-z0-9_-]{1,40}", key) else _show(key)


def _type_name(value: object) -> str:
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "an array"}.get(
        type(value), "a table" if isinstance(value, dict) else type(value).__name__
    )


class _Table:
    """One table of the file: typed reads that fail with the file, table and field named."""

    def __init__(self, file: str, name: str, data: object) -> None:
        self.file, self.name = file, name
        if not isinstance(data, dict):
            self.fail_table(f"is {_type_name(data)}, not a table: write it as a [{name}] section")
        self.data: dict[str, Any] = data
        known = TABLES[name]
        for key in data:
            if key not in known:
                self.fail(_key(key), f"unknown field: [{name}] takes {', '.join(known)}")

    def fail_table(self, message: str) -> NoReturn:
        """Raise the one-line error about the whole table."""
        raise ProfileFileError(f"{self.file}: [{self.name}] {message}")

    def fail(self, key: str, message: str) -> NoReturn:
        """Raise the one-line error about field ``key``."""
        raise ProfileFileError(f"{self.file}: [{self.name}] {key}: {message}")

    def has(self, key: str) -> bool:
        """True if the file sets ``key``."""
        return key in self.data

    def string(
        self, key: str, *, required: bool = False, choices: tuple[str, ...] = (), example: str = ""
    ) -> str | None:
        """A string field (None when absent and not required)."""
        if key not in self.data:
            if required:
                hint = (
                    f" (one of {', '.join(choices)})" if choices else (f", e.g. {key} = {example}" if example else "")
                )
                self.fail(key, f"missing: add it{hint}")
            return None
        value = self.data[key]
        if not isinstance(value, str):
            self.fail(key, f"is {_type_name(value)} ({_show(value)}): give a string in quotes")
        if choices and value not in choices:
            self.fail(key, f"{_show(value)} is not one of {', '.join(choices)}: choose one of them")
        return value

    def text(self, key: str, *, required: bool = False, example: str = "") -> str | None:
        """A non-empty string without line breaks."""
        value = self.string(key, required=required, example=example)
        if value is not None and (not value.strip() or "\n" in value or "\r" in value):
            self.fail(key, f"{_show(value)} is empty or spans lines: give one non-empty line")
        return value

    def integer(self, key: str, lo: int, hi: int) -> int | None:
        """An integer field within ``lo``..``hi`` (None when absent)."""
        if key not in self.data:
            return None
        value = self.data[key]
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(key, f"is {_type_name(value)} ({_show(value)}): give a whole number from {lo} to {hi}")
        if not lo <= value <= hi:
            self.fail(key, f"{value} is out of range: give a whole number from {lo} to {hi}")
        return value

    def seconds(self, key: str) -> float | None:
        """A positive number of seconds (None when absent)."""
        if key not in self.data:
            return None
        value = self.data[key]
        if isinstance(value, bool) or not isinstance(value, int | float):
            self.fail(key, f"is {_type_name(value)} ({_show(value)}): give a number of seconds, e.g. {key} = 300")
        if not 0 < value < 86400:
            self.fail(key, f"{value} is not a number of seconds above 0 and below a day: e.g. {key} = 300")
        return float(value)

    def patterns(self, key: str) -> tuple[str, ...]:
        """An array of Python regular expressions, each compiled once here (empty when absent)."""
        if key not in self.data:
            return ()
        value = self.data[key]
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            self.fail(
                key, f'is {_show(value)}: give an array of regular expressions, e.g. {key} = ["command not found"]'
            )
        for v in value:
            try:
                re.compile(v)
            except re.error as err:
                self.fail(key, f"{_show(v)} is not a regular expression ({err}): fix or quote it")
        return tuple(value)

    def roles(self, key: str) -> tuple[str, ...] | None:
        """An array of NIC roles (None when absent)."""
        if key not in self.data:
            return None
        value = self.data[key]
        want = f'give an array of roles, e.g. {key} = ["left", "right"] (roles: {", ".join(NIC_ROLES)})'
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            self.fail(key, f"is {_type_name(value)} ({_show(value)}), not an array of strings: {want}")
        for v in value:
            if v not in NIC_ROLES:
                self.fail(key, f"unknown role {_show(v)}: {want}")
        for role in ("left", "right"):
            if value.count(role) != 1:
                self.fail(key, f"has {value.count(role)} {role!r} NICs, need exactly one: {want}")
        if value.count("mgmt") > 1:
            self.fail(key, f"has {value.count('mgmt')} 'mgmt' NICs, at most one: {want}")
        return tuple(value)

    def path(self, key: str, base: Path, *, what: str, hint: str = "") -> Path | None:
        """A path field, relative to the profile's directory (``~`` expanded), that must be an
        existing file (None when absent)."""
        value = self.text(key)
        if value is None:
            return None
        try:
            p = Path(value).expanduser()
            p = p if p.is_absolute() else base / p
            exists = p.is_file()
        except (OSError, ValueError, RuntimeError) as err:
            self.fail(key, f"{_show(value)} is not a usable path ({err}): give the path of the {what}")
        if not exists:
            self.fail(key, f"{p} is not a file: give the path of the {what} (relative to the profile){hint}")
        return p


# ---------------------------------------------------------------------------- the tables


def _read_file(path: Path) -> tuple[str, dict[str, Any]]:
    file = str(path)
    try:
        raw = path.read_bytes()
    except (OSError, ValueError) as err:
        reason = getattr(err, "strerror", None) or str(err)
        raise ProfileFileError(
            f"{file}: cannot read the router profile ({reason}): give the path of a .toml file"
        ) from None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as err:
        raise ProfileFileError(f"{file}: not UTF-8 text ({err.reason} at byte {err.start}): save it as UTF-8") from None
    except tomllib.TOMLDecodeError as err:
        raise ProfileFileError(f"{file}: not valid TOML ({err}): fix the syntax") from None
    known = ", ".join(f"[{t}]" for t in TABLES)
    for key, value in data.items():
        if key not in TABLES:
            what = "unknown table" if isinstance(value, dict) else "a field outside any table"
            raise ProfileFileError(f"{file}: [{_key(key)}]: {what}: a profile has the tables {known}")
        if not isinstance(value, dict):
            raise ProfileFileError(
                f"{file}: [{key}]: is {_type_name(value)} ({_show(value)}), not a table: write it as a [{key}] section"
            )
    for name in REQUIRED_TABLES:
        if name not in data:
            raise ProfileFileError(f"{file}: [{name}]: missing table: a profile needs {', '.join(REQUIRED_TABLES)}")
    return file, data


def _router(file: str, data: object) -> RouterInfo:
    t = _Table(file, "router", data)
    name = t.text("name", required=True, example='"debian-frr"')
    assert name is not None
    if not NAME_RE.fullmatch(name):
        t.fail(
            "name", f"{_show(name)}: use 1-64 letters, digits and . _ @ + - (it names results), starting alphanumeric"
        )
    kind = t.string("kind", required=True, choices=KINDS)
    software = t.string("software", required=True, choices=SOFTWARE)
    assert kind is not None and software is not None
    return RouterInfo(name=name, kind=kind, software=software, version=t.text("version"))


def _image(file: str, data: object, base: Path, router: RouterInfo, check_image: bool) -> ImageSource:
    t = _Table(file, "image", data)
    given = [s for s in SOURCES if t.has(s)]
    if len(given) != 1:
        got = f"has {', '.join(given)}" if given else "has none"
        t.fail_table(f"needs exactly one source of {', '.join(SOURCES)} ({got}): keep one")
    source = given[0]
    if router.kind not in SOURCES[source]:
        fits = [s for s, kinds in SOURCES.items() if router.kind in kinds]
        t.fail(source, f"a {source} image cannot run as [router] kind = {router.kind!r}: give {' or '.join(fits)}")
    for key in ("format", "firmware"):
        if t.has(key) and source != "disk":
            t.fail(key, f"only a disk image has a {key}: remove it (the image is {source})")
    recipe = t.text("recipe")
    hint = f", or build it: python -m routers disk {recipe}" if recipe else ""
    if source == "builtin":
        return ImageSource(builtin=_builtin(t, router), recipe=recipe)
    if source == "disk":
        fmt = t.string("format", choices=DISK_FORMATS) or "qcow2"
        firmware = t.string("firmware", choices=FIRMWARE) or "bios"
        disk = _file_or_unchecked(t, "disk", base, "disk image", hint, check_image)
        if check_image:
            _check_disk(t, disk, fmt)
        return ImageSource(disk=disk, format=fmt, firmware=firmware, recipe=recipe)
    if source == "oci":
        layout, tag = _oci(t, base, check_image)
        return ImageSource(oci=layout, oci_tag=tag, recipe=recipe)
    archive = _file_or_unchecked(t, "archive", base, "image archive (docker save)", hint, check_image)
    if check_image:
        head = _head(t, "archive", archive, 262)
        if head[257:262] != TAR_MAGIC:
            t.fail("archive", f"{archive} is not a tar archive: give the output of `docker save -o router.tar IMAGE`")
    return ImageSource(archive=archive, recipe=recipe)


def _builtin(t: _Table, router: RouterInfo) -> str:
    value = t.text("builtin")
    assert value is not None
    try:
        prof = profiles.get(value)
    except RouterError as err:
        t.fail("builtin", f"{err}")
    if prof.family != router.software:
        t.fail("builtin", f"{value!r} runs {prof.family}, but [router] software = {router.software!r}: make them agree")
    if router.version and prof.release is not None and router.version != prof.release.version:
        t.fail(
            "builtin",
            f"{value!r} is {prof.family} {prof.release.version}, but [router] version = {router.version!r}: "
            f'use builtin = "{prof.family}@{router.version}" or drop the version',
        )
    return value


def _file_or_unchecked(t: _Table, key: str, base: Path, what: str, hint: str, check: bool) -> Path:
    if check:
        p = t.path(key, base, what=what, hint=hint)
        assert p is not None
        return p
    value = t.text(key)
    assert value is not None
    try:
        p = Path(value).expanduser()
    except RuntimeError as err:
        t.fail(key, f"{_show(value)} is not a usable path ({err}): give the path of the {what}")
    return p if p.is_absolute() else base / p


def _head(t: _Table, key: str, path: Path, n: int) -> bytes:
    try:
        with open(path, "rb") as fh:
            return fh.read(n)
    except OSError as err:
        t.fail(key, f"cannot read {path} ({err.strerror}): make it readable")


def _check_disk(t: _Table, disk: Path, fmt: str) -> None:
    head = _head(t, "disk", disk, 520)
    if fmt == "qcow2" and head[:4] != QCOW2_MAGIC:
        other = ' (it looks raw: format = "raw")' if _raw_signature(head) else ""
        t.fail("disk", f"{disk} is not a qcow2 image (no QFI\\xfb magic){other}: give a qcow2 disk or set format")
    if fmt == "raw" and not _raw_signature(head):
        other = ' (it is qcow2: format = "qcow2")' if head[:4] == QCOW2_MAGIC else ""
        t.fail("disk", f"{disk} is not a raw boot disk (no MBR 0x55AA at 510, no GPT header at 512){other}: fix it")


def _raw_signature(head: bytes) -> bool:
    return head[510:512] == MBR_SIGNATURE or head[512:520] == GPT_SIGNATURE


def _oci(t: _Table, base: Path, check: bool) -> tuple[Path, str | None]:
    value = t.text("oci")
    assert value is not None
    where, sep, tag = value.rpartition(":")
    if not sep or "/" in tag or not tag:
        where, tag = value, ""
    try:
        p = Path(where).expanduser()
    except RuntimeError as err:
        t.fail("oci", f"{_show(value)} is not a usable path ({err}): give an OCI layout directory[:tag]")
    p = p if p.is_absolute() else base / p
    if check:
        try:
            ok = (p / "oci-layout").is_file() and (p / "index.json").is_file()
        except (OSError, ValueError) as err:
            t.fail("oci", f"{_show(value)} is not a usable path ({err}): give an OCI layout directory[:tag]")
        if not ok:
            t.fail(
                "oci", f"{p} is not an OCI image layout (no oci-layout and index.json): give one, e.g. skopeo's oci:DIR"
            )
    return p, tag or None


def _hardware(file: str, data: object, router: RouterInfo, image: ImageSource) -> Hardware:
    t = _Table(file, "hardware", data)
    mem = t.integer("mem_mib", *MEM_MIB_RANGE)
    vcpus = t.integer("vcpus", *VCPUS_RANGE)
    nic = t.string("nic", choices=NIC_MODELS)
    nics = t.roles("nics") or BUILTIN_NICS
    count = t.integer("nic_count", 2, 16)
    if count is not None and count != len(nics):
        t.fail("nic_count", f"is {count} but nics lists {len(nics)} ({', '.join(nics)}): make them agree")
    if image.builtin is not None and nics != BUILTIN_NICS:
        t.fail(
            "nics",
            f'the built-in image {image.builtin!r} has 2 NICs, eth0 left and eth1 right: use nics = ["left", "right"]',
        )
    if router.kind == "container":
        for key, value in (("vcpus", vcpus), ("nic", nic)):
            if value is not None and (key != "vcpus" or value != 1):
                t.fail(key, "a container has no vCPUs or NIC model of its own (veth pairs): remove it")
    return Hardware(mem_mib=mem, vcpus=vcpus or 1, nic=nic or "virtio", nics=nics)


def _config(file: str, data: object, base: Path, router: RouterInfo, image: ImageSource, hw: Hardware) -> ConfigMethod:
    t = _Table(file, "config", data)
    method = t.string("method", required=True, choices=METHODS)
    assert method is not None
    if method not in METHODS_OF_KIND[router.kind]:
        t.fail(
            "method",
            f"{method!r} cannot configure a {router.kind}: use one of {', '.join(METHODS_OF_KIND[router.kind])}",
        )
    if (method == "cmdline") != (image.builtin is not None):
        if method == "cmdline":
            t.fail(
                "method", "cmdline configures only the suite's own images: set [image] builtin, or use another method"
            )
        t.fail(
            "method",
            f'the built-in image {image.builtin!r} is configured by its kernel command line: use method = "cmdline"',
        )
    for key, owner in METHOD_FIELDS.items():
        if t.has(key) and method != owner:
            t.fail(key, f"only method {owner!r} reads it (method is {method!r}): remove it")
    if method == "cmdline":
        if t.has("template"):
            t.fail("template", "method cmdline renders no template (vrmig-router configures the image): remove it")
        return ConfigMethod(method=method)
    template = t.path("template", base, what="Jinja2 config template")
    if template is None:
        t.fail("template", 'missing: add the Jinja2 template rendered for this router, e.g. template = "router.j2"')
    compile_template(template, file, loading=True)
    if method == "console":
        login = t.text("login", required=True, example='"root"')
        return ConfigMethod(
            method=method,
            template=template,
            login=login,
            password=t.string("password"),
            prompt=t.text("prompt") or "# ",
            errors=t.patterns("errors"),
        )
    if method == "ssh":
        if "mgmt" not in hw.nics:
            raise ProfileFileError(
                f'{file}: [hardware] nics: method ssh reaches the router on its mgmt NIC: add "mgmt"'
            )
        user = t.text("user", required=True, example='"root"')
        key = t.path("key", base, what="SSH private key")
        if key is None:
            t.fail("key", 'missing: give the SSH private key the router accepts, e.g. key = "~/.ssh/id_ed25519"')
        return ConfigMethod(method=method, template=template, user=user, key=key)
    if method == "file":
        return ConfigMethod(method=method, template=template, path=_container_path(t))
    return ConfigMethod(method=method, template=template)


def _container_path(t: _Table) -> str:
    """method file's ``path``: an absolute, normalised path of a file in the container's root file
    system, outside the directories the container runtime mounts."""
    value = t.text("path", required=True, example='"/etc/frr/frr.conf"')
    assert value is not None
    if not value.startswith("/") or value.endswith("/"):
        t.fail(
            "path",
            f"{_show(value)} is not an absolute file path: give where the router reads it, e.g. /etc/frr/frr.conf",
        )
    parts = value.split("/")[1:]
    if any(p in ("", ".", "..") for p in parts):
        t.fail("path", f"{_show(value)} has empty, '.' or '..' components: give a plain absolute path")
    for d in FILE_METHOD_FORBIDDEN:
        if value == d or value.startswith(d + "/"):
            t.fail(
                "path", f"{_show(value)} is under {d}, which the container runtime mounts afresh: give a path elsewhere"
            )
    return value


def _readiness(file: str, data: object) -> Readiness:
    t = _Table(file, "readiness", data)
    marker = t.string("console_marker") or ""
    if "\n" in marker or "\r" in marker:
        t.fail("console_marker", f"{_show(marker)} spans lines: the marker is matched within one console line")
    return Readiness(console_marker=marker, timeout_s=t.seconds("timeout_s"))


def _state(file: str, data: object) -> StateCommands:
    t = _Table(file, "state", data)
    return StateCommands(routes=t.text("routes"), sessions=t.text("sessions"))


def load_profile(path: str | Path, *, check_image: bool = True) -> RouterProfile:
    """The router profile in ``path``, checked strictly; every mistake is one
    :class:`~routers.errors.ProfileFileError` line (exit 2).

    ``check_image`` False skips the existence and format checks of a disk, OCI layout or archive
    (for an image that is built later, or lives on a lab host); the template is always checked."""
    path = Path(path)
    file, data = _read_file(path)
    base = path.parent
    router = _router(file, data["router"])
    image = _image(file, data["image"], base, router, check_image)
    hw = _hardware(file, data.get("hardware", {}), router, image)
    config = _config(file, data["config"], base, router, image, hw)
    return RouterProfile(
        path=path,
        router=router,
        image=image,
        hardware=hw,
        config=config,
        readiness=_readiness(file, data.get("readiness", {})),
        state=_state(file, data.get("state", {})),
    )


def render_config(profile: RouterProfile, context: ConfigContext) -> str:
    """The profile's config template rendered from ``context`` (Jinja2 sandbox, undefined variables
    are errors, the template loaded relative to the profile file); a failure is one
    ProfileFileError line naming the template, its line and Jinja2's message."""
    template = profile.config.template
    if template is None:
        raise ProfileFileError(
            f"{profile.path}: [config] method: {profile.config.method!r} renders no template: "
            "the image is configured by its kernel command line (routers.guest.kernel_cmdline)"
        )
    return render_template(template, str(profile.path), context.variables())
