"""Sweep plots (analysis.present.sweep_plot) on SYNTHETIC run records (nothing here was measured):
the mean plots' bootstrap error bars, and the per-run CDF and box plots with censored runs drawn
as bounds, never as values.  The Figures' artists are inspected, not their pixels."""

import math

import numpy as np
import pytest
from matplotlib.collections import PathCollection

from analysis.present import sweep_plot as sp
from analysis.stats.aggregate import aggregate
from analysis.stats.inference import bootstrap_mean_interval

# a skewed SYNTHETIC sample of downtimes [s]: the t interval of its mean goes below 0
SYNTHETIC_SKEWED = [0.01, 0.012, 0.015, 0.02, 0.6]
# SYNTHETIC: quartiles 60 and 80 ms: 115 ms lies beyond 1.5 IQR (110 ms), within 3 IQR (140 ms)
SYNTHETIC_TAIL = [0.05, 0.06, 0.07, 0.08, 0.115]
DOWNTIME = sp.FIGURES[0]  # fig3a_downtime.png: counters, packets, QEMU


def _rec(value, rate=1e8, censored=None, series="synthetic kvm precopy", **kw):
    """A SYNTHETIC completed run record; ``censored``: the run's downtime is only a lower bound."""
    rec = {"status": "completed", "series": series, "hv": "kvm", "accel": "tcg", "mode": "precopy",
           "rate_bps": rate, "frame_bytes": 1500, "downtime_counters_s": value, "quals": {}}  # fmt: skip
    if censored is not None:
        rec["downtime_counters_s"] = None
        rec["quals"] = {"downtime_counters_s": {"state": "censored", "lower": censored}}
    rec.update(kw)
    return rec


def _records():
    """SYNTHETIC: the skewed sample at 100 Mbit/s plus one censored run (bound 9 s) and one run
    without the figure; five runs at 200 Mbit/s; one run at 500 Mbit/s; a failed run."""
    recs = [_rec(v) for v in SYNTHETIC_SKEWED]
    recs += [_rec(None, censored=9.0), _rec(None)]
    recs += [_rec(v, rate=2e8) for v in SYNTHETIC_TAIL]
    recs += [_rec(0.07, rate=5e8), _rec(0.3, rate=5e8, status="failed")]
    return recs


def _errorbars(ax):
    """(x, y, low, high) of every errorbar point drawn in ``ax`` (low/high None: no bar)."""
    out = []
    for c in ax.containers:
        line, _, (bars,) = c.lines
        segs = {float(s[0][0]): (float(s[0][1]), float(s[1][1])) for s in bars.get_segments() if len(s)}
        for x, y in line.get_xydata():
            lo, hi = segs.get(float(x), (None, None))
            out.append((float(x), float(y), lo, hi))
    return out


def test_mean_bars_are_the_bootstrap_interval_and_never_below_zero():
    points = aggregate(_records())
    st = points[0].stats["downtime_counters_s"]
    assert st.ci_low < 0  # the t interval of the skewed sample goes below 0 ms
    fig = sp.mean_figure(DOWNTIME, points)
    bars = _errorbars(fig.axes[0])
    assert [x for x, *_ in bars] == [100.0, 200.0, 500.0]
    _, y, lo, hi = bars[0]
    assert y == pytest.approx(np.mean(SYNTHETIC_SKEWED) * 1e3)
    boot = bootstrap_mean_interval(SYNTHETIC_SKEWED)
    assert (lo, hi) == (pytest.approx(boot[0] * 1e3), pytest.approx(boot[1] * 1e3))
    assert lo >= 0 and lo < y < hi  # asymmetric: the bar is longer above the mean
    assert hi - y > y - lo
    assert all(lo is None or lo >= 0 for _, _, lo, _ in bars)
    assert bars[2][2:] == (None, None)  # 500 Mbit/s: one run, no bar
    assert "95 % percentile-bootstrap interval" in fig._suptitle.get_text()


def test_the_plotted_values_carry_nan_not_zero_for_a_point_of_one_run():
    points = aggregate(_records())
    v = sp._values(points, "downtime_counters_s", 1e3)
    assert v.ns == [5, 5, 1]
    assert all(e >= 0 for e in v.err[0][:2]) and all(math.isnan(e) for e in (v.err[0][2], v.err[1][2]))
    assert (v.bound_xs, v.bound_ys) == ([100.0], [9000.0])  # the bound, drawn apart


def test_run_values_split_values_bounds_and_absent_per_point():
    rv = sp.run_values(_records(), "downtime_counters_s")
    key = ("synthetic kvm precopy", "tcg", 1500, 1e8)
    assert sorted(rv) == [key, (*key[:3], 2e8), (*key[:3], 5e8)]
    assert rv[key] == sp.RunValues(sorted(SYNTHETIC_SKEWED), [9.0], 1, 1)
    assert rv[(*key[:3], 5e8)].values == [0.07]  # the failed run is not a value


def test_cdf_draws_the_measured_runs_and_censored_runs_only_as_bounds():
    fig = sp.cdf_figure(_records(), "downtime_counters_s", "downtime [ms]", 1e3)
    (ax,) = fig.axes
    assert len(ax.lines) == 3  # one ECDF per grid point
    xs = np.asarray(ax.lines[0].get_xdata(), dtype=float)
    ys = np.asarray(ax.lines[0].get_ydata(), dtype=float)
    # steps-post from 0 at the smallest run to 1 at the largest, a step of 1/5 at each measured run
    assert xs[1:].tolist() == pytest.approx([v * 1e3 for v in sorted(SYNTHETIC_SKEWED)])
    assert ys.tolist() == pytest.approx([0.0, 0.2, 0.4, 0.6, 0.8, 1.0])  # over the 5 measured runs, not 7
    for line in ax.lines:
        assert 9000.0 not in np.asarray(line.get_xdata(), dtype=float)  # the bound is not a value
    bounds = [c for c in ax.collections if isinstance(c, PathCollection) and c.get_gid() == sp.BOUND_GID]
    assert len(bounds) == 1 and bounds[0].get_offsets()[:, 0].tolist() == [9000.0]
    assert bounds[0].get_offsets()[0, 1] > 1.0  # above the CDF, not on it
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert any("100 Mbit/s (n=5; 1 censored (>); 1 absent)" in t for t in legend), legend


def test_box_plot_per_rate_with_whiskers_at_1_5_iqr_every_run_and_bounds_apart():
    fig = sp.box_figure(_records(), "downtime_counters_s", "downtime [ms]", 1e3)
    (ax,) = fig.axes
    # boxes at the two points with at least two runs: box, median, 2 whiskers, 2 caps each
    assert len(ax.lines) == 2 * 6
    for sample, lines, top, beyond in ((SYNTHETIC_SKEWED, ax.lines[:6], 20.0, 600.0),
                                       (SYNTHETIC_TAIL, ax.lines[6:], 80.0, 115.0)):  # fmt: skip
        ys = [np.asarray(line.get_ydata(), dtype=float) for line in lines]
        q1, q3 = np.percentile([v * 1e3 for v in sample], [25, 75])
        assert top == pytest.approx(max(v * 1e3 for v in sample if v * 1e3 <= q3 + 1.5 * (q3 - q1)))
        assert any(np.allclose(y, top) for y in ys)  # the upper cap: the largest run within 1.5 IQR
        assert not any(np.any(np.isclose(y, beyond)) for y in ys)  # the run beyond it ends no whisker
    dots = [c for c in ax.collections if c.get_gid() == sp.RUNS_GID]
    values = sorted(float(v) for c in dots for v in c.get_offsets()[:, 1])
    assert values == pytest.approx(sorted(v * 1e3 for v in [*SYNTHETIC_SKEWED, *SYNTHETIC_TAIL, 0.07]))
    bounds = [c for c in ax.collections if c.get_gid() == sp.BOUND_GID]
    assert [float(v) for c in bounds for v in c.get_offsets()[:, 1]] == [9000.0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["100", "200", "500"]


def test_no_data_is_said_not_drawn():
    for make in (sp.cdf_figure, sp.box_figure):
        fig = make([_rec(None)], "downtime_counters_s", "downtime [ms]", 1e3)
        (ax,) = fig.axes
        assert not ax.lines and not ax.collections
        assert [t.get_text() for t in ax.texts] == ["no data"]


def test_render_distributions_names_each_metric_kind_and_format():
    out = sp.render_distributions(_records(), ("png", "svg"))
    assert set(out) == {
        f"sweep-{m}-{k}.{f}" for m, _, _ in sp.DISTRIBUTION_METRICS for k in ("cdf", "box") for f in ("png", "svg")
    }
    assert out["sweep-downtime_counters_s-cdf.png"][:8] == b"\x89PNG\r\n\x1a\n"
    assert b'id="censored-bound"' in out["sweep-downtime_counters_s-cdf.svg"]
