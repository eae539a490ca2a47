"""Commands in the router guest over its serial console: the guest as an end host.

The built-in guest booted with ``vrmig.shell=1`` keeps a root shell (busybox ash) on its first
serial port, which QEMU exposes as a Unix socket (:attr:`migrate.drivers.guest_vm.GuestVm.console_socket`).
:class:`GuestShell` types commands there and reads back what each printed and its exit status:

* a command is an argv, quoted with :func:`shlex.join` (no parameter is ever built into a shell
  string by hand) and its stdin is ``/dev/null`` (the console is the shell's input);
* its output is framed between two marker lines carrying a fresh nonce, the second one with the
  exit status::

      printf '%s-%s\\n' VRMIG-CMD-BEGIN <nonce>; <argv> </dev/null; printf '%s-%s %s\\n' VRMIG-CMD-END <nonce> "$?"

  The markers are printed as two words joined by printf, so the typed line that the console
  echoes (the tty's echo, ash's line editor redrawing and wrapping it at the terminal's width)
  never contains the marker itself: only the command's own output does;
* what lies between the markers is the command's output (stdout and stderr: a console has one
  stream), cleaned of terminal control (:data:`migrate.drivers.readiness.TERMINAL_CONTROL`,
  which also turns the tty's CR LF into LF).  Whatever else the console prints (the echo, the
  prompt, ash's ``[1]+ Done`` job notices, the guest's marker lines) falls outside the frames;
  a line another guest process prints *while* a command runs would land inside its frame, so
  the caller runs commands once the guest is READY.

Programs that must run while the test does something else (a receiver) are started with
:meth:`GuestShell.start`: a background job of the shell, its PID known, its stdout, stderr and
exit status in files of the guest (:class:`GuestJob`), read with further commands.

The dialogue is pexpect's (``pexpect.fdpexpect`` over the connected socket, as
:mod:`migrate.drivers.console_config`, whose bounded waits this module reuses): pexpect's
``expect`` is the field's own tool for reading a terminal by patterns, and the socket is a
terminal stream like any other.  Every wait is bounded by a deadline and stops early when the
guest's hypervisor process exits (``alive``) or the run is aborted (``abort``); a failure is one
:class:`~migrate.core.errors.GuestError` line with the console's tail.  After a failed command
the shell's state is unknown (the command may still run): the shell is then unusable and says why.
"""

from __future__ import annotations

import hashlib
import logging
import re
import secrets
import shlex
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from migrate.core.errors import GuestError
from migrate.drivers import console_config
from migrate.drivers.readiness import TERMINAL_CONTROL

#: typed to interrupt what runs in the foreground and to empty the line being edited
CTRL_C = "\x03"
CTRL_U = "\x15"
ENTER = console_config.ENTER
#: between two looks at a background job's files (each look is one command over the console)
JOB_POLL_S = 0.1
#: reads of one file over the console before a checksum mismatch is an error (:meth:`GuestShell.read_file`)
READ_ATTEMPTS = 3

log = logging.getLogger(__name__)
NONCE_BYTES = 6


def _nonce() -> str:
    return secrets.token_hex(NONCE_BYTES)


@dataclass(frozen=True)
class ShellResult:
    """One command's exit status and its output (stdout and stderr as the console showed them,
    terminal control removed, LF line ends)."""

    rc: int
    stdout: str


@dataclass(frozen=True)
class GuestJob:
    """A program started in the background by :meth:`GuestShell.start`: its PID in the guest
    and the guest files that receive its stdout, its stderr and, once it has exited, its exit
    status."""

    pid: int
    argv: tuple[str, ...]
    stdout_path: str
    stderr_path: str
    rc_path: str


@dataclass(frozen=True)
class JobResult:
    """A finished background job: its exit status, stdout and stderr (the files' content)."""

    rc: int
    stdout: str
    stderr: str
    rereads: int = 0  # reads of the two files repeated after a checksum mismatch (GuestShell.read_file)


def frame_line(body: str, nonce: str) -> str:
    """The line typed (without the Enter) to run the shell text ``body`` between the markers of
    ``nonce``; the END line carries ``body``'s exit status."""
    return f"printf '%s-%s\\n' VRMIG-CMD-BEGIN {nonce}; {body}; printf '%s-%s %s\\n' VRMIG-CMD-END {nonce} \"$?\""


def begin_marker(nonce: str) -> re.Pattern[str]:
    """The BEGIN line of ``nonce`` as printed (up to its line end)."""
    return re.compile(rf"VRMIG-CMD-BEGIN-{nonce}\r*\n")


def end_marker(nonce: str) -> re.Pattern[str]:
    """The END line of ``nonce`` with the exit status as group 1 (it may follow output that did
    not end its last line)."""
    return re.compile(rf"VRMIG-CMD-END-{nonce} (\d+)\r*\n")


def clean(raw: str) -> str:
    """Console text without terminal control (escape sequences, CR): what the program wrote."""
    return TERMINAL_CONTROL.sub("", raw)


class GuestShell:
    """The root shell on a guest's serial console, connected by ``conn`` (a socket, or any file
    descriptor of a terminal stream).  ``alive``: False once the guest's hypervisor process has
    exited; ``abort``: True once the run is aborted; both end every wait early.  ``tmp_dir``:
    the guest directory for background jobs' files."""

    def __init__(
        self,
        conn: socket.socket | int,
        *,
        alive: Callable[[], bool],
        abort: Callable[[], bool] = lambda: False,
        tmp_dir: str = "/tmp",
    ) -> None:
        self._conn = conn
        self._dialogue = console_config._Dialogue(conn, time.monotonic(), alive, abort)  # type: ignore[arg-type]
        self.tmp_dir = tmp_dir
        self.broken: str | None = None  # why the shell can take no more commands

    @classmethod
    def connect(
        cls,
        path: Path,
        *,
        timeout_s: float,
        alive: Callable[[], bool],
        abort: Callable[[], bool] = lambda: False,
        tmp_dir: str = "/tmp",
    ) -> GuestShell:
        """Connect to the console socket ``path`` (once QEMU has created it) and wait for the
        shell to answer; the whole within ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        sock = console_config.connect(path, timeout_s, alive)
        shell = cls(sock, alive=alive, abort=abort, tmp_dir=tmp_dir)
        try:
            shell.wait_ready(max(deadline - time.monotonic(), 0.0))
        except BaseException:
            shell.close()
            raise
        return shell

    def __enter__(self) -> GuestShell:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection (the guest's shell stays; QEMU keeps its socket listening)."""
        if isinstance(self._conn, socket.socket):
            self._conn.close()

    def _check_usable(self) -> None:
        if self.broken is not None:
            raise GuestError(f"guest shell: unusable after an earlier failure ({self.broken})")

    def _fail_safe(self, why: str) -> None:
        """Mark the shell unusable and interrupt whatever the console's foreground runs."""
        self.broken = why
        try:
            self._dialogue.send(CTRL_C)
        except OSError:
            pass

    def wait_ready(self, timeout_s: float) -> None:
        """Type a probe until the shell prints its answer: again every
        ``console_config.WAKE_EVERY_S``, as the shell may not run yet (what was typed before it
        started is lost); each probe first empties the line being edited (Ctrl-U)."""
        self._check_usable()
        nonce = _nonce()
        d = self._dialogue
        d.deadline = time.monotonic() + timeout_s
        probe = f"{CTRL_U}printf '%s-%s\\n' VRMIG-SHELL {nonce}{ENTER}"
        try:
            d.expect([re.compile(rf"VRMIG-SHELL-{nonce}\r*\n")], "waiting for the shell (vrmig.shell=1?)", wake=probe)
        except GuestError as err:
            self._fail_safe(str(err))
            raise

    def run(self, argv: Sequence[str], timeout_s: float) -> ShellResult:
        """Run ``argv`` in the guest's shell; its exit status and output, within ``timeout_s``."""
        if not argv:
            raise ValueError("a guest command needs at least a program name")
        return self._run_line(f"{shlex.join(argv)} </dev/null", f"command {shlex.join(argv)[:80]!r}", timeout_s)

    def _run_line(self, body: str, what: str, timeout_s: float) -> ShellResult:
        """Type ``body`` (shell syntax: this module's fixed templates around shlex-quoted
        arguments, never text from elsewhere) framed by fresh markers; its status and output."""
        self._check_usable()
        nonce = _nonce()
        d = self._dialogue
        d.deadline = time.monotonic() + timeout_s
        try:
            d.send(frame_line(body, nonce) + ENTER)
            d.expect([begin_marker(nonce)], f"{what}: its start")
            d.expect([end_marker(nonce)], f"{what}: its end")
        except GuestError as err:
            self._fail_safe(str(err))
            raise
        # pexpect keeps its buffer across the waits' steps: ``before`` is all the console
        # printed between the two markers
        raw: str = d.child.before or ""
        return ShellResult(rc=int(d.child.match.group(1)), stdout=clean(raw))

    def check(self, argv: Sequence[str], timeout_s: float) -> str:
        """:meth:`run` that requires exit status 0; the output."""
        res = self.run(argv, timeout_s)
        if res.rc != 0:
            out = " | ".join(res.stdout.strip().splitlines()[-3:])
            raise GuestError(f"guest command {shlex.join(argv)[:80]!r} exited {res.rc}: {out or '(no output)'}")
        return res.stdout

    def start(self, argv: Sequence[str], timeout_s: float) -> GuestJob:
        """Start ``argv`` in the background and return its :class:`GuestJob` once the shell
        knows the program's PID.

        The job is a wrapper ``{ <argv> </dev/null >OUT 2>ERR & echo $! >FIFO; wait $!; echo $? >RC; } &``:
        the program is the wrapper's child, whose PID comes back through a FIFO (the typed
        line's ``read`` returns when the wrapper has written it: no polling), and the wrapper
        outlives a signal sent to the program to record its exit status.  The PID, not a
        process group, is what :meth:`finish` signals: busybox's ``kill`` takes no ``--``,
        without which other shells' ``kill`` reads a negative group ID as an option."""
        if not argv:
            raise ValueError("a guest command needs at least a program name")
        base = f"{self.tmp_dir.rstrip('/')}/vrmig-job-{_nonce()}"
        out, err, rc, fifo = (shlex.quote(f"{base}.{ext}") for ext in ("out", "err", "rc", "fifo"))
        body = (
            f"mkfifo {fifo}; {{ {shlex.join(argv)} </dev/null >{out} 2>{err} & echo $! >{fifo}; wait $!; "
            f"echo $? >{rc}; }} </dev/null >/dev/null 2>&1 & read -r pid <{fifo}; rm -f {fifo}; echo $pid"
        )
        what = f"starting {shlex.join(argv)[:80]!r}"
        res = self._run_line(body, what, timeout_s)
        pid = res.stdout.strip()
        if res.rc != 0 or not pid.isdigit():
            raise GuestError(f"guest shell: {what}: no PID (exit {res.rc}): {pid[-200:] or '(no output)'}")
        return GuestJob(pid=int(pid), argv=tuple(argv), stdout_path=f"{base}.out", stderr_path=f"{base}.err",
                        rc_path=f"{base}.rc")  # fmt: skip

    def job_rc(self, job: GuestJob, timeout_s: float) -> int | None:
        """The job's exit status, None while it runs."""
        res = self.run(["cat", job.rc_path], timeout_s)
        text = res.stdout.strip()
        return int(text) if res.rc == 0 and text.isdigit() else None

    def wait_output(self, job: GuestJob, text: str, timeout_s: float, *, stream: str = "stderr") -> None:
        """Wait until the job's ``stream`` (``stdout`` or ``stderr``) holds ``text`` (a
        readiness line); GuestError when the job exits first or ``timeout_s`` passes."""
        path = {"stdout": job.stdout_path, "stderr": job.stderr_path}[stream]
        deadline = time.monotonic() + timeout_s
        what = f"{job.argv[0]} (PID {job.pid}) printing {text!r}"
        while True:
            left = max(deadline - time.monotonic(), 0.0)
            if text in self.run(["cat", path], left).stdout:
                return
            rc = self.job_rc(job, max(deadline - time.monotonic(), 0.0))
            if rc is not None:
                tail = self.run(["cat", job.stderr_path], max(deadline - time.monotonic(), 0.0)).stdout
                raise GuestError(f"guest shell: {what}: it exited ({rc}) first: {tail.strip()[-200:] or '(no stderr)'}")
            if time.monotonic() > deadline:
                raise GuestError(f"guest shell: {what}: not within {timeout_s:.1f} s")
            time.sleep(JOB_POLL_S)

    def finish(self, job: GuestJob, timeout_s: float, *, signal: str | None = None) -> JobResult:
        """Wait for the job to exit (after sending ``signal``, e.g. ``"TERM"``, to the program)
        and return its status and output; GuestError after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        if signal is not None:
            if not signal.isalnum():
                raise ValueError(f"signal {signal!r}: give a name like TERM or INT")
            self.run(["kill", "-s", signal, str(job.pid)], timeout_s)
        while True:
            rc = self.job_rc(job, max(deadline - time.monotonic(), 0.0))
            if rc is not None:
                break
            if time.monotonic() > deadline:
                raise GuestError(f"guest shell: {job.argv[0]} (PID {job.pid}) still runs after {timeout_s:.1f} s")
            time.sleep(JOB_POLL_S)
        left = max(deadline - time.monotonic(), 1.0)
        before = self.rereads
        out = self.read_file(job.stdout_path, left)
        err = self.read_file(job.stderr_path, left)
        return JobResult(rc=rc, stdout=out, stderr=err, rereads=self.rereads - before)

    #: reads repeated after a checksum mismatch, over the shell's life
    rereads = 0

    def read_file(self, path: str, timeout_s: float) -> str:
        """The text of the guest's file ``path``, read with ``cat`` over the console and checked
        against the guest's own ``md5sum`` of the file: a console can alter what it carries (seen
        once in 72 reads: 16 bytes at the start of a JSON record replaced by as many "9"s, through
        HV=xen's console relayed by dom0), and a record read wrong must not become a figure.  On a
        mismatch the file is read again, logged as a warning and counted in :attr:`rereads`;
        GuestError after :data:`READ_ATTEMPTS` reads.  The file holds text without CR or escape
        sequences (what :func:`clean` would remove), as the traffic tools' records do."""
        want = self.check(["md5sum", path], timeout_s).split()[0:1]
        for attempt in range(1, READ_ATTEMPTS + 1):
            text = self.check(["cat", path], timeout_s)
            if [hashlib.md5(text.encode()).hexdigest()] == want:
                return text
            if attempt < READ_ATTEMPTS:
                self.rereads += 1
                log.warning("guest shell: %s read over the console differs from the guest's md5sum: reading it again "
                            "(%d of %d)", path, attempt + 1, READ_ATTEMPTS)  # fmt: skip
        raise GuestError(f"guest shell: {path} read over the console {READ_ATTEMPTS} times, never as the guest's "
                         "md5sum has it")  # fmt: skip
