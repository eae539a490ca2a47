"""A lab of hosts the suite did not build, reached only over SSH (``TESTBED=lab.toml``).

``LabBed`` offers the run the same methods as the embedded :class:`~migrate.testbed.builder.Testbed`
but never enters a namespace of this machine: every helper runs on its role's host under the
guard (:mod:`migrate.testbed.guard`) through that host's multiplexed SSH connection, every file a
helper writes lands in the host's run directory (``<deploy_dir>/runs/<prefix>/``) and is fetched
into the results directory at the end, and each host runs its own counter sampler.  The hosts'
clock offsets against this machine are measured at the start and the end of the run; the
per-host counter files are merged onto the orchestrator's clock with them
(:func:`merge_counters`), and the merged figures carry the offsets' uncertainty."""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import secrets
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path
from typing import Any

from migrate.core.procs import Proc, ProcessError
from migrate.core.registry import Registry
from migrate.core.rundir import COUNTERS_TSV, IRTT_JSON_GZ, SINK_STATE_JSON
from migrate.testbed import topology as topo
from migrate.testbed.bridgeport import LabPortCut, LabRxPackets
from migrate.testbed.builder import Testbed, snmp_udp_in_datagrams
from migrate.testbed.guard import guard_argv, parse_exit, parse_started
from migrate.testbed.inventory import ROLES, Inventory

log = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parents[2]
STARTED_TIMEOUT_S = 30.0
POLL_S = 0.05
COUNTERS_HEADER = "t_ns late_ns netns ifname rx_packets rx_bytes tx_packets tx_bytes"


#: creates a run's directory on a host: argv run_dir owner_json
PREPARE_SOURCE = r"""
import os, sys
d = sys.argv[1]
os.makedirs(os.path.join(d, "guard"), mode=0o700, exist_ok=True)
os.chmod(d, 0o700)
with open(os.path.join(d, "owner.json"), "w") as f:
    f.write(sys.argv[2])
"""

#: lists the runs on a host whose owner is this machine: argv deploy_dir boot_id; prints JSON
#: [{"dir", "owner", "procs": [guard state records]}]
LIST_SOURCE = r"""
import json, os, sys
root = os.path.join(sys.argv[1], "runs")
out = []
for name in sorted(os.listdir(root)) if os.path.isdir(root) else []:
    d = os.path.join(root, name)
    try:
        with open(os.path.join(d, "owner.json")) as f:
            owner = json.load(f)
    except (OSError, ValueError):
        continue
    if owner.get("boot_id") != sys.argv[2]:
        continue
    procs = []
    g = os.path.join(d, "guard")
    for p in sorted(os.listdir(g)) if os.path.isdir(g) else []:
        try:
            with open(os.path.join(g, p)) as f:
                procs.append(json.load(f))
        except (OSError, ValueError):
            pass
    out.append({"dir": d, "owner": owner, "procs": procs})
print(json.dumps(out))
"""

#: stops recorded processes (PID + start time checked) and removes a run's directory:
#: argv run_dir procs_json; prints what it did
REMOVE_SOURCE = r"""
import json, os, shutil, signal, sys, time
def start(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return int(f.read().rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None
done = []
procs = json.loads(sys.argv[2])
for sig in (signal.SIGTERM, signal.SIGKILL):
    live = [p for p in procs if start(p["pid"]) == p["start"]]
    for p in live:
        try:
            os.killpg(p["pid"], sig)
        except OSError:
            pass
        try:
            os.kill(p["pid"], sig)
        except OSError:
            pass
        done.append("%s %d %s" % (p.get("what"), p["pid"], signal.Signals(sig).name))
    deadline = time.monotonic() + 3
    while any(start(p["pid"]) == p["start"] for p in live) and time.monotonic() < deadline:
        time.sleep(0.05)
shutil.rmtree(sys.argv[1], ignore_errors=True)
print(json.dumps({"stopped": done, "removed": not os.path.exists(sys.argv[1])}))
"""


def boot_id() -> str:
    """This machine's boot id (a PID is only meaningful within one boot)."""
    return Path("/proc/sys/kernel/random/boot_id").read_text().strip()


def owner_record() -> dict[str, Any]:
    """Who owns a run directory on a lab host: this machine's boot id, the orchestrator's PID
    and start time."""
    from migrate.core.registry import proc_starttime

    me = os.getpid()
    return {"boot_id": boot_id(), "pid": me, "starttime": proc_starttime(me), "host": socket.gethostname()}


def clean_lab(hosts: dict[str, Any], deploy_dir: str) -> list[str]:
    """``clean-testbed TESTBED=``: on every host, the run directories of this machine whose
    orchestrator is dead: stop the processes their guards recorded (PID and start time checked)
    and the guards, remove the directories.  Returns one line per thing done."""
    from migrate.core.registry import pid_alive

    done: list[str] = []
    for role, host in hosts.items():
        runs = json.loads(host.run(["python3", "-c", LIST_SOURCE, deploy_dir, boot_id()]).stdout or b"[]")
        for run in runs:
            owner = run["owner"]
            if pid_alive(int(owner["pid"]), owner.get("starttime")):
                continue  # a live run of this machine
            procs = [{"pid": p["pid"], "start": p["start"], "what": p.get("what")} for p in run["procs"]]
            rep = json.loads(host.run(["python3", "-c", REMOVE_SOURCE, run["dir"], json.dumps(procs)]).stdout)
            done += [f"{role}: stopped {s}" for s in rep["stopped"]]
            done.append(f"{role}: removed {run['dir']}" if rep["removed"] else f"{role}: could not remove {run['dir']}")
    return done


class RemoteProc(Proc):
    """A helper on a lab host: the local ``ssh`` client (registered by PID like any child, and
    killed with the orchestrator) runs the guard, which runs the helper and stops it when the
    channel closes.  The helper's stdout and stderr arrive in the results directory."""

    def __init__(
        self,
        what: str,
        argv: list[str],
        registry: Registry,
        out_dir: Path,
        host: Any,
        state_dir: str,
        stdout_name: str | None = None,
    ) -> None:
        super().__init__(what, host.ssh_argv(guard_argv(state_dir, what, argv)), registry, out_dir, None, stdout_name)
        self.host = host
        self.remote_argv = list(argv)
        self.remote_pid: int | None = None
        self.remote_start: int | None = None
        self.stdin_pipe = True  # the guard's lifeline: EOF stops the helper

    @property
    def host_pid(self) -> int:
        """The helper's PID on its host (known once :meth:`started` returned)."""
        if self.remote_pid is None:
            raise ProcessError(f"{self.what}: its PID on {self.host.role} is not known before started()")
        return self.remote_pid

    def started(self, timeout_s: float = STARTED_TIMEOUT_S) -> RemoteProc:
        """Wait for the guard's first line; record the helper's (host, PID, start time)."""
        self.wait_for("vrmig-guard: pid=", timeout_s)
        for line in self.stderr_path.read_text(errors="replace").splitlines():
            got = parse_started(line)
            if got:
                self.remote_pid, self.remote_start = got
                break
        if self.remote_pid is None:
            raise ProcessError(f"{self.what}: the guard on {self.host.role} did not report its helper's PID")
        self.registry.add_remote(self.host.role, self.remote_pid, self.remote_start, self.what)
        return self

    def returncode(self) -> int | None:
        """The helper's exit status as subprocess gives it (a signal: its negative number)."""
        rc = super().returncode()
        return -(rc - 128) if rc is not None and rc > 128 else rc

    def exit_report(self) -> tuple[int, float] | None:
        """(exit code, CPU seconds) from the guard's last line, None if it did not write it."""
        try:
            lines = self.stderr_path.read_text(errors="replace").splitlines()
        except OSError:
            return None
        for line in reversed(lines):
            got = parse_exit(line)
            if got:
                return got
        return None

    def send_signal(self, sig: int) -> None:
        """Send ``sig`` to the helper on its host (by the PID its guard reported)."""
        if self.remote_pid is not None and self.alive():
            self.host.run(["kill", f"-{int(sig)}", str(self.remote_pid)], check=False, timeout_s=10.0)

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 10.0) -> int | None:
        """Signal the helper, wait for its guard to exit; if it does not, close the guard's stdin
        (it then kills the helper's group) and, last, kill the local ssh client."""
        if self.popen is None:
            return None
        if self.popen.poll() is None:
            self.send_signal(sig)
            try:
                self.popen.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                log.warning("%s on %s ignored signal %d; closing its channel", self.what, self.host.role, sig)
                self._close_stdin()
                try:
                    self.popen.wait(timeout=5.0)
                except subprocess.TimeoutExpired:
                    self.popen.kill()
                    self.popen.wait()
        self._close_stdin()
        return self.returncode()

    def _close_stdin(self) -> None:
        if self.popen is not None and self.popen.stdin is not None and not self.popen.stdin.closed:
            try:
                self.popen.stdin.close()
            except OSError:
                pass

    def stop_measured(self, sig: int, timeout_s: float) -> float | None:
        """Stop the helper and return its CPU seconds as its guard measured them (None if the
        guard did not report them)."""
        self.stop(sig, timeout_s)
        rep = self.exit_report()
        return rep[1] if rep else None


class LabBed(Testbed):
    """The testbed of an inventory, its hosts opened (``hosts``: role -> SSH or local host)."""

    remote = True

    def __init__(self, prefix: str, inv: Inventory, hosts: dict[str, Any]) -> None:
        super().__init__(prefix)
        self.inv = inv
        self.hosts = hosts
        self.clock: dict[str, dict[str, Any]] = {}
        self._clock_thread: threading.Thread | None = None
        self._clock_error: Exception | None = None

    @property
    def inventory(self) -> Inventory:
        """The lab's inventory."""
        return self.inv

    def ns(self, role: str) -> str:
        """A lab has no namespaces of this machine: the name is a label for the role only."""
        return f"{self.prefix}-{role}"

    def describe(self) -> dict[str, Any]:
        """meta.json ``testbed`` of a lab run (:func:`lab_testbed_meta`)."""
        return lab_testbed_meta(self)

    def build(self, registry: Registry) -> None:
        """A lab's hosts, links and bridges exist already: nothing to build."""

    def finish(self, meta: dict[str, Any], run_dir: Path) -> None:
        """The hosts' clocks measured again, and what every host kept fetched: meta.json
        ``clock.hosts`` and ``lab``."""
        self.measure_clocks("end")
        meta["clock"]["hosts"] = self.clock
        meta["lab"] = self.collect(run_dir)

    def port_cut(self, role: str, ifname: str, registry: Registry) -> LabPortCut:  # type: ignore[override]
        """Cut and restore bridge port ``ifname`` on ``role``'s host (one SSH session)."""
        return LabPortCut(self, role, ifname, registry)

    def rx_counter(self, role: str, ifname: str) -> LabRxPackets:  # type: ignore[override]
        """``ifname``'s receive packet counter on ``role``'s host (read over SSH)."""
        return LabRxPackets(self, role, ifname)

    def run_dir(self) -> str:
        """The run's directory on every host."""
        return f"{self.inv.deploy_dir}/runs/{self.prefix}"

    def each(self, fn: Callable[[str, Any], Any]) -> dict[str, Any]:
        """``fn(role, host)`` on every host at once (threads: each waits on its own SSH round
        trips); their results by role.  The first exception is raised after all have ended."""
        with ThreadPoolExecutor(max_workers=len(self.hosts)) as pool:
            futs = {r: pool.submit(fn, r, h) for r, h in self.hosts.items()}
        return {r: f.result() for r, f in futs.items()}

    def prepare(self) -> None:
        """Create the run's directory (mode 0700) on every host with ``owner.json``: this
        machine's boot id and the orchestrator's PID and start time, by which ``clean-testbed
        TESTBED=`` recognises a run of this machine whose orchestrator is dead."""
        owner = json.dumps(owner_record())
        self.each(lambda r, h: h.run(["python3", "-c", PREPARE_SOURCE, self.run_dir(), owner]))

    def remove(self) -> list[str]:
        """Remove the run's directory from every host; return the problems."""

        def rm(role: str, host: Any) -> str | None:
            try:
                res = host.run(["rm", "-rf", "--one-file-system", self.run_dir()], check=False, timeout_s=30.0)
            except Exception as err:  # a host lost mid-teardown is reported, not raised
                return f"{role}: {err}"
            if res.returncode != 0:
                return f"{role}: rm {self.run_dir()}: {res.stderr.decode(errors='replace').strip()}"
            return None

        return [p for p in self.each(rm).values() if p]

    def proc_kind(self, role: str) -> Callable[..., Proc]:
        """A helper on ``role``'s host under the guard (:class:`RemoteProc`)."""
        return functools.partial(RemoteProc, host=self.hosts[role], state_dir=f"{self.run_dir()}/guard")

    def out_path(self, role: str, run_dir: Path, name: str, unique: str | None = None) -> str:
        """The file ``unique`` (if given, else ``name``) in the run's one directory on ``role``'s
        host; :meth:`fetch` brings it into ``run_dir``."""
        return f"{self.run_dir()}/{unique or name}"

    def helper(self, role: str, argv0: str) -> str:
        """The suite's own helpers are installed in ``<deploy_dir>/bin`` by hosts-setup; other
        programs (irtt, qemu) come from the host's PATH."""
        p = Path(argv0)
        if p.is_absolute() and REPO in p.parents:
            return f"{self.inv.deploy_dir}/bin/{p.name}"
        return argv0

    def counter(self, role: str, ifname: str, name: str) -> int:
        """One of the interface's statistics (``rx_packets``, ``tx_bytes``, ...), read on its host."""
        out = self.hosts[role].run(["cat", f"/sys/class/net/{ifname}/statistics/{name}"]).stdout
        return int(out.decode().strip())

    def rx_packets(self, role: str, ifname: str) -> int:
        """The interface's rx packet counter, read on its host."""
        return self.counter(role, ifname, "rx_packets")

    def run(self, role: str, argv: list[str], timeout_s: float = 30.0) -> subprocess.CompletedProcess[bytes]:
        """Run a short command on ``role``'s host over its SSH connection, output captured, never
        raising on its exit status."""
        return self.hosts[role].run(argv, timeout_s=timeout_s, check=False)

    def fetch(self, role: str, path: str, local: Path) -> None:
        """Copy the file ``path`` on ``role``'s host to ``local`` on this machine."""
        self.hosts[role].fetch(path, local)

    def offsets(self, roles: list[str]) -> dict[str, dict[str, int]]:
        """Each role's clock offset against this machine now (round-trip bounded exchanges over
        the host's open clock session, all hosts at once): ``{role: {offset_ns, uncertainty_ns}}``."""

        def measure(role: str) -> dict[str, int]:
            s = self.hosts[role].clock()
            return {"offset_ns": int(s.offset_ns), "uncertainty_ns": int(s.uncertainty_ns)}

        with ThreadPoolExecutor(max_workers=len(roles)) as pool:
            futs = {r: pool.submit(measure, r) for r in roles}
        return {r: f.result() for r, f in futs.items()}

    def read_bytes(self, role: str, path: str) -> bytes | None:
        """A file on ``role``'s host (None if it does not exist yet)."""
        res = self.hosts[role].run(["cat", path], check=False)
        return res.stdout if res.returncode == 0 else None

    def write_atomic(self, role: str, path: str, data: bytes) -> None:
        """Write ``path`` on ``role``'s host so that a reader never sees it half-written (a
        temporary name of its own beside it, then renamed: two writers never share one)."""
        tmp = f"{path}.{secrets.token_hex(4)}.tmp"
        self.hosts[role].put(data, tmp)
        self.hosts[role].run(["mv", "-f", tmp, path])

    def udp_in_datagrams(self, role: str, proc: Proc) -> int | None:
        """``Udp: InDatagrams`` of the network namespace of a helper on ``role``'s host."""
        pid = getattr(proc, "remote_pid", None)
        if pid is None:
            return None
        res = self.hosts[role].run(["cat", f"/proc/{pid}/net/snmp"], check=False)
        if res.returncode != 0:
            return None
        return snmp_udp_in_datagrams(res.stdout.decode())

    #: each host has its own disks: a router's disk moves with it (migrate.drivers.storage_mirror)
    shares_storage = False

    def place_image(self, role: str, local: Path, sha256: str) -> str:
        """The disk image ``local`` on ``role``'s host: ``<deploy_dir>/images/by-sha256/<sha256>-<name>``,
        sent over the host's SSH connection unless a file of that name is there already (it is
        written beside and renamed, so a file under that name is whole)."""
        remote = f"{self.inv.deploy_dir}/images/by-sha256/{sha256}-{local.name}"
        host = self.hosts[role]
        if host.run(["test", "-f", remote], check=False).returncode != 0:
            host.run(["mkdir", "-p", remote.rsplit("/", 1)[0]])
            host.put(local.read_bytes(), remote)
        return remote

    def router_image(self, profile: str, kernel: Path, initrd: Path) -> tuple[Path, Path]:
        """The copies ``make hosts-setup`` put on the hypervisor hosts."""
        images = f"{self.inv.deploy_dir}/images/{profile}"
        return Path(f"{images}/{kernel.name}"), Path(f"{images}/{initrd.name}")

    def console_output(self, role: str, local: Path) -> tuple[Path, str | None]:
        """QEMU's stdout, which the SSH channel brings into ``local`` as it is written."""
        return Path("/dev/stdout"), local.name

    def follow_file(self, role: str, path: str, registry: Registry, run_dir: Path, name: str) -> Proc | None:
        """``tail -F`` of ``path`` on the host under the guard (it ends with the run), its output
        in ``run_dir``/``name``."""
        return self.spawn(role, f"console-tail-{role}", ["tail", "-n", "+1", "-F", path], registry, run_dir,
                          stdout_name=name)  # fmt: skip

    def forward_qmp(self, role: str, local: Path, remote: str, timeout_s: float, alive: Callable[[], bool]) -> None:
        """Once QEMU on ``role`` has created its QMP socket ``remote``, forward ``local`` to it
        through the host's SSH connection."""
        self.forward_socket(role, local, remote, timeout_s, alive, "QEMU", "QMP socket")

    def forward_socket(
        self,
        role: str,
        local: Path,
        remote: str,
        timeout_s: float,
        alive: Callable[[], bool],
        owner: str,
        what: str = "socket",
    ) -> None:
        """Once ``owner`` (a process on ``role``, alive while ``alive()``) has created the Unix
        socket ``remote``, forward ``local`` to it through the host's SSH connection."""
        deadline = time.monotonic() + timeout_s
        while self.hosts[role].run(["test", "-S", remote], check=False).returncode != 0:
            if not alive():
                raise ProcessError(f"{owner} on {role} exited before its {what} {remote} appeared")
            if time.monotonic() > deadline:
                raise ProcessError(f"{what} {remote} on {role} did not appear within {timeout_s:.0f} s")
            time.sleep(POLL_S)
        self.hosts[role].forward_unix(local, remote)

    def exists(self, role: str, path: str) -> bool:
        """A regular file ``path`` exists on ``role``'s host."""
        return self.hosts[role].run(["test", "-f", path], check=False).returncode == 0

    def sampler_plan(self) -> list[tuple[str, dict[str, list[str]], str]]:
        """One sampler on every host, reading that host's own interfaces."""
        return [(r, {".": self.inv.host(r).interfaces()}, f"counters-{r}.tsv") for r in ROLES]

    def measure_clocks(self, when: str, background: bool = False) -> None:
        """Each host's clock offset against this machine (round-trip bounded) and its
        synchronisation state, kept under ``when`` ("start"/"end").  ``background``: in a
        thread (the start measurement overlaps the router's boot); the next call waits for it."""
        if self._clock_thread is not None:
            self._clock_thread.join()
            self._clock_thread = None
            if self._clock_error is not None:
                raise self._clock_error
        if background:

            def target() -> None:
                try:
                    self._measure_clocks(when)
                except Exception as err:  # re-raised by the next call, in the run's thread
                    self._clock_error = err

            self._clock_thread = threading.Thread(target=target, name=f"clocks-{when}", daemon=True)
            self._clock_thread.start()
            return
        self._measure_clocks(when)

    def clocks_from_check(self, check: dict[str, Any]) -> None:
        """Take the clock offsets and synchronisation states the preflight check measured
        moments before the run as its start measurement (one round of exchanges fewer)."""
        for row in check["hosts"]:
            if row.get("clock") is not None:
                self.clock.setdefault(row["role"], {})["start"] = dict(row["clock"])
            if row.get("sync") is not None:
                self.clock.setdefault(row["role"], {})["sync"] = dict(row["sync"])

    def settle(self) -> None:
        """Wait for a background clock measurement (before the connections close)."""
        if self._clock_thread is not None:
            self._clock_thread.join()

    def _measure_clocks(self, when: str) -> None:
        """One measurement of every host at once."""

        def measure(role: str, host: Any) -> None:
            entry = self.clock.setdefault(role, {})
            sample = host.clock()
            entry[when] = asdict(sample) if hasattr(sample, "__dataclass_fields__") else dict(sample)
            if "sync" not in entry:
                entry["sync"] = host.sync_state()

        for role in self.hosts:
            self.clock.setdefault(role, {})
        self.each(measure)

    def offset_ns(self, role: str) -> tuple[int, int]:
        """(offset, uncertainty) in ns of ``role``'s clock: the mean of the start and end
        measurements, uncertain by the larger of their uncertainties plus half their
        difference (the drift during the run)."""
        e = self.clock.get(role, {})
        ms = [e[w] for w in ("start", "end") if w in e]
        if not ms:
            raise ValueError(f"no clock measurement of {role}")
        offs = [int(m["offset_ns"]) for m in ms]
        unc = max(int(m["uncertainty_ns"]) for m in ms) + (max(offs) - min(offs)) // 2
        return sum(offs) // len(offs), unc

    def clock_offsets(self, roles: Sequence[str]) -> dict[str, int]:
        """The measured offsets (ns, host minus orchestrator) of ``roles``; a role whose clock
        was not measured is left out, and its stamps are compared as if on one clock."""
        out = {}
        for role in roles:
            with contextlib.suppress(ValueError):
                out[role] = int(self.offset_ns(role)[0])
        return out

    def collect(self, run_dir: Path) -> dict[str, Any]:
        """Fetch what the helpers wrote on the hosts into ``run_dir`` and merge the per-host
        counters onto this machine's clock (``counters.tsv``; the raw files stay beside it)."""
        wanted: dict[str, list[str]] = {r: [out] for r, _, out in self.sampler_plan()}
        wanted["C"].append(IRTT_JSON_GZ)
        wanted["B"].append(SINK_STATE_JSON)

        def fetch(role: str, host: Any) -> dict[str, str]:
            got = {}
            for name in wanted.get(role, []):
                try:
                    host.fetch(f"{self.run_dir()}/{name}", run_dir / name)
                    got[name] = role
                except Exception as err:  # recorded; the analysis says which figure is absent
                    got[name] = f"absent: {err}"
            return got

        fetched: dict[str, Any] = {}
        for got in self.each(fetch).values():
            fetched.update(got)
        parts = [(r, run_dir / out) for r, _, out in self.sampler_plan() if fetched.get(out) == r]
        offsets = {r: self.offset_ns(r) for r, _ in parts}
        merge_counters(parts, offsets, self.prefix, run_dir / COUNTERS_TSV, canonical_ifnames(self.inv))
        return {"fetched": fetched, "offsets_ns": {r: {"offset": o, "uncertainty": u} for r, (o, u) in offsets.items()}}


#: vrsampler's closing-line numbers, and how the hosts' values combine into the merged file's
SUMMED_TAIL = ("cpu_user_s", "cpu_sys_s", "cpu_sched_ns", "rounds", "missed", "samples", "read_errors")
MAXED_TAIL = ("wall_s", "max_late_ns", "max_read_ns")


def merged_tail(footers: dict[str, str | None]) -> str | None:
    """One closing line for the merged counters.tsv from each host's (``role -> line``, None when
    that host's sampler wrote none): counts and CPU seconds summed over the hosts, maxima and
    wall time maximal, the read methods listed.  None if any host's line is missing: a missed
    round on that host would be unknown, so the sum is not written (the analysis then reports
    missed rounds and read errors as unknown, not 0).  Each host's own line stays in its fetched
    sampler file."""
    if not footers or any(f is None for f in footers.values()):
        return None
    from probes.sampler import parse_footer

    vals: dict[str, list[str]] = {}
    for line in footers.values():
        for k, v in parse_footer([(line or "").encode()]).items():
            vals.setdefault(k, []).append(v)
    out = []
    for k, vs in vals.items():
        if k in SUMMED_TAIL:
            total = sum(float(v) for v in vs)
            out.append(f"{k}={total:.6f}" if k.endswith("_s") else f"{k}={int(total)}")
        elif k in MAXED_TAIL:
            out.append(f"{k}={max(vs, key=float)}")
        else:
            out.append(f"{k}={','.join(dict.fromkeys(vs))}")
    return f"# hosts={len(footers)} " + " ".join(out)


def canonical_ifnames(inv: Inventory) -> dict[str, dict[str, str]]:
    """Per role, the host's interface names -> the embedded testbed's names for the same ports
    (an end host's ``eth0``; a hypervisor host's ``tapL``/``tapR``, ``upL``/``upR``, ``mig0``),
    which the analysis reads (B eth0's packets, R1 mig0's bytes), whatever a lab calls them."""
    out: dict[str, dict[str, str]] = {}
    for role in ROLES:
        h = inv.host(role)
        names: dict[str, str] = {}
        if h.interface:
            names[h.interface] = topo.HOST_IF
        for seg in topo.SEGMENTS:
            if seg in h.taps:
                names[h.taps[seg]] = f"tap{seg}"
            if seg in h.uplinks:
                names[h.uplinks[seg]] = f"up{seg}"
        if h.migration_if:
            names[h.migration_if] = topo.MIGRATION_IF
        out[role] = names
    return out


def merge_counters(
    parts: list[tuple[str, Path]],
    offsets: dict[str, tuple[int, int]],
    prefix: str,
    out: Path,
    ifnames: dict[str, dict[str, str]] | None = None,
) -> None:
    """Merge per-host vrsampler files into one counters.tsv on the orchestrator's clock: each
    sample's time minus its host's offset, its namespace column the role's label
    (``<prefix>-<role>``, as on the embedded testbed), its interface the embedded testbed's name
    for that port (``ifnames``: role -> host's name -> that name; see :func:`canonical_ifnames`),
    rows in time order.  The header records every host's offset and uncertainty and every
    renamed interface; the closing line is :func:`merged_tail` of the hosts'."""
    rows: list[tuple[int, str]] = []
    footers: dict[str, str | None] = {}
    period = None
    for role, path in parts:
        off = offsets[role][0]
        footers[role] = None
        for line in path.read_text().splitlines():
            if line.startswith("# vrmig-sampler"):
                period = period or line.split("period_ns=", 1)[1].split()[0]
                continue
            if line.startswith("#"):
                if "cpu_user_s=" in line:
                    footers[role] = line
                continue
            f = line.split(" ")
            if len(f) < 8 or f[0] == "t_ns":
                continue
            t = int(f[0]) - off
            f[0], f[2] = str(t), f"{prefix}-{role}"
            f[3] = (ifnames or {}).get(role, {}).get(f[3], f[3])
            rows.append((t, " ".join(f)))
    rows.sort(key=lambda r: r[0])
    offs = " ".join(f"{r}:{o}+-{u}" for r, (o, u) in offsets.items())
    head = f"# vrmig-sampler 1 clock=CLOCK_REALTIME period_ns={period or 10_000_000}\n{COUNTERS_HEADER}\n"
    head += f"# merged per-host samplers onto the orchestrator's clock (offset ns +- uncertainty): {offs}\n"
    renamed = [f"{r}:{a}={b}" for r, m in sorted((ifnames or {}).items()) for a, b in sorted(m.items()) if a != b]
    if renamed:
        head += f"# interfaces under the embedded testbed's names (role:host name=name): {' '.join(renamed)}\n"
    tail = merged_tail(footers)
    out.write_text(head + "".join(r[1] + "\n" for r in rows) + (tail + "\n" if tail else ""))


def lab_testbed_meta(bed: LabBed) -> dict[str, Any]:
    """meta.json ``testbed`` of a lab run."""
    return {
        "prefix": bed.prefix,
        **bed.inv.describe(),
        "namespaces": {r: bed.ns(r) for r in ROLES},
        "router_ports": {s: asdict(p) for s, p in bed.inv.router.items()},
        "segments": list(topo.SEGMENTS),
    }
