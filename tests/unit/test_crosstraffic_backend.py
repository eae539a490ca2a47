"""crosstraffic backends: registry, argv building, parameter validation and the output parsers,
the parsers run on real captured output (tests/fixtures/crosstraffic, see capture.py there)."""

from __future__ import annotations

import dataclasses
import json
import math
import sys
from pathlib import Path

import pytest

import crosstraffic
from crosstraffic import (
    Gap,
    GenRequest,
    GenResult,
    NotImplementedBackendError,
    SinkRequest,
    SinkResult,
    TrafficError,
    backend_class,
    backend_names,
    get_backend,
)
from crosstraffic.backend import RATE_CONVENTION

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "crosstraffic"

# Field lists of the gen.json / sink.json contract (docs/data-formats.md); the tools may add fields,
# never drop these.
README_GEN_FIELDS = {
    "tool", "version", "clock", "rate_convention", "family", "dst", "port", "frame_bytes", "payload_bytes",
    "requested_bps", "duration_s", "start_ns", "end_ns", "packets", "send_errors", "achieved_pps", "achieved_bps",
}  # fmt: skip
README_SINK_FIELDS = {
    "tool", "version", "clock", "timestamps", "packets", "bytes", "frame_bytes", "first_seq", "last_seq", "lost",
    "reordered", "duplicates", "first_ns", "last_ns", "gap_threshold_ns", "gaps", "hist_start_ms", "hist_ms", "owd_ns",
}  # fmt: skip


def fixture(name: str) -> str:
    """Text of one captured output."""
    return (FIX / name).read_text()


@pytest.fixture
def builtin():
    return get_backend("builtin", bin_dir="/opt/vr/bin")


@pytest.fixture
def iperf3():
    return get_backend("iperf3")


# ---------------------------------------------------------------------------------------------- registry


def test_registry_lists_all_and_implemented():
    assert backend_names() == ("builtin", "iperf3", "ditg", "trafgen")
    assert backend_names(implemented_only=True) == ("builtin", "iperf3", "ditg", "trafgen")
    assert crosstraffic.DEFAULT_BACKEND == "builtin"
    assert get_backend().name == "builtin"
    assert backend_class("ditg").capabilities.loss and not backend_class("ditg").capabilities.gaps
    assert backend_class("trafgen").capabilities.gaps and not backend_class("trafgen").capabilities.owd


def test_unknown_backend_is_a_one_line_value_error():
    with pytest.raises(TrafficError, match=r"unknown traffic backend 'pktgen': choose one of builtin, iperf3") as e:
        get_backend("pktgen")
    assert isinstance(e.value, ValueError)
    assert "\n" not in str(e.value)


def test_not_implemented_backends_are_refused_with_one_line(monkeypatch):
    from crosstraffic import backend as registry

    class Later(registry.Backend):
        name, implemented = "later", False

        @classmethod
        def not_implemented_message(cls):
            return "traffic backend 'later' is not implemented yet"

    monkeypatch.setitem(registry._REGISTRY, "later", "tests.unit.test_crosstraffic_backend:_Later")
    monkeypatch.setattr(sys.modules[__name__], "_Later", Later, raising=False)
    with pytest.raises(NotImplementedBackendError, match="not implemented yet") as e:
        get_backend("later")
    assert "\n" not in str(e.value)
    assert "later" not in backend_names(implemented_only=True)


def test_backend_modules_are_imported_lazily():
    import subprocess
    import sys

    mods = ("iperf3", "builtin", "ditg", "trafgen")
    code = f"import sys, crosstraffic; print(*(f'crosstraffic.{{m}}' in sys.modules for m in {mods!r}))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False"] * 4


# ---------------------------------------------------------------------------------------------- argv


def test_builtin_gen_argv(builtin):
    argv = builtin.gen_argv(
        GenRequest(dst="198.18.2.10", port=9000, rate_bps=100_000_000, frame_bytes=1500, duration_s=10.5)
    )
    assert argv == ["/opt/vr/bin/vrgen", "--dst", "198.18.2.10", "--port", "9000", "--rate", "100000000",
                    "--frame", "1500", "--duration", "10.5"]  # fmt: skip
    assert builtin.gen_argv(GenRequest(dst="2001:2:0:2::10", port=1, rate_bps=0, frame_bytes=82, duration_s=0, cpu=1))[
        -2:
    ] == [
        "--cpu",
        "1",
    ]


def test_builtin_gen_argv_flows_and_sizes(builtin, iperf3):
    """--flows (and --flow-run) and --sizes instead of --frame; other backends refuse them."""
    req = GenRequest(dst="198.18.2.10", port=9000, rate_bps=10_000_000, frame_bytes=64, duration_s=0, flows=4,
                     flow_run=1, sizes=((64, 7), (570, 4), (1518, 1)))  # fmt: skip
    argv = builtin.gen_argv(req)
    assert argv[argv.index("--sizes") + 1] == "64:7,570:4,1518:1" and "--frame" not in argv
    assert argv[-4:] == ["--flows", "4", "--flow-run", "1"]
    with pytest.raises(TrafficError, match="frame_bytes=100 must be the smallest"):
        builtin.gen_argv(dataclasses.replace(req, frame_bytes=100))
    with pytest.raises(TrafficError, match="several flows or a frame-size mix are not supported"):
        iperf3.gen_argv(dataclasses.replace(req, sizes=None))


def test_flow_run_is_one_packet_per_flow_up_to_50_kpps():
    from migrate.experiment.instruments import FLOW_RUN_FAST, flow_run

    assert flow_run(10_000_000, None, 1500) == 1  # 833 packets/s
    assert flow_run(100_000_000, None, 256) == 1  # 48,828 packets/s
    assert flow_run(100_000_000, None, 64) == FLOW_RUN_FAST  # 195,312 packets/s
    assert flow_run(100_000_000, ((64, 7), (570, 4), (1518, 1)), 64) == 1  # mean 353.8 B: 35,329 packets/s
    assert flow_run(0, None, 1500) == FLOW_RUN_FAST  # unpaced


def test_builtin_sink_argv(builtin):
    assert builtin.sink_argv(SinkRequest(port=9000, bind="198.18.2.10", gap_us=3000)) == [
        "/opt/vr/bin/vrsink", "--port", "9000", "--bind", "198.18.2.10", "--gap-us", "3000"]  # fmt: skip
    assert builtin.sink_argv(SinkRequest(port=9000, family=6, duration_s=5, log="/tmp/p.bin")) == [
        "/opt/vr/bin/vrsink", "--port", "9000", "-6", "--gap-us", "1000",
        "--duration", "5", "--log", "/tmp/p.bin"]  # fmt: skip
    assert builtin.sink_readiness(9000) == ("stderr-line", "READY")


def test_iperf3_argv_converts_frame_bits_to_payload_bits(iperf3):
    argv = iperf3.gen_argv(
        GenRequest(dst="198.18.2.10", port=5201, rate_bps=100_000_000, frame_bytes=1500, duration_s=10)
    )
    assert argv == ["iperf3", "-c", "198.18.2.10", "-p", "5201", "-u", "-b", "96933333", "-l", "1454", "-t", "10",
                    "-J", "--udp-counters-64bit"]  # fmt: skip
    v6 = iperf3.gen_argv(GenRequest(dst="2001:2:0:2::10", port=5201, rate_bps=0, frame_bytes=128, duration_s=1, cpu=0))
    assert v6[v6.index("-b") + 1] == "0" and v6[v6.index("-l") + 1] == "62" and v6[-2:] == ["-A", "0"]
    assert iperf3.sink_argv(SinkRequest(port=5201, bind="198.18.2.10")) == [
        "iperf3", "-s", "-1", "-J", "-p", "5201", "-B", "198.18.2.10"]  # fmt: skip
    assert iperf3.sink_argv(SinkRequest(port=5201, family=6))[-1] == "-6"
    assert iperf3.sink_readiness(5201) == ("tcp-listen", 5201)


def test_iperf3_needs_whole_seconds(iperf3):
    with pytest.raises(TrafficError, match="must be whole seconds"):
        iperf3.gen_argv(GenRequest(dst="198.18.2.10", port=5201, rate_bps=1_000_000, frame_bytes=1500, duration_s=0.5))


def test_iperf3_has_no_packet_log(iperf3):
    with pytest.raises(TrafficError, match="per-packet log"):
        iperf3.sink_argv(SinkRequest(port=5201, log="x.bin"))


def test_missing_executables_are_reported(builtin):
    assert builtin.missing() == ["/opt/vr/bin/vrgen", "/opt/vr/bin/vrsink"]


GEN_OK = {"dst": "198.18.2.10", "port": 9000, "rate_bps": 10_000_000, "frame_bytes": 64, "duration_s": 1}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"rate_bps": -1}, r"rate_bps=-1 must be > 0, or 0 for unpaced"),
        ({"rate_bps": 1.5}, r"rate_bps=1.5 must be an integer"),
        ({"rate_bps": True}, r"rate_bps=True must be an integer"),
        ({"frame_bytes": 63}, r"frame_bytes=63 is outside 64..1518"),
        ({"frame_bytes": 1519}, r"frame_bytes=1519 is outside 64..1518"),
        (
            {"dst": "2001:2:0:2::10", "frame_bytes": 81},
            r"too small for IPv6 .* payload would be 15 B but needs 16 B \(minimum 82\)",
        ),
        ({"dst": "router"}, r"'router' is not a numeric IPv4 or IPv6 address"),
        ({"port": 0}, r"port=0 is outside 1..65535"),
        ({"port": 65536}, r"port=65536 is outside 1..65535"),
        ({"duration_s": -1}, r"duration_s=-1 must be >= 0"),
        ({"duration_s": math.nan}, r"must be a finite number"),
    ],
)
@pytest.mark.parametrize("name", ["builtin", "iperf3"])
def test_gen_parameters_are_validated(name, change, message):
    with pytest.raises(TrafficError, match=message) as e:
        get_backend(name).gen_argv(GenRequest(**{**GEN_OK, **change}))
    assert "\n" not in str(e.value)


def test_smallest_frames_are_accepted(builtin):
    assert builtin.gen_argv(GenRequest(**{**GEN_OK, "frame_bytes": 64}))
    assert builtin.gen_argv(GenRequest(**{**GEN_OK, "dst": "2001:2:0:2::10", "frame_bytes": 82}))
    assert builtin.capabilities.min_frame(4) == 64 and builtin.capabilities.min_frame(6) == 82


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"port": 9000, "bind": "198.18.2.10", "family": 6}, r"IPv4 address but family=6"),
        ({"port": 9000, "family": 5}, r"family=5 must be 4 or 6"),
        ({"port": 9000, "gap_us": 0}, r"gap_us=0 must be an integer >= 1"),
        ({"port": 9000, "cpu": -1}, r"cpu=-1 must be a CPU number"),
        ({"port": 70000}, r"port=70000 is outside"),
    ],
)
def test_sink_parameters_are_validated(builtin, kwargs, message):
    with pytest.raises(TrafficError, match=message):
        builtin.sink_argv(SinkRequest(**kwargs))


# ---------------------------------------------------------------------------------------------- builtin parsers


def test_rate_convention_matches_the_c_tools():
    raw = json.loads(fixture("vrgen_v4_50M_1500.json"))
    assert raw["rate_convention"] == RATE_CONVENTION == crosstraffic.RATE_CONVENTION


@pytest.mark.parametrize(
    "tag", ["v4_50M_1500", "v6_10M_128", "v4_20M_1500_outage200ms", "v4_unpaced_64", "v4_1M_64_sigterm"]
)
def test_fixtures_hold_every_readme_field(tag):
    assert README_GEN_FIELDS <= set(json.loads(fixture(f"vrgen_{tag}.json")))
    assert README_SINK_FIELDS <= set(json.loads(fixture(f"vrsink_{tag}.json")))


def test_parse_builtin_paced_run(builtin):
    g = builtin.parse_gen(fixture("vrgen_v4_50M_1500.json"))
    s = builtin.parse_sink(fixture("vrsink_v4_50M_1500.json"))
    assert isinstance(g, GenResult) and isinstance(s, SinkResult)
    assert (g.family, g.dst, g.port, g.frame_bytes, g.payload_bytes) == (4, "198.18.100.2", 9000, 1500, 1454)
    assert g.requested_bps == 50_000_000 and g.duration_s == 2.0 and g.stopped_by == "duration"
    assert abs(g.rate_error) < 0.001
    assert g.end_ns - g.start_ns == 2_000_000_000
    assert g.packets == s.packets == 8334 and s.lost == 0 and g.send_errors == 0
    assert s.timestamps == "kernel" and s.frame_bytes == 1500 and s.bytes == s.packets * 1454
    assert (s.first_seq, s.last_seq, s.reordered, s.duplicates) == (0, 8333, 0, 0)
    assert sum(s.hist_ms) == s.raw["received"]
    assert s.hist_start_ms == s.first_ns // 1_000_000
    assert s.owd_ns.min <= s.owd_ns.median <= s.owd_ns.max
    assert all(isinstance(x, Gap) and x.duration_ns > s.gap_threshold_ns for x in s.gaps)
    assert s.socket_drops == 0 and s.loss_ratio == 0.0


@pytest.mark.parametrize("tag", ["v4_50M_1500", "v6_10M_128", "v4_20M_1500_outage200ms", "v4_1M_64_sigterm"])
def test_vrgen_fixtures_report_the_schedule_deviation(tag):
    """Paced runs: every sent packet's send stamp minus its due time (never negative: no packet
    leaves early), one send stamp per sendmmsg call, the duration of every call."""
    d = json.loads(fixture(f"vrgen_{tag}.json"))
    dev, call = d["sched_dev_ns"], d["send_call_ns"]
    assert d["stamp"] == "burst" and d["quantum_us"] == 500 and d["waits"] <= d["batches"]
    assert dev["count"] == d["packets"] and 0 <= dev["min"] <= dev["p50"] <= dev["p99"] <= dev["p999"] <= dev["max"]
    assert call["count"] == d["batches"] and 0 < call["p50"] <= call["max"]


def test_vrgen_fixture_unpaced_has_no_schedule():
    d = json.loads(fixture("vrgen_v4_unpaced_64.json"))
    assert d["sched_dev_ns"] is None and d["quantum_us"] == 0 and d["waits"] == 0
    assert d["send_call_ns"]["count"] == d["batches"]


def test_parse_builtin_outage_gap(builtin):
    s = builtin.parse_sink(fixture("vrsink_v4_20M_1500_outage200ms.json"))
    gap = s.max_gap
    assert 195e6 < gap.duration_ns < 215e6
    assert gap.missing == s.lost  # 0.6 ms apart: a gap of D ms misses about D / 0.6 - 1 packets
    assert abs(gap.missing - (gap.duration_ns / 600_000 - 1)) <= 1
    assert s.expected == s.last_seq - s.first_seq + 1
    assert 0.13 < s.loss_ratio < 0.14


def test_parse_builtin_ipv6(builtin):
    g = builtin.parse_gen(fixture("vrgen_v6_10M_128.json"))
    s = builtin.parse_sink(fixture("vrsink_v6_10M_128.json"))
    assert g.family == 6 and g.payload_bytes == 128 - 66 and s.frame_bytes == 128
    assert g.packets == s.packets and s.lost == 0


def test_parse_builtin_unpaced(builtin):
    g = builtin.parse_gen(fixture("vrgen_v4_unpaced_64.json"))
    assert g.requested_bps == 0 and g.rate_error is None and g.achieved_pps > 10_000
    assert math.isclose(g.achieved_bps, g.achieved_pps * 64 * 8, rel_tol=1e-6)


def test_parse_builtin_signal_stop(builtin):
    g = builtin.parse_gen(fixture("vrgen_v4_1M_64_sigterm.json"))
    s = builtin.parse_sink(fixture("vrsink_v4_1M_64_sigterm.json"))
    assert g.stopped_by == "signal" and g.duration_s == 0
    assert s.raw["stopped_by"] == "signal" and s.packets == g.packets


def test_results_are_frozen(builtin):
    s = builtin.parse_sink(fixture("vrsink_v4_50M_1500.json"))
    with pytest.raises(AttributeError):
        s.lost = 1  # type: ignore[misc]
    with pytest.raises(TypeError):
        s.raw["lost"] = 1  # type: ignore[index]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", r"vrsink: empty output"),
        ("READY\n", r"vrsink: output is not JSON"),
        ("[1, 2]", r"not a JSON object"),
        ('{"tool": "vrgen", "version": 1, "clock": "CLOCK_REALTIME"}', r"output is from 'vrgen', not vrsink"),
        ('{"tool": "vrsink", "version": 2, "clock": "CLOCK_REALTIME"}', r"output version 2"),
        ('{"tool": "vrsink", "version": 1, "clock": "CLOCK_MONOTONIC"}', r"expected CLOCK_REALTIME"),
    ],
)
def test_parse_sink_rejects_bad_output(builtin, text, message):
    with pytest.raises(TrafficError, match=message):
        builtin.parse_sink(text)


def test_parse_sink_rejects_missing_or_mistyped_fields(builtin):
    d = json.loads(fixture("vrsink_v4_50M_1500.json"))
    for key in ("lost", "gaps", "owd_ns"):
        broken = {k: v for k, v in d.items() if k != key}
        with pytest.raises(TrafficError, match=f"lacks '{key}'"):
            builtin.parse_sink(json.dumps(broken))
    with pytest.raises(TrafficError, match="'lost' is '3'"):
        builtin.parse_sink(json.dumps({**d, "lost": "3"}))
    with pytest.raises(TrafficError, match="gaps"):
        builtin.parse_sink(json.dumps({**d, "gaps": [[1, 2]]}))


def test_parse_gen_rejects_truncated_output(builtin):
    text = fixture("vrgen_v4_50M_1500.json")
    with pytest.raises(TrafficError, match="not JSON"):
        builtin.parse_gen(text[: len(text) // 2])


# ---------------------------------------------------------------------------------------------- iperf3 parsers


def test_parse_iperf3_run(iperf3):
    g = iperf3.parse_gen(fixture("iperf3_client_v4_50M_1500.json"))
    s = iperf3.parse_sink(fixture("iperf3_server_v4_50M_1500.json"))
    assert (g.tool, g.family, g.port, g.frame_bytes, g.payload_bytes) == ("iperf3", 4, 5201, 1500, 1454)
    assert g.requested_bps == 50_000_000 and g.stopped_by == "duration" and g.send_errors is None
    assert abs(g.rate_error) < 0.01
    assert s.packets == g.packets and s.lost == 0 and s.reordered == 0
    assert s.bytes == s.packets * 1454 and s.frame_bytes == 1500
    assert s.timestamps == "none" and s.gaps is None and s.hist_ms is None and s.owd_ns is None
    assert s.max_gap is None


def test_parse_iperf3_ipv6(iperf3):
    g = iperf3.parse_gen(fixture("iperf3_client_v6_10M_128.json"))
    s = iperf3.parse_sink(fixture("iperf3_server_v6_10M_128.json"))
    assert g.family == 6 and g.frame_bytes == 128 and g.dst == "2001:2:0:100::2"
    assert s.frame_bytes == 128 and s.packets == g.packets


def test_parse_iperf3_interrupted_client(iperf3):
    g = iperf3.parse_gen(fixture("iperf3_client_v4_10M_1500_sigterm.json"))
    s = iperf3.parse_sink(fixture("iperf3_server_v4_10M_1500_sigterm.json"))
    assert g.stopped_by == "signal" and g.duration_s == 30.0
    assert 2.0 < (g.end_ns - g.start_ns) / 1e9 < 3.5
    assert g.packets > 1000 and s.packets > 1000 and s.lost == 0


def test_parse_iperf3_connection_refused(iperf3):
    with pytest.raises(TrafficError, match="iperf3 client failed: unable to connect to server: Connection refused"):
        iperf3.parse_gen(fixture("iperf3_client_refused.json"))


def test_parse_iperf3_rejects_other_output(iperf3):
    with pytest.raises(TrafficError, match="iperf3 server: empty output"):
        iperf3.parse_sink("")
    with pytest.raises(TrafficError, match="no results"):
        iperf3.parse_sink('{"start": {}, "intervals": [], "end": {}}')


# -- helpers the backends share (crosstraffic.backend) --


def test_short_decimal_drops_trailing_zeros():
    from crosstraffic.backend import short_decimal

    assert short_decimal(2.5, 6) == "2.5"
    assert short_decimal(10.0, 6) == "10"
    assert short_decimal(0.0, 3) == "0"
    assert short_decimal(1.23456789, 3) == "1.235"
    assert short_decimal(1e-7, 6) == "0"
    assert short_decimal(1e-6, 6) == "0.000001"


@pytest.mark.parametrize("cpu", [-1, True, 1.0, "1"])
def test_check_cpu_refuses_non_cpu_numbers(cpu):
    from crosstraffic.backend import check_cpu

    with pytest.raises(TrafficError, match=r"must be a CPU number >= 0"):
        check_cpu(cpu)


def test_check_cpu_returns_the_cpu():
    from crosstraffic.backend import check_cpu

    assert check_cpu(0) == 0
    assert check_cpu(3) == 3


def test_recorded_request_needs_gen_argv():
    from crosstraffic.backend import recorded_request

    with pytest.raises(TrafficError, match=r"^tool: parse_gen needs the request of this instance's gen_argv\(\) call$"):
        recorded_request(None, "tool")
    r = GenRequest(dst="198.18.2.10", port=9000, rate_bps=1_000_000, frame_bytes=1000, duration_s=2.0)
    assert recorded_request(r, "tool") is r


def test_span_gen_result_rates_over_the_span():
    from crosstraffic.backend import span_gen_result

    raw = {"x": 1}
    g = span_gen_result(
        tool="t", family=4, dst="198.18.2.10", port=9000, frame_bytes=100, payload_bytes=54,
        requested_bps=80_000, duration_s=2.0, start_ns=5_000_000_000, packets=200, span_s=2.0,
        stopped_by="duration", raw=raw,
    )  # fmt: skip
    assert g.end_ns == 7_000_000_000
    assert g.achieved_pps == 100.0
    assert g.achieved_bps == 80_000.0
    assert g.send_errors is None
    assert g.stopped_by == "duration"
    assert dict(g.raw) == raw
    raw["x"] = 2
    assert g.raw["x"] == 1  # a frozen copy
    empty = span_gen_result(
        tool="t", family=4, dst="198.18.2.10", port=9000, frame_bytes=100, payload_bytes=54,
        requested_bps=0, duration_s=0.0, start_ns=0, packets=0, span_s=0.0, stopped_by=None, raw={},
    )  # fmt: skip
    assert (empty.end_ns, empty.achieved_pps, empty.achieved_bps) == (0, 0.0, 0.0)


def test_count_sink_result_has_no_sequence_or_times():
    from crosstraffic.backend import count_sink_result

    s = count_sink_result(
        tool="t", timestamps="none", packets=9, bytes=900, frame_bytes=146, lost=1, reordered=2, raw={"a": 1}
    )
    assert (s.packets, s.bytes, s.frame_bytes, s.lost, s.reordered) == (9, 900, 146, 1, 2)
    assert (s.duplicates, s.first_seq, s.last_seq, s.first_ns, s.last_ns) == (None,) * 5
    assert s.gaps is None and s.hist_ms is None and s.owd_ns is None
    assert dict(s.raw) == {"a": 1}


def test_validate_sink_returns_the_family(builtin):
    assert builtin.validate_sink(SinkRequest(port=9000)) == 4
    assert builtin.validate_sink(SinkRequest(port=9000, bind="2001:db8::1", duration_s=0)) == 6
    with pytest.raises(TrafficError, match=r"port=0 is outside"):
        builtin.validate_sink(SinkRequest(port=0))
    with pytest.raises(TrafficError, match=r"duration_s=-1 must be >= 0"):
        builtin.validate_sink(SinkRequest(port=9000, family=6, duration_s=-1))


def test_sink_gap_threshold_of_a_size_mix_follows_its_largest_frame():
    """At 10 Mbit/s a 1518 B frame is followed 1.21 ms later: 3 such spacings (3.64 ms), not 3 of
    the 64 B frame's (1 ms floor), so the normal spacing of IMIX is never a recorded gap."""
    from migrate.experiment.instruments import Instruments
    from migrate.model.scenario import Scenario

    ins = Instruments.__new__(Instruments)
    ins.s = Scenario(rate_bps=10_000_000, traffic="udp,sizes=imix")
    assert ins._gap_us() == 3643
    ins.s = Scenario(rate_bps=10_000_000, frame_bytes=64)
    assert ins._gap_us() == 1000
