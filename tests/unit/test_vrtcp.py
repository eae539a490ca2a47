"""crosstraffic.tcp: vrtcp's argv builders and its trace/summary parsers (synthetic TSV and JSON
text, named as such), and one real loopback run of ``vrtcp send`` into ``vrtcp sink``."""

from __future__ import annotations

import signal
import socket
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from crosstraffic import tcp
from crosstraffic.backend import TrafficError
from crosstraffic.runner import REPO, Child

READY_TIMEOUT_S = 10.0
DRAIN_TIMEOUT_S = 10.0  # the sink reads what the stopped sender left in flight

SYNTHETIC_SINK = "t_ns\tflow\tbytes\n100\t0\t0\n100\t1\t5\n200\t0\t70\n200\t1\t80\n"
SYNTHETIC_TCPINFO_HEADER = "\t".join(tcp.TCPINFO_COLUMNS) + "\n"
SYNTHETIC_TCPINFO_ROW = "1000\t1\t4\t10\t2147483647\t87\t82\t204000\t1\t2\t3\t4\t5\t6\t7\t8\t-1\t9\t1448\n"


@pytest.fixture(scope="module")
def vrtcp() -> Path:
    """The helper built from this tree's source (make: nothing to do when it is up to date)."""
    subprocess.run(["make", "-s", "-C", str(REPO / "crosstraffic"), "bin/vrtcp"], check=True, capture_output=True)
    return tcp.BIN


# ---- parsers


def test_synthetic_sink_trace(tmp_path: Path) -> None:
    p = tmp_path / "sink.tsv"
    p.write_text(SYNTHETIC_SINK)
    t = tcp.read_sink_trace(p)
    assert t.t_ns.tolist() == [100, 100, 200, 200] and t.flow.tolist() == [0, 1, 0, 1]
    assert t.bytes.tolist() == [0, 5, 70, 80] and t.bytes.dtype == np.int64
    assert not t.dropped_partial_line
    with pytest.raises(ValueError):
        t.bytes[0] = 1  # read-only: the dataclass is frozen and so are its arrays


def test_synthetic_truncated_last_line_is_dropped(tmp_path: Path) -> None:
    p = tmp_path / "sink.tsv"
    p.write_text(SYNTHETIC_SINK + "300\t0\t9")  # a killed helper's last, cut-short write
    t = tcp.read_sink_trace(p)
    assert t.dropped_partial_line and len(t.t_ns) == 4 and t.bytes[-1] == 80


def test_synthetic_truncated_header_only(tmp_path: Path) -> None:
    p = tmp_path / "sink.tsv"
    p.write_text("t_ns\tflow\tbytes\n30")
    t = tcp.read_sink_trace(p)
    assert t.dropped_partial_line and len(t.t_ns) == 0 and t.flow.dtype == np.int64


@pytest.mark.parametrize(
    ("text", "msg"),
    [
        ("", "no header line"),
        ("t_ns\tflow\n1\t2\n", "header"),
        ("t_ns\tflow\tbytes\n1\t2\n", "line 2 has 2 fields"),
        ("t_ns\tflow\tbytes\n1\t2\tx\n", "not integers"),
    ],
)
def test_synthetic_malformed_sink_trace(tmp_path: Path, text: str, msg: str) -> None:
    p = tmp_path / "sink.tsv"
    p.write_text(text)
    with pytest.raises(TrafficError, match=msg) as e:
        tcp.read_sink_trace(p)
    assert "\n" not in str(e.value)


def test_missing_trace_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(TrafficError, match="No such file"):
        tcp.read_rr(tmp_path / "absent.tsv")


def test_synthetic_gaps(tmp_path: Path) -> None:
    p = tmp_path / "sink.tsv.gaps"
    p.write_text("flow\tt_before_ns\tt_after_ns\tbytes_before\n1\t100\t60000100\t4096\n")
    g = tcp.read_sink_gaps(p)
    assert g.flow.tolist() == [1] and (g.t_after_ns - g.t_before_ns).tolist() == [60_000_000]
    assert g.bytes_before.tolist() == [4096]


def test_synthetic_tcpinfo(tmp_path: Path) -> None:
    p = tmp_path / "send.tsv"
    p.write_text(SYNTHETIC_TCPINFO_HEADER + SYNTHETIC_TCPINFO_ROW + SYNTHETIC_TCPINFO_ROW[:20])
    t = tcp.read_tcpinfo(p)
    assert t.dropped_partial_line and len(t.t_ns) == 1
    assert tcp.CA_STATES[int(t.ca_state[0])] == "Loss"
    assert t.ssthresh[0] == tcp.SSTHRESH_INFINITE and t.dsack_dups[0] == tcp.ABSENT
    assert (t.cwnd[0], t.srtt_us[0], t.delivery_rate_Bps[0], t.snd_mss[0]) == (10, 87, 9, 1448)


def test_synthetic_rr(tmp_path: Path) -> None:
    p = tmp_path / "rr.tsv"
    p.write_text("id\tflow\tt_sched_ns\tt_send_ns\tt_done_ns\n0\t0\t10\t11\t50\n1\t-1\t20\t-1\t-1\n")
    r = tcp.read_rr(p)
    assert r.id.tolist() == [0, 1] and r.flow.tolist() == [0, -1]
    assert (r.t_done_ns - r.t_send_ns)[0] == 39 and r.t_send_ns[1] == tcp.ABSENT


def test_ca_states() -> None:
    assert tcp.CA_STATES == {0: "Open", 1: "Disorder", 2: "CWR", 3: "Recovery", 4: "Loss"}


def test_synthetic_summary() -> None:
    s = tcp.parse_summary('{"tool": "vrtcp", "mode": "sink", "version": 1, "bytes": [1, 2]}\n', "sink")
    assert s["bytes"] == [1, 2]
    for text, msg in [
        ("not json", "not JSON"),
        ("[1]", "not a JSON object"),
        ('{"tool": "vrgen", "mode": "sink", "version": 1}', "tool 'vrgen'"),
        ('{"tool": "vrtcp", "mode": "bulk", "version": 1}', "mode 'bulk'"),
        ('{"tool": "vrtcp", "mode": "send", "version": 2}', "version 2"),
    ]:
        with pytest.raises(TrafficError, match=msg) as e:
            tcp.parse_summary(text)
        assert "\n" not in str(e.value)
    with pytest.raises(TrafficError, match="want sink"):
        tcp.parse_summary('{"tool": "vrtcp", "mode": "send", "version": 1}', "sink")


# ---- argv builders


def test_argv_builders(tmp_path: Path) -> None:
    out = tmp_path / "dir with space" / "t.tsv"
    a = tcp.sink_argv(bind="::1", port=5201, flows=2, sample_ms=10, out=out, gap_ms=30, duration_s=5)
    assert a == [str(tcp.BIN), "sink", "--bind", "::1", "--port", "5201", "--flows", "2", "--sample-ms", "10",
                 "--out", str(out), "--gap-ms", "30", "--duration", "5.0"]  # fmt: skip
    a = tcp.send_argv(dst="198.18.2.10", port=5201, flows=4, sample_ms=10, out=out, cc="bbr", rate_bps=100_000_000)
    assert a[1] == "send" and a[a.index("--cc") + 1] == "bbr" and a[a.index("--rate") + 1] == "100000000"
    assert "--duration" not in a and str(out) in a
    a = tcp.rr_server_argv(bind="0.0.0.0", port=7, flows=3, resp=1000, binary=Path("/opt/vrtcp"))
    assert a == ["/opt/vrtcp", "rr-server", "--bind", "0.0.0.0", "--port", "7", "--flows", "3", "--resp", "1000"]
    a = tcp.rr_client_argv(dst="fe80::1%eth0", port=7, flows=3, rate_tps=250, req=64, resp=1000, out=out)
    assert a[a.index("--rate") + 1] == "250.0" and a[a.index("--req") + 1] == "64"
    assert all(isinstance(x, str) for x in a)


@pytest.mark.parametrize(
    "call",
    [
        lambda p: tcp.sink_argv(bind="localhost", port=1, flows=1, sample_ms=10, out=p),
        lambda p: tcp.sink_argv(bind="::1", port=1, flows=0, sample_ms=10, out=p),
        lambda p: tcp.sink_argv(bind="::1", port=1, flows=257, sample_ms=10, out=p),
        lambda p: tcp.sink_argv(bind="::1", port=0, flows=1, sample_ms=10, out=p),
        lambda p: tcp.send_argv(dst="::1", port=1, flows=1, sample_ms=10, out=p, cc="bbr; rm -rf /"),
        lambda p: tcp.send_argv(dst="::1", port=1, flows=1, sample_ms=10, out=p, rate_bps=4),
        lambda p: tcp.send_argv(dst="::1", port=1, flows=1, sample_ms=10, out=p, duration_s=0),
        lambda p: tcp.rr_client_argv(dst="::1", port=1, flows=1, rate_tps=0, req=8, resp=8, out=p),
        lambda p: tcp.rr_client_argv(dst="::1", port=1, flows=1, rate_tps=10, req=7, resp=8, out=p),
        lambda p: tcp.rr_server_argv(bind="::1", port=1, flows=1, resp=65537),
    ],
)
def test_argv_builders_refuse_bad_values(tmp_path: Path, call) -> None:
    with pytest.raises(TrafficError):
        call(tmp_path / "t.tsv")


# ---- a real run over loopback


def test_loopback_send_into_sink(vrtcp: Path, tmp_path: Path) -> None:
    """Two unpaced flows for 1 s: the traces parse, every byte written is read, flows are mapped."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    sink_tsv, send_tsv = tmp_path / "sink.tsv", tmp_path / "send.tsv"
    sink = Child(tcp.sink_argv(bind="127.0.0.1", port=port, flows=2, sample_ms=10, out=sink_tsv, binary=vrtcp))
    try:
        sink.wait_line("READY", READY_TIMEOUT_S)
        send = tcp.send_argv(dst="127.0.0.1", port=port, flows=2, sample_ms=10, out=send_tsv, duration_s=1.0,
                             binary=vrtcp)  # fmt: skip
        f = Child(send).finish(30)
        assert f.returncode == 0, f.stderr
        g = tcp.parse_summary(f.stdout, "send")
        want = dict(enumerate(g["bytes_written"]))
        deadline = time.monotonic() + DRAIN_TIMEOUT_S
        while True:  # observed: the sink's trace reaches what was written
            t = tcp.read_sink_trace(sink_tsv)
            if {int(a): int(b) for a, b in zip(t.flow, t.bytes, strict=True)} == want:
                break
            assert time.monotonic() < deadline, f"sink never read {want}"
            time.sleep(0.01)
        sink.signal(signal.SIGTERM)
        fs = sink.finish(10)
    finally:
        sink.kill()
    assert fs.returncode == 0, fs.stderr
    s = tcp.parse_summary(fs.stdout, "sink")
    assert s["bytes"] == g["bytes_written"] and min(s["bytes"]) > 0
    assert {p["flow"]: p["port"] for p in s["peers"]} == dict(enumerate(g["local_ports"]))
    trace = tcp.read_sink_trace(sink_tsv)
    assert len(trace.t_ns) == s["samples"] > 2 * 50  # 2 flows, ~100 samples each
    for flow in (0, 1):
        assert np.all(np.diff(trace.bytes[trace.flow == flow]) >= 0)
    ti = tcp.read_tcpinfo(send_tsv)
    assert len(ti.t_ns) == g["samples"] > 2 * 50 and set(ti.flow.tolist()) == {0, 1}
    assert np.all(ti.cwnd > 0) and g["tcpinfo_len"] > 0 and not ti.dropped_partial_line
    assert tcp.read_sink_gaps(Path(f"{sink_tsv}.gaps")).flow.dtype == np.int64
