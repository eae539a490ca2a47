"""HV=criu in analysis: window from the driver's actions, CRIU's figures, the table (synthetic)."""

import pytest

from analysis.hypervisors.criu import criu_figures
from analysis.metrics.window import migration_window
from analysis.present.table import format_table
from analysis.summary import Summary

MS = 1_000_000
T0 = 1_700_000_000_000_000_000


def _a(t_ms, action, **kw):
    return {"t_ns": T0 + t_ms * MS, "action": action, **kw}


ACTIONS = [
    _a(0, "stop", side="src"),
    _a(1, "migrate", side="src", mode="stopcopy"),
    _a(150, "criu-network-lock", side="src"),
    _a(550, "criu-dump-end", side="src"),
    _a(1070, "cont", side="dst"),
    _a(1070, "migration-end", side="dst", status="completed"),
    _a(1075, "announce-self", side="dst"),
    _a(4000, "traffic-stop"),
]
RECORD = {
    "status": "completed",
    "page_size_bytes": 4096,
    "criu": {"version": "4.2.1", "source": "forky"},
    "rounds": [
        {
            "index": 1,
            "kind": "dump",
            "start_ns": T0,
            "end_ns": T0 + 550 * MS,
            "exit_status": 0,
            "pages_written": 218,
            "stats": {"freezing_time_us": 3599, "frozen_time_us": 398446, "memory_pages_scanned": 287},
        }
    ],
    "restore": {"start_ns": T0 + 620 * MS, "end_ns": T0 + 1070 * MS, "stats": {"restore_time_us": 360638}},
    "transfer": {"start_ns": T0 + 550 * MS, "end_ns": T0 + 620 * MS, "bytes": 914878, "files": 44},
    "image_bytes": 914906,
}


def test_window_ends_at_the_drivers_actions_without_qmp():
    w = migration_window(ACTIONS, [], [], "stopcopy")
    assert (w.start_ns, w.end_ns, w.end_source) == (T0, T0 + 1070 * MS, "cont")
    assert (w.completed_ns, w.end_status) == (T0 + 1070 * MS, "completed")
    pre = migration_window([a for a in ACTIONS if a["action"] != "stop"], [], [], "precopy")
    assert (pre.end_ns, pre.end_source, pre.end_status) == (T0 + 1070 * MS, "action", "completed")


def test_qmp_records_still_win_over_the_action():
    ev = [{"t_ns": T0 + 900 * MS, "side": "src", "event": "MIGRATION", "data": {"status": "completed"}}]
    w = migration_window([a for a in ACTIONS if a["action"] != "stop"], ev, [], "precopy")
    assert (w.end_ns, w.end_source) == (T0 + 900 * MS, "event")


def test_criu_figures_stopcopy():
    w = migration_window(ACTIONS, [], [], "stopcopy")
    hv = criu_figures(RECORD, w)
    assert hv.reply_source == "criu" and hv.status == "completed"
    assert hv.downtime_s == pytest.approx(0.398446 + 0.360638)
    assert hv.total_time_s == pytest.approx(0.003599 + 0.398446 + 0.360638)
    assert hv.ram_transferred_bytes == 218 * 4096 and hv.ram_total_bytes == 287 * 4096
    assert hv.stop_to_cont_s == pytest.approx(1.070) and hv.command_to_end_s == pytest.approx(1.069)
    assert hv.criu["final_dump_to_restored_s"] == pytest.approx(1.070)
    assert hv.criu["transfer_s"] == pytest.approx(0.070) and hv.criu["image_bytes"] == 914906


def test_criu_figures_precopy_sum_rounds():
    pre = {
        "index": 1,
        "kind": "pre-dump",
        "pages_written": 1000,
        "stats": {"freezing_time_us": 1000, "frozen_time_us": 20000, "memory_write_time_us": 5000},
    }
    rec = {**RECORD, "rounds": [pre, {**RECORD["rounds"][0], "index": 2, "pages_written": 30}]}
    hv = criu_figures(rec, None)
    assert hv.total_time_s == pytest.approx(0.026 + 0.003599 + 0.398446 + 0.360638)
    assert hv.ram_transferred_bytes == 1030 * 4096
    assert hv.criu["pre_dump_rounds"] == 1


def test_failed_migration_has_no_criu_downtime():
    hv = criu_figures({**RECORD, "status": "failed"}, None)
    assert hv.downtime_s is None and hv.total_time_s is None and hv.ram_transferred_bytes == 218 * 4096


def test_no_data_no_figures():
    assert criu_figures(None, None) is None


def test_table_names_criu():
    w = migration_window(ACTIONS, [], [], "stopcopy")
    s = Summary(
        status="completed", failure=None, hv="criu", mode="stopcopy", accel="none",
        rate_bps=10e6, frame_bytes=1500, window=w, hypervisor=criu_figures(RECORD, w),
    )  # fmt: skip
    table = format_table(s)
    assert "CRIU 0.759" in table and "CRIU pages written 0.9" in table and "QEMU" not in table


def test_missing_pages_written_is_unknown_not_zero_pages():
    """SYNTHETIC: a pre-dump round whose statistics lack pages_written."""
    pre = {"index": 1, "kind": "pre-dump", "stats": {"freezing_time_us": 1000, "frozen_time_us": 20000}}
    rec = {**RECORD, "rounds": [pre, {**RECORD["rounds"][0], "index": 2, "pages_written": 30}]}
    hv = criu_figures(rec, None)
    assert hv.ram_transferred_bytes is None  # not 30 pages
    assert hv.absent["ram_transferred_bytes"] == "criu_pages_written_missing"
    assert criu_figures(RECORD, None).ram_transferred_bytes == 218 * 4096
