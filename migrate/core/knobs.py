"""QEMU's migration knobs (HV=kvm): their Make variables and Scenario fields, how each reaches
QEMU (a QMP migration capability or parameter) and libvirt (a ``virDomainMigrateFlags`` bit or a
``VIR_MIGRATE_PARAM_*`` typed parameter), the first releases that have it, and QEMU's effective
values as meta.json records them (``hypervisor.knobs_effective``).

The first QEMU release of each capability and parameter is the ``since`` of QEMU's QAPI schema
(qapi/migration.json); the first libvirt release is the ``Since:`` of libvirt-domain.h.  A knob
the installed QEMU or libvirt lacks is refused before anything starts (:func:`check_qemu`,
:func:`check_libvirt`), with one line that names the release that has it.

In ``make migrate`` every variable takes one value; in ``make sweep`` a list makes it an axis of
the grid (:func:`split_values`): values separated by commas, or by ``/`` for the knobs whose
value has commas itself (``ANNOUNCE=50,550,5,100/0,0,0,1``).

A knob is declared once, in KNOBS: its Scenario fields with their types and defaults (Scenario
takes them with :func:`scenario_fields`), its rules (:func:`validate`), its text in docs/migrate.md
(:func:`doc_tables`; ``python -m migrate.core.knobs docs`` rewrites the page's tables).  The
drivers apply it: migrate.drivers.kvm.driver over QMP, migrate.drivers.libvirt.flags through
libvirt."""

from __future__ import annotations

import argparse
import inspect
import re
import sys
import textwrap
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from migrate.core.atomic import write_text
from migrate.core.errors import ConfigError
from migrate.core.units import format_rate, parse_rate_bps

Version = tuple[int, ...]

#: MULTIFD_COMPRESSION methods (QEMU's MultiFDCompression enum of 5.0; zstd only in builds with zstd)
MULTIFD_COMPRESSIONS = ("none", "zlib", "zstd")
#: ZERO_PAGE methods (QEMU 9.0's ZeroPageDetection: "legacy", the migration thread's scan;
#: "multifd", QEMU's default, scans in multifd's threads when multifd is on, else as "legacy")
ZERO_PAGE_METHODS = ("none", "legacy", "multifd")
_SIZE_SUFFIX = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}


def _whole(var: str, text: str) -> int:
    if not re.fullmatch(r"\s*\d+\s*", text):
        raise ConfigError(f"{var}={text!r} is not a whole number")
    return int(text)


def _wholes(var: str, text: str, names: Sequence[str], example: str) -> list[int]:
    parts = text.split(",")
    if len(parts) != len(names) or not all(re.fullmatch(r"\s*\d+\s*", p) for p in parts):
        raise ConfigError(f"{var}={text!r} is not {','.join(names)} (whole numbers): e.g. {var}={example}")
    return [int(p) for p in parts]


def _boolean(var: str, text: str) -> bool:
    if text.lower() in ("1", "yes", "true", "on"):
        return True
    if text.lower() in ("0", "no", "false", "off"):
        return False
    raise ConfigError(f"{var}={text!r} is not a boolean: use 1 or 0")


def parse_size(var: str, text: str) -> int:
    """``64M`` -> bytes (K/M/G are powers of 1024, as QEMU reads sizes); ConfigError otherwise."""
    m = re.fullmatch(r"\s*(\d+)\s*([kKmMgG]?)(?:i?B)?\s*", text)
    if m is None:
        raise ConfigError(
            f"{var}={text!r} is not a size: use bytes with an optional K/M/G suffix (1024-based), e.g. 64M"
        )
    return int(m[1]) * _SIZE_SUFFIX[m[2].upper()]


def format_size(n: int) -> str:
    """67108864 -> '64M' (the largest 1024-based suffix that divides it)."""
    for suffix in ("G", "M", "K"):
        if n >= _SIZE_SUFFIX[suffix] and n % _SIZE_SUFFIX[suffix] == 0:
            return f"{n // _SIZE_SUFFIX[suffix]}{suffix}"
    return str(n)


@dataclass(frozen=True)
class KnobField:
    """One Scenario field a knob sets: its name, its annotation (the text a class body would
    have), its default (the knob unset: QEMU's own default applies) and what it holds."""

    name: str
    type: str
    default: Any
    doc: str = ""


def _opt_int(name: str, doc: str = "") -> KnobField:
    return KnobField(name, "int | None", None, doc)


def _opt_str(name: str, doc: str = "") -> KnobField:
    return KnobField(name, "str | None", None, doc)


def _off(name: str, doc: str = "") -> KnobField:
    return KnobField(name, "bool", False, doc)


#: QEMU's replies a Readback reads: the source's query-migrate-parameters, its
#: query-migrate-capabilities (capability -> state) and the destination's query-migrate-parameters
Replies = tuple[Mapping[str, Any], Mapping[str, bool], Mapping[str, Any]]


@dataclass(frozen=True)
class Readback:
    """One key of meta.json's ``hypervisor.knobs_effective`` (a ``qemu_<key>`` column of runs.csv):
    the value QEMU reports back for a knob, read from its replies (None: not reported)."""

    key: str
    read: Callable[[Replies], Any]


def _param(key: str, name: str, scale: int = 1) -> Readback:
    """The source's parameter ``name`` (times ``scale``)."""

    def read(r: Replies) -> Any:
        v = r[0].get(name)
        return v if v is None or scale == 1 else int(v) * scale

    return Readback(key, read)


def _cap(key: str, name: str) -> Readback:
    """The source's capability ``name`` (True/False)."""
    return Readback(key, lambda r: r[1].get(name))


def _params_joined(key: str, names: Sequence[str], side: str = "src") -> Readback:
    """Parameters ``names`` of the source (or ``side`` "dst": the destination) as ``a,b,...``."""
    return Readback(key, lambda r: _joined(r[2] if side == "dst" else r[0], names))


def _joined(params: Mapping[str, Any], names: Sequence[str]) -> str | None:
    vals = [params.get(n) for n in names]
    return None if any(v is None for v in vals) else ",".join(str(v) for v in vals)


@dataclass(frozen=True)
class Knob:
    """One knob: Make variable (``var``; its flag is ``flag``), the Scenario fields it sets
    (``fields``: name, type, default; :func:`scenario_fields` declares them in Scenario), the
    QMP capabilities and parameters it sets, the first QEMU release that has them, how libvirt
    takes it (empty: libvirt has no flag or parameter for it) and from which release, ``parse``
    (one value's text -> field values) and ``text`` (field values -> the value's text, None
    when the knob is not set)."""

    var: str
    flag: str
    fields: tuple[KnobField, ...]
    caps: tuple[str, ...]
    params: tuple[str, ...]
    qemu_since: Version
    libvirt: str
    libvirt_since: Version | None
    parse: Callable[[str], dict[str, Any]]
    text: Callable[[Mapping[str, Any]], str | None]
    #: its value has commas itself: sweep lists are separated by '/'
    tuple_valued: bool = False
    #: the option's help text (``make help``, ``--help``)
    help: str = ""
    #: its rules (QEMU's ranges, the knobs it needs or excludes): ConfigError, one line, for the
    #: first a scenario (a Scenario's fields by name) breaks; called only when the knob is set
    check: Callable[[Mapping[str, Any]], None] | None = None
    #: docs/migrate.md (:func:`doc_tables`): what it sets and its default in the table of
    #: variables (knobs after one another with the same two share a row), how QMP and libvirt
    #: apply it in the table of knobs (a knob without ``libvirt_since`` has no libvirt cell of its
    #: own: DRIVER=libvirt refuses it)
    doc: str = ""
    doc_default: str = ""
    doc_qmp: str = ""
    doc_libvirt: str = ""
    #: its keys of ``hypervisor.knobs_effective``: QEMU's values read back after migrate-set-*
    readback: tuple[Readback, ...] = ()

    def unset(self) -> dict[str, Any]:
        """Field values of the knob left unset (QEMU's own default applies)."""
        return {f.name: f.default for f in self.fields}

    def is_set(self, scenario: Mapping[str, Any]) -> bool:
        """True when any of its fields is not at its default."""
        return any(scenario.get(f.name, f.default) != f.default for f in self.fields)


def _flag_text(field: str) -> Callable[[Mapping[str, Any]], str | None]:
    return lambda s: "1" if s.get(field) else None


def _int_text(field: str) -> Callable[[Mapping[str, Any]], str | None]:
    return lambda s: None if s.get(field) is None else str(s[field])


def _ints_text(*fields: str) -> Callable[[Mapping[str, Any]], str | None]:
    return lambda s: None if s.get(fields[0]) is None else ",".join(str(s.get(f)) for f in fields)


def _multifd(text: str) -> dict[str, Any]:
    if text.strip().lower() == "off":
        return {"multifd_channels": None}
    n = _whole("MULTIFD", text)
    return {"multifd_channels": n or None}  # 0: no multifd, QEMU's single migration stream


def _zero_page(text: str) -> dict[str, Any]:
    t = text.strip()
    if t not in ZERO_PAGE_METHODS:
        raise ConfigError(f"ZERO_PAGE={text!r} is unknown: choose one of {', '.join(ZERO_PAGE_METHODS)}")
    return {"zero_page_detection": t}


def _compression(text: str) -> dict[str, Any]:
    t = text.strip()
    if t not in MULTIFD_COMPRESSIONS:
        raise ConfigError(f"MULTIFD_COMPRESSION={text!r} is unknown: choose one of {', '.join(MULTIFD_COMPRESSIONS)}")
    return {"multifd_compression": t}


#: the variables table's text of the capabilities that are simply on or off
_CAPABILITY_DOC = "QEMU migration capabilities (`1` to enable; postcopy switches after the first RAM pass)"


def _capability(
    var: str,
    flag: str,
    field: str,
    cap: str,
    qemu_since: Version,
    libvirt: str,
    libvirt_since: Version | None,
    *,
    help: str,
    check: Callable[[Mapping[str, Any]], None] | None = None,
    field_doc: str = "",
    doc: str = _CAPABILITY_DOC,
    doc_qmp: str = "",
    doc_libvirt: str = "",
) -> Knob:
    """A knob that turns QEMU capability ``cap`` on (``VAR=1``: Scenario field ``field``, off by default)."""
    return Knob(
        var, flag, (_off(field, field_doc),), (cap,), (), qemu_since, libvirt, libvirt_since,
        lambda t: {field: _boolean(var, t)}, _flag_text(field),
        help=help, check=check, doc=doc, doc_default="off",
        doc_qmp=doc_qmp or f"capability `{cap}`", doc_libvirt=doc_libvirt,
        readback=(_cap(field, cap),),
    )  # fmt: skip


ANNOUNCE_FIELDS = ("announce_initial_ms", "announce_max_ms", "announce_rounds", "announce_step_ms")
CPU_THROTTLE_FIELDS = ("cpu_throttle_initial", "cpu_throttle_increment")


# -- each knob's rules (Knob.check): QEMU's ranges (migrate_params_check of QEMU 7.2), the
# capability each needs, and the combinations QEMU refuses or breaks on


def _require(cond: bool, msg: str) -> None:
    if not cond:
        raise ConfigError(msg)


def _check_downtime_limit(s: Mapping[str, Any]) -> None:
    _require(s["downtime_limit_ms"] > 0, f"DOWNTIME_LIMIT={s['downtime_limit_ms']} must be > 0 ms")


def _check_migbw(s: Mapping[str, Any]) -> None:
    _require(s["max_bandwidth_bps"] > 0, f"MIGBW={s['max_bandwidth_bps']} must be > 0 bit/s")


def _check_postcopy(s: Mapping[str, Any]) -> None:
    _require(s["mode"] != "stopcopy", "POSTCOPY=1 needs MODE=precopy")


def _check_multifd(s: Mapping[str, Any]) -> None:
    n = s["multifd_channels"]
    _require(1 <= n <= 255, f"MULTIFD={n} must be 1-255 channels (0: no multifd)")
    _require(
        not s["postcopy"],
        "MULTIFD with POSTCOPY=1 is refused: QEMU 7.2 accepts both capabilities, but its destination can abort "
        "when a multifd migration switches to post-copy (a yank assertion reported on qemu-devel against "
        "7.2.0-rc0), and QEMU 8.1 refuses the pair ('Postcopy is not yet compatible with multifd'); "
        "use one of them",
    )
    _require(
        not s["xbzrle"],
        "MULTIFD with XBZRLE=1 is refused: multifd sends pages without XBZRLE (QEMU 7.2 skips it silently, "
        "QEMU 8.2 and later refuse the pair: 'Multifd is not compatible with xbzrle'); use one of them",
    )


def _check_multifd_compression(s: Mapping[str, Any]) -> None:
    method = s["multifd_compression"]
    _require(
        method in MULTIFD_COMPRESSIONS,
        f"MULTIFD_COMPRESSION={method!r} is unknown: choose one of {', '.join(MULTIFD_COMPRESSIONS)}",
    )
    _require(s["multifd_channels"] is not None, "MULTIFD_COMPRESSION compresses multifd's channels: set MULTIFD=N too")


def _check_postcopy_preempt(s: Mapping[str, Any]) -> None:
    _require(s["postcopy"], "POSTCOPY_PREEMPT=1 needs POSTCOPY=1 (QEMU: 'Postcopy preempt requires postcopy-ram')")


def _check_announce(s: Mapping[str, Any]) -> None:
    announce = [s[f] for f in ANNOUNCE_FIELDS]
    text = ",".join(str(v) for v in announce)
    _require(all(v is not None for v in announce), f"ANNOUNCE={text} must set all four: initial,max,rounds,step")
    i, m, r, st = (int(v) for v in announce)
    _require(0 <= i <= 100_000, f"ANNOUNCE={text}: initial must be 0-100000 ms")
    _require(0 <= m <= 100_000, f"ANNOUNCE={text}: max must be 0-100000 ms")
    _require(0 <= r <= 1000, f"ANNOUNCE={text}: rounds must be 0-1000")
    _require(1 <= st <= 10_000, f"ANNOUNCE={text}: step must be 1-10000 ms")


def _check_xbzrle_cache(s: Mapping[str, Any]) -> None:
    n, mem_mib = s["xbzrle_cache_bytes"], s["mem_mib"]
    _require(s["xbzrle"], "XBZRLE_CACHE sizes XBZRLE's page cache: set XBZRLE=1 too")
    _require(
        n >= 4096 and n & (n - 1) == 0,
        f"XBZRLE_CACHE={n} must be a power of two of at least 4K (QEMU needs a power-of-two number of pages)",
    )
    _require(n <= mem_mib * 2**20, f"XBZRLE_CACHE={n // 2**20}M is larger than the guest's memory (MEM={mem_mib} MiB)")


def _check_cpu_throttle(s: Mapping[str, Any]) -> None:
    throttle = [s[f] for f in CPU_THROTTLE_FIELDS]
    text = ",".join(str(v) for v in throttle)
    _require(all(v is not None for v in throttle), f"CPU_THROTTLE={text} must set both: initial,increment")
    _require(all(1 <= int(v) <= 99 for v in throttle), f"CPU_THROTTLE={text}: both must be 1-99 %")
    _require(s["auto_converge"], "CPU_THROTTLE sets auto-converge's throttling: set AUTO_CONVERGE=1 too")


def _check_zero_page(s: Mapping[str, Any]) -> None:
    method = s["zero_page_detection"]
    _require(
        method in ZERO_PAGE_METHODS,
        f"ZERO_PAGE={method!r} is unknown: choose one of {', '.join(ZERO_PAGE_METHODS)}",
    )
    _require(
        method != "multifd" or s["multifd_channels"] is not None,
        "ZERO_PAGE=multifd scans for zero pages in multifd's threads: set MULTIFD=N too",
    )


def _check_dirty_limit(s: Mapping[str, Any]) -> None:
    limit = s["vcpu_dirty_limit_mbps"]
    _require(limit > 0, f"DIRTY_LIMIT={limit} must be above 0 MB/s")
    _require(
        s["mode"] == "precopy" and not s["postcopy"],
        "DIRTY_LIMIT throttles the vCPUs while pre-copy converges: use MODE=precopy without POSTCOPY",
    )


def _check_switchover_bw(s: Mapping[str, Any]) -> None:
    n = s["switchover_bandwidth_bps"]
    _require(
        n >= 8,
        f"SWITCHOVER_BW={n} must be at least 8 bit/s (QEMU takes whole bytes/s; its own estimate is "
        "SWITCHOVER_BW unset)",
    )


KNOBS: tuple[Knob, ...] = (
    Knob("DOWNTIME_LIMIT", "downtime-limit", (_opt_int("downtime_limit_ms"),), (), ("downtime-limit",), (2, 8),
         "migrateSetMaxDowntime", (0, 8, 0),
         lambda t: {"downtime_limit_ms": _whole("DOWNTIME_LIMIT", t)}, _int_text("downtime_limit_ms"),
         help="QEMU downtime-limit ms", check=_check_downtime_limit,
         doc="QEMU `downtime-limit` ms",
         doc_default="QEMU's (300)",
         doc_qmp="parameter `downtime-limit` (source)",
         doc_libvirt="`migrateSetMaxDowntime`",
         readback=(_param("downtime_limit_ms", "downtime-limit"),)),
    Knob("MIGBW", "max-bandwidth", (_opt_int("max_bandwidth_bps"),), (), ("max-bandwidth",), (2, 8),
         "VIR_MIGRATE_PARAM_BANDWIDTH (whole MiB/s)", (1, 1, 0),
         lambda t: {"max_bandwidth_bps": parse_rate_bps(t, "MIGBW")},
         lambda s: None if s.get("max_bandwidth_bps") is None else format_rate(s["max_bandwidth_bps"]),
         help="QEMU max-bandwidth bit/s", check=_check_migbw,
         doc="QEMU `max-bandwidth` bit/s",
         doc_default="QEMU's",
         doc_qmp="parameter `max-bandwidth` (source; bytes/s)",
         doc_libvirt="parameter `bandwidth` (whole MiB/s)",
         readback=(_param("max_bandwidth_bps", "max-bandwidth", 8),)),
    _capability("AUTO_CONVERGE", "auto-converge", "auto_converge", "auto-converge", (1, 6),
                "VIR_MIGRATE_AUTO_CONVERGE", (1, 2, 3),
                help="QEMU auto-converge capability: 1|0",
                doc_libvirt="flag `VIR_MIGRATE_AUTO_CONVERGE`"),
    _capability("XBZRLE", "xbzrle", "xbzrle", "xbzrle", (1, 2),
                "VIR_MIGRATE_COMPRESSED with VIR_MIGRATE_PARAM_COMPRESSION=xbzrle", (1, 3, 4),
                help="QEMU xbzrle capability: 1|0",
                doc_libvirt="flag `VIR_MIGRATE_COMPRESSED`, `compression=xbzrle`"),
    _capability("POSTCOPY", "postcopy", "postcopy", "postcopy-ram", (2, 6),
                "VIR_MIGRATE_POSTCOPY and virDomainMigrateStartPostCopy", (1, 3, 3),
                help="QEMU postcopy-ram: 1|0 (switch after the first RAM pass)", check=_check_postcopy,
                doc_qmp="capability `postcopy-ram`, `migrate-start-postcopy`",
                doc_libvirt="flag `VIR_MIGRATE_POSTCOPY`, `virDomainMigrateStartPostCopy`"),
    Knob("MULTIFD", "multifd", (_opt_int("multifd_channels", "MULTIFD=N: the multifd capability with N channels"),),
         ("multifd",), ("multifd-channels",), (4, 0),
         "VIR_MIGRATE_PARALLEL with VIR_MIGRATE_PARAM_PARALLEL_CONNECTIONS", (5, 2, 0),
         _multifd, _int_text("multifd_channels"),
         help="QEMU multifd with N channels (1-255; 0: none)", check=_check_multifd,
         doc="QEMU's `multifd` capability with N `multifd-channels` (1–255; `0`: none)",
         doc_default="none (one stream)",
         doc_qmp="capability `multifd`, parameter `multifd-channels` (both sides, before `migrate-incoming`)",
         doc_libvirt="flag `VIR_MIGRATE_PARALLEL`, `parallel.connections`",
         readback=(_cap("multifd", "multifd"), _param("multifd_channels", "multifd-channels"),)),
    Knob("MULTIFD_COMPRESSION", "multifd-compression",
         (_opt_str("multifd_compression", "MULTIFD_COMPRESSION: none|zlib|zstd"),), (), ("multifd-compression",),
         (5, 0), "VIR_MIGRATE_PARAM_COMPRESSION=zlib|zstd with VIR_MIGRATE_PARALLEL", (9, 4, 0),
         _compression, lambda s: s.get("multifd_compression"),
         help="QEMU multifd-compression: none|zlib|zstd (with MULTIFD)", check=_check_multifd_compression,
         doc="multifd's `multifd-compression`: `none`, `zlib`, `zstd` (with `MULTIFD`)",
         doc_default="QEMU's (`none`)",
         doc_qmp="parameter `multifd-compression` (both sides; `zstd` only in QEMU builds with libzstd)",
         doc_libvirt="`compression=zlib` or `zstd` with `VIR_MIGRATE_PARALLEL` (`none`: nothing)",
         readback=(_param("multifd_compression", "multifd-compression"),)),
    _capability("POSTCOPY_PREEMPT", "postcopy-preempt", "postcopy_preempt", "postcopy-preempt", (7, 1), "", None,
                field_doc="POSTCOPY_PREEMPT=1",
                help="QEMU postcopy-preempt capability: 1|0 (with POSTCOPY=1)", check=_check_postcopy_preempt,
                doc="QEMU's `postcopy-preempt` capability (`1`, with `POSTCOPY=1`)",
                doc_qmp="capability `postcopy-preempt` (both sides, before `migrate-incoming`)"),
    Knob("ANNOUNCE", "announce", (_opt_int(ANNOUNCE_FIELDS[0], "ANNOUNCE=initial,max,rounds,step"),
                                  *map(_opt_int, ANNOUNCE_FIELDS[1:])), (),
         ("announce-initial", "announce-max", "announce-rounds", "announce-step"), (4, 0), "", None,
         lambda t: dict(zip(ANNOUNCE_FIELDS, _wholes("ANNOUNCE", t, ("initial", "max", "rounds", "step"),
                                                     "50,550,5,100"), strict=True)),
         _ints_text(*ANNOUNCE_FIELDS), tuple_valued=True,
         help="QEMU announce-initial,max,rounds,step (ms, ms, count, ms)", check=_check_announce,
         doc="the destination's self-announcement after the migration: `initial,max,rounds,step` (ms, ms, count, ms)",
         doc_default="QEMU's (`50,550,5,100`)",
         doc_qmp="parameters `announce-initial`, `-max`, `-rounds`, `-step` (both sides; the destination "
                 "announces); `MODE=stopcopy`'s `announce-self` takes them too",
         readback=(_params_joined("announce", ("announce-initial", "announce-max", "announce-rounds", "announce-step"),
                                  "dst"),)),
    Knob("XBZRLE_CACHE", "xbzrle-cache", (_opt_int("xbzrle_cache_bytes", "XBZRLE_CACHE=64M"),), (),
         ("xbzrle-cache-size",), (2, 11),
         "VIR_MIGRATE_PARAM_COMPRESSION_XBZRLE_CACHE", (1, 3, 4),
         lambda t: {"xbzrle_cache_bytes": parse_size("XBZRLE_CACHE", t)},
         lambda s: None if s.get("xbzrle_cache_bytes") is None else format_size(s["xbzrle_cache_bytes"]),
         help="QEMU xbzrle-cache-size, e.g. 64M (with XBZRLE=1)", check=_check_xbzrle_cache,
         doc="XBZRLE's page cache, e.g. `64M` (1024-based; with `XBZRLE=1`)",
         doc_default="QEMU's (`64M`)",
         doc_qmp="parameter `xbzrle-cache-size` (source)",
         doc_libvirt="`compression.xbzrle.cache`",
         readback=(_param("xbzrle_cache_bytes", "xbzrle-cache-size"),)),
    Knob("CPU_THROTTLE", "cpu-throttle",
         (_opt_int(CPU_THROTTLE_FIELDS[0], "CPU_THROTTLE=initial,increment (%)"), _opt_int(CPU_THROTTLE_FIELDS[1])),
         (), ("cpu-throttle-initial", "cpu-throttle-increment"),
         (2, 7), "VIR_MIGRATE_PARAM_AUTO_CONVERGE_INITIAL/_INCREMENT", (2, 0, 0),
         lambda t: dict(zip(CPU_THROTTLE_FIELDS, _wholes("CPU_THROTTLE", t, ("initial", "increment"), "20,10"),
                            strict=True)),
         _ints_text(*CPU_THROTTLE_FIELDS), tuple_valued=True,
         help="QEMU cpu-throttle-initial,increment %% (with AUTO_CONVERGE=1)", check=_check_cpu_throttle,
         doc="auto-converge's throttling `initial,increment` in % (with `AUTO_CONVERGE=1`)",
         doc_default="QEMU's (`20,10`)",
         doc_qmp="parameters `cpu-throttle-initial`, `cpu-throttle-increment` (source)",
         doc_libvirt="`auto_converge.initial`, `auto_converge.increment`",
         readback=(_params_joined("cpu_throttle", ("cpu-throttle-initial", "cpu-throttle-increment")),)),
    Knob("ZERO_PAGE", "zero-page", (_opt_str("zero_page_detection", "ZERO_PAGE: none|legacy|multifd (QEMU 9.0)"),), (),
         ("zero-page-detection",), (9, 0), "", None,
         _zero_page, lambda s: s.get("zero_page_detection"),
         help="QEMU zero-page-detection: none|legacy|multifd (QEMU 9.0; multifd with MULTIFD)",
         check=_check_zero_page,
         doc="how the source finds zero pages: `none` (send them), `legacy` (the migration thread's scan), "
             "`multifd` (in multifd's threads, with `MULTIFD`); QEMU 9.0",
         doc_default="QEMU's (`multifd`, which without multifd scans as `legacy`)",
         doc_qmp="parameter `zero-page-detection` (both)",
         readback=(_param("zero_page_detection", "zero-page-detection"),)),
    Knob("DIRTY_LIMIT", "dirty-limit",
         (_opt_int("vcpu_dirty_limit_mbps", "DIRTY_LIMIT: QEMU's dirty-limit capability with vcpu-dirty-limit MB/s "
                   "(QEMU 8.1; KVM's dirty ring)"),),
         ("dirty-limit",), ("vcpu-dirty-limit",), (8, 1),
         "", None, lambda t: {"vcpu_dirty_limit_mbps": _whole("DIRTY_LIMIT", t) or None},
         _int_text("vcpu_dirty_limit_mbps"),
         help="QEMU dirty-limit with vcpu-dirty-limit MB/s per vCPU (QEMU 8.1; needs KVM's dirty ring)",
         check=_check_dirty_limit,
         doc="QEMU's `dirty-limit`: each vCPU throttled to this many MB/s of dirtied memory while pre-copy runs "
             "(`MODE=precopy`); QEMU 8.1, and KVM with its dirty ring (the VM then starts with `-accel "
             "kvm,dirty-ring-size=4096`): refused under TCG",
         doc_default="off",
         doc_qmp="capability `dirty-limit`, parameter `vcpu-dirty-limit` (source)",
         readback=(_cap("dirty_limit", "dirty-limit"), _param("vcpu_dirty_limit_mbps", "vcpu-dirty-limit"),)),
    Knob("SWITCHOVER_BW", "switchover-bandwidth",
         (_opt_int("switchover_bandwidth_bps", "SWITCHOVER_BW: avail-switchover-bandwidth in bit/s (QEMU 8.2)"),),
         (), ("avail-switchover-bandwidth",), (8, 2), "", None,
         lambda t: {"switchover_bandwidth_bps": parse_rate_bps(t, "SWITCHOVER_BW")},
         lambda s: None if s.get("switchover_bandwidth_bps") is None else format_rate(s["switchover_bandwidth_bps"]),
         help="QEMU avail-switchover-bandwidth bit/s: the rate its switch-over decision assumes (QEMU 8.2)",
         check=_check_switchover_bw,
         doc="the bandwidth QEMU assumes for its switch-over decision, in bit/s (e.g. `500M`): the source stops the "
             "guest once the remaining dirty memory takes at most `DOWNTIME_LIMIT` at this rate, instead of at the "
             "rate it measured; it does not cap the migration; QEMU 8.2",
         doc_default="QEMU's (its measured rate)",
         doc_qmp="parameter `avail-switchover-bandwidth` (source; bytes/s)",
         readback=(_param("switchover_bandwidth_bps", "avail-switchover-bandwidth", 8),)),
)  # fmt: skip
KNOB_BY_VAR = {k.var: k for k in KNOBS}
KNOB_FIELDS = tuple(f for k in KNOBS for f in k.fields)

_T = TypeVar("_T")


def scenario_fields(after: str) -> Callable[[type[_T]], type[_T]]:
    """A class decorator, applied before ``@dataclass``: the knobs' fields (KNOB_FIELDS, in KNOBS
    order, with their annotations and defaults) go into the class right after its field
    ``after``, as if written there.  So a knob's fields are declared once, in its Knob, and the
    dataclass keeps its order of fields (its ``asdict`` keys) and stays one plain class."""

    def add(cls: type[_T]) -> type[_T]:
        own: dict[str, Any] = dict(inspect.get_annotations(cls))
        if after not in own:
            raise TypeError(f"{cls.__name__} has no field {after!r} to put the knobs' fields after")
        twice = [f.name for f in KNOB_FIELDS if f.name in own]
        if twice:
            raise TypeError(f"{cls.__name__} declares knob fields itself: {', '.join(twice)}")
        annotations: dict[str, Any] = {}
        for name, annotation in own.items():
            annotations[name] = annotation
            if name == after:
                annotations.update((f.name, f.type) for f in KNOB_FIELDS)
        for f in KNOB_FIELDS:
            setattr(cls, f.name, f.default)
        cls.__annotations__ = annotations
        return cls

    return add


def split_values(knob: Knob, text: str) -> list[str]:
    """A variable's text as a list of values: ``MULTIFD=1,4`` -> ['1', '4'], ``ANNOUNCE=50,550,5,100``
    -> one value (its lists are separated by '/'); empty items are refused."""
    sep = "/" if knob.tuple_valued else ","
    items = [t.strip() for t in str(text).split(sep)]
    if not text.strip() or any(not t for t in items):
        raise ConfigError(f"{knob.var}={text!r} has an empty value")
    if len(set(items)) != len(items):
        raise ConfigError(f"{knob.var}={text!r} lists a value twice")
    return items


def knob_settings(scenario: Mapping[str, Any]) -> list[tuple[Knob, str]]:
    """The knobs a scenario sets (in KNOBS order) with their values' text."""
    out = []
    for k in KNOBS:
        t = k.text(scenario)
        if t is not None:
            out.append((k, t))
    return out


def requested_text(scenario: Mapping[str, Any]) -> str:
    """``DOWNTIME_LIMIT=50 MULTIFD=2``: the knobs a scenario sets ('' none)."""
    return " ".join(f"{k.var}={t}" for k, t in knob_settings(scenario))


def validate(scenario: Mapping[str, Any]) -> None:
    """ConfigError (one line) for the first rule of QEMU's migration knobs that ``scenario`` (a
    Scenario's fields by name) breaks: the knobs are HV=kvm's only, then each knob that is set
    is checked by its own rules (Knob.check), in KNOBS order."""
    knob_vars = [k.var for k, _ in knob_settings(scenario)]
    one = len(knob_vars) == 1
    _require(
        scenario["hv"] == "kvm" or not knob_vars,
        f"{', '.join(knob_vars)} {'is a QEMU migration knob' if one else 'are QEMU migration knobs'}:"
        f" {'it needs' if one else 'they need'} HV=kvm (HV={scenario['hv']} does not migrate with QEMU)",
    )
    for k in KNOBS:
        if k.check is not None and k.is_set(scenario):
            k.check(scenario)


# -- docs/migrate.md's tables ----------------------------------------------------------------

#: the page whose knob tables :func:`doc_tables` makes
DOC = Path(__file__).resolve().parents[2] / "docs" / "migrate.md"
_NO_LIBVIRT = "none: refused, use `DRIVER=qmp`"


def _row(cells: Sequence[str]) -> str:
    return f"| {' | '.join(cells)} |"


def variables_table() -> str:
    """The knobs' rows of the Make variables (meaning, default); knobs after one another whose
    meaning and default are the same share a row."""
    groups: list[tuple[list[str], str, str]] = []
    for k in KNOBS:
        if groups and groups[-1][1:] == (k.doc, k.doc_default):
            groups[-1][0].append(k.var)
        else:
            groups.append(([k.var], k.doc, k.doc_default))
    rows = [_row(("variable", "meaning", "default")), "|---|---|---|"]
    rows += [_row((", ".join(f"`{v}`" for v in vs), doc, default)) for vs, doc, default in groups]
    return "\n".join(rows)


def qemu_table() -> str:
    """How each knob reaches QEMU over QMP and through libvirt, and the first releases that have it."""
    rows = [_row(("variable", "QEMU (QMP)", "first QEMU", "libvirt (`migrateToURI3`)", "first libvirt")),
            "|---|---|---|---|---|"]  # fmt: skip
    for k in KNOBS:
        libvirt = (k.doc_libvirt, _v(k.libvirt_since)) if k.libvirt_since is not None else (_NO_LIBVIRT, "–")
        rows.append(_row((f"`{k.var}`", k.doc_qmp, _v(k.qemu_since), *libvirt)))
    return "\n".join(rows)


def flags_text() -> str:
    """The knobs' flags of ``python -m migrate run``, in KNOBS order."""
    return textwrap.fill(f"`{' '.join(f'--{k.flag}' for k in KNOBS)}`", width=100, break_on_hyphens=False)


#: the generated sections of docs/migrate.md, each between ``<!-- NAME:begin -->`` and ``<!-- NAME:end -->``
DOC_TABLES: dict[str, Callable[[], str]] = {
    "knobs-variables": variables_table,
    "knobs-flags": flags_text,
    "knobs-qemu": qemu_table,
}


def doc_tables(text: str, tables: Mapping[str, Callable[[], str]] | None = None) -> str:
    """``text`` (docs/migrate.md) with the sections between the markers of ``tables`` (default
    DOC_TABLES: made from KNOBS) made anew; ValueError when a pair of markers is not there
    exactly once."""
    for name, table in (DOC_TABLES if tables is None else tables).items():
        begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
        section = re.compile(f"{re.escape(begin)}\n.*?{re.escape(end)}", re.S)
        if len(section.findall(text)) != 1:
            raise ValueError(f"the page needs one {begin} ... {end} section")
        text = section.sub(lambda _m, b=begin, e=end, f=table: f"{b}\n\n{f()}\n\n{e}", text)
    return text


def docs_command(
    argv: Sequence[str] | None, prog: str, tables: Mapping[str, Callable[[], str]], what: str, source: str
) -> int:
    """``docs``: write the ``what`` tables of docs/migrate.md from ``source`` (``tables``; with
    ``--check``: write nothing, exit 1 if they are not what ``source`` gives)."""
    p = argparse.ArgumentParser(prog=prog, description=f"Write docs/migrate.md's {what} tables from {source}.")
    sub = p.add_subparsers(dest="command", required=True)
    d = sub.add_parser("docs", help=f"write the {what} tables of docs/migrate.md")
    d.add_argument("--doc", type=Path, default=DOC, help=f"the page (default {DOC})")
    d.add_argument("--check", action="store_true", help="write nothing; exit 1 if the tables are stale")
    a = p.parse_args(argv)
    text = a.doc.read_text()
    try:
        made = doc_tables(text, tables)
    except ValueError as err:
        print(f"{a.doc}: {err}", file=sys.stderr)
        return 1
    if a.check:
        if made != text:
            print(f"{a.doc}: its {what} tables are not what {source} gives; run {prog} docs")
            return 1
        return 0
    if made != text:
        write_text(a.doc, made)
        print(a.doc)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``docs``: write docs/migrate.md's knob tables from KNOBS (with ``--check``: write nothing,
    exit 1 if they are not what KNOBS gives)."""
    return docs_command(argv, "python -m migrate.core.knobs", DOC_TABLES, "knob", "KNOBS")


def label_part(knob: Knob, text: str) -> str:
    """A sweep point label's part for one knob value: ``multifd4``, ``announce50x550x5x100``."""
    return f"{knob.var.lower()}{text.replace(',', 'x')}"


# -- versions --------------------------------------------------------------------------------


def parse_version(text: str | None) -> Version | None:
    """``QEMU emulator version 7.2.22 (Debian ...)`` or ``libvirtd (libvirt) 9.0.0`` -> (7, 2, 22);
    None when no version is in the text."""
    m = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", text or "")
    return None if m is None else (int(m[1]), int(m[2]), int(m[3] or 0))


def _v(v: Version) -> str:
    return ".".join(map(str, v))


def check_qemu(scenario: Mapping[str, Any], qemu: str | None, where: str = "") -> None:
    """ConfigError (one line) for the first knob of ``scenario`` that the QEMU of version text
    ``qemu`` lacks; nothing when its version cannot be read (the QMP replies then tell)."""
    have = parse_version(qemu)
    if have is None:
        return
    for k, t in knob_settings(scenario):
        if have < k.qemu_since:
            names = ", ".join([*(f"capability {c}" for c in k.caps), *(f"parameter {p}" for p in k.params)])
            raise ConfigError(
                f"{k.var}={t} needs QEMU {_v(k.qemu_since)} or later ({names}); the QEMU{where} is {_v(have)}"
            )


def check_libvirt(scenario: Mapping[str, Any], libvirt: str | None) -> None:
    """ConfigError (one line) for the first knob of ``scenario`` that libvirt (daemon version text
    ``libvirt``) cannot apply: one for which libvirt has no flag or parameter, or one newer than it."""
    have = parse_version(libvirt)
    for k, t in knob_settings(scenario):
        if k.libvirt_since is None:
            qemu_name = ", ".join((*k.caps, *k.params))
            raise ConfigError(
                f"{k.var}={t} cannot be applied with DRIVER=libvirt: libvirt has no migration flag or parameter "
                f"for QEMU's {qemu_name}{f' (libvirt {_v(have)} here)' if have else ''}; use DRIVER=qmp"
            )
        since = k.libvirt_since
        if k.var == "MULTIFD_COMPRESSION" and t == "none":
            continue  # parallel migration without compression: libvirt's default since 5.2.0
        if have is not None and have < since:
            raise ConfigError(
                f"{k.var}={t} needs libvirt {_v(since)} or later ({k.libvirt}); the libvirtd here is {_v(have)}"
            )


# -- QEMU's effective values -----------------------------------------------------------------

#: knobs_effective keys (runs.csv has them as ``qemu_<key>``): QEMU's values read back with
#: query-migrate-parameters and query-migrate-capabilities; ``announce`` is the destination's (the
#: destination QEMU announces the guest's MACs after the migration), the others the source's
#: (each Knob's ``readback``, in KNOBS order)
EFFECTIVE_KEYS = tuple(r.key for k in KNOBS for r in k.readback)
EFFECTIVE_COLUMNS = tuple(f"qemu_{k}" for k in EFFECTIVE_KEYS)


def _caps(reply: Any) -> dict[str, bool]:
    if not isinstance(reply, list):
        return {}
    return {c["capability"]: bool(c["state"]) for c in reply if isinstance(c, dict) and "capability" in c}


def effective(
    src_params: Mapping[str, Any] | None,
    src_caps: Any,
    dst_params: Mapping[str, Any] | None = None,
    dst_caps: Any = None,
) -> dict[str, Any]:
    """meta.json ``hypervisor.knobs_effective`` from QEMU's query-migrate-parameters and
    query-migrate-capabilities replies: every key of EFFECTIVE_KEYS, None where QEMU did not
    report it (an older QEMU, or no reply); ``multifd_dst``/``postcopy_preempt_dst`` and
    ``multifd_channels_dst`` say what the destination had (they must match the source)."""
    sp, dp = dict(src_params or {}), dict(dst_params or {})
    sc, dc = _caps(src_caps), _caps(dst_caps)
    replies = (sp, sc, dp)
    out: dict[str, Any] = {r.key: r.read(replies) for k in KNOBS for r in k.readback}
    if dst_params is not None or dst_caps is not None:
        out.update(
            multifd_dst=dc.get("multifd"),
            multifd_channels_dst=dp.get("multifd-channels"),
            multifd_compression_dst=dp.get("multifd-compression"),
            postcopy_preempt_dst=dc.get("postcopy-preempt"),
        )
    return out


if __name__ == "__main__":
    sys.exit(main())
