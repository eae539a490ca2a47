"""report.html of a SYNTHETIC fixture sweep (and of a comparison) opened in real headless
Chromium (Debian package chromium), offline: every plot must decode as an image and the tables
must be in the rendered DOM.  Needs no root; skips when Chromium is not installed."""

import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from migrate.campaigns.compare import compare
from migrate.campaigns.reporting import write_sweep_outputs
from tests.fixtures.analysis.synthetic_sweep import write_sweep

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
    assert len(probe["imgs"]) == 4
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
