"""Pacing checks: the traffic benchmark's anchored schedule deviation, D-ITG log decoding, schedule
interval per backend and pacing verdicts, and the self-test's send-stamp check against vrgen's
schedule (synthetic inputs, named as such)."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from crosstraffic.backend import GenRequest
from crosstraffic.backends.builtin import BIN_DIR
from crosstraffic.bench.bed import BridgeBed
from crosstraffic.bench.traffic import (
    Deviation,
    alt_variants,
    anchored_deviation,
    baseline_bin_dir,
    finish_with_rusage,
    pacing_markdown,
    pacing_targets,
    parse_itgdec_octave,
    schedule_interval_ns,
)
from crosstraffic.bench.traffic import main as bench_main
from crosstraffic.runner import Child, RunError
from crosstraffic.selftest import pacing_check

T_NS = 51_200.0  # 64 B frames at 10 Mbit/s


def test_anchored_deviation_perfect_schedule_is_zero():
    """Synthetic: packets exactly on a 51.2 µs grid (plus a constant delay) deviate by 0."""
    seq = np.arange(1000, dtype=np.uint64)
    t = 1_700_000_000_000_000_000 + 40_000 + (seq.astype(np.float64) * T_NS).astype(np.int64)
    d = anchored_deviation(seq, t, T_NS)
    assert d is not None and d.count == 1000
    assert d.max_us < 0.01 and d.p50_us < 0.01


def test_anchored_deviation_bursts():
    """Synthetic: bursts of 10 packets sent at the due time of their last packet: the first of each
    burst is 9 intervals late relative to the last one, so max = 9 * 51.2 µs, p50 = 4.5 intervals."""
    seq = np.arange(10_000, dtype=np.uint64)
    due = seq.astype(np.float64) * T_NS
    burst_end = (seq // 10 * 10 + 9).astype(np.float64) * T_NS
    d = anchored_deviation(seq, (1_000_000 + burst_end).astype(np.int64), T_NS)
    assert d is not None
    assert d.max_us == pytest.approx(9 * T_NS / 1e3, abs=0.01)
    assert d.p50_us == pytest.approx(np.percentile((burst_end - due) / 1e3, 50), abs=0.01)


def test_anchored_deviation_sees_drift_and_ignores_duplicates():
    """Synthetic: a generator 1 % slow falls behind linearly; duplicates and order do not matter."""
    seq = np.arange(1000, dtype=np.uint64)
    t = (seq.astype(np.float64) * T_NS * 1.01).astype(np.int64)
    d = anchored_deviation(seq, t, T_NS)
    assert d is not None and d.max_us == pytest.approx(999 * T_NS * 0.01 / 1e3, rel=1e-3)
    order = np.r_[np.arange(500, 1000), np.arange(0, 500), [3, 3]]
    d2 = anchored_deviation(seq[order], t[order], T_NS)
    assert d2 == d


def test_anchored_deviation_edge_cases():
    assert anchored_deviation(np.array([5], dtype=np.uint64), np.array([1]), T_NS) is None
    with pytest.raises(ValueError):
        anchored_deviation(np.arange(3, dtype=np.uint64), np.arange(2), T_NS)
    with pytest.raises(ValueError):
        anchored_deviation(np.arange(3, dtype=np.uint64), np.arange(3), 0.0)


def test_parse_itgdec_octave_tx_rx_and_midnight():
    """Lines in ITGDec 2.8.1's ``-o`` layout (seq, tx h m s, rx h m s, size; captured format)."""
    text = (
        "      1 12 37 56.676543 12 37 56.676600 100\n"
        "      2 12 37 56.677543 12 37 56.677700 100\n"
        "      3 23 59 59.999990 23 59 59.999999 100\n"
        "      4 0 0 0.000020 0 0 0.000030 100\n"
    )
    seq, tx = parse_itgdec_octave(text)
    assert seq.tolist() == [1, 2, 3, 4]
    assert (tx[1] - tx[0]) == 1_000_000
    assert tx[3] - tx[2] == 30_000  # across midnight: 10 µs + 20 µs
    _, rx = parse_itgdec_octave(text, rx=True)
    assert rx[0] - tx[0] == 57_000
    with pytest.raises(ValueError, match="8"):
        parse_itgdec_octave("1 2 3\n")


def test_schedule_interval():
    assert schedule_interval_ns("builtin", "udp", 10_000_000, 64) == pytest.approx(51_200)
    assert schedule_interval_ns("trafgen", "counter", 10_000_000, 64) == pytest.approx(1e9 / 19531)
    assert schedule_interval_ns("trafgen", "gap", 10_000_000, 64) == pytest.approx(51_200)


def _s(backend: str, mode: str, frame: int, rate: int, cpu: float | None, err: float | None = 0.0) -> dict:
    return {
        "backend": backend,
        "mode": mode,
        "frame_bytes": frame,
        "requested_bps": rate,
        "achieved_bps": float(rate),
        "rate_error": err,
        "cpu_us_per_packet": cpu,
        "gen_dev_p50_us": 10.0,
        "gen_dev_p99_us": 100.0,
        "gen_dev_max_us": 1500.0,
        "gen_dev_source": "vrgen schedule",
        "arr_dev_p50_us": None,
        "arr_dev_p99_us": None,
        "arr_dev_max_us": None,
        "arr_dev_source": "",
    }


def test_pacing_targets_verdicts():
    """Synthetic summaries: one point where vrgen costs more than trafgen, one rate error too high."""
    summary = [
        _s("builtin", "udp", 64, 10_000_000, 3.0),
        _s("builtin", "udp", 1500, 10_000_000, 9.0, err=0.002),
        _s("trafgen", "counter", 64, 10_000_000, 4.0),
        _s("trafgen", "counter", 1500, 10_000_000, 6.0),
        _s("trafgen", "gap", 64, 10_000_000, 12.0),
        _s("trafgen", "gap", 1500, 10_000_000, 30.0),
    ]
    t = pacing_targets(summary)
    assert any("rate error <= 0.1 %" in x and "NOT met at 1500 B/10M +0.200 %" in x for x in t)
    counter = next(x for x in t if "trafgen/counter" in x)
    assert counter.startswith("builtin/udp CPU µs/packet <= trafgen/counter's: NOT met")
    assert "64 B/10M 3.00 vs 4.00," in counter and "1500 B/10M 9.00 vs 6.00 (NOT met)" in counter
    gap = next(x for x in t if "trafgen/gap" in x)
    assert ": met (" in gap
    alone = pacing_targets([_s("builtin", "packet", 64, 100_000_000, 3.0)])
    assert "builtin/packet CPU µs/packet <= trafgen/counter's: not measured (64 B/100M n/a)" in alone


def test_pacing_markdown_rows():
    md = pacing_markdown([_s("builtin", "udp", 64, 10_000_000, 3.0), _s("iperf3", "udp", 64, 0, 1.0)])
    lines = md.splitlines()
    assert len(lines) == 3  # header, rule, the paced row only
    assert "| 10 / 100 / 1,500 |" in lines[2] and "| 3.00 |" in lines[2]


def test_deviation_is_frozen():
    d = Deviation(1.0, 2.0, 3.0, 4)
    with pytest.raises(AttributeError):
        d.p50_us = 5.0  # type: ignore[misc]


def _records(stamps_of: dict[int, int]) -> list[tuple[int, int]]:
    return sorted(stamps_of.items())


def test_pacing_check_bursts_on_schedule():
    """Synthetic: 1M of 64 B (512 µs), bursts of 9 stamped 30 µs after the last packet's due time."""
    start, iv = 1_000_000_000_000, 512_000
    recs = {k: start + (k // 9 * 9 + 8) * iv + 30_000 for k in range(1953)}
    c = pacing_check(_records(recs), start, 64, 1_000_000, 1953)
    assert (c.received, c.missing, c.early) == (1953, 0, 0)
    assert c.burst_median == 9 and c.bursts == 217
    assert c.dev_max_ns == 8 * iv + 30_000
    assert c.dev_p50_ns == 4 * iv + 30_000


def test_pacing_check_catches_early_and_missing_packets():
    """Synthetic: a burst sent at its first packet's due time is early for the other 8."""
    start, iv = 0, 512_000
    recs = {k: start + (k // 9 * 9) * iv for k in range(1953) if k != 100}
    c = pacing_check(_records(recs), start, 64, 1_000_000, 1953)
    assert c.missing == 1 and c.received == 1952
    assert c.early == 1952 - 217  # all but the first packet of each of the 217 bursts (100 is not one)


def test_pacing_check_duplicates_count_once():
    c = pacing_check([(0, 5), (1, 512_005), (1, 9), (2, 1_024_005)], 0, 64, 1_000_000, 3)
    assert c.received == 3 and c.early == 0 and c.bursts == 3


def test_finish_with_rusage_reads_a_large_summary_while_waiting():
    """A generator whose summary is larger than a pipe buffer (1 MiB here) must not block on it."""
    code = "import sys; sys.stdout.write('x' * (1 << 20)); sys.stderr.write('done'); sum(range(10**6))"
    child = Child([sys.executable, "-c", code])
    rc, out, err, cpu_s = finish_with_rusage(child, timeout_s=20)
    assert rc == 0 and len(out) == 1 << 20 and err == "done" and cpu_s > 0


def test_finish_with_rusage_times_out_and_kills():
    child = Child([sys.executable, "-c", "import time; time.sleep(30)"])
    with pytest.raises(RunError, match="did not exit within"):
        finish_with_rusage(child, timeout_s=0.3)
    assert child.popen.poll() is not None


def test_alt_variants_pass_their_quantum_and_binary(tmp_path):
    """Side-by-side variants: ``--quantum-us N`` per variant, and another vrgen with this tree's vrsink."""
    fake = tmp_path / "old-vrgen"
    fake.write_text("#!/bin/sh\n")
    base = baseline_bin_dir(fake, tmp_path)
    assert (base / "vrgen").resolve() == fake.resolve() and (base / "vrsink").resolve() == (
        BIN_DIR / "vrsink"
    ).resolve()
    vs = alt_variants([1000], base)
    assert [v.mode for v in vs] == ["udp-q1000", "packet-q1000", "udp-base", "packet-base"]
    assert all(v.runs == "paced" and v.backend == "builtin" for v in vs)
    assert vs[0].gen_extra == ("--quantum-us", "1000") and vs[2].gen_extra == ()
    bed = BridgeBed(a="", sw="", b="", a_mac="02:00:00:00:00:01", b_mac="02:00:00:00:00:02", rx_cpu=None)
    gen = (
        vs[3]
        .make(bed, tmp_path)
        .gen_argv(GenRequest(dst="198.18.0.2", port=9000, rate_bps=10**7, frame_bytes=64, duration_s=1))
    )
    assert gen[0] == str(base / "vrgen") and gen[-4:] == ["--packet", "eth0", "--dst-mac", "02:00:00:00:00:02"]
    assert vs[1].make(bed, tmp_path).gen_argv(
        GenRequest(dst="198.18.0.2", port=9000, rate_bps=10**7, frame_bytes=64, duration_s=1)
    )[0] == str(BIN_DIR / "vrgen")


@pytest.mark.parametrize(
    "args", [["--vrgen-alt-quantum-us", "-5"], ["--vrgen-alt-quantum-us", "x"], ["--vrgen-baseline", "/nonexistent"]]
)
def test_bench_refuses_bad_side_by_side_arguments(args, tmp_path, capsys):
    assert bench_main(["--out", str(tmp_path / "t.csv"), *args]) == 2
    assert "bench-traffic:" in capsys.readouterr().err
    assert not (tmp_path / "t.csv").exists()
