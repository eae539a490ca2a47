"""The guest's traffic tools (routers.build CROSSTRAFFIC_TOOLS) linked against the guest's own
C library: their libraries are taken from the guest's tree or its packages' trees first, from
the build host only when neither has them, and the manifest says which."""

import shutil
from pathlib import Path

import pytest

from routers import build, elf
from routers.guest import ENDHOST_TOOLS

pytestmark = pytest.mark.skipif(shutil.which(build.CC) is None, reason=f"{build.CC} not installed")


def _host_lib(soname: str) -> str:
    for d in build.DEFAULT_LIB_DIRS:
        if (Path(d) / soname).is_file():
            return f"{d}/{soname}"
    pytest.skip(f"{soname} not found on this host")


def test_tools_are_dynamic_and_take_their_libraries_from_the_host_only_when_the_guest_lacks_them(tmp_path):
    empty = build.Rootfs(tmp_path / "empty")
    tools = build._add_tools(empty, build.compiler_version())
    for name in ENDHOST_TOOLS:
        t = tools[name]
        binary = empty.host(t["path"])
        assert t["linkage"] == "dynamic" and "-static" not in t["cflags"], t
        assert elf.dynamic_info(binary).interpreter is not None
        assert "libc.so.6" in t["needed"] and set(t["host_libraries"]) == set(t["needed"]), t
        for soname in t["needed"]:
            assert empty.host(_host_lib(soname)).exists(), soname  # copied in beside the tool
    assert tools["vrmig-dirty"]["linkage"] == "static"

    # a guest whose packages carry libc and libm: nothing comes from the host
    pkg = tmp_path / "pkg"
    for soname in ("libc.so.6", "libm.so.6"):
        src = _host_lib(soname)
        (pkg / src.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, pkg / src.lstrip("/"))
    guest = build.Rootfs(tmp_path / "guest")
    guest.copy_from(pkg, _host_lib("libc.so.6"))
    tools = build._add_tools(guest, build.compiler_version(), [pkg])
    for name in ENDHOST_TOOLS:
        assert tools[name]["host_libraries"] == [], tools[name]
    assert guest.host(_host_lib("libm.so.6")).exists()  # from the package tree, not the host


def test_a_library_found_nowhere_is_a_build_error(tmp_path, monkeypatch):
    monkeypatch.setattr(build, "DEFAULT_LIB_DIRS", ("/nonexistent",))
    with pytest.raises(build.BuildError, match="shared libraries not found in the guest or on this host"):
        build._add_tools(build.Rootfs(tmp_path / "r"), build.compiler_version())
