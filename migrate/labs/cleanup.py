"""``clean-testbed TESTBED=`` on a lab's Xen dom0s: what a killed HV=xen run left there (the
guards of its commands, the router domain and its config)."""

from __future__ import annotations

from pathlib import Path

from migrate.testbed import topology as topo
from migrate.testbed.inventory import Inventory


def clean_xen_dom0s(inv: Inventory, control_dir: Path) -> list[str]:
    """``clean-testbed TESTBED=`` on a lab whose R1 and R2 are Xen hosts: in each dom0, stop
    the commands whose guards are still recorded and destroy the router domain a killed run
    left (with its config), unless a live run of this machine has guards there.  Returns one
    line per thing done."""
    from migrate.core.registry import STATE_ROOT
    from migrate.drivers.xen.dom0 import GUARD_CLEAN_SH, GUARD_DIR
    from migrate.drivers.xen.xl import DomuPaths, router_domains
    from migrate.testbed.hosts import SshHost

    live = {p.name for p in STATE_ROOT.glob("vm*") if p.is_dir()}
    done: list[str] = []
    for role in topo.HYPERVISOR_HOSTS:
        x = inv.host(role).xen
        if x is None:
            continue
        with SshHost(x.host_spec(role), control_dir) as h:
            listed = h.run(["sh", "-c", 'ls "$1" 2>/dev/null || true', "sh", GUARD_DIR]).stdout.decode().split()
            if any(name.split("-")[0] in live for name in listed):
                done.append(f"{role} dom0: a live run of this machine uses it: left alone")
                continue
            out = h.run(["sh", "-c", GUARD_CLEAN_SH, "sh", GUARD_DIR]).stdout.decode()
            done += [f"{role} dom0: {line}" for line in out.splitlines() if line.strip()]
            cp = h.run(["xl", "list"], check=False)
            for name in router_domains(cp.stdout.decode(errors="replace")):
                h.run(["xl", "destroy", name])
                done.append(f"{role} dom0: destroyed domain {name}")
            cfg = DomuPaths.under(x.deploy_dir, "-", x.bridges).cfg
            h.run(["rm", "-f", cfg])
    return done
