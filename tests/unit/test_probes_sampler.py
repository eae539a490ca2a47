"""probes.sampler: the vrsampler command line and the counters.tsv loader, on captured real output
(tests/fixtures/probes/README.md says how it was captured)."""

import gzip
from pathlib import Path

import numpy as np
import pytest

from probes.sampler import VRSAMPLER, load_counters, sampler_argv

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "probes"
COUNTERS = FIX / "counters_3ns.tsv"
KEYS = [
    ("vrt-pr-a", "a0"),
    ("vrt-pr-a", "lo"),
    ("vrt-pr-b", "b0"),
    ("vrt-pr-b", "b1"),
    ("vrt-pr-b", "t0"),
    ("vrt-pr-c", "c0"),
]


def naive_parse(path: Path) -> dict[tuple[str, str], list[list[int]]]:
    """Line-by-line reference parser."""
    out: dict[tuple[str, str], list[list[int]]] = {}
    lines = path.read_text().splitlines()
    for line in lines[2:]:
        if line.startswith("#"):
            continue
        t, late, ns, ifname, *c = line.split()
        out.setdefault((ns, ifname), []).append([int(t), int(late), *map(int, c)])
    return out


@pytest.fixture(scope="module")
def counters():
    return load_counters(COUNTERS)


def test_header_and_keys(counters):
    assert counters.period_ns == 10_000_000
    assert counters.period_ms == 10.0
    assert counters.keys() == KEYS
    assert len(counters) == len(KEYS)
    assert not counters.truncated


def test_matches_line_by_line_parse(counters):
    ref = naive_parse(COUNTERS)
    assert set(ref) == set(counters.keys())
    for key, rows in ref.items():
        s = counters.series(*key)
        arr = np.array(rows, dtype=object)
        assert s.t_ns.tolist() == arr[:, 0].tolist()
        assert s.late_ns.tolist() == arr[:, 1].tolist()
        assert s.rx_packets.tolist() == arr[:, 2].tolist()
        assert s.rx_bytes.tolist() == arr[:, 3].tolist()
        assert s.tx_packets.tolist() == arr[:, 4].tolist()
        assert s.tx_bytes.tolist() == arr[:, 5].tolist()


def test_dtypes_and_clock(counters):
    s = counters.series("vrt-pr-a", "a0")
    assert s.t_ns.dtype == np.int64 and s.late_ns.dtype == np.int64
    for c in (s.rx_packets, s.rx_bytes, s.tx_packets, s.tx_bytes):
        assert c.dtype == np.uint64
    # CLOCK_REALTIME ns: a plausible wall-clock date (2020..2100)
    assert 1.5e18 < s.t_ns[0] < 4.1e18


def test_samples_every_10ms_and_counters_grow(counters):
    for key in KEYS:
        s = counters.series(*key)
        dt = np.diff(s.t_ns)
        assert (dt > 0).all()
        assert 9.5e6 < np.median(dt) < 10.5e6
    a0 = counters.series("vrt-pr-a", "a0")
    assert (np.diff(a0.tx_packets.astype(np.int64)) >= 0).all()
    assert a0.tx_packets[-1] > a0.tx_packets[0]
    # the probes crossed b: what a0 sent, c0 received (same traffic, ±in flight)
    c0 = counters.series("vrt-pr-c", "c0")
    assert abs(int(c0.rx_packets[-1] - c0.rx_packets[0]) - int(a0.tx_packets[-1] - a0.tx_packets[0])) < 5


def test_disappeared_interface_stops_others_continue(counters):
    t0 = counters.series("vrt-pr-b", "t0")
    b0 = counters.series("vrt-pr-b", "b0")
    assert 0 < len(t0) < len(b0)
    assert t0.t_ns[-1] < b0.t_ns[-1]
    assert "t0 disappeared" in (FIX / "counters_3ns.stderr").read_text()


def test_footer_and_rounds(counters):
    f = counters.footer
    assert f["method"] == "stats-dump"
    assert counters.footer_number("rounds") == len(counters.series("vrt-pr-a", "a0"))
    assert counters.footer_number("samples") == sum(len(s) for s in counters)
    assert counters.footer_number("cpu_user_s") is not None
    assert counters.footer_number("nope") is None
    t, late = counters.rounds()
    assert len(t) == counters.footer_number("rounds")
    assert late.max() == counters.footer_number("max_late_ns")
    # every line of a round carries that round's late_ns
    ref = naive_parse(COUNTERS)
    a0_late = [r[1] for r in ref[("vrt-pr-a", "a0")]]
    assert late.tolist() == a0_late


def test_rate(counters):
    mid, r = counters.series("vrt-pr-a", "a0").rate("tx_packets")
    assert len(mid) == len(r) == len(counters.series("vrt-pr-a", "a0")) - 1
    assert 100 < np.nanmedian(r) < 2000  # irtt at 1 ms: ~850 packets/s


def test_series_missing_names_what_exists(counters):
    with pytest.raises(KeyError, match="vrt-pr-a:a0"):
        counters.series("vrt-pr-x", "eth0")


def test_gzip_and_truncated(tmp_path):
    gz = tmp_path / "counters.tsv.gz"
    with gzip.open(gz, "wb") as fh:
        fh.write(COUNTERS.read_bytes())
    assert load_counters(gz).keys() == KEYS

    # a killed sampler: no footer, last line cut in the middle
    data = COUNTERS.read_bytes()
    body = data[: data.rfind(b"\n#")]
    cut = tmp_path / "cut.tsv"
    cut.write_bytes(body[:-7])
    c = load_counters(cut)
    assert c.truncated
    assert c.footer == {}
    ref = naive_parse(COUNTERS)
    assert sum(len(s) for s in c) == sum(len(v) for v in ref.values()) - 1


def test_long_namespace_names(tmp_path):
    long = "vm" + "x" * 60
    p = tmp_path / "long.tsv"
    p.write_text(COUNTERS.read_text().replace("vrt-pr-b", long))
    c = load_counters(p)
    assert (long, "b1") in c
    assert len(c.series(long, "b1")) == len(load_counters(COUNTERS).series("vrt-pr-b", "b1"))


def test_empty_file_has_no_series(tmp_path):
    p = tmp_path / "empty.tsv"
    p.write_text("".join(COUNTERS.read_text().splitlines(keepends=True)[:2]))
    c = load_counters(p)
    assert len(c) == 0 and c.period_ns == 10_000_000
    t, late = c.rounds()
    assert len(t) == len(late) == 0


@pytest.mark.parametrize(
    ("mangle", "msg"),
    [
        (lambda s: s.replace("# vrmig-sampler 1", "# something 1", 1), "not a vrsampler"),
        (lambda s: s.replace("clock=CLOCK_REALTIME", "clock=CLOCK_MONOTONIC", 1), "unsupported"),
        (lambda s: s.replace("t_ns late_ns", "t late", 1), "column line"),
        (lambda s: s.replace(" vrt-pr-c c0 ", " vrt-pr-c c0 x ", 1), "malformed"),
    ],
)
def test_malformed_files_raise(tmp_path, mangle, msg):
    p = tmp_path / "bad.tsv"
    p.write_text(mangle(COUNTERS.read_text()))
    with pytest.raises(ValueError, match=msg):
        load_counters(p)


def test_large_file_is_fast(tmp_path):
    """10^5 lines load well under a second (the loader is vectorised)."""
    import time

    lines = COUNTERS.read_text().splitlines(keepends=True)
    data = [ln for ln in lines[2:] if not ln.startswith("#")]
    p = tmp_path / "big.tsv"
    with p.open("w") as fh:
        fh.writelines(lines[:2])
        for _ in range(100_000 // len(data) + 1):
            fh.writelines(data)
    t = time.perf_counter()
    c = load_counters(p)
    assert time.perf_counter() - t < 2.0
    assert sum(len(s) for s in c) >= 100_000


def test_sampler_argv():
    argv = sampler_argv(Path("/r/counters.tsv"), {"vm1-R1": ["tapL", "upL"], ".": ["lo"]}, 10)
    assert argv == [str(VRSAMPLER), "--period-ms", "10", "--out", "/r/counters.tsv", "--rt", "vm1-R1:tapL,upL", ".:lo"]
    argv = sampler_argv(Path("o"), {"n": ["e0"]}, 5, rt=False, duration_s=2, binary=Path("/b/vrs"))
    assert argv == ["/b/vrs", "--period-ms", "5", "--out", "o", "--duration", "2.0", "n:e0"]


@pytest.mark.parametrize(
    ("targets", "period", "msg"),
    [
        ({}, 10, "no sampler targets"),
        ({"n": []}, 10, "no interfaces"),
        ({"n": ["a b"]}, 10, "bad interface"),
        ({"n": ["a:b"]}, 10, "bad interface"),
        ({"n": ["x" * 16]}, 10, "bad interface"),
        ({"n": ["e0", "e0"]}, 10, "twice"),
        ({"a/b": ["e0"]}, 10, "bad namespace"),
        ({"n": ["e0"]}, 0, "period_ms"),
    ],
)
def test_sampler_argv_rejects(targets, period, msg):
    with pytest.raises(ValueError, match=msg):
        sampler_argv(Path("o"), targets, period)


@pytest.mark.skipif(not VRSAMPLER.exists(), reason="vrsampler not built: make -C probes")
def test_binary_usage_error_exit_status():
    import subprocess

    res = subprocess.run([str(VRSAMPLER)], capture_output=True, text=True, check=False)
    assert res.returncode == 2 and "usage" in res.stderr
