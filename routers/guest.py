"""The router guest as the orchestrator sees it: image files, kernel command line, console markers.

Console contract (serial ``ttyS0``), one line each:

* ``VRMIG-BOOT kernel=<release> profile=<profile>`` - init started (printed early).
* ``VRMIG-READY router=<profile> version=<router version>`` - printed exactly once, when the
  router daemon itself reports the connected routes of both interfaces (IPv4 and IPv6).
* ``VRMIG-FAIL <reason>`` - the guest gave up (missing NIC, daemon died, not ready in time).
* ``VRMIG-DIRTY rate_mb_s=<R> wss_mib=<N> wss_s=<S> pid=<pid>`` - with ``vrmig.dirty=<R>``: the
  memory-dirtying load (``vrmig-dirty``, after READY) runs; ``VRMIG-DIRTY-FAIL <reason>`` if it
  cannot, ``VRMIG-DIRTY-LAG ...`` once if the vCPU cannot sustain the rate.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from routers import paths, profiles
from routers.errors import NotBuiltError, RouterError, TooLittleMemoryError

READY_MARKER = "VRMIG-READY"
BOOT_MARKER = "VRMIG-BOOT"
FAIL_MARKER = "VRMIG-FAIL"

DIRTY_MARKER = "VRMIG-DIRTY rate_mb_s="
DIRTY_FAIL_MARKER = "VRMIG-DIRTY-FAIL"
DIRTY_LAG_MARKER = "VRMIG-DIRTY-LAG"
#: the guest binary that dirties memory at a set rate (routers/guestsrc/vrmig-dirty.c); images
#: built before it existed have no manifest.json ``tools`` entry for it
DIRTY_TOOL = "vrmig-dirty"
#: the suite's traffic tools, compiled into the guest's /usr/sbin for the guest as an end host
#: (routers.build CROSSTRAFFIC_TOOLS); images built before them lack their ``tools`` entries
ENDHOST_TOOLS: tuple[str, ...] = ("vrgen", "vrsink", "vrtcp")

#: Bumped whenever the guest's contract (cmdline, init, markers) changes; older images are refused.
#: 2: ``vrmig.ospfdead`` on the cmdline and FRR's ospfd in the frr image (PEERING=ospf).
GUEST_FORMAT = 2

#: NIC model (the orchestrator's NIC=) -> the guest kernel driver it needs.
NIC_DRIVERS = {"virtio": "virtio_net", "e1000": "e1000"}

#: Appended to every command line: ``quiet`` keeps the (slow, emulated) serial console free of
#: kernel chatter so the guest reaches READY sooner; the markers are printed regardless.
DEFAULT_EXTRA_ARGS: tuple[str, ...] = ("quiet",)


@dataclass(frozen=True)
class GuestImage:
    """A built guest: boot it with ``-kernel kernel -initrd initrd -append kernel_cmdline(...)``.

    ``rootfs`` is the unpacked initramfs tree (reusable as a chroot by other hypervisors)."""

    kernel: Path
    initrd: Path
    manifest: dict[str, Any] = field(compare=False)
    profile: str = "frr"
    rootfs: Path | None = None

    @property
    def min_mem_mib(self) -> int | None:
        """The least guest memory (MiB) that boots this image: the guest unpacks its initramfs
        into RAM beside the compressed copy, so the need grows with both.  Measured on
        2026-12-02 under QEMU TCG (routers check at lower -m): the FRR 10.3 image (39.2 MB
        unpacked, 10.8 MB compressed) fails at 128 and boots at 136, FRR 8.4's (21.4 + 7.4 MB)
        fails at 96 and boots at 112; 72 MiB + 1.4 x the two sizes, rounded up to 16 MiB,
        covers both with a margin.  None for a manifest without the sizes."""
        files = self.manifest.get("files") or {}
        initrd = files.get(paths.INITRD_NAME) or {}
        packed, unpacked = initrd.get("bytes"), initrd.get("uncompressed_bytes")
        if not isinstance(packed, int) or not isinstance(unpacked, int):
            return None
        need = 72 + 1.4 * (packed + unpacked) / 2**20
        return int(-(-need // 16) * 16)

    def check_mem(self, mem_mib: int, router: str) -> None:
        """TooLittleMemoryError (one line, exit 2) when ``mem_mib`` is below :attr:`min_mem_mib`."""
        need = self.min_mem_mib
        if need is not None and mem_mib < need:
            version = (self.manifest.get("router") or {}).get("upstream_version") or "?"
            raise TooLittleMemoryError(
                f"MEM={mem_mib} is too small for ROUTER={router} ({version}): the guest unpacks its "
                f"{(self.manifest['files'][paths.INITRD_NAME]['uncompressed_bytes']) / 1e6:.0f} MB root file "
                f"system into RAM and needs MEM={need} or more: raise MEM, or use a smaller router image"
            )

    def supports_nic(self, nic: str) -> bool:
        """True if the guest kernel has a driver for NIC model ``nic`` (``virtio``/``e1000``).

        Debian's cloud kernel has no e1000: build with ``--kernel-package linux-image-amd64``."""
        driver = NIC_DRIVERS.get(nic)
        mods = self.manifest.get("modules", {})
        return driver is not None and driver in (*mods.get("load_order", ()), *mods.get("builtin", ()))


def _addresses(name: str, cidrs: Sequence[str]) -> str:
    if isinstance(cidrs, str) or not cidrs:
        raise RouterError(f"{name}: give a non-empty list of addresses with prefix length, e.g. ['198.18.1.1/24']")
    out = []
    for cidr in cidrs:
        if "/" not in cidr:
            raise RouterError(f"{name}: address {cidr!r} has no prefix length (expected e.g. 198.18.1.1/24)")
        try:
            iface = ipaddress.ip_interface(cidr)
        except ValueError as err:
            raise RouterError(f"{name}: {err}") from None
        if iface.ip == iface.network.network_address and iface.network.prefixlen < iface.max_prefixlen:
            raise RouterError(f"{name}: {cidr} is a network address, not a host address")
        out.append(iface.with_prefixlen)
    return ",".join(out)


def kernel_cmdline(
    profile: str,
    if0: list[str],
    if1: list[str],
    extra: Sequence[str] = DEFAULT_EXTRA_ARGS,
    console: str = "ttyS0",
    rib_routes: int = 0,
    routing: Sequence[str] = (),
    dirty_mb_s: float | None = None,
) -> str:
    """The guest kernel command line.

    ``dirty_mb_s``: the guest runs :data:`DIRTY_TOOL` at this rate (MB/s, MB = 2^20 B) once READY
    (``vrmig.dirty=<rate>``; the image must have the tool: :func:`has_tool`).

    ``routing`` are vrmig-router's peering arguments (``peering=bgp,bfd``, ``asn=…``,
    ``peers=…``, ``bfd=…``, ``bgphold=…``, ``ospfdead=…``), passed as ``vrmig.<argument>``.

    ``if0``/``if1`` are the addresses (with prefix length) of ``eth0`` (first NIC, left segment)
    and ``eth1`` (second NIC, right segment); ``console`` is ``hvc0`` for a Xen domU::

        >>> kernel_cmdline("frr", ["198.18.1.1/24", "2001:2:0:1::1/64"], ["198.18.2.1/24", "2001:2:0:2::1/64"])
        'console=ttyS0 net.ifnames=0 vrmig.router=frr vrmig.if0=198.18.1.1/24,2001:2:0:1::1/64 \
vrmig.if1=198.18.2.1/24,2001:2:0:2::1/64 quiet'
    """
    family = profiles.get(profile).family  # the image knows its software, not its release name
    args = [
        f"console={console}",
        "net.ifnames=0",
        f"vrmig.router={family}",
        f"vrmig.if0={_addresses('if0', if0)}",
        f"vrmig.if1={_addresses('if1', if1)}",
        *([f"vrmig.rib={rib_routes}"] if rib_routes else []),
        *(f"vrmig.{a}" for a in routing),
    ]
    if dirty_mb_s is not None:
        if not dirty_mb_s > 0:
            raise RouterError(f"dirty rate {dirty_mb_s!r} must be above 0 MB/s")
        args.append(f"vrmig.dirty={dirty_mb_s:g}")
    for arg in extra:
        if not arg or any(c.isspace() for c in arg):
            raise RouterError(f"kernel argument {arg!r} is empty or contains whitespace")
        args.append(arg)
    return " ".join(args)


#: Runs vrmig-router chrooted into a rootfs: private mounts (proc, sys, tmpfs over every
#: directory the daemons write to, so the cached tree is never modified), then one
#: ``VRMIG-PID <pid>`` line per daemon left running.
_CHROOT_SCRIPT = r"""
R=$1
shift
mount -t proc proc "$R/proc" && mount -t sysfs sysfs "$R/sys" ||
    { echo "VRMIG-FAIL cannot mount proc/sys in $R"; exit 1; }
for d in run tmp var/tmp var/log; do
    mount -t tmpfs -o mode=1777 tmpfs "$R/$d" || { echo "VRMIG-FAIL cannot mount tmpfs on $R/$d"; exit 1; }
done
chroot "$R" /usr/sbin/vrmig-router "$@"
rc=$?
for f in "$R"/run/vrmig/*.pid; do
    [ -f "$f" ] && echo "VRMIG-PID $(cat "$f")"
done
exit $rc
"""


def namespace_argv(profile: str, if0: list[str], if1: list[str], cache: Path | None = None) -> list[str]:
    """argv that starts the router of a built image without a VM: the image's rootfs as a
    chroot, in a private mount namespace, configuring ``eth0``/``eth1`` of the network namespace
    it runs in (root; wrap it in ``ip netns exec <ns>``).

    It prints the same ``VRMIG-READY``/``VRMIG-FAIL`` line as the guest, then one
    ``VRMIG-PID <pid>`` line per router daemon it leaves running (stop them by PID)."""
    image = guest_image(profile, cache)
    if image.rootfs is None:
        raise NotBuiltError(f"router guest image {profile!r} has no rootfs/: {_build_hint(profile)}")
    return chroot_argv(str(image.rootfs), profile, if0, if1)


def chroot_argv(rootfs: str, profile: str, if0: list[str], if1: list[str]) -> list[str]:
    """:func:`namespace_argv` for the rootfs at ``rootfs`` on the host that runs it (a lab's R1
    has its own copy of the image's tree)."""
    return [
        "unshare", "--mount", "--propagation", "private", "--", "sh", "-c", _CHROOT_SCRIPT, "vrmig-chroot",
        rootfs, profiles.family_of(profile), f"eth0={_addresses('if0', if0)}", f"eth1={_addresses('if1', if1)}",
    ]  # fmt: skip


def has_tool(image: GuestImage, name: str) -> bool:
    """True if the image's manifest lists guest tool ``name`` (built by routers.build)."""
    tools = image.manifest.get("tools")
    return isinstance(tools, dict) and isinstance(tools.get(name), dict)


def parse_dirty(line: str) -> dict[str, float] | None:
    """The fields of a ``VRMIG-DIRTY rate_mb_s=... wss_mib=... wss_s=... pid=...`` line as numbers
    (None for another line)::

        >>> parse_dirty("VRMIG-DIRTY rate_mb_s=30 wss_mib=120.0 wss_s=4.00 pid=231")
        {'rate_mb_s': 30.0, 'wss_mib': 120.0, 'wss_s': 4.0, 'pid': 231.0}
    """
    start = line.find(DIRTY_MARKER)
    if start < 0:
        return None
    out: dict[str, float] = {}
    for kv in line[start + len("VRMIG-DIRTY ") :].split():
        k, _, v = kv.partition("=")
        try:
            out[k] = float(v)
        except ValueError:
            continue
    return out if "rate_mb_s" in out else None


def parse_ready(line: str) -> dict[str, str] | None:
    """``{"router": ..., "version": ...}`` if ``line`` is a READY line, else None."""
    line = line.strip()
    if not line.startswith(READY_MARKER + " "):
        return None
    fields = dict(kv.split("=", 1) for kv in line.split()[1:] if "=" in kv)
    return fields if "router" in fields and "version" in fields else None


def sha256_file(path: Path) -> str:
    """Hex SHA-256 of a file."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _build_hint(profile: str) -> str:
    if profile in profiles.names():
        return f"run `make setup` (or `python -m routers build --profile {profile}`)"
    return f"run `make guest ROUTER={profile}` (or `python -m routers build --profile {profile}`)"


def guest_image(profile: str, cache: Path | None = None, verify: bool = True) -> GuestImage:
    """The built guest image of ``profile`` in ``cache`` (default ``$VRMIG_CACHE`` or
    ``~/.cache/vrmig``).

    Raises :class:`~routers.errors.UnknownProfileError` for an unknown profile,
    :class:`~routers.errors.ProfileUnavailableError` if it is not built and cannot be built here
    (XORP not installed), :class:`~routers.errors.NotBuiltError` (with "run `make setup`") if it
    is not built, incomplete, damaged (``verify``: SHA-256 against the manifest) or from an older
    vrmig."""
    prof = profiles.get(profile)
    profile = prof.name  # frr@10.3 is frr
    gdir = paths.guest_dir(profile, cache)
    kernel, initrd, manifest_path = (gdir / n for n in (paths.KERNEL_NAME, paths.INITRD_NAME, paths.MANIFEST_NAME))
    missing = [p.name for p in (kernel, initrd, manifest_path) if not p.is_file()]
    if missing:
        if not prof.debian:
            prof.require_available()
        raise NotBuiltError(
            f"router guest image {profile!r} is not built ({', '.join(missing)} missing in {gdir}): "
            + _build_hint(profile)
        )
    try:
        manifest = json.loads(manifest_path.read_text())
    except (OSError, ValueError) as err:
        raise NotBuiltError(f"{manifest_path} is unreadable ({err}): {_build_hint(profile)}") from None
    if manifest.get("format") != GUEST_FORMAT:
        raise NotBuiltError(
            f"router guest image {profile!r} in {gdir} was built by another vrmig version "
            f"(format {manifest.get('format')}, need {GUEST_FORMAT}): {_build_hint(profile)}"
        )
    if verify:
        for p in (kernel, initrd):
            want = manifest.get("files", {}).get(p.name, {}).get("sha256")
            if want != sha256_file(p):
                raise NotBuiltError(
                    f"{p} does not match its manifest (damaged or half-written): "
                    f"run `python -m routers build --profile {profile} --force`"
                )
    rootfs = gdir / paths.ROOTFS_NAME
    return GuestImage(
        kernel=kernel, initrd=initrd, manifest=manifest, profile=profile, rootfs=rootfs if rootfs.is_dir() else None
    )
