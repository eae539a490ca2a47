"""A run's window (no root, no QEMU): the results directory, meta.json's first write, the signal
window, the close, and how every ending is recorded in meta.json (status, failure, failure
class).  First each run-like command (``run``, ``calibrate``, ``baseline``) with its checks and
body replaced by fakes that complete, fail or are interrupted (what each command records); then
:func:`migrate.core.runctx.open_run` itself, with a synthetic kind.

Every meta.json here is SYNTHETIC (written by the code under test around a fake body)."""

from __future__ import annotations

import json
import logging
import signal
from pathlib import Path
from typing import Any

import pytest

from migrate.core import registry as regmod
from migrate.core import runctx
from migrate.core.errors import ConfigError, Interrupted, MigrationError, TestbedError

SIGS = {signal.SIGINT: signal.getsignal(signal.SIGINT), signal.SIGTERM: signal.getsignal(signal.SIGTERM)}


@pytest.fixture(autouse=True)
def _no_state(tmp_path, monkeypatch):
    """clean-stale looks at an empty state root of the test's own; the process's SIGINT/SIGTERM
    handlers must be what they were after every test (the window puts them back)."""
    monkeypatch.setattr(regmod, "STATE_ROOT", tmp_path / "state")
    yield
    assert {s: signal.getsignal(s) for s in SIGS} == SIGS


def _only_dir(root: Path) -> Path:
    (d,) = [p for p in root.iterdir() if p.is_dir()]
    return d


def _meta(root: Path) -> dict[str, Any]:
    return json.loads((_only_dir(root) / "meta.json").read_text())


def _disarm_then_signal(abort, sig=signal.SIGTERM):
    """A signal that arrives while the abort flag is disarmed (a teardown step): recorded, not raised."""
    abort.armed = False
    signal.raise_signal(sig)


# -- make migrate (migrate.experiment.run.run) -----------------------------------------------------
def _run(tmp_path, monkeypatch, execute):
    """run() with its checks, body and analysis replaced: ``execute(phase, meta, abort)`` plays _execute."""
    from migrate.experiment import run as runmod
    from migrate.model.scenario import Scenario

    monkeypatch.setattr(runmod, "preflight", lambda s, lab=False: (object, {}))
    monkeypatch.setattr(runmod, "_analyse", lambda run_dir: None)
    monkeypatch.setattr(
        runmod, "_execute", lambda s, cls, f, reg, run_dir, meta, abort, phase, inv=None: execute(phase, meta, abort)
    )
    root = tmp_path / "results"
    raised: BaseException | None = None
    try:
        assert runmod.run(Scenario(), root) == _only_dir(root)
    except (Interrupted, KeyboardInterrupt) as err:
        raised = err
    return _meta(root), raised


def _completed(phase, meta, abort):
    phase.current = "post-migration"
    meta["status"] = "completed"


def _raises(phase_name, err):
    def execute(phase, meta, abort):
        phase.current = phase_name
        raise err

    return execute


@pytest.mark.parametrize(
    ("execute", "status", "failure", "cls"),
    [
        (_completed, "completed", None, None),
        (_raises("setup", ConfigError("NIC=foo is not a NIC")), "failed", "NIC=foo is not a NIC", "setup"),
        (_raises("setup", TestbedError("ip link add failed")), "failed", "ip link add failed", "setup"),
        (_raises("migration", MigrationError("migration timed out")), "failed", "migration timed out", "migration"),
        (_raises("post-migration", RuntimeError("boom")), "failed", "internal error: RuntimeError: boom",
         "post-migration"),
        (_raises("migration", Interrupted("interrupted by SIGINT")), "interrupted", "interrupted by SIGINT",
         "interrupted"),
    ],
    ids=["completed", "config-error", "testbed-error", "migration-error", "unexpected", "interrupted"],
)  # fmt: skip
def test_run_records_each_ending(tmp_path, monkeypatch, execute, status, failure, cls):
    meta, raised = _run(tmp_path, monkeypatch, execute)
    assert (meta["status"], meta["failure"], meta["failure_class"]) == (status, failure, cls)
    assert meta["kind"] == "migrate" and meta["finished_utc"] and "offset_end_ns" in meta["clock"]
    if status == "interrupted":
        where = _only_dir(tmp_path / "results")
        assert isinstance(raised, Interrupted) and str(raised) == f"{failure}; partial results kept in {where}"
    else:
        assert raised is None


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_run_signal_in_the_body_is_interrupted(tmp_path, monkeypatch, sig):
    def execute(phase, meta, abort):
        phase.current = "migration"
        signal.raise_signal(sig)  # the abort flag's handler raises Interrupted here
        raise AssertionError("not reached")

    meta, raised = _run(tmp_path, monkeypatch, execute)
    assert (meta["status"], meta["failure"], meta["failure_class"]) == (
        "interrupted", f"interrupted by {sig.name}", "interrupted")  # fmt: skip
    assert isinstance(raised, Interrupted)


def test_run_signal_during_teardown_is_interrupted_after_a_completed_body(tmp_path, monkeypatch):
    def execute(phase, meta, abort):
        _completed(phase, meta, abort)
        _disarm_then_signal(abort)

    meta, raised = _run(tmp_path, monkeypatch, execute)
    assert (meta["status"], meta["failure"], meta["failure_class"]) == (
        "interrupted", "interrupted by SIGTERM during teardown", "interrupted")  # fmt: skip
    assert isinstance(raised, Interrupted)


def test_run_signal_surfacing_as_another_error_keeps_that_error_in_the_message(tmp_path, monkeypatch):
    def execute(phase, meta, abort):
        phase.current = "migration"
        _disarm_then_signal(abort)
        raise MigrationError("QEMU exited")

    meta, _ = _run(tmp_path, monkeypatch, execute)
    assert (meta["status"], meta["failure"], meta["failure_class"]) == (
        "interrupted", "interrupted by SIGTERM (after: QEMU exited)", "interrupted")  # fmt: skip


def test_run_body_without_a_verdict_or_a_keyboardinterrupt_is_a_failure(tmp_path, monkeypatch):
    meta, raised = _run(tmp_path, monkeypatch, lambda phase, meta, abort: None)
    assert (meta["status"], meta["failure"], meta["failure_class"]) == (
        "failed", "internal error: the run ended without a status", "setup")  # fmt: skip
    assert raised is None
    (tmp_path / "results").rename(tmp_path / "first")
    meta, raised = _run(tmp_path, monkeypatch, _raises("migration", KeyboardInterrupt()))
    assert (meta["status"], meta["failure"], meta["failure_class"]) == (
        "failed", "internal error: the run ended without a status", "migration")  # fmt: skip
    assert isinstance(raised, KeyboardInterrupt)


# -- make calibrate (migrate.experiment.calibrate.run_calibration) ---------------------------------
class FakeCalibrator:
    """Calibrator with a scripted ``execute(meta, abort)`` and ``teardown()``."""

    execute_fn: Any = None
    teardown_fn: Any = None

    def __init__(self, spec, driver_cls, facts, run_dir, inv=None) -> None:
        self.torn_down = False

    def execute(self, meta, abort):
        if self.execute_fn is not None:
            type(self).execute_fn(meta, abort)

    def teardown(self):
        return type(self).teardown_fn() if self.teardown_fn is not None else []


def _calibrate(tmp_path, monkeypatch, execute=None, teardown=None):
    from migrate.experiment import calibrate as calmod

    monkeypatch.setattr(calmod, "check_pause_capability", lambda spec, lab=False: object)
    monkeypatch.setattr(calmod, "dependencies", lambda spec, cls: {"accel": "tcg"})
    monkeypatch.setattr(calmod, "_analyse", lambda run_dir: None)
    fake = type("Cal", (FakeCalibrator,), {"execute_fn": staticmethod(execute) if execute else None,
                                           "teardown_fn": staticmethod(teardown) if teardown else None})  # fmt: skip
    monkeypatch.setattr(calmod, "Calibrator", fake)
    root = tmp_path / "results"
    raised: BaseException | None = None
    try:
        assert calmod.run_calibration(calmod.CalibrationSpec(), root) == _only_dir(root)
    except (Interrupted, KeyboardInterrupt) as err:
        raised = err
    return _meta(root), raised


def _raise(err):
    def fn(*_args):
        raise err

    return fn


@pytest.mark.parametrize(
    ("execute", "status", "failure"),
    [
        (None, "completed", None),
        (_raise(ConfigError("KIND=foo")), "failed", "KIND=foo"),
        (_raise(MigrationError("the router did not resume")), "failed", "the router did not resume"),
        (_raise(KeyError("x")), "failed", "internal error: KeyError: 'x'"),
        (_raise(Interrupted("interrupted by SIGINT")), "interrupted", "interrupted by SIGINT"),
    ],
    ids=["completed", "config-error", "vrmig-error", "unexpected", "interrupted"],
)
def test_calibrate_records_each_ending_without_a_failure_class(tmp_path, monkeypatch, execute, status, failure):
    meta, raised = _calibrate(tmp_path, monkeypatch, execute)
    assert (meta["status"], meta["failure"], meta["failure_class"]) == (status, failure, None)
    assert meta["kind"] == "calibrate" and meta["finished_utc"] and "offset_end_ns" in meta["clock"]
    assert isinstance(raised, Interrupted) == (status == "interrupted")
    if raised is not None:
        assert "; partial results kept in " in str(raised)


def test_calibrate_signal_in_the_body_is_interrupted_and_teardown_problems_are_kept(tmp_path, monkeypatch):
    meta, raised = _calibrate(tmp_path, monkeypatch, lambda meta, abort: signal.raise_signal(signal.SIGTERM),
                              teardown=lambda: ["stop hypervisor: it hung"])  # fmt: skip
    assert (meta["status"], meta["failure"], meta["failure_class"]) == ("interrupted", "interrupted by SIGTERM", None)
    assert meta["teardown_problems"] == ["stop hypervisor: it hung"] and isinstance(raised, Interrupted)


def test_calibrate_signal_during_teardown(tmp_path, monkeypatch):
    def teardown():
        signal.raise_signal(signal.SIGINT)  # the abort flag is disarmed for the teardown
        return []

    meta, _ = _calibrate(tmp_path, monkeypatch, teardown=teardown)
    assert (meta["status"], meta["failure"]) == ("interrupted", "interrupted by SIGINT during teardown")


def test_calibrate_signal_surfacing_as_another_error_keeps_that_error_in_the_message(tmp_path, monkeypatch):
    def execute(meta, abort):
        _disarm_then_signal(abort)
        raise MigrationError("QEMU exited")

    meta, _ = _calibrate(tmp_path, monkeypatch, execute)
    assert (meta["status"], meta["failure"], meta["failure_class"]) == (
        "interrupted", "interrupted by SIGTERM (after: QEMU exited)", None)  # fmt: skip


def test_calibrate_keyboardinterrupt_passes_through_as_a_run_without_a_verdict(tmp_path, monkeypatch):
    meta, raised = _calibrate(tmp_path, monkeypatch, _raise(KeyboardInterrupt()))
    assert isinstance(raised, KeyboardInterrupt) and meta["finished_utc"]
    assert (meta["status"], meta["failure"], meta["failure_class"]) == (
        "failed", "internal error: the run ended without a status", None)  # fmt: skip


# -- make baseline (migrate.baseline.run.run_baseline) ---------------------------------------------
def _baseline(tmp_path, monkeypatch, run_config, resume: Path | None = None):
    """run_baseline() with its checks and configurations replaced: ``run_config(config, meta, abort)``."""
    from migrate.baseline import run as brun
    from migrate.baseline.spec import BaselineSpec

    monkeypatch.setattr(brun, "preflight", lambda spec: {"router_image": None, "accel": None})
    monkeypatch.setattr(brun, "check_generator", lambda spec: None)
    monkeypatch.setattr(brun, "_analyse", lambda run_dir: None)
    monkeypatch.setenv("VRMIG_PROGRESS", "0")

    def fake(spec, config, facts, run_dir, meta, abort, progress, lab_plan=None):
        info = meta["configs"][config.name] = {"status": "running"}
        run_config(config, meta, abort)
        if info["status"] == "running":
            info["status"] = "completed"

    monkeypatch.setattr(brun, "_run_config", fake)
    root = tmp_path / "results"
    raised: BaseException | None = None
    spec = BaselineSpec(hvs=("none",), sizes=(1500,), rates_bps=(10_000_000,), reps=1)
    try:
        assert brun.run_baseline(spec, root, resume_dir=resume) == (resume or _only_dir(root))
    except BaseException as err:  # what passes through is part of what is checked
        raised = err
    return json.loads(((resume or _only_dir(root)) / "meta.json").read_text()), raised


def _config_fails(config, meta, abort):
    meta["configs"][config.name]["status"] = "failed"


def test_baseline_completed(tmp_path, monkeypatch):
    meta, raised = _baseline(tmp_path, monkeypatch, lambda config, meta, abort: None)
    assert (meta["status"], meta["failure"], meta["failure_class"], raised) == ("completed", None, None, None)
    assert meta["kind"] == "baseline" and meta["finished_utc"] and len(meta["loadavg_end"]) == 3
    assert "clock" not in meta


def test_baseline_failed_configuration_is_a_setup_failure(tmp_path, monkeypatch):
    meta, raised = _baseline(tmp_path, monkeypatch, _config_fails)
    assert (meta["status"], meta["failure"], meta["failure_class"], raised) == (
        "failed", "configuration(s) failed: none-veth-r1-none", "setup", None)  # fmt: skip


@pytest.mark.parametrize("how", ["raise", "signal"])
def test_baseline_interrupted_says_how_to_resume(tmp_path, monkeypatch, how):
    def run_config(config, meta, abort):
        if how == "raise":
            raise Interrupted("interrupted by SIGINT")
        signal.raise_signal(signal.SIGTERM)

    meta, raised = _baseline(tmp_path, monkeypatch, run_config)
    run_dir = _only_dir(tmp_path / "results")
    name = "SIGINT" if how == "raise" else "SIGTERM"
    want = f"interrupted by {name}; resume with RESUME={run_dir}"
    assert (meta["status"], meta["failure"], meta["failure_class"]) == ("interrupted", want, "interrupted")
    assert isinstance(raised, Interrupted) and str(raised) == want
    assert meta["finished_utc"] and meta["loadavg_end"]


@pytest.mark.parametrize("err", [MigrationError("the router did not boot"), RuntimeError("boom"), KeyboardInterrupt()])
def test_baseline_error_outside_a_configuration_passes_through(tmp_path, monkeypatch, err):
    meta, raised = _baseline(tmp_path, monkeypatch, _raise(err))
    assert raised is err
    assert (meta["status"], meta["failure"], meta["failure_class"]) == ("running", None, None)
    assert meta["finished_utc"] and meta["loadavg_end"]


def test_baseline_resume_reopens_the_directory(tmp_path, monkeypatch):
    meta, _ = _baseline(tmp_path, monkeypatch, lambda config, meta, abort: _raise(Interrupted("x"))())
    run_dir = _only_dir(tmp_path / "results")
    assert meta["status"] == "interrupted"
    meta, raised = _baseline(tmp_path, monkeypatch, lambda config, meta, abort: None, resume=run_dir)
    assert (meta["status"], meta["failure"], meta["failure_class"], raised) == ("completed", None, None, None)
    assert len(meta["resumed_utc"]) == 1 and meta["generator_capability_resumed"] == [None]


def test_nothing_is_created_for_bad_input(tmp_path, monkeypatch):
    """A check that fails before the window (RESULTS that is not ours): exit 2, nothing created."""
    from migrate.experiment import run as runmod
    from migrate.model.scenario import Scenario

    monkeypatch.setattr(runmod, "preflight", lambda s, lab=False: pytest.fail("no preflight after bad input"))
    root = tmp_path / "results"
    root.mkdir()
    (root / "somebody-elses-file").write_text("x")
    with pytest.raises(ConfigError) as exc:
        runmod.run(Scenario(), root)
    assert exc.value.exit_code == 2 and sorted(p.name for p in root.iterdir()) == ["somebody-elses-file"]
    assert not (tmp_path / "state").exists()


# -- the window itself (migrate.core.runctx.open_run), with synthetic kinds -----------------------
LOG = logging.getLogger("test_runctx")


def _window(tmp_path, body, **kw):
    """Run ``body(run)`` in a window of a synthetic kind; returns (meta.json, what was raised, calls)."""
    calls: list[str] = []
    root = tmp_path / "results"

    def make_dir(fill):
        calls.append("make_dir")
        root.mkdir(parents=True, exist_ok=True)
        d = root / "synthetic-run"
        d.mkdir()
        fill(d)
        return d

    def describe(meta, run_dir):
        calls.append("describe")
        meta["scenario"] = {"synthetic": True}
        meta["clock"] = {"timestamps": "CLOCK_REALTIME ns", "offset_start_ns": 0}

    kw.setdefault("analyse", lambda run_dir: calls.append("analyse"))
    raised: BaseException | None = None
    try:
        with runctx.open_run("migrate", make_dir, describe, logger=LOG, **kw) as run:
            assert (run.dir / "meta.json").exists() and run.abort.armed
            calls.append("body")
            body(run)
    except BaseException as err:  # what passes through is part of what is checked
        raised = err
    return json.loads((root / "synthetic-run" / "meta.json").read_text()), raised, calls


def _phase(name):
    return lambda: name


@pytest.mark.parametrize(
    ("body", "status", "failure", "cls", "escapes"),
    [
        (lambda run: run.complete(), "completed", None, None, None),
        (_raise(ConfigError("RATE=1Q")), "failed", "RATE=1Q", "migration", None),
        (_raise(MigrationError("QMP: migration failed")), "failed", "QMP: migration failed", "migration", None),
        (_raise(OSError(28, "No space left on device")), "failed",
         "internal error: OSError: [Errno 28] No space left on device", "migration", None),
        (_raise(Interrupted("interrupted by SIGINT")), "interrupted", "interrupted by SIGINT", "interrupted",
         Interrupted),
        (lambda run: None, "failed", "internal error: the run ended without a status", "migration", None),
        (_raise(KeyboardInterrupt()), "failed", "internal error: the run ended without a status", "migration",
         KeyboardInterrupt),
    ],
    ids=["completed", "config-error", "migration-error", "unexpected", "interrupted", "no-verdict", "keyboard"],
)  # fmt: skip
def test_window_records_each_ending(tmp_path, body, status, failure, cls, escapes):
    meta, raised, calls = _window(tmp_path, body, failure_class=_phase("migration"))
    assert (meta["status"], meta["failure"], meta["failure_class"]) == (status, failure, cls)
    assert meta["finished_utc"] and "offset_end_ns" in meta["clock"] and meta["scenario"] == {"synthetic": True}
    assert type(raised) is escapes if escapes else raised is None
    if escapes is Interrupted:
        assert str(raised) == f"{failure}; partial results kept in {tmp_path / 'results' / 'synthetic-run'}"
    # analysis runs once meta.json is closed, unless an exception the window does not record passes through
    want = ["make_dir", "describe", "body"] + ([] if escapes is KeyboardInterrupt else ["analyse"])
    assert calls == want


def test_window_the_class_is_the_one_at_the_moment_of_the_failure(tmp_path):
    phase = {"now": "setup"}

    def body(run):
        phase["now"] = "post-migration"
        run.fail("the router stopped forwarding")
        phase["now"] = "setup"
        raise MigrationError("teardown: QEMU would not stop")

    meta, raised, _ = _window(tmp_path, body, failure_class=lambda: phase["now"])
    assert raised is None and (meta["status"], meta["failure_class"]) == ("failed", "post-migration")
    assert meta["failure"] == "the router stopped forwarding; then: teardown: QEMU would not stop"


def test_window_kind_without_failure_classes(tmp_path):
    meta, _, _ = _window(tmp_path, _raise(MigrationError("x")))
    assert (meta["status"], meta["failure_class"]) == ("failed", None)
    meta, raised, _ = _window(tmp_path / "b", _raise(Interrupted("interrupted by SIGTERM")))
    assert (meta["status"], meta["failure_class"], type(raised)) == ("interrupted", None, Interrupted)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_window_signal_during_the_body_is_an_interrupted_run(tmp_path, sig):
    def body(run):
        signal.raise_signal(sig)
        raise AssertionError("the armed flag raises Interrupted at the signal")

    meta, raised, calls = _window(tmp_path, body, failure_class=_phase("setup"))
    assert (meta["status"], meta["failure"], meta["failure_class"]) == (
        "interrupted", f"interrupted by {sig.name}", "interrupted")  # fmt: skip
    assert isinstance(raised, Interrupted) and calls[-1] == "analyse"


def test_window_signal_before_meta_json_exists_interrupts_once_it_does(tmp_path):
    """A signal between the directory's creation and meta.json's first write is held until
    meta.json exists: an interrupted run, never a directory without meta.json."""
    calls = []

    def make_dir(fill):
        d = tmp_path / "run"
        d.mkdir()
        signal.raise_signal(signal.SIGTERM)  # the flag is disarmed: recorded, not raised
        fill(d)
        return d

    with pytest.raises(Interrupted):
        with runctx.open_run("calibrate", make_dir, lambda meta, d: None, logger=LOG) as run:
            calls.append(run)
    assert calls == []  # the body never ran
    meta = json.loads((tmp_path / "run" / "meta.json").read_text())
    assert (meta["status"], meta["failure"]) == ("interrupted", "interrupted by SIGTERM")


def test_window_signal_while_disarmed_is_interrupted_after_the_body(tmp_path):
    def teardown_with_signal(run):
        run.complete()
        _disarm_then_signal(run.abort, signal.SIGINT)

    meta, raised, _ = _window(tmp_path, teardown_with_signal, failure_class=_phase("migration"))
    assert (meta["status"], meta["failure"], meta["failure_class"]) == (
        "interrupted", "interrupted by SIGINT during teardown", "interrupted")  # fmt: skip
    assert isinstance(raised, Interrupted)


def test_window_signal_surfacing_as_another_error(tmp_path):
    def body(run):
        _disarm_then_signal(run.abort)
        raise MigrationError("QEMU exited")

    meta, raised, _ = _window(tmp_path, body, failure_class=_phase("migration"))
    assert (meta["status"], meta["failure"], meta["failure_class"]) == (
        "interrupted", "interrupted by SIGTERM (after: QEMU exited)", "interrupted")  # fmt: skip
    assert isinstance(raised, Interrupted)


def test_window_without_records_errors_lets_them_through_unrecorded(tmp_path):
    err = MigrationError("a configuration's registry could not open")
    meta, raised, calls = _window(tmp_path, _raise(err), failure_class="setup", records_errors=False)
    assert raised is err and (meta["status"], meta["failure"], meta["failure_class"]) == ("running", None, None)
    assert meta["finished_utc"] and "analyse" not in calls
    meta, raised, _ = _window(tmp_path / "b", lambda run: run.fail("1 configuration failed"), failure_class="setup",
                              records_errors=False)  # fmt: skip
    assert raised is None and (meta["status"], meta["failure_class"]) == ("failed", "setup")


def test_window_resumable_says_how_to_resume_and_reopen_continues_meta_json(tmp_path):
    meta, raised, _ = _window(tmp_path, _raise(Interrupted("interrupted by SIGINT")), failure_class="setup",
                              records_errors=False, resumable=True)  # fmt: skip
    run_dir = tmp_path / "results" / "synthetic-run"
    assert meta["failure"] == f"interrupted by SIGINT; resume with RESUME={run_dir}" == str(raised)
    meta["kept"] = "from the first session"
    (run_dir / "meta.json").write_text(json.dumps(meta))

    def describe(meta, d):
        meta["resumed_utc"] = ["now"]

    with runctx.open_run("baseline", lambda fill: run_dir, describe, logger=LOG, reopen=True, resumable=True) as run:
        assert (run.meta["status"], run.meta["failure"], run.meta["kept"]) == (
            "running",
            None,
            "from the first session",
        )
        run.complete()
    meta = json.loads((run_dir / "meta.json").read_text())
    assert (meta["status"], meta["failure"], meta["resumed_utc"], meta["kept"]) == (
        "completed", None, ["now"], "from the first session")  # fmt: skip


def test_window_close_adds_the_kinds_fields_before_analysis_and_the_raise(tmp_path):
    seen = {}

    def on_close(meta):
        meta["loadavg_end"] = [0.0, 0.0, 0.0]

    def analyse(run_dir):
        seen.update(json.loads((run_dir / "meta.json").read_text()))

    _, raised, _ = _window(tmp_path, _raise(Interrupted("interrupted by SIGINT")), on_close=on_close, analyse=analyse)
    assert isinstance(raised, Interrupted)
    assert seen["status"] == "interrupted" and seen["loadavg_end"] == [0.0, 0.0, 0.0] and seen["finished_utc"]


def test_window_cleans_stale_runs_before_it_creates_anything(tmp_path, monkeypatch):
    order = []
    monkeypatch.setattr(runctx, "clean_stale_before_a_run", lambda logger: order.append("clean-stale"))

    def make_dir(fill):
        order.append("make_dir")
        d = tmp_path / "run"
        d.mkdir()
        fill(d)
        return d

    with runctx.open_run("calibrate", make_dir, lambda meta, d: None, logger=LOG) as run:
        run.complete()
    assert order == ["clean-stale", "make_dir"]


def test_a_run_directory_appears_with_its_meta_json_or_not_at_all(tmp_path):
    """A process SIGKILLed while its run directory is being opened (after meta.json's first
    write, before the rename) leaves no run directory, only a hidden one, which the next opening
    removes; a ``fill`` that raises leaves nothing."""
    import os

    from migrate.testbed.results import is_opening, new_run_dir

    root = tmp_path / "results"
    pid = os.fork()
    if pid == 0:  # the child: killed inside fill, once meta.json is written
        try:

            def fill(d):
                (d / "meta.json").write_text("{}")
                os.kill(os.getpid(), signal.SIGKILL)

            new_run_dir(root, "killed", fill=fill)
        finally:
            os._exit(1)  # never reached
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    left = [p for p in root.iterdir() if p.is_dir()]
    assert len(left) == 1 and is_opening(left[0]) and left[0].name.endswith(f".opening-{pid}"), left

    made = new_run_dir(root, "next", fill=lambda d: (d / "meta.json").write_text("{}"))
    assert [p.name for p in root.iterdir() if p.is_dir()] == [made.name]  # the half-opened one is gone
    assert (made / "meta.json").read_text() == "{}" and not is_opening(made)

    def failing(d):
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        new_run_dir(root, "failed", fill=failing)
    assert [p.name for p in root.iterdir() if p.is_dir()] == [made.name]
