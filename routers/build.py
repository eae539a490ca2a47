"""Build the router guest image of a profile from Debian packages (``python -m routers build``).

Output in ``<cache>/guest/<profile>/`` (see :mod:`routers.paths`): ``vmlinuz``, ``initrd.img``
(gzip-compressed newc cpio), ``manifest.json`` and the unpacked tree ``rootfs/``.

* kernel: ``linux-image-cloud-amd64`` (the package it depends on), downloaded and extracted,
  never installed on the host; the NIC driver modules :data:`GUEST_MODULES` and their
  dependencies (read from each module's ``.modinfo``) are copied and loaded by the guest's init;
* ``busybox-static`` for the shell, ``ip``, ``insmod``, ``init``;
* the router software (``frr`` or ``bird2``) and every shared library its binaries need (read
  from the ELF ``DT_NEEDED`` entries), from the package and its library dependencies - all
  extracted with ``dpkg-deb -x``, so no maintainer script runs and no daemon starts on the host;
* XORP (not in Debian): copied from the host's installation, libraries from the host.
* the suite's own C tools (:func:`guest_tools`), compiled on the build host into ``/usr/sbin``:
  vrmig-dirty static, and the traffic tools vrgen, vrsink and vrtcp (the guest as an end host)
  linked against the C library the router's packages already put in the guest (static, the
  three would add 2.4 MB to every initramfs and so to the guest memory it needs).

Idempotent: when the manifest records the same inputs (package versions, this recipe) and the
files match their SHA-256, nothing is done.  Only the standard library is imported (and
:mod:`migrate.core.progress`, which imports rich only to draw a bar), so the Makefile can read
:data:`HOST_PACKAGES` with the system ``python3``.
"""

from __future__ import annotations

import contextlib
import fcntl
import gzip
import hashlib
import io
import json
import logging
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from migrate.core.atomic import write_bytes
from migrate.core.progress import Progress
from routers import cpio, debs, elf, paths, profiles
from routers.errors import BuildError, NotBuiltError
from routers.guest import ENDHOST_TOOLS, GUEST_FORMAT, GuestImage, guest_image, sha256_file

log = logging.getLogger(__name__)

#: Debian packages the host needs to build and boot the guest (``make setup`` installs them).
#: apt/dpkg: download and extract packages; qemu-system-x86: boot the guest;
#: iproute2: the namespaces/taps of the forwarding test.  Nothing else: cpio, gzip, ELF and
#: module-dependency handling are done in Python.
HOST_PACKAGES: tuple[str, ...] = ("apt", "dpkg", "qemu-system-x86", "iproute2")

#: The guest kernel (a meta package: the build follows it to the versioned image package).
KERNEL_META_PACKAGE = "linux-image-cloud-amd64"
BUSYBOX_PACKAGE = "busybox-static"

#: NIC drivers loaded by the guest (plus their dependencies).  e1000 is not built for Debian's
#: cloud kernel: with it, NIC=e1000 needs ``--kernel-package linux-image-amd64``.
GUEST_MODULES: tuple[str, ...] = ("virtio_pci", "virtio_net", "net_failover", "failover", "e1000")

#: Libraries loaded with dlopen() rather than DT_NEEDED (glibc loads libgcc_s for unwinding).
DLOPEN_SONAMES: tuple[str, ...] = ("libgcc_s.so.1",)

#: Where the dynamic loader looks when a binary has no run path (Debian multiarch first).
DEFAULT_LIB_DIRS: tuple[str, ...] = (
    "/lib/x86_64-linux-gnu",
    "/usr/lib/x86_64-linux-gnu",
    "/lib64",
    "/usr/lib64",
    "/lib",
    "/usr/lib",
)

GUESTFS = Path(__file__).resolve().parent / "guestfs"
REPO = Path(__file__).resolve().parents[1]
#: C sources compiled on the build host into static guest binaries (:data:`GUEST_TOOLS`)
GUESTSRC = Path(__file__).resolve().parent / "guestsrc"
#: guest binary name -> its source in GUESTSRC; each is built with ``CC``/:data:`TOOL_CFLAGS`,
#: installed as ``/usr/sbin/<name>`` and listed in manifest.json ``tools``
GUEST_TOOLS: dict[str, str] = {"vrmig-dirty": "vrmig-dirty.c"}
#: the suite's traffic tools (crosstraffic/src, as crosstraffic/Makefile builds them), so that
#: the guest can be an end host of the measured traffic as well as the router
CROSSTRAFFIC_SRC = REPO / "crosstraffic" / "src"
CROSSTRAFFIC_TOOLS: dict[str, str] = {name: f"{name}.c" for name in ENDHOST_TOOLS}
CROSSTRAFFIC_LIBS: tuple[str, ...] = ("-lm",)  # crosstraffic/Makefile LDLIBS
CC = "gcc"
TOOL_CFLAGS: tuple[str, ...] = ("-O2", "-std=gnu11", "-Wall", "-Wextra", "-Werror", "-Wshadow",
                                "-Wformat=2", "-D_FORTIFY_SOURCE=2")  # fmt: skip
RECIPE_FILES = ("build.py", "cpio.py", "debs.py", "elf.py", "profiles.py")
GZIP_LEVEL = 9

ETC_FILES: dict[str, str] = {
    "etc/passwd": "root:x:0:0:root:/root:/bin/sh\nfrr:x:100:101:FRR:/run/frr:/bin/false\n"
    "nobody:x:65534:65534:nobody:/nonexistent:/bin/false\n",
    "etc/group": "root:x:0:\nfrr:x:101:\nfrrvty:x:102:frr,root\nnogroup:x:65534:\n",
    "etc/nsswitch.conf": "passwd: files\ngroup: files\nshadow: files\nhosts: files\nservices: files\n",
    "etc/hosts": "127.0.0.1 localhost\n::1 localhost\n",
    "etc/inittab": "::sysinit:/usr/sbin/vrmig-boot\n",
    # vtysh authenticates its user; without this line it asks PAM (not configured in the guest)
    "etc/frr/vtysh.conf": "! vrmig: daemons are configured per daemon from /run/vrmig\nusername root nopassword\n",
}


@dataclass(frozen=True)
class ToolSource:
    """How one guest tool is compiled: the C file ``main`` in ``directory`` (on the include path,
    its headers ``#include``d by name), linked with ``libs``.  Every ``*.h`` of ``directory`` is
    an input beside ``main`` (hashed into the recipe and the manifest), so that editing a
    header rebuilds the image."""

    directory: Path
    main: str
    libs: tuple[str, ...] = ()
    static: bool = True  # False: linked against the guest's shared C library (resolved in the rootfs)

    @property
    def inputs(self) -> tuple[Path, ...]:
        """The files the binary is made from: ``main`` first, then the headers by name."""
        return (self.directory / self.main, *sorted(self.directory.glob("*.h")))


def guest_tools() -> dict[str, ToolSource]:
    """Every guest tool (:data:`GUEST_TOOLS` and :data:`CROSSTRAFFIC_TOOLS`) by binary name, from
    the source directories as they are now."""
    tools = {name: ToolSource(GUESTSRC, src) for name, src in GUEST_TOOLS.items()}
    for name, src in CROSSTRAFFIC_TOOLS.items():
        tools[name] = ToolSource(CROSSTRAFFIC_SRC, src, CROSSTRAFFIC_LIBS, static=False)
    return tools


def _repo_path(p: Path) -> str:
    """``p`` relative to the repository (absolute when it lies elsewhere)."""
    try:
        return p.resolve().relative_to(REPO).as_posix()
    except ValueError:
        return str(p)


@dataclass(frozen=True)
class BuildResult:
    """What :func:`build` did."""

    image: GuestImage
    built: bool  # False: already up to date
    seconds: float


# ------------------------------------------------------------------------------------ helpers
def upstream_version(debian_version: str) -> str:
    """``1:1.35.0-4+deb12u1`` -> ``1.35.0`` (no epoch, no Debian revision)."""
    v = debian_version.split(":", 1)[-1]
    return v.rsplit("-", 1)[0] if "-" in v else v


def _sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@contextlib.contextmanager
def _lock(path: Path) -> Iterator[None]:
    """One build at a time per cache (the .deb cache and the pool are shared)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.info("another build holds %s; waiting", path)
            fcntl.flock(fh, fcntl.LOCK_EX)
        yield


ImageT = TypeVar("ImageT")


@contextlib.contextmanager
def staged_dir(out: Path) -> Iterator[Path]:
    """A fresh 0755 staging directory next to ``out`` that replaces ``out`` when the ``with`` body
    succeeds and is removed when it fails.  Staging leftovers of an interrupted build are removed
    first (the caller holds the build lock)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    for stale in [*out.parent.glob(f".{out.name}.new.*"), *out.parent.glob(f".{out.name}.old.*")]:
        shutil.rmtree(stale, ignore_errors=True)
    stage = Path(tempfile.mkdtemp(prefix=f".{out.name}.new.", dir=out.parent))
    try:
        os.chmod(stage, 0o755)
        yield stage
        old = out.parent / f".{out.name}.old.{os.getpid()}"
        if out.exists():
            out.rename(old)
        stage.rename(out)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        if stage.exists():
            shutil.rmtree(stage, ignore_errors=True)


def read_manifest(
    d: Path, names: tuple[str, ...], manifest_name: str, fmt: int, what: str, make: str
) -> dict[str, Any]:
    """The manifest of a built host image in ``d`` (Xen host, CRIU VM) whose files ``names`` all
    exist and whose format is ``fmt``; NotBuiltError naming ``make`` (the target that builds it)."""
    missing = [n for n in (*names, manifest_name) if not (d / n).is_file()]
    if missing:
        raise NotBuiltError(f"the {what} image is not built ({', '.join(missing)} missing in {d}): "
                            f"run `{make}` (part of `make setup`)")  # fmt: skip
    try:
        manifest: dict[str, Any] = json.loads((d / manifest_name).read_text())
    except (OSError, ValueError) as err:
        raise NotBuiltError(f"{d / manifest_name} is unreadable ({err}): run `{make}`") from None
    if manifest.get("format") != fmt:
        raise NotBuiltError(f"{d} was built by another vrmig version: run `{make}`")
    return manifest


def cached_build(
    cdir: Path,
    name: str,
    resolve: Callable[[Path], dict[str, Any]],
    current: Callable[[Path], ImageT],
    make: Callable[[Path, dict[str, Any], str, float], None],
    *,
    force: bool = False,
) -> tuple[ImageT, bool, float]:
    """Build an image once per set of inputs (host images: nested Xen, CRIU VM).

    Under ``<cdir>/.build-<name>.lock``: ``resolve(cdir)`` gives the inputs, whose fingerprint
    ``current(cdir)``'s manifest must record as ``inputs_sha256`` for the build to be skipped
    (unless ``force``); else ``make(cdir, inputs, fingerprint, t0)`` builds it.  Returns
    (image, built, seconds)."""
    t0 = time.monotonic()
    with _lock(cdir / f".build-{name}.lock"):
        inputs = resolve(cdir)
        fingerprint = hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()
        if not force:
            with contextlib.suppress(NotBuiltError):
                image = current(cdir)
                if getattr(image, "manifest", {}).get("inputs_sha256") == fingerprint:
                    return image, False, time.monotonic() - t0
        make(cdir, inputs, fingerprint, t0)
    return current(cdir), True, time.monotonic() - t0


#: top-level directories that a merged-/usr system links into /usr
MERGED_USR = ("lib", "lib64", "bin", "sbin")


def _resolve_in_root(root: Path, abs_path: str, limit: int = 40) -> tuple[str, list[tuple[str, str]]]:
    """Follow symlinks of ``abs_path`` inside ``root`` (absolute targets stay inside ``root``).
    A path under ``/lib``, ``/lib64``, ``/bin`` or ``/sbin`` that ``root`` holds only under
    ``/usr`` resolves there: packages of a merged-/usr suite (Debian 13) ship their files under
    ``/usr`` and leave the top-level links to base-files, which is not unpacked (the guest's
    rootfs has those links, :class:`Rootfs`).

    Returns the final absolute path and the ``(link, target)`` chain walked."""
    chain: list[tuple[str, str]] = []
    cur = os.path.normpath(abs_path)
    for _ in range(limit):
        parts = cur.strip("/").split("/")
        for i in range(1, len(parts) + 1):
            prefix = "/" + "/".join(parts[:i])
            host = root / prefix.lstrip("/")
            if host.is_symlink():
                target = os.readlink(host)
                chain.append((prefix, target))
                base = target if target.startswith("/") else os.path.join(os.path.dirname(prefix), target)
                cur = os.path.normpath(os.path.join(base, *parts[i:]))
                break
        else:
            if (
                parts[0] in MERGED_USR
                and not (root / cur.lstrip("/")).exists()
                and (root / "usr" / cur.lstrip("/")).exists()
            ):
                cur = "/usr" + cur
                continue
            return cur, chain
    raise BuildError(f"too many symlinks resolving {abs_path} in {root}")


class Rootfs:
    """The guest's root file system being assembled (merged /usr layout)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        for d in ("usr/bin", "usr/sbin", "usr/lib", "usr/lib64", "etc/vrmig", "proc", "sys", "dev", "run", "tmp",
                  "root", "var/tmp", "var/log", "var/lib"):  # fmt: skip
            (root / d).mkdir(parents=True, exist_ok=True)
        for link in ("bin", "sbin", "lib", "lib64"):
            (root / link).symlink_to(f"usr/{link}")
        (root / "var/run").symlink_to("../run")
        os.chmod(root / "tmp", 0o1777)
        os.chmod(root / "var/tmp", 0o1777)
        self.copied: set[str] = set()

    def host(self, abs_path: str) -> Path:
        """The path on the build host of ``abs_path`` in the guest."""
        return self.root / abs_path.lstrip("/")

    def write(self, abs_path: str, text: str | bytes, mode: int = 0o644) -> None:
        """Create a file with this content."""
        p = self.host(abs_path)
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(text, str):
            text = text.encode()
        p.write_bytes(text)
        os.chmod(p, mode)

    def symlink(self, abs_path: str, target: str) -> None:
        """Create a symlink (an existing file or link of that name wins)."""
        p = self.host(abs_path)
        if p.is_symlink() or p.exists():
            return
        p.parent.mkdir(parents=True, exist_ok=True)
        p.symlink_to(target)

    def copy_from(self, src_root: Path, abs_path: str) -> str:
        """Copy ``abs_path`` from the tree ``src_root`` to the same path here, recreating the
        symlinks on the way; return the final (regular file) path."""
        final, chain = _resolve_in_root(src_root, abs_path)
        for link, target in chain:
            p = self.host(link)
            if not (p.is_symlink() or p.exists()):
                p.parent.mkdir(parents=True, exist_ok=True)
                p.symlink_to(target)
        src = src_root / final.lstrip("/")
        if not src.is_file():
            raise BuildError(f"{abs_path} not found in {src_root}")
        dst = self.host(final)
        if final not in self.copied and not dst.exists():
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst, follow_symlinks=True)
        self.copied.add(final)
        return final


class LibraryResolver:
    """Copies ELF objects with the shared libraries they need, resolved like ld.so would
    (run path, then the default directories) inside the given source trees."""

    def __init__(self, roots: list[Path], rootfs: Rootfs, extra_dirs: tuple[str, ...] = ()) -> None:
        self.roots = roots
        self.rootfs = rootfs
        self.extra_dirs = extra_dirs
        self.sonames: dict[str, str] = {}  # soname -> guest path
        self.missing: list[str] = []

    def _find(self, soname: str, runpath: tuple[str, ...], origin: str) -> tuple[Path, str] | None:
        dirs = [d.replace("$ORIGIN", origin).replace("${ORIGIN}", origin) for d in runpath]
        for d in [*dirs, *self.extra_dirs, *DEFAULT_LIB_DIRS]:
            for root in self.roots:
                abs_path = os.path.join(d, soname)
                final, _chain = _resolve_in_root(root, abs_path)
                if (root / final.lstrip("/")).is_file():
                    return root, abs_path
        return None

    def add(self, root: Path, abs_path: str) -> None:
        """Copy the ELF object ``abs_path`` of ``root`` and, recursively, its libraries."""
        final = self.rootfs.copy_from(root, abs_path)
        self._deps(self.rootfs.host(final), final)

    def add_soname(self, soname: str) -> bool:
        """Copy a library by soname (for dlopen()ed libraries); False if not found."""
        if soname in self.sonames:
            return True
        found = self._find(soname, (), "/")
        if found is None:
            return False
        self.sonames[soname] = found[1]
        self.add(*found)
        return True

    def _deps(self, host_file: Path, guest_path: str) -> None:
        info = elf.dynamic_info(host_file)
        todo: list[tuple[Path, str]] = []
        if info.interpreter and info.interpreter not in self.sonames:
            for root in self.roots:
                final, _ = _resolve_in_root(root, info.interpreter)
                if (root / final.lstrip("/")).is_file():
                    self.sonames[info.interpreter] = info.interpreter
                    todo.append((root, info.interpreter))
                    break
            else:
                self.missing.append(f"{info.interpreter} (interpreter of {guest_path})")
        for soname in info.needed:
            if soname in self.sonames:
                continue
            found = self._find(soname, info.runpath, os.path.dirname(guest_path))
            if found is None:
                self.missing.append(f"{soname} (needed by {guest_path})")
                self.sonames[soname] = ""
                continue
            self.sonames[soname] = found[1]
            todo.append(found)
        for root, path in todo:
            self.add(root, path)


# ------------------------------------------------------------------------------------ kernel
def kernel_image_package(kernel_package: str) -> str:
    """The versioned ``linux-image-<abi>-<flavour>`` package behind a meta package."""
    if re.match(r"^linux-image-\d", kernel_package):
        return kernel_package
    deps = debs.depends([kernel_package]).get(kernel_package, [])
    real = [d for d in deps if re.match(r"^linux-image-\d", d)]
    if not real:
        raise BuildError(f"{kernel_package} does not depend on a linux-image-<version> package (deps: {deps})")
    return real[0]


def _module_index(moddir: Path) -> dict[str, Path]:
    """module name (``-`` -> ``_``) -> .ko file."""
    index: dict[str, Path] = {}
    for ko in (moddir / "kernel").rglob("*.ko*"):
        name = ko.name.split(".ko")[0].replace("-", "_")
        index[name] = ko
    return index


def _builtin_modules(moddir: Path) -> set[str]:
    p = moddir / "modules.builtin"
    if not p.is_file():
        return set()
    return {Path(line.strip()).name.split(".ko")[0].replace("-", "_") for line in p.read_text().splitlines() if line}


def resolve_modules(moddir: Path, wanted: tuple[str, ...]) -> tuple[list[Path], list[str], list[str]]:
    """(``.ko`` files in load order, built-in modules, missing modules) for ``wanted``."""
    index = _module_index(moddir)
    builtin = _builtin_modules(moddir)
    order: list[Path] = []
    done: set[str] = set()
    found_builtin: list[str] = []
    missing: list[str] = []

    def visit(name: str, stack: tuple[str, ...]) -> None:
        name = name.replace("-", "_")
        if name in done:
            return
        done.add(name)
        if name in builtin:
            found_builtin.append(name)
            return
        ko = index.get(name)
        if ko is None:
            missing.append(name)
            return
        if ko.suffix != ".ko":
            raise BuildError(f"{ko}: compressed kernel modules are not supported (busybox insmod)")
        for dep in filter(None, elf.modinfo(ko).get("depends", "").split(",")):
            if dep in stack:
                raise BuildError(f"module dependency cycle: {' -> '.join((*stack, dep))}")
            visit(dep, (*stack, dep))
        order.append(ko)

    for name in wanted:
        visit(name, (name,))
    return order, found_builtin, missing


# ------------------------------------------------------------------------------------ inputs
def _recipe_sha256() -> str:
    h = hashlib.sha256()
    here = Path(__file__).resolve().parent
    for name in RECIPE_FILES:
        h.update(name.encode() + b"\0" + (here / name).read_bytes())
    for p in sorted(GUESTFS.iterdir()):
        h.update(p.name.encode() + b"\0" + p.read_bytes())
    for name, tool in sorted(guest_tools().items()):
        h.update(name.encode() + b"\0" + json.dumps([tool.libs, tool.static]).encode())
        for f in tool.inputs:
            h.update(b"\0" + f.name.encode() + b"\0" + f.read_bytes())
    h.update(json.dumps([GUEST_FORMAT, GUEST_MODULES, DLOPEN_SONAMES, ETC_FILES, GZIP_LEVEL]).encode())
    h.update(json.dumps([CC, TOOL_CFLAGS]).encode())
    return h.hexdigest()


def _xorp_tree_sha256(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.is_file() and not p.is_symlink():
            st = p.stat()
            h.update(f"{p.relative_to(root)}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


APT_STATE_PATHS = ("/var/lib/apt/lists", "/etc/apt/sources.list", "/etc/apt/sources.list.d",
                   "/etc/apt/preferences", "/etc/apt/preferences.d")  # fmt: skip


def apt_state() -> str:
    """A fingerprint of apt's package indexes and configuration (changes with `apt-get update`)."""
    h = hashlib.sha256()
    for base in APT_STATE_PATHS:
        b = Path(base)
        files = sorted(b.iterdir()) if b.is_dir() else [b]
        for f in files:
            with contextlib.suppress(OSError):
                st = f.stat()
                if f.is_file():
                    h.update(f"{f}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def cached_resolution(cache_file: Path, key: dict[str, Any], compute: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """``compute()``'s value, kept in ``cache_file`` for as long as ``key`` (apt state, format,
    ...) is the same: ``apt-cache`` can take a second per call, and a resolution needs several."""
    with contextlib.suppress(OSError, ValueError):
        cached = json.loads(cache_file.read_text())
        if cached.get("key") == key:
            return cached["value"]
    value = compute()
    cache_file.parent.mkdir(parents=True, exist_ok=True)
    write_bytes(cache_file, json.dumps({"key": key, "value": value}, indent=1, sort_keys=True).encode())
    return value


def release_apt(profile: profiles.Profile) -> list[str]:
    """The apt options that see the packages of ``profile``'s release: a private configuration of
    its Debian suite (:mod:`migrate.core.privapt`, lists refreshed daily), or none (``[]``: the
    host's own sources, Debian 12)."""
    rel = profile.release
    if rel is None or rel.suite is None:
        return []
    from migrate.core import privapt, stack

    try:
        return privapt.update(stack.cache_root() / f"apt-{rel.suite}", rel.suite)
    except privapt.PrivAptError as err:
        raise BuildError(f"ROUTER={profile.name}: the package lists of {rel.source} are unavailable: {err}") from None


def _private_stamp(opts: list[str]) -> str:
    """When the private lists of ``opts`` were last refreshed ("" for the host's sources)."""
    lists = next((o.split("=", 1)[1] for o in opts if o.startswith("Dir::State::Lists=")), None)
    if lists is None:
        return ""
    stamp = Path(lists).parent / "updated"
    return str(stamp.stat().st_mtime_ns) if stamp.exists() else ""


def _resolve_packages(profile: profiles.Profile, kernel_package: str, cdir: Path) -> dict[str, Any]:
    """Pinned versions of the kernel and busybox (the host's sources) and the router packages (its
    release's suite); cached per apt state."""
    opts = release_apt(profile) if profile.package else []

    def compute() -> dict[str, Any]:
        kpkg = kernel_image_package(kernel_package)
        router_pkgs = debs.library_closure(profile.package, opts) if profile.package else []
        host = debs.candidates([kpkg, BUSYBOX_PACKAGE])
        router = debs.candidates(router_pkgs, opts) if router_pkgs else {}
        clash = sorted(set(host) & set(router))
        if clash:
            raise BuildError(f"{profile.name}: {', '.join(clash)} would come from two Debian suites")
        rel = profile.release
        served = upstream_version(router[profile.package]) if profile.package else ""
        if rel is not None and served != rel.version and not served.startswith(rel.version + "."):
            raise BuildError(
                f"ROUTER={profile.name}: {rel.source} serves {profile.package} {router[profile.package]}, "
                f"not {rel.version}: choose another release (`python -m routers profiles`)"
            )
        return {
            "kernel_meta_package": kernel_package,
            "kernel_package": kpkg,
            "packages": {**host, **router},
            "router_suite": rel.suite if rel is not None else None,
            "router_packages": sorted(router) if rel is not None and rel.suite else [],
        }

    key = {
        "apt_state": apt_state(),
        "private_lists": _private_stamp(opts),
        "profile": profile.name,
        "kernel_meta_package": kernel_package,
    }
    return cached_resolution(cdir / f"resolved-{profile.name}.json", key, compute)


def resolve_inputs(profile: profiles.Profile, kernel_package: str, cdir: Path) -> dict[str, Any]:
    """Everything the image is built from: pinned package versions and the recipe's hash."""
    inputs: dict[str, Any] = {
        "format": GUEST_FORMAT,
        "profile": profile.name,
        **_resolve_packages(profile, kernel_package, cdir),
        "recipe_sha256": _recipe_sha256(),
        "compiler": compiler_version(),
    }
    if not profile.debian:
        root = profiles.xorp_root()
        if root is None:
            raise BuildError(profiles.xorp_missing_reason())
        inputs["xorp_root"] = str(root)
        inputs["xorp_tree_sha256"] = _xorp_tree_sha256(root)
    return inputs


def _fingerprint(inputs: dict[str, Any]) -> str:
    return _sha256_bytes(json.dumps(inputs, sort_keys=True).encode())


def _up_to_date(profile: str, cache: Path, fingerprint: str) -> GuestImage | None:
    try:
        image = guest_image(profile, cache)
    except Exception:  # any problem means "rebuild"
        return None
    if image.manifest.get("inputs_sha256") != fingerprint or image.rootfs is None:
        return None
    return image


# ------------------------------------------------------------------------------------ assembly
def _add_busybox(rootfs: Rootfs, pool: Path) -> None:
    rootfs.copy_from(pool, "/bin/busybox")
    bb = rootfs.host("/bin/busybox")
    out = subprocess.run([str(bb), "--list-full"], capture_output=True, text=True, check=True).stdout
    for applet in out.split():
        if applet == "linuxrc":
            continue
        rootfs.symlink("/" + applet, "/bin/busybox")
    rootfs.symlink("/init", "/bin/busybox")  # busybox init (argv[0] "init") reads /etc/inittab


def single_kernel(kroot: Path, package: str, *, list_images: bool = False) -> tuple[str, Path]:
    """The release and the vmlinuz of the one kernel in ``kroot`` (the unpacked ``package``).

    BuildError when it holds no or several module trees or images; ``list_images``: the message
    names the images too."""
    kvers = sorted(p.name for p in (kroot / "lib" / "modules").iterdir())
    vmlinuz = sorted((kroot / "boot").glob("vmlinuz-*"))
    if len(kvers) != 1 or len(vmlinuz) != 1:
        found = f"modules {kvers} and {[v.name for v in vmlinuz]}" if list_images else f"{kvers}"
        raise BuildError(f"{package}: expected one kernel, found {found}")
    return kvers[0], vmlinuz[0]


def install_modules(rootfs: Rootfs, moddir: Path, kver: str, order: list[Path]) -> list[str]:
    """Copy the modules ``order`` (files under ``moddir``) to ``/lib/modules/<kver>/`` in ``rootfs``
    and list them, in that order, in ``/etc/vrmig/modules``; returns their paths relative to ``moddir``."""
    lines = []
    for ko in order:
        rel = ko.relative_to(moddir).as_posix()
        dst = rootfs.host(f"/lib/modules/{kver}/{rel}")
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ko, dst)
        lines.append(rel)
    rootfs.write("/etc/vrmig/modules", "".join(f"{ln}\n" for ln in lines))
    return lines


def _add_modules(rootfs: Rootfs, kroot: Path, kver: str) -> dict[str, Any]:
    moddir = kroot / "lib" / "modules" / kver
    order, builtin, missing = resolve_modules(moddir, GUEST_MODULES)
    for m in missing:
        log.warning("kernel module %s is not in %s (neither a module nor built in): skipped", m, kver)
    lines = install_modules(rootfs, moddir, kver, order)
    return {
        "requested": list(GUEST_MODULES),
        "load_order": [Path(r).name.removesuffix(".ko") for r in lines],
        "builtin": builtin,
        "missing": missing,
    }


def _add_router(rootfs: Rootfs, profile: profiles.Profile, pools: dict[str, Path]) -> None:
    roots = [pools[p] for p in sorted(pools) if p not in (BUSYBOX_PACKAGE,) and not p.startswith("linux-image-")]
    resolver = LibraryResolver([pools[profile.package], *roots], rootfs)  # type: ignore[index]
    for f in profile.files:
        resolver.add(pools[profile.package], "/" + f)  # type: ignore[index]
    for f in profile.optional_files:
        if (pools[profile.package] / f).exists():  # type: ignore[index]
            resolver.add(pools[profile.package], "/" + f)  # type: ignore[index]
    for soname in DLOPEN_SONAMES:
        if not resolver.add_soname(soname):
            log.warning("%s not found in the router's library packages", soname)
    if resolver.missing:
        raise BuildError(f"{profile.name}: shared libraries not found in its packages: {', '.join(resolver.missing)}")


def _add_xorp(rootfs: Rootfs, root: Path) -> None:
    """Copy the host's XORP installation (same prefix) and the host libraries it needs."""
    dest = rootfs.host(str(root))
    shutil.copytree(root, dest, symlinks=True, dirs_exist_ok=True)
    lib_dirs = (*sorted({str(p.parent) for p in root.rglob("*.so*")}), "/usr/local/lib")
    resolver = LibraryResolver([Path("/")], rootfs, extra_dirs=lib_dirs)
    for p in sorted(dest.rglob("*")):
        if p.is_file() and not p.is_symlink() and elf.is_elf(p):
            guest_path = "/" + p.relative_to(rootfs.root).as_posix()
            with contextlib.suppress(elf.ElfError):
                resolver._deps(p, guest_path)
    for soname in DLOPEN_SONAMES:
        resolver.add_soname(soname)
    if resolver.missing:
        raise BuildError(f"xorp: host libraries not found: {', '.join(resolver.missing)}")
    rootfs.write("/etc/vrmig/xorp-root", f"{root}\n")


def compiler_version() -> str:
    """``gcc --version``'s first line (the guest tools are built with it); BuildError without gcc."""
    cc = shutil.which(CC)
    if cc is None:
        raise BuildError(f"{CC} not found: the guest tools are compiled on this host (`make setup`: gcc, libc6-dev)")
    out = subprocess.run([cc, "--version"], capture_output=True, text=True, check=False).stdout
    return out.splitlines()[0].strip() if out else CC


def _add_tools(rootfs: Rootfs, compiler: str, lib_roots: Sequence[Path] = ()) -> dict[str, Any]:
    """Compile every :func:`guest_tools` entry into ``/usr/sbin`` (static ones need nothing from
    the guest's libraries; the others are given theirs, :func:`_link_in_guest`); the manifest's
    ``tools`` entry of each.  Called once the router and its libraries are in ``rootfs``;
    ``lib_roots``: the trees of the router's library packages (none: XORP, from the host)."""
    tools: dict[str, Any] = {}
    host_sourced: set[str] = set()
    for name, tool in sorted(guest_tools().items()):
        dst = rootfs.host(f"/usr/sbin/{name}")
        main = tool.directory / tool.main
        static = ("-static",) if tool.static else ()
        argv = [CC, *static, *TOOL_CFLAGS, "-I", str(tool.directory), "-o", str(dst), str(main), *tool.libs]
        res = subprocess.run(argv, capture_output=True, text=True, check=False)
        if res.returncode != 0:
            tail = " | ".join((res.stderr or res.stdout).strip().splitlines()[-3:])
            raise BuildError(f"compiling {tool.main} for the guest failed (exit {res.returncode}): {tail}")
        os.chmod(dst, 0o755)
        linkage = (
            {"linkage": "static"}
            if tool.static
            else _link_in_guest(rootfs, dst, f"/usr/sbin/{name}", lib_roots, host_sourced)
        )
        tools[name] = {
            "path": f"/usr/sbin/{name}",
            "source": _repo_path(main),
            "source_sha256": sha256_file(main),
            "inputs": {_repo_path(f): sha256_file(f) for f in tool.inputs},
            "sha256": sha256_file(dst),
            "bytes": dst.stat().st_size,
            "compiler": compiler,
            "cflags": [*static, *TOOL_CFLAGS],
            "libs": list(tool.libs),
            **linkage,
        }
    return tools


def _link_in_guest(
    rootfs: Rootfs, binary: Path, guest_path: str, lib_roots: Sequence[Path], host_sourced: set[str]
) -> dict[str, Any]:
    """Give a dynamically linked tool its shared libraries: each from the guest's own tree when
    the router's packages put it there (the C library always does), else from those packages'
    trees ``lib_roots`` (libm beside the guest's libc, of the same glibc build), else from the
    build host (which compiled the tool, so its versions satisfy the tool's symbol versions); the
    manifest's ``linkage``, ``needed`` and ``host_libraries`` (those of its sonames the image
    holds from the host, added to ``host_sourced`` by this or an earlier tool).  BuildError when
    one is found nowhere."""
    info = elf.dynamic_info(binary)
    origin = os.path.dirname(guest_path)
    in_packages = LibraryResolver([rootfs.root, *lib_roots], rootfs)
    host_sourced.update(s for s in info.needed if in_packages._find(s, info.runpath, origin) is None)
    resolver = LibraryResolver([rootfs.root, *lib_roots, Path("/")], rootfs)
    resolver._deps(binary, guest_path)
    if resolver.missing:
        raise BuildError(f"{guest_path}: shared libraries not found in the guest or on this host: "
                         f"{', '.join(resolver.missing)}")  # fmt: skip
    host_libraries = [s for s in info.needed if s in host_sourced]
    return {"linkage": "dynamic", "needed": list(info.needed), "host_libraries": host_libraries}


def _initrd_bytes(rootfs_dir: Path) -> tuple[bytes, int]:
    """gzip(newc cpio of the tree + /dev/console + /dev/null); and the uncompressed size."""
    raw = io.BytesIO()
    entries = [
        *cpio.tree_entries(rootfs_dir),
        cpio.char_device("dev/console", 5, 1, 0o600),
        cpio.char_device("dev/null", 1, 3, 0o666),
    ]
    size = cpio.write(raw, entries)
    return gzip.compress(raw.getvalue(), compresslevel=GZIP_LEVEL, mtime=0), size


def build(
    profile: str = profiles.DEFAULT_PROFILE,
    cache: Path | str | None = None,
    *,
    force: bool = False,
    kernel_package: str = KERNEL_META_PACKAGE,
) -> BuildResult:
    """Build (or confirm up to date) the guest image of ``profile`` in ``cache``."""
    t0 = time.monotonic()
    prof = profiles.get(profile)
    profile = prof.name  # frr@10.3 is frr
    if not prof.debian:  # Debian profiles: a missing package is reported by the resolution below
        prof.require_available()
    cdir = paths.cache_dir(cache)
    with _lock(cdir / ".build.lock"):
        inputs = resolve_inputs(prof, kernel_package, cdir)
        fingerprint = _fingerprint(inputs)
        if not force:
            image = _up_to_date(profile, cdir, fingerprint)
            if image is not None:
                return BuildResult(image, built=False, seconds=time.monotonic() - t0)
        manifest = _build(prof, cdir, inputs, fingerprint, t0)
        log.info("built %s in %.1f s", profile, manifest["build_seconds"])
    return BuildResult(guest_image(profile, cdir), built=True, seconds=time.monotonic() - t0)


def _build(prof: profiles.Profile, cdir: Path, inputs: dict[str, Any], fingerprint: str, t0: float) -> dict[str, Any]:
    """Assemble the image in ``<cache>/guest/.<profile>.new.*`` and swap it in with two renames,
    so a concurrent :func:`~routers.guest.guest_image` sees the old or the new image, never half."""
    pinned: dict[str, str] = inputs["packages"]
    own = frozenset(inputs.get("router_packages", ()))
    private = (release_apt(prof), own) if own else None
    with Progress(f"guest {prof.name}", debs.fetch_steps(pinned) + 1, "steps") as progress:
        pools = debs.fetch(pinned, cdir, progress, private)
        with progress.item("rootfs and initrd"):
            return _assemble(prof, cdir, inputs, fingerprint, t0, pools)


def _assemble(
    prof: profiles.Profile, cdir: Path, inputs: dict[str, Any], fingerprint: str, t0: float, pools: dict[str, Path]
) -> dict[str, Any]:
    """The rootfs from the extracted packages, its initrd, the kernel and the manifest, staged
    and swapped in; returns the manifest."""
    pinned: dict[str, str] = inputs["packages"]
    kpkg = inputs["kernel_package"]
    kroot = pools[kpkg]
    kver, vmlinuz = single_kernel(kroot, kpkg, list_images=True)

    gdir = paths.guest_dir(prof.name, cdir)
    with staged_dir(gdir) as stage:
        (stage / paths.ROOTFS_NAME).mkdir(mode=0o755)
        rootfs = Rootfs(stage / paths.ROOTFS_NAME)
        _add_busybox(rootfs, pools[BUSYBOX_PACKAGE])
        modules = _add_modules(rootfs, kroot, kver)
        if prof.debian:
            _add_router(rootfs, prof, pools)
            router_version = pinned[prof.package]  # type: ignore[index]
            upstream = upstream_version(router_version)
        else:
            _add_xorp(rootfs, Path(inputs["xorp_root"]))
            router_version = upstream = os.environ.get("XORP_VERSION", "unknown")
        for name in ("vrmig-boot", "vrmig-router"):
            rootfs.write(f"/usr/sbin/{name}", (GUESTFS / name).read_bytes(), 0o755)
        lib_roots = [pools[p] for p in sorted(pools) if p != BUSYBOX_PACKAGE and not p.startswith("linux-image-")]
        tools = _add_tools(rootfs, inputs["compiler"], lib_roots if prof.debian else [])
        for path, text in ETC_FILES.items():
            rootfs.write("/" + path, text)
        if prof.family == "frr":
            rootfs.host("/usr/share/yang").mkdir(parents=True, exist_ok=True)  # YANG modules are built in
        rootfs.write("/etc/vrmig/profile", f"{prof.family}\n")
        rootfs.write("/etc/vrmig/router-version", f"{upstream}\n")
        rootfs.write("/etc/vrmig/packages.json", json.dumps(pinned, indent=1, sort_keys=True) + "\n")
        initrd, raw_size = _initrd_bytes(rootfs.root)
        (stage / paths.INITRD_NAME).write_bytes(initrd)
        shutil.copyfile(vmlinuz, stage / paths.KERNEL_NAME)
        manifest = _manifest(prof, inputs, fingerprint, t0, kver, modules, (router_version, upstream), stage, gdir)
        manifest["files"][paths.INITRD_NAME]["uncompressed_bytes"] = raw_size
        manifest["tools"] = tools
        (stage / paths.MANIFEST_NAME).write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def _manifest(
    prof: profiles.Profile,
    inputs: dict[str, Any],
    fingerprint: str,
    t0: float,
    kver: str,
    modules: dict[str, Any],
    versions: tuple[str, str],
    stage: Path,
    gdir: Path,
) -> dict[str, Any]:
    """The manifest.json content (``versions``: router package version, upstream version)."""
    pinned: dict[str, str] = inputs["packages"]
    kpkg = inputs["kernel_package"]
    router_version, upstream = versions
    files: dict[str, dict[str, Any]] = {}
    for name in (paths.KERNEL_NAME, paths.INITRD_NAME):
        files[name] = {"sha256": sha256_file(stage / name), "bytes": (stage / name).stat().st_size}
    files[paths.INITRD_NAME]["format"] = "newc cpio, gzip"
    return {
        "format": GUEST_FORMAT,
        "profile": prof.name,
        "built_at": datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
        "build_seconds": round(time.monotonic() - t0, 1),
        "inputs_sha256": fingerprint,
        "kernel_package": {
            "name": kpkg,
            "version": pinned[kpkg],
            "meta_package": inputs["kernel_meta_package"],
            "release": kver,
        },
        "modules": modules,
        "router": {
            "software": prof.software,
            "package": prof.package or f"host install at {inputs.get('xorp_root')}",
            "version": router_version,
            "upstream_version": upstream,
            "release": prof.release.version if prof.release else None,
            "source": prof.release.source if prof.release else "the host's installation",
            "daemons": list(prof.daemons),
        },
        "busybox": {
            "package": BUSYBOX_PACKAGE,
            "version": pinned[BUSYBOX_PACKAGE],
            "upstream_version": upstream_version(pinned[BUSYBOX_PACKAGE]),
        },
        "packages": pinned,
        "files": files,
        "rootfs": str(gdir / paths.ROOTFS_NAME),
    }


def run_image(profile: str, cache: Path | None = None, verify: bool = True) -> GuestImage:
    """:func:`guest_image`, building the image first when ``profile`` names a release other than
    a default one (``frr@8.4``: ``make setup`` builds only the defaults) and it is not built yet,
    as ``QEMU=`` fetches its release on first use."""
    try:
        return guest_image(profile, cache, verify)
    except NotBuiltError:
        if profiles.get(profile).name in profiles.names():
            raise
    return build(profile, cache=cache).image
