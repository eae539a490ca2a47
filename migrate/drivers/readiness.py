"""Readiness by forwarding: a router is ready when the suite's probe packets cross it between
both segments, observed, not announced.

A router image the suite did not build prints no READY marker of the suite's own (an optional
marker of the profile may add to, never replace, this observation).  The probe is one ICMP echo
request at a time from C (left segment) to D (right segment), over the family of IP=: a reply
back at C has crossed the router both ways.  Between attempts nothing sleeps longer than
``PROBE_INTERVAL_S``; the wait ends at the first reply, when the router's hypervisor process
exits, on abort, or after the boot timeout, and then the error names what was seen: the echo
requests sent, the packets D's and C's interfaces received meanwhile (the router forwarded to
the right segment, or back to the left) and the tail of the router's serial console."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from migrate.core.errors import GuestError
from migrate.testbed import topology as topo

PROBE_INTERVAL_S = 0.25  # between two echo requests that found no reply
PROBE_WAIT_S = 1  # ping -W: how long one echo request waits for its reply
CONSOLE_TAIL_CHARS = 400
#: a guest's terminal queries and colours (ESC [ ... letter, ESC ] ... BEL) and other control characters
TERMINAL_CONTROL = re.compile(r"\x1b\[[0-9;?!]*[A-Za-z]|\x1b\][^\x07]*\x07|\x1b.|[\x00-\x08\x0b-\x1f\x7f]")


class ProbeBed(Protocol):
    """What the wait needs of a testbed (migrate.testbed.builder.Testbed and LabBed have it)."""

    def run(self, role: str, argv: list[str], timeout_s: float = ...) -> object: ...
    def rx_packets(self, role: str, ifname: str) -> int: ...
    def host_if(self, role: str) -> str: ...


@dataclass(frozen=True)
class Forwarding:
    """The first echo reply through the router: when it came (CLOCK_REALTIME s), how long the
    wait took, and how many echo requests it took."""

    at_s: float
    waited_s: float
    requests: int

    def to_dict(self) -> dict[str, float | int]:
        """For the recorder's ``router-forwarding`` action and meta.json."""
        return {"waited_s": round(self.waited_s, 3), "requests": self.requests}


def target(ip: int) -> str:
    """D's address of family ``ip`` (4 or 6), the echo requests' destination."""
    d = topo.host("D")
    return topo.addr(d.ipv4 if ip == 4 else d.ipv6)


def ping_argv(ip: int) -> list[str]:
    """One echo request to D with a reply deadline (argv, never a shell string)."""
    return ["ping", f"-{ip}", "-n", "-q", "-c", "1", "-W", str(PROBE_WAIT_S), target(ip)]


def console_tail(path: Path | None, chars: int = CONSOLE_TAIL_CHARS) -> str:
    """The last ``chars`` characters of the serial console log, on one line ('' if none)."""
    if path is None:
        return ""
    try:
        data = path.read_bytes()[-16 * chars :]  # cleaned before it is cut: no half escape sequence
    except OSError:
        return ""
    text = TERMINAL_CONTROL.sub("", data.decode("utf-8", "replace"))
    return " | ".join(ln.strip() for ln in text[-chars:].splitlines() if ln.strip())


def wait_forwarding(
    tb: ProbeBed,
    ip: int,
    timeout_s: float,
    alive: Callable[[], bool],
    abort: Callable[[], bool],
    console: Path | None = None,
) -> Forwarding:
    """Wait until an echo request from C to D is answered through the router; raise
    :class:`GuestError` (a ``setup`` failure) naming what was seen otherwise."""
    start = time.monotonic()
    c_if, d_if = tb.host_if("C"), tb.host_if("D")
    c0, d0 = tb.rx_packets("C", c_if), tb.rx_packets("D", d_if)
    requests = 0
    argv = ping_argv(ip)
    deadline = start + timeout_s
    while True:
        requests += 1
        done = tb.run("C", argv, timeout_s=PROBE_WAIT_S + 5.0)
        if getattr(done, "returncode", 1) == 0:
            return Forwarding(at_s=time.time(), waited_s=time.monotonic() - start, requests=requests)
        why = None
        if not alive():
            why = "the router's hypervisor process exited"
        elif abort():
            why = "aborted"
        elif time.monotonic() > deadline:
            why = f"no echo reply within {timeout_s:.0f} s"
        if why is not None:
            d_seen = tb.rx_packets("D", d_if) - d0
            c_seen = tb.rx_packets("C", c_if) - c0
            tail = console_tail(console)
            raise GuestError(
                f"router not forwarding: {why}: {requests} echo request(s) from C to {target(ip)}; "
                f"D received {d_seen} packet(s) on the right segment, C {c_seen} on the left; "
                f"console: {tail or '(empty)'}"
            )
        time.sleep(PROBE_INTERVAL_S)
