"""report.html of a SYNTHETIC fixture sweep (and of a comparison), and of the real fixtures of a
single run, a baseline and a calibration, opened in real headless Chromium (Debian package
chromium), offline: every plot must decode as an image and the tables must be in the rendered
DOM; the single run's page is also rendered to a screenshot that must not be blank.  Needs no
root; fails when Chromium is not installed."""

import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from analysis.baseline.summary import analyse_baseline
from analysis.present.calibration_report import write_calibration_report
from analysis.present.run_report import write_run_report
from analysis.run import analyse_and_write
from migrate.campaigns.compare import compare
from migrate.campaigns.reporting import write_sweep_outputs
from migrate.core.rundir import KIND_BASELINE, RUN_MARKER
from tests.fixtures.analysis.synthetic_sweep import write_sweep

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"

pytestmark = pytest.mark.integration

CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)
# Appended to a COPY of the report: records what the browser decoded into the DOM.
PROBE = """<script>
document.body.setAttribute("data-probe", JSON.stringify({
  imgs: Array.from(document.images).map(i => [i.complete, i.naturalWidth, i.naturalHeight]),
  tables: Array.from(document.querySelectorAll("table[id]")).map(t => [t.id, t.rows.length]),
}));
</script>"""


def _chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            return name
    pytest.fail("chromium not installed: run `make setup` (Debian package chromium)", pytrace=False)


def _dump_dom(html_path: Path, timeout_s: float = 90.0) -> str:
    browser = _chromium()
    with tempfile.TemporaryDirectory(prefix="vrmig-chromium-") as profile:
        argv = [browser, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--dump-dom", html_path.resolve().as_uri()]
        res = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
    assert res.returncode == 0, res.stderr[-2000:]
    return res.stdout


def _probe(report: Path) -> dict:
    import html
    import json

    copy = report.with_name("probe.html")
    copy.write_text(report.read_text().replace("</body>", PROBE + "</body>"))
    dom = _dump_dom(copy)
    m = re.search(r'data-probe="([^"]*)"', dom)
    assert m, dom[:2000]
    return json.loads(html.unescape(m.group(1)))


def _check(report: Path, tables: set[str]) -> None:
    dom = _dump_dom(report)
    assert "<h2>Grid points</h2>" in dom and "<h2>Definitions</h2>" in dom
    probe = _probe(report)
    # every plot the report embeds (the Fig. 3-style figures and the runs' distributions), decoded
    assert len(probe["imgs"]) == report.read_text().count('src="data:image/png;base64,') >= 4
    for complete, w, h in probe["imgs"]:
        assert complete and w > 300 and h > 200, probe["imgs"]  # decoded PNG plots
    rows = dict(probe["tables"])
    assert tables <= set(rows), rows
    assert all(n > 1 for n in rows.values()), rows  # header + data rows


def test_sweep_report_renders_in_headless_chromium(tmp_path):
    sweep = write_sweep(tmp_path)
    write_sweep_outputs(sweep)
    _check(sweep / "report.html", {"points", "runs"})


def test_compare_report_renders_in_headless_chromium(tmp_path):
    a = write_sweep(tmp_path / "a")
    b = write_sweep(tmp_path / "b", failed=(), mode="stopcopy")
    out = compare(a, b, tmp_path / "results")
    _check(out.out_dir / "report.html", {"points", "runs", "compare"})


def _check_page(report: Path, images: int, tables: set[str]) -> dict:
    """The page's ``images`` plots decoded (wider than 300 px) and its ``tables`` in the DOM with
    data rows; returns the probe."""
    probe = _probe(report)
    print(f"{report.parent.name}: images (complete, w, h) {probe['imgs']}, tables (id, rows) {probe['tables']}")
    assert len(probe["imgs"]) == images, probe["imgs"]
    for complete, w, h in probe["imgs"]:
        assert complete and w > 300 and h > 200, probe["imgs"]
    rows = dict(probe["tables"])
    assert tables <= set(rows), rows
    assert all(rows[t] > 1 for t in tables), rows  # header + data rows
    return probe


def _screenshot(html_path: Path, png: Path, size: tuple[int, int] = (1280, 2400), timeout_s: float = 90.0) -> None:
    browser = _chromium()
    with tempfile.TemporaryDirectory(prefix="vrmig-chromium-") as profile:
        argv = [browser, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", f"--screenshot={png}",
                f"--window-size={size[0]},{size[1]}", "--hide-scrollbars", html_path.resolve().as_uri()]  # fmt: skip
        res = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
    assert res.returncode == 0 and png.is_file(), res.stderr[-2000:]


def test_single_run_report_renders_in_headless_chromium_and_is_not_blank(tmp_path):
    """The completed run fixture re-analysed (its raw traces are not kept: every figure absent with
    its reason, the plot with the run's axes): the plot decodes, the tables are there, and a
    1280x2400 screenshot of the page is a PNG of that size with many colours and ink on it."""
    from PIL import Image

    run_dir = tmp_path / "kvm-precopy-100M-1500"
    shutil.copytree(FIXTURES / "rundir" / run_dir.name, run_dir)
    analyse_and_write(run_dir)
    _check_page(run_dir / "report.html", 1, {"headline", "traffic", "notes"})  # no window: no anatomy
    shot = tmp_path / "run.png"
    _screenshot(run_dir / "report.html", shot)
    with Image.open(shot) as img:
        assert img.format == "PNG" and img.size == (1280, 2400), (img.format, img.size)
        rgb = img.convert("RGB")
    colours = rgb.getcolors(maxcolors=1 << 24) or []
    grey = rgb.convert("L")
    ink = sum(n for v, n in enumerate(grey.histogram()) if v < 240) / (1280 * 2400)
    print(f"screenshot {shot.name}: {rgb.size[0]}x{rgb.size[1]} PNG, {len(colours)} distinct colours, "
          f"{ink * 100:.1f} % of the pixels darker than 240/255")  # fmt: skip
    assert len(colours) > 100, len(colours)
    assert ink > 0.03, ink


def test_failed_run_report_from_its_summary_renders_in_headless_chromium(tmp_path):
    """The failed run fixture's own summary.json (its figures, the absent ones with reasons); the
    fixture keeps no plot: no image, the plot listed as absent."""
    run_dir = tmp_path / "kvm-precopy-100M-1500-dst-qemu-dies"
    shutil.copytree(FIXTURES / "rundir" / run_dir.name, run_dir)
    report = write_run_report(run_dir)
    _check_page(report, 0, {"headline", "anatomy", "timeline", "traffic", "notes"})
    dom = _dump_dom(report)
    assert '<p class="banner bad">' in dom and "absent (no migration.png in the run directory)" in dom


def test_baseline_report_renders_in_headless_chromium(tmp_path):
    run_dir, points = tmp_path / "baseline", FIXTURES / "baseline"
    shutil.copytree(points / "kvm_tcg_64B_50M", run_dir / "points" / "kvm-virtio-r1-none" / "sweep-50M-r1")
    shutil.copytree(points / "criu_container_1500B_10M", run_dir / "points" / "criu-r1-none" / "sweep-10M-r1")
    (run_dir / RUN_MARKER).write_text(f"vrmig {KIND_BASELINE} directory\n")  # as make baseline marks it
    analyse_baseline(run_dir)
    _check_page(run_dir / "report.html", 3, {"configs", "points"})


def test_calibration_report_renders_in_headless_chromium(tmp_path):
    run_dir = tmp_path / "2026-12-06-kvm-tcg-cut-pause"
    shutil.copytree(FIXTURES / "calibration" / run_dir.name, run_dir)
    report = write_calibration_report(run_dir)
    _check_page(report, 1, {"calibration", "events", "instruments", "notes"})
    assert '<p class="banner good">cut targets met: 4 of 4</p>' in _dump_dom(report)
