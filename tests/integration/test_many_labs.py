"""A campaign across two emulated labs on Dask distributed (docs/many-labs.md): the session's
shared lab and a second one of its own (lab-up, hosts-setup of the BIRD image only), a scheduler
and one worker per lab, all real processes on this machine.

One campaign of HV=criu stop-and-copy migrations (2 rates x 2 repetitions): one of the second
lab's runs is cut by a SIGKILL of its worker's whole process group (the worker and its run: a
lab lost with its orchestrator); the campaign completes with every run recorded once, the lost
attempt recorded as interrupted, its run done again on the other lab, the two labs' runs pooled
into one point per rate (one fingerprint), and ``clean-testbed`` removes what the killed run left
on the second lab's hosts.  Bad input on the submitting side gets one line, exit 2, and nothing
is created: no scheduler, no worker, a second worker for a lab, labs that differ (an MTU)."""

from __future__ import annotations

import csv
import json
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from migrate.testbed.inventory import load
from tests.integration.conftest import REPO
from tests.integration.test_lab_migrate import (
    ROLES,
    _processes_after_grace,
    _require,
    _runs_on_hosts,
    _ssh,
    _taps_as_set_up,
)

pytestmark = pytest.mark.integration

PY = sys.executable
READY_S = 120.0
CAMPAIGN = """
[campaign]
name = "two-labs"
reps = 2
seed = 11

[defaults]
HV = "criu"
ROUTER = "bird"
MODE = "stopcopy"
DURATION = "6"
MIGRATE_AT = "2"

[grid]
RATE = ["1M", "10M"]
"""


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "VRMIG_PROGRESS": "0"}


def _cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PY, "-m", "migrate", *args], cwd=REPO, capture_output=True, text=True, timeout=timeout,
                          env=_env(), check=False)  # fmt: skip


class Daemon:
    """A ``vrmig scheduler`` or ``vrmig worker`` in a session of its own, its output in ``log``;
    stopped by PID (its group) on exit."""

    def __init__(self, log: Path, *args: str) -> None:
        self.log = log
        self.out = log.open("w")
        self.proc = subprocess.Popen([PY, "-m", "migrate", *args], cwd=REPO, env=_env(), stdout=self.out,
                                     stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip

    def wait_for(self, text: str, timeout_s: float = READY_S) -> str:
        """The first line of its output containing ``text`` (it must not exit first)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for line in self.log.read_text().splitlines():
                if text in line:
                    return line
            assert self.proc.poll() is None, f"exited {self.proc.returncode}: {self.log.read_text()[-3000:]}"
            time.sleep(0.1)
        raise AssertionError(f"no {text!r} within {timeout_s} s: {self.log.read_text()[-3000:]}")

    def kill_group(self) -> None:
        """SIGKILL its whole process group (it and every child of it in the group)."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill_group()
        self.out.close()


@pytest.fixture(scope="module")
def second_lab(tmp_path_factory) -> Iterator[Path]:
    """A lab of this module's own, with the helpers, CRIU and the BIRD image deployed."""
    _require()
    work = tmp_path_factory.mktemp("second-lab")
    up = _cli("lab-up", "--name", "m" + secrets.token_hex(3), timeout=300)
    assert up.returncode == 0 and up.stdout.strip().endswith(".toml"), up.stderr[-3000:]
    inv = Path(up.stdout.strip().splitlines()[-1])
    try:
        setup = _cli("hosts-setup", "--testbed", str(inv), "--profiles", "bird", "--results", str(work), timeout=900)
        assert setup.returncode == 0, setup.stdout[-3000:] + setup.stderr[-3000:]
        yield inv
    finally:
        down = _cli("lab-down", str(inv), timeout=120)
        assert down.returncode == 0, down.stderr


def _one_line_exit_2(cp: subprocess.CompletedProcess[str], says: str) -> None:
    errors = [line for line in cp.stderr.splitlines() if line.startswith("vrmig: error: ")]
    assert cp.returncode == 2 and len(errors) == 1 and says in errors[0], (cp.returncode, cp.stderr[-3000:])


def test_a_campaign_spreads_over_two_labs_survives_a_lost_worker_and_pools_alike_labs(shared_lab, second_lab, tmp_path):
    _require()
    prepared = shared_lab.get()
    assert prepared.setup.returncode == 0, prepared.setup.stderr
    lab1, lab2 = prepared.inventory, second_lab
    name1, name2 = load(lab1).name, load(lab2).name
    camp = tmp_path / "two-labs.toml"
    camp.write_text(CAMPAIGN)
    results = tmp_path / "results"

    # no scheduler there: one line, exit 2, nothing created
    cp = _cli("campaign", str(camp), "--scheduler", "tcp://127.0.0.1:1", "--results", str(results))
    _one_line_exit_2(cp, "SCHEDULER=tcp://127.0.0.1:1: no Dask scheduler answers there")
    assert not results.exists()

    daemons: list[Daemon] = []
    try:
        sched = Daemon(tmp_path / "scheduler.log", "scheduler", "--port", "0")
        daemons.append(sched)
        address = _address(sched)
        cp = _cli("campaign", str(camp), "--scheduler", address, "--results", str(results))
        _one_line_exit_2(cp, "no lab worker is connected")
        assert not results.exists()

        w1 = Daemon(tmp_path / "w1.log", "worker", "--testbed", str(lab1), "--scheduler", address,
                    "--results", str(tmp_path / "w1"))  # fmt: skip
        w2 = Daemon(tmp_path / "w2.log", "worker", "--testbed", str(lab2), "--scheduler", address,
                    "--results", str(tmp_path / "w2"))  # fmt: skip
        daemons += [w1, w2]
        w1.wait_for(f"holds lab {name1}")
        w2.wait_for(f"holds lab {name2}")
        again = _cli("worker", "--testbed", str(lab2), "--scheduler", address, "--results", str(tmp_path / "w3"))
        _one_line_exit_2(again, f"lab {name2} already has a worker")

        # the second lab made unlike the first (jumbo frames on A's NIC): the campaign is refused,
        # the differing field named, nothing created; then alike again
        inv2 = load(lab2)
        mtu = ["ip", "link", "set", "dev", str(inv2.host("A").interface), "mtu"]
        assert _ssh(inv2, "A", *mtu, "9000").returncode == 0
        try:
            cp = _cli("campaign", str(camp), "--scheduler", address, "--results", str(results))
        finally:
            assert _ssh(inv2, "A", *mtu, "1500").returncode == 0
        _one_line_exit_2(cp, "the labs differ: A.nics (")
        assert f"{name1}: veth mtu 1500" in cp.stderr and f"{name2}: veth mtu 9000" in cp.stderr, cp.stderr
        assert not results.exists()

        # the campaign; the second lab's worker is killed with its run once its second run moves traffic
        log = tmp_path / "campaign.log"
        submit = Daemon(log, "campaign", str(camp), "--scheduler", address, "--results", str(results))
        daemons.append(submit)
        runs2 = tmp_path / "w2" / f"worker-{name2}" / "runs"
        deadline = time.monotonic() + 300
        killed = None
        while time.monotonic() < deadline and submit.proc.poll() is None:
            dirs = sorted(d for d in runs2.glob("*") if d.is_dir()) if runs2.is_dir() else []
            actions = dirs[1] / "actions.jsonl" if len(dirs) >= 2 else None
            if actions is not None and actions.is_file() and "traffic-start" in actions.read_text():
                killed = json.loads((dirs[1] / "meta.json").read_text())["testbed"]["prefix"]
                w2.kill_group()
                break
            time.sleep(0.1)
        assert killed is not None, f"the second lab never started a second run: {log.read_text()[-3000:]}"
        assert submit.proc.wait(timeout=300) == 0, log.read_text()[-5000:]
        _check_campaign(log, name1, name2)
        _check_cleaned(lab2, killed)

    finally:
        for d in reversed(daemons):
            d.stop()


def _check_campaign(log: Path, name1: str, name2: str) -> None:
    out = log.read_text()
    d = Path(out.strip().splitlines()[-1])
    meta = json.loads((d / "meta.json").read_text())
    state = json.loads((d / "state.json").read_text())
    assert meta["engine"]["differences"] == {} and set(meta["engine"]["labs"]) == {name1, name2}
    # every run once, completed; the lost one interrupted on the second lab and done on the first
    assert sorted(state["runs"]) == sorted(r["run_id"] for r in meta["order"]) and len(state["runs"]) == 4
    assert all(r["status"] == "completed" for r in state["runs"].values()), state["runs"]
    lost = [a for a in state["attempts"] if a["status"] == "interrupted"]
    assert len(lost) == 1 and lost[0]["lab"] == name2 and "was lost during this run" in lost[0]["cause"], state
    assert state["runs"][lost[0]["run_id"]]["lab"] == name1
    assert {r["lab"] for r in state["runs"].values()} == {name1, name2}
    for r in state["runs"].values():
        rmeta = json.loads((d / r["run_dir"] / "meta.json").read_text())
        assert rmeta["worker"]["lab"] == r["lab"] and len(rmeta["worker"]["inventory_sha256"]) == 64
        assert rmeta["worker"]["fingerprint_sha256"] == meta["engine"]["labs"][r["lab"]]["fingerprint_sha256"]
    # both labs' runs pooled: one point per rate, two runs each
    points = list(csv.DictReader((d / "points.csv").open()))
    assert len(points) == 2 and all(p["n_runs"] == "2" for p in points), points
    assert {row["lab"] for row in csv.DictReader((d / "runs.csv").open())} == {name1, name2}
    assert "Per lab" in (d / "report.html").read_text()
    from migrate.campaigns.distributed import overhead

    o = overhead(state["runs"].values()).summary()
    print(f"\nengine overhead per run (ms): {json.dumps(o)}")
    assert o["n"] == 4 and o["dispatch_ms"]["median"] is not None


def _check_cleaned(lab2: Path, killed: str) -> None:
    """The killed run's leftovers on the second lab's hosts: found by clean-testbed from its state files."""
    inv2 = load(lab2)
    assert _processes_after_grace(f"/runs/{killed}") == []
    # the killed run's keepers killed its container (its init a session of its own; no other
    # container runs now) and put R1's and R2's taps back
    assert _processes_after_grace("vrmig-ct-init") == []
    assert _taps_as_set_up(inv2) == {"R1": [], "R2": []}
    assert any(killed in v for v in _runs_on_hosts(inv2).values()), "expected the killed run's directories"
    res = _cli("clean-testbed", "--testbed", str(lab2), timeout=120)
    assert res.returncode == 0, res.stderr
    assert _runs_on_hosts(inv2) == {r: [] for r in ROLES}


def _address(d: Daemon) -> str:
    """The scheduler's address: the last word of its line ``scheduler at tcp://...``."""
    line = d.wait_for("scheduler at tcp://", 60)
    return line.split()[2].rstrip(":")
