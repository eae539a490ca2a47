"""``make nightly AB=<commit>`` for real: the accepted commit checked out in a git worktree, its
helpers and guest built there, its runs interleaved with this checkout's in the same night, both
arms judged; the worktree gone afterwards, also after a SIGINT in the middle.  Kept small: a
short stop-and-copy point, 2 runs per arm (root, QEMU, the built guest, git)."""

import json
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.integration.conftest import REPO, require_root_and, start_vrmig

pytestmark = pytest.mark.integration

MATRIX = """
[nightly]
reps = 2
budget_s = 600
expected_run_s = 30
alpha = 0.1
history_nights = 5

[defaults]
HV = "kvm"
DURATION = 5.0
MIGRATE_AT = 2.0
AFTER = 2.0
MEM = 256
ROUTER = "frr"

[[point]]
MODE = "stopcopy"
RATE = "10M"
SIZE = 1500

[metrics]
downtime_packets_s = { worse = "higher", min_rel = 0.25, min_abs = 0.010 }

[ab]
point = "stopcopy-10M-1500"
reps = 2
alpha = 0.2
budget_s = 900
metrics = { downtime_packets_s = { worse = "higher", min_rel = 0.25, min_abs = 0.010 } }
"""


def _head() -> str:
    return subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()  # fmt: skip


def _ab_trees() -> list[str]:
    """Worktrees of a night's A/B still known to git or present in the temporary directory."""
    listed = subprocess.run(["git", "-C", str(REPO), "worktree", "list", "--porcelain"], capture_output=True,
                            text=True, check=True).stdout  # fmt: skip
    trees = [line.split(" ", 1)[1] for line in listed.splitlines() if line.startswith("worktree ")]
    known = [t for t in trees if "vrmig-ab-" in t]
    return known + [str(p) for p in Path(tempfile.gettempdir()).glob("vrmig-ab-*")]


@pytest.fixture(scope="module")
def own_ab_cache():
    """The accepted arm's guest cache of HEAD (``ab.arm_cache``), shared by this module's nights
    (the first builds it) and removed after them if they created it (a night's cache of another
    commit is the night's to keep)."""
    import shutil

    from routers.paths import default_cache

    cache = default_cache() / "ab" / _head()  # where ab.arm_cache puts it
    existed = cache.exists()
    yield cache
    if not existed:
        shutil.rmtree(cache, ignore_errors=True)


def _ready() -> None:
    require_root_and("qemu-system-x86_64", "irtt", "crosstraffic/bin/vrgen", "probes/bin/vrsampler")
    if subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, check=False).returncode:
        pytest.skip("the checkout is not a git repository: the A/B needs the accepted commit's tree")


def test_nightly_ab_runs_both_commits_interleaved_and_judges_them(tmp_path, no_leftovers, own_ab_cache):
    _ready()
    assert _ab_trees() == []
    (tmp_path / "m.toml").write_text(MATRIX)
    head = _head()
    proc = subprocess.run(
        [sys.executable, "-m", "migrate", "nightly", "--matrix", str(tmp_path / "m.toml"), "--results",
         str(tmp_path / "results"), "--ab", "HEAD"],
        cwd=REPO, capture_output=True, text=True, timeout=1800, check=False,
    )  # fmt: skip
    assert proc.returncode in (0, 1), proc.stderr[-3000:] + proc.stdout[-2000:]
    night = Path(proc.stdout.strip().splitlines()[-1])
    doc = json.loads((night / "ab" / "ab.json").read_text())
    assert doc["commits"]["accepted"] == head, doc["commits"]
    assert sorted(doc["schedule"]) == ["accepted", "accepted", "tonight", "tonight"]
    assert [r["arm"] for r in doc["runs"]] == doc["schedule"]
    for r in doc["runs"]:
        meta = json.loads((Path(r["run_dir"]) / "meta.json").read_text())
        assert Path(r["run_dir"]).parent == night / "ab" / r["arm"]
        assert meta["status"] == r["status"] == "completed", meta.get("failure")
        assert r["downtime_packets_s"] is not None and r["downtime_packets_s"] > 0, r
        if r["arm"] == "accepted":  # the worktree's code ran: its commit, clean, and its own guest cache
            assert meta["git_commit"] == head, meta["git_commit"]
            assert "/ab/" + head in meta["hypervisor"]["guest_image"]["kernel"], meta["hypervisor"]["guest_image"]
        else:
            assert meta["git_commit"].removesuffix("-dirty") == head
            assert "/ab/" not in meta["hypervisor"]["guest_image"]["kernel"]
    [check] = doc["checks"]
    assert check["metric"] == "downtime_packets_s A/B" and check["status"] in ("pass", "regression"), check
    assert (check["n_base"], check["n_cand"]) == (2, 2)
    assert "downtime_packets_s A/B" in proc.stdout and "downtime_packets_s A/B" in (night / "junit.xml").read_text()
    assert _ab_trees() == [], "the accepted commit's worktree was left behind"


def test_nightly_ab_interrupted_leaves_no_worktree_and_no_run(own_ab_cache, tmp_path, no_leftovers):
    _ready()
    (tmp_path / "m.toml").write_text(MATRIX)
    log = tmp_path / "nightly.log"
    proc = start_vrmig("nightly", ["--matrix", str(tmp_path / "m.toml"), "--results", str(tmp_path / "results"),
                                   "--ab", "HEAD"], log)  # fmt: skip
    try:
        deadline = time.monotonic() + 1200
        started = []
        while not started:  # the first A/B run has written its meta.json: a run is in flight
            assert proc.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, "no A/B run started"
            started = list((tmp_path / "results" / "nightly").glob("*-night/ab/*/*/meta.json"))
            time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=180) == 130, log.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    meta = json.loads(started[0].read_text())
    assert meta["status"] in ("interrupted", "completed"), meta["status"]
    assert _ab_trees() == [], "the accepted commit's worktree was left behind"
