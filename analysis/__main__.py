"""``python -m analysis <run_dir> [...]``: re-analyse existing runs (rewrites summary.json and the plot)."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from analysis.present.table import format_table
from analysis.run import analyse_and_write
from migrate.core.rundir import SUMMARY_JSON


def main(argv: list[str] | None = None) -> int:
    """Re-analyse each run directory and print its table; returns 2 if one is not a directory."""
    p = argparse.ArgumentParser(prog="python -m analysis", description=__doc__)
    p.add_argument("run_dirs", nargs="+", type=Path, help="results directories")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="analysis: %(message)s", stream=sys.stderr)
    status = 0
    for run_dir in args.run_dirs:
        if not run_dir.is_dir():
            print(f"analysis: {run_dir} is not a directory", file=sys.stderr)
            status = 2
            continue
        print(format_table(analyse_and_write(run_dir)))
        print(run_dir / SUMMARY_JSON)
    return status


if __name__ == "__main__":
    sys.exit(main())
