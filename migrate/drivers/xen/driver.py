"""HV=xen: Xen pre-copy migration (``xl migrate``) of the router as a PVH domU.

Nested (the default here): R1 and R2 each run a QEMU that boots Xen 4.17 and a dom0 (``make xen``,
:mod:`routers.xen_image`).  Each nested host has three NICs, taps in its namespace: ``tapL`` on ``brL``,
``tapR`` on ``brR`` (the names the counter sampler reads, as for HV=kvm) and ``tapM`` on a bridge
``brM`` with the dedicated link ``mig0``, whose bytes the sampler counts exactly as for HV=kvm.
dom0 bridges ``ethL``/``ethR`` with the domU's vifs (``xenbrL``/``xenbrR``), so the paper's
topology holds one level down; the dom0s own the migration link's /30 addresses.

dom0 is driven over a virtio-serial command channel (:class:`migrate.drivers.xen.dom0.AgentDom0`): each
command's output and exit status come back framed.  Readiness is observed: ``VRMIG-DOM0-READY``
on each host's serial console, ``VRMIG-READY`` on the router domU's console (xenconsoled's log,
streamed to the orchestrator).  ``xl -vvv migrate`` on R1 and ``xl -vvv migrate-receive`` behind
socat on R2 stream their messages here, timestamped on receipt (``xen_log.jsonl``), which
:mod:`analysis.hypervisors.xen` turns into the hypervisor's figures.

On a lab (``TESTBED=``): each nested host's QEMU runs on the lab's R1/R2 over SSH under the guard
(the files hosts-setup copied to ``<deploy_dir>/images/xen``), with the host's taps as ``ethL``/``ethR``;
the agent's sockets are forwarded through the SSH connection; dom0's migration NIC is QEMU's UDP
socket backend between the two hosts' migration addresses (:data:`LAB_TUNNEL_PORT`), so the lab's
link carries the stream and nothing in the hosts' network configuration changes.

A lab's Xen hosts (the inventory's ``hosts.R1.xen``/``hosts.R2.xen``): nothing is nested; xl runs
in each dom0 over SSH (:class:`migrate.drivers.xen.dom0.SshDom0`, every long-lived command under a
shell guard that stops it when its channel closes, and a domain reaper per dom0), the domU's files
are copied to ``<deploy_dir>/xen/`` (:class:`migrate.drivers.xen.xl.DomuPaths`), and the volume is
dom0's own NIC counters beside the lab link's.  ``make lab-up XEN=1`` builds such hosts here.

Real Xen hosts without a lab inventory: when the suite runs in a dom0 (``xl`` present, ``/proc/xen/capabilities`` says
control_d) and ``XEN_PEER`` names the destination (``ssh`` transport), the same phases run xl
directly (:class:`migrate.drivers.xen.dom0.ShellDom0`); ``XEN_MIG_ADDR`` is the destination's address on
the migration link, ``XEN_MIG_IF`` the dom0 NIC whose counters give the volume.  The hosts must
provide what the nested image does: the domU's kernel and initrd under ``/xen/domu``, the
``vrmig-vif`` hotplug script, xenconsoled logging guest consoles, socat.  Not the default here and
not exercised on this machine (it has no Xen)."""

from __future__ import annotations

import json
import logging
import os
import shlex
import shutil
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from migrate.core.errors import ConfigError, DependencyError, GuestError, MigrationError
from migrate.core.netlink import iproute
from migrate.core.nsock import NetDevCounters, netns_path
from migrate.core.procs import Proc
from migrate.core.rundir import XEN_DOMU_CFG, XEN_JSON, console_log
from migrate.drivers.base import Driver, MigrationOutcome, RunContext
from migrate.drivers.kvm.accel import detect_accel
from migrate.drivers.kvm.driver import NIC_MODELS, QEMU, qemu_version
from migrate.drivers.xen.dom0 import (
    EXIT_MARK,
    REAPER_SH,
    XEN_LOG,
    AgentDom0,
    Dom0Error,
    ShellDom0,
    SshDom0,
    StreamLog,
)
from migrate.drivers.xen.xl import (
    DOMAIN,
    ROUTER_MACS,
    DomuPaths,
    domu_config,
    excerpt,
    parse_xl_info,
    parse_xl_list,
    receiver_argv,
    router_domains,
    sender_argv,
)
from migrate.model import routing
from migrate.model.scenario import XEN_PV_REFUSAL, Scenario, xen_host_env
from migrate.testbed import topology as topo
from migrate.testbed.builder import add_tap
from migrate.testbed.inventory import XenDom0Spec

log = logging.getLogger(__name__)

DOM0_MEM_MIB = 1024
QEMU_HEADROOM_MIB = 512
#: the nested host's CPU under TCG: QEMU's ``max`` without XSAVE, so Xen, dom0 and the domU save
#: and restore the FPU/SSE state with FXSAVE/FXRSTOR.  With XSAVE exposed, processes in the domU
#: segfaulted (busybox sh, cat, vrsink, vrtcp) or wrote records with 16 bytes (one XMM register)
#: replaced when this machine's 2 cores were contended: 1 configuration of 2 lost its shell in 48
#: points with two CPU hogs beside the run, against 0 of 48 (twice) with ``xsave=off``
#: (docs/measurements/2026-12-07-xen-endhost.md); under KVM the host's own CPU is passed through
TCG_CPU = "max,xsave=off"
XEN_APPEND = (
    f"console=com1 com1=115200 dom0_mem={DOM0_MEM_MIB}M,max:{DOM0_MEM_MIB}M dom0_max_vcpus=1 "
    "smap=0 smep=0"  # without smap=0 smep=0 dom0 faults at once under TCG (shared/notes/xen-nested.md)
)
DOM0_READY, DOM0_FAIL = "VRMIG-DOM0-READY", "VRMIG-DOM0-FAIL"
#: dom0 NIC MACs per host (left, right, migration link); the domU keeps the router's own MACs
HOST_MACS = {
    "R1": ("52:54:00:c6:31:01", "52:54:00:c6:31:02", "52:54:00:c6:31:03"),
    "R2": ("52:54:00:c6:32:01", "52:54:00:c6:32:02", "52:54:00:c6:32:03"),
}
MIG_TAP, MIG_BRIDGE = "tapM", "brM"
#: a lab's nested hosts (TESTBED=): the dom0s' /30 on the UDP tunnel between the two hosts'
#: migration addresses (unused elsewhere in the testbed's range), the tunnel's port on both
#: hosts, and what a tunnelled frame adds on the host's link (its Ethernet header, 14 B, in a
#: UDP/IPv4 datagram, 8 + 20 B), which the dom0s' MTU leaves room for
LAB_DOM0_ADDR = {"R1": "198.19.254.1/30", "R2": "198.19.254.2/30"}
LAB_TUNNEL_PORT = 47990
TUNNEL_OVERHEAD = 14 + 8 + 20
#: where hosts-setup puts the nested Xen host's files on a lab's R1 and R2 (under deploy_dir);
#: one dom0 initrd per router profile, with that profile's domU inside
LAB_XEN_DIR = "images/xen"


def lab_xen_files(deploy_dir: str, profile: str) -> tuple[str, str, str]:
    """(Xen, dom0 kernel, dom0 initrd with ``profile``'s router) on a lab host."""
    d = f"{deploy_dir}/{LAB_XEN_DIR}"
    return f"{d}/xen.elf", f"{d}/dom0-vmlinuz", f"{d}/dom0-initrd-{profile}.img"


DOMU_CONSOLE_LOG = f"/var/log/xen/console/guest-{DOMAIN}.log"
SEND_PIDFILE = "/run/vrmig/send.pid"  # in R1's dom0: the xl migrate to stop on timeout
#: dom0 steps that need shell syntax: fixed scripts, parameters only as positional arguments
MISSING_TOOLS_SH = 'for t in "$@"; do command -v "$t" >/dev/null || echo "$t"; done'
LISTENING_SH = "ss -ltn 2>/dev/null || netstat -ltn"
FOLLOW_SH = 'touch "$1" && exec tail -n +1 -F "$1"'
#: dom0 relays the virtio-serial port ``vrmig.shell`` to the console of domain "$1" as ``xl
#: console`` attaches to it: the console pty xenconsoled serves (its path in xenstore), both ends
#: the pty raw without echo; ``ignoreeof``: the port reads end-of-file while the host side has no
#: connection, and the relay outlives that
SHELL_RELAY_SH = r"""
port=
for p in /sys/class/virtio-ports/*; do
    [ "$(cat "$p/name" 2>/dev/null)" = vrmig.shell ] && port=/dev/${p##*/}
done
[ -n "$port" ] || { echo "no virtio-serial port vrmig.shell"; exit 1; }
id=$(xl domid "$1") || exit 1
tty=$(xenstore-read "/local/domain/$id/console/tty") || exit 1
echo "relay $port $tty"
exec socat "$port,ignoreeof" "$tty,raw,echo=0"
"""
WRITE_FILE_SH = 'printf "%s" "$2" > "$1"'
PIDFILE_EXEC_SH = 'mkdir -p "${1%/*}" && echo $$ > "$1" && shift && exec "$@"'
KILL_PIDFILE_SH = 'kill "$(cat "$1")"'
PROGRESS_POLL_S = 0.2  # mig0 counters for the fault injector while xl migrate runs
SHUTDOWN_TIMEOUT_S = 10.0
BOOT_SOCKET_TIMEOUT_S = 30.0  # a lab host's QEMU creating its agent sockets


def real_dom0() -> bool:
    """True when this machine is itself a Xen dom0 with xl."""
    try:
        caps = Path("/proc/xen/capabilities").read_text()
    except OSError:
        return False
    return "control_d" in caps and shutil.which("xl") is not None


def host_qemu_argv(
    *,
    name: str,
    accel: str,
    mem_mib: int,
    xen: Path,
    kernel: Path,
    initrd: Path,
    dom0_args: str,
    console: Path,
    ctl: Path | None,
    logport: Path | None,
    qmp: Path | None,
    nic: str,
    macs: tuple[str, str, str],
    taps: tuple[str, str, str] = ("tapL", "tapR", MIG_TAP),
    mig_udp: tuple[str, str] | None = None,
    mgmt: tuple[str, str] | None = None,
    shell: Path | None = None,
) -> list[str]:
    """QEMU argv of one nested Xen host: Xen as the multiboot kernel, dom0's kernel and initrd as
    modules (no commas allowed in ``dom0_args``: QEMU splits -initrd at them).

    ``mig_udp`` (a lab's host): the migration NIC is QEMU's UDP socket backend, ``(local
    address:port, peer address:port)`` on the hosts' migration link, instead of the third tap:
    each Ethernet frame of the dom0s' link travels as one UDP datagram between the two hosts'
    own migration addresses, so the lab's link carries (and its counters count) the stream
    without any change to the host's network configuration.

    ``ctl``/``logport`` None: no agent ports (dom0 is reached over SSH); ``mgmt`` = (MAC, QEMU
    user-network options with the ``hostfwd`` to dom0's sshd): a fourth NIC for management.
    ``shell``: a third virtio-serial port, ``vrmig.shell``, offered on that Unix socket, which
    dom0 relays to the router domU's console (:data:`SHELL_RELAY_SH`: the end host's command
    channel of ``make baseline ROLE=vm-tx|vm-rx``)."""
    if shell is not None and (ctl is None or logport is None):
        raise ValueError("the shell port is a virtio-serial port beside the agent's")
    if "," in dom0_args or "," in str(kernel) or "," in str(initrd):
        raise ConfigError(f"dom0 command line and image paths must not contain commas: {dom0_args!r}")
    argv = [
        QEMU,
        "-name", name,
        "-accel", accel,
        "-cpu", "host" if accel == "kvm" else TCG_CPU,
        "-m", str(mem_mib),
        "-smp", "1",
        "-nodefaults", "-no-user-config", "-display", "none", "-vga", "none", "-no-reboot",
        "-msg", "timestamp=on",
        "-chardev", f"file,id=con,path={console}", "-serial", "chardev:con",
        "-kernel", str(xen), "-append", XEN_APPEND,
        "-initrd", f"{kernel} console=hvc0 {dom0_args},{initrd}",
    ]  # fmt: skip
    if qmp is not None:
        argv += ["-qmp", f"unix:{qmp},server=on,wait=off"]
    if ctl is not None and logport is not None:
        argv += [
            "-device", "virtio-serial-pci",
            "-chardev", f"socket,id=ctl,path={ctl},server=on,wait=off",
            "-device", "virtserialport,chardev=ctl,name=vrmig.ctl",
            "-chardev", f"socket,id=log,path={logport},server=on,wait=off",
            "-device", "virtserialport,chardev=log,name=vrmig.log",
        ]  # fmt: skip
    if shell is not None:
        argv += ["-chardev", f"socket,id=sh,path={shell},server=on,wait=off",
                 "-device", "virtserialport,chardev=sh,name=vrmig.shell"]  # fmt: skip
    for i, (tap, mac) in enumerate(zip(taps, macs, strict=True)):
        if i == 2 and mig_udp is not None:
            netdev = f"socket,id=n{i},udp={mig_udp[1]},localaddr={mig_udp[0]}"
        else:
            netdev = f"tap,id=n{i},ifname={tap},script=no,downscript=no"
        argv += ["-netdev", netdev, "-device", f"{NIC_MODELS[nic]},netdev=n{i},mac={mac},romfile="]
    if mgmt is not None:
        argv += ["-netdev", f"user,id=nA,{mgmt[1]}", "-device", f"{NIC_MODELS[nic]},netdev=nA,mac={mgmt[0]},romfile="]
    return argv


@dataclass(frozen=True)
class NestedBoot:
    """What differs in a nested Xen host's QEMU between this machine and a lab's host: its image
    files, the sockets as QEMU creates them, the console, the migration NIC's backend, the
    host's taps, dom0's address and MTU on the migration link."""

    xen: Path
    kernel: Path
    initrd: Path
    sockets: dict[str, Path]
    console: Path
    stdout_name: str | None
    mig_udp: tuple[str, str] | None
    taps: tuple[str, str, str]
    addr: str
    mtu: int


class _LocalNestedHosts:
    """Nested Xen hosts in R1's and R2's namespaces of this machine: the dom0s' migration NICs
    bridged with the namespace's migration link, files and sockets here."""

    def __init__(self, driver: XenDriver) -> None:
        self.d = driver
        #: dom0's MTU on the migration link per host where it is not XEN_MIG_MTU (a lab's tunnel)
        self.mtu: dict[str, int] = {}

    def dom0_addr(self, host: str) -> str:
        """dom0's CIDR on the migration link (the testbed's /30)."""
        return topo.MIGRATION_ADDR[host]

    def prepare(self, host: str) -> None:
        """Bridge ``mig0`` with the nested host's tap in ``host``'s namespace; the dom0s own the
        link's addresses now (the namespace's address is removed)."""
        self.d._mig_bridge(host)

    def boot(self, host: str, socks: dict[str, Path]) -> NestedBoot:
        """This machine's nested host image, sockets and console in the run's directories."""
        from routers.xen_image import host_initrd, xen_image

        s = self.d.ctx.scenario
        image = xen_image(verify=False)
        return NestedBoot(
            xen=image.xen, kernel=image.kernel, initrd=host_initrd(s.router), sockets=socks,
            console=self.d.ctx.run_dir / console_log(host), stdout_name=None, mig_udp=None,
            taps=("tapL", "tapR", MIG_TAP), addr=self.dom0_addr(host), mtu=s.xen_mig_mtu,
        )  # fmt: skip

    def started(self, host: str, proc: Proc, boot: NestedBoot, socks: dict[str, Path]) -> None:
        """The sockets are this machine's already."""

    def fault_targets(self) -> dict[str, Any]:
        """The nested hosts' QEMUs, killed by PID mid-migration (chaos)."""
        from migrate.model.faults import kill_pid

        procs = self.d.procs
        return {
            "dst-qemu-dies": kill_pid(lambda: procs["R2"].pid if "R2" in procs else None),
            "src-qemu-dies": kill_pid(lambda: procs["R1"].pid if "R1" in procs else None),
        }

    def describe(self) -> dict[str, Any]:
        """Nothing beyond the driver's facts."""
        return {}


class _LabNestedHosts(_LocalNestedHosts):
    """Nested Xen hosts on a lab's R1 and R2 over SSH: the files hosts-setup put there, the
    sockets in the run's directory there (forwarded to this machine), the console on QEMU's
    stdout (the SSH channel brings it into console-<host>.log as it is written), and the dom0s'
    migration NICs joined by a QEMU UDP socket tunnel between the hosts' migration addresses."""

    def dom0_addr(self, host: str) -> str:
        """dom0's CIDR on the tunnel."""
        return LAB_DOM0_ADDR[host]

    def prepare(self, host: str) -> None:
        """The nested host's files are there (hosts-setup put them), and the MTU its dom0 gets on
        the tunnel: the host's migration link MTU less the tunnel's overhead, at most XEN_MIG_MTU."""
        tb, s = self.d.ctx.testbed, self.d.ctx.scenario
        for path in lab_xen_files(tb.inventory.deploy_dir, s.router):
            if not tb.exists(host, path):
                raise DependencyError(
                    f"{host}: {path} is missing: run `make hosts-setup TESTBED={tb.inventory.path}` "
                    "(it copies the nested Xen host image that `make xen` built)"
                )
        ifname = tb.inventory.host(host).migration_if
        if not ifname:
            raise ConfigError(
                f"{tb.inventory.path}: hosts.{host}: HV=xen needs the migration link's interface "
                "(migration = { interface = ..., ipv4 = ... }): the dom0s' tunnel runs over it"
            )
        raw = tb.read_bytes(host, f"/sys/class/net/{ifname}/mtu")
        if raw is None or not raw.strip().isdigit():
            raise DependencyError(f"{host}: cannot read the MTU of its migration interface {ifname}")
        self.mtu[host] = min(s.xen_mig_mtu, int(raw) - TUNNEL_OVERHEAD)

    def boot(self, host: str, socks: dict[str, Path]) -> NestedBoot:
        """The host's copies, its run directory's sockets, QEMU's stdout, the UDP tunnel."""
        tb, reg, s = self.d.ctx.testbed, self.d.ctx.registry, self.d.ctx.scenario
        inv = tb.inventory
        xen, kernel, initrd = (Path(p) for p in lab_xen_files(inv.deploy_dir, s.router))
        peer = "R2" if host == "R1" else "R1"
        own, other = (topo.addr(inv.host(r).migration_ipv4 or topo.MIGRATION_ADDR[r]) for r in (host, peer))
        return NestedBoot(
            xen=xen, kernel=kernel, initrd=initrd,
            sockets={n: Path(tb.out_path(host, reg.dir, p.name)) for n, p in socks.items()},
            console=Path("/dev/stdout"), stdout_name=console_log(host),
            mig_udp=(f"{own}:{LAB_TUNNEL_PORT}", f"{other}:{LAB_TUNNEL_PORT}"),
            taps=(inv.host(host).taps["L"], inv.host(host).taps["R"], MIG_TAP),
            addr=self.dom0_addr(host), mtu=self.mtu[host],
        )  # fmt: skip

    def started(self, host: str, proc: Proc, boot: NestedBoot, socks: dict[str, Path]) -> None:
        """Forward the host's control and log sockets to this machine once QEMU made them."""
        for n in ("xenctl", "xenlog"):
            self.d.ctx.testbed.forward_socket(
                host, socks[n], str(boot.sockets[n]), BOOT_SOCKET_TIMEOUT_S, proc.alive, "QEMU", f"{n} socket"
            )

    def fault_targets(self) -> dict[str, Any]:
        """A lab takes no FAULT (migrate.experiment.place.lab_supports)."""
        return {}

    def describe(self) -> dict[str, Any]:
        """The tunnel between the hosts."""
        return {
            "lab_tunnel": {
                "what": "the dom0s' migration NICs are QEMU UDP socket backends between the hosts' "
                "migration addresses (one datagram per Ethernet frame)",
                "port": LAB_TUNNEL_PORT,
                "dom0_addr": dict(LAB_DOM0_ADDR),
                "dom0_mtu": dict(self.mtu),
                "overhead_bytes_per_frame": TUNNEL_OVERHEAD,
            }
        }


class XenDriver(Driver):
    """xl migrate between two Xen hosts (nested under QEMU by default)."""

    name = "xen"

    def __init__(self, ctx: RunContext, facts: dict[str, Any]) -> None:
        super().__init__(ctx, facts)
        self.nested: bool = facts["nested"]
        #: where the nested hosts' QEMUs run: this machine's namespaces, or a lab's hosts over SSH
        #: (TESTBED=; a lab takes no XEN_PEER: migrate.experiment.place.lab_supports)
        self.hosts_site: _LocalNestedHosts = (
            _LabNestedHosts(self) if getattr(ctx.testbed, "remote", False) else _LocalNestedHosts(self)
        )
        #: a lab whose R1 and R2 are Xen hosts (their inventory's ``xen`` tables): xl runs in
        #: their dom0s over SSH, nothing is nested (the embedded inventory has none)
        specs = {r: ctx.testbed.inventory.host(r).xen for r in topo.HYPERVISOR_HOSTS}
        self.xen_hosts: dict[str, XenDom0Spec] = {r: x for r, x in specs.items() if x is not None}
        if self.xen_hosts:
            self.nested = False
        self.domu_paths = DomuPaths()
        self.ssh: dict[str, Any] = {}  # the dom0s' SSH connections (migrate.testbed.hosts.SshHost)
        self.deployed: dict[str, Any] = {}
        self.accel = facts.get("accel")
        self.procs: dict[str, Proc] = {}
        self.dom0: dict[str, AgentDom0 | ShellDom0] = {}
        self.streams = StreamLog(ctx.run_dir / XEN_LOG)
        self.boot_s: dict[str, float] = {}
        # the destination's address on the migration link and dom0's NIC there (real hosts: from
        # the environment; nested: the testbed's /30 and dom0-init's ethM)
        # (checked by the scenario: an IP address and an interface name, see xen_host_env)
        env = xen_host_env(os.environ)
        nested_addr = topo.addr(self.hosts_site.dom0_addr("R2"))
        self.mig_addr: str = nested_addr if self.nested else (env["mig_addr"] or nested_addr)
        mig_if: str = "ethM" if self.nested else (env["mig_if"] or "ethM")
        #: dom0's NIC on the migration link, per host (R1's tx and R2's rx bytes are the volume)
        self.mig_ifs: dict[str, str] = {h: mig_if for h in topo.HYPERVISOR_HOSTS}
        if self.xen_hosts:
            self.mig_addr = topo.addr(self.xen_hosts["R2"].migration_ipv4)
            self.mig_ifs = {h: x.migration_if for h, x in self.xen_hosts.items()}
            x1 = self.xen_hosts["R1"]
            self.domu_paths = DomuPaths.under(x1.deploy_dir, ctx.scenario.router, x1.bridges)
            self.accel = None
        self._described: dict[str, Any] = {}

    # -- preflight -------------------------------------------------------------------------
    @classmethod
    def preflight(cls, scenario: Scenario) -> dict[str, Any]:
        """Nested: QEMU, the router guest image and the nested Xen host image; real: xl."""
        if scenario.xen_guest == "pv":
            raise ConfigError(XEN_PV_REFUSAL)
        if scenario.mode != "precopy":
            raise ConfigError("HV=xen supports MODE=precopy only (xl migrate); stop-and-copy is not implemented")
        from routers.build import run_image
        from routers.errors import RouterError
        from routers.xen_image import xen_image

        try:
            image = run_image(scenario.router)  # a release other than the default: built on first use
        except RouterError as err:
            raise DependencyError(str(err)) from err
        image.check_mem(scenario.mem_mib, scenario.router)
        peer = xen_host_env(os.environ)["peer"]
        if real_dom0() and peer:
            return {"nested": False, "xen_guest_type": scenario.xen_guest, "peer": peer,
                    "accel": None, "guest_image": dict(image.manifest)}  # fmt: skip
        if shutil.which(QEMU) is None:
            raise DependencyError(f"{QEMU} not found: run `make setup`")
        try:
            ximage = xen_image()
        except RouterError as err:
            raise DependencyError(str(err)) from err
        auto, reason = detect_accel()
        if scenario.accel == "kvm" and auto != "kvm":
            raise DependencyError(f"ACCEL=kvm requested but KVM is unusable here: {reason}")
        accel = auto if scenario.accel == "auto" else scenario.accel
        return {
            "nested": True,
            "xen_guest_type": scenario.xen_guest,
            "qemu": qemu_version(),
            "accel": accel,
            "accel_reason": reason if scenario.accel == "auto" else f"forced by ACCEL={scenario.accel} ({reason})",
            "xen_image": {
                "dir": str(ximage.xen.parent),
                "hypervisor": ximage.manifest.get("hypervisor"),
                "tools": ximage.manifest.get("tools"),
                "dom0_kernel": ximage.manifest.get("dom0_kernel"),
                "built_at": ximage.manifest.get("built_at"),
            },
            "guest_image": {"kernel": str(image.kernel), "initrd": str(image.initrd), **image.manifest},
        }

    # -- nested hosts ----------------------------------------------------------------------
    def _mig_bridge(self, host: str) -> None:
        """In ``host``'s namespace: bridge ``mig0`` with the nested host's tap; the dom0s own the
        link's addresses now (the namespace's address is removed)."""
        with iproute(self.ctx.testbed.ns(host)) as ipr:
            ipr.link("add", ifname=MIG_BRIDGE, kind="bridge", br_stp_state=0, br_forward_delay=0)
            add_tap(self.ctx.testbed.ns(host), MIG_TAP)
            br = ipr.link_lookup(ifname=MIG_BRIDGE)[0]
            mig = ipr.link_lookup(ifname=topo.MIGRATION_IF)[0]
            a, plen = topo.MIGRATION_ADDR[host].split("/")
            ipr.addr("del", index=mig, address=a, prefixlen=int(plen))
            mtu = self.ctx.scenario.xen_mig_mtu
            for port in (topo.MIGRATION_IF, MIG_TAP):
                ipr.link("set", index=ipr.link_lookup(ifname=port)[0], master=br, mtu=mtu, state="up")
            ipr.link("set", index=br, mtu=mtu, state="up")

    def _boot_host(self, host: str) -> None:
        s, reg, tb = self.ctx.scenario, self.ctx.registry, self.ctx.testbed
        macs = HOST_MACS[host]
        socks = {n: reg.dir / f"{n}-{host}.sock" for n in ("xenctl", "xenlog", "qmp")}
        boot = self.hosts_site.boot(host, socks)
        remote, addr, mtu = boot.sockets, boot.addr, boot.mtu
        dom0_args = f"vrmig.macL={macs[0]} vrmig.macR={macs[1]} vrmig.macM={macs[2]} vrmig.addr={addr} vrmig.mtu={mtu}"
        argv = host_qemu_argv(
            name=f"vrmig-{tb.prefix}-xen-{host}",
            accel=self.accel,
            mem_mib=DOM0_MEM_MIB + s.mem_mib + QEMU_HEADROOM_MIB,
            xen=boot.xen,
            kernel=boot.kernel,
            initrd=boot.initrd,
            dom0_args=dom0_args,
            console=boot.console,
            ctl=remote["xenctl"],
            logport=remote["xenlog"],
            qmp=remote["qmp"],
            nic=s.nic,
            macs=macs,
            taps=boot.taps,
            mig_udp=boot.mig_udp,
        )
        proc = tb.spawn(host, f"qemu-xen-{host}", argv, reg, self.ctx.run_dir, stdout_name=boot.stdout_name)
        self.procs[host] = proc
        self.hosts_site.started(host, proc, boot, socks)
        self.dom0[host] = AgentDom0(host, socks["xenctl"], socks["xenlog"], self.streams, proc.alive)

    def _wait_dom0(self, host: str, t0: float) -> None:
        """Wait for dom0's READY (or FAIL) line on the host's serial console."""
        console = self.ctx.run_dir / console_log(host)
        proc = self.procs[host]
        deadline = time.monotonic() + self.ctx.scenario.boot_timeout_s
        while True:
            text = console.read_text(errors="replace") if console.exists() else ""
            if DOM0_READY in text:
                self.boot_s[host] = round(time.monotonic() - t0, 2)
                self.ctx.recorder.action("dom0-ready", host=host, boot_s=self.boot_s[host])
                return
            why = None
            if DOM0_FAIL in text:
                why = "dom0 reported a failure"
            elif not proc.alive():
                why = f"its QEMU exited (status {proc.returncode()}: {proc.stderr_tail()})"
            elif time.monotonic() > deadline:
                why = f"no {DOM0_READY} within {self.ctx.scenario.boot_timeout_s:.0f} s"
            elif self.ctx.abort and self.ctx.abort():
                why = "interrupted"
            if why:
                raise GuestError(f"nested Xen host {host} did not boot: {why}; console: {excerpt(text)}")
            time.sleep(0.05)

    def _run(self, host: str, argv: list[str], timeout_s: float = 30.0, check: bool = True) -> str:
        rc, out = self.dom0[host].run(argv, timeout_s)
        if check and rc != 0:
            raise GuestError(f"{host} dom0: `{shlex.join(argv)[:120]}` failed (exit {rc}): {excerpt(out)}")
        return out

    def _check_tools(self, host: str) -> dict[str, Any]:
        """The dom0 tools the driver needs are there; xl info's main figures."""
        tools = ["xl", "socat", "xenstore-read", "xenstore-watch"]
        missing = self._run(host, ["sh", "-c", MISSING_TOOLS_SH, "sh", *tools], check=False).split()
        if missing:
            raise DependencyError(f"{host} dom0 lacks {', '.join(missing)}: rebuild with `make xen`")
        info = parse_xl_info(self._run(host, ["xl", "info"]))
        return {k: info.get(k) for k in ("xen_version", "virt_caps", "total_memory", "free_memory", "xen_commandline")}

    # -- phases ----------------------------------------------------------------------------
    def start_source(self) -> None:
        """Boot both nested hosts (concurrently), then the router domU on R1; wait for READY."""
        rec = self.ctx.recorder
        t0 = time.monotonic()
        if self.nested:
            for host in topo.HYPERVISOR_HOSTS:
                self.hosts_site.prepare(host)
            for host in topo.HYPERVISOR_HOSTS:
                rec.action("boot-host", host=host)
                self._boot_host(host)
            for host in topo.HYPERVISOR_HOSTS:
                self._wait_dom0(host, t0)
        elif self.xen_hosts:
            self._connect_dom0s()
            self._described["hosts"] = {h: self._check_tools(h) for h in topo.HYPERVISOR_HOSTS}
            self._deploy_domu()
        else:
            self.dom0["R1"] = ShellDom0("R1", self.streams)
            self.dom0["R2"] = ShellDom0("R2", self.streams, ["ssh", self.facts["peer"]])
        if "hosts" not in self._described:
            self._described["hosts"] = {h: self._check_tools(h) for h in topo.HYPERVISOR_HOSTS}
        self._described["host_boot_s"] = dict(self.boot_s)
        self._create_domu()

    # -- a lab's Xen hosts: dom0s over SSH ------------------------------------------------
    def _connect_dom0s(self) -> None:
        """Open an SSH master to each dom0; refuse to start when a domain of the router's name
        is there already (a killed run's: ``make clean-testbed`` destroys it)."""
        from migrate.testbed.hosts import SshHost

        control = self.ctx.registry.dir / "dom0"
        for host, x in self.xen_hosts.items():
            ssh = SshHost(x.host_spec(host), control)
            self.ssh[host] = ssh
            ssh.open()
            self.dom0[host] = SshDom0(host, self.streams, ssh, self.ctx.testbed.prefix)
        for host in self.xen_hosts:
            rc, text = self.dom0[host].run(["xl", "list"], 15.0)
            names = router_domains(text) if rc == 0 else []
            if names:
                tb = self.ctx.testbed.inventory.path
                raise DependencyError(
                    f"{host} dom0 already runs a domain {names[0]} (left by a killed run?): "
                    f"make clean-testbed TESTBED={tb} destroys it"
                )
        # the reapers: if this process dies, the domains it makes go with it
        for host in self.xen_hosts:
            self.dom0[host].stream("reap", ["sh", "-c", REAPER_SH, "sh", DOMAIN])
        for host in self.xen_hosts:
            hit = self.streams.wait(host, "reap", ("REAPER-READY", EXIT_MARK), 30.0)
            if hit is None or "REAPER-READY" not in hit["line"]:
                tail = " | ".join(self.streams.tail(host, "reap"))
                raise DependencyError(f"{host} dom0: the domain reaper did not start: {tail or 'no output'}")

    def _deploy_domu(self) -> None:
        """Copy the router domU of this run's profile (kernel, initrd) and the vif hotplug script
        into R1's and R2's dom0 (``<deploy_dir>/xen/``), each file only when its SHA-256 there
        differs; record what was copied and how long it took."""
        from routers.guest import sha256_file
        from routers.xen_image import XENFS, domu_files

        kernel, initrd = domu_files(self.ctx.scenario.router)
        dp = self.domu_paths
        files = [(kernel, dp.kernel, 0o644), (initrd, dp.initrd, 0o644), (XENFS / "vrmig-vif", dp.vif_script, 0o755)]
        for host in self.xen_hosts:
            t0 = time.monotonic()
            d = self.dom0[host]
            assert isinstance(d, SshDom0)
            self._run(host, ["mkdir", "-p", str(PurePosixPath(dp.kernel).parent)])
            copied = []
            for local, remote, mode in files:
                want = sha256_file(local)
                rc, out = d.run(["sha256sum", remote], 60.0)
                if rc == 0 and out.split()[:1] == [want]:
                    continue
                d.put(local.read_bytes(), remote, mode)
                copied.append({"file": remote, "bytes": local.stat().st_size, "sha256": want})
            self.deployed[host] = {"copied": copied, "seconds": round(time.monotonic() - t0, 2)}
            self.ctx.recorder.action("deploy-domu", host=host, files=len(copied))

    def _create_domu(self) -> None:
        s, rec = self.ctx.scenario, self.ctx.recorder
        left, right = (self.ctx.testbed.inventory.router[seg] for seg in topo.SEGMENTS)
        rec.action("boot", host="R1", domain=DOMAIN, type=s.xen_guest)
        create_router_domu(
            self.dom0["R1"], self.streams, "R1", s.router, ([left.ipv4, left.ipv6], [right.ipv4, right.ipv6]),
            mem_mib=s.mem_mib, vcpus=s.vcpus, guest_type=s.xen_guest, macs=(left.mac, right.mac),
            timeout_s=s.boot_timeout_s,
            alive=self.procs["R1"].alive if "R1" in self.procs else None, save_cfg=self.ctx.run_dir / XEN_DOMU_CFG,
            rib_routes=s.rib_routes, routing=routing.router_args(s), paths=self.domu_paths,
        )  # fmt: skip
        rec.action("router-ready", host="R1")

    def prepare_destination(self) -> None:
        """R2: xl migrate-receive behind a socat listener on the migration link."""
        port = topo.MIGRATION_PORT
        addr = self.mig_addr
        self.dom0["R2"].run(["rm", "-f", DOMU_CONSOLE_LOG])  # an earlier domain's (a real dom0 keeps them)
        self.dom0["R2"].stream("recv", receiver_argv(addr, port))
        deadline = time.monotonic() + 30.0
        while f":{port} " not in self._run("R2", ["sh", "-c", LISTENING_SH], check=False):
            if time.monotonic() > deadline:
                raise MigrationError(f"R2: socat did not listen on {addr}:{port}: {self.streams.tail('R2', 'recv')}")
            time.sleep(0.1)
        self.dom0["R2"].stream("con", ["sh", "-c", FOLLOW_SH, "sh", DOMU_CONSOLE_LOG])
        self.ctx.recorder.action("incoming", host="R2", uri=f"tcp:{addr}:{port}")

    def migrate(self) -> MigrationOutcome:
        """xl migrate R1 -> R2; block until xl exits (or the timeout)."""
        s, rec = self.ctx.scenario, self.ctx.recorder
        argv = sender_argv(self.mig_addr, topo.MIGRATION_PORT)
        n0 = len(self.streams.lines)
        before = self._mig_counters()
        rec.action("migrate", side="src", command=shlex.join(argv), mode=s.mode)
        self.dom0["R1"].stream("send", ["sh", "-c", PIDFILE_EXEC_SH, "sh", SEND_PIDFILE, *argv])
        alive = self.procs["R1"].alive if "R1" in self.procs else None
        hit = self._wait_sent(s.migrate_timeout_s, alive)
        if hit is None:
            rec.action("migration-end", side="src", status="failed", reason="timeout or host died")
            with_excerpt = " | ".join(self.streams.tail("R1", "send"))
            if alive is not None and not alive():
                raise MigrationError(f"nested host R1 died during the migration; xl: {with_excerpt}")
            self._run("R1", ["sh", "-c", KILL_PIDFILE_SH, "sh", SEND_PIDFILE], check=False)
            raise MigrationError(f"xl migrate did not finish within {s.migrate_timeout_s:.0f} s; xl: {with_excerpt}")
        rc = int(hit["line"].split()[-1])
        status = "completed" if rc == 0 else "failed"
        rec.action("migration-end", t_ns=hit["t_ns"], side="src", status=status, exit_status=rc)
        self._write_counters(before, self._mig_counters())
        sent = [r for r in self.streams.lines[n0:] if r["host"] == "R1" and r["tag"] == "send"]
        if rc != 0:
            errors = [r["line"] for r in sent if "error" in r["line"].lower() or "fail" in r["line"].lower()]
            excerpt = " | ".join((errors or [r["line"] for r in sent])[-6:])
            raise MigrationError(f"xl migrate failed (exit {rc}): {excerpt}")
        return MigrationOutcome(completed=True, hypervisor={"xl_exit_status": rc})

    def _wait_sent(self, timeout_s: float, alive: Any) -> dict[str, Any] | None:
        """Wait for xl migrate's exit line; meanwhile (nested hosts, with a fault to inject) feed the
        fault injector the bytes R1 sent on ``mig0`` since the start, as QEMU's ``ram.transferred``
        feeds it for HV=kvm (the stream's headers included)."""
        faults = self.ctx.faults
        if not self.nested or faults is None or not faults.fault:
            return self.streams.wait("R1", "send", (EXIT_MARK,), timeout_s, alive)
        counters = NetDevCounters(netns_path(self.ctx.testbed.ns("R1")))
        try:
            tx0 = counters.tx_bytes(topo.MIGRATION_IF)
            deadline = time.monotonic() + timeout_s
            while True:
                left = deadline - time.monotonic()
                hit = self.streams.wait("R1", "send", (EXIT_MARK,), max(0.0, min(PROGRESS_POLL_S, left)), alive)
                if hit is not None or left <= 0 or (alive is not None and not alive()):
                    return hit
                sent = counters.tx_bytes(topo.MIGRATION_IF) - tx0
                faults.on_progress({"status": "active", "ram": {"transferred": sent}})
        finally:
            counters.close()

    def _mig_counters(self) -> dict[str, int | None]:
        """dom0's own byte counters of the migration NIC (R1 tx, R2 rx)."""
        out: dict[str, int | None] = {}
        for host, key, what in (("R1", "tx", "tx_bytes"), ("R2", "rx", "rx_bytes")):
            rc, text = self.dom0[host].run(["cat", f"/sys/class/net/{self.mig_ifs[host]}/statistics/{what}"], 15.0)
            out[key] = int(text.strip()) if rc == 0 and text.strip().isdigit() else None
        return out

    def _write_counters(self, before: dict[str, int | None], after: dict[str, int | None]) -> None:
        def delta(k: str) -> int | None:
            a, b = before.get(k), after.get(k)
            return b - a if a is not None and b is not None else None

        data = {"dom0_mig_tx_bytes": delta("tx"), "dom0_mig_rx_bytes_dst": delta("rx"), "before": before,
                "after": after, "nic": self.mig_ifs["R1"], "nic_dst": self.mig_ifs["R2"]}  # fmt: skip
        (self.ctx.run_dir / XEN_JSON).write_text(json.dumps(data, indent=1) + "\n")

    def verify(self) -> dict[str, Any]:
        """Where the domain runs (``xl list`` on both hosts)."""
        out: dict[str, Any] = {}
        for side, host in (("src", "R1"), ("dst", "R2")):
            try:
                rc, text = self.dom0[host].run(["xl", "list", DOMAIN], 15.0)
                dom = parse_xl_list(text).get(DOMAIN) if rc == 0 else None
                out[f"{side}_status"] = "running" if dom else "absent"
                out[f"{side}_xl_list"] = dom
            except (Dom0Error, KeyError) as err:
                out[f"{side}_status"] = f"unknown ({err})"
        return out

    def source_processes(self) -> tuple[dict[str, int], dict[str, int]]:
        """The nested Xen host's QEMU on R1 (Xen, dom0 and the domU all run in it); none when R1
        is a real Xen host (its domain's CPU is Xen's to account, not a process's)."""
        p = self.procs.get("R1")
        return ({"qemu-xen": getattr(p, "remote_pid", None) or p.pid}, {}) if p is not None else ({}, {})

    def source_running(self) -> bool:
        """The domain still exists on R1 (xl keeps it there after a failed migration)."""
        try:
            rc, text = self.dom0["R1"].run(["xl", "list", DOMAIN], 15.0)
        except (Dom0Error, KeyError):
            return False
        return rc == 0 and DOMAIN in parse_xl_list(text)

    def pause(self) -> None:
        """Pause the router domU on R1 (``xl pause`` in dom0; returns when xl has exited)."""
        self._run("R1", ["xl", "pause", DOMAIN])

    def resume(self) -> None:
        """Unpause the router domU on R1 (``xl unpause``)."""
        self._run("R1", ["xl", "unpause", DOMAIN])

    def fault_targets(self) -> dict[str, Any]:
        """Nested hosts that chaos runs kill mid-migration."""
        return self.hosts_site.fault_targets()

    def describe(self) -> dict[str, Any]:
        """Xen facts for meta.json: guest type, nesting, accelerator, the hosts' xl info."""
        return {
            **self._described,
            "xen_guest_type": self.ctx.scenario.xen_guest,
            "nested": self.nested,
            **(
                {
                    "dom0": {
                        "reached": "ssh",
                        "hosts": {h: f"{x.ssh.user}@{x.ssh.host}:{x.ssh.port}" for h, x in self.xen_hosts.items()},
                        "migration": {
                            h: {"nic": x.migration_if, "ipv4": x.migration_ipv4} for h, x in self.xen_hosts.items()
                        },
                        "domu_paths": asdict(self.domu_paths),
                        "deployed": self.deployed,
                    }
                }
                if self.xen_hosts
                else {}
            ),
            "accel": self.accel,
            "accel_reason": (
                "the Xen hosts' own hypervisor runs the domU (their xl info: hosts.*.virt_caps)"
                if self.xen_hosts
                else self.facts.get("accel_reason")
            ),
            "xen_log": XEN_LOG,
            "migration_link_mtu": self.hosts_site.mtu.get("R1", self.ctx.scenario.xen_mig_mtu),
            **self.hosts_site.describe(),
        }

    def stop(self) -> None:
        """Stop the nested hosts (their QEMUs, by PID) and close the channels.  On a lab's Xen
        hosts: destroy the router domain where it is, remove its config, stop the dom0 commands
        (closing their channels) and the SSH connections."""
        for host in self.ssh:
            try:
                rc, text = self.dom0[host].run(["xl", "list"], 30.0)
                for name in router_domains(text) if rc == 0 else []:
                    status, _ = self.dom0[host].run(["xl", "destroy", name], 30.0)
                    self.ctx.recorder.action("destroy-domu", host=host, domain=name, exit_status=status)
                self.dom0[host].run(["rm", "-f", self.domu_paths.cfg], 30.0)
            except (Dom0Error, OSError) as err:
                log.warning("%s dom0: could not remove the router domain: %s", host, err)
        for host, d in self.dom0.items():
            try:
                d.close()
            except OSError as err:
                log.debug("%s: close: %s", host, err)
        for proc in self.procs.values():
            proc.stop(timeout_s=SHUTDOWN_TIMEOUT_S)
        for ssh in self.ssh.values():
            ssh.close()
        self.streams.close()


def create_router_domu(
    dom0: AgentDom0 | ShellDom0,
    streams: StreamLog,
    host: str,
    profile: str,
    cidrs: tuple[list[str], list[str]],
    *,
    mem_mib: int,
    vcpus: int = 1,
    guest_type: str = "pvh",
    macs: tuple[str, str] = ROUTER_MACS,
    timeout_s: float = 120.0,
    rib_routes: int = 0,
    routing: Sequence[str] = (),
    alive: Any = None,
    save_cfg: Path | None = None,
    paths: DomuPaths | None = None,
    extra: Sequence[str] = (),
) -> str:
    """Write the domU's config into ``host``'s dom0, stream its console, ``xl create`` it and wait
    for the router's READY line (returned); GuestError with the console's tail otherwise.
    ``routing``: vrmig-router's peering arguments (:func:`migrate.model.routing.router_args`);
    ``paths``: where that dom0 keeps the domU's files (default: the nested host image's);
    ``extra``: kernel arguments beside the defaults (``vrmig.shell=1``)."""
    from routers.guest import DEFAULT_EXTRA_ARGS, FAIL_MARKER, READY_MARKER, kernel_cmdline

    dp = paths or DomuPaths()
    cmdline = kernel_cmdline(profile, cidrs[0], cidrs[1], extra=(*DEFAULT_EXTRA_ARGS, *extra), console="hvc0",
                             rib_routes=rib_routes, routing=routing)  # fmt: skip
    cfg = domu_config(dp.kernel, dp.initrd, cmdline, mem_mib=mem_mib, vcpus=vcpus, guest_type=guest_type, macs=macs,
                      bridges=dp.bridges, vif_script=dp.vif_script)  # fmt: skip
    if save_cfg is not None:
        save_cfg.write_text(cfg)
    rc, out = dom0.run(["sh", "-c", WRITE_FILE_SH, "sh", dp.cfg, cfg])
    if rc != 0:
        raise GuestError(f"{host} dom0: cannot write {dp.cfg}: {excerpt(out)}")
    # the domU's console as xenconsoled logs it, streamed (readiness is observed there); a log
    # an earlier domain of that name left (a real dom0 keeps them) is removed first
    dom0.run(["rm", "-f", DOMU_CONSOLE_LOG])
    dom0.stream("con", ["sh", "-c", FOLLOW_SH, "sh", DOMU_CONSOLE_LOG])
    rc, out = dom0.run(["xl", "create", dp.cfg], 120.0)
    if rc != 0:
        raise GuestError(f"{host} dom0: xl create failed (exit {rc}): {excerpt(out)}")
    hit = streams.wait(host, "con", (READY_MARKER, FAIL_MARKER), timeout_s, alive)
    if hit is None or READY_MARKER not in hit["line"]:
        tail = " | ".join(streams.tail(host, "con"))
        raise GuestError(f"router domU not ready on {host}: {hit['line'] if hit else 'no READY line'}; console: {tail}")
    return str(hit["line"])
