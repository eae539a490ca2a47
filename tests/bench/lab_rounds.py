"""The frame of the lab benches: ``--testbed`` and ``--out`` around each bench's own options, and
rounds that each run the same thing embedded, then on the lab, so that whatever else loads the
machine touches both sides alike."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any


def lab_bench_parser(description: str, *options: tuple[str, dict[str, Any]]) -> argparse.ArgumentParser:
    """A lab bench's parser: ``--testbed``, then each (flag, add_argument keywords) of ``options``, then ``--out``."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--testbed", required=True, help="the lab's inventory (make lab-up prints one)")
    for flag, kw in options:
        ap.add_argument(flag, **kw)
    ap.add_argument("--out", type=Path, required=True, help="directory to write")
    return ap


def embedded_then_lab(
    rounds: int, one: Callable[[str, int], dict[str, Any]], shown: Callable[[dict[str, Any]], Any] = lambda r: r
) -> list[dict[str, Any]]:
    """``one(where, i)`` embedded, then on the lab, in each of ``rounds`` rounds; prints the JSON of ``shown``
    of each record as it ends; the records in order."""
    records = []
    for i in range(rounds):
        for where in ("embedded", "lab"):
            record = one(where, i)
            print(json.dumps(shown(record)), flush=True)
            records.append(record)
    return records
