"""The disk image recipes and builder (routers.disk_recipe, routers.disk_image): recipe parsing and
its cache key, the mmdebstrap argv, the boot files, the cache check and the NoCloud seed.  Nothing
here downloads or builds an image; the seed is built for real when dosfstools and mtools exist."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from routers import __main__ as routers_main
from routers import disk_image, disk_recipe
from routers.errors import RecipeError, SeedError

REPO_RECIPE = "debian-frr-cloudinit"


@pytest.fixture
def recipe_copy(tmp_path: Path) -> Path:
    """A copy of the repository's recipe directory, to modify."""
    dst = tmp_path / "myrecipe"
    shutil.copytree(disk_recipe.RECIPES_DIR / REPO_RECIPE, dst)
    return dst


def _edit(recipe_dir: Path, old: str, new: str) -> None:
    path = recipe_dir / disk_recipe.RECIPE_FILE
    text = path.read_text()
    assert old in text, old
    path.write_text(text.replace(old, new, 1))


def test_repository_recipe_parses() -> None:
    r = disk_recipe.load(REPO_RECIPE)
    assert r.name == REPO_RECIPE
    assert (r.suite, r.variant, r.architecture) == ("trixie", "apt", "amd64")
    for pkg in ("frr", "cloud-init", "systemd-sysv", "linux-image-cloud-amd64"):
        assert pkg in r.packages
    assert "systemd-networkd-wait-online.service" in r.mask_units
    assert r.root_mib == r.size_mib - 1 - r.boot_mib
    assert r.overlay is not None
    cfg = (r.overlay / "etc/cloud/cloud.cfg.d/90-vrmig.cfg").read_text()
    assert "datasource_list: [ NoCloud ]" in cfg


def test_a_uefi_recipe_boots_systemd_boot_from_an_esp(recipe_copy: Path) -> None:
    r = disk_recipe.load("debian-bird-console")
    assert r.firmware == "uefi" and "systemd-boot-efi" in r.packages
    assert "type=ef, bootable" in disk_image.sfdisk_script(r)
    assert "type=c, bootable" in disk_image.sfdisk_script(disk_recipe.load(REPO_RECIPE))
    entry = disk_image.loader_entry(r)
    assert "linux /vmlinuz\ninitrd /initrd.img\n" in entry and f"root=LABEL={r.root_label} console=ttyS0" in entry
    assert disk_image.loader_conf().startswith("default vrmig.conf\ntimeout 0\n")
    _edit(recipe_copy, "[disk]", '[disk]\nfirmware = "uefi"')  # the FRR recipe has no systemd-boot-efi
    with pytest.raises(RecipeError, match="systemd-boot-efi"):
        disk_recipe.load(recipe_copy)


def test_the_console_router_recipe_sets_a_root_password() -> None:
    r = disk_recipe.load("debian-bird-console")
    assert r.suite == "bookworm" and "bird" in r.packages and "cloud-init" not in r.packages
    assert r.root_password == "vrmig" and "root_password" not in repr(r)
    assert disk_recipe.load(REPO_RECIPE).root_password is None


def test_recipe_by_directory_path(recipe_copy: Path) -> None:
    r = disk_recipe.load(recipe_copy)
    assert r.name == "myrecipe" and r.directory == recipe_copy.resolve()


def test_cache_key_is_stable_and_covers_the_overlay(recipe_copy: Path) -> None:
    key = disk_recipe.recipe_key(disk_recipe.load(recipe_copy))
    assert key == disk_recipe.recipe_key(disk_recipe.load(recipe_copy))
    assert key == disk_recipe.recipe_key(disk_recipe.load(REPO_RECIPE))  # content, not location
    (recipe_copy / "NOTES.md").write_text("not part of the image\n")
    assert disk_recipe.recipe_key(disk_recipe.load(recipe_copy)) == key
    overlay_file = recipe_copy / "rootfs/etc/cloud/cloud.cfg.d/90-vrmig.cfg"
    overlay_file.write_text(overlay_file.read_text() + "# one more line\n")
    key2 = disk_recipe.recipe_key(disk_recipe.load(recipe_copy))
    assert key2 != key
    overlay_file.chmod(0o600)
    assert disk_recipe.recipe_key(disk_recipe.load(recipe_copy)) != key2


def test_cache_key_covers_recipe_toml(recipe_copy: Path) -> None:
    key = disk_recipe.recipe_key(disk_recipe.load(recipe_copy))
    _edit(recipe_copy, "size_mib = 2048", "size_mib = 3072")
    assert disk_recipe.recipe_key(disk_recipe.load(recipe_copy)) != key


@pytest.mark.parametrize(
    ("old", "new", "words"),
    [
        ('variant = "apt"', 'variant = "fancy"', ["'variant'", "fancy", "minbase"]),
        ('suite = "trixie"\n', "", ["'suite'", "missing"]),
        ("size_mib = 2048", 'size_mib = "big"', ["'size_mib'", "must be an integer"]),
        ("size_mib = 2048", "size_mib = 100", ["'size_mib'", "boot_mib + 257"]),
        ('root_label = "vrmig-root"', 'root_label = "a label with spaces"', ["'root_label'"]),
        ('boot_label = "VRMIGBOOT"', 'boot_label = "lowercase"', ["'boot_label'", "upper-case"]),
        ('"apt-daily.timer",', '"apt daily",', ["'mask'", "'apt daily'", "systemd unit name"]),
        ('"frr",', '"FRR Routing",', ["'packages'", "Debian package name"]),
        ('kernel_cmdline = "', 'kernel_cmdline = "root=/dev/sda1 ', ["'kernel_cmdline'", "root="]),
        ("format = 1", "format = 7", ["'format'", "format = 1"]),
        ("[disk]", '[users]\nroot_password = "a:b"\n[disk]', ["'root_password'", "chpasswd"]),
        ("[disk]", '[disk]\nfirmware = "coreboot"', ["'firmware'", "bios, uefi"]),
    ],
)
def test_bad_recipe_names_file_and_field(recipe_copy: Path, old: str, new: str, words: list[str]) -> None:
    _edit(recipe_copy, old, new)
    with pytest.raises(RecipeError) as exc:
        disk_recipe.load(recipe_copy)
    msg = str(exc.value)
    assert exc.value.exit_code == 2
    assert str(recipe_copy / disk_recipe.RECIPE_FILE) in msg and "\n" not in msg
    for w in words:
        assert w in msg, (w, msg)


def test_unknown_recipe_lists_the_known_ones(tmp_path: Path) -> None:
    with pytest.raises(RecipeError, match=rf"no recipe.toml there.*{REPO_RECIPE}"):
        disk_recipe.load("no-such-recipe")
    with pytest.raises(RecipeError):
        disk_recipe.load(tmp_path)


def test_cli_bad_recipe_exits_2_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert routers_main.main(["disk", "no-such-recipe"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("routers: error: no-such-recipe: no recipe.toml") and "\n" not in err


def test_cli_seed_bad_user_data_names_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    user, meta = tmp_path / "user-data", tmp_path / "meta-data"
    user.write_text("runcmd: []\n")
    meta.write_text("instance-id: x\n")
    argv = ["seed", str(tmp_path / "seed.img"), "--user-data", str(user), "--meta-data", str(meta)]
    assert routers_main.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"routers: error: {user}: user-data must start with '#cloud-config'") and "\n" not in err
    assert routers_main.main([*argv[:3], str(tmp_path / "missing"), *argv[4:]]) == 2
    assert "missing: cannot read it" in capsys.readouterr().err


def test_mmdebstrap_argv_is_a_list_of_words(tmp_path: Path) -> None:
    r = disk_recipe.load(REPO_RECIPE)
    argv = disk_image.mmdebstrap_argv(r, tmp_path / "root", mirror="http://mirror.example/debian")
    assert isinstance(argv, list) and all(isinstance(a, str) for a in argv)
    assert argv[0] == "mmdebstrap"
    assert argv[-3:] == ["trixie", str(tmp_path / "root"), "http://mirror.example/debian"]
    assert "--mode=root" in argv and "--variant=apt" in argv and "--format=directory" in argv
    include = [a for a in argv if a.startswith("--include=")]
    assert include == ["--include=" + ",".join(r.packages)]
    assert f"--essential-hook=sync-in {r.overlay} /" in argv
    assert "--dpkgopt=path-exclude=/usr/share/man/*" in argv
    assert "--dpkgopt=path-include=/usr/share/doc/*/copyright" in argv
    assert not any("Recommends" in a for a in argv)  # mmdebstrap installs no recommends by default


def test_mmdebstrap_argv_without_overlay(recipe_copy: Path, tmp_path: Path) -> None:
    shutil.rmtree(recipe_copy / disk_recipe.OVERLAY_DIR)
    argv = disk_image.mmdebstrap_argv(disk_recipe.load(recipe_copy), tmp_path / "root")
    assert not any(a.startswith("--essential-hook") for a in argv)


def test_boot_files_find_root_by_label() -> None:
    r = disk_recipe.load(REPO_RECIPE)
    cfg = disk_image.syslinux_cfg(r)
    assert "APPEND initrd=/initrd.img root=LABEL=vrmig-root console=ttyS0,115200" in cfg
    assert "SERIAL 0 115200" in cfg and "TIMEOUT 0" in cfg
    assert disk_image.fstab(r) == "LABEL=vrmig-root / ext4 defaults,noatime 0 0\n"


def test_sfdisk_script_layout() -> None:
    r = disk_recipe.load(REPO_RECIPE)
    script = disk_image.sfdisk_script(r)
    boot_sectors = r.boot_mib * 2048
    assert f"start=2048, size={boot_sectors}, type=c, bootable" in script
    assert f"start={2048 + boot_sectors}, size={r.root_mib * 2048}, type=83" in script
    assert 2048 + boot_sectors + r.root_mib * 2048 == r.size_mib * 2048  # the disk is filled exactly


def test_copy_sparse_writes_at_offset(tmp_path: Path) -> None:
    src, dst = tmp_path / "part", tmp_path / "disk"
    src.write_bytes(b"A" * 10 + bytes(disk_image.MIB) + b"B" * 5)
    dst.write_bytes(b"\xff" * (3 * disk_image.MIB))
    disk_image._copy_sparse(src, dst, 4096)
    data = dst.read_bytes()
    assert data[:4096] == b"\xff" * 4096
    assert data[4096 : 4096 + 10] == b"A" * 10
    tail = 4096 + 10 + disk_image.MIB
    assert data[tail : tail + 5] == b"B" * 5


def test_reported_versions_prefix() -> None:
    r = disk_recipe.load(REPO_RECIPE)
    versions = {"frr": "10.3-3", "cloud-init": "25.1.4-1", "linux-image-6.12-cloud-amd64": "6.12-1", "bash": "5.2"}
    assert disk_image.reported_versions(r, versions) == {
        "cloud-init": "25.1.4-1",
        "frr": "10.3-3",
        "linux-image-6.12-cloud-amd64": "6.12-1",
    }


def _fake_image(cache: Path, recipe: disk_recipe.Recipe, disk_bytes: bytes) -> Path:
    d = disk_image.image_dir(recipe.name, cache)
    d.mkdir(parents=True)
    (d / disk_image.DISK_NAME).write_bytes(disk_bytes)
    manifest = {
        "format": disk_image.MANIFEST_FORMAT,
        "recipe": recipe.name,
        "recipe_key": disk_recipe.recipe_key(recipe),
        "versions": {"frr": "10.3-3"},
        "disk": {"sha256": hashlib.sha256(disk_bytes).hexdigest(), "bytes": len(disk_bytes)},
    }
    (d / disk_image.MANIFEST_NAME).write_text(json.dumps(manifest))
    return d


def test_cached_image_is_not_rebuilt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    r = disk_recipe.load(REPO_RECIPE)
    d = _fake_image(tmp_path, r, b"qcow2 stand-in")

    def no_build() -> None:
        raise AssertionError("build started although the image is up to date")

    monkeypatch.setattr(disk_image, "_check_host", no_build)
    res = disk_image.build(REPO_RECIPE, tmp_path)
    assert not res.built and res.image.disk == d / disk_image.DISK_NAME
    assert res.image.manifest["versions"] == {"frr": "10.3-3"}


def test_changed_recipe_or_damaged_disk_is_not_up_to_date(tmp_path: Path, recipe_copy: Path) -> None:
    r = disk_recipe.load(recipe_copy)
    d = _fake_image(tmp_path, r, b"qcow2 stand-in")
    assert disk_image.up_to_date(r, tmp_path) is not None
    (d / disk_image.DISK_NAME).write_bytes(b"qcow2 stand-iN")
    assert disk_image.up_to_date(r, tmp_path) is None
    (d / disk_image.DISK_NAME).write_bytes(b"qcow2 stand-in")
    _edit(recipe_copy, "boot_mib = 64", "boot_mib = 96")
    assert disk_image.up_to_date(disk_recipe.load(recipe_copy), tmp_path) is None


def test_build_dir_with_a_mount_inside_is_left_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    work = tmp_path / ".build-x"
    (work / "root" / "proc").mkdir(parents=True)
    info = (
        "22 1 0:21 / / rw - ext4 /dev/vda rw\n"
        f"90 22 0:5 / {work}/root/proc rw - proc proc rw\n"
        f"91 22 0:6 / {tmp_path}/.build-xy rw - tmpfs tmpfs rw\n"
    )
    assert disk_image.mounts_under(work, info) == [f"{work}/root/proc"]
    monkeypatch.setattr(disk_image, "mounts_under", lambda path: [f"{work}/root/proc"])
    disk_image._remove_work(work)
    assert (work / "root" / "proc").is_dir()
    monkeypatch.setattr(disk_image, "mounts_under", lambda path: [])
    disk_image._remove_work(work)
    assert not work.exists()


def test_seed_rejects_user_data_cloud_init_ignores(tmp_path: Path) -> None:
    with pytest.raises(SeedError) as exc:
        disk_image.nocloud_seed(tmp_path / "seed.img", "write_files: []\n", "instance-id: x\n", None)
    assert exc.value.exit_code == 2 and "#cloud-config" in str(exc.value)


def test_seed_argv_labels_cidata(tmp_path: Path) -> None:
    (argv,) = disk_image.seed_argv(tmp_path / "seed.img")
    assert argv[0] == "mkfs.vfat" and argv[argv.index("-n") + 1] == "CIDATA"


needs_mtools = pytest.mark.skipif(
    not all(shutil.which(t) for t in ("mkfs.vfat", "mcopy", "mtype", "mlabel", "mdir")),
    reason="dosfstools and mtools not installed (make apt)",
)


def _mtools(*argv: str) -> str:
    return subprocess.run(argv, capture_output=True, text=True, check=True).stdout


@needs_mtools
def test_seed_reads_back(tmp_path: Path) -> None:
    seed_dir = disk_recipe.RECIPES_DIR / f"{REPO_RECIPE}.seed"
    user = (seed_dir / "user-data").read_text()
    meta = (seed_dir / "meta-data").read_text()
    net = (seed_dir / "network-config").read_text()
    out = disk_image.nocloud_seed(tmp_path / "seed.img", user, meta, net)
    assert _mtools("mlabel", "-i", str(out), "-s", "::").strip().endswith("CIDATA")
    assert _mtools("mtype", "-i", str(out), "::user-data") == user
    assert _mtools("mtype", "-i", str(out), "::meta-data") == meta
    assert _mtools("mtype", "-i", str(out), "::network-config") == net
    assert "52:54:00:c6:12:01" in net and "198.18.2.1/24" in net
    assert "VRMIG-CLOUDINIT-DONE" in user and "ip route 198.18.4.10/32 198.18.2.10" in user


@needs_mtools
def test_seed_without_network_config(tmp_path: Path) -> None:
    out = disk_image.nocloud_seed(tmp_path / "seed.img", "#cloud-config\n", "instance-id: x\n", None)
    listing = _mtools("mdir", "-b", "-i", str(out), "::")
    assert "user-data" in listing and "meta-data" in listing and "network-config" not in listing
    again = disk_image.nocloud_seed(out, "#cloud-config\nruncmd: []\n", "instance-id: y\n", None)
    assert _mtools("mtype", "-i", str(again), "::meta-data") == "instance-id: y\n"
