"""The criu binary at run time: which one (``make criu``'s choice or the system's), whether it
works here, and the command lines of the CRIU phases (pure functions, unit-tested)."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from migrate.core.errors import DependencyError
from migrate.drivers.criu.setup import check, criu_version, manifest_path, read_manifest

CHECK_TIMEOUT_S = 60.0
LOG_LEVEL = 4  # criu -v4: the log that a failed dump/restore is explained from
SETUP_HINT = "run `make criu` (part of `make setup`)"
#: kernel features a mode needs, with what to tell the user when one is missing
MODE_FEATURES = {
    "precopy": (
        "mem_dirty_track",
        "MODE=precopy (criu pre-dump --track-mem) needs the kernel's soft-dirty page tracking, "
        'which this kernel lacks (CONFIG_MEM_SOFT_DIRTY is not set; criu: "Dirty tracking is OFF"): '
        "use CRIU_HOST=vm (the experiment runs in a VM booting Debian's kernel, which has it), "
        "MODE=stopcopy, or a kernel built with CONFIG_MEM_SOFT_DIRTY=y",
    ),
}


@dataclass(frozen=True)
class CriuBinary:
    """How to run criu: ``argv`` is the command prefix (loader + binary for a private copy)."""

    argv: tuple[str, ...]
    version: str
    source: str  # "system" or the Debian suite it was unpacked from

    def cmd(self, *args: str) -> list[str]:
        """Full argv of one criu command."""
        return [*self.argv, *args]


def locate(cache: Path | None = None) -> CriuBinary:
    """The criu to use, checked with ``criu check`` (no side effects).  DependencyError names the
    failing check and says how ``make setup`` fixes it."""
    manifest = read_manifest(cache)
    if manifest is not None:
        chosen = manifest["chosen"]
        argv = tuple(chosen["argv"])
        if not all(Path(p).exists() for p in (argv[0], argv[-1])):
            raise DependencyError(f"the criu recorded in {manifest_path(cache)} is gone ({argv[-1]}): {SETUP_HINT}")
        source = chosen["source"]
    else:
        system = shutil.which("criu")
        if system is None:
            raise DependencyError(f"criu is not set up (no {manifest_path(cache)}, no criu on PATH): {SETUP_HINT}")
        argv, source = (system,), "system"
    why = check(list(argv))
    if why is not None:
        raise DependencyError(f"{source} criu ({argv[-1]}) does not work on this kernel: {why}: {SETUP_HINT}")
    try:
        version = criu_version(list(argv))
    except Exception as err:  # criu_version raises CriuSetupError with the reason
        raise DependencyError(f"criu --version failed: {err}: {SETUP_HINT}") from None
    return CriuBinary(argv, version, source)


def feature_missing(criu: CriuBinary, feature: str) -> str | None:
    """``criu check --feature <feature>``: None if supported, else criu's own words."""
    try:
        res = subprocess.run(
            criu.cmd("check", "--feature", feature),
            capture_output=True,
            text=True,
            timeout=CHECK_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"criu check --feature {feature} could not run: {err}"
    if res.returncode == 0:
        return None
    lines = [ln.strip() for ln in (res.stdout + res.stderr).splitlines() if ln.strip()]
    return " | ".join(lines[-2:]) or f"exit {res.returncode}"


def require_mode(criu: CriuBinary, mode: str) -> None:
    """DependencyError if the kernel lacks what ``mode`` needs (e.g. soft-dirty for pre-dump)."""
    if mode not in MODE_FEATURES:
        return
    feature, explanation = MODE_FEATURES[mode]
    why = feature_missing(criu, feature)
    if why is not None:
        raise DependencyError(f"{explanation} (criu check --feature {feature}: {why})")


# ---------------------------------------------------------------------------------- command lines
def page_server_args(images: Path, address: str, port: int, prev: str | None = None) -> list[str]:
    """``criu page-server`` receiving pages into ``images`` (foreground; ``--status-fd 1`` writes
    one NUL byte to stdout once it listens)."""
    args = ["page-server", "--images-dir", str(images), "--address", address, "--port", str(port)]
    args += ["--status-fd", "1", "--log-file", "page-server.log", f"-v{LOG_LEVEL}"]
    if prev is not None:
        args += ["--prev-images-dir", prev]
    return args


def dump_args(
    pid: int,
    images: Path,
    address: str | None,
    port: int | None,
    *,
    pre: bool = False,
    prev: str | None = None,
    track_mem: bool = False,
    action_script: Path | None = None,
    tcp_established: bool = False,
    file_locks: bool = False,
) -> list[str]:
    """``criu dump`` (or ``pre-dump``) of the tree rooted at ``pid`` into ``images``; with an
    ``address`` the memory pages go to the page server there instead; ``tcp_established``: the
    router's established TCP connections (its BGP sessions) are dumped with their state, to be
    restored on R2 (CRIU's TCP repair mode; the final dump only); ``file_locks``: the locks the
    router holds (FRR's daemons lock their pid files) are dumped and taken again on restore.

    The container's veths need no option on dump (CRIU saves the inner end and, on restore,
    recreates the pair as told by ``--external veth[...]``)."""
    args = ["pre-dump" if pre else "dump", "--tree", str(pid), "--images-dir", str(images)]
    if address is not None:
        args += ["--page-server", "--address", address, "--port", str(port)]
    args += ["--log-file", "pre-dump.log" if pre else "dump.log", f"-v{LOG_LEVEL}", "--display-stats"]
    if prev is not None:
        args += ["--prev-images-dir", prev]
    if track_mem:
        args.append("--track-mem")
    if action_script is not None:
        args += ["--action-script", str(action_script)]
    if tcp_established and not pre:
        args.append("--tcp-established")
    if file_locks:
        args.append("--file-locks")
    return args


def restore_args(
    images: Path,
    root: Path,
    veths: list[tuple[str, str, str]],
    pidfile: Path,
    action_script: Path | None = None,
    tcp_established: bool = False,
    file_locks: bool = False,
) -> list[str]:
    """``criu restore`` of the container from ``images`` onto ``root``, detached; ``veths`` =
    (inner ifname, outer ifname, bridge): each pair is recreated and its outer end bridged;
    ``file_locks`` as :func:`dump_args`'s."""
    args = ["restore", "--images-dir", str(images), "--root", str(root), "--restore-detached"]
    args += ["--pidfile", str(pidfile), "--log-file", "restore.log", f"-v{LOG_LEVEL}", "--display-stats"]
    for inner, outer, bridge in veths:
        args += ["--external", f"veth[{inner}]:{outer}@{bridge}"]
    if action_script is not None:
        args += ["--action-script", str(action_script)]
    if tcp_established:
        args.append("--tcp-established")
    if file_locks:
        args.append("--file-locks")
    return args
