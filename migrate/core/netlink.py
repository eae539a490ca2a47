"""pyroute2's IPRoute as this suite uses it: requests and their replies, no event stream, and
no signal handler running inside pyroute2's event loop."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from pyroute2 import IPRoute

from migrate.core.sighold import held_signals


class Rtnl:
    """An IPRoute whose every call (its creation and closing too) runs with SIGINT/SIGTERM held
    (:func:`migrate.core.sighold.held_signals`); a signal that came during a call reaches the
    caller's handler right after it.

    Why a wrapper: pyroute2 0.9's synchronous API runs an asyncio loop per request, and the
    suite's handlers raise ``Interrupted`` (an ``Exception``) at the next bytecode of the main
    thread.  Raised inside the loop's datagram callback, asyncio logs it as "Exception in
    callback _SelectorDatagramTransport._read_ready()" and drops it, with the reply it had just
    read: the request then waits for ever in ``epoll_wait``.  Seen as ``make lab-up`` hanging
    in ``IPRoute.link('add', kind='veth')`` after a SIGINT (the kernel had made the veth), and
    reproduced by SIGINTs at random times into a loop of requests."""

    def __init__(self, netns: str | None = None) -> None:
        with held_signals():
            # bound to no multicast group: pyroute2 0.9 binds IPRoute to RTMGRP_DEFAULTS unless
            # told otherwise, and the namespace's events would queue on a socket read only
            # while a request runs; the suite wants replies, not events
            self._ipr = IPRoute(netns=netns, groups=0) if netns is not None else IPRoute(groups=0)

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._ipr, name)
        if not callable(attr):
            return attr
        return _held(attr)

    def close(self) -> None:
        with held_signals():
            self._ipr.close()

    def __enter__(self) -> Rtnl:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _held(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def call(*argv: Any, **kwarg: Any) -> Any:
        with held_signals():
            return fn(*argv, **kwarg)

    return call


def iproute(netns: str | None = None) -> Rtnl:
    """An rtnetlink socket in namespace ``netns`` (by name or /proc path; None: this one)."""
    return Rtnl(netns)
