"""report.html of a calibration (analysis.present.calibration_report) from real calibration runs:
tests/fixtures/calibration/2026-12-06-kvm-tcg-cut-pause (cuts and pauses of 50 and 200 ms, TCG)
and tests/fixtures/peering/calibrate-pause (pauses with BGP and BFD peers), copied to tmp_path."""

import dataclasses
import shutil
from pathlib import Path

import analysis.metrics.calibration as cm
import analysis.present.calibration_report as cr
import analysis.run
from migrate.cli import calibrate as cli
from migrate.cli.main import build_parser
from tests.unit.test_run_report import _banner, _rows

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
REAL = FIXTURES / "calibration" / "2026-12-06-kvm-tcg-cut-pause"
PEERING = FIXTURES / "peering" / "calibrate-pause"


def _copy(tmp_path: Path, src: Path = REAL) -> Path:
    run_dir = tmp_path / src.name
    shutil.copytree(src, run_dir)
    return run_dir


def test_the_real_calibrations_report_shows_the_verdict_and_every_row(tmp_path):
    page = cr.write_calibration_report(_copy(tmp_path)).read_text()
    assert _banner(page) == ("good", "cut targets met: 4 of 4")
    rows = _rows(page, "calibration")
    assert len(rows) == 8  # (cut, pause) x (packets, counters) x (50, 200 ms)
    cut = next(r for r in rows if r[:3] == ["cut", "packets", "50"])
    assert cut[3:5] == ["3", "3"] and cut[7] == "0.75" and cut[10] == "2.18" and cut[11] == "pass"
    pause = next(r for r in rows if r[:3] == ["pause", "counters", "200"])
    assert pause[7] == "9.48" and pause[10:12] == ["–", "–"]  # a measurement, no target
    events = _rows(page, "events")
    assert len(events) == 24  # 12 events x 2 estimators
    first = ["0", "1", "cut", "200", "packets", "200.209", "0.107", "201.079", "0.870", "2.107", "pass"]
    assert events[0][:11] == first
    assert page.count('src="data:image/png;base64,') == 1
    for text in ("<h3>Parameters (meta.json calibration)</h3>", "QMP stop / cont on R1", "QEMU emulator version",
                 '<h3>Definitions (docs/metrics.md &#34;Calibration&#34;)</h3>'):  # fmt: skip
        assert text in page, text


def test_a_missed_target_is_a_bad_banner_and_a_miss_in_its_rows(tmp_path, monkeypatch):
    """The real run with a packets estimator that dates the outage 2.5 ms late (as
    test_analysis_calibration breaks it): the packets cut rows miss their target."""
    real = cm.packets_downtime

    def late(*a, **kw):
        d = real(*a, **kw)
        return dataclasses.replace(d, downtime_s=None if d.downtime_s is None else d.downtime_s + 0.0025)

    monkeypatch.setattr(cm, "packets_downtime", late)
    page = cr.write_calibration_report(_copy(tmp_path)).read_text()
    assert _banner(page) == ("bad", "cut targets met: 2 of 4")
    verdicts = {(r[0], r[1], r[2]): r[11] for r in _rows(page, "calibration")}
    assert verdicts[("cut", "packets", "50")] == verdicts[("cut", "packets", "200")] == "MISS"
    assert verdicts[("cut", "counters", "50")] == "pass"
    assert '<tr class="failed"><td class="l">cut</td><td class="l">packets</td>' in page


def test_a_calibration_with_peers_shows_its_control_plane_checks(tmp_path):
    """No data-plane records in that run: no estimator rows, the plot absent with its reason and
    the notes saying why; the 8 control-plane checks with their verdicts.  Its meta.json keeps
    only what the control-plane analysis reads (no status): the banner says so."""
    page = cr.write_calibration_report(_copy(tmp_path, PEERING)).read_text()
    assert _banner(page) == ("info", "meta.json records no run status; control-plane checks met: 8 of 8")
    control = _rows(page, "control")
    assert len(control) == 8 and {r[13] for r in control} == {"pass"}
    assert 'id="calibration"' not in page
    assert "absent (no estimator measured any event (see the notes))" in page
    notes = [r[0] for r in _rows(page, "notes")]
    assert "no sink gaps or packet rate: packets estimator not calibrated" in notes


def test_an_analysis_failure_is_a_report_that_says_so(tmp_path, monkeypatch):
    def broken(run_dir):
        raise ValueError("actions.jsonl damaged")

    monkeypatch.setattr(cm, "load_and_calibrate", broken)
    page = cr.write_calibration_report(_copy(tmp_path)).read_text()
    assert _banner(page) == ("bad", "calibration analysis failed: ValueError: actions.jsonl damaged")
    assert 'id="calibration"' not in page and "QMP stop / cont on R1" in page  # the metadata stays


def test_make_calibrate_writes_the_report_and_prints_the_directory_last(tmp_path, monkeypatch, capsys):
    run_dir = _copy(tmp_path)
    monkeypatch.setattr(cli, "run_calibration", lambda spec, results, testbed: run_dir)
    args = build_parser().parse_args(["calibrate", "--results", str(tmp_path)])
    assert cli.run_command(args) == 0
    out = capsys.readouterr().out.splitlines()
    assert any(ln.startswith("  cut targets met: 4 of 4 rows") for ln in out) and out[-1] == str(run_dir)
    assert "cut targets met: 4 of 4" in (run_dir / "report.html").read_text()


def test_a_report_failure_costs_make_calibrate_nothing(tmp_path, monkeypatch, capsys):
    run_dir = _copy(tmp_path)
    monkeypatch.setattr(cli, "run_calibration", lambda spec, results, testbed: run_dir)

    def broken(*_a, **_kw):
        raise OSError("disk full")

    monkeypatch.setattr(cr, "write_report", broken)
    assert cli.run_command(build_parser().parse_args(["calibrate"])) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-2] == "(report failed: OSError: disk full; the tables are in calibration.csv)"
    assert out[-1] == str(run_dir) and not (run_dir / "report.html").exists()


def test_vrmig_analyse_of_a_calibration_writes_the_calibration_report(tmp_path, monkeypatch):
    run_dir = _copy(tmp_path)
    monkeypatch.setattr(analysis.run, "plot_run", lambda path, plot: None)
    analysis.run.analyse_and_write(run_dir)
    page = (run_dir / "report.html").read_text()
    assert "<title>vrmig calibration" in page and _banner(page) == ("good", "cut targets met: 4 of 4")
