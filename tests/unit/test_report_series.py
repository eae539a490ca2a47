"""make report over a directory of runs: runs of another driver or another testbed are other
series, so they are never pooled into one point (SYNTHETIC meta dicts)."""

from __future__ import annotations

from migrate.campaigns.reporting import series_name


def _meta(driver="qmp", testbed=None):
    return {"scenario": {"hv": "kvm", "driver": driver, "mode": "stopcopy"}, "testbed": testbed or {"prefix": "vm1"}}


REC = {"hv": "kvm", "mode": "stopcopy"}


def test_drivers_and_testbeds_are_separate_series():
    names = {
        series_name("results", REC, _meta()),
        series_name("results", REC, _meta("libvirt")),
        series_name("results", REC, _meta(testbed={"prefix": "vm2", "inventory": "/x/lab.toml", "name": "int"})),
        series_name("results", REC, _meta("libvirt", {"prefix": "vm3", "inventory": "/x/lab.toml", "name": "int"})),
    }
    assert names == {
        "results kvm stopcopy",
        "results kvm-libvirt stopcopy",
        "results kvm stopcopy on lab int",
        "results kvm-libvirt stopcopy on lab int",
    }


def test_a_criu_run_keeps_its_plain_name():
    rec = {"hv": "criu", "mode": "stopcopy"}
    meta = {"scenario": {"hv": "criu", "driver": "qmp", "mode": "stopcopy"}, "testbed": {"prefix": "vm1"}}
    assert series_name("", rec, meta) == "criu stopcopy"


def test_the_printed_table_keeps_its_columns_for_long_series_names():
    from dataclasses import replace

    from analysis.stats.aggregate import PointStats
    from migrate.campaigns.reporting import format_points

    base = PointStats(
        series="kvm stopcopy", hv="kvm", accel="tcg", mode="stopcopy", rate_bps=10_000_000, frame_bytes=1500,
        n_runs=5, n_completed=5, n_attempts=5, n_failed=0, failed_setup=0, failed_migration=0,
        failed_post_migration=0, failed_interrupted=0, failed_unclassified=0, n_excluded=0,
        n_failed_before_migration=0, failure_rate=0.0, failure_ci=None,
    )  # fmt: skip
    table = format_points([base, replace(base, series="kvm-libvirt stopcopy on lab int")]).splitlines()
    starts = {line.index("tcg") for line in table[1:]}
    assert len(starts) == 1 and table[0].index("accel") in starts  # the accel column lines up in every row
