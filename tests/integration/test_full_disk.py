"""A results directory on a full (tiny) file system: one clear line, exit != 0, nothing created."""

import os
import subprocess
import sys

import pytest

from tests.integration.conftest import require_root_and

pytestmark = pytest.mark.integration


def test_full_disk_is_refused_before_anything_starts(tmp_path):
    require_root_and("mount")
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)], check=True)
    try:
        before = set(os.listdir("/run/netns")) if os.path.isdir("/run/netns") else set()
        res = subprocess.run(
            [sys.executable, "-m", "migrate", "run", "--rate", "10M", "--results", str(mnt / "results")],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        lines = res.stderr.strip().splitlines()
        assert res.returncode == 2, res.stderr
        assert len(lines) == 1 and "MiB free" in lines[0], lines
        assert not (mnt / "results").exists()
        after = set(os.listdir("/run/netns")) if os.path.isdir("/run/netns") else set()
        assert after <= before
    finally:
        subprocess.run(["umount", str(mnt)], check=True)
