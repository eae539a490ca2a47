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

import logging
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from migrate.core.procs import Proc, ProcessError
from migrate.core.registry import Registry
from migrate.testbed import topology as topo
from migrate.testbed.builder import Testbed
from migrate.testbed.guard import guard_argv, parse_exit, parse_started
from migrate.testbed.inventory import ROLES, Inventory

log = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parents[2]
STARTED_TIMEOUT_S = 30.0
POLL_S = 0.05
COUNTERS_HEADER = "t_ns late_ns netns ifname rx_packets rx_bytes tx_packets tx_bytes"


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

    @property
    def inventory(self) -> Inventory:
        """The lab's inventory."""
        return self.inv

    def ns(self, role: str) -> str:
        """A lab has no namespaces of this machine: the name is a label for the role only."""
        return f"{self.prefix}-{role}"

    def run_dir(self) -> str:
        """The run's directory on every host."""
        return f"{self.inv.deploy_dir}/runs/{self.prefix}"

    def prepare(self) -> None:
        """Create the run's directory (mode 0700) on every host."""
        for host in self.hosts.values():
            host.run(["mkdir", "-p", "-m", "0700", f"{self.run_dir()}/guard"])

    def remove(self) -> list[str]:
        """Remove the run's directory from every host; return the problems."""
        problems = []
        for role, host in self.hosts.items():
            try:
                res = host.run(["rm", "-rf", "--one-file-system", self.run_dir()], check=False, timeout_s=30.0)
                if res.returncode != 0:
                    problems.append(f"{role}: rm {self.run_dir()}: {res.stderr.decode(errors='replace').strip()}")
            except Exception as err:
                problems.append(f"{role}: {err}")
        return problems

    def spawn(
        self, role: str, what: str, argv: list[str], registry: Registry, out_dir: Path, stdout_name: str | None = None
    ) -> Proc:
        """Start ``argv`` on ``role``'s host under the guard; return once its PID is recorded."""
        p = RemoteProc(what, argv, registry, out_dir, self.hosts[role], f"{self.run_dir()}/guard", stdout_name)
        p.start()
        return p.started()

    def out_path(self, role: str, run_dir: Path, name: str) -> str:
        """The file ``name`` in the run's directory on ``role``'s host."""
        return f"{self.run_dir()}/{name}"

    def helper(self, role: str, argv0: str) -> str:
        """The suite's own helpers are installed in ``<deploy_dir>/bin`` by hosts-setup; other
        programs (irtt, qemu) come from the host's PATH."""
        p = Path(argv0)
        if p.is_absolute() and REPO in p.parents:
            return f"{self.inv.deploy_dir}/bin/{p.name}"
        return argv0

    def rx_packets(self, role: str, ifname: str) -> int:
        """The interface's rx packet counter, read on its host."""
        out = self.hosts[role].run(["cat", f"/sys/class/net/{ifname}/statistics/rx_packets"]).stdout
        return int(out.decode().strip())

    def read_bytes(self, role: str, path: str) -> bytes | None:
        """A file on ``role``'s host (None if it does not exist yet)."""
        res = self.hosts[role].run(["cat", path], check=False)
        return res.stdout if res.returncode == 0 else None

    def write_atomic(self, role: str, path: str, data: bytes) -> None:
        """Write ``path`` on ``role``'s host so that a reader never sees it half-written."""
        self.hosts[role].put(data, f"{path}.tmp")
        self.hosts[role].run(["mv", "-f", f"{path}.tmp", path])

    def wait_udp_bound(
        self, role: str, addr: str, port: int, timeout_s: float, abort: Callable[[], bool] | None = None
    ) -> None:
        """Wait until a UDP socket is bound to ``addr:port`` on ``role``'s host (``ss``)."""
        want = f"[{addr}]:{port}" if ":" in addr else f"{addr}:{port}"
        deadline = time.monotonic() + timeout_s
        while True:
            out = self.hosts[role].run(["ss", "-Hlun"], check=False).stdout.decode(errors="replace")
            if any(len(f := ln.split()) >= 4 and f[3] == want for ln in out.splitlines()):
                return
            if abort and abort():
                raise ProcessError(f"the UDP server on {role} exited before binding {want}")
            if time.monotonic() > deadline:
                raise ProcessError(f"nothing bound {want} on {role} within {timeout_s:.0f} s")
            time.sleep(POLL_S)

    def udp_in_datagrams(self, role: str, proc: Proc) -> int | None:
        """``Udp: InDatagrams`` of the network namespace of a helper on ``role``'s host."""
        pid = getattr(proc, "remote_pid", None)
        if pid is None:
            return None
        res = self.hosts[role].run(["cat", f"/proc/{pid}/net/snmp"], check=False)
        if res.returncode != 0:
            return None
        rows = [ln.split() for ln in res.stdout.decode().splitlines() if ln.startswith("Udp:")]
        try:
            return int(rows[1][rows[0].index("InDatagrams")])
        except (IndexError, ValueError):
            return None

    def forward_qmp(self, role: str, local: Path, remote: str, timeout_s: float, alive: Callable[[], bool]) -> None:
        """Once QEMU on ``role`` has created its QMP socket ``remote``, forward ``local`` to it
        through the host's SSH connection."""
        deadline = time.monotonic() + timeout_s
        while self.hosts[role].run(["test", "-S", remote], check=False).returncode != 0:
            if not alive():
                raise ProcessError(f"QEMU on {role} exited before its QMP socket appeared")
            if time.monotonic() > deadline:
                raise ProcessError(f"QMP socket {remote} on {role} did not appear within {timeout_s:.0f} s")
            time.sleep(POLL_S)
        self.hosts[role].forward_unix(local, remote)

    def sampler_plan(self) -> list[tuple[str, dict[str, list[str]], str]]:
        """One sampler on every host, reading that host's own interfaces."""
        return [(r, {".": self.inv.host(r).interfaces()}, f"counters-{r}.tsv") for r in ROLES]

    def measure_clocks(self, when: str) -> None:
        """Each host's clock offset against this machine (round-trip bounded) and its
        synchronisation state, kept under ``when`` ("start"/"end")."""
        for role, host in self.hosts.items():
            entry = self.clock.setdefault(role, {})
            sample = host.clock()
            entry[when] = asdict(sample) if hasattr(sample, "__dataclass_fields__") else dict(sample)
            if "sync" not in entry:
                entry["sync"] = host.sync_state()

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

    def collect(self, run_dir: Path) -> dict[str, Any]:
        """Fetch what the helpers wrote on the hosts into ``run_dir`` and merge the per-host
        counters onto this machine's clock (``counters.tsv``; the raw files stay beside it)."""
        fetched: dict[str, Any] = {}
        for role, names in (("C", ["irtt.json.gz"]), ("B", ["sink_state.json"])):
            for name in names:
                try:
                    self.hosts[role].fetch(f"{self.run_dir()}/{name}", run_dir / name)
                    fetched[name] = role
                except Exception as err:
                    fetched[name] = f"absent: {err}"
        parts = []
        for role, _, out in self.sampler_plan():
            try:
                self.hosts[role].fetch(f"{self.run_dir()}/{out}", run_dir / out)
                fetched[out] = role
                parts.append((role, run_dir / out))
            except Exception as err:
                fetched[out] = f"absent: {err}"
        offsets = {r: self.offset_ns(r) for r, _ in parts}
        merge_counters(parts, offsets, self.prefix, run_dir / "counters.tsv")
        return {"fetched": fetched, "offsets_ns": {r: {"offset": o, "uncertainty": u} for r, (o, u) in offsets.items()}}


def merge_counters(parts: list[tuple[str, Path]], offsets: dict[str, tuple[int, int]], prefix: str, out: Path) -> None:
    """Merge per-host vrsampler files into one counters.tsv on the orchestrator's clock: each
    sample's time minus its host's offset, its namespace column the role's label
    (``<prefix>-<role>``, as on the embedded testbed), rows in time order.  The header records
    every host's offset and uncertainty."""
    rows: list[tuple[int, str]] = []
    footers: list[str] = []
    period = None
    for role, path in parts:
        off = offsets[role][0]
        for line in path.read_text().splitlines():
            if line.startswith("# vrmig-sampler"):
                period = period or line.split("period_ns=", 1)[1].split()[0]
                continue
            if line.startswith("#"):
                if "t_ns" not in line:
                    footers.append(line)
                continue
            f = line.split(" ")
            if len(f) < 8 or f[0] == "t_ns":
                continue
            t = int(f[0]) - off
            f[0], f[2] = str(t), f"{prefix}-{role}"
            rows.append((t, " ".join(f)))
    rows.sort(key=lambda r: r[0])
    offs = " ".join(f"{r}:{o}+-{u}" for r, (o, u) in offsets.items())
    head = f"# vrmig-sampler 1 clock=CLOCK_REALTIME period_ns={period or 10_000_000}\n{COUNTERS_HEADER}\n"
    head += f"# merged per-host samplers onto the orchestrator's clock (offset ns +- uncertainty): {offs}\n"
    out.write_text(head + "".join(r[1] + "\n" for r in rows) + "".join(f + "\n" for f in footers))


def lab_testbed_meta(bed: LabBed) -> dict[str, Any]:
    """meta.json ``testbed`` of a lab run."""
    return {
        "prefix": bed.prefix,
        **bed.inv.describe(),
        "namespaces": {r: bed.ns(r) for r in ROLES},
        "router_ports": {s: asdict(p) for s, p in bed.inv.router.items()},
        "segments": list(topo.SEGMENTS),
    }
