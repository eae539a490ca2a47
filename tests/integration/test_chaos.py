"""Short chaos run (CI): faults and signals leave nothing behind and lose no result; plus a check
that the leak detector itself sees what a SIGKILLed run leaves before clean-testbed runs."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from migrate import chaos
from tests.integration.conftest import require_root_and

pytestmark = pytest.mark.integration
TOOLS = ("qemu-system-x86_64", "irtt", "crosstraffic/bin/vrgen", "probes/bin/vrsampler")


def _guest():
    from routers.errors import RouterError
    from routers.guest import guest_image

    try:
        guest_image("frr")
    except RouterError as err:
        pytest.skip(str(err))


def test_sigkill_leaves_detectable_leftovers_that_clean_testbed_removes(tmp_path):
    require_root_and(*TOOLS)
    _guest()
    argv = [sys.executable, "-m", "migrate", "run", *chaos.RUN_FLAGS, "--results", str(tmp_path)]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.monotonic() + 120
    # kill it once the router is booting: observed from the run's own action log
    while time.monotonic() < deadline:
        actions = list(tmp_path.glob("*/actions.jsonl"))
        if actions and "boot" in actions[0].read_text():
            break
        assert proc.poll() is None, proc.stderr.read().decode()
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    run_dir = next(p for p in tmp_path.iterdir() if p.is_dir())
    prefix = json.loads((run_dir / "meta.json").read_text())["testbed"]["prefix"]
    before = chaos.run_leaks(prefix, grace_s=0)
    assert any(x.startswith(f"{prefix}-") for x in before), before  # namespaces survive a SIGKILL
    # processes do not: every child was started with PDEATHSIG=KILL (setpriv), so none escapes,
    # not even one forked before its PID reached the state file
    deadline = time.monotonic() + 5
    while chaos.run_processes(prefix) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert chaos.run_processes(prefix) == {}, chaos.run_processes(prefix)
    subprocess.run([sys.executable, "-m", "migrate", "clean-testbed"], check=True, capture_output=True)
    assert chaos.run_leaks(prefix) == []
    assert json.loads((run_dir / "meta.json").read_text())["status"] == "interrupted"


def test_process_detector_sees_a_tagged_process():
    """The leak detector is able to fail: a process carrying a run's tag is found."""
    require_root_and()
    tag = "vmfeed01"
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(30)"], env={**os.environ, "VRMIG_RUN_PREFIX": tag}
    )
    try:
        deadline = time.monotonic() + 5
        while proc.pid not in chaos.run_processes(tag) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proc.pid in chaos.run_processes(tag)
        assert chaos.run_leaks(tag, grace_s=0) != []
    finally:
        proc.kill()
        proc.wait()
    assert chaos.run_leaks(tag) == []


def test_short_chaos_run_has_no_leaks_and_no_lost_results(tmp_path):
    require_root_and(*TOOLS)
    _guest()
    trials = int(os.environ.get("CHAOS_TRIALS", "3"))
    totals = chaos.run_chaos(trials, seed=int(os.environ.get("CHAOS_SEED", "7")), results=tmp_path)
    print(f"chaos: trials {totals.trials}, leaks {totals.leaks}, lost results {totals.lost_results}")
    assert totals.trials == trials
    assert totals.leaks == 0, totals.problems
    assert totals.lost_results == 0, totals.problems
