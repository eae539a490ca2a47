"""The one set of argument converters of the ``vrmig`` command line, ``run``'s flags (one per Make
variable of ``make migrate``; campaign files use the same variables) and the Scenario built from
them.

Every converter names the Make variable in its error (``SIZE='x' is not a whole number``), so a
bad value gets one line that says which variable to fix; docs/bad-input.md lists them."""

from __future__ import annotations

import argparse
import math
import re
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from migrate.core.errors import ConfigError
from migrate.core.knobs import KNOBS, Knob, docs_command, split_values
from migrate.core.units import parse_rate_bps
from migrate.model.scenario import FAULTS, Scenario, parse_bfd

#: HV=xen defaults: the nested router forwards little, and 256 MiB take ~40 s at nested-link speed
XEN_DEFAULT_RATE_BPS = 1_000_000
XEN_DEFAULT_MIGRATE_TIMEOUT_S = 600.0

T = TypeVar("T")


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are ConfigErrors naming the Make variable of the flag."""

    def error(self, message: str) -> None:  # type: ignore[override]
        # "argument --migrate-at: ..." -> "MIGRATE_AT (--migrate-at): ...", named as in the Makefile
        m = re.match(r"argument (--[\w-]+)(?:/\S+)?: (.*)", message)
        if m:
            var = m.group(1).lstrip("-").replace("-", "_").upper()
            hint = " (a negative value is not allowed)" if "expected one argument" in m.group(2) else ""
            message = f"{var} ({m.group(1)}): {m.group(2)}{hint}"
        raise ConfigError(message)


def whole(name: str) -> Callable[[str], int]:
    """Converter to int; the error names ``name``."""
    return number(name, int)


def converter(kind: Callable[[str], T], message: Callable[[str], str]) -> Callable[[str], T]:
    """Converter by ``kind``; a text it rejects with ValueError is a ConfigError saying ``message(text)``."""

    def conv(text: str) -> T:
        try:
            return kind(text)
        except ValueError:
            raise ConfigError(message(text)) from None

    return conv


def number(name: str, kind: type) -> Callable[[str], Any]:
    """Converter to ``kind`` (int or float); the error names ``name``."""
    return converter(kind, lambda text: f"{name}={text!r} is not a {'whole ' if kind is int else ''}number")


def seconds(name: str) -> Callable[[str], float]:
    """Converter to float seconds; the error names ``name``."""
    return converter(float, lambda text: f"{name}={text!r} is not a number of seconds")


def _bounded(name: str, unit: str, ok: Callable[[float], bool], requirement: str) -> Callable[[str], float]:
    """Converter to a float in ``unit`` that ``ok`` accepts; the errors name ``name`` and say
    ``requirement``."""
    read = converter(float, lambda text: f"{name}={text!r} is not a number of {unit}")

    def conv(text: str) -> float:
        v = read(text)
        if not ok(v):
            raise ConfigError(f"{name}={text!r} must be {requirement}")
        return v

    return conv


def non_negative(name: str, unit: str) -> Callable[[str], float]:
    """Converter to a finite float of 0 or more in ``unit``; the error names ``name``."""
    return _bounded(name, unit, lambda v: 0 <= v < math.inf, "0 or more")


def positive(name: str, unit: str) -> Callable[[str], float]:
    """Converter to a float above 0 in ``unit`` (e.g. "milliseconds"); the error names ``name``."""
    return _bounded(name, unit, lambda v: v > 0, "above 0")


def names(name: str, example: str) -> Callable[[str], list[str]]:
    """Converter of a comma-separated list of names (order kept, repeats dropped, at least one);
    the error names ``name`` and shows ``example``."""

    def conv(text: str) -> list[str]:
        out = [p.strip() for p in text.split(",") if p.strip()]
        if not out:
            raise ConfigError(f"{name}={text!r}: give at least one name, e.g. {example}")
        return list(dict.fromkeys(out))

    return conv


def rate(name: str) -> Callable[[str], int]:
    """Converter of ``500M``-style rates to bit/s; the error names ``name``."""
    return lambda text: parse_rate_bps(text, name)


def boolean(name: str | None = None, *, empty_is_false: bool = True) -> Callable[[str], bool]:
    """Converter of 1/0, yes/no, true/false, on/off; the error names ``name`` if given."""
    false = ("0", "no", "false", "off", "") if empty_is_false else ("0", "no", "false", "off")

    def conv(text: str) -> bool:
        if text.lower() in ("1", "yes", "true", "on"):
            return True
        if text.lower() in false:
            return False
        raise ConfigError(f"{name + '=' if name else ''}{text!r} is not a boolean: use 1 or 0")

    return conv


def knob_dest(knob: Knob) -> str:
    """The argparse destination of a knob's flag (``--multifd-compression`` -> multifd_compression)."""
    return knob.flag.replace("-", "_")


def add_knob_flags(p: argparse.ArgumentParser) -> None:
    """The flags of QEMU's migration knobs (migrate.core.knobs); their text is read by
    :func:`knob_fields` (one value) and the sweep (a list of values: an axis)."""
    for k in KNOBS:
        p.add_argument(f"--{k.flag}", dest=knob_dest(k), default=None, metavar=k.var, help=k.help)


def knob_values(a: argparse.Namespace) -> list[tuple[Knob, list[str]]]:
    """Each knob flag given, with its list of values' text (``MULTIFD=1,4`` -> ['1', '4'])."""
    out = []
    for k in KNOBS:
        text = getattr(a, knob_dest(k), None)
        if text is not None and str(text).strip() != "":
            out.append((k, split_values(k, str(text))))
    return out


def knob_fields(a: argparse.Namespace, axes: bool = False) -> dict[str, Any]:
    """Scenario fields of the knob flags.  A list of values makes a variable an axis of ``make
    sweep``; ``make migrate`` takes one value (with ``axes``, the list's first value is taken:
    the sweep's template)."""
    fields: dict[str, Any] = {}
    for k, values in knob_values(a):
        if len(values) > 1 and not axes:
            raise ConfigError(
                f"{k.var}={getattr(a, knob_dest(k))} lists {len(values)} values: a list is an axis of make sweep, "
                "make migrate takes one value"
            )
        fields.update(k.parse(values[0]))
    return fields


def scenario_from_args(a: argparse.Namespace, axes: bool = False) -> Scenario:
    """Build (and validate) the Scenario from ``run``'s parsed flags (``axes``: see knob_fields)."""
    xen = a.hv == "xen"
    rate_bps = a.rate if a.rate is not None else (XEN_DEFAULT_RATE_BPS if xen else parse_rate_bps("100M"))
    mig_timeout = (
        a.migrate_timeout if a.migrate_timeout is not None else (XEN_DEFAULT_MIGRATE_TIMEOUT_S if xen else 120.0)
    )
    bfd = parse_bfd(getattr(a, "bfd", "50x3"))
    fields = {v.field_name: getattr(a, v.dest, v.default) for v in RUN_VARS if v.field_name is not None}
    return Scenario(
        **fields,
        rate_bps=rate_bps,
        migrate_timeout_s=mig_timeout,
        bfd_interval_ms=bfd[0],
        bfd_multiplier=bfd[1],
        **knob_fields(a, axes),
    )


@dataclass(frozen=True)
class RunVar:
    """One variable of ``make migrate`` (its flag of ``vrmig run``; a campaign file's variable of
    the same name) that is not a QEMU knob (those are migrate.core.knobs'): the flag, how a value
    is read (``type``), its default, its help (``--help``, ``make help``), the Scenario field it
    sets (``field``: "" = the flag's name; None = none, read by :func:`scenario_from_args` itself
    or not the scenario's), and its row of docs/migrate.md's table of variables (``doc``,
    ``doc_default``; :func:`doc_table`).  A variable is declared here once."""

    flag: str
    default: Any = None
    type: Callable[[str], Any] | None = None
    field: str | None = ""
    metavar: str | None = None
    help: str = ""
    doc: str = ""
    doc_default: str = ""

    @property
    def var(self) -> str:
        """Its Make variable (the metavar, else the flag in capitals: ``--migrate-at`` -> MIGRATE_AT)."""
        return self.metavar or self.flag.removeprefix("--").upper().replace("-", "_")

    @property
    def dest(self) -> str:
        """Its argparse destination."""
        return self.flag.removeprefix("--").replace("-", "_")

    @property
    def field_name(self) -> str | None:
        """The Scenario field it sets, or None."""
        return self.dest if self.field == "" else self.field

    def add_to(self, p: argparse.ArgumentParser) -> None:
        """Add its flag to ``p``."""
        extra: dict[str, Any] = {} if self.metavar is None else {"metavar": self.metavar}
        p.add_argument(self.flag, type=self.type, default=self.default, help=self.help, **extra)


#: the variables whose flags come before the knobs' in ``--help``
RUN_VARS_BEFORE_KNOBS: tuple[RunVar, ...] = (
    RunVar(
        "--hv",
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
        default=10,
        type=whole("SAMPLE_MS"),
        help="interface counter period ms (1-1000)",
        doc="counter sampling period",
        doc_default="`10`",
    ),
    RunVar(
        "--probe-ms",
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
        help="guest MiB",
        doc="guest MiB (1 vCPU, as in the paper)",
        doc_default="`256`",
    ),
    RunVar(
        "--router",
        default="frr",
        help="frr|bird|xorp, or a release: frr@8.4, bird@2.0 (docs/stack.md)",
        doc="`frr` (zebra+staticd), `bird`, or `xorp` (only where installed)",
        doc_default="`frr`",
    ),
    RunVar(
        "--nic",
        default="virtio",
        help="virtio|e1000",
        doc="`virtio` or `e1000`",
        doc_default="`virtio`",
    ),
    RunVar(
        "--accel",
        default="auto",
        help="auto|kvm|tcg",
        doc="`auto` (KVM where usable, else TCG), `kvm`, `tcg`; the one used is in `meta.json`",
        doc_default="`auto`",
    ),
    RunVar(
        "--gen",
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
        default="pvh",
        help="HV=xen domU type (XEN_GUEST): pvh (pv is refused)",
        doc="`HV=xen`: the domU type; `pvh` (`pv` is refused: Debian's Xen has no shadow paging)",
        doc_default="`pvh`",
    ),
    RunVar(
        "--xen-mig-mtu",
        default=1500,
        type=whole("XEN_MIG_MTU"),
        help="HV=xen: migration link MTU",
        doc="`HV=xen`: MTU of the migration link (dom0 NICs, outer taps, bridge and veth)",
        doc_default="`1500`",
    ),
    RunVar(
        "--rib-routes",
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
        default=None,
        metavar="QEMU_FIRMWARE",
        help="with QEMU=<path>: its data directory",
        doc="with `QEMU=<path>`: its data directory, when it is not beside the binary",
        doc_default="found",
    ),
    RunVar(
        "--libvirt",
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


def add_run_arguments(r: argparse.ArgumentParser) -> None:
    """The flags of ``vrmig run`` (:data:`RUN_VARS` and the knobs'), but for its own
    (:func:`add_run_only_arguments`)."""
    for v in RUN_VARS_BEFORE_KNOBS:
        v.add_to(r)
    add_knob_flags(r)  # DOWNTIME_LIMIT, MIGBW, ..., MULTIFD, ANNOUNCE, ... (migrate.core.knobs)
    for v in RUN_VARS_AFTER_KNOBS:
        v.add_to(r)


def add_run_only_arguments(r: argparse.ArgumentParser) -> None:
    """The flags of ``vrmig run`` that sweep and ab do not take (after those copied run's)."""
    for v in RUN_ONLY_VARS:
        v.add_to(r)


def _variables_table() -> str:
    """docs/migrate.md's table of the variables that are not knobs, from RUN_VARS."""
    rows = [f"| `{v.var}` | {v.doc} | {v.doc_default} |" for v in RUN_VARS]
    return "\n".join(["| variable | meaning | default |", "|---|---|---|", *rows])


def _flags_text() -> str:
    """docs/migrate.md's list of ``vrmig run``'s flags of those variables, from RUN_VARS."""
    shared = " ".join(v.flag for v in RUN_VARS_BEFORE_KNOBS + RUN_VARS_AFTER_KNOBS)
    own = " ".join(v.flag for v in RUN_ONLY_VARS)
    text = f"`{shared}`, and `run`'s alone (not `sweep`'s or `ab`'s): `{own}`"
    return textwrap.fill(text, 100, break_on_hyphens=False, break_long_words=False)


#: docs/migrate.md's sections made from RUN_VARS, by marker name
DOC_TABLES = {"run-variables": _variables_table, "run-flags": _flags_text}


def main(argv: list[str] | None = None) -> int:
    """``docs``: write docs/migrate.md's tables of the variables from RUN_VARS (``--check``: only compare)."""
    return docs_command(argv, "python -m migrate.experiment.args", DOC_TABLES, "variable", "RUN_VARS")


if __name__ == "__main__":
    raise SystemExit(main())
