"""The router VM as both of its renderers see it: QEMU's command line
(:func:`migrate.drivers.kvm.driver.qemu_argv`, the QMP driver and the baseline) and libvirt's
domain XML (:func:`migrate.drivers.libvirt.domain_xml.domain_xml`) are made from one
:class:`GuestVm`, so that both drivers boot the same guest: its image and kernel command line,
memory, vCPUs, NIC model, and fixed MACs on the hypervisor host's taps.

The boot medium is either the suite's own kernel and initrd (``kernel``/``initrd``/``cmdline``)
or disks (``disks``: a router image the suite did not build, booted by the firmware; a profile
file names it, :mod:`routers.profile_file`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from migrate.testbed import topology as topo


@dataclass(frozen=True)
class GuestNic:
    """One router NIC: the host tap it uses and the MAC the guest keeps across migration."""

    tap: str
    mac: str


def router_nics() -> tuple[GuestNic, ...]:
    """The router's NICs in guest order (eth0 left, eth1 right) on the testbed's taps."""
    return tuple(GuestNic(tap=f"tap{p.segment}", mac=p.mac) for p in topo.ROUTER_PORTS)


DISK_FORMATS = ("qcow2", "raw")


@dataclass(frozen=True)
class UefiFirmware:
    """UEFI firmware as two flash devices: the firmware's code (read-only, the host's OVMF) and
    the run's own copy of its variable store (written by the guest)."""

    code: Path
    vars: Path


@dataclass(frozen=True)
class GuestDisk:
    """One virtio disk of the router VM: the image file as the hypervisor host sees it, its
    format (qcow2 or raw), and whether the guest may write it (a NoCloud seed is read-only)."""

    path: Path
    format: str
    readonly: bool = False

    def __post_init__(self) -> None:
        if self.format not in DISK_FORMATS:
            raise ValueError(f"disk format must be one of {', '.join(DISK_FORMATS)}, not {self.format!r}")


@dataclass(frozen=True)
class GuestVm:
    """One router VM: its name, accelerator (kvm or tcg), memory (MiB) and vCPUs, the kernel and
    initrd it boots with ``cmdline`` (None, None, "": it boots from ``disks`` instead, the first
    one through the BIOS), the file its serial console writes (where the guest prints its READY
    marker), its NIC model (``virtio`` or ``e1000``) and its NICs in guest order (default: the
    testbed's tapL/tapR with the router's fixed MACs).  ``console_socket``: the serial console is
    also a Unix socket there, for typing on it (migrate.drivers.console_config); the file still
    logs all it prints."""

    name: str
    accel: str
    mem_mib: int
    vcpus: int
    kernel: Path | None
    initrd: Path | None
    cmdline: str
    console: Path
    nic: str
    nics: tuple[GuestNic, ...] = field(default_factory=router_nics)
    disks: tuple[GuestDisk, ...] = ()
    console_socket: Path | None = None
    firmware: UefiFirmware | None = None  # None: SeaBIOS (QEMU's default)

    def __post_init__(self) -> None:
        if (self.kernel is None) != (self.initrd is None):
            raise ValueError("a router VM boots a kernel with its initrd: give both or neither")
        if self.kernel is None and not self.disks:
            raise ValueError("a router VM needs a boot medium: a kernel and initrd, or a disk")
