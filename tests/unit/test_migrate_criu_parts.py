"""HV=criu helpers without root: CRIU's statistics, pre-dump rounds, MAC announcements, image
transfer, namespace counters, container command line, action script."""

import ipaddress
import socket
import struct
import subprocess
import threading
from pathlib import Path

import pytest

from migrate.core.nsock import parse_net_dev
from migrate.drivers.criu import announce, imgxfer
from migrate.drivers.criu import rounds as criu_rounds
from migrate.drivers.criu.stats import error_excerpt, parse_display_stats

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "criu"
REPO = Path(__file__).resolve().parents[2]


# -- CRIU's own statistics ---------------------------------------------------------------------
def test_dump_stats_from_captured_output():
    s = parse_display_stats((FIXTURES / "dump-4.2.1.stdout").read_text())["dump"]
    assert s["freezing_time_us"] == 3599 and s["frozen_time_us"] == 398446
    assert s["memory_dump_time_us"] == 4016 and s["memory_write_time_us"] == 564
    assert s["memory_pages_scanned"] == 287 and s["memory_pages_written"] == 218
    assert s["memory_pages_skipped_from_parent"] == 0 and s["irmap_resolve_time_us"] == 0


def test_restore_stats_from_captured_output():
    s = parse_display_stats((FIXTURES / "restore-4.2.1.stdout").read_text())["restore"]
    assert s == {
        "pages_compared": 9,
        "pages_skipped_cow": 2,
        "pages_restored": 216,
        "restore_time_us": 360638,
        "forking_time_us": 7776,
    }


def test_stats_ignore_other_output():
    assert parse_display_stats("Warn (x): something\nFrozen time: 1 us\n") == {}


def test_error_excerpt_keeps_criu_errors_without_the_rlimit_noise():
    log = (
        "(00.01) Error (criu/util.c:1534): rlimit: Can't setup RLIMIT_NOFILE for self: Operation not permitted\n"
        "(00.02) foo\n(00.13) Error (criu/sk-netlink.c:134): netlink: The netlink socket 0x1 has more than 32 groups\n"
        "(00.22) Error (criu/cr-dump.c:1975): Dumping FAILED.\n"
    )
    ex = error_excerpt(log)
    assert "more than 32 groups" in ex and "Dumping FAILED" in ex and "RLIMIT" not in ex
    assert error_excerpt("a\nb\nc\n", max_lines=2) == "b | c"


# -- pre-dump rounds -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("written", "again"),
    [
        ([], True),
        ([5000], True),  # fewer than MIN_ROUNDS
        ([5000, 1000], True),  # shrinking
        ([5000, 1000, 990], False),  # stopped shrinking
        ([5000, 1000, 40], False),  # small enough
        ([5000, 3000, 1000, 600, 300, 150, 100, 70], False),  # round limit
    ],
)
def test_next_round(written, again):
    assert criu_rounds.next_round(written).again is again


def test_round_limit_reason():
    d = criu_rounds.next_round([10**6 // (2**i) for i in range(criu_rounds.MAX_ROUNDS)])
    assert not d.again and "limit" in d.reason


# -- MAC announcements ---------------------------------------------------------------------------
MAC = "52:54:00:c6:12:01"


def test_gratuitous_arp_layout():
    f = announce.gratuitous_arp(MAC, "198.18.1.1")
    assert len(f) == 42 and f[:6] == b"\xff" * 6 and f[6:12] == announce.mac_bytes(MAC)
    assert struct.unpack("!H", f[12:14])[0] == 0x0806
    htype, ptype, hlen, plen, op = struct.unpack("!HHBBH", f[14:22])
    assert (htype, ptype, hlen, plen, op) == (1, 0x0800, 6, 4, 1)
    ip = ipaddress.IPv4Address("198.18.1.1").packed
    assert f[28:32] == ip and f[38:42] == ip  # sender = target address


def _csum(data: bytes) -> int:
    s = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return s


def test_unsolicited_na_layout_and_checksum():
    f = announce.unsolicited_na(MAC, "2001:2:0:1::1")
    assert f[:6] == b"\x33\x33\x00\x00\x00\x01" and struct.unpack("!H", f[12:14])[0] == 0x86DD
    ip6, icmp = f[14:54], f[54:]
    assert ip6[6] == 58 and ip6[7] == 255 and struct.unpack("!H", ip6[4:6])[0] == len(icmp) == 32
    src, dst = ip6[8:24], ip6[24:40]
    assert dst == ipaddress.IPv6Address("ff02::1").packed
    assert icmp[0] == 136 and struct.unpack("!I", icmp[4:8])[0] == announce.NA_FLAGS_ROUTER_OVERRIDE
    assert icmp[8:24] == src == ipaddress.IPv6Address("2001:2:0:1::1").packed
    assert icmp[24:26] == b"\x02\x01" and icmp[26:32] == announce.mac_bytes(MAC)
    pseudo = src + dst + struct.pack("!I", len(icmp)) + b"\x00\x00\x00\x3a"
    assert _csum(pseudo + icmp) == 0xFFFF  # a correct checksum sums to all ones


def test_frames_per_address_family():
    fr = announce.frames(MAC, ["198.18.1.1/24", "2001:2:0:1::1/64"])
    assert [len(x) for x in fr] == [42, 86]
    with pytest.raises(ValueError):
        announce.mac_bytes("52:54:00")


# -- image transfer ------------------------------------------------------------------------------
def test_transfer_over_loopback(tmp_path):
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir()
    dst.mkdir()
    (src / "pages-1.img").write_bytes(bytes(range(256)) * 4096)
    (src / "core-1.img").write_bytes(b"core")
    (src / "dump.log").write_text("not shipped")
    (src / "parent").symlink_to("../0")
    (src / "sub").mkdir()
    with imgxfer.listen("127.0.0.1", 0) as lsock:
        port = lsock.getsockname()[1]
        got = {}
        t = threading.Thread(target=lambda: got.setdefault("s", imgxfer.receive(lsock, dst)))
        t.start()
        sent = imgxfer.send(src, "127.0.0.1", port)
        t.join(10)
    assert (sent.files, sent.bytes) == (2, 256 * 4096 + 4)
    assert got["s"].files == 2 and got["s"].bytes == sent.bytes
    assert sorted(p.name for p in dst.iterdir()) == ["core-1.img", "pages-1.img"]
    assert (dst / "pages-1.img").read_bytes() == (src / "pages-1.img").read_bytes()


def test_receiver_refuses_path_names(tmp_path):
    with imgxfer.listen("127.0.0.1", 0) as lsock:
        port = lsock.getsockname()[1]
        errors = []

        def recv():
            try:
                imgxfer.receive(lsock, tmp_path)
            except imgxfer.TransferError as err:
                errors.append(err)

        t = threading.Thread(target=recv)
        t.start()
        with socket.create_connection(("127.0.0.1", port)) as c:
            name = b"../evil"
            c.sendall(imgxfer.MAGIC + struct.pack("!H", len(name)) + name + struct.pack("!Q", 1) + b"x")
            t.join(10)
    assert errors and "refusing" in str(errors[0])
    assert not (tmp_path.parent / "evil").exists()


def test_valid_names():
    assert imgxfer.valid_name("pages-1.img")
    assert not any(imgxfer.valid_name(n) for n in ("", ".", "..", "a/b", "/etc/passwd"))


# -- namespace counters --------------------------------------------------------------------------
def test_parse_net_dev_captured():
    text = (FIXTURES / "proc-net-dev.txt").read_text()
    parsed = parse_net_dev(text)
    assert "lo" in parsed and len(parsed) == len(text.splitlines()) - 2
    for line in text.splitlines()[2:]:
        name, fields = line.split(":")[0].strip(), line.split(":")[1].split()
        assert parsed[name] == (int(fields[0]), int(fields[8]))


# -- container command line and scripts ----------------------------------------------------------
def test_container_argv(tmp_path):
    from routers.container_image import container_argv

    argv = container_argv(tmp_path, "bird", ["198.18.1.1/24", "2001:2:0:1::1/64"], ["198.18.2.1/24"])
    assert argv[0] == "unshare" and {"--mount", "--uts", "--ipc", "--net", "--pid", "--fork"} <= set(argv)
    assert "--kill-child" not in argv  # a death signal would be checkpointed and fire after restore
    i = argv.index("--")
    assert argv[i + 1 : i + 3] == [str(tmp_path / "bin/busybox"), "sh"]
    assert argv[-4:] == [str(tmp_path), "bird", "eth0=198.18.1.1/24,2001:2:0:1::1/64", "eth1=198.18.2.1/24"]
    setup = argv[i + 4]
    assert "pivot_root" in setup and "umount -l /.oldroot" in setup and "env -i" in setup


@pytest.mark.parametrize(
    "script",
    ["routers/containerfs/vrmig-ct-setup", "routers/containerfs/vrmig-ct-init", "migrate/drivers/criu/action.sh"],
)
def test_shell_scripts_parse(script):
    subprocess.run(["sh", "-n", str(REPO / script)], check=True)


def test_action_script_records_hooks_and_ignores_others(tmp_path):
    events = tmp_path / "events"
    env = {"PATH": "/usr/bin:/bin", "VRMIG_CRIU_EVENTS": str(events), "VRMIG_SIDE": "dst"}
    script = str(REPO / "migrate/drivers/criu/action.sh")
    for hook in ("pre-restore", "setup-namespaces", "network-unlock"):
        subprocess.run([script], env={**env, "CRTOOLS_SCRIPT_ACTION": hook}, check=True)
    lines = events.read_text().splitlines()
    assert [ln.split()[0] for ln in lines] == ["pre-restore", "network-unlock"]
    assert all(ln.split()[1].isdigit() for ln in lines)


# -- driver registration and preflight -----------------------------------------------------------
def test_criu_is_a_registered_hv():
    from migrate.drivers.base import load_driver
    from migrate.model.scenario import Scenario

    s = Scenario(hv="criu", router="bird", mode="stopcopy")
    assert load_driver(s.hv, s.driver).name == "criu"
    assert s.name.startswith("criu-stopcopy-")


def test_preflight_refuses_frr_before_anything_else():
    from migrate.core.errors import DependencyError
    from migrate.drivers.criu.driver import CriuDriver
    from migrate.model.scenario import Scenario

    with pytest.raises(DependencyError, match="ROUTER=bird") as err:
        CriuDriver.preflight(Scenario(hv="criu", router="frr"))
    assert "more than 32 groups" in str(err.value)
