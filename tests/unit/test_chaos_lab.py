"""make chaos TESTBED=: the trials' runs go to the lab, only signals are tried there (a lab run
refuses FAULT), and what a lab cannot run is refused with one line before anything starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from migrate.campaigns import chaos


def test_a_lab_trial_runs_on_the_lab(tmp_path):
    argv = chaos.trial_argv("kvm-libvirt", "SIGKILL", tmp_path / "r", tmp_path / "lab.toml")
    i = argv.index("--testbed")
    assert argv[i + 1] == str(tmp_path / "lab.toml") and "--fault" not in argv
    assert "--testbed" not in chaos.trial_argv("kvm", "SIGKILL", tmp_path / "r")


def test_only_signals_are_tried_on_a_lab():
    assert chaos.trial_kinds("kvm", lab=True) == list(chaos.SIGNALS)
    assert set(chaos.trial_kinds("kvm")) > set(chaos.SIGNALS)  # the embedded testbed also gets faults


@pytest.mark.parametrize(
    "extra, line",
    [
        (["--hvs", "kvm,xen"], "chaos: HVS=xen cannot run on a lab (TESTBED=) yet: use HVS=kvm,criu"),
        ([], None),
    ],
)
def test_bad_lab_input_is_one_line_and_exit_2(tmp_path, capsys, monkeypatch, extra, line):
    monkeypatch.setattr(chaos.os, "geteuid", lambda: 0)
    monkeypatch.setattr(chaos, "LAB_HVS", ("kvm", "criu"))  # every HV runs on a lab now: refuse one
    started = []
    monkeypatch.setattr(chaos, "run_chaos_per_hv", lambda *a, **k: started.append(a) or {})
    inv = tmp_path / "lab.toml"
    if line is None:  # the inventory is missing
        line = f"chaos: TESTBED={inv}: no such inventory (docs/testbed.md)"
    else:
        inv.write_text("# an inventory\n")
    assert chaos.main(["--testbed", str(inv), "--results", str(tmp_path / "r"), *extra]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [line]
    assert started == [] and not (tmp_path / "r").exists()


def test_a_lab_chaos_defaults_to_what_a_lab_runs(tmp_path, monkeypatch):
    monkeypatch.setattr(chaos.os, "geteuid", lambda: 0)
    seen = {}
    monkeypatch.setattr(chaos, "run_chaos_per_hv", lambda *a: seen.setdefault("hvs", a[3]) and {})
    inv = tmp_path / "lab.toml"
    inv.write_text("# an inventory\n")
    chaos.main(["--testbed", str(inv), "--results", str(tmp_path / "r")])
    assert seen["hvs"] == chaos.LAB_HVS


def test_run_chaos_per_hv_refuses_a_hypervisor_a_lab_cannot_run(tmp_path, monkeypatch):
    assert "xen" in chaos.LAB_HVS
    monkeypatch.setattr(chaos, "LAB_HVS", ("kvm", "criu"))
    with pytest.raises(ValueError, match="xen cannot run on a lab"):
        chaos.run_chaos_per_hv(1, 1, tmp_path / "r", ("xen",), None, Path(tmp_path / "lab.toml"))
    assert not (tmp_path / "r").exists()
