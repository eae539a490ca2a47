"""Loaders: raw run files -> numpy arrays and plain dicts (formats: docs/data-formats.md).

Loaders are tolerant of what a killed instrument leaves behind (a truncated last line) but
never invent data: a malformed line is skipped, a missing file raises ``FileNotFoundError``.
"""

from __future__ import annotations

import gzip
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

COUNTER_COLUMNS = ("t_ns", "late_ns", "netns", "ifname", "rx_packets", "rx_bytes", "tx_packets", "tx_bytes")


@dataclass(frozen=True, eq=False)
class IfSeries:
    """Counter samples of one interface, in time order (counters as read: uint64, may wrap)."""

    t_ns: np.ndarray
    late_ns: np.ndarray
    rx_packets: np.ndarray
    rx_bytes: np.ndarray
    tx_packets: np.ndarray
    tx_bytes: np.ndarray

    def __len__(self) -> int:
        return int(self.t_ns.size)


@dataclass(frozen=True, eq=False)
class Counters:
    """All interface series of a counters.tsv, keyed by (role, ifname).

    ``role`` is the namespace name's suffix after the last '-' (``vm1a2b3c-R1`` -> ``R1``)."""

    period_ns: int | None
    series: Mapping[tuple[str, str], IfSeries]
    late_ns: np.ndarray
    #: the sampler's closing line (``# cpu_user_s=... missed=... read_errors=...``), numbers only;
    #: empty when the sampler was killed before writing it
    tail: Mapping[str, float] = field(default_factory=dict)

    def get(self, role: str, ifname: str) -> IfSeries | None:
        """The series of ``ifname`` in namespace role ``role``, or None."""
        return self.series.get((role, ifname))


@dataclass(frozen=True, eq=False)
class RttTrace:
    """RTT probes in send order: send time, RTT (NaN = lost) and sequence number."""

    send_ns: np.ndarray
    rtt_ns: np.ndarray
    seqno: np.ndarray


def role_of(netns: str) -> str:
    """Namespace name -> role: the suffix after the last '-' (the whole name if there is none)."""
    return netns.rsplit("-", 1)[-1]


def _open_text(path: Path) -> str:
    raw = Path(path).read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    return raw.decode("utf-8", errors="replace")


def _complete_lines(text: str) -> list[str]:
    """Lines of ``text`` without a final line that lacks its newline (a writer killed mid-line)."""
    lines = text.split("\n")
    return lines[:-1]


def _period_from_header(line: str) -> int | None:
    for tok in line.split():
        if tok.startswith("period_ns="):
            try:
                return int(tok.split("=", 1)[1])
            except ValueError:
                return None
    return None


_COUNTER_DTYPES = {"t_ns": "i8", "late_ns": "i8", "netns": "U128", "ifname": "U32"}
_COUNTER_DTYPES |= {c: "u8" for c in ("rx_packets", "rx_bytes", "tx_packets", "tx_bytes")}


def _parse_row(fields: list[str], dtype: np.dtype) -> tuple | None:
    if len(fields) != len(dtype.names):
        return None
    try:
        return tuple(int(f) if dtype[i].kind in "iu" else f for i, f in enumerate(fields))
    except ValueError:
        return None


def _counter_table(lines: list[str], columns: list[str]) -> np.ndarray:
    """Structured array of the data lines: numpy's C parser, or line by line if a line is malformed."""
    dtype = np.dtype([(c, _COUNTER_DTYPES.get(c, "U64")) for c in columns])
    lines = [ln for ln in lines if ln.strip() and not ln.lstrip().startswith("#")]
    if not lines:
        return np.zeros(0, dtype=dtype)
    try:
        return np.loadtxt(lines, dtype=dtype, ndmin=1)
    except (ValueError, OverflowError):
        rows = [r for r in (_parse_row(ln.split(), dtype) for ln in lines) if r is not None]
        return np.array(rows, dtype=dtype)


def _tail(lines: list[str]) -> dict[str, float]:
    """key=number pairs of vrsampler's closing comment line (the last one starting ``# cpu_user_s=``)."""
    for line in reversed(lines):
        if line.startswith("#") and "cpu_user_s=" in line:
            out: dict[str, float] = {}
            for tok in line.lstrip("#").split():
                key, _, value = tok.partition("=")
                try:
                    out[key] = float(value)
                except ValueError:
                    continue
            return out
    return {}


def load_counters(path: Path) -> Counters:
    """Read a vrsampler ``counters.tsv`` into per-(role, ifname) uint64 series sorted by t_ns.

    Header ``# vrmig-sampler 1 clock=CLOCK_REALTIME period_ns=<n>`` gives the period; the column
    line (with or without a leading '#') maps the columns by name; the closing comment line's
    numbers (CPU seconds, rounds, missed rounds, read errors) are kept in ``tail``.  Lines with
    the wrong number of fields or non-numeric counters are skipped, and so is a last line without
    its newline (the sampler was killed while writing it)."""
    lines = _complete_lines(_open_text(path))
    period_ns: int | None = None
    columns = list(COUNTER_COLUMNS)
    first_data = len(lines)
    for i, line in enumerate(lines):
        body = line.lstrip("#").split()
        if line.startswith("#") and body[:1] == ["vrmig-sampler"]:
            period_ns = _period_from_header(line)
        elif body[:1] == ["t_ns"]:
            columns = body
        elif body and not line.startswith("#"):
            first_data = i
            break
    missing = [c for c in COUNTER_COLUMNS if c not in columns]
    if missing:
        raise ValueError(f"{path}: counters column line lacks {', '.join(missing)}")
    table = _counter_table(lines[first_data:], columns)
    codes: dict[tuple[str, str], int] = {}
    key_of_row = np.fromiter(
        (codes.setdefault(k, len(codes)) for k in zip(table["netns"].tolist(), table["ifname"].tolist(), strict=True)),
        dtype=np.int64,
        count=table.size,
    )
    series: dict[tuple[str, str], IfSeries] = {}
    for (netns, ifname), code in codes.items():
        sel = np.flatnonzero(key_of_row == code)
        sel = sel[np.argsort(table["t_ns"][sel], kind="stable")]
        series[(role_of(netns), ifname)] = IfSeries(
            **{n: np.ascontiguousarray(table[n][sel]) for n in COUNTER_COLUMNS if n not in ("netns", "ifname")}
        )
    return Counters(period_ns, series, np.ascontiguousarray(table["late_ns"]), _tail(lines))


def _lost(value: Any) -> bool:
    """irtt's ``lost``: false|"false" = received; "true", "true_down", "true_up" = lost."""
    if isinstance(value, bool):
        return value
    return str(value).lower() != "false"


def load_irtt(path: Path) -> RttTrace:
    """Read irtt client ``-o`` JSON (gzip or plain) into an RttTrace sorted by send time.

    Send time = ``timestamps.client.send.wall`` (ns); RTT = ``delay.rtt`` (ns), NaN when ``lost``
    is anything but false (irtt writes it as the string "false") or the RTT is absent.  Round
    trips without a send wall time (never sent) are dropped."""
    doc = json.loads(_open_text(path))
    send, rtt, seq = [], [], []
    for rt in doc.get("round_trips") or []:
        wall = ((rt.get("timestamps") or {}).get("client") or {}).get("send", {}).get("wall")
        if wall is None:
            continue
        value = (rt.get("delay") or {}).get("rtt")
        send.append(int(wall))
        rtt.append(math.nan if _lost(rt.get("lost")) or value is None else float(value))
        seq.append(int(rt.get("seqno", -1)))
    order = np.argsort(np.asarray(send, dtype=np.int64), kind="stable")
    return RttTrace(
        np.asarray(send, dtype=np.int64)[order],
        np.asarray(rtt, dtype=np.float64)[order],
        np.asarray(seq, dtype=np.int64)[order],
    )


def read_json(path: Path) -> dict[str, Any]:
    """One JSON object from a file (gzip or plain); ValueError if it is not an object."""
    obj = json.loads(_open_text(path))
    if not isinstance(obj, dict):
        raise ValueError(f"{path}: expected a JSON object")
    return obj


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """JSON objects, one per line; blank, truncated or non-object lines are skipped."""
    out: list[dict[str, Any]] = []
    for line in _open_text(path).splitlines():
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(obj, dict):
            out.append(obj)
    return out


def sink_gaps(sink: Mapping[str, Any]) -> np.ndarray:
    """sink.json ``gaps`` as an int64 array of shape (n, 4): t_before_ns, t_after_ns, seq_before, seq_after."""
    gaps = [g for g in sink.get("gaps") or [] if isinstance(g, list | tuple) and len(g) == 4]
    return np.asarray(gaps, dtype=np.int64).reshape(-1, 4)
