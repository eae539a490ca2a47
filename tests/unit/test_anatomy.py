"""analysis.metrics.anatomy: the outage's timeline and phases.

Two real PEERING=bgp,bfd BFD=50x3 runs (tests/fixtures/anatomy/*.json say which): a pre-copy
whose sessions survived, and a stop-and-copy whose 0.83 s pause brought BFD and BGP down, so
that the traffic came back after the resume and was blackholed again until BGP had re-learned
the sink's route.  The edge cases run on SYNTHETIC gap arrays, named as such."""

import json
from pathlib import Path

import numpy as np
import pytest

from analysis.metrics import anatomy as am

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "anatomy"
MS = 1_000_000


def _real(name: str) -> am.Anatomy:
    r = json.loads((FIX / f"{name}.json").read_text())
    stop, resume = am.blackout_marks("kvm", "qmp", r["start_ns"], r["qmp_events"])
    sink = r["sink"]
    return am.outage_anatomy(
        r["start_ns"], stop, resume, np.asarray(sink["gaps"], dtype=np.int64), sink["last_ns"], r["gen_end_ns"],
        r["packet_interval_s"], sink["gap_threshold_ns"], r["announce_ns"], am.control_marks(r["control_plane"]),
    )  # fmt: skip


def test_stopcopy_outage_includes_the_bgp_reconvergence():
    a = _real("kvm-stopcopy-bgp-bfd")
    ph = {p.key: p for p in a.phases}
    assert ph["vcpu_blackout"].seconds == pytest.approx(0.8268, abs=1e-3)
    assert ph["reattachment"].seconds == pytest.approx(0.0133, abs=1e-3)
    # traffic came back 13 ms after the resume, then BGP fell (BFD had expired during the pause)
    # and the sink's route was gone until it was re-learned: 2.13 s of reconvergence
    assert ph["reconvergence"].seconds == pytest.approx(2.1335, abs=1e-3)
    assert ph["outage"].seconds == pytest.approx(2.9744, abs=1e-3)
    t = {m.key: m.t_ns for m in a.marks}
    assert t["vcpu_stop"] < t["bfd_down"] < t["vcpu_resume"] < t["first_packet"] < t["bgp_up"] < t["full_rate"]
    assert t["routes_back"] < t["full_rate"]  # the traffic returned only once the routes had
    assert sum(p.seconds for p in a.phases if p.key != "outage") == pytest.approx(
        (t["full_rate"] - t["vcpu_stop"]) / 1e9
    )


def test_precopy_outage_is_blackout_plus_reattachment():
    a = _real("kvm-precopy-bgp-bfd")
    ph = {p.key: p for p in a.phases}
    assert ph["reconvergence"].seconds == 0
    assert ph["outage"].seconds == pytest.approx(0.0338, abs=1e-4)  # the packet downtime of that run
    assert not any(m.key.endswith("_down") for m in a.marks)
    assert ph["vcpu_blackout"].resolution_s < 1e-3


def _synthetic(gaps, last_ns=10_000 * MS, stop=1_000 * MS, resume=1_100 * MS, end=10_000 * MS, thr=4 * MS, extra=()):
    return am.outage_anatomy(
        0, am.Mark("vcpu_stop", stop, "synthetic", 0.0), am.Mark("vcpu_resume", resume, "synthetic", 0.0),
        np.asarray(gaps, dtype=np.int64).reshape(-1, 4), last_ns, end, 0.001, thr, extra=extra,
    )  # fmt: skip


def test_synthetic_delay_only_gaps_do_not_extend_the_outage():
    a = _synthetic([[990 * MS, 1_110 * MS, 10, 100], [1_300 * MS, 1_306 * MS, 300, 301]])
    assert a.phase("reconvergence").seconds == 0  # the later gap lost nothing
    assert a.phase("outage").seconds == pytest.approx(0.120)


def test_synthetic_lossy_gaps_within_settle_chain_and_later_ones_do_not():
    gaps = [[990 * MS, 1_110 * MS, 10, 100], [1_500 * MS, 2_500 * MS, 400, 1400], [4_000 * MS, 4_100 * MS, 2900, 3000]]
    a = _synthetic(gaps)
    assert a.mark("full_rate").t_ns == 2_500 * MS
    assert a.phase("reconvergence").seconds == pytest.approx(1.39)


def test_synthetic_records_ending_inside_the_settle_time_give_a_bound():
    a = _synthetic([[990 * MS, 1_110 * MS, 10, 100], [1_500 * MS, 2_500 * MS, 400, 1400]], last_ns=2_900 * MS)
    p = a.phase("reconvergence")
    assert p.seconds is None and p.lower_s == pytest.approx(1.39) and p.upper_s is None
    assert a.phase("outage").seconds is None


def test_synthetic_traffic_never_back_is_absent_not_zero():
    a = _synthetic([[200 * MS, 900 * MS, 1, 2]], last_ns=990 * MS)
    assert a.mark("first_packet").t_ns is None and a.mark("full_rate").bound == "lower"
    assert a.phase("reattachment").seconds is None and a.phase("reattachment").why_absent
    out = a.phase("outage")  # a bound: from the last packet until the generator stopped
    assert out.seconds is None and out.lower_s == pytest.approx(9.010) and out.upper_s is None


def test_synthetic_no_gap_over_the_blackout_is_an_upper_bound():
    a = _synthetic([[200 * MS, 205 * MS, 1, 3]], stop=1_000 * MS, resume=1_002 * MS)
    p = a.phase("reattachment")
    assert p.seconds is None and p.lower_s == 0 and p.upper_s == pytest.approx(0.004)


def test_synthetic_first_packet_before_the_recorded_resume_is_not_a_negative_phase():
    a = _synthetic([[990 * MS, 1_090 * MS, 10, 100]], resume=1_100 * MS)
    p = a.phase("reattachment")
    assert p.seconds is None and "before the recorded resume" in p.why_absent
    assert a.phase("outage").seconds == pytest.approx(0.100)


def test_synthetic_first_packet_within_the_resumes_resolution_before_it_is_a_bound():
    """A QMP RESUME stamped 35 us after the first packet (its resolution 264 us; seen in a real
    stop-and-copy run): the router restarted at most 264 us before the record, so the
    reattachment is the bound [0, 229 us], not absent and not negative."""
    resume = am.Mark("vcpu_resume", 1_100 * MS + 35_000, "synthetic QMP RESUME", 0.000264)
    a = am.outage_anatomy(
        0, am.Mark("vcpu_stop", 1_000 * MS, "synthetic", 0.0), resume,
        np.asarray([[990 * MS, 1_100 * MS, 10, 100]], dtype=np.int64), 10_000 * MS, 10_000 * MS, 0.001, 4 * MS,
    )  # fmt: skip
    p = a.phase("reattachment")
    assert p.seconds is None and p.lower_s == 0 and p.upper_s == pytest.approx(0.000229)
    assert "a bound" in p.why_absent
    assert a.phase("outage").seconds == pytest.approx(0.110)


def test_missing_resume_is_absent_with_its_reason():
    stop, resume = am.blackout_marks("kvm", "qmp", 0, [{"t_ns": 5, "side": "src", "event": "STOP"}])
    assert stop.t_ns == 5 and resume.t_ns is None and "RESUME" in resume.why_absent
    a = am.outage_anatomy(0, stop, resume, np.zeros((0, 4)), 10_000, 10_000, 0.001, 4 * MS)
    assert a.phase("vcpu_blackout").seconds is None and "RESUME" in a.phase("vcpu_blackout").why_absent


def test_synthetic_a_flap_before_the_migration_is_not_the_migrations():
    """Synthetic control plane: BFD flapped 6 s before the migration began (a busy TCG guest during
    the settle time) and again during it; the marks take the flap during the migration only."""
    cp = {"bfd": {"flap_details": [
        {"peer": "A", "down_ns": 1_000, "up_ns": 2_000},
        {"peer": "A", "down_ns": 7_000_000_000, "up_ns": 9_000_000_000},
    ]}}  # fmt: skip
    marks = {m.key: m.t_ns for m in am.control_marks(cp, since_ns=6_000_000_000)}
    assert marks == {"bfd_down": 7_000_000_000, "bfd_up": 9_000_000_000}
    assert {m.key: m.t_ns for m in am.control_marks(cp)}["bfd_down"] == 1_000  # all of the run


def test_synthetic_a_lossy_gap_before_the_sessions_are_back_is_part_of_the_outage():
    """Synthetic: traffic back 20 ms after the resume, then a second lossy gap 1.3 s later (the
    restored router dropped its OSPF adjacency and the sink's route with it) until 6 s; the
    adjacency is up again at 5.5 s.  With that mark the outage runs to the second gap's end;
    without it the second gap, beyond settle_s, is not the migration's."""
    gaps = [[990 * MS, 1_120 * MS, 10, 140], [2_420 * MS, 6_000 * MS, 1_440, 5_000]]
    up = am.Mark("ospf_up", 5_500 * MS, "synthetic", 1e-6)
    with_cp = _synthetic(gaps, extra=[up])
    assert with_cp.mark("full_rate").t_ns == 6_000 * MS
    assert _synthetic(gaps).mark("full_rate").t_ns == 1_120 * MS


def test_synthetic_a_session_never_up_again_keeps_the_outage_open_to_the_generators_stop():
    """Synthetic, shaped like a real CRIU run with PEERING=ospf (the restored BIRD no longer heard
    its OSPF neighbours): traffic back 20 ms after the resume, then nothing from 5.5 s (the
    router declared its neighbour dead and withdrew the sink's route) until the generator stopped
    at 16 s, and the adjacencies were not up again within the run.  The outage is a lower bound
    to the generator's stop, not the 0.13 s of the blackout's gap; with the adjacency back, the
    same records end the outage at the first packet."""
    gaps = [[990 * MS, 1_120 * MS, 10, 140]]
    down = am.Mark("ospf_down", 1_050 * MS, "synthetic", 1e-6)
    never = am.Mark("ospf_up", None, "synthetic", None, "a session was not up again within the run")

    def anatomy(extra):
        return _synthetic(gaps, last_ns=5_500 * MS, end=16_000 * MS, extra=extra)

    a = anatomy([down, never])
    full, out = a.mark("full_rate"), a.phase("outage")
    assert full.t_ns == 16_000 * MS and full.bound == "lower", full
    assert out.seconds is None and out.lower_s == pytest.approx(15.010), out
    assert any("not up again" in n for n in a.notes), a.notes
    back = anatomy([down, am.Mark("ospf_up", 2_000 * MS, "synthetic", 1e-6)])
    assert back.mark("full_rate").t_ns == 1_120 * MS and back.mark("full_rate").bound is None


def test_synthetic_a_session_never_up_again_chains_a_lossy_gap_beyond_settle():
    """A session not up again by the end of the records: a lossy gap 3 s after the traffic came
    back is still the migration's outage (with the session back before it, it is not)."""
    gaps = [[990 * MS, 1_120 * MS, 10, 140], [4_120 * MS, 6_000 * MS, 3_140, 5_000]]
    never = am.Mark("bgp_up", None, "synthetic", None, "a session was not up again within the run")
    a = _synthetic(gaps, extra=[never])
    assert a.mark("full_rate").t_ns == 6_000 * MS
    assert _synthetic(gaps).mark("full_rate").t_ns == 1_120 * MS


def test_qemu_stamps_of_lab_hosts_go_on_the_orchestrators_clock_before_the_resolution():
    """SYNTHETIC QMP events of a lab whose R1 runs 5 s ahead and R2 2 s behind: each event's
    lateness is its receipt minus QEMU's stamp on the orchestrator's clock; a host whose offset
    was never measured gives no resolution (two clocks are not subtracted)."""
    events = [
        {"side": "src", "event": "STOP", "t_ns": 1_000 * MS, "qemu_t_ns": 5_999_800_000},
        {"side": "dst", "event": "RESUME", "t_ns": 1_900 * MS, "qemu_t_ns": -100_500_000},
    ]
    stop, resume = am.blackout_marks("kvm", "qmp", 0, events, host_offsets_ns={"R1": 5 * 10**9, "R2": -2 * 10**9})
    assert stop.resolution_s == pytest.approx(200e-6) and resume.resolution_s == pytest.approx(500e-6)
    stop, resume = am.blackout_marks("kvm", "qmp", 0, events, host_offsets_ns={"R1": 5 * 10**9, "R2": None})
    assert stop.resolution_s == pytest.approx(200e-6) and resume.resolution_s is None
    assert resume.t_ns == 1_900 * MS  # the mark itself is the orchestrator's receipt
    stop, _ = am.blackout_marks("kvm", "qmp", 0, events)  # one clock: the stamps as they are
    assert stop.resolution_s is None  # 5 s late: not a resolution (the lateness is kept below 1 s)


def test_synthetic_no_gap_over_the_blackout_is_bounded_by_the_threshold_only_when_it_is_known():
    """Synthetic: packets kept arriving through the blackout.  With the sink's threshold the
    reattachment and the outage are bounds [0, threshold]; without it (a sink.json that lacks it)
    they are absent with the reason, never a bound of 0."""
    known = _synthetic([], thr=4 * MS)
    for key in ("reattachment", "outage"):
        p = known.phase(key)
        assert (p.seconds, p.lower_s, p.upper_s) == (None, 0.0, pytest.approx(0.004))
    unknown = _synthetic([], thr=None)
    for key in ("reattachment", "outage"):
        p = unknown.phase(key)
        assert (p.seconds, p.lower_s, p.upper_s) == (None, None, None)
        assert "not recorded" in p.why_absent
