"""The short terminal table of a run's metrics."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from analysis.summary import Summary

NA = "–"


def _f(value: Any, fmt: str = ".3f", scale: float = 1.0) -> str:
    if value is None:
        return NA
    return format(value * scale if scale != 1.0 else value, fmt)


def _d(d: Mapping[str, Any] | None, *keys: str) -> Any:
    for k in keys:
        if not isinstance(d, Mapping):
            return None
        d = d.get(k)
    return d


def _rtt(phase: Mapping[str, Any] | None) -> str:
    return f"{_f(_d(phase, 'median'), '.2f')}/{_f(_d(phase, 'p99'), '.2f')} (lost {_f(_d(phase, 'lost'), 'd')})"


def _sent_lost(d: Mapping[str, Any] | None, ratio: bool = False) -> str:
    out = f"{_f(_d(d, 'lost'), 'd')} of {_f(_d(d, 'sent'), 'd')}"
    return f"{out} ({_f(_d(d, 'loss_ratio'), '.3f', 100)} %)" if ratio else out


def format_table(summary: Summary | Mapping[str, Any]) -> str:
    """Headline metrics of a run, one per line (accepts a Summary or its summary.json dict)."""
    s = summary.to_dict() if isinstance(summary, Summary) else summary
    det = s.get("details") or {}
    dc, dp, hv = det.get("downtime_counters"), det.get("downtime_packets"), det.get("hypervisor")
    rate = f"{s['rate_bps'] / 1e6:g} Mbit/s" if s.get("rate_bps") is not None else NA
    head = f"{s.get('hv')} {s.get('mode')} {rate} {s.get('frame_bytes')} B accel={s.get('accel')}: {s.get('status')}"
    if s.get("failure"):
        head += f" ({s['failure']})"
    stl = det.get("send_time_loss")
    # packets sent during the gap that never arrived (send stamps); else the sequence numbers around it
    gap_loss = f"{_sent_lost(_d(stl, 'outage'))} sent in gap lost" if _d(stl, "outage") else None
    gap_loss = gap_loss or f"{_f(_d(dp, 'lost_in_gap'), 'd')} lost in gap"
    cross = s.get("cross_traffic") or {}
    via_libvirt = str(_d(hv, "reply_source") or "").startswith("libvirt")  # DRIVER=libvirt
    who, who_volume = ("libvirt", "libvirt memory processed") if via_libvirt else ("QEMU", "QEMU ram.transferred")
    if _d(hv, "reply_source") == "criu":  # HV=criu: CRIU's own statistics (analysis.criu)
        who, who_volume = "CRIU", "CRIU pages written"
    if _d(hv, "reply_source") == "xl":  # HV=xen: xl's messages, dom0's NIC bytes (analysis.xen)
        who, who_volume = "xl", "dom0 migration NIC bytes"
    lines = [
        head,
        f"  downtime [s]     counters {_f(_d(s, 'downtime_s', 'counters'))} (±{_f(_d(dc, 'resolution_s'))})"
        f"   packets {_f(_d(s, 'downtime_s', 'packets'))} ({gap_loss})"
        f"   {who} {_f(_d(s, 'downtime_s', 'hypervisor'))}",
        f"  duration [s]     link {_f(_d(s, 'duration_s', 'link'))}   {who} {_f(_d(s, 'duration_s', 'hypervisor'))}"
        f"   migrate→end {_f(_d(hv, 'command_to_end_s'))}",
        f"  volume [MB]      link {_f(_d(s, 'volume_bytes', 'link'), '.1f', 1e-6)}"
        f"   {who_volume} {_f(_d(s, 'volume_bytes', 'hypervisor'), '.1f', 1e-6)}",
        "  RTT median/p99   "
        + "   ".join(f"{p} {_rtt(_d(s, 'rtt_ms', p))}" for p in ("before", "during", "after"))
        + " [ms]",
        f"  cross-traffic    offered {_f(cross.get('offered_bps'), '.1f', 1e-6)}"
        f"   forwarded {_f(cross.get('forwarded_bps'), '.1f', 1e-6)} Mbit/s"
        f"   lost {_f(cross.get('lost_packets'), 'd')} ({_f(cross.get('loss_ratio'), '.3f', 100)} %)",
    ]
    if stl:
        lines.append(
            f"  send-time loss   migration {_sent_lost(stl.get('migration'), True)}"
            f"   outside {_sent_lost(stl.get('outside'), True)}   excess {_f(stl.get('excess_lost'), '.0f')}"
        )
    if _d(hv, "stop_to_cont_s") is not None:
        lines.insert(2, f"  guest paused [s] stop→cont {_f(hv['stop_to_cont_s'])} (orchestrator)")
    smp = det.get("sampler")
    if smp:
        late = "/".join(_f(smp.get(k), ".2f") for k in ("late_p50_ms", "late_p99_ms", "late_max_ms"))
        lines.append(f"  sampler          period {_f(smp.get('period_s'), 'g', 1e3)} ms, late p50/p99/max {late} ms")
    flags = sorted({*(_d(dc, "flags") or []), *(_d(dp, "flags") or [])})
    if flags:
        lines.append(f"  flags            {', '.join(flags)}")
    lines += [f"  note: {n}" for n in det.get("notes") or []]
    return "\n".join(lines)
