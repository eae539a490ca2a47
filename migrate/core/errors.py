"""Exception hierarchy: every error carries a message a user can act on."""

from __future__ import annotations


class VrmigError(Exception):
    """Base class; ``str(err)`` is the one-line message shown to the user."""

    exit_code = 1


class ConfigError(VrmigError):
    """A user-supplied parameter is invalid (exit 2, nothing started)."""

    exit_code = 2


class DependencyError(VrmigError):
    """A required tool, image or privilege is missing; the message says how to fix it."""

    exit_code = 3


class TestbedError(VrmigError):
    """Building or tearing down the namespace testbed failed."""

    __test__ = False  # not a pytest test class


class GuestError(VrmigError):
    """The router guest did not start or did not become ready."""


class MigrationError(VrmigError):
    """The migration failed or timed out; recorded as ``status: failed``."""


class Interrupted(VrmigError):
    """SIGINT/SIGTERM arrived; the run is torn down and marked ``interrupted``."""

    exit_code = 130
