"""Sockets and counters of another network namespace, used from the orchestrator without starting
a process: a short-lived thread enters the namespace (``setns`` changes only the calling
thread), opens what is needed and leaves; the objects keep working from any thread.

Used where a helper's start-up would fall inside a router's downtime: the image transfer to R2,
the MAC announcement from the restored router, R1's migration-link byte counter."""

from __future__ import annotations

import ctypes
import os
import socket
import threading
from collections.abc import Callable
from typing import TypeVar

CLONE_NEWNET = 0x40000000
T = TypeVar("T")


def in_netns(netns_path: str, fn: Callable[[], T]) -> T:
    """Run ``fn`` in a thread inside the network namespace at ``netns_path`` (e.g.
    ``/run/netns/<name>`` or ``/proc/<pid>/ns/net``) and return its result (or raise its error)."""
    result: list[T] = []
    error: list[BaseException] = []

    def worker() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        try:
            target = os.open(netns_path, os.O_RDONLY)
            try:
                if libc.setns(target, CLONE_NEWNET) != 0:
                    raise OSError(ctypes.get_errno(), f"setns({netns_path})")
            finally:
                os.close(target)
            try:
                result.append(fn())
            finally:
                if libc.setns(own, CLONE_NEWNET) != 0:  # the thread ends anyway; be tidy
                    raise OSError(ctypes.get_errno(), "setns back to the orchestrator's namespace")
        except BaseException as err:  # handed to the caller
            error.append(err)
        finally:
            os.close(own)

    t = threading.Thread(target=worker, name="vrmig-setns")
    t.start()
    t.join()
    if error:
        raise error[0]
    return result[0]


def socket_in(netns_path: str, family: int, kind: int, proto: int = 0) -> socket.socket:
    """A socket living in the network namespace at ``netns_path``."""
    return in_netns(netns_path, lambda: socket.socket(family, kind, proto))


def netns_path(name: str) -> str:
    """Path of a named namespace (``ip netns``)."""
    return f"/run/netns/{name}"


def parse_net_dev(text: str) -> dict[str, tuple[int, int]]:
    """``/proc/net/dev`` -> {ifname: (rx_bytes, tx_bytes)}."""
    out: dict[str, tuple[int, int]] = {}
    for line in text.splitlines()[2:]:
        name, _, rest = line.partition(":")
        fields = rest.split()
        if len(fields) >= 16:
            out[name.strip()] = (int(fields[0]), int(fields[8]))
    return out


class NetDevCounters:
    """Byte counters of a namespace's interfaces: ``/proc/thread-self/net/dev`` opened inside it
    (the file keeps showing that namespace); each read costs a fraction of a millisecond."""

    def __init__(self, netns: str) -> None:
        self._fh = in_netns(netns, lambda: open("/proc/thread-self/net/dev", "rb", buffering=0))

    def tx_bytes(self, ifname: str) -> int:
        """Current tx byte counter of ``ifname`` (KeyError if it does not exist)."""
        self._fh.seek(0)
        chunks = []
        while chunk := self._fh.read(65536):
            chunks.append(chunk)
        return parse_net_dev(b"".join(chunks).decode())[ifname][1]

    def close(self) -> None:
        """Release the file (and with it the reference to the namespace)."""
        self._fh.close()
