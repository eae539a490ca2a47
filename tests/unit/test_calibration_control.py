"""analysis.metrics.calibration_control: routing sessions against pauses and cuts of known length,
on synthetic arrays and on the records of a real ``make calibrate PEERING=bgp,bfd BFD=50x3
KIND=pause DURATIONS=100,400 REPS=1`` run (tests/fixtures/peering/calibrate-pause, 2026-11-25)."""

import json
from pathlib import Path

import numpy as np
import pytest

from analysis.load import read_jsonl
from analysis.metrics import calibration_control as ccm
from analysis.metrics.calibration import Edge, Event, events_from_actions
from analysis.metrics.control_plane import Flap, LogEvent
from migrate.testbed.builder import Testbed

MS = 10**6
T0 = 1_000_000 * 10**9  # an arbitrary CLOCK_REALTIME origin
TIMERS = ccm.Timers(bgp_hold_s=9, bfd_interval_ms=50, bfd_multiplier=3)
ROUTER = {"A": "198.18.1.1", "B": "198.18.2.1"}
FIX = Path(__file__).resolve().parents[1] / "fixtures" / "peering" / "calibrate-pause"


def _event(index: int, kind: str, start_ms: float, dur_ms: float) -> Event:
    s, e = T0 + int(start_ms * MS), T0 + int((start_ms + dur_ms) * MS)
    return Event(index, kind, dur_ms, 0, Edge(s, s + MS), Edge(e, e + MS))


def _bfd_every_50(stop_ms: float, silent: tuple[float, float]) -> np.ndarray:
    """The router's BFD packets every 50 ms from 0 to ``stop_ms``, none in ``silent``."""
    t = np.arange(0.0, stop_ms, 50.0)
    t = t[(t < silent[0]) | (t >= silent[1])]
    return (T0 + t * MS).astype(np.int64)


def _flap(peer: str, at_ms: float) -> Flap:
    return Flap(peer, T0 + int(at_ms * MS), "BFD session down", T0 + int((at_ms + 1500) * MS))


def test_synthetic_long_pause_that_brought_bfd_and_bgp_down_passes():
    ev = _event(0, "pause", 1000.0, 400.0)  # the router sends nothing from 1000 to 1401 ms
    bfd = _bfd_every_50(5000.0, (1000.0, 1401.0))  # last at 950, first after at 1450: 500 ms
    times = {"bfd": bfd, "bgp": (T0 + np.array([0.0, 3000.0]) * MS).astype(np.int64)}
    flaps = {"bfd": [_flap("A", 1100.0)], "bgp": [_flap("A", 1100.0)]}
    for proto in ("bfd", "bgp"):
        c = ccm.check_event(ev, proto, "A", None, T0 + 5000 * MS, TIMERS, flaps, times)
        assert c.judged and c.deciding_silence_ms == pytest.approx(500.0)
        assert c.went_down is True and c.expected_down is True and c.passed_session is True
        assert c.passed is True, c
    c = ccm.check_event(ev, "bfd", "A", None, T0 + 5000 * MS, TIMERS, flaps, times)
    assert c.match_error_ms == pytest.approx(500.0 - 400.0) and c.passed_match is True


def test_synthetic_flaps_are_what_decides_a_session_that_should_have_gone_down():
    ev = _event(0, "pause", 1000.0, 400.0)
    times = {"bfd": _bfd_every_50(5000.0, (1000.0, 1401.0)), "bgp": np.zeros(0, dtype=np.int64)}
    c = ccm.check_event(ev, "bfd", "A", None, None, TIMERS, {"bfd": [], "bgp": []}, times)
    assert c.went_down is False and c.expected_down is True and c.passed is False
    # a flap of the other peer, or one before the event, is not this event's
    other = {"bfd": [_flap("B", 1100.0), _flap("A", 500.0)], "bgp": []}
    assert ccm.check_event(ev, "bfd", "A", None, None, TIMERS, other, times).went_down is False


def test_synthetic_short_pause_must_leave_the_sessions_up():
    ev = _event(0, "pause", 1010.0, 80.0)  # silence from 1000 to 1100 ms: 100 ms < 150 ms
    times = {"bfd": _bfd_every_50(5000.0, (1001.0, 1091.0)), "bgp": np.zeros(0, dtype=np.int64)}
    ok = ccm.check_event(ev, "bfd", "B", None, None, TIMERS, {"bfd": [], "bgp": []}, times)
    assert ok.deciding_silence_ms == pytest.approx(100.0) and ok.expected_down is False and ok.passed is True
    flapped = ccm.check_event(ev, "bfd", "B", None, None, TIMERS, {"bfd": [_flap("B", 1050.0)], "bgp": []}, times)
    assert flapped.went_down is True and flapped.passed_session is False and flapped.passed is False


def test_synthetic_silence_far_from_the_pause_fails_the_match():
    ev = _event(0, "pause", 1000.0, 200.0)  # the router silent 1000-1600 ms: 600 ms for a 200 ms pause
    times = {"bfd": _bfd_every_50(5000.0, (1000.0, 1600.0)), "bgp": np.zeros(0, dtype=np.int64)}
    c = ccm.check_event(ev, "bfd", "A", None, None, TIMERS, {"bfd": [_flap("A", 1200.0)], "bgp": []}, times)
    assert c.passed_session is True and c.passed_match is False and c.passed is False


def test_synthetic_a_cut_judges_only_b_and_a_bfd_cut_that_went_down_has_no_match():
    ev = _event(0, "cut", 1000.0, 400.0)
    times = {"bfd": _bfd_every_50(5000.0, (1000.0, 2400.0)), "bgp": np.zeros(0, dtype=np.int64)}
    flaps = {"bfd": [_flap("B", 1150.0)], "bgp": [_flap("B", 1150.0)]}
    b = ccm.check_event(ev, "bfd", "B", None, None, TIMERS, flaps, times)
    assert b.judged and b.passed_session is True and b.passed_match is None and b.passed is True
    assert any("slow rate" in r for r in b.reasons)
    a = ccm.check_event(ev, "bfd", "A", None, None, TIMERS, flaps, times)
    assert not a.judged and a.passed is None and any("not judged" in r for r in a.reasons)


def test_synthetic_absent_records_are_null_with_a_reason_and_never_a_pass():
    ev = _event(0, "pause", 1000.0, 400.0)
    no_capture = ccm.check_event(ev, "bfd", "A", None, None, TIMERS, {"bfd": [_flap("A", 1100.0)], "bgp": []}, None)
    assert no_capture.silence is None and no_capture.deciding_silence_ms is None and no_capture.passed is None
    assert any("no capture" in r for r in no_capture.reasons) and not ccm.met(no_capture)
    times = {"bfd": _bfd_every_50(5000.0, (1000.0, 1401.0)), "bgp": np.zeros(0, dtype=np.int64)}
    no_log = ccm.check_event(ev, "bfd", "A", None, None, TIMERS, None, times)
    assert no_log.went_down is None and no_log.flaps is None and no_log.passed is None
    assert any("no log" in r for r in no_log.reasons) and not ccm.met(no_log)
    cc = ccm.calibrate_control([ev], ("bgp", "bfd"), {}, {"A": times}, ROUTER, TIMERS, ["A"])
    assert cc.passed is False and "no log of A" in cc.notes
    rec = ccm.record(cc.checks[0])
    assert rec["went_down"] == "" and rec["pass"] == "" and "no log" in rec["reason"]


def test_synthetic_a_silence_at_the_detect_time_gets_no_up_down_verdict():
    ev = _event(0, "pause", 1000.0, 99.0)  # silence 1000-1150 ms: exactly the detect time
    times = {"bfd": _bfd_every_50(5000.0, (1001.0, 1150.0)), "bgp": np.zeros(0, dtype=np.int64)}
    c = ccm.check_event(ev, "bfd", "A", None, None, TIMERS, {"bfd": [], "bgp": []}, times)
    assert c.borderline and c.expected_down is None and c.passed_session is None and c.passed_match is True
    assert ccm.met(c)
    # BGP beside it is decided by that BFD silence; its own keepalive gap, still open where the
    # records end, does not withhold the row
    t_end = T0 + 3000 * MS
    bgp_t = (T0 + np.array([500.0]) * MS).astype(np.int64)
    g = ccm.check_event(ev, "bgp", "A", t_end, None, TIMERS, {"bfd": [], "bgp": []}, {**times, "bgp": bgp_t})
    assert g.borderline and g.silence_open and not g.deciding_open and g.passed is None
    assert ccm.met(g)


def test_synthetic_silence_stops_at_the_next_event_and_open_gaps_are_flagged():
    ev = _event(0, "pause", 1000.0, 400.0)
    t = (T0 + np.array([900.0, 950.0]) * MS).astype(np.int64)  # nothing after the pause
    span, is_open = ccm.silence_span(t, ev, T0 + 3000 * MS)
    assert is_open and span == (ev.start.after_ns, T0 + 3000 * MS)
    c = ccm.check_event(ev, "bfd", "A", T0 + 3000 * MS, None, TIMERS, {"bfd": [], "bgp": []},
                        {"bfd": t, "bgp": t})  # fmt: skip
    assert c.silence_open and c.silence is not None and c.silence.gap_ms == pytest.approx(2050.0)
    assert c.passed_match is None and c.passed is None and not ccm.met(c)


def test_bgp_only_peering_is_judged_against_the_hold_time():
    timers = ccm.Timers(bgp_hold_s=9)
    assert not timers.bfd and timers.limit_ms == 9000.0
    ev = _event(0, "pause", 1000.0, 400.0)
    bgp = (T0 + np.array([0.0, 3000.0, 6000.0]) * MS).astype(np.int64)
    c = ccm.check_event(ev, "bgp", "A", None, None, timers, {"bgp": []}, {"bgp": bgp})
    assert c.expected_down is False and c.passed is True and c.match_target_ms is None


def test_absent_hold_time_is_no_limit_and_no_verdict_never_a_0_ms_limit():
    timers = ccm.Timers(bgp_hold_s=None)
    assert timers.limit_ms is None
    ev = _event(0, "pause", 1000.0, 400.0)
    bgp = (T0 + np.array([0.0, 3000.0, 6000.0]) * MS).astype(np.int64)
    c = ccm.check_event(ev, "bgp", "A", None, None, timers, {"bgp": []}, {"bgp": bgp})
    assert c.limit_ms is None and c.expected_down is None and c.passed is None
    assert any("no BGP hold time in meta.json" in r for r in c.reasons)
    # meta.json's peering without timers reads as no hold time, not as 0 s
    meta, events = _fixture()
    meta["peering"]["timers"] = {}
    cc = ccm.load_control(FIX, meta, events)
    assert cc is not None and cc.timers.bgp_hold_s is None and cc.timers.limit_ms is None
    assert cc.checks and all(x.expected_down is None and x.passed is None for x in cc.checks)
    assert "limit - ms, BGP hold - s" in ccm.format_lines(cc)[0]


def _fixture():
    meta = json.loads((FIX / "meta.json").read_text())
    events, _ = events_from_actions(read_jsonl(FIX / "actions.jsonl"))
    return meta, events


def test_real_pauses_400_ms_brings_bfd_and_bgp_down_100_ms_does_not():
    meta, events = _fixture()
    cc = ccm.load_control(FIX, meta, events)
    assert cc is not None and cc.timers.limit_ms == 150.0 and not cc.notes
    assert len(cc.checks) == 2 * 2 * 2  # events x protocols x peers
    by = {(c.event.nominal_ms, c.protocol, c.peer): c for c in cc.checks}
    for peer in ROUTER:
        for proto in ("bfd", "bgp"):
            long, short = by[(400.0, proto, peer)], by[(100.0, proto, peer)]
            assert long.went_down is True and long.expected_down is True and long.passed is True, long
            assert short.went_down is False and ccm.met(short), short
        bfd = by[(400.0, "bfd", peer)]
        assert 400.0 < bfd.silence.gap_ms < 500.0 and abs(bfd.match_error_ms) <= 100.0
        assert {f.cause for f in by[(400.0, "bgp", peer)].flaps} == {"BFD session down"}
        short = by[(100.0, "bfd", peer)]
        assert 100.0 < short.silence.gap_ms < 150.0 and abs(short.match_error_ms) <= 100.0
    assert cc.passed is True


def test_real_records_with_the_flaps_ignored_fail():
    """The 400 ms pause without its flaps in the records: the calibration must fail."""
    _meta, events = _fixture()
    from analysis.metrics.control_plane import parse_bird_log

    logs = {
        r: [e for e in parse_bird_log((FIX / f"peer-{r}.log").read_text()) if "Up to Down" not in e.message]
        for r in ROUTER
    }
    from analysis.load import read_pcap
    from analysis.metrics.control_plane import dissect

    caps = {r: dissect(read_pcap(FIX / f"control-{r}.pcap")) for r in ROUTER}
    times = ccm.capture_times(caps, ROUTER, ("bgp", "bfd"))
    cc = ccm.calibrate_control(events, ("bgp", "bfd"), logs, times, ROUTER, TIMERS)
    bfd_long = [c for c in cc.checks if c.protocol == "bfd" and c.event.nominal_ms == 400.0]
    assert all(c.went_down is False and c.passed is False for c in bfd_long)
    assert cc.passed is False


def test_the_calibration_table_and_csv_of_the_real_run(tmp_path):
    import shutil

    from analysis.metrics.calibration import analyse_dir, format_table

    run = tmp_path / "run"
    shutil.copytree(FIX, run)
    cal, hv = analyse_dir(run)
    assert cal.control is not None and cal.passed is True  # no data-plane records: only the control plane
    rows = (run / ccm.CSV_NAME).read_text().splitlines()
    assert rows[0].split(",") == list(ccm.COLUMNS) and len(rows) == 1 + 8
    text = format_table(cal, hv)
    assert "control-plane checks met: 8 of 8" in text and "BFD" in text
    doc = json.loads((run / "calibration.json").read_text())
    assert doc["control_plane"]["passed"] is True and doc["passed"] is True


def test_no_peers_no_control_plane(tmp_path):
    from analysis.metrics.calibration import combine

    assert ccm.load_control(tmp_path, {}, []) is None
    assert combine(None, None) is None and combine(True, None) is True and combine(True, False) is False


def test_sessions_state_from_the_real_logs():
    from analysis.metrics.control_plane import parse_bird_log
    from migrate.experiment.peering import sessions_state

    logs = {r: parse_bird_log((FIX / f"peer-{r}.log").read_text()) for r in ROUTER}
    up, flaps = sessions_state(logs, ROUTER, ("bgp", "bfd"))
    assert flaps == 4 and all(t is not None for t in up.values())  # BFD and BGP at A and B, all back
    # cut the logs just after the 400 ms pause's BFD down: every peer is down then
    cut_at = min(e.t_ns for ev in logs.values() for e in ev if "Up to Down" in e.message) + 1000
    early = {r: [e for e in ev if e.t_ns <= cut_at] for r, ev in logs.items()}
    up, flaps = sessions_state(early, ROUTER, ("bgp", "bfd"))
    assert up["A"] is None and flaps >= 1
    never = {r: [LogEvent(T0, "TRACE", "device1", "Initializing")] for r in ROUTER}
    assert sessions_state(never, ROUTER, ("bgp",))[0] == {"A": None, "B": None}


def test_calibration_spec_passes_peering_to_its_scenario_and_defaults_to_none():
    from migrate.cli.main import build_parser
    from migrate.experiment.calibrate import CalibrationSpec, forward_window_s

    plain = CalibrationSpec()
    assert plain.peering == "" and plain.scenario().peering == "" and plain.name.endswith("-1500")
    args = ["calibrate", "--kind", "pause", "--peering", "bgp,bfd", "--bfd", "20x4", "--bgp-hold", "6", "--rate", "10M"]
    from migrate.cli.calibrate import spec_from_args

    spec = spec_from_args(build_parser().parse_args(args))
    s = spec.scenario()
    assert (s.peering, s.bfd_interval_ms, s.bfd_multiplier, s.bgp_hold_s) == ("bgp,bfd", 20, 4, 6)
    assert spec.name.endswith("-bgp+bfd") and spec.planned_s() > plain.planned_s() / 2
    # B must see the cross-traffic at half its packet rate: 10 packets within 24 ms at 10 Mbit/s
    # of 1500 B frames, more than the router's BFD and BGP packets alone bring
    assert forward_window_s(spec) == pytest.approx(10 / (0.5 * 10e6 / 12000))


def test_the_peers_wait_reads_the_state_of_the_real_logs(tmp_path):
    """Peers.sessions_up / wait_sessions_up / wait_established on the real logs, written where a
    run's peers write them: cut just after the 400 ms pause's first BFD down (A's) A is not up (the wait names
    it), the whole logs have every session up again."""
    from analysis.metrics.control_plane import parse_bird_log
    from migrate.experiment.peering import Peers
    from migrate.model.scenario import Scenario
    from tests.unit.peer_log_cut import cut_then_whole

    texts = {r: (FIX / f"peer-{r}.log").read_text() for r in ROUTER}
    logs = {r: parse_bird_log(t) for r, t in texts.items()}
    cut_at = min(e.t_ns for ev in logs.values() for e in ev if "Up to Down" in e.message) + 1000
    peers = Peers(Scenario(peering="bgp,bfd"), Testbed("t"), None, tmp_path)
    not_up = r"sessions with A were not up within 0 s after the pause"
    up = cut_then_whole(peers, tmp_path, texts, lambda ln: int(float(ln.split()[0]) * 1e9), cut_at, not_up)
    assert up is not None and up.flaps == 4
    assert peers.wait_established(1.0) == up.up_ns and set(up.up_ns) == set(ROUTER)
