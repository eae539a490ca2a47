"""make ab (migrate.campaigns.abarms): arms parsed, the campaign they make, and the judgement on
SYNTHETIC run records (nothing is migrated here; tests/integration/test_ab.py runs real arms)."""

from __future__ import annotations

import tomllib

import numpy as np
import pytest

from migrate.campaigns import abarms
from migrate.core.errors import ConfigError


def test_arms_are_make_migrate_variables():
    assert abarms.parse_arm("QEMU=10.0 MULTIFD=4", "B") == {"QEMU": "10.0", "MULTIFD": "4"}
    assert abarms.parse_arm("QEMU=/opt/my\\ qemu/qemu-system-x86_64", "B") == {
        "QEMU": "/opt/my qemu/qemu-system-x86_64"
    }


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "A is empty"),
        ("QEMU", "'QEMU' is not VAR=value"),
        ("RATES=10M", r"unknown variable RATES in A \(did you mean RATE\?\)"),
        ("QEMU=system QEMU=10.0", "QEMU is given twice"),
        ("RESULTS=/tmp/x", "RESULTS is the same for both arms"),
        ('QEMU="10.0', "No closing quotation"),
    ],
)
def test_a_bad_arm_is_one_line(text, message):
    with pytest.raises(ConfigError, match=message):
        abarms.parse_arm(text, "A")


def test_the_arms_make_a_campaign_of_two_parts_over_the_scenario():
    text = abarms.arms_campaign({"HV": "kvm", "MODE": "precopy", "RATE": "100M", "SIZE": 1500},
                                {"QEMU": "system"}, {"QEMU": "10.0", "MODE": "stopcopy"}, 30, 7)  # fmt: skip
    doc = tomllib.loads(text)
    assert doc["campaign"] | {"description": ""} == {"name": "ab", "description": "", "command": "migrate",
                                                     "reps": 30, "seed": 7}  # fmt: skip
    assert doc["defaults"]["MODE"] == "precopy"  # arm A keeps the scenario's mode, B sets its own
    assert doc["part"] == [{"name": "A", "defaults": {"QEMU": "system"}},
                           {"name": "B", "defaults": {"QEMU": "10.0", "MODE": "stopcopy"}}]  # fmt: skip


def _records(arm, downtimes, failed=0):
    """SYNTHETIC run records of one arm: completed runs with these packet downtimes (every other
    metric alike in both arms), then ``failed`` runs that failed after the migration."""
    recs = []
    for d in downtimes:
        recs.append({"point": arm, "status": "completed", "failure_class": None, "downtime_packets_s": d,
                     "downtime_counters_s": d, "downtime_hypervisor_s": d / 2, "duration_link_s": 0.8 + d,
                     "volume_link_bytes": 1.2e8 + d, "rtt_increase_median_ms": 1.0 + d,
                     "forwarded_ratio": 0.99 - d / 1000})  # fmt: skip
    recs += [{"point": arm, "status": "failed", "failure_class": "post-migration"} for _ in range(failed)]
    return recs


def test_a_longer_outage_of_b_is_a_regression_and_the_same_is_not():
    rng = np.random.default_rng(1)
    a = list(0.060 * np.exp(rng.normal(0, 0.15, 30)))
    same = abarms.judge(_records("A", a) + _records("B", list(0.060 * np.exp(rng.normal(0, 0.15, 30)))), 30)
    assert not same.regression, [(v.metric, v.status, v.reason) for v in same.verdicts]
    worse = abarms.judge(_records("A", a) + _records("B", [x * 2 for x in a]), 30)
    bad = {v.metric for v in worse.verdicts if v.regression}
    assert bad == {"downtime_packets_s", "downtime_counters_s", "downtime_hypervisor_s"}
    row = next(r for r in worse.rows if r["metric"] == "downtime_packets_s")
    assert row["ratio_b_a"] == pytest.approx(2.0) and row["cliffs_delta"] > 0.9 and row["effect_size"] == "large"
    assert worse.line({"QEMU": "system"}, {"QEMU": "10.0"}).endswith(
        "REGRESSION in downtime_packets_s, downtime_counters_s, downtime_hypervisor_s"
    )
    assert worse.power_note == ""


def test_failures_of_b_are_judged_against_a():
    a = [0.06 + i / 1000 for i in range(30)]
    j = abarms.judge(_records("A", a) + _records("B", a[:24], failed=6), 30)
    fail = next(v for v in j.verdicts if v.metric == "migration_failures")
    assert fail.regression and j.regression, fail
    fewer = abarms.judge(_records("A", a[:24], failed=6) + _records("B", a), 30)
    assert not next(v for v in fewer.verdicts if v.metric == "migration_failures").regression


def test_fewer_runs_state_the_power_lost():
    rng = np.random.default_rng(2)
    a, b = (list(0.060 * np.exp(rng.normal(0, 0.3, 10))) for _ in range(2))
    j = abarms.judge(_records("A", a) + _records("B", b), 10)
    assert j.power_note.startswith("REPS=10 (< 30): the smallest change")
    row = next(r for r in j.rows if r["metric"] == "downtime_packets_s")
    assert row["detectable_ratio"] > row["detectable_ratio_at_30"] > 1.0


def test_detectable_ratio_of_known_spread():
    """With sd(log x) = 0.3, alpha 0.01, power 0.8 and 30 runs: exp(3.168 * 0.3 * sqrt(2/30) / sqrt(3/pi))."""
    from analysis.stats.regression import detectable_ratio

    x = np.exp(np.array([-0.3, 0.3] * 15) * np.sqrt(29 / 30))  # sample sd of the logs: exactly 0.3
    d = detectable_ratio(list(x), 30, 0.01, 0.8)
    assert d.ratio == pytest.approx(np.exp(3.1680 * 0.3 * np.sqrt(2 / 30) / np.sqrt(3 / np.pi)), rel=1e-3)
    assert detectable_ratio([1.0, 2.0], 30, 0.01).ratio is None
    assert detectable_ratio([0.0, 1.0, 2.0], 30, 0.01).why == "values of zero or below: no ratio"


def test_too_few_runs_are_refused_before_and_undecided_after():
    """Synthetic arms: below the rank test's reach nothing can be judged, so REPS<5 is bad input,
    and an A/B whose arms ended with too few completed runs says UNDECIDED and exits 125, never
    "no regression"."""
    from migrate.core.errors import ConfigError

    assert abarms.min_reps() == 5  # 1/C(10,5) = 1/252 <= 0.01 < 1/C(8,4) = 1/70
    with pytest.raises(ConfigError, match=r"REPS=4 is too few for make ab: .* at least 5 runs per arm"):
        abarms.check_reps(4)
    abarms.check_reps(5)
    a = [0.06 + i / 1000 for i in range(5)]
    j = abarms.judge(_records("A", a[:3], failed=2) + _records("B", a[:3], failed=2), 5)
    assert j.undecided and not j.regression and j.exit_code == abarms.UNDECIDED_EXIT == 125
    assert "UNDECIDED: no figure could be judged" in j.line({"QEMU": "system"}, {"QEMU": "10.0"})
    decided = abarms.judge(_records("A", a) + _records("B", a), 5)
    assert not decided.undecided and decided.exit_code == 0
