"""PEER_DAEMON=frr: the FRR peers' configuration, command lines, stop order and the scenario's
checks (migrate.experiment.peering; docs/peering.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from migrate.core.errors import ConfigError
from migrate.experiment import peering as pr
from migrate.model.scenario import Scenario

LOG = Path("/run/x/peer-B.log")


def _b() -> pr.PeerSpec:
    return next(p for p in pr.peers() if p.role == "B")


def test_the_daemons_follow_peering_zebra_first():
    assert pr.frr_daemons(Scenario(peering="bgp,bfd", peer_daemon="frr")) == ("zebra", "bfdd", "bgpd")
    assert pr.frr_daemons(Scenario(peering="ospf", peer_daemon="frr")) == ("zebra", "ospfd")
    assert pr.frr_daemons(Scenario(peering="bgp,ospf,bfd", peer_daemon="frr")) == ("zebra", "bfdd", "bgpd", "ospfd")


def test_bgp_and_bfd_configuration_of_b():
    s = Scenario(peering="bgp,bfd", peer_daemon="frr", bfd_interval_ms=20, bfd_multiplier=4, bgp_hold_s=6)
    confs = pr.frr_confs(s, _b(), LOG)
    assert set(confs) == {"zebra", "bfdd", "bgpd"}
    for text in confs.values():  # every daemon logs to the peer's log, at debug level, in microseconds
        assert f"log file {LOG} debugging\n" in text and "log timestamp precision 6\n" in text
    bgp = confs["bgpd"]
    for line in (
        "router bgp 65002", " bgp router-id 198.18.2.10", " bgp log-neighbor-changes",
        " no bgp ebgp-requires-policy", " timers bgp 2 6", " neighbor 198.18.2.1 remote-as 65000",
        " neighbor 198.18.2.1 timers 2 6", " neighbor 198.18.2.1 timers connect 1",
        " neighbor 198.18.2.1 bfd profile vrmig", "  network 198.18.4.10/32", "debug bgp zebra",
    ):  # fmt: skip
        assert line + "\n" in bgp, line
    bfd = confs["bfdd"]
    for line in ("debug bfd peer", "  receive-interval 20", "  transmit-interval 20", "  detect-multiplier 4"):
        assert line + "\n" in bfd, line
    # the learned routes stay out of the host's kernel table (BIRD's peers install none either)
    assert f"ip protocol bgp route-map {pr.FRR_NO_FIB}\n" in confs["zebra"]
    assert f"route-map {pr.FRR_NO_FIB} deny 10\n" in confs["zebra"]
    assert "ospf" not in confs["zebra"]


def test_without_bfd_no_bfd_profile():
    confs = pr.frr_confs(Scenario(peering="bgp", peer_daemon="frr"), _b(), LOG)
    assert "bfdd" not in confs and "bfd" not in confs["bgpd"]


@pytest.mark.parametrize("peering", ["ospf", "bgp,ospf"])
def test_ospf_configuration_carries_the_announced_address_only_without_bgp(peering):
    s = Scenario(peering=peering, peer_daemon="frr", ospf_dead_s=8)
    ospf = pr.frr_confs(s, _b(), LOG)["ospfd"]
    for line in (
        "interface eth0", " ip ospf area 0", " ip ospf network point-to-point", " ip ospf hello-interval 2",
        " ip ospf dead-interval 8", " ospf router-id 198.18.2.10", " log-adjacency-changes detail",
        " timers throttle lsa all 0", " timers lsa min-arrival 0", " ip ospf retransmit-interval 1",
        "debug ospf zebra",
    ):  # fmt: skip
        assert line + "\n" in ospf, line
    redistributes = f" redistribute connected route-map {pr.FRR_ANNOUNCE}\n" in ospf
    assert redistributes is (peering == "ospf")
    if redistributes:  # only B's /32: the route-map's prefix list names it alone
        assert f"ip prefix-list {pr.FRR_ANNOUNCE} seq 5 permit 198.18.4.10/32\n" in ospf


def test_each_daemon_is_private_to_its_peer_and_never_meets_a_shell(tmp_path):
    loader, daemons, libs = Path("/img/lib64/ld.so"), Path("/img/usr/lib/frr"), [Path("/img/lib")]
    state = tmp_path / "frr-B"
    argv = pr.frr_argv(loader, daemons, libs, "bgpd", tmp_path / "peer-B.bgpd.conf", state)
    assert argv[1].endswith("migrate/experiment/frr_exec.py") and argv[2:5] == ["/img/etc/group", str(state), "--"]
    assert argv[5:7] == ["env", "TZ=UTC0"]  # FRR stamps local time: UTC converts to CLOCK_REALTIME
    assert argv[7:10] == [str(loader), "--library-path", "/img/lib"] and argv[10] == "/img/usr/lib/frr/bgpd"
    opts = dict(zip(argv[11::2], argv[12::2], strict=True))
    assert opts == {
        "--vty_socket": str(state), "-i": str(state / "bgpd.pid"), "-z": str(state / "zserv.api"), "-P": "0",
        "-u": "root", "-g": "root", "-f": str(tmp_path / "peer-B.bgpd.conf"),
    }  # fmt: skip


def test_bgpd_and_ospfd_stop_before_bfdd_and_zebra_and_the_captures_last():
    names = ["capture-A", "peer-A-zebra", "peer-A-bfdd", "peer-A-bgpd", "peer-A-ospfd", "peer-B-zebra", "peer-B-bgpd"]
    order = sorted(names, key=pr._stop_rank)
    assert order == [
        "peer-A-bgpd", "peer-A-ospfd", "peer-B-bgpd", "peer-A-bfdd", "peer-A-zebra", "peer-B-zebra", "capture-A",
    ]  # fmt: skip
    assert sorted(["capture-B", "peer-A", "capture-A", "peer-B"], key=pr._stop_rank) == [
        "peer-A",
        "peer-B",
        "capture-B",
        "capture-A",
    ]  # fmt: skip  (BIRD: as before)


def test_peer_daemon_is_checked_and_named():
    assert Scenario().peer_daemon == "bird"
    s = Scenario(peering="bgp,bfd", peer_daemon="frr")
    assert s.name.endswith("-bgp+bfd-frrpeers") and not Scenario(peering="bgp,bfd").name.endswith("peers")
    with pytest.raises(ConfigError, match=r"^PEER_DAEMON='quagga' is unknown: choose one of bird, frr$"):
        Scenario(peering="bgp", peer_daemon="quagga")
    with pytest.raises(ConfigError, match=r"^PEER_DAEMON=frr is the routing peers' daemon: add PEERING="):
        Scenario(peer_daemon="frr")
    with pytest.raises(ConfigError, match=r"^CHURN=10 runs with BIRD peers"):
        Scenario(peering="bgp", peer_daemon="frr", churn_rps=10)


def test_the_cli_flag_reaches_the_scenario():
    import argparse

    from migrate.experiment.args import add_run_arguments, scenario_from_args

    p = argparse.ArgumentParser()
    add_run_arguments(p)
    a = p.parse_args(["--peering", "bgp,bfd", "--peer-daemon", "frr"])
    assert scenario_from_args(a).peer_daemon == "frr"
    assert scenario_from_args(p.parse_args(["--peering", "bgp"])).peer_daemon == "bird"


def test_meta_names_the_daemon_and_its_version(monkeypatch):
    monkeypatch.setattr(pr, "tool_versions", lambda daemon="bird": {daemon: "v", "tcpdump": "t"})
    frr = pr.Peers(Scenario(peering="bgp,bfd", peer_daemon="frr"), None, None, Path("/nonexistent")).describe()
    assert frr["implementation"] == {"peers": "FRR (frr router image: zebra, bfdd, bgpd)", "daemon": "frr",
                                     "router": "frr"}  # fmt: skip
    assert frr["versions"] == {"frr": "v", "tcpdump": "t"}
    bird = pr.Peers(Scenario(peering="bgp,bfd"), None, None, Path("/nonexistent")).describe()
    assert bird["implementation"]["daemon"] == "bird" and bird["versions"] == {"bird": "v", "tcpdump": "t"}


def test_the_frr_version_comes_from_the_frr_images_manifest(tmp_path, monkeypatch):
    import json

    (tmp_path / "guest" / "frr").mkdir(parents=True)
    (tmp_path / "guest" / "frr" / "manifest.json").write_text(json.dumps({"router": {"version": "8.4.4-1.1~deb12u2"}}))
    monkeypatch.setenv("VRMIG_CACHE", str(tmp_path))
    assert pr.tool_versions("frr")["frr"] == "8.4.4-1.1~deb12u2"


def test_frr_exec_refuses_a_bad_command_line(capsys):
    from migrate.experiment import frr_exec

    assert frr_exec.main(["/etc/group", "/tmp"]) == 2
    assert "usage:" in capsys.readouterr().err


def test_runs_csv_names_the_peers_daemon_and_frr_peers_are_their_own_series():
    from analysis.stats.aggregate import RUN_COLUMNS, run_record
    from migrate.campaigns.reporting import series_name

    assert RUN_COLUMNS.index("peer_daemon") == RUN_COLUMNS.index("bfd") + 1

    def rec(**scenario):
        return run_record({}, {"scenario": {"hv": "kvm", "mode": "stopcopy", **scenario}})

    frr = rec(peering="bgp,bfd", bfd_interval_ms=50, bfd_multiplier=3, peer_daemon="frr")
    old = rec(peering="bgp,bfd", bfd_interval_ms=50, bfd_multiplier=3)  # recorded before PEER_DAEMON: BIRD
    assert (frr["peer_daemon"], old["peer_daemon"], rec()["peer_daemon"]) == ("frr", "bird", None)
    assert series_name("S", frr, {}) == "S kvm stopcopy PEERING=bgp,bfd PEER_DAEMON=frr BFD=50x3"
    assert series_name("S", old, {}) == "S kvm stopcopy PEERING=bgp,bfd BFD=50x3"


def test_a_night_of_frr_peers_is_another_point_and_bird_nights_keep_their_fingerprint():
    from migrate.campaigns.nightly import fingerprint

    bird = Scenario(peering="bgp,bfd", mode="stopcopy")
    assert fingerprint(bird) == fingerprint(Scenario(peering="bgp,bfd", mode="stopcopy", peer_daemon="bird"))
    assert fingerprint(Scenario(peering="bgp,bfd", mode="stopcopy", peer_daemon="frr")) != fingerprint(bird)


def test_the_sink_route_is_waited_for_only_where_a_can_learn_it():
    """A learns B's route over BGP only through a router that passes eBGP routes on (FRR); the
    bird router profile exports its connected prefixes only, so with ROUTER=bird and BGP the FRR
    peers' readiness must not wait for it (a real run did, 60 s, and failed in setup); over OSPF
    B's LSA reaches A through either router."""
    from migrate.experiment.peering import sink_route_observable

    assert sink_route_observable(Scenario(peering="bgp,bfd", peer_daemon="frr"))
    assert not sink_route_observable(Scenario(peering="bgp,ospf,bfd", peer_daemon="frr", router="bird"))
    assert sink_route_observable(Scenario(peering="ospf", peer_daemon="frr", router="bird"))
