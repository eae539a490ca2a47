"""Configuring a router by typing on its serial console (a profile's ``[config] method = "console"``).

The router's first serial port is a QEMU ``socket`` chardev (server side, ``wait=off``) that also
writes everything the guest prints to the run's console log (``logfile=``), so the log is whole
even while nothing is connected.  The suite connects to the socket and holds a dialogue with the
console as an operator, or vrnetlab's launch scripts, would:

1. Wake the login prompt: a carriage return every ``WAKE_EVERY_S`` until the console prints
   ``login:`` (the guest may still be booting; a getty flushes what was typed before it ran).
2. Log in with the profile's ``login`` and, when the console asks, its ``password``; the login is
   done when the profile's ``prompt`` appears.  ``Login incorrect`` is an error at once.
3. Type the rendered template one line per command (blank lines are skipped: a template's
   comments are Jinja2's ``{# #}``); after each, wait for the end of its echo (a newline) and then
   for the prompt again, so no line is typed before the previous one has finished.  What the
   line printed in between is checked against the profile's ``errors`` (regular expressions, as
   vrnetlab's launch scripts look for a CLI's "% Invalid input"): a console cannot tell a command
   that failed from one that worked, so the profile says what failure looks like.

The dialogue itself is pexpect's (``pexpect.fdpexpect`` over the connected socket): its
``expect`` is the field's own tool for driving a terminal by its prompts.  What this module adds
is the suite's contract: every wait is bounded by one deadline and stops early when the router's
hypervisor process exits or the run is aborted, and a failure is one :class:`GuestError` line
naming the step, what was expected and the console's tail."""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from migrate.core.errors import GuestError
from migrate.drivers.readiness import TERMINAL_CONTROL

LOGIN_PROMPT = re.compile(r"login: ?$", re.MULTILINE)
PASSWORD_PROMPT = re.compile(r"[Pp]assword: ?$", re.MULTILINE)
LOGIN_FAILED = re.compile(r"Login incorrect")
WAKE_EVERY_S = 3.0  # a carriage return this often until the console shows its login prompt
STEP_S = 0.5  # how often a wait looks at the hypervisor process and the abort flag
CONNECT_POLL_S = 0.05
TAIL_CHARS = 300
ENTER = "\r"  # what a terminal sends for Enter (the tty's ICRNL makes it a newline)


@dataclass(frozen=True)
class ConsoleTyped:
    """What the dialogue did: the lines typed and how long the login and the typing took."""

    lines: int
    login_s: float
    typing_s: float

    def to_dict(self) -> dict[str, float | int]:
        """For the recorder's ``router-console-config`` action."""
        return {"lines": self.lines, "login_s": round(self.login_s, 3), "typing_s": round(self.typing_s, 3)}


def command_lines(text: str) -> list[str]:
    """The lines of a rendered console template to type: every non-blank line, right-stripped."""
    return [ln.rstrip() for ln in text.splitlines() if ln.strip()]


def connect(path: Path, timeout_s: float, alive: Callable[[], bool]) -> socket.socket:
    """A connection to the console socket ``path`` once QEMU has created it."""
    deadline = time.monotonic() + timeout_s
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(str(path))
            return sock
        except OSError as err:
            sock.close()
            if not alive():
                raise GuestError(
                    f"router console: QEMU exited before its console socket {path} took a connection"
                ) from None
            if time.monotonic() > deadline:
                raise GuestError(f"router console: cannot connect to {path} within {timeout_s:.0f} s: {err}") from None
        time.sleep(CONNECT_POLL_S)


class _Dialogue:
    """One pexpect session on the console socket, every wait bounded by one deadline."""

    def __init__(
        self, sock: socket.socket, deadline: float, alive: Callable[[], bool], abort: Callable[[], bool]
    ) -> None:
        from pexpect import fdpexpect

        self.child = fdpexpect.fdspawn(sock, encoding="utf-8", codec_errors="replace", timeout=STEP_S)
        self.deadline = deadline
        self.alive = alive
        self.abort = abort
        self.seen = ""  # everything read, for the error's tail

    def send(self, text: str) -> None:
        self.child.send(text)

    def expect(self, patterns: Sequence[re.Pattern[str] | str], step: str, wake: str | None = None) -> int:
        """Index of the first of ``patterns`` the console prints; GuestError naming ``step`` when
        the deadline passes, QEMU exits or the run is aborted.  ``wake``: typed every
        WAKE_EVERY_S while waiting."""
        import pexpect

        compiled = [p if isinstance(p, re.Pattern) else re.compile(re.escape(p)) for p in patterns]
        last_wake = time.monotonic()
        if wake is not None:
            self.send(wake)
        while True:
            try:
                i: int = self.child.expect(compiled, timeout=STEP_S)
                self.seen += (self.child.before or "") + (self.child.after or "")
                return i
            except pexpect.TIMEOUT:
                self.seen += self.child.before or ""
                self.child.before = ""
            except pexpect.EOF:
                self.seen += self.child.before or ""
                self._fail(step, "the console socket closed")
            now = time.monotonic()
            if not self.alive():
                self._fail(step, "the router's hypervisor process exited")
            if self.abort():
                self._fail(step, "aborted")
            if now > self.deadline:
                self._fail(step, "timed out")
            if wake is not None and now - last_wake >= WAKE_EVERY_S:
                self.send(wake)
                last_wake = now

    def _fail(self, step: str, why: str) -> None:
        raise GuestError(f"router console: {step}: {why}; console: {tail(self.seen) or '(nothing)'}")


def tail(seen: str, chars: int = TAIL_CHARS) -> str:
    """The console's last lines on one line, cleaned of terminal control, a line repeated in a
    row (the login prompt the wake-up typed again) given once with its count."""
    lines = [ln.strip() for ln in TERMINAL_CONTROL.sub("", seen).splitlines() if ln.strip()]
    runs: list[list[Any]] = []
    for ln in lines:
        if runs and runs[-1][0] == ln:
            runs[-1][1] += 1
        else:
            runs.append([ln, 1])
    text = " | ".join(ln if n == 1 else f"{ln} (x{n})" for ln, n in runs)
    return text[-chars:]


def type_config(
    sock: socket.socket,
    lines: Sequence[str],
    *,
    login: str,
    password: str | None,
    prompt: str,
    errors: Sequence[str] = (),
    timeout_s: float,
    alive: Callable[[], bool],
    abort: Callable[[], bool],
) -> ConsoleTyped:
    """Log in on the console connected by ``sock`` and type ``lines``, each after the previous
    one's prompt came back; all of it within ``timeout_s``.  A line whose output (between its
    echo and the next prompt) matches one of the regular expressions ``errors`` fails the
    configuration there, naming the line and that output."""
    start = time.monotonic()
    d = _Dialogue(sock, start + timeout_s, alive, abort)
    d.expect([LOGIN_PROMPT], "waiting for the login prompt", wake=ENTER)
    d.send(login + ENTER)
    step = f"logging in as {login}"
    prompt_re = re.compile(re.escape(prompt))
    if password is not None:
        d.expect([PASSWORD_PROMPT], f"{step} (password prompt)")
        d.send(password + ENTER)
    if d.expect([prompt_re, LOGIN_FAILED], f"{step} (shell prompt {prompt!r})") == 1:
        d._fail(step, "the console says 'Login incorrect': check [config] login and password")
    logged_in = time.monotonic()
    error_res = [re.compile(e) for e in errors]
    for n, line in enumerate(lines, 1):
        d.send(line + ENTER)
        what = f"line {n} of {len(lines)} ({line[:60]!r})"
        d.expect(["\n"], f"{what}: its echo")
        mark = len(d.seen)
        d.expect([prompt_re], f"{what}: the prompt {prompt!r} after it")
        output = TERMINAL_CONTROL.sub("", d.seen[mark:]).removesuffix(prompt)
        bad = next((e for e in error_res if e.search(output)), None)
        if bad is not None:
            d._fail(what, f"its output matches [config] errors {bad.pattern!r}")
    done = time.monotonic()
    return ConsoleTyped(lines=len(lines), login_s=logged_in - start, typing_s=done - logged_in)
