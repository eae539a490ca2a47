"""Paper 004 side by side: each result the paper states (Figs. 2 and 3, Sect. 5) beside what the
suite measured under the conditions of this testbed, with the conditions that differ.

Pure functions: a baseline's summary.json (Fig. 2) and a migration campaign's run records (Fig. 3,
as :func:`migrate.campaigns.reporting.collect` makes them) in, :class:`Claim` rows out.  Nothing
is judged by a threshold the paper does not give: a magnitude is shown beside the paper's, as a
ratio; a claimed (in)dependence on the cross-traffic rate is tested with Spearman's rank
correlation over the runs, its p from a permutation test that is exact for up to 8 runs
(:func:`spearman_p`), and a claim without measurements is absent with the reason, never a number."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from scipy import stats

from analysis.values import finite

#: level of the rank-correlation tests of the paper's dependence claims
ALPHA = 0.05
GBIT = 1e9
GUEST_MB = 256 * 1024 * 1024 / 1e6  # the paper's 256 MB guest in MB (10^6 bytes) as volumes are reported

#: what differs between the paper's testbed and this one, per topic (shown with every claim)
CONDITIONS = {
    "forwarding": "paper: Intel PRO/1000 Gigabit NICs, NetFPGA generators, XORP, Xen 3.2.1 / KVM-84 / OpenVZ on "
    "Core 2 Quad hosts; here: veth pairs and Linux bridges on one host, vrgen/vrsink, FRR, QEMU {qemu} "
    "(accel={accel}), Xen 4.17 nested in QEMU, CRIU in place of OpenVZ",
    "kvm": "paper: KVM-84 with VT-x, Gigabit NICs, XORP, 0-1000 Mbit/s; here: QEMU {qemu} accel={accel}, veth "
    "pairs, FRR, the rates the campaign swept ({rates})",
    "xen": "paper: Xen 3.2.1 on hardware, Gigabit NICs, 100-1000 Mbit/s; here: Xen 4.17 nested in QEMU "
    "(accel={accel}), PVH domU, the rates the nested router carries ({rates})",
}


@dataclass(frozen=True)
class Claim:
    """One stated result beside its measurement (``measured`` None: ``why_absent`` says why)."""

    id: str
    figure: str
    statement: str
    paper: str
    measured: str | None
    comparison: str | None
    conditions: str
    n: int = 0
    why_absent: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON/CSV-ready."""
        return asdict(self)


def _mean(d: Any) -> float | None:
    return finite(d.get("mean")) if isinstance(d, Mapping) else finite(d)


def _config(summary: Mapping[str, Any] | None, hv: str, frame: int) -> Mapping[str, Any] | None:
    """The single-router, unloaded IPv4 configuration of ``hv`` at ``frame`` bytes (virtio NIC for kvm)."""
    for c in (summary or {}).get("configs") or []:
        if (c.get("hv"), c.get("frame_bytes"), c.get("ip"), c.get("routers"), c.get("load")) != (
            hv,
            frame,
            4,
            1,
            "none",
        ):
            continue
        if hv == "kvm" and c.get("nic") != "virtio":
            continue
        return c
    return None


def _best_point(c: Mapping[str, Any]) -> Mapping[str, Any]:
    best = c.get("max_forwarded") or {}
    return next((p for p in c.get("points") or [] if p.get("rate_bps") == best.get("rate_bps")), {})


def generator_bound(c: Mapping[str, Any]) -> bool:
    """True when the best point's forwarding is only a lower bound of the router's: the generator
    fell short of the asked rate there and the router forwarded (within 1 %) all it was offered."""
    p = _best_point(c)
    fwd, offered = _mean(p.get("forwarded_bps")), _mean(p.get("offered_bps"))
    return bool(p.get("gen_limited")) and fwd is not None and offered is not None and fwd >= 0.99 * offered


def _forwarding(summary: Mapping[str, Any] | None, hv: str, frame: int) -> tuple[str | None, str | None, int]:
    """(measured text, why absent, repetitions) of a configuration's forwarding."""
    if summary is None:
        return None, "no baseline ran (paper004-fig2)", 0
    c = _config(summary, hv, frame)
    if c is None:
        return None, f"the baseline has no HV={hv} configuration at {frame} B", 0
    best = c.get("max_forwarded")
    fwd = _mean((best or {}).get("forwarded_bps"))
    if fwd is None:
        return None, f"HV={hv} at {frame} B forwarded nothing measurable (all points failed)", 0
    lossfree = finite(c.get("sweep_loss_free_bps"))
    n = int(((best or {}).get("forwarded_bps") or {}).get("n") or 0)
    lf = "none of the swept rates" if not lossfree else f"{lossfree / 1e6:.1f} Mbit/s"
    bound = generator_bound(c)
    head = (
        f"≥ {fwd / 1e6:.1f} Mbit/s (a lower bound: the generator" if bound else f"max forwarded {fwd / 1e6:.1f} Mbit/s"
    )
    if bound:
        head += f" offered only that of {_offered(best)} asked, and all of it was forwarded)"
    text = f"{head} ({fwd / GBIT:.1%} of 1 Gbit/s)" + ("" if bound else f" at offered {_offered(best)}")
    text += f"; loss-free up to {lf}"
    return text, None, n


def _offered(best: Mapping[str, Any] | None) -> str:
    r = (best or {}).get("rate_bps")
    return "max (unpaced)" if r == 0 else f"{r / 1e6:g} Mbit/s" if isinstance(r, int | float) else "?"


def _runs(records: Sequence[Mapping[str, Any]], hv: str, frame: int) -> list[Mapping[str, Any]]:
    return [
        r for r in records if r.get("hv") == hv and r.get("frame_bytes") == frame and r.get("status") == "completed"
    ]


def _values(runs: Sequence[Mapping[str, Any]], metric: str) -> tuple[np.ndarray, np.ndarray]:
    """(rates, values) of the runs whose metric is a point value (bounds and absences left out)."""
    pairs = [(r.get("rate_bps"), finite(r.get(metric))) for r in runs]
    pairs = [(float(rate), v) for rate, v in pairs if isinstance(rate, int | float) and v is not None]
    return np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs])


def _spread(v: np.ndarray, scale: float, unit: str, digits: int) -> str:
    return (f"median {np.median(v) * scale:.{digits}f} {unit} [{v.min() * scale:.{digits}f}-"
            f"{v.max() * scale:.{digits}f}], n={v.size}")  # fmt: skip


#: up to this many runs the permutation p of Spearman's rho is exact (every ordering: 8! = 40320)
EXACT_MAX_RUNS = 8
PERMUTATIONS = 9999  # beyond: random orderings, with a fixed seed (the report is reproducible)


def spearman_p(rates: np.ndarray, v: np.ndarray) -> tuple[float, float, str]:
    """(rho, two-sided p, how p was found) of Spearman's rank correlation of ``v`` with ``rates``.

    ``scipy.stats.spearmanr``'s p comes from a t approximation that is far off for the handful of
    runs a campaign point has: at rho = 1 with 5 runs it gives 1e-24, while no ordering of 5
    values can be rarer than 1 in 120.  So p is a permutation test of the pairing
    (``scipy.stats.permutation_test``), exact up to EXACT_MAX_RUNS runs."""
    x = stats.rankdata(rates)

    def rho(y: np.ndarray, axis: int = -1) -> np.ndarray:
        ry = stats.rankdata(y, axis=axis)
        xc, yc = x - x.mean(), ry - ry.mean(axis=axis, keepdims=True)
        return (yc * xc).sum(axis=axis) / np.sqrt((xc**2).sum() * (yc**2).sum(axis=axis))

    exact = v.size <= EXACT_MAX_RUNS
    res = stats.permutation_test(
        (v,), rho, permutation_type="pairings", vectorized=True, alternative="two-sided",
        n_resamples=np.inf if exact else PERMUTATIONS, rng=np.random.default_rng(0),
    )  # fmt: skip
    return float(res.statistic), float(res.pvalue), "exact" if exact else f"{PERMUTATIONS} permutations"


def _dependence(rates: np.ndarray, v: np.ndarray) -> tuple[str, bool | None]:
    """Spearman's rho of a metric against the rate: (text, dependent?); None when untestable."""
    if v.size < 3 or np.unique(rates).size < 2 or np.unique(v).size < 2:
        return "dependence on the rate not testable (fewer than 3 runs, one rate or one value)", None
    rho, p, how = spearman_p(rates, v)
    dep = p <= ALPHA
    verdict = "depends on the rate" if dep else "no dependence on the rate detected"
    return f"{verdict} (Spearman rho={rho:+.2f}, {how} p={p:.2g}, {np.unique(rates).size} rates)", dep


def _rates_text(runs: Sequence[Mapping[str, Any]]) -> str:
    rates = sorted({r.get("rate_bps") for r in runs if isinstance(r.get("rate_bps"), int)})
    return ", ".join("0" if r == 0 else f"{r / 1e6:g}M" for r in rates) + " bit/s" if rates else "none"


def _magnitude(measured: float, paper: float | tuple[float, float], unit: str, digits: int) -> str:
    """The median beside the paper's value (a ratio) or range (inside, or the ratio to the nearer end)."""
    if isinstance(paper, tuple):
        lo, hi = paper
        if lo <= measured <= hi:
            return f"median {measured:.{digits}f} {unit}: inside the paper's {lo:g}-{hi:g} {unit}"
        end = lo if measured < lo else hi
        side = "below" if measured < lo else "above"
        ratio = f"{measured / end:.2f}x {end:g}"
        return f"median {measured:.{digits}f} {unit}: {side} the paper's {lo:g}-{hi:g} {unit} ({ratio})"
    return f"measured/paper = {measured / paper:.2f} ({measured:.{digits}f} vs {paper:.{digits}f} {unit})"


def _claim_absent(cid: str, fig: str, statement: str, paper: str, cond: str, why: str) -> Claim:
    return Claim(cid, fig, statement, paper, None, None, cond, 0, why)


@dataclass(frozen=True)
class Forwarding:
    """A Fig. 2 claim about one configuration's forwarding: hypervisor, frame size and the paper's
    figure in Mbit/s (the maximum forwarded, or for F7/F8 the offered rate above which it
    deteriorates)."""

    id: str
    hv: str
    frame: int
    statement: str
    paper: str
    paper_mbit: float


FIG2_CLAIMS = (
    Forwarding("F1", "none", 1500, "Linux forwards 1500 B frames at the full Gigabit link", "≈ 1000 Mbit/s", 1000.0),
    Forwarding("F2", "kvm", 1500, "KVM with virtio fills almost 80 % of the link with 1500 B frames", "≈ 800 Mbit/s",
               800.0),
    Forwarding("F3", "xen", 1500, "Xen forwards 1500 B frames like Linux (link saturated)", "≈ 1000 Mbit/s", 1000.0),
    Forwarding("F4", "criu", 1500, "OpenVZ (here: CRIU's container) forwards 1500 B frames like Linux",
               "≈ 1000 Mbit/s", 1000.0),
    Forwarding("F5", "none", 64, "Linux forwards slightly over 300 Mbit/s of 64 B frames", "≈ 300 Mbit/s", 300.0),
    Forwarding("F6", "kvm", 64, "KVM forwards only ≈ 5 % of the link with 64 B frames", "≈ 50 Mbit/s", 50.0),
    Forwarding("F7", "xen", 64, "Xen's 64 B forwarding deteriorates above 500 Mbit/s offered", "≈ 500 Mbit/s",
               500.0),
    Forwarding("F8", "criu", 64, "OpenVZ's 64 B forwarding deteriorates above 100 Mbit/s offered", "≈ 100 Mbit/s",
               100.0),
)  # fmt: skip


def fig2_claims(summary: Mapping[str, Any] | None, facts: Mapping[str, str]) -> list[Claim]:
    """Sect. 5.1 / Fig. 2: forwarding of 1500 B and 64 B frames."""
    cond = CONDITIONS["forwarding"].format(**facts)
    out = []
    for spec in FIG2_CLAIMS:
        cid, hv, frame, statement, paper = spec.id, spec.hv, spec.frame, spec.statement, spec.paper
        text, why, n = _forwarding(summary, hv, frame)
        if text is None:
            out.append(_claim_absent(cid, "Fig. 2", statement, paper, cond, why or "not measured"))
            continue
        c = _config(summary, hv, frame) or {}
        fwd = _mean((c.get("max_forwarded") or {}).get("forwarded_bps")) or 0.0
        comp = _magnitude(fwd / 1e6, spec.paper_mbit, "Mbit/s", 1)
        if generator_bound(c):
            comp = f"a bound, not a point: measured/paper ≥ {fwd / 1e6 / spec.paper_mbit:.2f}"
        out.append(Claim(cid, "Fig. 2", statement, paper, text, comp, cond, n))
    return out


@dataclass(frozen=True)
class _Level:
    """A Fig. 3 claim about one metric of one series: its paper value (a point or a range), unit
    and scale, and whether the claim is about the metric's dependence on the rate."""

    id: str
    series: str
    metric: str
    statement: str
    paper: str
    paper_value: float | tuple[float, float] | None
    unit: str
    scale: float
    digits: int
    test: bool


FIG3_LEVELS = (
    _Level("M1", "kvm", "downtime_packets_s", "KVM's downtime is independent of the cross-traffic rate, ≈ 0.17 s",
           "≈ 0.17 s, flat over 0-1000 Mbit/s", 0.17, "s", 1.0, 3, True),
    _Level("M2", "xen", "downtime_packets_s", "Xen's downtime is highly variable, 3-7 s", "3-7 s", (3.0, 7.0), "s",
           1.0, 2, True),
    _Level("M3", "kvm", "duration_link_s", "KVM's migration duration shows no significant dependence on the rate",
           "flat (Fig. 3b)", None, "s", 1.0, 2, True),
    _Level("M4", "xen", "duration_link_s", "Xen's duration depends on the cross-traffic rate, 2-12 s", "2-12 s",
           (2.0, 12.0), "s", 1.0, 1, True),
    _Level("M5", "kvm", "volume_link_bytes", "KVM moves a constant ≈ 140 MB for a 256 MB guest", "≈ 140 MB, flat",
           140.0, "MB", 1e-6, 1, True),
    _Level("M6", "xen", "volume_link_bytes", "Xen moves slightly more than the guest's memory",
           f"slightly above 256 MB ({GUEST_MB:.0f} MB)", GUEST_MB, "MB", 1e-6, 1, False),
    _Level("M7", "kvm", "rtt_increase_median_ms", "The RTT increase during migration grows with the cross-traffic",
           "rises with the rate (Fig. 3a)", None, "ms", 1.0, 2, True),
)  # fmt: skip


def _level_claim(spec: _Level, runs: Sequence[Mapping[str, Any]], cond: str) -> Claim:
    rates, v = _values(runs, spec.metric)
    if v.size == 0:
        why = f"no completed HV={spec.series} migration with a point value of {spec.metric}"
        return _claim_absent(spec.id, "Fig. 3", spec.statement, spec.paper, cond, why)
    parts = []
    if spec.paper_value is not None:
        parts.append(_magnitude(float(np.median(v)) * spec.scale, spec.paper_value, spec.unit, spec.digits))
    if spec.test:
        parts.append(_dependence(rates, v)[0])
    measured = _spread(v, spec.scale, spec.unit, spec.digits)
    return Claim(spec.id, "Fig. 3", spec.statement, spec.paper, measured, "; ".join(parts) or None, cond, int(v.size))


def fig3_claims(records: Sequence[Mapping[str, Any]], facts: Mapping[str, str]) -> list[Claim]:
    """Sect. 5.2 / Fig. 3: downtime, duration, volume and RTT over the cross-traffic rate."""
    series = {"kvm": _runs(records, "kvm", 1500), "xen": _runs(records, "xen", 1500)}
    cond = {hv: CONDITIONS[hv].format(rates=_rates_text(runs), **facts) for hv, runs in series.items()}
    out = [_level_claim(spec, series[spec.series], cond[spec.series]) for spec in FIG3_LEVELS]
    statement, paper = "KVM's downtime with 64 B frames is slightly higher than with 1500 B frames", "64 B above 1500 B"
    _, v64 = _values(_runs(records, "kvm", 64), "downtime_packets_s")
    _, v1500 = _values(series["kvm"], "downtime_packets_s")
    if v64.size == 0 or v1500.size == 0:
        why = "no completed HV=kvm 64 B migration" if v64.size == 0 else "no completed HV=kvm 1500 B migration"
        out.append(_claim_absent("M8", "Fig. 3", statement, paper, cond["kvm"], why))
        return out
    p = float(stats.mannwhitneyu(v64, v1500, alternative="greater").pvalue)
    comp = (f"64 B median {np.median(v64):.3f} s vs 1500 B {np.median(v1500):.3f} s; one-sided Mann-Whitney "
            f"p={p:.2g}: {'higher' if p <= ALPHA else 'no increase detected'}")  # fmt: skip
    out.append(Claim("M8", "Fig. 3", statement, paper, _spread(v64, 1.0, "s", 3), comp, cond["kvm"], int(v64.size)))
    return out


def facts_of(metas: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """QEMU version and accelerator(s) of the runs (for the conditions column)."""
    qemu = set()
    for m in metas:
        text = str((m.get("hypervisor") or {}).get("qemu") or "")
        found = re.search(r"version (\S+)", text)
        if found:
            qemu.add(found[1])
    qemu = sorted(qemu)
    accel = sorted({str(m.get("accel")) for m in metas if m.get("accel")})
    return {"qemu": ", ".join(qemu) or "?", "accel": ", ".join(accel) or "?"}


#: the size of the paper's guest (Sect. 4: "256 MB RAM") in bytes, read as 2^20-byte MB
GUEST_BYTES = 256 * 1024 * 1024


@dataclass(frozen=True)
class Stated:
    """A value the paper states for the panel of claim ``claim``, in the metric's SI unit (bit/s,
    s, bytes), for the plots that re-draw Figs. 2 and 3 (:mod:`analysis.present.paper_plot`).

    ``axis`` "y": a value of the plotted metric; "x": a rate on the panel's rate axis (where the
    paper says something changes).  ``low == high``: a stated point ("≈ 0.17 s"); both set and
    different: a stated range ("3s to 7s"); one of them None: a one-sided statement ("slightly
    over 300 Mbps" is ``low`` 300e6, ``high`` None), a bound, not a point.  ``x_range`` (bit/s):
    the rates the statement covers, None where the paper does not state them (the text names no
    sweep range for Figs. 2 and 3, and their plots are lost): drawn across the panel then.
    ``words`` quotes the paper; ``citation`` says where."""

    claim: str
    axis: str
    low: float | None
    high: float | None
    x_range: tuple[float, float] | None
    words: str
    citation: str

    @property
    def kind(self) -> str:
        """'point', 'range', 'at least' or 'at most'."""
        if self.low is not None and self.high is not None:
            return "point" if self.low == self.high else "range"
        return "at least" if self.low is not None else "at most"


_S51, _S52 = "Sect. 5.1 (text on Fig. 2)", "Sect. 5.2 (text on Fig. 3a)"
_S52B = "Sect. 5.2 (text on Fig. 3b)"

#: every value the paper states for a panel, from its text (its figures are lost from the
#: reference copy, so nothing is read off a figure); claims without a stated value (M3: "no
#: significant cross-traffic dependency", M7: "the RTTs increase as the cross-traffic intensity
#: rises") have none
STATED: tuple[Stated, ...] = (
    Stated("F1", "y", 1e9, 1e9, None, "Linux: 'sufficient to fully saturate the Gigabit link'", _S51),
    Stated("F2", "y", None, 0.8e9, None, "KVM, virtio: 'able to fill almost 80% of the link'", _S51),
    Stated("F3", "y", 1e9, 1e9, None, "Xen: identical to Linux, 'fully saturate the Gigabit link'", _S51),
    Stated("F4", "y", 1e9, 1e9, None, "OpenVZ: identical to Linux, 'fully saturate the Gigabit link'", _S51),
    Stated("F5", "y", 300e6, None, None, "Linux: 'slightly over 300 Mbps' of 64 B frames", _S51),
    Stated("F6", "y", 50e6, 50e6, None, "KVM: 'constant at only ∼ 5% of the link capacity'", _S51),
    Stated("F7", "x", 500e6, 500e6, None, "Xen: forwarding 'deteriorates after 500Mbps'", _S51),
    Stated("F8", "x", 100e6, 100e6, None, "OpenVZ: forwarding 'deteriorates after […] 100Mbps'", _S51),
    Stated("M1", "y", 0.17, 0.17, None, "KVM: downtime 'independent of the cross-traffic at ≈ 0.17s'", _S52),
    Stated("M2", "y", 3.0, 7.0, None, "Xen: downtime 'highly variable […] ranging from 3s to 7s'", _S52),
    Stated("M4", "y", 2.0, 12.0, None, "Xen: duration 'ranging from 2s up to 12s'", _S52B),
    Stated("M4", "x", 300e6, 300e6, None, "Xen: 'an unexpected increase in the migration time […] at 300Mbps'",
           _S52B),
    Stated("M5", "y", 140e6, 140e6, None, "KVM: 'constant data volume of ≈ 140MB'", _S52B),
    Stated("M6", "y", float(GUEST_BYTES), None, None, "Xen: 'slightly higher than the allocated memory' (256 MB)",
           _S52B),
    Stated("M6", "x", 900e6, 900e6, None, "Xen: 'At 900Mbps cross-traffic, the amount of data increases "
           "significantly'", _S52B),
    Stated("M8", "y", 0.17, None, None, "KVM, 64 B: downtime 'slightly higher than for large packets' (≈ 0.17s)",
           _S52),
)  # fmt: skip


def stated_for(claim: str) -> tuple[Stated, ...]:
    """The paper's stated values of one claim's panel (empty: the paper states none)."""
    return tuple(s for s in STATED if s.claim == claim)
