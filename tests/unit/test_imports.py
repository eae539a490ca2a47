"""Every module of the suite imports: a name removed from one module and still imported by another
(a driver or CLI that the unit tests do not otherwise load) fails here, not at a user's run."""

import importlib
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("migrate", "routers", "crosstraffic", "probes", "analysis")


def _modules() -> list[str]:
    files = subprocess.run(["git", "ls-files", *(f"{p}/*.py" for p in PACKAGES)], cwd=REPO,
                           capture_output=True, text=True, check=True).stdout.split()  # fmt: skip
    names = [f.removesuffix(".py").replace("/", ".").removesuffix(".__init__") for f in files]
    return sorted(n for n in names if not n.endswith("__main__"))


@pytest.mark.parametrize("name", _modules())
def test_module_imports(name):
    importlib.import_module(name)
