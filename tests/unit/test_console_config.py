"""The serial-console dialogue (migrate.drivers.console_config) against a scripted console: a
thread on the other end of a socket pair that behaves as a getty and a shell do (synthetic: no
guest runs here; tests/integration/test_own_router.py types on a real one)."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import pytest

from migrate.core.errors import GuestError
from migrate.drivers import console_config as cc
from migrate.drivers.guest_vm import GuestDisk, GuestVm
from migrate.drivers.kvm.driver import console_chardev

PROMPT = "root@router:~# "


class FakeConsole(threading.Thread):
    """A getty (``login:``, ``Password:``) then a shell that echoes each line and prints its
    prompt after it; ``boot_wakes``: carriage returns it ignores first (a guest still booting);
    ``hang_after``: the command after which the shell never prints its prompt again."""

    def __init__(
        self, sock: socket.socket, password: str = "pw", boot_wakes: int = 0, hang_after: int | None = None
    ) -> None:
        super().__init__(daemon=True)
        self.sock = sock
        self.password = password
        self.boot_wakes = boot_wakes
        self.hang_after = hang_after
        self.commands: list[str] = []
        self.state = "getty"

    def out(self, text: str) -> None:
        self.sock.sendall(text.encode())

    def run(self) -> None:
        buf = ""
        while True:
            try:
                data = self.sock.recv(4096)
            except OSError:
                return
            if not data:
                return
            buf += data.decode()
            while "\r" in buf:
                line, buf = buf.split("\r", 1)
                self.line(line)

    def line(self, line: str) -> None:
        if self.state == "getty":
            if self.boot_wakes > 0:
                self.boot_wakes -= 1
                return
            if line:
                self.user = line
                self.out(line + "\r\nPassword: ")
                self.state = "password"
            else:
                self.out("\r\nrouter login: ")
        elif self.state == "password":
            if line == self.password:
                self.out("\r\nLinux router 6.1\r\n\x1b[?2004h" + PROMPT)
                self.state = "shell"
            else:
                self.out("\r\n\r\nLogin incorrect\r\nrouter login: ")
                self.state = "getty"
        else:
            self.commands.append(line)
            self.out("\x1b[?2004l" + line + "\r\n")
            if self.hang_after is not None and len(self.commands) >= self.hang_after:
                return
            said = "-bash: frob: command not found" if line.startswith("frob") else f"ran {len(self.commands)}"
            self.out(said + "\r\n\x1b[?2004h" + PROMPT)


@pytest.fixture(autouse=True)
def quick_wakes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cc, "WAKE_EVERY_S", 0.05)
    monkeypatch.setattr(cc, "STEP_S", 0.05)


def session(
    lines: list[str],
    *,
    password: str = "pw",
    timeout_s: float = 10.0,
    alive: bool = True,
    errors: tuple[str, ...] = (),
    **fake: int,
) -> tuple[cc.ConsoleTyped, FakeConsole]:
    ours, theirs = socket.socketpair()
    console = FakeConsole(theirs, **fake)
    console.start()
    try:
        typed = cc.type_config(
            ours, lines, login="root", password=password, prompt="# ", errors=errors, timeout_s=timeout_s,
            alive=lambda: alive, abort=lambda: False,
        )  # fmt: skip
    finally:
        ours.close()
        theirs.close()
    return typed, console


def test_types_each_line_after_logging_in() -> None:
    lines = ["hostname r1", "ip link set left up", "echo 'a # b' >> /etc/x"]
    typed, console = session(lines, boot_wakes=2)
    assert console.commands == lines
    assert console.user == "root"
    assert typed.lines == 3 and typed.login_s >= 0 and typed.typing_s >= 0


def test_output_matching_an_error_pattern_fails_that_line() -> None:
    errors = ("command not found", "RTNETLINK")
    with pytest.raises(GuestError, match=r"line 2 of 3 \('frob left'\): its output matches .*'command not found'"):
        session(["true", "frob left", "true"], errors=errors)
    # the prompt's text in the typed line itself is its echo, not the prompt: the output is after it
    with pytest.raises(GuestError, match=r"line 1 of 1 .*'command not found'"):
        session(["frob '# x'"], errors=errors)
    _, console = session(["true", "frob left"])  # without patterns a console cannot tell
    assert console.commands == ["true", "frob left"]


def test_command_lines_skip_blank_lines_only() -> None:
    text = "a\n\n   \nb  \n  c\n"
    assert cc.command_lines(text) == ["a", "b", "  c"]


def test_wrong_password_is_one_error_naming_the_console() -> None:
    with pytest.raises(GuestError, match="Login incorrect"):
        session(["true"], password="nope")


def test_a_shell_that_never_prompts_again_times_out_naming_the_line() -> None:
    start = time.monotonic()
    with pytest.raises(GuestError, match=r"line 2 of 3 \('two'\).*timed out"):
        session(["one", "two", "three"], timeout_s=3.0, hang_after=2)
    assert time.monotonic() - start < 6.0


def test_a_dead_hypervisor_ends_the_wait_at_once() -> None:
    start = time.monotonic()
    with pytest.raises(GuestError, match="hypervisor process exited"):
        session(["true"], timeout_s=30.0, alive=False, boot_wakes=1000)
    assert time.monotonic() - start < 3.0


def test_tail_counts_repeated_lines_and_drops_terminal_control() -> None:
    seen = "boot\r\n" + "(initramfs) \r\n" * 5 + "\x1b[?2004hroot# "
    assert cc.tail(seen) == "boot | (initramfs) (x5) | root#"


def test_connect_fails_fast_when_qemu_is_gone(tmp_path: Path) -> None:
    with pytest.raises(GuestError, match="QEMU exited"):
        cc.connect(tmp_path / "none.sock", 10.0, lambda: False)


def _vm(tmp_path: Path, sock: Path | None) -> GuestVm:
    return GuestVm(
        name="r", accel="tcg", mem_mib=256, vcpus=1, kernel=None, initrd=None, cmdline="",
        console=tmp_path / "con,1.log", nic="virtio", disks=(GuestDisk(tmp_path / "d.qcow2", "qcow2"),),
        console_socket=sock,
    )  # fmt: skip


def test_console_chardev_is_a_logging_socket_when_typed_on(tmp_path: Path) -> None:
    assert console_chardev(_vm(tmp_path, None)) == f"file,id=con,path={tmp_path}/con,,1.log"
    chardev = console_chardev(_vm(tmp_path, tmp_path / "con-R1.sock"))
    assert chardev == (
        f"socket,id=con,path={tmp_path}/con-R1.sock,server=on,wait=off,logfile={tmp_path}/con,,1.log,logappend=on"
    )
