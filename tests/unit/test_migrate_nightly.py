"""The nightly matrix, the SQLite history, the judge and nightly-accept (SYNTHETIC history rows; no root)."""

import dataclasses
import sqlite3

import pytest

from migrate.campaigns import nightly as nt
from migrate.campaigns.history import History, run_columns
from migrate.core.errors import ConfigError
from migrate.model.scenario import Scenario


def test_checked_in_matrix_is_valid_and_fits_its_budget():
    m = nt.load_matrix(nt.DEFAULT_MATRIX)
    assert m.reps >= 1 and len(m.points) >= 1
    assert m.n_runs * m.expected_run_s <= m.budget_s
    assert len({p.label for p in m.points}) == len(m.points)
    assert {r.metric for r in m.rules} >= {"downtime_packets_s", "duration_link_s", "volume_link_bytes"}
    assert all(p.scenario.rate_bps > 0 for p in m.points)
    assert m.false_alarm_bound <= 0.05 and m.failures.min_failures == 2
    # the floors stay below the regressions the nightly must catch (x1.5 duration/downtime, x1.2 volume)
    for label in (p.label for p in m.points):
        rules = {r.metric: r for r in m.rules_for(label)}
        assert rules["duration_link_s"].min_rel < 0.5 and rules["volume_link_bytes"].min_rel < 0.2
    assert {r.metric: r for r in m.rules_for("stopcopy-20M-1500")}["downtime_packets_s"].min_rel < 0.5


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
history_nights = 20
[defaults]
DURATION = 8.0
MIGRATE_AT = 3.0
[[point]]
MODE = "precopy"
RATE = "100M"
SIZE = 1500
[failures]
min_failures = 2
alpha = 0.01
min_rate = 0.02
[metrics]
downtime_counters_s = { worse = "higher", min_rel = 0.25, min_abs = 0.03 }
"""


@pytest.mark.parametrize(
    ("old", "new", "match"),
    [
        ("reps = 5", "reps = 0", "reps=0"),
        ("reps = 5", "reps = 3", "too few"),  # 3 runs against 2 x 3 accepted: 1/C(9,3) = 0.012 > 0.01
        ("budget_s = 600", "budget_s = 60", "exceed budget_s"),
        ('RATE = "100M"', 'RATE = "fast"', "RATE"),
        ('MODE = "precopy"', 'MODE = "teleport"', "MODE="),
        ("SIZE = 1500", "SIZE = 1500\nWARP = 9", "unknown variable WARP"),
        ("SIZE = 1500", "frame_bytes = 1500", "unknown variable frame_bytes"),
        ("downtime_counters_s =", "downtime_counter =", "not a metric"),
        ('worse = "higher", min_rel = 0.25', 'worse = "up", min_rel = 0.25', "worse must be"),
        ("[nightly]", "[nightly\n", "not valid TOML"),
        ("[defaults]", "[extras]", "unknown section"),
        ("min_abs = 0.03 }", "min_abs = 0.03, alpha = 0.5 }", "use keys"),
        ("min_abs = 0.03 }", "min_abs = -1 }", "min_abs=-1"),
        ("alpha = 0.01\nhistory", "alpha = 0.00001\nhistory", "too few"),  # 1/C(15,5) = 0.00033 > 0.00001
        ("[metrics]\n", '[metrics]\nfailure_rate = { worse = "higher" }\n', "judged by \\[failures\\]"),
        ("min_failures = 2", "min_failures = 0", "min_failures=0"),
        ("min_rate = 0.02", "min_rate = 1.5", "must be below 1"),
        ("min_rate = 0.02", "min_rate = 0.02\nlevel = 3", "use keys"),
        ("SIZE = 1500", "SIZE = 1500\nmetrics = { volume_link_bytes = { min_rel = 1 } }", "not in"),
        (
            "SIZE = 1500",
            'SIZE = 1500\nmetrics = { downtime_counters_s = { worse = "lower" } }',
            "use keys",
        ),
        ("history_nights = 20", "history_nights = 0", "history_nights=0"),
    ],
)
def test_bad_matrices_are_refused(tmp_path, old, new, match):
    assert old in GOOD
    with pytest.raises(ConfigError, match=match):
        nt.load_matrix(_write(tmp_path, GOOD.replace(old, new)))


def test_missing_matrix(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        nt.load_matrix(tmp_path / "nope.toml")


def _add_night(hist, night_id, started, downtimes, statuses=None, fp=None, matrix=None, accel="tcg", classes=None,
               qemu=None):  # fmt: skip
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
                    "point_fingerprint": fp or nt.fingerprint(p.scenario, accel), "status": status,
                    "failure_class": classes[i] if classes else None, "accel_used": accel,
                    "downtime_counters_s": d if status == "completed" else None,
                    "downtime_packets_s": d if status == "completed" else None,
                    "duration_link_s": 1.0, "volume_link_bytes": 100e6, "rtt_increase_median_ms": 1.0,
                    "forwarded_ratio": 0.98, "elapsed_s": 30.0, "qemu": qemu,
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


BASE = [0.10, 0.11, 0.12, 0.10, 0.11]


def test_judge_pools_the_accepted_nights_flags_a_regression_and_passes_noise(tmp_path):
    m = nt.load_matrix(nt.DEFAULT_MATRIX)
    with History(tmp_path / "h.sqlite") as h:
        _add_night(h, "a1", "2026-01-01", BASE)
        _add_night(h, "a2", "2026-01-02", [0.11, 0.12, 0.10, 0.12, 0.11])
        _add_night(h, "same", "2026-01-03", [0.11, 0.10, 0.12, 0.11, 0.10])
        _add_night(h, "worse", "2026-01-04", [0.40, 0.41, 0.39, 0.43, 0.42])
        none = nt.judge(h, "same", m)
        assert {v.status for _, v in none} == {"skipped"} and "nightly-accept" in none[0][1].reason
        h.promote("a1", "t1")
        h.promote("a2", "t2")
        assert nt.accepted_nights(h) == ["a2", "a1"]
        same = nt.judge(h, "same", m)
        assert not any(v.regression for _, v in same)
        assert {v.n_base for _, v in same if v.metric == "downtime_packets_s"} == {10}  # both nights pooled
        worse = nt.judge(h, "worse", m)
        flagged = {(pt, v.metric) for pt, v in worse if v.regression}
        # x3.6: every downtime check fails, including the pre-copy point's (whose floor is +200 %)
        assert flagged == {(p.label, k) for p in m.points for k in ("downtime_packets_s", "downtime_counters_s")}
        assert all("after Holm over 12 checks" in v.reason for _, v in worse if v.regression)
        # with one accepted night, 5 vs 5 runs cannot reach the first Holm level: nothing fails
        one = nt.judge(h, "worse", m, "a1")
        assert not any(v.regression for _, v in one)
        assert all("accept more nights" in v.reason for _, v in one if v.metric == "downtime_packets_s")
        capped = nt.judge(h, "same", dataclasses.replace(m, history_nights=1))
        assert {v.n_base for _, v in capped if v.metric == "downtime_packets_s"} == {5}


def test_judge_failures_count_migration_attempts_only(tmp_path):
    m = nt.load_matrix(nt.DEFAULT_MATRIX)
    failed2 = ["failed", "failed", "completed", "completed", "completed"]
    with History(tmp_path / "h.sqlite") as h:
        for i in range(4):
            _add_night(h, f"a{i}", f"2026-01-0{i + 1}", BASE)
            h.promote(f"a{i}", f"t{i}")
        _add_night(h, "mig", "2026-01-10", BASE, failed2, classes=["migration", "post-migration", None, None, None])
        _add_night(h, "old", "2026-01-11", BASE, failed2)  # no failure_class: counted as migration failures
        _add_night(h, "setup", "2026-01-12", BASE, failed2, classes=["setup", "setup", None, None, None])
        _add_night(h, "one", "2026-01-13", BASE, [*failed2[1:], "completed"], classes=["migration"] + [None] * 4)
        for night in ("mig", "old"):
            flagged = {(pt, v.metric) for pt, v in nt.judge(h, night, m) if v.regression}
            assert flagged == {(p.label, "migration_failures") for p in m.points}
        setup = nt.judge(h, "setup", m)
        assert not any(v.regression for _, v in setup)
        errors = [(pt, v) for pt, v in setup if v.status == "error"]
        assert [v.metric for _, v in errors] == ["setup_failures"] * len(m.points)
        assert all(v.n_cand == 3 for _, v in setup if v.metric == "migration_failures")  # 3 attempts, not 5
        assert not any(v.regression for _, v in nt.judge(h, "one", m))  # 1 of 5 is not enough


def test_judge_changed_parameters_and_accelerators(tmp_path):
    m = nt.load_matrix(nt.DEFAULT_MATRIX)
    with History(tmp_path / "h.sqlite") as h:
        _add_night(h, "base", "2026-01-01", [0.1] * 5)
        _add_night(h, "other", "2026-01-03", [0.1] * 5, fp="0000")
        _add_night(h, "kvm", "2026-01-04", [0.1] * 5, accel="kvm")
        other = nt.judge(h, "base", m, "other")
        assert all(v.status == "skipped" and "other parameters" in v.reason for _, v in other)
        across = nt.judge(h, "base", m, "kvm")
        assert all(v.status == "skipped" and "accel=kvm" in v.reason for _, v in across)
        h.promote("kvm", "t")
        with pytest.raises(ConfigError, match=r"accepted nights ran with accel=kvm \(10 runs\) but this night would "
                           r"run with accel=tcg; runs of different accelerators are not compared"):  # fmt: skip
            nt.check_accel(h, "tcg", nt.accepted_nights(h))
        nt.check_accel(h, "kvm", nt.accepted_nights(h))  # same accelerator: fine
    p = m.points[0].scenario
    assert nt.fingerprint(p, "tcg") != nt.fingerprint(p, "kvm") != nt.fingerprint(p)


def test_a_night_on_another_qemu_build_is_refused(tmp_path):
    """SYNTHETIC history: accepted nights ran QEMU 7.2; tonight's default stack is 10.0."""
    v7, v10 = "QEMU emulator version 7.2.22 (Debian 1:7.2+dfsg-7+deb12u18)", "QEMU emulator version 10.0.2 (Debian)"
    with History(tmp_path / "h.sqlite") as h:
        _add_night(h, "old", "2026-01-01", [0.1] * 3, qemu=v7)
        h.promote("old", "t")
        want = (
            r"accepted nights ran with QEMU=QEMU emulator version 7\.2\.22 .*\(6 runs\) but this night would run "
            r"with QEMU=QEMU emulator version 10\.0\.2 .*runs of different QEMU builds are not compared"
        )
        with pytest.raises(ConfigError, match=want):
            nt.check_qemu(h, v10, nt.accepted_nights(h))
        nt.check_qemu(h, v7, nt.accepted_nights(h))  # the same build: fine


def test_accept_adds_the_latest_finished_night(tmp_path):
    hp = tmp_path / "h.sqlite"
    with pytest.raises(ConfigError, match="does not exist"):
        nt.accept(tmp_path, hp, None)
    with History(hp) as h:
        _add_night(h, "n1", "2026-01-01", [0.1] * 5)
        _add_night(h, "n2", "2026-01-02", [0.1] * 5)
        _add_night(h, "k1", "2025-12-01", [0.1] * 5, accel="kvm")
        h.upsert("nights", {"night_id": "n3", "started_utc": "2026-01-03", "status": "running"})
    row = nt.accept(tmp_path, hp, None)
    assert row["night_id"] == "n2" and row["previous_baseline"] is None and row["n_completed"] == 10
    row = nt.accept(tmp_path, hp, "/some/where/n1")
    assert row["night_id"] == "n1" and row["previous_baseline"] == "n2" and row["n_accepted"] == 2
    with pytest.raises(ConfigError, match="did not finish"):
        nt.accept(tmp_path, hp, "n3")
    with pytest.raises(ConfigError, match="not a night"):
        nt.accept(tmp_path, hp, "n9")
    with pytest.raises(ConfigError, match=r"accel=tcg .* accel=kvm"):
        nt.accept(tmp_path, hp, "k1")
    with History(hp) as h:
        assert h.baseline() == "n1" and nt.accepted_nights(h) == ["n1", "n2"]


def test_night_outputs_mark_regressions_and_setup_errors(tmp_path):
    """SYNTHETIC night directory (fixture runs) with one failed check and one setup error:
    junit.xml, report.html and the printed summary."""
    import json
    import xml.etree.ElementTree as ET

    from analysis.stats.regression import Verdict
    from tests.fixtures.analysis.synthetic_sweep import write_sweep

    night = write_sweep(tmp_path)
    meta = json.loads((night / "meta.json").read_text())
    (night / "meta.json").write_text(json.dumps({**meta, "kind": "nightly"}))
    checks = [
        ("100M-1500", Verdict("downtime_counters_s", "regression", "REGRESSION: median 0.3 vs accepted 0.1")),
        ("100M-1500", Verdict("duration_link_s", "pass", "not worse")),
        ("100M-1500", Verdict("setup_failures", "error", "1 of 4 runs failed before the migration (setup)")),
    ]
    res = nt.NightResult(night, night.name, "regression", "base", checks, 4, 1, 12.0, None, 3)
    vers = {"hypervisor": {"qemu": "q", "accel": "tcg"}, "host": {"kernel": "k", "hostname": "h"}, "git_commit": "c"}
    nt._write_night_outputs(res, nt.load_matrix(nt.DEFAULT_MATRIX), vers)
    suite = ET.parse(night / nt.JUNIT_NAME).getroot().find("testsuite")
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("3", "1", "1")
    html_text = (night / "report.html").read_text()
    assert 'class="banner bad"' in html_text and "REGRESSION: 1 check(s) failed against 3 accepted night" in html_text
    assert '<tr class="regression"><td class="l">100M-1500</td>' in html_text
    assert '<tr class="failed"><td class="l">100M-1500</td><td class="l">setup_failures' in html_text
    assert html_text.index('id="checks"') < html_text.index("<h2>Plots</h2>")
    assert res.exit_code == 1
    text = nt.format_night(res)
    assert "FAIL" in text and "  ERR  100M-1500" in text
    assert text.splitlines()[-1].startswith("result: REGRESSION — 1 regression(s), 1 passed, 0 skipped, 1 error(s)")
    errors_only = dataclasses.replace(res, status="pass", checks=checks[1:])
    assert errors_only.exit_code == 0 and errors_only.n_errors == 1  # a setup failure is not a regression


def _synthetic_night(h, m, night, d, testbed=None, accel="tcg"):
    for p in m.points:
        for i in range(5):  # SYNTHETIC rows
            row = {"night_id": night, "run_id": f"{p.label}-r{i}", "point": p.label,
                   "point_fingerprint": nt.fingerprint(p.scenario, accel), "status": "completed",
                   "accel_used": accel, "downtime_counters_s": d + i / 1000}  # fmt: skip
            if testbed is not None:  # None: a row written before the history had the column
                row["testbed"] = testbed
            h.upsert("runs", row)


def test_testbed_id_names_the_inventory_by_its_content(tmp_path):
    inv = tmp_path / "lab.toml"
    inv.write_text("# a lab\n")
    a = nt.testbed_id(inv)
    assert nt.testbed_id(None) == "embedded" and a.startswith("lab:") and len(a) == 4 + 16
    inv.write_text("# a lab, edited\n")
    assert nt.testbed_id(inv) != a


def test_nightly_compares_only_runs_of_tonights_testbed(tmp_path):
    m = nt.load_matrix(nt.DEFAULT_MATRIX)
    with History(tmp_path / "h.sqlite") as h:
        _synthetic_night(h, m, "embedded-base", 0.1)  # legacy rows: no testbed column value
        _synthetic_night(h, m, "lab-base", 0.1, "lab:0123456789abcdef")
        _synthetic_night(h, m, "tonight", 0.5, "lab:0123456789abcdef")
        across = nt.judge(h, "tonight", m, "embedded-base")
        assert {v.status for _, v in across} == {"skipped"}
        assert all("testbed embedded, tonight's on lab:0123456789abcdef" in v.reason for _, v in across)
        same = nt.judge(h, "tonight", m, "lab-base")
        assert any(v.regression for _, v in same)


def test_a_night_on_another_testbed_than_the_accepted_ones_is_refused(tmp_path):
    m = nt.load_matrix(nt.DEFAULT_MATRIX)
    with History(tmp_path / "h.sqlite") as h:
        _synthetic_night(h, m, "embedded-base", 0.1)
        nt.check_testbed(h, "embedded", ["embedded-base"])  # legacy rows count as embedded
        with pytest.raises(ConfigError, match=r"ran with testbed=embedded \(\d+ runs\) but this night would run "
                                              r"with testbed=lab:0123456789abcdef"):  # fmt: skip
            nt.check_testbed(h, "lab:0123456789abcdef", ["embedded-base"])


def test_an_old_history_gains_the_testbed_columns(tmp_path):
    path = tmp_path / "old.sqlite"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE schema (version INTEGER)")
    db.execute("INSERT INTO schema VALUES (1)")
    db.execute("CREATE TABLE nights (night_id, status, PRIMARY KEY (night_id))")
    db.execute("INSERT INTO nights VALUES ('n1', 'pass')")
    db.commit()
    db.close()
    with History(path) as h:
        h.upsert("nights", {"night_id": "n2", "status": "pass", "testbed": "embedded"})
        assert h.night("n1")["testbed"] is None and h.night("n2")["testbed"] == "embedded"
        assert "testbed" in {r[1] for r in h.db.execute("PRAGMA table_info(runs)")}


def test_fingerprints_of_the_shipped_matrix_stay_those_of_the_accepted_nights():
    """The fingerprints the history was written with (2026-11-24, before the matrix took Make
    variables and before any QEMU knob or DIRTY existed): new Scenario fields left at their
    defaults must not make the accepted nights incomparable."""
    m = nt.load_matrix(nt.DEFAULT_MATRIX)
    got = {p.label: nt.fingerprint(p.scenario, "tcg") for p in m.points}
    assert got == {"precopy-100M-1500": "88fb279fbd029c83", "stopcopy-20M-1500": "a71de760c2d3bd60"}
