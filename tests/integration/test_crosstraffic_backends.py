"""D-ITG, trafgen and vrgen --packet for real on the benchmark testbed (A -> SW bridge -> B), the
frames' checksums, and a short ``crosstraffic.bench.traffic`` run.

Skips with the reason unless running as root with the tools installed (``make setup``).
"""

from __future__ import annotations

import csv
import json
import os
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from crosstraffic import GenRequest, SinkRequest, get_backend
from crosstraffic.backend import Backend, GenResult, SinkResult
from crosstraffic.backends.trafgen import CRT_MODULI, packet_config
from crosstraffic.bench.bed import NS_PREFIX, BridgeBed, bridge_bed
from crosstraffic.runner import REPO, Child, run, wait_tcp_listen, wait_udp_drained
from migrate.drivers.criu.announce import inet_checksum
from tests.integration.conftest import require_root_and

pytestmark = pytest.mark.integration

PORT = 9000
READY_TIMEOUT_S = 10.0


def _bed_namespaces() -> set[str]:
    names = os.listdir("/run/netns") if os.path.isdir("/run/netns") else []
    return {n for n in names if n.startswith(NS_PREFIX)}


@pytest.fixture(scope="module")
def bed():
    """One A -> SW -> B testbed for the module; its namespaces must be gone afterwards."""
    require_root_and("ip", "bridge", "crosstraffic/bin/vrgen", "crosstraffic/bin/vrsink")
    with bridge_bed(rx_cpu=None) as b:
        yield b
    left = _bed_namespaces() & {b.a, b.sw, b.b}
    assert not left, f"namespaces left behind: {sorted(left)}"


def round_trip(b: Backend, bed: BridgeBed, dst: str, rate: int, frame: int, dur: float) -> tuple[GenResult, SinkResult]:
    """Sink in B (ready by observation), generator in A to completion, sink stopped; both parsed."""
    sink = Child(b.sink_argv(SinkRequest(port=PORT, bind=dst)), netns=bed.b)
    try:
        kind, what = b.sink_readiness(PORT)
        if kind == "stderr-line":
            sink.wait_line(str(what), READY_TIMEOUT_S)
        else:
            wait_tcp_listen(bed.b, int(what), READY_TIMEOUT_S, sink)
        gen = Child(
            b.gen_argv(GenRequest(dst=dst, port=PORT, rate_bps=rate, frame_bytes=frame, duration_s=dur)), netns=bed.a
        )
        g = gen.finish(dur + 30)
        assert b.gen_exit_ok(g.returncode), g.stderr
        assert wait_udp_drained(bed.b, PORT, 10.0), "the sink did not read what reached it within 10 s"
        sink.signal(b.sink_stop_signal)
        s = sink.finish(30)
        assert s.returncode == 0, s.stderr
    finally:
        sink.kill()
    gen_out = g.stdout if b.gen_decode_argv() is None else run(b.gen_decode_argv()).stdout
    sink_out = s.stdout if b.sink_decode_argv() is None else run(b.sink_decode_argv()).stdout
    return b.parse_gen(gen_out), b.parse_sink(sink_out)


def rx_non_ipv6(ns: str, ifname: str) -> int:
    """Frames ``ifname`` received minus the IPv6 packets the namespace received (A's MLD/RS chatter;
    a veth does not keep a multicast counter)."""
    f = run(["cat", f"/sys/class/net/{ifname}/statistics/rx_packets", "/proc/net/snmp6"], netns=ns)
    lines = f.stdout.splitlines()
    ip6 = next(int(ln.split()[1]) for ln in lines if ln.startswith("Ip6InReceives"))
    return int(lines[0]) - ip6


# ---------------------------------------------------------------------------------------------- checksums


def check_frame(frame: bytes) -> tuple[int, bytes]:
    """Assert valid IPv4/IPv6 and UDP checksums; return (family, UDP payload)."""
    etype = struct.unpack("!H", frame[12:14])[0]
    if etype == 0x0800:
        ip = frame[14:34]
        assert inet_checksum(ip) == 0, "IPv4 header checksum"
        udp = frame[34 : 14 + struct.unpack("!H", ip[2:4])[0]]
        pseudo = ip[12:20] + struct.pack("!BBH", 0, 17, len(udp))
        fam = 4
    else:
        assert etype == 0x86DD
        ip = frame[14:54]
        udp = frame[54 : 54 + struct.unpack("!H", ip[4:6])[0]]
        pseudo = ip[8:40] + struct.pack("!IxxxB", len(udp), 17)
        fam = 6
    assert struct.unpack("!H", udp[4:6])[0] == len(udp)
    assert udp[6:8] != b"\0\0", "UDP checksum missing"
    assert inet_checksum(pseudo + udp) == 0, "UDP checksum"
    return fam, udp[8:]


def pcap_frames(path: Path) -> list[bytes]:
    """The frames of a classic pcap file."""
    data = path.read_bytes()
    out, off = [], 24
    while off < len(data):
        incl = struct.unpack_from("<I", data, off + 8)[0]
        out.append(data[off + 16 : off + 16 + incl])
        off += 16 + incl
    return out


@pytest.mark.parametrize(
    ("src", "dst", "frame"), [("198.18.120.1", "198.18.120.2", 64), ("2001:2::1", "2001:2::2", 128)]
)
def test_trafgen_frames_are_valid_and_count_in_crt(tmp_path, src, dst, frame):
    """trafgen's output for our packet configuration (written to a pcap): checksums right on every
    frame, the counter bytes decode to 1, 2, 3, ... (what vrsink --seq-crt reads)."""
    require_root_and("trafgen")
    cfg = packet_config(
        src_mac="02:00:00:00:00:0a",
        dst_mac="02:00:00:00:00:0b",
        src_ip=src,
        dst_ip=dst,
        src_port=9001,
        dst_port=9000,
        frame_bytes=frame,
    )
    pcap = tmp_path / "out.pcap"
    f = run(["timeout", "20", "trafgen", "-o", str(pcap), "-n", "600", "-P", "1", "--no-sock-mem", "-Q", cfg])
    assert f.returncode == 0, f.stderr
    frames = pcap_frames(pcap)
    assert len(frames) == 600 and all(len(x) == frame - 4 for x in frames)
    for k, fr in enumerate(frames, 1):
        fam, payload = check_frame(fr)
        assert fam == (4 if ":" not in dst else 6)
        assert payload[:8] == bytes(k % m for m in CRT_MODULI)


_CAPTURE = r"""
import socket, sys, struct
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0003))
s.bind(("eth0", 0))
s.settimeout(10)
print("READY", file=sys.stderr, flush=True)
out = []
while len(out) < int(sys.argv[1]):
    f = s.recv(2048)
    if f[12:14] in (b"\x08\x00", b"\x86\xdd") and (f[23:24] == b"\x11" or f[20:21] == b"\x11"):
        out.append(f.hex())
print("\n".join(out))
"""


def test_vrgen_packet_mode_frames_are_valid_udp(bed):
    """vrgen --packet: the frames B receives carry valid checksums and vrgen's payload header."""
    b = get_backend("builtin", packet_dev=bed.a_if, dst_mac=bed.b_mac)
    cap = Child([sys.executable, "-c", _CAPTURE, "50"], netns=bed.b)
    try:
        cap.wait_line("READY", READY_TIMEOUT_S)
        gen = Child(
            b.gen_argv(GenRequest(dst=bed.b4, port=PORT, rate_bps=1_000_000, frame_bytes=100, duration_s=0.2)),
            netns=bed.a,
        )
        g = gen.finish(30)
        assert g.returncode == 0, g.stderr
        c = cap.finish(30)
    finally:
        cap.kill()
    frames = [bytes.fromhex(x) for x in c.stdout.split()]
    assert len(frames) == 50
    for k, fr in enumerate(frames):
        fam, payload = check_frame(fr)
        assert fam == 4 and len(fr) == 96 and struct.unpack_from("<Q", payload)[0] == k
    assert json.loads(g.stdout)["send_mode"] == "packet"


def test_vrgen_packet_mode_counts_one_packet_per_frame(bed):
    """Paced --packet run into vrsink: exact counts, no loss, and B's eth0 counted every frame."""
    b = get_backend("builtin", packet_dev=bed.a_if, dst_mac=bed.b_mac)
    before = rx_non_ipv6(bed.b, "eth0")
    g, s = round_trip(b, bed, bed.b4, 20_000_000, 1500, 1)
    after = rx_non_ipv6(bed.b, "eth0")
    assert g.packets == s.packets == 1667 and s.lost == 0 and g.send_errors == 0
    assert abs(g.rate_error) < 0.02
    # one per frame (an aggregating sender, like --gso, would show ~1/64 of that); a few IPv6 control
    # frames (MLD/RS after link-up) may be seen too, not all of them reach Ip6InReceives
    assert g.packets <= after - before <= g.packets + 3
    assert s.owd_ns.min > 0 and s.first_seq == 0


def test_vrgen_packet_mode_ipv6(bed):
    b = get_backend("builtin", packet_dev=bed.a_if, dst_mac=bed.b_mac)
    g, s = round_trip(b, bed, bed.b6, 5_000_000, 128, 0.5)
    assert g.family == 6 and g.packets == s.packets > 0 and s.lost == 0 and s.frame_bytes == 128


def test_ditg_round_trip(bed, tmp_path):
    require_root_and("ITGSend", "ITGRecv", "ITGDec", "taskset")
    b = get_backend("ditg", workdir=tmp_path)
    g, s = round_trip(b, bed, bed.b4, 5_000_000, 1500, 1)
    assert g.tool == "ITGSend" and g.frame_bytes == s.frame_bytes == 1500
    assert g.packets > 100 and s.packets == g.packets and s.lost == 0
    g6, s6 = round_trip(b, bed, bed.b6, 1_000_000, 128, 0.5)
    assert g6.family == 6 and s6.packets == g6.packets > 0


@pytest.mark.parametrize("pacing", ["rate", "gap"])
def test_trafgen_round_trip(bed, pacing):
    require_root_and("trafgen", "timeout")
    b = get_backend("trafgen", dev=bed.a_if, src_mac=bed.a_mac, dst_mac=bed.b_mac, src_ip=bed.a4, pacing=pacing)
    g, s = round_trip(b, bed, bed.b4, 10_000_000, 1500, 1)
    assert s.first_seq == 1 and s.last_seq == g.packets == s.packets and s.lost == 0
    if pacing == "rate":
        assert g.packets == 833 and abs(g.rate_error) < 0.01  # --rate takes whole packets/s
    else:
        assert 0 < g.packets <= 834


def test_trafgen_unpaced_stops_by_timeout(bed):
    require_root_and("trafgen", "timeout")
    b = get_backend("trafgen", dev=bed.a_if, src_mac=bed.a_mac, dst_mac=bed.b_mac, src_ip=bed.a4)
    g, s = round_trip(b, bed, bed.b4, 0, 64, 0.5)
    assert g.packets > 1000 and 0.3 < g.end_ns / 1e9 < 1.0
    assert s.packets + s.lost == g.packets


def bench_traffic(*args: str, timeout_s: float) -> subprocess.CompletedProcess[str]:
    """``python -m crosstraffic.bench.traffic ARGS`` in the repository, its output captured."""
    return subprocess.run(
        [sys.executable, "-m", "crosstraffic.bench.traffic", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


def test_bench_traffic_smoke(tmp_path):
    """A tiny benchmark: CSV with the issue's columns, meta with load and versions, nothing left."""
    require_root_and("ip", "bridge", "crosstraffic/bin/vrgen", "crosstraffic/bin/vrsink", "trafgen", "iperf3")
    before = _bed_namespaces()
    work_before = set(Path(tempfile.gettempdir()).glob("vrt-bt-work-*"))
    out = tmp_path / "traffic.csv"
    f = bench_traffic(
        "--out",
        str(out),
        "--duration",
        "1",
        "--reps",
        "1",
        "--rates",
        "10000000",
        "--frames",
        "1500",
        "--only",
        "builtin/packet,iperf3,trafgen/counter",
        timeout_s=180,
    )
    assert f.returncode == 0, f.stderr[-2000:]
    rows = list(csv.DictReader(out.open()))
    assert {"backend", "frame_bytes", "requested_bps", "achieved_bps", "achieved_pps", "loss_ratio"} <= set(rows[0])
    assert {(r["backend"], r["requested_bps"]) for r in rows} == {
        (b, r) for b in ("builtin", "iperf3", "trafgen") for r in ("0", "10000000")
    }
    paced = {r["backend"]: r for r in rows if r["requested_bps"] != "0"}
    assert all(float(r["cpu_us_per_packet"]) > 0 for r in rows)
    assert paced["builtin"]["gen_dev_source"] == "vrgen schedule" and float(paced["builtin"]["gen_dev_p50_us"]) >= 0
    assert paced["builtin"]["arr_dev_source"] == paced["trafgen"]["arr_dev_source"] == "vrsink kernel stamps"
    assert float(paced["trafgen"]["arr_dev_max_us"]) >= float(paced["trafgen"]["arr_dev_p50_us"]) >= 0
    assert paced["iperf3"]["gen_dev_p50_us"] == paced["iperf3"]["arr_dev_p50_us"] == ""  # no per-packet times
    meta = json.loads((tmp_path / "traffic.meta.json").read_text())
    assert len(meta["loadavg_before"]) == 3 and "trafgen" in meta["versions"]["trafgen"]
    assert "| backend | mode |" in f.stdout and "| send − schedule p50 / p99 / max µs |" in f.stdout
    assert _bed_namespaces() == before
    assert set(Path(tempfile.gettempdir()).glob("vrt-bt-work-*")) <= work_before


def test_bench_traffic_bad_input_creates_nothing(tmp_path):
    before = _bed_namespaces()
    f = bench_traffic("--out", str(tmp_path / "x.csv"), "--only", "pktgen", timeout_s=60)
    assert f.returncode == 2 and len(f.stderr.strip().splitlines()) == 1 and "unknown --only" in f.stderr
    assert not (tmp_path / "x.csv").exists() and _bed_namespaces() == before
    f = bench_traffic("--out", str(tmp_path / "x.csv"), "--vrgen-quantum-us", "-1", timeout_s=60)
    assert f.returncode == 2 and len(f.stderr.strip().splitlines()) == 1 and "--vrgen-quantum-us" in f.stderr
    assert not (tmp_path / "x.csv").exists() and _bed_namespaces() == before
