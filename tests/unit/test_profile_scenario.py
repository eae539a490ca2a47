"""ROUTER=<profile>.toml in a scenario: the built-in profile files are the built-in images, and a
disk-image profile is checked against the settings it can run with (no VM started)."""

import shutil
from pathlib import Path

import pytest

from migrate.core.errors import ConfigError
from migrate.model.scenario import Scenario

PROFILES = Path(__file__).resolve().parents[2] / "profiles"


@pytest.fixture
def disk_profile(tmp_path: Path) -> Path:
    """The example cloud-init profile with its disk replaced by a tmp file with qcow2's magic."""
    disk = tmp_path / "disk.qcow2"
    disk.write_bytes(b"QFI\xfb" + bytes(508))
    shutil.copy(PROFILES / "debian-frr-cloudinit.user-data.j2", tmp_path)
    text = (PROFILES / "debian-frr-cloudinit.toml").read_text()
    text = text.replace("~/.cache/vrmig/images/debian-frr-cloudinit/disk.qcow2", "disk.qcow2")
    out = tmp_path / "router.toml"
    out.write_text(text)
    return out


@pytest.mark.parametrize("name", ["frr", "bird"])
def test_builtin_profile_files_are_the_builtin_images(name):
    assert Scenario(router=str(PROFILES / f"{name}.toml")).router == name


def test_a_disk_profile_runs_under_its_absolute_path_with_its_software(disk_profile, monkeypatch):
    monkeypatch.chdir(disk_profile.parent)
    s = Scenario(router="./router.toml", mem_mib=512)
    assert s.router == str(disk_profile) and s.router_software == "frr"


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"mem_mib": 256}, "MEM=256 is below the 512 MiB"),
        ({"nic": "e1000"}, "[hardware] nic = 'virtio'"),
        ({"hv": "criu"}, "HV=kvm only"),
        ({"fault": "guest-never-ready"}, "FAULT=guest-never-ready needs a built-in router image"),
        ({"dirty_mbps": 10.0}, "DIRTY=10.0 needs a built-in router image"),
    ],
)
def test_a_disk_profile_refuses_what_it_cannot_run(disk_profile, fields, says):
    with pytest.raises(ConfigError) as err:
        Scenario(router=str(disk_profile), **{"mem_mib": 512, **fields})
    assert says in str(err.value) and "\n" not in str(err.value)


def test_a_missing_profile_file_is_one_line():
    with pytest.raises(ConfigError, match="cannot read the router profile"):
        Scenario(router="no/such/router.toml")


def test_a_template_that_fails_to_render_is_one_line_before_the_run(disk_profile):
    from migrate.drivers.disk_boot import check_config
    from routers.profile_file import load_profile

    s = Scenario(router=str(disk_profile), mem_mib=512, peering="bgp,bfd")
    check_config(load_profile(s.router), s)  # the shipped template renders
    template = disk_profile.parent / "debian-frr-cloudinit.user-data.j2"
    template.write_text(template.read_text().replace("{{ router.hostname }}", "{{ router.hostnam }}"))
    with pytest.raises(ConfigError) as err:
        check_config(load_profile(s.router), s)
    msg = str(err.value)
    assert "debian-frr-cloudinit.user-data.j2:4:" in msg and "hostnam" in msg and "\n" not in msg


def test_the_console_profile_renders_one_command_per_line_for_bird_1_6():
    from migrate.drivers.console_config import command_lines
    from migrate.model.router_config import testbed_context
    from routers.profile_file import load_profile, render_config

    prof = load_profile(PROFILES / "debian-bird-console.toml", check_image=False)
    assert (prof.config.method, prof.config.login, prof.config.prompt) == ("console", "root", "# ")
    assert "command not found" in prof.config.errors
    lines = command_lines(render_config(prof, testbed_context(prof, Scenario(peering="bgp,bfd"))))
    conf = [ln.split("'")[1] for ln in lines if ln.endswith(">> /etc/bird/bird.conf")]
    assert "  bfd on;" in conf and "  neighbor 198.18.1.10 as 65001;" in conf
    assert conf.count("protocol bfd {") == 1 and not any("ospf" in c for c in conf)
    # no line needs a continuation prompt, and the marker is printed whole only by the last command's success
    assert all(ln.count("'") % 2 == 0 and not ln.endswith("\\") and "<<" not in ln for ln in lines)
    assert not any(prof.readiness.console_marker in ln for ln in lines)
    assert lines[-1].startswith("systemctl restart bird && ")


@pytest.fixture
def oci_profile(tmp_path: Path) -> Path:
    """The shipped OCI profile with its layout replaced by an empty one in tmp."""
    layout = tmp_path / "oci"
    layout.mkdir()
    (layout / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
    (layout / "index.json").write_text("{}")
    shutil.copy(PROFILES / "debian-frr-oci.frr.conf.j2", tmp_path)
    text = (PROFILES / "debian-frr-oci.toml").read_text()
    text = text.replace("~/.cache/vrmig/images/debian-frr-oci/oci:10.3", "oci:10.3")
    out = tmp_path / "router.toml"
    out.write_text(text)
    return out


def test_a_container_profile_runs_under_hv_criu(oci_profile):
    s = Scenario(router=str(oci_profile), hv="criu", mode="stopcopy")
    assert s.router == str(oci_profile) and s.router_software == "frr"


@pytest.mark.parametrize(
    ("fields", "edit", "says"),
    [
        ({"hv": "kvm"}, None, "run it with HV=criu (not HV=kvm)"),
        ({"hv": "criu", "criu_host": "vm"}, None, "CRIU_HOST=vm runs the built-in images only"),
        ({"hv": "criu", "rib_routes": 10}, None, "RIB_ROUTES=10 needs ROUTER=bird"),
        ({"hv": "criu"}, ('nics = ["left", "right"]', 'nics = ["right", "left"]'), "eth0 is the left port"),
        (
            {"hv": "criu"},
            ('method = "file"\npath = "/etc/frr/frr.conf"', 'method = "console"\nlogin = "root"'),
            'method = "file"',
        ),
    ],
)
def test_a_container_profile_refuses_what_it_cannot_run(oci_profile, fields, edit, says):
    if edit is not None:
        text = oci_profile.read_text()
        assert edit[0] in text
        oci_profile.write_text(text.replace(*edit))
    with pytest.raises(ConfigError) as err:
        Scenario(router=str(oci_profile), **fields)
    assert says in str(err.value) and "\n" not in str(err.value), str(err.value)


def test_the_oci_profile_renders_frr_conf_for_eth0_and_eth1_with_bgp_and_bfd():
    from migrate.model.router_config import testbed_context
    from routers.profile_file import load_profile, render_config

    prof = load_profile(PROFILES / "debian-frr-oci.toml", check_image=False)
    assert (prof.router.kind, prof.config.method, prof.config.path) == ("container", "file", "/etc/frr/frr.conf")
    s = Scenario(router=str(PROFILES / "debian-frr-oci.toml"), hv="criu", peering="bgp,bfd")
    text = render_config(prof, testbed_context(prof, s))
    assert "interface eth0\n description left (segment L)\n ip address 198.18.1.1/24\n" in text
    assert "interface eth1\n description right (segment R)\n ip address 198.18.2.1/24\n" in text
    assert "no zebra nexthop kernel enable" in text and "router bgp 65000" in text
    assert " neighbor 198.18.2.10 bfd profile vrmig" in text and "{" not in text
    plain = render_config(
        prof, testbed_context(prof, Scenario(router=str(PROFILES / "debian-frr-oci.toml"), hv="criu"))
    )
    assert "router bgp" not in plain and "bfd" not in plain


def _run_scenario(*argv: str) -> Scenario:
    from migrate.cli.main import build_parser
    from migrate.experiment.args import scenario_from_args

    return scenario_from_args(build_parser().parse_args(["run", *argv]))


def test_a_profile_gives_mem_vcpus_and_nic_unless_they_are_set(disk_profile):
    text = disk_profile.read_text().replace("vcpus = 1", "vcpus = 2")
    disk_profile.write_text(text)
    s = _run_scenario("--router", str(disk_profile))
    assert (s.mem_mib, s.vcpus, s.nic) == (512, 2, "virtio")
    s = _run_scenario("--router", str(disk_profile), "--mem", "768", "--vcpus", "1")
    assert (s.mem_mib, s.vcpus) == (768, 1)
    # a built-in router keeps the variables' own defaults
    s = _run_scenario("--router", "frr")
    assert (s.mem_mib, s.vcpus, s.nic) == (256, 1, "virtio")
    # a set value below the profile's memory is still refused, in one line
    with pytest.raises(ConfigError, match="MEM=256 is below the 512 MiB"):
        _run_scenario("--router", str(disk_profile), "--mem", "256")
