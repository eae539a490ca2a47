"""The metrics of one run as a frozen dataclass, and its summary.json form (schema:
docs/data-formats.md; version 2: absent and censored figures are null, with ``qualifiers``)."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from analysis import qualify as q
from analysis.hypervisors.qemu import HypervisorFigures
from analysis.metrics.anatomy import Anatomy
from analysis.metrics.churn import ChurnFigures
from analysis.metrics.clock import ClockFigures
from analysis.metrics.counters import SamplerHealth
from analysis.metrics.cross import CrossTraffic
from analysis.metrics.dirty import DirtyRate
from analysis.metrics.downtime import CountersDowntime, PacketsDowntime
from analysis.metrics.instruments import Instruments
from analysis.metrics.link import LinkActivity
from analysis.metrics.rtt import RttPhases, RttStats
from analysis.metrics.sendloss import SendTimeLoss
from analysis.metrics.window import Window
from migrate.core.rundir import SUMMARY_FORMAT

SUMMARY_FORMAT_VERSION = SUMMARY_FORMAT  # the results contract's (migrate.core.rundir)


def _jsonable(obj: Any) -> Any:
    """Plain JSON values: dataclasses -> dicts, tuples -> lists, numpy -> Python, NaN/inf -> None."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: _jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def _get(obj: Any, name: str) -> Any:
    return None if obj is None else getattr(obj, name)


def _rtt(stats: RttStats | None) -> dict[str, Any]:
    return {
        "median": _get(stats, "median_ms"),
        "p99": _get(stats, "p99_ms"),
        "lost": _get(stats, "lost"),
        "sent": _get(stats, "sent"),
    }


@dataclass(frozen=True)
class Summary:
    """Everything analysis computes for one run (None = not available; ``why_absent`` and
    ``notes`` say why).

    ``why_absent`` maps a figure group whose object is None ("downtime_counters",
    "downtime_packets", "hypervisor", "link", "rtt", "cross", "send_loss") to a reason code of
    analysis.qualify."""

    status: str
    failure: str | None
    hv: str | None
    mode: str | None
    accel: str | None
    rate_bps: float | None
    frame_bytes: int | None
    run_status: str | None = None
    failure_class: str | None = None
    window: Window | None = None
    downtime_counters: CountersDowntime | None = None
    downtime_packets: PacketsDowntime | None = None
    total_lost_packets: int | None = None
    hypervisor: HypervisorFigures | None = None
    link: LinkActivity | None = None
    rtt: RttPhases | None = None
    cross: CrossTraffic | None = None
    send_loss: SendTimeLoss | None = None
    sampler: SamplerHealth | None = None
    instruments: Instruments | None = None
    clock: ClockFigures | None = None
    #: PEERING runs: per protocol (analysis.metrics.control_plane); None without PEERING
    control_plane: dict[str, Any] | None = None
    #: the outage's timeline and phases (analysis.metrics.anatomy); None without a window
    anatomy: Anatomy | None = None
    #: POSTCOPY=1 runs (QMP): whether QEMU entered post-copy (analysis.hypervisors.qemu.postcopy_effect)
    postcopy: dict[str, Any] | None = None
    #: the guest's dirty rate before the migration (analysis.metrics.dirty); None if its analysis failed
    dirty_rate: DirtyRate | None = None
    #: route churn through the router (CHURN=, analysis.metrics.churn); None without
    churn: ChurnFigures | None = None
    #: the router that ran: a built-in image's name, or a profile file's ``[router] name``
    router: str | None = None
    #: TRAFFIC=tcp: the bulk flows' figures (analysis.tcp_run.tcp_figures); None without
    tcp: dict[str, Any] | None = None
    #: TRAFFIC=rr: the request/response latency (analysis.tcp_run.rr_figures); None without
    rr: dict[str, Any] | None = None
    #: TRAFFIC=udp:M / dir=both / sizes=: the UDP CBR's flows, B -> A direction and frame sizes
    #: (analysis.run._udp_figures); None for one flow, one way, one size
    udp: dict[str, Any] | None = None
    why_absent: dict[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    def _why(self, group: str, default: str) -> str:
        if self.rate_bps == 0 and group in ("downtime_counters", "downtime_packets", "cross", "send_loss"):
            return "no_cross_traffic"
        return self.why_absent.get(group, default)

    def qualifiers(self) -> dict[str, q.Qualifier]:
        """Headline path -> Qualifier for every headline figure that is None or incomplete."""
        out: dict[str, q.Qualifier] = {}
        out.update(self._q_downtime())
        out.update(self._q_hypervisor())
        if self.link is None:
            why = q.absent(self._why("link", "no_link_activity"))
            out["duration_s.link"] = out["volume_bytes.link"] = why
        elif self.link.duration_s is None and self.link.duration_upper_s is not None:
            out["duration_s.link"] = q.at_most(self.link.duration_upper_s, ("below_resolution",))
        out.update(self._q_rtt())
        out.update(self._q_cross())
        out.update(self._q_anatomy())
        d = self.dirty_rate
        if d is None:
            out["dirty_rate.measured_mb_s"] = q.absent("failed")
        elif d.measured_mb_s is None and d.upper_mb_s is not None:
            out["dirty_rate.measured_mb_s"] = q.at_most(d.upper_mb_s, (d.why_absent or "below_rate_resolution",))
        elif d.measured_mb_s is None:
            out["dirty_rate.measured_mb_s"] = q.absent(d.why_absent or "not_reported", detail=d.error or "")
        if self.churn is not None:
            for name in ("issued_routes_s", "relayed_routes_s", "stall_ms"):
                if getattr(self.churn, name) is None:
                    out[f"churn.{name}"] = q.absent(self.churn.why_absent.get(name, "not_measured"))
        out.update(self._q_udp_ba())
        ins = self.instruments
        for name in ("total_cpu_s", "core_share"):
            code = (ins.absent or {}).get(name) if ins is not None else "no_instrument_cpu"
            if code:
                out[f"instruments.{name}"] = q.absent(code)
        return out

    def _q_downtime(self) -> dict[str, q.Qualifier]:
        out: dict[str, q.Qualifier] = {}
        dc, dp, cross = self.downtime_counters, self.downtime_packets, self.cross
        if dc is None:
            out["downtime_s.counters"] = q.absent(self._why("downtime_counters", "no_counters"))
        elif dc.downtime_s is None and "no_stall" in dc.flags:
            upper = dc.upper_s
            text = f"no stall longer than θ = {dc.threshold_s * 1e3:g} ms found"
            text += f" (an outage up to {upper * 1e3:g} ms can go unseen)" if upper else ""
            out["downtime_s.counters"] = q.absent("no_stall", upper=upper, text=text)
        elif dc.downtime_s is None and dc.lower_s is not None:
            out["downtime_s.counters"] = q.censored(dc.lower_s, _bound_flags(dc.flags))
        if dp is None:
            out["downtime_s.packets"] = q.absent(self._why("downtime_packets", "no_sink"))
        elif dp.downtime_s is None and dp.lower_s is None:
            theta = f" = {dp.threshold_s * 1e3:g} ms" if dp.threshold_s else ""
            text = f"no gap longer than θ{theta} found" if dp.flags[-1:] == ("no_gap",) else ""
            out["downtime_s.packets"] = q.absent(*dp.flags[-1:], upper=dp.upper_s, text=text)
        elif dp.downtime_s is None and dp.lower_s is not None:
            out["downtime_s.packets"] = q.censored(dp.lower_s, _bound_flags(dp.flags))
        elif cross is not None and cross.sink_socket_drops:
            out["downtime_s.packets"] = q.incomplete(
                "sink_socket_drops", detail=f"{cross.sink_socket_drops} packets: a gap may be the sink's"
            )
        return out

    def _q_udp_ba(self) -> dict[str, q.Qualifier]:
        """TRAFFIC=udp,dir=both: the B -> A packet downtime (``udp.ba.downtime_s``) as a bound or
        why absent, as ``downtime_s.packets`` is."""
        ba = self.udp.get("ba") if isinstance(self.udp, dict) else None
        if not isinstance(ba, dict) or ba.get("downtime_s") is not None:
            return {}
        dp = ba.get("downtime_packets")
        path = "udp.ba.downtime_s"
        if not isinstance(dp, dict):
            why = (ba.get("why_absent") or {}).get("downtime_packets") or "failed"
            return {path: q.absent(why)}
        flags = tuple(dp.get("flags") or ())
        if dp.get("lower_s") is not None:
            return {path: q.censored(dp["lower_s"], _bound_flags(flags))}
        return {path: q.absent(*(flags[-1:] or ("no_gap",)), upper=dp.get("upper_s"))}

    def _q_hypervisor(self) -> dict[str, q.Qualifier]:
        hv, out = self.hypervisor, {}
        for path, name in (
            ("downtime_s.hypervisor", "downtime_s"),
            ("duration_s.hypervisor", "total_time_s"),
            ("volume_bytes.hypervisor", "ram_transferred_bytes"),
        ):
            if hv is None:
                out[path] = q.absent(self._why("hypervisor", "no_hypervisor_data"))
            elif getattr(hv, name) is None:
                code = (hv.absent or {}).get(name, "not_reported")
                out[path] = q.absent(code, detail=f"status {hv.status}" if code == "not_completed" else "")
        return out

    def _q_anatomy(self) -> dict[str, q.Qualifier]:
        """The outage's phases (summary.json ``anatomy.phases.<phase>.seconds``): a bound or why absent."""
        out: dict[str, q.Qualifier] = {}
        for p in self.anatomy.phases if self.anatomy is not None else ():
            if p.seconds is not None:
                continue
            path = f"anatomy.phases.{p.key}.seconds"
            if p.lower_s is not None and p.upper_s is None:
                out[path] = q.censored(p.lower_s, ("records_end",), detail=p.why_absent or "")
            elif p.upper_s is not None:
                out[path] = q.at_most(p.upper_s, ("below_gap_threshold",), detail=p.why_absent or "")
            else:
                out[path] = q.absent("anatomy_mark_missing", text=p.why_absent or "")
        return out

    def _q_rtt(self) -> dict[str, q.Qualifier]:
        out: dict[str, q.Qualifier] = {}
        for phase in ("before", "during", "after"):
            st = _get(self.rtt, phase)
            if st is None:
                why = q.absent(self._why("rtt", "no_irtt"))
            elif st.median_ms is None:
                why = q.absent("no_probes") if not st.sent else q.absent("all_probes_lost", detail=f"{st.lost} probes")
            else:
                continue
            out[f"rtt_ms.{phase}.median"] = out[f"rtt_ms.{phase}.p99"] = why
        return out

    def _q_cross(self) -> dict[str, q.Qualifier]:
        out: dict[str, q.Qualifier] = {}
        c, stl, dp = self.cross, self.send_loss, self.downtime_packets
        no_data = q.absent(self._why("cross", "no_generator"))
        for name in ("offered_bps", "forwarded_bps", "lost_packets", "loss_ratio"):
            if c is None or self.rate_bps == 0:
                out[f"cross_traffic.{name}"] = no_data
            elif getattr(c, name) is None:
                code = "no_generator" if name == "offered_bps" or c.sent_packets is None else "no_sink"
                if name == "forwarded_bps" and c.received_packets == 0:
                    code = "no_packets_received"
                out[f"cross_traffic.{name}"] = q.absent(code)
            elif name in ("lost_packets", "loss_ratio") and "inconsistent_counts" in c.flags:
                out[f"cross_traffic.{name}"] = q.incomplete("inconsistent_counts")
        drops = c.sink_socket_drops if c is not None else None
        for name in ("migration_sent_packets", "migration_lost_packets", "outage_lost_packets"):
            path = f"cross_traffic.{name}"
            if stl is None:
                out[path] = q.absent(self._why("send_loss", "no_send_histograms"))
            elif name == "outage_lost_packets" and stl.outage is None:
                out[path] = q.absent("no_outage")
            elif name == "outage_lost_packets" and dp is not None and dp.downtime_s is None and dp.lower_s is not None:
                assert stl.outage is not None
                out[path] = q.censored(float(stl.outage.lost), _bound_flags(dp.flags), detail="over a bounded gap")
            elif drops and name != "migration_sent_packets":
                out[path] = q.incomplete("sink_socket_drops", detail=f"{drops} packets")
        return out

    def to_dict(self) -> dict[str, Any]:
        """The summary.json object: the headline metrics, ``qualifiers``, then ``details``."""
        hv, rtt, cross, ins = self.hypervisor, self.rtt, self.cross, self.instruments
        window = None
        if self.window is not None:
            window = {**_jsonable(self.window), "duration_s": self.window.duration_s}
        mig = _get(self.send_loss, "migration")
        quals = self.qualifiers()
        outage_lost = _get(_get(self.send_loss, "outage"), "lost")
        if _get(quals.get("cross_traffic.outage_lost_packets"), "state") == q.CENSORED:
            outage_lost = None  # a count over a bounded gap is a bound: carried in qualifiers
        out = {
            "status": self.status,
            "failure": self.failure,
            "failure_class": self.failure_class,
            "hv": self.hv,
            "mode": self.mode,
            "accel": self.accel,
            "rate_bps": self.rate_bps,
            "frame_bytes": self.frame_bytes,
            "router": self.router,
            "downtime_s": {
                "counters": _get(self.downtime_counters, "downtime_s"),
                "packets": _get(self.downtime_packets, "downtime_s"),
                "hypervisor": _get(hv, "downtime_s"),
            },
            "duration_s": {"link": _get(self.link, "duration_s"), "hypervisor": _get(hv, "total_time_s")},
            "volume_bytes": {"link": _get(self.link, "volume_bytes"), "hypervisor": _get(hv, "ram_transferred_bytes")},
            "rtt_ms": {p: _rtt(_get(rtt, p)) for p in ("before", "during", "after")},
            "cross_traffic": {
                "offered_bps": _get(cross, "offered_bps"),
                "forwarded_bps": _get(cross, "forwarded_bps"),
                "forwarded_counters_bps": _get(cross, "forwarded_counters_bps"),
                "sent_packets": _get(cross, "sent_packets"),
                "received_packets": _get(cross, "received_packets"),
                "lost_packets": _get(cross, "lost_packets"),
                "loss_ratio": _get(cross, "loss_ratio"),
                "gen_send_errors": _get(cross, "gen_send_errors"),
                "sink_socket_drops": _get(cross, "sink_socket_drops"),
                "duplicate_packets": _get(cross, "duplicate_packets"),
                "reordered_packets": _get(cross, "reordered_packets"),
                "migration_sent_packets": _get(mig, "sent"),
                "migration_lost_packets": _get(mig, "lost"),
                "outage_lost_packets": outage_lost,
            },
            "instruments": {
                "cpu_s": _get(ins, "cpu_s"),
                "total_cpu_s": _get(ins, "total_cpu_s"),
                "wall_s": _get(ins, "wall_s"),
                "wall_source": _get(ins, "wall_source"),
                "core_share": _get(ins, "core_share"),
                "dropped": _get(ins, "dropped") or {},
            },
            "dirty_rate": self.dirty_rate
            if self.dirty_rate is not None
            else {"requested_mb_s": None, "measured_mb_s": None, "why_absent": "failed"},
            **({"control_plane": self.control_plane} if self.control_plane is not None else {}),
            **({"churn": self.churn.to_dict()} if self.churn is not None else {}),
            **({"tcp": self.tcp} if self.tcp is not None else {}),
            **({"rr": self.rr} if self.rr is not None else {}),
            **({"udp": self.udp} if self.udp is not None else {}),
            **({"anatomy": self.anatomy.to_dict()} if self.anatomy is not None else {}),
            "qualifiers": {path: qual.to_dict() for path, qual in sorted(quals.items())},
            "details": {
                "summary_format_version": SUMMARY_FORMAT_VERSION,
                "run_status": self.run_status,
                "window": window,
                "downtime_counters": self.downtime_counters,
                "downtime_packets": self.downtime_packets,
                "total_lost_packets": self.total_lost_packets,
                "hypervisor": hv,
                "link": self.link,
                "rtt": rtt,
                "cross_traffic": cross,
                "send_time_loss": self.send_loss,
                "sampler": self.sampler,
                "instruments": ins,
                "clock": self.clock,
                **({"postcopy": self.postcopy} if self.postcopy is not None else {}),
                "notes": list(self.notes),
            },
        }
        return _jsonable(out)


def _bound_flags(flags: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(f for f in flags if f in q.LOWER_BOUND_FLAGS) or ("bound",)
