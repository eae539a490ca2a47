"""Real Xen migrations (HV=xen) between two nested Xen 4.17 hosts (root, QEMU, `make xen`).

Both nested hosts boot, the BIRD router runs as a PVH domU on R1, cross-traffic A→B at a rate the
nested router carries, ``xl migrate`` moves it to R2: the domain is then listed by ``xl list`` on
R2 (and gone from R1), forwarding resumes through R2, the packet gap is above zero and the
migration link carried at least the guest's memory.  xl migrate copies every page of the
domU over the nested hosts' link (about 14 Mbit/s under TCG), so the test's time follows MEM:
BIRD's image boots in MEM=112 (FRR's needs 144; routers.guest.GuestImage.min_mem_mib), which
keeps the test near a minute and a half.  A nested host that cannot boot in time fails
the run with its console excerpt and leaves nothing behind."""

import json

import pytest

from tests.integration._runs import nested_xen_save_fault
from tests.integration.conftest import report_retry, require_root_and

pytestmark = [pytest.mark.integration, pytest.mark.slow]

RATE = 1_000_000
FRAME = 1500
ROUTER = "bird"
MEM_MIB = 112  # BIRD 2.17's image needs 112 (routers.guest.GuestImage.min_mem_mib), FRR 10.3's 144


def _require():
    require_root_and("qemu-system-x86_64", "irtt", "crosstraffic/bin/vrgen", "probes/bin/vrsampler")
    from routers.errors import RouterError
    from routers.guest import guest_image
    from routers.xen_image import xen_image

    try:
        guest_image(ROUTER, verify=False)
        xen_image(verify=False)
    except RouterError as err:
        pytest.fail(f"HV=xen needs the nested Xen host image: {err}", pytrace=False)


def _run(root, **kw):
    from migrate.experiment.run import run
    from migrate.model.scenario import Scenario

    s = Scenario(hv="xen", router=ROUTER, rate_bps=RATE, frame_bytes=FRAME, mem_mib=MEM_MIB, duration_s=10,
                 migrate_at_s=3, after_s=3, migrate_timeout_s=900, **kw)  # fmt: skip
    for attempt in (1, 2):
        run_dir = run(s, root)
        meta = json.loads((run_dir / "meta.json").read_text())
        cause = nested_xen_save_fault(meta)
        if cause is None or attempt == 2:
            break
        report_retry(cause, run_dir)
    return run_dir, meta, json.loads((run_dir / "summary.json").read_text())


def test_xl_migrate_moves_the_router_to_r2(tmp_path, no_leftovers):
    _require()
    run_dir = _run(tmp_path / "run")[0]
    meta, summary = (json.loads((run_dir / name).read_text()) for name in ("meta.json", "summary.json"))
    assert meta["status"] == "completed" and meta["failure_class"] is None, meta.get("failure")
    v = meta["verify"]
    assert (v["src_status"], v["dst_status"]) == ("absent", "running"), v  # xl list on both dom0s
    hv = meta["hypervisor"]
    assert hv["xen_guest_type"] == "pvh" and hv["nested"] is True and hv["accel"] in ("kvm", "tcg")

    end_ns = next(json.loads(x)["t_ns"] for x in (run_dir / "actions.jsonl").read_text().splitlines()
                  if json.loads(x)["action"] == "migration-end")  # fmt: skip
    # forwarding from R2: cross-traffic sent after the migration's end reached B
    after = meta["after_migration"]
    assert after["forwarding"] is True and after["completed_ns"] == end_ns, after
    assert end_ns <= after["first"]["sent_ns"] < after["first"]["received_ns"] and after["packets"] > 10, after

    assert summary["status"] == "completed" and summary["hv"] == "xen"
    pkt, own = summary["downtime_s"]["packets"], summary["downtime_s"]["hypervisor"]
    assert pkt is not None and pkt > 0, summary["downtime_s"]
    assert own is not None and own > 0, summary["details"]["hypervisor"]
    assert summary["volume_bytes"]["link"] >= MEM_MIB * 2**20, summary["volume_bytes"]
    assert summary["duration_s"]["hypervisor"] > 0
    # the nested router carried the rate: every lost packet fell into the migration's gap
    lost = summary["cross_traffic"]["lost_packets"]
    assert lost <= summary["details"]["downtime_packets"]["lost_in_gap"] + 2, summary["cross_traffic"]
    for name in ("xen_log.jsonl", "xen.json", "console-R1.log", "console-R2.log", "counters.tsv"):
        assert (run_dir / name).stat().st_size > 0, name


def test_nested_host_that_does_not_boot_fails_with_its_console(tmp_path, no_leftovers):
    _require()
    _run_dir, meta, summary = _run(tmp_path, boot_timeout_s=4)
    assert meta["status"] == "failed" and meta["failure_class"] == "setup", meta.get("failure")
    assert "nested Xen host R1 did not boot" in meta["failure"] and "console:" in meta["failure"], meta["failure"]
    assert summary["status"] == "failed"
