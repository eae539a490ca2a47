"""Scenario validation and unit parsing (no root)."""

import pytest

from migrate.cli import build_parser, scenario_from_args
from migrate.errors import ConfigError
from migrate.scenario import Scenario
from migrate.units import format_rate, parse_rate_bps


@pytest.mark.parametrize(
    ("text", "bps"), [("500M", 500_000_000), ("1G", 10**9), ("10k", 10_000), ("0", 0), ("1.5M", 1_500_000)]
)
def test_parse_rate(text, bps):
    assert parse_rate_bps(text) == bps


@pytest.mark.parametrize("text", ["fast", "-5M", "5X", "", "1.0000001K"])
def test_parse_rate_rejects(text):
    with pytest.raises(ConfigError, match="RATE"):
        parse_rate_bps(text)


def test_format_rate():
    assert format_rate(500_000_000) == "500M"
    assert format_rate(10**9) == "1G"
    assert format_rate(1500) == "1500"


def test_name_derives_from_parameters():
    assert Scenario(rate_bps=500_000_000, frame_bytes=64, mode="stopcopy").name == "kvm-stopcopy-500M-64"


@pytest.mark.parametrize(
    ("kw", "msg"),
    [
        ({"hv": "vmware"}, "HV='vmware'"),
        ({"mode": "teleport"}, "MODE="),
        ({"frame_bytes": 63}, "SIZE=63"),
        ({"frame_bytes": 1519}, "SIZE=1519"),
        ({"ip": 6, "frame_bytes": 64}, "IPv6"),
        ({"migrate_at_s": 30.0, "duration_s": 20.0}, "MIGRATE_AT"),
        ({"sample_ms": 0}, "SAMPLE_MS"),
        ({"probe_ms": 5000}, "PROBE_MS"),
        ({"mem_mib": 16}, "MEM"),
        ({"router": "quagga"}, "ROUTER"),
        ({"miglink_bps": 10}, "MIGLINK"),
        ({"postcopy": True, "mode": "stopcopy"}, "POSTCOPY"),
    ],
)
def test_bad_input_one_clear_message(kw, msg):
    with pytest.raises(ConfigError, match=msg) as exc:
        Scenario(**kw)
    assert "\n" not in str(exc.value)


def test_cli_flags_build_scenario():
    args = build_parser().parse_args(["run", "--rate", "500M", "--size", "64", "--mode", "stopcopy"])
    s = scenario_from_args(args)
    assert (s.rate_bps, s.frame_bytes, s.mode) == (500_000_000, 64, "stopcopy")


def test_cli_bad_size_is_config_error():
    with pytest.raises(ConfigError, match="SIZE='big'"):
        build_parser().parse_args(["run", "--size", "big"])


def test_after_migration_check_fails_when_r2_does_not_forward(monkeypatch):
    """A hypervisor may report 'completed' for a guest that died on arrival: R2's tap stays silent."""
    from migrate import run as runmod
    from migrate.testbed import Testbed

    monkeypatch.setattr(runmod, "AFTER_MIGRATION_OBSERVE_S", 0.2)
    monkeypatch.setattr(runmod, "rx_packets", lambda ns, ifname: 1234)
    actions = []
    rec = type("Rec", (), {"action": lambda self, *a, **k: actions.append(a)})()
    out = runmod.observe_forwarding(Testbed("vm000000"), "R2", rec)
    assert out["forwarding"] is False and actions == []


def test_after_migration_check_sees_forwarding(monkeypatch):
    from migrate import run as runmod
    from migrate.testbed import Testbed

    counts = iter(range(0, 10_000, 7))
    monkeypatch.setattr(runmod, "rx_packets", lambda ns, ifname: next(counts))
    rec = type("Rec", (), {"action": lambda self, *a, **k: None})()
    out = runmod.observe_forwarding(Testbed("vm000000"), "R2", rec)
    assert out["forwarding"] is True and out["packets"] >= runmod.FORWARDING_MIN_PACKETS
