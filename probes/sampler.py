"""The 10 ms interface-counter sampler: command line for ``probes/bin/vrsampler`` and a pure,
numpy-based loader for the ``counters.tsv`` it writes (format: docs/data-formats.md, "Raw data formats").

``analysis/`` imports :func:`load_counters`; nothing here starts processes or touches namespaces.
"""

from __future__ import annotations

import gzip
import io
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
VRSAMPLER = REPO / "probes" / "bin" / "vrsampler"

HEADER_RE = re.compile(rb"^# vrmig-sampler (\d+) clock=(\S+) period_ns=(\d+)\s*$")
COLUMNS = ("t_ns", "late_ns", "netns", "ifname", "rx_packets", "rx_bytes", "tx_packets", "tx_bytes")
FORMAT_VERSION = 1
CURRENT_NETNS = "."
IFNAMSIZ = 16
_NAME_BAD = re.compile(r"[\s/]")


def sampler_argv(
    out: Path,
    targets: Mapping[str, list[str]],
    period_ms: int = 10,
    rt: bool = True,
    *,
    duration_s: float | None = None,
    binary: Path = VRSAMPLER,
) -> list[str]:
    """argv of one ``vrsampler`` process sampling every interface of ``targets``.

    ``targets`` maps a namespace name under /run/netns (or ``"."``, the namespace the sampler runs
    in) to the interface names to read there.  ``rt`` asks for SCHED_FIFO + mlockall (the sampler
    carries on without them when not permitted).  Without ``duration_s`` it runs until SIGTERM/SIGINT.
    """
    if period_ms <= 0:
        raise ValueError(f"period_ms must be positive, got {period_ms}")
    if not targets:
        raise ValueError("no sampler targets")
    argv = [str(binary), "--period-ms", str(period_ms), "--out", str(out)]
    if duration_s is not None:
        if duration_s <= 0:
            raise ValueError(f"duration_s must be positive, got {duration_s}")
        argv += ["--duration", repr(float(duration_s))]
    if rt:
        argv.append("--rt")
    for ns, ifnames in targets.items():
        if not ns or _NAME_BAD.search(ns) or ns == "..":
            raise ValueError(f"bad namespace name {ns!r}")
        if not ifnames:
            raise ValueError(f"no interfaces listed for namespace {ns!r}")
        for ifname in ifnames:
            if not ifname or len(ifname) >= IFNAMSIZ or _NAME_BAD.search(ifname) or ":" in ifname or "," in ifname:
                raise ValueError(f"bad interface name {ifname!r} in namespace {ns!r}")
        if len(set(ifnames)) != len(ifnames):
            raise ValueError(f"interface listed twice in namespace {ns!r}: {ifnames}")
        argv.append(f"{ns}:{','.join(ifnames)}")
    return argv


@dataclass(frozen=True)
class Series:
    """The samples of one interface, in file (= time) order.

    ``t_ns``/``late_ns`` are int64 (CLOCK_REALTIME ns; round wake-up lateness ns), the four
    counters uint64 (the kernel's 64-bit link statistics; they may restart from 0 if the interface
    was deleted and re-created)."""

    netns: str
    ifname: str
    t_ns: np.ndarray
    late_ns: np.ndarray
    rx_packets: np.ndarray
    rx_bytes: np.ndarray
    tx_packets: np.ndarray
    tx_bytes: np.ndarray

    def __len__(self) -> int:
        return len(self.t_ns)

    def rate(self, counter: str) -> tuple[np.ndarray, np.ndarray]:
        """Per-interval rate of ``counter`` (e.g. ``"rx_packets"``) in units per second:
        (interval midpoints in ns, rates as float64).  Counter decreases give NaN."""
        c = getattr(self, counter).astype(np.int64)
        dt = np.diff(self.t_ns)
        dc = np.diff(c).astype(np.float64)
        dc[dc < 0] = np.nan
        with np.errstate(divide="ignore", invalid="ignore"):
            r = dc / (dt.astype(np.float64) / 1e9)
        return self.t_ns[:-1] + dt // 2, r


@dataclass(frozen=True)
class Counters:
    """A loaded ``counters.tsv``: per (netns, ifname) series, the header's period, and the
    key=value pairs of the sampler's trailing ``#`` line (``cpu_user_s``, ``rounds``, ...)."""

    period_ns: int
    by_key: dict[tuple[str, str], Series]
    footer: dict[str, str] = field(default_factory=dict)
    truncated: bool = False  # the file ended mid-line (sampler killed): the partial line was dropped

    @property
    def period_ms(self) -> float:
        """Sampling period in milliseconds."""
        return self.period_ns / 1e6

    def series(self, netns: str, ifname: str) -> Series:
        """Samples of one interface; KeyError names what the file does hold."""
        try:
            return self.by_key[(netns, ifname)]
        except KeyError:
            have = ", ".join(f"{n}:{i}" for n, i in self.by_key) or "nothing"
            raise KeyError(f"no samples for {netns}:{ifname} (file has {have})") from None

    def keys(self) -> list[tuple[str, str]]:
        """(netns, ifname) pairs in order of first appearance."""
        return list(self.by_key)

    def __iter__(self) -> Iterator[Series]:
        return iter(self.by_key.values())

    def __contains__(self, key: object) -> bool:
        return key in self.by_key

    def __len__(self) -> int:
        return len(self.by_key)

    def rounds(self) -> tuple[np.ndarray, np.ndarray]:
        """(t_ns, late_ns) of every sampling round, one entry per round: the earliest line of the
        round (lines less than half a period apart belong to the same round)."""
        if not self.by_key:
            return np.empty(0, np.int64), np.empty(0, np.int64)
        t = np.concatenate([s.t_ns for s in self.by_key.values()])
        late = np.concatenate([s.late_ns for s in self.by_key.values()])
        # t_ns of different namespaces of one round differ by microseconds; a round is the set of
        # lines within half a period of the round's first line
        order = np.argsort(t, kind="stable")
        t, late = t[order], late[order]
        start = np.ones(len(t), bool)
        start[1:] = np.diff(t) > self.period_ns // 2
        return t[start], late[start]

    def footer_number(self, key: str) -> float | None:
        """A numeric footer value (``cpu_user_s``, ``max_late_ns``...), None when absent."""
        v = self.footer.get(key)
        try:
            return float(v) if v is not None else None
        except ValueError:
            return None


def _read_bytes(path: Path) -> bytes:
    data = path.read_bytes()
    return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data


def parse_footer(lines: list[bytes]) -> dict[str, str]:
    """The ``key=value`` pairs of vrsampler's comment lines (its closing summary line)."""
    out: dict[str, str] = {}
    for line in lines:
        for tok in line.lstrip(b"#").split():
            k, sep, v = tok.partition(b"=")
            if sep:
                out[k.decode("ascii", "replace")] = v.decode("ascii", "replace")
    return out


def _factorize(names: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(codes, first index per code) of rows of a 2-D fixed-width bytes array, codes in order of
    first appearance.  Hashes the rows as uint64 words (vectorised), then verifies the hash."""
    n = len(names)
    words = np.ascontiguousarray(names).view(np.uint64).reshape(n, -1)
    mult = np.arange(1, words.shape[1] + 1, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15) | np.uint64(1)
    with np.errstate(over="ignore"):
        h = (words * mult).sum(axis=1, dtype=np.uint64)
        h ^= h >> np.uint64(29)
    _, first, inv = np.unique(h, return_index=True, return_inverse=True)
    inv = inv.reshape(-1)
    if not (words == words[first[inv]]).all():  # hash collision: exact (slower) path
        seen: dict[bytes, int] = {}
        codes = np.fromiter((seen.setdefault(r.tobytes(), len(seen)) for r in words), np.int64, n)
        firsts = np.zeros(len(seen), np.int64)
        firsts[codes[::-1]] = np.arange(n - 1, -1, -1)
        return codes, firsts
    # renumber by first appearance
    order = np.argsort(first, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    return rank[inv], first[order]


def load_counters(path: Path | str, *, strict: bool = True) -> Counters:
    """Load a vrsampler ``counters.tsv`` (or gzip'd, detected by content) into per-interface
    numpy arrays: the only parser of this format in the project.

    Validates the header (format version 1, CLOCK_REALTIME) and the column line (which may carry
    a leading ``#``); skips ``#`` lines anywhere; drops a final partial line (file of a killed
    sampler).  About 1 s per million lines (numpy's C text parser).  A malformed sample line
    raises ValueError, or with ``strict=False`` is skipped (the analysis reads what a killed or
    disturbed instrument left and never invents data).
    """
    path = Path(path)
    data = _read_bytes(path)
    truncated = bool(data) and not data.endswith(b"\n")
    if truncated:
        data = data[: data.rfind(b"\n") + 1]
    nl1 = data.find(b"\n")
    header = data[:nl1] if nl1 >= 0 else data
    m = HEADER_RE.match(header)
    if not m:
        raise ValueError(f"{path}: not a vrsampler counters file (header {header[:80]!r})")
    version, clock, period_ns = int(m.group(1)), m.group(2).decode(), int(m.group(3))
    if version != FORMAT_VERSION or clock != "CLOCK_REALTIME":
        raise ValueError(f"{path}: unsupported format version {version} / clock {clock}")
    nl2 = data.find(b"\n", nl1 + 1)
    cols = tuple(data[nl1 + 1 : nl2 if nl2 >= 0 else len(data)].decode("ascii", "replace").lstrip("#").split())
    if cols != COLUMNS:
        raise ValueError(f"{path}: unexpected column line {cols} (want {COLUMNS})")
    body = data[nl2 + 1 :] if nl2 >= 0 else b""

    # '#' lines (the sampler's trailing summary, possibly others): collect key=value pairs
    footer = parse_footer(_comment_lines(body))
    if not _has_data(body):
        return Counters(period_ns, {}, footer, truncated)

    ns_w = 32  # widened (and the file re-parsed) if a namespace name fills it
    while True:
        dt = np.dtype(
            [("t_ns", "<i8"), ("late_ns", "<i8"), ("netns", f"S{ns_w}"), ("ifname", f"S{IFNAMSIZ}"),
             ("rx_packets", "<u8"), ("rx_bytes", "<u8"), ("tx_packets", "<u8"), ("tx_bytes", "<u8")]
        )  # fmt: skip
        try:
            a = np.loadtxt(io.BytesIO(body), dtype=dt, comments="#", encoding="latin-1", ndmin=1)
        except ValueError as e:
            if strict:
                raise ValueError(f"{path}: malformed sample line: {e}") from None
            a = _parse_lines(body, dt)
        if len(a) == 0 or np.char.str_len(a["netns"]).max() < ns_w:
            break
        if ns_w >= 1024:
            raise ValueError(f"{path}: namespace name longer than {ns_w} bytes")
        ns_w *= 4
    if len(a) == 0:
        return Counters(period_ns, {}, footer, truncated)

    # netns and ifname are adjacent in the record: factorize them as one fixed-width byte string
    off = dt.fields["netns"][1]
    names = a.view(np.uint8).reshape(len(a), dt.itemsize)[:, off : off + ns_w + IFNAMSIZ]
    codes, first = _factorize(names)
    order = np.argsort(codes, kind="stable")
    bounds = np.searchsorted(codes[order], np.arange(len(first) + 1))
    numeric = [c for c in COLUMNS if c not in ("netns", "ifname")]
    cols = {c: a[c][order] for c in numeric}
    by_key: dict[tuple[str, str], Series] = {}
    for k, i0 in enumerate(first):
        sl = slice(bounds[k], bounds[k + 1])
        netns = a["netns"][i0].decode("latin-1")
        ifname = a["ifname"][i0].decode("latin-1")
        by_key[(netns, ifname)] = Series(netns, ifname, *(cols[c][sl] for c in numeric))
    return Counters(period_ns, by_key, footer, truncated)


def _parse_lines(body: bytes, dt: np.dtype) -> np.ndarray:
    """The well-formed sample lines of ``body``, one by one (the slow path, after numpy's parser
    refused the block): lines with the wrong number of fields or non-numeric counters are left out."""
    rows = []
    for line in body.split(b"\n"):
        fields = line.split()
        if not fields or fields[0].startswith(b"#") or len(fields) != len(dt.names):
            continue
        try:
            rows.append(tuple(int(f) if dt[i].kind in "iu" else f for i, f in enumerate(fields)))
        except ValueError:
            continue
    try:
        return np.array(rows, dtype=dt)
    except (ValueError, OverflowError):
        return np.array([r for r in rows if _fits(r, dt)], dtype=dt)


def _fits(row: tuple, dt: np.dtype) -> bool:
    try:
        np.array([row], dtype=dt)
    except (ValueError, OverflowError):
        return False
    return True


def _comment_lines(body: bytes) -> list[bytes]:
    """Lines of ``body`` that start with '#' (rare: found with find(), not by splitting)."""
    out = []
    pos = 0 if body.startswith(b"#") else body.find(b"\n#")
    while pos >= 0:
        start = pos if body[pos : pos + 1] == b"#" else pos + 1
        end = body.find(b"\n", start)
        out.append(body[start : end if end >= 0 else len(body)])
        pos = body.find(b"\n#", start) if end >= 0 else -1
    return out


def _has_data(body: bytes) -> bool:
    """True if ``body`` holds at least one non-blank, non-comment line."""
    pos = 0
    while pos < len(body):
        end = body.find(b"\n", pos)
        end = len(body) if end < 0 else end
        line = body[pos:end].strip()
        if line and not line.startswith(b"#"):
            return True
        pos = end + 1
    return False
