"""Analyse one results directory: raw files -> Summary (+ summary.json, the plot and metrics.prom).

A missing or unreadable file makes the metrics that need it None and adds a note; it never
raises.  Re-run on an old directory with ``python -m analysis <run_dir>``."""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from analysis.hypervisors.criu import criu_figures, load_criu
from analysis.hypervisors.libvirt import libvirt_figures, load_libvirt, window_events
from analysis.hypervisors.qemu import hypervisor_figures, postcopy_effect
from analysis.hypervisors.xen import load_xen, xen_figures
from analysis.load import (
    Counters,
    IfSeries,
    load_counters,
    load_irtt,
    read_json,
    read_jsonl,
    read_peer_records,
    sink_gaps,
)
from analysis.metrics.anatomy import Anatomy, Mark, control_marks
from analysis.metrics.churn import ChurnFigures, churn_figures, in_pool, pool_of
from analysis.metrics.clock import (
    GEN_ROLE,
    IRTT_ROLE,
    SINK_ROLE,
    ClockFigures,
    clock_figures,
    gen_on_orchestrator_clock,
    irtt_on_orchestrator_clock,
    peer_records_on_orchestrator_clock,
    sink_on_orchestrator_clock,
)
from analysis.metrics.control_plane import peer_daemon
from analysis.metrics.counters import FCS_BYTES, rate_series, sampler_health
from analysis.metrics.cross import cross_traffic
from analysis.metrics.dirty import dirty_rate
from analysis.metrics.downtime import CountersDowntime, PacketsDowntime, counters_downtime, packets_downtime
from analysis.metrics.instruments import DROP_COUNTERS, instruments
from analysis.metrics.link import link_activity
from analysis.metrics.postcopy import postcopy_price
from analysis.metrics.rtt import rtt_phases
from analysis.metrics.sendloss import SendTimeLoss, loss_from_raw, send_time_loss, unavailable_reason
from analysis.metrics.udp_flows import udp_flows_from_records
from analysis.metrics.window import Spans, Window, migration_window, spans
from analysis.present.calibration_report import is_calibration, try_write_calibration_report
from analysis.present.openmetrics import run_metrics
from analysis.present.run_plot import PlotData, RrPanel, Series, TcpPanel, Zoom, plot_run
from analysis.present.run_report import try_write_run_report
from analysis.summary import Summary
from migrate.core.atomic import write_text
from migrate.core.rundir import (
    ACTIONS_JSONL,
    CHURN_TSV,
    COUNTERS_TSV,
    GEN_BA_JSON,
    GEN_JSON,
    IRTT_JSON_GZ,
    META_JSON,
    METRICS_PROM,
    MIGRATION_PNG,
    QMP_EVENTS_JSONL,
    QMP_SAMPLES_JSONL,
    SINK_BA_JSON,
    SINK_JSON,
    SUMMARY_JSON,
    console_log,
    control_pcap,
    peer_log,
    read_meta,
    read_summary,
    write_summary,
)

log = logging.getLogger(__name__)

SUMMARY_NAME = SUMMARY_JSON
PLOT_NAME = MIGRATION_PNG
METRICS_NAME = METRICS_PROM
CLOCK_STEP_TOLERANCE_NS = 1_000_000
T = TypeVar("T")


@dataclasses.dataclass(eq=False)
class _Raw:
    meta: dict[str, Any]
    counters: Counters | None
    actions: list[dict[str, Any]]
    events: list[dict[str, Any]]
    samples: list[dict[str, Any]]
    sink: dict[str, Any] | None
    gen: dict[str, Any] | None
    irtt: Any


def _load(notes: list[str], path: Path, reader: Callable[[Path], T]) -> T | None:
    if not path.exists():
        notes.append(f"{path.name} missing")
        return None
    try:
        return reader(path)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
        notes.append(f"{path.name} unreadable: {err}")
        return None


def _metric(notes: list[str], name: str, fn: Callable[..., T], *args: Any, **kw: Any) -> T | None:
    """Run one metric; a bug or odd data in one metric must not lose the others."""
    try:
        return fn(*args, **kw)
    except Exception as err:  # recorded in the summary's notes and the log
        log.exception("analysis of %s failed", name)
        notes.append(f"{name} failed: {type(err).__name__}: {err}")
        return None


def _read_raw(run_dir: Path, notes: list[str]) -> _Raw:
    return _Raw(
        meta=_load(notes, run_dir / META_JSON, read_json) or {},
        counters=_load(notes, run_dir / COUNTERS_TSV, load_counters),
        actions=_load(notes, run_dir / ACTIONS_JSONL, read_jsonl) or [],
        events=_load(notes, run_dir / QMP_EVENTS_JSONL, read_jsonl) or [],
        samples=_load(notes, run_dir / QMP_SAMPLES_JSONL, read_jsonl) or [],
        sink=_load(notes, run_dir / SINK_JSON, read_json),
        gen=_load(notes, run_dir / GEN_JSON, read_json),
        irtt=_load(notes, run_dir / IRTT_JSON_GZ, load_irtt),
    )


def _on_orchestrator_clock(raw: _Raw, clock: ClockFigures, notes: list[str]) -> tuple[_Raw, ClockFigures]:
    """On a lab: the sink's, the generator's and irtt's timestamps minus their hosts' measured
    offsets, so that they compare with the migration window (the orchestrator's clock) and the
    merged counters (shifted when merged); a record whose host's offset was not measured stays on
    that host's clock, with a note.  On the embedded testbed (one clock): as they are."""
    if clock.testbed != "lab":
        return raw, clock
    off, done = clock.offsets_ns, {}
    sink, gen, irtt = raw.sink, raw.gen, raw.irtt
    wanted = (
        ("sink", sink, (SINK_ROLE, GEN_ROLE)),
        ("gen", gen, (GEN_ROLE,)),
        ("irtt", irtt, (IRTT_ROLE,)),
    )
    for name, record, roles in wanted:
        if record is None:
            continue
        missing = [r for r in roles if r not in off]
        if missing:
            notes.append(f"clock: no measured offset of {', '.join(missing)}: {name} timestamps stay on its clock")
            continue
        done[name] = "+".join(roles)
    if sink is not None and "sink" in done:
        sink = sink_on_orchestrator_clock(sink, off[SINK_ROLE], off[GEN_ROLE])
    if gen is not None and "gen" in done:
        gen = gen_on_orchestrator_clock(gen, off[GEN_ROLE])
    if irtt is not None and "irtt" in done:
        irtt = irtt_on_orchestrator_clock(irtt, off[IRTT_ROLE])
    return dataclasses.replace(raw, sink=sink, gen=gen, irtt=irtt), dataclasses.replace(clock, corrected=done)


def _period_ns(raw: _Raw, scenario: dict[str, Any]) -> int | None:
    if raw.counters is not None and raw.counters.period_ns:
        return raw.counters.period_ns
    if isinstance(scenario.get("sample_ms"), int | float):
        return int(scenario["sample_ms"] * 1_000_000)
    if raw.counters is not None:
        for s in raw.counters.series.values():
            if len(s) > 1:
                return int(np.median(np.diff(s.t_ns)))
    return None


def _packet_interval_s(gen: dict[str, Any] | None, scenario: dict[str, Any]) -> float | None:
    pps = (gen or {}).get("achieved_pps")
    if isinstance(pps, int | float) and pps > 0:
        return 1.0 / pps
    rate, frame = scenario.get("rate_bps"), scenario.get("frame_bytes")
    if isinstance(rate, int | float) and rate > 0 and isinstance(frame, int | float):
        return frame * 8 / rate
    return None


def _str(v: Any) -> str | None:
    """A JSON string, else None (a mistyped meta.json value is not passed on)."""
    return v if isinstance(v, str) else None


def _num(v: Any) -> float | None:
    """A JSON number (not a boolean), else None."""
    return v if isinstance(v, int | float) and not isinstance(v, bool) else None


def _count(v: Any) -> int | None:
    """A JSON integer (not a boolean), else None."""
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _status(meta: dict[str, Any]) -> tuple[str, str | None, str | None]:
    run_status = _str(meta.get("status"))
    failure = _str(meta.get("failure"))
    if run_status == "completed":
        return "completed", failure, run_status
    why = f"run status {run_status}" if run_status else "meta.json missing or has no status"
    return "failed", failure or why, run_status


def _clock_note(meta: dict[str, Any], notes: list[str]) -> None:
    clock = meta.get("clock") or {}
    a, b = clock.get("offset_start_ns"), clock.get("offset_end_ns")
    if isinstance(a, int) and isinstance(b, int) and abs(b - a) > CLOCK_STEP_TOLERANCE_NS:
        notes.append(f"CLOCK_REALTIME stepped by {(b - a) / 1e6:.1f} ms during the run: timestamps are suspect")


def _downtimes(
    raw: _Raw, scenario: dict[str, Any], span: Spans, period_ns: int | None, notes: list[str], why: dict[str, str]
) -> tuple[CountersDowntime | None, PacketsDowntime | None]:
    """Counters- and packets-based downtime (None where the data or the cross-traffic is missing;
    ``why`` gets the reason)."""
    if scenario.get("rate_bps") == 0:
        notes.append("no cross-traffic (rate 0): no data-plane downtime")
        return None, None
    dc = dp = None
    b_eth0 = raw.counters.get("B", "eth0") if raw.counters else None
    if b_eth0 is not None and period_ns:
        pkt_s = _packet_interval_s(raw.gen, scenario)
        n = len(notes)
        dc = _metric(
            notes, "counters downtime", counters_downtime, b_eth0.t_ns, b_eth0.rx_packets, period_ns, span, pkt_s
        )
        if dc is None:
            why["downtime_counters"] = "failed" if len(notes) > n else "no_samples_in_span"
    else:
        why["downtime_counters"] = "no_counters"
        if raw.counters is not None:
            notes.append("no B eth0 counters: no counters downtime")
    sink = raw.sink
    if sink is None:
        why["downtime_packets"] = "no_sink"
    elif not sink.get("packets"):
        why["downtime_packets"] = "no_packets_received"
    else:
        gen_end = (raw.gen or {}).get("end_ns")
        dropped = sink.get("gaps_dropped")
        args = (sink_gaps(sink), span, sink.get("last_ns"), gen_end, sink.get("gap_threshold_ns"))
        dp = _metric(notes, "packets downtime", packets_downtime, *args, gaps_dropped=_dropped(dropped))
        if dp is None:
            why["downtime_packets"] = "failed"
    return dc, dp


def _dropped(v: Any) -> int | None:
    """sink.json ``gaps_dropped``: its count, or None when it is missing or not a count (an
    older or cut-off sink.json: whether its gap list was full is unknown)."""
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None


def _send_loss(
    raw: _Raw, span: Spans, dp: PacketsDowntime | None, notes: list[str], why: dict[str, str]
) -> SendTimeLoss | None:
    """Loss by send time over the migration span and the packet-gap outage (builtin generator)."""
    per_ms = _metric(notes, "send-time loss", loss_from_raw, raw.gen, raw.sink)
    if per_ms is None:
        why["send_loss"] = unavailable_reason(raw.gen, raw.sink) or "failed"
        return None
    outage = None
    if dp is not None and dp.t_before_ns is not None and dp.t_after_ns is not None:
        outage = (dp.t_before_ns, dp.t_after_ns)
    return _metric(notes, "send-time loss", send_time_loss, per_ms, (span.search_lo_ns, span.search_hi_ns), outage)


def _analyse(run_dir: Path) -> tuple[Summary, PlotData | None]:
    notes: list[str] = []
    raw = _read_raw(Path(run_dir), notes)
    meta = raw.meta
    scenario = meta.get("scenario") if isinstance(meta.get("scenario"), dict) else {}
    hv_meta = meta.get("hypervisor") if isinstance(meta.get("hypervisor"), dict) else {}
    if scenario.get("rate_bps") == 0 and f"{GEN_JSON} missing" in notes:
        notes.remove(f"{GEN_JSON} missing")  # no cross-traffic: no generator ran
    status, failure, run_status = _status(meta)
    _metric(notes, "clock note", _clock_note, meta, notes)
    clock = _metric(notes, "clock", clock_figures, meta)
    if clock is not None:
        raw, clock = _metric(notes, "clock correction", _on_orchestrator_clock, raw, clock, notes) or (raw, clock)
    mode = _str(scenario.get("mode"))
    period_ns = _metric(notes, "sampling period", _period_ns, raw, scenario)
    lv = None
    if scenario.get("driver") == "libvirt":
        lv = _metric(notes, "libvirt records", load_libvirt, run_dir, notes)
    events = (_metric(notes, "libvirt events", window_events, lv.events) or []) if lv is not None else raw.events
    window = _metric(notes, "window", migration_window, raw.actions, events, raw.samples, mode)
    if window is None:
        notes.append("no migrate action recorded: no migration window")
    elif window.end_source == "last-sample":
        notes.append("no terminal migration status seen: window ends at the last query-migrate reply")
    peering = isinstance(meta.get("peering"), dict)
    cp, churn, peer_clock = (
        _control_plane_or_why(Path(run_dir), meta, window, notes, clock) if peering else (None, None, {})
    )
    if clock is not None and peer_clock:
        clock = dataclasses.replace(clock, corrected={**clock.corrected, **peer_clock})
    start_ns = window.start_ns if window is not None else None
    cmarks = _metric(notes, "control-plane marks", control_marks, cp, start_ns, peer_daemon(meta.get("peering"))) or []
    span = None
    if window is not None:
        span = _metric(notes, "spans", spans, window, recovered_ns=_recovered_ns(cmarks))
    c = raw.counters
    b_eth0 = c.get("B", "eth0") if c else None
    mig0 = c.get("R1", "mig0") if c else None
    rate = _num(scenario.get("rate_bps"))

    dc = dp = link = rtt = None
    why: dict[str, str] = {}
    if span is not None:
        dc, dp = _metric(notes, "downtime", _downtimes, raw, scenario, span, period_ns, notes, why) or (None, None)
        if dc is None:
            why.setdefault("downtime_counters", "failed")
        if dp is None:
            why.setdefault("downtime_packets", "failed")
    elif window is not None:
        why.update(downtime_counters="failed", downtime_packets="failed", link="failed", send_loss="failed")
    else:
        why.update(downtime_counters="no_window", downtime_packets="no_window", link="no_window", rtt="no_window")
        why["send_loss"] = "no_window"
    if span is not None and mig0 is not None and period_ns:
        link = _metric(notes, "link activity", link_activity, mig0.t_ns, mig0.tx_bytes, period_ns, span)
        if link is None and not any(n.startswith("link activity") for n in notes):
            notes.append("no migration traffic above the noise threshold on R1 mig0")
        if link is None:
            why["link"] = "failed" if any(n.startswith("link activity") for n in notes) else "no_link_activity"
    elif span is not None:
        why["link"] = "no_link_counters"
    if window is not None and window.end_ns is not None and raw.irtt is not None:
        rtt = _metric(notes, "rtt", rtt_phases, raw.irtt.send_ns, raw.irtt.rtt_ns, window.start_ns, window.end_ns)
        if rtt is None:
            why["rtt"] = "failed"
    elif window is not None:
        why["rtt"] = "no_irtt" if raw.irtt is None else "no_window"
    criu_rec = None
    if lv is not None:
        hv = _metric(notes, "hypervisor", libvirt_figures, lv.jobinfo, lv.events, window)
    elif scenario.get("hv") == "xen":
        xen = _metric(notes, "xen records", load_xen, run_dir, notes)
        hv = _metric(notes, "hypervisor", xen_figures, *xen, window, meta) if xen is not None else None
    elif scenario.get("hv") == "criu":
        criu_rec = _metric(notes, "criu records", load_criu, run_dir, notes)
        hv = _metric(notes, "hypervisor", criu_figures, criu_rec, window)
    else:
        hv = _metric(notes, "hypervisor", hypervisor_figures, raw.samples, window, hv_meta.get("final"))
    failed = ("hypervisor failed", "xen records failed", "criu records failed")
    if hv is None and any(n.startswith(failed) for n in notes):
        why["hypervisor"] = "failed"
    cross = _metric(notes, "cross traffic", cross_traffic, raw.gen, raw.sink, b_eth0)
    if cross is None:
        why["cross"] = "no_generator" if raw.gen is None else "failed"
    send_loss = None
    if span is not None and rate != 0:
        send_loss = _metric(notes, "send-time loss", _send_loss, raw, span, dp, notes, why)
        if send_loss is None:
            why.setdefault("send_loss", "failed")
    sampler = None
    if c is not None and period_ns and c.series:
        ref = b_eth0 if b_eth0 is not None else next(iter(c.series.values()))
        sampler = _metric(notes, "sampler", sampler_health, ref.t_ns, c.late_ns, period_ns, c.tail)
    ins = _metric(notes, "instruments", instruments, meta, raw.gen, raw.sink)
    for key, n in (ins.dropped if ins is not None else {}).items():
        who, counter = key.split(".", 1)
        notes.append(f"incomplete record: {who} {counter}={n}; affects {DROP_COUNTERS.get((who, counter), '?')}")
    anat = None
    if window is not None and rate != 0:
        anat = _metric(notes, "anatomy", _anatomy, raw, scenario, window, hv, lv, criu_rec, cmarks, clock)
    post = price = None
    if scenario.get("postcopy") and scenario.get("hv") == "kvm" and scenario.get("driver", "qmp") == "qmp":
        post = _metric(notes, "post-copy", postcopy_effect, raw.events, raw.samples, hv_meta.get("final"))
        price = _metric(
            notes, "post-copy price", lambda: postcopy_price(
                raw.events, raw.samples, window.start_ns if window is not None else None,
                getattr(hv, "downtime_s", None),
                raw.irtt.send_ns if raw.irtt is not None else None, raw.irtt.rtt_ns if raw.irtt is not None else None,
                loss_from_raw(raw.gen, raw.sink) if rate != 0 else None,
            ),
        )  # fmt: skip
        if window is not None and post is not None and not post.entered:
            notes.append(
                "POSTCOPY=1 but the migration completed in pre-copy before the switch took effect "
                f"(no postcopy-active status; QEMU postcopy-bytes {post.postcopy_bytes}): not a post-copy run"
            )
    tcp, rr = _tcp_traffic(Path(run_dir), meta, scenario, window, dp, clock, notes)
    a_eth0 = c.get("A", "eth0") if c else None
    udp = _metric(notes, "udp", _udp_figures, Path(run_dir), meta, raw, span, clock, a_eth0, notes)
    dirty = _metric(notes, "dirty rate", dirty_rate, meta, window.start_ns if window else None, _console(run_dir))
    if dirty is not None:
        notes.extend(dirty[1])
    if status == "completed" and window is not None and window.end_status not in (None, "completed"):
        notes.append(f"run completed but QEMU's last status is {window.end_status}")

    summary = Summary(
        status=status,
        failure=failure,
        hv=_str(scenario.get("hv")),
        mode=mode,
        accel=_str(meta.get("accel")) or _str(hv_meta.get("accel")),
        rate_bps=rate,
        frame_bytes=_count(scenario.get("frame_bytes")),
        router=_router_name(meta),
        run_status=run_status,
        failure_class=meta.get("failure_class") if isinstance(meta.get("failure_class"), str) else None,
        window=window,
        downtime_counters=dc,
        downtime_packets=dp,
        total_lost_packets=_count((raw.sink or {}).get("lost")),
        hypervisor=hv,
        link=link,
        rtt=rtt,
        cross=cross,
        send_loss=send_loss,
        sampler=sampler,
        instruments=ins,
        clock=clock,
        control_plane=cp,
        anatomy=anat,
        postcopy={**post.to_dict(), "price": price.to_dict() if price is not None else None}
        if post is not None
        else None,
        dirty_rate=dirty[0] if dirty is not None else None,
        churn=churn,
        tcp=tcp,
        rr=rr,
        udp=udp,
        why_absent=why,
        notes=tuple(notes),
    )
    try:
        plot = _plot_data(raw, window, summary, Path(run_dir))
    except Exception as err:  # a plot problem must not cost the summary
        log.exception("plot data failed")
        return dataclasses.replace(summary, notes=(*notes, f"plot data failed: {type(err).__name__}: {err}")), None
    return summary, plot


def _udp_figures(
    run_dir: Path,
    meta: dict[str, Any],
    raw: _Raw,
    span: Spans | None,
    clock: ClockFigures | None,
    a_eth0: IfSeries | None,
    notes: list[str],
) -> dict[str, Any] | None:
    """TRAFFIC=udp:M / dir=both / sizes=: summary.json's ``udp`` (docs/metrics.md "UDP flows,
    directions and sizes"): the frame sizes, the A -> B flows' spread and, with dir=both, the B -> A
    direction measured on its own (its offered/forwarded rate and loss, its packet downtime from
    the sink at A, its flows).  None for the one-flow, one-way, one-size CBR (meta.json instruments
    say which ran)."""
    ins = meta.get("instruments") if isinstance(meta.get("instruments"), dict) else {}
    flows, sizes, ba_port = ins.get("udp_flows"), ins.get("frame_sizes"), ins.get("traffic_ba_port")
    if not ((isinstance(flows, int) and flows > 1) or sizes or ba_port):
        return None
    ab = udp_flows_from_records(raw.gen, raw.sink)
    out: dict[str, Any] = {
        "flows": flows,
        "frame_sizes": sizes,
        "mean_frame_bytes": _num((raw.gen or {}).get("mean_frame_bytes")),
        "ab": {"flows": ab.to_dict() if ab is not None else None},
        "ba": None,
    }
    if not ba_port:
        return out
    gen_ba = _load(notes, run_dir / GEN_BA_JSON, read_json)
    sink_ba = _load(notes, run_dir / SINK_BA_JSON, read_json)
    if clock is not None and clock.testbed == "lab":  # B sends, A receives
        off = clock.offsets_ns
        if sink_ba is not None and GEN_ROLE in off and SINK_ROLE in off:
            sink_ba = sink_on_orchestrator_clock(sink_ba, off[GEN_ROLE], off[SINK_ROLE])
        if gen_ba is not None and SINK_ROLE in off:
            gen_ba = gen_on_orchestrator_clock(gen_ba, off[SINK_ROLE])
    cross_ba = cross_traffic(gen_ba, sink_ba, a_eth0)
    dp_ba, why_dp = None, None
    if span is None:
        why_dp = "no_window"
    elif sink_ba is None:
        why_dp = "no_sink"
    elif not sink_ba.get("packets"):
        why_dp = "no_packets_received"
    else:
        dp_ba = packets_downtime(
            sink_gaps(sink_ba), span, sink_ba.get("last_ns"), (gen_ba or {}).get("end_ns"),
            sink_ba.get("gap_threshold_ns"), gaps_dropped=_dropped(sink_ba.get("gaps_dropped")),
        )  # fmt: skip
    flows_ba = udp_flows_from_records(gen_ba, sink_ba)
    out["ba"] = {
        "cross": dataclasses.asdict(cross_ba) if cross_ba is not None else None,
        "downtime_packets": dataclasses.asdict(dp_ba) if dp_ba is not None else None,
        "downtime_s": dp_ba.downtime_s if dp_ba is not None else None,
        "why_absent": {"downtime_packets": why_dp} if why_dp else {},
        "flows": flows_ba.to_dict() if flows_ba is not None else None,
    }
    return out


def _tcp_traffic(
    run_dir: Path,
    meta: dict[str, Any],
    scenario: dict[str, Any],
    window: Window | None,
    dp: PacketsDowntime | None,
    clock: ClockFigures | None,
    notes: list[str],
) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """TRAFFIC=tcp / rr: summary.json's ``tcp`` and ``rr`` (analysis.tcp_run); None when meta.json's
    instruments ran neither (no ``tcp_port`` / ``rr_port``); with them but no migration window, an
    object that says why."""
    from analysis.tcp_run import rr_figures, tcp_figures

    ins = meta.get("instruments") if isinstance(meta.get("instruments"), dict) else {}
    has_tcp, has_rr = ins.get("tcp_port") is not None, ins.get("rr_port") is not None
    if not has_tcp and not has_rr:
        return None, None
    if window is None or window.end_ns is None:
        absent = {"why_absent": {"all": "no migration window"}}
        return (absent if has_tcp else None), (absent if has_rr else None)
    offsets = dict(clock.offsets_ns) if clock is not None and clock.testbed == "lab" else {}
    sample_ms = float(scenario.get("sample_ms") or 10)
    gap_ms = float(ins.get("tcp_gap_ms") or 20)
    tcp = rr = None
    if has_tcp:
        udp = dp.downtime_s if dp is not None else None
        tcp = _metric(notes, "tcp", tcp_figures, run_dir, window.start_ns, window.end_ns, udp, offsets, sample_ms,
                      gap_ms, notes)  # fmt: skip
        if tcp is None:
            tcp = {"why_absent": {"all": "failed: " + next((n for n in notes if n.startswith("tcp")), "")}}
        if ins.get("tcp_ba_port") is not None:  # TRAFFIC=tcp,dir=both: the B -> A flows on their own
            tcp["ba"] = _metric(notes, "tcp B -> A", tcp_figures, run_dir, window.start_ns, window.end_ns, udp,
                                offsets, sample_ms, gap_ms, notes, "ba")  # fmt: skip
            if tcp["ba"] is None:
                tcp["ba"] = {"why_absent": {"all": "failed: " + next((n for n in notes if n.startswith("tcp B")), "")}}
    if has_rr:
        rr = _metric(notes, "rr", rr_figures, run_dir, window.start_ns, window.end_ns, offsets, notes)
        if rr is None:
            rr = {"why_absent": {"all": "failed: " + next((n for n in notes if n.startswith("rr")), "")}}
    return tcp, rr


def _router_name(meta: dict[str, Any]) -> str | None:
    """The router that ran: a profile image's own name (meta.json ``hypervisor.guest_image.name``),
    else ROUTER= as the scenario kept it (a built-in image's name)."""
    image = (meta.get("hypervisor") or {}).get("guest_image")
    if isinstance(image, dict) and isinstance(image.get("name"), str) and image.get("profile"):
        return str(image["name"])
    return _str((meta.get("scenario") or {}).get("router"))


def _console(run_dir: Path, host: str = "R1") -> str | None:
    """The source's serial console text (None if it was not kept)."""
    try:
        return (Path(run_dir) / console_log(host)).read_text(errors="replace")
    except OSError:
        return None


def _recovered_ns(cmarks: list[Mark]) -> int | None:
    """When the control plane was whole again (the latest session re-established or peer's
    routes back, from its anatomy marks); None without flaps or when something never came back
    (the search then keeps its usual end: what never recovered is a bound either way)."""
    times = [m.t_ns for m in cmarks if m.key.endswith("_up") or m.key == "routes_back"]
    return max(t for t in times if t is not None) if times and all(t is not None for t in times) else None


def _anatomy(
    raw: _Raw,
    scenario: dict[str, Any],
    window: Window,
    hv: Any,
    lv: Any,
    criu: dict[str, Any] | None,
    cmarks: list[Mark],
    clock: ClockFigures | None = None,
) -> Anatomy:
    """The outage's timeline from every hypervisor's stop/resume records, the sink's gaps and
    the control plane (analysis.metrics.anatomy); QEMU's own time stamps of R1 and R2 are put on
    the orchestrator's clock by their hosts' offsets (unknown without the clock figures)."""
    from analysis.metrics import anatomy as am

    kind = scenario.get("hv")
    offsets: dict[str, int | None] | None = None
    if clock is None or clock.testbed != "embedded":
        offsets = {r: (clock.offsets_ns.get(r) if clock is not None else None) for r in ("R1", "R2")}
    stop, resume = am.blackout_marks(
        kind, scenario.get("driver"), window.start_ns, raw.events, lv.events if lv is not None else (),
        criu, getattr(hv, "xen", None), offsets,
    )  # fmt: skip
    sink = raw.sink or {}
    gaps = sink_gaps(sink) if sink.get("packets") else np.zeros((0, 4), dtype=np.int64)
    pkt_s = _packet_interval_s(raw.gen, scenario)
    return am.outage_anatomy(
        window.start_ns, stop, resume, gaps, sink.get("last_ns") if sink.get("packets") else None,
        (raw.gen or {}).get("end_ns"), pkt_s, sink.get("gap_threshold_ns"), window.announce_ns,
        cmarks,
    )  # fmt: skip


def _control_plane(
    run_dir: Path, meta: dict[str, Any], window: Window | None, notes: list[str], clock: ClockFigures | None = None
) -> tuple[dict[str, Any], ChurnFigures | None, dict[str, str]]:
    """summary.json ``control_plane``: per protocol of PEERING, from the peers' logs and captures
    (analysis.metrics.control_plane); a protocol without a window or records is null with why.
    With CHURN, also summary.json ``churn`` (analysis.metrics.churn) from the same logs.  On a
    lab (``clock``), the peers' records lose their hosts' measured offsets first, as the sink's
    do, so that they compare with the migration window; the third value names them (record ->
    role, for ``clock.corrected``)."""
    from analysis.metrics import control_plane as cpm

    peering = meta["peering"]
    protocols = _protocols(peering)
    peers = peering.get("peers") if isinstance(peering.get("peers"), dict) else {}
    meta_churn = meta.get("churn") if isinstance(meta.get("churn"), dict) else None
    if window is None or window.end_ns is None:
        churn = _churn(run_dir, meta_churn, None, None) if meta_churn else None
        return {p: None for p in protocols} | {"why_absent": "no_window"}, churn, {}
    logs, captures = read_peer_records(run_dir, peers, notes, cpm.peer_daemon(peering))
    corrected: dict[str, str] = {}
    if clock is not None and clock.testbed == "lab":
        logs, captures, left = peer_records_on_orchestrator_clock(logs, captures, clock.offsets_ns)
        if left:
            notes.append(f"clock: no measured offset of {', '.join(left)}: their peers' records stay on their clocks")
        corrected = {f"peer-{r}": r for r in sorted(set(logs) | set(captures)) if r not in left}
    churn = _churn(run_dir, meta_churn, logs, window.start_ns) if meta_churn else None
    if churn is not None:
        notes.extend(churn.notes)
    for role in peers:
        if role not in logs:
            notes.append(f"{peer_log(role)} missing: {role}'s sessions unknown")
        pcap = run_dir / control_pcap(role)
        if not (pcap.exists() and pcap.stat().st_size > 0):
            notes.append(f"{pcap.name} missing: the router's silence at {role} is unknown")
    timers = peering.get("timers") if isinstance(peering.get("timers"), dict) else {}
    hold, dead = _num(timers.get("bgp_hold_s")), _num(timers.get("ospf_dead_s"))
    interval, mult = _num(timers.get("bfd_interval_ms")), _num(timers.get("bfd_multiplier"))
    limits = {  # what the peers tolerate; None: not recorded, so no margin (never a 0 ms limit)
        "bgp": hold * 1000.0 if hold is not None else None,
        "ospf": dead * 1000.0 if dead is not None else None,
        "bfd": float(interval * mult) if interval is not None and mult is not None else None,
    }
    addrs = {
        r: v["router_addr"] for r, v in peers.items() if isinstance(v, dict) and isinstance(v.get("router_addr"), str)
    }
    figures = cpm.control_plane(
        protocols,
        logs,
        captures,
        addrs,
        (window.start_ns, window.end_ns),
        limits,
        ignore_prefix=functools.partial(in_pool, pool=pool_of(meta_churn)) if meta_churn else None,
    )
    return {p: f.to_dict() for p, f in figures.items()}, churn, corrected


def _protocols(peering: Any) -> tuple[str, ...]:
    """meta.json ``peering.protocols`` (the strings of it; empty when it is not a list)."""
    protocols = peering.get("protocols") if isinstance(peering, dict) else None
    return tuple(p for p in protocols if isinstance(p, str)) if isinstance(protocols, list | tuple) else ()


def _control_plane_or_why(
    run_dir: Path, meta: dict[str, Any], window: Window | None, notes: list[str], clock: ClockFigures | None
) -> tuple[dict[str, Any], ChurnFigures | None, dict[str, str]]:
    """:func:`_control_plane` through the guard: when it fails, every protocol is null with why."""
    out = _metric(notes, "control plane", _control_plane, run_dir, meta, window, notes, clock)
    if out is None:
        return {p: None for p in _protocols(meta.get("peering"))} | {"why_absent": "failed"}, None, {}
    return out


def _churn(
    run_dir: Path, meta_churn: dict[str, Any], logs: dict[str, Any] | None, migration_start_ns: int | None
) -> ChurnFigures:
    """summary.json ``churn`` from churn.tsv and the observing peer's log (``logs``: the peers'
    parsed logs when the control plane read them; None: read the observer's alone)."""
    from analysis.metrics.control_plane import parse_bird_log

    observer = meta_churn.get("observer", "A")
    if logs is None:
        path = run_dir / peer_log(observer)
        logs = {observer: parse_bird_log(path.read_text(errors="replace"))} if path.exists() else {}
    rows = []
    try:
        for line in (run_dir / CHURN_TSV).read_text().splitlines()[1:]:
            rows.append([int(x) for x in line.split("\t")])
    except (OSError, ValueError):
        pass  # no ticks: the rates are absent with their reason
    ticks = np.asarray(rows, dtype=np.int64).reshape(-1, 5)
    return churn_figures(meta_churn, ticks, logs.get(observer), migration_start_ns)


def _plot_data(raw: _Raw, window: Window | None, summary: Summary, run_dir: Path | None = None) -> PlotData:
    """What the run plot shows; with ``run_dir``, the TCP and rr panels of a run that had them
    (summary.json ``tcp`` / ``rr`` not null), from vrtcp's traces in it."""
    c = raw.counters
    series: dict[str, Series | None] = {"cross": None, "offered": None, "migration": None, "reverse": None}
    both = isinstance(summary.udp, dict) and summary.udp.get("ba") is not None
    for key, role, ifname, direction in (
        ("cross", "B", "eth0", "rx"),
        ("offered", "A", "eth0", "tx"),
        ("migration", "R1", "mig0", "tx"),
        *((("reverse", "A", "eth0", "rx"),) if both else ()),
    ):
        s = c.get(role, ifname) if c else None
        if s is not None and len(s) > 1:
            fcs = 0 if key == "migration" else FCS_BYTES
            t, bps = rate_series(s.t_ns, getattr(s, f"{direction}_bytes"), getattr(s, f"{direction}_packets"), fcs)
            series[key] = Series(t, bps)
    rtt = None
    if raw.irtt is not None and raw.irtt.send_ns.size:
        rtt = Series(raw.irtt.send_ns, raw.irtt.rtt_ns / 1e6)
    marks: list[tuple[str, int]] = []
    t0 = None
    if window is not None:
        t0 = window.start_ns
        for label, t in (
            ("stop", window.stop_ns),
            ("migrate", window.migrate_ns),
            (window.end_status or "end", window.completed_ns),
            ("cont", window.cont_ns),
            ("announce-self", window.announce_ns),
        ):
            if t is not None:
                marks.append((label, t))
    rate = f"{summary.rate_bps / 1e6:g} Mbit/s" if summary.rate_bps else None
    frame = f"{summary.frame_bytes} B" if summary.frame_bytes else None
    sizes = summary.udp.get("frame_sizes") if isinstance(summary.udp, dict) else None
    if sizes:
        frame = "sizes " + "/".join(f"{b}:{w}" for b, w in sizes)
    title = " ".join(str(x) for x in (summary.hv, summary.mode, rate, frame, summary.accel) if x)
    clock = summary.clock
    offsets = dict(clock.offsets_ns) if clock is not None and clock.testbed == "lab" else {}
    scenario = raw.meta.get("scenario") if isinstance(raw.meta.get("scenario"), dict) else {}
    sample_ms = float(scenario.get("sample_ms") or 10)
    tcp = tcp_ba = rr = None
    if run_dir is not None and isinstance(summary.tcp, dict):
        tcp = _tcp_panel(run_dir, summary.tcp, offsets, sample_ms)
        if isinstance(summary.tcp.get("ba"), dict):
            tcp_ba = _tcp_panel(run_dir, summary.tcp["ba"], offsets, sample_ms, direction="ba")
    if run_dir is not None and isinstance(summary.rr, dict):
        rr = _rr_panel(run_dir, offsets)
    return PlotData(
        tcp=tcp,
        tcp_ba=tcp_ba,
        rr=rr,
        zoom=_zoom(raw, summary.anatomy),
        t0_ns=t0,
        cross=series["cross"],
        offered=series["offered"],
        migration=series["migration"],
        reverse=series["reverse"],
        rtt=rtt,
        marks=tuple(marks),
        title=title,
    )


def _on_clock(t_ns: np.ndarray, offset_ns: int) -> np.ndarray:
    """A host's timestamps on the orchestrator's clock (minus its measured offset); -1 (absent) kept."""
    t = np.asarray(t_ns, dtype=np.int64)
    return np.where(t >= 0, t - offset_ns, t) if offset_ns else t


def _goodput_line(t_ns: np.ndarray, bytes_cum: np.ndarray, hole_ns: float) -> Series:
    """Goodput in bit/s of each interval between two samples of a cumulative byte count, placed at
    the interval's end: 8 x bytes / duration.  Unlike analysis.metrics.tcp.goodput_series, which
    refuses a whole grid with a hole, a plot keeps the rest of the line: an interval longer than
    ``hole_ns``, not increasing in time, or with a decreasing count is NaN (not known), never 0."""
    t = np.asarray(t_ns, dtype=np.int64)
    b = np.asarray(bytes_cum, dtype=np.int64)
    if t.size < 2:
        return Series(np.zeros(0, dtype=np.int64), np.zeros(0))
    dt = np.diff(t).astype(np.float64)
    db = np.diff(b).astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        bps = 8e9 * db / dt
    bps[(dt <= 0) | (dt > hole_ns) | (db < 0)] = np.nan
    return Series(t[1:], bps)


def _rel(run_dir: Path, err: Exception) -> str:
    return str(err).replace(f"{run_dir}/", "")


def _tcp_panel(
    run_dir: Path, tcp: dict[str, Any], offsets: dict[str, int], sample_ms: float, direction: str = "ab"
) -> TcpPanel:
    """The TCP panel of one direction (``direction``: analysis.tcp_run.DIRECTIONS): each flow's
    goodput from the receiver's trace (B's clock; B -> A: A's) and cwnd from the sender's TCP_INFO
    trace (A's; B -> A: B's), both on the orchestrator's clock; the all-flows goodput summed at the
    instants every flow was sampled (vrtcp samples all flows at once); the exact all-flows outage
    and the RTO expiries as summary.json ``tcp`` (``tcp.ba``) has them (already on the
    orchestrator's clock).  A trace that cannot be read leaves its series out, with a note."""
    from analysis.metrics.tcp import HOLE_FACTOR, receiver_flow
    from analysis.tcp_run import DIRECTIONS
    from crosstraffic.backend import TrafficError
    from crosstraffic.tcp import read_sink_trace, read_tcpinfo

    d = DIRECTIONS[direction]

    notes: list[str] = []
    hole_ns = HOLE_FACTOR * sample_ms * 1e6
    goodput, flows, cwnd = None, [], []
    try:
        recv = read_sink_trace(run_dir / d.recv_tsv)
    except TrafficError as err:
        notes.append(f"goodput not shown: {_rel(run_dir, err)}")
    else:
        rows = np.stack([_on_clock(recv.t_ns, int(offsets.get(d.receiver, 0))), recv.flow, recv.bytes], axis=1)
        per = [receiver_flow(rows, int(fl)) for fl in np.unique(recv.flow)]
        flows = [_goodput_line(t, b, hole_ns) for t, b in per]
        if per:
            common = functools.reduce(np.intersect1d, [t for t, _ in per])
            total = sum((b[np.searchsorted(t, common)] for t, b in per), np.zeros(common.size, dtype=np.int64))
            goodput = _goodput_line(common, total, hole_ns)
            if common.size < 2:
                notes.append("all-flows goodput not shown: the flows share fewer than 2 sampling instants")
        else:
            notes.append(f"goodput not shown: {d.recv_tsv} has no sample")
    try:
        info = read_tcpinfo(run_dir / d.send_tsv)
    except TrafficError as err:
        notes.append(f"cwnd not shown: {_rel(run_dir, err)}")
    else:
        t_info = _on_clock(info.t_ns, int(offsets.get(d.sender, 0)))
        for fl in np.unique(info.flow):
            sel = info.flow == fl
            order = np.argsort(t_info[sel], kind="stable")
            w = info.cwnd[sel][order].astype(np.float64)
            w[w < 0] = np.nan  # beyond the TCP_INFO length the kernel returned: not reported
            cwnd.append(Series(t_info[sel][order], w))
    agg = tcp.get("aggregate") if isinstance(tcp.get("aggregate"), dict) else {}
    o = agg.get("outage") if isinstance(agg.get("outage"), dict) else {}
    outage = None
    tb, ta = o.get("t_before_ns"), o.get("t_after_ns")
    if o.get("outage_ms") is not None and isinstance(tb, int) and isinstance(ta, int):
        outage = (tb, ta)
    elif o:
        lo, hi = o.get("lower_ms"), o.get("upper_ms")
        bound = f"[{'?' if lo is None else f'{lo:.1f}'}, {'open' if hi is None else f'{hi:.1f}'}] ms"
        notes.append(f"all-flows outage not shaded (a bound, {bound}): {o.get('reason') or 'not exact'}")
    elif isinstance(tcp.get("why_absent"), dict) and tcp["why_absent"].get("all"):
        notes.append(f"no TCP figures: {tcp['why_absent']['all']}")
    rto = []
    for f in tcp.get("per_flow") or []:
        r = f.get("rto") if isinstance(f, dict) and isinstance(f.get("rto"), dict) else {}
        for iv in r.get("expiry_intervals_ns") or []:
            if isinstance(iv, list | tuple) and len(iv) == 2 and all(isinstance(x, int) for x in iv):
                rto.append((int(iv[0]), int(iv[1])))
    label = f"{d.sender} -> {d.receiver}" if direction != "ab" else ""
    return TcpPanel(goodput, tuple(flows), tuple(cwnd), outage, tuple(sorted(rto)), tuple(notes), label)


def _rr_panel(run_dir: Path, offsets: dict[str, int]) -> RrPanel:
    """The rr panel from the rr client's trace (A's clock, put on the orchestrator's): latency =
    answer time - send time of each answered transaction."""
    from analysis.tcp_run import SENDER_ROLE
    from crosstraffic.backend import TrafficError
    from crosstraffic.tcp import read_rr
    from migrate.core.rundir import RR_TSV

    none = np.zeros(0, dtype=np.int64)
    try:
        rr = read_rr(run_dir / RR_TSV)
    except TrafficError as err:
        return RrPanel(none, np.zeros(0), none, none, (f"rr not shown: {_rel(run_dir, err)}",))
    off = int(offsets.get(SENDER_ROLE, 0))
    send, done, sched = (_on_clock(a, off) for a in (rr.t_send_ns, rr.t_done_ns, rr.t_sched_ns))
    sent, answered = rr.t_send_ns >= 0, rr.t_done_ns >= 0
    ok = sent & answered
    latency = (done[ok] - send[ok]) / 1e6
    return RrPanel(send[ok], latency, send[sent & ~answered], sched[~sent])


def _zoom(raw: _Raw, anat: Anatomy | None) -> Zoom | None:
    """The outage panel's range (the anatomy's marks from the last packet before the blackout to
    full rate, padded by a tenth each side, at least 20 ms) and the sink's gaps in it."""
    if anat is None:
        return None
    keys = ("last_packet", "vcpu_stop", "vcpu_resume", "first_packet", "full_rate")
    core = [m.t_ns for m in anat.marks if m.key in keys and m.t_ns is not None]
    if len(core) < 2:
        return None
    lo, hi = min(core), max(core)
    pad = max((hi - lo) // 10, 20_000_000)
    lo, hi = lo - pad, hi + pad
    marks = tuple((m.label, m.t_ns) for m in anat.marks if m.t_ns is not None and lo <= m.t_ns <= hi)
    sink = raw.sink or {}
    g = sink_gaps(sink) if sink.get("packets") else np.zeros((0, 4), dtype=np.int64)
    gaps = np.column_stack([g[:, 0], g[:, 1], (g[:, 3] - g[:, 2] > 1).astype(np.int64)]) if g.size else g[:, :3]
    return Zoom(lo, hi, tuple(m for m in marks if m[0] != "migration start"), gaps)


#: the figure groups of a Summary (``why_absent``'s keys), all null when the analysis itself failed
GROUPS = ("downtime_counters", "downtime_packets", "hypervisor", "link", "rtt", "cross", "send_loss")


def _failed(run_dir: Path, err: BaseException) -> Summary:
    """The summary of a run whose analysis failed outside every figure's guard: the run's status
    as meta.json has it, every figure null with the reason ``failed``, the error in the notes."""
    log.exception("analysis of %s failed", run_dir)
    notes: list[str] = []
    meta = _load(notes, Path(run_dir) / META_JSON, read_json) or {}
    status, failure, run_status = _status(meta)
    note = f"analysis failed: {type(err).__name__}: {err}"
    return Summary(
        status=status, failure=failure, hv=None, mode=None, accel=None, rate_bps=None, frame_bytes=None,
        run_status=run_status, why_absent=dict.fromkeys(GROUPS, "failed"), notes=(*notes, note),
    )  # fmt: skip


def _guarded(run_dir: Path) -> tuple[Summary, PlotData | None]:
    """:func:`_analyse`, and its summary's JSON form; should either raise (a figure's guard
    missed something), the summary of :func:`_failed` instead."""
    try:
        summary, plot = _analyse(run_dir)
        summary.to_dict()
        return summary, plot
    except Exception as err:  # the run keeps a summary.json that says so
        return _failed(run_dir, err), None


def analyse_run(run_dir: Path) -> Summary:
    """All metrics of the run in ``run_dir`` (reads meta.json and the raw files; writes nothing).
    Never raises: a figure that cannot be computed is None with its reason."""
    return _guarded(Path(run_dir))[0]


def metrics_text(run_dir: Path, summary: dict[str, Any] | None = None) -> str:
    """The OpenMetrics text of the run in ``run_dir`` (analysis.present.openmetrics) from its
    meta.json and ``summary`` (by default its summary.json); a file that is missing or unreadable
    counts as empty, so a run without a summary still says how it ended."""
    run_dir = Path(run_dir)
    try:
        meta = read_meta(run_dir)
    except (OSError, ValueError):
        meta = {}
    if summary is None:
        try:
            summary = read_summary(run_dir)
        except (OSError, ValueError):
            summary = {}
    return run_metrics(meta, summary, run_dir.name)


def _write_metrics(run_dir: Path, summary: dict[str, Any]) -> str | None:
    """Write ``metrics.prom`` (atomically); on failure, remove an older one (its figures would not
    be this summary's) and return the note that says why."""
    path = run_dir / METRICS_NAME
    try:
        write_text(path, metrics_text(run_dir, summary))
        return None
    except Exception as err:  # the metrics are derived from summary.json: never worth losing it
        log.exception("metrics failed")
        try:
            path.unlink(missing_ok=True)
        except OSError:
            log.warning("could not remove the stale %s", path)
        return f"metrics failed: {type(err).__name__}: {err}"


def analyse_and_write(run_dir: Path) -> Summary:
    """Analyse ``run_dir``, draw ``migration.png``, (atomically) rewrite ``summary.json``, then
    ``metrics.prom``, the summary's figures as OpenMetrics text, and ``report.html``
    (analysis.present.run_report); a failed plot, metrics file or report is a note in the
    summary, never a lost summary."""
    run_dir = Path(run_dir)
    summary, plot = _guarded(run_dir)
    no_png = next((n for n in summary.notes if n.startswith(("plot data", "analysis failed"))), "not drawn")
    try:
        if plot is not None:
            plot_run(run_dir / PLOT_NAME, plot)
            no_png = ""
    except Exception as err:  # a plot problem must not cost the summary
        log.exception("plot failed")
        no_png = f"plot failed: {type(err).__name__}: {err}"
        summary = dataclasses.replace(summary, notes=(*summary.notes, no_png))
    document = summary.to_dict()
    write_summary(run_dir, document)
    note = _write_metrics(run_dir, document)
    if note is not None:
        summary = dataclasses.replace(summary, notes=(*summary.notes, note))
        document = summary.to_dict()
        write_summary(run_dir, document)
    if is_calibration(run_dir):  # a calibration's report is its verdict, not a migration's figures
        note = try_write_calibration_report(run_dir)
    else:
        note = try_write_run_report(run_dir, document, no_png)
    if note is not None:  # report.html is derived from summary.json: never worth losing it
        summary = dataclasses.replace(summary, notes=(*summary.notes, note))
        write_summary(run_dir, summary.to_dict())
    return summary
