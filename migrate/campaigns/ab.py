"""The nightly's in-night A/B: tonight's commit against the accepted one, on one machine, in one night.

Why it exists: a night is otherwise compared with the pooled runs of the accepted nights, and the
machine drifts between nights (of the captured pre-copy nights, the sd of a night's mean log outage
was about 0.19 beyond what its own runs' noise explains, docs/measurements/2026-11-26-precopy-ab-power.md).
That drift does not shrink with more runs, so no number of repetitions lets the history comparison
see a 1.5x longer pre-copy outage.  Runs of both commits interleaved in the same night share the
machine's state, and the drift cancels.

What runs: the matrix's ``[ab]`` section names one point, the runs per arm, the level and the
metric rules.  The accepted commit (by default the git commit of the most recently accepted night)
is checked out into a temporary git worktree; its helpers are built there (``make -C probes``,
``make -C crosstraffic``) and its router guest into a cache of its own,
``<cache>/ab/<commit>`` (``.debs`` shared with the main cache), so that arm measures the accepted
commit's orchestrator, instruments and guest.  Tonight's arm runs from this checkout.  Both arms
run the same way: ``python -m migrate run <the point's Make variables>`` as a child process in its
tree, with SIGTERM as its parent-death signal (a killed night's child tears its own run down), in
``<night>/ab/{accepted,tonight}/``.  The runs go in pairs whose order (accepted first or tonight
first) is drawn from the night's seed.  Both arms' runs are analysed by tonight's analysis from
their raw traces, so the A/B sees what changed in the measured system (orchestrator, guest,
instruments), not in the analysis; a changed analysis is the history comparison's to see.
:func:`analysis.stats.regression.decide_ab` judges each metric at the section's level.

Only the embedded testbed: on a lab the accepted commit would have to be deployed to the hosts.

Written here rather than taken from a library: no benchmarking tool of the field (airspeed velocity,
pytest-benchmark) runs an arbitrary experiment command from two commits of its own repository
interleaved; asv's ``continuous`` compares two commits but runs Python benchmark functions inside
its own environments, not a root experiment with namespaces and QEMU."""

from __future__ import annotations

import json
import logging
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from analysis.stats.regression import Rule, Verdict, decide_ab
from migrate.core.atomic import write_json
from migrate.core.errors import ConfigError, VrmigError
from migrate.core.meta import REPO
from migrate.core.rundir import META_JSON, read_meta

log = logging.getLogger(__name__)

ARMS = ("accepted", "tonight")
AB_SUBDIR = "ab"
AB_JSON = "ab.json"
#: a run of the A/B point that takes longer than this is stopped (SIGTERM) and counted as failed
RUN_TIMEOUT_S = 900.0
BUILD_TIMEOUT_S = 1800.0


@dataclass(frozen=True)
class AbSpec:
    """The matrix's ``[ab]`` section: the point (its label and Make variables as make passes
    them), runs per arm, the level, the time budget and the metric rules."""

    point: str
    variables: tuple[tuple[str, str], ...]
    reps: int
    alpha: float
    budget_s: float
    rules: tuple[Rule, ...]


@dataclass
class AbResult:
    """What the A/B did and decided (``checks``: one verdict per rule, or one error/skip)."""

    commits: dict[str, str | None]
    checks: list[Verdict]
    runs: list[dict[str, Any]] = field(default_factory=list)
    schedule: list[str] = field(default_factory=list)
    budget_stop: dict[str, Any] | None = None
    build_s: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """ab.json."""
        from dataclasses import asdict

        return {
            "commits": self.commits,
            "schedule": self.schedule,
            "runs": self.runs,
            "budget_stop": self.budget_stop,
            "build_s": self.build_s,
            "checks": [asdict(v) for v in self.checks],
        }


def resolve_commit(ref: str) -> str:
    """The full commit id of ``ref`` in this checkout; ConfigError (one line) if there is none."""
    res = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if res.returncode != 0 or not res.stdout.strip():
        raise ConfigError(f"AB={ref!r} is not a commit of {REPO}: give a commit id or ref (or AB=none)")
    return res.stdout.strip()


def clean_commit(recorded: str | None) -> str | None:
    """The commit of a recorded ``git_commit`` (without '-dirty'; None if none)."""
    return recorded.removesuffix("-dirty") if recorded else None


def pair_order(reps: int, seed: int) -> list[str]:
    """``2 × reps`` arm names: ``reps`` pairs, each (accepted, tonight) or (tonight, accepted)
    by a coin drawn from ``seed``."""
    rng = random.Random(f"ab-{seed}")
    out: list[str] = []
    for _ in range(reps):
        out += list(ARMS) if rng.random() < 0.5 else list(reversed(ARMS))
    return out


def run_argv(spec: AbSpec, results: Path) -> list[str]:
    """``python -m migrate run`` with the point's variables as the flags make would pass."""
    from migrate.campaigns import campaign as cp

    known = cp.variables("migrate")
    argv = [sys.executable, "-m", "migrate", "run"]
    for var, text in spec.variables:
        argv += [f"--{known[var]}", text]
    return [*argv, "--results", str(results)]


def _check(argv: list[str], cwd: Path, log_path: Path, env: Mapping[str, str] | None = None) -> None:
    with open(log_path, "ab") as out:
        res = subprocess.run(argv, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, env=env, timeout=BUILD_TIMEOUT_S,
                             check=False)  # fmt: skip
    if res.returncode != 0:
        raise VrmigError(f"A/B: {' '.join(argv)} in {cwd} failed (exit {res.returncode}); see {log_path}")


TREE_PREFIX = "vrmig-ab-"
OWNER_FILE = "owner.json"


@contextmanager
def accepted_tree(commit: str, work: Path) -> Iterator[Path]:
    """A git worktree of ``commit`` at ``work/src``, removed (and pruned from git's list) at the
    end.  ``work/owner.json`` names this process, for :func:`clean_stale_trees` after a SIGKILL."""
    from migrate.core.registry import proc_starttime

    write_json(work / OWNER_FILE, {"pid": os.getpid(), "starttime": proc_starttime(os.getpid())})
    src = work / "src"
    res = subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(src), commit],
                         capture_output=True, text=True, check=False)  # fmt: skip
    if res.returncode != 0:
        raise VrmigError(f"A/B: git worktree add of {commit} failed: {res.stderr.strip()}")
    try:
        yield src
    finally:
        _remove_tree(work)


def _remove_tree(work: Path) -> None:
    subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(work / "src")],
                   capture_output=True, check=False)  # fmt: skip
    subprocess.run(["git", "-C", str(REPO), "worktree", "prune"], capture_output=True, check=False)


def clean_stale_trees(tmp: Path | None = None) -> list[str]:
    """``make clean-testbed``: remove the accepted commit's worktrees whose night is dead (its
    owner.json names a process that no longer exists), with git's record of them."""
    from migrate.core.registry import pid_alive

    removed = []
    for work in sorted(Path(tmp or tempfile.gettempdir()).glob(f"{TREE_PREFIX}*")):
        try:
            owner = json.loads((work / OWNER_FILE).read_text())
        except (OSError, ValueError):
            continue  # not (yet) one of ours
        if pid_alive(int(owner["pid"]), owner.get("starttime")):
            continue
        _remove_tree(work)
        shutil.rmtree(work, ignore_errors=True)
        removed.append(str(work))
    return removed


#: another commit's cache (about 22 MB, rebuilt in about 7 s here) is removed once unused this long
CACHE_KEEP_S = 7 * 86400.0


def arm_cache(commit: str) -> Path:
    """The accepted arm's cache: ``<cache>/ab/<commit>``, its ``debs`` the main cache's; other
    commits' caches unused for :data:`CACHE_KEEP_S` are removed."""
    from routers.paths import default_cache

    main = default_cache()
    cache = main / "ab" / commit
    for other in (main / "ab").glob("*") if (main / "ab").is_dir() else ():
        if other.name != commit and other.is_dir() and time.time() - other.stat().st_mtime > CACHE_KEEP_S:
            shutil.rmtree(other, ignore_errors=True)
    cache.mkdir(parents=True, exist_ok=True)
    os.utime(cache)  # used tonight
    (main / "debs").mkdir(parents=True, exist_ok=True)
    if not (cache / "debs").exists():
        (cache / "debs").symlink_to(main / "debs")
    return cache


def tree_env(src: Path, cache: Path | None = None) -> dict[str, str]:
    """The environment of a command run from the tree ``src``: its packages first on the path,
    and ``cache`` as its VRMIG_CACHE (None: this machine's)."""
    return {**os.environ, "PYTHONPATH": str(src), **({"VRMIG_CACHE": str(cache)} if cache else {})}


def build_tree(src: Path, router: str, cache: Path, log_path: Path) -> None:
    """The accepted tree's helpers and router guest (``routers build`` is idempotent: a guest
    already built for this commit is kept)."""
    for sub in ("probes", "crosstraffic"):
        _check(["make", "-C", str(src / sub)], src, log_path)
    _check([sys.executable, "-m", "routers", "build", "--profile", router], src, log_path, tree_env(src, cache))


def run_one(argv: list[str], cwd: Path, env: Mapping[str, str], log_path: Path) -> Path | None:
    """One ``vrmig run`` child in ``cwd``; its results directory (the last line it printed), or
    None if it printed none.  SIGTERM is its parent-death signal; on any exception here (Ctrl-C)
    it gets SIGTERM and is waited for, so it tears its testbed down before this returns."""
    from migrate.core.procs import terminate_and_wait, with_pdeathsig

    with open(log_path, "ab") as err:
        proc = subprocess.Popen(with_pdeathsig(argv, signal="TERM"), cwd=cwd, env=dict(env),
                                stdout=subprocess.PIPE, stderr=err)  # fmt: skip
        try:
            out, _ = proc.communicate(timeout=RUN_TIMEOUT_S)
        except BaseException:
            terminate_and_wait(proc, 120.0)
            raise
    lines = out.decode(errors="replace").strip().splitlines()
    if not lines:
        return None
    d = Path(lines[-1].strip())
    return d if d.is_dir() and (d / META_JSON).is_file() else None


def run_row(run_dir: Path | None, arm: str, i: int) -> dict[str, Any]:
    """A run as :func:`~analysis.stats.regression.decide_ab` reads it: status and failure from
    its meta.json, the metrics from tonight's analysis of its raw traces."""
    from analysis.run import analyse_run
    from analysis.stats.aggregate import run_record
    from migrate.campaigns.history import history_fields

    row: dict[str, Any] = {"arm": arm, "index": i, "run_dir": str(run_dir) if run_dir else None}
    if run_dir is None:
        return {**row, "status": "failed", "failure": "the run printed no results directory"}
    meta = read_meta(run_dir)
    row.update(status=meta.get("status"), failure=meta.get("failure"), git_commit=meta.get("git_commit"),
               accel=meta.get("accel"))  # fmt: skip
    try:
        flat = run_record(analyse_run(run_dir).to_dict(), meta)
    except Exception as err:  # a run too broken to analyse is a failed run of its arm
        return {**row, "status": "failed", "failure": f"analysis: {err}"}
    row.update(history_fields(flat))
    return row


def _verdicts(spec: AbSpec, status: str, reason: str) -> list[Verdict]:
    return [Verdict(metric=f"{r.metric} A/B", status=status, reason=reason) for r in spec.rules]


def run_ab(spec: AbSpec, accepted: str, tonight: str | None, night_dir: Path, seed: int) -> AbResult:
    """Run and judge the A/B (see the module docstring).  ``accepted``: the accepted commit (full
    id); ``tonight``: this checkout's recorded commit.  Writes ``<night_dir>/ab/ab.json``."""
    ab_dir = night_dir / AB_SUBDIR
    ab_dir.mkdir()
    commits = {"accepted": accepted, "tonight": tonight}
    order = pair_order(spec.reps, seed)
    res = AbResult(commits=commits, checks=[], schedule=order)
    router = dict(spec.variables).get("ROUTER", "frr")
    with tempfile.TemporaryDirectory(prefix=TREE_PREFIX) as tmp, accepted_tree(accepted, Path(tmp)) as src:
        t0 = time.monotonic()
        cache = arm_cache(accepted)
        build_tree(src, router, cache, ab_dir / "build.log")
        res.build_s = round(time.monotonic() - t0, 1)
        trees = {"accepted": (src, tree_env(src, cache)), "tonight": (REPO, tree_env(REPO))}
        for arm in ARMS:
            (ab_dir / arm).mkdir()
        start, spent = time.monotonic(), []
        for i, arm in enumerate(order):
            if i % 2 == 0 and spent:
                per_run = sum(spent) / len(spent)
                if time.monotonic() - start + 2 * per_run > spec.budget_s:
                    res.budget_stop = {"pairs_done": i // 2, "pairs_not_started": (len(order) - i) // 2,
                                       "budget_s": spec.budget_s}  # fmt: skip
                    log.warning("A/B: time budget reached after %d pair(s)", i // 2)
                    break
            cwd, env = trees[arm]
            t = time.monotonic()
            run_dir = run_one(run_argv(spec, ab_dir / arm), cwd, env, ab_dir / f"{arm}.log")
            spent.append(time.monotonic() - t)
            row = run_row(run_dir, arm, i)
            res.runs.append(row)
            write_json(ab_dir / AB_JSON, res.to_dict())
            log.info("A/B run %d/%d (%s): %s", i + 1, len(order), arm, row.get("status"))
    res.checks = judge_ab(spec, res.runs, accepted)
    write_json(ab_dir / AB_JSON, res.to_dict())
    return res


def judge_ab(spec: AbSpec, runs: Sequence[Mapping[str, Any]], accepted: str) -> list[Verdict]:
    """The A/B's verdicts from its runs; an error when an accepted arm's run did not record the
    accepted commit, clean (the worktree did not run what it should have)."""
    arm = {a: [r for r in runs if r["arm"] == a] for a in ARMS}
    wrong = {str(r["git_commit"]) for r in arm["accepted"] if "git_commit" in r} - {accepted}
    if wrong:
        return _verdicts(spec, "error", f"the accepted arm's runs recorded commit(s) {sorted(wrong)}, not {accepted}")
    accels = {r.get("accel") for r in runs if r.get("status") == "completed"}
    if len(accels) > 1:
        return _verdicts(spec, "error", f"the arms ran with different accelerators {sorted(map(str, accels))}")
    return [
        replace(v, metric=f"{v.metric} A/B") for v in decide_ab(spec.rules, arm["accepted"], arm["tonight"], spec.alpha)
    ]


def skipped(spec: AbSpec, reason: str) -> AbResult:
    """An A/B not run, with the reason."""
    return AbResult(commits={}, checks=_verdicts(spec, "skipped", reason))
