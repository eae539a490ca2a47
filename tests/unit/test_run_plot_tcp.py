"""The run plot's TCP and rr panels, on SYNTHETIC run directories: the stop-and-copy run of
tests/fixtures/analysis/synthetic.py with SYNTHETIC vrtcp traces added (two bulk flows silent
across the stall, one RTO expiry pair, request/response transactions).  Nothing here was measured."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

import analysis.present.run_plot as run_plot
from analysis.present.run_plot import MAX_FLOWS_DRAWN, PlotData, Series, TcpPanel, plot_run
from analysis.run import _analyse, _goodput_line, _rr_panel, _tcp_panel
from tests.fixtures.analysis.synthetic import MS, T_BASE_NS, write_run

T0 = T_BASE_NS
READ_B = 1_000  # bytes per 1 ms read: 8 Mbit/s per flow
# each flow's receive silence: reads stop after +3000.5 ms and resume at these instants
SILENT_FROM = T0 + 3_000 * MS + MS // 2
RESUME = {0: T0 + 5_070 * MS + MS // 2, 1: T0 + 5_080 * MS + MS // 2}
RTO_SAMPLES_MS = (3_203, 3_603)  # flow 0's TCP_INFO samples where retransmits and backoff grow


def _reads(flow: int) -> np.ndarray:
    """SYNTHETIC read times of one flow: every 1 ms at +0.5 ms, none strictly inside its silence."""
    t = np.arange(T0 + 500 * MS + MS // 2, T0 + 10_000 * MS, MS, dtype=np.int64)
    return t[(t <= SILENT_FROM) | (t >= RESUME[flow])]


def _tsv(path: Path, header: tuple[str, ...], rows: list[tuple[int, ...]]) -> None:
    path.write_text("\t".join(header) + "\n" + "".join("\t".join(map(str, r)) + "\n" for r in rows))


def _add_tcp(run_dir: Path) -> None:
    """SYNTHETIC tcp-recv.tsv (+ .gaps) and tcp-send.tsv of two flows, and meta.json's tcp_port."""
    samples = np.arange(T0 + 500 * MS, T0 + 10_000 * MS + 1, 10 * MS, dtype=np.int64)
    recv, gaps = [], []
    for fl in (0, 1):
        reads = _reads(fl)
        cum = np.searchsorted(reads, samples, side="right") * READ_B
        recv += [(int(t), fl, int(b)) for t, b in zip(samples, cum, strict=True)]
        k = int(np.flatnonzero(np.diff(reads) > 20 * MS)[0])
        gaps.append((fl, int(reads[k]), int(reads[k + 1]), (k + 1) * READ_B))
    recv.sort()
    _tsv(run_dir / "tcp-recv.tsv", ("t_ns", "flow", "bytes"), recv)
    _tsv(run_dir / "tcp-recv.tsv.gaps", ("flow", "t_before_ns", "t_after_ns", "bytes_before"), gaps)
    from crosstraffic.tcp import TCPINFO_COLUMNS

    info = []
    for ms in range(503, 10_000, 10):
        for fl in (0, 1):
            n = sum(ms >= r for r in RTO_SAMPLES_MS) if fl == 0 and ms < 5_083 else 0
            row = dict.fromkeys(TCPINFO_COLUMNS, 0)
            row.update(t_ns=T0 + ms * MS, flow=fl, cwnd=1 if 3_000 < ms < 5_083 else 10, retransmits=n, backoff=n,
                       rto_us=204_000, snd_mss=1448)  # fmt: skip
            info.append(tuple(row[c] for c in TCPINFO_COLUMNS))
    _tsv(run_dir / "tcp-send.tsv", TCPINFO_COLUMNS, info)
    _instruments(run_dir, tcp_port=9100, tcp_gap_ms=20)


def _add_rr(run_dir: Path) -> None:
    """SYNTHETIC rr.tsv: a transaction every 20 ms answered in 1 ms; the one sent at +3000 ms is
    answered at +5080 ms, those scheduled while it waits are not sent, the last is never answered."""
    rows = []
    for i, ms in enumerate(range(600, 9_000, 20)):
        t = T0 + ms * MS
        if 3_000 < ms < 5_080:
            rows.append((i, -1, t, -1, -1))
        elif ms == 3_000:
            rows.append((i, 0, t, t, T0 + 5_080 * MS))
        elif ms == 8_980:
            rows.append((i, 0, t, t, -1))
        else:
            rows.append((i, 0, t, t, t + MS))
    _tsv(run_dir / "rr.tsv", ("id", "flow", "t_sched_ns", "t_send_ns", "t_done_ns"), rows)
    _instruments(run_dir, rr_port=9200)


def _instruments(run_dir: Path, **kw: int) -> None:
    meta = json.loads((run_dir / "meta.json").read_text())
    meta.setdefault("instruments", {}).update(kw)
    (run_dir / "meta.json").write_text(json.dumps(meta))


def _run(tmp_path: Path, tcp: bool, rr: bool) -> Path:
    run_dir = write_run(tmp_path, "stopcopy").run_dir
    if tcp:
        _add_tcp(run_dir)
    if rr:
        _add_rr(run_dir)
    return run_dir


@pytest.fixture
def figures(monkeypatch):
    """The matplotlib Figures plot_run saves, in order (saved as it would be, then kept)."""
    seen = []
    save = run_plot.save_figure

    def keep(fig, path, formats=None, dpi=110):
        seen.append(fig)
        return save(fig, path, formats, dpi=dpi)

    monkeypatch.setattr(run_plot, "save_figure", keep)
    return seen


def _panels(fig) -> int:
    """Panels of a figure: its axes less the twins (a twin has its panel's position)."""
    return len({tuple(np.round(ax.get_position().bounds, 6)) for ax in fig.axes})


def _png_height(path: Path) -> int:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return int.from_bytes(data[20:24], "big")


def test_synthetic_tcp_run_plot_data_has_the_goodput_cwnd_outage_and_rtos(tmp_path):
    summary, plot = _analyse(_run(tmp_path, tcp=True, rr=False))
    assert plot is not None and plot.rr is None
    p = plot.tcp
    assert p is not None and p.notes == ()
    assert len(p.flows) == 2 and len(p.cwnd) == 2
    # 2 flows x 10 reads of 1000 B per 10 ms: 16 Mbit/s summed, 8 each, before the silence
    before = p.goodput.t_ns <= SILENT_FROM
    assert np.allclose(p.goodput.values[before & (p.goodput.t_ns > T0 + 600 * MS)], 16e6)
    assert np.allclose(p.flows[1].values[p.flows[1].t_ns <= SILENT_FROM][1:], 8e6)
    # silent: zero goodput received (measured zero: the grid has no hole there), never NaN
    silent = (p.goodput.t_ns > SILENT_FROM + 10 * MS) & (p.goodput.t_ns < RESUME[0])
    assert silent.sum() > 200 and (p.goodput.values[silent] == 0).all()
    assert not np.isnan(p.goodput.values).any()
    agg = summary.tcp["aggregate"]["outage"]
    assert p.outage == (agg["t_before_ns"], agg["t_after_ns"]) == (SILENT_FROM, RESUME[0])
    assert p.rto == tuple((T0 + (ms - 10) * MS, T0 + ms * MS) for ms in RTO_SAMPLES_MS)
    assert p.cwnd[0].values[p.cwnd[0].t_ns == T0 + 4_003 * MS].tolist() == [1.0]


def test_synthetic_tcp_and_rr_each_add_one_panel_a_run_without_keeps_its_panels(tmp_path, figures):
    heights = []
    for i, (tcp, rr) in enumerate(((False, False), (True, False), (True, True))):
        root = tmp_path / str(i)
        root.mkdir()
        _, plot = _analyse(_run(root, tcp=tcp, rr=rr))
        assert (plot.tcp is not None, plot.rr is not None) == (tcp, rr)
        heights.append(_png_height(plot_run(root / "migration.png", plot, ("png",))))
    # rates, RTT, outage close-up; + TCP; + rr
    assert [_panels(f) for f in figures] == [3, 4, 5]
    assert heights[0] < heights[1] < heights[2]
    # without the anatomy's close-up: the two panels of old, and one more with TCP
    plot_run(tmp_path / "a.png", dataclasses.replace(plot, zoom=None, tcp=None, rr=None), ("png",))
    plot_run(tmp_path / "b.png", dataclasses.replace(plot, zoom=None, rr=None), ("png",))
    assert [_panels(f) for f in figures[3:]] == [2, 3]


def test_synthetic_rr_panel_latency_unanswered_and_not_sent(tmp_path):
    p = _rr_panel(_run(tmp_path, tcp=False, rr=True), {})
    assert p.notes == ()
    assert p.send_ns.size == p.latency_ms.size == 420 - 103 - 1  # 420 scheduled, 103 not sent, 1 unanswered
    assert p.latency_ms.max() == pytest.approx(2_080.0) and np.median(p.latency_ms) == pytest.approx(1.0)
    assert p.unanswered_ns.tolist() == [T0 + 8_980 * MS]
    assert p.not_sent_ns.size == 103 and p.not_sent_ns.min() == T0 + 3_020 * MS


def test_synthetic_lab_offsets_put_receiver_sender_and_rr_on_the_orchestrator_clock(tmp_path):
    run_dir = _run(tmp_path, tcp=True, rr=True)
    off = {"A": 5 * MS, "B": -7 * MS}
    p0, p1 = _tcp_panel(run_dir, {}, {}, 10.0), _tcp_panel(run_dir, {}, off, 10.0)
    assert (p1.goodput.t_ns - p0.goodput.t_ns == 7 * MS).all()
    assert (p1.flows[1].t_ns - p0.flows[1].t_ns == 7 * MS).all()
    assert (p1.cwnd[0].t_ns - p0.cwnd[0].t_ns == -5 * MS).all()
    r0, r1 = _rr_panel(run_dir, {}), _rr_panel(run_dir, off)
    assert (r1.send_ns - r0.send_ns == -5 * MS).all() and np.array_equal(r1.latency_ms, r0.latency_ms)


def test_synthetic_hole_in_the_grid_is_nan_not_zero():
    t = np.array([0, 10, 20, 80, 90], dtype=np.int64) * MS
    b = np.array([0, 1000, 2000, 2000, 3000], dtype=np.int64)
    s = _goodput_line(t, b, hole_ns=50 * MS)
    assert s.t_ns.tolist() == t[1:].tolist()
    assert s.values[[0, 1, 3]].tolist() == [8e5, 8e5, 8e5] and np.isnan(s.values[2])


def test_synthetic_missing_receiver_trace_is_a_note_and_cwnd_stays(tmp_path, figures):
    run_dir = _run(tmp_path, tcp=True, rr=False)
    (run_dir / "tcp-recv.tsv").unlink()
    _, plot = _analyse(run_dir)
    p = plot.tcp
    assert p.goodput is None and p.flows == () and len(p.cwnd) == 2
    assert p.notes[0] == "goodput not shown: tcp-recv.tsv: No such file or directory"
    plot_run(tmp_path / "m.png", plot, ("png",))
    texts = [t.get_text() for ax in figures[0].axes for t in ax.texts]
    assert any("goodput not shown" in t for t in texts)


def test_synthetic_more_flows_than_drawn_says_so(tmp_path, figures):
    n = MAX_FLOWS_DRAWN + 4
    t = np.arange(1, 11, dtype=np.int64) * 10 * MS
    line = Series(t, np.full(t.size, 1e6))
    tcp = TcpPanel(line, (line,) * n, (Series(t, np.full(t.size, 10.0)),) * n, None)
    plot_run(tmp_path / "m.png", PlotData(0, None, None, None, None, tcp=tcp), ("png",))
    legend = [t.get_text() for ax in figures[0].axes if ax.get_legend() for t in ax.get_legend().get_texts()]
    assert f"each flow ({n} flows, {MAX_FLOWS_DRAWN} drawn)" in legend
    drawn = [ln for ax in figures[0].axes for ln in ax.get_lines() if ln.get_color() == "tab:blue"]
    assert len(drawn) == MAX_FLOWS_DRAWN + 1  # the flows drawn and the all-flows line


def test_synthetic_tcp_both_ways_gives_the_b_to_a_flows_their_own_figures(tmp_path, figures):
    """TRAFFIC=tcp,dir=both: the B -> A flows' files (here the A -> B SYNTHETIC traces copied under
    their names, with A's stall 30 ms longer) give summary.json ``tcp.ba`` by the same functions,
    from their own files; their capture is A's (tcp-A.pcap), absent here, so their capture verdict
    is absent with that reason, not B's."""
    import shutil

    from analysis.present.table import format_table

    run_dir = _run(tmp_path, tcp=True, rr=False)
    for ab, ba in (("tcp-recv.tsv", "tcp-recv-BA.tsv"), ("tcp-recv.tsv.gaps", "tcp-recv-BA.tsv.gaps"),
                   ("tcp-send.tsv", "tcp-send-BA.tsv")):  # fmt: skip
        shutil.copy(run_dir / ab, run_dir / ba)
    gaps = (run_dir / "tcp-recv-BA.tsv.gaps").read_text().splitlines()
    cols = gaps[1].split("\t")
    cols[2] = str(int(cols[2]) + 30 * MS)  # flow 0 resumes 30 ms later on A
    (run_dir / "tcp-recv-BA.tsv.gaps").write_text("\n".join([gaps[0], "\t".join(cols), *gaps[2:]]) + "\n")
    _instruments(run_dir, tcp_ba_port=9101)
    summary, plot = _analyse(run_dir)
    ab, ba = summary.tcp, summary.tcp["ba"]
    assert ba["flows"] == ab["flows"] == 2 and "ba" not in ba
    assert ba["flow_outage_max_ms"] == pytest.approx(ab["flow_outage_max_ms"] + 30 - 10)  # flow 1's was 10 ms longer
    assert ba["capture_agrees"] is None and ba["why_absent"]["capture_agrees"] == "no tcp-A.pcap"
    from analysis.stats.aggregate import run_record

    rec = run_record(summary.to_dict(), {})  # the sweep's columns of both directions
    assert rec["tcp_ba_goodput_outage_ms"] == ba["goodput_outage_ms"] and rec["tcp_ba_cwnd_min"] == ba["cwnd_min"]
    assert rec["tcp_ba_rto_expiries"] == ba["rto_expiries"] and rec["tcp_goodput_outage_ms"] == ab["goodput_outage_ms"]
    text = format_table(summary)
    assert "TCP B -> A 2 flow(s): goodput outage" in text, text
    # the run plot: a panel of their own, from their own traces, their outage shaded
    assert plot.tcp is not None and plot.tcp_ba is not None and plot.tcp_ba.direction == "B -> A"
    agg = ba["aggregate"]["outage"]
    assert plot.tcp_ba.outage == (agg["t_before_ns"], agg["t_after_ns"]) != plot.tcp.outage
    assert len(plot.tcp_ba.flows) == len(plot.tcp_ba.cwnd) == 2
    plot_run(tmp_path / "m.png", plot, ("png",))
    assert _panels(figures[-1]) == 5  # rates, RTT, TCP A -> B, TCP B -> A, outage close-up
    labels = {ax.get_ylabel() for ax in figures[-1].axes}
    assert {"TCP goodput [Mbit/s]", "TCP goodput B -> A [Mbit/s]"} <= labels
