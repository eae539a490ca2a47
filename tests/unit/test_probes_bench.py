"""probes.bench: the summary of one sampler run and the CSV it writes (no root)."""

import csv
from pathlib import Path

import pytest

from probes.bench import COLUMNS, format_table, main, summarize, write_csv
from probes.sampler import load_counters

COUNTERS = Path(__file__).resolve().parents[1] / "fixtures" / "probes" / "counters_3ns.tsv"


def test_summarize_captured_run():
    r = summarize("idle", COUNTERS)
    c = load_counters(COUNTERS)
    assert r.condition == "idle" and r.period_ms == 10
    assert 0 < r.p50_late_ms <= r.p99_late_ms <= r.max_late_ms
    assert r.max_late_ms == pytest.approx(c.footer_number("max_late_ns") / 1e6)
    cpu_s = c.footer_number("cpu_sched_ns") / 1e9
    assert r.cpu_percent == pytest.approx(100 * cpu_s / c.footer_number("wall_s"))


def test_csv_columns(tmp_path):
    rows = [summarize("idle", COUNTERS), summarize("busy-1core", COUNTERS)]
    out = tmp_path / "bench" / "sampler.csv"
    write_csv(out, rows)
    with out.open() as fh:
        got = list(csv.reader(fh))
    assert tuple(got[0]) == COLUMNS == (
        "condition", "period_ms", "p50_late_ms", "p99_late_ms", "max_late_ms", "cpu_percent",
    )  # fmt: skip
    assert [g[0] for g in got[1:]] == ["idle", "busy-1core"]
    assert float(got[1][2]) == pytest.approx(rows[0].p50_late_ms, abs=1e-4)
    table = format_table(rows)
    assert table.splitlines()[0].split() == list(COLUMNS)


def test_unknown_subcommand_exits():
    with pytest.raises(SystemExit):
        main(["frobnicate"])
