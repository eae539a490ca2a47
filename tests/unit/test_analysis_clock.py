"""Lab runs: the sink's, the generator's and irtt's timestamps go onto the orchestrator's clock
with the hosts' measured offsets before any figure compares them with the migration window.
On SYNTHETIC run directories: the one-clock run, then the same run as if B's and A's clocks were
off by known offsets (their records shifted by them, the offsets in meta.json as a lab run
records them)."""

import json

import numpy as np
import pytest

from analysis.load import RttTrace
from analysis.metrics.clock import (
    gen_on_orchestrator_clock,
    irtt_on_orchestrator_clock,
    sink_on_orchestrator_clock,
)
from analysis.run import analyse_run
from tests.fixtures.analysis.synthetic import write_run

B_OFF, A_OFF = 250_000_000, -180_000_000  # B's clock 250 ms ahead, A's 180 ms behind


def _as_lab(run_dir, b_off: int, a_off: int, record: bool = True) -> None:
    """Rewrite the run's sink.json/gen.json as B's and A's clocks would have stamped them, and
    (``record``) meta.json as a lab run records the measured offsets."""
    sink = json.loads((run_dir / "sink.json").read_text())
    for k in ("first_ns", "last_ns", "start_ns", "end_ns"):
        if isinstance(sink.get(k), int):
            sink[k] += b_off
    sink["gaps"] = [[g[0] + b_off, g[1] + b_off, g[2], g[3]] for g in sink["gaps"]]
    if "hist_start_ms" in sink:
        sink["hist_start_ms"] += b_off // 1_000_000
    if "tx_hist_start_ms" in sink:
        sink["tx_hist_start_ms"] += a_off // 1_000_000
    (run_dir / "sink.json").write_text(json.dumps(sink))
    gen = json.loads((run_dir / "gen.json").read_text())
    for k in ("start_ns", "end_ns"):
        gen[k] += a_off
    if "sent_hist_start_ms" in gen:
        gen["sent_hist_start_ms"] += a_off // 1_000_000
    (run_dir / "gen.json").write_text(json.dumps(gen))
    meta = json.loads((run_dir / "meta.json").read_text())
    if record:
        offs = {"A": a_off, "B": b_off, "C": 0, "D": 0, "R1": 0, "R2": 0}
        meta["testbed"] = {"inventory": "/nonexistent/lab.toml", "kind": "lab"}
        meta["lab"] = {"offsets_ns": {r: {"offset": o, "uncertainty": 30_000} for r, o in offs.items()}}
        meta.setdefault("clock", {})["hosts"] = {r: {"sync": {"synchronised": False}} for r in offs}
    (run_dir / "meta.json").write_text(json.dumps(meta))


def _one_clock(tmp_path, mode: str):
    """The same synthetic run, every record on one clock."""
    d = tmp_path / "one"
    d.mkdir()
    return analyse_run(write_run(d, mode).run_dir)


FIGURES = (
    ("downtime_s", "packets"),
    ("downtime_s", "counters"),
    ("cross_traffic", "migration_lost_packets"),
    ("cross_traffic", "outage_lost_packets"),
    ("cross_traffic", "forwarded_counters_bps"),
    ("rtt_ms", "during"),
)


def _figures(s: dict) -> dict:
    return {f"{a}.{b}": s[a][b] for a, b in FIGURES}


@pytest.mark.parametrize("mode", ["precopy", "stopcopy"])
def test_lab_offsets_are_removed_before_any_figure(tmp_path, mode):
    one = _one_clock(tmp_path, mode)
    run = write_run(tmp_path, mode)
    _as_lab(run.run_dir, B_OFF, A_OFF)
    lab = analyse_run(run.run_dir).to_dict()
    ref = one.to_dict()
    assert _figures(lab) == _figures(ref)
    assert lab["downtime_s"]["packets"] is not None
    dp, dp1 = lab["details"]["downtime_packets"], ref["details"]["downtime_packets"]
    assert (dp["t_before_ns"], dp["t_after_ns"]) == (dp1["t_before_ns"], dp1["t_after_ns"])
    assert lab["details"]["clock"]["corrected"] == {"sink": "B+A", "gen": "A", "irtt": "C"}
    assert ref["details"]["clock"]["corrected"] == {}


def test_without_the_offsets_the_same_records_give_other_figures(tmp_path):
    """The check above has teeth: the shifted records read as if on one clock mislead."""
    one = _one_clock(tmp_path, "precopy")
    run = write_run(tmp_path)
    _as_lab(run.run_dir, B_OFF, A_OFF, record=False)
    assert _figures(analyse_run(run.run_dir).to_dict()) != _figures(one.to_dict())


def test_an_unmeasured_offset_leaves_the_record_on_its_clock_with_a_note(tmp_path):
    run = write_run(tmp_path)
    _as_lab(run.run_dir, B_OFF, A_OFF)
    meta = json.loads((run.run_dir / "meta.json").read_text())
    del meta["lab"]["offsets_ns"]["C"]
    (run.run_dir / "meta.json").write_text(json.dumps(meta))
    s = analyse_run(run.run_dir).to_dict()
    assert s["details"]["clock"]["corrected"] == {"sink": "B+A", "gen": "A"}
    assert s["details"]["clock"]["max_uncertainty_ns"] is None
    assert any("no measured offset of C: irtt timestamps stay on its clock" in n for n in s["details"]["notes"])


def test_record_shifts_are_each_hosts_own():
    sink = {"first_ns": 10_000_000_000, "last_ns": 20_000_000_000, "gaps": [[12, 13, 1, 5]],
            "hist_start_ms": 10_000, "tx_hist_start_ms": 9_999, "packets": 3,
            "owd_ns": {"min": 65_000, "median": 70_000, "p99": 90_000, "count": 3, "negative": 0}}  # fmt: skip
    out = sink_on_orchestrator_clock(sink, 2_000_000, -1_000_000)
    assert (out["first_ns"], out["last_ns"]) == (9_998_000_000, 19_998_000_000)
    assert out["gaps"] == [[12 - 2_000_000, 13 - 2_000_000, 1, 5]]
    assert (out["hist_start_ms"], out["tx_hist_start_ms"]) == (9_998, 10_000)
    # B's clock 2 ms ahead, A's 1 ms behind: each packet's receive-minus-send reads 3 ms too long
    assert out["owd_ns"] == {"min": 65_000 - 3_000_000, "median": 70_000 - 3_000_000, "p99": 90_000 - 3_000_000,
                             "count": 3, "negative": 0}  # fmt: skip
    assert out["packets"] == 3
    assert sink["first_ns"] == 10_000_000_000  # the input is not changed
    gen = gen_on_orchestrator_clock({"start_ns": 5, "end_ns": 9, "sent_hist_start_ms": 0, "packets": 2}, 4)
    assert gen == {"start_ns": 1, "end_ns": 5, "sent_hist_start_ms": 0, "packets": 2}
    trace = RttTrace(np.array([100, 200]), np.array([1.0, np.nan]), np.array([0, 1]))
    moved = irtt_on_orchestrator_clock(trace, 30)
    assert moved.send_ns.tolist() == [70, 170] and np.isnan(moved.rtt_ns[1]) and moved.seqno.tolist() == [0, 1]
