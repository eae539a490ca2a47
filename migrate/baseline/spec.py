"""The baseline matrix (``make baseline``): a frozen dataclass parsed from Make variables / CLI
flags, validated before anything starts, and the configurations and points it expands to."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, fields
from typing import Any, TypeVar

from migrate.core.convert import converter
from migrate.core.errors import ConfigError
from migrate.core.units import format_rate, parse_rate_bps
from migrate.model.scenario import check_accel, check_mem, check_router_release
from migrate.model.variables import default

HVS = ("none", "kvm", "criu", "xen")
NICS = ("virtio", "e1000")
LOADS = ("none", "idle", "cpu", "smallpkts")
SEARCHES = ("none", "ndr")
#: what the router slot is in a configuration: ``router`` forwards A -> B (the default); as an end
#: host (the seeds' VM throughput experiments, papers 000, 001 and 003) ``vm-tx`` sends to B and
#: ``vm-rx`` receives from A, the traffic tools running in the guest (HV=kvm), the container
#: (HV=criu) or, for the bare host of seed 000's efficiency E, in the router's own namespace
#: (HV=none); ``vm-vm``: two such end hosts on one machine, router 0 sending to router 1
ROLES = ("router", "vm-tx", "vm-rx", "vm-vm")
#: ROLE=vm-vm: its configuration has two routers, both end hosts (whatever ROUTERS says)
VM_VM_ROUTERS = 2
#: the traffic of a point: vrgen's UDP CBR (every SIZE), or one bulk TCP flow of vrtcp per router
#: (its goodput; the segments are full-MSS, so SIZES does not apply: :data:`TCP_FRAME_BYTES`)
PROTOS = ("udp", "tcp")
TCP_FRAME_BYTES = 1518  # a full-MSS segment's frame at MTU 1500, incl. FCS: the key's frame size
ROUTER_PROFILES = ("frr", "bird")
MAX_ROUTERS = 8
MIN_FRAME_BYTES = 64
MAX_FRAME_BYTES = 1518
MIN_IPV6_FRAME_BYTES = 82  # 14 Eth + 40 IPv6 + 8 UDP + 16 B vrgen header + 4 FCS
MAX_RATE_BPS = 10 * 10**9
UNPACED = 0  # RATES=max: the generator sends as fast as it can (paper 001's pktgen with 0 delay)


def rate_text(rate_bps: int) -> str:
    """'max' for unpaced, else the compact rate."""
    return "max" if rate_bps == UNPACED else format_rate(rate_bps)


LOAD_FRAME_BYTES = 64  # LOAD=smallpkts: the neighbour forwards 64 B frames (paper 001, Sec. 3.4)
NONE_NIC = "veth"  # HV=none and HV=criu: the router's interfaces are veths (no NIC model)
NIC_LESS_HVS = ("none", "criu")  # one configuration each, whatever NIC lists

DEFAULTS: dict[str, str] = {
    "hv": "none,kvm",
    "nic": "virtio",
    "ip": "4",
    "sizes": "64,1500",
    "rates": "10M,20M,50M,max",
    "routers": "1",
    "load": "none",
    "reps": "3",
    "search": "none",
    "role": "router",
    "proto": "udp",
}

T = TypeVar("T")


@dataclass(frozen=True)
class Config:
    """One router set-up: built once, then measured at every (ip, size, rate, rep)."""

    hv: str
    nic: str
    routers: int
    load: str
    role: str = "router"

    @property
    def name(self) -> str:
        """Directory name of the configuration (an end-host role appended)."""
        base = f"{self.hv}-{self.nic}-r{self.routers}-{self.load}"
        return base if self.role == "router" else f"{base}-{self.role}"


@dataclass(frozen=True)
class PointKey:
    """One measurement: configuration, IP version, frame size, requested rate per router (0 =
    unpaced), repetition, and whether it belongs to the rate sweep or to an NDR search."""

    config: Config
    ip: int
    frame_bytes: int
    rate_bps: int
    rep: int
    phase: str = "sweep"
    proto: str = "udp"

    @property
    def name(self) -> str:
        """Directory name of the point (unique within its configuration)."""
        rate = rate_text(self.rate_bps)
        if self.proto == "tcp":
            return f"{self.phase}-tcp-ip{self.ip}-{rate}-rep{self.rep}"
        return f"{self.phase}-ip{self.ip}-{self.frame_bytes}B-{rate}-rep{self.rep}"


@dataclass(frozen=True)
class BaselineSpec:
    """Every parameter of a baseline run; all of it is recorded in meta.json."""

    hvs: tuple[str, ...] = ("none", "kvm")
    nics: tuple[str, ...] = ("virtio",)
    ips: tuple[int, ...] = (4,)
    sizes: tuple[int, ...] = (64, 1500)
    rates_bps: tuple[int, ...] = (10_000_000, 20_000_000, 50_000_000, UNPACED)
    routers: tuple[int, ...] = (1,)
    loads: tuple[str, ...] = ("none",)
    reps: int = 3
    search: str = "none"
    roles: tuple[str, ...] = ("router",)
    protos: tuple[str, ...] = ("udp",)
    duration_s: float = 5.0
    load_rate_bps: int = 10_000_000
    #: the router guest's settings, with make migrate's defaults (migrate.model.variables); ACCEL, MEM
    #: and a ROUTER release checked as Scenario checks them
    router: str = default("router")
    accel: str = default("accel")
    mem_mib: int = default("mem_mib")
    probe_ms: int = 10
    gen_check: bool = True
    ndr_precision: float = 0.05
    boot_timeout_s: float = 180.0

    def __post_init__(self) -> None:
        validate(self)

    def configs(self) -> list[Config]:
        """Router set-ups in run order (HV=none and HV=criu have one NIC-less configuration)."""
        out = []
        for hv in self.hvs:
            for nic in (NONE_NIC,) if hv in NIC_LESS_HVS else self.nics:
                for n in self.routers:
                    for load in self.loads:
                        out += [Config(hv, nic, VM_VM_ROUTERS if role == "vm-vm" else n, load, role)
                                for role in self.roles]  # fmt: skip
        return out

    def sweep(self, config: Config, rep: int) -> Iterator[PointKey]:
        """The rate sweep of one repetition: every IP version, frame size and rate (UDP), then
        every IP version and rate (TCP)."""
        if "udp" in self.protos:
            for ip in self.ips:
                for size in self.sizes:
                    for rate in self.rates_bps:
                        yield PointKey(config, ip, size, rate, rep)
        if "tcp" in self.protos:
            for ip in self.ips:
                for rate in self.rates_bps:
                    yield PointKey(config, ip, TCP_FRAME_BYTES, rate, rep, proto="tcp")

    def sweep_points(self, config: Config) -> int:
        """Points of one configuration's rate sweeps, every repetition (NDR trials not included)."""
        per_ip = len(self.sizes) * ("udp" in self.protos) + ("tcp" in self.protos)
        return self.reps * len(self.ips) * per_ip * len(self.rates_bps)

    @property
    def ndr_hi_bps(self) -> int | None:
        """Upper end of the NDR search: the highest numeric rate of RATES."""
        numeric = [r for r in self.rates_bps if r != UNPACED]
        return max(numeric) if numeric else None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready parameters."""
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> BaselineSpec:
        """Inverse of :meth:`to_dict` (for RESUME)."""
        names = {f.name for f in fields(cls)}
        kw = {k: tuple(v) if isinstance(v, list) else v for k, v in d.items() if k in names}
        return cls(**kw)


# ------------------------------------------------------------------ parsing


def parse_list(text: str, name: str, conv: Callable[[str], T]) -> tuple[T, ...]:
    """``"64,500, 1500"`` -> converted tuple; ConfigError for an empty list, an empty item or a
    duplicate."""
    items = [t.strip() for t in str(text).split(",")]
    if not any(items):
        raise ConfigError(f"{name} is empty: give at least one value (comma-separated)")
    if "" in items:
        raise ConfigError(f"{name}={text!r} has an empty item: remove the extra comma")
    out = tuple(conv(t) for t in items)
    dupes = sorted({str(x) for x in out if out.count(x) > 1})
    if dupes:
        raise ConfigError(f"{name}={text!r} lists {', '.join(dupes)} more than once")
    return out


def _choice(name: str, allowed: tuple[str, ...]) -> Callable[[str], str]:
    def conv(t: str) -> str:
        if t not in allowed:
            raise ConfigError(f"{name}: {t!r} is unknown: choose from {', '.join(allowed)}")
        return t

    return conv


def _whole(name: str) -> Callable[[str], int]:
    return converter(int, lambda t: f"{name}: {t!r} is not a whole number")


def _rate(t: str) -> int:
    if t.lower() == "max":
        return UNPACED
    value = parse_rate_bps(t, "RATES")
    if value == 0:
        raise ConfigError("RATES: 0 is not a rate: use 'max' for an unpaced generator")
    return value


def parse_ips(text: str) -> tuple[int, ...]:
    """IP=4|6|both."""
    t = str(text).strip()
    if t == "both":
        return (4, 6)
    if t in ("4", "6"):
        return (int(t),)
    raise ConfigError(f"IP={text!r} is unknown: choose 4, 6 or both")


def spec_from_strings(values: dict[str, str | None], **scalars: Any) -> BaselineSpec:
    """Build the spec from the list-valued Make variables (None = default) and scalar parameters."""
    v = {k: (values.get(k) if values.get(k) is not None else d) for k, d in DEFAULTS.items()}
    reps = _whole("REPS")(str(v["reps"]))
    return BaselineSpec(
        hvs=parse_list(v["hv"], "HV", _choice("HV", HVS)),
        nics=parse_list(v["nic"], "NIC", _choice("NIC", NICS)),
        ips=parse_ips(v["ip"]),
        sizes=parse_list(v["sizes"], "SIZES", _whole("SIZES")),
        rates_bps=parse_list(v["rates"], "RATES", _rate),
        routers=parse_list(v["routers"], "ROUTERS", _whole("ROUTERS")),
        loads=parse_list(v["load"], "LOAD", _choice("LOAD", LOADS)),
        reps=reps,
        search=_choice("SEARCH", SEARCHES)(str(v["search"])),
        roles=parse_list(v["role"], "ROLE", _choice("ROLE", ROLES)),
        protos=parse_list(v["proto"], "PROTO", _choice("PROTO", PROTOS)),
        **scalars,
    )


# ------------------------------------------------------------------ validation


def _require(cond: bool, msg: str) -> None:
    if not cond:
        raise ConfigError(msg)


def validate(s: BaselineSpec) -> None:
    """Raise ConfigError with one actionable line for the first invalid parameter."""
    for name, values in (("HV", s.hvs), ("NIC", s.nics), ("IP", s.ips), ("SIZES", s.sizes), ("RATES", s.rates_bps)):
        _require(len(values) > 0, f"{name} is empty: give at least one value")
    _require(len(s.routers) > 0 and len(s.loads) > 0, "ROUTERS and LOAD need at least one value each")
    for hv in s.hvs:
        _require(hv in HVS, f"HV={hv!r} is unknown: choose from {', '.join(HVS)}")
    for nic in s.nics:
        _require(nic in NICS, f"NIC={nic!r} is unknown: choose from {', '.join(NICS)}")
    for ip in s.ips:
        _require(ip in (4, 6), f"IP={ip} must be 4, 6 or both")
    for size in s.sizes:
        _require(
            MIN_FRAME_BYTES <= size <= MAX_FRAME_BYTES,
            f"SIZES: {size} is outside {MIN_FRAME_BYTES}-{MAX_FRAME_BYTES} (Ethernet frame bytes incl. FCS)",
        )
        if 6 in s.ips:
            _require(
                size >= MIN_IPV6_FRAME_BYTES,
                f"SIZES: {size} B is too small for IPv6 (the generator needs {MIN_IPV6_FRAME_BYTES} B): "
                "drop it or use IP=4",
            )
    for rate in s.rates_bps:
        _require(
            rate == UNPACED or 0 < rate <= MAX_RATE_BPS,
            f"RATES: {rate} bit/s is outside 1..{format_rate(MAX_RATE_BPS)} (or 'max')",
        )
    for n in s.routers:
        _require(1 <= n <= MAX_ROUTERS, f"ROUTERS: {n} is outside 1..{MAX_ROUTERS}")
    for load in s.loads:
        _require(load in LOADS, f"LOAD={load!r} is unknown: choose from {', '.join(LOADS)}")
    if "xen" in s.hvs:
        _require(s.routers == (1,) and s.loads == ("none",),
                 "HV=xen baselines one nested Xen host: use ROUTERS=1 LOAD=none")  # fmt: skip
    for role in s.roles:
        _require(role in ROLES, f"ROLE={role!r} is unknown: choose from {', '.join(ROLES)}")
    if any(r != "router" for r in s.roles):
        _require(
            s.routers == (1,),
            "ROLE=vm-tx/vm-rx/vm-vm measures one end host or one pair: use ROUTERS=1 "
            "(vm-vm runs its two guests by itself)",
        )
    for proto in s.protos:
        _require(proto in PROTOS, f"PROTO={proto!r} is unknown: choose from {', '.join(PROTOS)}")
    if "tcp" in s.protos:
        _require(s.search == "none", "SEARCH=ndr searches the UDP loss-free rate: drop tcp from PROTO, or SEARCH")
    _require(1 <= s.reps <= 1000, f"REPS={s.reps} must be 1..1000")
    _require(s.search in SEARCHES, f"SEARCH={s.search!r} is unknown: choose none or ndr")
    if s.search == "ndr":
        _require(s.ndr_hi_bps is not None, "SEARCH=ndr needs at least one numeric rate in RATES (its upper bound)")
        _require(0.001 <= s.ndr_precision <= 0.5, f"NDR_PRECISION={s.ndr_precision} must be 0.001..0.5")
    _require(0.5 <= s.duration_s <= 3600, f"DURATION={s.duration_s} must be 0.5..3600 seconds per point")
    _require(0 < s.load_rate_bps <= MAX_RATE_BPS, f"LOAD_RATE={s.load_rate_bps} must be > 0 and <= 10G")
    from routers import profiles

    known = profiles.family_of(s.router) in ROUTER_PROFILES
    _require(known, f"ROUTER={s.router!r}: choose from {', '.join(ROUTER_PROFILES)}")
    check_router_release(s.router)
    check_accel(s.accel)
    check_mem(s.mem_mib)
    _require(1 <= s.probe_ms <= 1000, f"PROBE_MS={s.probe_ms} must be 1-1000 ms")
    _require(s.boot_timeout_s > 0, "BOOT_TIMEOUT must be > 0 seconds")
