"""``make baseline``: matrix parsing and validation, the address plan, and the analysis of a
captured real point (no root)."""

import ipaddress
import json
import re
import shutil
from pathlib import Path

import pytest

from analysis.baseline.points import analyse_point, cpu_rates
from analysis.baseline.summary import csv_text, summarise
from migrate.baseline.args import resume_spec
from migrate.baseline.plan import MAX_SLOTS, check_slot0_matches_testbed, slot
from migrate.baseline.spec import UNPACED, BaselineSpec, Config, spec_from_strings
from migrate.core.errors import ConfigError
from migrate.core.sighold import Abort
from migrate.experiment.calibrate import CalibrationSpec
from migrate.model.scenario import Scenario

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


def test_criu_is_one_nic_less_configuration_per_router_count_and_load():
    s = spec_from_strings(
        {"hv": "none,kvm,criu", "nic": "virtio,e1000", "routers": "1,8", "load": "none,idle,cpu,smallpkts"}
    )
    names = [c.name for c in s.configs()]
    criu = [n for n in names if n.startswith("criu-")]
    # NIC lists only the VM's models: a container's ports are veths, as HV=none's
    assert criu == [f"criu-veth-r{n}-{load}" for n in (1, 8) for load in ("none", "idle", "cpu", "smallpkts")]
    assert len(names) == (1 + 2 + 1) * 2 * 4
    # the router software is the spec's: FRR is allowed (nothing is checkpointed in a baseline)
    assert spec_from_strings({"hv": "criu"}).router == "frr"
    assert spec_from_strings({"hv": "criu"}, router="bird").router == "bird"


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"hv": "vmware"}, "HV: 'vmware' is unknown: choose from none, kvm, criu, xen"),
        ({"hv": "xen", "routers": "1,2"}, "HV=xen baselines one nested Xen host: use ROUTERS=1 LOAD=none"),
        ({"hv": "criu,criu"}, "more than once"),
        ({"hv": "openvz"}, "HV: 'openvz' is unknown"),
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
        ({"role": "vm-vx"}, "ROLE: 'vm-vx' is unknown: choose from router, vm-tx, vm-rx, vm-vm"),
        ({"role": "vm-rx", "hv": "kvm", "routers": "1,2"}, "use ROUTERS=1"),
        ({"proto": "sctp"}, "PROTO: 'sctp' is unknown: choose from udp, tcp"),
        ({"proto": "tcp", "search": "ndr", "rates": "10M"}, "SEARCH=ndr searches the UDP loss-free rate"),
    ],
)
def test_bad_input_is_one_clear_error(values, message):
    with pytest.raises(ConfigError, match=message):
        spec_from_strings(values)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("accel", "hvf", "ACCEL='hvf' must be one of auto, kvm, tcg"),
        ("mem_mib", 32, "MEM=32 must be 64-16384 MiB"),
        ("router", "frr@9.1", "frr@9.1"),
    ],
)
@pytest.mark.parametrize("spec", [BaselineSpec, CalibrationSpec, Scenario])
def test_every_spec_has_the_router_guests_defaults_and_checks(spec, field, value, message):
    assert getattr(spec(), field) == getattr(Scenario(), field)
    with pytest.raises(ConfigError, match=re.escape(message)):
        spec(**{field: value})


def test_spec_round_trips_through_meta_json():
    s = spec_from_strings({"routers": "1,2,4,8", "load": "none,cpu"}, duration_s=3.0)
    assert BaselineSpec.from_dict(json.loads(json.dumps(s.to_dict()))) == s


def _args(*flags):
    from migrate.cli.main import build_parser

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


def test_router_containers_get_their_slots_ports_macs_and_own_rootfs(tmp_path):
    from migrate.baseline.routers import CtRouter
    from migrate.drivers.criu.container import PortWiring, default_wiring

    r0 = CtRouter(slot(0), "vmx-R1", "frr", None, tmp_path, tmp_path / "ct")  # type: ignore[arg-type]
    assert r0.ct.ports == default_wiring()  # router 0 is exactly the migrate testbed's (tapL/tapR)
    r3 = CtRouter(slot(3), "vmx-R1", "frr", None, tmp_path, tmp_path / "ct")  # type: ignore[arg-type]
    assert r3.ct.ports == [
        PortWiring("eth0", "tapL3", "brL", "52:54:00:c6:15:01"),
        PortWiring("eth1", "tapR3", "brR", "52:54:00:c6:15:02"),
    ]
    assert r3.rootfs == tmp_path / "ct" / "rootfs-rt3" and r3.rootfs != r0.rootfs
    assert r3.pids() == {} and not r3.alive()  # not started: nothing to sample


def test_busy_loop_enters_the_neighbour_container_without_a_pid_namespace(tmp_path):
    from migrate.baseline.routers import BusyLoop

    argv = BusyLoop(None, None, tmp_path, enter_pid=4242).proc.argv  # type: ignore[arg-type]
    i = argv.index("nsenter")
    assert argv[i + 1 : i + 6] == ["--target=4242", "--mount", "--uts", "--ipc", "--net"]
    assert "--pid" not in argv and argv[-3:] == ["sh", "-c", "while :; do :; done"]


def test_process_tree_lists_a_process_and_its_descendants():
    import os
    import signal
    import subprocess
    import time

    from migrate.core.cpustat import process_tree

    child = subprocess.Popen(["sh", "-c", "sleep 30 & wait"])
    try:
        for _ in range(500):  # until the shell has forked its sleep (observed)
            tree = process_tree(child.pid)
            if len(tree) >= 2:
                break
            time.sleep(0.01)
        assert tree[0] == child.pid and len(tree) == 2
        assert process_tree(os.getpid())[:1] == [os.getpid()] and child.pid in process_tree(os.getpid())
    finally:
        for pid in reversed(process_tree(child.pid)):
            os.kill(pid, signal.SIGTERM)
        child.wait()
    assert process_tree(child.pid) == []


def test_captured_container_point_charges_the_containers_processes(tmp_path):
    point = tmp_path / "p"
    shutil.copytree(FIXTURE.parent / "criu_container_1500B_10M", point)
    row, routers = analyse_point(point)
    rec = json.loads((point / "point.json").read_text())
    names = set(rec["cpu_t0"]["procs"])
    assert len(names) >= 2 and all(n.startswith("router0-ct") for n in names)  # init + the daemons
    assert row["status"] == "ok" and row["hv"] == "criu" and row["nic"] == "veth"
    assert row["loss_ratio"] == 0.0 and row["forwarded_bps"] == pytest.approx(10e6, rel=0.01)
    assert row["cpu_hv"] is None  # no hypervisor process
    assert row["cpu_router_daemons"] is not None and row["cpu_router_daemons"] >= 0.0
    assert routers[0]["cpu_router"] == pytest.approx(row["cpu_router_daemons"])


def test_sweep_points_counts_every_repetitions_points():
    s = spec_from_strings({"hv": "none,kvm", "ip": "both", "sizes": "82,1500", "rates": "10M,max", "reps": "3"})
    for c in s.configs():
        assert s.sweep_points(c) == sum(1 for rep in range(1, s.reps + 1) for _ in s.sweep(c, rep)) == 24


def _one_point_spec():
    return BaselineSpec(hvs=("kvm",), sizes=(64,), rates_bps=(50_000_000,), reps=1)


def test_progress_counts_a_resumed_configuration_as_done_without_building_it(tmp_path, monkeypatch):
    from migrate.baseline import run as brun
    from migrate.baseline.config import ConfigRun
    from migrate.core.progress import Progress

    spec = _one_point_spec()
    (config,) = spec.configs()
    key = next(spec.sweep(config, 1))
    shutil.copytree(FIXTURE, tmp_path / "points" / config.name / key.name)  # measured by an earlier session
    monkeypatch.setattr(ConfigRun, "setup", lambda self: pytest.fail("a finished configuration is not rebuilt"))
    progress = Progress("baseline", spec.sweep_points(config), "points", enabled=False)
    brun._run_config(spec, config, {}, tmp_path, {"configs": {}}, Abort(), progress, brun.LocalPlan(spec))
    assert (progress.done, progress.total, progress.n_failed) == (1, 1, 0)


def test_progress_counts_the_points_of_a_failed_configuration_as_failed(tmp_path, monkeypatch):
    from migrate.baseline import run as brun
    from migrate.baseline.config import ConfigRun
    from migrate.core.errors import GuestError
    from migrate.core.progress import Progress

    spec = _one_point_spec()
    (config,) = spec.configs()

    def setup(self):
        raise GuestError("the router did not boot")

    monkeypatch.setattr(ConfigRun, "setup", setup)
    monkeypatch.setattr(ConfigRun, "teardown", lambda self: None)
    progress = Progress("baseline", spec.sweep_points(config), "points", enabled=False)
    meta = {"configs": {}}
    brun._run_config(spec, config, {}, tmp_path, meta, Abort(), progress, brun.LocalPlan(spec))
    assert meta["configs"][config.name]["status"] == "failed"
    assert (progress.done, progress.failed) == (1, {"configuration failed": 1})


def test_end_host_roles_are_configurations_of_their_own():
    s = spec_from_strings({"hv": "none,kvm", "role": "vm-tx,vm-rx,router"})
    names = [c.name for c in s.configs()]
    want = [f"{hv}-r1-none{suffix}" for hv in ("none-veth", "kvm-virtio") for suffix in ("-vm-tx", "-vm-rx", "")]
    assert names == want
    assert BaselineSpec.from_dict(json.loads(json.dumps(s.to_dict()))) == s
    assert spec_from_strings({}).roles == ("router",)


def test_tcp_points_take_every_ip_and_rate_but_no_size():
    s = spec_from_strings({"hv": "kvm", "proto": "udp,tcp", "ip": "both", "sizes": "82,1500", "rates": "10M,max"})
    (c,) = s.configs()
    keys = list(s.sweep(c, 1))
    assert len(keys) == s.sweep_points(c) // s.reps == 2 * 2 * 2 + 2 * 2
    tcp = [k for k in keys if k.proto == "tcp"]
    assert [k.name for k in tcp] == ["sweep-tcp-ip4-10M-rep1", "sweep-tcp-ip4-max-rep1", "sweep-tcp-ip6-10M-rep1",
                                     "sweep-tcp-ip6-max-rep1"]  # fmt: skip
    assert {k.frame_bytes for k in tcp} == {1518}
    only = spec_from_strings({"proto": "tcp", "rates": "10M"})
    assert only.sweep_points(only.configs()[0]) == 3 * 1 * 1
