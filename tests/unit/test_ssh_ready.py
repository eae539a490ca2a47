"""migrate.labs.ssh_ready.wait_ssh: the poll loop the emulated labs wait for a host's SSH with."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator

import pytest

from migrate.core.errors import TestbedError
from migrate.labs.ssh_ready import wait_ssh

FAILING_SSH = ["sh", "-c", "echo refused >&2; exit 255", "ssh"]


@pytest.fixture
def running() -> Iterator[subprocess.Popen[bytes]]:
    p = subprocess.Popen(["sleep", "30"])
    yield p
    p.kill()
    p.wait()


def _msg(what: str) -> Callable[[object], str]:
    """A message maker: ``what: <its argument>``."""
    return lambda x: f"{what}: {x}"


def test_returns_once_up_and_ssh_succeed(running: subprocess.Popen[bytes]) -> None:
    answers = iter([False, False, True])
    calls: list[bool] = []

    def up() -> bool:
        calls.append(True)
        return next(answers, True)

    took = wait_ssh(running, ["env"], 5.0, 0.01, up, _msg("exited"), _msg("timeout"))
    assert took >= 0 and len(calls) == 3


def test_an_exited_process_is_reported() -> None:
    gone = subprocess.Popen(["sh", "-c", "exit 3"])
    gone.wait()
    with pytest.raises(TestbedError, match=r"^exited: 3$"):
        wait_ssh(gone, ["env"], 5.0, 0.01, lambda: True, _msg("exited"), _msg("timeout"))


def test_time_out_names_the_last_ssh_error(running: subprocess.Popen[bytes]) -> None:
    with pytest.raises(TestbedError, match=r"^timeout: refused$"):
        wait_ssh(running, FAILING_SSH, 0.2, 0.01, lambda: True, _msg("exited"), _msg("timeout"))


def test_time_out_before_up_has_no_ssh_error(running: subprocess.Popen[bytes]) -> None:
    with pytest.raises(TestbedError, match=r"^timeout: $"):
        wait_ssh(running, FAILING_SSH, 0.1, 0.01, lambda: False, _msg("exited"), _msg("timeout"))


def test_up_may_raise(running: subprocess.Popen[bytes]) -> None:
    def up() -> bool:
        raise TestbedError("dom0 failed")

    with pytest.raises(TestbedError, match="dom0 failed"):
        wait_ssh(running, ["env"], 5.0, 0.01, up, _msg("exited"), _msg("timeout"))
