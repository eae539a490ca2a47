"""A bridge port cut and restored, and an interface's receive counter polled, on any testbed:
``make calibrate``'s known outages (a cut of the bridge port of the router's right-hand
interface) and its observation that the router forwards again (B's rx_packets).

The embedded testbed does both from the orchestrator without a process (a netlink socket and a
/proc file opened inside the namespace: :mod:`migrate.core.nsock`); a lab host through one SSH
session each.  :meth:`migrate.testbed.builder.Testbed.port_cut` and ``rx_counter`` give the one
that fits the testbed."""

from __future__ import annotations

import contextlib
import json
import socket
import struct
import subprocess
from typing import Any

from migrate.core.errors import VrmigError
from migrate.core.nsock import in_netns, netns_path, socket_in
from migrate.core.registry import Registry

# netlink (linux/rtnetlink.h, linux/if_link.h, linux/if_bridge.h)
RTM_SETLINK, NLMSG_ERROR = 19, 2
NLM_F_REQUEST, NLM_F_ACK = 0x1, 0x4
AF_BRIDGE, IFLA_PROTINFO, NLA_F_NESTED, IFLA_BRPORT_STATE = 7, 12, 0x8000, 1
BR_STATE_DISABLED, BR_STATE_FORWARDING = 0, 3


def brport_state_request(ifindex: int, state: int, seq: int) -> bytes:
    """RTM_SETLINK (AF_BRIDGE) setting a bridge port's STP state, as ``bridge link set dev X
    state N`` sends it: ifinfomsg + IFLA_PROTINFO (nested) { IFLA_BRPORT_STATE u8 }."""
    state_attr = struct.pack("=HHB3x", 5, IFLA_BRPORT_STATE, state)
    protinfo = struct.pack("=HH", 4 + len(state_attr), IFLA_PROTINFO | NLA_F_NESTED) + state_attr
    body = struct.pack("=BBHiII", AF_BRIDGE, 0, 0, ifindex, 0, 0) + protinfo
    return struct.pack("=IHHII", 16 + len(body), RTM_SETLINK, NLM_F_REQUEST | NLM_F_ACK, seq, 0) + body


def netlink_ack_error(reply: bytes, seq: int) -> int | None:
    """errno of the NLMSG_ERROR acknowledging request ``seq`` (0 = success; None: not it)."""
    off = 0
    while off + 16 <= len(reply):
        length, kind, _flags, rseq, _pid = struct.unpack_from("=IHHII", reply, off)
        if kind == NLMSG_ERROR and rseq == seq and length >= 20:
            return -struct.unpack_from("=i", reply, off + 16)[0]
        off += max((length + 3) & ~3, 16)
    return None


class PortCut:
    """Cuts and restores one bridge port in a namespace with one netlink request each."""

    def __init__(self, ns: str, ifname: str) -> None:
        from migrate.core.netlink import iproute

        with iproute(ns) as ipr:
            found = ipr.link_lookup(ifname=ifname)
            if not found or not ipr.get_links(found[0])[0].get_attr("IFLA_MASTER"):
                raise VrmigError(f"{ifname} in {ns} is not a bridge port: cannot cut the router's path there")
        self.ifindex, self.ifname = int(found[0]), ifname
        self.sock = socket_in(netns_path(ns), socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
        self.sock.settimeout(5.0)
        self.seq = 0

    def _set(self, state: int) -> None:
        self.seq += 1
        self.sock.send(brport_state_request(self.ifindex, state, self.seq))
        while (err := netlink_ack_error(self.sock.recv(65536), self.seq)) is None:
            pass
        if err:
            raise OSError(err, f"setting bridge port {self.ifname} to state {state}")

    def cut(self) -> None:
        """Port disabled: the bridge neither takes frames from it nor delivers frames to it."""
        self._set(BR_STATE_DISABLED)

    def restore(self) -> None:
        """Port forwarding again."""
        self._set(BR_STATE_FORWARDING)

    def close(self) -> None:
        """Close the netlink socket."""
        self.sock.close()


#: R1's side of a lab's cut (argv: ifname): prints "READY <ifindex>", then for every line of
#: hex (an RTM_SETLINK request) sends it on a NETLINK_ROUTE socket and prints the errno of the
#: kernel's acknowledgement (0: done); exits at end of input (the SSH channel closed)
LAB_PORT_CUT_SOURCE = r"""
import socket, struct, sys
s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
s.settimeout(5.0)
print("READY %d" % socket.if_nametoindex(sys.argv[1]), flush=True)
for line in sys.stdin:
    msg = bytes.fromhex(line.strip())
    seq = struct.unpack_from("=I", msg, 8)[0]
    s.send(msg)
    err = None
    while err is None:
        reply = s.recv(65536)
        off = 0
        while off + 16 <= len(reply):
            length, kind, _f, rseq, _p = struct.unpack_from("=IHHII", reply, off)
            if kind == 2 and rseq == seq and length >= 20:
                err = -struct.unpack_from("=i", reply, off + 16)[0]
                break
            off += max((length + 3) & ~3, 16)
    print(err, flush=True)
"""


class LabPortCut:
    """``PortCut`` on a lab host: the requests go to a program on the host over one SSH session
    (``LAB_PORT_CUT_SOURCE``); each returns once the host's kernel acknowledged it."""

    def __init__(self, tb: Any, role: str, ifname: str, registry: Registry) -> None:
        from migrate.core.procs import with_pdeathsig

        host = tb.hosts[role]
        res = host.run(["ip", "-j", "link", "show", "dev", ifname], check=False)
        links = json.loads(res.stdout or b"[]") if res.returncode == 0 else []
        if not links or not links[0].get("master"):
            raise VrmigError(f"{ifname} on {role} is not a bridge port: cannot cut the router's path there")
        self.ifname, self.role, self.seq = ifname, role, 0
        self.proc = subprocess.Popen(
            with_pdeathsig(host.ssh_argv(["python3", "-c", LAB_PORT_CUT_SOURCE, ifname])),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        registry.add_process(self.proc.pid, f"port-cut {role} (ssh)")
        first = self._line()
        if not first.startswith("READY "):
            self.close()
            raise VrmigError(f"the port cutter on {role} did not start: {first!r}")
        self.ifindex = int(first.split()[1])

    def _line(self) -> str:
        assert self.proc.stdout is not None
        return self.proc.stdout.readline().decode(errors="replace").strip()

    def _set(self, state: int) -> None:
        assert self.proc.stdin is not None
        self.seq += 1
        self.proc.stdin.write(brport_state_request(self.ifindex, state, self.seq).hex().encode() + b"\n")
        self.proc.stdin.flush()
        reply = self._line()
        if reply != "0":
            raise OSError(f"setting bridge port {self.ifname} on {self.role} to state {state}: {reply or 'no answer'}")

    def cut(self) -> None:
        """Port disabled (see ``PortCut.cut``)."""
        self._set(BR_STATE_DISABLED)

    def restore(self) -> None:
        """Port forwarding again."""
        self._set(BR_STATE_FORWARDING)

    def close(self) -> None:
        """End the session (the host's program exits at end of input)."""
        with contextlib.suppress(OSError):
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class LabRxPackets:
    """``RxPackets`` of an interface on a lab host (read over SSH)."""

    def __init__(self, tb: Any, role: str, ifname: str) -> None:
        self.tb, self.role, self.ifname = tb, role, ifname

    def read(self) -> int:
        """The current counter."""
        return int(self.tb.rx_packets(self.role, self.ifname))

    def close(self) -> None:
        """Nothing held."""


class RxPackets:
    """rx_packets of one interface in a namespace, read from ``/proc/thread-self/net/dev`` opened
    inside it (a file read, no process or netlink helper: polled right after an event's end, when
    the router's first packets are on their way)."""

    def __init__(self, ns: str, ifname: str) -> None:
        self.ifname = ifname
        self._fh = in_netns(netns_path(ns), lambda: open("/proc/thread-self/net/dev", "rb", buffering=0))

    def read(self) -> int:
        """The current counter."""
        self._fh.seek(0)
        for line in self._fh.read(1 << 20).decode().splitlines()[2:]:
            name, _, rest = line.partition(":")
            if name.strip() == self.ifname:
                return int(rest.split()[1])
        raise OSError(f"{self.ifname} not in /proc/net/dev")

    def close(self) -> None:
        """Release the file."""
        self._fh.close()
