"""The one set of argument converters of the ``vrmig`` command line, and the Scenario built from
``run``'s flags.

Every converter names the Make variable in its error (``SIZE='x' is not a whole number``), so a
bad value gets one line that says which variable to fix; docs/bad-input.md lists them."""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from typing import Any

from migrate.core.errors import ConfigError
from migrate.core.units import parse_rate_bps
from migrate.experiment.scenario import Scenario, parse_bfd

#: HV=xen defaults: the nested router forwards little, and 256 MiB take ~40 s at nested-link speed
XEN_DEFAULT_RATE_BPS = 1_000_000
XEN_DEFAULT_MIGRATE_TIMEOUT_S = 600.0


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


def number(name: str, kind: type) -> Callable[[str], Any]:
    """Converter to ``kind`` (int or float); the error names ``name``."""

    def conv(text: str) -> Any:
        try:
            return kind(text)
        except ValueError:
            raise ConfigError(f"{name}={text!r} is not a {'whole ' if kind is int else ''}number") from None

    return conv


def seconds(name: str) -> Callable[[str], float]:
    """Converter to float seconds; the error names ``name``."""

    def conv(text: str) -> float:
        try:
            return float(text)
        except ValueError:
            raise ConfigError(f"{name}={text!r} is not a number of seconds") from None

    return conv


def positive(name: str, unit: str) -> Callable[[str], float]:
    """Converter to a float above 0 in ``unit`` (e.g. "milliseconds"); the error names ``name``."""

    def conv(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            raise ConfigError(f"{name}={text!r} is not a number of {unit}") from None
        if not v > 0:
            raise ConfigError(f"{name}={text!r} must be above 0")
        return v

    return conv


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


def scenario_from_args(a: argparse.Namespace) -> Scenario:
    """Build (and validate) the Scenario from ``run``'s parsed flags."""
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
        accel=a.accel, gen=a.gen, miglink_bps=a.miglink, downtime_limit_ms=a.downtime_limit,
        max_bandwidth_bps=a.max_bandwidth, auto_converge=a.auto_converge, xbzrle=a.xbzrle,
        postcopy=a.postcopy, migrate_timeout_s=mig_timeout, boot_timeout_s=a.boot_timeout,
        fault=a.fault, driver=a.driver, xen_guest=getattr(a, "xen_guest", "pvh"),
        xen_mig_mtu=getattr(a, "xen_mig_mtu", 1500), criu_host=getattr(a, "criu_host", "local"),
        rib_routes=getattr(a, "rib_routes", 0), peering=getattr(a, "peering", ""),
        bfd_interval_ms=bfd[0], bfd_multiplier=bfd[1], bgp_hold_s=getattr(a, "bgp_hold", 9),
    )  # fmt: skip
