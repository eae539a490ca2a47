"""The end host of a baseline point (migrate.baseline.endhost, migrate.baseline.point): where each
flow starts and ends per role, and the local-delivery count its drain watches."""

import pytest

from migrate.baseline.endhost import EndHost, delivered_count
from migrate.baseline.plan import slot
from migrate.baseline.point import flow_ends
from migrate.core.registry import Registry

SNMP = """Ip: Forwarding DefaultTTL InReceives
Ip: 1 64 5000
Tcp: RtoAlgorithm RtoMin InSegs OutSegs
Tcp: 1 200 7 9
Udp: InDatagrams NoPorts InErrors OutDatagrams
Udp: 100 0 0 3
UdpLite: InDatagrams NoPorts InErrors OutDatagrams
UdpLite: 555 0 0 0
"""
SNMP6 = "Ip6InReceives                   \t900\nUdp6InDatagrams                 \t20\nUdp6NoPorts \t1\n"


def test_delivered_counts_local_udp_and_tcp_of_both_families_and_nothing_forwarded():
    assert delivered_count(SNMP + SNMP6) == 100 + 20 + 7  # not Ip InReceives, not UdpLite
    with pytest.raises(ValueError, match="Udp6InDatagrams"):
        delivered_count(SNMP)


def test_flow_ends_per_role():
    s0 = slot(0)
    reg = Registry("vmtest00")
    tx, rx = EndHost("vm-tx", s0, reg, netns="ns"), EndHost("vm-rx", s0, reg, netns="ns")
    fwd = flow_ends(s0, 4, None)
    assert (fwd.source, fwd.sink, fwd.dst) == ("A", "B", "198.18.2.10")
    e = flow_ends(s0, 6, tx)
    assert (e.source, e.sink, e.dst) == (tx, "B", "2001:2:0:2::10")
    e = flow_ends(s0, 4, rx)
    assert (e.source, e.sink, e.dst) == ("A", rx, "198.18.1.1")
    assert rx.addr(6) == "2001:2:0:1::1" and rx.name == "RT0"
    with pytest.raises(ValueError):
        EndHost("vm-tx", s0, reg)


def test_a_container_end_host_runs_the_containers_own_tools_in_its_namespaces(monkeypatch, tmp_path):
    """HV=criu: the tool is the container's /usr/sbin copy, started by nsenter in the init's mount,
    uts, ipc and network namespaces (not its pid namespace: nsenter execs in place, the recorded
    PID is the tool's), on the host's clock ("CT", not "VM"); its files are its own /tmp's."""
    import migrate.baseline.endhost as endhost
    from migrate.baseline.point import _file_on

    started: list[tuple[list[str], str | None]] = []

    class FakeProc:
        def __init__(self, what, argv, reg, out_dir, netns=None, stdout_name=None):
            started.append((argv, netns))

        def start(self):
            return self

    monkeypatch.setattr(endhost, "Proc", FakeProc)
    ct = EndHost("vm-tx", slot(0), Registry("vmtest00"), enter_pid=4242)
    ct.spawn("gen-0", ["/repo/crosstraffic/bin/vrgen", "--dst", "198.18.2.10"], tmp_path, "gen-0.json")
    assert started == [
        (["nsenter", "--target=4242", "--mount", "--uts", "--ipc", "--net", "--", "/usr/sbin/vrgen", "--dst",
          "198.18.2.10"], None)
    ]  # fmt: skip
    assert ct.name == "CT" and ct.ns_pid == 4242 and ct.own_files
    assert str(_file_on(ct, tmp_path, "tcp-send-0.tsv")) == "/tmp/tcp-send-0.tsv"
    bare = EndHost("vm-tx", slot(0), Registry("vmtest00"), netns="ns", ns_pid=7)
    assert not bare.own_files and _file_on(bare, tmp_path, "x.tsv") == tmp_path / "x.tsv"
    with pytest.raises(ValueError, match="one place"):
        EndHost("vm-tx", slot(0), Registry("vmtest00"), netns="ns", enter_pid=4242)


def test_vm_vm_sends_from_router_0_to_router_1_over_on_link_routes(monkeypatch):
    """ROLE=vm-vm: one flow, router 0's end host to router 1's eth0 address; each end host gets an
    on-link host route over eth0 to the other (different subnets of segment L), run in its
    namespace: ``ip netns exec`` for the bare host, ``nsenter --net`` into a container."""
    import subprocess

    ran: list[list[str]] = []
    monkeypatch.setattr(
        subprocess, "run", lambda argv, **kw: ran.append(argv) or subprocess.CompletedProcess(argv, 0, "", "")
    )
    reg = Registry("vmtest00")
    a, b = EndHost("vm-vm", slot(0), reg, netns="vmtest00-RT0"), EndHost("vm-vm", slot(1), reg, enter_pid=99)
    e = flow_ends(slot(0), 4, a, b)
    assert (e.source, e.sink, e.dst) == (a, b, "198.18.3.1")
    assert flow_ends(slot(0), 6, a, b).dst == "2001:2:0:3::1"
    assert (a.name, b.name) == ("RT0", "CT1")
    a.route_to(b)
    b.route_to(a)
    assert ran == [
        ["ip", "netns", "exec", "vmtest00-RT0", "ip", "route", "replace", "198.18.3.1/32", "dev", "eth0"],
        ["ip", "netns", "exec", "vmtest00-RT0", "ip", "-6", "route", "replace", "2001:2:0:3::1/128", "dev", "eth0"],
        ["nsenter", "--target=99", "--net", "--", "ip", "route", "replace", "198.18.1.1/32", "dev", "eth0"],
        ["nsenter", "--target=99", "--net", "--", "ip", "-6", "route", "replace", "2001:2:0:1::1/128", "dev", "eth0"],
    ]
    with pytest.raises(ValueError, match="no receiving end host"):
        flow_ends(slot(0), 4, a)
