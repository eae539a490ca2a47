"""Kernel command line contract, READY parsing and guest_image() lookup (no root, no QEMU)."""

import hashlib
import json

import pytest

from migrate.core.errors import DependencyError, VrmigError
from routers import guest, profiles
from routers.errors import NotBuiltError, ProfileUnavailableError, RouterError, UnknownProfileError

IF0 = ["198.18.1.1/24", "2001:2:0:1::1/64"]
IF1 = ["198.18.2.1/24", "2001:2:0:2::1/64"]


def test_cmdline_matches_the_contract():
    assert guest.kernel_cmdline("frr", IF0, IF1, extra=()) == (
        "console=ttyS0 net.ifnames=0 vrmig.router=frr "
        "vrmig.if0=198.18.1.1/24,2001:2:0:1::1/64 vrmig.if1=198.18.2.1/24,2001:2:0:2::1/64"
    )


def test_cmdline_default_extras_follow_the_contract_part():
    line = guest.kernel_cmdline("bird", IF0, IF1)
    assert line.startswith("console=ttyS0 net.ifnames=0 vrmig.router=bird vrmig.if0=")
    assert line.split()[5:] == list(guest.DEFAULT_EXTRA_ARGS)
    assert "  " not in line


def test_cmdline_normalises_ipv6():
    line = guest.kernel_cmdline("frr", ["198.18.1.1/24", "2001:0002:0000:0001:0000:0000:0000:0001/64"], IF1, ())
    assert "vrmig.if0=198.18.1.1/24,2001:2:0:1::1/64 " in line


def test_cmdline_topology_addresses_work():
    from migrate.testbed import topology as topo

    left, right = (topo.router_port(seg) for seg in topo.SEGMENTS)
    line = guest.kernel_cmdline("frr", [left.ipv4, left.ipv6], [right.ipv4, right.ipv6])
    assert f"vrmig.if0={left.ipv4},{left.ipv6}" in line and f"vrmig.if1={right.ipv4},{right.ipv6}" in line


@pytest.mark.parametrize(
    ("if0", "match"),
    [
        (["198.18.1.1"], "prefix length"),
        (["198.18.1.300/24"], "if0"),
        ([], "non-empty"),
        ("198.18.1.1/24", "list"),
        (["198.18.1.0/24"], "network address"),
        (["not-an-address/24"], "if0"),
    ],
)
def test_cmdline_rejects_bad_addresses(if0, match):
    with pytest.raises(RouterError, match=match):
        guest.kernel_cmdline("frr", if0, IF1)


def test_cmdline_rejects_unknown_profile_and_bad_extras():
    with pytest.raises(UnknownProfileError, match="frr, bird, xorp"):
        guest.kernel_cmdline("quagga", IF0, IF1)
    with pytest.raises(RouterError, match="whitespace"):
        guest.kernel_cmdline("frr", IF0, IF1, extra=("a b",))


def test_parse_ready():
    assert guest.parse_ready("VRMIG-READY router=frr version=8.4.4\r\n") == {"router": "frr", "version": "8.4.4"}
    assert guest.parse_ready("VRMIG-BOOT kernel=6.1") is None
    assert guest.parse_ready("VRMIG-READY") is None
    assert guest.READY_MARKER == "VRMIG-READY"


def test_errors_are_vrmig_errors():
    assert issubclass(RouterError, VrmigError)
    assert issubclass(NotBuiltError, DependencyError) and NotBuiltError.exit_code == 3
    assert issubclass(ProfileUnavailableError, DependencyError)


def _fake_image(cache, profile="frr", **manifest_overrides):
    gdir = cache / "guest" / profile
    gdir.mkdir(parents=True)
    (gdir / "vmlinuz").write_bytes(b"kernel")
    (gdir / "initrd.img").write_bytes(b"initrd")
    (gdir / "rootfs").mkdir()
    manifest = {
        "format": guest.GUEST_FORMAT,
        "profile": profile,
        "files": {
            "vmlinuz": {"sha256": hashlib.sha256(b"kernel").hexdigest()},
            "initrd.img": {"sha256": hashlib.sha256(b"initrd").hexdigest()},
        },
        **manifest_overrides,
    }
    (gdir / "manifest.json").write_text(json.dumps(manifest))
    return gdir


def test_guest_image_not_built_says_make_setup(tmp_path):
    with pytest.raises(NotBuiltError, match="run `make setup`") as exc:
        guest.guest_image("frr", tmp_path)
    assert "vmlinuz" in str(exc.value) and str(tmp_path) in str(exc.value)


def test_guest_image_default_cache_from_env(tmp_path, monkeypatch):
    monkeypatch.setenv("VRMIG_CACHE", str(tmp_path))
    gdir = _fake_image(tmp_path, "bird")
    img = guest.guest_image("bird")
    assert img.kernel == gdir / "vmlinuz" and img.initrd == gdir / "initrd.img"
    assert img.manifest["profile"] == "bird" and img.rootfs == gdir / "rootfs" and img.profile == "bird"


def test_guest_image_damaged_or_old(tmp_path):
    gdir = _fake_image(tmp_path)
    (gdir / "initrd.img").write_bytes(b"truncated")
    with pytest.raises(NotBuiltError, match="--force"):
        guest.guest_image("frr", tmp_path)
    assert guest.guest_image("frr", tmp_path, verify=False).initrd == gdir / "initrd.img"
    (gdir / "manifest.json").write_text(json.dumps({"format": 0}))
    with pytest.raises(NotBuiltError, match="another vrmig version"):
        guest.guest_image("frr", tmp_path)


def test_guest_image_frozen(tmp_path):
    _fake_image(tmp_path)
    img = guest.guest_image("frr", tmp_path)
    with pytest.raises(AttributeError):
        img.kernel = tmp_path  # type: ignore[misc]


def test_guest_image_xorp_unavailable_explains(tmp_path, monkeypatch):
    monkeypatch.setattr(profiles, "xorp_root", lambda: None)
    with pytest.raises(ProfileUnavailableError, match=r"XORP is not packaged in Debian.*xorp_rtrmgr"):
        guest.guest_image("xorp", tmp_path)


def test_guest_image_unknown_profile(tmp_path):
    with pytest.raises(UnknownProfileError):
        guest.guest_image("quagga", tmp_path)


def test_supports_nic_from_manifest(tmp_path):
    _fake_image(tmp_path, modules={"load_order": ["virtio", "virtio_net"], "builtin": [], "missing": ["e1000"]})
    img = guest.guest_image("frr", tmp_path)
    assert img.supports_nic("virtio") and not img.supports_nic("e1000") and not img.supports_nic("rtl8139")


def test_cmdline_carries_the_rib_size_only_when_asked():
    base = guest.kernel_cmdline("bird", ["198.18.1.1/24"], ["198.18.2.1/24"])
    assert "vrmig.rib" not in base
    assert "vrmig.rib=500000" in guest.kernel_cmdline("bird", ["198.18.1.1/24"], ["198.18.2.1/24"], rib_routes=500000)
