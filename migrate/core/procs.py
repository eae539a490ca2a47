"""Processes started by a run: registered by PID before anything waits on them, output kept in
the results directory, readiness observed from their output, stopped by PID."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from migrate.core.errors import VrmigError
from migrate.core.registry import RUN_ENV, Registry
from migrate.core.sighold import held_signals

log = logging.getLogger(__name__)

POLL_S = 0.01
PDEATHSIG_PREFIX = ("setpriv", "--pdeathsig", "KILL", "--")
#: after the parent-death signal is set, the child checks that its parent is still the process
#: that forked it (``$PPID`` is read when the shell starts, after setpriv's prctl): a parent killed
#: between fork and prctl would otherwise leave the child running, unregistered and unsignalled
PARENT_CHECK = 'if [ "$PPID" != "$1" ]; then exit 137; fi; shift; exec "$@"'
__all__ = [  # RUN_ENV: from registry
    "PDEATHSIG_PREFIX", "RUN_ENV", "LineTail", "MarkerScan", "Proc", "ProcessError", "netns_exec",
    "terminate_and_wait", "with_pdeathsig",
]  # fmt: skip


def terminate_and_wait(popen: subprocess.Popen, timeout_s: float) -> int:
    """SIGTERM a child started without the registry (by its PID) unless it has exited, wait up to
    ``timeout_s``, then SIGKILL; return its exit status."""
    if popen.poll() is None:
        popen.terminate()
        try:
            return popen.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            popen.kill()
    return popen.wait()


def with_pdeathsig(argv: list[str], parent_pid: int | None = None, signal: str = "KILL") -> list[str]:
    """argv that runs ``argv`` (same PID: every step execs in place) with SIG``signal`` (KILL, or
    TERM for a child that must tear down what it made) as its parent-death signal, and not at all
    if its parent (``parent_pid``, default this process) is already gone by then (exit 137).
    ``argv`` reaches sh only as positional parameters."""
    if signal not in ("KILL", "TERM"):
        raise ValueError(f"parent-death signal {signal!r}: KILL or TERM")
    parent = os.getpid() if parent_pid is None else parent_pid
    prefix = (*PDEATHSIG_PREFIX[:2], signal, *PDEATHSIG_PREFIX[3:])
    return [*prefix, "sh", "-c", PARENT_CHECK, "vrmig-pdeath", str(parent), *argv]


def netns_exec(ns: str, argv: list[str]) -> list[str]:
    """argv that runs ``argv`` inside namespace ``ns`` (no shell)."""
    return ["ip", "netns", "exec", ns, *argv]


class MarkerScan:
    """Incremental search of a growing file (a console, a log) for one marker: each :meth:`seen`
    reads only what was appended since the previous call, and a marker split across two reads is
    still found.  A file that does not exist yet is simply not seen."""

    def __init__(self, path: Path, marker: str) -> None:
        self.path = Path(path)
        self._needle = marker.encode()
        self._offset = 0
        self._buf = b""

    def seen(self) -> bool:
        """True once the marker has appeared in the file."""
        with contextlib.suppress(FileNotFoundError), open(self.path, "rb") as fh:
            fh.seek(self._offset)
            chunk = fh.read()
            self._offset += len(chunk)
            self._buf = self._buf[-len(self._needle) :] + chunk
        return self._needle in self._buf


class ProcessError(VrmigError):
    """A helper process failed to start, exited early, or never became ready."""


class Proc:
    """One child process, optionally inside a network namespace."""

    #: give the child a pipe as stdin, held open by this process (a remote guard's lifeline)
    stdin_pipe = False

    def __init__(
        self,
        what: str,
        argv: list[str],
        registry: Registry,
        out_dir: Path,
        netns: str | None = None,
        stdout_name: str | None = None,
    ) -> None:
        self.what = what
        inner = netns_exec(netns, argv) if netns else list(argv)
        # PDEATHSIG: if the orchestrator is SIGKILLed between fork and registering the PID, the
        # child dies with it instead of escaping the registry (setpriv execs in place: same PID),
        # and one whose parent died before the signal was set does not start (with_pdeathsig)
        self.argv = with_pdeathsig(inner)
        self.registry = registry
        self.stdout_path = out_dir / (stdout_name or f"{what}.stdout")
        self.stderr_path = out_dir / f"{what}.stderr"
        self.popen: subprocess.Popen[bytes] | None = None

    def start(self) -> Proc:
        """Start the process in its own session (a terminal Ctrl-C reaches only the orchestrator)."""
        log.debug("start %s: %s", self.what, " ".join(self.argv))
        # held until the PID is recorded (an interrupt in between would leave an unrecorded child);
        # Python-level only: the child must not inherit a blocked SIGTERM
        with open(self.stdout_path, "wb") as out, open(self.stderr_path, "wb") as err, held_signals(mask=False):
            try:
                self.popen = subprocess.Popen(
                    self.argv,
                    stdin=subprocess.PIPE if self.stdin_pipe else subprocess.DEVNULL,
                    stdout=out,
                    stderr=err,
                    start_new_session=True,
                    close_fds=True,
                    env={**os.environ, RUN_ENV: self.registry.prefix},
                )
            except OSError as e:
                raise ProcessError(f"cannot start {self.what} ({self.argv[0]}): {e}") from e
            self.registry.add_process(self.popen.pid, self.what)
        return self

    @property
    def pid(self) -> int:
        """PID (the process exec'd by `ip netns exec` keeps it)."""
        assert self.popen is not None
        return self.popen.pid

    def alive(self) -> bool:
        """True while the process runs."""
        return self.popen is not None and self.popen.poll() is None

    def returncode(self) -> int | None:
        """Exit status, None while running."""
        return None if self.popen is None else self.popen.poll()

    def stderr_tail(self, n: int = 5) -> str:
        """Last ``n`` lines of stderr, for error messages."""
        with contextlib.suppress(OSError):
            lines = self.stderr_path.read_text(errors="replace").strip().splitlines()
            return " | ".join(lines[-n:])
        return ""

    def wait_for(
        self,
        marker: str,
        timeout_s: float,
        path: Path | None = None,
        abort: Callable[[], bool] | None = None,
    ) -> float:
        """Wait until ``marker`` appears in ``path`` (default: stderr); return the CLOCK_REALTIME
        seconds it was seen.  Raises ProcessError if the process exits or the time runs out."""
        scan = MarkerScan(path or self.stderr_path, marker)
        deadline = time.monotonic() + timeout_s
        while True:
            if scan.seen():
                return time.time()
            if not self.alive():
                raise ProcessError(
                    f"{self.what} exited (status {self.returncode()}) before {marker!r}: {self.stderr_tail()}"
                )
            if abort and abort():
                raise ProcessError(f"aborted while waiting for {self.what}")
            if time.monotonic() > deadline:
                raise ProcessError(f"{self.what} did not print {marker!r} within {timeout_s:.0f} s")
            time.sleep(POLL_S)

    @property
    def host_pid(self) -> int:
        """Its PID on the host it runs on (this machine's; a helper on another host: its PID there)."""
        return self.pid

    def started(self) -> Proc:
        """Itself: a child of this machine has its PID recorded once :meth:`start` returns (a
        helper on another host learns its PID there later, and overrides this)."""
        return self

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 10.0) -> int | None:
        """Send ``sig`` and wait for exit (SIGKILL after ``timeout_s``); return the exit status."""
        if self.popen is None:
            return None
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.popen.pid, sig)
            try:
                self.popen.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                log.warning("%s ignored signal %d; killing", self.what, sig)
                self.popen.kill()
                self.popen.wait()
        return self.popen.returncode

    def wait(self, timeout_s: float) -> int | None:
        """Wait for a natural exit; None if still running after ``timeout_s``."""
        if self.popen is None:
            return None
        try:
            return self.popen.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return None


class LineTail:
    """New complete lines of a growing file, e.g. a helper's output (the rest is kept until its
    newline arrives)."""

    def __init__(self, path: Path) -> None:
        self.path, self.offset, self.partial = path, 0, b""

    def new_lines(self, final: bool = False) -> list[str]:
        """Lines completed since the last call (``final``: also an unterminated last line)."""
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self.offset)
                data = fh.read()
        except FileNotFoundError:
            return []
        self.offset += len(data)
        *done, self.partial = (self.partial + data).split(b"\n")
        if final and self.partial:
            done, self.partial = [*done, self.partial], b""
        return [d.decode(errors="replace").rstrip("\r") for d in done]
