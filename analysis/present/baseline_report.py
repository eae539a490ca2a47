"""report.html of a baseline results directory (``make baseline``): per configuration the
forwarding figures of summary.json (the highest mean forwarded rate, the loss-free rates,
efficiency against the classical router), per swept rate the means with their 95 % CI, the
baseline's plots (offered_vs_forwarded.png, max_forwarded.png, routers.png) and the metadata
(:mod:`analysis.baseline.summary`, docs/campaigns.md "`make baseline`").

A figure the summary has no value for is shown as absent with the reason, never as 0."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from analysis.present import html as rh
from analysis.present.run_report import ABSENT, NA, definitions, guarded, meta_sections, now_utc, write_report
from migrate.core.rundir import META_JSON, read_meta

log = logging.getLogger(__name__)

#: the plots analysis.baseline.plot draws, in the order the report shows them
PLOTS = (
    ("offered_vs_forwarded.png", "Offered vs forwarded rate (mean, 95 % interval)"),
    ("max_forwarded.png", "Highest mean forwarded rate per set-up (and NDR when searched)"),
    ("routers.png", "Per-router forwarded rate and Jain's index"),
)
HV_NAMES = {"none": "none (Linux)", "criu": "criu (container)"}


def setup(c: Mapping[str, Any]) -> str:
    """A configuration's name as the plots label it: 'kvm/virtio ×2 +cpu'."""
    s = HV_NAMES.get(str(c.get("hv")), f"{c.get('hv')}/{c.get('nic')}")
    if (c.get("routers") or 1) > 1:
        s += f" ×{c['routers']}"
    if c.get("load") not in (None, "none"):
        s += f" +{c['load']}"
    return s


def stat_cell(st: Mapping[str, Any] | None, scale: float = 1e-6, fmt: str = ".1f") -> str:
    """'mean ± CI half-width (n=k)' of a summary.json statistic; '–' when it has none."""
    if not isinstance(st, Mapping) or st.get("mean") is None:
        return NA
    out = format(st["mean"] * scale, fmt)
    if st.get("ci95") is not None:
        out += f" ± {format(st['ci95'] * scale, fmt)}"
    return f"{out} (n={st.get('n', NA)})"


def _rate(bps: Any) -> str:
    if bps == 0:
        return "max (unpaced)"
    return f"{bps / 1e6:g}" if isinstance(bps, int | float) else NA


def _efficiency(c: Mapping[str, Any], key: str) -> str:
    eff = c.get("efficiency") or {}
    value = eff.get(key)
    if isinstance(value, int | float):
        return f"{value:.2f}"
    if eff.get("classical") is None:
        return f"{ABSENT} (no HV=none run with 1 router, the same IP, frame size and load)"
    return f"{ABSENT} (no {'NDR' if key == 'ndr' else 'forwarded rate'} of this set-up or the classical one)"


def configs_table(summary: Mapping[str, Any]) -> rh.Table:
    """One row per configuration: its forwarding figures."""
    header = ["set-up", "IP", "frame [B]", "routers", "load", "max forwarded [Mbit/s]", "at rate [Mbit/s]",
              "loss-free up to [Mbit/s]", "NDR per router [Mbit/s]", "efficiency (max forwarded)",
              "efficiency (NDR)", "failed points"]  # fmt: skip
    rows, classes = [], []
    for c in summary.get("configs") or []:
        mx = c.get("max_forwarded")
        best = stat_cell(mx.get("forwarded_bps")) if mx else f"{ABSENT} (no point forwarded)"
        ndr = c.get("ndr")
        if ndr is None:
            ndr_cell = "not searched (SEARCH=ndr)"
        else:
            ndr_cell = stat_cell(ndr.get("ndr_bps")) if ndr.get("ndr_bps") else f"{ABSENT} (no trial passed)"
            if ndr.get("at_upper_bound"):
                ndr_cell += f"; ≥ in {ndr['at_upper_bound']} repetition(s): the highest rate passed"
        lossfree = c.get("sweep_loss_free_bps")
        rows.append([setup(c), c.get("ip"), c.get("frame_bytes"), c.get("routers"), c.get("load"), best,
                     _rate(mx.get("rate_bps")) if mx else NA,
                     f"{lossfree / 1e6:g}" if lossfree else f"{ABSENT} (loss above 0.1 % at the lowest rate)",
                     ndr_cell, _efficiency(c, "max_forwarded"), _efficiency(c, "ndr"),
                     c.get("failed_points", NA)])  # fmt: skip
        classes.append("failed" if c.get("failed_points") else "")
    note = (
        "Means over the repetitions ± the half-width of their Student-t 95 % CI (n: repetitions; no interval for "
        "one). Loss-free: the highest swept rate up to which every rate's mean loss is ≤ 0.1 %. Efficiency: R / "
        "R_classical (HV=none, 1 router). Rows with failed points are shaded."
    )
    return rh.Table("Forwarding per configuration", header, rows, classes, note, id="configs")


def points_table(summary: Mapping[str, Any]) -> rh.Table:
    """One row per configuration and swept rate."""
    header = ["set-up", "IP", "frame [B]", "rate [Mbit/s]", "reps", "offered [Mbit/s]", "forwarded [Mbit/s]",
              "forwarded [kpps]", "loss [%]", "RTT median [ms]", "RTT p99 [ms]", "CPU host", "CPU hypervisor",
              "CPU router daemons", "Jain (throughput)", "generator short"]  # fmt: skip
    rows = []
    for c in summary.get("configs") or []:
        for p in c.get("points") or []:
            rows.append([setup(c), c.get("ip"), c.get("frame_bytes"), _rate(p.get("rate_bps")), p.get("reps"),
                         stat_cell(p.get("offered_bps")), stat_cell(p.get("forwarded_bps")),
                         stat_cell(p.get("forwarded_pps"), 1e-3, ".2f"), stat_cell(p.get("loss_ratio"), 100, ".3f"),
                         stat_cell(p.get("rtt_median_ms"), 1, ".3f"), stat_cell(p.get("rtt_p99_ms"), 1, ".3f"),
                         stat_cell(p.get("cpu_host"), 1, ".2f"), stat_cell(p.get("cpu_hv"), 1, ".2f"),
                         stat_cell(p.get("cpu_router_daemons"), 1, ".2f"),
                         stat_cell(p.get("jain_throughput"), 1, ".3f"),
                         f"{p.get('gen_limited', 0)} of {p.get('reps', NA)}"])  # fmt: skip
    note = (
        "CPU in CPU-seconds per second. '–': not measured for this set-up (no hypervisor process with HV=none or "
        "criu, the router's processes are host processes only with HV=none and criu, no probe answered). "
        "'generator short': repetitions in which vrgen offered > 5 % less than asked."
    )
    return rh.Table("Per configuration and rate", header, rows, None, note, id="points")


def plots(run_dir: Path, summary: Mapping[str, Any]) -> tuple[list[rh.Plot], list[tuple[str, str]]]:
    """The baseline's PNG plots that summary.json lists, and the others with why they are absent."""
    drawn = set(summary.get("plots") or [])
    shown, missing = [], []
    for name, title in PLOTS:
        path = run_dir / name
        if name in drawn and path.is_file():
            shown.append(rh.Plot(title, path.read_bytes(), f"file {name}"))
        elif summary.get("plot_error"):
            missing.append((title, f"plotting failed: {summary['plot_error']}"))
        elif not summary.get("configs"):
            missing.append((title, "no point finished"))
        else:
            missing.append((title, f"{name} was not drawn by this analysis"))
    return shown, missing


def banner(summary: Mapping[str, Any], meta: Mapping[str, Any] | None) -> tuple[str, str]:
    """good: completed and every point ok; bad: the run did not complete or points failed."""
    total, failed = summary.get("points_total", 0), summary.get("points_failed", 0)
    points = f"{total} point(s), {failed} failed"
    status = (meta or {}).get("status")
    if meta is None:
        return ("bad" if failed else "info"), f"{points}; meta.json absent: the run's status is unknown"
    if status != "completed":
        return "bad", f"{status or 'status not recorded'}: {meta.get('failure') or 'no reason recorded'}; {points}"
    return ("bad" if failed else "good"), f"completed: {points}"


def build_baseline_report(
    run_id: str,
    summary: Mapping[str, Any],
    meta: Mapping[str, Any] | None,
    shown: Sequence[rh.Plot] = (),
    missing: Sequence[tuple[str, str]] = (),
    generated_utc: str = "",
) -> rh.Report:
    """The report of a baseline from its summary.json, meta.json (None: absent) and plots."""
    hvs = ",".join(dict.fromkeys(str(c.get("hv")) for c in summary.get("configs") or [])) or NA
    accel = summary.get("accel") or (meta or {}).get("accel") or NA
    m = meta or {}
    run = {
        "run id": run_id, "kind": m.get("kind", "baseline"), "status": m.get("status"),
        "failure": m.get("failure"), "created (UTC)": m.get("created_utc"), "finished (UTC)": m.get("finished_utc"),
        "git commit": m.get("git_commit"), "accelerator": accel,
        "meta.json": "read" if meta is not None else f"{ABSENT}: the directory has no readable meta.json",
    }  # fmt: skip
    metadata = meta_sections(m, run, "spec")
    for key, title in (("tools", "Baseline tools"), ("notes", "Notes (meta.json)")):
        if isinstance(m.get(key), Mapping) and m[key]:
            metadata.append((title, dict(m[key])))
    if isinstance(m.get("configs"), Mapping) and m["configs"]:
        configs = {k: v.get("status") if isinstance(v, Mapping) else v for k, v in m["configs"].items()}
        metadata.append(("Configurations (meta.json)", configs))
    return rh.Report(
        title=f"vrmig baseline {run_id}: HV={hvs}",
        subtitle=f"accel {accel}; loss-free means mean loss ≤ {summary.get('loss_free_ratio', 0.001) * 100:g} %",
        banner=banner(summary, meta),
        lead_tables=[configs_table(summary)],
        plots=shown,
        missing_plots=missing,
        tables=[points_table(summary)],
        metadata=metadata,
        definitions_md=[
            definitions("campaigns.md", "`make baseline`"),
            definitions("metrics.md", "Cross-traffic loss (one definition)"),
        ],
        generated_utc=generated_utc,
    )


def write_baseline_report(run_dir: Path, summary: Mapping[str, Any]) -> Path:
    """Write ``run_dir/report.html`` from ``summary`` (the baseline's summary.json), its meta.json
    and its plots; raises when the report cannot be written."""
    run_dir = Path(run_dir)
    meta = None
    if (run_dir / META_JSON).is_file():
        try:
            meta = read_meta(run_dir)
        except (OSError, ValueError):
            log.warning("%s unreadable: the report has no metadata", run_dir / META_JSON)
    shown, missing = plots(run_dir, summary)
    return write_report(run_dir, build_baseline_report(run_dir.name, summary, meta, shown, missing, now_utc()))


def try_write_baseline_report(run_dir: Path, summary: Mapping[str, Any]) -> str | None:
    """:func:`write_baseline_report`, never raising: None when written, else why not."""
    return guarded(run_dir, write_baseline_report, run_dir, summary)
