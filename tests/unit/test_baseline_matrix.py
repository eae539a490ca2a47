"""``make baseline``: matrix parsing and validation, the address plan, and the analysis of a
captured real point (no root)."""

import ipaddress
import json
import shutil
from pathlib import Path

import pytest

from analysis.baseline_points import analyse_point, cpu_rates
from analysis.baseline_summary import csv_text, summarise
from migrate.baseline_cli import resume_spec
from migrate.baseline_plan import MAX_SLOTS, check_slot0_matches_testbed, slot
from migrate.baseline_spec import UNPACED, BaselineSpec, Config, spec_from_strings
from migrate.errors import ConfigError

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "baseline" / "kvm_tcg_64B_50M"


def test_defaults_and_lists():
    s = spec_from_strings(
        {"hv": "none,kvm", "ip": "both", "sizes": "82,1500", "rates": "10M, 1G,max", "nic": "virtio,e1000"}
    )
    assert s.hvs == ("none", "kvm") and s.ips == (4, 6)
    assert s.rates_bps == (10_000_000, 1_000_000_000, UNPACED) and s.ndr_hi_bps == 1_000_000_000
    # HV=none has no NIC model: one configuration; kvm one per NIC
    assert [c.name for c in s.configs()] == ["none-veth-r1-none", "kvm-virtio-r1-none", "kvm-e1000-r1-none"]
    for c in s.configs():
        names = [k.name for rep in (1, 2) for k in s.sweep(c, rep)]
        assert len(names) == len(set(names)) == 2 * 2 * 2 * 3  # reps x ips x sizes x rates


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"hv": "xen"}, "HV: 'xen' is unknown"),
        ({"sizes": ""}, "SIZES is empty"),
        ({"sizes": "64,,1500"}, "empty item"),
        ({"sizes": "1500,1500"}, "more than once"),
        ({"sizes": "63"}, "outside 64-1518"),
        ({"sizes": "64", "ip": "6"}, "too small for IPv6"),
        ({"rates": "0"}, "use 'max'"),
        ({"rates": "20G"}, "outside"),
        ({"rates": "fast"}, "is not a rate"),
        ({"routers": "0"}, "outside 1..8"),
        ({"load": "stress"}, "LOAD: 'stress' is unknown"),
        ({"ip": "5"}, "IP='5'"),
        ({"reps": "0"}, "REPS=0"),
        ({"search": "ndr", "rates": "max"}, "needs at least one numeric rate"),
    ],
)
def test_bad_input_is_one_clear_error(values, message):
    with pytest.raises(ConfigError, match=message):
        spec_from_strings(values)


def test_spec_round_trips_through_meta_json():
    s = spec_from_strings({"routers": "1,2,4,8", "load": "none,cpu"}, duration_s=3.0)
    assert BaselineSpec.from_dict(json.loads(json.dumps(s.to_dict()))) == s


def _args(*flags):
    from migrate.cli import build_parser

    return build_parser().parse_args(["baseline", "--resume", "/nonexistent", *flags])


def test_resume_refuses_a_different_matrix():
    stored = spec_from_strings({"sizes": "64,1500"})
    assert resume_spec(_args(), stored) == stored
    assert resume_spec(_args("--sizes", "64,1500"), stored) == stored
    with pytest.raises(ConfigError, match="SIZES differs"):
        resume_spec(_args("--sizes", "1500"), stored)


def test_address_plan_slots_are_disjoint_and_in_the_benchmark_ranges():
    check_slot0_matches_testbed()
    nets4, nets6, macs = set(), set(), set()
    for k in range(MAX_SLOTS):
        s = slot(k)
        for side in "LR":
            r4, r6 = (ipaddress.ip_interface(c) for c in s.router_cidrs(side))
            h4, h6 = (ipaddress.ip_interface(c) for c in s.host_cidrs(side))
            assert r4.network == h4.network and r6.network == h6.network
            assert r4.network.subnet_of(ipaddress.ip_network("198.18.0.0/15"))
            assert r6.network.subnet_of(ipaddress.ip_network("2001:2::/48"))
            nets4.add(r4.network)
            nets6.add(r6.network)
            macs.add(s.mac(side))
    assert len(nets4) == len(nets6) == len(macs) == 2 * MAX_SLOTS
    with pytest.raises(ValueError):
        slot(MAX_SLOTS)


def test_cpu_rates_in_cpu_seconds_per_second():
    host0 = dict.fromkeys(("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal"), 0)
    host1 = {**host0, "user": 100, "system": 50, "softirq": 30, "idle": 20}
    t0 = {"mono_ns": 0, "user_hz": 100, "host": host0, "procs": {"qemu0": [10, 5], "gone": None}}
    t1 = {"mono_ns": 2_000_000_000, "user_hz": 100, "host": host1, "procs": {"qemu0": [110, 25], "gone": None}}
    r = cpu_rates(t0, t1)
    assert r["host"] == pytest.approx(0.9)  # 180 busy ticks / 100 Hz / 2 s
    assert r["softirq"] == pytest.approx(0.15)
    assert r["procs"] == {"qemu0": pytest.approx(0.6), "gone": None}


def test_captured_point_is_analysed_from_its_raw_files(tmp_path):
    point = tmp_path / "p"
    shutil.copytree(FIXTURE, point)
    row, routers = analyse_point(point)
    gen = json.loads((point / "gen-0.json").read_text())
    sink = json.loads((point / "sink-0.json").read_text())
    span_s = (gen["end_ns"] - gen["start_ns"]) / 1e9
    assert row["status"] == "ok" and row["hv"] == "kvm" and row["frame_bytes"] == 64
    assert row["offered_bps"] == pytest.approx(gen["achieved_bps"])
    assert row["forwarded_pps"] == pytest.approx(sink["packets"] / span_s)
    assert row["forwarded_bps"] == pytest.approx(sink["packets"] / span_s * 64 * 8)
    assert row["loss_ratio"] == pytest.approx(1 - sink["packets"] / gen["packets"])
    assert 0.5 < row["loss_ratio"] < 1.0  # the TCG router drops most of 50 Mbit/s of 64 B frames
    assert row["cpu_hv"] == pytest.approx((764 + 47 - 700 - 29) / 100 / 2.039215448)
    assert row["rtt_median_ms"] is not None and row["rtt_median_ms"] > 0
    assert len(routers) == 1 and routers[0]["cpu_router"] == pytest.approx(row["cpu_hv"])
    text = csv_text([row], tuple(row))
    assert text.splitlines()[0].startswith("hv,nic,ip,frame_bytes,routers,load,rate_bps")


def test_summary_efficiency_relative_to_the_classical_router():
    base = {"nic": "veth", "ip": 4, "frame_bytes": 1500, "routers": 1, "load": "none", "phase": "sweep", "status": "ok"}
    rows = []
    for rep, (fwd_none, fwd_kvm) in enumerate([(100e6, 80e6), (100e6, 60e6)], 1):
        rows.append(
            {**base, "hv": "none", "rate_bps": 100_000_000, "rep": rep, "forwarded_bps": fwd_none, "loss_ratio": 0}
        )
        rows.append({**base, "hv": "kvm", "nic": "virtio", "rate_bps": 100_000_000, "rep": rep,
                     "forwarded_bps": fwd_kvm, "loss_ratio": 0.3})  # fmt: skip
    s = summarise(rows)
    kvm = next(c for c in s["configs"] if c["hv"] == "kvm")
    assert kvm["max_forwarded"]["forwarded_bps"]["mean"] == pytest.approx(70e6)
    assert kvm["efficiency"]["max_forwarded"] == pytest.approx(0.7)
    assert kvm["sweep_loss_free_bps"] == 0
    assert s["configs"][0]["hv"] == "none" and Config("none", "veth", 1, "none").name == "none-veth-r1-none"


def test_a_generator_limited_pass_proves_only_the_offered_rate():
    base = {"hv": "none", "nic": "veth", "ip": 4, "frame_bytes": 64, "routers": 1, "load": "none", "status": "ok"}
    rows = [
        {**base, "phase": "sweep", "rep": 1, "rate_bps": 20_000_000, "offered_bps": 20e6, "loss_ratio": 0.0},
        {**base, "phase": "sweep", "rep": 1, "rate_bps": 50_000_000, "offered_bps": 30e6, "loss_ratio": 0.0,
         "gen_limited": True},
    ]  # fmt: skip
    c = summarise(rows, {"spec": {"search": "ndr"}})["configs"][0]
    assert c["ndr"]["per_rep"][0]["ndr_bps"] == 30_000_000 and c["ndr"]["at_upper_bound"] == 1
    assert c["sweep_loss_free_bps"] == 30_000_000
