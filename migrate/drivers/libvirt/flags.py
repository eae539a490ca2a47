"""DRIVER=libvirt: scenario -> ``migrateToURI3`` flags and parameters, and libvirt job
statistics -> the progress shape the fault injector reads.  Pure functions (no libvirt import):
the flag values are libvirt's stable ABI and a unit test checks them against the binding."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from migrate.model.scenario import Scenario

# virDomainMigrateFlags (libvirt-domain.h)
VIR_MIGRATE_LIVE = 1 << 0
VIR_MIGRATE_PEER2PEER = 1 << 1
VIR_MIGRATE_NON_SHARED_INC = 1 << 7
VIR_MIGRATE_UNSAFE = 1 << 9
VIR_MIGRATE_COMPRESSED = 1 << 11
VIR_MIGRATE_AUTO_CONVERGE = 1 << 13
VIR_MIGRATE_POSTCOPY = 1 << 15
VIR_MIGRATE_PARALLEL = 1 << 17  # multifd (libvirt 5.2.0)
FLAG_NAMES = {
    VIR_MIGRATE_LIVE: "LIVE",
    VIR_MIGRATE_PEER2PEER: "PEER2PEER",
    VIR_MIGRATE_NON_SHARED_INC: "NON_SHARED_INC",
    VIR_MIGRATE_UNSAFE: "UNSAFE",
    VIR_MIGRATE_COMPRESSED: "COMPRESSED",
    VIR_MIGRATE_AUTO_CONVERGE: "AUTO_CONVERGE",
    VIR_MIGRATE_POSTCOPY: "POSTCOPY",
    VIR_MIGRATE_PARALLEL: "PARALLEL",
}
# typed-parameter names of virDomainMigrateToURI3
PARAM_URI = "migrate_uri"
PARAM_DEST_XML = "destination_xml"
PARAM_BANDWIDTH = "bandwidth"  # MiB/s
PARAM_COMPRESSION = "compression"
PARAM_PARALLEL_CONNECTIONS = "parallel.connections"  # QEMU's multifd-channels
PARAM_XBZRLE_CACHE = "compression.xbzrle.cache"  # QEMU's xbzrle-cache-size, bytes
PARAM_AUTO_CONVERGE_INITIAL = "auto_converge.initial"  # QEMU's cpu-throttle-initial
PARAM_AUTO_CONVERGE_INCREMENT = "auto_converge.increment"  # QEMU's cpu-throttle-increment
MIB = 2**20
#: switch to post-copy once the first full RAM pass is done (as the QMP driver does)
POSTCOPY_AFTER_ITERATION = 2
# virDomainJobType
JOB_TYPES = {0: "none", 1: "bounded", 2: "unbounded", 3: "completed", 4: "failed", 5: "cancelled"}


def migrate_flags(s: Scenario, disks: str | None = None) -> int:
    """Flags for MODE and the QEMU knobs: always PEER2PEER (daemon to daemon over the link);
    LIVE for pre-copy (without it libvirt pauses the guest first: stop-and-copy);
    AUTO_CONVERGE, COMPRESSED (xbzrle), POSTCOPY and PARALLEL (MULTIFD) as asked.
    ``disks`` = "copied": the domain's writable disk is the host's own overlay of an image both
    hosts hold (a lab: migrate.drivers.profile_boot.place), so NON_SHARED_INC: libvirt mirrors
    the overlay's top layer to R2's over NBD during the migration (what
    migrate.drivers.storage_mirror does over QMP).  ``disks`` = "shared": the domain has disks
    both hosts open from one file (a profile's per-run overlay, migrate.drivers.disk_boot), so
    UNSAFE: libvirt refuses a disk with a host page cache (cache other than none) unless told,
    since the destination could read stale cached blocks; QEMU flushes the source's writes and
    opens the images on the destination only at the switch (inactive until then), on one host's
    page cache, and cache=none (O_DIRECT) is not possible on the tmpfs that holds the overlay."""
    flags = VIR_MIGRATE_PEER2PEER
    if disks == "shared":
        flags |= VIR_MIGRATE_UNSAFE
    elif disks == "copied":
        flags |= VIR_MIGRATE_NON_SHARED_INC
    if s.mode == "precopy":
        flags |= VIR_MIGRATE_LIVE
    if s.auto_converge:
        flags |= VIR_MIGRATE_AUTO_CONVERGE
    if s.xbzrle:
        flags |= VIR_MIGRATE_COMPRESSED
    if s.postcopy:
        flags |= VIR_MIGRATE_POSTCOPY
    if s.multifd_channels is not None:
        flags |= VIR_MIGRATE_PARALLEL
    return flags


def flag_names(flags: int) -> list[str]:
    """Names of the set flags, in bit order."""
    return [name for bit, name in sorted(FLAG_NAMES.items()) if flags & bit]


def bandwidth_mib_s(max_bandwidth_bps: int) -> int:
    """MIGBW (bit/s) as libvirt's bandwidth parameter (whole MiB/s, at least 1)."""
    return max(1, round(max_bandwidth_bps / 8 / MIB))


def migrate_params(s: Scenario, migrate_uri: str, dest_xml: str | None) -> dict[str, Any]:
    """Typed parameters: the data-stream URI on the migration link, the destination XML (its own
    console log), the bandwidth cap, the compression method (xbzrle, or multifd's zlib/zstd:
    libvirt 9.4.0) and cache, multifd's connections and auto-converge's throttling.  libvirt sets
    the QEMU parameters of both sides itself (multifd's before the destination listens)."""
    params: dict[str, Any] = {PARAM_URI: migrate_uri}
    if dest_xml is not None:
        params[PARAM_DEST_XML] = dest_xml
    if s.max_bandwidth_bps is not None:
        params[PARAM_BANDWIDTH] = bandwidth_mib_s(s.max_bandwidth_bps)
    if s.xbzrle:
        params[PARAM_COMPRESSION] = "xbzrle"
    if s.xbzrle_cache_bytes is not None:
        params[PARAM_XBZRLE_CACHE] = s.xbzrle_cache_bytes
    if s.multifd_channels is not None:
        params[PARAM_PARALLEL_CONNECTIONS] = s.multifd_channels
    if s.multifd_compression not in (None, "none"):
        params[PARAM_COMPRESSION] = s.multifd_compression
    if s.cpu_throttle_initial is not None:
        params[PARAM_AUTO_CONVERGE_INITIAL] = s.cpu_throttle_initial
        params[PARAM_AUTO_CONVERGE_INCREMENT] = s.cpu_throttle_increment
    return params


def progress_reply(stats: Mapping[str, Any]) -> dict[str, Any]:
    """A running job's statistics in the shape of a QMP query-migrate reply (status, ram
    transferred/total, iteration), which is what the fault injector reads."""
    job = JOB_TYPES.get(int(stats.get("type", 0)), "unknown")
    status = "active" if job in ("bounded", "unbounded") else job
    return {
        "status": status,
        "ram": {
            "transferred": int(stats.get("memory_processed", 0)),
            "total": int(stats.get("memory_total", 0)),
            "dirty-sync-count": int(stats.get("memory_iteration", 0)),
        },
    }
