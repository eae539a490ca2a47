"""A against B per metric and point (analysis.stats.compare and make compare), on SYNTHETIC samples
and a SYNTHETIC fixture sweep: nothing here was measured."""

import csv
import dataclasses
import itertools
import json
import math

import numpy as np
import pytest

from analysis.stats import compare as cmp
from analysis.stats.inference import mann_whitney_p


def _rng(seed: int = 7) -> np.random.Generator:
    return np.random.default_rng(seed)


def test_synthetic_shifted_samples_are_significant_and_the_ci_excludes_zero():
    a = _rng().normal(30.0, 2.0, 10)  # e.g. downtimes [ms] of 10 runs
    b = _rng(8).normal(40.0, 2.0, 10)
    c = cmp.compare_samples(a, b)
    assert c.verdict == cmp.TESTED and (c.n_a, c.n_b) == (10, 10)
    assert 0.0 < c.ci_low <= c.shift <= c.ci_high  # the interval excludes 0
    assert 7.0 < c.shift < 13.0 and c.ci_confidence >= 0.95
    assert c.cliffs_delta == 1.0 and c.effect == "large"
    assert c.p == pytest.approx(2 / math.comb(20, 10))  # complete separation: the smallest p there is
    [d] = cmp.adjust([c])
    assert d.significant and d.p_adjusted == c.p and d.family == 1 and d.correction == "holm-tarone"
    swapped = cmp.compare_samples(b, a)
    assert swapped.shift == -c.shift and swapped.cliffs_delta == -1.0 and swapped.ci_high < 0


def test_synthetic_identical_distributions_are_not_significant():
    x = _rng(1).normal(800.0, 20.0, 10)
    same = cmp.adjust([cmp.compare_samples(x, x)])[0]
    assert same.verdict == cmp.NOT_SIGNIFICANT and same.p == 1.0 and same.shift == 0.0
    assert same.ci_low < 0.0 < same.ci_high and same.cliffs_delta == 0.0 and same.effect == "negligible"
    a, b = _rng(2).normal(800.0, 20.0, 10), _rng(3).normal(800.0, 20.0, 10)
    c = cmp.adjust([cmp.compare_samples(a, b)])[0]
    assert c.verdict == cmp.NOT_SIGNIFICANT and c.p > 0.05 and c.ci_low < 0.0 < c.ci_high


def test_synthetic_two_against_two_is_undecidable_not_no_difference():
    c = cmp.compare_samples([10.0, 11.0], [50.0, 51.0])  # as far apart as samples get
    assert c.verdict == cmp.UNDECIDABLE and c.min_p == pytest.approx(1 / 3) and c.p == pytest.approx(1 / 3)
    assert "undecidable with n=2 vs 2" in c.reason and "0.333 > 0.05" in c.reason
    assert c.ci_low is None and c.ci_high is None and "no 95 % interval" in c.ci_note and "66.7 %" in c.ci_note
    assert c.shift == 40.0 and c.cliffs_delta == 1.0  # the estimate is still given
    tested = cmp.compare_samples(_rng().normal(0, 1, 10), _rng().normal(5, 1, 10))
    decided = cmp.adjust([c, tested])
    assert decided[0].verdict == cmp.UNDECIDABLE and decided[0].p_adjusted is None
    assert decided[1].family == 1  # the undecidable one is not in Holm's family
    # 3 vs 3 cannot reach 0.05 either (2/20), 4 vs 4 can (2/70), and has an interval (97.1 %)
    assert cmp.compare_samples([1, 2, 3], [7, 8, 9]).verdict == cmp.UNDECIDABLE
    c44 = cmp.compare_samples([1, 2, 3, 4], [7, 8, 9, 10])
    assert c44.verdict == cmp.TESTED and (c44.ci_low, c44.ci_high) == (3.0, 9.0)
    assert c44.ci_confidence == pytest.approx(1 - 2 / 70)


def test_synthetic_missing_metric_says_why_and_is_not_zero():
    five = cmp.Side((1.0, 2.0, 3.0, 4.0, 5.0), n_runs=5, n_completed=5)
    no_values = cmp.Side((), n_runs=5, n_completed=5, absent_reasons=("no stall longer than θ found",))
    c = cmp.compare_sides(five, no_values)
    assert c.verdict == cmp.NOT_COMPARED and c.median_b is None and c.shift is None and c.p is None
    assert c.reason == "B: no values (5 completed runs without the figure: no stall longer than θ found)"
    assert cmp.compare_sides(cmp.Side(), five).reason == "A has no runs at this point"
    failed = cmp.Side((), n_runs=3, n_completed=0)
    assert cmp.compare_sides(five, failed).reason == "B: no completed runs (3 failed or stopped)"
    [d] = cmp.adjust([c])
    assert d.verdict == cmp.NOT_COMPARED and d.family == 0 and d.p_adjusted is None


def test_synthetic_bounds_are_not_taken_for_values():
    a = cmp.Side((0.03, 0.02, 0.04, 0.03), n_runs=5, n_completed=5, n_censored=1, bound_note="≥ 3050 ms")
    b = cmp.Side((0.8, 0.9, 0.85, 0.82, 0.88), n_runs=5, n_completed=5)
    c = cmp.compare_sides(a, b)
    assert c.verdict == cmp.NOT_COMPARED and c.p is None and c.shift is None
    assert c.reason == (
        "A: 1 of 5 completed runs known only by a bound (≥ 3050 ms): a rank comparison would take a bound for a value"
    )
    assert c.median_a == 0.03 and c.n_a == 4  # the point values are described, not compared


def test_synthetic_absent_and_failed_runs_are_left_out_and_counted():
    a = cmp.Side((1.0, 2.0, 3.0, 4.0), n_runs=6, n_completed=5, absent_reasons=("no gap longer than θ found",))
    b = cmp.Side((5.0, 6.0, 7.0, 8.0, 9.0), n_runs=5, n_completed=5, n_incomplete=1)
    c = cmp.compare_sides(a, b)
    assert c.verdict == cmp.TESTED and (c.n_a, c.n_b) == (4, 5) and a.n_absent == 1
    assert c.notes == (
        "A: 1 of 6 runs not completed, left out; "
        "A: 1 of 5 completed runs without the figure, left out (no gap longer than θ found); "
        "B: 1 of 5 values from incomplete instrument records"
    )


def test_holm_corrects_for_the_number_of_comparisons():
    """Ten comparisons of 10 runs against 10, one shifted with raw p = 0.014: significant alone,
    not among ten (Holm's first level 0.005)."""
    a = np.arange(10.0)
    one = cmp.compare_samples(a, a + 4.0)
    assert one.p == pytest.approx(0.0138, abs=1e-4) and one.ci_low > 0  # the per-row interval excludes 0
    assert cmp.adjust([one])[0].significant
    nulls = [cmp.compare_samples(_rng(s).normal(0, 1, 10), _rng(s + 100).normal(0, 1, 10)) for s in range(9)]
    decided = cmp.adjust([one, *nulls])
    assert decided[0].verdict == cmp.NOT_SIGNIFICANT and decided[0].family == 10
    assert decided[0].p_adjusted == pytest.approx(10 * one.p)
    assert decided[0].reason == f"Holm-adjusted p {10 * one.p:.3g} over 10 comparisons > 0.05"
    assert not any(d.significant for d in decided) and {d.correction for d in decided} == {"holm-tarone"}


def test_tarone_leaves_out_the_comparisons_whose_n_cannot_reach_the_tables_level():
    """7 comparisons of 4 runs against 5 (smallest p 2/126 = 0.016) and 6 of 5 against 5 (2/252 =
    0.0079), each as separated as it gets: Holm over all 13 (first level 0.0038) could never reject;
    Tarone's K = 6 keeps the six 5-vs-5 ones (0.0079 <= 0.05/6), which are then significant."""
    four_five = [cmp.compare_samples([1.0, 2.0, 3.0, 4.0], [11.0, 12.0, 13.0, 14.0, 15.0]) for _ in range(7)]
    five_five = [cmp.compare_samples([1.0, 2.0, 3.0, 4.0, 5.0], [11.0, 12.0, 13.0, 14.0, 15.0]) for _ in range(6)]
    assert cmp.tarone_level([c.min_p for c in four_five + five_five]) == 6
    decided = cmp.adjust(four_five + five_five)
    assert all(d.verdict == cmp.UNDECIDABLE and d.p_adjusted is None for d in decided[:7])
    assert decided[0].reason == (
        "undecidable in this table: with n=4 vs 5 the smallest p (0.0159) is above 0.05/6 = 0.00833, the level "
        "of the 6 of 13 tested comparisons whose n can reach it (Tarone 1990)"
    )
    assert all(d.significant and d.family == 6 for d in decided[7:])
    assert all(d.p_adjusted == pytest.approx(6 * 2 / 252) for d in decided[7:])
    # ten 5-vs-5 comparisons: 0.0079 > 0.05/10 and > 0.05/7, no K keeps any of them
    assert {d.verdict for d in cmp.adjust(five_five + five_five[:4])} == {cmp.UNDECIDABLE}
    assert cmp.tarone_level([]) == 0 and cmp.adjust([]) == []
    # 6 vs 6 (2/924 = 0.0022) reaches 0.05/13 = 0.0038: all 13 decidable
    assert cmp.runs_needed(13) == 6 and cmp.runs_needed(1) == 4 and cmp.runs_needed(6) == 5


def test_holm_adjusted_p_values_by_hand():
    # sorted 0.01, 0.03, 0.04, 0.5 -> 4*0.01, max(0.04, 3*0.03), max(0.09, 2*0.04), max(0.09, 0.5)
    assert cmp.holm_adjusted([0.01, 0.04, 0.03, 0.5]) == pytest.approx([0.04, 0.09, 0.09, 0.5])
    assert cmp.holm_adjusted([0.6, 0.6]) == [1.0, 1.0] and cmp.holm_adjusted([]) == []


@pytest.mark.parametrize(("m", "n"), [(1, 5), (2, 8), (3, 3), (4, 6), (6, 4), (5, 5)])
def test_u_cdf_is_the_enumerated_null_distribution(m, n):
    for j in range(-1, m * n + 1):
        splits = list(itertools.combinations(range(m + n), m))
        # U of x = pairs (x, y) with x above y, x at the positions c of the pooled order
        u = [sum(pos - i for i, pos in enumerate(c)) for c in splits]
        assert cmp.u_cdf(j, m, n) == pytest.approx(sum(v <= j for v in u) / len(splits)), j


def test_synthetic_interval_is_the_inverted_exact_rank_test():
    """Without ties, a shift d lies inside the exact interval exactly when the two-sided rank test
    of B − d against A does not reject at 1 − coverage (Bauer 1972)."""
    a, b = _rng(11).exponential(1.0, 7), _rng(12).exponential(1.0, 6) + 0.8
    c = cmp.compare_samples(a, b)
    level = 1.0 - c.ci_confidence
    diffs = np.sort(np.subtract.outer(b, a).ravel())
    mids = (diffs[:-1] + diffs[1:]) / 2  # between pairwise differences: never a tie
    for d in [diffs[0] - 1, *mids, diffs[-1] + 1]:
        inside = c.ci_low < d < c.ci_high
        assert inside == (mann_whitney_p(b - d, a) > level + 1e-12), d
    assert c.shift == float(np.median(diffs))


def test_synthetic_cliffs_delta_counts_pairs_with_ties_as_half():
    a, b = [1.0, 2.0, 2.0, 5.0], [2.0, 3.0, 0.5]
    above = sum((y > x) + 0.5 * (y == x) for x, y in itertools.product(a, b))
    below = sum((y < x) + 0.5 * (y == x) for x, y in itertools.product(a, b))
    assert cmp.cliffs_delta(a, b) == pytest.approx((above - below) / 12)
    assert [cmp.effect_size_label(d) for d in (0.1, -0.2, 0.4, -0.9)] == ["negligible", "small", "medium", "large"]


def test_non_finite_values_are_refused():
    with pytest.raises(ValueError, match="finite"):
        cmp.compare_samples([1.0, math.nan], [2.0, 3.0])
    with pytest.raises(ValueError, match="non-empty"):
        cmp.compare_samples([], [2.0])


# --- make compare on records and on a SYNTHETIC fixture sweep ---------------------------------


def _rec(series: str, mode: str, rate: float, **metrics) -> dict:
    return {"series": series, "mode": mode, "rate_bps": rate, "frame_bytes": 1500, "accel": "tcg",
            "status": "completed", "quals": {}, **metrics}  # fmt: skip


def test_synthetic_records_match_points_on_what_varies_within_a_side():
    from migrate.campaigns.compare import compare_rows, csv_rows, format_comparison

    rng = _rng(5)
    # A: a night of two modes on the embedded testbed; B: the same night on a lab
    recs_a = [_rec("A kvm precopy", "precopy", 100e6, downtime_counters_s=v) for v in rng.normal(0.03, 0.002, 6)]
    recs_a += [_rec("A kvm stopcopy", "stopcopy", 20e6, downtime_counters_s=v) for v in rng.normal(0.8, 0.01, 6)]
    recs_b = [_rec("B kvm precopy on lab x", "precopy", 100e6, downtime_counters_s=v)
              for v in rng.normal(0.05, 0.002, 6)]  # fmt: skip
    recs_b += [_rec("B kvm stopcopy on lab x", "stopcopy", 20e6, downtime_counters_s=None) for _ in range(6)]
    for r in recs_b[6:]:
        r["quals"] = {"downtime_counters_s": {"state": "absent", "reasons": ["no_stall"], "text": "x (detail)"}}
    recs_a.append(_rec("A kvm precopy", "precopy", 50e6, downtime_counters_s=0.03))  # only in A
    rows = [r for r in compare_rows(recs_a, recs_b) if r.metric == "downtime_counters_s"]
    assert [r.point for r in rows] == ["precopy 50M 1500 B", "precopy 100M 1500 B", "stopcopy 20M 1500 B"]
    only_a, shifted, absent = (r.result for r in rows)
    assert only_a.verdict == cmp.NOT_COMPARED and only_a.reason == "B has no runs at this point"
    assert shifted.significant and shifted.ci_low > 0 and rows[1].series_b == "B kvm precopy on lab x"
    assert absent.verdict == cmp.NOT_COMPARED
    assert absent.reason == "B: no values (6 completed runs without the figure: no stall longer than θ found)"
    assert {r.result.family for r in rows} == {1}  # every metric without values is not compared
    text = format_comparison(rows)
    assert "not compared: B has no runs at this point" in text and "significant" in text
    assert text.splitlines()[-1].startswith("3 comparisons; Holm over the 1 decidable ones")
    row = csv_rows(rows)[1]
    assert row["correction"] == "holm-tarone" and row["n_a"] == 6 and row["n_b"] == 6 and row["significant"] is True
    assert row["unit"] == "s" and row["shift_hl"] == pytest.approx(0.02, abs=0.005)  # not scaled to ms
    assert csv_rows(rows)[2]["significant"] is None and csv_rows(rows)[2]["median_b"] is None


def test_compare_prints_the_table_and_writes_compare_csv(tmp_path, capsys):
    from migrate.cli.main import main
    from tests.fixtures.analysis.synthetic_sweep import write_sweep

    a = write_sweep(tmp_path / "a")
    b = write_sweep(tmp_path / "b", failed=(), mode="stopcopy")
    assert main(["compare", str(a), str(b), "--results", str(tmp_path / "results")]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    out_dir = tmp_path / "results" / lines[-1].rsplit("/", 1)[-1]
    assert lines[-1] == str(out_dir) and lines[-2].endswith("tables: runs.csv points.csv compare.csv")
    header = next(i for i, line in enumerate(lines) if line.startswith("point "))
    assert "Cliff's δ" in lines[header] and "p Holm" in lines[header]
    assert "undecidable with n=2 vs 2" in lines[header + 1]  # the fixture has 2 runs a point
    assert lines[-3] == (
        "14 comparisons; Holm over the 0 decidable ones at family-wise alpha 0.05: 0 significant, 0 not significant; "
        "14 undecidable with their n, 0 in this table (Tarone; 6 completed runs a point on each side would make "
        "all 14 decidable); 0 not compared"
    )
    with (out_dir / "compare.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 14 and {r["correction"] for r in rows} == {"holm-tarone"}
    assert {r["verdict"] for r in rows} == {"undecidable"} and rows[0]["n_a"] == "2"
    html = (out_dir / "report.html").read_text()
    assert "Cliff&#39;s δ" in html and "Hodges–Lehmann" in html and "Holm" in html


def test_compare_without_a_common_point_is_refused_with_one_line(tmp_path, capsys):
    from migrate.cli.main import main
    from tests.fixtures.analysis.synthetic_sweep import write_sweep

    a = write_sweep(tmp_path / "a", failed=())
    b = write_sweep(tmp_path / "b", failed=(), mode="stopcopy")
    for meta_path in (b / "runs").glob("*/meta.json"):
        meta = json.loads(meta_path.read_text())
        meta["scenario"]["rate_bps"] *= 3  # 300M and 600M: no rate of A
        meta_path.write_text(json.dumps(meta))
    assert main(["compare", str(a), str(b), "--results", str(tmp_path / "results")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "A and B have no grid point in common" in err[0]
    assert "A: 100M 1500 B, 200M 1500 B; B: 300M 1500 B, 600M 1500 B" in err[0]
    assert not (tmp_path / "results").exists()


def test_compare_does_not_take_a_bound_for_a_value(tmp_path):
    """A SYNTHETIC run whose traffic never came back: its downtimes are lower bounds, and the rows
    say so instead of comparing them."""
    from migrate.campaigns.compare import compare, csv_rows
    from tests.fixtures.analysis.synthetic_sweep import write_sweep

    a = write_sweep(tmp_path / "a", failed=(), never_back=("100M-1500-r01",))
    b = write_sweep(tmp_path / "b", failed=(), mode="stopcopy")
    rows = {(r.point, r.metric): r for r in compare(a, b, tmp_path / "results").rows}
    bounded = rows[("100M 1500 B", "downtime_packets_s")]
    assert bounded.result.verdict == cmp.NOT_COMPARED and bounded.a.n_censored == 1
    assert bounded.result.reason.startswith("A: 1 of 2 completed runs known only by a bound (≥ ")
    assert bounded.result.reason.endswith(" ms): a rank comparison would take a bound for a value")
    assert bounded.result.p is None and bounded.result.shift is None
    assert csv_rows([bounded])[0]["n_censored_a"] == 1
    assert rows[("200M 1500 B", "downtime_packets_s")].result.verdict == cmp.UNDECIDABLE  # 2 vs 2, no bound


def test_a_tested_comparison_without_its_p_is_undecidable_not_significant():
    """A missing p is not p = 0: the comparison is left undecided, and the others' family omits it."""
    tested = cmp.compare_samples(_rng().normal(0, 1, 10), _rng().normal(5, 1, 10))
    no_p = dataclasses.replace(tested, p=None)
    no_min_p = dataclasses.replace(tested, min_p=None)
    decided = cmp.adjust([no_p, no_min_p, tested])
    assert [d.verdict for d in decided[:2]] == [cmp.UNDECIDABLE, cmp.UNDECIDABLE]
    assert all(d.p_adjusted is None and d.reason == "no p-value computed" for d in decided[:2])
    assert decided[2].verdict == cmp.SIGNIFICANT and decided[2].family == 1
