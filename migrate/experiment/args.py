"""The one set of argument converters of the ``vrmig`` command line, ``run``'s flags (one per Make
variable of ``make migrate``; campaign files use the same variables) and the Scenario built from
them.

Every converter names the Make variable in its error (``SIZE='x' is not a whole number``), so a
bad value gets one line that says which variable to fix; docs/bad-input.md lists them."""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from migrate.core.errors import ConfigError
from migrate.core.knobs import KNOBS, Knob, split_values
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
    return Scenario(
        hv=a.hv, mode=a.mode, rate_bps=rate_bps, frame_bytes=a.size, ip=a.ip,
        duration_s=a.duration, migrate_at_s=a.migrate_at, after_s=a.after,
        sample_ms=a.sample_ms, probe_ms=a.probe_ms, mem_mib=a.mem, router=a.router, nic=a.nic,
        accel=a.accel, gen=a.gen, miglink_bps=a.miglink, migrate_timeout_s=mig_timeout, boot_timeout_s=a.boot_timeout,
        fault=a.fault, driver=a.driver, xen_guest=getattr(a, "xen_guest", "pvh"),
        xen_mig_mtu=getattr(a, "xen_mig_mtu", 1500), criu_host=getattr(a, "criu_host", "local"),
        rib_routes=getattr(a, "rib_routes", 0), peering=getattr(a, "peering", ""),
        bfd_interval_ms=bfd[0], bfd_multiplier=bfd[1], bgp_hold_s=getattr(a, "bgp_hold", 9),
        ospf_dead_s=getattr(a, "ospf_dead", 4), peer_daemon=getattr(a, "peer_daemon", "bird"),
        dirty_mbps=getattr(a, "dirty", None), churn_rps=getattr(a, "churn", None),
        criu_rejoin_mcast=getattr(a, "criu_rejoin_mcast", False),
        qemu=getattr(a, "qemu", None), qemu_firmware=getattr(a, "qemu_firmware", None),
        libvirt=getattr(a, "libvirt", None),
        **knob_fields(a, axes),
    )  # fmt: skip


def add_run_arguments(r: argparse.ArgumentParser) -> None:
    """The flags of ``vrmig run`` (one per Make variable of ``make migrate``; campaign files use
    the same variables, see migrate.campaigns.campaign)."""
    r.add_argument("--hv", default="kvm", help="the router's hypervisor: kvm|criu|xen|openvz")
    r.add_argument("--driver", default="qmp", help="how HV=kvm is driven (DRIVER): qmp|libvirt")
    r.add_argument("--mode", default="precopy", help="precopy|stopcopy (MODE)")
    r.add_argument("--rate", type=rate("RATE"), default=None, help="cross-traffic bit/s, K/M/G (100M; HV=xen 1M)")
    r.add_argument("--size", type=whole("SIZE"), default=1500, help="Ethernet frame bytes 64-1518")
    r.add_argument("--ip", type=whole("IP"), default=4, help="4|6 for the cross-traffic and probes")
    r.add_argument("--duration", type=seconds("DURATION"), default=20.0, help="seconds of traffic (at least)")
    r.add_argument("--migrate-at", type=seconds("MIGRATE_AT"), default=5.0, help="seconds after traffic start")
    r.add_argument("--after", type=seconds("AFTER"), default=3.0, help="seconds of traffic after the migration")
    r.add_argument("--sample-ms", type=whole("SAMPLE_MS"), default=10, help="interface counter period ms (1-1000)")
    r.add_argument("--probe-ms", type=whole("PROBE_MS"), default=10, help="RTT probe period ms (1-1000)")
    r.add_argument("--mem", type=whole("MEM"), default=256, help="guest MiB")
    r.add_argument("--router", default="frr", help="frr|bird|xorp, or a release: frr@8.4, bird@2.0 (docs/stack.md)")
    r.add_argument("--nic", default="virtio", help="virtio|e1000")
    r.add_argument("--accel", default="auto", help="auto|kvm|tcg")
    r.add_argument("--gen", default="builtin", help="cross-traffic backend")
    r.add_argument("--miglink", type=rate("MIGLINK"), default=None, help="cap the migration link, e.g. 1G")
    add_knob_flags(r)  # DOWNTIME_LIMIT, MIGBW, ..., MULTIFD, ANNOUNCE, ... (migrate.core.knobs)
    r.add_argument("--migrate-timeout", type=seconds("MIGRATE_TIMEOUT"), default=None, help="s (120; HV=xen 600)")
    r.add_argument(
        "--boot-timeout", type=seconds("BOOT_TIMEOUT"), default=120.0, help="s to wait for the router's READY"
    )
    r.add_argument("--xen-guest", default="pvh", help="HV=xen domU type (XEN_GUEST): pvh (pv is refused)")
    r.add_argument("--xen-mig-mtu", type=whole("XEN_MIG_MTU"), default=1500, help="HV=xen: migration link MTU")
    r.add_argument("--rib-routes", type=whole("RIB_ROUTES"), default=0, help="routes in the router's RIB (bird)")
    r.add_argument(
        "--peering",
        default="",
        help="routing sessions with peers on both segments: bgp, ospf, bfd, comma-separated (bfd with bgp)",
    )
    r.add_argument("--bfd", default="50x3", help="BFD <interval ms>x<multiplier> (PEERING with bfd)")
    r.add_argument("--bgp-hold", type=whole("BGP_HOLD"), default=9, help="BGP hold time s (keepalive = hold/3)")
    r.add_argument("--ospf-dead", type=whole("OSPF_DEAD"), default=4, help="OSPF dead interval s (hello = dead/4)")
    r.add_argument("--peer-daemon", default="bird", help="the peers' routing daemon (PEERING): bird|frr")
    r.add_argument("--dirty", type=positive("DIRTY", "MB/s"), default=None, help="guest dirties MB/s (2^20 B)")
    r.add_argument("--churn", type=non_negative("CHURN", "route changes per second"), default=None,
                   help="B flaps routes at this rate (PEERING=bgp); 0: peers without flaps")  # fmt: skip
    r.add_argument(
        "--testbed",
        type=Path,
        default=None,
        help="an inventory of lab hosts reached over SSH (docs/testbed.md); default: the embedded testbed",
    )
    r.add_argument("--criu-host", default="local", help="HV=criu: local, or vm (a VM whose kernel has soft-dirty)")
    r.add_argument(
        "--criu-rejoin-mcast", type=boolean("CRIU_REJOIN_MCAST"), default=False,
        help="HV=criu: join the multicast groups the restore lost again, on the router's own OSPF socket (0/1)",
    )  # fmt: skip
    r.add_argument(
        "--qemu", default=None, metavar="QEMU",
        help="the QEMU of the router VM: system (the host's), a Debian release such as 10.0 or 10.0.13, or the "
        "path of your own build (default: 10.0; DRIVER=libvirt LIBVIRT=system: system; docs/stack.md)",
    )  # fmt: skip
    r.add_argument(
        "--qemu-firmware", default=None, metavar="QEMU_FIRMWARE", help="with QEMU=<path>: its data directory"
    )
    r.add_argument(
        "--libvirt",
        default=None,
        help="DRIVER=libvirt's libvirtd: system (the host's) or a Debian release (default 11.3)",
    )
    r.add_argument("--fault", default=None, help="inject a fault (chaos testing): " + ", ".join(FAULTS))
    r.add_argument("--results", type=Path, default=Path("results"), help="results root directory")
