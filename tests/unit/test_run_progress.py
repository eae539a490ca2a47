"""A single migration's progress: its phases in order and the ETA from the scenario's schedule
(DURATION and AFTER given as the instruments start; a fake clock; plain lines as on CI)."""

import io

import pytest

from migrate.experiment.run_progress import PHASES, RunProgress


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_phases_in_order_with_an_eta_from_the_schedule():
    clock, out = Clock(), io.StringIO()
    with RunProgress(clock=clock, stream=out, live=False, enabled=True, min_interval_s=0) as rp:
        assert rp.progress.label == PHASES[0] and rp.eta_s() is None  # the boot's length is unknown
        clock.t += 12.0
        t0 = clock.t  # the schedule starts; forwarding is seen 1 s later
        clock.t += 1.0
        rp.instruments_started(duration_s=20, after_s=3, at=t0)
        assert rp.eta_s() == pytest.approx(19.0)
        clock.t += 4.0
        rp.migrating()
        assert rp.eta_s() == pytest.approx(15.0)
        clock.t += 14.0  # a migration that ends 1 s before the schedule: AFTER still holds
        rp.migrated()
        assert rp.eta_s() == pytest.approx(3.0)
        clock.t += 3.0
        rp.traffic_ended()
        assert rp.eta_s() == 0.0 and rp.progress.label == PHASES[-1]
    lines = out.getvalue().splitlines()
    assert lines[-1].startswith("progress: migrate 5/5 phases | ETA 0:00:00")
    assert "last teardown and analysis ok" in lines[-1]
    assert any("2/5 phases | ETA 0:00:15" in ln for ln in lines), lines


def test_an_interrupted_run_shows_the_phase_it_stopped_in():
    clock, out = Clock(), io.StringIO()
    rp = RunProgress(clock=clock, stream=out, live=False, enabled=True)
    with pytest.raises(KeyboardInterrupt), rp:
        rp.instruments_started(10.0, 0.0)
        raise KeyboardInterrupt
    assert out.getvalue().splitlines()[-1].endswith("| now forwarding before the migration")


def test_an_error_before_the_boot_ended_adds_no_line_to_its_own():
    out = io.StringIO()
    with pytest.raises(RuntimeError), RunProgress(stream=out, live=False, enabled=True):
        raise RuntimeError("a testbed error, reported on its own line")
    assert out.getvalue() == ""


def test_switched_off_it_prints_nothing():
    out = io.StringIO()
    with RunProgress(stream=out, enabled=False) as rp:
        rp.instruments_started(10.0, 0.0)
        rp.migrating()
    assert out.getvalue() == ""


def test_a_run_inside_a_sweeps_progress_stays_silent():
    """The sweep's progress speaks for its runs: a second bar would fight over the terminal."""
    from migrate.core.progress import Progress

    outer, inner = io.StringIO(), io.StringIO()
    with Progress("sweep", 1, "runs", stream=outer, live=False, enabled=True, min_interval_s=0) as sweep:
        sweep.start("r01")
        with RunProgress(stream=inner, live=False, enabled=True, min_interval_s=0) as rp:
            rp.instruments_started(10.0, 0.0)
        sweep.finish()
    assert inner.getvalue() == "" and "sweep 1/1 runs" in outer.getvalue()
    with RunProgress(stream=inner, live=False, enabled=True, min_interval_s=0) as rp:
        rp.instruments_started(10.0, 0.0)  # alone again: it speaks
    assert "progress: migrate" in inner.getvalue()
