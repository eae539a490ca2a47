"""The client URI and log of the libvirtds a run starts (migrate.drivers.libvirt.daemon)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from migrate.drivers.libvirt.daemon import LabRunLibvirtd, NamespacedLibvirtd


def test_lab_run_daemon_uri_is_the_forwarded_socket_and_its_log_skips_the_guard(tmp_path: Path) -> None:
    registry = SimpleNamespace(dir=tmp_path / "reg")
    tb = SimpleNamespace(run_dir=lambda: "/run/vrmig/x")
    d = LabRunLibvirtd("R1", tb, SimpleNamespace(), "10.0.0.1", "qemu+tls://r1/system", registry, tmp_path)  # type: ignore[arg-type]
    assert d.uri == f"qemu+unix:///system?socket={tmp_path}/reg/libvirt-R1.sock"
    assert d.log_path == tmp_path / "libvirtd-R1.stderr"
    d.log_path.write_text("vrmig-guard: started\nerror: no\n\nvrmig-guard: ended\n")
    assert d.log_tail() == "error: no"


def test_namespaced_daemon_log_keeps_every_line(tmp_path: Path) -> None:
    registry = SimpleNamespace(dir=tmp_path / "reg")
    d = NamespacedLibvirtd("R2", "vrR2", "10.0.0.2", registry, tmp_path)  # type: ignore[arg-type]
    d.log_path.write_text("vrmig-guard: x\na\nb\n")
    assert d.log_tail(2) == "a | b"
    assert d.log_tail() == "vrmig-guard: x | a | b"
