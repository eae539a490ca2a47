"""Integration tests need root and the built tools; otherwise they skip with the reason."""

import os
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def require_root_and(*tools: str) -> None:
    """Skip unless running as root with every tool (binary name or repo-relative path) present."""
    if os.geteuid() != 0:
        pytest.skip("needs root (creates network namespaces)")
    for t in tools:
        if "/" in t:
            if not (REPO / t).exists():
                pytest.skip(f"{t} not built: run `make setup`")
        elif shutil.which(t) is None:
            pytest.skip(f"{t} not installed: run `make setup`")


@pytest.fixture
def no_leftovers():
    """Assert the test leaves no network namespace behind that it did not find."""
    before = set(os.listdir("/run/netns")) if os.path.isdir("/run/netns") else set()
    yield
    after = set(os.listdir("/run/netns")) if os.path.isdir("/run/netns") else set()
    assert after <= before, f"namespaces left behind: {sorted(after - before)}"
