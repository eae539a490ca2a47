"""Signals and a run's teardown: hold SIGINT/SIGTERM across a step that must not be cut in half;
the run's abort flag (:class:`Abort`); teardown steps as ``with`` blocks (:class:`Teardown`).

Blocking the signals with ``pthread_sigmask`` covers only the calling thread: in a process with
other threads (QMP readers, the setns helper, a test's fake server) the kernel hands a
process-directed signal to one of them, and CPython then runs the Python handler in the main
thread at its next bytecode, in the middle of the step.  So the hold works at both levels: the
mask (which a child forked during the step inherits) and a recording handler installed in place
of the current one.  On leaving, the recorded signal is passed to the handler that was there
before, so it surfaces right after the step as it would have in it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any, TypeVar

from migrate.core.errors import Interrupted

log = logging.getLogger(__name__)
T = TypeVar("T")

HELD_SIGNALS = (signal.SIGINT, signal.SIGTERM)
Handler = Callable[[int, FrameType | None], Any] | int | None  # what signal.signal takes and returns


@contextmanager
def held_signals(mask: bool = True) -> Iterator[None]:
    """Defer SIGINT/SIGTERM until the ``with`` body has finished (main thread only; elsewhere
    the body simply runs, as Python cannot install handlers there).

    ``mask=False`` holds them at the Python level only: a blocked mask is inherited across fork
    and exec, so a body that starts long-lived children (which must stay stoppable by SIGTERM)
    must not block it; a body whose forked helper should finish its job (pyroute2's namespace
    creator) should."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    owner = os.getpid()
    seen: list[int] = []

    def record(signum: int, _frame: FrameType | None) -> None:
        if os.getpid() != owner:  # a child forked during the step: die as by default
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        seen.append(signum)

    try:
        with signal_handlers(record) as old:
            old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, HELD_SIGNALS) if mask else None
            try:
                yield
            finally:
                if old_mask is not None:
                    signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)  # a pending one is recorded here
    finally:
        if seen:
            _replay(seen[0], old[seen[0]])


def _replay(signum: int, handler: Handler) -> None:
    """Deliver ``signum`` to ``handler`` as the kernel would have."""
    if callable(handler):
        handler(signum, None)
    elif handler == signal.SIG_DFL:
        signal.raise_signal(signum)
    # SIG_IGN (or a handler not installed from Python): nothing to do


@contextmanager
def signal_handlers(handler: Handler) -> Iterator[dict[int, Handler]]:
    """``handler`` for SIGINT and SIGTERM while the ``with`` body runs; yields the previous
    handlers, which are put back afterwards."""
    old = {s: signal.signal(s, handler) for s in HELD_SIGNALS}
    try:
        yield old
    finally:
        for s, h in old.items():
            signal.signal(s, h)


@contextmanager
def interruptible() -> Iterator[None]:
    """SIGINT/SIGTERM raise Interrupted in the main thread while the ``with`` body runs (between
    sweep runs, around the CRIU host VM; a run's window, ``migrate.core.runctx.open_run``, installs its
    abort flag instead)."""

    def handler(signum: int, _frame: FrameType | None) -> None:
        raise Interrupted(f"interrupted by {signal.Signals(signum).name}")

    with signal_handlers(handler):
        yield


class Abort:
    """A run's abort flag: set by SIGINT/SIGTERM (install :meth:`handler`); the first signal also
    raises Interrupted in the main thread while ``armed``.  Calling it says whether a signal came."""

    def __init__(self, armed: bool = True) -> None:
        self.signum: int | None = None
        self.armed = armed
        self.owner_pid = os.getpid()

    def arm(self) -> None:
        """Raise Interrupted from now on; at once if a signal came while disarmed (a run starts
        disarmed until its meta.json exists, so a signal then leaves an interrupted run, not a
        results directory without meta.json)."""
        self.armed = True
        if self.signum is not None:
            raise Interrupted(f"interrupted by {signal.Signals(self.signum).name}")

    def __call__(self) -> bool:
        return self.signum is not None

    def handler(self, signum: int, _frame: Any) -> None:
        if os.getpid() != self.owner_pid:
            # a fork of ours (pyroute2's netns helper) inherited this handler: die as by default
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        first = self.signum is None
        self.signum = signum
        if first and self.armed:
            raise Interrupted(f"interrupted by {signal.Signals(signum).name}")


class Teardown:
    """The teardown steps of a run, as ``with`` blocks: ``with td.step("stop hypervisor", driver)``
    enters the resource and, when the block ends however it ends, first disarms ``abort`` (a
    signal from then on is recorded, not raised: teardown must finish), then leaves the resource.
    A step that fails is recorded in ``problems`` and the teardown goes on (the registry removes
    what remains by PID); the block's own exception is never replaced by a teardown error.
    Nested blocks leave in the reverse order of entry, so the nesting shows the teardown order."""

    def __init__(self, abort: Abort | None = None) -> None:
        self.abort = abort
        self.problems: list[str] = []

    @contextlib.contextmanager
    def step(self, name: str, resource: contextlib.AbstractContextManager[T]) -> Iterator[T]:
        """Enter ``resource``; on leaving, disarm the abort flag and leave it (see the class)."""
        value = resource.__enter__()
        try:
            yield value
        except BaseException as err:
            self._leave(name, resource, err)
            raise
        else:
            self._leave(name, resource, None)

    def call(self, name: str, fn: Callable[[], Any] | None) -> None:
        """One teardown step that is a plain callable (None: nothing to do), under the same
        rule: the abort flag is disarmed, a failure is recorded in ``problems``, never raised."""
        if self.abort is not None:
            self.abort.armed = False
        if fn is None:
            return
        try:
            fn()
        except Exception as problem:
            self.problems.append(f"{name}: {type(problem).__name__}: {problem}")
            log.warning("%s failed: %s", name, problem)

    def _leave(self, name: str, resource: contextlib.AbstractContextManager[Any], err: BaseException | None) -> None:
        self.call(name, lambda: resource.__exit__(type(err) if err else None, err, err.__traceback__ if err else None))
