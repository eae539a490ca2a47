"""HV=xen: parsing of xl's output (real captures in tests/fixtures/xen) and the driver's pure parts."""

import json
from pathlib import Path

import pytest

from analysis.hypervisors.xen import exit_status, load_xen, xen_figures, xl_phases
from analysis.metrics.window import migration_window
from migrate.core.errors import ConfigError
from migrate.drivers.xen.driver import host_qemu_argv
from migrate.drivers.xen.xl import domu_config, parse_xl_info, parse_xl_list
from migrate.model.scenario import Scenario

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "xen"


def _jsonl(name):
    return [json.loads(line) for line in (FIX / name).read_text().splitlines() if line.strip()]


def _run(kind):
    lines = _jsonl(f"xen_log-{kind}.jsonl")
    window = migration_window(_jsonl(f"actions-{kind}.jsonl"), [], [], "precopy")
    return lines, window


def test_completed_run_figures():
    lines, window = _run("completed-128M")
    meta = {"scenario": {"mem_mib": 128}, "hypervisor": {"xen_guest_type": "pvh", "nested": True}}
    fig = xen_figures(lines, {"dom0_mig_tx_bytes": 150_000_000}, window, meta)
    assert fig.status == "completed"
    # suspended on R1 ("guest has suspended") -> the earlier of R2's "Domain started successsfully"
    # and R1's "Target reports successful startup" (R2's channel delivered ~0.27 s later here)
    assert fig.downtime_s == pytest.approx(4.253, abs=0.01)
    assert fig.xen["resumed_dst_line_ns"] - fig.xen["resumed_src_line_ns"] == pytest.approx(0.268e9, abs=0.01e9)
    # "Saving to migration stream" -> "Migration successful"
    assert fig.total_time_s == pytest.approx(231.77, abs=0.05)
    assert fig.ram_transferred_bytes == 150_000_000
    assert fig.ram_total_bytes == 128 * 2**20
    assert fig.command_to_end_s == pytest.approx(238.73, abs=0.05)
    assert fig.xen["xl_exit_status"] == 0 and fig.xen["nested"] is True
    assert fig.xen["xen_guest_type"] == "pvh"


def test_completed_run_phases_in_order():
    lines, window = _run("completed-128M")
    phases = [p["phase"] for p in xl_phases(lines, window.migrate_ns)]
    order = [("stream-start", "suspend-request"), ("suspend-request", "suspended"), ("suspended", "permission-given")]
    order += [("permission-got", "started"), ("started", "successful")]
    for a, b in order:
        assert phases.index(a) < phases.index(b)
    assert "ready" in phases and "restore-complete" in phases


def test_timeout_run_has_no_figures_but_the_status():
    lines, window = _run("timeout")
    fig = xen_figures(lines, {}, window, {"scenario": {"mem_mib": 256}})
    assert exit_status(lines) == 143  # xl killed by the driver after MIGRATE_TIMEOUT
    assert fig.status == "failed"
    assert fig.downtime_s is None and fig.total_time_s is None
    assert any("suspended" in n for n in fig.xen["notes"])
    assert window.end_status == "failed"


def test_no_data():
    assert xen_figures([], {}, None) is None


def test_load_xen_notes_missing(tmp_path):
    notes = []
    assert load_xen(tmp_path, notes) == ([], {})
    assert notes == ["xen_log.jsonl missing"]


def test_parse_xl_list_captured():
    doms = parse_xl_list((FIX / "xl-list.txt").read_text())
    assert doms["vrmig-router"] == {"id": 1, "mem_mib": 256, "vcpus": 1, "state": "------", "time_s": 0.8}
    assert doms["Domain-0"]["state"] == "r-----"


def test_parse_xl_info():
    info = parse_xl_info("xen_version            : 4.17.7\nvirt_caps              : pv hvm hap gnttab-v1\n")
    assert info == {"xen_version": "4.17.7", "virt_caps": "pv hvm hap gnttab-v1"}


def test_domu_config_is_pvh_with_router_macs():
    cfg = domu_config("/k", "/i", "console=hvc0", mem_mib=256)
    assert 'type = "pvh"' in cfg and "memory = 256" in cfg and 'tsc_mode = "native"' in cfg
    assert "mac=52:54:00:c6:12:01,bridge=xenbrL" in cfg and "mac=52:54:00:c6:12:02,bridge=xenbrR" in cfg


def test_pv_guest_is_refused_with_the_reason():
    with pytest.raises(ConfigError, match=r"shadow paging.*XEN_GUEST=pvh"):
        Scenario(hv="xen", xen_guest="pv")


def test_stopcopy_refused_for_xen():
    with pytest.raises(ConfigError, match="precopy"):
        Scenario(hv="xen", mode="stopcopy")


def _argv(**kw):
    base = dict(name="n", accel="tcg", mem_mib=1664, xen=Path("/x/xen.elf"), kernel=Path("/x/k"),
                initrd=Path("/x/i"), dom0_args="vrmig.addr=198.19.255.1/30", console=Path("/r/c.log"),
                ctl=Path("/r/ctl"), logport=Path("/r/log"), qmp=Path("/r/q"), nic="virtio",
                macs=("52:54:00:c6:31:01", "52:54:00:c6:31:02", "52:54:00:c6:31:03"))  # fmt: skip
    return host_qemu_argv(**{**base, **kw})


def test_host_argv_three_taps_and_no_commas():
    argv = _argv()
    assert argv[argv.index("-cpu") + 1] == "max,xsave=off"  # TCG: no XSAVE (driver.TCG_CPU)
    assert argv[argv.index("-initrd") + 1] == "/x/k console=hvc0 vrmig.addr=198.19.255.1/30,/x/i"
    taps = [a for a in argv if a.startswith("tap,")]
    assert [t.split("ifname=")[1].split(",")[0] for t in taps] == ["tapL", "tapR", "tapM"]
    assert "smap=0 smep=0" in argv[argv.index("-append") + 1]
    with pytest.raises(ConfigError, match="commas"):
        _argv(dom0_args="a=1,2")


def test_host_argv_offers_the_domus_shell_on_a_third_virtio_serial_port():
    """make baseline ROLE=vm-tx HV=xen: the port dom0 relays to the domU's console, beside the
    agent's two; without the agent's ports there is no virtio-serial bus for it."""
    assert "vrmig.shell" not in " ".join(_argv())
    argv = _argv(shell=Path("/r/sh"))
    ports = [argv[i + 1] for i, a in enumerate(argv) if a == "-device" and argv[i + 1].startswith("virtserialport")]
    assert ports[-1] == "virtserialport,chardev=sh,name=vrmig.shell"
    assert "socket,id=sh,path=/r/sh,server=on,wait=off" in argv
    with pytest.raises(ValueError, match="beside the agent"):
        _argv(shell=Path("/r/sh"), ctl=None, logport=None)


def test_host_argv_kvm_uses_host_cpu():
    argv = _argv(accel="kvm")
    assert argv[argv.index("-cpu") + 1] == "host"


def test_host_argv_on_a_lab_tunnels_the_migration_nic_over_udp():
    """A lab's nested host: the segment NICs stay taps, the migration NIC is QEMU's UDP socket
    backend from this host's migration address to the peer's (nothing to change on the host)."""
    argv = _argv(mig_udp=("198.19.255.1:47990", "198.19.255.2:47990"))
    netdevs = [argv[i + 1] for i, a in enumerate(argv) if a == "-netdev"]
    assert [n.split(",")[0] for n in netdevs] == ["tap", "tap", "socket"]
    assert netdevs[2] == "socket,id=n2,udp=198.19.255.2:47990,localaddr=198.19.255.1:47990"
    assert "tapM" not in " ".join(argv)
