"""Run-owned resource registry.

Every namespace and process a run creates is written to the run's state file *before* it is
created.  Teardown removes exactly what the file lists; ``clean_stale()`` finds state files of
dead runs and removes what they list.  Nothing is ever matched by name pattern or process name:
besides recorded PIDs (with their start time) the file lists libvirt domains (killed through the
daemon, else through the domain's pid file, checked against the QEMU's ``-name``) and container
root directories (every process whose root is that directory, compared by device and inode).

Each run also has a *reaper* (``python -m migrate.core.registry reap``): a process outside the run's
process tree, started by :meth:`Registry.open`, that waits on a pidfd of the orchestrator and a
pipe from it.  When the orchestrator ends its run it writes ``done`` and the reaper exits; when
the orchestrator dies (SIGKILL, OOM) the reaper tears the run down from its state file at once,
as ``clean_stale()`` would at the next run.  The processes started through a daemon (libvirt's
QEMUs) or detached from their parent (a container's init, a CRIU-restored container) therefore
do not outlive the orchestrator by more than the reaper's teardown.

Detection (``process_prefixes``) is separate: every process of a run names its prefix in its
environment (``VRMIG_RUN_PREFIX``, set on every helper), in its command line (libvirt's QEMU:
``-name guest=vrmig-<prefix>``, which libvirt starts with a cleared environment) or in its root
mount (a container's rootfs copy ``vrmig-<prefix>-criu/rootfs-R1``).  Leak checks use it; cleanup
never does.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import re
import select
import shutil
import signal
import socket
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from subprocess import DEVNULL, PIPE, Popen, TimeoutExpired
from typing import Any

from migrate.core.atomic import write_json
from migrate.core.rundir import read_meta, write_meta
from migrate.core.sighold import held_signals

log = logging.getLogger(__name__)

STATE_ROOT = Path(os.environ.get("VRMIG_STATE", "/run/vrmig"))
KILL_GRACE_S = 3.0
STATE_VERSION = 2  # 2: domains, roots and the reaper (version 1 files are read as before)
RUN_ENV = "VRMIG_RUN_PREFIX"  # every helper carries its run's prefix (for leak *detection* only)
#: a run's prefix as ``testbed.new_prefix`` makes it, where names carry it (detection only)
PREFIX_RE = re.compile(r"(?<![0-9a-z])(vm[0-9a-f]{6})(?![0-9a-f])")
_MARK_RES = (re.compile(r"vrmig-(vm[0-9a-f]{6})(?![0-9a-f])"), re.compile(r"(?<![0-9a-z])(vm[0-9a-f]{6})-(?:[A-Z])"))
REAPER_DONE = b"done\n"
REAPER_EXIT_TIMEOUT_S = 10.0
REPO = Path(__file__).resolve().parents[1]


def proc_starttime(pid: int) -> int | None:
    """Start time of ``pid`` in clock ticks since boot (None if it does not exist)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # comm may contain spaces/parentheses: split after the last ')'
    return int(stat.rsplit(")", 1)[1].split()[19])


def pid_alive(pid: int, starttime: int | None) -> bool:
    """True if ``pid`` exists and is the same process (same start time) as recorded."""
    st = proc_starttime(pid)
    if st is None:
        return False
    if starttime is not None and st != starttime:
        return False
    with contextlib.suppress(OSError):
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        if state == "Z":
            return False
    return True


def _netns_exists(name: str) -> bool:
    return Path("/run/netns", name).exists()


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except OSError:
        return None


def _root_mount_source(pid: int) -> str:
    """The root (within its file system) of the mount that is ``pid``'s ``/``: for a container
    on a rootfs copy that copy's path, e.g. ``/vrmig-<prefix>-criu/rootfs-R1`` on /dev/shm."""
    text = _read(f"/proc/{pid}/mountinfo")
    if not text:
        return ""
    for line in text.decode(errors="replace").splitlines():
        parts = line.split(" ")
        if len(parts) > 4 and parts[4] == "/":
            return parts[3]
    return ""


def process_prefixes(pid: int) -> set[str]:
    """Run prefixes ``pid`` names: its ``VRMIG_RUN_PREFIX`` tag, a ``vrmig-<prefix>`` or
    ``<prefix>-<Host>`` in its command line (libvirt's QEMU, a nested Xen host), a rootfs copy of
    a run as its root (a container: its root mount; a chroot: its root link).  For leak
    *detection* only (empty if it is gone)."""
    found: set[str] = set()
    env = _read(f"/proc/{pid}/environ")
    if env:
        tag = f"{RUN_ENV}=".encode()
        found |= {v[len(tag) :].decode(errors="replace") for v in env.split(b"\0") if v.startswith(tag)}
    cmdline = _read(f"/proc/{pid}/cmdline")
    try:
        root = os.readlink(f"/proc/{pid}/root")  # a chroot in this mount namespace
    except OSError:
        root = ""
    text = " ".join(((cmdline or b"").replace(b"\0", b" ").decode(errors="replace"), root, _root_mount_source(pid)))
    for rx in _MARK_RES:
        found |= set(rx.findall(text))
    return found


def processes_of(prefixes: set[str] | None = None) -> dict[int, set[str]]:
    """Every process naming a run prefix (all prefixes, or those in ``prefixes``) -> the prefixes
    it names.  Detection only."""
    out: dict[int, set[str]] = {}
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        marks = process_prefixes(int(entry))
        if prefixes is not None:
            marks &= prefixes
        if marks:
            out[int(entry)] = marks
    return out


def proc_entry_ids(name: str) -> Iterator[tuple[int, tuple[int, int]]]:
    """(PID, (device, inode) of ``/proc/PID/<name>``) of each process whose entry can be stat-ed."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            st = os.stat(f"/proc/{entry}/{name}")
        except OSError:
            continue
        yield int(entry), (st.st_dev, st.st_ino)


def processes_with_root(dev: int, ino: int) -> list[int]:
    """PIDs whose root directory is the directory (``dev``, ``ino``): the processes of a
    container on that rootfs, wherever their parent is."""
    return [pid for pid, ident in proc_entry_ids("root") if ident == (dev, ino)]


def qemu_named(pid: int, domain: str) -> bool:
    """``pid`` is the QEMU libvirt runs for ``domain`` (``-name guest=<domain>[,...]``)."""
    args = (_read(f"/proc/{pid}/cmdline") or b"").split(b"\0")
    want = f"guest={domain}".encode()
    return any(a == want or a.startswith(want + b",") for a in args)


@dataclass
class Registry:
    """Resources owned by one run, mirrored to ``<STATE_ROOT>/<prefix>/state.json``."""

    prefix: str
    run_dir: str | None = None
    namespaces: list[str] = field(default_factory=list)
    processes: list[dict[str, Any]] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    domains: list[dict[str, Any]] = field(default_factory=list)
    roots: list[dict[str, Any]] = field(default_factory=list)
    #: helpers on lab hosts (role, PID, start time): their guards stop them when the SSH channel
    #: closes; ``clean-testbed TESTBED=`` finds any left from the guards' own state files
    remotes: list[dict[str, Any]] = field(default_factory=list)
    reaper: Popen[bytes] | None = field(default=None, repr=False, compare=False)
    #: what the teardown at the end of a ``with`` block could not remove
    teardown_problems: list[str] = field(default_factory=list, repr=False, compare=False)

    @property
    def dir(self) -> Path:
        """Private (0700) directory of this run: state file, QMP sockets."""
        return STATE_ROOT / self.prefix

    @property
    def state_file(self) -> Path:
        """The run's state file."""
        return self.dir / "state.json"

    def __enter__(self) -> Registry:
        """Open the registry (with its reaper) for a ``with`` block; a failed open removes what it
        had created before raising."""
        try:
            self.open()
        except BaseException:
            self.teardown_problems = self.teardown()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        """Tear down everything recorded; the problems are kept in ``teardown_problems``."""
        self.teardown_problems = self.teardown()

    def open(self, reaper: bool = True) -> None:
        """Create the private state directory and the initial state file, and start the run's
        reaper (see the module docstring; ``reaper=False`` for a registry that stays empty)."""
        STATE_ROOT.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(STATE_ROOT, 0o700)
        self.dir.mkdir(mode=0o700, exist_ok=False)
        os.chmod(self.dir, 0o700)
        self._save()
        if reaper:
            self._start_reaper()

    def _start_reaper(self) -> None:
        me = os.getpid()
        argv = [sys.executable, "-m", "migrate.core.registry", "reap", str(self.dir), str(me), str(proc_starttime(me))]
        env = {**os.environ, RUN_ENV: self.prefix, "PYTHONPATH": os.pathsep.join(
            p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)}  # fmt: skip
        # held until the handle is kept (an interrupt in between would leave a reaper that only
        # the orchestrator's exit ends); Python-level only, the reaper must stay stoppable
        # its warnings go to reaper.log in the private directory, which stays if it found problems
        with held_signals(mask=False), open(self.dir / "reaper.log", "ab") as err:
            self.reaper = Popen(
                argv, stdin=PIPE, stdout=DEVNULL, stderr=err, start_new_session=True, close_fds=True, env=env
            )
            self._save()

    def release_reaper(self) -> None:
        """Tell the reaper the run has ended (it exits without touching anything) and reap it."""
        r, self.reaper = self.reaper, None
        if r is None:
            return
        with contextlib.suppress(OSError):
            assert r.stdin is not None
            r.stdin.write(REAPER_DONE)
            r.stdin.close()
        try:
            r.wait(timeout=REAPER_EXIT_TIMEOUT_S)
        except TimeoutExpired:
            log.warning("reaper %d did not exit after 'done'; killing it", r.pid)
            r.kill()
            r.wait()

    def _save(self) -> None:
        r = self.reaper
        write_json(
            self.state_file,
            {
                "version": STATE_VERSION,
                "prefix": self.prefix,
                "owner_pid": os.getpid(),
                "owner_starttime": proc_starttime(os.getpid()),
                "run_dir": self.run_dir,
                "namespaces": self.namespaces,
                "processes": self.processes,
                "paths": self.paths,
                "domains": self.domains,
                "roots": self.roots,
                "remotes": self.remotes,
                "reaper": None if r is None else {"pid": r.pid, "starttime": proc_starttime(r.pid)},
            },
        )

    def add_netns(self, name: str) -> None:
        """Record a namespace that is about to be created."""
        self.namespaces.append(name)
        self._save()

    def create_netns(self, name: str) -> None:
        """Record a namespace, then create it with SIGINT/SIGTERM held until it exists.

        pyroute2 creates it in a child process and waits for it; a signal raising Interrupted in
        that wait would let teardown run first and the child mount the namespace after it (a
        leak seen when a sweep was SIGTERMed while building its testbed)."""
        from pyroute2 import netns

        self.add_netns(name)
        with held_signals():
            netns.create(name)

    def add_process(self, pid: int, what: str) -> None:
        """Record a process just started (PID and start time, so PID reuse is detected)."""
        self.processes.append({"pid": pid, "starttime": proc_starttime(pid), "what": what})
        self._save()

    def add_path(self, path: Path) -> None:
        """Record a file or directory outside the results directory that the run creates."""
        self.paths.append(str(path))
        self._save()

    def add_domain(self, name: str, uri: str, pidfile: Path) -> None:
        """Record a libvirt domain about to be created (or received): teardown destroys it by
        name through ``uri`` and, if the daemon is gone, kills the QEMU its ``pidfile`` names
        (only if that process is QEMU with ``-name guest=<name>``)."""
        self.domains.append({"name": name, "uri": uri, "pidfile": str(pidfile)})
        self._save()

    def add_remote(self, role: str, pid: int, starttime: int | None, what: str) -> None:
        """Record a helper started on a lab host (by its guard, which also records it there)."""
        self.remotes.append({"role": role, "pid": pid, "starttime": starttime, "what": what})
        self._save()

    def add_root(self, path: Path) -> None:
        """Record an existing directory that a container about to be started (or restored) will
        have as its root: teardown stops every process whose root it is, wherever its parent is."""
        st = path.stat()
        self.roots.append({"path": str(path), "dev": st.st_dev, "ino": st.st_ino})
        self._save()

    def teardown(self) -> list[str]:
        """Remove everything recorded, processes first; return a list of problems (empty if
        clean).  The reaper is released afterwards: a teardown cut short by the orchestrator's
        death is finished by it."""
        problems = teardown_state(
            {
                "namespaces": self.namespaces,
                "processes": self.processes,
                "paths": self.paths,
                "domains": self.domains,
                "roots": self.roots,
            }
        )
        if not problems:
            _remove_private_dir(self.dir)
        self.release_reaper()
        return problems


def _remove_private_dir(path: Path) -> None:
    """Remove a run's private directory: state file, QMP sockets, the FRR peers' state
    directories (migrate.experiment.peering), nothing else lives there."""
    if not path.is_dir():
        return
    for child in path.iterdir():
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child, ignore_errors=True)
            continue
        with contextlib.suppress(FileNotFoundError):
            child.unlink()
    with contextlib.suppress(OSError):
        path.rmdir()


def _signal_and_wait(alive: list[dict[str, Any]], sig: signal.Signals) -> list[dict[str, Any]]:
    """Send ``sig`` to each process of ``alive``; return those still alive after the grace time."""
    for p in alive:
        with contextlib.suppress(ProcessLookupError):
            os.kill(p["pid"], sig)
    deadline = time.monotonic() + KILL_GRACE_S
    while alive and time.monotonic() < deadline:
        alive = [p for p in alive if pid_alive(p["pid"], p.get("starttime"))]
        if alive:
            time.sleep(0.02)
    return alive


def _kill(procs: list[dict[str, Any]]) -> list[str]:
    # a process already gone when it was recorded has no start time: a PID that exists now is
    # someone else's
    alive = [p for p in procs if p.get("starttime") is not None and pid_alive(p["pid"], p["starttime"])]
    alive = _signal_and_wait(alive, signal.SIGTERM)
    for p in alive:
        log.warning("process %s (%s) ignored SIGTERM; sending SIGKILL", p["pid"], p["what"])
    alive = _signal_and_wait(alive, signal.SIGKILL)
    return [f"process {p['pid']} ({p['what']}) survived SIGKILL" for p in alive]


def _daemon_answers(uri: str) -> bool:
    """A ``qemu+unix:///system?socket=<path>`` daemon accepts connections (others: assume so)."""
    _, sep, sock = uri.partition("socket=")
    if not sep:
        return True
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(1.0)
        try:
            s.connect(sock.split("&", 1)[0])
        except OSError:
            return False
    return True


def _destroy_domains(domains: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Stop each recorded libvirt domain's QEMU by the PID its pid file names (checked: QEMU with
    ``-name guest=<name>``; SIGTERM, then SIGKILL after KILL_GRACE_S), then destroy the domain by
    name where its daemon still answers, so that libvirt forgets it.  QEMU first: libvirt's
    destroy of a running QEMU waits up to 10 s for SIGTERM before it sends SIGKILL itself, and a
    QEMU that has just started under TCG can take that long; this way the teardown is bounded by
    our own grace.  Returns the QEMU processes (already stopped) for the record."""
    out: list[dict[str, Any]] = []
    for d in domains:
        try:
            pid = int(Path(d["pidfile"]).read_text().strip())
        except (OSError, ValueError):
            pid = None
        if pid is not None and qemu_named(pid, d["name"]):
            qemu = {"pid": pid, "starttime": proc_starttime(pid), "what": f"qemu of domain {d['name']}"}
            _kill([qemu])
            out.append(qemu)
        if _daemon_answers(d["uri"]):
            with contextlib.suppress(Exception):  # libvirt.libvirtError; the binding is optional
                import libvirt

                libvirt.registerErrorHandler(lambda _c, _e: None, None)
                conn = libvirt.open(d["uri"])
                try:
                    conn.lookupByName(d["name"]).destroy()
                finally:
                    conn.close()
    return out


def _root_processes(roots: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The processes whose root is a recorded container root (container inits first)."""
    out = []
    for r in roots:
        for pid in sorted(processes_with_root(r["dev"], r["ino"])):
            out.append({"pid": pid, "starttime": proc_starttime(pid), "what": f"container on {r['path']}"})
    return out


def teardown_state(state: dict[str, Any]) -> list[str]:
    """Destroy recorded libvirt domains, kill recorded processes (by PID + start time) and the
    processes of recorded container roots, delete namespaces and paths."""
    from pyroute2 import netns

    extra = _destroy_domains(state.get("domains", [])) + _root_processes(state.get("roots", []))
    problems = _kill(extra + list(reversed(state.get("processes", []))))
    for name in reversed(state.get("namespaces", [])):
        if _netns_exists(name):
            try:
                netns.remove(name)
            except OSError as err:
                problems.append(f"namespace {name}: {err}")
    for p in reversed(state.get("paths", [])):
        path = Path(p)
        try:
            if path.is_dir() and not path.is_symlink() and (path / "cgroup.procs").exists():  # a cgroup
                path.rmdir()
            elif path.is_dir() and not path.is_symlink():
                for child in sorted(path.rglob("*"), reverse=True):
                    child.rmdir() if child.is_dir() and not child.is_symlink() else child.unlink()
                path.rmdir()
            elif path.exists() or path.is_symlink():
                path.unlink()
        except OSError as err:
            problems.append(f"path {path}: {err}")
    return problems


DEAD_RUN_WHY = "the orchestrator died (e.g. SIGKILL); resources were removed by clean-testbed"
REAPER_WHY = "the orchestrator died (e.g. SIGKILL); its reaper removed the run's resources"


def mark_dead_run(run_dir: Path, why: str = DEAD_RUN_WHY) -> None:
    """A run whose orchestrator died (SIGKILL, power loss) left meta.json at 'running': mark it
    'interrupted' (``why`` becomes its failure) so that every results directory is complete,
    failed or interrupted."""
    try:
        meta = read_meta(run_dir)
    except (OSError, ValueError) as err:
        log.warning("cannot mark %s as interrupted: %s", run_dir, err)
        return
    if meta.get("status") == "running":
        meta["status"] = "interrupted"
        meta["failure"] = why
        meta["failure_class"] = "interrupted"
        write_meta(run_dir, meta)


@contextlib.contextmanager
def _locked(state_dir: Path, wait: bool = True) -> Any:
    """Hold an exclusive lock on a run's private directory (the reaper and clean_stale() never
    tear the same run down at once); yields False if the directory is gone, or, without
    ``wait``, if another process holds the lock."""
    try:
        fd = os.open(state_dir, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        yield False
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            log.info(
                "%s is being torn down by another process (its reaper or clean-testbed): left to it", state_dir.name
            )
            yield False
            return
        yield True
    finally:
        os.close(fd)


def clean_dead_run(
    state_dir: Path, why: str = DEAD_RUN_WHY, wait: bool = True, owner_exited: bool = False
) -> tuple[bool, list[str]]:
    """Tear down the run of ``state_dir`` if its owner is dead: (cleaned, problems).  Without
    ``wait``, a run whose teardown another process holds is left to that process (a new run's
    start never waits on another run's teardown).  ``owner_exited``: the caller saw the owner
    exit (the reaper's pidfd), so /proc is not asked again."""
    with _locked(state_dir, wait) as present:
        if not present:
            return False, []
        state_file = state_dir / "state.json"
        try:
            state = json.loads(state_file.read_text())
        except FileNotFoundError:
            return False, []  # torn down meanwhile (by the reaper or the owner)
        except (OSError, json.JSONDecodeError) as err:
            log.warning("unreadable state file %s: %s (left alone)", state_file, err)
            return False, []
        if not owner_exited and pid_alive(state.get("owner_pid", -1), state.get("owner_starttime")):
            return False, []
        problems = teardown_state(state)
        if state.get("run_dir"):
            mark_dead_run(Path(state["run_dir"]), why)
        for p in problems:
            log.warning("%s: %s", state.get("prefix"), p)
        if not problems:
            _remove_private_dir(state_dir)
        return True, problems


def clean_stale_before_a_run(logger: logging.Logger) -> None:
    """:func:`clean_stale`, each run cleaned logged as a warning: what every run-like command
    does before it creates anything."""
    for prefix in clean_stale():
        logger.warning("removed leftovers of crashed run %s", prefix)


def clean_stale(only: set[str] | None = None) -> list[str]:
    """Tear down resources of every run whose owner process is dead (only the runs whose prefix
    is in ``only``, if given); return the prefixes cleaned.  A run another process is tearing
    down (its reaper) is skipped, not waited for."""
    cleaned: list[str] = []
    if not STATE_ROOT.is_dir():
        return cleaned
    for state_file in sorted(STATE_ROOT.glob("*/state.json")):
        prefix = state_file.parent.name
        if only is not None and prefix not in only:
            continue
        done, _problems = clean_dead_run(state_file.parent, wait=False)
        if done:
            cleaned.append(prefix)
    return cleaned


def reap(state_dir: Path, owner_pid: int, owner_starttime: int | None) -> int:
    """The reaper's body: wait until the owner writes ``done`` (exit) or dies (tear its run down
    from ``state_dir``, as clean_stale() would).  Returns the exit status."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C is the orchestrator's to handle
    try:
        pidfd: int | None = os.pidfd_open(owner_pid)
    except ProcessLookupError:
        pidfd = None
    if pidfd is not None and proc_starttime(owner_pid) != owner_starttime:
        os.close(pidfd)  # the PID belongs to another process: the owner is gone
        pidfd = None
    stdin = sys.stdin.fileno()
    watch = [stdin] if pidfd is None else [stdin, pidfd]
    got = b""
    while pidfd is not None:
        ready, _, _ = select.select(watch, [], [])
        if pidfd in ready:
            break  # the owner exited
        data = os.read(stdin, 64)
        if not data:
            watch = [pidfd]  # the pipe closed (the owner is exiting): wait for its exit
            continue
        got += data
        if REAPER_DONE in got:
            return 0
    # the pidfd said the owner exited; the start-time check above said the PID was the owner's
    _cleaned, problems = clean_dead_run(state_dir, REAPER_WHY, owner_exited=pidfd is not None)
    return 1 if problems else 0


def main(argv: list[str] | None = None) -> int:
    """``python -m migrate.core.registry reap <state dir> <owner pid> <owner start time>``."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 4 or args[0] != "reap":
        print("usage: python -m migrate.core.registry reap STATE_DIR OWNER_PID OWNER_STARTTIME", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.WARNING, format="vrmig reaper: %(message)s", stream=sys.stderr)
    return reap(Path(args[1]), int(args[2]), None if args[3] == "None" else int(args[3]))


if __name__ == "__main__":
    sys.exit(main())
