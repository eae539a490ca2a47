"""migrate.core.stack: QEMU= as data (system, a Debian release, a path), without fetching anything:
releases come from a manifest written into a temporary cache, paths are stand-in scripts."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from migrate.core import stack
from migrate.core.errors import ConfigError
from migrate.model.scenario import Scenario, qemu_spec


def test_upstream_version_of_debian_versions():
    assert stack.upstream("1:10.0.2+ds-2+deb13u1~bpo12+1") == "10.0.2"
    assert stack.upstream("1:7.2+dfsg-7+deb12u18") == "7.2"
    assert stack.upstream("1:11.1.2+ds-3") == "11.1.2"
    assert stack.upstream("10.0.13-1") == "10.0.13"


def test_a_release_matches_its_own_prefix_only():
    assert stack.matches("10.0.2", "10.0") and stack.matches("10.0.2", "10.0.2")
    assert not stack.matches("10.0.20", "10.0.2") and not stack.matches("10.0.2", "1")
    assert not stack.matches("11.0.1", "10.0")


@pytest.mark.parametrize("spec", ["system", "10.0", "10.0.13", "/opt/qemu/bin/qemu-system-x86_64"])
def test_the_three_forms_are_accepted(spec):
    stack.check_spec(spec)


@pytest.mark.parametrize("spec", ["ten", "10", "v10.0", "qemu-system-x86_64", "10.0.2.1", ""])
def test_anything_else_is_one_line_naming_the_forms(spec):
    with pytest.raises(stack.StackError, match=r"is not a QEMU: use system .* a release such as 10\.0"):
        stack.check_spec(spec)


def test_the_default_stack_and_its_exceptions():
    assert qemu_spec(Scenario()) == stack.DEFAULT_QEMU == "10.0"
    assert qemu_spec(Scenario(driver="libvirt")) == "10.0"  # under the fetched libvirt 11.3
    assert qemu_spec(Scenario(driver="libvirt", libvirt="system")) == "system"  # the host libvirt's own QEMU
    assert qemu_spec(Scenario(qemu="system")) == "system"
    assert qemu_spec(Scenario(qemu="10.0.13")) == "10.0.13"


def test_scenario_refuses_what_qemu_cannot_apply_to():
    with pytest.raises(ConfigError, match="HV=kvm's router VM"):
        Scenario(hv="criu", router="bird", qemu="10.0")
    with pytest.raises(ConfigError, match="QEMU_FIRMWARE=/x goes with QEMU=<the path"):
        Scenario(qemu="10.0", qemu_firmware="/x")
    Scenario(driver="libvirt", qemu="system")  # the host's: fine
    Scenario(driver="libvirt", qemu="10.0.13")  # a fetched libvirt runs any QEMU=
    Scenario(driver="libvirt", libvirt="system", qemu="system")
    Scenario(driver="libvirt", libvirt="system", qemu="10.0")  # the host's libvirt 9.0 runs QEMU 10.0 too


def test_scenario_refuses_what_libvirt_cannot_apply_to():
    with pytest.raises(ConfigError, match=r"LIBVIRT=11\.3 chooses the libvirtd of DRIVER=libvirt"):
        Scenario(libvirt="11.3")
    with pytest.raises(ConfigError, match="LIBVIRT='eleven' is not a libvirt"):
        Scenario(driver="libvirt", libvirt="eleven")
    assert Scenario(driver="libvirt", libvirt="11.3").libvirt == "11.3"


def _fake_qemu(path: Path, line: str = "QEMU emulator version 9.2.50 (v9.2.0-1234-gabcdef)") -> Path:
    """A stand-in executable that answers --version like a QEMU build."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\necho '{line}'\necho 'Copyright (c) 2003-2025 Fabrice Bellard and the QEMU Project'\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_a_users_installed_build_finds_its_share_dir_and_records_its_digest(tmp_path):
    binary = _fake_qemu(tmp_path / "opt" / "bin" / "qemu-system-x86_64")
    (tmp_path / "opt" / "share" / "qemu").mkdir(parents=True)
    build = stack.resolve_qemu(str(binary))
    assert (build.source, build.release, build.binary) == ("path", "9.2.50", str(binary))
    assert build.firmware[0] == str((tmp_path / "opt" / "share" / "qemu").resolve())
    assert build.argv[:3] == (str(binary), "-L", build.firmware[0])
    assert build.sha256 is not None and len(build.sha256) == 64
    assert build.command("-machine", "none")[-2:] == ["-machine", "none"]


def test_a_build_tree_finds_pc_bios_and_a_given_firmware_dir_wins(tmp_path):
    binary = _fake_qemu(tmp_path / "build" / "qemu-system-x86_64")
    (tmp_path / "build" / "pc-bios").mkdir()
    assert stack.resolve_qemu(str(binary)).firmware[0] == str((tmp_path / "build" / "pc-bios").resolve())
    given = tmp_path / "fw"
    given.mkdir()
    assert stack.resolve_qemu(str(binary), firmware=str(given)).firmware[0] == str(given)


def test_a_path_that_is_no_qemu_is_one_line(tmp_path):
    with pytest.raises(stack.StackError, match="no executable file there"):
        stack.resolve_qemu(str(tmp_path / "nothing"))
    not_qemu = _fake_qemu(tmp_path / "ls", line="ls (GNU coreutils) 9.1")
    with pytest.raises(stack.StackError, match=r"is not a working QEMU \(--version: "):
        stack.resolve_qemu(str(not_qemu))
    with pytest.raises(stack.StackError, match=r"QEMU_FIRMWARE=.*no such directory"):
        stack.resolve_qemu(str(_fake_qemu(tmp_path / "q")), firmware=str(tmp_path / "nofw"))
    with pytest.raises(stack.StackError, match="goes with QEMU=<path"):
        stack.resolve_qemu("10.0", firmware=str(tmp_path))


def test_a_fetched_release_comes_from_its_manifest(tmp_path, monkeypatch):
    monkeypatch.setenv("VRMIG_CACHE", str(tmp_path))
    with pytest.raises(stack.StackError, match=r"QEMU=10\.0 is not fetched here: run `make qemu QEMU=10\.0`"):
        stack.resolve_qemu("10.0", fetch=False)
    root = tmp_path / "qemu" / "10.0" / "root"
    binary = _fake_qemu(root / "usr" / "bin" / "qemu-system-x86_64", "QEMU emulator version 10.0.2 (Debian)")
    argv, fw = stack.release_argv(root, own_libs=False)
    manifest = {
        "format": stack.MANIFEST_FORMAT, "spec": "10.0", "argv": argv, "version": "QEMU emulator version 10.0.2",
        "release": "10.0.2", "source": "bookworm-backports", "binary": str(binary),
        "packages": {"qemu-system-x86": "1:10.0.2+ds-2+deb13u1~bpo12+1"}, "firmware": fw,
    }  # fmt: skip
    (tmp_path / "qemu" / "10.0" / "manifest.json").write_text(json.dumps(manifest))
    build = stack.resolve_qemu(None, fetch=False)  # the default stack
    assert (build.spec, build.release, build.source) == ("10.0", "10.0.2", "bookworm-backports")
    assert build.argv[0] == str(binary) and build.to_meta()["packages"]["qemu-system-x86"].startswith("1:10.0.2")


def test_a_release_needing_its_own_libc_runs_through_its_loader(tmp_path):
    argv, _fw = stack.release_argv(tmp_path, own_libs=True)
    assert argv[0].endswith("/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2") and argv[1] == "--library-path"
    assert argv[3] == str(tmp_path / "usr" / "bin" / "qemu-system-x86_64")


def test_library_closure_of_apt_cache_depends():
    text = "qemu-system-x86\n  Depends: libc6\nlibc6\nlibglib2.0-0t64\nzlib1g\n<libfoo-virtual>\nseabios\nlibfoo-dev\n"
    assert stack._library_packages(text) == ["libc6", "libglib2.0-0t64", "zlib1g"]


def test_a_stack_axis_makes_separate_points_and_a_point_never_pools_builds():
    """Synthetic records: QEMU= is part of a point's key (its knobs text); one point whose runs
    ran two QEMU builds (the default stack before and after it changed) is refused."""
    from analysis.stats.aggregate import mixed_qemu, point_key, run_record
    from migrate.campaigns.reporting import check_qemu_builds

    def rec(qemu_spec, version):
        scen = {"hv": "kvm", "mode": "precopy", "rate_bps": 100_000_000, "frame_bytes": 1500, "qemu": qemu_spec}
        meta = {"scenario": scen, "status": "completed", "accel": "tcg", "hypervisor": {"qemu": version}}
        return run_record({}, meta, series="s")

    v7, v10 = "QEMU emulator version 7.2.22 (Debian 1:7.2+dfsg-7+deb12u18)", "QEMU emulator version 10.0.2 (Debian)"
    system, ten = rec("system", v7), rec("10.0", v10)
    assert system["knobs"] == "QEMU=system" and ten["knobs"] == "QEMU=10.0"
    assert point_key(system) != point_key(ten)
    assert mixed_qemu([system, ten]) == []
    before, after = rec(None, v7), rec(None, v10)
    assert before["knobs"] is None and point_key(before) == point_key(after)
    assert mixed_qemu([before, after, after]) == [
        f"point s 100M 1500 B mixes QEMU builds ({v10}: 2 runs; {v7}: 1 runs)"
    ]
    with pytest.raises(ConfigError, match="a point must not pool QEMU or router builds; name the stack with QEMU="):
        check_qemu_builds([before, after])


def _rows(stacks_r1, stacks_r2, system="QEMU emulator version 7.2.22 (Debian 1:7.2+dfsg-7+deb12u18)"):
    """A synthetic hosts-check of a lab's R1 and R2 (what probe_host reports)."""
    return {"hosts": [{"role": r, "kvm": False, "kvm_reason": "no vmx", "versions": {"qemu-system-x86_64": system},
                       "stacks": st} for r, st in (("R1", stacks_r1), ("R2", stacks_r2))]}  # fmt: skip


def _deployed(version="QEMU emulator version 10.0.2 (Debian 1:10.0.2+ds-2+deb13u1~bpo12+1)", emulator_ok=False):
    binary = "/var/lib/vrmig/qemu/10.0/root/usr/bin/qemu-system-x86_64"
    record = {"spec": "10.0", "release": "10.0.2", "source": "bookworm-backports", "binary": binary,
              "argv": [binary, "-L", "/var/lib/vrmig/qemu/10.0/root/usr/share/qemu"], "version": version,
              "emulator": "/var/lib/vrmig/qemu/10.0/emulator"}  # fmt: skip
    return {"10.0": {"record": record, "version": version, "error": None, "emulator_ok": emulator_ok}}


def test_a_lab_runs_the_default_stack_hosts_setup_deployed():
    from migrate.experiment.place import lab_facts

    facts = lab_facts(_rows(_deployed(), _deployed()), Scenario(), {})
    assert facts["qemu_argv"][0] == "/var/lib/vrmig/qemu/10.0/root/usr/bin/qemu-system-x86_64"
    assert facts["qemu"].startswith("QEMU emulator version 10.0.2") and facts["stack"]["qemu"]["deployed"] is True
    assert lab_facts(_rows({}, {}), Scenario(qemu="system"), {})["qemu_argv"] == ["qemu-system-x86_64"]
    # a stack the lab's hosts lack is bad input: one line, exit 2
    with pytest.raises(ConfigError, match=r"QEMU=10\.0 is not deployed on R2 .*run make hosts-setup"):
        lab_facts(_rows(_deployed(), {}), Scenario(), {})
    with pytest.raises(ConfigError, match=r"QEMU=10\.0 differs between R1 and R2"):
        lab_facts(_rows(_deployed(), _deployed("QEMU emulator version 10.0.3")), Scenario(), {})


def test_a_labs_libvirt_runs_the_deployed_release_by_its_emulator_script():
    from migrate.experiment.place import lab_facts

    libvirt = Scenario(driver="libvirt")
    rows = _rows(_deployed(emulator_ok=True), _deployed(emulator_ok=True))
    for r in rows["hosts"]:
        r["versions"]["libvirtd"] = "/usr/sbin/libvirtd (libvirt) 9.0.0"
    facts = lab_facts(rows, libvirt, {"libvirt": {"binding": "9.0.0"}})
    assert facts["stack"]["qemu"]["emulator"] == "/var/lib/vrmig/qemu/10.0/emulator"
    assert facts["stack"]["libvirt"]["version"] == "libvirtd (libvirt) 9.0.0"  # the hosts', not this machine's
    v9 = "libvirtd (libvirt) 9.0.0"
    assert facts["libvirt"] == {"binding": "9.0.0", "daemon": v9, "daemon_by_host": {"R1": v9, "R2": v9}}
    # deployed by a hosts-setup that wrote no <emulator> script: refused, DRIVER=qmp still runs
    with pytest.raises(ConfigError, match=r"QEMU=10\.0 on R2 has no <emulator> script .*run make hosts-setup"):
        lab_facts(_rows(_deployed(emulator_ok=True), _deployed()), libvirt, {})
    assert lab_facts(_rows(_deployed(), _deployed()), Scenario(), {})["stack"]["qemu"]["deployed"]
    hosts_own = lab_facts(_rows({}, {}), Scenario(driver="libvirt", qemu="system"), {})  # nothing deployed needed
    assert hosts_own["stack"]["qemu"]["spec"] == "system" and hosts_own["qemu_argv"] == ["qemu-system-x86_64"]


def test_hosts_check_compares_the_deployed_stack_across_hypervisor_hosts():
    from migrate.labs.check import ERROR, WARNING, HostRow, compare_stacks

    def row(role, stacks):
        return HostRow(role, "root@198.19.128.18", "yes", stacks=stacks)

    assert compare_stacks([row("R1", _deployed()), row("R2", _deployed())], "lab.toml") == []
    missing = compare_stacks([row("R1", _deployed()), row("R2", {})], "lab.toml")
    assert [(p.role, p.severity) for p in missing] == [("R2", WARNING)]
    assert "QEMU 10.0 (the default stack) not deployed: run make hosts-setup TESTBED=lab.toml" in missing[0].message
    differ = compare_stacks([row("R1", _deployed()), row("R2", _deployed("QEMU emulator version 10.0.3"))], "lab.toml")
    assert [p.severity for p in differ] == [ERROR] and "differs between the hypervisor hosts" in differ[0].message


def test_the_lab_bundle_translates_the_release_into_the_deploy_dir(tmp_path, monkeypatch):
    from migrate.labs.bundles import qemu_bundle

    monkeypatch.setenv("VRMIG_CACHE", str(tmp_path / "cache"))
    assert qemu_bundle("/var/lib/vrmig", tmp_path / "out") is None  # never fetched here
    root = tmp_path / "cache" / "qemu" / "10.0" / "root"
    binary = _fake_qemu(root / "usr" / "bin" / "qemu-system-x86_64", "QEMU emulator version 10.0.2 (Debian)")
    (root / "usr" / "share" / "qemu").mkdir(parents=True)
    argv, fw = stack.release_argv(root, own_libs=False)
    manifest = {"format": stack.MANIFEST_FORMAT, "spec": "10.0", "argv": argv, "version": "QEMU 10.0.2",
                "release": "10.0.2", "source": "bookworm-backports", "binary": str(binary), "packages": {},
                "firmware": fw}  # fmt: skip
    (root.parent / "manifest.json").write_text(json.dumps(manifest))
    (tmp_path / "out").mkdir()
    b = qemu_bundle("/var/lib/vrmig", tmp_path / "out")
    there = "/var/lib/vrmig/qemu/10.0/root"
    assert b is not None and b["spec"] == "10.0" and Path(b["tar"]).is_file()
    assert b["json"]["argv"][:3] == [f"{there}/usr/bin/qemu-system-x86_64", "-L", f"{there}/usr/share/qemu"]
    assert b["json"]["binary"] == f"{there}/usr/bin/qemu-system-x86_64"
    # the <emulator> script of the hosts' libvirtd execs that argv there, never this machine's
    assert b["json"]["emulator"] == "/var/lib/vrmig/qemu/10.0/emulator"
    assert b["emulator"].startswith("#!/bin/sh\nexec ") and str(root) not in b["emulator"]
    assert f"{there}/usr/bin/qemu-system-x86_64 -L {there}/usr/share/qemu" in b["emulator"]
    assert "unshare" not in b["emulator"]  # no module directory in this release
    (root / "usr" / "lib" / "x86_64-linux-gnu" / "qemu").mkdir(parents=True)
    b = qemu_bundle("/var/lib/vrmig", tmp_path / "out")
    assert b is not None
    assert "/usr/bin/unshare --mount --propagation private sh -c" in b["emulator"]
    assert f"{there}/usr/lib/x86_64-linux-gnu/qemu /usr/lib/x86_64-linux-gnu/qemu" in b["emulator"]


def test_a_points_stack_text_names_qemu_libvirt_and_a_router_other_than_the_default():
    from analysis.stats.aggregate import stack_text

    assert stack_text({}) == "" and stack_text({"router": "frr"}) == ""
    assert stack_text({"qemu": "10.0", "router": "frr@8.4"}) == "QEMU=10.0 ROUTER=frr@8.4"
    assert stack_text({"libvirt": "system", "router": "bird"}) == "LIBVIRT=system ROUTER=bird"


def test_a_lab_run_needs_routers_image_on_both_hosts_as_built_here(tmp_path, monkeypatch):
    """Synthetic hosts-check rows against a synthetic local image manifest."""
    import hashlib
    import types

    import routers.guest
    from migrate.experiment.place import lab_router_image
    from migrate.labs.check import HostRow, compare_images

    (tmp_path / "manifest.json").write_text('{"router": {"version": "10.3-3"}}')
    image = types.SimpleNamespace(kernel=tmp_path / "vmlinuz")
    monkeypatch.setattr(routers.guest, "guest_image", lambda profile, verify=True: image)
    here = {"manifest_sha256": hashlib.sha256((tmp_path / "manifest.json").read_bytes()).hexdigest()}
    other = {"manifest_sha256": "0" * 64, "router_version": "10.3-2"}
    rows = {"R1": {"images": {"frr": here}}, "R2": {"images": {"frr": here}}}
    lab_router_image(rows, "frr", "lab.toml")
    with pytest.raises(ConfigError, match=r"ROUTER=bird is not on R1: run make hosts-setup TESTBED=lab.toml"):
        lab_router_image(rows, "bird", "lab.toml")
    with pytest.raises(ConfigError, match=r"ROUTER=frr on R2 is another build than this machine's \(10.3-2\)"):
        lab_router_image({**rows, "R2": {"images": {"frr": other}}}, "frr", "lab.toml")
    lab_router_image({"R1": {}, "R2": {}}, "bird", "lab.toml")  # a check from before the image probe
    same = [HostRow(r, "x", "yes", images={"frr": here}) for r in ("R1", "R2")]
    assert compare_images(same, "lab.toml") == []
    differ = [HostRow("R1", "x", "yes", images={"frr": here}), HostRow("R2", "x", "yes", images={"frr": other})]
    assert "router image frr differs between the hypervisor hosts (R1: ?; R2: 10.3-2)" in (
        compare_images(differ, "lab.toml")[0].message
    )


def test_a_labs_libvirt_knobs_are_judged_by_the_hosts_libvirtd():
    """Synthetic hosts with libvirt 9.0: this machine's libvirtd 11.3 would take zstd, theirs cannot."""
    from migrate.experiment.place import check_knobs, lab_facts

    rows = _rows(_deployed(emulator_ok=True), _deployed(emulator_ok=True))
    for r in rows["hosts"]:
        r["versions"]["libvirtd"] = "/usr/sbin/libvirtd (libvirt) 9.0.0"
    zstd = Scenario(driver="libvirt", multifd_channels=2, multifd_compression="zstd")
    local = {"libvirt": {"daemon": "libvirtd (libvirt) 11.3.0"}}
    check_knobs(zstd, local, probe=False)  # this machine's libvirtd has it
    with pytest.raises(ConfigError, match=r"MULTIFD_COMPRESSION=zstd needs libvirt 9\.4\.0 or later .* is 9\.0\.0"):
        check_knobs(zstd, lab_facts(rows, zstd, local), probe=False)
