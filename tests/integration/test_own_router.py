"""Routers the suite did not build, migrated like the built-in ones:

* profiles/debian-frr-cloudinit.toml: a Debian 13 disk image with FRR 10.3 made by the recipe
  routers/recipes/debian-frr-cloudinit, configured by cloud-init from a NoCloud seed the suite
  renders from the testbed;
* profiles/debian-bird-console.toml: a Debian 12 disk image with BIRD 1.6 made by the recipe
  routers/recipes/debian-bird-console, booted by UEFI (OVMF, systemd-boot), configured by
  commands the suite types on its serial console after logging in, here with BGP and BFD
  sessions to both peers, under DRIVER=libvirt (the console is a socket of the domain's, the
  overlay a disk both daemons' QEMU open).

One pre-copy run of each on the embedded testbed: the router boots from a per-run overlay (the
image is not written), is ready once the suite's probes cross it both ways (it prints no READY
marker of the suite's own), migrates, and gives the figures the built-in routers give."""

import hashlib
import json
from pathlib import Path

import pytest

from tests.integration._runs import run_short

pytestmark = pytest.mark.integration

PROFILE = Path(__file__).resolve().parents[2] / "profiles" / "debian-frr-cloudinit.toml"
CONSOLE_PROFILE = PROFILE.with_name("debian-bird-console.toml")
RATE = 10_000_000


def _profile_image(profile: Path = PROFILE) -> Path:
    """The profile's disk image as `make setup` built it; the test fails without it."""
    from routers.errors import RouterError
    from routers.profile_file import load_profile

    try:
        disk = load_profile(profile).image.disk
    except RouterError as err:
        pytest.fail(f"{err} (`make setup` builds it)", pytrace=False)
    assert disk is not None
    return Path(disk)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def test_cloud_init_frr_image_boots_forwards_and_migrates(tmp_path, no_leftovers):
    disk = _profile_image()
    before = _sha256(disk)
    run_dir, meta, summary = run_short(tmp_path, "precopy", RATE, lambda: None, router=str(PROFILE), mem_mib=512)
    assert meta["status"] == "completed", meta.get("failure")
    assert meta["verify"] == {"src_status": "postmigrate", "dst_status": "running"}
    image = meta["hypervisor"]["guest_image"]
    assert image["profile"] == str(PROFILE) and image["format"] == "qcow2" and image["config_method"] == "nocloud"
    assert meta["stack"]["router"]["requested"] == str(PROFILE)
    # ready by forwarding: the probe's first answered echo came after the profile's console marker
    actions = [json.loads(x) for x in (run_dir / "actions.jsonl").read_text().splitlines()]
    names = [a["action"] for a in actions]
    assert names.index("boot") < names.index("router-forwarding") < names.index("router-ready") < names.index("migrate")
    console = (run_dir / "console-R1.log").read_text(errors="replace")
    assert "VRMIG-ROUTER-CONFIGURED router=debian-frr" in console
    assert (run_dir / "router-user-data").read_text().startswith("#cloud-config")
    # the figures the built-in routers give
    pkt = summary["downtime_s"]["packets"]
    assert pkt is not None and 0 < pkt < 5, pkt
    link, qemu = summary["volume_bytes"]["link"], summary["volume_bytes"]["hypervisor"]
    assert qemu > 0 and abs(link - qemu) / qemu < 0.10, (link, qemu)
    assert meta["after_migration"]["forwarding"] is True
    rss = meta["hypervisor"]["router_rss"]
    assert rss["ready"]["qemu_rss_kib"] > 100_000 and rss["migration_start"]["qemu_rss_kib"] > 100_000, rss
    # the image itself was never written: the run booted from its own overlay
    assert _sha256(disk) == before


def test_console_configured_bird_image_peers_over_bgp_and_migrates(tmp_path, no_leftovers):
    disk = _profile_image(CONSOLE_PROFILE)
    before = _sha256(disk)
    run_dir, meta, summary = run_short(
        tmp_path,
        "precopy",
        RATE,
        lambda: None,
        router=str(CONSOLE_PROFILE),
        mem_mib=256,
        peering="bgp,bfd",
        driver="libvirt",
    )
    assert meta["status"] == "completed", meta.get("failure")
    assert meta["verify"]["dst_status"] == "running" and meta["verify"]["src_status"] == "absent", meta["verify"]
    image = meta["hypervisor"]["guest_image"]
    assert image["config_method"] == "console" and image["router"]["software"] == "bird"
    assert image["manifest"]["versions"]["bird"].startswith("1.6."), image["manifest"]["versions"]
    assert image["firmware"] == "uefi" and image["uefi"]["code"].endswith("OVMF_CODE_4M.fd"), image
    domain = (run_dir / "libvirt-domain.xml").read_text()
    assert '<loader readonly="yes" type="pflash">/usr/share/OVMF/OVMF_CODE_4M.fd</loader>' in domain
    assert "BdsDxe: starting" in (run_dir / "console-R1.log").read_text(errors="replace")  # OVMF booted it
    actions = [json.loads(x) for x in (run_dir / "actions.jsonl").read_text().splitlines()]
    names = [a["action"] for a in actions]
    assert names.index("boot") < names.index("router-console-config") < names.index("router-forwarding")
    migrate = next(a for a in actions if a["action"] == "migrate")
    assert "UNSAFE" in migrate["flags"], migrate  # one overlay file, opened by both hosts' QEMU
    typed = next(a for a in actions if a["action"] == "router-console-config")
    commands = (run_dir / "router-console-commands").read_text().splitlines()
    assert typed["lines"] == len([c for c in commands if c.strip()]) > 20, typed
    # BIRD runs the typed configuration: the marker only its success prints, both peers established
    console = (run_dir / "console-R1.log").read_text(errors="replace")
    assert "VRMIG-ROUTER-CONFIGURED router=debian-bird" in console
    assert set(meta["peering"]["established_ns"]) == {"A", "B"}, meta["peering"].get("established_ns")
    # the figures (the cross-traffic goes to B's /32, learned over BGP through BIRD)
    assert meta["after_migration"]["forwarding"] is True
    link, qemu = summary["volume_bytes"]["link"], summary["volume_bytes"]["hypervisor"]
    assert qemu > 0 and abs(link - qemu) / qemu < 0.10, (link, qemu)
    pkt = summary["downtime_s"]["packets"]
    bound = summary.get("qualifiers", {}).get("downtime_s.packets", {}).get("lower")
    assert (pkt is not None and 0 < pkt < 10) or (pkt is None and bound is not None and bound > 0), (pkt, bound)
    assert _sha256(disk) == before
