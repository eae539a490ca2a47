"""The run plot, after paper 004 Fig. 3: traffic rates (top) and RTT (bottom) around the migration;
with TRAFFIC=tcp / rr, the bulk flows' goodput and congestion windows and the request/response
latencies below them, on the same time axis."""

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
#: flows drawn one by one in the TCP panel: beyond this many thin lines the panel is a blur (the
#: all-flows line still sums every flow)
MAX_FLOWS_DRAWN = 16


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
class TcpPanel:
    """The bulk TCP flows (vrtcp), on the orchestrator's clock: goodput in bit/s per receiver
    sampling interval, placed at the interval's end (NaN: an interval too long for its goodput to
    be known at the grid's resolution), congestion windows in segments per TCP_INFO sample (NaN:
    not reported), the all-flows goodput outage when exact, and the [t_before, t_after] sample
    pair around each RTO expiry of any flow.  ``notes``: why a series is missing."""

    goodput: Series | None
    flows: tuple[Series, ...]
    cwnd: tuple[Series, ...]
    outage: tuple[int, int] | None
    rto: tuple[tuple[int, int], ...] = ()
    notes: tuple[str, ...] = ()
    direction: str = ""  # "B -> A" for TRAFFIC=tcp,dir=both's second panel; "" for A -> B alone


@dataclass(frozen=True, eq=False)
class RrPanel:
    """Request/response transactions (vrtcp rr-client) on the orchestrator's clock: answered ones
    by send time with their latency in ms; the send times of those never answered; the scheduled
    times of those not sent because every flow was busy.  ``notes``: why they are missing."""

    send_ns: np.ndarray
    latency_ms: np.ndarray
    unanswered_ns: np.ndarray
    not_sent_ns: np.ndarray
    notes: tuple[str, ...] = ()


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
    tcp: TcpPanel | None = None
    rr: RrPanel | None = None
    tcp_ba: TcpPanel | None = None  # TRAFFIC=tcp,dir=both: the B -> A flows, a panel of their own
    reverse: Series | None = None  # TRAFFIC=udp,dir=both: the B -> A CBR received at A (A eth0 rx)


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
        (data.reverse, "B -> A (A eth0 rx)", {"color": "tab:green", "lw": 0.8}),
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


def _draw_marks(top, below: list, marks: tuple[tuple[str, int], ...], t0: int) -> None:
    lo, hi = top.get_xlim()
    close = 0.015 * (hi - lo)  # marks closer than this share one label
    groups: list[list[tuple[str, float]]] = []
    for label, t_ns in sorted(marks, key=lambda m: m[1]):
        x = (t_ns - t0) / 1e9
        color, ls = MARK_STYLE.get(label, ("0.3", "-."))
        for ax in (top, *below):
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


def _note(ax, notes: tuple[str, ...]) -> None:
    """Why a series of the panel is missing, written in it (absent, not drawn as zero)."""
    if notes:
        ax.annotate("\n".join(notes), (0.99, 0.04), xycoords="axes fraction", ha="right", va="bottom",
                    fontsize="x-small", color="0.3")  # fmt: skip


def _draw_tcp(ax, p: TcpPanel, t0: int) -> None:
    """Goodput of all flows (thick) and of each flow (thin, light) on the left axis, each flow's
    cwnd as steps on its own right axis (segments and Mbit/s do not share a scale), the all-flows
    goodput outage shaded and the RTO expiries as ticks along the bottom."""
    handles = []
    if p.outage is not None:
        b0, b1 = p.outage
        handles.append(ax.axvspan((b0 - t0) / 1e9, (b1 - t0) / 1e9, color="tab:red", alpha=0.15, lw=0,
                                  label=f"goodput outage, all flows ({(b1 - b0) / 1e6:.1f} ms)"))  # fmt: skip
    n = len(p.flows)
    each = f"each flow ({n})" if n <= MAX_FLOWS_DRAWN else f"each flow ({n} flows, {MAX_FLOWS_DRAWN} drawn)"
    for i, f in enumerate(p.flows[:MAX_FLOWS_DRAWN]):
        line = ax.step((f.t_ns - t0) / 1e9, f.values / 1e6, where="pre", color="tab:blue", alpha=0.35, lw=0.6)
        if i == 0:
            line[0].set_label(each)
            handles += line
    if p.goodput is not None and p.goodput.t_ns.size:
        handles += ax.step((p.goodput.t_ns - t0) / 1e9, p.goodput.values / 1e6, where="pre", color="tab:blue",
                           lw=1.2, label="all flows")  # fmt: skip
    ax.set_ylabel(f"TCP goodput {p.direction} [Mbit/s]" if p.direction else "TCP goodput [Mbit/s]")
    ax.set_ylim(bottom=0)
    if any(c.t_ns.size for c in p.cwnd):
        cw = ax.twinx()
        for i, c in enumerate(p.cwnd[:MAX_FLOWS_DRAWN]):
            line = cw.step((c.t_ns - t0) / 1e9, c.values, where="post", color="tab:orange", alpha=0.7, lw=0.7)
            if i == 0:
                line[0].set_label("cwnd per flow (right axis)")
                handles += line
        cw.set_ylabel("cwnd [segments]", color="tab:orange")
        cw.set_ylim(bottom=0)
        ax.set_zorder(cw.get_zorder() + 1)  # goodput, RTO ticks and legend above the cwnd steps
        ax.patch.set_visible(False)
    if p.rto:
        x = np.array([(a + b) / 2 - t0 for a, b in p.rto], dtype=np.float64) / 1e9
        handles += ax.plot(x, np.full(x.size, 0.03), "|", ms=9, mew=1.5, color="tab:red",
                           transform=ax.get_xaxis_transform(), label=f"RTO expiry ({len(p.rto)})")  # fmt: skip
    if handles:
        ax.legend(handles=handles, loc="upper left", fontsize="small")
    _note(ax, p.notes)


def _draw_rr(ax, p: RrPanel, t0: int) -> None:
    """rr latency per answered transaction by send time (log scale: the spike is orders of
    magnitude above the usual latency); unanswered ones as red ticks along the top, those not
    sent (every flow busy) as grey ticks along the bottom."""
    if p.send_ns.size:
        ax.plot((p.send_ns - t0) / 1e9, p.latency_ms, ".", ms=2, color="tab:green", label="rr latency")
    for t, y, color, label in (
        (p.unanswered_ns, 1.0, "tab:red", "unanswered"),
        (p.not_sent_ns, 0.0, "0.6", "not sent, every flow busy"),
    ):
        if t.size:
            ax.plot((t - t0) / 1e9, np.full(t.size, y), "|", ms=8, color=color,
                    transform=ax.get_xaxis_transform(), label=f"{label} ({t.size})")  # fmt: skip
    ax.set_yscale("log")
    ax.set_ylabel("rr latency [ms]")
    if p.send_ns.size or p.unanswered_ns.size or p.not_sent_ns.size:
        ax.legend(loc="upper left", fontsize="small")
    _note(ax, p.notes)


def plot_run(path: Path, data: PlotData, formats: tuple[str, ...] | None = None) -> Path:
    """Draw the run plot to ``path`` (PNG, written atomically), and beside it, with the same name,
    in the other ``formats`` (default: ``VRMIG_PLOT_FORMATS``, else PNG, SVG and PDF); a format
    not asked for is removed (a re-analysis leaves no stale figure).  Returns the PNG's path.

    Top: cross-traffic rate received at B eth0 and offered at A eth0 (Mbit/s, frame incl. FCS)
    and the migration-link rate (R1 mig0 tx, Mbit/s, Ethernet header incl.), per sampling
    interval.  Below: RTT C -> D (ms) by send time, lost probes as red ticks along the top.
    With ``tcp``, a panel of the bulk flows' goodput and cwnd (:func:`_draw_tcp`), and with
    ``tcp_ba`` one more of the B -> A flows; with ``rr``, one
    of the request/response latencies (:func:`_draw_rr`).  These panels share one time axis:
    s relative to the migration start (``t0_ns``); vertical lines mark migrate/stop/completed/
    cont/announce-self.  With ``zoom`` (the outage anatomy), a last panel shows the outage up
    close with the anatomy's marks."""
    path = Path(path)
    t0 = _t0(data)
    extra = [kind for kind, panel in (("tcp", data.tcp), ("tcp_ba", data.tcp_ba), ("rr", data.rr)) if panel is not None]
    ratios = {"tcp": 3, "tcp_ba": 3, "rr": 2}
    n = 2 + len(extra)
    if data.zoom is None:
        fig = Figure(figsize=(10, 6.5 + 3.0 * len(extra)), layout="constrained")
        axes = list(fig.subplots(n, 1, sharex=True, height_ratios=[1] * n))
    else:
        fig = Figure(figsize=(10, 9.5 + 2.5 * len(extra)), layout="constrained")
        *axes, zoom = fig.subplots(n + 1, 1, height_ratios=(3, 2, *(ratios[k] for k in extra), 3))
        for ax in axes[1:]:
            ax.sharex(axes[0])
        _draw_zoom(zoom, data, data.zoom, t0)
    top, bottom, *rest = axes
    _draw_rates(top, data, t0)
    _draw_rtt(bottom, data.rtt, t0)
    for kind, ax in zip(extra, rest, strict=True):
        if kind == "tcp" and data.tcp is not None:
            _draw_tcp(ax, data.tcp, t0)
        elif kind == "tcp_ba" and data.tcp_ba is not None:
            _draw_tcp(ax, data.tcp_ba, t0)
        elif data.rr is not None:
            _draw_rr(ax, data.rr, t0)
    if rest:  # the time axis is labelled once, under the lowest panel that shares it
        bottom.set_xlabel("")
        rest[-1].set_xlabel("time relative to migration start [s]")
    _draw_marks(top, [bottom, *rest], data.marks, t0)
    if data.title:
        top.set_title(data.title)
    save_figure(fig, path, formats, dpi=110)
    return path
