"""Routing peers of the router (``PEERING=`` any of ``bgp``, ``ospf``, ``bfd``; docs/peering.md).

One peer per segment, on the end host that already sits there: A on segment L, B on segment R.
Each runs BIRD 2 (the Debian ``bird2`` binaries of the bird router image, started through that
image's own dynamic loader, so nothing is installed on the host) with, as asked, one eBGP
session to the router's port on its segment (with ``bfd``, a BFD session on it) and an OSPFv2
adjacency with the router in area 0 (point-to-point, as the router has it).  B announces the
cross-traffic sink's address (:data:`SINK_ROUTED`, a /32 on B's loopback) and A its own
(both in ``topology.ANNOUNCED``), over BGP when the peers run it, else over OSPF (an external
route): the router forwards the cross-traffic only while it holds B's route, so a session that
goes down withdraws it and blackholes the traffic as it would in a real network.

What is recorded, per peer, in the run directory:

* ``peer-<role>.log``: BIRD's log, every protocol state change, BFD session change and route
  change with its CLOCK_REALTIME timestamp in microseconds (``timeformat log "%s.%6f"``; BIRD
  stamps the events of one pass of its event loop with one time);
* ``control-<role>.pcap``: every BGP (TCP 179), OSPF (IP protocol 89) and BFD (UDP 3784) packet on the peer's
  interface, captured by tcpdump (``-j adapter_unsynced``: kernel time stamps, CLOCK_REALTIME);
* ``peer-<role>.conf``: BIRD's configuration.

Why BIRD at the peers by default: one process with BGP, BFD and OSPF, a log that states every
change with a microsecond time stamp as it happens (no polling), and a router (FRR by default)
that then interoperates with a different implementation, as routers in the field do.

``PEER_DAEMON=frr`` runs FRR at the peers instead (:func:`frr_confs`, :func:`frr_argv`): zebra
and, as PEERING asks, bfdd, bgpd and ospfd of the frr router image, each a registered process of
its own, all logging to ``peer-<role>.log`` with microsecond time stamps as they act (bgpd's
``%ADJCHANGE``/``%NOTIFICATION``, bfdd's ``state-change``, ospfd's ``AdjChg``, the routes bgpd
and ospfd hand to zebra); configurations ``peer-<role>.<daemon>.conf``.
"""

from __future__ import annotations

import logging
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path, PurePath, PurePosixPath
from typing import Any

from analysis.metrics.control_plane import (
    BFD_PORT,
    BGP_PORT,
    BGP_PROTO,
    OSPF_IP_PROTO,
    OSPF_PROTO,
    LogEvent,
    bfd_sessions,
    bgp_sessions,
    learned_change,
    ospf_sessions,
    parse_peer_log,
)
from migrate.core.errors import DependencyError, VrmigError
from migrate.core.netlink import iproute
from migrate.core.procs import Proc
from migrate.core.registry import Registry
from migrate.core.rundir import control_pcap, peer_log
from migrate.experiment import churn
from migrate.model.routing import (
    ROUTER_ASN,
    SINK_ROUTED,
    PeerSpec,
    peers,
)
from migrate.model.scenario import Scenario
from migrate.testbed import topology as topo

log = logging.getLogger(__name__)

CAPTURE_FILTER = f"tcp port {BGP_PORT} or udp port {BFD_PORT} or ip proto {OSPF_IP_PROTO}"
CAPTURE_SNAPLEN = 256  # headers and BGP's fixed part; UPDATE bodies are not needed
TCPDUMP = "tcpdump"
#: how long the sessions may take to come up once the router reports READY
ESTABLISH_TIMEOUT_S = 60.0
#: how long a session that flapped before the migration may take to come up again before it
#: (BIRD's "startup delayed by 4 seconds due to errors" after repeated flaps, plus BFD's Init)
REUP_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 5.0
FRR_START_TIMEOUT_S = 10.0
LOG_POLL_S = 0.05


@dataclass(frozen=True)
class SessionsUp:
    """Every session of every peer up, as the peers' logs say it (``Peers.wait_sessions_up``)."""

    up_ns: dict[str, int]  # per peer, BIRD's time of the latest of its sessions to come up
    flaps: int  # sessions that went down so far, over all peers and protocols


def sessions_state(
    logs: dict[str, list[LogEvent]], routers: dict[str, str], protocols: tuple[str, ...]
) -> tuple[dict[str, int | None], int]:
    """From the peers' parsed logs: per peer, when the latest of its sessions (those of
    ``protocols``: BGP, the OSPF adjacency, BFD) came up if all of them are up now (None: one
    is down or never was up), and how many times a session went down so far."""
    found = [
        *([bgp_sessions(logs)] if "bgp" in protocols else []),
        *([ospf_sessions(logs)] if "ospf" in protocols else []),
        *([bfd_sessions(logs, routers)] if "bfd" in protocols else []),
    ]
    up: dict[str, int | None] = {}
    for peer in logs:
        times: list[int | None] = []
        for sessions in found:
            mine = [f for f in sessions.flaps if f.peer == peer]
            est = sessions.established_ns.get(peer)
            if est is None or any(f.up_ns is None for f in mine):
                times.append(None)  # never up, or down now
            else:
                times.append(max([est, *(f.up_ns for f in mine if f.up_ns is not None)]))
        up[peer] = None if any(t is None for t in times) else max(t for t in times if t is not None)
    return up, sum(len(s.flaps) for s in found)


#: the peer whose log shows that the router holds the route to the sink (B's address): A learns
#: it from the router only once the router has it
SINK_OBSERVER = "A"


def sink_route_held(events: list[LogEvent], protocols: tuple[str, ...]) -> bool:
    """Whether ``events`` (A's parsed log) say A holds the route to :data:`SINK_ROUTED` learned
    from the router, over BGP when the peers run it, else over OSPF: the router holds it then.

    Why FRR's peers wait for it (:meth:`Peers.sessions_up`): with FRR at both ends an OSPF
    peer's routes came 3 s after its adjacency was Full (10 s and more with FRR's default LSA
    timers; real runs), so "sessions up" did not mean the cross-traffic had its route; BIRD's
    peers are not waited for (as before).
    """
    proto = BGP_PROTO if "bgp" in protocols else OSPF_PROTO
    held = False
    for e in events:
        change = learned_change(e, proto)
        if change is not None and change[1] == SINK_ROUTED:
            held = change[0] == "added"
    return held


def sink_route_observable(s: Scenario) -> bool:
    """Whether A's log can show the router's route to the sink (:func:`sink_route_held`): over
    BGP, A learns B's route only from a router that passes its eBGP routes on to its other
    peer, as FRR does by default; the bird router profile exports its connected prefixes only
    (``routers/guestfs/vrmig-router``), so with ``ROUTER=bird`` A never learns it over BGP.
    Over OSPF B's external LSA floods to A through either router."""
    return not ("bgp" in s.peering_protocols and s.router_software == "bird")


class PeeringError(VrmigError):
    """The routing sessions did not come up (before the migration, or again after a calibration event)."""


def bird_conf(s: Scenario, p: PeerSpec, log_path: PurePath | str, ifname: str = topo.HOST_IF) -> str:
    """The peer's BIRD configuration (pure).

    ``connect delay time 1`` and ``error wait time 1, 10``: after a session fails, BIRD would
    otherwise wait 60 s before it tries again, and the time to re-establish would measure that
    wait instead of the router; the router side (FRR) retries every second (``timers connect
    1``)."""
    bfd = "bfd" in s.peering_protocols
    bgp = "bgp" in s.peering_protocols
    keepalive = max(1, s.bgp_hold_s // 3)
    lines = [
        'timeformat log "%s.%6f";',
        f'log "{log_path}" all;',
        f"router id {p.addr};",
        "debug protocols { states, routes, events };",
        "protocol device { }",
        'protocol direct { ipv4; interface "lo"; }',
    ]
    export = f"net = {p.announced}"
    if s.churn_rps is not None and p.role == churn.PEER:
        # the churned routes (migrate.experiment.churn): learned from a kernel table the
        # orchestrator writes, exported to the router with the announced address
        lines.append(
            f"protocol kernel churn {{ kernel table {churn.TABLE}; learn; ipv4 {{ import all; export none; }}; }}"
        )
        export += f" || net ~ [ {churn.POOL}{{32,32}} ]"
    if bfd:
        lines.append(
            f'protocol bfd {{ interface "{ifname}" {{ interval {s.bfd_interval_ms} ms; '
            f"multiplier {s.bfd_multiplier}; }}; }}"
        )
    if "ospf" in s.peering_protocols:
        # the announced address goes over OSPF (an external route) only when there is no BGP:
        # one protocol carries the cross-traffic's route (docs/peering.md)
        lines += [
            f"protocol ospf v2 {OSPF_PROTO} {{",
            f"  ipv4 {{ import all; export {'none' if bgp else f'where net = {p.announced}'}; }};",
            f'  area 0 {{ interface "{ifname}" {{ type ptp; hello {s.ospf_hello_s}; dead {s.ospf_dead_s}; }}; }};',
            "}",
        ]
    if not bgp:
        return "\n".join([*lines, ""])
    lines += [
        f"protocol bgp {BGP_PROTO} {{",
        f"  local {p.addr} as {p.asn};",
        f"  neighbor {p.router_addr} as {ROUTER_ASN};",
        f"  hold time {s.bgp_hold_s}; keepalive time {keepalive};",
        "  connect delay time 1; connect retry time 1; error wait time 1, 10;",
        *(["  bfd on;"] if bfd else []),
        f"  ipv4 {{ import all; export where {export}; }};",
        "}",
        "",
    ]
    return "\n".join(lines)


#: the FRR daemons a peer runs for ``PEERING`` (zebra first: the others connect to it)
FRR_DAEMON_OF = {"bfd": "bfdd", "bgp": "bgpd", "ospf": "ospfd"}
#: the route-map that keeps the routes an FRR peer learns out of its namespace's kernel table
#: (zebra's ``ip protocol ... route-map``), as BIRD's peers have no kernel protocol
FRR_NO_FIB = "vrmig-no-fib"
FRR_ANNOUNCE = "vrmig-announce"


def frr_daemons(s: Scenario) -> tuple[str, ...]:
    """The FRR daemons of a peer with ``s``'s PEERING, zebra first."""
    return ("zebra", *(FRR_DAEMON_OF[p] for p in ("bfd", "bgp", "ospf") if p in s.peering_protocols))


def frr_confs(s: Scenario, p: PeerSpec, log_path: Path, ifname: str = topo.HOST_IF) -> dict[str, str]:
    """The peer's FRR configuration, one file per daemon (pure).

    Same sessions as :func:`bird_conf`.  Logging: every daemon logs to ``log_path``
    (``peer-<role>.log``) at debug level with microsecond time stamps (``log timestamp
    precision 6``; FRR's ``--log file:`` target on the command line keeps whole seconds, so the
    file is named in the configuration: what a daemon says before reading it goes to its
    stderr); what the analysis reads
    there (docs/peering.md): bgpd's ``%ADJCHANGE`` (``bgp log-neighbor-changes``) and
    ``%NOTIFICATION`` lines, bfdd's ``state-change`` lines (``debug bfd peer``), ospfd's
    ``AdjChg`` lines (``log-adjacency-changes detail``), and the routes bgpd and ospfd hand to
    zebra (``debug bgp zebra``, ``debug ospf zebra``): the peer's routes learned from the router.

    Fast reconnect: ``timers connect 1`` (FRR's connect retry, 120 s by default).  Fast OSPF
    reconvergence: ``timers throttle lsa all 0`` and ``timers lsa min-arrival 0``: FRR's ospfd
    otherwise originates its router-LSA at most every 5 s (MinLSInterval) and drops a newer
    instance that arrives within 1 s of the last: a peer started shortly before its adjacency
    came up learned its routes 5-10 s after Full (measured), the router's delay would hide
    behind the peer's.  eBGP
    without policies: ``no bgp ebgp-requires-policy`` (FRR otherwise sends and accepts
    nothing on eBGP sessions, RFC 8212).  zebra keeps the learned routes out of the kernel
    (:data:`FRR_NO_FIB`): BIRD's peers install nothing either, so the hosts forward the same."""
    bfd = "bfd" in s.peering_protocols
    bgp = "bgp" in s.peering_protocols
    ospf = "ospf" in s.peering_protocols
    keepalive = max(1, s.bgp_hold_s // 3)
    head = [f"hostname peer-{p.role}", f"log file {log_path} debugging", "log timestamp precision 6"]
    out = {
        "zebra": "\n".join(
            [
                *head,
                *(f"ip protocol {x} route-map {FRR_NO_FIB}" for x in ("bgp", "ospf") if x in s.peering_protocols),
                f"route-map {FRR_NO_FIB} deny 10",
                "exit",
                "",
            ]
        )
    }
    if bfd:
        out["bfdd"] = "\n".join(
            [
                *head,
                "debug bfd peer",
                "bfd",
                " profile vrmig",
                f"  receive-interval {s.bfd_interval_ms}",
                f"  transmit-interval {s.bfd_interval_ms}",
                f"  detect-multiplier {s.bfd_multiplier}",
                " exit",
                "exit",
                "",
            ]
        )
    announce = [
        f"ip prefix-list {FRR_ANNOUNCE} seq 5 permit {p.announced}",
        f"route-map {FRR_ANNOUNCE} permit 10",
        f" match ip address prefix-list {FRR_ANNOUNCE}",
        "exit",
    ]
    if bgp:
        out["bgpd"] = "\n".join(
            [
                *head,
                "debug bgp zebra",
                f"router bgp {p.asn}",
                f" bgp router-id {p.addr}",
                " bgp log-neighbor-changes",
                " no bgp ebgp-requires-policy",
                " no bgp network import-check",
                f" timers bgp {keepalive} {s.bgp_hold_s}",
                f" neighbor {p.router_addr} remote-as {ROUTER_ASN}",
                f" neighbor {p.router_addr} timers {keepalive} {s.bgp_hold_s}",
                f" neighbor {p.router_addr} timers connect 1",
                *([f" neighbor {p.router_addr} bfd profile vrmig"] if bfd else []),
                " address-family ipv4 unicast",
                f"  network {p.announced}",
                " exit-address-family",
                "exit",
                "",
            ]
        )
    if ospf:
        # the announced address goes over OSPF (an external route) only when there is no BGP,
        # as with BIRD (bird_conf)
        out["ospfd"] = "\n".join(
            [
                *head,
                "debug ospf zebra",
                *(announce if not bgp else []),
                f"interface {ifname}",
                " ip ospf area 0",
                " ip ospf network point-to-point",
                f" ip ospf hello-interval {s.ospf_hello_s}",
                f" ip ospf dead-interval {s.ospf_dead_s}",
                " ip ospf retransmit-interval 1",
                "exit",
                "router ospf",
                f" ospf router-id {p.addr}",
                " log-adjacency-changes detail",
                " timers throttle lsa all 0",
                " timers lsa min-arrival 0",
                *([f" redistribute connected route-map {FRR_ANNOUNCE}"] if not bgp else []),
                "exit",
                "",
            ]
        )
    return out


def frr_image_paths() -> tuple[Path, Path, list[Path]]:
    """(loader, directory of the FRR daemons, library directories) of the frr router image's
    root file system."""
    from routers.paths import rootfs_dir

    root = rootfs_dir("frr")
    loader, daemons = root / "lib64" / "ld-linux-x86-64.so.2", root / "usr" / "lib" / "frr"
    if not (loader.exists() and (daemons / "zebra").exists()):
        raise DependencyError(
            f"PEER_DAEMON=frr runs the peers with the frr router image's FRR ({daemons / 'zebra'} missing): "
            "run `make guest` (it builds the frr and bird images)"
        )
    lib = root / "usr" / "lib" / "x86_64-linux-gnu"
    return loader, daemons, [root / "lib" / "x86_64-linux-gnu", lib, lib / "frr"]


def frr_argv(loader: Path, daemons: Path, libs: list[Path], daemon: str, conf: Path, state: Path) -> list[str]:
    """One FRR daemon of a peer, private to it: its configuration ``conf``; its vty socket,
    pid file and zebra socket in ``state`` (a directory of its own, also its /var/tmp:
    :mod:`migrate.experiment.frr_exec`, which gives it the frr image's /etc/group); no vty TCP
    port; run as root.  ``TZ=UTC0``: FRR stamps its log
    lines in local time; in UTC they convert to CLOCK_REALTIME without knowing the host's zone."""
    group = daemons.parents[2] / "etc" / "group"
    return [
        sys.executable, str(Path(__file__).with_name("frr_exec.py")), str(group), str(state), "--",
        "env", "TZ=UTC0", str(loader), "--library-path", ":".join(map(str, libs)), str(daemons / daemon),
        "--vty_socket", str(state), "-i", str(state / f"{daemon}.pid"), "-z", str(state / "zserv.api"),
        "-P", "0", "-u", "root", "-g", "root", "-f", str(conf),
    ]  # fmt: skip


def bird_paths(root: PurePath) -> tuple[PurePath, PurePath, list[PurePath]]:
    """(loader, bird binary, library directories) in the bird router image's root file system
    ``root`` (pure: this machine's copy, or a lab host's)."""
    return (
        root / "lib64" / "ld-linux-x86-64.so.2",
        root / "usr" / "sbin" / "bird",
        [root / "lib" / "x86_64-linux-gnu", root / "usr" / "lib" / "x86_64-linux-gnu"],
    )


def bird_argv(root: PurePath, conf: PurePath | str, ctl: PurePath | str) -> list[str]:
    """BIRD of the image at ``root``, in the foreground, started through the image's own loader
    (nothing installed on the host), with configuration ``conf`` and control socket ``ctl``."""
    loader, bird, libs = bird_paths(root)
    return [str(loader), "--library-path", ":".join(map(str, libs)), str(bird), "-f", "-c", str(conf), "-s", str(ctl)]


def bird_image_root() -> Path:
    """The bird router image's root file system on this machine, checked to hold BIRD and its
    loader (DependencyError naming the fix)."""
    from routers.paths import rootfs_dir

    root = rootfs_dir("bird")
    loader, bird, _ = bird_paths(root)
    if not (Path(loader).exists() and Path(bird).exists()):
        raise DependencyError(
            f"PEERING runs the peers with the bird router image's BIRD ({bird} missing): "
            "run `make guest` (it builds the frr and bird images)"
        )
    return root


def bird_image_paths() -> tuple[Path, Path, list[Path]]:
    """(loader, bird binary, library directories) of the bird router image's root file system."""
    loader, bird, libs = bird_paths(bird_image_root())
    return Path(loader), Path(bird), [Path(x) for x in libs]


#: on a lab's peer hosts (A, B): where ``make hosts-setup`` unpacks the bird router image's
#: root file system, under the inventory's deploy directory
LAB_BIRD_ROOT = "peers/bird"

#: a lab peer host's loopback address for the run (argv: address/prefix), held by a guarded
#: process: added, announced on stderr, deleted on SIGTERM (the guard sends it when the run
#: stops the peers or its SSH channel closes).  Quiet after READY: a write to a closed channel
#: would end it by SIGPIPE before it removed the address.
LAB_LOOPBACK_SH = r"""ip addr add "$1" dev lo || exit 1
trap 'ip addr del "$1" dev lo; exit 0' TERM INT HUP
echo LOOPBACK-READY >&2
exec >/dev/null 2>&1
while :; do sleep 3600 & wait "$!"; done"""


def check(s: Scenario) -> None:
    """What PEERING needs on this machine (DependencyError naming it)."""
    import shutil

    if not s.peering:
        return
    if s.peer_daemon == "frr":
        frr_image_paths()
    else:
        bird_image_root()
    if shutil.which(TCPDUMP) is None:
        raise DependencyError("PEERING captures the control packets with tcpdump: run `make setup` (Debian tcpdump)")


def tool_versions(daemon: str = "bird") -> dict[str, str | None]:
    """The peers' daemon (BIRD, or FRR with ``daemon`` "frr": the Debian package version, from
    its router image's manifest) and tcpdump."""
    import json
    import subprocess

    from routers.paths import guest_dir

    out: dict[str, str | None] = {daemon: None, "tcpdump": None}
    try:
        out[daemon] = json.loads((guest_dir(daemon) / "manifest.json").read_text())["router"]["version"]
    except (OSError, ValueError, KeyError):
        pass
    try:
        out["tcpdump"] = tcpdump_version(
            subprocess.run([TCPDUMP, "--version"], capture_output=True, text=True, timeout=10).stdout
        )
    except (OSError, subprocess.TimeoutExpired):
        pass
    return out


def tcpdump_version(stdout: str) -> str | None:
    """The version in ``tcpdump --version``'s output ("tcpdump version 4.99.3 ..."), or None."""
    words = stdout.split()
    return words[2] if stdout.startswith("tcpdump version") and len(words) > 2 else None


def _stop_rank(what: str) -> tuple[bool, int]:
    """Stop order of the peers' processes: the routing daemons (BIRD; FRR's bgpd and ospfd),
    then FRR's bfdd (stopped first, it would take the BFD sessions down administratively and
    the router would end its BGP sessions: a flap of the peer's own making), then zebra, then
    the captures, then (a lab) the loopback addresses."""
    rank = 2 if what.endswith("-zebra") else 1 if what.endswith("-bfdd") else 0
    return (not what.startswith("peer-"), what.startswith("loopback-"), rank)


class _LocalPeers:
    """Where the peers run on the embedded testbed: A's and B's namespaces of this machine, BIRD
    from the bird router image, files in the run directory."""

    where = "bird router image"
    clock = "this machine's CLOCK_REALTIME"

    def __init__(self, peers: Peers) -> None:
        self.p = peers

    def check(self) -> None:
        """This machine's needs were checked before the run (:func:`check`)."""

    def loopback(self, p: PeerSpec) -> None:
        """The announced address on the peer's loopback (gone with the namespace)."""
        with iproute(self.p.tb.ns(p.role)) as ipr:
            lo = ipr.link_lookup(ifname="lo")[0]
            addr, plen = p.announced.split("/")
            ipr.addr("add", index=lo, address=addr, prefixlen=int(plen))

    def bird_argv(self, role: str, conf: Path, text: str) -> list[str]:
        """BIRD of the bird image with its configuration ``conf`` (written here already)."""
        return bird_argv(bird_image_root(), conf, self.p.reg.dir / f"bird-{role}.ctl")

    def wait_logged(self, proc: Proc, role: str, text: str, timeout_s: float) -> None:
        """Wait until the peer's log holds ``text``."""
        proc.wait_for(text, timeout_s, path=self.p.dir / peer_log(role))

    def versions(self) -> dict[str, Any]:
        """The peer daemon's and tcpdump's versions on this machine."""
        return tool_versions(self.p.s.peer_daemon)


class _LabPeers:
    """Where the peers run on a lab: the hosts A and B over SSH, each process under the lab's
    guard; BIRD from the bird image that ``make hosts-setup`` unpacked there
    (:data:`LAB_BIRD_ROOT`), the host's tcpdump, the loopback address held by a guarded shell
    (:data:`LAB_LOOPBACK_SH`: removed when the peers stop or the channel closes).  Logs are
    read over SSH while the run waits on them."""

    clock = "each peer host's CLOCK_REALTIME; the analysis subtracts its measured offset"

    def __init__(self, peers: Peers) -> None:
        self.p = peers
        self.root = PurePosixPath(peers.tb.inventory.deploy_dir) / LAB_BIRD_ROOT
        self.where = f"unpacked by hosts-setup in {self.root} on A and B"

    def check(self) -> None:
        """What the lab's peer hosts need (DependencyError naming the host and the fix), before
        anything starts there."""
        tb = self.p.tb
        testbed = tb.inventory.path
        _, bird, _ = bird_paths(self.root)
        for p in peers():
            if not tb.exists(p.role, str(bird)):
                raise DependencyError(
                    f"{p.role}: {bird} missing (PEERING's BIRD on the lab's peer hosts): "
                    f"run make hosts-setup TESTBED={testbed}"
                )
            found = tb.hosts[p.role].run(["sh", "-c", 'command -v "$1"', "sh", TCPDUMP], check=False)
            if found.returncode != 0:
                raise DependencyError(
                    f"{p.role}: tcpdump missing (PEERING captures the control packets): "
                    f"run make hosts-setup TESTBED={testbed}"
                )

    def loopback(self, p: PeerSpec) -> None:
        """The announced address on the peer host's loopback, held by a guarded process (one of
        the peers' processes from its start: stopped with them)."""
        argv = ["sh", "-c", LAB_LOOPBACK_SH, "sh", p.announced]
        proc = self.p.tb.spawn(p.role, f"loopback-{p.role}", argv, self.p.reg, self.p.dir)
        self.p.procs[proc.what] = proc
        proc.wait_for("LOOPBACK-READY", 10.0)

    def bird_argv(self, role: str, conf: Path, text: str) -> list[str]:
        """BIRD unpacked on the host, with its own copy of the configuration."""
        there = self.p._path(role, conf.name)
        self.p.tb.write_atomic(role, there, text.encode())
        return bird_argv(self.root, there, self.p._path(role, f"bird-{role}.ctl"))

    def wait_logged(self, proc: Proc, role: str, text: str, timeout_s: float) -> None:
        """Wait until the peer's log on its host holds ``text`` (PeeringError if ``proc`` ends
        or ``timeout_s`` passes)."""
        deadline = time.monotonic() + timeout_s
        while text not in self.p._log_text(role):
            if not proc.alive():
                raise PeeringError(f"{proc.what} exited (status {proc.returncode()}): {proc.stderr_tail()}")
            if time.monotonic() > deadline:
                raise PeeringError(f"{proc.what} did not log {text.strip()!r} within {timeout_s:.0f} s")
            time.sleep(LOG_POLL_S * 4)

    def versions(self) -> dict[str, Any]:
        """BIRD is the bird image's (its manifest's version, as here); tcpdump is each peer
        host's own."""
        out: dict[str, Any] = {"bird": tool_versions("bird")["bird"], "tcpdump": {}}
        for p in peers():
            res = self.p.tb.hosts[p.role].run([TCPDUMP, "--version"], check=False)
            out["tcpdump"][p.role] = tcpdump_version(res.stdout.decode(errors="replace"))
        return out


class Peers:
    """The peers of one run: addresses on the peers' loopbacks, BIRD and tcpdump on A and B
    (registered by PID), the wait for the sessions, the stop; a ``with`` block stops them.

    On a lab the same runs on the hosts A and B over SSH (:class:`_LabPeers`); logs and
    captures are fetched into the run directory when the peers stop."""

    def __init__(self, s: Scenario, tb: Any, registry: Registry, run_dir: Path) -> None:
        self.s, self.tb, self.reg, self.dir = s, tb, registry, run_dir
        self.procs: dict[str, Proc] = {}
        self.established_ns: dict[str, int] = {}
        self.site: _LocalPeers | _LabPeers = _LabPeers(self) if getattr(tb, "remote", False) else _LocalPeers(self)

    # -- where things are: this machine, or a lab host ----------------------------------
    def _path(self, role: str, name: str) -> str:
        """The file ``name`` of the peer on ``role`` (the run directory, here or on the host)."""
        return self.tb.out_path(role, self.dir, name)

    def _log_text(self, role: str) -> str:
        """The peer's log as it is now ("" before it exists)."""
        data = self.tb.read_bytes(role, self._path(role, peer_log(role)))
        return "" if data is None else data.decode(errors="replace")

    def fetch(self) -> None:
        """Copy the peers' logs and captures from their hosts into the run directory (the
        embedded testbed's are there already: Testbed.fetch copies nothing).  What could not be
        fetched is logged with why; the analysis then notes the file missing and leaves the
        figures it carries absent."""
        for p in peers():
            for name in (peer_log(p.role), control_pcap(p.role)):
                try:
                    self.tb.fetch(p.role, self._path(p.role, name), self.dir / name)
                except Exception as err:  # a host lost at the end must not cost the other files
                    log.warning("could not fetch %s from %s: %s", name, p.role, err)

    def __enter__(self) -> Peers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        """Loopback addresses, captures (seen listening), then the BIRDs or the FRR daemons
        (PEER_DAEMON; seen started)."""
        self.site.check()
        for p in peers():
            self.site.loopback(p)
            argv = [
                TCPDUMP, "-i", self.tb.host_if(p.role), "-Z", "root", "-n", "-U", "-s", str(CAPTURE_SNAPLEN),
                "-j", "adapter_unsynced", "--time-stamp-precision", "nano",
                "-w", self._path(p.role, control_pcap(p.role)), CAPTURE_FILTER,
            ]  # fmt: skip
            cap = self.tb.spawn(p.role, f"capture-{p.role}", argv, self.reg, self.dir)
            self.procs[cap.what] = cap
            cap.wait_for("listening on", 10.0)
        for p in peers():
            if self.s.peer_daemon == "frr":
                self._start_frr(p)
                continue
            text = bird_conf(self.s, p, self._path(p.role, peer_log(p.role)), self.tb.host_if(p.role))
            conf = self.dir / f"peer-{p.role}.conf"
            conf.write_text(text)  # the record; a lab host gets its own copy
            argv = self.site.bird_argv(p.role, conf, text)
            proc = self.tb.spawn(p.role, f"peer-{p.role}", argv, self.reg, self.dir)
            self.procs[proc.what] = proc
            self.site.wait_logged(proc, p.role, " Started", 10.0)

    def _start_frr(self, p: PeerSpec) -> None:
        """The peer's FRR daemons (``peer-<role>-<daemon>``), each seen started: zebra once its
        zserv socket exists (the other daemons connect to it there, and retry only every 10 s
        when it is not), the others once zebra logs their hello."""
        loader, daemons, libs = frr_image_paths()
        log_path = self.dir / peer_log(p.role)
        state = self.reg.dir / f"frr-{p.role}"  # sockets and pid files (short paths: AF_UNIX)
        state.mkdir(mode=0o700)
        for daemon, text in frr_confs(self.s, p, log_path).items():
            conf = self.dir / f"peer-{p.role}.{daemon}.conf"
            conf.write_text(text)
            argv = frr_argv(loader, daemons, libs, daemon, conf, state)
            proc = self.tb.spawn(p.role, f"peer-{p.role}-{daemon}", argv, self.reg, self.dir)
            self.procs[proc.what] = proc
            if daemon == "zebra":
                deadline = time.monotonic() + FRR_START_TIMEOUT_S
                while not (state / "zserv.api").exists():
                    if not proc.alive() or time.monotonic() > deadline:
                        raise PeeringError(f"{proc.what} did not open its zserv socket: {proc.stderr_tail()}")
                    time.sleep(LOG_POLL_S)
            else:
                kind = daemon.removesuffix("d")
                proc.wait_for(f"bids fair to announce only {kind} routes", FRR_START_TIMEOUT_S, path=log_path)

    def wait_established(self, timeout_s: float = ESTABLISH_TIMEOUT_S) -> dict[str, int]:
        """Wait until every peer's BGP session is established (and, with bfd, its BFD session
        up), read from the logs with the parser the analysis uses; returns, per peer, the
        CLOCK_REALTIME ns BIRD logged for the later of the two."""
        self.established_ns = dict(self.wait_sessions_up(timeout_s, "READY").up_ns)
        return dict(self.established_ns)

    def ready_for_migration(self, timeout_s: float = REUP_TIMEOUT_S) -> dict[str, Any]:
        """Every session up right before the migration: a session of the busy router may flap
        in the lead-in (a TCG guest can miss a 150 ms BFD detection time), and migrating while
        it is down would measure nothing about the sessions.  Waits (observing the logs) until
        all are up again; meta.json ``peering.before_migration``: the flaps so far and how long
        the migration waited (0 when nothing had flapped).  PeeringError after ``timeout_s``."""
        t = time.monotonic()
        up = self.wait_sessions_up(timeout_s, "a flap before the migration")
        return {"flaps": up.flaps, "waited_s": round(time.monotonic() - t, 3), "up_ns": dict(up.up_ns)}

    def _logs(self) -> dict[str, list[LogEvent]]:
        return {p.role: parse_peer_log(self._log_text(p.role), self.s.peer_daemon) for p in peers()}

    def _check_alive(self) -> None:
        for what, p in self.procs.items():
            if not p.alive():
                raise PeeringError(f"{what} exited (status {p.returncode()}): {p.stderr_tail()}")

    def _state(self) -> tuple[dict[str, int | None], int]:
        routers = {p.role: p.router_addr for p in peers()}
        return sessions_state(self._logs(), routers, self.s.peering_protocols)

    def sessions_up(self) -> SessionsUp | None:
        """Every session of every peer up right now, as the peers' logs say (None: not yet);
        with FRR peers also the router's route to the sink, as A's log says
        (:func:`sink_route_held`)."""
        up, flaps = self._state()
        if any(t is None for t in up.values()):
            return None
        if self.s.peer_daemon == "frr" and sink_route_observable(self.s) and not self._sink_route_held():
            return None
        return SessionsUp({r: t for r, t in up.items() if t is not None}, flaps)

    def _sink_route_held(self) -> bool:
        text = self._log_text(SINK_OBSERVER)
        return sink_route_held(parse_peer_log(text, self.s.peer_daemon), self.s.peering_protocols)

    def wait_sessions_up(self, timeout_s: float, what: str = "") -> SessionsUp:
        """Wait until every session of every peer is up (polling the peers' logs with the
        analysis' parser); PeeringError naming the peers still down after ``timeout_s``
        (``what``: what they are waiting on, for the message), or naming a peer process that exited."""
        deadline = time.monotonic() + timeout_s
        while (found := self.sessions_up()) is None:
            self._check_alive()
            if time.monotonic() > deadline:
                down = ", ".join(sorted(r for r, t in self._state()[0].items() if t is None))
                names = "/".join(p.upper() for p in self.s.peering_protocols)
                if not down:
                    raise PeeringError(
                        f"the router's {names} sessions were up, but {SINK_OBSERVER} had not learned the route to"
                        f" {topo.addr(SINK_ROUTED)} from the router within {timeout_s:.0f} s"
                        f"{' after ' + what if what else ''} (see {peer_log(SINK_OBSERVER)} in the run directory)"
                    )
                raise PeeringError(
                    f"the router's {names} sessions with {down} were not up within {timeout_s:.0f} s"
                    f"{' after ' + what if what else ''} (see peer-<role>.log in the run directory)"
                )
            time.sleep(LOG_POLL_S)
        return found

    def stop(self) -> None:
        """The peers' daemons first (their last log lines; FRR's zebra after the others), then
        the captures (SIGINT: tcpdump flushes)."""
        for what in sorted(self.procs, key=_stop_rank):
            p = self.procs[what]
            if p.alive():
                p.stop(signal.SIGINT if what.startswith("capture-") else signal.SIGTERM, STOP_TIMEOUT_S)
        if self.procs:
            self.fetch()

    def describe(self) -> dict[str, Any]:
        """meta.json ``peering``."""
        where = self.site.where
        return {
            "protocols": list(self.s.peering_protocols),
            "implementation": {
                "peers": f"BIRD 2 ({where})"
                if self.s.peer_daemon == "bird"
                else f"FRR (frr router image: {', '.join(frr_daemons(self.s))})",
                "daemon": self.s.peer_daemon,
                "router": self.s.router,
            },
            "versions": self.site.versions(),
            "clock": self.site.clock,
            "router_asn": ROUTER_ASN,
            "peers": {
                p.role: {
                    "segment": p.segment,
                    "addr": p.addr,
                    "asn": p.asn,
                    "router_addr": p.router_addr,
                    "announced": p.announced,
                }
                for p in peers()
            },
            "cross_traffic_route": f"{SINK_ROUTED} announced by B over "
            + ("BGP" if "bgp" in self.s.peering_protocols else "OSPF (an external route)"),
            "timers": {
                "bgp_hold_s": self.s.bgp_hold_s,
                "bgp_keepalive_s": max(1, self.s.bgp_hold_s // 3),
                **(
                    {"bfd_interval_ms": self.s.bfd_interval_ms, "bfd_multiplier": self.s.bfd_multiplier}
                    if "bfd" in self.s.peering_protocols
                    else {}
                ),
                **(
                    {
                        "ospf_dead_s": self.s.ospf_dead_s,
                        "ospf_hello_s": self.s.ospf_hello_s,
                        "ospf_network": "point-to-point",
                    }
                    if "ospf" in self.s.peering_protocols
                    else {}
                ),
            },
            "established_ns": dict(self.established_ns),
            "capture_filter": CAPTURE_FILTER,
        }
