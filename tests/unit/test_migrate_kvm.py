"""QEMU command line and accelerator detection (no root, no QEMU started)."""

import dataclasses
from pathlib import Path

import pytest

from migrate.drivers.guest_vm import GuestVm
from migrate.drivers.kvm.accel import cpu_flags, detect_accel
from migrate.drivers.kvm.driver import qemu_argv

VM = GuestVm(
    name="t", accel="tcg", mem_mib=256, vcpus=1, kernel=Path("/k"), initrd=Path("/i"), cmdline="console=ttyS0",
    console=Path("/c.log"), nic="virtio",
)  # fmt: skip


def _argv(incoming=False, **kw):
    return qemu_argv(dataclasses.replace(VM, **kw), qmp=Path("/q.sock"), incoming=incoming)


def test_argv_has_two_nics_with_fixed_macs_and_no_shell():
    argv = _argv()
    devs = [argv[i + 1] for i, a in enumerate(argv) if a == "-device"]
    assert len(devs) == 2
    assert all(d.startswith("virtio-net-pci") for d in devs)
    assert "mac=52:54:00:c6:12:01" in devs[0] and "mac=52:54:00:c6:12:02" in devs[1]
    assert argv[argv.index("-m") + 1] == "256" and argv[argv.index("-smp") + 1] == "1"
    assert "-incoming" not in argv


def test_argv_destination_defers_incoming_and_e1000():
    argv = _argv(incoming=True, nic="e1000", accel="kvm")
    assert argv[argv.index("-incoming") + 1] == "defer"
    assert argv[argv.index("-cpu") + 1] == "host"
    assert any(a.startswith("e1000,") for a in argv)


def test_cpu_flags():
    assert "vmx" in cpu_flags("processor: 0\nflags\t\t: fpu vmx sse\n")
    assert cpu_flags("nothing") == set()


def test_detect_accel_without_vmx_is_tcg(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("flags\t: fpu sse2\n")
    accel, reason = detect_accel(dev=tmp_path / "kvm", cpuinfo=cpuinfo)
    assert accel == "tcg" and "vmx" in reason


def test_detect_accel_with_vmx_but_no_device_is_tcg(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("flags\t: fpu vmx\n")
    accel, reason = detect_accel(dev=tmp_path / "missing", cpuinfo=cpuinfo)
    assert accel == "tcg" and "cannot open" in reason


def test_settle_waits_for_qemu_final_figures():
    """QEMU 7.2 can answer 'completed' with total-time 0 before it computes the figures."""
    from types import SimpleNamespace

    from migrate.drivers.kvm.driver import KvmDriver

    replies = iter([{"status": "completed", "total-time": 0}, {"status": "completed", "total-time": 812}])
    samples = []
    drv = KvmDriver.__new__(KvmDriver)
    drv.qsrc = SimpleNamespace(cmd=lambda name: next(replies))
    drv.ctx = SimpleNamespace(recorder=SimpleNamespace(sample=lambda side, t, r: samples.append(r)))
    final = drv._settle({"status": "completed", "total-time": 0})
    assert final["total-time"] == 812
    assert len(samples) == 2  # every reply is kept


def test_settle_returns_at_once_when_figures_are_there():
    from types import SimpleNamespace

    from migrate.drivers.kvm.driver import KvmDriver

    drv = KvmDriver.__new__(KvmDriver)
    drv.qsrc = SimpleNamespace(cmd=lambda name: pytest.fail("no extra query expected"))
    drv.ctx = SimpleNamespace(recorder=SimpleNamespace(sample=lambda *a: None))
    assert drv._settle({"status": "completed", "total-time": 700})["total-time"] == 700


def test_qemu_and_libvirt_boot_the_same_guest_from_one_description():
    """The QMP driver's command line and the libvirt driver's domain XML made from one GuestVm
    name the same memory, vCPUs, kernel, initrd, command line, console, taps and MACs."""
    import xml.etree.ElementTree as ET

    from migrate.drivers.guest_vm import GuestNic
    from migrate.drivers.libvirt.domain_xml import domain_xml

    vm = dataclasses.replace(VM, mem_mib=512, vcpus=2, nics=(GuestNic("tapX", "52:54:00:00:00:0a"),
                                                             GuestNic("tapY", "52:54:00:00:00:0b")))  # fmt: skip
    argv = qemu_argv(vm, qmp=Path("/q.sock"), incoming=False)
    dom = ET.fromstring(domain_xml(vm))
    assert (argv[argv.index("-m") + 1], argv[argv.index("-smp") + 1]) == (dom.findtext("memory"), dom.findtext("vcpu"))
    assert (argv[argv.index("-kernel") + 1], argv[argv.index("-initrd") + 1], argv[argv.index("-append") + 1]) == (
        dom.findtext("os/kernel"), dom.findtext("os/initrd"), dom.findtext("os/cmdline"))  # fmt: skip
    assert f"path={dom.find('devices/serial/source').get('path')}" in argv[argv.index("-chardev") + 1]
    nets = [a for a in argv if a.startswith("tap,")]
    devs = [argv[i + 1] for i, a in enumerate(argv) if a == "-device"]
    for n, net, dev in zip(dom.findall("devices/interface"), nets, devs, strict=True):
        assert f"ifname={n.find('target').get('dev')}," in net and f"mac={n.find('mac').get('address')}," in dev


def test_argv_boots_disks_without_a_kernel_and_keeps_commas_in_paths():
    from migrate.drivers.guest_vm import GuestDisk

    disks = (GuestDisk(Path("/r/a,b.qcow2"), "qcow2"), GuestDisk(Path("/r/seed.img"), "raw", readonly=True))
    argv = _argv(kernel=None, initrd=None, cmdline="", disks=disks)
    assert "-kernel" not in argv and "-append" not in argv
    drives = [argv[i + 1] for i, a in enumerate(argv) if a == "-drive"]
    assert drives == [
        "file=/r/a,,b.qcow2,format=qcow2,if=virtio,index=0,node-name=vrmig-disk0",
        "file=/r/seed.img,format=raw,if=virtio,index=1,node-name=vrmig-disk1,readonly=on",
    ]


def test_a_uefi_vm_gets_the_firmware_code_read_only_and_its_own_variable_store():
    from migrate.drivers.guest_vm import GuestDisk, UefiFirmware

    fw = UefiFirmware(Path("/usr/share/OVMF/OVMF_CODE_4M.fd"), Path("/run/x/router-efivars.fd"))
    argv = _argv(kernel=None, initrd=None, cmdline="", disks=(GuestDisk(Path("/r/d.qcow2"), "qcow2"),), firmware=fw)
    drives = [argv[i + 1] for i, a in enumerate(argv) if a == "-drive"]
    assert drives[:2] == [
        "if=pflash,format=raw,unit=0,readonly=on,file=/usr/share/OVMF/OVMF_CODE_4M.fd",
        "if=pflash,format=raw,unit=1,file=/run/x/router-efivars.fd",
    ]
    assert not any("pflash" in a for a in _argv(kernel=None, initrd=None, cmdline="", disks=(
        GuestDisk(Path("/r/d.qcow2"), "qcow2"),)))  # fmt: skip


def test_a_vm_needs_one_boot_medium():
    with pytest.raises(ValueError, match="boot medium"):
        _argv(kernel=None, initrd=None, cmdline="")
    with pytest.raises(ValueError, match="both or neither"):
        _argv(initrd=None)
