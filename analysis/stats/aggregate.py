"""Repeated runs -> per-grid-point statistics (pure functions).

A run is a flat *record* (:func:`run_record`: parameters, status, failure class and the headline
metrics of its summary.json, with their qualifiers).  Records are grouped into grid points by
(series, hv, accel, mode, rate, frame size, QEMU knobs); a point never mixes accelerators
(:func:`mixed_accelerators`).  Each point gets its failure rate over its migration attempts (with
a Wilson 95 % interval) and per-class failure counts, and, over its completed runs, the mean,
median, standard deviation, Student-t 95 % confidence interval of the mean and percentile-bootstrap
95 % interval of the mean (the one the plots draw) of every metric in :data:`METRICS` — over the
runs that measured it: a lower bound (censored) or an absent figure is
never averaged as a point; each metric says how many runs its mean is over (``n``), how many were
censored (with the largest bound) and how many had no figure."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from analysis import qualify as q
from analysis.metrics.anatomy import timeline_text
from analysis.stats.inference import bootstrap_mean_interval, t_half_width, wilson_interval
from analysis.values import dig, finite
from migrate.core.knobs import EFFECTIVE_COLUMNS, EFFECTIVE_KEYS, requested_text

CONFIDENCE = 0.95
DONE_STATUSES = ("completed", "failed")  # outcomes that are data; 'interrupted' is an operator stop
#: meta.json failure_class values (the orchestrator's); None = completed run, or a run older than the field
FAILURE_CLASSES = ("setup", "migration", "post-migration", "interrupted")
#: failed runs of these classes are failed migration attempts; 'setup' and 'interrupted' are not attempts
ATTEMPT_CLASSES = ("migration", "post-migration")


def _diff(a: Any, b: Any) -> float | None:
    a, b = finite(a), finite(b)
    return None if a is None or b is None else a - b


def _ratio(a: Any, b: Any) -> float | None:
    a, b = finite(a), finite(b)
    return None if a is None or b is None or b == 0 else a / b


@dataclass(frozen=True)
class Metric:
    """One aggregated metric: column name, unit, label, how to read it from summary.json, and the
    headline paths it is made of (their qualifiers in summary.json ``qualifiers`` apply to it);
    ``censorable``: it can be a lower bound (then runs.csv has ``<name>_lower``)."""

    name: str
    unit: str
    label: str
    get: Callable[[Mapping[str, Any]], float | None]
    definition: str
    paths: tuple[str, ...] = ()
    censorable: bool = False


def _mark_s(summary: Mapping[str, Any], key: str) -> float | None:
    """The time of anatomy mark ``key`` from the migration start (None when absent or a bound)."""
    marks = dig(summary, "anatomy", "marks")
    for m in marks if isinstance(marks, list) else ():
        if isinstance(m, Mapping) and m.get("key") == key and m.get("bound") is None:
            return finite(m.get("t_s"))
    return None


def _path(path: str) -> Callable[[Mapping[str, Any]], float | None]:
    return lambda s: finite(dig(s, *path.split(".")))


def _m(name: str, unit: str, label: str, path: str, definition: str, censorable: bool = False) -> Metric:
    return Metric(name, unit, label, _path(path), definition, (path,), censorable)


METRICS: tuple[Metric, ...] = (
    _m("downtime_counters_s", "s", "downtime (counters)", "downtime_s.counters",
       "downtime_s.counters of each run (B eth0 rx_packets sampled every SAMPLE_MS)", True),
    _m("downtime_packets_s", "s", "downtime (packets)", "downtime_s.packets",
       "downtime_s.packets (longest gap between received cross-traffic packets in the window)", True),
    _m("downtime_hypervisor_s", "s", "downtime (QEMU)", "downtime_s.hypervisor",
       "downtime_s.hypervisor (QEMU's own downtime figure)"),
    _m("duration_link_s", "s", "duration (link)", "duration_s.link",
       "duration_s.link (first to last byte of the migration stream on R1 mig0)"),
    _m("duration_hypervisor_s", "s", "duration (QEMU)", "duration_s.hypervisor",
       "duration_s.hypervisor (QEMU total-time)"),
    _m("volume_link_bytes", "B", "volume (link)", "volume_bytes.link",
       "volume_bytes.link (R1 mig0 tx_bytes while the stream was active)"),
    _m("volume_hypervisor_bytes", "B", "volume (QEMU)", "volume_bytes.hypervisor",
       "volume_bytes.hypervisor (QEMU ram.transferred)"),
    _m("rtt_before_median_ms", "ms", "RTT before", "rtt_ms.before.median",
       "median RTT of the probes sent before the migration window"),
    _m("rtt_during_median_ms", "ms", "RTT during", "rtt_ms.during.median",
       "median RTT of the probes sent during the migration window"),
    Metric("rtt_increase_median_ms", "ms", "RTT increase (median)",
           lambda s: _diff(dig(s, "rtt_ms", "during", "median"), dig(s, "rtt_ms", "before", "median")),
           "RTT increase = median RTT during the window − median RTT before it, per run",
           ("rtt_ms.during.median", "rtt_ms.before.median")),
    Metric("rtt_increase_p99_ms", "ms", "RTT increase (p99)",
           lambda s: _diff(dig(s, "rtt_ms", "during", "p99"), dig(s, "rtt_ms", "before", "p99")),
           "p99 RTT during the window − p99 RTT before it, per run", ("rtt_ms.during.p99", "rtt_ms.before.p99")),
    _m("offered_bps", "bit/s", "offered", "cross_traffic.offered_bps",
       "cross_traffic.offered_bps (generator's achieved rate, Ethernet frame bits)"),
    _m("forwarded_bps", "bit/s", "forwarded", "cross_traffic.forwarded_bps",
       "cross_traffic.forwarded_bps (received at B, Ethernet frame bits over the receive span)"),
    Metric("forwarded_ratio", "1", "forwarded / offered",
           lambda s: _ratio(dig(s, "cross_traffic", "forwarded_bps"), dig(s, "cross_traffic", "offered_bps")),
           "forwarded_bps / offered_bps of each run", ("cross_traffic.forwarded_bps", "cross_traffic.offered_bps")),
    _m("loss_ratio", "1", "loss ratio", "cross_traffic.loss_ratio",
       "cross_traffic.loss_ratio = lost / sent: packets the generator sent (send errors excluded) that "
       "did not reach the sink's socket, over the packets it sent (docs/metrics.md)"),
    _m("migration_lost_packets", "packets", "lost (migration)", "cross_traffic.migration_lost_packets",
       "cross_traffic.migration_lost_packets (sent from migration start to end + 2 s, never received)"),
    _m("outage_lost_packets", "packets", "lost (outage)", "cross_traffic.outage_lost_packets",
       "cross_traffic.outage_lost_packets (sent during the packet-downtime gap, never received)", True),
    _m("outage_s", "s", "outage (anatomy)", "anatomy.phases.outage.seconds",
       "anatomy.phases.outage: last cross-traffic packet before the blackout to full rate (docs/metrics.md)", True),
    _m("vcpu_blackout_s", "s", "vCPU blackout", "anatomy.phases.vcpu_blackout.seconds",
       "anatomy.phases.vcpu_blackout: source vCPU stop to destination resume"),
    _m("reattachment_s", "s", "reattachment", "anatomy.phases.reattachment.seconds",
       "anatomy.phases.reattachment: resume to the first cross-traffic packet after it"),
    _m("reconvergence_s", "s", "reconvergence", "anatomy.phases.reconvergence.seconds",
       "anatomy.phases.reconvergence: first packet after the resume to full rate", True),
    Metric("routes_back_s", "s", "routes back", lambda s: _mark_s(s, "routes_back"),
           "anatomy.marks routes_back: migration start to every peer holding the router's routes again "
           "(PEERING; absent when a mark is only a bound)", ("anatomy.marks",)),
    _m("bfd_flaps", "1", "BFD flaps", "control_plane.bfd.flaps",
       "control_plane.bfd.flaps: BFD sessions that went down during the run (PEERING with bfd)"),
    _m("bgp_flaps", "1", "BGP flaps", "control_plane.bgp.flaps",
       "control_plane.bgp.flaps: BGP sessions that went down during the run (PEERING)"),
    _m("bfd_silence_ms", "ms", "BFD silence", "control_plane.bfd.silence_ms",
       "control_plane.bfd.silence_ms: the router's longest gap in BFD packets at a peer"),
    _m("postcopy_phase_s", "s", "post-copy phase", "details.postcopy.price.phase_s",
       "details.postcopy.price.phase_s: destination resume to completion, pages pulled on demand (POSTCOPY=1)"),
    _m("postcopy_blocktime_ms", "ms", "post-copy blocktime", "details.postcopy.price.blocktime_ms",
       "details.postcopy.price.blocktime_ms: QEMU's postcopy-blocktime, vCPU time blocked on page faults"),
    _m("postcopy_rtt_after_median_ms", "ms", "RTT after switch-over", "details.postcopy.price.rtt_after.median_ms",
       "details.postcopy.price.rtt_after.median_ms: median RTT of the probes sent in the 2 s after the resume"),
    _m("postcopy_loss_after_ratio", "1", "loss after switch-over", "details.postcopy.price.loss_after.loss_ratio",
       "details.postcopy.price.loss_after.loss_ratio: cross-traffic sent in the 2 s after the resume and lost"),
    _m("dirty_measured_mb_s", "MB/s", "dirty rate", "dirty_rate.measured_mb_s",
       "dirty_rate.measured_mb_s: the guest's dirty page rate QEMU measured before the migration (MB = 2^20 B)"),
    _m("churn_issued_routes_s", "routes/s", "churn issued", "churn.issued_routes_s",
       "churn.issued_routes_s: route changes B made per second before the migration (CHURN=)"),
    _m("churn_relayed_routes_s", "routes/s", "churn relayed", "churn.relayed_routes_s",
       "churn.relayed_routes_s: churned route changes the router passed on to A per second before the migration"),
    _m("churn_stall_ms", "ms", "churn stall", "churn.stall_ms",
       "churn.stall_ms: the longest time A received no churned route change from the migration's start"),
    _m("tcp_goodput_outage_ms", "ms", "TCP goodput outage", "tcp.goodput_outage_ms",
       "tcp.goodput_outage_ms: the longest interval in which no bulk TCP flow received a byte (TRAFFIC=tcp)"),
    _m("tcp_flow_outage_max_ms", "ms", "TCP longest flow outage", "tcp.flow_outage_max_ms",
       "tcp.flow_outage_max_ms: the longest single TCP flow's receive silence across the window"),
    _m("tcp_time_to_recover_ms", "ms", "TCP time to recover", "tcp.time_to_recover_ms",
       "tcp.time_to_recover_ms: the slowest flow's outage end to 90 % of its pre-migration goodput"),
    _m("tcp_rto_expiries", "1", "TCP RTO expiries", "tcp.rto_expiries",
       "tcp.rto_expiries: RTO expiries of all flows from the window start to their recovery (a lower bound)"),
    _m("tcp_cwnd_min", "segments", "TCP cwnd min", "tcp.cwnd_min",
       "tcp.cwnd_min: the smallest congestion window of any flow across the migration"),
    _m("tcp_ba_goodput_outage_ms", "ms", "TCP goodput outage B->A", "tcp.ba.goodput_outage_ms",
       "tcp.ba.goodput_outage_ms: the longest interval in which no B -> A bulk TCP flow received a byte "
       "(TRAFFIC=tcp,dir=both)"),
    _m("tcp_ba_time_to_recover_ms", "ms", "TCP time to recover B->A", "tcp.ba.time_to_recover_ms",
       "tcp.ba.time_to_recover_ms: the slowest B -> A flow's outage end to 90 % of its pre-migration goodput"),
    _m("tcp_ba_rto_expiries", "1", "TCP RTO expiries B->A", "tcp.ba.rto_expiries",
       "tcp.ba.rto_expiries: RTO expiries of the B -> A flows (a lower bound)"),
    _m("tcp_ba_cwnd_min", "segments", "TCP cwnd min B->A", "tcp.ba.cwnd_min",
       "tcp.ba.cwnd_min: the smallest congestion window of any B -> A flow across the migration"),
    _m("rr_during_p99_ms", "ms", "rr p99 during", "rr.spike.during.p99_ms",
       "rr.spike.during.p99_ms: p99 latency of the answered request/response transactions sent in the window + 1 s"),
    _m("udp_flow_loss_max", "1", "UDP worst flow loss", "udp.ab.flows.loss_ratio_max",
       "udp.ab.flows.loss_ratio_max: the largest loss ratio of one A -> B UDP flow (TRAFFIC=udp:M)"),
    _m("udp_flow_gap_max_ms", "ms", "UDP worst flow gap", "udp.ab.flows.longest_gap_max_ms",
       "udp.ab.flows.longest_gap_max_ms: the longest arrival gap of one A -> B UDP flow (TRAFFIC=udp:M)"),
    _m("udp_ba_downtime_s", "s", "packet downtime B->A", "udp.ba.downtime_s",
       "udp.ba.downtime_s: the packet downtime of the B -> A UDP CBR, from the sink at A (TRAFFIC=udp,dir=both)",
       True),
    _m("udp_ba_loss_ratio", "1", "loss ratio B->A", "udp.ba.cross.loss_ratio",
       "udp.ba.cross.loss_ratio: lost / sent of the B -> A UDP CBR (TRAFFIC=udp,dir=both)"),
)  # fmt: skip
METRIC_BY_NAME = {m.name: m for m in METRICS}

AGGREGATE_DEFINITIONS = (
    "Each grid point (series, hypervisor, accelerator, mode, rate, frame size, the QEMU knobs asked for; a "
    "point never mixes accelerators) aggregates its repetitions; its `qemu_<knob>` columns give QEMU's "
    "effective values as the runs read them back (`a|b` when its runs differ). Failed migrations are data: "
    "the **failure rate** is failed "
    "migration attempts / migration attempts, with a Wilson 95 % interval. Migration attempts are the completed "
    "runs and the runs that failed in the migration or after it (meta.json `failure_class` `migration` or "
    "`post-migration`); runs that failed in the set-up (`setup`) or were stopped by the operator "
    "(`interrupted`) are not attempts and are only counted per class. A failed run without a failure class "
    "(older results) counts as a failed migration attempt (`failed_unclassified`). Metrics are aggregated over "
    "the *completed* runs of the point that measured them: **mean**, **median**, sample standard deviation and "
    "the **95 % CI of the mean**, mean ± t(0.975, n−1)·sd/√n (Student t; needs n ≥ 2); **n** is the number of "
    "runs each mean is over. A figure known only as a lower bound (*censored*: a stall cut by the trace or "
    "the analysed span, traffic that never came back) is never averaged as a point: `n_censored` counts such "
    "runs and `lower_max` gives their largest bound (the figure was at least that in one run); `n_absent` "
    "counts completed runs without the figure (e.g. no stall found), `n_incomplete` the averaged values built "
    "from incomplete instrument records. The tables give the t interval. The plots draw the mean with its "
    "**95 % percentile-bootstrap interval** (9999 resamples of the runs' values, fixed seed; `boot95_low`, "
    "`boot95_high` in points.csv): its bounds are means of resamples, so they stay within the values' range and "
    "never below 0 for a downtime, duration or volume, where the symmetric t interval of a skewed small sample "
    "does; with few runs it is narrower than the t interval and covers the mean less often than 95 %. A point "
    "of one run has no bar. Censored runs are drawn as open triangles at their bound. Per-run distributions: an "
    "empirical CDF per grid point over the runs that measured the figure (censored runs are not in it: their "
    "bounds are '>' marks, counted in the legend) and box plots per rate (median, quartiles, whiskers at 1.5 "
    "IQR) with every measured run as a dot."
)


def _qualifier(summary: Mapping[str, Any], m: Metric, value: float | None) -> dict[str, Any] | None:
    """The qualifier that applies to metric ``m`` of a run: of the first absent/censored input
    path when the value is None, of the first incomplete input otherwise."""
    quals = summary.get("qualifiers") if isinstance(summary.get("qualifiers"), Mapping) else {}
    for path in m.paths:
        qual = quals.get(path)
        if not isinstance(qual, Mapping):
            continue
        if value is None and qual.get("state") in (q.ABSENT, q.CENSORED):
            return dict(qual)
        if value is not None and qual.get("state") == q.INCOMPLETE:
            return dict(qual)
    return None


def qualifiers_text(quals: Mapping[str, Mapping[str, Any]]) -> str:
    """runs.csv ``qualifiers``: 'metric: >= 1.2 (open_end); metric: – (no_stall)'."""
    return "; ".join(f"{name}: {q.short(qual, fmt='.6g')}" for name, qual in quals.items())


def bfd_setting(scenario: Mapping[str, Any]) -> str | None:
    """``50x3`` (interval ms x multiplier) for a run with BFD peers, else None."""
    if "bfd" not in str(scenario.get("peering") or "").split(","):
        return None
    return f"{scenario.get('bfd_interval_ms')}x{scenario.get('bfd_multiplier')}"


def run_record(summary: Mapping[str, Any], meta: Mapping[str, Any], **extra: Any) -> dict[str, Any]:
    """Flatten one run (its summary.json and meta.json dicts) into a record; ``extra`` (run_id,
    point, rep, series, run_dir, ...) is added as is.  Each metric is its value or None;
    censorable metrics also have ``<name>_lower`` (the bound when only a bound is known);
    ``quals`` maps metric names to their qualifier dicts, ``qualifiers`` is the same as text."""
    scenario = meta.get("scenario") if isinstance(meta.get("scenario"), Mapping) else {}
    status = meta.get("status") or summary.get("status")
    hv_meta = meta.get("hypervisor") if isinstance(meta.get("hypervisor"), Mapping) else {}
    fclass = meta.get("failure_class", summary.get("failure_class"))
    rec: dict[str, Any] = {
        **extra,
        "status": status,
        "failure": meta.get("failure") or summary.get("failure"),
        "failure_class": fclass if isinstance(fclass, str) else None,
        "migration_attempted": dig(summary, "details", "window") is not None,
        "hv": scenario.get("hv", summary.get("hv")),
        "mode": scenario.get("mode", summary.get("mode")),
        "accel": meta.get("accel") or summary.get("accel"),
        "rate_bps": scenario.get("rate_bps", summary.get("rate_bps")),
        "frame_bytes": scenario.get("frame_bytes", summary.get("frame_bytes")),
        "peering": scenario.get("peering") or None,
        "bfd": bfd_setting(scenario),
        # the peers' daemon (PEER_DAEMON); runs recorded before it existed had BIRD peers
        "peer_daemon": (scenario.get("peer_daemon") or "bird") if scenario.get("peering") else None,
        "dirty_requested_mb_s": finite(scenario.get("dirty_mbps")),
        "churn_requested_routes_s": finite(scenario.get("churn_rps")),
        "qemu": hv_meta.get("qemu"),
        "router_build": _router_build(hv_meta),
        "created_utc": meta.get("created_utc"),
        # the QEMU knobs and the stack a scenario asks for (QEMU=): runs of other settings are other points
        "knobs": " ".join(t for t in (requested_text(scenario), stack_text(scenario)) if t) or None,
    }
    # QEMU's values of the knobs as the run read them back (None: not recorded, e.g. a run that
    # failed before the migration, another hypervisor, or a run older than the record)
    effective = hv_meta.get("knobs_effective") if isinstance(hv_meta.get("knobs_effective"), Mapping) else {}
    rec.update({col: effective.get(key) for col, key in zip(EFFECTIVE_COLUMNS, EFFECTIVE_KEYS, strict=True)})
    quals: dict[str, dict[str, Any]] = {}
    for m in METRICS:
        value = m.get(summary)
        rec[m.name] = value
        qual = _qualifier(summary, m, value)
        if qual is not None:
            quals[m.name] = qual
        if m.censorable:
            rec[f"{m.name}_lower"] = finite(qual.get("lower")) if qual and qual.get("state") == q.CENSORED else None
    rec["quals"] = quals
    rec["qualifiers"] = qualifiers_text(quals)
    anatomy = summary.get("anatomy")
    rec["timeline"] = timeline_text(anatomy) if isinstance(anatomy, Mapping) else None
    return rec


@dataclass(frozen=True)
class Stats:
    """Descriptive statistics of one metric at one point (None where undefined).

    n: runs the mean is over; n_censored: runs where only a lower bound is known (not in the
    mean), lower_max: the largest of those bounds; n_absent: completed runs without the figure;
    n_incomplete: values in the mean built from incomplete instrument records."""

    n: int
    mean: float | None = None
    median: float | None = None
    sd: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    n_censored: int = 0
    lower_max: float | None = None
    n_absent: int = 0
    n_incomplete: int = 0
    boot_low: float | None = None
    boot_high: float | None = None

    @property
    def ci_half(self) -> float | None:
        """Half-width of the confidence interval."""
        return None if self.ci_high is None or self.mean is None else self.ci_high - self.mean


def describe(values: Iterable[Any], confidence: float = CONFIDENCE) -> Stats:
    """Mean, median, sd, the Student-t CI and the percentile-bootstrap interval of the mean of the
    finite numbers in ``values`` (both intervals None for fewer than 2)."""
    x = np.array([v for v in (finite(v) for v in values) if v is not None], dtype=float)
    n = int(x.size)
    if n == 0:
        return Stats(0)
    mean, median = float(x.mean()), float(np.median(x))
    if n == 1:
        return Stats(1, mean, median)
    sd = float(x.std(ddof=1))
    half = t_half_width(sd, n, confidence)
    boot = bootstrap_mean_interval(x.tolist(), confidence)
    boot_low, boot_high = boot if boot is not None else (None, None)
    return Stats(n, mean, median, sd, mean - half, mean + half, boot_low=boot_low, boot_high=boot_high)


def describe_metric(records: Sequence[Mapping[str, Any]], name: str, confidence: float = CONFIDENCE) -> Stats:
    """``describe`` of metric ``name`` over ``records``, with the censored, absent and incomplete counts
    (a censored value is None in its record, so it never enters the mean)."""
    st = describe((r.get(name) for r in records), confidence)
    quals = [dig(r, "quals", name) for r in records]
    lowers = [finite(dig(qu, "lower")) for qu in quals if dig(qu, "state") == q.CENSORED]
    n_censored = len(lowers)
    values = [finite(r.get(name)) for r in records]
    bounds = [b for b in lowers if b is not None]
    return Stats(
        **{k: getattr(st, k) for k in ("n", "mean", "median", "sd", "ci_low", "ci_high", "boot_low", "boot_high")},
        n_censored=n_censored,
        lower_max=max(bounds) if bounds else None,
        n_absent=sum(1 for v in values if v is None) - n_censored,
        n_incomplete=sum(
            1 for v, qu in zip(values, quals, strict=True) if v is not None and dig(qu, "state") == q.INCOMPLETE
        ),
    )


#: the fields that identify a grid point, in the order of its key (:func:`point_key`); the first
#: columns of points.csv
POINT_ID_COLUMNS = ("series", "hv", "accel", "mode", "rate_bps", "frame_bytes", "knobs")


@dataclass(frozen=True)
class PointStats:
    """One grid point: its identity, run counts, failure rate and per-metric statistics.

    n_attempts: migration attempts (completed + failed_migration + failed_post_migration +
    failed_unclassified); n_failed: failed attempts; failed_*: failed runs per failure class
    (failed_unclassified: failed runs without a class, counted as migration attempts);
    n_excluded: runs that are not attempts (set-up failures, interrupted, unknown status);
    n_failed_before_migration: failed runs without a migration window (for information only:
    the failure rate uses the failure classes)."""

    series: str
    hv: str | None
    accel: str | None
    mode: str | None
    rate_bps: float | None
    frame_bytes: int | None
    n_runs: int
    n_completed: int
    n_attempts: int
    n_failed: int
    failed_setup: int
    failed_migration: int
    failed_post_migration: int
    failed_interrupted: int
    failed_unclassified: int
    n_excluded: int
    n_failed_before_migration: int
    failure_rate: float | None
    failure_ci: tuple[float, float] | None
    stats: dict[str, Stats] = field(default_factory=dict)
    run_ids: tuple[str, ...] = ()
    #: DIRTY= of the point's runs (a point never mixes them: the series carries it); None without
    dirty_requested_mb_s: float | None = None
    #: CHURN= of the point's runs (the series carries it too); None without
    churn_requested_routes_s: float | None = None
    #: the QEMU knobs the point's runs asked for ('DOWNTIME_LIMIT=50 MULTIFD=2'; '' none)
    knobs: str = ""
    #: qemu_<knob> -> QEMU's effective value over the point's runs ('a|b' when they differ; None: not recorded)
    effective: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> tuple[Any, ...]:
        """The point's identity, its fields named by :data:`POINT_ID_COLUMNS` in that order."""
        return tuple(getattr(self, c) for c in POINT_ID_COLUMNS)


def _base_key(rec: Mapping[str, Any]) -> tuple[Any, ...]:
    return (rec.get("series", ""), rec.get("hv"), rec.get("mode"), rec.get("rate_bps"), rec.get("frame_bytes"),
            rec.get("knobs") or "")  # fmt: skip


def point_key(rec: Mapping[str, Any]) -> tuple[Any, ...]:
    """The grid point a record belongs to: (series, hv, accel, mode, rate_bps, frame_bytes, knobs):
    runs that differ only in a QEMU knob are separate points."""
    series, hv, mode, rate, frame, knobs = _base_key(rec)
    return (series, hv, rec.get("accel"), mode, rate, frame, knobs)


def _point_name(base: tuple[Any, ...]) -> str:
    series, hv, mode, rate, frame, knobs = base
    rate_s = "?" if rate is None else f"{rate / 1e6:g}M"
    return " ".join(str(x) for x in (series or f"{hv} {mode}", rate_s, f"{frame} B", knobs) if x)


def stack_text(scenario: Mapping[str, Any]) -> str:
    """``QEMU=10.0 LIBVIRT=system ROUTER=frr@8.4``: the QEMU, the libvirt and the router (other
    than the default frr) a scenario names ('' for the default stack, and for runs recorded before QEMU= existed)."""
    spec, router, libvirt = scenario.get("qemu"), scenario.get("router"), scenario.get("libvirt")
    parts = [
        f"QEMU={spec}" if spec else "",
        f"LIBVIRT={libvirt}" if libvirt else "",
        f"ROUTER={router}" if router and router != "frr" else "",
    ]
    return " ".join(p for p in parts if p)


def _mixed(records: Iterable[Mapping[str, Any]], key: str, what: str, sep: str) -> list[str]:
    """One line per point whose runs have more than one value of ``key`` (runs without one, e.g.
    set-up failures, do not count); empty when no point mixes."""
    seen: dict[tuple[Any, ...], dict[str, int]] = {}
    for r in records:
        if r.get(key):
            acc = seen.setdefault(_base_key(r), {})
            acc[str(r[key])] = acc.get(str(r[key]), 0) + 1
    return [
        f"point {_point_name(k)} mixes {what} ({sep.join(f'{a}: {n} runs' for a, n in sorted(v.items()))})"
        for k, v in seen.items()
        if len(v) > 1
    ]


def mixed_qemu(records: Iterable[Mapping[str, Any]]) -> list[str]:
    """One line per point whose runs ran more than one QEMU build (``qemu``: its --version line)."""
    return _mixed(records, "qemu", "QEMU builds", "; ")


def mixed_routers(records: Iterable[Mapping[str, Any]]) -> list[str]:
    """One line per point whose runs ran more than one router build (``router_build``)."""
    return _mixed(records, "router_build", "router builds", "; ")


def _router_build(hv_meta: Mapping[str, Any]) -> str | None:
    """``FRRouting 10.3-3+deb13u1``: the router software and package version of the guest image
    that ran (None when the run recorded no image)."""
    image = hv_meta.get("guest_image") if isinstance(hv_meta.get("guest_image"), Mapping) else {}
    router = image.get("router") if isinstance(image.get("router"), Mapping) else {}
    sw, ver = router.get("software"), router.get("version")
    return f"{sw} {ver}" if sw and ver else None


def mixed_accelerators(records: Iterable[Mapping[str, Any]]) -> list[str]:
    """One line per point whose runs used more than one accelerator."""
    return _mixed(records, "accel", "accelerators", ", ")


def _sort_key(key: tuple[Any, ...]) -> tuple[Any, ...]:
    series, hv, accel, mode, rate, frame, knobs = key
    return (
        str(series), str(hv), str(accel), str(mode), -1 if frame is None else -frame, -1 if rate is None else rate,
        str(knobs),
    )  # fmt: skip


def failure_class_counts(records: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """Per-class counts of failed runs (``failed_setup``, ``failed_migration``, ``failed_post_migration``,
    ``failed_interrupted``, ``failed_unclassified``) and ``n_attempts``/``n_failed`` (see PointStats)."""
    out = dict.fromkeys(
        ("failed_setup", "failed_migration", "failed_post_migration", "failed_interrupted", "failed_unclassified"), 0
    )
    completed = 0
    for r in records:
        cls, status = r.get("failure_class"), r.get("status")
        if status == "completed":
            completed += 1
        elif cls == "interrupted":
            out["failed_interrupted"] += 1
        elif status != "failed":
            continue
        elif cls in FAILURE_CLASSES:
            out[f"failed_{str(cls).replace('-', '_')}"] += 1
        else:
            out["failed_unclassified"] += 1
    failed = out["failed_migration"] + out["failed_post_migration"] + out["failed_unclassified"]
    return {**out, "n_attempts": completed + failed, "n_failed": failed}


def aggregate_point(key: tuple[Any, ...], records: Sequence[Mapping[str, Any]]) -> PointStats:
    """Statistics of the records of one point."""
    completed = [r for r in records if r.get("status") == "completed"]
    counts = failure_class_counts(records)
    attempts, failed = counts.pop("n_attempts"), counts.pop("n_failed")
    return PointStats(
        **dict(zip(POINT_ID_COLUMNS, key, strict=True)),
        n_runs=len(records),
        n_completed=len(completed),
        n_attempts=attempts,
        n_failed=failed,
        **counts,
        n_excluded=len(records) - attempts,
        n_failed_before_migration=sum(
            1 for r in records if r.get("status") == "failed" and not r.get("migration_attempted")
        ),
        failure_rate=failed / attempts if attempts else None,
        failure_ci=wilson_interval(failed, attempts),
        stats={m.name: describe_metric(completed, m.name) for m in METRICS},
        run_ids=tuple(str(r.get("run_id", "")) for r in records),
        dirty_requested_mb_s=_one(r.get("dirty_requested_mb_s") for r in records),
        churn_requested_routes_s=_one(r.get("churn_requested_routes_s") for r in records),
        effective={col: _distinct(r.get(col) for r in records) for col in EFFECTIVE_COLUMNS},
    )


def _one(values: Iterable[Any]) -> float | None:
    """The one number among ``values`` (None when there is none, or more than one)."""
    found = {v for v in (finite(x) for x in values) if v is not None}
    return found.pop() if len(found) == 1 else None


def _distinct(values: Iterable[Any]) -> Any:
    """The one value of a point's runs, 'a|b' when they differ, None when no run recorded one."""
    seen = list(dict.fromkeys(v for v in values if v is not None))
    if not seen:
        return None
    return seen[0] if len(seen) == 1 else "|".join(str(v) for v in seen)


def aggregate(records: Iterable[Mapping[str, Any]]) -> list[PointStats]:
    """Group records into points and describe each; sorted by series, accelerator, frame size, rate.

    A run without a recorded accelerator joins its point's accelerator; a point whose runs used
    two accelerators raises ValueError (see :func:`mixed_accelerators`)."""
    records = list(records)
    mixed = mixed_accelerators(records)
    if mixed:
        raise ValueError(mixed[0])
    accel_of = {_base_key(r): r["accel"] for r in records if r.get("accel") is not None}
    groups: dict[tuple[Any, ...], list[Mapping[str, Any]]] = {}
    for rec in records:
        series, hv, _, mode, rate, frame, knobs = point_key(rec)
        key = (series, hv, accel_of.get(_base_key(rec)), mode, rate, frame, knobs)
        groups.setdefault(key, []).append(rec)
    return [aggregate_point(k, groups[k]) for k in sorted(groups, key=_sort_key)]


POINT_COUNT_COLUMNS = (
    "n_runs",
    "n_completed",
    "n_attempts",
    "n_failed",
    "failed_setup",
    "failed_migration",
    "failed_post_migration",
    "failed_interrupted",
    "failed_unclassified",
    "n_excluded",
    "n_failed_before_migration",
    "failure_rate",
    "failure_rate_ci95_low",
    "failure_rate_ci95_high",
)
STAT_SUFFIXES = ("n", "mean", "median", "sd", "ci95_low", "ci95_high", "n_censored", "lower_max", "n_absent",
                 "n_incomplete", "boot95_low", "boot95_high")  # fmt: skip


def point_columns() -> list[str]:
    """Column names of points.csv."""
    cols = [*POINT_ID_COLUMNS, "dirty_requested_mb_s", "churn_requested_routes_s", *EFFECTIVE_COLUMNS,
            *POINT_COUNT_COLUMNS]  # fmt: skip
    for m in METRICS:
        cols += [f"{m.name}_{s}" for s in STAT_SUFFIXES]
    return cols


def point_row(p: PointStats) -> dict[str, Any]:
    """One points.csv row."""
    ci = p.failure_ci or (None, None)
    row: dict[str, Any] = {c: getattr(p, c) for c in (*POINT_ID_COLUMNS, *POINT_COUNT_COLUMNS[:-3])}
    row.update(failure_rate=p.failure_rate, failure_rate_ci95_low=ci[0], failure_rate_ci95_high=ci[1])
    row["dirty_requested_mb_s"] = p.dirty_requested_mb_s
    row["churn_requested_routes_s"] = p.churn_requested_routes_s
    row.update(p.effective)
    for name, st in p.stats.items():
        values = (st.n, st.mean, st.median, st.sd, st.ci_low, st.ci_high, st.n_censored, st.lower_max, st.n_absent,
                  st.n_incomplete, st.boot_low, st.boot_high)  # fmt: skip
        for suffix, value in zip(STAT_SUFFIXES, values, strict=True):
            row[f"{name}_{suffix}"] = value
    return row


RUN_COLUMNS = (
    "run_id",
    "series",
    "point",
    "rep",
    "order",
    "status",
    "failure_class",
    "failure",
    "notes",
    "migration_attempted",
    "hv",
    "mode",
    "accel",
    "rate_bps",
    "frame_bytes",
    "peering",
    "bfd",
    "peer_daemon",
    "dirty_requested_mb_s",
    "churn_requested_routes_s",
    "knobs",
    *EFFECTIVE_COLUMNS,
    "qemu",
    "lab",
    "created_utc",
    *(m.name for m in METRICS),
    *(f"{m.name}_lower" for m in METRICS if m.censorable),
    "qualifiers",
    "run_dir",
)
