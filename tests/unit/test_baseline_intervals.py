"""``make baseline``'s summary.json intervals and plots on SYNTHETIC repetitions (nothing here was
measured): each aggregate carries the percentile-bootstrap interval of its mean beside the
Student-t half-width, and the plots draw the bootstrap interval (their Figures inspected, not
their pixels)."""

import math

import pytest

from analysis.baseline import plot as bp
from analysis.baseline.summary import stat_dict, summarise
from analysis.stats.inference import bootstrap_mean_interval

# SYNTHETIC forwarded rates [bit/s] of four repetitions, one of them far below the others: the
# t interval of the mean goes below 0 bit/s
SYNTHETIC_FWD = [90e6, 95e6, 92e6, 2e6]


def _rows():
    base = {"hv": "kvm", "nic": "virtio", "ip": 4, "frame_bytes": 1500, "routers": 1, "load": "none",
            "phase": "sweep", "status": "ok", "loss_ratio": 0.0}  # fmt: skip
    rows = [{**base, "rep": i, "rate_bps": 100_000_000, "offered_bps": 100e6, "forwarded_bps": f}
            for i, f in enumerate(SYNTHETIC_FWD, 1)]  # fmt: skip
    rows.append({**base, "rep": 1, "rate_bps": 50_000_000, "offered_bps": 50e6, "forwarded_bps": 49e6})
    return rows


def test_stat_dict_has_the_t_and_the_bootstrap_interval_of_the_same_values():
    d = stat_dict([*SYNTHETIC_FWD, None, math.nan])
    assert d["n"] == 4 and d["mean"] == pytest.approx(69.75e6)
    assert d["mean"] - d["ci95"] < 0  # the t interval goes below 0 bit/s
    assert (d["boot95_low"], d["boot95_high"]) == bootstrap_mean_interval(SYNTHETIC_FWD)
    assert min(SYNTHETIC_FWD) <= d["boot95_low"] < d["mean"] < d["boot95_high"] <= max(SYNTHETIC_FWD)
    one = stat_dict([7.0, None])
    assert (one["n"], one["ci95"], one["boot95_low"], one["boot95_high"]) == (1, None, None, None)
    assert stat_dict([None, math.nan]) is None


def test_summary_points_and_ndr_carry_the_bootstrap_interval():
    s = summarise(_rows(), {"spec": {"search": "ndr"}})
    (c,) = s["configs"]
    p100 = next(p for p in c["points"] if p["rate_bps"] == 100_000_000)
    assert (p100["forwarded_bps"]["boot95_low"], p100["forwarded_bps"]["boot95_high"]) == bootstrap_mean_interval(
        SYNTHETIC_FWD
    )
    assert c["max_forwarded"]["forwarded_bps"] is p100["forwarded_bps"]
    assert p100["rtt_median_ms"] is None  # absent, not 0
    assert set(c["ndr"]["ndr_bps"]) == {"n", "mean", "std", "ci95", "boot95_low", "boot95_high"}


def _bars(container):
    """(low, high) of each vertical error bar of an errorbar or bar container (None: no bar)."""
    segs = container.lines[2][-1].get_segments() if container.lines else []  # the y bars (after any x bars)
    return [(float(s[0][1]), float(s[1][1])) if len(s) else None for s in segs]


def test_offered_forwarded_draws_the_bootstrap_interval_never_below_zero(tmp_path, monkeypatch):
    figs = []
    monkeypatch.setattr(bp, "_save", lambda fig, path: figs.append(fig) or path)
    bp.plot_offered_forwarded(tmp_path / "x.png", summarise(_rows()), None)
    (ax,) = figs[0].axes
    (c,) = ax.containers
    lo, hi = bootstrap_mean_interval(SYNTHETIC_FWD)
    ys = c.lines[0].get_ydata()
    assert list(ys) == pytest.approx([49.0, 69.75])
    bars = [b for b in _bars(c) if b is not None]
    assert bars == [(pytest.approx(lo / 1e6), pytest.approx(hi / 1e6))]  # one repetition at 50M: no bar
    assert all(b[0] >= 0 for b in bars)


def test_max_forwarded_bars_draw_the_bootstrap_interval(tmp_path, monkeypatch):
    figs = []
    monkeypatch.setattr(bp, "_save", lambda fig, path: figs.append(fig) or path)
    bp.plot_max_forwarded(tmp_path / "x.png", summarise(_rows()), None)
    ax = figs[0].axes[0]
    lo, hi = bootstrap_mean_interval(SYNTHETIC_FWD)
    (c,) = [c for c in ax.containers if getattr(c, "errorbar", None) is not None]
    assert _bars(c.errorbar) == [(pytest.approx(lo / 1e6), pytest.approx(hi / 1e6))]


def test_routers_bars_draw_the_bootstrap_interval_of_each_router(tmp_path, monkeypatch):
    figs = []
    monkeypatch.setattr(bp, "_save", lambda fig, path: figs.append(fig) or path)
    routers = [{"phase": "sweep", "hv": "kvm", "nic": "virtio", "load": "none", "ip": 4, "frame_bytes": 1500,
                "routers": 2, "router": k, "rate_bps": 100_000_000, "rep": i, "forwarded_bps": f}
               for i, f in enumerate(SYNTHETIC_FWD, 1) for k in (0, 1)]  # fmt: skip
    bp.plot_routers(tmp_path / "x.png", routers, None)
    ax = figs[0].axes[0]
    (c,) = [c for c in ax.containers if getattr(c, "errorbar", None) is not None]
    lo, hi = bootstrap_mean_interval(SYNTHETIC_FWD)
    assert _bars(c.errorbar) == [(pytest.approx(lo / 1e6), pytest.approx(hi / 1e6))] * 2
