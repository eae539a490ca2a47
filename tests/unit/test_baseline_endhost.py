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
    tb = FakeLab()
    ct = EndHost("vm-tx", slot(0), Registry("vmtest00"), enter_pid=4242, host=(tb, "R1"))
    ct.spawn("gen-0", ["/repo/crosstraffic/bin/vrgen", "--dst", "198.18.2.10"], tmp_path, "gen-0.json")
    assert tb.spawned == [
        ("R1", ["nsenter", "--target=4242", "--mount", "--uts", "--ipc", "--net", "--", "/usr/sbin/vrgen", "--dst",
                "198.18.2.10"])
    ]  # fmt: skip
    assert ct.name == "CT" and ct.ns_pid == 4242 and ct.own_files
    assert ct.file_path(tmp_path, "tcp-send-0.tsv", "p-tcp-send-0.tsv") == "/tmp/tcp-send-0.tsv"
    bare = EndHost("vm-tx", slot(0), Registry("vmtest00"), netns="ns", ns_pid=7)
    assert not bare.own_files and bare.file_path(tmp_path, "x.tsv", "p-x.tsv") == str(tmp_path / "x.tsv")
    assert bare.clock_role is None  # one kernel clock
    with pytest.raises(ValueError, match="one place"):
        EndHost("vm-tx", slot(0), Registry("vmtest00"), netns="ns", enter_pid=4242)
    with pytest.raises(ValueError, match="no host to run nsenter on"):
        EndHost("vm-tx", slot(0), Registry("vmtest00"), enter_pid=4242).spawn("gen-0", ["vrgen"], tmp_path)


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
    tb = FakeLab()
    a, b = EndHost("vm-vm", slot(0), reg, netns="vmtest00-RT0"), EndHost("vm-vm", slot(1), reg, enter_pid=99,
                                                                          host=(tb, "R1"))  # fmt: skip
    e = flow_ends(slot(0), 4, a, b)
    assert (e.source, e.sink, e.dst) == (a, b, "198.18.3.1")
    assert flow_ends(slot(0), 6, a, b).dst == "2001:2:0:3::1"
    assert (a.name, b.name) == ("RT0", "CT1")
    a.route_to(b)
    b.route_to(a)
    assert ran + [argv for _, argv in tb.ran] == [
        ["ip", "netns", "exec", "vmtest00-RT0", "ip", "route", "replace", "198.18.3.1/32", "dev", "eth0"],
        ["ip", "netns", "exec", "vmtest00-RT0", "ip", "-6", "route", "replace", "2001:2:0:3::1/128", "dev", "eth0"],
        ["nsenter", "--target=99", "--net", "--", "ip", "route", "replace", "198.18.1.1/32", "dev", "eth0"],
        ["nsenter", "--target=99", "--net", "--", "ip", "-6", "route", "replace", "2001:2:0:1::1/128", "dev", "eth0"],
    ]
    assert {role for role, _ in tb.ran} == {"R1"}
    with pytest.raises(ValueError, match="no receiving end host"):
        flow_ends(slot(0), 4, a)


class FakeLab:
    """A lab testbed's surface an end host on R1 uses: spawn, run, helper, out_path."""

    def __init__(self, snmp: str = "") -> None:
        self.spawned: list[tuple[str, list[str]]] = []
        self.ran: list[tuple[str, list[str]]] = []
        self.read: list[tuple[str, str]] = []
        self.snmp = snmp

    def spawn(self, role, what, argv, registry, out_dir, stdout_name=None):
        self.spawned.append((role, argv))
        return what

    def run(self, role, argv, timeout_s=30.0):
        import subprocess

        self.ran.append((role, argv))
        return subprocess.CompletedProcess(argv, 0, self.snmp.encode(), b"")

    def read_bytes(self, role, path):
        self.read.append((role, path))
        return (SNMP if path.endswith("/snmp") else SNMP6).encode()

    def helper(self, role, argv0):
        return f"/opt/vrmig/bin/{argv0.rsplit('/', 1)[-1]}"

    def out_path(self, role, run_dir, name, unique=None):
        return f"/opt/vrmig/runs/x/{unique or name}"


def test_an_end_host_on_a_labs_r1_runs_its_tools_over_r1s_connection(tmp_path):
    """TESTBED=: the bare router's namespace is entered by its daemon's PID with R1's deployed
    tools, the container by its init's PID with its own; both on R1's clock, their counters read
    on R1; the bare router's traces in the run's directory on R1, the container's in its /tmp."""
    lab = FakeLab(SNMP + SNMP6)
    bare = EndHost("vm-rx", slot(0), Registry("vmtest00"), enter_pid=31, container=False, host=(lab, "R1"))
    ct = EndHost("vm-tx", slot(0), Registry("vmtest00"), enter_pid=42, host=(lab, "R1"))
    bare.spawn("sink-0", ["/repo/crosstraffic/bin/vrsink", "--port", "9"], tmp_path, "sink-0.json")
    ct.spawn("gen-0", ["/repo/crosstraffic/bin/vrgen", "--dst", "198.18.2.10"], tmp_path, "gen-0.json")
    assert lab.spawned == [
        ("R1", ["nsenter", "--target=31", "--net", "--", "/opt/vrmig/bin/vrsink", "--port", "9"]),
        ("R1", ["nsenter", "--target=42", "--mount", "--uts", "--ipc", "--net", "--", "/usr/sbin/vrgen", "--dst",
                "198.18.2.10"]),
    ]  # fmt: skip
    assert (bare.name, ct.name) == ("RT0", "CT") and bare.clock_role == ct.clock_role == "R1"
    assert bare.delivered() == 127 and lab.read == [("R1", "/proc/31/net/snmp"), ("R1", "/proc/31/net/snmp6")]
    assert bare.file_path(tmp_path, "t.tsv", "p-t.tsv") == "/opt/vrmig/runs/x/p-t.tsv"
    assert ct.file_path(tmp_path, "t.tsv", "p-t.tsv") == "/tmp/t.tsv"
    guest = EndHost("vm-tx", slot(0), Registry("vmtest00"), shell=object(), host=(lab, "R1"))
    assert guest.name == "VM" and guest.clock_role is None  # the guest's own clock
    with pytest.raises(ValueError, match="enter_pid"):
        EndHost("vm-tx", slot(0), Registry("vmtest00"), netns="ns", container=False)
