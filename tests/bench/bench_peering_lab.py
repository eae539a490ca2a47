"""PEERING on the embedded testbed and on a lab, side by side in one session
(docs/measurements/2026-11-26-lab-peering.md): ``--reps`` pairs of ``migrate run --hv kvm
--peering bgp,bfd``, embedded then lab, each a separate process.  Per run it keeps the wall time
and, from the run's summary.json, the packet downtime, whether BGP and BFD survived, the
router's longest silence at a peer per protocol, the records put on the orchestrator's clock
and the largest clock uncertainty.  Prints one JSON line per run and writes them all to
``<out>/peer-bench.json``.

    python -m tests.bench.bench_peering_lab --testbed /run/vrmig-lab/pb/lab.toml --reps 3 --out DIR"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from tests.bench.lab_rounds import embedded_then_lab, lab_bench_parser
from tests.bench.sides import run_migrate


def one_run(where: str, testbed: str, out: Path, i: int) -> dict[str, Any]:
    args = ["run", "--hv", "kvm", "--peering", "bgp,bfd", "--rate", "1M", "--duration", "12", "--migrate-at", "5",
            "--results", str(out / where)]  # fmt: skip
    res, wall_s, run_dir = run_migrate(where, testbed, args)
    row: dict[str, Any] = {"where": where, "i": i, "wall_s": wall_s, "rc": res.returncode, "run_dir": str(run_dir)}
    try:
        assert run_dir is not None
        meta = json.loads((run_dir / "meta.json").read_text())
        s = json.loads((run_dir / "summary.json").read_text())
        row["status"] = meta["status"]
        row["downtime_packets_s"] = s["downtime_s"]["packets"]
        for p in ("bgp", "bfd"):
            c = (s.get("control_plane") or {}).get(p) or {}
            row.update({f"{p}_survived": c.get("survived"), f"{p}_flaps": c.get("flaps"),
                        f"{p}_silence_ms": c.get("silence_ms")})  # fmt: skip
        row["corrected"] = s["details"]["clock"].get("corrected")
        row["max_unc_ns"] = s["details"]["clock"].get("max_uncertainty_ns")
    except (AssertionError, OSError, ValueError, KeyError) as err:  # the row says why it has no figures
        row["error"] = f"{type(err).__name__}: {err}; {res.stderr[-300:]}"
    return row


def build_parser() -> argparse.ArgumentParser:
    """The options (the Make variables of ``make bench-lab-peering``, and ``--out``)."""
    return lab_bench_parser(
        __doc__.splitlines()[0],
        ("--reps", {"type": int, "default": 3, "help": "repetitions, each a run embedded and one on the lab"}),
    )


def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    rows = embedded_then_lab(a.reps, lambda where, i: one_run(where, a.testbed, a.out, i))
    (a.out / "peer-bench.json").write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
