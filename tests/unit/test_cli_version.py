"""``vrmig --version``: the suite's version, its checkout's commit and the results format."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from migrate.cli.main import main
from migrate.core.meta import FORMAT_VERSION, git_commit

REPO = Path(__file__).resolve().parents[2]


def test_version_names_release_commit_and_format(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    out = capsys.readouterr().out.strip()
    commit = git_commit()
    where = f"commit {commit}" if commit else "not a git checkout"
    assert re.fullmatch(rf"vrmig \d+\.\d+\.\d+\S* \({re.escape(where)}\), results format {FORMAT_VERSION}", out), out


def test_version_needs_no_subcommand_and_no_root():
    res = subprocess.run([sys.executable, "-m", "migrate", "--version"], cwd=REPO, capture_output=True, text=True,
                         timeout=60, check=False)  # fmt: skip
    assert res.returncode == 0 and res.stdout.startswith("vrmig ") and res.stderr == "", res
