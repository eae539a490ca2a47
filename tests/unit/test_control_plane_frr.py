"""analysis.metrics.control_plane on real FRR records (PEER_DAEMON=frr): the peers' FRR logs
and captures of real stop-and-copy runs (tests/fixtures/peering/frr-*/run.json says which)."""

import json
from datetime import UTC
from pathlib import Path

import pytest

from analysis.load import read_pcap
from analysis.metrics import control_plane as cpm
from migrate.testbed.builder import Testbed

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "peering"
ROUTER = {"A": "198.18.1.1", "B": "198.18.2.1"}


def _texts(name: str) -> dict[str, str]:
    return {r: (FIX / name / f"peer-{r}.log").read_text() for r in ROUTER}


def _load(name: str):
    run = json.loads((FIX / name / "run.json").read_text())
    logs = {r: cpm.parse_peer_log(t, cpm.peer_daemon(run["peering"])) for r, t in _texts(name).items()}
    caps = {r: cpm.dissect(read_pcap(FIX / name / f"control-{r}.pcap")) for r in ROUTER}
    w = run["window"]
    protocols = tuple(run["peering"]["protocols"])
    limits = {"bgp": 9000.0, "bfd": 150.0, "ospf": 4000.0}
    figs = cpm.control_plane(protocols, logs, caps, ROUTER, (w["start_ns"], w["end_ns"]), limits)
    return run, logs, figs


BOTH = "frr-bgp-ospf-bfd-stopcopy"


def _first(details: list[dict]) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for f in details:
        out.setdefault(f["peer"], f)
    return out


def test_the_frr_log_is_read_in_time_order_up_to_the_peers_own_shutdown():
    """bgpd, bfdd, ospfd and zebra write one file: their lines land slightly out of order (the
    real log has bfdd's session-delete of the shutdown 3 ms after a bgpd line written below it);
    the parser sorts them and stops at the first daemon's "Terminating on signal"."""
    text = _texts(BOTH)["A"]
    lines = text.splitlines()
    stamps = [ln[:26] for ln in lines]
    assert stamps != sorted(stamps)  # the premise: the file itself is not in time order
    ev = cpm.parse_frr_log(text)
    assert all(e.daemon == "frr" for e in ev) and [e.t_ns for e in ev] == sorted(e.t_ns for e in ev)
    assert (ev[-1].proto, ev[-1].message) == ("", "Terminating on signal") and ev[-1].cls == "BGP"
    assert not any("Neighbor deleted" in e.message for e in ev)  # the shutdown's own session end
    assert {e.proto for e in ev[:-1]} == {"bgp", "bfd", "ospf", "zebra"}
    assert cpm.parse_peer_log(text, "frr") == ev and cpm.parse_peer_log(text) == []  # BIRD's parser reads none


def test_frr_stamps_are_utc_on_the_captures_clock():
    """FRR writes local time; the peers run it with TZ=UTC0.  Read as UTC, A's BFD down comes one
    detection time (150 ms, plus a little scheduling) after the last BFD packet from the router
    that A's capture holds: the log and the capture share the clock."""
    _, _, figs = _load(BOTH)
    line = next(ln for ln in _texts(BOTH)["A"].splitlines() if "up -> down reason:control-expired" in ln)
    from datetime import datetime

    when = datetime.strptime(line[:26], "%Y/%m/%d %H:%M:%S.%f").replace(tzinfo=UTC)
    down = figs["bfd"].to_dict()["flap_details"]
    a = next(f for f in down if f["peer"] == "A")
    assert a["down_ns"] == round(when.timestamp() * 1e6) * 1000
    t, src, kind = cpm.dissect(read_pcap(FIX / BOTH / "control-A.pcap"))
    last = max(x for x, s, k in zip(t, src, kind, strict=True) if s == ROUTER["A"] and k == "bfd" and x < a["down_ns"])
    assert 150e6 <= a["down_ns"] - last <= 200e6, (a["down_ns"] - last) / 1e6


def test_the_pause_brings_frr_bfd_then_bgp_down_and_back():
    """PEERING=bgp,ospf,bfd BFD=50x3, stop-and-copy, guest paused 0.845 s: both peers' bfdd
    declared BFD down (control-expired), their bgpd ended BGP with a Cease/BFD Down a few ms later;
    both were up again about 1 s later and the peers' BGP routes whole again."""
    _, _, figs = _load(BOTH)
    bfd, bgp = figs["bfd"].to_dict(), figs["bgp"].to_dict()
    assert bfd["survived"] is False and bfd["flaps"] == 2
    assert {f["cause"] for f in bfd["flap_details"]} == {"detection time expired"}
    assert bfd["silence_ms"] > 800 and bfd["margin_ms"] < 0
    assert bgp["survived"] is False and bgp["flaps"] == 2
    assert {f["cause"] for f in bgp["flap_details"]} == {"notification sent: Cease/BFD Down"}
    bfd_down = {p: f["down_ns"] for p, f in _first(bfd["flap_details"]).items()}
    for f in bgp["flap_details"]:
        assert 0 <= f["down_ns"] - bfd_down[f["peer"]] < 10**7, f  # BGP follows BFD within 10 ms
        assert 0.9 < f["down_for_s"] < 1.5, f  # connect retry 1 s, then OPEN
    assert bgp["silence_ms"] < 9000.0  # the hold time was not what ended BGP
    for peer, r in bgp["routes"].items():
        assert (r["held_before"], r["withdrawn"], r["lost"]) == (3, 3, True), (peer, r)
        up = max(f["up_ns"] for f in bgp["flap_details"] if f["peer"] == peer)
        assert r["whole_again_ns"] > up, (peer, r)


def test_the_ospf_adjacencies_outlast_the_pause():
    """The same run: ospfd's adjacencies (Full before the migration at both peers) outlast the
    0.845 s pause under a 4 s dead interval; the router's longest OSPF silence holds the pause."""
    _, _, figs = _load(BOTH)
    ospf = figs["ospf"].to_dict()
    assert all(t is not None for t in ospf["established_ns"].values()) and set(ospf["established_ns"]) == {"A", "B"}
    assert ospf["survived"] is True and ospf["flaps"] == 0 and ospf["flaps_before_migration"] == 0
    for peer, v in ospf["silence_by_peer"].items():
        assert v["packets"] > 0 and 845 <= v["gap_ms"] < 4000, (peer, v)


def test_bfdd_replacing_a_session_that_was_up_is_a_flap_before_the_migration():
    """At start bgpd asks bfdd for a session before it knows its local address, then for one with
    it: bfdd deleted A's first session while it was up (no state change logged) and bgpd ended
    BGP with a Cease/BFD Down 0.3 ms later.  Both are flaps before the migration, not its own."""
    _, _, figs = _load(BOTH)
    (bfd,) = figs["bfd"].to_dict()["flap_details_before_migration"]
    (bgp,) = figs["bgp"].to_dict()["flap_details_before_migration"]
    assert (bfd["peer"], bfd["cause"], bgp["peer"], bgp["cause"]) == (
        "A", "session deleted", "A", "notification sent: Cease/BFD Down",
    )  # fmt: skip
    assert 0 < bgp["down_ns"] - bfd["down_ns"] < 10**6 and bfd["up_ns"] is not None


def test_routes_learned_from_the_router_are_bgpds_and_ospfds_routes_to_zebra():
    _, logs, _ = _load(BOTH)
    bgp = [c for e in logs["A"] if (c := cpm.learned_change(e)) is not None]
    ospf = [c for e in logs["A"] if (c := cpm.learned_change(e, cpm.OSPF_PROTO)) is not None]
    assert bgp[:3] == [("added", "198.18.1.0/24"), ("added", "198.18.2.0/24"), ("added", "198.18.4.10/32")]
    assert ("removed", "198.18.4.10/32") in bgp and all(p != "198.18.3.10/32" for _, p in bgp)  # A's own: not learned
    assert ospf == [("added", "198.18.1.0/24"), ("added", "198.18.2.0/24")]  # the shutdown's deletions cut off


def test_readiness_reads_the_frr_logs(tmp_path):
    """Peers.sessions_up / wait_sessions_up on the real FRR logs, written where a run's peers
    write them: cut just after the pause's first BFD down, A is not up (the wait names it); the
    whole logs have every session of both peers up again."""
    from migrate.experiment.peering import Peers, sessions_state
    from migrate.model.scenario import Scenario
    from tests.unit.peer_log_cut import cut_then_whole

    _, logs, figs = _load(BOTH)
    up, flaps = sessions_state(logs, ROUTER, ("bgp", "ospf", "bfd"))
    assert set(up) == {"A", "B"} and all(t is not None for t in up.values()) and flaps == 6
    texts = _texts(BOTH)
    cut_at = min(f["down_ns"] for f in figs["bfd"].to_dict()["flap_details"]) + 1000
    peers = Peers(Scenario(peering="bgp,ospf,bfd", peer_daemon="frr"), Testbed("t"), None, tmp_path)
    not_up = r"BGP/OSPF/BFD sessions with A were not up within 0 s after the pause"
    found = cut_then_whole(peers, tmp_path, texts, lambda ln: cpm.parse_frr_log(ln)[0].t_ns, cut_at, not_up)
    assert found is not None and found.up_ns == up and found.flaps == 6


BGP_BFD = "frr-bgp-bfd-stopcopy"


def test_a_collision_notification_beside_an_established_session_is_no_flap():
    """PEERING=bgp,bfd: B's session came back up and bgpd, 0.2 ms later, sent a Cease/Connection
    Collision Resolution on the other of its two connections to the router; the session itself
    stayed up (no %ADJCHANGE Down follows).  One flap per peer, each ended by BFD, and the
    collision note never becomes a cause."""
    text = _texts(BGP_BFD)["B"]
    up = text.index("in vrf default Up", text.index("Cease/BFD Down"))
    assert "Cease/Connection Collision Resolution" in text[up : up + 400]  # the premise, in the real log
    _, _, figs = _load(BGP_BFD)
    bgp = figs["bgp"].to_dict()
    assert bgp["flaps"] == 2 and {f["peer"] for f in bgp["flap_details"]} == {"A", "B"}, bgp["flap_details"]
    assert {f["cause"] for f in bgp["flap_details"]} == {"notification sent: Cease/BFD Down"}
    assert all(f["up_ns"] is not None for f in bgp["flap_details"])
    down_for = {f["peer"]: f["down_for_s"] for f in bgp["flap_details"]}
    # A's reconnection collided too (a Cease received while down): it took 3 s, B's 1.9 s
    assert 2.9 < down_for["A"] < 3.1 and 1.8 < down_for["B"] < 1.9, down_for
    bfd = figs["bfd"].to_dict()
    assert bfd["flaps"] == 2 and {f["cause"] for f in bfd["flap_details"]} == {"detection time expired"}


def test_the_sink_route_at_a_says_when_the_router_holds_it(tmp_path):
    """FRR peers wait, beside the sessions, for A to hold B's sink address learned from the
    router (bgpd's "Tx route add ... 198.18.4.10/32"): held at the end of the real log, not
    just after the pause ended BGP, never over OSPF here (with BGP, B exports nothing into OSPF)."""
    from migrate.experiment.peering import Peers, sink_route_held
    from migrate.model.scenario import Scenario

    _, logs, figs = _load(BOTH)
    assert sink_route_held(logs["A"], ("bgp", "ospf", "bfd"))
    assert not sink_route_held(logs["A"], ("ospf",))
    down = next(f["down_ns"] for f in figs["bgp"].to_dict()["flap_details"] if f["peer"] == "A")
    cut = [e for e in logs["A"] if e.t_ns <= down + 100 * 10**6]  # A withdrew its routes 60 ms after
    assert not sink_route_held(cut, ("bgp", "ospf", "bfd"))
    # the wait: every session up at both peers, but no route yet at A -> not ready
    texts = _texts(BOTH)
    (tmp_path / "peer-B.log").write_text(texts["B"])
    (tmp_path / "peer-A.log").write_text("\n".join(ln for ln in texts["A"].splitlines() if "Tx route add" not in ln))
    peers = Peers(Scenario(peering="bgp,ospf,bfd", peer_daemon="frr"), Testbed("t"), None, tmp_path)
    assert peers._state()[0]["A"] is not None and peers.sessions_up() is None
    from migrate.experiment.peering import PeeringError

    with pytest.raises(PeeringError, match=r"sessions were up, but A had not learned the route to 198\.18\.4\.10"):
        peers.wait_sessions_up(0.0)
    (tmp_path / "peer-A.log").write_text(texts["A"])
    assert peers.sessions_up() is not None


OSPF = "frr-ospf-stopcopy"


def test_ospf_alone_the_dead_interval_ends_both_adjacencies_and_the_routes_come_back():
    """PEERING=ospf OSPF_DEAD=2 MIGLINK=300M, stop-and-copy: the 3.2 s pause outlasts the 2 s
    dead interval; both peers' ospfd logged Full -> Deleted (InactivityTimer), were Full again
    2.3 s later and held every route of before again 3 s after that (B's sink route at A among
    them)."""
    _, logs, figs = _load(OSPF)
    ospf = figs["ospf"].to_dict()
    assert ospf["survived"] is False and ospf["flaps"] == 2
    assert {f["cause"] for f in ospf["flap_details"]} == {"dead interval expired"}
    assert all(2.3 < f["down_for_s"] < 2.4 for f in ospf["flap_details"]), ospf["flap_details"]
    assert ospf["silence_ms"] > 2000 and ospf["margin_ms"] < 0
    for peer, r in ospf["routes"].items():
        up = next(f["up_ns"] for f in ospf["flap_details"] if f["peer"] == peer)
        assert (r["held_before"], r["withdrawn"], r["lost"]) == (3, 2, True), (peer, r)
        assert 2.5e9 < r["whole_again_ns"] - up < 3.5e9, (peer, r)
    held = {c[1] for e in logs["A"] if (c := cpm.learned_change(e, cpm.OSPF_PROTO)) and c[0] == "added"}
    assert "198.18.4.10/32" in held


def test_the_records_end_at_the_first_peers_shutdown():
    """A's ospfd stopped first (10:38:07.302); the router then withdrew A's route from B, and
    B's ospfd logged the deletion 4 ms before its own "Terminating on signal": that is the
    peers' shutdown, and B's routes are whole again at the end of its records."""
    _, logs, figs = _load(OSPF)
    last_b = [e.message for e in logs["B"][-3:]]
    assert last_b[-2].startswith("Zebra: Route delete 198.18.3.10/32") and last_b[-1] == "Terminating on signal"
    cut = cpm.until_first_shutdown(logs)
    assert cut["A"] == logs["A"] and cut["B"][-1] == logs["A"][-1]  # A's shutdown ends both
    assert not any("Route delete 198.18.3.10/32" in e.message and e.t_ns > logs["A"][-1].t_ns for e in cut["B"])
    assert figs["ospf"].to_dict()["routes"]["B"]["whole_again_ns"] is not None
    # BIRD's logs are left as they are
    bird = {"A": [cpm.LogEvent(5, "INFO", "", "Shutting down")], "B": [cpm.LogEvent(9, "TRACE", "rtr", "x")]}
    assert cpm.until_first_shutdown(bird) is bird


#: lines of a real FRR 10.3 peer log (Debian 13's frr 10.3-3+deb13u1, PEER_DAEMON=frr, 2026-12-02; two cut short):
#: FRR 10 names the VRF and its table in bgpd's zebra lines and appends the VRF to ospfd's prefixes
FRR10_LINES = """\
2026/12/02 11:32:38.423734 BGP: [YA0WD-VE94T] Tx route add VRF default (table id 0) 198.18.4.10/32 metric 0 tag 0
2026/12/02 11:33:37.401894 BGP: [W7M9T-Y0DGM] Tx route delete VRF default (table id 0) 198.18.4.10/32
2026/12/02 11:32:37.513003 OSPF: [P1CKF-HQ3TK] Zebra: Route add 198.18.2.0/24(default) nexthop 198.18.1.1, ifindex=2
2026/12/02 11:33:37.419039 OSPF: [ZPGTH-2RT44] Zebra: Route delete 198.18.2.0/24(default)
"""


def test_frr10_route_lines_give_the_same_prefixes_as_frr84():
    events = cpm.parse_peer_log(FRR10_LINES, "frr")
    bgp = [cpm.learned_change(e, cpm.BGP_PROTO) for e in events]
    ospf = [cpm.learned_change(e, cpm.OSPF_PROTO) for e in events]
    assert [c for c in bgp if c] == [("added", "198.18.4.10/32"), ("removed", "198.18.4.10/32")]
    assert [c for c in ospf if c] == [("added", "198.18.2.0/24"), ("removed", "198.18.2.0/24")]
