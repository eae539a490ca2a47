"""``make baseline`` with and without ``TESTBED=``: what each plan (the embedded testbed's
:class:`~migrate.baseline.run.LocalPlan`, a lab's :class:`~migrate.baseline.lab.LabPlan`) checks,
adds to meta.json and runs a configuration with, and where a point's irtt client writes its file
on each testbed and how it reaches the point's directory (fake helpers: no root, no SSH)."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest

from migrate.baseline import run as brun
from migrate.baseline.config import ConfigJob, ConfigRun
from migrate.baseline.lab import NOTES as LAB_NOTES
from migrate.baseline.lab import LabConfigRun, LabPlan
from migrate.baseline.plan import slot
from migrate.baseline.point import IRTT_NAME, PointContext, run_point
from migrate.baseline.spec import BaselineSpec
from migrate.core.progress import Progress
from migrate.core.sighold import Abort
from migrate.testbed.builder import Testbed
from migrate.testbed.inventory import embedded
from migrate.testbed.labbed import LabBed


class _Driver:
    """Stands for a lab driver class (only its name is read)."""


def _lab_plan(tmp_path: Path) -> LabPlan:
    out = LabPlan(tmp_path / "lab.toml", None, {"hosts": {"R1": "ok"}})
    out.drivers = {"none": (None, {"accel": None, "router": "chroot"}), "kvm": (_Driver, {"accel": "kvm", "x": 1})}
    return out


def _config_job(spec: BaselineSpec, tmp_path: Path, hv: str) -> ConfigJob:
    config = next(c for c in spec.configs() if c.hv == hv)
    progress = Progress("baseline", spec.sweep_points(config), "points", enabled=False)
    return ConfigJob(spec, config, {"accel": "tcg"}, tmp_path, Abort(), {}, progress)


def test_the_embedded_testbeds_plan_runs_this_machines_checks_and_adds_nothing(monkeypatch):
    spec = BaselineSpec(hvs=("kvm",), gen_check=True)
    calls: list[str] = []
    monkeypatch.setattr(brun, "preflight", lambda s: calls.append("preflight") or {"accel": "kvm"})
    monkeypatch.setattr(brun, "check_generator", lambda s: calls.append("gen") or {"ip4-64B": {}})
    plan = brun.choose_plan(spec, None)
    assert isinstance(plan, brun.LocalPlan) and calls == []  # choosing checks nothing yet
    assert plan.preflight() == ({"accel": "kvm"}, {"ip4-64B": {}}) and calls == ["preflight", "gen"]
    meta: dict[str, Any] = {"notes": {"rates": "x"}}
    plan.add_meta(meta)
    assert meta == {"notes": {"rates": "x"}}


def test_the_embedded_testbeds_plan_runs_a_configuration_in_namespaces(tmp_path):
    job = _config_job(BaselineSpec(hvs=("kvm",)), tmp_path, "kvm")
    run = brun.LocalPlan(job.spec).config_run(job)
    assert type(run) is ConfigRun and run.facts == {"accel": "tcg"}


def test_a_labs_plan_gives_its_accelerator_and_no_generator_capability(tmp_path):
    facts, gen = _lab_plan(tmp_path).preflight()
    assert facts == {"router_image": None, "accel": "kvm"} and gen is None


def test_a_labs_plan_adds_the_lab_its_check_and_its_notes_to_meta_json(tmp_path):
    plan = _lab_plan(tmp_path)
    meta: dict[str, Any] = {"notes": {"rates": "x"}}
    plan.add_meta(meta)
    assert meta["lab"] == {
        "inventory": str(tmp_path / "lab.toml"),
        "drivers": {
            "none": {"class": "migrate.baseline.labnone.LabNsRouter", "accel": None, "router": "chroot"},
            "kvm": {"class": "_Driver", "accel": "kvm", "x": 1},
        },
    }
    assert meta["lab_check"] == {"hosts": {"R1": "ok"}}
    assert meta["notes"] == {"rates": "x", **LAB_NOTES}


@pytest.mark.parametrize("hv", ["kvm", "none"])
def test_a_labs_plan_runs_a_configuration_with_its_hypervisors_lab_facts(tmp_path, hv):
    plan = _lab_plan(tmp_path)
    run = plan.config_run(_config_job(BaselineSpec(hvs=("none", "kvm")), tmp_path, hv))
    assert isinstance(run, LabConfigRun) and run.plan is plan and run.facts == plan.drivers[hv][1]


def test_a_configuration_is_run_by_the_plans_config_run(tmp_path):
    spec = BaselineSpec(hvs=("kvm",))
    made: list[ConfigRun] = []

    class Plan(brun.LocalPlan):
        def config_run(self, job: ConfigJob) -> ConfigRun:
            made.append(super().config_run(job))
            made[-1].execute = lambda: None  # type: ignore[method-assign]
            made[-1].unfinished = lambda: 0  # type: ignore[method-assign]
            return made[-1]

    job = _config_job(spec, tmp_path, "kvm")
    config = job.config
    meta: dict[str, Any] = {"configs": {}}
    brun._run_config(spec, config, job.facts, tmp_path, meta, job.abort, job.progress, Plan(spec))
    assert len(made) == 1 and meta["configs"][config.name]["status"] == "completed"
    assert meta["configs"][config.name]["prefix"] == made[0].registry.prefix


# ------------------------------------------------------------------ the HV=none routers' start


class _DaemonRegistry:
    """Records what a router registers for the teardown."""

    def __init__(self) -> None:
        self.added: list[tuple[Any, ...]] = []

    def add_process(self, pid: int, what: str) -> None:
        self.added.append((pid, what))

    def add_remote(self, role: str, pid: int, starttime: int | None, what: str) -> None:
        self.added.append((role, pid, starttime, what))


class _R1Lab:
    """A lab as LabNsRouter's constructor reads it."""

    inventory = None

    def run_dir(self) -> str:
        return "/run/x"


def _hv_none_routers(tmp_path: Path) -> list[Any]:
    from migrate.baseline.labnone import LabNsRouter
    from migrate.baseline.routers import NsRouter

    lab = LabNsRouter(_R1Lab(), "frr", _DaemonRegistry(), tmp_path)  # type: ignore[arg-type]
    lab._start_ticks = lambda pid: 7  # type: ignore[method-assign]
    return [NsRouter(slot(0), "x-RT0", "frr", _DaemonRegistry(), tmp_path), lab]  # type: ignore[arg-type]


def test_both_hv_none_routers_adopt_the_chroot_scripts_daemons_and_ready_line(tmp_path):
    import os

    pid = os.getpid()
    text = f"booting\nVRMIG-PID {pid} zebra\nVRMIG-READY router=frr version=10.3\n"
    ns, lab = _hv_none_routers(tmp_path)
    for r in (ns, lab):
        r._adopt(text)
        r._started(0, text, 30.0, lambda: pytest.fail("a router that exited is not stopped"))
        assert r.ready_line == "VRMIG-READY router=frr version=10.3" and [p for p, _ in r.daemons] == [pid]
    assert ns.reg.added == [(pid, "router-0-daemon")] and ns.daemons[0][1] is not None
    assert lab.reg.added == [("R1", pid, 7, "router-none daemon")] and lab.daemons == [(pid, 7)]


@pytest.mark.parametrize(
    ("rc", "text", "ns_error", "lab_error"),
    [
        (None, "", "router 0 (HV=none) not ready within 30 s", "the HV=none router on R1 was not ready within 30 s"),
        (1, "a\nb\nc\nd\n", "router 0 (HV=none) failed to start (status 1): b | c | d",
         "the HV=none router on R1 failed to start (status 1): b | c | d"),
        (0, "VRMIG-READY router=frr version=10.3\n",
         "router 0 (HV=none) is ready but reported no daemon PIDs (VRMIG-PID lines)",
         "the HV=none router on R1 is ready but reported no daemon PIDs (VRMIG-PID lines)"),
    ],
)  # fmt: skip
def test_a_hv_none_router_that_did_not_start_is_one_error_naming_it(tmp_path, rc, text, ns_error, lab_error):
    from migrate.core.errors import GuestError

    for r, error in zip(_hv_none_routers(tmp_path), (ns_error, lab_error), strict=True):
        stopped: list[bool] = []
        r._adopt(text)
        with pytest.raises(GuestError) as err:
            r._started(rc, text, 30.0, lambda s=stopped: s.append(True))
        assert str(err.value) == error and stopped == ([True] if rc is None else [])


# ------------------------------------------------------------------ a point's irtt file


class _Proc:
    """A helper that exits at once with status 0 (vrgen and vrsink write a non-empty JSON)."""

    def __init__(self, what: str, argv: list[str], out_dir: Path, stdout_name: str | None) -> None:
        self.what, self.argv = what, argv
        if stdout_name:
            (out_dir / stdout_name).write_text("{}")

    def wait_for(self, *args: Any, **kw: Any) -> None:
        return None

    def wait(self, timeout_s: float) -> int:
        return 0

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 0.0) -> int:
        return 0

    def returncode(self) -> int:
        return 0

    def alive(self) -> bool:
        return False

    def stderr_tail(self) -> str:
        return ""


class _Helpers:
    """spawn and rx_packets recorded, never run."""

    spawned: list[_Proc]

    def spawn(self, role: str, what: str, argv: list[str], registry: Any, out_dir: Path,
              stdout_name: str | None = None, wait: bool = True) -> Any:  # fmt: skip
        self.spawned.append(_Proc(what, argv, out_dir, stdout_name))
        return self.spawned[-1]

    def rx_packets(self, role: str, ifname: str) -> int:
        return 0


class _Embedded(_Helpers, Testbed):
    pass


class _Lab(_Helpers, LabBed):
    pass


class _HostC:
    """Lab host C: irtt's file there, fetched on request."""

    def __init__(self) -> None:
        self.fetched: list[tuple[str, Path]] = []

    def fetch(self, remote_path: str, local: Path) -> None:
        self.fetched.append((remote_path, local))
        local.write_bytes(b"irtt of C")


def _point(tb: Testbed, tmp_path: Path) -> tuple[dict[str, Any], str, Path]:
    tb.spawned = []  # type: ignore[attr-defined]
    spec = BaselineSpec(hvs=("kvm",), sizes=(64,), rates_bps=(50_000_000,), reps=1)
    key = next(spec.sweep(spec.configs()[0], 1))
    ctx = PointContext(tb=tb, registry=None, slots=[slot(0)], duration_s=1.0, probe_ms=10,  # type: ignore[arg-type]
                       cpu_snapshot=dict)  # fmt: skip
    point_dir = tmp_path / "points" / key.name
    record = run_point(ctx, key, point_dir)
    (irtt,) = [p for p in tb.spawned if p.what == "irtt-client"]  # type: ignore[attr-defined]
    assert record == json.loads((point_dir / "point.json").read_text())
    return record, irtt.argv[irtt.argv.index("-o") + 1], point_dir


def test_on_the_embedded_testbed_irtt_writes_into_the_points_directory(tmp_path):
    record, out, point_dir = _point(_Embedded("vrt-x"), tmp_path)
    assert out == str(point_dir / IRTT_NAME)
    assert record["status"] == "ok" and record["irtt"] == IRTT_NAME and "irtt_failure" not in record
    assert sorted(p.name for p in point_dir.iterdir()) == ["gen-0.json", "point.json", "sink-0.json"]


def test_on_a_lab_irtt_writes_one_file_per_point_on_C_fetched_into_the_point(tmp_path):
    c = _HostC()
    tb = _Lab("vrt-x", embedded(), {"C": c})
    record, out, point_dir = _point(tb, tmp_path)
    assert out == f"{tb.run_dir()}/irtt-{point_dir.name}.json.gz"
    assert c.fetched == [(out, point_dir / IRTT_NAME)]
    assert record["status"] == "ok" and record["irtt"] == IRTT_NAME and "irtt_failure" not in record
    assert (point_dir / IRTT_NAME).read_bytes() == b"irtt of C"


def test_a_file_C_kept_that_cannot_be_fetched_is_the_points_irtt_failure(tmp_path):
    class Lost(_HostC):
        def fetch(self, remote_path: str, local: Path) -> None:
            raise OSError("connection lost")

    tb = _Lab("vrt-x", embedded(), {"C": Lost()})
    record, out, _ = _point(tb, tmp_path)
    assert record["status"] == "ok" and record["irtt_failure"] == f"fetching {out} from C: connection lost"
