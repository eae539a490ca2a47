"""routers.host_image_parts: the initrd packing and manifest fields of the host images."""

from __future__ import annotations

import gzip
import hashlib
import time
from pathlib import Path
from typing import Any

from routers import host_image_parts
from routers.host_image_parts import build_from_packages, file_facts, manifest_head, pack_initrd


def test_pack_initrd_writes_gzip_newc_with_console_and_removes_root(tmp_path: Path) -> None:
    root = tmp_path / "rootfs"
    (root / "etc").mkdir(parents=True)
    (root / "etc" / "hosts").write_text("127.0.0.1 localhost\n")
    size = pack_initrd(root, tmp_path / "initrd.img", compresslevel=6)
    raw = gzip.decompress((tmp_path / "initrd.img").read_bytes())
    assert len(raw) == size
    assert raw.startswith(b"070701")
    for name in (b"etc/hosts", b"dev/console", b"TRAILER!!!"):
        assert name in raw
    assert not root.exists()


def test_manifest_head_and_file_facts(tmp_path: Path) -> None:
    head = manifest_head(3, time.monotonic() - 2.0, "abc")
    assert list(head) == ["format", "built_at", "build_seconds", "inputs_sha256"]
    assert head["format"] == 3 and head["inputs_sha256"] == "abc" and head["built_at"].endswith("Z")
    assert head["build_seconds"] >= 2.0
    (tmp_path / "a").write_bytes(b"xyz")
    assert file_facts(tmp_path, ["a"]) == {"a": {"sha256": hashlib.sha256(b"xyz").hexdigest(), "bytes": 3}}


def test_build_from_packages_assembles_from_the_fetched_pools(tmp_path: Path, monkeypatch: Any) -> None:
    fetched: list[tuple[str, dict[str, str], Path]] = []

    def fetch_and_assemble(label: str, packages: dict[str, str], cdir: Path, assemble: Any) -> None:
        fetched.append((label, packages, cdir))
        assemble({"pkg": tmp_path / "pool"})

    monkeypatch.setattr(host_image_parts.debs, "fetch_and_assemble", fetch_and_assemble)
    calls: list[tuple[Any, ...]] = []
    inputs = {"packages": {"pkg": "1.0"}}
    build_from_packages("x image", lambda *args: calls.append(args))(tmp_path, inputs, "fp", 1.5)
    assert fetched == [("x image", {"pkg": "1.0"}, tmp_path)]
    assert calls == [(tmp_path, inputs, "fp", 1.5, {"pkg": tmp_path / "pool"})]


def test_pinned_inputs_caches_per_apt_state_and_adds_format_and_recipe(tmp_path: Path, monkeypatch: Any) -> None:
    seen: list[tuple[Path, dict[str, Any]]] = []

    def cached_resolution(path: Path, key: dict[str, Any], compute: Any) -> dict[str, Any]:
        seen.append((path, key))
        return dict(compute())

    monkeypatch.setattr(host_image_parts, "apt_state", lambda: "apt1")
    monkeypatch.setattr(host_image_parts, "cached_resolution", cached_resolution)
    got = host_image_parts.pinned_inputs(tmp_path, "img", 4, lambda: {"packages": {"p": "1"}}, "r")
    assert got == {"packages": {"p": "1"}, "format": 4, "recipe_sha256": "r"}
    assert seen == [(tmp_path / "resolved-img.json", {"apt_state": "apt1", "format": 4})]
