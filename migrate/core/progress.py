"""Progress of long commands (sweep, nightly, baseline, chaos, calibrate, guest image builds):
items done of a total, failures counted (by reason), elapsed time, an ETA from the durations
measured so far, and the item in hand.

On a terminal (stderr is a TTY and ``TERM`` is not ``dumb``) a live bar is drawn on stderr with
`rich <https://github.com/Textualize/rich>`_; log records written meanwhile to stderr by the
root logger's stream handlers are routed above the bar, so neither garbles the other.  rich,
not tqdm, because rich refreshes the display on its own thread: the elapsed time and the ETA
keep moving during an item that takes minutes (one migration, one baseline configuration's
boot), where tqdm redraws only when the count changes; rich's ``Live`` also carries the
stderr redirection and the cursor handling we would otherwise write.

Anywhere else (CI, ``make test``, a log file) the same facts go out as plain lines, without
control characters, at most one per ``PLAIN_INTERVAL_S`` (plus the first result, every failure
and the last one), starting with ``progress:``::

    progress: sweep 3/8 runs, 1 failed (1 setup) | ETA 0:06:40 | elapsed 0:04:12 | last 0-1500-r02 ok in 0:01:02

``VRMIG_PROGRESS=0`` switches both off (the counts are still kept: a sweep's time budget uses
:meth:`Progress.mean_s`).  Nothing is ever written to stdout: the last line a command prints
there (its results directory) stays what it was.

The duration of an item is the wall time since the previous item finished (or since the
progress began): it includes whatever the command does between items (a testbed built for the
next baseline configuration, a sweep's bookkeeping), which the ETA has to cover too."""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from types import TracebackType
from typing import Any, TextIO

ENV_SWITCH = "VRMIG_PROGRESS"
PLAIN_INTERVAL_S = 30.0  # at most one plain line per this many seconds (first, failures and last aside)
BAR_WIDTH = 20
REFRESH_PER_S = 2.0  # live bar redraws per second (2 cores shared with the measurement)
PLAIN_PREFIX = "progress: "


def eta_s(durations_s: Iterable[float], remaining: int, current_s: float = 0.0) -> float | None:
    """Seconds until ``remaining`` unfinished items are done: their mean measured duration times
    their number, less what the item in hand has already run (at most one mean: an item that
    overruns is taken as about to finish).  ``None`` before any duration was measured; 0 when
    nothing remains."""
    if remaining <= 0:
        return 0.0
    d = list(durations_s)
    if not d:
        return None
    mean = sum(d) / len(d)
    return max(0.0, mean * remaining - min(max(current_s, 0.0), mean))


def format_s(seconds: float | None) -> str:
    """``H:MM:SS`` (whole seconds, via :class:`datetime.timedelta`); ``?`` for None."""
    if seconds is None:
        return "?"
    return str(dt.timedelta(seconds=max(0, round(seconds))))


def enabled_by_env(environ: Mapping[str, str] | None = None) -> bool:
    """False when ``VRMIG_PROGRESS`` is ``0``, ``no``, ``off`` or ``false``."""
    value = (os.environ if environ is None else environ).get(ENV_SWITCH, "1")
    return value.strip().lower() not in ("0", "no", "off", "false")


def is_live_terminal(stream: Any, environ: Mapping[str, str] | None = None) -> bool:
    """True if ``stream`` is a terminal that understands cursor movement."""
    term = (os.environ if environ is None else environ).get("TERM", "")
    try:
        tty = bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False
    return tty and term not in ("dumb", "unknown")


class Progress:
    """Done/total, failures, elapsed, ETA and the current item of one long command.

    ``_showing``: how many progresses of this process are open and enabled (at most one speaks).

    Use as a context manager; per item call :meth:`start` (its label) and then :meth:`finish`
    (or :meth:`skip` for an item found already done, e.g. on resume).  ``done``, ``failed`` and
    ``durations_s`` carry what earlier sessions of a resumed command recorded."""

    _showing = 0

    def __init__(
        self,
        what: str,
        total: int,
        unit: str = "items",
        *,
        done: int = 0,
        failed: Mapping[str, int] | None = None,
        durations_s: Iterable[float] = (),
        stream: TextIO | None = None,
        live: bool | None = None,
        enabled: bool | None = None,
        min_interval_s: float = PLAIN_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
        eta: Callable[[], float | None] | None = None,
    ) -> None:
        self.what, self.unit = what, unit
        self._eta = eta  # items of unlike length (a run's phases): their own schedule says what is left
        self.total, self.done = total, done
        self.failed: dict[str, int] = dict(failed or {})
        self.durations_s: list[float] = [float(d) for d in durations_s]
        self.stream = sys.stderr if stream is None else stream
        self.enabled = enabled_by_env() if enabled is None else enabled
        self.live = self.enabled and (is_live_terminal(self.stream) if live is None else live)
        self.min_interval_s = min_interval_s
        self.clock = clock
        self.label: str | None = None
        self.last: str | None = None  # "<label> <outcome> in <duration>" of the last finished item
        self.t_start = self.t_mark = clock()
        self._last_plain: float | None = None
        self._unprinted = False  # something changed since the last plain line
        self._bar: Any = None
        self._task: Any = None
        self._swapped: list[tuple[logging.StreamHandler[Any], Any]] = []
        self._counted = False  # this one counts in _showing

    # ------------------------------------------------------------------ arithmetic
    @property
    def n_failed(self) -> int:
        """Failed items so far."""
        return sum(self.failed.values())

    def mean_s(self) -> float | None:
        """Mean measured duration of an item (None before the first)."""
        return sum(self.durations_s) / len(self.durations_s) if self.durations_s else None

    def elapsed_s(self) -> float:
        """Seconds since the progress began (this session)."""
        return self.clock() - self.t_start

    def eta_s(self) -> float | None:
        """Seconds left (see :func:`eta_s`); the item in hand has run since the previous one
        finished.  With an ``eta`` callable (items of unlike length), what it says."""
        if self._eta is not None:
            return self._eta()
        current = self.clock() - self.t_mark if self.label is not None else 0.0
        return eta_s(self.durations_s, self.total - self.done, current)

    def status(self) -> str:
        """``3/8 runs, 1 failed (1 setup) | ETA 0:06:40 | elapsed 0:04:12`` (no label)."""
        fails = ""
        if self.failed:
            reasons = [f"{n} {why}" for why, n in sorted(self.failed.items()) if why]
            fails = f", {self.n_failed} failed" + (f" ({', '.join(reasons)})" if reasons else "")
        return (
            f"{self.done}/{self.total} {self.unit}{fails} | ETA {format_s(self.eta_s())} "
            f"| elapsed {format_s(self.elapsed_s())}"
        )

    def line(self) -> str:
        """The plain line: prefix, what, status, the item in hand or the last one finished."""
        tail = f" | now {self.label}" if self.label is not None else (f" | last {self.last}" if self.last else "")
        return f"{PLAIN_PREFIX}{self.what} {self.status()}{tail}"

    # ------------------------------------------------------------------ items
    def start(self, label: str) -> None:
        """The next item begins (its label is shown until it finishes)."""
        self.label = label
        self._unprinted = True
        self._refresh()

    def finish(self, ok: bool = True, reason: str | None = None) -> None:
        """The item in hand ended: count it (a failure with ``reason`` unless ``ok``), record its
        duration, show the new state."""
        now = self.clock()
        duration = now - self.t_mark
        self.t_mark = now
        self.durations_s.append(duration)
        self.done += 1
        outcome = "ok"
        if not ok:  # a new dict, not a change in place: the live bar's thread may be reading the old one
            self.failed = {**self.failed, reason or "": self.failed.get(reason or "", 0) + 1}
            outcome = f"failed ({reason})" if reason else "failed"
        self.last = f"{self.label or 'item'} {outcome} in {format_s(duration)}"
        self.label = None
        self._unprinted = True
        self._refresh()
        first = self._last_plain is None
        due = first or now - (self._last_plain or 0.0) >= self.min_interval_s
        if due or not ok or self.done >= self.total:
            self._plain()

    @contextlib.contextmanager
    def item(self, label: str) -> Iterator[None]:
        """``start(label)``, the block, ``finish()``; an exception leaves the item in hand (a last
        plain line shows where the command stopped)."""
        self.start(label)
        yield
        self.finish()

    def skip(self, n: int = 1, failed_reason: str | None = None) -> None:
        """``n`` items ended without being measured: found done already (e.g. on resume), or, with
        ``failed_reason``, never run because something they needed failed (counted as failures)."""
        if n <= 0:
            return
        self.done += n
        if failed_reason is not None:
            self.failed = {**self.failed, failed_reason: self.failed.get(failed_reason, 0) + n}
        self.label = None
        self.t_mark = self.clock()
        self._unprinted = True
        self._refresh()

    def add_total(self, n: int = 1) -> None:
        """``n`` more items than planned (e.g. trials a search schedules as it goes)."""
        self.total += n
        self._refresh()

    # ------------------------------------------------------------------ output
    def _plain(self) -> None:
        self._last_plain = self.clock()
        self._unprinted = False
        if self.enabled and not self.live:
            self.stream.write(self.line() + "\n")
            self.stream.flush()

    def _refresh(self) -> None:
        if self._bar is not None:
            self._bar.update(self._task, completed=self.done, total=max(self.total, 1))

    def open(self) -> Progress:
        """Start the live bar (on a terminal); plain mode prints nothing until a result.  A
        progress opened while another one shows (a run inside a sweep) stays silent: the outer
        one speaks for both, and two bars would fight over the terminal."""
        if self.enabled and not self._counted:
            if Progress._showing > 0:
                self.enabled = self.live = False
            else:
                Progress._showing += 1
                self._counted = True
        if self.live and self._bar is None:
            self._open_live()
        return self

    def _open_live(self) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, Progress, ProgressColumn, TextColumn
        from rich.text import Text

        owner = self

        class _Status(ProgressColumn):
            def render(self, task: Any) -> Text:
                label = f" | {owner.label}" if owner.label is not None else ""
                return Text(owner.status() + label, no_wrap=True, overflow="ellipsis")

        console = Console(file=self.stream, force_terminal=True)
        bar = Progress(
            TextColumn("{task.description}"), BarColumn(bar_width=BAR_WIDTH), _Status(), console=console,
            refresh_per_second=REFRESH_PER_S, redirect_stdout=False, redirect_stderr=True,
        )  # fmt: skip
        self._task = bar.add_task(self.what, total=max(self.total, 1), completed=self.done)
        bar.start()
        self._bar = bar
        proxy = sys.stderr  # rich's FileProxy while the bar runs (the original if stream is not stderr)
        for h in logging.getLogger().handlers:
            if isinstance(h, logging.StreamHandler) and h.stream is self.stream and proxy is not self.stream:
                self._swapped.append((h, h.setStream(proxy)))

    def close(self, quiet: bool = False) -> None:
        """Stop the bar (leaving its last state on screen), or print a last plain line if anything
        changed since the previous one (an interrupted command shows the item it was in), unless
        ``quiet`` (the command's own error line says enough)."""
        if quiet:
            self._unprinted = False
        if self._bar is not None:
            for h, old in self._swapped:
                h.setStream(old)
            self._swapped.clear()
            self._refresh()
            self._bar.stop()
            self._bar = None
        elif self._unprinted:
            self._plain()
        if self._counted:
            Progress._showing -= 1
            self._counted = False

    def __enter__(self) -> Progress:
        return self.open()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
