"""make chaos: progress over the trials of every HV, a trial that leaks counted as failed, and the
per-trial log lines kept (the trials themselves are replaced: no root, nothing started)."""

import dataclasses
import logging
import sys

from migrate.campaigns import chaos


def test_trials_are_counted_and_a_leaking_trial_is_a_failure(tmp_path, monkeypatch, capsys, caplog):
    monkeypatch.delenv("VRMIG_PROGRESS", raising=False)
    monkeypatch.setattr(chaos, "_trial", lambda *a, **k: chaos.TrialOutcome(False))
    calls = iter(range(100))

    def leaks(before, prefix, grace_s):
        return ["namespace vm000000-A"] if next(calls) == 1 else []

    monkeypatch.setattr(chaos, "trial_leaks", leaks)
    with caplog.at_level(logging.INFO, logger="vrmig.chaos"):
        per_hv = chaos.run_chaos_per_hv(2, 1, tmp_path, ("kvm", "criu"))
    assert [t.trials for t in per_hv.values()] == [2, 2] and per_hv["kvm"].leaks == 1
    trial_lines = [r.getMessage() for r in caplog.records if " trial " in r.getMessage()]
    assert len(trial_lines) == 4 and trial_lines[1].startswith("kvm trial 2/2 ")
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("progress: chaos ")]
    assert any("| last kvm trial 2 " in line and "failed (leaks)" in line for line in lines)
    assert lines[-1].startswith("progress: chaos 4/4 trials, 1 failed (1 leaks) | ETA 0:00:00")


def test_a_hung_run_is_killed_and_named_with_its_stack(tmp_path, monkeypatch):
    """A run that outlives its trial's limit is killed, not waited for, and the outcome carries
    the Python stack the CLI prints on SIGUSR1 (here a real ``migrate.cli.main.main`` whose
    scenario step blocks)."""
    hang = (
        "import time, migrate.cli.main as m\n"
        "def blocked_in_setup(args):\n    time.sleep(60)\n"
        "m.scenario_from_args = blocked_in_setup\n"
        "m.main(['run'])\n"
    )
    monkeypatch.setattr(chaos, "trial_argv", lambda *a: [sys.executable, "-c", hang])
    monkeypatch.setitem(chaos.HV_PROFILES, "kvm", dataclasses.replace(chaos.HV_PROFILES["kvm"], timeout_s=3.0))
    out = chaos._trial("kvm", "dst-qemu-dies", 0.0, tmp_path, log_path=tmp_path / "trial.log")
    assert out.hung is not None and out.hung.startswith("the run did not end within 3 s")
    assert "blocked_in_setup" in out.hung and "most recent call first" in out.hung


def test_a_hung_trial_fails_the_chaos_run(tmp_path, monkeypatch):
    monkeypatch.setattr(chaos, "_trial", lambda *a, **k: chaos.TrialOutcome(False, "stuck"))
    monkeypatch.setattr(chaos, "trial_leaks", lambda before, prefix, grace_s: [])
    t = chaos.run_chaos_per_hv(1, 1, tmp_path, ("kvm",))["kvm"]
    assert t.hung == 1 and t.problems[0].startswith("kvm trial 1 (SIGKILL): hung: stuck (stderr: ")


def test_a_run_that_refuses_to_start_fails_the_trial(tmp_path, monkeypatch):
    """A trial whose run refused its input tested nothing: counted as refused, with the run's
    own line; the trials' logs beside the runs do not make the results root foreign."""
    refuse = "import sys; print('vrmig: error: RESULTS=x is not ours', file=sys.stderr); sys.exit(2)"
    monkeypatch.setattr(chaos, "trial_argv", lambda *a: [sys.executable, "-c", refuse])
    monkeypatch.setattr(chaos, "trial_leaks", lambda before, prefix, grace_s: [])
    t = chaos.run_chaos_per_hv(2, 1, tmp_path, ("kvm",))["kvm"]
    assert t.refused == 2 and t.problems[0].endswith("exit 2): vrmig: error: RESULTS=x is not ours")
    from migrate.testbed.results import check_results_root

    check_results_root(tmp_path)  # the two logs are there, and the root is still a results root
    assert len(list(tmp_path.glob("chaos-*-kvm-trial*.log"))) == 2
