"""analysis.present.paper_plot and the figures of migrate.campaigns.paper: paper 004's Figs. 2 and 3
re-drawn.  Inputs are SYNTHETIC (hand-made records and rows, named synthetic: never measurements)
or real fixtures (tests/fixtures/rundir: a real run's meta.json and summary.json;
tests/fixtures/baseline: real baseline points).  Figures are checked through their artists
(patches, lines, containers, texts), not pixels."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from matplotlib.lines import Line2D
from matplotlib.patches import Rectangle

from analysis import paper as ap
from analysis.baseline.points import analyse_point
from analysis.present import paper_plot as pp
from analysis.stats.aggregate import run_record
from migrate.campaigns import paper as mp

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
FACTS = {"qemu": "10.0.0", "accel": "tcg"}


def _synthetic_records(values_by_rate, hv="kvm", frame=1500, metric="downtime_packets_s"):
    return [{"hv": hv, "frame_bytes": frame, "rate_bps": rate, "status": "completed", metric: v}
            for rate, vs in values_by_rate.items() for v in vs]  # fmt: skip


def _synthetic_campaign():
    rng = np.random.default_rng(3)
    recs = []
    for hv, frame, rates in (("kvm", 1500, (0, 100_000_000, 200_000_000)), ("kvm", 64, (0, 5_000_000)),
                             ("xen", 1500, (1_000_000, 5_000_000))):  # fmt: skip
        for rate in rates:
            for _ in range(3):
                recs.append({"hv": hv, "frame_bytes": frame, "rate_bps": rate, "status": "completed",
                             "downtime_packets_s": abs(rng.normal(0.07, 0.02)), "duration_link_s": 1.0 + rng.random(),
                             "volume_link_bytes": 136e6 + 1e6 * rng.random(),
                             "rtt_increase_median_ms": rng.random()})  # fmt: skip
    return recs


def _synthetic_rows():
    rows = []
    for hv, nic in (("none", "veth"), ("kvm", "virtio"), ("xen", "vif"), ("criu", "veth")):
        for frame in (64, 1500):
            for rate in (10_000_000, 100_000_000):
                for rep in (1, 2, 3):
                    rows.append(
                        {
                            "hv": hv,
                            "nic": nic,
                            "ip": 4,
                            "frame_bytes": frame,
                            "routers": 1,
                            "load": "none",
                            "rate_bps": rate,
                            "phase": "sweep",
                            "rep": rep,
                            "status": "ok",
                            "offered_bps": rate * (1 - 0.001 * rep),
                            "forwarded_bps": rate * (0.9 - 0.01 * rep),
                        }
                    )
    return rows  # fmt: skip


def _axes_by_claim(fig):
    return {ax.get_title().split(":")[0]: ax for ax in fig.axes if ax.get_title()}


def _labelled(ax, prefix):
    artists = [*ax.patches, *ax.lines, *ax.collections, *ax.containers]
    return [a for a in artists if str(a.get_label()).startswith(prefix)]


def _all_panels():
    return {**pp.fig2_panels(_synthetic_rows()), **pp.fig3_panels(_synthetic_campaign())}


def test_synthetic_every_claim_with_a_shape_has_its_panel_in_its_figure():
    data = _all_panels()
    drawn = set()
    for spec in pp.FIGURES:
        axes = _axes_by_claim(pp.render(spec, data))
        assert set(axes) == set(spec.claims)
        drawn |= set(axes)
    assert drawn == {c.id for c in ap.FIG2_CLAIMS} | {lv.id for lv in ap.FIG3_LEVELS} | {"M8"}


def test_synthetic_stated_range_is_a_band_where_the_paper_states_it():
    data = pp.fig3_panels(_synthetic_campaign())
    axes = _axes_by_claim(pp.render(pp.FIGURES[1], data))
    (band,) = _labelled(axes["M2"], "paper 004 (stated): 3-7 s")
    assert isinstance(band, Rectangle) and (band.get_y(), band.get_y() + band.get_height()) == (3.0, 7.0)
    (line,) = _labelled(axes["M1"], "paper 004 (stated): ≈ 0.17 s")
    assert isinstance(line, Line2D) and list(line.get_ydata()) == [0.17, 0.17]
    (bound,) = _labelled(axes["M8"], "paper 004 (stated): ≥ 0.17 s")  # one-sided: a bound, dashed
    assert bound.get_linestyle() == "--"
    fig2 = _axes_by_claim(pp.render(pp.FIGURES[0], pp.fig2_panels(_synthetic_rows())))
    (rate,) = _labelled(fig2["F7"], "paper 004 (stated): at 500 Mbit/s")  # a rate: a vertical line
    assert list(rate.get_xdata()) == [500.0, 500.0]
    # a claim the paper gives no value for gets no band, and says so
    duration = _axes_by_claim(pp.render(pp.FIGURES[3], data))
    assert not _labelled(duration["M3"], "paper 004")
    assert any("the paper states no value" in t.get_text() for t in duration["M3"].texts)
    assert _labelled(duration["M4"], "paper 004 (stated): 2-12 s")


def test_every_stated_value_belongs_to_a_drawn_claim_and_cites_the_paper():
    claims = {c for spec in pp.FIGURES for c in spec.claims}
    for s in ap.STATED:
        assert s.claim in claims and s.citation.startswith("Sect. 5") and s.words
        assert s.axis in ("x", "y") and (s.low is not None or s.high is not None)
        assert s.low is None or s.high is None or s.low <= s.high


def test_synthetic_skewed_interval_stays_at_or_above_zero():
    """Three zeros and a 5 s outlier: Student's t interval of the mean reaches -2.7 s, the
    bootstrap interval drawn stays within [0, 5]."""
    recs = _synthetic_records({100_000_000: [0.0, 0.0, 0.0, 5.0]})
    p = pp.fig3_panels(recs)["M1"]
    (pt,) = p.points
    assert pt.n == 4 and pt.mean == 1.25 and pt.interval is not None and pt.interval[0] >= 0.0
    ax = _axes_by_claim(pp.render(pp.FIGURES[1], {"M1": p}))["M1"]
    (container,) = _labelled(ax, pp.MEASURED_LABEL)
    (bars,) = container[2]
    lows = [min(seg[:, 1]) for seg in bars.get_segments()]
    assert lows and min(lows) >= 0.0


def test_real_run_fixture_is_one_point_without_an_interval():
    d = FIXTURES / "rundir" / "kvm-precopy-100M-1500"
    rec = run_record(json.loads((d / "summary.json").read_text()), json.loads((d / "meta.json").read_text()))
    failed = FIXTURES / "rundir" / "kvm-precopy-100M-1500-dst-qemu-dies"
    rec_failed = run_record(json.loads((failed / "summary.json").read_text()),
                            json.loads((failed / "meta.json").read_text()))  # fmt: skip
    data = pp.fig3_panels([rec, rec_failed])
    (pt,) = data["M1"].points  # the failed run is not a point
    assert (pt.rate_bps, pt.n, pt.interval) == (100e6, 1, None) and pt.mean == rec["downtime_packets_s"]
    assert data["M5"].points[0].mean == rec["volume_link_bytes"]
    assert data["M2"].why_empty == "no completed HV=xen 1500 B migration"
    ax = _axes_by_claim(pp.render(pp.FIGURES[1], data))["M1"]
    assert not ax.containers  # no error bar for n=1
    (marker,) = _labelled(ax, pp.MEASURED_LABEL)
    assert list(marker.get_ydata()) == [rec["downtime_packets_s"]]


def test_real_baseline_fixture_points_are_fig2_points(tmp_path):
    rows = []
    for name in ("kvm_tcg_64B_50M", "criu_container_1500B_10M"):
        shutil.copytree(FIXTURES / "baseline" / name, tmp_path / name)
        rows.append(analyse_point(tmp_path / name)[0])
    data = pp.fig2_panels(rows)
    (kvm,) = data["F6"].points
    assert kvm.rate_bps == pytest.approx(rows[0]["offered_bps"]) and kvm.mean == rows[0]["forwarded_bps"]
    assert kvm.interval is None and data["F6"].why_empty is None
    assert data["F4"].points[0].mean == pytest.approx(10e6, rel=0.01)
    assert data["F1"].why_empty == "the baseline has no successful HV=none point at 1500 B (IPv4, 1 router, unloaded)"
    assert data["F2"].points == ()  # the kvm point is 64 B


def test_empty_panels_carry_their_reason_and_draw_no_measurement():
    data = {**pp.fig2_panels(None), **pp.fig3_panels(None)}
    assert data["F1"].why_empty == "no baseline ran (paper004-fig2)"
    assert data["M4"].why_empty == "no migration campaign ran (paper004-fig3)"
    for spec in pp.FIGURES:
        for cid, ax in _axes_by_claim(pp.render(spec, data)).items():
            assert any(t.get_text().startswith(f"not measured: {data[cid].why_empty}") for t in ax.texts)
            assert not _labelled(ax, "measured here") and not ax.containers
            if ap.stated_for(cid):
                assert _labelled(ax, "paper 004 (stated)")  # the band is drawn without measurements


def test_synthetic_bound_is_drawn_as_a_bound_never_in_the_mean():
    bound = {"hv": "kvm", "frame_bytes": 1500, "rate_bps": 0, "status": "completed", "downtime_packets_s": None,
             "downtime_packets_s_lower": 2.0}  # fmt: skip
    recs = [*_synthetic_records({0: [0.05, 0.07]}), bound]
    p = pp.fig3_panels(recs)["M1"]
    assert p.points[0].n == 2 and p.points[0].mean == pytest.approx(0.06) and p.bounds == ((0.0, 2.0),)
    ax = _axes_by_claim(pp.render(pp.FIGURES[1], {"M1": p}))["M1"]
    (tri,) = _labelled(ax, pp.BOUND_LABEL)
    assert list(tri.get_ydata()) == [2.0]


def test_caption_names_the_conditions_and_citations():
    data = pp.fig3_panels(_synthetic_campaign())
    claims = ap.fig3_claims(_synthetic_campaign(), FACTS)
    text = pp.caption(pp.FIGURES[1], data, {c.id: c.conditions for c in claims})
    assert "Sect. 5.2 (text on Fig. 3a)" in text and "3-7 s" in text
    assert "Conditions that differ: paper: KVM-84 with VT-x" in text and "Xen 4.17 nested" in text


def test_save_writes_the_asked_formats_and_removes_the_others(tmp_path):
    fig = pp.render(pp.FIGURES[2], pp.fig3_panels(_synthetic_campaign()))
    png = pp.save(fig, tmp_path / "f.png", ("png", "svg"))
    assert png.startswith(b"\x89PNG") and (tmp_path / "f.png").read_bytes() == png
    assert (tmp_path / "f.svg").is_file() and not (tmp_path / "f.pdf").exists()
    pp.save(fig, tmp_path / "f.png", ("png",))
    assert not (tmp_path / "f.svg").exists()


def test_synthetic_report_embeds_the_figures_beside_the_table(tmp_path, monkeypatch):
    monkeypatch.setenv("VRMIG_PLOT_FORMATS", "png")
    recs = _synthetic_campaign()
    claims = ap.fig2_claims(None, FACTS) + ap.fig3_claims(recs, FACTS)
    data = {**pp.fig2_panels(None), **pp.fig3_panels(recs)}
    mp.write(tmp_path, claims, {"fig2": None, "fig3": "synthetic", **FACTS}, "synthetic", data)
    html = (tmp_path / "report.html").read_text()
    for spec in pp.FIGURES:
        assert (tmp_path / f"{spec.name}.png").is_file() and not (tmp_path / f"{spec.name}.svg").exists()
        assert spec.title in html
    assert html.count("data:image/png;base64,") >= len(pp.FIGURES)
    assert "not measured: no baseline ran (paper004-fig2)" in html  # the captions say what is absent
    assert (tmp_path / "paper.md").is_file()


def test_baseline_csv_fields_are_typed_and_empty_is_absent(tmp_path):
    (tmp_path / "baseline.csv").write_text(
        "hv,nic,ip,frame_bytes,routers,load,rate_bps,phase,rep,offered_bps,forwarded_bps,gen_limited,status\n"
        "kvm,virtio,4,64,1,none,50000000,sweep,1,49920939.3,,True,ok\n"
    )  # synthetic: one hand-written row
    (row,) = mp.baseline_rows(tmp_path)
    assert (row["ip"], row["frame_bytes"], row["rate_bps"], row["gen_limited"]) == (4, 64, 50_000_000, True)
    assert row["offered_bps"] == 49920939.3 and row["forwarded_bps"] is None
    assert pp.fig2_panels([row])["F6"].points == ()  # no forwarded figure: no point, not a 0


def test_synthetic_kvm_panels_take_the_virtio_nic_only():
    rows = [r for r in _synthetic_rows() if r["hv"] == "kvm" and r["frame_bytes"] == 1500]
    e1000 = [{**r, "nic": "e1000", "forwarded_bps": 5e6} for r in rows]  # the paper's ~5 Mbps e1000e
    assert pp.fig2_panels(rows + e1000)["F2"].points == pp.fig2_panels(rows)["F2"].points
    assert pp.fig2_panels(e1000)["F2"].why_empty.endswith("(IPv4, 1 router, unloaded, virtio)")
