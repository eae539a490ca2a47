"""The router's multicast memberships across a CRIU migration (migrate.drivers.criu.mcast), read
from the kernel's lists of a REAL run (tests/fixtures/criu-mcast: BIRD with OSPF, before the
dump and after the restore)."""

from __future__ import annotations

from pathlib import Path

from migrate.drivers.criu import mcast

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "criu-mcast"


def _lists(when: str) -> dict[str, str]:
    return {name: (FIX / f"{name}-{when}.txt").read_text() for name in ("igmp", "igmp6")}


def test_igmp_groups_per_device_in_the_kernels_byte_order():
    groups = mcast.parse_igmp(_lists("before")["igmp"])
    assert groups == {"lo": {"224.0.0.1"}, "eth0": {"224.0.0.5", "224.0.0.1"}, "eth1": {"224.0.0.5", "224.0.0.1"}}


def test_igmp6_groups_per_device():
    groups = mcast.parse_igmp6(_lists("before")["igmp6"])
    assert {"ff02::1", "ff02::2", "ff05::2", "ff02::1:ffc6:1201"} <= groups["eth0"], groups["eth0"]
    assert groups["lo"] == {"ff02::1", "ff01::1"}


def test_ospfs_memberships_are_lost_by_the_restore():
    before, after = mcast.memberships(_lists("before")), mcast.memberships(_lists("after"))
    # only what a socket joined: the kernel's all-hosts/all-nodes/all-routers/solicited-node left out
    assert before == {"eth0": ["224.0.0.5"], "eth1": ["224.0.0.5"]}
    assert after == {}
    assert mcast.lost(before, after) == ["224.0.0.5 on eth0", "224.0.0.5 on eth1"]
    assert mcast.lost(before, before) == []


def test_read_lists_of_a_process(tmp_path):
    (tmp_path / "42" / "net").mkdir(parents=True)
    (tmp_path / "42" / "net" / "igmp").write_text(_lists("before")["igmp"])
    assert mcast.read_lists(42, proc=tmp_path) == {"igmp": _lists("before")["igmp"]}  # no igmp6: left out
    assert mcast.memberships(mcast.read_lists(42, proc=tmp_path)) == {"eth0": ["224.0.0.5"], "eth1": ["224.0.0.5"]}


def test_device_indexes_and_ospf_raw_sockets_from_real_lists():
    assert mcast.device_indexes(_lists("after")["igmp"]) == {"lo": 1, "eth0": 2, "eth1": 3}
    raw = (FIX / "net-raw.txt").read_text()
    assert mcast.raw_socket_inodes(raw) == [439544]  # protocol 0x59, not the ICMP socket
    assert mcast.raw_socket_inodes(raw, proto=1) == [439545]


def test_lost_pairs():
    assert mcast.lost_pairs(["224.0.0.5 on eth0", "ff02::5 on eth1"]) == [("224.0.0.5", "eth0"), ("ff02::5", "eth1")]
