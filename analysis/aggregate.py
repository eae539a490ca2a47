"""Repeated runs -> per-grid-point statistics (pure functions).

A run is a flat *record* (:func:`run_record`: parameters, status and the headline metrics of
its summary.json).  Records are grouped into grid points by (series, hv, mode, rate, frame
size); each point gets its failure rate (with a Wilson 95 % interval) and, over its completed
runs, the mean, median, standard deviation and Student-t 95 % confidence interval of the mean of
every metric in :data:`METRICS`."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from analysis.stats import t_quantile, wilson_interval

CONFIDENCE = 0.95
DONE_STATUSES = ("completed", "failed")  # outcomes that are data; 'interrupted' is an operator stop


def _d(obj: Any, *keys: str) -> Any:
    for k in keys:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(k)
    return obj


def _num(x: Any) -> float | None:
    if isinstance(x, bool) or not isinstance(x, int | float):
        return None
    return float(x) if math.isfinite(x) else None


def _diff(a: Any, b: Any) -> float | None:
    a, b = _num(a), _num(b)
    return None if a is None or b is None else a - b


def _ratio(a: Any, b: Any) -> float | None:
    a, b = _num(a), _num(b)
    return None if a is None or b is None or b == 0 else a / b


@dataclass(frozen=True)
class Metric:
    """One aggregated metric: column name, unit, plot scale, how to read it from summary.json."""

    name: str
    unit: str
    label: str
    get: Callable[[Mapping[str, Any]], float | None]
    definition: str


METRICS: tuple[Metric, ...] = (
    Metric("downtime_counters_s", "s", "downtime (counters)", lambda s: _num(_d(s, "downtime_s", "counters")),
           "downtime_s.counters of each run (B eth0 rx_packets sampled every SAMPLE_MS)"),
    Metric("downtime_packets_s", "s", "downtime (packets)", lambda s: _num(_d(s, "downtime_s", "packets")),
           "downtime_s.packets (longest gap between received cross-traffic packets in the window)"),
    Metric("downtime_hypervisor_s", "s", "downtime (QEMU)", lambda s: _num(_d(s, "downtime_s", "hypervisor")),
           "downtime_s.hypervisor (QEMU's own downtime figure)"),
    Metric("duration_link_s", "s", "duration (link)", lambda s: _num(_d(s, "duration_s", "link")),
           "duration_s.link (first to last byte of the migration stream on R1 mig0)"),
    Metric("duration_hypervisor_s", "s", "duration (QEMU)", lambda s: _num(_d(s, "duration_s", "hypervisor")),
           "duration_s.hypervisor (QEMU total-time)"),
    Metric("volume_link_bytes", "B", "volume (link)", lambda s: _num(_d(s, "volume_bytes", "link")),
           "volume_bytes.link (R1 mig0 tx_bytes while the stream was active)"),
    Metric("volume_hypervisor_bytes", "B", "volume (QEMU)", lambda s: _num(_d(s, "volume_bytes", "hypervisor")),
           "volume_bytes.hypervisor (QEMU ram.transferred)"),
    Metric("rtt_before_median_ms", "ms", "RTT before", lambda s: _num(_d(s, "rtt_ms", "before", "median")),
           "median RTT of the probes sent before the migration window"),
    Metric("rtt_during_median_ms", "ms", "RTT during", lambda s: _num(_d(s, "rtt_ms", "during", "median")),
           "median RTT of the probes sent during the migration window"),
    Metric("rtt_increase_median_ms", "ms", "RTT increase (median)",
           lambda s: _diff(_d(s, "rtt_ms", "during", "median"), _d(s, "rtt_ms", "before", "median")),
           "RTT increase = median RTT during the window − median RTT before it, per run"),
    Metric("rtt_increase_p99_ms", "ms", "RTT increase (p99)",
           lambda s: _diff(_d(s, "rtt_ms", "during", "p99"), _d(s, "rtt_ms", "before", "p99")),
           "p99 RTT during the window − p99 RTT before it, per run"),
    Metric("offered_bps", "bit/s", "offered", lambda s: _num(_d(s, "cross_traffic", "offered_bps")),
           "cross_traffic.offered_bps (generator's achieved rate, Ethernet frame bits)"),
    Metric("forwarded_bps", "bit/s", "forwarded", lambda s: _num(_d(s, "cross_traffic", "forwarded_bps")),
           "cross_traffic.forwarded_bps (received at B, Ethernet frame bits over the receive span)"),
    Metric("forwarded_ratio", "1", "forwarded / offered",
           lambda s: _ratio(_d(s, "cross_traffic", "forwarded_bps"), _d(s, "cross_traffic", "offered_bps")),
           "forwarded_bps / offered_bps of each run"),
    Metric("loss_ratio", "1", "loss ratio", lambda s: _num(_d(s, "cross_traffic", "loss_ratio")),
           "cross_traffic.loss_ratio (sequence numbers never received / sent)"),
    Metric("migration_lost_packets", "packets", "lost (migration)",
           lambda s: _num(_d(s, "cross_traffic", "migration_lost_packets")),
           "cross_traffic.migration_lost_packets (sent from migration start to end + 2 s, never received)"),
    Metric("outage_lost_packets", "packets", "lost (outage)",
           lambda s: _num(_d(s, "cross_traffic", "outage_lost_packets")),
           "cross_traffic.outage_lost_packets (sent during the packet-downtime gap, never received)"),
)  # fmt: skip
METRIC_BY_NAME = {m.name: m for m in METRICS}

AGGREGATE_DEFINITIONS = (
    "Each grid point aggregates its repetitions. Failed migrations are data: the **failure rate** is "
    "failed / (completed + failed) runs, with a Wilson 95 % interval; interrupted runs (an operator stop) "
    "are listed but not counted. Metrics are aggregated over the *completed* runs of the point that have "
    "them: **mean**, **median**, sample standard deviation and the **95 % CI of the mean**, "
    "mean ± t(0.975, n−1)·sd/√n (Student t; needs n ≥ 2). Plots show the mean with that CI as error bars."
)


def run_record(summary: Mapping[str, Any], meta: Mapping[str, Any], **extra: Any) -> dict[str, Any]:
    """Flatten one run (its summary.json and meta.json dicts) into a record; ``extra`` (run_id,
    point, rep, series, run_dir, ...) is added as is."""
    scenario = meta.get("scenario") if isinstance(meta.get("scenario"), Mapping) else {}
    status = meta.get("status") or summary.get("status")
    hv_meta = meta.get("hypervisor") if isinstance(meta.get("hypervisor"), Mapping) else {}
    rec: dict[str, Any] = {
        **extra,
        "status": status,
        "failure": meta.get("failure") or summary.get("failure"),
        "migration_attempted": _d(summary, "details", "window") is not None,
        "hv": scenario.get("hv", summary.get("hv")),
        "mode": scenario.get("mode", summary.get("mode")),
        "accel": meta.get("accel") or summary.get("accel"),
        "rate_bps": scenario.get("rate_bps", summary.get("rate_bps")),
        "frame_bytes": scenario.get("frame_bytes", summary.get("frame_bytes")),
        "qemu": hv_meta.get("qemu"),
        "created_utc": meta.get("created_utc"),
    }
    for m in METRICS:
        rec[m.name] = m.get(summary)
    return rec


@dataclass(frozen=True)
class Stats:
    """Descriptive statistics of one metric at one point (None where undefined)."""

    n: int
    mean: float | None = None
    median: float | None = None
    sd: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None

    @property
    def ci_half(self) -> float | None:
        """Half-width of the confidence interval."""
        return None if self.ci_high is None or self.mean is None else self.ci_high - self.mean


def describe(values: Iterable[Any], confidence: float = CONFIDENCE) -> Stats:
    """Mean, median, sd and the Student-t CI of the mean of the finite numbers in ``values``."""
    x = np.array([v for v in (_num(v) for v in values) if v is not None], dtype=float)
    n = int(x.size)
    if n == 0:
        return Stats(0)
    mean, median = float(x.mean()), float(np.median(x))
    if n == 1:
        return Stats(1, mean, median)
    sd = float(x.std(ddof=1))
    half = t_quantile(0.5 + confidence / 2.0, n - 1) * sd / math.sqrt(n)
    return Stats(n, mean, median, sd, mean - half, mean + half)


@dataclass(frozen=True)
class PointStats:
    """One grid point: its identity, run counts, failure rate and per-metric statistics."""

    series: str
    hv: str | None
    mode: str | None
    rate_bps: float | None
    frame_bytes: int | None
    n_runs: int
    n_completed: int
    n_failed: int
    n_failed_before_migration: int
    n_excluded: int
    failure_rate: float | None
    failure_ci: tuple[float, float] | None
    stats: dict[str, Stats] = field(default_factory=dict)
    run_ids: tuple[str, ...] = ()

    @property
    def key(self) -> tuple[Any, ...]:
        """(series, hv, mode, rate_bps, frame_bytes)."""
        return (self.series, self.hv, self.mode, self.rate_bps, self.frame_bytes)


def point_key(rec: Mapping[str, Any]) -> tuple[Any, ...]:
    """The grid point a record belongs to."""
    return (rec.get("series", ""), rec.get("hv"), rec.get("mode"), rec.get("rate_bps"), rec.get("frame_bytes"))


def _sort_key(key: tuple[Any, ...]) -> tuple[Any, ...]:
    series, hv, mode, rate, frame = key
    return (str(series), str(hv), str(mode), -1 if frame is None else -frame, -1 if rate is None else rate)


def aggregate_point(key: tuple[Any, ...], records: Sequence[Mapping[str, Any]]) -> PointStats:
    """Statistics of the records of one point."""
    done = [r for r in records if r.get("status") in DONE_STATUSES]
    completed = [r for r in done if r.get("status") == "completed"]
    failed = [r for r in done if r.get("status") == "failed"]
    rate = len(failed) / len(done) if done else None
    series, hv, mode, rate_bps, frame = key
    return PointStats(
        series=series,
        hv=hv,
        mode=mode,
        rate_bps=rate_bps,
        frame_bytes=frame,
        n_runs=len(records),
        n_completed=len(completed),
        n_failed=len(failed),
        n_failed_before_migration=sum(1 for r in failed if not r.get("migration_attempted")),
        n_excluded=len(records) - len(done),
        failure_rate=rate,
        failure_ci=wilson_interval(len(failed), len(done)),
        stats={m.name: describe(r.get(m.name) for r in completed) for m in METRICS},
        run_ids=tuple(str(r.get("run_id", "")) for r in records),
    )


def aggregate(records: Iterable[Mapping[str, Any]]) -> list[PointStats]:
    """Group records into points and describe each; sorted by series, frame size, rate."""
    groups: dict[tuple[Any, ...], list[Mapping[str, Any]]] = {}
    for rec in records:
        groups.setdefault(point_key(rec), []).append(rec)
    return [aggregate_point(k, groups[k]) for k in sorted(groups, key=_sort_key)]


POINT_ID_COLUMNS = ("series", "hv", "mode", "rate_bps", "frame_bytes")
POINT_COUNT_COLUMNS = (
    "n_runs",
    "n_completed",
    "n_failed",
    "n_failed_before_migration",
    "n_excluded",
    "failure_rate",
    "failure_rate_ci95_low",
    "failure_rate_ci95_high",
)
STAT_SUFFIXES = ("n", "mean", "median", "sd", "ci95_low", "ci95_high")


def point_columns() -> list[str]:
    """Column names of points.csv."""
    cols = [*POINT_ID_COLUMNS, *POINT_COUNT_COLUMNS]
    for m in METRICS:
        cols += [f"{m.name}_{s}" for s in STAT_SUFFIXES]
    return cols


def point_row(p: PointStats) -> dict[str, Any]:
    """One points.csv row."""
    ci = p.failure_ci or (None, None)
    row: dict[str, Any] = {
        "series": p.series,
        "hv": p.hv,
        "mode": p.mode,
        "rate_bps": p.rate_bps,
        "frame_bytes": p.frame_bytes,
        "n_runs": p.n_runs,
        "n_completed": p.n_completed,
        "n_failed": p.n_failed,
        "n_failed_before_migration": p.n_failed_before_migration,
        "n_excluded": p.n_excluded,
        "failure_rate": p.failure_rate,
        "failure_rate_ci95_low": ci[0],
        "failure_rate_ci95_high": ci[1],
    }
    for name, st in p.stats.items():
        for suffix, value in zip(STAT_SUFFIXES, (st.n, st.mean, st.median, st.sd, st.ci_low, st.ci_high), strict=True):
            row[f"{name}_{suffix}"] = value
    return row


RUN_COLUMNS = (
    "run_id",
    "series",
    "point",
    "rep",
    "order",
    "status",
    "failure",
    "notes",
    "migration_attempted",
    "hv",
    "mode",
    "accel",
    "rate_bps",
    "frame_bytes",
    "qemu",
    "created_utc",
    *(m.name for m in METRICS),
    "run_dir",
)
