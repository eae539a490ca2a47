"""``vrmig hosts-check`` (= ``make hosts-check TESTBED=lab.toml``): is every host of the inventory
ready for a run?  The table and one line per problem (docs/testbed.md "make hosts-check"), or
``--json``; exit 0 when nothing is an error, 2 otherwise."""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

from migrate.core.convert import positive
from migrate.labs.check import DEFAULT_MAX_OFFSET_MS, check_inventory, format_table
from migrate.testbed.inventory import load


def add_parser(sub: Any) -> None:
    """The ``hosts-check`` subcommand."""
    c = sub.add_parser("hosts-check", help="check every host of a lab inventory (make hosts-check TESTBED=...)")
    c.add_argument("--testbed", type=Path, required=True, help="the inventory TOML")
    c.add_argument(
        "--max-offset-ms",
        type=positive("MAX_OFFSET_MS", "milliseconds"),
        default=DEFAULT_MAX_OFFSET_MS,
        help="largest clock offset from the orchestrator's allowed, ms",
    )
    c.add_argument("--json", action="store_true", help="1: print the result as JSON instead of the table")
    c.set_defaults(handler=run_command)


def run_command(a: argparse.Namespace) -> int:
    """Check, print, and return 0 (warnings allowed) or 2."""
    inv = load(a.testbed)
    # a short directory: the control sockets' paths must fit a unix socket address
    control_dir = Path(tempfile.mkdtemp(prefix="vrmig-hc-"))
    try:
        result = check_inventory(inv, control_dir, testbed_arg=str(a.testbed), max_offset_ms=a.max_offset_ms)
    finally:
        shutil.rmtree(control_dir, ignore_errors=True)
    print(json.dumps(result.as_dict(), indent=2) if a.json else format_table(result))
    return result.exit_code
