"""Real live migrations of the router VM across the namespace testbed (root, QEMU, built guest).

Pre-copy and stop-and-copy at a low rate; asserts that the guest really moved, that R2 forwards
afterwards, and that the measured figures are consistent with QEMU's own."""

import json

import numpy as np
import pytest

from tests.integration.conftest import require_root_and

pytestmark = pytest.mark.integration

RATE = 10_000_000


def _guest_built() -> None:
    from routers.errors import RouterError
    from routers.guest import guest_image

    try:
        guest_image("frr")
    except RouterError as err:
        pytest.skip(str(err))


def _run(tmp_path, mode):
    require_root_and("qemu-system-x86_64", "irtt", "crosstraffic/bin/vrgen", "probes/bin/vrsampler")
    _guest_built()
    from migrate.run import run
    from migrate.scenario import Scenario

    s = Scenario(mode=mode, rate_bps=RATE, frame_bytes=1500, duration_s=8, migrate_at_s=3, after_s=3)
    run_dir = run(s, tmp_path)
    meta = json.loads((run_dir / "meta.json").read_text())
    summary = json.loads((run_dir / "summary.json").read_text())
    return run_dir, meta, summary


def _forwarded_by_r2_after(run_dir, t_after_ns):
    from probes.sampler import load_counters

    c = load_counters(run_dir / "counters.tsv")
    prefix = json.loads((run_dir / "meta.json").read_text())["testbed"]["prefix"]
    s = c.series(f"{prefix}-R2", "tapR")
    after = s.t_ns >= t_after_ns
    # rx on R2's right-segment tap = frames the router sent toward B from R2
    return int(s.rx_packets[after][-1] - s.rx_packets[after][0]) if after.sum() > 1 else 0


def _completed_t_ns(run_dir):
    for line in (run_dir / "qmp_events.jsonl").read_text().splitlines():
        ev = json.loads(line)
        if ev["side"] == "src" and ev["event"] == "MIGRATION" and ev["data"].get("status") == "completed":
            return ev["t_ns"]
    raise AssertionError("no completed MIGRATION event from the source")


def test_precopy_migration_moves_router_and_is_measured(tmp_path, no_leftovers):
    run_dir, meta, summary = _run(tmp_path, "precopy")
    assert meta["status"] == "completed", meta.get("failure")
    assert meta["verify"] == {"src_status": "postmigrate", "dst_status": "running"}
    assert summary["status"] == "completed"
    assert summary["accel"] in ("kvm", "tcg")
    pkt = summary["downtime_s"]["packets"]
    assert 0 < pkt < 5, pkt
    link, qemu = summary["volume_bytes"]["link"], summary["volume_bytes"]["hypervisor"]
    assert qemu > 0 and abs(link - qemu) / qemu < 0.10, (link, qemu)
    assert _forwarded_by_r2_after(run_dir, _completed_t_ns(run_dir)) > 0, "R2 did not forward after migration"
    for name in ("counters.tsv", "sink.json", "gen.json", "irtt.json.gz", "qmp_samples.jsonl", "actions.jsonl"):
        assert (run_dir / name).stat().st_size > 0, name
    assert list(run_dir.glob("*.png")), "no plot"


def test_stopcopy_downtime_covers_the_whole_migration(tmp_path, no_leftovers):
    run_dir, meta, summary = _run(tmp_path, "stopcopy")
    assert meta["status"] == "completed", meta.get("failure")
    assert meta["verify"] == {"src_status": "postmigrate", "dst_status": "running"}
    actions = [json.loads(x) for x in (run_dir / "actions.jsonl").read_text().splitlines()]
    names = [a["action"] for a in actions]
    assert names.index("stop") < names.index("migrate") < names.index("cont") < names.index("announce-self")
    pkt = summary["downtime_s"]["packets"]
    qemu_total_s = summary["duration_s"]["hypervisor"]
    # the guest was stopped for the whole transfer: the data plane must show at least that
    assert pkt >= qemu_total_s, (pkt, qemu_total_s)
    assert np.isfinite(summary["downtime_s"]["counters"])
    assert _forwarded_by_r2_after(run_dir, _completed_t_ns(run_dir)) > 0
