"""The libvirt Python binding, against which the unit tests check the suite's copies of its names."""

from __future__ import annotations

import pytest


def assert_binding_has(values: dict[str, int | str]) -> None:
    """Skip without libvirt-python; else assert that each name of the binding has the value given for it."""
    libvirt = pytest.importorskip("libvirt", reason="libvirt-python not installed (pip install -e '.[libvirt]')")
    for name, value in values.items():
        assert getattr(libvirt, name) == value, name
