"""What the Xen driver says to and reads from ``xl``: the router domU's configuration file, the
``xl migrate`` / ``xl migrate-receive`` command lines of the migration (socat as the transport on the
migration link), and the parsers of ``xl list`` and ``xl info``.  Pure functions, unit-tested on
captured output (tests/unit/test_analysis_xen.py)."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import Any

from migrate.testbed import topology as topo

DOMAIN = "vrmig-router"
CFG_PATH = "/etc/xen/vrmig-router.cfg"
VIF_SCRIPT = "/usr/sbin/vrmig-vif"  # in the nested host image (routers/xenfs/vrmig-vif)

ROUTER_MACS: tuple[str, str] = (topo.ROUTER_PORTS[0].mac, topo.ROUTER_PORTS[1].mac)


@dataclass(frozen=True)
class DomuPaths:
    """Where a dom0 keeps what the router domU needs: its kernel and initrd, its xl config, the
    vif hotplug script, and the bridges its two vifs join.  The default is the nested host
    image's layout (``routers.xen_image``); a real Xen host's is under its deploy directory
    (:meth:`under`)."""

    kernel: str = "/xen/domu/vmlinuz"
    initrd: str = "/xen/domu/initrd.img"
    cfg: str = CFG_PATH
    vif_script: str = VIF_SCRIPT
    bridges: dict[str, str] = field(default_factory=lambda: {s: f"xenbr{s}" for s in topo.SEGMENTS})

    @classmethod
    def under(cls, deploy_dir: str, profile: str, bridges: dict[str, str]) -> DomuPaths:
        """A real Xen host's layout: ``<deploy_dir>/xen/<profile>/{vmlinuz,initrd.img}``, the
        config and ``vrmig-vif`` in ``<deploy_dir>/xen/``."""
        d = f"{deploy_dir}/xen"
        return cls(f"{d}/{profile}/vmlinuz", f"{d}/{profile}/initrd.img", f"{d}/{DOMAIN}.cfg", f"{d}/vrmig-vif",
                   dict(bridges))  # fmt: skip


def domu_config(
    kernel: str,
    ramdisk: str,
    cmdline: str,
    *,
    mem_mib: int,
    vcpus: int = 1,
    guest_type: str = "pvh",
    macs: tuple[str, str] = ROUTER_MACS,
    bridges: dict[str, str] | None = None,
    vif_script: str = VIF_SCRIPT,
) -> str:
    """The router domU's xl configuration (PVH, the router's MACs, vifs on dom0's bridges,
    xenbrL/xenbrR unless ``bridges`` says otherwise, hotplugged by ``vif_script``)."""
    br = bridges or {seg: f"xenbr{seg}" for seg in topo.SEGMENTS}
    vifs = ", ".join(
        f'"mac={mac},bridge={br[seg]},script={vif_script}"' for seg, mac in zip(topo.SEGMENTS, macs, strict=True)
    )
    return "\n".join(
        [
            f'name = "{DOMAIN}"',
            f'type = "{guest_type}"',
            f'kernel = "{kernel}"',
            f'ramdisk = "{ramdisk}"',
            f'cmdline = "{cmdline}"',
            f"memory = {mem_mib}",
            f"maxmem = {mem_mib}",
            f"vcpus = {vcpus}",
            'tsc_mode = "native"',  # without it TCG's SVM emulation fails on RDTSCP in the guest
            'on_crash = "preserve"',
            f"vif = [ {vifs} ]",
            "",
        ]
    )


def receiver_argv(addr: str, port: int) -> list[str]:
    """R2's listener: socat accepts one connection on ``addr``:``port`` and runs
    ``xl -vvv migrate-receive`` on it (socat's EXEC splits its own words; no shell)."""
    return ["socat", f"TCP-LISTEN:{port},bind={addr},reuseaddr", "EXEC:xl -vvv migrate-receive"]


def sender_argv(addr: str, port: int) -> list[str]:
    """R1's ``xl migrate``.  With an empty ``-s`` xl runs its host argument with ``sh -c`` as the
    transport, so that argument is a shell command line: built with shlex.join, the address
    stays one word whatever it contains."""
    transport = shlex.join(["socat", "-", f"TCP:{addr}:{port}"])
    return ["xl", "-vvv", "migrate", "-s", "", DOMAIN, transport]


def excerpt(text: str, n: int = 12) -> str:
    """The last ``n`` non-empty lines of a command's or console's output, joined with " | "."""
    lines = [ln for ln in text.replace("\r", "").splitlines() if ln.strip()]
    return " | ".join(lines[-n:])


def parse_xl_list(text: str) -> dict[str, dict[str, Any]]:
    """``xl list`` output -> {name: {id, mem_mib, vcpus, state, time_s}}."""
    out: dict[str, dict[str, Any]] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 6 or parts[0] == "Name" or not parts[1].isdigit():
            continue
        out[parts[0]] = {
            "id": int(parts[1]),
            "mem_mib": int(parts[2]),
            "vcpus": int(parts[3]),
            "state": parts[4],
            "time_s": float(parts[5]),
        }
    return out


def router_domains(xl_list: str) -> list[str]:
    """The router's domains in ``xl list`` output: :data:`DOMAIN` and the ``<name>--incoming``
    (or ``--migratedaway``) domains an interrupted ``xl migrate`` leaves on either host."""
    return [n for n in parse_xl_list(xl_list) if n == DOMAIN or n.startswith(f"{DOMAIN}--")]


def parse_xl_info(text: str) -> dict[str, str]:
    """``xl info`` output -> {key: value}."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            out[key.strip()] = value.strip()
    return out
