"""Pause a process tree with the cgroup v2 freezer (``cgroup.freeze``), as container managers do
(``HV=criu`` pauses of ``make calibrate``).

A cgroup of its own is created at the root of the cgroup v2 hierarchy (registered in the run's
registry first, so teardown and ``clean-testbed`` remove it), the router container's processes
are moved into it once, before any pause (children they fork later are born in it), and
``freeze``/``thaw`` write ``cgroup.freeze`` and return once ``cgroup.events`` reports the new
state: the kernel stops the tasks asynchronously.  Frozen tasks can still be killed (SIGKILL), so
a crash never leaves an unkillable container behind."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from migrate.core.errors import DependencyError, VrmigError
from migrate.core.registry import Registry

log = logging.getLogger(__name__)

MOUNTS = Path("/proc/mounts")
POLL_S = 0.0002
STATE_TIMEOUT_S = 5.0
ADOPT_ROUNDS = 20


class FreezerError(VrmigError):
    """The freezer did not reach the requested state in time."""


def cgroup2_root(mounts_text: str) -> Path | None:
    """Mount point of the cgroup v2 hierarchy in ``/proc/mounts`` text (None if not mounted)."""
    for line in mounts_text.splitlines():
        fields = line.split()
        if len(fields) > 2 and fields[2] == "cgroup2":
            return Path(fields[1])
    return None


def frozen_state(events_text: str) -> bool | None:
    """The ``frozen`` field of a ``cgroup.events`` file (None if absent)."""
    for line in events_text.splitlines():
        key, _, value = line.partition(" ")
        if key == "frozen":
            return value.strip() == "1"
    return None


class Freezer:
    """One cgroup v2 whose members are frozen and thawed together."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def create(cls, registry: Registry, name: str) -> Freezer:
        """A new cgroup ``name`` at the root of the cgroup v2 hierarchy, registered before it is
        made; DependencyError if there is no cgroup v2 freezer."""
        try:
            root = cgroup2_root(MOUNTS.read_text())
        except OSError:
            root = None
        if root is None or not (root / "cgroup.procs").exists():
            raise DependencyError("pausing a container needs the cgroup v2 freezer: no cgroup2 mount in /proc/mounts")
        path = root / name
        registry.add_path(path)
        path.mkdir()
        if not (path / "cgroup.freeze").exists():
            raise DependencyError(
                f"{path} has no cgroup.freeze: the kernel's cgroup v2 freezer (Linux >= 5.2) is needed"
            )
        return cls(path)

    def members(self) -> set[int]:
        """PIDs (thread-group leaders) in the cgroup."""
        return {int(x) for x in (self.path / "cgroup.procs").read_text().split()}

    def adopt(self, pids_of: Callable[[], Iterable[int]]) -> set[int]:
        """Move every process ``pids_of()`` lists into the cgroup, again until a pass finds none
        outside it (a process forked meanwhile by one not yet moved); returns the members."""
        for _ in range(ADOPT_ROUNDS):
            missing = set(pids_of()) - self.members()
            if not missing:
                return self.members()
            for pid in missing:
                with contextlib.suppress(ProcessLookupError):  # exited meanwhile
                    (self.path / "cgroup.procs").write_text(str(pid))
        raise FreezerError(f"processes kept appearing outside {self.path}: could not adopt the process tree")

    def frozen(self) -> bool:
        """True once the kernel reports every member frozen."""
        return bool(frozen_state((self.path / "cgroup.events").read_text()))

    def _set(self, frozen: bool) -> None:
        (self.path / "cgroup.freeze").write_text("1" if frozen else "0")
        deadline = time.monotonic() + STATE_TIMEOUT_S
        while self.frozen() != frozen:
            if time.monotonic() > deadline:
                raise FreezerError(f"{self.path} not {'frozen' if frozen else 'thawed'} within {STATE_TIMEOUT_S:.0f} s")
            time.sleep(POLL_S)

    def freeze(self) -> None:
        """Freeze the members; returns once the kernel reports them frozen."""
        self._set(True)

    def thaw(self) -> None:
        """Thaw the members; returns once the kernel reports them running."""
        self._set(False)

    def remove(self) -> None:
        """Thaw (a frozen task handles no SIGTERM) and remove the cgroup once it is empty; a cgroup
        that still has members is left to the registry's teardown (after it killed them)."""
        if not self.path.exists():
            return
        with contextlib.suppress(OSError):
            (self.path / "cgroup.freeze").write_text("0")
        try:
            self.path.rmdir()
        except OSError as err:
            log.debug("cgroup %s not removed yet: %s", self.path, err)
