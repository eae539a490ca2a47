"""Which accelerator QEMU can use here: KVM when the CPU has VT-x/AMD-V and /dev/kvm can
create a VM, TCG otherwise.  The reason is recorded in meta.json."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

KVM_GET_API_VERSION = 0xAE00
KVM_CREATE_VM = 0xAE01
KVM_API_VERSION = 12


def cpu_flags(cpuinfo: str) -> set[str]:
    """CPU feature flags from /proc/cpuinfo text."""
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def detect_accel(dev: Path = Path("/dev/kvm"), cpuinfo: Path = Path("/proc/cpuinfo")) -> tuple[str, str]:
    """Return ('kvm'|'tcg', reason)."""
    flags = cpu_flags(cpuinfo.read_text())
    if not flags & {"vmx", "svm"}:
        return "tcg", "CPU has no vmx/svm flag (no hardware virtualization visible)"
    try:
        fd = os.open(dev, os.O_RDWR | os.O_CLOEXEC)
    except OSError as err:
        return "tcg", f"cannot open {dev}: {err.strerror}"
    try:
        if fcntl.ioctl(fd, KVM_GET_API_VERSION) != KVM_API_VERSION:
            return "tcg", f"{dev} has an unexpected KVM API version"
        vm = fcntl.ioctl(fd, KVM_CREATE_VM, 0)
        os.close(vm)
    except OSError as err:
        return "tcg", f"KVM_CREATE_VM failed: {err.strerror}"
    finally:
        os.close(fd)
    return "kvm", "vmx/svm present and /dev/kvm creates VMs"
