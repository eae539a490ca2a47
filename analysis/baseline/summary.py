"""A baseline results directory -> baseline.csv, baseline_routers.csv, summary.json and the plots.

``python -m analysis.baseline.summary <dir>`` recomputes everything from the raw points.

summary.json holds, per configuration (hv, nic, ip, frame size, routers, load, role):

* ``points``: per requested rate of the sweep, mean / std / 95 % CI (Student's t over the
  repetitions, ``ci95``: its half-width) and the 95 % percentile-bootstrap interval of the mean
  (``boot95_low``, ``boot95_high``: what the plots draw) of offered and forwarded rate, loss, RTT,
  CPU and Jain indices;
* ``max_forwarded``: the sweep rate with the highest mean forwarded rate (paper 001 Fig. 4: it
  need not be the highest offered rate);
* ``sweep_loss_free_bps``: the highest swept rate (per router) up to which every rate's mean loss
  is <= 0.1 % (the mean offered rate instead where the generator fell short of it);
* ``ndr`` (SEARCH=ndr): the RFC 2544-style maximum loss-free offered rate per router, per repetition
  and aggregated (``at_upper_bound``: repetitions in which even the highest rate of RATES passed);
* ``efficiency``: E = R_aggregate / R_classical, R = max_forwarded mean (and routers x NDR mean), R_classical
  from HV=none with one router, the same IP version, frame size, role and load (else load=none);
  for an end host (ROLE=vm-tx/vm-rx) that is seed 000's E of the VM against the bare host;
* ``ipv6_over_ipv4`` (IPv6 configurations measured over IPv4 too): :func:`ip_ratio` per rate.
"""

from __future__ import annotations

import argparse
import csv
import io
import logging
import math
import sys
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from analysis.baseline.ndr import LOSS_FREE_RATIO, describe, efficiency, ndr_result
from analysis.baseline.points import ROUTER_COLUMNS, ROW_COLUMNS, analyse_point
from analysis.stats.inference import bootstrap_mean_interval, bootstrap_ratio_interval
from migrate.core.atomic import write_text
from migrate.core.rundir import (
    BASELINE_CSV,
    BASELINE_ROUTERS_CSV,
    BASELINE_SUMMARY_FORMAT,
    META_JSON,
    SUMMARY_JSON,
    read_meta,
    write_summary,
)

log = logging.getLogger(__name__)

CSV_NAME = BASELINE_CSV
ROUTERS_CSV_NAME = BASELINE_ROUTERS_CSV
SUMMARY_NAME = SUMMARY_JSON
SUMMARY_FORMAT = BASELINE_SUMMARY_FORMAT
CONFIG_KEYS = ("hv", "nic", "ip", "frame_bytes", "routers", "load", "role", "proto")
#: keys of rows written before ROLE and PROTO existed
KEY_DEFAULTS = {"role": "router", "proto": "udp"}
CLASSICAL = "HV=none, 1 router (ROLE=vm-vm: its 2), same IP, frame size, role, protocol and load (else load=none)"
STAT_COLUMNS = (
    "offered_bps", "offered_pps", "forwarded_bps", "forwarded_pps", "loss_ratio", "rtt_median_ms", "rtt_p99_ms",
    "owd_median_ms", "cpu_host", "cpu_softirq", "cpu_hv", "cpu_router_daemons", "cpu_gen", "cpu_neighbour",
    "jain_throughput", "jain_cpu", "load_offered_bps", "load_forwarded_bps", "rtt_jitter_ms",
)  # fmt: skip


def collect(run_dir: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Rows and per-router rows of every point under ``run_dir/points``, in a stable order."""
    rows, routers = [], []
    for point_dir in sorted((run_dir / "points").glob("*/*")):
        res = analyse_point(point_dir)
        if res is not None:
            rows.append(res[0])
            routers += res[1]
    rows.sort(key=_row_order)
    routers.sort(key=lambda r: (*_row_order(r), r["router"]))
    return rows, routers


def _order(config_key: tuple) -> tuple:
    """HV=none first, then as given."""
    return (config_key[0] != "none", *(str(x) if isinstance(x, str) else x for x in config_key))


def _row_order(r: dict[str, Any]) -> tuple:
    return (*_order(_config_key(r)), r["phase"] != "sweep", r["rate_bps"] == 0, r["rate_bps"], r["rep"])


def csv_text(rows: Iterable[dict[str, Any]], columns: tuple[str, ...]) -> str:
    """CSV with a header; None -> empty cell; floats with up to 9 significant digits."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(columns)
    for r in rows:
        w.writerow(["" if r.get(c) is None else (f"{r[c]:.9g}" if isinstance(r[c], float) else r[c]) for c in columns])
    return buf.getvalue()


def _config_key(r: dict[str, Any]) -> tuple:
    return tuple(r.get(k, KEY_DEFAULTS[k]) if k in KEY_DEFAULTS else r[k] for k in CONFIG_KEYS)


def stat_dict(values: Iterable[float | None]) -> dict[str, Any] | None:
    """``{n, mean, std, ci95, boot95_low, boot95_high}`` of the finite ``values`` (None and NaN
    are not values; None without any): ``describe``'s Student-t figures and the percentile-bootstrap
    95 % interval of the mean over the same values (None for fewer than two)."""
    xs = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    st = describe(xs)
    if st is None:
        return None
    boot = bootstrap_mean_interval(xs)
    lo, hi = boot if boot is not None else (None, None)
    return {**st.to_dict(), "boot95_low": lo, "boot95_high": hi}


def _stats(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {"reps": len(rows), "gen_limited": sum(1 for r in rows if r.get("gen_limited"))}
    for c in STAT_COLUMNS:
        out[c] = stat_dict(r.get(c) for r in rows)
    return out


def _mean(d: dict[str, Any] | None) -> float | None:
    return None if d is None else d["mean"]


def _trial_rate(r: dict[str, Any]) -> int:
    """Rate a search trial stands for: the requested per-router rate, or what the generator really
    offered per router when it fell short (a loss-free point proves no more than that)."""
    if r.get("gen_limited") and r.get("offered_bps") is not None:
        return min(r["rate_bps"], int(r["offered_bps"] / r["routers"]))
    return r["rate_bps"]


def summarise_config(rows: list[dict[str, Any]], ndr: bool = False) -> dict[str, Any]:
    """Everything summary.json says about one configuration (its rows: all phases and reps);
    ``ndr``: the run searched the NDR (sweep points are its first trials)."""
    ok = [r for r in rows if r["status"] == "ok"]
    sweep = [r for r in ok if r["phase"] == "sweep"]
    by_rate: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for r in sweep:
        by_rate[r["rate_bps"]].append(r)
    points = [
        {"rate_bps": rate, **_stats(rs)} for rate, rs in sorted(by_rate.items(), key=lambda kv: (kv[0] == 0, kv[0]))
    ]
    out: dict[str, Any] = {
        "points": points,
        "failed_points": sum(1 for r in rows if r["status"] != "ok"),
        "max_forwarded": None,
        "sweep_loss_free_bps": None,
        "ndr": None,
    }
    best = max(points, key=lambda p: _mean(p["forwarded_bps"]) or -1.0, default=None)
    if best is not None and best["forwarded_bps"] is not None:
        out["max_forwarded"] = {
            "rate_bps": best["rate_bps"],
            "forwarded_bps": best["forwarded_bps"],
            "forwarded_pps": best["forwarded_pps"],
        }
    lossfree = 0
    for p in (p for p in points if p["rate_bps"] > 0):
        if p["loss_ratio"] is None or p["loss_ratio"]["mean"] > LOSS_FREE_RATIO:
            break
        lossfree = p["rate_bps"]
        if p["gen_limited"] and p["offered_bps"]:  # the generator fell short: only what it offered is proven
            lossfree = min(lossfree, int(p["offered_bps"]["mean"] / rows[0]["routers"]))
    # PROTO=tcp has no loss figure: no loss-free rate either (absent, not 0)
    out["sweep_loss_free_bps"] = lossfree if any(r.get("loss_ratio") is not None for r in sweep) else None
    if ndr or any(r["phase"] == "ndr" for r in ok):
        per_rep = []
        for rep in sorted({r["rep"] for r in ok}):
            trials = [(_trial_rate(r), r["loss_ratio"]) for r in ok if r["rep"] == rep and r["loss_ratio"] is not None]
            res = ndr_result(trials)
            per_rep.append(
                {"rep": rep, "ndr_bps": res.rate_bps, "lowest_fail_bps": res.lowest_fail_bps, "trials": res.trials}
            )
        out["ndr"] = {
            "loss_threshold": LOSS_FREE_RATIO,
            "per_rep": per_rep,
            "ndr_bps": stat_dict(p["ndr_bps"] for p in per_rep),
            "at_upper_bound": sum(1 for p in per_rep if p["lowest_fail_bps"] is None),
            "generator_limited_trials": sum(1 for r in ok if r["rate_bps"] > 0 and r.get("gen_limited")),
        }
    return out


def _classical(configs: dict[tuple, dict[str, Any]], key: tuple) -> dict[str, Any] | None:
    ip, frame, load = key[2], key[3], key[5]
    routers = key[4] if key[6] == "vm-vm" else 1  # the bare pair of two namespaces
    for want in ((ip, frame, load), (ip, frame, "none")):
        for k, c in configs.items():
            if k[0] == "none" and k[4] == routers and (k[2], k[3], k[5]) == want and k[6:] == key[6:]:
                return c
    return None


def ip_ratio(v6_rows: list[dict[str, Any]], v4_rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The IPv6/IPv4 ratio of one set-up at the same frame size, per swept rate both measured:
    mean forwarded (or, for an end host, received) bit/s and packets/s over IPv6 / the same over
    IPv4, from the repetitions' ok sweep points, with the percentile-bootstrap 95 % interval of
    each ratio (None below 2 repetitions on either side).  Frame bits include the larger IPv6
    header: at equal frame size IPv6 carries 20 B less payload per packet."""

    def by_rate(rows: list[dict[str, Any]]) -> dict[int, list[dict[str, Any]]]:
        out: dict[int, list[dict[str, Any]]] = defaultdict(list)
        for r in rows:
            if r["status"] == "ok" and r["phase"] == "sweep":
                out[r["rate_bps"]].append(r)
        return out

    six, four = by_rate(v6_rows), by_rate(v4_rows)
    res = []
    for rate in sorted(set(six) & set(four), key=lambda r: (r == 0, r)):
        entry: dict[str, Any] = {"rate_bps": rate}
        for col in ("forwarded_bps", "forwarded_pps"):
            x = [float(r[col]) for r in six[rate] if r.get(col) is not None]
            y = [float(r[col]) for r in four[rate] if r.get(col) is not None]
            ratio = sum(x) / len(x) / (sum(y) / len(y)) if x and y and sum(y) > 0 else None
            ci = bootstrap_ratio_interval(x, y)
            entry[col] = {"ratio": ratio, "boot95_low": ci[0] if ci else None, "boot95_high": ci[1] if ci else None}
        res.append(entry)
    return res


def _max_fwd(c: dict[str, Any] | None) -> float | None:
    return _mean(c["max_forwarded"]["forwarded_bps"]) if c and c["max_forwarded"] else None


def _ndr_aggregate(c: dict[str, Any] | None, routers: int) -> float | None:
    """All routers' loss-free rate: the NDR is a per-router offered rate."""
    mean = _mean(c["ndr"]["ndr_bps"]) if c and c["ndr"] and c["ndr"]["ndr_bps"] else None
    return None if mean is None else mean * routers


def summarise(rows: list[dict[str, Any]], meta: dict[str, Any] | None = None) -> dict[str, Any]:
    """summary.json of a baseline run."""
    groups: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        groups[_config_key(r)].append(r)
    ndr = ((meta or {}).get("spec") or {}).get("search") == "ndr"
    configs = {k: summarise_config(v, ndr) for k, v in sorted(groups.items(), key=lambda kv: _order(kv[0]))}
    for k, c in configs.items():
        cl = _classical(configs, k)
        c["efficiency"] = {
            "classical": None if cl is None else CLASSICAL,
            "max_forwarded": efficiency(_max_fwd(c), _max_fwd(cl)),
            "ndr": efficiency(_ndr_aggregate(c, k[4]), _ndr_aggregate(cl, 1)),
        }
        if k[2] == 6 and (v4 := (*k[:2], 4, *k[3:])) in groups:
            c["ipv6_over_ipv4"] = ip_ratio(groups[k], groups[v4])
    return {
        "format": SUMMARY_FORMAT,
        "kind": "baseline",
        "accel": (meta or {}).get("accel"),
        "loss_free_ratio": LOSS_FREE_RATIO,
        "points_total": len(rows),
        "points_failed": sum(1 for r in rows if r["status"] != "ok"),
        "configs": [dict(zip(CONFIG_KEYS, k, strict=True), **v) for k, v in configs.items()],
    }


def analyse_baseline(run_dir: Path) -> dict[str, Any]:
    """Write baseline.csv, baseline_routers.csv, summary.json, the plots and report.html
    (analysis.present.baseline_report); return the summary."""
    meta = read_meta(run_dir) if (run_dir / META_JSON).exists() else None
    rows, routers = collect(run_dir)
    write_text(run_dir / CSV_NAME, csv_text(rows, ROW_COLUMNS))
    write_text(run_dir / ROUTERS_CSV_NAME, csv_text(routers, ROUTER_COLUMNS))
    summary = summarise(rows, meta)
    try:
        from analysis.baseline.plot import plot_all

        summary["plots"] = [p.name for p in plot_all(run_dir, summary, routers, meta)]
    except Exception as err:  # a plot must never lose the tables
        log.exception("plotting failed: %s", err)
        summary["plots"] = []
        summary["plot_error"] = str(err)
    write_summary(run_dir, summary)
    from analysis.present.baseline_report import try_write_baseline_report

    note = try_write_baseline_report(run_dir, summary)  # after summary.json: a report must never cost it
    if note is not None:
        log.error("%s (summary.json, the tables and the plots are written)", note)
    return summary


def main(argv: list[str] | None = None) -> int:
    """Re-analyse baseline results directories."""
    p = argparse.ArgumentParser(prog="python -m analysis.baseline.summary", description=__doc__)
    p.add_argument("run_dirs", nargs="+", type=Path)
    a = p.parse_args(argv)
    for d in a.run_dirs:
        if not (d / "points").is_dir():
            print(f"analysis: {d} is not a baseline results directory (no points/)", file=sys.stderr)
            return 2
        analyse_baseline(d)
        print(d)
    return 0


if __name__ == "__main__":
    sys.exit(main())
