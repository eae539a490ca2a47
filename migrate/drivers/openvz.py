"""HV=openvz: a router container on real OpenVZ / Virtuozzo hosts, moved by their own
``vzmigrate`` (OpenVZ's vzctl 4.x script, or Virtuozzo 7's vzmigrate on P.Haul/CRIU).

Only usable where those tools exist: :meth:`OpenvzDriver.preflight` looks for ``vzmigrate`` and
``vzctl`` (or Virtuozzo's ``prlctl``) on PATH and for the OpenVZ kernel (``/proc/vz``), and
otherwise stops with one line saying what is missing — without side effects.  On such a host:

* the router is an existing container ``VRMIG_OPENVZ_CTID`` (default 101) whose interfaces are
  bridged to the two traffic segments on both hosts (see docs/hypervisors.md "HV=openvz");
* start_source: ``vzctl start <CTID>`` unless it runs, then wait until ``vzctl status`` says
  running (polled, bounded by BOOT_TIMEOUT);
* migrate: ``vzmigrate [--online] -v <R2's migration-link address> <CTID>`` (MODE=precopy ->
  ``--online``, vzmigrate's live migration: rsync, suspend, dump, copy, undump, resume;
  MODE=stopcopy -> offline: stop, rsync, start), ssh as its transport (keys set up beforehand);
  every output line is stored with the host time it was received (``vzmigrate.log``) and parsed
  by :mod:`analysis.hypervisors.openvz` into phases, vzmigrate's ``--times`` table and errors;
* hypervisor figures: downtime from vzmigrate's own ``Total suspended time`` if printed, else from
  phase timestamps; duration = command start -> exit; volume None (vzmigrate prints no sizes).
  The data-plane figures come from the common code, as for every driver.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from migrate.core.errors import DependencyError, GuestError, MigrationError
from migrate.core.procs import LineTail, Proc
from migrate.core.rundir import VZMIGRATE_LOG
from migrate.drivers.base import Driver, MigrationOutcome, RunContext
from migrate.model.scenario import Scenario
from migrate.testbed import topology as topo

log = logging.getLogger(__name__)

VZMIGRATE = "vzmigrate"
VZCTL = "vzctl"
PRLCTL = "prlctl"
PROC_VZ = Path("/proc/vz")
CTID_ENV = "VRMIG_OPENVZ_CTID"
DEFAULT_CTID = "101"
POLL_S = 0.1
LOG_NAME = VZMIGRATE_LOG  # one JSON object per line: {"t_ns": host receive time, "line": text}


def missing_tools(which=shutil.which) -> list[str]:
    """What of vzmigrate + (vzctl or prlctl) is not on PATH (empty: all there)."""
    missing = [VZMIGRATE] if which(VZMIGRATE) is None else []
    if which(VZCTL) is None and which(PRLCTL) is None:
        missing.append(f"{VZCTL} (or Virtuozzo's {PRLCTL})")
    return missing


def vzmigrate_argv(destination: str, ctid: str, online: bool, ssh_options: str | None = None) -> list[str]:
    """``vzmigrate [--ssh=<opts>] [--online] -v <destination> <CTID>``: -v prints the steps
    (and, after a live migration, the --times table)."""
    if not ctid.isdigit():
        raise ValueError(f"CTID {ctid!r} is not a number")
    argv = [VZMIGRATE]
    if ssh_options:
        argv.append(f"--ssh={ssh_options}")
    if online:
        argv.append("--online")
    return [*argv, "-v", destination, ctid]


def vzctl_argv(action: str, ctid: str) -> list[str]:
    """``vzctl <action> <CTID>`` (start, status, stop)."""
    return [VZCTL, action, ctid]


def parse_status(text: str) -> dict[str, str | bool]:
    """``vzctl status`` ("CTID 101 exist mounted running") -> {exists, mounted, running}."""
    words = text.split()
    return {"exists": "exist" in words, "mounted": "mounted" in words, "running": "running" in words}


class OpenvzDriver(Driver):
    """vzmigrate between two OpenVZ/Virtuozzo hosts (R1 -> R2 over the migration link)."""

    name = "openvz"

    def __init__(self, ctx: RunContext, facts: dict[str, Any]) -> None:
        super().__init__(ctx, facts)
        self.ctid = str(facts["ctid"])
        self.log_path = ctx.run_dir / LOG_NAME
        self.exit_status: int | None = None
        self.proc: Proc | None = None

    @classmethod
    def preflight(cls, scenario: Scenario) -> dict[str, Any]:
        """vzmigrate and vzctl (or prlctl) on PATH, an OpenVZ kernel, a numeric CTID — no side
        effects."""
        missing = missing_tools()
        if missing:
            raise DependencyError(
                f"HV=openvz needs {' and '.join(missing)}, which only OpenVZ/Virtuozzo hosts provide; "
                "not found on PATH here (this is not an OpenVZ/Virtuozzo host)"
            )
        if not PROC_VZ.exists():
            raise DependencyError(f"HV=openvz needs an OpenVZ/Virtuozzo kernel ({PROC_VZ} is missing)")
        ctid = os.environ.get(CTID_ENV, DEFAULT_CTID)
        if not ctid.isdigit():
            raise DependencyError(f"{CTID_ENV}={ctid!r} is not a container ID (a number)")
        return {"ctid": ctid, "accel": "none", "accel_reason": "OpenVZ containers share the host kernel"}

    # -- helpers ---------------------------------------------------------------------------
    def _status(self) -> dict[str, str | bool]:
        res = subprocess.run(vzctl_argv("status", self.ctid), capture_output=True, text=True, timeout=30, check=False)
        return parse_status(res.stdout)

    # -- phases ----------------------------------------------------------------------------
    def start_source(self) -> None:
        """Start the container unless it runs; wait until vzctl reports it running."""
        self.ctx.recorder.action("boot", host="R1", ctid=self.ctid)
        if not self._status()["running"]:
            res = subprocess.run(vzctl_argv("start", self.ctid), capture_output=True, text=True, check=False)
            if res.returncode != 0:
                raise GuestError(f"vzctl start {self.ctid} failed ({res.returncode}): {res.stderr.strip()[-300:]}")
        deadline = time.monotonic() + self.ctx.scenario.boot_timeout_s
        while not self._status()["running"]:
            if time.monotonic() > deadline:
                raise GuestError(f"container {self.ctid} not running within BOOT_TIMEOUT")
            time.sleep(POLL_S)
        self.ctx.recorder.action("router-ready", host="R1", ctid=self.ctid)

    def prepare_destination(self) -> None:
        """Nothing: vzmigrate prepares the remote node itself (config, private area, quota)."""
        self.ctx.recorder.action("incoming", host="R2", by="vzmigrate")

    def migrate(self) -> MigrationOutcome:
        """Run vzmigrate (a registered child, by PID), timestamping each output line when it is
        read from its stdout/stderr files (polled every POLL_S); parse the lines."""
        from analysis.hypervisors.openvz import hypervisor_figures, parse_output

        s = self.ctx.scenario
        argv = vzmigrate_argv(topo.addr(topo.MIGRATION_ADDR["R2"]), self.ctid, online=s.mode == "precopy")
        self.ctx.recorder.action("migrate", argv=argv)
        started = time.time()
        proc = self.proc = Proc("vzmigrate", argv, self.ctx.registry, self.ctx.run_dir).start()
        tails = [LineTail(proc.stdout_path), LineTail(proc.stderr_path)]
        lines: list[tuple[float, str]] = []
        deadline = time.monotonic() + s.migrate_timeout_s
        with open(self.log_path, "w") as out:
            while True:
                alive = proc.alive()
                t = time.time()
                for tail in tails:
                    for text in tail.new_lines(final=not alive):
                        lines.append((t, text))
                        out.write(json.dumps({"t_ns": int(t * 1e9), "line": text}) + "\n")
                if not alive:
                    break
                if time.monotonic() > deadline or (self.ctx.abort and self.ctx.abort()):
                    proc.stop()
                    raise MigrationError(f"vzmigrate did not finish within MIGRATE_TIMEOUT={s.migrate_timeout_s:.0f} s")
                time.sleep(POLL_S)
        self.exit_status = proc.returncode()
        ended = time.time()
        report = parse_output(lines)
        figures = hypervisor_figures(report, started, ended, -1 if self.exit_status is None else self.exit_status)
        self.ctx.recorder.action("migrate-done", exit_status=self.exit_status)
        failure = None
        if not figures["completed"]:
            failure = f"vzmigrate exited {self.exit_status}: {'; '.join(report.errors) or 'see ' + LOG_NAME}"
        return MigrationOutcome(completed=failure is None, failure=failure, hypervisor=figures)

    def verify(self) -> dict[str, Any]:
        """vzmigrate moved (and by default destroyed) the source container: its local status."""
        return {"src_status": self._status(), "ctid": self.ctid}

    def source_running(self) -> bool:
        """vzmigrate resumes the source container when a live migration fails."""
        return bool(self._status()["running"])

    def stop(self) -> None:
        """Stop vzmigrate by PID if it still runs (interrupted run); the container belongs to the
        host and is left as vzmigrate left it (on a failure vzmigrate resumes the source)."""
        if self.proc is not None and self.proc.alive():
            self.proc.stop(timeout_s=30.0)

    def describe(self) -> dict[str, Any]:
        """CTID, the command, and where the raw output is."""
        return {"ctid": self.ctid, "exit_status": self.exit_status, "raw": LOG_NAME, "accel": "none"}
