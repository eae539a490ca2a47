"""Build machinery without network or root: cpio writer, ELF/modinfo reader, module ordering,
apt output parsing, library copying, and the guest script's readiness checks."""

import io
import os
import stat
import struct
import subprocess
from pathlib import Path

import pytest

from routers import build, cpio, debs, elf
from routers.errors import BuildError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "routers"
ROUTER_SCRIPT = Path(build.GUESTFS) / "vrmig-router"


# ------------------------------------------------------------------------------------ cpio
def _read_newc(data: bytes) -> list[tuple[str, int, bytes, tuple[int, int]]]:
    out, pos = [], 0
    while True:
        assert data[pos : pos + 6] == b"070701"
        f = [int(data[pos + 6 + 8 * i : pos + 14 + 8 * i], 16) for i in range(13)]
        mode, filesize, rmaj, rmin, namesize = f[1], f[6], f[9], f[10], f[11]
        pos += 110
        name = data[pos : pos + namesize - 1].decode()
        pos = (pos + namesize + 3) & ~3
        body = data[pos : pos + filesize]
        pos = (pos + filesize + 3) & ~3
        if name == cpio.TRAILER:
            return out
        assert f[2] == 0 and f[3] == 0 and f[5] == 0  # root-owned, mtime 0
        out.append((name, mode, body, (rmaj, rmin)))


def test_cpio_roundtrip_with_links_and_devices(tmp_path):
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "tool").write_bytes(b"#!/bin/sh\necho hi\n")
    (tmp_path / "bin" / "tool").chmod(0o755)
    (tmp_path / "init").symlink_to("/bin/tool")
    (tmp_path / "empty").write_bytes(b"")
    buf = io.BytesIO()
    entries = [*cpio.tree_entries(tmp_path), cpio.char_device("dev/console", 5, 1)]
    n = cpio.write(buf, entries)
    assert n == len(buf.getvalue()) and n % 4 == 0
    got = {name: (mode, body, rdev) for name, mode, body, rdev in _read_newc(buf.getvalue())}
    names = list(got)
    assert sorted(names) == ["bin", "bin/tool", "dev/console", "empty", "init"]
    assert names.index("bin") < names.index("bin/tool")  # parents first
    assert stat.S_ISDIR(got["bin"][0])
    assert got["bin/tool"][1] == b"#!/bin/sh\necho hi\n" and stat.S_IMODE(got["bin/tool"][0]) == 0o755
    assert stat.S_ISLNK(got["init"][0]) and got["init"][1] == b"/bin/tool"
    assert stat.S_ISCHR(got["dev/console"][0]) and got["dev/console"][2] == (5, 1)
    again = io.BytesIO()
    cpio.write(again, [*cpio.tree_entries(tmp_path), cpio.char_device("dev/console", 5, 1)])
    assert again.getvalue() == buf.getvalue()  # reproducible


def test_cpio_rejects_duplicates():
    with pytest.raises(ValueError, match="duplicate"):
        cpio.write(io.BytesIO(), [cpio.directory("a"), cpio.directory("a")])


# ------------------------------------------------------------------------------------ ELF
def _fake_module(path: Path, **fields: str) -> Path:
    """A minimal ELF64 relocatable with a .modinfo section (what a .ko looks like to modinfo)."""
    modinfo = b"".join(f"{k}={v}".encode() + b"\0" for k, v in fields.items())
    shstrtab = b"\0.modinfo\0.shstrtab\0"
    off_modinfo = 64
    off_shstr = off_modinfo + len(modinfo)
    off_sh = (off_shstr + len(shstrtab) + 7) & ~7
    ident = b"\x7fELF" + bytes([2, 1, 1]) + b"\0" * 9
    header = ident + struct.pack("<HHIQQQIHHHHHH", 1, 62, 1, 0, 0, off_sh, 0, 64, 0, 0, 64, 3, 2)
    sh = struct.pack("<IIQQQQIIQQ", 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
    sh += struct.pack("<IIQQQQIIQQ", 1, 1, 2, 0, off_modinfo, len(modinfo), 0, 0, 1, 0)
    sh += struct.pack("<IIQQQQIIQQ", 10, 3, 0, 0, off_shstr, len(shstrtab), 0, 0, 1, 0)
    data = header + modinfo + shstrtab
    data += b"\0" * (off_sh - len(data)) + sh
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def test_modinfo_reads_fields(tmp_path):
    ko = _fake_module(tmp_path / "x.ko", license="GPL", depends="virtio,virtio_ring", name="virtio_net")
    info = elf.modinfo(ko)
    assert info["depends"] == "virtio,virtio_ring" and info["name"] == "virtio_net"


def test_elf_rejects_non_elf(tmp_path):
    (tmp_path / "f").write_bytes(b"#!/bin/sh\n")
    assert not elf.is_elf(tmp_path / "f")
    with pytest.raises(elf.ElfError):
        elf.dynamic_info(tmp_path / "f")


def test_dynamic_info_of_a_host_binary():
    sh = Path(os.path.realpath("/bin/sh"))
    info = elf.dynamic_info(sh)
    if info.interpreter is None:
        pytest.skip("/bin/sh is static here")
    assert info.interpreter.startswith("/lib") and "libc.so.6" in info.needed


def test_resolve_modules_orders_dependencies_first(tmp_path):
    moddir = tmp_path / "lib" / "modules" / "6.1.0-test"
    k = moddir / "kernel"
    _fake_module(k / "drivers/virtio/virtio_ring.ko", depends="")
    _fake_module(k / "drivers/virtio/virtio.ko", depends="virtio_ring")
    _fake_module(k / "drivers/virtio/virtio_pci.ko", depends="virtio,virtio_ring")
    _fake_module(k / "net/core/failover.ko", depends="")
    _fake_module(k / "drivers/net/net_failover.ko", depends="failover")
    _fake_module(k / "drivers/net/virtio_net.ko", depends="net_failover,virtio,virtio_ring")
    (moddir / "modules.builtin").write_text("kernel/drivers/net/ethernet/intel/e1000/e1000.ko\n")
    order, builtin, missing = build.resolve_modules(moddir, ("virtio_pci", "virtio_net", "e1000", "e1000e"))
    names = [p.name.removesuffix(".ko") for p in order]
    assert names == ["virtio_ring", "virtio", "virtio_pci", "failover", "net_failover", "virtio_net"]
    assert builtin == ["e1000"] and missing == ["e1000e"]


def test_resolve_modules_detects_cycles(tmp_path):
    moddir = tmp_path / "m"
    _fake_module(moddir / "kernel/a.ko", depends="b")
    _fake_module(moddir / "kernel/b.ko", depends="a")
    with pytest.raises(BuildError, match="cycle"):
        build.resolve_modules(moddir, ("a",))


def test_install_modules_copies_and_lists_in_order(tmp_path):
    moddir = tmp_path / "pool" / "lib" / "modules" / "6.1.0-test"
    _fake_module(moddir / "kernel/drivers/virtio/virtio.ko", depends="")
    _fake_module(moddir / "kernel/drivers/net/virtio_net.ko", depends="virtio")
    order = [moddir / "kernel/drivers/virtio/virtio.ko", moddir / "kernel/drivers/net/virtio_net.ko"]
    rootfs = build.Rootfs(tmp_path / "root")
    lines = build.install_modules(rootfs, moddir, "6.1.0-test", order)
    assert lines == ["kernel/drivers/virtio/virtio.ko", "kernel/drivers/net/virtio_net.ko"]
    for rel, ko in zip(lines, order, strict=True):
        assert rootfs.host(f"/lib/modules/6.1.0-test/{rel}").read_bytes() == ko.read_bytes()
    assert rootfs.host("/etc/vrmig/modules").read_text() == "".join(f"{rel}\n" for rel in lines)
    build.install_modules(rootfs, moddir, "6.1.0-test", [])
    assert rootfs.host("/etc/vrmig/modules").read_text() == ""


def test_single_kernel_finds_the_one_kernel(tmp_path):
    (tmp_path / "lib/modules/6.1.0-test").mkdir(parents=True)
    (tmp_path / "boot").mkdir()
    (tmp_path / "boot/vmlinuz-6.1.0-test").write_bytes(b"k")
    assert build.single_kernel(tmp_path, "linux-image-x") == ("6.1.0-test", tmp_path / "boot/vmlinuz-6.1.0-test")
    (tmp_path / "lib/modules/6.1.0-other").mkdir()
    with pytest.raises(BuildError) as e:
        build.single_kernel(tmp_path, "linux-image-x")
    assert str(e.value) == "linux-image-x: expected one kernel, found ['6.1.0-other', '6.1.0-test']"
    with pytest.raises(BuildError) as e:
        build.single_kernel(tmp_path, "linux-image-x", list_images=True)
    assert str(e.value) == (
        "linux-image-x: expected one kernel, found modules ['6.1.0-other', '6.1.0-test'] and ['vmlinuz-6.1.0-test']"
    )


# ------------------------------------------------------------------------------------ apt
DEPENDS_OUT = """frr
  PreDepends: adduser
  Depends: iproute2
  Depends: libc6
  Depends: libyang2
  Recommends: frr-pythontools
libyang2
  Depends: libc6
  Depends: libpcre2-8-0
libc6
  Depends: libgcc-s1
libpam0g
  Depends: libaudit1
 |Depends: debconf
  Depends: <debconf-2.0>
    cdebconf
    debconf
bird2
  Depends: libssh-gcrypt-4
  Depends: <libfoo-virtual>
    libfoo1
libssh-gcrypt-4
  Depends: zlib1g
  Depends: libgcrypt20
"""


def test_depends_parsing(monkeypatch):
    monkeypatch.setattr(debs, "_run", lambda argv, **k: DEPENDS_OUT)
    deps = debs.depends(["frr"])
    assert deps["frr"] == ["adduser", "iproute2", "libc6", "libyang2"]
    assert deps["libpam0g"] == ["libaudit1", "debconf"]  # first alternative; the or-ed virtual is skipped
    assert deps["bird2"] == ["libssh-gcrypt-4", "libfoo1"]  # virtual -> first provider


def test_library_closure_follows_libraries_only(monkeypatch):
    def fake_run(argv, **k):
        if argv[:2] == ["apt-cache", "depends"]:
            assert "--recurse" in argv
            return DEPENDS_OUT
        assert argv[:2] == ["apt-cache", "show"]
        return "".join(
            f"Package: {p}\nSection: {s}\n\n"
            for p, s in {"zlib1g": "libs", "adduser": "admin", "iproute2": "net", "debconf": "admin"}.items()
        )

    monkeypatch.setattr(debs, "_run", fake_run)
    assert debs.library_closure("frr") == ["frr", "libc6", "libgcc-s1", "libpcre2-8-0", "libyang2"]
    assert debs.library_closure("bird2") == ["bird2", "libfoo1", "libgcrypt20", "libssh-gcrypt-4", "zlib1g"]


def test_candidates_parsing_and_missing(monkeypatch):
    out = "frr:\n  Installed: (none)\n  Candidate: 8.4.4-1.1~deb12u2\nlibc6:amd64:\n  Candidate: 2.36-9\n"
    monkeypatch.setattr(debs, "_run", lambda argv, **k: out)
    assert debs.candidates(["frr", "libc6"]) == {"frr": "8.4.4-1.1~deb12u2", "libc6": "2.36-9"}
    with pytest.raises(BuildError, match="apt-get update"):
        debs.candidates(["frr", "bird2"])


def test_deb_file_names():
    p = Path("busybox-static_1%3a1.35.0-4+deb12u1+b1_amd64.deb")
    assert debs.deb_version(p) == ("busybox-static", "1:1.35.0-4+deb12u1+b1")
    assert debs.deb_version(Path("notes.txt")) is None


@pytest.mark.parametrize(
    ("deb", "up"),
    [("1:1.35.0-4+deb12u1+b1", "1.35.0"), ("8.4.4-1.1~deb12u2", "8.4.4"), ("2.0.12-7", "2.0.12"), ("5", "5")],
)
def test_upstream_version(deb, up):
    assert build.upstream_version(deb) == up


def test_kernel_image_package(monkeypatch):
    monkeypatch.setattr(
        debs, "depends", lambda pkgs, recurse=False: {"linux-image-cloud-amd64": ["linux-image-6.1.0-56-cloud-amd64"]}
    )
    assert build.kernel_image_package("linux-image-cloud-amd64") == "linux-image-6.1.0-56-cloud-amd64"
    assert build.kernel_image_package("linux-image-6.1.0-9-amd64") == "linux-image-6.1.0-9-amd64"


# ------------------------------------------------------------------------------------ rootfs
def test_rootfs_copies_binary_with_its_libraries_from_a_tree(tmp_path):
    sh = os.path.realpath("/bin/sh")
    if elf.dynamic_info(Path(sh)).interpreter is None:
        pytest.skip("/bin/sh is static here")
    rootfs = build.Rootfs(tmp_path / "root")
    resolver = build.LibraryResolver([Path("/")], rootfs)
    resolver.add(Path("/"), "/bin/sh")
    assert not resolver.missing
    assert (tmp_path / "root" / "bin").is_symlink()  # merged /usr
    assert os.path.exists(tmp_path / "root" / "usr" / "bin" / os.path.basename(sh))
    libc = [p for p in (tmp_path / "root" / "usr" / "lib").rglob("libc.so.6")]
    assert libc and "libc.so.6" in resolver.sonames


def test_resolve_in_root_keeps_absolute_links_inside(tmp_path):
    (tmp_path / "lib" / "x86_64-linux-gnu").mkdir(parents=True)
    (tmp_path / "lib" / "x86_64-linux-gnu" / "ld.so").write_bytes(b"x")
    (tmp_path / "lib64").mkdir()
    (tmp_path / "lib64" / "ld.so").symlink_to("/lib/x86_64-linux-gnu/ld.so")
    final, chain = build._resolve_in_root(tmp_path, "/lib64/ld.so")
    assert final == "/lib/x86_64-linux-gnu/ld.so" and chain == [("/lib64/ld.so", "/lib/x86_64-linux-gnu/ld.so")]


# ------------------------------------------------------------------------------------ guest script
def _script(body: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["sh", "-c", f'. "$0"\n{body}', str(ROUTER_SCRIPT)],
        env={"PATH": os.environ["PATH"], "VRMIG_ROUTER_FUNCTIONS_ONLY": "1", **env},
        capture_output=True,
        text=True,
        check=False,
    )


BOTH = "eth0 198.18.1.1/24\neth0 2001:2:0:1::1/64\neth1 198.18.2.1/24\neth1 2001:2:0:2::1/64\n"
LEFT = "eth0 198.18.1.1/24\neth0 2001:2:0:1::1/64\n"


@pytest.mark.parametrize(
    ("fixture", "profile", "version"),
    [("frr", "frr", "8.4.4"), ("frr10", "frr", "10.3"), ("bird", "bird", "2.0.12")],
)
def test_guest_readiness_check_on_real_daemon_output(fixture, profile, version):
    """Real query output: FRR 8.4 shows each address's connected prefix, FRR 10.3 its local /32
    or /128 (captured 2026-12-02 from the frr image's rootfs in a namespace, the partial one after
    eth1's addresses were flushed); BIRD 2.0."""
    ready, partial = FIXTURES / f"{fixture}-query-ready.txt", FIXTURES / f"{fixture}-query-partial.txt"
    body = (
        'PROFILE=$P; PAIRS=$PAIRS_IN; IFACES=$IFS_IN\nif routes_ok "$Q"; then echo OK; else echo WAIT; fi\n'
        '"${PROFILE}_version" < "$Q"'
    )
    env = {"P": profile, "PAIRS_IN": BOTH, "IFS_IN": " eth0 eth1"}
    r = _script(body, Q=str(ready), **env)
    assert r.stdout.split() == ["OK", version], r.stderr
    r = _script(body, Q=str(partial), **env)
    assert r.stdout.split()[0] == "WAIT", r.stderr
    r = _script(body, Q=str(partial), P=profile, PAIRS_IN=LEFT, IFS_IN=" eth0")
    assert r.stdout.split()[0] == "OK", r.stderr


def test_guest_scripts_are_valid_sh():
    for name in ("vrmig-router", "vrmig-boot"):
        subprocess.run(["sh", "-n", str(Path(build.GUESTFS) / name)], check=True)


def test_rib_conf_holds_n_distinct_routes_in_the_benchmarking_range():
    """vrmig-router rib=N: N unreachable /128s in 2001:2:0:ff::/64 for BIRD's static protocol."""
    import ipaddress

    r = _script('rib_conf "$N"', N="70000")
    lines = r.stdout.splitlines()
    assert r.returncode == 0, r.stderr
    assert lines[0] == "protocol static rib6 { ipv6;" and lines[-1] == "}"
    routes = [ln.split()[1] for ln in lines[1:-1]]
    assert len(routes) == len(set(routes)) == 70000
    net = ipaddress.ip_network("2001:2:0:ff::/64")  # inside RFC 5180's 2001:2::/48
    assert all(ipaddress.ip_network(x).subnet_of(net) and x.endswith("/128") for x in routes)
    assert all(ln.endswith(" unreachable;") for ln in lines[1:-1])
    assert _script("rib_conf 0").stdout.splitlines() == ["protocol static rib6 { ipv6;", "}"]


def test_criu_vm_init_is_valid_sh():
    from routers.criu_vm_image import INIT

    subprocess.run(["sh", "-n", str(INIT)], check=True)


def test_fetch_reports_the_download_and_each_extraction(tmp_path, monkeypatch):
    from migrate.core.progress import Progress

    pinned = {"busybox-static": "1:1.35.0-4+b3", "frr": "8.4.4-1.1~deb12u1"}
    monkeypatch.setattr(debs, "download", lambda p, dest: {k: dest / f"{k}_{v}_amd64.deb" for k, v in p.items()})
    monkeypatch.setattr(debs, "extract", lambda deb, dest: dest)
    out = io.StringIO()
    progress = Progress("guest frr", debs.fetch_steps(pinned), "steps", stream=out, enabled=True, min_interval_s=0)
    with progress:
        pools = debs.fetch(pinned, tmp_path, progress)
    assert set(pools) == set(pinned) and all(p.parent == tmp_path / "pool" for p in pools.values())
    lasts = [line.rsplit("| last ", 1)[1].rsplit(" ok in ", 1)[0] for line in out.getvalue().splitlines()]
    assert lasts == ["download 2 packages", "extract busybox-static", "extract frr"]
    assert progress.done == progress.total == 3


PEERS_IN = "198.18.1.10/65001\n198.18.2.10/65002\n"


@pytest.mark.parametrize("profile", ["frr", "bird"])
def test_peering_config_of_the_router(profile, tmp_path):
    """vrmig-router peering=bgp,bfd: the BGP (and BFD) configuration it writes for FRR or BIRD,
    checked by BIRD of the built image itself (bird -p; skipped if not built)."""
    env = {"PEERING": "bgp,bfd", "ASN": "65000", "PEERS": PEERS_IN, "BFD_MS": "50", "BFD_MULT": "3",
           "BGP_HOLD": "9", "PAIRS": BOTH, "RUN": str(tmp_path), "IFACES": " eth0 eth1", "RIB": "0"}  # fmt: skip
    body = "frr_bgp_conf; echo ===; frr_bfd_conf" if profile == "frr" else "bird_start_conf() { :; }; bird_peering_conf"
    r = _script(body, **env)
    assert r.returncode == 0, r.stderr
    text = r.stdout
    if profile == "frr":
        bgp, bfd = text.split("===\n")
        assert "router bgp 65000" in bgp and " neighbor 198.18.2.10 remote-as 65002" in bgp
        assert " timers bgp 3 9" in bgp and " neighbor 198.18.1.10 bfd profile vrmig" in bgp
        # (bgpd -C needs the image's frrvty group: FRR's reading of it is tested by the
        # sessions of tests/integration/test_peering.py)
        assert "  receive-interval 50" in bfd and "  detect-multiplier 3" in bfd
    else:
        assert text.count("protocol bgp peer") == 2 and "bfd on;" in text and "hold time 9;" in text
        from migrate.core.errors import DependencyError
        from migrate.experiment.peering import bird_image_paths

        try:
            loader, bird, libs = bird_image_paths()  # the peers' BIRD: the bird image's own
        except DependencyError as err:
            pytest.skip(str(err))
        conf = tmp_path / "bird.conf"
        conf.write_text("router id 198.18.1.1;\nprotocol device { }\n" + text)
        argv = [str(loader), "--library-path", ":".join(map(str, libs)), str(bird), "-p", "-c", str(conf)]
        cp = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
        assert cp.returncode == 0, cp.stdout + cp.stderr


def _bird_parses(tmp_path, text: str) -> None:
    """BIRD of the built bird image reads ``text`` (bird -p; skipped if not built)."""
    from migrate.core.errors import DependencyError
    from migrate.experiment.peering import bird_image_paths

    try:
        loader, bird, libs = bird_image_paths()
    except DependencyError as err:
        pytest.skip(str(err))
    conf = tmp_path / "check.conf"
    conf.write_text(text)
    argv = [str(loader), "--library-path", ":".join(map(str, libs)), str(bird), "-p", "-c", str(conf)]
    cp = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert cp.returncode == 0, cp.stdout + cp.stderr + text


@pytest.mark.parametrize("profile", ["frr", "bird"])
def test_ospf_config_of_the_router(profile, tmp_path):
    """vrmig-router peering=ospf ospfdead=8: an OSPFv2 adjacency in area 0 on every interface,
    point-to-point, hello 2 s (a quarter of the dead interval), for FRR or BIRD (checked by the
    bird image's BIRD)."""
    env = {"PEERING": "ospf", "OSPF_DEAD": "8", "PAIRS": BOTH, "RUN": str(tmp_path), "IFACES": " eth0 eth1",
           "RIB": "0", "ASN": "", "PEERS": ""}  # fmt: skip
    body = "frr_ospf_conf" if profile == "frr" else "bird_peering_conf"
    r = _script(body, **env)
    assert r.returncode == 0, r.stderr
    text = r.stdout
    if profile == "frr":
        for ifname in ("eth0", "eth1"):
            block = text.split(f"interface {ifname}\n", 1)[1].split("exit", 1)[0]
            assert " ip ospf area 0" in block and " ip ospf network point-to-point" in block, block
            assert " ip ospf hello-interval 2" in block and " ip ospf dead-interval 8" in block, block
        assert "router ospf\n ospf router-id 198.18.1.1\n redistribute connected" in text
    else:
        assert "protocol bgp" not in text and 'interface "eth0", "eth1" { type ptp; hello 2; dead 8; }' in text
        _bird_parses(tmp_path, "router id 198.18.1.1;\nprotocol device { }\n" + text)


@pytest.mark.parametrize("peering", ["ospf", "bgp,ospf,bfd"])
def test_ospf_config_of_the_peers(peering, tmp_path):
    """The peers' BIRD with OSPF: B announces the sink over OSPF only when there is no BGP
    (one protocol carries the cross-traffic's route); BIRD reads the configuration."""
    from migrate.experiment.peering import bird_conf
    from migrate.model.routing import peers
    from migrate.model.scenario import Scenario

    s = Scenario(peering=peering, ospf_dead_s=4)
    b = next(p for p in peers() if p.role == "B")
    text = bird_conf(s, b, tmp_path / "peer-B.log")
    assert "protocol ospf v2 ospf1 {" in text and "type ptp; hello 1; dead 4;" in text
    if peering == "ospf":
        assert f"export where net = {b.announced};" in text and "protocol bgp" not in text
    else:
        assert "ipv4 { import all; export none; };" in text and "protocol bgp rtr {" in text
    _bird_parses(tmp_path, text)
