"""A sweep on a lab (``make sweep TESTBED=``): the inventory it was started with is recorded and a
RESUME runs on that one again, refusing another testbed or a changed inventory."""

from __future__ import annotations

from pathlib import Path

import pytest

from migrate.campaigns.sweep import sweep_testbed
from migrate.core.errors import ConfigError
from migrate.labs.where import testbed_record as record


def _inv(tmp_path: Path, text: str = "name = 'lab'\n") -> Path:
    p = tmp_path / "lab.toml"
    p.write_text(text)
    return p


def test_record_is_absolute_path_and_digest(tmp_path, monkeypatch):
    inv = _inv(tmp_path)
    monkeypatch.chdir(tmp_path)
    rec = record(Path("lab.toml"))
    assert rec["inventory"] == str(inv.resolve())
    assert rec["kind"] == "lab" and len(rec["sha256"]) == 64


def test_embedded_sweep_stays_embedded(tmp_path):
    assert sweep_testbed(tmp_path, {}, None) is None
    with pytest.raises(ConfigError, match="ran on the embedded testbed: drop TESTBED="):
        sweep_testbed(tmp_path, {}, _inv(tmp_path))


def test_lab_sweep_resumes_on_its_lab(tmp_path):
    inv = _inv(tmp_path)
    meta = {"testbed": record(inv)}
    assert sweep_testbed(tmp_path, meta, None) == inv.resolve()
    assert sweep_testbed(tmp_path, meta, inv) == inv.resolve()


def test_resume_with_another_lab_is_refused(tmp_path):
    inv = _inv(tmp_path)
    other = tmp_path / "other.toml"
    other.write_text("name = 'other'\n")
    with pytest.raises(ConfigError, match=r"ran on TESTBED=.*lab.toml: drop TESTBED=.*other.toml"):
        sweep_testbed(tmp_path, {"testbed": record(inv)}, other)


def test_changed_or_missing_inventory_is_refused(tmp_path):
    inv = _inv(tmp_path)
    meta = {"testbed": record(inv)}
    inv.write_text("name = 'lab'\n# R2 replaced\n")
    with pytest.raises(ConfigError, match="changed since the sweep started"):
        sweep_testbed(tmp_path, meta, None)
    inv.unlink()
    with pytest.raises(ConfigError, match="which is gone"):
        sweep_testbed(tmp_path, meta, None)


def test_a_new_sweep_or_night_records_its_lab_in_meta(tmp_path):
    """plan_meta, which make sweep and make nightly both use, records the inventory; a
    RESUME then finds the lab there."""
    from migrate.campaigns import sweep as sw
    from migrate.model.scenario import Scenario

    plan = sw.Plan("sweep", (sw.PlanPoint("10M-1500", Scenario()),), 1, 1, {})
    inv = _inv(tmp_path)
    meta = sw.plan_meta(plan, {"git_commit": "x"}, ["test"], inv)
    assert meta["testbed"] == record(inv)
    assert sweep_testbed(tmp_path, meta, None) == inv.resolve()
    assert "testbed" not in sw.plan_meta(plan, {"git_commit": "x"}, ["test"])
