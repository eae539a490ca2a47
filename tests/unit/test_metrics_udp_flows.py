"""analysis.metrics.udp_flows on synthetic generator and sink records."""

import pytest

from analysis.metrics.udp_flows import udp_flows, udp_flows_from_records


def _sink_flow(port, packets, gap_ms, dups=0, reordered=0):
    return {"src": f"198.18.1.2:{port}", "packets": packets, "duplicates": dups, "reordered": reordered,
            "first_ns": 1, "last_ns": 2, "max_gap_ns": int(gap_ms * 1e6), "max_gap_t0_ns": 1}  # fmt: skip


def test_synthetic_per_flow_loss_and_gap_spread():
    f = udp_flows(
        [40001, 40002, 40003],
        [1000, 1000, 1000],
        [_sink_flow(40001, 1000, 2.0), _sink_flow(40002, 990, 41.0), _sink_flow(40003, 960, 55.0, dups=3)],
        flow_run=8,
    )
    assert [r.lost for r in f.per_flow] == [0, 10, 40]
    assert f.flows_with_loss == 2
    assert (f.loss_ratio_min, f.loss_ratio_median, f.loss_ratio_max) == (0.0, 0.01, 0.04)
    assert (f.longest_gap_min_ms, f.longest_gap_max_ms) == (2.0, 55.0)
    assert f.per_flow[2].duplicates == 3 and f.unknown_sources == 0 and f.flags == ()


def test_synthetic_silent_flow_and_unknown_source():
    """A flow the sink never heard from lost all it sent; a source the generator does not name is
    counted apart, not matched to a flow."""
    f = udp_flows([5, 6], [10, 10], [_sink_flow(5, 10, 1.0), _sink_flow(7, 4, 1.0)], sink_socket_drops=2)
    assert f.per_flow[1].received is None and f.per_flow[1].lost == 10 and f.per_flow[1].longest_gap_ms is None
    assert f.unknown_sources == 1 and f.flags == ("sink_socket_drops", "silent_flows")
    assert f.to_dict()["per_flow"][1]["loss_ratio"] == 1.0


@pytest.mark.parametrize(
    ("gen", "sink"),
    [
        ({"flow_src_ports": [1], "flow_packets": [3]}, {"packets": 3}),  # a sink without per-flow records
        ({"packets": 3}, {"flows": []}),  # a generator without them
        (None, {"flows": []}),
    ],
)
def test_records_without_per_flow_members_give_none(gen, sink):
    assert udp_flows_from_records(gen, sink) is None


def test_ipv6_source_port_is_parsed():
    f = udp_flows_from_records(
        {"flow_src_ports": [40001], "flow_packets": [5], "flow_run": 8},
        {"flows": [{"src": "[2001:db8::1]:40001", "packets": 5, "max_gap_ns": 1_000_000}]},
    )
    assert f is not None and f.per_flow[0].received == 5 and f.flow_run == 8 and f.per_flow[0].longest_gap_ms == 1.0


def test_synthetic_b_to_a_bound_is_a_censored_qualifier_and_a_lower_column():
    """A B -> A packet downtime known only as a bound (clipped, open) is carried as one: the
    summary's qualifier udp.ba.downtime_s is censored and runs.csv has udp_ba_downtime_s_lower."""
    from analysis.stats.aggregate import run_record
    from analysis.summary import Summary

    dp = {"downtime_s": None, "lower_s": 1.25, "upper_s": None, "flags": ["open_end"]}
    udp = {"flows": 1, "ba": {"downtime_s": None, "downtime_packets": dp, "why_absent": {}}}
    s = Summary("completed", None, "kvm", "stopcopy", "tcg", 1e7, 1500, udp=udp)
    qual = s.qualifiers()["udp.ba.downtime_s"]
    assert (qual.state, qual.lower, qual.reasons) == ("censored", 1.25, ("open_end",))
    rec = run_record(s.to_dict(), {})
    assert rec["udp_ba_downtime_s"] is None and rec["udp_ba_downtime_s_lower"] == 1.25
    absent = Summary(
        "completed", None, "kvm", "stopcopy", "tcg", 1e7, 1500,
        udp={"ba": {"downtime_s": None, "downtime_packets": None, "why_absent": {"downtime_packets": "no_sink"}}},
    ).qualifiers()["udp.ba.downtime_s"]  # fmt: skip
    assert (absent.state, absent.reasons) == ("absent", ("no_sink",))
    assert "udp.ba.downtime_s" not in Summary("completed", None, "kvm", "stopcopy", "tcg", 1e7, 1500).qualifiers()
