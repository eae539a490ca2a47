"""migrate.core.progress: the ETA arithmetic, the plain lines written where stderr is no terminal,
the off switch, and the live bar on a (pretended) terminal with log records routed above it."""

import io
import logging
import re

import pytest

from migrate.core import progress as pg

CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f\x7f]")  # anything but printable text and newlines


class Clock:
    """A settable clock, so that durations are exact."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _progress(total=5, **kw):
    clock, out = Clock(), io.StringIO()
    p = pg.Progress("sweep", total, "runs", stream=out, clock=clock, enabled=True, **kw)
    return p, clock, out


def _item(p, clock, label, seconds, ok=True, reason=None):
    p.start(label)
    clock.t += seconds
    p.finish(ok, reason)


def test_eta_is_the_mean_measured_duration_times_what_remains():
    assert pg.eta_s([10.0, 20.0], 3) == pytest.approx(45.0)
    assert pg.eta_s([10.0, 20.0], 3, current_s=5.0) == pytest.approx(40.0)  # the item in hand ran 5 s
    assert pg.eta_s([10.0, 20.0], 3, current_s=100.0) == pytest.approx(30.0)  # an overrun counts once
    assert pg.eta_s([], 3) is None  # nothing measured yet: unknown, not zero
    assert pg.eta_s([10.0], 0) == 0.0


def test_format_s():
    assert pg.format_s(3725.4) == "1:02:05"
    assert pg.format_s(59.6) == "0:01:00"
    assert pg.format_s(None) == "?"


def test_progress_eta_and_counts_from_measured_items():
    p, clock, _ = _progress(total=5)
    assert p.eta_s() is None
    _item(p, clock, "a", 10.0)
    _item(p, clock, "b", 30.0, ok=False, reason="setup")
    assert p.done == 2 and p.n_failed == 1 and p.failed == {"setup": 1}
    assert p.mean_s() == pytest.approx(20.0)
    assert p.eta_s() == pytest.approx(60.0)
    p.start("c")
    clock.t += 5.0
    assert p.eta_s() == pytest.approx(55.0)
    assert p.status() == "2/5 runs, 1 failed (1 setup) | ETA 0:00:55 | elapsed 0:00:45"
    assert p.line().endswith("| now c")


def test_time_between_items_counts_in_the_next_duration():
    p, clock, _ = _progress(total=3)
    _item(p, clock, "a", 10.0)
    clock.t += 20.0  # e.g. the next configuration's testbed is built
    _item(p, clock, "b", 10.0)
    assert p.durations_s == [pytest.approx(10.0), pytest.approx(30.0)]


def test_resumed_counts_and_durations_are_carried():
    p, _clock, _ = _progress(total=4, done=2, failed={"setup": 1}, durations_s=[50.0, 70.0])
    assert p.eta_s() == pytest.approx(120.0)
    assert "2/4 runs, 1 failed (1 setup)" in p.status()
    p.skip()
    assert p.done == 3 and p.eta_s() == pytest.approx(60.0)
    p.skip(1, failed_reason="configuration failed")
    assert p.done == 4 and p.failed == {"setup": 1, "configuration failed": 1} and p.eta_s() == 0.0


def test_plain_lines_without_a_terminal_are_occasional_and_clean():
    p, clock, out = _progress(total=6, min_interval_s=30.0)
    with p:
        _item(p, clock, "r1", 1.0)  # first result: printed
        _item(p, clock, "r2", 1.0)  # 1 s later: not
        _item(p, clock, "r3", 1.0, ok=False, reason="migration")  # a failure: printed
        _item(p, clock, "r4", 40.0)  # 40 s after the last line: printed
        _item(p, clock, "r5", 1.0)  # not
        _item(p, clock, "r6", 1.0)  # the last: printed
    lines = out.getvalue().splitlines()
    assert not CONTROL.search(out.getvalue())
    assert all(line.startswith("progress: sweep ") for line in lines)
    assert [line.rsplit("| last ", 1)[1] for line in lines] == [
        "r1 ok in 0:00:01",
        "r3 failed (migration) in 0:00:01",
        "r4 ok in 0:00:40",
        "r6 ok in 0:00:01",
    ]
    assert lines[-1].startswith("progress: sweep 6/6 runs, 1 failed (1 migration) | ETA 0:00:00 | elapsed 0:00:45")


def test_an_interrupted_command_prints_where_it_stopped():
    p, clock, out = _progress(total=3)
    with pytest.raises(KeyboardInterrupt), p:
        _item(p, clock, "r1", 10.0)
        p.start("r2")
        clock.t += 4.0
        raise KeyboardInterrupt
    last = out.getvalue().splitlines()[-1]
    assert last == "progress: sweep 1/3 runs | ETA 0:00:16 | elapsed 0:00:14 | now r2"


def test_off_switch(monkeypatch):
    monkeypatch.setenv(pg.ENV_SWITCH, "0")
    clock, out = Clock(), io.StringIO()
    with pg.Progress("sweep", 2, "runs", stream=out, clock=clock) as p:
        _item(p, clock, "r1", 3.0)
        _item(p, clock, "r2", 5.0)
    assert out.getvalue() == ""
    assert p.mean_s() == pytest.approx(4.0)  # the counts are kept
    monkeypatch.setenv(pg.ENV_SWITCH, "1")
    assert pg.enabled_by_env()


class FakeTty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_terminal_detection():
    assert pg.is_live_terminal(FakeTty(), {"TERM": "xterm"})
    assert not pg.is_live_terminal(FakeTty(), {"TERM": "dumb"})
    assert not pg.is_live_terminal(io.StringIO(), {"TERM": "xterm"})


def test_live_bar_on_a_terminal_routes_log_records_above_it(monkeypatch):
    monkeypatch.setenv("TERM", "xterm")
    out = FakeTty()
    handler = logging.StreamHandler(out)
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        clock = Clock()
        with pg.Progress("sweep", 2, "runs", stream=out, clock=clock, enabled=True) as p:
            assert p.live
            p.start("r1")
            logging.getLogger("vrmig.test").warning("a log record during the bar")
            clock.t += 2.0
            p.finish()
        assert handler.stream is out  # given back
    finally:
        root.removeHandler(handler)
    text = out.getvalue()
    assert "\x1b[" in text  # drawn with cursor control
    assert text.count("a log record during the bar") == 1
    # on a line of its own, cleared first (written straight to the stream, the bar's next redraw
    # would move the cursor up over it and erase it)
    assert re.search(r"\r\x1b\[2K(\x1b\[1A\x1b\[2K)*a log record during the bar\n", text), repr(text)
    assert "1/2 runs" in text
    assert "progress:" not in text  # no plain lines on a terminal


def test_item_blocks_finish_on_success_and_stay_in_hand_on_error():
    p, clock, out = _progress(total=2)
    with pytest.raises(OSError), p:
        with p.item("download"):
            clock.t += 3.0
        with p.item("extract"):
            raise OSError("disk full")
    assert p.done == 1 and p.durations_s == [pytest.approx(3.0)]
    assert out.getvalue().splitlines()[-1].endswith("| now extract")
