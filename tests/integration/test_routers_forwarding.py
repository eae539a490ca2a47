"""The router really routes: the guest VM (and the same rootfs without a VM) forwards IPv4 and
IPv6 between two segments.

Each test builds its own namespaces ``vrt-routers-<hex>-*`` and removes them in ``finally``;
QEMU and the router daemons are stopped by PID.  Needs root, ``ip``, ``ping``, QEMU and the
built images; skips with the reason otherwise."""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import signal
import subprocess
import time

import pytest

from tests.integration.conftest import missing_from_setup, require_root_and

pytestmark = pytest.mark.integration

HOSTS = {  # segment -> (host address v4, v6, router v4, v6)
    "L": ("198.18.1.10/24", "2001:2:0:1::10/64", "198.18.1.1", "2001:2:0:1::1"),
    "R": ("198.18.2.10/24", "2001:2:0:2::10/64", "198.18.2.1", "2001:2:0:2::1"),
}
PING_DEADLINE_S = 20.0
NS_PREFIX = "vrt-routers-"


def _our_namespaces() -> set[str]:
    return {n for n in (os.listdir("/run/netns") if os.path.isdir("/run/netns") else []) if n.startswith(NS_PREFIX)}


@pytest.fixture
def no_router_leftovers():
    """This file's namespaces are all removed (QEMU and daemons die with them, by PID)."""
    before = _our_namespaces()
    yield
    assert _our_namespaces() <= before, f"namespaces left behind: {sorted(_our_namespaces() - before)}"


def _image_or_skip(profile: str):
    from routers.errors import RouterError
    from routers.guest import guest_image

    try:
        return guest_image(profile)
    except RouterError as err:
        missing_from_setup(err)


def _ip(*args: str, ns: str | None = None) -> None:
    argv = ["ip", *(["-n", ns] if ns else []), *args]
    res = subprocess.run(argv, capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {res.stderr.strip()}")


def _host(ns: str, seg: str, ifname: str = "eth0") -> None:
    v4, v6, gw4, gw6 = HOSTS[seg]
    _ip("link", "set", "lo", "up", ns=ns)
    _ip("link", "set", ifname, "up", ns=ns)
    _ip("addr", "add", v4, "dev", ifname, ns=ns)
    _ip("-6", "addr", "add", v6, "dev", ifname, "nodad", ns=ns)
    _ip("route", "add", "default", "via", gw4, ns=ns)
    _ip("-6", "route", "add", "default", "via", gw6, ns=ns)


def _ping(ns: str, dst: str) -> str:
    """Ping until one reply (each try waits at most 1 s for it); return ping's output."""
    deadline = time.monotonic() + PING_DEADLINE_S
    while True:
        res = subprocess.run(
            ["ip", "netns", "exec", ns, "ping", "-n", "-c", "1", "-W", "1", dst],
            capture_output=True,
            text=True,
            check=False,
        )
        if res.returncode == 0:
            return res.stdout
        if time.monotonic() > deadline:
            raise AssertionError(f"no reply from {dst} in {ns} within {PING_DEADLINE_S:.0f} s: {res.stdout}")


def _assert_routed(ns_left: str, ns_right: str) -> None:
    for src, dst in ((ns_left, "198.18.2.10"), (ns_left, "2001:2:0:2::10"), (ns_right, "198.18.1.10")):
        out = _ping(src, dst)
        # one router hop: TTL / hop limit 64 arrives as 63
        assert re.search(r"ttl=63\b", out), out


@contextlib.contextmanager
def _namespaces(*roles: str):
    prefix = f"{NS_PREFIX}{secrets.token_hex(3)}"
    names = {r: f"{prefix}-{r}" for r in roles}
    created: list[str] = []
    try:
        for ns in names.values():
            _ip("netns", "add", ns)
            created.append(ns)
        yield names
    finally:
        for ns in reversed(created):
            _kill_all_in(ns)
            subprocess.run(["ip", "netns", "del", ns], check=False)


def _kill_all_in(ns: str) -> None:
    """Safety net: processes still in a namespace this test created are this test's."""
    out = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True, check=False).stdout
    for pid in (int(p) for p in out.split()):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize("profile", ["frr", "bird"])
def test_guest_vm_forwards_between_segments(profile, tmp_path, no_router_leftovers):
    require_root_and("qemu-system-x86_64", "ip", "ping")
    if not os.path.exists("/dev/net/tun"):
        pytest.skip("/dev/net/tun missing (tap devices unavailable)")
    _image_or_skip(profile)
    from routers import smoke

    with _namespaces("hv", "l", "r") as ns:
        for seg, host in (("L", ns["l"]), ("R", ns["r"])):
            _ip("link", "add", f"br{seg}", "type", "bridge", "mcast_snooping", "0", ns=ns["hv"])
            _ip("tuntap", "add", "dev", f"tap{seg}", "mode", "tap", ns=ns["hv"])
            _ip("link", "add", f"up{seg}", "type", "veth", "peer", "name", "eth0", "netns", host, ns=ns["hv"])
            for port in (f"tap{seg}", f"up{seg}"):
                _ip("link", "set", port, "master", f"br{seg}", "up", ns=ns["hv"])
            _ip("link", "set", f"br{seg}", "up", ns=ns["hv"])
            _host(host, seg)
        netdevs = [f"tap,id=n{i},ifname=tap{seg},script=no,downscript=no" for i, seg in enumerate("LR")]
        with smoke.running_guest(profile, tmp_path / "console.log", netdevs=netdevs, netns=ns["hv"]) as booted:
            assert booted.ready_line.startswith(f"VRMIG-READY router={profile} ")
            _assert_routed(ns["l"], ns["r"])


@pytest.mark.parametrize("profile", ["frr", "bird"])
def test_rootfs_routes_in_a_namespace_without_vm(profile, no_router_leftovers):
    """HV=none / container use: the image's rootfs chrooted into a network namespace."""
    require_root_and("ip", "ping", "unshare", "chroot")
    _image_or_skip(profile)
    from routers.guest import namespace_argv
    from routers.smoke import IF0, IF1

    with _namespaces("rt", "l", "r") as ns:
        for i, (seg, host) in enumerate((("L", ns["l"]), ("R", ns["r"]))):
            _ip("link", "add", f"eth{i}", "type", "veth", "peer", "name", "eth0", "netns", host, ns=ns["rt"])
            _host(host, seg)
        pids: list[int] = []
        try:
            res = subprocess.run(
                ["ip", "netns", "exec", ns["rt"], *namespace_argv(profile, IF0, IF1)],
                capture_output=True,
                text=True,
                timeout=90,
                check=False,
            )
            pids = [int(ln.split()[1]) for ln in res.stdout.splitlines() if ln.startswith("VRMIG-PID ")]
            assert res.returncode == 0, res.stdout + res.stderr
            assert f"VRMIG-READY router={profile} " in res.stdout
            assert pids, res.stdout
            _assert_routed(ns["l"], ns["r"])
        finally:
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM)
