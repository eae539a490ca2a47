"""Sweep plots after paper 004 Fig. 3: metrics against the cross-traffic rate, one line per
series, accelerator and frame size, the mean with its 95 % CI as error bars and the number of runs
it is over (n) next to each point; runs where only a lower bound is known (censored) are never in
the mean: their largest bound is drawn as an open triangle ('≥').  Returns PNG bytes, and SVG or
PDF on request (Agg, no pyplot)."""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass

from matplotlib.figure import Figure

from analysis.stats.aggregate import PointStats

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
    """One line of a panel: means with CI error bars and n, and the censored points' bounds."""

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
            lo = st.ci_low if st.ci_low is not None else mean
            hi = st.ci_high if st.ci_high is not None else mean
        xs.append(x)
        ys.append(mean * scale)
        ns.append(n)
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
    fig.suptitle(spec.title + " — mean (n runs), error bars 95 % CI, △ lower bounds")
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
