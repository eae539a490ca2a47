"""metrics.prom (analysis.present.openmetrics): OpenMetrics text of one run, read back with
prometheus_client's OpenMetrics parser and its classic text parser (node_exporter's textfile
collector reads the classic format); absent figures have no sample; the file beside summary.json;
``vrmig run --metrics FILE``.  Summaries built here are SYNTHETIC; tests/fixtures/rundir holds
two real runs' files."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
from prometheus_client.parser import text_string_to_metric_families as parse_classic

import analysis.run
from analysis.present import openmetrics as om
from migrate.cli import main as cli
from migrate.core.errors import ConfigError
from migrate.core.rundir import METRICS_PROM, read_summary

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "rundir"

#: a SYNTHETIC meta.json (the keys the export reads)
SYNTHETIC_META = {
    "kind": "migrate",
    "status": "completed",
    "failure": None,
    "failure_class": None,
    "accel": "tcg",
    "testbed": {"prefix": "vm0"},
    "scenario": {"hv": "kvm", "mode": "precopy", "rate_bps": 100_000_000, "frame_bytes": 1500,
                 "router": "frr", "driver": "qmp"},
}  # fmt: skip
#: a SYNTHETIC summary.json: one null figure with its qualifier, one bound
SYNTHETIC_SUMMARY = {
    "status": "completed",
    "failure": None,
    "failure_class": None,
    "hv": "kvm",
    "mode": "precopy",
    "accel": "tcg",
    "rate_bps": 100_000_000,
    "frame_bytes": 1500,
    "downtime_s": {"counters": 0.07, "packets": 0.0717, "hypervisor": None},
    "duration_s": {"link": 0.93, "hypervisor": 0.926},
    "volume_bytes": {"link": 136_479_485, "hypervisor": 135_400_013},
    "dirty_rate": {"requested_mb_s": None, "measured_mb_s": None, "why_absent": "below_rate_resolution"},
    "qualifiers": {
        "downtime_s.hypervisor": {
            "state": "absent",
            "reasons": ["not_completed"],
            "text": "no end",
            "lower": None,
            "upper": None,
        },
        "dirty_rate.measured_mb_s": {
            "state": "censored",
            "reasons": ["below_rate_resolution"],
            "text": "< 1",
            "lower": None,
            "upper": 1.0,
        },
    },
    "details": {"run_status": "completed", "notes": []},
}


def families(text: str) -> dict[str, object]:
    """The OpenMetrics parser's families by name (it raises on anything invalid)."""
    return {f.name: f for f in parse_openmetrics(text)}


def samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    """(labels, value) of every sample called ``name``."""
    return [(dict(s.labels), s.value) for f in parse_openmetrics(text) for s in f.samples if s.name == name]


def by(text: str, name: str, label: str) -> dict[str, float]:
    """``name``'s values by one label's value."""
    return {labels[label]: value for labels, value in samples(text, name)}


def synthetic(meta: dict | None = None, summary: dict | None = None, run_id: str | None = "run-1") -> str:
    m = copy.deepcopy(SYNTHETIC_META)
    m.update(meta or {})
    s = copy.deepcopy(SYNTHETIC_SUMMARY)
    s.update(summary or {})
    return om.run_metrics(m, s, run_id)


# -- the text ------------------------------------------------------------------------------------


def test_names_types_units_and_values_match_the_summary():
    text = synthetic()
    fams = families(text)
    assert fams["vrmig_migration_data_bytes"].type == "counter"
    assert fams["vrmig_migration_data_bytes"].unit == "bytes"
    assert fams["vrmig_migration_downtime_seconds"].type == "gauge"
    assert fams["vrmig_migration_duration_seconds"].unit == "seconds"
    assert fams["vrmig_migration_succeeded"].type == fams["vrmig_migration_failed"].type == "counter"
    assert by(text, "vrmig_migration_data_bytes_total", "source") == {"link": 136_479_485, "hypervisor": 135_400_013}
    assert by(text, "vrmig_migration_downtime_seconds", "estimator") == {"counters": 0.07, "packets": 0.0717}
    assert by(text, "vrmig_migration_duration_seconds", "source") == {"link": 0.93, "hypervisor": 0.926}
    assert [v for _, v in samples(text, "vrmig_migration_succeeded_total")] == [1]
    assert [v for _, v in samples(text, "vrmig_migration_failed_total")] == [0]
    assert text.endswith("\n# EOF\n") and text.count("# EOF") == 1


def test_every_sample_carries_the_runs_identity():
    text = synthetic()
    want = {"run_id": "run-1", "hv": "kvm", "driver": "qmp", "mode": "precopy", "router": "frr",
            "rate_bps": "100000000", "frame_bytes": "1500", "accel": "tcg", "testbed": "embedded"}  # fmt: skip
    all_samples = [s for f in parse_openmetrics(text) for s in f.samples]
    assert len(all_samples) >= 10
    for s in all_samples:
        assert {k: s.labels[k] for k in om.IDENTITY} == want, s


def test_identity_of_a_lab_run_and_of_another_hypervisor():
    meta = {"testbed": {"prefix": "vm0", "inventory": "lab.toml"}, "scenario": {"hv": "xen", "driver": "qmp"}}
    labels, _ = samples(synthetic(meta=meta, run_id=None), "vrmig_run_info")[0]
    assert labels["testbed"] == "lab"
    assert labels["hv"] == "xen" and labels["driver"] == ""  # DRIVER is HV=kvm's
    assert labels["run_id"] == "" and labels["mode"] == "precopy"  # from the summary, as the scenario lacks it


def test_a_rate_of_zero_is_a_label_not_a_missing_one():
    labels, _ = samples(synthetic(meta={"scenario": {"hv": "kvm", "rate_bps": 0}}), "vrmig_run_info")[0]
    assert labels["rate_bps"] == "0"


def test_a_null_figure_has_no_sample_and_is_named_absent_with_its_reasons():
    text = synthetic()
    assert "hypervisor" not in by(text, "vrmig_migration_downtime_seconds", "estimator")
    assert "vrmig_dirty_rate_bytes_per_second" not in families(text)  # null (censored): no family at all
    absent = {
        labels["figure"]: (labels["state"], labels["reasons"], v) for labels, v in samples(text, "vrmig_figure_absent")
    }
    assert absent == {
        "downtime_s.hypervisor": ("absent", "not_completed", 1),
        "dirty_rate.measured_mb_s": ("censored", "below_rate_resolution", 1),
    }


def test_a_figure_of_zero_is_written_as_zero():
    text = synthetic(summary={"downtime_s": {"counters": 0.0, "packets": 0, "hypervisor": 0.0}, "qualifiers": {}})
    assert by(text, "vrmig_migration_downtime_seconds", "estimator") == {"counters": 0, "packets": 0, "hypervisor": 0}
    assert not [labels for labels, _ in samples(text, "vrmig_figure_absent") if labels["figure"].startswith("downtime")]


def test_a_bound_or_a_non_number_is_never_a_point():
    summary = {"duration_s": {"link": {"lower": 1.5, "upper": None}, "hypervisor": "fast"},
               "volume_bytes": {"link": -3, "hypervisor": float("nan")}}  # fmt: skip
    text = synthetic(summary=summary)
    assert "vrmig_migration_duration_seconds" not in families(text)
    assert "vrmig_migration_data_bytes" not in families(text)
    absent = {labels["figure"]: labels["state"] for labels, _ in samples(text, "vrmig_figure_absent")}
    assert absent["duration_s.link"] == "censored"
    assert {absent[k] for k in ("duration_s.hypervisor", "volume_bytes.link", "volume_bytes.hypervisor")} == {"absent"}


def test_the_dirty_rate_is_in_bytes_per_second():
    text = synthetic(summary={"dirty_rate": {"measured_mb_s": 2.5}, "qualifiers": {}})
    assert [v for _, v in samples(text, "vrmig_dirty_rate_bytes_per_second")] == [2.5 * 2**20]
    assert families(text)["vrmig_dirty_rate_bytes_per_second"].unit == "bytes_per_second"


@pytest.mark.parametrize(
    ("status", "failure_class", "outcome"),
    [
        ("completed", None, (1, 0)),
        ("failed", "migration", (0, 1)),
        ("failed", "post-migration", (0, 1)),
        ("failed", None, (0, 1)),  # results older than the failure classes
        ("failed", "setup", (0, 0)),  # no migration was attempted
        ("interrupted", "interrupted", (0, 0)),
        ("running", None, None),  # not known: no sample
    ],
)
def test_succeeded_and_failed_count_migration_attempts(status, failure_class, outcome):
    meta = {"status": status, "failure_class": failure_class, "failure": None if status == "completed" else "x"}
    summary = {"status": "completed" if status == "completed" else "failed", "failure_class": failure_class}
    text = synthetic(meta=meta, summary=summary)
    got = [v for _, v in samples(text, "vrmig_migration_succeeded_total")]
    got += [v for _, v in samples(text, "vrmig_migration_failed_total")]
    assert got == ([] if outcome is None else list(outcome))
    info, _ = samples(text, "vrmig_run_info")[0]
    assert (info["status"], info["failure_class"]) == (status, failure_class or "")


def test_without_meta_json_the_summarys_copy_of_the_status_is_used():
    summary = {**SYNTHETIC_SUMMARY, "status": "failed", "failure_class": "migration",
               "details": {"run_status": "failed"}}  # fmt: skip
    text = om.run_metrics({}, summary)
    assert [v for _, v in samples(text, "vrmig_migration_failed_total")] == [1]
    summary["details"] = {"run_status": None}  # meta.json was missing when it was analysed
    assert not samples(om.run_metrics({}, summary), "vrmig_migration_failed_total")


def test_label_values_with_quotes_backslashes_and_newlines_are_escaped():
    nasty = 'frr "10.3" \\ back\nslash'
    text = synthetic(meta={"scenario": {**SYNTHETIC_META["scenario"], "router": nasty}})
    assert 'router="frr \\"10.3\\" \\\\ back\\nslash"' in text
    assert all(labels["router"] == nasty for labels, _ in samples(text, "vrmig_migration_downtime_seconds"))
    classic = [s for f in parse_classic(text) for s in f.samples if s.name == "vrmig_run_info"]
    assert classic[0].labels["router"] == nasty
    assert om.escape_label_value('a"b\\c\nd') == 'a\\"b\\\\c\\nd'


def test_the_classic_parser_reads_the_same_samples():
    """node_exporter's textfile collector parses the classic format: gauges keep their type, the
    counters' _total samples arrive untyped with the same labels and values."""
    text = synthetic()
    openm = {(s.name, tuple(sorted(s.labels.items()))): s.value for f in parse_openmetrics(text) for s in f.samples}
    classic_fams = list(parse_classic(text))
    classic = {(s.name, tuple(sorted(s.labels.items()))): s.value for f in classic_fams for s in f.samples}
    assert classic == openm
    types = {f.name: f.type for f in classic_fams if f.samples}
    assert types["vrmig_migration_downtime_seconds"] == "gauge"
    assert types["vrmig_migration_failed_total"] == "unknown"


def test_help_texts_need_no_escapes_and_no_sample_has_a_timestamp():
    for family in om.FAMILIES:
        assert not set(family.help) & {"\\", '"', "\n"}, family.name
    text = synthetic()
    for f in parse_openmetrics(text):
        assert all(s.timestamp is None for s in f.samples)


def test_an_empty_summary_and_meta_still_give_valid_text():
    text = om.run_metrics({}, {})
    assert set(families(text)) == {"vrmig_run_info"}


@pytest.mark.parametrize("name", ["kvm-precopy-100M-1500", "kvm-precopy-100M-1500-dst-qemu-dies"])
def test_real_run_directories(name):
    """tests/fixtures/rundir: a completed and a failed real run (their README.md)."""
    meta = json.loads((FIXTURES / name / "meta.json").read_text())
    summary = json.loads((FIXTURES / name / "summary.json").read_text())
    text = om.run_metrics(meta, summary, name)
    parse_classic(text)
    for group, family, label in (("downtime_s", "vrmig_migration_downtime_seconds", "estimator"),
                                 ("duration_s", "vrmig_migration_duration_seconds", "source"),
                                 ("volume_bytes", "vrmig_migration_data_bytes_total", "source")):  # fmt: skip
        want = {k: v for k, v in summary[group].items() if v is not None}
        assert by(text, family, label) == want
    absent = {labels["figure"] for labels, _ in samples(text, "vrmig_figure_absent")}
    nulls = {
        f"{g}.{k}" for g in ("downtime_s", "duration_s", "volume_bytes") for k, v in summary[g].items() if v is None
    }
    assert nulls <= absent
    failed = meta["status"] == "failed"
    assert [v for _, v in samples(text, "vrmig_migration_failed_total")] == [int(failed)]
    assert [v for _, v in samples(text, "vrmig_migration_succeeded_total")] == [int(not failed)]
    assert {labels["run_id"] for labels, _ in samples(text, "vrmig_run_info")} == {name}


# -- metrics.prom beside summary.json ---------------------------------------------------------------


def _run_dir(tmp_path: Path, fixture: str = "kvm-precopy-100M-1500-dst-qemu-dies") -> Path:
    """A run directory holding a real run's meta.json (no raw traces: the figures are null)."""
    run_dir = tmp_path / "20261202T145259.216Z-kvm-precopy-100M-1500"
    run_dir.mkdir()
    (run_dir / "meta.json").write_text((FIXTURES / fixture / "meta.json").read_text())
    return run_dir


def test_analyse_and_write_writes_metrics_from_the_summary_it_made(tmp_path, monkeypatch):
    monkeypatch.setattr(analysis.run, "plot_run", lambda path, plot: None)
    run_dir = _run_dir(tmp_path)
    analysis.run.analyse_and_write(run_dir)
    text = (run_dir / METRICS_PROM).read_text()
    assert text == om.run_metrics(json.loads((run_dir / "meta.json").read_text()), read_summary(run_dir), run_dir.name)
    assert [v for _, v in samples(text, "vrmig_migration_failed_total")] == [1]
    assert not list(run_dir.glob(".*tmp*"))


def test_a_metrics_failure_never_costs_the_summary(tmp_path, monkeypatch):
    monkeypatch.setattr(analysis.run, "plot_run", lambda path, plot: None)
    run_dir = _run_dir(tmp_path)
    (run_dir / METRICS_PROM).write_text("# stale\n")

    def broken(*_a, **_k):
        raise RuntimeError("synthetic failure")

    monkeypatch.setattr(analysis.run, "run_metrics", broken)
    summary = analysis.run.analyse_and_write(run_dir)
    on_disk = read_summary(run_dir)
    assert on_disk == summary.to_dict()
    assert "metrics failed: RuntimeError: synthetic failure" in on_disk["details"]["notes"]
    assert not (run_dir / METRICS_PROM).exists()  # the stale file does not outlive its summary


# -- vrmig run --metrics FILE ---------------------------------------------------------------------


def test_the_metrics_flag_is_runs_alone_and_its_make_variable_is_metrics():
    from migrate.cli import make

    assert make.table("migrate")["METRICS"].option_strings == ["--metrics"]
    for target in ("sweep", "ab"):
        assert "METRICS" not in make.table(target)


@pytest.mark.parametrize(
    ("make_path", "message"),
    [
        (lambda d: d / "missing" / "m.prom", "does not exist: create it"),
        (lambda d: d, "is a directory: give a file name"),
        (lambda d: Path("/dev/null"), "is not a regular file"),
        (lambda d: d / "file" / "m.prom", "is not a directory"),
    ],
)
def test_an_unwritable_metrics_file_is_refused(tmp_path, make_path, message):
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match=message) as err:
        cli.check_metrics_file(make_path(tmp_path))
    assert str(err.value).startswith("METRICS=") and "\n" not in str(err.value)


def test_a_directory_without_write_permission_is_refused(tmp_path, monkeypatch):
    """As root every directory is writable, so the permission is what os.access says here."""
    monkeypatch.setattr(cli.os, "access", lambda path, mode: Path(path) != tmp_path)
    with pytest.raises(ConfigError, match="is not writable: choose a directory you can write to"):
        cli.check_metrics_file(tmp_path / "m.prom")
    cli.check_metrics_file(tmp_path / "sub" / ".." / ".." / "m.prom")  # another directory: accepted


def test_a_writable_path_is_accepted(tmp_path):
    cli.check_metrics_file(tmp_path / "m.prom")
    (tmp_path / "m.prom").write_text("old")
    cli.check_metrics_file(tmp_path / "m.prom")  # an existing file is replaced


def _fake_run(run_dir: Path, monkeypatch) -> None:
    import migrate.experiment.run as runmod

    monkeypatch.setattr(runmod, "run", lambda *a, **k: run_dir)
    monkeypatch.setattr(cli, "_print_summary", lambda d: None)


def test_run_copies_metrics_prom_to_the_file(tmp_path, monkeypatch, capsys):
    run_dir = _run_dir(tmp_path, "kvm-precopy-100M-1500")
    (run_dir / METRICS_PROM).write_text("# EOF\n")
    _fake_run(run_dir, monkeypatch)
    target = tmp_path / "out.prom"
    rc = cli.main(["run", "--metrics", str(target), "--results", str(tmp_path / "results")])
    assert rc == 0
    assert target.read_text() == "# EOF\n"
    assert capsys.readouterr().out.splitlines()[-1] == str(run_dir)  # the results directory stays last


def test_run_without_metrics_prom_writes_the_text_of_meta_and_summary(tmp_path, monkeypatch):
    run_dir = _run_dir(tmp_path)  # failed, and no summary.json: the outcome is still known
    _fake_run(run_dir, monkeypatch)
    target = tmp_path / "out.prom"
    rc = cli.main(["run", "--metrics", str(target), "--results", str(tmp_path / "results")])
    assert rc == 4
    text = target.read_text()
    assert [v for _, v in samples(text, "vrmig_migration_failed_total")] == [1]


def test_a_metrics_file_that_cannot_be_written_after_the_run_fails_the_command(tmp_path, monkeypatch):
    run_dir = _run_dir(tmp_path, "kvm-precopy-100M-1500")
    _fake_run(run_dir, monkeypatch)

    def full(*_a, **_k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(cli, "write_text", full)
    target = tmp_path / "out.prom"
    assert not cli._write_metrics_file(run_dir, target)
    rc = cli.main(["run", "--metrics", str(target), "--results", str(tmp_path / "results")])
    assert rc == 1
