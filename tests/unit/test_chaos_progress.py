"""make chaos: progress over the trials of every HV, a trial that leaks counted as failed, and the
per-trial log lines kept (the trials themselves are replaced: no root, nothing started)."""

import logging

from migrate.campaigns import chaos


def test_trials_are_counted_and_a_leaking_trial_is_a_failure(tmp_path, monkeypatch, capsys, caplog):
    monkeypatch.delenv("VRMIG_PROGRESS", raising=False)
    monkeypatch.setattr(chaos, "_trial", lambda hv, kind, delay, results, testbed=None: False)
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
