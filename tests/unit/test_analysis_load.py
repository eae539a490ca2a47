"""Loaders: counters.tsv (vrsampler format), irtt JSON (captured real output), JSONL and sink gaps."""

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from analysis.load import load_counters, load_irtt, read_jsonl, role_of, sink_gaps

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "analysis"
HEADER = "# vrmig-sampler 1 clock=CLOCK_REALTIME period_ns=10000000\n"


def test_counters_roles_order_uint64_and_truncated_line(tmp_path):
    p = tmp_path / "counters.tsv"
    p.write_text(
        HEADER
        + "t_ns late_ns netns ifname rx_packets rx_bytes tx_packets tx_bytes\n"
        + "1700000000020000000 1500 vmab12cd-R1 mig0 1 60 5 18446744073709551615\n"
        + "1700000000010000000 900 vmab12cd-R1 mig0 0 0 4 18446744073709551000\n"
        + "1700000000010000000 900 vmab12cd-B eth0 10 14960 0 0\n"
        + "1700000000020000000 1500 vmab12cd-B eth0 93 139128 0 0\n"
        + "garbage line\n"
        + "1700000000030000000 700 vmab12cd-B eth0 17"  # sampler killed mid-line
    )
    c = load_counters(p)
    assert c.period_ns == 10_000_000
    assert set(c.series) == {("R1", "mig0"), ("B", "eth0")}
    mig = c.get("R1", "mig0")
    assert mig.t_ns.tolist() == [1700000000010000000, 1700000000020000000]  # sorted by time
    assert mig.tx_bytes.dtype == np.uint64 and int(mig.tx_bytes[1]) == 2**64 - 1
    assert c.get("B", "eth0").rx_packets.tolist() == [10, 93]
    assert sorted(c.late_ns.tolist()) == [900, 900, 1500, 1500]
    assert c.get("A", "eth0") is None


def test_counters_column_line_with_hash_and_gzip(tmp_path):
    p = tmp_path / "counters.tsv"
    body = HEADER + "# t_ns late_ns netns ifname rx_packets rx_bytes tx_packets tx_bytes\n1 2 x-A eth0 3 4 5 6\n"
    p.write_bytes(gzip.compress(body.encode()))
    c = load_counters(p)
    assert c.get("A", "eth0").tx_bytes.tolist() == [6]


def test_role_of():
    assert role_of("vm1a2b3c-SW") == "SW" and role_of("vm1a2b3c-R2") == "R2" and role_of("plain") == "plain"


def test_irtt_captured_real_output():
    """irtt 0.9 client on loopback, 10 ms interval for 500 ms, the server SIGSTOPped for ~150 ms."""
    r = load_irtt(FIXTURES / "irtt_loopback_server_paused.json.gz")
    assert r.send_ns.size == 50
    assert r.seqno.tolist() == list(range(50))
    assert int(r.send_ns[0]) == 1795309052652054343
    assert np.all(np.diff(r.send_ns) > 0)
    lost = np.isnan(r.rtt_ns)
    assert np.flatnonzero(lost).tolist() == list(range(20, 31))  # "lost": "true_up"
    assert np.median(r.rtt_ns[~lost]) == 133_860
    assert r.rtt_ns[0] == 114_459


def test_irtt_plain_json_with_boolean_lost(tmp_path):
    doc = {
        "round_trips": [
            {"seqno": 1, "lost": False, "timestamps": {"client": {"send": {"wall": 20}}}, "delay": {"rtt": 7}},
            {"seqno": 0, "lost": "true_down", "timestamps": {"client": {"send": {"wall": 10}}}, "delay": {}},
            {"seqno": 2, "lost": "true", "timestamps": {"client": {"send": {}}}, "delay": {}},
        ]
    }
    p = tmp_path / "irtt.json"
    p.write_text(json.dumps(doc))
    r = load_irtt(p)
    assert r.send_ns.tolist() == [10, 20] and r.seqno.tolist() == [0, 1]
    assert np.isnan(r.rtt_ns[0]) and r.rtt_ns[1] == 7


def test_jsonl_skips_broken_lines_and_sink_gaps(tmp_path):
    p = tmp_path / "actions.jsonl"
    p.write_text('{"t_ns": 1, "action": "migrate"}\n\n[1]\n{"t_ns": 2, "act')
    assert read_jsonl(p) == [{"t_ns": 1, "action": "migrate"}]
    g = sink_gaps({"gaps": [[1, 2, 3, 4], [5, 6, 7]]})
    assert g.shape == (1, 4) and g.dtype == np.int64
    assert sink_gaps({}).shape == (0, 4)


def test_missing_file_raises():
    with pytest.raises(FileNotFoundError):
        load_counters(Path("/nonexistent/counters.tsv"))


def test_vrsampler_captured_real_output():
    c = load_counters(FIXTURES / "vrsampler_loopback_300ms.tsv")  # ends with the "# cpu_user_s=..." trailer
    lo = c.get(".", "lo")
    assert c.period_ns == 10_000_000
    assert len(lo) == 29
    assert int(lo.t_ns[0]) == 1795309588790104925 and int(lo.late_ns[0]) == 78809
    assert int(lo.rx_bytes[0]) == 22966046
    assert np.all(np.diff(lo.t_ns) > 0)


def test_vrsink_vrgen_captured_real_output():
    from analysis.load import read_json
    from analysis.metrics.cross import cross_traffic
    from analysis.metrics.downtime import packets_downtime
    from analysis.metrics.window import Spans

    sink = read_json(FIXTURES / "sink_loopback_gen_paused.json")
    gen = read_json(FIXTURES / "gen_loopback_gen_paused.json")
    t = sink["first_ns"]
    d = packets_downtime(sink_gaps(sink), Spans(t, t + 10**9, t, t + 10**9), sink["last_ns"], gen["end_ns"], 3_600_000)
    assert d.downtime_s == pytest.approx(0.154309803, abs=1e-9)
    assert (d.lost_in_gap, d.seq_before, d.seq_after, d.flags) == (0, 253, 254, ())
    c = cross_traffic(gen, sink, None)
    assert c.offered_bps == 10_005_000.0
    assert c.forwarded_bps == pytest.approx(667 * 1500 * 8 / 0.799222132)
    assert (c.lost_packets, c.loss_ratio, c.gen_send_errors, c.sink_lost_seq) == (0, 0.0, 0, 0)


def test_vrsampler_closing_line_missed_rounds_and_read_errors(tmp_path):
    from analysis.metrics.counters import sampler_health

    c = load_counters(FIXTURES / "vrsampler_loopback_300ms.tsv")
    assert (c.tail["rounds"], c.tail["missed"], c.tail["read_errors"]) == (29, 0, 0)
    lo = c.get(".", "lo")
    h = sampler_health(lo.t_ns, c.late_ns, c.period_ns, c.tail)
    assert (h.missed_rounds, h.read_errors) == (0, 0)
    text = (FIXTURES / "vrsampler_loopback_300ms.tsv").read_text()
    killed = tmp_path / "killed.tsv"  # killed before the closing line: unknown, not 0
    killed.write_text("\n".join(ln for ln in text.splitlines() if "cpu_user_s=" not in ln) + "\n")
    k = load_counters(killed)
    assert k.tail == {}
    h = sampler_health(lo.t_ns, k.late_ns, k.period_ns, k.tail)
    assert (h.missed_rounds, h.read_errors) == (None, None)
