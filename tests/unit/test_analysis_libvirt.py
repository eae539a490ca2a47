"""libvirt's figures as the hypervisor figures of a DRIVER=libvirt run, on captured real libvirt
output (tests/fixtures/libvirt/); the failed-job record in the last test is SYNTHETIC."""

import json
import shutil
from pathlib import Path

import pytest

from analysis.hypervisors.libvirt import libvirt_figures, window_events
from analysis.load import read_json, read_jsonl
from analysis.metrics.window import migration_window
from analysis.present.table import format_table
from analysis.run import analyse_run

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "libvirt"


def _load(kind):
    jobinfo = read_json(FIX / f"jobinfo_{kind}_10M.json")
    events = read_jsonl(FIX / f"events_{kind}_10M.jsonl")
    actions = read_jsonl(FIX / f"actions_{kind}_10M.jsonl")
    return jobinfo, events, actions


def _resumed_on_dst(events):
    return next(e["t_ns"] for e in events if e["side"] == "dst" and e["data"].get("event") == "resumed")


def test_window_ends_when_the_destination_resumes_the_migrated_guest():
    jobinfo, events, actions = _load("precopy")
    w = migration_window(actions, window_events(events), [], "precopy")
    assert w.migrate_ns == actions[0]["t_ns"] == w.start_ns
    assert w.completed_ns == w.end_ns == _resumed_on_dst(events) < jobinfo["t_ns"]
    assert (w.end_status, w.end_source) == ("completed", "event")
    # libvirt's time_elapsed ends there too (it counts from the job start, ~the migrate call)
    assert (w.end_ns - w.migrate_ns) / 1e9 == pytest.approx(jobinfo["stats"]["time_elapsed"] / 1e3, abs=0.05)


def test_window_falls_back_to_job_completed_then_api_return():
    jobinfo, events, actions = _load("precopy")
    no_resume = [e for e in events if e["event"] != "lifecycle"]
    w = migration_window(actions, window_events(no_resume), [], "precopy")
    assert (w.end_ns, w.end_status) == (jobinfo["t_ns"], "completed")
    only_api = [e for e in no_resume if e["event"] == "migrate-api-returned"]
    w = migration_window(actions, window_events(only_api), [], "precopy")
    assert (w.end_ns, w.end_status) == (only_api[0]["t_ns"], "completed")


def test_precopy_figures_from_the_completed_job():
    jobinfo, events, actions = _load("precopy")
    w = migration_window(actions, window_events(events), [], "precopy")
    hv = libvirt_figures(jobinfo, events, w)
    assert hv.status == "completed" and hv.reply_source == "libvirt:job-completed-event"
    assert (hv.downtime_s, hv.total_time_s, hv.setup_time_s) == (0.090, 0.643, 0.003)
    assert (hv.ram_transferred_bytes, hv.ram_total_bytes) == (112_459_202, 268_967_936)
    assert hv.command_to_end_s == pytest.approx((_resumed_on_dst(events) - actions[0]["t_ns"]) / 1e9)
    lv = hv.libvirt
    assert lv["downtime_net_s"] == 0.089 and lv["time_elapsed_net_s"] == 0.642
    assert lv["data_processed_bytes"] == lv["memory_processed_bytes"] == hv.ram_transferred_bytes  # no disks
    assert lv["memory_bandwidth_bps"] == jobinfo["stats"]["memory_bps"] * 8
    assert lv["memory_iterations"] == 3
    assert [n for n, _ in lv["iteration_events_s"]] == [1, 2, 3] and lv["iteration_events_s"][0][1] == 0.0
    assert lv["error"] is None


def test_stopcopy_figures():
    jobinfo, events, actions = _load("stopcopy")
    w = migration_window(actions, window_events(events), [], "stopcopy")
    hv = libvirt_figures(jobinfo, events, w)
    assert w.stop_ns is None and w.start_ns == actions[0]["t_ns"]  # libvirt pauses the guest itself
    assert (hv.downtime_s, hv.total_time_s, hv.stop_to_cont_s) == (0.146, 0.438, None)
    # the guest was paused (source 'suspended') until R2 resumed it: libvirt's downtime is that span
    life = [(e["side"], e["data"]["event"], e["t_ns"]) for e in events if e["event"] == "lifecycle"]
    susp = next(t for side, ev, t in life if (side, ev) == ("src", "suspended"))
    res = next(t for side, ev, t in life if (side, ev) == ("dst", "resumed"))
    assert (res - susp) / 1e9 == pytest.approx(hv.downtime_s, abs=0.02)


def test_refused_migration_has_no_job_and_ends_failed():
    events = read_jsonl(FIX / "events_refused_same_host.jsonl")
    actions = [{"t_ns": events[2]["t_ns"] - 20_000_000, "action": "migrate", "side": "src"}]
    w = migration_window(actions, window_events(events), [], "precopy")
    assert (w.end_status, w.end_ns) == ("failed", events[2]["t_ns"])
    hv = libvirt_figures(None, events, w)
    assert hv.status == "failed" and hv.downtime_s is None and hv.ram_transferred_bytes is None
    assert libvirt_figures(None, [], None) is None


def _run_dir(tmp_path, driver):
    run = tmp_path / driver
    run.mkdir()
    scenario = {"hv": "kvm", "mode": "precopy", "rate_bps": 10_000_000, "frame_bytes": 1500, "sample_ms": 10}
    if driver == "libvirt":
        scenario["driver"] = "libvirt"
    meta = {"status": "completed", "failure": None, "scenario": scenario, "accel": "tcg"}
    (run / "meta.json").write_text(json.dumps(meta))
    shutil.copy(FIX / "actions_precopy_10M.jsonl", run / "actions.jsonl")
    if driver == "libvirt":
        shutil.copy(FIX / "jobinfo_precopy_10M.json", run / "libvirt_jobinfo.json")
        shutil.copy(FIX / "events_precopy_10M.jsonl", run / "libvirt_events.jsonl")
    return run


def _keys(d, prefix=""):
    out = set()
    for k, v in d.items():
        out.add(prefix + k)
        if isinstance(v, dict) and k not in ("libvirt", "qualifiers", "absent"):  # maps whose keys vary by run
            out |= _keys(v, f"{prefix}{k}.")
    return out


def test_analyse_run_uses_libvirt_figures_with_the_qmp_schema(tmp_path):
    lv = analyse_run(_run_dir(tmp_path, "libvirt")).to_dict()
    assert lv["downtime_s"]["hypervisor"] == 0.090
    assert lv["duration_s"]["hypervisor"] == 0.643
    assert lv["volume_bytes"]["hypervisor"] == 112_459_202
    assert lv["details"]["window"]["end_source"] == "event"
    assert lv["details"]["hypervisor"]["libvirt"]["downtime_net_s"] == 0.089
    assert "libvirt_jobinfo.json missing" not in lv["details"]["notes"]
    qmp = analyse_run(_run_dir(tmp_path, "qmp")).to_dict()
    assert qmp["details"]["hypervisor"]["libvirt"] is None
    assert _keys(lv) == _keys(qmp)  # one summary schema for both drivers
    table = format_table(lv)
    assert "libvirt 0.090" in table and "libvirt memory processed 112.5" in table


def test_missing_libvirt_records_are_notes(tmp_path):
    run = _run_dir(tmp_path, "libvirt")
    (run / "libvirt_jobinfo.json").unlink()
    s = analyse_run(run).to_dict()
    assert "libvirt_jobinfo.json missing" in s["details"]["notes"]
    assert s["downtime_s"]["hypervisor"] is None
    assert s["details"]["window"]["end_status"] == "completed"  # the event log still has the end


def test_failed_job_record_synthetic():
    jobinfo = {"t_ns": 5, "source": "source-failed-job", "stats": {"type": 4, "errmsg": "SYNTHETIC: link down"}}
    hv = libvirt_figures(jobinfo, [], None)
    assert hv.status == "failed" and hv.downtime_s is None and hv.total_time_s is None
    assert hv.libvirt["error"] == "SYNTHETIC: link down"


def test_iteration_event_without_a_number_is_none_not_0():
    """SYNTHETIC: a migration-iteration event whose data lacks the iteration number."""
    from analysis.hypervisors.libvirt import libvirt_details

    events = [
        {"t_ns": 1_000, "side": "src", "event": "migration-iteration", "data": {"iteration": 1}},
        {"t_ns": 2_000_001_000, "side": "src", "event": "migration-iteration", "data": {}},
    ]
    assert libvirt_details({}, events)["iteration_events_s"] == [[1, 0.0], [None, 2.0]]
