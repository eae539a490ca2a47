"""Post-copy's price on a real migration (root, QEMU, a guest image with vrmig-dirty): a guest
dirtying 10 MB/s with the pre-copy stream capped at 200 Mbit/s still has dirty pages when the
orchestrator switches to post-copy, so QEMU enters it; the run then records the destination's
postcopy-blocktime, the post-copy phase, and the probes' RTT and the cross-traffic's loss in the
2 s after the resume beside the blackout.  The run
uses the default QEMU (10.0), which keeps the pages a TCG vCPU writes during pre-copy."""

import json

import pytest

from tests.integration.conftest import require_root_and
from tests.integration.test_dirty_rate import _image_with_dirty_tool

pytestmark = pytest.mark.integration


def test_postcopy_run_records_its_price(tmp_path):
    require_root_and("qemu-system-x86_64", "irtt", "crosstraffic/bin/vrgen", "probes/bin/vrsampler")
    _image_with_dirty_tool()
    from migrate.experiment.run import run
    from migrate.model.scenario import Scenario

    s = Scenario(mode="precopy", rate_bps=10_000_000, duration_s=14, migrate_at_s=4, after_s=6, postcopy=True,
                 dirty_mbps=10.0, max_bandwidth_bps=200_000_000)  # fmt: skip
    run_dir = run(s, tmp_path)
    meta = json.loads((run_dir / "meta.json").read_text())
    summary = json.loads((run_dir / "summary.json").read_text())
    assert meta["status"] == "completed", meta.get("failure")
    caps = {c["capability"]: c["state"] for c in meta["hypervisor"]["migrate_capabilities"]}
    assert caps["postcopy-ram"] and caps["postcopy-blocktime"]
    post = summary["details"]["postcopy"]
    assert post["entered"] is True and post["postcopy_bytes"] > 0, post
    price = post["price"]
    assert price["why_absent"] == {}, price["why_absent"]
    assert price["blocktime_ms"] is not None and price["blocktime_ms"] >= 0
    assert price["phase_s"] is not None and price["phase_s"] >= 0
    assert price["switchover_ns"] < price["resume_ns"] <= price["completed_ns"]
    assert price["rtt_after"]["sent"] >= 150  # 2 s of 10 ms probes
    assert price["loss_after"]["sent"] >= 1500  # 2 s of 10 Mbit/s in 1500 B frames (833/s)
    assert price["blackout_s"] == summary["details"]["hypervisor"]["downtime_s"]
