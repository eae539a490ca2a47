"""Route churn through the router (``CHURN=``; migrate.experiment.churn, docs/peering.md
"Route churn").

B flaps routes of a pool at a set rate; the router (bgpd, zebra, its FIB) takes each change and
passes it on to A, whose BIRD logs it (``rtr.ipv4 > added/removed <prefix>``).  From meta.json
``churn``, ``churn.tsv`` (what the orchestrator issued at B, per pacing tick) and A's log:

* ``issued_routes_s``: route changes made at B per second from the churn's start to the
  migration's start (the rate the router was under when QEMU measured its dirty rate);
* ``relayed_routes_s``: changes of the pool A received from the router per second over the same
  span: what the router's control plane kept up with;
* ``stall_ms``: the longest gap between two pool changes at A from the migration's start until
  the churn stopped: how long the router passed on no routing update at all (its control-plane
  outage as routes see it; at least the blackout).  Null with a reason when A logged none then.

Pure functions: arrays and log events in, a dataclass out.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from analysis.metrics.control_plane import LogEvent, learned_change
from migrate.core.rundir import CHURN_TSV

TSV_NAME = CHURN_TSV  # written by migrate.experiment.churn
TSV_COLUMNS = ("tick_start_ns", "tick_end_ns", "announced", "withdrawn", "behind")
#: seconds after the churn's start left out of the rates (the first changes queue behind the fill)
SETTLE_S = 0.5


@dataclass(frozen=True)
class ChurnFigures:
    """summary.json ``churn``."""

    requested_routes_s: float | None
    issued_routes_s: float | None
    relayed_routes_s: float | None
    relayed_ratio: float | None
    stall_ms: float | None
    stall_start_ns: int | None
    changes_issued: int
    changes_relayed: int
    span_s: float | None
    behind_max: int | None
    why_absent: dict[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        out = asdict(self)
        out["notes"] = list(self.notes)
        return out


def pool_of(meta_churn: dict[str, Any]) -> ipaddress.IPv4Network | None:
    """The churned network recorded in meta.json ``churn`` (None when absent or unreadable)."""
    try:
        net = ipaddress.ip_network(str(meta_churn.get("pool")))
    except ValueError:
        return None
    return net if isinstance(net, ipaddress.IPv4Network) else None


def in_pool(prefix: str, pool: ipaddress.IPv4Network | None) -> bool:
    """Whether ``prefix`` ("198.19.0.5/32") lies in ``pool``."""
    if pool is None:
        return False
    try:
        net = ipaddress.ip_network(prefix, strict=False)
    except ValueError:
        return False
    return isinstance(net, ipaddress.IPv4Network) and net.subnet_of(pool)


def relayed_times(events: Sequence[LogEvent], pool: ipaddress.IPv4Network | None) -> np.ndarray:
    """Times (ns) of the pool's route changes a peer received from the router (its BGP
    protocol's imports: ``rtr.ipv4 > added|removed``)."""
    out = [e.t_ns for e in events if (c := learned_change(e)) is not None and in_pool(c[1], pool)]
    return np.asarray(out, dtype=np.int64)


def churn_figures(
    meta_churn: dict[str, Any],
    ticks: np.ndarray,
    observer_events: Sequence[LogEvent] | None,
    migration_start_ns: int | None,
) -> ChurnFigures:
    """The figures of one run.  ``ticks``: churn.tsv as an (n, 5) int array (tick start, tick end,
    announced, withdrawn, behind); ``observer_events``: A's parsed log (None: missing)."""
    why: dict[str, str] = {}
    notes: list[str] = []
    requested = meta_churn.get("requested_routes_s")
    started, stopped = meta_churn.get("started_ns"), meta_churn.get("stopped_ns")
    pool = pool_of(meta_churn)
    t = np.asarray(ticks, dtype=np.int64).reshape(-1, 5)
    issued_n = int(t[:, 2].sum() + t[:, 3].sum())
    if requested == 0:
        why.update(issued_routes_s="no_churn_requested", relayed_routes_s="no_churn_requested",
                   stall_ms="no_churn_requested")  # fmt: skip
    if started is None:
        why.setdefault("issued_routes_s", "churn_not_started")
    lo = None if started is None else int(started + SETTLE_S * 1e9)
    hi = migration_start_ns if migration_start_ns is not None else stopped
    span_s = (hi - lo) / 1e9 if lo is not None and hi is not None and hi > lo else None
    if span_s is None and "issued_routes_s" not in why:
        why["issued_routes_s"] = why["relayed_routes_s"] = "no_span_before_migration"
    issued = relayed = None
    if span_s is not None and "issued_routes_s" not in why:
        inside = (t[:, 0] >= lo) & (t[:, 1] <= hi)
        issued = float(t[inside, 2].sum() + t[inside, 3].sum()) / span_s
    times = relayed_times(observer_events, pool) if observer_events is not None else np.zeros(0, np.int64)
    if observer_events is None:
        why.setdefault("relayed_routes_s", "observer_log_missing")
        why.setdefault("stall_ms", "observer_log_missing")
    if pool is None:
        why.setdefault("relayed_routes_s", "pool_not_recorded")
        why.setdefault("stall_ms", "pool_not_recorded")
    if span_s is not None and "relayed_routes_s" not in why:
        relayed = float(((times >= lo) & (times <= hi)).sum()) / span_s
    stall = stall_at = None
    if "stall_ms" not in why:
        if migration_start_ns is None or stopped is None:
            why["stall_ms"] = "no_window"
        else:
            after = times[(times >= migration_start_ns) & (times <= stopped)]
            pts = np.concatenate(([migration_start_ns], after, [stopped]))
            gaps = np.diff(pts)
            if after.size == 0:
                why["stall_ms"] = "nothing_relayed_after_migration_start"
                notes.append("A received no churned route from the router after the migration began")
            else:
                i = int(np.argmax(gaps))
                stall, stall_at = float(gaps[i]) / 1e6, int(pts[i])
                if i == gaps.size - 1:
                    notes.append("the longest churn stall at A was still open when the churn stopped (a lower bound)")
    behind = meta_churn.get("behind_max")
    if behind:
        notes.append(f"the churn fell behind its pace by up to {behind} changes (missed, not burst out)")
    ratio = relayed / issued if relayed is not None and issued else None
    return ChurnFigures(
        requested_routes_s=requested, issued_routes_s=_r(issued), relayed_routes_s=_r(relayed),
        relayed_ratio=_r(ratio, 4), stall_ms=_r(stall), stall_start_ns=stall_at, changes_issued=issued_n,
        changes_relayed=int(times.size), span_s=_r(span_s), behind_max=behind, why_absent=why, notes=tuple(notes),
    )  # fmt: skip


def _r(v: float | None, nd: int = 3) -> float | None:
    return None if v is None else round(v, nd)
