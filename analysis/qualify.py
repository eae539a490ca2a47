"""Qualifiers of a run's figures: absent (null with a reason), censored (null with a bound) or
incomplete (a value computed from incomplete instrument records).

A figure that a method could not find is not 0: it is None, and its qualifier says why (and, where
the method allows it, how large it could have been without being seen: ``upper``).  A figure of
which only a bound is known (a stall that began before the trace, traffic that never came back) is
not a measurement either: the value is None and ``lower`` carries the bound (or, for a figure
below an instrument's resolution, ``upper``: it lies in (0, upper]).  summary.json keeps
these in ``qualifiers``, keyed by the headline path (``downtime_s.counters``); see
docs/data-formats.md."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

ABSENT = "absent"
CENSORED = "censored"
INCOMPLETE = "incomplete"
STATES = (ABSENT, CENSORED, INCOMPLETE)

#: estimator flags that make a found figure a lower bound (analysis.metrics.downtime)
LOWER_BOUND_FLAGS = (
    "clipped_start",
    "clipped_end",
    "open_start",
    "open_end",
    "gaps_dropped",
    "gaps_dropped_unknown",
    "no_gap_threshold",
)

#: one line per reason code, for tables and summary.json ``text``
REASON_TEXT: dict[str, str] = {
    "no_stall": "no stall longer than θ found",
    "no_gap": "no gap longer than θ found",
    "no_cross_traffic": "no cross-traffic (rate 0)",
    "no_window": "no migration window (no migrate action recorded)",
    "no_counters": "no B eth0 counters",
    "no_samples_in_span": "no counter samples in the migration span",
    "no_sink": "no sink.json",
    "no_packets_received": "the sink received no cross-traffic packet",
    "gaps_dropped": "the sink's gap list was full (gaps_dropped): gaps in the window are missing",
    "gaps_dropped_unknown": "sink.json does not say whether its gap list was full (no gaps_dropped): gaps in the"
    " window may be missing",
    "no_gap_threshold": "sink.json has no gap_threshold_ns: a silence before the generator stopped could not be"
    " judged (the traffic may never have come back)",
    "clipped_start": "the outage began before the analysed span",
    "clipped_end": "the outage lasted past the analysed span",
    "open_start": "no traffic seen before the outage",
    "open_end": "traffic never came back",
    "failed": "its computation failed (see notes)",
    "no_hypervisor_data": "no hypervisor record",
    "not_completed": "the migration did not complete",
    "qemu_not_computed": "QEMU reported 0 (completed before it computed the figure)",
    "criu_pages_written_missing": "CRIU did not report pages_written for every round",
    "not_reported": "not reported",
    "no_link_activity": "no migration traffic above the noise threshold on R1 mig0",
    "no_link_counters": "no R1 mig0 counters",
    "below_resolution": "the migration stream fit within one counter sampling interval",
    "no_probes": "no probe sent in this phase",
    "all_probes_lost": "every probe of this phase was lost",
    "no_irtt": "no irtt trace",
    "no_generator": "no gen.json",
    "no_send_histograms": "no per-ms send histograms (gen.json sent_hist_ms / sink.json tx_hist_ms)",
    "sent_hist_dropped": "vrgen's send histogram overflowed (sent_hist_dropped)",
    "tx_hist_dropped": "vrsink's send-time histogram overflowed (tx_hist_dropped)",
    "no_outage": "no packet gap (no outage to count)",
    "sink_socket_drops": "the sink's socket dropped packets (counted as lost by sequence numbers and send time)",
    "inconsistent_counts": "the sink received more packets than the generator sent",
    "no_instrument_cpu": "meta.json has no instruments_cpu_s",
    "no_wall_span": "no wall span for the instruments",
    "records_end": "the records end before the outage was seen to end",
    "below_gap_threshold": "no sink gap above its threshold: shorter than the threshold",
    "anatomy_mark_missing": "a mark of the outage's timeline was not recorded",
    "dirty_rate_not_recorded": "no dirty-rate measurement recorded (the run ended before it, or predates it)",
    "dirty_rate_unsupported": "this hypervisor driver does not measure the dirty rate (HV=kvm does)",
    "dirty_rate_failed": "the dirty-rate measurement failed (see notes)",
    "dirty_rate_unfinished": "QEMU did not report the dirty-rate measurement finished in time",
    "below_rate_resolution": "below QEMU's dirty-rate resolution of 1 MB/s (it reported 0)",
}


@dataclass(frozen=True)
class Qualifier:
    """Why a headline figure is None (absent, censored) or not to be trusted fully (incomplete).

    ``lower``: the true value is at least this (censored); ``upper``: at most this (an absent
    figure that could have gone unseen up to this size, or the upper end of a bound)."""

    state: str
    reasons: tuple[str, ...]
    text: str
    lower: float | None = None
    upper: float | None = None

    def __post_init__(self) -> None:
        if self.state not in STATES:
            raise ValueError(f"qualifier state {self.state!r} is not one of {', '.join(STATES)}")

    def to_dict(self) -> dict[str, Any]:
        """The summary.json form."""
        return {
            "state": self.state,
            "reasons": list(self.reasons),
            "text": self.text,
            "lower": self.lower,
            "upper": self.upper,
        }


def reason_text(codes: Iterable[str], detail: str = "") -> str:
    """One line for ``codes`` (known codes get their sentence; unknown ones are shown as is)."""
    text = "; ".join(REASON_TEXT.get(c, c) for c in codes)
    return f"{text} ({detail})" if detail else text


def absent(*codes: str, detail: str = "", upper: float | None = None, text: str = "") -> Qualifier:
    """A figure that is None because ``codes`` (``text`` replaces the generated sentence)."""
    return Qualifier(ABSENT, tuple(codes), text or reason_text(codes, detail), None, upper)


def censored(lower: float, codes: Iterable[str], detail: str = "") -> Qualifier:
    """A figure that is None because only a lower bound is known."""
    codes = tuple(codes)
    return Qualifier(CENSORED, codes, reason_text(codes, detail), lower, None)


def at_most(upper: float, codes: Iterable[str], detail: str = "") -> Qualifier:
    """A figure that is None because only an upper bound is known (it lies in (0, upper])."""
    codes = tuple(codes)
    return Qualifier(CENSORED, codes, reason_text(codes, detail), None, upper)


def incomplete(*codes: str, detail: str = "") -> Qualifier:
    """A figure that has a value computed from incomplete instrument records."""
    return Qualifier(INCOMPLETE, tuple(codes), reason_text(codes, detail))


def from_dict(d: Any) -> Qualifier | None:
    """Qualifier from its summary.json form (None for anything else)."""
    if not isinstance(d, Mapping) or d.get("state") not in STATES:
        return None
    reasons = d.get("reasons") if isinstance(d.get("reasons"), list) else []
    lower, upper = d.get("lower"), d.get("upper")
    return Qualifier(
        d["state"],
        tuple(str(r) for r in reasons),
        str(d.get("text") or ""),
        float(lower) if isinstance(lower, int | float) else None,
        float(upper) if isinstance(upper, int | float) else None,
    )


def short(q: Mapping[str, Any] | Qualifier | None, scale: float = 1.0, fmt: str = ".3f") -> str:
    """A figure's cell when it has a qualifier: '>= x (codes)', '– (codes)' or '(incomplete: codes)'."""
    if q is None:
        return "–"
    if not isinstance(q, Qualifier):
        q = from_dict(q)
        if q is None:
            return "–"
    codes = ", ".join(q.reasons)
    if q.state == CENSORED and q.lower is not None:
        return f">= {format(q.lower * scale, fmt)} ({codes})"
    if q.state == CENSORED and q.upper is not None:
        return f"<= {format(q.upper * scale, fmt)} ({codes})"
    if q.state == ABSENT:
        return f"– ({codes})"
    return f"(incomplete: {codes})"
