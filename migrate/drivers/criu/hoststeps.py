"""The host-side steps of a CRIU migration on a lab's hypervisor hosts (HV=criu TESTBED=...).

On the embedded testbed the orchestrator runs CRIU in the hosts' namespaces and moves the images
itself.  On a lab it can only reach R1 and R2 over SSH, and a round trip per step would be frozen
time: so the steps that follow one another while the router is frozen run on the host, as one
program each, started under the guard (:mod:`migrate.testbed.guard`) and reporting what they did
as ``vrmig-step: <json>`` lines on stderr (CLOCK_REALTIME ns of the host; the orchestrator puts
them on its clock with the host's measured offset):

``dump-send --dir D --to ADDR:PORT -- CRIU-ARGV``
    on R1: connect to R2's image receiver (``imgxfer recv``) first, run ``criu dump`` (its
    ``--display-stats`` output stays on stdout), and, if it succeeded, ship the images over the
    migration link at once (OpenVZ's dump, copy, undump without a round trip between them).
``recv-restore --dir D --listen ADDR:PORT --pidfile P --port IFNAME HEXFRAMES ... -- CRIU-ARGV``
    on R2, started before the final dump: receive the images (prints ``READY`` once it listens),
    run ``criu restore`` as soon as the last byte is written, then, if it succeeded, send the
    router's gratuitous ARP and unsolicited NA frames from inside the restored container's
    network namespace.
``run -- CRIU-ARGV``
    a pre-dump: run it and report its start and end.
``keep --root DIR [--tap NAME@BRIDGE ...]``
    on R1 and R2, for the whole run: on SIGTERM (which its guard sends when the orchestrator or its
    SSH connection goes away, or when the run ends) it kills every process whose root directory is
    DIR (the container, started or restored, wherever its parent is) and puts the host's tap
    devices back as ``make hosts-setup`` made them (the run replaced them with the container's
    veths).  So a SIGKILLed orchestrator leaves no container and no missing tap behind.

Standard library only: deployed by ``make hosts-setup`` beside ``imgxfer.py`` and run by the
host's ``python3``."""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

try:
    from migrate.drivers.criu import imgxfer
except ImportError:  # deployed on a lab host: imgxfer.py lies beside this file
    import imgxfer  # type: ignore[import-not-found, no-redef]

MARK = "vrmig-step:"
CLONE_NEWNET = 0x40000000
KILL_WAIT_S = 2.0
LINK_WAIT_S = 2.0
POLL_S = 0.01


def emit(step: str, **fields: object) -> None:
    """One report line on stderr."""
    sys.stderr.write(f"{MARK} {json.dumps({'step': step, **fields})}\n")
    sys.stderr.flush()


def parse_steps(text: str) -> dict[str, dict[str, object]]:
    """The reports in a step program's stderr, by step name (the last of each)."""
    out: dict[str, dict[str, object]] = {}
    for line in text.splitlines():
        if line.startswith(MARK):
            try:
                rec = json.loads(line[len(MARK) :])
            except ValueError:
                continue
            if isinstance(rec, dict) and "step" in rec:
                out[str(rec["step"])] = rec
    return out


def timed(argv: list[str]) -> tuple[int, int, int]:
    """Run ``argv`` (its stdout is this program's); (exit status, start ns, end ns)."""
    t0 = time.time_ns()
    rc = subprocess.call(argv)
    return rc, t0, time.time_ns()


# ------------------------------------------------------------------------------------- dump-send
def dump_send(directory: Path, to: tuple[str, int], criu: list[str]) -> int:
    """Connect, dump, send; returns criu's exit status (70 if the transfer failed)."""
    try:
        conn = socket.create_connection(to, timeout=imgxfer.CONNECT_TIMEOUT_S)
        conn.sendall(imgxfer.MAGIC)
    except OSError as err:
        emit("connect", error=str(err))
        return 71
    with conn:
        conn.settimeout(imgxfer.IO_TIMEOUT_S)
        emit("connect", t_ns=time.time_ns())
        rc, t0, t1 = timed(criu)
        emit("dump", start_ns=t0, end_ns=t1, exit_status=rc)
        if rc != 0:
            return rc
        try:
            s = imgxfer.send_files(conn, directory)
        except (OSError, imgxfer.TransferError) as err:
            emit("transfer", error=str(err), start_ns=t1, end_ns=time.time_ns())
            return 70
        emit("transfer", files=s.files, bytes=s.bytes, start_ns=s.start_ns, end_ns=s.end_ns)
    return 0


# ------------------------------------------------------------------------------ restore-announce
def _enter_netns(path: str) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(path, os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns {path}: {os.strerror(err)}")
    finally:
        os.close(fd)


def announce(pid: int, ports: list[tuple[str, list[bytes]]], rounds: int, gap_s: float) -> int:
    """Send each port's frames from inside the network namespace of ``pid`` (this process enters
    it: it is its last act); returns the CLOCK_REALTIME ns of the first frame."""
    _enter_netns(f"/proc/{pid}/ns/net")
    socks = []
    for ifname, _frames in ports:
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
        s.bind((ifname, 0))
        socks.append(s)
    first = time.time_ns()
    for r in range(rounds):
        for s, (_ifname, frames) in zip(socks, ports, strict=True):
            for f in frames:
                s.send(f)
        if r + 1 < rounds:
            time.sleep(gap_s)
    for s in socks:
        s.close()
    return first


def recv_restore(
    directory: Path,
    listen: tuple[str, int],
    pidfile: Path,
    ports: list[tuple[str, list[bytes]]],
    rounds: int,
    gap_s: float,
    criu: list[str],
) -> int:
    """Receive the images, restore, announce; returns criu's exit status (73 if the images did
    not arrive)."""
    try:
        with imgxfer.listen(*listen) as lsock:
            print("READY", flush=True)
            s = imgxfer.receive(lsock, directory)
    except (OSError, imgxfer.TransferError) as err:
        emit("receive", error=str(err))
        return 73
    emit("receive", files=s.files, bytes=s.bytes, start_ns=s.start_ns, end_ns=s.end_ns)
    return restore_announce(pidfile, ports, rounds, gap_s, criu)


def run(criu: list[str]) -> int:
    """Run one command and report its start, end and exit status."""
    rc, t0, t1 = timed(criu)
    emit("run", start_ns=t0, end_ns=t1, exit_status=rc)
    return rc


def restore_announce(
    pidfile: Path, ports: list[tuple[str, list[bytes]]], rounds: int, gap_s: float, criu: list[str]
) -> int:
    """Restore, then announce; returns criu's exit status (72 if the announcement failed)."""
    rc, t0, t1 = timed(criu)
    emit("restore", start_ns=t0, end_ns=t1, exit_status=rc)
    if rc != 0:
        return rc
    try:
        pid = int(pidfile.read_text().strip())
        first = announce(pid, ports, rounds, gap_s)
    except (OSError, ValueError) as err:
        emit("announce", error=str(err))
        return 72
    emit("announce", t_ns=first, pid=pid)
    return 0


# -------------------------------------------------------------------------------------- keep
def rooted(root: tuple[int, int]) -> list[int]:
    """PIDs of the processes whose root directory is the directory ``root`` = (dev, inode)."""
    out = []
    me = os.getpid()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        try:
            st = os.stat(f"/proc/{name}/root")
        except OSError:
            continue
        if (st.st_dev, st.st_ino) == root:
            out.append(int(name))
    return out


def _link_kind(name: str) -> str | None:
    """``ip -d link``'s kind of ``name`` ("tun", "veth", "" for none given), None if absent."""
    res = subprocess.run(["ip", "-j", "-d", "link", "show", "dev", name], capture_output=True, text=True)
    if res.returncode != 0:
        return None
    try:
        info = json.loads(res.stdout)[0].get("linkinfo") or {}
    except (ValueError, IndexError):
        return ""
    return str(info.get("info_kind", ""))


def restore_tap(name: str, bridge: str) -> list[str]:
    """Put back the tap ``name`` on ``bridge``, up (as hosts-setup's vrmig_tap makes it): a veth
    left by the container is deleted first.  Returns what it did."""
    done = []
    deadline = time.monotonic() + LINK_WAIT_S
    while (kind := _link_kind(name)) not in (None, "tun"):
        if kind == "veth" or time.monotonic() > deadline:
            subprocess.run(["ip", "link", "del", "dev", name], capture_output=True)
            done.append(f"deleted {kind or 'link'} {name}")
        time.sleep(POLL_S)
        if time.monotonic() > deadline + LINK_WAIT_S:
            done.append(f"could not free {name}")
            return done
    if kind is None:
        subprocess.run(["ip", "tuntap", "add", "dev", name, "mode", "tap"], check=True, capture_output=True)
        done.append(f"created tap {name}")
    subprocess.run(["ip", "link", "set", "dev", name, "master", bridge, "up"], check=True, capture_output=True)
    return done


def keep(root: Path, taps: list[tuple[str, str]]) -> int:
    """Wait for SIGTERM/SIGHUP/SIGINT; then kill what runs in ``root`` and restore ``taps``."""
    st = root.stat()
    key = (st.st_dev, st.st_ino)
    sigs = {signal.SIGTERM, signal.SIGHUP, signal.SIGINT}
    signal.pthread_sigmask(signal.SIG_BLOCK, sigs)
    print("READY", flush=True)
    signal.sigwait(sigs)
    killed: list[int] = []
    deadline = time.monotonic() + KILL_WAIT_S
    while pids := rooted(key):
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            except ProcessLookupError:
                pass
        if time.monotonic() > deadline:
            break
        time.sleep(POLL_S)
    done: list[str] = []
    for name, bridge in taps:
        try:
            done += restore_tap(name, bridge)
        except subprocess.CalledProcessError as err:
            done.append(f"cannot restore {name}: {(err.stderr or b'').decode(errors='replace').strip()}")
    emit("keep", killed=sorted(set(killed)), left=rooted(key), taps=done)
    return 0


def _tap(text: str) -> tuple[str, str]:
    name, _, bridge = text.partition("@")
    if not name or not bridge:
        raise argparse.ArgumentTypeError(f"{text!r} is not NAME@BRIDGE")
    return name, bridge


def main(argv: list[str] | None = None) -> int:
    """Command line (see the module docstring)."""
    p = argparse.ArgumentParser(prog="hoststeps")
    sub = p.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("dump-send")
    d.add_argument("--dir", type=Path, required=True)
    d.add_argument("--to", type=imgxfer._addr, required=True)
    d.add_argument("criu", nargs=argparse.REMAINDER)
    r = sub.add_parser("recv-restore")
    r.add_argument("--dir", type=Path, required=True)
    r.add_argument("--listen", type=imgxfer._addr, required=True)
    r.add_argument("--pidfile", type=Path, required=True)
    r.add_argument("--rounds", type=int, required=True)
    r.add_argument("--gap", type=float, required=True)
    r.add_argument("--port", nargs=2, action="append", default=[], metavar=("IFNAME", "HEXFRAMES"))
    r.add_argument("criu", nargs=argparse.REMAINDER)
    u = sub.add_parser("run")
    u.add_argument("criu", nargs=argparse.REMAINDER)
    k = sub.add_parser("keep")
    k.add_argument("--root", type=Path, required=True)
    k.add_argument("--tap", type=_tap, action="append", default=[])
    a = p.parse_args(argv)
    if a.cmd == "keep":
        return keep(a.root, a.tap)
    criu = a.criu[1:] if a.criu[:1] == ["--"] else a.criu
    if not criu:
        p.error("no criu command after --")
    if a.cmd == "run":
        return run(criu)
    if a.cmd == "dump-send":
        return dump_send(a.dir, a.to, criu)
    ports = [(ifname, [bytes.fromhex(h) for h in hexes.split(",") if h]) for ifname, hexes in a.port]
    return recv_restore(a.dir, a.listen, a.pidfile, ports, a.rounds, a.gap, criu)


if __name__ == "__main__":
    sys.exit(main())
