"""migrate.labs.where: the embedded testbed and a lab answer the same questions, each its own way;
where_for is the one place that picks one (nothing here connects to a host)."""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path
from types import SimpleNamespace

import pytest

from migrate.core.errors import ConfigError
from migrate.labs import where as wh
from migrate.labs.leaks import NoHostLeaks
from migrate.labs.where import EMBEDDED_ID, Embedded, Lab, where_for
from migrate.labs.where import testbed_record as record


def _inv(tmp_path: Path, text: str = "name = 'lab'\n") -> Path:
    p = tmp_path / "lab.toml"
    p.write_text(text)
    return p


def _public(cls: type) -> set[str]:
    return {n for n in dir(cls) if not n.startswith("_")} | {f.name for f in dataclasses.fields(cls)}


def test_where_for_picks_the_embedded_testbed_or_the_lab(tmp_path):
    assert isinstance(where_for(None), Embedded) and where_for(None).inventory is None
    lab = where_for(tmp_path / "lab.toml")
    assert isinstance(lab, Lab) and lab.inventory == tmp_path / "lab.toml"
    assert not (tmp_path / "lab.toml").exists()  # nothing is loaded or created by choosing


def test_both_answer_the_same_questions():
    assert _public(Embedded) == _public(Lab)
    assert _public(Embedded) >= {n for n in vars(wh.Where) if not n.startswith("_")}


def test_a_child_command_is_handed_the_testbed(tmp_path):
    assert where_for(None).argv() == []
    assert where_for(tmp_path / "lab.toml").argv() == ["--testbed", str(tmp_path / "lab.toml")]


def test_a_report_names_the_testbed(tmp_path):
    assert where_for(None).description() == "the embedded one-machine testbed"
    assert where_for(Path("labs/x.toml")).description() == "the lab of labs/x.toml"


def test_only_the_embedded_testbed_runs_this_machines_qemu(tmp_path):
    assert where_for(None).runs_here is True
    assert where_for(tmp_path / "lab.toml").runs_here is False


def test_meta_json_records_a_lab_only(tmp_path):
    meta: dict = {"kind": "sweep"}
    where_for(None).record(meta)
    assert meta == {"kind": "sweep"}
    inv = _inv(tmp_path)
    where_for(inv).record(meta)
    assert list(meta) == ["kind", "testbed"] and meta["testbed"] == record(inv)
    assert meta["testbed"] == {
        "kind": "lab", "inventory": str(inv.resolve()), "sha256": hashlib.sha256(inv.read_bytes()).hexdigest(),
    }  # fmt: skip


def test_the_history_names_a_lab_by_its_inventorys_content(tmp_path):
    assert where_for(None).history_id() == EMBEDDED_ID == "embedded"
    inv = _inv(tmp_path)
    a = where_for(inv).history_id()
    assert a == "lab:" + hashlib.sha256(inv.read_bytes()).hexdigest()[:16]
    inv.write_text("name = 'edited'\n")
    assert where_for(inv).history_id() != a


def test_a_lab_run_takes_no_fault(tmp_path):
    faults = ("link-down", "gen-dies")
    assert where_for(None).faults(iter(faults)) == list(faults)
    assert where_for(tmp_path / "lab.toml").faults(iter(faults)) == []


def test_either_gives_the_value_of_the_testbed(tmp_path):
    assert where_for(None).either("here", "lab") == "here"
    assert where_for(tmp_path / "lab.toml").either("here", "lab") == "lab"


def test_a_missing_inventory_is_one_line(tmp_path):
    where_for(None).check_exists()
    where_for(_inv(tmp_path)).check_exists()
    gone = tmp_path / "gone.toml"
    with pytest.raises(ConfigError) as err:
        where_for(gone).check_exists()
    assert str(err.value) == f"TESTBED={gone}: no such inventory (docs/testbed.md)"


def test_the_embedded_testbed_has_no_hosts_to_watch():
    with where_for(None).leak_watch() as watch:
        assert isinstance(watch, NoHostLeaks)
        before = watch.before_trial()
        assert before == set()
        assert watch.leaks(before, "vm0000aa", 0.0, killed=True) == []


def test_a_labs_watch_is_lableaks_of_its_inventory(tmp_path, monkeypatch):
    made = []
    monkeypatch.setattr(wh, "LabLeaks", lambda path: made.append(path) or "a LabLeaks")
    assert where_for(tmp_path / "lab.toml").leak_watch() == "a LabLeaks"
    assert made == [tmp_path / "lab.toml"]


def test_clean_testbed_does_nothing_beyond_this_machine_embedded(monkeypatch):
    monkeypatch.setattr("migrate.testbed.inventory.load", lambda p: pytest.fail("no inventory to load"))
    assert where_for(None).clean_hosts() == []


@pytest.mark.parametrize(
    "done, xen, last",
    [
        ([], [], "lab1: nothing left by dead runs"),
        (["R1: removed x"], ["R1 dom0: destroyed domain d"], "lab1: 2 action(s)"),
    ],
)
def test_clean_testbed_on_a_lab_cleans_its_hosts_and_closes_them(tmp_path, monkeypatch, done, xen, last):
    inv = SimpleNamespace(name="lab1", deploy_dir="/opt/vrmig")
    closed = []
    host = SimpleNamespace(close=lambda: closed.append(1))
    monkeypatch.setattr("migrate.testbed.inventory.load", lambda p: inv)
    monkeypatch.setattr("migrate.testbed.hosts.connect", lambda i, d: {"A": host, "B": host})
    monkeypatch.setattr("migrate.testbed.labbed.clean_lab", lambda hosts, d: list(done) if d == "/opt/vrmig" else [])
    monkeypatch.setattr("migrate.labs.cleanup.clean_xen_dom0s", lambda i, d: list(xen))
    assert where_for(tmp_path / "lab.toml").clean_hosts() == [*done, *xen, last]
    assert closed == [1, 1]


def test_a_sweeps_meta_json_reads_back_into_where_it_ran(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert wh.recorded_where({}) is where_for(None)
    meta: dict = {}
    where_for(Path(_inv(tmp_path).name)).record(meta)  # a relative TESTBED=: recorded absolute
    back = wh.recorded_where(meta)
    assert isinstance(back, Lab) and back.inventory == (tmp_path / "lab.toml").resolve()
    back.check_resume(tmp_path, meta, None)
    back.check_resume(tmp_path, meta, Path("lab.toml"))
    with pytest.raises(ConfigError, match=r"ran on the embedded testbed: drop TESTBED=lab\.toml"):
        wh.recorded_where({}).check_resume(tmp_path, {}, Path("lab.toml"))
