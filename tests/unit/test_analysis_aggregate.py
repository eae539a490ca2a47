"""Aggregation over repetitions: censored figures are never averaged, every mean says its n,
failure rates are over migration attempts, a point never mixes accelerators (SYNTHETIC data)."""

import csv
import json
import sqlite3

import pytest

from analysis.stats.aggregate import (
    aggregate,
    describe_metric,
    mixed_accelerators,
    point_columns,
    point_row,
    run_record,
)
from migrate.campaigns.reporting import format_points, write_sweep_outputs
from migrate.core.errors import ConfigError
from tests.fixtures.analysis.synthetic_sweep import write_sweep


def _summary(downtime=None, lower=None, status="completed", reasons=("open_end",)):
    """SYNTHETIC summary.json (format 2): a measured downtime, or only a lower bound, or none."""
    quals = {}
    if lower is not None:
        quals["downtime_s.counters"] = {"state": "censored", "reasons": list(reasons), "text": "", "lower": lower}
    elif downtime is None:
        quals["downtime_s.counters"] = {"state": "absent", "reasons": ["no_stall"], "text": "", "upper": 0.02}
    return {
        "status": status,
        "downtime_s": {"counters": downtime, "packets": None, "hypervisor": None},
        "rtt_ms": {"before": {"median": 1.0}, "during": {"median": 2.0}},
        "qualifiers": quals,
        "details": {"window": {}},
    }


def _meta(status="completed", failure_class=None, accel="tcg", rate=100e6):
    meta = {"status": status, "accel": accel, "scenario": {"hv": "kvm", "mode": "precopy", "rate_bps": rate,
                                                          "frame_bytes": 1500}}  # fmt: skip
    if failure_class is not None:
        meta["failure_class"] = failure_class
    return meta


def test_run_record_carries_bounds_as_bounds():
    rec = run_record(_summary(lower=2.5), _meta())
    assert rec["downtime_counters_s"] is None and rec["downtime_counters_s_lower"] == 2.5
    assert rec["quals"]["downtime_counters_s"]["state"] == "censored"
    assert rec["qualifiers"] == "downtime_counters_s: >= 2.5 (open_end)"
    absent = run_record(_summary(), _meta())
    assert absent["downtime_counters_s"] is None and absent["downtime_counters_s_lower"] is None
    assert absent["qualifiers"] == "downtime_counters_s: – (no_stall)"
    assert run_record(_summary(0.2), _meta())["quals"] == {}


def test_censored_runs_are_not_averaged_and_counted():
    recs = [run_record(_summary(d), _meta()) for d in (0.1, 0.2, 0.3)]
    recs += [run_record(_summary(lower=5.0), _meta()), run_record(_summary(lower=7.0), _meta())]
    recs.append(run_record(_summary(), _meta()))  # no stall found
    st = describe_metric(recs, "downtime_counters_s")
    assert (st.n, st.mean) == (3, pytest.approx(0.2))  # the 5 s and 7 s bounds are not points
    assert (st.n_censored, st.lower_max, st.n_absent, st.n_incomplete) == (2, 7.0, 1, 0)
    (p,) = aggregate(recs)
    row = point_row(p)
    assert set(row) == set(point_columns())
    assert (row["downtime_counters_s_n"], row["downtime_counters_s_n_censored"]) == (3, 2)
    assert (row["downtime_counters_s_lower_max"], row["downtime_counters_s_n_absent"]) == (7.0, 1)
    assert row["downtime_counters_s_mean"] == pytest.approx(0.2)


def test_failure_rate_is_over_migration_attempts_with_class_counts():
    recs = [run_record(_summary(0.1), _meta()) for _ in range(3)]
    recs += [
        run_record(_summary(status="failed"), _meta("failed", "setup")),  # never tried to migrate
        run_record(_summary(status="failed"), _meta("failed", "migration")),
        run_record(_summary(status="failed"), _meta("failed", "post-migration")),
        run_record(_summary(status="failed"), _meta("interrupted", "interrupted")),
        run_record(_summary(status="failed"), _meta("failed")),  # older run: no class
    ]
    (p,) = aggregate(recs)
    assert (p.n_runs, p.n_completed, p.n_attempts, p.n_failed, p.n_excluded) == (8, 3, 6, 3, 2)
    assert (p.failed_setup, p.failed_migration, p.failed_post_migration) == (1, 1, 1)
    assert (p.failed_interrupted, p.failed_unclassified) == (1, 1)
    assert p.failure_rate == pytest.approx(3 / 6)
    assert recs[3]["failure_class"] == "setup"
    row = point_row(p)
    assert (row["failed_setup"], row["failed_post_migration"], row["n_attempts"]) == (1, 1, 6)


def test_a_point_never_mixes_accelerators():
    recs = [run_record(_summary(0.1), _meta(accel="tcg")), run_record(_summary(0.2), _meta(accel="kvm"))]
    assert mixed_accelerators(recs) == ["point kvm precopy 100M 1500 B mixes accelerators (kvm: 1 runs, tcg: 1 runs)"]
    with pytest.raises(ValueError, match="mixes accelerators"):
        aggregate(recs)
    # a set-up failure that never learnt its accelerator joins the point of its accelerator
    early = run_record(_summary(status="failed"), _meta("failed", "setup", accel=None))
    (p,) = aggregate([recs[0], early])
    assert (p.accel, p.n_runs, p.failed_setup) == ("tcg", 2, 1)
    # different rates with different accelerators are different points: no mixing
    other = run_record(_summary(0.2), _meta(accel="kvm", rate=0))
    assert mixed_accelerators([recs[0], other]) == []
    assert [p.accel for p in aggregate([recs[0], other])] == ["kvm", "tcg"]


def test_sweep_report_with_bounds_classes_and_n(tmp_path):
    sweep = write_sweep(
        tmp_path, failed=("200M-1500-r02",), never_back=("100M-1500-r02",), failure_class={"200M-1500-r02": "setup"}
    )
    out = write_sweep_outputs(sweep)
    runs = {r["run_id"]: r for r in csv.DictReader((sweep / "runs.csv").open())}
    bounded = runs["100M-1500-r02"]
    assert bounded["downtime_counters_s"] == "" and float(bounded["downtime_counters_s_lower"]) > 2.0
    assert "downtime_counters_s: >= " in bounded["qualifiers"]
    assert runs["200M-1500-r02"]["failure_class"] == "setup"
    points = {p["rate_bps"]: p for p in csv.DictReader((sweep / "points.csv").open())}
    p100, p200 = points["100000000"], points["200000000"]
    assert (p100["accel"], p100["downtime_counters_s_n"], p100["downtime_counters_s_n_censored"]) == ("tcg", "1", "1")
    assert float(p100["downtime_counters_s_mean"]) == pytest.approx(0.170)  # the bound is not averaged in
    # the set-up failure is not a migration attempt: 0 of 1 attempts failed
    assert (p200["n_attempts"], p200["n_failed"], p200["failed_setup"], p200["failure_rate"]) == ("1", "0", "1", "0.0")
    table = format_points(out.points)
    assert "n=1 +1≥" in table and "tcg" in table
    html = (sweep / "report.html").read_text()
    assert "1 censored ≥" in html and "n=1" in html and "1 setup" in html
    # the outage anatomy: runs.csv columns (a never-back run's outage is a bound) and the report's table
    assert float(runs["100M-1500-r01"]["outage_s"]) > 0 and float(runs["100M-1500-r01"]["vcpu_blackout_s"]) > 0
    assert bounded["outage_s"] == "" and float(bounded["outage_s_lower"]) > 2.0
    assert "Outage anatomy (per run)" in html and "vCPU stop" in html


def test_report_refuses_to_mix_accelerators_in_a_point(tmp_path, capsys):
    from migrate.cli.main import main

    sweep = write_sweep(tmp_path, failed=(), accel={"100M-1500-r01": "kvm"})
    with pytest.raises(ConfigError, match="point kvm precopy 100M 1500 B mixes accelerators"):
        write_sweep_outputs(sweep)
    assert not (sweep / "report.html").exists()
    assert main(["report", str(sweep)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "mixes accelerators (kvm: 1 runs, tcg: 1 runs)" in err[0]


def test_compare_refuses_different_accelerators(tmp_path):
    from migrate.campaigns.compare import compare

    a = write_sweep(tmp_path / "a", failed=())
    ids = [f"{r}-1500-r0{k}" for r in ("100M", "200M") for k in (1, 2)]
    b = write_sweep(tmp_path / "b", failed=(), mode="stopcopy", accel=dict.fromkeys(ids, "kvm"))
    with pytest.raises(ConfigError, match="A ran with accel=tcg, B with accel=kvm"):
        compare(a, b, tmp_path / "results")
    assert not (tmp_path / "results").exists()


def test_resuming_a_sweep_with_another_accelerator_is_refused(tmp_path):
    from migrate.campaigns.sweep import check_accel, recorded_accels
    from migrate.campaigns.sweepdir import open_sweep

    sweep = write_sweep(tmp_path, failed=())
    _, state = open_sweep(sweep)
    assert recorded_accels(sweep, state) == {"tcg": 4}
    check_accel(sweep, state, {"hypervisor": {"accel": "tcg"}})  # same accelerator: fine
    with pytest.raises(ConfigError, match=r"ran with accel=tcg \(4 runs\) but would now run with accel=kvm"):
        check_accel(sweep, state, {"hypervisor": {"accel": "kvm"}})


def test_history_keeps_bounds_failure_class_and_qualifiers(tmp_path):
    from migrate.campaigns.history import History, history_fields, run_columns

    rec = run_record(_summary(lower=3.0), _meta("failed", "post-migration"))
    fields = history_fields(rec)
    assert fields["downtime_counters_s"] is None and fields["downtime_counters_s_lower"] == 3.0
    assert fields["failure_class"] == "post-migration"
    assert json.loads(fields["qualifiers_json"])["downtime_counters_s"]["lower"] == 3.0
    assert {"failure_class", "qualifiers_json", "downtime_counters_s_lower"} <= set(run_columns())
    with History(tmp_path / "h.sqlite") as h:
        h.upsert("runs", {"night_id": "n", "run_id": "r", **fields})
    with sqlite3.connect(tmp_path / "h.sqlite") as db:
        row = db.execute("SELECT downtime_counters_s, downtime_counters_s_lower, failure_class FROM runs").fetchone()
    assert row == (None, 3.0, "post-migration")


def test_baseline_generator_cpu_missing_is_unknown(tmp_path):
    from analysis.baseline.points import _flow

    gen = {"start_ns": 0, "end_ns": 2 * 10**9, "packets": 100, "achieved_bps": 1e6, "achieved_pps": 50.0}
    (tmp_path / "gen.json").write_text(json.dumps(gen))  # SYNTHETIC: an older vrgen without CPU figures
    (tmp_path / "sink.json").write_text(json.dumps({"packets": 100}))
    flow = _flow(tmp_path, {"router": 0, "gen": "gen.json", "sink": "sink.json"}, 1500)
    assert flow["gen_cpu"] is None  # not 0 CPU-seconds per second
    (tmp_path / "gen.json").write_text(json.dumps({**gen, "cpu_user_s": 0.5, "cpu_sys_s": 0.3}))
    flow = _flow(tmp_path, {"router": 0, "gen": "gen.json", "sink": "sink.json"}, 1500)
    assert flow["gen_cpu"] == pytest.approx(0.4)


def test_plot_values_keep_bounds_apart_and_carry_n():
    from analysis.present.sweep_plot import _values

    recs = [run_record(_summary(d), _meta()) for d in (0.1, 0.3)] + [run_record(_summary(lower=4.0), _meta())]
    (p,) = aggregate(recs)
    v = _values([p], "downtime_counters_s", 1e3)
    assert (v.xs, v.ys, v.ns) == ([100.0], [pytest.approx(200.0)], [2])  # the mean of the two measured runs
    assert (v.bound_xs, v.bound_ys) == ([100.0], [4000.0])  # the bound, drawn apart as '≥'


def test_nightly_compares_only_baseline_runs_of_tonights_accelerator(tmp_path):
    from migrate.campaigns import nightly as nt
    from migrate.campaigns.history import History

    m = nt.load_matrix(nt.DEFAULT_MATRIX)
    with History(tmp_path / "h.sqlite") as h:
        for night, accel, d in (("base", "kvm", 0.1), ("tonight", "tcg", 0.5), ("tcg-base", "tcg", 0.1)):
            for p in m.points:
                for i in range(5):  # SYNTHETIC rows
                    h.upsert("runs", {"night_id": night, "run_id": f"{p.label}-r{i}", "point": p.label,
                                      "point_fingerprint": nt.fingerprint(p.scenario), "status": "completed",
                                      "accel_used": accel, "downtime_counters_s": d + i / 1000})  # fmt: skip
        across = nt.judge(h, "tonight", m, "base")
        assert {v.status for _, v in across} == {"skipped"}  # a KVM baseline says nothing about TCG
        same = nt.judge(h, "tonight", m, "tcg-base")
        assert any(v.regression for _, v in same)


def test_baseline_flow_loss_uses_the_one_definition(tmp_path):
    from analysis.baseline.points import _flow

    gen = {"start_ns": 0, "end_ns": 10**9, "packets": 1000, "send_errors": 25, "achieved_bps": 1e6,
           "achieved_pps": 1000.0}  # fmt: skip
    (tmp_path / "gen.json").write_text(json.dumps(gen))  # SYNTHETIC
    (tmp_path / "sink.json").write_text(json.dumps({"packets": 950, "lost": 75, "socket_drops": 10}))
    flow = _flow(tmp_path, {"router": 0, "gen": "gen.json", "sink": "sink.json"}, 1500)
    assert flow["lost"] == 40 and flow["loss_ratio"] == pytest.approx(40 / 1000)  # not 75, not 50


def test_timers_table_of_synthetic_records():
    """SYNTHETIC records of a timer sweep: per mechanism and BFD setting, how often BFD survived,
    the longest blackout survived, the shortest not, and the outage when it went down."""
    from migrate.campaigns.reporting import format_timers, timers_rows

    def rec(mode, bfd, blackout, flaps, outage=None, lower=None, status="completed"):
        return {
            "hv": "kvm", "mode": mode, "accel": "tcg", "bfd": bfd, "status": status, "bfd_flaps": flaps,
            "bgp_flaps": flaps, "vcpu_blackout_s": blackout, "outage_s": outage, "outage_s_lower": lower,
        }  # fmt: skip

    records = [
        rec("precopy", "50x3", 0.020, 0, 0.040),
        rec("precopy", "50x3", 0.030, 0, 0.050),
        rec("stopcopy", "50x3", 0.800, 2, 2.3),
        rec("stopcopy", "50x3", 0.790, 2, 2.9),
        rec("stopcopy", "50x3", 0.810, 2, None, 1.5),
        rec("stopcopy", "300x3", 0.780, 0, 0.800),
        rec("stopcopy", "300x3", 0.950, 2, 2.0),
        rec("stopcopy", "300x3", 0.700, None, status="failed"),
        {"hv": "kvm", "mode": "precopy", "status": "completed", "bfd": None},  # no peers: not in the table
    ]
    header, rows = timers_rows(records)
    by = {(r[0], r[2]): dict(zip(header, r, strict=True)) for r in rows}
    assert list(by) == [("kvm precopy", "50x3"), ("kvm stopcopy", "50x3"), ("kvm stopcopy", "300x3")]
    pre, stop50, stop300 = by[("kvm precopy", "50x3")], by[("kvm stopcopy", "50x3")], by[("kvm stopcopy", "300x3")]
    assert pre["BFD survived"] == "2 of 2" and pre["longest blackout survived [ms]"] == "30"
    assert pre["shortest blackout not survived [ms]"] == "–"
    assert stop50["BFD survived"] == "0 of 3" and stop50["shortest blackout not survived [ms]"] == "790"
    assert stop50["outage when not survived [ms] (median, n)"] == "2600 (n=2, 1 ≥ bound)"  # the bound is apart
    assert stop300["runs"] == 2 and stop300["longest blackout survived [ms]"] == "780"
    assert "detect [ms]" in format_timers(records).splitlines()[0]
    assert timers_rows([records[-1]])[1] == [] and format_timers([records[-1]]) == ""
