"""The short terminal table of a run's metrics."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from analysis.metrics.anatomy import timeline_text
from analysis.summary import Summary
from analysis.values import dig

NA = "–"


def _f(value: Any, fmt: str = ".3f", scale: float = 1.0) -> str:
    if value is None:
        return NA
    return format(value * scale if scale != 1.0 else value, fmt)


def _fig(s: Mapping[str, Any], path: str, fmt: str = ".3f", scale: float = 1.0) -> str:
    """A headline figure: its value, '>= bound (why)' or '<= bound (why)' when censored, '–, why' when absent; an
    incomplete value gets '(incomplete: why)'."""
    value = dig(s, *path.split("."))
    qual = dig(s, "qualifiers", path)
    if value is not None:
        out = _f(value, fmt, scale)
        if isinstance(qual, Mapping) and qual.get("state") == "incomplete":
            out += f" (incomplete: {', '.join(qual.get('reasons') or [])})"
        return out
    if not isinstance(qual, Mapping):
        return NA
    if qual.get("state") == "censored" and qual.get("lower") is not None:
        return f">= {_f(qual['lower'], fmt, scale)} ({', '.join(qual.get('reasons') or [])})"
    if qual.get("state") == "censored" and qual.get("upper") is not None:
        return f"<= {_f(qual['upper'], fmt, scale)} ({', '.join(qual.get('reasons') or [])})"
    return f"{NA}, {qual.get('text') or ', '.join(qual.get('reasons') or [])}"


def _rtt(s: Mapping[str, Any], phase: str) -> str:
    p = dig(s, "rtt_ms", phase)
    lost = f"lost {_f(dig(p, 'lost'), 'd')}"
    if dig(p, "median") is None and isinstance(dig(s, "qualifiers", f"rtt_ms.{phase}.median"), Mapping):
        return f"{phase} –/– ({dig(s, 'qualifiers', f'rtt_ms.{phase}.median', 'text')}; {lost})"
    return f"{phase} {_f(dig(p, 'median'), '.2f')}/{_f(dig(p, 'p99'), '.2f')} ({lost})"


def _sent_lost(d: Mapping[str, Any] | None, ratio: bool = False) -> str:
    out = f"{_f(dig(d, 'lost'), 'd')} of {_f(dig(d, 'sent'), 'd')}"
    return f"{out} ({_f(dig(d, 'loss_ratio'), '.3f', 100)} %)" if ratio else out


def _who(hv: Mapping[str, Any] | None) -> tuple[str, str]:
    """Name of the hypervisor's own figures and of its volume figure in the table."""
    source = str(dig(hv, "reply_source") or "")
    if source.startswith("libvirt"):  # DRIVER=libvirt
        return "libvirt", "libvirt memory processed"
    if source == "criu":  # HV=criu: CRIU's own statistics (analysis.hypervisors.criu)
        return "CRIU", "CRIU pages written"
    if source == "xl":  # HV=xen: xl's messages, dom0's NIC bytes (analysis.hypervisors.xen)
        return "xl", "dom0 migration NIC bytes"
    return "QEMU", "QEMU ram.transferred"


def _downtime_line(s: Mapping[str, Any], who: str) -> str:
    det = s.get("details") or {}
    dc, dp, stl = det.get("downtime_counters"), det.get("downtime_packets"), det.get("send_time_loss")
    counters = _fig(s, "downtime_s.counters")
    if dig(s, "downtime_s", "counters") is not None:
        counters += f" (±{_f(dig(dc, 'resolution_s'))})"
    packets = _fig(s, "downtime_s.packets")
    if dig(dp, "lower_s") is not None:
        # packets sent during the gap that never arrived (send stamps); else the sequence numbers around it
        gap_loss = f"{_sent_lost(dig(stl, 'outage'))} sent in gap lost" if dig(stl, "outage") else None
        packets += f" ({gap_loss or _f(dig(dp, 'lost_in_gap'), 'd') + ' lost in gap'})"
    return f"  downtime [s]     counters {counters}   packets {packets}   {who} {_fig(s, 'downtime_s.hypervisor')}"


def _cross_line(s: Mapping[str, Any]) -> str:
    cross = s.get("cross_traffic") or {}
    if s.get("rate_bps") == 0:
        return "  cross-traffic    none (rate 0)"
    line = (
        f"  cross-traffic    offered {_fig(s, 'cross_traffic.offered_bps', '.1f', 1e-6)}"
        f"   forwarded {_fig(s, 'cross_traffic.forwarded_bps', '.1f', 1e-6)} Mbit/s"
        f"   lost {_fig(s, 'cross_traffic.lost_packets', 'd')} of {_f(cross.get('sent_packets'), 'd')} sent"
        f" ({_fig(s, 'cross_traffic.loss_ratio', '.3f', 100)} %)"
    )
    if cross.get("gen_send_errors"):
        line += f"   send errors {cross['gen_send_errors']} (never sent; not in the loss)"
    if cross.get("sink_socket_drops"):
        line += f"   sink socket drops {cross['sink_socket_drops']} (not in the loss)"
    dups = cross.get("duplicate_packets")
    line += f"   reordered {_f(cross.get('reordered_packets'), 'd')}   duplicates {_f(dups, 'd')}"
    if dups:
        line += " (DUPLICATES: the flow reached B twice: both hosts forwarding, or flooding to both?)"
    return line


def _instruments_line(s: Mapping[str, Any]) -> str:
    ins = s.get("instruments") or {}
    share = ins.get("core_share")
    if share is None:
        why = dig(s, "qualifiers", "instruments.core_share", "text") or "not available"
        return f"  instruments      CPU –, {why}"
    cpu = ins.get("cpu_s") or {}
    parts = ", ".join(f"{k} {_f(v, '.2f')}" for k, v in cpu.items())
    return (
        f"  instruments      CPU {_f(ins.get('total_cpu_s'), '.2f')} s = {_f(share, '.1f', 100)} % of a core"
        f" over {_f(ins.get('wall_s'), '.1f')} s ({ins.get('wall_source')} span; {parts} s)"
    )


def _dirty_line(s: Mapping[str, Any]) -> str | None:
    """The guest's dirty rate before the migration (summary.json ``dirty_rate``); None for a run
    whose driver does not measure it and that asked for no load."""
    d = s.get("dirty_rate")
    if not isinstance(d, Mapping):
        return None
    requested = d.get("requested_mb_s")
    if requested is None and d.get("why_absent") in ("dirty_rate_unsupported", "dirty_rate_not_recorded"):
        return None
    measured, se = d.get("measured_mb_s"), d.get("sampling_error_mb_s")
    if measured is not None:
        line = f"  dirty rate       measured {measured:g}{f' ±{se:.1f}' if se else ''} MB/s"
        line += f" ({d.get('method')} over {_f(d.get('calc_time_s'), 'g')} s,"
        line += f" ended {_f(d.get('before_migration_s'), '.2f')} s before the migration)"
    elif d.get("upper_mb_s") is not None:
        line = f"  dirty rate       measured <= {d['upper_mb_s']:g} MB/s ({d.get('why_absent')})"
    else:
        line = f"  dirty rate       measured {_fig(s, 'dirty_rate.measured_mb_s')}"
    return line + (f"   requested {requested:g} MB/s" if requested is not None else "   (no load)")


def _control_plane_lines(cp: Mapping[str, Any] | None) -> list[str]:
    """One line per protocol of PEERING: survived or how it flapped, the router's longest
    control-plane silence at a peer against the limit the peer enforces, and (BGP) the routes."""
    if not cp:
        return []
    if cp.get("why_absent"):
        return [f"  control plane    –, {cp['why_absent']}"]
    out = []
    for proto in ("bgp", "ospf", "bfd"):
        f = cp.get(proto)
        if not isinstance(f, Mapping):
            continue
        survived = {True: "survived", False: "FLAPPED", None: "never up"}[f.get("survived")]
        if f.get("survived") is None and f.get("down_at_migration"):
            survived = f"unknown (down at the migration's start: {', '.join(f['down_at_migration'])})"
        if f.get("flaps"):
            downs = []
            for d in f.get("flap_details") or []:
                back = (
                    f"up after {_f(d['down_for_s'], '.2f')} s"
                    if d.get("down_for_s") is not None
                    else f"not up again (>= {_f(d.get('down_for_s_lower'), '.2f')} s)"
                )
                downs.append(f"{d['peer']}: {d.get('cause') or 'down'}, {back}")
            survived += f" ({f['flaps']}: {'; '.join(downs)})"
        silence = (
            f"silence {_f(f.get('silence_ms'), '.0f')} ms at {f.get('silence_peer')}"
            f" of {_f(f.get('limit_ms'), '.0f')} ms (margin {_f(f.get('margin_ms'), '.0f')} ms)"
            if f.get("silence_ms") is not None
            else "silence –, no capture"
        )
        if f.get("flaps_before_migration"):
            survived += f" [{f['flaps_before_migration']} flap(s) before the migration, not counted]"
        line = f"  {proto.upper():<16} {survived}; {silence}"
        routes = f.get("routes") or {}
        lost = {peer: r for peer, r in routes.items() if r.get("lost")}
        if routes:
            line += (
                "; routes kept"
                if not lost
                else "; routes lost at "
                + ", ".join(
                    f"{peer} ({r['withdrawn']} withdrawn{', back' if r.get('whole_again_ns') else ', not back'})"
                    for peer, r in lost.items()
                )
            )
        out.append(line)
    return out


def _phase_text(p: Mapping[str, Any] | None) -> str:
    """A phase: its seconds with the resolution, a bound as '>= x' / '<= x', else '–'."""
    if not isinstance(p, Mapping):
        return NA
    res = f" (±{_f(p['resolution_s'])})" if p.get("resolution_s") is not None else ""
    if p.get("seconds") is not None:
        return f"{_f(p['seconds'])}{res}"
    if p.get("lower_s") is not None and p.get("upper_s") is None:
        return f">= {_f(p['lower_s'])}"
    if p.get("upper_s") is not None:
        return f"<= {_f(p['upper_s'])}"
    return NA


def _anatomy_lines(a: Mapping[str, Any] | None) -> list[str]:
    """The outage's phases, then its timeline in ms from the migration start."""
    if not isinstance(a, Mapping):
        return []
    ph = a.get("phases") or {}
    parts = "   ".join(
        f"{label} {_phase_text(ph.get(key))}"
        for key, label in (("vcpu_blackout", "vCPU blackout"), ("reattachment", "reattachment"),
                           ("reconvergence", "reconvergence"))
    )  # fmt: skip
    timeline = timeline_text(a)
    return [
        f"  outage [s]       {_phase_text(ph.get('outage'))}, last packet → full rate (data plane)",
        f"  phases [s]       {parts}",
        f"  timeline [ms]    {timeline}",
    ]


def _postcopy_lines(post: Mapping[str, Any] | None) -> list[str]:
    """POSTCOPY=1: whether QEMU entered post-copy and, if it did, the blackout beside its price."""
    if not isinstance(post, Mapping):
        return []
    if not post.get("entered"):
        return [f"  post-copy        not entered (QEMU postcopy-bytes {_f(post.get('postcopy_bytes'), 'd')})"]
    pr = post.get("price") or {}
    why = pr.get("why_absent") or {}
    w = _f(pr.get("window_s"), "g")
    before, after = pr.get("rtt_before") or {}, pr.get("rtt_after") or {}
    block = (
        _f(pr.get("blocktime_ms"), ".0f") if pr.get("blocktime_ms") is not None else f"{NA} ({why.get('blocktime')})"
    )
    lines = [
        f"  post-copy        blackout {_f(pr.get('blackout_s'))} s   phase {_f(pr.get('phase_s'))} s (resume→completed)"
        f"   blocktime {block} ms   postcopy-bytes {_f(post.get('postcopy_bytes'), 'd')}",
        f"  after switch     {w} s after the resume: RTT median/p99 {_f(after.get('median_ms'), '.2f')}/"
        f"{_f(after.get('p99_ms'), '.2f')} ms (before {_f(before.get('median_ms'), '.2f')}/"
        f"{_f(before.get('p99_ms'), '.2f')}), probes lost {_f(after.get('lost'), 'd')} of {_f(after.get('sent'), 'd')}"
        f"; cross-traffic lost {_sent_lost(pr.get('loss_after'), True) if pr.get('loss_after') else NA}",
    ]
    return lines


def _flows_line(label: str, f: Mapping[str, Any] | None) -> str | None:
    """One direction's UDP flows: the spread of per-flow loss and longest gap."""
    if not isinstance(f, Mapping) or f.get("flows", 0) <= 1:
        return None
    if f.get("why_absent"):
        return f"  {label:<16} {NA} ({f['why_absent']})"
    pct = "/".join(_f(f.get(k), ".2f", 100) for k in ("loss_ratio_min", "loss_ratio_median", "loss_ratio_max"))
    gaps = f"{_f(f.get('longest_gap_min_ms'), '.1f')}-{_f(f.get('longest_gap_max_ms'), '.1f')}"
    flags = f"   flags {', '.join(f['flags'])}" if f.get("flags") else ""
    return (
        f"  {label:<16} {f['flows']} flows: loss min/median/max {pct} %, {f.get('flows_with_loss')} with loss, "
        f"longest gap per flow {gaps} ms{flags}"
    )


def _udp_lines(u: Mapping[str, Any] | None) -> list[str]:
    """TRAFFIC=udp:M / dir=both / sizes=: frame sizes, per-flow spread, the B -> A direction."""
    if not isinstance(u, Mapping):
        return []
    lines = []
    if u.get("frame_sizes"):
        mix = "/".join(f"{size}:{w}" for size, w in u["frame_sizes"])
        lines.append(f"  UDP frame sizes  {mix} (mean {_f(u.get('mean_frame_bytes'), '.1f')} B)")
    ab = _flows_line("UDP flows A->B", dig(u, "ab", "flows"))
    lines += [ab] if ab else []
    ba = u.get("ba")
    if isinstance(ba, Mapping):
        cross = ba.get("cross") or {}
        lower = dig(ba, "downtime_packets", "lower_s")
        if ba.get("downtime_s") is not None:
            down = _f(ba["downtime_s"], ".1f", 1000)
        elif lower is not None:
            down = f">= {_f(lower, '.1f', 1000)}"
        else:
            down = f"{NA} ({dig(ba, 'why_absent', 'downtime_packets') or 'no gap'})"
        lines.append(
            f"  UDP B->A         packet downtime {down} ms   offered {_f(cross.get('offered_bps'), '.1f', 1e-6)} "
            f"Mbit/s, forwarded {_f(cross.get('forwarded_bps'), '.1f', 1e-6)}   lost "
            f"{cross.get('lost_packets', NA)}/{cross.get('sent_packets', NA)}   duplicates "
            f"{cross.get('duplicate_packets', NA)}, reordered {cross.get('reordered_packets', NA)}"
        )
        back = _flows_line("UDP flows B->A", ba.get("flows"))
        lines += [back] if back else []
    return lines


def _tcp_value(t: Mapping[str, Any], key: str, fmt: str = ".0f") -> str:
    """A ``tcp`` headline figure: its value, else '–, <why>'."""
    if t.get(key) is not None:
        return _f(t[key], fmt)
    return f"{NA} ({dig(t, 'why_absent', key) or 'absent'})"


def _capture_text(t: Mapping[str, Any], role: str) -> str:
    """Whether the receiver's capture at ``role`` agrees with its read times on the outage."""
    agrees = t.get("capture_agrees")
    cap = NA if agrees is None else ("agrees" if agrees else "DISAGREES")
    diff = dig(t, "capture", "max_difference_ms")
    return f"capture at {role} {cap}" + (f" (max diff {_f(diff, '.1f')} ms)" if diff is not None else "")


def _tcp_lines(t: Mapping[str, Any] | None, rr: Mapping[str, Any] | None) -> list[str]:
    """TRAFFIC=tcp / rr: the bulk flows' outage, recovery, RTOs and window, and the rr spike."""
    lines = []
    if isinstance(t, Mapping):
        if "flows" not in t:
            lines.append(f"  TCP              {NA} ({dig(t, 'why_absent', 'all')})")
        else:
            cc = ",".join(sorted(set(t.get("cc") or []))) or NA
            rel = dig(t, "aggregate", "relation_to_packet_gap", "verdict")
            lines.append(
                f"  TCP {t['flows']} flow(s) {cc}: goodput outage {_tcp_value(t, 'goodput_outage_ms')} ms"
                f" (longest flow {_tcp_value(t, 'flow_outage_max_ms')} ms; vs UDP gap: {rel or NA})"
            )
            lines.append(
                f"  TCP recovery     to 90 % goodput {_tcp_value(t, 'time_to_recover_ms')} ms   RTO expiries "
                f"{_tcp_value(t, 'rto_expiries', 'd')}   cwnd min {_tcp_value(t, 'cwnd_min', 'd')}   "
                + _capture_text(t, "B")
            )
        ba = t.get("ba")
        if isinstance(ba, Mapping) and "flows" not in ba:
            lines.append(f"  TCP B -> A       {NA} ({dig(ba, 'why_absent', 'all')})")
        elif isinstance(ba, Mapping):
            lines.append(
                f"  TCP B -> A {ba['flows']} flow(s): goodput outage {_tcp_value(ba, 'goodput_outage_ms')} ms"
                f" (longest flow {_tcp_value(ba, 'flow_outage_max_ms')} ms)   to 90 % goodput "
                f"{_tcp_value(ba, 'time_to_recover_ms')} ms   RTO expiries {_tcp_value(ba, 'rto_expiries', 'd')}"
                f"   cwnd min {_tcp_value(ba, 'cwnd_min', 'd')}   " + _capture_text(ba, "A")
            )
    if isinstance(rr, Mapping):
        sp = rr.get("spike")
        if not isinstance(sp, Mapping):
            lines.append(f"  rr               {NA} ({dig(rr, 'why_absent', 'all')})")
        else:
            b, d = sp.get("before") or {}, sp.get("during") or {}
            worst = _f(d.get("max_ms"), ".1f")
            if d.get("max_ms") is None:
                worst = f">= {_f(d.get('max_lower_ms'), '.1f')}"
            lines.append(
                f"  rr latency [ms]  before p50/p99 {_f(b.get('p50_ms'), '.2f')}/{_f(b.get('p99_ms'), '.2f')}"
                f"   during p99 {_f(d.get('p99_ms'), '.1f')} max {worst}"
                f"   unanswered {_f(d.get('unanswered'), 'd')} not sent {_f(d.get('not_sent'), 'd')}"
            )
    return lines


def format_table(summary: Summary | Mapping[str, Any]) -> str:
    """Headline metrics of a run, one per line (accepts a Summary or its summary.json dict).

    A figure that is absent shows '–, <why>', a lower bound '>= x (<why>)', a value computed from
    incomplete records '(incomplete: <why>)'."""
    s = summary.to_dict() if isinstance(summary, Summary) else summary
    det = s.get("details") or {}
    dc, dp, hv = det.get("downtime_counters"), det.get("downtime_packets"), det.get("hypervisor")
    rate = f"{s['rate_bps'] / 1e6:g} Mbit/s" if s.get("rate_bps") is not None else NA
    router = f" router={s['router']}" if s.get("router") not in (None, "frr") else ""
    sizes = dig(s, "udp", "frame_sizes")
    frame = f"{s.get('frame_bytes')} B" if not sizes else "sizes " + "/".join(f"{b}:{w}" for b, w in sizes)
    head = f"{s.get('hv')} {s.get('mode')} {rate} {frame} accel={s.get('accel')}{router}"
    head += f": {s.get('status')}"
    if s.get("failure_class"):
        head += f" [{s['failure_class']}]"
    if s.get("failure"):
        head += f" ({s['failure']})"
    stl = det.get("send_time_loss")
    who, who_volume = _who(hv)
    lines = [
        head,
        _downtime_line(s, who),
        f"  duration [s]     link {_fig(s, 'duration_s.link')}   {who} {_fig(s, 'duration_s.hypervisor')}"
        f"   migrate→end {_f(dig(hv, 'command_to_end_s'))}",
        f"  volume [MB]      link {_fig(s, 'volume_bytes.link', '.1f', 1e-6)}"
        f"   {who_volume} {_fig(s, 'volume_bytes.hypervisor', '.1f', 1e-6)}",
        "  RTT median/p99   " + "   ".join(_rtt(s, p) for p in ("before", "during", "after")) + " [ms]",
        _cross_line(s),
    ]
    if stl:
        lines.append(
            f"  send-time loss   migration {_sent_lost(stl.get('migration'), True)}"
            f"   outside {_sent_lost(stl.get('outside'), True)}   excess {_f(stl.get('excess_lost'), '.0f')}"
        )
    elif s.get("rate_bps") != 0 and isinstance(dig(s, "qualifiers", "cross_traffic.migration_lost_packets"), Mapping):
        lines.append(f"  send-time loss   {_fig(s, 'cross_traffic.migration_lost_packets', 'd')}")
    if dig(hv, "stop_to_cont_s") is not None:
        lines.insert(2, f"  guest paused [s] stop→cont {_f(hv['stop_to_cont_s'])} (orchestrator)")
    smp = det.get("sampler")
    if smp:
        late = "/".join(_f(smp.get(k), ".2f") for k in ("late_p50_ms", "late_p99_ms", "late_max_ms"))
        line = f"  sampler          period {_f(smp.get('period_s'), 'g', 1e3)} ms, late p50/p99/max {late} ms"
        if smp.get("missed_rounds") or smp.get("read_errors"):
            line += f", missed rounds {smp.get('missed_rounds')}, read errors {smp.get('read_errors')}"
        lines.append(line)
    if "instruments" in s:
        lines.append(_instruments_line(s))
    dirty = _dirty_line(s)
    if dirty:
        lines.append(dirty)
    lines += _anatomy_lines(s.get("anatomy"))
    lines += _postcopy_lines(det.get("postcopy"))
    lines += _control_plane_lines(s.get("control_plane"))
    lines += _tcp_lines(s.get("tcp"), s.get("rr"))
    lines += _udp_lines(s.get("udp"))
    flags = sorted({*(dig(dc, "flags") or []), *(dig(dp, "flags") or [])})
    if flags:
        lines.append(f"  flags            {', '.join(flags)}")
    lines += [f"  note: {n}" for n in det.get("notes") or []]
    return "\n".join(lines)
