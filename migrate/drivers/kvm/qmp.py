"""QMP connections of the KVM driver, over the QEMU project's own client (``qemu.qmp``).

The protocol (greeting, capabilities negotiation, command IDs, routing of replies and events,
error replies, disconnection) is ``qemu.qmp.QMPClient``'s.  What this module adds is what the
suite needs on top of it:

* every event stamped on arrival on the run's common clock (CLOCK_REALTIME ns,
  ``time.time_ns()``, the clock of every other stream of a run) beside QEMU's own timestamp, as
  one ``qmp_events.jsonl`` record (docs/data-formats.md);
* synchronous commands with a timeout: a command that gets no reply within ``timeout_s`` raises
  :class:`QMPError`, as does QEMU's error reply or a lost connection (``qemu.qmp``'s own errors
  never reach the driver);
* readiness by observation: :meth:`QMPConnection.connect` polls QEMU's socket until it accepts
  (or QEMU exits, or the timeout passes);
* a clean end: :meth:`QMPConnection.close` (or ``with``) disconnects and stops the loop thread.

Why ``QMPClient`` on a private event loop and not the synchronous facade
``qemu.qmp.legacy.QEMUMonitorProtocol``: the facade runs its event loop only inside its own calls
(``cmd``, ``pull_event``), so an event that arrives while no call is running stays unread in the
socket until the next call, and its arrival stamp would be that call's time (up to a poll
interval late during a migration, a whole boot late before one); it also runs the loop of the
calling thread, so a second connection in the same thread only progresses when the first one's
calls run.  Here each connection owns an event loop in its own thread: ``QMPClient``'s reader task
reads every message as it arrives, :class:`_Client` stamps it with the time its bytes reached the
loop (the transport's read callback) or, when it saw them first, the time a thread waiting on the
socket beside the loop saw them queued (:class:`_ArrivalWatch`), and :class:`_ArrivalStamp` records each event with that
stamp as it is dispatched; commands are submitted to that loop from the caller's thread and
bounded with ``asyncio.wait_for``.  The source (R1) and destination (R2)
connections of a run are two such objects, each with its own loop, so a command in flight on one
side never delays the other side's events, and events on a side keep being read and stamped
while a command on that side waits for its reply.
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import os
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Coroutine
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import qemu.qmp as qmp

from migrate.core.errors import DependencyError, VrmigError

log = logging.getLogger(__name__)
# qemu.qmp logs the end-of-file of every connection whose QEMU quits at INFO; its warnings and
# errors (a late reply dropped, a connection reset by a killed QEMU, a malformed message) still show.
logging.getLogger("qemu.qmp").setLevel(logging.WARNING)

CONNECT_POLL_S = 0.02  # how often to retry QEMU's QMP socket until it accepts
CLOSE_TIMEOUT_S = 5.0  # disconnect and loop-thread shutdown
LOOP_GRACE_S = 1.0  # beyond a command's own timeout, for the loop thread to hand back the result

T = TypeVar("T")
EventSink = Callable[[dict[str, Any]], None]


class QMPError(VrmigError):
    """QEMU answered a command with an error, did not answer in time, or the QMP connection failed."""


def event_record(side: str, event: Any, t_ns: int) -> dict[str, Any]:
    """The ``qmp_events.jsonl`` record of one QMP event that arrived at ``t_ns`` (CLOCK_REALTIME
    ns): ``qemu_t_ns`` is QEMU's own timestamp (its ``seconds`` + ``microseconds``, CLOCK_REALTIME
    in QEMU) in ns."""
    ts = event.get("timestamp", {})
    return {
        "t_ns": t_ns,
        "side": side,
        "event": event["event"],
        "data": event.get("data", {}),
        "qemu_t_ns": ts.get("seconds", 0) * 10**9 + ts.get("microseconds", 0) * 1000,
    }


WATCH_LIB = Path(__file__).resolve().parents[3] / "probes" / "bin" / "libvrqmpwatch.so"
WATCH_RT_PRIORITY = 1  # SCHED_FIFO priority of the watch's thread (probes/qmpwatch.c)
_watch_lib: ctypes.PyDLL | None = None


def _load_watch() -> ctypes.PyDLL:
    """probes/bin/libvrqmpwatch.so (``make helpers``), loaded once."""
    global _watch_lib
    if _watch_lib is None:
        try:
            # PyDLL: its calls keep the GIL (each is a few loads and stores; none waits for the thread)
            lib = ctypes.PyDLL(str(WATCH_LIB), use_errno=True)
        except OSError as err:
            raise DependencyError(
                f"the QMP arrival watch {WATCH_LIB} is not built ({err}): run `make helpers`"
            ) from None
        lib.vrw_start.argtypes, lib.vrw_start.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_void_p
        lib.vrw_set_fed.argtypes, lib.vrw_set_fed.restype = [ctypes.c_void_p, ctypes.c_int64], None
        lib.vrw_stamp.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64]
        lib.vrw_stamp.restype = ctypes.c_int64
        lib.vrw_stop.argtypes, lib.vrw_stop.restype = [ctypes.c_void_p], None
        _watch_lib = lib
    return _watch_lib


class _ArrivalWatch:
    """When bytes were first seen queued on a QMP socket (probes/qmpwatch.c): a thread in C,
    blocked in its own edge-triggered epoll on the socket, wakes with every arrival and reads how
    many bytes wait unread (``FIONREAD``), then the clock, without the interpreter's lock.

    Why a second waiter beside the event loop: the loop sees an arrival only after asyncio's
    read path in Python (the selector's return, the loop's bookkeeping, the transport's read
    callback; docs/measurements/2026-11-25-qmp-client.md).  Why in C: a Python thread woken with
    the loop races it for the GIL and, measured, stamps later than the loop alone
    (docs/measurements/2026-11-25-qmp-arrival-watch.md).  It reads no data: the loop consumes every
    byte, so ``qemu.qmp`` sees the stream unchanged.  :meth:`stamp` never gives a time before the
    bytes arrived, and never a time later than the loop's own."""

    def __init__(self, sock: socket.socket) -> None:
        self._lib = _load_watch()
        handle = self._lib.vrw_start(sock.fileno(), WATCH_RT_PRIORITY)
        if not handle:
            err = ctypes.get_errno()
            raise OSError(err, f"QMP arrival watch: {os.strerror(err)}")
        self._h: int | None = handle

    def set_fed(self, fed: int) -> None:
        """The loop has handed the stream's first ``fed`` bytes to the reader."""
        if self._h is not None:
            self._lib.vrw_set_fed(self._h, fed)

    def stamp(self, end: int, now_ns: int) -> int:
        """The earliest time at which the stream's first ``end`` bytes were known to have
        arrived, or ``now_ns`` (the loop's time) if the watch saw them no earlier."""
        if self._h is None:
            return now_ns
        return int(self._lib.vrw_stamp(self._h, end, now_ns))

    def close(self) -> None:
        """Stop the thread and release its descriptors (not the socket); idempotent."""
        h, self._h = self._h, None
        if h is not None:
            self._lib.vrw_stop(h)


class _Client(qmp.QMPClient):
    """``QMPClient`` that stamps each message with the time its last byte reached the event loop,
    or the earlier time the arrival watch (``watch``) saw it queued on the socket.

    The stamp is taken where asyncio hands received bytes to the connection's ``StreamReader``
    (``feed_data``, called by the transport's read callback as soon as the selector reports the
    socket readable), not after the reader task has woken, found a whole line and parsed it: that
    later point costs two loop iterations and the JSON parse (0.04 ms at the median, measured in
    docs/measurements/2026-11-24-qmp-client.md).  Each feed is kept as (bytes fed so far, time);
    when ``_readline`` returns a line, the line's stamp is the time of the first feed that
    reaches its last byte, so messages that arrived in one read share its time and a message split
    over two reads gets the second.  ``qemu.qmp`` offers no hook at the transport, hence the
    wrapped ``feed_data``; the line accounting relies only on ``StreamReader.readline`` returning
    the bytes it consumed.

    Both message hooks (``_cb_inbound``/``_cb_outbound``, which the library provides for
    subclasses) format a message for the library's debug log only when that log is on (the
    library pretty-prints every message, each 20 ms query-migrate reply included, whether or not
    anything logs it)."""

    arrival_ns = 0  # CLOCK_REALTIME ns at which the message being routed was received

    def __init__(self, name: str, watch: _ArrivalWatch | None = None) -> None:
        super().__init__(name)
        self._watch = watch
        self._feeds: deque[tuple[int, int]] = deque()  # (bytes fed so far, time.time_ns())
        self._fed = 0
        self._consumed = 0

    async def _do_connect(self, address: Any, ssl: Any = None) -> None:
        await super()._do_connect(address, ssl)
        reader = self._reader
        assert reader is not None
        # bytes the transport fed before this point (none in practice) count as fed now
        self._fed = len(getattr(reader, "_buffer", b""))
        if self._fed:
            self._feeds.append((self._fed, time.time_ns()))
        if self._watch is not None:
            self._watch.set_fed(self._fed)
        feed = reader.feed_data

        watch = self._watch

        def stamped_feed(data: bytes) -> None:
            self._fed += len(data)
            now = time.time_ns()
            if watch is not None:
                watch.set_fed(self._fed)
                now = watch.stamp(self._fed, now)
            self._feeds.append((self._fed, now))
            feed(data)

        reader.feed_data = stamped_feed  # type: ignore[method-assign]

    async def _readline(self) -> bytes:
        line = await super()._readline()
        self._consumed += len(line)
        while self._feeds and self._feeds[0][0] < self._consumed:
            self._feeds.popleft()
        self.arrival_ns = self._feeds[0][1] if self._feeds else time.time_ns()
        return line

    def _cb_inbound(self, msg: qmp.Message) -> qmp.Message:
        return super()._cb_inbound(msg) if self.logger.isEnabledFor(logging.DEBUG) else msg

    def _cb_outbound(self, msg: qmp.Message) -> qmp.Message:
        return super()._cb_outbound(msg) if self.logger.isEnabledFor(logging.DEBUG) else msg


class _ArrivalStamp(qmp.EventListener):
    """An event listener that hands each event, with the arrival stamp its client took when it
    read it, to ``on_event``, as the client dispatches it (``put`` is the client's hook into its
    listeners); nothing is queued.  A failing ``on_event`` is kept in ``failure`` (the connection
    stays up: the next command reports it)."""

    def __init__(self, side: str, on_event: EventSink | None) -> None:
        super().__init__()
        self.side = side
        self.on_event = on_event
        self.client: _Client | None = None
        self.failure: str | None = None

    async def put(self, event: qmp.Message) -> None:
        """Record ``event`` with its arrival stamp."""
        assert self.client is not None
        t_ns = self.client.arrival_ns
        if self.on_event is None:
            return
        try:
            self.on_event(event_record(self.side, event, t_ns))
        except Exception as err:  # the reader task must go on routing replies
            if self.failure is None:
                self.failure = f"event {event.get('event')!r} not recorded: {type(err).__name__}: {err}"
                log.error("QMP %s: %s", self.side, self.failure)


def _wait_for_listener(path: Path, side: str, timeout_s: float, alive: Callable[[], bool]) -> socket.socket:
    """A socket connected to QEMU's QMP socket, retried until QEMU listens on it."""
    deadline = time.monotonic() + timeout_s
    while True:
        if not alive():
            raise QMPError(f"QEMU ({side}) exited before its QMP socket appeared")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(str(path))
            return sock
        except (FileNotFoundError, ConnectionRefusedError):
            sock.close()
            if time.monotonic() > deadline:
                raise QMPError(f"QMP socket {path} did not appear within {timeout_s:.0f} s") from None
            time.sleep(CONNECT_POLL_S)


class QMPConnection:
    """One QMP connection to one QEMU; ``side`` ('src'/'dst') labels its events.

    ``on_event`` is called with each event's record from the connection's loop thread.
    ``arrival_watch=False`` stamps with the loop's time alone (``make bench-qmp-client`` compares
    both)."""

    def __init__(self, path: Path, side: str, on_event: EventSink | None = None, *, arrival_watch: bool = True) -> None:
        self.path = path
        self.arrival_watch = arrival_watch
        self.side = side
        self.version: dict[str, Any] = {}
        self._stamp = _ArrivalStamp(side, on_event)
        self._client: _Client | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._watch: _ArrivalWatch | None = None

    def __enter__(self) -> QMPConnection:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def connect(self, timeout_s: float, alive: Callable[[], bool]) -> None:
        """Connect once QEMU listens (``alive``: QEMU still running), read the greeting and
        negotiate capabilities; on failure nothing is left running."""
        t_end = time.monotonic() + timeout_s
        sock = _wait_for_listener(self.path, self.side, timeout_s, alive)
        if self.arrival_watch:
            try:
                self._watch = _ArrivalWatch(sock)
            except OSError:
                sock.close()
                raise
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=f"qmp-{self.side}", daemon=True)
        self._thread.start()
        try:
            self._client = self._submit(self._open(sock), max(t_end - time.monotonic(), 1.0), "the greeting")
        except BaseException:
            sock.close()
            self.close()
            raise
        assert self._client.greeting is not None
        self.version = dict(self._client.greeting.QMP.version)

    async def _open(self, sock: socket.socket) -> _Client:
        client = _Client(f"vrmig-{self.side}", self._watch)
        self._stamp.client = client
        client.register_listener(self._stamp)
        await client.connect(sock)
        return client

    def _submit(self, coro: Coroutine[Any, Any, T], timeout_s: float, what: str) -> T:
        """Run ``coro`` on the loop thread, waiting at most ``timeout_s``; every failure is a QMPError."""
        if self._loop is None:
            coro.close()
            raise QMPError(f"QMP ({self.side}) not connected")
        fut = asyncio.run_coroutine_threadsafe(asyncio.wait_for(coro, timeout_s), self._loop)
        try:
            return fut.result(timeout_s + LOOP_GRACE_S)
        except TimeoutError:
            fut.cancel()
            raise QMPError(f"QEMU ({self.side}) did not answer {what} within {timeout_s:g} s") from None
        except qmp.ExecuteError as err:
            raise QMPError(f"QEMU ({self.side}) {what}: {err}") from err
        except qmp.StateError as err:  # the reader had already seen the connection end
            raise QMPError(f"QEMU ({self.side}) connection lost before {what}") from err
        except qmp.ExecInterruptedError as err:
            raise QMPError(f"QEMU ({self.side}) connection lost while waiting for {what}") from err
        except (qmp.QMPError, OSError, EOFError) as err:
            raise QMPError(f"QEMU ({self.side}) connection lost during {what}: {type(err).__name__}: {err}") from err

    def cmd(self, name: str, timeout_s: float = 30.0, **args: Any) -> Any:
        """Execute a command and return its ``return`` value; raise QMPError on an error reply,
        no reply within ``timeout_s``, a lost connection or an event that could not be recorded."""
        if self._stamp.failure is not None:
            raise QMPError(f"QMP ({self.side}): {self._stamp.failure}")
        if self._client is None:
            raise QMPError(f"QMP ({self.side}) not connected")
        return self._submit(self._client.execute(name, args or None), timeout_s, repr(name))

    def close(self) -> None:
        """Disconnect (QEMU keeps running) and stop the loop thread; idempotent."""
        loop, thread, client, watch = self._loop, self._thread, self._client, self._watch
        self._loop, self._thread, self._client, self._watch = None, None, None, None
        try:
            if loop is None:
                return
            if client is not None:
                fut = asyncio.run_coroutine_threadsafe(client.disconnect(), loop)
                try:
                    fut.result(CLOSE_TIMEOUT_S)
                except (qmp.QMPError, OSError, EOFError, TimeoutError) as err:
                    # disconnect() re-raises what ended the reader: EOF once QEMU has quit
                    log.debug("QMP %s disconnect: %s: %s", self.side, type(err).__name__, err)
            loop.call_soon_threadsafe(loop.stop)
            if thread is not None:
                thread.join(CLOSE_TIMEOUT_S)
                if thread.is_alive():
                    log.warning("QMP %s: event loop thread did not stop within %.0f s", self.side, CLOSE_TIMEOUT_S)
                    watch = None  # the loop may still stamp with it: left to the process's end
                    return
            loop.close()
        finally:
            # only once the loop thread, which stamps through the watch, has stopped
            if watch is not None:
                watch.close()
