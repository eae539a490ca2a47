"""``run``'s flags (one per Make variable of ``make migrate``, from migrate.model.variables and
migrate.core.knobs; campaign files use the same variables), the Scenario built from them, and
docs/migrate.md's tables of those variables.  The parser's errors, like the converters'
(migrate.core.convert), name the Make variable."""

from __future__ import annotations

import argparse
import re
import textwrap
from typing import Any

from migrate.core.errors import ConfigError
from migrate.core.knobs import KNOBS, Knob, docs_command, split_values
from migrate.core.units import parse_rate_bps
from migrate.model.scenario import Scenario, parse_bfd
from migrate.model.traffic import parse_traffic
from migrate.model.variables import (
    RUN_ONLY_VARS,
    RUN_VARS,
    RUN_VARS_AFTER_KNOBS,
    RUN_VARS_BEFORE_KNOBS,
    default,
    unset_from_profile,
)

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
    mix = parse_traffic(getattr(a, "traffic", None) or "udp")
    if a.rate is None and not mix.udp:
        rate_bps = 0  # a mix without the UDP CBR runs no UDP generator
    if mix.udp_sizes is not None and getattr(a, "size", None) not in (None, default("frame_bytes")):
        raise ConfigError(
            f"SIZE={a.size} and TRAFFIC={a.traffic} both set the UDP frame size: leave SIZE out (sizes= sets them)"
        )
    mig_timeout = (
        a.migrate_timeout if a.migrate_timeout is not None else (XEN_DEFAULT_MIGRATE_TIMEOUT_S if xen else 120.0)
    )
    bfd = parse_bfd(getattr(a, "bfd", "50x3"))
    fields = {v.field: getattr(a, v.dest, None if v.from_profile else v.default) for v in RUN_VARS if v.field}
    fields = unset_from_profile(fields, fields.get("router") or default("router"))
    return Scenario(
        **fields,
        rate_bps=rate_bps,
        migrate_timeout_s=mig_timeout,
        bfd_interval_ms=bfd[0],
        bfd_multiplier=bfd[1],
        **knob_fields(a, axes),
    )


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
