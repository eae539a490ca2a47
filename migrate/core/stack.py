"""The software stack as data: which QEMU runs the router (``QEMU=``), where it came from, its version.

``QEMU=`` takes one of three forms:

* ``system``: the host's own ``qemu-system-x86_64`` (Debian 12: QEMU 7.2);
* a release, ``10.0`` or ``10.0.13``: QEMU of the first Debian suite of :data:`SUITES` whose
  ``qemu-system-x86`` has that upstream version (``10.0`` -> bookworm-backports' 10.0.2,
  ``10.0.13`` -> trixie's, ``11.1`` -> forky's), fetched once with a private apt configuration
  (migrate.core.privapt) and unpacked under ``<cache>/qemu/<release>/root``, never installed: the
  host's package stays.  A build that runs with the host's libraries is run as it is; one that
  needs its suite's newer libc is run through that suite's own dynamic loader with its libraries
  (as ``make criu`` runs forky's criu).  Firmware comes from the package's data directory first,
  then the host's (``-L``);
* a path to a user's own build (``/opt/qemu/bin/qemu-system-x86_64`` or a build tree's
  ``build/qemu-system-x86_64``): its firmware directory is found beside it (``../share/qemu`` or
  ``pc-bios``) or given (``QEMU_FIRMWARE=``); its SHA-256 is recorded, so a bisect's runs name
  the build they ran.

:func:`resolve_qemu` turns the text into a :class:`QemuBuild` (the argv prefix to run, the version
line, the source); ``python -m migrate.core.stack qemu 10.0`` (``make qemu``, part of ``make
setup``) fetches one ahead of time.

``LIBVIRT=`` (DRIVER=libvirt) chooses the libvirtd the same way: ``system`` (the host's package) or
a release such as ``11.3`` (bookworm-backports' libvirt-daemon and its QEMU driver, fetched and
unpacked under ``<cache>/qemu/libvirt-<release>/root``, run with its own libvirt.so and driver
directory); :func:`resolve_libvirt` gives a :class:`LibvirtBuild`, ``python -m migrate.core.stack
libvirt`` (``make libvirt``) fetches it ahead of time.  Standard library only."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from migrate.core import privapt
from migrate.core.atomic import write_text
from migrate.core.make_fetch import report_fetch

#: the QEMU a run uses unless QEMU= says otherwise: the newest release that passes the whole test
#: suite here (Debian 12's 7.2 loses pages in TCG pre-copy; docs/stack.md)
DEFAULT_QEMU = "10.0"
BINARY = "qemu-system-x86_64"
#: Debian suites searched for a release, in order (bookworm-backports' build runs on the host's
#: libraries; trixie's and forky's need their own libc)
SUITES = ("bookworm-backports", "trixie", "forky")
QEMU_PACKAGES = ("qemu-system-x86", "qemu-system-common", "qemu-system-data")
#: the host's firmware directories, searched after the build's own
HOST_FIRMWARE = ("/usr/share/qemu", "/usr/share/seabios")
MANIFEST_FORMAT = 1
RELEASE = re.compile(r"^\d+\.\d+(\.\d+)?$")
VERSION_LINE = re.compile(r"QEMU emulator version (\d+\.\d+(?:\.\d+)?)")
VERSION_TIMEOUT_S = 30.0


class StackError(Exception):
    """A QEMU= (or QEMU_FIRMWARE=) that cannot be used; the message names what to change."""


@dataclass(frozen=True)
class QemuBuild:
    """One QEMU to run: ``argv`` is the command prefix (loader and library path where the build
    needs its own libc, the binary, then its ``-L`` firmware directories)."""

    spec: str  # what QEMU= said
    argv: tuple[str, ...]
    version: str  # the first line of --version
    release: str  # "10.0.2"
    source: str  # "system", "bookworm-backports", "trixie", ..., or "path"
    binary: str
    packages: dict[str, str] = field(default_factory=dict)  # Debian package -> version
    sha256: str | None = None  # of the binary (a user's own build)
    firmware: tuple[str, ...] = ()

    def to_meta(self) -> dict[str, Any]:
        """meta.json ``stack.qemu``."""
        return asdict(self) | {"argv": list(self.argv), "firmware": list(self.firmware)}

    def command(self, *args: str) -> list[str]:
        """The argv of this QEMU with ``args`` (firmware flags first)."""
        return [*self.argv, *args]


def cache_root() -> Path:
    """``<cache>/qemu`` (cache: ``$VRMIG_CACHE`` or ``~/.cache/vrmig``, as for the router images)."""
    env = os.environ.get("VRMIG_CACHE")
    return (Path(env).expanduser() if env else Path.home() / ".cache" / "vrmig") / "qemu"


def upstream(debian_version: str) -> str:
    """``1:10.0.2+ds-2+deb13u1~bpo12+1`` -> ``10.0.2`` (epoch, repack and Debian revision dropped)."""
    v = debian_version.split(":", 1)[-1]
    return re.split(r"[+~-]", v, maxsplit=1)[0]


def matches(release: str, spec: str) -> bool:
    """``10.0.2`` is a ``10.0`` and a ``10.0.2``, not a ``10.0.20`` nor a ``1``."""
    return release == spec or release.startswith(spec + ".")


def check_spec(spec: str) -> None:
    """Refuse (StackError, one line) a QEMU= that is none of the three forms."""
    if spec == "system" or RELEASE.match(spec) or spec.startswith("/"):
        return
    raise StackError(
        f"QEMU={spec!r} is not a QEMU: use system (the host's), a release such as {DEFAULT_QEMU} or 10.0.13 "
        "(fetched from Debian), or the absolute path of a qemu-system-x86_64 you built"
    )


def _first_version_line(
    argv: list[str] | tuple[str, ...], pattern: re.Pattern[str], not_it: str, env: dict[str, str] | None = None
) -> str:
    """The first line ``<argv> --version`` prints (``env`` added to the environment); StackError
    if it does not run, or with ``not_it`` (``{program}``: its path; ``{why}``: its last words)
    if it fails or its line does not match ``pattern``."""
    program = argv[-1] if argv else "?"
    try:
        res = subprocess.run(
            [*argv, "--version"], capture_output=True, text=True, timeout=VERSION_TIMEOUT_S,
            env=None if env is None else {**os.environ, **env},
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as err:
        raise StackError(f"{program} could not run: {err}") from None
    line = (res.stdout.strip().splitlines() or [""])[0].strip()
    if res.returncode != 0 or not pattern.search(line):
        why = (res.stderr.strip().splitlines() or [line or f"exit {res.returncode}"])[-1]
        raise StackError(not_it.format(program=program, why=why))
    return line


def version_line(argv: list[str] | tuple[str, ...]) -> str:
    """``<qemu> --version``'s first line; StackError if it is not a QEMU's."""
    return _first_version_line(argv, VERSION_LINE, "QEMU={program} is not a working QEMU (--version: {why})")


def _firmware_flags(dirs: list[str]) -> list[str]:
    return [x for d in dirs for x in ("-L", d)]


def _existing(dirs: list[str]) -> list[str]:
    return [d for d in dirs if Path(d).is_dir()]


# ---------------------------------------------------------------------------------- system
def _system_tool(
    var: str, program: str, package: str, install: str, version: Callable[[list[str]], str], pattern: re.Pattern[str]
) -> dict[str, Any]:
    """The host's ``program`` (Debian ``package``) as ``VAR=system`` runs it: the fields a build
    record shares (spec, argv, version, release, source, packages) and ``path``; StackError
    naming ``install`` (the packages ``make setup`` installs) if it is not on PATH."""
    path = shutil.which(program)
    if path is None:
        raise StackError(f"{var}=system: {program} is not installed: run `make setup` ({install})")
    line = version([path])
    pkg = _dpkg_version(package)
    m = pattern.search(line)
    return {
        "spec": "system", "argv": (path,), "version": line, "release": m[1] if m else "?", "source": "system",
        "packages": {package: pkg} if pkg else {}, "path": path,
    }  # fmt: skip


def system_qemu() -> QemuBuild:
    """The host's qemu-system-x86_64 (Debian package qemu-system-x86)."""
    f = _system_tool("QEMU", BINARY, "qemu-system-x86", "Debian package qemu-system-x86", version_line, VERSION_LINE)
    return QemuBuild(binary=f.pop("path"), **f)


def _dpkg_version(package: str) -> str | None:
    try:
        res = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", package], capture_output=True, text=True)
    except OSError:
        return None
    return res.stdout.strip() or None if res.returncode == 0 else None


# ---------------------------------------------------------------------------------- a path
def firmware_beside(binary: Path) -> list[str]:
    """The data directory of a user's build: ``<prefix>/share/qemu`` of an installed one, the build
    tree's ``pc-bios`` of one run from its build directory."""
    here = binary.resolve().parent
    return _existing([str(here.parent / "share" / "qemu"), str(here / "pc-bios"), str(here.parent / "pc-bios")])


def path_qemu(spec: str, firmware: str | None = None) -> QemuBuild:
    """A user's own build at the absolute path ``spec``."""
    binary = Path(spec)
    if not binary.is_file() or not os.access(binary, os.X_OK):
        raise StackError(f"QEMU={spec}: no executable file there: give the path of a qemu-system-x86_64 binary")
    if firmware is not None and not Path(firmware).is_dir():
        raise StackError(f"QEMU_FIRMWARE={firmware}: no such directory: give QEMU's data directory (pc-bios)")
    own = [firmware] if firmware else firmware_beside(binary)
    fw = [*own, *_existing(list(HOST_FIRMWARE))]
    argv = (str(binary), *_firmware_flags(fw))
    line = version_line([str(binary)])
    m = VERSION_LINE.search(line)
    digest = hashlib.sha256(binary.read_bytes()).hexdigest()
    return QemuBuild(
        spec=spec, argv=argv, version=line, release=m[1] if m else "?", source="path", binary=str(binary),
        sha256=digest, firmware=tuple(fw),
    )  # fmt: skip


# ---------------------------------------------------------------------------------- a release
def _manifest(spec: str) -> Path:
    return cache_root() / spec / "manifest.json"


def _write_manifest(path: Path, own_libs: bool, packages: dict[str, str], meta: dict[str, Any]) -> None:
    """Write the manifest of a fetched release: its format, when, its packages and ``meta``."""
    manifest = {
        "format": MANIFEST_FORMAT,
        "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "own_libs": own_libs,
        "all_packages": packages,
        **meta,
    }
    write_text(path, json.dumps(manifest, indent=2) + "\n")


def read_manifest(spec: str) -> dict[str, Any] | None:
    """The fetched release ``spec`` (None: not fetched, or from an older format)."""
    try:
        data = json.loads(_manifest(spec).read_text())
    except (OSError, ValueError):
        return None
    ok = isinstance(data, dict) and data.get("format") == MANIFEST_FORMAT and Path(data.get("binary", "")).is_file()
    return data if ok else None


def _library_packages(depends_output: str) -> list[str]:
    """The shared libraries of ``apt-cache depends --recurse`` output (``lib*``, zlib1g); tools and
    virtual packages (``<...>``) are left out."""
    names = set()
    for line in depends_output.splitlines():
        if not line or line[0].isspace() or line.startswith("<"):
            continue
        name = line.strip().split(":")[0]
        if (name.startswith("lib") and not name.endswith("-dev")) or name == "zlib1g":
            names.add(name)
    return sorted(names)


def release_argv(root: Path, own_libs: bool) -> tuple[list[str], list[str]]:
    """(argv prefix, firmware directories) of a release unpacked under ``root``."""
    binary = root / "usr" / "bin" / BINARY
    fw = _existing([str(root / "usr/share/qemu"), str(root / "usr/share/seabios"), *HOST_FIRMWARE])
    if not own_libs:
        return [str(binary), *_firmware_flags(fw)], fw
    lib = root / privapt.LIBDIR
    libs = ":".join([str(lib), str(root / "lib/x86_64-linux-gnu")])
    return [str(lib / privapt.LOADER), "--library-path", libs, str(binary), *_firmware_flags(fw)], fw


def _served(var: str, package: str, spec: str) -> tuple[str, str, list[str]]:
    """(suite, Debian version, apt options) of the first suite of :data:`SUITES` whose
    ``package`` is release ``spec``; StackError naming what each suite serves if none is
    (``var``: the Make variable that asked)."""
    seen: list[str] = []
    for suite in SUITES:
        try:
            opts = privapt.update(cache_root() / f"apt-{suite}", suite)
            version = privapt.candidate_version(opts, package)
        except privapt.PrivAptError as err:
            seen.append(f"{suite}: {err}")
            continue
        if version is None:
            seen.append(f"{suite}: none")
        elif matches(upstream(version), spec):
            return suite, version, opts
        else:
            seen.append(f"{suite}: {upstream(version)}")
    raise StackError(f"{var}={spec}: no Debian suite serves it ({'; '.join(seen)}): use one of those, or system")


def served(spec: str) -> tuple[str, str, list[str]]:
    """(suite, Debian version, apt options) of the first suite serving QEMU ``spec``; StackError
    naming what each suite serves if none does."""
    return _served("QEMU", "qemu-system-x86", spec)


def fetch_release(spec: str, log: Any = None) -> QemuBuild:
    """Fetch and unpack release ``spec`` (see the module doc) and record it; its QemuBuild."""
    say = log or (lambda msg: None)
    suite, version, opts = served(spec)
    base = cache_root() / spec
    root = base / "root"
    if root.exists():
        shutil.rmtree(root)
    say(f"QEMU={spec}: {suite}'s qemu-system-x86 {version}, unpacked under {root}")
    pkgs = [f"{p}={version}" for p in QEMU_PACKAGES]
    packages = privapt.download_and_unpack(opts, pkgs, base / "debs", root)
    argv, fw = release_argv(root, own_libs=False)
    own_libs = False
    try:
        line = version_line(argv[:1])
    except StackError:  # it needs its suite's newer libraries: unpack them and use its loader
        say(f"QEMU={spec}: {suite}'s build needs {suite}'s libraries: fetching its library closure")
        closure = privapt.run_tool(
            ["apt-cache", *opts, "depends", "--recurse", "--no-recommends", "--no-suggests", "--no-conflicts",
             "--no-breaks", "--no-replaces", "--no-enhances", "qemu-system-x86"],
        )  # fmt: skip
        libs = [p for p in _library_packages(closure) if p not in packages]
        packages |= privapt.download_and_unpack(opts, [*libs, "seabios"], base / "debs-libs", root)
        own_libs = True
        argv, fw = release_argv(root, own_libs=True)
        line = version_line(argv[: argv.index(str(root / "usr" / "bin" / BINARY)) + 1])
    m = VERSION_LINE.search(line)
    build = QemuBuild(
        spec=spec, argv=tuple(argv), version=line, release=m[1] if m else upstream(version), source=suite,
        binary=str(root / "usr" / "bin" / BINARY), packages={p: packages[p] for p in QEMU_PACKAGES if p in packages},
        firmware=tuple(fw),
    )  # fmt: skip
    _write_manifest(_manifest(spec), own_libs, packages, build.to_meta())
    return build


def release_qemu(spec: str, fetch: bool = True, log: Any = None) -> QemuBuild:
    """Release ``spec``, from the cache, else fetched (``fetch``) or StackError."""
    data = read_manifest(spec)
    if data is None:
        if not fetch:
            raise StackError(f"QEMU={spec} is not fetched here: run `make qemu QEMU={spec}`")
        return fetch_release(spec, log)
    return QemuBuild(
        spec=spec, argv=tuple(data["argv"]), version=data["version"], release=data["release"], source=data["source"],
        binary=data["binary"], packages=dict(data.get("packages") or {}), firmware=tuple(data.get("firmware") or ()),
    )  # fmt: skip


def resolve_qemu(spec: str | None, firmware: str | None = None, fetch: bool = True, log: Any = None) -> QemuBuild:
    """The QEMU of ``QEMU=spec`` (None: :data:`DEFAULT_QEMU`); StackError with one line if unusable."""
    spec = spec or DEFAULT_QEMU
    check_spec(spec)
    if firmware is not None and not spec.startswith("/"):
        raise StackError(f"QEMU_FIRMWARE={firmware} goes with QEMU=<path of your own build>, not QEMU={spec}")
    if spec == "system":
        return system_qemu()
    if spec.startswith("/"):
        return path_qemu(spec, firmware)
    return release_qemu(spec, fetch, log)


# ---------------------------------------------------------------------------------- libvirt
#: the libvirt whose daemons DRIVER=libvirt runs unless LIBVIRT= says otherwise: bookworm-backports'
#: build (on the host's libraries), which drives the default QEMU (the host's 9.0 drives only its 7.2)
DEFAULT_LIBVIRT = "11.3"
LIBVIRTD = "libvirtd"
#: libvirtd, its library, its QEMU connection driver and what they need of libvirt's own packages
LIBVIRT_PACKAGES = (
    "libvirt-daemon", "libvirt-daemon-driver-qemu", "libvirt-daemon-common", "libvirt-daemon-log", "libvirt0",
    "libvirt-common",
)  # fmt: skip
LIBVIRT_VERSION_LINE = re.compile(r"libvirtd \(libvirt\) (\d+\.\d+(?:\.\d+)?)")
#: where a libvirt build keeps its connection drivers (libvirtd reads LIBVIRT_DRIVER_DIR instead)
LIBVIRT_DRIVER_DIR = f"{privapt.LIBDIR}/libvirt/connection-driver"
#: data and helper directories of a fetched libvirt (CPU models, schemas; libvirt_iohelper),
#: compiled into it as the system paths: bind-mounted over them in the daemon's mount namespace
LIBVIRT_DATA_DIRS = ("usr/share/libvirt", "usr/lib/libvirt")


@dataclass(frozen=True)
class LibvirtBuild:
    """One libvirt whose libvirtd to run: ``argv`` is the daemon's command prefix (loader and
    library path where the build needs its suite's libc), ``env`` what it needs in its
    environment (its library and driver directories), ``mounts`` (private directory, system
    path) pairs to bind-mount before it starts."""

    spec: str  # what LIBVIRT= said
    argv: tuple[str, ...]
    version: str  # libvirtd --version
    release: str  # "11.3.0"
    source: str  # "system" or the Debian suite
    daemon: str  # the libvirtd binary
    packages: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    mounts: tuple[tuple[str, str], ...] = ()

    def to_meta(self) -> dict[str, Any]:
        """meta.json ``stack.libvirt``."""
        return asdict(self) | {"argv": list(self.argv), "mounts": [list(m) for m in self.mounts]}

    @classmethod
    def from_meta(cls, data: dict[str, Any]) -> LibvirtBuild:
        """The build :meth:`to_meta` (or a manifest) describes."""
        return cls(
            spec=data["spec"], argv=tuple(data["argv"]), version=data["version"], release=data["release"],
            source=data["source"], daemon=data["daemon"], packages=dict(data.get("packages") or {}),
            env=dict(data.get("env") or {}), mounts=tuple((m[0], m[1]) for m in data.get("mounts") or ()),
        )  # fmt: skip


def check_libvirt_spec(spec: str) -> None:
    """Refuse (StackError, one line) a LIBVIRT= that is neither ``system`` nor a release."""
    if spec == "system" or RELEASE.match(spec):
        return
    raise StackError(
        f"LIBVIRT={spec!r} is not a libvirt: use system (the host's libvirtd) or a release such as "
        f"{DEFAULT_LIBVIRT} (fetched from Debian)"
    )


def libvirt_version_line(argv: list[str] | tuple[str, ...], env: dict[str, str] | None = None) -> str:
    """``libvirtd --version`` of ``argv`` (with ``env`` added); StackError if it is not a libvirtd's."""
    not_it = "{program} is not a working libvirtd (--version: {why})"
    line = _first_version_line(argv, LIBVIRT_VERSION_LINE, not_it, env or {})
    m = LIBVIRT_VERSION_LINE.search(line)
    return m[0] if m else line  # without the path libvirtd names itself by


def system_libvirt() -> LibvirtBuild:
    """The host's libvirtd (Debian package libvirt-daemon)."""
    install = "Debian packages libvirt-daemon, libvirt-daemon-driver-qemu"
    f = _system_tool("LIBVIRT", LIBVIRTD, "libvirt-daemon", install, libvirt_version_line, LIBVIRT_VERSION_LINE)
    return LibvirtBuild(daemon=f.pop("path"), **f)


def _libvirt_dir(spec: str) -> Path:
    return cache_root() / f"libvirt-{spec}"


def libvirt_served(spec: str) -> tuple[str, str, list[str]]:
    """(suite, Debian version, apt options) of the first suite of :data:`SUITES` whose
    libvirt-daemon is libvirt ``spec``; StackError naming what each suite serves if none is."""
    return _served("LIBVIRT", "libvirt-daemon", spec)


def libvirt_release_argv(root: Path, own_libs: bool) -> tuple[list[str], dict[str, str]]:
    """(argv prefix, environment) of the libvirtd unpacked under ``root``: its own libvirt.so
    and connection drivers, through its suite's loader if it needs that suite's libc."""
    daemon = root / "usr" / "sbin" / LIBVIRTD
    lib = root / privapt.LIBDIR
    env = {"LIBVIRT_DRIVER_DIR": str(root / LIBVIRT_DRIVER_DIR)}
    if not own_libs:
        return [str(daemon)], env | {"LD_LIBRARY_PATH": str(lib)}
    libs = ":".join([str(lib), str(root / "lib/x86_64-linux-gnu")])
    return [str(lib / privapt.LOADER), "--library-path", libs, str(daemon)], env


def fetch_libvirt(spec: str, log: Any = None) -> LibvirtBuild:
    """Fetch and unpack libvirt ``spec``'s daemon packages (as :func:`fetch_release` does QEMU's)
    under ``<cache>/qemu/libvirt-<spec>/root`` and record them; its LibvirtBuild."""
    say = log or (lambda msg: None)
    suite, version, opts = libvirt_served(spec)
    base = _libvirt_dir(spec)
    root = base / "root"
    if root.exists():
        shutil.rmtree(root)
    say(f"LIBVIRT={spec}: {suite}'s libvirt-daemon {version}, unpacked under {root}")
    packages = privapt.download_and_unpack(opts, [f"{p}={version}" for p in LIBVIRT_PACKAGES], base / "debs", root)
    own_libs = False
    argv, env = libvirt_release_argv(root, own_libs=False)
    try:
        line = libvirt_version_line(argv, env)
    except StackError:  # it needs its suite's newer libraries: unpack them and use its loader
        say(f"LIBVIRT={spec}: {suite}'s build needs {suite}'s libraries: fetching its library closure")
        closure = privapt.run_tool(
            ["apt-cache", *opts, "depends", "--recurse", "--no-recommends", "--no-suggests", "--no-conflicts",
             "--no-breaks", "--no-replaces", "--no-enhances", "libvirt-daemon", "libvirt-daemon-driver-qemu"],
        )  # fmt: skip
        libs = [p for p in _library_packages(closure) if p not in packages]
        packages |= privapt.download_and_unpack(opts, libs, base / "debs-libs", root)
        own_libs = True
        argv, env = libvirt_release_argv(root, own_libs=True)
        line = libvirt_version_line(argv, env)
    m = LIBVIRT_VERSION_LINE.search(line)
    build = LibvirtBuild(
        spec=spec, argv=tuple(argv), version=line, release=m[1] if m else upstream(version), source=suite,
        daemon=str(root / "usr" / "sbin" / LIBVIRTD),
        packages={p: packages[p] for p in LIBVIRT_PACKAGES if p in packages}, env=env,
        mounts=tuple((str(root / d), "/" + d) for d in LIBVIRT_DATA_DIRS if (root / d).is_dir()),
    )  # fmt: skip
    _write_manifest(base / "manifest.json", own_libs, packages, build.to_meta())
    return build


def read_libvirt_manifest(spec: str) -> dict[str, Any] | None:
    """The fetched libvirt ``spec`` (None: not fetched, or from an older format)."""
    try:
        data = json.loads((_libvirt_dir(spec) / "manifest.json").read_text())
    except (OSError, ValueError):
        return None
    ok = isinstance(data, dict) and data.get("format") == MANIFEST_FORMAT and Path(data.get("daemon", "")).is_file()
    return data if ok else None


def resolve_libvirt(spec: str | None, fetch: bool = True, log: Any = None) -> LibvirtBuild:
    """The libvirt of ``LIBVIRT=spec`` (None: :data:`DEFAULT_LIBVIRT`): the host's, or a release
    from the cache, else fetched (``fetch``) or StackError with one line."""
    spec = spec or DEFAULT_LIBVIRT
    check_libvirt_spec(spec)
    if spec == "system":
        return system_libvirt()
    data = read_libvirt_manifest(spec)
    if data is not None:
        return LibvirtBuild.from_meta(data)
    if not fetch:
        raise StackError(f"LIBVIRT={spec} is not fetched here: run `make libvirt LIBVIRT={spec}`")
    return fetch_libvirt(spec, log)


#: where Debian's QEMU loads its modules from (compiled in: a fetched release looks there too)
QEMU_MODULE_DIR = f"/{privapt.LIBDIR}/qemu"


def qemu_module_mount(build: QemuBuild) -> tuple[str, str] | None:
    """(the fetched release's module directory, :data:`QEMU_MODULE_DIR`), or None for the host's
    QEMU and a user's own build.  A release must load its own modules and never the host
    package's: libvirt's capability probe lists every QOM type, which loads every module, and a
    module of another build fails QEMU's build check (QEMU 10.0 then aborts on an assertion in
    module_load_dso); ``QEMU_MODULE_DIR`` only adds a directory before the compiled-in one."""
    if build.source in ("system", "path"):
        return None
    moddir = Path(build.binary).parents[2] / privapt.LIBDIR / "qemu"
    return (str(moddir), QEMU_MODULE_DIR) if moddir.is_dir() else None


#: run by the emulator script in QEMU's own mount namespace: "$1" bind-mounted over "$2", then the
#: rest exec'd (nothing is interpolated into it)
_MODULE_MOUNT = 'mount --bind "$1" "$2" || exit 97; shift 2; exec "$@"'


def emulator_text(argv: list[str] | tuple[str, ...], mount: tuple[str, str] | None, unshare: str | None = None) -> str:
    """The script a libvirt domain's ``<emulator>`` names to run a QEMU whose argv is ``argv``
    (loader, firmware directories) with libvirt's arguments; with ``mount`` (module directory,
    :data:`QEMU_MODULE_DIR`) it runs in a mount namespace of its own whose module directory is
    the release's (:func:`qemu_module_mount`), through ``unshare`` (default: this machine's).
    Every step execs, so the process libvirt starts, and registers by PID, is QEMU's own."""
    full = list(argv)
    if mount is not None:
        unshare = unshare or shutil.which("unshare") or "/usr/bin/unshare"
        full = [unshare, "--mount", "--propagation", "private", "sh", "-c", _MODULE_MOUNT, "vrmig-qemu", *mount, *full]
    return "#!/bin/sh\nexec " + " ".join(shlex.quote(a) for a in full) + ' "$@"\n'


def emulator_script(build: QemuBuild, path: Path) -> str:
    """The ``<emulator>`` a libvirt domain names to run ``build``: its binary where its argv is
    the binary alone, else ``path``, written with :func:`emulator_text`."""
    mount = qemu_module_mount(build)
    if len(build.argv) == 1 and mount is None:
        return build.argv[0]
    write_text(path, emulator_text(build.argv, mount))
    path.chmod(0o755)
    return str(path)


def main(argv: list[str] | None = None) -> int:
    """``python -m migrate.core.stack qemu [RELEASE]`` (``make qemu``): fetch a QEMU release ahead of time."""
    p = argparse.ArgumentParser(prog="python -m migrate.core.stack", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="what", required=True)
    q = sub.add_parser("qemu", help="fetch (or show) the QEMU of QEMU=")
    q.add_argument("spec", nargs="?", default=DEFAULT_QEMU, help=f"system, a release or a path ({DEFAULT_QEMU})")
    q.add_argument("--firmware", default=None, help="QEMU_FIRMWARE: the data directory of your own build")
    q.add_argument("--force", action="store_true", help="fetch again even if fetched")
    lv = sub.add_parser("libvirt", help="fetch (or show) the libvirt of LIBVIRT=")
    lv.add_argument("spec", nargs="?", default=DEFAULT_LIBVIRT, help=f"system or a release ({DEFAULT_LIBVIRT})")
    lv.add_argument("--force", action="store_true", help="fetch again even if fetched")
    a = p.parse_args(argv)
    if a.what == "libvirt":
        return _main_libvirt(a.spec, a.force)
    return _main_qemu(a.spec, a.firmware, a.force)


#: what a failed ``make qemu`` or ``make libvirt`` reports in one line
_FETCH_ERRORS: tuple[type[Exception], ...] = (StackError, privapt.PrivAptError)


def _build_line(var: str, build: QemuBuild | LibvirtBuild) -> str:
    """The line ``make qemu`` or ``make libvirt`` prints for ``build`` (``var``: QEMU or LIBVIRT)."""
    return f"{var}={build.spec}: {build.version} ({build.source}): {' '.join(build.argv)}"


def _main_qemu(spec: str, firmware: str | None, force: bool) -> int:
    """``make qemu``: fetch (or show) the QEMU of QEMU=."""

    def qemu() -> QemuBuild:
        if force and spec and RELEASE.match(spec):
            return fetch_release(spec, log=print)
        return resolve_qemu(spec, firmware, log=print)

    return report_fetch("qemu", qemu, _FETCH_ERRORS, lambda b: _build_line("QEMU", b), 2)


def _main_libvirt(spec: str, force: bool) -> int:
    """``make libvirt``: fetch (or show) the libvirt of LIBVIRT=."""

    def libvirt() -> LibvirtBuild:
        check_libvirt_spec(spec)
        return fetch_libvirt(spec, log=print) if force and spec != "system" else resolve_libvirt(spec, log=print)

    return report_fetch("libvirt", libvirt, _FETCH_ERRORS, lambda b: _build_line("LIBVIRT", b), 2)


if __name__ == "__main__":
    sys.exit(main())
