"""The default backend: ``crosstraffic/bin/vrgen`` and ``crosstraffic/bin/vrsink`` (C, this directory).

Formats: gen.json / sink.json as fixed in docs/data-formats.md; everything listed there is required,
extra fields are kept in ``raw``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeAlias

from crosstraffic.backend import (
    Backend,
    Capabilities,
    Gap,
    GenRequest,
    GenResult,
    OwdStats,
    SinkRequest,
    SinkResult,
    TrafficError,
    check_cpu,
    frozen_mapping,
    load_json,
    require,
    short_decimal,
)

BIN_DIR = Path(__file__).resolve().parents[1] / "bin"
VERSION = 1
PAYLOAD_HEADER_BYTES = 16  # u64 seq + i64 CLOCK_REALTIME send ns

#: a member that may be an integer or a decimal number; read as float
NUMBER = (int, float)
#: (member, the type(s) it must have) pairs
Fields: TypeAlias = tuple[tuple[str, type | tuple[type, ...]], ...]
#: the members of gen.json that GenResult takes as they are (or as float), in the order they are checked
GEN_FIELDS: Fields = (
    ("family", int),
    ("dst", str),
    ("port", int),
    ("frame_bytes", int),
    ("payload_bytes", int),
    ("requested_bps", int),
    ("duration_s", NUMBER),
    ("start_ns", int),
    ("end_ns", int),
    ("packets", int),
    ("send_errors", int),
    ("achieved_pps", NUMBER),
    ("achieved_bps", NUMBER),
)
#: likewise for sink.json and SinkResult (gaps, hist_ms and owd_ns are read on their own)
SINK_FIELDS: Fields = (
    ("timestamps", str),
    ("packets", int),
    ("bytes", int),
    ("frame_bytes", int),
    ("lost", int),
    ("reordered", int),
    ("duplicates", int),
    ("first_seq", int),
    ("last_seq", int),
    ("first_ns", int),
    ("last_ns", int),
    ("gap_threshold_ns", int),
    ("hist_start_ms", int),
)
#: the members of sink.json's owd_ns object that OwdStats requires
OWD_FIELDS: Fields = (("min", int), ("median", int), ("max", int))


class BuiltinBackend(Backend):
    """vrgen / vrsink."""

    name = "builtin"
    capabilities = Capabilities(
        loss=True,
        reordering=True,
        duplicates=True,
        gaps=True,
        hist_ms=True,
        owd=True,
        packet_log=True,
        kernel_timestamps=True,
        ipv6=True,
        unpaced=True,
        payload_header_bytes=PAYLOAD_HEADER_BYTES,
        notes="sendmmsg generator paced on CLOCK_MONOTONIC absolute time; recvmmsg sink with SO_TIMESTAMPNS",
        flows_and_sizes=True,
    )

    def __init__(
        self, bin_dir: str | Path | None = None, packet_dev: str | None = None, dst_mac: str | None = None
    ) -> None:
        """``packet_dev`` + ``dst_mac``: vrgen ``--packet`` mode (whole frames through an AF_PACKET
        socket on that interface to that next-hop MAC; see the README); default: a UDP socket."""
        self.bin_dir = Path(bin_dir) if bin_dir is not None else BIN_DIR
        if (packet_dev is None) != (dst_mac is None):
            raise TrafficError("packet_dev and dst_mac go together (vrgen --packet IFNAME --dst-mac MAC)")
        if dst_mac is not None:
            check_mac(dst_mac)
        self.packet_dev, self.dst_mac = packet_dev, dst_mac

    def executables(self) -> dict[str, str]:
        """Paths of vrgen and vrsink."""
        return {"gen": str(self.bin_dir / "vrgen"), "sink": str(self.bin_dir / "vrsink")}

    def sink_argv(
        self,
        req: SinkRequest,
        *,
        state: str | Path | None = None,
        state_ms: int | None = None,
        after_file: str | Path | None = None,
    ) -> list[str]:
        """vrsink --port N [--bind ADDR | -6] --gap-us N [--duration S] [--log FILE] [--cpu N]
        [--state FILE [--state-ms N]] [--after-file FILE] (the live state and the after-threshold
        file of docs/data-formats.md)."""
        fam = self.validate_sink(req, gap_us=True)
        argv = [self.executables()["sink"], "--port", str(req.port)]
        if req.bind is not None:
            argv += ["--bind", req.bind]
        elif fam == 6:
            argv.append("-6")
        argv += ["--gap-us", str(req.gap_us)]
        if req.duration_s:
            argv += ["--duration", short_decimal(req.duration_s, 6)]
        if req.log is not None:
            argv += ["--log", str(req.log)]
        if req.cpu is not None:
            argv += ["--cpu", str(check_cpu(req.cpu))]
        if state is not None:
            argv += ["--state", str(state)]
            if state_ms is not None:
                argv += ["--state-ms", str(state_ms)]
        if after_file is not None:
            argv += ["--after-file", str(after_file)]
        return argv

    def gen_argv(self, req: GenRequest) -> list[str]:
        """vrgen --dst ADDR --port N --rate BPS (--frame BYTES | --sizes S:W,...) --duration S [--flows M]
        [--cpu N] [--packet DEV --dst-mac MAC]."""
        self.validate_gen(req)
        frame = ["--frame", str(req.frame_bytes)]
        if req.sizes is not None:
            frame = ["--sizes", ",".join(f"{size}:{w}" for size, w in req.sizes)]
        argv = [self.executables()["gen"], "--dst", req.dst, "--port", str(req.port), "--rate", str(req.rate_bps),
                *frame, "--duration", short_decimal(req.duration_s, 6)]  # fmt: skip
        if req.flows != 1:
            argv += ["--flows", str(req.flows)]
            if req.flow_run is not None:
                argv += ["--flow-run", str(req.flow_run)]
        if req.cpu is not None:
            argv += ["--cpu", str(check_cpu(req.cpu))]
        if self.packet_dev is not None and self.dst_mac is not None:
            argv += ["--packet", self.packet_dev, "--dst-mac", self.dst_mac]
        return argv

    def parse_gen(self, stdout: str) -> GenResult:
        """gen.json -> GenResult."""
        d = _checked(stdout, "vrgen")
        return GenResult(
            tool="vrgen", **_members(d, GEN_FIELDS, "vrgen"), stopped_by=d.get("stopped_by"), raw=frozen_mapping(d)
        )

    def parse_sink(self, stdout: str) -> SinkResult:
        """sink.json -> SinkResult."""
        d = _checked(stdout, "vrsink")
        gaps_raw = require(d, "gaps", list, "vrsink")
        try:
            gaps = tuple(Gap(*(int(x) for x in g)) for g in gaps_raw)
        except (TypeError, ValueError):
            raise TrafficError("vrsink: 'gaps' must hold [t_before_ns, t_after_ns, seq_before, seq_after]") from None
        hist = require(d, "hist_ms", list, "vrsink")
        if not all(isinstance(x, int) and not isinstance(x, bool) for x in hist):
            raise TrafficError("vrsink: 'hist_ms' must be a list of integers")
        owd = require(d, "owd_ns", dict, "vrsink")
        return SinkResult(
            tool="vrsink",
            **_members(d, SINK_FIELDS, "vrsink"),
            gaps=gaps,
            hist_ms=tuple(hist),
            owd_ns=OwdStats(**_members(owd, OWD_FIELDS, "vrsink owd_ns"), p99=owd.get("p99")),
            socket_drops=d.get("socket_drops"),
            raw=frozen_mapping(d),
        )


def check_mac(mac: str) -> str:
    """``mac`` if it is a colon-separated Ethernet address (aa:bb:cc:dd:ee:ff), else TrafficError."""
    parts = mac.split(":") if isinstance(mac, str) else []
    if len(parts) != 6 or not all(len(x) == 2 and all(c in "0123456789abcdefABCDEF" for c in x) for x in parts):
        raise TrafficError(f"{mac!r} is not a MAC address like 02:00:00:00:00:01")
    return mac


def _members(d: dict[str, Any], fields: Fields, tool: str) -> dict[str, Any]:
    """The members ``fields`` names, each checked with :func:`require` in turn; NUMBER ones as float."""
    out = {}
    for key, kind in fields:
        value = require(d, key, kind, tool)
        out[key] = float(value) if kind is NUMBER else value
    return out


def _checked(stdout: str, tool: str) -> dict[str, Any]:
    d = load_json(stdout, tool)
    if d.get("tool") != tool:
        raise TrafficError(f"{tool}: output is from {d.get('tool')!r}, not {tool}")
    if d.get("version") != VERSION:
        raise TrafficError(f"{tool}: output version {d.get('version')!r}, this parser reads version {VERSION}")
    if d.get("clock") != "CLOCK_REALTIME":
        raise TrafficError(f"{tool}: clock {d.get('clock')!r}, expected CLOCK_REALTIME")
    return d
