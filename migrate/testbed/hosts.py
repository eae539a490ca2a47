"""Reaching the hosts of a testbed inventory: one object per host with the same interface whether
the host is a machine reached over SSH (:class:`SshHost`) or the orchestrator itself, optionally
inside a network namespace (:class:`LocalHost`).

:class:`SshHost` uses the OpenSSH client with connection multiplexing: one master connection per
host (``ssh -M -N``, a child of the orchestrator under ``setpriv --pdeathsig KILL`` so it dies with
it, stopped by PID on :meth:`SshHost.close`) and every command a multiplexed session over its
control socket.  Options are fixed, never taken from a user's defaults: ``BatchMode=yes``,
``StrictHostKeyChecking=yes`` against the inventory's known_hosts, ``IdentitiesOnly=yes`` with
the inventory's key.  Remote argv reach the remote shell only through :func:`shlex.join`.

A remote process started over SSH keeps running when its local ssh client is killed (a timeout
of :meth:`SshHost.run` ends only the client); what runs remotely for longer than a command needs
its own lifetime guard on the host.

Clocks: :meth:`SshHost.clock` bounds the host's CLOCK_REALTIME minus the orchestrator's by
round trips over one long-lived session (:func:`estimate_offset`, the exchange with the smallest
round trip, ± half of it)."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import selectors
import shlex
import shutil
import signal
import subprocess
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol, Self

from migrate.core.errors import ConfigError, VrmigError
from migrate.core.procs import netns_exec, with_pdeathsig
from migrate.testbed.inventory import HostSpec, Inventory, SshTarget

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 10  # ssh ConnectTimeout: the TCP connection and the SSH banner
LOGIN_TIMEOUT_S = 20.0  # from starting the master to its control socket (authenticated)
SERVER_ALIVE_INTERVAL_S = 5  # the master notices a dead host after 3 unanswered probes
STOP_TIMEOUT_S = 5.0
POLL_S = 0.01
CLOCK_TIMEOUT_S = 10.0
#: sun_path is 108 bytes; ssh binds "<ControlPath>.<16 random characters>" first, then renames
MAX_CONTROL_PATH = 107 - 17
#: the host's side of :meth:`SshHost.clock`: each line read is answered with CLOCK_REALTIME in ns
CLOCK_SERVER = (
    "import sys,time\nw=sys.stdout.buffer\nfor _ in sys.stdin.buffer:\n w.write(b'%d\\n'%time.time_ns());w.flush()\n"
)


class SshError(VrmigError):
    """A host of the inventory cannot be reached or logged into (exit 2: fix the inventory or
    the host, nothing was started)."""

    exit_code = 2


class HostUnreachable(SshError):
    """No SSH connection: refused, timed out, no route, unknown name, or the connection broke."""


class AuthRefused(SshError):
    """The host refused the inventory's key (or the key file is unreadable)."""


class HostKeyError(SshError):
    """The host's key does not verify against the inventory's known_hosts."""


class HostKeyUnknown(HostKeyError):
    """known_hosts has no key for this host (or the file is missing)."""


class HostKeyMismatch(HostKeyError):
    """known_hosts has a different key for this host."""


class RemoteCommandError(VrmigError):
    """A command on a host exited non-zero (``returncode``, ``stderr`` kept)."""

    def __init__(self, message: str, returncode: int | None = None, stderr: bytes = b"") -> None:
        super().__init__(message)
        self.returncode = returncode
        self.stderr = stderr


class RemoteTimeout(RemoteCommandError):
    """A command on a host did not finish in time (the local client was killed; a remote process
    may still run)."""


@dataclass(frozen=True)
class ClockSample:
    """A host's CLOCK_REALTIME minus the orchestrator's: ``offset_ns`` ± ``uncertainty_ns`` (a
    bound, not a standard deviation), from ``n`` exchanges whose smallest round trip was
    ``rtt_min_ns``.  ``method`` says how it was obtained."""

    offset_ns: int
    uncertainty_ns: int
    rtt_min_ns: int
    n: int
    method: str = "round-trip exchanges over one ssh session"

    def as_dict(self) -> dict[str, Any]:
        """For meta.json and ``hosts-check --json``: the fields, in their order."""
        return asdict(self)


SAME_CLOCK = "the orchestrator's own clock (local host): offset 0 by construction"


def estimate_offset(exchanges: Sequence[tuple[int, int, int]]) -> ClockSample:
    """Offset of a remote clock from ``(t_send_ns, remote_ns, t_recv_ns)`` exchanges, where the
    two local times bracket the moment the remote read its clock.  The exchange with the smallest
    round trip bounds it best: offset = remote − (t_send + t_recv)/2, within ± rtt/2."""
    if not exchanges:
        raise ValueError("no clock exchanges")
    for s, _, r in exchanges:
        if r < s:
            raise ValueError(f"exchange received before it was sent ({s} > {r})")
    s, remote, r = min(exchanges, key=lambda e: e[2] - e[0])
    rtt = r - s
    # integer arithmetic: (s + r) / 2 rounded so the bound still holds (uncertainty rounded up)
    mid2 = s + r
    return ClockSample(
        offset_ns=(2 * remote - mid2) // 2,
        uncertainty_ns=(rtt + 1) // 2,
        rtt_min_ns=rtt,
        n=len(exchanges),
    )


def ssh_options(t: SshTarget, control_path: Path) -> list[str]:
    """The options every ssh invocation for ``t`` carries (master and sessions alike)."""
    return [
        "-o", "BatchMode=yes",
        "-o", "StrictHostKeyChecking=yes",
        "-o", f"UserKnownHostsFile={t.known_hosts}",
        "-o", "GlobalKnownHostsFile=/dev/null",
        "-o", "IdentitiesOnly=yes",
        "-o", "IdentityAgent=none",
        "-i", str(t.key),
        "-p", str(t.port),
        "-l", t.user,
        "-o", f"ConnectTimeout={CONNECT_TIMEOUT_S}",
        "-o", f"ControlPath={control_path}",
    ]  # fmt: skip


def master_argv(t: SshTarget, control_path: Path) -> list[str]:
    """The master connection: no command, in the foreground, a child that dies with the
    orchestrator (PDEATHSIG), binding forwarded unix sockets over stale ones."""
    return with_pdeathsig([
        "ssh",
        *ssh_options(t, control_path),
        "-o", "ControlMaster=yes",
        "-o", "ControlPersist=no",
        "-o", f"ServerAliveInterval={SERVER_ALIVE_INTERVAL_S}",
        "-o", "ServerAliveCountMax=3",
        "-o", "StreamLocalBindUnlink=yes",
        "-o", "ExitOnForwardFailure=yes",
        "-N",
        "--",
        t.host,
    ])  # fmt: skip


def session_argv(t: SshTarget, control_path: Path, remote_argv: Sequence[str]) -> list[str]:
    """A command through the master: the remote shell sees exactly ``shlex.join(remote_argv)``,
    so every element arrives as one argument whatever spaces, quotes or ``$`` it holds."""
    if not remote_argv:
        raise ValueError("empty remote argv")
    return [
        "ssh",
        *ssh_options(t, control_path),
        "-o", "ControlMaster=no",
        # when the master is gone (or dies during the handshake) ssh would silently open a
        # connection of its own, which no one stops: make that fallback fail instead
        "-o", "ProxyCommand=false",
        "-o", "LogLevel=ERROR",
        "-T",
        "--",
        t.host,
        shlex.join(remote_argv),
    ]  # fmt: skip


def control_argv(t: SshTarget, control_path: Path, op: str, *extra: str) -> list[str]:
    """``ssh -O <op>`` to the master (check, forward, cancel)."""
    return ["ssh", *ssh_options(t, control_path), "-o", "LogLevel=ERROR", "-O", op, *extra, "--", t.host]


def classify_login_failure(role: str, t: SshTarget, stderr: str) -> SshError:
    """The error for a master that exited before its control socket appeared, from ssh's
    stderr: host key mismatch / unknown, authentication refused, or unreachable."""
    who = f"{role} ({t.user}@{t.host}:{t.port})"
    last = " | ".join(line.strip() for line in stderr.strip().splitlines()[-2:] if line.strip())
    if "REMOTE HOST IDENTIFICATION HAS CHANGED" in stderr or ("Host key for" in stderr and "has changed" in stderr):
        return HostKeyMismatch(
            f"{who}: host key does not match {t.known_hosts} (the host was reinstalled or this is "
            f"another machine: verify, then replace its line, e.g. ssh-keyscan -p {t.port} {t.host})"
        )
    if "Host key verification failed" in stderr or "host key is known" in stderr:
        return HostKeyUnknown(
            f"{who}: host key unknown: {t.known_hosts} has no key for it (add it: ssh-keyscan -p {t.port} "
            f"{t.host} >> {t.known_hosts}, after checking the fingerprint)"
        )
    if "Permission denied" in stderr or "Too many authentication failures" in stderr:
        return AuthRefused(
            f"{who}: authentication refused for key {t.key} (append {t.key}.pub to ~{t.user}/.ssh/authorized_keys "
            f"on the host, or fix `key` in the inventory)"
        )
    return HostUnreachable(f"{who}: unreachable: {last or 'ssh exited without a message'} (check address, port, sshd)")


class Host(Protocol):
    """What callers use of a host, whatever reaches it."""

    spec: HostSpec

    def open(self) -> None: ...
    def close(self) -> None: ...
    def ssh_argv(self, remote_argv: list[str]) -> list[str]: ...
    def run(
        self, argv: list[str], *, timeout_s: float = 30.0, check: bool = True, input: bytes | None = None
    ) -> subprocess.CompletedProcess[bytes]: ...
    def put(self, data: bytes, remote_path: str, mode: int = 0o644) -> None: ...
    def fetch(self, remote_path: str, local: Path) -> None: ...
    def forward_unix(self, local: Path, remote: str) -> None: ...
    def cancel_forward(self, local: Path) -> None: ...
    def clock(self, samples: int = 20) -> ClockSample: ...
    def sync_state(self) -> dict[str, Any]: ...


# PR_SET_PDEATHSIG fires when the *thread* that forked the child exits, so masters are forked by
# one thread that lives as long as the orchestrator; open() may then be called from any thread.
_SPAWNER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="vrmig-ssh-spawn")


def _spawn(argv: list[str], **kw: Any) -> subprocess.Popen[bytes]:
    return _SPAWNER.submit(subprocess.Popen, argv, **kw).result()


def _put_argv(remote_path: str, mode: int) -> list[str]:
    # written beside the target and renamed: a reader never sees half a file
    script = 'tmp="$1.part.$$" && cat > "$tmp" && chmod "$2" "$tmp" && mv -f "$tmp" "$1"'
    return ["sh", "-c", script, "vrmig-put", remote_path, f"{mode:o}"]


def _completed(
    argv: list[str], what: str, timeout_s: float, check: bool, input: bytes | None
) -> subprocess.CompletedProcess[bytes]:
    try:
        cp = subprocess.run(
            argv,
            input=input,
            stdin=subprocess.DEVNULL if input is None else None,
            capture_output=True,
            timeout=timeout_s,
        )
    except subprocess.TimeoutExpired as err:
        raise RemoteTimeout(f"{what} did not finish within {timeout_s:g} s", None, err.stderr or b"") from None
    if check and cp.returncode != 0:
        tail = " | ".join(cp.stderr.decode(errors="replace").strip().splitlines()[-3:])
        raise RemoteCommandError(f"{what} exited with status {cp.returncode}: {tail}", cp.returncode, cp.stderr)
    return cp


class _ClockChannel:
    """One long-lived session running :data:`CLOCK_SERVER`; each exchange is one line each way."""

    def __init__(self, argv: list[str]) -> None:
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert self.proc.stdin and self.proc.stdout
        self.sel = selectors.DefaultSelector()
        self.sel.register(self.proc.stdout, selectors.EVENT_READ)
        self.buf = b""

    def exchange(self, timeout_s: float) -> tuple[int, int, int]:
        assert self.proc.stdin and self.proc.stdout
        fd = self.proc.stdout.fileno()
        t_send = time.time_ns()
        os.write(self.proc.stdin.fileno(), b"\n")
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0 or not self.sel.select(left):
                raise RemoteTimeout(f"clock exchange: no answer within {timeout_s:g} s")
            chunk = os.read(fd, 4096)
            if not chunk:
                err = self.proc.stderr.read().decode(errors="replace").strip() if self.proc.stderr else ""
                raise RemoteCommandError(f"clock channel closed: {err or 'no message'}")
            self.buf += chunk
        t_recv = time.time_ns()
        line, _, self.buf = self.buf.partition(b"\n")
        return t_send, int(line), t_recv

    def close(self) -> None:
        with contextlib.suppress(OSError):
            assert self.proc.stdin
            self.proc.stdin.close()  # EOF ends the loop on the host
        try:
            self.proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for f in (self.proc.stdout, self.proc.stderr):
            if f:
                f.close()
        self.sel.close()


def _measure_clock(channel: _ClockChannel, samples: int) -> ClockSample:
    if samples < 1:
        raise ValueError("samples must be at least 1")
    return estimate_offset([channel.exchange(CLOCK_TIMEOUT_S) for _ in range(samples)])


def _sync_argv() -> list[str]:
    from migrate.testbed import probe_host

    return ["python3", "-c", probe_host.source(), "sync", "{}"]


def _sync_from(cp: subprocess.CompletedProcess[bytes]) -> dict[str, Any]:
    if cp.returncode == 127:
        return {"method": None, "synchronised": None, "reason": "python3 missing on the host"}
    if cp.returncode != 0:
        err = cp.stderr.decode(errors="replace").strip().splitlines()[-1:] or ["no message"]
        return {"method": None, "synchronised": None, "reason": f"sync probe failed: {err[0]}"}
    return json.loads(cp.stdout)


class _HostBase(ABC):
    """What :class:`SshHost` and :class:`LocalHost` share: the role, and ``with`` opening and closing."""

    spec: HostSpec

    @property
    def role(self) -> str:
        """The inventory role (A, B, C, D, R1, R2)."""
        return self.spec.role

    @abstractmethod
    def open(self) -> None:
        """Make the host ready for commands."""

    @abstractmethod
    def close(self) -> None:
        """Release what :meth:`open` set up."""

    def __enter__(self) -> Self:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class SshHost(_HostBase):
    """A host reached over SSH through one multiplexed master connection (see module doc)."""

    def __init__(self, spec: HostSpec, control_dir: Path) -> None:
        if spec.transport != "ssh" or spec.ssh is None:
            raise ConfigError(f"{spec.role}: SshHost needs a host with transport 'ssh'")
        self.spec = spec
        self.target: SshTarget = spec.ssh
        self.control_dir = Path(control_dir)
        self.control_path = self.control_dir / f"{spec.role}.ctl"
        self.log_path = self.control_dir / f"{spec.role}.master.log"
        if len(str(self.control_path)) > MAX_CONTROL_PATH:
            raise ConfigError(
                f"control directory {self.control_dir} is too long for a unix socket path "
                f"(at most {MAX_CONTROL_PATH - len(self.control_path.name) - 1} characters: use a shorter one)"
            )
        self.master: subprocess.Popen[bytes] | None = None
        self._forwards: dict[Path, str] = {}
        self._clock: _ClockChannel | None = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"SshHost({self.role}, {self.target.user}@{self.target.host}:{self.target.port})"

    def _check_files(self) -> None:
        t = self.target
        who = f"{self.role} ({t.user}@{t.host}:{t.port})"
        if not os.access(t.key, os.R_OK):
            raise AuthRefused(f"{who}: key file {t.key} is missing or unreadable (fix `key` in the inventory)")
        if not t.known_hosts.is_file():
            raise HostKeyUnknown(
                f"{who}: known_hosts file {t.known_hosts} is missing (create it: ssh-keyscan -p {t.port} "
                f"{t.host} > {t.known_hosts}, after checking the fingerprint)"
            )

    def open(self) -> None:
        """Start the master connection and wait (by observing its control socket) until it has
        logged in.  Raises :class:`HostUnreachable`, :class:`AuthRefused`, :class:`HostKeyUnknown`
        or :class:`HostKeyMismatch`; nothing is left running on failure."""
        if self.master is not None:
            return
        self._check_files()
        self.control_dir.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            self.control_path.unlink()  # a stale socket of a killed master: ssh would refuse to bind
        argv = master_argv(self.target, self.control_path)
        log.debug("%s: master: %s", self.role, shlex.join(argv))
        with open(self.log_path, "wb") as err:
            self.master = _spawn(
                argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True
            )
        t0 = time.monotonic()
        try:
            while not self.control_path.exists():
                if self.master.poll() is not None:
                    raise classify_login_failure(self.role, self.target, self.log_path.read_text(errors="replace"))
                if time.monotonic() - t0 > LOGIN_TIMEOUT_S:
                    raise HostUnreachable(
                        f"{self.role} ({self.target.host}:{self.target.port}): no login within {LOGIN_TIMEOUT_S:g} s "
                        "(the host accepts connections but does not complete SSH: check sshd)"
                    )
                time.sleep(POLL_S)
        except BaseException:
            self._stop_master()
            raise
        log.debug("%s: master up (pid %d) in %.3f s", self.role, self.master.pid, time.monotonic() - t0)

    @property
    def is_open(self) -> bool:
        """True while the master connection runs."""
        return self.master is not None and self.master.poll() is None

    def _stop_master(self) -> None:
        m, self.master = self.master, None
        if m is None:
            return
        if m.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(m.pid, signal.SIGTERM)
            try:
                m.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                m.kill()
                m.wait()
        with contextlib.suppress(FileNotFoundError):
            self.control_path.unlink()

    def close(self) -> None:
        """Close the clock session, remove forwarded sockets and stop the master by its PID."""
        if self._clock is not None:
            self._clock.close()
            self._clock = None
        for local in list(self._forwards):
            with contextlib.suppress(OSError):
                local.unlink()
        self._forwards.clear()
        self._stop_master()

    def _need_open(self) -> None:
        if not self.is_open:
            rc = None if self.master is None else self.master.returncode
            tail = ""
            with contextlib.suppress(OSError):
                tail = " | ".join(self.log_path.read_text(errors="replace").strip().splitlines()[-2:])
            state = "not opened" if rc is None else f"lost (master exited {rc}: {tail or 'no message'})"
            raise HostUnreachable(f"{self.role} ({self.target.host}): connection {state}")

    def ssh_argv(self, remote_argv: list[str]) -> list[str]:
        """The local argv that runs ``remote_argv`` on the host through the master."""
        self._need_open()
        return session_argv(self.target, self.control_path, remote_argv)

    def run(
        self, argv: list[str], *, timeout_s: float = 30.0, check: bool = True, input: bytes | None = None
    ) -> subprocess.CompletedProcess[bytes]:
        """Run ``argv`` on the host, output captured; ``input`` is its stdin (else /dev/null).
        Raises :class:`RemoteCommandError` on a non-zero exit when ``check``, and
        :class:`RemoteTimeout` after ``timeout_s`` (the remote process may outlive it)."""
        cp = _completed(self.ssh_argv(argv), f"{self.role}: {shlex.join(argv)}", timeout_s, False, input)
        if cp.returncode == 255 and not self.is_open:
            self._need_open()  # the connection, not the command, failed
        if check and cp.returncode != 0:
            tail = " | ".join(cp.stderr.decode(errors="replace").strip().splitlines()[-3:])
            raise RemoteCommandError(
                f"{self.role}: {shlex.join(argv)} exited with status {cp.returncode}: {tail}", cp.returncode, cp.stderr
            )
        return cp

    def put(self, data: bytes, remote_path: str, mode: int = 0o644) -> None:
        """Write ``data`` to ``remote_path`` on the host (streamed through ssh, renamed into place)."""
        self.run(_put_argv(remote_path, mode), input=data, timeout_s=max(30.0, len(data) / 1e6))

    def fetch(self, remote_path: str, local: Path) -> None:
        """Copy ``remote_path`` on the host to ``local`` (streamed, written beside and renamed)."""
        local = Path(local)
        part = local.with_name(local.name + ".part")
        try:
            with open(part, "wb") as out:
                cp = subprocess.run(
                    self.ssh_argv(["cat", "--", remote_path]),
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.PIPE,
                    timeout=600,
                )
            if cp.returncode != 0:
                self._need_open()
                raise RemoteCommandError(
                    f"{self.role}: cannot fetch {remote_path}: {cp.stderr.decode(errors='replace').strip()}",
                    cp.returncode,
                    cp.stderr,
                )
            part.replace(local)
        finally:
            with contextlib.suppress(FileNotFoundError):
                part.unlink()

    def forward_unix(self, local: Path, remote: str) -> None:
        """Make the unix socket ``remote`` on the host reachable at ``local`` here, through the
        master (QEMU's QMP socket).  ``local`` is bound when this returns."""
        local = Path(local)
        if ":" in str(local) or ":" in remote:
            raise ConfigError(f"{self.role}: socket paths for forwarding cannot contain ':' ({local}, {remote})")
        self._need_open()
        spec = f"{local}:{remote}"
        cp = subprocess.run(
            control_argv(self.target, self.control_path, "forward", "-L", spec),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=30,
        )
        if cp.returncode != 0:
            raise RemoteCommandError(
                f"{self.role}: cannot forward {local} to {remote}: {cp.stderr.decode(errors='replace').strip()}",
                cp.returncode,
                cp.stderr,
            )
        self._forwards[local] = remote

    def cancel_forward(self, local: Path) -> None:
        """Stop forwarding ``local`` (see :meth:`forward_unix`) and remove the local socket."""
        local = Path(local)
        remote = self._forwards.pop(local, None)
        if remote is None:
            return
        if self.is_open:
            subprocess.run(
                control_argv(self.target, self.control_path, "cancel", "-L", f"{local}:{remote}"),
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=30,
            )
        with contextlib.suppress(FileNotFoundError):
            local.unlink()

    def clock(self, samples: int = 20) -> ClockSample:
        """The host's CLOCK_REALTIME minus the orchestrator's (:func:`estimate_offset`), from
        ``samples`` exchanges over one session kept open until :meth:`close`."""
        with self._lock:
            if self._clock is None or self._clock.proc.poll() is not None:
                self._clock = _ClockChannel(self.ssh_argv(["python3", "-c", CLOCK_SERVER]))
            return _measure_clock(self._clock, samples)

    def sync_state(self) -> dict[str, Any]:
        """How the host's clock is synchronised: chrony (``chronyc -n tracking``), ptp4l running,
        systemd-timesyncd, else method ``none``; tools absent there are null with a reason."""
        return _sync_from(self.run(_sync_argv(), check=False))


class LocalHost(_HostBase):
    """A role played by the orchestrator itself, optionally inside network namespace ``netns``:
    the same interface as :class:`SshHost`, argv run directly (never through a shell)."""

    def __init__(self, spec: HostSpec, netns: str | None = None) -> None:
        self.spec = spec
        self.netns = netns
        self._forwards: set[Path] = set()

    def __repr__(self) -> str:
        return f"LocalHost({self.role}{', netns ' + self.netns if self.netns else ''})"

    def open(self) -> None:
        """Nothing to connect; a missing namespace is reported here."""
        if self.netns and not Path("/run/netns", self.netns).exists():
            raise HostUnreachable(f"{self.role}: network namespace {self.netns} does not exist")

    def close(self) -> None:
        """Remove the forwarding links made by :meth:`forward_unix`."""
        for local in list(self._forwards):
            self.cancel_forward(local)

    def ssh_argv(self, remote_argv: list[str]) -> list[str]:
        """The local argv (inside the namespace if one was given); the name is the interface's."""
        if not remote_argv:
            raise ValueError("empty argv")
        return netns_exec(self.netns, list(remote_argv)) if self.netns else list(remote_argv)

    def run(
        self, argv: list[str], *, timeout_s: float = 30.0, check: bool = True, input: bytes | None = None
    ) -> subprocess.CompletedProcess[bytes]:
        """Run ``argv`` here (see :meth:`SshHost.run`)."""
        try:
            return _completed(self.ssh_argv(argv), f"{self.role}: {shlex.join(argv)}", timeout_s, check, input)
        except FileNotFoundError as err:
            if check:
                raise RemoteCommandError(f"{self.role}: {argv[0]}: not found", 127) from None
            return subprocess.CompletedProcess(argv, 127, b"", str(err).encode())

    def put(self, data: bytes, remote_path: str, mode: int = 0o644) -> None:
        """Write ``data`` to ``remote_path`` (written beside and renamed)."""
        path = Path(remote_path)
        part = path.with_name(path.name + ".part")
        part.write_bytes(data)
        part.chmod(mode)
        part.replace(path)

    def fetch(self, remote_path: str, local: Path) -> None:
        """Copy ``remote_path`` to ``local``."""
        shutil.copyfile(remote_path, local)

    def forward_unix(self, local: Path, remote: str) -> None:
        """Same file system: ``local`` becomes a symbolic link to ``remote``."""
        local = Path(local)
        with contextlib.suppress(FileNotFoundError):
            local.unlink()
        local.symlink_to(remote)
        self._forwards.add(local)

    def cancel_forward(self, local: Path) -> None:
        """Remove the link made by :meth:`forward_unix`."""
        local = Path(local)
        if local in self._forwards:
            self._forwards.discard(local)
            with contextlib.suppress(FileNotFoundError):
                local.unlink()

    def clock(self, samples: int = 20) -> ClockSample:
        """Offset 0 ± 0: this is the orchestrator's own clock (namespaces share it)."""
        return ClockSample(0, 0, 0, 0, method=SAME_CLOCK)

    def sync_state(self) -> dict[str, Any]:
        """As :meth:`SshHost.sync_state`, of this machine."""
        return _sync_from(self.run(_sync_argv(), check=False))


def make_host(spec: HostSpec, control_dir: Path) -> SshHost | LocalHost:
    """The host object for ``spec`` (not yet opened)."""
    return SshHost(spec, control_dir) if spec.transport == "ssh" else LocalHost(spec)


def open_all(inv: Inventory, control_dir: Path) -> dict[str, SshHost | LocalHost | SshError]:
    """Open every host of ``inv`` in parallel; each role maps to its open host or to the error
    that kept it from opening (hosts-check reports them all)."""
    hosts = {r: make_host(spec, control_dir) for r, spec in inv.hosts.items()}

    def _open(h: SshHost | LocalHost) -> SshHost | LocalHost | SshError:
        try:
            h.open()
        except SshError as err:
            return err
        return h

    with ThreadPoolExecutor(max_workers=len(hosts) or 1, thread_name_prefix="vrmig-open") as ex:
        futures = {r: ex.submit(_open, h) for r, h in hosts.items()}
        try:
            return {r: f.result() for r, f in futures.items()}
        except BaseException:
            for f in futures.values():
                res = f.result()
                if not isinstance(res, SshError):
                    res.close()
            raise


def connect(inv: Inventory, control_dir: Path) -> dict[str, Host]:
    """Open every host of ``inv`` in parallel; if one fails, close the opened ones and raise the
    first failure (in role order)."""
    opened = open_all(inv, control_dir)
    errors = [e for e in opened.values() if isinstance(e, SshError)]
    if errors:
        for h in opened.values():
            if not isinstance(h, SshError):
                h.close()
        if len(errors) > 1:
            log.error("also: %s", "; ".join(str(e) for e in errors[1:]))
        raise errors[0]
    return {r: h for r, h in opened.items() if not isinstance(h, SshError)}
