"""DRIVER=libvirt: the router guest as a libvirt domain (XML), built from the same router
profile, image, kernel command line and fixed MACs as the QMP driver's QEMU command line.

The NICs use the hypervisor host's existing taps (``tapL``/``tapR``, already on ``brL``/``brR``,
created by the testbed in R1 and R2): ``<interface type='ethernet'>`` with
``<target dev='tapL' managed='no'/>`` makes libvirt open them instead of creating (and, on the
source after the migration, deleting) its own, so the counter sampler keeps its interfaces."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from migrate.drivers.guest_vm import GuestVm

QEMU_BINARY = "/usr/bin/qemu-system-x86_64"
NIC_MODELS = {"virtio": "virtio", "e1000": "e1000"}
TCG_CPU_MODEL = "qemu64"  # as the QMP driver's -cpu qemu64 under TCG


def _sub(parent: ET.Element, tag: str, text: str | None = None, **attrs: str) -> ET.Element:
    el = ET.SubElement(parent, tag, attrs)
    if text is not None:
        el.text = text
    return el


def domain_xml(vm: GuestVm, *, emulator: str = QEMU_BINARY) -> str:
    """The libvirt domain XML of the router guest ``vm``.

    Accelerator "kvm" gives ``<domain type='kvm'>`` with ``host-passthrough`` CPU, "tcg" gives
    ``<domain type='qemu'>`` with the ``qemu64`` model (what the QMP driver uses).  The serial
    console goes to ``vm.console`` (a file), where the guest prints its READY marker."""
    accel, nic_model = vm.accel, vm.nic
    if accel not in ("kvm", "tcg"):
        raise ValueError(f"accel must be kvm or tcg, not {accel!r}")
    if nic_model not in NIC_MODELS:
        raise ValueError(f"NIC model must be one of {', '.join(NIC_MODELS)}, not {nic_model!r}")
    dom = ET.Element("domain", type="kvm" if accel == "kvm" else "qemu")
    _sub(dom, "name", vm.name)
    _sub(dom, "memory", str(vm.mem_mib), unit="MiB")
    _sub(dom, "vcpu", str(vm.vcpus))
    os_el = _sub(dom, "os")
    _sub(os_el, "type", "hvm", arch="x86_64", machine="q35")
    if vm.kernel is not None:
        _sub(os_el, "kernel", str(vm.kernel))
        _sub(os_el, "initrd", str(vm.initrd))
        _sub(os_el, "cmdline", vm.cmdline)
    else:
        _sub(os_el, "boot", dev="hd")
    if vm.firmware is not None:  # UEFI: the host's OVMF code and the run's own variable store
        _sub(os_el, "loader", str(vm.firmware.code), readonly="yes", type="pflash")
        _sub(os_el, "nvram", str(vm.firmware.vars))
    _sub(_sub(dom, "features"), "acpi")
    if accel == "kvm":
        _sub(dom, "cpu", mode="host-passthrough", check="none", migratable="on")
    else:
        cpu = _sub(dom, "cpu", mode="custom", match="exact", check="none")
        _sub(cpu, "model", TCG_CPU_MODEL, fallback="forbid")
    _sub(dom, "clock", offset="utc")
    for event in ("on_poweroff", "on_reboot", "on_crash"):
        _sub(dom, event, "destroy")
    dev = _sub(dom, "devices")
    _sub(dev, "emulator", emulator)
    for i, disk in enumerate(vm.disks):
        disk_el = _sub(dev, "disk", type="file", device="disk")
        _sub(disk_el, "driver", name="qemu", type=disk.format)
        _sub(disk_el, "source", file=str(disk.path))
        _sub(disk_el, "target", dev=f"vd{chr(ord('a') + i)}", bus="virtio")
        if disk.readonly:
            _sub(disk_el, "readonly")
    for nic in vm.nics:
        iface = _sub(dev, "interface", type="ethernet")
        _sub(iface, "mac", address=nic.mac)
        _sub(iface, "target", dev=nic.tap, managed="no")
        _sub(iface, "model", type=NIC_MODELS[nic_model])
        _sub(iface, "rom", enabled="no")
    if vm.console_socket is None:
        serial = _sub(dev, "serial", type="file")
        _sub(serial, "source", path=str(vm.console))
    else:  # typed on (migrate.drivers.console_config); QEMU logs all the guest prints to the file
        serial = _sub(dev, "serial", type="unix")
        _sub(serial, "source", mode="bind", path=str(vm.console_socket))
        _sub(serial, "log", file=str(vm.console), append="on")
    _sub(serial, "target", port="0")
    _sub(dev, "controller", type="usb", model="none")
    _sub(_sub(dev, "video"), "model", type="none")
    _sub(dev, "memballoon", model="none")
    ET.indent(dom)
    return ET.tostring(dom, encoding="unicode") + "\n"


def with_console(xml: str, console: Path, socket: Path | None = None) -> str:
    """``xml`` (e.g. the source's migratable XML) with the serial console file replaced: the
    destination host writes its own console log (both hosts share one file system here); a
    console on a Unix socket gets ``socket`` (the source's QEMU still holds its own) and logs to
    ``console``."""
    root = ET.fromstring(xml)
    sources = root.findall("./devices/serial[@type='file']/source")
    for serial in root.findall("./devices/serial[@type='unix']"):
        src, log_el = serial.find("source"), serial.find("log")
        if socket is None or src is None or log_el is None:
            raise ValueError("domain XML has a socket serial console: give the destination's socket and its log")
        src.set("path", str(socket))
        log_el.set("file", str(console))
        sources.append(src)
    if not sources:
        raise ValueError("domain XML has no file serial console to redirect")
    for src in root.findall("./devices/serial[@type='file']/source"):
        src.set("path", str(console))
    # the console device may also appear as <console type='file'> mirroring the serial port
    for src in root.findall("./devices/console[@type='file']/source"):
        src.set("path", str(console))
    return ET.tostring(root, encoding="unicode")


def domain_facts(xml: str) -> dict[str, str | None]:
    """Type, machine, emulator and NIC targets of a domain XML, for meta.json."""
    root = ET.fromstring(xml)
    os_type = root.find("./os/type")
    return {
        "type": root.get("type"),
        "machine": os_type.get("machine") if os_type is not None else None,
        "emulator": root.findtext("./devices/emulator"),
        "nics": ",".join(
            f"{t.get('dev')}={m.get('address')}"
            for i in root.findall("./devices/interface")
            if (t := i.find("target")) is not None and (m := i.find("mac")) is not None
        ),
    }
