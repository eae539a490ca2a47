"""The flags of ``vrmig baseline`` (= ``make baseline``), one per Make variable (campaign files
with ``command = "baseline"`` use the same variables), and the matrix built from them.

Every flag defaults to None so that, with --resume, only what the user gave explicitly is
compared with the stored matrix."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from migrate.baseline.spec import DEFAULTS, BaselineSpec, spec_from_strings
from migrate.core.convert import boolean, number, rate
from migrate.core.errors import ConfigError

# flag -> (spec field, Make variable, default) for the scalar parameters
SCALARS: dict[str, tuple[str, str, Any]] = {
    "duration": ("duration_s", "DURATION", 5.0),
    "load_rate": ("load_rate_bps", "LOAD_RATE", 10_000_000),
    "router": ("router", "ROUTER", "frr"),
    "accel": ("accel", "ACCEL", "auto"),
    "mem": ("mem_mib", "MEM", 256),
    "probe_ms": ("probe_ms", "PROBE_MS", 10),
    "gen_check": ("gen_check", "GEN_CHECK", True),
    "ndr_precision": ("ndr_precision", "NDR_PRECISION", 0.05),
    "boot_timeout": ("boot_timeout_s", "BOOT_TIMEOUT", 180.0),
}
LISTS = {  # flag -> spec field
    "hv": "hvs", "nic": "nics", "ip": "ips", "sizes": "sizes", "rates": "rates_bps", "routers": "routers",
    "load": "loads", "reps": "reps", "search": "search", "role": "roles", "proto": "protos",
}  # fmt: skip


_GEN_CHECK = boolean("GEN_CHECK", empty_is_false=False)


def add_parser(sub: Any) -> None:
    """The ``baseline`` subcommand."""
    b = sub.add_parser("baseline", help="forwarding baseline without migration (make baseline)")
    b.add_argument("--hv", help=f"none,kvm,criu (HV; default {DEFAULTS['hv']})")
    b.add_argument("--nic", help="virtio,e1000 (NIC; HV=kvm only)")
    b.add_argument("--ip", help="4|6|both (IP)")
    b.add_argument("--sizes", help=f"Ethernet frame bytes, e.g. 64,500,1000,1500 (SIZES; default {DEFAULTS['sizes']})")
    b.add_argument("--rates", help=f"per-router offered bit/s, K/M/G or max (RATES; default {DEFAULTS['rates']})")
    b.add_argument("--routers", help="co-located routers, e.g. 1,2,4,8 (ROUTERS)")
    b.add_argument("--load", help="none,idle,cpu,smallpkts neighbour (LOAD)")
    b.add_argument("--reps", help=f"repetitions per point (REPS; default {DEFAULTS['reps']})")
    b.add_argument("--search", help="none|ndr: also search the max loss-free rate (SEARCH)")
    b.add_argument("--role", help="router,vm-tx,vm-rx,vm-vm: the router forwards, or is the end host sending "
                                  "to B / receiving from A, or router 0 sends to router 1 (ROLE; default "
                                  "router)")  # fmt: skip
    b.add_argument("--proto", help="udp,tcp: vrgen's UDP CBR at every size, and/or one bulk TCP flow per router "
                                   "(PROTO; default udp)")  # fmt: skip
    b.add_argument("--duration", type=number("DURATION", float), help="seconds of traffic per point (5)")
    b.add_argument("--load-rate", type=rate("LOAD_RATE"), help="LOAD=smallpkts bit/s (10M)")
    b.add_argument("--router", help="router profile frr|bird (ROUTER)")
    b.add_argument("--accel", help="auto|kvm|tcg (ACCEL)")
    b.add_argument("--mem", type=number("MEM", int), help="guest MiB (256)")
    b.add_argument("--probe-ms", type=number("PROBE_MS", int), help="RTT probe interval ms (10)")
    b.add_argument(
        "--gen-check",
        type=_GEN_CHECK,
        help="1|0: refuse rates above the generator's capability (1)",
    )
    b.add_argument("--ndr-precision", type=number("NDR_PRECISION", float), help="relative NDR resolution (0.05)")
    b.add_argument("--boot-timeout", type=number("BOOT_TIMEOUT", float), help="seconds for a router VM to boot")
    b.add_argument("--resume", type=Path, default=None, help="results directory of an interrupted baseline (RESUME)")
    b.add_argument("--testbed", type=Path, default=None, help="TESTBED: run on the hosts of this lab inventory")
    b.add_argument("--results", type=Path, default=Path("results"), help="results root directory")


def spec_from_args(a: argparse.Namespace) -> BaselineSpec:
    """The matrix from the flags (defaults for what is not given)."""
    scalars = {
        field: default if getattr(a, flag) is None else getattr(a, flag)
        for flag, (field, _, default) in SCALARS.items()
    }
    return spec_from_strings({k: getattr(a, k) for k in DEFAULTS}, **scalars)


def resume_spec(a: argparse.Namespace, stored: BaselineSpec) -> BaselineSpec:
    """With --resume: the stored matrix; ConfigError if an explicitly given value differs."""
    given = spec_from_args(a)
    fields = {**LISTS, **{flag: field for flag, (field, _, _) in SCALARS.items()}}
    for flag, field in fields.items():
        if getattr(a, flag) is not None and getattr(given, field) != getattr(stored, field):
            raise ConfigError(
                f"RESUME uses the matrix stored in its meta.json: {flag.upper()} differs "
                f"({getattr(given, field)} vs stored {getattr(stored, field)}); drop it or start a new run"
            )
    return stored
