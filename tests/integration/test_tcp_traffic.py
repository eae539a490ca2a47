"""TRAFFIC=udp+tcp:2+rr through a real stop-and-copy migration of the router VM (root, QEMU, built
guest, tcpdump): vrtcp's two bulk flows, its request/response and the UDP CBR cross the router
while QEMU stops it for the whole copy (about 1 s under TCG).

What must hold, fixed before any run:
* the independent check: the capture at B (tcpdump's kernel time stamps of the segments that
  advance each flow's in-order byte) and the receiver's own read times give each flow's outage
  within one 10 ms sampling interval (analysis.tcp_run.CAPTURE_TOLERANCE_MS);
* TCP cannot receive while the data plane is down: the all-flows goodput outage is at least the
  UDP packet downtime less one sampling interval;
* an outage of ~1 s against Linux's 200 ms minimum RTO: the senders' RTO timers expire (at least
  one expiry seen in TCP_INFO), and the congestion window falls (Loss sets it to 1 segment);
* the rr transactions in flight see it: the largest latency during the window (or its lower
  bound, when some went unanswered) exceeds the whole-run p99 before it."""

import json

import pytest

from tests.integration._runs import frr_guest_image
from tests.integration.conftest import require_root_and

pytestmark = pytest.mark.integration

SAMPLE_MS = 10.0


def test_tcp_flows_and_rr_through_a_stopcopy_agree_with_the_capture(tmp_path, no_leftovers):
    require_root_and("qemu-system-x86_64", "irtt", "tcpdump", "crosstraffic/bin/vrtcp", "probes/bin/vrsampler")
    frr_guest_image()
    from migrate.experiment.run import run
    from migrate.model.scenario import Scenario

    s = Scenario(mode="stopcopy", rate_bps=10_000_000, frame_bytes=1500, duration_s=10, migrate_at_s=4, after_s=3,
                 traffic="udp+tcp:2,rate=20M+rr,rate=50")  # fmt: skip
    run_dir = run(s, tmp_path)
    meta = json.loads((run_dir / "meta.json").read_text())
    summary = json.loads((run_dir / "summary.json").read_text())
    assert meta["status"] == "completed", meta.get("failure")
    assert meta["instruments"]["traffic"] == "udp+tcp:2,rate=20M+rr,rate=50"
    assert meta["instruments_cpu_s"]["tcp"] > 0, meta["instruments_cpu_s"]
    for name in ("tcp-send.tsv", "tcp-recv.tsv", "tcp-recv.tsv.gaps", "tcp-B.pcap", "rr.tsv", "tcp-send.json"):
        assert (run_dir / name).stat().st_size > 0, name
    send = json.loads((run_dir / "tcp-send.json").read_text())
    assert send["flows"] == 2 and len(send["local_ports"]) == 2 and send["cc"] == ["cubic", "cubic"], send

    tcp = summary["tcp"]
    cap = tcp["capture"]
    assert tcp["capture_agrees"] is True, cap
    assert cap["flows_compared"] == 2 and cap["max_difference_ms"] <= SAMPLE_MS, cap
    udp_ms = summary["downtime_s"]["packets"] * 1e3
    assert tcp["goodput_outage_ms"] is not None and tcp["goodput_outage_ms"] >= udp_ms - SAMPLE_MS, (tcp, udp_ms)
    assert tcp["rto_expiries"] >= 1 and tcp["cwnd_min"] == 1, tcp
    assert all("Loss" in f["cwnd"]["ca_states"] for f in tcp["per_flow"]), [f["cwnd"] for f in tcp["per_flow"]]

    spike = summary["rr"]["spike"]
    during = spike["during"]["max_ms"] if spike["during"]["max_ms"] is not None else spike["during"]["max_lower_ms"]
    assert spike["before"]["answered"] > 50 and during > spike["before"]["p99_ms"], spike

    from analysis.present.table import format_table

    text = format_table(summary)
    assert "TCP 2 flow(s) cubic: goodput outage" in text and "capture at B agrees" in text, text
