"""The routing control plane through a migration (``PEERING=``; docs/peering.md).

Inputs are what the peers recorded (migrate/experiment/peering.py): the log of each peer's
daemon (every state change, BFD session change and route change with a CLOCK_REALTIME time in
microseconds: BIRD's, :func:`parse_bird_log`, or with PEER_DAEMON=frr the one FRR's daemons
share, :func:`parse_frr_log`; each protocol's reading of a line knows both daemons' words) and
each peer's capture of BGP, OSPF and BFD packets.  Per protocol (``bgp``: the
eBGP session; ``ospf``: the OSPF adjacency, up while the neighbor is Full; ``bfd``) the figures are:

* ``survived``: no session of the protocol went down from the migration's start to the end of
  the run (None if a session was never seen up, or was down when the migration began);
* ``flaps``: how many times a session went down from the migration's start (those that began
  before it are counted apart, ``flaps_before_migration``: the busy router's own doing); per
  flap, when, why (the line BIRD logged with it, e.g. "BFD session down", "Error: Hold timer
  expired"; FRR's NOTIFICATION, e.g. "notification sent: Cease/BFD Down") and how long until
  it was up again (None: not within the run, so the figure is a lower bound, carried as such);
* ``silence``: the longest gap between two control packets *from the router* at a peer, over
  the migration window widened by one limit each side (BGP: any BGP message; OSPF: any OSPF
  packet; BFD: control packets), beside the limit the peer enforces (BGP: hold time; OSPF: the
  router dead interval; BFD: interval x multiplier) and
  the margin left (limit - silence; negative: the peer had to declare the session down);
* routes (BGP and OSPF): at each peer, how many routes it withdrew after the migration began and how long
  until it held again every route it held before (None if it never lost one).

Pure functions: text and packet arrays in, dataclasses out.  Timestamps are CLOCK_REALTIME ns
of the one machine (peers, captures and QMP events share its clock).
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

#: BIRD log line: "<seconds>.<microseconds> <CLASS> <protocol>: <message>"
_LINE = re.compile(r"^(\d+)\.(\d{6}) <(\w+)> ([\w.]+): (.*)$")
_STATE = re.compile(r"^State changed to (\w+)$")
_BFD = re.compile(r"^Session to (\S+) changed state from (\w+) to (\w+)$")
#: BIRD's OSPF neighbor state machine (RFC 2328 10.1 state names; "2-Way" has a hyphen)
_OSPF_NBR = re.compile(r"^Neighbor (\S+) on (\S+) changed state from ([\w-]+) to ([\w-]+)$")
#: BIRD's OSPF lines that say why an adjacency left Full (the first one logged before it did)
_OSPF_CAUSES = {
    "Inactivity timer expired": "dead interval expired",
    "BFD session down": "BFD session down",
}
_ROUTE = re.compile(r"^([<>]) (added|removed) (?:\[[^\]]*\] )?(\S+)")
#: BIRD's messages that say why a BGP session ended (the first one logged before it went down)
_CAUSES = ("BFD session down", "Error:", "Received:", "BGP session closed", "Connection lost")

BGP_PROTO = "rtr"  # the peers' BGP protocol name (migrate.experiment.peering.bird_conf)
OSPF_PROTO = "ospf1"  # the peers' OSPF protocol name (same)
BGP_PORT = 179
OSPF_IP_PROTO = 89  # OSPF runs directly over IP (RFC 2328 A.1)
BFD_PORT = 3784  # single-hop BFD control packets (RFC 5881)


@dataclass(frozen=True)
class LogEvent:
    """One line of a peer's log: BIRD's (``cls``: its message class, ``proto``: its protocol
    instance) or FRR's (``cls``: the daemon's tag, e.g. ``BGP``; ``proto``: the same in lower
    case, ``bgp``, ``bfd``, ``ospf``, ``zebra``; ``message``: the text after FRR's message id)."""

    t_ns: int
    cls: str
    proto: str
    message: str
    daemon: str = "bird"  # which daemon wrote it: "bird" or "frr" (PEER_DAEMON)


#: BIRD's route trace: "<seconds>.<microseconds> <TRACE> <protocol>.<channel> <dir> <what> ..."
_ROUTE_LINE = re.compile(r"^(\d+)\.(\d{6}) <(\w+)> ([\w]+\.[\w]+) ([<>] .*)$")
_SHUTDOWN = re.compile(r"^(\d+)\.(\d{6}) <INFO> Shutting down$")


def parse_bird_log(text: str) -> list[LogEvent]:
    """The lines of a BIRD log with ``timeformat log "%s.%6f"`` (others are skipped), up to the
    peer's own shutdown at the end of the run (kept as a last event with protocol ""): what
    follows is BIRD closing its sessions, not the router's doing."""
    out = []
    for line in text.splitlines():
        m = _LINE.match(line) or _ROUTE_LINE.match(line)
        if m:
            out.append(LogEvent(int(m[1]) * 10**9 + int(m[2]) * 1000, m[3], m[4], m[5]))
            continue
        m = _SHUTDOWN.match(line)
        if m:
            out.append(LogEvent(int(m[1]) * 10**9 + int(m[2]) * 1000, "INFO", "", "Shutting down"))
            break
    return out


#: FRR log line with ``log timestamp precision 6``: "YYYY/MM/DD HH:MM:SS.uuuuuu TAG: [MSGID]... text"
#: (the time in UTC: the peers run FRR with TZ=UTC0, migrate.experiment.peering.frr_argv)
_FRR_LINE = re.compile(r"^(\d{4})/(\d\d)/(\d\d) (\d\d):(\d\d):(\d\d)\.(\d{6}) (\w+): (?:\[[^\]]*\])* ?(.*?)\s*$")
#: an FRR daemon's first line when told to stop (SIGTERM): what follows is the peer's own shutdown
_FRR_SHUTDOWN = "Terminating on signal"


def parse_frr_log(text: str) -> list[LogEvent]:
    """The lines of the log the FRR daemons of one peer share (``log file ... debugging``,
    ``log timestamp precision 6``; lines without microseconds, FRR's own start-up, are
    skipped), in time order (each daemon writes its own lines; two daemons' lines can land in
    the file slightly out of order), up to the first daemon's "Terminating on signal" at the
    end of the run (kept as a last event with protocol "", as :func:`parse_bird_log` keeps
    BIRD's "Shutting down")."""
    out = []
    for line in text.splitlines():
        m = _FRR_LINE.match(line)
        if m is None:
            continue
        t = calendar.timegm((*(int(m[i]) for i in range(1, 7)), 0, 0, 0))
        out.append(LogEvent(t * 10**9 + int(m[7]) * 1000, m[8], m[8].lower(), m[9], "frr"))
    out.sort(key=lambda e: e.t_ns)
    for i, e in enumerate(out):
        if e.message.startswith(_FRR_SHUTDOWN):
            return [*out[:i], LogEvent(e.t_ns, e.cls, "", e.message, "frr")]
    return out


def peer_daemon(peering: Any) -> str:
    """The peers' daemon of a run from meta.json ``peering`` ("bird" for runs recorded before
    ``implementation.daemon`` existed: their peers were BIRD)."""
    impl = peering.get("implementation") if isinstance(peering, dict) else None
    daemon = impl.get("daemon") if isinstance(impl, dict) else None
    return daemon if isinstance(daemon, str) else "bird"


def until_first_shutdown(logs: dict[str, list[LogEvent]]) -> dict[str, list[LogEvent]]:
    """FRR peers' logs cut at the first shutdown of any FRR peer (each parsed log ends with its
    own, :func:`parse_frr_log`).  The peers stop one after the other: once A's bgpd or ospfd
    has stopped, the router withdraws A's route from B, and B logs that a few ms before its own
    "Terminating on signal" (seen in a real PEERING=ospf run): the peers' shutdown, not the
    router's doing.  BIRD's logs are returned as they are (their figures stay as they were)."""
    ends = [ev[-1] for ev in logs.values() if ev and ev[-1].daemon == "frr" and ev[-1].proto == ""]
    if not ends:
        return logs
    first = min(ends, key=lambda e: e.t_ns)
    return {
        peer: [*(e for e in ev if e.t_ns < first.t_ns), first] if ev and ev[0].daemon == "frr" else ev
        for peer, ev in logs.items()
    }


def parse_peer_log(text: str, daemon: str = "bird") -> list[LogEvent]:
    """A peer's log, read with the parser of its ``daemon`` (meta.json ``peering.implementation.daemon``)."""
    return parse_frr_log(text) if daemon == "frr" else parse_bird_log(text)


@dataclass(frozen=True)
class Flap:
    """A session that went down and (maybe) up again."""

    peer: str
    down_ns: int
    cause: str | None
    up_ns: int | None  # None: not up again within the run

    @property
    def down_for_s(self) -> float | None:
        """Seconds until it was up again (None: not within the run)."""
        return None if self.up_ns is None else (self.up_ns - self.down_ns) / 1e9


@dataclass(frozen=True)
class Sessions:
    """The sessions of one protocol at every peer."""

    established_ns: dict[str, int | None]  # first time up, per peer
    flaps: tuple[Flap, ...]
    end_ns: int | None  # the last log line: the runs' records end there
    #: flaps that began before ``since_ns`` (:meth:`since`): not the migration's doing
    before: tuple[Flap, ...] = ()
    since_ns: int | None = None

    def since(self, t_ns: int) -> Sessions:
        """The same sessions seen from ``t_ns`` (the migration's start): ``flaps`` are those that
        began at or after it, ``before`` those that began earlier."""
        every = self.before + self.flaps
        return Sessions(
            self.established_ns,
            tuple(f for f in every if f.down_ns >= t_ns),
            self.end_ns,
            tuple(f for f in every if f.down_ns < t_ns),
            t_ns,
        )

    @property
    def down_at_start(self) -> tuple[str, ...]:
        """Peers whose session was not up at ``since_ns``: first up only later, or down then
        after a flap that began before it."""
        if self.since_ns is None:
            return ()
        t = self.since_ns
        late = {p for p, e in self.established_ns.items() if e is not None and e > t}
        down = {f.peer for f in self.before if f.up_ns is None or f.up_ns > t}
        return tuple(sorted(late | down))

    @property
    def survived(self) -> bool | None:
        """No session went down (from ``since_ns`` when set; None: some session was never up,
        or was down at ``since_ns``, so nothing can be said about it)."""
        if any(t is None for t in self.established_ns.values()) or self.down_at_start:
            return None
        return not self.flaps


#: what one log line says about a session: ("up", None), ("down", the cause to use when no
#: earlier line gave one), ("cause", why it is about to go down), or None (nothing)
Step = tuple[str, str | None] | None


def _sessions(logs: dict[str, list[LogEvent]], step: Callable[[str, LogEvent], Step]) -> Sessions:
    """The sessions of one protocol at every peer, from ``step``'s reading of each line: a
    session is established at its first "up"; a "down" while up begins a flap, whose cause is
    the first "cause" line since it was last up (else the "down" line's own); the next "up"
    ends it (a flap not ended is still down when the records end)."""
    est: dict[str, int | None] = {}
    flaps: list[Flap] = []
    end = None
    for peer, events in logs.items():
        est[peer] = None
        up = False
        down: tuple[int, str | None] | None = None
        cause: str | None = None
        for e in events:
            end = e.t_ns if end is None else max(end, e.t_ns)
            said = step(peer, e)
            if said is None:
                continue
            kind, text = said
            if kind == "cause":
                if up and cause is None:
                    cause = text
            elif kind == "up":
                if est[peer] is None:
                    est[peer] = e.t_ns
                if down is not None:
                    flaps.append(Flap(peer, down[0], down[1], e.t_ns))
                    down = None
                up, cause = True, None
            elif up:  # "down"
                down, up = (e.t_ns, cause or text), False
        if down is not None:
            flaps.append(Flap(peer, down[0], down[1], None))
    return Sessions(est, tuple(sorted(flaps, key=lambda f: f.down_ns)), end)


def _transition(old: str, new: str, up_state: str, cause: str) -> Step:
    """A session's state change from ``old`` to ``new``: ("up", None) when it enters
    ``up_state``, ("down", ``cause``) when it leaves it, None for a change between two other
    states (BFD: RFC 5880 6.2; OSPF: Full, RFC 2328 10.1)."""
    if new == up_state:
        return ("up", None)
    return ("down", cause) if old == up_state else None


def bgp_sessions(logs: dict[str, list[LogEvent]]) -> Sessions:
    """BGP: BIRD's session is up at "State changed to up", down at the first other state after
    it; the cause is the first of BIRD's lines that say why a session ended (``_CAUSES``).
    FRR's (:func:`_frr_bgp_step`): up and down at bgpd's ``%ADJCHANGE`` lines."""

    def step(_peer: str, e: LogEvent) -> Step:
        if e.daemon == "frr":
            return _frr_bgp_step(e)
        if e.proto != BGP_PROTO:
            return None
        if e.message.startswith(_CAUSES):
            return ("cause", e.message)
        m = _STATE.match(e.message)
        if not m:
            return None
        return ("up", None) if m[1] == "up" else ("down", None)

    return _sessions(logs, step)


#: bgpd's session changes (``bgp log-neighbor-changes``): "%ADJCHANGE: neighbor 198.18.1.1(name)
#: in vrf default Up", "... Down BGP Notification send" (the reason, FRR's peer_down_str)
_FRR_ADJCHANGE = re.compile(r"^%ADJCHANGE: neighbor (\S+?)\(.*?\) in vrf \S+ (Up|Down)\b ?(.*)$")
#: bgpd's NOTIFICATION lines: "%NOTIFICATION(Hard Reset): sent to neighbor 198.18.1.1 6/10
#: (Cease/BFD Down) 0 bytes", "%NOTIFICATION: received from neighbor ... 4/0 (Hold Timer Expired/...)"
_FRR_NOTIFICATION = re.compile(r"^%NOTIFICATION(?:\([^)]*\))?: (sent to|received from) neighbor \S+ \d+/\d+ \((.*?)\)")


def _frr_bgp_step(e: LogEvent) -> Step:
    """An FRR peer's BGP session: up at ``%ADJCHANGE ... Up``, down at ``... Down <reason>``; the
    cause is the first NOTIFICATION sent or received since it was up ("notification sent:
    Cease/BFD Down", "notification sent: Hold Timer Expired/Unspecific"), else the reason of the
    Down line (e.g. "Peer closed the session")."""
    if e.proto != "bgp":
        return None
    m = _FRR_NOTIFICATION.match(e.message)
    if m:
        return ("cause", f"notification {m[1].split()[0]}: {m[2]}")
    m = _FRR_ADJCHANGE.match(e.message)
    if not m:
        return None
    return ("up", None) if m[2] == "Up" else ("down", m[3] or None)


def bfd_sessions(logs: dict[str, list[LogEvent]], router_addr: dict[str, str]) -> Sessions:
    """BFD: the session to the router's address at each peer, from its state changes (the
    cause: its detection time expired, else the state the router said it was in); FRR's from
    bfdd's ``state-change`` lines (:func:`_frr_bfd_step`)."""

    def step(peer: str, e: LogEvent) -> Step:
        if e.daemon == "frr":
            return _frr_bfd_step(e, router_addr[peer])
        m = _BFD.match(e.message)
        if not m or m[1] != router_addr[peer]:
            expired = "expired" in e.message and router_addr[peer] in e.message
            return ("cause", "detection time expired") if expired else None
        old, new = m[2], m[3]
        return _transition(old, new, "Up", f"remote state {new}")

    return _sessions(logs, step)


#: bfdd's session changes (``debug bfd peer``): "state-change: [mhop:no peer:198.18.1.1
#: local:198.18.1.10 vrf:default ifname:eth0] up -> down reason:control-expired"
_FRR_BFD = re.compile(r"^state-change: \[[^\]]*\bpeer:(\S+) [^\]]*\] ([\w-]+) -> ([\w-]+)(?: reason:(\S+))?")
#: bfdd removing a session: "session-delete: mhop:no peer:198.18.1.1 local:0.0.0.0 vrf:default"
#: (bgpd asks for its session before it knows its local address, then for one with it: bfdd
#: deletes the first, up or not, and logs no state change for it)
_FRR_BFD_DELETE = re.compile(r"^session-delete: .*\bpeer:(\S+)")
#: bfdd's diagnostics (RFC 5880 4.1) in the words :func:`bfd_sessions` uses for BIRD's
_FRR_BFD_CAUSES = {"control-expired": "detection time expired", "neighbor-down": "remote state Down"}


def _frr_bfd_step(e: LogEvent, router_addr: str) -> Step:
    """An FRR peer's BFD session with ``router_addr``: up at "-> up", down when it leaves up
    or is deleted; the cause is bfdd's diagnostic ("control-expired": the detection time
    expired; "neighbor-down": the router said Down; others as bfdd names them), or "session
    deleted"."""
    if e.proto != "bfd":
        return None
    m = _FRR_BFD_DELETE.match(e.message)
    if m:
        return ("down", "session deleted") if m[1] == router_addr else None
    m = _FRR_BFD.match(e.message)
    if not m or m[1] != router_addr:
        return None
    old, new, reason = m[2], m[3], m[4]
    return _transition(old, new, "up", _FRR_BFD_CAUSES.get(reason or "", reason or f"state {new}"))


def ospf_sessions(logs: dict[str, list[LogEvent]]) -> Sessions:
    """OSPF: the adjacency with the router at each peer (the only neighbor on the peer's
    segment interface) is up when its neighbor state reaches Full and down when it leaves Full
    (RFC 2328 10.1); the cause is BIRD's line before it ("Inactivity timer expired": no hello
    within the dead interval), else the state it fell to (e.g. Init: the router's hello no
    longer listed the peer).  FRR's from ospfd's ``AdjChg`` lines (:func:`_frr_ospf_step`)."""

    def step(_peer: str, e: LogEvent) -> Step:
        if e.daemon == "frr":
            return _frr_ospf_step(e)
        if e.proto != OSPF_PROTO:
            return None
        for prefix, why in _OSPF_CAUSES.items():
            if e.message.startswith(prefix):
                return ("cause", why)
        m = _OSPF_NBR.match(e.message)
        if not m:
            return None
        old, new = m[3], m[4]
        return _transition(old, new, "Full", f"neighbor state {new}")

    return _sessions(logs, step)


#: ospfd's neighbor changes (``log-adjacency-changes detail``): "AdjChg: Nbr 198.18.1.1, NbrIP
#: 198.18.1.1 (default) on eth0:198.18.1.10: Full -> Deleted (InactivityTimer)" (old state,
#: new state, the RFC 2328 10.2 event)
_FRR_OSPF = re.compile(r"^AdjChg: Nbr .* on \S+: ([\w-]+) -> ([\w-]+) \(([\w-]+)\)$")
_FRR_OSPF_CAUSES = {"InactivityTimer": "dead interval expired"}


def _frr_ospf_step(e: LogEvent) -> Step:
    """An FRR peer's OSPF adjacency: up at "-> Full", down when it leaves Full; the cause is
    the event ("InactivityTimer": dead interval expired), else the state it fell to."""
    if e.proto != "ospf":
        return None
    m = _FRR_OSPF.match(e.message)
    if not m:
        return None
    old, new, event = m[1], m[2], m[3]
    return _transition(old, new, "Full", _FRR_OSPF_CAUSES.get(event, f"neighbor state {new}"))


@dataclass(frozen=True)
class Silence:
    """The longest gap between control packets from the router at one peer."""

    peer: str
    gap_ms: float | None  # None: fewer than two packets in the span
    start_ns: int | None
    end_ns: int | None
    limit_ms: float | None  # None: the peer's tolerance is not known
    packets: int

    @property
    def margin_ms(self) -> float | None:
        """limit - gap (negative: longer than the peer tolerates); None without either."""
        return None if self.gap_ms is None or self.limit_ms is None else self.limit_ms - self.gap_ms


def longest_silence(peer: str, t_ns: np.ndarray, span: tuple[int, int], limit_ms: float | None) -> Silence:
    """Longest gap between consecutive times of ``t_ns`` (sorted ns) that overlaps ``span``; a
    gap still open at the end of the span counts up to the span's end (the router fell silent
    and stayed so: a bound, flagged by ``end_ns`` = span end)."""
    lo, hi = span
    t = np.sort(np.asarray(t_ns, dtype=np.int64))
    inside = t[(t >= lo) & (t <= hi)]
    before = t[t < lo]
    pts = np.concatenate([before[-1:], inside, [hi]]) if before.size else np.concatenate([inside, [hi]])
    if pts.size < 2:
        return Silence(peer, None, None, None, limit_ms, int(inside.size))
    gaps = np.diff(pts)
    i = int(np.argmax(gaps))
    return Silence(peer, float(gaps[i]) / 1e6, int(pts[i]), int(pts[i + 1]), limit_ms, int(inside.size))


@dataclass(frozen=True)
class RouteRecovery:
    """Routes one peer learned from the router, through the migration."""

    peer: str
    held_before: int  # routes held when the migration began
    withdrawn: int  # withdrawals after it began
    whole_again_ns: int | None  # when it held every route of before again (None: not lost, or never)
    lost: bool  # some route of before was missing at some point after the start


#: the routes an FRR peer's bgpd and ospfd hand to its zebra (``debug bgp zebra``, ``debug
#: ospf zebra``): FRR 8.4 "Tx route add VRF 0 198.18.4.10/32 metric 0 ...", "Tx route delete VRF 0
#: 198.18.4.10/32"; "Zebra: Route add 198.18.2.0/24 nexthop ...", "Zebra: Route delete ...";
#: FRR 10 names the VRF and table ("Tx route add VRF default (table id 0) 198.18.4.10/32 ...")
#: and appends it to OSPF's prefix ("Zebra: Route add 198.18.2.0/24(default) nexthop ...")
_FRR_ROUTE = {
    "bgp": re.compile(r"^Tx route (add|delete) VRF \S+(?: \(table id \d+\))? ([^\s(]+)"),
    "ospf": re.compile(r"^Zebra: Route (add|delete) ([^\s(]+)"),
}
#: BIRD's protocol names (bird_conf) -> the FRR daemon tag that learns the same routes
_FRR_PROTO = {BGP_PROTO: "bgp", OSPF_PROTO: "ospf"}


def learned_change(e: LogEvent, proto: str = BGP_PROTO) -> tuple[str, str] | None:
    """("added"|"removed", prefix) when ``e`` is a peer's import of a route from the router (the
    ``rtr.ipv4 > added/removed <prefix>`` line of its BGP protocol, or of ``proto``; FRR: the
    route bgpd, or ospfd for OSPF_PROTO, hands to or takes from zebra, :data:`_FRR_ROUTE`);
    None for any other line."""
    if e.daemon == "frr":
        frr = _FRR_PROTO.get(proto)
        if frr is None or e.proto != frr:
            return None
        m = _FRR_ROUTE[frr].match(e.message)
        return None if m is None else ("added" if m[1] == "add" else "removed", m[2])
    if not e.proto.startswith(proto + "."):
        return None
    m = _ROUTE.match(e.message)
    return (m[2], m[3]) if m and m[1] == ">" else None


def route_recovery(
    peer: str,
    events: list[LogEvent],
    start_ns: int,
    ignore: Callable[[str], bool] | None = None,
    proto: str = BGP_PROTO,
) -> RouteRecovery:
    """From the peer's "rtr.ipv4 > added/removed <prefix>" lines (routes learned from the
    router; ``proto``: the BIRD protocol that learned them): what it held at ``start_ns``, what
    it lost after, and when it had all of it again.  ``ignore``: prefixes left out (the churned
    ones, CHURN=, come and go by design)."""
    held: set[str] = set()
    before: set[str] | None = None
    withdrawn = 0
    lost = False
    whole: int | None = None
    for e in events:
        if before is None and e.t_ns >= start_ns:
            before = set(held)
        change = learned_change(e, proto)
        if change is None:
            continue
        what, prefix = change
        if ignore is not None and ignore(prefix):
            continue
        if what == "added":
            held.add(prefix)
        else:
            held.discard(prefix)
        if before is not None:
            if what == "removed":
                withdrawn += 1
                if prefix in before:
                    lost, whole = True, None
            elif lost and whole is None and before <= held:
                whole = e.t_ns
    if before is None:
        before = set(held)
    return RouteRecovery(peer, len(before), withdrawn, whole, lost)


@dataclass(frozen=True)
class ProtocolFigures:
    """One protocol's figures (summary.json ``control_plane.<protocol>``)."""

    protocol: str
    sessions: Sessions
    silences: tuple[Silence, ...]
    routes: tuple[RouteRecovery, ...] = ()
    notes: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        """JSON form: nulls where a figure is absent, with the reason in ``notes``."""
        worst = max((s for s in self.silences if s.gap_ms is not None), key=lambda s: s.gap_ms or 0, default=None)
        end = self.sessions.end_ns

        def details(flaps: tuple[Flap, ...]) -> list[dict[str, Any]]:
            return [
                {
                    "peer": f.peer,
                    "down_ns": f.down_ns,
                    "cause": f.cause,
                    "up_ns": f.up_ns,
                    "down_for_s": f.down_for_s,
                    # not up again within the run: the outage lasted at least until the records end
                    "down_for_s_lower": None if f.up_ns is not None or end is None else (end - f.down_ns) / 1e9,
                }
                for f in flaps
            ]

        out: dict[str, Any] = {
            "survived": self.sessions.survived,
            "flaps": len(self.sessions.flaps),
            "flap_details": details(self.sessions.flaps),
            # sessions that went down before the migration began (the router's own instability)
            "flaps_before_migration": len(self.sessions.before),
            "flap_details_before_migration": details(self.sessions.before),
            "down_at_migration": list(self.sessions.down_at_start),
            "established_ns": self.sessions.established_ns,
            "silence_ms": None if worst is None else worst.gap_ms,
            "silence_peer": None if worst is None else worst.peer,
            "limit_ms": self.silences[0].limit_ms if self.silences else None,
            "margin_ms": None if worst is None else worst.margin_ms,
            "silence_by_peer": {
                s.peer: {
                    "gap_ms": s.gap_ms,
                    "start_ns": s.start_ns,
                    "end_ns": s.end_ns,
                    "packets": s.packets,
                    "margin_ms": s.margin_ms,
                }
                for s in self.silences
            },
            "notes": list(self.notes),
        }
        if self.protocol in ("bgp", "ospf"):
            out["routes"] = {
                r.peer: {
                    "held_before": r.held_before,
                    "withdrawn": r.withdrawn,
                    "lost": r.lost,
                    "whole_again_ns": r.whole_again_ns,
                }
                for r in self.routes
            }
        return out


def control_times(t_ns: np.ndarray, src: np.ndarray, proto: np.ndarray, router_addr: str, which: str) -> np.ndarray:
    """Times of the control packets ``which`` ("bgp" messages, "ospf" or "bfd" packets) sent by the router."""
    return np.asarray(t_ns)[(np.asarray(src) == router_addr) & (np.asarray(proto) == which)]


def control_plane(
    protocols: tuple[str, ...],
    logs: dict[str, list[LogEvent]],
    captures: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]],
    router_addr: dict[str, str],
    window: tuple[int, int],
    limits_ms: Mapping[str, float | None],
    ignore_prefix: Callable[[str], bool] | None = None,
) -> dict[str, ProtocolFigures]:
    """The figures of every protocol of PEERING; ``captures`` per peer are (t_ns, src, proto)
    arrays of :func:`dissect`; ``window`` is the migration window (ns); ``limits_ms``: what the
    peers tolerate per protocol (hold time, dead interval, detection time; a protocol missing or
    None: unknown, so the silence is sought in the window alone and has no margin);
    ``ignore_prefix``: routes left out of the route recovery (:func:`route_recovery`).  A peer
    without the router's address in ``router_addr`` has no silence and no BFD session (which
    packets and which session are the router's is unknown).  FRR peers' records end at the
    first peer's shutdown (:func:`until_first_shutdown`)."""
    logs = until_first_shutdown(logs)
    out: dict[str, ProtocolFigures] = {}
    for proto in protocols:
        limit = limits_ms.get(proto)
        pad = int(limit * 1e6) if limit is not None else 0
        span = (window[0] - pad, window[1] + pad)
        silences = []
        notes = [] if limit is not None else [f"no {proto.upper()} limit recorded: the silence has no margin"]
        for peer, (t, src, kind) in captures.items():
            if peer not in router_addr:
                notes.append(f"no router address at {peer}: its silence is unknown")
                continue
            silences.append(longest_silence(peer, control_times(t, src, kind, router_addr[peer], proto), span, limit))
        for peer in logs:
            if peer not in captures:
                notes.append(f"no capture at {peer}: its silence is unknown")
        found = {"bgp": bgp_sessions, "ospf": ospf_sessions}
        if proto in found:
            sessions = found[proto](logs).since(window[0])
        else:
            for peer in logs:
                if peer not in router_addr:
                    notes.append(f"no router address at {peer}: its {proto.upper()} session is unknown")
            known = {peer: ev for peer, ev in logs.items() if peer in router_addr}
            sessions = bfd_sessions(known, router_addr).since(window[0])
        if sessions.before:
            notes.append(
                f"{len(sessions.before)} {proto.upper()} flap(s) before the migration began, left out of"
                " survived/flaps (flap_details_before_migration)"
            )
        if sessions.down_at_start:
            notes.append(
                f"{proto.upper()} session(s) with {', '.join(sessions.down_at_start)} down when the migration"
                " began: whether they survive it is unknown (survived is null)"
            )
        bird_proto = {"bgp": BGP_PROTO, "ospf": OSPF_PROTO}.get(proto)
        routes = (
            tuple(route_recovery(peer, ev, window[0], ignore_prefix, bird_proto) for peer, ev in logs.items())
            if bird_proto is not None
            else ()
        )
        out[proto] = ProtocolFigures(proto, sessions, tuple(silences), routes, tuple(notes))
    return out


def dissect(packets: list[Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(t_ns, source address, "bgp"/"ospf"/"bfd") of the control packets in scapy ``packets``: a
    TCP segment from or to port 179 with payload counts as BGP (pure ACKs carry no message), an
    IP packet of protocol 89 as OSPF, a UDP datagram to port 3784 as BFD.  Other packets are left
    out."""
    from scapy.layers.inet import IP, TCP, UDP

    t, src, kind = [], [], []
    for p in packets:
        if IP not in p:
            continue
        ip = p[IP]
        if TCP in p and BGP_PORT in (p[TCP].sport, p[TCP].dport) and len(p[TCP].payload) > 0:
            k = "bgp"
        elif UDP in p and p[UDP].dport == BFD_PORT:
            k = "bfd"
        elif ip.proto == OSPF_IP_PROTO:
            k = "ospf"
        else:
            continue
        t.append(int(p.time * 10**9))  # scapy's EDecimal: exact for a nanosecond capture
        src.append(ip.src)
        kind.append(k)
    return np.asarray(t, dtype=np.int64), np.asarray(src, dtype=object), np.asarray(kind, dtype=object)
