"""Every user-facing parameter: one clear line on stderr naming it, exit != 0, nothing created.
The bad-input table of docs/bad-input.md is generated from BAD_INPUTS
(``python -m tests.unit.test_bad_input_matrix``)."""

import os
import sys

import pytest

from migrate.cli.main import main

BAD_INPUTS = [
    ("HV", ["run", "--hv", "vmware"]),
    ("DRIVER", ["run", "--driver", "vmware"]),
    ("MODE", ["run", "--mode", "teleport"]),
    ("RATE", ["run", "--rate", "fast"]),
    ("RATE", ["run", "--rate", "-5M"]),
    ("SIZE", ["run", "--size", "63"]),
    ("SIZE", ["run", "--size", "jumbo"]),
    ("IP", ["run", "--ip", "5"]),
    ("DURATION", ["run", "--duration", "0"]),
    ("MIGRATE_AT", ["run", "--migrate-at", "30", "--duration", "20"]),
    ("AFTER", ["run", "--after", "soon"]),
    ("SAMPLE_MS", ["run", "--sample-ms", "0"]),
    ("PROBE_MS", ["run", "--probe-ms", "5000"]),
    ("MEM", ["run", "--mem", "16"]),
    ("VCPUS", ["run", "--vcpus", "0"]),
    ("VCPUS", ["run", "--vcpus", "2", "--hv", "criu"]),
    ("ROUTER", ["run", "--router", "quagga"]),
    ("ROUTER", ["run", "--router", "frr@9.1"]),
    ("NIC", ["run", "--nic", "rtl8139"]),
    ("ACCEL", ["run", "--accel", "hvf"]),
    ("GEN", ["run", "--gen", "pktgen"]),
    ("TRAFFIC", ["run", "--traffic", "quic:4"]),
    ("TRAFFIC", ["run", "--traffic", "tcp:0"]),
    ("TRAFFIC", ["run", "--traffic", "tcp:65"]),
    ("TRAFFIC", ["run", "--traffic", "tcp:2,cc=vegass"]),
    ("TRAFFIC", ["run", "--traffic", "tcp:2,dir=ba"]),
    ("TRAFFIC", ["run", "--traffic", "rr:2"]),
    ("TRAFFIC", ["run", "--traffic", "tcp:2", "--rate", "10M"]),
    ("TRAFFIC", ["run", "--traffic", "udp:257"]),
    ("TRAFFIC", ["run", "--traffic", "udp,sizes=64:7/570:4/9000:1"]),
    ("TRAFFIC", ["run", "--traffic", "udp,sizes=imix", "--size", "200"]),
    ("TRAFFIC", ["run", "--traffic", "udp,sizes=64:1/1518:1", "--ip", "6"]),
    ("MIGLINK", ["run", "--miglink", "1k"]),
    ("MIGLINK", ["run", "--miglink", "fast"]),
    ("MIGRATE_TIMEOUT", ["run", "--migrate-timeout", "0"]),
    ("BOOT_TIMEOUT", ["run", "--boot-timeout", "0"]),
    ("XEN_MIG_MTU", ["run", "--hv", "xen", "--xen-mig-mtu", "100"]),
    ("TESTBED", ["run", "--testbed", "no-such-lab.toml"]),
    ("FAULT", ["run", "--fault", "meteor"]),
    ("CRIU_HOST", ["run", "--hv", "criu", "--criu-host", "cloud"]),
    ("CRIU_HOST", ["run", "--hv", "kvm", "--criu-host", "vm"]),
    ("CRIU_REJOIN_MCAST", ["run", "--hv", "kvm", "--criu-rejoin-mcast", "1"]),
    ("CRIU_REJOIN_MCAST", ["run", "--hv", "criu", "--criu-rejoin-mcast", "maybe"]),
    ("RIB_ROUTES", ["run", "--router", "bird", "--rib-routes", "-1"]),
    ("RIB_ROUTES", ["run", "--router", "frr", "--rib-routes", "1000"]),
    ("PEERING", ["run", "--peering", "rip"]),
    ("PEERING", ["run", "--peering", "bgp,bgp"]),
    ("PEERING", ["run", "--peering", "bfd"]),
    ("PEERING", ["run", "--peering", "bgp", "--router", "xorp"]),
    ("PEERING", ["run", "--peering", "bgp", "--hv", "openvz"]),
    ("PEERING", ["run", "--peering", "ospf,bfd"]),
    ("BFD", ["run", "--peering", "bgp,bfd", "--bfd", "5x3"]),
    ("BFD", ["run", "--peering", "bgp,bfd", "--bfd", "50x1"]),
    ("BFD", ["run", "--peering", "bgp,bfd", "--bfd", "fast"]),
    ("BGP_HOLD", ["run", "--peering", "bgp", "--bgp-hold", "2"]),
    ("OSPF_DEAD", ["run", "--peering", "ospf", "--ospf-dead", "1"]),
    ("PEER_DAEMON", ["run", "--peering", "bgp", "--peer-daemon", "quagga"]),
    ("PEER_DAEMON", ["run", "--peer-daemon", "frr"]),
    ("DIRTY", ["run", "--dirty", "0"]),
    ("DIRTY", ["run", "--dirty", "fast"]),
    ("DIRTY", ["run", "--dirty", "200"]),
    ("DIRTY", ["run", "--dirty", "30", "--hv", "criu"]),
    ("CHURN", ["run", "--churn", "-1", "--peering", "bgp"]),
    ("CHURN", ["run", "--churn", "many", "--peering", "bgp"]),
    ("CHURN", ["run", "--churn", "100"]),
    ("CHURN", ["run", "--churn", "9000", "--peering", "bgp"]),
    ("CHURN", ["run", "--churn", "10", "--peering", "bgp", "--peer-daemon", "frr"]),
    ("DOWNTIME_LIMIT", ["run", "--downtime-limit", "soon"]),
    ("DOWNTIME_LIMIT", ["run", "--hv", "criu", "--downtime-limit", "50"]),
    ("MIGBW", ["run", "--max-bandwidth", "fast"]),
    ("AUTO_CONVERGE", ["run", "--auto-converge", "maybe"]),
    ("MULTIFD", ["run", "--multifd", "300"]),
    ("MULTIFD", ["run", "--multifd", "1,4"]),
    ("MULTIFD", ["run", "--multifd", "2", "--postcopy", "1"]),
    ("MULTIFD", ["run", "--multifd", "2", "--xbzrle", "1"]),
    ("MULTIFD_COMPRESSION", ["run", "--multifd-compression", "zstd"]),
    ("MULTIFD_COMPRESSION", ["run", "--multifd", "2", "--multifd-compression", "lz4"]),
    ("POSTCOPY_PREEMPT", ["run", "--postcopy-preempt", "1"]),
    ("ANNOUNCE", ["run", "--announce", "50,550"]),
    ("ANNOUNCE", ["run", "--announce", "50,550,5,0"]),
    ("XBZRLE_CACHE", ["run", "--xbzrle", "1", "--xbzrle-cache", "3M"]),
    ("XBZRLE_CACHE", ["run", "--xbzrle-cache", "64M"]),
    ("CPU_THROTTLE", ["run", "--auto-converge", "1", "--cpu-throttle", "0,10"]),
    ("CPU_THROTTLE", ["run", "--cpu-throttle", "20,10"]),
    ("XBZRLE", ["run", "--xbzrle", "2"]),
    ("POSTCOPY", ["run", "--postcopy", "maybe"]),
    ("ZERO_PAGE", ["run", "--zero-page", "scan"]),
    ("DIRTY_LIMIT", ["run", "--mode", "stopcopy", "--dirty-limit", "100"]),
    ("SWITCHOVER_BW", ["run", "--switchover-bandwidth", "fast"]),
    ("QEMU", ["run", "--qemu", "ten"]),
    ("QEMU", ["run", "--qemu", "10.0", "--hv", "criu"]),
    ("QEMU_FIRMWARE", ["run", "--qemu", "10.0", "--qemu-firmware", "/usr/share/qemu"]),
    ("LIBVIRT", ["run", "--libvirt", "system"]),
    ("LIBVIRT", ["run", "--driver", "libvirt", "--libvirt", "xx"]),
    ("METRICS", ["run", "--metrics", "no-such-directory/metrics.prom"]),
    ("METRICS", ["run", "--metrics", "."]),
    ("METRICS", ["run", "--metrics", "/dev/null"]),
    ("PLOT_FORMATS", ["run", "--plot-formats", "jpeg"]),
    ("PLOT_FORMATS", ["report", "--plot-formats", "png,gif", "results"]),
    ("REPS", ["sweep", "--rates", "100M", "--sizes", "1500", "--reps", "0"]),
    ("RATES", ["sweep", "--rates", "100M,fast", "--sizes", "1500", "--reps", "2"]),
    ("RATES", ["sweep", "--rates", "", "--sizes", "1500", "--reps", "2"]),
    ("SIZES", ["sweep", "--rates", "100M", "--sizes", "1500,9000", "--reps", "2"]),
    ("SIZES", ["sweep", "--rates", "100M", "--sizes", "", "--reps", "2"]),
    ("MODES", ["sweep", "--rates", "10M", "--reps", "1", "--modes", "precopy,teleport"]),
    ("MODES", ["sweep", "--rates", "10M", "--reps", "1", "--modes", "precopy,precopy"]),
    ("BFDS", ["sweep", "--rates", "10M", "--reps", "1", "--peering", "bgp", "--bfds", "50x3"]),
    ("BFDS", ["sweep", "--rates", "10M", "--reps", "1", "--peering", "bgp,bfd", "--bfds", "50x3,fast"]),
    ("BFDS", ["sweep", "--rates", "10M", "--reps", "1", "--peering", "bgp,bfd", "--bfds", "50x3,5x3"]),
    ("MULTIFD", ["sweep", "--rates", "10M", "--reps", "1", "--multifd", "0,2", "--postcopy", "1"]),
    ("MULTIFD", ["sweep", "--rates", "10M", "--reps", "1", "--multifd", "2,2"]),
    ("DURATIONS", ["calibrate", "--durations", "0"]),
    ("DURATIONS", ["calibrate", "--durations", "20,20000"]),
    ("DURATIONS", ["calibrate", "--durations", "fast"]),
    ("KIND", ["calibrate", "--kind", "teleport"]),
    ("KIND", ["calibrate", "--hv", "openvz", "--kind", "pause"]),
    ("REPS", ["calibrate", "--reps", "0"]),
    ("RATE", ["calibrate", "--rate", "0"]),
    ("PEERING", ["calibrate", "--peering", "rip"]),
    ("PEERING", ["calibrate", "--peering", "bgp,ospf"]),
    ("BFD", ["calibrate", "--peering", "bgp,bfd", "--bfd", "fast"]),
    ("BFD", ["calibrate", "--peering", "bgp,bfd", "--bfd", "50x1"]),
    ("ROLE", ["baseline", "--role", "vm-vx"]),
    ("ROLE", ["baseline", "--role", "vm-rx", "--routers", "1,2"]),
]


def _netns() -> set[str]:
    return set(os.listdir("/run/netns")) if os.path.isdir("/run/netns") else set()


@pytest.mark.parametrize(("param", "argv"), BAD_INPUTS, ids=[f"{p}:{' '.join(a[1:])}" for p, a in BAD_INPUTS])
def test_bad_input_is_one_clear_line(param, argv, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)

    def must_not_start(*_a, **_k):
        raise AssertionError(f"bad input {argv} reached the testbed")

    import migrate.testbed.builder

    monkeypatch.setattr(migrate.testbed.builder.TestbedBuilder, "build", must_not_start)
    before = _netns()
    rc = main([*argv, "--results", str(tmp_path / "results")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc != 0
    assert len(err) == 1, err
    assert param in err[0], err[0]
    assert not (tmp_path / "results").exists(), "bad input created a results directory"
    assert _netns() == before


#: variables whose refusals are tested elsewhere (docs/bad-input.md "Further refusals")
TESTED_ELSEWHERE = {
    "XEN_GUEST": "tests/unit/test_analysis_xen.py",
    "RESULTS": "the tests below and tests/integration/test_full_disk.py (the matrix gives each row its RESULTS)",
}


def test_every_variable_of_make_migrate_has_a_row():
    """A variable added to RUN_VARS or KNOBS needs a bad value here (or a test named above)."""
    from migrate.core.knobs import KNOBS
    from migrate.experiment.args import RUN_VARS

    have = {p for p, _ in BAD_INPUTS} | set(TESTED_ELSEWHERE)
    missing = [v for v in [*(r.var for r in RUN_VARS), *(k.var for k in KNOBS)] if v not in have]
    assert not missing, f"no bad-input row for {missing}"


def test_results_dir_that_is_not_ours_is_refused(tmp_path):
    from migrate.core.errors import ConfigError
    from migrate.testbed.results import check_results_root

    (tmp_path / "precious.txt").write_text("not vrmig's")
    with pytest.raises(ConfigError, match="not a vrmig results directory"):
        check_results_root(tmp_path)
    assert (tmp_path / "precious.txt").read_text() == "not vrmig's"


def test_results_path_that_is_a_file_is_refused(tmp_path):
    from migrate.core.errors import ConfigError
    from migrate.testbed.results import check_results_root

    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(ConfigError, match="not a directory"):
        check_results_root(f)


def markdown_table() -> str:
    """The bad-input table of docs/bad-input.md, from the real messages."""
    import contextlib
    import io
    import tempfile

    rows = ["| parameter | input | message (exit status) |", "|---|---|---|"]
    for param, argv in BAD_INPUTS:
        buf = io.StringIO()
        with tempfile.TemporaryDirectory() as d, contextlib.redirect_stderr(buf):
            rc = main([*argv, "--results", f"{d}/results"])
        msg = buf.getvalue().strip().replace(os.getcwd(), "…")  # the page names no checkout's path
        rows.append(f"| {param} | `{' '.join(argv[1:]) or argv[0]}` | {msg} ({rc}) |")
    return "\n".join(rows)


if __name__ == "__main__":
    sys.stdout.write(markdown_table() + "\n")
