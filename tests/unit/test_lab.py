"""The emulated lab's pure parts: management addressing, names, the inventory it writes (checked
against docs/lab.example.toml and the suite's loader), its state file and lab-down's refusals."""

from __future__ import annotations

import ipaddress
import json
import re
import tomllib
from pathlib import Path

import pytest

from migrate.campaigns.chaos import _prefix_of
from migrate.core import registry
from migrate.core.errors import ConfigError, TestbedError
from migrate.testbed import inventory, lab

REPO = Path(__file__).resolve().parents[2]


def test_mgmt_addresses_match_the_example_inventory():
    net = lab.mgmt_net(128)
    example = tomllib.loads((REPO / "docs/lab.example.toml").read_text())
    for role in lab.MGMT_ROLES:
        outer, inner = lab.mgmt_addresses(net, role)
        assert inner.split("/")[0] == example["hosts"][role]["ssh"]["host"]
        assert ipaddress.ip_interface(outer).network == ipaddress.ip_interface(inner).network
        assert ipaddress.ip_interface(inner).network.prefixlen == 30
    hosts = [lab.mgmt_addresses(net, r)[1] for r in lab.MGMT_ROLES]
    assert hosts == ["198.19.128.2/30", "198.19.128.6/30", "198.19.128.10/30", "198.19.128.14/30",
                     "198.19.128.18/30", "198.19.128.22/30"]  # fmt: skip
    assert lab.mgmt_addresses(lab.mgmt_net(129), "R2")[1] == "198.19.129.22/30"


def test_mgmt_nets_stay_in_the_benchmark_range_and_apart_from_the_migration_link():
    bench = ipaddress.ip_network("198.18.0.0/15")
    mig = ipaddress.ip_network("198.19.255.0/30")
    for o in range(lab.MGMT_FIRST_OCTET3, lab.MGMT_LAST_OCTET3 + 1):
        net = lab.mgmt_net(o)
        assert net.subnet_of(bench) and not net.overlaps(mig)


def test_pick_mgmt_net_skips_taken_and_overlapping():
    assert str(lab.pick_mgmt_net([], [])) == "198.19.128.0/24"
    assert str(lab.pick_mgmt_net(["198.19.128.0/24"], [])) == "198.19.129.0/24"
    used = [ipaddress.IPv4Interface("198.19.128.1/30"), ipaddress.IPv4Interface("198.19.129.77/24")]
    assert str(lab.pick_mgmt_net([], used)) == "198.19.130.0/24"
    wide = [ipaddress.IPv4Interface("198.19.0.1/16")]
    with pytest.raises(TestbedError, match="no free management"):
        lab.pick_mgmt_net([], wide)


def test_lab_prefixes_are_not_run_prefixes():
    for _ in range(50):
        p = lab.new_prefix()
        assert re.fullmatch(r"vl[0-9a-f]{6}", p)
        assert not registry.PREFIX_RE.search(f"{p}-A")
        assert _prefix_of(f"{p}-A") is None
        assert not any(rx.search(f"/run/vrmig-lab/x/hosts/A {p}-A") for rx in registry._MARK_RES)
        assert len(lab.root_ifname(p, "R2")) <= 15


@pytest.mark.parametrize("name", ["", "Lab", "a b", "-x", "a/b", "..", "x" * 41, "vm1a2b3c", "t-vm00aa11"])
def test_bad_names_are_refused(name):
    with pytest.raises(ConfigError):
        lab.check_name(name)


@pytest.mark.parametrize("d", ["var/lib/vrmig", "/", "/tmp", "/var/../etc/x"])
def test_bad_deploy_dirs_are_refused(d):
    with pytest.raises(ConfigError):
        lab.check_deploy_dir(d)


def _render(tmp_path: Path, name: str = "lab") -> Path:
    net = lab.mgmt_net(128)
    mgmt = {r: lab.mgmt_addresses(net, r)[1].split("/")[0] for r in lab.MGMT_ROLES}
    p = tmp_path / "lab.toml"
    p.write_text(lab.render_inventory(name, "/var/lib/vrmig", tmp_path / "id_ed25519", tmp_path / "known_hosts", mgmt))
    return p


def test_inventory_is_the_example_without_libvirt_uris(tmp_path):
    got = tomllib.loads(_render(tmp_path).read_text())
    want = tomllib.loads((REPO / "docs/lab.example.toml").read_text())
    for r in ("R1", "R2"):
        del want["hosts"][r]["libvirt_uri"], want["hosts"][r]["libvirt_peer_uri"]
    want["ssh"]["key"] = str(tmp_path / "id_ed25519")
    want["ssh"]["known_hosts"] = str(tmp_path / "known_hosts")
    assert got == want
    assert list(got["hosts"]) == list(want["hosts"])  # same order of roles


def test_inventory_loads_with_the_suites_loader(tmp_path):
    inv = inventory.load(_render(tmp_path, "t_1"))
    assert inv.name == "t_1"
    assert all(h.transport == "ssh" and h.ssh and h.ssh.key == tmp_path / "id_ed25519" for h in inv.hosts.values())
    assert inv.hosts["R1"].libvirt_uri is None


def test_toml_strings_round_trip():
    for v in ['a"b', "c:\\d", "é ü", "tab\there", "nl\nx"]:
        assert tomllib.loads(f"k = {lab.toml_str(v)}")["k"] == v


def _state(d: Path) -> lab.LabState:
    return lab.LabState("t", "vl000001", d, "/var/lib/vrmig", "198.19.128.0/24", namespaces=["vl000001-A"])


def test_state_round_trip_and_a_runs_state_is_not_a_lab(tmp_path):
    st = _state(tmp_path)
    st.save()
    back = lab.LabState.load(tmp_path)
    assert back == st
    run = tmp_path / "run"
    run.mkdir()
    (run / "state.json").write_text(json.dumps({"version": 2, "prefix": "vm000001", "namespaces": []}))
    assert lab.LabState.load(run) is None


def test_clean_stale_does_not_see_a_lab(tmp_path, monkeypatch):
    """A lab's owner (lab-up) is gone by design: the runs' clean_stale must not find its state."""
    monkeypatch.setattr(registry, "STATE_ROOT", tmp_path / "runs")
    monkeypatch.setattr(lab, "LAB_ROOT", tmp_path / "labs")
    (tmp_path / "runs").mkdir()
    d = lab.LAB_ROOT / "t"
    d.mkdir(parents=True)
    _state(d).save()
    assert not lab.LAB_ROOT.is_relative_to(registry.STATE_ROOT)
    assert registry.clean_stale() == []
    assert (d / "state.json").exists()
    assert [s.name for s in lab.all_labs()] == ["t"]


def test_default_lab_root_is_outside_the_runs_state_root():
    assert not lab.LAB_ROOT.is_relative_to(registry.STATE_ROOT)
    assert not registry.STATE_ROOT.is_relative_to(lab.LAB_ROOT)


def test_lab_down_refuses_what_is_not_a_lab_and_creates_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(lab, "LAB_ROOT", tmp_path / "labs")
    f = tmp_path / "inv.toml"
    f.write_text((REPO / "docs/lab.example.toml").read_text())
    for p in (f, tmp_path, tmp_path / "nope.toml"):
        with pytest.raises(lab.NotALab, match="not an emulated lab"):
            lab.lab_down(p)
    assert not lab.LAB_ROOT.exists()


def test_lab_down_of_a_removed_lab_is_a_no_op(tmp_path, monkeypatch):
    monkeypatch.setattr(lab, "LAB_ROOT", tmp_path / "labs")
    assert lab.lab_down(tmp_path / "gone" / "lab.toml") == (False, [])


def test_lab_down_exit_codes(tmp_path, monkeypatch, capsys):
    from migrate.cli.main import main

    monkeypatch.setattr(lab, "LAB_ROOT", tmp_path / "labs")
    assert main(["lab-down", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not an emulated lab" in err[0]
    assert main(["lab-down", str(tmp_path / "gone" / "lab.toml")]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("nothing to remove")


def test_lab_up_refuses_bad_input_before_touching_anything(tmp_path, monkeypatch, capsys):
    from migrate.cli.main import main

    monkeypatch.setattr(lab, "LAB_ROOT", tmp_path / "labs")
    assert main(["lab-up", "--name", "Bad Name"]) == 2
    assert main(["lab-up", "--deploy-dir", "relative/dir"]) == 2
    assert main(["lab-up", "--dir", str(tmp_path / "vm00aa11")]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 3
    assert not lab.LAB_ROOT.exists()
