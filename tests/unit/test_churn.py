"""CHURN=: the sliding window of churned routes, B's BIRD configuration, the scenario's checks
and the analysis of synthetic churn records (named synthetic: made up here, not measured)."""

from pathlib import Path

import numpy as np
import pytest

from analysis.metrics.churn import churn_figures, in_pool, pool_of, relayed_times
from analysis.metrics.control_plane import LogEvent, route_recovery
from migrate.core.errors import ConfigError
from migrate.experiment import churn
from migrate.experiment.peering import bird_conf
from migrate.model.routing import peers
from migrate.model.scenario import Scenario

S = 1_000_000_000


def test_window_slides_one_withdrawal_and_one_announcement_at_a_time():
    held = set(range(churn.WINDOW))  # the fill
    for op, i in churn.steps(0, 4 * churn.POOL_SIZE + 3):
        i %= churn.POOL_SIZE
        if op == "del":
            assert i in held
            held.remove(i)
        else:
            assert i not in held
            held.add(i)
        assert churn.WINDOW - 1 <= len(held) <= churn.WINDOW
    # resuming the sequence at any change gives the same changes
    assert list(churn.steps(7, 5)) == list(churn.steps(0, 12))[7:]


def test_prefixes_are_inside_the_testbed_range_and_distinct():
    pfx = {churn.prefix(i) for i in range(churn.POOL_SIZE)}
    assert len(pfx) == churn.POOL_SIZE
    assert all(in_pool(p, churn.POOL) for p in pfx)
    assert churn.prefix(churn.POOL_SIZE) == churn.prefix(0)
    assert not in_pool("198.18.4.10/32", churn.POOL) and not in_pool("garbage", churn.POOL)


def test_bird_conf_of_b_learns_the_table_and_exports_the_pool_only_with_churn():
    a, b = peers()
    s = Scenario(peering="bgp", churn_rps=100)
    conf_b = bird_conf(s, b, Path("/log"))
    assert f"kernel table {churn.TABLE}; learn;" in conf_b and "export none" in conf_b
    assert f"export where net = {b.announced} || net ~ [ {churn.POOL}{{32,32}} ]" in conf_b
    assert "kernel" not in bird_conf(s, a, Path("/log"))  # A only observes
    assert "kernel" not in bird_conf(Scenario(peering="bgp"), b, Path("/log"))


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"churn_rps": 100}, "add PEERING=bgp"),
        ({"churn_rps": -1, "peering": "bgp"}, "0 or more"),
        ({"churn_rps": 5001, "peering": "bgp"}, "above 5000"),
    ],
)
def test_scenario_refuses_bad_churn(kw, match):
    with pytest.raises(ConfigError, match=match):
        Scenario(**kw)


def test_scenario_names_the_run_after_its_churn():
    assert Scenario(peering="bgp", churn_rps=200).name.endswith("-bgp-churn200")
    assert Scenario(peering="bgp", churn_rps=0).name.endswith("-bgp-churn0")


def _log_a(times_ns, prefixes, ops):
    return [
        LogEvent(t, "TRACE", "rtr.ipv4", f"> {op} [best] {p} unicast")
        for t, p, op in zip(times_ns, prefixes, ops, strict=True)
    ]


def _meta(**kw):
    base = {"requested_routes_s": 100.0, "pool": "198.19.0.0/17", "observer": "A", "started_ns": 10 * S,
            "stopped_ns": 30 * S, "behind_max": 0}  # fmt: skip
    return {**base, **kw}


def test_synthetic_churn_rates_and_the_stall_across_the_migration():
    # synthetic: 100 changes/s issued at B from 10 s; A receives each 5 ms later, except that
    # the router relays nothing from 20.0 s to 20.8 s (the migration begins at 20 s)
    issue = np.arange(10 * S, 30 * S, S // 100)
    ticks = np.stack([issue, issue + 1000, np.ones_like(issue), np.zeros_like(issue), np.zeros_like(issue)], axis=1)
    relay = issue + 5_000_000
    relay = relay[(relay < 20 * S) | (relay > int(20.8 * S))]
    ops = ["added" if i % 2 else "removed" for i in range(relay.size)]
    events = _log_a(relay, [f"198.19.0.{i % 200}/32" for i in range(relay.size)], ops)
    events += _log_a([15 * S], ["198.18.4.10/32"], ["added"])  # not a churned route
    events.sort(key=lambda e: e.t_ns)
    f = churn_figures(_meta(), ticks, events, 20 * S)
    assert f.issued_routes_s == pytest.approx(100, rel=0.01)
    assert f.relayed_routes_s == pytest.approx(100, rel=0.01)
    assert f.stall_ms == pytest.approx(805, abs=10) and 20 * S <= f.stall_start_ns < 20 * S + 5_000_000
    assert f.changes_relayed == relay.size and not f.why_absent


def test_synthetic_churn_absent_figures_carry_reasons():
    ticks = np.zeros((0, 5), dtype=np.int64)
    f = churn_figures(_meta(), ticks, None, 20 * S)
    assert f.relayed_routes_s is None and f.why_absent["relayed_routes_s"] == "observer_log_missing"
    assert f.stall_ms is None and f.why_absent["stall_ms"] == "observer_log_missing"
    assert f.issued_routes_s == 0.0  # issued nothing: a measured zero, not an absence
    f = churn_figures(_meta(requested_routes_s=0.0), ticks, [], 20 * S)
    assert f.issued_routes_s is None and f.why_absent["issued_routes_s"] == "no_churn_requested"
    f = churn_figures(_meta(), ticks, [], 20 * S)
    assert f.stall_ms is None and f.why_absent["stall_ms"] == "nothing_relayed_after_migration_start"


def test_relayed_times_take_the_router_imports_of_the_pool_only():
    ev = _log_a([1, 2, 3], ["198.19.0.1/32", "198.18.4.10/32", "198.19.0.2/32"], ["added", "added", "removed"])
    ev.append(LogEvent(4, "TRACE", "rtr.ipv4", "< added [best] 198.19.0.3/32 unicast"))  # an export
    assert relayed_times(ev, pool_of(_meta())).tolist() == [1, 3]


def test_route_recovery_leaves_the_churned_routes_out():
    ev = _log_a([1, 2, 5, 6], ["198.18.4.10/32", "198.19.0.1/32", "198.19.0.1/32", "198.19.0.2/32"],
                ["added", "added", "removed", "added"])  # fmt: skip
    pool = pool_of(_meta())
    with_churn = route_recovery("A", ev, 3, lambda p: in_pool(p, pool))
    assert (with_churn.held_before, with_churn.withdrawn, with_churn.lost) == (1, 0, False)
    without = route_recovery("A", ev, 3)
    assert without.lost and without.withdrawn == 1  # what the churn would look like otherwise
