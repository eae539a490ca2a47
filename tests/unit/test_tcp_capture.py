"""The capture's view of a TCP flow's outage (analysis.metrics.tcp_capture) on synthetic segments
and on a synthetic pcap written by scapy (IPv4 and IPv6, a retransmission, a wrapped sequence)."""

from pathlib import Path

import numpy as np

from analysis.load import read_tcp_capture
from analysis.metrics.tcp_capture import CaptureSegments, capture_outages, new_data_arrivals

MS = 1_000_000


def _segs(rows):
    a = np.asarray(rows, dtype=np.int64).reshape(-1, 4)
    return CaptureSegments(t_ns=a[:, 0], sport=a[:, 1], seq=a[:, 2], payload=a[:, 3])


def test_synthetic_a_retransmission_of_seen_data_does_not_end_the_outage():
    # flow on port 5000: 1448-byte segments every ms, then silence from 10 to 60 ms in which only a
    # retransmission of old data arrives at 40 ms, then new data again at 60 ms
    rows = [(i * MS, 5000, 1448 * i, 1448) for i in range(11)]
    rows.append((40 * MS, 5000, 1448 * 3, 1448))  # old data: not new
    rows += [((60 + i) * MS, 5000, 1448 * (11 + i), 1448) for i in range(5)]
    rows.append((70 * MS, 5000, 0, 0))  # a pure ACK carries nothing
    out = capture_outages(_segs(rows), {5000: 0}, 20 * MS, 30 * MS)
    assert out[0].flow == 0 and out[0].outage_ms == 50.0, out
    assert (out[0].t_before_ns, out[0].t_after_ns) == (10 * MS, 60 * MS)


def test_synthetic_a_window_with_no_overlapping_interval_has_no_figure():
    rows = [(i * MS, 5000, 1448 * i, 1448) for i in range(5)]
    out = capture_outages(_segs(rows), {5000: 0, 5001: 1}, 100 * MS, 200 * MS)
    assert out[0].outage_ms is None and "overlaps" in out[0].reason
    assert out[1].outage_ms is None and out[1].new_data_segments == 0


def test_synthetic_sequence_numbers_wrap():
    seq = np.array([2**32 - 2896, 2**32 - 1448, 0, 1448], dtype=np.int64)
    t = np.array([1, 2, 3, 4], dtype=np.int64) * MS
    assert list(new_data_arrivals(t, seq, np.full(4, 1448))) == list(t)


def test_synthetic_pcap_ipv4_and_ipv6_read_with_kernel_nanoseconds(tmp_path: Path):
    from scapy.layers.inet import IP, TCP
    from scapy.layers.inet6 import IPv6
    from scapy.layers.l2 import Ether
    from scapy.utils import PcapWriter

    pkts = []
    for i, (l3, sport) in enumerate(((IP(src="198.18.1.10", dst="198.18.2.10"), 40000),
                                     (IPv6(src="2001:db8::1", dst="2001:db8::2"), 40001))):  # fmt: skip
        p = Ether() / l3 / TCP(sport=sport, dport=9100, seq=1000 + i) / (b"x" * (100 + i))
        p.time = 1_700_000_000 + i * 0.25
        pkts.append(p)
    path = tmp_path / "tcp-B.pcap"
    with PcapWriter(str(path), nano=True) as w:
        for p in pkts:
            w.write(p)
    seg = read_tcp_capture(path)
    assert list(seg.sport) == [40000, 40001] and list(seg.seq) == [1000, 1001] and list(seg.payload) == [100, 101]
    assert list(seg.t_ns) == [1_700_000_000_000_000_000, 1_700_000_000_250_000_000]


def test_synthetic_a_segment_beyond_a_hole_counts_when_the_hole_fills():
    # segment 1 (bytes 1448-2896) is lost; 2 and 3 arrive at 2 and 3 ms but the receiver can read
    # nothing until 1's retransmission arrives at 250 ms (after an RTO): then all of it at once
    rows = [(0, 5000, 0, 1448), (2 * MS, 5000, 2896, 1448), (3 * MS, 5000, 4344, 1448)]
    rows += [(250 * MS, 5000, 1448, 1448), (251 * MS, 5000, 5792, 1448)]
    a = np.asarray(rows, dtype=np.int64)
    t = new_data_arrivals(a[:, 0], a[:, 2], a[:, 3])
    assert list(t) == [0, 250 * MS, 251 * MS]
    out = capture_outages(_segs(rows), {5000: 0}, 1 * MS, 5 * MS)
    assert out[0].outage_ms == 250.0
