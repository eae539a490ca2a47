"""Run vrgen/vrsink (or any backend's argv) as child processes for self-tests, tests and benchmarks.

The orchestrator in ``migrate/`` has its own process handling; this module is the small,
dependency-free equivalent used by ``crosstraffic.selftest``, ``crosstraffic.bench`` and the
crosstraffic tests.  Every process is started by PID and stopped by PID; readiness is observed
(the sink's ``READY`` line), never assumed after a sleep.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import selectors
import signal
import socket
import subprocess
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from migrate.core.procs import with_pdeathsig

REPO = Path(__file__).resolve().parent.parent
BIN_DIR = REPO / "crosstraffic" / "bin"
NS_PREFIX = "vrt-ct-"
NEIGH_TIMEOUT_S = 10.0
REACH_POLL_S = 0.05


class RunError(RuntimeError):
    """A child process failed, timed out or did not become ready."""


@dataclass(frozen=True)
class Finished:
    """What a finished child process left behind."""

    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str


class Child:
    """One child process with stdout/stderr captured to pipes (stdout read at the end)."""

    def __init__(self, argv: Sequence[str], netns: str | None = None) -> None:
        self.argv = tuple(["ip", "netns", "exec", netns, *argv] if netns else argv)
        # a SIGKILLed bench or test must not leave vrgen/vrsink running: the child gets SIGKILL
        # as its parent-death signal and does not start if this process is already gone
        self.popen = subprocess.Popen(
            with_pdeathsig(list(self.argv)),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            close_fds=True,
        )
        self._stderr = b""

    @property
    def pid(self) -> int:
        """PID of the child (``ip netns exec`` execs the program, so the PID is the program's)."""
        return self.popen.pid

    def wait_line(self, marker: str, timeout_s: float) -> None:
        """Block until a stderr line equal to ``marker`` appears (or fail on exit / timeout)."""
        assert self.popen.stderr is not None
        fd = self.popen.stderr.fileno()
        deadline = time.monotonic() + timeout_s
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while True:
                lines = self._stderr.decode(errors="replace").splitlines()
                if marker in (ln.strip() for ln in lines):
                    return
                left = deadline - time.monotonic()
                if left <= 0:
                    self.kill()
                    raise RunError(f"{self.argv[-1]}: no {marker!r} within {timeout_s} s")
                if sel.select(left):
                    chunk = os.read(fd, 65536)
                    if not chunk:
                        rc = self.popen.wait()
                        raise RunError(f"exited with {rc} before {marker!r}: {self._stderr.decode(errors='replace')}")
                    self._stderr += chunk

    def signal(self, sig: int = signal.SIGTERM) -> None:
        """Send ``sig`` to this child only (by PID)."""
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.popen.pid, sig)

    def finish(self, timeout_s: float) -> Finished:
        """Wait for exit and collect the output; kill (by PID) on timeout."""
        try:
            out, err = self.popen.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            out, err = self.popen.communicate()
            raise RunError(f"{' '.join(self.argv)} did not exit within {timeout_s} s") from None
        return Finished(self.argv, self.popen.returncode, out.decode(), (self._stderr + err).decode(errors="replace"))

    def kill(self) -> None:
        """SIGKILL this child (by PID) and reap it."""
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.popen.pid, signal.SIGKILL)
            self.popen.wait()


def run(argv: Sequence[str], netns: str | None = None, timeout_s: float = 30) -> Finished:
    """Run a command to completion."""
    return Child(argv, netns).finish(timeout_s)


def free_udp_port(family: int = socket.AF_INET) -> int:
    """A UDP port that is free right now on the loopback interface."""
    with socket.socket(family, socket.SOCK_DGRAM) as s:
        s.bind(("::1" if family == socket.AF_INET6 else "127.0.0.1", 0))
        return int(s.getsockname()[1])


def ip(*args: str, error: type[Exception] = RunError) -> None:
    """Run ``ip ARGS``; raise ``error`` with the command and its stderr if it fails."""
    r = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if r.returncode != 0:
        raise error(f"ip {' '.join(args)}: {r.stderr.strip()}")


def link_mac(netns: str, ifname: str, error: type[Exception] = RunError) -> str:
    """The MAC address of ``ifname`` in ``netns``; ``error`` if ``ip`` cannot show the link."""
    r = subprocess.run(["ip", "-n", netns, "-j", "link", "show", ifname], capture_output=True, text=True, check=False)
    if r.returncode != 0:
        raise error(f"ip -n {netns} link show {ifname}: {r.stderr.strip()}")
    return str(json.loads(r.stdout)[0]["address"])


@dataclass(frozen=True)
class VethPair:
    """Two namespaces ``a`` and ``b`` joined by one veth pair ``ct0`` (in a) <-> ``ct1`` (in b)."""

    a: str
    b: str
    a4: str = "198.18.100.1"
    b4: str = "198.18.100.2"
    a6: str = "2001:2:0:100::1"
    b6: str = "2001:2:0:100::2"
    a_if: str = "ct0"
    b_if: str = "ct1"


def _run_in(netns: str, argv: Sequence[str], error: type[Exception], timeout_s: float) -> Finished:
    """:func:`run` in ``netns``; its failure to finish in time is ``error``."""
    try:
        return run(argv, netns=netns, timeout_s=timeout_s)
    except RunError as e:
        raise error(str(e)) from None


class End(NamedTuple):
    """One end of a layer-2 test path: its namespace, interface, static addresses and MAC."""

    netns: str
    ifname: str
    ipv4: str
    ipv6: str
    mac: str


def address_ends(a: End, b: End, error: type[Exception] = RunError) -> None:
    """Set up both ends of one layer-2 path: each interface gets its static addresses (/24, /64
    without DAD, kept across a link down/up: outage tests) and comes up, and each end holds the
    other's addresses as permanent neighbours (no ARP/ND queueing at the start or after a link
    outage).  A failure is ``error``."""
    for ns, ifname, ipv4, ipv6, _ in (a, b):
        f = _run_in(ns, ["sysctl", "-qw", f"net.ipv6.conf.{ifname}.keep_addr_on_down=1"], error, 30)
        if f.returncode != 0:
            raise error(f"{ns}: keep_addr_on_down: {f.stderr.strip()}")
        ip("-n", ns, "addr", "add", f"{ipv4}/24", "dev", ifname, error=error)
        ip("-n", ns, "addr", "add", f"{ipv6}/64", "dev", ifname, "nodad", error=error)
        ip("-n", ns, "link", "set", ifname, "up", error=error)
    for (ns, ifname, *_), peer in ((a, b), (b, a)):
        for addr in (peer.ipv4, peer.ipv6):
            ip("-n", ns, "neigh", "replace", addr, "lladdr", peer.mac, "dev", ifname, "nud", "permanent", error=error)


def wait_reachable(netns: str, dsts: Iterable[str], via: str, error: type[Exception] = RunError) -> None:
    """Ping each of ``dsts`` from ``netns`` until it replies (IPv6 needs the link to come up first),
    or raise ``error`` after NEIGH_TIMEOUT_S (``via``: the path, for its message)."""
    for dst in dsts:
        deadline = time.monotonic() + NEIGH_TIMEOUT_S
        while (f := _run_in(netns, ["ping", "-n", "-c", "1", "-W", "1", dst], error, 10)).returncode != 0:
            if time.monotonic() > deadline:
                raise error(f"{netns} cannot reach {dst} {via}: {f.stdout.strip()}")
            time.sleep(REACH_POLL_S)


@contextlib.contextmanager
def veth_pair(tag: str = "") -> Iterator[VethPair]:
    """Create two fresh ``vrt-ct-*`` namespaces joined by a veth pair; always delete them."""
    base = f"{NS_PREFIX}{tag + '-' if tag else ''}{secrets.token_hex(3)}"
    p = VethPair(a=f"{base}-a", b=f"{base}-b")
    created: list[str] = []
    try:
        for ns in (p.a, p.b):
            ip("netns", "add", ns)
            created.append(ns)
            ip("-n", ns, "link", "set", "lo", "up")
        ip("-n", p.a, "link", "add", p.a_if, "type", "veth", "peer", "name", p.b_if, "netns", p.b)
        address_ends(
            End(p.a, p.a_if, p.a4, p.a6, link_mac(p.a, p.a_if)), End(p.b, p.b_if, p.b4, p.b6, link_mac(p.b, p.b_if))
        )
        wait_reachable(p.a, (p.b4, p.b6), "over the veth pair")
        yield p
    finally:
        for ns in reversed(created):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)


def wait_udp_drained(netns: str | None, port: int, timeout_s: float, poll_s: float = 0.01) -> bool:
    """Block until no UDP socket bound to ``port`` in ``netns`` holds unread data (``ss``'s
    Recv-Q 0 on two polls in a row), so a sink stopped now has read every packet that reached
    it; True when drained, False after ``timeout_s`` (no such socket counts as drained).  A sink
    stopped as soon as the generator exits can miss the last packets still queued for it
    (ITGRecv counted 486 of 488 so, reporting no loss: they never reached its log)."""
    deadline = time.monotonic() + timeout_s
    empty = 0
    while True:
        f = run(["ss", "-lunH", f"sport = :{port}"], netns=netns, timeout_s=10)
        queued = sum(int(line.split()[1]) for line in f.stdout.splitlines() if len(line.split()) > 1)
        empty = empty + 1 if f.returncode == 0 and queued == 0 else 0
        if empty >= 2:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(poll_s)


def wait_tcp_listen(
    netns: str | None, port: int, timeout_s: float, child: Child | None = None, poll_s: float = 0.01
) -> None:
    """Block until a TCP listener on ``port`` exists in ``netns`` (observed with ``ss``); fail early
    if ``child`` (the process expected to listen) exits first."""
    deadline = time.monotonic() + timeout_s
    while True:
        f = run(["ss", "-ltnH", f"sport = :{port}"], netns=netns, timeout_s=10)
        if f.returncode == 0 and f.stdout.strip():
            return
        if child is not None and child.popen.poll() is not None:
            done = child.finish(5)
            raise RunError(f"{' '.join(child.argv)} exited with {done.returncode}: {done.stdout} {done.stderr}")
        if time.monotonic() > deadline:
            raise RunError(f"no TCP listener on port {port} in {netns or 'this namespace'} within {timeout_s} s")
        time.sleep(poll_s)
