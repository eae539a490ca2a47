"""A real two-axis campaign (DOWNTIME_LIMIT × MULTIFD, 1 repetition; root, QEMU, built guest):
started from its file, stopped by SIGTERM after its first run, resumed with RESUME= to the end.
Every point's runs show the QEMU parameters they asked for as effective (query-migrate-parameters
and -capabilities in meta.json), and the points stay apart in points.csv."""

import csv
import json
import signal

import pytest

from tests.integration._runs import stop_still_running
from tests.integration.conftest import require_root_and, start_vrmig, sweep_state, wait_until

pytestmark = pytest.mark.integration

TIMEOUT_S = 600.0

CAMPAIGN = """
[campaign]
name = "dl-multifd"
reps = 1
seed = 4
budget = "30m"

[defaults]
RATE = "10M"
DURATION = 7
MIGRATE_AT = 3
AFTER = 3

[grid]
DOWNTIME_LIMIT = [50, 400]
MULTIFD = [1, 2]
"""


def test_two_axis_campaign_resumes_and_records_effective_parameters(tmp_path):
    require_root_and("qemu-system-x86_64", "irtt", "crosstraffic/bin/vrgen", "probes/bin/vrsampler")
    f = tmp_path / "dl-multifd.toml"
    f.write_text(CAMPAIGN)
    results, log = tmp_path / "results", tmp_path / "campaign.log"
    procs = []
    try:
        p = start_vrmig("campaign", [str(f), "--results", str(results)], log)
        procs.append(p)
        d = wait_until(
            "the campaign directory", lambda: next(results.glob("*-campaign-dl-multifd"), None), p, log, TIMEOUT_S
        )
        wait_until("the first finished run", lambda: len(sweep_state(d).get("runs", {})) >= 1, p, log, TIMEOUT_S)
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=120) == 130, log.read_text()[-3000:]
        assert "make campaign RESUME=" in log.read_text()
        done = len(sweep_state(d)["runs"])
        assert 1 <= done < 4
        p = start_vrmig("campaign", ["--resume", str(d)], log)
        procs.append(p)
        out, _ = p.communicate(timeout=TIMEOUT_S)
        assert p.returncode == 0, log.read_text()[-3000:]
    finally:
        stop_still_running(procs)
    assert out.decode().strip().splitlines()[-1] == str(d)
    assert (d / "campaign.toml").read_text() == CAMPAIGN
    meta = json.loads((d / "meta.json").read_text())
    assert meta["campaign"]["name"] == "dl-multifd" and meta["campaign"]["axes"] == ["DOWNTIME_LIMIT", "MULTIFD"]
    st = sweep_state(d)
    assert len(st["runs"]) == 4 and len(st["sessions"]) == 2
    axes = {p["label"]: p["axes"] for p in meta["campaign"]["points"]}
    for run_id, rec in st["runs"].items():
        assert rec["status"] == "completed", rec
        rmeta = json.loads((d / rec["run_dir"] / "meta.json").read_text())
        params = rmeta["hypervisor"]["migrate_parameters"]
        caps = {c["capability"]: c["state"] for c in rmeta["hypervisor"]["migrate_capabilities"]}
        want = axes[rec["point"]]
        assert params["downtime-limit"] == int(want["DOWNTIME_LIMIT"]), run_id
        channels = int(want["MULTIFD"])
        assert caps["multifd"] is True and params["multifd-channels"] == channels, (run_id, caps, params)
    with open(d / "points.csv") as fh:
        points = list(csv.DictReader(fh))
    assert len(points) == 4  # four points, never pooled
    series = sorted(p["series"] for p in points)
    assert series == sorted(f"kvm precopy DOWNTIME_LIMIT={dl} MULTIFD={m}" for dl in (50, 400) for m in (1, 2))
