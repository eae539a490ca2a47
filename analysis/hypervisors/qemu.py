"""What QEMU and the orchestrator say about the migration (query-migrate replies and actions)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from analysis.metrics.window import Window


@dataclass(frozen=True)
class HypervisorFigures:
    """QEMU's own figures from the final src query-migrate reply, and orchestrator timings."""

    status: str | None
    downtime_s: float | None
    total_time_s: float | None
    setup_time_s: float | None
    ram_transferred_bytes: int | None
    ram_total_bytes: int | None
    command_to_end_s: float | None
    stop_to_cont_s: float | None
    reply_source: str | None
    #: DRIVER=libvirt: libvirt's further job statistics (analysis.hypervisors.libvirt.libvirt_details); None for QMP
    libvirt: dict[str, Any] | None = None
    #: why a figure above is None: field name -> reason code (analysis.qualify.REASON_TEXT)
    absent: dict[str, str] | None = None


def _computed(reply: Mapping[str, Any]) -> bool:
    """A completed reply whose times QEMU has computed (QEMU 7.2 reports 'completed' before it
    computes total-time and downtime: a query in between reads 0 for both)."""
    v = reply.get("total-time")
    return isinstance(v, int | float) and v > 0


def final_reply(samples: list[Mapping[str, Any]], fallback: Mapping[str, Any] | None = None) -> tuple[dict, str | None]:
    """The last src query-migrate reply with status completed (preferring the last one whose
    ``total-time`` QEMU has computed), else the last src reply of any status, else ``fallback``
    (meta.json hypervisor.final); returns (reply, where it came from)."""
    src = sorted(
        (s for s in samples if s.get("side") == "src" and isinstance(s.get("reply"), dict)),
        key=lambda s: s.get("t_ns", 0),
    )
    done = [s["reply"] for s in src if s["reply"].get("status") == "completed"]
    settled = [r for r in done if _computed(r)]
    if settled:
        return settled[-1], "qmp_samples"
    if fallback and fallback.get("status") == "completed" and (_computed(fallback) or not done):
        return dict(fallback), "meta"
    if done:
        return done[-1], "qmp_samples"
    if src:
        return src[-1]["reply"], "qmp_samples"
    return (dict(fallback), "meta") if fallback else ({}, None)


def _ms(reply: Mapping[str, Any], key: str) -> float | None:
    v = reply.get(key)
    return float(v) / 1e3 if isinstance(v, int | float) else None


def _int(d: Mapping[str, Any], key: str) -> int | None:
    v = d.get(key)
    return int(v) if isinstance(v, int | float) else None


def hypervisor_figures(
    samples: list[Mapping[str, Any]], window: Window | None, fallback: Mapping[str, Any] | None = None
) -> HypervisorFigures | None:
    """QEMU and orchestrator figures.

    Definitions: downtime_s = QEMU ``downtime`` (ms → s) of the last src reply with status
    completed; total_time_s = its ``total-time`` (QEMU's migration duration); setup_time_s = its
    ``setup-time``; ram_transferred_bytes / ram_total_bytes = its ``ram.transferred`` / ``ram.total``.
    The time fields are only taken from a completed reply (None otherwise, reason
    ``not_completed``); a completed reply whose ``total-time`` is 0 was read before QEMU computed
    its times (QEMU 7.2): its total-time and downtime are None (reason ``qemu_not_computed``),
    never 0 s.  A downtime of 0 in a computed reply is QEMU's figure (< 1 ms at its 1 ms
    resolution).  The ram figures come from the final reply (the completed one if any, else the
    last: a failed migration's partial volume).  ``absent`` maps each None time field to its
    reason.
    command_to_end_s = migrate action → end of the migration as seen by the orchestrator (src
    MIGRATION completed/failed event, else terminal reply); stop_to_cont_s (stop-and-copy only) =
    ``stop`` action → destination ``cont`` action: how long the guest was paused.
    None when there is neither a reply nor a window."""
    reply, source = final_reply(samples, fallback)
    if not reply and window is None:
        return None
    completed = reply.get("status") == "completed"
    computed = completed and _computed(reply)
    ram = reply.get("ram") if isinstance(reply.get("ram"), dict) else {}
    cmd_end = None
    stop_cont = None
    if window is not None:
        if window.completed_ns is not None and window.end_source != "last-sample":
            cmd_end = (window.completed_ns - window.migrate_ns) / 1e9
        if window.stop_ns is not None and window.cont_ns is not None:
            stop_cont = (window.cont_ns - window.stop_ns) / 1e9
    figures = {
        "downtime_s": _ms(reply, "downtime") if computed else None,
        "total_time_s": _ms(reply, "total-time") if computed else None,
        "setup_time_s": _ms(reply, "setup-time") if completed else None,
    }

    def reason(field: str) -> str:
        if not completed:
            return "not_completed" if reply else "no_hypervisor_data"
        return "qemu_not_computed" if field != "setup_time_s" and not computed else "not_reported"

    absent = {k: reason(k) for k, v in figures.items() if v is None}
    return HypervisorFigures(
        status=reply.get("status"),
        **figures,
        ram_transferred_bytes=_int(ram, "transferred"),
        ram_total_bytes=_int(ram, "total"),
        command_to_end_s=cmd_end,
        stop_to_cont_s=stop_cont,
        reply_source=source,
        absent=absent or None,
    )


@dataclass(frozen=True)
class PostcopyEffect:
    """Whether a run asked for post-copy (POSTCOPY=1) actually ran in post-copy: QEMU switches
    only when ``migrate-start-postcopy`` arrives while RAM is still being sent; a migration that
    converges first completes in pre-copy, and its figures are pre-copy's."""

    entered: bool  # a src MIGRATION event or query-migrate reply said "postcopy-active"
    postcopy_bytes: int | None  # QEMU's ram.postcopy-bytes of the final reply (None: not reported)

    def to_dict(self) -> dict[str, Any]:
        return {"requested": True, "entered": self.entered, "postcopy_bytes": self.postcopy_bytes}


def postcopy_effect(
    events: list[Mapping[str, Any]], samples: list[Mapping[str, Any]], final: Mapping[str, Any] | None
) -> PostcopyEffect:
    """From QEMU's own records of the source (events, query-migrate replies, the final reply)."""
    seen = any(
        (e.get("data") or {}).get("status") == "postcopy-active" for e in events if e.get("side", "src") == "src"
    ) or any((s.get("reply") or {}).get("status") == "postcopy-active" for s in samples if s.get("side") == "src")
    ram = (final or {}).get("ram") if isinstance((final or {}).get("ram"), Mapping) else {}
    return PostcopyEffect(seen, _int(ram, "postcopy-bytes"))
