"""Paper 004's Figs. 2 and 3 re-drawn: one panel per claim of :mod:`analysis.paper` that has a
shape over the rate, the points measured here beside the values the paper states.

Measured: per rate, the mean of the repetitions with its 95 % percentile-bootstrap interval
(:func:`analysis.stats.inference.bootstrap_mean_interval`: within the values' range, so never
below 0 for a non-negative figure; a rate with one repetition is drawn as its point, without an
interval); runs of which only a lower bound is known are open triangles ('≥'), never in the mean.
Fig. 2's x is the mean offered rate of the repetitions, Fig. 3's the requested cross-traffic rate.
Paper: :data:`analysis.paper.STATED`, a stated range as a shaded band, a stated point as a solid
line, a one-sided statement as a dashed line ('≥'/'≤'), a rate the text names as a vertical line.
A panel without measurements shows the paper's values and "not measured: <reason>", never zeros;
a claim the paper gives no value for says so.

Pure: baseline rows (Fig. 2) and run records (Fig. 3) in, :class:`PanelData` out; :func:`render`
draws a ``matplotlib.figure.Figure`` (no pyplot), :func:`save` writes it as PNG, SVG and PDF."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from analysis import paper as ap
from analysis.present.formats import save_figure
from analysis.stats.inference import bootstrap_mean_interval
from analysis.values import finite

PAPER_COLOR = "tab:green"
MEASURED_COLOR = "tab:blue"
MEASURED_LABEL = "measured here (mean, 95 % bootstrap interval)"
BOUND_LABEL = "measured here: only a lower bound known (≥)"
PAPER_LABEL = "paper 004 (stated)"
LINTHRESH_MBIT = 1.0  # the rate axes are symmetric-log: 0, 1 and 1000 Mbit/s on one axis
DPI = 110
HV_NAMES = {"none": "Linux (HV=none)", "kvm": "KVM", "xen": "Xen", "criu": "CRIU (for OpenVZ)"}


@dataclass(frozen=True)
class Point:
    """One rate's measurement: mean and interval in the metric's SI unit, over ``n`` runs."""

    rate_bps: float
    mean: float
    interval: tuple[float, float] | None
    n: int


@dataclass(frozen=True)
class PanelData:
    """What one panel shows: claim ``claim``'s measured points and bounds, the paper's stated
    values, and why nothing was measured (``why_empty``).  Values are SI; ``scale`` and ``unit``
    display them."""

    claim: str
    figure: str
    title: str
    statement: str
    xlabel: str
    ylabel: str
    scale: float
    unit: str
    points: tuple[Point, ...]
    bounds: tuple[tuple[float, float], ...]
    stated: tuple[ap.Stated, ...]
    why_empty: str | None = None
    diagonal: bool = False


@dataclass(frozen=True)
class FigureSpec:
    """A figure file: its name (without suffix), title, the claims of its panels, in columns."""

    name: str
    title: str
    claims: tuple[str, ...]
    columns: int


FIGURES: tuple[FigureSpec, ...] = (
    FigureSpec("paper-fig2", "Paper 004 Fig. 2 re-drawn: forwarded vs offered rate (top 1500 B, bottom 64 B)",
               ("F1", "F2", "F3", "F4", "F5", "F6", "F7", "F8"), 4),
    FigureSpec("paper-fig3a-downtime", "Paper 004 Fig. 3a re-drawn: downtime vs cross-traffic rate",
               ("M1", "M2", "M8"), 3),
    FigureSpec("paper-fig3a-rtt", "Paper 004 Fig. 3a re-drawn: RTT increase during the migration", ("M7",), 1),
    FigureSpec("paper-fig3b-duration", "Paper 004 Fig. 3b re-drawn: migration duration vs cross-traffic rate",
               ("M3", "M4"), 2),
    FigureSpec("paper-fig3b-volume", "Paper 004 Fig. 3b re-drawn: migration volume vs cross-traffic rate",
               ("M5", "M6"), 2),
)  # fmt: skip

_FIG3_METRIC_NAMES = {
    "downtime_packets_s": "downtime (sink's packet gap)",
    "duration_link_s": "duration (migration link)",
    "volume_link_bytes": "volume (migration link)",
    "rtt_increase_median_ms": "median RTT increase",
}
_RATE_LABEL = "cross-traffic rate [Mbit/s] (symmetric log)"


def _point(rate_bps: float, values: Sequence[float]) -> Point:
    return Point(rate_bps, float(np.mean(values)), bootstrap_mean_interval(values), len(values))


# ------------------------------------------------------------------ Fig. 2


def _fig2_rows(rows: Sequence[Mapping[str, Any]], hv: str, frame: int) -> list[Mapping[str, Any]]:
    """The successful sweep repetitions of the configuration :func:`analysis.paper.fig2_claims`
    compares: ``hv`` at ``frame`` bytes, IPv4, one router, unloaded (KVM: the virtio NIC)."""
    return [
        r
        for r in rows
        if (r.get("hv"), r.get("frame_bytes"), r.get("ip"), r.get("routers"), r.get("load"))
        == (hv, frame, 4, 1, "none")
        and r.get("phase") == "sweep"
        and r.get("status") == "ok"
        and (hv != "kvm" or r.get("nic") == "virtio")
    ]


def fig2_points(rows: Sequence[Mapping[str, Any]]) -> tuple[Point, ...]:
    """Per swept rate: x the mean offered rate, the mean forwarded rate and its interval (a rate
    whose repetitions have no offered or no forwarded figure is left out)."""
    by_rate: dict[Any, list[Mapping[str, Any]]] = defaultdict(list)
    for r in rows:
        by_rate[r.get("rate_bps")].append(r)
    out = []
    for reps in by_rate.values():
        offered = [v for v in (finite(r.get("offered_bps")) for r in reps) if v is not None]
        fwd = [v for v in (finite(r.get("forwarded_bps")) for r in reps) if v is not None]
        if offered and fwd:
            out.append(_point(float(np.mean(offered)), fwd))
    return tuple(sorted(out, key=lambda p: p.rate_bps))


def fig2_panels(rows: Sequence[Mapping[str, Any]] | None) -> dict[str, PanelData]:
    """Fig. 2's panels (F1-F8) from a baseline's per-repetition rows (baseline.csv, types as
    :func:`analysis.baseline.points.analyse_point` gives them); None: no baseline ran."""
    out = {}
    for spec in ap.FIG2_CLAIMS:
        mine = _fig2_rows(rows or [], spec.hv, spec.frame)
        points = fig2_points(mine)
        why = None
        if rows is None:
            why = "no baseline ran (paper004-fig2)"
        elif not points:
            nic = ", virtio" if spec.hv == "kvm" else ""
            why = f"the baseline has no successful HV={spec.hv} point at {spec.frame} B (IPv4, 1 router, unloaded{nic})"
        name = HV_NAMES.get(spec.hv, spec.hv) + (" (virtio)" if spec.hv == "kvm" else "")
        out[spec.id] = PanelData(
            spec.id, "Fig. 2", f"{spec.id}: {name}, {spec.frame} B", spec.statement,
            "offered rate [Mbit/s] (symmetric log)", "forwarded [Mbit/s]", 1e-6, "Mbit/s", points, (),
            ap.stated_for(spec.id), why, diagonal=True,
        )  # fmt: skip
    return out


# ------------------------------------------------------------------ Fig. 3


def _completed(records: Sequence[Mapping[str, Any]], hv: str, frame: int) -> list[Mapping[str, Any]]:
    return [r for r in records if (r.get("hv"), r.get("frame_bytes"), r.get("status")) == (hv, frame, "completed")]


def fig3_series(
    runs: Sequence[Mapping[str, Any]], metric: str
) -> tuple[tuple[Point, ...], tuple[tuple[float, float], ...]]:
    """(points per rate, (rate, bound) of the runs whose ``metric`` is only a lower bound); runs
    without a rate, a value or a bound are left out."""
    values: dict[float, list[float]] = defaultdict(list)
    bounds = []
    for r in runs:
        rate = finite(r.get("rate_bps"))
        if rate is None:
            continue
        v = finite(r.get(metric))
        if v is not None:
            values[rate].append(v)
        elif (lower := finite(r.get(f"{metric}_lower"))) is not None:
            bounds.append((rate, lower))
    points = tuple(_point(rate, vs) for rate, vs in sorted(values.items()))
    return points, tuple(sorted(bounds))


def _fig3_panel(cid: str, figure: str, statement: str, runs: Sequence[Mapping[str, Any]], hv: str, frame: int,
                metric: str, unit: str, scale: float, no_campaign: bool) -> PanelData:  # fmt: skip
    points, bounds = fig3_series(runs, metric)
    why = None
    if no_campaign:
        why = "no migration campaign ran (paper004-fig3)"
    elif not runs:
        why = f"no completed HV={hv} {frame} B migration"
    elif not points and not bounds:
        why = f"no completed HV={hv} {frame} B migration has a value of {metric}"
    what = _FIG3_METRIC_NAMES.get(metric, metric)
    return PanelData(cid, figure, f"{cid}: {HV_NAMES.get(hv, hv)}, {frame} B", statement, _RATE_LABEL,
                     f"{what} [{unit}]", scale, unit, points, bounds, ap.stated_for(cid), why)  # fmt: skip


def fig3_panels(records: Sequence[Mapping[str, Any]] | None) -> dict[str, PanelData]:
    """Fig. 3's panels (M1-M8) from a migration campaign's run records
    (:func:`migrate.campaigns.reporting.collect`); None: no campaign ran."""
    recs = records or []
    none = records is None
    out = {}
    for lv in ap.FIG3_LEVELS:
        figure = "Fig. 3b" if lv.metric in ("duration_link_s", "volume_link_bytes") else "Fig. 3a"
        out[lv.id] = _fig3_panel(lv.id, figure, lv.statement, _completed(recs, lv.series, 1500), lv.series, 1500,
                                 lv.metric, lv.unit, lv.scale, none)  # fmt: skip
    m8 = "KVM's downtime with 64 B frames is slightly higher than with 1500 B frames"
    out["M8"] = _fig3_panel("M8", "Fig. 3a", m8, _completed(recs, "kvm", 64), "kvm", 64, "downtime_packets_s", "s",
                            1.0, none)  # fmt: skip
    return out


# ------------------------------------------------------------------ drawing


def y_top(p: PanelData) -> float | None:
    """The highest value the panel shows (display units): measured means, interval ends and
    bounds, and the paper's stated y values; None when there is none."""
    ys = [v for pt in p.points for v in (pt.mean, *(pt.interval or ()))]
    ys += [b[1] for b in p.bounds]
    ys += [v for s in p.stated if s.axis == "y" for v in (s.low, s.high) if v is not None]
    return max(ys) * p.scale if ys else None


def stated_text(s: ap.Stated, p: PanelData) -> str:
    """'≈ 0.17 s', '3-7 s', '≥ 300 Mbit/s', 'at 500 Mbit/s offered'."""
    scale, unit = (1e-6, "Mbit/s") if s.axis == "x" else (p.scale, p.unit)
    lo = None if s.low is None else f"{s.low * scale:.4g}"
    hi = None if s.high is None else f"{s.high * scale:.4g}"
    if s.axis == "x":
        return f"at {lo} {unit}" if s.kind == "point" else f"at {lo}-{hi} {unit}"
    return {"point": f"≈ {lo} {unit}", "range": f"{lo}-{hi} {unit}", "at least": f"≥ {lo} {unit}",
            "at most": f"≤ {hi} {unit}"}[s.kind]  # fmt: skip


def _draw_stated(ax: Axes, s: ap.Stated, p: PanelData) -> None:
    label = f"{PAPER_LABEL}: {stated_text(s, p)}"
    if s.axis == "x":
        lo, hi = (s.low or 0.0) / 1e6, (s.high if s.high is not None else s.low or 0.0) / 1e6
        if s.kind == "point":
            ax.axvline(lo, color=PAPER_COLOR, ls=":", lw=1.8, label=label)
        else:
            ax.axvspan(lo, hi, color=PAPER_COLOR, alpha=0.15, lw=0, label=label)
        return
    if s.kind == "range":
        lo, hi = float(s.low or 0.0) * p.scale, float(s.high or 0.0) * p.scale
        if s.x_range is None:
            ax.axhspan(lo, hi, color=PAPER_COLOR, alpha=0.2, lw=0, label=label)
        else:
            ax.fill_between([s.x_range[0] / 1e6, s.x_range[1] / 1e6], lo, hi, color=PAPER_COLOR, alpha=0.2, lw=0,
                            label=label)  # fmt: skip
        return
    y = float(s.low if s.low is not None else s.high or 0.0) * p.scale
    style = {"color": PAPER_COLOR, "lw": 2.0, "ls": "-" if s.kind == "point" else "--", "label": label}
    if s.x_range is None:
        ax.axhline(y, **style)
    else:
        ax.hlines(y, s.x_range[0] / 1e6, s.x_range[1] / 1e6, **style)


def _draw_measured(ax: Axes, p: PanelData) -> None:
    labelled = False
    for pt in p.points:
        x, y = pt.rate_bps / 1e6, pt.mean * p.scale
        label = None if labelled else MEASURED_LABEL
        if pt.interval is None:
            ax.plot([x], [y], "o", color=MEASURED_COLOR, ms=4, label=label)
        else:
            err = [[max(0.0, y - pt.interval[0] * p.scale)], [max(0.0, pt.interval[1] * p.scale - y)]]
            ax.errorbar([x], [y], yerr=err, fmt="o", color=MEASURED_COLOR, ms=4, capsize=3, lw=1, label=label)
        ax.annotate(f"n={pt.n}", (x, y), textcoords="offset points", xytext=(4, 4), fontsize="xx-small")
        labelled = True
    if p.bounds:
        ax.plot([b[0] / 1e6 for b in p.bounds], [b[1] * p.scale for b in p.bounds], "^", mfc="none",
                color=MEASURED_COLOR, ls="none", label=BOUND_LABEL)  # fmt: skip
    top = y_top(p)
    if p.diagonal and p.points and top:
        right = min(max(pt.rate_bps for pt in p.points) / 1e6, top)
        xs = np.concatenate(([0.0], np.geomspace(min(0.1, right), right, 60)))
        ax.plot(xs, xs, color="0.6", lw=0.8, ls=":", label="forwarded = offered")


def draw_panel(ax: Axes, p: PanelData) -> None:
    """One panel: the paper's stated values, the measured points and bounds, and what is absent."""
    for s in p.stated:
        _draw_stated(ax, s, p)
    _draw_measured(ax, p)
    notes = []
    if p.why_empty:
        notes.append(f"not measured: {p.why_empty}")
    if not p.stated:
        notes.append(f"the paper states no value, only: {p.statement}")
    if notes:
        ax.text(0.5, 0.97, "\n".join(notes), transform=ax.transAxes, ha="center", va="top", fontsize="x-small",
                wrap=True, bbox={"fc": "white", "ec": "0.7", "alpha": 0.9})  # fmt: skip
    ax.set_xscale("symlog", linthresh=LINTHRESH_MBIT)
    # a margin left: points at rate 0 stay visible; at least up to 10 Mbit/s on an empty axis
    ax.set_xlim(-0.3 * LINTHRESH_MBIT, max(ax.get_xlim()[1], 10 * LINTHRESH_MBIT))
    top = y_top(p)
    ax.set_ylim(0, 1.1 * top if top else None)
    ax.set_title(p.title, fontsize="small")
    ax.set_xlabel(p.xlabel, fontsize="small")
    ax.set_ylabel(p.ylabel, fontsize="small")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize="xx-small", loc="lower right")


def render(spec: FigureSpec, panels: Mapping[str, PanelData]) -> Figure:
    """The figure ``spec`` with its claims' panels (a claim missing from ``panels`` leaves its
    axes off)."""
    rows = -(-len(spec.claims) // spec.columns)
    fig = Figure(figsize=(4.4 * spec.columns, 3.8 * rows), layout="constrained")
    axes = fig.subplots(rows, spec.columns, squeeze=False)
    for ax, claim in zip(axes.flat, spec.claims + ("",) * (axes.size - len(spec.claims)), strict=True):
        if claim in panels:
            draw_panel(ax, panels[claim])
        else:
            ax.set_axis_off()
    fig.suptitle(spec.title, fontsize="medium")
    return fig


def caption(spec: FigureSpec, panels: Mapping[str, PanelData], conditions: Mapping[str, str]) -> str:
    """Where the paper's values come from, what was not measured, and the conditions that differ
    (``conditions``: claim id -> the conditions text of its :class:`analysis.paper.Claim`)."""
    parts = []
    for cid in spec.claims:
        p = panels.get(cid)
        if p is None:
            continue
        said = "; ".join(f"{stated_text(s, p)} ({s.citation}: {s.words})" for s in p.stated) or "no value stated"
        parts.append(f"{cid}: paper {said}" + (f"; not measured: {p.why_empty}" if p.why_empty else ""))
    conds = list(dict.fromkeys(conditions[c] for c in spec.claims if c in conditions))
    tail = " Conditions that differ: " + " | ".join(conds) + "." if conds else ""
    return f"Green: {PAPER_LABEL}; blue: {MEASURED_LABEL}, n runs per point. " + ". ".join(parts) + "." + tail


def save(fig: Figure, path: Path, formats: tuple[str, ...] | None = None) -> bytes:
    """Write ``fig`` to ``path`` and beside it in the other ``formats``; the PNG's bytes
    (:func:`analysis.present.formats.save_figure`)."""
    return save_figure(fig, path, formats, dpi=DPI)
