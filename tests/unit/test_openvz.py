"""HV=openvz: vzmigrate command construction, output parsing (real Virtuozzo 7 output quoted in
tests/fixtures/openvz/, and vzctl 4.x's messages as its source prints them), the hypervisor
figures, and the missing-tools refusal on a machine without OpenVZ (no root needed)."""

import os
from pathlib import Path

import pytest

from analysis.hypervisors.openvz import downtime, hypervisor_figures, parse_line, parse_output
from migrate.drivers.openvz import missing_tools, parse_status, vzctl_argv, vzmigrate_argv

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "openvz"
#: the ``--times`` table row format of vzctl's bin/vzmigrate.in (print_times): printf '  %20s: %6.2f\n'
TIMES_FMT = "  %20s: %6.2f"


def test_argv_live_and_offline_use_the_migration_link_address():
    assert vzmigrate_argv("198.18.254.2", "101", online=True) == ["vzmigrate", "--online", "-v", "198.18.254.2", "101"]
    assert vzmigrate_argv("198.18.254.2", "101", online=False) == ["vzmigrate", "-v", "198.18.254.2", "101"]
    assert vzmigrate_argv("r2", "7", True, ssh_options="-o Cipher=aes128-ctr")[1] == "--ssh=-o Cipher=aes128-ctr"
    with pytest.raises(ValueError):
        vzmigrate_argv("r2", "101; rm -rf /", True)  # argv only, and a CTID is a number
    assert vzctl_argv("status", "101") == ["vzctl", "status", "101"]


def test_vzctl_status_words():
    # the words vzmigrate.in itself reads from `vzctl --quiet status` (get_status: exist mounted state)
    assert parse_status("CTID 101 exist mounted running") == {"exists": True, "mounted": True, "running": True}
    assert parse_status("CTID 101 deleted unmounted down") == {"exists": False, "mounted": False, "running": False}


def test_real_virtuozzo7_output_of_a_failed_live_migration():
    """Quoted verbatim from checkpoint-restore/criu#494 (see tests/fixtures/openvz/README.md)."""
    text = (FIXTURES / "vz7_online_failed_criu494.txt").read_text().splitlines()
    # host receive times: one line per 10 ms, as the driver would stamp them
    rep = parse_output([(1000.0 + i * 0.01, ln) for i, ln in enumerate(text)])
    assert [p.name for p in rep.phases] == ["live-start"]
    assert rep.live is True
    assert rep.errors == ["error [-73] : Phaul service failed to live migrate CT"]
    start = rep.phase("live-start")
    assert start is not None and start.tool_t_s is not None
    # the relayed line carries two stamps; the message is what follows the inner one
    relayed = rep.lines[4]
    assert relayed.kind == "other" and relayed.message == "Phaul service failed to live migrate CT"
    assert relayed.tool_t_s is not None and relayed.tool_t_s - start.tool_t_s == pytest.approx(25.588)
    # the prompt line and the reporter's "..." are kept as unknown lines, never dropped
    assert [ln.kind for ln in rep.lines[:2]] == ["other", "other"]
    # no resume/completion: no downtime can be claimed, and the run is not completed
    down, why = downtime(rep)
    assert down is None and "no step after which" in why
    fig = hypervisor_figures(rep, 1000.0, 1030.0, exit_status=1)
    assert fig["completed"] is False and fig["duration_s"] == pytest.approx(30.0)
    assert fig["volume_bytes"] is None and "no transfer sizes" in fig["volume_reason"]


# Lines as OpenVZ's vzctl 4.x bin/vzmigrate.in prints them with -v (log 1: as is; log 2: three
# spaces, "   $@"), in the order of its live-migration path.  These are the script's own string
# literals, not a captured session (none was found; see tests/fixtures/openvz/README.md).
VZCTL4_LIVE = [
    "Locked CT 101",
    "Starting live migration of CT 101 to 198.18.254.2",
    "Preparing remote node",
    "   Copying config file",
    "Initializing remote quota",
    "Syncing private",
    "Live migrating container...",
    "   Suspending container",
    "   Dumping container",
    "   Copying dumpfile",
    "   Syncing private (2nd pass)",
    "Syncing 2nd level quota",
    "   Undumping container",
    "   Resuming container",
    "",
]


def test_vzctl4_live_messages_become_phases_with_receive_times():
    times = [0.0, 0.1, 0.3, 0.4, 0.5, 0.6, 5.0, 5.0, 5.1, 5.6, 5.9, 6.0, 6.1, 6.9, 7.2]
    rep = parse_output(list(zip(times, VZCTL4_LIVE, strict=True)))
    assert rep.ctid == "101" and rep.destination == "198.18.254.2" and rep.live is True
    assert [p.name for p in rep.phases] == [
        "locked", "start", "prepare-remote", "quota-init", "sync-private", "live-migrate", "suspend", "dump",
        "copy-dump", "sync-private-2", "quota-sync", "undump", "resume",
    ]  # fmt: skip
    assert rep.times is None and rep.errors == []
    # no --times table: suspend -> the line after "Resuming container" (resume returned), host clock
    down, why = downtime(rep)
    assert down == pytest.approx(7.2 - 5.0) and why.startswith("suspend -> ") and "receive-times" in why


def test_vzctl4_times_table_is_preferred_for_downtime():
    table = [TIMES_FMT % (label, v) for label, v in (
        ("Suspend + Dump", 0.64), ("Copy dump file", 0.31), ("Second rsync", 0.52), ("2nd level quota", 0.05),
        ("Undump + Resume", 0.78),
    )] + ["  " + " " * 20 + "  ------", TIMES_FMT % ("Total suspended time", 2.30), "", "Cleaning up"]  # fmt: skip
    rep = parse_output([*VZCTL4_LIVE, *table])
    assert rep.times is not None
    assert (rep.times.suspend_dump_s, rep.times.undump_resume_s, rep.times.total_suspended_s) == (0.64, 0.78, 2.3)
    assert rep.times.pcopy_after_suspend_s is None  # only ploop containers print it
    assert downtime(rep) == (2.3, "vzmigrate --times: Total suspended time")
    assert rep.phases[-1].name == "cleanup"
    fig = hypervisor_figures(rep, 10.0, 19.5, exit_status=0)
    assert fig["completed"] is True and fig["downtime_s"] == 2.3 and fig["duration_s"] == pytest.approx(9.5)


def test_vzctl4_offline_and_errors():
    lines = [
        (0.0, "Starting migration of CT 102 to r2"), (0.1, "Preparing remote node"), (0.2, "Syncing private"),
        (3.0, "Stopping container"), (4.5, "Starting container"), (6.0, "Cleaning up"),
    ]  # fmt: skip
    rep = parse_output(lines)
    assert rep.live is False and rep.ctid == "102"
    assert downtime(rep)[0] == pytest.approx(6.0 - 3.0)  # stop -> the line after "Starting container"
    bad = parse_output(["Starting live migration of CT 101 to r2", "Error: Failed to suspend container"])
    assert bad.errors == ["Error: Failed to suspend container"]
    assert hypervisor_figures(bad, 0.0, 1.0, exit_status=8)["completed"] is False
    assert parse_line("  Suspend + Dump:   0.64").kind == "time"
    assert parse_line("Checking live migration of CT 101 to r2").kind == "start"  # --dry-run wording


def test_missing_tools_are_named():
    assert missing_tools(lambda _t: None) == ["vzmigrate", "vzctl (or Virtuozzo's prlctl)"]
    assert missing_tools(lambda t: None if t == "vzctl" else f"/usr/sbin/{t}") == []  # Virtuozzo: prlctl
    assert missing_tools(lambda t: f"/usr/sbin/{t}") == []


def test_run_hv_openvz_here_is_one_line_exit_3_and_creates_nothing(tmp_path, monkeypatch, capsys):
    """`python -m migrate run --hv openvz` on a machine without OpenVZ (as root, with every other
    prerequisite satisfied): one line about the missing tools, exit 3, nothing created."""
    import shutil as sh

    import migrate.experiment.run
    from migrate.cli.main import main

    if any(sh.which(t) for t in ("vzmigrate", "vzctl", "prlctl")):
        pytest.skip("this machine has OpenVZ/Virtuozzo tools")
    monkeypatch.setattr(os, "geteuid", lambda: 0)  # the root check comes first; it is not what is tested
    monkeypatch.setattr(migrate.experiment.run.Instruments, "check", staticmethod(lambda: None))
    netns_before = set(os.listdir("/run/netns")) if os.path.isdir("/run/netns") else set()
    rc = main(["run", "--hv", "openvz", "--results", str(tmp_path / "results")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 3
    assert len(err) == 1 and "HV=openvz needs vzmigrate" in err[0] and "OpenVZ/Virtuozzo hosts" in err[0], err
    assert not (tmp_path / "results").exists()
    assert (set(os.listdir("/run/netns")) if os.path.isdir("/run/netns") else set()) == netns_before
