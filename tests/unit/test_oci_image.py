"""The OCI image builder (routers.oci_image): container recipe parsing and its cache key, the
mmdebstrap and umoci argv, manifest.json and the cache check, and unpacking a tiny hand-made OCI
layout (and a docker save archive made from it) with the real umoci and skopeo when they are
installed.  Nothing here downloads or builds an image."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from routers import __main__ as routers_main
from routers import disk_recipe, oci_image
from routers.errors import ProfileFileError, RecipeError

REPO_RECIPE = "debian-frr-oci"
TAG = "10.3"

needs_umoci = pytest.mark.skipif(shutil.which("umoci") is None, reason="umoci not installed (make apt)")
needs_skopeo = pytest.mark.skipif(
    shutil.which("umoci") is None or shutil.which("skopeo") is None, reason="umoci or skopeo not installed (make apt)"
)


@pytest.fixture
def recipe_copy(tmp_path: Path) -> Path:
    """A copy of the repository's container recipe directory, to modify."""
    dst = tmp_path / "myrecipe"
    shutil.copytree(disk_recipe.RECIPES_DIR / REPO_RECIPE, dst)
    return dst


def _edit(recipe_dir: Path, old: str, new: str) -> None:
    path = recipe_dir / disk_recipe.RECIPE_FILE
    text = path.read_text()
    assert old in text, old
    path.write_text(text.replace(old, new, 1))


def _layer(entries: list[tuple[str, bytes | None, int]]) -> bytes:
    """A gzip tar layer of (path, content or None for a directory, mode)."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data, mode in entries:
            info = tarfile.TarInfo(name)
            info.mode = mode
            if data is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return gzip.compress(raw.getvalue(), mtime=0)


def _put_blob(layout: Path, data: bytes, media_type: str) -> dict[str, object]:
    digest = hashlib.sha256(data).hexdigest()
    (layout / "blobs" / "sha256" / digest).write_bytes(data)
    return {"mediaType": media_type, "digest": f"sha256:{digest}", "size": len(data)}


def make_layout(layout: Path, tag: str = TAG) -> str:
    """A two-layer OCI image layout written by hand: the first layer holds usr/lib/frr/zebra and
    usr/lib/frr/old, the second adds etc/frr/daemons and whites out old.  Returns the digest."""
    (layout / "blobs" / "sha256").mkdir(parents=True)
    (layout / "oci-layout").write_text('{"imageLayoutVersion":"1.0.0"}')
    one = _layer(
        [
            ("usr", None, 0o755),
            ("usr/lib", None, 0o755),
            ("usr/lib/frr", None, 0o755),
            ("usr/lib/frr/zebra", b"#!/bin/sh\necho zebra\n", 0o755),
            ("usr/lib/frr/old", b"gone in layer two\n", 0o644),
        ]
    )
    two = _layer(
        [
            ("etc", None, 0o755),
            ("etc/frr", None, 0o755),
            ("etc/frr/daemons", b"zebra=yes\n", 0o644),
            ("usr", None, 0o755),
            ("usr/lib", None, 0o755),
            ("usr/lib/frr", None, 0o755),
            ("usr/lib/frr/.wh.old", b"", 0o644),
        ]
    )
    layer_type = "application/vnd.oci.image.layer.v1.tar+gzip"
    layers = [_put_blob(layout, b, layer_type) for b in (one, two)]
    diff_ids = [f"sha256:{hashlib.sha256(gzip.decompress(b)).hexdigest()}" for b in (one, two)]
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {"Entrypoint": ["/usr/lib/frr/zebra"]},
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
    }
    cfg = _put_blob(layout, json.dumps(config).encode(), "application/vnd.oci.image.config.v1+json")
    manifest = {"schemaVersion": 2, "mediaType": oci_image.MANIFEST_MEDIA_TYPE, "config": cfg, "layers": layers}
    desc = _put_blob(layout, json.dumps(manifest).encode(), oci_image.MANIFEST_MEDIA_TYPE)
    desc["annotations"] = {oci_image.REF_ANNOTATION: tag}
    (layout / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [desc]}))
    return str(desc["digest"])


def test_repository_recipe_parses() -> None:
    r = oci_image.load(REPO_RECIPE)
    assert r.name == REPO_RECIPE and r.tag == TAG
    assert (r.suite, r.variant, r.architecture) == ("trixie", "essential", "amd64")
    assert {"frr", "iproute2"} <= set(r.packages)
    assert not any(p.startswith("linux-image") or p in ("systemd", "systemd-sysv") for p in r.packages)
    assert r.entrypoint == ("/usr/local/sbin/vrmig-frr-start",) and r.cmd == ()
    assert r.overlay is not None
    start = r.overlay / "usr/local/sbin/vrmig-frr-start"
    assert os.access(start, os.X_OK) and "/usr/lib/frr/frrinit.sh start" in start.read_text()


@pytest.mark.parametrize(
    ("old", "new", "words"),
    [
        ('tag = "10.3"', 'tag = "-bad tag"', ["[oci]", "'tag'", "-bad tag"]),
        ('tag = "10.3"\n', "", ["[oci]", "'tag'", "missing"]),
        ("[oci]", "[oci]\nports = [179]", ["[oci]", "unknown field 'ports'", "entrypoint"]),
        ("entrypoint = [", "entrypoint = [] #", ["neither 'entrypoint' nor 'cmd'"]),
        ('env = ["PATH=', 'env = ["no equals sign PATH', ["'env'", "NAME=value"]),
        ('workdir = "/"', 'workdir = "etc"', ["'workdir'", "absolute"]),
        ('stop_signal = "SIGTERM"', 'stop_signal = "15"', ["'stop_signal'", "SIGTERM"]),
        ('stop_signal = "SIGTERM"', "stop_signal = 15", ["'stop_signal'", "must be a string"]),
        ('variant = "essential"', 'variant = "tiny"', ["[debian]", "'variant'", "minbase"]),
        ('"frr",', '"FRR Routing",', ["'packages'", "Debian package name"]),
        ("[oci]", "[disk]\nsize_mib = 1\n[oci]", ["[disk]", "python -m routers disk"]),
        ("[oci]", "[not-oci]", ["[oci] is missing"]),
        ("format = 1", "format = 2", ["'format'", "format = 1"]),
        ("format = 1", "format = = 1", ["not valid TOML"]),
    ],
)
def test_bad_recipe_names_file_and_field(recipe_copy: Path, old: str, new: str, words: list[str]) -> None:
    _edit(recipe_copy, old, new)
    with pytest.raises(RecipeError) as exc:
        oci_image.load(recipe_copy)
    msg = str(exc.value)
    assert exc.value.exit_code == 2
    assert str(recipe_copy / disk_recipe.RECIPE_FILE) in msg and "\n" not in msg
    for w in words:
        assert w in msg, (w, msg)


def test_cache_key_is_stable_and_covers_recipe_and_overlay(recipe_copy: Path) -> None:
    key = oci_image.recipe_key(oci_image.load(recipe_copy))
    assert key == oci_image.recipe_key(oci_image.load(REPO_RECIPE))  # content, not location
    (recipe_copy / "NOTES.md").write_text("not part of the image\n")
    assert oci_image.recipe_key(oci_image.load(recipe_copy)) == key
    start = recipe_copy / "rootfs/usr/local/sbin/vrmig-frr-start"
    start.chmod(0o644)
    assert oci_image.recipe_key(oci_image.load(recipe_copy)) != key
    start.chmod(0o755)
    _edit(recipe_copy, 'tag = "10.3"', 'tag = "10.3-b"')
    assert oci_image.recipe_key(oci_image.load(recipe_copy)) != key


def test_mmdebstrap_argv_is_a_list_of_words(tmp_path: Path) -> None:
    r = oci_image.load(REPO_RECIPE)
    argv = oci_image.mmdebstrap_argv(r, tmp_path / "root", mirror="http://mirror.invalid/debian")
    assert argv[0] == "mmdebstrap" and "--mode=root" in argv and "--format=directory" in argv
    assert "--variant=essential" in argv and "--include=frr,iproute2,netbase,systemd-standalone-sysusers" in argv
    assert argv[-3:] == ["trixie", str(tmp_path / "root"), "http://mirror.invalid/debian"]
    assert f"--essential-hook=sync-in {r.overlay} /" in argv
    assert "--dpkgopt=path-exclude=/usr/share/doc/*" in argv


def test_layout_argvs_make_one_tagged_image(tmp_path: Path) -> None:
    r = oci_image.load(REPO_RECIPE)
    tree, layout = tmp_path / "root", tmp_path / "oci"
    init, new, insert, config, gc = oci_image.layout_argvs(r, tree, layout)
    ref = f"{layout}:{TAG}"
    assert init == ["umoci", "init", "--layout", str(layout)]
    assert new == ["umoci", "new", "--image", ref]
    assert insert[:4] == ["umoci", "insert", "--image", ref] and insert[-2:] == [str(tree), "/"]
    assert config[:4] == ["umoci", "config", "--image", ref]
    assert "--config.entrypoint=/usr/local/sbin/vrmig-frr-start" in config
    assert not any(a.startswith("--config.cmd=") for a in config) and "--clear=config.cmd" in config
    assert config.index("--clear=config.env") < config.index(f"--config.env={r.env[0]}")
    assert config[config.index("--config.stopsignal") + 1] == "SIGTERM"
    assert gc == ["umoci", "gc", "--layout", str(layout)]


def test_unpack_and_archive_argv(tmp_path: Path) -> None:
    lay, dest = tmp_path / "oci", tmp_path / "rootfs"
    assert oci_image.unpack_argv(lay, "t", dest, rootless=False) == [
        "umoci", "raw", "unpack", "--image", f"{lay}:t", str(dest),
    ]  # fmt: skip
    assert "--rootless" in oci_image.unpack_argv(lay, "t", dest, rootless=True)
    argv = oci_image.archive_argv(tmp_path / "r.tar", lay, "t", tmp_path / "p.json", ref="router:1")
    assert argv[:3] == ["skopeo", "--policy", str(tmp_path / "p.json")]
    assert argv[-2:] == [f"docker-archive:{tmp_path / 'r.tar'}:router:1", f"oci:{lay}:t"]


def test_reported_versions_prefix() -> None:
    r = oci_image.load(REPO_RECIPE)
    versions = {"frr": "10.3.1-1", "iproute2": "6.15.0-1", "libc6": "2.41-12", "bash": "5.2"}
    assert oci_image.reported_versions(r, versions) == {"frr": "10.3.1-1", "iproute2": "6.15.0-1", "libc6": "2.41-12"}


def test_layout_tags_and_verify(tmp_path: Path) -> None:
    lay = tmp_path / "oci"
    digest = make_layout(lay)
    assert oci_image.layout_tags(lay) == {TAG: digest}
    assert oci_image.verify_layout(lay, TAG, digest) is None
    assert "no image tagged 'latest' (tags: 10.3)" in str(oci_image.verify_layout(lay, "latest"))
    assert "not sha256:0" in str(oci_image.verify_layout(lay, TAG, "sha256:0"))
    layer = oci_image._blob(lay, oci_image.image_blobs(lay, digest)[2]["digest"])
    data = bytearray(layer.read_bytes())
    data[-1] ^= 1
    layer.write_bytes(bytes(data))
    assert "does not match its digest" in str(oci_image.verify_layout(lay, TAG))
    assert oci_image.layout_tags(tmp_path / "nothing") == {}


def _fake_build(cache: Path, recipe: oci_image.OciRecipe) -> tuple[Path, str]:
    d = oci_image.image_dir(recipe.name, cache)
    d.mkdir(parents=True)
    digest = make_layout(d / oci_image.LAYOUT_DIR, recipe.tag)
    manifest = {
        "format": oci_image.MANIFEST_FORMAT,
        "recipe": recipe.name,
        "recipe_key": oci_image.recipe_key(recipe),
        "versions": {"frr": "10.3.1-1"},
        "image": {"layout": "oci", "tag": recipe.tag, "digest": digest, "bytes": 1234},
    }
    (d / oci_image.MANIFEST_NAME).write_text(json.dumps(manifest))
    return d, digest


def test_manifest_is_read_back(tmp_path: Path) -> None:
    r = oci_image.load(REPO_RECIPE)
    assert oci_image.read_image(r.name, tmp_path) is None
    d, digest = _fake_build(tmp_path, r)
    image = oci_image.read_image(r.name, tmp_path)
    assert image is not None
    assert (image.layout, image.tag, image.digest) == (d / "oci", TAG, digest)
    assert image.manifest["versions"] == {"frr": "10.3.1-1"}
    (d / oci_image.MANIFEST_NAME).write_text('{"format": 1, "image": {"tag": 3}}')
    assert oci_image.read_image(r.name, tmp_path) is None
    (d / oci_image.MANIFEST_NAME).write_text("not json")
    assert oci_image.read_image(r.name, tmp_path) is None


def test_cached_image_is_not_rebuilt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    r = oci_image.load(REPO_RECIPE)
    d, digest = _fake_build(tmp_path, r)

    def no_build() -> None:
        raise AssertionError("build started although the image is up to date")

    monkeypatch.setattr(oci_image, "_check_host", no_build)
    res = oci_image.build(REPO_RECIPE, tmp_path)
    assert not res.built and res.image.layout == d / "oci" and res.image.digest == digest
    assert routers_main.main(["oci", REPO_RECIPE, "--cache", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert f"{REPO_RECIPE}: up to date: {d / 'oci'}:{TAG} {digest}" in out and "frr=10.3.1-1" in out


def test_changed_recipe_or_damaged_layout_is_not_up_to_date(tmp_path: Path, recipe_copy: Path) -> None:
    r = oci_image.load(recipe_copy)
    d, digest = _fake_build(tmp_path, r)
    assert oci_image.up_to_date(r, tmp_path) is not None
    blob = oci_image._blob(d / "oci", digest)
    saved = blob.read_bytes()
    blob.write_bytes(saved + b" ")
    assert oci_image.up_to_date(r, tmp_path) is None
    blob.write_bytes(saved)
    assert oci_image.up_to_date(r, tmp_path) is not None
    _edit(recipe_copy, '"iproute2",', '"iproute2", "tcpdump",')
    assert oci_image.up_to_date(oci_image.load(recipe_copy), tmp_path) is None


def test_cli_bad_recipe_exits_2_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert routers_main.main(["oci", "no-such-recipe"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("routers: error: no-such-recipe: no recipe.toml") and "\n" not in err
    assert routers_main.main(["oci", "debian-frr-cloudinit"]) == 2
    err = capsys.readouterr().err.strip()
    assert "has a [disk] table" in err and "\n" not in err


def test_unpack_refuses_unknown_tag_and_used_dest(tmp_path: Path) -> None:
    lay = tmp_path / "oci"
    make_layout(lay)
    with pytest.raises(ProfileFileError) as exc:
        oci_image.unpack(lay, "latest", tmp_path / "rootfs")
    assert exc.value.exit_code == 2 and "no image tagged 'latest' (tags: 10.3)" in str(exc.value)
    assert not (tmp_path / "rootfs").exists()
    with pytest.raises(ProfileFileError, match="not an OCI image layout"):
        oci_image.unpack(tmp_path, TAG, tmp_path / "rootfs")
    used = tmp_path / "used"
    used.mkdir()
    (used / "f").write_text("x")
    with pytest.raises(oci_image.BuildError, match="not an empty directory"):
        oci_image.unpack(lay, TAG, used)
    with pytest.raises(ProfileFileError, match="no such file"):
        oci_image.unpack_archive(tmp_path / "none.tar", tmp_path / "rootfs")


def _check_rootfs(root: Path) -> None:
    zebra = root / "usr/lib/frr/zebra"
    assert zebra.read_text() == "#!/bin/sh\necho zebra\n" and os.access(zebra, os.X_OK)
    assert (root / "etc/frr/daemons").read_text() == "zebra=yes\n"
    assert not (root / "usr/lib/frr/old").exists() and not (root / "usr/lib/frr/.wh.old").exists()


@needs_umoci
def test_hand_made_layout_unpacks_with_umoci(tmp_path: Path) -> None:
    lay = tmp_path / "oci"
    make_layout(lay)
    dest = oci_image.unpack(lay, TAG, tmp_path / "rootfs")
    assert dest == tmp_path / "rootfs"
    _check_rootfs(dest)


@needs_skopeo
def test_docker_save_archive_unpacks_via_skopeo(tmp_path: Path) -> None:
    lay = tmp_path / "oci"
    make_layout(lay)
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps(oci_image.ACCEPT_ANYTHING_POLICY))
    archive = tmp_path / "router.tar"
    subprocess.run(
        ["skopeo", "--policy", str(policy), "copy", "--quiet", f"oci:{lay}:{TAG}", f"docker-archive:{archive}:r:1"],
        check=True,
        capture_output=True,
    )
    _check_rootfs(oci_image.unpack_archive(archive, tmp_path / "rootfs"))
    not_tar = tmp_path / "not.tar"
    not_tar.write_text("plain text\n")
    with pytest.raises(ProfileFileError, match="skopeo cannot read it as a docker save archive"):
        oci_image.unpack_archive(not_tar, tmp_path / "rootfs2")


def test_tree_forgets_the_build_host(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    (root / "dev" / "pts").mkdir(parents=True)
    (root / "etc/hostname").write_text("buildhost\n")
    (root / "etc/resolv.conf").symlink_to("/run/systemd/resolve/stub-resolv.conf")
    (root / "dev/fd").symlink_to("/proc/self/fd")
    os.mkfifo(root / "dev/initctl")
    oci_image._forget_build_host(root)
    assert [(root / n).read_text() for n in oci_image.HOST_FILES] == ["", ""]
    assert not (root / "etc/resolv.conf").is_symlink()
    assert oci_image._drop_device_nodes(root) == ["initctl"]
    assert (root / "dev/fd").is_symlink() and (root / "dev/pts").is_dir()
