"""report.html of a calibration results directory (``make calibrate``): the verdict as the command
prints it ("cut targets met: k of n"), every (kind, estimator, duration) row and every event with
its true duration, measurement, error, target and pass or miss, a plot of the errors against the
targets, the control-plane checks with routing peers, and the metadata
(:mod:`analysis.metrics.calibration`, docs/metrics.md "Calibration").

An estimator that found no outage has no measurement: its cells say absent with the estimator's
flags, never an error of 0 or of −duration."""

from __future__ import annotations

import io
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from analysis.metrics import calibration as cm
from analysis.present import html as rh
from analysis.present.run_report import NA, definitions, guarded, meta_sections, now_utc, write_report
from migrate.core.rundir import KIND_CALIBRATE, read_meta

log = logging.getLogger(__name__)

PLOT_TITLE = "Error of each estimator against its target, per event"


def _ms(x: float | None, fmt: str = ".2f") -> str:
    return NA if x is None else format(x * 1e3, fmt)


def _verdict(passed: bool | None) -> str:
    return "–" if passed is None else ("pass" if passed else "MISS")


def verdict(cal: cm.Calibration | None, meta: Mapping[str, Any], error: str = "") -> tuple[str, str]:
    """The banner: the cut targets met (k of n) and the control-plane checks, as ``make
    calibrate`` prints them; bad when one is missed, the run did not complete or the analysis
    failed; info when no target applies (pauses only) or meta.json records no status."""
    status = meta.get("status")
    if status is None:
        ran = "meta.json records no run status; "
    elif status != "completed":
        ran = f"the calibration run {status}: {meta.get('failure') or 'no reason recorded'}; "
    else:
        ran = ""
    if cal is None:
        return "bad", f"{ran}calibration analysis failed: {error or 'no reason recorded'}"
    parts = []
    cuts = [r for r in cal.rows if r.kind == "cut"]
    if cuts:
        parts.append(f"cut targets met: {sum(bool(r.passed) for r in cuts)} of {len(cuts)}")
    if cal.control is not None:
        from analysis.metrics.calibration_control import met

        judged = [c for c in cal.control.checks if c.judged]
        parts.append(f"control-plane checks met: {sum(met(c) for c in judged)} of {len(judged)}")
    if not parts:
        parts.append("no target applies (pauses are measured, not judged)")
    if (status is not None and status != "completed") or cal.passed is False:
        return "bad", ran + "; ".join(parts)
    return ("good" if cal.passed and status == "completed" else "info"), ran + "; ".join(parts)


def rows_table(cal: cm.Calibration) -> rh.Table:
    """One row per (kind, estimator, duration): medians, errors, target and verdict."""
    header = ["kind", "estimator", "duration [ms]", "events", "seen", "true (median) [ms]", "measured (median) [ms]",
              "error (median) [ms]", "p95 |error| [ms]", "max |error| [ms]", "target [ms]", "verdict",
              "stream gap [ms]", "target with stream [ms]", "verdict with stream", "note"]  # fmt: skip
    rows, classes = [], []
    for r in cal.rows:
        rows.append([r.kind, r.estimator, f"{r.nominal_ms:g}", r.n, r.detected, _ms(r.median_true_s),
                     _ms(r.median_measured_s), _ms(r.median_error_s), _ms(r.p95_error_s), _ms(r.max_abs_error_s),
                     _ms(r.target_s), _verdict(r.passed), _ms(r.stream_gap_s), _ms(r.stream_target_s),
                     _verdict(r.passed_stream), r.note])  # fmt: skip
        classes.append("failed" if r.passed is False else "")
    note = (
        "error = measured − true; a cut row passes when every event of it was seen and within its own target "
        "(packets: 2 edge spacings + edge uncertainty; counters: 1 sampling period + the same); pauses are "
        "measured (how much longer the outage is than the pause), not judged ('–'). 'stream': the longest other "
        "inter-arrival gap at B within 1 s of the events, the second target adds twice it (informational). "
        "Rows that miss are shaded."
    )
    return rh.Table("Calibration per kind, estimator and duration", header, rows, classes, note, id="calibration")


def events_table(cal: cm.Calibration) -> rh.Table:
    """One row per event and estimator: true duration, measurement, error, target and verdict."""
    header = ["event", "rep", "kind", "duration [ms]", "estimator", "true [ms]", "uncertainty [ms]", "measured [ms]",
              "error [ms]", "target [ms]", "verdict", "stream gap [ms]", "lost in gap", "flags"]  # fmt: skip
    rows, classes = [], []
    for e in cal.estimates:
        ev = e.event
        if e.measured_s is None:
            measured = f"absent ({', '.join(e.flags) or 'no outage found'})"
        else:
            measured = _ms(e.measured_s, ".3f")
        rows.append([ev.index, ev.rep + 1, ev.kind, f"{ev.nominal_ms:g}", e.estimator, _ms(ev.true_s, ".3f"),
                     _ms(ev.uncertainty_s, ".3f"), measured, _ms(e.error_s, ".3f"), _ms(e.target_s, ".3f"),
                     _verdict(e.passed), _ms(e.stream_gap_s), NA if e.lost_in_gap is None else e.lost_in_gap,
                     " ".join(e.flags)])  # fmt: skip
        classes.append("failed" if e.passed is False else "")
    return rh.Table("Every event and estimator", header, rows, classes,
                    "In the order the events ran; events that miss their target are shaded.", id="events")  # fmt: skip


CONTROL_COLUMNS = ("kind", "pause_ms", "rep", "true_ms", "protocol", "peer", "limit_ms", "silence_ms", "silence_open",
                   "deciding_silence_ms", "went_down", "expected_down", "match_error_ms", "pass", "reason")  # fmt: skip


def control_table(cal: cm.Calibration) -> rh.Table | None:
    """With routing peers: one row per event, protocol and peer (calibration_control_plane.csv)."""
    if cal.control is None:
        return None
    from analysis.metrics.calibration_control import met, record

    rows, classes = [], []
    for c in cal.control.checks:
        rec = record(c)
        rec["pass"] = {"true": "pass", "false": "MISS"}.get(rec.get("pass", ""), "")
        rows.append([rec.get(k) or NA for k in CONTROL_COLUMNS])
        classes.append("failed" if c.judged and not met(c) else "")
    note = (
        "A silence below the session's limit must leave it up, above it bring it down; with BFD its silence must "
        "match the true duration. '–': absent or not applicable, 'reason' says which. docs/peering.md."
    )
    return rh.Table("Control-plane checks", list(CONTROL_COLUMNS), rows, classes, note, id="control")


def instrument_table(cal: cm.Calibration) -> rh.Table:
    """What the targets are made of: the stream's spacing, the sink's threshold, the sampling period."""
    rows = [
        ["packet interval (1 / achieved packet rate)", _ms(cal.packet_interval_s, ".3f")],
        ["departure interval (the generator's burst quantum when longer)", _ms(cal.departure_interval_s, ".3f")],
        ["sink gap threshold", _ms(cal.gap_threshold_s, ".3f")],
        ["counter sampling period", _ms(cal.period_s, ".1f")],
    ]
    return rh.Table(
        "Instruments", ["figure", "ms"], rows, None, "'–': not recorded in the run's files.", id="instruments"
    )


def notes_table(cal: cm.Calibration | None, error: str = "") -> rh.Table:
    notes = [error] if error else []
    if cal is not None:
        notes += list(cal.notes)
    return rh.Table("Notes of the analysis", ["note"], [[n] for n in notes] or [["none"]], None, id="notes")


def error_plot(cal: cm.Calibration) -> bytes | None:
    """PNG: per kind, each seen event's error (ms) against its true duration, per estimator, with
    the cut targets (±) as bars; None without any seen event."""
    seen = [e for e in cal.estimates if e.error_s is not None]
    if not seen:
        return None
    kinds = [k for k in cm.KINDS if any(e.event.kind == k for e in cal.estimates)]
    fig = Figure(figsize=(9.0, 3.4 * len(kinds)), layout="constrained")
    axes = fig.subplots(len(kinds), 1, squeeze=False)
    for kind, ax in zip(kinds, (a[0] for a in axes), strict=True):
        for i, est in enumerate(cm.ESTIMATORS):
            es = [e for e in seen if e.event.kind == kind and e.estimator == est]
            if not es:
                continue
            shift = 1.0 + (i - 0.5) * 0.04  # the estimators side by side at each duration (log axis)
            x = [e.event.true_s * 1e3 * shift for e in es]
            ax.scatter(x, [e.error_s * 1e3 for e in es], s=18, color=f"C{i}", label=est, zorder=3)
            targets = [(xi, e.target_s * 1e3) for xi, e in zip(x, es, strict=True) if e.target_s is not None]
            if targets:
                ax.errorbar([t[0] for t in targets], [0.0] * len(targets), yerr=[t[1] for t in targets], fmt="none",
                            ecolor=f"C{i}", alpha=0.35, capsize=3, label=f"{est} target (±)")  # fmt: skip
        missed = [e for e in cal.estimates if e.event.kind == kind and e.error_s is None]
        if missed:
            ax.text(0.01, 0.02, f"{len(missed)} not seen (no measurement)", transform=ax.transAxes, fontsize="small")
        ax.axhline(0.0, color="0.6", lw=0.8)
        ax.set_xscale("log")
        ticks = sorted({e.event.nominal_ms for e in cal.estimates if e.event.kind == kind})
        ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
        ax.minorticks_off()
        ax.set_xlabel("true duration [ms]")
        ax.set_ylabel("error = measured − true [ms]")
        ax.set_title(f"{kind}" + (" (measured, no target)" if kind == "pause" else ""), fontsize="medium")
        ax.legend(fontsize="x-small")
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    return buf.getvalue()


def build_calibration_report(
    run_id: str,
    cal: cm.Calibration | None,
    hv: str,
    meta: Mapping[str, Any],
    error: str = "",
    generated_utc: str = "",
) -> rh.Report:
    """The report of a calibration (``cal`` None: its analysis failed with ``error``)."""
    spec = meta.get("calibration") or {}
    kinds = ",".join(spec.get("kinds") or []) or NA
    rate = spec.get("rate_bps")
    title = f"vrmig calibration {run_id}: {hv} {kinds}"
    subtitle = (
        f"{rate / 1e6:g} Mbit/s of {spec.get('frame_bytes', NA)} B frames, " if isinstance(rate, int | float) else ""
    ) + f"accel {meta.get('accel') or NA}, started {meta.get('created_utc') or NA}"
    lead, tables, plots, missing = [], [], [], []
    if cal is not None:
        lead += [rows_table(cal)] if cal.rows else []
        png = error_plot(cal)
        if png is not None:
            plots.append(rh.Plot(PLOT_TITLE, png, "the numbers: table 'Every event and estimator'"))
        else:
            missing.append((PLOT_TITLE, "no estimator measured any event (see the notes)"))
        tables += [events_table(cal), *(t for t in (control_table(cal),) if t is not None), instrument_table(cal)]
    tables.append(notes_table(cal, error))
    run = {
        "run id": run_id, "kind": meta.get("kind"), "status": meta.get("status"), "failure": meta.get("failure"),
        "created (UTC)": meta.get("created_utc"), "finished (UTC)": meta.get("finished_utc"),
        "git commit": meta.get("git_commit"), "accelerator": meta.get("accel"), "method": meta.get("method"),
    }  # fmt: skip
    return rh.Report(
        title=title,
        subtitle=subtitle,
        banner=verdict(cal, meta, error),
        lead_tables=lead,
        plots=plots,
        missing_plots=missing,
        tables=tables,
        metadata=meta_sections(meta, run, "calibration"),
        definitions_md=[definitions("metrics.md", "Calibration")],
        generated_utc=generated_utc,
    )


def is_calibration(run_dir: Path) -> bool:
    """The directory is a calibration's (meta.json kind ``calibrate``)."""
    try:
        return read_meta(Path(run_dir)).get("kind") == KIND_CALIBRATE
    except (OSError, ValueError):
        return False


def write_calibration_report(run_dir: Path, cal: cm.Calibration | None = None, hv: str | None = None) -> Path:
    """Write ``run_dir/report.html``: of ``cal`` (default: :func:`~analysis.metrics.calibration.
    load_and_calibrate` of the directory; should that fail, a report that says so)."""
    run_dir = Path(run_dir)
    try:
        meta = read_meta(run_dir)
    except (OSError, ValueError) as err:
        meta = {"status": f"unknown (meta.json unreadable: {type(err).__name__}: {err})"}
    error = ""
    if cal is None:
        try:
            cal, hv = cm.load_and_calibrate(run_dir)
        except Exception as err:  # the report then says the analysis failed
            log.exception("calibration analysis failed")
            error = f"{type(err).__name__}: {err}"
    label = hv or str((meta.get("calibration") or {}).get("hv") or NA)
    return write_report(run_dir, build_calibration_report(run_dir.name, cal, label, meta, error, now_utc()))


def try_write_calibration_report(run_dir: Path, cal: cm.Calibration | None = None, hv: str | None = None) -> str | None:
    """:func:`write_calibration_report`, never raising: None when written, else why not."""
    return guarded(run_dir, write_calibration_report, run_dir, cal, hv)
