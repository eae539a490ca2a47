"""CRIU_HOST=vm: the scenario, the QEMU command line, and the host side's reading of the VM's
console, driven by a stand-in process that prints what the VM's /init and migrate.drivers.criu.hostvm print
(no VM boots here; tests/integration/test_migrate_criu.py boots the real one)."""

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

import migrate.core.registry as regmod
import migrate.drivers.criu.hostvm as criuvm
from migrate.core.errors import ConfigError, DependencyError, MigrationError
from migrate.model.scenario import Scenario


def test_scenario_criu_host():
    s = Scenario(hv="criu", router="bird", criu_host="vm")
    assert s.name == "criu-vm-precopy-100M-1500"
    assert Scenario(hv="criu", router="bird", rib_routes=1000).name == "criu-precopy-100M-1500-rib1000"
    assert Scenario(**s.to_dict()) == s  # the job carries the scenario as JSON
    with pytest.raises(ConfigError, match="CRIU_HOST=vm needs HV=criu"):
        Scenario(hv="kvm", criu_host="vm")
    with pytest.raises(ConfigError, match="CRIU_HOST='cloud'"):
        Scenario(hv="criu", criu_host="cloud")


def test_qemu_argv_exports_and_accelerator(tmp_path):
    image = SimpleNamespace(kernel=Path("/k/vmlinuz"), initrd=Path("/k/initrd.img"), modules_dir=Path("/m"))
    argv = criuvm._qemu_argv(image, "tcg", tmp_path / "job", tmp_path / "res", Path("/repo"))
    fsdevs = [argv[i + 1] for i, a in enumerate(argv) if a == "-fsdev"]
    tags = [argv[i + 1].rsplit("mount_tag=", 1)[1] for i, a in enumerate(argv) if a == "-device"]
    assert tags == ["hostroot", "modules", "job", "results"]
    assert [("readonly=on" in f) for f in fsdevs] == [True, True, True, False]  # only results is writable
    assert fsdevs[0].startswith("local,id=fs0,path=/,")
    assert argv[argv.index("-accel") + 1] == "tcg,thread=multi"
    append = argv[argv.index("-append") + 1]
    assert f"vrmig.results={tmp_path / 'res'}" in append and "vrmig.repo=/repo" in append
    kvm = criuvm._qemu_argv(image, "kvm", tmp_path, tmp_path, Path("/repo"))
    assert kvm[kvm.index("-accel") + 1] == "kvm" and kvm[kvm.index("-cpu") + 1] == "host"


def test_console_follows_partial_lines(tmp_path):
    from migrate.core.procs import LineTail

    path = tmp_path / "console.log"
    con = LineTail(path)  # how run_in_vm follows the VM's console
    assert con.new_lines() == []
    path.write_bytes(b"VRMIG-CRIUVM-BOOT kernel=6.1\r\nhalf")
    assert con.new_lines() == ["VRMIG-CRIUVM-BOOT kernel=6.1"]
    with open(path, "ab") as fh:
        fh.write(b" a line\n")
    assert con.new_lines() == ["half a line"]


def test_main_refuses_to_run_outside_the_vm(monkeypatch, capsys):
    monkeypatch.delenv(criuvm.INNER_ENV, raising=False)
    from migrate.experiment import vm_job

    assert vm_job.main(["job.json"]) == 2
    assert "inside the CRIU host VM only" in capsys.readouterr().err


@pytest.fixture
def fake_vm(tmp_path, monkeypatch):
    """run_in_vm with a shell script in QEMU's place; returns (results root, set the script)."""
    monkeypatch.setattr(regmod, "STATE_ROOT", tmp_path / "state")
    monkeypatch.setattr(criuvm.os, "geteuid", lambda: 0)
    image = SimpleNamespace(kernel=Path("/k"), initrd=Path("/i"), modules_dir=Path("/m"), release="6.1.0-test",
                            manifest={"kernel": {"release": "6.1.0-test"}})  # fmt: skip
    monkeypatch.setattr("routers.criu_vm_image.criuvm_image", lambda: image)
    monkeypatch.setattr(criuvm, "detect_accel", lambda: ("tcg", "test"))
    monkeypatch.setattr(criuvm.shutil, "which", lambda _name: "/usr/bin/qemu-system-x86_64")
    results = tmp_path / "results"
    script: list[str] = []
    monkeypatch.setattr(criuvm, "_qemu_argv", lambda *_a: ["sh", "-c", script[0]])
    return results, script


def _no_analysis(run_dir: Path) -> None:
    raise AssertionError(f"no run directory to analyse, yet {run_dir}")


def _run_dir(results: Path, name: str, status: str) -> Path:
    d = results / name
    return d, f"mkdir -p {d} && echo '{json.dumps({'status': status})}' > {d}/meta.json"


def test_the_run_directory_the_vm_names_is_returned_with_its_console(fake_vm):
    results, script = fake_vm
    d, make = _run_dir(results, "20990101T000000Z-criu-vm-precopy-10M-1500", "completed")
    script.append(f"echo VRMIG-CRIUVM-BOOT kernel=6.1.0-test; {make}; echo vrmig: migrating; "
                  f"echo VRMIG-CRIUVM-RUNDIR {d}; echo VRMIG-CRIUVM-EXIT 0")  # fmt: skip
    analysed: list[Path] = []
    assert criuvm.run_in_vm(Scenario(hv="criu", router="bird", criu_host="vm"), results, analysed.append) == d
    assert analysed == [d]  # on this side, after the VM stopped
    console = (d / criuvm.CONSOLE_NAME).read_text()
    assert "vrmig: migrating" in console and "VRMIG-CRIUVM-EXIT 0" in console
    assert json.loads((d / "meta.json").read_text())["status"] == "completed"
    assert not list((regmod.STATE_ROOT).iterdir()), "the run's private state was left behind"


def test_an_error_before_any_run_keeps_its_kind(fake_vm):
    results, script = fake_vm
    script.append("echo VRMIG-CRIUVM-BOOT kernel=x; echo 'VRMIG-CRIUVM-ERROR 3 forky criu does not work'; "
                  "echo VRMIG-CRIUVM-EXIT 3")  # fmt: skip
    with pytest.raises(DependencyError, match="forky criu does not work"):
        criuvm.run_in_vm(Scenario(hv="criu", router="bird", criu_host="vm"), results, _no_analysis)


@pytest.mark.parametrize(
    ("actions", "failure_class"),
    [
        ([], "setup"),
        ([{"t_ns": 1, "action": "migrate", "side": "src"}], "migration"),
        (
            [
                {"t_ns": 1, "action": "migrate", "side": "src"},
                {"t_ns": 2, "action": "migration-end", "side": "dst", "status": "completed"},
            ],
            "post-migration",
        ),
        (
            [
                {"t_ns": 1, "action": "migrate", "side": "src"},
                {"t_ns": 2, "action": "migration-end", "side": "src", "status": "failed"},
            ],
            "migration",
        ),
    ],
)
def test_a_vm_that_dies_mid_run_leaves_the_run_failed_in_the_phase_it_reached(fake_vm, actions, failure_class):
    results, script = fake_vm
    d, make = _run_dir(results, "20990101T000000Z-criu-vm-stopcopy-10M-1500", "running")
    lines = "".join(json.dumps(a) + "\n" for a in actions)  # the records the run wrote (SYNTHETIC)
    script.append(f"echo VRMIG-CRIUVM-BOOT kernel=x; {make}; printf '%s' '{lines}' > {d}/actions.jsonl; "
                  "echo 'Kernel panic'")  # fmt: skip
    seen: list[str] = []
    analyse = lambda run_dir: seen.append(json.loads((run_dir / "meta.json").read_text())["status"])  # noqa: E731
    assert criuvm.run_in_vm(Scenario(hv="criu", router="bird", criu_host="vm"), results, analyse) == d
    assert seen == ["failed"]  # analysed once it was closed
    meta = json.loads((d / "meta.json").read_text())
    assert meta["status"] == "failed" and "CRIU host VM ended mid-run" in meta["failure"], meta
    assert meta["failure_class"] == failure_class


def test_a_vm_that_fails_to_mount_its_root_says_why(fake_vm):
    results, script = fake_vm
    script.append("echo VRMIG-CRIUVM-BOOT kernel=x; echo 'VRMIG-CRIUVM-FAIL cannot mount the host root'")
    with pytest.raises(MigrationError, match="cannot mount the host root"):
        criuvm.run_in_vm(Scenario(hv="criu", router="bird", criu_host="vm"), results, _no_analysis)


def test_the_vm_image_says_how_to_build_it(tmp_path):
    from routers.criu_vm_image import CRIUVM_FORMAT, criuvm_image
    from routers.errors import NotBuiltError

    with pytest.raises(NotBuiltError, match=r"CRIU host VM image is not built .*run `make criu`"):
        criuvm_image(tmp_path)
    d = tmp_path / "criu-vm"
    d.mkdir()
    for name in ("vmlinuz", "initrd.img"):
        (d / name).write_bytes(b"x")
    (d / "manifest.json").write_text(json.dumps({"format": CRIUVM_FORMAT + 1}))
    with pytest.raises(NotBuiltError, match="another vrmig version"):
        criuvm_image(tmp_path)
    (d / "manifest.json").write_text(json.dumps({"format": CRIUVM_FORMAT, "modules_dir": str(tmp_path)}))
    with pytest.raises(NotBuiltError, match=r"modules\.dep is missing"):
        criuvm_image(tmp_path)
    (tmp_path / "modules.dep").write_text("")
    assert criuvm_image(tmp_path).modules_dir == tmp_path
