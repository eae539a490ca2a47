"""A private apt configuration: Debian packages of another suite fetched and unpacked, never installed.

``make criu`` (migrate.drivers.criu.setup) and the QEMU of ``QEMU=`` (migrate.core.stack) fetch
packages of a newer Debian suite this way: an own sources list naming only that suite, own lists
and cache directories, an empty dpkg status and no preferences, so the system's sources and
installed packages are never read or touched; ``apt-get download`` fetches the ``.deb`` files and
``dpkg-deb -x`` unpacks them into a private root.  apt itself has no such mode (``apt-get
install`` with another ``Dir`` still runs dpkg against the system), hence these few options.

Standard library only (``make setup`` runs it with the venv before anything else is built)."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

MIRROR = os.environ.get("VRMIG_DEBIAN_MIRROR", "http://deb.debian.org/debian")
KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
ARCH = "amd64"
LIBDIR = "usr/lib/x86_64-linux-gnu"
LOADER = "ld-linux-x86-64.so.2"
APT_TIMEOUT_S = 600.0
TOOL_TIMEOUT_S = 60.0


class PrivAptError(Exception):
    """An apt or dpkg step of the private configuration failed; the message says which and why."""


def apt_options(base: Path, suite: str) -> list[str]:
    """``-o`` options of a private apt configuration rooted at ``base`` that sees only ``suite``."""
    return [
        "-o", f"Dir::Etc::sourcelist={base / 'sources.list'}",
        "-o", "Dir::Etc::sourceparts=-",
        "-o", f"Dir::State::Lists={base / 'lists'}",
        "-o", f"Dir::Cache={base / 'cache'}",
        "-o", f"Dir::State::status={base / 'status'}",
        "-o", f"Dir::Etc::Preferences={base / 'preferences'}",
        "-o", f"Dir::Etc::PreferencesParts={base / 'preferences.d'}",
        "-o", f"APT::Architecture={ARCH}",
        "-o", f"APT::Architectures::={ARCH}",
        "-o", "APT::Sandbox::User=root",
        "-o", "Acquire::Languages=none",
        "-o", "Acquire::IndexTargets::deb::DEP-11::DefaultEnabled=false",
        "-o", "Acquire::IndexTargets::deb::DEP-11-icons::DefaultEnabled=false",
        "-o", "Acquire::IndexTargets::deb::DEP-11-icons-small::DefaultEnabled=false",
        "-o", "Acquire::IndexTargets::deb::DEP-11-icons-hidpi::DefaultEnabled=false",
        "-o", "Acquire::IndexTargets::deb::CNF::DefaultEnabled=false",
    ]  # fmt: skip


def sources_line(suite: str, mirror: str = MIRROR, keyring: str = KEYRING) -> str:
    """The one sources.list line of the private configuration."""
    return f"deb [arch={ARCH} signed-by={keyring}] {mirror} {suite} main\n"


def prepare_apt_dir(base: Path, suite: str) -> None:
    """Create the private apt tree (sources list, empty status, lists and cache directories)."""
    for d in ("lists/partial", "cache/archives/partial", "preferences.d", "debs"):
        (base / d).mkdir(parents=True, exist_ok=True)
    (base / "sources.list").write_text(sources_line(suite))
    (base / "status").write_text("")  # nothing installed: dependency closures are complete
    (base / "preferences").write_text("")


def run_tool(argv: list[str], timeout: float = TOOL_TIMEOUT_S, cwd: Path | None = None) -> str:
    """Run apt/dpkg (argv, never a shell string); its stdout, or PrivAptError with its last lines."""
    try:
        res = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=cwd, check=False)
    except FileNotFoundError:
        raise PrivAptError(f"{argv[0]} not found (needs a Debian system with apt and dpkg)") from None
    except subprocess.TimeoutExpired:
        raise PrivAptError(f"{' '.join(argv[:3])} ... did not finish within {timeout:.0f} s") from None
    if res.returncode != 0:
        tail = " | ".join((res.stderr.strip() or res.stdout.strip()).splitlines()[-3:])
        raise PrivAptError(f"{' '.join(argv[:3])} ... failed (exit {res.returncode}): {tail}")
    return res.stdout


def update(base: Path, suite: str, max_age_s: float = 86_400.0) -> list[str]:
    """Prepare the private configuration of ``suite`` under ``base`` and refresh its lists unless
    a refresh younger than ``max_age_s`` is recorded; its options."""
    prepare_apt_dir(base, suite)
    opts = apt_options(base, suite)
    stamp = base / "updated"
    if not stamp.exists() or time.time() - stamp.stat().st_mtime > max_age_s:
        run_tool(["apt-get", *opts, "update"], APT_TIMEOUT_S)
        stamp.touch()
    return opts


def candidate_version(opts: list[str], package: str) -> str | None:
    """The version of ``package`` the configuration of ``opts`` serves (None: it serves none)."""
    out = run_tool(["apt-cache", *opts, "madison", package])
    for line in out.splitlines():
        parts = [p.strip() for p in line.split("|")]
        if len(parts) >= 2 and parts[0] == package:
            return parts[1]
    return None


def download_and_unpack(opts: list[str], packages: list[str], debs: Path, root: Path) -> dict[str, str]:
    """``apt-get download`` of ``packages`` (``name`` or ``name=version``) into ``debs`` (emptied
    first), each unpacked with ``dpkg-deb -x`` into ``root``; {package: version} of what was unpacked."""
    debs.mkdir(parents=True, exist_ok=True)
    for old in debs.glob("*.deb"):
        old.unlink()
    run_tool(["apt-get", *opts, "download", *packages], APT_TIMEOUT_S, cwd=debs)
    root.mkdir(parents=True, exist_ok=True)
    versions: dict[str, str] = {}
    for deb in sorted(debs.glob("*.deb")):
        fields = run_tool(["dpkg-deb", "-f", str(deb), "Package", "Version"])
        info = dict(line.split(": ", 1) for line in fields.splitlines() if ": " in line)
        versions[info.get("Package", deb.name)] = info.get("Version", "?")
        run_tool(["dpkg-deb", "-x", str(deb), str(root)])
    return versions
