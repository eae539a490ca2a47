"""``hosts-check``: is every host of an inventory ready for a run?  One row per host (role,
address, reachable, kernel, tool versions, KVM, interfaces, addresses, clock synchronisation,
offset ± uncertainty) and one line per problem.  Errors are what would make a run fail or its
figures wrong (exit 2); warnings (no KVM, a clock without synchronisation whose offset is still
within the threshold) are reported and allowed.

Each host is probed in a few round trips (:mod:`migrate.testbed.probe_host` sent as
``python3 -c``, the clock exchange, ``virsh version``); nothing started on a host outlives the
check.  :func:`evaluate` turns what a host reported into its row and problems without any I/O."""

from __future__ import annotations

import ipaddress
import json
import shutil
import subprocess
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from migrate.testbed import probe_host
from migrate.testbed.hosts import (
    AuthRefused,
    ClockSample,
    HostKeyError,
    LocalHost,
    RemoteCommandError,
    SshError,
    SshHost,
    open_all,
)
from migrate.testbed.inventory import END_ROLES, HV_ROLES, HostSpec, Inventory, XenDom0Spec

DEFAULT_MAX_OFFSET_MS = 10.0
VIRSH_TIMEOUT_S = 30.0
TOOLS_ALL = ("ip", "python3")
TOOLS_HV = ("qemu-system-x86_64",)
#: probed on the hypervisor hosts but not required: the libvirtd a lab's DRIVER=libvirt drives
#: (its version goes to meta.json stack.libvirt; migrate.experiment.place.lab_facts)
PROBED_HV = ("libvirtd",)
TOOLS_END = ("irtt",)
#: helpers `make hosts-setup` deploys under <deploy_dir>/bin: traffic on the end hosts, the
#: counter sampler everywhere
HELPERS_END = ("vrgen", "vrsink", "vrsampler")
HELPERS_HV = ("vrsampler",)
INSTALL_HINT = {
    "qemu-system-x86_64": "apt-get install qemu-system-x86",
    "ip": "apt-get install iproute2",
    "python3": "apt-get install python3",
    "irtt": "apt-get install irtt",
}
ERROR, WARNING = "error", "warning"


@dataclass(frozen=True)
class Problem:
    """One thing wrong with one host: ``severity`` error (the run would fail or its figures be
    wrong) or warning (allowed)."""

    role: str
    severity: str
    message: str

    def line(self) -> str:
        """The line printed for it."""
        return f"{self.severity.upper():7} {self.role}: {self.message}"


@dataclass
class HostRow:
    """What hosts-check found on one host (None: not known, e.g. the host was unreachable)."""

    role: str
    address: str
    reachable: str  # "yes" | "unreachable" | "auth refused" | "host key"
    kernel: str | None = None
    versions: dict[str, str | None] = field(default_factory=dict)
    kvm: bool | None = None
    kvm_reason: str | None = None
    interfaces_ok: bool | None = None
    addresses_ok: bool | None = None
    sync: dict[str, Any] | None = None
    clock: dict[str, Any] | None = None
    #: the QEMU releases hosts-setup deployed (spec -> {"record": qemu.json, "version", "error"})
    stacks: dict[str, Any] = field(default_factory=dict)
    #: the libvirt releases hosts-setup deployed (spec -> {"record": libvirt.json, "version", "error"})
    libvirt_stacks: dict[str, Any] = field(default_factory=dict)
    #: the router images hosts-setup put there (profile -> {"manifest_sha256", "router_version"})
    images: dict[str, Any] = field(default_factory=dict)
    cpu_model: str | None = None
    #: the inventory's interfaces of this host -> {"present", "driver", "speed_mbps"}
    nics: dict[str, Any] = field(default_factory=dict)


@dataclass
class CheckResult:
    """All rows and problems of one check."""

    inventory: str
    rows: list[HostRow]
    problems: list[Problem]
    max_offset_ms: float

    @property
    def exit_code(self) -> int:
        """0 when nothing is an error (warnings allowed), else 2."""
        return 2 if any(p.severity == ERROR for p in self.problems) else 0

    def as_dict(self) -> dict[str, Any]:
        """The ``--json`` document."""
        return {
            "inventory": self.inventory,
            "ok": self.exit_code == 0,
            "exit_code": self.exit_code,
            "max_offset_ms": self.max_offset_ms,
            "hosts": [asdict(r) for r in self.rows],
            "problems": [asdict(p) for p in self.problems],
        }


def required_tools(spec: HostSpec) -> list[str]:
    """Tools the role needs on its host."""
    return [*TOOLS_ALL, *(TOOLS_HV if spec.role in HV_ROLES else TOOLS_END)]


def required_helpers(spec: HostSpec) -> list[str]:
    """Deployed helpers (``<deploy_dir>/bin``) the role needs."""
    return list(HELPERS_HV if spec.role in HV_ROLES else HELPERS_END)


def _iface_expectations(spec: HostSpec) -> list[tuple[str, str, bool, str | None]]:
    """(interface, inventory key, needs carrier, bridge it must be enslaved to)."""
    if spec.role in END_ROLES:
        return [(spec.interface, "interface", True, None)] if spec.interface else []
    out: list[tuple[str, str, bool, str | None]] = []
    for seg, name in spec.uplinks.items():
        out.append((name, f"uplinks.{seg}", True, spec.bridges.get(seg)))
    for seg, name in spec.bridges.items():
        out.append((name, f"bridges.{seg}", False, None))
    for seg, name in spec.taps.items():  # no carrier until QEMU opens the tap
        out.append((name, f"taps.{seg}", False, spec.bridges.get(seg)))
    if spec.migration_if:
        out.append((spec.migration_if, "migration.interface", True, None))
    for seg, name in (spec.xen.taps if spec.xen is not None else {}).items():  # a Xen host's ports of dom0's NICs
        out.append((name, f"xen.taps.{seg}", False, spec.bridges.get(seg)))
    return out


def _addr_expectations(spec: HostSpec) -> list[tuple[str, str, str]]:
    """(interface, CIDR, inventory key)."""
    out = []
    if spec.interface:
        out += [(spec.interface, c, k) for c, k in ((spec.ipv4, "ipv4"), (spec.ipv6, "ipv6")) if c]
    if spec.migration_if and spec.migration_ipv4:
        out.append((spec.migration_if, spec.migration_ipv4, "migration.ipv4"))
    return out


def _check_links(spec: HostSpec, links: list[dict[str, Any]], p: list[Problem]) -> tuple[bool, bool]:
    by_name = {link.get("ifname"): link for link in links}
    ifaces_ok = True
    where = f"hosts.{spec.role}"
    for name, key, carrier, master in _iface_expectations(spec):
        link = by_name.get(name)
        if link is None:
            p.append(Problem(spec.role, ERROR, f"interface {name} missing ({where}.{key}: create it or fix the name)"))
            ifaces_ok = False
            continue
        flags = set(link.get("flags", []))
        if "UP" not in flags:
            p.append(Problem(spec.role, ERROR, f"interface {name} is down (ip link set {name} up)"))
            ifaces_ok = False
        elif carrier and "LOWER_UP" not in flags:
            p.append(Problem(spec.role, ERROR, f"interface {name} has no carrier (cable, switch port or peer down)"))
            ifaces_ok = False
        if master and link.get("master") != master:
            now = f"in {link['master']}" if link.get("master") else "in no bridge"
            p.append(
                Problem(
                    spec.role,
                    ERROR,
                    f"interface {name} is {now}, not in bridge {master} (ip link set {name} master {master})",
                )
            )
            ifaces_ok = False
    addrs_ok = True
    for name, cidr, key in _addr_expectations(spec):
        want = ipaddress.ip_interface(cidr)
        have = [
            a
            for a in by_name.get(name, {}).get("addr_info", [])
            if a.get("local") and ipaddress.ip_address(a["local"]) == want.ip
        ]
        if not have:
            p.append(
                Problem(
                    spec.role, ERROR, f"address {cidr} not on {name} ({where}.{key}: ip addr add {cidr} dev {name})"
                )
            )
            addrs_ok = False
        elif have[0].get("prefixlen") != want.network.prefixlen:
            p.append(
                Problem(
                    spec.role,
                    ERROR,
                    f"address {want.ip} on {name} has prefix /{have[0].get('prefixlen')}, {where}.{key} says {cidr}",
                )
            )
            addrs_ok = False
        elif have[0].get("dadfailed"):
            p.append(Problem(spec.role, ERROR, f"address {cidr} on {name} failed duplicate address detection"))
            addrs_ok = False
    return ifaces_ok, addrs_ok


def _fmt_ms(ns: int) -> str:
    return f"{ns / 1e6:+.3f}"


def evaluate(
    spec: HostSpec,
    facts: dict[str, Any],
    sync: dict[str, Any] | None,
    clock: ClockSample | None,
    *,
    deploy_dir: str,
    testbed_arg: str,
    max_offset_ms: float = DEFAULT_MAX_OFFSET_MS,
    address: str = "",
) -> tuple[HostRow, list[Problem]]:
    """The row and the problems of one reachable host, from what its probe reported."""
    p: list[Problem] = []
    role = spec.role
    tools = facts.get("tools", {})
    for t in required_tools(spec):
        if not tools.get(t):
            p.append(Problem(role, ERROR, f"tool missing: {t} ({INSTALL_HINT.get(t, 'install it')})"))
    missing = [h["path"] for h in facts.get("helpers", {}).values() if not h.get("ok")]
    if missing:  # one line: the first path in full, the others by name
        names = ", ".join([missing[0], *(m.rpartition("/")[2] for m in missing[1:])])
        p.append(Problem(role, ERROR, f"helper missing: {names} (run make hosts-setup TESTBED={testbed_arg})"))
    kept = {*required_tools(spec), *(PROBED_HV if role in HV_ROLES else ())}
    versions = {k: v for k, v in facts.get("versions", {}).items() if k in kept}
    kvm = facts.get("kvm")
    kvm_ok = kvm.get("ok") if kvm else None
    if role in HV_ROLES and kvm is not None and not kvm_ok:
        p.append(
            Problem(
                role,
                WARNING,
                f"no KVM ({kvm.get('reason')}): QEMU runs the router under TCG; runs work but their figures "
                "(downtime, migration time, forwarding rate) differ from KVM's",
            )
        )
    links = facts.get("links")
    if links is None:
        p.append(Problem(role, ERROR, f"cannot read interfaces: {facts.get('links_error') or 'no answer'}"))
        ifaces_ok = addrs_ok = None
    else:
        ifaces_ok, addrs_ok = _check_links(spec, links, p)
    max_ns = max_offset_ms * 1e6
    if clock is not None:
        off, unc = abs(clock.offset_ns), clock.uncertainty_ns
        stated = f"{_fmt_ms(clock.offset_ns)} ± {unc / 1e6:.3f} ms"
        if off - unc > max_ns:
            p.append(
                Problem(
                    role,
                    ERROR,
                    f"clock offset {stated} exceeds {max_offset_ms:g} ms (synchronise the hosts: chrony or PTP; "
                    "--max-offset-ms sets the threshold)",
                )
            )
        elif off + unc > max_ns:
            p.append(
                Problem(
                    role,
                    ERROR,
                    f"clock offset {stated} cannot be bounded below {max_offset_ms:g} ms (round trip too long)",
                )
            )
    if sync is not None and clock is not None and clock.n > 0 and sync.get("synchronised") is not True:
        how = sync.get("method") or "unknown"
        why = sync.get("reason") or f"{how} reports it unsynchronised"
        msg = f"clock not synchronised ({why})"
        if not any(x.message.startswith("clock offset") for x in p):
            msg += (
                f"; offset now {_fmt_ms(clock.offset_ns)} ms is within {max_offset_ms:g} ms but may drift during a run"
            )
        p.append(Problem(role, WARNING, msg))
    row = HostRow(
        role=role,
        address=address,
        reachable="yes",
        kernel=facts.get("kernel"),
        versions={**versions, "python3": facts.get("python")},
        kvm=kvm_ok if role in HV_ROLES else None,
        kvm_reason=(kvm or {}).get("reason") if role in HV_ROLES else None,
        interfaces_ok=ifaces_ok,
        addresses_ok=addrs_ok,
        sync=sync,
        clock=clock.as_dict() if clock else None,
        stacks=facts.get("stacks") or {} if role in HV_ROLES else {},
        libvirt_stacks=facts.get("libvirt_stacks") or {} if role in HV_ROLES else {},
        images=facts.get("images") or {} if role in HV_ROLES else {},
        cpu_model=facts.get("cpu_model"),
        nics=facts.get("nics") or {},
    )
    return row, p


def unreachable_row(spec: HostSpec, err: SshError, address: str) -> tuple[HostRow, list[Problem]]:
    """The row and the one problem of a host that could not be opened."""
    kind = (
        "auth refused"
        if isinstance(err, AuthRefused)
        else "host key"
        if isinstance(err, HostKeyError)
        else "unreachable"
    )
    msg = str(err)
    if msg.startswith(f"{spec.role} (") and "): " in msg:
        msg = msg.split("): ", 1)[1]  # the row and the line name the host already
    return HostRow(spec.role, address, kind), [Problem(spec.role, ERROR, f"{address}: {msg}")]


def _address(spec: HostSpec) -> str:
    if spec.ssh is None:
        return "local"
    t = spec.ssh
    return f"{t.user}@{t.host}" + (f":{t.port}" if t.port != 22 else "")


def _probe(host: SshHost | LocalHost, inv: Inventory) -> tuple[dict[str, Any], dict[str, Any], ClockSample | None]:
    spec = host.spec
    args = {
        "tools": sorted({*required_tools(spec), "virsh", *(PROBED_HV if spec.role in HV_ROLES else ())}),
        "helpers": required_helpers(spec),
        "deploy_dir": inv.deploy_dir,
        "kvm": spec.role in HV_ROLES,
        "nics": spec.interfaces(),
    }
    cp = host.run(["python3", "-c", probe_host.source(), "facts", json.dumps(args)], check=False, timeout_s=60)
    if cp.returncode == 127:
        facts: dict[str, Any] = {"tools": {"python3": None}, "links": None, "links_error": "python3 missing"}
        return facts, {"method": None, "synchronised": None, "reason": "python3 missing"}, None
    if cp.returncode != 0:
        tail = cp.stderr.decode(errors="replace").strip().splitlines()[-1:] or ["no message"]
        raise RemoteCommandError(f"host probe failed: {tail[0]}", cp.returncode, cp.stderr)
    facts = json.loads(cp.stdout)
    return facts, host.sync_state(), host.clock()


def _virsh(argv: list[str], run: Any) -> str | None:
    """None if ``virsh ... version`` worked, else its last error line."""
    try:
        cp = run(argv)
    except RemoteCommandError as err:
        return str(err)
    except subprocess.TimeoutExpired:
        return f"no answer within {VIRSH_TIMEOUT_S:g} s"
    if cp.returncode == 0:
        return None
    lines = (cp.stderr or b"").decode(errors="replace").strip().splitlines()
    return next(
        (x.strip() for x in lines if x.strip().startswith("error:") and "failed to connect" not in x), None
    ) or (lines[-1].strip() if lines else f"virsh exited {cp.returncode}")


def _check_libvirt(inv: Inventory, opened: dict[str, Any], facts: dict[str, dict[str, Any]]) -> list[Problem]:
    p: list[Problem] = []
    reachable: dict[str, bool] = {}
    for role in HV_ROLES:
        uri = inv.hosts[role].libvirt_uri
        if not uri:
            continue
        if shutil.which("virsh") is None:
            p.append(Problem(role, ERROR, "virsh not installed on the orchestrator (apt-get install libvirt-clients)"))
            return p
        err = _virsh(
            ["virsh", "-c", uri, "version"],
            lambda a: subprocess.run(a, stdin=subprocess.DEVNULL, capture_output=True, timeout=VIRSH_TIMEOUT_S),
        )
        reachable[role] = err is None
        if err:
            p.append(Problem(role, ERROR, f"libvirt unreachable at {uri} from the orchestrator: {err}"))
    # peer to peer: R1's libvirtd connects to R2's by R2's libvirt_peer_uri, from R1's network;
    # virsh on R1 makes the same connection from there
    r1, r2 = HV_ROLES
    peer = inv.hosts[r2].libvirt_peer_uri
    host1 = opened.get(r1)
    if peer and reachable.get(r2) and isinstance(host1, SshHost | LocalHost):
        if not facts.get(r1, {}).get("tools", {}).get("virsh"):
            p.append(Problem(r1, WARNING, f"virsh not installed: cannot check that {r1} reaches {r2}'s libvirt"))
        else:
            err = _virsh(
                ["virsh", "-c", peer, "version"],
                lambda a: host1.run(a, check=False, timeout_s=VIRSH_TIMEOUT_S),
            )
            if err:
                p.append(
                    Problem(
                        r1,
                        ERROR,
                        f"{r1} cannot reach {r2}'s libvirt at its libvirt_peer_uri {peer}: {err} (DRIVER=libvirt "
                        f"migrates peer to peer: {r1}'s daemon connects there; check {r2}'s libvirtd listen "
                        "address and the migration link)",
                    )
                )
    return p


#: what hosts-check asks a Xen host's dom0 (needs no python): argv migration NIC, bridge L,
#: bridge R; one fact per line
DOM0_PROBE_SH = r"""echo "kernel $(uname -r)"
echo "xen $(xl info xen_version 2>/dev/null | tr -d ' ')"
for t in xl socat xenstore-read sha256sum setsid; do command -v "$t" >/dev/null 2>&1 || echo "missing $t"; done
for i in "$1" "$2" "$3"; do
    if [ -d "/sys/class/net/$i" ]; then echo "if $i $(cat "/sys/class/net/$i/operstate")"; else echo "noif $i"; fi
done
ip -4 -o addr show dev "$1" 2>/dev/null | while read -r _ _ _ a _; do echo "addr $a"; done
for c in /proc/[0-9]*/cmdline; do tr '\0' ' ' < "$c" 2>/dev/null; echo; done | grep -q 'xenconsoled.*log=guest' ||
    echo "noguestlog"
xl list 2>/dev/null | while read -r n _; do case $n in vrmig-router*) echo "domain $n" ;; esac; done"""


def evaluate_dom0(r: str, x: XenDom0Spec, address: str, out: str) -> tuple[HostRow, list[Problem]]:
    """``r``'s dom0 row and problems from :data:`DOM0_PROBE_SH`'s output ``out``."""
    role = f"{r}.xen"
    facts: dict[str, list[str]] = {}
    for line in out.splitlines():
        k, _, v = line.partition(" ")
        facts.setdefault(k, []).append(v)
    xen = (facts.get("xen") or [""])[0]
    row = HostRow(role, address, "yes", kernel=(facts.get("kernel") or [None])[0], versions={"xen": xen or None})
    p = [Problem(role, ERROR, f"{t} missing in dom0 (HV=xen runs it there)") for t in facts.get("missing", [])]
    if not xen:
        p.append(Problem(role, ERROR, "`xl info` gives no Xen version: this is not a working dom0"))
    states = dict(v.split(" ", 1) for v in facts.get("if", []))
    for name in facts.get("noif", []):
        p.append(Problem(role, ERROR, f"interface {name} missing in dom0 (fix hosts.{r}.xen)"))
    for name, state in states.items():
        if state == "down":
            p.append(Problem(role, ERROR, f"interface {name} is down in dom0"))
    row.interfaces_ok = not facts.get("noif") and all(v != "down" for v in states.values())
    row.addresses_ok = x.migration_ipv4 in facts.get("addr", [])
    if not row.addresses_ok:
        p.append(Problem(role, ERROR, f"{x.migration_if} lacks {x.migration_ipv4} in dom0 (fix hosts.{r}.xen)"))
    if facts.get("noguestlog") is not None:
        p.append(Problem(role, ERROR, "xenconsoled does not log guest consoles (--log=guest): the router's "
                         "readiness is read there (Debian: XENCONSOLED_TRACE=guest)"))  # fmt: skip
    for d in facts.get("domain", []):  # only HV=xen runs refuse to start then: the driver checks it
        p.append(Problem(role, WARNING, f"domain {d} is there (a killed run's?): HV=xen refuses to start until "
                         "make clean-testbed TESTBED=... destroys it"))  # fmt: skip
    return row, p


def check_xen_dom0s(inv: Inventory, control_dir: Path) -> tuple[list[HostRow], list[Problem]]:
    """One row per Xen host's dom0 (``hosts.R*.xen``): reachable over SSH, Xen's version, the
    tools HV=xen runs there, the migration NIC with its address, the bridges, xenconsoled
    logging guest consoles, and no router domain left by a killed run."""
    rows: list[HostRow] = []
    problems: list[Problem] = []
    for r in HV_ROLES:
        x = inv.host(r).xen
        if x is None:
            continue
        spec = x.host_spec(r)
        address = f"{x.ssh.host}:{x.ssh.port}"
        try:
            with SshHost(spec, control_dir) as h:
                out = h.run(["sh", "-c", DOM0_PROBE_SH, "sh", x.migration_if, x.bridges["L"], x.bridges["R"]]).stdout
        except (SshError, RemoteCommandError) as err:
            if isinstance(err, SshError):
                row, p = unreachable_row(spec, err, address)
            else:
                row, p = HostRow(spec.role, address, "yes"), [Problem(spec.role, ERROR, f"probe failed: {err}")]
            rows.append(row)
            problems += p
            continue
        row, p = evaluate_dom0(r, x, address, out.decode(errors="replace"))
        rows.append(row)
        problems += p
    return rows, problems


def check_inventory(
    inv: Inventory, control_dir: Path, *, testbed_arg: str, max_offset_ms: float = DEFAULT_MAX_OFFSET_MS
) -> CheckResult:
    """Open every host, probe it, close it; every finding as rows and problems."""
    opened = open_all(inv, control_dir)
    rows: dict[str, HostRow] = {}
    problems: dict[str, list[Problem]] = {}
    facts_by_role: dict[str, dict[str, Any]] = {}
    try:

        def one(role: str) -> tuple[HostRow, list[Problem]]:
            spec = inv.hosts[role]
            h = opened[role]
            if isinstance(h, SshError):
                return unreachable_row(spec, h, _address(spec))
            try:
                facts, sync, clock = _probe(h, inv)
            except (RemoteCommandError, SshError) as err:
                return HostRow(role, _address(spec), "yes"), [Problem(role, ERROR, f"probe failed: {err}")]
            facts_by_role[role] = facts
            return evaluate(
                spec,
                facts,
                sync,
                clock,
                deploy_dir=inv.deploy_dir,
                testbed_arg=testbed_arg,
                max_offset_ms=max_offset_ms,
                address=_address(spec),
            )

        with ThreadPoolExecutor(max_workers=len(opened) or 1, thread_name_prefix="vrmig-check") as ex:
            for role, (row, p) in zip(opened, ex.map(one, list(opened)), strict=True):
                rows[role], problems[role] = row, p
        lib = _check_libvirt(inv, opened, facts_by_role)
        lib += compare_stacks([rows[r] for r in HV_ROLES if r in rows], testbed_arg)
        lib += compare_images([rows[r] for r in HV_ROLES if r in rows], testbed_arg)
        lib += compare_libvirt_releases([rows[r] for r in HV_ROLES if r in rows], testbed_arg)
        dom0_rows, dom0_problems = check_xen_dom0s(inv, control_dir)
    finally:
        for h in opened.values():
            if not isinstance(h, SshError):
                h.close()
    flat = [x for r in inv.hosts for x in problems.get(r, [])]
    flat += lib + dom0_problems
    all_rows = [rows[r] for r in inv.hosts] + dom0_rows
    return CheckResult(str(inv.path) if inv.path else "embedded", all_rows, flat, max_offset_ms)


def compare_stacks(rows: list[HostRow], testbed_arg: str) -> list[Problem]:
    """The default stack's QEMU on the hypervisor hosts (docs/stack.md): a warning where one lacks
    it or it does not run (runs there need QEMU=system), an error where R1 and R2 run different
    builds of it (a migration between them would measure two stacks)."""
    from migrate.core.stack import DEFAULT_QEMU

    up = [r for r in rows if r.reachable == "yes"]
    seen, out = _deployed_versions(
        [(r.role, r.stacks.get(DEFAULT_QEMU)) for r in up],
        lambda fault: (
            f"QEMU {DEFAULT_QEMU} (the default stack) {fault or 'not deployed'}: run make hosts-setup "
            f"TESTBED={testbed_arg}; until then runs there need QEMU=system"
        ),
        lambda version: version,
    )
    return out + _differs(f"QEMU {DEFAULT_QEMU}", seen, testbed_arg)


def _deployed_versions(
    stacks: list[tuple[str, dict[str, Any] | None]], warning: Callable[[str | None], str], version: Callable[[Any], str]
) -> tuple[dict[str, str], list[Problem]]:
    """Per (host role, deployed stack entry or None), the ``version(...)`` of the entry, and a
    warning ``warning(None)`` where it is not deployed or ``warning("does not run (<error>)")``
    where it has no version."""
    seen: dict[str, str] = {}
    out: list[Problem] = []
    for role, st in stacks:
        if st is None or not st.get("version"):
            out.append(Problem(role, WARNING, warning(None if st is None else f"does not run ({st.get('error')})")))
            continue
        seen[role] = version(st["version"])
    return seen, out


def _differs(what: str, seen: dict[str, str], testbed_arg: str) -> list[Problem]:
    """An error when the hypervisor hosts of ``seen`` (role -> version) hold different builds
    of ``what``, named on the first of them; none when they agree."""
    if len(set(seen.values())) <= 1:
        return []
    text = "; ".join(f"{role}: {v}" for role, v in seen.items())
    msg = f"{what} differs between the hypervisor hosts ({text}): run make hosts-setup TESTBED={testbed_arg}"
    return [Problem(next(iter(seen)), ERROR, msg)]


def compare_libvirt_releases(rows: list[HostRow], testbed_arg: str) -> list[Problem]:
    """The libvirt releases hosts-setup deployed on the hypervisor hosts (used only by runs with
    LIBVIRT=<release>): a warning where one host lacks a release another has, or it does not run
    there; an error where R1 and R2 hold different builds of it."""
    out: list[Problem] = []
    up = [r for r in rows if r.reachable == "yes"]
    for spec in sorted({s for r in up for s in r.libvirt_stacks}):
        seen, warnings = _deployed_versions(
            [(r.role, r.libvirt_stacks.get(spec)) for r in up],
            lambda fault, spec=spec: (
                f"libvirt {spec} {fault or 'is not deployed'}: runs with LIBVIRT={spec} need it "
                f"on R1 and R2: run make hosts-setup TESTBED={testbed_arg}"
            ),
            lambda version: str(version).rsplit(" ", 1)[-1],
        )
        out += warnings + _differs(f"libvirt {spec}", seen, testbed_arg)
    return out


def compare_images(rows: list[HostRow], testbed_arg: str) -> list[Problem]:
    """The router images on the hypervisor hosts: an error where R1 and R2 hold different builds
    of one profile (the router would change build when it migrates)."""
    out: list[Problem] = []
    up = [r for r in rows if r.reachable == "yes"]
    for profile in sorted({p for r in up for p in r.images}):
        have = {r.role: r.images[profile] for r in up if profile in r.images}
        if len(have) > 1 and len({h.get("manifest_sha256") for h in have.values()}) > 1:
            text = "; ".join(f"{role}: {h.get('router_version') or '?'}" for role, h in have.items())
            msg = f"router image {profile} differs between the hypervisor hosts ({text}): "
            out.append(Problem(next(iter(have)), ERROR, msg + f"run make hosts-setup TESTBED={testbed_arg}"))
    return out


def _stack_cell(r: HostRow) -> str:
    from migrate.core.stack import DEFAULT_QEMU

    if r.role not in HV_ROLES or r.reachable != "yes":
        return ""
    st = r.stacks.get(DEFAULT_QEMU)
    return _version(st.get("version")) if st and st.get("version") else "-"


def _yn(v: bool | None) -> str:
    return "-" if v is None else "yes" if v else "NO"


def _sync_cell(sync: dict[str, Any] | None) -> str:
    if not sync:
        return "-"
    m = sync.get("method") or "?"
    s = sync.get("synchronised")
    return m if m == "none" else f"{m} {'ok' if s else 'unsync' if s is False else '?'}"


def _clock_cell(clock: dict[str, Any] | None) -> str:
    if not clock:
        return "-"
    if clock["n"] == 0:
        return "same clock"
    return f"{clock['offset_ns'] / 1e6:+.3f} ± {clock['uncertainty_ns'] / 1e6:.3f} ms"


def _version(v: str | None) -> str:
    """The version number out of a tool's version line."""
    if not v:
        return "-"
    for w in v.replace(",", " ").split():
        if w[:1].isdigit():
            return w
    return v


def _qemu_cell(v: dict[str, str | None]) -> str:
    """QEMU's version; a dom0's row: Xen's."""
    if "qemu-system-x86_64" in v:
        return _version(v.get("qemu-system-x86_64"))
    return f"xen {v['xen']}" if v.get("xen") else ""


def format_table(result: CheckResult) -> str:
    """The rows as an aligned text table, then one line per problem, then the verdict."""
    head = [
        "role",
        "address",
        "reachable",
        "kernel",
        "qemu",
        "stack",
        "irtt",
        "python",
        "kvm",
        "ifaces",
        "addrs",
        "sync",
        "offset",
    ]
    body = []
    for r in result.rows:
        v = r.versions
        body.append(
            [
                r.role,
                r.address,
                r.reachable,
                r.kernel or "-",
                _qemu_cell(v),
                _stack_cell(r),
                _version(v.get("irtt")) if "irtt" in v else "",
                _version(v.get("python3")),
                _yn(r.kvm) if r.reachable == "yes" and r.role in HV_ROLES else "",
                _yn(r.interfaces_ok),
                _yn(r.addresses_ok),
                _sync_cell(r.sync),
                _clock_cell(r.clock),
            ]
        )
    widths = [max(len(str(x)) for x in col) for col in zip(head, *body, strict=True)]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in [head, *body]]
    lines += [p.line() for p in result.problems]
    n_err = sum(p.severity == ERROR for p in result.problems)
    n_warn = len(result.problems) - n_err
    verdict = "OK" if n_err == 0 else "FAILED"
    lines.append(f"hosts-check: {verdict}: {len(result.rows)} hosts, {n_err} error(s), {n_warn} warning(s)")
    return "\n".join(lines)
