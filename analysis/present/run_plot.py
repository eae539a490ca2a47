"""The run plot, after paper 004 Fig. 3: traffic rates (top) and RTT (bottom) around the migration."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure  # a bare Figure renders PNG with Agg: no pyplot, no global backend

from analysis.present.formats import save_figure

MARK_STYLE = {
    "migrate": ("tab:red", "-"),
    "stop": ("tab:purple", "--"),
    "completed": ("tab:red", "-"),
    "cont": ("tab:green", "--"),
    "announce-self": ("tab:olive", ":"),
}


@dataclass(frozen=True, eq=False)
class Series:
    """A time series: CLOCK_REALTIME ns and values."""

    t_ns: np.ndarray
    values: np.ndarray


@dataclass(frozen=True, eq=False)
class Zoom:
    """The outage panel: its time range, the anatomy's marks in it and the sink's gaps
    (``gaps``: rows [t_before_ns, t_after_ns, lossy 0/1])."""

    lo_ns: int
    hi_ns: int
    marks: tuple[tuple[str, int], ...]
    gaps: np.ndarray


@dataclass(frozen=True, eq=False)
class PlotData:
    """What the run plot shows; rates in bit/s, RTT in ms (NaN = lost probe)."""

    t0_ns: int | None
    cross: Series | None
    offered: Series | None
    migration: Series | None
    rtt: Series | None
    marks: tuple[tuple[str, int], ...] = ()
    title: str = ""
    zoom: Zoom | None = None


def _t0(data: PlotData) -> int:
    if data.t0_ns is not None:
        return data.t0_ns
    series = (data.cross, data.offered, data.migration, data.rtt)
    starts = [int(s.t_ns[0]) for s in series if s is not None and s.t_ns.size]
    return min(starts) if starts else 0


def _draw_rates(ax, data: PlotData, t0: int) -> None:
    """Cross-traffic on the left axis, the migration stream on its own right axis: at low
    cross-traffic rates the multi-Gbit/s migration bursts would otherwise flatten it."""
    handles = []
    for series, label, style in (
        (data.offered, "offered (A eth0 tx)", {"color": "0.6", "lw": 0.8}),
        (data.cross, "cross-traffic (B eth0 rx)", {"color": "tab:blue", "lw": 1.0}),
    ):
        if series is not None and series.t_ns.size:
            handles += ax.plot((series.t_ns - t0) / 1e9, series.values / 1e6, label=label, **style)
    ax.set_ylabel("cross-traffic [Mbit/s]")
    ax.set_ylim(bottom=0)
    if data.migration is not None and data.migration.t_ns.size:
        mig = ax.twinx()
        handles += mig.plot(
            (data.migration.t_ns - t0) / 1e9,
            data.migration.values / 1e6,
            label="migration (R1 mig0 tx, right axis)",
            color="tab:orange",
            lw=1.0,
        )
        mig.set_ylabel("migration link [Mbit/s]", color="tab:orange")
        mig.set_ylim(bottom=0)
    if handles:
        ax.legend(handles=handles, loc="upper left", fontsize="small")


def _draw_rtt(ax, rtt: Series | None, t0: int) -> None:
    if rtt is not None and rtt.t_ns.size:
        t = (rtt.t_ns - t0) / 1e9
        ok = np.isfinite(rtt.values)
        ax.plot(t[ok], rtt.values[ok], ".", ms=2, color="tab:blue", label="RTT C→D")
        if (~ok).any():
            ax.plot(
                t[~ok],
                np.ones(int((~ok).sum())),
                "|",
                color="tab:red",
                ms=8,
                transform=ax.get_xaxis_transform(),
                label="lost probe",
            )
        ax.legend(loc="upper left", fontsize="small")
    ax.set_ylabel("RTT [ms]")
    ax.set_xlabel("time relative to migration start [s]")


def _draw_marks(top, bottom, marks: tuple[tuple[str, int], ...], t0: int) -> None:
    lo, hi = top.get_xlim()
    close = 0.015 * (hi - lo)  # marks closer than this share one label
    groups: list[list[tuple[str, float]]] = []
    for label, t_ns in sorted(marks, key=lambda m: m[1]):
        x = (t_ns - t0) / 1e9
        color, ls = MARK_STYLE.get(label, ("0.3", "-."))
        for ax in (top, bottom):
            ax.axvline(x, color=color, ls=ls, lw=1)
        if groups and x - groups[-1][-1][1] < close:
            groups[-1].append((label, x))
        else:
            groups.append([(label, x)])
    for group in groups:
        x = group[-1][1]
        top.annotate(
            " / ".join(g[0] for g in group),
            (x, 1),
            xycoords=("data", "axes fraction"),
            rotation=90,
            va="top",
            ha="left",
            fontsize="x-small",
            color="0.2",
        )


def _draw_zoom(ax, data: PlotData, z: Zoom, t0: int) -> None:
    """The outage up close (ms from the migration start): the cross-traffic received at B per
    counter interval, the sink's gaps as bands (red: packets lost, grey: delayed only) and the
    anatomy's marks, labelled."""
    ms = 1e6
    if data.cross is not None and data.cross.t_ns.size:
        t = data.cross.t_ns
        keep = (t >= z.lo_ns - 20 * ms) & (t <= z.hi_ns + 20 * ms)
        ax.step((t[keep] - t0) / ms, data.cross.values[keep] / 1e6, where="pre", color="tab:blue", lw=1.0,
                label="cross-traffic (B eth0 rx)")  # fmt: skip
    for b0, b1, lossy in z.gaps:
        if b1 >= z.lo_ns and b0 <= z.hi_ns:
            ax.axvspan((b0 - t0) / ms, (b1 - t0) / ms, color="tab:red" if lossy else "0.8", alpha=0.25, lw=0)
    ax.set_xlim((z.lo_ns - t0) / ms, (z.hi_ns - t0) / ms)
    ax.set_ylim(bottom=0)
    for i, (label, t_ns) in enumerate(sorted(z.marks, key=lambda m: m[1])):
        x = (t_ns - t0) / ms
        ax.axvline(x, color="0.3", ls=":", lw=0.9)
        ax.annotate(label, (x, 0.98 - 0.09 * (i % 4)), xycoords=("data", "axes fraction"), va="top", ha="left",
                    fontsize="x-small", color="0.15")  # fmt: skip
    ax.set_ylabel("cross-traffic [Mbit/s]")
    ax.set_xlabel("outage up close: ms from migration start (bands: sink gaps; red = packets lost)")


def plot_run(path: Path, data: PlotData, formats: tuple[str, ...] | None = None) -> Path:
    """Draw the run plot to ``path`` (PNG, written atomically), and beside it, with the same name,
    in the other ``formats`` (default: ``VRMIG_PLOT_FORMATS``, else PNG, SVG and PDF); a format
    not asked for is removed (a re-analysis leaves no stale figure).  Returns the PNG's path.

    Top: cross-traffic rate received at B eth0 and offered at A eth0 (Mbit/s, frame incl. FCS)
    and the migration-link rate (R1 mig0 tx, Mbit/s, Ethernet header incl.), per sampling
    interval.  Bottom: RTT C -> D (ms) by send time, lost probes as red ticks along the top.
    Time axis: s relative to the migration start (``t0_ns``); vertical lines mark migrate/
    stop/completed/cont/announce-self.  With ``zoom`` (the outage anatomy), a third panel shows
    the outage up close with the anatomy's marks."""
    path = Path(path)
    t0 = _t0(data)
    if data.zoom is None:
        fig = Figure(figsize=(10, 6.5), layout="constrained")
        top, bottom = fig.subplots(2, 1, sharex=True)
    else:
        fig = Figure(figsize=(10, 9.5), layout="constrained")
        top, bottom, zoom = fig.subplots(3, 1, height_ratios=(3, 2, 3))
        bottom.sharex(top)
        _draw_zoom(zoom, data, data.zoom, t0)
    _draw_rates(top, data, t0)
    _draw_rtt(bottom, data.rtt, t0)
    _draw_marks(top, bottom, data.marks, t0)
    if data.title:
        top.set_title(data.title)
    save_figure(fig, path, formats, dpi=110)
    return path
