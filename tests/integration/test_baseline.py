"""``make baseline`` end to end on a tiny matrix (root, QEMU, the built frr image): HV=none and
kvm, 1500 B frames at 10 and 50 Mbit/s, two repetitions of 1 s each.  Bare Linux must forward
10 Mbit/s without loss; the CSV, summary and plots must exist; nothing of the run may be left."""

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.conftest import REPO, require_root_and

pytestmark = pytest.mark.integration


def test_tiny_baseline_matrix(tmp_path):
    require_root_and("qemu-system-x86_64", "irtt", "unshare", "chroot", "crosstraffic/bin/vrgen")
    from routers.errors import RouterError
    from routers.guest import guest_image

    try:
        guest_image("frr")
    except RouterError as err:
        pytest.skip(str(err))
    argv = [sys.executable, "-m", "migrate", "baseline", "--hv", "none,kvm", "--sizes", "1500", "--rates", "10M,50M",
            "--reps", "2", "--duration", "1", "--results", str(tmp_path)]  # fmt: skip
    res = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=600, check=False)
    assert res.returncode == 0, res.stdout + res.stderr
    run_dir = Path(res.stdout.strip().splitlines()[-1])  # the last line printed is the directory
    assert run_dir.is_dir() and run_dir.parent == tmp_path
    for name in ("meta.json", "summary.json", "baseline.csv", "baseline_routers.csv", "offered_vs_forwarded.png",
                 "max_forwarded.png", "routers.png"):  # fmt: skip
        assert (run_dir / name).stat().st_size > 0, name
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["status"] == "completed" and meta["accel"] in ("kvm", "tcg")
    rows = list(csv.DictReader((run_dir / "baseline.csv").open()))
    assert len(rows) == 2 * 2 * 2  # hv x rates x reps
    assert {r["hv"] for r in rows} == {"none", "kvm"} and all(r["status"] == "ok" for r in rows)
    linux_10m = [r for r in rows if r["hv"] == "none" and r["rate_bps"] == "10000000"]
    assert len(linux_10m) == 2
    for r in linux_10m:
        assert float(r["loss_ratio"]) == 0.0, r
        assert float(r["forwarded_bps"]) == pytest.approx(10e6, rel=0.02)
        assert float(r["rtt_median_ms"]) > 0
    kvm = [r for r in rows if r["hv"] == "kvm"]
    assert all(r["cpu_hv"] and float(r["cpu_hv"]) > 0 for r in kvm)  # QEMU's own CPU time was measured
    # nothing of this run is left (checked by its own prefixes: other runs may share the machine)
    prefixes = [c["prefix"] for c in meta["configs"].values()]
    assert len(prefixes) == 2
    left = (
        [n for n in os.listdir("/run/netns") if n.split("-", 1)[0] in prefixes] if os.path.isdir("/run/netns") else []
    )
    assert not left, left
    assert not [p for p in prefixes if (Path("/run/vrmig") / p).exists()]
