"""The variables of ``make migrate`` that are not QEMU knobs (those are migrate.core.knobs'), each
declared once: its flag of ``vrmig run``, how a value is read, its default, its help, the
Scenario field it sets and its row of docs/migrate.md.  migrate.experiment.args makes the
command line and the docs from :data:`RUN_VARS`; :class:`migrate.model.scenario.Scenario` takes
its fields' defaults from it (:func:`default`)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from migrate.core.convert import boolean, non_negative, positive, rate, seconds, whole

#: FAULT= (docs/bad-input.md "Faults"; migrate.model.faults injects them)
FAULTS = ("dst-qemu-dies", "src-qemu-dies", "link-down", "link-cap", "guest-never-ready", "gen-dies", "dst-unplugged")


@dataclass(frozen=True)
class RunVar:
    """One variable of ``make migrate`` (its flag of ``vrmig run``; a campaign file's variable of
    the same name) that is not a QEMU knob (those are migrate.core.knobs'): the flag, how a value
    is read (``type``), its default, its help (``--help``, ``make help``), the Scenario field it
    sets (``field``; None: none, read by migrate.experiment.args.scenario_from_args itself or not
    the scenario's), and its row of docs/migrate.md's table of variables (``doc``,
    ``doc_default``; ``python -m migrate.experiment.args docs`` writes it).  A variable is
    declared here once."""

    flag: str
    default: Any = None
    type: Callable[[str], Any] | None = None
    field: str | None = None
    metavar: str | None = None
    help: str = ""
    doc: str = ""
    doc_default: str = ""
    #: a ``[hardware]`` field of a router profile file (routers.profile_file.Hardware) that gives
    #: the value when the variable is not set and ROUTER= names a profile file
    from_profile: str | None = None

    @property
    def var(self) -> str:
        """Its Make variable (the metavar, else the flag in capitals: ``--migrate-at`` -> MIGRATE_AT)."""
        return self.metavar or self.flag.removeprefix("--").upper().replace("-", "_")

    @property
    def dest(self) -> str:
        """Its argparse destination."""
        return self.flag.removeprefix("--").replace("-", "_")

    def add_to(self, p: argparse.ArgumentParser) -> None:
        """Add its flag to ``p``."""
        extra: dict[str, Any] = {} if self.metavar is None else {"metavar": self.metavar}
        # a variable a profile can give stays None when unset, so that the profile's value wins
        # over the default (:func:`unset_from_profile`)
        default = None if self.from_profile else self.default
        p.add_argument(self.flag, type=self.type, default=default, help=self.help, **extra)


#: the variables whose flags come before the knobs' in ``--help``
RUN_VARS_BEFORE_KNOBS: tuple[RunVar, ...] = (
    RunVar(
        "--hv",
        field="hv",
        default="kvm",
        help="the router's hypervisor: kvm|criu|xen|openvz",
        doc=(
            "hypervisor driver (`kvm`: QEMU over QMP; `criu`: the router as a container, moved by CRIU, see "
            "[HV=criu](hypervisors.md#hvcriu); `xen`: `xl migrate` between nested Xen hosts, see "
            "[HV=xen](hypervisors.md#hvxen); `openvz`: `vzmigrate` on OpenVZ/Virtuozzo hosts, see "
            "[HV=openvz](hypervisors.md#hvopenvz))"
        ),
        doc_default="`kvm`",
    ),
    RunVar(
        "--driver",
        field="driver",
        default="qmp",
        help="how HV=kvm is driven (DRIVER): qmp|libvirt",
        doc=(
            "how `HV=kvm` is driven: `qmp` (QEMU over QMP) or `libvirt` (two libvirtd hosts, peer-to-peer; see "
            "[DRIVER=libvirt](hypervisors.md#driverlibvirt))"
        ),
        doc_default="`qmp`",
    ),
    RunVar(
        "--mode",
        field="mode",
        default="precopy",
        help="precopy|stopcopy (MODE)",
        doc="`precopy` (QEMU's iterative pre-copy) or `stopcopy` (QMP `stop`, migrate, `cont` on R2, `announce-self`)",
        doc_default="`precopy`",
    ),
    RunVar(
        "--rate",
        default=None,
        type=rate("RATE"),
        field=None,
        help="cross-traffic bit/s, K/M/G (100M; HV=xen 1M)",
        doc="cross-traffic A→B in bit/s of Ethernet frames, K/M/G suffixes; `0` = none",
        doc_default="`100M` (`HV=xen`: `1M`)",
    ),
    RunVar(
        "--size",
        default=1500,
        type=whole("SIZE"),
        field="frame_bytes",
        help="Ethernet frame bytes 64-1518",
        doc="Ethernet frame bytes incl. FCS, 64–1518",
        doc_default="`1500`",
    ),
    RunVar(
        "--ip",
        field="ip",
        default=4,
        type=whole("IP"),
        help="4|6 for the cross-traffic and probes",
        doc="`4` or `6` for cross-traffic and probes",
        doc_default="`4`",
    ),
    RunVar(
        "--duration",
        default=20.0,
        type=seconds("DURATION"),
        field="duration_s",
        help="seconds of traffic (at least)",
        doc="seconds of traffic at least (extended so that `AFTER` s follow the migration)",
        doc_default="`20`",
    ),
    RunVar(
        "--migrate-at",
        default=5.0,
        type=seconds("MIGRATE_AT"),
        field="migrate_at_s",
        help="seconds after traffic start",
        doc="seconds after traffic start when the migration starts",
        doc_default="`5`",
    ),
    RunVar(
        "--after",
        default=3.0,
        type=seconds("AFTER"),
        field="after_s",
        help="seconds of traffic after the migration",
        doc="seconds of traffic after the migration ends",
        doc_default="`3`",
    ),
    RunVar(
        "--sample-ms",
        field="sample_ms",
        default=10,
        type=whole("SAMPLE_MS"),
        help="interface counter period ms (1-1000)",
        doc="counter sampling period",
        doc_default="`10`",
    ),
    RunVar(
        "--probe-ms",
        field="probe_ms",
        default=10,
        type=whole("PROBE_MS"),
        help="RTT probe period ms (1-1000)",
        doc="RTT probe interval (irtt)",
        doc_default="`10`",
    ),
    RunVar(
        "--mem",
        default=256,
        type=whole("MEM"),
        field="mem_mib",
        help="guest MiB (default 256, or a profile's [hardware] mem_mib)",
        doc="guest MiB",
        doc_default="`256`; a profile file's `[hardware] mem_mib`",
        from_profile="mem_mib",
    ),
    RunVar(
        "--vcpus",
        field="vcpus",
        default=1,
        type=whole("VCPUS"),
        help="the router VM's vCPUs, 1-64 (HV=kvm, xen; default 1, or a profile's [hardware] vcpus)",
        doc="the router VM's vCPUs, 1–64 (`HV=kvm`, `HV=xen`; the paper's guest has 1)",
        doc_default="`1`; a profile file's `[hardware] vcpus`",
        from_profile="vcpus",
    ),
    RunVar(
        "--router",
        field="router",
        default="frr",
        help="frr|bird|xorp, or a release: frr@8.4, bird@2.0 (docs/stack.md)",
        doc="`frr` (zebra+staticd), `bird`, or `xorp` (only where installed)",
        doc_default="`frr`",
    ),
    RunVar(
        "--nic",
        field="nic",
        default="virtio",
        help="virtio|e1000 (default virtio, or a profile's [hardware] nic)",
        doc="`virtio` or `e1000`",
        doc_default="`virtio`; a profile file's `[hardware] nic`",
        from_profile="nic",
    ),
    RunVar(
        "--accel",
        field="accel",
        default="auto",
        help="auto|kvm|tcg",
        doc="`auto` (KVM where usable, else TCG), `kvm`, `tcg`; the one used is in `meta.json`",
        doc_default="`auto`",
    ),
    RunVar(
        "--traffic",
        field="traffic",
        default="udp",
        help=(
            "traffic mix: udp[:M][,dir=both][,sizes=imix], tcp[:N][,cc=bbr][,rate=20M], "
            "rr[:N],rate=TPS[,req=B][,resp=B], joined by +"
        ),
        doc=(
            "the traffic mix: `udp[:M][,dir=both][,sizes=imix|S:W/…]` (the CBR of `RATE`/`SIZE` as M flows, "
            "optionally B→A as well and a frame-size mix), `tcp[:N][,cc=NAME][,rate=R]` (N bulk TCP "
            "flows A→B), `rr[:N],rate=TPS[,req=B][,resp=B]` (TCP request/response), joined by `+` "
            "([docs/traffic.md](traffic.md))"
        ),
        doc_default="`udp`",
    ),
    RunVar(
        "--gen",
        field="gen",
        default="builtin",
        help="cross-traffic backend",
        doc=(
            "cross-traffic backend: `builtin` (vrgen/vrsink), `iperf3`, `ditg`, `trafgen` (see "
            "[crosstraffic/README.md](../crosstraffic/README.md#python-backends)); only `builtin` writes the "
            "send-time histograms"
        ),
        doc_default="`builtin`",
    ),
    RunVar(
        "--miglink",
        default=None,
        type=rate("MIGLINK"),
        field="miglink_bps",
        help="cap the migration link, e.g. 1G",
        doc="cap the R1–R2 migration link with tbf, e.g. `1G`",
        doc_default="uncapped veth",
    ),
)
#: those after the knobs'
RUN_VARS_AFTER_KNOBS: tuple[RunVar, ...] = (
    RunVar(
        "--migrate-timeout",
        default=None,
        type=seconds("MIGRATE_TIMEOUT"),
        field=None,
        help="s (120; HV=xen 600)",
        doc="seconds before the migration is cancelled and recorded as failed",
        doc_default="`120` (`HV=xen`: `600`)",
    ),
    RunVar(
        "--boot-timeout",
        default=120.0,
        type=seconds("BOOT_TIMEOUT"),
        field="boot_timeout_s",
        help="s to wait for the router's READY",
        doc="seconds for the router guest to print `VRMIG-READY`",
        doc_default="`120`",
    ),
    RunVar(
        "--xen-guest",
        field="xen_guest",
        default="pvh",
        help="HV=xen domU type (XEN_GUEST): pvh (pv is refused)",
        doc="`HV=xen`: the domU type; `pvh` (`pv` is refused: Debian's Xen has no shadow paging)",
        doc_default="`pvh`",
    ),
    RunVar(
        "--xen-mig-mtu",
        field="xen_mig_mtu",
        default=1500,
        type=whole("XEN_MIG_MTU"),
        help="HV=xen: migration link MTU",
        doc="`HV=xen`: MTU of the migration link (dom0 NICs, outer taps, bridge and veth)",
        doc_default="`1500`",
    ),
    RunVar(
        "--rib-routes",
        field="rib_routes",
        default=0,
        type=whole("RIB_ROUTES"),
        help="routes in the router's RIB (bird)",
        doc=(
            "routes held in the router's routing table (`ROUTER=bird`): N unreachable /128s in 2001:2:0:ff::/64, "
            "in BIRD's RIB only (never exported to the kernel, never used by traffic); routing state of a chosen "
            "size to migrate (an Internet BGP table is ≈ 1 M routes; 200 k take ≈ 60 MB, 500 k ≈ 150 MB in BIRD "
            "2.0). VM guests need `MEM` to hold it"
        ),
        doc_default="`0`",
    ),
    RunVar(
        "--peering",
        field="peering",
        default="",
        help="routing sessions with peers on both segments: bgp, ospf, bfd, comma-separated (bfd with bgp)",
        doc=(
            "routing sessions with peers (BIRD, or FRR with `PEER_DAEMON=frr`) on both segments: any of `bgp`, "
            "`ospf`, `bfd` (bfd needs bgp; HV=kvm, criu or xen, ROUTER=frr or bird, IP=4); the cross-traffic then"
            " follows a route learned over BGP, or OSPF without BGP ([peering.md](peering.md))"
        ),
        doc_default="none",
    ),
    RunVar(
        "--bfd",
        default="50x3",
        field=None,
        help="BFD <interval ms>x<multiplier> (PEERING with bfd)",
        doc="BFD interval (ms) × detect multiplier, with `PEERING=bgp,bfd`",
        doc_default="`50x3`",
    ),
    RunVar(
        "--bgp-hold",
        default=9,
        type=whole("BGP_HOLD"),
        field="bgp_hold_s",
        help="BGP hold time s (keepalive = hold/3)",
        doc="BGP hold time in s (keepalive = hold / 3), with `PEERING`",
        doc_default="`9`",
    ),
    RunVar(
        "--ospf-dead",
        default=4,
        type=whole("OSPF_DEAD"),
        field="ospf_dead_s",
        help="OSPF dead interval s (hello = dead/4)",
        doc="OSPF router dead interval in s (hello = dead / 4, at least 1 s), with `PEERING=...ospf`",
        doc_default="`4`",
    ),
    RunVar(
        "--peer-daemon",
        field="peer_daemon",
        default="bird",
        help="the peers' routing daemon (PEERING): bird|frr",
        doc=(
            "the peers' routing daemon with `PEERING`: `bird` (BIRD 2) or `frr` (FRR's zebra, bgpd, ospfd, bfdd "
            "from the frr image; [peering.md](peering.md#peer-daemon-peer_daemon))"
        ),
        doc_default="`bird`",
    ),
    RunVar(
        "--dirty",
        default=None,
        type=positive("DIRTY", "MB/s"),
        field="dirty_mbps",
        help="guest dirties MB/s (2^20 B)",
        doc=(
            "the guest dirties memory at this rate in MB/s (MB = 2^20 B, QEMU's dirty-rate unit) from READY on; "
            "HV=kvm, at most `MEM`/2 ([Dirty rate](#dirty-rate-dirty))"
        ),
        doc_default="none",
    ),
    RunVar(
        "--churn",
        default=None,
        type=non_negative("CHURN", "route changes per second"),
        field="churn_rps",
        help="B flaps routes at this rate (PEERING=bgp); 0: peers without flaps",
        doc=(
            "route changes per second at B, the peer on segment R (half announcements, half withdrawals), so that"
            " the router's daemons keep writing memory; with `PEERING=bgp`; `0`: the peers without flaps "
            "([peering.md](peering.md#route-churn-churn))"
        ),
        doc_default="none",
    ),
    RunVar(
        "--testbed",
        default=None,
        type=Path,
        field=None,
        help="an inventory of lab hosts reached over SSH (docs/testbed.md); default: the embedded testbed",
        doc=(
            "an inventory of lab hosts reached over SSH: the run goes on their hosts instead of the embedded "
            "testbed ([testbed.md](testbed.md))"
        ),
        doc_default="the embedded testbed",
    ),
    RunVar(
        "--criu-host",
        field="criu_host",
        default="local",
        help="HV=criu: local, or vm (a VM whose kernel has soft-dirty)",
        doc=(
            "`HV=criu`: `local`, or `vm` (the whole experiment in a VM booting Debian's kernel with soft-dirty "
            "tracking, see [CRIU_HOST=vm](hypervisors.md#criu_hostvm))"
        ),
        doc_default="`local`",
    ),
    RunVar(
        "--criu-rejoin-mcast",
        field="criu_rejoin_mcast",
        default=False,
        type=boolean("CRIU_REJOIN_MCAST"),
        help="HV=criu: join the multicast groups the restore lost again, on the router's own OSPF socket (0/1)",
        doc=(
            "`HV=criu`: `1` joins the multicast groups the restore lost again, on the restored router's own OSPF "
            "socket (an intervention; see [HV=criu](hypervisors.md#hvcriu))"
        ),
        doc_default="`0`",
    ),
    RunVar(
        "--qemu",
        field="qemu",
        default=None,
        metavar="QEMU",
        help=(
            "the QEMU of the router VM: system (the host's), a Debian release such as 10.0 or 10.0.13, or the "
            "path of your own build (default: 10.0; DRIVER=libvirt LIBVIRT=system: system; docs/stack.md)"
        ),
        doc=(
            "the QEMU that runs the router VM: `system` (the host's), a Debian release (`10.0`, `10.0.13`, "
            "`11.1`; fetched privately, never installed) or the path of your own build ([stack.md](stack.md))"
        ),
        doc_default="`10.0` (`DRIVER=libvirt`, labs: `system`)",
    ),
    RunVar(
        "--qemu-firmware",
        field="qemu_firmware",
        default=None,
        metavar="QEMU_FIRMWARE",
        help="with QEMU=<path>: its data directory",
        doc="with `QEMU=<path>`: its data directory, when it is not beside the binary",
        doc_default="found",
    ),
    RunVar(
        "--libvirt",
        field="libvirt",
        default=None,
        help="DRIVER=libvirt's libvirtd: system (the host's) or a Debian release (default 11.3)",
        doc=(
            "`DRIVER=libvirt`'s libvirtd: `system` (the host's) or a Debian release, fetched privately and run "
            "as the run's own daemons ([stack.md](stack.md))"
        ),
        doc_default="`11.3` (labs: the hosts' own)",
    ),
    RunVar(
        "--fault",
        field="fault",
        default=None,
        help="inject a fault (chaos testing): " + ", ".join(FAULTS),
        doc="inject a fault for chaos testing (see [bad-input.md](bad-input.md#faults-fault-used-by-make-chaos))",
        doc_default="none",
    ),
    RunVar(
        "--results",
        default=Path("results"),
        type=Path,
        field=None,
        help="results root directory",
        doc="results root",
        doc_default="`results`",
    ),
)
#: ``vrmig run``'s own: not flags of sweep and ab, which copy run's (added after they did)
RUN_ONLY_VARS: tuple[RunVar, ...] = (
    RunVar(
        "--metrics",
        default=None,
        type=Path,
        field=None,
        help="also write the run's OpenMetrics text (its metrics.prom: docs/data-formats.md) to this file",
        doc=(
            "after the run, also write its `metrics.prom` (the figures as OpenMetrics text for node_exporter's "
            "textfile collector, [data-formats.md](data-formats.md#metricsprom-openmetrics)) to this file; a path "
            "that cannot be written is refused before anything starts"
        ),
        doc_default="none",
    ),
)
RUN_VARS = RUN_VARS_BEFORE_KNOBS + RUN_VARS_AFTER_KNOBS + RUN_ONLY_VARS


def unset_from_profile(values: dict[str, Any], router: str) -> dict[str, Any]:
    """``values`` (Scenario field -> value of its variable, None where unset) with each unset
    variable that a router profile can give (:attr:`RunVar.from_profile`) taken from ROUTER='s
    profile file when it has the field, else the variable's default: ``ROUTER=x.toml`` alone runs
    with the memory, vCPUs and NIC model the profile asks for.  A profile's mistakes raise its
    ConfigError here as everywhere."""
    from routers.profile_file import router_profile

    unset = [v for v in RUN_VARS if v.from_profile and v.field and values.get(v.field) is None]
    if not unset:
        return values
    profile = router_profile(router)
    out = dict(values)
    for v in unset:
        given = getattr(profile.hardware, v.from_profile) if profile is not None else None
        out[v.field] = given if given is not None else v.default  # type: ignore[index]
    return out


def default(field: str) -> Any:
    """The default of Scenario field ``field`` as the table declares it."""
    for v in RUN_VARS:
        if v.field == field:
            return v.default
    raise KeyError(f"no variable sets Scenario.{field}")
