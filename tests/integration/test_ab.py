"""make ab with real arms (root, QEMU, built guest): A is Debian 12's QEMU 7.2 (QEMU=system) in
pre-copy, B the default stack's QEMU 10.0 in stop-and-copy, 5 runs each interleaved.  B's outage
(the whole RAM copied while the guest is stopped: about 0.8 s) against A's pre-copy (about 0.05 s)
is a regression the rule must find, so the command exits 1; each arm's runs record the QEMU that
ran them; ab.csv, ab.json and report.html carry the verdicts and the power the 5 runs have."""

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.conftest import REPO, require_root_and

pytestmark = pytest.mark.integration


def test_ab_finds_b_worse_exits_1_and_records_both_stacks(tmp_path):
    require_root_and("qemu-system-x86_64", "irtt", "crosstraffic/bin/vrgen", "probes/bin/vrsampler")
    argv = [sys.executable, "-m", "migrate", "ab", "--a", "QEMU=system MODE=precopy", "--b", "QEMU=10.0 MODE=stopcopy",
            "--reps", "5", "--seed", "3", "--rate", "10M", "--duration", "5", "--migrate-at", "2", "--after", "2",
            "--results", str(tmp_path)]  # fmt: skip
    res = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=1200, check=False)
    out = res.stdout.strip().splitlines()
    assert res.returncode == 1, res.stdout[-3000:] + res.stderr[-3000:]
    assert out[-2].startswith("make ab: B (QEMU=10.0 MODE=stopcopy) against A (QEMU=system MODE=precopy), 5+5 runs: ")
    assert "REGRESSION in " in out[-2] and "downtime_packets_s" in out[-2], out[-2]
    assert any(line.startswith("REPS=5 (< 30): the smallest change") for line in out), out
    d = Path(out[-1])
    state = json.loads((d / "state.json").read_text())
    releases: dict[str, set[str]] = {"A": set(), "B": set()}
    for rec in state["runs"].values():
        meta = json.loads((d / rec["run_dir"] / "meta.json").read_text())
        releases[rec["point"]].add(meta["stack"]["qemu"]["release"])
        assert meta["scenario"]["mode"] == ("precopy" if rec["point"] == "A" else "stopcopy")
    assert releases["A"] and all(r.startswith("7.") for r in releases["A"]), releases
    assert releases["B"] == {"10.0.2"}, releases
    rows = {r["metric"]: r for r in csv.DictReader((d / "ab.csv").open())}
    pk = rows["downtime_packets_s"]
    assert pk["verdict"] == "regression" and float(pk["ratio_b_a"]) > 3 and float(pk["cliffs_delta"]) > 0.8, pk
    assert float(pk["detectable_ratio"]) > float(pk["detectable_ratio_at_30"]) > 1, pk
    ab = json.loads((d / "ab.json").read_text())
    assert (
        ab["regression"] is True and ab["A"] == {"QEMU": "system", "MODE": "precopy"} and ab["runs"] == {"A": 5, "B": 5}
    )
    html = (d / "report.html").read_text()
    assert "A/B verdicts" in html and "REGRESSION in" in html
