"""analysis.hypervisors.qmp_arrival: arrival minus QEMU timestamp of QMP events, per kind, on
SYNTHETIC event records (the stamps are made up; the record format is qmp_events.jsonl's)."""

from __future__ import annotations

import csv
import json

import pytest

from analysis.hypervisors.qmp_arrival import ALL, COLUMNS, arrival_latency_ms, main, run_dirs, summarize

T0 = 1_700_000_000_000_000_000


def _ev(event: str, late_us: int, qemu_t_ns: int = T0) -> dict:
    return {"t_ns": qemu_t_ns + late_us * 1000, "side": "src", "event": event, "data": {}, "qemu_t_ns": qemu_t_ns}


def test_synthetic_latency_per_kind_and_records_without_qemu_stamp_left_out():
    events = [_ev("STOP", 30), _ev("MIGRATION", 100), _ev("MIGRATION", 300), _ev("RESUME", 50, qemu_t_ns=0)]
    events.append({"t_ns": T0, "event": "STOP"})  # no qemu_t_ns
    d = arrival_latency_ms(events)
    assert set(d) == {"STOP", "MIGRATION"}
    assert d["MIGRATION"].tolist() == pytest.approx([0.1, 0.3])
    assert d["STOP"].tolist() == pytest.approx([0.03])


def test_synthetic_summary_rows_and_pooled_row():
    events = [_ev("MIGRATION", us) for us in (100, 200, 300, 400, 5000)] + [_ev("STOP", 20)]
    rows = summarize("new", 2, events)
    assert [r.event for r in rows] == ["MIGRATION", "STOP", ALL]
    mig = rows[0]
    assert (mig.label, mig.runs, mig.n) == ("new", 2, 5)
    assert mig.min_ms == pytest.approx(0.1) and mig.median_ms == pytest.approx(0.3)
    assert mig.max_ms == pytest.approx(5.0)
    assert mig.p95_ms == pytest.approx(0.4 + 0.8 * (5.0 - 0.4))  # linear between the two largest
    assert rows[-1].n == 6 and rows[-1].min_ms == pytest.approx(0.02)


def test_synthetic_no_event_is_null_not_zero():
    (row,) = summarize("empty", 1, [])
    assert row.event == ALL and row.n == 0
    assert row.median_ms is None and row.p95_ms is None and row.max_ms is None


def test_synthetic_runs_below_a_root_and_csv(tmp_path, capsys):
    for i, late in enumerate((100, 300)):
        run = tmp_path / "root" / f"run{i}"
        run.mkdir(parents=True)
        (run / "qmp_events.jsonl").write_text(json.dumps(_ev("MIGRATION", late)) + "\n")
    assert run_dirs(tmp_path / "root") == [tmp_path / "root" / "run0", tmp_path / "root" / "run1"]
    assert run_dirs(tmp_path / "root" / "run1") == [tmp_path / "root" / "run1"]
    out = tmp_path / "bench" / "qmp.csv"
    assert main([str(tmp_path / "root"), "--out", str(out)]) == 0
    assert "| root | 2 | MIGRATION | 2 |" in capsys.readouterr().out
    with out.open() as fh:
        got = list(csv.reader(fh))
    assert tuple(got[0]) == COLUMNS
    assert got[1][:4] == ["root", "2", "MIGRATION", "2"] and float(got[1][5]) == pytest.approx(0.2)


def test_a_directory_without_events_is_bad_input(tmp_path, capsys):
    assert main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no qmp_events.jsonl" in err
