"""The table of ``make migrate``'s variables that are not knobs (migrate.model.variables.RUN_VARS):
the flags it makes, the Scenario it builds, and docs/migrate.md's table and list of flags made
from it."""

import dataclasses
from pathlib import Path

from migrate.cli.main import build_parser
from migrate.core.knobs import DOC, KNOB_FIELDS
from migrate.experiment import args
from migrate.model.scenario import Scenario

#: Scenario fields that no variable of make migrate sets
NOT_VARIABLES: set[str] = set()
#: set by scenario_from_args from variables whose default depends on HV, or that set two fields
DERIVED = {"rate_bps", "migrate_timeout_s", "bfd_interval_ms", "bfd_multiplier"}


def _subparser(name):
    sub = next(a for a in build_parser()._actions if a.__class__.__name__ == "_SubParsersAction")
    return sub.choices[name]


def test_every_variable_is_a_flag_of_run_and_the_shared_ones_of_sweep():
    run = {s for a in _subparser("run")._actions for s in a.option_strings}
    sweep = {s for a in _subparser("sweep")._actions for s in a.option_strings}
    assert {v.flag for v in args.RUN_VARS} <= run
    assert {v.flag for v in args.RUN_VARS_BEFORE_KNOBS + args.RUN_VARS_AFTER_KNOBS} <= sweep
    assert not {v.flag for v in args.RUN_ONLY_VARS} & sweep


def test_the_table_and_scenario_have_the_same_defaults():
    fields = {f.name: f.default for f in dataclasses.fields(Scenario)}
    for v in args.RUN_VARS:
        if v.field is not None:
            assert v.field in fields, f"{v.var}: Scenario has no field {v.field}"
            assert v.default == fields[v.field], f"{v.var}: {v.default!r} here, {fields[v.field]!r} in Scenario"


def test_every_scenario_field_comes_from_a_variable():
    """A new Scenario field needs its row in the table (or a knob), so that --help, make and the
    docs know it."""
    names = {f.name for f in dataclasses.fields(Scenario)}
    from_table = {v.field for v in args.RUN_VARS if v.field is not None}
    knob_fields = {f.name for f in KNOB_FIELDS}
    assert names - from_table - knob_fields - DERIVED == NOT_VARIABLES


def test_defaults_make_the_default_scenario():
    a = build_parser().parse_args(["run"])
    assert args.scenario_from_args(a) == Scenario()


def test_docs_tables_are_made_from_the_table(tmp_path):
    text = DOC.read_text()
    assert args.main(["docs", "--check"]) == 0, "docs/migrate.md is stale: run python -m migrate.experiment.args docs"
    stale = tmp_path / "migrate.md"
    stale.write_text(text.replace("| `MEM` | guest MiB", "| `MEM` | guest KiB"))
    assert args.main(["docs", "--check", "--doc", str(stale)]) == 1
    assert args.main(["docs", "--doc", str(stale)]) == 0 and stale.read_text() == text
    for v in args.RUN_VARS:
        assert f"| `{v.var}` | {v.doc} | {v.doc_default} |" in text


#: make migrate's defaults as users and old results know them (docs/migrate.md), written out by
#: hand: a default changed in the table must be changed here too, on purpose
DEFAULTS = {
    "HV": "kvm",
    "DRIVER": "qmp",
    "MODE": "precopy",
    "RATE": None,
    "SIZE": 1500,
    "IP": 4,
    "DURATION": 20.0,
    "MIGRATE_AT": 5.0,
    "AFTER": 3.0,
    "SAMPLE_MS": 10,
    "PROBE_MS": 10,
    "MEM": 256,
    "VCPUS": 1,
    "ROUTER": "frr",
    "NIC": "virtio",
    "ACCEL": "auto",
    "GEN": "builtin",
    "MIGLINK": None,
    "MIGRATE_TIMEOUT": None,
    "BOOT_TIMEOUT": 120.0,
    "XEN_GUEST": "pvh",
    "XEN_MIG_MTU": 1500,
    "RIB_ROUTES": 0,
    "PEERING": "",
    "BFD": "50x3",
    "BGP_HOLD": 9,
    "OSPF_DEAD": 4,
    "PEER_DAEMON": "bird",
    "DIRTY": None,
    "CHURN": None,
    "TESTBED": None,
    "CRIU_HOST": "local",
    "CRIU_REJOIN_MCAST": False,
    "QEMU": None,
    "QEMU_FIRMWARE": None,
    "LIBVIRT": None,
    "FAULT": None,
    "TRAFFIC": "udp",
    "RESULTS": Path("results"),
    "METRICS": None,
}


def test_the_defaults_are_the_documented_ones():
    assert {v.var: v.default for v in args.RUN_VARS} == DEFAULTS
    # MEM, VCPUS and NIC stay unset on the command line so that a profile file can give them
    assert build_parser().parse_args(["run"]).mem is None
    assert args.scenario_from_args(build_parser().parse_args(["run"])).mem_mib == DEFAULTS["MEM"]
