"""TRAFFIC=: the mix of traffic a run drives through the router, parsed once into a
:class:`TrafficMix`.

Grammar (docs/traffic.md)::

    TRAFFIC   = component ("+" component)*
    component = "udp"                                  the constant-bit-rate UDP of RATE= and SIZE=
              | "tcp" [":" N] ("," tcp-option)*        N bulk TCP flows A -> B (default 1)
              | "rr" [":" N] ("," rr-option)*          TCP request/response on N connections (default 1)
    tcp-option = "cc=" NAME                            congestion control (cubic, bbr, reno; the kernel's)
               | "rate=" RATE                          pacing per flow (SO_MAX_PACING_RATE), e.g. 20M
    rr-option  = "rate=" TPS                           transactions per second over all connections (required)
               | "req=" BYTES | "resp=" BYTES          request and response sizes (8-65536; 64 and 1024)

``udp+tcp:4,cc=bbr`` runs the UDP CBR beside four BBR flows; ``rr,rate=200`` request/response at
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
#: congestion controls Linux ships; whether the sender's kernel offers one is checked on the host
CONGESTION_CONTROLS = ("cubic", "bbr", "reno", "dctcp", "htcp", "vegas", "westwood", "bic", "illinois")
RR_SIZE_RANGE = (8, 65536)
RR_TPS_RANGE = (1, 100_000)
DEFAULT_RR_REQ = 64
DEFAULT_RR_RESP = 1024
DEFAULT = "udp"
GRAMMAR = "udp, tcp[:N][,cc=NAME][,rate=R] or rr[:N],rate=TPS[,req=B][,resp=B], joined by +"

_COMPONENT = re.compile(r"^(udp|tcp|rr)(?::(\d+))?((?:,[^,]*)*)$")


@dataclass(frozen=True)
class TcpFlows:
    """``tcp:N``: N bulk flows A -> B with one congestion control, optionally paced per flow."""

    flows: int
    cc: str = "cubic"
    rate_bps: int | None = None  # None: unpaced


@dataclass(frozen=True)
class RequestResponse:
    """``rr``: open-loop TCP transactions at ``tps`` per second over ``conns`` connections."""

    conns: int
    tps: int
    req_bytes: int = DEFAULT_RR_REQ
    resp_bytes: int = DEFAULT_RR_RESP


@dataclass(frozen=True)
class TrafficMix:
    """What TRAFFIC= asks for: the UDP CBR (``udp``), bulk TCP flows, request/response."""

    udp: bool = True
    tcp: TcpFlows | None = None
    rr: RequestResponse | None = None

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
            raise _fail(text, comp, f"unknown option {key!r}: {comp.split(':')[0]} takes {', '.join(allowed)}")
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
            if count is not None or raw:
                raise _fail(text, comp, "udp takes no count or options: RATE= and SIZE= set it")
            mix["udp"] = True
            continue
        if count is not None and not 1 <= int(count) <= MAX_FLOWS:
            what = "flows" if kind == "tcp" else "connections"
            raise _fail(text, comp, f"{count} {what}: give 1-{MAX_FLOWS} (the suite's maximum)")
        n = int(count) if count is not None else 1
        if kind == "tcp":
            opts = _options(text, comp, raw, ("cc", "rate"))
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
            mix["tcp"] = TcpFlows(flows=n, cc=cc, rate_bps=rate)
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
    )
