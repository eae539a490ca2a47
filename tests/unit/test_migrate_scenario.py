"""Scenario validation and unit parsing (no root)."""

import pytest

from migrate.cli.main import build_parser, scenario_from_args
from migrate.core.errors import ConfigError
from migrate.core.units import format_rate, parse_rate_bps
from migrate.model.scenario import Scenario


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
