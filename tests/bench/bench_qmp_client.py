"""``make bench-qmp-client``: how late the suite's QMP client stamps an event, without QEMU and
TCG, side by side in one run (docs/measurements/2026-11-25-qmp-arrival-watch.md).

A fake QEMU in another process (``serve``) greets, answers every command with an empty return
and emits ``--events`` events ``--interval-ms`` apart, each stamped (``time.time_ns()``, kept to
the ns in ``data.t_ns`` beside QMP's microsecond timestamp) right before it is written.  The
client under test issues ``query-status`` every 20 ms meanwhile, as the driver polls during a
migration.  Figure: the client's arrival stamp minus the fake's stamp, per event.

Clients, in alternating order over ``--rounds``:

- ``watch``: :class:`migrate.drivers.kvm.qmp.QMPConnection` as the driver uses it (qemu.qmp with
  the arrival watch);
- ``loop``: the same with ``arrival_watch=False`` (the stamp the event loop's read path gives);
- ``recv``: a reference, not a QMP client of the suite: a thread blocked in ``recv`` on the
  socket that stamps each read, as the suite's hand-written client did before qemu.qmp.

Prints a table and writes JSON (``--out``)."""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from migrate.drivers.kvm.qmp import QMPConnection

CLIENTS = ("watch", "loop", "recv")
EVENT = b'{"event": "BENCH", "data": {"i": %d, "t_ns": %d}, "timestamp": {"seconds": %d, "microseconds": %d}}\r\n'
POLL_S = 0.02


def serve(path: Path, events: int, interval_s: float) -> None:
    """The fake QEMU: accept one connection, then reply to commands and emit the events."""
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(str(path))
    srv.listen(1)
    conn, _ = srv.accept()
    srv.close()
    lock = threading.Lock()

    def send(obj: dict[str, Any]) -> None:
        with lock:
            conn.sendall(json.dumps(obj).encode() + b"\r\n")

    send({"QMP": {"version": {"qemu": {"major": 7, "minor": 2, "micro": 0}, "package": "fake"}, "capabilities": []}})
    started = threading.Event()

    def emit() -> None:
        started.wait()
        time.sleep(0.2)
        nxt = time.monotonic()
        for i in range(events):
            nxt += interval_s
            time.sleep(max(0.0, nxt - time.monotonic()))
            with lock:
                t = time.time_ns()  # then a bytes template (µs), not json.dumps (tens of µs here)
                conn.sendall(EVENT % (i, t, t // 10**9, t % 10**9 // 1000))
        send({"event": "BENCH_END", "timestamp": {"seconds": 0, "microseconds": 0}})

    threading.Thread(target=emit, daemon=True).start()
    buf = b""
    while True:
        chunk = conn.recv(65536)
        if not chunk:
            return
        buf += chunk
        while b"\n" in buf or b"}" in buf:
            try:
                msg, end = json.JSONDecoder().raw_decode(buf.decode().lstrip())
            except ValueError:
                break
            buf = buf.decode().lstrip()[end:].encode()
            out: dict[str, Any] = {"return": {}}
            if "id" in msg:
                out["id"] = msg["id"]
            send(out)
            if msg.get("execute") == "qmp_capabilities":
                started.set()


def _suite_client(path: Path, watch: bool) -> list[int]:
    delays: list[int] = []
    done = threading.Event()

    def on_event(rec: dict[str, Any]) -> None:
        if rec["event"] == "BENCH_END":
            done.set()
        elif rec["event"] == "BENCH":
            delays.append(rec["t_ns"] - rec["data"]["t_ns"])

    with QMPConnection(path, "src", on_event, arrival_watch=watch) as conn:
        conn.connect(10.0, lambda: True)
        while not done.wait(POLL_S):
            conn.cmd("query-status", timeout_s=5.0)
    return delays


def _recv_client(path: Path) -> list[int]:
    """The reference: a reader thread in a blocking recv, stamping each read."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    deadline = time.monotonic() + 10
    while True:
        try:
            sock.connect(str(path))
            break
        except (FileNotFoundError, ConnectionRefusedError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.01)
    delays: list[int] = []
    done = threading.Event()

    def reader() -> None:
        buf = b""
        while True:
            try:
                chunk = sock.recv(65536)
            except OSError:  # closed by the caller
                chunk = b""
            t = time.time_ns()
            if not chunk:
                done.set()
                return
            buf += chunk
            *lines, buf = buf.split(b"\n")
            for line in lines:
                msg = json.loads(line)
                if msg.get("event") == "BENCH_END":
                    done.set()
                elif msg.get("event") == "BENCH":
                    delays.append(t - msg["data"]["t_ns"])

    th = threading.Thread(target=reader, daemon=True)
    th.start()
    try:
        sock.sendall(b'{"execute": "qmp_capabilities"}\r\n')
        while not done.wait(POLL_S):
            sock.sendall(b'{"execute": "query-status"}\r\n')
    finally:
        sock.shutdown(socket.SHUT_RDWR)
        sock.close()
        th.join(5)
    return delays


def one(client: str, events: int, interval_ms: float) -> list[int]:
    """One round of ``client`` against a fresh fake QEMU process."""
    with tempfile.TemporaryDirectory(prefix="vrmig-bench-qmp-") as d:
        path = Path(d) / "qmp.sock"
        argv = [sys.executable, "-m", "tests.bench.bench_qmp_client", "serve", str(path),
                "--events", str(events), "--interval-ms", str(interval_ms)]  # fmt: skip
        srv = subprocess.Popen(argv)
        try:
            return _recv_client(path) if client == "recv" else _suite_client(path, client == "watch")
        finally:
            try:
                srv.wait(10)
            except subprocess.TimeoutExpired:
                srv.kill()
                srv.wait()


def stats(ns: list[int]) -> dict[str, Any]:
    """n, median, p95, max in ms."""
    a = np.array(ns, dtype=float) / 1e6
    return {"n": len(ns), "median_ms": round(float(np.median(a)), 4),
            "p95_ms": round(float(np.percentile(a, 95)), 4), "max_ms": round(float(a.max()), 3)}  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    """The options (the Make variables of ``make bench-qmp-client``, and ``--out``) and ``serve``."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd")
    sv = sub.add_parser("serve")
    sv.add_argument("path", type=Path)
    for p in (sv, ap):
        p.add_argument("--events", type=int, default=2000, help="events the fake QEMU emits per round")
        p.add_argument("--interval-ms", type=float, default=2.0, help="ms between two events")
    ap.add_argument("--rounds", type=int, default=4, help="rounds, the clients in alternating order")
    ap.add_argument("--out", type=Path, help="JSON file to write")
    return ap


def main(argv: list[str] | None = None) -> int:
    """Run the rounds, print the table, write JSON."""
    a = build_parser().parse_args(argv)
    if a.cmd == "serve":
        serve(a.path, a.events, a.interval_ms / 1000)
        return 0
    rows, pooled = [], {c: [] for c in CLIENTS}
    print("| client | round | n | median_ms | p95_ms | max_ms |\n|---|---|---|---|---|---|")
    for r in range(a.rounds):
        order = CLIENTS if r % 2 == 0 else CLIENTS[::-1]
        for c in order:
            d = one(c, a.events, a.interval_ms)
            pooled[c] += d
            s = stats(d)
            rows.append({"client": c, "round": r + 1, **s})
            print(f"| {c} | {r + 1} | {s['n']} | {s['median_ms']} | {s['p95_ms']} | {s['max_ms']} |", flush=True)
    for c in CLIENTS:
        s = stats(pooled[c])
        rows.append({"client": c, "round": "all", **s})
        print(f"| {c} | all | {s['n']} | {s['median_ms']} | {s['p95_ms']} | {s['max_ms']} |")
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        meta = {
            "events": a.events,
            "interval_ms": a.interval_ms,
            "rounds": a.rounds,
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "qemu.qmp": _version("qemu.qmp"),
        }
        a.out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
        print(a.out)
    return 0


def _version(dist: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return None


if __name__ == "__main__":
    raise SystemExit(main())
