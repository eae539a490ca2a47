"""The traffic benchmark's bed (crosstraffic.bench.bed): its namespaces go at the end of the block
and, when the benchmark is SIGKILLed inside it, its registry's reaper removes them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from crosstraffic.bench.bed import bridge_bed
from tests.integration.conftest import REPO, require_root_and

GRACE_S = 10.0
NETNS = Path("/run/netns")


def test_the_bed_is_removed_when_the_block_ends():
    require_root_and("ip", "bridge", "ping")
    with bridge_bed(rx_cpu=None) as bed:
        names = [bed.a, bed.sw, bed.b]
        assert all((NETNS / n).exists() for n in names)
    assert [n for n in names if (NETNS / n).exists()] == []


def test_a_sigkilled_benchmark_leaves_no_namespace():
    require_root_and("ip", "bridge", "ping")
    code = (
        "import time\n"
        "from crosstraffic.bench.bed import bridge_bed\n"
        "with bridge_bed(rx_cpu=None) as bed:\n"
        "    print(bed.a, bed.sw, bed.b, flush=True)\n"
        "    time.sleep(120)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=REPO, stdout=subprocess.PIPE, text=True, env=env)
    try:
        names = proc.stdout.readline().split()
        assert len(names) == 3 and all((NETNS / n).exists() for n in names), names
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    deadline = time.monotonic() + GRACE_S
    while any((NETNS / n).exists() for n in names) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [n for n in names if (NETNS / n).exists()] == [], "the killed benchmark's namespaces were left"
