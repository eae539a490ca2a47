"""analysis.metrics.control_plane on real records: the peers' BIRD logs and BGP/BFD captures of
two real PEERING=bgp,bfd BFD=50x3 runs (tests/fixtures/peering/*/run.json says which), one
pre-copy whose sessions survived and one stop-and-copy whose 0.82 s pause brought BFD and BGP down."""

import json
from pathlib import Path

import pytest

from analysis.load import read_pcap
from analysis.metrics import control_plane as cpm

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "peering"
ROUTER = {"A": "198.18.1.1", "B": "198.18.2.1"}


def _load(mode: str):
    run = json.loads((FIX / mode / "run.json").read_text())
    logs = {r: cpm.parse_bird_log((FIX / mode / f"peer-{r}.log").read_text()) for r in ROUTER}
    caps = {r: cpm.dissect(read_pcap(FIX / mode / f"control-{r}.pcap")) for r in ROUTER}
    w = run["window"]
    figs = cpm.control_plane(("bgp", "bfd"), logs, caps, ROUTER, (w["start_ns"], w["end_ns"]),
                             {"bgp": 9000.0, "bfd": 150.0})  # fmt: skip
    return logs, caps, figs


def test_the_peers_own_shutdown_is_not_a_flap():
    logs, _, figs = _load("precopy")
    assert all(e.message == "Shutting down" for e in (ev[-1] for ev in logs.values()))
    assert figs["bgp"].sessions.survived is True and figs["bfd"].sessions.survived is True
    assert all(t is not None for t in figs["bgp"].sessions.established_ns.values())


def test_precopy_silence_is_within_the_bfd_detection_time():
    _, caps, figs = _load("precopy")
    _t, src, kind = caps["B"]
    assert {"bgp", "bfd"} <= set(kind) and "198.18.2.1" in set(src)
    bfd = figs["bfd"].to_dict()
    assert 50 <= bfd["silence_ms"] < 150 and bfd["margin_ms"] > 0, bfd
    assert figs["bgp"].to_dict()["routes"]["B"] == {"held_before": 3, "withdrawn": 0, "lost": False,
                                                    "whole_again_ns": None}  # fmt: skip


def test_stopcopy_pause_brings_bfd_then_bgp_down_and_back():
    _, _, figs = _load("stopcopy")
    bfd, bgp = figs["bfd"].to_dict(), figs["bgp"].to_dict()
    assert bfd["survived"] is False and bfd["flaps"] == 2
    assert {f["cause"] for f in bfd["flap_details"]} == {"detection time expired"}
    assert bfd["silence_ms"] > 150 and bfd["margin_ms"] < 0
    assert bgp["survived"] is False and {f["cause"] for f in bgp["flap_details"]} == {"BFD session down"}
    for f in bgp["flap_details"]:
        assert f["up_ns"] > f["down_ns"] and 1.0 < f["down_for_s"] < 3.0, f  # 1 s retry, then OPEN
    bfd_down = {f["peer"]: f["down_ns"] for f in bfd["flap_details"]}
    assert all(f["down_ns"] >= bfd_down[f["peer"]] for f in bgp["flap_details"])  # BGP follows BFD
    routes = bgp["routes"]["B"]
    assert routes["held_before"] == 3 and routes["withdrawn"] == 3 and routes["lost"]
    assert routes["whole_again_ns"] > max(f["up_ns"] for f in bgp["flap_details"] if f["peer"] == "B")


def test_a_session_not_up_again_is_a_lower_bound():
    logs, _, _ = _load("stopcopy")
    cut = [e for e in logs["B"] if "BGP session established" not in e.message or e.t_ns < 1795584064 * 10**9]
    cut = [
        e for e in cut if not (e.proto == "rtr" and e.message == "State changed to up" and e.t_ns > 1795584064 * 10**9)
    ]
    s = cpm.bgp_sessions({"B": cut})
    (flap,) = s.flaps
    assert flap.up_ns is None and flap.down_for_s is None
    fig = cpm.ProtocolFigures("bgp", s, ()).to_dict()
    assert fig["flap_details"][0]["down_for_s_lower"] == pytest.approx((s.end_ns - flap.down_ns) / 1e9)


def test_longest_silence_counts_an_open_gap_to_the_span_end():
    import numpy as np

    s = cpm.longest_silence("B", np.array([0, 50, 100]) * 10**6, (0, 1000 * 10**6), 150.0)
    assert s.gap_ms == 900.0 and s.end_ns == 1000 * 10**6 and s.margin_ms == -750.0


def test_a_capture_read_first_in_a_fresh_process_has_the_routers_packets():
    """scapy decodes only the layers imported when a file is read: the first capture a fresh
    process reads (the analysis reads A's first) must still be dissected down to BFD and BGP."""
    import subprocess
    import sys

    code = (
        "import sys; from analysis.load import read_pcap; from analysis.metrics.control_plane import dissect; "
        "t, src, kind = dissect(read_pcap(sys.argv[1])); "
        "print(sum(1 for s, k in zip(src, kind) if s == '198.18.1.1' and k == 'bfd'))"
    )
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", code, str(FIX / "precopy" / "control-A.pcap")],
                         capture_output=True, text=True, check=True, cwd=root)  # fmt: skip
    assert int(out.stdout) > 100


def test_a_flap_before_the_migration_is_not_the_migrations():
    """Real records (fixtures/peering/preflap): B's BFD session went down 6.3 s before the
    stop-and-copy (the router said Down 5 ms after BGP came up) and was up again 1 s later;
    the migration's own flaps are A's and B's BFD expiries in the pause."""
    run = json.loads((FIX / "preflap" / "run.json").read_text())
    logs = {r: cpm.parse_bird_log((FIX / "preflap" / f"peer-{r}.log").read_text()) for r in ROUTER}
    w = run["window"]
    figs = cpm.control_plane(("bgp", "bfd"), logs, {}, ROUTER, (w["start_ns"], w["end_ns"]),
                             {"bgp": 9000.0, "bfd": 150.0})  # fmt: skip
    bfd, bgp = figs["bfd"].to_dict(), figs["bgp"].to_dict()
    assert bfd["flaps_before_migration"] == 1 and bgp["flaps_before_migration"] == 1, (bfd, bgp)
    (pre,) = bfd["flap_details_before_migration"]
    assert pre["peer"] == "B" and pre["cause"] == "remote state Down" and pre["down_ns"] < w["start_ns"]
    assert bfd["flaps"] == 2 and bgp["flaps"] == 2 and all(f["down_ns"] >= w["start_ns"] for f in bfd["flap_details"])
    assert {f["cause"] for f in bgp["flap_details"]} == {"BFD session down"}
    assert bfd["survived"] is False and bfd["down_at_migration"] == []
    assert any("before the migration" in n for n in bfd["notes"])
    # seen from before B's session was up again, it was down at the start: nothing is known
    early = figs["bfd"].sessions.since(pre["up_ns"] - 1)
    assert early.down_at_start == ("B",) and early.survived is None


def test_a_session_first_up_after_the_start_has_no_verdict():
    logs, _, _ = _load("precopy")
    s = cpm.bgp_sessions(logs)
    t = min(s.established_ns.values()) + 1  # between the two peers' establishment
    assert s.since(t).survived is None and len(s.since(t).down_at_start) == 1


def test_ospf_adjacencies_that_outlived_their_dead_interval():
    """Real records (fixtures/peering/ospf-stopcopy): PEERING=ospf OSPF_DEAD=2, a 3.25 s
    stop-and-copy pause: both peers' inactivity timers fired during it, the adjacencies left Full
    and were Full again after the resume; the router's OSPF packets (IP protocol 89, hellos every
    1 s) are dissected from the captures and the longest silence holds the pause."""
    run = json.loads((FIX / "ospf-stopcopy" / "run.json").read_text())
    logs = {r: cpm.parse_bird_log((FIX / "ospf-stopcopy" / f"peer-{r}.log").read_text()) for r in ROUTER}
    caps = {r: cpm.dissect(read_pcap(FIX / "ospf-stopcopy" / f"control-{r}.pcap")) for r in ROUTER}
    w = run["window"]
    _t, src, kind = caps["A"]
    assert set(kind) == {"ospf"} and "198.18.1.1" in set(src)
    figs = cpm.control_plane(("ospf",), logs, caps, ROUTER, (w["start_ns"], w["end_ns"]), {"ospf": 2000.0})
    ospf = figs["ospf"].to_dict()
    assert all(t is not None for t in ospf["established_ns"].values())
    assert ospf["survived"] is False and ospf["flaps"] == 2, ospf
    assert {f["peer"]: f["cause"] for f in ospf["flap_details"]} == {"A": "dead interval expired",
                                                                    "B": "dead interval expired"}  # fmt: skip
    for f in ospf["flap_details"]:
        assert w["start_ns"] < f["down_ns"] < w["end_ns"] < f["up_ns"], f  # down in the pause, Full after it
    pause_ms = (w["end_ns"] - w["start_ns"]) / 1e6
    assert ospf["limit_ms"] == 2000.0 and ospf["silence_ms"] > pause_ms > 2000.0 and ospf["margin_ms"] < 0, ospf
    assert set(ospf["routes"]) == {"A", "B"}


def test_ospf_sessions_from_neighbor_states():
    """Synthetic BIRD lines: Full is up; leaving Full is down, with the inactivity timer's line
    as the cause, else the state it fell to."""
    lines = [
        "100.000000 <TRACE> ospf1: Neighbor 198.18.1.1 on eth0 changed state from Loading to Full",
        "101.000000 <TRACE> ospf1: Neighbor 198.18.1.1 on eth0 changed state from Full to Init",
        "102.000000 <TRACE> ospf1: Neighbor 198.18.1.1 on eth0 changed state from Loading to Full",
        "103.000000 <TRACE> ospf1: Inactivity timer expired for nbr 198.18.1.1 on eth0",
        "103.000000 <TRACE> ospf1: Neighbor 198.18.1.1 on eth0 changed state from Full to Down",
    ]
    s = cpm.ospf_sessions({"A": cpm.parse_bird_log("\n".join(lines))})
    assert s.established_ns == {"A": 100 * 10**9}
    got = [(f.cause, f.up_ns) for f in s.flaps]
    assert got == [("neighbor state Init", 102 * 10**9), ("dead interval expired", None)]
