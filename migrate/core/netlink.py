"""pyroute2's IPRoute as this suite uses it: requests and their replies, no event stream."""

from __future__ import annotations

from pyroute2 import IPRoute


def iproute(netns: str | None = None) -> IPRoute:
    """An rtnetlink socket (in namespace ``netns``, by name or /proc path) bound to no multicast
    group.  pyroute2 0.9 binds IPRoute to RTMGRP_DEFAULTS unless told otherwise, so every link,
    address and route event of the namespace would queue on a socket that is read only while a
    request runs; the suite sends requests and reads their replies, and wants no events."""
    return IPRoute(netns=netns, groups=0) if netns is not None else IPRoute(groups=0)
