"""HV=xen: how the orchestrator drives a Xen host's dom0.

* :class:`AgentDom0`: a nested host's dom0, over its virtio-serial ports (``routers/xenfs/
  vrmig-agent``): ``run`` sends one command and gets its output and exit status back, framed
  (``VRMIG-RC <id> <status> <base64>``); ``stream`` starts a command in the background whose
  output lines come back on the second port, each timestamped here on receipt.
* :class:`ShellDom0`: a real dom0 (the suite runs in dom0 itself, or reaches the other dom0 with
  ``ssh``): the same two calls, with local subprocesses.

Both write every streamed line to ``xen_log.jsonl`` (``t_ns``, ``host``, ``tag``, ``line``).

Commands are argv lists.  Where a shell cannot be avoided (the agent runs each request with
``sh``; ``ssh`` hands its command line to the remote shell) the argv is quoted with
``shlex.join``, so every argument arrives as one inert word.  A step that needs shell syntax is a
fixed script with its parameters as positional arguments (``["sh", "-c", SCRIPT, "sh", ARG...]``)."""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import shlex
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from migrate.core.errors import VrmigError
from migrate.core.procs import with_pdeathsig
from migrate.core.rundir import XEN_LOG_JSONL

log = logging.getLogger(__name__)

EXIT_MARK = "VRMIG-EXIT"
CONNECT_TIMEOUT_S = 30.0
XEN_LOG = XEN_LOG_JSONL


class Dom0Error(VrmigError):
    """The dom0 channel failed (no connection, no reply in time, host gone)."""


def _checked(argv: Sequence[str]) -> list[str]:
    """``argv`` as a list of strings; a single string (a shell command line) is refused."""
    if isinstance(argv, str | bytes) or not argv or not all(isinstance(a, str) for a in argv):
        raise TypeError(f"dom0 commands are argv lists of strings, not {argv!r}")
    return list(argv)


def agent_script(argv: Sequence[str]) -> str:
    """What the dom0 agent (which runs every request with ``sh``) gets for ``argv``: ``exec`` and
    the argv quoted word by word, so the shell runs exactly that program with exactly those
    arguments."""
    return "exec " + shlex.join(_checked(argv))


class StreamLog:
    """Streamed lines of all hosts: appended to ``xen_log.jsonl`` and kept for waiting."""

    def __init__(self, path: Path) -> None:
        self._fh = open(path, "a", encoding="utf-8")
        self._lock = threading.Condition()
        self.lines: list[dict[str, Any]] = []

    def add(self, host: str, tag: str, line: str, t_ns: int | None = None) -> None:
        """Record one line (``t_ns`` default: now)."""
        rec = {"t_ns": t_ns if t_ns is not None else time.time_ns(), "host": host, "tag": tag, "line": line}
        with self._lock:
            self._fh.write(json.dumps(rec) + "\n")
            self._fh.flush()
            self.lines.append(rec)
            self._lock.notify_all()

    def find(self, host: str, tag: str, needle: str, start: int = 0) -> dict[str, Any] | None:
        """The first recorded line of (host, tag) containing ``needle`` from index ``start``."""
        with self._lock:
            for rec in self.lines[start:]:
                if rec["host"] == host and rec["tag"] == tag and needle in rec["line"]:
                    return rec
        return None

    def wait(
        self, host: str, tag: str, needles: tuple[str, ...], timeout_s: float, alive: Callable[[], bool] | None = None
    ) -> dict[str, Any] | None:
        """Block until a line of (host, tag) contains one of ``needles``; None on timeout or when
        ``alive()`` turns false."""
        deadline = time.monotonic() + timeout_s
        seen = 0
        while True:
            with self._lock:
                for rec in self.lines[seen:]:
                    if rec["host"] == host and rec["tag"] == tag and any(n in rec["line"] for n in needles):
                        return rec
                seen = len(self.lines)
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._lock.wait(min(left, 0.2))
            if alive is not None and not alive():
                return None

    def tail(self, host: str, tag: str, n: int = 8) -> list[str]:
        """The last ``n`` lines of (host, tag)."""
        with self._lock:
            return [r["line"] for r in self.lines if r["host"] == host and r["tag"] == tag][-n:]

    def close(self) -> None:
        """Close the file."""
        with self._lock:
            self._fh.close()


def _connect(path: Path, timeout_s: float, alive: Callable[[], bool]) -> socket.socket:
    deadline = time.monotonic() + timeout_s
    while True:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(str(path))
            return s
        except OSError as err:
            s.close()
            if not alive():
                raise Dom0Error(f"the nested host exited before {path.name} accepted a connection") from err
            if time.monotonic() > deadline:
                raise Dom0Error(f"cannot connect to {path}: {err}") from err
            time.sleep(0.02)


class AgentDom0:
    """A nested host's dom0 behind two virtio-serial ports (UNIX sockets of its QEMU)."""

    def __init__(self, host: str, ctl: Path, logport: Path, streams: StreamLog, alive: Callable[[], bool]) -> None:
        self.host = host
        self.streams = streams
        self.alive = alive
        self._ctl = _connect(ctl, CONNECT_TIMEOUT_S, alive)
        self._log = _connect(logport, CONNECT_TIMEOUT_S, alive)
        self._rfile = self._ctl.makefile("rb")
        self._lock = threading.Lock()
        self._next = 0
        self._reader = threading.Thread(target=self._read_log, name=f"xenlog-{host}", daemon=True)
        self._reader.start()

    def _read_log(self) -> None:
        buf = b""
        while True:
            try:
                chunk = self._log.recv(65536)
            except OSError:
                return
            if not chunk:
                return
            t_ns = time.time_ns()
            buf += chunk
            *lines, buf = buf.split(b"\n")
            for raw in lines:
                text = raw.decode(errors="replace").rstrip("\r")
                tag, _, line = text.partition(" ")
                self.streams.add(self.host, tag, line, t_ns)

    def run(self, argv: Sequence[str], timeout_s: float = 30.0) -> tuple[int, str]:
        """Run ``argv`` in dom0; return (exit status, stdout+stderr)."""
        cmd = agent_script(argv)
        with self._lock:
            self._next += 1
            rid = self._next
            req = f"{rid} run {base64.b64encode(cmd.encode()).decode()}\n"
            return self._request(rid, req, timeout_s, cmd)

    def stream(self, tag: str, argv: Sequence[str]) -> None:
        """Start ``argv`` in dom0's background; its lines arrive tagged ``tag``, last ``VRMIG-EXIT <rc>``."""
        if not tag.isalnum():
            raise ValueError(f"stream tag must be alphanumeric: {tag!r}")
        cmd = agent_script(argv)
        with self._lock:
            self._next += 1
            rid = self._next
            req = f"{rid} stream {tag} {base64.b64encode(cmd.encode()).decode()}\n"
            rc, out = self._request(rid, req, 30.0, cmd)
        if rc != 0:
            raise Dom0Error(f"{self.host}: could not start {cmd!r}: {out.strip()}")

    def _request(self, rid: int, req: str, timeout_s: float, cmd: str) -> tuple[int, str]:
        self._ctl.settimeout(timeout_s)
        try:
            self._ctl.sendall(req.encode())
            while True:
                line = self._rfile.readline()
                if not line:
                    raise Dom0Error(f"{self.host}: dom0 closed the command channel during {cmd!r}")
                parts = line.decode(errors="replace").split()
                if len(parts) >= 3 and parts[0] == "VRMIG-RC" and parts[1] == str(rid):
                    out = base64.b64decode(parts[3]).decode(errors="replace") if len(parts) > 3 else ""
                    return int(parts[2]), out
                log.debug("%s: stray line on the command channel: %r", self.host, line[:200])
        except TimeoutError:
            raise Dom0Error(f"{self.host}: no reply to {cmd!r} within {timeout_s:.0f} s") from None
        except OSError as err:
            raise Dom0Error(f"{self.host}: command channel failed during {cmd!r}: {err}") from err
        finally:
            with contextlib.suppress(OSError):
                self._ctl.settimeout(None)

    def close(self) -> None:
        """Close both ports (the reader thread ends)."""
        for s in (self._ctl, self._log):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                s.close()


class ShellDom0:
    """A real dom0: ``argv`` runs here as is (``prefix`` empty) or through a transport such as
    ``["ssh", "root@dom0-b"]``, which gets it as one ``shlex.join``-quoted command line (ssh hands
    its arguments to the remote shell).  Local processes die with the orchestrator (parent-death
    signal); a process started on the remote dom0 does not (docs/hypervisors.md: real Xen hosts).  Streams are
    local subprocesses read by a thread."""

    def __init__(self, host: str, streams: StreamLog, prefix: list[str] | None = None) -> None:
        self.host = host
        self.streams = streams
        self.prefix = prefix or []
        self.procs: list[subprocess.Popen[bytes]] = []

    def argv(self, argv: Sequence[str]) -> list[str]:
        """The local argv that runs ``argv`` on this dom0."""
        args = _checked(argv)
        return with_pdeathsig([*self.prefix, shlex.join(args)] if self.prefix else list(args))

    def run(self, argv: Sequence[str], timeout_s: float = 30.0) -> tuple[int, str]:
        """Run ``argv``; return (exit status, stdout+stderr)."""
        try:
            res = subprocess.run(self.argv(argv), capture_output=True, timeout=timeout_s, check=False)
        except subprocess.TimeoutExpired:
            raise Dom0Error(f"{self.host}: {shlex.join(argv)!r} did not finish within {timeout_s:.0f} s") from None
        return res.returncode, (res.stdout + res.stderr).decode(errors="replace")

    def stream(self, tag: str, argv: Sequence[str]) -> None:
        """Start ``argv``; its lines are recorded tagged ``tag``, last ``VRMIG-EXIT <rc>``."""
        self._pumped(tag, self.argv(argv), subprocess.DEVNULL)

    def _pumped(self, tag: str, local_argv: list[str], stdin: int) -> None:
        """Run ``local_argv`` here with a thread recording its output lines under ``tag``."""
        p = subprocess.Popen(local_argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=stdin)
        self.procs.append(p)

        def pump() -> None:
            assert p.stdout is not None
            for raw in p.stdout:
                self.streams.add(self.host, tag, raw.decode(errors="replace").rstrip("\r\n"))
            self.streams.add(self.host, tag, f"{EXIT_MARK} {p.wait()}")

        threading.Thread(target=pump, name=f"xenlog-{self.host}-{tag}", daemon=True).start()

    def close(self) -> None:
        """Stop the streams still running."""
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    p.wait(5)


#: a long-lived command on a dom0 reached over SSH, under a guard made of the shell alone (a
#: dom0 need not have python): the command runs in its own session (``setsid``: socat and the
#: ``xl migrate-receive`` it starts are one process group), its PID and start time go to a pid
#: file for ``clean-testbed``, and when the SSH channel closes (stdin at end of file: the
#: orchestrator closed it, or died, and its ssh with it) the group is stopped.  argv: pidfile
#: command...  (A background list's stdin is /dev/null in sh unless redirected: hence fd 3.)
#: sshd sends SIGHUP to a session's process when its connection drops: the guard ignores it and
#: ends through its stdin's end of file like in every other case, removing the pid file.  Once
#: the command runs, the guard's own stderr is /dev/null: the shell reports a job killed by a
#: signal ("Terminated") there, and on a closed channel that write would kill the guard
#: (SIGPIPE) before it removed its pid file.
GUARD_SH = r"""f=$1; shift
trap '' HUP
mkdir -p "${f%/*}" || exit 125
exec 3<&0
setsid "$@" </dev/null &
c=$!
echo "$c $(cut -d' ' -f22 "/proc/$c/stat" 2>/dev/null)" > "$f"
{ while read -r _; do :; done; kill -TERM -"$c" 2>/dev/null || kill -TERM "$c" 2>/dev/null; } <&3 &
w=$!
exec 3<&- 2>/dev/null
wait "$c"; rc=$?
kill "$w" 2>/dev/null
rm -f "$f"
exit $rc"""

#: ``clean-testbed``: stop the process groups the guards of ``GUARD_SH`` recorded in directory
#: $1 (a PID whose start time differs is another process now and is left alone); prints what
#: it stopped
GUARD_CLEAN_SH = r"""for f in "$1"/*.pid; do
    [ -f "$f" ] || continue
    read -r pid start < "$f"
    now=$(cut -d' ' -f22 "/proc/$pid/stat" 2>/dev/null)
    if [ -n "$pid" ] && [ -n "$now" ] && [ "$now" = "$start" ]; then
        kill -TERM -"$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null
        echo "stopped pid $pid (${f##*/})"
    fi
    rm -f "$f"
done"""

#: where the guards of a dom0 keep their pid files
GUARD_DIR = "/run/vrmig/guard"

#: a dom0's domain reaper, run under :data:`GUARD_SH` for the whole run: when its channel closes
#: (the run ended, or the orchestrator died) the guard's SIGTERM makes it destroy the router's
#: domains ($1 and the ``$1--incoming``/``--migratedaway`` ones an interrupted migration
#: leaves), as libvirt's reaper does for DRIVER=libvirt.
#:
#: - It prints REAPER-READY once armed, then writes nothing more to the channel (stdout and
#:   stderr go to /dev/null): the group's TERM also kills its idle ``sleep``, and the shell
#:   reports that job ("Terminated") on stderr, which on a closed channel is a SIGPIPE that
#:   killed the reaper before it reaped, now and then (busybox ash and dash alike).
#: - On TERM it first waits (at most 30 s) for the ``xl migrate`` and ``xl migrate-receive``
#:   processes to end: a migrate-receive being stopped by its own guard at the same moment may
#:   still be creating the ``--incoming`` domain, which a reaper that looked too early would
#:   miss.  Other ``xl`` processes do not count: ``xl create`` leaves one behind that watches
#:   the domain for as long as it lives, so waiting for every ``xl`` made each reap take the
#:   whole 30 s (about 90 s in a TCG dom0, where the loop forked a ``cat`` per process; ``read``
#:   is the shell's own).
#: - Then it destroys until none is left, and ends its own process group (the guard's
#:   ``setsid`` made it one): a TERM that lands while the shell forks its idle ``sleep`` is
#:   swallowed by the child before it execs, so that sleep would outlive the group's first TERM.
#:   The sleep holds no file of the channel either way.
REAPER_SH = r"""xl_busy() {
    for d in /proc/[0-9]*; do
        read -r c 2>/dev/null < "$d/comm" || continue
        [ "$c" = xl ] || continue
        tr '\0' '\n' 2>/dev/null < "$d/cmdline" | grep -qx -e migrate -e migrate-receive && return 0
    done
    return 1
}
reap() {
    i=0
    while xl_busy && [ "$i" -lt 60 ]; do i=$((i + 1)); sleep 0.5; done
    i=0
    while [ "$i" -lt 30 ]; do
        names=$(xl list 2>/dev/null | while read -r n _; do case $n in "$1"|"$1"--*) echo "$n" ;; esac; done)
        [ -n "$names" ] || return 0
        for n in $names; do xl destroy "$n"; done
        i=$((i + 1))
        sleep 1
    done
}
trap 'reap "$1"; trap - TERM; kill -TERM 0' TERM
echo REAPER-READY
exec >/dev/null 2>&1
while :; do sleep 3600 </dev/null >/dev/null 2>&1 & wait "$!"; done"""


class SshDom0(ShellDom0):
    """A dom0 reached over SSH (a lab's Xen host): every command goes through ``ssh``'s
    multiplexed master (:class:`migrate.testbed.hosts.SshHost`), quoted word by word; each
    stream runs under :data:`GUARD_SH`, so closing its channel (:meth:`close`, or the
    orchestrator's death) stops it on the dom0."""

    def __init__(self, host: str, streams: StreamLog, ssh: Any, run_id: str) -> None:
        super().__init__(host, streams)
        self.ssh = ssh
        self.run_id = run_id
        self._n = 0

    def argv(self, argv: Sequence[str]) -> list[str]:
        """The local argv that runs ``argv`` on the dom0 through the master connection."""
        return with_pdeathsig(self.ssh.ssh_argv(_checked(argv)))

    def put(self, data: bytes, path: str, mode: int = 0o644) -> None:
        """Write ``data`` to ``path`` on the dom0 (written beside it and renamed)."""
        self.ssh.put(data, path, mode)

    def stream(self, tag: str, argv: Sequence[str]) -> None:
        """Start ``argv`` under the guard; its lines are recorded tagged ``tag``, last
        ``VRMIG-EXIT <rc>``.  The channel's stdin stays open until :meth:`close`."""
        self._n += 1
        pidfile = f"{GUARD_DIR}/{self.run_id}-{tag}-{self._n}.pid"
        self._pumped(tag, self.argv(["sh", "-c", GUARD_SH, "sh", pidfile, *_checked(argv)]), subprocess.PIPE)

    def close(self) -> None:
        """Close every stream's channel (its guard stops the command on the dom0), then wait for
        the local ssh clients, stopping those that do not end."""
        for p in self.procs:
            if p.stdin is not None:
                with contextlib.suppress(OSError):
                    p.stdin.close()
        for p in self.procs:
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.terminate()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    p.wait(5)
