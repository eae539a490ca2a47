"""The nightly matrix, the SQLite history, the judge and nightly-accept (SYNTHETIC history rows; no root)."""

import sqlite3

import pytest

from migrate import nightly as nt
from migrate.errors import ConfigError
from migrate.history import History, run_columns
from migrate.scenario import Scenario


def test_checked_in_matrix_is_valid_and_fits_its_budget():
    m = nt.load_matrix(nt.DEFAULT_MATRIX)
    assert m.reps >= 1 and len(m.points) >= 1
    assert m.n_runs * m.expected_run_s <= m.budget_s
    assert len({p.label for p in m.points}) == len(m.points)
    assert {r.metric for r in m.rules} >= {"downtime_counters_s", "failure_rate"}
    assert all(p.scenario.rate_bps > 0 for p in m.points)


def _write(tmp_path, text):
    p = tmp_path / "m.toml"
    p.write_text(text)
    return p


GOOD = """
[nightly]
reps = 5
budget_s = 600
expected_run_s = 30
alpha = 0.01
[defaults]
duration_s = 8.0
migrate_at_s = 3.0
[[point]]
mode = "precopy"
rate = "100M"
frame_bytes = 1500
[metrics]
downtime_counters_s = { worse = "higher", min_rel = 0.25, min_abs = 0.03 }
failure_rate = { worse = "higher", min_abs = 0.4 }
"""


@pytest.mark.parametrize(
    ("old", "new", "match"),
    [
        ("reps = 5", "reps = 0", "reps=0"),
        ("reps = 5", "reps = 3", "too few"),
        ("budget_s = 600", "budget_s = 60", "exceed budget_s"),
        ('rate = "100M"', 'rate = "fast"', "not a rate"),
        ('mode = "precopy"', 'mode = "teleport"', "MODE="),
        ("frame_bytes = 1500", "frame_bytes = 1500\nwarp = 9", "unknown parameter"),
        ("downtime_counters_s =", "downtime_counter =", "not a metric"),
        ('worse = "higher", min_rel = 0.25', 'worse = "up", min_rel = 0.25', "worse must be"),
        ("[nightly]", "[nightly\n", "not valid TOML"),
        ("[defaults]", "[extras]", "unknown section"),
        ("min_abs = 0.4 }", "min_abs = 0.4, alpha = 0.5 }", "use keys"),
        ("alpha = 0.01", "alpha = 0.001", "too few"),  # 2 checks: 0.0005 < 1/252
    ],
)
def test_bad_matrices_are_refused(tmp_path, old, new, match):
    assert old in GOOD
    with pytest.raises(ConfigError, match=match):
        nt.load_matrix(_write(tmp_path, GOOD.replace(old, new)))


def test_missing_matrix(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        nt.load_matrix(tmp_path / "nope.toml")


def _add_night(hist, night_id, started, downtimes, statuses=None, fp=None, matrix=None):
    """SYNTHETIC night rows (nothing measured)."""
    matrix = matrix or nt.load_matrix(nt.DEFAULT_MATRIX)
    hist.upsert(
        "nights", {"night_id": night_id, "night_dir": f"/n/{night_id}", "started_utc": started, "status": "pass"}
    )
    for p in matrix.points:
        for i, d in enumerate(downtimes):
            status = statuses[i] if statuses else "completed"
            hist.upsert(
                "runs",
                {
                    "night_id": night_id, "run_id": f"{p.label}-r{i + 1:02d}", "point": p.label, "rep": i + 1,
                    "point_fingerprint": fp or nt.fingerprint(p.scenario), "status": status,
                    "downtime_counters_s": d if status == "completed" else None, "downtime_packets_s": d,
                    "duration_link_s": 1.0, "volume_link_bytes": 100e6, "rtt_increase_median_ms": 1.0,
                    "forwarded_ratio": 0.98, "elapsed_s": 30.0,
                },
            )  # fmt: skip


def test_history_schema_one_row_per_run_with_all_columns(tmp_path):
    with History(tmp_path / "h.sqlite") as h:
        _add_night(h, "n1", "2026-01-01", [0.1, 0.11, 0.12, 0.1, 0.11])
        assert len(h.runs("n1")) == 10 and h.mean_elapsed_s() == 30.0
    db = sqlite3.connect(tmp_path / "h.sqlite")
    cols = [r[1] for r in db.execute("PRAGMA table_info(runs)")]
    assert set(run_columns()) <= set(cols)
    assert set(Scenario.field_names()) <= set(cols)
    n = db.execute("SELECT COUNT(*) FROM runs WHERE point = 'precopy-100M-1500'").fetchone()[0]
    assert n == 5


def test_corrupted_history_is_refused_untouched(tmp_path):
    bad = tmp_path / "h.sqlite"
    bad.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(ConfigError, match="not a usable SQLite"):
        History(bad)
    assert bad.read_bytes() == b"this is not sqlite" * 100


def test_judge_flags_a_regression_and_passes_noise(tmp_path):
    m = nt.load_matrix(nt.DEFAULT_MATRIX)
    with History(tmp_path / "h.sqlite") as h:
        _add_night(h, "base", "2026-01-01", [0.10, 0.11, 0.12, 0.10, 0.11])
        _add_night(h, "same", "2026-01-02", [0.11, 0.10, 0.12, 0.11, 0.10])
        _add_night(h, "worse", "2026-01-03", [0.30, 0.31, 0.29, 0.33, 0.32])
        none = nt.judge(h, "same", m, None)
        assert {v.status for _, v in none} == {"skipped"} and "nightly-accept" in none[0][1].reason
        same = nt.judge(h, "same", m, "base")
        assert not any(v.regression for _, v in same)
        worse = nt.judge(h, "worse", m, "base")
        flagged = {(pt, v.metric) for pt, v in worse if v.regression}
        assert flagged == {(p.label, "downtime_counters_s") for p in m.points}
        assert all("after Holm over 12 checks" in v.reason for _, v in worse if v.regression)


def test_judge_failure_rate_and_changed_parameters(tmp_path):
    m = nt.load_matrix(nt.DEFAULT_MATRIX)
    with History(tmp_path / "h.sqlite") as h:
        _add_night(h, "base", "2026-01-01", [0.1] * 5)
        _add_night(h, "broken", "2026-01-02", [None] * 5, statuses=["failed"] * 5)
        _add_night(h, "other", "2026-01-03", [0.1] * 5, fp="0000")
        broken = nt.judge(h, "broken", m, "base")
        assert {v.metric for _, v in broken if v.regression} == {"failure_rate"}
        other = nt.judge(h, "base", m, "other")
        assert all(v.status == "skipped" and "other parameters" in v.reason for _, v in other)


def test_accept_promotes_the_latest_finished_night(tmp_path):
    hp = tmp_path / "h.sqlite"
    with pytest.raises(ConfigError, match="does not exist"):
        nt.accept(tmp_path, hp, None)
    with History(hp) as h:
        _add_night(h, "n1", "2026-01-01", [0.1] * 5)
        _add_night(h, "n2", "2026-01-02", [0.1] * 5)
        h.upsert("nights", {"night_id": "n3", "started_utc": "2026-01-03", "status": "running"})
    row = nt.accept(tmp_path, hp, None)
    assert row["night_id"] == "n2" and row["previous_baseline"] is None and row["n_completed"] == 10
    row = nt.accept(tmp_path, hp, "/some/where/n1")
    assert row["night_id"] == "n1" and row["previous_baseline"] == "n2"
    with pytest.raises(ConfigError, match="did not finish"):
        nt.accept(tmp_path, hp, "n3")
    with pytest.raises(ConfigError, match="not a night"):
        nt.accept(tmp_path, hp, "n9")
    with History(hp) as h:
        assert h.baseline() == "n1"


def test_night_outputs_mark_regressions(tmp_path):
    """SYNTHETIC night directory (fixture runs) with one failed check: junit.xml and report.html."""
    import json
    import xml.etree.ElementTree as ET

    from analysis.regression import Verdict
    from tests.fixtures.analysis.synthetic_sweep import write_sweep

    night = write_sweep(tmp_path)
    meta = json.loads((night / "meta.json").read_text())
    (night / "meta.json").write_text(json.dumps({**meta, "kind": "nightly"}))
    checks = [
        ("100M-1500", Verdict("downtime_counters_s", "regression", "REGRESSION: median 0.3 vs baseline 0.1")),
        ("100M-1500", Verdict("duration_link_s", "pass", "not worse")),
    ]
    res = nt.NightResult(night, night.name, "regression", "base", checks, 4, 1, 12.0, None)
    vers = {"hypervisor": {"qemu": "q", "accel": "tcg"}, "host": {"kernel": "k", "hostname": "h"}, "git_commit": "c"}
    nt._write_night_outputs(res, nt.load_matrix(nt.DEFAULT_MATRIX), vers)
    suite = ET.parse(night / nt.JUNIT_NAME).getroot().find("testsuite")
    assert (suite.get("tests"), suite.get("failures")) == ("2", "1")
    html_text = (night / "report.html").read_text()
    assert 'class="banner bad"' in html_text and "REGRESSION: 1 check(s) failed" in html_text
    assert '<tr class="regression"><td class="l">100M-1500</td>' in html_text
    assert html_text.index('id="checks"') < html_text.index("<h2>Plots</h2>")
    assert res.exit_code == 1
    text = nt.format_night(res)
    assert "FAIL" in text and text.splitlines()[-1].startswith("result: REGRESSION")
