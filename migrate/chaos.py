"""``make chaos``: seeded trials of faults and of SIGINT/SIGTERM/SIGKILL at random points of a
run.  After each trial: no namespace, state or process of the suite may remain, every run
directory must be complete, failed or interrupted with valid JSON, and no earlier result may
have changed.  Prints the totals; exits non-zero on any leak or lost result."""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from migrate.procs import RUN_ENV
from migrate.registry import STATE_ROOT
from migrate.scenario import FAULTS

log = logging.getLogger("vrmig.chaos")

SIGNALS = ("SIGINT", "SIGTERM", "SIGKILL")
TRIAL_TIMEOUT_S = 240.0
SIGNAL_WINDOW_S = (0.3, 16.0)  # covers setup, boot, warm-up, migration and analysis
RUN_FLAGS = ["--rate", "10M", "--duration", "5", "--migrate-at", "2", "--after", "1",
             "--migrate-timeout", "15", "--boot-timeout", "60"]  # fmt: skip
FINAL_STATES = ("completed", "failed", "interrupted")
LEAK_GRACE_S = 3.0


@dataclass
class Totals:
    """What the chaos run found."""

    trials: int = 0
    faults: int = 0
    faults_injected: int = 0
    signals: int = 0
    leaks: int = 0
    lost_results: int = 0
    problems: list[str] = field(default_factory=list)


def run_namespaces(prefix: str) -> list[str]:
    """Namespaces of one run."""
    names = os.listdir("/run/netns") if os.path.isdir("/run/netns") else []
    return sorted(n for n in names if n.startswith(f"{prefix}-"))


def run_processes(prefix: str) -> dict[int, str]:
    """Processes started by one run (tagged VRMIG_RUN_PREFIX=<prefix> in their environment) -> command
    line.  Detection only: cleanup is always by the PIDs in the run's state file."""
    tag = f"{RUN_ENV}={prefix}".encode()
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if tag not in Path(f"/proc/{entry}/environ").read_bytes().split(b"\0"):
                continue
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        out[int(entry)] = cmd.strip()[:120]
    return out


def run_leaks(prefix: str, grace_s: float = LEAK_GRACE_S) -> list[str]:
    """What a finished (or cleaned) run left behind; waits up to ``grace_s`` for exiting processes."""
    deadline = time.monotonic() + grace_s
    while True:
        leaks = run_namespaces(prefix)
        if (STATE_ROOT / prefix).exists():
            leaks.append(f"state dir {STATE_ROOT / prefix}")
        leaks += [f"pid {p} ({c})" for p, c in sorted(run_processes(prefix).items())]
        if not leaks or time.monotonic() > deadline:
            return leaks
        time.sleep(0.1)


def fault_injected(results: Path, before: set[str], kind: str) -> bool:
    """Did the trial's run actually inject its fault (a 'fault' action, or for an unbootable guest
    the boot failure)?"""
    for d in sorted(p for p in results.iterdir() if p.is_dir() and p.name not in before):
        if kind == "guest-never-ready":
            meta = json.loads((d / "meta.json").read_text())
            return "not ready" in (meta.get("failure") or "")
        actions = d / "actions.jsonl"
        return actions.exists() and '"action": "fault"' in actions.read_text()
    return False


def new_run_prefix(results: Path, before: set[str]) -> str | None:
    """The testbed prefix of the run directory a trial created (None if it created none)."""
    for d in sorted(p for p in results.iterdir() if p.is_dir() and p.name not in before):
        try:
            return json.loads((d / "meta.json").read_text()).get("testbed", {}).get("prefix")
        except (OSError, json.JSONDecodeError):
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
    for d in sorted(p for p in results.iterdir() if p.is_dir()):
        try:
            meta = json.loads((d / "meta.json").read_text())
        except (OSError, json.JSONDecodeError) as err:
            bad.append(f"{d.name}: meta.json unreadable ({err})")
            continue
        if meta.get("status") not in FINAL_STATES:
            bad.append(f"{d.name}: status {meta.get('status')!r}")
        summary = d / "summary.json"
        if summary.exists():
            try:
                json.loads(summary.read_text())
            except json.JSONDecodeError as err:
                bad.append(f"{d.name}: summary.json invalid ({err})")
    return bad


def _trial(kind: str, delay_s: float, results: Path) -> None:
    argv = [sys.executable, "-m", "migrate", "run", *RUN_FLAGS, "--results", str(results)]
    if kind in FAULTS:
        argv += ["--fault", kind]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        if kind in SIGNALS:
            try:
                proc.wait(timeout=delay_s)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, getattr(signal, kind))
        proc.wait(timeout=TRIAL_TIMEOUT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if kind == "SIGKILL":
        subprocess.run([sys.executable, "-m", "migrate", "clean-testbed"], check=False, capture_output=True)


def run_chaos(trials: int, seed: int, results: Path) -> Totals:
    """Run the trials; return the totals."""
    rng = random.Random(seed)
    kinds = list(FAULTS) + list(SIGNALS)
    totals = Totals()
    results.mkdir(parents=True, exist_ok=True)
    for i in range(trials):
        kind = kinds[i % len(kinds)] if i < len(kinds) else rng.choice(kinds)
        delay = rng.uniform(*SIGNAL_WINDOW_S)
        before_dirs = {p.name for p in results.iterdir()}
        before_files = snapshot(results)
        t0 = time.monotonic()
        _trial(kind, delay, results)
        totals.trials += 1
        totals.faults += kind in FAULTS
        totals.signals += kind in SIGNALS
        prefix = new_run_prefix(results, before_dirs)
        if kind in FAULTS and fault_injected(results, before_dirs, kind):
            totals.faults_injected += 1
        leaks = run_leaks(prefix) if prefix else []
        after_files = snapshot(results)
        changed = [f for f, h in before_files.items() if after_files.get(f) != h]
        bad = check_runs(results)
        totals.leaks += len(leaks)
        totals.lost_results += len(changed) + len(bad)
        for what in leaks + [f"modified {f}" for f in changed] + bad:
            totals.problems.append(f"trial {i} ({kind}): {what}")
        log.info(
            "trial %d/%d %-18s %s %.0f s: leaks %d, lost %d",
            i + 1, trials, kind, f"at {delay:.1f} s" if kind in SIGNALS else "", time.monotonic() - t0,
            len(leaks), len(changed) + len(bad),
        )  # fmt: skip
    return totals


def main(argv: list[str] | None = None) -> int:
    """CLI: python -m migrate.chaos --trials N --seed S --results DIR."""
    p = argparse.ArgumentParser(prog="vrmig-chaos")
    p.add_argument("--trials", type=int, default=30)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--results", type=Path, default=Path("results/chaos"))
    a = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="chaos: %(message)s", stream=sys.stderr)
    if os.geteuid() != 0:
        print("chaos: must run as root", file=sys.stderr)
        return 2
    totals = run_chaos(a.trials, a.seed, a.results)
    for prob in totals.problems:
        print(f"  {prob}")
    print(
        f"chaos: trials {totals.trials}, faults {totals.faults} ({totals.faults_injected} injected mid-run), "
        f"signals {totals.signals}, "
        f"leaks {totals.leaks}, lost results {totals.lost_results}"
    )
    return 0 if totals.leaks == 0 and totals.lost_results == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
