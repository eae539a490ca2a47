"""The nightly's in-night A/B (migrate.campaigns.ab): the matrix's [ab] section, the pair order,
the child's argv and the judgement (SYNTHETIC run rows; no root, nothing run)."""

import subprocess

import pytest

from analysis.stats.regression import Rule
from migrate.campaigns import ab
from migrate.campaigns import nightly as nt
from migrate.core.errors import ConfigError
from migrate.core.procs import with_pdeathsig

DOWNTIME = Rule("downtime_packets_s", "higher", 0.25, 0.010)


def _spec(reps: int = 10, alpha: float = 0.01) -> ab.AbSpec:
    return ab.AbSpec("p", (("MODE", "precopy"), ("RATE", "100M")), reps, alpha, 3600.0, (DOWNTIME,))


def _rows(arm: str, values, commit: str = "a" * 40, accel: str = "tcg"):
    return [{"arm": arm, "status": "completed", "downtime_packets_s": v, "git_commit": commit, "accel": accel}
            for v in values]  # fmt: skip


def test_the_shipped_matrix_has_an_ab_of_the_precopy_point_within_a_nominal_005():
    m = nt.load_matrix(nt.DEFAULT_MATRIX)
    assert m.ab is not None and m.ab.point == "precopy-100M-1500" and m.ab.reps == 30
    assert dict(m.ab.variables)["MODE"] == "precopy" and dict(m.ab.variables)["RATE"] == "100M"
    assert m.false_alarm_bound <= 0.05 + 1e-12


@pytest.mark.parametrize(
    ("section", "match"),
    [
        ('[ab]\npoint = "nope"\nreps = 30\nbudget_s = 10\nmetrics = { downtime_packets_s = { worse = "higher" } }',
         "'nope' is not a point label"),
        ('[ab]\npoint = "precopy-100M-1500"\nreps = 3\nbudget_s = 10\nalpha = 0.01\n'
         'metrics = { downtime_packets_s = { worse = "higher" } }', r"reps=3 per arm cannot reach p <= alpha=0.01"),
        ('[ab]\npoint = "precopy-100M-1500"\nreps = 30\nbudget_s = 10\nmetrics = { nope = { worse = "higher" } }',
         r"\[ab\] metrics 'nope' is not a metric"),
        ('[ab]\npoint = "precopy-100M-1500"\nreps = 30\nbudget_s = 10\nwho = 1\nmetrics = {}', "use keys"),
        ('[ab]\npoint = "precopy-100M-1500"\nreps = 30\nmetrics = { downtime_packets_s = { worse = "higher" } }',
         "budget_s=None must be a positive number"),
    ],
)  # fmt: skip
def test_bad_ab_sections_are_refused(tmp_path, section, match):
    text = nt.DEFAULT_MATRIX.read_text()
    start = text.index("\n[ab]\n") + 1
    end = text.index("\n\n", text.index("metrics = {", start))
    f = tmp_path / "m.toml"
    f.write_text(text[:start] + section + text[end:])
    with pytest.raises(ConfigError, match=match):
        nt.load_matrix(f)


def test_pairs_hold_both_arms_in_a_seeded_random_order():
    order = ab.pair_order(40, seed=7)
    pairs = [tuple(order[i : i + 2]) for i in range(0, len(order), 2)]
    assert len(pairs) == 40 and all(set(p) == set(ab.ARMS) for p in pairs)
    firsts = [p[0] for p in pairs]
    assert 10 <= firsts.count("accepted") <= 30  # both orders occur
    assert ab.pair_order(40, seed=7) == order and ab.pair_order(40, seed=8) != order


def test_the_child_runs_the_points_variables_with_sigterm_as_its_parent_death_signal(tmp_path):
    argv = ab.run_argv(_spec(), tmp_path)
    assert argv[1:4] == ["-m", "migrate", "run"]
    assert argv[4:] == ["--mode", "precopy", "--rate", "100M", "--results", str(tmp_path)]
    wrapped = with_pdeathsig(["true"], signal="TERM")
    assert wrapped[:4] == ["setpriv", "--pdeathsig", "TERM", "--"]
    assert with_pdeathsig(["true"])[:4] == ["setpriv", "--pdeathsig", "KILL", "--"]
    with pytest.raises(ValueError):
        with_pdeathsig(["true"], signal="HUP")
    assert subprocess.run(wrapped, check=False).returncode == 0


def test_a_longer_outage_tonight_is_a_regression_and_the_same_is_not():
    base = [0.30 + 0.01 * i for i in range(10)]
    same = ab.judge_ab(_spec(), _rows("accepted", base) + _rows("tonight", base[::-1]), "a" * 40)
    assert [v.status for v in same] == ["pass"] and same[0].metric == "downtime_packets_s A/B"
    longer = ab.judge_ab(_spec(), _rows("accepted", base) + _rows("tonight", [1.5 * x for x in base]), "a" * 40)
    assert [v.status for v in longer] == ["regression"], longer
    # below the minimum effect (+25 %): significant but not a regression
    slight = ab.judge_ab(_spec(), _rows("accepted", base) + _rows("tonight", [1.2 * x for x in base]), "a" * 40)
    assert [v.status for v in slight] == ["pass"] and "minimum effect" in slight[0].reason


def test_failed_runs_and_absent_outages_are_not_values():
    base = [0.30 + 0.01 * i for i in range(10)]
    tonight = [*_rows("tonight", [1.5 * x for x in base]), {"arm": "tonight", "status": "failed"}]
    tonight += _rows("tonight", [None])  # no outage found: absent, not 0
    v = ab.judge_ab(_spec(), _rows("accepted", base) + tonight, "a" * 40)[0]
    assert (v.n_base, v.n_cand, v.status) == (10, 10, "regression")


def test_an_accepted_arm_that_ran_another_commit_or_accelerator_is_an_error():
    base = [0.3] * 10
    wrong = ab.judge_ab(_spec(), _rows("accepted", base, commit="b" * 40) + _rows("tonight", base), "a" * 40)
    assert [v.status for v in wrong] == ["error"] and "b" * 40 in wrong[0].reason
    dirty = ab.judge_ab(_spec(), _rows("accepted", base, commit="a" * 40 + "-dirty") + _rows("tonight", base), "a" * 40)
    assert [v.status for v in dirty] == ["error"]
    unrecorded = ab.judge_ab(_spec(), _rows("accepted", base, commit=None) + _rows("tonight", base), "a" * 40)
    assert [v.status for v in unrecorded] == ["error"]
    mixed = ab.judge_ab(_spec(), _rows("accepted", base, accel="kvm") + _rows("tonight", base), "a" * 40)
    assert [v.status for v in mixed] == ["error"] and "accelerators" in mixed[0].reason


def test_an_unknown_commit_is_one_line_of_bad_input():
    with pytest.raises(ConfigError, match=r"AB='no-such-ref' is not a commit"):
        ab.resolve_commit("no-such-ref")
    assert len(ab.resolve_commit("HEAD")) == 40


def test_clean_testbed_removes_a_dead_nights_worktree_and_keeps_a_live_ones(tmp_path):
    """A real git worktree of HEAD, as a SIGKILLed night leaves it (owner.json names a process
    that is gone), and one of this live process."""
    import json
    import os

    from migrate.core.meta import REPO
    from migrate.core.registry import proc_starttime

    dead = subprocess.Popen(["true"])
    dead.wait()
    works = {}
    for name, pid in (("dead", dead.pid), ("live", os.getpid())):
        work = tmp_path / f"{ab.TREE_PREFIX}{name}"
        work.mkdir()
        start = proc_starttime(pid) if name == "live" else 1
        (work / ab.OWNER_FILE).write_text(json.dumps({"pid": pid, "starttime": start}))
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(work / "src"), "HEAD"],
                       capture_output=True, check=True)  # fmt: skip
        works[name] = work
    try:
        assert ab.clean_stale_trees(tmp_path) == [str(works["dead"])]
        listed = subprocess.run(["git", "-C", str(REPO), "worktree", "list", "--porcelain"], capture_output=True,
                                text=True, check=True).stdout  # fmt: skip
        assert not works["dead"].exists() and str(works["dead"] / "src") not in listed
        assert (works["live"] / "src" / "Makefile").is_file() and str(works["live"] / "src") in listed
    finally:
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(works["live"] / "src")],
                       capture_output=True, check=False)  # fmt: skip
        subprocess.run(["git", "-C", str(REPO), "worktree", "prune"], capture_output=True, check=False)


def test_ab_without_an_ab_section_is_one_line_of_bad_input(tmp_path):
    text = nt.DEFAULT_MATRIX.read_text()
    start = text.index("\n[ab]\n") + 1
    end = text.index("\n\n", text.index("metrics = {", start))
    f = tmp_path / "m.toml"
    f.write_text(text[:start] + text[end:])
    assert nt.load_matrix(f).ab is None
    with pytest.raises(ConfigError, match=r"AB=HEAD: MATRIX=.* has no \[ab\] section"):
        nt.run_nightly(f, tmp_path / "results", None, None, "HEAD")
    assert not (tmp_path / "results").exists()
    with pytest.raises(ConfigError, match="AB='nope' is not a commit"):
        nt.run_nightly(nt.DEFAULT_MATRIX, tmp_path / "results", None, None, "nope")
    assert not (tmp_path / "results").exists()


def test_the_in_night_ab_is_skipped_on_a_lab_before_anything_runs(tmp_path, monkeypatch):
    """The A/B runs another checkout of this machine: on a lab it is skipped with the reason,
    on the embedded testbed it goes on (here to the accepted commit's lookup)."""
    from types import SimpleNamespace

    from migrate.labs.where import where_for

    monkeypatch.setattr(ab, "run_ab", lambda *a, **k: pytest.fail("no A/B run"))
    matrix = SimpleNamespace(ab=_spec())
    res = nt._night_ab(matrix, None, None, None, [], tmp_path, 1, where_for(tmp_path / "lab.toml"), {})
    assert res is not None and {v.status for v in res.checks} == {"skipped"}
    assert all(v.reason.startswith("the A/B runs on the embedded testbed only") for v in res.checks)
    res = nt._night_ab(matrix, None, None, None, [], tmp_path, 1, where_for(None), {})
    assert res is not None and all(v.reason.startswith("no accepted night yet") for v in res.checks)
