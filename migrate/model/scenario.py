"""The experiment description: a frozen dataclass built from CLI flags / Make variables."""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

from migrate.core import knobs
from migrate.core.errors import ConfigError
from migrate.core.stack import DEFAULT_QEMU, StackError, check_libvirt_spec, check_spec
from migrate.core.units import format_rate
from migrate.model.traffic import TrafficMix, parse_traffic
from migrate.model.variables import FAULTS, default

HVS = ("kvm", "criu", "openvz", "xen")
DRIVERS = ("qmp", "libvirt")  # HV=kvm: QEMU over QMP (default) or through libvirt
MODES = ("precopy", "stopcopy")
ROUTERS = ("frr", "bird", "xorp")
ACCELS = ("auto", "kvm", "tcg")
GENS = ("builtin",)  # make migrate measures with vrgen/vrsink; other backends serve the benchmarks
XEN_GUESTS = ("pvh", "pv")
WIRED_METHODS = ("nocloud", "console")  # a profile image's [config] methods a run can use (migrate.drivers.disk_boot)
#: a container profile's image sources, config methods and NIC roles (eth0, eth1) HV=criu runs
CONTAINER_SOURCES = ("oci",)
CONTAINER_METHODS = ("file",)
CONTAINER_NICS = ("left", "right")
CRIU_HOSTS = ("local", "vm")  # HV=criu: here, or in a VM booting Debian's kernel (migrate/drivers/criu/hostvm.py)
XEN_PV_REFUSAL = (
    "XEN_GUEST=pv cannot be live-migrated with Debian's Xen 4.17: the hypervisor is built without "
    "shadow paging (CONFIG_SHADOW_PAGING unset), and a PV guest's log-dirty tracking needs it "
    "(xl fails: 'Failed to enable logdirty: 95 ... domain did not respond to suspend request'); "
    "use XEN_GUEST=pvh (the default), whose log-dirty uses hardware-assisted paging (HAP)"
)
MAX_RIB_ROUTES = 2_000_000  # about twice an Internet BGP table
MIN_FRAME_BYTES = 64
MAX_FRAME_BYTES = 1518
MIN_IPV6_FRAME_BYTES = 82  # 14 Eth + 40 IPv6 + 8 UDP + 16 B payload (seq, timestamp) + 4 FCS
#: routing protocols of PEERING= (docs/peering.md)
PEERING_PROTOCOLS = ("bgp", "ospf", "bfd")
PEERING_HVS = ("kvm", "criu", "xen")
PEERING_ROUTERS = ("frr", "bird")
#: the routing daemon the peers run (PEER_DAEMON=; docs/peering.md)
PEER_DAEMONS = ("bird", "frr")
#: the daemons' ranges: FRR bfdd 10-60000 ms and multiplier 2-255 (BIRD accepts these too); a BGP
#: hold time of 3-65535 s (RFC 4271: 0 or at least 3; 0, no keepalives, would hide a silence)
BFD_INTERVAL_MS = (10, 60_000)
BFD_MULTIPLIER = (2, 255)
BGP_HOLD_S = (3, 65_535)
#: OSPF_DEAD (s): the hello interval is a quarter of it, at least 1 s (RFC 2328 takes 16 bits for
#: both; a dead interval of at least twice the hello keeps one lost hello from ending it)
OSPF_DEAD_S = (2, 65_535)
#: DIRTY= (MB/s, MB = 2^20 B, QEMU's dirty-rate unit): the guest's load writes a working set of at
#: most half its memory, which must hold 1 s of writes (QEMU's measurement), so DIRTY <= MEM/2
MAX_DIRTY_MB_S = 10_000.0
DIRTY_HVS = ("kvm",)
#: CHURN= (route changes per second at B, migrate.experiment.churn): ``ip -batch`` makes 50,000
#: changes/s here; in a pool of 1024 prefixes a route stays announced for at least 0.2 s at
#: this highest rate
MAX_CHURN_ROUTES_S = 5000.0


@dataclass(frozen=True)
@knobs.scenario_fields(after="miglink_bps")
class Scenario:
    """One migration experiment; every field is recorded in meta.json.

    The fields of QEMU's migration knobs (downtime_limit_ms, max_bandwidth_bps, ...,
    multifd_channels, ...: migrate.core.knobs.KNOBS, in its order) are not written here: the
    decorator :func:`migrate.core.knobs.scenario_fields` puts them into the class body after
    ``miglink_bps`` before ``@dataclass`` makes the class, with the type and default each Knob
    declares.  A knob is thus declared in one place, and Scenario stays one frozen dataclass
    whose fields, their order and so ``to_dict()``'s keys are what a class body listing them
    would give (a generated base class would put them first instead, and
    ``dataclasses.make_dataclass`` would need every other field and method handed to it).  Static
    type checkers do not see these fields.

    The other fields take their defaults from the variables of ``make migrate`` that set them
    (migrate.model.variables.RUN_VARS, :func:`~migrate.model.variables.default`), but for
    ``rate_bps`` and ``migrate_timeout_s`` (RATE's and MIGRATE_TIMEOUT's defaults depend on HV)
    and the BFD fields (BFD sets both)."""

    hv: str = default("hv")
    mode: str = default("mode")
    rate_bps: int = 100_000_000
    frame_bytes: int = default("frame_bytes")
    ip: int = default("ip")
    duration_s: float = default("duration_s")
    migrate_at_s: float = default("migrate_at_s")
    after_s: float = default("after_s")
    sample_ms: int = default("sample_ms")
    probe_ms: int = default("probe_ms")
    mem_mib: int = default("mem_mib")
    vcpus: int = default("vcpus")
    router: str = default("router")
    nic: str = default("nic")
    accel: str = default("accel")
    gen: str = default("gen")
    traffic: str = default("traffic")  # TRAFFIC: the mix (migrate.model.traffic; "udp" is the CBR alone)
    miglink_bps: int | None = default("miglink_bps")
    # QEMU's migration knobs' fields follow miglink_bps (knobs.scenario_fields: KNOBS declares them)
    migrate_timeout_s: float = 120.0
    boot_timeout_s: float = default("boot_timeout_s")
    fault: str | None = default("fault")
    driver: str = default("driver")
    xen_guest: str = default("xen_guest")  # HV=xen: the domU type (pv is refused: see XEN_PV_REFUSAL)
    xen_mig_mtu: int = default("xen_mig_mtu")  # HV=xen nested: MTU of the dom0s' migration link NICs
    criu_host: str = default("criu_host")  # HV=criu: "vm" runs the experiment in a VM with a soft-dirty kernel
    rib_routes: int = default("rib_routes")  # routes held in the router's RIB (ROUTER=bird): routing state to migrate
    #: routing sessions between the router and peers on both segments ("" none; any of bgp, ospf,
    #: bfd, with bfd only beside bgp)
    peering: str = default("peering")
    bfd_interval_ms: int = 50  # BFD=<interval>x<multiplier>: transmit and receive interval
    bfd_multiplier: int = 3
    bgp_hold_s: int = default("bgp_hold_s")  # BGP_HOLD: the hold time both sides offer (keepalive = hold / 3)
    ospf_dead_s: int = default("ospf_dead_s")  # OSPF_DEAD: the router dead interval both sides use (hello = dead / 4)
    peer_daemon: str = default("peer_daemon")  # PEER_DAEMON: the peers' routing daemon, bird (BIRD 2) or frr (FRR)
    dirty_mbps: float | None = default("dirty_mbps")  # DIRTY: the guest dirties memory at this rate (MB/s, MB = 2^20 B)
    #: CHURN: B flaps routes at this many route changes per second (0: peers, no flaps; None: off)
    churn_rps: float | None = default("churn_rps")
    #: CRIU_REJOIN_MCAST=1 (HV=criu): after the restore, the driver joins the multicast groups the
    #: restore lost again, on the restored router's own OSPF socket (an intervention, off by default)
    criu_rejoin_mcast: bool = default("criu_rejoin_mcast")
    #: QEMU: the QEMU running HV=kvm's router VM (migrate.core.stack; docs/stack.md): None is the
    #: default stack (stack.DEFAULT_QEMU; with DRIVER=libvirt the host's own), else
    #: "system", a release such as "10.0", or the absolute path of a user's own build (not on a lab)
    qemu: str | None = default("qemu")
    qemu_firmware: str | None = default("qemu_firmware")  # QEMU_FIRMWARE: the data directory of a QEMU=<path> build
    #: LIBVIRT: the libvirtd of DRIVER=libvirt (migrate.core.stack): None is the default
    #: (stack.DEFAULT_LIBVIRT, with the default QEMU), "system" the host's (with the host's QEMU), or a release
    libvirt: str | None = default("libvirt")

    def __post_init__(self) -> None:
        object.__setattr__(self, "router", router_value(self.router))
        sizes = _frame_sizes(self.traffic, self.ip)
        if sizes:  # TRAFFIC=udp,sizes=...: frame_bytes is the mix's smallest frame (vrgen's gen.json)
            object.__setattr__(self, "frame_bytes", min(size for size, _ in sizes))
        validate(self)
        if "@" in self.router:  # one name per image: frr@10.3 is frr (the default release)
            object.__setattr__(self, "router", _router_image(self.router))

    @property
    def name(self) -> str:
        """Name derived from the parameters, used in the results directory name."""
        hv = self.hv if self.driver == "qmp" else f"{self.hv}-{self.driver}"
        hv = f"{hv}-vm" if self.criu_host == "vm" else hv
        rib = f"-rib{self.rib_routes}" if self.rib_routes else ""
        peering = f"-{self.peering.replace(',', '+')}" if self.peering else ""
        peering += f"-{self.peer_daemon}peers" if self.peer_daemon != "bird" else ""
        dirty = f"-dirty{self.dirty_mbps:g}" if self.dirty_mbps is not None else ""
        dirty += f"-churn{self.churn_rps:g}" if self.churn_rps is not None else ""
        traffic = "" if self.traffic == "udp" else "-" + re.sub(r"[^A-Za-z0-9.+]+", "", self.traffic)
        return f"{hv}-{self.mode}-{format_rate(self.rate_bps)}-{self.frame_bytes}{rib}{peering}{dirty}{traffic}"

    @property
    def traffic_mix(self) -> TrafficMix:
        """TRAFFIC= parsed (validated when the scenario was made)."""
        return parse_traffic(self.traffic)

    @property
    def frame_sizes(self) -> tuple[tuple[int, int], ...] | None:
        """TRAFFIC=udp,sizes=...: the UDP CBR's (frame bytes, weight) pairs; None: one size (SIZE=)."""
        return _frame_sizes(self.traffic, self.ip)

    @property
    def router_software(self) -> str:
        """ROUTER without its release (``frr@8.4`` -> ``frr``), or a profile file's ``[router]
        software``: what decides the daemons."""
        from routers.profiles import family_of

        profile = profile_of(self.router)
        return profile.router.software if profile is not None else family_of(self.router)

    @property
    def ospf_hello_s(self) -> int:
        """OSPF's hello interval: a quarter of the dead interval (FRR's and BIRD's default
        ratio, 10 s and 40 s), at least 1 s; vrmig-router computes the same for the router."""
        return max(1, self.ospf_dead_s // 4)

    @property
    def peering_protocols(self) -> tuple[str, ...]:
        """PEERING's protocols, in PEERING_PROTOCOLS order (empty: no peers)."""
        return tuple(p for p in PEERING_PROTOCOLS if p in self.peering.split(","))

    def to_dict(self) -> dict[str, Any]:
        """All parameters as a JSON-ready dict."""
        return asdict(self)

    @classmethod
    def field_names(cls) -> list[str]:
        """Names of all parameters."""
        return [f.name for f in fields(cls)]


def router_value(router: str) -> str:
    """ROUTER= as the scenario keeps it: a built-in name unchanged; a profile file that names a
    built-in image (profiles/frr.toml) that image's name, one name per image; any other profile
    file its absolute path (meta.json then names the file that ran).  A profile file's mistakes
    are one ConfigError line (routers.errors.ProfileFileError)."""
    from routers.profile_file import router_profile

    profile = router_profile(router)
    if profile is None:
        return router
    if profile.image.builtin is not None:
        return profile.image.builtin
    return str(profile.path)


def profile_of(router: str) -> Any:
    """The :class:`routers.profile_file.RouterProfile` of a profile-file ROUTER (None for a
    built-in image)."""
    from routers.profile_file import router_profile

    return router_profile(router)


def _router_image(router: str) -> str:
    """The image name of a valid ROUTER value (``frr@10.3`` -> ``frr``)."""
    from routers import profiles

    return profiles.canonical(router)


def _require(cond: bool, msg: str) -> None:
    if not cond:
        raise ConfigError(msg)


# The router guest's settings (ROUTER, ACCEL, MEM) are Scenario's, and CalibrationSpec and
# BaselineSpec take their defaults from it; their checks are these, for all three specs.


def check_router_release(router: str) -> None:
    """ROUTER=<image>@<release>: ConfigError unless the router profiles know that release."""
    if "@" in router:
        from routers import profiles
        from routers.errors import UnknownProfileError

        try:
            profiles.get(router)
        except UnknownProfileError as err:
            raise ConfigError(str(err)) from None


def check_profile_router(s: Scenario, profile: Any) -> None:
    """The settings a router of a profile file (not built by the suite) can run with today: a
    disk image boots under HV=kvm (DRIVER=qmp or libvirt), with at least the profile's memory and
    its NIC model; a container image (OCI layout) runs under HV=criu on this machine
    (CRIU_HOST=local), configured by a file written into its tree."""
    if profile.router.kind == "container":
        _check_container_profile(s, profile)
    else:
        _check_vm_profile(s, profile)
    where = f"ROUTER={profile.path}"
    _require(s.rib_routes == 0, f"RIB_ROUTES={s.rib_routes} needs ROUTER=bird (not {where})")
    _require(s.fault is None, f"FAULT={s.fault} needs a built-in router image (not {where})")
    _require(s.dirty_mbps is None, f"DIRTY={s.dirty_mbps} needs a built-in router image's dirtying tool (not {where})")


def _check_container_profile(s: Scenario, profile: Any) -> None:
    where = f"ROUTER={profile.path}"
    _require(
        s.hv == "criu",
        f'{where} is a container image (kind = "container"): run it with HV=criu (not HV={s.hv})',
    )
    _require(
        s.criu_host == "local",
        f"{where}: CRIU_HOST={s.criu_host} runs the built-in images only so far: use CRIU_HOST=local",
    )
    _require(
        profile.image.source in CONTAINER_SOURCES,
        f"{where}: [image] {profile.image.source} is not wired yet for a container: give an OCI image layout "
        '(oci = "DIR:TAG")',
    )
    _require(
        profile.config.method in CONTAINER_METHODS,
        f"{where}: [config] method = {profile.config.method!r} is not wired yet for a container: write the "
        'rendered template into its tree (method = "file", path = "/etc/...")',
    )
    _require(
        tuple(profile.hardware.nics) == CONTAINER_NICS,
        f"{where}: [hardware] nics = {list(profile.hardware.nics)}: a container's eth0 is the left port and eth1 "
        'the right one: use nics = ["left", "right"]',
    )


def _check_vm_profile(s: Scenario, profile: Any) -> None:
    where = f"ROUTER={profile.path}"
    _require(
        s.hv == "kvm",
        f"{where} boots its disk image with HV=kvm only (not HV={s.hv}): run it with HV=kvm (DRIVER=qmp or libvirt)",
    )
    need = profile.hardware.mem_mib
    _require(
        need is None or s.mem_mib >= need,
        f"MEM={s.mem_mib} is below the {need} MiB that {where} asks ([hardware] mem_mib): give MEM={need} or more",
    )
    _require(
        s.nic == profile.hardware.nic,
        f"NIC={s.nic} does not match {where} ([hardware] nic = {profile.hardware.nic!r}): "
        f"give NIC={profile.hardware.nic}",
    )
    _require(
        profile.config.method in WIRED_METHODS,
        f"{where}: [config] method = {profile.config.method!r} is not wired yet: the suite configures a "
        'disk image through a NoCloud seed (method = "nocloud") or by typing on its serial console '
        '(method = "console")',
    )


def _frame_sizes(traffic: str, ip: int) -> tuple[tuple[int, int], ...] | None:
    """TRAFFIC's UDP frame sizes over IPv``ip``, None for one size or a TRAFFIC that does not
    parse (validate then names it)."""
    try:
        return parse_traffic(traffic).frame_sizes(ip)
    except ConfigError:
        return None


def check_accel(accel: str) -> None:
    """ACCEL: ConfigError unless it is one of ACCELS."""
    _require(accel in ACCELS, f"ACCEL={accel!r} must be one of {', '.join(ACCELS)}")


def check_mem(mem_mib: int) -> None:
    """MEM: ConfigError unless the guest's memory is 64-16384 MiB."""
    _require(64 <= mem_mib <= 16384, f"MEM={mem_mib} must be 64-16384 MiB")


def validate(s: Scenario) -> None:
    """Raise ConfigError with a one-line, actionable message for the first invalid parameter."""
    _require(s.hv in HVS, f"HV={s.hv!r} is not supported: choose one of {', '.join(HVS)}")
    _require(s.driver in DRIVERS, f"DRIVER={s.driver!r} is unknown: choose one of {', '.join(DRIVERS)}")
    _require(s.driver != "libvirt" or s.hv == "kvm", f"DRIVER=libvirt needs HV=kvm (not HV={s.hv})")
    _require(s.mode in MODES, f"MODE={s.mode!r} is unknown: choose precopy or stopcopy")
    _require(s.rate_bps >= 0, f"RATE={s.rate_bps} must be >= 0 bit/s")
    mix = parse_traffic(s.traffic)
    _require(
        mix.udp or s.rate_bps == 0,
        f"RATE={format_rate(s.rate_bps)} sets the UDP CBR, which TRAFFIC={s.traffic} does not include: "
        f"give TRAFFIC=udp+{s.traffic}, or leave RATE out",
    )
    _require(
        not mix.uses_tcp or s.gen == "builtin",
        f"TRAFFIC={s.traffic} runs vrtcp beside the builtin UDP generator: leave GEN out (GEN={s.gen})",
    )
    _require(
        not mix.udp_extended or s.gen == "builtin",
        f"TRAFFIC={s.traffic} (several UDP flows, both directions or a size mix) needs vrgen: leave GEN out "
        f"(GEN={s.gen})",
    )
    sizes = mix.frame_sizes(s.ip)
    if sizes and s.ip == 6:
        small = [size for size, _ in sizes if size < MIN_IPV6_FRAME_BYTES]
        _require(
            not small,
            f"TRAFFIC={s.traffic}: {small[0] if small else 0} B frames cannot carry IPv6 and vrgen's header: "
            f"give sizes of at least {MIN_IPV6_FRAME_BYTES} B (sizes=imix uses {MIN_IPV6_FRAME_BYTES} B over IPv6)",
        )
    _require(s.rate_bps <= 10 * 10**9, f"RATE={format_rate(s.rate_bps)} is above 10G: the testbed cannot carry it")
    _require(
        MIN_FRAME_BYTES <= s.frame_bytes <= MAX_FRAME_BYTES,
        f"SIZE={s.frame_bytes} is outside {MIN_FRAME_BYTES}-{MAX_FRAME_BYTES} (Ethernet frame bytes incl. FCS)",
    )
    _require(s.ip in (4, 6), f"IP={s.ip} must be 4 or 6")
    if s.ip == 6:
        _require(
            s.frame_bytes >= MIN_IPV6_FRAME_BYTES,
            f"SIZE={s.frame_bytes} is too small for IPv6 probes: use at least {MIN_IPV6_FRAME_BYTES}",
        )
    _require(s.duration_s > 0, f"DURATION={s.duration_s} must be > 0 seconds")
    _require(s.migrate_at_s > 0, f"MIGRATE_AT={s.migrate_at_s} must be > 0 seconds")
    _require(
        s.migrate_at_s < s.duration_s,
        f"MIGRATE_AT={s.migrate_at_s} must be before the end of traffic (DURATION={s.duration_s})",
    )
    _require(1 <= s.sample_ms <= 1000, f"SAMPLE_MS={s.sample_ms} must be 1-1000 ms")
    _require(1 <= s.probe_ms <= 1000, f"PROBE_MS={s.probe_ms} must be 1-1000 ms")
    check_mem(s.mem_mib)
    _require(1 <= s.vcpus <= 64, f"VCPUS={s.vcpus} must be 1-64")
    _require(
        s.vcpus == 1 or s.hv in ("kvm", "xen"),
        f"VCPUS={s.vcpus} sets a router VM's vCPUs: HV={s.hv} runs the router as a container (use HV=kvm or xen)",
    )
    profile = profile_of(s.router)
    if profile is None:
        _require(s.router_software in ROUTERS, f"ROUTER={s.router!r} is unknown: choose one of {', '.join(ROUTERS)}")
        check_router_release(s.router)
    else:
        check_profile_router(s, profile)
    _require(s.nic in ("virtio", "e1000"), f"NIC={s.nic!r} must be virtio or e1000")
    check_accel(s.accel)
    _require(s.gen in GENS, f"GEN={s.gen!r} is unknown: choose one of {', '.join(GENS)}")
    if s.miglink_bps is not None:
        _require(s.miglink_bps >= 100_000, f"MIGLINK={s.miglink_bps} must be at least 100K bit/s")
    validate_knobs(s)
    _require(s.migrate_timeout_s > 0, "MIGRATE_TIMEOUT must be > 0 seconds")
    _require(s.boot_timeout_s > 0, "BOOT_TIMEOUT must be > 0 seconds")
    _require(s.xen_guest in XEN_GUESTS, f"XEN_GUEST={s.xen_guest!r} must be pvh (or pv, which is refused)")
    if s.hv == "xen":
        xen_host_env(os.environ)
    _require(not (s.hv == "xen" and s.xen_guest == "pv"), XEN_PV_REFUSAL)
    _require(s.hv != "xen" or s.mode == "precopy", "HV=xen supports MODE=precopy only (xl migrate)")
    _require(s.criu_host in CRIU_HOSTS, f"CRIU_HOST={s.criu_host!r} must be one of {', '.join(CRIU_HOSTS)}")
    _require(s.criu_host == "local" or s.hv == "criu", f"CRIU_HOST={s.criu_host} needs HV=criu (not HV={s.hv})")
    _require(not s.criu_rejoin_mcast or s.hv == "criu", f"CRIU_REJOIN_MCAST=1 needs HV=criu (not HV={s.hv})")
    _require(0 <= s.rib_routes <= MAX_RIB_ROUTES, f"RIB_ROUTES={s.rib_routes} must be 0-{MAX_RIB_ROUTES} routes")
    _require(s.rib_routes == 0 or s.router_software == "bird", f"RIB_ROUTES needs ROUTER=bird (not ROUTER={s.router})")
    _require(576 <= s.xen_mig_mtu <= 9000, f"XEN_MIG_MTU={s.xen_mig_mtu} must be 576-9000 bytes")
    _require(s.fault is None or s.fault in FAULTS, f"FAULT={s.fault!r} is unknown: choose one of {', '.join(FAULTS)}")
    _require(
        s.peer_daemon in PEER_DAEMONS,
        f"PEER_DAEMON={s.peer_daemon!r} is unknown: choose one of {', '.join(PEER_DAEMONS)}",
    )
    _require(
        s.peer_daemon == "bird" or bool(s.peering),
        f"PEER_DAEMON={s.peer_daemon} is the routing peers' daemon: add PEERING= (e.g. PEERING=bgp,bfd)",
    )
    if s.peering:
        validate_peering(s)
    if s.dirty_mbps is not None:
        validate_dirty(s)
    if s.churn_rps is not None:
        validate_churn(s)
    if s.qemu is not None or s.qemu_firmware is not None or s.libvirt is not None:
        validate_stack(s)


def qemu_spec(s: Scenario) -> str:
    """The QEMU= the run uses: the scenario's, else the default stack's; under DRIVER=libvirt
    LIBVIRT=system the host's own QEMU (its libvirt's, though it runs QEMU=10.0 too).  A lab runs
    the default release under either driver (migrate.experiment.place.lab_facts)."""
    return s.qemu or ("system" if s.driver == "libvirt" and s.libvirt == "system" else DEFAULT_QEMU)


def validate_stack(s: Scenario) -> None:
    """QEMU= and QEMU_FIRMWARE= (docs/stack.md); whether a release is served is the preflight's."""
    _require(
        s.libvirt is None or (s.hv == "kvm" and s.driver == "libvirt"),
        f"LIBVIRT={s.libvirt} chooses the libvirtd of DRIVER=libvirt: add DRIVER=libvirt (HV=kvm)",
    )
    if s.libvirt is not None:
        try:
            check_libvirt_spec(s.libvirt)
        except StackError as err:
            raise ConfigError(str(err)) from None
    if s.qemu is None and s.qemu_firmware is None:
        return
    _require(
        s.hv == "kvm",
        f"QEMU={s.qemu} chooses the QEMU of HV=kvm's router VM (HV={s.hv} runs none, or the host's in nested hosts)",
    )
    try:
        check_spec(s.qemu or DEFAULT_QEMU)
    except StackError as err:
        raise ConfigError(str(err)) from None
    _require(
        s.qemu_firmware is None or (s.qemu or "").startswith("/"),
        f"QEMU_FIRMWARE={s.qemu_firmware} goes with QEMU=<the path of your own build>",
    )


def validate_churn(s: Scenario) -> None:
    """CHURN= (docs/peering.md "Route churn")."""
    c = s.churn_rps
    _require(isinstance(c, int | float) and c >= 0, f"CHURN={c} must be 0 or more route changes per second")
    assert c is not None
    _require(c <= MAX_CHURN_ROUTES_S, f"CHURN={c:g} is above {MAX_CHURN_ROUTES_S:g} route changes per second")
    _require(
        "bgp" in s.peering.split(","),
        f"CHURN={c:g} flaps routes over the routing peers' BGP sessions: add PEERING=bgp (or bgp,bfd)",
    )
    _require(
        s.peer_daemon == "bird",
        f"CHURN={c:g} runs with BIRD peers (its routes come from BIRD's kernel protocol): use PEER_DAEMON=bird",
    )


def validate_dirty(s: Scenario) -> None:
    """DIRTY= (docs/migrate.md "Dirty rate")."""
    d = s.dirty_mbps
    _require(isinstance(d, int | float) and d > 0, f"DIRTY={d} must be above 0 MB/s")
    assert d is not None
    _require(d <= MAX_DIRTY_MB_S, f"DIRTY={d:g} is above {MAX_DIRTY_MB_S:g} MB/s")
    _require(
        s.hv in DIRTY_HVS,
        f"DIRTY runs with HV=kvm so far (not HV={s.hv}): a dirtying load in CRIU's container or Xen's domU "
        "is not built yet",
    )
    _require(
        d <= s.mem_mib / 2,
        f"DIRTY={d:g} needs a working set of 1 s of writes within half the guest's memory: at most "
        f"{s.mem_mib / 2:g} MB/s with MEM={s.mem_mib} (raise MEM)",
    )


def validate_knobs(s: Scenario) -> None:
    """QEMU's migration knobs: HV=kvm only, and each knob's rules (its Knob.check in
    migrate.core.knobs: QEMU's ranges, the capability it needs, the combinations QEMU refuses)."""
    knobs.validate(s.to_dict())


def parse_bfd(text: str) -> tuple[int, int]:
    """``BFD=50x3`` -> (50, 3); ConfigError (one line) for anything else."""
    m = re.fullmatch(r"(\d+)x(\d+)", text.strip())
    if m is None:
        raise ConfigError(f"BFD={text!r} is not <interval ms>x<multiplier>: e.g. BFD=50x3")
    return int(m[1]), int(m[2])


def validate_peering(s: Scenario) -> None:
    """PEERING= and its timers (docs/peering.md)."""
    names = s.peering.split(",")
    unknown = [n for n in names if n not in PEERING_PROTOCOLS]
    bad = ", ".join(map(repr, unknown))
    _require(not unknown, f"PEERING={s.peering}: {bad} unknown: use any of {','.join(PEERING_PROTOCOLS)}")
    _require(len(set(names)) == len(names), f"PEERING={s.peering} names a protocol twice")
    _require(
        "bfd" not in names or "bgp" in names,
        f"PEERING={s.peering}: BFD runs on the BGP sessions here: use PEERING=bgp,bfd (or bgp,ospf,bfd)",
    )
    _require(
        s.router_software in PEERING_ROUTERS,
        f"PEERING needs a router with routing daemons: ROUTER=frr (bgpd, ospfd, bfdd) or bird (not ROUTER={s.router})",
    )
    _require(
        s.hv in PEERING_HVS,
        f"PEERING runs with HV={', '.join(PEERING_HVS)} (not HV={s.hv})",
    )
    _require(s.ip == 4, "PEERING runs with IP=4 so far (the sessions and the announced sink address are IPv4)")
    bfd = f"BFD={s.bfd_interval_ms}x{s.bfd_multiplier}"
    lo, hi = BFD_INTERVAL_MS
    _require(lo <= s.bfd_interval_ms <= hi, f"{bfd}: the interval must be {lo}-{hi} ms")
    lo, hi = BFD_MULTIPLIER
    _require(lo <= s.bfd_multiplier <= hi, f"{bfd}: the multiplier must be {lo}-{hi}")
    lo, hi = BGP_HOLD_S
    _require(lo <= s.bgp_hold_s <= hi, f"BGP_HOLD={s.bgp_hold_s} must be {lo}-{hi} s (RFC 4271)")
    lo, hi = OSPF_DEAD_S
    _require(
        lo <= s.ospf_dead_s <= hi,
        f"OSPF_DEAD={s.ospf_dead_s} must be {lo}-{hi} s (the hello interval is a quarter of it, at least 1 s)",
    )


_IFNAME = re.compile(r"[A-Za-z0-9_.-]{1,15}")
_SSH_DEST = re.compile(r"[A-Za-z0-9_.@:%\[\]-]+")


def xen_host_env(environ: Mapping[str, str]) -> dict[str, str | None]:
    """HV=xen on real dom0s: ``XEN_PEER`` (ssh destination of R2's dom0), ``XEN_MIG_ADDR`` (its
    address on the migration link) and ``XEN_MIG_IF`` (dom0's NIC there), checked; unset ones are
    None.  They end up in commands run in dom0 (``xl migrate``'s transport is run by ``sh``), so
    anything but an IP address, an interface name and an ssh destination is refused."""
    peer, addr, ifname = (environ.get(k) for k in ("XEN_PEER", "XEN_MIG_ADDR", "XEN_MIG_IF"))
    if addr is not None:
        try:
            addr = str(ipaddress.ip_address(addr))
        except ValueError:
            raise ConfigError(
                f"XEN_MIG_ADDR={addr!r} is not an IP address: give R2's dom0 address on the migration link, "
                "e.g. 198.19.255.2"
            ) from None
    _require(
        ifname is None or (_IFNAME.fullmatch(ifname) is not None and ifname not in (".", "..")),
        f"XEN_MIG_IF={ifname!r} is not a network interface name (1-15 letters, digits, '.', '_', '-'), e.g. ethM",
    )
    _require(
        peer is None or (_SSH_DEST.fullmatch(peer) is not None and not peer.startswith("-")),
        f"XEN_PEER={peer!r} is not an ssh destination: use [user@]host, e.g. root@dom0-b",
    )
    return {"peer": peer, "mig_addr": addr, "mig_if": ifname}
