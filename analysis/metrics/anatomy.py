"""The anatomy of a migration's outage: one timeline on the common clock, and the data-plane
outage broken into its phases (docs/metrics.md "Outage anatomy").

Paper 004 (Sec. 3) asks for the control-plane downtime to be minimised; the hypervisors report
only their own vCPU pause, while the outage the forwarded traffic sees also contains the time
the network needs to reach the router again and, when a routing session fell, the routing
protocols' reconvergence.  The phases are:

* **vCPU blackout**: the source stops the router (QMP ``STOP`` on R1, libvirt's *suspended*
  lifecycle event, the start of CRIU's final dump, xl's "guest has suspended") until the
  destination resumes it (QMP ``RESUME`` on R2, libvirt's *resumed*, the end of CRIU's restore,
  xl's resumed line);
* **reattachment**: resume until the first cross-traffic packet the sink receives after it (the
  router forwards again, from R2);
* **reconvergence**: that first packet until the cross-traffic is back at its offered rate: the
  end of the last gap *with lost packets* that follows within ``settle_s`` of the previous one,
  or starts before the last control-plane session is up again and the routes are back (a
  routing session that falls after the resume withdraws the sink's route and opens a second
  gap; delay-only gaps, where every packet still arrives, do not count).  A session not up
  again within the run keeps every later lossy gap in the outage, and if the sink then heard
  nothing for more than ``settle_s`` before the generator stopped, full rate is a lower bound
  at the generator's stop;
* **outage**: the last packet before the blackout until full rate: the whole data-plane outage.

Resolutions: a hypervisor mark carries its own (QEMU's event timestamps: 1 us; an orchestrator
bracket: its width); a packet mark one packet interval (the path came back at most one interval
before the first packet arrived).  A phase's resolution is the sum of its two marks'.  When the
records end before a mark could be observed the figure is a bound (``lower_s``), never a point.

Pure functions: arrays and mappings in, dataclasses out; times are CLOCK_REALTIME ns.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

#: lossy gaps closer than this to the previous one belong to the same outage
SETTLE_S = 1.0

LABELS = {
    "start": "migration start",
    "vcpu_stop": "vCPU stop",
    "vcpu_resume": "resume",
    "last_packet": "last packet",
    "announce": "announce",
    "first_packet": "first packet",
    "full_rate": "full rate",
    "bfd_down": "BFD down",
    "bfd_up": "BFD up",
    "bgp_down": "BGP down",
    "bgp_up": "BGP up",
    "ospf_down": "OSPF down",
    "ospf_up": "OSPF up",
    "routes_back": "routes back",
}


@dataclass(frozen=True)
class Mark:
    """One instant of the timeline (``t_ns`` None: not observed, ``why_absent`` says why;
    ``bound`` "lower": the instant is at or after ``t_ns``, the records end there)."""

    key: str
    t_ns: int | None
    source: str | None = None
    resolution_s: float | None = None
    why_absent: str | None = None
    bound: str | None = None

    @property
    def label(self) -> str:
        return LABELS.get(self.key, self.key)


@dataclass(frozen=True)
class Phase:
    """A span between two marks: a point (``seconds`` = ``lower_s`` = ``upper_s``), a bound
    (``seconds`` None and only ``lower_s`` or ``upper_s``) or nothing (``why_absent``)."""

    key: str
    start: str
    end: str
    seconds: float | None
    lower_s: float | None
    upper_s: float | None
    resolution_s: float | None
    why_absent: str | None = None


@dataclass(frozen=True)
class Anatomy:
    """The run's timeline (marks in time order, absent ones last) and the outage's phases."""

    marks: tuple[Mark, ...]
    phases: tuple[Phase, ...]
    settle_s: float
    notes: tuple[str, ...] = ()

    def mark(self, key: str) -> Mark | None:
        return next((m for m in self.marks if m.key == key), None)

    def phase(self, key: str) -> Phase | None:
        return next((p for p in self.phases if p.key == key), None)

    def to_dict(self) -> dict[str, Any]:
        """summary.json ``details.anatomy``: marks relative to the migration start as well."""
        start = self.mark("start")
        t0 = start.t_ns if start is not None else None
        return {
            "settle_s": self.settle_s,
            "marks": [
                {
                    "key": m.key,
                    "label": m.label,
                    "t_ns": m.t_ns,
                    "t_s": None if m.t_ns is None or t0 is None else (m.t_ns - t0) / 1e9,
                    "source": m.source,
                    "resolution_s": m.resolution_s,
                    "bound": m.bound,
                    "why_absent": m.why_absent,
                }
                for m in self.marks
            ],
            "phases": {
                p.key: {
                    "from": p.start,
                    "to": p.end,
                    "seconds": p.seconds,
                    "lower_s": p.lower_s,
                    "upper_s": p.upper_s,
                    "resolution_s": p.resolution_s,
                    "why_absent": p.why_absent,
                }
                for p in self.phases
            },
            "notes": list(self.notes),
        }


def _threshold_s(gap_threshold_ns: int | None) -> float | None:
    """The sink's gap threshold in seconds, None when the sink did not record it."""
    return None if gap_threshold_ns is None else gap_threshold_ns / 1e9


def _threshold_text(thr_s: float | None) -> str:
    if thr_s is None:
        return "the sink's gap threshold (not recorded: no bound)"
    return f"the threshold ({thr_s * 1e3:g} ms)"


def _phase(key: str, a: Mark, b: Mark) -> Phase:
    if a.t_ns is None or b.t_ns is None:
        missing = a if a.t_ns is None else b
        return Phase(key, a.key, b.key, None, None, None, None, f"no {missing.label}: {missing.why_absent}")
    span = (b.t_ns - a.t_ns) / 1e9
    res = None if a.resolution_s is None or b.resolution_s is None else a.resolution_s + b.resolution_s
    if b.bound == "lower":
        return Phase(key, a.key, b.key, None, span, None, res, f"{b.label} not observed before the records end")
    return Phase(key, a.key, b.key, span, span, span, res)


def _early_first_packet(resume: Mark, lead_ns: int) -> Phase:
    """The reattachment when the first packet's stamp is ``lead_ns`` before the recorded resume.
    The router restarted before it forwarded, so the record is late: by no more than its
    resolution, the reattachment is the bound [0, resolution - lead] (the resume happened at
    most that resolution before its record); by more, the record cannot place it (absent)."""
    lead_s = lead_ns / 1e9
    res = resume.resolution_s
    if res is not None and lead_s <= res:
        why = (f"the first packet came {lead_s * 1e3:.3f} ms before the recorded resume ({resume.source}), "
               f"within that record's resolution ({res * 1e3:.3f} ms): a bound")  # fmt: skip
        return Phase("reattachment", "vcpu_resume", "first_packet", None, 0.0, res - lead_s, res, why)
    why = (f"the first packet came {lead_s * 1e3:.1f} ms before the recorded resume ({resume.source}): "
           "that record is later than the router's restart")  # fmt: skip
    return Phase("reattachment", "vcpu_resume", "first_packet", None, None, None, None, why)


def control_marks(
    control_plane: Mapping[str, Any] | None, since_ns: int | None = None, daemon: str = "bird"
) -> list[Mark]:
    """Per protocol of summary.json ``control_plane``: the first session down and the last one
    up again (from the peers' logs, 1 us), and the time the peers' RIBs were whole again.
    ``since_ns`` (the migration's start): a session that went down before it is none of the
    migration's doing (a BFD flap of a busy TCG guest during the settle time) and is left out.
    ``daemon``: the peers' daemon (bird or frr), named in the marks' sources."""
    name = "FRR" if daemon == "frr" else "BIRD"
    out: list[Mark] = []
    for proto in ("bfd", "bgp", "ospf"):
        f = (control_plane or {}).get(proto)
        if not isinstance(f, Mapping):
            continue
        flaps = [
            d for d in f.get("flap_details") or []
            if isinstance(d.get("down_ns"), int) and (since_ns is None or d["down_ns"] >= since_ns)
        ]  # fmt: skip
        if not flaps:
            continue
        src = f"peers' {name} logs"
        out.append(Mark(f"{proto}_down", min(d["down_ns"] for d in flaps), src, 1e-6))
        ups = [d.get("up_ns") for d in flaps]
        if all(isinstance(u, int) for u in ups):
            out.append(Mark(f"{proto}_up", max(ups), src, 1e-6))  # type: ignore[type-var]
        else:
            out.append(Mark(f"{proto}_up", None, src, None, "a session was not up again within the run"))
        # the routes back: those of the protocol that carries the cross-traffic's route (BGP
        # when the peers run it, OSPF alone otherwise; migrate.experiment.peering)
        if proto == "bgp" or (proto == "ospf" and not isinstance((control_plane or {}).get("bgp"), Mapping)):
            lost = [r for r in (f.get("routes") or {}).values() if isinstance(r, Mapping) and r.get("lost")]
            if lost:
                back = [r.get("whole_again_ns") for r in lost]
                if all(isinstance(b, int) for b in back):
                    out.append(Mark("routes_back", max(back), f"peers' {name} route traces", 1e-6))  # type: ignore[type-var]
                else:
                    out.append(Mark("routes_back", None, None, None, "a peer's routes were not whole again"))
    return out


def _first_event(
    events: Sequence[Mapping[str, Any]], side: str, name: str, after_ns: int, libvirt: bool = False
) -> Mapping[str, Any] | None:
    """The first ``side`` event named ``name`` at or after ``after_ns`` (QMP: its ``event``;
    libvirt: its lifecycle ``data.event``)."""
    for e in sorted((e for e in events if isinstance(e.get("t_ns"), int)), key=lambda e: e["t_ns"]):
        kind = (e.get("data") or {}).get("event") if libvirt else e.get("event")
        if e.get("side") == side and e["t_ns"] >= after_ns and kind == name:
            return e
    return None


def _qmp_mark(key: str, e: Mapping[str, Any] | None, what: str, offset_ns: int | None = 0) -> Mark:
    """A QMP event as a mark: the orchestrator's receipt time; resolution = how long after
    QEMU's own time stamp it arrived, that stamp put on the orchestrator's clock by the offset of
    QEMU's host (``offset_ns``: host minus orchestrator; 0 on one clock).  None (no resolution
    stated) when the host's offset was not measured: two clocks are never subtracted."""
    if e is None:
        return Mark(key, None, why_absent=f"no {what} recorded")
    q = e.get("qemu_t_ns")
    late = (e["t_ns"] - (q - offset_ns)) / 1e9 if isinstance(q, int) and offset_ns is not None else None
    res = late if late is not None and 0 <= late < 1 else None
    return Mark(key, int(e["t_ns"]), what, res)


def _recorded(key: str, t: Any, source: str, why: str) -> Mark:
    """A mark from a time some record may lack (no resolution stated)."""
    return Mark(key, int(t), source) if isinstance(t, int) else Mark(key, None, why_absent=why)


def blackout_marks(
    hv: str | None,
    driver: str | None,
    start_ns: int,
    qmp_events: Sequence[Mapping[str, Any]] = (),
    libvirt_events: Sequence[Mapping[str, Any]] = (),
    criu: Mapping[str, Any] | None = None,
    xen: Mapping[str, Any] | None = None,
    host_offsets_ns: Mapping[str, int | None] | None = None,
) -> tuple[Mark, Mark]:
    """(vCPU stop on the source, resume on the destination) from each hypervisor's records.
    ``host_offsets_ns``: on a lab, R1's and R2's clock offsets against the orchestrator (None for
    one not measured); None on one clock."""
    offs = {"R1": 0, "R2": 0} if host_offsets_ns is None else host_offsets_ns
    if hv == "kvm":
        lv = driver == "libvirt"
        events = libvirt_events if lv else qmp_events
        stop_name, resume_name = ("suspended", "resumed") if lv else ("STOP", "RESUME")
        source = "libvirt {} event ({})" if lv else "QMP {} ({})"
        stop_e = _first_event(events, "src", stop_name, start_ns, lv)
        res_e = _first_event(events, "dst", resume_name, stop_e["t_ns"] if stop_e else start_ns, lv)
        return (
            _qmp_mark("vcpu_stop", stop_e, source.format(stop_name, "R1"), offs.get("R1")),
            _qmp_mark("vcpu_resume", res_e, source.format(resume_name, "R2"), offs.get("R2")),
        )
    if hv == "criu":
        rounds = [r for r in (criu or {}).get("rounds") or [] if isinstance(r, Mapping)]
        t0 = (rounds[-1] if rounds else {}).get("start_ns")
        t1 = ((criu or {}).get("restore") or {}).get("end_ns")
        return (
            _recorded("vcpu_stop", t0, "CRIU final dump started (freeze)", "no final dump recorded in criu.json"),
            _recorded("vcpu_resume", t1, "CRIU restore returned", "no restore end recorded in criu.json"),
        )
    if hv == "xen":
        return (
            _recorded("vcpu_stop", (xen or {}).get("suspended_ns"), "xl: guest has suspended (R1)",
                      "no 'guest has suspended' line from xl"),
            _recorded("vcpu_resume", (xen or {}).get("resumed_ns"), "xl: domain started (R2)",
                      "no resumed line from xl"),
        )  # fmt: skip
    why = f"HV={hv} has no vCPU stop/resume records"
    return Mark("vcpu_stop", None, why_absent=why), Mark("vcpu_resume", None, why_absent=why)


def outage_anatomy(
    start_ns: int,
    stop: Mark,
    resume: Mark,
    gaps: np.ndarray,
    last_packet_ns: int | None,
    traffic_end_ns: int | None,
    packet_interval_s: float | None,
    gap_threshold_ns: int | None,
    announce_ns: int | None = None,
    extra: Sequence[Mark] = (),
    settle_s: float = SETTLE_S,
) -> Anatomy:
    """The timeline and phases (definitions: module docstring).

    ``gaps``: the sink's inter-arrival gaps ``[t_before_ns, t_after_ns, seq_before, seq_after]``
    (every gap above ``gap_threshold_ns``); ``last_packet_ns``: the sink's last packet;
    ``traffic_end_ns``: when the generator stopped sending; ``extra``: the control-plane marks."""
    notes: list[str] = []
    g = np.asarray(gaps, dtype=np.int64).reshape(-1, 4)
    g = g[np.argsort(g[:, 0], kind="stable")] if g.size else g
    pkt = packet_interval_s
    sink = "sink (kernel time stamp)"
    marks = [Mark("start", start_ns, "migrate command", 0.0), stop, resume]
    if announce_ns is not None:
        marks.append(Mark("announce", announce_ns, "announce-self command", 0.0))
    blackout = _phase("vcpu_blackout", stop, resume)
    reattach: Phase | None = None
    first = last_before = None
    never = Mark("full_rate", None, why_absent="the traffic did not come back before it stopped")
    chain_from: int | None = None  # where the search for the outage's last lossy gap starts
    if resume.t_ns is None or last_packet_ns is None:
        why = f"no resume: {resume.why_absent}" if resume.t_ns is None else "the sink received no packet"
        first = Mark("first_packet", None, why_absent=why)
        full = Mark("full_rate", None, why_absent=why)
    else:
        r = resume.t_ns
        lo = stop.t_ns if stop.t_ns is not None else start_ns
        over = np.nonzero((g[:, 0] < r) & (g[:, 1] > lo))[0] if g.size else np.zeros(0, dtype=int)
        if over.size:  # the blackout's gap: the longest sink gap overlapping [stop, resume]
            row = g[int(over[np.argmax(g[over, 1] - g[over, 0])])]
            last_before = Mark("last_packet", int(row[0]), sink, pkt)
            first = Mark("first_packet", int(row[1]), sink, pkt)
            chain_from = int(row[1])
            if row[1] < r:
                reattach = _early_first_packet(resume, r - int(row[1]))
        elif last_packet_ns < r:  # never back: the outage lasted at least until the generator stopped
            last_before = Mark("last_packet", last_packet_ns, sink, pkt)
            first = Mark("first_packet", None, why_absent="no packet after the resume before the traffic stopped")
            end = max(traffic_end_ns or last_packet_ns, last_packet_ns)
            never = Mark("full_rate", end, "the generator stopped (traffic never came back)", pkt, bound="lower")
        else:  # no gap above the threshold: packets kept arriving through the blackout
            thr = _threshold_s(gap_threshold_ns)
            why = f"no sink gap above {_threshold_text(thr)} overlaps the blackout"
            first = Mark("first_packet", None, why_absent=why)
            low = None if thr is None else 0.0  # an unknown threshold bounds nothing
            reattach = Phase("reattachment", "vcpu_resume", "first_packet", None, low, thr, None, why)
            chain_from = r
        if chain_from is None:
            full = never
        else:
            cur = chain_from
            lossy = g[(g[:, 0] >= chain_from) & (g[:, 3] - g[:, 2] > 1)] if g.size else g
            # a session still down (or the routes not yet back) keeps the outage open: a lossy
            # gap that starts before the control plane's last recovery is part of it however
            # long the traffic flowed before it (an OSPF adjacency the restored router dropped
            # 1.3 s after the first packet took the sink's route with it for 4.8 s)
            recovery = [m for m in extra if m.key.endswith("_up") or m.key == "routes_back"]
            # a session (not a route trace: one missing route of a peer's RIB says little of the
            # sink's) that was not up again within the run
            never_recovered = any(m.t_ns is None for m in recovery if m.key.endswith("_up"))
            recovering_until = max((m.t_ns for m in recovery if m.t_ns is not None), default=None)
            # a session that was not up again within the run keeps the outage open to the end:
            # every later lossy gap is part of it (a CRIU-restored BIRD that no longer hears its
            # OSPF neighbours loses the sink's route a dead interval after the restore)
            if never_recovered:
                recovering_until = max(last_packet_ns, traffic_end_ns or last_packet_ns)
            for t0, t1, _s0, _s1 in lossy:
                if (t0 - cur) / 1e9 > settle_s and (recovering_until is None or t0 > recovering_until):
                    break
                cur = max(cur, int(t1))
            seen_until = min(x for x in (last_packet_ns, traffic_end_ns) if x is not None)
            src = "sink: end of the last lossy gap"
            # the sink heard nothing in the last settle_s before the generator stopped while a
            # session was still down: the traffic stopped arriving (the route went with the
            # session), an open gap that is part of the outage.  Without that evidence the sink's
            # records merely end first (full rate is then a bound, below)
            open_gap = traffic_end_ns is not None and (traffic_end_ns - last_packet_ns) / 1e9 > settle_s
            if open_gap and never_recovered:
                assert traffic_end_ns is not None
                full = Mark("full_rate", traffic_end_ns, "the generator stopped (traffic never came back)", pkt,
                            bound="lower")  # fmt: skip
                notes.append(
                    f"the traffic stopped arriving {(traffic_end_ns - last_packet_ns) / 1e9:.2f} s before the "
                    "generator stopped"
                    + (" and a control-plane session was not up again" if never_recovered else "")
                    + ": the outage lasted at least until the generator stopped"
                )
            elif (seen_until - cur) / 1e9 >= settle_s:
                full = Mark("full_rate", cur, src, pkt)
            else:
                full = Mark("full_rate", cur, src, pkt, bound="lower")
                notes.append(f"the records end less than {settle_s:g} s after the last lossy gap: full rate is a bound")
    marks += [first, full, *extra]
    if reattach is None:
        reattach = _phase("reattachment", resume, first)
    phases = [blackout, reattach, _phase("reconvergence", first, full)]
    if last_before is not None:
        marks.append(last_before)
        phases.append(_phase("outage", last_before, full))
    else:
        why = first.why_absent or "no sink gap overlaps the blackout"
        thr = _threshold_s(gap_threshold_ns)
        bounded = thr is not None and full.t_ns is not None and full.t_ns == chain_from and full.bound is None
        phases.append(Phase("outage", "last_packet", "full_rate", None, 0.0 if bounded else None,
                            thr if bounded else None, None, why))  # fmt: skip
    ordered = sorted((m for m in marks if m.t_ns is not None), key=lambda m: m.t_ns or 0)
    ordered += [m for m in marks if m.t_ns is None]
    return Anatomy(tuple(ordered), tuple(phases), settle_s, tuple(notes))


def timeline_text(a: Mapping[str, Any]) -> str:
    """The anatomy's marks in time order, ms from the migration start: 'vCPU stop 0.4 · resume 786.5 · …'."""
    marks = [m for m in a.get("marks") or [] if m.get("t_s") is not None and m.get("key") != "start"]
    return " · ".join(f"{m['label']} {'>= ' if m.get('bound') == 'lower' else ''}{m['t_s'] * 1e3:.1f}" for m in marks)
