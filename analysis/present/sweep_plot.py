"""Sweep plots after paper 004 Fig. 3: metrics against the cross-traffic rate, one line per
series, accelerator and frame size, the mean with its 95 % percentile-bootstrap interval as
asymmetric error bars (``Stats.boot_low``/``boot_high``: within the runs' range, so a downtime,
duration or volume bar never goes below 0, as mean ± t·sd/√n of a skewed small sample does; a
point of one run has no bar; the failure rate keeps its Wilson interval) and the number of runs it
is over (n) next to each point; runs where only a lower bound is known (censored) are never in
the mean: their largest bound is drawn as an open triangle ('≥').

Per-run distributions of the headline metrics (:data:`DISTRIBUTION_METRICS`), from the run records
(``analysis.stats.aggregate.run_record``): an empirical CDF per grid point (:func:`cdf_figure`)
and box plots per rate with every run as a dot (:func:`box_figure`).  Censored runs are never in a
CDF or a box: their bounds are drawn apart ('>' in the CDF, an open '△' in the box plot) and
counted in the legend.

Returns PNG bytes, and SVG or PDF on request (Agg, no pyplot)."""

from __future__ import annotations

import io
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from matplotlib import colormaps
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from analysis import qualify as q
from analysis.stats.aggregate import METRIC_BY_NAME, PointStats
from analysis.values import finite

COLORS = ("tab:blue", "tab:red", "tab:green", "tab:purple", "tab:orange", "tab:brown", "tab:pink", "tab:gray")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
DPI = 100


@dataclass(frozen=True)
class Panel:
    """One axes: the metrics drawn in it (name, legend suffix, line style), y label and scale."""

    title: str
    ylabel: str
    metrics: tuple[tuple[str, str, str], ...]
    scale: float = 1.0


@dataclass(frozen=True)
class FigureSpec:
    """A figure file: name, title and its panels side by side."""

    name: str
    title: str
    panels: tuple[Panel, ...]


FIGURES: tuple[FigureSpec, ...] = (
    FigureSpec(
        "fig3a_downtime.png",
        "Downtime vs cross-traffic (cf. paper 004 Fig. 3a)",
        (
            Panel("counters (10 ms sampling)", "downtime [ms]", (("downtime_counters_s", "", "-"),), 1e3),
            Panel("packets (sink gaps)", "downtime [ms]", (("downtime_packets_s", "", "-"),), 1e3),
            Panel("QEMU's figure", "downtime [ms]", (("downtime_hypervisor_s", "", "-"),), 1e3),
        ),
    ),
    FigureSpec(
        "fig3b_volume_duration.png",
        "Migration volume and duration vs cross-traffic (cf. paper 004 Fig. 3b)",
        (
            Panel(
                "volume",
                "volume [MB]",
                (("volume_link_bytes", " link", "-"), ("volume_hypervisor_bytes", " QEMU", "--")),
                1e-6,
            ),
            Panel(
                "duration",
                "duration [s]",
                (("duration_link_s", " link", "-"), ("duration_hypervisor_s", " QEMU", "--")),
            ),
        ),
    ),
    FigureSpec(
        "rtt_increase.png",
        "RTT increase during the migration (during − before)",
        (
            Panel("median", "RTT increase [ms]", (("rtt_increase_median_ms", "", "-"),)),
            Panel("p99", "RTT increase [ms]", (("rtt_increase_p99_ms", "", "-"),)),
        ),
    ),
    FigureSpec(
        "forwarded.png",
        "Forwarded vs offered cross-traffic, and failure rate",
        (
            Panel(
                "forwarded (offered dotted)",
                "rate [Mbit/s]",
                (("forwarded_bps", "", "-"), ("offered_bps", " offered", ":")),
                1e-6,
            ),
            Panel("failed migrations", "failure rate [%]", (("failure_rate", "", "-"),), 100.0),
        ),
    ),
)  # fmt: skip


LineKey = tuple[str, str | None, int | None]


def _lines(points: Sequence[PointStats]) -> dict[LineKey, list[PointStats]]:
    out: dict[LineKey, list[PointStats]] = {}
    for p in points:
        out.setdefault((p.series, p.accel, p.frame_bytes), []).append(p)
    for ps in out.values():
        ps.sort(key=lambda p: p.rate_bps or 0)
    return out


@dataclass(frozen=True)
class LineValues:
    """One line of a panel: means with their interval as asymmetric error bars ([below], [above]
    the mean; NaN: no interval, no bar) and n, and the censored points' bounds."""

    xs: list[float]
    ys: list[float]
    err: list[list[float]]
    ns: list[int]
    bound_xs: list[float]
    bound_ys: list[float]


def _values(ps: list[PointStats], metric: str, scale: float) -> LineValues:
    xs, ys, err_lo, err_hi, ns, bx, by = [], [], [], [], [], [], []
    for p in ps:
        if p.rate_bps is None:
            continue  # a point of unknown rate has no place on the rate axis
        x = p.rate_bps / 1e6
        if metric == "failure_rate":
            if p.failure_rate is None:
                continue
            lo, hi = p.failure_ci or (p.failure_rate, p.failure_rate)
            mean, n = p.failure_rate, p.n_attempts
        else:
            st = p.stats.get(metric)
            if st is not None and st.n_censored and st.lower_max is not None:
                bx.append(x)
                by.append(st.lower_max * scale)
            if st is None or st.mean is None:
                continue
            mean, n = st.mean, st.n
            lo, hi = st.boot_low, st.boot_high
        xs.append(x)
        ys.append(mean * scale)
        ns.append(n)
        if lo is None or hi is None:  # one run: no interval, no bar (not a bar of 0)
            err_lo.append(math.nan)
            err_hi.append(math.nan)
        else:
            err_lo.append(max(0.0, (mean - lo) * scale))
            err_hi.append(max(0.0, (hi - mean) * scale))
    return LineValues(xs, ys, [err_lo, err_hi], ns, bx, by)


def _line_order(kv: tuple[LineKey, list[PointStats]]) -> tuple[str, str, int]:
    (series, accel, frame), _ = kv
    return (series, str(accel), -(frame or 0))


def render_figure(
    spec: FigureSpec, points: Sequence[PointStats], formats: Sequence[str] = ("png",)
) -> dict[str, bytes]:
    """Draw one figure of ``points`` once and return it in each of ``formats`` (PNG always):
    format -> bytes."""
    return _save(mean_figure(spec, points), formats)


def mean_figure(spec: FigureSpec, points: Sequence[PointStats]) -> Figure:
    """The figure ``spec`` of ``points``: per panel and line the means with their bootstrap
    interval, n, and the censored runs' bounds."""
    n = len(spec.panels)
    fig = Figure(figsize=(5.0 * n, 4.0), dpi=DPI, layout="constrained")
    axes = fig.subplots(1, n, squeeze=False)[0]
    lines = _lines(points)
    series_names = sorted({(k[0], str(k[1])) for k in lines})
    frames = sorted({k[2] for k in lines if k[2] is not None}, reverse=True)
    for ax, panel in zip(axes, spec.panels, strict=True):
        drawn = False
        for (series, accel, frame), ps in sorted(lines.items(), key=_line_order):
            color = COLORS[series_names.index((series, str(accel))) % len(COLORS)]
            marker = MARKERS[(frames.index(frame) if frame in frames else 0) % len(MARKERS)]
            for metric, suffix, style in panel.metrics:
                v = _values(ps, metric, panel.scale)
                label = f"{series} {accel or ''} {frame} B{suffix}".replace("  ", " ").strip()
                if v.xs:
                    ax.errorbar(v.xs, v.ys, yerr=v.err, color=color, marker=marker, linestyle=style, capsize=3,
                                label=label)  # fmt: skip
                    for x, y, k in zip(v.xs, v.ys, v.ns, strict=True):
                        ax.annotate(f"n={k}", (x, y), textcoords="offset points", xytext=(4, 4), fontsize=6,
                                    color=color)  # fmt: skip
                    drawn = True
                if v.bound_xs:
                    ax.scatter(v.bound_xs, v.bound_ys, marker="^", facecolors="none", edgecolors=color,
                               label=f"{label} ≥ (censored runs)")  # fmt: skip
                    drawn = True
        ax.set_title(panel.title)
        ax.set_xlabel("cross-traffic [Mbit/s]")
        ax.set_ylabel(panel.ylabel)
        ax.grid(True, alpha=0.3)
        if drawn:
            ax.legend(fontsize="small")
            ax.set_ylim(bottom=min(0.0, ax.get_ylim()[0]))
        else:
            ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes, color="0.5")
    fig.suptitle(spec.title + "\n" + MEAN_CAPTION, fontsize="medium")
    return fig


#: what the mean plots draw (their title line and the report's caption)
MEAN_CAPTION = "mean (n runs), 95 % percentile-bootstrap interval; △ lower bounds (censored runs, not in the mean)"


def _save(fig: Figure, formats: Sequence[str]) -> dict[str, bytes]:
    """``fig`` in PNG and each of ``formats``: format -> bytes."""
    out = {}
    for fmt in ("png", *(f for f in formats if f != "png")):
        buf = io.BytesIO()
        fig.savefig(buf, format=fmt)
        out[fmt] = buf.getvalue()
    return out


def render_all(points: Sequence[PointStats], formats: Sequence[str] = ("png",)) -> dict[str, bytes]:
    """All sweep figures in each of ``formats``: file name (``fig3a_downtime.png``, ``.svg``,
    ``.pdf``) -> bytes; each figure is drawn once."""
    out: dict[str, bytes] = {}
    for spec in FIGURES:
        for fmt, data in render_figure(spec, points, formats).items():
            out[spec.name if fmt == "png" else spec.name.removesuffix(".png") + f".{fmt}"] = data
    return out


#: the per-run distributions drawn (metric, axis label, scale): the downtimes, durations and volumes
DISTRIBUTION_METRICS: tuple[tuple[str, str, float], ...] = (
    ("downtime_counters_s", "downtime (counters) [ms]", 1e3),
    ("downtime_packets_s", "downtime (packets) [ms]", 1e3),
    ("downtime_hypervisor_s", "downtime (QEMU) [ms]", 1e3),
    ("duration_link_s", "duration (link) [s]", 1.0),
    ("duration_hypervisor_s", "duration (QEMU) [s]", 1.0),
    ("volume_link_bytes", "volume (link) [MB]", 1e-6),
    ("volume_hypervisor_bytes", "volume (QEMU) [MB]", 1e-6),
)
#: what the distribution plots draw (their title's second line and the report's captions)
CDF_CAPTION = "over the measured runs; '>' lower bounds of censored runs (not in the CDF)"
BOX_CAPTION = "box: median, quartiles, whiskers at 1.5 IQR; dots: every run; △ lower bounds (censored, not in the box)"

#: the ``gid`` of the markers of censored runs' bounds and of the runs' dots (SVG ids)
BOUND_GID, RUNS_GID = "censored-bound", "runs"
#: a grid point of the distribution plots: (series, accelerator, frame size, rate [bit/s])
PointKey = tuple[str, str | None, int | None, float]


@dataclass(frozen=True)
class RunValues:
    """One metric over the completed runs of one grid point: the measured values, the censored
    runs' lower bounds (never values), how many were censored (a bound may be unknown) and how
    many had no figure."""

    values: list[float] = field(default_factory=list)
    bounds: list[float] = field(default_factory=list)
    n_censored: int = 0
    n_absent: int = 0


def run_values(records: Sequence[Mapping[str, Any]], metric: str) -> dict[PointKey, RunValues]:
    """``metric`` of the completed runs in ``records`` per grid point (runs of unknown rate have no
    place on the rate axis), as ``analysis.stats.aggregate.describe_metric`` counts them: a run
    whose qualifier says censored gives its bound (``lower``), one with a value its value, any
    other completed run is absent.  A run without a recorded accelerator joins its point's."""
    accel_of = {
        (r.get("series", ""), r.get("rate_bps"), r.get("frame_bytes")): r["accel"]
        for r in records
        if r.get("accel") is not None
    }
    acc: dict[PointKey, tuple[list[float], list[float], list[int]]] = {}
    for r in records:
        rate = finite(r.get("rate_bps"))
        if r.get("status") != "completed" or rate is None:
            continue
        series, frame = str(r.get("series", "")), r.get("frame_bytes")
        accel = r.get("accel") or accel_of.get((r.get("series", ""), r.get("rate_bps"), frame))
        values, bounds, counts = acc.setdefault((series, accel, frame, rate), ([], [], [0, 0]))
        qual = r.get("quals", {}).get(metric) if isinstance(r.get("quals"), Mapping) else None
        value = finite(r.get(metric))
        if isinstance(qual, Mapping) and qual.get("state") == q.CENSORED and value is None:
            counts[0] += 1
            bound = finite(qual.get("lower"))
            if bound is not None:
                bounds.append(bound)
        elif value is not None:
            values.append(value)
        else:
            counts[1] += 1
    return {k: RunValues(sorted(v), sorted(b), c[0], c[1]) for k, (v, b, c) in acc.items()}


def _point_order(key: PointKey) -> tuple[str, str, int, float]:
    series, accel, frame, rate = key
    return (series, str(accel), -(frame or 0), rate)


def _point_label(key: PointKey) -> str:
    series, accel, frame, rate = key
    return f"{series} {accel or ''} {frame} B {rate / 1e6:g} Mbit/s".replace("  ", " ").strip()


def _counts_text(rv: RunValues) -> str:
    """'n=5; 2 censored (>); 1 absent'."""
    text = f"n={len(rv.values)}"
    if rv.n_censored:
        text += f"; {rv.n_censored} censored (>)"
    if rv.n_absent:
        text += f"; {rv.n_absent} absent"
    return text


def _no_data(ax: Any) -> None:
    ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes, color="0.5")


def _distribution_figure(
    records: Sequence[Mapping[str, Any]],
    metric: str,
    axis_label: str,
    scale: float,
    draw: Any,
    what: str,
) -> Figure:
    """One per-run distribution figure of ``metric``: ``draw(ax, run values, axis_label, scale)``
    and the title ``<metric label>: <what>``."""
    fig = Figure(figsize=(7.5, 4.5), dpi=DPI, layout="constrained")
    ax = fig.subplots()
    draw(ax, run_values(records, metric), axis_label, scale)
    label = METRIC_BY_NAME[metric].label if metric in METRIC_BY_NAME else metric
    fig.suptitle(f"{label}: {what}", fontsize="medium")
    return fig


def cdf_figure(records: Sequence[Mapping[str, Any]], metric: str, xlabel: str, scale: float = 1.0) -> Figure:
    """The empirical CDF of ``metric`` over each grid point's measured runs, one step line per
    point (colour: rate; line style: series, accelerator and frame size); censored runs are not
    in a CDF: their bounds are '>' marks above it, one row per point, counted in the legend."""
    what = f"empirical CDF of the runs per grid point\n{CDF_CAPTION}"
    return _distribution_figure(records, metric, xlabel, scale, _draw_cdf, what)


def _draw_cdf(ax: Any, points: Mapping[PointKey, RunValues], xlabel: str, scale: float) -> None:
    keys = sorted(points, key=_point_order)
    rates = sorted({k[3] for k in keys})
    lines = sorted({k[:3] for k in keys}, key=lambda k: (k[0], str(k[1]), -(k[2] or 0)))
    cmap = colormaps["viridis"]
    styles = ("-", "--", ":", "-.")
    drawn = 0
    for row, key in enumerate(keys):
        rv = points[key]
        if not rv.values and not rv.bounds:
            continue
        color = cmap(rates.index(key[3]) / max(1, len(rates) - 1) * 0.9)
        style = styles[lines.index(key[:3]) % len(styles)]
        label = f"{_point_label(key)} ({_counts_text(rv)})"
        if rv.values:
            ax.ecdf([v * scale for v in rv.values], color=color, linestyle=style, label=label)
            label = None
        if rv.bounds:
            y = 1.0 + 0.04 * (row + 1)
            ax.scatter([b * scale for b in rv.bounds], [y] * len(rv.bounds), marker=">", color=color, label=label,
                       clip_on=False, zorder=3, gid=BOUND_GID)  # fmt: skip
        drawn += 1
    ax.set_xlabel(xlabel)
    ax.set_ylabel("fraction of measured runs ≤ x")
    ax.set_yticks([0.0, 0.25, 0.5, 0.75, 1.0])
    ax.grid(True, alpha=0.3)
    if drawn:
        ax.set_ylim(-0.02, 1.0 + 0.04 * (len(keys) + 1))
        ax.legend(fontsize="x-small", loc="lower right")
    else:
        _no_data(ax)


def box_figure(records: Sequence[Mapping[str, Any]], metric: str, ylabel: str, scale: float = 1.0) -> Figure:
    """Box plots of ``metric`` per rate, one box per grid point over its measured runs (median,
    quartiles, whiskers at 1.5 IQR; a point of one run has only its dot), every run drawn as a
    dot over it; censored runs' bounds as open triangles beside the box, never in it."""
    what = f"per-run distribution per grid point\n{BOX_CAPTION}"
    return _distribution_figure(records, metric, ylabel, scale, _draw_box, what)


def _draw_box(ax: Any, points: Mapping[PointKey, RunValues], ylabel: str, scale: float) -> None:
    keys = [k for k in sorted(points, key=_point_order) if points[k].values or points[k].bounds]
    rates = sorted({k[3] for k in keys})
    lines = sorted({k[:3] for k in keys}, key=lambda k: (k[0], str(k[1]), -(k[2] or 0)))
    width = 0.8 / max(1, len(lines))
    handles = []
    for j, line in enumerate(lines):
        color = COLORS[j % len(COLORS)]
        series, accel, frame = line
        handles.append(Line2D([], [], color=color, marker="o", linestyle="-",
                              label=f"{series} {accel or ''} {frame} B".replace("  ", " ").strip()))  # fmt: skip
        for key in (k for k in keys if k[:3] == line):
            rv = points[key]
            pos = rates.index(key[3]) + (j - (len(lines) - 1) / 2) * width
            ys = [v * scale for v in rv.values]
            if len(ys) >= 2:
                props = {"color": color}
                ax.boxplot([ys], positions=[pos], widths=width * 0.7, whis=1.5, showfliers=False, manage_ticks=False,
                           medianprops=props, boxprops=props, whiskerprops=props, capprops=props)  # fmt: skip
            if ys:
                spread = [pos + width * 0.25 * (2 * i / (len(ys) - 1) - 1) if len(ys) > 1 else pos
                          for i in range(len(ys))]  # fmt: skip
                ax.scatter(spread, ys, s=10, color=color, alpha=0.7, zorder=3, gid=RUNS_GID)
            if rv.bounds:
                ax.scatter([pos + width * 0.3] * len(rv.bounds), [b * scale for b in rv.bounds], marker="^",
                           facecolors="none", edgecolors=color, zorder=3, gid=BOUND_GID)  # fmt: skip
            top = max([*ys, *(b * scale for b in rv.bounds)])
            ax.annotate(_counts_text(rv).replace(" (>)", " (△)"), (pos, top), textcoords="offset points",
                        xytext=(0, 6), ha="center", fontsize=6, color=color)  # fmt: skip
    ax.set_xlabel("cross-traffic [Mbit/s]")
    ax.set_ylabel(ylabel)
    ax.grid(True, axis="y", alpha=0.3)
    if keys:
        ax.set_xticks(range(len(rates)), [f"{r / 1e6:g}" for r in rates])
        ax.set_xlim(-0.6, len(rates) - 0.4)
        handles += [
            Line2D([], [], color="0.3", marker="o", linestyle="none", markersize=3, label="a run"),
            Line2D([], [], color="0.3", marker="^", markerfacecolor="none", linestyle="none",
                   label="≥ bound (censored run)"),
        ]  # fmt: skip
        ax.legend(handles=handles, fontsize="x-small")
    else:
        _no_data(ax)


def distribution_name(metric: str, kind: str, fmt: str = "png") -> str:
    """``sweep-<metric>-<kind>.<fmt>``."""
    return f"sweep-{metric}-{kind}.{fmt}"


def render_distributions(records: Sequence[Mapping[str, Any]], formats: Sequence[str] = ("png",)) -> dict[str, bytes]:
    """The CDF and box plot of every metric of :data:`DISTRIBUTION_METRICS` in each of ``formats``:
    file name (``sweep-downtime_counters_s-cdf.png``, ``.svg``, ``.pdf``) -> bytes."""
    out: dict[str, bytes] = {}
    for metric, label, scale in DISTRIBUTION_METRICS:
        for kind, figure in (("cdf", cdf_figure), ("box", box_figure)):
            for fmt, data in _save(figure(records, metric, label, scale), formats).items():
                out[distribution_name(metric, kind, fmt)] = data
    return out
