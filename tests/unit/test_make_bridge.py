"""make <target> VAR=value -> the target's command line (migrate/cli/make.py): one table, the
argument parser; values never pass through a shell line; unknown variables are refused before
anything runs; every target of the Makefile is in ``make help``."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from migrate.cli import make
from migrate.core.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
BRIDGED = [name for name, t in make.TARGETS.items() if t.bridged]
TABLES = {name: make.table(name) for name in BRIDGED}
#: make's own options for the runs below: never rebuild the venv or the helpers
NO_REBUILD = ["-s", "-o", ".venv/.installed", "-o", "venv", "-o", "helpers"]


def _make_env(**extra: str) -> dict[str, str]:
    """The environment of a make started here: none of the make these tests may run under."""
    drop = ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", make.GOALS_ENV, make.DRY_ENV)
    return {**{k: v for k, v in os.environ.items() if k not in drop}, **extra}


def _env(target: str, **variables: str) -> dict[str, str]:
    """The environment make gives the recipe of ``make <target> VAR=value ...``."""
    flags = " ".join(f"{k}={v.replace(' ', chr(92) + ' ')}" for k, v in variables.items())
    return {**variables, "MAKEFLAGS": f" -- {flags}" if flags else "", make.GOALS_ENV: target}


def _makefile_rules() -> dict[str, list[str]]:
    """target -> its recipe lines, read from the Makefile (rules, not variable assignments)."""
    rules: dict[str, list[str]] = {}
    current: list[str] = []
    for line in (ROOT / "Makefile").read_text().splitlines():
        if line.startswith("\t"):
            current.append(line.strip())
            continue
        m = re.match(r"^([A-Za-z0-9_.\-/ ]+):(?![:=])", line)
        if m and not line.startswith((".PHONY", ".DEFAULT_GOAL")) and "=" not in line.split(":", 1)[0]:
            current = []
            for name in m.group(1).split():
                rules[name] = current
        elif not line.startswith("#"):
            current = []
    return {k: v for k, v in rules.items() if not k.startswith(".")}


def _misspelt(target: str) -> tuple[str, str]:
    """(a misspelling of the target's longest variable, that variable)."""
    var = max(TABLES[target], key=len)
    return var[:-2] + var[-1], var


# --- the table -------------------------------------------------------------------------------


def test_every_option_is_a_variable_and_knobs_keep_their_own_names():
    table = dict(make.variables(make.subparser("run")))
    assert {"HV", "RATE", "DOWNTIME_LIMIT", "MIGBW", "QEMU_FIRMWARE", "PEER_DAEMON", "DIRTY_LIMIT"} <= set(table)
    assert table["MIGBW"].option_strings == ["--max-bandwidth"]
    assert "DEBUG" not in table and "HELP" not in table


def test_variables_keep_the_names_users_give_them():
    """The names the Makefile used before the bridge: a metavar where the option is named otherwise."""
    assert TABLES["lab-up"]["LAB_NAME"].option_strings == ["--name"]
    assert TABLES["lab-up"]["LAB_DIR"].option_strings == ["--dir"]
    assert TABLES["lab-up"]["DEPLOY_DIR"].option_strings == ["--deploy-dir"]
    assert TABLES["campaign"]["FILE"].dest == "files"
    assert TABLES["report"]["RUNS"].dest == "dirs" and TABLES["bench-qmp"]["RUNS"].dest == "dirs"
    assert TABLES["lab-down"]["TESTBED"].dest == "testbed"
    assert set(TABLES["compare"]) == {"A", "B", "OUT", "RESULTS"}
    assert "OUT" not in TABLES["bench-traffic"] and "RESULTS" not in TABLES["chaos"]  # the Makefile's


def test_every_target_of_the_makefile_is_in_the_table_and_bridged_recipes_call_the_bridge():
    rules = _makefile_rules()
    assert set(rules) == set(make.TARGETS)
    for name in BRIDGED:
        bridge = [i for i, line in enumerate(rules[name]) if line.startswith("$(MAKE_BRIDGE)")]
        assert bridge and rules[name][bridge[-1]] == f"$(MAKE_BRIDGE) {name}", (name, rules[name])
        before = rules[name][: bridge[0]]  # only guards that exit before the bridge checks anything
        assert all(line.startswith("@if [") and "exit 2" in line for line in before), (name, before)
        assert not any("$(call flag" in line for line in rules[name]), name
        if len(bridge) > 1:  # something is built between the check and the command
            assert rules[name][bridge[0]] == f"$(MAKE_BRIDGE) --check {name}", name


def test_every_variable_has_help_text():
    for name in BRIDGED:
        for var, action in TABLES[name].items():
            assert (action.help or "").strip(), (name, var)


# --- documented uses -------------------------------------------------------------------------

#: the documentation's example of a refused variable
REFUSED_EXAMPLES = {("migrate", "RATES")}
_USE = re.compile(r"\bmake ([a-z][a-z0-9-]*)((?:[ \t]+[A-Z][A-Z0-9_]*=\S*)+)")


def _documented_uses() -> list[tuple[str, str, str]]:
    """(target, variable, file) of every ``make <target> VAR=...`` in the documentation and the
    messages of the suite."""
    files = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    files += [ROOT / f / "README.md" for f in ("migrate", "routers", "crosstraffic", "probes", "analysis", "tests")]
    files += [
        p for pkg in ("migrate", "analysis", "routers", "probes", "crosstraffic") for p in (ROOT / pkg).rglob("*.py")
    ]
    uses = set()
    for f in files:
        if not f.is_file():
            continue
        for line in f.read_text().splitlines():
            for m in _USE.finditer(line):
                for var in re.findall(r"(?:^|\s)([A-Z][A-Z0-9_]*)=", m.group(2)):
                    uses.add((m.group(1), var, str(f.relative_to(ROOT))))
    return sorted(uses)


def test_the_documentation_names_targets_and_variables_that_exist():
    uses = _documented_uses()
    assert len(uses) > 50
    assert any(u[:2] == ("lab-up", "LAB_NAME") for u in uses) and any(u[:2] == ("report", "RUNS") for u in uses)

    def taken(target: str, var: str) -> bool:
        t = make.TARGETS.get(target)
        return t is not None and (not t.bridged or var in TABLES[target] or var in make.COMMON)

    wrong = [u for u in uses if u[:2] not in REFUSED_EXAMPLES and not taken(u[0], u[1])]
    assert wrong == []


def test_the_readme_table_names_variables_the_targets_take():
    rows = [ln for ln in (ROOT / "README.md").read_text().splitlines() if ln.startswith("| `")]
    checked = 0
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        targets = [t for t in re.findall(r"`([a-z][a-z0-9-]*)`", cells[0]) if t in make.TARGETS]
        bridged = [t for t in targets if make.TARGETS[t].bridged]
        if not bridged:
            continue
        taken = {v for t in bridged for v in TABLES[t]} | set(make.COMMON)
        named = re.findall(r"\b[A-Z][A-Z0-9_]+\b", " ".join(re.findall(r"`([^`]*)`", cells[2])))
        assert set(named) <= taken, (row, set(named) - taken)
        checked += 1
    assert checked >= 20


#: (target, its variables as on make's command line, the argv of its command), from the documentation
DOCUMENTED = [
    ("campaign", "FILE=campaigns/knobs-kvm.toml REPS=2 SEED=7", "campaign campaigns/knobs-kvm.toml --reps 2 --seed 7"),
    ("campaign", "FILE='a.toml b.toml' CHECK=1 TESTBED=lab.toml", "campaign a.toml b.toml --check --testbed lab.toml"),
    ("campaign", "RESUME=results/x", "campaign --resume results/x"),
    ("campaign", "FILE=c.toml SCHEDULER=tcp://s:1 LABS=axis", "campaign c.toml --scheduler tcp://s:1 --labs axis"),
    ("scheduler", "SCHEDULER_HOST=0.0.0.0 SCHEDULER_PORT=8786", "scheduler --host 0.0.0.0 --port 8786"),
    ("worker", "TESTBED=lab.toml SCHEDULER=tcp://s:8786 RESULTS=r",
     "worker --testbed lab.toml --scheduler tcp://s:8786 --results r"),
    ("paper", "REPS=3 PARTS=fig3 RESULTS=results/paper", "paper --reps 3 --parts fig3 --results results/paper"),
    ("paper", "FIG2=a FIG3=b TESTBED=lab.toml", "paper --fig2 a --fig3 b --testbed lab.toml"),
    ("report", "RUNS='results/a results/b' OUT=o", "report results/a results/b --out o"),
    ("compare", "A=x B=y OUT=z RESULTS=/tmp/cmp", "compare x y --out z --results /tmp/cmp"),
    ("nightly", "MATRIX=m.toml HISTORY=h TESTBED=t AB=HEAD RESULTS=r",
     "nightly --matrix m.toml --history h --results r --testbed t --ab HEAD"),
    ("nightly-accept", "NIGHT=n HISTORY=h RESULTS=results/nightly",
     "nightly-accept --night n --history h --results results/nightly"),
    ("clean-testbed", "TESTBED=lab.toml", "clean-testbed --testbed lab.toml"),
    ("hosts-check", "TESTBED=lab.toml MAX_OFFSET_MS=5 JSON=1",
     "hosts-check --testbed lab.toml --max-offset-ms 5 --json"),
    ("hosts-setup", "TESTBED=lab.toml PROFILES=frr,frr@8.4 RESULTS=/tmp/m",
     "hosts-setup --testbed lab.toml --profiles frr,frr@8.4 --results /tmp/m"),
    ("lab-up", "LAB_NAME=meas LAB_DIR=/tmp/l DEPLOY_DIR=/d XEN=1",
     "lab-up --name meas --dir /tmp/l --deploy-dir /d --xen"),
    ("lab-up", "XEN=0", "lab-up"),
    ("lab-down", "TESTBED=/run/vrmig-lab/lab/lab.toml", "lab-down /run/vrmig-lab/lab/lab.toml"),
    ("chaos", "TESTBED=l.toml HVS=criu TRIALS=8 XEN_TRIALS=2 SEED=11 RESULTS=/tmp/c",
     "--results /tmp/c/chaos --trials 8 --xen-trials 2 --seed 11 --hvs criu --testbed l.toml"),
    ("chaos", "", "--results results/chaos"),
    ("bench-lab", "TESTBED=l.toml HV=criu REPS=5 MODES=stopcopy DRIVERS=qmp RATE=10M MEM=128 DURATION=10 RESULTS=/tmp/",
     "--testbed l.toml --hv criu --reps 5 --modes stopcopy --drivers qmp --rate 10M --mem 128 --duration 10 "
     "--results /tmp/"),
    ("bench-lab-baseline", "TESTBED=l.toml ROUNDS=3 HV=kvm",
     "--out results/bench/lab-baseline --testbed l.toml --rounds 3 --hv kvm"),
    ("bench-lab-peering", "TESTBED=l.toml REPS=3", "--out results/bench/lab-peering --testbed l.toml --reps 3"),
    ("bench-ssh", "TESTBED=l.toml", "--out results/bench/ssh-latency.json --testbed l.toml"),
    ("bench-sampler", "RESULTS=/tmp/r", "sampler --out /tmp/r/bench/sampler.csv"),
    ("bench-qmp", "", "results --out results/bench/qmp.csv"),
    ("bench-qmp", "RUNS='a b' RESULTS=/tmp/r", "a b --out /tmp/r/bench/qmp.csv"),
    ("bench-qmp-client", "", "--out results/bench/qmp-client.json"),
    ("bench-traffic", "RESULTS=/tmp/r", "--out /tmp/r/bench/traffic.csv"),
    ("migrate", "HV=kvm RATE=100M MODE=stopcopy", "run --hv kvm --mode stopcopy --rate 100M"),
    ("sweep", "HV=kvm RATES=0,100M,200M REPS=5", "sweep --hv kvm --rates 0,100M,200M --reps 5"),
    ("ab", "A=QEMU=system B=QEMU=10.0", "ab --a QEMU=system --b QEMU=10.0"),
    ("baseline", "HV=none,kvm SIZES=64,1500 RATES=10M,100M REPS=3",
     "baseline --hv none,kvm --sizes 64,1500 --rates 10M,100M --reps 3"),
    ("calibrate", "TESTBED=lab.toml", "calibrate --testbed lab.toml"),
]  # fmt: skip


@pytest.mark.parametrize(("target", "variables", "argv"), DOCUMENTED, ids=[d[0] for d in DOCUMENTED])
def test_documented_variables_are_accepted_and_become_their_options(target, variables, argv):
    given = dict(w.split("=", 1) for w in shlex.split(variables))
    got = make.argv_for(target, _env(target, **given))
    assert got == shlex.split(argv)
    make.check_values(target, got)  # the target's own parser takes them


def test_every_bridged_target_is_covered_by_a_documented_use():
    assert {t for t, _, _ in DOCUMENTED} == set(BRIDGED)


# --- values ----------------------------------------------------------------------------------


def test_values_come_from_the_environment_as_single_words():
    argv = make.argv_for("migrate", {"RATE": "1; touch /tmp/vrmig-pwned", "MODE": "stopcopy", "HV": " "})
    assert argv[:1] == ["run"] and argv[argv.index("--rate") + 1] == "1; touch /tmp/vrmig-pwned"
    assert argv[argv.index("--mode") + 1] == "stopcopy" and "--hv" not in argv  # blank is unset
    argv = make.argv_for("hosts-check", {"TESTBED": "a b;$(reboot).toml"})
    assert argv == ["hosts-check", "--testbed", "a b;$(reboot).toml"]


def test_several_values_split_like_a_shell_without_one(tmp_path):
    for d in ("s1", "s2", "t"):
        (tmp_path / d).mkdir()
    argv = make.argv_for("report", {"RUNS": f"'{tmp_path}/with space' {tmp_path}/s* {tmp_path}/none*"})
    assert argv == ["report", f"{tmp_path}/with space", f"{tmp_path}/s1", f"{tmp_path}/s2", f"{tmp_path}/none*"]
    with pytest.raises(ConfigError, match=r"RUNS=.*closing quotation"):
        make.argv_for("report", {"RUNS": "'open"})


def test_a_switch_is_on_for_1_off_for_0_and_refuses_anything_else():
    assert make.argv_for("lab-up", {"XEN": "yes"}) == ["lab-up", "--xen"]
    assert make.argv_for("lab-up", {"XEN": "off"}) == ["lab-up"]
    with pytest.raises(ConfigError, match=r"make lab-up: XEN='maybe': give 1 [(]on[)] or 0 [(]off[)]"):
        make.argv_for("lab-up", {"XEN": "maybe"})


def test_a_required_variable_left_unset_is_named():
    with pytest.raises(ConfigError, match=r"make hosts-check: set TESTBED [(]the inventory TOML[)]"):
        make.argv_for("hosts-check", {})
    with pytest.raises(ConfigError, match=r"make compare: set A .*, B "):
        make.argv_for("compare", {})


def test_a_bad_value_of_a_modules_option_gets_one_line_naming_the_variable():
    with pytest.raises(ConfigError, match=r"^make bench-lab: REPS \(--reps\): invalid int value: 'x'$"):
        make.check_values("bench-lab", make.argv_for("bench-lab", {"TESTBED": "l.toml", "REPS": "x"}))
    with pytest.raises(ConfigError, match=r"^make bench-sampler: CONDITIONS \(--conditions\): unknown conditions"):
        make.check_values("bench-sampler", make.argv_for("bench-sampler", {"CONDITIONS": "idle,hot"}))


# --- unknown variables -----------------------------------------------------------------------


def test_makeflags_names_the_command_line_variables():
    flags = r"s -- A=x\ y DOWNTIMELIMIT=50 RATE=100\ M B:=1 C+=2"
    assert make.command_line_variables(flags) == ["A", "DOWNTIMELIMIT", "RATE", "B", "C"]
    assert make.command_line_variables("s") == []


@pytest.mark.parametrize(
    ("target", "flags", "says"),
    [
        ("migrate", r" -- RATES=0,100M", "RATES (did you mean RATE?) is not a variable of make migrate"),
        ("sweep", r" -- REP=1", "REP (did you mean REPS?) is not a variable of make sweep"),
        ("migrate", r" -- XYZZY=1 RATE=1M", "XYZZY is not a variable of make migrate"),
        ("chaos", r" -- RESULT=/tmp/x", "RESULT (did you mean RESULTS?) is not a variable of make chaos"),
        ("campaign", r" -- FILES=x", "FILES (did you mean FILE?) is not a variable of make campaign"),
    ],
)
def test_a_mistyped_variable_is_refused_with_the_nearest_name(target, flags, says):
    with pytest.raises(
        ConfigError, match=f"make {target}: {says.replace('?', '[?]').replace('(', '[(]').replace(')', '[)]')}"
    ):
        make.argv_for(target, {"MAKEFLAGS": flags})


def test_a_variable_of_another_goal_of_the_same_command_line_is_not_refused():
    env = {"MAKEFLAGS": " -- TESTBED=l.toml LAB_NAME=x", "TESTBED": "l.toml", "LAB_NAME": "x"}
    assert make.argv_for("lab-down", {**env, make.GOALS_ENV: "lab-down lab-up"}) == ["lab-down", "l.toml"]
    with pytest.raises(ConfigError, match="LAB_NAME is not a variable of make lab-down;"):
        make.argv_for("lab-down", {**env, make.GOALS_ENV: "lab-down"})
    with pytest.raises(
        ConfigError, match=r"LAB_NAM [(]did you mean LAB_NAME[?][)] is not a variable of make lab-down or"
    ):
        make.argv_for("lab-down", {**env, "MAKEFLAGS": " -- LAB_NAM=x", make.GOALS_ENV: "lab-down lab-up"})


@pytest.mark.parametrize("target", BRIDGED)
def test_every_bridged_target_refuses_a_misspelt_variable_and_creates_nothing(target, tmp_path, monkeypatch, capsys):
    results = tmp_path / "results"
    results.mkdir()
    wrong, right = _misspelt(target)
    for k in [k for k in os.environ if k in TABLES[target] or k == "MAKEFLAGS"]:
        monkeypatch.delenv(k)
    for k, v in _env(target, **{wrong: "1", "RESULTS": str(results)}).items():
        monkeypatch.setenv(k, v)
    assert make.main(["--dry", target]) == 2  # --dry: were the check broken, nothing would run
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"vrmig: error: make {target}: {wrong} (did you mean {right}?) is not a variable of make {target}; "
        f"`make help T={target}` lists them"
    ]
    assert list(results.iterdir()) == []


@pytest.mark.parametrize(
    "args",
    [["migrate", "RATES=0,100M"], ["hosts-check", "TESTBD=x"], ["bench-traffic", "DURATIN=1"], ["report", "RUN=x"]],
)
def test_make_with_a_mistyped_variable_exits_2_with_one_line_and_creates_nothing(args, tmp_path):
    env = _make_env(**{make.DRY_ENV: "1"})  # were the check broken, the command would only be printed
    cmd = ["make", *NO_REBUILD, *args, f"RESULTS={tmp_path}"]
    res = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env)
    assert res.returncode == 2, res
    lines = [ln for ln in res.stderr.splitlines() if not ln.startswith("make: ***")]
    assert len(lines) == 1 and "(did you mean " in lines[0] and f"is not a variable of make {args[0]}" in lines[0], res
    assert list(tmp_path.iterdir()) == [] and res.stdout == ""


def test_make_runs_the_command_with_the_variables_given():
    """Two goals, each with its own variables (paths that do not exist: a real run fails at once)."""
    env = _make_env(**{make.DRY_ENV: "1"})
    cmd = ["make", *NO_REBUILD, "report", "compare", "RUNS=/nonexistent/r", "A=/nonexistent/a", "B=/nonexistent/b"]
    res = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env, check=True)
    assert res.stdout.splitlines() == [
        "python -m migrate report /nonexistent/r",
        "python -m migrate compare /nonexistent/a /nonexistent/b",
    ]


def test_make_hosts_check_with_a_missing_inventory_gives_one_line():
    cmd = ["make", *NO_REBUILD, "hosts-check", "TESTBED=/nonexistent.toml"]
    res = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=_make_env())
    assert res.returncode == 2
    assert [ln for ln in res.stderr.splitlines() if not ln.startswith("make: ***")] == [
        "vrmig: error: /nonexistent.toml: no such inventory (TESTBED= names a TOML file, see docs/testbed.md)"
    ]


# --- make help -------------------------------------------------------------------------------


def test_make_help_lists_a_targets_variables_with_their_help():
    out = subprocess.run(
        ["make", "-s", "help", "T=migrate"], cwd=ROOT, capture_output=True, text=True, check=True, env=_make_env()
    )
    lines = out.stdout.splitlines()
    assert lines[0] == "make migrate variables:"
    rows = {ln.split()[0]: ln for ln in lines[1:]}
    assert "(default precopy)" in rows["MODE"] and rows["SAMPLE_MS"].split(None, 1)[1].strip()
    assert all(len(r.split(None, 1)) == 2 for r in rows.values()), [r for r in rows.values() if len(r.split()) < 2]


def test_make_help_lists_every_target_one_line_each():
    out = subprocess.run(
        ["make", "-s", "help"], cwd=ROOT, capture_output=True, text=True, check=True, env=_make_env()
    ).stdout
    listed = [ln.split()[0] for ln in out.splitlines()[1:]]
    assert listed == list(make.TARGETS) and set(listed) == set(_makefile_rules())
    plain = subprocess.run(["make", "-s"], cwd=ROOT, capture_output=True, text=True, check=True, env=_make_env()).stdout
    assert plain == out


def test_help_of_every_bridged_target_shows_defaults_and_where_results_go():
    assert "(default results)" in make.listing("chaos") and "writes $(RESULTS)/chaos" in make.listing("chaos")
    assert "RUNS                   run directories or results roots (default $(RESULTS))" in make.listing("bench-qmp")
    assert "required: the inventory TOML" in make.listing("hosts-check")
    assert "(default 10)" in make.listing("chaos") and "(default lab)" in make.listing("lab-up")
    for name in BRIDGED:
        assert make.listing(name).startswith(f"make {name} variables:\n")
    assert (
        make.listing("lint") == "make lint: ruff check and ruff format --check; it takes no variables that are checked"
    )
