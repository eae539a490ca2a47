"""Xen hosts in the emulated lab (``make lab-up XEN=1``): R1 and R2 as machines whose dom0 the
suite reaches only over SSH, as it reaches a real Xen host's.

Each of the lab's hypervisor hosts gets a long-lived QEMU (in its namespace, started by lab-up,
stopped by lab-down by PID) that boots the nested Xen host image of ``make xen`` with:

* ``ethL``/``ethR``: taps ``xtapL``/``xtapR`` on the host's bridges ``brL``/``brR``, bridged in
  dom0 with the router domU's vifs (``xenbrL``/``xenbrR``);
* ``ethM``: QEMU's UDP socket backend between the two hosts' migration addresses (port
  :data:`TUNNEL_PORT`), so the lab's migration link carries and counts the ``xl migrate`` stream;
  the dom0s own 198.19.254.1/30 and .2/30 there;
* ``ethA``: QEMU's user network (``restrict=on``: nothing leaves the process but the forwarded
  port), whose ``hostfwd`` puts dom0's sshd at the host's management address, port
  :data:`XEN_SSH_PORT`.  A forwarded connection keeps its client's source address (the
  orchestrator's management address; only loopback clients are rewritten to QEMU's own), so
  dom0's default route points at QEMU's address there.

dom0's sshd gets its configuration, its host key (generated here, so the lab's known_hosts holds
it before the first connection) and the lab key's ``authorized_keys`` from a cpio archive
appended to dom0's initrd (Linux unpacks concatenated archives).  Readiness is observed:
``VRMIG-DOM0-READY ... ssh=yes`` on dom0's serial console, then a real ``ssh ... true``."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

from migrate.core.errors import DependencyError, TestbedError
from migrate.core.registry import RUN_ENV
from migrate.core.sighold import held_signals
from migrate.labs.ssh_ready import wait_ssh
from migrate.labs.sshd import sshd_config
from migrate.testbed import topology as topo

#: on each hypervisor host's management address: QEMU's forward to its dom0's sshd
XEN_SSH_PORT = 2222
#: the dom0s' UDP tunnel on the hosts' migration link (the per-run nested hosts use 47990)
TUNNEL_PORT = 47991
#: dom0's addresses on the tunnel (one /30, outside the hosts' own migration /30)
DOM0_MIG_ADDR = {"R1": "198.19.254.1/30", "R2": "198.19.254.2/30"}
#: dom0's management NIC: its MAC, and QEMU's user network, private to the QEMU process
MGMT_MAC = {"R1": "52:54:00:c6:31:04", "R2": "52:54:00:c6:32:04"}
SLIRP_NET = "198.19.253.0/24"
SLIRP_HOST = "198.19.253.2"
DOM0_MGMT = "198.19.253.15/24"
#: the taps of dom0's data NICs on the host's bridges brL/brR (tapL/tapR are DRIVER=qmp's)
TAPS = {"L": "xtapL", "R": "xtapR"}
#: memory the Xen host keeps for guests beyond dom0's (the router domU's MEM must fit)
DOMU_MIB = 1024
BOOT_TIMEOUT_S = 300.0
POLL_S = 0.1
CONSOLE = "xen-console.log"


def dom0_overlay(role: str, host_key: bytes, authorized_keys: str) -> bytes:
    """The cpio archive appended to dom0's initrd: sshd's configuration, its host key and root's
    authorized_keys."""
    from routers import cpio

    config = sshd_config(
        f"sshd of the emulated lab's Xen host {role} (vrmig lab-up), in its dom0",
        address=topo.addr(DOM0_MGMT), port=22, host_key="/etc/ssh/ssh_host_ed25519_key",
        pid_file="/run/sshd.pid", authorized_keys="/root/.ssh/authorized_keys", sftp=False,
    )  # fmt: skip
    raw = io.BytesIO()
    cpio.write(
        raw,
        [
            cpio.directory("etc"),
            cpio.directory("etc/vrmig"),
            cpio.directory("etc/ssh"),
            cpio.directory("root", 0o700),
            cpio.directory("root/.ssh", 0o700),
            cpio.Entry("etc/vrmig/sshd_config", 0o100644, config.encode()),
            cpio.Entry("etc/ssh/ssh_host_ed25519_key", 0o100600, host_key),
            cpio.Entry("root/.ssh/authorized_keys", 0o100600, authorized_keys.encode()),
        ],
    )
    return raw.getvalue()


def mgmt_netdev(host_addr: str) -> str:
    """QEMU user-network options of dom0's management NIC: private (``restrict=on``), in the
    testbed's range, with dom0's sshd forwarded to ``host_addr``:XEN_SSH_PORT."""
    return (
        f"restrict=on,net={SLIRP_NET},host={SLIRP_HOST},dhcpstart={topo.addr(DOM0_MGMT)},"
        f"hostfwd=tcp:{host_addr}:{XEN_SSH_PORT}-{topo.addr(DOM0_MGMT)}:22"
    )


def preflight() -> None:
    """QEMU and the nested Xen host image are there (``make setup`` builds both)."""
    from migrate.drivers.kvm.driver import QEMU
    from routers.errors import RouterError
    from routers.xen_image import xen_image

    if shutil.which(QEMU) is None:
        raise DependencyError(f"{QEMU} not found: run `make setup`")
    try:
        xen_image()
    except RouterError as err:
        raise DependencyError(f"lab-up XEN=1: {err}") from err


def start(
    *,
    lab: str,
    role: str,
    ns: str,
    host_dir: Path,
    mgmt_addr: str,
    authorized_keys: str,
    keygen: Callable[[Path, str], str],
    record: Callable[[int, str], None],
) -> subprocess.Popen[bytes]:
    """Start ``role``'s Xen host in namespace ``ns`` (its files under ``host_dir``/xen, dom0's
    sshd forwarded from ``mgmt_addr``); ``keygen`` makes dom0's host key pair, ``record`` notes
    the QEMU's PID in the lab's state before anything waits on it."""
    from migrate.core.netlink import iproute
    from migrate.drivers.kvm.accel import detect_accel
    from migrate.drivers.xen.driver import DOM0_MEM_MIB, HOST_MACS, QEMU_HEADROOM_MIB, TUNNEL_OVERHEAD, host_qemu_argv
    from migrate.testbed.builder import add_tap
    from routers.xen_image import xen_image

    hd = host_dir / "xen"
    hd.mkdir(mode=0o700)
    key = hd / "ssh_host_ed25519_key"
    keygen(key, f"vrmig-lab {lab} Xen host {role}")
    image = xen_image(verify=False)
    initrd = hd / "dom0-initrd.img"
    base = image.initrd.read_bytes()
    initrd.write_bytes(base + b"\0" * (-len(base) % 4) + dom0_overlay(role, key.read_bytes(), authorized_keys))
    with iproute(ns) as ipr:
        for seg, tap in TAPS.items():
            add_tap(ns, tap)
            br = ipr.link_lookup(ifname=f"br{seg}")[0]
            ipr.link("set", index=ipr.link_lookup(ifname=tap)[0], master=br, state="up")
        mtu = ipr.get_links(ipr.link_lookup(ifname=topo.MIGRATION_IF)[0])[0].get_attr("IFLA_MTU")
    peer = "R2" if role == "R1" else "R1"
    own, other = (topo.addr(topo.MIGRATION_ADDR[r]) for r in (role, peer))
    macs = HOST_MACS[role]
    accel = detect_accel()[0]
    dom0_args = (
        f"vrmig.macL={macs[0]} vrmig.macR={macs[1]} vrmig.macM={macs[2]} vrmig.addr={DOM0_MIG_ADDR[role]} "
        f"vrmig.mtu={int(mtu) - TUNNEL_OVERHEAD} vrmig.macA={MGMT_MAC[role]} vrmig.mgmt={DOM0_MGMT} "
        f"vrmig.gw={SLIRP_HOST}"
    )
    argv = host_qemu_argv(
        name=f"vrmig-lab-{lab}-xen-{role}",
        accel=accel,
        mem_mib=DOM0_MEM_MIB + DOMU_MIB + QEMU_HEADROOM_MIB,
        xen=image.xen,
        kernel=image.kernel,
        initrd=initrd,
        dom0_args=dom0_args,
        console=hd / CONSOLE,
        ctl=None,
        logport=None,
        qmp=None,
        nic="virtio",
        macs=macs,
        taps=(TAPS["L"], TAPS["R"], "unused"),
        mig_udp=(f"{own}:{TUNNEL_PORT}", f"{other}:{TUNNEL_PORT}"),
        mgmt=(MGMT_MAC[role], mgmt_netdev(mgmt_addr)),
    )
    env = {k: v for k, v in os.environ.items() if k != RUN_ENV}
    with open(hd / "qemu.stderr", "wb") as err, held_signals(mask=False):
        p = subprocess.Popen(
            ["ip", "netns", "exec", ns, *argv],
            stdin=subprocess.DEVNULL,
            stdout=err,
            stderr=err,
            start_new_session=True,
            close_fds=True,
            env=env,
        )
        record(p.pid, f"Xen host {role} (QEMU)")
    return p


def known_hosts_line(host_dir: Path, mgmt_addr: str) -> str:
    """The known_hosts line of the dom0 whose files are under ``host_dir``/xen
    (``[address]:port type key``)."""
    ktype, kdata = (host_dir / "xen" / "ssh_host_ed25519_key.pub").read_text().split()[:2]
    return f"[{mgmt_addr}]:{XEN_SSH_PORT} {ktype} {kdata}\n"


def wait_ready(role: str, host_dir: Path, p: subprocess.Popen[bytes], ssh: list[str]) -> float:
    """Wait for dom0's READY line with ``ssh=yes`` on the console, then for ``ssh ... true`` to
    succeed; return the seconds it took.  TestbedError when QEMU exits, dom0 reports a failure
    or the time runs out.  ``ssh``: the lab's ssh argv to dom0 (the command is appended)."""
    hd = host_dir / "xen"
    console = hd / CONSOLE
    ready = False

    def up() -> bool:
        nonlocal ready
        text = console.read_text(errors="replace") if console.exists() else ""
        if "VRMIG-DOM0-FAIL" in text:
            line = text[text.index("VRMIG-DOM0-FAIL") :].splitlines()[0]
            raise TestbedError(f"Xen host {role}: dom0 did not come up: {line} (console: {console})")
        if not ready:
            ready = "VRMIG-DOM0-READY" in text and "ssh=yes" in text
        return ready

    def exited(code: int) -> str:
        tail = (hd / "qemu.stderr").read_text(errors="replace").strip()[-300:]
        return f"Xen host {role}: its QEMU exited with {code}: {tail}"

    def timed_out(last: str) -> str:
        return (
            f"Xen host {role}: no SSH to its dom0 within {BOOT_TIMEOUT_S:.0f} s: "
            f"{last or 'no VRMIG-DOM0-READY ssh=yes on ' + str(console)}"
        )

    return wait_ssh(p, ssh, BOOT_TIMEOUT_S, POLL_S, up, exited, timed_out)


def inventory_tables(mgmt: dict[str, str]) -> dict[str, dict[str, str]]:
    """What the inventory says of each Xen host's dom0 (``mgmt``: the hosts' management
    addresses): its SSH host and port, its migration NIC and address, the host's taps of its
    data NICs."""
    return {
        r: {
            "host": mgmt[r],
            "port": str(XEN_SSH_PORT),
            "mig_if": "ethM",
            "mig_ipv4": DOM0_MIG_ADDR[r],
            "tapL": TAPS["L"],
            "tapR": TAPS["R"],
        }
        for r in topo.HYPERVISOR_HOSTS
    }
