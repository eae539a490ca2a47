"""PEERING on a lab (TESTBED=): what a lab run takes, the peer hosts' loopback holder, the
peers' BIRD from the bird image on the hosts, and the peers' records put on the orchestrator's
clock.  The run itself is tests/integration/test_lab_migrate.py's."""

from __future__ import annotations

import os
import signal
import subprocess
import uuid
from pathlib import Path, PurePosixPath

import numpy as np
import pytest

from analysis.metrics.clock import peer_records_on_orchestrator_clock
from analysis.metrics.control_plane import LogEvent
from migrate.core.errors import ConfigError
from migrate.experiment.peering import LAB_LOOPBACK_SH, _stop_rank, bird_argv, bird_paths
from migrate.experiment.place import lab_supports
from migrate.labs import provision
from migrate.model.scenario import Scenario
from migrate.testbed.inventory import load

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "lab.example.toml"


def test_a_lab_takes_bird_peers_with_paper_004s_addresses_only(tmp_path):
    inv = load(EXAMPLE)
    lab_supports(Scenario(peering="bgp,bfd"), inv)
    lab_supports(Scenario(peering="ospf"), inv)
    with pytest.raises(ConfigError, match="BIRD peers only"):
        lab_supports(Scenario(peering="bgp", peer_daemon="frr"), inv)
    with pytest.raises(ConfigError, match="no CHURN"):
        lab_supports(Scenario(peering="bgp", churn_rps=100), inv)
    moved = tmp_path / "lab.toml"
    moved.write_text(EXAMPLE.read_text().replace('ipv4 = "198.18.1.10/24"', 'ipv4 = "198.18.1.20/24"', 1))
    with pytest.raises(ConfigError, match="paper 004's addresses"):
        lab_supports(Scenario(peering="bgp"), load(moved))
    lab_supports(Scenario(), load(moved))  # without PEERING the addresses are the lab's own


def test_lab_bird_runs_from_the_image_unpacked_under_the_deploy_dir():
    root = PurePosixPath("/var/lib/vrmig/peers/bird")
    loader, bird, libs = bird_paths(root)
    argv = bird_argv(root, "/r/peer-A.conf", "/r/bird-A.ctl")
    assert argv[:3] == [str(loader), "--library-path", ":".join(map(str, libs))]
    assert argv[3:] == [str(bird), "-f", "-c", "/r/peer-A.conf", "-s", "/r/bird-A.ctl"]
    assert str(bird) == "/var/lib/vrmig/peers/bird/usr/sbin/bird"


def test_peers_stop_before_their_captures_and_the_loopback_address_goes_last():
    whats = ["loopback-A", "capture-A", "loopback-B", "capture-B", "peer-A", "peer-B"]
    assert sorted(whats, key=_stop_rank) == ["peer-A", "peer-B", "capture-A", "capture-B", "loopback-A", "loopback-B"]


def test_hosts_setup_gives_the_peer_hosts_the_bird_rootfs():
    inv = load(EXAMPLE)
    images = [{"profile": "frr", "src": "/c/frr/vmlinuz", "name": "vmlinuz"}]
    ends = provision.ansible_inventory(inv, images, peer_bird="/c/lab/container-bird.tar")["all"]["children"][
        "end_hosts"
    ]
    assert ends["vars"] == {"vrmig_peer_bird": "/c/lab/container-bird.tar", "vrmig_peer_roles": ["A", "B"]}
    none = provision.ansible_inventory(inv, images)["all"]["children"]["end_hosts"]["vars"]
    assert none["vrmig_peer_bird"] is None
    playbook = provision.PLAYBOOK.read_text()
    assert "end_hosts: [irtt, tcpdump]" in playbook and "peers/bird" in playbook


def test_peer_records_lose_their_hosts_offsets_synthetic():
    # synthetic records: A's clock 2 ms ahead of the orchestrator, B's 1.5 ms behind, no
    # offset measured for a third peer
    logs = {
        "A": [LogEvent(1_000_000_000, "STATE", "bgp1", "Established")],
        "B": [LogEvent(2_000_000_000, "STATE", "bgp1", "Down")],
        "X": [LogEvent(5, "STATE", "bgp1", "Down")],
    }
    caps = {"A": (np.array([10_000_000, 20_000_000], dtype=np.int64), np.array(["a", "b"], dtype=object),
                  np.array(["bgp", "bfd"], dtype=object))}  # fmt: skip
    out_logs, out_caps, left = peer_records_on_orchestrator_clock(logs, caps, {"A": 2_000_000, "B": -1_500_000})
    assert out_logs["A"][0].t_ns == 998_000_000 and out_logs["B"][0].t_ns == 2_001_500_000
    assert out_logs["X"][0].t_ns == 5 and left == ["X"]
    assert out_caps["A"][0].tolist() == [8_000_000, 18_000_000] and out_caps["A"][2].tolist() == ["bgp", "bfd"]
    assert logs["A"][0].t_ns == 1_000_000_000  # the input is left as it was


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (a network namespace)")
def test_the_lab_loopback_holder_adds_the_address_and_removes_it_when_stopped():
    # as the guard stops it: SIGTERM to its process group
    ns = f"vrmig-ut-{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        p = subprocess.Popen(
            ["ip", "netns", "exec", ns, "sh", "-c", LAB_LOOPBACK_SH, "sh", "198.18.4.10/32"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
        )  # fmt: skip
        try:
            assert p.stderr.readline() == b"LOOPBACK-READY\n"
            shown = subprocess.run(["ip", "-n", ns, "-o", "addr", "show", "dev", "lo"], capture_output=True, text=True)
            assert "198.18.4.10/32" in shown.stdout
            p.stdout.close()  # the channel gone: the holder must not die writing to it
            p.stderr.close()
            os.killpg(p.pid, signal.SIGTERM)
            assert p.wait(10) == 0
        finally:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        shown = subprocess.run(["ip", "-n", ns, "-o", "addr", "show", "dev", "lo"], capture_output=True, text=True)
        assert "198.18.4.10" not in shown.stdout
        left = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split()
        assert left == []
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=False)
