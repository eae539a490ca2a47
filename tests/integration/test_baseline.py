"""``make baseline`` end to end on a tiny matrix (root, QEMU, the built frr image): HV=none and
kvm, 1500 B frames at 10 and 50 Mbit/s, two repetitions of 1 s each.  Bare Linux must forward
10 Mbit/s without loss; the CSV, summary and plots must exist; nothing of the run may be left."""

import csv
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import REPO, missing_from_setup, require_root_and

pytestmark = pytest.mark.integration


def _tiny_baseline(tmp_path: Path, hvs: str) -> tuple[Path, dict[str, Any], list[dict[str, str]]]:
    """Run the tiny matrix on HV=``hvs``; its directory, meta.json and baseline.csv rows."""
    argv = [sys.executable, "-m", "migrate", "baseline", "--hv", hvs, "--sizes", "1500", "--rates", "10M,50M",
            "--reps", "2", "--duration", "1", "--results", str(tmp_path)]  # fmt: skip
    res = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=600, check=False)
    assert res.returncode == 0, res.stdout + res.stderr
    run_dir = Path(res.stdout.strip().splitlines()[-1])  # the last line printed is the directory
    meta = json.loads((run_dir / "meta.json").read_text())
    rows = list(csv.DictReader((run_dir / "baseline.csv").open()))
    assert len(rows) == 2 * 2 * 2  # hv x rates x reps
    return run_dir, meta, rows


def _forward_10m_without_loss(rows: list[dict[str, str]], hv: str) -> list[dict[str, str]]:
    """Check that HV=``hv``'s 10 Mbit/s rows forwarded everything, with an RTT; return them."""
    at_10m = [r for r in rows if r["hv"] == hv and r["rate_bps"] == "10000000"]
    for r in at_10m:
        assert float(r["loss_ratio"]) == 0.0, r
        assert float(r["forwarded_bps"]) == pytest.approx(10e6, rel=0.02)
        assert float(r["rtt_median_ms"]) > 0
    return at_10m


def _nothing_left(meta: dict[str, Any]) -> list[str]:
    """Check that no namespace or state directory of the run's prefixes is left; return the prefixes."""
    prefixes = [c["prefix"] for c in meta["configs"].values()]
    left = (
        [n for n in os.listdir("/run/netns") if n.split("-", 1)[0] in prefixes] if os.path.isdir("/run/netns") else []
    )
    assert not left, left
    assert not [p for p in prefixes if (Path("/run/vrmig") / p).exists()]
    return prefixes


def test_tiny_baseline_matrix(tmp_path):
    require_root_and("qemu-system-x86_64", "irtt", "unshare", "chroot", "crosstraffic/bin/vrgen")
    from routers.errors import RouterError
    from routers.guest import guest_image

    try:
        guest_image("frr")
    except RouterError as err:
        missing_from_setup(err)
    run_dir, meta, rows = _tiny_baseline(tmp_path, "none,kvm")
    assert run_dir.is_dir() and run_dir.parent == tmp_path
    for name in ("meta.json", "summary.json", "baseline.csv", "baseline_routers.csv", "offered_vs_forwarded.png",
                 "max_forwarded.png", "routers.png"):  # fmt: skip
        assert (run_dir / name).stat().st_size > 0, name
    assert meta["status"] == "completed" and meta["accel"] in ("kvm", "tcg")
    assert {r["hv"] for r in rows} == {"none", "kvm"} and all(r["status"] == "ok" for r in rows)
    assert len(_forward_10m_without_loss(rows, "none")) == 2
    kvm = [r for r in rows if r["hv"] == "kvm"]
    assert all(r["cpu_hv"] and float(r["cpu_hv"]) > 0 for r in kvm)  # QEMU's own CPU time was measured
    # nothing of this run is left (checked by its own prefixes: other runs may share the machine)
    assert len(_nothing_left(meta)) == 2


def test_tiny_baseline_with_the_router_container(tmp_path):
    """HV=none,criu: the containerised router (own rootfs, namespaces, pivot_root) forwards 1500 B
    at 10 Mbit/s without loss, its processes' CPU is measured, and nothing of it is left."""
    require_root_and("irtt", "unshare", "chroot", "crosstraffic/bin/vrgen")
    from migrate.core.registry import pid_alive
    from routers.errors import RouterError
    from routers.guest import guest_image

    try:
        if guest_image("frr").rootfs is None:
            pytest.fail("the frr image has no rootfs/: run `make setup`", pytrace=False)
    except RouterError as err:
        missing_from_setup(err)
    run_dir, meta, rows = _tiny_baseline(tmp_path, "none,criu")
    assert meta["status"] == "completed" and meta["accel"] is None
    assert meta["hypervisor"]["container"]["namespaces"] == ["mount", "uts", "ipc", "net", "pid"]
    ct = meta["configs"]["criu-veth-r1-none"]["routers"][0]
    assert ct["kind"] == "container" and ct["ready"].startswith("VRMIG-READY router=frr")
    assert (run_dir / "configs" / "criu-veth-r1-none" / "console-rt0.log").read_text().startswith("VRMIG-CT-BOOT")
    criu = [r for r in rows if r["hv"] == "criu"]
    assert len(criu) == 4 and all(r["status"] == "ok" and r["nic"] == "veth" for r in criu)
    _forward_10m_without_loss(rows, "criu")
    # the container's processes were sampled (a CPU figure exists, possibly 0 ticks), no hypervisor
    assert all(r["cpu_router_daemons"] != "" and r["cpu_hv"] == "" for r in criu)
    summary = json.loads((run_dir / "summary.json").read_text())
    crit = [c for c in summary["configs"] if c["hv"] == "criu" and c["efficiency"]]
    assert crit and all(c["efficiency"]["max_forwarded"] > 0 for c in crit)
    # nothing of this run is left: namespaces, state, rootfs copies, container processes
    _nothing_left(meta)
    assert not Path(ct["rootfs"]).exists()
    assert not pid_alive(ct["init_pid"], ct["init_starttime"])
