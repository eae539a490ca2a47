"""The testbed inventory: the machines of a lab as data (docs/testbed.md, docs/lab.example.toml).

An inventory names each role of paper 004's Fig. 1 (end hosts A, C on segment L and B, D on
segment R; hypervisor hosts R1, R2 and their migration link), how the orchestrator reaches it
(SSH, or ``local``), its interfaces and addresses, and the router VM's ports.  :func:`load`
validates all of it before anything is started: each problem is one line naming the file, the
role and what to change (:class:`InventoryError`, exit 2).  :func:`embedded` describes the
namespace testbed the suite builds itself in the same terms."""

from __future__ import annotations

import ipaddress
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from migrate.core.errors import ConfigError
from migrate.testbed import topology as topo

VERSION = 1
END_ROLES = tuple(h.role for h in topo.END_HOSTS)  # A, C, B, D
HV_ROLES = topo.HYPERVISOR_HOSTS  # R1, R2
ROLES = (*END_ROLES, *HV_ROLES)
#: addresses inside the testbed: IPv4 benchmarking range (RFC 2544) and IPv6's (RFC 5180)
ALLOWED_NETS = (ipaddress.ip_network("198.18.0.0/15"), ipaddress.ip_network("2001:2::/48"))
_IFNAME_RE = re.compile(r"^[A-Za-z0-9_.:-]{1,15}$")
_MAC_RE = re.compile(r"^[0-9a-f]{2}(:[0-9a-f]{2}){5}$")
_TOP_KEYS = {"version", "name", "deploy_dir", "ssh", "hosts", "router"}
_SSH_KEYS = {"host", "port", "user", "key", "known_hosts"}
_END_KEYS = {"ssh", "transport", "segment", "interface", "ipv4", "ipv6"}
_HV_KEYS = {
    "ssh",
    "transport",
    "uplinks",
    "bridges",
    "taps",
    "migration",
    "libvirt_uri",
    "libvirt_peer_uri",
    "libvirt_tls",
    "xen",
}
_XEN_KEYS = {"ssh", "bridges", "migration", "deploy_dir", "taps"}
#: a Xen host's defaults: dom0 bridges the router domU's vifs attach to
XEN_BRIDGES = {"L": "xenbrL", "R": "xenbrR"}
_PORT_KEYS = {"ipv4", "ipv6", "mac"}


class InventoryError(ConfigError):
    """The inventory is missing, malformed or inconsistent (exit 2, nothing started)."""


@dataclass(frozen=True)
class SshTarget:
    """How the orchestrator reaches a host: OpenSSH with this key and these known host keys."""

    host: str
    port: int
    user: str
    key: Path
    known_hosts: Path


@dataclass(frozen=True)
class XenDom0Spec:
    """A hypervisor host that is a Xen host: HV=xen runs ``xl`` in its dom0 over SSH.  On a real
    Xen host dom0 is the host itself (the defaults: the host's SSH, migration link and deploy
    directory); an emulated lab's nested Xen host has its own SSH endpoint and addresses."""

    ssh: SshTarget
    bridges: dict[str, str]
    migration_if: str
    migration_ipv4: str  # CIDR
    deploy_dir: str
    #: optional: the host's interfaces that carry dom0's NICs on segments L and R (an emulated
    #: lab's taps), where ``make calibrate`` cuts the router's right-hand port
    taps: dict[str, str] = field(default_factory=dict)

    def host_spec(self, role: str) -> HostSpec:
        """The host of ``role``'s dom0 for :class:`migrate.testbed.hosts.SshHost`, named
        ``<role>.xen`` after its inventory table (the name its rows and messages carry)."""
        return HostSpec(f"{role}.xen", "ssh", self.ssh)


@dataclass(frozen=True)
class HostSpec:
    """One role's host.  End hosts carry segment/interface/addresses; hypervisor hosts carry
    uplinks, bridges, taps, the migration link and libvirt's URI."""

    role: str
    transport: str  # "ssh" | "local"
    ssh: SshTarget | None
    segment: str | None = None
    interface: str | None = None
    ipv4: str | None = None  # CIDR
    ipv6: str | None = None  # CIDR
    uplinks: dict[str, str] = field(default_factory=dict)
    bridges: dict[str, str] = field(default_factory=dict)
    taps: dict[str, str] = field(default_factory=dict)
    migration_if: str | None = None
    migration_ipv4: str | None = None  # CIDR
    libvirt_uri: str | None = None
    #: how the *other* hypervisor host's libvirtd reaches this one (peer-to-peer migration)
    libvirt_peer_uri: str | None = None
    #: a directory on the orchestrator with this host's TLS files for libvirt (migrate.testbed.pki.FILES),
    #: which hosts-setup installs in LIBVIRT_PKI_DIR; checked by hosts-setup, not at load
    libvirt_tls: Path | None = None
    #: a Xen host's dom0 (HV=xen drives it over SSH); None: HV=xen runs nested Xen hosts here
    xen: XenDom0Spec | None = None

    def address(self, family: int) -> str:
        """The end host's data address (no prefix length) of IP version ``family``."""
        cidr = self.ipv4 if family == 4 else self.ipv6
        assert cidr is not None, self.role
        return topo.addr(cidr)

    def interfaces(self) -> list[str]:
        """The interfaces the counter sampler reads on this host."""
        if self.role in END_ROLES:
            return [self.interface] if self.interface else []
        names = [*(self.taps[s] for s in topo.SEGMENTS if s in self.taps)]
        names += [self.uplinks[s] for s in topo.SEGMENTS if s in self.uplinks]
        names += [*([self.migration_if] if self.migration_if else [])]
        # a Xen host's ports of its dom0's NICs (sampled under their own names)
        xen_taps = self.xen.taps if self.xen is not None else {}
        return names + [xen_taps[s] for s in topo.SEGMENTS if s in xen_taps and xen_taps[s] not in names]


@dataclass(frozen=True)
class RouterPortSpec:
    """The router VM's port on one segment."""

    segment: str
    ipv4: str
    ipv6: str
    mac: str


@dataclass(frozen=True)
class Inventory:
    """A validated testbed inventory."""

    path: Path | None  # None: the embedded testbed
    name: str
    deploy_dir: str
    hosts: dict[str, HostSpec]
    router: dict[str, RouterPortSpec]

    def host(self, role: str) -> HostSpec:
        """The host playing ``role``."""
        return self.hosts[role]

    def describe(self) -> dict[str, Any]:
        """meta.json ``testbed``: where each role ran (no keys or secrets beyond paths)."""
        return {
            "inventory": str(self.path) if self.path else None,
            "name": self.name,
            "deploy_dir": self.deploy_dir,
            "hosts": {
                r: {"transport": h.transport, **({"ssh": f"{h.ssh.user}@{h.ssh.host}:{h.ssh.port}"} if h.ssh else {})}
                for r, h in self.hosts.items()
            },
        }


class _Ctx:
    """Error messages: ``<file>: <where>: <what> (<fix>)``."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def fail(self, where: str, what: str, fix: str) -> InventoryError:
        return InventoryError(f"{self.path}: {where}: {what} ({fix})")


def _table(c: _Ctx, where: str, v: Any) -> dict[str, Any]:
    if not isinstance(v, dict):
        raise c.fail(where, f"expected a table, got {type(v).__name__}", "see docs/lab.example.toml")
    return v


def _str(c: _Ctx, where: str, t: dict[str, Any], key: str, required: bool = True) -> str | None:
    v = t.get(key)
    if v is None:
        if required:
            raise c.fail(where, f"`{key}` is missing", "see docs/lab.example.toml")
        return None
    if not isinstance(v, str) or not v:
        raise c.fail(where, f"`{key}` must be a non-empty string, got {v!r}", "quote it")
    return v


def _unknown(c: _Ctx, where: str, t: dict[str, Any], allowed: set[str]) -> None:
    extra = sorted(set(t) - allowed)
    if extra:
        raise c.fail(where, f"unknown key {extra[0]!r}", f"allowed: {', '.join(sorted(allowed))}")


def _cidr(c: _Ctx, where: str, key: str, v: str | None, family: int) -> str | None:
    if v is None:
        return None
    try:
        iface = ipaddress.ip_interface(v)
    except ValueError:
        raise c.fail(where, f"`{key}` = {v!r} is not an address with prefix length", "e.g. 198.18.1.10/24") from None
    if iface.version != family or "/" not in v:
        raise c.fail(where, f"`{key}` = {v!r} is not an IPv{family} address with prefix length", "e.g. 198.18.1.10/24")
    if not any(iface.ip in net for net in ALLOWED_NETS):
        raise c.fail(
            where, f"`{key}` = {v!r} is outside the testbed ranges", "use 198.18.0.0/15 or 2001:2::/48 addresses"
        )
    return v


def _ifname(c: _Ctx, where: str, key: str, v: Any) -> str:
    if not isinstance(v, str) or not _IFNAME_RE.match(v):
        raise c.fail(where, f"`{key}` = {v!r} is not an interface name", "1-15 characters: letters, digits, _.:-")
    return v


def _per_segment(c: _Ctx, where: str, t: dict[str, Any], key: str, required: bool) -> dict[str, str]:
    v = t.get(key)
    if v is None:
        if required:
            raise c.fail(where, f"`{key}` is missing", 'e.g. { L = "upL", R = "upR" }')
        return {}
    v = _table(c, f"{where}.{key}", v)
    if set(v) != set(topo.SEGMENTS):
        raise c.fail(where, f"`{key}` must name segments L and R, has {sorted(v)}", 'e.g. { L = "upL", R = "upR" }')
    return {s: _ifname(c, where, f"{key}.{s}", v[s]) for s in topo.SEGMENTS}


def _ssh(c: _Ctx, where: str, defaults: dict[str, Any], own: Any, base: Path) -> SshTarget:
    t = {**defaults, **_table(c, f"{where}.ssh", own)}
    _unknown(c, f"{where}.ssh", t, _SSH_KEYS)
    host = _str(c, f"{where}.ssh", t, "host")
    user = _str(c, f"{where}.ssh", t, "user", required=False) or "root"
    port = t.get("port", 22)
    if not isinstance(port, int) or isinstance(port, bool) or not 0 < port < 65536:
        raise c.fail(f"{where}.ssh", f"`port` = {port!r} is not a TCP port", "an integer 1-65535")
    paths = {}
    for k in ("key", "known_hosts"):
        p = Path(_str(c, f"{where}.ssh", t, k) or "")
        paths[k] = p if p.is_absolute() else base / p
    assert host is not None
    return SshTarget(host, port, user, paths["key"], paths["known_hosts"])


def _host(c: _Ctx, role: str, t: dict[str, Any], ssh_defaults: dict[str, Any], base: Path, deploy_dir: str) -> HostSpec:
    where = f"hosts.{role}"
    is_end = role in END_ROLES
    _unknown(c, where, t, _END_KEYS if is_end else _HV_KEYS)
    transport = t.get("transport", "ssh" if "ssh" in t else None)
    if transport not in ("ssh", "local"):
        raise c.fail(where, "says neither how to reach it", 'give `ssh = { host = "..." }` or `transport = "local"`')
    ssh = _ssh(c, where, ssh_defaults, t.get("ssh"), base) if transport == "ssh" else None
    if transport == "local" and "ssh" in t:
        raise c.fail(where, 'has both `ssh` and `transport = "local"`', "keep one")
    if is_end:
        segment = _str(c, where, t, "segment")
        if segment not in topo.SEGMENTS:
            raise c.fail(where, f"`segment` = {segment!r} is not a segment", 'use "L" (A, C) or "R" (B, D)')
        if segment != topo.host(role).segment:
            raise c.fail(
                where, f"{role} is on segment {topo.host(role).segment} in paper 004's Fig. 1", "fix `segment`"
            )
        return HostSpec(
            role,
            transport,
            ssh,
            segment=segment,
            interface=_ifname(c, where, "interface", _str(c, where, t, "interface")),
            ipv4=_cidr(c, where, "ipv4", _str(c, where, t, "ipv4"), 4),
            ipv6=_cidr(c, where, "ipv6", _str(c, where, t, "ipv6"), 6),
        )
    mig = _table(c, f"{where}.migration", t.get("migration", None) or {})
    if not mig:
        raise c.fail(where, "`migration` is missing", 'e.g. { interface = "mig0", ipv4 = "198.19.255.1/30" }')
    _unknown(c, f"{where}.migration", mig, {"interface", "ipv4"})
    return HostSpec(
        role,
        transport,
        ssh,
        uplinks=_per_segment(c, where, t, "uplinks", required=True),
        bridges=_per_segment(c, where, t, "bridges", required=True),
        taps=_per_segment(c, where, t, "taps", required=False),
        migration_if=_ifname(c, f"{where}.migration", "interface", _str(c, f"{where}.migration", mig, "interface")),
        migration_ipv4=_cidr(c, f"{where}.migration", "ipv4", _str(c, f"{where}.migration", mig, "ipv4"), 4),
        libvirt_uri=_str(c, where, t, "libvirt_uri", required=False),
        libvirt_peer_uri=_str(c, where, t, "libvirt_peer_uri", required=False),
        libvirt_tls=_opt_path(c, where, t, "libvirt_tls", base),
        xen=_xen(c, where, t.get("xen"), ssh, ssh_defaults, base, mig, deploy_dir),
    )


def _abs_dir(c: _Ctx, where: str, key: str, v: str) -> str:
    if not PurePosixPath(v).is_absolute() or ".." in PurePosixPath(v).parts or v == "/":
        raise c.fail(where, f"`{key}` = {v!r} is not an absolute directory", "e.g. /var/lib/vrmig")
    return v


def _xen(
    c: _Ctx,
    where: str,
    v: Any,
    host_ssh: SshTarget | None,
    ssh_defaults: dict[str, Any],
    base: Path,
    host_mig: dict[str, Any],
    deploy_dir: str,
) -> XenDom0Spec | None:
    """A hypervisor host's ``xen`` table: its dom0, reached over SSH (default: the host's own)."""
    if v is None:
        return None
    where = f"{where}.xen"
    t = _table(c, where, v)
    _unknown(c, where, t, _XEN_KEYS)
    if "ssh" in t:
        ssh = _ssh(c, where, ssh_defaults, t["ssh"], base)
    elif host_ssh is not None:
        ssh = host_ssh
    else:
        raise c.fail(where, "dom0 is reached over SSH", 'give `ssh = { host = "..." }` (the host is local)')
    mig = _table(c, f"{where}.migration", t.get("migration", None) or host_mig)
    _unknown(c, f"{where}.migration", mig, {"interface", "ipv4"})
    bridges = _per_segment(c, where, t, "bridges", required=False) or dict(XEN_BRIDGES)
    return XenDom0Spec(
        ssh=ssh,
        bridges=bridges,
        migration_if=_ifname(c, f"{where}.migration", "interface", _str(c, f"{where}.migration", mig, "interface")),
        migration_ipv4=_cidr(c, f"{where}.migration", "ipv4", _str(c, f"{where}.migration", mig, "ipv4"), 4) or "",
        deploy_dir=_abs_dir(c, where, "deploy_dir", _str(c, where, t, "deploy_dir", required=False) or deploy_dir),
        taps=_per_segment(c, where, t, "taps", required=False),
    )


def _opt_path(c: _Ctx, where: str, t: dict[str, Any], key: str, base: Path) -> Path | None:
    """An optional path, relative to the inventory's directory unless absolute."""
    v = _str(c, where, t, key, required=False)
    if v is None:
        return None
    p = Path(v)
    return p if p.is_absolute() else base / p


def _router(c: _Ctx, t: Any) -> dict[str, RouterPortSpec]:
    if t is None:
        return {
            p.segment: RouterPortSpec(p.segment, p.ipv4, p.ipv6, p.mac) for p in topo.ROUTER_PORTS
        }  # paper 004's addresses
    t = _table(c, "router", t)
    if set(t) != set(topo.SEGMENTS):
        raise c.fail("router", f"must have ports L and R, has {sorted(t)}", "give [router.L] and [router.R]")
    out = {}
    for seg in topo.SEGMENTS:
        where = f"router.{seg}"
        p = _table(c, where, t[seg])
        _unknown(c, where, p, _PORT_KEYS)
        mac = (_str(c, where, p, "mac") or "").lower()
        if not _MAC_RE.match(mac):
            raise c.fail(where, f"`mac` = {p['mac']!r} is not a MAC address", "e.g. 52:54:00:c6:12:01")
        out[seg] = RouterPortSpec(
            seg,
            _cidr(c, where, "ipv4", _str(c, where, p, "ipv4"), 4) or "",
            _cidr(c, where, "ipv6", _str(c, where, p, "ipv6"), 6) or "",
            mac,
        )
    return out


def _check_consistent(c: _Ctx, inv: Inventory) -> None:
    """Duplicate addresses, and end hosts in their router port's subnet."""
    seen: dict[str, str] = {}
    owners: list[tuple[str, str | None]] = []
    for r, h in inv.hosts.items():
        owners += [(f"hosts.{r}.ipv4", h.ipv4), (f"hosts.{r}.ipv6", h.ipv6), (f"hosts.{r}.migration", h.migration_ipv4)]
        if h.xen is not None and h.xen.migration_ipv4 != h.migration_ipv4:
            owners.append((f"hosts.{r}.xen.migration", h.xen.migration_ipv4))
    for seg, p in inv.router.items():
        owners += [(f"router.{seg}.ipv4", p.ipv4), (f"router.{seg}.ipv6", p.ipv6)]
    for where, cidr in owners:
        if cidr is None:
            continue
        ip = str(ipaddress.ip_interface(cidr).ip)
        if ip in seen:
            raise c.fail(where, f"address {ip} is also {seen[ip]}", "make it unique")
        seen[ip] = where
    for r in END_ROLES:
        h = inv.hosts[r]
        port = inv.router[h.segment or ""]
        for fam, mine, gw in ((4, h.ipv4, port.ipv4), (6, h.ipv6, port.ipv6)):
            if mine and ipaddress.ip_interface(mine).network != ipaddress.ip_interface(gw).network:
                raise c.fail(
                    f"hosts.{r}", f"IPv{fam} {mine} is not in the router port's subnet {gw}", "put both in one subnet"
                )
    m1, m2 = (ipaddress.ip_interface(inv.hosts[r].migration_ipv4 or "") for r in HV_ROLES)
    if m1.network != m2.network:
        raise c.fail("hosts.R2.migration", f"{m2} is not in R1's migration subnet {m1.network}", "one subnet")
    xens = [inv.hosts[r].xen for r in HV_ROLES]
    if (xens[0] is None) != (xens[1] is None):
        have = "R1" if xens[0] is not None else "R2"
        raise c.fail(f"hosts.{have}.xen", "only one hypervisor host is a Xen host", "give both R1 and R2 a `xen` table")
    if xens[0] is not None and xens[1] is not None:
        x1, x2 = (ipaddress.ip_interface(x.migration_ipv4) for x in xens)  # type: ignore[union-attr]
        if x1.network != x2.network:
            raise c.fail("hosts.R2.xen.migration", f"{x2} is not in R1's dom0 subnet {x1.network}", "one subnet")
        # xl migrate sends the domain's configuration (its files' paths, its bridges) to R2 as is
        for key in ("deploy_dir", "bridges"):
            if getattr(xens[0], key) != getattr(xens[1], key):
                raise c.fail("hosts.R2.xen", f"`{key}` differs from R1's", "xl migrate needs the same on both hosts")
    targets = [(r, h.ssh.host, h.ssh.port) for r, h in inv.hosts.items() if h.ssh]
    targets += [
        (f"{r}.xen", h.xen.ssh.host, h.xen.ssh.port) for r, h in inv.hosts.items() if h.xen and h.xen.ssh != h.ssh
    ]
    for i, (r, host, port) in enumerate(targets):
        for r2, host2, port2 in targets[:i]:
            if (host, port) == (host2, port2):
                raise c.fail(f"hosts.{r}.ssh", f"{host}:{port} is also {r2}'s", "each role is its own host")


def load(path: Path | str) -> Inventory:
    """Read and validate the inventory at ``path``; raises :class:`InventoryError`."""
    path = Path(path)
    c = _Ctx(path)
    try:
        raw = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise InventoryError(f"{path}: no such inventory (TESTBED= names a TOML file, see docs/testbed.md)") from None
    except OSError as err:
        raise InventoryError(f"{path}: cannot read the inventory: {err.strerror}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
        raise InventoryError(f"{path}: not valid TOML: {err} (see docs/lab.example.toml)") from None
    _unknown(c, "top level", raw, _TOP_KEYS)
    if raw.get("version") != VERSION:
        raise c.fail("top level", f"`version` = {raw.get('version')!r} is not {VERSION}", f"set version = {VERSION}")
    name = _str(c, "top level", raw, "name") or ""
    if not re.match(r"^[A-Za-z0-9_.-]{1,40}$", name):
        raise c.fail("top level", f"`name` = {name!r} is not a plain name", "letters, digits, _.- (at most 40)")
    deploy = _str(c, "top level", raw, "deploy_dir") or ""
    if not PurePosixPath(deploy).is_absolute() or ".." in PurePosixPath(deploy).parts or deploy == "/":
        raise c.fail("top level", f"`deploy_dir` = {deploy!r} is not an absolute directory", "e.g. /var/lib/vrmig")
    ssh_defaults = _table(c, "ssh", raw.get("ssh", {}))
    _unknown(c, "ssh", ssh_defaults, _SSH_KEYS - {"host"})
    hosts_t = _table(c, "hosts", raw.get("hosts", {}))
    for role in hosts_t:
        if role not in ROLES:
            raise c.fail(f"hosts.{role}", "unknown role", f"roles are {', '.join(ROLES)}")
    for role in ROLES:
        if role not in hosts_t:
            raise c.fail(f"hosts.{role}", "missing", f"every role ({', '.join(ROLES)}) needs a host")
    base = path.resolve().parent
    hosts = {r: _host(c, r, _table(c, f"hosts.{r}", hosts_t[r]), ssh_defaults, base, deploy) for r in ROLES}
    inv = Inventory(path, name, deploy, hosts, _router(c, raw.get("router")))
    _check_consistent(c, inv)
    return inv


def embedded() -> Inventory:
    """The namespace testbed the suite builds itself (migrate.testbed.builder), as an inventory
    whose every role is ``local``."""
    hosts: dict[str, HostSpec] = {}
    for h in topo.END_HOSTS:
        hosts[h.role] = HostSpec(h.role, "local", None, h.segment, topo.HOST_IF, h.ipv4, h.ipv6)
    for r in HV_ROLES:
        hosts[r] = HostSpec(
            r,
            "local",
            None,
            uplinks={s: f"up{s}" for s in topo.SEGMENTS},
            bridges={s: f"br{s}" for s in topo.SEGMENTS},
            taps={s: f"tap{s}" for s in topo.SEGMENTS},
            migration_if=topo.MIGRATION_IF,
            migration_ipv4=topo.MIGRATION_ADDR[r],
        )
    router = {p.segment: RouterPortSpec(p.segment, p.ipv4, p.ipv6, p.mac) for p in topo.ROUTER_PORTS}
    return Inventory(None, "embedded", "", {r: hosts[r] for r in ROLES}, router)
