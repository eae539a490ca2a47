"""Which clocks a run's figures rest on, and how well they agree.

On the embedded testbed every instrument reads this machine's one ``CLOCK_REALTIME``. On a lab
(``TESTBED=``) each host has its own clock: the orchestrator measures every host's offset at the
start and the end of the run (round-trip bounded, meta.json ``clock.hosts``) and merges the
per-host counters with the mean offsets (meta.json ``lab.offsets_ns``).  A figure that combines
timestamps of two hosts (the migration window from QMP events against B's packet arrivals or a
host's counters) is uncertain by those offsets' uncertainty; the packet downtime itself is an
inter-arrival gap at B and uses B's clock alone."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ClockFigures:
    """``testbed``: "embedded" (one clock) or "lab"; per-host offset and uncertainty (ns,
    host minus orchestrator), whether each host said its clock is synchronised (None: unknown),
    and the largest uncertainty of any cross-host figure (0 on one clock; None if a lab host's
    offset was not measured)."""

    testbed: str
    offsets_ns: dict[str, int] = field(default_factory=dict)
    uncertainty_ns: dict[str, int] = field(default_factory=dict)
    synchronised: dict[str, bool | None] = field(default_factory=dict)
    max_uncertainty_ns: int | None = 0
    packet_downtime_clock: str = "B (inter-arrival gaps at the sink)"


def clock_figures(meta: dict[str, Any]) -> ClockFigures:
    """The clock figures of a run from its meta.json."""
    tb = meta.get("testbed") or {}
    if not tb.get("inventory"):
        return ClockFigures("embedded")
    lab = meta.get("lab") or {}
    offs = lab.get("offsets_ns") or {}
    hosts = (meta.get("clock") or {}).get("hosts") or {}
    roles = sorted(set(hosts) | set(offs))
    sync = {r: (hosts.get(r, {}).get("sync") or {}).get("synchronised") for r in roles}
    offsets = {r: int(offs[r]["offset"]) for r in roles if r in offs}
    unc = {r: int(offs[r]["uncertainty"]) for r in roles if r in offs}
    missing = [r for r in roles if r not in offs]
    return ClockFigures(
        "lab",
        offsets,
        unc,
        sync,
        None if missing or not unc else max(unc.values()),
    )
