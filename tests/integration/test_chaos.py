"""Short chaos run (CI): faults and signals leave nothing behind and lose no result; a SIGKILLed
orchestrator's run (QEMU over QMP, libvirt's QEMU, a CRIU container) disappears by itself; if its
reaper is killed too, the leftovers are detected and removed from the state file."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from migrate.campaigns import chaos
from migrate.core.registry import REAPER_WHY, clean_stale, pid_alive
from tests.integration.conftest import REPO, missing_from_setup, require_root_and

pytestmark = pytest.mark.integration
TOOLS = ("qemu-system-x86_64", "irtt", "crosstraffic/bin/vrgen", "probes/bin/vrsampler")
HV_TOOLS = {"kvm": (), "kvm-libvirt": ("libvirtd",), "criu": ("iptables", "unshare")}
BOOT_WAIT_S = 180


def _guest(profile: str = "frr"):
    from routers.errors import RouterError
    from routers.guest import guest_image

    try:
        guest_image(profile)
    except RouterError as err:
        missing_from_setup(err)


def _needs(hv: str) -> None:
    require_root_and(*TOOLS, *HV_TOOLS[hv])
    _guest("bird" if hv == "criu" else "frr")
    if hv == "kvm-libvirt":
        pytest.importorskip("libvirt", reason="the libvirt binding: run `make setup`")
    if hv == "criu":
        from migrate.core.errors import DependencyError
        from migrate.drivers.criu.tool import locate

        try:
            locate()
        except DependencyError as err:
            missing_from_setup(err)


def _start_until_running(hv: str, tmp_path):
    """Start a chaos trial's run and return once the router runs (observed in its action log):
    (orchestrator, run directory, prefix, state file contents)."""
    argv = chaos.trial_argv(hv, "SIGKILL", tmp_path)
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.monotonic() + BOOT_WAIT_S
    while True:
        actions = list(tmp_path.glob("*/actions.jsonl"))
        if actions and '"router-ready"' in actions[0].read_text():
            break
        assert proc.poll() is None, proc.stderr.read().decode()
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"{hv}: the router did not run within {BOOT_WAIT_S} s")
        time.sleep(0.05)
    run_dir = next(p for p in tmp_path.iterdir() if p.is_dir())
    prefix = json.loads((run_dir / "meta.json").read_text())["testbed"]["prefix"]
    state = json.loads((chaos.STATE_ROOT / prefix / "state.json").read_text())
    return proc, run_dir, prefix, state


def _full_cmdline(pid: int) -> str:
    """The whole command line (the detector's is cut at 120 characters)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _router_seen(hv: str, running: dict[int, str]) -> bool:
    """The detector saw the router itself, however it was started."""
    if hv == "kvm-libvirt":  # libvirt's child, with a cleared environment: found by -name
        # a QEMU release's command line starts with its long private path and -L directories
        return any("guest=vrmig-" in _full_cmdline(pid) for pid in running)
    if hv == "criu":  # the container's init: empty environment, found by its root
        return any("vrmig-ct-init" in cmd for cmd in running.values())
    return any("qemu-system" in cmd for cmd in running.values())


def _reaper_story(prefix: str, state: dict) -> str:
    """What the reaper left to read when it did not finish: alive or not, and its log."""
    reaper = state.get("reaper") or {}
    alive = bool(reaper) and pid_alive(reaper["pid"], reaper["starttime"])
    log_file = chaos.STATE_ROOT / prefix / "reaper.log"
    text = log_file.read_text(errors="replace") if log_file.exists() else "(no reaper.log)"
    return f"reaper {reaper.get('pid')} {'still running' if alive else 'exited'}; reaper.log: {text[-2000:]}"


@pytest.mark.parametrize("hv", ["kvm", "kvm-libvirt", "criu"])
def test_a_sigkilled_run_disappears_by_itself(hv, tmp_path):
    """Nothing outlives the orchestrator: its helpers die with it (parent-death signal), its
    reaper stops libvirt's QEMU / the container and removes namespaces and state, and marks the
    run interrupted; no clean-testbed runs."""
    _needs(hv)
    proc, run_dir, prefix, state = _start_until_running(hv, tmp_path)
    running = chaos.run_processes(prefix)
    seen = _router_seen(hv, running)  # before the kill: the reaper stops the router after it
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert seen, running
    leaks = chaos.run_leaks(prefix, grace_s=chaos.REAPER_GRACE_S)
    assert leaks == [], _reaper_story(prefix, state)
    # the reaper still marks the run interrupted after the last resource is gone, then exits
    deadline = time.monotonic() + chaos.REAPER_GRACE_S
    while pid_alive(state["reaper"]["pid"], state["reaper"]["starttime"]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not pid_alive(state["reaper"]["pid"], state["reaper"]["starttime"]), "the reaper did not exit"
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["status"] == "interrupted" and meta["failure"] == REAPER_WHY


def test_leftovers_of_a_run_whose_reaper_died_too_are_found_and_cleaned(tmp_path):
    """SIGKILL the orchestrator and its reaper at once (DRIVER=libvirt): libvirt's QEMU and the
    namespaces stay, the detector finds the QEMU by its -name, and clean_stale() (what the next run
    and `make clean-testbed` do) removes exactly that run's leftovers from its state file."""
    _needs("kvm-libvirt")
    proc, run_dir, prefix, state = _start_until_running("kvm-libvirt", tmp_path)
    os.kill(state["reaper"]["pid"], signal.SIGKILL)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    try:
        time.sleep(1.0)  # the helpers' parent-death signals
        left = chaos.run_leaks(prefix, grace_s=0)
        assert any(x.startswith(f"{prefix}-") for x in left), left  # namespaces
        # libvirt's QEMU, not tagged, found by name (past the 120 characters a leak line shows)
        assert any("guest=vrmig-" in _full_cmdline(int(x.split()[1])) for x in left if x.startswith("pid ")), left
        assert not any("libvirtd" in x for x in left), left  # the daemons died with the orchestrator
    finally:
        assert clean_stale(only={prefix}) == [prefix]
    assert chaos.run_leaks(prefix) == []
    assert json.loads((run_dir / "meta.json").read_text())["status"] == "interrupted"


def test_process_detector_sees_a_tagged_process():
    """The leak detector is able to fail: a process carrying a run's tag is found."""
    require_root_and()
    tag = "vm0feed1"
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


def test_trial_leak_check_needs_no_prefix():
    """A trial that died before naming its prefix is still checked: anything new that names a
    run prefix and has no live orchestrator is a leak."""
    require_root_and()
    before = chaos.Artefacts.now()
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", "vrmig-vm0feed2-R1"])
    try:
        deadline = time.monotonic() + 5
        while not chaos.trial_leaks(before, None, grace_s=0) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert any(str(proc.pid) in x for x in chaos.trial_leaks(before, None, grace_s=0))
    finally:
        proc.kill()
        proc.wait()
    assert chaos.trial_leaks(before, None, grace_s=chaos.LEAK_GRACE_S) == []


def test_short_chaos_run_has_no_leaks_and_no_lost_results(tmp_path):
    require_root_and(*TOOLS)
    _guest()
    trials = int(os.environ.get("CHAOS_TRIALS", "3"))
    hvs = tuple(os.environ.get("CHAOS_HVS", "kvm").split(","))
    totals = chaos.overall(
        chaos.run_chaos_per_hv(trials, seed=int(os.environ.get("CHAOS_SEED", "7")), results=tmp_path, hvs=hvs)
    )
    print(totals.line("chaos"))
    assert totals.trials == trials * len(hvs)
    assert totals.hung == 0, totals.problems
    assert totals.leaks == 0, totals.problems
    assert totals.lost_results == 0, totals.problems


SIGTERM_IN_WINDOW = """
import os, signal, sys
from migrate.core import meta as metamod

real = metamod.git_commit


def git_commit_then_sigterm():
    # the signal lands between the results directory's creation and its meta.json's first write
    os.kill(os.getpid(), signal.SIGTERM)
    return real()


metamod.git_commit = git_commit_then_sigterm
from migrate.cli.main import main

sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "--rate", "10M", "--duration", "5", "--migrate-at", "2", "--after", "1"],
        ["calibrate", "--durations", "50", "--reps", "1"],
        ["baseline", "--hv", "none", "--rates", "10M", "--sizes", "1500", "--duration", "2"],
    ],
    ids=["run", "calibrate", "baseline"],
)
def test_a_sigterm_before_meta_json_is_written_leaves_an_interrupted_run(tmp_path, argv, no_leftovers):
    """A signal between the results directory's creation and meta.json's first write: the run
    is recorded interrupted (exit 130), never a directory without meta.json (a lost result, as
    make chaos found one in CI)."""
    require_root_and(*TOOLS)
    _guest()
    proc = subprocess.run([sys.executable, "-c", SIGTERM_IN_WINDOW, *argv, "--results", str(tmp_path)],
                          cwd=REPO, capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    assert proc.returncode == 130, proc.stderr[-2000:]
    dirs = [d for d in tmp_path.iterdir() if d.is_dir()]
    assert len(dirs) == 1, dirs
    meta = json.loads((dirs[0] / "meta.json").read_text())
    assert meta["status"] == "interrupted" and "SIGTERM" in meta["failure"], meta
