"""What the lab benches share: one ``python -m migrate`` command, embedded or on a lab, as its
own process."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path


def run_migrate(
    where: str, testbed: str, args: list[str]
) -> tuple[subprocess.CompletedProcess[str], float, Path | None]:
    """Run ``python -m migrate <args>`` embedded, or on the lab of inventory ``testbed`` when
    ``where`` is "lab", without progress lines: the finished process, its wall time [s] rounded
    to 0.1 s, and the run directory it printed last (None when it printed nothing)."""
    argv = [sys.executable, "-m", "migrate", *args]
    if where == "lab":
        argv += ["--testbed", testbed]
    t0 = time.monotonic()
    res = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, "VRMIG_PROGRESS": "0"}, check=False)
    wall_s = round(time.monotonic() - t0, 1)
    lines = res.stdout.strip().splitlines()
    return res, wall_s, Path(lines[-1]) if lines else None
