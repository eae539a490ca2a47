"""``make chaos``: seeded trials of faults and of SIGINT/SIGTERM/SIGKILL at random points of a
run, per hypervisor (``kvm``: QEMU over QMP, ``kvm-libvirt``, ``criu``, ``xen``).

After every trial, whatever it did: no namespace, state directory, rootfs copy or process the
trial created may remain, every run directory must be complete, failed or interrupted with valid
JSON, and no earlier result may have changed.  Leftovers are searched for without trusting the
trial's own record: everything that names a run prefix (a namespace ``<prefix>-*``, a state
directory, a ``vrmig-<prefix>-*`` directory in /dev/shm, a process tagged ``VRMIG_RUN_PREFIX`` or
naming the prefix in its command line, as libvirt's QEMU does, or in its root mount, as a
container does) that did not exist before the trial and belongs to no live orchestrator.

A SIGKILLed orchestrator cannot clean up: its processes die with it (parent-death signal) and
its reaper removes the rest, so the check runs *before* anything else cleans; only if something
remains is the trial's own run torn down from its state file (``clean_stale`` for that prefix),
which is what the next run or ``make clean-testbed`` would do.

Prints the totals per hypervisor and overall; exits non-zero on any leak or lost result."""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import logging
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from migrate.core.errors import ConfigError
from migrate.core.progress import Progress
from migrate.core.registry import (
    STATE_ROOT,
    clean_stale,
    pid_alive,
    proc_starttime,
    processes_of,
)
from migrate.core.rundir import ACTIONS_JSONL, META_JSON, SUMMARY_JSON, read_meta, read_summary
from migrate.labs.leaks import LeakWatch
from migrate.labs.where import NO_TESTBED, Where, where_for
from migrate.model.scenario import FAULTS
from migrate.testbed.results import check_results_root, is_opening, mark_results_root, remove_dead_openings

log = logging.getLogger("vrmig.chaos")

SIGNALS = ("SIGKILL", "SIGTERM", "SIGINT")
TRIAL_TIMEOUT_S = 240.0
SIGNAL_WINDOW_S = (0.3, 10.0)  # covers setup, boot, warm-up, migration and analysis (HV=kvm: ~10 s a run)
RUN_FLAGS = ["--rate", "10M", "--duration", "5", "--migrate-at", "2", "--after", "1",
             "--migrate-timeout", "15", "--boot-timeout", "60"]  # fmt: skip
FINAL_STATES = ("completed", "failed", "interrupted")
LEAK_GRACE_S = 3.0
#: after a SIGKILL: the reaper stops the run's libvirt QEMUs and containers (SIGTERM, up to
#: registry.KILL_GRACE_S, then SIGKILL) and removes the namespaces
REAPER_GRACE_S = 20.0
SHM = Path("/dev/shm")


@dataclass(frozen=True)
class HvProfile:
    """How chaos trials run one hypervisor: run flags, the faults it can suffer, when signals
    may hit, and how long a trial may take."""

    flags: tuple[str, ...]
    faults: tuple[str, ...]
    signal_window_s: tuple[float, float] = SIGNAL_WINDOW_S
    timeout_s: float = TRIAL_TIMEOUT_S
    #: on a lab (TESTBED=), where a run can take another time than here (None: the same window)
    lab_signal_window_s: tuple[float, float] | None = None

    def window_s(self, where: Where) -> tuple[float, float]:
        """When a signal may hit a run on ``where``."""
        return where.either(self.signal_window_s, self.lab_signal_window_s or self.signal_window_s)


#: faults of the testbed and instruments apply to every HV (CRIU: right before the final dump);
#: QEMU deaths where there is a QEMU per host; an unbootable guest where the driver builds one
_TESTBED_FAULTS = ("link-down", "link-cap", "gen-dies", "dst-unplugged")
XEN_FLAGS = ("--hv", "xen", "--mem", "160", "--rate", "1M", "--duration", "5", "--migrate-at", "2", "--after", "1",
             "--migrate-timeout", "150", "--boot-timeout", "240")  # fmt: skip
HV_PROFILES: dict[str, HvProfile] = {
    "kvm": HvProfile(tuple(RUN_FLAGS), FAULTS),
    # signal windows: about a whole run of that HV here (libvirt ~25 s, CRIU ~7 s, nested Xen ~50 s)
    # on a lab the libvirtds already run, so a libvirt run ends after ~15 s instead of ~25 s
    "kvm-libvirt": HvProfile(("--driver", "libvirt", *RUN_FLAGS), FAULTS, (0.3, 25.0), lab_signal_window_s=(0.3, 15.0)),
    "criu": HvProfile(
        ("--hv", "criu", "--router", "bird", "--mode", "stopcopy", *RUN_FLAGS),
        _TESTBED_FAULTS,
        (0.3, 7.0),
        # on a lab the rootfs copies and keepers are staged over SSH: a run takes ~10 s
        lab_signal_window_s=(0.3, 10.0),
    ),
    "xen": HvProfile(XEN_FLAGS, ("dst-qemu-dies", "src-qemu-dies", *_TESTBED_FAULTS), (0.3, 50.0), 600.0),
}
DEFAULT_HVS = ("kvm", "kvm-libvirt", "criu", "xen")
#: what a lab run supports (migrate.experiment.place.lab_supports)
LAB_HVS = ("kvm", "kvm-libvirt", "criu", "xen")
DEFAULT_XEN_TRIALS = 2


@dataclass
class Totals:
    """What the chaos run found (for one HV, or all)."""

    trials: int = 0
    faults: int = 0
    faults_injected: int = 0
    signals: int = 0
    signals_sent: int = 0  # the run was still going when its signal came (the others had ended)
    leaks: int = 0
    lost_results: int = 0
    hung: int = 0  # runs that outlived their trial's time limit (their stacks are in problems)
    refused: int = 0  # runs that refused to start (exit 2 or 3: their input or a dependency)
    wall_s: float = 0.0
    problems: list[str] = field(default_factory=list)

    def add(self, other: Totals) -> None:
        """Accumulate ``other`` into these totals."""
        for name in (
            "trials",
            "faults",
            "faults_injected",
            "signals",
            "signals_sent",
            "leaks",
            "lost_results",
            "hung",
            "refused",
            "wall_s",
        ):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.problems += other.problems

    def line(self, label: str) -> str:
        """The summary line printed for ``label``."""
        return (
            f"{label}: trials {self.trials}, faults {self.faults} ({self.faults_injected} injected mid-run), "
            f"signals {self.signals} ({self.signals_sent} while running), leaks {self.leaks}, "
            f"lost results {self.lost_results}, hung {self.hung}, refused {self.refused}, "
            f"wall {self.wall_s:.0f} s"
        )


# -- what a run can leave behind --------------------------------------------------------------
def run_namespaces(prefix: str) -> list[str]:
    """Namespaces of one run."""
    names = os.listdir("/run/netns") if os.path.isdir("/run/netns") else []
    return sorted(n for n in names if n.startswith(f"{prefix}-"))


def run_processes(prefix: str) -> dict[int, str]:
    """Processes of one run (tagged ``VRMIG_RUN_PREFIX=<prefix>``, or naming the prefix in their
    command line or root mount: libvirt's QEMUs, containers) -> command line.  Detection only:
    cleanup is always from the run's state file."""
    return {pid: _cmdline(pid) for pid in processes_of({prefix})}


def _cmdline(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "?"
    return raw.replace(b"\0", b" ").decode(errors="replace").strip()[:120]


def run_leaks(prefix: str, grace_s: float = LEAK_GRACE_S) -> list[str]:
    """What a finished (or cleaned) run left behind; waits up to ``grace_s`` for exiting processes."""
    deadline = time.monotonic() + grace_s
    while True:
        leaks = run_namespaces(prefix)
        if (STATE_ROOT / prefix).exists():
            leaks.append(f"state dir {STATE_ROOT / prefix}")
        leaks += [f"path {p}" for p in sorted(SHM.glob(f"vrmig-{prefix}-*"))]
        leaks += [f"pid {p} ({c})" for p, c in sorted(run_processes(prefix).items())]
        if not leaks or time.monotonic() > deadline:
            return leaks
        time.sleep(0.1)


@dataclass
class Artefacts:
    """Everything on this machine that names a run prefix, at one moment."""

    namespaces: set[str]
    state_dirs: set[str]
    shm: set[str]
    processes: dict[tuple[int, int | None], set[str]]  # (pid, start time) -> prefixes it names

    @classmethod
    def now(cls) -> Artefacts:
        """Take the inventory."""
        names = os.listdir("/run/netns") if os.path.isdir("/run/netns") else []
        states = {p.name for p in STATE_ROOT.iterdir()} if STATE_ROOT.is_dir() else set()
        shm = {p.name for p in SHM.glob("vrmig-vm*")} if SHM.is_dir() else set()
        procs = {(pid, proc_starttime(pid)): marks for pid, marks in processes_of().items()}
        return cls({n for n in names if _prefix_of(n)}, states, shm, procs)

    def new_since(self, before: Artefacts, exclude_prefixes: set[str]) -> list[str]:
        """What exists now but did not before, except what belongs to ``exclude_prefixes``."""
        out = [
            f"namespace {n}"
            for n in sorted(self.namespaces - before.namespaces)
            if _prefix_of(n) not in exclude_prefixes
        ]
        out += [f"state dir {STATE_ROOT / d}" for d in sorted(self.state_dirs - before.state_dirs)
                if _prefix_of(d) not in exclude_prefixes]  # fmt: skip
        out += [f"path {SHM / d}" for d in sorted(self.shm - before.shm) if _prefix_of(d) not in exclude_prefixes]
        for (pid, st), marks in sorted(self.processes.items(), key=lambda kv: kv[0][0]):
            if (pid, st) not in before.processes and not marks <= exclude_prefixes:
                out.append(f"pid {pid} ({','.join(sorted(marks))}: {_cmdline(pid)})")
        return out


def _prefix_of(name: str) -> str | None:
    """The run prefix a namespace, state directory or /dev/shm entry is named after."""
    core = name.removeprefix("vrmig-")
    head = core.split("-", 1)[0]
    if len(head) == 8 and head.startswith("vm") and all(c in "0123456789abcdef" for c in head[2:]):
        return head
    return None


def live_prefixes() -> set[str]:
    """Prefixes of runs whose orchestrator is alive (other runs on this machine)."""
    out = set()
    for state_file in STATE_ROOT.glob("*/state.json") if STATE_ROOT.is_dir() else []:
        try:
            state = json.loads(state_file.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        if pid_alive(state.get("owner_pid", -1), state.get("owner_starttime")):
            out.add(state_file.parent.name)
    return out


def trial_leaks(before: Artefacts, own_prefix: str | None, grace_s: float) -> list[str]:
    """Leftovers of one trial: its own run's (if it got as far as naming its prefix) and anything
    else that appeared during the trial and belongs to no live orchestrator.  Waits up to
    ``grace_s`` for exiting processes and a working reaper."""
    deadline = time.monotonic() + grace_s
    while True:
        others = live_prefixes()
        leaks = run_leaks(own_prefix, grace_s=0) if own_prefix else []
        seen = {own_prefix} if own_prefix else set()
        leaks += Artefacts.now().new_since(before, others | seen)
        if not leaks or time.monotonic() > deadline:
            return leaks
        time.sleep(0.2)


# -- results ----------------------------------------------------------------------------------
def _new_run_dirs(results: Path, before: set[str]) -> list[Path]:
    return sorted(p for p in results.iterdir() if p.is_dir() and p.name not in before and not is_opening(p))


def fault_injected(results: Path, before: set[str], kind: str) -> bool:
    """Did the trial's run actually inject its fault (a 'fault' action, or for an unbootable guest
    the boot failure)?"""
    for d in _new_run_dirs(results, before):
        if (
            kind == "guest-never-ready"
        ):  # QMP: "router guest not ready: ..."; libvirt: "... did not print 'VRMIG-READY'"
            failure = read_meta(d).get("failure") or ""
            return "not ready" in failure or "did not print 'VRMIG-READY'" in failure
        actions = d / ACTIONS_JSONL
        return actions.exists() and '"action": "fault"' in actions.read_text()
    return False


def new_run_prefix(results: Path, before: set[str]) -> str | None:
    """The testbed prefix of the run directory a trial created (None if it created none or its
    meta.json does not name one yet)."""
    for d in _new_run_dirs(results, before):
        try:
            return read_meta(d).get("testbed", {}).get("prefix")
        except (OSError, ValueError):
            return None
    return None


def snapshot(results: Path) -> dict[str, str]:
    """sha256 of every file under every run directory."""
    out = {}
    for f in sorted(results.rglob("*")):
        if f.is_file():
            out[str(f)] = hashlib.sha256(f.read_bytes()).hexdigest()
    return out


def check_runs(results: Path) -> list[str]:
    """Every run directory: meta.json valid and in a final state."""
    bad = []
    for d in sorted(p for p in results.iterdir() if p.is_dir() and not is_opening(p)):
        try:
            meta = read_meta(d)
        except (OSError, ValueError) as err:
            bad.append(f"{d.name}: {META_JSON} unreadable ({err})")
            continue
        if meta.get("status") not in FINAL_STATES:
            bad.append(f"{d.name}: status {meta.get('status')!r}")
        if (d / SUMMARY_JSON).exists():
            try:
                read_summary(d)
            except ValueError as err:
                bad.append(f"{d.name}: {SUMMARY_JSON} invalid ({err})")
    return bad


# -- trials -----------------------------------------------------------------------------------
def trial_argv(hv: str, kind: str, results: Path, where: Where = NO_TESTBED) -> list[str]:
    """The run a trial starts (on ``where``)."""
    argv = [sys.executable, "-m", "migrate", "run", *HV_PROFILES[hv].flags, "--results", str(results)]
    argv += where.argv()
    return argv + (["--fault", kind] if kind in FAULTS else [])


@dataclass
class TrialOutcome:
    """How one trial's run ended."""

    sent: bool  # its signal hit the running orchestrator
    #: the run outlived the trial's time limit: why, with every thread's stack (else None)
    hung: str | None = None
    returncode: int | None = None


#: how long a hung run gets to print its stacks after SIGUSR1 before it is killed
STACK_DUMP_WAIT_S = 5.0


def _trial(
    hv: str, kind: str, delay_s: float, results: Path, where: Where = NO_TESTBED, log_path: Path | None = None
) -> TrialOutcome:
    """Run one trial, its stderr to ``log_path`` (default: discarded).  A run that outlives the
    HV's time limit is asked for its Python stacks (SIGUSR1: the CLI registers faulthandler on
    it) and killed; the outcome carries the stacks, so that a hang has a cause."""
    err = log_path.open("w+b") if log_path is not None else None
    proc = subprocess.Popen(
        trial_argv(hv, kind, results, where),
        stdout=subprocess.DEVNULL,
        stderr=err if err is not None else subprocess.DEVNULL,
        start_new_session=True,
    )
    out = TrialOutcome(False)
    try:
        if kind in SIGNALS:
            try:
                proc.wait(timeout=delay_s)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, getattr(signal, kind))
                out.sent = True
        limit = HV_PROFILES[hv].timeout_s
        try:
            proc.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            out.hung = f"the run did not end within {limit:.0f} s" + _stacks_of(proc, err)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if err is not None:
            err.close()
    out.returncode = proc.returncode
    return out


#: exit statuses of a run that refused to start (ConfigError, DependencyError): a trial that
#: tested nothing
REFUSED_EXITS = (2, 3)


def refusal(outcome: TrialOutcome, log_path: Path) -> str | None:
    """Why a trial's run refused to start (its last stderr line), or None if it did not."""
    if outcome.returncode not in REFUSED_EXITS:
        return None
    try:
        lines = log_path.read_text(errors="replace").strip().splitlines()
    except OSError:
        lines = []
    return f"the run refused to start (exit {outcome.returncode}): {lines[-1] if lines else 'no message'}"


def _stacks_of(proc: subprocess.Popen[bytes], err: Any) -> str:
    """The Python stacks a live run prints on SIGUSR1 (faulthandler), read from its stderr file
    ``err`` (nothing if it was discarded or the run printed none).  Once the first stack header
    is seen the run is killed and reaped: nothing more can be written after that, so the file
    then holds the whole dump (no waiting by the clock for the other threads' stacks)."""
    if err is None:
        return ""
    start = err.seek(0, os.SEEK_END)
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, signal.SIGUSR1)
    deadline = time.monotonic() + STACK_DUMP_WAIT_S
    while time.monotonic() < deadline and proc.poll() is None:
        err.seek(start)
        if b"most recent call first" in err.read():
            break
        time.sleep(0.05)
    proc.kill()
    proc.wait()
    err.seek(start)
    text = err.read().decode(errors="replace").strip()
    return f"; its threads (faulthandler, most recent call first):\n{text}" if text else "; it printed no stack"


def trial_kinds(hv: str, where: Where = NO_TESTBED) -> list[str]:
    """The order of a HV's first trials: signals and faults interleaved (SIGKILL first), so that a
    few trials already cover both; later trials draw from the same list at random.  The faults
    are those a run on ``where`` takes (a lab run refuses FAULT: signals only there)."""
    faults = where.faults(f for f in HV_PROFILES[hv].faults if f in FAULTS)
    out: list[str] = []
    for i in range(max(len(SIGNALS), len(faults))):
        out += [SIGNALS[i]] if i < len(SIGNALS) else []
        out += [faults[i]] if i < len(faults) else []
    return out


def run_hv(
    hv: str,
    trials: int,
    rng: random.Random,
    results: Path,
    progress: Progress | None = None,
    where: Where = NO_TESTBED,
    watch: LeakWatch | None = None,
) -> Totals:
    """Run ``trials`` trials of one HV on ``where``; return its totals.  ``progress`` counts a
    trial that leaked or lost a result as failed.  ``watch`` (entered; default: ``where``'s
    :meth:`~migrate.labs.where.Where.leak_watch`, entered for these trials) searches the hosts
    beyond this machine for leftovers too."""
    if watch is None:
        with where.leak_watch() as own:
            return run_hv(hv, trials, rng, results, progress, where, own)
    progress = progress or Progress("chaos", trials, "trials", enabled=False)
    check_results_root(results)
    mark_results_root(results)  # the trials' logs sit beside their runs: the root must say it is ours
    kinds = trial_kinds(hv, where)
    totals = Totals()
    t_hv = time.monotonic()
    for i in range(trials):
        kind = kinds[i] if i < len(kinds) else rng.choice(kinds)
        prof = HV_PROFILES[hv]
        delay = rng.uniform(*prof.window_s(where))
        before_dirs = {p.name for p in results.iterdir()}
        before_files = snapshot(results)
        before = Artefacts.now()
        hosts_before = watch.before_trial()
        t0 = time.monotonic()
        progress.start(f"{hv} trial {i + 1} {kind}")
        # a name no earlier chaos run into the same RESULTS= used (that file would count as modified)
        log_path = results / f"chaos-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{hv}-trial{i + 1}-{kind}.log"
        outcome = _trial(hv, kind, delay, results, where, log_path)
        sent = outcome.sent
        totals.trials += 1
        totals.faults += kind in FAULTS
        totals.signals += kind in SIGNALS
        totals.signals_sent += sent
        prefix = new_run_prefix(results, before_dirs)
        if kind in FAULTS and fault_injected(results, before_dirs, kind):
            totals.faults_injected += 1
        # measured before anything else cleans: a SIGKILLed run must clean itself (reaper)
        killed = (kind == "SIGKILL" and sent) or outcome.hung is not None  # a hung run was SIGKILLed
        leaks = trial_leaks(before, prefix, REAPER_GRACE_S if killed else LEAK_GRACE_S)
        leaks += watch.leaks(hosts_before, prefix, REAPER_GRACE_S if killed else LEAK_GRACE_S, killed)
        if leaks and prefix:
            cleaned = clean_stale(only={prefix})  # then remove them, as the next run would
            log.warning("trial %d left %d leftovers; clean_stale(%s) -> %s", i + 1, len(leaks), prefix, cleaned)
        for half in remove_dead_openings(results):  # as the next run would: never a run, nothing lost
            log.info("trial %d: removed %s (killed while its run directory was being opened)", i + 1, half.name)
        after_files = snapshot(results)
        changed = [f for f, h in before_files.items() if after_files.get(f) != h]
        bad = check_runs(results)
        totals.leaks += len(leaks)
        totals.lost_results += len(changed) + len(bad)
        totals.hung += outcome.hung is not None
        hung = [f"hung: {outcome.hung} (stderr: {log_path})"] if outcome.hung else []
        refused = refusal(outcome, log_path)
        totals.refused += refused is not None
        failed = hung + ([refused] if refused else [])
        for what in failed + leaks + [f"modified {f}" for f in changed] + bad:
            totals.problems.append(f"{hv} trial {i + 1} ({kind}): {what}")
        log.info(
            "%s trial %d/%d %-18s %s %.0f s: leaks %d, lost %d",
            hv, i + 1, trials, kind, f"at {delay:.1f} s{'' if sent else ' (run had ended)'}" if kind in SIGNALS else "",
            time.monotonic() - t0,
            len(leaks), len(changed) + len(bad),
        )  # fmt: skip
        progress.finish(
            not failed and not leaks and not changed and not bad,
            "hung" if hung else "refused" if refused else "leaks" if leaks else "lost results",
        )
    totals.wall_s = time.monotonic() - t_hv
    return totals


def check_hvs(hvs: Sequence[str], where: Where) -> None:
    """ValueError (one line) if a hypervisor of ``hvs`` cannot run on ``where`` (on a lab: one not
    in :data:`LAB_HVS`)."""
    if other := [hv for hv in hvs if hv not in where.either(tuple(HV_PROFILES), LAB_HVS)]:
        raise ValueError(f"HVS={','.join(other)} cannot run on a lab (TESTBED=) yet: use HVS={','.join(LAB_HVS)}")


def overall(per_hv: dict[str, Totals]) -> Totals:
    """The totals of every HV's trials together (``per_hv``: :func:`run_chaos_per_hv`'s)."""
    total = Totals()
    for t in per_hv.values():
        total.add(t)
    return total


def run_chaos_per_hv(
    trials: int,
    seed: int,
    results: Path,
    hvs: tuple[str, ...] = ("kvm",),
    xen_trials: int | None = None,
    testbed: Path | None = None,
) -> dict[str, Totals]:
    """Run the trials HV by HV (each HV's seeded sequence is independent of the others); with
    ``testbed`` on that lab's hosts (what a lab run takes: :data:`LAB_HVS`)."""
    where = where_for(testbed)
    unknown = [hv for hv in hvs if hv not in HV_PROFILES]
    if unknown:
        raise ValueError(f"HVS: {', '.join(unknown)} unknown: choose from {', '.join(HV_PROFILES)}")
    check_hvs(hvs, where)
    check_results_root(results)
    counts = {hv: xen_trials if hv == "xen" and xen_trials is not None else trials for hv in hvs}
    out: dict[str, Totals] = {}
    with contextlib.ExitStack() as stack:
        watch = stack.enter_context(where.leak_watch())
        progress = stack.enter_context(Progress("chaos", sum(counts.values()), "trials"))
        for hv, n in counts.items():
            rng = random.Random(f"{seed}-{hv}")
            out[hv] = run_hv(hv, n, rng, results, progress, where, watch)
    return out


def _hvs(text: str) -> tuple[str, ...]:
    hvs = tuple(h.strip() for h in text.split(",") if h.strip())
    unknown = [h for h in hvs if h not in HV_PROFILES]
    if not hvs or unknown:
        raise argparse.ArgumentTypeError(
            f"HVS={text!r}: use a comma-separated list of {', '.join(HV_PROFILES)} (e.g. kvm,criu)"
        )
    return hvs


def build_parser() -> argparse.ArgumentParser:
    """The options (the Make variables of ``make chaos``)."""
    p = argparse.ArgumentParser(prog="vrmig-chaos")
    p.add_argument("--trials", type=int, default=10, help="trials per HV")
    p.add_argument("--xen-trials", type=int, default=DEFAULT_XEN_TRIALS, help="trials for xen (~2 min each)")
    p.add_argument("--seed", type=int, default=1, help="seed of the faults, signals and their moments")
    p.add_argument(
        "--hvs",
        type=_hvs,
        default=None,
        help=f"comma-separated, of {','.join(HV_PROFILES)} (default: all; with TESTBED=, {','.join(LAB_HVS)})",
    )
    p.add_argument("--results", type=Path, default=Path("results/chaos"), help="where the trials' runs go")
    p.add_argument("--testbed", type=Path, default=None, help="a lab inventory; signals only there")
    return p


def main(argv: list[str] | None = None) -> int:
    """CLI: python -m migrate.campaigns.chaos --trials N --seed S --hvs kvm,kvm-libvirt,criu,xen --results DIR."""
    a = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="chaos: %(message)s", stream=sys.stderr)
    if os.geteuid() != 0:
        print("chaos: must run as root", file=sys.stderr)
        return 2
    where = where_for(a.testbed)
    hvs = a.hvs or where.either(DEFAULT_HVS, LAB_HVS)
    try:
        where.check_exists()
        check_hvs(hvs, where)
    except (ConfigError, ValueError) as err:
        print(f"chaos: {err}", file=sys.stderr)
        return 2
    try:
        per_hv = run_chaos_per_hv(a.trials, a.seed, a.results, hvs, a.xen_trials, a.testbed)
    except ConfigError as err:
        print(f"chaos: {err}", file=sys.stderr)
        return 2
    total = overall(per_hv)
    for prob in total.problems:
        print(f"  {prob}")
    for hv, t in per_hv.items():
        print(t.line(f"chaos[{hv}]"))
    print(total.line("chaos"))
    return 0 if total.leaks == total.lost_results == total.hung == total.refused == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
