"""Ship CRIU's image files (all but the memory pages, which CRIU's page server already carried)
from R1 to R2 over one TCP connection on the dedicated migration link, so that every byte of the
migration is counted on ``mig0``.

Wire format: ``MAGIC`` (a sender may connect and send it ahead, before the images exist), then
per file ``!H`` name length, name (UTF-8, a plain file name), ``!Q`` size, the bytes; a zero
name length ends the stream and the receiver answers ``OK <files> <bytes>\\n`` once everything
is written.

Command line (run inside the hosts' namespaces)::

    python -m migrate.drivers.criu.imgxfer recv --dir DIR --listen ADDR:PORT    # prints READY, then a JSON summary
    python -m migrate.drivers.criu.imgxfer send --dir DIR --to ADDR:PORT         # prints a JSON summary
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import socket
import struct
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

MAGIC = b"VRMIG-IMG 1\n"
CHUNK = 1 << 20
CONNECT_TIMEOUT_S = 10.0
IO_TIMEOUT_S = 60.0
#: not needed on the destination (the source's logs stay with the results)
DEFAULT_EXCLUDE = ("*.log",)


class TransferError(Exception):
    """The transfer failed (connection, protocol or file system)."""


@dataclass(frozen=True)
class Summary:
    """What crossed the link: file count, payload bytes, first/last byte (CLOCK_REALTIME ns)."""

    files: int
    bytes: int
    start_ns: int
    end_ns: int


def valid_name(name: str) -> bool:
    """A plain file name (no directory part, not . or ..)."""
    return bool(name) and "/" not in name and "\0" not in name and name not in (".", "..")


def files_to_send(directory: Path, exclude: tuple[str, ...] = DEFAULT_EXCLUDE) -> list[Path]:
    """Regular files of ``directory`` (no symlinks, no subdirectories), sorted, minus ``exclude``."""
    out = []
    for p in sorted(directory.iterdir()):
        if p.is_symlink() or not p.is_file() or any(fnmatch.fnmatch(p.name, pat) for pat in exclude):
            continue
        out.append(p)
    return out


def _recv_exact(conn: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = conn.recv(min(CHUNK, n - len(buf)))
        if not chunk:
            raise TransferError(f"connection closed after {len(buf)} of {n} bytes")
        buf += chunk
    return bytes(buf)


def send_files(conn: socket.socket, directory: Path, exclude: tuple[str, ...] = DEFAULT_EXCLUDE) -> Summary:
    """Send the files of ``directory`` on ``conn`` (connected, ``MAGIC`` already sent); returns
    once the receiver confirmed them all."""
    files = files_to_send(directory, exclude)
    start = time.time_ns()
    total = 0
    conn.settimeout(IO_TIMEOUT_S)
    for p in files:
        name = p.name.encode()
        size = p.stat().st_size
        conn.sendall(struct.pack("!H", len(name)) + name + struct.pack("!Q", size))
        with open(p, "rb") as fh:
            sent = conn.sendfile(fh)
        if sent != size:
            raise TransferError(f"{p.name}: sent {sent} of {size} bytes (file changed?)")
        total += size
    conn.sendall(struct.pack("!H", 0))
    want = f"OK {len(files)} {total}\n".encode()
    reply = _recv_exact(conn, len(want))
    end = time.time_ns()
    if reply != want:
        raise TransferError(f"receiver answered {reply!r}, expected {want!r}")
    return Summary(len(files), total, start, end)


def send(directory: Path, host: str, port: int, exclude: tuple[str, ...] = DEFAULT_EXCLUDE) -> Summary:
    """Connect to a receiver and send the files of ``directory``."""
    with socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S) as conn:
        conn.sendall(MAGIC)
        return send_files(conn, directory, exclude)


def receive(listener: socket.socket, directory: Path) -> Summary:
    """Accept one sender on ``listener`` and write its files into ``directory``."""
    conn, _peer = listener.accept()
    with conn:
        conn.settimeout(IO_TIMEOUT_S)
        if _recv_exact(conn, len(MAGIC)) != MAGIC:
            raise TransferError("not a vrmig image stream")
        conn.settimeout(None)  # a sender may connect ahead and send once its images exist
        start = time.time_ns()
        files = total = 0
        while True:
            (n,) = struct.unpack("!H", _recv_exact(conn, 2))
            if n == 0:
                break
            name = _recv_exact(conn, n).decode()
            if not valid_name(name):
                raise TransferError(f"refusing file name {name!r}")
            (size,) = struct.unpack("!Q", _recv_exact(conn, 8))
            with open(directory / name, "wb") as fh:
                left = size
                while left:
                    chunk = conn.recv(min(CHUNK, left))
                    if not chunk:
                        raise TransferError(f"{name}: connection closed with {left} bytes missing")
                    fh.write(chunk)
                    left -= len(chunk)
            files, total = files + 1, total + size
        end = time.time_ns()
        conn.sendall(f"OK {files} {total}\n".encode())
    return Summary(files, total, start, end)


def listen(host: str, port: int) -> socket.socket:
    """A listening socket for one sender."""
    s = socket.create_server((host, port), backlog=1)
    s.settimeout(None)
    return s


def _addr(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not ADDR:PORT")
    return host, int(port)


def main(argv: list[str] | None = None) -> int:
    """Command line (see the module docstring); exit 1 with one line on error."""
    p = argparse.ArgumentParser(prog="python -m migrate.drivers.criu.imgxfer")
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("recv")
    r.add_argument("--dir", type=Path, required=True)
    r.add_argument("--listen", type=_addr, required=True)
    s = sub.add_parser("send")
    s.add_argument("--dir", type=Path, required=True)
    s.add_argument("--to", type=_addr, required=True)
    a = p.parse_args(argv)
    try:
        if a.cmd == "recv":
            with listen(*a.listen) as lsock:
                print("READY", flush=True)
                summary = receive(lsock, a.dir)
        else:
            summary = send(a.dir, *a.to)
    except (OSError, TransferError) as err:
        print(f"imgxfer {a.cmd}: {err}", file=sys.stderr)
        return 1
    print(json.dumps(asdict(summary)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
