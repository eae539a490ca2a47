"""Exceptions of the router component; every message says what to do about it."""

from __future__ import annotations

from migrate.core.errors import ConfigError, DependencyError, VrmigError


class RouterError(VrmigError):
    """Base class of every error raised by :mod:`routers`."""


class UnknownProfileError(RouterError):
    """The requested router profile does not exist."""


class ProfileUnavailableError(RouterError, DependencyError):
    """The profile exists but cannot be built or used on this machine (e.g. XORP not installed)."""


class NotBuiltError(RouterError, DependencyError):
    """The guest image of a profile has not been built (or is damaged)."""


class BuildError(RouterError):
    """Building the guest image failed (download, extraction, missing file or library)."""


class TooLittleMemoryError(RouterError, ConfigError):
    """MEM is below what the router image needs to boot (exit 2: the parameter is the fault)."""


class ProfileFileError(RouterError, ConfigError):
    """A router profile file (``ROUTER=path/to/router.toml``) or its config template is invalid
    (exit 2: the file is the fault; the message names the file, the field and what to do)."""


class RecipeError(RouterError, ConfigError):
    """A disk image recipe (``routers/recipes/<name>/recipe.toml``) is missing or invalid (exit 2)."""


class SeedError(RouterError, ConfigError):
    """The content given for a NoCloud seed would be ignored by cloud-init (exit 2)."""
