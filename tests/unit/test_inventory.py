"""The testbed inventory: docs/lab.example.toml loads, the embedded testbed is an inventory, and
each kind of bad inventory gives one line naming the file, the place and the fix."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from migrate.testbed import inventory as inv
from migrate.testbed import topology as topo

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "lab.example.toml"


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "lab.toml"
    p.write_text(text)
    return p


def test_example_loads_with_every_role():
    i = inv.load(EXAMPLE)
    assert tuple(i.hosts) == inv.ROLES and i.name == "lab" and i.deploy_dir == "/var/lib/vrmig"
    a = i.host("A")
    assert (a.transport, a.ssh.host, a.ssh.port, a.ssh.user) == ("ssh", "198.19.128.2", 22, "root")
    assert a.ssh.key == Path("/etc/vrmig/lab/id_ed25519") and a.address(4) == "198.18.1.10"
    r1 = i.host("R1")
    assert r1.interfaces() == ["tapL", "tapR", "upL", "upR", "mig0"] and r1.migration_ipv4 == "198.19.255.1/30"
    assert r1.libvirt_uri.startswith("qemu+ssh://")
    assert i.router["L"].mac == "52:54:00:c6:12:01"


def test_embedded_matches_the_builders_topology():
    e = inv.embedded()
    assert all(h.transport == "local" and h.ssh is None for h in e.hosts.values())
    for h in topo.END_HOSTS:
        assert (e.host(h.role).ipv4, e.host(h.role).interface) == (h.ipv4, topo.HOST_IF)
    assert e.host("R2").migration_ipv4 == topo.MIGRATION_ADDR["R2"]
    assert e.host("R1").interfaces() == ["tapL", "tapR", "upL", "upR", topo.MIGRATION_IF]


BAD = [
    # (edit of the example text, expected fragment of the one-line message)
    (lambda t: t.replace('name = "lab"', 'name = "lab'), "not valid TOML"),
    (lambda t: t.replace("[hosts.D]", "[hosts.E]"), "hosts.E: unknown role"),
    (lambda t: t.replace("[hosts.D]", "[other.D]"), "unknown key 'other'"),
    (lambda t: t.replace('ipv4 = "198.18.2.11/24"', 'ipv4 = "198.18.2.10/24"'), "address 198.18.2.10 is also"),
    (lambda t: t.replace('ipv4 = "198.18.1.11/24"', 'ipv4 = "10.0.0.1/24"'), "outside the testbed ranges"),
    (lambda t: t.replace('ipv4 = "198.18.1.11/24"', 'ipv4 = "198.18.3.11/24"'), "not in the router port's subnet"),
    (
        lambda t: t.replace(
            'segment = "R"\ninterface = "eth0"\nipv4 = "198.18.2.10/24"',
            'segment = "L"\ninterface = "eth0"\nipv4 = "198.18.2.10/24"',
        ),
        "B is on segment R",
    ),
    (lambda t: t.replace('mac = "52:54:00:c6:12:02"', 'mac = "52:54:00:c6:12"'), "not a MAC address"),
    (lambda t: t.replace("version = 1", "version = 7"), "set version = 1"),
    (lambda t: t.replace('deploy_dir = "/var/lib/vrmig"', 'deploy_dir = "var/lib"'), "not an absolute directory"),
    (lambda t: t.replace('ssh = { host = "198.19.128.6" }', 'ssh = { host = "198.19.128.2" }'), "is also A's"),
    (lambda t: t.replace('ssh = { host = "198.19.128.6" }\n', ""), "says neither how to reach it"),
    (lambda t: t.replace("port = 22", "port = 70000"), "is not a TCP port"),
    (
        lambda t: t.replace('uplinks = { L = "upL", R = "upR" }\nbridges', 'uplinks = { L = "upL" }\nbridges', 1),
        "must name segments L and R",
    ),
    (lambda t: t.replace('interface = "eth0"', 'interface = "an-interface-name-too-long"', 1), "not an interface name"),
]


@pytest.mark.parametrize(("edit", "fragment"), BAD)
def test_bad_inventory_is_one_line_naming_file_and_fix(tmp_path, edit, fragment):
    text = EXAMPLE.read_text()
    bad = edit(text)
    assert bad != text, "the edit did not apply: the test would pass for the wrong reason"
    path = _write(tmp_path, bad)
    with pytest.raises(inv.InventoryError) as err:
        inv.load(path)
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith(str(path)) and fragment in msg, msg
    assert err.value.exit_code == 2


def test_missing_role_and_missing_file(tmp_path):
    text = EXAMPLE.read_text()
    cut = re.sub(r"\[hosts\.C\][^\[]*", "", text)
    with pytest.raises(inv.InventoryError, match=r"hosts\.C: missing"):
        inv.load(_write(tmp_path, cut))
    with pytest.raises(inv.InventoryError, match="no such inventory"):
        inv.load(tmp_path / "nope.toml")


def test_local_transport_and_relative_key_paths(tmp_path):
    text = EXAMPLE.read_text().replace('ssh = { host = "198.19.128.2" }', 'transport = "local"')
    text = text.replace('key = "/etc/vrmig/lab/id_ed25519"', 'key = "keys/id"')
    i = inv.load(_write(tmp_path, text))
    assert i.host("A").transport == "local" and i.host("A").ssh is None
    assert i.host("B").ssh.key == tmp_path.resolve() / "keys" / "id"
