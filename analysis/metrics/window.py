"""The migration window: when the migration started and ended, from the orchestrator's and QEMU's records."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

TERMINAL = ("completed", "failed", "cancelled")


@dataclass(frozen=True)
class Window:
    """Migration window and the marks around it (all CLOCK_REALTIME ns; None = not recorded).

    ``end_source`` says where ``end_ns`` came from: "cont" (stop-and-copy: destination cont),
    "event" (src MIGRATION event), "sample" (src query-migrate reply), "last-sample" (no terminal
    status was ever seen: the last src reply, flagged), "action" (a driver without QMP: its
    ``migration-end`` action) or None (no end)."""

    start_ns: int
    end_ns: int | None
    migrate_ns: int
    stop_ns: int | None
    completed_ns: int | None
    end_status: str | None
    cont_ns: int | None
    announce_ns: int | None
    end_source: str | None
    traffic_stop_ns: int | None

    @property
    def duration_s(self) -> float | None:
        """end − start in s."""
        return None if self.end_ns is None else (self.end_ns - self.start_ns) / 1e9


def _first(actions: Iterable[Mapping[str, Any]], name: str, after_ns: int | None = None, side: str | None = None):
    for a in actions:
        if a.get("action") != name or not isinstance(a.get("t_ns"), int):
            continue
        if side is not None and a.get("side", side) != side:
            continue
        if after_ns is None or a["t_ns"] >= after_ns:
            return int(a["t_ns"])
    return None


def _terminal(
    events: Iterable[Mapping[str, Any]], samples: Iterable[Mapping[str, Any]], after_ns: int
) -> tuple[int | None, str | None, str | None]:
    for ev in sorted(events, key=lambda e: e.get("t_ns", 0)):
        status = (ev.get("data") or {}).get("status")
        if ev.get("side") == "src" and ev.get("event") == "MIGRATION" and status in TERMINAL:
            if ev.get("t_ns", 0) >= after_ns:
                return int(ev["t_ns"]), status, "event"
    src = sorted((s for s in samples if s.get("side") == "src"), key=lambda s: s.get("t_ns", 0))
    for s in src:
        status = (s.get("reply") or {}).get("status")
        if status in TERMINAL and s.get("t_ns", 0) >= after_ns:
            return int(s["t_ns"]), status, "sample"
    if src and src[-1].get("t_ns", 0) >= after_ns:
        return int(src[-1]["t_ns"]), (src[-1].get("reply") or {}).get("status"), "last-sample"
    return None, None, None


def _end_action(actions: Iterable[Mapping[str, Any]], after_ns: int) -> tuple[int | None, str | None, str | None]:
    """The first ``migration-end`` action (drivers without QMP record it with a ``status``)."""
    for a in actions:
        if a.get("action") == "migration-end" and isinstance(a.get("t_ns"), int) and a["t_ns"] >= after_ns:
            return int(a["t_ns"]), a.get("status"), "action"
    return None, None, None


def migration_window(
    actions: list[Mapping[str, Any]],
    events: list[Mapping[str, Any]],
    samples: list[Mapping[str, Any]],
    mode: str | None,
) -> Window | None:
    """The migration window, or None when no ``migrate`` action was recorded.

    start = t_ns of the ``migrate`` action; for stop-and-copy (mode "stopcopy") the ``stop`` action
    that precedes it.  end = for stop-and-copy the destination's ``cont`` action when recorded;
    otherwise the first src-side ``MIGRATION`` event whose data.status is completed/failed/cancelled,
    else the first src query-migrate reply with such a status, else the last src reply (flagged
    by ``end_source`` = "last-sample"); without any QMP record, the first ``migration-end``
    action (``end_source`` = "action", its ``status``)."""
    migrate_ns = _first(actions, "migrate")
    if migrate_ns is None:
        return None
    stop_ns = None
    if mode == "stopcopy":
        stops = [int(a["t_ns"]) for a in actions if a.get("action") == "stop" and isinstance(a.get("t_ns"), int)]
        before = [t for t in stops if t <= migrate_ns]
        stop_ns = max(before) if before else None
    start_ns = stop_ns if stop_ns is not None else migrate_ns
    completed_ns, status, source = _terminal(events, samples, migrate_ns)
    if completed_ns is None:  # no QMP records (e.g. HV=criu): the driver's migration-end action
        completed_ns, status, source = _end_action(actions, migrate_ns)
    cont_ns = _first(actions, "cont", migrate_ns, side="dst")
    announce_ns = _first(actions, "announce-self", migrate_ns)
    end_ns = completed_ns
    if mode == "stopcopy" and cont_ns is not None:
        end_ns, source = cont_ns, "cont"
    return Window(
        start_ns=start_ns,
        end_ns=end_ns,
        migrate_ns=migrate_ns,
        stop_ns=stop_ns,
        completed_ns=completed_ns,
        end_status=status,
        cont_ns=cont_ns,
        announce_ns=announce_ns,
        end_source=source,
        traffic_stop_ns=_first(actions, "traffic-stop", migrate_ns),
    )


MARGIN_S = 2.0


@dataclass(frozen=True)
class Spans:
    """Where migration effects are searched for and how far they may extend (ns).

    search = [start, min(end + margin, traffic-stop)): a stall/gap/transfer must overlap it.
    clip = [start − margin, search end]: anything reaching beyond is cut there and flagged."""

    search_lo_ns: int
    search_hi_ns: int
    clip_lo_ns: int
    clip_hi_ns: int


def spans(window: Window, margin_s: float = MARGIN_S, recovered_ns: int | None = None) -> Spans | None:
    """Search and clip spans for ``window`` (None when the migration has no end).

    ``recovered_ns``: when the routing control plane was whole again after the migration (the
    last session re-established, the peers' routes back; PEERING runs): the search then reaches
    ``margin_s`` past it too, so that an outage prolonged by the protocols' reconvergence is
    measured whole instead of clipped at end + margin."""
    if window.end_ns is None:
        return None
    margin_ns = int(margin_s * 1e9)
    hi = max(window.end_ns, recovered_ns or 0) + margin_ns
    if window.traffic_stop_ns is not None and window.traffic_stop_ns > window.end_ns:
        hi = min(hi, window.traffic_stop_ns)
    return Spans(window.start_ns, hi, window.start_ns - margin_ns, hi)
