"""D-ITG and trafgen backends: argv, the trafgen packet configuration, and the parsers on real
captured output (tests/fixtures/crosstraffic, see capture_ditg_trafgen.py there)."""

from __future__ import annotations

import json
import math
import re
import signal
from pathlib import Path

import pytest

from crosstraffic import GenRequest, SinkRequest, TrafficError, get_backend
from crosstraffic.backends.ditg import UNPACED_PPS, parse_itgdec
from crosstraffic.backends.trafgen import CRT_MODULI, crt_residues, packet_config, parse_trafgen

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "crosstraffic"
A_MAC, B_MAC = "02:00:00:00:00:0a", "02:00:00:00:00:0b"


def fixture(name: str) -> str:
    """Text of one captured output."""
    return (FIX / name).read_text()


@pytest.fixture
def ditg(tmp_path):
    return get_backend("ditg", workdir=tmp_path)


def trafgen(**kw):
    args = {"dev": "eth0", "src_mac": A_MAC, "dst_mac": B_MAC, "src_ip": "198.18.120.1", **kw}
    return get_backend("trafgen", **args)


# ---------------------------------------------------------------------------------------------- D-ITG argv


def test_ditg_argv(ditg, tmp_path):
    sink = ditg.sink_argv(SinkRequest(port=9000, bind="198.18.120.2", cpu=1))
    assert sink == [
        "taskset",
        "-c",
        "1",
        "ITGRecv",
        "-Sp",
        "9100",
        "-a",
        "198.18.120.2",
        "-l",
        str(tmp_path / "ditg-recv.log"),
    ]
    assert "-a" not in ditg.sink_argv(SinkRequest(port=9000, bind="2001:2:0:120::2"))  # ITGRecv -a v6 never answers
    gen = ditg.gen_argv(GenRequest(dst="198.18.120.2", port=9000, rate_bps=10_000_000, frame_bytes=1500, duration_s=2))
    assert gen == [
        "ITGSend",
        "-a",
        "198.18.120.2",
        "-Sdp",
        "9100",
        "-rp",
        "9000",
        "-T",
        "UDP",
        "-C",
        "833.333333",
        "-c",
        "1454",
        "-poll",
        "-t",
        "2000",
        "-l",
        str(tmp_path / "ditg-send.log"),
    ]
    assert ditg.sink_readiness(9000) == ("tcp-listen", 9100)
    assert ditg.sink_stop_signal == signal.SIGINT and not ditg.sink_stops_itself
    assert ditg.gen_decode_argv() == ["ITGDec", str(tmp_path / "ditg-send.log")]
    assert ditg.sink_decode_argv() == ["ITGDec", str(tmp_path / "ditg-recv.log")]


def test_ditg_small_payloads_drop_the_timestamp_metadata(ditg):
    g64 = ditg.gen_argv(GenRequest(dst="198.18.120.2", port=9000, rate_bps=0, frame_bytes=64, duration_s=1, cpu=0))
    assert g64[:3] == ["taskset", "-c", "0"]
    assert g64[g64.index("-c", 4) + 1] == "18" and g64[g64.index("-p") + 1] == "1"
    assert g64[g64.index("-C") + 1] == str(UNPACED_PPS)
    g66 = ditg.gen_argv(GenRequest(dst="198.18.120.2", port=9000, rate_bps=1_000_000, frame_bytes=66, duration_s=1))
    assert "-p" not in g66


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"duration_s": 0}, r"duration_s must be > 0 \(ITGSend ignores SIGINT"),
        ({"frame_bytes": 63}, r"outside 64..1518"),
        ({"rate_bps": -5}, r"must be > 0, or 0"),
    ],
)
def test_ditg_bad_parameters(ditg, kwargs, message):
    with pytest.raises(TrafficError, match=message):
        ditg.gen_argv(
            GenRequest(
                **{"dst": "198.18.120.2", "port": 9000, "rate_bps": 1, "frame_bytes": 64, "duration_s": 1, **kwargs}
            )
        )


def test_ditg_sink_refuses_duration_and_foreign_log(ditg):
    with pytest.raises(TrafficError, match="stopped with SIGINT"):
        ditg.sink_argv(SinkRequest(port=9000, duration_s=3))
    with pytest.raises(TrafficError, match="binary log"):
        ditg.sink_argv(SinkRequest(port=9000, log="/tmp/x"))


# ---------------------------------------------------------------------------------------------- D-ITG parsers


def test_parse_ditg_paced_run(ditg):
    ditg.gen_argv(GenRequest(dst="198.18.120.2", port=9000, rate_bps=10_000_000, frame_bytes=1500, duration_s=1))
    g = ditg.parse_gen(fixture("ditg_gen_v4_10M_1500.txt"))
    s = ditg.parse_sink(fixture("ditg_sink_v4_10M_1500.txt"))
    assert (g.tool, g.family, g.dst, g.port, g.frame_bytes, g.payload_bytes) == (
        "ITGSend",
        4,
        "198.18.120.2",
        9000,
        1500,
        1454,
    )
    assert g.requested_bps == 10_000_000 and g.duration_s == 1.0 and g.send_errors is None
    assert g.packets == 832 and g.start_ns == 0 and g.raw["times_relative"] is True
    assert math.isclose(g.achieved_pps, 832 / g.raw["total_time_s"])
    assert g.rate_error == pytest.approx(g.achieved_bps / 10_000_000 - 1)
    assert s.packets == 832 and s.lost == 0 and s.frame_bytes == 1500 and s.bytes == 832 * 1454
    assert s.timestamps == "user" and s.gaps is None and s.owd_ns is None and s.reordered is None


def test_parse_ditg_loss_from_an_outage(ditg):
    ditg.gen_argv(GenRequest(dst="198.18.120.2", port=9000, rate_bps=5_000_000, frame_bytes=64, duration_s=1.5))
    g = ditg.parse_gen(fixture("ditg_gen_v4_5M_64_outage100ms.txt"))
    s = ditg.parse_sink(fixture("ditg_sink_v4_5M_64_outage100ms.txt"))
    assert g.frame_bytes == s.frame_bytes == 64 and g.payload_bytes == 18
    assert s.lost == 968 and g.packets - s.packets == s.lost
    assert s.loss_ratio == pytest.approx(968 / 14349)


def test_parse_ditg_unpaced_receiver_loss(ditg):
    ditg.gen_argv(GenRequest(dst="198.18.120.2", port=9000, rate_bps=0, frame_bytes=64, duration_s=0.3))
    g = ditg.parse_gen(fixture("ditg_gen_v4_unpaced_64.txt"))
    s = ditg.parse_sink(fixture("ditg_sink_v4_unpaced_64.txt"))
    assert g.requested_bps == 0 and g.rate_error is None and g.packets == 49959
    assert s.packets == 40568 and s.lost == 9391 and s.expected == g.packets


def test_parse_ditg_ipv6(ditg):
    ditg.gen_argv(GenRequest(dst="2001:2:0:120::2", port=9000, rate_bps=2_000_000, frame_bytes=128, duration_s=1))
    g = ditg.parse_gen(fixture("ditg_gen_v6_2M_128.txt"))
    s = ditg.parse_sink(fixture("ditg_sink_v6_2M_128.txt"))
    assert g.family == 6 and g.dst == "2001:2:0:120::2" and g.frame_bytes == 128
    assert s.frame_bytes == 128 and s.packets == g.packets
    assert parse_itgdec(fixture("ditg_sink_v6_2M_128.txt"))["from"][0] == "2001:2:0:120::1"


def test_parse_ditg_survives_the_progress_spinner(ditg):
    """ITGDec prints a "|\\-/" spinner on stdout for large logs (seen at 250 k packets): the same
    real summary with the spinner in front of and between its lines must parse identically."""
    text = fixture("ditg_sink_v4_10M_1500.txt")
    spun = "|\\-/" * 50 + text.replace("\nTotal packets", "\n|\\-/|\\-/|\nTotal packets") + "|\\-/" * 20
    assert parse_itgdec(spun) == parse_itgdec(text)


def test_parse_ditg_rejects_empty_and_foreign_output(ditg):
    with pytest.raises(TrafficError, match="holds 0 flows"):
        parse_itgdec(fixture("ditg_itgdec_empty_log.txt"))
    with pytest.raises(TrafficError, match="no TOTAL RESULTS"):
        parse_itgdec("ITGDec version 2.8.1\nCannot open file\n")
    with pytest.raises(TrafficError, match="lacks 'bytes'"):
        parse_itgdec(re.sub(r"Bytes received.*\n", "", fixture("ditg_sink_v4_10M_1500.txt")))
    with pytest.raises(TrafficError, match="needs the request"):
        get_backend("ditg").parse_gen(fixture("ditg_gen_v4_10M_1500.txt"))


# ---------------------------------------------------------------------------------------------- trafgen config


def test_crt_residues_are_what_vrsink_decodes():
    assert crt_residues(0) == bytes(8) and crt_residues(1) == bytes([1] * 8)
    assert crt_residues(256) == bytes([0, 1, 3, 5, 9, 15, 17, 23])
    assert math.prod(CRT_MODULI) > 2**63
    assert all(math.gcd(a, b) == 1 for i, a in enumerate(CRT_MODULI) for b in CRT_MODULI[i + 1 :])


def _config_bytes(config: str) -> list[str]:
    return [x.strip() for x in config.strip("{} ").split(",")]


def _a_to_b_config(frame_bytes: int, ipv6: bool = False, counter: bool = True) -> str:
    """packet_config of a frame from A (port 9001) to B (port 9000) on segment 120, IPv4 or IPv6."""
    src_ip, dst_ip = ("2001:2:0:120::1", "2001:2:0:120::2") if ipv6 else ("198.18.120.1", "198.18.120.2")
    return packet_config(src_mac=A_MAC, dst_mac=B_MAC, src_ip=src_ip, dst_ip=dst_ip, src_port=9001, dst_port=9000,
                         frame_bytes=frame_bytes, counter=counter)  # fmt: skip


def test_trafgen_ipv4_config_is_a_64_byte_frame():
    c = _a_to_b_config(64)
    parts = _config_bytes(c)
    assert parts[:12] == [
        "0x02",
        "0x00",
        "0x00",
        "0x00",
        "0x00",
        "0x0b",
        "0x02",
        "0x00",
        "0x00",
        "0x00",
        "0x00",
        "0x0a",
    ]
    assert "c16(0x0800)" in parts and "c16(46)" in parts and "csumip(14" in parts and "csumudp(14" in parts
    assert [p for p in parts if p.startswith("dinc")] == ["dinc(0"] * len(CRT_MODULI)  # split at commas
    assert c.count("dinc(") == 8 and "dinc(0, 232, 1)" in c and c.endswith("fill(0, 10) }")


def test_trafgen_frame_length_adds_up():
    for frame in (64, 128, 1500, 1518):
        c = _a_to_b_config(frame)
        fill = int(re.search(r"fill\(0, (\d+)\)", c).group(1)) if "fill" in c else 0
        # 6+6 MACs, 2 ethertype, 20 IPv4, 8 UDP, 8 counter bytes, fill = frame without FCS
        assert 14 + 20 + 8 + 8 + fill == frame - 4
    c6 = _a_to_b_config(128, ipv6=True)
    assert "c16(0x86dd)" in c6 and "csumudp6(14, 54)" in c6 and "fill(0, 54)" in c6  # 128-66-8


def test_trafgen_static_config_has_no_counter():
    c = _a_to_b_config(64, counter=False)
    assert "dinc" not in c and c.endswith("fill(0, 18) }")


def test_trafgen_argv():
    t = trafgen()
    paced = t.gen_argv(GenRequest(dst="198.18.120.2", port=9000, rate_bps=10_000_000, frame_bytes=1500, duration_s=2))
    assert paced[:4] == ["timeout", "-s", "INT", "7"]
    assert paced[4:13] == ["trafgen", "-o", "eth0", "-P", "1", "--no-sock-mem", "-Q", "--rate", "833pps"]
    assert paced[13:15] == ["-n", "1666"] and paced[-1].startswith("{ ")
    gap = trafgen(pacing="gap").gen_argv(
        GenRequest(dst="198.18.120.2", port=9000, rate_bps=10_000_000, frame_bytes=1500, duration_s=2)
    )
    assert gap[gap.index("-t") + 1] == "1200000ns" and gap[gap.index("-n") + 1] == "1667"
    unpaced = t.gen_argv(GenRequest(dst="198.18.120.2", port=9000, rate_bps=0, frame_bytes=64, duration_s=3, cpu=0))
    assert unpaced[:4] == ["timeout", "-s", "INT", "3"] and "--rate" not in unpaced and "-n" not in unpaced
    forever = t.gen_argv(GenRequest(dst="198.18.120.2", port=9000, rate_bps=0, frame_bytes=64, duration_s=0))
    assert forever[0] == "trafgen"
    assert t.sink_argv(SinkRequest(port=9000, bind="198.18.120.2"))[-1] == "--seq-crt"
    assert "--seq-crt" not in trafgen(counter=False).sink_argv(SinkRequest(port=9000))
    assert t.gen_exit_ok(124) and t.gen_exit_ok(0) and not t.gen_exit_ok(1)
    assert not trafgen(counter=False).capabilities.loss and t.capabilities.loss


@pytest.mark.parametrize(
    ("kwargs", "call", "message"),
    [
        ({"dev": ""}, {}, r"set dev"),
        ({}, {"cpu": 1}, r"pins itself to CPU 0"),
        ({}, {"dst": "2001:2:0:120::2", "frame_bytes": 128}, r"different families"),
        ({"src_ip": "2001:2:0:120::1"}, {"dst": "2001:2:0:120::2", "frame_bytes": 73}, r"minimum 74"),
        ({}, {"rate_bps": 100, "frame_bytes": 1500}, r"below 1 packet/s"),
    ],
)
def test_trafgen_bad_parameters(kwargs, call, message):
    with pytest.raises(TrafficError, match=message):
        trafgen(**kwargs).gen_argv(
            GenRequest(
                **{
                    "dst": "198.18.120.2",
                    "port": 9000,
                    "rate_bps": 1_000_000,
                    "frame_bytes": 64,
                    "duration_s": 1,
                    **call,
                }
            )
        )


def test_trafgen_bad_construction():
    with pytest.raises(TrafficError, match="not a MAC address"):
        trafgen(dst_mac="02:00:00:00:00")
    with pytest.raises(TrafficError, match="pacing='smooth'"):
        trafgen(pacing="smooth")


# ---------------------------------------------------------------------------------------------- trafgen parsers


def test_parse_trafgen_paced_run_and_its_bursts():
    t = trafgen()
    t.gen_argv(GenRequest(dst="198.18.120.2", port=9000, rate_bps=20_000_000, frame_bytes=1500, duration_s=1))
    g = t.parse_gen(fixture("trafgen_gen_v4_20M_1500.txt"))
    s = t.parse_sink(fixture("trafgen_sink_v4_20M_1500.json"))
    assert (g.packets, g.frame_bytes, g.payload_bytes, g.requested_bps) == (1667, 1500, 1454, 20_000_000)
    assert g.raw["requested_pps"] == 1667 and abs(g.rate_error) < 0.001
    assert s.packets == 1667 and s.lost == 0 and (s.first_seq, s.last_seq) == (1, 1667) and s.owd_ns is None
    # --rate sends a second's packets as one burst: all 1667 arrived within a few milliseconds
    assert len(s.hist_ms) < 20 and sum(s.hist_ms) == 1667


def test_parse_trafgen_unpaced():
    t = trafgen()
    t.gen_argv(GenRequest(dst="198.18.120.2", port=9000, rate_bps=0, frame_bytes=64, duration_s=0.5))
    g = t.parse_gen(fixture("trafgen_gen_v4_unpaced_64.txt"))
    s = t.parse_sink(fixture("trafgen_sink_v4_unpaced_64.json"))
    assert g.requested_bps == 0 and g.rate_error is None and g.frame_bytes == 64
    assert g.packets == s.packets == s.last_seq and s.first_seq == 1 and s.lost == 0
    assert 0.4 < g.end_ns / 1e9 < 0.6


def test_parse_trafgen_burst_gap_and_ipv6_loss():
    t = trafgen()
    t.gen_argv(GenRequest(dst="198.18.120.2", port=9000, rate_bps=5_000_000, frame_bytes=64, duration_s=1.5))
    s = t.parse_sink(fixture("trafgen_sink_v4_5M_64_outage100ms.json"))
    # the burst of second 1 (9766 packets) ends, ~950 ms pass, the rest arrives
    assert s.max_gap.seq_before == 9766 and 0.9e9 < s.max_gap.duration_ns < 1e9
    t6 = trafgen(src_ip="2001:2:0:120::1")
    t6.gen_argv(GenRequest(dst="2001:2:0:120::2", port=9000, rate_bps=2_000_000, frame_bytes=128, duration_s=1))
    g6 = t6.parse_gen(fixture("trafgen_gen_v6_2M_128.txt"))
    s6 = t6.parse_sink(fixture("trafgen_sink_v6_2M_128.json"))
    assert g6.family == 6 and g6.frame_bytes == 128 and s6.frame_bytes == 128
    assert s6.lost == 1 and s6.packets + s6.lost == g6.packets == 1953


def test_parse_trafgen_counts_missing_first_packets_as_lost():
    d = json.loads(fixture("trafgen_sink_v4_20M_1500.json"))
    shifted = {**d, "first_seq": 11, "packets": d["packets"] - 10}
    assert trafgen().parse_sink(json.dumps(shifted)).lost == 10


def test_parse_trafgen_static_counts_datagrams():
    d = json.loads(fixture("trafgen_sink_v4_20M_1500.json"))
    s = trafgen(counter=False).parse_sink(json.dumps(d))
    assert s.packets == d["received"] and s.lost == 0 and s.first_seq is None and s.reordered is None


def test_parse_trafgen_rejects_bad_output():
    with pytest.raises(TrafficError, match="lacks 'packets outgoing'"):
        parse_trafgen("Running! Hang up with ^C!\n")
    with pytest.raises(TrafficError, match="per-CPU send time"):
        parse_trafgen("  5 packets outgoing\n  300 bytes outgoing\n")
    two = fixture("trafgen_gen_v4_20M_1500.txt") + "\r           1 sec, 5 usec on CPU1 (3 packets)\n"
    with pytest.raises(TrafficError, match="2 sending processes"):
        parse_trafgen(two)
    with pytest.raises(TrafficError, match="did not run with --seq-crt"):
        trafgen().parse_sink(fixture("vrsink_v4_50M_1500.json"))
    with pytest.raises(TrafficError, match="needs the request"):
        trafgen().parse_gen(fixture("trafgen_gen_v4_20M_1500.txt"))
