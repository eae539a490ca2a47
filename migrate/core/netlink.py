"""pyroute2's IPRoute as this suite uses it: requests and their replies, no event stream."""

from __future__ import annotations

from pyroute2 import IPRoute


def iproute(netns: str | None = None) -> IPRoute:
    """An rtnetlink socket (in namespace ``netns``, by name or /proc path) bound to no multicast
    group.  pyroute2 0.9 binds IPRoute to RTMGRP_DEFAULTS unless told otherwise, so every link,
    address and route event of the namespace queues on the socket; the socket is read only while
    a request runs, and once the events fill its receive buffer the kernel drops the next
    request's acknowledgement and the request waits for ever (seen here: ``make lab-up`` hung
    in ``IPRoute.link("add")`` while building the lab's bridges, 2 runs in 6)."""
    return IPRoute(netns=netns, groups=0) if netns is not None else IPRoute(groups=0)
