"""PEERING=bgp,bfd: real BGP and BFD sessions between the router VM and BIRD peers on both
segments through a real migration (root, QEMU; docs/peering.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.integration.conftest import missing_from_setup, require_root_and

REPO = Path(__file__).resolve().parents[2]
TOOLS = ("qemu-system-x86_64", "irtt", "tcpdump")
BFD_MS, BFD_MULT = 50, 3


def _guest_and_peers() -> None:
    from routers.errors import NotBuiltError
    from routers.guest import guest_image

    try:
        guest_image("frr")
        guest_image("bird")  # the peers' BIRD comes from the bird image
    except NotBuiltError as err:
        missing_from_setup(err)


def _run(tmp_path: Path, mode: str) -> tuple[dict, dict, str]:
    done: list[subprocess.CompletedProcess[str]] = []

    def attempt(tag: str) -> Path | None:
        done.append(subprocess.run(
            [sys.executable, "-m", "migrate", "run", "--peering", "bgp,bfd", "--bfd", f"{BFD_MS}x{BFD_MULT}",
             "--mode", mode, "--rate", "10M", "--duration", "14", "--migrate-at", "4", "--after", "8",
             "--results", str(tmp_path / tag)],
            cwd=REPO, capture_output=True, text=True, timeout=600, check=False, env={**os.environ},
        ))  # fmt: skip
        lines = done[-1].stdout.strip().splitlines()
        return Path(lines[-1]) if lines else None

    attempt("run")
    cp = done[-1]
    assert cp.returncode == 0, cp.stdout[-3000:] + cp.stderr[-3000:]
    run_dir = Path(cp.stdout.strip().splitlines()[-1])
    meta = json.loads((run_dir / "meta.json").read_text())
    summary = json.loads((run_dir / "summary.json").read_text())
    return meta, summary, cp.stdout


def _consistent(proto: dict, allowance_ms: float) -> None:
    """The verdict agrees with the recorded silence: a session that stayed up saw the router
    silent for less than the limit (plus one allowance for the peers' timer granularity), one
    that went down saw it silent for about the limit or longer."""
    assert proto["silence_ms"] is not None, proto
    if proto["survived"]:
        assert proto["silence_ms"] <= proto["limit_ms"] + allowance_ms, proto
    else:
        assert proto["silence_ms"] >= proto["limit_ms"] - allowance_ms, proto


@pytest.mark.parametrize("mode", ["precopy", "stopcopy"])
def test_bgp_and_bfd_through_a_migration(tmp_path, mode):
    require_root_and(*TOOLS)
    _guest_and_peers()
    meta, summary, out = _run(tmp_path, mode)
    assert meta["status"] == "completed", meta.get("failure")
    assert set(meta["peering"]["established_ns"]) == {"A", "B"}
    cp = summary["control_plane"]
    bgp, bfd = cp["bgp"], cp["bfd"]
    # every session was up when the migration began (the run waits for a flapped one to come back)
    before = meta["peering"]["before_migration"]
    assert set(before["up_ns"]) == {"A", "B"} and bgp["down_at_migration"] == bfd["down_at_migration"] == [], before
    assert bgp["flaps_before_migration"] + bfd["flaps_before_migration"] == before["flaps"], (bgp, bfd, before)
    allowance = 2 * BFD_MS  # the peers' BFD timers jitter by up to an interval (RFC 5880 6.8.7)
    _consistent(bfd, allowance)
    if bgp["survived"]:
        _consistent(bgp, 1000.0)
    else:  # BGP follows BFD; only a hold-timer expiry needs the router silent for the hold time
        # (a peer's first flap; a later one at the same peer happens while reconverging, e.g. a
        # connection collision 35 ms after the session came back, reset by the router: seen here)
        firsts = {}
        for f in bgp["flap_details"]:
            firsts.setdefault(f["peer"], f)
        for f in firsts.values():
            assert (f["cause"] == "BFD session down" and not bfd["survived"]) or "Hold timer" in (f["cause"] or ""), (
                f, bfd["flap_details"], bgp["flap_details_before_migration"])  # fmt: skip
        if any("Hold timer" in (f["cause"] or "") for f in bgp["flap_details"]):
            _consistent(bgp, 1000.0)
    assert "BGP " in out and "BFD " in out  # the printed table's control-plane lines
    for proto in (bgp, bfd):  # both peers' captures were dissected down to the router's packets
        assert all(v["gap_ms"] is not None for v in proto["silence_by_peer"].values()), proto
    anatomy = summary["anatomy"]
    phases = anatomy["phases"]
    reattach = phases["reattachment"]  # a point, or [0, x] when the resume's record is late within its resolution
    assert phases["vcpu_blackout"]["seconds"] > 0, phases
    assert reattach["seconds"] is not None or reattach["upper_s"] is not None, phases
    assert "  phases [s]" in out and "  timeline [ms]" in out  # the printed anatomy
    marks = {m["key"]: m["t_ns"] for m in anatomy["marks"]}
    if mode == "stopcopy":
        # the guest is paused for the whole copy (> 150 ms under TCG): BFD must go down, and BGP
        # follows BFD; the cross-traffic outage then lasts until B's route is back at the router
        assert bfd["survived"] is False and bfd["flaps"] >= 1, bfd
        assert bgp["survived"] is False, bgp
        causes = {f["cause"] for f in bgp["flap_details"]}
        assert "BFD session down" in causes, bgp
        back = [f["up_ns"] for f in bgp["flap_details"] if f["peer"] == "B"]
        assert back and all(t is not None for t in back), bgp
        gap = summary["details"]["downtime_packets"]
        # the blackout's gap can end before B's session is back: the resumed router forwards on
        # its stale route until its bgpd learns that B dropped the session, then loses the route
        # (a second lossy gap, seen once in 7 runs); the outage's end is what waits for B
        assert gap["t_after_ns"] is not None, gap
        # the whole outage is measured (not clipped at end + 2 s) and its anatomy puts the
        # reconvergence after the resume: full rate only once BGP was up again
        assert "clipped_end" not in gap["flags"], gap
        # (full rate needs B's session, which carries the sink's route; A's may come up later)
        assert phases["reconvergence"]["seconds"] > 0 and marks["full_rate"] >= max(back), anatomy
        assert marks["vcpu_stop"] < marks["bfd_down"] < marks["vcpu_resume"], anatomy
        assert phases["outage"]["seconds"] >= phases["vcpu_blackout"]["seconds"], phases


def _criu_bgp_ospf_run(tmp_path: Path, *flags: str) -> tuple[subprocess.CompletedProcess, Path]:
    """A completed HV=criu ROUTER=bird PEERING=bgp,ospf stop-and-copy run at 10 Mbit/s, migrating
    at 4 s, with ``flags`` added; skipped without root, the tools, the images or criu."""
    require_root_and("irtt", "tcpdump", "unshare", "iptables")
    _guest_and_peers()
    from migrate.core.errors import DependencyError
    from migrate.drivers.criu.tool import locate

    try:
        locate()
    except DependencyError as err:
        missing_from_setup(err)
    cp = subprocess.run(
        [sys.executable, "-m", "migrate", "run", "--hv", "criu", "--router", "bird", "--peering", "bgp,ospf",
         "--mode", "stopcopy", "--rate", "10M", "--migrate-at", "4", *flags, "--results", str(tmp_path)],
        cwd=REPO, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert cp.returncode == 0, cp.stdout[-3000:] + cp.stderr[-3000:]
    return cp, Path(cp.stdout.strip().splitlines()[-1])


def test_bgp_sessions_through_a_criu_migration(tmp_path):
    """HV=criu ROUTER=bird PEERING=bgp,ospf: the router's BGP TCP connections are dumped and
    restored with CRIU's established-TCP support; the run records, per peer, whether its session
    survived (and if not, why and for how long it was down).  OSPF's multicast memberships are
    not restored by CRIU: the driver records them lost (the route to the sink stays, via BGP)."""
    cp, run_dir = _criu_bgp_ospf_run(tmp_path, "--duration", "12", "--after", "6")
    meta = json.loads((run_dir / "meta.json").read_text())
    bgp = json.loads((run_dir / "summary.json").read_text())["control_plane"]["bgp"]
    assert meta["status"] == "completed" and set(meta["peering"]["established_ns"]) == {"A", "B"}
    assert bgp["survived"] is not None and bgp["silence_ms"] is not None
    mcast = json.loads((run_dir / "criu.json").read_text())["multicast"]
    before = {g for gs in mcast["before"].values() for g in gs}
    assert "224.0.0.5" in before, mcast  # BIRD's OSPF joined AllSPFRouters on its ports
    assert any(x.startswith("224.0.0.5 on ") for x in mcast["lost"]), mcast
    assert meta["hypervisor"]["multicast_lost"] == mcast["lost"]
    assert (run_dir / "criu" / "igmp-before.txt").read_text().startswith("Idx")
    for f in bgp["flap_details"]:  # a session that went down says why and for how long
        assert f["cause"] and (f["down_for_s"] is not None or f["down_for_s_lower"] is not None), f
    assert "BGP " in cp.stdout
    # CRIU was told to move the established BGP connections (its own log says so)
    assert "Will dump/restore TCP connections" in (run_dir / "criu" / "dump-1.log").read_text(errors="replace")


def test_ospf_through_a_criu_migration_once_its_groups_are_put_back(tmp_path):
    """CRIU_REJOIN_MCAST=1: the driver joins AllSPFRouters again on the restored BIRD's own OSPF
    socket, after the announcement; with the memberships back, the router hears its peers' hellos
    again and no OSPF adjacency is lost for good (without it both are: the test above)."""
    _cp, run_dir = _criu_bgp_ospf_run(tmp_path, "--criu-rejoin-mcast", "1", "--duration", "14", "--after", "8")
    meta = json.loads((run_dir / "meta.json").read_text())
    mcast = json.loads((run_dir / "criu.json").read_text())["multicast"]
    assert sorted(mcast["lost"]) == ["224.0.0.5 on eth0", "224.0.0.5 on eth1"], mcast
    assert all(p.get("joined") for p in mcast["rejoin"]["pairs"]), mcast["rejoin"]
    assert meta["hypervisor"]["multicast_rejoined"] == mcast["lost"]
    assert {g for gs in mcast["rejoined"].values() for g in gs} == {"224.0.0.5"}, mcast["rejoined"]
    ospf = json.loads((run_dir / "summary.json").read_text())["control_plane"]["ospf"]
    # no adjacency is lost for good (without the rejoin both are); one can still flap briefly when
    # the restored BIRD resets its interface (seen at A with a BGP Cease: docs/peering.md)
    assert all(f["up_ns"] is not None for f in ospf["flap_details"]), ospf
    assert ospf["flaps"] <= 1, ospf


def _completed_run(tmp_path: Path, check_images: Callable[[], None], *args: str) -> tuple[dict, dict, str]:
    """``migrate run <args>`` after the root, tool and image checks; it must complete: its meta, summary and output."""
    require_root_and(*TOOLS)
    check_images()
    cp = subprocess.run(
        [sys.executable, "-m", "migrate", "run", *args, "--results", str(tmp_path)],
        cwd=REPO, capture_output=True, text=True, timeout=600, check=False, env={**os.environ},
    )  # fmt: skip
    assert cp.returncode == 0, cp.stdout[-3000:] + cp.stderr[-3000:]
    run_dir = Path(cp.stdout.strip().splitlines()[-1])
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["status"] == "completed", meta.get("failure")
    return meta, json.loads((run_dir / "summary.json").read_text()), cp.stdout


def test_ospf_outlasts_the_stop_and_copy_that_ends_bfd(tmp_path):
    """PEERING=bgp,ospf,bfd BFD=50x3 OSPF_DEAD=4, stop-and-copy (the guest paused ~0.85 s under
    TCG): BFD's 150 ms detection time ends its sessions and BGP's with them, while OSPF's 4 s
    dead interval outlasts the pause: the adjacencies stay Full and the router's longest OSPF
    silence, which holds the pause, stays below the dead interval."""
    meta, summary, out = _completed_run(
        tmp_path, _guest_and_peers, "--peering", "bgp,ospf,bfd", "--bfd", f"{BFD_MS}x{BFD_MULT}", "--ospf-dead", "4",
        "--mode", "stopcopy", "--rate", "10M", "--duration", "14", "--migrate-at", "4", "--after", "8",
    )  # fmt: skip
    timers = meta["peering"]["timers"]
    assert (timers["ospf_dead_s"], timers["ospf_hello_s"], timers["ospf_network"]) == (4, 1, "point-to-point")
    assert "over BGP" in meta["peering"]["cross_traffic_route"]
    cp = summary["control_plane"]
    ospf, bfd = cp["ospf"], cp["bfd"]
    assert all(t is not None for t in ospf["established_ns"].values()) and set(ospf["established_ns"]) == {"A", "B"}
    assert bfd["survived"] is False, bfd
    assert ospf["survived"] is True and ospf["flaps"] == 0, ospf
    assert ospf["limit_ms"] == 4000.0
    blackout_ms = summary["anatomy"]["phases"]["vcpu_blackout"]["seconds"] * 1000.0
    for peer, v in ospf["silence_by_peer"].items():
        # hellos once a second: the silence at each peer holds the pause, and is below 4 s
        assert v["packets"] > 0 and blackout_ms <= v["gap_ms"] < 4000.0, (peer, v, blackout_ms)
    assert "OSPF " in out and "  OSPF             survived" in out


def test_ospf_carries_the_cross_traffic_and_its_loss_ends_it(tmp_path):
    """PEERING=ospf OSPF_DEAD=2 and a migration link capped at 300 Mbit/s: the stop-and-copy pause
    (> 2 s) outlasts the dead interval, so both peers declare the adjacency down ("dead interval
    expired"); the sink's route (B's OSPF external route: the only one) is the router's, and the
    cross-traffic is back at full rate only once the adjacencies are Full again."""
    meta, summary, out = _completed_run(
        tmp_path, _guest_and_peers, "--peering", "ospf", "--ospf-dead", "2", "--miglink", "300M",
        "--mode", "stopcopy", "--rate", "10M", "--duration", "16", "--migrate-at", "4", "--after", "10",
    )  # fmt: skip
    assert "over OSPF" in meta["peering"]["cross_traffic_route"]
    ospf = summary["control_plane"]["ospf"]
    assert set(summary["control_plane"]) >= {"ospf"} and "bgp" not in summary["control_plane"], summary["control_plane"]
    blackout_s = summary["anatomy"]["phases"]["vcpu_blackout"]["seconds"]
    assert blackout_s > 2.0, summary["anatomy"]["phases"]  # the test's premise: the pause outlasts the dead interval
    assert ospf["survived"] is False, ospf
    firsts = {}
    for f in ospf["flap_details"]:
        firsts.setdefault(f["peer"], f)
    assert set(firsts) == {"A", "B"} and all(f["cause"] == "dead interval expired" for f in firsts.values()), ospf
    _consistent(ospf, 1000.0)  # silence >= dead - one hello
    ups = [f["up_ns"] for f in ospf["flap_details"]]
    assert ups and all(u is not None for u in ups), ospf
    # the peers declared the router dead during the pause (dead interval after its last hello)
    # and were Full again after the resume; whether the restored router also dropped them (and
    # the sink's route with it: seen once here, traffic for 1.3 s after the resume, then 4.8 s of
    # loss until Full again) varies from run to run; the anatomy keeps such a gap in the outage
    marks = {m["key"]: m["t_ns"] for m in summary["anatomy"]["marks"]}
    assert marks["vcpu_stop"] < marks["ospf_down"] < marks["vcpu_resume"] < marks["ospf_up"] == max(ups), marks
    assert marks["full_rate"] is not None and marks["full_rate"] >= marks["first_packet"], marks
    assert "OSPF             FLAPPED" in out


def _frr_peers() -> None:
    """Skip without the frr image (the router and, with PEER_DAEMON=frr, the peers' daemons)."""
    from migrate.core.errors import DependencyError
    from migrate.experiment.peering import frr_image_paths
    from routers.errors import NotBuiltError
    from routers.guest import guest_image

    try:
        guest_image("frr")
        frr_image_paths()
    except (NotBuiltError, DependencyError) as err:
        missing_from_setup(err)


def _frr_log_lines(run_dir: Path, role: str, marker: str) -> list[str]:
    return [ln for ln in (run_dir / f"peer-{role}.log").read_text(errors="replace").splitlines() if marker in ln]


#: the Cease a peer's FRR bgpd sends when BFD's down ends the session at the moment of the pause
BFD_ENDED_BGP = ("notification sent: Cease/BFD Down", "notification sent: Cease/Connection Collision Resolution")


def test_frr_peers_bfd_and_bgp_through_a_stop_and_copy(tmp_path):
    """PEER_DAEMON=frr PEERING=bgp,bfd BFD=50x3, stop-and-copy (the guest paused ~0.8 s under
    TCG): the peers are FRR (zebra, bfdd, bgpd of the frr image); their bfdd declares BFD down
    (detection time expired), their bgpd ends BGP because of it (the pause is far below the
    9 s hold time), and the cross-traffic's outage lasts until B's session and route are back."""
    meta, summary, out = _completed_run(
        tmp_path, _frr_peers, "--peer-daemon", "frr", "--peering", "bgp,bfd", "--bfd", f"{BFD_MS}x{BFD_MULT}",
        "--mode", "stopcopy", "--rate", "10M", "--duration", "14", "--migrate-at", "4", "--after", "8",
    )  # fmt: skip
    run_dir = Path(out.strip().splitlines()[-1])
    peering = meta["peering"]
    assert peering["implementation"]["daemon"] == "frr" and meta["scenario"]["peer_daemon"] == "frr"
    from routers.profiles import get as profile

    # the peers run the default frr image's FRR (FRR 10.3 of Debian 13 since the router releases)
    assert (peering["versions"]["frr"] or "").startswith(profile("frr").release.version), peering["versions"]
    for role in ("A", "B"):  # FRR's own lines, microsecond stamps, each daemon's configuration
        assert _frr_log_lines(run_dir, role, "%ADJCHANGE: neighbor ") and _frr_log_lines(run_dir, role, "state-change:")
        assert {p.name for p in run_dir.glob(f"peer-{role}.*.conf")} == {
            f"peer-{role}.{d}.conf" for d in ("zebra", "bfdd", "bgpd")
        }
    before = peering["before_migration"]
    cp = summary["control_plane"]
    bgp, bfd = cp["bgp"], cp["bfd"]
    assert set(before["up_ns"]) == {"A", "B"} and bgp["down_at_migration"] == bfd["down_at_migration"] == []
    assert bgp["flaps_before_migration"] + bfd["flaps_before_migration"] == before["flaps"], (bgp, bfd, before)
    # BFD: the pause outlasts 150 ms at both peers
    assert bfd["survived"] is False and {f["peer"] for f in bfd["flap_details"]} == {"A", "B"}, bfd
    firsts: dict[str, dict] = {}
    for f in bfd["flap_details"]:
        firsts.setdefault(f["peer"], f)
    assert all(f["cause"] == "detection time expired" for f in firsts.values()), bfd
    _consistent(bfd, 2 * BFD_MS)
    # BGP: each peer's first flap is bgpd ending the session with a Cease at the moment BFD went
    # down; not its hold timer (the router was silent for far less than 9 s).  FRR 10.3's bgpd
    # names BFD there, or, when the resumed router's new connection meets the old one in that same
    # moment, the collision it resolves by closing the old (seen once in a full run)
    assert bgp["survived"] is False, bgp
    bgp_firsts: dict[str, dict] = {}
    for f in bgp["flap_details"]:
        bgp_firsts.setdefault(f["peer"], f)
    assert set(bgp_firsts) == {"A", "B"}, bgp
    for peer, f in bgp_firsts.items():
        assert f["cause"] in BFD_ENDED_BGP, (f, bgp["flap_details"])
        assert abs(f["down_ns"] - firsts[peer]["down_ns"]) < 10**7, (f, firsts[peer])  # within 10 ms
    assert bgp["silence_ms"] < bgp["limit_ms"], bgp
    back = [f["up_ns"] for f in bgp["flap_details"] if f["peer"] == "B"]
    assert back and all(t is not None for t in back), bgp
    assert bgp["routes"]["B"]["lost"] and bgp["routes"]["B"]["whole_again_ns"] >= max(back), bgp["routes"]
    # the outage anatomy: BFD down inside the pause, the outage through B's reconvergence
    anatomy = summary["anatomy"]
    phases, marks = anatomy["phases"], {m["key"]: m for m in anatomy["marks"]}
    assert marks["vcpu_stop"]["t_ns"] < marks["bfd_down"]["t_ns"] < marks["vcpu_resume"]["t_ns"], marks
    assert marks["bfd_down"]["source"] == "peers' FRR logs", marks["bfd_down"]
    assert phases["reconvergence"]["seconds"] > 0 and marks["full_rate"]["t_ns"] >= max(back), anatomy
    assert phases["outage"]["seconds"] >= phases["vcpu_blackout"]["seconds"], phases
    assert "BGP " in out and "BFD " in out


def test_frr_peers_record_the_ospf_adjacencies(tmp_path):
    """PEER_DAEMON=frr PEERING=bgp,ospf OSPF_DEAD=4, stop-and-copy: the FRR peers' ospfd logs
    each adjacency with the router reaching Full (log-adjacency-changes detail); the ~0.8 s pause
    is below the 4 s dead interval and the 9 s hold time, so both survive, and the router's
    longest OSPF silence at each peer holds the pause."""
    _, summary, out = _completed_run(
        tmp_path, _frr_peers, "--peer-daemon", "frr", "--peering", "bgp,ospf", "--ospf-dead", "4",
        "--mode", "stopcopy", "--rate", "10M", "--duration", "10", "--migrate-at", "4", "--after", "5",
    )  # fmt: skip
    run_dir = Path(out.strip().splitlines()[-1])
    for role in ("A", "B"):
        # "Loading -> Full (LoadingDone)", or "Exchange -> Full (ExchangeDone)" with nothing to load
        assert any(" -> Full (" in ln for ln in _frr_log_lines(run_dir, role, "AdjChg: Nbr ")), role
    ospf, bgp = summary["control_plane"]["ospf"], summary["control_plane"]["bgp"]
    assert set(ospf["established_ns"]) == {"A", "B"} and all(t is not None for t in ospf["established_ns"].values())
    assert ospf["limit_ms"] == 4000.0
    blackout_ms = summary["anatomy"]["phases"]["vcpu_blackout"]["seconds"] * 1000.0
    assert blackout_ms < 4000.0, summary["anatomy"]["phases"]  # the test's premise
    assert ospf["survived"] is True and ospf["flaps"] == 0, ospf
    for peer, v in ospf["silence_by_peer"].items():
        assert v["packets"] > 0 and blackout_ms <= v["gap_ms"] < 4000.0, (peer, v, blackout_ms)
    assert bgp["survived"] is True, bgp
    assert "OSPF " in out and "  OSPF             survived" in out
