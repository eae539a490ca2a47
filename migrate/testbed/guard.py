"""The remote side of a process the orchestrator starts on a lab host over SSH.

A process started over SSH keeps running when the SSH client (or its connection) dies: sshd
does not signal it.  So every remote helper runs under this guard, a short standard-library
Python program sent as the argument of ``python3 -c`` (nothing to deploy, no protocol of its own):

1. it starts the helper in a new session with stdin from /dev/null, its stdout and stderr those of
   the SSH channel (so the orchestrator's files receive them as they are written);
2. it records the helper as ``<state_dir>/<pid>.json`` (PID, start time in clock ticks, argv)
   before anything waits on it, and prints ``vrmig-guard: pid=<pid> start=<ticks>`` on stderr;
3. it waits for the helper to exit *or* for its own stdin to reach end of file: the orchestrator
   holds the other end, so EOF means the SSH client, the connection or the orchestrator is gone.
   On EOF (or SIGHUP/SIGTERM to the guard) it sends SIGTERM to the helper's process group, then
   SIGKILL after a grace period;
4. on the helper's exit it prints ``vrmig-guard: exit=<status> cpu_s=<user+system>`` (from the
   helper's rusage, which only its parent can read), removes the state file and exits with the
   helper's status (128+signal for a signal).

``clean-testbed`` reads the state files a crash left and stops those PIDs after checking their
start time, exactly as the local registry does.  A guard run by the standard-library
``python3`` of a Debian host needs no package beyond the interpreter.
"""

from __future__ import annotations

GRACE_S = 3.0
MARK = "vrmig-guard:"

#: the guard program (argv: state_dir what -- helper argv...); kept to the standard library
SOURCE = r"""
import json, os, select, signal, sys, time
state_dir, what = sys.argv[1], sys.argv[2]
argv = sys.argv[4:]
os.makedirs(os.path.dirname(state_dir.rstrip("/")) or "/", mode=0o700, exist_ok=True)
os.makedirs(state_dir, mode=0o700, exist_ok=True)
pid = os.fork()
if pid == 0:
    os.setsid()
    fd = os.open("/dev/null", os.O_RDONLY)
    os.dup2(fd, 0)
    try:
        os.execvp(argv[0], argv)
    except OSError as e:
        os.write(2, ("vrmig-guard: cannot run %s: %s\n" % (argv[0], e)).encode())
        os._exit(127)
with open("/proc/%d/stat" % pid) as f:
    start = int(f.read().rsplit(")", 1)[1].split()[19])
path = os.path.join(state_dir, "%d.json" % pid)
tmp = path + ".tmp"
with open(tmp, "w") as f:
    json.dump({"pid": pid, "start": start, "what": what, "argv": argv, "guard": os.getpid()}, f)
os.rename(tmp, path)
sys.stderr.write("vrmig-guard: pid=%d start=%d\n" % (pid, start))
sys.stderr.flush()
stop = []
signal.signal(signal.SIGHUP, lambda *a: stop.append(1))
signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
signal.signal(signal.SIGINT, signal.SIG_IGN)
pfd = os.pidfd_open(pid)
watch = [0, pfd]
deadline = None
while True:
    try:
        ready, _, _ = select.select(watch, [], [], 0.5 if deadline else None)
    except InterruptedError:
        ready = []
    if pfd in ready:
        break
    if 0 in ready and not os.read(0, 4096):
        stop.append(1)
        watch = [pfd]
    if stop and deadline is None:
        try:
            os.killpg(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + %(grace)s
    elif deadline is not None and time.monotonic() > deadline:
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
_, status, ru = os.wait4(pid, 0)
code = os.waitstatus_to_exitcode(status)
try:
    os.unlink(path)
except OSError:
    pass
sys.stderr.write("vrmig-guard: exit=%d cpu_s=%.3f\n" % (code, ru.ru_utime + ru.ru_stime))
sys.stderr.flush()
sys.exit(code if code >= 0 else 128 - code)
""".replace("%(grace)s", repr(GRACE_S))


def guard_argv(state_dir: str, what: str, argv: list[str], python: str = "python3") -> list[str]:
    """Remote argv that runs ``argv`` under the guard, recorded in ``state_dir``."""
    if not argv:
        raise ValueError("empty argv")
    return [python, "-c", SOURCE, state_dir, what, "--", *argv]


def parse_started(line: str) -> tuple[int, int] | None:
    """(pid, start ticks) from the guard's first line, None if ``line`` is not it."""
    if not line.startswith(MARK + " pid="):
        return None
    fields = dict(f.split("=", 1) for f in line[len(MARK) :].split())
    return int(fields["pid"]), int(fields["start"])


def parse_exit(line: str) -> tuple[int, float] | None:
    """(exit code, CPU seconds of the helper) from the guard's last line, None if not it."""
    if not line.startswith(MARK + " exit="):
        return None
    fields = dict(f.split("=", 1) for f in line[len(MARK) :].split())
    return int(fields["exit"]), float(fields["cpu_s"])
