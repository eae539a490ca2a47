"""make <target> VAR=value -> the target's command line (migrate/cli/make.py): one table, the
argument parser; values never pass through a shell line; unknown variables are refused."""

import subprocess
from pathlib import Path

import pytest

from migrate.cli import make
from migrate.core.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]


def test_every_option_is_a_variable_and_knobs_keep_their_own_names():
    table = dict(make.variables(make.subparser("run")))
    assert {"HV", "RATE", "DOWNTIME_LIMIT", "MIGBW", "QEMU_FIRMWARE", "PEER_DAEMON", "DIRTY_LIMIT"} <= set(table)
    assert table["MIGBW"].option_strings == ["--max-bandwidth"]
    assert "DEBUG" not in table and "HELP" not in table


def test_values_come_from_the_environment_as_single_words():
    argv = make.argv_for("migrate", {"RATE": "1; touch /tmp/vrmig-pwned", "MODE": "stopcopy", "HV": " "})
    assert argv[:1] == ["run"] and argv[argv.index("--rate") + 1] == "1; touch /tmp/vrmig-pwned"
    assert argv[argv.index("--mode") + 1] == "stopcopy" and "--hv" not in argv  # blank is unset


def test_makeflags_names_the_command_line_variables():
    assert make.command_line_variables(r"s -- A=x\ y DOWNTIMELIMIT=50 RATE=100\ M") == ["A", "DOWNTIMELIMIT", "RATE"]
    assert make.command_line_variables("s") == []


@pytest.mark.parametrize(
    ("target", "flags", "says"),
    [
        ("migrate", r" -- RATES=0,100M", "RATES (did you mean RATE?) is not a variable of make migrate"),
        ("sweep", r" -- REP=1", "REP (did you mean REPS?) is not a variable of make sweep"),
        ("migrate", r" -- XYZZY=1 RATE=1M", "XYZZY is not a variable of make migrate"),
    ],
)
def test_a_mistyped_variable_is_refused_with_the_nearest_name(target, flags, says):
    with pytest.raises(
        ConfigError, match=f"make {target}: {says.replace('?', '[?]').replace('(', '[(]').replace(')', '[)]')}"
    ):
        make.argv_for(target, {"MAKEFLAGS": flags})


def test_make_migrate_with_a_mistyped_variable_exits_2_and_starts_nothing():
    res = subprocess.run(["make", "-s", "migrate", "RATES=0,100M"], cwd=ROOT, capture_output=True, text=True)
    assert res.returncode == 2, res
    assert "RATES (did you mean RATE?) is not a variable of make migrate" in res.stderr
    assert "vrmig: building testbed" not in res.stderr


def test_make_help_lists_a_targets_variables_with_their_help():
    out = subprocess.run(["make", "-s", "help", "T=migrate"], cwd=ROOT, capture_output=True, text=True, check=True)
    lines = out.stdout.splitlines()
    assert lines[0] == "make migrate variables:"
    rows = {ln.split()[0]: ln for ln in lines[1:]}
    assert "(default precopy)" in rows["MODE"] and rows["SAMPLE_MS"].split(None, 1)[1].strip()
    assert all(len(r.split(None, 1)) == 2 for r in rows.values()), [r for r in rows.values() if len(r.split()) < 2]
