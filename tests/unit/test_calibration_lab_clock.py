"""A calibration on a lab: the cut's edges are the orchestrator's timestamps, the sink's gaps B's;
SYNTHETIC records with B's clock 3 s ahead check that the analysis puts the gaps on one clock."""

from __future__ import annotations

import json
from pathlib import Path

from analysis.metrics.calibration import load_and_calibrate

T = 1_800_000_000_000_000_000
MS = 1_000_000
B_AHEAD_NS = 3_000 * MS


def _run_dir(tmp_path: Path, offsets: dict[str, dict[str, int]] | None) -> Path:
    d = tmp_path / "cal"
    d.mkdir()
    meta = {
        "calibration": {"hv": "kvm", "driver": "qmp"},
        "testbed": {"inventory": "/lab.toml", "prefix": "vx"},
        "lab": {"offsets_ns": offsets} if offsets is not None else {},
    }
    (d / "meta.json").write_text(json.dumps(meta))
    cut = {"action": "cut", "index": 0, "kind": "cut", "nominal_ms": 100.0, "rep": 0,
           "before_ns": T + 10_000 * MS, "after_ns": T + 10_000 * MS + 200_000}  # fmt: skip
    restore = {**cut, "action": "restore", "before_ns": T + 10_100 * MS, "after_ns": T + 10_100 * MS + 200_000}
    (d / "actions.jsonl").write_text(json.dumps(cut) + "\n" + json.dumps(restore) + "\n")
    # the stream stopped while the port was cut, by B's clock (3 s ahead)
    gap = [T + 10_000 * MS + 150_000 + B_AHEAD_NS, T + 10_100 * MS + 250_000 + B_AHEAD_NS, 100, 900]
    (d / "sink.json").write_text(json.dumps({"gaps": [gap], "first_ns": T, "last_ns": T + 20_000 * MS}))
    (d / "gen.json").write_text(json.dumps({"achieved_pps": 8000.0}))
    return d


def test_the_sinks_gaps_are_put_on_the_orchestrators_clock(tmp_path):
    offs = {"B": {"offset": B_AHEAD_NS, "uncertainty": 50_000}, "A": {"offset": 0, "uncertainty": 50_000}}
    cal, hv = load_and_calibrate(_run_dir(tmp_path, offs))
    (est,) = [e for e in cal.estimates if e.estimator == "packets"]
    assert hv == "kvm" and est.detected
    assert abs(est.measured_s - 0.1001) < 1e-6 and est.passed


def test_without_bs_offset_the_gap_stays_on_bs_clock_and_says_so(tmp_path):
    cal, _ = load_and_calibrate(_run_dir(tmp_path, {}))
    (est,) = [e for e in cal.estimates if e.estimator == "packets"]
    assert not est.detected  # 3 s away from the cut: not this event's gap
    assert any("no measured offset of B" in n for n in cal.notes)


def test_a_lab_calibration_refuses_what_a_lab_cannot_do_before_anything_starts(tmp_path):
    import pytest

    from migrate.core.errors import ConfigError
    from migrate.experiment.calibrate import CalibrationSpec, run_calibration
    from migrate.testbed.inventory import InventoryError

    example = Path(__file__).resolve().parents[2] / "docs" / "lab.example.toml"
    with pytest.raises(ConfigError, match="HV=criu on a lab has no pause"):
        run_calibration(CalibrationSpec(hv="criu", router="bird"), tmp_path / "r", example)
    with pytest.raises(InventoryError):
        run_calibration(CalibrationSpec(), tmp_path / "r", tmp_path / "missing.toml")
    assert not (tmp_path / "r").exists()
