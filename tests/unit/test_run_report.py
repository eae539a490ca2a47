"""report.html of one migration run (analysis.present.run_report) from the real run directories of
tests/fixtures/rundir (meta.json and summary.json of a completed and of a failed `make migrate`),
copied to tmp_path first."""

import html
import json
import re
import shutil
from pathlib import Path

import pytest

import analysis.present.run_report as rr
import analysis.run
from migrate.core.rundir import read_summary

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
COMPLETED = "kvm-precopy-100M-1500"
FAILED = "kvm-precopy-100M-1500-dst-qemu-dies"


def _copy(tmp_path: Path, name: str) -> Path:
    run_dir = tmp_path / name
    shutil.copytree(FIXTURES / "rundir" / name, run_dir)
    return run_dir


def _rows(page: str, table_id: str) -> list[list[str]]:
    """The text of every body row of the table with ``table_id``."""
    m = re.search(rf'<table id="{table_id}">(.*?)</table>', page, re.S)
    assert m, f"no table {table_id}"
    body = m.group(1).split("<tbody>", 1)[1]
    return [
        [html.unescape(re.sub(r"<[^>]+>", "", c)).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]
        for row in re.findall(r"<tr[^>]*>(.*?)</tr>", body, re.S)
    ]


def _row(page: str, table_id: str, label: str) -> list[str]:
    found = [r for r in _rows(page, table_id) if r and r[0].startswith(label)]
    assert len(found) == 1, (label, _rows(page, table_id))
    return found[0]


def _banner(page: str) -> tuple[str, str]:
    m = re.search(r'<p class="banner (\w+)">(.*?)</p>', page, re.S)
    assert m, "no banner"
    return m.group(1), html.unescape(m.group(2))


def test_the_completed_runs_report_names_its_headline_figures(tmp_path):
    run_dir = _copy(tmp_path, COMPLETED)
    page = rr.write_run_report(run_dir).read_text()
    assert "<title>vrmig run kvm-precopy-100M-1500: kvm precopy 100 Mbit/s</title>" in page
    assert _banner(page)[0] == "good"
    assert _row(page, "headline", "downtime: counters")[1] == "69.96 ms"
    assert _row(page, "headline", "downtime: packets")[1] == "71.71 ms"
    assert _row(page, "headline", "downtime: QEMU")[1] == "21.00 ms"
    assert _row(page, "headline", "data-plane outage")[1] == "71.71 ms"
    assert _row(page, "headline", "migration duration: link")[1] == "0.930 s"
    assert _row(page, "headline", "migration duration: QEMU")[1] == "0.926 s"
    assert _row(page, "headline", "migration volume: link")[1] == "136.5 MB"
    assert _row(page, "headline", "cross-traffic lost")[1] == "430 packets"
    # the phases and the timeline of the outage, the run's metadata and docs/metrics.md
    assert _row(page, "anatomy", "vcpu blackout")[2] == "51.18"
    assert [r[0] for r in _rows(page, "timeline")][:3] == ["migration start", "last packet", "vCPU stop"]
    assert _row(page, "notes", "none") == ["none"]
    for text in ("<h3>Parameters (meta.json scenario)</h3>", "QEMU emulator version 10.0.2", "FRRouting",
                 "AMD EPYC", "<h2>Definitions</h2>", "<h3>Outage anatomy</h3>"):  # fmt: skip
        assert text in page, text


def test_a_censored_figure_is_shown_as_its_bound_with_its_reason(tmp_path):
    """The completed run's dirty rate is below QEMU's resolution: summary.json has null and an
    upper bound of 1 MB/s in its qualifier; the report shows '≤ 1 MB/s', never 0."""
    page = rr.write_run_report(_copy(tmp_path, COMPLETED)).read_text()
    value, why = _row(page, "headline", "guest dirty rate")[1:]
    assert value == "≤ 1 MB/s"
    assert "below QEMU's dirty-rate resolution of 1 MB/s" in why


def test_a_lower_bound_is_shown_as_one_synthetic():
    """SYNTHETIC: the completed fixture's summary with its counters downtime replaced by a lower
    bound, as summary.json marks an outage that lasted past the analysed span."""
    s = json.loads((FIXTURES / "rundir" / COMPLETED / "summary.json").read_text())
    s["downtime_s"]["counters"] = None
    s["qualifiers"]["downtime_s.counters"] = {"state": "censored", "reasons": ["clipped_end"],
                                              "text": "the outage lasted past the analysed span",
                                              "lower": 0.0123, "upper": None}  # fmt: skip
    value, why = rr.figure_cells(s, "downtime_s.counters", 1e3, ".1f", "ms")
    assert (value, why) == ("≥ 12.3 ms", "a lower bound: the outage lasted past the analysed span")


def test_a_packet_count_bound_is_shown_whole_synthetic():
    """SYNTHETIC: a count's lower bound as summary.json writes it (a float) under an integer format."""
    s = {"cross_traffic": {"outage_lost_packets": None},
         "qualifiers": {"cross_traffic.outage_lost_packets": {"state": "censored", "reasons": ["clipped_end"],
                                                              "text": "past the span", "lower": 1351.0}}}  # fmt: skip
    value, _ = rr.figure_cells(s, "cross_traffic.outage_lost_packets", 1.0, "d", "packets")
    assert value == "≥ 1351 packets"


def test_the_failed_run_gets_a_bad_banner_and_its_absent_figures_their_reasons(tmp_path):
    page = rr.write_run_report(_copy(tmp_path, FAILED)).read_text()
    kind, text = _banner(page)
    assert kind == "bad"
    assert text == ("failed (failure class migration): destination QEMU exited during the migration (exit status -9)")
    assert _row(page, "headline", "downtime: QEMU")[1:] == ["absent", "the migration did not complete (status active)"]
    assert _row(page, "headline", "migration duration: QEMU")[1] == "absent"
    assert _row(page, "headline", "data-plane outage")[1:] == ["absent", "no resume: no QMP RESUME (R2) recorded"]
    assert _row(page, "headline", "downtime: counters")[1] == "20.00 ms"  # what was measured stays shown
    assert _row(page, "timeline", "resume")[1] == "absent"
    assert "source_running: True" in page  # meta.json recovery
    assert "absent (no migration.png in the run directory)" in page  # the fixture keeps no plot


def test_a_figure_without_value_or_qualifier_is_absent_not_zero():
    value, why = rr.figure_cells({"downtime_s": {"counters": None}}, "downtime_s.counters", 1e3, ".2f", "ms")
    assert (value, why) == ("absent", "summary.json gives no reason (see the notes of the analysis)")
    value, why = rr.figure_cells({}, "anatomy.phases.outage.seconds", 1e3, ".2f", "ms")
    assert (value, why) == ("absent", "no outage anatomy in summary.json (it needs a migration window)")


def test_control_plane_table_of_a_peering_run(tmp_path):
    """The completed fixture's summary with the real ``control_plane`` record of a PEERING=bgp,bfd
    run (tests/fixtures/anatomy): survived, the longest silence against the limit, routes."""
    run_dir = _copy(tmp_path, COMPLETED)
    s = read_summary(run_dir)
    s["control_plane"] = json.loads((FIXTURES / "anatomy" / "kvm-precopy-bgp-bfd.json").read_text())["control_plane"]
    page = rr.write_run_report(run_dir, s).read_text()
    assert _row(page, "control", "BGP")[:8] == ["BGP", "yes", "0", "3027", "A", "9000", "5973", "kept"]
    assert _row(page, "control", "BFD")[:7] == ["BFD", "yes", "0", "122", "B", "150", "28"]
    plain = rr.write_run_report(_copy(tmp_path / "plain", COMPLETED)).read_text()
    assert 'id="control"' not in plain


def test_analyse_and_write_writes_the_report_with_the_run_plot(tmp_path):
    """The hook: a re-analysis of the fixture (its raw traces are not kept) writes summary.json,
    the plot and report.html, which embeds that plot as a PNG."""
    run_dir = _copy(tmp_path, COMPLETED)
    summary = analysis.run.analyse_and_write(run_dir)
    page = (run_dir / rr.REPORT_NAME).read_text()
    assert page.count('src="data:image/png;base64,') == 1
    assert "migration.png" in page and not any(n.startswith("report failed") for n in summary.notes)
    # the re-analysis found no traces: every figure absent, with the reason
    assert _row(page, "headline", "downtime: counters")[1:] == [
        "absent",
        "no migration window (no migrate action recorded)",
    ]
    assert _row(page, "notes", "counters.tsv missing") == ["counters.tsv missing"]


def test_a_failed_plot_is_absent_from_the_report_not_a_stale_png(tmp_path, monkeypatch):
    run_dir = _copy(tmp_path, COMPLETED)
    (run_dir / "migration.png").write_bytes(b"stale, of an earlier analysis")

    def broken(path, plot):
        raise RuntimeError("no display")

    monkeypatch.setattr(analysis.run, "plot_run", broken)
    analysis.run.analyse_and_write(run_dir)
    page = (run_dir / rr.REPORT_NAME).read_text()
    assert "data:image/png" not in page
    assert "absent (plot failed: RuntimeError: no display)" in page


def test_a_report_failure_never_costs_the_summary(tmp_path, monkeypatch):
    run_dir = _copy(tmp_path, COMPLETED)
    (run_dir / rr.REPORT_NAME).write_text("stale")

    def broken(*_a, **_kw):
        raise ValueError("template broken")

    monkeypatch.setattr(analysis.run, "plot_run", lambda path, plot: None)
    monkeypatch.setattr(rr, "build_run_report", broken)
    summary = analysis.run.analyse_and_write(run_dir)
    assert summary.notes[-1] == "report failed: ValueError: template broken"
    assert read_summary(run_dir)["details"]["notes"][-1] == summary.notes[-1]
    assert not (run_dir / rr.REPORT_NAME).exists()  # a stale report would show other figures


@pytest.mark.parametrize("heading", ["Calibration", "Outage anatomy"])
def test_definitions_are_sections_of_docs_metrics_md(heading):
    title, text = rr.definitions("metrics.md", heading)
    assert title == f'Definitions (docs/metrics.md "{heading}")'
    assert text.startswith(f"## {heading}\n") and "\n## " not in text
    assert rr.definitions("no-such-page.md")[1] == "docs/no-such-page.md was not found."
