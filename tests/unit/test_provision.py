"""migrate.labs.provision: the Ansible inventory made from a TOML testbed inventory, the
``ansible-playbook`` argv and environment, and the parsers of its output (fixtures: real output of
``make hosts-setup`` on a lab of six SSH hosts: a first run, a second run that changed nothing, a
host offered a wrong key, a hypervisor host whose bridge is missing)."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from migrate.cli.main import build_parser
from migrate.labs import provision
from migrate.testbed.inventory import ROLES, InventoryError, load

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "lab.example.toml"
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "ansible"
IMAGES = [{"profile": "frr", "src": "/cache/guest/frr/vmlinuz", "name": "vmlinuz"}]


def _fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


@pytest.fixture
def lab(tmp_path: Path) -> Path:
    """The example inventory with R2 on its own port, user and key."""
    text = EXAMPLE.read_text().replace(
        'ssh = { host = "198.19.128.22" }',
        'ssh = { host = "198.19.128.22", port = 2222, user = "lab", key = "keys/r2 key", known_hosts = "kh" }',
    )
    p = tmp_path / "lab.toml"
    p.write_text(text)
    return p


def test_host_vars_carry_the_ssh_target_and_strict_known_hosts(lab: Path, tmp_path: Path) -> None:
    inv = load(lab)
    ai = provision.ansible_inventory(inv, IMAGES)
    hv = ai["all"]["children"]["hypervisors"]["hosts"]
    r2 = hv["R2"]
    assert r2["ansible_host"] == "198.19.128.22"
    assert r2["ansible_port"] == 2222
    assert r2["ansible_user"] == "lab"
    assert r2["ansible_ssh_private_key_file"] == str(tmp_path / "keys" / "r2 key")  # relative to the inventory
    assert r2["vrmig_role"] == "R2"
    assert r2["vrmig_deploy_dir"] == "/var/lib/vrmig"
    args = shlex.split(r2["ansible_ssh_common_args"])  # Ansible splits them the same way
    assert args == [
        "-o", "StrictHostKeyChecking=yes", "-o", f"UserKnownHostsFile={tmp_path / 'kh'}",
        "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes",
    ]  # fmt: skip
    assert r2["vrmig_taps"] == [{"name": "tapL", "bridge": "brL"}, {"name": "tapR", "bridge": "brR"}]
    r1 = hv["R1"]
    assert (r1["ansible_port"], r1["ansible_user"]) == (22, "root")
    assert r1["ansible_ssh_private_key_file"] == "/etc/vrmig/lab/id_ed25519"
    assert "UserKnownHostsFile=/etc/vrmig/lab/known_hosts" in r1["ansible_ssh_common_args"]
    ends = ai["all"]["children"]["end_hosts"]["hosts"]
    assert list(ends) == ["A", "C", "B", "D"] and list(hv) == ["R1", "R2"]
    assert all("vrmig_taps" not in v for v in ends.values())
    assert ai["all"]["children"]["hypervisors"]["vars"]["vrmig_images"] == IMAGES


def test_a_local_role_runs_on_the_orchestrator(tmp_path: Path) -> None:
    text = EXAMPLE.read_text().replace('[hosts.A]\nssh = { host = "198.19.128.2" }', '[hosts.A]\ntransport = "local"')
    p = tmp_path / "lab.toml"
    p.write_text(text)
    a = provision.ansible_inventory(load(p), IMAGES)["all"]["children"]["end_hosts"]["hosts"]["A"]
    assert a["ansible_connection"] == "local" and "ansible_host" not in a


def test_helper_sources_are_what_the_makefiles_build_from() -> None:
    files = provision.helper_sources()
    assert {"crosstraffic/Makefile", "probes/Makefile", "probes/vrsampler.c"} <= set(files)
    assert {"crosstraffic/src/vrgen.c", "crosstraffic/src/vrsink.c", "crosstraffic/src/common.h"} <= set(files)
    assert all((provision.REPO / f).is_file() for f in files)


def test_argv_is_a_list_without_a_shell(tmp_path: Path) -> None:
    argv = provision.playbook_argv(tmp_path / "inv dir" / "inventory.yml")
    assert argv[0] == "ansible-playbook"
    assert str(tmp_path / "inv dir" / "inventory.yml") in argv  # one element, spaces and all
    assert not any(a in ("sh", "bash", "-c") for a in argv)
    assert argv[-1] == str(provision.PLAYBOOK) and provision.PLAYBOOK.is_file()


def test_environment_keeps_ansible_in_its_temporary_directory(tmp_path: Path) -> None:
    env = provision.ansible_env(tmp_path, "/var/lib/vrmig", base={"PATH": "/usr/bin", "HOME": "/root"})
    for k in ("ANSIBLE_CONFIG", "ANSIBLE_HOME", "ANSIBLE_LOCAL_TEMP", "ANSIBLE_SSH_CONTROL_PATH_DIR"):
        assert env[k].startswith(str(tmp_path)), k
    assert env["ANSIBLE_REMOTE_TEMP"] == "/var/lib/vrmig/tmp"
    assert env["ANSIBLE_HOST_KEY_CHECKING"] == "True"
    assert env["ANSIBLE_RETRY_FILES_ENABLED"] == "False"
    assert env["PATH"] == "/usr/bin"


def test_recap_of_a_first_run() -> None:
    recap = provision.parse_recap(_fixture("hosts-setup-first-run.log"))
    assert list(recap) == ["A", "B", "C", "D", "R1", "R2"]
    assert recap["R1"] == provision.HostRecap("R1", ok=10, changed=8, unreachable=0, failed=0)
    assert recap["A"].changed == 5 and recap["A"].good
    assert provision.parse_failures(_fixture("hosts-setup-first-run.log")) == {}


def test_recap_of_a_second_run_changes_nothing() -> None:
    recap = provision.parse_recap(_fixture("hosts-setup-second-run.log"))
    assert set(recap) == set(ROLES)
    assert all(r.changed == 0 and r.good for r in recap.values())
    assert recap["A"].skipped == 1  # the build: make -q said up to date
    assert recap["R2"].ok == 9


def test_an_unreachable_host_and_its_reason() -> None:
    text = _fixture("hosts-setup-wrong-key.log")
    recap = provision.parse_recap(text)
    assert recap["C"] == provision.HostRecap("C", ok=0, changed=0, unreachable=1, failed=0)
    assert not recap["C"].good and recap["A"].good
    failures = provision.parse_failures(text)
    assert list(failures) == ["C"]
    assert failures["C"].startswith("unreachable: Data could not be sent to remote host")
    assert failures["C"].endswith("Permission denied (publickey).")
    assert "\n" not in failures["C"] and "\r" not in failures["C"]


def test_a_failed_task_names_the_task_and_the_reason() -> None:
    text = _fixture("hosts-setup-missing-bridge.log")
    assert provision.parse_recap(text)["R2"].failed == 1
    assert provision.parse_failures(text) == {
        "R2": "task 'The router's taps, enslaved to the segment bridges and up' failed: "
        "brX is not a bridge on this host (create the segment's bridge or fix `bridges`)"
    }


def test_reason_of_a_command_failure_adds_the_last_stderr_line() -> None:
    text = (
        "TASK [Build the helpers] ***\n"
        'failed: [A] (item=probes) => {"changed": true, "msg": "non-zero return code", "rc": 2, '
        '"stderr": "vrsampler.c:1:1: error: x\\nmake: *** [Makefile:15: bin/vrsampler] Error 1"}\n'
    )
    assert provision.parse_failures(text) == {
        "A": "task 'Build the helpers' failed: non-zero return code: make: *** [Makefile:15: bin/vrsampler] Error 1"
    }


def test_no_recap_when_ansible_did_not_get_to_run() -> None:
    assert provision.parse_recap("ERROR! the playbook: x.yml could not be found\n") == {}


def test_missing_key_file_is_bad_input(lab: Path) -> None:
    with pytest.raises(InventoryError, match=r"hosts\.A\.ssh: key /etc/vrmig/lab/id_ed25519 does not exist"):
        provision.check_local_files(load(lab))


def test_libvirt_tls_files_go_to_the_hypervisors_and_must_exist(lab: Path, tmp_path: Path) -> None:
    inv = load(lab)
    hv = provision.ansible_inventory(inv, IMAGES)["all"]["children"]["hypervisors"]["hosts"]
    assert hv["R1"]["vrmig_libvirt_tls"] == "/etc/vrmig/lab/pki/R1"
    assert hv["R2"]["vrmig_libvirt_pki_dir"] == "/etc/libvirt/pki"
    # the keys and known_hosts exist; R1's TLS directory lacks its keys
    text = lab.read_text().replace('"/etc/vrmig/lab/pki/R1"', '"pki/R1"').replace('"/etc/vrmig/lab/pki/R2"', '"pki/R2"')
    for k in ("/etc/vrmig/lab/id_ed25519", "/etc/vrmig/lab/known_hosts"):
        text = text.replace(f'"{k}"', f'"{tmp_path / Path(k).name}"')
        (tmp_path / Path(k).name).write_text("x")
    (tmp_path / "keys").mkdir()
    (tmp_path / "keys" / "r2 key").write_text("x")
    (tmp_path / "kh").write_text("x")
    for r in ("R1", "R2"):
        (tmp_path / "pki" / r).mkdir(parents=True)
        for f in ("cacert.pem", "servercert.pem", "clientcert.pem") + (
            () if r == "R1" else ("serverkey.pem", "clientkey.pem")
        ):
            (tmp_path / "pki" / r / f).write_text("x")
    lab.write_text(text)
    with pytest.raises(InventoryError, match=r"hosts\.R1\.libvirt_tls: .*/pki/R1 lacks serverkey\.pem, clientkey\.pem"):
        provision.check_local_files(load(lab))
    for f in ("serverkey.pem", "clientkey.pem"):
        (tmp_path / "pki" / "R1" / f).write_text("x")
    provision.check_local_files(load(lab))


def test_cli_bad_inventory_is_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from migrate.cli.main import main

    assert main(["hosts-setup", "--testbed", str(tmp_path / "none.toml"), "--results", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no such inventory" in err[0]
    assert not (tmp_path / "r").exists()


def test_cli_profiles_flag() -> None:
    a = build_parser().parse_args(["hosts-setup", "--testbed", "lab.toml", "--profiles", "frr,bird,frr"])
    assert a.profiles == ["frr", "bird"]
    assert build_parser().parse_args(["hosts-setup", "--testbed", "lab.toml"]).profiles == ["frr", "bird"]


def _refusing_c(opened: list[str], closed: list[str]) -> type:
    """A stand-in host class (spec, control_dir): C refuses its key at open(); the other roles
    are appended to ``opened`` when opened and to ``closed`` when closed."""
    from migrate.testbed import hosts as hostsmod

    class FakeHost:
        def __init__(self, spec, control_dir) -> None:
            self.role = spec.role

        def open(self) -> None:
            if self.role == "C":
                raise hostsmod.AuthRefused("C (root@198.19.128.6:22): authentication refused for key /k")
            opened.append(self.role)

        def close(self) -> None:
            closed.append(self.role)

    return FakeHost


def test_unreachable_hosts_get_the_reason_of_a_login_of_our_own(tmp_path, monkeypatch) -> None:
    """Ansible said 'Broken pipe' for a refused key: the line names the refused key instead."""
    from migrate.testbed import hosts as hostsmod

    monkeypatch.setattr(hostsmod, "SshHost", _refusing_c([], []))
    inv = load(Path(__file__).resolve().parents[2] / "docs" / "lab.example.toml")
    got = provision.explain_unreachable(
        inv,
        {"C": "unreachable: Data could not be sent to remote host: Broken pipe", "D": "unreachable: timeout",
         "R1": "task 'x' failed: y"},
        tmp_path,
    )  # fmt: skip
    assert got["C"].startswith("unreachable: C (root@198.19.128.6:22): authentication refused for key /k (Ansible: ")
    assert got["D"] == "unreachable: timeout (a login of its own succeeded right after)"
    assert got["R1"] == "task 'x' failed: y"


def test_the_nested_xen_hosts_files_go_to_the_hypervisors(lab: Path, tmp_path: Path) -> None:
    """HV=xen on a lab: Xen, dom0's kernel, the manifest and one dom0 initrd per profile (with
    that profile's router inside) for R1 and R2 only; none when `make xen` never ran here."""
    from routers.xen_image import DOM0_INITRD

    assert provision.xen_files(["frr"], tmp_path / "no-cache") == []
    xen = [{"src": "/cache/xen/xen.elf", "name": "xen.elf"}]
    ai = provision.ansible_inventory(load(lab), IMAGES, xen=xen)["all"]["children"]
    assert ai["hypervisors"]["vars"]["vrmig_xen"] == xen
    assert "vrmig_xen" not in ai["end_hosts"].get("vars", {})
    try:
        files = provision.xen_files(["frr", "bird"])
    except Exception as err:  # the image of one profile not built here
        pytest.skip(f"no local Xen and guest images: {err}")
    if not files:
        pytest.skip("`make xen` has not run here")
    names = [f["name"] for f in files]
    assert names == ["xen.elf", "dom0-vmlinuz", "manifest.json", "dom0-initrd-frr.img", "dom0-initrd-bird.img"]
    assert all(Path(f["src"]).is_file() for f in files)
    assert Path(files[3]["src"]).name == DOM0_INITRD and Path(files[3]["src"]).parent.name == "router-frr"


def test_a_host_refusing_our_login_stops_hosts_setup_before_ansible(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A login of our own to every host comes first: C refuses the key, so hosts-setup says so on
    one line, exits 2, closes the hosts that did open, creates no results directory and never
    starts ansible-playbook (no other host is changed)."""
    from migrate.cli.main import main
    from migrate.testbed import hosts as hostsmod

    opened: list[str] = []
    closed: list[str] = []

    def no_ansible(*a, **kw):
        raise AssertionError("ansible-playbook started")

    monkeypatch.setattr(hostsmod, "make_host", _refusing_c(opened, closed))
    monkeypatch.setattr(provision, "_stream", no_ansible)
    monkeypatch.setattr(provision, "check_local_files", lambda inv: None)
    rc = main(["hosts-setup", "--testbed", str(EXAMPLE), "--results", str(tmp_path / "r")])
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("hosts-setup: ")]
    assert rc == 2
    assert err == [
        "hosts-setup: C: unreachable: C (root@198.19.128.6:22): authentication refused for key /k "
        "(nothing was changed on any host)"
    ]
    assert sorted(opened) == sorted(set(ROLES) - {"C"}) and sorted(closed) == sorted(opened)
    assert not (tmp_path / "r").exists()


def test_the_playbooks_plays_are_the_progress_items(tmp_path, capsys, monkeypatch):
    """A stand-in for ansible-playbook printing PLAY and TASK lines: one progress item per play
    of the real playbook, the task in hand named, Ansible's output kept in the log."""
    import sys

    from migrate.core.progress import Progress

    assert provision.count_plays(provision.PLAYBOOK) == 8
    fake = tmp_path / "ansible-playbook"
    fake.write_text(
        "#!/bin/sh\n"
        "printf 'PLAY [Every host - packages] ****\\n\\nTASK [Gathering Facts] ****\\nok: [A]\\n'\n"
        "printf 'PLAY [Hypervisor hosts - images] ****\\nTASK [copy] ****\\nchanged: [R1]\\n'\n"
    )
    fake.chmod(0o755)
    log = tmp_path / "ansible.log"
    out = []
    orig = Progress.__init__

    def plain(self, *a, **kw):
        orig(self, *a, **{**kw, "stream": sys.stderr, "live": False, "enabled": True, "min_interval_s": 0})
        out.append(self)

    monkeypatch.setattr(Progress, "__init__", plain)
    assert provision._stream([str(fake)], {"PATH": "/usr/bin:/bin"}, log, 2) == 0
    err = capsys.readouterr().err
    assert "progress: hosts-setup 1/2 plays" in err and "progress: hosts-setup 2/2 plays" in err, err
    assert "last Hypervisor hosts - images: copy ok" in err, err
    assert "TASK [copy]" in log.read_text()


def test_helper_archive_is_the_same_bytes_while_the_sources_are(tmp_path: Path) -> None:
    import tarfile

    a = provision.helper_archive(tmp_path / "a.tar")
    first, stat = a.read_bytes(), a.stat().st_mtime_ns
    assert provision.helper_archive(tmp_path / "a.tar").read_bytes() == first
    assert a.stat().st_mtime_ns == stat  # not rewritten: Ansible's copy sees the same checksum
    with tarfile.open(a) as tar:
        assert tar.getnames() == provision.helper_sources()
        assert {(m.mtime, m.uid, m.mode) for m in tar.getmembers()} == {(0, 0, 0o644)}
