"""crosstraffic.bench.veth: the numbers both benchmark runs (vrgen and iperf3) report."""

from __future__ import annotations

from crosstraffic.backend import GenResult, SinkResult
from crosstraffic.bench.veth import _delivery


def test_delivery_numbers_and_key_order():
    g = GenResult(
        tool="vrgen", family=4, dst="198.18.2.10", port=9000, frame_bytes=100, payload_bytes=54,
        requested_bps=1_000_000, duration_s=2.0, start_ns=1_000_000_000, end_ns=3_000_000_000, packets=2500,
        send_errors=0, achieved_pps=1250.0, achieved_bps=1_000_000.0,
    )  # fmt: skip
    s = SinkResult(
        tool="vrsink", timestamps="kernel", packets=2400, bytes=129_600, frame_bytes=100, lost=100, reordered=0,
        duplicates=0, first_seq=0, last_seq=2499, first_ns=None, last_ns=None,
    )  # fmt: skip
    d = _delivery(g, s, 1_000_000, 100)
    assert list(d) == [
        "rate_bps", "frame_bytes", "gen_pps", "gen_bps", "rate_error", "sent", "received", "delivered_pps", "lost",
        "not_received",
    ]  # fmt: skip
    assert d["rate_bps"] == 1_000_000 and d["frame_bytes"] == 100
    assert (d["gen_pps"], d["gen_bps"], d["rate_error"]) == (1250.0, 1_000_000.0, 0.0)
    assert (d["sent"], d["received"], d["lost"], d["not_received"]) == (2500, 2400, 100, 100)
    assert d["delivered_pps"] == 1200.0
