"""``make baseline ROLE=vm-tx,vm-rx,vm-vm``: the router as an end host (root, QEMU, the built frr image
with its traffic tools, crosstraffic/bin).  HV=kvm runs vrgen and vrsink in the guest over its
console shell, HV=criu in the router container (its own copies, entered with nsenter), HV=none
in the router's namespace (the bare host of seed 000's efficiency E);
IPv4 and IPv6, UDP with 1500 B frames and one bulk TCP flow, at 10 Mbit/s, one repetition of 1 s
each (the repetitions' statistics are unit-tested on synthetic rows).  It also covers the guest
as an end host as such: the console shell, the tools in the image, UDP both ways and TCP from
the guest.

What must hold, fixed before any run:
* every point measured (status ok), each configuration once per role;
* the traffic really starts or ends in the end host: B's sink sees one source, the end host's
  eth1 address, for ``vm-tx``; the end host's sink sees A's address for ``vm-rx``; for
  ``vm-vm`` (two routers) router 1's sink sees router 0's eth0 address, the one flow's only
  source (vrsink's per-source table, vrtcp sink's peer);
* UDP at 10 Mbit/s (833 packets/s of 1500 B, a small part of what the guest handles even under
  TCG; nothing else on the testbed): nothing is lost and the received rate is the offered one
  within 2 %; the summary carries E against the bare host and the IPv6/IPv4 ratio, both 1 within
  2 % at a rate that both deliver in full;
* TCP paced at 10 Mbit/s: every byte written is read before the sink is stopped (the drain
  watched the receiver), and the goodput over the sink's reads is within 20 % of the pacing
  rate (a 1 s flow: the initial window leaves unpaced, pacing counts the headers);
* one-way delay is absent where the guest's clock is involved (not the container's: the host's);
* nothing of the run is left (``no_leftovers``).

HV=xen (the seeds' own platform) in a test of its own: the router domU of one nested Xen host,
its console shell relayed by dom0 from a virtio-serial port, sending and receiving over IPv4, UDP
at 1 Mbit/s and TCP paced at it for 2 s, two configurations of one boot each (the same checks, but E:
the bare host is the first test's).  The nested host's CPU has no XSAVE under TCG
(migrate.drivers.xen.driver.TCG_CPU): with it, the domU's processes crashed or corrupted their
records when the machine was busy."""

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration._runs import frr_guest_image
from tests.integration.conftest import REPO, require_root_and

pytestmark = pytest.mark.integration

HVS = ("none", "kvm", "criu")
ROLES = ("vm-tx", "vm-rx", "vm-vm")
HOST = {"none": "RT0", "kvm": "VM", "criu": "CT"}  # the end host's name in a flow record
PEER = {"none": "RT1", "kvm": "VM1", "criu": "CT1"}  # ROLE=vm-vm's receiver, router 1
RATE_BPS = 10_000_000
#: HV=xen: the suite's rate for the nested Xen router (make migrate's default there), a flow of
#: 2 s; a domU under TCG sends 10 Mbit/s of 1500 B frames only ~97 % of the time asked
XEN_RATE_BPS = 1_000_000
TOLERANCE = 0.02  # received against offered, E and the IPv6/IPv4 ratio at a rate both deliver
TCP_TOLERANCE = 0.2  # TCP goodput against the pacing rate (see the module docstring)


def _sources(sink: dict) -> set[str]:
    """The source addresses of vrsink's per-source table ("ADDR:PORT" or "[ADDR]:PORT")."""
    return {f["src"].rsplit(":", 1)[0].strip("[]") for f in sink["flows"]}


def test_endhost_baseline_sends_and_receives_in_the_guest_and_the_bare_host(tmp_path, no_leftovers):
    require_root_and(
        "qemu-system-x86_64", "unshare", "nsenter", "irtt", "crosstraffic/bin/vrgen", "crosstraffic/bin/vrsink"
    )
    frr_guest_image()
    from routers.guest import ENDHOST_TOOLS, guest_image, has_tool

    absent = [t for t in ENDHOST_TOOLS if not has_tool(guest_image("frr"), t)]
    assert not absent, f"the frr guest image lacks {absent}: rebuild it with `make guest`"
    argv = [sys.executable, "-m", "migrate", "baseline", "--hv", ",".join(HVS), "--role", ",".join(ROLES),
            "--proto", "udp,tcp", "--ip", "both", "--sizes", "1500", "--rates", "10M", "--reps", "1", "--duration", "1",
            "--results", str(tmp_path)]  # fmt: skip
    res = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=600, check=False)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    run_dir = Path(res.stdout.strip().splitlines()[-1])
    rows = list(csv.DictReader((run_dir / "baseline.csv").open()))
    assert len(rows) == len(HVS) * len(ROLES) * 2 * 2, rows  # hv x role x proto x ip
    assert all(r["status"] == "ok" for r in rows), [r for r in rows if r["status"] != "ok"]
    assert {(r["hv"], r["role"]) for r in rows} == {(hv, role) for hv in HVS for role in ROLES}
    assert {r["routers"] for r in rows if r["role"] == "vm-vm"} == {"2"}, rows  # two end hosts

    _check_flows(run_dir, HOST, PEER)

    _check_rates(rows, RATE_BPS)
    for r in rows:
        assert (r["owd_median_ms"] == "") == (r["hv"] == "kvm" or r["proto"] == "tcp"), r

    summary = json.loads((run_dir / "summary.json").read_text())
    configs = [c for c in summary["configs"] if c["proto"] == "udp"]
    assert len(configs) == len(HVS) * len(ROLES) * 2 and len(summary["configs"]) == 2 * len(configs)
    for c in configs:
        assert c["efficiency"]["max_forwarded"] == pytest.approx(1.0, rel=TOLERANCE), c
        if c["ip"] == 6:
            (ratio,) = c["ipv6_over_ipv4"]
            assert ratio["rate_bps"] == RATE_BPS, ratio
            assert ratio["forwarded_bps"]["ratio"] == pytest.approx(1.0, rel=TOLERANCE), ratio
        else:
            assert "ipv6_over_ipv4" not in c
    assert "role" in res.stdout.splitlines()[1] and "v6/v4" in res.stdout, res.stdout
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["spec"]["roles"] == list(ROLES), meta["spec"]


def _check_rates(rows: list[dict[str, str]], rate_bps: int) -> None:
    """UDP: nothing lost, received the offered rate within TOLERANCE; TCP: loss and offered
    absent (not 0), goodput the pacing rate within TCP_TOLERANCE."""
    for r in rows:
        if r["proto"] == "tcp":
            assert r["loss_ratio"] == r["offered_bps"] == "", r  # absent, not 0
            assert float(r["forwarded_bps"]) == pytest.approx(rate_bps, rel=TCP_TOLERANCE), r
        else:
            assert float(r["loss_ratio"]) == 0.0, r
            assert float(r["forwarded_bps"]) == pytest.approx(rate_bps, rel=TOLERANCE), r


def _check_flows(run_dir: Path, hosts: dict[str, str], peers: dict[str, str] | None = None) -> None:
    """Each point's flow starts or ends in the end host named ``hosts[hv]`` (ROLE=vm-vm: from it
    to ``peers[hv]``), and its sink saw only the flow's true source; UDP: every packet arrived."""
    for point in sorted((run_dir / "points").glob("*/sweep-*")):
        record = json.loads((point / "point.json").read_text())
        key, flow = record["key"], record["flows"][0]
        sink = json.loads((point / flow["sink"]).read_text())
        gen = json.loads((point / flow["gen"]).read_text())
        host = hosts[key["hv"]]
        v = 0 if key["ip"] == 4 else 1
        if key["role"] == "vm-tx":
            assert (flow["from"], flow["to"]) == (host, "B"), flow
            expect = ["198.18.2.1", "2001:2:0:2::1"][v]  # the end host's eth1
        elif key["role"] == "vm-vm":
            assert peers is not None
            assert len(record["flows"]) == 1 and (flow["from"], flow["to"]) == (host, peers[key["hv"]]), record
            assert flow["dst"] == ["198.18.3.1", "2001:2:0:3::1"][v], flow  # router 1's eth0
            expect = ["198.18.1.1", "2001:2:0:1::1"][v]  # router 0's eth0, over the on-link route
        else:
            assert (flow["from"], flow["to"]) == ("A", host), flow
            expect = ["198.18.1.10", "2001:2:0:1::10"][v]  # A
            assert flow["dst"] == ["198.18.1.1", "2001:2:0:1::1"][v], flow
        if key["proto"] == "tcp":
            assert [p["addr"] for p in sink["peers"]] == [expect], (point.name, sink["peers"])
            assert sink["bytes"] == gen["bytes_written"] and gen["bytes_written"][0] > 0, (point.name, sink, gen)
            continue
        assert _sources(sink) == {expect}, (point.name, sink["flows"])
        assert gen["packets"] > 0 and sink["packets"] == gen["packets"], (point, gen["packets"], sink["packets"])


def test_the_xen_domu_sends_and_receives_through_its_console_relayed_by_dom0(tmp_path, no_leftovers):
    require_root_and("qemu-system-x86_64", "irtt", "crosstraffic/bin/vrgen", "crosstraffic/bin/vrsink")
    frr_guest_image()
    from routers.errors import RouterError
    from routers.xen_image import xen_image

    try:
        xen_image(verify=False)
    except RouterError as err:
        pytest.fail(f"HV=xen needs the nested Xen host image: {err}", pytrace=False)
    roles = ("vm-tx", "vm-rx")
    argv = [sys.executable, "-m", "migrate", "baseline", "--hv", "xen", "--role", ",".join(roles), "--proto",
            "udp,tcp", "--sizes", "1500", "--rates", "1M", "--reps", "1", "--duration", "2",
            "--results", str(tmp_path)]  # fmt: skip
    res = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=600, check=False)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    run_dir = Path(res.stdout.strip().splitlines()[-1])
    rows = list(csv.DictReader((run_dir / "baseline.csv").open()))
    assert {(r["role"], r["proto"]) for r in rows} == {(o, p) for o in roles for p in ("udp", "tcp")}, rows
    assert all(r["status"] == "ok" and r["hv"] == "xen" for r in rows), rows
    _check_flows(run_dir, {"xen": "VM"})
    _check_rates(rows, XEN_RATE_BPS)
    for r in rows:
        assert r["owd_median_ms"] == "", r  # the domU's clock is its own
    meta = json.loads((run_dir / "meta.json").read_text())
    for name, info in meta["configs"].items():
        assert info["routers"][0]["kind"] == "xen-nested", (name, info["routers"])
