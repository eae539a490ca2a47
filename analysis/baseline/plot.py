"""Plots of a baseline run (PNG, written atomically, no pyplot global state).

* ``offered_vs_forwarded.png``: mean offered vs mean forwarded rate, one line per router set-up,
  one panel per frame size (row per IP version) — paper 001 Fig. 3;
* ``max_forwarded.png``: maximum mean forwarded rate per set-up and frame size as bars (paper 001
  Fig. 4), plus the maximum loss-free rate (NDR) when it was searched;
* ``routers.png``: per-router throughput at the highest offered rate for 1/2/4/8 co-located
  routers with Jain's fairness index (paper 000 Fig. 13 / Table II).

Error bars are the 95 % percentile-bootstrap interval of the mean over the repetitions (summary.json
``boot95_low``/``boot95_high``; analysis.stats.inference.bootstrap_mean_interval): within the
repetitions' range, so a rate's bar never goes below 0, as the symmetric Student-t interval of a
few skewed repetitions does (the t half-width stays in summary.json as ``ci95``).  A mean of one
repetition has no bar.
"""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from analysis.baseline.ndr import describe, jain_index
from analysis.stats.inference import bootstrap_mean_interval
from migrate.core.atomic import replacing

DPI = 110


HV_NAMES = {"none": "none (Linux)", "criu": "criu (container)"}  # set-ups without a NIC model


def hv_name(hv: str, nic: str) -> str:
    """'none (Linux)', 'criu (container)' or 'kvm/virtio'."""
    return HV_NAMES.get(hv, f"{hv}/{nic}")


def label(c: dict[str, Any]) -> str:
    """Short name of a router set-up: 'none', 'kvm/virtio', '... x4', '... +cpu'."""
    s = hv_name(c["hv"], c["nic"])
    if c["routers"] > 1:
        s += f" ×{c['routers']}"
    if c["load"] != "none":
        s += f" +{c['load']}"
    if c.get("role", "router") != "router":  # the end host sending (vm-tx) or receiving (vm-rx)
        s += f" {c['role']}"
    if c.get("proto", "udp") != "udp":
        s += f" {c['proto']}"
    return s


def _save(fig: Figure, path: Path) -> Path:
    with replacing(path) as tmp:
        fig.savefig(tmp, format="png", dpi=DPI)
    return path


def _title(meta: dict[str, Any] | None) -> str:
    accel = (meta or {}).get("accel")
    note = "\nHV=kvm ran under TCG: its figures describe QEMU's emulator, not KVM" if accel == "tcg" else ""
    head = f"vrmig baseline (HV=kvm accel={accel})" if accel else "vrmig baseline"
    return f"{head} — error bars: {INTERVAL}{note}"


#: what the error bars are (the plots' titles)
INTERVAL = "mean, 95 % percentile-bootstrap interval"


def _err(ds: list[dict[str, Any] | None], scale: float = 1e-6) -> list[list[float]]:
    """Asymmetric error bars [[below], [above]] of summary.json aggregates ``ds`` from their
    bootstrap interval (``boot95_low``/``boot95_high``); NaN, no bar, where an aggregate has none
    (a single repetition)."""
    lo, hi = [], []
    for d in ds:
        if d is None or d.get("boot95_low") is None or d.get("boot95_high") is None:
            lo.append(math.nan)
            hi.append(math.nan)
        else:
            lo.append(max(0.0, (d["mean"] - d["boot95_low"]) * scale))
            hi.append(max(0.0, (d["boot95_high"] - d["mean"]) * scale))
    return [lo, hi]


def plot_offered_forwarded(path: Path, summary: dict[str, Any], meta: dict[str, Any] | None) -> Path:
    """Offered vs forwarded rate, panels per (IP version, frame size); UDP only (a TCP point has
    no offered rate: it sends what the path takes)."""
    configs = [c for c in summary["configs"] if c.get("proto", "udp") == "udp"]
    if not configs:
        fig = Figure(figsize=(6.0, 2.0), layout="constrained")
        fig.subplots().text(0.5, 0.5, "no UDP points (PROTO=tcp: goodput only, see max_forwarded.png)",
                            ha="center", va="center")  # fmt: skip
        return _save(fig, path)
    ips = sorted({c["ip"] for c in configs})
    sizes = sorted({c["frame_bytes"] for c in configs})
    fig = Figure(figsize=(max(6.0, 4.2 * len(sizes)), 4.0 * len(ips)), layout="constrained")
    axes = fig.subplots(len(ips), len(sizes), squeeze=False)
    for i, ip in enumerate(ips):
        for j, size in enumerate(sizes):
            ax = axes[i][j]
            top = 0.0
            for c in (c for c in configs if c["ip"] == ip and c["frame_bytes"] == size):
                pts = [p for p in c["points"] if p["offered_bps"] and p["forwarded_bps"]]
                pts.sort(key=lambda p: p["offered_bps"]["mean"])
                if not pts:
                    continue
                x = [p["offered_bps"]["mean"] / 1e6 for p in pts]
                y = [p["forwarded_bps"]["mean"] / 1e6 for p in pts]
                ax.errorbar(
                    x, y, xerr=_err([p["offered_bps"] for p in pts]), yerr=_err([p["forwarded_bps"] for p in pts]),
                    marker="o", ms=3, capsize=3, lw=1, label=label(c),
                )  # fmt: skip
                top = max(top, *x, *y)
            if top > 0:
                ax.plot([0, top], [0, top], color="0.7", lw=0.8, ls=":", label="forwarded = offered")
            ax.set_title(f"{size} B, IPv{ip}", fontsize="medium")
            ax.set_xlabel("offered [Mbit/s]")
            ax.set_ylabel("forwarded [Mbit/s]")
            ax.set_xlim(left=0)
            ax.set_ylim(bottom=0)
            ax.legend(fontsize="x-small")
    fig.suptitle(_title(meta), fontsize="small")
    return _save(fig, path)


def plot_max_forwarded(path: Path, summary: dict[str, Any], meta: dict[str, Any] | None) -> Path:
    """Bars: max mean forwarded rate (and NDR if searched) per set-up, grouped by frame size."""
    configs = summary["configs"]
    has_ndr = any(c.get("ndr") and c["ndr"].get("ndr_bps") for c in configs)
    panels = [("max_forwarded", "max. forwarded [Mbit/s]")] + (
        [("ndr", "loss-free per router (NDR) [Mbit/s]")] if has_ndr else []
    )
    groups = sorted({(c["ip"], c["frame_bytes"]) for c in configs})
    labels = sorted({label(c) for c in configs}, key=lambda s: (not s.startswith("none"), s))
    fig = Figure(figsize=(max(6.0, 1.1 * len(groups) * len(labels)), 3.6 * len(panels)), layout="constrained")
    axes = fig.subplots(len(panels), 1, squeeze=False)
    width = 0.8 / max(1, len(labels))
    for (what, ylabel), ax in zip(panels, (a[0] for a in axes), strict=True):
        for li, lab in enumerate(labels):
            xs, hs, ds = [], [], []
            for gi, (ip, size) in enumerate(groups):
                c = next((c for c in configs if label(c) == lab and (c["ip"], c["frame_bytes"]) == (ip, size)), None)
                d = None
                if c is not None and what == "max_forwarded" and c["max_forwarded"]:
                    d = c["max_forwarded"]["forwarded_bps"]
                elif c is not None and what == "ndr" and c.get("ndr"):
                    d = c["ndr"]["ndr_bps"]
                if d is None:
                    continue
                xs.append(gi + (li - (len(labels) - 1) / 2) * width)
                hs.append(d["mean"] / 1e6)
                ds.append(d)
            ax.bar(xs, hs, width=width, yerr=_err(ds), capsize=3, label=lab)
        ax.set_xticks(range(len(groups)), [f"{s} B / IPv{ip}" for ip, s in groups])
        ax.set_ylim(bottom=0)
        ax.set_ylabel(ylabel)
        ax.legend(fontsize="x-small")
    fig.suptitle(_title(meta), fontsize="small")
    return _save(fig, path)


def plot_routers(path: Path, routers: list[dict[str, Any]], meta: dict[str, Any] | None) -> Path:
    """Per-router forwarded rate at each set-up's highest offered rate and largest frame size,
    grouped by the number of co-located routers, with Jain's index of the means."""
    ok = [r for r in routers if r["phase"] == "sweep" and r["forwarded_bps"] is not None]
    setups = sorted({(r["hv"], r["nic"], r["load"], r["ip"]) for r in ok if r.get("role", "router") == "router"})
    fig = Figure(figsize=(6.5, 3.4 * max(1, len(setups))), layout="constrained")
    axes = fig.subplots(max(1, len(setups)), 1, squeeze=False)
    for (hv, nic, load, ip), ax in zip(setups, (a[0] for a in axes), strict=False):
        rows = [
            r
            for r in ok
            if (r["hv"], r["nic"], r["load"], r["ip"]) == (hv, nic, load, ip) and r.get("role", "router") == "router"
        ]
        size = max(r["frame_bytes"] for r in rows)
        rows = [r for r in rows if r["frame_bytes"] == size]
        counts = sorted({r["routers"] for r in rows})
        ticks = []
        for gi, n in enumerate(counts):
            rn = [r for r in rows if r["routers"] == n]
            rate = max(rn, key=lambda r: (r["rate_bps"] == 0, r["rate_bps"]))["rate_bps"]
            per: dict[int, list[float]] = defaultdict(list)
            for r in rn:
                if r["rate_bps"] == rate and math.isfinite(r["forwarded_bps"]):
                    per[r["router"]].append(r["forwarded_bps"])
            stats = [describe(per[k]) for k in sorted(per)]
            boots = [bootstrap_mean_interval(per[k]) for k in sorted(per)]
            w = 0.8 / len(stats)
            xs = [gi + (k - (len(stats) - 1) / 2) * w for k in range(len(stats))]
            errs = _err([{"mean": s.mean, "boot95_low": b[0], "boot95_high": b[1]} if b else None
                         for s, b in zip(stats, boots, strict=True)])  # fmt: skip
            colors = [f"C{k % 10}" for k in range(len(stats))]
            ax.bar(xs, [s.mean / 1e6 for s in stats], width=w, yerr=errs, capsize=2, color=colors, edgecolor="white")
            j = jain_index([s.mean for s in stats])
            rate_txt = "max" if rate == 0 else f"{rate / 1e6:g}M"
            jain = "n/a" if j is None else f"{j:.3f}"
            ticks.append(f"{n} router{'s' if n > 1 else ''} @{rate_txt}\nJain {jain}")
        ax.set_xticks(range(len(counts)), ticks)
        ax.set_ylim(bottom=0)
        ax.set_ylabel("forwarded per router [Mbit/s]")
        name = hv_name(hv, nic)
        ax.set_title(f"{name}, load={load}, {size} B, IPv{ip}", fontsize="medium")
    fig.suptitle(_title(meta), fontsize="small")
    return _save(fig, path)


def plot_all(
    run_dir: Path, summary: dict[str, Any], routers: list[dict[str, Any]], meta: dict[str, Any] | None
) -> list[Path]:
    """Draw every plot into ``run_dir``; return their paths (none before the first point)."""
    if not summary["configs"]:
        return []
    return [
        plot_offered_forwarded(run_dir / "offered_vs_forwarded.png", summary, meta),
        plot_max_forwarded(run_dir / "max_forwarded.png", summary, meta),
        plot_routers(run_dir / "routers.png", routers, meta),
    ]
