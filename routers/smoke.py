"""Boot a built guest under QEMU and observe its console markers (``python -m routers check``).

Used by the integration tests and as a quick check after ``make setup``.  QEMU is started with
an argv (never a shell), its console goes to a file that is read as it grows (readiness is
observed, never slept for), and it is always stopped by PID.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from routers.errors import RouterError
from routers.guest import BOOT_MARKER, FAIL_MARKER, READY_MARKER, GuestImage, guest_image, kernel_cmdline

QEMU = "qemu-system-x86_64"
#: The router port addresses of the testbed (docs/testbed.md): eth0 left, eth1 right.
IF0 = ["198.18.1.1/24", "2001:2:0:1::1/64"]
IF1 = ["198.18.2.1/24", "2001:2:0:2::1/64"]
#: Two NICs on isolated user-mode networks (no root needed, nothing reachable).
USER_NETDEVS = ("user,id=n0,restrict=on", "user,id=n1,restrict=on")
POLL_S = 0.02


class GuestBootError(RouterError):
    """The guest printed VRMIG-FAIL, QEMU exited, or READY did not appear in time."""


@dataclass(frozen=True)
class Booted:
    """A guest that printed its READY line."""

    pid: int
    ready_line: str
    seconds: float  # from starting QEMU to seeing the READY line
    console: Path


def qemu_argv(
    image: GuestImage,
    append: str,
    console: Path,
    netdevs: Sequence[str] = USER_NETDEVS,
    nic_model: str = "virtio-net-pci",
    mem_mib: int = 256,
    accel: str = "tcg",
    macs: Sequence[str] | None = None,
) -> list[str]:
    """QEMU argv close to the orchestrator's: q35, no default devices, serial console to a
    file, one ``nic_model`` NIC per netdev (``id=`` taken from the netdev spec)."""
    argv = [
        QEMU, "-machine", "q35", "-accel", accel, "-cpu", "host" if accel == "kvm" else "qemu64",
        "-m", str(mem_mib), "-smp", "1", "-nodefaults", "-no-user-config", "-display", "none", "-vga", "none",
        "-kernel", str(image.kernel), "-initrd", str(image.initrd), "-append", append,
        "-chardev", f"file,id=con,path={console}", "-serial", "chardev:con", "-no-reboot",
    ]  # fmt: skip
    for i, nd in enumerate(netdevs):
        nid = next(kv.split("=", 1)[1] for kv in nd.split(",") if kv.startswith("id="))
        dev = f"{nic_model},netdev={nid},romfile="
        if macs:
            dev += f",mac={macs[i]}"
        argv += ["-netdev", nd, "-device", dev]
    return argv


def wait_for_ready(console: Path, proc: subprocess.Popen[bytes], timeout_s: float) -> str:
    """Read ``console`` as it grows until the READY line; return it.

    Raises :class:`GuestBootError` on a FAIL line, if QEMU exits, or after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    offset = 0
    pending = b""
    while True:
        with contextlib.suppress(FileNotFoundError), open(console, "rb") as fh:
            fh.seek(offset)
            chunk = fh.read()
            offset += len(chunk)
            pending += chunk
        *lines, pending = pending.split(b"\n")
        # a READY/FAIL line may still lack its newline: also look at the unfinished tail
        for raw in [*lines, pending]:
            line = raw.decode("utf-8", "replace").strip()
            if line.startswith(READY_MARKER + " ") and " version=" in line:
                return line
            if line.startswith(FAIL_MARKER):
                raise GuestBootError(f"guest failed: {line}")
        if proc.poll() is not None:
            raise GuestBootError(f"QEMU exited (status {proc.returncode}) before {READY_MARKER}: {_tail(console)}")
        if time.monotonic() > deadline:
            seen = BOOT_MARKER in _tail(console, 100_000)
            raise GuestBootError(
                f"no {READY_MARKER} within {timeout_s:.0f} s ({'after' if seen else 'not even'} {BOOT_MARKER}): "
                f"{_tail(console)}"
            )
        time.sleep(POLL_S)


def _tail(console: Path, n: int = 600) -> str:
    try:
        return console.read_bytes()[-n:].decode("utf-8", "replace").replace("\n", " | ")
    except OSError:
        return "(no console output)"


def stop(proc: subprocess.Popen[bytes], timeout_s: float = 5.0) -> None:
    """Terminate QEMU by PID (SIGKILL if it does not exit in time) and reap it."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def running_guest(
    profile: str,
    console: Path,
    *,
    cache: Path | None = None,
    netdevs: Sequence[str] = USER_NETDEVS,
    nic_model: str = "virtio-net-pci",
    netns: str | None = None,
    timeout_s: float = 60.0,
    extra_args: Sequence[str] | None = None,
    macs: Sequence[str] | None = None,
) -> Iterator[Booted]:
    """Boot ``profile``'s guest, wait for READY, yield, then stop QEMU (always, by PID).

    ``netns``: run QEMU inside this network namespace (``ip netns exec``, which execs QEMU so
    the PID is QEMU's)."""
    if shutil.which(QEMU) is None:
        raise GuestBootError(f"{QEMU} not found: install the Debian package qemu-system-x86 (`make setup`)")
    image = guest_image(profile, cache)
    append = kernel_cmdline(profile, IF0, IF1) if extra_args is None else kernel_cmdline(profile, IF0, IF1, extra_args)
    argv = qemu_argv(image, append, console, netdevs, nic_model, macs=macs)
    if netns:
        argv = ["ip", "netns", "exec", netns, *argv]
    console.unlink(missing_ok=True)
    with open(console.with_suffix(".qemu.log"), "wb") as err:
        t0 = time.monotonic()
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=err, stderr=err, start_new_session=True)
    try:
        line = wait_for_ready(console, proc, timeout_s)
        yield Booted(pid=proc.pid, ready_line=line, seconds=time.monotonic() - t0, console=console)
    finally:
        stop(proc)


def check(profile: str, cache: Path | None = None, timeout_s: float = 60.0) -> Booted:
    """Boot the guest on two isolated user-mode NICs and return once READY (QEMU stopped)."""
    with tempfile.TemporaryDirectory(prefix="vrmig-routers-check-") as tmp:
        console = Path(tmp) / "console.log"
        with running_guest(profile, console, cache=cache, timeout_s=timeout_s) as booted:
            return booted
