"""core.sighold.Teardown: the run's resources as nested ``with`` blocks (real objects, no QEMU)."""

from __future__ import annotations

import signal

import pytest

from migrate.core.errors import Interrupted
from migrate.core.sighold import Abort, Teardown


class Resource:
    def __init__(self, name: str, log: list[str], fail: bool = False) -> None:
        self.name, self.log, self.fail = name, log, fail

    def __enter__(self) -> Resource:
        self.log.append(f"enter {self.name}")
        return self

    def __exit__(self, *exc: object) -> None:
        self.log.append(f"exit {self.name}")
        if self.fail:
            raise RuntimeError(f"{self.name} would not stop")


def test_resources_leave_in_reverse_order_and_a_failing_step_is_recorded():
    log: list[str] = []
    td = Teardown()
    with td.step("close a", Resource("a", log)), td.step("stop b", Resource("b", log, fail=True)):
        with td.step("stop c", Resource("c", log)):
            log.append("body")
    assert log == ["enter a", "enter b", "enter c", "body", "exit c", "exit b", "exit a"]
    assert td.problems == ["stop b: RuntimeError: b would not stop"]


def test_the_blocks_own_error_survives_a_failing_teardown_and_abort_is_disarmed():
    log: list[str] = []
    abort = Abort()
    td = Teardown(abort)
    with pytest.raises(Interrupted, match="SIGTERM"):
        with td.step("stop x", Resource("x", log, fail=True)):
            assert abort.armed
            abort.handler(signal.SIGTERM, None)
    assert not abort.armed and abort()
    assert log == ["enter x", "exit x"] and len(td.problems) == 1


def test_a_resource_that_fails_to_enter_is_not_left():
    class Refuses(Resource):
        def __enter__(self) -> Resource:
            raise OSError("no")

    log: list[str] = []
    td = Teardown()
    with pytest.raises(OSError):
        with td.step("a", Resource("a", log)), td.step("b", Refuses("b", log)):
            log.append("body")
    assert log == ["enter a", "exit a"]
