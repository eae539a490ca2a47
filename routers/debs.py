"""Debian packages without installing them: versions and dependencies from ``apt-cache``,
files from ``apt-get download`` + ``dpkg-deb -x``.

``opts`` (where a function takes them) are the ``-o`` options of a private apt configuration
(:func:`migrate.core.privapt.update`, another Debian suite); empty: the host's own sources.

Nothing here runs a maintainer script, so no daemon is ever started on the host."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import tempfile
import urllib.parse
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from migrate.core.progress import Progress
from routers.errors import BuildError

log = logging.getLogger(__name__)

#: Dependency kinds followed when collecting a package's shared libraries.
FOLLOWED = ("Depends", "PreDepends")


def _run(argv: list[str], cwd: Path | None = None, timeout: float = 600) -> str:
    if shutil.which(argv[0]) is None:
        raise BuildError(f"{argv[0]} not found: the router build needs apt and dpkg (a Debian system)")
    try:
        res = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise BuildError(f"{' '.join(argv)} did not finish within {timeout:.0f} s") from None
    if res.returncode != 0:
        tail = (res.stderr.strip() or res.stdout.strip()).splitlines()[-3:]
        raise BuildError(f"{' '.join(argv[:4])}... failed (exit {res.returncode}): {' | '.join(tail)}")
    return res.stdout


def candidates(packages: Iterable[str], opts: Sequence[str] = ()) -> dict[str, str]:
    """``{package: candidate version}`` from ``apt-cache policy``; BuildError if one has none."""
    pkgs = sorted(set(packages))
    out = _run(["apt-cache", *opts, "policy", *pkgs])
    found: dict[str, str] = {}
    current = None
    for line in out.splitlines():
        if line and not line[0].isspace() and line.endswith(":"):
            current = line[:-1].split(":")[0]  # "libfoo:amd64:" -> libfoo (multiarch qualifier dropped)
        elif current and line.strip().startswith("Candidate:"):
            found[current] = line.split(":", 1)[1].strip()
    missing = [p for p in pkgs if found.get(p) in (None, "(none)")]
    if missing:
        raise BuildError(
            f"no installation candidate for {', '.join(missing)}: run `apt-get update` "
            "(`make setup` does) on a Debian 12 system with the main component enabled"
        )
    return {p: found[p] for p in pkgs}


def depends(packages: Iterable[str], recurse: bool = False, opts: Sequence[str] = ()) -> dict[str, list[str]]:
    """``{package: [dependency, ...]}`` (Depends + PreDepends; of alternatives the first real
    package; a virtual package resolved to its first provider).  With ``recurse``, every package
    reachable from ``packages`` is listed (one ``apt-cache`` call)."""
    pkgs = sorted(set(packages))
    out = _run(
        [
            "apt-cache", *opts, "depends", "--no-recommends", "--no-suggests", "--no-conflicts", "--no-breaks",
            "--no-replaces", "--no-enhances", *(["--recurse"] if recurse else []), *pkgs,
        ]
    )  # fmt: skip
    result: dict[str, list[str]] = {}
    current: str | None = None
    pending_virtual = False  # the previous dependency line named a virtual package
    in_alternatives = False  # the previous dependency line ended with '|'
    for line in out.splitlines():
        if not line.strip():
            continue
        if not line[0].isspace():
            current = line.strip().split(":")[0]
            result.setdefault(current, [])
            pending_virtual = in_alternatives = False
            continue
        assert current is not None
        stripped = line.strip()
        if ":" in stripped:
            alt_marker = stripped.startswith("|")
            kind, name = (s.strip() for s in stripped.lstrip("|").split(":", 1))
            if kind not in FOLLOWED:
                pending_virtual = in_alternatives = False
                continue
            # Only the first alternative of an or-group counts (it is what apt would pick).
            first_of_group = not in_alternatives
            in_alternatives = alt_marker
            if not first_of_group:
                continue
            name = name.split(":")[0]
            if name.startswith("<") and name.endswith(">"):
                pending_virtual = True
                continue
            pending_virtual = False
            result[current].append(name)
        elif pending_virtual:
            # provider of the virtual package listed just above
            result[current].append(stripped.split(":")[0])
            pending_virtual = False
    return result


def sections(packages: Iterable[str], opts: Sequence[str] = ()) -> dict[str, str]:
    """``{package: Section}`` of the candidate versions (``apt-cache show``)."""
    pkgs = sorted(set(packages))
    if not pkgs:
        return {}
    out = _run(["apt-cache", *opts, "show", "--no-all-versions", *pkgs])
    result: dict[str, str] = {}
    current = None
    for line in out.splitlines():
        if line.startswith("Package:"):
            current = line.split(":", 1)[1].strip()
        elif line.startswith("Section:") and current:
            result[current] = line.split(":", 1)[1].strip()
    return result


def library_closure(package: str, opts: Sequence[str] = ()) -> list[str]:
    """``package`` and, recursively, every dependency that is a shared-library package (name
    ``lib*`` or Debian section ``libs``, e.g. ``zlib1g``); tools such as ``iproute2`` or
    ``adduser`` are not needed in the guest.  Two ``apt-cache`` calls."""
    graph = depends([package], recurse=True, opts=opts)
    names = {d for ds in graph.values() for d in ds}
    secs = sections((n for n in names if not n.startswith("lib")), opts)

    def is_lib(name: str) -> bool:
        return name.startswith("lib") or secs.get(name, "").split("/")[-1] == "libs"

    seen = {package}
    frontier = [package]
    while frontier:
        nxt = []
        for pkg in frontier:
            for dep in graph.get(pkg, []):
                if dep not in seen and is_lib(dep):
                    seen.add(dep)
                    nxt.append(dep)
        frontier = nxt
    return sorted(seen)


def deb_version(path: Path) -> tuple[str, str] | None:
    """``(package, version)`` from a .deb file name as ``apt-get download`` writes it
    (``name_version_arch.deb``, the epoch colon URL-quoted), None for another name."""
    parts = path.name.removesuffix(".deb").split("_")
    if len(parts) != 3 or not path.name.endswith(".deb"):
        return None
    return parts[0], urllib.parse.unquote(parts[1])


def _find_deb(dest: Path, package: str, version: str) -> Path | None:
    for p in sorted(dest.glob(f"{package}_*.deb")):
        if deb_version(p) == (package, version):
            return p
    return None


def download(pinned: dict[str, str], dest: Path, opts: Sequence[str] = ()) -> dict[str, Path]:
    """Download ``{package: version}`` into ``dest`` (files already there are kept) and return
    ``{package: path}``.  apt verifies every file against the signed index."""
    dest.mkdir(parents=True, exist_ok=True)
    want = [f"{p}={v}" for p, v in sorted(pinned.items()) if _find_deb(dest, p, v) is None]
    if want:
        log.info("downloading %d Debian package(s): %s", len(want), " ".join(want))
        argv = ["apt-get", *opts, "download", "-q"]
        if os.geteuid() == 0 and not opts:
            # as root apt drops to _apt, which may not be able to write into the cache directory
            argv += ["-o", "APT::Sandbox::User=root"]
        _run([*argv, *want], cwd=dest)
    out = {}
    for p, v in pinned.items():
        path = _find_deb(dest, p, v)
        if path is None:
            raise BuildError(f"apt-get download {p}={v} did not produce a .deb in {dest}")
        out[p] = path
    return out


def extract(deb: Path, dest: Path) -> Path:
    """``dpkg-deb -x`` into ``dest`` (once: a finished extraction is marked and reused)."""
    marker = dest / ".vrmig-extracted"
    if marker.is_file():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    try:
        _run(["dpkg-deb", "-x", str(deb), str(tmp)])
        (tmp / ".vrmig-extracted").write_text(f"{deb.name}\n")
        if dest.exists():
            shutil.rmtree(dest)
        tmp.rename(dest)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return dest


def fetch(
    pinned: dict[str, str],
    cache: Path,
    progress: Progress,
    private: tuple[Sequence[str], frozenset[str]] | None = None,
) -> dict[str, Path]:
    """:func:`download` into ``<cache>/debs`` and :func:`extract` each package into
    ``<cache>/pool``; returns ``{package: extracted root}``.  ``private``: (apt options, the
    packages of ``pinned`` to download through them; the others come from the host's sources).
    ``progress`` gets :func:`fetch_steps` items: the download, then one per package."""
    with progress.item(f"download {len(pinned)} packages"):
        opts, own = private if private else ((), frozenset())
        deb_files = download({p: v for p, v in pinned.items() if p not in own}, cache / "debs")
        if own:
            deb_files |= download({p: v for p, v in pinned.items() if p in own}, cache / "debs", opts)
    pools = {}
    for p, deb in deb_files.items():
        with progress.item(f"extract {p}"):
            pools[p] = extract(deb, cache / "pool" / deb.name.removesuffix(".deb"))
    return pools


def fetch_steps(pinned: dict[str, str]) -> int:
    """Progress items of :func:`fetch`."""
    return 1 + len(pinned)


def fetch_and_assemble(
    title: str, pinned: dict[str, str], cache: Path, assemble: Callable[[dict[str, Path]], None]
) -> None:
    """Fetch and extract the pinned packages, then ``assemble(pools)`` the image from them, with
    one progress line over the downloads, the extractions and the assembly."""
    with Progress(title, fetch_steps(pinned) + 1, "steps") as progress:
        pools = fetch(pinned, cache, progress)
        with progress.item("rootfs and initrd"):
            assemble(pools)
