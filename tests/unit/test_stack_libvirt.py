"""migrate.core.stack's LIBVIRT= and the private libvirtd's launch, without fetching or starting
anything: releases come from a manifest in a temporary cache, daemons are stand-in scripts."""

from __future__ import annotations

import json
import shlex
import stat
import subprocess
from pathlib import Path

import pytest

from migrate.core import privapt, stack
from migrate.drivers.libvirt import daemon as lvd
from migrate.drivers.libvirt import driver as lvdrv


def _script(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.mark.parametrize("spec", ["system", "11.3", "11.3.0", "12.8"])
def test_libvirt_forms_are_accepted(spec):
    stack.check_libvirt_spec(spec)


@pytest.mark.parametrize("spec", ["", "eleven", "/usr/sbin/libvirtd", "11", "11.3-2"])
def test_anything_else_is_one_line_naming_the_forms(spec):
    with pytest.raises(stack.StackError, match=r"is not a libvirt: use system .* or a release such as 11\.3"):
        stack.check_libvirt_spec(spec)


def test_version_line_without_the_path_libvirtd_names_itself_by(tmp_path):
    fake = _script(tmp_path / "libvirtd", 'echo "$0 (libvirt) 11.3.0"\n')
    assert stack.libvirt_version_line([str(fake)]) == "libvirtd (libvirt) 11.3.0"
    env_seen = _script(tmp_path / "env-libvirtd", '[ "$LIBVIRT_DRIVER_DIR" = /d ] && echo "libvirtd (libvirt) 1.2.3"\n')
    assert stack.libvirt_version_line([str(env_seen)], {"LIBVIRT_DRIVER_DIR": "/d"}) == "libvirtd (libvirt) 1.2.3"
    with pytest.raises(stack.StackError, match="is not a working libvirtd"):
        stack.libvirt_version_line([str(_script(tmp_path / "qemu", "echo QEMU emulator version 10.0.2\n"))])


def test_a_release_runs_with_its_own_library_and_driver_directories(tmp_path):
    argv, env = stack.libvirt_release_argv(tmp_path, own_libs=False)
    assert argv == [str(tmp_path / "usr/sbin/libvirtd")]
    assert env == {
        "LD_LIBRARY_PATH": str(tmp_path / privapt.LIBDIR),
        "LIBVIRT_DRIVER_DIR": str(tmp_path / privapt.LIBDIR / "libvirt/connection-driver"),
    }
    argv, env = stack.libvirt_release_argv(tmp_path, own_libs=True)  # its suite's loader and libc
    assert argv[0] == str(tmp_path / privapt.LIBDIR / privapt.LOADER) and argv[1] == "--library-path"
    assert argv[-1] == str(tmp_path / "usr/sbin/libvirtd") and "LD_LIBRARY_PATH" not in env


def _fetched(cache: Path, spec: str = "11.3") -> stack.LibvirtBuild:
    root = cache / "qemu" / f"libvirt-{spec}" / "root"
    daemon = _script(root / "usr/sbin/libvirtd", 'echo "libvirtd (libvirt) 11.3.0"\n')
    build = stack.LibvirtBuild(
        spec=spec, argv=(str(daemon),), version="libvirtd (libvirt) 11.3.0", release="11.3.0",
        source="bookworm-backports", daemon=str(daemon), packages={"libvirt-daemon": "11.3.0-2~bpo12+1"},
        env={"LD_LIBRARY_PATH": str(root / privapt.LIBDIR)},
        mounts=((str(root / "usr/share/libvirt"), "/usr/share/libvirt"),),
    )  # fmt: skip
    manifest = {"format": stack.MANIFEST_FORMAT, **build.to_meta()}
    (root.parent / "manifest.json").write_text(json.dumps(manifest))
    return build


def test_a_fetched_release_comes_from_its_manifest(tmp_path, monkeypatch):
    monkeypatch.setenv("VRMIG_CACHE", str(tmp_path))
    build = _fetched(tmp_path)
    assert stack.resolve_libvirt(None) == build == stack.resolve_libvirt("11.3", fetch=False)
    meta = build.to_meta()
    assert meta["source"] == "bookworm-backports" and meta["mounts"] == [[build.mounts[0][0], "/usr/share/libvirt"]]
    assert stack.LibvirtBuild.from_meta(json.loads(json.dumps(meta))) == build


def test_an_unfetched_release_names_the_make_target(tmp_path, monkeypatch):
    monkeypatch.setenv("VRMIG_CACHE", str(tmp_path))
    with pytest.raises(stack.StackError, match=r"LIBVIRT=11\.3 is not fetched here: run `make libvirt LIBVIRT=11\.3`"):
        stack.resolve_libvirt("11.3", fetch=False)


def test_an_unserved_release_lists_what_each_suite_serves(tmp_path, monkeypatch):
    monkeypatch.setenv("VRMIG_CACHE", str(tmp_path))
    served = {"bookworm-backports": "11.3.0-2~bpo12+1", "trixie": "11.3.0-3+deb13u3", "forky": None}
    monkeypatch.setattr(stack.privapt, "update", lambda base, suite: [suite])
    monkeypatch.setattr(stack.privapt, "candidate_version", lambda opts, pkg: served[opts[0]])
    assert stack.libvirt_served("11.3")[:2] == ("bookworm-backports", "11.3.0-2~bpo12+1")
    with pytest.raises(stack.StackError) as err:
        stack.libvirt_served("10.1")
    assert str(err.value) == (
        "LIBVIRT=10.1: no Debian suite serves it (bookworm-backports: 11.3.0; trixie: 11.3.0; forky: none): "
        "use one of those, or system"
    )


def _qemu(root: Path, source: str = "bookworm-backports") -> stack.QemuBuild:
    binary = root / "usr/bin/qemu-system-x86_64"
    fw = str(root / "usr/share/qemu")
    return stack.QemuBuild(
        spec="10.0", argv=(str(binary), "-L", fw), version="QEMU emulator version 10.0.2", release="10.0.2",
        source=source, binary=str(binary), firmware=(fw,),
    )  # fmt: skip


def test_the_host_qemu_is_its_own_emulator(tmp_path):
    host = stack.QemuBuild(
        spec="system", argv=("/usr/bin/qemu-system-x86_64",), version="QEMU emulator version 7.2.22",
        release="7.2.22", source="system", binary="/usr/bin/qemu-system-x86_64",
    )  # fmt: skip
    assert stack.emulator_script(host, tmp_path / "emu") == "/usr/bin/qemu-system-x86_64"
    assert not (tmp_path / "emu").exists() and stack.qemu_module_mount(host) is None


def test_a_release_runs_through_a_script_with_its_own_modules(tmp_path):
    root = tmp_path / "a root with spaces"
    (root / privapt.LIBDIR / "qemu").mkdir(parents=True)
    build = _qemu(root)
    assert stack.qemu_module_mount(build) == (str(root / privapt.LIBDIR / "qemu"), stack.QEMU_MODULE_DIR)
    path = Path(stack.emulator_script(build, tmp_path / "emu"))
    text = path.read_text()
    assert path.stat().st_mode & stat.S_IXUSR and text.startswith("#!/bin/sh\nexec ")
    words = shlex.split(text.splitlines()[1])
    assert words[0] == "exec" and words[2:7] == ["--mount", "--propagation", "private", "sh", "-c"]
    assert words[7:] == [stack._MODULE_MOUNT, "vrmig-qemu", *stack.qemu_module_mount(build), *build.argv, "$@"]
    subprocess.run(["sh", "-n", str(path)], check=True)  # it parses


def test_a_release_without_modules_or_a_users_build_runs_without_a_mount(tmp_path):
    build = _qemu(tmp_path)
    assert stack.qemu_module_mount(build) is None
    text = Path(stack.emulator_script(build, tmp_path / "emu")).read_text()
    assert "unshare" not in text and text.endswith(f'-L {tmp_path / "usr/share/qemu"} "$@"\n')
    (tmp_path / privapt.LIBDIR / "qemu").mkdir(parents=True)
    assert stack.qemu_module_mount(_qemu(tmp_path, source="path")) is None


def test_the_daemon_runs_with_its_environment_through_env():
    assert lvd.daemon_argv(None) == ["libvirtd"]
    build = stack.LibvirtBuild(
        spec="11.3", argv=("/c/libvirtd",), version="libvirtd (libvirt) 11.3.0", release="11.3.0",
        source="bookworm-backports", daemon="/c/libvirtd",
        env={"LIBVIRT_DRIVER_DIR": "/c/d", "LD_LIBRARY_PATH": "/c/l"},
    )  # fmt: skip
    assert lvd.daemon_argv(build) == ["env", "LD_LIBRARY_PATH=/c/l", "LIBVIRT_DRIVER_DIR=/c/d", "/c/libvirtd"]


def test_launch_script_passes_the_daemon_argv_through(tmp_path):
    """Without mount pairs the script only execs the argv after ``--`` with the daemon's options;
    paths with spaces and shell characters arrive as they are."""
    base = tmp_path / "b $(x) 'y'"
    res = subprocess.run(
        ["sh", "-c", lvd._LAUNCH, "vrmig-libvirtd", str(base), "--", "printf", "%s\\n"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert res.stdout.splitlines() == ["--listen", "-f", f"{base}/etc/libvirtd.conf", "-p", f"{base}/libvirtd.pid"]


def test_libvirt_spec_defaults_to_the_release_and_a_fieldless_scenario_to_the_hosts():
    class WithField:
        libvirt = None

    class WithSystem:
        libvirt = "system"

    assert lvdrv.libvirt_spec(WithField()) == stack.DEFAULT_LIBVIRT == "11.3"
    assert lvdrv.libvirt_spec(WithSystem()) == "system"
    assert lvdrv.libvirt_spec(object()) == "system"
