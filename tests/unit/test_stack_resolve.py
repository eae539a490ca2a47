"""migrate.drivers.stack_resolve: a stack component's errors as the suite's."""

from __future__ import annotations

import pytest

from migrate.core.errors import ConfigError, DependencyError
from migrate.core.privapt import PrivAptError
from migrate.core.stack import StackError
from migrate.drivers.stack_resolve import resolve_stack


def _raise(err: Exception) -> None:
    raise err


def test_resolved_value_is_returned() -> None:
    assert resolve_stack("QEMU", "10.0", lambda: "build") == "build"


@pytest.mark.parametrize(
    ("spec", "err", "kind", "text"),
    [
        ("system", StackError("no host qemu"), DependencyError, "no host qemu"),
        ("10.0", StackError("not served"), ConfigError, "not served"),
        ("10.0", PrivAptError("offline"), DependencyError, "LIBVIRT=10.0: fetching it failed: offline"),
    ],
)
def test_errors_are_mapped(spec: str, err: Exception, kind: type[Exception], text: str) -> None:
    with pytest.raises(kind) as got:
        resolve_stack("LIBVIRT", spec, lambda: _raise(err))
    assert str(got.value) == text
    assert got.value.__cause__ is None and got.value.__suppress_context__
