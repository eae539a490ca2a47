"""The known interruptions of a calibration (``make calibrate``): an event's two edges, each the
bracket of CLOCK_REALTIME ns around one command, and the true duration and uncertainty they give
(analysis.metrics.calibration measures the estimators against them,
analysis.metrics.calibration_control the routing sessions)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Edge:
    """One command that changed the data path: CLOCK_REALTIME ns right before and right after it."""

    before_ns: int
    after_ns: int

    @property
    def mid_ns(self) -> int:
        """The edge's date: the middle of its bracket."""
        return self.before_ns + (self.after_ns - self.before_ns) // 2

    @property
    def width_ns(self) -> int:
        """Bracket width (how long the command took, as seen by the orchestrator)."""
        return self.after_ns - self.before_ns


@dataclass(frozen=True)
class Event:
    """One known interruption: a cut or a pause of nominal length ``nominal_ms``."""

    index: int
    kind: str
    nominal_ms: float
    rep: int
    start: Edge
    end: Edge
    #: when the orchestrator saw B receive again after the event (``forwarding-observed``); None
    #: in a record without it
    recovered_ns: int | None = None

    @property
    def true_s(self) -> float:
        """Duration between the edges' midpoints."""
        return (self.end.mid_ns - self.start.mid_ns) / 1e9

    @property
    def uncertainty_s(self) -> float:
        """Largest possible difference between ``true_s`` and the real duration."""
        return (self.start.width_ns + self.end.width_ns) / 2e9
