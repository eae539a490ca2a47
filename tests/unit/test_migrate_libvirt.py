"""DRIVER=libvirt without root or a daemon: domain XML, migration flags and parameters, daemon
configuration, the lazy binding import, scenario/CLI plumbing; parsers run on captured real
libvirt output (tests/fixtures/libvirt/)."""

import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from migrate.cli.main import build_parser, scenario_from_args
from migrate.core.errors import ConfigError, DependencyError
from migrate.drivers.base import load_driver
from migrate.drivers.guest_vm import GuestDisk, GuestVm, UefiFirmware, router_nics
from migrate.drivers.libvirt import daemon as lvd
from migrate.drivers.libvirt import flags as lf
from migrate.drivers.libvirt.domain_xml import domain_facts, domain_xml, with_console
from migrate.model.scenario import Scenario
from migrate.testbed import topology as topo
from tests.unit._libvirt_binding import assert_binding_has

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "libvirt"


def _xml(**kw):
    base = dict(
        name="vrmig-t", accel="tcg", mem_mib=256, vcpus=1, kernel=Path("/g/vmlinuz"), initrd=Path("/g/initrd.img"),
        cmdline="console=ttyS0 quiet", console=Path("/run/x/console-R1.log"), nic="virtio",
    )  # fmt: skip
    base.update(kw)
    return ET.fromstring(domain_xml(GuestVm(**base)))


def test_domain_xml_tcg_boots_the_router_image_with_fixed_macs_on_the_testbed_taps():
    dom = _xml()
    assert dom.get("type") == "qemu"
    assert dom.findtext("name") == "vrmig-t"
    assert (dom.find("memory").text, dom.find("memory").get("unit"), dom.findtext("vcpu")) == ("256", "MiB", "1")
    assert dom.find("os/type").get("machine") == "q35"
    assert (dom.findtext("os/kernel"), dom.findtext("os/initrd")) == ("/g/vmlinuz", "/g/initrd.img")
    assert dom.findtext("os/cmdline") == "console=ttyS0 quiet"
    assert dom.find("cpu").get("mode") == "custom" and dom.findtext("cpu/model") == "qemu64"
    nics = dom.findall("devices/interface")
    assert [n.get("type") for n in nics] == ["ethernet", "ethernet"]
    assert [(n.find("target").get("dev"), n.find("target").get("managed")) for n in nics] == [
        ("tapL", "no"),
        ("tapR", "no"),
    ]
    assert [n.find("mac").get("address") for n in nics] == [p.mac for p in topo.ROUTER_PORTS]
    assert all(n.find("model").get("type") == "virtio" and n.find("rom").get("enabled") == "no" for n in nics)
    serial = dom.find("devices/serial")
    assert serial.get("type") == "file" and serial.find("source").get("path") == "/run/x/console-R1.log"
    assert dom.find("devices/memballoon").get("model") == "none"


def test_domain_xml_kvm_and_e1000():
    dom = _xml(accel="kvm", nic="e1000", vcpus=2, mem_mib=512)
    assert dom.get("type") == "kvm" and dom.find("cpu").get("mode") == "host-passthrough"
    assert {n.find("model").get("type") for n in dom.findall("devices/interface")} == {"e1000"}
    assert dom.findtext("vcpu") == "2" and dom.findtext("memory") == "512"


@pytest.mark.parametrize(("kw", "msg"), [({"accel": "hvf"}, "accel"), ({"nic": "rtl8139"}, "NIC model")])
def test_domain_xml_rejects_unknown_values(kw, msg):
    with pytest.raises(ValueError, match=msg):
        _xml(**kw)


def test_router_nics_follow_topology():
    assert [(n.tap, n.mac) for n in router_nics()] == [(f"tap{p.segment}", p.mac) for p in topo.ROUTER_PORTS]


def test_with_console_redirects_serial_and_console_of_real_migratable_xml():
    xml = (FIX / "migratable_dest.xml").read_text()
    out = ET.fromstring(with_console(xml, Path("/r/console-R9.log")))
    paths = [s.get("path") for s in out.findall("devices/serial/source") + out.findall("devices/console/source")]
    assert paths == ["/r/console-R9.log", "/r/console-R9.log"]
    # everything else (machine, MACs, taps) unchanged: libvirt checks the guest ABI
    assert domain_facts(with_console(xml, Path("/r/c.log"))) == domain_facts(xml)
    assert domain_facts(xml) == {
        "type": "qemu",
        "machine": "pc-q35-7.2",
        "emulator": "/usr/bin/qemu-system-x86_64",
        "nics": "tapL=52:54:00:c6:12:01,tapR=52:54:00:c6:12:02",
    }


def test_with_console_needs_a_file_serial():
    with pytest.raises(ValueError, match="serial"):
        with_console("<domain><devices/></domain>", Path("/c.log"))


def test_a_typed_console_is_a_bound_socket_logging_to_the_console_file_and_moves_with_the_domain():
    sock = Path("/run/vrmig/t/con-R1.sock")
    dom = _xml(kernel=None, initrd=None, cmdline="", disks=(GuestDisk(Path("/run/vrmig/t/d.qcow2"), "qcow2"),),
               console_socket=sock)  # fmt: skip
    serial = dom.find("devices/serial")
    assert serial.get("type") == "unix" and serial.find("source").attrib == {"mode": "bind", "path": str(sock)}
    assert serial.find("log").attrib == {"file": "/run/x/console-R1.log", "append": "on"}
    assert dom.find("os/boot").get("dev") == "hd" and dom.find("os/kernel") is None
    assert dom.find("os/loader") is None  # BIOS unless the VM has UEFI firmware
    fw = UefiFirmware(Path("/usr/share/OVMF/OVMF_CODE_4M.fd"), Path("/run/vrmig/t/router-efivars.fd"))
    uefi = _xml(kernel=None, initrd=None, cmdline="", disks=(GuestDisk(Path("/d.qcow2"), "qcow2"),), firmware=fw)
    assert uefi.find("os/loader").attrib == {"readonly": "yes", "type": "pflash"}
    assert uefi.find("os/loader").text == str(fw.code) and uefi.find("os/nvram").text == str(fw.vars)
    xml = ET.tostring(dom, encoding="unicode")
    out = ET.fromstring(with_console(xml, Path("/r/console-R2.log"), Path("/run/vrmig/t/con-R2.sock")))
    assert out.find("devices/serial/source").get("path") == "/run/vrmig/t/con-R2.sock"
    assert out.find("devices/serial/log").get("file") == "/r/console-R2.log"
    with pytest.raises(ValueError, match="socket serial console"):
        with_console(xml, Path("/r/console-R2.log"))  # the source's socket is still bound


def test_migrate_flags_map_mode_and_knobs():
    assert lf.flag_names(lf.migrate_flags(Scenario())) == ["LIVE", "PEER2PEER"]
    assert lf.flag_names(lf.migrate_flags(Scenario(), disks="shared")) == ["LIVE", "PEER2PEER", "UNSAFE"]
    assert lf.flag_names(lf.migrate_flags(Scenario(), disks="copied")) == ["LIVE", "PEER2PEER", "NON_SHARED_INC"]
    assert lf.flag_names(lf.migrate_flags(Scenario(mode="stopcopy"))) == ["PEER2PEER"]
    s = Scenario(auto_converge=True, xbzrle=True, postcopy=True)
    assert lf.flag_names(lf.migrate_flags(s)) == ["LIVE", "PEER2PEER", "COMPRESSED", "AUTO_CONVERGE", "POSTCOPY"]


def test_flag_values_match_the_binding():
    from migrate.drivers.libvirt import driver as drv

    assert_binding_has(
        {f"VIR_MIGRATE_{name}": bit for bit, name in lf.FLAG_NAMES.items()}
        | {
            "VIR_MIGRATE_PARAM_URI": lf.PARAM_URI,
            "VIR_MIGRATE_PARAM_DEST_XML": lf.PARAM_DEST_XML,
            "VIR_MIGRATE_PARAM_BANDWIDTH": lf.PARAM_BANDWIDTH,
            "VIR_MIGRATE_PARAM_COMPRESSION": lf.PARAM_COMPRESSION,
            "VIR_DOMAIN_EVENT_ID_JOB_COMPLETED": drv.EVENT_JOB_COMPLETED,
            "VIR_DOMAIN_EVENT_ID_MIGRATION_ITERATION": drv.EVENT_MIGRATION_ITERATION,
            "VIR_DOMAIN_EVENT_ID_LIFECYCLE": drv.EVENT_LIFECYCLE,
            "VIR_DOMAIN_XML_MIGRATABLE": drv.XML_MIGRATABLE,
            "VIR_DOMAIN_JOB_STATS_COMPLETED": drv.JOB_STATS_COMPLETED,
        }
    )


def test_migrate_params():
    p = lf.migrate_params(Scenario(), "tcp://198.19.255.2", "<domain/>")
    assert p == {"migrate_uri": "tcp://198.19.255.2", "destination_xml": "<domain/>"}
    p = lf.migrate_params(Scenario(max_bandwidth_bps=400_000_000, xbzrle=True), "tcp://x", None)
    assert p == {"migrate_uri": "tcp://x", "bandwidth": 48, "compression": "xbzrle"}  # 400 Mbit/s = 47.7 MiB/s
    assert lf.bandwidth_mib_s(1_000) == 1  # libvirt's unit is 1 MiB/s: never 0 (= unlimited)


def test_progress_reply_from_captured_job_stats():
    samples = [json.loads(x) for x in (FIX / "jobstats_precopy_10M.jsonl").read_text().splitlines()]
    replies = [lf.progress_reply(s["stats"]) for s in samples]
    assert replies[0]["status"] == "none"  # polled before the job began
    active = [r for r in replies if r["status"] == "active"]
    assert active, "no running-job sample in the fixture"
    transferred = [r["ram"]["transferred"] for r in active]
    assert transferred == sorted(transferred) and transferred[-1] > 0
    assert all(r["ram"]["total"] in (0, 268967936) for r in active)


def test_daemon_config_files():
    conf = lvd.libvirtd_conf(Path("/run/vrmig/p/libvirt-R1/sock"), "198.19.255.1", "uuid-1")
    assert 'unix_sock_dir = "/run/vrmig/p/libvirt-R1/sock"' in conf
    assert 'listen_addr = "198.19.255.1"' in conf and 'host_uuid = "uuid-1"' in conf
    assert "listen_tls = 0" in conf and "listen_tcp = 1" in conf
    q = lvd.qemu_conf("198.19.255.2")
    assert 'migration_host = "198.19.255.2"' in q and 'security_driver = "none"' in q
    assert 'stdio_handler = "file"' in q and "namespaces = [ ]" in q


def test_daemon_config_with_tls_listens_for_tls_only():
    conf = lvd.libvirtd_conf(Path("/run/libvirt"), "198.19.255.2", "uuid-2", tls_dir="/etc/libvirt/pki")
    lines = conf.splitlines()
    assert "listen_tls = 1" in lines and "listen_tcp = 0" in lines and 'tls_port = "16514"' in lines
    assert 'ca_file = "/etc/libvirt/pki/cacert.pem"' in lines and 'key_file = "/etc/libvirt/pki/serverkey.pem"' in lines
    assert not any(x.startswith(("auth_tcp", "tcp_port", "tls_no_verify")) for x in lines), conf


def test_account_overlays_only_when_the_host_lacks_the_qemu_account(monkeypatch):
    def missing(name):
        raise KeyError(name)

    monkeypatch.setattr(lvd.pwd, "getpwnam", missing)
    monkeypatch.setattr(lvd.grp, "getgrnam", missing)
    extra = lvd.account_overlays()
    assert extra["/etc/passwd"].startswith("libvirt-qemu:x:") and extra["/etc/group"].startswith("libvirt-qemu:x:")
    monkeypatch.setattr(lvd.pwd, "getpwnam", lambda n: object())
    monkeypatch.setattr(lvd.grp, "getgrnam", lambda n: object())
    assert lvd.account_overlays() == {}


def test_launch_script_takes_paths_as_arguments():
    assert 'mount --bind "${1%=*}" "${1##*=}"' in lvd._LAUNCH and 'exec "$@" --listen' in lvd._LAUNCH
    assert [t for _, t in lvd.MOUNTS] == [
        "/etc/libvirt",
        "/run/libvirt",
        "/var/lib/libvirt",
        "/var/cache/libvirt",
        "/var/log/libvirt",
    ]


def test_daemon_log_tail_quotes_a_real_start_failure(tmp_path):
    class Reg:
        dir = tmp_path

    d = lvd.NamespacedLibvirtd("R1", "ns-R1", "198.19.255.1", Reg(), tmp_path)
    (tmp_path / "libvirtd-R1.stderr").write_text((FIX / "libvirtd_no_qemu_user.stderr").read_text())
    tail = d.log_tail()
    assert "Failed to parse user 'libvirt-qemu'" in tail and "Driver state initialization failed" in tail
    assert d.uri == f"qemu+unix:///system?socket={tmp_path}/libvirt-R1/sock/libvirt-sock"
    assert d.peer_uri == "qemu+tcp://198.19.255.1:16509/system"


def test_scenario_driver_validation_and_name():
    assert Scenario().driver == "qmp"
    assert Scenario(driver="libvirt", rate_bps=10_000_000).name == "kvm-libvirt-precopy-10M-1500"
    assert Scenario(rate_bps=10_000_000).name == "kvm-precopy-10M-1500"
    with pytest.raises(ConfigError, match="DRIVER='xl'"):
        Scenario(driver="xl")


def test_cli_driver_flag():
    args = build_parser().parse_args(["run", "--driver", "libvirt"])
    assert scenario_from_args(args).driver == "libvirt"
    assert scenario_from_args(build_parser().parse_args(["run"])).driver == "qmp"


def test_driver_registry_selects_by_hv_and_driver():
    from migrate.drivers.kvm.driver import KvmDriver

    assert load_driver("kvm") is KvmDriver and load_driver("kvm", "qmp") is KvmDriver
    assert load_driver("kvm", "libvirt").__name__ == "LibvirtDriver"
    with pytest.raises(ConfigError, match="DRIVER='virsh'"):
        load_driver("kvm", "virsh")


def test_missing_binding_breaks_nothing_else(monkeypatch):
    monkeypatch.setitem(sys.modules, "libvirt", None)  # import libvirt -> ImportError
    from migrate.drivers.libvirt import driver as drv

    with pytest.raises(DependencyError, match=r"make setup"):
        drv.import_libvirt()
    with pytest.raises(DependencyError, match="libvirt"):
        drv.LibvirtDriver.preflight(Scenario(driver="libvirt"))
    assert load_driver("kvm").__name__ == "KvmDriver"


def test_domain_is_registered_with_its_daemon_uri_and_pid_file(tmp_path, monkeypatch):
    """libvirt starts QEMU with a cleared environment (no VRMIG_RUN_PREFIX) as its own child, so
    the run records the domain: name (carrying the run's prefix), daemon URI and the pid file
    the daemon writes; teardown and the reaper of a killed orchestrator use exactly these."""
    from migrate.core import registry as regmod

    monkeypatch.setattr(regmod, "STATE_ROOT", tmp_path / "state")
    reg = regmod.Registry("vm0d0a01")
    reg.open(reaper=False)
    d = lvd.NamespacedLibvirtd("R2", "vm0d0a01-R2", "198.19.255.2", reg, tmp_path)
    d.register_domain("vrmig-vm0d0a01")
    dom = json.loads(reg.state_file.read_text())["domains"]
    assert dom == [{"name": "vrmig-vm0d0a01", "uri": d.uri, "pidfile": str(d.pidfile("vrmig-vm0d0a01"))}]
    assert dom[0]["pidfile"] == f"{reg.dir}/libvirt-R2/run/qemu/vrmig-vm0d0a01.pid"
    assert reg.teardown() == []


def test_domain_xml_boots_disks_through_the_bios_without_a_kernel():
    from migrate.drivers.guest_vm import GuestDisk

    disks = (GuestDisk(Path("/r/disk.qcow2"), "qcow2"), GuestDisk(Path("/r/seed.img"), "raw", readonly=True))
    dom = _xml(kernel=None, initrd=None, cmdline="", disks=disks)
    assert dom.find("os/kernel") is None and dom.find("os/boot").get("dev") == "hd"
    got = [
        (d.find("source").get("file"), d.find("driver").get("type"), d.find("target").get("dev"), d.find("readonly"))
        for d in dom.findall("devices/disk")
    ]
    assert [g[:3] for g in got] == [("/r/disk.qcow2", "qcow2", "vda"), ("/r/seed.img", "raw", "vdb")]
    assert got[0][3] is None and got[1][3] is not None
