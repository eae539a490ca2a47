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
