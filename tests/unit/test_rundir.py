"""The results contract (migrate.core.rundir): the schemas in docs/schemas/ are the generated ones;
they accept SYNTHETIC meta.json and summary.json files built by the code that writes them (and two
captured real runs), and reject one that lost a required key or the reason for a null figure; the
orchestrators write no meta.json key the contract does not declare; docs/data-formats.md names
every top-level key the schemas declare, and no other."""

from __future__ import annotations

import ast
import copy
import dataclasses
import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from migrate.core import rundir as rd

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
DOC = ROOT / "docs" / "data-formats.md"


# -- the schema files ----------------------------------------------------------------------------
def test_the_checked_in_schemas_are_the_generated_ones():
    """docs/schemas/ is what ``python -m migrate.core.rundir schema`` writes from the declaration."""
    written = {p.name for p in rd.SCHEMA_DIR.glob("*.json")}
    assert written == set(rd.schema_documents()), "run: python -m migrate.core.rundir schema"
    for name, schema in rd.schema_documents().items():
        assert (rd.SCHEMA_DIR / name).read_text() == rd.schema_text(schema), (
            f"docs/schemas/{name} is stale: run python -m migrate.core.rundir schema"
        )
    assert rd.main(["schema", "--check"]) == 0


def test_every_schema_is_a_valid_draft_2020_12_schema():
    from jsonschema import Draft202012Validator

    for schema in rd.schema_documents().values():
        Draft202012Validator.check_schema(schema)


# -- SYNTHETIC meta.json, built by the code that writes each kind ---------------------------------
def synthetic_migrate_meta(tmp: Path, ending: str = "completed") -> dict[str, Any]:
    """A SYNTHETIC make-migrate meta.json: run.run's opening, then the run's end (``ending``:
    completed, setup (failed), migration (failed), interrupted, running (its orchestrator killed),
    dead (marked by the next run))."""
    from migrate.core import meta as metamod
    from migrate.core.registry import mark_dead_run
    from migrate.core.runctx import record_failure, record_interrupted
    from migrate.model.scenario import Scenario

    s = Scenario()
    meta: dict[str, Any] = {
        **metamod.opening(rd.KIND_MIGRATE),
        "scenario": s.to_dict(),
        "name": s.name,
        "clock": metamod.clock_fields(),
    }
    run_dir = tmp / f"synthetic-migrate-{ending}"
    run_dir.mkdir()
    rd.write_meta(run_dir, meta)
    if ending == "running":
        return rd.read_meta(run_dir)
    if ending == "dead":
        mark_dead_run(run_dir)
        return rd.read_meta(run_dir)
    meta["testbed"] = {"prefix": "vm000000", "namespaces": {"R1": "vm000000-R1"}, "miglink_bps": None}
    meta["hypervisor"], meta["accel"] = {"accel": "tcg"}, "tcg"
    meta["stack"] = {"router": {"requested": "frr", "version": None, "reason": "synthetic"}}
    meta["instruments_cpu_s"] = {"gen": 1.0, "sink": None, "sampler": 0.1, "prober": 0.5}
    meta["instruments_wall_s"], meta["instruments_cpu_by_process_s"] = 20.0, {"gen": 1.0, "irtt-client": 0.4}
    if ending == "completed":
        meta["status"] = "completed"
        meta["after_migration"] = {"forwarding": True, "proof": "cross-traffic", "completed_ns": 1,
                                   "completed_source": "window end (event)", "live": {"seen": True}}  # fmt: skip
    elif ending == "interrupted":
        record_interrupted(meta, "interrupted by SIGTERM")
    else:
        record_failure(meta, ending, f"a SYNTHETIC {ending} failure")
    metamod.close_run(meta, run_dir)
    return rd.read_meta(run_dir)


def synthetic_calibrate_meta(tmp: Path) -> dict[str, Any]:
    """A SYNTHETIC make-calibrate meta.json (calibrate.run_calibration's opening), failed."""
    from migrate.core import meta as metamod
    from migrate.experiment.calibrate import CalibrationSpec, _method

    spec = CalibrationSpec()
    meta = {
        **metamod.opening(rd.KIND_CALIBRATE),
        "calibration": dataclasses.asdict(spec),
        "scenario": spec.scenario().to_dict(),
        "method": _method(spec),
        "clock": metamod.clock_fields(),
        "hypervisor": {"accel": "tcg"},
        "accel": "tcg",
    }
    meta["status"], meta["failure"] = "failed", "a SYNTHETIC calibration failure"
    run_dir = tmp / "synthetic-calibrate"
    run_dir.mkdir()
    metamod.close_run(meta, run_dir)
    return rd.read_meta(run_dir)


def synthetic_baseline_meta(tmp: Path) -> dict[str, Any]:
    """A SYNTHETIC make-baseline meta.json (the opening and baseline.run._initial_meta), one
    configuration failed."""
    from migrate.baseline.run import _initial_meta, _loadavg
    from migrate.baseline.spec import BaselineSpec
    from migrate.core import meta as metamod

    meta = {
        **metamod.opening(rd.KIND_BASELINE),
        **_initial_meta(BaselineSpec(), {"router_image": None, "accel": "tcg", "stack": None}, None),
    }
    meta["configs"]["none-veth-r1-none"] = {"status": "failed", "started_utc": meta["created_utc"],
                                            "prefix": "vm000000", "failure": "SYNTHETIC",
                                            "finished_utc": meta["created_utc"]}  # fmt: skip
    meta["status"], meta["failure"], meta["failure_class"] = "failed", "configuration(s) failed: none", "setup"
    meta["finished_utc"], meta["loadavg_end"] = meta["created_utc"], _loadavg()
    run_dir = tmp / "synthetic-baseline"
    run_dir.mkdir()
    rd.write_meta(run_dir, meta)
    return rd.read_meta(run_dir)


def synthetic_sweep_meta(kind: str) -> dict[str, Any]:
    """A SYNTHETIC sweep's (or night's) meta.json (sweep.plan_meta of a two-point grid)."""
    from migrate.campaigns import sweep as sw
    from migrate.model.scenario import Scenario

    plan = sw.grid_plan(Scenario(), (10_000_000, 100_000_000), (1500,), 2, 11)
    if kind != rd.KIND_SWEEP:
        plan = dataclasses.replace(plan, kind=kind)
    return json.loads(json.dumps(sw.plan_meta(plan, {"git_commit": None}, ["vrmig", "sweep"]), default=str))


@pytest.fixture(scope="module")
def synthetic_metas(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("synthetic-meta")
    out = {f"migrate-{e}": synthetic_migrate_meta(tmp, e)
           for e in ("completed", "setup", "migration", "interrupted", "running", "dead")}  # fmt: skip
    out["calibrate"] = synthetic_calibrate_meta(tmp)
    out["baseline"] = synthetic_baseline_meta(tmp)
    out["sweep"] = synthetic_sweep_meta(rd.KIND_SWEEP)
    out["nightly"] = synthetic_sweep_meta(rd.KIND_NIGHTLY)
    return out


def test_synthetic_meta_of_every_kind_and_ending_is_valid(synthetic_metas):
    for name, meta in synthetic_metas.items():
        assert rd.meta_problems(meta, name) == []
    assert {m["kind"] for m in synthetic_metas.values()} == set(rd.META_KINDS)


def _required(kind: str) -> list[str]:
    return rd.META_SCHEMAS[kind]["required"]


@pytest.mark.parametrize("example", ["migrate-completed", "calibrate", "baseline", "sweep"])
def test_a_synthetic_meta_without_any_one_required_key_is_refused(synthetic_metas, example):
    meta = synthetic_metas[example]
    for key in _required(meta["kind"]):
        broken = {k: v for k, v in meta.items() if k != key}
        problems = rd.meta_problems(broken)
        assert problems, f"{example} without {key!r} passed"
        assert any(repr(key) in p for p in problems), problems


def test_a_synthetic_meta_that_breaks_a_rule_or_a_type_is_refused(synthetic_metas):
    meta = synthetic_metas["migrate-setup"]
    assert rd.meta_problems({**meta, "failure_class": None}) != []  # failed without its class
    assert rd.meta_problems({**meta, "status": "completed"}) != []  # completed with a failure
    assert rd.meta_problems({**meta, "unknown_key": 1}) != []  # a key the contract does not declare
    assert rd.meta_problems({**meta, "kind": "sweeep"}) != []
    cpu = {**synthetic_metas["migrate-completed"]["instruments_cpu_s"], "gen": "1.0"}
    assert rd.meta_problems({**synthetic_metas["migrate-completed"], "instruments_cpu_s": cpu}) != []


# -- SYNTHETIC summary.json, written by the analyses ----------------------------------------------
@pytest.fixture(scope="module")
def synthetic_summaries(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, dict[str, Any]]]:
    """name -> (directory kind, summary.json) of SYNTHETIC runs analysed by analysis.run, a
    baseline of a real point analysed by analysis.baseline.summary, and a hosts-setup summary
    from Ansible's captured output."""
    from analysis.baseline.summary import analyse_baseline
    from analysis.run import analyse_and_write
    from migrate.labs.provision import parse_failures, parse_recap
    from tests.fixtures.analysis.synthetic import write_run

    tmp = tmp_path_factory.mktemp("synthetic-summary")
    out: dict[str, tuple[str, dict[str, Any]]] = {}
    for mode, outage in (("precopy", "stall"), ("stopcopy", "stall"), ("precopy", "none"), ("precopy", "never_back")):
        run = write_run(tmp, mode, outage)
        analyse_and_write(run.run_dir)
        out[f"synthetic-{mode}-{outage}"] = (rd.KIND_MIGRATE, rd.read_summary(run.run_dir))
    failed = tmp / "synthetic-failed-in-setup"  # a run that ended before any trace was written
    failed.mkdir()
    rd.write_meta(failed, synthetic_migrate_meta(tmp, "setup"))
    analyse_and_write(failed)
    out["synthetic-failed-in-setup"] = (rd.KIND_MIGRATE, rd.read_summary(failed))
    baseline = tmp / "synthetic-baseline"
    point = baseline / "points" / "kvm-virtio-r1-none" / "sweep-50M-r1"
    shutil.copytree(FIXTURES / "baseline" / "kvm_tcg_64B_50M", point)
    analyse_baseline(baseline)
    out["synthetic-baseline"] = (rd.KIND_BASELINE, rd.read_summary(baseline))
    log = (FIXTURES / "ansible" / "hosts-setup-wrong-key.log").read_text()
    recap = {h: dataclasses.asdict(r) for h, r in parse_recap(log).items()}
    out["synthetic-hosts-setup"] = (
        rd.KIND_HOSTS_SETUP,
        {"returncode": 4, "profiles": ["frr", "bird"], "recap": recap, "failures": parse_failures(log)},
    )
    return out


def test_synthetic_summaries_are_valid(synthetic_summaries):
    for name, (kind, summary) in synthetic_summaries.items():
        assert rd.summary_problems(summary, kind, name) == []
    failed = synthetic_summaries["synthetic-failed-in-setup"][1]
    assert failed["status"] == "failed" and failed["downtime_s"]["counters"] is None
    assert "downtime_s.counters" in failed["qualifiers"]


@pytest.mark.parametrize("kind", sorted(rd.SUMMARY_SCHEMAS))
def test_a_synthetic_summary_without_any_one_required_key_is_refused(synthetic_summaries, kind):
    summary = next(s for k, s in synthetic_summaries.values() if k == kind)
    for key in rd.SUMMARY_SCHEMAS[kind]["required"]:
        broken = {k: v for k, v in summary.items() if k != key}
        problems = rd.summary_problems(broken, kind)
        assert any(repr(key) in p for p in problems), f"{kind} summary without {key!r}: {problems}"


def test_a_null_headline_figure_without_its_qualifier_is_refused(synthetic_summaries):
    _, summary = synthetic_summaries["synthetic-precopy-stall"]
    assert summary["downtime_s"]["counters"] is not None
    for path in rd.HEADLINES:  # every headline figure made null without saying why
        broken = copy.deepcopy(summary)
        *parents, leaf = path.split(".")
        node = broken
        for key in parents:
            node = node[key]
        node[leaf] = None
        broken["qualifiers"].pop(path, None)
        problems = rd.summary_problems(broken, rd.KIND_MIGRATE)
        assert any(repr(path) in p for p in problems), f"{path}: {problems}"
        broken["qualifiers"][path] = {"state": "absent", "reasons": ["synthetic"], "text": "SYNTHETIC",
                                      "lower": None, "upper": None}  # fmt: skip
        assert rd.summary_problems(broken, rd.KIND_MIGRATE) == [], path
    assert rd.summary_problems({**summary, "details": {**summary["details"], "summary_format_version": 1}},
                               rd.KIND_MIGRATE) != []  # fmt: skip


def test_captured_real_runs_are_valid():
    """tests/fixtures/rundir: a completed and a failed real run (README.md there)."""
    dirs = sorted(p for p in (FIXTURES / "rundir").iterdir() if p.is_dir())
    assert len(dirs) == 2
    for d in dirs:
        assert rd.dir_kind(d) == rd.KIND_MIGRATE
        assert rd.run_dir_problems(d) == []
    assert rd.results_problems([FIXTURES / "rundir"]) == []


def test_validate_command_names_each_broken_file(tmp_path, capsys):
    d = tmp_path / "run"
    shutil.copytree(FIXTURES / "rundir" / "kvm-precopy-100M-1500", d)
    assert rd.main(["validate", str(tmp_path)]) == 0
    meta = rd.read_meta(d)
    del meta["clock"]
    rd.write_meta(d, meta)
    capsys.readouterr()
    assert rd.main(["validate", str(tmp_path)]) == 1
    assert f"{d / rd.META_JSON}: (top level): 'clock' is a required property" in capsys.readouterr().out


# -- the code and the declaration agree -----------------------------------------------------------
def test_the_declaration_names_the_codes_constants():
    from analysis import qualify
    from analysis.stats.aggregate import FAILURE_CLASSES as AGG_CLASSES
    from migrate.campaigns import sweepdir
    from migrate.experiment.instruments import CPU_GROUPS
    from migrate.experiment.run_progress import FAILURE_CLASSES

    assert rd.FAILURE_CLASSES == FAILURE_CLASSES == AGG_CLASSES
    assert rd.QUALIFIER_STATES == qualify.STATES
    assert rd.CPU_GROUPS + rd.CPU_GROUPS_OPTIONAL == tuple(CPU_GROUPS)
    assert sweepdir.FORMAT_VERSION == rd.SWEEP_FORMAT and sweepdir.KINDS == rd.SWEEP_KINDS


#: the modules that write meta.json, and the kind each writes (meta.py and the registry: every run kind)
WRITERS = {
    "migrate/experiment/run.py": (rd.KIND_MIGRATE,),
    "migrate/experiment/measure.py": (rd.KIND_MIGRATE,),
    "migrate/experiment/proof.py": (rd.KIND_MIGRATE,),
    "migrate/drivers/criu/hostvm.py": (rd.KIND_MIGRATE,),
    "migrate/experiment/vm_job.py": (rd.KIND_MIGRATE,),
    "migrate/experiment/calibrate.py": (rd.KIND_CALIBRATE,),
    "migrate/baseline/run.py": (rd.KIND_BASELINE,),
    "migrate/core/meta.py": rd.RUN_KINDS,
    "migrate/core/runctx.py": rd.RUN_KINDS,
    "migrate/core/registry.py": rd.RUN_KINDS,
    "migrate/campaigns/sweep.py": rd.SWEEP_KINDS,
}


def meta_keys_written(path: Path) -> set[str]:
    """Top-level meta.json keys a module writes: ``meta[<str>] = ...`` (also in tuple targets),
    ``meta.setdefault(<str>, ...)``, ``meta.update(<kw>=...)``, the string keys of a dict literal
    bound to ``meta`` or returned by a function that makes meta.json (``opening``,
    ``_initial_meta``, ``plan_meta``), and the dict literal passed as ``run``'s extra meta."""
    keys: set[str] = set()
    tree = ast.parse(path.read_text())

    def dict_keys(node: ast.AST | None) -> None:
        if isinstance(node, ast.Dict):
            keys.update(k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str))

    def is_meta(node: ast.AST) -> bool:
        return isinstance(node, ast.Name) and node.id == "meta"

    for node in ast.walk(tree):
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                for e in t.elts if isinstance(t, ast.Tuple) else [t]:
                    if isinstance(e, ast.Subscript) and is_meta(e.value) and isinstance(e.slice, ast.Constant):
                        keys.add(e.slice.value)
                    if is_meta(e):
                        dict_keys(node.value)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and is_meta(node.func.value):
            if node.func.attr == "setdefault" and isinstance(node.args[0], ast.Constant):
                keys.add(node.args[0].value)
            if node.func.attr == "update":
                keys.update(k.arg for k in node.keywords if k.arg)
        elif isinstance(node, ast.FunctionDef) and node.name in ("opening", "_initial_meta", "plan_meta"):
            for ret in ast.walk(node):
                if isinstance(ret, ast.Return):
                    dict_keys(ret.value)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "run":
            for arg in node.args[2:]:
                dict_keys(arg)
    return keys


def test_the_orchestrators_write_no_meta_key_the_contract_does_not_declare():
    seen = set()
    for rel, kinds in WRITERS.items():
        keys = meta_keys_written(ROOT / rel)
        seen |= keys
        for kind in kinds:
            undeclared = keys - set(rd.META_SCHEMAS[kind]["properties"])
            assert not undeclared, f"{rel} writes {sorted(undeclared)} into a {kind} meta.json: declare them"
    assert {"scenario", "after_migration", "calibration", "loadavg_end", "criu_host", "finished_utc"} <= seen


# -- docs/data-formats.md and the schemas ---------------------------------------------------------
def _section(heading: str) -> str:
    """The text under ``heading`` (a line of the page) up to the next heading of its level or higher."""
    lines = DOC.read_text().splitlines()
    start = lines.index(heading)

    def level(line: str) -> int:
        return len(line) - len(line.lstrip("#"))

    ends = [i for i in range(start + 1, len(lines)) if lines[i].startswith("#") and level(lines[i]) <= level(heading)]
    return "\n".join(lines[start + 1 : ends[0] if ends else len(lines)])


def block_keys(text: str) -> tuple[set[str], set[str]]:
    """(required, optional) top-level keys of the first code block of ``text``: the JSON-like
    sketch's quoted names followed by ``:`` at depth 1 (``"name"?:``: optional); ``#`` comments
    are left out."""
    block = text.split("```", 2)[1]
    req, opt = set(), set()
    depth = 0
    for line in block.splitlines():
        line = line.split("#", 1)[0]
        i = 0
        while i < len(line):
            c = line[i]
            if c in "{[":
                depth += 1
            elif c in "}]":
                depth -= 1
            elif c == '"':
                j = line.index('"', i + 1)
                m = re.match(r"(\?)?\s*:", line[j + 1 :])
                if depth == 1 and m:
                    (opt if m.group(1) else req).add(line[i + 1 : j])
                i = j
            i += 1
    return req, opt


def _schema_keys(schema: dict[str, Any]) -> tuple[set[str], set[str]]:
    req = set(schema.get("required", ()))
    return req, set(schema["properties"]) - req


def test_data_formats_names_every_summary_key_the_schemas_declare():
    heading = f"## `summary.json` (format {rd.SUMMARY_FORMAT})"
    assert block_keys(_section(heading)) == _schema_keys(rd.SUMMARY_SCHEMAS[rd.KIND_MIGRATE])
    heading = f"## `summary.json` of a baseline (format {rd.BASELINE_SUMMARY_FORMAT}) and of `make hosts-setup`"
    section = _section(heading)
    baseline, hosts_setup = section.split("```")[1], section.split("```")[3]
    assert block_keys(f"```{baseline}```") == _schema_keys(rd.SUMMARY_SCHEMAS[rd.KIND_BASELINE])
    assert block_keys(f"```{hosts_setup}```") == _schema_keys(rd.SUMMARY_SCHEMAS[rd.KIND_HOSTS_SETUP])


def meta_table(text: str) -> dict[str, dict[str, str]]:
    """kind -> {key: "req" | "opt"} from the first table of ``text``: a row names its keys in
    backquotes in the first cell, and says req, opt or nothing per kind column."""
    lines = [line.strip().strip("|") for line in text.splitlines() if line.startswith("|")]
    rows = [[c.strip() for c in line.split("|")] for line in lines]
    head, body = rows[0], rows[2:]
    columns = {i: [k.strip() for k in name.split(",")] for i, name in enumerate(head) if i and name != "what"}
    out: dict[str, dict[str, str]] = {k: {} for ks in columns.values() for k in ks}
    for row in body:
        for key in re.findall(r"`([^`]+)`", row[0]):
            for i, kinds in columns.items():
                assert row[i] in ("req", "opt", ""), row
                for kind in kinds:
                    if row[i]:
                        out[kind][key] = row[i]
    return out


def test_data_formats_names_every_meta_key_of_every_kind():
    table = meta_table(_section(f"## `meta.json` (format {rd.META_FORMAT})"))
    assert set(table) == set(rd.META_KINDS)
    for kind, schema in rd.META_SCHEMAS.items():
        req, opt = _schema_keys(schema)
        doc_req = {k for k, v in table[kind].items() if v == "req"}
        doc_opt = {k for k, v in table[kind].items() if v == "opt"}
        assert (doc_req, doc_opt) == (req, opt), f"meta.json of kind {kind}: docs/data-formats.md differs"


def test_the_doc_checks_can_see_a_difference():
    req, opt = block_keys('```\n{\n  "a": 1, "b"?: {"c": 2},  # "d": x\n  "e": [{"f": 3}]\n}\n```')
    assert (req, opt) == ({"a", "e"}, {"b"})
    table = meta_table("| key | migrate | sweep, nightly | what |\n|---|---|---|---|\n| `x`, `y` | req | opt | z |\n")
    assert table == {"migrate": {"x": "req", "y": "req"}, "sweep": {"x": "opt", "y": "opt"},
                     "nightly": {"x": "opt", "y": "opt"}}  # fmt: skip
