"""``vrmig sweep`` (= ``make sweep``): repeated migrations over a grid, in randomized order,
resumable.

A *plan* is a list of grid points (one Scenario each) × REPS repetitions, shuffled with a
recorded seed.  Each run is one ``migrate.experiment.run.run()`` whose results directory lives in the sweep
directory's ``runs/``.  After every run ``state.json`` is rewritten atomically, so ``RESUME=<sweep
dir>`` skips every run already completed or failed (failed migrations are data), adopts a run
that finished just before the sweep process died, and redoes only the run that was in flight.
Nothing is ever deleted: an interrupted attempt keeps its directory and is listed in the state."""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import itertools
import logging
import os
import random
import secrets
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from migrate.campaigns import sweepdir as sd
from migrate.core import meta as metamod
from migrate.core.atomic import write_json
from migrate.core.errors import ConfigError, Interrupted, VrmigError
from migrate.core.knobs import KNOB_BY_VAR, label_part
from migrate.core.progress import Progress
from migrate.core.rundir import META_JSON
from migrate.core.sighold import interruptible
from migrate.core.units import format_rate, parse_rate_bps
from migrate.labs.where import recorded_where, where_for
from migrate.model.scenario import Scenario, parse_bfd
from migrate.testbed.results import is_opening, prepare_results_root

if TYPE_CHECKING:
    from migrate.campaigns.campaign import Campaign
    from migrate.campaigns.reporting import Outputs

log = logging.getLogger(__name__)

MAX_REPS = 1000
MAX_RUNS = 100_000
LOCK_NAME = ".lock"
CAMPAIGN_COPY = "campaign.toml"  # the campaign file a sweep directory runs (make sweep writes its own)

OnRun = Callable[[dict[str, Any], Path, dict[str, Any]], None]


@dataclass(frozen=True)
class PlanPoint:
    """One grid point: a label (unique in the plan) and its scenario."""

    label: str
    scenario: Scenario


@dataclass(frozen=True)
class Plan:
    """Points × reps with a seed for the randomized order; ``grid`` is recorded as is in meta.json."""

    kind: str
    points: tuple[PlanPoint, ...]
    reps: int
    seed: int
    grid: dict[str, Any]

    def order(self) -> list[dict[str, Any]]:
        """Every run (run_id, point, rep), shuffled reproducibly from the seed."""
        runs = [
            {"run_id": f"{p.label}-r{rep:02d}", "point": p.label, "rep": rep}
            for p in self.points
            for rep in range(1, self.reps + 1)
        ]
        random.Random(self.seed).shuffle(runs)
        return runs


def parse_list(text: str, what: str) -> list[str]:
    """Comma-separated, non-empty items (whitespace ignored)."""
    items = [t.strip() for t in str(text).split(",")]
    if not text or any(not t for t in items):
        example = "1500,64" if what == "SIZES" else "0,100M,200M"
        raise ConfigError(f"{what}={text!r} must be a comma-separated list without empty items, e.g. {example}")
    return items


def parse_rates(text: str) -> tuple[int, ...]:
    """RATES=0,100M,... -> bit/s, distinct."""
    rates = tuple(parse_rate_bps(t, "RATES") for t in parse_list(text, "RATES"))
    if len(set(rates)) != len(rates):
        raise ConfigError(f"RATES={text!r} lists a rate twice")
    return rates


def parse_sizes(text: str) -> tuple[int, ...]:
    """SIZES=1500,64 -> frame bytes, distinct."""
    sizes = []
    for t in parse_list(text, "SIZES"):
        try:
            sizes.append(int(t))
        except ValueError:
            raise ConfigError(f"SIZES: {t!r} is not a whole number of frame bytes") from None
    if len(set(sizes)) != len(sizes):
        raise ConfigError(f"SIZES={text!r} lists a size twice")
    return tuple(sizes)


def parse_modes(text: str) -> tuple[str, ...]:
    """MODES=precopy,stopcopy -> distinct mode names (each checked by the Scenario)."""
    modes = tuple(parse_list(text, "MODES"))
    if len(set(modes)) != len(modes):
        raise ConfigError(f"MODES={text!r} lists a mode twice")
    return modes


def parse_bfds(text: str) -> tuple[tuple[int, int], ...]:
    """BFDS=10x3,50x3,300x3 -> (interval ms, multiplier) pairs, distinct (ranges checked by the Scenario)."""
    try:
        bfds = tuple(parse_bfd(t) for t in parse_list(text, "BFDS"))
    except ConfigError as err:
        raise ConfigError(f"BFDS: {err}") from None
    if len(set(bfds)) != len(bfds):
        raise ConfigError(f"BFDS={text!r} lists a timer setting twice")
    return bfds


def check_reps(reps: int) -> int:
    """REPS must be 1..MAX_REPS."""
    if not 1 <= reps <= MAX_REPS:
        raise ConfigError(f"REPS={reps} must be between 1 and {MAX_REPS}")
    return reps


def point_scenario(template: Scenario, what: str, **changes: Any) -> Scenario:
    """``template`` with ``changes``, validated; errors name the grid variable."""
    try:
        return dataclasses.replace(template, **changes)
    except ConfigError as err:
        raise ConfigError(f"{what}: {err}") from None


def knob_axis_values(axes: Sequence[tuple[str, Sequence[str]]]) -> list[list[tuple[str, dict[str, Any]]]]:
    """Each knob axis (Make variable, values' text) as its (label part, Scenario fields) per value."""
    out = []
    for var, texts in axes:
        knob = KNOB_BY_VAR[var]
        out.append([(label_part(knob, t), {**knob.unset(), **knob.parse(t)}) for t in texts])
    return out


def grid_plan(
    template: Scenario,
    rates: tuple[int, ...],
    sizes: tuple[int, ...],
    reps: int,
    seed: int,
    modes: tuple[str, ...] = (),
    bfds: tuple[tuple[int, int], ...] = (),
    knob_axes: Sequence[tuple[str, Sequence[str]]] = (),
) -> Plan:
    """The MODES × BFDS × knobs × SIZES × RATES plan of ``make sweep`` (MODES, BFDS and the QEMU
    knob axes optional: the template's otherwise; ``knob_axes``: (Make variable, its values'
    text), e.g. ("MULTIFD", ("1", "4"))); every point is validated before anything starts."""
    check_reps(reps)
    if bfds and "bfd" not in template.peering_protocols:
        raise ConfigError("BFDS= sweeps BFD's timers: set PEERING=bgp,bfd as well")
    what = "/".join(["MODES/BFDS", *(var for var, _ in knob_axes), "RATES/SIZES"])
    points = []
    for mode in modes or (template.mode,):
        for bfd in bfds or ((template.bfd_interval_ms, template.bfd_multiplier),):
            for combo in itertools.product(*knob_axis_values(knob_axes)):
                for s in sizes:
                    for r in rates:
                        label = "-".join(
                            [*([mode] if modes else []), *([f"bfd{bfd[0]}x{bfd[1]}"] if bfds else []),
                             *(part for part, _ in combo), format_rate(r), str(s)]
                        )  # fmt: skip
                        changes = {"rate_bps": r, "frame_bytes": s, "mode": mode,
                                   "bfd_interval_ms": bfd[0], "bfd_multiplier": bfd[1]}  # fmt: skip
                        for _, fields in combo:
                            changes.update(fields)
                        points.append(PlanPoint(label, point_scenario(template, what, **changes)))
    if len(points) * reps > MAX_RUNS:
        raise ConfigError(f"the grid has {len(points) * reps} runs; at most {MAX_RUNS}")
    grid = {"rates_bps": list(rates), "frame_bytes": list(sizes), "template": template.to_dict()}
    if modes:
        grid["modes"] = list(modes)
    if bfds:
        grid["bfds"] = [f"{i}x{m}" for i, m in bfds]
    if knob_axes:
        grid["knobs"] = {var: list(texts) for var, texts in knob_axes}
    return Plan("sweep", tuple(points), reps, seed, grid)


def campaign_plan(c: Campaign, seed: int) -> Plan:
    """The plan of a migrate campaign: its points × reps, in an order shuffled with ``seed``."""
    points = tuple(PlanPoint(p.label, p.scenario) for p in c.points if p.scenario is not None)
    if len(points) * c.reps > MAX_RUNS:
        raise ConfigError(f"{c.path}: the campaign has {len(points) * c.reps} runs; at most {MAX_RUNS}")
    return Plan("sweep", points, c.reps, seed, {"campaign": c.name, "axes": list(c.axes),
                                                "template": points[0].scenario.to_dict()})  # fmt: skip


def new_campaign(c: Campaign, results_root: Path, testbed: Path | None = None) -> Path:
    """Validate everything (the lab, the driver's preflight), then create the campaign's
    directory: a sweep directory with the campaign file copied in and meta.json ``campaign``."""
    seed = c.seed if c.seed is not None else new_seed()
    plan = campaign_plan(c, seed)
    check_lab(plan.points, testbed)
    first = plan.points[0]
    try:
        vers = versions(first.scenario, testbed)
    except ConfigError as err:
        raise c.refusal(first.label, err) from None

    def runs_on(x: Scenario) -> tuple[Any, ...]:  # what decides the hypervisor a point runs
        return (x.hv, x.driver, x.qemu, x.qemu_firmware)

    by_stack = {runs_on(first.scenario): vers}
    for p in plan.points[1:]:
        if runs_on(p.scenario) not in by_stack:
            try:  # each hypervisor's and each QEMU='s preflight before anything runs
                by_stack[runs_on(p.scenario)] = versions(p.scenario, testbed)
            except ConfigError as err:
                raise c.refusal(p.label, err) from None
    from migrate.experiment.place import check_knobs as check_point

    where = where_for(testbed)
    for p in plan.points:  # every point's knobs against the QEMU and libvirt that will run it
        try:
            check_point(p.scenario, by_stack[runs_on(p.scenario)].get("hypervisor") or {}, probe=where.runs_here)
        except ConfigError as err:
            raise c.refusal(p.label, err) from None
    prepare_results_root(results_root)
    meta = plan_meta(plan, vers, sys.argv, testbed)
    meta["campaign"] = {**c.record(), "seed": seed, "seed_given": c.seed is not None}
    path = create_sweep_dir(results_root, f"{sd.stamp_utc()}-campaign-{c.name}", meta)
    (path / CAMPAIGN_COPY).write_text(c.text)
    return path


def new_distributed_campaign(c: Campaign, results_root: Path, engine: Any, choice: str) -> Path:
    """A campaign whose runs go to the lab workers of ``engine`` (migrate.campaigns.distributed):
    every lab reports and is admitted first (one line and nothing created when one cannot be);
    ``choice`` axis: each point once per lab, its label ``<point>@<lab>``."""
    from migrate.campaigns import distributed as dd
    from migrate.experiment.place import check_knobs as check_point

    seed = c.seed if c.seed is not None else new_seed()
    plan = campaign_plan(c, seed)
    stacks: dict[str, dict[str, Any]] = {}
    for p in plan.points:
        stacks.setdefault(dd.stack_key(p.scenario.to_dict()), p.scenario.to_dict())
    labs = engine.labs(stacks, choice)
    by_lab: dict[str, str | None] = {}
    points: list[PlanPoint] = []
    for p in plan.points:
        key = dd.stack_key(p.scenario.to_dict())
        admitting = labs.admitting(key)
        for addr in admitting:
            try:  # the point's knobs against the QEMU and libvirt of every lab that may run it
                check_point(p.scenario, labs.reports[addr]["stacks"][key].get("hypervisor") or {}, probe=False)
            except ConfigError as err:
                raise c.refusal(p.label, ConfigError(f"lab {labs.names[addr]}: {err}")) from None
        if choice == "axis":
            for addr in sorted(admitting, key=lambda a: labs.names[a]):
                label = f"{p.label}@{labs.names[addr]}"
                points.append(PlanPoint(label, p.scenario))
                by_lab[label] = labs.names[addr]
        else:
            points.append(p)
    plan = dataclasses.replace(plan, points=tuple(points))
    first = labs.admitting(dd.stack_key(plan.points[0].scenario.to_dict()))[0]
    vers = labs.reports[first]["stacks"][dd.stack_key(plan.points[0].scenario.to_dict())]
    prepare_results_root(results_root)
    meta = plan_meta(plan, vers, sys.argv, None)
    for p in meta["points"]:
        if by_lab.get(p["label"]):
            p["lab"] = by_lab[p["label"]]
    meta["campaign"] = {**c.record(), "seed": seed, "seed_given": c.seed is not None}
    meta["engine"] = {"engine": "dask.distributed", "scheduler": engine.address, "labs_choice": choice,
                      "labs": labs.record(), "differences": dd.differences(
                          {r["lab"]: r.get("fingerprint") or {} for r in labs.reports.values()})}  # fmt: skip
    path = create_sweep_dir(results_root, f"{sd.stamp_utc()}-campaign-{c.name}", meta)
    (path / CAMPAIGN_COPY).write_text(c.text)
    return path


def new_seed() -> int:
    """A fresh random seed (recorded in meta.json so the order can be reproduced)."""
    return secrets.randbelow(2**31)


def plan_meta(plan: Plan, versions: dict[str, Any], argv: list[str], testbed: Path | None = None) -> dict[str, Any]:
    """meta.json of a new sweep directory (``testbed``: its lab inventory, recorded as
    :func:`migrate.labs.where.testbed_record`)."""
    meta = {
        "format_version": sd.FORMAT_VERSION,
        "kind": plan.kind,
        "created_utc": sd.now_utc(),
        "reps": plan.reps,
        "seed": plan.seed,
        "grid": plan.grid,
        "points": [{"label": p.label, "scenario": p.scenario.to_dict()} for p in plan.points],
        "order": plan.order(),
        "versions": versions,
        "command": argv,
    }
    where_for(testbed).record(meta)
    return meta


def check_lab(points: Sequence[PlanPoint], testbed: Path | None) -> None:
    """With ``testbed``: load the inventory and refuse (ConfigError, one line) any point a lab run
    cannot do, before anything is created."""
    from migrate.experiment.place import place_for

    place = place_for(testbed)
    for p in points:
        place.admit(p.scenario)


def create_sweep_dir(parent: Path, name: str, meta: dict[str, Any]) -> Path:
    """Create ``parent/<name>`` (never an existing one) with its marker, meta.json and state."""
    parent.mkdir(parents=True, exist_ok=True)
    path = parent / name
    path.mkdir()
    (path / sd.SWEEP_MARKER).write_text("vrmig sweep directory\n")
    (path / sd.RUNS_SUBDIR).mkdir()
    write_json(path / sd.META_NAME, meta)
    sd.save_state(path, sd.new_state())
    return path


def versions(scenario: Scenario, testbed: Path | None = None) -> dict[str, Any]:
    """Preflight (root, tools, driver) and the versions worth recording; raises before anything is
    created.  With ``testbed`` (a lab inventory) the lab's hosts are checked as a lab run checks
    them and the accelerator and QEMU are R1's and R2's, not this machine's."""
    from migrate.experiment.place import place_for, preflight

    place = place_for(testbed)
    place.admit(scenario)
    place.preflight()
    _, facts = preflight(scenario, place)
    return metamod.versions_of(facts)


def check_knobs(points: Sequence[PlanPoint], vers: dict[str, Any], testbed: Path | None = None) -> None:
    """Every point's QEMU knobs against the QEMU (and libvirt) that will run them (the template's
    preflight checked only its own): ConfigError, one line, before anything is created."""
    from migrate.experiment.place import check_knobs as check_point

    hv = vers.get("hypervisor") or {}
    where = where_for(testbed)
    for p in points:
        try:
            check_point(p.scenario, hv, probe=where.runs_here)
        except ConfigError as err:
            raise ConfigError(f"point {p.label}: {err}") from None


@contextlib.contextmanager
def locked(sweep_dir: Path) -> Iterator[None]:
    """Hold an exclusive lock on the sweep directory (released by the kernel if we die)."""
    fd = os.open(sweep_dir / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ConfigError(f"{sweep_dir} is being run by another vrmig process") from None
        yield
    finally:
        os.close(fd)


def _run_meta(run_dir: Path) -> dict[str, Any]:
    try:
        return sd.read_json(run_dir / META_JSON, "run")
    except ConfigError:
        return {}


def reconcile(
    sweep_dir: Path,
    meta: dict[str, Any],
    state: dict[str, Any],
    note: str = "abandoned: the sweep process died during this run",
) -> None:
    """After a stop or crash: adopt a run directory of the run in flight that finished but was not
    yet recorded, and list any other unrecorded directory as an attempt (kept, never counted)."""
    runs_root = sweep_dir / sd.RUNS_SUBDIR
    referenced = {r["run_dir"] for r in state["runs"].values()} | {a.get("run_dir") for a in state["attempts"]}
    current = state.get("current") or {}
    scenarios = {p["label"]: p["scenario"] for p in meta["points"]}
    for d in sorted(p for p in runs_root.iterdir() if p.is_dir() and not is_opening(p)) if runs_root.is_dir() else []:
        rel = f"{sd.RUNS_SUBDIR}/{d.name}"
        if rel in referenced:
            continue
        rmeta = _run_meta(d)
        run_id = current.get("run_id")
        want = scenarios.get(current.get("point")) or {}
        got = rmeta.get("scenario") if isinstance(rmeta.get("scenario"), dict) else {}
        same = bool(run_id and want and all(got.get(k) == v for k, v in want.items()))
        if same and rmeta.get("status") in sd.DONE and run_id not in state["runs"]:
            state["runs"][run_id] = {
                "status": rmeta["status"],
                "run_dir": rel,
                "point": current.get("point"),
                "rep": current.get("rep"),
                "failure": rmeta.get("failure"),
                "failure_class": rmeta.get("failure_class"),
                "started_utc": rmeta.get("created_utc"),
                "finished_utc": rmeta.get("finished_utc"),
                "note": "adopted: finished just before the sweep process stopped",
            }
            log.info("adopted %s for %s (it finished before the sweep stopped)", rel, run_id)
        else:
            state["attempts"].append(
                {
                    "run_id": run_id if same else None,
                    "run_dir": rel,
                    "status": rmeta.get("status"),
                    "note": note if same else "not part of any recorded run",
                }
            )
            log.info("%s (%s) kept as an attempt; its run will be redone", rel, rmeta.get("status"))
    state["current"] = None
    sd.save_state(sweep_dir, state)


def execute(
    sweep_dir: Path,
    meta: dict[str, Any],
    state: dict[str, Any],
    deadline_mono: float | None = None,
    on_run: OnRun | None = None,
    testbed: Path | None = None,
) -> dict[str, Any]:
    """Run every run of the order that has no recorded outcome (on the lab of ``testbed``, if
    given); returns the final state.

    ``deadline_mono`` (time.monotonic) stops starting new runs once the next one would likely
    end after it; ``on_run(order_item, run_dir, run_record)`` is called after each finished run."""
    from migrate.experiment.run import run

    scenarios = {p["label"]: _scenario(p) for p in meta["points"]}
    runs_root = sweep_dir / sd.RUNS_SUBDIR
    order = meta["order"]
    pending = [r for r in order if r["run_id"] not in state["runs"]]
    log.info("sweep %s: %d of %d runs to do", sweep_dir.name, len(pending), len(order))
    progress = campaign_progress(meta, state)
    with interruptible(), progress:
        for item in pending:
            mean = progress.mean_s() or 0.0
            if deadline_mono is not None and time.monotonic() + mean > deadline_mono:
                left = len(order) - len(state["runs"])
                log.warning("time budget reached: %d run(s) not started", left)
                state["budget_stop"] = {"utc": sd.now_utc(), "runs_not_started": left}
                sd.save_state(sweep_dir, state)
                break
            log.info("run %s (%d/%d)", item["run_id"], len(state["runs"]) + 1, len(order))
            state["current"] = {**item, "started_utc": sd.now_utc()}
            sd.save_state(sweep_dir, state)
            progress.start(item["run_id"])
            t0 = time.monotonic()
            try:
                run_dir = run(scenarios[item["point"]], runs_root, testbed=testbed)
            except Interrupted:
                reconcile(sweep_dir, meta, state, "stopped during this run; redone on resume")
                raise
            except VrmigError:
                state["current"] = None
                sd.save_state(sweep_dir, state)
                raise
            rmeta = _run_meta(run_dir)
            record = {
                "status": rmeta.get("status") if rmeta.get("status") in sd.DONE else "failed",
                "run_dir": f"{sd.RUNS_SUBDIR}/{run_dir.name}",
                "point": item["point"],
                "rep": item["rep"],
                "failure": rmeta.get("failure"),
                "failure_class": rmeta.get("failure_class"),
                "started_utc": state["current"]["started_utc"],
                "finished_utc": sd.now_utc(),
                "elapsed_s": round(time.monotonic() - t0, 3),
            }
            state["runs"][item["run_id"]] = record
            state["current"] = None
            sd.save_state(sweep_dir, state)
            failed = record["status"] == "failed"
            progress.finish(not failed, str(record["failure_class"] or "unclassified") if failed else None)
            if on_run is not None:
                on_run(item, run_dir, record)
    return state


def campaign_progress(meta: dict[str, Any], state: dict[str, Any]) -> Progress:
    """The progress of a sweep's or campaign's whole order (named after the campaign)."""
    name = (meta.get("campaign") or {}).get("name")
    return _progress(f"campaign {name}" if name else meta["kind"], state, len(meta["order"]))


def _progress(kind: str, state: dict[str, Any], total: int) -> Progress:
    """Progress over the whole order: runs recorded by earlier sessions count as done, failed (by
    failure class) and measured (their elapsed_s)."""
    runs = state["runs"].values()
    failed = Counter(str(r.get("failure_class") or "unclassified") for r in runs if r["status"] == "failed")
    durations = [r["elapsed_s"] for r in runs if isinstance(r.get("elapsed_s"), int | float)]
    return Progress(kind, total, "runs", done=len(runs), failed=failed, durations_s=durations)


def _scenario(point: dict[str, Any]) -> Scenario:
    try:
        return Scenario(**point["scenario"])
    except (TypeError, KeyError) as err:
        raise ConfigError(f"point {point.get('label')!r}: its scenario cannot be read by this vrmig ({err})") from None


def start_session(sweep_dir: Path, state: dict[str, Any], vers: dict[str, Any]) -> None:
    """Record who (pid, versions) ran the sweep from when: resumed sweeps show every session."""
    state.setdefault("sessions", []).append(
        {
            "started_utc": sd.now_utc(),
            "pid": os.getpid(),
            "git_commit": vers.get("git_commit"),
            "qemu": (vers.get("hypervisor") or {}).get("qemu"),
            "accel": (vers.get("hypervisor") or {}).get("accel"),
            "argv": sys.argv,
        }
    )
    sd.save_state(sweep_dir, state)


def new_sweep(plan: Plan, results_root: Path, testbed: Path | None = None) -> Path:
    """Validate everything, then create the sweep directory; returns it (nothing run yet).
    ``testbed``: every run on the hosts of this lab inventory (recorded in meta.json ``testbed``
    and used again by RESUME)."""
    template = plan.points[0].scenario
    check_lab(plan.points, testbed)
    vers = versions(template, testbed)
    check_knobs(plan.points[1:], vers, testbed)
    prepare_results_root(results_root)
    modes = "+".join(plan.grid.get("modes") or [template.mode])
    name = f"{sd.stamp_utc()}-sweep-{template.hv}-{modes}-{len(plan.grid['rates_bps'])}x"
    name += f"{len(plan.grid['frame_bytes'])}x{plan.reps}"
    if plan.grid.get("bfds"):
        name += f"-bfd{len(plan.grid['bfds'])}"
    for var, texts in (plan.grid.get("knobs") or {}).items():
        name += f"-{var.lower()}{len(texts)}"
    return create_sweep_dir(results_root, name, plan_meta(plan, vers, sys.argv, testbed))


def sweep_testbed(sweep_dir: Path, meta: dict[str, Any], given: Path | None) -> Path | None:
    """The lab inventory a sweep runs on: the one it was started with (None: the embedded
    testbed).  A RESUME with another TESTBED, or whose inventory is gone or changed, is refused
    (ConfigError, one line): its points would mix testbeds."""
    where = recorded_where(meta)
    where.check_resume(sweep_dir, meta, given)
    return where.inventory


def recorded_accels(sweep_dir: Path, state: dict[str, Any]) -> dict[str, int]:
    """Accelerator -> number of recorded runs of the sweep that used it (from their meta.json)."""
    out: dict[str, int] = {}
    for rec in state["runs"].values():
        accel = _run_meta(sweep_dir / rec["run_dir"]).get("accel")
        if accel:
            out[str(accel)] = out.get(str(accel), 0) + 1
    return out


def check_accel(sweep_dir: Path, state: dict[str, Any], vers: dict[str, Any]) -> None:
    """Refuse to continue a sweep whose runs used another accelerator than this machine would use
    now: its points would mix accelerators (ConfigError, one line)."""
    now = (vers.get("hypervisor") or {}).get("accel")
    used = recorded_accels(sweep_dir, state)
    other = {a: n for a, n in used.items() if a != now}
    if now and other:
        was = ", ".join(f"accel={a} ({n} runs)" for a, n in sorted(other.items()))
        raise ConfigError(
            f"RESUME={sweep_dir} ran with {was} but would now run with accel={now}: its points would mix "
            "accelerators; resume it where that accelerator is used (ACCEL=) or start a new sweep"
        )


def run_sweep(sweep_dir: Path, testbed: Path | None = None, engine: Any = None) -> Outputs:
    """Run (or resume) the sweep in ``sweep_dir`` to the end and write its outputs (on the lab
    it was started with; ``testbed``, if given, must be that one; ``engine``: on the lab workers
    of this migrate.campaigns.distributed.Engine)."""
    from migrate.campaigns.reporting import write_sweep_outputs
    from migrate.core.registry import clean_stale_before_a_run

    meta, state = sd.open_sweep(sweep_dir)
    for p in meta["points"]:
        _scenario(p)
    if engine is not None or meta.get("engine"):
        return _run_distributed(sweep_dir, meta, testbed, engine)
    lab = sweep_testbed(sweep_dir, meta, testbed)
    with locked(sweep_dir):
        vers = versions(_scenario(meta["points"][0]), lab)
        check_accel(sweep_dir, state, vers)
        clean_stale_before_a_run(log)
        meta, state = sd.open_sweep(sweep_dir)
        reconcile(sweep_dir, meta, state)
        start_session(sweep_dir, state, vers)
        budget = (meta.get("campaign") or {}).get("budget_s")
        deadline = time.monotonic() + budget if isinstance(budget, int | float) else None
        execute(sweep_dir, meta, state, deadline_mono=deadline, testbed=lab)
        return write_sweep_outputs(sweep_dir)


def _run_distributed(sweep_dir: Path, meta: dict[str, Any], testbed: Path | None, engine: Any) -> Outputs:
    """Run (or resume) a campaign on the lab workers of ``engine``: the labs report again and
    must still be the ones recorded (a changed fingerprint refuses the resume)."""
    from migrate.campaigns import distributed as dd
    from migrate.campaigns.reporting import write_sweep_outputs

    rec = meta.get("engine")
    if testbed is not None:
        raise ConfigError("TESTBED= and SCHEDULER= together: a campaign on workers runs on the workers' labs")
    if engine is None or not isinstance(rec, dict):
        what = "ran on lab workers: resume it with SCHEDULER=" if rec else "ran in-process: resume it without SCHEDULER"
        raise ConfigError(f"RESUME={sweep_dir} {what}")
    stacks: dict[str, dict[str, Any]] = {}
    for p in meta["points"]:
        stacks.setdefault(dd.stack_key(p["scenario"]), p["scenario"])
    with locked(sweep_dir):
        labs = engine.labs(stacks, rec.get("labs_choice", "refuse"))
        for r in labs.reports.values():
            was = (rec.get("labs") or {}).get(r["lab"])
            if was and was.get("fingerprint_sha256") != r.get("fingerprint_sha256"):
                changed = dd.describe_differences(dd.differences({"then": was.get("fingerprint") or {},
                                                                  "now": r.get("fingerprint") or {}}))  # fmt: skip
                raise ConfigError(f"RESUME={sweep_dir}: lab {r['lab']} changed since the campaign began: {changed}")
        meta, state = sd.open_sweep(sweep_dir)
        reconcile(sweep_dir, meta, state)
        start_session(sweep_dir, state, meta.get("versions") or {})
        dd.execute(sweep_dir, meta, state, engine, labs, campaign_progress(meta, state))
        return write_sweep_outputs(sweep_dir)
