"""``vrmig chaos``, ``vrmig analyse`` and ``vrmig bench <name>``: each is its own module's command,
with that module's parser, reached from the one CLI."""

import pytest

from migrate.cli.delegate import benches
from migrate.cli.main import main


def test_every_bench_target_that_runs_a_module_is_a_vrmig_bench():
    assert set(benches()) == {"traffic", "sampler", "qmp", "qmp-client", "ssh", "lab", "lab-baseline", "lab-peering"}


@pytest.mark.parametrize(
    ("argv", "usage"),
    [
        (["chaos", "--help"], "vrmig-chaos"),
        (["analyse", "--help"], "python -m analysis"),
        (["bench", "qmp", "--help"], "python -m analysis.hypervisors.qmp_arrival"),
        (["--debug", "chaos", "--help"], "vrmig-chaos"),
    ],
)
def test_the_modules_own_parser_answers(argv, usage, capsys):
    assert main(argv) == 0
    assert usage in capsys.readouterr().out


def test_a_bench_behind_a_subcommand_gets_its_words(capsys):
    """make bench-sampler runs ``python -m probes.bench sampler``: so does vrmig bench sampler."""
    assert main(["bench", "sampler", "--help"]) == 0
    assert "python -m probes.bench sampler" in capsys.readouterr().out


def test_the_modules_bad_input_is_its_own(tmp_path, capsys):
    assert main(["bench", "qmp", str(tmp_path)]) == 2
    assert "no qmp_events.jsonl" in capsys.readouterr().err
    assert main(["analyse", str(tmp_path / "missing")]) == 2


@pytest.mark.parametrize("argv", [["bench"], ["bench", "nope"]])
def test_a_bench_without_a_known_name_is_one_line(argv, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "name one of lab, lab-baseline" in err, err


def test_vrmig_help_lists_them(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert all(f"    {c} " in out for c in ("chaos", "analyse", "bench")), out
