"""The router guest boots under QEMU (TCG, 256 MiB, 1 vCPU) and prints its READY line.

Needs root, qemu-system-x86_64 and the built image (`make setup`); skips with the reason
otherwise.  The serial console is read as it grows (no fixed sleeps); QEMU is killed by PID."""

import os

import pytest

from tests.integration.conftest import missing_from_setup, require_root_and

pytestmark = pytest.mark.integration

READY_TIMEOUT_S = 60.0


def _image_or_skip(profile: str):
    from routers.errors import RouterError
    from routers.guest import guest_image

    try:
        return guest_image(profile)
    except RouterError as err:
        missing_from_setup(err)


@pytest.mark.parametrize("profile", ["frr", "bird"])
def test_guest_boots_to_ready(profile, tmp_path):
    require_root_and("qemu-system-x86_64")
    image = _image_or_skip(profile)
    from routers import smoke
    from routers.guest import BOOT_MARKER, FAIL_MARKER, READY_MARKER, parse_ready

    console = tmp_path / "console.log"
    with smoke.running_guest(profile, console, timeout_s=READY_TIMEOUT_S) as booted:
        pid = booted.pid
        assert booted.seconds < READY_TIMEOUT_S
    # QEMU is gone (stopped by PID on leaving the block)
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)

    lines = console.read_text(errors="replace").splitlines()
    ready = [ln.strip() for ln in lines if ln.strip().startswith(READY_MARKER)]
    assert len(ready) == 1, ready
    fields = parse_ready(ready[0])
    assert fields is not None and fields["router"] == profile
    assert fields["version"] == image.manifest["router"]["upstream_version"]
    boot = next(i for i, ln in enumerate(lines) if ln.startswith(BOOT_MARKER))
    assert boot < next(i for i, ln in enumerate(lines) if ln.strip().startswith(READY_MARKER))
    assert not any(ln.startswith(FAIL_MARKER) for ln in lines)
