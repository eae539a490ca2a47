"""DRIVER=libvirt for real: two libvirtd "hosts" in R1's and R2's namespaces migrate the router
guest peer-to-peer over the migration link (root, libvirtd, QEMU, libvirt-python, built guest).

One test runs the same scenario with DRIVER=libvirt and DRIVER=qmp and compares the summaries'
schema; another has libvirt refuse the migration ("same host") and checks it is recorded as
failed with libvirt's message while the router keeps forwarding on R1."""

import json
import os
import uuid
from pathlib import Path

import pytest

from tests.integration.conftest import missing_from_setup, require_root_and

pytestmark = pytest.mark.integration

RATE = 10_000_000
TOOLS = ("qemu-system-x86_64", "libvirtd", "irtt", "crosstraffic/bin/vrgen", "probes/bin/vrsampler")


def _ready() -> None:
    require_root_and(*TOOLS)
    pytest.importorskip("libvirt", reason="libvirt-python not installed: run `make setup`")
    from routers.errors import RouterError
    from routers.guest import guest_image

    try:
        guest_image("frr")
    except RouterError as err:
        missing_from_setup(err)


def _run(results: Path, driver: str, **kw):
    from migrate.experiment.run import run
    from migrate.model.scenario import Scenario

    timing = {"duration_s": 8, "migrate_at_s": 3, "after_s": 3, **kw}
    s = Scenario(driver=driver, rate_bps=RATE, frame_bytes=1500, **timing)
    run_dir = run(s, results)
    meta = json.loads((run_dir / "meta.json").read_text())
    summary = json.loads((run_dir / "summary.json").read_text())
    return run_dir, meta, summary


def _keys(d: dict, prefix: str = "") -> set[str]:
    """The summary's schema: every key path, without the entries of per-run maps.

    `qualifiers` holds one entry per figure that this run could not measure as a point, and
    `libvirt` exists only on the libvirt path, so their contents are data, not schema."""
    out = set()
    for k, v in d.items():
        out.add(prefix + k)
        if isinstance(v, dict) and k not in ("libvirt", "qualifiers"):
            out |= _keys(v, f"{prefix}{k}.")
    return out


def _forwarded_after_completion(meta: dict) -> int:
    """The run's own proof: cross-traffic sent after the completion reached B (packets counted)."""
    after = meta["after_migration"]
    assert after["forwarding"] is True and after["proof"] == "cross-traffic", after
    assert after["completed_ns"] <= after["first"]["sent_ns"] < after["first"]["received_ns"], after
    return after["packets"]


def _nothing_left(meta: dict) -> None:
    """Nothing of this run remains: namespaces, state (sockets, libvirt trees), and no process
    refers to its domain or private libvirt paths.  Scoped to the run's prefix: other runs may
    be going on concurrently on a shared machine."""
    prefix = meta["testbed"]["prefix"]
    netns = os.listdir("/run/netns") if os.path.isdir("/run/netns") else []
    assert not [n for n in netns if n.startswith(prefix + "-")], f"namespaces of {prefix} left behind"
    assert not Path("/run/vrmig", prefix).exists(), f"/run/vrmig/{prefix} left behind"
    needles = [f"vrmig-{prefix}".encode(), f"/run/vrmig/{prefix}/".encode()]
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        assert not any(n in cmd for n in needles), f"process {pid} left behind: {cmd[:200]!r}"


def test_libvirt_migration_moves_router_and_matches_qmp_schema(tmp_path):
    _ready()
    run_dir, meta, summary = _run(tmp_path / "libvirt", "libvirt")
    assert meta["status"] == "completed" and meta["failure_class"] is None, meta.get("failure")
    assert summary["status"] == "completed"
    # the domain now runs under R2's libvirtd and is gone from R1's
    assert meta["verify"]["dst_status"] == "running" and meta["verify"]["src_status"] == "absent"
    assert meta["hypervisor"]["libvirt"]["migrate_flags"] == ["LIVE", "PEER2PEER"]
    # libvirt's own figures, from its job-completed event
    jobinfo = json.loads((run_dir / "libvirt_jobinfo.json").read_text())
    assert jobinfo["source"] == "job-completed-event"
    lv = summary["details"]["hypervisor"]["libvirt"]
    assert 0 < summary["downtime_s"]["hypervisor"] == jobinfo["stats"]["downtime"] / 1e3
    assert summary["duration_s"]["hypervisor"] > 0
    processed = lv["data_processed_bytes"]
    assert processed == jobinfo["stats"]["data_processed"] > 0
    link = summary["volume_bytes"]["link"]
    assert abs(link - processed) / processed < 0.10, (link, processed)
    events = [json.loads(x) for x in (run_dir / "libvirt_events.jsonl").read_text().splitlines()]
    assert any(e["event"] == "migration-iteration" for e in events)
    # forwarding resumes through R2: cross-traffic sent after the completion reached B
    assert meta["after_migration"]["completed_source"].startswith("window end"), meta["after_migration"]
    assert _forwarded_after_completion(meta) > 0, "R2 did not forward after the migration"
    pkt = summary["downtime_s"]["packets"]
    assert pkt is not None and 0 < pkt < 5, summary["downtime_s"]
    assert (run_dir / "console-R2.log").exists()  # R2's QEMU wrote its own console file
    _nothing_left(meta)

    _, q_meta, q_summary = _run(tmp_path / "qmp", "qmp")
    assert q_meta["status"] == "completed", q_meta.get("failure")
    assert _keys(summary) == _keys(q_summary), _keys(summary) ^ _keys(q_summary)
    assert q_summary["details"]["hypervisor"]["libvirt"] is None
    _nothing_left(q_meta)


def test_refused_migration_is_failed_with_libvirts_message(tmp_path, monkeypatch):
    _ready()
    import migrate.drivers.libvirt.daemon as lvd

    same = uuid.uuid4()
    monkeypatch.setattr(lvd.uuid, "uuid4", lambda: same)  # both daemons claim to be the same host
    _, meta, summary = _run(tmp_path, "libvirt", duration_s=5, migrate_at_s=2, after_s=2)
    assert meta["status"] == "failed" and meta["failure_class"] == "migration", meta.get("failure")
    assert "libvirt" in meta["failure"] and "same host" in meta["failure"], meta["failure"]
    assert summary["status"] == "failed"
    assert meta["verify"] == {"src_status": "running", "dst_status": "absent", "domain": meta["verify"]["domain"]}
    assert meta["recovery"]["source_running"] is True and meta["recovery"]["forwarding_on_R1"] is True
    _nothing_left(meta)
