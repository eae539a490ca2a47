"""make chaos TESTBED=: the trials' runs go to the lab, only signals are tried there (a lab run
refuses FAULT), and what a lab cannot run is refused with one line before anything starts."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from migrate.campaigns import chaos
from migrate.labs.where import where_for


def test_a_lab_trial_runs_on_the_lab(tmp_path):
    argv = chaos.trial_argv("kvm-libvirt", "SIGKILL", tmp_path / "r", where_for(tmp_path / "lab.toml"))
    i = argv.index("--testbed")
    assert argv[i + 1] == str(tmp_path / "lab.toml") and "--fault" not in argv
    assert "--testbed" not in chaos.trial_argv("kvm", "SIGKILL", tmp_path / "r")


def test_only_signals_are_tried_on_a_lab():
    assert chaos.trial_kinds("kvm", where_for(Path("lab.toml"))) == list(chaos.SIGNALS)
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


def test_a_lab_trials_hosts_are_watched_and_their_leftovers_counted(tmp_path, monkeypatch):
    """run_chaos_per_hv on a lab enters the lab's watch once, notes the hosts before every trial
    and counts what they kept after it; the trials are signals in the lab's signal window."""
    from migrate.labs import where as wh

    calls: list[str] = []

    class Watch:
        def __init__(self, path: Path) -> None:
            calls.append(f"open {path.name}")

        def __enter__(self) -> Watch:
            return self

        def __exit__(self, *exc: object) -> None:
            calls.append("close")

        def before_trial(self) -> set[tuple[str, str]]:
            calls.append("before")
            return {("R1", "old")}

        def leaks(self, before, prefix, grace_s, killed) -> list[str]:
            calls.append(f"leaks {sorted(before)} {killed}")
            return ["R1: process x"]

    monkeypatch.setattr(wh, "LabLeaks", Watch)
    kinds, delays = [], []
    monkeypatch.setattr(
        chaos,
        "_trial",
        lambda hv, kind, delay, *a: kinds.append(kind) or delays.append(delay) or chaos.TrialOutcome(True),
    )
    monkeypatch.setattr(chaos, "trial_leaks", lambda before, prefix, grace_s: [])
    t = chaos.run_chaos_per_hv(2, 1, tmp_path / "r", ("kvm-libvirt",), None, tmp_path / "lab.toml")["kvm-libvirt"]
    assert t.leaks == 2 and kinds == ["SIGKILL", "SIGTERM"]
    rng = random.Random("1-kvm-libvirt")
    assert delays == [rng.uniform(0.3, 15.0) for _ in range(2)]  # the lab's window, not the embedded 25 s
    assert calls == [
        "open lab.toml",
        "before",
        "leaks [('R1', 'old')] True",
        "before",
        "leaks [('R1', 'old')] False",
        "close",
    ]
