"""Sweep plots after paper 004 Fig. 3: metrics against the cross-traffic rate, one line per
series and frame size, the mean with its 95 % CI as error bars.  Returns PNG bytes (Agg, no pyplot)."""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass

from matplotlib.figure import Figure

from analysis.aggregate import PointStats

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


def _lines(points: Sequence[PointStats]) -> dict[tuple[str, int | None], list[PointStats]]:
    out: dict[tuple[str, int | None], list[PointStats]] = {}
    for p in points:
        out.setdefault((p.series, p.frame_bytes), []).append(p)
    for ps in out.values():
        ps.sort(key=lambda p: p.rate_bps or 0)
    return out


def _values(ps: list[PointStats], metric: str, scale: float) -> tuple[list[float], list[float], list[list[float]]]:
    xs, ys, err_lo, err_hi = [], [], [], []
    for p in ps:
        if metric == "failure_rate":
            if p.failure_rate is None:
                continue
            lo, hi = p.failure_ci or (p.failure_rate, p.failure_rate)
            mean = p.failure_rate
        else:
            st = p.stats.get(metric)
            if st is None or st.mean is None:
                continue
            mean = st.mean
            lo = st.ci_low if st.ci_low is not None else mean
            hi = st.ci_high if st.ci_high is not None else mean
        xs.append((p.rate_bps or 0) / 1e6)
        ys.append(mean * scale)
        err_lo.append(max(0.0, (mean - lo) * scale))
        err_hi.append(max(0.0, (hi - mean) * scale))
    return xs, ys, [err_lo, err_hi]


def render_figure(spec: FigureSpec, points: Sequence[PointStats]) -> bytes:
    """Draw one figure of ``points`` and return it as PNG bytes."""
    n = len(spec.panels)
    fig = Figure(figsize=(5.0 * n, 4.0), dpi=DPI, layout="constrained")
    axes = fig.subplots(1, n, squeeze=False)[0]
    lines = _lines(points)
    series_names = sorted({k[0] for k in lines})
    frames = sorted({k[1] for k in lines if k[1] is not None}, reverse=True)
    for ax, panel in zip(axes, spec.panels, strict=True):
        drawn = False
        for (series, frame), ps in sorted(lines.items(), key=lambda kv: (kv[0][0], -(kv[0][1] or 0))):
            color = COLORS[series_names.index(series) % len(COLORS)]
            marker = MARKERS[(frames.index(frame) if frame in frames else 0) % len(MARKERS)]
            for metric, suffix, style in panel.metrics:
                xs, ys, err = _values(ps, metric, panel.scale)
                if not xs:
                    continue
                label = f"{series} {frame} B{suffix}".strip()
                ax.errorbar(xs, ys, yerr=err, color=color, marker=marker, linestyle=style, capsize=3, label=label)
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
    fig.suptitle(spec.title + " — mean, error bars 95 % CI")
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def render_all(points: Sequence[PointStats]) -> dict[str, bytes]:
    """All sweep figures: file name -> PNG bytes."""
    return {spec.name: render_figure(spec, points) for spec in FIGURES}
