"""Campaigns across many labs on Dask distributed (docs/many-labs.md).

Dask's scheduler, workers, priorities and its rescheduling of a lost worker's tasks do the
distributing; nothing here is a queue or a lease protocol of its own.  What this module adds is
what the engine cannot know:

* **A worker is one lab.**  ``vrmig worker --testbed lab.toml --scheduler ADDR`` runs one Dask
  worker with one thread, named ``vrmig-lab-<lab name>`` (the scheduler refuses a second worker of
  that name: two workers cannot claim one lab).  Each point is one ``vrmig`` child process
  (:func:`_point_main`, the very ``migrate.experiment.run.run`` of an in-process sweep, on the
  worker's lab) with a parent-death signal, so a worker that dies takes its run down with it; the
  lab's own run registry lets ``clean-testbed TESTBED=`` find anything left on the hosts.
* **Results come home.**  The point's run directory is packed (tar) on the worker and returned as
  the task's result; the submitting side unpacks it into the campaign's ``runs/``.  meta.json
  ``worker`` names the lab, its inventory's SHA-256 and its fingerprint.  No shared file system.
* **Losing a lab costs nothing.**  The task announces its start on the ``vrmig-run`` event topic;
  a second start of one run on another worker means the first worker was lost during it: that
  attempt is recorded as ``interrupted`` with the cause, and the run continues where Dask put it.
  A run that fails in set-up (``failure_class`` setup) is submitted once more to another lab; the
  same class of failure on two labs stands as the run's outcome.
* **Pool only what is alike.**  Before anything runs, every worker runs hosts-check and the
  preflight of each of the campaign's stacks on its lab, and reports its fingerprint
  (:func:`fingerprint`); labs that differ are refused with the fields named (``LABS=refuse``, the
  default) or become an axis of the campaign (``LABS=axis``: each point once per lab).

Pure parts (fingerprints, their differences, the engine's overhead) take dicts and return
dataclasses or dicts; the engine parts are thin wrappers of ``distributed.Client`` calls."""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import io
import json
import logging
import queue
import secrets
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from migrate.core.errors import ConfigError, Interrupted, VrmigError

log = logging.getLogger(__name__)

WORKER_PREFIX = "vrmig-lab-"
TOPIC = "vrmig-run"
CONNECT_TIMEOUT_S = 5.0
#: a point's child process: at most this long (a migration run is minutes; a hung one is a fault)
POINT_TIMEOUT_S = 4 * 3600.0
LAB_CHOICES = ("refuse", "axis")
#: failure classes that may be the lab's fault: run once more on another lab
LAB_FAULT_CLASSES = ("setup",)
#: fingerprint fields every lab reports (per role where the role has it)
FIELDS_PER_ROLE = ("kernel", "cpu_model", "nics")
FIELDS_PER_HV = ("kvm", "qemu", "libvirt", "images")


# --------------------------------------------------------------------------- pure parts
def fingerprint(
    check: Mapping[str, Any],
    stacks: Mapping[str, Mapping[str, Any]],
    routers: Iterable[str] = (),
    unused_nics: Mapping[str, Iterable[str]] | None = None,
) -> dict[str, Any]:
    """A lab's fingerprint from its hosts-check document (``CheckResult.as_dict()``) and the
    preflight facts of each of the campaign's stacks (stack key -> ``versions()`` of it): one
    flat field -> value mapping, e.g. ``R1.kernel``, ``A.nics``, ``stack[kvm/qmp].accel``.  NIC
    names are the lab's own, so NICs enter as their sorted (driver, MTU, speed); router images
    only those of ``routers`` (the campaign's: another image on a host changes none of its runs);
    ``unused_nics`` (role -> names): interfaces none of the campaign's runs use (a Xen host's ports
    of its dom0 when no run is HV=xen)."""
    wanted = set(routers)
    unused = {role: set(names) for role, names in (unused_nics or {}).items()}
    from migrate.core.stack import DEFAULT_QEMU

    out: dict[str, Any] = {}
    for row in check.get("hosts", []):
        role = row.get("role")
        if not isinstance(role, str) or "." in role:  # a Xen host's dom0 rows carry a dotted role
            continue
        out[f"{role}.kernel"] = row.get("kernel")
        out[f"{role}.cpu_model"] = row.get("cpu_model")
        nics = sorted(
            f"{n.get('driver')} mtu {n.get('mtu')}" + (f" {n['speed_mbps']}Mb/s" if n.get("speed_mbps") else "")
            for name, n in (row.get("nics") or {}).items()
            if n.get("present") and name not in unused.get(role, set())
        )
        out[f"{role}.nics"] = ", ".join(nics)
        if role in ("R1", "R2"):
            out[f"{role}.kvm"] = row.get("kvm")
            out[f"{role}.qemu"] = ((row.get("stacks") or {}).get(DEFAULT_QEMU) or {}).get("version")
            out[f"{role}.libvirt"] = (row.get("versions") or {}).get("libvirtd")
            images = {p: v for p, v in (row.get("images") or {}).items() if p in wanted}
            out[f"{role}.images"] = ", ".join(f"{p}={(images[p] or {}).get('router_version')}" for p in sorted(images))
    for key, facts in sorted(stacks.items()):
        hv = facts.get("hypervisor") or {}
        out[f"stack[{key}].accel"] = hv.get("accel")
        out[f"stack[{key}].qemu"] = hv.get("qemu")
        out[f"stack[{key}].libvirt"] = hv.get("libvirt")
        out[f"stack[{key}].router"] = facts.get("router")
    return out


def fingerprint_digest(fp: Mapping[str, Any]) -> str:
    """A short SHA-256 of a fingerprint (labs alike have the same one)."""
    return hashlib.sha256(json.dumps(fp, sort_keys=True, default=str).encode()).hexdigest()[:16]


def differences(fps: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Field -> {lab: value} for every field whose value is not the same on every lab."""
    fields = sorted({f for fp in fps.values() for f in fp})
    out: dict[str, dict[str, Any]] = {}
    for f in fields:
        vals = {lab: fp.get(f) for lab, fp in fps.items()}
        if len({json.dumps(v, sort_keys=True, default=str) for v in vals.values()}) > 1:
            out[f] = vals
    return out


def describe_differences(diff: Mapping[str, Mapping[str, Any]], limit: int = 4) -> str:
    """``R1.qemu (lab1: 10.0.2; lab2: 9.2.0), ...`` for the first ``limit`` fields."""
    parts = []
    for f, vals in list(diff.items())[:limit]:
        parts.append(f"{f} (" + "; ".join(f"{lab}: {v}" for lab, v in vals.items()) + ")")
    more = f" and {len(diff) - limit} more" if len(diff) > limit else ""
    return ", ".join(parts) + more


@dataclass(frozen=True)
class Overhead:
    """The engine's overhead per run, ms: ``dispatch`` from the later of the run's submission and
    its worker's previous result to its start on the worker; ``home`` from the end of the run on
    the worker to its directory unpacked here.  Both clocks are this machine's and the worker's
    (one machine here; across machines they differ by the hosts' offset)."""

    n: int
    dispatch_ms: list[float] = field(default_factory=list)
    home_ms: list[float] = field(default_factory=list)

    @staticmethod
    def _q(xs: Sequence[float], q: float) -> float | None:
        if not xs:
            return None
        s = sorted(xs)
        return s[min(len(s) - 1, int(q * (len(s) - 1) + 0.5))]

    def summary(self) -> dict[str, Any]:
        """Median and maximum of each, ms (None without data)."""
        return {
            "n": self.n,
            "dispatch_ms": {"median": self._q(self.dispatch_ms, 0.5), "max": max(self.dispatch_ms, default=None)},
            "home_ms": {"median": self._q(self.home_ms, 0.5), "max": max(self.home_ms, default=None)},
        }


def overhead(records: Iterable[Mapping[str, Any]]) -> Overhead:
    """The engine's overhead from the ``engine`` timestamps (unix s) of runs' state records."""
    recs = [r["engine"] for r in records if isinstance(r.get("engine"), dict)]
    by_worker: dict[str, list[dict[str, Any]]] = {}
    for e in recs:
        if all(isinstance(e.get(k), int | float) for k in ("submitted", "started", "finished", "unpacked")):
            by_worker.setdefault(str(e.get("worker")), []).append(e)
    dispatch, home = [], []
    for runs in by_worker.values():
        runs.sort(key=lambda e: e["started"])
        prev_end = None
        for e in runs:
            ready = e["submitted"] if prev_end is None else max(e["submitted"], prev_end)
            dispatch.append(round((e["started"] - ready) * 1000, 3))
            home.append(round((e["unpacked"] - e["finished"]) * 1000, 3))
            prev_end = e["finished"]
    return Overhead(len(dispatch), dispatch, home)


def lab_identity(report: Mapping[str, Any]) -> set[str]:
    """The SSH endpoints of a lab's hosts (two workers sharing one claim the same lab)."""
    return {str(h) for h in report.get("endpoints") or ()}


# --------------------------------------------------------------------------- worker side
@dataclass
class LabWorker:
    """The lab this worker process holds (set once by :func:`worker_main`)."""

    inventory: Path
    name: str
    sha256: str
    results: Path


_LAB: LabWorker | None = None


def _inventory_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _child(argv: list[str], timeout_s: float, stdin: str | None = None) -> subprocess.CompletedProcess:
    """``python -m migrate.campaigns.distributed <argv>`` with a parent-death TERM (it tears down
    what it started), its output captured."""
    from migrate.core.procs import with_pdeathsig

    cmd = with_pdeathsig([sys.executable, "-m", "migrate.campaigns.distributed", *argv], signal="TERM")
    return subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=timeout_s, check=False)


def lab_report(stacks: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Run on a worker: hosts-check of its lab and the preflight of each stack (key -> a
    scenario's dict), in a child process; returns {lab, inventory_sha256, endpoints, problems,
    fingerprint, stacks: {key: versions | {"error": line}}}."""
    lab = _require_lab()
    cp = _child(["lab-report", str(lab.inventory)], 900, json.dumps(dict(stacks)))
    if cp.returncode != 0:
        tail = (cp.stderr.strip().splitlines() or [f"exit {cp.returncode}"])[-1]
        return {"lab": lab.name, "inventory_sha256": lab.sha256, "error": tail}
    out = json.loads(cp.stdout.strip().splitlines()[-1])
    out.update(lab=lab.name, inventory_sha256=lab.sha256, inventory=str(lab.inventory))
    return out


def _require_lab() -> LabWorker:
    if _LAB is None:
        raise RuntimeError("this Dask worker holds no lab: start it with `vrmig worker --testbed ...`")
    return _LAB


def run_point(spec: dict[str, Any]) -> dict[str, Any]:
    """Run on a worker: one run of ``spec`` (run_id, scenario, labs allowed, every lab's
    fingerprint as its report gave it: the run records its own lab's) on its lab; returns the
    packed run directory and the engine's timestamps, or the error."""
    from distributed import get_worker

    lab = _require_lab()
    me = get_worker()
    started = time.time()
    base = {"run_id": spec["run_id"], "lab": lab.name, "worker": me.address, "started": started}
    me.log_event(TOPIC, {**base, "event": "start"})
    allowed = spec.get("labs")
    if allowed and lab.name not in allowed:
        return {**base, "refused": f"lab {lab.name} was not admitted to this campaign", "finished": time.time()}
    spec_file = lab.results / "specs" / f"{spec['run_id']}-{secrets.token_hex(3)}.json"
    spec_file.parent.mkdir(parents=True, exist_ok=True)
    worker_rec = {
        "lab": lab.name,
        "inventory_sha256": lab.sha256,
        "address": me.address,
        **(spec.get("fingerprints") or {}).get(lab.name, {"fingerprint": None, "fingerprint_sha256": None}),
    }
    spec_file.write_text(json.dumps({"scenario": spec["scenario"], "worker": worker_rec}))
    cp = _child(["point", str(lab.inventory), str(lab.results / "runs"), str(spec_file)], POINT_TIMEOUT_S)
    finished = time.time()
    lines = cp.stdout.strip().splitlines()
    if cp.returncode != 0 or not lines:
        tail = (cp.stderr.strip().splitlines() or [f"exit {cp.returncode}"])[-1]
        return {**base, "error": tail, "exit": cp.returncode, "finished": finished}
    run_dir = Path(lines[-1])
    return {**base, "name": run_dir.name, "tar": pack(run_dir), "finished": finished}


def pack(run_dir: Path) -> bytes:
    """The run directory as an uncompressed tar (its raw traces compress poorly and cost CPU)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add(run_dir, arcname=run_dir.name)
    return buf.getvalue()


def unpack(data: bytes, name: str, runs_root: Path) -> Path:
    """Unpack a packed run directory into ``runs_root`` (a fresh name if ``name`` is taken);
    members outside the run directory are refused."""
    tmp = Path(tempfile.mkdtemp(prefix=".unpack-", dir=runs_root))
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r") as tar:
            for m in tar.getmembers():
                if not (m.name == name or m.name.startswith(name + "/")):
                    raise ConfigError(f"a worker's result holds {m.name!r} outside its run directory {name!r}")
            tar.extractall(tmp, filter="data")
        dest = runs_root / name
        n = 1
        while dest.exists():
            dest = runs_root / f"{name}.{n}"
            n += 1
        (tmp / name).rename(dest)
        return dest
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


async def _serve(scheduler: str, name: str, local: Path) -> int:
    from distributed import Worker

    try:
        w = await Worker(scheduler, nthreads=1, name=name, resources={"lab": 1}, memory_limit=0,
                         death_timeout=CONNECT_TIMEOUT_S, dashboard=False, local_directory=str(local))  # fmt: skip
    except (OSError, TimeoutError, RuntimeError, ValueError) as err:
        cause = err.__cause__ if isinstance(err, RuntimeError) and err.__cause__ is not None else err
        if "name taken" in str(cause):
            raise _taken(scheduler, name) from None
        raise ConfigError(f"SCHEDULER={scheduler}: no Dask scheduler answers there ({cause})") from None
    print(f"worker {name} ({w.address}) holds lab {name.removeprefix(WORKER_PREFIX)}", flush=True)
    await w.finished()
    return 0


def worker_main(testbed: Path, scheduler: str, results: Path) -> int:
    """``vrmig worker``: check the lab (hosts-check; errors refuse, one line, exit 2), then serve
    the scheduler's points until interrupted."""
    from migrate.testbed.inventory import load
    from migrate.testbed.results import prepare_results_root

    global _LAB
    inv = load(testbed)
    _precheck(scheduler, WORKER_PREFIX + inv.name)  # before the lab's check: a wrong address fails fast
    check = _check(testbed)
    errors = [p for p in check["problems"] if p.get("severity") == "error"]
    if errors:
        first = errors[0]
        raise ConfigError(
            f"TESTBED={testbed}: hosts-check fails ({first['role']}: {first['message']}"
            f"{f'; {len(errors) - 1} more' if len(errors) > 1 else ''}): fix the lab before it serves a campaign"
        )
    root = results / f"worker-{inv.name}"
    prepare_results_root(root)
    (root / "runs").mkdir(exist_ok=True)
    _LAB = LabWorker(testbed.resolve(), inv.name, _inventory_sha256(testbed), root)
    try:
        return asyncio.run(_serve(scheduler, WORKER_PREFIX + inv.name, root / "dask"))
    except KeyboardInterrupt:
        raise Interrupted("worker stopped") from None


def _taken(scheduler: str, name: str) -> ConfigError:
    return ConfigError(
        f"lab {name.removeprefix(WORKER_PREFIX)} already has a worker at SCHEDULER={scheduler}: one worker per lab"
    )


def _precheck(scheduler: str, name: str) -> None:
    """The scheduler answers and holds no worker named ``name`` (Dask's registration refuses a
    second one anyway; asked first, the answer comes before the lab's hosts-check)."""
    from distributed import Client

    try:
        with Client(scheduler, timeout=CONNECT_TIMEOUT_S, set_as_default=False) as c:
            names = {str(w.get("name")) for w in c.scheduler_info(n_workers=-1)["workers"].values()}
    except (OSError, TimeoutError) as err:
        raise ConfigError(f"SCHEDULER={scheduler}: no Dask scheduler answers there ({err})") from None
    if name in names:
        raise _taken(scheduler, name)


def _check(testbed: Path) -> dict[str, Any]:
    from migrate.labs.check import check_inventory
    from migrate.testbed.inventory import load

    control = Path(tempfile.mkdtemp(prefix="vrmig-wk-"))
    try:
        return check_inventory(load(testbed), control, testbed_arg=str(testbed)).as_dict()
    finally:
        shutil.rmtree(control, ignore_errors=True)


# --------------------------------------------------------------------------- the worker's children
def _report_main(inventory: Path) -> int:
    """``lab-report INVENTORY`` (stacks as JSON on stdin): one hosts-check of the lab, each stack's
    preflight against it (as ``migrate.campaigns.sweep.versions``), the fingerprint; one JSON line."""
    from migrate.core.meta import versions_of
    from migrate.experiment.place import Lab, preflight
    from migrate.labs.check import ERROR
    from migrate.model.scenario import Scenario
    from migrate.testbed.inventory import load

    inv = load(inventory)
    check = _check(inventory)
    place = Lab(inv, inventory)
    place.check = check
    stacks: dict[str, Any] = {}
    wanted_stacks = json.loads(sys.stdin.read() or "{}")
    failed = [p for p in check["problems"] if p.get("severity") == ERROR]
    for key, sc in wanted_stacks.items():
        if failed:
            stacks[key] = {"error": f"hosts-check: {failed[0]['role']}: {failed[0]['message']}"}
            continue
        try:
            scenario = Scenario(**sc)
            place.admit(scenario)
            _, facts = preflight(scenario, place)
        except VrmigError as err:
            stacks[key] = {"error": str(err)}
            continue
        stacks[key] = versions_of(facts)
    ok = {k: v for k, v in stacks.items() if "error" not in v}
    endpoints = sorted({f"{h.ssh.host}:{h.ssh.port}" for h in inv.hosts.values() if h.ssh is not None})
    routers = sorted({str(Scenario(**sc).router) for sc in wanted_stacks.values()})
    xen = any(sc.get("hv") == "xen" for sc in wanted_stacks.values())
    unused = {} if xen else {r: list(h.xen.taps.values()) for r, h in inv.hosts.items() if h.xen is not None}
    fp = fingerprint(check, ok, routers, unused)
    print(json.dumps({"problems": check["problems"], "endpoints": endpoints, "stacks": stacks,
                      "fingerprint": fp, "fingerprint_sha256": fingerprint_digest(fp)}, default=str))  # fmt: skip
    return 0


def _point_main(inventory: Path, runs_root: Path, spec_file: Path) -> int:
    """``point INVENTORY RUNS_ROOT SPEC``: one run on the lab; prints its directory last."""
    from migrate.core.registry import clean_stale_before_a_run
    from migrate.experiment.run import run
    from migrate.model.scenario import Scenario

    spec = json.loads(spec_file.read_text())
    clean_stale_before_a_run(log)
    run_dir = run(Scenario(**spec["scenario"]), runs_root, extra_meta={"worker": spec["worker"]}, testbed=inventory)
    print(run_dir, flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    """The worker's child processes (``lab-report``, ``point``; not user commands) and
    ``overhead CAMPAIGN_DIR``."""
    p = argparse.ArgumentParser(prog="python -m migrate.campaigns.distributed")
    sub = p.add_subparsers(dest="what", required=True)
    r = sub.add_parser("lab-report")
    r.add_argument("inventory", type=Path)
    q = sub.add_parser("point")
    q.add_argument("inventory", type=Path)
    q.add_argument("runs_root", type=Path)
    q.add_argument("spec", type=Path)
    o = sub.add_parser("overhead", help="the engine's overhead per run of a campaign directory, as JSON")
    o.add_argument("campaign", type=Path)
    a = p.parse_args(argv)
    if a.what == "overhead":
        state = json.loads((a.campaign / "state.json").read_text())
        print(json.dumps(overhead(state["runs"].values()).summary()))
        return 0
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        if a.what == "lab-report":
            return _report_main(a.inventory)
        return _point_main(a.inventory, a.runs_root, a.spec)
    except VrmigError as err:
        print(f"vrmig: {err}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        return 130


# --------------------------------------------------------------------------- submitting side
def stack_key(sc: Mapping[str, Any]) -> str:
    """What decides the hypervisor and router a point runs: HV, driver, QEMU, firmware, router
    (each checked by its own preflight on every lab)."""
    return "/".join(str(sc.get(k) or "-") for k in ("hv", "driver", "qemu", "qemu_firmware", "router"))


@dataclass
class Labs:
    """The labs a campaign runs on: worker address -> its report; which stacks each admits."""

    reports: dict[str, dict[str, Any]]
    choice: str

    @property
    def names(self) -> dict[str, str]:
        return {addr: r["lab"] for addr, r in self.reports.items()}

    def admitting(self, key: str) -> list[str]:
        """Worker addresses whose lab passed the preflight of stack ``key``."""
        return [a for a, r in self.reports.items() if "error" not in (r.get("stacks") or {}).get(key, {"error": 1})]

    def record(self) -> dict[str, Any]:
        """meta.json ``engine.labs``."""
        return {
            r["lab"]: {k: r.get(k) for k in ("inventory", "inventory_sha256", "fingerprint", "fingerprint_sha256")}
            for r in self.reports.values()
        }


class Engine:
    """A ``distributed.Client`` to ``address`` (one line and exit 2 when nothing answers)."""

    def __init__(self, address: str) -> None:
        from distributed import Client

        self.address = address
        try:
            self.client = Client(address, timeout=CONNECT_TIMEOUT_S, set_as_default=False)
        except (OSError, TimeoutError) as err:
            raise ConfigError(
                f"SCHEDULER={address}: no Dask scheduler answers there ({type(err).__name__}: {err}); "
                "start one with `make scheduler` and a worker per lab with `make worker TESTBED=... SCHEDULER=...`"
            ) from None
        self.events: queue.Queue[dict[str, Any]] = queue.Queue()
        self._labs: dict[str, Labs] = {}  # the labs' reports, once per stacks and choice in this command
        self.client.subscribe_topic(TOPIC, lambda ev: self.events.put(ev[1]))

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.client.close()

    def workers(self) -> dict[str, str]:
        """Address -> name of the lab workers the scheduler knows."""
        info = self.client.scheduler_info(n_workers=-1)["workers"]
        return {a: str(w.get("name")) for a, w in info.items() if str(w.get("name")).startswith(WORKER_PREFIX)}

    def labs(self, stacks: Mapping[str, Mapping[str, Any]], choice: str) -> Labs:
        """Every lab worker's report (run in parallel, each on its own lab); refuses (ConfigError)
        when there is none, a lab fails hosts-check, two workers share hosts, a stack no lab can
        run, or labs differ while ``choice`` is refuse.  Asked once per command: the campaign that
        was just created runs on the reports that admitted it."""
        memo = json.dumps([stacks, choice], sort_keys=True, default=str)
        if memo in self._labs:
            return self._labs[memo]
        workers = self.workers()
        if not workers:
            raise ConfigError(
                f"SCHEDULER={self.address}: no lab worker is connected: start one per lab with "
                "`make worker TESTBED=lab.toml SCHEDULER=...`"
            )
        futs = {
            a: self.client.submit(
                lab_report,
                dict(stacks),
                workers=[a],
                allow_other_workers=False,
                pure=False,
                key=f"vrmig-report-{secrets.token_hex(4)}",
            )
            for a in workers
        }
        reports = {a: f.result() for a, f in futs.items()}
        for f in futs.values():
            f.release()
        check_reports(reports, stacks, choice)
        self._labs[memo] = Labs(reports, choice)
        return self._labs[memo]

    def submit(self, spec: dict[str, Any], priority: int, workers: list[str] | None) -> Any:
        """One run as one task (``workers``: only these may run it)."""
        key = f"vrmig-run-{spec['run_id']}-{secrets.token_hex(3)}"
        kw: dict[str, Any] = {"workers": workers, "allow_other_workers": False} if workers else {}
        return self.client.submit(run_point, spec, key=key, pure=False, priority=priority, **kw)


def check_reports(reports: Mapping[str, Mapping[str, Any]], stacks: Mapping[str, Any], choice: str) -> None:
    """The refusals of :meth:`Engine.labs`, from the workers' reports alone."""
    for r in reports.values():
        if r.get("error"):
            raise ConfigError(f"lab {r['lab']}: its worker could not report: {r['error']}")
        errors = [p for p in r.get("problems") or [] if p.get("severity") == "error"]
        if errors:
            p = errors[0]
            raise ConfigError(
                f"lab {r['lab']} fails hosts-check ({p['role']}: {p['message']}): fix it or stop its worker"
            )
    seen: dict[str, str] = {}
    for r in reports.values():
        for ep in lab_identity(r):
            if ep in seen and seen[ep] != r["lab"]:
                raise ConfigError(f"labs {seen[ep]} and {r['lab']} share the host {ep}: one worker per lab")
            seen[ep] = r["lab"]
    for key in stacks:
        ok = [r for r in reports.values() if "error" not in (r.get("stacks") or {}).get(key, {"error": 1})]
        if not ok:
            why = "; ".join(
                f"{r['lab']}: {((r.get('stacks') or {}).get(key) or {}).get('error')}" for r in reports.values()
            )
            raise ConfigError(f"no lab can run the campaign's {key} points ({why})")
    fps = {r["lab"]: r.get("fingerprint") or {} for r in sorted(reports.values(), key=lambda r: str(r["lab"]))}
    diff = differences(fps)
    if diff and choice == "refuse":
        raise ConfigError(
            f"the labs differ: {describe_differences(diff)}; their points would pool unlike runs: run the "
            "campaign with LABS=axis (each lab its own points) or on alike labs"
        )


def execute(
    sweep_dir: Path,
    meta: dict[str, Any],
    state: dict[str, Any],
    engine: Engine,
    labs: Labs,
    progress: Any,
) -> dict[str, Any]:
    """Run every run of the order without an outcome on the engine's workers; returns the state.
    Runs are submitted in the order's sequence with falling priority (the labs take them in the
    seeded order); each result is unpacked and recorded as it arrives."""
    from distributed import as_completed

    from migrate.campaigns import sweepdir as sd

    runs_root = sweep_dir / sd.RUNS_SUBDIR
    scenarios = {p["label"]: p["scenario"] for p in meta["points"]}
    pinned = {p["label"]: p.get("lab") for p in meta["points"]}
    order = meta["order"]
    pending = [r for r in order if r["run_id"] not in state["runs"]]
    by_name = {v: k for k, v in labs.names.items()}
    fingerprints = {
        r["lab"]: {"fingerprint": r.get("fingerprint"), "fingerprint_sha256": r.get("fingerprint_sha256")}
        for r in labs.reports.values()
    }

    def spec_of(item: dict[str, Any], exclude: Sequence[str] = ()) -> tuple[dict[str, Any], list[str] | None]:
        sc = scenarios[item["point"]]
        lab = pinned.get(item["point"])
        allowed = [a for a in labs.admitting(stack_key(sc)) if labs.names[a] not in exclude]
        if lab is not None:
            allowed = [by_name[lab]] if lab in by_name else []
        spec = {"run_id": item["run_id"], "scenario": sc, "labs": sorted(labs.names[a] for a in allowed),
                "fingerprints": fingerprints}  # fmt: skip
        everyone = len(allowed) == len(labs.reports) and lab is None
        return spec, None if everyone else allowed

    live: dict[Any, dict[str, Any]] = {}  # future -> {"item", "submitted", "excluded"}
    starts: dict[str, dict[str, Any]] = {}  # run_id -> the last start event
    total = len(pending)
    for i, item in enumerate(pending):
        spec, workers = spec_of(item)
        if workers == []:
            raise ConfigError(f"run {item['run_id']}: no connected lab may run it ({spec['labs']})")
        fut = engine.submit(spec, total - i, workers)
        live[fut] = {"item": item, "submitted": time.time(), "excluded": []}
    ac = as_completed(list(live), loop=engine.client.loop)
    log.info("campaign %s: %d of %d runs submitted to %s", sweep_dir.name, total, len(order), engine.address)

    def drain_events() -> None:
        while True:
            try:
                ev = engine.events.get_nowait()
            except queue.Empty:
                return
            rid = ev.get("run_id")
            prev = starts.get(rid)
            if prev is not None and prev.get("worker") != ev.get("worker") and rid not in state["runs"]:
                state["attempts"].append({
                    "run_id": rid, "run_dir": None, "status": "interrupted", "lab": prev.get("lab"),
                    "worker": prev.get("worker"), "started_utc": _utc(prev.get("started")),
                    "cause": f"the worker of lab {prev.get('lab')} ({prev.get('worker')}) was lost during this run; "
                             f"Dask moved it to lab {ev.get('lab')}",
                    "note": "interrupted: its lab's worker was lost; run again on another lab",
                })  # fmt: skip
                sd.save_state(sweep_dir, state)
                log.warning("run %s: lab %s lost during it; again on lab %s", rid, prev.get("lab"), ev.get("lab"))
            starts[rid] = ev
            progress.start(f"{rid} on {ev.get('lab')}")

    with progress:
        try:
            for fut in ac:
                drain_events()
                ctx = live.pop(fut)
                item = ctx["item"]
                try:
                    res = fut.result()
                except Exception as err:  # the engine's own verdict, e.g. KilledWorker after repeated losses
                    res = {"run_id": item["run_id"], "error": f"{type(err).__name__}: {err}", "engine_error": True}
                fut.release()
                redo = _record(sweep_dir, state, item, ctx, res, runs_root, progress)
                if redo is not None:
                    excluded = [*ctx["excluded"], redo]
                    spec, workers = spec_of(item, excluded)
                    if workers:
                        log.warning("run %s: %s on lab %s; once more on another lab", item["run_id"],
                                    state["attempts"][-1]["cause"], redo)  # fmt: skip
                        nf = engine.submit(spec, total, workers)
                        live[nf] = {"item": item, "submitted": time.time(), "excluded": excluded}
                        ac.add(nf)
                    else:
                        _stand(sweep_dir, state, item, res, progress)
        except KeyboardInterrupt:
            for f in live:
                f.cancel()
            raise Interrupted("campaign stopped; runs in flight on the labs were cancelled") from None
    drain_events()
    return state


def _utc(t: float | None) -> str | None:
    import datetime as dt

    return dt.datetime.fromtimestamp(t, dt.UTC).isoformat(timespec="milliseconds") if t else None


def _record(sweep_dir: Path, state: dict[str, Any], item: dict[str, Any], ctx: dict[str, Any],
            res: dict[str, Any], runs_root: Path, progress: Any) -> str | None:  # fmt: skip
    """Record one task's result; returns the lab to exclude when the run is to be redone
    elsewhere (a lab fault the first time), else None."""
    from migrate.campaigns import sweepdir as sd
    from migrate.core.rundir import META_JSON

    lab = res.get("lab")
    if "tar" not in res:
        cause = res.get("refused") or res.get("error") or "no result"
        first = not ctx["excluded"] and not res.get("engine_error")
        state["attempts"].append({"run_id": item["run_id"], "run_dir": None, "status": "failed", "lab": lab,
                                  "worker": res.get("worker"), "started_utc": _utc(res.get("started")),
                                  "cause": cause, "note": "no run directory came back"})  # fmt: skip
        sd.save_state(sweep_dir, state)
        if first and lab:
            return str(lab)
        _stand(sweep_dir, state, item, res, progress)
        return None
    run_dir = unpack(res["tar"], res["name"], runs_root)
    unpacked = time.time()
    try:
        rmeta = json.loads((run_dir / META_JSON).read_text())
    except (OSError, ValueError):
        rmeta = {}
    status = rmeta.get("status") if rmeta.get("status") in sd.DONE else "failed"
    record = {
        "status": status,
        "run_dir": f"{sd.RUNS_SUBDIR}/{run_dir.name}",
        "point": item["point"],
        "rep": item["rep"],
        "failure": rmeta.get("failure"),
        "failure_class": rmeta.get("failure_class"),
        "started_utc": _utc(res.get("started")),
        "finished_utc": _utc(res.get("finished")),
        "elapsed_s": round(res["finished"] - res["started"], 3),
        "lab": lab,
        "engine": {
            "worker": res.get("worker"),
            "submitted": ctx["submitted"],
            "started": res.get("started"),
            "finished": res.get("finished"),
            "unpacked": unpacked,
        },
    }
    lab_fault = status == "failed" and record["failure_class"] in LAB_FAULT_CLASSES
    if lab_fault and not ctx["excluded"]:
        state["attempts"].append({**record, "cause": f"{record['failure_class']}: {record['failure']}",
                                  "note": "failed in set-up on this lab: run again on another lab"})  # fmt: skip
        sd.save_state(sweep_dir, state)
        return str(lab)
    if lab_fault:
        record["note"] = f"failed in set-up on two labs ({', '.join([*ctx['excluded'], str(lab)])}): it stands"
    state["runs"][item["run_id"]] = record
    sd.save_state(sweep_dir, state)
    failed = status == "failed"
    progress.finish(not failed, str(record["failure_class"] or "unclassified") if failed else None)
    return None


def _stand(sweep_dir: Path, state: dict[str, Any], item: dict[str, Any], res: dict[str, Any], progress: Any) -> None:
    """A run no lab returned a directory for: left without an outcome (its attempts say why on
    each lab; a resume tries it again), counted as a failure in the progress."""
    log.warning("run %s: no lab returned a run directory (%s); left for a resume", item["run_id"],
                res.get("refused") or res.get("error") or "no result")  # fmt: skip
    progress.finish(False, "setup")


if __name__ == "__main__":
    sys.exit(main())
