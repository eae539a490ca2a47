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
    d, unplaced = arrival_latency_ms(events)
    assert set(d) == {"STOP", "MIGRATION"} and unplaced == {}
    assert d["MIGRATION"].tolist() == pytest.approx([0.1, 0.3])
    assert d["STOP"].tolist() == pytest.approx([0.03])


def test_synthetic_summary_rows_and_pooled_row():
    events = [_ev("MIGRATION", us) for us in (100, 200, 300, 400, 5000)] + [_ev("STOP", 20)]
    rows = summarize("new", 2, events)
    assert [r.event for r in rows] == ["MIGRATION", "STOP", ALL]
    mig = rows[0]
    assert (mig.label, mig.testbed, mig.runs, mig.n, mig.unplaced) == ("new", "embedded", 2, 5, 0)
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
    assert "| root | embedded | 2 | MIGRATION | 2 | 0 |" in capsys.readouterr().out
    with out.open() as fh:
        got = list(csv.reader(fh))
    assert tuple(got[0]) == COLUMNS
    assert got[1][:6] == ["root", "embedded", "2", "MIGRATION", "2", "0"] and float(got[1][7]) == pytest.approx(0.2)


def _lab_meta(offsets: dict[str, int]) -> dict:
    offs = {r: {"offset": o, "uncertainty": 1000} for r, o in offsets.items()}
    return {"testbed": {"inventory": "/x/lab.toml"}, "lab": {"offsets_ns": offs}}


def test_synthetic_lab_stamps_are_put_on_the_orchestrators_clock_and_never_pooled_with_embedded(tmp_path, capsys):
    """A lab run whose R1 runs 3 s ahead (its STOP arrived 0.4 ms after QEMU stamped it), a lab
    run without R2's offset (its RESUME is unplaced, not compared across clocks) and an
    embedded run: two groups, each with its own latencies."""
    root = tmp_path / "root"
    runs = {
        "lab1": ([{**_ev("STOP", 400, qemu_t_ns=T0 + 3 * 10**9), "t_ns": T0 + 400_000, "side": "src"}],
                 _lab_meta({"R1": 3 * 10**9, "R2": 0})),
        "lab2": ([{**_ev("RESUME", 0, qemu_t_ns=T0), "t_ns": T0 + 250_000, "side": "dst"}],
                 _lab_meta({"R1": 0})),
        "emb": ([_ev("STOP", 100)], {"testbed": {"prefix": "vm000000"}}),
    }  # fmt: skip
    for name, (events, meta) in runs.items():
        (root / name).mkdir(parents=True)
        (root / name / "qmp_events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
        (root / name / "meta.json").write_text(json.dumps(meta))
    out = tmp_path / "qmp.csv"
    assert main([str(root), "--out", str(out)]) == 0
    rows = {(r["testbed"], r["event"]): r for r in csv.DictReader(out.open())}
    assert float(rows[("lab", "STOP")]["median_ms"]) == pytest.approx(0.4)  # not 3000.4 - 0 nor -2999.6
    assert rows[("lab", "RESUME")]["n"] == "0" and rows[("lab", "RESUME")]["unplaced"] == "1"
    assert rows[("lab", ALL)]["runs"] == "2" and rows[("embedded", ALL)]["runs"] == "1"
    assert float(rows[("embedded", "STOP")]["median_ms"]) == pytest.approx(0.1)


def test_a_directory_without_events_is_bad_input(tmp_path, capsys):
    assert main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no qmp_events.jsonl" in err
