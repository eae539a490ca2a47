"""The one set of command-line converters (migrate.experiment.args) that every subcommand uses: a bad
value is one ConfigError naming the Make variable."""

from __future__ import annotations

import pytest

from migrate.cli.main import main
from migrate.core.convert import names, positive
from migrate.core.errors import ConfigError


def test_positive_takes_numbers_above_zero_only():
    conv = positive("MAX_OFFSET_MS", "milliseconds")
    assert conv("2.5") == 2.5
    for bad, why in (("0", "must be above 0"), ("-1", "must be above 0"), ("x", "not a number of milliseconds"),
                     ("nan", "must be above 0")):  # fmt: skip
        with pytest.raises(ConfigError, match=f"MAX_OFFSET_MS={bad!r}.*{why}"):
            conv(bad)


def test_names_keeps_order_drops_repeats_and_refuses_none():
    conv = names("PROFILES", "frr or frr,bird")
    assert conv(" bird, frr ,bird,") == ["bird", "frr"]
    for bad in ("", ",", " , "):
        with pytest.raises(ConfigError, match=r"PROFILES=.*give at least one name, e\.g\. frr or frr,bird"):
            conv(bad)


@pytest.mark.parametrize(
    "argv, line",
    [
        (
            ["hosts-check", "--testbed", "x.toml", "--max-offset-ms", "0"],
            "vrmig: error: MAX_OFFSET_MS='0' must be above 0",
        ),
        (["hosts-setup", "--testbed", "x.toml", "--profiles", ","], "vrmig: error: PROFILES=','"),
    ],
)
def test_lab_subcommands_use_them(argv, line, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(line), err
