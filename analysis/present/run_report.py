"""report.html of one migration run: its summary.json, meta.json and run plot as one self-contained
page (:mod:`analysis.present.html`).

A headline figure is shown as its value, as a bound (``≥ x``, ``≤ x``) when summary.json has only
a bound for it, or as absent with the reason its qualifier gives (docs/metrics.md "Absent,
censored, incomplete"): never as 0.  :func:`build_run_report` is pure (dicts and PNG bytes in, a
Report out); :func:`write_run_report` reads and writes the run directory."""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from analysis.metrics.anatomy import timeline_text
from analysis.present import html as rh
from analysis.values import dig
from migrate.core.atomic import write_text
from migrate.core.meta import REPO
from migrate.core.rundir import META_JSON, MIGRATION_PNG, REPORT_HTML, SUMMARY_JSON, read_meta, read_summary

log = logging.getLogger(__name__)

REPORT_NAME = REPORT_HTML
NA = "–"
ABSENT = "absent"
PLOT_TITLE = "Cross-traffic, migration link and RTT around the migration"


# -- shared by the run, baseline and calibration reports ---------------------------------------


def doc_section(path: Path, heading: str | None = None) -> str | None:
    """The Markdown of ``path`` (from its ``## heading`` to the next level-2 heading when given);
    None when the file or the heading is not there."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return None
    if heading is None:
        return text
    lines = text.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.strip() == f"## {heading}"), None)
    if start is None:
        return None
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    return "\n".join(lines[start:end]) + "\n"


def definitions(doc: str = "metrics.md", heading: str | None = None) -> tuple[str, str]:
    """(title, Markdown) of the definitions in ``docs/<doc>`` (one section of it with
    ``heading``), or a line saying it was not found."""
    where = f"docs/{doc}" + (f' "{heading}"' if heading else "")
    text = doc_section(REPO / "docs" / doc, heading)
    if text is None:
        return "Definitions", f"{where} was not found."
    return f"Definitions ({where})", text


def meta_sections(
    meta: Mapping[str, Any], run: Mapping[str, Any], spec_key: str = "scenario"
) -> list[tuple[str, dict[str, Any]]]:
    """The metadata of a results directory: the run's own facts (``run``), its parameters
    (meta.json ``spec_key``), the software stack and tools, the host and the testbed."""
    out: list[tuple[str, dict[str, Any]]] = [("Run", {k: _meta_cell(v) for k, v in run.items()})]
    spec = meta.get(spec_key)
    if isinstance(spec, Mapping):
        out.append((f"Parameters (meta.json {spec_key})", {k: _meta_cell(v) for k, v in spec.items()}))
    stack: dict[str, Any] = {}
    for name, part in (meta.get("stack") or {}).items():
        if isinstance(part, Mapping):
            keys = ("software", "version", "release", "source", "spec", "binary")
            stack[name] = {k: part[k] for k in keys if part.get(k) is not None}
    hyp = meta.get("hypervisor") or {}
    for key in ("qemu", "libvirt", "xen", "criu"):
        if isinstance(hyp, Mapping) and isinstance(hyp.get(key), str) and key not in stack:
            stack[key] = hyp[key]
    host = meta.get("host") or {}
    tools = host.get("tools") if isinstance(host, Mapping) else None
    if isinstance(tools, Mapping):
        stack.update({f"tool {k}": v for k, v in tools.items()})
    if stack:
        out.append(("Stack and tool versions", stack))
    if isinstance(host, Mapping) and host:
        out.append(("Host", {k: _meta_cell(v) for k, v in host.items() if k != "tools"}))
    testbed = meta.get("testbed")
    if isinstance(testbed, Mapping) and testbed:
        out.append(("Testbed", {k: _meta_cell(v) for k, v in testbed.items()}))
    return out


def now_utc() -> str:
    """ISO 8601 UTC time stamp of a report."""
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def _meta_cell(value: Any) -> Any:
    """A metadata value: an unset one (null) as '–', not as an empty cell."""
    return NA if value is None else value


def write_report(out_dir: Path, report: rh.Report) -> Path:
    """Render ``report`` to ``out_dir/report.html`` (atomically); returns its path."""
    path = Path(out_dir) / REPORT_NAME
    write_text(path, rh.render(report))
    return path


def guarded(out_dir: Path, write: Any, *args: Any) -> str | None:
    """Call ``write(*args)``; on any failure remove a stale report.html (it would describe other
    figures) and return the note that says why (None when it was written)."""
    try:
        write(*args)
        return None
    except Exception as err:  # the report is derived from files that must never be lost with it
        log.exception("report failed")
        try:
            (Path(out_dir) / REPORT_NAME).unlink(missing_ok=True)
        except OSError:
            log.warning("could not remove the stale %s", Path(out_dir) / REPORT_NAME)
        return f"report failed: {type(err).__name__}: {err}"


# -- one migration run -------------------------------------------------------------------------


def _num(value: float, scale: float, fmt: str) -> str:
    v = value if scale == 1 else value * scale
    # a count's bound is a float in summary.json's qualifiers (1351.0): an integer format shows it whole
    return format(round(v) if fmt.endswith("d") else v, fmt)


def figure_cells(s: Mapping[str, Any], path: str, scale: float, fmt: str, unit: str) -> tuple[str, str]:
    """(value, qualifier) of a headline figure of summary.json: ``"69.96 ms"``, a bound ``"≥ 12.30
    ms"``/``"≤ 1 MB/s"``, or ``"absent"``; the qualifier's sentence (why absent, what the bound
    means, what is incomplete), '' for a plain value."""
    value = dig(s, *path.split("."))
    qual = dig(s, "qualifiers", path)
    qual = qual if isinstance(qual, Mapping) else {}
    why = str(qual.get("text") or ", ".join(qual.get("reasons") or []))
    if isinstance(value, int | float) and not isinstance(value, bool):
        cell = f"{_num(value, scale, fmt)} {unit}"
        return cell, (f"incomplete: {why}" if qual.get("state") == "incomplete" else "")
    if qual.get("state") == "censored" and qual.get("lower") is not None:
        return f"≥ {_num(qual['lower'], scale, fmt)} {unit}", f"a lower bound: {why}"
    if qual.get("state") == "censored" and qual.get("upper") is not None:
        return f"≤ {_num(qual['upper'], scale, fmt)} {unit}", f"an upper bound: {why}"
    if not why and path.startswith("anatomy.") and not isinstance(s.get("anatomy"), Mapping):
        why = "no outage anatomy in summary.json (it needs a migration window)"
    return ABSENT, why or "summary.json gives no reason (see the notes of the analysis)"


def _hv_names(s: Mapping[str, Any]) -> tuple[str, str]:
    """Who reported the hypervisor's figures, and the name of its volume figure."""
    source = str(dig(s, "details", "hypervisor", "reply_source") or "")
    if source.startswith("libvirt"):
        return "libvirt", "libvirt memory processed"
    if source == "criu":
        return "CRIU", "CRIU pages written"
    if source == "xl":
        return "xl", "dom0 migration NIC bytes"
    return "QEMU", "QEMU ram.transferred"


def headline_rows(s: Mapping[str, Any]) -> list[tuple[str, str, float, str, str]]:
    """(figure, summary.json path, scale, format, unit) of the lead table."""
    who, who_volume = _hv_names(s)
    return [
        ("downtime: counters (longest stall of B's eth0 receive counters)", "downtime_s.counters", 1e3, ".2f", "ms"),
        ("downtime: packets (longest gap of the cross-traffic at the sink)", "downtime_s.packets", 1e3, ".2f", "ms"),
        (f"downtime: {who}'s own figure", "downtime_s.hypervisor", 1e3, ".2f", "ms"),
        ("data-plane outage (last packet to full rate)", "anatomy.phases.outage.seconds", 1e3, ".2f", "ms"),
        ("migration duration: link (R1 mig0 activity)", "duration_s.link", 1.0, ".3f", "s"),
        (f"migration duration: {who}", "duration_s.hypervisor", 1.0, ".3f", "s"),
        ("migration volume: link (R1 mig0 bytes)", "volume_bytes.link", 1e-6, ".1f", "MB"),
        (f"migration volume: {who_volume}", "volume_bytes.hypervisor", 1e-6, ".1f", "MB"),
        ("cross-traffic forwarded", "cross_traffic.forwarded_bps", 1e-6, ".1f", "Mbit/s"),
        ("cross-traffic lost", "cross_traffic.lost_packets", 1.0, "d", "packets"),
        ("RTT median during the migration", "rtt_ms.during.median", 1.0, ".2f", "ms"),
        ("guest dirty rate before the migration", "dirty_rate.measured_mb_s", 1.0, "g", "MB/s"),
    ]


def headline_table(s: Mapping[str, Any]) -> rh.Table:
    """The lead table: each downtime estimator, the outage, duration, volume, loss and RTT."""
    rows, classes = [], []
    for label, path, scale, fmt, unit in headline_rows(s):
        value, why = figure_cells(s, path, scale, fmt, unit)
        rows.append([label, value, why])
        classes.append("skipped" if value == ABSENT else "")
    note = (
        "A figure summary.json holds only a bound for is shown as that bound (≥ / ≤); an absent one as "
        "'absent' with its reason (never as 0). Definitions: below (docs/metrics.md)."
    )
    return rh.Table("Headline figures", ["figure", "value", "bound, incomplete or why absent"], rows, classes, note,
                    id="headline")  # fmt: skip


def _ms(x: Any, fmt: str = ".2f") -> str:
    return format(x * 1e3, fmt) if isinstance(x, int | float) and not isinstance(x, bool) else NA


def _phase_cells(p: Mapping[str, Any]) -> tuple[str, str]:
    """A phase's duration (ms) or its bound, and why absent."""
    if p.get("seconds") is not None:
        return _ms(p["seconds"]), ""
    if p.get("lower_s") is not None and p.get("upper_s") is None:
        return f"≥ {_ms(p['lower_s'])}", p.get("why_absent") or "a lower bound"
    if p.get("upper_s") is not None:
        return f"≤ {_ms(p['upper_s'])}", p.get("why_absent") or "an upper bound"
    return ABSENT, p.get("why_absent") or "no reason recorded"


def anatomy_tables(s: Mapping[str, Any]) -> list[rh.Table]:
    """The outage's phases and its timeline (summary.json ``anatomy``); none without one."""
    a = s.get("anatomy")
    if not isinstance(a, Mapping):
        return []
    labels = {m.get("key"): m.get("label") or m.get("key") for m in a.get("marks") or [] if isinstance(m, Mapping)}
    rows = []
    for key, p in (a.get("phases") or {}).items():
        if not isinstance(p, Mapping):
            continue
        value, why = _phase_cells(p)
        span = f"{labels.get(p.get('from'), p.get('from'))} → {labels.get(p.get('to'), p.get('to'))}"
        rows.append([key.replace("_", " "), span, value, _ms(p.get("resolution_s"), ".3f"), why])
    header = ["phase", "from → to", "duration [ms]", "resolution [ms]", "bound or why absent"]
    phases = rh.Table("Outage anatomy", header, rows, None, "docs/metrics.md 'Outage anatomy'.", id="anatomy")
    marks = []
    for m in a.get("marks") or []:
        if not isinstance(m, Mapping):
            continue
        t = _ms(m.get("t_s"), ".3f") if m.get("t_s") is not None else ABSENT
        bound = f" ({m['bound']})" if m.get("bound") else ""
        marks.append([m.get("label") or m.get("key"), t + bound, m.get("source") or NA,
                      _ms(m.get("resolution_s"), ".3f"), m.get("why_absent") or ""])  # fmt: skip
    line = timeline_text(a)
    note = f"Timeline: {line}" if line else ""
    timeline = rh.Table("Timeline (ms from the migration start)",
                        ["mark", "t [ms]", "source", "resolution [ms]", "why absent"], marks, None, note,
                        id="timeline")  # fmt: skip
    return [phases, timeline]


def traffic_table(s: Mapping[str, Any]) -> rh.Table:
    """Cross-traffic counts and the RTT of the three phases."""
    c = s.get("cross_traffic") or {}
    rows: list[list[Any]] = []
    for label, key, scale, fmt, unit in (
        ("offered", "offered_bps", 1e-6, ".1f", "Mbit/s"),
        ("forwarded (sink)", "forwarded_bps", 1e-6, ".1f", "Mbit/s"),
        ("forwarded (B's counters)", "forwarded_counters_bps", 1e-6, ".1f", "Mbit/s"),
        ("sent", "sent_packets", 1.0, "d", "packets"),
        ("received", "received_packets", 1.0, "d", "packets"),
        ("lost", "lost_packets", 1.0, "d", "packets"),
        ("loss ratio", "loss_ratio", 100.0, ".3f", "%"),
        ("sent during the migration", "migration_sent_packets", 1.0, "d", "packets"),
        ("lost of those", "migration_lost_packets", 1.0, "d", "packets"),
        ("lost in the outage", "outage_lost_packets", 1.0, "d", "packets"),
        ("generator send errors (never sent)", "gen_send_errors", 1.0, "d", ""),
        ("sink socket drops", "sink_socket_drops", 1.0, "d", ""),
    ):
        if key not in c:
            continue
        value, why = figure_cells(s, f"cross_traffic.{key}", scale, fmt, unit)
        rows.append([label, value.strip(), why])
    for phase in ("before", "during", "after"):
        med, why = figure_cells(s, f"rtt_ms.{phase}.median", 1.0, ".2f", "ms")
        p99, _ = figure_cells(s, f"rtt_ms.{phase}.p99", 1.0, ".2f", "ms")
        probes = dig(s, "rtt_ms", phase) or {}
        sent = probes.get("sent")
        lost = f"{probes.get('lost', NA)} of {sent} probes lost" if sent is not None else ""
        rows.append(
            [f"RTT {phase} the migration: median / p99", f"{med} / {p99}", "; ".join(x for x in (lost, why) if x)]
        )
    return rh.Table("Cross-traffic and RTT", ["figure", "value", "note or why absent"], rows, None,
                    "Loss: docs/metrics.md 'Cross-traffic loss (one definition)'.", id="traffic")  # fmt: skip


def control_plane_table(s: Mapping[str, Any]) -> rh.Table | None:
    """PEERING runs: per protocol whether its sessions survived, the router's longest silence at
    a peer against the peer's limit, and (BGP) the routes; None without PEERING."""
    cp = s.get("control_plane")
    if not isinstance(cp, Mapping):
        return None
    header = ["protocol", "survived", "flaps", "longest silence [ms]", "at peer", "limit [ms]", "margin [ms]",
              "routes", "why absent"]  # fmt: skip
    if cp.get("why_absent"):
        return rh.Table("Control plane (PEERING)", header, [[NA, ABSENT, "", "", "", "", "", "", cp["why_absent"]]],
                        id="control")  # fmt: skip
    rows = []
    for proto in ("bgp", "ospf", "bfd"):
        f = cp.get(proto)
        if not isinstance(f, Mapping):
            continue
        survived = {True: "yes", False: "no (flapped)", None: "unknown (never up)"}.get(f.get("survived"), NA)
        flaps = "; ".join(
            f"{d.get('peer')}: {d.get('cause') or 'down'}"
            + (f", up after {d['down_for_s']:.2f} s" if d.get("down_for_s") is not None else ", not up again")
            for d in f.get("flap_details") or []
        )
        routes = f.get("routes") or {}
        lost = [p for p, r in routes.items() if isinstance(r, Mapping) and r.get("lost")]
        route_text = "" if not routes else ("kept" if not lost else f"lost at {', '.join(lost)}")
        silence = f.get("silence_ms")
        rows.append([
            proto.upper(), survived, f"{f.get('flaps', NA)}" + (f" ({flaps})" if flaps else ""),
            f"{silence:.0f}" if silence is not None else ABSENT, f.get("silence_peer") or NA,
            f"{f['limit_ms']:.0f}" if f.get("limit_ms") is not None else NA,
            f"{f['margin_ms']:.0f}" if f.get("margin_ms") is not None else NA, route_text,
            "" if silence is not None else "no capture of the router's control packets",
        ])  # fmt: skip
    classes = ["failed" if r[1].startswith("no") else "" for r in rows]
    return rh.Table("Control plane (PEERING)", header, rows, classes, "docs/peering.md 'Metrics'.", id="control")


def notes_table(s: Mapping[str, Any]) -> rh.Table:
    """The analysis' notes (and the anatomy's); one row saying 'none' without any."""
    notes = [*(dig(s, "details", "notes") or []), *(dig(s, "anatomy", "notes") or [])]
    rows = [[str(n)] for n in notes] or [["none"]]
    return rh.Table("Notes of the analysis", ["note"], rows, None, id="notes")


def banner(s: Mapping[str, Any], meta: Mapping[str, Any]) -> tuple[str, str]:
    """good: the run completed; bad: how it ended, with its failure class and reason."""
    status = s.get("status") or meta.get("status") or "unknown"
    if status == "completed":
        return "good", "completed: the migration finished and the router forwarded after it"
    cls = s.get("failure_class") or meta.get("failure_class")
    why = s.get("failure") or meta.get("failure") or "no reason recorded"
    return "bad", f"{status}" + (f" (failure class {cls})" if cls else "") + f": {why}"


def _rate(bps: Any) -> str:
    return f"{bps / 1e6:g} Mbit/s" if isinstance(bps, int | float) and not isinstance(bps, bool) else "rate –"


def build_run_report(
    run_id: str,
    summary: Mapping[str, Any],
    meta: Mapping[str, Any],
    plot_png: bytes | None,
    plot_absent: str = "",
    generated_utc: str = "",
) -> rh.Report:
    """The report of one run from its summary.json and meta.json (dicts) and the run plot's PNG
    (None: shown as absent with ``plot_absent``)."""
    s = summary
    title = f"vrmig run {run_id}: {s.get('hv') or NA} {s.get('mode') or NA} {_rate(s.get('rate_bps'))}"
    frame = f"{s['frame_bytes']} B frames" if s.get("frame_bytes") is not None else "frame size –"
    subtitle = f"{frame}, accel {s.get('accel') or meta.get('accel') or NA}, started {meta.get('created_utc') or NA}"
    plots, missing = [], []
    if plot_png:
        plots.append(rh.Plot(PLOT_TITLE, plot_png, f"file {MIGRATION_PNG} (docs/data-formats.md)"))
    else:
        missing.append((PLOT_TITLE, plot_absent or f"no {MIGRATION_PNG} in the run directory"))
    tables = [*anatomy_tables(s), traffic_table(s)]
    cp = control_plane_table(s)
    if cp is not None:
        tables.append(cp)
    tables.append(notes_table(s))
    run = {
        "run id": run_id, "kind": meta.get("kind"), "status": s.get("status") or meta.get("status"),
        "failure class": s.get("failure_class") or meta.get("failure_class"),
        "failure": s.get("failure") or meta.get("failure"), "created (UTC)": meta.get("created_utc"),
        "finished (UTC)": meta.get("finished_utc"), "git commit": meta.get("git_commit"),
        "accelerator": meta.get("accel"), "recovery": meta.get("recovery"), "verify": meta.get("verify"),
        "summary format": dig(s, "details", "summary_format_version"),
    }  # fmt: skip
    return rh.Report(
        title=title,
        subtitle=subtitle,
        banner=banner(s, meta),
        lead_tables=[headline_table(s)],
        plots=plots,
        missing_plots=missing,
        tables=tables,
        metadata=meta_sections(meta, run),
        definitions_md=[definitions()],
        generated_utc=generated_utc,
    )


def _read(path: Path, reader: Any) -> tuple[Any, str]:
    try:
        return reader(path), ""
    except (OSError, ValueError) as err:
        return {}, f"{path.name}: {type(err).__name__}: {err}"


def write_run_report(run_dir: Path, summary: Mapping[str, Any] | None = None, plot_absent: str = "") -> Path:
    """Write ``run_dir/report.html`` from ``summary`` (default: its summary.json), its meta.json
    and its migration.png (shown as absent, with ``plot_absent`` as the reason when one is
    given: a stale PNG of an earlier analysis is not shown).  Raises when the report cannot be
    written."""
    run_dir = Path(run_dir)
    problems = []
    if summary is None:
        summary, why = _read(run_dir, read_summary)
        problems.append(why and f"{SUMMARY_JSON} unreadable ({why})")
    meta, why = _read(run_dir, read_meta)
    problems.append(why and f"{META_JSON} unreadable ({why})")
    png = run_dir / MIGRATION_PNG
    plot_png = png.read_bytes() if not plot_absent and png.is_file() else None
    report = build_run_report(run_dir.name, summary, meta, plot_png, plot_absent, now_utc())
    extra = [p for p in problems if p]
    if extra:
        report = dataclasses.replace(report, extra_notes=(*report.extra_notes, *extra))
    return write_report(run_dir, report)


def try_write_run_report(run_dir: Path, summary: Mapping[str, Any], plot_absent: str = "") -> str | None:
    """:func:`write_run_report`, never raising: None when written, else the note saying why not."""
    return guarded(run_dir, write_run_report, run_dir, summary, plot_absent)
