"""The router guest as an end host: the suite's traffic tools run inside the built-in frr guest,
driven over its serial console (migrate.drivers.guest_shell), against hosts of the embedded
testbed.

The guest boots in R1 as the QMP driver boots it (its taps on segments L and R, the router's
fixed MACs), with ``vrmig.shell=1`` and its console on a Unix socket.  Once READY: vrgen in the
guest sends to B (vrsink on B), and vrgen on A sends to the guest's eth0 (vrsink in the guest);
both records are parsed by crosstraffic.backends.builtin.  And vrtcp in the guest sends a TCP
flow to vrtcp's sink on B.  Everything is removed by the run's
registry (QEMU and the hosts' tools by PID, the namespaces) and QEMU is also stopped by PID in
``finally``.  Needs root, QEMU, the built guest (with the traffic tools: `make guest`) and
crosstraffic/bin (`make -C crosstraffic`)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from crosstraffic import GenRequest, SinkRequest
from crosstraffic.backends.builtin import BuiltinBackend
from tests.integration.conftest import REPO, missing_from_setup, require_root_and

pytestmark = pytest.mark.integration

PROFILE = "frr"
PORT = 9000
RATE_BPS = 10_000_000
FRAME_BYTES = 1000
DURATION_S = 3.0
GAP_US = 50_000
#: lost fraction allowed on the idle testbed: none.  The rate (1250 packets/s) is a small part of
#: what one vCPU forwards even under TCG, nothing else uses the link, the hosts hold permanent
#: neighbour entries for the guest, and the guest queues (not drops) its first packets to B while
#: it resolves B's address; so every packet sent is to arrive
MAX_LOST_FRACTION = 0.0
TCP_SAMPLE_MS = 100
TCP_POLL_S = 0.1  # between two reads of B's growing goodput trace
BOOT_TIMEOUT_S = 45.0
SHELL_TIMEOUT_S = 10.0
CMD_TIMEOUT_S = 10.0


def _image():
    from routers.errors import RouterError
    from routers.guest import ENDHOST_TOOLS, guest_image, has_tool

    try:
        image = guest_image(PROFILE)
    except RouterError as err:
        missing_from_setup(err)
    absent = [t for t in ENDHOST_TOOLS if not has_tool(image, t)]
    if absent:
        pytest.fail(
            f"the {PROFILE} guest image has no {', '.join(absent)}: rebuild it with `make guest`", pytrace=False
        )
    return image


@dataclass
class EndhostBed:
    """The booted guest with its console shell, in a fresh embedded testbed."""

    tb: Any
    reg: Any
    shell: Any
    qemu: Any
    record: dict[str, Any]


@contextlib.contextmanager
def _endhost_bed(tmp_path: Path) -> Iterator[EndhostBed]:
    """Build the testbed, boot the guest in R1 with its shell on the console socket, wait for
    READY and the shell; afterwards stop QEMU by PID and tear the testbed down."""
    require_root_and("qemu-system-x86_64", "ip", "crosstraffic/bin/vrgen", "crosstraffic/bin/vrsink",
                     "crosstraffic/bin/vrtcp")  # fmt: skip
    if not os.path.exists("/dev/net/tun"):
        pytest.skip("/dev/net/tun missing (tap devices unavailable)")
    image = _image()
    from migrate.core.registry import Registry
    from migrate.drivers.guest_shell import GuestShell
    from migrate.drivers.guest_vm import GuestVm
    from migrate.drivers.kvm.accel import detect_accel
    from migrate.drivers.kvm.driver import qemu_argv
    from migrate.testbed.builder import TestbedBuilder, new_prefix
    from routers import smoke
    from routers.guest import DEFAULT_EXTRA_ARGS, kernel_cmdline

    accel, accel_reason = detect_accel()  # as the QMP driver chooses it; recorded with the results
    t0 = time.monotonic()
    with Registry(new_prefix()) as reg:
        tb = TestbedBuilder(reg).build()
        vm = GuestVm(
            name=f"{reg.prefix}-endhost",
            accel=accel,
            mem_mib=max(256, image.min_mem_mib or 0),
            vcpus=1,
            kernel=image.kernel,
            initrd=image.initrd,
            cmdline=kernel_cmdline(PROFILE, smoke.IF0, smoke.IF1, extra=(*DEFAULT_EXTRA_ARGS, "vrmig.shell=1")),
            console=tmp_path / "console.log",
            nic="virtio",
            console_socket=reg.dir / "console.sock",
        )
        assert vm.console_socket is not None
        qemu = tb.spawn("R1", "qemu", qemu_argv(vm, qmp=reg.dir / "qmp.sock", incoming=False), reg, tmp_path)
        try:
            ready = smoke.wait_for_ready(vm.console, qemu.popen, BOOT_TIMEOUT_S)
            with GuestShell.connect(vm.console_socket, timeout_s=SHELL_TIMEOUT_S, alive=qemu.alive) as shell:
                record = {"accel": accel, "accel_reason": accel_reason, "ready_line": ready,
                          "boot_s": round(time.monotonic() - t0, 1)}  # fmt: skip
                yield EndhostBed(tb, reg, shell, qemu, record)
        finally:
            qemu.stop()
    assert not reg.teardown_problems, reg.teardown_problems


def _write_record(tmp_path: Path, name: str, record: dict[str, Any]) -> None:
    (tmp_path / name).write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps(record))


def test_guest_sends_to_B_and_receives_from_A(tmp_path, no_leftovers):
    from migrate.testbed import topology as topo

    host_tools = BuiltinBackend(bin_dir=REPO / "crosstraffic" / "bin")
    guest_tools = BuiltinBackend(bin_dir="/usr/sbin")
    b_addr = topo.addr(topo.host("B").ipv4)
    vm_eth0 = topo.addr(topo.router_port("L").ipv4)
    with _endhost_bed(tmp_path) as bed:
        tb, reg, shell = bed.tb, bed.reg, bed.shell
        # VM -> B: vrgen in the guest, vrsink on B
        sink_b = tb.spawn("B", "sink-B", host_tools.sink_argv(SinkRequest(port=PORT, bind=b_addr, gap_us=GAP_US)),
                          reg, tmp_path, stdout_name="sink-B.json")  # fmt: skip
        sink_b.wait_for("READY", CMD_TIMEOUT_S)
        req = GenRequest(dst=b_addr, port=PORT, rate_bps=RATE_BPS, frame_bytes=FRAME_BYTES, duration_s=DURATION_S)
        gen_vm = shell.finish(shell.start(guest_tools.gen_argv(req), CMD_TIMEOUT_S), DURATION_S + CMD_TIMEOUT_S)
        assert gen_vm.rc == 0, gen_vm.stderr
        assert sink_b.stop(signal.SIGTERM) == 0, sink_b.stderr_tail()
        g1 = guest_tools.parse_gen(gen_vm.stdout)
        s1 = host_tools.parse_sink((tmp_path / "sink-B.json").read_text())

        # A -> VM: vrgen on A, vrsink in the guest
        sink_req = SinkRequest(port=PORT, bind=vm_eth0, gap_us=GAP_US)
        sink_vm = shell.start(guest_tools.sink_argv(sink_req), CMD_TIMEOUT_S)
        shell.wait_output(sink_vm, "READY", CMD_TIMEOUT_S)
        req = GenRequest(dst=vm_eth0, port=PORT, rate_bps=RATE_BPS, frame_bytes=FRAME_BYTES, duration_s=DURATION_S)
        gen_a = tb.spawn("A", "gen-A", host_tools.gen_argv(req), reg, tmp_path, stdout_name="gen-A.json")
        assert gen_a.wait(DURATION_S + CMD_TIMEOUT_S) == 0, gen_a.stderr_tail()
        sink_vm_done = shell.finish(sink_vm, CMD_TIMEOUT_S, signal="TERM")
        assert sink_vm_done.rc == 0, sink_vm_done.stderr
        g2 = host_tools.parse_gen((tmp_path / "gen-A.json").read_text())
        s2 = guest_tools.parse_sink(sink_vm_done.stdout)
        record = {
            **bed.record,
            "vm_to_B": {"sent": g1.packets, "received": s1.packets, "lost": s1.lost, "achieved_bps": g1.achieved_bps},
            "A_to_vm": {"sent": g2.packets, "received": s2.packets, "lost": s2.lost, "achieved_bps": g2.achieved_bps},
        }
    _write_record(tmp_path, "endhost-udp.json", record)
    assert record["accel"] in ("kvm", "tcg")
    for g, s, where in ((g1, s1, "VM -> B"), (g2, s2, "A -> VM")):
        assert g.send_errors == 0, (where, record)
        assert g.packets > 0 and s.duplicates == 0, (where, record)
        assert s.packets <= g.packets, (where, record)
        assert g.packets - s.packets <= MAX_LOST_FRACTION * g.packets, (where, record)


def test_guest_sends_tcp_to_B(tmp_path, no_leftovers):
    """vrtcp send in the guest, vrtcp sink on B: every byte written arrives (TCP), and B's
    goodput trace is read until it holds them all before the sink is stopped."""
    from crosstraffic import tcp
    from migrate.testbed import topology as topo

    b_addr = topo.addr(topo.host("B").ipv4)
    trace = tmp_path / "tcp-sink-B.tsv"
    with _endhost_bed(tmp_path) as bed:
        tb, reg, shell = bed.tb, bed.reg, bed.shell
        sink_argv = tcp.sink_argv(bind=b_addr, port=PORT, flows=1, sample_ms=TCP_SAMPLE_MS, out=trace,
                                  binary=REPO / "crosstraffic" / "bin" / "vrtcp")  # fmt: skip
        sink = tb.spawn("B", "tcp-sink-B", sink_argv, reg, tmp_path, stdout_name="tcp-sink-B.json")
        sink.wait_for("READY", CMD_TIMEOUT_S)
        send_argv = tcp.send_argv(dst=b_addr, port=PORT, flows=1, sample_ms=TCP_SAMPLE_MS,
                                  out=Path("/tmp/tcp-send.tsv"), rate_bps=RATE_BPS, duration_s=DURATION_S,
                                  binary=Path("/usr/sbin/vrtcp"))  # fmt: skip
        sent = shell.finish(shell.start(send_argv, CMD_TIMEOUT_S), DURATION_S + CMD_TIMEOUT_S)
        assert sent.rc == 0, sent.stderr
        send = tcp.parse_summary(sent.stdout, "send")
        written = sum(send["bytes_written"])
        deadline = time.monotonic() + CMD_TIMEOUT_S
        while True:  # the sink's trace is cumulative: wait until it shows every byte written
            t = tcp.read_sink_trace(trace)
            if len(t.bytes) and int(t.bytes[t.flow == 0].max()) >= written:
                break
            assert sink.alive(), sink.stderr_tail()
            assert time.monotonic() < deadline, f"B received {int(t.bytes.max()) if len(t.bytes) else 0} of {written}"
            time.sleep(TCP_POLL_S)
        assert sink.stop(signal.SIGTERM) == 0, sink.stderr_tail()
        got = tcp.parse_summary((tmp_path / "tcp-sink-B.json").read_text(), "sink")
        tcp_figures = {"written": written, "received": sum(got["bytes"]), "connected": got["connected"],
                       "stopped_by": send["stopped_by"]}  # fmt: skip
        record = {**bed.record, "vm_to_B_tcp": tcp_figures}
    _write_record(tmp_path, "endhost-tcp.json", record)
    assert send["errors"] == [] and got["errors"] == [], record
    assert written > 0 and got["connected"] == 1 and sum(got["bytes"]) == written, record
