"""A profile's OCI image under HV=criu, without root or a container: the seccomp filter that lets
CRIU dump FRR's zebra (run on an interpreter of classic BPF), FRR's daemons file and group file
edits, the staged copy (hard links, the configuration written beside them), the image's run
configuration and meta.json record from a layout built here, the container's argv, and criu's
--file-locks."""

from __future__ import annotations

import hashlib
import json
import os
import struct
import subprocess
from pathlib import Path

import pytest

from migrate.drivers.criu import nlfilter, ocict
from migrate.drivers.criu.tool import dump_args, restore_args
from routers.errors import ProfileFileError
from routers.oci_image import image_config

DAEMONS = 'zebra=yes\nbgpd=no\nbfdd=no\nzebra_options="  -A 127.0.0.1 -s 90000000"\nbgpd_options="   -A 127.0.0.1"\n'


def run_bpf(prog: list[tuple[int, int, int, int]], data: bytes) -> int:
    """The return value of a classic BPF program (loads, equality jumps, returns) on ``data``."""
    pc, acc = 0, 0
    while True:
        code, jt, jf, k = prog[pc]
        if code == 0x20:  # BPF_LD | BPF_W | BPF_ABS
            acc = struct.unpack_from("<I", data, k)[0]
            pc += 1
        elif code == 0x15:  # BPF_JMP | BPF_JEQ | BPF_K
            pc += 1 + (jt if acc == k else jf)
        elif code == 0x06:  # BPF_RET | BPF_K
            return k
        else:
            raise AssertionError(f"unexpected BPF code {code:#x}")


def seccomp_data(nr: int, args: tuple[int, ...], arch: int = nlfilter.AUDIT_ARCH_X86_64) -> bytes:
    """struct seccomp_data: nr, arch, instruction pointer, six arguments."""
    full = (*args, *([0] * (6 - len(args))))
    return struct.pack("<iIQ6Q", nr, arch, 0, *full)


def test_the_filter_refuses_only_netlink_memberships_beyond_bind():
    prog = nlfilter.program()
    refused = nlfilter.SECCOMP_RET_ERRNO | nlfilter.ENOPROTOOPT
    setsockopt = nlfilter.NR_SETSOCKOPT_X86_64
    assert run_bpf(prog, seccomp_data(setsockopt, (5, 270, 1, 0, 4))) == refused
    for nr, args in [
        (setsockopt, (5, 270, 11)),  # NETLINK_EXT_ACK
        (setsockopt, (5, 1, 1)),  # SOL_SOCKET, SO_DEBUG
        (setsockopt, (5, 270, 2)),  # NETLINK_DROP_MEMBERSHIP
        (41, (16, 3, 0)),  # socket(AF_NETLINK, ...)
        (setsockopt + 1, (5, 270, 1)),  # getsockopt
    ]:
        assert run_bpf(prog, seccomp_data(nr, args)) == nlfilter.SECCOMP_RET_ALLOW, (nr, args)
    assert run_bpf(prog, seccomp_data(setsockopt, (5, 270, 1), arch=0x40000003)) == nlfilter.SECCOMP_RET_ALLOW


def test_frr_daemons_switches_on_the_peering_daemons():
    out = ocict.frr_daemons(DAEMONS, ["bgp", "bfd"])
    assert "bgpd=yes" in out and "bfdd=yes" in out and "zebra=yes" in out and "bgpd=no" not in out
    assert ocict.frr_daemons(DAEMONS, []) == DAEMONS
    assert ocict.frr_daemons("zebra=yes\n", ["ospf"]).endswith("ospfd=yes\n")


def test_frr_daemons_as_root_keeps_root_for_every_daemon():
    out = ocict.frr_daemons(DAEMONS, [], as_root=True)
    assert 'zebra_options="  -A 127.0.0.1 -s 90000000 -u root -g root"' in out
    assert 'bgpd_options="   -A 127.0.0.1 -u root -g root"' in out
    assert out.endswith("FRR_USER=root\nFRR_GROUP=root\n")


def test_root_joins_the_vty_group_once():
    text = "root:x:0:\nfrrvty:x:101:frr\nfrr:x:102:\n"
    once = ocict.with_member(text, "frrvty", "root")
    assert once == "root:x:0:\nfrrvty:x:101:frr,root\nfrr:x:102:\n"
    assert ocict.with_member(once, "frrvty", "root") == once
    assert ocict.with_member("frrvty:x:101:\n", "frrvty", "root") == "frrvty:x:101:root\n"


def test_cap_sys_resource_is_read_from_the_effective_set():
    assert ocict.lacks_sys_resource("Name:\tx\nCapEff:\t000001fffeffffff\n") is True
    assert ocict.lacks_sys_resource("CapEff:\t000001ffffffffff\n") is False


@pytest.fixture
def unpacked(tmp_path: Path) -> Path:
    """A small unpacked image: FRR's config, daemons file, group file, a binary."""
    root = tmp_path / "unpacked"
    (root / "etc/frr").mkdir(parents=True)
    (root / "usr/bin").mkdir(parents=True)
    (root / "etc/frr/frr.conf").write_text("! the image's own\n")
    os.chmod(root / "etc/frr/frr.conf", 0o640)
    (root / "etc/frr/daemons").write_text(DAEMONS)
    (root / "etc/group").write_text("frrvty:x:101:frr\n")
    (root / "usr/bin/tool").write_text("#!/bin/sh\n")
    return root


def test_stage_links_the_image_and_writes_the_config_beside_it(tmp_path, unpacked):
    dest = ocict.stage(unpacked, tmp_path / "R1", "/etc/frr/frr.conf", "hostname r\n", "frr", ["bgp"])
    conf = dest / "etc/frr/frr.conf"
    assert conf.read_text() == "hostname r\n" and conf.stat().st_mode & 0o777 == 0o640
    assert (unpacked / "etc/frr/frr.conf").read_text() == "! the image's own\n"  # not written through
    assert (dest / "usr/bin/tool").stat().st_ino == (unpacked / "usr/bin/tool").stat().st_ino  # a hard link
    assert (
        "bgpd=yes" in (dest / "etc/frr/daemons").read_text() and "bgpd=no" in (unpacked / "etc/frr/daemons").read_text()
    )
    assert (dest / "etc/group").read_text() == "frrvty:x:101:frr\n"
    other = ocict.stage(unpacked, tmp_path / "R2", "/etc/new/router.conf", "x\n", "bird", ["bgp"])
    assert (other / "etc/new/router.conf").read_text() == "x\n"
    assert (other / "etc/frr/daemons").read_text() == DAEMONS  # not FRR: its daemons file is not touched


def test_stage_as_root_hands_frr_its_files(tmp_path, unpacked, monkeypatch):
    owned: list[str] = []
    monkeypatch.setattr(ocict.os, "chown", lambda p, u, g: owned.append(str(Path(p).relative_to(tmp_path / "R1"))))
    dest = ocict.stage(unpacked, tmp_path / "R1", "/etc/frr/frr.conf", "x\n", "frr", [], as_root=True)
    assert "-u root -g root" in (dest / "etc/frr/daemons").read_text()
    assert (dest / "etc/group").read_text() == "frrvty:x:101:frr,root\n"
    assert (unpacked / "etc/group").read_text() == "frrvty:x:101:frr\n"
    assert {"etc/frr", "etc/frr/frr.conf", "etc/frr/daemons"} <= set(owned)


def _blob(layout: Path, data: bytes) -> dict:
    digest = hashlib.sha256(data).hexdigest()
    (layout / "blobs/sha256").mkdir(parents=True, exist_ok=True)
    (layout / "blobs/sha256" / digest).write_bytes(data)
    return {"digest": f"sha256:{digest}", "size": len(data)}


@pytest.fixture
def layout(tmp_path: Path) -> Path:
    """An OCI layout with one image tagged 10.3 (no layers) and a recipe's manifest.json beside it."""
    out = tmp_path / "img" / "oci"
    out.mkdir(parents=True)
    (out / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
    config = {"config": {"Entrypoint": ["/usr/local/sbin/start"], "Cmd": ["-v"], "Env": ["PATH=/bin", "A=b c"]}}
    cdesc = _blob(out, json.dumps(config).encode())
    manifest = {"schemaVersion": 2, "config": {"mediaType": "application/vnd.oci.image.config.v1+json", **cdesc}}
    mdesc = _blob(out, json.dumps({**manifest, "layers": []}).encode())
    index = {"manifests": [{**mdesc, "annotations": {"org.opencontainers.image.ref.name": "10.3"}}]}
    (out / "index.json").write_text(json.dumps(index))
    (out.parent / "manifest.json").write_text(json.dumps({"versions": {"frr": "10.3-3"}, "recipe": "r"}))
    return out


def test_image_config_reads_entrypoint_command_and_environment(layout):
    cfg = image_config(layout, "10.3")
    assert cfg.argv == ("/usr/local/sbin/start", "-v") and cfg.env == ("PATH=/bin", "A=b c")
    assert cfg.workdir == "/" and cfg.stop_signal == "SIGTERM" and cfg.digest.startswith("sha256:")
    with pytest.raises(ProfileFileError, match="no image tagged 'latest'"):
        image_config(layout, "latest")


def _profile(layout: Path):
    from routers.profile_file import ConfigMethod, Hardware, ImageSource, RouterInfo, RouterProfile

    return RouterProfile(
        path=layout.parent / "r.toml",
        router=RouterInfo("r", "container", "frr"),
        image=ImageSource(oci=layout, oci_tag="10.3", recipe="r"),
        hardware=Hardware(),
        config=ConfigMethod("file", template=layout / "t.j2", path="/etc/frr/frr.conf"),
    )


def test_the_image_record_names_layout_tag_digest_and_versions(layout):
    rec = ocict.image_record(_profile(layout))
    assert rec["oci"] == {"layout": str(layout), "tag": "10.3", "digest": image_config(layout, "10.3").digest}
    assert rec["versions"] == {"frr": "10.3-3"} and rec["router"]["version"] == "10.3-3"
    assert (rec["kind"], rec["config_method"], rec["config_path"]) == ("container", "file", "/etc/frr/frr.conf")


def test_container_argv_runs_the_setup_under_the_filter_then_the_entry_point(layout, tmp_path):
    cfg = image_config(layout, "10.3")
    argv = ocict.container_argv(
        tmp_path / "rootfs", cfg, "r1", ["198.18.1.1/24", "2001:2:0:1::1/64"], ["198.18.2.1/24"]
    )
    assert argv[:2] == ["unshare", "--mount"] and "--fork" in argv
    i = argv.index(str(ocict.NLFILTER))
    assert argv[i + 1 : i + 3] == ["/bin/sh", "-c"] and argv[i + 4] == "vrmig-oci-setup"
    rest = argv[i + 5 :]
    assert rest[0] == str(tmp_path / "rootfs") and rest[1] == ocict.INIT_SCRIPT.read_text()
    assert rest[5:] == [
        "r1", "eth0=198.18.1.1/24,2001:2:0:1::1/64", "eth1=198.18.2.1/24", "/", "2", "PATH=/bin", "A=b c",
        "/usr/local/sbin/start", "-v",
    ]  # fmt: skip


@pytest.mark.parametrize("script", [ocict.SETUP_SCRIPT, ocict.INIT_SCRIPT])
def test_the_container_scripts_parse(script):
    assert subprocess.run(["sh", "-n", str(script)], capture_output=True, check=False).returncode == 0


def test_file_locks_are_dumped_and_restored_when_asked():
    assert "--file-locks" in dump_args(1, Path("/i"), None, None, file_locks=True)
    assert "--file-locks" not in dump_args(1, Path("/i"), None, None)
    assert "--file-locks" in restore_args(Path("/i"), Path("/r"), [], Path("/p"), file_locks=True)
    assert "--file-locks" not in restore_args(Path("/i"), Path("/r"), [], Path("/p"))


def test_a_lab_refuses_a_container_profile_in_one_line(layout):
    from migrate.core.errors import DependencyError
    from migrate.drivers.criu.lab import LabCriuDriver
    from migrate.model.scenario import Scenario

    (layout.parent / "t.j2").write_text("hostname {{ router.hostname }}\n")
    toml = layout.parent / "r.toml"
    toml.write_text(
        '[router]\nname = "r"\nkind = "container"\nsoftware = "frr"\n[image]\noci = "oci:10.3"\n'
        '[config]\nmethod = "file"\npath = "/etc/frr/frr.conf"\ntemplate = "t.j2"\n'
    )
    s = Scenario(router=str(toml), hv="criu", mode="stopcopy")
    with pytest.raises(DependencyError) as err:
        LabCriuDriver.preflight(s)
    assert "on a lab (TESTBED=)" in str(err.value) and "\n" not in str(err.value)
