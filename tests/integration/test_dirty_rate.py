"""The guest's dirty rate, measured before real migrations (root, QEMU, a guest image with
vrmig-dirty): DIRTY=<rate> runs the load in the guest and QEMU's measurement finds the requested
rate (within 20 %); without DIRTY the idle router's own rate is recorded (a figure, or below
QEMU's 1 MB/s resolution with that bound: never 0).

The measurement is taken before the migration in either mode.  QEMU 7.2 under TCG loses pages the
guest writes during pre-copy (fixed in QEMU 9.0), so a pre-copy run of a dirtying TCG guest
crashed on R2 with it (docs/measurements/2026-11-25-dirty-rate.md); the default stack's QEMU 10.0
carries such a guest through pre-copy (docs/stack.md)."""

import json

import pytest

from tests.integration._runs import frr_guest_image, run_short
from tests.integration.conftest import require_root_and

pytestmark = pytest.mark.integration

RATE = 10_000_000
DIRTY_MB_S = 30.0  # the 256 MiB TCG guest sustains it with a working set of 2.8 s of writes


def _image_with_dirty_tool() -> None:
    from routers.guest import DIRTY_TOOL, has_tool

    image = frr_guest_image()
    if not has_tool(image, DIRTY_TOOL):
        pytest.fail(f"the frr guest image has no {DIRTY_TOOL}: run `make guest`", pytrace=False)


def _run(tmp_path, mode, **kw):
    return run_short(tmp_path, mode, RATE, _image_with_dirty_tool, **kw)


def _actions(run_dir):
    return [json.loads(x) for x in (run_dir / "actions.jsonl").read_text().splitlines()]


def _measured_before_the_migration(run_dir, d):
    """calc-dirty-rate ran, QEMU reported it measured, then the migration began, on time."""
    names = [a["action"] for a in _actions(run_dir)]
    first = names.index("stop") if "stop" in names else names.index("migrate")
    assert names.index("calc-dirty-rate") < names.index("dirty-rate-measured") < first, names
    assert d["method"] == "page-sampling" and d["interface"] == "qmp", d
    assert d["calc_time_s"] == 1 and d["sample_pages"] == 16384, d
    assert d["before_migration_s"] is not None and d["before_migration_s"] >= 0, d
    assert d["delayed_migration_s"] is not None and d["delayed_migration_s"] <= 0.25, d


def test_dirty_run_measures_the_requested_rate(tmp_path, no_leftovers):
    run_dir, meta, summary = _run(tmp_path, "stopcopy", dirty_mbps=DIRTY_MB_S)
    assert meta["status"] == "completed", meta.get("failure")
    d = summary["dirty_rate"]
    assert d["requested_mb_s"] == DIRTY_MB_S and d["why_absent"] is None, d
    assert d["measured_mb_s"] == pytest.approx(DIRTY_MB_S, rel=0.20), d
    assert d["load"]["rate_mb_s"] == DIRTY_MB_S and d["load"]["wss_s"] >= d["calc_time_s"], d
    assert d["load_lagged"] is False, d
    _measured_before_the_migration(run_dir, d)
    assert "VRMIG-DIRTY rate_mb_s=30 " in (run_dir / "console-R1.log").read_text()
    assert meta["dirty_rate"]["reply"]["status"] == "measured", meta["dirty_rate"]
    assert "dirty_rate.measured_mb_s" not in summary["qualifiers"]


def test_a_dirtying_guest_survives_tcg_precopy_on_the_default_stack(tmp_path, no_leftovers):
    """DIRTY with pre-copy under TCG: with QEMU 7.2 the guest resumed on R2 with stale pages and
    crashed; the default stack's QEMU keeps every page the vCPU writes, so the router forwards
    from R2 and its console shows no crash."""
    run_dir, meta, summary = _run(tmp_path, "precopy", dirty_mbps=DIRTY_MB_S)
    assert int(meta["stack"]["qemu"]["release"].split(".")[0]) >= 9, meta["stack"]  # QEMU with the fix
    assert meta["status"] == "completed", meta.get("failure")
    assert summary["dirty_rate"]["measured_mb_s"] == pytest.approx(DIRTY_MB_S, rel=0.20), summary["dirty_rate"]
    from migrate.experiment.console import crash_in

    assert crash_in(run_dir / "console-R2.log") is None


def test_idle_router_dirty_rate_is_recorded(tmp_path, no_leftovers):
    run_dir, meta, summary = _run(tmp_path, "precopy")
    assert meta["status"] == "completed", meta.get("failure")
    d = summary["dirty_rate"]
    assert d["requested_mb_s"] is None and d["load"] is None, d
    _measured_before_the_migration(run_dir, d)
    assert d["measured_mb_s"] != 0, d
    if d["measured_mb_s"] is None:  # below QEMU's resolution: a bound, with its reason
        assert d["why_absent"] == "below_rate_resolution" and d["upper_mb_s"] == 1.0, d
        q = summary["qualifiers"]["dirty_rate.measured_mb_s"]
        assert q["state"] == "censored" and q["upper"] == 1.0, q
    else:
        assert d["measured_mb_s"] >= 1 and d["why_absent"] is None, d
    assert "VRMIG-DIRTY" not in (run_dir / "console-R1.log").read_text()


def test_libvirt_measures_through_its_own_api(tmp_path, no_leftovers):
    """DRIVER=libvirt: virDomainStartDirtyRateCalc and the domain's dirtyrate statistics.  libvirt
    passes no sample size, so QEMU samples 512 pages per GiB: about ±7 MB/s at 30 MB/s, and the
    test allows four of its standard errors."""
    require_root_and("libvirtd")
    run_dir, meta, summary = _run(tmp_path, "stopcopy", dirty_mbps=DIRTY_MB_S, driver="libvirt")
    assert meta["status"] == "completed", meta.get("failure")
    d = summary["dirty_rate"]
    assert d["interface"] == "libvirt" and d["method"] == "page-sampling" and d["sample_pages"] == 512, d
    assert d["measured_mb_s"] is not None and abs(d["measured_mb_s"] - DIRTY_MB_S) <= 4 * d["sampling_error_mb_s"], d
    assert meta["dirty_rate"]["reply"]["dirtyrate.calc_status"] == 2, meta["dirty_rate"]
    names = [a["action"] for a in _actions(run_dir)]
    assert names.index("start-dirty-rate-calc") < names.index("dirty-rate-measured") < names.index("migrate"), names
