"""The emulated lab's pure parts: management addressing, names, the inventory it writes (checked
against docs/lab.example.toml and the suite's loader), its state file and lab-down's refusals."""

from __future__ import annotations

import ipaddress
import json
import re
import subprocess
import tomllib
import urllib.parse
from pathlib import Path

import pytest

from migrate.campaigns.chaos import _prefix_of
from migrate.core import registry
from migrate.core.errors import ConfigError, TestbedError
from migrate.labs import emulated as lab
from migrate.testbed import inventory

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


def _mgmt() -> dict[str, str]:
    net = lab.mgmt_net(128)
    return {r: lab.mgmt_addresses(net, r)[1].split("/")[0] for r in lab.MGMT_ROLES}


def _libvirt(d: Path) -> dict[str, dict[str, str]]:
    return {
        r: {
            "uri": lab.libvirt_uri(d, d / "id_ed25519", _mgmt()[r]),
            "peer_uri": lab.libvirt_peer_uri(r),
            "tls": str(d / "pki" / r),
        }
        for r in ("R1", "R2")
    }


def _render(tmp_path: Path, name: str = "lab", libvirt: bool = True) -> Path:
    p = tmp_path / "lab.toml"
    key, kh = tmp_path / "id_ed25519", tmp_path / "known_hosts"
    lv = _libvirt(tmp_path) if libvirt else None
    p.write_text(lab.render_inventory(name, "/var/lib/vrmig", key, kh, _mgmt(), libvirt=lv))
    return p


def test_inventory_is_the_example_with_the_labs_own_libvirt_uris(tmp_path):
    got = tomllib.loads(_render(tmp_path).read_text())
    want = tomllib.loads((REPO / "docs/lab.example.toml").read_text())
    want["ssh"]["key"] = str(tmp_path / "id_ed25519")
    want["ssh"]["known_hosts"] = str(tmp_path / "known_hosts")
    for r in ("R1", "R2"):
        w, g = want["hosts"][r], got["hosts"][r]
        assert g["libvirt_peer_uri"] == w["libvirt_peer_uri"]  # qemu+tls:// on its own migration address
        assert g["libvirt_uri"].split("?")[0] == w["libvirt_uri"].split("?")[0]  # qemu+ssh://root@<mgmt>/system
        w["libvirt_uri"] = g["libvirt_uri"]
        assert w["libvirt_tls"] == f"/etc/vrmig/lab/pki/{r}" and g["libvirt_tls"] == str(tmp_path / "pki" / r)
        w["libvirt_tls"] = g["libvirt_tls"]
    assert got == want
    assert list(got["hosts"]) == list(want["hosts"])  # same order of roles


def test_inventory_without_libvirt_has_no_libvirt_keys(tmp_path):
    got = tomllib.loads(_render(tmp_path, libvirt=False).read_text())
    assert not [k for h in got["hosts"].values() for k in h if k.startswith("libvirt")]


def test_inventory_loads_with_the_suites_loader(tmp_path):
    inv = inventory.load(_render(tmp_path, "t_1"))
    assert inv.name == "t_1"
    assert all(h.transport == "ssh" and h.ssh and h.ssh.key == tmp_path / "id_ed25519" for h in inv.hosts.values())
    assert inv.hosts["R1"].libvirt_uri == _libvirt(tmp_path)["R1"]["uri"]
    assert inv.hosts["R2"].libvirt_peer_uri == "qemu+tls://198.19.255.2/system?pkipath=/etc/libvirt/pki"


def test_libvirt_uri_checks_host_keys_with_the_labs_known_hosts(tmp_path):
    """libvirt's ssh transport has no known_hosts parameter: the URI names the lab's ssh wrapper
    (command=), which finds the lab's known_hosts next to itself and checks host keys strictly."""
    uri = urllib.parse.urlsplit(lab.libvirt_uri(tmp_path, tmp_path / "id_ed25519", "198.19.128.18"))
    assert (uri.scheme, uri.username, uri.hostname, uri.path) == ("qemu+ssh", "root", "198.19.128.18", "/system")
    q = dict(urllib.parse.parse_qsl(uri.query, strict_parsing=True))
    assert q == {"command": str(tmp_path / lab.LIBVIRT_SSH), "keyfile": str(tmp_path / "id_ed25519"),
                 "no_verify": "0", "no_tty": "1"}  # fmt: skip
    script = lab.LIBVIRT_SSH_SCRIPT
    assert script.startswith("#!/bin/sh\n")
    assert "StrictHostKeyChecking=yes" in script and 'UserKnownHostsFile="$d/known_hosts"' in script
    assert "GlobalKnownHostsFile=/dev/null" in script and "BatchMode=yes" in script
    assert "StrictHostKeyChecking=no" not in script and '"$@"' in script


def test_libvirt_ssh_wrapper_passes_libvirts_arguments_through(tmp_path):
    """Run the wrapper with a stand-in ssh first on PATH: it adds the lab's options (known_hosts
    next to the wrapper) and passes libvirt's argv unchanged."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "ssh").write_text('#!/bin/sh\nfor a in "$@"; do printf "%s\\n" "$a"; done\n')
    (fake / "ssh").chmod(0o755)
    wrapper = tmp_path / "lab dir" / lab.LIBVIRT_SSH
    wrapper.parent.mkdir()
    wrapper.write_text(lab.LIBVIRT_SSH_SCRIPT)
    wrapper.chmod(0o700)
    argv = ["-l", "root", "-i", "/k", "-T", "-e", "none", "--", "198.19.128.18", "sh", "-c", "a 'b' $c"]
    env = {"PATH": f"{fake}:/usr/bin:/bin"}
    out = subprocess.run([str(wrapper), *argv], capture_output=True, text=True, env=env, check=True).stdout
    got = out.splitlines()
    assert got[-len(argv) :] == argv
    assert f"UserKnownHostsFile={tmp_path}/lab dir/known_hosts" in got
    assert got[:2] == ["-F", "/dev/null"]


def test_libvirt_peer_uris_are_on_the_migration_link():
    assert lab.libvirt_peer_uri("R1") == "qemu+tls://198.19.255.1/system?pkipath=/etc/libvirt/pki"
    assert lab.libvirt_peer_uri("R2") == "qemu+tls://198.19.255.2/system?pkipath=/etc/libvirt/pki"


@pytest.mark.parametrize("d", ["/run/vrmig-lab/a b", "/tmp/x%d", '/tmp/q"', "/tmp/a&b", "/tmp/p+q", "/tmp/x\ny"])
def test_lab_dirs_that_ssh_options_or_uris_would_mangle_are_refused(d):
    with pytest.raises(ConfigError, match="LAB_DIR"):
        lab.check_lab_dir(Path(d))
    lab.check_lab_dir(Path("/run/vrmig-lab/it_0a-b.c"))


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
    assert main(["lab-up", "--dir", str(tmp_path / "a b")]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 4
    assert not lab.LAB_ROOT.exists()
