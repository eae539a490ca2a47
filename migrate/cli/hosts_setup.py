"""``vrmig hosts-setup`` (= ``make hosts-setup TESTBED=lab.toml``): prepare a lab's machines with
Ansible (migrate/labs/provision.py) and print one line per host."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from migrate.core.convert import names
from migrate.testbed.inventory import ROLES


def add_parser(sub: Any) -> None:
    """The ``hosts-setup`` subcommand (flags mirror the Make variables)."""
    h = sub.add_parser("hosts-setup", help="prepare a lab's machines with Ansible (make hosts-setup)")
    h.add_argument("--testbed", type=Path, required=True, help="the lab's TOML inventory")
    h.add_argument(
        "--profiles",
        type=names("PROFILES", "frr or frr,bird"),
        default=["frr", "bird"],
        help="router guest images (and HV=criu container rootfs) for R1/R2, releases too: frr@8.4",
    )
    h.add_argument("--results", type=Path, default=Path("results"), help="results root (Ansible's log goes there)")
    h.set_defaults(handler=run_command)


def run_command(a: argparse.Namespace) -> int:
    """Load the inventory (bad input: one line, exit 2, nothing started), log into every host (one
    that refuses: its line, exit 2, nothing changed on any host), run the playbook, print
    ``<role> ok=N changed=N failed=N`` per host and a last line; exit 2 naming each host that
    failed or was unreachable."""
    from migrate.core.errors import ConfigError
    from migrate.labs.provision import HostsUnreachable, run_playbook
    from migrate.testbed.inventory import load
    from routers import profiles
    from routers.errors import UnknownProfileError

    try:  # PROFILES=frr@8.4,frr: one name per image (frr@10.3 is frr)
        images = list(dict.fromkeys(profiles.canonical(p) for p in a.profiles))
    except UnknownProfileError as err:
        raise ConfigError(f"PROFILES: {err}") from None
    inv = load(a.testbed)
    try:
        out = run_playbook(inv, images, a.results)
    except HostsUnreachable as err:
        for role in ROLES:
            if role in err.reasons:
                print(f"hosts-setup: {role}: {err.reasons[role]} (nothing was changed on any host)", file=sys.stderr)
        return 2
    for role in ROLES:
        r = out.recap.get(role)
        if r is None:
            print(f"{role} (not in Ansible's recap)")
            continue
        extra = f" unreachable={r.unreachable}" if r.unreachable else ""
        print(f"{role} ok={r.ok} changed={r.changed} failed={r.failed}{extra}")
    bad = [role for role in ROLES if role not in out.recap or not out.recap[role].good]
    for role in bad:
        reason = out.failures.get(role, f"no result (ansible-playbook exited {out.returncode})")
        print(f"hosts-setup: {role}: {reason}", file=sys.stderr)
    if bad or out.returncode != 0:
        if not bad:
            print(f"hosts-setup: ansible-playbook exited {out.returncode}: see {out.log_path}", file=sys.stderr)
        return 2
    print("hosts-setup: nothing changed" if out.changed == 0 else f"hosts-setup: {out.changed} changes")
    return 0
