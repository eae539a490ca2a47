"""The router guest as an end host: the suite's traffic tools run inside the built-in frr guest,
driven over its serial console (migrate.drivers.guest_shell), against hosts of the embedded
testbed.

The guest boots in R1 as the QMP driver boots it (its taps on segments L and R, the router's
fixed MACs), with ``vrmig.shell=1`` and its console on a Unix socket.  Once READY: vrgen in the
guest sends to B (vrsink on B), and vrgen on A sends to the guest's eth0 (vrsink in the guest);
both records are parsed by crosstraffic.backends.builtin.  Everything is removed by the run's
registry (QEMU and the hosts' tools by PID, the namespaces) and QEMU is also stopped by PID in
``finally``.  Needs root, QEMU, the built guest (with the traffic tools: `make guest`) and
crosstraffic/bin (`make -C crosstraffic`)."""

from __future__ import annotations

import json
import os
import signal
import time

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
GUEST_TOOLS = ("vrgen", "vrsink", "vrtcp")
BOOT_TIMEOUT_S = 45.0
SHELL_TIMEOUT_S = 10.0
CMD_TIMEOUT_S = 10.0


def _image():
    from routers.errors import RouterError
    from routers.guest import guest_image, has_tool

    try:
        image = guest_image(PROFILE)
    except RouterError as err:
        missing_from_setup(err)
    absent = [t for t in GUEST_TOOLS if not has_tool(image, t)]
    if absent:
        pytest.fail(
            f"the {PROFILE} guest image has no {', '.join(absent)}: rebuild it with `make guest`", pytrace=False
        )
    return image


def test_guest_sends_to_B_and_receives_from_A(tmp_path, no_leftovers):
    require_root_and("qemu-system-x86_64", "ip", "crosstraffic/bin/vrgen", "crosstraffic/bin/vrsink")
    if not os.path.exists("/dev/net/tun"):
        pytest.skip("/dev/net/tun missing (tap devices unavailable)")
    image = _image()
    from migrate.core.registry import Registry
    from migrate.drivers.guest_shell import GuestShell
    from migrate.drivers.guest_vm import GuestVm
    from migrate.drivers.kvm.accel import detect_accel
    from migrate.drivers.kvm.driver import qemu_argv
    from migrate.testbed import topology as topo
    from migrate.testbed.builder import TestbedBuilder, new_prefix
    from routers import smoke
    from routers.guest import DEFAULT_EXTRA_ARGS, kernel_cmdline

    accel, accel_reason = detect_accel()  # as the QMP driver chooses it; recorded with the results
    host_tools = BuiltinBackend(bin_dir=REPO / "crosstraffic" / "bin")
    guest_tools = BuiltinBackend(bin_dir="/usr/sbin")
    b_addr = topo.addr(topo.host("B").ipv4)
    vm_eth0 = topo.addr(topo.router_port("L").ipv4)
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
        qemu = tb.spawn("R1", "qemu", qemu_argv(vm, qmp=reg.dir / "qmp.sock", incoming=False), reg, tmp_path)
        try:
            ready = smoke.wait_for_ready(vm.console, qemu.popen, BOOT_TIMEOUT_S)
            assert vm.console_socket is not None
            with GuestShell.connect(vm.console_socket, timeout_s=SHELL_TIMEOUT_S, alive=qemu.alive) as shell:
                # VM -> B: vrgen in the guest, vrsink on B
                sink_b = tb.spawn(
                    "B",
                    "sink-B",
                    host_tools.sink_argv(SinkRequest(port=PORT, bind=b_addr, gap_us=GAP_US)),
                    reg,
                    tmp_path,
                    stdout_name="sink-B.json",
                )
                sink_b.wait_for("READY", CMD_TIMEOUT_S)
                req = GenRequest(dst=b_addr, port=PORT, rate_bps=RATE_BPS, frame_bytes=FRAME_BYTES,
                                 duration_s=DURATION_S)  # fmt: skip
                gen_vm = shell.start(guest_tools.gen_argv(req), CMD_TIMEOUT_S)
                gen_vm_done = shell.finish(gen_vm, DURATION_S + CMD_TIMEOUT_S)
                assert gen_vm_done.rc == 0, gen_vm_done.stderr
                assert sink_b.stop(signal.SIGTERM) == 0, sink_b.stderr_tail()
                g1 = guest_tools.parse_gen(gen_vm_done.stdout)
                s1 = host_tools.parse_sink((tmp_path / "sink-B.json").read_text())

                # A -> VM: vrgen on A, vrsink in the guest
                sink_vm = shell.start(
                    guest_tools.sink_argv(SinkRequest(port=PORT, bind=vm_eth0, gap_us=GAP_US)), CMD_TIMEOUT_S
                )
                shell.wait_output(sink_vm, "READY", CMD_TIMEOUT_S)
                req = GenRequest(dst=vm_eth0, port=PORT, rate_bps=RATE_BPS, frame_bytes=FRAME_BYTES,
                                 duration_s=DURATION_S)  # fmt: skip
                gen_a = tb.spawn("A", "gen-A", host_tools.gen_argv(req), reg, tmp_path, stdout_name="gen-A.json")
                assert gen_a.wait(DURATION_S + CMD_TIMEOUT_S) == 0, gen_a.stderr_tail()
                sink_vm_done = shell.finish(sink_vm, CMD_TIMEOUT_S, signal="TERM")
                assert sink_vm_done.rc == 0, sink_vm_done.stderr
                g2 = host_tools.parse_gen((tmp_path / "gen-A.json").read_text())
                s2 = guest_tools.parse_sink(sink_vm_done.stdout)
        finally:
            qemu.stop()
        record = {
            "accel": accel,
            "accel_reason": accel_reason,
            "ready_line": ready,
            "seconds": round(time.monotonic() - t0, 1),
            "vm_to_B": {"sent": g1.packets, "received": s1.packets, "lost": s1.lost, "achieved_bps": g1.achieved_bps},
            "A_to_vm": {"sent": g2.packets, "received": s2.packets, "lost": s2.lost, "achieved_bps": g2.achieved_bps},
        }
        (tmp_path / "endhost.json").write_text(json.dumps(record, indent=1) + "\n")
        print(json.dumps(record))
    assert not reg.teardown_problems, reg.teardown_problems
    assert record["accel"] in ("kvm", "tcg")
    for g, s, where in ((g1, s1, "VM -> B"), (g2, s2, "A -> VM")):
        assert g.send_errors == 0, (where, record)
        assert g.packets > 0 and s.duplicates == 0, (where, record)
        assert s.packets <= g.packets, (where, record)
        assert g.packets - s.packets <= MAX_LOST_FRACTION * g.packets, (where, record)
