"""migrate.drivers.guest_shell against two stand-ins for the guest's serial console: the host's
own ``sh -i`` on a pseudo-terminal (a real interactive shell with a tty's echo and job control),
and a synthetic console (a socketpair with a tiny shell emulator thread) that echoes the typed
line broken at its ``;`` and wrapped, with terminal control codes, job notices and a coloured
prompt around each command's output."""

from __future__ import annotations

import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pexpect = pytest.importorskip("pexpect")

from migrate.core.errors import GuestError  # noqa: E402
from migrate.drivers import console_config  # noqa: E402
from migrate.drivers import guest_shell as gs  # noqa: E402

#: the synthetic console wraps its echo of a typed line at this many columns
SYNTHETIC_COLUMNS = 37
#: a bound on how long a wait may overrun its deadline: one step of the console wait
#: (console_config.STEP_S = 0.5 s) plus scheduling slack on a loaded 2-core machine
OVERRUN_S = 1.5


@pytest.fixture
def pty_shell(tmp_path: Path) -> Iterator[gs.GuestShell]:
    """The host's ``sh -i`` on a pseudo-terminal, answering (its jobs' files in tmp_path)."""
    child = pexpect.spawn(
        "sh", ["-i"], env={"PATH": "/usr/bin:/bin", "PS1": "$ ", "HOME": str(tmp_path)}, encoding="utf-8"
    )
    try:
        shell = gs.GuestShell(child.child_fd, alive=child.isalive, tmp_dir=str(tmp_path))
        shell.wait_ready(5)
        yield shell
    finally:
        child.close(force=True)


def test_run_frames_output_and_exit_status(pty_shell):
    assert pty_shell.run(["echo", "hello world"], 5) == gs.ShellResult(0, "hello world\n")
    res = pty_shell.run(["sh", "-c", "echo out; echo err >&2; exit 3"], 5)
    assert res.rc == 3 and res.stdout == "out\nerr\n"
    assert pty_shell.run(["printf", "%s", "no newline"], 5) == gs.ShellResult(0, "no newline")
    assert pty_shell.run(["true"], 5) == gs.ShellResult(0, "")
    assert pty_shell.run(["no-such-program-vrmig"], 5).rc == 127


def test_arguments_are_quoted_never_interpreted(pty_shell):
    argv = ["printf", "%s|", "a; echo injected", "$(echo sub)", "'q'", '"dq"', "*", "$?", "x\ty"]
    assert pty_shell.run(argv, 5).stdout == "a; echo injected|$(echo sub)|'q'|\"dq\"|*|$?|x\ty|"


def test_check_names_the_failed_command(pty_shell):
    assert pty_shell.check(["echo", "ok"], 5) == "ok\n"
    with pytest.raises(GuestError, match=r"exited 2: boom"):
        pty_shell.check(["sh", "-c", "echo boom; exit 2"], 5)


def test_a_command_past_its_deadline_fails_and_the_shell_says_it_is_unusable(pty_shell):
    t0 = time.monotonic()
    with pytest.raises(GuestError, match="timed out"):
        pty_shell.run(["sleep", "30"], 0.5)
    assert time.monotonic() - t0 < 0.5 + OVERRUN_S
    with pytest.raises(GuestError, match="unusable"):
        pty_shell.run(["echo", "x"], 5)


class _StopClock:
    """before(): True until ``stop_at`` (monotonic s); after(): its negation."""

    def __init__(self) -> None:
        self.stop_at = float("inf")

    def before(self) -> bool:
        return time.monotonic() < self.stop_at

    def after(self) -> bool:
        return not self.before()


def test_waits_stop_early_when_the_hypervisor_exits_or_on_abort(tmp_path):
    for flag, why in (("alive", "hypervisor process exited"), ("abort", "aborted")):
        child = pexpect.spawn("sh", ["-i"], env={"PATH": "/usr/bin:/bin", "PS1": "$ "}, encoding="utf-8")
        try:
            clock = _StopClock()
            if flag == "alive":
                shell = gs.GuestShell(child.child_fd, alive=clock.before, tmp_dir=str(tmp_path))
            else:
                shell = gs.GuestShell(child.child_fd, alive=child.isalive, abort=clock.after, tmp_dir=str(tmp_path))
            shell.wait_ready(5)
            clock.stop_at = time.monotonic() + 0.2
            t0 = time.monotonic()
            with pytest.raises(GuestError, match=why):
                shell.run(["sleep", "30"], 60)
            assert time.monotonic() - t0 < 0.2 + OVERRUN_S
        finally:
            child.close(force=True)


def test_background_job_readiness_status_and_output(pty_shell):
    job = pty_shell.start(["sh", "-c", "echo READY >&2; echo result; exit 4"], 5)
    assert job.pid > 0 and job.stdout_path.startswith(pty_shell.tmp_dir)
    pty_shell.wait_output(job, "READY", 5)
    assert pty_shell.finish(job, 5) == gs.JobResult(rc=4, stdout="result\n", stderr="READY\n")


def test_background_job_stopped_by_a_signal_records_its_status(pty_shell):
    job = pty_shell.start(["sleep", "30"], 5)
    assert pty_shell.job_rc(job, 5) is None
    t0 = time.monotonic()
    res = pty_shell.finish(job, 5, signal="TERM")
    assert res.rc == 128 + 15 and time.monotonic() - t0 < 3
    assert pty_shell.run(["echo", "still answers"], 5).stdout == "still answers\n"


def test_readiness_of_a_job_that_exits_first_is_an_error(pty_shell):
    job = pty_shell.start(["sh", "-c", "echo cannot bind >&2; exit 1"], 5)
    with pytest.raises(GuestError, match=r"exited \(1\) first: cannot bind"):
        pty_shell.wait_output(job, "READY", 5)


class SyntheticConsole(threading.Thread):
    """A synthetic serial console: a tiny shell emulator on one end of a socketpair.  It ignores
    the first ``lost`` lines typed (a shell not yet started), answers each other line by echoing
    it as a line editor might (broken before every ``;``, wrapped at SYNTHETIC_COLUMNS, a cursor
    query and colour codes) and then printing the host ``sh -c`` output of the line (LF as CR LF),
    a job notice and a coloured prompt."""

    def __init__(self, sock: socket.socket, lost: int = 0) -> None:
        super().__init__(daemon=True)
        self.sock, self.lost = sock, lost
        self.typed: list[str] = []

    def send(self, text: str) -> None:
        self.sock.sendall(text.encode())

    def run(self) -> None:
        buf = b""
        self.send("garbage at connect \x1b[?2004h\x07\r\n# ")
        while True:
            try:
                data = self.sock.recv(4096)
            except OSError:
                return
            if not data:
                return
            buf += data
            while b"\r" in buf:
                raw, buf = buf.split(b"\r", 1)
                line = raw.decode().replace(gs.CTRL_U, "").replace(gs.CTRL_C, "")
                self.typed.append(line)
                if self.lost > 0:
                    self.lost -= 1
                    continue
                echo = line.replace(";", "\r\n;")
                wrapped = "\r\n".join(echo[i : i + SYNTHETIC_COLUMNS] for i in range(0, len(echo), SYNTHETIC_COLUMNS))
                self.send(f"\x1b[6n{wrapped}\x1b[0m\r\n")
                res = subprocess.run(["sh", "-c", line], capture_output=True, text=True, check=False)
                self.send((res.stdout + res.stderr).replace("\n", "\r\n"))
                self.send("[1]+  Done                       vrsink --port 9000\r\n\x1b[1;32m#\x1b[0m ")


@pytest.fixture
def synthetic(monkeypatch) -> Iterator[tuple[gs.GuestShell, SyntheticConsole]]:
    monkeypatch.setattr(console_config, "WAKE_EVERY_S", 0.2)  # re-probe the synthetic console quickly
    a, b = socket.socketpair()
    console = SyntheticConsole(b, lost=2)
    console.start()
    shell = gs.GuestShell(a, alive=lambda: True)
    try:
        yield shell, console
    finally:
        shell.close()
        b.close()
        console.join(5)


def test_synthetic_console_echo_wrapping_and_noise_stay_outside_the_frame(synthetic):
    shell, console = synthetic
    shell.wait_ready(5)
    assert len(console.typed) >= 3  # the probe was typed again until the emulator answered
    assert shell.run(["echo", "payload"], 5) == gs.ShellResult(0, "payload\n")
    res = shell.run(["sh", "-c", 'printf "\\033[1mbold\\033[0m\\n"; exit 5'], 5)
    assert res == gs.ShellResult(5, "bold\n")
    long = ["printf", "%s\\n", *(f"word{i}" for i in range(40))]
    assert shell.run(long, 5).stdout == "".join(f"word{i}\n" for i in range(40))


def test_synthetic_typed_line_never_holds_its_own_markers():
    for argv in (["echo", "x"], ["cat", "/tmp/vrmig-job.out"]):
        nonce = "0123456789ab"
        line = gs.frame_line(argv[0], nonce)
        assert not gs.begin_marker(nonce).search(line.replace(";", "\r\n;"))
        assert f"VRMIG-CMD-BEGIN-{nonce}" not in line and f"VRMIG-CMD-END-{nonce}" not in line


def test_empty_argv_is_refused(pty_shell):
    with pytest.raises(ValueError, match="program name"):
        pty_shell.run([], 5)
    with pytest.raises(ValueError, match="program name"):
        pty_shell.start([], 5)


def test_a_file_is_read_as_the_guests_md5sum_has_it_or_read_again(pty_shell, tmp_path, monkeypatch, caplog):
    """read_file: the text ``cat`` brought over the console must hash as the guest's md5sum of
    the file; a corrupted read (here SYNTHETIC: the first 16 bytes turned into "9"s, as seen once
    through HV=xen's relayed console) is read again with a warning and counted; three bad reads
    are an error, never a figure."""
    record = tmp_path / "gen.json"
    record.write_text('{"tool": "vrgen", "packets": 47743}\n')
    assert pty_shell.read_file(str(record), 5) == record.read_text() and pty_shell.rereads == 0
    real = pty_shell.check
    bad = {"left": 1}

    def corrupting(argv, timeout_s):
        out = real(argv, timeout_s)
        if argv[0] == "cat" and bad["left"]:
            bad["left"] -= 1
            return "9" * 16 + out[16:]
        return out

    monkeypatch.setattr(pty_shell, "check", corrupting)
    with caplog.at_level("WARNING"):
        assert pty_shell.read_file(str(record), 5) == record.read_text()
    assert pty_shell.rereads == 1 and "differs from the guest's md5sum" in caplog.text
    bad["left"] = 3
    with pytest.raises(GuestError, match="never as the guest's md5sum"):
        pty_shell.read_file(str(record), 5)
