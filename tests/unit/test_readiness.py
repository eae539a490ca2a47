"""Readiness by forwarding against a fake testbed (no namespaces, no packets: the wait's logic)."""

import subprocess
from pathlib import Path

import pytest

from migrate.core.errors import GuestError
from migrate.drivers import readiness


class FakeBed:
    """Echo requests fail until the ``answer_from``-th one; each request is one packet at D."""

    def __init__(self, answer_from: int | None) -> None:
        self.answer_from = answer_from
        self.calls: list[tuple[str, list[str]]] = []
        self.rx = {"C": 100, "D": 200}

    def run(self, role, argv, timeout_s=30.0):
        self.calls.append((role, argv))
        self.rx["D"] += 1
        ok = self.answer_from is not None and len(self.calls) >= self.answer_from
        return subprocess.CompletedProcess(argv, 0 if ok else 1, b"", b"")

    def rx_packets(self, role, ifname):
        return self.rx[role]

    def host_if(self, role):
        return "eth0"


def test_ready_at_the_first_reply_from_c_to_d(monkeypatch):
    monkeypatch.setattr(readiness, "PROBE_INTERVAL_S", 0.0)
    bed = FakeBed(answer_from=3)
    got = readiness.wait_forwarding(bed, 4, 10.0, alive=lambda: True, abort=lambda: False)
    assert got.requests == 3
    assert {role for role, _ in bed.calls} == {"C"}
    assert bed.calls[0][1][-1] == "198.18.2.11" and "-4" in bed.calls[0][1]


def test_ipv6_pings_d_over_ipv6():
    assert readiness.ping_argv(6)[-1] == "2001:2:0:2::11" and "-6" in readiness.ping_argv(6)


def test_timeout_names_packets_and_console_tail(monkeypatch, tmp_path: Path):
    monkeypatch.setattr(readiness, "PROBE_INTERVAL_S", 0.0)
    console = tmp_path / "console.log"
    console.write_text("boot\nlogin: \n")
    with pytest.raises(GuestError) as err:
        readiness.wait_forwarding(FakeBed(None), 4, 0.0, alive=lambda: True, abort=lambda: False, console=console)
    msg = str(err.value)
    assert "no echo reply within 0 s" in msg and "1 echo request(s)" in msg
    assert "D received 1 packet(s) on the right segment, C 0 on the left" in msg
    assert msg.endswith("console: boot | login:")


def test_a_dead_router_ends_the_wait_at_once(monkeypatch):
    monkeypatch.setattr(readiness, "PROBE_INTERVAL_S", 0.0)
    with pytest.raises(GuestError, match=r"hypervisor process exited.*console: \(empty\)"):
        readiness.wait_forwarding(FakeBed(None), 4, 60.0, alive=lambda: False, abort=lambda: False)


def test_console_tail_drops_the_guests_terminal_control(tmp_path: Path):
    console = tmp_path / "console.log"
    queries = b"\x1b[6n\x1b[32766;32766H\x1b[!p\x1b]104\x07\x1b[?7h"
    console.write_bytes(queries + b"\r\nDebian GNU/Linux 13 r ttyS0\r\n\r\nr login: ")
    assert readiness.console_tail(console) == "Debian GNU/Linux 13 r ttyS0 | r login:"
