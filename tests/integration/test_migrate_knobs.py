"""QEMU's migration knobs on real migrations (root, QEMU, built guest; libvirtd and libvirt-python
for the libvirt one): each run completes, R2 forwards afterwards, and meta.json shows the knobs as
QEMU reports them on both sides (``hypervisor.knobs_effective``).  With MULTIFD the RAM really
went through the multifd channels (QEMU's ram.multifd-bytes).  A two-axis sweep (DOWNTIME_LIMIT x
MULTIFD) makes four points whose rows carry QEMU's effective values."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from tests.integration.conftest import missing_from_setup, require_root_and

pytestmark = pytest.mark.integration

RATE = 10_000_000
TOOLS = ("qemu-system-x86_64", "irtt", "crosstraffic/bin/vrgen", "probes/bin/vrsampler")


def _ready(*extra: str) -> None:
    require_root_and(*TOOLS, *extra)
    from routers.errors import RouterError
    from routers.guest import guest_image

    try:
        guest_image("frr")
    except RouterError as err:
        missing_from_setup(err)


def _run(results: Path, **kw) -> tuple[Path, dict]:
    from migrate.experiment.run import run
    from migrate.model.scenario import Scenario

    s = Scenario(rate_bps=RATE, frame_bytes=1500, duration_s=8, migrate_at_s=3, after_s=3, **kw)
    run_dir = run(s, results)
    return run_dir, json.loads((run_dir / "meta.json").read_text())


def _completed_and_forwarding(meta: dict) -> None:
    assert meta["status"] == "completed" and meta["failure_class"] is None, meta.get("failure")
    after = meta["after_migration"]
    assert after["forwarding"] is True and after["packets"] > 0, after


def _multifd_bytes(run_dir: Path) -> int:
    """QEMU's ram.multifd-bytes in the source's last query-migrate reply."""
    samples = [json.loads(x) for x in (run_dir / "qmp_samples.jsonl").read_text().splitlines()]
    last = [s for s in samples if s["side"] == "src"][-1]["reply"]
    assert last["status"] == "completed", last
    return int(last["ram"].get("multifd-bytes", 0))


def test_multifd_and_downtime_limit_are_effective_on_both_sides(tmp_path, no_leftovers):
    """Also VCPUS=2: a two-vCPU router, as QEMU reports it, through the same migration."""
    _ready()
    run_dir, meta = _run(tmp_path, multifd_channels=2, downtime_limit_ms=50, vcpus=2)
    _completed_and_forwarding(meta)
    assert meta["scenario"]["vcpus"] == meta["hypervisor"]["vcpus"] == 2
    assert meta["scenario"]["multifd_channels"] == 2 and meta["scenario"]["downtime_limit_ms"] == 50
    eff = meta["hypervisor"]["knobs_effective"]
    assert (eff["multifd"], eff["multifd_channels"], eff["downtime_limit_ms"]) == (True, 2, 50), eff
    assert (eff["multifd_dst"], eff["multifd_channels_dst"]) == (True, 2), eff
    caps = {c["capability"]: c["state"] for c in meta["hypervisor"]["migrate_capabilities_dst"]}
    assert caps["multifd"] is True
    assert meta["hypervisor"]["migrate_parameters"]["downtime-limit"] == 50
    # the guest's RAM went through the multifd channels, not the main stream
    assert _multifd_bytes(run_dir) > 1_000_000


def test_multifd_with_zstd_and_its_own_zero_page_scan(tmp_path, no_leftovers):
    _ready()
    run_dir, meta = _run(tmp_path, multifd_channels=2, multifd_compression="zstd", zero_page_detection="multifd")
    _completed_and_forwarding(meta)
    eff = meta["hypervisor"]["knobs_effective"]
    assert (eff["multifd"], eff["multifd_channels"], eff["multifd_compression"]) == (True, 2, "zstd"), eff
    assert eff["zero_page_detection"] == "multifd", eff  # QEMU 9.0's parameter, on the default stack
    assert eff["multifd_compression_dst"] == "zstd", eff
    assert _multifd_bytes(run_dir) > 0


def test_libvirt_parallel_migration(tmp_path):
    _ready("libvirtd")
    pytest.importorskip("libvirt", reason="libvirt-python not installed: run `make setup`")
    _, meta = _run(tmp_path, driver="libvirt", multifd_channels=2, downtime_limit_ms=50)
    _completed_and_forwarding(meta)
    lv = meta["hypervisor"]["libvirt"]
    assert "PARALLEL" in lv["migrate_flags"] and lv["migrate_params"]["parallel.connections"] == 2, lv
    eff = meta["hypervisor"]["knobs_effective"]
    assert eff is not None, meta["hypervisor"].get("knobs_effective_error")
    assert (eff["multifd"], eff["multifd_channels"], eff["downtime_limit_ms"]) == (True, 2, 50), eff
    # the destination cannot be asked under libvirt: absent, with the reason
    assert meta["hypervisor"]["knobs_effective_dst"] is None and meta["hypervisor"]["knobs_effective_dst_why"]
    # the source's query-migrate during the job: the RAM goes through the multifd channels
    during = lv["qemu_effective"]["src"]["migrate"]
    assert during["status"] == "active" and during["ram"]["multifd-bytes"] > 0, during


def test_two_axis_sweep_downtime_limit_by_multifd(tmp_path, no_leftovers, capsys):
    _ready()
    from migrate.cli.main import main

    results = tmp_path / "results"
    argv = ["sweep", "--rates", "10M", "--reps", "1", "--duration", "8", "--migrate-at", "3", "--after", "3",
            "--downtime-limit", "50,300", "--multifd", "1,2", "--seed", "1", "--results", str(results)]  # fmt: skip
    assert main(argv) == 0
    sweep_dir = Path(capsys.readouterr().out.strip().splitlines()[-1])
    meta = json.loads((sweep_dir / "meta.json").read_text())
    assert meta["grid"]["knobs"] == {"DOWNTIME_LIMIT": ["50", "300"], "MULTIFD": ["1", "2"]}
    with open(sweep_dir / "points.csv") as fh:
        points = list(csv.DictReader(fh))
    assert len(points) == 4, [p["series"] for p in points]
    seen = set()
    for p in points:
        asked = dict(kv.split("=") for kv in p["knobs"].split())
        assert p["n_completed"] == "1", (p["series"], p["n_runs"])
        # the point's QEMU reported what it asked for
        assert p["qemu_downtime_limit_ms"] == asked["DOWNTIME_LIMIT"], p
        assert (p["qemu_multifd"], p["qemu_multifd_channels"]) == ("True", asked["MULTIFD"]), p
        seen.add((asked["DOWNTIME_LIMIT"], asked["MULTIFD"]))
    assert seen == {("50", "1"), ("50", "2"), ("300", "1"), ("300", "2")}
    with open(sweep_dir / "runs.csv") as fh:
        runs = list(csv.DictReader(fh))
    assert {r["status"] for r in runs} == {"completed"} and all(r["qemu_multifd"] == "True" for r in runs)
