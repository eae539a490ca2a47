"""analyse_run / analyse_and_write / python -m analysis on complete SYNTHETIC run directories."""

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from analysis.__main__ import main
from analysis.present.table import format_table
from analysis.run import analyse_and_write, analyse_run
from tests.fixtures.analysis.synthetic import MS, SyntheticRun, write_run

SCHEMA = {
    "router",
    "status",
    "failure",
    "hv",
    "mode",
    "accel",
    "rate_bps",
    "frame_bytes",
    "downtime_s",
    "duration_s",
    "volume_bytes",
    "rtt_ms",
    "cross_traffic",
    "failure_class",
    "instruments",
    "qualifiers",
    "anatomy",
    "dirty_rate",
    "details",
}


@contextmanager
def _rewritten(path: Path) -> Iterator[dict[str, Any]]:
    """The JSON record in ``path`` to edit in the ``with`` block; written back when it ends."""
    record = json.loads(path.read_text())
    yield record
    path.write_text(json.dumps(record))


def _rate_zero_run(tmp_path: Path) -> SyntheticRun:
    """The SYNTHETIC pre-copy run with its scenario's cross-traffic rate set to 0."""
    run = write_run(tmp_path, "precopy")
    with _rewritten(run.run_dir / "meta.json") as meta:
        meta["scenario"]["rate_bps"] = 0
    return run


def test_precopy_run_metrics(tmp_path):
    run = write_run(tmp_path, "precopy")
    e = run.expect
    s = analyse_run(run.run_dir).to_dict()
    assert set(s) == SCHEMA
    assert (s["status"], s["failure"], s["hv"], s["mode"], s["accel"]) == ("completed", None, "kvm", "precopy", "tcg")
    assert (s["rate_bps"], s["frame_bytes"]) == (100_000_000, 1500)
    assert s["downtime_s"]["counters"] == pytest.approx(0.170, abs=1e-12)
    assert s["downtime_s"]["packets"] == pytest.approx(e["packets_downtime_s"], abs=1e-12) == pytest.approx(0.17016)
    assert s["downtime_s"]["hypervisor"] == pytest.approx(0.045)
    assert s["duration_s"]["link"] == pytest.approx(4.000, abs=1e-12) == pytest.approx(e["link_duration_s"])
    assert s["duration_s"]["hypervisor"] == pytest.approx(3.999)
    assert s["volume_bytes"] == {"link": e["link_volume_bytes"], "hypervisor": e["qemu_transferred"]}
    assert s["rtt_ms"]["before"] == {"median": 0.2, "p99": 0.2, "lost": 0, "sent": 251}
    assert s["rtt_ms"]["during"] == {"median": 1.0, "p99": 1.0, "lost": 10, "sent": 400}
    assert s["rtt_ms"]["after"]["median"] == 0.3 and s["rtt_ms"]["after"]["lost"] == 7
    ct = s["cross_traffic"]
    assert ct["offered_bps"] == 100e6
    assert ct["lost_packets"] == e["total_lost"] == 1417 + 17  # the 2 ms gap at +1.5 s lost 17
    assert ct["forwarded_bps"] == pytest.approx(e["received_packets"] * 1500 * 8 / 10.99992, rel=1e-9)
    assert ct["forwarded_counters_bps"] == pytest.approx(ct["forwarded_bps"], rel=2e-3)
    # by send time: the stall's packets are the migration's; the 2 ms gap at +1.5 s is outside it
    assert ct["migration_lost_packets"] == ct["outage_lost_packets"] == e["stall_lost"] == 1417
    stl = s["details"]["send_time_loss"]
    assert stl["outside"]["lost"] == 17 and stl["inconsistent_ms"] == 0
    assert stl["migration"]["sent"] + stl["outside"]["sent"] == e["sent_packets"]
    assert stl["excess_lost"] == pytest.approx(1417 - stl["migration"]["sent"] * 17 / stl["outside"]["sent"])
    d = s["details"]
    assert d["downtime_packets"]["lost_in_gap"] == e["lost_in_gap"] == 1417
    assert d["downtime_counters"]["resolution_s"] == pytest.approx(0.010)
    assert d["downtime_counters"]["flags"] == []
    assert d["window"]["start_ns"] == e["start_ns"] and d["window"]["end_ns"] == e["end_ns"]
    assert d["hypervisor"]["command_to_end_s"] == pytest.approx(3.999)
    assert d["hypervisor"]["stop_to_cont_s"] is None
    assert d["sampler"]["late_p50_ms"] == pytest.approx(0.024) and d["sampler"]["late_max_ms"] == 0.029
    assert d["total_lost_packets"] == 1434
    assert d["notes"] == []
    json.dumps(s, allow_nan=False)


def test_stopcopy_run_downtime_covers_the_pause(tmp_path):
    run = write_run(tmp_path, "stopcopy")
    s = analyse_run(run.run_dir).to_dict()
    # the lone packet at +3.000005 s in (3.00, 3.01] is within the stray tolerance: stall from mid(2.99..3.00)
    assert s["downtime_s"]["counters"] == pytest.approx(5.065 - 2.995, abs=1e-12)
    assert abs(s["downtime_s"]["counters"] - s["downtime_s"]["packets"]) <= 0.010
    assert s["downtime_s"]["packets"] == pytest.approx(2.06004, abs=1e-12)
    assert s["downtime_s"]["packets"] >= s["duration_s"]["hypervisor"] == pytest.approx(1.999)
    d = s["details"]
    assert d["hypervisor"]["stop_to_cont_s"] == pytest.approx(2.050)
    assert d["window"]["end_source"] == "cont" and d["window"]["announce_ns"] == run.expect["end_ns"] + MS
    assert s["rtt_ms"]["during"]["lost"] == run.expect["lost_probes"] == 205
    assert s["cross_traffic"]["outage_lost_packets"] == run.expect["stall_lost"] > 17000


def test_analyse_and_write_writes_summary_and_plot(tmp_path, monkeypatch):
    monkeypatch.delenv("VRMIG_PLOT_FORMATS", raising=False)  # the default: PNG, SVG and PDF
    run = write_run(tmp_path, "stopcopy")
    (run.run_dir / "summary.json").write_text("old")
    summary = analyse_and_write(run.run_dir)
    on_disk = json.loads((run.run_dir / "summary.json").read_text())
    assert on_disk == summary.to_dict()
    png = run.run_dir / "migration.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20_000
    assert (run.run_dir / "migration.pdf").read_bytes()[:5] == b"%PDF-"
    assert b"<svg" in (run.run_dir / "migration.svg").read_bytes()[:2000]
    assert not list(run.run_dir.glob(".*tmp*"))
    # fewer formats asked for: PNG stays, the others go (no stale figure of an earlier analysis)
    monkeypatch.setenv("VRMIG_PLOT_FORMATS", "png")
    analyse_and_write(run.run_dir)
    assert png.exists() and not any((run.run_dir / f"migration.{f}").exists() for f in ("svg", "pdf"))


@pytest.mark.parametrize(
    ("text", "want"),
    [("png,svg,pdf", ("png", "svg", "pdf")), ("PDF", ("png", "pdf")), ("svg, png", ("png", "svg"))],
)
def test_plot_formats_parse_in_canonical_order_with_png(text, want):
    from analysis.present.formats import parse_formats

    assert parse_formats(text) == want


@pytest.mark.parametrize("text", ["jpeg", "png,gif", "", " , "])
def test_an_unknown_plot_format_is_one_line_naming_the_choices(text):
    from analysis.present.formats import parse_formats

    with pytest.raises(ValueError, match="is not a plot format: give a comma list of png, svg, pdf") as err:
        parse_formats(text)
    assert "\n" not in str(err.value)


def test_missing_files_give_none_and_notes(tmp_path):
    run = write_run(tmp_path, "precopy")
    for name in ("counters.tsv", "irtt.json.gz", "sink.json", "qmp_samples.jsonl"):
        (run.run_dir / name).unlink()
    (run.run_dir / "gen.json").write_text("")  # generator killed before printing
    s = analyse_and_write(run.run_dir).to_dict()
    assert s["downtime_s"] == {"counters": None, "packets": None, "hypervisor": 0.045}  # from meta.json final
    assert s["duration_s"]["link"] is None and s["volume_bytes"]["link"] is None
    assert s["rtt_ms"]["during"]["median"] is None
    assert s["cross_traffic"]["offered_bps"] is None
    notes = " | ".join(s["details"]["notes"])
    for name in ("counters.tsv missing", "irtt.json.gz missing", "sink.json missing", "gen.json unreadable"):
        assert name in notes
    assert (run.run_dir / "migration.png").exists()


def test_empty_directory_never_crashes(tmp_path):
    s = analyse_and_write(tmp_path).to_dict()
    assert s["status"] == "failed" and "meta.json" in s["failure"]
    assert s["downtime_s"] == {"counters": None, "packets": None, "hypervisor": None}


def test_failed_run_keeps_the_orchestrator_failure(tmp_path):
    run = write_run(tmp_path, "precopy")
    with _rewritten(run.run_dir / "meta.json") as meta:
        meta.update(status="failed", failure="migration did not complete within 120 s")
    s = analyse_run(run.run_dir).to_dict()
    assert (s["status"], s["failure"]) == ("failed", "migration did not complete within 120 s")
    assert s["details"]["run_status"] == "failed"


def test_report_table_and_module_entry_point(tmp_path, capsys):
    run = write_run(tmp_path, "stopcopy")
    assert main([str(run.run_dir)]) == 0
    out = capsys.readouterr().out
    assert "counters 2.070 (±0.010)" in out and "packets 2.060 (17166 of 17175 sent in gap lost)" in out
    assert "send-time loss   migration 17166 of 33759 (50.849 %)   outside 17 of 57908" in out
    assert "stop→cont 2.050" in out
    table = format_table(json.loads((run.run_dir / "summary.json").read_text()))
    assert table.splitlines()[0] == "kvm stopcopy 100 Mbit/s 1500 B accel=tcg: completed"
    assert main([str(tmp_path / "nope")]) == 2


def test_rate_zero_and_no_migrate_action(tmp_path):
    run = _rate_zero_run(tmp_path)
    s = analyse_run(run.run_dir).to_dict()
    assert s["downtime_s"]["counters"] is None and s["downtime_s"]["packets"] is None
    assert s["duration_s"]["link"] == pytest.approx(4.0)
    assert "no cross-traffic (rate 0): no data-plane downtime" in s["details"]["notes"]
    (run.run_dir / "actions.jsonl").write_text('{"t_ns": 1, "action": "boot"}\n')
    s = analyse_run(run.run_dir).to_dict()
    assert s["details"]["window"] is None and s["duration_s"]["link"] is None
    assert s["duration_s"]["hypervisor"] == pytest.approx(3.999)  # QEMU's own figure needs no window
    assert "no migrate action recorded: no migration window" in s["details"]["notes"]


# -- absent figures are null with a reason, bounds are bounds (SYNTHETIC runs) ------------------------
def test_no_outage_is_absent_with_the_threshold_not_zero(tmp_path):
    run = write_run(tmp_path, "precopy", outage="none")
    s = analyse_run(run.run_dir).to_dict()
    assert s["downtime_s"]["counters"] is None and s["downtime_s"]["packets"] is None
    assert s["downtime_s"]["hypervisor"] == pytest.approx(0.045)  # QEMU's own figure is still there
    qc, qp = s["qualifiers"]["downtime_s.counters"], s["qualifiers"]["downtime_s.packets"]
    assert (qc["state"], qc["reasons"], qc["upper"]) == ("absent", ["no_stall"], pytest.approx(0.020))
    assert qc["text"] == "no stall longer than θ = 10 ms found (an outage up to 20 ms can go unseen)"
    assert (qp["state"], qp["reasons"], qp["upper"]) == ("absent", ["no_gap"], 0.001)
    assert qp["text"] == "no gap longer than θ = 1 ms found"
    assert s["cross_traffic"]["outage_lost_packets"] is None
    assert s["qualifiers"]["cross_traffic.outage_lost_packets"]["reasons"] == ["no_outage"]
    assert "downtime_s.hypervisor" not in s["qualifiers"]
    table = format_table(s)
    line = next(ln for ln in table.splitlines() if ln.startswith("  downtime"))
    assert "counters –, no stall longer than θ = 10 ms found" in line
    assert "packets –, no gap longer than θ = 1 ms found" in line
    assert " 0.000" not in line


def test_traffic_that_never_came_back_is_a_lower_bound(tmp_path):
    run = write_run(tmp_path, "precopy", outage="never_back")
    s = analyse_run(run.run_dir).to_dict()
    assert s["downtime_s"]["counters"] is None and s["downtime_s"]["packets"] is None
    qc, qp = s["qualifiers"]["downtime_s.counters"], s["qualifiers"]["downtime_s.packets"]
    assert qc["state"] == qp["state"] == "censored"
    assert {"open_end", "clipped_end"} <= set(qc["reasons"]) and "open_end" in qp["reasons"]
    # search end = completion + 2 s = +9.001 s; the last packet was sent just before +6.905 s
    assert qp["lower"] == pytest.approx(9.001 - 6.90492, abs=1e-4)
    assert qc["lower"] == pytest.approx(9.001 - 6.91, abs=0.011)
    assert s["details"]["downtime_packets"]["lower_s"] == qp["lower"]
    table = format_table(s)
    assert f"packets >= {qp['lower']:.3f} (open_end, clipped_end)" in table
    assert "counters >= " in table


def test_send_time_loss_reason_when_a_histogram_overflowed(tmp_path):
    run = write_run(tmp_path, "precopy")
    with _rewritten(run.run_dir / "gen.json") as gen:
        gen["sent_hist_dropped"] = 12
    s = analyse_run(run.run_dir).to_dict()
    assert s["cross_traffic"]["migration_lost_packets"] is None
    q = s["qualifiers"]["cross_traffic.migration_lost_packets"]
    assert (q["state"], q["reasons"]) == ("absent", ["sent_hist_dropped"])
    assert s["instruments"]["dropped"] == {"gen.sent_hist_dropped": 12}
    assert any(n.startswith("incomplete record: gen sent_hist_dropped=12") for n in s["details"]["notes"])
    assert "send-time loss   –, vrgen's send histogram overflowed (sent_hist_dropped)" in format_table(s)


def test_sink_gaps_dropped_make_the_packet_downtime_a_bound(tmp_path):
    run = write_run(tmp_path, "precopy")
    with _rewritten(run.run_dir / "sink.json") as sink:
        sink["gaps"], sink["gaps_dropped"] = sink["gaps"][:1], 1  # the list was full after the +1.5 s gap
    s = analyse_run(run.run_dir).to_dict()
    assert s["downtime_s"]["packets"] is None
    assert s["qualifiers"]["downtime_s.packets"]["reasons"] == ["gaps_dropped"]
    assert s["downtime_s"]["counters"] == pytest.approx(0.170, abs=1e-12)  # the counters do not depend on it
    assert s["instruments"]["dropped"] == {"sink.gaps_dropped": 1}


def test_sink_socket_drops_mark_the_sink_figures_incomplete(tmp_path):
    run = write_run(tmp_path, "stopcopy")
    with _rewritten(run.run_dir / "sink.json") as sink:
        sink["socket_drops"] = 9
    s = analyse_run(run.run_dir).to_dict()
    ct = s["cross_traffic"]
    assert ct["sink_socket_drops"] == 9 and ct["lost_packets"] == run.expect["total_lost"] - 9
    assert s["downtime_s"]["packets"] == pytest.approx(2.06004, abs=1e-12)  # kept, but flagged
    assert s["qualifiers"]["downtime_s.packets"]["state"] == "incomplete"
    assert s["qualifiers"]["cross_traffic.outage_lost_packets"]["reasons"] == ["sink_socket_drops"]
    table = format_table(s)
    assert "(incomplete: sink_socket_drops)" in table and "sink socket drops 9 (not in the loss)" in table


def test_send_errors_are_shown_apart_and_not_counted_as_lost(tmp_path):
    """SYNTHETIC: vrgen skipped 40 sequence numbers on send errors, which the sink saw as lost."""
    run = write_run(tmp_path, "precopy")
    with _rewritten(run.run_dir / "gen.json") as gen:
        gen["send_errors"], gen["packets"] = 40, gen["packets"] - 40  # 40 of the sink's missing numbers were never sent
    s = analyse_run(run.run_dir).to_dict()
    ct = s["cross_traffic"]
    assert ct["gen_send_errors"] == 40
    assert ct["lost_packets"] == run.expect["total_lost"] - 40
    assert ct["loss_ratio"] == pytest.approx(ct["lost_packets"] / ct["sent_packets"])
    assert "send errors 40 (never sent; not in the loss)" in format_table(s)


def test_failure_class_and_instruments_from_meta(tmp_path):
    run = write_run(tmp_path, "precopy")
    with _rewritten(run.run_dir / "meta.json") as meta:
        meta.update(status="failed", failure="SYNTHETIC: guest panicked on R2", failure_class="post-migration")
        meta["instruments_cpu_s"] = {"gen": 1.5, "sink": 0.6, "sampler": 0.2, "prober": None}
    s = analyse_run(run.run_dir).to_dict()
    assert s["failure_class"] == "post-migration"
    ins = s["instruments"]
    assert ins["cpu_s"] == {"gen": 1.5, "sink": 0.6, "sampler": 0.2, "prober": None}
    assert ins["total_cpu_s"] == pytest.approx(2.3)
    # no wall span in meta.json: the generator's start..end from gen.json (10.999995 s)
    assert ins["wall_source"] == "gen.json" and ins["wall_s"] == pytest.approx(10.999995)
    assert ins["core_share"] == pytest.approx(2.3 / 10.999995)
    table = format_table(s)
    assert table.splitlines()[0].endswith("failed [post-migration] (SYNTHETIC: guest panicked on R2)")
    assert "instruments      CPU 2.30 s = 20.9 % of a core over 11.0 s (gen.json span;" in table
    with _rewritten(run.run_dir / "meta.json") as meta:
        meta["instruments_wall_s"] = 23.0
    ins = analyse_run(run.run_dir).to_dict()["instruments"]
    assert (ins["wall_source"], ins["core_share"]) == ("meta", pytest.approx(2.3 / 23.0))


def test_instruments_cpu_absent_is_null_with_a_reason(tmp_path):
    run = write_run(tmp_path, "precopy")
    s = analyse_run(run.run_dir).to_dict()
    assert s["instruments"]["total_cpu_s"] is None and s["instruments"]["core_share"] is None
    assert s["qualifiers"]["instruments.core_share"]["reasons"] == ["no_instrument_cpu"]
    assert "instruments      CPU –, meta.json has no instruments_cpu_s" in format_table(s)


def test_rate_zero_reasons(tmp_path):
    run = _rate_zero_run(tmp_path)
    s = analyse_run(run.run_dir).to_dict()
    for path in ("downtime_s.counters", "downtime_s.packets", "cross_traffic.loss_ratio"):
        assert s["qualifiers"][path]["reasons"] == ["no_cross_traffic"], path
    assert "cross-traffic    none (rate 0)" in format_table(s)
    (run.run_dir / "gen.json").unlink()  # no generator runs at rate 0: its absence is no news
    assert "gen.json missing" not in analyse_run(run.run_dir).notes


@pytest.mark.parametrize("mode", ["precopy", "stopcopy"])
def test_outage_anatomy_of_a_synthetic_run(tmp_path, mode):
    """SYNTHETIC run: STOP/RESUME events and one stall; the phases are the differences of the
    written-down instants, the outage equals the packet gap, nothing reconverges after it."""
    run = write_run(tmp_path, mode)
    e = run.expect
    a = analyse_run(run.run_dir).to_dict()["anatomy"]
    ph = a["phases"]
    assert ph["vcpu_blackout"]["seconds"] == pytest.approx((e["vcpu_resume_ns"] - e["vcpu_stop_ns"]) / 1e9)
    assert ph["reattachment"]["seconds"] == pytest.approx((e["first_after_ns"] - e["vcpu_resume_ns"]) / 1e9)
    assert ph["reconvergence"]["seconds"] == 0
    assert ph["outage"]["seconds"] == pytest.approx(e["packets_downtime_s"])
    keys = [m["key"] for m in a["marks"]]
    assert keys.index("vcpu_stop") < keys.index("vcpu_resume") < keys.index("first_packet")
    lines = format_table(analyse_run(run.run_dir)).splitlines()
    phases = next(ln for ln in lines if ln.startswith("  phases [s]"))
    assert f"vCPU blackout {ph['vcpu_blackout']['seconds']:.3f}" in phases
    assert next(ln for ln in lines if ln.startswith("  outage [s]")).split()[2] == f"{e['packets_downtime_s']:.3f}"
    assert "resume" in next(ln for ln in lines if ln.startswith("  timeline [ms]"))


def test_postcopy_asked_but_never_entered_says_so(tmp_path):
    """SYNTHETIC pre-copy run marked POSTCOPY=1: without a postcopy-active status the summary
    says the run was not a post-copy run; with one (a src MIGRATION event) it says nothing."""
    run = write_run(tmp_path, "precopy")
    with _rewritten(run.run_dir / "meta.json") as meta:
        meta["scenario"]["postcopy"] = True
    s = analyse_run(run.run_dir).to_dict()
    post = s["details"]["postcopy"]
    assert {k: post[k] for k in ("requested", "entered", "postcopy_bytes")} == {
        "requested": True, "entered": False, "postcopy_bytes": None}  # fmt: skip
    assert post["price"]["phase_s"] is None and "ended in pre-copy" in post["price"]["why_absent"]["switchover"]
    assert any("not a post-copy run" in n for n in s["details"]["notes"])
    events = run.run_dir / "qmp_events.jsonl"
    ev = {"t_ns": run.expect["end_ns"] - 100 * MS, "side": "src", "event": "MIGRATION",
          "data": {"status": "postcopy-active"}, "qemu_t_ns": 0}  # fmt: skip
    events.write_text(events.read_text() + json.dumps(ev) + "\n")
    s = analyse_run(run.run_dir).to_dict()
    assert s["details"]["postcopy"]["entered"] is True
    assert not any("post-copy" in n for n in s["details"]["notes"])
    assert "postcopy" not in analyse_run(write_run(tmp_path, "stopcopy").run_dir).to_dict()["details"]
