"""The router profile registry and availability checks (no root, no network, no apt)."""

import os
import re
import subprocess
import sys
from types import SimpleNamespace

import pytest

from routers import profiles
from routers.errors import ProfileUnavailableError, UnknownProfileError

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_registry_has_the_three_profiles_default_first():
    assert profiles.names() == ["frr", "bird", "xorp"]
    assert profiles.DEFAULT_PROFILE == "frr"
    for name in profiles.names():
        p = profiles.get(name)
        assert p.name == name and p.daemons and p.files
    assert profiles.get("frr").daemons == ("zebra", "staticd")
    assert profiles.get("bird").daemons == ("bird",)
    assert profiles.get("frr").package == "frr" and profiles.get("bird").package == "bird2"
    assert profiles.get("xorp").package is None and not profiles.get("xorp").debian


def test_registry_matches_the_orchestrators_choices():
    from migrate.model.scenario import ROUTERS

    assert tuple(profiles.names()) == ROUTERS


def test_unknown_profile_lists_the_valid_ones():
    with pytest.raises(UnknownProfileError, match="choose one of frr, bird, xorp"):
        profiles.get("quagga")


def _fake_apt(monkeypatch, policy_out: str, which: str | None = "/usr/bin/apt-cache"):
    monkeypatch.setattr(profiles.shutil, "which", lambda name: which if name == "apt-cache" else None)
    monkeypatch.setattr(
        profiles.subprocess, "run", lambda *a, **k: SimpleNamespace(stdout=policy_out, returncode=0, stderr="")
    )


def test_debian_profile_available_with_candidate(monkeypatch):
    _fake_apt(monkeypatch, "frr:\n  Installed: (none)\n  Candidate: 8.4.4-1.1~deb12u2\n")
    ok, reason = profiles.get("frr@8.4").available()
    assert ok and "8.4.4-1.1~deb12u2" in reason


def test_debian_profile_unavailable_without_candidate(monkeypatch):
    _fake_apt(monkeypatch, "bird2:\n  Installed: (none)\n  Candidate: (none)\n")
    ok, reason = profiles.get("bird@2.0").available()
    assert not ok and "apt-get update" in reason
    with pytest.raises(ProfileUnavailableError, match="bird2"):
        profiles.get("bird@2.0").require_available()


def test_debian_profile_unavailable_without_apt(monkeypatch):
    _fake_apt(monkeypatch, "", which=None)
    ok, reason = profiles.get("frr").available()
    assert not ok and "apt-cache" in reason


def test_a_release_names_its_own_image_and_the_default_release_the_plain_one():
    assert profiles.get("frr@10.3").name == "frr" and profiles.get("frr").release.suite == "trixie"
    old = profiles.get("frr@8.4")
    assert (old.name, old.family, old.release.suite, old.package) == ("frr@8.4", "frr", None, "frr")
    assert profiles.get("bird@2.0").family == "bird" and profiles.canonical("bird@2.17") == "bird"
    assert profiles.family_of("frr@8.4") == "frr"


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("frr@9.1", "frr@10.3 (Debian 13), frr@8.4 (Debian 12)"),
        ("xorp@1.8", "use ROUTER=xorp"),
        ("quagga", "frr, bird"),
    ],
)
def test_an_unknown_release_names_the_served_ones(value, says):
    with pytest.raises(UnknownProfileError, match=re.escape(says)):
        profiles.get(value)


def test_xorp_unavailable_says_exactly_why(monkeypatch, tmp_path):
    monkeypatch.delenv("XORP_ROOT", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    ok, reason = profiles.get("xorp").available()
    assert not ok
    assert "XORP is not packaged in Debian" in reason and "xorp_rtrmgr" in reason and "PATH" in reason
    with pytest.raises(ProfileUnavailableError, match="xorp_rtrmgr"):
        profiles.get("xorp").require_available()


def _fake_xorp(tmp_path):
    sbin = tmp_path / "xorp" / "sbin"
    sbin.mkdir(parents=True)
    exe = sbin / "xorp_rtrmgr"
    exe.write_text("#!/bin/sh\nexit 0\n")
    exe.chmod(0o755)
    return tmp_path / "xorp"


def test_xorp_available_from_path(monkeypatch, tmp_path):
    root = _fake_xorp(tmp_path)
    monkeypatch.delenv("XORP_ROOT", raising=False)
    monkeypatch.setenv("PATH", str(root / "sbin"))
    ok, reason = profiles.get("xorp").available()
    assert ok and str(root) in reason
    assert profiles.xorp_root() == root.resolve()


def test_xorp_available_from_xorp_root(monkeypatch, tmp_path):
    root = _fake_xorp(tmp_path)
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setenv("XORP_ROOT", str(root))
    assert profiles.get("xorp").available()[0]
    monkeypatch.setenv("XORP_ROOT", str(tmp_path / "elsewhere"))
    assert not profiles.get("xorp").available()[0]


def test_host_packages_readable_with_plain_python():
    """The Makefile reads HOST_PACKAGES with the system python3 before the venv exists:
    routers.build must import only the standard library (and migrate.core.errors)."""
    code = (
        "import sys; sys.path.insert(0, '.'); from routers.build import HOST_PACKAGES; "
        "mods = [m for m in sys.modules if m.split('.')[0] not in (*sys.stdlib_module_names, '__main__')]; "
        "print(' '.join(HOST_PACKAGES)); print(' '.join(sorted(mods)))"
    )
    out = subprocess.run([sys.executable, "-I", "-S", "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    packages, mods = out.stdout.splitlines()
    assert {"apt", "dpkg", "qemu-system-x86"} <= set(packages.split())
    assert {m.split(".")[0] for m in mods.split()} <= {"routers", "migrate"}, mods


def _image(packed: int, unpacked: int):
    from pathlib import Path

    from routers.guest import GuestImage

    manifest = {"files": {"initrd.img": {"bytes": packed, "uncompressed_bytes": unpacked}},
                "router": {"upstream_version": "10.3"}}  # fmt: skip
    return GuestImage(kernel=Path("k"), initrd=Path("i"), manifest=manifest)


def test_an_image_too_big_for_mem_is_refused_with_the_mem_it_needs():
    """The sizes of the real FRR 10.3 and 8.4 images of 2026-12-02: 10.3 failed to unpack at
    MEM=128 and booted at 136; 8.4 failed at 96 and booted at 112."""
    from routers.errors import TooLittleMemoryError

    frr10, frr84 = _image(10_758_867, 39_150_272), _image(7_435_408, 21_440_708)
    assert 128 < frr10.min_mem_mib <= 160 and 96 < frr84.min_mem_mib <= 112
    frr10.check_mem(frr10.min_mem_mib, "frr")
    with pytest.raises(TooLittleMemoryError, match=r"MEM=128 is too small for ROUTER=frr \(10\.3\).*MEM=144 or more"):
        frr10.check_mem(128, "frr")
    assert TooLittleMemoryError("x").exit_code == 2
    assert _no_sizes().min_mem_mib is None


def _no_sizes():
    from pathlib import Path

    from routers.guest import GuestImage

    return GuestImage(kernel=Path("k"), initrd=Path("i"), manifest={})
