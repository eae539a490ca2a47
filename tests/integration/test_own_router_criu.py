"""An operator's container image as the router under HV=criu: profiles/debian-frr-oci.toml, the
OCI image of the recipe routers/recipes/debian-frr-oci (Debian 13, FRR 10.3; `make images`).

One stop-and-copy run at RATE=10M on the embedded testbed (CRIU's mode that needs no soft-dirty
page tracking, so it runs on every kernel CRIU supports): the image is unpacked, the rendered
frr.conf written into R1's and R2's copies, the image's entry point started as PID 1, the router
ready once the suite's probes cross it, dumped, restored on R2 and measured like the built-in
routers; SIGTERM to the restored PID 1 then stops FRR by its own script."""

import json
from pathlib import Path

import pytest

from tests.integration._runs import run_short
from tests.integration.conftest import missing_from_setup, require_root_and

pytestmark = pytest.mark.integration

PROFILE = Path(__file__).resolve().parents[2] / "profiles" / "debian-frr-oci.toml"
RATE = 10_000_000
WORK_DIRS = Path("/dev/shm")


def _require() -> None:
    """Root, the host tools, criu and the profile's built OCI image (`make setup`)."""
    from migrate.core.errors import DependencyError
    from migrate.drivers.criu.tool import locate
    from routers.errors import RouterError
    from routers.oci_image import image_config
    from routers.profile_file import load_profile

    require_root_and("unshare", "umoci", "iptables-restore", "irtt")
    try:
        locate()
        prof = load_profile(PROFILE)
        image_config(prof.image.oci, prof.image.oci_tag)
    except (DependencyError, RouterError) as err:
        missing_from_setup(err)


def test_oci_frr_image_starts_forwards_migrates_and_stops(tmp_path, no_leftovers):
    _require()
    before = set(WORK_DIRS.glob("vrmig-*-criu"))
    run_dir, meta, summary = run_short(tmp_path, "stopcopy", RATE, lambda: None, router=str(PROFILE), hv="criu")
    assert meta["status"] == "completed", meta.get("failure")
    verify = meta["verify"]
    assert verify["src_status"] == "gone" and verify["dst_status"] == "running", verify
    assert verify["dst_peers_in_R2"] == {"eth0": True, "eth1": True}, verify
    # the image record: the layout, its tag and digest, the recipe's package versions
    image = meta["hypervisor"]["guest_image"]
    assert image["profile"] == str(PROFILE) and image["kind"] == "container", image
    assert image["oci"]["tag"] == "10.3" and image["oci"]["digest"].startswith("sha256:"), image["oci"]
    assert image["versions"]["frr"].startswith("10.3"), image["versions"]
    assert (image["config_method"], image["config_path"]) == ("file", "/etc/frr/frr.conf")
    # configured by the file, started by the image's entry point, ready by forwarding
    assert "interface eth1" in (run_dir / "router-frr.conf").read_text()
    actions = [json.loads(x) for x in (run_dir / "actions.jsonl").read_text().splitlines()]
    names = [a["action"] for a in actions]
    assert names.index("boot") < names.index("router-staged") < names.index("router-forwarding")
    assert names.index("router-forwarding") < names.index("router-ready") < names.index("migrate")
    console = (run_dir / "console-R1.log").read_text(errors="replace")
    assert "VRMIG-CT-EXEC /usr/local/sbin/vrmig-frr-start" in console, console
    # FRR started by the image's own init script: its last start line is in R1's console, or,
    # when it came after R1's console was last read, in R2's (the console file is in the rootfs
    # CRIU carries to R2, and R2's is read at the end of the run), so the two together hold it
    both = console + (run_dir / "console-R2.log").read_text(errors="replace")
    assert "Started watchfrr." in both, both
    # the figures the built-in routers give
    pkt = summary["downtime_s"]["packets"]
    assert pkt is not None and 0 < pkt < 5, pkt
    assert summary["duration_s"]["link"] > 0 and summary["duration_s"]["hypervisor"] > 0, summary["duration_s"]
    link, criu = summary["volume_bytes"]["link"], summary["volume_bytes"]["hypervisor"]
    assert criu > 1_000_000 and abs(link - criu) / criu < 0.10, (link, criu)
    assert meta["after_migration"]["forwarding"] is True
    # SIGTERM to the restored PID 1 (vrmig-frr-start) stopped FRR and ended the container
    stopped = [a for a in actions if a["action"] == "router-stopped"]
    assert [(a["host"], a["signal"]) for a in stopped] == [("R2", "SIGTERM")], stopped
    assert set(WORK_DIRS.glob("vrmig-*-criu")) <= before  # unpacked image and both copies removed
