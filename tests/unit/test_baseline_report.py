"""report.html of a baseline (analysis.present.baseline_report) from the real baseline points of
tests/fixtures/baseline (HV=kvm under TCG, 64 B at 50 Mbit/s; the router container, 1500 B at
10 Mbit/s), laid out as make baseline writes them and analysed by analysis.baseline.summary."""

import shutil
from pathlib import Path

import pytest

import analysis.baseline.plot
import analysis.present.baseline_report as br
from analysis.baseline.summary import analyse_baseline
from migrate.core.rundir import read_summary
from tests.unit.test_run_report import _banner, _rows

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "baseline"


@pytest.fixture
def baseline(tmp_path: Path) -> Path:
    run_dir = tmp_path / "20261123T180437.595Z-baseline-none+criu+kvm"
    shutil.copytree(FIXTURES / "kvm_tcg_64B_50M", run_dir / "points" / "kvm-virtio-r1-none" / "sweep-50M-r1")
    shutil.copytree(FIXTURES / "criu_container_1500B_10M", run_dir / "points" / "criu-r1-none" / "sweep-10M-r1")
    return run_dir


def test_the_baselines_report_shows_its_forwarding_figures_and_plots(baseline):
    analyse_baseline(baseline)
    page = (baseline / "report.html").read_text()
    assert _banner(page) == ("info", "2 point(s), 0 failed; meta.json absent: the run's status is unknown")
    configs = {r[0]: r for r in _rows(page, "configs")}
    assert set(configs) == {"kvm/virtio", "criu (container)"}
    kvm = configs["kvm/virtio"]
    assert kvm[1:7] == ["4", "64", "1", "none", "10.2 (n=1)", "50"]
    assert kvm[7] == "absent (loss above 0.1 % at the lowest rate)"  # 80 % lost at 50 Mbit/s: not 0
    assert kvm[8] == "not searched (SEARCH=ndr)"
    assert kvm[9].startswith("absent (no HV=none run with 1 router")
    assert configs["criu (container)"][5:8] == ["10.0 (n=1)", "10", "10"]
    points = {r[0]: r for r in _rows(page, "points")}
    assert points["kvm/virtio"][3:9] == ["50", "1", "49.9 (n=1)", "10.2 (n=1)", "19.90 (n=1)", "79.587 (n=1)"]
    assert points["criu (container)"][12] == "–"  # no hypervisor process: not measured, not 0
    assert page.count('src="data:image/png;base64,') == 3
    for name in ("offered_vs_forwarded.png", "max_forwarded.png", "routers.png"):
        assert f"file {name}" in page
    assert "<h3>Definitions (docs/campaigns.md &#34;`make baseline`&#34;)</h3>" in page
    assert 'meta.json</th><td class="l">absent: the directory has no readable meta.json' in page


def test_the_metadata_and_status_of_meta_json_synthetic(baseline):
    """SYNTHETIC meta.json (a completed run's status, spec and tools) beside the real points."""
    from migrate.core.rundir import write_meta

    meta = {"format_version": 1, "kind": "baseline", "status": "completed", "failure": None, "accel": "tcg",
            "created_utc": "2026-11-23T18:04:37+00:00", "spec": {"hvs": ["criu", "kvm"], "reps": 1},
            "tools": {"vrgen": "synthetic-1"}, "configs": {"kvm-virtio-r1-none": {"status": "completed"}}}  # fmt: skip
    write_meta(baseline, meta)
    analyse_baseline(baseline)
    page = (baseline / "report.html").read_text()
    assert _banner(page) == ("good", "completed: 2 point(s), 0 failed")
    for text in ("<h3>Parameters (meta.json spec)</h3>", "synthetic-1", "kvm-virtio-r1-none"):
        assert text in page, text
    write_meta(baseline, {**meta, "status": "interrupted", "failure": "interrupted by SIGINT"})
    analyse_baseline(baseline)
    page = (baseline / "report.html").read_text()
    assert _banner(page) == ("bad", "interrupted: interrupted by SIGINT; 2 point(s), 0 failed")


def test_plots_that_failed_are_absent_with_the_reason(baseline, monkeypatch):
    def broken(*_a, **_kw):
        raise RuntimeError("no fonts")

    monkeypatch.setattr(analysis.baseline.plot, "plot_all", broken)
    analyse_baseline(baseline)
    page = (baseline / "report.html").read_text()
    assert "data:image/png" not in page
    assert page.count("absent (plotting failed: no fonts)") == 3
    assert len(_rows(page, "configs")) == 2  # the figures are still there


def test_a_report_failure_never_costs_the_summary(baseline, monkeypatch):
    (baseline / "report.html").write_text("stale")

    def broken(*_a, **_kw):
        raise ValueError("template broken")

    monkeypatch.setattr(br, "build_baseline_report", broken)
    summary = analyse_baseline(baseline)
    assert read_summary(baseline) == summary and len(summary["configs"]) == 2
    assert not (baseline / "report.html").exists()


def test_a_statistic_without_a_mean_is_not_zero():
    assert br.stat_cell(None) == br.stat_cell({"n": 0, "mean": None}) == "–"
    assert br.stat_cell({"n": 3, "mean": 2e6, "ci95": 5e5}) == "2.0 ± 0.5 (n=3)"
