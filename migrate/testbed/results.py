"""Results roots and run directories as the suite's own: markers, and the checks a results root
must pass before anything is written into it."""

from __future__ import annotations

import datetime as dt
import os
import shutil
from collections.abc import Callable
from pathlib import Path

from migrate.core import meta as metamod
from migrate.core.errors import ConfigError
from migrate.core.rundir import RESULTS_ROOT_MARKER, RUN_MARKER

MIN_FREE_BYTES = 64 * 2**20  # a 20 s run at 1G of 64 B frames writes well under this


def check_results_root(results_root: Path) -> None:
    """The results root must be ours (absent, empty, or carrying our marker) and have room."""
    if results_root.exists():
        if not results_root.is_dir():
            raise ConfigError(f"RESULTS={results_root} exists and is not a directory: choose another path")
        entries = list(results_root.iterdir())
        ours = all((e / RUN_MARKER).exists() for e in entries if e.name != RESULTS_ROOT_MARKER)
        default_root = results_root.resolve() == metamod.REPO / "results"  # the repo's git-ignored results/
        if entries and not (results_root / RESULTS_ROOT_MARKER).exists() and not ours and not default_root:
            raise ConfigError(
                f"RESULTS={results_root} exists and is not a vrmig results directory "
                f"(no {RESULTS_ROOT_MARKER} marker): choose a new or empty path"
            )
        probe = results_root
    else:
        probe = next((p for p in results_root.parents if p.exists()), Path("/"))
    if not os.access(probe, os.W_OK):
        raise ConfigError(f"RESULTS={results_root}: {probe} is not writable")
    st = os.statvfs(probe)
    free = st.f_bavail * st.f_frsize
    if free < MIN_FREE_BYTES:
        raise ConfigError(
            f"RESULTS={results_root}: only {free // 2**20} MiB free on that file system; "
            f"a run needs at least {MIN_FREE_BYTES // 2**20} MiB"
        )


def mark_results_root(results_root: Path) -> None:
    """Create ``results_root`` if needed and mark it as a vrmig results root."""
    results_root.mkdir(parents=True, exist_ok=True)
    marker = results_root / RESULTS_ROOT_MARKER
    if not marker.exists():
        marker.write_text("vrmig results root\n")


def new_run_dir(results_root: Path, name: str, kind: str = "run", fill: Callable[[Path], None] | None = None) -> Path:
    """Create ``<results_root>/<UTC time>-<name>/`` (fails if it exists), mark the root and the
    directory as ours (the directory's marker says ``vrmig <kind> directory``).

    With ``fill``, the directory appears whole: it is made under a hidden name
    (``.<name>.opening-<pid>``), ``fill(dir)`` writes its first files there (meta.json), and one
    rename gives it its name, so that a SIGKILL at any moment leaves either no run directory or
    one with meta.json.  A hidden directory a killed process left is removed by the next call."""
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S.%fZ")[:-4] + "Z"
    mark_results_root(results_root)
    run_dir = results_root / f"{stamp}-{name}"
    if fill is None:
        run_dir.mkdir()
        (run_dir / RUN_MARKER).write_text(f"vrmig {kind} directory\n")
        return run_dir
    remove_dead_openings(results_root)
    stage = results_root / f".{run_dir.name}{OPENING}{os.getpid()}"
    stage.mkdir()
    try:
        (stage / RUN_MARKER).write_text(f"vrmig {kind} directory\n")
        fill(stage)
        if run_dir.exists():  # rename() would replace an empty directory of that name
            raise FileExistsError(f"{run_dir} exists")
        stage.rename(run_dir)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    return run_dir


#: the hidden name of a run directory being opened: ``.<name><OPENING><pid>``
OPENING = ".opening-"


def is_opening(path: Path) -> bool:
    """Whether ``path`` is a run directory still being opened (or one a killed process left half
    opened): not a run, whatever it holds."""
    return path.name.startswith(".") and OPENING in path.name


def remove_dead_openings(results_root: Path) -> list[Path]:
    """Remove the hidden, half-opened run directories under ``results_root`` whose process is
    gone (a SIGKILL between their creation and their rename); returns them."""
    gone = []
    for d in results_root.glob(f".*{OPENING}*"):
        pid = d.name.rpartition(OPENING)[2]
        if not pid.isdigit() or not (d / RUN_MARKER).exists() or Path(f"/proc/{pid}").exists():
            continue
        shutil.rmtree(d, ignore_errors=True)
        gone.append(d)
    return gone


def prepare_results_root(results_root: Path) -> None:
    """The results root must be ours (see migrate.testbed.results.check_results_root); mark it as ours."""
    check_results_root(results_root)
    results_root.mkdir(parents=True, exist_ok=True)
    marker = results_root / RESULTS_ROOT_MARKER
    if not marker.exists():
        marker.write_text("vrmig results root\n")
