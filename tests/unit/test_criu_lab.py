"""HV=criu on a lab: the host-side step programs (run here over loopback, with stand-in commands
for criu), their reports, the archives hosts-setup ships, and which runs a lab accepts."""

from __future__ import annotations

import os
import socket
import sys
import tarfile
import threading
from pathlib import Path

import pytest

from migrate.core.errors import ConfigError
from migrate.drivers.base import load_driver
from migrate.drivers.criu import hoststeps, imgxfer
from migrate.drivers.criu.lab import LabCriuDriver, host_criu
from migrate.experiment.place import lab_supports
from migrate.labs import bundles
from migrate.model.scenario import Scenario
from migrate.testbed.inventory import load

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "docs" / "lab.example.toml"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_parse_steps_keeps_the_last_report_of_each_step_and_ignores_other_lines():
    text = (
        "vrmig-guard: pid=12 start=34\n"
        'vrmig-step: {"step": "dump", "start_ns": 1, "end_ns": 2, "exit_status": 0}\n'
        "criu: some warning\n"
        "vrmig-step: not json\n"
        'vrmig-step: {"step": "transfer", "files": 3}\n'
        'vrmig-step: {"step": "transfer", "files": 4}\n'
    )
    got = hoststeps.parse_steps(text)
    assert got == {
        "dump": {"step": "dump", "start_ns": 1, "end_ns": 2, "exit_status": 0},
        "transfer": {"step": "transfer", "files": 4},
    }


def _receiver(port: int, dest: Path, out: dict) -> threading.Thread:
    lsock = imgxfer.listen("127.0.0.1", port)

    def serve() -> None:
        with lsock:
            out["summary"] = imgxfer.receive(lsock, dest)

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    return t


def test_dump_send_ships_the_images_after_a_successful_dump(tmp_path, capfd):
    """``true`` stands in for criu dump: the images already in the directory cross the link."""
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir(), dst.mkdir()
    (src / "pages-1.img").write_bytes(os.urandom(70_000))
    (src / "inventory.img").write_bytes(b"inv")
    (src / "dump.log").write_text("not shipped")
    port, got = _free_port(), {}
    t = _receiver(port, dst, got)
    rc = hoststeps.dump_send(src, ("127.0.0.1", port), ["true"])
    t.join(10)
    assert rc == 0
    assert sorted(p.name for p in dst.iterdir()) == ["inventory.img", "pages-1.img"]
    assert (dst / "pages-1.img").read_bytes() == (src / "pages-1.img").read_bytes()
    steps = hoststeps.parse_steps(capfd.readouterr().err)
    assert steps["dump"]["exit_status"] == 0 and steps["dump"]["start_ns"] <= steps["dump"]["end_ns"]
    assert steps["transfer"]["files"] == 2 and steps["transfer"]["bytes"] == 70_003
    assert steps["dump"]["end_ns"] <= steps["transfer"]["start_ns"]


def test_dump_send_sends_nothing_when_the_dump_failed(tmp_path, capfd):
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir(), dst.mkdir()
    (src / "pages-1.img").write_bytes(b"x")
    port = _free_port()
    lsock = imgxfer.listen("127.0.0.1", port)
    try:
        rc = hoststeps.dump_send(src, ("127.0.0.1", port), ["false"])
    finally:
        lsock.close()
    assert rc == 1
    steps = hoststeps.parse_steps(capfd.readouterr().err)
    assert steps["dump"]["exit_status"] == 1 and "transfer" not in steps


def test_dump_send_reports_a_receiver_that_is_not_there(tmp_path, capfd):
    rc = hoststeps.dump_send(tmp_path, ("127.0.0.1", _free_port()), ["true"])
    assert rc == 71
    assert "error" in hoststeps.parse_steps(capfd.readouterr().err)["connect"]


def test_recv_restore_restores_only_after_the_last_image_and_not_after_a_failed_restore(tmp_path, capfd):
    """``false`` stands in for criu restore: received, restored (failed), nothing announced."""
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir(), dst.mkdir()
    (src / "core-1.img").write_bytes(b"core")
    port = _free_port()
    res: dict = {}

    def recv() -> None:
        res["rc"] = hoststeps.recv_restore(
            dst, ("127.0.0.1", port), tmp_path / "pid", [("eth0", [b"\x00" * 60])], 1, 0.0, ["false"]
        )

    t = threading.Thread(target=recv, daemon=True)
    t.start()
    for _ in range(200):
        try:
            summary = imgxfer.send(src, "127.0.0.1", port)
            break
        except ConnectionRefusedError:
            t.join(0.01)
    t.join(10)
    assert summary.files == 1 and (dst / "core-1.img").read_bytes() == b"core"
    assert res["rc"] == 1
    steps = hoststeps.parse_steps(capfd.readouterr().err)
    assert steps["receive"]["files"] == 1
    assert steps["receive"]["end_ns"] <= steps["restore"]["start_ns"]
    assert steps["restore"]["exit_status"] == 1 and "announce" not in steps


def test_run_reports_start_end_and_status(capfd):
    assert hoststeps.run([sys.executable, "-c", "raise SystemExit(3)"]) == 3
    r = hoststeps.parse_steps(capfd.readouterr().err)["run"]
    assert r["exit_status"] == 3 and r["start_ns"] <= r["end_ns"]


def test_the_command_line_takes_taps_and_refuses_a_missing_criu_command():
    with pytest.raises(SystemExit):
        hoststeps.main(["run"])
    with pytest.raises(SystemExit):
        hoststeps.main(["keep", "--root", "/", "--tap", "tapL"])  # NAME@BRIDGE


def test_host_criu_reads_what_hosts_setup_wrote():
    c = host_criu(
        {"argv": ["/d/criu/root/ld.so", "/d/criu/root/usr/sbin/criu"], "version": "4.2.1", "source": "forky"}, "/d"
    )
    assert c.cmd("check") == ["/d/criu/root/ld.so", "/d/criu/root/usr/sbin/criu", "check"]
    assert c.version == "4.2.1" and "forky" in c.source
    with pytest.raises(ValueError):
        host_criu({"version": "4.2.1"}, "/d")


def _tree(root: Path) -> None:
    (root / "bin").mkdir(parents=True)
    (root / "bin" / "busybox").write_bytes(b"\x7fELF")
    (root / "bin" / "busybox").chmod(0o755)
    (root / "bin" / "sh").symlink_to("busybox")
    os.mkfifo(root / "fifo")


def test_tree_archives_are_reproducible_skip_special_files_and_carry_the_extras(tmp_path):
    root = tmp_path / "root"
    _tree(root)
    a = bundles.write_tree_tar(
        root, tmp_path / "a.tar", {"usr/sbin/init": (b"#!/bin/sh\n", 0o755), ".oldroot": (None, 0o755)}
    )
    first = a.read_bytes()
    mtime = a.stat().st_mtime_ns
    bundles.write_tree_tar(root, a, {"usr/sbin/init": (b"#!/bin/sh\n", 0o755), ".oldroot": (None, 0o755)})
    assert a.read_bytes() == first and a.stat().st_mtime_ns == mtime  # unchanged: not rewritten
    with tarfile.open(a) as t:
        names = t.getnames()
        assert "fifo" not in names
        assert {"bin", "bin/busybox", "bin/sh", "usr/sbin/init", ".oldroot"} <= set(names)
        assert t.getmember("bin/sh").issym() and t.getmember(".oldroot").isdir()
        assert t.getmember("usr/sbin/init").mode == 0o755
        assert t.getmember("bin/busybox").uname == ""
    (root / "bin" / "busybox").write_bytes(b"\x7fELF2")
    bundles.write_tree_tar(root, a)
    assert a.read_bytes() != first


def test_criu_bundle_moves_the_private_copys_paths_under_the_deploy_dir(tmp_path, monkeypatch):
    root = tmp_path / "forky" / "root"
    (root / "usr" / "sbin").mkdir(parents=True)
    (root / "usr" / "sbin" / "criu").write_bytes(b"criu")
    chosen = {
        "source": "forky",
        "version": "4.2.1",
        "root": str(root),
        "argv": [f"{root}/ld.so", "--library-path", f"{root}/lib", f"{root}/usr/sbin/criu"],
    }
    monkeypatch.setattr("migrate.drivers.criu.setup.read_manifest", lambda cache=None: {"chosen": chosen})
    b = bundles.criu_bundle("/var/lib/vrmig", tmp_path / "out")
    assert b is not None and Path(b["tar"]).is_file()
    assert b["json"]["argv"] == [
        "/var/lib/vrmig/criu/root/ld.so", "--library-path", "/var/lib/vrmig/criu/root/lib",
        "/var/lib/vrmig/criu/root/usr/sbin/criu",
    ]  # fmt: skip
    monkeypatch.setattr("migrate.drivers.criu.setup.read_manifest", lambda cache=None: None)
    assert bundles.criu_bundle("/var/lib/vrmig", tmp_path / "out") is None


def test_a_lab_takes_criu_through_its_own_driver_and_xen_but_not_openvz(monkeypatch):
    inv = load(EXAMPLE)
    lab_supports(Scenario(hv="criu", router="bird", mode="stopcopy"), inv)
    assert load_driver("criu", "qmp", lab=True) is LabCriuDriver
    assert load_driver("criu", "qmp") is not LabCriuDriver
    monkeypatch.delenv("XEN_PEER", raising=False)
    lab_supports(Scenario(hv="xen"), inv)  # nested Xen hosts on the lab's R1 and R2
    with pytest.raises(ConfigError, match="not HV=openvz"):
        lab_supports(Scenario(hv="openvz", mode="stopcopy"), inv)
    monkeypatch.setenv("XEN_PEER", "root@dom0-b")
    with pytest.raises(ConfigError, match="unset XEN_PEER"):
        lab_supports(Scenario(hv="xen"), inv)
    lab_supports(Scenario(peering="bgp,bfd"), inv)  # BIRD peers on A and B (test_peering_lab.py)


def test_the_lab_driver_refuses_frr_before_anything_starts():
    from migrate.core.errors import DependencyError

    with pytest.raises(DependencyError, match="use ROUTER=bird"):
        LabCriuDriver.preflight(Scenario(hv="criu", router="frr", mode="stopcopy"))


def test_a_lab_names_no_qemu_accelerator_for_criu():
    """R1/R2's KVM check describes QEMU: a CRIU run, or sweep, on a lab keeps the driver's
    accel=none (a lab without VT-x would otherwise have recorded tcg for containers)."""
    from migrate.experiment.place import lab_facts

    check = {"hosts": [{"role": r, "kvm": False, "kvm_reason": "no vmx", "versions": {}} for r in ("R1", "R2")]}
    assert lab_facts(check, Scenario(hv="criu", router="bird", mode="stopcopy"), {}) == {}
    assert lab_facts(check, Scenario(hv="kvm", qemu="system"), {})["accel"] == "tcg"
