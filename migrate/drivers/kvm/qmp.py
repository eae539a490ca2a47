"""A small QMP client: synchronous commands plus a reader thread that timestamps every event
on arrival (CLOCK_REALTIME ns), keeping QEMU's own event timestamp beside it."""

from __future__ import annotations

import json
import logging
import queue
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from migrate.core.errors import VrmigError

log = logging.getLogger(__name__)

CONNECT_POLL_S = 0.02


class QMPError(VrmigError):
    """QEMU answered a command with an error, or the QMP connection failed."""


class QMPClient:
    """One QMP connection to one QEMU; ``side`` ('src'/'dst') labels its events."""

    def __init__(
        self,
        path: Path,
        side: str,
        on_event: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self.path = path
        self.side = side
        self.on_event = on_event
        self._sock: socket.socket | None = None
        self._replies: queue.Queue[dict[str, Any]] = queue.Queue()
        self._reader: threading.Thread | None = None
        self._lock = threading.Lock()
        self._next_id = 0
        self.closed = threading.Event()

    def connect(self, timeout_s: float, alive: Callable[[], bool]) -> None:
        """Connect once the socket exists (polling), negotiate capabilities."""
        deadline = time.monotonic() + timeout_s
        while True:
            if not alive():
                raise QMPError(f"QEMU ({self.side}) exited before its QMP socket appeared")
            try:
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                sock.connect(str(self.path))
                break
            except (FileNotFoundError, ConnectionRefusedError):
                sock.close()
                if time.monotonic() > deadline:
                    raise QMPError(f"QMP socket {self.path} did not appear within {timeout_s:.0f} s") from None
                time.sleep(CONNECT_POLL_S)
        self._sock = sock
        self._file = sock.makefile("rb")
        greeting = json.loads(self._file.readline())
        if "QMP" not in greeting:
            raise QMPError(f"unexpected QMP greeting: {greeting}")
        self.version = greeting["QMP"]["version"]
        self._reader = threading.Thread(target=self._read_loop, name=f"qmp-{self.side}", daemon=True)
        self._reader.start()
        self.cmd("qmp_capabilities")

    def _read_loop(self) -> None:
        try:
            for line in self._file:
                t_ns = time.time_ns()
                msg = json.loads(line)
                if "event" in msg:
                    ts = msg.get("timestamp", {})
                    ev = {
                        "t_ns": t_ns,
                        "side": self.side,
                        "event": msg["event"],
                        "data": msg.get("data", {}),
                        "qemu_t_ns": ts.get("seconds", 0) * 10**9 + ts.get("microseconds", 0) * 1000,
                    }
                    if self.on_event:
                        self.on_event(ev)
                else:
                    self._replies.put(msg)
        except (OSError, ValueError) as err:
            log.debug("QMP %s reader stopped: %s", self.side, err)
        finally:
            self.closed.set()

    def cmd(self, name: str, timeout_s: float = 30.0, **args: Any) -> Any:
        """Execute a command and return its ``return`` value; raise QMPError on error."""
        if self._sock is None:
            raise QMPError(f"QMP ({self.side}) not connected")
        with self._lock:
            self._next_id += 1
            msg: dict[str, Any] = {"execute": name, "id": self._next_id}
            if args:
                msg["arguments"] = args
            try:
                self._sock.sendall(json.dumps(msg).encode() + b"\n")
            except OSError as err:
                raise QMPError(f"QEMU ({self.side}) connection lost while sending {name!r}: {err}") from err
            deadline = time.monotonic() + timeout_s
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or (self.closed.is_set() and self._replies.empty()):
                    raise QMPError(f"QEMU ({self.side}) did not answer {name!r}")
                try:
                    reply = self._replies.get(timeout=min(remaining, 0.1))
                except queue.Empty:
                    continue
                if reply.get("id") != self._next_id:
                    continue
                if "error" in reply:
                    err = reply["error"]
                    raise QMPError(f"QEMU ({self.side}) {name}: {err.get('desc', err)}")
                return reply.get("return")

    def close(self) -> None:
        """Close the connection (QEMU keeps running)."""
        if self._sock is not None:
            try:
                self._sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self._sock.close()
            self._sock = None
