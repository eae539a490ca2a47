"""OpenMetrics text of one migration run's results (``metrics.prom`` in its run directory, and
``make migrate METRICS=FILE``): the headline figures of summary.json and the run's outcome as
samples for Prometheus, with names aligned to KubeVirt's migration metrics where they mean the
same.  Pure: dicts in, text out.

The format is OpenMetrics 1.0 text (``# HELP``, ``# TYPE``, ``# UNIT``, samples, ``# EOF``), meant
for node_exporter's textfile collector (drop the file into its ``--collector.textfile.directory``).
That collector reads files with the classic Prometheus text parser, not an OpenMetrics one
(node_exporter 1.12.1, ``expfmt.NewTextParser``); it was checked to accept these files: ``# EOF``
and ``# UNIT`` are comments to it, gauges keep their type and help, and several runs' files merge
(``run_id`` keeps their samples apart).  The two formats differ in one point: OpenMetrics names a
counter family without its ``_total`` suffix (``# TYPE vrmig_migration_failed counter``, sample
``vrmig_migration_failed_total``), the classic format with it, so no text is a typed counter to
both.  This module writes OpenMetrics, so node_exporter exposes the ``_total`` samples as
untyped, with the same names, labels and values (``rate()`` and sums work on them alike).  No
sample has a timestamp (the collector refuses files with timestamps).

What is written, every sample labelled with the run's identity (:data:`IDENTITY`: ``run_id``
the run directory's name, ``hv``, ``driver`` (DRIVER is HV=kvm's: empty for the other
hypervisors), ``mode``, ``router``, ``rate_bps``, ``frame_bytes``, ``accel``, ``testbed``
(``embedded`` or ``lab``); a value the run does not record is empty, which Prometheus reads as
no label):

* ``vrmig_migration_data_bytes_total{source=link|hypervisor}`` (counter): summary.json
  ``volume_bytes``, the bytes of the migration stream on the migration link and as the
  hypervisor counted them.  KubeVirt's ``kubevirt_vmi_migration_data_bytes_total`` is not the
  same figure: it counts the data to be migrated (libvirt's ``dataTotal``, about the guest's
  memory size); the KubeVirt figure that means what this one means is
  ``kubevirt_vmi_migration_data_processed_bytes`` at the migration's end.
* ``vrmig_migration_downtime_seconds{estimator=...}`` (gauge): one sample per estimator of
  ``downtime_s`` (``counters``, ``packets``, ``hypervisor``).  The ``hypervisor`` sample means
  what KubeVirt's ``kubevirt_vmi_migration_last_downtime_seconds`` means (the hypervisor's own
  downtime of the migration; KubeVirt's ``kubevirt_vmi_migration_downtime_seconds`` is a
  histogram over many migrations); ``counters`` and ``packets`` are what the forwarded traffic
  saw (docs/metrics.md).
* ``vrmig_migration_duration_seconds{source=link|hypervisor}`` (gauge): ``duration_s``.
  KubeVirt has no duration metric, only the migration's start and end time stamps
  (``kubevirt_vmi_migration_start_time_seconds``, ``kubevirt_vmi_migration_end_time_seconds``).
* ``vrmig_dirty_rate_bytes_per_second`` (gauge): ``dirty_rate.measured_mb_s`` × 2^20, the
  guest's dirty rate measured before the migration; the meaning of KubeVirt's
  ``kubevirt_vmi_dirty_rate_bytes_per_second``.
* ``vrmig_migration_succeeded_total``, ``vrmig_migration_failed_total`` (counters, 0 or 1 for
  one run): KubeVirt's ``kubevirt_vmi_migration_succeeded`` / ``_failed``.  They count migration
  attempts as the aggregates do (docs/metrics.md "Failure classes and failure rates"): a
  completed run succeeded; a run that failed in or after the migration (class ``migration``,
  ``post-migration``, or no class: older results) failed; a run that failed in its set-up or was
  interrupted attempted no migration (both 0); a run whose status is not known (none recorded,
  or still ``running``) has neither sample.
* ``vrmig_run_info{status, failure_class}`` (gauge, 1): the run's status as meta.json has it.
* ``vrmig_figure_absent{figure, state, reasons}`` (gauge, 1): one sample per figure above that
  summary.json holds as null, named by its path in summary.json (``downtime_s.hypervisor``),
  with its qualifier's state (``absent``, or ``censored``: only a bound is known) and reasons.

Absent is not zero: a figure that is null in summary.json has no sample of its own (only its
``vrmig_figure_absent`` sample), and a bound is never written as a value.  OpenMetrics allows no
comment lines other than HELP, TYPE and UNIT, so the reasons travel as labels, not comments.  A
family without samples is left out whole."""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

PREFIX = "vrmig_"
#: the labels that identify the run, on every sample, in this order
IDENTITY = ("run_id", "hv", "driver", "mode", "router", "rate_bps", "frame_bytes", "accel", "testbed")
#: failure classes of runs that attempted a migration (docs/metrics.md, analysis.stats.aggregate)
ATTEMPT_CLASSES = ("migration", "post-migration")
MIB = 2**20  # QEMU's dirty-rate MB


@dataclass(frozen=True)
class Family:
    """A metric family: its name (without a counter's ``_total``), type, unit and help."""

    name: str
    type: str  # "gauge" | "counter"
    help: str
    unit: str = ""

    @property
    def sample_name(self) -> str:
        return self.name + "_total" if self.type == "counter" else self.name


DATA_BYTES = Family(
    PREFIX + "migration_data_bytes",
    "counter",
    "Bytes of the migration stream, on the migration link (source=link) or as the hypervisor counted them.",
    "bytes",
)
DOWNTIME = Family(
    PREFIX + "migration_downtime_seconds",
    "gauge",
    "Downtime of the migration by each estimator: interface counters, sink packet gaps, the hypervisor's own.",
    "seconds",
)
DURATION = Family(
    PREFIX + "migration_duration_seconds",
    "gauge",
    "Duration of the migration, on the migration link (source=link) or as the hypervisor reported it.",
    "seconds",
)
DIRTY_RATE = Family(
    PREFIX + "dirty_rate_bytes_per_second",
    "gauge",
    "The guest's memory dirty rate measured before the migration.",
    "bytes_per_second",
)
SUCCEEDED = Family(PREFIX + "migration_succeeded", "counter", "Migrations that completed (0 or 1 per run).")
FAILED = Family(
    PREFIX + "migration_failed",
    "counter",
    "Migration attempts that failed in or after the migration (0 or 1 per run; set-up failures are no attempt).",
)
RUN_INFO = Family(PREFIX + "run_info", "gauge", "The run's status and failure class as meta.json records them.")
ABSENT = Family(
    PREFIX + "figure_absent",
    "gauge",
    "A figure summary.json holds as null (absent, or only a bound known): it has no sample, never a 0.",
)
FAMILIES = (DATA_BYTES, DOWNTIME, DURATION, DIRTY_RATE, SUCCEEDED, FAILED, RUN_INFO, ABSENT)

#: (family, the summary.json group, the label naming its members); one sample per member
_GROUPS = ((DATA_BYTES, "volume_bytes", "source"), (DOWNTIME, "downtime_s", "estimator"),
           (DURATION, "duration_s", "source"))  # fmt: skip
_DIRTY_PATH = "dirty_rate.measured_mb_s"

Labels = tuple[tuple[str, str], ...]


def escape_label_value(value: str) -> str:
    """``value`` as it stands between a label's quotes (OpenMetrics and the classic format alike):
    backslash, double quote and line feed escaped."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _label(value: Any) -> str:
    """A label value from a JSON value: strings as they are, whole numbers without a fraction,
    anything else (None, booleans, objects) empty."""
    if isinstance(value, bool) or value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float) and math.isfinite(value):
        return str(int(value)) if value.is_integer() else repr(value)
    return ""


def _first(*values: Any) -> Any:
    """The first value that is not None (0 and "" are values)."""
    return next((v for v in values if v is not None), None)


def _testbed(meta: Mapping[str, Any]) -> str:
    """``lab`` for a run on lab hosts (an inventory or lab records), ``embedded`` for one on the
    namespace testbed, empty when meta.json has no testbed at all."""
    tb = meta.get("testbed")
    if (isinstance(tb, dict) and tb.get("inventory")) or meta.get("lab"):
        return "lab"
    return "embedded" if isinstance(tb, dict) else ""


def identity_labels(meta: Mapping[str, Any], summary: Mapping[str, Any], run_id: str | None = None) -> dict[str, str]:
    """The run's identity (:data:`IDENTITY`) from meta.json's scenario, else summary.json."""
    sc = meta.get("scenario")
    sc = sc if isinstance(sc, dict) else {}
    hv = _label(_first(sc.get("hv"), summary.get("hv")))
    return {
        "run_id": run_id or "",
        "hv": hv,
        "driver": _label(sc.get("driver")) if hv == "kvm" else "",
        "mode": _label(_first(sc.get("mode"), summary.get("mode"))),
        "router": _label(sc.get("router")),
        "rate_bps": _label(_first(sc.get("rate_bps"), summary.get("rate_bps"))),
        "frame_bytes": _label(_first(sc.get("frame_bytes"), summary.get("frame_bytes"))),
        "accel": _label(_first(meta.get("accel"), summary.get("accel"))),
        "testbed": _testbed(meta),
    }


def run_status(meta: Mapping[str, Any], summary: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """(status, failure class) as meta.json records them; without meta.json's, summary.json's copy
    of them (``details.run_status`` is meta.json's status verbatim)."""
    status = meta.get("status")
    if isinstance(status, str):
        fc = meta.get("failure_class")
        return status, fc if isinstance(fc, str) else None
    details = summary.get("details")
    status = details.get("run_status") if isinstance(details, dict) else None
    fc = summary.get("failure_class")
    return (status if isinstance(status, str) else None), (fc if isinstance(fc, str) else None)


def migration_outcome(meta: Mapping[str, Any], summary: Mapping[str, Any]) -> tuple[int, int] | None:
    """(succeeded, failed) migrations of the run, each 0 or 1; None when the status is not known."""
    status, failure_class = run_status(meta, summary)
    if status == "completed":
        return 1, 0
    if status == "failed" and (failure_class is None or failure_class in ATTEMPT_CLASSES):
        return 0, 1
    if status in ("failed", "interrupted"):
        return 0, 0
    return None


def _value(raw: Any, *, scale: float = 1.0, counter: bool = False) -> tuple[str | None, str, str]:
    """(the sample value's text, or None with the state and reason it is not written)."""
    if isinstance(raw, dict):
        return None, "censored", ""  # a bound, never a point
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        return None, "absent", "" if raw is None else "not_a_number"
    if not math.isfinite(raw):
        return None, "absent", "not_finite"
    if counter and raw < 0:
        return None, "absent", "negative_count"
    if isinstance(raw, int) and scale == 1.0:
        return str(raw), "", ""
    return repr(float(raw) * scale), "", ""


def _qualifier(summary: Mapping[str, Any], path: str, state: str, reason: str) -> tuple[str, str]:
    """(state, reasons) of the null figure at ``path``: its qualifier's where summary.json has one."""
    quals = summary.get("qualifiers")
    q = quals.get(path) if isinstance(quals, dict) else None
    if isinstance(q, dict):
        reasons = q.get("reasons")
        text = ",".join(r for r in reasons if isinstance(r, str)) if isinstance(reasons, list) else ""
        return (q["state"] if isinstance(q.get("state"), str) else state), text or reason
    return state, reason


def _figures(summary: Mapping[str, Any]) -> Iterator[tuple[Family, Labels, str, Any, float]]:
    """(family, own labels, summary path, raw value, scale) of every figure the summary has."""
    for family, group, label in _GROUPS:
        members = summary.get(group)
        if isinstance(members, dict):
            for key, value in members.items():
                yield family, ((label, str(key)),), f"{group}.{key}", value, 1.0
    dirty = summary.get("dirty_rate")
    if isinstance(dirty, dict) and "measured_mb_s" in dirty:
        yield DIRTY_RATE, (), _DIRTY_PATH, dirty["measured_mb_s"], float(MIB)


def _sample(family: Family, labels: Mapping[str, str], value: str) -> str:
    body = ",".join(f'{k}="{escape_label_value(v)}"' for k, v in labels.items())
    return f"{family.sample_name}{{{body}}} {value}"


def run_metrics(meta: Mapping[str, Any], summary: Mapping[str, Any], run_id: str | None = None) -> str:
    """The OpenMetrics text (ending in ``# EOF``) of one run from its meta.json and summary.json;
    ``run_id`` is the run directory's name.  Never raises on odd values: a figure that is not a
    number is treated as absent."""
    ident = identity_labels(meta, summary, run_id)
    samples: dict[Family, list[str]] = {f: [] for f in FAMILIES}
    for family, own, path, raw, scale in _figures(summary):
        value, state, reason = _value(raw, scale=scale, counter=family.type == "counter")
        if value is not None:
            samples[family].append(_sample(family, {**ident, **dict(own)}, value))
            continue
        state, reasons = _qualifier(summary, path, state, reason)
        samples[ABSENT].append(_sample(ABSENT, {**ident, "figure": path, "state": state, "reasons": reasons}, "1"))
    outcome = migration_outcome(meta, summary)
    if outcome is not None:
        samples[SUCCEEDED].append(_sample(SUCCEEDED, ident, str(outcome[0])))
        samples[FAILED].append(_sample(FAILED, ident, str(outcome[1])))
    status, failure_class = run_status(meta, summary)
    samples[RUN_INFO].append(
        _sample(RUN_INFO, {**ident, "status": status or "", "failure_class": failure_class or ""}, "1")
    )
    lines: list[str] = []
    for family in FAMILIES:
        if not samples[family]:
            continue
        lines += [f"# HELP {family.name} {family.help}", f"# TYPE {family.name} {family.type}"]
        lines += [f"# UNIT {family.name} {family.unit}"] if family.unit else []
        lines += samples[family]
    return "\n".join([*lines, "# EOF"]) + "\n"
