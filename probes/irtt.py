"""RTT probes with irtt (Debian 0.9.x): server/client command lines, readiness of the server, and
a loader for the client's JSON output (``-o file.json`` or ``file.json.gz``).

What irtt 0.9.0 writes (checked on real runs, see tests/fixtures/probes/):

* ``round_trips``: one object per probe, in ``seqno`` order (0, 1, 2, ...; contiguous — a send the
  timer could not make in time is *skipped*, not numbered, and only counted in
  ``stats.timer_misses``).
* ``timestamps.client.send.wall``: Go ``time.Now()`` at send, Unix ns = CLOCK_REALTIME;
  ``.monotonic`` counts from an origin irtt does not record (not CLOCK_MONOTONIC; ~10 ms before
  ``stats.start_time``), so only ``wall`` is used.
* ``lost``: ``"false"``, ``"true"`` (lost, direction unknown), ``"true_up"`` (the server never
  received it) or ``"true_down"`` (the server replied, the reply was lost).  Lost probes keep their
  client send timestamps; ``receive`` and ``delay`` are empty objects.
* ``delay.rtt``: ns, client receive - client send minus the server's processing time (monotonic
  clocks).
* SIGINT stops the client at once (no end-of-test wait), writes the file and exits 0.
"""

from __future__ import annotations

import gzip
import ipaddress
import json
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

IRTT = "irtt"
DEFAULT_PORT = 2112
LOST_CODES = {"false": 0, "true": 1, "true_up": 2, "true_down": 3}
LOST_NO, LOST_UNKNOWN, LOST_UP, LOST_DOWN = 0, 1, 2, 3
DEFAULT_POLL_S = 0.02
OPEN_TIMEOUTS = "3s,3s,3s,3s"  # see client_argv: irtt's 1 s first open timeout breaks fresh IPv6 paths


# ------------------------------------------------------------------ addresses


def split_host_port(hostport: str, default_port: int = DEFAULT_PORT) -> tuple[str, int]:
    """``"198.18.2.11:2112"``, ``"[2001:2::11]:2112"``, ``"2001:2::11:2112"`` (an unbracketed
    IPv6 address with the port appended, as built by f"{addr}:{port}") or a bare address ->
    (compressed IP literal, port).  Only IP literals are accepted (the testbed has no names)."""
    s = hostport.strip()
    if s.startswith("["):
        host, sep, rest = s[1:].partition("]")
        if not sep or (rest and not rest.startswith(":")):
            raise ValueError(f"bad address {hostport!r}")
        port = int(rest[1:]) if rest else default_port
        return _ip(host, hostport), _port(port, hostport)
    host, sep, port_s = s.rpartition(":")
    if sep and port_s.isdigit():
        try:
            return _ip(host, hostport), _port(int(port_s), hostport)
        except ValueError:
            pass  # e.g. "2001:2::11" alone: the last group is not a port
    return _ip(s, hostport), default_port


def join_host_port(addr: str, port: int) -> str:
    """irtt's host:port form (IPv6 in brackets)."""
    ip = ipaddress.ip_address(addr.strip("[]"))
    return f"[{ip.compressed}]:{port}" if ip.version == 6 else f"{ip.compressed}:{port}"


def _ip(host: str, orig: str) -> str:
    try:
        ip = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        raise ValueError(f"{orig!r}: not an IP address (host:port, [v6]:port or address)") from None
    return ip.compressed


def _port(port: int, orig: str) -> int:
    if not 0 < port < 65536:
        raise ValueError(f"{orig!r}: bad port {port}")
    return port


def _go_duration(seconds: float) -> str:
    """A Go duration string for irtt (``60s``, ``10ms``, 1.5 s -> ``1500ms``, ``250us``)."""
    ns = round(seconds * 1e9)
    if ns <= 0:
        raise ValueError(f"duration must be positive, got {seconds} s")
    if ns % 1_000_000_000 == 0:
        return f"{ns // 1_000_000_000}s"
    if ns % 1_000_000 == 0:
        return f"{ns // 1_000_000}ms"
    if ns % 1_000 == 0:
        return f"{ns // 1_000}us"
    return f"{ns}ns"


# ------------------------------------------------------------------ command lines


def server_argv(
    bind: str,
    port: int | None = None,
    *,
    min_interval_ms: float = 0,
    timeout_s: float = 60,
    irtt: str = IRTT,
) -> list[str]:
    """argv of an irtt server listening only on the testbed address ``bind``.

    ``bind`` is ``addr:port``, ``[v6]:port`` or an address (then ``port``, default 2112).  The
    unspecified address is refused: the server must listen on the given testbed address only.
    ``min_interval_ms=0`` lifts irtt's default 10 ms minimum (a strict client asking for less
    fails with a "server restriction" error).  ``timeout_s`` closes idle sessions (irtt restricts
    the client interval to timeout/4).
    """
    addr, p = split_host_port(bind) if port is None else (split_host_port(bind)[0], _port(port, bind))
    if ipaddress.ip_address(addr).is_unspecified:
        raise ValueError(f"irtt server must bind a testbed address, not {addr}")
    return [
        irtt,
        "server",
        "-b",
        join_host_port(addr, p),
        "-i",
        _go_duration(min_interval_ms / 1e3) if min_interval_ms > 0 else "0",
        f"--timeout={_go_duration(timeout_s)}",  # irtt's long options take "=value" only
    ]


def client_argv(
    server: str,
    interval_ms: float,
    duration_s: float,
    out: Path,
    *,
    port: int | None = None,
    length: int = 0,
    timer: str = "comp",
    open_timeouts: str | None = OPEN_TIMEOUTS,
    irtt: str = IRTT,
) -> list[str]:
    """argv of an irtt client probing ``server`` every ``interval_ms`` for ``duration_s``,
    writing irtt's JSON to ``out`` (``*.json`` or ``*.json.gz``; gzip'd for the latter).

    Stop it early with SIGINT (it writes ``out`` and exits 0).  ``timer="comp"`` is irtt's default;
    below ~5 ms it skips sends (see the module docstring of load_irtt / the report); ``"busy"`` is
    exact but spins a whole core.

    ``open_timeouts`` is irtt's ``--timeouts`` (irtt's own default is 1s,2s,4s,8s).  irtt 0.9.0
    re-sends its open request when the first reply takes longer than the first timeout; if that
    late reply then arrives during the test the client stops with "unexpected open flag set" —
    silently with ``-Q``, exit status 0, a trace of one or two probes.  On a freshly configured
    IPv6 path the first round trip waits ~1 s for neighbour discovery, so the 1 s default trips
    it (reproduced: 4/5 runs); OPEN_TIMEOUTS (3 s first) avoids it (0/8).  None = irtt's default.
    """
    name = Path(out).name
    if not (name.endswith(".json") or name.endswith(".json.gz")):
        raise ValueError(f"irtt output must end in .json or .json.gz (irtt renames others): {out}")
    if interval_ms <= 0:
        raise ValueError(f"interval_ms must be positive, got {interval_ms}")
    addr, p = split_host_port(server) if port is None else (split_host_port(server)[0], _port(port, server))
    argv = [
        irtt,
        "client",
        "-i",
        _go_duration(interval_ms / 1e3),
        "-d",
        _go_duration(duration_s),
        "-Q",
        "-o",
        str(out),
    ]
    if length:
        argv += ["-l", str(length)]
    if timer != "comp":
        argv.append(f"--timer={timer}")
    if open_timeouts:
        argv.append(f"--timeouts={open_timeouts}")
    argv.append(join_host_port(addr, p))
    return argv


# ------------------------------------------------------------------ readiness


def wait_irtt_server(
    netns: str | None,
    addr: str,
    port: int = DEFAULT_PORT,
    timeout_s: float = 10.0,
    *,
    pid: int | None = None,
    abort: Callable[[], bool] | None = None,
    poll_s: float = DEFAULT_POLL_S,
) -> float:
    """:func:`wait_udp_bound` inside ``netns`` on this machine (None or ``"."``: the current
    namespace)."""
    prefix = [] if netns in (None, ".") else ["ip", "netns", "exec", str(netns)]

    def ss(argv: list[str]) -> tuple[int, str, str]:
        res = subprocess.run([*prefix, *argv], capture_output=True, text=True, check=False)
        return res.returncode, res.stdout, res.stderr

    return wait_udp_bound(ss, addr, port, timeout_s, where=netns or "this namespace", pid=pid, abort=abort,
                          poll_s=poll_s)  # fmt: skip


def wait_udp_bound(
    ss: Callable[[list[str]], tuple[int, str, str]],
    addr: str,
    port: int = DEFAULT_PORT,
    timeout_s: float = 10.0,
    *,
    where: str,
    pid: int | None = None,
    abort: Callable[[], bool] | None = None,
    poll_s: float = DEFAULT_POLL_S,
) -> float:
    """Wait until a UDP socket is bound to ``addr:port`` where the irtt server runs, i.e. it can
    receive probes; return the CLOCK_REALTIME seconds it was seen.  ``ss(argv)`` runs ``ss`` there
    (a namespace of this machine, a lab host over SSH: ``where`` names it) and returns its exit
    status, stdout and stderr; ``ss -Hlun`` is polled every ``poll_s``.

    ``pid`` additionally requires the socket to belong to that process there (so a leftover server
    cannot be mistaken for the new one); ``abort()`` returning True (e.g. the server process
    exited: irtt exits 1 when it cannot bind) stops the wait with RuntimeError.
    Raises TimeoutError when nothing is bound within ``timeout_s``.
    """
    want = (_ip(addr.strip().strip("[]"), addr), _port(port, addr))
    cmd = ["ss", "-Hlun"] + (["-p"] if pid is not None else []) + [f"sport = :{port}"]
    deadline = time.monotonic() + timeout_s
    last_err = ""
    while True:
        rc, out, err = ss(cmd)
        if rc == 0:
            if _ss_has_socket(out, want, pid):
                return time.time()
        else:
            last_err = err.strip()
        if abort is not None and abort():
            raise RuntimeError(f"irtt server gone before listening on {join_host_port(*want)}")
        if time.monotonic() > deadline:
            detail = f" (ss: {last_err})" if last_err else ""
            if pid is not None:
                detail = f" by pid {pid}{detail}"
            raise TimeoutError(
                f"irtt server not listening on {join_host_port(*want)} in {where} within {timeout_s:.1f} s{detail}"
            )
        time.sleep(poll_s)


def _ss_has_socket(ss_out: str, want: tuple[str, int], pid: int | None) -> bool:
    """True if ``ss -Hlun[p]`` output has a socket bound to ``want`` (owned by ``pid`` if given)."""
    for line in ss_out.splitlines():
        fields = line.split()
        if len(fields) < 5:
            continue
        try:
            local = split_host_port(fields[3])
        except ValueError:
            continue
        if local != want:
            continue
        if pid is None or f"pid={pid}," in line:
            return True
    return False


# ------------------------------------------------------------------ loader


@dataclass(frozen=True)
class RttTrace:
    """Per-probe results of one irtt client run, in seqno order.

    ``send_ns`` int64 CLOCK_REALTIME (irtt's client wall-clock send timestamp); ``rtt_ns`` float64,
    NaN for lost probes; ``seqno`` int64; ``lost`` uint8 (LOST_NO, LOST_UNKNOWN, LOST_UP,
    LOST_DOWN); ``recv_ns`` int64 CLOCK_REALTIME client receive time, 0 for lost probes.
    ``interval_ns`` is the requested probe interval; ``timer_misses`` how many sends irtt skipped.
    """

    send_ns: np.ndarray
    rtt_ns: np.ndarray
    seqno: np.ndarray
    lost: np.ndarray
    recv_ns: np.ndarray
    interval_ns: int
    packets_sent: int
    timer_misses: int
    remote: str
    start_ns: int = 0

    def __len__(self) -> int:
        return len(self.seqno)

    @property
    def received(self) -> np.ndarray:
        """Boolean mask of probes that came back."""
        return self.lost == LOST_NO


def _open_json(path: Path) -> dict[str, Any]:
    with path.open("rb") as fh:
        magic = fh.read(2)
    opener = gzip.open if magic == b"\x1f\x8b" else open
    with opener(path, "rb") as fh:
        return json.load(fh)


def _rfc3339_ns(s: str) -> int:
    """'2026-11-22T00:57:38.256061512Z' -> Unix ns (irtt stats.start_time; UTC 'Z' or offset)."""
    from datetime import datetime

    main, frac, tz = s, "", ""
    for i in range(len(s) - 1, 9, -1):
        if s[i] in "Z+-":
            main, tz = s[:i], s[i:]
            break
    if "." in main:
        main, frac = main.split(".", 1)
    dt = datetime.fromisoformat(main + ("+00:00" if tz in ("", "Z") else tz))
    return int(dt.timestamp()) * 1_000_000_000 + int((frac + "000000000")[:9])


def _lost_code(value: Any) -> int:
    """irtt's ``lost`` (the string "false", "true", "true_up", "true_down"; a JSON boolean is
    read the same way) as a LOST_* code."""
    text = str(value).lower() if isinstance(value, bool) else str(value)
    return LOST_CODES.get(text, LOST_UNKNOWN)


def load_irtt(path: Path | str, *, strict: bool = True) -> RttTrace:
    """Load irtt's client JSON (plain or gzip'd, detected by content) into numpy arrays: the only
    parser of irtt's output in the project.

    A round trip without a client wall-clock send time raises ValueError, or with
    ``strict=False`` is left out (and a document without ``config`` is accepted): the analysis
    reads what a killed client left and never invents a send time."""
    path = Path(path)
    d = _open_json(path)
    if "round_trips" not in d or ("config" not in d and strict):
        raise ValueError(f"{path}: not irtt client output (no round_trips/config)")
    rts = d["round_trips"] or []
    if not strict:
        rts = [rt for rt in rts if "wall" in (((rt.get("timestamps") or {}).get("client") or {}).get("send") or {})]
    stats = d.get("stats") or {}
    n = len(rts)
    seqno = np.empty(n, np.int64)
    send_ns = np.empty(n, np.int64)
    recv_ns = np.zeros(n, np.int64)
    rtt_ns = np.full(n, np.nan)
    lost = np.empty(n, np.uint8)
    for i, rt in enumerate(rts):
        seqno[i] = rt["seqno"] if strict else rt.get("seqno", -1)
        lost[i] = _lost_code(rt.get("lost", "true"))
        client = (rt.get("timestamps") or {}).get("client") or {}
        snd, rcv = client.get("send") or {}, client.get("receive") or {}
        if "wall" not in snd:
            # the monotonic stamps count from an earlier, unrecorded origin (~the handshake before
            # stats.start_time): they cannot be turned into CLOCK_REALTIME reliably
            raise ValueError(f"{path}: round trip {rt.get('seqno')} has no client wall-clock send time")
        send_ns[i] = snd["wall"]
        if lost[i] == LOST_NO:
            rtt = (rt.get("delay") or {}).get("rtt")
            if rtt is None and "monotonic" in rcv and "monotonic" in snd:
                rtt = rcv["monotonic"] - snd["monotonic"]
            if rtt is not None:
                rtt_ns[i] = rtt
            if "wall" in rcv:
                recv_ns[i] = rcv["wall"]
    params = (d.get("config") or {}).get("params") or {}
    return RttTrace(
        send_ns=send_ns,
        rtt_ns=rtt_ns,
        seqno=seqno,
        lost=lost,
        recv_ns=recv_ns,
        interval_ns=int(params.get("interval", 0)),
        packets_sent=int(stats.get("packets_sent", n)),
        timer_misses=int(stats.get("timer_misses", 0)),
        remote=str((d.get("config") or {}).get("remote_address", "")),
        start_ns=_rfc3339_ns(stats["start_time"]) if stats.get("start_time") else 0,
    )
