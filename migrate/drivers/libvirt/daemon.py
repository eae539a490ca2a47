"""DRIVER=libvirt on the embedded testbed: one system-mode libvirtd per hypervisor-host
namespace (R1, R2), each with private config, state, socket and log paths.

libvirtd's system paths are fixed at build time, so each daemon is exec'd inside
``ip netns exec`` (which gives it a private mount namespace) after bind-mounting the run's
private copies over ``/etc/libvirt``, ``/run/libvirt``, ``/var/lib/libvirt``,
``/var/cache/libvirt`` and ``/var/log/libvirt``.  The libvirtd is the host's or a release of
LIBVIRT= (migrate.core.stack.LibvirtBuild): that one runs with its own library and connection
drivers (environment) and its data directories mounted over the host's.  The private base
directory is registered with the run before it is created, the daemon by PID as soon as it is
started, and the QEMU processes it spawns by PID from its pid files; teardown removes exactly
those."""

from __future__ import annotations

import contextlib
import grp
import logging
import pwd
import shutil
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from migrate.core.errors import DependencyError
from migrate.core.procs import Proc
from migrate.core.registry import Registry
from migrate.core.stack import LibvirtBuild

log = logging.getLogger(__name__)

LIBVIRTD = "libvirtd"
TCP_PORT = 16509
TLS_PORT = 16514
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 15.0
POLL_S = 0.05
#: libvirtd's QEMU capabilities cache inside its private tree (one XML file per QEMU binary)
CAPS_SUBDIR = "cache/qemu/capabilities"
#: private subdirectory -> the system path it is bind-mounted over inside the daemon's namespace
MOUNTS = (
    ("etc", "/etc/libvirt"),
    ("run", "/run/libvirt"),
    ("lib", "/var/lib/libvirt"),
    ("cache", "/var/cache/libvirt"),
    ("log", "/var/log/libvirt"),
)
#: Bind mounts, then exec the daemon's argv (the PID stays that of `ip netns exec`).  The base
#: directory comes in as "$1", then the mount pairs ``source=target``, ``--`` and the daemon's
#: argv as further arguments: nothing is interpolated into the script.
_LAUNCH = r"""
B=$1
shift
while [ "$#" -gt 0 ] && [ "$1" != -- ]; do
    mount --bind "${1%=*}" "${1##*=}" || { echo "vrmig: bind mount $1 failed" >&2; exit 97; }
    shift
done
shift
exec "$@" --listen -f "$B/etc/libvirtd.conf" -p "$B/libvirtd.pid"
"""


def tls_settings(tls_dir: str) -> list[tuple[str, str]]:
    """libvirtd.conf's settings that make it listen for TLS with the certificates in ``tls_dir``
    (``key``, ``value`` as written): the emulated lab's daemons and hosts-setup's real hosts
    (``vrmig_libvirt_tls_settings`` in the playbook) take the same ones."""
    return [
        ("listen_tls", "1"),
        ("ca_file", f'"{tls_dir}/cacert.pem"'),
        ("cert_file", f'"{tls_dir}/servercert.pem"'),
        ("key_file", f'"{tls_dir}/serverkey.pem"'),
    ]


def libvirtd_conf(
    sock_dir: Path, listen_addr: str, host_uuid: str, tls_dir: str | None = None, tls_port: int = TLS_PORT
) -> str:
    """libvirtd.conf: private UNIX sockets, a distinct host UUID (libvirt refuses to migrate to
    "the same host"), warnings to stderr, and the listener for the other daemon on the migration
    link: TCP without auth (the embedded testbed's namespaces), or with ``tls_dir`` (the emulated
    lab, as real hosts do) TLS on ``tls_port`` with the certificates in that directory
    (migrate.testbed.pki)."""
    if tls_dir is None:
        listen = [
            "listen_tls = 0",
            "listen_tcp = 1",
            f'listen_addr = "{listen_addr}"',
            f'tcp_port = "{TCP_PORT}"',
            'auth_tcp = "none"  # confined to the testbed migration link; real hosts use TLS or SSH',
        ]
    else:
        tls = dict(tls_settings(tls_dir))
        listen = [
            f"listen_tls = {tls.pop('listen_tls')}",
            "listen_tcp = 0",
            f'listen_addr = "{listen_addr}"',
            f'tls_port = "{tls_port}"',
            'auth_tls = "none"  # the client certificate, signed by the lab\'s CA, is the authentication',
            *(f"{k} = {v}" for k, v in tls.items()),
        ]
    return "\n".join(
        [
            f'unix_sock_dir = "{sock_dir}"',
            'unix_sock_ro_perms = "0700"',
            'unix_sock_rw_perms = "0700"',
            'auth_unix_ro = "none"',
            'auth_unix_rw = "none"',
            *listen,
            f'host_uuid = "{host_uuid}"',
            'log_outputs = "3:stderr"',
            "",
        ]
    )


def qemu_conf(migration_host: str) -> str:
    """qemu.conf: QEMU as root without security driver, cgroups or private /dev (none of which
    exist inside ``ip netns exec``), console logs to files, incoming migrations on the link."""
    return "\n".join(
        [
            'user = "root"',
            'group = "root"',
            "dynamic_ownership = 0",
            "remember_owner = 0",
            'security_driver = "none"',
            'stdio_handler = "file"',
            "namespaces = [ ]",
            "cgroup_controllers = [ ]",
            f'migration_host = "{migration_host}"',
            f'migration_address = "{migration_host}"',
            "",
        ]
    )


#: libvirt's QEMU driver resolves its compiled-in default user/group (Debian: libvirt-qemu)
#: before it reads qemu.conf; Debian's libvirt-daemon-system creates them.  Without that package
#: the daemon gets private copies of /etc/passwd and /etc/group that add them (QEMU still runs
#: as root, see qemu_conf).
QEMU_ACCOUNT = "libvirt-qemu"
QEMU_ACCOUNT_ID = 64055


def account_overlays() -> dict[str, str]:
    """Extra lines for the daemon's private /etc/passwd and /etc/group (empty if the host has them)."""
    extra: dict[str, str] = {}
    try:
        pwd.getpwnam(QEMU_ACCOUNT)
    except KeyError:
        extra["/etc/passwd"] = (
            f"{QEMU_ACCOUNT}:x:{QEMU_ACCOUNT_ID}:{QEMU_ACCOUNT_ID}:Libvirt Qemu:/nonexistent:/usr/sbin/nologin\n"
        )
    try:
        grp.getgrnam(QEMU_ACCOUNT)
    except KeyError:
        extra["/etc/group"] = f"{QEMU_ACCOUNT}:x:{QEMU_ACCOUNT_ID}:\n"
    return extra


def ensure_mount_points(extra: tuple[str, ...] = ()) -> None:
    """The system paths the private copies (and ``extra``: a fetched libvirt's data directories)
    are mounted over must exist (as libvirt's own packaging creates them).  Left in place: other
    runs may have daemons mounted on them."""
    for target in (*(t for _, t in MOUNTS), *extra):
        Path(target).mkdir(mode=0o755, parents=True, exist_ok=True)


def daemon_argv(build: LibvirtBuild | None) -> list[str]:
    """The command that runs ``build``'s libvirtd (None: the host's, found on PATH): through
    ``env`` with its library and driver directories where it has its own (``env`` execs it, so
    the PID stays the daemon's)."""
    if build is None:
        return [LIBVIRTD]
    env = [f"{k}={v}" for k, v in sorted(build.env.items())]
    return ["env", *env, *build.argv] if env else list(build.argv)


def log_tail(path: Path, n: int = 6, skip: str | None = None) -> str:
    """The last ``n`` non-empty lines of a daemon's log ``path`` joined by `` | `` (lines that
    start with ``skip`` left out), ``(empty)`` or ``(no log)``."""
    with contextlib.suppress(OSError):
        lines = [
            ln for ln in path.read_text(errors="replace").splitlines()
            if ln.strip() and not (skip and ln.startswith(skip))
        ]  # fmt: skip
        return " | ".join(lines[-n:]) or "(empty)"
    return "(no log)"


def wait_answering(
    daemon: Any, connect: Callable[[str], Any], abort: Callable[[], bool] | None, ready: Callable[[], bool], where: str
) -> Any:
    """``connect(daemon.uri)`` once ``daemon`` (its ``proc`` started, ``host``, ``log_tail``)
    answers: tried whenever ``ready()``, until :data:`START_TIMEOUT_S`; DependencyError quoting
    the daemon's log if its process exits, the run is aborted, or it never answers (``where``:
    how it was reached, for that message)."""
    deadline = time.monotonic() + START_TIMEOUT_S
    last_err: Exception | None = None
    while True:
        if not daemon.proc.alive():
            raise DependencyError(
                f"libvirtd on {daemon.host} exited (status {daemon.proc.returncode()}) while starting; "
                f"its log ({daemon.log_path}): {daemon.log_tail()}"
            )
        if ready():
            try:
                return connect(daemon.uri)
            except Exception as err:  # libvirt.libvirtError, but libvirt is imported lazily
                last_err = err
        if abort and abort():
            raise DependencyError(f"interrupted while libvirtd on {daemon.host} was starting")
        if time.monotonic() > deadline:
            raise DependencyError(
                f"libvirtd on {daemon.host} did not answer {where} within {START_TIMEOUT_S:.0f} s"
                f" ({last_err or 'no socket'}); its log: {daemon.log_tail()}"
            )
        time.sleep(POLL_S)


class _RunDaemon:
    """What the libvirtds started for a run share: a client URI on a UNIX socket of this machine
    (:attr:`client_socket`) and the daemon's stderr kept in the run directory."""

    host: str
    run_dir: Path
    #: lines of the daemon's stderr that start with this are not the daemon's (None: every line is)
    log_skip: str | None = None

    @property
    def client_socket(self) -> Path:
        """The daemon's UNIX socket as this machine reaches it."""
        raise NotImplementedError

    @property
    def uri(self) -> str:
        """Client URI (from the orchestrator, on this machine)."""
        return f"qemu+unix:///system?socket={self.client_socket}"

    @property
    def log_path(self) -> Path:
        """The daemon's own log (its stderr) in the run directory."""
        return self.run_dir / f"libvirtd-{self.host}.stderr"

    def log_tail(self, n: int = 6) -> str:
        """Last ``n`` lines of the daemon's log (those starting with :attr:`log_skip` left out)."""
        return log_tail(self.log_path, n, skip=self.log_skip)


class NamespacedLibvirtd(_RunDaemon):
    """One libvirtd in network namespace ``netns``, playing hypervisor host ``host``: the libvirt
    of ``build`` (migrate.core.stack.LibvirtBuild; None: the host's libvirtd)."""

    def __init__(
        self, host: str, netns: str, listen_addr: str, registry: Registry, run_dir: Path,
        build: LibvirtBuild | None = None,
    ) -> None:  # fmt: skip
        self.host = host
        self.build = build
        self.netns = netns
        self.listen_addr = listen_addr
        self.registry = registry
        self.run_dir = run_dir
        self.base = registry.dir / f"libvirt-{host}"
        self.host_uuid = str(uuid.uuid4())
        self.proc: Proc | None = None
        self._qemu_pids: dict[str, int] = {}

    # -- addresses -----------------------------------------------------------------------
    @property
    def socket(self) -> Path:
        """The daemon's read-write UNIX socket."""
        return self.base / "sock" / "libvirt-sock"

    @property
    def client_socket(self) -> Path:
        """The daemon's socket itself (the namespace shares this machine's file system)."""
        return self.socket

    @property
    def peer_uri(self) -> str:
        """URI by which the other host's daemon reaches this one (peer-to-peer migration)."""
        return f"qemu+tcp://{self.listen_addr}:{TCP_PORT}/system"

    # -- lifecycle -----------------------------------------------------------------------
    def start(self, connect: Callable[[str], Any], abort: Callable[[], bool] | None = None) -> Any:
        """Create the private tree, start the daemon and return ``connect(uri)`` once it answers.

        Raises DependencyError quoting the daemon's log if it exits or never answers."""
        self.registry.add_path(self.base)
        self.base.mkdir(mode=0o700)
        for sub, _ in (*MOUNTS, ("sock", "")):
            (self.base / sub).mkdir(mode=0o700)
        (self.base / "etc" / "libvirtd.conf").write_text(
            libvirtd_conf(self.base / "sock", self.listen_addr, self.host_uuid)
        )
        (self.base / "etc" / "qemu.conf").write_text(qemu_conf(self.listen_addr))
        own = self.build.mounts if self.build is not None else ()
        ensure_mount_points(tuple(t for _, t in own))
        mounts = [(str(self.base / sub), target) for sub, target in MOUNTS]
        for target, lines in account_overlays().items():
            name = Path(target).name
            text = Path(target).read_text()
            (self.base / name).write_text(text + ("" if text.endswith("\n") else "\n") + lines)
            mounts.append((str(self.base / name), target))
        mounts.extend(own)
        argv = [
            "sh", "-c", _LAUNCH, "vrmig-libvirtd", str(self.base), *(f"{s}={t}" for s, t in mounts), "--",
            *daemon_argv(self.build),
        ]  # fmt: skip
        self.proc = Proc(f"libvirtd-{self.host}", argv, self.registry, self.run_dir, netns=self.netns)
        self.proc.start()
        return self._wait_ready(connect, abort)

    def _wait_ready(self, connect: Callable[[str], Any], abort: Callable[[], bool] | None) -> Any:
        assert self.proc is not None
        return wait_answering(self, connect, abort, self.socket.exists, f"on {self.socket}")

    def pidfile(self, domain: str) -> Path:
        """Where this daemon writes the PID of ``domain``'s QEMU."""
        return self.base / "run" / "qemu" / f"{domain}.pid"

    def register_domain(self, domain: str) -> None:
        """Record ``domain`` on this host with the run before it is created or received here: its
        QEMU is libvirt's child, not the orchestrator's, and is started with a cleared environment
        (no VRMIG_RUN_PREFIX), so teardown and the reaper of a killed orchestrator find it by
        domain name (through the daemon) or by the pid file checked against ``-name guest=``."""
        self.registry.add_domain(domain, self.uri, self.pidfile(domain))

    def qemu_pid(self, domain: str) -> int | None:
        """PID of the QEMU this daemon runs for ``domain`` (from its pid file), registered with
        the run the first time it is seen."""
        if domain in self._qemu_pids:
            return self._qemu_pids[domain]
        try:
            pid = int(self.pidfile(domain).read_text().strip())
        except (OSError, ValueError):
            return None
        self._qemu_pids[domain] = pid
        self.registry.add_process(pid, f"qemu-{self.host} (libvirt)")
        return pid

    def stop(self) -> None:
        """Stop the daemon by PID (SIGTERM, then SIGKILL) and keep its QEMU logs in the run dir."""
        if self.proc is not None:
            self.proc.stop(timeout_s=STOP_TIMEOUT_S)
        qemu_logs = self.base / "log" / "qemu"
        if qemu_logs.is_dir():
            for f in sorted(qemu_logs.glob("*.log")):
                with contextlib.suppress(OSError):
                    shutil.copyfile(f, self.run_dir / f"libvirt-qemu-{self.host}.log")


class LabLibvirtd:
    """The libvirtd of a lab's hypervisor host, already running there (the lab's own daemon, set
    up by its operator or by ``make hosts-setup``), reached through the inventory's
    ``libvirt_uri`` (e.g. ``qemu+ssh://``); the other host's daemon reaches it by its
    ``libvirt_peer_uri``.  Same interface as :class:`NamespacedLibvirtd`; it starts and stops
    nothing but the connection, and the domain it is given is destroyed by name at teardown."""

    def __init__(self, host: str, uri: str, peer_uri: str | None, registry: Registry) -> None:
        self.host = host
        self.uri = uri
        self.peer_uri = peer_uri or ""
        self.registry = registry
        self.host_uuid: str | None = None

    def start(self, connect: Callable[[str], Any], abort: Callable[[], bool] | None = None) -> Any:
        """Connect to the host's libvirtd (one attempt: it is supposed to run)."""
        try:
            conn = connect(self.uri)
        except Exception as err:  # libvirt.libvirtError
            raise DependencyError(
                f"libvirtd of {self.host} is unreachable at {self.uri}: {err} (make hosts-check TESTBED=... says why)"
            ) from err
        with contextlib.suppress(Exception):  # the daemon's host UUID, from its capabilities
            import xml.etree.ElementTree as ET

            self.host_uuid = ET.fromstring(conn.getCapabilities()).findtext("./host/uuid")
        return conn

    def log_tail(self, n: int = 6) -> str:
        """The daemon's log is on its host: not read from here."""
        return f"(libvirtd's log is on {self.host})"

    def register_domain(self, domain: str) -> None:
        """Record the domain for teardown: destroyed by name through the URI (no local pid file)."""
        self.registry.add_domain(domain, self.uri, Path("/nonexistent") / f"{domain}.pid")

    def qemu_pid(self, domain: str) -> int | None:
        """QEMU runs on the lab host: no local PID."""
        return None

    def stop(self) -> None:
        """Nothing runs here to stop."""


#: the TLS port of a run's own libvirtd on a lab host (the host's own daemon keeps libvirt's 16514)
RUN_TLS_PORT = 16515
#: A lab run's libvirtd under ``unshare -m`` (its mounts private): the host's TLS files copied into
#: the private /etc/libvirt, the bind mounts, then the daemon as a child of this shell (not exec'd),
#: so that however the daemon ends (SIGTERM from the run's stop or from the guard whose SSH channel
#: closed) the shell then kills the QEMUs it started, found by their pid files and checked to be
#: QEMU running a domain (``-name guest=``).  libvirt starts QEMU in a session of its own, outside
#: the guard's process group, and a stopped daemon leaves its domains running by design.
_LAB_LAUNCH = r"""
B=$1
shift
mkdir -p "$B/etc/pki" && cp -a "$LAB_PKI/." "$B/etc/pki/" || { echo "vrmig: cannot copy $LAB_PKI" >&2; exit 96; }
while [ "$#" -gt 0 ] && [ "$1" != -- ]; do
    mount --bind "${1%=*}" "${1##*=}" || { echo "vrmig: bind mount $1 failed" >&2; exit 97; }
    shift
done
shift
"$@" --listen -f "$B/etc/libvirtd.conf" -p "$B/libvirtd.pid" &
d=$!
trap 'kill -TERM "$d" 2>/dev/null' TERM HUP INT
wait "$d"
st=$?
while kill -0 "$d" 2>/dev/null; do wait "$d"; st=$?; done
for f in "$B"/run/qemu/*.pid; do
    [ -f "$f" ] || continue
    p=$(cat "$f")
    case "$p" in ''|*[!0-9]*) continue ;; esac
    if tr '\0' '\n' < "/proc/$p/cmdline" 2>/dev/null | grep -q '^guest='; then
        echo "vrmig: killing QEMU $p of $f" >&2
        kill -KILL "$p"
    fi
done
exit "$st"
"""


def run_peer_uri(host_peer_uri: str, port: int = RUN_TLS_PORT) -> str:
    """The inventory's ``libvirt_peer_uri`` (``qemu+tls://host/...``, the host's own daemon) with
    the port of a run's own daemon; ConfigError for a URI of another transport."""
    from urllib.parse import urlsplit, urlunsplit

    from migrate.core.errors import ConfigError

    parts = urlsplit(host_peer_uri)
    if parts.scheme != "qemu+tls" or not parts.hostname:
        raise ConfigError(
            f"libvirt_peer_uri {host_peer_uri!r}: a run's own libvirtd (LIBVIRT= a release) is reached by "
            "its peer over TLS: give a qemu+tls:// URI (docs/testbed.md)"
        )
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return urlunsplit((parts.scheme, f"{host}:{port}", parts.path, parts.query, parts.fragment))


class LabRunLibvirtd(_RunDaemon):
    """A libvirtd of the release ``build`` that hosts-setup deployed on a lab's hypervisor host
    (``build``'s paths are those on the host), started for this run over SSH under the guard
    (migrate.testbed.guard): private etc, run, lib, cache and log directories in the run's
    directory there, bind-mounted in a mount namespace of its own (``unshare -m``), its own TLS
    port (:data:`RUN_TLS_PORT`) with the host's certificates, and its UNIX socket forwarded to
    this machine through the host's SSH connection.  The host's own libvirtd is not touched.
    Its QEMU capabilities cache starts with what the release's previous daemon on that host
    probed (:meth:`caps_cache`), which libvirt checks and probes again when stale: without it
    every run pays the probe (about 20 s under TCG).  Same interface as :class:`NamespacedLibvirtd`."""

    def __init__(
        self, host: str, testbed: Any, build: LibvirtBuild, listen_addr: str, host_peer_uri: str,
        registry: Registry, run_dir: Path,
    ) -> None:  # fmt: skip
        self.host = host
        self.tb = testbed
        self.build = build
        self.listen_addr = listen_addr
        self.peer_uri = run_peer_uri(host_peer_uri)
        self.registry = registry
        self.run_dir = run_dir
        self.base = f"{testbed.run_dir()}/libvirt-{host}"
        self.local_socket = registry.dir / f"libvirt-{host}.sock"
        self.host_uuid = str(uuid.uuid4())
        self.proc: Any = None

    #: the guard's own lines in the daemon's stderr (brought here by its SSH channel)
    log_skip = "vrmig-guard:"

    @property
    def client_socket(self) -> Path:
        """The daemon's socket, forwarded to this machine."""
        return self.local_socket

    def start(self, connect: Callable[[str], Any], abort: Callable[[], bool] | None = None) -> Any:
        """Write the private tree on the host, start the daemon there and return ``connect(uri)``
        once it answers through the forwarded socket; DependencyError quoting its log if it exits
        or never answers."""
        from migrate.core.procs import ProcessError
        from migrate.testbed.pki import LIBVIRT_PKI_DIR  # (pki needs cryptography: only a lab run loads it)

        subs = [f"{self.base}/{sub}" for sub, _ in (*MOUNTS, ("sock", ""))]
        res = self.tb.run(self.host, ["mkdir", "-m", "0700", "-p", *subs, f"{self.base}/{CAPS_SUBDIR}"])
        if res.returncode != 0:
            raise DependencyError(f"{self.host}: cannot create {self.base}: {res.stderr.decode(errors='replace')}")
        self._copy_caps(self.caps_cache(), f"{self.base}/{CAPS_SUBDIR}")
        conf = libvirtd_conf(
            Path(f"{self.base}/sock"), self.listen_addr, self.host_uuid, tls_dir=LIBVIRT_PKI_DIR, tls_port=RUN_TLS_PORT
        )
        self.tb.write_atomic(self.host, f"{self.base}/etc/libvirtd.conf", conf.encode())
        self.tb.write_atomic(self.host, f"{self.base}/etc/qemu.conf", qemu_conf(self.listen_addr).encode())
        mounts = [(f"{self.base}/{sub}", target) for sub, target in MOUNTS] + list(self.build.mounts)
        argv = [
            "env", f"LAB_PKI={LIBVIRT_PKI_DIR}", "unshare", "-m", "sh", "-c", _LAB_LAUNCH, "vrmig-libvirtd", self.base,
            *(f"{s}={t}" for s, t in mounts), "--", *daemon_argv(self.build),
        ]  # fmt: skip
        self.proc = self.tb.spawn(self.host, f"libvirtd-{self.host}", argv, self.registry, self.run_dir)
        try:
            self.tb.forward_socket(
                self.host, self.local_socket, f"{self.base}/sock/libvirt-sock", START_TIMEOUT_S, self.proc.alive,
                f"libvirtd {self.build.release}", "socket",
            )  # fmt: skip
        except ProcessError as err:
            raise DependencyError(f"libvirtd on {self.host}: {err}; its log: {self.log_tail()}") from err
        return self._wait_ready(connect, abort)

    def _wait_ready(self, connect: Callable[[str], Any], abort: Callable[[], bool] | None) -> Any:
        return wait_answering(self, connect, abort, lambda: True, "through its forwarded socket")

    def register_domain(self, domain: str) -> None:
        """Nothing to record here: the domain's QEMU ends with the daemon (the launch script kills
        it by its pid file when the daemon ends, however the run ends)."""

    def qemu_pid(self, domain: str) -> int | None:
        """QEMU runs on the lab host: no local PID."""
        return None

    def stop(self) -> None:
        """Stop the daemon (its launch script then kills any QEMU it left) and the forwarding, and
        fetch its QEMU log into the results directory."""
        if self.proc is None:
            return
        with contextlib.suppress(Exception):
            self.tb.fetch(self.host, f"{self.base}/log/qemu/{self._domain_log()}", self.run_dir /
                          f"libvirt-qemu-{self.host}.log")  # fmt: skip
        self.proc.stop(timeout_s=STOP_TIMEOUT_S)
        with contextlib.suppress(Exception):
            self.tb.hosts[self.host].cancel_forward(self.local_socket)
        self._copy_caps(f"{self.base}/{CAPS_SUBDIR}", self.caps_cache())

    def caps_cache(self) -> str:
        """The host's cache of the QEMU capabilities this release's daemons probed there (one XML
        file per QEMU binary, as libvirt keeps them): outside any run's directory, owned by no
        run, like the emulated lab's (migrate.labs.emulated.CAPS_CACHE_NAME)."""
        return f"{self.tb.inventory.deploy_dir}/cache/libvirt-{self.build.release}/qemu-capabilities"

    def _copy_caps(self, src: str, dst: str) -> None:
        """Copy the capability files of ``src`` that ``dst`` lacks or holds otherwise into it, each
        written whole (a cache: a failure only costs the next daemon its probe, so it is logged)."""
        try:
            listed = self.tb.run(self.host, ["ls", src])
            names = [n for n in listed.stdout.decode(errors="replace").split() if n.endswith(".xml")]
            if not names:
                return
            self.tb.run(self.host, ["mkdir", "-p", dst])
            for name in names:
                data = self.tb.read_bytes(self.host, f"{src}/{name}")
                if data and data != self.tb.read_bytes(self.host, f"{dst}/{name}"):
                    self.tb.write_atomic(self.host, f"{dst}/{name}", data)
        except Exception as err:  # a cache only
            log.info("%s: QEMU capabilities cache %s -> %s not copied: %s", self.host, src, dst, err)

    def _domain_log(self) -> str:
        res = self.tb.run(self.host, ["ls", f"{self.base}/log/qemu"])
        names = [n for n in res.stdout.decode(errors="replace").split() if n.endswith(".log")]
        if not names:
            raise FileNotFoundError("no QEMU log")
        return names[0]
