"""TRAFFIC=: the mix of traffic a run drives through the router, parsed once into a
:class:`TrafficMix`.

Grammar (docs/traffic.md)::

    TRAFFIC   = component ("+" component)*
    component = "udp" [":" M] ("," udp-option)*        the constant-bit-rate UDP of RATE= (and SIZE=)
              | "tcp" [":" N] ("," tcp-option)*        N bulk TCP flows A -> B (default 1)
              | "rr" [":" N] ("," rr-option)*          TCP request/response on N connections (default 1)
    udp-option = "dir=" ("ab" | "both")                A -> B (default), or B -> A as well at the same rate,
                                                       each direction measured on its own
               | "sizes=" ("imix" | SIZE ":" W ("/" SIZE ":" W)*)
                                                       Ethernet frame sizes with packet weights instead of
                                                       SIZE=; imix = 64:7/570:4/1518:1 (IPv4), 82:7/570:4/1518:1 (IPv6)
    tcp-option = "cc=" NAME                            congestion control (cubic, bbr, reno; the kernel's)
               | "rate=" RATE                          pacing per flow (SO_MAX_PACING_RATE), e.g. 20M
               | "dir=" ("ab" | "both")                A -> B (default), or N more flows B -> A at the
                                                       same time, each direction measured on its own
    rr-option  = "rate=" TPS                           transactions per second over all connections (required)
               | "req=" BYTES | "resp=" BYTES          request and response sizes (8-65536; 64 and 1024)

``udp:8,dir=both,sizes=imix`` sends the CBR as 8 UDP flows (distinct source ports) each way in
the simple IMIX; ``udp+tcp:4,cc=bbr`` runs the UDP CBR beside four BBR flows; ``rr,rate=200`` request/response at
200 transactions per second.  Each component appears at most once.  Every mistake is one
ConfigError line naming the component and what to give."""

from __future__ import annotations

import re
from dataclasses import dataclass

from migrate.core.errors import ConfigError
from migrate.core.units import parse_rate_bps

#: the most flows (or rr connections) one run opens: vrtcp's limit is 256, and a 2-core machine's
#: sender and receiver already share their CPU with the router at 16 flows
MAX_FLOWS = 64
#: the most UDP flows (source ports) of the CBR: vrgen's limit (its flows cost a socket each, not CPU)
MAX_UDP_FLOWS = 256
#: the simple IMIX (7:4:1 of 64, 570 and 1518 B frames); over IPv6 its 64 B frame becomes the
#: smallest that carries vrgen's 16 B header (14 Eth + 40 IPv6 + 8 UDP + 16 + 4 FCS = 82 B)
IMIX = ((64, 7), (570, 4), (1518, 1))
IMIX_V6 = ((82, 7), (570, 4), (1518, 1))
MAX_SIZE_ENTRIES = 16
MAX_SIZE_CYCLE = 4096  # vrgen's limit on the sum of the weights
#: congestion controls Linux ships; whether the sender's kernel offers one is checked on the host
CONGESTION_CONTROLS = ("cubic", "bbr", "reno", "dctcp", "htcp", "vegas", "westwood", "bic", "illinois")
RR_SIZE_RANGE = (8, 65536)
RR_TPS_RANGE = (1, 100_000)
DEFAULT_RR_REQ = 64
DEFAULT_RR_RESP = 1024
DEFAULT = "udp"
GRAMMAR = (
    "udp[:M][,dir=both][,sizes=imix], tcp[:N][,cc=NAME][,rate=R][,dir=both] or rr[:N],rate=TPS[,req=B][,resp=B], "
    "joined by +"
)

_SIZE_ENTRY = re.compile(r"^(\d+):(\d+)$")

_COMPONENT = re.compile(r"^(udp|tcp|rr)(?::(\d+))?((?:,[^,]*)*)$")


@dataclass(frozen=True)
class TcpFlows:
    """``tcp:N``: N bulk flows A -> B with one congestion control, optionally paced per flow
    (``both``: N more B -> A, the same way)."""

    flows: int
    cc: str = "cubic"
    rate_bps: int | None = None  # None: unpaced
    both: bool = False  # B -> A as well


@dataclass(frozen=True)
class RequestResponse:
    """``rr``: open-loop TCP transactions at ``tps`` per second over ``conns`` connections."""

    conns: int
    tps: int
    req_bytes: int = DEFAULT_RR_REQ
    resp_bytes: int = DEFAULT_RR_RESP


@dataclass(frozen=True)
class TrafficMix:
    """What TRAFFIC= asks for: the UDP CBR (``udp``; its flows, directions and frame sizes), bulk
    TCP flows, request/response."""

    udp: bool = True
    tcp: TcpFlows | None = None
    rr: RequestResponse | None = None
    udp_flows: int = 1
    udp_both: bool = False  # B -> A as well
    #: ``sizes=``: (frame bytes, weight) pairs; "imix" is resolved per family by :meth:`frame_sizes`
    udp_sizes: tuple[tuple[int, int], ...] | str | None = None

    def frame_sizes(self, ip: int) -> tuple[tuple[int, int], ...] | None:
        """The UDP CBR's frame sizes and weights over IPv``ip`` (None: one size, SIZE=)."""
        if self.udp_sizes == "imix":
            return IMIX_V6 if ip == 6 else IMIX
        return self.udp_sizes  # type: ignore[return-value]

    @property
    def udp_extended(self) -> bool:
        """Whether the UDP CBR is more than one flow, one way, one size (the generator's and the
        analysis' extra records)."""
        return self.udp and (self.udp_flows > 1 or self.udp_both or self.udp_sizes is not None)

    @property
    def uses_tcp(self) -> bool:
        """Whether the mix runs vrtcp (bulk flows or request/response)."""
        return self.tcp is not None or self.rr is not None


def _fail(text: str, component: str, why: str) -> ConfigError:
    """One line naming TRAFFIC= and, in a mix of several, the component at fault."""
    where = "" if component == text else f" ({component})"
    return ConfigError(f"TRAFFIC={text}{where}: {why}")


def _options(text: str, comp: str, raw: str, allowed: tuple[str, ...]) -> dict[str, str]:
    out: dict[str, str] = {}
    for opt in filter(None, raw.split(",")) if raw else ():
        key, eq, value = opt.partition("=")
        if not eq or not value:
            raise _fail(text, comp, f"option {opt!r} is not KEY=VALUE: give e.g. {allowed[0]}=...")
        if key not in allowed:
            raise _fail(text, comp, f"unknown option {key!r}: {re.split('[:,]', comp)[0]} takes {', '.join(allowed)}")
        if key in out:
            raise _fail(text, comp, f"option {key!r} is given twice")
        out[key] = value
    if raw and any(not o for o in raw.split(",")[1:]):
        raise _fail(text, comp, "an empty option (two commas): remove it")
    return out


def _int(text: str, comp: str, key: str, value: str, lo: int, hi: int) -> int:
    if not value.isdigit() or not lo <= int(value) <= hi:
        raise _fail(text, comp, f"{key}={value} must be a whole number {lo}-{hi}")
    return int(value)


def parse_traffic(text: str) -> TrafficMix:
    """TRAFFIC= as a :class:`TrafficMix`; ConfigError (one line) for anything that does not parse,
    a flow count of 0 or above :data:`MAX_FLOWS`, an unknown congestion control, ``rr`` without a
    rate, or a component given twice."""
    if not text or not text.strip():
        raise ConfigError(f"TRAFFIC is empty: give e.g. {DEFAULT}, tcp:4,cc=bbr or udp+rr,rate=100")
    mix: dict[str, object] = {}
    for comp in text.split("+"):
        m = _COMPONENT.match(comp)
        if m is None:
            raise _fail(text, comp or "(empty)", f"not a component: give {GRAMMAR}")
        kind, count, raw = m[1], m[2], m[3]
        if kind in mix:
            raise _fail(text, comp, f"{kind} is given twice: give each component once")
        if kind == "udp":
            _udp(text, comp, count, raw, mix)
            continue
        if count is not None and not 1 <= int(count) <= MAX_FLOWS:
            what = "flows" if kind == "tcp" else "connections"
            raise _fail(text, comp, f"{count} {what}: give 1-{MAX_FLOWS} (the suite's maximum)")
        n = int(count) if count is not None else 1
        if kind == "tcp":
            opts = _options(text, comp, raw, ("cc", "rate", "dir"))
            cc = opts.get("cc", "cubic")
            if cc not in CONGESTION_CONTROLS:
                raise _fail(
                    text,
                    comp,
                    f"cc={cc} is not a congestion control Linux has: give one of {', '.join(CONGESTION_CONTROLS)}",
                )
            rate = None
            if "rate" in opts:
                try:
                    rate = parse_rate_bps(opts["rate"])
                except (ValueError, ConfigError):
                    raise _fail(text, comp, f"rate={opts['rate']} is not a rate: give e.g. rate=20M") from None
                if rate <= 0:
                    raise _fail(text, comp, f"rate={opts['rate']} must be above 0 (leave it out for unpaced flows)")
            direction = opts.get("dir", "ab")
            if direction not in ("ab", "both"):
                raise _fail(text, comp, f"dir={direction}: give dir=ab (A -> B, the default) or dir=both")
            mix["tcp"] = TcpFlows(flows=n, cc=cc, rate_bps=rate, both=direction == "both")
        else:
            opts = _options(text, comp, raw, ("rate", "req", "resp"))
            if "rate" not in opts:
                raise _fail(text, comp, "rr needs a rate of transactions per second: give e.g. rr,rate=100")
            tps = _int(text, comp, "rate", opts["rate"], *RR_TPS_RANGE)
            req = _int(text, comp, "req", opts.get("req", str(DEFAULT_RR_REQ)), *RR_SIZE_RANGE)
            resp = _int(text, comp, "resp", opts.get("resp", str(DEFAULT_RR_RESP)), *RR_SIZE_RANGE)
            mix["rr"] = RequestResponse(conns=n, tps=tps, req_bytes=req, resp_bytes=resp)
    return TrafficMix(
        udp=bool(mix.get("udp")),
        tcp=mix.get("tcp"),  # type: ignore[arg-type]
        rr=mix.get("rr"),  # type: ignore[arg-type]
        udp_flows=int(mix.get("udp_flows", 1)),  # type: ignore[call-overload]
        udp_both=bool(mix.get("udp_both")),
        udp_sizes=mix.get("udp_sizes"),  # type: ignore[arg-type]
    )


def _udp(text: str, comp: str, count: str | None, raw: str, mix: dict[str, object]) -> None:
    """``udp[:M][,dir=ab|both][,sizes=...]`` into ``mix``."""
    if count is not None and not 1 <= int(count) <= MAX_UDP_FLOWS:
        raise _fail(text, comp, f"{count} flows: give 1-{MAX_UDP_FLOWS} (vrgen's maximum)")
    opts = _options(text, comp, raw, ("dir", "sizes"))
    direction = opts.get("dir", "ab")
    if direction not in ("ab", "both"):
        raise _fail(text, comp, f"dir={direction}: give dir=ab (A -> B, the default) or dir=both")
    mix.update(udp=True, udp_flows=int(count) if count is not None else 1, udp_both=direction == "both")
    if "sizes" in opts:
        mix["udp_sizes"] = parse_sizes(text, comp, opts["sizes"])


def parse_sizes(text: str, comp: str, value: str) -> tuple[tuple[int, int], ...] | str:
    """``sizes=``: "imix", or SIZE:WEIGHT entries joined by "/" (frame bytes 64-1518, whole
    weights 1-4096 summing to at most :data:`MAX_SIZE_CYCLE`, each size once)."""
    if value == "imix":
        return "imix"
    out: list[tuple[int, int]] = []
    for entry in value.split("/"):
        m = _SIZE_ENTRY.match(entry)
        if m is None:
            raise _fail(text, comp, f"sizes entry {entry!r} is not SIZE:WEIGHT: give e.g. sizes=64:7/570:4/1518:1")
        size, weight = int(m[1]), int(m[2])
        if not 64 <= size <= 1518:
            raise _fail(text, comp, f"sizes: frame size {size} is outside 64-1518 (Ethernet frame bytes incl. FCS)")
        if weight < 1:
            raise _fail(text, comp, f"sizes: weight {weight} of {size} B must be at least 1 (leave the size out)")
        if any(s == size for s, _ in out):
            raise _fail(text, comp, f"sizes: {size} B is given twice: give each size once")
        out.append((size, weight))
    if len(out) > MAX_SIZE_ENTRIES:
        raise _fail(text, comp, f"sizes: {len(out)} sizes: give at most {MAX_SIZE_ENTRIES}")
    if sum(w for _, w in out) > MAX_SIZE_CYCLE:
        raise _fail(text, comp, f"sizes: the weights sum to {sum(w for _, w in out)}: give at most {MAX_SIZE_CYCLE}")
    return tuple(out)
