"""Run-owned resource registry.

Every namespace and process a run creates is written to the run's state file *before* it is
created.  Teardown removes exactly what the file lists; ``clean_stale()`` finds state files of
dead runs and removes what they list.  Nothing is ever matched by name pattern or process name.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from migrate.atomic import write_json
from migrate.sighold import held_signals

log = logging.getLogger(__name__)

STATE_ROOT = Path(os.environ.get("VRMIG_STATE", "/run/vrmig"))
KILL_GRACE_S = 3.0
STATE_VERSION = 1


def proc_starttime(pid: int) -> int | None:
    """Start time of ``pid`` in clock ticks since boot (None if it does not exist)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # comm may contain spaces/parentheses: split after the last ')'
    return int(stat.rsplit(")", 1)[1].split()[19])


def pid_alive(pid: int, starttime: int | None) -> bool:
    """True if ``pid`` exists and is the same process (same start time) as recorded."""
    st = proc_starttime(pid)
    if st is None:
        return False
    if starttime is not None and st != starttime:
        return False
    with contextlib.suppress(OSError):
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        if state == "Z":
            return False
    return True


def _netns_exists(name: str) -> bool:
    return Path("/run/netns", name).exists()


@dataclass
class Registry:
    """Resources owned by one run, mirrored to ``<STATE_ROOT>/<prefix>/state.json``."""

    prefix: str
    run_dir: str | None = None
    namespaces: list[str] = field(default_factory=list)
    processes: list[dict[str, Any]] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)

    @property
    def dir(self) -> Path:
        """Private (0700) directory of this run: state file, QMP sockets."""
        return STATE_ROOT / self.prefix

    @property
    def state_file(self) -> Path:
        """The run's state file."""
        return self.dir / "state.json"

    def open(self) -> None:
        """Create the private state directory and the initial state file."""
        STATE_ROOT.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(STATE_ROOT, 0o700)
        self.dir.mkdir(mode=0o700, exist_ok=False)
        os.chmod(self.dir, 0o700)
        self._save()

    def _save(self) -> None:
        write_json(
            self.state_file,
            {
                "version": STATE_VERSION,
                "prefix": self.prefix,
                "owner_pid": os.getpid(),
                "owner_starttime": proc_starttime(os.getpid()),
                "run_dir": self.run_dir,
                "namespaces": self.namespaces,
                "processes": self.processes,
                "paths": self.paths,
            },
        )

    def add_netns(self, name: str) -> None:
        """Record a namespace that is about to be created."""
        self.namespaces.append(name)
        self._save()

    def create_netns(self, name: str) -> None:
        """Record a namespace, then create it with SIGINT/SIGTERM held until it exists.

        pyroute2 creates it in a child process and waits for it; a signal raising Interrupted in
        that wait would let teardown run first and the child mount the namespace after it (a
        leak seen when a sweep was SIGTERMed while building its testbed)."""
        from pyroute2 import netns

        self.add_netns(name)
        with held_signals():
            netns.create(name)

    def add_process(self, pid: int, what: str) -> None:
        """Record a process just started (PID and start time, so PID reuse is detected)."""
        self.processes.append({"pid": pid, "starttime": proc_starttime(pid), "what": what})
        self._save()

    def add_path(self, path: Path) -> None:
        """Record a file or directory outside the results directory that the run creates."""
        self.paths.append(str(path))
        self._save()

    def teardown(self) -> list[str]:
        """Remove everything recorded, processes first; return a list of problems (empty if clean)."""
        problems = teardown_state(
            {
                "namespaces": self.namespaces,
                "processes": self.processes,
                "paths": self.paths,
            }
        )
        if not problems:
            _remove_private_dir(self.dir)
        return problems


def _remove_private_dir(path: Path) -> None:
    """Remove a run's private directory: state file, QMP sockets, nothing else lives there."""
    if not path.is_dir():
        return
    for child in path.iterdir():
        with contextlib.suppress(FileNotFoundError):
            child.unlink()
    with contextlib.suppress(OSError):
        path.rmdir()


def _kill(procs: list[dict[str, Any]]) -> list[str]:
    problems: list[str] = []
    alive = [p for p in procs if pid_alive(p["pid"], p.get("starttime"))]
    for p in alive:
        with contextlib.suppress(ProcessLookupError):
            os.kill(p["pid"], signal.SIGTERM)
    deadline = time.monotonic() + KILL_GRACE_S
    while alive and time.monotonic() < deadline:
        alive = [p for p in alive if pid_alive(p["pid"], p.get("starttime"))]
        if alive:
            time.sleep(0.02)
    for p in alive:
        log.warning("process %s (%s) ignored SIGTERM; sending SIGKILL", p["pid"], p["what"])
        with contextlib.suppress(ProcessLookupError):
            os.kill(p["pid"], signal.SIGKILL)
    deadline = time.monotonic() + KILL_GRACE_S
    while alive and time.monotonic() < deadline:
        alive = [p for p in alive if pid_alive(p["pid"], p.get("starttime"))]
        if alive:
            time.sleep(0.02)
    problems += [f"process {p['pid']} ({p['what']}) survived SIGKILL" for p in alive]
    return problems


def teardown_state(state: dict[str, Any]) -> list[str]:
    """Kill recorded processes (by PID + start time), delete namespaces and paths."""
    from pyroute2 import netns

    problems = _kill(list(reversed(state.get("processes", []))))
    for name in reversed(state.get("namespaces", [])):
        if _netns_exists(name):
            try:
                netns.remove(name)
            except OSError as err:
                problems.append(f"namespace {name}: {err}")
    for p in reversed(state.get("paths", [])):
        path = Path(p)
        try:
            if path.is_dir() and not path.is_symlink() and (path / "cgroup.procs").exists():  # a cgroup
                path.rmdir()
            elif path.is_dir() and not path.is_symlink():
                for child in sorted(path.rglob("*"), reverse=True):
                    child.rmdir() if child.is_dir() and not child.is_symlink() else child.unlink()
                path.rmdir()
            elif path.exists() or path.is_symlink():
                path.unlink()
        except OSError as err:
            problems.append(f"path {path}: {err}")
    return problems


DEAD_RUN_WHY = "the orchestrator died (e.g. SIGKILL); resources were removed by clean-testbed"


def mark_dead_run(run_dir: Path, why: str = DEAD_RUN_WHY) -> None:
    """A run whose orchestrator died (SIGKILL, power loss) left meta.json at 'running': mark it
    'interrupted' (``why`` becomes its failure) so that every results directory is complete,
    failed or interrupted."""
    meta_path = run_dir / "meta.json"
    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        log.warning("cannot mark %s as interrupted: %s", run_dir, err)
        return
    if meta.get("status") == "running":
        meta["status"] = "interrupted"
        meta["failure"] = why
        meta["failure_class"] = "interrupted"
        write_json(meta_path, meta)


def clean_stale() -> list[str]:
    """Tear down resources of every run whose owner process is dead; return what was cleaned."""
    cleaned: list[str] = []
    if not STATE_ROOT.is_dir():
        return cleaned
    for state_file in sorted(STATE_ROOT.glob("*/state.json")):
        try:
            state = json.loads(state_file.read_text())
        except (OSError, json.JSONDecodeError) as err:
            log.warning("unreadable state file %s: %s (left alone)", state_file, err)
            continue
        if pid_alive(state.get("owner_pid", -1), state.get("owner_starttime")):
            continue
        problems = teardown_state(state)
        if state.get("run_dir"):
            mark_dead_run(Path(state["run_dir"]))
        for p in problems:
            log.warning("%s: %s", state.get("prefix"), p)
        if not problems:
            _remove_private_dir(state_file.parent)
        cleaned.append(str(state.get("prefix")))
    return cleaned
