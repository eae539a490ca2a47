"""The KVM driver's QMP connection against a FAKE QMP server (a thread on a UNIX socket speaking
the wire format, not QEMU): only the logic the suite adds on top of qemu.qmp — arrival stamps
and their record format, the order of events around a command's reply, events while a command
is in flight on both sides at once, command timeouts, error replies, a lost connection, waiting
for the socket, and a clean close.  Against a real QEMU the connection is exercised by
tests/integration/test_migrate_kvm.py."""

from __future__ import annotations

import itertools
import json
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from migrate.drivers.kvm.qmp import QMPConnection, QMPError

VERSION = {"qemu": {"major": 7, "minor": 2, "micro": 22}, "package": "fake"}
Handler = Callable[["FakeQMP", dict[str, Any]], None]


class FakeQMP:
    """A fake QMP server on ``path``: greeting, capabilities negotiation, then every command is
    passed to ``handler(server, msg)``, which answers with :meth:`reply` / :meth:`event` (or not)."""

    def __init__(self, path: Path, handler: Handler, listen_after_s: float = 0.0) -> None:
        self.path = path
        self.handler = handler
        self.listen_after_s = listen_after_s
        self.conn: socket.socket | None = None
        self.commands: list[str] = []
        self._send_lock = threading.Lock()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._stop = threading.Event()

    def __enter__(self) -> FakeQMP:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self.conn is not None:
            try:
                self.conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._thread.join(5)

    def send(self, obj: dict[str, Any]) -> None:
        """Write one message (QEMU ends each with CRLF)."""
        assert self.conn is not None
        with self._send_lock:
            self.conn.sendall(json.dumps(obj).encode() + b"\r\n")

    def reply(self, msg: dict[str, Any], ret: Any = None) -> None:
        """Answer ``msg`` with ``ret`` (default ``{}``)."""
        out: dict[str, Any] = {"return": {} if ret is None else ret}
        if "id" in msg:  # qemu.qmp negotiates without an id
            out["id"] = msg["id"]
        self.send(out)

    def event(self, name: str, t_s: float | None = None, **data: Any) -> float:
        """Emit an event stamped ``t_s`` (now by default) the way QEMU stamps it; returns ``t_s``."""
        t = time.time() if t_s is None else t_s
        sec = int(t)
        ev = {"event": name, "timestamp": {"seconds": sec, "microseconds": round((t - sec) * 1e6)}}
        if data:
            ev["data"] = data
        self.send(ev)
        return t

    def hang_up(self) -> None:
        """Close the connection as a dying QEMU would."""
        assert self.conn is not None
        self.conn.shutdown(socket.SHUT_RDWR)

    def _serve(self) -> None:
        if self.listen_after_s:
            time.sleep(self.listen_after_s)  # the fake QEMU is slow to create its socket
        srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        srv.bind(str(self.path))
        srv.listen(1)
        srv.settimeout(5)
        try:
            self.conn, _ = srv.accept()
        finally:
            srv.close()
        self.send({"QMP": {"version": VERSION, "capabilities": ["oob"]}})
        dec, buf = json.JSONDecoder(), ""
        while not self._stop.is_set():
            try:
                chunk = self.conn.recv(65536)
            except OSError:
                break
            if not chunk:
                break
            buf += chunk.decode()
            while buf.strip():
                try:
                    msg, end = dec.raw_decode(buf.lstrip())
                except json.JSONDecodeError:
                    break  # partial message
                buf = buf.lstrip()[end:]
                self.commands.append(msg["execute"])
                if msg["execute"] == "qmp_capabilities":
                    self.reply(msg)
                else:
                    self.handler(self, msg)
        self.conn.close()


def _alive() -> bool:
    return True


def _connect(tmp_path: Path, handler: Handler, side: str = "src", **kw: Any) -> tuple[FakeQMP, QMPConnection, list]:
    events: list[dict[str, Any]] = []
    server = FakeQMP(tmp_path / f"qmp-{side}.sock", handler, **kw)
    server.__enter__()
    conn = QMPConnection(server.path, side, on_event=events.append)
    conn.connect(5.0, _alive)
    return server, conn, events


def _bounded(fn: Callable[[], Any], within_s: float) -> BaseException | None:
    """Call ``fn`` in a thread; fail the test if it has not returned within ``within_s`` (a hang
    is the failure these tests look for), else return what it raised."""
    out: dict[str, BaseException] = {}

    def call() -> None:
        try:
            fn()
        except BaseException as err:  # handed to the test
            out["err"] = err

    t = threading.Thread(target=call, daemon=True)
    t.start()
    t.join(within_s)
    assert not t.is_alive(), f"call still blocked after {within_s} s"
    return out.get("err")


def _loop_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("qmp-")]


def test_fake_server_events_before_a_reply_are_recorded_in_order_with_both_stamps(tmp_path):
    sent: list[float] = []

    def handler(srv: FakeQMP, msg: dict[str, Any]) -> None:
        sent.append(srv.event("MIGRATION", status="setup"))
        sent.append(srv.event("MIGRATION_PASS", **{"pass": 1}))
        time.sleep(0.05)
        sent.append(srv.event("MIGRATION", t_s=1_700_000_000.123456, status="active"))
        srv.reply(msg, {"status": "active"})

    server, conn, events = _connect(tmp_path, handler)
    try:
        assert conn.version == VERSION
        before = time.time_ns()
        assert conn.cmd("query-migrate") == {"status": "active"}
        after = time.time_ns()
        # every event sent before the reply is recorded by the time the command returns, in order
        assert [(e["event"], e["data"]) for e in events] == [
            ("MIGRATION", {"status": "setup"}),
            ("MIGRATION_PASS", {"pass": 1}),
            ("MIGRATION", {"status": "active"}),
        ]
        assert all(list(e) == ["t_ns", "side", "event", "data", "qemu_t_ns"] for e in events)
        assert all(e["side"] == "src" for e in events)
        assert all(before <= e["t_ns"] <= after for e in events)
        assert events[0]["t_ns"] <= events[1]["t_ns"] < events[2]["t_ns"]
        assert events[2]["t_ns"] - events[1]["t_ns"] >= 40_000_000  # stamped on arrival, not at the reply
        assert events[2]["qemu_t_ns"] == 1_700_000_000_123_456_000
        assert abs(events[0]["qemu_t_ns"] - sent[0] * 1e9) < 2_000  # microseconds, as QEMU sends them
    finally:
        conn.close()
        server.__exit__()


def test_fake_server_events_between_commands_are_stamped_when_they_arrive(tmp_path):
    """No command runs while these arrive: the reader must still read and stamp them at once."""
    got = threading.Event()

    def handler(srv: FakeQMP, msg: dict[str, Any]) -> None:
        srv.reply(msg)

    server, conn, events = _connect(tmp_path, handler)
    conn._stamp.on_event = lambda rec: (events.append(rec), got.set())
    try:
        t_sent = server.event("STOP")
        assert got.wait(2.0)
        assert events[0]["event"] == "STOP" and events[0]["data"] == {}
        assert 0 <= events[0]["t_ns"] - t_sent * 1e9 < 0.5e9
    finally:
        conn.close()
        server.__exit__()


def test_fake_server_both_sides_lose_no_event_while_commands_are_in_flight(tmp_path):
    n = 300

    def handler(srv: FakeQMP, msg: dict[str, Any]) -> None:
        for i in range(n):
            srv.event("MIGRATION_PASS", **{"pass": i})
        srv.reply(msg, {"status": "active"})

    src, qsrc, ev_src = _connect(tmp_path, handler, "src")
    dst, qdst, ev_dst = _connect(tmp_path, handler, "dst")
    try:
        results: dict[str, Any] = {}
        threads = [
            threading.Thread(target=lambda: results.__setitem__("src", qsrc.cmd("query-migrate"))),
            threading.Thread(target=lambda: results.__setitem__("dst", qdst.cmd("query-migrate"))),
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
        assert results == {"src": {"status": "active"}, "dst": {"status": "active"}}
        for side, evs in (("src", ev_src), ("dst", ev_dst)):
            assert [e["data"]["pass"] for e in evs] == list(range(n))
            assert {e["side"] for e in evs} == {side}
            assert all(a["t_ns"] <= b["t_ns"] for a, b in itertools.pairwise(evs))
    finally:
        qsrc.close()
        qdst.close()
        src.__exit__()
        dst.__exit__()


def test_fake_server_command_without_reply_times_out_and_events_keep_coming(tmp_path):
    pending: list[dict[str, Any]] = []

    def handler(srv: FakeQMP, msg: dict[str, Any]) -> None:
        if msg["execute"] == "stop":
            pending.append(msg)  # never answered in time
            srv.event("STOP")
        else:
            srv.reply(msg, {"status": "paused"})

    server, conn, events = _connect(tmp_path, handler)
    try:
        t0 = time.monotonic()
        err = _bounded(lambda: conn.cmd("stop", timeout_s=0.3), 3.0)
        assert isinstance(err, QMPError), err
        assert "QEMU (src) did not answer 'stop' within 0.3 s" in str(err)
        assert 0.3 <= time.monotonic() - t0 < 1.3
        server.reply(pending[0])  # the late reply is dropped, the connection goes on
        assert conn.cmd("query-status", timeout_s=2.0) == {"status": "paused"}
        assert [e["event"] for e in events] == ["STOP"]
    finally:
        conn.close()
        server.__exit__()


def test_fake_server_error_reply_is_a_qmp_error(tmp_path):
    def handler(srv: FakeQMP, msg: dict[str, Any]) -> None:
        srv.send(
            {"error": {"class": "GenericError", "desc": "There's a migration process in progress"}, "id": msg["id"]}
        )

    server, conn, _ = _connect(tmp_path, handler)
    try:
        with pytest.raises(QMPError, match=r"QEMU \(src\) 'migrate': There's a migration process in progress"):
            conn.cmd("migrate", uri="tcp:198.18.0.1:4444")
    finally:
        conn.close()
        server.__exit__()


def test_fake_server_hang_up_mid_command_fails_at_once_not_at_the_timeout(tmp_path):
    def handler(srv: FakeQMP, msg: dict[str, Any]) -> None:
        srv.hang_up()

    server, conn, _ = _connect(tmp_path, handler)
    try:
        err = _bounded(lambda: conn.cmd("query-migrate", timeout_s=20.0), 5.0)
        assert isinstance(err, QMPError) and "connection lost while waiting for 'query-migrate'" in str(err), err
        with pytest.raises(QMPError, match=r"QEMU \(src\) connection lost before 'query-status'$"):
            conn.cmd("query-status", timeout_s=20.0)
    finally:
        conn.close()
        server.__exit__()


def test_fake_server_connect_waits_for_the_socket(tmp_path):
    server, conn, _ = _connect(tmp_path, lambda srv, msg: srv.reply(msg), listen_after_s=0.3)
    try:
        assert server.commands == ["qmp_capabilities"]
    finally:
        conn.close()
        server.__exit__()


def test_connect_gives_up_when_qemu_exits_or_the_socket_never_appears(tmp_path):
    conn = QMPConnection(tmp_path / "none.sock", "dst")
    with pytest.raises(QMPError, match=r"QEMU \(dst\) exited before its QMP socket appeared"):
        conn.connect(5.0, lambda: False)
    t0 = time.monotonic()
    with pytest.raises(QMPError, match="did not appear within"):
        conn.connect(0.2, _alive)
    assert time.monotonic() - t0 < 2.0
    assert _loop_threads() == []


def test_fake_server_close_stops_the_loop_thread_and_is_idempotent(tmp_path):
    with FakeQMP(tmp_path / "q.sock", lambda srv, msg: srv.reply(msg)) as server:
        with QMPConnection(server.path, "src") as conn:
            conn.connect(5.0, _alive)
            assert conn.cmd("cont") == {}
            assert "qmp-src" in _loop_threads()
        assert _loop_threads() == []
        conn.close()
        with pytest.raises(QMPError, match="not connected"):
            conn.cmd("cont")


def test_fake_server_an_event_that_cannot_be_recorded_fails_the_next_command(tmp_path):
    def handler(srv: FakeQMP, msg: dict[str, Any]) -> None:
        srv.event("RESUME")
        srv.reply(msg)

    def broken(rec: dict[str, Any]) -> None:
        raise ValueError("I/O operation on closed file.")

    server, conn, _ = _connect(tmp_path, handler)
    conn._stamp.on_event = broken
    try:
        assert conn.cmd("cont") == {}  # the reply still arrives
        with pytest.raises(QMPError, match="event 'RESUME' not recorded: ValueError"):
            conn.cmd("query-status")
    finally:
        conn.close()
        server.__exit__()


def test_fake_server_a_message_is_stamped_when_its_last_byte_arrives(tmp_path):
    """Two events in one write share the write's time; an event split over two writes 50 ms
    apart carries the second write's time (not the first's, not the reader's later wake-up)."""
    got = threading.Event()

    def handler(srv: FakeQMP, msg: dict[str, Any]) -> None:
        srv.reply(msg)

    server, conn, events = _connect(tmp_path, handler)
    conn._stamp.on_event = lambda rec: (events.append(rec), len(events) == 3 and got.set())
    try:
        assert server.conn is not None
        line = json.dumps({"event": "STOP", "timestamp": {"seconds": 1, "microseconds": 0}}).encode() + b"\r\n"
        t0 = time.time_ns()
        server.conn.sendall(line + line + line[:10])
        time.sleep(0.05)
        t1 = time.time_ns()
        server.conn.sendall(line[10:])
        assert got.wait(2.0)
        stamps = [e["t_ns"] for e in events]
        assert stamps[0] == stamps[1] and t0 <= stamps[0] < t1
        assert t1 <= stamps[2] < t1 + 0.04e9
    finally:
        conn.close()
        server.__exit__()


@pytest.mark.parametrize("watch", [True, False])
def test_fake_server_an_event_is_stamped_when_it_arrives_even_while_the_loop_is_busy(tmp_path, watch):
    """The arrival watch stamps an event when its bytes reach the socket, not when the event loop
    gets round to reading them: with the loop thread held for 150 ms, an event written at its
    start carries the write's time (within 20 ms); without the watch, the loop's later one."""
    got = threading.Event()

    def handler(srv: FakeQMP, msg: dict[str, Any]) -> None:
        srv.reply(msg)

    events: list[dict[str, Any]] = []
    server = FakeQMP(tmp_path / "qmp-src.sock", handler)
    server.__enter__()
    conn = QMPConnection(server.path, "src", on_event=lambda r: (events.append(r), got.set()), arrival_watch=watch)
    conn.connect(5.0, _alive)
    try:
        assert _watch_threads() == (1 if watch else 0)
        assert conn._loop is not None
        held = threading.Event()
        conn._loop.call_soon_threadsafe(lambda: (held.set(), time.sleep(0.15)))
        assert held.wait(2.0)
        t0 = time.time_ns()
        server.event("STOP")
        t1 = time.time_ns()
        assert got.wait(2.0)
        stamp = events[0]["t_ns"]
        if watch:
            assert t0 <= stamp < t1 + 0.02e9, (stamp - t0) / 1e6
        else:
            assert stamp >= t0 + 0.1e9, (stamp - t0) / 1e6
    finally:
        conn.close()
        server.__exit__()
    assert _watch_threads() == 0  # close() stopped the watch's C thread


def _watch_threads() -> int:
    """Threads of this process named by probes/qmpwatch.c."""
    n = 0
    for comm in Path("/proc/self/task").glob("*/comm"):
        try:
            n += comm.read_text().strip() == "vrmig-qmpwatch"
        except OSError:  # the thread ended meanwhile
            pass
    return n
