"""Campaign files (migrate.campaigns.campaign): parsing, expansion, validation, every error naming
the file and line, the shipped campaigns, and ``make sweep``'s anonymous campaign."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from migrate.campaigns import campaign as cp
from migrate.campaigns import sweep as sw
from migrate.core.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]
SHIPPED = sorted((REPO / "campaigns").glob("*.toml"))

HEAD = '[campaign]\nname = "t"\nreps = 2\nseed = 5\n'


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "c.toml"
    p.write_text(text)
    return p


def test_grid_and_zip_expand_in_order(tmp_path):
    p = _write(tmp_path, HEAD + '[defaults]\nDURATION = 8\n[grid]\nMODE = ["precopy", "stopcopy"]\n'
               '[zip]\nRATE = ["0", "10M"]\nSIZE = [64, 1500]\n')  # fmt: skip
    c = cp.load(p)
    assert [pt.label for pt in c.points] == [
        "mode=precopy,rate=0,size=64", "mode=precopy,rate=10M,size=1500",
        "mode=stopcopy,rate=0,size=64", "mode=stopcopy,rate=10M,size=1500",
    ]  # fmt: skip
    assert c.axes == ("MODE", "RATE", "SIZE") and c.reps == 2 and c.seed == 5
    s = c.points[1].scenario
    assert (s.mode, s.rate_bps, s.frame_bytes, s.duration_s) == ("precopy", 10_000_000, 1500, 8.0)
    assert c.n_runs == 8


def test_parts_override_defaults_and_are_labelled(tmp_path):
    text = HEAD + '[defaults]\nDURATION = 8\nSIZE = 1500\n[[part]]\nname = "a"\ngrid = { RATE = ["1M", "2M"] }\n'
    p = _write(tmp_path, text + '[[part]]\nname = "b"\ndefaults = { SIZE = 64, DURATION = 9 }\n')
    c = cp.load(p)
    assert [pt.label for pt in c.points] == ["a,rate=1M", "a,rate=2M", "b"]
    assert c.points[2].scenario.frame_bytes == 64 and c.points[2].scenario.duration_s == 9.0
    assert c.points[0].scenario.frame_bytes == 1500


def test_overrides_reps_and_seed(tmp_path):
    c = cp.load(_write(tmp_path, HEAD), reps=3, seed=9)
    assert (c.reps, c.seed, [p.label for p in c.points]) == (3, 9, ["default"])


@pytest.mark.parametrize(
    ("body", "line", "words"),
    [
        ('[grid]\nRATEE = ["1M"]\n', 6, "unknown variable RATEE in [grid] (did you mean RATE?)"),
        ('[grid]\nSIZE = [64, "x"]\n', 6, "SIZE='x' is not a whole number"),
        ("[grid]\nSIZE = [64, 1500]\n[zip]\nSIZE = [64]\n", 8, "axis SIZE is given twice"),
        ('[defaults]\nRATE = "1M"\nDOWNTIME_LIMIT = 0\n', 7, "DOWNTIME_LIMIT=0 must be > 0 ms"),
        ("[grid]\nSIZE = [64, 64]\n", 6, "axis SIZE lists 64 twice"),
        ("[grid]\nSIZE = []\n", 6, "must be a non-empty list"),
        ('[zip]\nSIZE = [64, 1500]\nRATE = ["1M"]\n', 5, "[zip] lists must be equally long"),
        ('[defaults]\nRATE = "1M"\n[grid]\nRATE = ["2M"]\n', 8, "both a default and an axis"),
        ('[defaults]\nMODE = "sideways"\n', 6, "MODE='sideways' is unknown"),
        ("[defaults]\nSIZE = [64]\n", 6, "lists belong in [grid] or [zip]"),
        ("[grid\nSIZE = [1]\n", 5, "not valid TOML"),
        ('[defaults]\nHV = "kvm"\n[griid]\nX = 1\n', 7, "unknown table or key 'griid'"),
        ('[grid]\nRATE = ["1M", "1000K"]\n', 5, "are the same experiment"),
    ],
)
def test_bad_input_names_file_and_line(tmp_path, body, line, words):
    p = _write(tmp_path, HEAD + body)
    with pytest.raises(ConfigError) as err:
        cp.load(p)
    msg = str(err.value)
    assert msg.startswith(f"{p}:{line}: "), msg
    assert words in msg and "\n" not in msg


@pytest.mark.parametrize(
    ("head", "words"),
    [
        ('[campaign]\nname = "t"\nreps = 0\n', "reps = 0 must be a whole number 1-1000"),
        ('[campaign]\nname = "a b"\nreps = 1\n', "name = 'a b'"),
        ('[campaign]\nname = "t"\nreps = 1\ncommand = "dance"\n', "command = 'dance'"),
        ('[campaign]\nname = "t"\nreps = 1\nbudget = "soon"\n', "budget = 'soon' is not a duration"),
        ('[campaign]\nname = "t"\nreps = 1\nwhen = 1\n', "[campaign] has no key 'when'"),
        ('[defaults]\nHV = "kvm"\n', "no [campaign] table"),
    ],
)
def test_bad_campaign_table(tmp_path, head, words):
    with pytest.raises(ConfigError, match=r"^.*c\.toml:\d+: ") as err:
        cp.load(_write(tmp_path, head))
    assert words in str(err.value)


def test_over_budget_is_refused_before_anything_runs(tmp_path):
    text = '[campaign]\nname = "t"\nreps = 100\nbudget = "10m"\n[defaults]\nDURATION = 8\n[grid]\nSIZE = [64, 1500]\n'
    with pytest.raises(ConfigError) as err:
        cp.load(_write(tmp_path, text))
    assert ":4: the campaign needs about 1:33:20 (200 runs at DURATION + 20 s each) but its budget is 0:10:00" in str(
        err.value
    )
    ok = text.replace('"10m"', '"2h"')
    assert cp.load(_write(tmp_path, ok)).budget_s == 7200.0


def test_baseline_campaign_counts_its_matrix_and_refuses_axes(tmp_path):
    text = ('[campaign]\nname = "b"\ncommand = "baseline"\nreps = 2\n[defaults]\nHV = "none,kvm"\nSIZES = [64, 1500]\n'
            'RATES = "1M,10M,max"\n')  # fmt: skip
    c = cp.load(_write(tmp_path, text))
    assert c.points[0].variables["SIZES"] == "64,1500"
    assert c.n_runs == 2 * 2 * 2 * 3  # configurations × sizes × rates × reps
    with pytest.raises(ConfigError, match="varies its points through the baseline's own lists"):
        cp.load(_write(tmp_path, text + "[grid]\nMEM = [256, 512]\n"))
    with pytest.raises(ConfigError, match="REPS is set by"):
        cp.load(_write(tmp_path, text + "REPS = 3\n"))


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_shipped_campaigns_validate(path):
    c = cp.load(path)
    assert c.points and c.name == path.stem
    assert c.budget_s is not None and c.estimate_s() <= c.budget_s


def test_shipped_campaigns_exist():
    assert {p.name for p in SHIPPED} >= {
        "paper004-fig2.toml",
        "paper004-fig3.toml",
        "knobs-kvm.toml",
        "dirty-rate.toml",
    }


def test_sweep_writes_the_campaign_it_is(tmp_path):
    """make sweep's anonymous campaign file expands into exactly the sweep's own points."""
    from migrate.cli.main import build_parser
    from migrate.experiment.args import knob_values, scenario_from_args

    ns = build_parser().parse_args(["sweep", "--duration", "9", "--mem", "512", "--downtime-limit", "40,80",
                                    "--multifd", "0,2", "--announce", "50,550,5,100",
                                    "--rates", "0,10M", "--reps", "2", "--peering", "bgp,bfd"])  # fmt: skip
    template = scenario_from_args(ns, axes=True)
    knob_axes = [(k.var, values) for k, values in knob_values(ns) if len(values) > 1]
    rates, modes, bfds = sw.parse_rates("0,10M"), ("precopy", "stopcopy"), ((50, 3), (300, 3))
    plan = sw.grid_plan(template, rates, (1500, 64), 2, 17, modes, bfds, knob_axes)
    text = cp.sweep_campaign(ns, rates, (1500, 64), 2, 17, modes, bfds, knob_axes)
    c = cp.load(_write(tmp_path, text))
    assert (c.reps, c.seed) == (2, 17)
    assert sorted(repr(p.scenario) for p in c.points) == sorted(repr(p.scenario) for p in plan.points)
    assert len(c.points) == len(plan.points) == 64
    assert {p.scenario.announce_initial_ms for p in c.points} == {50}


def test_template_variables_skip_defaults():
    from migrate.cli.main import build_parser

    ns = build_parser().parse_args(["run", "--mem", "512", "--max-bandwidth", "1G", "--xbzrle", "1"])
    assert isinstance(ns, argparse.Namespace)
    v = cp.template_variables(ns)
    assert v["MEM"] == 512 and v["MIGBW"] == "1G" and v["XBZRLE"] == "1"
    assert "DURATION" not in v and v["HV"] == "kvm"


def test_lines_of_keys_in_tables_and_parts():
    text = '[campaign]\nname = "x"\n\n[[part]]\nname = "a"\ngrid = { RATE = ["1M"] }\n'
    text += '[[part]]\ndefaults = { HV = "kvm" }\n'
    lines = cp._Lines(text)
    assert lines.of("campaign", "name") == 2
    assert lines.of("part", "RATE", 0, "grid") == 6
    assert lines.of("part", "HV", 1, "defaults") == 8
    assert lines.of("part", None, 1) == 7


def test_a_knob_the_libvirtd_lacks_is_refused_at_its_line_before_anything_is_created(tmp_path, monkeypatch):
    """The preflight's knob refusal for one point (libvirt 9.0 has no zstd multifd compression:
    9.4.0) names the file and the axis' line; no results directory is made."""
    import migrate.drivers.kvm.driver as kvm

    p = _write(tmp_path, HEAD + '[defaults]\nDRIVER = "libvirt"\nMULTIFD = 2\n'
               '[grid]\nMULTIFD_COMPRESSION = ["none", "zstd"]\n')  # fmt: skip
    c = cp.load(p)
    hv = {"qemu": "QEMU emulator version 7.2.22", "libvirt": {"daemon": "9.0.0"}, "accel": "tcg"}
    monkeypatch.setattr(sw, "versions", lambda *a, **k: {"hypervisor": hv})
    monkeypatch.setattr(kvm, "qemu_enum_values", lambda *a: ["none", "zlib", "zstd"])
    results = tmp_path / "results"
    with pytest.raises(ConfigError) as exc:
        sw.new_campaign(c, results)
    line = p.read_text().splitlines().index('MULTIFD_COMPRESSION = ["none", "zstd"]') + 1
    assert str(exc.value).startswith(f"{c.path}:{line}: MULTIFD_COMPRESSION=zstd needs libvirt 9.4.0"), exc.value
    assert str(exc.value).endswith("(point multifd_compression=zstd)") and "\n" not in str(exc.value)
    assert not results.exists()
