"""``make baseline TESTBED=``: what a lab baseline refuses before anything starts, the scenario
its router's driver gets, a resumed lab baseline's testbed, R1's CPU snapshot taken by the very
cpustat module run with ``python3 -c``, and the clock correction of a lab point's one-way delay
and RTT window.  The runs themselves are tests/integration/test_lab_migrate.py's."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from analysis.baseline.points import analyse_point, clock_shift
from migrate.baseline.lab import refuse, resume_testbed, scenario_for
from migrate.baseline.spec import BaselineSpec, Config
from migrate.core import cpustat
from migrate.core.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]
FIXTURE = REPO / "tests" / "fixtures" / "baseline" / "kvm_tcg_64B_50M"
EXAMPLE = REPO / "docs" / "lab.example.toml"


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"hvs": ("kvm",), "routers": (1, 2)}, "ROUTERS=1"),
        ({"hvs": ("kvm",), "loads": ("none", "cpu")}, "LOAD=none"),
        ({"hvs": ("kvm",), "roles": ("router", "vm-vm")}, "ROLE=vm-vm needs a second router"),
        ({"hvs": ("kvm", "xen"), "roles": ("vm-tx",)}, "with HV=xen needs the domU's console"),
    ],
)
def test_a_lab_baseline_refuses_what_needs_the_embedded_testbed(change, words):
    with pytest.raises(ConfigError, match=words):
        refuse(BaselineSpec(**change))


def test_a_lab_baseline_takes_one_router_of_each_hypervisor_and_the_bare_router():
    refuse(BaselineSpec(hvs=("none", "kvm", "criu", "xen")))
    refuse(BaselineSpec(hvs=("none", "kvm", "criu"), roles=("router", "vm-tx", "vm-rx"), protos=("udp", "tcp")))


def test_a_bad_lab_baseline_is_one_line_exit_2_and_nothing_started(tmp_path):
    res = subprocess.run(
        [sys.executable, "-m", "migrate", "baseline", "--testbed", str(EXAMPLE), "--routers", "1,2", "--hv", "kvm",
         "--results", str(tmp_path / "results")],
        cwd=REPO, capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "ROUTERS=1" in lines[0], res.stderr
    assert not (tmp_path / "results").exists()


def test_the_router_of_a_lab_baseline_is_started_by_its_hypervisors_driver():
    spec = BaselineSpec(hvs=("kvm", "criu"), router="bird", mem_mib=192)
    kvm = scenario_for(spec, Config("kvm", "e1000", 1, "none"))
    assert (kvm.hv, kvm.driver, kvm.nic, kvm.router, kvm.mem_mib) == ("kvm", "qmp", "e1000", "bird", 192)
    criu = scenario_for(spec, Config("criu", "veth", 1, "none"))
    assert criu.mode == "stopcopy"  # nothing is checkpointed; stop-and-copy needs no soft-dirty tracking


def test_a_resumed_baseline_stays_on_its_testbed(tmp_path):
    lab = tmp_path / "lab.toml"
    lab.write_text("")
    meta = {"lab": {"inventory": str(lab)}}
    assert resume_testbed(tmp_path, meta, None) == lab
    assert resume_testbed(tmp_path, meta, lab) == lab
    with pytest.raises(ConfigError, match="drop TESTBED="):
        resume_testbed(tmp_path, meta, tmp_path / "other.toml")
    with pytest.raises(ConfigError, match="ran on the embedded testbed"):
        resume_testbed(tmp_path, {}, lab)
    assert resume_testbed(tmp_path, {}, None) is None
    lab.unlink()
    with pytest.raises(ConfigError, match="which is gone"):
        resume_testbed(tmp_path, meta, None)


def test_the_remote_cpu_snapshot_is_this_modules_own_run_by_python3(tmp_path):
    child = subprocess.Popen(["sleep", "30"])
    try:
        out = subprocess.run(
            cpustat.remote_argv({"me0": os.getpid()}, {"tree-": os.getpid()}), capture_output=True, text=True,
            check=True, timeout=30, cwd=tmp_path,
        )  # fmt: skip
        snap = json.loads(out.stdout)
    finally:
        child.kill()
        child.wait()
    local = cpustat.snapshot({"me0": os.getpid()})
    assert set(snap) == set(local)
    assert snap["user_hz"] == local["user_hz"] and set(snap["host"]) == set(local["host"])
    assert snap["procs"]["me0"] is not None
    assert {f"tree-{os.getpid()}", f"tree-{child.pid}"} <= set(snap["procs"])  # the tree: the root and below


def test_clock_shift_is_the_receivers_offset_minus_the_senders():
    clock = {"A": {"offset_ns": -5000, "uncertainty_ns": 40_000}, "B": {"offset_ns": 2000, "uncertainty_ns": 60_000}}
    assert clock_shift(clock, "A", "B") == (7000, 100_000)
    assert clock_shift(None, "A", "B") == (0, 0)


def test_a_lab_points_delay_and_rtt_window_are_corrected_by_the_clocks(tmp_path):
    """The captured point of test_baseline_matrix with a synthetic clock record added."""
    plain = tmp_path / "plain"
    shutil.copytree(FIXTURE, plain)
    row0, _ = analyse_point(plain)
    assert row0["owd_uncertainty_ms"] == 0.0  # one kernel clock
    lab = tmp_path / "lab"
    shutil.copytree(FIXTURE, lab)
    record = json.loads((lab / "point.json").read_text())
    record["clock"] = {
        "A": {"offset_ns": -300_000, "uncertainty_ns": 50_000},
        "B": {"offset_ns": 200_000, "uncertainty_ns": 70_000},
        "C": {"offset_ns": -300_000, "uncertainty_ns": 50_000},
    }
    (lab / "point.json").write_text(json.dumps(record))
    row, routers = analyse_point(lab)
    assert row["owd_median_ms"] == pytest.approx(row0["owd_median_ms"] - 0.5)
    assert row["owd_uncertainty_ms"] == pytest.approx(0.12)
    assert routers[0]["owd_median_ms"] == row["owd_median_ms"] and routers[0]["owd_uncertainty_ms"] == 0.12
    assert row["rtt_median_ms"] == row0["rtt_median_ms"]  # C and A on one clock: the same window
    # C's clock an hour ahead of A's: the generators' window moved onto C's clock holds no probe
    record["clock"]["C"]["offset_ns"] = 3600 * 10**9
    (lab / "point.json").write_text(json.dumps(record))
    row, _ = analyse_point(lab)
    assert row["rtt_median_ms"] is None


def test_a_lab_guest_senders_window_is_on_the_sinks_clock_and_a_containers_on_r1s(tmp_path):
    """ROLE=vm-tx on a lab (synthetic: the captured point's flow renamed): a guest's flow has no
    one-way delay and its window is B's sink span, moved onto C's clock by B's offset (the record
    has no "VM" offset: the guest's clock is its own); a container's flow is on R1's clock, whose
    offset the point records under its name."""
    point = tmp_path / "vm"
    shutil.copytree(FIXTURE, point)
    record = json.loads((point / "point.json").read_text())
    record["flows"][0]["from"] = "VM"
    zero = {"offset_ns": 0, "uncertainty_ns": 50_000}
    record["clock"] = {"A": zero, "B": zero, "C": zero, "R1": zero}
    (point / "point.json").write_text(json.dumps(record))
    row, _ = analyse_point(point)
    assert row["status"] == "ok" and row["owd_median_ms"] is None and row["rtt_median_ms"] is not None
    record["clock"]["B"] = {"offset_ns": 3600 * 10**9, "uncertainty_ns": 50_000}  # only B an hour off
    (point / "point.json").write_text(json.dumps(record))
    assert analyse_point(point)[0]["rtt_median_ms"] is None
    record["clock"]["A"] = record["clock"]["C"] = record["clock"]["B"]  # now B and C agree
    (point / "point.json").write_text(json.dumps(record))
    assert analyse_point(point)[0]["rtt_median_ms"] is not None
    record["flows"][0]["from"] = "CT"
    record["clock"] = {"CT": {"offset_ns": -300_000, "uncertainty_ns": 50_000}, "R1": zero,
                       "B": {"offset_ns": 200_000, "uncertainty_ns": 70_000}, "C": zero}  # fmt: skip
    (point / "point.json").write_text(json.dumps(record))
    ct, _ = analyse_point(point)
    plain = tmp_path / "plain"
    shutil.copytree(FIXTURE, plain)
    assert ct["owd_median_ms"] == pytest.approx(analyse_point(plain)[0]["owd_median_ms"] - 0.5)


@pytest.mark.skipif(os.geteuid() != 0, reason="creates a network namespace (root)")
def test_the_bare_routers_launcher_waits_for_both_ports_in_its_namespace_then_execs():
    from migrate.baseline.labnone import LAUNCH_SH, NETNS_MARK

    argv = ["unshare", "--net", "--", "sh", "-c", LAUNCH_SH, "vrmig-ns-launch", "10", "sh", "-c", "echo RAN $$"]
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout is not None and p.stdout.readline().strip() == NETNS_MARK  # unshare has run
        # as the router's ports are made: a veth whose inner end moves into the launcher's namespace
        port = ["type", "veth", "peer", "name"]
        subprocess.run(["ip", "link", "add", f"vt{p.pid}a", *port, "eth0", "netns", str(p.pid)], check=True)
        with pytest.raises(subprocess.TimeoutExpired):
            p.wait(0.5)  # eth1 is still missing
        subprocess.run(["ip", "link", "add", f"vt{p.pid}b", *port, "eth1", "netns", str(p.pid)], check=True)
        out, _ = p.communicate(timeout=10)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        for end in "ab":  # gone with the namespace, unless the test failed before it ended
            subprocess.run(["ip", "link", "del", f"vt{p.pid}{end}"], capture_output=True, check=False)
    assert p.returncode == 0 and out.strip() == f"RAN {p.pid}"  # exec'd: the same process, in that namespace
    quick = subprocess.run([*argv[:7], "1", "true"], capture_output=True, text=True, timeout=10)
    assert quick.returncode == 1 and quick.stdout.splitlines()[0] == NETNS_MARK
    assert "VRMIG-FAIL eth0/eth1 did not appear within 1 s" in quick.stdout
