"""The metrics of one run as a frozen dataclass, and its summary.json form."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from analysis.counters import SamplerHealth
from analysis.cross import CrossTraffic
from analysis.downtime import CountersDowntime, PacketsDowntime
from analysis.hypervisor import HypervisorFigures
from analysis.link import LinkActivity
from analysis.rtt import RttPhases, RttStats
from analysis.sendloss import SendTimeLoss
from analysis.window import Window

SUMMARY_FORMAT_VERSION = 1


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
    """Everything analysis computes for one run (None = not available; ``notes`` say why)."""

    status: str
    failure: str | None
    hv: str | None
    mode: str | None
    accel: str | None
    rate_bps: float | None
    frame_bytes: int | None
    run_status: str | None = None
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
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The summary.json object: the headline metrics, then ``details``."""
        hv, rtt, cross = self.hypervisor, self.rtt, self.cross
        window = None
        if self.window is not None:
            window = {**_jsonable(self.window), "duration_s": self.window.duration_s}
        out = {
            "status": self.status,
            "failure": self.failure,
            "hv": self.hv,
            "mode": self.mode,
            "accel": self.accel,
            "rate_bps": self.rate_bps,
            "frame_bytes": self.frame_bytes,
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
                "lost_packets": _get(cross, "lost_packets"),
                "loss_ratio": _get(cross, "loss_ratio"),
                "migration_sent_packets": _get(_get(self.send_loss, "migration"), "sent"),
                "migration_lost_packets": _get(_get(self.send_loss, "migration"), "lost"),
                "outage_lost_packets": _get(_get(self.send_loss, "outage"), "lost"),
            },
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
                "notes": list(self.notes),
            },
        }
        return _jsonable(out)
