"""TRAFFIC=: the mix's grammar, its defaults, and one line for each mistake (no run starts)."""

import pytest

from migrate.core.errors import ConfigError
from migrate.model.scenario import Scenario
from migrate.model.traffic import (
    IMIX,
    IMIX_V6,
    MAX_FLOWS,
    MAX_UDP_FLOWS,
    RequestResponse,
    TcpFlows,
    TrafficMix,
    parse_traffic,
)


@pytest.mark.parametrize(
    ("text", "mix"),
    [
        ("udp", TrafficMix(udp=True)),
        ("tcp", TrafficMix(udp=False, tcp=TcpFlows(1))),
        ("udp+tcp:4,cc=bbr", TrafficMix(udp=True, tcp=TcpFlows(4, "bbr"))),
        ("tcp:16,rate=20M,cc=cubic", TrafficMix(udp=False, tcp=TcpFlows(16, "cubic", 20_000_000))),
        ("rr,rate=100", TrafficMix(udp=False, rr=RequestResponse(1, 100))),
        ("udp+tcp:2+rr:4,rate=200,req=128,resp=8", TrafficMix(True, TcpFlows(2), RequestResponse(4, 200, 128, 8))),
        (f"tcp:{MAX_FLOWS}", TrafficMix(udp=False, tcp=TcpFlows(MAX_FLOWS))),
        ("udp:8,dir=both", TrafficMix(udp=True, udp_flows=8, udp_both=True)),
        ("tcp:4,dir=both,cc=bbr", TrafficMix(udp=False, tcp=TcpFlows(4, "bbr", both=True))),
        ("udp+tcp,dir=ab", TrafficMix(udp=True, tcp=TcpFlows(1))),
        ("udp,sizes=imix", TrafficMix(udp=True, udp_sizes="imix")),
        ("udp:2,sizes=64:1/1518:3", TrafficMix(udp=True, udp_flows=2, udp_sizes=((64, 1), (1518, 3)))),
        (f"udp:{MAX_UDP_FLOWS}+tcp", TrafficMix(udp=True, tcp=TcpFlows(1), udp_flows=MAX_UDP_FLOWS)),
    ],
)
def test_the_mixes_parse(text, mix):
    assert parse_traffic(text) == mix


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "TRAFFIC is empty"),
        ("tcp:0", "TRAFFIC=tcp:0: 0 flows: give 1-64"),
        (f"tcp:{MAX_FLOWS + 1}", f"{MAX_FLOWS + 1} flows"),
        ("tcp,cc=cubci", "cc=cubci is not a congestion control"),
        ("rr", "rr needs a rate of transactions per second"),
        ("rr,rate=0", "rate=0 must be a whole number 1-100000"),
        ("rr,rate=10,req=4", "req=4 must be a whole number 8-65536"),
        ("udp+udp", "udp is given twice"),
        ("udp:0", "TRAFFIC=udp:0: 0 flows: give 1-256"),
        (f"udp:{MAX_UDP_FLOWS + 1}", f"{MAX_UDP_FLOWS + 1} flows"),
        ("udp,dir=ba", "dir=ba: give dir=ab"),
        ("tcp:2,dir=ba", "TRAFFIC=tcp:2,dir=ba: dir=ba: give dir=ab (A -> B, the default) or dir=both"),
        ("udp,sizes=64", "sizes entry '64' is not SIZE:WEIGHT"),
        ("udp,sizes=63:1", "frame size 63 is outside 64-1518"),
        ("udp,sizes=64:0", "weight 0 of 64 B must be at least 1"),
        ("udp,sizes=64:1/64:2", "64 B is given twice"),
        ("udp,sizes=64:4000/128:97", "the weights sum to 4097"),
        ("udp,flows=2", "unknown option 'flows': udp takes dir, sizes"),
        ("tcp,rate=fast", "rate=fast is not a rate"),
        ("tcp,window=1", "unknown option 'window'"),
        ("tcp,cc", "is not KEY=VALUE"),
        ("udp+", "TRAFFIC=udp+ ((empty)): not a component"),
        ("quic:2", "TRAFFIC=quic:2: not a component"),
    ],
)
def test_each_mistake_is_one_line(text, says):
    with pytest.raises(ConfigError) as err:
        Scenario(traffic=text, rate_bps=0)
    assert says in str(err.value) and "\n" not in str(err.value), str(err.value)


def test_rate_belongs_to_the_udp_component():
    with pytest.raises(ConfigError, match="which TRAFFIC=tcp:2 does not include: give TRAFFIC=udp\\+tcp:2"):
        Scenario(traffic="tcp:2", rate_bps=10_000_000)
    assert Scenario(traffic="udp+tcp:2", rate_bps=10_000_000).traffic_mix.tcp == TcpFlows(2)


def test_a_mix_without_udp_runs_no_udp_generator_by_default():
    from migrate.cli.main import build_parser
    from migrate.experiment.args import scenario_from_args

    s = scenario_from_args(build_parser().parse_args(["run", "--traffic", "tcp:2,cc=bbr"]))
    assert s.rate_bps == 0 and s.traffic_mix.tcp == TcpFlows(2, "bbr")
    assert s.name.endswith("-tcp2ccbbr")
    assert scenario_from_args(build_parser().parse_args(["run"])).name.endswith("-1500")


def test_a_size_mix_sets_the_frame_size_per_ip_version():
    """sizes=imix is 64/570/1518 over IPv4 and 82/570/1518 over IPv6 (vrgen's header needs 82 B);
    frame_bytes becomes the mix's smallest frame, as gen.json reports it."""
    v4, v6 = Scenario(traffic="udp,sizes=imix"), Scenario(traffic="udp,sizes=imix", ip=6)
    assert (v4.frame_sizes, v4.frame_bytes) == (IMIX, 64)
    assert (v6.frame_sizes, v6.frame_bytes) == (IMIX_V6, 82)
    with pytest.raises(ConfigError, match="64 B frames cannot carry IPv6") as err:
        Scenario(traffic="udp,sizes=64:1/1500:1", ip=6)
    assert "\n" not in str(err.value)


def test_flows_directions_and_sizes_need_vrgen():
    with pytest.raises(ConfigError, match="needs vrgen: leave GEN out"):
        Scenario(traffic="udp:4", gen="iperf3")


def test_size_and_a_size_mix_are_refused_together():
    from migrate.cli.main import build_parser
    from migrate.experiment.args import scenario_from_args

    with pytest.raises(ConfigError, match="SIZE=200 and TRAFFIC=udp,sizes=imix both set the UDP frame size"):
        scenario_from_args(build_parser().parse_args(["run", "--size", "200", "--traffic", "udp,sizes=imix"]))
    assert scenario_from_args(build_parser().parse_args(["run", "--traffic", "udp,sizes=imix"])).frame_bytes == 64
