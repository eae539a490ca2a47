"""``make baseline`` on the embedded testbed and on a lab, side by side in one session
(``make bench-lab-baseline``): ``--rounds`` rounds, each running the same one-repetition matrix
(``--hv``, default none,kvm,criu) embedded, then on the lab, each as its own process.  The two
alternate so that whatever else loads the machine touches both alike.  It prints one JSON line
per baseline and writes ``<out>/baseline-bench.json``: each baseline's wall time and status, and
every row of its baseline.csv tagged with where and which round.  Then it prints the
per-(where, hv, size, rate) medians over the rounds of forwarded rate, loss, RTT, one-way delay
(with its clock uncertainty on the lab), CPU and wall time.

    python -m tests.bench.bench_baseline_lab --testbed /run/vrmig-lab/x/lab.toml --rounds 3 --out DIR"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
from pathlib import Path
from typing import Any

from tests.bench.lab_rounds import embedded_then_lab, lab_bench_parser
from tests.bench.sides import run_migrate

#: the matrix both sides run, after --hv (GEN_CHECK=0 on both: the lab's generator is A's, which the
#: check does not measure)
MATRIX = ["--sizes", "500,1500", "--rates", "10M,50M,max", "--reps", "1", "--duration", "5", "--gen-check", "0"]
FIGURES = ("forwarded_bps", "loss_ratio", "rtt_median_ms", "owd_median_ms", "owd_uncertainty_ms", "cpu_host",
           "cpu_hv", "cpu_router_daemons")  # fmt: skip


def one_baseline(where: str, testbed: str, out: Path, i: int, matrix: list[str]) -> dict[str, Any]:
    res, wall_s, run_dir = run_migrate(where, testbed, ["baseline", *matrix, "--results", str(out / where / str(i))])
    run: dict[str, Any] = {"where": where, "round": i, "wall_s": wall_s, "rc": res.returncode, "run_dir": str(run_dir)}
    try:
        assert run_dir is not None
        run["status"] = json.loads((run_dir / "meta.json").read_text())["status"]
        with open(run_dir / "baseline.csv", newline="") as f:
            run["rows"] = list(csv.DictReader(f))
    except (AssertionError, OSError, ValueError, KeyError) as err:  # the record says why it has no rows
        run["error"] = f"{type(err).__name__}: {err}; {res.stderr[-300:]}"
    return run


def medians(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (where, hv, frame size, rate): the median over the rounds of each figure (None where
    no round has it: absent, not 0), how many rounds had an ``ok`` point, and the median wall
    time of that side's baselines."""
    groups: dict[tuple[str, str, str, str], list[dict[str, str]]] = {}
    for run in runs:
        for r in run.get("rows", []):
            groups.setdefault((run["where"], r["hv"], r["frame_bytes"], r["rate_bps"]), []).append(r)
    walls = {w: statistics.median([r["wall_s"] for r in runs if r["where"] == w]) for w in {r["where"] for r in runs}}
    out = []
    for (where, hv, size, rate), rows in sorted(groups.items()):
        ok = [r for r in rows if r["status"] == "ok"]
        row: dict[str, Any] = {"where": where, "hv": hv, "frame_bytes": int(size), "rate": rate, "ok": len(ok),
                               "of": len(rows), "baseline_wall_s": walls[where]}  # fmt: skip
        for fig in FIGURES:
            vals = [float(r[fig]) for r in ok if r.get(fig) not in (None, "")]
            row[fig] = statistics.median(vals) if vals else None
        out.append(row)
    return out


def build_parser() -> argparse.ArgumentParser:
    """The options (the Make variables of ``make bench-lab-baseline``, and ``--out``)."""
    return lab_bench_parser(
        __doc__.splitlines()[0],
        ("--rounds", {"type": int, "default": 3, "help": "rounds, each a baseline embedded and one on the lab"}),
        ("--hv", {"default": "none,kvm,criu", "help": "the baselines' HV list"}),
    )


def _shown(run: dict[str, Any]) -> dict[str, Any]:
    """A baseline's record as printed: its rows counted, not listed."""
    return {k: v for k, v in run.items() if k != "rows"} | {"rows": len(run.get("rows", []))}


def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    matrix = ["--hv", a.hv, *MATRIX]
    runs = embedded_then_lab(a.rounds, lambda where, i: one_baseline(where, a.testbed, a.out, i, matrix), _shown)
    table = medians(runs)
    for row in table:
        print(json.dumps(row), flush=True)
    doc = {"matrix": matrix, "rounds": a.rounds, "testbed": a.testbed, "runs": runs, "medians": table}
    (a.out / "baseline-bench.json").write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
