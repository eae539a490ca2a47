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
