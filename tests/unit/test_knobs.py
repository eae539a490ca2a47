"""QEMU's migration knobs (migrate.core.knobs): Make variables -> Scenario (validated), -> QMP
capabilities and parameters of each side, -> libvirt flags and typed parameters; the version
checks against older QEMU and libvirt releases; QEMU's effective values in the sweep tables."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from analysis.stats.aggregate import aggregate, point_columns, point_row, run_record
from migrate.campaigns import sweep as sw
from migrate.campaigns.reporting import format_knobs, series_name
from migrate.cli.main import build_parser, main, scenario_from_args
from migrate.core import knobs
from migrate.core.errors import ConfigError
from migrate.drivers.kvm import driver as kvm
from migrate.drivers.libvirt import flags as lf
from migrate.model.scenario import Scenario
from tests.unit._libvirt_binding import assert_binding_has


def _run(*argv: str) -> Scenario:
    return scenario_from_args(build_parser().parse_args(["run", *argv]))


# -- variables -> Scenario --------------------------------------------------------------------


def test_flags_build_the_knob_fields():
    s = _run("--multifd", "4", "--multifd-compression", "zstd", "--downtime-limit", "50", "--max-bandwidth", "1G")
    assert (s.multifd_channels, s.multifd_compression, s.downtime_limit_ms, s.max_bandwidth_bps) == (
        4, "zstd", 50, 10**9
    )  # fmt: skip
    s = _run("--postcopy", "1", "--postcopy-preempt", "1", "--announce", "10,200,3,50")
    assert s.postcopy and s.postcopy_preempt
    assert (s.announce_initial_ms, s.announce_max_ms, s.announce_rounds, s.announce_step_ms) == (10, 200, 3, 50)
    s = _run("--xbzrle", "1", "--xbzrle-cache", "64M", "--auto-converge", "yes", "--cpu-throttle", "30,15")
    assert s.xbzrle and s.xbzrle_cache_bytes == 64 * 2**20 and s.auto_converge
    assert (s.cpu_throttle_initial, s.cpu_throttle_increment) == (30, 15)
    assert _run("--multifd", "0").multifd_channels is None  # 0: QEMU's single migration stream
    assert knobs.requested_text(_run("--multifd", "2", "--downtime-limit", "50").to_dict()) == (
        "DOWNTIME_LIMIT=50 MULTIFD=2"
    )
    assert knobs.requested_text(Scenario().to_dict()) == ""


@pytest.mark.parametrize(
    ("argv", "msg"),
    [
        (["--multifd", "256"], "MULTIFD=256 must be 1-255"),
        (["--multifd", "two"], "MULTIFD='two' is not a whole number"),
        (["--multifd", "1,4"], "MULTIFD=1,4 lists 2 values: a list is an axis of make sweep"),
        (["--multifd-compression", "zstd"], "MULTIFD_COMPRESSION compresses multifd's channels: set MULTIFD=N"),
        (["--multifd", "2", "--multifd-compression", "lz4"], "MULTIFD_COMPRESSION='lz4' is unknown"),
        (["--multifd", "2", "--postcopy", "1"], "MULTIFD with POSTCOPY=1 is refused.*Postcopy is not yet compatible"),
        (
            ["--multifd", "2", "--xbzrle", "1"],
            "MULTIFD with XBZRLE=1 is refused.*Multifd is not compatible with xbzrle",
        ),
        (["--postcopy-preempt", "1"], "POSTCOPY_PREEMPT=1 needs POSTCOPY=1"),
        (["--announce", "50,550,5"], r"ANNOUNCE='50,550,5' is not initial,max,rounds,step"),
        (["--announce", "50,550,5,0"], "ANNOUNCE=50,550,5,0: step must be 1-10000 ms"),
        (["--announce", "50,550,1001,100"], "rounds must be 0-1000"),
        (["--xbzrle-cache", "64M"], "XBZRLE_CACHE sizes XBZRLE's page cache: set XBZRLE=1"),
        (["--xbzrle", "1", "--xbzrle-cache", "3M"], "must be a power of two"),
        (["--xbzrle", "1", "--xbzrle-cache", "512M"], r"larger than the guest's memory \(MEM=256 MiB\)"),
        (["--xbzrle", "1", "--xbzrle-cache", "lots"], "XBZRLE_CACHE='lots' is not a size"),
        (["--cpu-throttle", "20,10"], "CPU_THROTTLE sets auto-converge's throttling: set AUTO_CONVERGE=1"),
        (["--auto-converge", "1", "--cpu-throttle", "20,100"], "both must be 1-99"),
        (["--auto-converge", "maybe"], "AUTO_CONVERGE='maybe' is not a boolean"),
        (["--hv", "criu", "--multifd", "2"], r"MULTIFD is a QEMU migration knob: it needs HV=kvm \(HV=criu"),
        (["--hv", "xen", "--downtime-limit", "50", "--announce", "1,1,1,1"], "DOWNTIME_LIMIT, ANNOUNCE are QEMU"),
    ],
)
def test_bad_knob_values_are_one_line_naming_the_variable(argv, msg):
    with pytest.raises(ConfigError, match=msg) as err:
        _run(*argv)
    assert "\n" not in str(err.value)


def test_scenarios_knob_fields_are_the_tables_in_its_order_after_miglink():
    """Scenario's knob fields come from KNOBS (name, type, default), right after miglink_bps; a
    captured meta.json's scenario loads and gives back the same keys, in the same order."""
    import dataclasses
    import json

    names = [f.name for f in dataclasses.fields(Scenario)]
    start = names.index("miglink_bps") + 1
    fields = dataclasses.fields(Scenario)[start : start + len(knobs.KNOB_FIELDS)]
    assert [(f.name, f.type, f.default) for f in fields] == [(f.name, f.type, f.default) for f in knobs.KNOB_FIELDS]
    assert names[start + len(knobs.KNOB_FIELDS)] == "migrate_timeout_s"
    assert Scenario.__dataclass_params__.frozen
    assert [f.name for f in knobs.KNOB_BY_VAR["ANNOUNCE"].fields] == list(knobs.ANNOUNCE_FIELDS)
    assert knobs.KNOB_BY_VAR["POSTCOPY"].unset() == {"postcopy": False}
    root = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "rundir"
    for meta in sorted(root.glob("*/meta.json")):
        scenario = json.loads(meta.read_text())["scenario"]
        again = Scenario(**scenario).to_dict()
        assert {k: again[k] for k in scenario} == scenario
        assert [k for k in again if k in scenario] == list(scenario)  # same order
    with pytest.raises(TypeError, match="no field 'nothing'"):
        knobs.scenario_fields(after="nothing")(type("C", (), {"__annotations__": {"a": "int"}}))
    with pytest.raises(TypeError, match="declares knob fields itself: postcopy"):
        knobs.scenario_fields(after="a")(type("C", (), {"__annotations__": {"a": "int", "postcopy": "bool"}}))


def test_the_knobs_rules_are_the_tables_and_judge_a_plain_mapping():
    """Each knob's rules are its Knob.check; knobs.validate runs HV's rule first, then those of
    the knobs set, in KNOBS order (Scenario's validation calls it)."""
    base = Scenario().to_dict()
    knobs.validate(base)
    with pytest.raises(ConfigError, match=r"^DOWNTIME_LIMIT=0 must be > 0 ms$"):
        knobs.validate({**base, "downtime_limit_ms": 0})
    with pytest.raises(ConfigError, match=r"^POSTCOPY=1 needs MODE=precopy$"):
        knobs.validate({**base, "postcopy": True, "mode": "stopcopy"})
    with pytest.raises(ConfigError, match=r"^DOWNTIME_LIMIT is a QEMU migration knob: it needs HV=kvm"):
        knobs.validate({**base, "hv": "criu", "downtime_limit_ms": 0})
    with pytest.raises(ConfigError, match=r"^MULTIFD_COMPRESSION compresses multifd's channels"):
        knobs.validate({**base, "multifd_compression": "zstd", "zero_page_detection": "multifd"})
    with pytest.raises(ConfigError, match=r"^ANNOUNCE=None,1,1,1 must set all four"):  # set: any field not unset
        knobs.validate({**base, "announce_max_ms": 1, "announce_rounds": 1, "announce_step_ms": 1})
    assert [k.var for k in knobs.KNOBS if k.check is None] == ["AUTO_CONVERGE", "XBZRLE"]


def test_docs_migrate_md_has_the_knob_tables_that_knobs_gives(tmp_path, capsys):
    """docs/migrate.md's two knob tables are made from KNOBS (``python -m migrate.core.knobs docs``);
    a stale page fails the check."""
    text = knobs.DOC.read_text()
    assert knobs.doc_tables(text) == text, "docs/migrate.md is stale: run python -m migrate.core.knobs docs"
    assert knobs.main(["docs", "--check"]) == 0
    assert "| `AUTO_CONVERGE`, `XBZRLE`, `POSTCOPY` | QEMU migration capabilities" in knobs.variables_table()
    assert "| `POSTCOPY_PREEMPT` | capability `postcopy-preempt`" in knobs.qemu_table()
    flags = knobs.flags_text().replace("\n", " ").strip("`").split(" ")
    assert flags == [f"--{k.flag}" for k in knobs.KNOBS] and "--dirty-limit" in flags
    stale = tmp_path / "migrate.md"
    stale.write_text(text.replace("| `MULTIFD` | capability `multifd`", "| `MULTIFD` | capability `multi-fd`"))
    assert knobs.main(["docs", "--check", "--doc", str(stale)]) == 1
    assert "not what KNOBS gives" in capsys.readouterr().out
    assert knobs.main(["docs", "--doc", str(stale)]) == 0 and stale.read_text() == text
    with pytest.raises(ValueError, match="one <!-- knobs-qemu:begin -->"):
        knobs.doc_tables(text.replace("<!-- knobs-qemu:end -->", ""))


def test_stopcopy_takes_multifd():
    assert Scenario(mode="stopcopy", multifd_channels=4).multifd_channels == 4


# -- QMP ----------------------------------------------------------------------------------------


def test_qmp_capabilities_are_the_same_on_both_sides_and_new_ones_only_when_on():
    caps = {c["capability"]: c["state"] for c in kvm.migration_capabilities(Scenario())}
    assert caps == {"events": True, "auto-converge": False, "xbzrle": False, "postcopy-ram": False}
    caps = {c["capability"]: c["state"] for c in kvm.migration_capabilities(Scenario(multifd_channels=2))}
    assert caps["multifd"] is True and "postcopy-preempt" not in caps
    preempt = Scenario(postcopy=True, postcopy_preempt=True)
    caps = {c["capability"]: c["state"] for c in kvm.migration_capabilities(preempt)}
    assert caps["postcopy-ram"] and caps["postcopy-preempt"] and "multifd" not in caps


def test_qmp_parameters_per_side():
    s = Scenario(
        downtime_limit_ms=50, max_bandwidth_bps=800_000_000, multifd_channels=4, multifd_compression="zlib",
        announce_initial_ms=10, announce_max_ms=100, announce_rounds=2, announce_step_ms=20,
    )  # fmt: skip
    src = kvm.migration_parameters(s, "src")
    dst = kvm.migration_parameters(s, "dst")
    assert src == {
        "downtime-limit": 50, "max-bandwidth": 100_000_000, "multifd-channels": 4, "multifd-compression": "zlib",
        "announce-initial": 10, "announce-max": 100, "announce-rounds": 2, "announce-step": 20,
    }  # fmt: skip
    # the destination must listen with as many channels, decompress the same, and it announces the guest
    assert dst == {"multifd-channels": 4, "multifd-compression": "zlib", "announce-initial": 10, "announce-max": 100,
                   "announce-rounds": 2, "announce-step": 20}  # fmt: skip
    s = Scenario(xbzrle=True, xbzrle_cache_bytes=2**26, auto_converge=True, cpu_throttle_initial=30,
                 cpu_throttle_increment=15)  # fmt: skip
    assert kvm.migration_parameters(s, "src") == {"xbzrle-cache-size": 2**26, "cpu-throttle-initial": 30,
                                                  "cpu-throttle-increment": 15}  # fmt: skip
    assert kvm.migration_parameters(s, "dst") == {}
    assert kvm.migration_parameters(Scenario(), "src") == {} == kvm.migration_parameters(Scenario(), "dst")
    assert kvm.announce_args(Scenario()) == {"initial": 50, "max": 550, "rounds": 5, "step": 100}
    quiet = Scenario(announce_initial_ms=0, announce_max_ms=0, announce_rounds=0, announce_step_ms=1)
    assert kvm.announce_args(quiet) == {"initial": 0, "max": 0, "rounds": 0, "step": 1}


#: query-migrate-parameters / -capabilities of QEMU 7.2.22 after migrate-set-* of MULTIFD=2
#: DOWNTIME_LIMIT=50 (trimmed to the keys the knobs read)
SRC_PARAMS = {"downtime-limit": 50, "max-bandwidth": 134217728, "multifd-channels": 2, "multifd-compression": "none",
              "announce-initial": 50, "announce-max": 550, "announce-rounds": 5, "announce-step": 100,
              "xbzrle-cache-size": 67108864, "cpu-throttle-initial": 20, "cpu-throttle-increment": 10}  # fmt: skip
CAPS = [{"capability": c, "state": c in ("events", "multifd")}
        for c in ("xbzrle", "auto-converge", "events", "postcopy-ram", "multifd", "postcopy-preempt")]  # fmt: skip


def test_effective_values_from_qemus_replies():
    dst = {**SRC_PARAMS, "announce-rounds": 9}
    eff = knobs.effective(SRC_PARAMS, CAPS, dst, CAPS)
    assert eff["multifd"] is True and eff["multifd_channels"] == 2 and eff["downtime_limit_ms"] == 50
    assert eff["max_bandwidth_bps"] == 134217728 * 8 and eff["xbzrle"] is False
    assert eff["announce"] == "50,550,9,100"  # the destination's: it announces the guest
    assert eff["cpu_throttle"] == "20,10" and eff["multifd_dst"] is True and eff["multifd_channels_dst"] == 2
    assert set(knobs.EFFECTIVE_KEYS) <= set(eff)
    none = knobs.effective(None, None)
    assert all(none[k] is None for k in knobs.EFFECTIVE_KEYS)


@pytest.mark.skipif(shutil.which(kvm.QEMU) is None, reason="QEMU not installed")
def test_the_installed_qemu_lists_its_multifd_compression_methods():
    have = kvm.qemu_enum_values("migrate-set-parameters", "multifd-compression")
    assert have is not None and {"none", "zlib"} <= set(have)


@pytest.mark.skipif(shutil.which(kvm.QEMU) is None, reason="QEMU not installed")
def test_a_late_reader_still_gets_the_whole_schema():
    """QEMU's schema reply is larger than a pipe's buffers; a reader that starts reading 2 s
    after the request (a loaded machine) must still get all of it, so QEMU may not be told to
    quit before the reply is read."""
    import time

    schema = kvm.query_schema((kvm.QEMU,), 60.0, before_reading=lambda: time.sleep(2.0))
    assert schema is not None and len(schema) > 500
    assert any(e.get("name") == "migrate-set-parameters" for e in schema)


# -- libvirt ------------------------------------------------------------------------------------


def test_libvirt_flags_and_params_of_the_knobs():
    s = Scenario(multifd_channels=4, auto_converge=True, cpu_throttle_initial=30, cpu_throttle_increment=15,
                 downtime_limit_ms=50)  # fmt: skip
    assert lf.flag_names(lf.migrate_flags(s)) == ["LIVE", "PEER2PEER", "AUTO_CONVERGE", "PARALLEL"]
    p = lf.migrate_params(s, "tcp://x", None)
    assert p == {"migrate_uri": "tcp://x", "parallel.connections": 4, "auto_converge.initial": 30,
                 "auto_converge.increment": 15}  # fmt: skip
    p = lf.migrate_params(Scenario(multifd_channels=2, multifd_compression="zstd"), "tcp://x", None)
    assert p["compression"] == "zstd" and p["parallel.connections"] == 2
    assert "compression" not in lf.migrate_params(Scenario(multifd_channels=2, multifd_compression="none"), "u", None)
    p = lf.migrate_params(Scenario(xbzrle=True, xbzrle_cache_bytes=2**25), "tcp://x", None)
    assert p["compression"] == "xbzrle" and p["compression.xbzrle.cache"] == 2**25


def test_libvirt_names_match_the_binding():
    assert_binding_has(
        {
            "VIR_MIGRATE_PARALLEL": lf.VIR_MIGRATE_PARALLEL,
            "VIR_MIGRATE_PARAM_PARALLEL_CONNECTIONS": lf.PARAM_PARALLEL_CONNECTIONS,
            "VIR_MIGRATE_PARAM_COMPRESSION_XBZRLE_CACHE": lf.PARAM_XBZRLE_CACHE,
            "VIR_MIGRATE_PARAM_AUTO_CONVERGE_INITIAL": lf.PARAM_AUTO_CONVERGE_INITIAL,
            "VIR_MIGRATE_PARAM_AUTO_CONVERGE_INCREMENT": lf.PARAM_AUTO_CONVERGE_INCREMENT,
        }
    )


# -- versions -----------------------------------------------------------------------------------


def test_an_older_qemu_is_refused_naming_the_release_that_has_the_knob():
    s = Scenario(postcopy=True, postcopy_preempt=True).to_dict()
    knobs.check_qemu(s, "QEMU emulator version 7.2.22 (Debian 1:7.2+dfsg-7+deb12u18+b3)")  # has it
    with pytest.raises(ConfigError, match=r"^POSTCOPY_PREEMPT=1 needs QEMU 7\.1 or later \(capability "
                                          r"postcopy-preempt\); the QEMU here is 5\.0\.0$"):  # fmt: skip
        knobs.check_qemu(s, "QEMU emulator version 5.0.0", " here")
    s = Scenario(multifd_channels=2, multifd_compression="zstd").to_dict()
    with pytest.raises(ConfigError, match=r"MULTIFD=2 needs QEMU 4\.0 or later \(capability multifd, parameter "
                                          r"multifd-channels\); the QEMU on R2 is 3\.1\.0"):  # fmt: skip
        knobs.check_qemu(s, "QEMU emulator version 3.1.0", " on R2")
    with pytest.raises(ConfigError, match=r"MULTIFD_COMPRESSION=zstd needs QEMU 5\.0 or later"):
        knobs.check_qemu(s, "QEMU emulator version 4.2.1")
    knobs.check_qemu(s, "no version here")  # unreadable: the QMP replies will tell


def test_libvirt_9_0_lacks_multifd_compression_and_any_libvirt_lacks_announce_and_preempt():
    s = Scenario(driver="libvirt", multifd_channels=2, multifd_compression="zstd").to_dict()
    with pytest.raises(ConfigError, match=r"MULTIFD_COMPRESSION=zstd needs libvirt 9\.4\.0 or later .*VIR_MIGRATE_"
                                          r"PARALLEL\); the libvirtd here is 9\.0\.0"):  # fmt: skip
        knobs.check_libvirt(s, "libvirtd (libvirt) 9.0.0")
    knobs.check_libvirt(s, "libvirtd (libvirt) 9.4.0")
    knobs.check_libvirt(Scenario(driver="libvirt", multifd_channels=2, multifd_compression="none").to_dict(),
                        "libvirtd (libvirt) 9.0.0")  # fmt: skip
    with pytest.raises(ConfigError, match=r"MULTIFD=2 needs libvirt 5\.2\.0 or later"):
        knobs.check_libvirt(Scenario(driver="libvirt", multifd_channels=2).to_dict(), "libvirtd (libvirt) 5.0.0")
    a = Scenario(driver="libvirt", announce_initial_ms=1, announce_max_ms=1, announce_rounds=1, announce_step_ms=1)
    with pytest.raises(ConfigError, match=r"ANNOUNCE=1,1,1,1 cannot be applied with DRIVER=libvirt: .*announce-initial"
                                          r".*\(libvirt 9\.0\.0 here\); use DRIVER=qmp"):  # fmt: skip
        knobs.check_libvirt(a.to_dict(), "libvirtd (libvirt) 9.0.0")
    with pytest.raises(ConfigError, match="POSTCOPY_PREEMPT=1 cannot be applied with DRIVER=libvirt"):
        knobs.check_libvirt(Scenario(driver="libvirt", postcopy=True, postcopy_preempt=True).to_dict(), "9.0.0")


def test_make_migrate_with_a_knob_the_qemu_lacks_is_one_line_exit_2_nothing_created(monkeypatch, tmp_path, capsys):
    """The preflight of the run, with the installed QEMU made to say it is 5.0.0."""
    from migrate.experiment import place as placemod
    from migrate.experiment.instruments import Instruments

    monkeypatch.setattr(placemod.os, "geteuid", lambda: 0)
    monkeypatch.setattr(Instruments, "check", staticmethod(lambda: None))
    from migrate.core.stack import QemuBuild

    fake = QemuBuild(spec="10.0", argv=("/usr/bin/qemu-system-x86_64",), version="QEMU emulator version 5.0.0 (faked)",
                     release="5.0.0", source="system", binary="/usr/bin/qemu-system-x86_64")  # fmt: skip
    monkeypatch.setattr(kvm, "qemu_build", lambda _spec, _fw=None: fake)
    rc = main(["run", "--postcopy", "1", "--postcopy-preempt", "1", "--results", str(tmp_path / "results")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    assert err[0] == (
        "vrmig: error: POSTCOPY_PREEMPT=1 needs QEMU 7.1 or later (capability postcopy-preempt); the QEMU here is 5.0.0"
    )
    assert not (tmp_path / "results").exists()


# -- sweeps: knob axes and the points they make -------------------------------------------------


def test_a_knob_list_is_an_axis_of_the_sweep():
    a = build_parser().parse_args(["sweep", "--rates", "10M", "--reps", "2", "--downtime-limit", "50,300",
                                   "--multifd", "1,4", "--announce", "50,550,5,100"])  # fmt: skip
    template = scenario_from_args(a, axes=True)
    assert template.announce_rounds == 5  # one value: the template's
    from migrate.experiment.args import knob_values

    axes = [(k.var, v) for k, v in knob_values(a) if len(v) > 1]
    assert axes == [("DOWNTIME_LIMIT", ["50", "300"]), ("MULTIFD", ["1", "4"])]
    plan = sw.grid_plan(template, (10_000_000,), (1500,), 2, 7, (), (), axes)
    points = {p.label: p.scenario for p in plan.points}
    assert list(points) == ["downtime_limit50-multifd1-10M-1500", "downtime_limit50-multifd4-10M-1500",
                            "downtime_limit300-multifd1-10M-1500", "downtime_limit300-multifd4-10M-1500"]  # fmt: skip
    s = points["downtime_limit300-multifd4-10M-1500"]
    assert (s.downtime_limit_ms, s.multifd_channels, s.announce_rounds) == (300, 4, 5)
    assert plan.grid["knobs"] == {"DOWNTIME_LIMIT": ["50", "300"], "MULTIFD": ["1", "4"]}
    assert len(plan.order()) == 8


def test_knob_axes_with_an_invalid_point_name_the_axis():
    with pytest.raises(ConfigError, match=r"MODES/BFDS/MULTIFD/RATES/SIZES: MULTIFD with POSTCOPY=1 is refused"):
        sw.grid_plan(Scenario(postcopy=True), (10_000_000,), (1500,), 1, 1, (), (), [("MULTIFD", ["0", "2"])])
    plan = sw.grid_plan(Scenario(), (10_000_000,), (1500,), 1, 1, (), (), [("MULTIFD", ["0", "2"])])
    assert [p.scenario.multifd_channels for p in plan.points] == [None, 2]
    assert [p.label for p in plan.points] == ["multifd0-10M-1500", "multifd2-10M-1500"]
    with pytest.raises(ConfigError, match="MULTIFD='1,1' lists a value twice"):
        knobs.split_values(knobs.KNOB_BY_VAR["MULTIFD"], "1,1")
    assert knobs.split_values(knobs.KNOB_BY_VAR["ANNOUNCE"], "50,550,5,100/0,0,0,1") == ["50,550,5,100", "0,0,0,1"]


def _summary(downtime: float) -> dict:
    return {"status": "completed", "downtime_s": {"counters": downtime}, "qualifiers": {}, "details": {"window": {}}}


def _meta(**scenario) -> dict:
    sc = {"hv": "kvm", "mode": "precopy", "rate_bps": 10_000_000, "frame_bytes": 1500, "driver": "qmp", **scenario}
    params = {**SRC_PARAMS, "downtime-limit": scenario.get("downtime_limit_ms") or 300,
              "multifd-channels": scenario.get("multifd_channels") or 2}  # fmt: skip
    eff = knobs.effective(params, [{"capability": "multifd", "state": scenario.get("multifd_channels") is not None}])
    return {"status": "completed", "accel": "tcg", "scenario": sc, "hypervisor": {"knobs_effective": eff}}


def test_points_that_differ_only_in_a_knob_are_separate_and_show_the_effective_values():
    recs = []
    for i, (dl, mfd) in enumerate([(50, None), (50, None), (50, 4), (50, 4), (300, 4)]):
        meta = _meta(downtime_limit_ms=dl, multifd_channels=mfd)
        rec = run_record(_summary(0.1 + i / 100), meta, run_id=f"r{i}")
        rec["series"] = series_name("", rec, meta)
        recs.append(rec)
    assert recs[2]["knobs"] == "DOWNTIME_LIMIT=50 MULTIFD=4" and recs[2]["qemu_multifd_channels"] == 4
    assert recs[0]["qemu_multifd"] is False and recs[0]["qemu_downtime_limit_ms"] == 50
    points = {p.knobs: p for p in aggregate(recs)}
    assert {k: p.n_runs for k, p in points.items()} == {
        "DOWNTIME_LIMIT=50": 2, "DOWNTIME_LIMIT=50 MULTIFD=4": 2, "DOWNTIME_LIMIT=300 MULTIFD=4": 1
    }  # fmt: skip
    assert points["DOWNTIME_LIMIT=50 MULTIFD=4"].series == "kvm precopy DOWNTIME_LIMIT=50 MULTIFD=4"
    # the key keeps them apart even without a series that names them
    for r in recs:
        r["series"] = "one series"
    assert len(aggregate(recs)) == 3
    row = point_row(points["DOWNTIME_LIMIT=300 MULTIFD=4"])
    assert set(row) <= set(point_columns())
    assert (row["knobs"], row["qemu_downtime_limit_ms"], row["qemu_multifd"], row["qemu_multifd_channels"]) == (
        "DOWNTIME_LIMIT=300 MULTIFD=4", 300, True, 4
    )  # fmt: skip
    table = format_knobs(list(points.values()))
    assert "qemu_multifd_channels" in table and "DOWNTIME_LIMIT=300 MULTIFD=4" in table
    assert format_knobs(aggregate([run_record(_summary(0.1), {"scenario": {"hv": "kvm"}})])) == ""


def test_the_installed_libvirt_refuses_multifd_zstd_before_anything_starts(monkeypatch, tmp_path, capsys):
    """DRIVER=libvirt LIBVIRT=system's preflight asks the installed libvirtd for its version (Debian 12: 9.0.0)."""
    import subprocess

    from migrate.drivers.libvirt.daemon import LIBVIRTD
    from migrate.experiment import place as placemod
    from migrate.experiment.instruments import Instruments

    pytest.importorskip("libvirt", reason="libvirt-python not installed")
    if shutil.which(LIBVIRTD) is None:
        pytest.skip("libvirtd not installed")
    version = knobs.parse_version(subprocess.run([LIBVIRTD, "--version"], capture_output=True, text=True).stdout)
    if version is None or version >= (9, 4, 0):
        pytest.skip(f"libvirtd {version} has multifd compression")
    monkeypatch.setattr(placemod.os, "geteuid", lambda: 0)
    monkeypatch.setattr(Instruments, "check", staticmethod(lambda: None))
    argv = ["run", "--driver", "libvirt", "--libvirt", "system", "--multifd", "2", "--multifd-compression", "zstd"]
    assert main([*argv, "--results", str(tmp_path / "results")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "MULTIFD_COMPRESSION=zstd needs libvirt 9.4.0 or later" in err[0], err
    assert not (tmp_path / "results").exists()


def test_the_nightly_fingerprint_of_a_point_without_the_later_knobs_is_unchanged():
    """A point's accepted runs were fingerprinted before the later knobs existed: the fingerprint
    of the same point leaves them out while they are at their defaults."""
    import hashlib
    import json

    from migrate.campaigns import nightly as nt

    s = Scenario(mode="stopcopy", rate_bps=20_000_000, duration_s=8.0, downtime_limit_ms=100)
    before = {k: v for k, v in s.to_dict().items() if k in nt.FINGERPRINT_FIELDS}  # a Scenario of then
    old = hashlib.sha256(json.dumps({**before, "accel_used": "tcg"}, sort_keys=True).encode()).hexdigest()[:16]
    assert nt.fingerprint(s, "tcg") == old
    assert nt.fingerprint(Scenario(mode="stopcopy", rate_bps=20_000_000, duration_s=8.0, downtime_limit_ms=100,
                                   multifd_channels=2), "tcg") != old  # fmt: skip
    assert "multifd_channels" not in nt.FINGERPRINT_FIELDS and "downtime_limit_ms" in nt.FINGERPRINT_FIELDS


def test_zero_page_detection_reaches_both_qemus_and_is_refused_before_qemu_9():
    """ZERO_PAGE (QEMU 9.0's zero-page-detection): set on both sides, read back, refused on an
    older QEMU with the release that has it, and multifd's method only with MULTIFD."""
    from migrate.drivers.kvm.driver import migration_parameters

    s = Scenario(zero_page_detection="none")
    assert migration_parameters(s, "src")["zero-page-detection"] == "none"
    assert migration_parameters(s, "dst")["zero-page-detection"] == "none"
    assert knobs.effective({"zero-page-detection": "none"}, [])["zero_page_detection"] == "none"
    assert knobs.requested_text(s.to_dict()) == "ZERO_PAGE=none"
    knobs.check_qemu(s.to_dict(), "QEMU emulator version 10.0.2 (Debian 1:10.0.2+ds-2+deb13u1~bpo12+1)")
    with pytest.raises(ConfigError, match=r"ZERO_PAGE=none needs QEMU 9\.0 or later \(parameter zero-page-detection\); "
                       r"the QEMU here is 7\.2\.22"):  # fmt: skip
        knobs.check_qemu(s.to_dict(), "QEMU emulator version 7.2.22 (Debian 1:7.2+dfsg-7+deb12u18)", " here")
    with pytest.raises(ConfigError, match="ZERO_PAGE=multifd scans for zero pages in multifd's threads: set MULTIFD"):
        Scenario(zero_page_detection="multifd")
    with pytest.raises(ConfigError, match="ZERO_PAGE='fast' is unknown"):
        Scenario(zero_page_detection="fast")
    Scenario(zero_page_detection="multifd", multifd_channels=2)


def test_dirty_limit_reaches_the_source_with_kvms_dirty_ring_and_is_refused_before_qemu_8_1():
    """DIRTY_LIMIT (QEMU 8.1's dirty-limit + vcpu-dirty-limit): the capability on both sides, the
    limit on the source, KVM's dirty ring on the command line, refused on an older QEMU and
    outside pre-copy."""
    from migrate.drivers.guest_vm import GuestVm
    from migrate.drivers.kvm.driver import DIRTY_RING_SIZE, migration_capabilities, migration_parameters, qemu_argv

    s = Scenario(vcpu_dirty_limit_mbps=50)
    assert {"capability": "dirty-limit", "state": True} in migration_capabilities(s)
    assert migration_parameters(s, "src")["vcpu-dirty-limit"] == 50
    assert "vcpu-dirty-limit" not in migration_parameters(s, "dst")
    eff = knobs.effective({"vcpu-dirty-limit": 50}, [{"capability": "dirty-limit", "state": True}])
    assert (eff["dirty_limit"], eff["vcpu_dirty_limit_mbps"]) == (True, 50)
    assert knobs.requested_text(s.to_dict()) == "DIRTY_LIMIT=50"
    p = Path("x")
    vm = GuestVm(name="n", accel="kvm", mem_mib=256, vcpus=1, kernel=p, initrd=p, cmdline="", console=p, nic="virtio")
    argv = qemu_argv(vm, qmp=p, incoming=False, dirty_ring=DIRTY_RING_SIZE)
    assert argv[argv.index("-accel") + 1] == "kvm,dirty-ring-size=4096"
    with pytest.raises(ConfigError, match=r"DIRTY_LIMIT=50 needs QEMU 8\.1 or later \(capability dirty-limit, "
                       r"parameter vcpu-dirty-limit\)"):  # fmt: skip
        knobs.check_qemu(s.to_dict(), "QEMU emulator version 7.2.22 (Debian 1:7.2+dfsg-7+deb12u18)")
    with pytest.raises(ConfigError, match="DIRTY_LIMIT throttles the vCPUs while pre-copy converges"):
        Scenario(vcpu_dirty_limit_mbps=50, mode="stopcopy")
    with pytest.raises(ConfigError, match="DIRTY_LIMIT=0 must be above 0"):
        Scenario(vcpu_dirty_limit_mbps=0)


def test_switchover_bw_reaches_the_source_as_bytes_per_second_and_is_refused_before_qemu_8_2():
    """SWITCHOVER_BW (QEMU 8.2's avail-switchover-bandwidth): a rate like MIGBW, set on the source
    in bytes/s, read back, refused on an older QEMU and with DRIVER=libvirt."""
    s = _run("--switchover-bandwidth", "500M")
    assert s.switchover_bandwidth_bps == 500_000_000
    assert knobs.requested_text(s.to_dict()) == "SWITCHOVER_BW=500M"
    assert kvm.migration_parameters(s, "src") == {"avail-switchover-bandwidth": 62_500_000}
    assert kvm.migration_parameters(s, "dst") == {}
    both = Scenario(max_bandwidth_bps=800_000_000, switchover_bandwidth_bps=2 * 10**9, downtime_limit_ms=50)
    assert kvm.migration_parameters(both, "src") == {
        "downtime-limit": 50, "max-bandwidth": 100_000_000, "avail-switchover-bandwidth": 250_000_000
    }  # fmt: skip
    assert {c["capability"] for c in kvm.migration_capabilities(s)} == {
        "events", "auto-converge", "xbzrle", "postcopy-ram"
    }  # fmt: skip
    eff = knobs.effective({"avail-switchover-bandwidth": 62_500_000}, [])
    assert eff["switchover_bandwidth_bps"] == 500_000_000
    assert knobs.effective(None, None)["switchover_bandwidth_bps"] is None
    assert "switchover_bandwidth_bps" in knobs.EFFECTIVE_KEYS
    assert "qemu_switchover_bandwidth_bps" in knobs.EFFECTIVE_COLUMNS
    # the field follows DIRTY_LIMIT's in Scenario (and meta.json's scenario); unset it is None
    names = Scenario.field_names()
    assert names[names.index("vcpu_dirty_limit_mbps") + 1] == "switchover_bandwidth_bps"
    assert Scenario().switchover_bandwidth_bps is None and knobs.requested_text(Scenario().to_dict()) == ""
    knobs.check_qemu(s.to_dict(), "QEMU emulator version 10.0.2 (Debian 1:10.0.2+ds-2+deb13u1~bpo12+1)")
    knobs.check_qemu(s.to_dict(), "QEMU emulator version 8.2.0")
    with pytest.raises(ConfigError, match=r"^SWITCHOVER_BW=500M needs QEMU 8\.2 or later \(parameter "
                       r"avail-switchover-bandwidth\); the QEMU here is 7\.2\.22$"):  # fmt: skip
        knobs.check_qemu(s.to_dict(), "QEMU emulator version 7.2.22 (Debian 1:7.2+dfsg-7+deb12u18)", " here")
    lv = Scenario(driver="libvirt", switchover_bandwidth_bps=500_000_000).to_dict()
    refused = r"^SWITCHOVER_BW=500M cannot be applied with DRIVER=libvirt: .* QEMU's avail-switchover-bandwidth"
    with pytest.raises(ConfigError, match=refused + r" \(libvirt 9\.0\.0 here\); use DRIVER=qmp$"):
        knobs.check_libvirt(lv, "libvirtd (libvirt) 9.0.0")


@pytest.mark.parametrize(
    ("argv", "msg"),
    [
        (["--switchover-bandwidth", "fast"], r"^SWITCHOVER_BW='fast' is not a rate: use bit/s"),
        (["--switchover-bandwidth", "0"], r"^SWITCHOVER_BW=0 must be at least 8 bit/s \(QEMU takes whole bytes/s"),
        (["--switchover-bandwidth", "500M,1G"], r"^SWITCHOVER_BW=500M,1G lists 2 values: a list is an axis"),
        (["--hv", "criu", "--switchover-bandwidth", "5M"], r"^SWITCHOVER_BW is a QEMU migration knob: it needs HV"),
    ],
)
def test_bad_switchover_bw_is_one_line_naming_it(argv, msg):
    with pytest.raises(ConfigError, match=msg) as err:
        _run(*argv)
    assert "\n" not in str(err.value)


def test_switchover_bw_is_an_axis_of_the_sweep():
    a = build_parser().parse_args(["sweep", "--rates", "10M", "--reps", "1", "--switchover-bandwidth", "100M,1G"])
    from migrate.experiment.args import knob_values

    axes = [(k.var, v) for k, v in knob_values(a) if len(v) > 1]
    assert axes == [("SWITCHOVER_BW", ["100M", "1G"])]
    plan = sw.grid_plan(scenario_from_args(a, axes=True), (10_000_000,), (1500,), 1, 1, (), (), axes)
    assert {p.label: p.scenario.switchover_bandwidth_bps for p in plan.points} == {
        "switchover_bw100M-10M-1500": 100_000_000, "switchover_bw1G-10M-1500": 10**9
    }  # fmt: skip
