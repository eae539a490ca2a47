"""vrtcp, the TCP cross-traffic helper (``crosstraffic/src/vrtcp.c``): argv builders and parsers.

The builders only *build* argv lists (typed arguments, :class:`~pathlib.Path` for files, never a
shell string); whoever runs them wraps them in ``ip netns exec`` or SSH.  The parsers read the
helper's TSV traces into numpy int64 arrays held by frozen dataclasses, and its JSON summary.
Times are CLOCK_REALTIME integer ns.

    argv = sink_argv(bind="198.18.2.10", port=5201, flows=2, sample_ms=10, out=run / "tcp_sink.tsv")
    trace = read_sink_trace(run / "tcp_sink.tsv")

Traces of a helper that was killed may end in a partial line (its last write cut short, or the
file read while it was being appended to): every ``read_*`` drops such a line and says so in the
result's ``dropped_partial_line``.
"""

from __future__ import annotations

import io
import ipaddress
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from crosstraffic.backend import TrafficError, load_json

BIN = Path(__file__).resolve().parent / "bin" / "vrtcp"
MAX_FLOWS = 256  # VRTCP_MAX_FLOWS of vrtcp.c
SAMPLE_MS_MAX = 60000
RR_BYTES_MIN, RR_BYTES_MAX = 8, 65536  # the first 8 bytes carry the transaction id
WRITE_BYTES_MAX = 16 << 20
MODES = ("sink", "send", "rr-server", "rr-client")
SUMMARY_VERSION = 1

# tcpi_ca_state (include/uapi/linux/tcp.h, enum tcp_ca_state)
CA_STATES = {0: "Open", 1: "Disorder", 2: "CWR", 3: "Recovery", 4: "Loss"}
# tcpi_snd_ssthresh before the first loss: TCP_INFINITE_SSTHRESH (include/net/tcp.h)
SSTHRESH_INFINITE = 0x7FFFFFFF
# a TCP_INFO field beyond the length this kernel returned, and an rr transaction not sent / not answered
ABSENT = -1

SINK_COLUMNS = ("t_ns", "flow", "bytes")
GAP_COLUMNS = ("flow", "t_before_ns", "t_after_ns", "bytes_before")
TCPINFO_COLUMNS = (
    "t_ns",
    "flow",
    "ca_state",
    "cwnd",
    "ssthresh",
    "srtt_us",
    "rttvar_us",
    "rto_us",
    "retransmits",
    "backoff",
    "lost",
    "retrans",
    "total_retrans",
    "unacked",
    "bytes_acked",
    "bytes_retrans",
    "dsack_dups",
    "delivery_rate_Bps",
    "snd_mss",
)
RR_COLUMNS = ("id", "flow", "t_sched_ns", "t_send_ns", "t_done_ns")

Int64Array = npt.NDArray[np.int64]


# ---------------------------------------------------------------------------------------------
# argv builders


def _check_int(name: str, v: int, lo: int, hi: int) -> None:
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise TrafficError(f"{name}: {v!r} is not an integer in {lo}..{hi}")


def _check_addr(name: str, addr: str) -> None:
    try:
        ipaddress.ip_address(addr.split("%", 1)[0])
    except ValueError:
        raise TrafficError(f"{name}: {addr!r} is not a numeric IPv4 or IPv6 address") from None


def _duration(duration_s: float | None) -> list[str]:
    if duration_s is None:
        return []
    if not math.isfinite(duration_s) or duration_s <= 0:
        raise TrafficError(f"duration_s: {duration_s!r} is not a positive number of seconds")
    return ["--duration", repr(float(duration_s))]


def _common(addr_opt: str, addr: str, port: int, flows: int) -> list[str]:
    _check_addr(addr_opt, addr)
    _check_int("port", port, 1, 65535)
    _check_int("flows", flows, 1, MAX_FLOWS)
    return [f"--{addr_opt}", addr, "--port", str(port), "--flows", str(flows)]


def sink_argv(
    *,
    bind: str,
    port: int,
    flows: int,
    sample_ms: int,
    out: Path,
    gap_ms: int | None = None,
    duration_s: float | None = None,
    binary: Path = BIN,
) -> list[str]:
    """``vrtcp sink``: the goodput trace ``out`` and the gap trace ``out`` + ``.gaps``."""
    _check_int("sample_ms", sample_ms, 1, SAMPLE_MS_MAX)
    argv = [str(binary), "sink", *_common("bind", bind, port, flows), "--sample-ms", str(sample_ms)]
    argv += ["--out", str(out)]
    if gap_ms is not None:
        _check_int("gap_ms", gap_ms, 1, 3_600_000)
        argv += ["--gap-ms", str(gap_ms)]
    return argv + _duration(duration_s)


def send_argv(
    *,
    dst: str,
    port: int,
    flows: int,
    sample_ms: int,
    out: Path,
    cc: str | None = None,
    rate_bps: int | None = None,
    duration_s: float | None = None,
    write_bytes: int | None = None,
    binary: Path = BIN,
) -> list[str]:
    """``vrtcp send``: N bulk flows; ``rate_bps`` per flow (SO_MAX_PACING_RATE), None or 0 = unpaced."""
    _check_int("sample_ms", sample_ms, 1, SAMPLE_MS_MAX)
    argv = [str(binary), "send", *_common("dst", dst, port, flows), "--sample-ms", str(sample_ms)]
    argv += ["--out", str(out)]
    if cc is not None:
        if not cc or not cc.isascii() or not cc.replace("_", "").isalnum():
            raise TrafficError(f"cc: {cc!r} is not a congestion control name (e.g. cubic, bbr, reno)")
        argv += ["--cc", cc]
    if rate_bps is not None:
        if rate_bps != 0:
            _check_int("rate_bps", rate_bps, 8, 10**12)
        argv += ["--rate", str(rate_bps)]
    if write_bytes is not None:
        _check_int("write_bytes", write_bytes, 1, WRITE_BYTES_MAX)
        argv += ["--write-bytes", str(write_bytes)]
    return argv + _duration(duration_s)


def rr_server_argv(
    *, bind: str, port: int, flows: int, resp: int, duration_s: float | None = None, binary: Path = BIN
) -> list[str]:
    """``vrtcp rr-server``: answers each request with ``resp`` bytes."""
    _check_int("resp", resp, RR_BYTES_MIN, RR_BYTES_MAX)
    return [str(binary), "rr-server", *_common("bind", bind, port, flows), "--resp", str(resp), *_duration(duration_s)]


def rr_client_argv(
    *,
    dst: str,
    port: int,
    flows: int,
    rate_tps: float,
    req: int,
    resp: int,
    out: Path,
    duration_s: float | None = None,
    binary: Path = BIN,
) -> list[str]:
    """``vrtcp rr-client``: open-loop transactions at ``rate_tps`` over all flows."""
    if isinstance(rate_tps, bool) or not math.isfinite(rate_tps) or not 0 < rate_tps <= 1e6:
        raise TrafficError(f"rate_tps: {rate_tps!r} is not a transaction rate in (0, 1e6] per second")
    _check_int("req", req, RR_BYTES_MIN, RR_BYTES_MAX)
    _check_int("resp", resp, RR_BYTES_MIN, RR_BYTES_MAX)
    argv = [str(binary), "rr-client", *_common("dst", dst, port, flows), "--rate", repr(float(rate_tps))]
    argv += ["--req", str(req), "--resp", str(resp), "--out", str(out)]
    return argv + _duration(duration_s)


# ---------------------------------------------------------------------------------------------
# parsers


@dataclass(frozen=True)
class SinkTrace:
    """``vrtcp sink`` goodput trace: every sample_ms, per connected flow, the cumulative payload
    bytes received (the 4-byte flow index excluded) at CLOCK_REALTIME ``t_ns``."""

    t_ns: Int64Array
    flow: Int64Array
    bytes: Int64Array
    dropped_partial_line: bool


@dataclass(frozen=True)
class SinkGaps:
    """Receive-side silences of a flow longer than --gap-ms: no read returned data between
    ``t_before_ns`` and ``t_after_ns``; ``bytes_before`` = cumulative payload before the silence."""

    flow: Int64Array
    t_before_ns: Int64Array
    t_after_ns: Int64Array
    bytes_before: Int64Array
    dropped_partial_line: bool


@dataclass(frozen=True)
class TcpInfoTrace:
    """``vrtcp send`` TCP_INFO trace, one row per flow and sample (``-1``: the field lies beyond
    the struct length the kernel returned).  srtt/rttvar/rto in µs, delivery rate in bytes/s."""

    t_ns: Int64Array
    flow: Int64Array
    ca_state: Int64Array
    cwnd: Int64Array
    ssthresh: Int64Array
    srtt_us: Int64Array
    rttvar_us: Int64Array
    rto_us: Int64Array
    retransmits: Int64Array
    backoff: Int64Array
    lost: Int64Array
    retrans: Int64Array
    total_retrans: Int64Array
    unacked: Int64Array
    bytes_acked: Int64Array
    bytes_retrans: Int64Array
    dsack_dups: Int64Array
    delivery_rate_Bps: Int64Array
    snd_mss: Int64Array
    dropped_partial_line: bool


@dataclass(frozen=True)
class RrTrace:
    """``vrtcp rr-client`` transactions, in the order they finished (answered, found busy, or left
    outstanding at the end).  ``flow`` is -1 for a transaction not sent because every flow was
    busy; ``t_send_ns`` / ``t_done_ns`` are -1 when not sent / not answered."""

    id: Int64Array
    flow: Int64Array
    t_sched_ns: Int64Array
    t_send_ns: Int64Array
    t_done_ns: Int64Array
    dropped_partial_line: bool


def parse_tsv(text: str, columns: tuple[str, ...], what: str) -> tuple[dict[str, Int64Array], bool]:
    """Columns of a vrtcp TSV text by name (read-only int64 arrays) and whether a partial last
    line (no newline: a killed helper) was dropped; TrafficError on anything else malformed."""
    partial = bool(text) and not text.endswith("\n")
    if partial:
        text = text[: text.rfind("\n") + 1]
    lines = text.split("\n")
    if not lines[0]:
        raise TrafficError(f"{what}: no header line (want {' '.join(columns)})")
    header = tuple(lines[0].split("\t"))
    if header != columns:
        raise TrafficError(f"{what}: header {' '.join(header)!r}, want {' '.join(columns)!r}")
    body = lines[1:-1]  # the text ends with a newline: the last element is empty
    n = len(columns)
    for i, line in enumerate(body):
        if line.count("\t") != n - 1:
            raise TrafficError(f"{what}: line {i + 2} has {line.count(chr(9)) + 1} fields, want {n}")
    if body:
        try:
            data = np.loadtxt(io.StringIO("\n".join(body)), dtype=np.int64, delimiter="\t", ndmin=2)
        except ValueError as e:
            raise TrafficError(f"{what}: not integers: {str(e).splitlines()[0]}") from None
    else:
        data = np.zeros((0, n), dtype=np.int64)
    cols = {}
    for j, name in enumerate(columns):
        a = np.ascontiguousarray(data[:, j])
        a.flags.writeable = False
        cols[name] = a
    return cols, partial


def _read(path: Path, columns: tuple[str, ...]) -> tuple[dict[str, Int64Array], bool]:
    try:
        text = path.read_text()
    except OSError as e:
        raise TrafficError(f"{path}: {e.strerror}") from None
    return parse_tsv(text, columns, str(path))


def read_sink_trace(path: Path) -> SinkTrace:
    """The sink's ``--out`` trace (a partial last line is dropped)."""
    cols, partial = _read(path, SINK_COLUMNS)
    return SinkTrace(**cols, dropped_partial_line=partial)


def read_sink_gaps(path: Path) -> SinkGaps:
    """The sink's ``--out`` + ``.gaps`` trace (a partial last line is dropped)."""
    cols, partial = _read(path, GAP_COLUMNS)
    return SinkGaps(**cols, dropped_partial_line=partial)


def read_tcpinfo(path: Path) -> TcpInfoTrace:
    """The sender's ``--out`` TCP_INFO trace (a partial last line is dropped)."""
    cols, partial = _read(path, TCPINFO_COLUMNS)
    return TcpInfoTrace(**cols, dropped_partial_line=partial)


def read_rr(path: Path) -> RrTrace:
    """The rr-client's ``--out`` trace (a partial last line is dropped)."""
    cols, partial = _read(path, RR_COLUMNS)
    return RrTrace(**cols, dropped_partial_line=partial)


def parse_summary(text: str, mode: str | None = None) -> dict[str, Any]:
    """The JSON object vrtcp prints on stdout at exit, checked to be vrtcp's (``tool``), of a
    known ``mode`` (the given one, if any) and of this ``version``."""
    obj = load_json(text, "vrtcp")  # one JSON object, or one line saying why not
    if obj.get("tool") != "vrtcp":
        raise TrafficError(f"summary of tool {obj.get('tool')!r}, want 'vrtcp'")
    if obj.get("mode") not in MODES or (mode is not None and obj["mode"] != mode):
        raise TrafficError(f"vrtcp summary of mode {obj.get('mode')!r}, want {mode or ' or '.join(MODES)}")
    if obj.get("version") != SUMMARY_VERSION:
        raise TrafficError(f"vrtcp summary version {obj.get('version')!r}, this parser reads {SUMMARY_VERSION}")
    return obj
