"""make criu: private apt configuration, package selection, manifest, runtime lookup (no root)."""

import json
import os
import stat
from pathlib import Path

import pytest

from migrate.core.errors import DependencyError
from migrate.drivers.criu import setup as criu_setup
from migrate.drivers.criu import tool as criutool

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "criu"


def test_runtime_packages_from_captured_apt_cache_depends():
    text = (FIXTURES / "apt-cache-depends-criu-forky.txt").read_text()
    pkgs = criu_setup.runtime_packages(text)
    assert "criu" in pkgs and "libcompel1" in pkgs and "libc6" in pkgs and "libnftables1" in pkgs
    assert all(p == "criu" or p.startswith("lib") for p in pkgs)
    assert not any(p.startswith("<") for p in pkgs)
    assert pkgs == sorted(set(pkgs))


def test_apt_options_are_private(tmp_path):
    opts = criu_setup.apt_options(tmp_path, "trixie")
    values = dict(o.split("=", 1) for o in opts if o != "-o")
    assert values["Dir::Etc::sourceparts"] == "-"  # never the system's sources.list.d
    for key in ("Dir::Etc::sourcelist", "Dir::State::Lists", "Dir::Cache", "Dir::State::status"):
        assert values[key].startswith(str(tmp_path)), key
    assert opts.count("-o") * 2 == len(opts)


def test_prepare_apt_dir_names_only_the_suite(tmp_path):
    criu_setup.prepare_apt_dir(tmp_path, "trixie")
    line = (tmp_path / "sources.list").read_text()
    assert line.startswith("deb [arch=amd64 signed-by=") and line.rstrip().endswith(" trixie main")
    assert (tmp_path / "status").read_text() == ""
    assert (tmp_path / "lists" / "partial").is_dir() and (tmp_path / "cache" / "archives" / "partial").is_dir()


def test_private_argv_uses_the_suites_own_loader(tmp_path):
    argv = criu_setup.private_argv(tmp_path)
    assert argv[0].endswith("usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2")
    assert argv[1:3] == ["--library-path", str(tmp_path / "usr/lib/x86_64-linux-gnu")]
    assert argv[3] == str(tmp_path / "usr/sbin/criu")


def _fake_criu(path: Path, check_out: str, check_rc: int = 0, feature_rc: int = 0) -> Path:
    """A stand-in criu answering --version, check and check --feature like the real one."""
    path = path.parent / "bin" / path.name
    path.parent.mkdir()
    path.write_text(
        "#!/bin/sh\n"
        'case "$1" in\n'
        "  --version) echo 'Version: 4.2.1'; exit 0 ;;\n"
        f"  check) if [ \"$2\" = --feature ]; then echo 'Warn  (criu/cr-check.c:824): Dirty tracking is OFF.'; "
        f"exit {feature_rc}; fi; echo '{check_out}'; exit {check_rc} ;;\n"
        "esac\nexit 1\n"
    )
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def _manifest(cache: Path, argv: list[str]) -> None:
    root = criu_setup.cache_root(cache)
    root.mkdir(parents=True)
    cand = criu_setup.Candidate(source="forky", argv=argv, version="4.2.1", packages={"criu": "4.2.1-1"})
    criu_setup.write_manifest(root, cand, [{"source": "trixie", "reason": "dump failed"}])


def test_manifest_round_trip(tmp_path):
    _manifest(tmp_path, ["/x/ld.so", "--library-path", "/x", "/x/criu"])
    m = criu_setup.read_manifest(tmp_path)
    assert m["chosen"]["source"] == "forky" and m["rejected"][0]["source"] == "trixie"
    assert m["kernel"] == os.uname().release


def test_locate_reads_the_manifest_and_checks(tmp_path):
    fake = _fake_criu(tmp_path / "criu", "Looks good.")
    _manifest(tmp_path, [str(fake)])
    found = criutool.locate(tmp_path)
    assert (found.version, found.source, found.argv) == ("4.2.1", "forky", (str(fake),))


def test_locate_names_the_failing_check_and_make_setup(tmp_path):
    fake = _fake_criu(tmp_path / "criu", "Error (criu/vdso.c:123): vdso: Unexpected rt vDSO area bounds", 1)
    _manifest(tmp_path, [str(fake)])
    with pytest.raises(DependencyError) as err:
        criutool.locate(tmp_path)
    assert "Unexpected rt vDSO area bounds" in str(err.value) and "make setup" in str(err.value)


def test_locate_without_any_criu(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(DependencyError, match="make setup"):
        criutool.locate(tmp_path)


def test_precopy_needs_dirty_tracking(tmp_path):
    fake = _fake_criu(tmp_path / "criu", "Looks good.", feature_rc=1)
    crit = criutool.CriuBinary((str(fake),), "4.2.1", "forky")
    with pytest.raises(DependencyError, match="CONFIG_MEM_SOFT_DIRTY"):
        criutool.require_mode(crit, "precopy")
    criutool.require_mode(crit, "stopcopy")  # needs nothing more


def test_command_lines():
    d = criutool.dump_args(42, Path("/i/1"), "198.19.255.2", 4444, action_script=Path("/a.sh"))
    assert d[:5] == ["dump", "--tree", "42", "--images-dir", "/i/1"]
    assert ["--page-server", "--address", "198.19.255.2", "--port", "4444"] == d[5:10]
    assert "--display-stats" in d and d[-2:] == ["--action-script", "/a.sh"] and "--track-mem" not in d
    local = criutool.dump_args(42, Path("/i/1"), None, None)
    assert "--page-server" not in local
    pre = criutool.dump_args(42, Path("/i/2"), "a", 1, pre=True, prev="../1", track_mem=True)
    assert pre[0] == "pre-dump" and ["--prev-images-dir", "../1"] == pre[pre.index("--prev-images-dir") :][:2]
    assert "--track-mem" in pre and "pre-dump.log" in pre
    r = criutool.restore_args(Path("/i/1"), Path("/root2"), [("eth0", "tapL", "brL")], Path("/p"))
    assert r[r.index("--root") + 1] == "/root2" and "--restore-detached" in r
    assert ["--external", "veth[eth0]:tapL@brL"] == r[r.index("--external") :][:2]
    ps = criutool.page_server_args(Path("/i/2"), "198.19.255.2", 4444, prev="../1")
    assert ps[0] == "page-server" and ["--status-fd", "1"] == ps[ps.index("--status-fd") :][:2]
    assert ps[-2:] == ["--prev-images-dir", "../1"]


def test_manifest_is_json(tmp_path):
    _manifest(tmp_path, ["/c"])
    json.loads(criu_setup.manifest_path(tmp_path).read_text())
