"""migrate.core.stack's LIBVIRT= and the private libvirtd's launch, without fetching or starting
anything: releases come from a manifest in a temporary cache, daemons are stand-in scripts."""

from __future__ import annotations

import contextlib
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


# -- LIBVIRT= on a lab: the release hosts-setup deployed, a daemon of the run's own there ------------
def test_the_lab_bundle_moves_every_path_of_the_release_into_the_deploy_dir(tmp_path, monkeypatch):
    from migrate.labs.bundles import libvirt_bundle

    monkeypatch.setenv("VRMIG_CACHE", str(tmp_path / "cache"))
    assert libvirt_bundle("/var/lib/vrmig", tmp_path / "out") is None  # never fetched here
    local = _fetched(tmp_path / "cache")
    root = str(Path(local.daemon).parents[2])
    b = libvirt_bundle("/var/lib/vrmig", tmp_path / "out")
    there = "/var/lib/vrmig/libvirt/11.3/root"
    assert b is not None and b["spec"] == "11.3" and Path(b["tar"]).is_file()
    moved = stack.LibvirtBuild.from_meta(b["json"])
    assert moved.argv == (f"{there}/usr/sbin/libvirtd",) and moved.daemon == f"{there}/usr/sbin/libvirtd"
    assert moved.env == {"LD_LIBRARY_PATH": f"{there}/{privapt.LIBDIR}"}
    assert moved.mounts == ((f"{there}/usr/share/libvirt", "/usr/share/libvirt"),)
    assert root not in json.dumps(b["json"]) and moved.version == local.version


def test_a_run_peer_uri_is_the_hosts_tls_uri_on_the_runs_own_port():
    from migrate.core.errors import ConfigError

    uri = "qemu+tls://198.19.255.2/system?pkipath=/etc/libvirt/pki"
    assert lvd.run_peer_uri(uri) == "qemu+tls://198.19.255.2:16515/system?pkipath=/etc/libvirt/pki"
    assert lvd.run_peer_uri("qemu+tls://[2001:db8::2]:16514/system") == "qemu+tls://[2001:db8::2]:16515/system"
    with pytest.raises(ConfigError, match=r"reached by its peer over TLS: give a qemu\+tls:// URI"):
        lvd.run_peer_uri("qemu+ssh://root@r2/system")


def _lab_rows(r1: dict, r2: dict) -> dict[str, dict]:
    return {"R1": {"role": "R1", "libvirt_stacks": r1}, "R2": {"role": "R2", "libvirt_stacks": r2}}


def _lab_release(version: str | None = "/var/lib/vrmig/libvirt/11.3/root/usr/sbin/libvirtd (libvirt) 11.3.0",
                 error: str | None = None) -> dict:  # fmt: skip
    record = {"spec": "11.3", "argv": ["/var/lib/vrmig/libvirt/11.3/root/usr/sbin/libvirtd"], "version": "x",
              "release": "11.3.0", "source": "bookworm-backports", "daemon": "/d", "env": {}, "mounts": []}  # fmt: skip
    return {"11.3": {"record": record, "version": version, "error": error}}


def test_a_labs_libvirt_release_is_the_one_hosts_setup_deployed_on_both_hosts():
    """Synthetic hosts-check rows (what probe_host.libvirt_stacks reports)."""
    from migrate.core.errors import ConfigError
    from migrate.experiment.place import lab_libvirt_release

    facts, st = lab_libvirt_release(_lab_rows(_lab_release(), _lab_release()), "11.3", {"libvirt": {"binding": "b"}})
    v = "libvirtd (libvirt) 11.3.0"
    assert facts == {"binding": "b", "daemon": v, "daemon_by_host": {"R1": v, "R2": v}}
    assert st["deployed"] is True and st["spec"] == "11.3" and st["version"] == "libvirtd (libvirt) 11.3.0"
    assert stack.LibvirtBuild.from_meta(st).argv == ("/var/lib/vrmig/libvirt/11.3/root/usr/sbin/libvirtd",)
    with pytest.raises(ConfigError, match=r"LIBVIRT=11\.3 does not run on R2 \(R2: not deployed; .*make hosts-setup"):
        lab_libvirt_release(_lab_rows(_lab_release(), {}), "11.3", {})
    with pytest.raises(ConfigError, match=r"does not run on R1 \(R1: libvirt\.so\.0: cannot open"):
        lab_libvirt_release(_lab_rows(_lab_release(None, "libvirt.so.0: cannot open"), _lab_release()), "11.3", {})
    other = _lab_release("libvirtd (libvirt) 11.3.1")
    with pytest.raises(ConfigError, match=r"LIBVIRT=11\.3 differs between R1 and R2"):
        lab_libvirt_release(_lab_rows(_lab_release(), other), "11.3", {})


def test_the_probe_reports_a_deployed_libvirt_and_why_one_does_not_run(tmp_path):
    from migrate.testbed import probe_host

    assert probe_host.libvirt_stacks(str(tmp_path)) == {}
    good = _script(tmp_path / "good" / "libvirtd", '[ "$X" = 1 ] && echo "$0 (libvirt) 11.3.0"\n')
    bad = _script(tmp_path / "bad" / "libvirtd", 'echo "libvirt.so.0: cannot open shared object file" >&2; exit 127\n')
    for spec, daemon in (("11.3", good), ("12.0", bad)):
        (tmp_path / "libvirt" / spec).mkdir(parents=True)
        rec = {"argv": [str(daemon)], "env": {"X": "1"}}
        (tmp_path / "libvirt" / spec / "libvirt.json").write_text(json.dumps(rec))
    got = probe_host.libvirt_stacks(str(tmp_path))
    assert got["11.3"]["version"] == f"{good} (libvirt) 11.3.0" and got["11.3"]["error"] is None
    assert got["12.0"]["version"] is None and got["12.0"]["error"] == "libvirt.so.0: cannot open shared object file"


def test_a_lab_takes_a_libvirt_release_only_over_tls(tmp_path):
    from migrate.core.errors import ConfigError
    from migrate.experiment.place import lab_supports
    from migrate.model.scenario import Scenario
    from migrate.testbed.inventory import load
    from tests.unit.test_lab import _render  # the emulated lab's inventory, rendered

    path = _render(tmp_path)
    inv = load(path)
    lab_supports(Scenario(driver="libvirt", libvirt="11.3"), inv)
    path.write_text(path.read_text().replace("qemu+tls://", "qemu+tcp://"))
    with pytest.raises(ConfigError, match=r"give a qemu\+tls:// URI"):
        lab_supports(Scenario(driver="libvirt", libvirt="11.3"), load(path))


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state in ("Z", "X")


@pytest.mark.parametrize("whom", ["shell", "group"])
def test_a_lab_runs_libvirtd_takes_its_qemus_with_it_however_it_is_stopped(tmp_path, whom):
    """The launch script of a lab run's libvirtd, run here with a stand-in daemon that starts a
    stand-in QEMU in a session of its own (as libvirt does) and writes its pid file: SIGTERM to the
    shell (the run's stop) or to its process group (the guard, when the SSH channel closes) ends
    the daemon, then the QEMU; a process whose command line names no domain is left alone."""
    import os
    import signal
    import time

    base, pki = tmp_path / "b", tmp_path / "pki"
    for d in (base / "run" / "qemu", base / "etc", pki):
        d.mkdir(parents=True)
    (pki / "cacert.pem").write_text("ca")
    qemu = "import time; time.sleep(300)"
    daemon = _script(
        tmp_path / "libvirtd",
        f'setsid python3 -c "{qemu}" -name guest=vrmig-x,debug-threads=on &\n'
        f'echo $! > "{base}/run/qemu/vrmig-x.pid"\n'
        f'setsid python3 -c "{qemu}" other &\n'
        f'echo $! > "{base}/run/qemu/not-a-domain.pid"\n'
        "exec sleep 300\n",
    )
    sh = subprocess.Popen(
        ["sh", "-c", lvd._LAB_LAUNCH, "vrmig-libvirtd", str(base), "--", str(daemon)],
        env={**os.environ, "LAB_PKI": str(pki)}, start_new_session=True,
    )  # fmt: skip
    pids: dict[str, int] = {}
    try:
        deadline = time.monotonic() + 10
        while len(pids) < 2 and time.monotonic() < deadline:
            for name in ("vrmig-x", "not-a-domain"):
                with contextlib.suppress(OSError, ValueError):
                    pids[name] = int((base / "run" / "qemu" / f"{name}.pid").read_text())
            time.sleep(0.05)
        assert len(pids) == 2 and (base / "etc" / "pki" / "cacert.pem").read_text() == "ca"
        os.killpg(sh.pid, signal.SIGTERM) if whom == "group" else sh.send_signal(signal.SIGTERM)
        assert sh.wait(timeout=10) != 0
        deadline = time.monotonic() + 5
        while not _gone(pids["vrmig-x"]) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _gone(pids["vrmig-x"]), "the domain's QEMU outlived its daemon"
        assert not _gone(pids["not-a-domain"])
    finally:
        if sh.poll() is None:
            os.killpg(sh.pid, signal.SIGKILL)
            sh.wait()
        for pid in pids.values():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_hosts_check_compares_the_deployed_libvirt_releases_of_r1_and_r2():
    """Synthetic hosts-check rows."""
    from migrate.labs.check import ERROR, WARNING, HostRow, compare_libvirt_releases

    def row(role: str, stacks: dict) -> HostRow:
        return HostRow(role, "root@198.19.128.18", "yes", libvirt_stacks=stacks)

    good = _lab_release()
    assert compare_libvirt_releases([row("R1", good), row("R2", good)], "lab.toml") == []
    assert compare_libvirt_releases([row("R1", {}), row("R2", {})], "lab.toml") == []  # none deployed: optional
    missing = compare_libvirt_releases([row("R1", good), row("R2", {})], "lab.toml")
    assert [(p.role, p.severity) for p in missing] == [("R2", WARNING)]
    assert "libvirt 11.3 is not deployed: runs with LIBVIRT=11.3 need it on R1 and R2" in missing[0].message
    broken = compare_libvirt_releases([row("R1", good), row("R2", _lab_release(None, "no libvirt.so"))], "lab.toml")
    assert [(p.role, p.severity) for p in broken] == [("R2", WARNING)] and "does not run (no libvirt.so)" in (
        broken[0].message
    )
    differ = compare_libvirt_releases([row("R1", good), row("R2", _lab_release("libvirtd (libvirt) 11.3.1"))], "x")
    assert [p.severity for p in differ] == [ERROR] and "(R1: 11.3.0; R2: 11.3.1)" in differ[0].message


class _HostFiles:
    """A lab testbed's file operations on one host, over a directory of this machine."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.inventory = type("Inv", (), {"deploy_dir": "/srv/vrmig"})()
        self.writes: list[str] = []

    def run_dir(self) -> str:
        return "/srv/vrmig/runs/vm000000"

    def _p(self, path: str) -> Path:
        return self.root / path.lstrip("/")

    def run(self, host, argv, timeout_s=30.0):
        if argv[0] == "ls":
            d = self._p(argv[1])
            out = "\n".join(sorted(p.name for p in d.iterdir())) if d.is_dir() else ""
            return subprocess.CompletedProcess(argv, 0 if d.is_dir() else 2, out.encode(), b"")
        assert argv[:2] == ["mkdir", "-p"], argv
        self._p(argv[2]).mkdir(parents=True, exist_ok=True)
        return subprocess.CompletedProcess(argv, 0, b"", b"")

    def read_bytes(self, host, path):
        p = self._p(path)
        return p.read_bytes() if p.is_file() else None

    def write_atomic(self, host, path, data):
        self.writes.append(path)
        self._p(path).write_bytes(data)


def test_a_runs_own_libvirtd_starts_with_the_capabilities_its_release_probed_before_on_that_host(tmp_path):
    """The run's daemon's capabilities cache is seeded from the host's cache of its release and
    what it probed goes back there; files that are the same are not written again, and a host
    without the cache (the first run) is no error."""
    tb = _HostFiles(tmp_path)
    build = stack.LibvirtBuild(spec="11.3", argv=("/d/libvirtd",), version="libvirtd (libvirt) 11.3.0",
                               release="11.3.0", source="trixie", daemon="/d/libvirtd")  # fmt: skip
    registry = type("Reg", (), {"dir": tmp_path})()
    d = lvd.LabRunLibvirtd("R1", tb, build, "198.18.3.1", "qemu+tls://r1:16514/system", registry, tmp_path)
    shared = d.caps_cache()
    assert shared == "/srv/vrmig/cache/libvirt-11.3.0/qemu-capabilities"
    run_caps = f"{d.base}/{lvd.CAPS_SUBDIR}"
    d._copy_caps(shared, run_caps)  # the first run: nothing cached yet
    assert tb.writes == []
    tb._p(run_caps).mkdir(parents=True)
    (tb._p(run_caps) / "abc.xml").write_text("<qemuCaps>probed</qemuCaps>")
    (tb._p(run_caps) / "abc.xml.tmp-other").write_text("not a cache file")
    d._copy_caps(run_caps, shared)  # the daemon stopped: its probe is kept
    assert tb.writes == [f"{shared}/abc.xml"]
    assert (tb._p(shared) / "abc.xml").read_text() == "<qemuCaps>probed</qemuCaps>"
    seeded = "/run/next/cache/qemu/capabilities"
    d._copy_caps(shared, seeded)  # the next run's daemon starts with it
    assert (tb._p(seeded) / "abc.xml").read_text() == "<qemuCaps>probed</qemuCaps>"
    tb.writes.clear()
    d._copy_caps(seeded, shared)  # unchanged: not written again
    assert tb.writes == []
