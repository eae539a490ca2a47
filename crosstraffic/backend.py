"""Traffic backends: how to run a generator/sink pair and how to read what they report.

A :class:`Backend` only *builds* argv lists and *parses* output; the orchestrator runs the argv
itself (wrapped in ``ip netns exec NS ...``), so no backend ever starts a process.  Results are
frozen dataclasses in the README's conventions: CLOCK_REALTIME integer ns, rates in Ethernet-frame
bits (``frame_bytes * 8`` per packet, frame = 14 B header + L3 packet + 4 B FCS).

    from crosstraffic import SinkRequest, get_backend
    b = get_backend("builtin")
    argv = b.sink_argv(SinkRequest(port=9000, bind="198.18.2.10", gap_us=1000))
    ...
    result = b.parse_sink(stdout_text)
"""

from __future__ import annotations

import importlib
import ipaddress
import json
import math
import signal
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

ETH_OVERHEAD = 18  # 14 B Ethernet header + 4 B FCS
UDP_OVERHEAD = {4: ETH_OVERHEAD + 20 + 8, 6: ETH_OVERHEAD + 40 + 8}  # 46, 66
FRAME_MIN = 64
FRAME_MAX = 1518
RATE_CONVENTION = (
    "ethernet-frame bits: frame_bytes*8 per packet, frame includes 14 B header and 4 B FCS, "
    "excludes preamble and inter-frame gap"
)


class TrafficError(ValueError):
    """Invalid traffic parameters, unknown backend, or unusable tool output (one-line message)."""


class NotImplementedBackendError(TrafficError):
    """The backend is registered (so its capabilities can be listed) but not implemented yet."""


# ---------------------------------------------------------------------------------------------
# results


@dataclass(frozen=True)
class Capabilities:
    """What a backend can measure; the analysis uses this to decide which metrics exist."""

    loss: bool
    reordering: bool
    duplicates: bool
    gaps: bool  # every inter-arrival gap above a threshold, with timestamps
    hist_ms: bool  # per-millisecond arrival histogram
    owd: bool  # one-way delay statistics
    packet_log: bool  # per-packet (seq, t_ns) log file
    kernel_timestamps: bool
    ipv6: bool
    unpaced: bool  # rate 0 = as fast as possible
    payload_header_bytes: int  # bytes of the payload the tool needs for its own header
    notes: str = ""
    flows_and_sizes: bool = False  # GenRequest.flows > 1 and GenRequest.sizes (a frame-size mix)

    def min_frame(self, family: int) -> int:
        """Smallest Ethernet frame that carries the tool's payload header."""
        return max(FRAME_MIN, frame_for_payload(self.payload_header_bytes, family))


@dataclass(frozen=True)
class Gap:
    """An inter-arrival gap at the sink: no packet arrived between the two timestamps."""

    t_before_ns: int
    t_after_ns: int
    seq_before: int
    seq_after: int

    @property
    def duration_ns(self) -> int:
        """Length of the silence."""
        return self.t_after_ns - self.t_before_ns

    @property
    def missing(self) -> int:
        """Sequence numbers skipped across the gap (0 if the gap lost nothing)."""
        return max(0, self.seq_after - self.seq_before - 1)


@dataclass(frozen=True)
class OwdStats:
    """One-way delay in ns (sender and sink share the host clock)."""

    min: int
    median: int
    max: int
    p99: int | None = None


def frozen_mapping(d: Mapping[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType(dict(d))


@dataclass(frozen=True)
class GenResult:
    """What the generator reports (gen.json for the builtin backend)."""

    tool: str
    family: int
    dst: str
    port: int
    frame_bytes: int
    payload_bytes: int
    requested_bps: int  # Ethernet-frame bits/s; 0 = unpaced
    duration_s: float
    start_ns: int
    end_ns: int
    packets: int
    send_errors: int | None
    achieved_pps: float
    achieved_bps: float  # Ethernet-frame bits/s
    stopped_by: str | None = None  # "duration" | "signal" | None (unknown)
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False, hash=False)

    @property
    def rate_error(self) -> float | None:
        """Relative error of the achieved rate (0.01 = 1 % too fast); None when unpaced."""
        if self.requested_bps <= 0:
            return None
        return self.achieved_bps / self.requested_bps - 1.0


@dataclass(frozen=True)
class SinkResult:
    """What the sink reports (sink.json for the builtin backend); None = not measured by this tool."""

    tool: str
    timestamps: str  # "kernel" | "user" | "none"
    packets: int  # unique packets received
    bytes: int  # UDP payload bytes of those packets
    frame_bytes: int
    lost: int
    reordered: int | None
    duplicates: int | None
    first_seq: int | None
    last_seq: int | None
    first_ns: int | None
    last_ns: int | None
    gap_threshold_ns: int | None = None
    gaps: tuple[Gap, ...] | None = None
    hist_start_ms: int | None = None
    hist_ms: tuple[int, ...] | None = None
    owd_ns: OwdStats | None = None
    socket_drops: int | None = None
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False, hash=False)

    @property
    def expected(self) -> int:
        """Packets the sink should have seen (received + lost)."""
        return self.packets + self.lost

    @property
    def loss_ratio(self) -> float:
        """Lost / expected (0.0 when nothing was expected)."""
        return self.lost / self.expected if self.expected else 0.0

    @property
    def max_gap(self) -> Gap | None:
        """The longest recorded gap (None if the tool records none or there was none)."""
        return max(self.gaps, key=lambda g: g.duration_ns) if self.gaps else None


@dataclass(frozen=True, kw_only=True)
class GenRequest:
    """What one generator is to send: the argument of :meth:`Backend.gen_argv`.

    A constant ``rate_bps`` (Ethernet-frame bits/s, 0 = unpaced) of ``frame_bytes`` frames to
    ``dst``:``port`` for ``duration_s`` (0 = until stopped), optionally pinned to ``cpu``.
    :meth:`Backend.validate_gen` checks it against a backend; backends whose tool does not report
    these parameters keep the request of their ``gen_argv`` call for ``parse_gen``.
    """

    dst: str
    port: int
    rate_bps: int
    frame_bytes: int
    duration_s: float
    cpu: int | None = None
    #: UDP flows (distinct source ports) the packets are spread over
    flows: int = 1
    #: consecutive sequence numbers per flow (None: the tool's default); 1 spreads the flows evenly
    flow_run: int | None = None
    #: (frame bytes, weight) pairs: a frame-size mix instead of ``frame_bytes`` (its smallest)
    sizes: tuple[tuple[int, int], ...] | None = None

    @property
    def family(self) -> int:
        """4 or 6: the address family of ``dst``."""
        return family_of(self.dst)


@dataclass(frozen=True, kw_only=True)
class SinkRequest:
    """What one sink is to receive: the argument of :meth:`Backend.sink_argv`.

    UDP on ``bind`` (or the wildcard address of ``family``, default 4) : ``port``; ``gap_us``:
    the inter-arrival gap the sink records; ``duration_s``: stop after that long (None or 0 =
    until stopped); ``log``: per-packet log file; ``cpu``: CPU to pin the sink to.  Each backend
    rejects (TrafficError) what its tool cannot do and ignores what does not apply to it.
    """

    port: int
    bind: str | None = None
    family: int | None = None
    gap_us: int = 1000
    duration_s: float | None = None
    log: str | Path | None = None
    cpu: int | None = None


def recorded_request(request: GenRequest | None, tool: str) -> GenRequest:
    """``request`` (what ``gen_argv`` recorded); TrafficError when ``gen_argv`` was not called yet."""
    if request is None:
        raise TrafficError(f"{tool}: parse_gen needs the request of this instance's gen_argv() call")
    return request


def span_gen_result(
    *,
    tool: str,
    family: int,
    dst: str,
    port: int,
    frame_bytes: int,
    payload_bytes: int,
    requested_bps: int,
    duration_s: float,
    start_ns: int,
    packets: int,
    span_s: float,
    stopped_by: str | None,
    raw: Mapping[str, Any],
) -> GenResult:
    """GenResult of a tool that reports its packet count and send span but no send errors.

    ``end_ns`` is ``start_ns`` plus the span; the achieved rates are packets over the span (0 for
    an empty span) in Ethernet-frame bits of ``frame_bytes``.
    """
    pps = packets / span_s if span_s > 0 else 0.0
    return GenResult(
        tool=tool,
        family=family,
        dst=dst,
        port=port,
        frame_bytes=frame_bytes,
        payload_bytes=payload_bytes,
        requested_bps=requested_bps,
        duration_s=duration_s,
        start_ns=start_ns,
        end_ns=start_ns + round(span_s * 1e9),
        packets=packets,
        send_errors=None,
        achieved_pps=pps,
        achieved_bps=pps * frame_bytes * 8,
        stopped_by=stopped_by,
        raw=frozen_mapping(raw),
    )


def count_capabilities(
    *, reordering: bool, ipv6: bool, unpaced: bool, payload_header_bytes: int, notes: str
) -> Capabilities:
    """Capabilities of a tool pair that reports counts only: loss, and ``reordering`` if it counts it."""
    return Capabilities(
        loss=True,
        reordering=reordering,
        duplicates=False,
        gaps=False,
        hist_ms=False,
        owd=False,
        packet_log=False,
        kernel_timestamps=False,
        ipv6=ipv6,
        unpaced=unpaced,
        payload_header_bytes=payload_header_bytes,
        notes=notes,
    )


def count_sink_result(
    *,
    tool: str,
    timestamps: str,
    packets: int,
    bytes: int,
    frame_bytes: int,
    lost: int,
    reordered: int | None,
    raw: Mapping[str, Any],
) -> SinkResult:
    """SinkResult of a tool that reports counts only: no duplicates, sequence range or arrival times."""
    return SinkResult(
        tool=tool,
        timestamps=timestamps,
        packets=packets,
        bytes=bytes,
        frame_bytes=frame_bytes,
        lost=lost,
        reordered=reordered,
        duplicates=None,
        first_seq=None,
        last_seq=None,
        first_ns=None,
        last_ns=None,
        raw=frozen_mapping(raw),
    )


# ---------------------------------------------------------------------------------------------
# validation helpers


def family_of(addr: str) -> int:
    """4 or 6 for a numeric address; TrafficError otherwise."""
    try:
        return ipaddress.ip_address(addr.split("%", 1)[0]).version
    except ValueError:
        raise TrafficError(f"{addr!r} is not a numeric IPv4 or IPv6 address") from None


def payload_bytes(frame_bytes: int, family: int) -> int:
    """UDP payload carried by an Ethernet frame of ``frame_bytes``."""
    return frame_bytes - UDP_OVERHEAD[family]


def frame_for_payload(payload: int, family: int) -> int:
    """Ethernet frame bytes that carry a UDP payload of ``payload`` bytes (inverse of :func:`payload_bytes`)."""
    return payload + UDP_OVERHEAD[family]


def short_decimal(x: float, places: int) -> str:
    """``x`` rounded to ``places`` decimals without trailing zeros or exponent ("0" for zero)."""
    return f"{x:.{places}f}".rstrip("0").rstrip(".") or "0"


def check_cpu(cpu: int) -> int:
    """``cpu`` if it is a CPU number (an int >= 0, not a bool), else TrafficError."""
    if isinstance(cpu, bool) or not isinstance(cpu, int) or cpu < 0:
        raise TrafficError(f"cpu={cpu!r} must be a CPU number >= 0")
    return cpu


def _int(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TrafficError(f"{what}={value!r} must be an integer")
    return value


def require(d: Mapping[str, Any], key: str, kind: type | tuple[type, ...], tool: str) -> Any:
    """``d[key]`` checked against ``kind`` (bool is never accepted as a number)."""
    if key not in d:
        raise TrafficError(f"{tool}: output lacks {key!r}")
    v = d[key]
    if isinstance(v, bool) and bool not in (kind if isinstance(kind, tuple) else (kind,)):
        raise TrafficError(f"{tool}: {key!r} is {v!r}, not a {kind}")
    if not isinstance(v, kind):
        raise TrafficError(f"{tool}: {key!r} is {v!r}, not a {kind}")
    return v


def load_json(stdout: str, tool: str) -> dict[str, Any]:
    """Parse one JSON object from a tool's stdout with a one-line error."""
    text = stdout.strip()
    if not text:
        raise TrafficError(f"{tool}: empty output (did it start? see its stderr)")
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        raise TrafficError(f"{tool}: output is not JSON ({e.msg} at line {e.lineno} column {e.colno})") from None
    if not isinstance(obj, dict):
        raise TrafficError(f"{tool}: output is not a JSON object")
    return obj


# ---------------------------------------------------------------------------------------------
# backend interface


class Backend(ABC):
    """One traffic tool pair.  Subclasses set ``name``, ``capabilities`` and ``executables``."""

    name: str = ""
    capabilities: Capabilities
    implemented: bool = True

    @abstractmethod
    def executables(self) -> dict[str, str]:
        """Role ("gen", "sink") -> executable path or name looked up on PATH."""

    def missing(self) -> list[str]:
        """Executables that are not installed/built (checked on disk, nothing is run)."""
        import shutil

        out = []
        for exe in self.executables().values():
            found = Path(exe).is_file() if "/" in exe else shutil.which(exe) is not None
            if not found:
                out.append(exe)
        return out

    # -- parameter checks shared by all backends --

    def validate_gen(self, req: GenRequest) -> int:
        """Check a generator request against this backend; returns the address family."""
        fam = family_of(req.dst)
        self.validate_port(req.port)
        rate = _int(req.rate_bps, "rate_bps")
        if rate < 0:
            raise TrafficError(f"rate_bps={rate} must be > 0, or 0 for unpaced maximum")
        if rate == 0 and not self.capabilities.unpaced:
            raise TrafficError(f"{self.name}: rate_bps=0 (unpaced) is not supported by this backend")
        frame = _int(req.frame_bytes, "frame_bytes")
        if not FRAME_MIN <= frame <= FRAME_MAX:
            raise TrafficError(f"frame_bytes={frame} is outside {FRAME_MIN}..{FRAME_MAX} (Ethernet frame incl. FCS)")
        if fam == 6 and not self.capabilities.ipv6:
            raise TrafficError(f"{self.name}: IPv6 is not supported by this backend")
        need = self.capabilities.min_frame(fam)
        if frame < need:
            raise TrafficError(
                f"frame_bytes={frame} is too small for IPv{fam} with {self.name}: the UDP payload would be "
                f"{payload_bytes(frame, fam)} B but needs {self.capabilities.payload_header_bytes} B (minimum {need})"
            )
        self.validate_duration(req.duration_s)
        if (req.flows != 1 or req.sizes is not None) and not self.capabilities.flows_and_sizes:
            raise TrafficError(f"{self.name}: several flows or a frame-size mix are not supported by this backend")
        if req.sizes is not None:
            small = [size for size, _ in req.sizes if not need <= size <= FRAME_MAX]
            if small or not req.sizes or min(w for _, w in req.sizes) < 1:
                raise TrafficError(f"sizes={req.sizes}: each frame {need}..{FRAME_MAX} B with a weight of at least 1")
            if frame != min(size for size, _ in req.sizes):
                raise TrafficError(f"frame_bytes={frame} must be the smallest of sizes={req.sizes}")
        return fam

    def validate_sink(self, req: SinkRequest, *, gap_us: bool = False) -> int:
        """Check the sink parameters all backends share (port, address family, duration); returns the family.

        ``gap_us``: also check the gap threshold (for sinks that record gaps), after the family.
        """
        self.validate_port(req.port)
        fam = self.sink_family(req.bind, req.family)
        if gap_us and (isinstance(req.gap_us, bool) or not isinstance(req.gap_us, int) or req.gap_us < 1):
            raise TrafficError(f"gap_us={req.gap_us!r} must be an integer >= 1")
        self.validate_duration(req.duration_s)
        return fam

    @staticmethod
    def sink_family(bind: str | None, family: int | None) -> int:
        """Address family of a sink: from ``bind`` if given (must agree with ``family``), else ``family`` or 4."""
        if family is not None and family not in (4, 6):
            raise TrafficError(f"family={family!r} must be 4 or 6")
        if bind is None:
            return family or 4
        fam = family_of(bind)
        if family is not None and family != fam:
            raise TrafficError(f"bind={bind!r} is an IPv{fam} address but family={family}")
        return fam

    @staticmethod
    def validate_port(port: int) -> None:
        """UDP port 1..65535."""
        if not 1 <= _int(port, "port") <= 65535:
            raise TrafficError(f"port={port} is outside 1..65535")

    @staticmethod
    def validate_duration(duration_s: float | None) -> None:
        """Finite, >= 0 (0 = until stopped by a signal)."""
        if duration_s is None:
            return
        if isinstance(duration_s, bool) or not isinstance(duration_s, int | float) or not math.isfinite(duration_s):
            raise TrafficError(f"duration_s={duration_s!r} must be a finite number of seconds")
        if duration_s < 0:
            raise TrafficError(f"duration_s={duration_s} must be >= 0 (0 = until stopped)")

    # -- the interface --

    @abstractmethod
    def sink_argv(self, req: SinkRequest) -> list[str]:
        """argv of the sink (receiver) that ``req`` describes."""

    @abstractmethod
    def gen_argv(self, req: GenRequest) -> list[str]:
        """argv of the generator that ``req`` describes."""

    @abstractmethod
    def parse_sink(self, stdout: str) -> SinkResult:
        """Parse the sink's stdout."""

    @abstractmethod
    def parse_gen(self, stdout: str) -> GenResult:
        """Parse the generator's stdout."""

    def sink_readiness(self, port: int) -> tuple[str, str | int]:
        """How the orchestrator observes that the sink is ready.

        ``("stderr-line", "READY")``: the sink prints that line on stderr once bound;
        ``("tcp-listen", port)``: the sink's namespace has a TCP listener on ``port``.
        """
        return ("stderr-line", "READY")

    # -- optional hooks (defaults fit tools that print their results on stdout) --

    #: signal that makes the sink stop and report (the generator stops by itself after its duration)
    sink_stop_signal: int = signal.SIGTERM
    #: the sink exits by itself once the generator is done (iperf3 -s -1): wait instead of signalling
    sink_stops_itself: bool = False

    def gen_exit_ok(self, returncode: int) -> bool:
        """Whether the generator's exit status means it finished normally."""
        return returncode == 0

    def sink_decode_argv(self) -> list[str] | None:
        """argv to run after the sink exited; its stdout (not the sink's) goes to :meth:`parse_sink`.

        None (default): parse the sink's own stdout.  Tools that write a binary log (D-ITG) return
        their decoder here; it only reads files, so it can run in any namespace.
        """
        return None

    def gen_decode_argv(self) -> list[str] | None:
        """Like :meth:`sink_decode_argv`, for the generator."""
        return None


# ---------------------------------------------------------------------------------------------
# registry (backends are imported only when asked for)

_REGISTRY: dict[str, str] = {
    "builtin": "crosstraffic.backends.builtin:BuiltinBackend",
    "iperf3": "crosstraffic.backends.iperf3:Iperf3Backend",
    "ditg": "crosstraffic.backends.ditg:DitgBackend",
    "trafgen": "crosstraffic.backends.trafgen:TrafgenBackend",
}
DEFAULT_BACKEND = "builtin"


def backend_names(implemented_only: bool = False) -> tuple[str, ...]:
    """Registered backend names (``implemented_only``: those that can run)."""
    if not implemented_only:
        return tuple(_REGISTRY)
    return tuple(n for n in _REGISTRY if backend_class(n).implemented)


def backend_class(name: str) -> type[Backend]:
    """The backend class for ``name`` (imports its module)."""
    try:
        target = _REGISTRY[name]
    except (KeyError, TypeError):
        raise TrafficError(f"unknown traffic backend {name!r}: choose one of {', '.join(_REGISTRY)}") from None
    module, _, cls = target.partition(":")
    return getattr(importlib.import_module(module), cls)


def get_backend(name: str = DEFAULT_BACKEND, **kwargs: Any) -> Backend:
    """An instance of backend ``name``; raises TrafficError if unknown or not implemented yet."""
    cls = backend_class(name)
    if not cls.implemented:
        raise NotImplementedBackendError(cls.not_implemented_message())  # type: ignore[attr-defined]
    return cls(**kwargs)
