"""Sweep reports from a SYNTHETIC fixture sweep: runs.csv, points.csv, plots and a self-contained
report.html (parsed here; tests/integration/test_report_chromium.py opens it in a real browser)."""

import base64
import csv
import json
from html.parser import HTMLParser

import pytest

from analysis.present.html import Plot, Report, Table, markdown_to_html, render
from analysis.present.sweep_plot import DISTRIBUTION_METRICS
from migrate.campaigns.compare import compare, report
from migrate.campaigns.reporting import write_sweep_outputs
from migrate.core.errors import ConfigError
from tests.fixtures.analysis.synthetic_sweep import write_sweep

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


class _Doc(HTMLParser):
    def __init__(self):
        super().__init__()
        self.imgs, self.tables, self.refs, self.h2 = [], [], [], []
        self._in_h2 = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "img":
            self.imgs.append(a)
        if tag == "table":
            self.tables.append(a.get("id"))
        for k in ("src", "href"):
            if k in a:
                self.refs.append(a[k])
        if tag in ("script", "link", "iframe", "object"):
            self.refs.append(f"<{tag}>")
        self._in_h2 = tag == "h2"

    def handle_data(self, data):
        if self._in_h2:
            self.h2.append(data)
            self._in_h2 = False


def parse(html_text):
    doc = _Doc()
    doc.feed(html_text)
    return doc


# the 4 figures of means and, per metric of DISTRIBUTION_METRICS, its CDF and box plot
N_PLOTS = 4 + 2 * len(DISTRIBUTION_METRICS)


def assert_self_contained_report(path, n_plots=N_PLOTS):
    doc = parse(path.read_text())
    assert len(doc.imgs) == n_plots
    for img in doc.imgs:
        assert img["src"].startswith("data:image/png;base64,")
        assert base64.b64decode(img["src"].split(",", 1)[1])[:8] == PNG_MAGIC
    assert all(r.startswith("data:") for r in doc.refs), [r for r in doc.refs if not r.startswith("data:")]
    assert {"points", "runs"} <= set(doc.tables)
    assert {"Plots", "Grid points", "Metadata", "Definitions"} <= set(doc.h2)
    return doc


def test_sweep_report_from_fixture(tmp_path):
    sweep = write_sweep(tmp_path)
    before = {p: p.read_bytes() for p in (sweep / "runs").rglob("*") if p.is_file()}
    out = write_sweep_outputs(sweep)
    # nothing inside the run directories changed: reports only read the raw data
    assert {p: p.read_bytes() for p in (sweep / "runs").rglob("*") if p.is_file()} == before
    rows = list(csv.DictReader((sweep / "runs.csv").open()))
    assert [r["run_id"] for r in rows] == ["100M-1500-r01", "100M-1500-r02", "200M-1500-r01", "200M-1500-r02"]
    assert [r["status"] for r in rows] == ["completed", "completed", "completed", "failed"]
    assert float(rows[0]["downtime_counters_s"]) == pytest.approx(0.170)
    assert rows[3]["failure"] == "SYNTHETIC migration failure"
    points = list(csv.DictReader((sweep / "points.csv").open()))
    assert [(p["rate_bps"], p["n_runs"], p["n_failed"], p["failure_rate"]) for p in points] == [
        ("100000000", "2", "0", "0.0"),
        ("200000000", "2", "1", "0.5"),
    ]
    assert float(points[0]["downtime_packets_s_mean"]) == pytest.approx(0.17016)
    assert len(out.points) == 2
    for name in ("fig3a_downtime.png", "fig3b_volume_duration.png", "rtt_increase.png", "forwarded.png"):
        assert (sweep / name).read_bytes()[:8] == PNG_MAGIC
    for metric, _, _ in DISTRIBUTION_METRICS:
        for kind in ("cdf", "box"):
            assert (sweep / f"sweep-{metric}-{kind}.png").read_bytes()[:8] == PNG_MAGIC
            assert b"<svg" in (sweep / f"sweep-{metric}-{kind}.svg").read_bytes()[:2000]
            assert (sweep / f"sweep-{metric}-{kind}.pdf").read_bytes()[:5] == b"%PDF-"
    html_text = (sweep / "report.html").read_text()
    doc = assert_self_contained_report(sweep / "report.html")
    alts = [img.get("alt") for img in doc.imgs]
    assert "downtime (counters): empirical CDF of the runs" in alts and "volume (link): runs per rate" in alts
    assert "95 % percentile-bootstrap interval" in html_text
    assert "SYNTHETIC" in html_text  # the host/QEMU metadata of the fixture runs
    assert "downtime_s.counters" in html_text  # docs/metrics.md
    assert "Student t" in html_text
    assert not list(sweep.glob(".*tmp*"))


def test_compare_overlays_two_sweeps(tmp_path):
    a = write_sweep(tmp_path / "a", mode="precopy")
    b = write_sweep(tmp_path / "b", failed=(), mode="stopcopy")
    out = compare(a, b, tmp_path / "results")
    assert out.out_dir.parent == tmp_path / "results"
    assert {p.series for p in out.points} == {"A kvm precopy", "B kvm stopcopy"}
    doc = assert_self_contained_report(out.out_dir / "report.html")
    assert "compare" in doc.tables


def test_report_of_several_dirs_goes_to_a_new_directory(tmp_path):
    a = write_sweep(tmp_path / "a")
    run_dir = next((a / "runs").iterdir())
    out = report([a, run_dir], tmp_path / "results")
    assert out.out_dir.parent == tmp_path / "results" and (out.out_dir / "report.html").exists()
    assert len(out.records) == 5


def test_foreign_or_corrupted_dirs_are_refused_and_left_alone(tmp_path):
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "data.txt").write_text("not ours")
    with pytest.raises(ConfigError, match="not a vrmig"):
        report([foreign], tmp_path / "results")
    assert [p.name for p in foreign.iterdir()] == ["data.txt"]
    sweep = write_sweep(tmp_path / "s")
    (sweep / "state.json").write_text('{"runs": {')  # torn write by something else
    with pytest.raises(ConfigError, match="corrupted"):
        report([sweep], tmp_path / "results")
    assert (sweep / "state.json").read_text() == '{"runs": {'
    assert not (sweep / "report.html").exists()
    with pytest.raises(ConfigError, match="not a directory"):
        report([tmp_path / "missing"], tmp_path / "results")


def test_markdown_lists_emphasis_and_continuation_lines():
    md = "All *one* clock.\n\n- **a**: `x`\n  more\n- b\n"
    html_text = markdown_to_html(md)
    assert "<em>one</em>" in html_text and "<li><strong>a</strong>: <code>x</code>\nmore</li>" in html_text
    assert "<li>b</li>" in html_text


def test_render_escapes_and_marks_rows():
    r = Report(
        title="<t>",
        subtitle="**A** = `<a&b>`",
        banner=("bad", "REGRESSION <b>"),
        plots=[Plot("p<1>", PNG_MAGIC + b"x", "file `f<2>.png`")],
        tables=[Table("tab", ["a", "b"], [["<x>", 1], ["y", None]], ["regression", ""], note="n <i>", id="t1")],
        metadata=[("m", {"k": {"a": 1}, "l": ["x", "y"], "none": None})],
    )
    text = render(r)
    assert "<title>&lt;t&gt;</title>" in text and "&lt;x&gt;" in text
    assert "<p><strong>A</strong> = <code>&lt;a&amp;b&gt;</code></p>" in text
    assert '<p class="banner bad">REGRESSION &lt;b&gt;</p>' in text and "<p>n &lt;i&gt;</p>" in text
    assert '<img alt="p&lt;1&gt;"' in text and "<figcaption>p&lt;1&gt;: file <code>f&lt;2&gt;.png</code>" in text
    assert '<tr class="regression"><td class="l">&lt;x&gt;</td><td>1</td></tr>' in text
    assert '<tr><td class="l">y</td><td></td></tr>' in text  # None is an empty cell, not "None"
    assert '<td class="l">a: 1</td>' in text and '<td class="l">x, y</td>' in text and "None" not in text
    json.dumps(text)


def test_markdown_headings_tables_and_code_blocks():
    md = "## H\n\n| a | b |\n|---|---|\n| `x` | y |\n\n```\nx < 2\n```\n- item\n\n#### Deep\n"
    html_text = markdown_to_html(md)
    assert html_text.startswith("<h3>H</h3>") and "<h4>Deep</h4>" in html_text  # below the h2 "Definitions"
    assert "<th>a</th>" in html_text and "<td><code>x</code></td>" in html_text
    assert "<pre><code>x &lt; 2\n</code></pre>" in html_text and "<li>item</li>" in html_text


def test_markdown_keeps_the_report_offline_and_escapes_raw_html():
    md = "See [data formats](data-formats.md), <https://example.org> and ![fig](http://example.org/x.png).\n\n<script>x</script>"
    html_text = markdown_to_html(md)
    assert "See data formats, https://example.org and fig." in html_text
    assert "href" not in html_text and "<img" not in html_text and "<script>" not in html_text
    assert "&lt;script&gt;x&lt;/script&gt;" in html_text


def test_report_carries_the_metric_definitions_of_docs(tmp_path):
    sweep = write_sweep(tmp_path)
    write_sweep_outputs(sweep)
    text = (sweep / "report.html").read_text()
    assert "Cross-traffic loss (one definition)" in text and "<pre><code>sent_packets" in text


def test_compare_table_p_values_on_real_runs():
    """REAL: two nights' 5 pre-copy runs each (tests/fixtures/nightly/), one duration_link_s value
    in both; every p cell is the two-sided exact rank-sum permutation p, enumerated here."""
    from itertools import combinations

    from scipy import stats

    from migrate.campaigns.compare import COMPARE_METRICS, compare_table
    from tests.fixtures.nightly import power

    runs = power.load_points()["precopy-100M-1500"]
    nights = sorted({r["night_id"] for r in runs})
    point = {"accel": "tcg", "rate_bps": 100e6, "frame_bytes": 1500}
    a = [{**r, **point} for r in runs if r["night_id"] == nights[1]]
    b = [{**r, **point} for r in runs if r["night_id"] == nights[4]]

    def greater(x, y):
        ranks = stats.rankdata([*x, *y])
        sums = [ranks[list(c)].sum() for c in combinations(range(len(ranks)), len(x))]
        return sum(s >= ranks[: len(x)].sum() - 1e-9 for s in sums) / len(sums)

    table = compare_table(a, b)
    metrics = [m for m in COMPARE_METRICS if m[0] != "outage_s"]  # these records have no outage anatomy
    assert len(table.rows) == len(metrics)
    col = list(table.header).index("p")
    for row, (metric, *_) in zip(table.rows, metrics, strict=True):
        x, y = ([r[metric] for r in s if r["status"] == "completed"] for s in (a, b))
        assert row[col] == f"{min(1.0, 2 * min(greater(x, y), greater(y, x))):.3g}", metric
    assert table.rows[2][col] == f"{26 / 252:.3g}"  # duration_link_s, the tied metric
