"""The results contract: every file a run directory holds (its name, its format version, how it is
written and how it is read), and the JSON Schemas of ``meta.json`` and ``summary.json``.

The orchestrators (``migrate/``) write run directories and ``analysis/`` reads them (and writes
``summary.json``); both take the names, versions, readers and writers from here.  The contract
lives in ``migrate.core`` because that is the one layer both may import: ``migrate.core`` imports
nothing else of the project, and ``analysis`` may use ``migrate.core`` but nothing else of
``migrate`` (tests/unit/test_layout.py); ``analysis`` already reads ``migrate.core.atomic`` and
``migrate.core.knobs``.  A module under ``analysis/`` could not hold it, because ``migrate.core``
(the registry, meta.json's opening) must not import ``analysis``.

Formats and versions:

* ``meta.json`` (:data:`META_FORMAT`): written by every run-like command (``kind``:
  :data:`RUN_KINDS`), first when the directory is created and again as the run goes on (always
  atomically, :func:`write_meta`), last with its ``status``.  A sweep's or night's own
  ``meta.json`` (``kind`` :data:`SWEEP_KINDS`) has :data:`SWEEP_FORMAT`.
* ``summary.json``: a migration run's (:data:`SUMMARY_FORMAT`, ``details.summary_format_version``,
  written by ``analysis.run``), a baseline's (:data:`BASELINE_SUMMARY_FORMAT`, ``format``, written
  by ``analysis.baseline.summary``) and ``make hosts-setup``'s (unversioned: Ansible's recap).

A reader takes any version (:func:`read_meta`, :func:`read_summary` never validate): old run
directories keep re-analysing.  A format that changes gets a new version here, and its readers keep
reading the old one.

The schemas are generated from :data:`META_SCHEMAS` and :data:`SUMMARY_SCHEMAS` (one declaration,
below); ``python -m migrate.core.rundir schema`` writes them to :data:`SCHEMA_DIR`
(docs/schemas/), and docs/data-formats.md describes every key they declare.  Validation
(:func:`meta_problems`, :func:`summary_problems`, :func:`run_dir_problems`) needs the ``jsonschema``
package (the dev extras: the tests validate every run they write); nothing at run time does."""

from __future__ import annotations

import argparse
import functools
import json
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from migrate.core.atomic import write_json, write_text

# -- kinds --------------------------------------------------------------------------------------
KIND_MIGRATE = "migrate"  # make migrate, a sweep's or night's run (migrate.experiment.run)
KIND_CALIBRATE = "calibrate"  # make calibrate (migrate.experiment.calibrate)
KIND_BASELINE = "baseline"  # make baseline (migrate.baseline.run)
KIND_SWEEP = "sweep"  # a sweep's or campaign's directory (migrate.campaigns.sweep)
KIND_NIGHTLY = "nightly"  # a night of make nightly (migrate.campaigns.nightly)
KIND_HOSTS_SETUP = "hosts-setup"  # make hosts-setup: summary.json, no meta.json (migrate.labs.provision)
RUN_KINDS = (KIND_MIGRATE, KIND_CALIBRATE, KIND_BASELINE)
SWEEP_KINDS = (KIND_SWEEP, KIND_NIGHTLY)
META_KINDS = (*RUN_KINDS, *SWEEP_KINDS)

# -- format versions ----------------------------------------------------------------------------
#: meta.json of every run kind (migrate, calibrate, baseline); bumped when a reader would misread an old one
META_FORMAT = 1
#: a sweep's or night's meta.json and state.json (migrate.campaigns.sweepdir)
SWEEP_FORMAT = 1
#: a migration run's summary.json (details.summary_format_version); 2: absent and censored figures
#: are null with ``qualifiers`` (docs/data-formats.md "Changes from format 1")
SUMMARY_FORMAT = 2
#: a baseline's summary.json (``format``)
BASELINE_SUMMARY_FORMAT = 1
#: a baseline point's point.json (``format``; migrate.baseline.point)
POINT_JSON_FORMAT = 1
#: criu.json (``version``; migrate.drivers.criu.driver)
CRIU_JSON_FORMAT = 1
#: gen.json's and sink.json's ``version`` and counters.tsv's header (``vrmig-sampler 1``): the C
#: helpers write them (crosstraffic/, probes/)
INSTRUMENT_FORMAT = 1

# -- file names ---------------------------------------------------------------------------------
RUN_MARKER = ".vrmig-run"  # every run directory: "vrmig <kind> directory" (migrate.testbed.results)
RESULTS_ROOT_MARKER = ".vrmig-results"  # a results root: "vrmig results root"
META_JSON = "meta.json"  # parameters, versions, host, status (migrate.core.meta)
SUMMARY_JSON = "summary.json"  # the figures derived from the raw traces (analysis.run, analysis.baseline)
MIGRATION_PNG = "migration.png"  # a migration run's plot (analysis.present.run_plot)
MIGRATION_SVG = "migration.svg"  # the same plot as SVG and PDF (analysis.present.formats)
MIGRATION_PDF = "migration.pdf"
METRICS_PROM = "metrics.prom"  # a migration run's figures as OpenMetrics text (analysis.present.openmetrics)
#: every results directory's self-contained page: a run's, a baseline's and a calibration's
#: (analysis.present.run_report, baseline_report, calibration_report), a sweep's, a comparison's
#: and the paper's (migrate.campaigns.reporting, paper)
REPORT_HTML = "report.html"
COUNTERS_TSV = "counters.tsv"  # the 10 ms interface counter samples (probes/vrsampler)
GEN_JSON = "gen.json"  # vrgen's send record (crosstraffic/)
SINK_JSON = "sink.json"  # vrsink's per-run record: gaps, counts, clock (crosstraffic/)
GEN_BA_JSON = "gen-BA.json"  # TRAFFIC=udp,dir=both: the B -> A generator's record (on B)
SINK_BA_JSON = "sink-BA.json"  # TRAFFIC=udp,dir=both: the B -> A sink's record (on A)
SINK_STATE_JSON = "sink_state.json"  # vrsink --state: its live state, rewritten every 10 ms
SINK_AFTER_NS = "sink_after_ns"  # vrsink --after-file: the completion time it is told (CLOCK_REALTIME ns)
IRTT_JSON_GZ = "irtt.json.gz"  # the irtt client's per-probe record
ACTIONS_JSONL = "actions.jsonl"  # what the orchestrator did and when (migrate.model.recorder)
QMP_EVENTS_JSONL = "qmp_events.jsonl"  # QEMU's QMP events, both sides
QMP_SAMPLES_JSONL = "qmp_samples.jsonl"  # query-migrate replies, every 50 ms
LIBVIRT_JOBINFO_JSON = "libvirt_jobinfo.json"  # DRIVER=libvirt: the completed job's statistics
LIBVIRT_EVENTS_JSONL = "libvirt_events.jsonl"  # DRIVER=libvirt: the domains' events
LIBVIRT_JOBSTATS_JSONL = "libvirt_jobstats.jsonl"  # DRIVER=libvirt: the running job's statistics
XEN_LOG_JSONL = "xen_log.jsonl"  # HV=xen: every line of xl migrate, migrate-receive and the domU's console
XEN_JSON = "xen.json"  # HV=xen: dom0's migration NIC counters around xl migrate
XEN_DOMU_CFG = "xen-domu.cfg"  # HV=xen: the router domU's xl configuration
CRIU_JSON = "criu.json"  # HV=criu: every round of CRIU
CRIUVM_CONSOLE_LOG = "criuvm-console.log"  # CRIU_HOST=vm: the CRIU host VM's console
VZMIGRATE_LOG = "vzmigrate.log"  # HV=openvz: every vzmigrate output line with its host receive time
# TRAFFIC=tcp / rr: vrtcp's records (crosstraffic/src/vrtcp.c; crosstraffic.tcp reads them)
TCP_SEND_TSV = "tcp-send.tsv"  # the sender's TCP_INFO per flow every SAMPLE_MS (A)
TCP_SEND_JSON = "tcp-send.json"  # the sender's closing record: flows, congestion control, TcpExt counters
TCP_RECV_TSV = "tcp-recv.tsv"  # bytes received per flow every SAMPLE_MS (B)
TCP_RECV_GAPS_TSV = "tcp-recv.tsv.gaps"  # every silence between two reads of a flow above the gap threshold
TCP_RECV_JSON = "tcp-recv.json"  # the receiver's closing record
#: TRAFFIC=tcp,dir=both: the same files of the B -> A flows (sender on B, receiver on A)
TCP_SEND_BA_TSV = "tcp-send-BA.tsv"
TCP_SEND_BA_JSON = "tcp-send-BA.json"
TCP_RECV_BA_TSV = "tcp-recv-BA.tsv"
TCP_RECV_BA_GAPS_TSV = "tcp-recv-BA.tsv.gaps"
TCP_RECV_BA_JSON = "tcp-recv-BA.json"
TCP_PCAP = "tcp-B.pcap"  # the bulk flows' TCP headers as B's interface receives them (tcpdump; the independent check)
TCP_PCAP_BA = "tcp-A.pcap"  # TRAFFIC=tcp,dir=both: the B -> A flows' TCP headers as A's interface receives them
RR_TSV = "rr.tsv"  # one row per request/response transaction (A)
RR_CLIENT_JSON = "rr-client.json"  # the rr client's closing record
RR_SERVER_JSON = "rr-server.json"  # the rr server's closing record
CHURN_TSV = "churn.tsv"  # CHURN=: the route changes made at B per pacing tick (migrate.experiment.churn)
# calibration directories (make calibrate; analysis.metrics.calibration)
CALIBRATION_JSON = "calibration.json"
CALIBRATION_CSV = "calibration.csv"
CALIBRATION_EVENTS_CSV = "calibration_events.csv"
CALIBRATION_CONTROL_PLANE_CSV = "calibration_control_plane.csv"
# baseline directories (make baseline; analysis.baseline)
BASELINE_CSV = "baseline.csv"
BASELINE_ROUTERS_CSV = "baseline_routers.csv"
POINT_JSON = "point.json"  # points/<config>/<point>/: one measurement point's record


def console_log(host: str) -> str:
    """The router guest's serial console on ``host`` (R1, R2)."""
    return f"console-{host}.log"


def peer_log(role: str) -> str:
    """PEERING=: the routing peer's daemon log at ``role`` (A, B)."""
    return f"peer-{role}.log"


def control_pcap(role: str) -> str:
    """PEERING=: the capture of the router's control traffic at ``role`` (A, B)."""
    return f"control-{role}.pcap"


# -- reading and writing ------------------------------------------------------------------------
def write_meta(run_dir: Path, meta: Mapping[str, Any]) -> None:
    """(Re)write ``run_dir``'s meta.json atomically (indented JSON; values JSON cannot hold as strings)."""
    write_json(Path(run_dir) / META_JSON, meta)


def read_meta(run_dir: Path) -> dict[str, Any]:
    """``run_dir``'s meta.json, of any format version (nothing is validated: old runs stay readable).
    Raises OSError when it cannot be read, ValueError when it is not a JSON object."""
    return _read_object(Path(run_dir) / META_JSON)


def write_summary(run_dir: Path, summary: Mapping[str, Any]) -> None:
    """(Re)write ``run_dir``'s summary.json atomically (indented JSON)."""
    write_text(Path(run_dir) / SUMMARY_JSON, json.dumps(summary, indent=2) + "\n")


def read_summary(run_dir: Path) -> dict[str, Any]:
    """``run_dir``'s summary.json, of any format version.  Raises OSError when it cannot be read,
    ValueError when it is not a JSON object."""
    return _read_object(Path(run_dir) / SUMMARY_JSON)


def _read_object(path: Path) -> dict[str, Any]:
    obj = json.loads(path.read_text())
    if not isinstance(obj, dict):
        raise ValueError(f"{path} is not a JSON object")
    return obj


def dir_kind(run_dir: Path) -> str | None:
    """What made ``run_dir``: its meta.json ``kind``, else its marker's (``vrmig <kind>
    directory``: hosts-setup); None when neither says."""
    try:
        kind = read_meta(run_dir).get("kind")
        if isinstance(kind, str):
            return kind
    except (OSError, ValueError):
        pass
    try:
        words = (Path(run_dir) / RUN_MARKER).read_text().split()
    except OSError:
        return None
    return words[1] if len(words) == 3 and words[0] == "vrmig" and words[2] == "directory" else None


# -- the schemas, declared once -----------------------------------------------------------------
Schema = dict[str, Any]

STR: Schema = {"type": "string"}
INT: Schema = {"type": "integer"}
NUM: Schema = {"type": "number"}
BOOL: Schema = {"type": "boolean"}
OBJ: Schema = {"type": "object"}
ARR_OF_OBJ: Schema = {"type": "array", "items": OBJ}
ANY: Schema = {}
UTC: Schema = {"type": "string", "pattern": r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}"}  # ISO 8601 (datetime.isoformat)

FAILURE_CLASSES = ("setup", "migration", "post-migration", "interrupted")  # docs/data-formats.md
RUN_STATUSES = ("running", "completed", "failed", "interrupted")
QUALIFIER_STATES = ("absent", "censored", "incomplete")  # analysis.qualify


def doc(text: str, schema: Schema) -> Schema:
    """``schema`` with a description."""
    return {**schema, "description": text}


def null(schema: Schema) -> Schema:
    """``schema`` or null (a figure or record that can be absent)."""
    if set(schema) <= {"type", "description"} and isinstance(schema.get("type"), str):
        return {**schema, "type": [schema["type"], "null"]}
    return {"anyOf": [schema, {"type": "null"}]}


def enum(*values: Any) -> Schema:
    """One of ``values``."""
    return {"enum": list(values)}


def const(value: Any) -> Schema:
    """Exactly ``value``."""
    return {"const": value}


def arr(items: Schema = ANY, min_items: int = 0) -> Schema:
    """A list of ``items``."""
    out: Schema = {"type": "array", "items": items}
    return {**out, "minItems": min_items} if min_items else out


def obj(required: Mapping[str, Schema], optional: Mapping[str, Schema] | None = None, *, closed: bool = False,
        values: Schema | None = None) -> Schema:  # fmt: skip
    """An object with ``required`` and ``optional`` keys (``closed``: no others; ``values``: the
    schema of every other key)."""
    out: Schema = {"type": "object", "properties": {**required, **(optional or {})}}
    if required:
        out["required"] = list(required)
    if closed:
        out["additionalProperties"] = False
    elif values is not None:
        out["additionalProperties"] = values
    return out


def when(condition: Mapping[str, Schema], then: Mapping[str, Schema]) -> Schema:
    """A rule: where every key of ``condition`` is present and matches, the keys of ``then`` match."""
    return {
        "if": {"properties": dict(condition), "required": list(condition)},
        "then": {"properties": dict(then), "required": list(then)},
    }


def _status_rules(classed: bool) -> list[Schema]:
    """The status and failure of a run-like meta.json: completed without a failure, failed or
    interrupted with its message (``classed``: and its failure class)."""
    rules = [
        when({"status": const("completed")}, {"failure": {"type": "null"}}),
        when({"status": enum("failed", "interrupted")}, {"failure": STR}),
    ]
    if classed:
        rules += [
            when({"status": const("completed")}, {"failure_class": {"type": "null"}}),
            when({"status": enum("failed", "interrupted")}, {"failure_class": enum(*FAILURE_CLASSES)}),
            when({"status": const("interrupted")}, {"failure_class": const("interrupted")}),
        ]
    return rules


def _opening(kind: str) -> dict[str, Schema]:
    """The keys every run-like meta.json opens with (migrate.core.meta.opening)."""
    return {
        "format_version": doc("meta.json's format (META_FORMAT)", const(META_FORMAT)),
        "kind": const(kind),
        "created_utc": UTC,
        "status": enum(*RUN_STATUSES),
        "failure": doc("the first failure's message (later ones appended)", null(STR)),
        "failure_class": null(enum(*FAILURE_CLASSES)),
        "git_commit": null({"type": "string", "pattern": "^[0-9a-f]{40}(-dirty)?$"}),
        "host": obj(
            {
                "kernel": STR,
                "kernel_version": STR,
                "os": null(STR),
                "cpu_model": null(STR),
                "cpus": null(INT),
                "python": STR,
                "hostname": STR,
                "tools": OBJ,
            },
        ),
    }


CLOCK = obj({"timestamps": STR, "offset_start_ns": INT}, {"offset_end_ns": INT, "hosts": ANY})
TESTBED = obj({"prefix": STR}, {"namespaces": OBJ})
SCENARIO = obj(
    {"hv": STR, "mode": STR, "rate_bps": {"type": "integer", "minimum": 0}, "frame_bytes": INT, "duration_s": NUM,
     "migrate_at_s": NUM, "driver": STR},
)  # fmt: skip
CPU_GROUPS = ("gen", "sink", "sampler", "prober")  # migrate.experiment.instruments.CPU_GROUPS
CPU_GROUPS_OPTIONAL = ("tcp",)  # only when the run had them (TRAFFIC=tcp / rr: vrtcp's processes)


#: the optional keys a migrate and a calibrate run's meta.json share: the same code writes them in
#: both (the place's lab check, the testbed, the peers, the instruments, the lab, the teardown and
#: migrate.core.meta's finish)
EXPERIMENT_OPTIONAL: dict[str, Schema] = {
    "lab_check": OBJ,
    "testbed": TESTBED,
    "peering": obj({"protocols": arr(STR)}),
    "instruments": OBJ,
    "lab": OBJ,
    "teardown_problems": arr(STR),
    "finished_utc": UTC,
    #: a run of a lab worker (migrate.campaigns.distributed): its lab, inventory SHA-256, fingerprint
    "worker": OBJ,
}


def _run_meta(kind: str, required: Mapping[str, Schema], optional: Mapping[str, Schema], classed: bool) -> Schema:
    """A run-like meta.json: the opening keys, then ``required`` and ``optional`` ones (no others),
    and the status rules (``classed``: with the failure class)."""
    schema = obj({**_opening(kind), **required}, optional, closed=True)
    schema["allOf"] = _status_rules(classed)
    return schema


META_MIGRATE = _run_meta(
    KIND_MIGRATE,
    {
        "scenario": SCENARIO,
        "name": STR,
        "clock": CLOCK,
    },
    {
        **EXPERIMENT_OPTIONAL,
        "criu_host": OBJ,
        "hypervisor": OBJ,
        "accel": null(STR),
        "stack": obj({"router": obj({"requested": STR})}, {"qemu": OBJ, "libvirt": OBJ}),
        "dirty_rate": OBJ,
        "after_migration": obj(
            {
                "forwarding": BOOL,
                "proof": enum("cross-traffic", "rtt-probes"),
                "completed_ns": INT,
                "completed_source": STR,
                "live": OBJ,
            },
        ),
        "recovery": OBJ,
        "instruments_cpu_s": obj(
            {k: null(NUM) for k in CPU_GROUPS}, {k: null(NUM) for k in CPU_GROUPS_OPTIONAL}, closed=True
        ),
        "instruments_wall_s": null(NUM),
        "instruments_cpu_by_process_s": obj({}, values=null(NUM)),
        "verify": OBJ,
        "churn": OBJ,
    },
    classed=True,
)

META_CALIBRATE = _run_meta(
    KIND_CALIBRATE,
    {
        "calibration": obj({"hv": STR, "kinds": arr(STR, 1), "durations_ms": arr(NUM, 1), "reps": INT}),
        "scenario": SCENARIO,
        "method": obj({}, values=STR),
        "clock": CLOCK,
        "hypervisor": OBJ,
        "accel": null(STR),
    },
    EXPERIMENT_OPTIONAL,
    classed=False,
)

BASELINE_CONFIG = obj(
    {"status": enum(*RUN_STATUSES), "started_utc": UTC},
    {"finished_utc": UTC, "failure": STR, "prefix": STR},
)
META_BASELINE = _run_meta(
    KIND_BASELINE,
    {
        "spec": obj({"hvs": arr(STR, 1)}),
        "accel": null(STR),
        "hypervisor": OBJ,
        "stack": null(OBJ),
        "router_image": null(OBJ),
        "hv_none_router": STR,
        "hv_criu_router": STR,
        "address_plan": null(STR),
        "generator_capability": null(OBJ),
        "tools": OBJ,
        "notes": obj({}, values=STR),
        "configs": obj({}, values=BASELINE_CONFIG),
        "resumed_utc": arr(UTC),
        "loadavg_start": arr(NUM),
    },
    {
        "lab": OBJ,
        "lab_check": OBJ,
        "campaign": OBJ,
        "generator_capability_resumed": arr(null(OBJ)),
        "finished_utc": UTC,
        "loadavg_end": arr(NUM),
    },
    classed=True,
)


def _meta_sweep(kind: str) -> Schema:
    """A sweep's or night's meta.json (migrate.campaigns.sweep.plan_meta)."""
    return obj(
        {
            "format_version": doc("the sweep directory's format (SWEEP_FORMAT)", const(SWEEP_FORMAT)),
            "kind": const(kind),
            "created_utc": UTC,
            "reps": {"type": "integer", "minimum": 1},
            "seed": INT,
            "grid": OBJ,
            "points": arr(obj({"label": STR, "scenario": OBJ}), 1),
            "order": arr(obj({"run_id": STR, "point": STR, "rep": INT}), 1),
            "versions": OBJ,
            "command": arr(STR),
        },
        {"testbed": OBJ, "campaign": OBJ, "engine": OBJ},
        closed=True,
    )


#: meta.json, per ``kind``
META_SCHEMAS: dict[str, Schema] = {
    KIND_MIGRATE: META_MIGRATE,
    KIND_CALIBRATE: META_CALIBRATE,
    KIND_BASELINE: META_BASELINE,
    KIND_SWEEP: _meta_sweep(KIND_SWEEP),
    KIND_NIGHTLY: _meta_sweep(KIND_NIGHTLY),
}

FIGURE = null(NUM)  # a measurement, or null with a qualifier that says why
COUNT = null(INT)
QUALIFIER = obj(
    {"state": enum(*QUALIFIER_STATES), "reasons": arr(STR), "text": STR, "lower": FIGURE, "upper": FIGURE},
    closed=True,
)
#: the headline figures of a run's summary.json: each one null has an entry in ``qualifiers``
HEADLINES = (
    *(f"downtime_s.{m}" for m in ("counters", "packets", "hypervisor")),
    *(f"{f}.{m}" for f in ("duration_s", "volume_bytes") for m in ("link", "hypervisor")),
    *(f"rtt_ms.{p}.{s}" for p in ("before", "during", "after") for s in ("median", "p99")),
    *(f"cross_traffic.{m}" for m in ("offered_bps", "forwarded_bps", "lost_packets", "loss_ratio",
                                      "migration_sent_packets", "migration_lost_packets", "outage_lost_packets")),
    "dirty_rate.measured_mb_s",
    "instruments.total_cpu_s",
    "instruments.core_share",
)  # fmt: skip


def _null_at(path: str) -> Schema:
    """Matches a document whose figure at the dotted ``path`` is present and null."""
    *parents, leaf = path.split(".")
    inner: Schema = {"properties": {leaf: {"type": "null"}}, "required": [leaf]}
    for key in reversed(parents):
        inner = {"properties": {key: inner}, "required": [key]}
    return inner


def _qualified(path: str) -> Schema:
    """The rule: a null headline figure at ``path`` has its qualifier."""
    return {"if": _null_at(path), "then": {"properties": {"qualifiers": {"required": [path]}}}}


SUMMARY_MIGRATE = obj(
    {
        "status": enum("completed", "failed"),
        "failure": doc("the orchestrator's failure message", null(STR)),
        "failure_class": null(enum(*FAILURE_CLASSES)),
        "hv": null(STR),
        "mode": null(STR),
        "accel": null(STR),
        "rate_bps": null(NUM),
        "frame_bytes": null(INT),
        "downtime_s": obj({"counters": FIGURE, "packets": FIGURE, "hypervisor": FIGURE}, closed=True),
        "duration_s": obj({"link": FIGURE, "hypervisor": FIGURE}, closed=True),
        "volume_bytes": obj({"link": COUNT, "hypervisor": COUNT}, closed=True),
        "rtt_ms": obj(
            {
                p: obj({"median": FIGURE, "p99": FIGURE, "lost": COUNT, "sent": COUNT}, closed=True)
                for p in ("before", "during", "after")
            },
            closed=True,
        ),
        "cross_traffic": obj(
            {
                "offered_bps": FIGURE,
                "forwarded_bps": FIGURE,
                "forwarded_counters_bps": FIGURE,
                "sent_packets": COUNT,
                "received_packets": COUNT,
                "lost_packets": COUNT,
                "loss_ratio": FIGURE,
                "gen_send_errors": COUNT,
                "sink_socket_drops": COUNT,
                "migration_sent_packets": COUNT,
                "migration_lost_packets": COUNT,
                "outage_lost_packets": COUNT,
            },
            {"duplicate_packets": COUNT, "reordered_packets": COUNT},  # absent in older run directories
            closed=True,
        ),
        "instruments": obj(
            {
                "cpu_s": null(
                    obj({k: null(NUM) for k in CPU_GROUPS}, {k: null(NUM) for k in CPU_GROUPS_OPTIONAL}, closed=True)
                ),
                "total_cpu_s": FIGURE,
                "wall_s": FIGURE,
                "wall_source": null(enum("meta", "gen.json", "scenario")),
                "core_share": FIGURE,
                "dropped": obj({}, values=INT),
            },
            closed=True,
        ),
        "dirty_rate": obj({"requested_mb_s": FIGURE, "measured_mb_s": FIGURE, "why_absent": null(STR)}),
        "qualifiers": doc("headline path -> why it is null, a bound or incomplete", obj({}, values=QUALIFIER)),
        "details": obj(
            {
                "summary_format_version": const(SUMMARY_FORMAT),
                "run_status": null(STR),
                "window": null(OBJ),
                "downtime_counters": null(OBJ),
                "downtime_packets": null(OBJ),
                "total_lost_packets": COUNT,
                "hypervisor": null(OBJ),
                "link": null(OBJ),
                "rtt": null(OBJ),
                "cross_traffic": null(OBJ),
                "send_time_loss": null(OBJ),
                "sampler": null(OBJ),
                "instruments": null(OBJ),
                "clock": null(OBJ),
                "notes": arr(STR),
            },
            {"postcopy": OBJ},
            closed=True,
        ),
    },
    {
        "router": doc("the router that ran: a built-in image's name or a profile file's [router] name", null(STR)),
        "anatomy": obj({"settle_s": NUM, "marks": arr(OBJ), "phases": OBJ, "notes": arr(STR)}),
        "control_plane": OBJ,
        "churn": OBJ,
        "tcp": doc('TRAFFIC=tcp: the bulk TCP flows\' figures (docs/metrics.md "TCP traffic")', OBJ),
        "rr": doc('TRAFFIC=rr: the request/response latency (docs/metrics.md "TCP traffic")', OBJ),
        "udp": doc(
            "TRAFFIC=udp:M, dir=both or sizes=: the UDP CBR's flows, its B -> A direction and frame sizes "
            '(docs/metrics.md "UDP flows, directions and sizes")',
            OBJ,
        ),
    },
    closed=True,
)
SUMMARY_MIGRATE["allOf"] = [
    when({"status": const("failed")}, {"failure": STR}),
    *(_qualified(p) for p in HEADLINES),
]

#: one configuration of a baseline's summary.json (analysis.baseline.summary.summarise_config)
BASELINE_SUMMARY_CONFIG = obj(
    {
        "hv": STR,
        "nic": STR,
        "ip": INT,
        "frame_bytes": INT,
        "routers": INT,
        "load": STR,
        "points": arr(obj({"rate_bps": INT})),
        "failed_points": INT,
        "max_forwarded": null(obj({"rate_bps": INT, "forwarded_bps": OBJ, "forwarded_pps": ANY})),
        "sweep_loss_free_bps": null(NUM),
        "ndr": null(obj({"per_rep": ARR_OF_OBJ, "ndr_bps": null(OBJ), "at_upper_bound": INT})),
        "efficiency": obj({"classical": null(STR), "max_forwarded": FIGURE, "ndr": FIGURE}),
    },
    {
        "role": doc("router, or the end host's vm-tx / vm-rx / vm-vm (absent before ROLE existed: router)", STR),
        "proto": doc("udp, or tcp: one bulk TCP flow per router, rates are payload bits (absent: udp)", STR),
        "ipv6_over_ipv4": doc(
            "per rate: IPv6 / IPv4 mean forwarded (received) bit/s and packets/s with their bootstrap interval",
            arr(obj({"rate_bps": INT, "forwarded_bps": OBJ, "forwarded_pps": OBJ})),
        ),
    },
    closed=True,
)
SUMMARY_BASELINE = obj(
    {
        "format": doc("the baseline summary's format (BASELINE_SUMMARY_FORMAT)", const(BASELINE_SUMMARY_FORMAT)),
        "kind": const(KIND_BASELINE),
        "accel": null(STR),
        "loss_free_ratio": NUM,
        "points_total": {"type": "integer", "minimum": 0},
        "points_failed": {"type": "integer", "minimum": 0},
        "configs": arr(BASELINE_SUMMARY_CONFIG),
        "plots": arr(STR),
    },
    {"plot_error": STR},
    closed=True,
)

SUMMARY_HOSTS_SETUP = obj(
    {"returncode": INT, "profiles": arr(STR), "recap": obj({}, values=OBJ), "failures": obj({}, values=STR)},
    closed=True,
)

#: summary.json, per the kind of the directory that holds it (:func:`dir_kind`)
SUMMARY_SCHEMAS: dict[str, Schema] = {
    KIND_MIGRATE: SUMMARY_MIGRATE,
    KIND_BASELINE: SUMMARY_BASELINE,
    KIND_HOSTS_SETUP: SUMMARY_HOSTS_SETUP,
}

DRAFT = "https://json-schema.org/draft/2020-12/schema"
SCHEMA_DIR = Path(__file__).resolve().parents[2] / "docs" / "schemas"
SCHEMA_ID = "https://vrmig.invalid/schemas/"  # a name, not a place: the files are docs/schemas/


def meta_schema() -> Schema:
    """The JSON Schema of meta.json: one definition per ``kind``, chosen by its ``kind``."""
    return {
        "$schema": DRAFT,
        "$id": SCHEMA_ID + "meta.schema.json",
        "title": f"vrmig meta.json (format {META_FORMAT}; sweeps and nights: format {SWEEP_FORMAT})",
        "description": "Generated by `python -m migrate.core.rundir schema` from migrate/core/rundir.py; "
        "described in docs/data-formats.md.",
        "type": "object",
        "required": ["kind"],
        "properties": {"kind": enum(*META_KINDS)},
        "allOf": [
            {"if": {"properties": {"kind": const(k)}, "required": ["kind"]}, "then": {"$ref": f"#/$defs/{k}"}}
            for k in META_SCHEMAS
        ],
        "$defs": dict(META_SCHEMAS),
    }


def summary_schema(kind: str) -> Schema:
    """The JSON Schema of the summary.json of a ``kind`` directory."""
    version = {KIND_MIGRATE: f" (format {SUMMARY_FORMAT})", KIND_BASELINE: f" (format {BASELINE_SUMMARY_FORMAT})"}
    return {
        "$schema": DRAFT,
        "$id": SCHEMA_ID + summary_schema_name(kind),
        "title": f"vrmig summary.json of a {kind} directory{version.get(kind, '')}",
        "description": "Generated by `python -m migrate.core.rundir schema` from migrate/core/rundir.py; "
        "described in docs/data-formats.md.",
        **SUMMARY_SCHEMAS[kind],
    }


def summary_schema_name(kind: str) -> str:
    """The file name of ``kind``'s summary schema (a migration run's is summary.schema.json)."""
    return "summary.schema.json" if kind == KIND_MIGRATE else f"summary-{kind}.schema.json"


def schema_documents() -> dict[str, Schema]:
    """Every schema by its file name under docs/schemas/."""
    return {"meta.schema.json": meta_schema(), **{summary_schema_name(k): summary_schema(k) for k in SUMMARY_SCHEMAS}}


def schema_text(schema: Schema) -> str:
    """A schema file's text (stable: the check compares it with the generated one)."""
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"


# -- validation (needs jsonschema: the dev extras) ----------------------------------------------
MAX_PROBLEMS = 10  # per file: the first ones say what broke


@functools.cache
def _validator(name: str) -> Any:
    from jsonschema import Draft202012Validator

    schema = schema_documents()[name]
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def _problems(name: str, doc_: Any, what: str) -> list[str]:
    errors = sorted(_validator(name).iter_errors(doc_), key=lambda e: list(e.absolute_path))
    out = []
    for e in errors[:MAX_PROBLEMS]:
        where = ".".join(str(p) for p in e.absolute_path) or "(top level)"
        out.append(f"{what}: {where}: {e.message}")
    if len(errors) > MAX_PROBLEMS:
        out.append(f"{what}: … and {len(errors) - MAX_PROBLEMS} more")
    return out


def meta_problems(meta: Any, what: str = META_JSON) -> list[str]:
    """Why ``meta`` is not a valid meta.json of the current format (empty: it is)."""
    return _problems("meta.schema.json", meta, what)


def summary_problems(summary: Any, kind: str, what: str = SUMMARY_JSON) -> list[str]:
    """Why ``summary`` is not a valid summary.json of a ``kind`` directory (empty: it is)."""
    if kind not in SUMMARY_SCHEMAS:
        return [f"{what}: a {kind!r} directory has no summary.json in the contract"]
    return _problems(summary_schema_name(kind), summary, what)


def run_dir_problems(run_dir: Path) -> list[str]:
    """Every way ``run_dir``'s meta.json and summary.json (those it has) break the contract."""
    run_dir = Path(run_dir)
    out: list[str] = []
    for name, reader in ((META_JSON, read_meta), (SUMMARY_JSON, read_summary)):
        if not (run_dir / name).exists():
            continue
        what = str(run_dir / name)
        try:
            document = reader(run_dir)
        except (OSError, ValueError) as err:
            out.append(f"{what}: unreadable: {err}")
            continue
        if name == META_JSON:
            out += meta_problems(document, what)
        else:
            kind = dir_kind(run_dir)
            out += (
                summary_problems(document, kind, what)
                if kind
                else [f"{what}: neither meta.json nor a marker says its kind"]
            )
    return out


def results_problems(paths: Iterable[Path]) -> list[str]:
    """:func:`run_dir_problems` of every directory under ``paths`` that holds a meta.json or a summary.json."""
    dirs = {f.parent for p in paths for name in (META_JSON, SUMMARY_JSON) for f in Path(p).rglob(name)}
    return [line for d in sorted(dirs) for line in run_dir_problems(d)]


# -- python -m migrate.core.rundir ----------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    """``schema``: write the schemas (or, with ``--check``, exit 1 if the files differ);
    ``validate``: check run directories against them."""
    p = argparse.ArgumentParser(prog="python -m migrate.core.rundir", description=main.__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("schema", help="write meta.json's and summary.json's JSON Schemas")
    s.add_argument("--out", type=Path, default=SCHEMA_DIR, help=f"directory (default {SCHEMA_DIR})")
    s.add_argument("--check", action="store_true", help="write nothing; exit 1 if a file is not what is generated")
    v = sub.add_parser("validate", help="validate every meta.json and summary.json under the paths")
    v.add_argument("paths", nargs="+", type=Path)
    a = p.parse_args(argv)
    if a.command == "validate":
        problems = results_problems(a.paths)
        for line in problems:
            print(line)
        return 1 if problems else 0
    stale = []
    for name, schema in schema_documents().items():
        path = a.out / name
        text = schema_text(schema)
        if a.check:
            if not path.exists() or path.read_text() != text:
                stale.append(str(path))
            continue
        a.out.mkdir(parents=True, exist_ok=True)
        write_text(path, text)
        print(path)
    for path in stale:
        print(f"{path}: not what migrate/core/rundir.py generates; run python -m migrate.core.rundir schema")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
