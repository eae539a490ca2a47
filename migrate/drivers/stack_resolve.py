"""The suite's errors for a stack component a driver resolves (migrate.core.stack): a bad or
unserved release is a ConfigError (exit 2), a missing host build or a failed fetch a
DependencyError."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from migrate.core.errors import ConfigError, DependencyError
from migrate.core.privapt import PrivAptError
from migrate.core.stack import StackError

T = TypeVar("T")


def resolve_stack(variable: str, spec: str, resolve: Callable[[], T]) -> T:
    """``resolve()`` for ``variable=spec`` with StackError and PrivAptError mapped to the suite's errors."""
    try:
        return resolve()
    except StackError as err:
        if spec == "system":
            raise DependencyError(str(err)) from None
        raise ConfigError(str(err)) from None
    except PrivAptError as err:
        raise DependencyError(f"{variable}={spec}: fetching it failed: {err}") from None
