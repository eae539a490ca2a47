"""A run's window: what every run-like command (``run``, ``calibrate``, ``baseline``) does around
its body, in one place.

``with open_run(kind, make_dir, describe, ...) as run:`` does, in this order:

1. tears down what dead runs left behind (:func:`~migrate.core.registry.clean_stale_before_a_run`);
2. installs the run's abort flag as the SIGINT/SIGTERM handler, disarmed: a signal from here until
   meta.json exists is recorded, not raised, so it leaves an interrupted run rather than a results
   directory without meta.json;
3. creates the results directory with meta.json in it, in one step that a SIGKILL cannot split
   (``make_dir``; ``reopen``: an existing one, whose meta.json is read back and set running
   again): meta.json opens with :func:`migrate.core.meta.opening` of ``kind`` and the kind's own
   fields (``describe``) and is written (:func:`migrate.core.rundir.write_meta`);
4. arms the abort flag (a signal that came meanwhile raises now) and runs the body, which reads
   ``run.dir``, ``run.meta`` and ``run.abort`` and gives its verdict (:meth:`OpenRun.complete`,
   :meth:`OpenRun.fail`, or the meta.json fields directly);
5. records how the body ended (below), closes meta.json (end-of-run clock offset where it has a
   ``clock``, ``finished_utc``, ``on_close``), analyses the directory (``analyse``) and, if the
   run was interrupted, raises :class:`Interrupted` (the command exits 130); the previous
   handlers are back once the ``with`` is left.

How an ending is recorded (``status``, ``failure``; ``failure_class`` only where the kind records
one, ``failure_class`` given):

* the body returns: its verdict; a signal recorded meanwhile (a teardown disarms the flag) makes
  the run interrupted "... during teardown"; no verdict at all (or a BaseException such as
  KeyboardInterrupt passing through) is a failure ("the run ended without a status") where the
  kind ``records_errors``;
* :class:`Interrupted` (a signal while armed): interrupted, class ``interrupted``; a ``resumable``
  run's message says how to resume it;
* any other :class:`VrmigError` (a ConfigError inside the body included): failed with its message;
  any other exception: failed as an internal error, logged with its traceback; the class is
  ``failure_class()`` at that moment (a migration's phase).  Without ``records_errors`` (a baseline,
  whose configurations record their own failures) both pass through unrecorded and end the command
  with their own exit status;
* a signal that surfaced as another error (a library swallowed Interrupted, a wait saw the flag):
  interrupted, the error kept in the message.

A first failure stays the run's failure (and class); later ones are appended to its message.
Checks that must leave nothing behind (bad input: exit 2) come before the window."""

from __future__ import annotations

import contextlib
import logging
import signal
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from migrate.core import meta as metamod
from migrate.core.errors import Interrupted, VrmigError
from migrate.core.registry import clean_stale_before_a_run
from migrate.core.rundir import read_meta, write_meta
from migrate.core.sighold import Abort, signal_handlers

#: meta.json ``failure_class`` of a run stopped by the operator (migrate.core.rundir.FAILURE_CLASSES)
INTERRUPTED = "interrupted"
NO_VERDICT = "internal error: the run ended without a status"

FailureClass = Callable[[], str] | str | None


def record_failure(meta: dict[str, Any], failure_class: str | None, message: str) -> None:
    """Mark the run failed with ``message`` and its class; a failure already recorded stays the
    run's failure (and class), later ones are appended to its message."""
    if meta.get("status") == "failed" and meta.get("failure"):
        meta["failure"] = f"{meta['failure']}; then: {message}"
        return
    meta["status"], meta["failure"], meta["failure_class"] = "failed", message, failure_class


def record_interrupted(meta: dict[str, Any], message: str, failure_class: str | None = INTERRUPTED) -> None:
    """Mark the run interrupted (an operator stop), keeping an earlier failure in the message;
    ``failure_class`` None for a kind that records no class."""
    if meta.get("status") == "failed" and meta.get("failure"):
        message = f"{message} (after: {meta['failure']})"
    meta["status"], meta["failure"], meta["failure_class"] = "interrupted", message, failure_class


@dataclass
class OpenRun:
    """The run inside the window: its results directory, its meta.json (as a dict; write it with
    :func:`migrate.core.rundir.write_meta` as the run goes on) and its abort flag."""

    dir: Path
    meta: dict[str, Any]
    abort: Abort
    failure_class: FailureClass = None
    resumable: bool = False

    @property
    def classed(self) -> bool:
        """Whether this kind records a failure class."""
        return self.failure_class is not None

    def current_class(self) -> str | None:
        """The class a failure would have now (None: the kind records none)."""
        return self.failure_class() if callable(self.failure_class) else self.failure_class

    def complete(self) -> None:
        """The body's verdict: completed."""
        self.meta["status"], self.meta["failure"], self.meta["failure_class"] = "completed", None, None

    def fail(self, message: str) -> None:
        """The body's verdict: failed with ``message`` (of the current class)."""
        record_failure(self.meta, self.current_class(), message)

    def interrupted(self, message: str) -> None:
        """Interrupted with ``message`` (a resumable run: and how to resume it)."""
        if self.resumable:
            message = f"{message}; resume with RESUME={self.dir}"
        record_interrupted(self.meta, message, INTERRUPTED if self.classed else None)

    def interrupted_error(self) -> Interrupted:
        """What the command raises for an interrupted run: its failure and where its data is."""
        failure = self.meta["failure"]
        return Interrupted(failure if self.resumable else f"{failure}; partial results kept in {self.dir}")


@contextlib.contextmanager
def open_run(
    kind: str,
    make_dir: Callable[[Callable[[Path], None]], Path],
    describe: Callable[[dict[str, Any], Path], None],
    *,
    logger: logging.Logger,
    failure_class: FailureClass = None,
    records_errors: bool = True,
    resumable: bool = False,
    reopen: bool = False,
    on_close: Callable[[dict[str, Any]], None] | None = None,
    analyse: Callable[[Path], None] | None = None,
) -> Iterator[OpenRun]:
    """The window of one run of ``kind`` (see the module): ``make_dir(fill)`` creates its results
    directory, ``fill(dir)`` writing its first files before it appears under its name (see
    :func:`~migrate.testbed.results.new_run_dir`; ``reopen``: returns an existing one, whose
    meta.json is continued); ``describe(meta, run_dir)`` adds the kind's own fields to meta.json's
    opening (and may write files the directory opens with); ``failure_class`` is the class of a failure (a callable: at
    the moment it happens; None: the kind records none); ``records_errors``: errors of the body
    are the run's failure, not the command's; ``resumable``: an interruption says how to resume;
    ``on_close(meta)`` adds the kind's closing fields; ``analyse(run_dir)`` runs once meta.json
    is closed and must not raise.  ``logger`` logs clean-stale and the errors recorded."""
    clean_stale_before_a_run(logger)
    abort = Abort(armed=False)  # armed once meta.json exists (Abort.arm)
    with signal_handlers(abort.handler):
        if reopen:
            run_dir = make_dir(lambda _dir: None)
            meta = read_meta(run_dir)
            meta["status"], meta["failure"], meta["failure_class"] = "running", None, None
            describe(meta, run_dir)
            write_meta(run_dir, meta)
        else:
            meta = metamod.opening(kind)

            def fill(opening_dir: Path) -> None:
                describe(meta, opening_dir)
                write_meta(opening_dir, meta)

            run_dir = make_dir(fill)
        run = OpenRun(run_dir, meta, abort, failure_class, resumable)
        try:
            try:
                abort.arm()
                yield run
                if abort.signum is not None:
                    raise Interrupted(f"interrupted by {signal.Signals(abort.signum).name} during teardown")
            except Interrupted as err:
                run.interrupted(str(err))
            except VrmigError as err:
                if not records_errors:
                    raise
                run.fail(str(err))
                logger.error("%s", err)
            except Exception as err:
                if not records_errors:
                    raise
                run.fail(f"internal error: {type(err).__name__}: {err}")
                logger.exception("internal error (a bug in vrmig; please report it with this traceback)")
        finally:
            abort.armed = False  # a second Ctrl-C must not break the close
            if abort.signum is not None and meta["status"] != "interrupted":
                # the signal surfaced as another error: an operator stop, not a failure
                run.interrupted(f"interrupted by {signal.Signals(abort.signum).name}")
            elif meta["status"] == "running" and records_errors:
                run.fail(NO_VERDICT)  # the body gave no verdict, or a BaseException passes through
            if meta["status"] == "completed":
                meta["failure_class"] = None
            metamod.close_run(meta, run_dir, on_close)
        if analyse is not None:
            analyse(run_dir)
        if meta["status"] == "interrupted":
            raise run.interrupted_error()
