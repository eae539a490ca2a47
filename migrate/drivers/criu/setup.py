"""``make criu``: provide a CRIU that works on this kernel, cached under ``<cache>/criu``.

The candidates are tried in order and the first that passes both checks is recorded in
``<cache>/criu/manifest.json`` (which :mod:`migrate.drivers.criu.tool` reads at run time):

1. the system's ``criu`` (if installed);
2. CRIU from a newer Debian suite (:data:`SUITES`), never installed: its ``.deb`` files (criu,
   libcompel1 and every library it depends on, trixie's/forky's libc6 included) are fetched with
   ``apt-get download`` under a *private* apt configuration (own sources list, lists, cache and
   an empty dpkg status; the system's sources and installed packages are never touched),
   unpacked with ``dpkg-deb -x`` into ``<cache>/criu/<suite>/root`` and run through that suite's
   own dynamic loader.

The checks: ``criu check`` ("Looks good", e.g. Debian 12's 3.17 fails it on 6.1x kernels with
"vdso: Unexpected rt vDSO area bounds"), then a real ``criu dump --leave-running`` of a process
that holds an IPv6 socket (criu 4.1.1 passes ``criu check`` but cannot dump any inet socket on
Linux >= 6.16: "sockets: Can't get 1:16 opt: Operation not supported", criu issue #2705).

Standard library only (run with the system ``python3`` or the venv)."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from migrate.core.atomic import write_text
from migrate.core.make_fetch import report_fetch
from migrate.core.privapt import LIBDIR, LOADER, PrivAptError, apt_options, prepare_apt_dir, run_tool
from migrate.core.privapt import sources_line as sources_line  # re-exported (tests, bundles)

log = logging.getLogger("vrmig.criu")

MANIFEST_FORMAT = 1
#: Debian suites tried, in order, when the system has no working criu
SUITES = ("trixie", "forky")
CHECK_TIMEOUT_S = 60.0
APT_TIMEOUT_S = 600.0
SMOKE_READY_TIMEOUT_S = 10.0
#: a process with an IPv6 socket (zebra/bird-like), dumped by the smoke test
SMOKE_PROGRAM = (
    "import socket, sys, time\n"
    "s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)\n"
    "s.bind(('::1', 0))\n"
    "print('READY', flush=True)\n"
    "time.sleep(600)\n"
)


class CriuSetupError(Exception):
    """Providing CRIU failed; the message says what failed and why."""


@dataclass
class Candidate:
    """One way to run criu: ``argv`` is the command prefix (loader + binary for a private copy)."""

    source: str  # "system" or a Debian suite name
    argv: list[str]
    version: str | None = None
    packages: dict[str, str] = field(default_factory=dict)
    root: str | None = None


def cache_root(cache: Path | None = None) -> Path:
    """``<cache>/criu`` (cache: ``$VRMIG_CACHE`` or ``~/.cache/vrmig``, as for the router images)."""
    if cache is not None:
        return Path(cache).expanduser() / "criu"
    env = os.environ.get("VRMIG_CACHE")
    return (Path(env).expanduser() if env else Path.home() / ".cache" / "vrmig") / "criu"


def manifest_path(cache: Path | None = None) -> Path:
    """Where the chosen criu is recorded."""
    return cache_root(cache) / "manifest.json"


# ---------------------------------------------------------------------------------- private apt
# apt_options, sources_line and prepare_apt_dir live in migrate.core.privapt (the QEMU of QEMU= uses
# them too); imported above under their old names.


def runtime_packages(depends_output: str) -> list[str]:
    """Packages to unpack from ``apt-cache depends --recurse criu`` output: criu and the
    libraries (``lib*``) of its dependency closure; tools (dpkg, tar, ...) and virtual packages
    (``<...>``) are left out - the host provides the tools criu executes."""
    names = set()
    for line in depends_output.splitlines():
        if not line or line[0].isspace() or line.startswith("<"):
            continue
        name = line.strip().split(":")[0]
        if name == "criu" or name.startswith("lib"):
            names.add(name)
    return sorted(names)


def _run(argv: list[str], timeout: float, cwd: Path | None = None) -> str:
    try:
        return run_tool(argv, timeout, cwd)
    except PrivAptError as err:
        raise CriuSetupError(str(err)) from None


def fetch_suite(suite: str, root: Path) -> Candidate:
    """Download criu of ``suite`` with the private apt configuration and unpack it under
    ``root/<suite>/root``; returns the candidate (not yet checked)."""
    base = root / f"apt-{suite}"
    prepare_apt_dir(base, suite)
    opts = apt_options(base, suite)
    log.info("criu: apt-get update (private configuration, suite %s)", suite)
    _run(["apt-get", *opts, "update"], APT_TIMEOUT_S)
    closure = _run(
        ["apt-cache", *opts, "depends", "--recurse", "--no-recommends", "--no-suggests", "--no-conflicts",
         "--no-breaks", "--no-replaces", "--no-enhances", "criu"],
        CHECK_TIMEOUT_S,
    )  # fmt: skip
    pkgs = runtime_packages(closure)
    if "criu" not in pkgs:
        raise CriuSetupError(f"Debian {suite} has no criu package")
    debs = base / "debs"
    for old in debs.glob("*.deb"):
        old.unlink()
    log.info("criu: apt-get download %d packages from %s", len(pkgs), suite)
    _run(["apt-get", *opts, "download", *pkgs], APT_TIMEOUT_S, cwd=debs)
    unpacked = root / suite / "root"
    if unpacked.exists():
        shutil.rmtree(unpacked)
    unpacked.mkdir(parents=True)
    versions: dict[str, str] = {}
    for deb in sorted(debs.glob("*.deb")):
        fields = _run(["dpkg-deb", "-f", str(deb), "Package", "Version"], CHECK_TIMEOUT_S)
        info = dict(line.split(": ", 1) for line in fields.splitlines() if ": " in line)
        versions[info.get("Package", deb.name)] = info.get("Version", "?")
        _run(["dpkg-deb", "-x", str(deb), str(unpacked)], CHECK_TIMEOUT_S)
    return Candidate(source=suite, argv=private_argv(unpacked), packages=versions, root=str(unpacked))


def private_argv(unpacked: Path) -> list[str]:
    """Command prefix running an unpacked criu through its own suite's loader and libraries."""
    lib = unpacked / LIBDIR
    return [str(lib / LOADER), "--library-path", str(lib), str(unpacked / "usr/sbin/criu")]


# ---------------------------------------------------------------------------------- checks
def criu_version(argv: list[str]) -> str:
    """``criu --version`` -> "4.2.1"."""
    out = _run([*argv, "--version"], CHECK_TIMEOUT_S)
    for line in out.splitlines():
        if line.startswith("Version:"):
            return line.split(":", 1)[1].strip()
    raise CriuSetupError(f"criu --version printed no version: {out.strip()!r}")


def check(argv: list[str]) -> str | None:
    """Run ``criu check``; None if it answers "Looks good.", else the reason (its error lines)."""
    try:
        res = subprocess.run([*argv, "check"], capture_output=True, text=True, timeout=CHECK_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"criu check could not run: {err}"
    out = res.stdout + res.stderr
    if res.returncode == 0 and "Looks good" in out:
        return None
    errors = [ln.strip() for ln in out.splitlines() if "Error" in ln] or out.strip().splitlines()[-2:]
    return f"criu check failed (exit {res.returncode}): {' | '.join(errors)}"


def smoke_dump(argv: list[str], workdir: Path) -> str | None:
    """Dump (``--leave-running``) a throwaway process holding an IPv6 socket; None if it worked,
    else the reason with criu's error lines.  The process is killed by PID afterwards."""
    workdir.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(
        [sys.executable, "-c", SMOKE_PROGRAM],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        close_fds=True,
    )
    try:
        assert proc.stdout is not None
        if proc.stdout.readline().strip() != b"READY":
            return "the smoke-test process did not start"
        proc.stdout.close()  # no pipe to the host left in the dumped process's view
        res = subprocess.run(
            [*argv, "dump", "--tree", str(proc.pid), "--images-dir", str(workdir), "--leave-running",
             "--shell-job", "--log-file", "dump.log", "-v2"],
            capture_output=True, text=True, timeout=CHECK_TIMEOUT_S, check=False,
        )  # fmt: skip
        if res.returncode == 0:
            return None
        log_text = (workdir / "dump.log").read_text(errors="replace") if (workdir / "dump.log").exists() else ""
        errors = [ln.strip() for ln in (log_text + res.stderr).splitlines() if "Error" in ln]
        return f"criu dump of a process with an IPv6 socket failed: {' | '.join(errors[-4:]) or res.stderr.strip()}"
    except subprocess.TimeoutExpired:
        return f"criu dump did not finish within {CHECK_TIMEOUT_S:.0f} s"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait()


def qualify(cand: Candidate, root: Path) -> str | None:
    """Both checks for one candidate; None if it is usable, else why not."""
    try:
        cand.version = criu_version(cand.argv)
    except CriuSetupError as err:
        return str(err)
    why = check(cand.argv)
    if why is not None:
        return why
    with tempfile.TemporaryDirectory(dir=root, prefix="smoke-") as tmp:
        return smoke_dump(cand.argv, Path(tmp))


# ---------------------------------------------------------------------------------- manifest
def read_manifest(cache: Path | None = None) -> dict | None:
    """The recorded choice, or None (absent or unreadable)."""
    try:
        data = json.loads(manifest_path(cache).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("format") == MANIFEST_FORMAT else None


def write_manifest(root: Path, chosen: Candidate, rejected: list[dict[str, str]]) -> Path:
    """Record the chosen candidate (and why the others were rejected)."""
    path = root / "manifest.json"
    write_text(
        path,
        json.dumps(
            {
                "format": MANIFEST_FORMAT,
                "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "kernel": os.uname().release,
                "chosen": asdict(chosen),
                "rejected": rejected,
            },
            indent=2,
        )
        + "\n",
    )
    return path


def setup(cache: Path | None = None, force: bool = False, suites: tuple[str, ...] = SUITES) -> Candidate:
    """Find or fetch a working criu and record it; CriuSetupError lists why every candidate failed."""
    root = cache_root(cache)
    root.mkdir(parents=True, exist_ok=True)
    old = read_manifest(cache)
    if old and not force:
        chosen = Candidate(**old["chosen"])
        if Path(chosen.argv[0]).exists() and check(chosen.argv) is None and old.get("kernel") == os.uname().release:
            log.info("criu: %s %s already set up (%s)", chosen.source, chosen.version, manifest_path(cache))
            return chosen
    rejected: list[dict[str, str]] = []
    system = shutil.which("criu")
    tries: list[tuple[str, Candidate | None]] = [("system", Candidate("system", [system]) if system else None)]
    tries += [(s, None) for s in suites]
    for source, cand in tries:
        if source == "system" and cand is None:
            rejected.append({"source": "system", "reason": "no criu installed"})
            continue
        try:
            cand = cand or fetch_suite(source, root)
        except CriuSetupError as err:
            rejected.append({"source": source, "reason": str(err)})
            log.warning("criu: %s: %s", source, err)
            continue
        why = qualify(cand, root)
        if why is None:
            write_manifest(root, cand, rejected)
            log.info("criu: using %s criu %s", cand.source, cand.version)
            return cand
        rejected.append({"source": source, "version": cand.version or "?", "reason": why})
        log.warning("criu: %s criu %s rejected: %s", source, cand.version, why)
    raise CriuSetupError("no usable criu: " + "; ".join(f"{r['source']}: {r['reason']}" for r in rejected))


def main(argv: list[str] | None = None) -> int:
    """``python -m migrate.drivers.criu.setup [--force] [--cache DIR]`` (the ``make criu`` target)."""
    p = argparse.ArgumentParser(prog="python -m migrate.drivers.criu.setup", description=__doc__.split("\n")[0])
    p.add_argument("--force", action="store_true", help="re-check and re-fetch even if set up")
    p.add_argument("--cache", type=Path, default=None, help="cache root (default $VRMIG_CACHE or ~/.cache/vrmig)")
    a = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if os.geteuid() != 0:
        print("make criu: run as root (criu dump needs it)", file=sys.stderr)
        return 2
    return report_fetch(
        "criu",
        lambda: setup(a.cache, a.force),
        (CriuSetupError,),
        lambda cand: f"criu {cand.version} ({cand.source}): {' '.join(cand.argv)}",
        1,
    )


if __name__ == "__main__":
    sys.exit(main())
