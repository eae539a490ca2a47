"""Where a run-like command runs: the embedded testbed (network namespaces of this machine) or a
lab's hosts reached over SSH (``TESTBED=``), as one interface.

:func:`place_for` is the one place that tells the two apart.  What differs between them before a
run starts (which scenarios a lab can run, the preflight check of its hosts, the accelerator and
QEMU its hypervisor hosts have) and how the run's testbed is opened and closed are methods of
:class:`Embedded` and :class:`Lab`; what differs while it runs is the testbed's own
(migrate.testbed.builder.Testbed, migrate.testbed.labbed.LabBed).  The callers (a run, a
calibration, a baseline, a sweep's preflight) hold a place and never ask which kind it is."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

from migrate.core import knobs
from migrate.core.errors import ConfigError, DependencyError, TestbedError
from migrate.core.registry import Registry
from migrate.core.stack import DEFAULT_LIBVIRT, DEFAULT_QEMU, LIBVIRT_VERSION_LINE
from migrate.drivers.base import Driver, load_driver
from migrate.drivers.kvm.driver import QEMU, check_qemu_knobs
from migrate.experiment import peering
from migrate.experiment.instruments import Instruments
from migrate.model import routing
from migrate.model.scenario import Scenario
from migrate.testbed import topology as topo
from migrate.testbed.builder import Testbed
from migrate.testbed.inventory import Inventory, embedded
from migrate.testbed.labbed import LabBed


class Place(Protocol):
    """Where a run goes: what it admits, its hypervisor hosts' facts, and its testbed."""

    #: meta.json ``lab_check`` (None: no hosts to check)
    check: dict[str, Any] | None

    @property
    def inventory(self) -> Inventory:
        """The testbed described as an inventory."""
        ...

    def admit(self, scenario: Scenario) -> None:
        """Refuse (ConfigError, one line) a scenario this place cannot run, before anything starts."""

    def preflight(self) -> None:
        """Check the place's hosts (one line and exit 2 on the first problem), before anything starts."""

    def driver(self, hv: str, driver: str) -> type[Driver]:
        """The driver class of ``hv``/``driver`` in its form for this place."""
        ...

    def facts(self, scenario: Scenario, local: dict[str, Any]) -> dict[str, Any]:
        """The driver's ``local`` facts (this machine's preflight) as they hold where the router runs."""
        ...

    def check_knobs(self, scenario: Scenario, facts: dict[str, Any]) -> None:
        """Refuse (ConfigError, one line) a QEMU or libvirt knob the hypervisor hosts lack."""

    def describe(self, meta: dict[str, Any]) -> None:
        """Add what the place checked to meta.json's first write."""

    def open(self, registry: Registry, miglink_bps: int | None = None) -> contextlib.AbstractContextManager[Testbed]:
        """The run's testbed, entered: on leaving, what was opened for the run is closed (the
        embedded testbed's namespaces are the registry's to remove)."""
        ...


class Embedded:
    """The embedded testbed: paper 004's Fig. 1 built of namespaces on this machine by the run."""

    check: dict[str, Any] | None = None

    @property
    def inventory(self) -> Inventory:
        """The embedded testbed described as an inventory."""
        return embedded()

    def admit(self, scenario: Scenario) -> None:
        """Every scenario the checks of Scenario admit runs here."""

    def preflight(self) -> None:
        """This machine's checks are the driver's (``Driver.preflight``)."""

    def driver(self, hv: str, driver: str) -> type[Driver]:
        """The driver class of ``hv``/``driver``."""
        return load_driver(hv, driver, False)

    def facts(self, scenario: Scenario, local: dict[str, Any]) -> dict[str, Any]:
        """This machine is where the router runs: ``local`` as it is."""
        return dict(local)

    def check_knobs(self, scenario: Scenario, facts: dict[str, Any]) -> None:
        """The driver's preflight checked the knobs against this machine's QEMU and libvirt."""

    def describe(self, meta: dict[str, Any]) -> None:
        """Nothing was checked beyond this machine (meta.json's host facts)."""

    @contextlib.contextmanager
    def open(self, registry: Registry, miglink_bps: int | None = None) -> Iterator[Testbed]:
        """A testbed of the registry's namespaces (built by ``Testbed.build``, removed by the registry)."""
        yield Testbed(registry.prefix, miglink_bps)


class Lab:
    """A lab's hosts, described by the inventory at ``path`` and reached over SSH."""

    def __init__(self, inv: Inventory, path: Path) -> None:
        self.inv = inv
        self.path = path
        self.check: dict[str, Any] | None = None

    @property
    def inventory(self) -> Inventory:
        """The lab's inventory."""
        return self.inv

    def admit(self, scenario: Scenario) -> None:
        """Refuse what a lab run cannot do (:func:`lab_supports`)."""
        lab_supports(scenario, self.inv)

    def preflight(self) -> None:
        """What ``make hosts-check`` checks, on every host (:func:`lab_preflight`)."""
        self.check = lab_preflight(self.inv, self.path)

    def driver(self, hv: str, driver: str) -> type[Driver]:
        """The driver class of ``hv``/``driver`` in its form for a lab's hosts."""
        return load_driver(hv, driver, True)

    def facts(self, scenario: Scenario, local: dict[str, Any]) -> dict[str, Any]:
        """``local`` with R1's and R2's accelerator and QEMU as the preflight check found them
        (:func:`lab_facts`)."""
        if self.check is None:
            raise RuntimeError("Lab.facts before Lab.preflight")
        return {**local, **lab_facts(self.check, scenario, local)}

    def check_knobs(self, scenario: Scenario, facts: dict[str, Any]) -> None:
        """The knobs against R1's and R2's QEMU and libvirtd (``facts`` from :meth:`facts`)."""
        check_knobs(scenario, facts, probe=False)

    def describe(self, meta: dict[str, Any]) -> None:
        """meta.json ``lab_check``: the preflight check of every host."""
        meta["lab_check"] = self.check

    @contextlib.contextmanager
    def open(self, registry: Registry, miglink_bps: int | None = None) -> Iterator[Testbed]:
        """The lab's hosts, connected and prepared (:func:`open_lab`), with the preflight's clock
        offsets as the run's start measurement."""
        with open_lab(self.inv, registry) as bed:
            if self.check is not None:
                bed.clocks_from_check(self.check)
            yield bed


def preflight(scenario: Scenario, place: Place) -> tuple[type[Driver], dict[str, Any]]:
    """Every check of a run that needs no side effects, after the place's own (``place`` admitted
    and preflighted): root, the instruments' and routing peers'
    tools, the driver's dependencies, and the QEMU and libvirt knobs where the router runs.
    Returns the driver class in its form for ``place`` and its facts (versions, accelerator) as
    they hold there."""
    if os.geteuid() != 0:
        raise DependencyError("vrmig must run as root (it creates network namespaces): run it as root")
    Instruments.check()
    peering.check(scenario)
    driver_cls = place.driver(scenario.hv, scenario.driver)
    facts = place.facts(scenario, driver_cls.preflight(scenario))
    place.check_knobs(scenario, facts)
    return driver_cls, facts


def check_knobs(scenario: Scenario, facts: dict[str, Any], probe: bool = True) -> None:
    """Refuse (ConfigError, one line) a QEMU knob of ``scenario`` that the QEMU of ``facts`` (a
    preflight's; on a lab, each hypervisor host's ``qemu_by_host``) or libvirt lacks; ``probe``:
    also ask this machine's QEMU for its multifd compression methods."""
    if scenario.hv != "kvm":
        return
    by_host = facts.get("qemu_by_host")
    if by_host:
        for host, qemu in by_host.items():
            check_qemu_knobs(scenario, qemu, f" on {host}", probe=False)
    else:
        check_qemu_knobs(scenario, facts.get("qemu"), " here", probe=probe, argv=facts.get("qemu_argv") or (QEMU,))
    if scenario.driver == "libvirt":
        knobs.check_libvirt(scenario.to_dict(), (facts.get("libvirt") or {}).get("daemon"))


def place_for(testbed: Path | None) -> Embedded | Lab:
    """The embedded testbed (``testbed`` None), or the lab of the inventory at ``testbed`` (loaded
    and checked: bad input is one line, exit 2, nothing started)."""
    if testbed is None:
        return Embedded()
    from migrate.testbed.inventory import load

    return Lab(load(testbed), testbed)


def lab_preflight(inv: Inventory, testbed: Path) -> dict[str, Any]:
    """What ``make hosts-check`` checks, before anything starts: an unreachable host, a refused
    login, a missing tool or helper, a missing interface or address, a clock off by more than
    10 ms is one line and exit 2 (the first problem; hosts-check lists them all).  Returns the
    check as meta.json ``lab_check``."""
    import tempfile

    from migrate.labs.check import ERROR, check_inventory

    with tempfile.TemporaryDirectory(prefix="vrmig-preflight-") as d:
        result = check_inventory(inv, Path(d), testbed_arg=str(testbed))
    errors = [p for p in result.problems if p.severity == ERROR]
    if errors:
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise ConfigError(
            f"{testbed}: {errors[0].role}: {errors[0].message}{more}; make hosts-check TESTBED={testbed} lists them"
        )
    return result.as_dict()


#: (HV, DRIVER) a lab run can do
LAB_RUNS = (("kvm", "qmp"), ("kvm", "libvirt"), ("criu", "qmp"), ("xen", "qmp"))


def lab_supports_peering(scenario: Scenario, inv: Inventory) -> None:
    """PEERING on a lab: BIRD peers on A and B (the bird image that hosts-setup unpacked there),
    with paper 004's addresses, which the peers' configurations and the router's use."""
    if scenario.peer_daemon != "bird":
        raise ConfigError(
            f"TESTBED= runs PEERING with BIRD peers only (not PEER_DAEMON={scenario.peer_daemon}): "
            "FRR peers run on the embedded testbed (no TESTBED)"
        )
    if scenario.churn_rps is not None:
        raise ConfigError("TESTBED= takes no CHURN: the churned routes are written on the embedded testbed's B")
    want = {r: topo.host(r).ipv4 for r in routing.PEER_ROLES.values()}
    got = {r: inv.host(r).ipv4 for r in want}
    ports = {p.segment: p.ipv4 for p in topo.ROUTER_PORTS}
    got_ports = {seg: inv.router[seg].ipv4 for seg in ports}
    if got != want or got_ports != ports:
        raise ConfigError(
            f"{inv.path}: PEERING on a lab needs paper 004's addresses on A, B and the router's ports "
            f"(A {want['A']}, B {want['B']}, router L {ports['L']}, R {ports['R']}): the peers' BGP/OSPF "
            "configurations use them"
        )


def lab_supports(scenario: Scenario, inv: Inventory) -> None:
    """Refuse what a lab run (TESTBED=) cannot do yet, before anything starts."""
    if scenario.peering:
        lab_supports_peering(scenario, inv)
    if (scenario.hv, scenario.driver) not in LAB_RUNS:
        raise ConfigError(
            f"TESTBED= runs HV=kvm with DRIVER=qmp or libvirt, HV=criu and HV=xen, so far (not HV={scenario.hv} "
            f"DRIVER={scenario.driver}): use the embedded testbed (no TESTBED) for the others"
        )
    if scenario.driver == "libvirt":
        for r in topo.HYPERVISOR_HOSTS:
            h = inv.host(r)
            if not h.libvirt_uri or not h.libvirt_peer_uri:
                raise ConfigError(
                    f"{inv.path}: hosts.{r}: DRIVER=libvirt needs libvirt_uri and libvirt_peer_uri "
                    "(see docs/lab.example.toml)"
                )
    if scenario.fault is not None or scenario.miglink_bps is not None or scenario.criu_host != "local":
        raise ConfigError("TESTBED= takes no FAULT, MIGLINK or CRIU_HOST: the lab's own links are measured as they are")
    if (scenario.qemu or "").startswith("/"):
        raise ConfigError(
            f"QEMU={scenario.qemu} on a lab: a path names a build on this machine; a lab runs the QEMU "
            "hosts-setup deployed (the default stack) or QEMU=system"
        )
    if getattr(scenario, "libvirt", None) not in (None, "system"):
        from migrate.drivers.libvirt.daemon import run_peer_uri

        for r in topo.HYPERVISOR_HOSTS:  # the run's own daemons are reached by their peer over TLS
            h = inv.host(r)
            run_peer_uri(h.libvirt_peer_uri or "")
            if h.libvirt_tls is None:
                raise ConfigError(
                    f"{inv.path}: hosts.{r}: LIBVIRT={scenario.libvirt} runs the run's own libvirtd with the host's "
                    "TLS files: give libvirt_tls and run make hosts-setup (docs/testbed.md)"
                )
    if scenario.criu_rejoin_mcast:
        raise ConfigError("TESTBED= takes no CRIU_REJOIN_MCAST: only the embedded CRIU driver puts groups back")
    if scenario.hv == "xen" and os.environ.get("XEN_PEER"):
        raise ConfigError(
            "TESTBED= runs HV=xen as nested Xen hosts on the lab's R1 and R2, not on dom0s named by XEN_PEER: "
            "unset XEN_PEER"
        )


@contextlib.contextmanager
def open_lab(inv: Inventory, registry: Registry) -> Iterator[LabBed]:
    """The lab's hosts, connected (SSH masters in the run's private directory) and each given
    the run's directory; on leaving, those directories are removed and the connections closed
    (which also stops every helper still running there: their guards see the channel close)."""
    from migrate.testbed.hosts import connect

    hosts = connect(inv, registry.dir)
    bed = LabBed(registry.prefix, inv, hosts)
    try:
        bed.prepare()
        yield bed
    finally:
        bed.settle()
        problems = bed.remove()
        for h in hosts.values():
            h.close()
        if problems:
            raise TestbedError("; ".join(problems))


def lab_facts(check: dict[str, Any], scenario: Scenario, local: dict[str, Any]) -> dict[str, Any]:
    """The accelerator and QEMU of R1 and R2 as the preflight check found them (the same test
    as ACCEL=auto here: vmx/svm visible and /dev/kvm creates a VM); ACCEL=auto is KVM only if
    both hosts have it (HV=xen: the QEMUs of the nested Xen hosts).  {} for a hypervisor
    without QEMU on the hosts (HV=criu: its driver's own facts stand).  A QEMU= the hosts lack (not
    deployed, different builds, no <emulator> script for DRIVER=libvirt) is a ConfigError: one
    line, exit 2, raised by the preflight before anything starts."""
    if scenario.hv not in ("kvm", "xen"):
        return {}
    rows = {r["role"]: r for r in check["hosts"]}
    hv = ("R1", "R2")
    if scenario.hv == "kvm":
        lab_router_image(rows, scenario.router, check.get("inventory") or "lab.toml")
    kvm = {r: bool(rows[r].get("kvm")) for r in hv}
    both = all(kvm.values())
    if scenario.accel == "kvm" and not both:
        missing = ", ".join(r for r, ok in kvm.items() if not ok)
        raise DependencyError(f"ACCEL=kvm requested but {missing} cannot run KVM: use ACCEL=auto or tcg")
    accel = ("kvm" if both else "tcg") if scenario.accel == "auto" else scenario.accel
    reason = "; ".join(f"{r}: {rows[r].get('kvm_reason')}" for r in hv)
    # HV=xen: the nested hosts' QEMU; HV=kvm: the release hosts-setup deployed, under either
    # driver (DRIVER=libvirt: the hosts' own libvirtd runs it by its <emulator> script)
    spec = (scenario.qemu or DEFAULT_QEMU) if scenario.hv == "kvm" else "system"
    qemu = {r: (rows[r].get("versions") or {}).get(QEMU) for r in hv}
    argv: list[str] = [QEMU]  # the hosts' own package
    stack: dict[str, Any] = {"spec": "system", "source": "system", "version_by_host": qemu}
    if spec != "system":  # the release hosts-setup deployed beside the package (docs/stack.md)
        deployed = {r: (rows[r].get("stacks") or {}).get(spec) or {} for r in hv}
        missing = [r for r in hv if not deployed[r].get("version")]
        if missing:
            raise ConfigError(
                f"QEMU={spec} is not deployed on {', '.join(missing)} (hosts-setup deploys the default stack, "
                f"QEMU={DEFAULT_QEMU}): run make hosts-setup, or use QEMU=system"
            )
        qemu = {r: deployed[r]["version"] for r in hv}
        if qemu["R1"] != qemu["R2"]:
            raise ConfigError(
                f"QEMU={spec} differs between R1 and R2 ({qemu['R1']}; {qemu['R2']}): run make hosts-setup"
            )
        if scenario.driver == "libvirt":
            stale = [r for r in hv if not deployed[r].get("emulator_ok")]
            if stale:
                raise ConfigError(
                    f"QEMU={spec} on {', '.join(stale)} has no <emulator> script for the hosts' libvirtd "
                    "(an older hosts-setup deployed it): run make hosts-setup, or use QEMU=system"
                )
        record = deployed["R1"]["record"]
        argv = list(record["argv"])
        stack = {**record, "spec": spec, "version": qemu["R1"], "deployed": True, "version_by_host": qemu}
    out: dict[str, Any] = {
        "accel": accel,
        "accel_reason": reason if scenario.accel == "auto" else f"forced by ACCEL={scenario.accel} ({reason})",
        "qemu": qemu["R1"],
        "qemu_by_host": qemu,
        "qemu_argv": argv,
        "stack": {"qemu": stack},
        "orchestrator_qemu": local.get("qemu"),
    }
    if scenario.driver == "libvirt" and getattr(scenario, "libvirt", None) not in (None, "system"):
        out["libvirt"], out["stack"]["libvirt"] = lab_libvirt_release(rows, scenario.libvirt, local)
    elif scenario.driver == "libvirt":  # the hosts' own libvirtd, as `libvirtd --version` gave it there
        lines = {r: (rows[r].get("versions") or {}).get("libvirtd") for r in hv}
        found = {r: LIBVIRT_VERSION_LINE.search(v) if v else None for r, v in lines.items()}
        daemon = {r: m[0] if m else lines[r] for r, m in found.items()}  # without libvirtd's path
        out["libvirt"] = {**(local.get("libvirt") or {}), "daemon": daemon["R1"], "daemon_by_host": daemon}
        out["stack"]["libvirt"] = {
            "spec": "system", "source": "system", "version": daemon["R1"], "version_by_host": daemon,
            **({} if daemon["R1"] else {"reason": "hosts-check found no libvirtd --version on R1"}),
        }  # fmt: skip
    return out


def lab_libvirt_release(
    rows: dict[str, dict[str, Any]], spec: str, local: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(facts ``libvirt``, ``stack.libvirt``) of LIBVIRT=``spec`` as hosts-setup deployed it on R1
    and R2 (the run starts its own daemons of it there: migrate.drivers.libvirt.daemon.LabRunLibvirtd);
    ConfigError (one line) where a host lacks it, it does not run, or R1 and R2 hold different builds."""
    hv = topo.HYPERVISOR_HOSTS
    deployed = {r: (rows[r].get("libvirt_stacks") or {}).get(spec) or {} for r in hv}
    missing = [r for r in hv if not deployed[r].get("version")]
    if missing:
        why = "; ".join(f"{r}: {deployed[r].get('error') or 'not deployed'}" for r in missing)
        raise ConfigError(
            f"LIBVIRT={spec} does not run on {', '.join(missing)} ({why}; hosts-setup deploys the default stack's "
            f"libvirt, LIBVIRT={DEFAULT_LIBVIRT}, once make setup fetched it here): run make hosts-setup, or leave "
            "LIBVIRT unset for the hosts' own libvirtd"
        )
    found = {r: LIBVIRT_VERSION_LINE.search(deployed[r]["version"]) for r in hv}
    daemon = {r: m[0] if m else deployed[r]["version"] for r, m in found.items()}  # without libvirtd's path
    if daemon["R1"] != daemon["R2"]:
        raise ConfigError(
            f"LIBVIRT={spec} differs between R1 and R2 ({daemon['R1']}; {daemon['R2']}): run make hosts-setup"
        )
    record = deployed["R1"]["record"]
    facts = {**(local.get("libvirt") or {}), "daemon": daemon["R1"], "daemon_by_host": daemon}
    stack = {**record, "spec": spec, "version": daemon["R1"], "deployed": True, "version_by_host": daemon}
    return facts, stack


def lab_router_image(rows: dict[str, dict[str, Any]], router: str, testbed: str) -> None:
    """ROUTER='s image is on R1 and R2 as this machine built it (hosts-setup copies its manifest
    byte for byte): else one line, exit 2 (the router would run a build meta.json does not name).
    A check that predates the image probe (no ``images`` in its rows) is not judged.  A router
    profile's own disk image is not deployed by hosts-setup: the run places it on each host by
    content hash (migrate.drivers.profile_boot.place)."""
    import hashlib

    from migrate.model.scenario import profile_of
    from routers.guest import guest_image

    if not all("images" in rows[r] for r in ("R1", "R2")) or profile_of(router) is not None:
        return
    local = hashlib.sha256((guest_image(router, verify=False).kernel.parent / "manifest.json").read_bytes())
    for r in ("R1", "R2"):
        there = (rows[r].get("images") or {}).get(router)
        if there is None:
            raise ConfigError(
                f"ROUTER={router} is not on {r}: run make hosts-setup TESTBED={testbed} PROFILES=<...,{router}> "
                "(it copies the images PROFILES= names)"
            )
        if there.get("manifest_sha256") != local.hexdigest():
            raise ConfigError(
                f"ROUTER={router} on {r} is another build than this machine's "
                f"({there.get('router_version') or 'unknown version'}): run make hosts-setup TESTBED={testbed}"
            )
