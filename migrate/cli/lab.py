"""``vrmig lab-up`` / ``vrmig lab-down`` (= ``make lab-up`` / ``make lab-down TESTBED=...``): the
emulated lab of docs/testbed.md, "The emulated lab"."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from migrate.labs import emulated as lab


def add_parsers(sub: Any) -> None:
    """The ``lab-up`` and ``lab-down`` subcommands."""
    up = sub.add_parser("lab-up", help="build the emulated lab; prints its inventory path last (make lab-up)")
    # a metavar in capitals is the option's Make variable (migrate/cli/make.py)
    up.add_argument("--name", default=lab.DEFAULT_NAME, metavar="LAB_NAME", help="lab name")
    up.add_argument(
        "--dir", type=Path, default=None, metavar="LAB_DIR", help=f"lab directory (default {lab.LAB_ROOT}/<name>)"
    )
    up.add_argument(
        "--deploy-dir", default=lab.DEFAULT_DEPLOY_DIR, metavar="DEPLOY_DIR", help="each host's deploy directory"
    )
    up.add_argument("--xen", action="store_true", help="1: R1 and R2 are Xen hosts too, their dom0s reached over SSH")
    up.set_defaults(handler=run_up)
    down = sub.add_parser("lab-down", help="remove an emulated lab (make lab-down TESTBED=<its lab.toml>)")
    down.add_argument("testbed", type=Path, help="the inventory lab-up printed, or the lab directory")
    down.set_defaults(handler=run_down)


def run_up(a: argparse.Namespace) -> int:
    """Build the lab; the last line printed is its inventory."""
    print(lab.lab_up(a.name, a.dir, a.deploy_dir, xen=a.xen))
    return 0


def run_down(a: argparse.Namespace) -> int:
    """Remove the lab: 0 when it is gone (or was already), 1 when something could not be removed."""
    d = lab.lab_dir_of(a.testbed)
    removed, problems = lab.lab_down(a.testbed)
    for p in problems:
        print(f"vrmig: lab-down: {p}")
    if problems:
        print(f"lab not fully removed; its state is kept in {d}: run lab-down again")
        return 1
    print(f"removed lab {d}" if removed else f"nothing to remove at {a.testbed}")
    return 0
