"""A single migration's progress (``make migrate``): its phases, and an ETA from the scenario's
schedule (migrate.core.progress draws it: a live bar on a terminal, ``progress:`` lines
elsewhere, nothing with VRMIG_PROGRESS=0).

The phases differ too much in length for the mean of the finished ones to say anything about
the rest, so the ETA comes from the schedule: once the instruments run, the traffic ends at
their start + DURATION, or AFTER seconds after the migration if that ends later.  Before the
instruments start (the testbed and the router's boot, whose length nothing states ahead) the
ETA is unknown; after the traffic ends it is 0 (teardown and analysis take seconds)."""

from __future__ import annotations

import time
from collections.abc import Callable
from types import TracebackType

from migrate.core.progress import Progress

#: meta.json ``failure_class`` of a run that did not complete (docs/data-formats.md)
SETUP, MIGRATION, POST_MIGRATION, INTERRUPTED = "setup", "migration", "post-migration", "interrupted"
FAILURE_CLASSES = (SETUP, MIGRATION, POST_MIGRATION, INTERRUPTED)

PHASES = (
    "testbed and router boot",
    "forwarding before the migration",
    "migration",
    "forwarding after the migration",
    "teardown and analysis",
)


class RunProgress:
    """The phases of one run, advanced by the run as it goes (each call ends the phase in hand
    and starts the next)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, **kw: object) -> None:
        self.clock = clock
        #: the schedule (DURATION, AFTER), given when the instruments start
        self.duration_s = self.after_s = 0.0
        self.t_instruments: float | None = None
        self.t_migrated: float | None = None
        self.progress = Progress("migrate", len(PHASES), "phases", eta=self.eta_s, clock=clock, **kw)  # type: ignore[arg-type]
        self.index = -1

    def eta_s(self) -> float | None:
        """Seconds until the traffic ends by the schedule (None before the instruments run)."""
        if self.t_instruments is None:
            return None
        end = self.t_instruments + self.duration_s
        if self.t_migrated is not None:
            end = max(end, self.t_migrated + self.after_s)
        return max(0.0, end - self.clock())

    def _next(self) -> None:
        if self.index >= 0:
            self.progress.finish()
        self.index += 1
        if self.index < len(PHASES):
            self.progress.start(PHASES[self.index])

    def begin(self) -> None:
        """The run starts: the testbed and the router's boot."""
        self._next()

    def instruments_started(self, duration_s: float, after_s: float, at: float | None = None) -> None:
        """The instruments run and forward: the schedule's clock started ``at`` (default: now; the
        traffic lasts ``duration_s`` from then, and at least ``after_s`` past the migration's end)."""
        self.duration_s, self.after_s = duration_s, after_s
        self.t_instruments = self.clock() if at is None else at
        self._next()

    def migrating(self) -> None:
        """The migration starts."""
        self._next()

    def migrated(self) -> None:
        """The migration ended (completed or not)."""
        self.t_migrated = self.clock()
        self._next()

    def traffic_ended(self) -> None:
        """The instruments stopped: teardown and analysis remain."""
        self._next()

    def __enter__(self) -> RunProgress:
        self.progress.open()
        self.begin()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc_type is None and self.index == len(PHASES) - 1:
            self.progress.finish()
        # ended by an error before the boot was over: the error's own line says it all
        self.progress.close(quiet=exc_type is not None and self.index == 0)


class Phase:
    """The phase a run is in, which is the class of a failure that ends it there: ``setup``
    (testbed, boot, instruments, forwarding before the migration), ``migration`` (from the
    migrate call until the hypervisor reports the migration completed), ``post-migration``;
    ``progress``: the run's phases as the user sees them (``shown``: as VRMIG_PROGRESS says; else silent)."""

    def __init__(self, shown: bool = False) -> None:
        self.current = SETUP
        self.progress = RunProgress(enabled=None if shown else False)
