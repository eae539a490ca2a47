"""Router profile files (routers.profile_file, migrate.model.router_config): the strict loader's
one-line errors, the built-in profiles, the example's cloud-init template rendered from the
testbed, and that loading neither crashes on arbitrary TOML nor runs anything."""

from __future__ import annotations

import copy
import os
import socket
import subprocess
import tarfile
import tempfile
from pathlib import Path

import pytest
import tomli_w
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from migrate.core.errors import ConfigError
from migrate.model.router_config import testbed_context as context_of  # not test_*: pytest would collect it
from migrate.model.scenario import Scenario
from migrate.testbed import topology as topo
from routers import profiles
from routers.errors import ProfileFileError, RouterError
from routers.profile_file import (
    GPT_SIGNATURE,
    QCOW2_MAGIC,
    TABLES,
    RouterProfile,
    load_profile,
    render_config,
    resolve_router,
)

REPO = Path(__file__).resolve().parents[2]
PROFILES = REPO / "profiles"
EXAMPLE = PROFILES / "debian-frr-cloudinit.toml"

BASE: dict = {
    "router": {"name": "debian-frr", "kind": "vm", "software": "frr", "version": "10.3"},
    "image": {"disk": "disk.qcow2", "format": "qcow2", "firmware": "bios", "recipe": "debian-frr-cloudinit"},
    "hardware": {"mem_mib": 512, "vcpus": 1, "nic": "virtio", "nics": ["left", "right"]},
    "config": {"method": "nocloud", "template": "router.j2"},
    "readiness": {"console_marker": "CONFIGURED", "timeout_s": 300},
    "state": {"routes": "vtysh -c 'show ip route summary'"},
}
TEMPLATE = "{% for nic in interfaces %}{{ nic.role }} {{ nic.mac }} {{ nic.ipv4 }}\n{% endfor %}"


def qcow2_bytes() -> bytes:
    return QCOW2_MAGIC + bytes(1020)


def mbr_bytes() -> bytes:
    return bytes(510) + b"\x55\xaa" + bytes(512)


def gpt_bytes() -> bytes:
    return bytes(512) + GPT_SIGNATURE + bytes(504)


def write_profile(folder: Path, data: dict, name: str = "router.toml") -> Path:
    """``data`` as a profile in ``folder`` beside a qcow2 disk.qcow2 and a template router.j2."""
    (folder / "disk.qcow2").write_bytes(qcow2_bytes())
    (folder / "router.j2").write_text(TEMPLATE)
    path = folder / name
    path.write_text(tomli_w.dumps(data))
    return path


def edited(**changes: dict | None) -> dict:
    """BASE with tables replaced, merged (a dict; a None value deletes the field) or removed (None)."""
    data = copy.deepcopy(BASE)
    for table, change in changes.items():
        if change is None:
            data.pop(table, None)
            continue
        merged = data.setdefault(table, {})
        for key, value in change.items():
            if value is None:
                merged.pop(key, None)
            else:
                merged[key] = value
    return data


def load_error(path: Path) -> str:
    with pytest.raises(ProfileFileError) as info:
        load_profile(path)
    msg = str(info.value)
    assert "\n" not in msg and msg.startswith(str(path) + ":"), msg
    return msg


def test_a_valid_profile_loads(tmp_path):
    prof = load_profile(write_profile(tmp_path, BASE))
    assert isinstance(prof, RouterProfile)
    assert prof.name == "debian-frr" and prof.router.kind == "vm" and prof.router.version == "10.3"
    assert prof.image.source == "disk" and prof.image.disk == tmp_path / "disk.qcow2"
    assert prof.image.format == "qcow2" and prof.image.firmware == "bios"
    assert prof.hardware.mem_mib == 512 and prof.hardware.nics == ("left", "right")
    assert prof.config.method == "nocloud" and prof.config.template == tmp_path / "router.j2"
    assert prof.readiness.timeout_s == 300.0 and prof.state.routes.startswith("vtysh")


def test_defaults_of_the_optional_tables(tmp_path):
    data = edited(hardware=None, readiness=None, state=None)
    data["image"] = {"disk": "disk.qcow2"}
    prof = load_profile(write_profile(tmp_path, data))
    assert prof.image.format == "qcow2" and prof.image.firmware == "bios"
    assert prof.hardware.nics == ("left", "right") and prof.hardware.mem_mib is None
    assert prof.readiness.console_marker == "" and prof.readiness.timeout_s is None


#: (name, changes, extra files, what the message must contain)
BAD = [
    ("missing field", {"router": {"name": None}}, {}, ["[router] name", "missing"]),
    ("missing kind", {"router": {"kind": None}}, {}, ["[router] kind", "vm, container"]),
    ("missing table", {"config": None}, {}, ["[config]", "missing table"]),
    ("unknown table", {"extras": {"x": 1}}, {}, ["[extras]", "unknown table", "[hardware]"]),
    ("unknown field", {"hardware": {"colour": "red"}}, {}, ["[hardware] colour", "unknown field", "mem_mib"]),
    ("wrong type int", {"hardware": {"vcpus": "2"}}, {}, ["[hardware] vcpus", "a string"]),
    ("bool for int", {"hardware": {"mem_mib": True}}, {}, ["[hardware] mem_mib", "a boolean"]),
    ("out of range", {"hardware": {"mem_mib": 16}}, {}, ["[hardware] mem_mib", "64 to 16384"]),
    ("wrong type str", {"router": {"version": 10.3}}, {}, ["[router] version", "a number"]),
    ("bad choice", {"router": {"software": "quagga"}}, {}, ["[router] software", "openbgpd"]),
    ("bad name", {"router": {"name": "my router"}}, {}, ["[router] name"]),
    ("table not a table", {}, {"toml": 'router = "x"\n'}, ["[router]"]),
    ("image missing", {"image": {"disk": "nowhere.qcow2"}}, {}, ["[image] disk", "nowhere.qcow2", "routers disk"]),
    ("not qcow2", {"image": {"disk": "zeros.img"}}, {"zeros.img": bytes(1024)}, ["[image] disk", "qcow2"]),
    ("raw that is qcow2", {"image": {"format": "raw"}}, {}, ["[image] disk", "raw", 'format = "qcow2"']),
    ("qcow2 that is raw", {"image": {"disk": "mbr.img"}}, {"mbr.img": mbr_bytes()}, ["[image] disk", '"raw"']),
    ("short raw", {"image": {"disk": "t.img", "format": "raw"}}, {"t.img": b"x"}, ["[image] disk", "0x55AA"]),
    ("two sources", {"image": {"builtin": "frr"}}, {}, ["[image]", "exactly one source", "builtin, disk"]),
    ("no source", {"image": {"disk": None}}, {}, ["[image]", "has none"]),
    ("nics without right", {"hardware": {"nics": ["left", "mgmt"]}}, {}, ["[hardware] nics", "'right'"]),
    ("nics two left", {"hardware": {"nics": ["left", "left", "right"]}}, {}, ["[hardware] nics", "2 'left'"]),
    ("nics unknown role", {"hardware": {"nics": ["left", "right", "wan"]}}, {}, ["[hardware] nics", "'wan'"]),
    ("nics not an array", {"hardware": {"nics": "left,right"}}, {}, ["[hardware] nics", "array"]),
    ("nic count", {"hardware": {"nic_count": 3}}, {}, ["[hardware] nic_count", "3"]),
    ("disk for a container", {"router": {"kind": "container"}}, {}, ["[image] disk", "container", "oci"]),
    (
        "oci for a vm",
        {"image": {"disk": None, "format": None, "firmware": None, "oci": "layout:latest"}},
        {},
        ["[image] oci", "'vm'"],
    ),
    ("format without disk", {"image": {"disk": None, "builtin": "frr"}}, {}, ["[image] format", "only a disk"]),
    (
        "cmdline without builtin",
        {"config": {"method": "cmdline", "template": None}},
        {},
        ["[config] method", "builtin"],
    ),
    ("template missing", {"config": {"template": "gone.j2"}}, {}, ["[config] template", "gone.j2"]),
    ("template absent", {"config": {"template": None}}, {}, ["[config] template", "missing"]),
    (
        "template syntax",
        {"config": {"template": "bad.j2"}},
        {"bad.j2": "a\n{% if x %}\n"},
        ["bad.j2:", "[config] template"],
    ),
    ("console field elsewhere", {"config": {"login": "root"}}, {}, ["[config] login", "'console'"]),
    ("console without login", {"config": {"method": "console"}}, {}, ["[config] login", "missing"]),
    ("errors elsewhere", {"config": {"errors": ["x"]}}, {}, ["[config] errors", "'console'"]),
    (
        "errors not a regex",
        {"config": {"method": "console", "login": "root", "errors": ["(unclosed"]}},
        {},
        ["[config] errors", "'(unclosed'", "not a regular expression"],
    ),
    (
        "errors not a list",
        {"config": {"method": "console", "login": "root", "errors": "failed"}},
        {},
        ["[config] errors", "array of regular expressions"],
    ),
    (
        "ssh without mgmt",
        {"config": {"method": "ssh", "user": "root", "key": "router.j2"}},
        {},
        ["[hardware] nics", "mgmt"],
    ),
    ("timeout", {"readiness": {"timeout_s": -1}}, {}, ["[readiness] timeout_s"]),
    ("toml syntax", {}, {"toml": "[router\nname = 1\n"}, ["not valid TOML", "line 1"]),
    ("not utf-8", {}, {"toml": b"\xff\xfe"}, ["not UTF-8"]),
]


@pytest.mark.parametrize("changes,files,wants", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_input_is_one_line_naming_the_field(tmp_path, changes, files, wants):
    path = write_profile(tmp_path, edited(**changes))
    for name, content in files.items():
        target = path if name == "toml" else tmp_path / name
        target.write_bytes(content if isinstance(content, bytes) else content.encode())
    msg = load_error(path)
    for want in wants:
        assert want in msg, msg


def test_the_error_exits_2_as_bad_input():
    err = ProfileFileError("x")
    assert isinstance(err, RouterError) and isinstance(err, ConfigError) and err.exit_code == 2


def test_an_unreadable_profile(tmp_path):
    msg = load_error(tmp_path / "absent.toml")
    assert "cannot read the router profile" in msg


def test_builtin_profile_checks(tmp_path):
    def with_builtin(name: str, **router) -> Path:
        data = edited(router=router, hardware={"mem_mib": None}, config={"method": "cmdline", "template": None})
        data["image"] = {"builtin": name}
        return write_profile(tmp_path, data)

    assert load_profile(with_builtin("frr@8.4", version="8.4")).image.builtin == "frr@8.4"
    assert "[image] builtin" in load_error(with_builtin("quagga"))
    assert "software = 'frr'" in load_error(with_builtin("bird", version=None))
    assert "[image] builtin" in load_error(with_builtin("frr@8.4", version="10.3"))
    data = edited(hardware={"nics": ["left", "right", "mgmt"]}, config={"method": "cmdline", "template": None})
    data["image"] = {"builtin": "frr"}
    assert "[hardware] nics" in load_error(write_profile(tmp_path, data))
    data["hardware"]["nics"] = ["right", "left"]
    assert "eth0 left" in load_error(write_profile(tmp_path, data))
    data = edited(config={"method": "nocloud"})
    data["image"] = {"builtin": "frr"}
    assert "[config] method" in load_error(write_profile(tmp_path, data))


def test_other_image_sources(tmp_path):
    (tmp_path / "gpt.img").write_bytes(gpt_bytes())
    (tmp_path / "mbr.img").write_bytes(mbr_bytes())
    for disk in ("gpt.img", "mbr.img"):
        data = edited(image={"disk": disk, "format": "raw", "firmware": "uefi"})
        assert load_profile(write_profile(tmp_path, data)).image.format == "raw"
    layout = tmp_path / "layout"
    layout.mkdir()
    (layout / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
    (layout / "index.json").write_text("{}")
    ct = {"router": {"kind": "container"}, "hardware": {"nic": None, "vcpus": None}, "config": {"method": "console"}}
    data = edited(**ct)
    data["image"] = {"oci": "layout:v1"}
    data["config"]["login"] = "root"
    prof = load_profile(write_profile(tmp_path, data))
    assert prof.image.oci == layout and prof.image.oci_tag == "v1" and prof.config.login == "root"
    data["image"] = {"oci": "nolayout"}
    assert "[image] oci" in load_error(write_profile(tmp_path, data))
    with tarfile.open(tmp_path / "router.tar", "w") as tar:
        tar.add(layout / "index.json", arcname="manifest.json")
    data["image"] = {"archive": "router.tar"}
    assert load_profile(write_profile(tmp_path, data)).image.archive == tmp_path / "router.tar"
    data["image"] = {"archive": "router.j2"}
    assert "[image] archive" in load_error(write_profile(tmp_path, data))
    data = edited(**ct)
    data["image"] = {"oci": "layout"}
    data["hardware"]["nic"] = "e1000"
    assert "[hardware] nic" in load_error(write_profile(tmp_path, data))


def test_ssh_method_with_a_mgmt_nic(tmp_path):
    (tmp_path / "id").write_text("not a real key")
    data = edited(hardware={"nics": ["mgmt", "left", "right"]}, config={"method": "ssh", "user": "root", "key": "id"})
    prof = load_profile(write_profile(tmp_path, data))
    assert prof.config.key == tmp_path / "id" and prof.hardware.nic_index("left") == 1
    data["config"]["key"] = "absent"
    assert "[config] key" in load_error(write_profile(tmp_path, data))


def test_check_image_false_skips_only_the_image(tmp_path):
    data = edited(image={"disk": "later.qcow2"})
    prof = load_profile(write_profile(tmp_path, data), check_image=False)
    assert prof.image.disk == tmp_path / "later.qcow2"
    data["config"]["template"] = "gone.j2"
    with pytest.raises(ProfileFileError, match=r"\[config\] template"):
        load_profile(write_profile(tmp_path, data), check_image=False)


@pytest.mark.parametrize("name", ["frr", "bird"])
def test_the_builtin_profile_files_load(name):
    prof = load_profile(PROFILES / f"{name}.toml")
    assert prof.name == name and prof.image.builtin == name and prof.config.method == "cmdline"
    assert prof.readiness.console_marker == "VRMIG-READY" and prof.hardware.nics == ("left", "right")
    assert profiles.get(prof.image.builtin).family == prof.router.software
    with pytest.raises(ProfileFileError, match="renders no template"):
        render_config(prof, context_of(prof))


@pytest.fixture
def example(monkeypatch, tmp_path) -> RouterProfile:
    """The example profile, with its disk (built elsewhere) faked under a temporary HOME."""
    monkeypatch.setenv("HOME", str(tmp_path))
    disk = tmp_path / ".cache/vrmig/images/debian-frr-cloudinit/disk.qcow2"
    disk.parent.mkdir(parents=True)
    disk.write_bytes(qcow2_bytes())
    prof = load_profile(EXAMPLE)
    assert prof.image.disk == disk
    return prof


def test_the_example_needs_its_disk(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    msg = load_error(EXAMPLE)
    assert "[image] disk" in msg and "python -m routers disk debian-frr-cloudinit" in msg


def test_the_example_renders_without_peering(example):
    out = render_config(example, context_of(example, Scenario()))
    assert out.startswith("#cloud-config\n")
    for port in topo.ROUTER_PORTS:
        assert port.mac in out and f"ip address {port.ipv4}" in out and f"ipv6 address {port.ipv6}" in out
    assert "net.ipv4.ip_forward = 1" in out and "net.ipv6.conf.all.forwarding = 1" in out
    assert "router bgp" not in out and "router ospf" not in out and "bfd" not in out
    assert "systemctl, restart, frr" in out
    assert out.rstrip().splitlines()[-1].endswith("""echo 'VRMIG-ROUTER-CONFIGURED router=debian-frr' > /dev/ttyS0"]""")


def test_the_example_renders_with_bgp_and_bfd(example):
    out = render_config(example, context_of(example, Scenario(peering="bgp,bfd", bgp_hold_s=6)))
    assert "router bgp 65000" in out and "bgp router-id 198.18.1.1" in out and "timers bgp 2 6" in out
    for addr, asn in (("198.18.1.10", 65001), ("198.18.2.10", 65002)):
        assert f"neighbor {addr} remote-as {asn}" in out and f"neighbor {addr} bfd profile vrmig" in out
    assert "receive-interval 50" in out and "detect-multiplier 3" in out
    assert "s/^bgpd=.*/bgpd=yes/" in out and "s/^bfdd=.*/bfdd=yes/" in out and "ospfd=yes" not in out
    assert "router ospf" not in out


def test_the_context_follows_the_nic_order_and_peering(tmp_path):
    data = edited(hardware={"nics": ["right", "mgmt", "left"]})
    prof = load_profile(write_profile(tmp_path, data))
    v = context_of(prof, Scenario(peering="ospf", ospf_dead_s=8)).variables()
    assert [i["role"] for i in v["interfaces"]] == ["right", "left"]
    assert v["left"]["index"] == 2 and v["right"]["index"] == 0 and v["mgmt"] == {"index": 1}
    assert v["left"]["mac"] == topo.router_port("L").mac and v["left"]["ipv4_prefixlen"] == 24
    assert [h["role"] for h in v["right"]["hosts"]] == ["B", "D"] and v["right"]["hosts"][0][
        "ipv4_address"
    ] == "198.18.2.10"
    assert v["peering"]["ospf"] and not v["peering"]["bgp"] and v["peering"]["ospf_hello_s"] == 2
    assert [n["interface"] for n in v["peering"]["neighbours"]] == ["left", "right"]
    assert v["static_routes"] == [] and v["router"]["hostname"] == "debian-frr"
    assert context_of(prof, Scenario()).variables()["peering"] is None
    assert render_config(prof, context_of(prof)) == (
        "right 52:54:00:c6:12:02 198.18.2.1/24\nleft 52:54:00:c6:12:01 198.18.1.1/24\n"
    )


def test_a_render_error_names_the_template_line(tmp_path):
    prof = load_profile(write_profile(tmp_path, BASE))  # loading compiles, never renders
    (tmp_path / "router.j2").write_text("one\n{{ left.mac }}\n{{ peering.asn }}\n")
    with pytest.raises(ProfileFileError) as info:
        render_config(prof, context_of(prof))
    msg = str(info.value)
    assert msg.startswith(f"{tmp_path / 'router.j2'}:3: ") and "asn" in msg and "\n" not in msg
    (tmp_path / "router.j2").write_text("{{ nowhere }}")
    with pytest.raises(ProfileFileError, match=r"router\.j2:1: 'nowhere' is undefined"):
        render_config(prof, context_of(prof))


def test_resolve_router():
    assert resolve_router("frr") == "frr" and resolve_router("frr@8.4") == "frr@8.4"
    assert resolve_router("router.toml") == Path("router.toml")
    assert resolve_router("images/mine") == Path("images/mine")


def test_loading_and_rendering_run_nothing(monkeypatch, tmp_path):
    calls: list[tuple] = []

    def refuse(*a, **_k):
        calls.append(a)
        raise AssertionError("the profile loader started a process or opened a socket")

    for name in ("Popen", "run", "call", "check_output"):
        monkeypatch.setattr(subprocess, name, refuse)
    for name in ("system", "fork", "execv", "execve", "execvp", "posix_spawn", "posix_spawnp", "popen"):
        monkeypatch.setattr(os, name, refuse)
    monkeypatch.setattr(socket, "socket", refuse)
    for name in ("frr", "bird"):
        load_profile(PROFILES / f"{name}.toml")
    (tmp_path / "router.j2").write_text("{{ left.mac }}")
    prof = load_profile(write_profile(tmp_path, BASE))
    # a template that would call os.system is refused by the sandbox, not run
    (tmp_path / "router.j2").write_text("{{ cycler.__init__.__globals__.os.system('true') }}")
    with pytest.raises(ProfileFileError, match="unsafe"):
        render_config(prof, context_of(prof))
    assert calls == []


# ---------------------------------------------------------------------------- random input

_scalars = st.one_of(
    st.text(max_size=12),
    st.sampled_from(["~nobody-here/x", "~/x", "/", ".", "disk.qcow2", "router.j2", "frr", "vm", "\x00"]),
    st.integers(-(2**40), 2**40),
    st.floats(allow_nan=False),
    st.booleans(),
)
_values = st.one_of(
    _scalars, st.lists(_scalars, max_size=4), st.dictionaries(st.text(max_size=6), _scalars, max_size=3)
)
_field_names = st.one_of(st.sampled_from(sorted({f for fs in TABLES.values() for f in fs})), st.text(max_size=8))
_tables = st.dictionaries(_field_names, _values, max_size=8)
_documents = st.dictionaries(
    st.one_of(st.sampled_from(list(TABLES)), st.text(max_size=8)), st.one_of(_tables, _scalars), max_size=7
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=_documents, base=st.sampled_from([None, "router", "image", "config"]))
def test_random_toml_gives_a_profile_or_one_profile_error(doc, base):
    if base is not None:  # start from a valid profile so that the deeper checks are reached too
        merged = copy.deepcopy(BASE)
        if isinstance(doc.get(base), dict):
            merged[base].update(doc[base])
        doc = {**merged, **{k: v for k, v in doc.items() if k != base}}
    with tempfile.TemporaryDirectory(prefix="vrmig-profile-") as d:
        path = write_profile(Path(d), doc)
        try:
            prof = load_profile(path)
        except ProfileFileError as err:
            assert "\n" not in str(err) and str(err).startswith(str(path) + ":")
        else:
            assert isinstance(prof, RouterProfile)


def _container(tmp_path: Path, **config: object) -> dict:
    """A container profile on an (empty) OCI layout in ``tmp_path`` with ``config`` merged in."""
    layout = tmp_path / "layout"
    layout.mkdir(exist_ok=True)
    (layout / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
    (layout / "index.json").write_text("{}")
    data = edited(router={"kind": "container"}, hardware={"nic": None, "vcpus": None, "mem_mib": None})
    data["image"] = {"oci": "layout:v1"}
    data["config"] = {"method": "file", "template": "router.j2", **config}
    return data


def test_file_method_writes_the_template_into_a_container(tmp_path):
    prof = load_profile(write_profile(tmp_path, _container(tmp_path, path="/etc/frr/frr.conf")))
    assert (prof.config.method, prof.config.path) == ("file", "/etc/frr/frr.conf")
    assert prof.config.template == tmp_path / "router.j2"


@pytest.mark.parametrize(
    ("config", "wants"),
    [
        ({}, ["[config] path", "missing", "/etc/frr/frr.conf"]),
        ({"path": "etc/frr/frr.conf"}, ["[config] path", "not an absolute file path"]),
        ({"path": "/etc/frr/"}, ["[config] path", "not an absolute file path"]),
        ({"path": "/etc/../frr.conf"}, ["[config] path", "'..'"]),
        ({"path": "/etc//frr.conf"}, ["[config] path", "empty"]),
        ({"path": "/run/frr.conf"}, ["[config] path", "under /run", "mounts afresh"]),
        ({"path": "/var/log/x"}, ["[config] path", "under /var/log"]),
        ({"path": 3}, ["[config] path", "an integer"]),
        ({"path": "/etc/x", "template": None}, ["[config] template", "missing"]),
        ({"path": "/etc/x", "login": "root"}, ["[config] login", "'console'"]),
    ],
)
def test_file_method_bad_input_is_one_line(tmp_path, config, wants):
    data = _container(tmp_path, **config)
    if data["config"].get("template") is None:
        data["config"].pop("template")
    msg = load_error(write_profile(tmp_path, data))
    for want in wants:
        assert want in msg, msg


def test_file_method_is_for_containers_and_path_for_file_only(tmp_path):
    msg = load_error(write_profile(tmp_path, edited(config={"method": "file", "path": "/etc/x"})))
    assert "[config] method" in msg and "cannot configure a vm" in msg, msg
    msg = load_error(write_profile(tmp_path, edited(config={"path": "/etc/x"})))
    assert "[config] path" in msg and "only method 'file'" in msg, msg
