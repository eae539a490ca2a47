"""Sweep planning, bad input, the sweep directory format and crash reconciliation (no root)."""

import json

import pytest

from migrate.campaigns import sweep as sw
from migrate.campaigns import sweepdir as sd
from migrate.cli.main import main
from migrate.core.errors import ConfigError
from migrate.model.scenario import Scenario


def _plan(reps=3, seed=7):
    return sw.grid_plan(Scenario(), sw.parse_rates("0,100M,200M"), sw.parse_sizes("1500,64"), reps, seed)


def test_plan_is_a_reproducible_shuffle_of_every_run():
    plan = _plan()
    order = plan.order()
    ids = [r["run_id"] for r in order]
    assert len(ids) == len(set(ids)) == 3 * 2 * 3
    assert {r["point"] for r in order} == {"0-1500", "100M-1500", "200M-1500", "0-64", "100M-64", "200M-64"}
    assert order == _plan().order()
    assert ids != sorted(ids) and order != _plan(seed=8).order()
    assert {p.scenario.frame_bytes for p in plan.points} == {1500, 64}
    assert plan.points[1].scenario.rate_bps == 100_000_000


@pytest.mark.parametrize(
    ("rates", "sizes", "reps", "match"),
    [
        ("abc", "1500", 2, "RATES"),
        ("100M,,200M", "1500", 2, "empty"),
        ("100M,100M", "1500", 2, "twice"),
        ("-5", "1500", 2, "RATES"),
        ("20G", "1500", 2, "above 10G"),
        ("100M", "10", 2, "SIZE=10 is outside"),
        ("100M", "big", 2, "SIZES"),
        ("100M", "1500", 0, "REPS=0"),
    ],
)
def test_nonsensical_grids_are_refused(rates, sizes, reps, match):
    with pytest.raises(ConfigError, match=match):
        sw.grid_plan(Scenario(), sw.parse_rates(rates), sw.parse_sizes(sizes), sw.check_reps(reps), 1)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--rates", "0,100M", "--reps", "0"], "REPS=0"),
        (["--rates", "0,100M", "--reps", "2", "--hv", "vmware"], "HV="),
        (["--rates", "fast", "--reps", "2"], "RATES"),
        (["--rates", "100M", "--sizes", "9000", "--reps", "2"], "SIZE=9000"),
        (["--reps", "2"], "RATES is required"),
    ],
)
def test_cli_bad_input_one_line_exit_2_nothing_created(tmp_path, capsys, argv, message):
    results = tmp_path / "results"
    assert main(["sweep", *argv, "--results", str(results)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
    assert not results.exists()


def _make_sweep(tmp_path, reps=2):
    plan = _plan(reps=reps)
    return sw.create_sweep_dir(tmp_path, "s", sw.plan_meta(plan, {"git_commit": "x"}, ["test"])), plan


def test_new_sweep_dir_layout_and_open(tmp_path, capsys):
    path, _ = _make_sweep(tmp_path)
    assert (path / sd.SWEEP_MARKER).exists() and (path / "runs").is_dir()
    meta, state = sd.open_sweep(path)
    assert meta["kind"] == "sweep" and meta["seed"] == 7 and len(meta["order"]) == 12
    assert state["runs"] == {} and state["current"] is None
    assert meta["grid"]["rates_bps"] == [0, 100_000_000, 200_000_000]
    before = _snapshot(path)
    assert main(["sweep", "--resume", str(path), "--rates", "1G"]) == 2
    assert "was started with RATES=0,100M,200M; drop RATES" in capsys.readouterr().err
    assert _snapshot(path) == before


def _snapshot(path):
    return {p: p.read_bytes() for p in path.rglob("*") if p.is_file()}


@pytest.mark.parametrize(
    ("damage", "match"),
    [
        (lambda p: (p / "meta.json").write_text("{not json"), "corrupted"),
        (lambda p: (p / "state.json").write_text("[]"), "corrupted"),
        (lambda p: (p / sd.SWEEP_MARKER).unlink(), "not a vrmig sweep directory"),
        (lambda p: (p / "meta.json").write_text(json.dumps({"kind": "baseline"})), "not a sweep"),
        (
            lambda p: (p / "state.json").write_text(
                json.dumps({"runs": {"0-1500-r01": {"status": "completed", "run_dir": "runs/gone"}}})
            ),
            "missing",
        ),
    ],
)
def test_corrupted_or_foreign_sweep_dirs_are_refused_untouched(tmp_path, capsys, damage, match):
    path, _ = _make_sweep(tmp_path)
    damage(path)
    before = _snapshot(path)
    with pytest.raises(ConfigError, match=match):
        sd.open_sweep(path)
    assert main(["sweep", "--resume", str(path)]) == 2
    assert match.split()[0] in capsys.readouterr().err
    assert _snapshot(path) == before


def _fake_run_dir(sweep, name, scenario, status):
    """A run directory as migrate.experiment.run leaves it (only meta.json matters to reconcile)."""
    d = sweep / "runs" / name
    d.mkdir()
    (d / "meta.json").write_text(json.dumps({"status": status, "scenario": scenario}))
    return d


def test_reconcile_adopts_a_finished_run_and_keeps_abandoned_attempts(tmp_path):
    path, _ = _make_sweep(tmp_path)
    meta, state = sd.open_sweep(path)
    first, second = meta["order"][0], meta["order"][1]
    scen = {p["label"]: p["scenario"] for p in meta["points"]}
    _fake_run_dir(path, "a-done", scen[first["point"]], "completed")
    state["runs"][first["run_id"]] = {"status": "completed", "run_dir": "runs/a-done", "point": first["point"]}
    # the sweep died after the second run finished but before recording it
    _fake_run_dir(path, "b-unrecorded", scen[second["point"]], "failed")
    state["current"] = {**second, "started_utc": "t"}
    sd.save_state(path, state)
    meta, state = sd.open_sweep(path)
    sw.reconcile(path, meta, state)
    meta, state = sd.open_sweep(path)
    assert state["runs"][second["run_id"]]["status"] == "failed"
    assert state["runs"][second["run_id"]]["run_dir"] == "runs/b-unrecorded"
    assert state["current"] is None and state["attempts"] == []
    # the sweep died in the middle of the third run (its meta says interrupted after clean-testbed)
    third = meta["order"][2]
    _fake_run_dir(path, "c-killed", scen[third["point"]], "interrupted")
    state["current"] = {**third, "started_utc": "t"}
    sd.save_state(path, state)
    sw.reconcile(path, meta, state)
    meta, state = sd.open_sweep(path)
    assert third["run_id"] not in state["runs"]
    assert state["attempts"] == [
        {
            "run_id": third["run_id"],
            "run_dir": "runs/c-killed",
            "status": "interrupted",
            "note": state["attempts"][0]["note"],
        }
    ]
    assert (path / "runs" / "c-killed").is_dir()  # kept, never deleted


def test_state_writes_are_atomic(tmp_path, monkeypatch):
    path, _ = _make_sweep(tmp_path)
    good = (path / "state.json").read_text()
    import migrate.core.atomic as atomic

    def boom(*_a, **_k):
        raise OSError("disk full")

    monkeypatch.setattr(atomic.os, "replace", boom)
    with pytest.raises(OSError):
        sd.save_state(path, {"runs": {"x": 1}})
    assert (path / "state.json").read_text() == good
    assert [p.name for p in path.iterdir() if p.name.startswith(".state")] == []


def test_lock_refuses_a_second_runner(tmp_path):
    path, _ = _make_sweep(tmp_path)
    with sw.locked(path), pytest.raises(ConfigError, match="another vrmig process"), sw.locked(path):
        pass


def test_execute_reports_progress_in_plain_lines_without_a_terminal(tmp_path, monkeypatch, capsys):
    """Runs recorded by an earlier session count as done; every finished run is reported on
    stderr (failures with their class), nothing on stdout."""
    import migrate.experiment.run as runmod

    path, _ = _make_sweep(tmp_path, reps=1)
    meta, state = sd.open_sweep(path)
    first = meta["order"][0]
    scen = {p["label"]: p["scenario"] for p in meta["points"]}
    _fake_run_dir(path, "earlier", scen[first["point"]], "completed")
    state["runs"][first["run_id"]] = {"status": "completed", "run_dir": "runs/earlier", "elapsed_s": 40.0}
    monkeypatch.delenv("VRMIG_PROGRESS", raising=False)
    made = iter(range(100))

    def fake_run(scenario, runs_root, testbed=None):
        n = next(made)
        d = runs_root / f"r{n}"
        d.mkdir()
        meta = {"status": "failed" if n == 1 else "completed", "failure_class": "setup" if n == 1 else None}
        (d / "meta.json").write_text(json.dumps(meta))
        return d

    monkeypatch.setattr(runmod, "run", fake_run)
    sw.execute(path, meta, state)
    out, err = capsys.readouterr()
    assert out == ""
    lines = [line for line in err.splitlines() if line.startswith("progress: sweep ")]
    assert lines[0].startswith("progress: sweep 2/6 runs | ETA ")  # 1 of the earlier session + 1
    assert lines[-1].startswith("progress: sweep 6/6 runs, 1 failed (1 setup) | ETA 0:00:00 | elapsed ")
    assert any("failed (setup)" in line for line in lines)


def test_a_timer_sweep_crosses_modes_and_bfd_settings():
    template = Scenario(peering="bgp,bfd")
    plan = sw.grid_plan(template, sw.parse_rates("10M"), (1500,), 2, 3, sw.parse_modes("precopy,stopcopy"),
                        sw.parse_bfds("10x3,50x3,300x3"))  # fmt: skip
    points = {p.label: p.scenario for p in plan.points}
    assert len(points) == 6 and len(plan.order()) == 12
    s = points["stopcopy-bfd300x3-10M-1500"]
    assert (s.mode, s.bfd_interval_ms, s.bfd_multiplier, s.peering) == ("stopcopy", 300, 3, "bgp,bfd")
    assert plan.grid["modes"] == ["precopy", "stopcopy"] and plan.grid["bfds"] == ["10x3", "50x3", "300x3"]
    # without the axes the labels stay as they were
    assert [p.label for p in sw.grid_plan(template, (10_000_000,), (1500,), 1, 1).points] == ["10M-1500"]


def test_timer_sweep_refusals_name_the_variable():
    with pytest.raises(ConfigError, match="BFDS= sweeps BFD's timers"):
        sw.grid_plan(Scenario(peering="bgp"), (10_000_000,), (1500,), 1, 1, (), ((50, 3),))
    with pytest.raises(ConfigError, match="MODES/BFDS"):
        sw.grid_plan(Scenario(peering="bgp,bfd"), (10_000_000,), (1500,), 1, 1, (), ((50, 1),))
    with pytest.raises(ConfigError, match="MODES"):
        sw.parse_modes("precopy,,stopcopy")
