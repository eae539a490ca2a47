"""Reports from existing results: sweep/night directories, single run directories or results
roots -> runs.csv, points.csv, the Fig. 3-style plots, the per-run distributions (CDF and box
plots) and a self-contained report.html.

Every metric is recomputed from each run's raw data (``analysis.run.analyse_run``; nothing is
rewritten inside the run directories), so a report always reflects the current estimators."""

from __future__ import annotations

import csv
import io
import logging
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from analysis import qualify as q
from analysis.present import html as rh
from analysis.present.formats import formats_from_env
from analysis.present.sweep_plot import (
    BOX_CAPTION,
    CDF_CAPTION,
    DISTRIBUTION_METRICS,
    FIGURES,
    MEAN_CAPTION,
    distribution_name,
    render_all,
    render_distributions,
)
from analysis.stats.aggregate import (
    AGGREGATE_DEFINITIONS,
    EFFECTIVE_COLUMNS,
    RUN_COLUMNS,
    PointStats,
    Stats,
    aggregate,
    mixed_accelerators,
    mixed_qemu,
    mixed_routers,
    point_columns,
    point_row,
)
from analysis.stats.aggregate import run_record as make_record
from migrate.campaigns import sweepdir as sd
from migrate.core.atomic import write_bytes, write_text
from migrate.core.errors import ConfigError
from migrate.core.meta import REPO
from migrate.core.rundir import META_JSON, REPORT_HTML, RESULTS_ROOT_MARKER, RUN_MARKER
from migrate.testbed.results import is_opening

log = logging.getLogger(__name__)

REPORT_MARKER = ".vrmig-report"
REPORT_NAME = REPORT_HTML


@dataclass(frozen=True)
class RunRef:
    """One run of a source: its directory and, for sweeps, its id, point, repetition and position."""

    run_dir: Path
    run_id: str
    point: str = ""
    rep: int | None = None
    order: int | None = None


@dataclass
class Source:
    """A set of runs to report on (a sweep or night, one run, or a results root)."""

    path: Path
    kind: str
    label: str = ""
    meta: dict[str, Any] = field(default_factory=dict)
    state: dict[str, Any] = field(default_factory=dict)
    runs: list[RunRef] = field(default_factory=list)


def _is_run_dir(p: Path) -> bool:
    return (p / RUN_MARKER).is_file()


def _sweep_runs(path: Path, meta: dict[str, Any], state: dict[str, Any]) -> list[RunRef]:
    position = {r["run_id"]: i for i, r in enumerate(meta["order"])}
    refs = []
    for run_id, rec in sorted(state["runs"].items(), key=lambda kv: position.get(kv[0], 0)):
        refs.append(RunRef(path / rec["run_dir"], run_id, rec.get("point", ""), rec.get("rep"), position.get(run_id)))
    return refs


def load_source(path: Path, label: str = "", what: str = "RUNS") -> Source:
    """Identify and validate ``path``; a foreign or corrupted directory raises ConfigError."""
    path = Path(path)
    if not path.is_dir():
        raise ConfigError(f"{what}: {path} is not a directory")
    if sd.is_sweep_dir(path):
        meta, state = sd.open_sweep(path, what)
        return Source(path, meta["kind"], label, meta, state, _sweep_runs(path, meta, state))
    if _is_run_dir(path):
        return Source(path, "run", label, runs=[RunRef(path, path.name)])
    children = sorted(p for p in path.iterdir() if p.is_dir() and not is_opening(p))
    runs = [RunRef(c, c.name) for c in children if _is_run_dir(c)]
    if runs:
        return Source(path, "results", label, runs=runs)
    if (path / RESULTS_ROOT_MARKER).exists():
        raise ConfigError(f"{what}: {path} is a vrmig results root without run directories (give a sweep directory)")
    raise ConfigError(f"{what}: {path} is not a vrmig run, sweep or results directory (no vrmig marker)")


#: campaign axes every record names anyway (the point key or the series): not repeated in the series
KEYED_AXES = ("HV", "DRIVER", "MODE", "RATE", "SIZE", "PEERING", "BFD", "DIRTY", "CHURN", "TESTBED")


def campaign_axes(source_meta: dict[str, Any] | None) -> dict[str, str]:
    """Point label -> "VAR=value ..." of a campaign's axes that no record column names (a
    DOWNTIME_LIMIT or MULTIFD axis): runs of different values must never pool into one point."""
    camp = (source_meta or {}).get("campaign") or {}
    out = {}
    for p in camp.get("points") or []:
        axes = {k: v for k, v in (p.get("axes") or {}).items() if k not in KEYED_AXES}
        out[p["label"]] = " ".join(f"{k}={v}" for k, v in axes.items())
    return out


def series_name(label: str, rec: dict[str, Any], meta: dict[str, Any], axes: str = "") -> str:
    """The series a run's record belongs to: the source's label, the hypervisor with its driver
    where it is not QMP (``kvm-libvirt``, as run directories and chaos name it), the mode, and the
    lab it ran on.  Runs of another driver or testbed are never pooled into one point: QMP's and
    libvirt's stop-and-copy outages differ by a factor of about 2.5 here.  Runs with routing peers
    carry PEERING (and PEER_DAEMON when not BIRD) and the BFD timers, runs with QEMU knobs their
    settings (``MULTIFD=2``): a timer
    sweep's settings, and a knob sweep's, are separate points; runs with a dirtying load carry
    DIRTY or CHURN (another workload, another point), runs with TCP traffic their TRAFFIC mix.
    ``axes``: the campaign axes of the run's point that
    no record column names (:func:`campaign_axes`)."""
    hv = rec.get("hv")
    driver = (meta.get("scenario") or {}).get("driver")
    if hv and driver and driver != "qmp":
        hv = f"{hv}-{driver}"
    tb = meta.get("testbed") or {}
    lab = f"on lab {tb.get('name') or tb['inventory']}" if tb.get("inventory") else None
    worker = meta.get("worker") or {}
    if worker.get("fingerprint_sha256"):  # a lab worker's run: labs alike (one fingerprint) pool
        lab = f"on labs {worker['fingerprint_sha256'][:8]}"
    peers = f"PEERING={rec['peering']}" if rec.get("peering") else None
    if peers and rec.get("peer_daemon") not in (None, "bird"):
        peers += f" PEER_DAEMON={rec['peer_daemon']}"  # FRR's peers are another point than BIRD's
    bfd = f"BFD={rec['bfd']}" if rec.get("bfd") else None
    dirty = f"DIRTY={rec['dirty_requested_mb_s']:g}" if rec.get("dirty_requested_mb_s") is not None else None
    if rec.get("churn_requested_routes_s") is not None:
        dirty = " ".join(x for x in (dirty, f"CHURN={rec['churn_requested_routes_s']:g}") if x)
    knobs = rec.get("knobs") or None
    axes = " ".join(a for a in axes.split() if a.split("=")[0] not in (knobs or "").replace("=", " = ").split())
    mix = (meta.get("scenario") or {}).get("traffic")
    traffic = f"TRAFFIC={mix}" if mix not in (None, "udp") else None
    axes = " ".join(a for a in axes.split() if not a.startswith("TRAFFIC="))
    return " ".join(str(x) for x in (label, hv, rec.get("mode"), peers, bfd, knobs, dirty, traffic, axes, lab) if x)


def collect(source: Source) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(records, run metas) of every run of ``source``, metrics recomputed from the raw data (a
    second or two per run: shown as progress, migrate.core.progress)."""
    from analysis.run import analyse_run
    from migrate.core.progress import Progress

    records, metas = [], []
    axes = campaign_axes(source.meta)
    with Progress(f"report {source.path.name}", len(source.runs), "runs analysed") as progress:
        for ref in source.runs:
            with progress.item(str(ref.run_id)):
                meta = sd.read_json(ref.run_dir / META_JSON, f"run {ref.run_id}")
                summary = analyse_run(ref.run_dir).to_dict()
            records.append(_record(source, ref, meta, summary, axes))
            metas.append(meta)
    return records, metas


def _record(
    source: Source, ref: Any, meta: dict[str, Any], summary: dict[str, Any], axes: dict[str, str]
) -> dict[str, Any]:
    """One run's row of runs.csv."""
    rel = ref.run_dir.relative_to(source.path) if ref.run_dir != source.path else Path(".")
    rec = make_record(summary, meta, run_id=ref.run_id, point=ref.point, rep=ref.rep, order=ref.order)
    rec["series"] = series_name(source.label, rec, meta, axes.get(str(ref.point), ""))
    tb = meta.get("testbed") or {}
    rec["lab"] = (meta.get("worker") or {}).get("lab") or (tb.get("name") if tb.get("inventory") else None)
    rec["run_dir"] = str(rel)
    rec["notes"] = "; ".join((summary.get("details") or {}).get("notes") or [])
    return rec


def csv_text(columns: Sequence[str], rows: Sequence[dict[str, Any]]) -> str:
    """CSV with a header; None -> empty field; floats in full precision."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(columns), extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for row in rows:
        w.writerow({k: "" if row.get(k) is None else row.get(k) for k in columns})
    return buf.getvalue()


def _values(metas: list[dict[str, Any]], *path: str) -> list[str]:
    out: set[str] = set()
    for m in metas:
        v: Any = m
        for k in path:
            v = v.get(k) if isinstance(v, dict) else None
        if v is not None:
            out.add(str(v))
    return sorted(out)


def source_metadata(source: Source, records: list[dict[str, Any]], metas: list[dict[str, Any]]) -> dict[str, Any]:
    """Versions, accelerator and host of a source, from its runs' meta.json (all distinct values)."""
    statuses: dict[str, int] = {}
    for r in records:
        statuses[str(r.get("status"))] = statuses.get(str(r.get("status")), 0) + 1
    out: dict[str, Any] = {"path": str(source.path.resolve()), "kind": source.kind, "runs": statuses}
    if source.meta:
        grid = source.meta.get("grid") or {}
        out.update(
            created_utc=source.meta.get("created_utc"),
            reps=source.meta.get("reps"),
            seed=source.meta.get("seed"),
            grid_points=[p["label"] for p in source.meta.get("points", [])],
            planned_runs=len(source.meta.get("order", [])),
            abandoned_attempts=len(source.state.get("attempts", [])),
            sessions=len(source.state.get("sessions", [])),
        )
        if grid.get("matrix"):
            out["matrix"] = grid["matrix"]
    sweep_vers = (source.meta or {}).get("versions") or {}
    out.update(
        accelerator=_values(metas, "accel"),
        accelerator_reason=_values(metas, "hypervisor", "accel_reason"),
        qemu=_values(metas, "hypervisor", "qemu"),
        router=_values(metas, "hypervisor", "guest_image", "router", "software")
        + _values(metas, "hypervisor", "guest_image", "router", "version"),
        guest_kernel=_values(metas, "hypervisor", "guest_image", "kernel_package", "release"),
        host_kernel=_values(metas, "host", "kernel"),
        host_os=_values(metas, "host", "os"),
        host_cpu=_values(metas, "host", "cpu_model"),
        host_cpus=_values(metas, "host", "cpus"),
        hostname=_values(metas, "host", "hostname"),
        tools=_values(metas, "host", "tools"),
        git_commit=_values(metas, "git_commit") or ([sweep_vers["git_commit"]] if sweep_vers.get("git_commit") else []),
        memory_mib=_values(metas, "scenario", "mem_mib"),
        router_profile=_values(metas, "scenario", "router"),
        duration_s=_values(metas, "scenario", "duration_s"),
        migrate_at_s=_values(metas, "scenario", "migrate_at_s"),
    )
    return out


def _f(x: Any, scale: float = 1.0, fmt: str = ".3g") -> str:
    return "–" if x is None else format(x * scale, fmt)


def _extra(st: Stats, scale: float, fmt: str = ".3g") -> str:
    """What the mean leaves out: '; 2 ≥ 1.5 censored; 1 absent; 1 incomplete'."""
    out = ""
    if st.n_censored:
        out += f"; {st.n_censored} censored ≥ {_f(st.lower_max, scale, fmt)}"
    if st.n_absent:
        out += f"; {st.n_absent} absent"
    if st.n_incomplete:
        out += f"; {st.n_incomplete} incomplete"
    return out


def _ms(st: Stats | None, scale: float, fmt: str = ".3g") -> str:
    if st is None:
        return "–"
    if st.mean is None:
        return f"– (n=0{_extra(st, scale, fmt)})"
    half = st.ci_half
    pm = f" ± {_f(half, scale, fmt)}" if half is not None else ""
    return f"{_f(st.mean, scale, fmt)}{pm} (med {_f(st.median, scale, fmt)}, n={st.n}{_extra(st, scale, fmt)})"


POINT_TABLE = (
    ("downtime counters [ms]", "downtime_counters_s", 1e3),
    ("downtime packets [ms]", "downtime_packets_s", 1e3),
    ("downtime QEMU [ms]", "downtime_hypervisor_s", 1e3),
    ("outage (anatomy) [ms]", "outage_s", 1e3),
    ("duration link [s]", "duration_link_s", 1.0),
    ("duration QEMU [s]", "duration_hypervisor_s", 1.0),
    ("volume link [MB]", "volume_link_bytes", 1e-6),
    ("volume QEMU [MB]", "volume_hypervisor_bytes", 1e-6),
    ("RTT increase median [ms]", "rtt_increase_median_ms", 1.0),
    ("offered [Mbit/s]", "offered_bps", 1e-6),
    ("forwarded [Mbit/s]", "forwarded_bps", 1e-6),
    ("loss ratio [%]", "loss_ratio", 100.0),
)


def _classes(p: PointStats) -> str:
    parts = [
        (p.failed_setup, "setup"),
        (p.failed_migration, "migration"),
        (p.failed_post_migration, "post-migration"),
        (p.failed_unclassified, "unclassified"),
        (p.failed_interrupted, "interrupted"),
    ]
    return ", ".join(f"{n} {name}" for n, name in parts if n) or "–"


def points_table(points: Sequence[PointStats]) -> rh.Table:
    """Per-point table: failure rate over migration attempts and mean ± 95 % CI half-width (median, n)."""
    header = ["series", "accel", "rate [Mbit/s]", "frame [B]", "runs", "attempts", "failed attempts",
              "failure rate [%] (95 % CI)", "failed runs by class"]  # fmt: skip
    header += [h for h, _, _ in POINT_TABLE]
    rows, classes = [], []
    for p in points:
        ci = p.failure_ci
        fr = "–" if p.failure_rate is None else f"{p.failure_rate * 100:.0f}"
        if ci is not None:
            fr += f" ({ci[0] * 100:.0f}–{ci[1] * 100:.0f})"
        row = [p.series, p.accel, _f(p.rate_bps, 1e-6, "g"), p.frame_bytes, p.n_runs, p.n_attempts, p.n_failed, fr,
               _classes(p)]  # fmt: skip
        row += [_ms(p.stats.get(m), s) for _, m, s in POINT_TABLE]
        rows.append(row)
        classes.append("failed" if p.n_failed else "")
    note = (
        "Cells: mean ± half-width of the 95 % CI of the mean (Student t), median and n = the completed runs the "
        "mean is over; runs known only by a lower bound are never averaged ('k censored ≥ x': the largest bound), "
        "'absent' runs had no figure (e.g. no stall found). The failure rate is over migration attempts "
        "(set-up failures and interrupted runs are not attempts). Rows with failed attempts are shaded."
    )
    return rh.Table("Grid points", header, rows, classes, note, id="points")


def knobs_rows(points: Sequence[PointStats]) -> tuple[list[str], list[list[Any]]]:
    """Per point with QEMU knobs: what it asked for and QEMU's effective values as its runs read
    them back (the columns any such point recorded); no rows when no point set a knob."""
    with_knobs = [p for p in points if p.knobs]
    cols = [c for c in EFFECTIVE_COLUMNS if any(p.effective.get(c) is not None for p in with_knobs)]
    header = ["series", "accel", "rate [Mbit/s]", "frame [B]", "knobs asked", *cols]
    rows = []
    for p in with_knobs:
        eff = ["–" if p.effective.get(c) is None else p.effective[c] for c in cols]
        rows.append([p.series, p.accel, _f(p.rate_bps, 1e-6, "g"), p.frame_bytes, p.knobs, *eff])
    return header, rows


def knobs_table(points: Sequence[PointStats]) -> rh.Table | None:
    """:func:`knobs_rows` as a report table (None without knobs)."""
    header, rows = knobs_rows(points)
    if not rows:
        return None
    note = (
        "QEMU's values after the knobs were applied, read back with query-migrate-parameters and "
        "query-migrate-capabilities (qemu_announce: the destination's, which announces the guest after the "
        "migration; the others the source's). 'a|b': the point's runs differ; '–': not recorded."
    )
    return rh.Table("QEMU migration knobs (effective)", header, rows, [""] * len(rows), note, id="knobs")


def format_knobs(points: Sequence[PointStats]) -> str:
    """:func:`knobs_rows` as plain text for the terminal ("" without knobs)."""
    return _text_table(*knobs_rows(points))


def _text_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """``header`` over ``rows`` as plain text for the terminal: left-aligned columns two spaces
    apart, no trailing blanks ("" without rows)."""
    if not rows:
        return ""
    cells = [[str(c) for c in row] for row in (header, *rows)]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells)


def _run_cell(r: dict[str, Any], name: str, scale: float, fmt: str = ".3g") -> str:
    """A run's figure: its value (incomplete marked), '>= bound (why)' or '– (why)'."""
    qual = (r.get("quals") or {}).get(name)
    if r.get(name) is not None:
        mark = f" (incomplete: {', '.join(qual.get('reasons') or [])})" if qual else ""
        return f"{_f(r[name], scale, fmt)}{mark}"
    return q.short(qual, scale, fmt) if qual else "–"


def in_run_order(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Records in the order they ran (those without an order last, by run id)."""
    return sorted(records, key=lambda r: (r.get("order") is None, r.get("order") or 0, r.get("run_id")))


def runs_table(records: Sequence[dict[str, Any]]) -> rh.Table:
    """One row per run."""
    header = ["run", "series", "accel", "rate [Mbit/s]", "frame [B]", "status", "failure class",
              "downtime counters [ms]", "downtime packets [ms]", "duration link [s]", "volume link [MB]",
              "RTT increase [ms]", "forwarded [Mbit/s]", "failure / notes", "directory"]  # fmt: skip
    rows, classes = [], []
    for r in in_run_order(records):
        rows.append([
            r.get("run_id"), r.get("series"), r.get("accel"), _f(r.get("rate_bps"), 1e-6, "g"), r.get("frame_bytes"),
            r.get("status"), r.get("failure_class") or "",
            _run_cell(r, "downtime_counters_s", 1e3), _run_cell(r, "downtime_packets_s", 1e3),
            _run_cell(r, "duration_link_s", 1.0), _run_cell(r, "volume_link_bytes", 1e-6),
            _run_cell(r, "rtt_increase_median_ms", 1.0), _run_cell(r, "forwarded_bps", 1e-6),
            (r.get("failure") or r.get("notes") or "")[:200], r.get("run_dir"),
        ])  # fmt: skip
        classes.append("" if r.get("status") == "completed" else "failed")
    return rh.Table("Runs (in the order they ran)", header, rows, classes, id="runs")


def anatomy_table(records: Sequence[dict[str, Any]]) -> rh.Table | None:
    """One row per run with a timeline: the outage's phases, the sessions that flapped and the
    timeline itself (docs/metrics.md "Outage anatomy"); None when no run has one."""
    rows = [r for r in records if r.get("timeline")]
    if not rows:
        return None
    header = ["run", "series", "vCPU blackout [ms]", "reattachment [ms]", "reconvergence [ms]", "outage [ms]",
              "BFD flaps", "BGP flaps", "timeline [ms from migration start]"]  # fmt: skip
    body = [
        [r.get("run_id"), r.get("series"), _run_cell(r, "vcpu_blackout_s", 1e3), _run_cell(r, "reattachment_s", 1e3),
         _run_cell(r, "reconvergence_s", 1e3), _run_cell(r, "outage_s", 1e3), _f(r.get("bfd_flaps"), 1, "g"),
         _f(r.get("bgp_flaps"), 1, "g"), r["timeline"]]
        for r in in_run_order(rows)
    ]  # fmt: skip
    note = (
        "vCPU blackout: source stop to destination resume; reattachment: resume to the first packet after it; "
        "reconvergence: that packet to full rate; outage: last packet before the blackout to full rate."
    )
    return rh.Table("Outage anatomy (per run)", header, body, None, note, id="anatomy")


def timers_rows(records: Sequence[dict[str, Any]]) -> tuple[list[str], list[list[Any]]]:
    """Per mechanism (hypervisor, mode) and BFD setting of the completed runs with BFD peers:
    how often BFD survived, the longest vCPU blackout it survived and the shortest it did not,
    and the data-plane outage of the runs where it went down (median; bounds counted apart);
    no rows without such runs."""
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for r in records:
        if r.get("bfd") and r.get("status") == "completed":
            mech = " ".join(str(x) for x in (r.get("hv"), r.get("mode")) if x)
            groups.setdefault((mech, str(r.get("accel")), r["bfd"]), []).append(r)
    header = ["mechanism", "accel", "BFD [ms x mult]", "detect [ms]", "runs", "BFD survived",
              "longest blackout survived [ms]", "shortest blackout not survived [ms]",
              "outage when not survived [ms] (median, n)", "BGP flapped"]  # fmt: skip

    def detect(bfd: str) -> float:
        i, m = (int(x) for x in bfd.split("x"))
        return float(i * m)

    rows = []
    for (mech, accel, bfd), rs in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1], detect(kv[0][2]))):
        up = [r for r in rs if r.get("bfd_flaps") == 0]
        down = [r for r in rs if isinstance(r.get("bfd_flaps"), int | float) and r["bfd_flaps"] > 0]
        unknown = len(rs) - len(up) - len(down)
        kept = [r["vcpu_blackout_s"] for r in up if r.get("vcpu_blackout_s") is not None]
        lost = [r["vcpu_blackout_s"] for r in down if r.get("vcpu_blackout_s") is not None]
        outages = sorted(r["outage_s"] for r in down if r.get("outage_s") is not None)
        bounds = [r for r in down if r.get("outage_s") is None and r.get("outage_s_lower") is not None]
        med = _f(statistics.median(outages), 1e3, ".0f") if outages else "–"
        med += f" (n={len(outages)}" + (f", {len(bounds)} ≥ bound" if bounds else "") + ")"
        survived = f"{len(up)} of {len(rs)}" + (f" ({unknown} unknown)" if unknown else "")
        bgp = sum(1 for r in rs if isinstance(r.get("bgp_flaps"), int | float) and r["bgp_flaps"] > 0)
        rows.append([mech, accel, bfd, f"{detect(bfd):g}", len(rs), survived,
                     _f(max(kept), 1e3, ".0f") if kept else "–", _f(min(lost), 1e3, ".0f") if lost else "–", med,
                     f"{bgp} of {len(rs)}"])  # fmt: skip
    return header, rows


def timers_table(records: Sequence[dict[str, Any]]) -> rh.Table | None:
    """:func:`timers_rows` as the report's table (None without runs with BFD peers)."""
    header, rows = timers_rows(records)
    if not rows:
        return None
    note = (
        "Completed runs with BFD peers (PEERING=...,bfd), per migration mechanism and BFD setting. A run survived "
        "when no BFD session went down; blackouts are the runs' vCPU blackouts (source stop to destination "
        "resume), outages their data-plane outage (last packet before the blackout to full rate, docs/metrics.md "
        "'Outage anatomy'). BGP follows BFD down."
    )
    return rh.Table("Routing timers against the migration (BFD)", header, rows, None, note, id="timers")


def labs_rows(records: Sequence[dict[str, Any]]) -> tuple[list[str], list[list[Any]]]:
    """Per lab that ran runs (more than one lab only): its runs, failures, and by how much its
    completed runs' downtime (packets) and migration duration differ from their point's median
    over every lab (the median of those differences), so that a slow or odd lab stands out
    whatever mix of points it drew."""
    import statistics

    by: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        if r.get("lab"):
            by.setdefault(str(r["lab"]), []).append(r)
    if len(by) < 2:
        return [], []
    ok = [r for r in records if r.get("status") == "completed" and r.get("lab")]

    def point_medians(key: str) -> dict[str, float]:
        per: dict[str, list[float]] = {}
        for r in ok:
            if isinstance(r.get(key), int | float):
                per.setdefault(str(r.get("series")) + "|" + str(r.get("point")), []).append(float(r[key]))
        return {k: statistics.median(v) for k, v in per.items()}

    def offset(rs: list[dict[str, Any]], key: str, scale: float, medians: dict[str, float]) -> Any:
        xs = [(float(r[key]) - medians[str(r.get("series")) + "|" + str(r.get("point"))]) * scale
              for r in rs if r.get("status") == "completed" and isinstance(r.get(key), int | float)]  # fmt: skip
        return round(statistics.median(xs), 3) if xs else "–"

    down, dur = point_medians("downtime_packets_s"), point_medians("duration_link_s")
    header = [
        "lab",
        "runs",
        "failed",
        "downtime (packets) - its point's median, ms",
        "duration (link) - its point's median, s",
    ]
    rows = []
    for lab, rs in sorted(by.items()):
        done = sum(1 for r in rs if r.get("status") == "completed")
        rows.append([lab, len(rs), len(rs) - done, offset(rs, "downtime_packets_s", 1e3, down),
                     offset(rs, "duration_link_s", 1, dur)])  # fmt: skip
    return header, rows


def labs_table(records: Sequence[dict[str, Any]]) -> rh.Table | None:
    """:func:`labs_rows` as the report's table (None with runs from one lab or none)."""
    header, rows = labs_rows(records)
    if not rows:
        return None
    note = (
        "Runs of a campaign spread over lab workers (SCHEDULER=), per lab that ran them: the median, over the "
        "lab's completed runs, of each run's figure minus the median of its point over every lab."
    )
    return rh.Table("Per lab", header, rows, None, note, id="labs")


def format_labs(records: Sequence[dict[str, Any]]) -> str:
    """:func:`labs_rows` as plain text ("" with one lab)."""
    return _text_table(*labs_rows(records))


def definitions() -> list[tuple[str, str]]:
    """The metric definitions (docs/metrics.md) and the aggregation rules."""
    out = []
    metrics_md = REPO / "docs" / "metrics.md"
    if metrics_md.exists():
        out.append(("Metric definitions (docs/metrics.md)", metrics_md.read_text()))
    else:
        out.append(("Metric definitions", "docs/metrics.md was not found."))
    out.append(("Aggregation over repetitions", AGGREGATE_DEFINITIONS))
    return out


@dataclass
class Outputs:
    """What was written and the point statistics (for the terminal summary)."""

    out_dir: Path
    records: list[dict[str, Any]]
    points: list[PointStats]


def check_accelerators(records: Sequence[dict[str, Any]]) -> None:
    """Refuse (ConfigError, one line) a report in which one point would mix accelerators."""
    mixed = mixed_accelerators(records)
    if mixed:
        more = f" (and {len(mixed) - 1} more)" if len(mixed) > 1 else ""
        raise ConfigError(
            f"{mixed[0]}{more}: a point must not mix accelerators; report each accelerator's runs separately"
        )


def check_qemu_builds(records: Sequence[dict[str, Any]]) -> None:
    """Refuse (ConfigError, one line) a report in which one point would pool runs of different
    QEMU builds (runs of the default stack before and after it changed, say)."""
    mixed = mixed_qemu(records) + mixed_routers(records)
    if mixed:
        more = f" (and {len(mixed) - 1} more)" if len(mixed) > 1 else ""
        raise ConfigError(
            f"{mixed[0]}{more}: a point must not pool QEMU or router builds; name the stack with QEMU= and "
            "ROUTER=<software>@<release> (docs/stack.md) "
            "or report each build's runs separately"
        )


def check_same_accelerator(recs_a: Sequence[dict[str, Any]], recs_b: Sequence[dict[str, Any]]) -> None:
    """Refuse (ConfigError, one line) comparing runs made with different accelerators."""
    acc_a = sorted({str(r["accel"]) for r in recs_a if r.get("accel") is not None})
    acc_b = sorted({str(r["accel"]) for r in recs_b if r.get("accel") is not None})
    if acc_a and acc_b and acc_a != acc_b:
        raise ConfigError(
            f"A ran with accel={','.join(acc_a)}, B with accel={','.join(acc_b)}: "
            "a comparison across accelerators is refused (compare runs of the same accelerator)"
        )


def build_outputs(
    out_dir: Path,
    sources: Sequence[Source],
    title: str,
    extra_tables: Sequence[rh.Table] = (),
    banner: tuple[str, str] | None = None,
    lead_tables: Sequence[rh.Table] = (),
    extra_definitions: Sequence[tuple[str, str]] = (),
    subtitle: str = "",
    collected: Sequence[tuple[list[dict[str, Any]], list[dict[str, Any]]]] | None = None,
) -> Outputs:
    """Write runs.csv, points.csv, the figures (means, and the runs' CDF and box plots) and
    report.html into ``out_dir`` (atomically)."""
    records: list[dict[str, Any]] = []
    meta_sections = []
    for i, src in enumerate(sources):
        recs, metas = collected[i] if collected is not None else collect(src)
        records += recs
        meta_sections.append((f"{src.label or 'source'}: {src.path.name}", source_metadata(src, recs, metas)))
    check_accelerators(records)
    check_qemu_builds(records)
    points = aggregate(records)
    write_text(out_dir / "runs.csv", csv_text(RUN_COLUMNS, records))
    write_text(out_dir / "points.csv", csv_text(point_columns(), [point_row(p) for p in points]))
    formats = formats_from_env()
    figures = {**render_all(points, formats), **render_distributions(records, formats)}
    for name, data in figures.items():
        write_bytes(out_dir / name, data)
    plots = [rh.Plot(spec.title, figures[spec.name], f"{MEAN_CAPTION}; file {spec.name}") for spec in FIGURES]
    for metric, label, _ in DISTRIBUTION_METRICS:
        for kind, what, caption in (
            ("cdf", "empirical CDF of the runs", CDF_CAPTION),
            ("box", "runs per rate", BOX_CAPTION),
        ):
            name = distribution_name(metric, kind)
            plots.append(rh.Plot(f"{label.split(' [')[0]}: {what}", figures[name], f"{caption}; file {name}"))
    report = rh.Report(
        title=title,
        subtitle=subtitle,
        banner=banner,
        lead_tables=lead_tables,
        plots=plots,
        tables=[
            *(t for t in (timers_table(records),) if t is not None),
            *(t for t in (labs_table(records),) if t is not None),
            *extra_tables,
            points_table(points),
            *(t for t in (knobs_table(points),) if t is not None),
            runs_table(records),
            *(t for t in (anatomy_table(records),) if t is not None),
        ],
        metadata=meta_sections,
        definitions_md=[*definitions(), *extra_definitions],
        generated_utc=sd.now_utc(),
    )
    write_text(out_dir / REPORT_NAME, rh.render(report))
    return Outputs(out_dir, records, points)


def sweep_title(source: Source) -> str:
    """Report title of one sweep."""
    m = source.meta
    grid = m.get("grid") or {}
    camp = m.get("campaign") or {}
    if camp.get("name"):
        return f"vrmig campaign {camp['name']} ({source.path.name}): {len(m['points'])} points × {m['reps']} reps"
    if source.kind == "sweep":
        t = (grid.get("template") or {}) if isinstance(grid, dict) else {}
        size = f"{len(m['points'])} points × {m['reps']} reps"
        return f"vrmig sweep {source.path.name}: {t.get('hv')} {t.get('mode')}, {size}"
    return f"vrmig {source.kind} {source.path.name}"


def write_sweep_outputs(sweep_dir: Path) -> Outputs:
    """(Re)build the outputs of one sweep directory inside it."""
    src = load_source(sweep_dir)
    return build_outputs(sweep_dir, [src], sweep_title(src))


def _cell(p: PointStats, name: str, scale: float) -> str:
    s = p.stats.get(name)
    if s is None:
        return "–"
    bound = f" +{s.n_censored}≥{s.lower_max * scale:.3g}" if s.n_censored and s.lower_max is not None else ""
    if s.mean is None:
        return f"– n=0{bound}" + (f" ({s.n_absent} absent)" if s.n_absent else "")
    half = "" if s.ci_half is None else f" ± {s.ci_half * scale:.3g}"
    return f"{s.mean * scale:.3g}{half} n={s.n}{bound}"


def format_timers(records: Sequence[dict[str, Any]]) -> str:
    """:func:`timers_rows` as plain text for the terminal ("" without runs with BFD peers)."""
    return _text_table(*timers_rows(records))


def format_points(points: Sequence[PointStats]) -> str:
    """Terminal table of the grid points: failed / migration attempts, then per metric the mean ±
    CI half-width, n = runs in the mean, '+k≥x' for k runs known only by a lower bound (largest
    bound x) and, where no run measured it, how many completed runs had no figure."""
    w = max([18, *(len(p.series) for p in points)])  # the series column fits the longest name
    lines = [
        f"{'series':<{w}} {'accel':<5} {'rate':>9} {'frame':>5} {'runs':>4} {'fail':>7}  {'downtime ms (counters)':>30}"
        f"  {'duration s (link)':>24}  {'volume MB (link)':>24}  {'RTT+ ms':>16}"
    ]
    for p in points:
        fr = "–" if p.failure_rate is None else f"{p.n_failed}/{p.n_attempts}"
        lines.append(
            f"{p.series:<{w}} {p.accel or '–':<5} {_f(p.rate_bps, 1e-6, 'g') + 'M':>9} {p.frame_bytes!s:>5}"
            f" {p.n_runs:>4} {fr:>7}  {_cell(p, 'downtime_counters_s', 1e3):>30}"
            f"  {_cell(p, 'duration_link_s', 1.0):>24}  {_cell(p, 'volume_link_bytes', 1e-6):>24}"
            f"  {_cell(p, 'rtt_increase_median_ms', 1.0):>16}"
        )
    return "\n".join(lines)
