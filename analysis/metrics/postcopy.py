"""Post-copy's price: what the forwarded traffic pays after the switch-over.

Post-copy shortens the blackout (the vCPUs stop only while the device state moves), but the
guest then runs on the destination while its memory is still on the source: every first touch of
a page not yet copied is a page fault served over the migration link, and QEMU's
``postcopy-blocktime`` (destination, capability ``postcopy-blocktime``) totals the time vCPUs
spent blocked on them.  What the router's traffic sees is measured here, beside the blackout:

- the post-copy phase: from the destination's RESUME after the source reported
  ``postcopy-active`` to the source's ``completed``;
- RTT of the probes sent in the ``window_s`` after that RESUME, against the probes of the same
  length of time before the migration started;
- cross-traffic loss by send time in the same window (:mod:`analysis.metrics.sendloss`).

Pure: events, samples, probe arrays and loss per ms in; a :class:`PostcopyPrice` out.  A figure
whose source is missing is None with its reason in ``why_absent``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from analysis.metrics.rtt import RttStats, rtt_stats
from analysis.metrics.sendloss import LossPerMs, SentLost, between

#: seconds after the destination resumed over which the price is measured
WINDOW_S = 2.0


@dataclass(frozen=True)
class PostcopyPrice:
    """Post-copy's blackout and what the traffic paid after it (None: see ``why_absent``)."""

    window_s: float
    switchover_ns: int | None  # the source's first postcopy-active
    resume_ns: int | None  # the destination's RESUME after it
    completed_ns: int | None  # the source's completed after it
    phase_s: float | None  # resume -> completed: the guest runs on R2 while pages are pulled
    blackout_s: float | None  # QEMU's downtime (source, ms -> s)
    blocktime_ms: float | None  # QEMU's postcopy-blocktime (destination): vCPU time blocked on page faults
    vcpu_blocktime_ms: list[float] | None  # per vCPU
    rtt_before: RttStats | None  # probes sent in the window_s before the migration started
    rtt_after: RttStats | None  # probes sent in the window_s after the resume
    loss_after: SentLost | None  # cross-traffic sent in the window_s after the resume, and lost
    why_absent: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (nested dataclasses as dicts)."""
        return asdict(self)


def _t(x: Mapping[str, Any]) -> int | None:
    v = x.get("t_ns")
    return int(v) if isinstance(v, int) else None


def _first_status(events: Sequence[Mapping[str, Any]], samples: Sequence[Mapping[str, Any]], side: str,
                  status: str, after_ns: int | None = None) -> int | None:  # fmt: skip
    """Earliest time ``side`` reported migration ``status`` (a MIGRATION event or a query-migrate reply)."""
    times = [
        _t(e) for e in events
        if e.get("side", "src") == side and e.get("event") == "MIGRATION"
        and (e.get("data") or {}).get("status") == status
    ] + [
        _t(s) for s in samples
        if s.get("side") == side and isinstance(s.get("reply"), dict) and s["reply"].get("status") == status
    ]  # fmt: skip
    ok = [t for t in times if t is not None and (after_ns is None or t >= after_ns)]
    return min(ok) if ok else None


def _blocktime(samples: Sequence[Mapping[str, Any]]) -> tuple[float | None, list[float] | None]:
    """The last destination reply's postcopy-blocktime and postcopy-vcpu-blocktime (ms)."""
    for s in sorted((s for s in samples if s.get("side") == "dst"), key=lambda s: s.get("t_ns", 0), reverse=True):
        reply = s.get("reply") or {}
        if isinstance(reply.get("postcopy-blocktime"), int | float):
            vcpu = reply.get("postcopy-vcpu-blocktime")
            per = [float(v) for v in vcpu] if isinstance(vcpu, list) else None
            return float(reply["postcopy-blocktime"]), per
    return None, None


def postcopy_price(
    events: Sequence[Mapping[str, Any]],
    samples: Sequence[Mapping[str, Any]],
    migration_start_ns: int | None,
    blackout_s: float | None,
    probe_send_ns: np.ndarray | None,
    probe_rtt_ns: np.ndarray | None,
    loss: LossPerMs | None,
    window_s: float = WINDOW_S,
) -> PostcopyPrice:
    """The price of a POSTCOPY=1 run (QMP's events and samples, the irtt probes, loss per ms)."""
    why: dict[str, str] = {}
    sw = _first_status(events, samples, "src", "postcopy-active")
    resume = done = phase = None
    if sw is None:
        why["switchover"] = "the source never reported postcopy-active: the migration ended in pre-copy"
    else:
        resumes = [_t(e) for e in events if e.get("side") == "dst" and e.get("event") == "RESUME"]
        resumes = [t for t in resumes if t is not None and t >= sw]
        resume = min(resumes) if resumes else None
        if resume is None:
            why["resume"] = "no RESUME event from the destination after the switch-over"
        done = _first_status(events, samples, "src", "completed", sw)
        if done is None:
            why["completed"] = "the source never reported completed after the switch-over"
        if resume is not None and done is not None:
            phase = max(0.0, (done - resume) / 1e9)
    block, per_vcpu = _blocktime(samples)
    if block is None:
        why["blocktime"] = "no destination query-migrate reply carried postcopy-blocktime"
    rtt_before = rtt_after = None
    w_ns = int(window_s * 1e9)
    if probe_send_ns is None or probe_rtt_ns is None:
        why["rtt"] = "no irtt probes"
    else:
        t = np.asarray(probe_send_ns, dtype=np.int64)
        r = np.asarray(probe_rtt_ns, dtype=np.float64)
        if migration_start_ns is not None:
            sel = (t >= migration_start_ns - w_ns) & (t < migration_start_ns)
            rtt_before = rtt_stats(r[sel]) if sel.any() else None
        if resume is not None:
            sel = (t >= resume) & (t < resume + w_ns)
            rtt_after = rtt_stats(r[sel]) if sel.any() else None
        if rtt_after is None and resume is not None:
            why["rtt"] = "no probe was sent in the window after the resume"
    loss_after = None
    if loss is None:
        why["loss"] = "no cross-traffic loss record (no builtin generator or no traffic)"
    elif resume is not None:
        loss_after = between(loss, resume, resume + w_ns)
    if blackout_s is None:
        why["blackout"] = "QEMU reported no downtime"
    return PostcopyPrice(window_s, sw, resume, done, phase, blackout_s, block, per_vcpu, rtt_before, rtt_after,
                         loss_after, why)  # fmt: skip
